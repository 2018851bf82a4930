//! A chat's sub-agents: the list, one's transcript (a snapshot of its own
//! conversation, whose events a device then follows), and stop. A
//! sub-agent's conversation is its parent's to run: every write route on it
//! answers 409 `subagent_read_only` (see `guard`), but for its cards.

use std::sync::Arc;

use axum::extract::{Path, State};
use serde_json::{json, Value};
use tandem_shared::http::ApiError;

use crate::store::queries::{self, Trashed};
use crate::store::subagents::{self, BACKGROUND_MAX};
use crate::words::SubagentState;
use crate::App;

pub async fn list(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let subs = app
        .store
        .read(move |conn| {
            queries::conversation(conn, &id, Trashed::Include)?;
            subagents::list(conn, &id)
        })
        .await?;
    let background = subs
        .iter()
        .filter(|s| s.state == SubagentState::Running && !s.wait)
        .count();
    // The list carries each one's state, not its whole result.
    let rows: Vec<Value> = subs
        .into_iter()
        .map(|s| {
            let chars = s.result.as_ref().map(|r| r.chars().count());
            let mut row = json!(s);
            if let Some(map) = row.as_object_mut() {
                map.remove("result");
                if let Some(chars) = chars {
                    map.insert("result_chars".into(), json!(chars));
                }
            }
            row
        })
        .collect();
    Ok(axum::Json(json!({
        "subagents": rows,
        "running_background": background,
        "limit": {"background": BACKGROUND_MAX},
    })))
}

/// One sub-agent with its transcript: `{subagent, snapshot}`.
pub async fn show(
    State(app): State<Arc<App>>,
    Path((id, sid)): Path<(String, String)>,
) -> Result<axum::Json<Value>, ApiError> {
    let (sub, snapshot) = app
        .store
        .read(move |conn| {
            let sub = subagents::one(conn, &id, &sid)?;
            Ok((sub, queries::snapshot(conn, &sid)?))
        })
        .await?;
    Ok(axum::Json(json!({"subagent": sub, "snapshot": snapshot})))
}

/// Stops one sub-agent; what it had reaches the parent like any end.
pub async fn stop(
    State(app): State<Arc<App>>,
    Path((id, sid)): Path<(String, String)>,
) -> Result<axum::Json<Value>, ApiError> {
    let (parent, child) = (id.clone(), sid.clone());
    let sub = app
        .store
        .read(move |conn| subagents::one(conn, &parent, &child))
        .await?;
    if sub.state != SubagentState::Running {
        return Err(ApiError::conflict(
            "not_running",
            format!("the sub-agent {sid} is not running (it is {})", sub.state),
        ));
    }
    app.runs.stop_subagent(&sid).await;
    let sub = app
        .store
        .read(move |conn| subagents::one(conn, &id, &sid))
        .await?;
    Ok(axum::Json(
        json!({"subagent_id": sub.id, "status": sub.state}),
    ))
}
