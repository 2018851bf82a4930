//! The chat's files and their history (docs/files.md):
//! `GET …/files` (the files the chat was given, made or changed),
//! `GET …/files/changes` (its change sets, newest first),
//! `GET …/files/history?path=` (one path's sets),
//! `POST …/files/undo {rev | run, skip_conflicts}`, and the trash:
//! `DELETE …/files?path=`, `GET …/files/trash`, `POST …/files/trash/restore
//! {path}`, `POST …/files/trash/purge {paths?}`.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};
use tandem_shared::http::ApiError;

use super::files::{content_type, FileParams};
use super::Json;
use crate::history::{file_kind, Kept, Place, Scope, UndoTarget};
use crate::store::files::{self as stored, Author};
use crate::store::queries::{self, Trashed};
use crate::words::{FileOp, FileOrigin};
use crate::App;

/// Change sets one page of `…/files/changes` holds at most.
const PAGE_MAX: usize = 200;

pub(super) async fn live_chat(app: &App, id: &str) -> Result<Place, ApiError> {
    let cid = id.to_string();
    app.store
        .read(move |conn| queries::conversation(conn, &cid, Trashed::Exclude))
        .await?;
    Ok(Place::of(&app.folders, id))
}

/// Keeps what changed since the last scan (a person's editor, a program
/// outside tandem) as the chat's `outside` set, so a list is never stale.
pub(super) async fn catch_up(app: &App, id: &str, place: &Place) -> Result<(), ApiError> {
    let author = Author {
        conversation_id: id.to_string(),
        run_id: None,
        call_id: None,
        origin: FileOrigin::Outside,
        undoes: Vec::new(),
    };
    app.history
        .sync(place, Scope::All, &author)
        .await
        .map(|_| ())
}

/// `GET …/files`: without `path`, the list; with it, the file's bytes (the
/// older spelling of `…/files/content`).
pub async fn list_or_download(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    params: Result<Query<FileParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    if matches!(&params, Ok(Query(p)) if p.path.is_none()) {
        return list(&app, &id).await;
    }
    super::files::download_bounded(&app, &id, params).await
}

async fn list(app: &App, id: &str) -> Result<Response, ApiError> {
    let place = live_chat(app, id).await?;
    catch_up(app, id, &place).await?;
    let (cid, key) = (id.to_string(), place.key.clone());
    let (touched, manifest) = app
        .store
        .read(move |conn| {
            Ok((
                stored::touched(conn, &cid)?,
                stored::manifest(conn, &key, None)?,
            ))
        })
        .await?;
    let files: Vec<Value> = touched
        .into_iter()
        .filter(|t| t.op != FileOp::Deleted)
        .filter_map(|t| {
            let seen = manifest.get(&t.path)?;
            let name = t.path.rsplit('/').next().unwrap_or(&t.path);
            Some(json!({
                "path": t.path,
                "size": seen.size,
                "mime": content_type(name),
                "origin": t.origin,
                "turn": t.run_id,
                "changed": t.changed,
                "kind": file_kind(&t.path),
                "rev": t.rev,
            }))
        })
        .collect();
    Ok(axum::Json(json!({"files": files})).into_response())
}

#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct PageParams {
    before: Option<i64>,
    limit: Option<usize>,
}

/// `GET …/files/changes?before=REV&limit=N`: the chat's change sets, newest first.
pub async fn changes(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    params: Result<Query<PageParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(params) = params.map_err(|e| ApiError::bad_input("query", e.body_text()))?;
    let limit = params.limit.unwrap_or(50);
    if limit == 0 || limit > PAGE_MAX {
        return Err(ApiError::bad_input(
            "limit",
            format!("must be 1 to {PAGE_MAX}"),
        ));
    }
    let place = live_chat(&app, &id).await?;
    catch_up(&app, &id, &place).await?;
    let sets = app
        .store
        .read(move |conn| stored::sets(conn, &id, params.before, limit))
        .await?;
    let next = (sets.len() == limit)
        .then(|| sets.last().map(|s| s.rev))
        .flatten();
    Ok(axum::Json(json!({"changes": sets, "next_before": next})).into_response())
}

