//! egressd's API on its unix socket (`egress.sock`, 0600 in a 0700 folder,
//! and every caller's uid checked against egressd's own): health, metrics,
//! each chat's preset and rules, the consent cards and their answers, the
//! settings in force and the audit.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use tandem_shared::http::ApiError;
use tandem_shared::netpolicy;

use crate::gate::{AnswerError, Answered, CardEvent};
use crate::policy::{Cards, Preset};
use crate::proxy::is_chat_id;
use crate::store::Filter;
use crate::verdicts::{AuditVerdict, RuleSource, RuleVerdict};
use crate::Egress;

pub fn router(egress: Arc<Egress>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/settings", get(settings))
        .route("/chats/{id}/egress", get(preset).put(set_preset))
        .route("/chats/{id}/rules", get(rules).post(add_rule))
        .route("/chats/{id}/rules/{rule}", delete(remove_rule))
        .route("/cards", get(cards))
        .route("/cards/stream", get(card_stream))
        .route("/consent", post(consent))
        .route("/audit", get(audit))
        .merge(tandem_shared::metrics::router(egress.registry.clone()))
        .with_state(egress)
}

/// The API's listener: a connection from another uid is dropped before a
/// byte is read (shared with hostexecd).
pub use tandem_shared::http::PeerChecked;

async fn health(State(egress): State<Arc<Egress>>) -> Json<Value> {
    let settings = egress.gate().settings();
    Json(json!({
        "ok": true,
        "version": env!("CARGO_PKG_VERSION"),
        "pid": std::process::id(),
        "uptime_s": egress.started.elapsed().as_secs(),
        "chats": egress.open_chats(),
        "listen": egress.listen.to_string(),
        "ceiling": settings.ceiling.as_str(),
        "cards_waiting": egress.gate().pending_cards().len(),
        "card_listeners": egress.gate().listeners(),
    }))
}

async fn settings(State(egress): State<Arc<Egress>>) -> Json<Value> {
    let s = egress.gate().settings();
    Json(json!({
        "ceiling": s.ceiling.as_str(),
        "default_preset": s.default_preset.as_str(),
        "registries": s.registries,
        "always_allowed": s.always.iter().map(|(h, p)| match p {
            Some(p) => format!("{h}:{p}"),
            None => h.clone(),
        }).collect::<Vec<_>>(),
        "ports": s.ports,
        "listen": egress.listen.to_string(),
        "card_wait_s": s.card_wait.as_secs(),
        "tunnel_idle_s": s.idle.as_secs(),
        "tunnels_per_chat": s.tunnels_per_chat,
    }))
}

fn check_chat(id: &str) -> Result<(), ApiError> {
    if !is_chat_id(id) {
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
    Ok(preset_answer(&egress, &id))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PresetBody {
    preset: String,
    /// Whether a person can be asked; runs nobody watches set it false.
    cards: Option<bool>,
}

async fn set_preset(
    State(egress): State<Arc<Egress>>,
    Path(id): Path<String>,
    body: Result<Json<PresetBody>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    check_chat(&id)?;
    let Json(body) = body.map_err(|e| ApiError::bad_input("body", e.body_text()))?;
    let preset = Preset::parse(&body.preset).map_err(|e| ApiError::bad_input("preset", e))?;
    let ceiling = egress.gate().settings().ceiling;
    if preset.capped(ceiling) != preset {
        // Never capped in silence: the person would believe the chat has it.
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "egress_above_ceiling",
            format!(
                "preset: {} is above this box's ceiling ({}); the administrator sets the ceiling \
                 ([egress] ceiling)",
                preset.as_str(),
                ceiling.as_str()
            ),
        )
        .with("field", "preset")
        .with("ceiling", ceiling.as_str()));
    }
    let cards = body
        .cards
        .map_or_else(|| egress.gate().chat(&id).1, Cards::from_flag);
    // The socket first: when it cannot be made, nothing is saved.
    egress
        .open_chat(&id)
        .map_err(|e| ApiError::internal(format!("the chat's socket could not be made: {e:#}")))?;
    egress.gate().set_chat(&id, preset, cards)?;
    Ok(preset_answer(&egress, &id))
}

fn preset_answer(egress: &Egress, id: &str) -> Json<Value> {
    let (preset, cards) = egress.gate().chat(id);
    let ceiling = egress.gate().settings().ceiling;
    Json(json!({
        "chat": id,
        "preset": preset.as_str(),
        "effective": preset.capped(ceiling).as_str(),
        "ceiling": ceiling.as_str(),
        "cards": cards.flag(),
        "socket": egress.gate().known(id).then(|| egress.socket_of(id)),
    }))
}

