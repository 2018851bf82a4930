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

/// `/loop [interval] prompt | list | stop [id]`: what a person reads, and
/// the loop or the list.
pub async fn command(app: &Arc<App>, id: String, args: &str) -> Result<(String, Value), ApiError> {
    let app = app.clone();
    let args = args.trim();
    let (first, rest) = match args.split_once(char::is_whitespace) {
        Some((first, rest)) => (first, rest.trim()),
        None => (args, ""),
    };
    match first {
        "" | "list" if rest.is_empty() => {
            let listed = list(State(app), Path(id)).await?.0;
            let lines: Vec<String> = listed["loops"]
                .as_array()
                .into_iter()
                .flatten()
                .map(describe)
                .collect();
            let text = match lines.is_empty() {
                true => "This chat has no loops. Start one: /loop 5m <prompt>.".to_string(),
                false => lines.join("\n"),
            };
            Ok((text, listed))
        }
        "stop" => {
            let removed = match rest {
                "" => remove_all(State(app), Path(id)).await?.0,
                prefix => {
                    let chat = id.clone();
                    let prefix = prefix.to_string();
                    let listed = app
                        .store
                        .read(move |conn| queries::loops(conn, &chat))
                        .await?;
                    let matching: Vec<&crate::model::Loop> = listed
                        .iter()
                        .filter(|l| l.id.starts_with(&prefix))
                        .collect();
                    let [one] = matching.as_slice() else {
                        return Err(ApiError::bad_input(
                            "text",
                            format!(
                                "{} loops of this chat start with that id: name one",
                                matching.len()
                            ),
                        ));
                    };
                    remove_one(State(app), Path((id, one.id.clone()))).await?.0
                }
            };
            let text = format!("Stopped {} loop(s).", removed["removed"]);
            Ok((text, removed))
        }
        _ => {
            // A first word with a unit (5m, 1h30m) is the interval; else the
            // loop is self-paced and every word is its prompt.
            let timed = first.chars().any(|c| c.is_ascii_alphabetic())
                && first.chars().next().is_some_and(|c| c.is_ascii_digit())
                && parse_interval(first).is_ok();
            let (interval, prompt) = match timed {
                true => (Some(Value::from(first)), rest),
                false => (None, args),
            };
            let body = MakeLoop {
                prompt: prompt.to_string(),
                interval,
            };
            let made =
                super::body::json_of(create(State(app), Path(id), Json(body)).await?).await?;
            let every = made["interval"]
                .as_str()
                .map_or("self-paced".to_string(), |i| format!("every {i}"));
            let text = match made["state"].as_str() {
                Some("pending") => format!(
                    "Loop made ({every}). It is this chat's first: say yes on its card, or PUT its state active."
                ),
                _ => format!("Loop made ({every}); its first run starts now."),
            };
            Ok((text, made))
        }
    }
}

/// A loop in one line.
fn describe(lp: &Value) -> String {
    let every = lp["interval"]
        .as_str()
        .map_or("self-paced".to_string(), |i| format!("every {i}"));
    let mut line = format!(
        "{} · {every} · {} · run {} of {} · {}",
        lp["id"].as_str().unwrap_or(""),
        lp["state"].as_str().unwrap_or("?"),
        lp["runs"],
        lp["max_runs"],
        lp["prompt"]
            .as_str()
            .unwrap_or("")
            .chars()
            .take(60)
            .collect::<String>()
    );
    if let Some(reason) = lp["reason"].as_str() {
        line.push_str(&format!(" ({reason})"));
    }
    line
}
