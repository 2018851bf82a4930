//! What a command saved: the chat's workspace is walked before and after
//! the call, and the two compared (chatd's own `.tandem/` folder in it is
//! left out: its tools keep their outputs there). The walk is bounded (entries and
//! depth), never follows a symbolic link (each folder is opened with
//! `O_NOFOLLOW` from its parent's descriptor, so a folder swapped for a link
//! is not entered), and reads names and metadata only.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::fcntl::OFlag;
use nix::sys::stat::{Mode, SFlag};
use serde::Serialize;

/// Entries a walk reads at most.
pub const MAX_ENTRIES: usize = 20_000;
/// Folders deep a walk goes at most.
pub const MAX_DEPTH: usize = 32;
/// Paths listed at most in a call's changes.
pub const MAX_LISTED: usize = 50;
/// chatd's folder at the top of a workspace, never listed.
pub const CHATD_OWN: &[u8] = b".tandem";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    dir: bool,
    size: i64,
    mtime: (i64, i64),
}

/// The names and metadata under a folder at one moment.
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    entries: BTreeMap<String, Entry>,
    /// The walk stopped at a bound: what it did not see is not reported.
    pub partial: bool,
}

/// The files created, changed (size or mtime) and deleted between two
/// snapshots; folders are listed with a trailing `/` when created or
/// deleted. At most [`MAX_LISTED`] paths in all; `more` counts the rest.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Changes {
    pub created: Vec<String>,
    pub changed: Vec<String>,
    pub deleted: Vec<String>,
    pub more: usize,
    /// A walk stopped at its bound (20,000 entries, 32 folders deep).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
}

/// Walks `root` (a missing root is an empty snapshot).
pub fn snapshot(root: &Path) -> Snapshot {
    snapshot_bounded(root, MAX_ENTRIES, MAX_DEPTH)
}

pub fn snapshot_bounded(root: &Path, max_entries: usize, max_depth: usize) -> Snapshot {
    let mut snap = Snapshot::default();
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let Ok(fd) = nix::fcntl::open(root, flags, Mode::empty()) else {
        return snap;
    };
    walk(&fd, "", 0, max_entries, max_depth, &mut snap);
    snap
}

fn walk(
    dir: &OwnedFd,
    prefix: &str,
    depth: usize,
    max: usize,
    max_depth: usize,
    snap: &mut Snapshot,
) {
    let Ok(copy) = dir.try_clone() else {
        return;
    };
    let Ok(mut listing) = nix::dir::Dir::from_fd(copy) else {
        return;
    };
    let mut names: Vec<Vec<u8>> = Vec::new();
    for entry in listing.iter().flatten() {
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." || (depth == 0 && name == CHATD_OWN) {
            continue;
        }
        names.push(name.to_vec());
    }
    names.sort();
    for name in names {
        if snap.entries.len() >= max {
            snap.partial = true;
            return;
        }
        let os = OsStr::from_bytes(&name);
        let Ok(st) =
            nix::sys::stat::fstatat(dir.as_fd(), os, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
        else {
            continue;
        };
        let is_dir = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR;
        let path = format!("{prefix}{}", String::from_utf8_lossy(&name));
        snap.entries.insert(
            path.clone(),
            Entry {
                dir: is_dir,
                size: st.st_size,
                mtime: (st.st_mtime, st.st_mtime_nsec),
            },
        );
        if is_dir {
            if depth + 1 >= max_depth {
                snap.partial = true;
                continue;
            }
            let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            if let Ok(fd) = nix::fcntl::openat(dir.as_fd(), os, flags, Mode::empty()) {
                walk(&fd, &format!("{path}/"), depth + 1, max, max_depth, snap);
            }
        }
    }
}

