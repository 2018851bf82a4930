//! A chat's tasks in Agents mode: the list (each with its state, not its
//! report) and one with its whole report and its worker's transcript.

use std::sync::Arc;

use axum::extract::{Path, State};
use serde_json::{json, Value};
use tandem_shared::http::ApiError;

use crate::store::queries::{self, Trashed};
use crate::store::tasks;
use crate::App;

pub async fn list(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let rows = app
        .store
        .read(move |conn| {
            queries::conversation(conn, &id, Trashed::Include)?;
            tasks::list(conn, &id)
        })
        .await?;
    let rows: Vec<Value> = rows
        .into_iter()
        .map(|t| {
            let chars = t.report.as_ref().map(|r| r.chars().count());
            let mut row = json!(t);
            if let Some(map) = row.as_object_mut() {
                map.remove("report");
                if let Some(chars) = chars {
                    map.insert("report_chars".into(), json!(chars));
                }
            }
            row
        })
        .collect();
    Ok(axum::Json(json!({
        "tasks": rows,
        "limit": {"per_run": crate::tools::task::PER_RUN_MAX},
    })))
}

/// One task with its report and its worker's transcript: `{task, snapshot}`.
pub async fn show(
    State(app): State<Arc<App>>,
    Path((id, tid)): Path<(String, String)>,
) -> Result<axum::Json<Value>, ApiError> {
    let (task, snapshot) = app
        .store
        .read(move |conn| {
            let task = tasks::one(conn, &id, &tid)?;
            Ok((task, queries::snapshot(conn, &tid)?))
        })
        .await?;
    Ok(axum::Json(json!({"task": task, "snapshot": snapshot})))
}
