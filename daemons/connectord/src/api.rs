//! connectord's API on `connectors.sock` (0600, callers of connectord's
//! own uid only), under the paths chatd forwards from its front door:
//!
//! - `GET|POST /v1/chat-app/connectors`: the list, a new binding (201).
//! - `GET /v1/chat-app/connectors/kinds`: what each kind takes.
//! - `GET|PATCH|PUT|DELETE …/{id}`: read, change (a left-out token is
//!   kept), delete. `POST …/{id}/enable|disable`.
//! - `POST …/{id}/test`: asks the platform who the token is.
//! - `GET …/{id}/senders`: strangers who wrote; `POST …/{id}/senders/{s}/allow`.
//! - `GET /health`, `GET /metrics`.
//!
//! No answer, error or log line holds a token: a binding says `has_token`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use tandem_shared::chatd::ChatError;
use tandem_shared::http::ApiError;
use tandem_shared::secrets::Secret;
use tandem_shared::sync::lock;
use tandem_shared::time::{new_id, now_rfc3339};

use crate::bindings::{self, Checked, Kind, MAX_BINDINGS};
use crate::platform::{Identity, SendError};
use crate::store::{self, Stored};
use crate::Connectord;

/// The largest body a route reads.
pub const MAX_BODY: usize = 64 * 1024;

pub fn router(cd: Arc<Connectord>) -> Router {
    let one = Router::new()
        .route("/kinds", get(kinds))
        .route("/{id}", get(read).patch(update).put(update).delete(remove))
        .route("/{id}/enable", post(enable))
        .route("/{id}/disable", post(disable))
        .route("/{id}/test", post(test))
        .route("/{id}/senders", get(senders))
        .route("/{id}/senders/{sender}/allow", post(allow));
    Router::new()
        .route("/health", get(health))
        .route("/v1/chat-app/connectors", get(list).post(create))
        .nest("/v1/chat-app/connectors", one)
        .merge(tandem_shared::metrics::router(cd.registry.clone()))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route") })
        .with_state(cd)
}

fn internal(err: anyhow::Error) -> ApiError {
    tracing::error!(error = %format!("{err:#}"), "store error");
    ApiError::internal("the connector store failed; connectord's log has the details")
}

async fn body_of(body: Body) -> Result<bindings::Body, ApiError> {
    let bytes = axum::body::to_bytes(body, MAX_BODY)
        .await
        .map_err(|_| ApiError::too_large("the request body", MAX_BODY))?;
    tandem_shared::http::parse_body(&bytes)
}

async fn health(State(cd): State<Arc<Connectord>>) -> Json<Value> {
    let (bindings, connected) = {
        let links = lock(&cd.links);
        (
            links.len(),
            links
                .values()
                .filter(|l| l.state == crate::states::BindingState::Connected)
                .count(),
        )
    };
    Json(json!({
        "ok": true,
        "version": env!("CARGO_PKG_VERSION"),
        "pid": std::process::id(),
        "uptime_s": cd.started.elapsed().as_secs(),
        "bindings": bindings,
        "connected": connected,
        "working": lock(&cd.workers).len(),
    }))
}

async fn kinds() -> Json<Value> {
    Json(bindings::kinds())
}

async fn stored(cd: &Connectord, id: &str) -> Result<Stored, ApiError> {
    let i = id.to_string();
    cd.store
        .call(move |conn| store::binding(conn, &i))
        .await
        .map_err(internal)?
        .ok_or_else(|| ApiError::not_found("connector", id))
}

async fn list(State(cd): State<Arc<Connectord>>) -> Result<Json<Value>, ApiError> {
    let all = cd
        .store
        .call(|conn| store::bindings(conn))
        .await
        .map_err(internal)?;
    let list: Vec<Value> = all
        .iter()
        .map(|b| bindings::view(b, cd.status(b)))
        .collect();
    Ok(Json(json!({"connectors": list, "max": MAX_BINDINGS})))
}

async fn read(
    State(cd): State<Arc<Connectord>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let b = stored(&cd, &id).await?;
    Ok(Json(bindings::view(&b, cd.status(&b))))
}

/// Who `token` is, as the platform says; a refusal names the field.
async fn identify(
    cd: &Connectord,
    kind: Kind,
    token: Secret,
    app: Option<Secret>,
) -> Result<Identity, ApiError> {
    let refused = |field: &str, e: SendError| match e {
        SendError::Unauthorized(reason) | SendError::Refused(reason) => ApiError::bad_input(
            field,
            format!("{} refused it: {reason}", platform_name(kind)),
        ),
        other => ApiError::new(
            StatusCode::BAD_GATEWAY,
            "platform_unreachable",
            format!("{} did not answer: {other}", platform_name(kind)),
        ),
    };
    match kind {
        Kind::Telegram => {
            let api = crate::telegram::api::BotApi::new(&cd.config.telegram_api, token)
                .map_err(|e| refused("token", e))?;
            api.get_me().await.map_err(|e| refused("token", e))
        }
        Kind::Slack => {
            let app =
                app.ok_or_else(|| ApiError::bad_input("app_token", "is required for Slack"))?;
            let api = crate::slack::api::SlackApi::new(&cd.config.slack_api, token, app)
                .map_err(|e| ApiError::internal(format!("no Slack client: {e}")))?;
            let who = api.auth_test().await.map_err(|e| refused("token", e))?;
            api.open_connection()
                .await
                .map_err(|e| refused("app_token", e))?;
            Ok(who)
        }
    }
}

