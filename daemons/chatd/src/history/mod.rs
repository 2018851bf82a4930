//! File history (docs/files.md): every change a chat makes to its files is
//! kept as a change set, so it can be listed, downloaded and undone.
//!
//! Each workspace has a manifest (`workspace_files`): what its last scan saw
//! of each file, and the blob of its bytes. A call that may change files is
//! scanned before (what differs was changed by someone else, and is kept as
//! an `outside` set) and after (what differs is the call's). A file tool's
//! scan looks at the paths it names; a `bash` call's at the whole workspace.
//! Undo writes the old bytes back and keeps that as a new set: nothing is
//! ever rewritten in place, and an undo can itself be undone.

pub mod blobs;
pub mod scan;
mod trash;
mod undo;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tandem_shared::http::ApiError;
use tandem_shared::sync::lock;

use crate::store::files::{self as stored, Author, NewSet};
use crate::store::Store;
use crate::words::FileOp;
use crate::workspace::Workspace;
use blobs::Blobs;
pub use scan::Scope;
use scan::{Change, Limits};
pub use trash::Purged;
pub use undo::{UndoTarget, Undone};

/// Paths a tool line's card lists at most.
pub const CARD_FILES: usize = 50;

/// The workspace a chat's files live in: its manifest's key and its folder.
#[derive(Debug, Clone)]
pub struct Place {
    pub key: String,
    pub root: PathBuf,
}

impl Place {
    pub fn of(folders: &crate::folders::Folders, conversation_id: &str) -> Place {
        Place {
            // A sub-agent's changes are its parent's (`Folders::home`).
            key: if folders.is_shared(conversation_id) {
                "shared".to_string()
            } else {
                folders.home(conversation_id)
            },
            root: folders.workspace(conversation_id),
        }
    }
}

/// A change set just kept.
#[derive(Debug, Clone)]
pub struct Kept {
    pub rev: i64,
    pub changes: Vec<Change>,
    pub note: Option<String>,
}

impl Kept {
    /// The card a tool line shows: `{kind: "files_change", rev, files, files_more}`.
    pub fn card(&self) -> Value {
        let files: Vec<Value> = self
            .changes
            .iter()
            .take(CARD_FILES)
            .map(|c| {
                let mut file = json!({"path": c.path, "op": c.op, "kind": file_kind(&c.path)});
                if let Some(from) = &c.from {
                    file["from"] = json!(from);
                }
                file
            })
            .collect();
        let mut card = json!({
            "kind": "files_change",
            "rev": self.rev,
            "files": files,
            "files_more": self.changes.len().saturating_sub(CARD_FILES),
        });
        if let Some(note) = &self.note {
            card["note"] = json!(note);
        }
        card
    }

    /// One line for the model: what the call changed, by rev.
    pub fn line(&self) -> String {
        let count = |op: FileOp| self.changes.iter().filter(|c| c.op == op).count();
        let mut parts = Vec::new();
        for (op, word) in [
            (FileOp::Created, "created"),
            (FileOp::Changed, "changed"),
            (FileOp::Deleted, "deleted"),
            (FileOp::Moved, "moved"),
        ] {
            let n = count(op);
            if n > 0 {
                parts.push(format!("{n} {word}"));
            }
        }
        let mut line = format!("[files: {} (change set {})", parts.join(", "), self.rev);
        if let Some(note) = &self.note {
            line.push_str("; ");
            line.push_str(note);
        }
        line.push(']');
        line
    }
}

/// The start of the line that tells the model, once a turn, where helpers go.
pub const NUDGE: &str = "[work/: ";

/// The nudge for a set that left a helper (a script, a log) outside `work/`:
/// never a refusal, a line in the call's result.
pub fn nudge(kept: &Kept) -> Option<String> {
    let stray = kept.changes.iter().find(|c| {
        c.op != crate::words::FileOp::Deleted
            && file_kind(&c.path) == "working"
            && !c.path.starts_with("work/")
    })?;
    Some(format!(
        "{NUDGE}`{}` looks like a script, log or draft; such files go in work/, \
         apart from the files the person asked for]",
        stray.path
    ))
}

/// `working` for scripts, logs and drafts (under `work/`, or a helper's
/// extension), `deliverable` for the rest.
pub fn file_kind(path: &str) -> &'static str {
    const HELPERS: &[&str] = &[
        "py", "sh", "bash", "log", "tmp", "pyc", "o", "out", "err", "pid", "lock", "bak", "swp",
    ];
    let ext = path.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
    if path.starts_with("work/") || ext.is_some_and(|e| HELPERS.contains(&e.as_str())) {
        "working"
    } else {
        "deliverable"
    }
}

/// The chat's workspace opened for a person's request (its error says why
/// in the API's shape).
pub fn open_workspace(root: &std::path::Path) -> Result<Workspace, ApiError> {
    Workspace::open(root).map_err(unopened)
}

/// A workspace that could not be opened, as the API answers it.
pub fn unopened(e: std::io::Error) -> ApiError {
    ApiError::internal(format!(
        "the chat's workspace could not be opened: {}",
        e.kind()
    ))
}