async fn rules(
    State(egress): State<Arc<Egress>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    check_chat(&id)?;
    Ok(Json(json!({"chat": id, "rules": egress.gate().rules(&id)})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleBody {
    verdict: String,
    /// `host:port` (or give `port` apart).
    host: String,
    port: Option<u16>,
}

async fn add_rule(
    State(egress): State<Arc<Egress>>,
    Path(id): Path<String>,
    body: Result<Json<RuleBody>, axum::extract::rejection::JsonRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    check_chat(&id)?;
    let Json(body) = body.map_err(|e| ApiError::bad_input("body", e.body_text()))?;
    let Some(verdict) = RuleVerdict::parse(&body.verdict) else {
        return Err(ApiError::bad_input("verdict", "use allow or deny"));
    };
    if body.host.len() > 255 {
        return Err(ApiError::bad_input("host", "is over 255 characters"));
    }
    let names_port = match body.host.strip_prefix('[') {
        Some(rest) => rest.contains("]:"),
        None => body.host.contains(':'),
    };
    if !names_port && body.port.is_none() {
        return Err(ApiError::bad_input(
            "port",
            "name the port: \"host\": \"example.org:443\", or \"port\": 443",
        ));
    }
    let (host, port) = netpolicy::split_authority(&body.host, body.port.unwrap_or(443))
        .map_err(|e| ApiError::bad_input("host", e))?;
    let port = match (port, body.port) {
        (p, Some(given)) if p != given => {
            return Err(ApiError::bad_input(
                "port",
                format!("{given} disagrees with the port in host ({p})"),
            ))
        }
        (p, _) => p,
    };
    let host = match host {
        netpolicy::Host::Ip(ip) => ip.to_string(),
        netpolicy::Host::Name(name) => name,
    };
    let rule = egress
        .gate()
        .add_rule(&id, verdict, &host, port, RuleSource::Api)?;
    Ok((StatusCode::CREATED, Json(json!(rule))))
}

async fn remove_rule(
    State(egress): State<Arc<Egress>>,
    Path((id, rule)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    check_chat(&id)?;
    if egress.gate().remove_rule(&id, &rule)? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found("rule", &rule))
    }
}

async fn cards(State(egress): State<Arc<Egress>>) -> Json<Value> {
    Json(json!({"cards": egress.gate().pending_cards()}))
}

/// The cards as they come and go, one JSON object a line: first `sync`
/// with the ids of the cards waiting now, then each of them, then `card`
/// and `closed` events. chatd holds this open; while nobody does, a card
/// cannot be shown and the host is refused at once. A reader too slow to
/// keep up is cut off: it reconnects and syncs again, so no `closed` is lost.
async fn card_stream(State(egress): State<Arc<Egress>>) -> Response {
    let (waiting, rx) = egress.gate().subscribe();
    let mut first = vec![CardEvent::Sync {
        card_ids: waiting.iter().map(|c| c.card_id.clone()).collect(),
    }];
    first.extend(waiting.into_iter().map(CardEvent::Card));
    let shutdown = egress.shutdown.clone();
    let stream =
        futures_util::stream::unfold((first.into_iter(), rx), |(mut first, mut rx)| async move {
            let event = match first.next() {
                Some(event) => event,
                None => match rx.recv().await {
                    Ok(event) => event,
                    Err(_) => return None,
                },
            };
            let mut line = serde_json::to_vec(&event).unwrap_or_default();
            line.push(b'\n');
            Some((Ok::<_, Infallible>(bytes::Bytes::from(line)), (first, rx)))
        });
    // The stream ends when egressd stops, so a graceful stop does not wait on it.
    let stream = futures_util::StreamExt::take_until(stream, async move { shutdown.wait().await });
    (
        [(axum::http::header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(stream),
    )
        .into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConsentBody {
    chat: String,
    card_id: String,
    decision: String,
}

/// An answer to a card: 200 taken, 204 the same answer again, 409 another
/// answer came first or the ceiling no longer lets it, 410 nobody waits.
async fn consent(
    State(egress): State<Arc<Egress>>,
    body: Result<Json<ConsentBody>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(body) = body.map_err(|e| ApiError::bad_input("body", e.body_text()))?;
    check_chat(&body.chat)?;
    match egress
        .gate()
        .answer(&body.chat, &body.card_id, &body.decision)
    {
        Ok(Answered::Taken { rule }) => Ok(Json(json!({
            "card_id": body.card_id,
            "decision": body.decision,
            "rule": rule,
        }))
        .into_response()),
        Ok(Answered::Again) => Ok(StatusCode::NO_CONTENT.into_response()),
        Err(AnswerError::BadDecision(why)) => Err(ApiError::bad_input("decision", why)),
        Err(AnswerError::Already(given)) => Err(ApiError::conflict(
            "already_answered",
            format!("this card was answered \"{given}\" already"),
        )
        .with("decision", given)),
        Err(AnswerError::OutsideCeiling(why)) => Err(ApiError::conflict("outside_ceiling", why)),
        Err(AnswerError::Expired) | Err(AnswerError::Unknown) => Err(ApiError::new(
            StatusCode::GONE,
            "consent_expired",
            "nobody waits for this card any more",
        )),
    }
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
    let limit = tandem_shared::http::list_limit(q.limit)?;
    let verdict = match q.verdict.as_deref().map(AuditVerdict::parse) {
        None => None,
        Some(Some(verdict)) => Some(verdict),
        Some(None) => {
            return Err(ApiError::bad_input(
                "verdict",
                "use allowed, refused or failed",
            ))
        }
    };
    // Hosts are kept in the spelling requests are compared in.
    let host = q.host.map(|h| match netpolicy::parse_host(&h) {
        Ok(netpolicy::Host::Ip(ip)) => ip.to_string(),
        Ok(netpolicy::Host::Name(name)) => name,
        Err(_) => h,
    });
    let rows = egress.store().audit(&Filter {
        chat: q.chat,
        host,
        verdict,
        limit,
    })?;
    Ok(Json(json!({ "audit": rows })))
}
