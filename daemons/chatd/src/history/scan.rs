//! What moved in a workspace since its manifest: stat first, and read only
//! the files whose size, mtime or inode changed (each read is also its copy
//! into the blobs). Blocking; bounded by entries walked and bytes read.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use tandem_shared::tree::{self, Bounds, Node};

use super::blobs::{Blobs, Sha};
use crate::words::FileOp;
use crate::workspace::{is_temp_name, Workspace, TANDEM_DIR};

/// Bytes read (and kept) by one scan at most.
pub const MAX_HASHED: u64 = 256 * 1024 * 1024;

/// A temp file untouched this long has no writer left: a write streams
/// into it continuously and an upload that sends nothing for 60 s is cut.
const STALE_TEMP: std::time::Duration = std::time::Duration::from_secs(600);

fn is_stale(entry: &tree::Entry) -> bool {
    let modified = std::time::UNIX_EPOCH
        + std::time::Duration::new(entry.mtime.0.max(0) as u64, entry.mtime.1.max(0) as u32);
    modified.elapsed().is_ok_and(|age| age > STALE_TEMP)
}

/// Which paths a scan looks at.
#[derive(Debug, Clone)]
pub enum Scope {
    /// The whole workspace but chatd's own `.tandem/` (a `bash` call).
    All,
    /// These paths, relative to the root (a file tool's, an undo's).
    Paths(Vec<String>),
}

/// What the manifest says of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub size: i64,
    pub mtime_ns: i64,
    pub ino: u64,
    /// `None`: too big to keep when it was seen.
    pub sha: Option<Sha>,
}

/// One path's change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub path: String,
    pub op: FileOp,
    /// A move's old path.
    pub from: Option<String>,
    pub before: Option<Sha>,
    pub after: Option<Sha>,
    /// Bytes after (or before, for a deletion).
    pub size: u64,
}

/// A scan's finding: the changes, the manifest's new rows (`None`: gone),
/// and what it could not look at.
#[derive(Debug, Default)]
pub struct Found {
    pub changes: Vec<Change>,
    pub manifest: Vec<(String, Option<Seen>)>,
    pub note: Option<String>,
}

/// How far one scan goes.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub entries: usize,
    pub hashed: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            entries: tree::MAX_ENTRIES,
            hashed: MAX_HASHED,
        }
    }
}