/// A workspace's lock, held by a file tool's call from its scan before to
/// its scan after.
pub struct Held(#[allow(dead_code)] tokio::sync::OwnedMutexGuard<()>);

/// chatd's file history: the blobs and one lock per workspace, held from a
/// scan's read of the manifest to its write.
pub struct FileHistory {
    store: Store,
    blobs: Blobs,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    limits: Limits,
    /// Held shared from a scan's first blob to its set's record, and alone
    /// by a purge from its look at the blobs in use to their removal, so a
    /// purge never removes a blob a scan of another workspace just counted
    /// on. Always taken after a workspace's lock, never before one.
    blob_gate: tokio::sync::RwLock<()>,
    /// Notified when a manifest changed (the search index reads on).
    changed: Arc<tokio::sync::Notify>,
}

impl FileHistory {
    pub fn new(store: Store, data_dir: &std::path::Path) -> FileHistory {
        FileHistory {
            store,
            blobs: Blobs::new(data_dir.join("blobs")),
            locks: Mutex::new(HashMap::new()),
            limits: Limits::default(),
            blob_gate: tokio::sync::RwLock::new(()),
            changed: Arc::new(tokio::sync::Notify::new()),
        }
    }

    pub fn blobs(&self) -> &Blobs {
        &self.blobs
    }

    /// Notified after each scan that changed a manifest.
    pub fn changed(&self) -> Arc<tokio::sync::Notify> {
        self.changed.clone()
    }

    /// Holds the workspace's lock for a file tool's whole call (its scans
    /// and its write), so an undo or an upload never lands in between.
    pub async fn hold(&self, place: &Place) -> Held {
        Held(self.lock(&place.key).await)
    }

    /// [`FileHistory::sync`] by a caller that [`FileHistory::hold`]s the
    /// workspace's lock already.
    pub async fn sync_under(
        &self,
        _held: &Held,
        place: &Place,
        scope: Scope,
        author: &Author,
    ) -> Result<Option<Kept>, ApiError> {
        self.sync_held(place, scope, author).await
    }

    async fn lock(&self, key: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let mutex = lock(&self.locks)
            .entry(key.to_string())
            .or_default()
            .clone();
        mutex.lock_owned().await
    }

    /// Brings the manifest of `scope` up to date and keeps what differs as
    /// one change set by `author`; `None` when nothing changed.
    pub async fn sync(
        &self,
        place: &Place,
        scope: Scope,
        author: &Author,
    ) -> Result<Option<Kept>, ApiError> {
        let _held = self.lock(&place.key).await;
        self.sync_held(place, scope, author).await
    }

    /// Lands files a person sent, under the workspace's lock, so no scan of
    /// a run going at the same time takes them for its own and nothing
    /// changes between the look and the move: first `watched` (a put's
    /// path) is brought up to date (a hand edit becomes its `outside` set)
    /// and its newest set looked up; then `plan` moves the files into place
    /// and names their paths; they are kept as one set by `author`, read up
    /// to `max_bytes` (an upload's own limit, past the bound of a scan).
    pub async fn land<T, F>(
        &self,
        place: &Place,
        author: &Author,
        max_bytes: u64,
        watched: Option<String>,
        plan: F,
    ) -> Result<(T, Option<Kept>), ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&Workspace, Option<i64>) -> Result<(Vec<String>, T), ApiError> + Send + 'static,
    {
        let _held = self.lock(&place.key).await;
        let mut newest = None;
        if let Some(path) = watched {
            let outside = Author {
                origin: crate::words::FileOrigin::Outside,
                run_id: None,
                call_id: None,
                undoes: Vec::new(),
                ..author.clone()
            };
            self.sync_held(place, Scope::Paths(vec![path.clone()]), &outside)
                .await?;
            let key = place.key.clone();
            newest = self
                .store
                .read(move |conn| stored::newest_rev_of(conn, &key, &path))
                .await?;
        }
        let root = place.root.clone();
        let (paths, out) = tokio::task::spawn_blocking(move || {
            let workspace = open_workspace(&root)?;
            plan(&workspace, newest)
        })
        .await
        .map_err(|_| ApiError::internal("placing the upload stopped"))??;
        let limits = Limits {
            hashed: max_bytes.max(self.limits.hashed),
            ..self.limits
        };
        let kept = self
            .sync_with(place, Scope::Paths(paths), author, limits)
            .await?;
        Ok((out, kept))
    }

    /// [`FileHistory::sync`] with the workspace's lock already held.
    async fn sync_held(
        &self,
        place: &Place,
        scope: Scope,
        author: &Author,
    ) -> Result<Option<Kept>, ApiError> {
        self.sync_with(place, scope, author, self.limits).await
    }

    async fn sync_with(
        &self,
        place: &Place,
        scope: Scope,
        author: &Author,
        limits: Limits,
    ) -> Result<Option<Kept>, ApiError> {
        let _blobs_stay = self.blob_gate.read().await;
        let key = place.key.clone();
        let paths = match &scope {
            Scope::All => None,
            Scope::Paths(p) => Some(p.clone()),
        };
        let known = self
            .store
            .read(move |conn| stored::manifest(conn, &key, paths.as_deref()))
            .await?;
        let (root, blobs) = (place.root.clone(), self.blobs.clone());
        let found = tokio::task::spawn_blocking(move || {
            let workspace = Workspace::open(&root)?;
            Ok::<_, std::io::Error>(scan::scan(&workspace, &blobs, &scope, &known, limits))
        })
        .await
        .map_err(|_| ApiError::internal("the file scan stopped unexpectedly"))?
        .map_err(unopened)?;
        if found.manifest.is_empty() && found.changes.is_empty() {
            return Ok(None);
        }
        let (key, author2) = (place.key.clone(), author.clone());
        let (changes, manifest, note) = (found.changes, found.manifest, found.note);
        let (changes2, note2) = (changes.clone(), note.clone());
        let rev = self
            .store
            .write(move |ctx| {
                let set = NewSet {
                    workspace: &key,
                    author: &author2,
                    changes: &changes2,
                    manifest: &manifest,
                    note: note2.as_deref(),
                };
                stored::record(ctx, &set)
            })
            .await?;
        self.changed.notify_one();
        Ok(rev.map(|rev| Kept { rev, changes, note }))
    }
}
