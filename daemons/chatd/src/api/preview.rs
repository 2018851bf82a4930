//! `GET /conversations/{id}/files/preview?path=REL`: what the files pane
//! shows of a workbook, a CSV/TSV table, a Word file or a slide deck, as
//! JSON (docs/api.md "Previews"). The file is found as `files.rs` finds
//! one; its bytes are read only by the reader process
//! (`documents::helper`), so a file that crashes, hangs or bombs a parser
//! costs that one request.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tandem_shared::http::ApiError;

use super::files::{self, FileParams};
use crate::documents::formats::preview::{Preview, PreviewKind};
use crate::documents::formats::Refusal;
use crate::documents::Failure;
use crate::store::queries::{self, Trashed};
use crate::App;

/// The largest file a preview is made of.
pub const MAX_PREVIEW_FILE: u64 = 20 << 20;

/// The answer: which file, what it was read as, then the preview itself.
#[derive(Serialize)]
struct Answer<'a> {
    path: &'a str,
    kind: PreviewKind,
    bytes: u64,
    #[serde(flatten)]
    preview: Preview,
}

pub async fn preview(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    params: Result<Query<FileParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    let (path, _) = files::path_param(params)?;
    let cid = id.clone();
    app.store
        .read(move |conn| queries::conversation(conn, &cid, Trashed::Exclude))
        .await?;
    let root = app.runs.workspace_root(&id);
    let asked = path.clone();
    let (name, file, size) = tokio::task::spawn_blocking(move || files::open(&root, &asked))
        .await
        .map_err(|_| ApiError::internal("reading the file stopped"))??;
    let Some(kind) = PreviewKind::of(&name) else {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_type",
            format!(
                "`{path}` has no preview: previews are made of {} files",
                PreviewKind::EXTENSIONS
            ),
        )
        .with("field", "path"));
    };
    if size > MAX_PREVIEW_FILE {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!(
                "`{path}` is {} bytes; previews are made of files up to {} MiB: download it instead",
                crate::tools::fit::commas(size),
                MAX_PREVIEW_FILE >> 20
            ),
        )
        .with("limit", MAX_PREVIEW_FILE));
    }
    let started = Instant::now();
    let made = app.documents.preview(file, kind).await;
    let ms = started.elapsed().as_millis() as u64;
    match made {
        Ok(preview) => {
            tracing::info!(chat = %id, kind = kind.as_str(), bytes = size, ms, "file previewed");
            let answer = Answer {
                path: &path,
                kind,
                bytes: size,
                preview,
            };
            Ok(axum::Json(answer).into_response())
        }
        Err(failure) => {
            let error = refusal(&path, kind, &failure);
            tracing::info!(chat = %id, kind = kind.as_str(), bytes = size, ms, outcome = error.kind, "file not previewed");
            Err(error)
        }
    }
}

/// Why a preview could not be made, as the API says it: 422 when the
/// file is to blame (it is not what its name says, it is locked, damaged,
/// a bomb, or too much for the reader's limits), 503 when the reader
/// itself could not run.
fn refusal(path: &str, kind: PreviewKind, failure: &Failure) -> ApiError {
    let unprocessable = |kind: &'static str| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            kind,
            format!("`{path}` has no preview: {failure}"),
        )
    };
    match failure {
        Failure::Refused(Refusal::NotWhatItSays(_)) => {
            unprocessable("not_its_type").with("kind", kind.as_str())
        }
        Failure::Refused(Refusal::Encrypted) => unprocessable("encrypted"),
        Failure::Refused(Refusal::Bomb(_)) => unprocessable("zip_bomb"),
        Failure::Refused(Refusal::Damaged(_)) => unprocessable("damaged"),
        Failure::TooLarge(_)
        | Failure::Memory(_)
        | Failure::Cpu(_)
        | Failure::Wall(_)
        | Failure::Output(_)
        | Failure::Crashed(_) => unprocessable("unreadable"),
        Failure::Unavailable(_) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "reader_unavailable",
            format!("no preview of `{path}` now: {failure}"),
        ),
    }
}