/// Compares `scope` of the workspace with `known` (the manifest's rows for
/// it), copying what changed into `blobs`.
pub fn scan(
    workspace: &Workspace,
    blobs: &Blobs,
    scope: &Scope,
    known: &HashMap<String, Seen>,
    limits: Limits,
) -> Found {
    let mut found = Found::default();
    let mut notes = Vec::new();
    // The files there now, by the walk or one look each.
    let mut now: BTreeMap<String, tree::Entry> = BTreeMap::new();
    let mut partial = false;
    match scope {
        Scope::All => {
            let bounds = Bounds {
                max_entries: limits.entries,
                skip_top: &[TANDEM_DIR.as_bytes()],
                ..Bounds::default()
            };
            let snap = tree::snapshot(workspace.root(), bounds);
            if snap.partial {
                partial = true;
                notes.push(format!(
                    "the scan stopped at {} entries or {} folders deep: files past that were not looked at",
                    limits.entries,
                    tree::MAX_DEPTH
                ));
            }
            for (path, entry) in snap.entries {
                if entry.node != Node::File {
                    continue;
                }
                // Another write's temp file is not a change of this call; one
                // nobody wrote to for a while is what a crash cut: removed.
                if is_temp_name(path.rsplit('/').next().unwrap_or(&path)) {
                    if is_stale(&entry) {
                        let _ = workspace.remove_file(&path);
                    }
                    continue;
                }
                now.insert(path, entry);
            }
        }
        Scope::Paths(paths) => {
            for path in paths {
                if let Ok(Some(entry)) = workspace.lstat(path) {
                    if entry.node == Node::File {
                        now.insert(path.clone(), entry);
                    }
                }
            }
        }
    }
    let mut looked: BTreeSet<&String> = now.keys().collect();
    match scope {
        Scope::All => looked.extend(known.keys()),
        Scope::Paths(paths) => looked.extend(paths.iter()),
    }
    let mut hashed = 0u64;
    let mut skipped = 0usize;
    for path in looked {
        let seen = known.get(path);
        let entry = match now.get(path) {
            Some(e) => Some(*e),
            // A partial walk did not see it: one look says whether it is gone.
            None if partial => workspace
                .lstat(path)
                .ok()
                .flatten()
                .filter(|e| e.node == Node::File),
            None => None,
        };
        match (entry, seen) {
            (None, None) => {}
            (None, Some(was)) => {
                found.changes.push(Change {
                    path: path.clone(),
                    op: FileOp::Deleted,
                    from: None,
                    before: was.sha.clone(),
                    after: None,
                    size: u64::try_from(was.size).unwrap_or(0),
                });
                found.manifest.push((path.clone(), None));
            }
            (Some(e), was) => {
                if was.is_some_and(|w| {
                    w.size == e.size && w.mtime_ns == e.mtime_ns() && w.ino == e.ino
                }) {
                    continue;
                }
                let room = limits.hashed.saturating_sub(hashed);
                // Too big for what is left of this scan's reading: not even
                // opened, so a large file costs each later scan one stat.
                if u64::try_from(e.size).unwrap_or(u64::MAX) > room {
                    skipped += 1;
                    continue;
                }
                let kept = workspace
                    .open_file(path)
                    .ok()
                    .and_then(|mut f| blobs.keep(&mut f.file, room).ok().flatten());
                let Some(kept) = kept else {
                    skipped += 1;
                    continue;
                };
                hashed += kept.size;
                let row = Seen {
                    size: e.size,
                    mtime_ns: e.mtime_ns(),
                    ino: e.ino,
                    sha: Some(kept.sha.clone()),
                };
                found.manifest.push((path.clone(), Some(row)));
                let before = was.and_then(|w| w.sha.clone());
                if was.is_some() && before.as_deref() == Some(kept.sha.as_str()) {
                    continue; // touched, the same bytes
                }
                found.changes.push(Change {
                    path: path.clone(),
                    op: if was.is_some() {
                        FileOp::Changed
                    } else {
                        FileOp::Created
                    },
                    from: None,
                    before,
                    after: Some(kept.sha),
                    size: kept.size,
                });
            }
        }
    }
    if skipped > 0 {
        notes.push(format!(
            "{skipped} file(s) were not kept: unreadable, or past the {} MiB a scan reads",
            limits.hashed / (1024 * 1024)
        ));
    }
    found.changes = pair_moves(std::mem::take(&mut found.changes));
    found.note = (!notes.is_empty()).then(|| notes.join("; "));
    found
}

/// A deletion and a creation of the same bytes in one set are one move.
fn pair_moves(changes: Vec<Change>) -> Vec<Change> {
    let mut deleted: HashMap<Sha, Vec<usize>> = HashMap::new();
    for (i, c) in changes.iter().enumerate() {
        if let (FileOp::Deleted, Some(sha)) = (c.op, &c.before) {
            deleted.entry(sha.clone()).or_default().push(i);
        }
    }
    let mut gone = BTreeSet::new();
    let mut out = Vec::with_capacity(changes.len());
    for c in &changes {
        if c.op != FileOp::Created {
            continue;
        }
        let from = c
            .after
            .as_ref()
            .and_then(|sha| deleted.get_mut(sha))
            .and_then(Vec::pop);
        match from {
            Some(i) => {
                gone.insert(i);
                out.push(Change {
                    op: FileOp::Moved,
                    from: Some(changes[i].path.clone()),
                    ..c.clone()
                });
            }
            None => out.push(c.clone()),
        }
    }
    for (i, c) in changes.into_iter().enumerate() {
        if c.op != FileOp::Created && !gone.contains(&i) {
            out.push(c);
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_past_the_reading_left_is_not_read_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(&dir.path().join("ws")).unwrap();
        let blobs = Blobs::new(dir.path().join("blobs"));
        ws.write_file("small.txt", b"small").unwrap();
        ws.write_file("big.bin", &vec![7u8; 4096]).unwrap();
        let limits = Limits {
            entries: 100,
            hashed: 1024,
        };
        let found = scan(&ws, &blobs, &Scope::All, &HashMap::new(), limits);
        let kept: Vec<&str> = found.changes.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(kept, ["small.txt"]);
        assert!(
            found
                .note
                .as_deref()
                .unwrap_or("")
                .contains("1 file(s) were not kept"),
            "{:?}",
            found.note
        );
        // One blob, the small file's; nothing of the big one stays.
        let kept_files: usize = std::fs::read_dir(dir.path().join("blobs"))
            .unwrap()
            .flatten()
            .map(|d| std::fs::read_dir(d.path()).map(|f| f.count()).unwrap_or(0))
            .sum();
        assert_eq!(kept_files, 1);
    }
}
