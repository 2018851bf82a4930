//! hostexecd's API on its unix socket (`hostexec.sock`, 0600 in a 0700
//! folder, every caller's uid checked before a byte is read):
//!
//! - `POST /exec` `{chat_id, command, timeout_s?, workspace?}` → 200
//!   `application/x-ndjson`: `started`, `output` chunks, `finished`; refused
//!   before start with 400 (the field named), 409 `chat_busy` or
//!   `workspace_unusable`, 429 `too_many_chats`.
//! - `POST /exec/{call_id}/stop` → `{"stopped": true}` or 404.
//! - `POST /serve` `{chat_id, command, args?, env?}` with `Upgrade:
//!   tandem-stdio` → 101 and the MCP server's stream (`serve.rs`).
//! - `GET /audit?chat=&limit=` → `{"audit": [rows]}`, newest first.
//! - `GET /health`, `GET /metrics`.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use tandem_shared::http::ApiError;

use crate::calls::{KilledBy, Refusal};
use crate::exec::{NotStarted, Request};
use crate::Hostexec;

/// The longest command accepted, in bytes.
pub const MAX_COMMAND: usize = 64 * 1024;

pub fn router(hx: Arc<Hostexec>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/exec", post(exec))
        .route("/exec/{call_id}/stop", post(stop))
        .route("/serve", post(crate::serve::serve))
        .route("/audit", get(audit))
        .merge(tandem_shared::metrics::router(hx.registry.clone()))
        // The body is a command of 64 KiB at most, JSON-escaped.
        .layer(axum::extract::DefaultBodyLimit::max(8 * MAX_COMMAND))
        .with_state(hx)
}

async fn health(State(hx): State<Arc<Hostexec>>) -> Json<Value> {
    Json(json!({
        "ok": true,
        "version": env!("CARGO_PKG_VERSION"),
        "pid": std::process::id(),
        "uptime_s": hx.started.elapsed().as_secs(),
        "running": hx.calls.count(),
        "servers": hx.servers.count(),
        "max_chats": hx.config.max_chats,
        "run_as": hx.user_name,
        "run_as_uid": hx.uid,
        "containment": match hx.namespaces {
            crate::contain::Namespaces::AsRoot => "PID and mount namespaces",
            crate::contain::Namespaces::InUserNamespace { .. } => "user, PID and mount namespaces",
        },
    }))
}

pub use tandem_shared::http::is_chat_id;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExecBody {
    chat_id: String,
    command: String,
    timeout_s: Option<u64>,
    /// The chat's workspace, or the shared one; none: the chat's own.
    workspace: Option<String>,
}

