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
    let cid = id.clone();
    let (goal, queued) = app
        .store
        .write(move |ctx| {
            queries::conversation(ctx.conn(), &cid, Trashed::Exclude)?;
            let goal = goals::pause_by_person(ctx, &cid)?;
            Ok((goal, goals::queued_turn(ctx.conn(), &cid)?))
        })
        .await?;
    // A goal turn not started yet does not follow a pause.
    if queued {
        app.runs.stop(&id);
    }
    Ok(answer(Some(goal), None))
}

pub async fn clear(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let cid = id.clone();
    let queued = app
        .store
        .write(move |ctx| {
            queries::conversation(ctx.conn(), &cid, Trashed::Include)?;
            let queued = goals::queued_turn(ctx.conn(), &cid)?;
            goals::clear(ctx, &cid)?;
            Ok(queued)
        })
        .await?;
    // A goal turn not started yet does not follow a clear.
    if queued {
        app.runs.stop(&id);
    }
    Ok(axum::Json(json!({"cleared": true})))
}

/// `/goal [text | clear | resume | pause]`: what a person reads, and the goal.
pub async fn command(app: &Arc<App>, id: String, args: &str) -> Result<(String, Value), ApiError> {
    let app = app.clone();
    let (answer, said) = match args.trim() {
        "" => {
            let shown = get(State(app), Path(id)).await?.0;
            let text = match shown["goal"].as_object() {
                None => "This chat has no goal. Set one: /goal <what to reach>.".to_string(),
                Some(goal) => describe(goal),
            };
            return Ok((text, shown));
        }
        "clear" => (
            clear(State(app), Path(id)).await?.0,
            "Goal cleared.".to_string(),
        ),
        "pause" => (
            pause(State(app), Path(id)).await?.0,
            "Goal paused; the turn that runs goes on.".to_string(),
        ),
        "resume" => {
            let done = resume(State(app), Path(id)).await?.0;
            let said = started("Goal resumed with new counts", &done);
            (done, said)
        }
        text => {
            let body = SetGoal {
                text: text.to_string(),
            };
            let done = set(State(app), Path(id), Json(body)).await?.0;
            let said = started("Goal set", &done);
            (done, said)
        }
    };
    Ok((said, answer))
}

fn started(what: &str, done: &Value) -> String {
    match done["run_id"].as_str() {
        Some(run) => format!("{what}; its turn started (run {run})."),
        None => format!("{what}; it follows the turn that runs now."),
    }
}

/// A goal in one line: its text, state and counts.
fn describe(goal: &serde_json::Map<String, Value>) -> String {
    let text = goal.get("text").and_then(Value::as_str).unwrap_or("");
    let state = goal.get("state").and_then(Value::as_str).unwrap_or("?");
    let mut line = format!(
        "Goal: {text} — {state} · turn {} of {} · {} of {} model calls",
        goal.get("turns").unwrap_or(&Value::Null),
        goal.get("max_turns").unwrap_or(&Value::Null),
        goal.get("steps").unwrap_or(&Value::Null),
        goal.get("max_steps").unwrap_or(&Value::Null),
    );
    if let Some(note) = goal.get("note").and_then(Value::as_str) {
        line.push_str(&format!(" · {note}"));
    }
    line
}
