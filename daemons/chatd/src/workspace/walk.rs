//! Walks of a folder (list_files, grep): every entry found without following
//! a link or entering `.git`, sorted, bounded in count and depth.

use std::ffi::CString;
use std::os::fd::OwnedFd;

use super::error::ToolError;
use super::{size_of, EntryKind, RelPath, Workspace, MAX_DEPTH, TANDEM_DIR};
use nix::dir::Dir;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{fstatat, Mode};

/// One entry found by a walk; `path` is relative to the workspace root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: String,
    pub kind: EntryKind,
    pub size: u64,
}

/// What a walk found, sorted by path.
#[derive(Debug, Default)]
pub struct Walk {
    pub entries: Vec<Entry>,
    /// The entry bound was reached: there is more than `entries` shows.
    pub stopped: bool,
    /// Folders left out because they were nested too deep.
    pub too_deep: usize,
}

impl Workspace {
    /// Lists everything under the folder `path` (`.` for the whole workspace),
    /// sorted by path, never following a link or entering `.git`; stops after
    /// `limit` entries.
    pub fn walk(&self, path: &str, limit: usize) -> Result<Walk, ToolError> {
        let rel = self.resolve(path)?;
        let dir = self.open_folder(&rel)?;
        let mut walk = Walk::default();
        let prefix = if rel.is_root() {
            String::new()
        } else {
            rel.to_string()
        };
        walk_dir(dir, &prefix, 0, limit, &mut walk);
        // The whole workspace holds the agent's folder at `folder/` too, in
        // place of anything of that name in the chat's own folder.
        if rel.is_root() && self.mount.is_some() {
            let mount = crate::agent_folder::MOUNT;
            let inside = format!("{mount}/");
            walk.entries
                .retain(|e| e.path != mount && !e.path.starts_with(&inside));
            let folder = RelPath {
                parts: vec![mount.to_string()],
            };
            if let Ok(fd) = self.open_folder(&folder) {
                walk.entries.push(Entry {
                    path: mount.to_string(),
                    kind: EntryKind::Dir,
                    size: 0,
                });
                walk_dir(fd, mount, 1, limit, &mut walk);
            }
        }
        walk.entries.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(walk)
    }
}

fn walk_dir(fd: OwnedFd, prefix: &str, depth: usize, limit: usize, walk: &mut Walk) {
    let Ok(mut dir) = Dir::from_fd(fd) else {
        return;
    };
    let mut names: Vec<CString> = Vec::new();
    for entry in dir.iter() {
        let Ok(entry) = entry else { break };
        let name = entry.file_name();
        let bytes = name.to_bytes();
        if bytes == b"." || bytes == b".." || bytes == b".git" {
            continue;
        }
        if prefix.is_empty() && bytes == TANDEM_DIR.as_bytes() {
            continue;
        }
        names.push(name.to_owned());
        // A huge folder is not read past the bound.
        if walk.entries.len() + names.len() > limit {
            break;
        }
    }
    names.sort();
    for name in names {
        if walk.entries.len() >= limit {
            walk.stopped = true;
            return;
        }
        // Gone since the listing, or unreadable: left out.
        let Ok(st) = fstatat(&dir, name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW) else {
            continue;
        };
        let kind = EntryKind::of(&st);
        let shown = name.to_string_lossy();
        let path = if prefix.is_empty() {
            shown.into_owned()
        } else {
            format!("{prefix}/{shown}")
        };
        walk.entries.push(Entry {
            path: path.clone(),
            kind,
            size: size_of(&st),
        });
        if kind != EntryKind::Dir {
            continue;
        }
        if depth + 1 >= MAX_DEPTH {
            walk.too_deep += 1;
            continue;
        }
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        // Swapped for a link since the look: O_NOFOLLOW refuses it and it is skipped.
        if let Ok(child) = openat(&dir, name.as_c_str(), flags, Mode::empty()) {
            walk_dir(child, &path, depth + 1, limit, walk);
        }
        if walk.stopped {
            return;
        }
    }
}
