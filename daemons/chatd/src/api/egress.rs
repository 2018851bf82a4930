//! egressd's routes as chatd serves them: a chat's egress preset and rules
//! (`/conversations/{id}/egress`, `…/egress/rules`), the settings in force
//! and the audit (`/egress/settings`, `/egress/audit`). chatd checks the
//! chat exists and forwards; egressd owns the data and the answers. Cards
//! are answered on `/conversations/{id}/consent` like every other card.
//! Every change of a chat's preset or rules is said in the chat with an
//! `egress.updated` event.

use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use reqwest::Method;
use serde_json::Value;
use tandem_shared::http::ApiError;

use super::Json;
use crate::store::queries::{self, Trashed};
use crate::App;

/// 404 unless the conversation exists (in the trash too: its rules stay).
async fn known(app: &App, id: &str) -> Result<(), ApiError> {
    let cid = id.to_string();
    app.store
        .read(move |conn| queries::conversation(conn, &cid, Trashed::Include).map(|_| ()))
        .await
}

fn answer(status: axum::http::StatusCode, value: Value) -> Response {
    if value.is_null() {
        return status.into_response();
    }
    (status, axum::Json(value)).into_response()
}

/// Gives a chat made with an agent the agent's network: its preset, or
/// the highest one under the box's ceiling when egressd refuses it as
/// above. Without egressd the chat has egressd's default when it comes.
pub(super) async fn start_with(app: &App, chat: &str, preset: crate::words::NetPreset) {
    use crate::words::NetPreset;
    let path = format!("/chats/{chat}/egress");
    let lower = [NetPreset::All, NetPreset::Registries, NetPreset::Off];
    for tried in lower.into_iter().filter(|p| *p as u8 <= preset as u8) {
        let body = serde_json::json!({ "preset": tried });
        match app.egress.forward(Method::PUT, &path, Some(&body)).await {
            Ok(_) => return,
            Err(e) if e.kind == "egress_above_ceiling" => continue,
            Err(e) => {
                tracing::warn!(conversation = %chat, error = %e.kind,
                    "egressd did not take the agent's network: the chat has the default");
                return;
            }
        }
    }
}

/// Forwards a chat's route to egressd once the chat is known to exist.
async fn for_chat(
    app: &App,
    id: &str,
    method: Method,
    path: &str,
    body: Option<&Value>,
) -> Result<Response, ApiError> {
    known(app, id).await?;
    let (status, value) = app.egress.forward(method, path, body).await?;
    Ok(answer(status, value))
}

pub async fn preset(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    for_chat(&app, &id, Method::GET, &format!("/chats/{id}/egress"), None).await
}

/// Forwards a change of a chat's network, then says it in the chat.
async fn change(
    app: &App,
    id: &str,
    method: Method,
    path: &str,
    body: Option<&Value>,
) -> Result<Response, ApiError> {
    let answer = for_chat(app, id, method, path, body).await?;
    app.runs.announce_egress(id).await;
    Ok(answer)
}

pub async fn set_preset(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Json(body): Json<Value>,
) -> Result<Response, ApiError> {
    let path = format!("/chats/{id}/egress");
    change(&app, &id, Method::PUT, &path, Some(&body)).await
}

pub async fn rules(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    for_chat(&app, &id, Method::GET, &format!("/chats/{id}/rules"), None).await
}

pub async fn add_rule(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Json(body): Json<Value>,
) -> Result<Response, ApiError> {
    let path = format!("/chats/{id}/rules");
    change(&app, &id, Method::POST, &path, Some(&body)).await
}

pub async fn remove_rule(
    State(app): State<Arc<App>>,
    Path((id, rule)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    if !rule.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(ApiError::not_found("rule", &rule));
    }
    let path = format!("/chats/{id}/rules/{rule}");
    change(&app, &id, Method::DELETE, &path, None).await
}

pub async fn settings(State(app): State<Arc<App>>) -> Result<Response, ApiError> {
    let (status, value) = app.egress.forward(Method::GET, "/settings", None).await?;
    Ok(answer(status, value))
}

pub async fn audit(
    State(app): State<Arc<App>>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let path = match query {
        Some(q) => format!("/audit?{q}"),
        None => "/audit".to_string(),
    };
    let (status, value) = app.egress.forward(Method::GET, &path, None).await?;
    Ok(answer(status, value))
}
