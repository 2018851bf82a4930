//! egressd's API on its unix socket (`egress.sock`, 0600 in a 0700 folder:
//! only chatd's user reaches it): `GET /health`, a chat's preset
//! (`GET|PUT /chats/{id}/egress`), and the audit (`GET /audit`).

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use tandem_shared::http::ApiError;

use crate::proxy::Preset;
use crate::store::Filter;
use crate::Egress;

pub fn router(egress: Arc<Egress>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/chats/{id}/egress", get(preset).put(set_preset))
        .route("/audit", get(audit))
        .with_state(egress)
}

async fn health(State(egress): State<Arc<Egress>>) -> Json<Value> {
    Json(json!({
        "ok": true,
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_s": egress.started.elapsed().as_secs(),
        "chats": egress.open_chats(),
        "ceiling": egress.config.ceiling,
    }))
}

/// A chat id is chatd's: letters, digits and `_`, so it is a safe folder name.
fn check_chat(id: &str) -> Result<(), ApiError> {
    if id.is_empty() || id.len() > 64 || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err(ApiError::bad_input(
            "id",
            "is not a chat id (letters, digits and _, 64 at most)",
        ));
    }
    Ok(())
}

async fn preset(
    State(egress): State<Arc<Egress>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    check_chat(&id)?;
    let preset = egress.store.preset(&id)?.unwrap_or_else(|| "off".into());
    let effective = Preset::parse(&preset)
        .unwrap_or(Preset::Off)
        .capped(egress.config.ceiling());
    Ok(Json(json!({
        "chat": id,
        "preset": preset,
        "effective": effective.as_str(),
        "ceiling": egress.config.ceiling,
        "socket": egress.socket_of(&id),
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PresetBody {
    preset: String,
}

async fn set_preset(
    State(egress): State<Arc<Egress>>,
    Path(id): Path<String>,
    body: Result<Json<PresetBody>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    check_chat(&id)?;
    let Json(body) = body.map_err(|e| ApiError::bad_input("body", e.body_text()))?;
    let preset = Preset::parse(&body.preset).map_err(|e| ApiError::bad_input("preset", e))?;
    egress.store.set_preset(&id, preset.as_str())?;
    egress
        .open_chat(&id, preset)
        .map_err(|e| ApiError::internal(format!("the chat's socket could not be made: {e}")))?;
    preset_answer(&egress, &id, preset)
}

fn preset_answer(egress: &Egress, id: &str, preset: Preset) -> Result<Json<Value>, ApiError> {
    Ok(Json(json!({
        "chat": id,
        "preset": preset.as_str(),
        "effective": preset.capped(egress.config.ceiling()).as_str(),
        "ceiling": egress.config.ceiling,
        "socket": egress.socket_of(id),
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AuditQuery {
    chat: Option<String>,
    host: Option<String>,
    verdict: Option<String>,
    limit: Option<usize>,
}

async fn audit(
    State(egress): State<Arc<Egress>>,
    query: Result<Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_input("query", e.body_text()))?;
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_input(
            "limit",
            format!("{limit} is outside 1..=1000"),
        ));
    }
    if let Some(v) = &q.verdict {
        if !["allowed", "refused", "failed"].contains(&v.as_str()) {
            return Err(ApiError::bad_input(
                "verdict",
                "use allowed, refused or failed",
            ));
        }
    }
    let rows = egress.store.audit(&Filter {
        chat: q.chat,
        host: q.host,
        verdict: q.verdict,
        limit,
    })?;
    Ok(Json(json!({ "audit": rows })))
}
