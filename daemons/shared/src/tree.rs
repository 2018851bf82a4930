//! A folder's names and metadata at one moment: the walk hostexecd uses to
//! tell what a command saved, and chatd's file history to find what moved.
//! Bounded (entries and depth), it never follows a symbolic link (each
//! folder is opened with `O_NOFOLLOW` from its parent's descriptor, so a
//! folder swapped for a link is not entered), and it reads names and
//! metadata only.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::fcntl::OFlag;
use nix::sys::stat::{Mode, SFlag};

/// Entries a walk reads at most.
pub const MAX_ENTRIES: usize = 20_000;
/// Folders deep a walk goes at most.
pub const MAX_DEPTH: usize = 32;

/// What a name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    File,
    Dir,
    /// A link, socket, FIFO or device: listed, never opened.
    Other,
}

/// One name's metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub node: Node,
    pub size: i64,
    /// Seconds and nanoseconds.
    pub mtime: (i64, i64),
    pub ino: u64,
}

impl Entry {
    pub fn is_dir(&self) -> bool {
        self.node == Node::Dir
    }

    /// The modification time in nanoseconds, as one number to store.
    pub fn mtime_ns(&self) -> i64 {
        self.mtime
            .0
            .saturating_mul(1_000_000_000)
            .saturating_add(self.mtime.1)
    }
}

/// The names and metadata under a folder at one moment, by path relative to
/// it (`a/b.txt`, `/` between parts).
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    pub entries: BTreeMap<String, Entry>,
    /// The walk stopped at a bound: what it did not see is not in it.
    pub partial: bool,
}

/// How far a walk goes, and what it leaves out.
#[derive(Debug, Clone, Copy)]
pub struct Bounds<'a> {
    pub max_entries: usize,
    pub max_depth: usize,
    /// Names at the top of the root never walked (chatd's own `.tandem`).
    pub skip_top: &'a [&'a [u8]],
}

impl Default for Bounds<'_> {
    fn default() -> Self {
        Bounds {
            max_entries: MAX_ENTRIES,
            max_depth: MAX_DEPTH,
            skip_top: &[],
        }
    }
}

/// Walks `root` (a missing root, or one that is a link, is an empty snapshot).
pub fn snapshot(root: &Path, bounds: Bounds) -> Snapshot {
    let mut snap = Snapshot::default();
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let Ok(fd) = nix::fcntl::open(root, flags, Mode::empty()) else {
        return snap;
    };
    walk(&fd, "", 0, bounds, &mut snap);
    snap
}

fn walk(dir: &OwnedFd, prefix: &str, depth: usize, bounds: Bounds, snap: &mut Snapshot) {
    let Ok(copy) = dir.try_clone() else {
        return;
    };
    let Ok(mut listing) = nix::dir::Dir::from_fd(copy) else {
        return;
    };
    let mut names: Vec<Vec<u8>> = Vec::new();
    for entry in listing.iter().flatten() {
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." || (depth == 0 && bounds.skip_top.contains(&name)) {
            continue;
        }
        names.push(name.to_vec());
    }
    names.sort();
    for name in names {
        if snap.entries.len() >= bounds.max_entries {
            snap.partial = true;
            return;
        }
        let os = OsStr::from_bytes(&name);
        let Ok(st) =
            nix::sys::stat::fstatat(dir.as_fd(), os, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
        else {
            continue;
        };
        let node = match SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT {
            SFlag::S_IFDIR => Node::Dir,
            SFlag::S_IFREG => Node::File,
            _ => Node::Other,
        };
        let path = format!("{prefix}{}", String::from_utf8_lossy(&name));
        snap.entries.insert(
            path.clone(),
            Entry {
                node,
                size: st.st_size,
                mtime: (st.st_mtime, st.st_mtime_nsec),
                ino: st.st_ino,
            },
        );
        if node == Node::Dir {
            if depth + 1 >= bounds.max_depth {
                snap.partial = true;
                continue;
            }
            let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            if let Ok(fd) = nix::fcntl::openat(dir.as_fd(), os, flags, Mode::empty()) {
                walk(&fd, &format!("{path}/"), depth + 1, bounds, snap);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_not_followed_and_walks_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("link")).unwrap();
        let snap = snapshot(dir.path(), Bounds::default());
        assert_eq!(snap.entries.keys().collect::<Vec<_>>(), vec!["link"]);
        assert_eq!(snap.entries["link"].node, Node::Other);
        // A root that is itself a link is not walked.
        assert!(snapshot(&dir.path().join("link"), Bounds::default())
            .entries
            .is_empty());
        for i in 0..10 {
            std::fs::write(dir.path().join(format!("n{i}")), "x").unwrap();
        }
        let few = Bounds {
            max_entries: 5,
            ..Bounds::default()
        };
        let snap = snapshot(dir.path(), few);
        assert!(snap.partial);
        assert_eq!(snap.entries.len(), 5);
        std::fs::create_dir_all(dir.path().join("a/b/c/d")).unwrap();
        let shallow = Bounds {
            max_depth: 2,
            ..Bounds::default()
        };
        let snap = snapshot(dir.path(), shallow);
        assert!(snap.partial);
        assert!(snap.entries.contains_key("a/b"));
        assert!(!snap.entries.contains_key("a/b/c"));
    }

    #[test]
    fn top_names_asked_to_be_skipped_are_skipped_only_at_the_top() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".tandem/outputs")).unwrap();
        std::fs::create_dir_all(dir.path().join("deep/.tandem")).unwrap();
        std::fs::write(dir.path().join("f"), "x").unwrap();
        let bounds = Bounds {
            skip_top: &[b".tandem"],
            ..Bounds::default()
        };
        let snap = snapshot(dir.path(), bounds);
        assert_eq!(
            snap.entries.keys().collect::<Vec<_>>(),
            vec!["deep", "deep/.tandem", "f"]
        );
        assert_eq!(snap.entries["f"].node, Node::File);
        assert_eq!(snap.entries["f"].size, 1);
    }
}