fn platform_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Telegram => "Telegram",
        Kind::Slack => "Slack",
    }
}

/// The agent must be chatd's and name a model.
async fn check_agent(cd: &Connectord, id: &str) -> Result<(), ApiError> {
    match cd.chat.agent(id).await {
        Ok(Some(agent)) => {
            if agent["model"].as_str().unwrap_or("").is_empty() {
                return Err(ApiError::bad_input(
                    "agent_id",
                    format!("the agent {id} names no model: give it one in chatd first"),
                ));
            }
            Ok(())
        }
        Ok(None) => Err(ApiError::bad_input(
            "agent_id",
            format!("chatd has no agent {id}"),
        )),
        Err(ChatError::Refused {
            status, message, ..
        }) if status < 500 && status != 401 => {
            Err(ApiError::bad_input("agent_id", format!("chatd: {message}")))
        }
        Err(err) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "chatd_unavailable",
            format!("the agent could not be checked: {err}"),
        )),
    }
}

/// Stores a checked binding: tokens sealed for its id, and who they are.
async fn save(
    cd: &Arc<Connectord>,
    checked: Checked,
    before: Option<Stored>,
) -> Result<Stored, ApiError> {
    let id = before
        .as_ref()
        .map(|b| b.id.clone())
        .unwrap_or_else(|| new_id("cn_"));
    let old_tokens = before.as_ref().and_then(|b| cd.tokens(b));
    let token = match (&checked.token, &old_tokens) {
        (Some(t), _) => Secret::new(t.clone()),
        (None, Some((t, _))) => t.clone(),
        (None, None) => {
            return Err(ApiError::bad_input(
                "token",
                "the stored token does not open: give it again",
            ))
        }
    };
    let app = match (&checked.app_token, &old_tokens) {
        (Some(t), _) => Some(Secret::new(t.clone())),
        (None, Some((_, a))) => a.clone(),
        (None, None) => None,
    };
    let tokens_changed = checked.token.is_some() || checked.app_token.is_some();
    let bot = if tokens_changed || before.as_ref().is_none_or(|b| b.bot.is_none()) {
        // Well inside chatd's 30 s forward: a save the caller gave up on is
        // not made behind its back.
        let asked = identify(cd, checked.kind, token.clone(), app.clone());
        let who = tokio::time::timeout(std::time::Duration::from_secs(20), asked)
            .await
            .map_err(|_| {
                ApiError::new(
                    StatusCode::GATEWAY_TIMEOUT,
                    "platform_timeout",
                    format!(
                        "{} did not answer within 20 s: nothing was saved",
                        platform_name(checked.kind)
                    ),
                )
            })??;
        // Two readers of one bot take each other's updates (409s), and
        // both bindings would be switched off.
        let all = cd
            .store
            .call(|conn| store::bindings(conn))
            .await
            .map_err(internal)?;
        if let Some(other) = all.iter().find(|b| {
            b.id != id
                && b.kind == checked.kind.as_str()
                && b.bot.as_ref().and_then(|v| v["id"].as_str()) == Some(who.id.as_str())
        }) {
            return Err(ApiError::conflict(
                "bot_in_use",
                format!(
                    "this bot is bound already ({}): a bot answers as one agent",
                    other.id
                ),
            ));
        }
        Some(who)
    } else {
        None
    };
    if before
        .as_ref()
        .is_none_or(|b| b.agent_id != checked.agent_id)
    {
        check_agent(cd, &checked.agent_id).await?;
    }
    let now = now_rfc3339();
    let stored = Stored {
        id: id.clone(),
        kind: checked.kind.as_str().to_string(),
        name: checked.name,
        agent_id: checked.agent_id,
        enabled: checked.enabled,
        settings: serde_json::to_value(&checked.settings).unwrap_or(Value::Null),
        token: cd.seal.seal(token.expose(), &id),
        app_token: app.map(|a| cd.seal.seal(a.expose(), &format!("{id}:app"))),
        bot: match bot {
            Some(bot) => serde_json::to_value(bot).ok(),
            None => before.as_ref().and_then(|b| b.bot.clone()),
        },
        position: before.as_ref().map(|b| b.position).unwrap_or(0),
        // Saved again by a person: whatever switched it off is theirs to have fixed.
        off_reason: None,
        created: before
            .as_ref()
            .map(|b| b.created.clone())
            .unwrap_or_else(|| now.clone()),
        updated: now,
    };
    let is_new = before.is_none();
    let s = stored.clone();
    let inserted = cd
        .store
        .call(move |conn| {
            let tx = conn.transaction()?;
            if is_new && store::count_bindings(&tx)? >= MAX_BINDINGS {
                return Ok(false);
            }
            store::put_binding(&tx, &s)?;
            tx.commit()?;
            Ok(true)
        })
        .await
        .map_err(internal)?;
    if !inserted {
        return Err(too_many());
    }
    crate::restart_link(cd, &id).await.map_err(internal)?;
    tracing::info!(binding = %id, kind = %stored.kind, created = is_new, "binding saved");
    Ok(stored)
}

