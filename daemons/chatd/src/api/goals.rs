//! A chat's goal: set (its first turn starts when the chat is idle), read,
//! paused, resumed with new counts, cleared. Every change is one job with
//! its goal line and `goal` event (`store/goals.rs`).

use std::sync::Arc;

use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::{json, Value};
use tandem_shared::http::ApiError;

use super::Json;
use crate::model::Goal;
use crate::store::goals::{self, Limits, TEXT_CHARS};
use crate::store::queries::{self, Trashed};
use crate::store::runs::insert_run;
use crate::words::{Origin, RunMode};
use crate::App;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetGoal {
    text: String,
}

fn limits(app: &App) -> Limits {
    Limits {
        max_turns: i64::from(app.config.goal_max_turns),
        max_steps: i64::from(app.config.goal_max_steps),
    }
}

/// The goal's text, trimmed, or why not (naming the field and the limit).
pub fn checked_text(text: &str) -> Result<String, ApiError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(ApiError::bad_input("text", "the goal is empty"));
    }
    let chars = text.chars().count();
    if chars > TEXT_CHARS {
        return Err(ApiError::bad_input(
            "text",
            format!("{chars} characters is over the limit of {TEXT_CHARS}"),
        ));
    }
    Ok(text.to_string())
}

/// The answer of a change: the goal, and the run its turn started, if one.
fn answer(goal: Option<Goal>, run_id: Option<String>) -> axum::Json<Value> {
    let mut out = json!({ "goal": goal });
    if let Some(run_id) = run_id {
        out["run_id"] = json!(run_id);
    }
    axum::Json(out)
}

pub async fn get(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let goal = app
        .store
        .read(move |conn| {
            queries::conversation(conn, &id, Trashed::Include)?;
            goals::of(conn, &id)
        })
        .await?;
    Ok(answer(goal, None))
}

pub async fn set(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Json(body): Json<SetGoal>,
) -> Result<axum::Json<Value>, ApiError> {
    let text = checked_text(&body.text)?;
    let limits = limits(&app);
    start(&app, id, move |ctx, conversation| {
        goals::set(ctx, conversation, &text, limits)
    })
    .await
}

pub async fn resume(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let limits = limits(&app);
    start(&app, id, move |ctx, conversation| {
        goals::resume(ctx, conversation, limits)
    })
    .await
}

/// A change that may start the goal's turn: written with the run it queues
/// in one job, and the run started in a task of its own (a client gone
/// mid-request must not leave the run queued for good).
async fn start<F>(app: &Arc<App>, id: String, change: F) -> Result<axum::Json<Value>, ApiError>
where
    F: FnOnce(
            &mut crate::store::Ctx,
            &crate::model::Conversation,
        ) -> Result<(Goal, bool), ApiError>
        + Send
        + 'static,
{
    app.folders.check_reach(&id)?;
    let app = app.clone();
    let started = tokio::spawn(async move {
        let cid = id.clone();
        let (goal, run) = app
            .store
            .write(move |ctx| {
                let conversation = queries::conversation(ctx.conn(), &cid, Trashed::Exclude)?;
                let (goal, turn) = change(ctx, &conversation)?;
                let run = match turn {
                    true => Some(insert_run(
                        ctx,
                        &conversation,
                        RunMode::Send,
                        Origin::User,
                        None,
                    )?),
                    false => None,
                };
                Ok((goal, run))
            })
            .await?;
        let run_id = run.map(|run| {
            app.runs.spawn(run.id.clone(), id);
            run.id
        });
        Ok::<_, ApiError>(answer(Some(goal), run_id))
    });
    started
        .await
        .map_err(|_| ApiError::internal("the goal's turn did not start"))?
}

pub async fn pause(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let goal = app
        .store
        .write(move |ctx| {
            queries::conversation(ctx.conn(), &id, Trashed::Exclude)?;
            goals::pause_by_person(ctx, &id)
        })
        .await?;
    Ok(answer(Some(goal), None))
}

pub async fn clear(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    app.store
        .write(move |ctx| {
            queries::conversation(ctx.conn(), &id, Trashed::Include)?;
            goals::clear(ctx, &id)
        })
        .await?;
    Ok(axum::Json(json!({"cleared": true})))
}