/// `GET …/files/history?path=`: the change sets that touched one path, newest first.
pub async fn history(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    params: Result<Query<FileParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    let (path, _) = super::files::path_param(params)?;
    let place = live_chat(&app, &id).await?;
    catch_up(&app, &id, &place).await?;
    let sets = app
        .store
        .read(move |conn| stored::path_history(conn, &id, &path))
        .await?;
    Ok(axum::Json(json!({"changes": sets})).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UndoBody {
    rev: Option<i64>,
    run: Option<String>,
    #[serde(default)]
    skip_conflicts: bool,
}

/// `POST …/files/undo`: puts one change set (`rev`) or a whole turn's
/// (`run`) back; 409 `undo_conflict` naming every file changed since.
pub async fn undo(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Json(body): Json<UndoBody>,
) -> Result<Response, ApiError> {
    let target = match (body.rev, body.run) {
        (Some(rev), None) if rev > 0 => UndoTarget::Rev(rev),
        (Some(_), None) => {
            return Err(ApiError::bad_input(
                "rev",
                "must be a change set's number, 1 or more",
            ))
        }
        (None, Some(run)) if !run.is_empty() && run.len() <= 64 => UndoTarget::Run(run),
        (None, Some(_)) => return Err(ApiError::bad_input("run", "is not a run id")),
        _ => {
            return Err(ApiError::bad_input(
                "rev",
                "give exactly one of `rev` (a change set) or `run` (a whole turn)",
            ))
        }
    };
    let place = live_chat(&app, &id).await?;
    // The person's own edits since the last scan are theirs, not the set's.
    catch_up(&app, &id, &place).await?;
    let undone = app
        .history
        .undo(&place, &id, target, body.skip_conflicts)
        .await?;
    let mut answer = kept_answer(undone.kept.as_ref());
    answer["undone"] = json!(undone.undone);
    answer["skipped"] = json!(undone.skipped);
    Ok(axum::Json(answer).into_response())
}

/// The answer of a route that wrote a change set: its `rev` and `card`
/// (both null when nothing changed).
fn kept_answer(kept: Option<&Kept>) -> Value {
    json!({"rev": kept.map(|k| k.rev), "card": kept.map(|k| k.card())})
}

/// `DELETE …/files?path=`: the person deletes a file; it goes to the trash.
pub async fn delete(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    params: Result<Query<FileParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    let (path, _) = super::files::path_param(params)?;
    let place = live_chat(&app, &id).await?;
    let kept = app.history.delete(&place, &id, &path).await?;
    Ok(axum::Json(kept_answer(kept.as_ref())).into_response())
}

/// `GET …/files/trash`: the chat's deleted files whose bytes are kept, newest first.
pub async fn trash(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let place = live_chat(&app, &id).await?;
    catch_up(&app, &id, &place).await?;
    let files = app.history.trash(&id).await?;
    Ok(axum::Json(json!({"files": files, "days": app.config.file_trash_days})).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestoreBody {
    path: String,
}

/// `POST …/files/trash/restore {path}`: back where it was (409 `restore_conflict` when taken).
pub async fn restore(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Json(body): Json<RestoreBody>,
) -> Result<Response, ApiError> {
    if body.path.is_empty() || body.path.len() > 4096 {
        return Err(ApiError::bad_input(
            "path",
            "must be 1 to 4,096 bytes: a path the trash lists",
        ));
    }
    let place = live_chat(&app, &id).await?;
    catch_up(&app, &id, &place).await?;
    let kept = app.history.restore(&place, &id, &body.path).await?;
    Ok(axum::Json(kept_answer(kept.as_ref())).into_response())
}

#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct PurgeBody {
    paths: Option<Vec<String>>,
}

/// `POST …/files/trash/purge {paths?}`: delete for good (the whole trash without `paths`).
pub async fn purge(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Json(body): Json<PurgeBody>,
) -> Result<Response, ApiError> {
    if let Some(paths) = &body.paths {
        if paths.is_empty() || paths.len() > 1000 {
            return Err(ApiError::bad_input(
                "paths",
                "must list 1 to 1,000 paths of the trash (or be left out: all of it)",
            ));
        }
    }
    let place = live_chat(&app, &id).await?;
    let purged = app.history.purge(&place, &id, body.paths, None).await?;
    Ok(axum::Json(json!(purged)).into_response())
}
