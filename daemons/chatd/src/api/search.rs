//! `GET …/files/search?q=&path=&regex=&ignore_case=`: the files pane's
//! search box, over the same index as `search_files` (docs/api.md).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use tandem_shared::http::ApiError;

use super::history::{catch_up, live_chat};
use crate::index::{Matcher, Query as Asked, Request};
use crate::App;

/// How long the page's search waits for files still being indexed: it
/// shows how many were left and asks again.
const SETTLE: Duration = Duration::from_secs(2);
/// The most matching lines one answer holds.
const MAX_HITS: usize = 200;

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct SearchParams {
    q: Option<String>,
    path: Option<String>,
    regex: Option<String>,
    ignore_case: Option<String>,
}

/// A yes/no parameter: `1`/`true` or `0`/`false`.
fn switch(field: &str, value: Option<&str>, default: bool) -> Result<bool, ApiError> {
    match value {
        None | Some("") => Ok(default),
        Some("1" | "true") => Ok(true),
        Some("0" | "false") => Ok(false),
        Some(_) => Err(ApiError::bad_input(field, "must be 1 or 0 (true or false)")),
    }
}

pub async fn search(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    params: Result<Query<SearchParams>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(params) = params.map_err(|e| ApiError::bad_input("q", e.body_text()))?;
    let text = params.q.unwrap_or_default();
    let regex = switch("regex", params.regex.as_deref(), false)?;
    let ignore_case = switch("ignore_case", params.ignore_case.as_deref(), true)?;
    let matcher = Matcher::new(&Asked {
        text: text.clone(),
        regex,
        ignore_case,
    })
    .map_err(|e| ApiError::bad_input("q", e))?;
    let place = live_chat(&app, &id).await?;
    let under = match params.path.filter(|p| !p.is_empty()) {
        None => None,
        Some(path) => {
            let root = place.root.clone();
            tokio::task::spawn_blocking(move || {
                let workspace = crate::history::open_workspace(&root)?;
                let rel = workspace
                    .resolve(&path)
                    .map_err(|e| ApiError::bad_input("path", e.message()))?;
                Ok::<_, ApiError>((!rel.is_root()).then(|| rel.to_string()))
            })
            .await
            .map_err(|_| ApiError::internal("checking the path stopped"))??
        }
    };
    catch_up(&app, &id, &place).await?;
    let left = app.index.settle(&place.key, SETTLE).await?;
    let found = app
        .index
        .search(
            &place.key,
            Request {
                matcher,
                under,
                max_hits: MAX_HITS,
            },
        )
        .await?;
    let pending = left.max(found.pending);
    Ok(Json(json!({
        "query": text,
        "hits": found.hits,
        "names": found.names,
        "more_hits": found.more_hits,
        "files": found.files,
        "pending": pending,
        "beyond": found.beyond,
    })))
}