async fn exec(
    State(hx): State<Arc<Hostexec>>,
    body: Result<Json<ExecBody>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, ApiError> {
    let refuse = |e: ApiError| {
        hx.metrics.refused("bad_input");
        e
    };
    let Json(body) = body.map_err(|e| refuse(ApiError::bad_input("body", e.body_text())))?;
    if !is_chat_id(&body.chat_id) {
        return Err(refuse(ApiError::bad_input(
            "chat_id",
            "is not a chat id (letters, digits and _, 64 at most)",
        )));
    }
    if body.command.trim().is_empty() {
        return Err(refuse(ApiError::bad_input("command", "is empty")));
    }
    if body.command.len() > MAX_COMMAND {
        return Err(refuse(
            ApiError::bad_input(
                "command",
                format!(
                    "is {} bytes, over the limit of {MAX_COMMAND}",
                    body.command.len()
                ),
            )
            .with("limit", MAX_COMMAND),
        ));
    }
    if body.command.contains('\0') {
        return Err(refuse(ApiError::bad_input("command", "holds a NUL byte")));
    }
    let max = hx.config.max_timeout_s;
    let timeout_s = body.timeout_s.unwrap_or(hx.config.timeout_s);
    if !(1..=max).contains(&timeout_s) {
        return Err(refuse(
            ApiError::bad_input("timeout_s", format!("{timeout_s} is outside 1..={max}"))
                .with("max", max),
        ));
    }
    let (workspace, kind) =
        crate::folders::workspace_of(&hx.config, &body.chat_id, body.workspace.as_deref())
            .map_err(|why| refuse(ApiError::bad_input("workspace", why)))?;
    if hx.shutdown.is_begun() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "hostexecd is stopping: no new command starts",
        ));
    }
    let call_id = tandem_shared::time::new_id("hx_");
    let slot = match hx.calls.reserve(&body.chat_id, &call_id) {
        Ok(slot) => slot,
        Err(Refusal::ChatBusy { call_id }) => {
            hx.metrics.refused("chat_busy");
            return Err(ApiError::conflict(
                "chat_busy",
                "this chat already runs a command: one at a time",
            )
            .with("call_id", call_id)
            .with("running", 1)
            .with("limit", 1));
        }
        Err(Refusal::TooManyChats { running, max }) => {
            hx.metrics.refused("too_many_chats");
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_chats",
                format!("{running} chats are running commands, the most at once"),
            )
            .with("running", running)
            .with("limit", max)
            .retry_after(1));
        }
    };
    let request = Request {
        chat: body.chat_id,
        command: body.command,
        timeout: Duration::from_secs(timeout_s),
        workspace,
        kind,
    };
    // Started in a task of its own: a caller that goes away while the call
    // starts drops only this handler; the start completes, and the stream it
    // gives back, dropped unread, stops the call and finishes its audit row.
    let started = tokio::spawn(crate::exec::start(hx.clone(), slot, request)).await;
    let stream = match started {
        Ok(Ok(stream)) => stream,
        Ok(Err(NotStarted::Unusable(why))) => {
            hx.metrics.refused("workspace_unusable");
            return Err(ApiError::conflict("workspace_unusable", why));
        }
        Ok(Err(NotStarted::Failed(e))) => {
            tracing::error!(error = %format!("{e:#}"), "a command could not start");
            return Err(ApiError::internal(format!(
                "the command could not start: {e:#}"
            )));
        }
        Err(_) => return Err(ApiError::internal("the command's start was cut short")),
    };
    Ok((
        [
            (axum::http::header::CONTENT_TYPE, "application/x-ndjson"),
            (axum::http::header::CACHE_CONTROL, "no-store"),
        ],
        Body::from_stream(stream),
    )
        .into_response())
}

async fn stop(
    State(hx): State<Arc<Hostexec>>,
    Path(call_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    match hx.calls.by_id(&call_id) {
        Some(running) => {
            running.kill(KilledBy::Stop);
            Ok(Json(json!({"stopped": true, "call_id": call_id})))
        }
        None => Err(ApiError::not_found("running call", &call_id)),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AuditQuery {
    chat: Option<String>,
    limit: Option<usize>,
}

async fn audit(
    State(hx): State<Arc<Hostexec>>,
    query: Result<Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_input("query", e.body_text()))?;
    let limit = tandem_shared::http::list_limit(q.limit)?;
    if let Some(chat) = &q.chat {
        if !is_chat_id(chat) {
            return Err(ApiError::bad_input(
                "chat",
                "is not a chat id (letters, digits and _, 64 at most)",
            ));
        }
    }
    let store = hx.store.clone();
    let rows = tokio::task::spawn_blocking(move || store.audit(q.chat.as_deref(), limit))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))??;
    Ok(Json(json!({ "audit": rows })))
}

#[cfg(test)]
mod tests {
    #[test]
    fn chat_ids_are_letters_digits_and_underscores() {
        assert!(super::is_chat_id("c_01AbZ"));
        assert!(super::is_chat_id(&"a".repeat(64)));
        assert!(!super::is_chat_id(&"a".repeat(65)));
        assert!(!super::is_chat_id(""));
        assert!(!super::is_chat_id("../x"));
        assert!(!super::is_chat_id("a-b"));
    }
}