fn too_many() -> ApiError {
    ApiError::conflict(
        "too_many_connectors",
        format!("{MAX_BINDINGS} connectors is the most: delete one first"),
    )
    .with("limit", MAX_BINDINGS)
}

async fn create(State(cd): State<Arc<Connectord>>, body: Body) -> Result<Response, ApiError> {
    let body = body_of(body).await?;
    let checked = bindings::check(body, None)?;
    let count = cd
        .store
        .call(|conn| store::count_bindings(conn))
        .await
        .map_err(internal)?;
    if count >= MAX_BINDINGS {
        return Err(too_many());
    }
    let b = save(&cd, checked, None).await?;
    Ok((StatusCode::CREATED, Json(bindings::view(&b, cd.status(&b)))).into_response())
}

async fn update(
    State(cd): State<Arc<Connectord>>,
    Path(id): Path<String>,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let before = stored(&cd, &id).await?;
    let body = body_of(body).await?;
    let checked = bindings::check(body, Some(&before))?;
    let b = save(&cd, checked, Some(before)).await?;
    Ok(Json(bindings::view(&b, cd.status(&b))))
}

async fn remove(
    State(cd): State<Arc<Connectord>>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let i = id.clone();
    let gone = cd
        .store
        .call(move |conn| store::delete_binding(conn, &i))
        .await
        .map_err(internal)?;
    if !gone {
        return Err(ApiError::not_found("connector", &id));
    }
    lock(&cd.links).remove(&id);
    tracing::info!(binding = %id, "binding deleted");
    Ok(StatusCode::NO_CONTENT)
}

/// Which way `switch` turns a binding.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Turn {
    On,
    Off,
}

async fn switch(cd: &Arc<Connectord>, id: &str, turn: Turn) -> Result<Json<Value>, ApiError> {
    let on = turn == Turn::On;
    let i = id.to_string();
    let now = now_rfc3339();
    let found = cd
        .store
        .call(move |conn| store::set_enabled(conn, &i, on, None, &now))
        .await
        .map_err(internal)?;
    if !found {
        return Err(ApiError::not_found("connector", id));
    }
    crate::restart_link(cd, id).await.map_err(internal)?;
    let b = stored(cd, id).await?;
    Ok(Json(bindings::view(&b, cd.status(&b))))
}

async fn enable(
    State(cd): State<Arc<Connectord>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    switch(&cd, &id, Turn::On).await
}

async fn disable(
    State(cd): State<Arc<Connectord>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    switch(&cd, &id, Turn::Off).await
}

async fn test(
    State(cd): State<Arc<Connectord>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let b = stored(&cd, &id).await?;
    let Some((token, app)) = cd.tokens(&b) else {
        return Ok(Json(
            json!({"ok": false, "reason": "the stored token does not open with this connectors.key: save it again"}),
        ));
    };
    let kind = Kind::parse(&b.kind).unwrap_or(Kind::Telegram);
    match identify(&cd, kind, token, app).await {
        Ok(bot) => Ok(Json(json!({"ok": true, "bot": bot}))),
        Err(err) => Ok(Json(json!({"ok": false, "reason": err.message}))),
    }
}

async fn senders(
    State(cd): State<Arc<Connectord>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    stored(&cd, &id).await?;
    let list = cd
        .store
        .call(move |conn| store::strangers(conn, &id))
        .await
        .map_err(internal)?;
    Ok(Json(json!({"senders": list})))
}

async fn allow(
    State(cd): State<Arc<Connectord>>,
    Path((id, sender)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let before = stored(&cd, &id).await?;
    let entry = sender.trim().to_string();
    if entry.is_empty() || entry.chars().count() > 100 || entry.chars().any(char::is_whitespace) {
        return Err(ApiError::bad_input(
            "sender",
            "must be one id or @name, at most 100 characters",
        ));
    }
    let mut settings = bindings::Settings::of(&before);
    if settings.allowlist.len() >= bindings::MAX_ALLOW {
        return Err(ApiError::bad_input(
            "allowlist",
            format!("{} entries is the most", bindings::MAX_ALLOW),
        )
        .with("limit", bindings::MAX_ALLOW));
    }
    if !settings.allowlist.contains(&entry) {
        settings.allowlist.push(entry.clone());
    }
    let mut after = before.clone();
    after.settings = serde_json::to_value(&settings).unwrap_or(Value::Null);
    after.updated = now_rfc3339();
    let (v, i, now) = (after.settings.clone(), id.clone(), after.updated.clone());
    cd.store
        .call(move |conn| {
            let tx = conn.transaction()?;
            store::set_settings(&tx, &i, &v, &now)?;
            store::forget_stranger(&tx, &i, &entry)?;
            tx.commit()
        })
        .await
        .map_err(internal)?;
    tracing::info!(binding = %id, "a sender allowed");
    Ok(Json(bindings::view(&after, cd.status(&after))))
}