/// What changed from `before` to `after`.
pub fn diff(before: &Snapshot, after: &Snapshot) -> Changes {
    let mut created = Vec::new();
    let mut changed = Vec::new();
    let mut deleted = Vec::new();
    let shown = |path: &str, e: &Entry| {
        if e.dir {
            format!("{path}/")
        } else {
            path.to_string()
        }
    };
    for (path, now) in &after.entries {
        match before.entries.get(path) {
            None => created.push(shown(path, now)),
            Some(then) if then.dir != now.dir => changed.push(shown(path, now)),
            Some(then) if !now.dir && (then.size != now.size || then.mtime != now.mtime) => {
                changed.push(path.clone())
            }
            Some(_) => {}
        }
    }
    for (path, then) in &before.entries {
        if !after.entries.contains_key(path) {
            deleted.push(shown(path, then));
        }
    }
    let total = created.len() + changed.len() + deleted.len();
    let mut room = MAX_LISTED;
    for list in [&mut created, &mut changed, &mut deleted] {
        list.truncate(room);
        room -= list.len();
    }
    let listed = created.len() + changed.len() + deleted.len();
    Changes {
        created,
        changed,
        deleted,
        more: total - listed,
        partial: before.partial || after.partial,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_changed_and_deleted_files_are_listed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("keep.txt"), "same").unwrap();
        std::fs::write(root.join("grow.txt"), "a").unwrap();
        std::fs::write(root.join("gone.txt"), "x").unwrap();
        std::fs::create_dir_all(root.join("home/old")).unwrap();
        std::fs::create_dir_all(root.join(".tandem/outputs")).unwrap();
        let before = snapshot(root);
        std::fs::write(root.join(".tandem/outputs/call_1.txt"), "chatd's").unwrap();
        std::fs::write(root.join("grow.txt"), "abc").unwrap();
        std::fs::remove_file(root.join("gone.txt")).unwrap();
        std::fs::remove_dir(root.join("home/old")).unwrap();
        std::fs::create_dir_all(root.join("home/new")).unwrap();
        std::fs::write(root.join("home/new/file"), "n").unwrap();
        let after = snapshot(root);
        let c = diff(&before, &after);
        assert_eq!(c.created, vec!["home/new/", "home/new/file"]);
        assert_eq!(c.changed, vec!["grow.txt"]);
        assert_eq!(c.deleted, vec!["gone.txt", "home/old/"]);
        assert_eq!(c.more, 0);
        assert!(!c.partial);
        assert_eq!(diff(&after, &snapshot(root)), Changes::default());
    }

    #[test]
    fn a_changed_mtime_alone_counts() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "same").unwrap();
        let before = snapshot(dir.path());
        let f = std::fs::File::options().write(true).open(&file).unwrap();
        f.set_modified(std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1))
            .unwrap();
        assert_eq!(diff(&before, &snapshot(dir.path())).changed, vec!["f"]);
    }

    #[test]
    fn at_most_fifty_are_listed_and_the_rest_counted() {
        let dir = tempfile::tempdir().unwrap();
        let before = snapshot(dir.path());
        for i in 0..70 {
            std::fs::write(dir.path().join(format!("f{i:03}")), "x").unwrap();
        }
        let c = diff(&before, &snapshot(dir.path()));
        assert_eq!(c.created.len(), 50);
        assert_eq!(c.more, 20);
        assert_eq!(c.created[0], "f000");
    }

    #[test]
    fn links_are_not_followed_and_walks_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("link")).unwrap();
        let snap = snapshot(dir.path());
        assert_eq!(snap.entries.keys().collect::<Vec<_>>(), vec!["link"]);
        assert!(!snap.entries["link"].dir);
        // A root that is itself a link is not walked.
        assert!(snapshot(&dir.path().join("link")).entries.is_empty());
        for i in 0..10 {
            std::fs::write(dir.path().join(format!("n{i}")), "x").unwrap();
        }
        let snap = snapshot_bounded(dir.path(), 5, MAX_DEPTH);
        assert!(snap.partial);
        assert_eq!(snap.entries.len(), 5);
        std::fs::create_dir_all(dir.path().join("a/b/c/d")).unwrap();
        let snap = snapshot_bounded(dir.path(), 100, 2);
        assert!(snap.partial);
        assert!(snap.entries.contains_key("a/b"));
        assert!(!snap.entries.contains_key("a/b/c"));
    }
}
