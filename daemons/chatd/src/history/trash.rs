//! The file trash (docs/files.md): a deleted file's bytes stay as the blob
//! its deletion names, so the trash is the chat's deletions not made again
//! since. A person deletes and restores through the API (each a change set
//! of theirs); deleting for good removes the blobs no other change and no
//! workspace still needs; housekeeping does that after `file_trash_days`.

use serde::Serialize;
use tandem_shared::http::ApiError;

use super::{FileHistory, Kept, Place, Scope};
use crate::store::files::{self as stored, Author, TrashRow};
use crate::words::FileOrigin;
use crate::workspace::Workspace;

/// What deleting for good freed.
#[derive(Debug, Default, Serialize)]
pub struct Purged {
    /// Paths whose kept versions went.
    pub files: usize,
    pub blobs: usize,
    pub bytes: u64,
}

fn person(conversation_id: &str) -> Author {
    Author {
        conversation_id: conversation_id.to_string(),
        run_id: None,
        call_id: None,
        origin: FileOrigin::User,
        undoes: Vec::new(),
    }
}

fn refused(path: &str, why: String) -> ApiError {
    ApiError::bad_input("path", format!("`{path}`: {why}"))
}

impl FileHistory {
    /// The chat's trash, newest first: deletions whose bytes are still kept.
    pub async fn trash(&self, conversation_id: &str) -> Result<Vec<TrashRow>, ApiError> {
        let cid = conversation_id.to_string();
        let rows = self
            .store
            .read(move |conn| stored::trash(conn, &cid))
            .await?;
        Ok(rows
            .into_iter()
            .filter(|r| self.blobs.has(&r.sha))
            .collect())
    }

    /// The person deletes a file: it goes to the trash (a change set of theirs).
    pub async fn delete(
        &self,
        place: &Place,
        conversation_id: &str,
        path: &str,
    ) -> Result<Option<Kept>, ApiError> {
        let _held = self.lock(&place.key).await;
        let root = place.root.clone();
        let rel = tokio::task::spawn_blocking({
            let path = path.to_string();
            move || {
                let workspace = Workspace::existing(&root)
                    .map_err(|_| refused(&path, "no such file in this chat's workspace".into()))?;
                let rel = workspace
                    .resolve(&path)
                    .map_err(|e| ApiError::bad_input("path", e.message()))?;
                Ok::<_, ApiError>((workspace, rel.to_string()))
            }
        })
        .await
        .map_err(|_| ApiError::internal("the delete stopped unexpectedly"))??;
        let (workspace, rel) = rel;
        // Someone else's change since the last scan is theirs, not the person's delete.
        let scope = Scope::Paths(vec![rel.clone()]);
        let mut outside = person(conversation_id);
        outside.origin = FileOrigin::Outside;
        self.sync_held(place, scope.clone(), &outside).await?;
        let gone = rel.clone();
        tokio::task::spawn_blocking(move || workspace.remove_file(&gone))
            .await
            .map_err(|_| ApiError::internal("the delete stopped unexpectedly"))?
            .map_err(|e| {
                if e.is_missing() {
                    ApiError::not_found("file", &rel)
                } else {
                    ApiError::bad_input("path", e.message())
                }
            })?;
        self.sync_held(place, scope, &person(conversation_id)).await
    }

    /// Puts a file of the trash back where it was; 409 `restore_conflict`
    /// when something is there now (nothing is overwritten).
    pub async fn restore(
        &self,
        place: &Place,
        conversation_id: &str,
        path: &str,
    ) -> Result<Option<Kept>, ApiError> {
        let _held = self.lock(&place.key).await;
        let Some(row) = self
            .trash(conversation_id)
            .await?
            .into_iter()
            .find(|r| r.path == path)
        else {
            return Err(ApiError::not_found("file in the trash", path));
        };
        let (root, blobs, rel) = (place.root.clone(), self.blobs.clone(), row.path.clone());
        tokio::task::spawn_blocking(move || {
            let workspace = super::open_workspace(&root)?;
            if !matches!(workspace.lstat(&rel), Ok(None)) {
                return Err(ApiError::conflict(
                    "restore_conflict",
                    format!("`{rel}` exists again; move or delete it first, nothing was changed"),
                )
                .with("path", rel.as_str()));
            }
            let mut blob = blobs.open(&row.sha).map_err(|_| {
                ApiError::internal(format!("the kept bytes of `{rel}` could not be read"))
            })?;
            workspace
                .write_from(&rel, &mut blob)
                .map_err(|e| ApiError::internal(format!("restore: {e}")))?;
            Ok(())
        })
        .await
        .map_err(|_| ApiError::internal("the restore stopped unexpectedly"))??;
        let scope = Scope::Paths(vec![row.path]);
        self.sync_held(place, scope, &person(conversation_id)).await
    }

    /// Deletes for good the trashed `paths` of a chat (all of its trash when
    /// `None`; only those deleted before `before_unix` when given): the
    /// blobs of every version its history kept of them go, unless another
    /// change or a workspace still names them.
    pub async fn purge(
        &self,
        place: &Place,
        conversation_id: &str,
        paths: Option<Vec<String>>,
        before_unix: Option<i64>,
    ) -> Result<Purged, ApiError> {
        let _held = self.lock(&place.key).await;
        let trashed: Vec<String> = self
            .trash(conversation_id)
            .await?
            .into_iter()
            .filter(|r| paths.as_ref().is_none_or(|p| p.contains(&r.path)))
            .filter(|r| before_unix.is_none_or(|cut| r.deleted_unix < cut))
            .map(|r| r.path)
            .collect();
        if let Some(asked) = &paths {
            if let Some(missing) = asked.iter().find(|p| !trashed.contains(p)) {
                return Err(ApiError::not_found("file in the trash", missing));
            }
        }
        if trashed.is_empty() {
            return Ok(Purged::default());
        }
        let (cid, key, chosen) = (
            conversation_id.to_string(),
            place.key.clone(),
            trashed.clone(),
        );
        // No scan may keep a blob between the look at what is in use and
        // the removal: a blob it found already there would then be gone.
        let _no_scans = self.blob_gate.write().await;
        let removable = self
            .store
            .read(move |conn| {
                let shas = stored::shas_of_paths(conn, &cid, &chosen)?;
                let used = stored::shas_in_use(conn, &shas, &key, &chosen)?;
                Ok(shas
                    .into_iter()
                    .filter(|s| !used.contains(s))
                    .collect::<Vec<_>>())
            })
            .await?;
        let blobs = self.blobs.clone();
        let count = removable.len();
        let bytes = tokio::task::spawn_blocking(move || blobs.remove(&removable))
            .await
            .map_err(|_| ApiError::internal("the purge stopped unexpectedly"))?;
        tracing::info!(conversation = %conversation_id, files = trashed.len(), blobs = count, bytes,
            "file trash purged");
        Ok(Purged {
            files: trashed.len(),
            blobs: count,
            bytes,
        })
    }
}
