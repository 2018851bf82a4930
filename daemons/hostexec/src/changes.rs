//! What a command saved: the chat's workspace is walked before and after
//! the call, and the two compared (chatd's own `.tandem/` folder in it is
//! left out: its tools keep their outputs there), by the shared bounded
//! walk that never follows a link (`tandem_shared::tree`).

use std::path::Path;

use serde::Serialize;
use tandem_shared::tree::{self, Bounds, Entry};

pub use tandem_shared::tree::Snapshot;

/// Paths listed at most in a call's changes.
pub const MAX_LISTED: usize = 50;
/// chatd's folder at the top of a workspace, never listed.
pub const CHATD_OWN: &[u8] = b".tandem";

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

/// Walks `root` (a missing root is an empty snapshot), chatd's folder left out.
pub fn snapshot(root: &Path) -> Snapshot {
    tree::snapshot(
        root,
        Bounds {
            skip_top: &[CHATD_OWN],
            ..Bounds::default()
        },
    )
}

/// What changed from `before` to `after`.
pub fn diff(before: &Snapshot, after: &Snapshot) -> Changes {
    let mut created = Vec::new();
    let mut changed = Vec::new();
    let mut deleted = Vec::new();
    let shown = |path: &str, e: &Entry| {
        if e.is_dir() {
            format!("{path}/")
        } else {
            path.to_string()
        }
    };
    for (path, now) in &after.entries {
        match before.entries.get(path) {
            None => created.push(shown(path, now)),
            Some(then) if then.is_dir() != now.is_dir() => changed.push(shown(path, now)),
            Some(then) if !now.is_dir() && (then.size != now.size || then.mtime != now.mtime) => {
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
}
