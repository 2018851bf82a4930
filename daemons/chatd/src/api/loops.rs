//! A chat's loops: made (its first one waits for the person's yes), listed,
//! paused, resumed or confirmed, removed. Firing them is the scheduler's
//! (`runs/loops.rs`); every write is `store/loops.rs`'s.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};
use tandem_shared::http::ApiError;

use super::Json;
use crate::store::loops::{self, NewLoop, LONGEST_S, PROMPT_CHARS};
use crate::store::queries::{self, Trashed};
use crate::tools::loops::parse_interval;
use crate::words::LoopState;
use crate::App;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MakeLoop {
    prompt: String,
    /// `5m`, `1h30m` or seconds; none: self-paced.
    #[serde(default)]
    interval: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangeLoop {
    state: String,
}

/// The prompt, trimmed, or why not.
pub fn checked_prompt(prompt: &str) -> Result<String, ApiError> {
    let prompt = prompt.trim();
    if prompt.is_empty() {
        return Err(ApiError::bad_input("prompt", "the prompt is empty"));
    }
    let chars = prompt.chars().count();
    if chars > PROMPT_CHARS {
        return Err(ApiError::bad_input(
            "prompt",
            format!("{chars} characters is over the limit of {PROMPT_CHARS}"),
        ));
    }
    Ok(prompt.to_string())
}

/// An interval's seconds, from the shortest the box allows to 24 h.
pub fn checked_interval(app: &App, interval: &Value) -> Result<i64, ApiError> {
    let seconds = match interval {
        Value::String(text) => {
            parse_interval(text).map_err(|why| ApiError::bad_input("interval", why))?
        }
        Value::Number(n) => n
            .as_i64()
            .ok_or_else(|| ApiError::bad_input("interval", "must be whole seconds"))?,
        _ => {
            return Err(ApiError::bad_input(
                "interval",
                "must be a string such as 5m, or seconds",
            ))
        }
    };
    let min = i64::from(app.config.loop_min_interval_s);
    if !(min..=LONGEST_S).contains(&seconds) {
        return Err(ApiError::bad_input(
            "interval",
            format!("{seconds} seconds is outside {min} seconds to 24h"),
        ));
    }
    Ok(seconds)
}

pub async fn create(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Json(body): Json<MakeLoop>,
) -> Result<Response, ApiError> {
    let prompt = checked_prompt(&body.prompt)?;
    let interval_s = match &body.interval {
        None | Some(Value::Null) => None,
        Some(interval) => Some(checked_interval(&app, interval)?),
    };
    let now = app.runs.now_ms();
    let made = app
        .store
        .write(move |ctx| {
            let conversation = queries::conversation(ctx.conn(), &id, Trashed::Exclude)?;
            let new = NewLoop {
                prompt: &prompt,
                interval_s,
            };
            loops::create(ctx, &conversation, &new, now)
        })
        .await?;
    Ok((StatusCode::CREATED, axum::Json(json!(made))).into_response())
}

pub async fn list(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let listed = app
        .store
        .read(move |conn| {
            queries::conversation(conn, &id, Trashed::Include)?;
            queries::loops(conn, &id)
        })
        .await?;
    Ok(axum::Json(json!({ "loops": listed })))
}

pub async fn change(
    State(app): State<Arc<App>>,
    Path((id, lid)): Path<(String, String)>,
    Json(body): Json<ChangeLoop>,
) -> Result<axum::Json<Value>, ApiError> {
    let state = LoopState::parse(&body.state)
        .filter(|s| matches!(s, LoopState::Active | LoopState::Paused))
        .ok_or_else(|| {
            ApiError::bad_input(
                "state",
                format!(
                    "{:?} is not active or paused",
                    body.state.chars().take(40).collect::<String>()
                ),
            )
        })?;
    let now = app.runs.now_ms();
    let changed = app
        .store
        .write(move |ctx| {
            queries::conversation(ctx.conn(), &id, Trashed::Exclude)?;
            loops::set_state(ctx, &id, &lid, state, now)
        })
        .await?;
    Ok(axum::Json(json!(changed)))
}

pub async fn remove_one(
    State(app): State<Arc<App>>,
    Path((id, lid)): Path<(String, String)>,
) -> Result<axum::Json<Value>, ApiError> {
    let removed = app
        .store
        .write(move |ctx| loops::remove(ctx, &id, Some(&lid)))
        .await?;
    Ok(axum::Json(json!({ "removed": removed })))
}

pub async fn remove_all(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let removed = app
        .store
        .write(move |ctx| {
            queries::conversation(ctx.conn(), &id, Trashed::Include)?;
            loops::remove(ctx, &id, None)
        })
        .await?;
    Ok(axum::Json(json!({ "removed": removed })))
}
