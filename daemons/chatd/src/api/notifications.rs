//! The inbox's routes: `POST /notifications` (triggerd, connectord; 201, or
//! 200 with the stored one when its `key` was posted before), the list and
//! its counts, marking read, deleting, and the live stream
//! `GET /notifications/events`. Every change is published to the stream only
//! after the writer committed it.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{json, Value};
use tandem_shared::http::ApiError;
use tokio::sync::broadcast;

use super::Json;
use crate::inbox;
use crate::metrics::NotificationLabels;
use crate::store::{self, inbox::NewNotification, inbox::Source, inbox::Which};
use crate::App;

#[derive(Deserialize)]
pub struct SourceBody {
    #[serde(rename = "type")]
    kind: String,
    id: String,
    #[serde(default)]
    name: String,
}

#[derive(Deserialize)]
pub struct CreateBody {
    kind: String,
    title: String,
    #[serde(default)]
    body: String,
    source: SourceBody,
    #[serde(default)]
    conversation_id: Option<String>,
    /// An idempotency key: the same key again stores nothing.
    #[serde(default)]
    key: Option<String>,
}

fn check_chars(field: &str, text: &str, low: usize, high: usize) -> Result<(), ApiError> {
    let n = text.chars().count();
    if n < low || n > high {
        return Err(ApiError::bad_input(
            field,
            format!("must be {low} to {high} characters ({n} given)"),
        )
        .with("limit", high));
    }
    Ok(())
}

fn check(body: CreateBody) -> Result<NewNotification, ApiError> {
    if !inbox::KINDS.contains(&body.kind.as_str()) {
        return Err(ApiError::bad_input(
            "kind",
            format!(
                "{:?} is not run_ended, run_failed or needs_attention",
                body.kind
            ),
        ));
    }
    check_chars("title", &body.title, 1, inbox::MAX_TITLE)?;
    check_chars("body", &body.body, 0, inbox::MAX_BODY)?;
    if !inbox::SOURCE_TYPES.contains(&body.source.kind.as_str()) {
        return Err(ApiError::bad_input(
            "source.type",
            format!("{:?} is not trigger, connector or chatd", body.source.kind),
        ));
    }
    let id = &body.source.id;
    if id.is_empty()
        || id.len() > inbox::MAX_SOURCE_ID
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(ApiError::bad_input(
            "source.id",
            format!(
                "must be 1 to {} characters of A-Z, a-z, 0-9, _ and -",
                inbox::MAX_SOURCE_ID
            ),
        )
        .with("limit", inbox::MAX_SOURCE_ID));
    }
    check_chars("source.name", &body.source.name, 0, inbox::MAX_SOURCE_NAME)?;
    if let Some(chat) = &body.conversation_id {
        if !tandem_shared::http::is_chat_id(chat) {
            return Err(ApiError::bad_input(
                "conversation_id",
                "is not a chat id (letters, digits and _, 64 at most)",
            )
            .with("limit", 64));
        }
    }
    if let Some(key) = &body.key {
        if !inbox::is_key(key) {
            return Err(ApiError::bad_input(
                "key",
                format!(
                    "must be 1 to {} characters of A-Z, a-z, 0-9, _, :, . and -",
                    inbox::MAX_KEY
                ),
            )
            .with("limit", inbox::MAX_KEY));
        }
    }
    Ok(NewNotification {
        kind: body.kind,
        title: body.title,
        body: body.body,
        source: Source {
            kind: body.source.kind,
            id: body.source.id,
            name: body.source.name,
        },
        conversation_id: body.conversation_id,
        key: body.key,
    })
}

pub async fn create(
    State(app): State<Arc<App>>,
    Json(body): Json<CreateBody>,
) -> Result<Response, ApiError> {
    let new = check(body)?;
    let stored = app
        .store
        .write(move |ctx| {
            Ok(store::inbox::insert(
                ctx.conn(),
                &new,
                tandem_shared::time::now_unix(),
            )?)
        })
        .await?;
    let notification = stored.notification;
    if !stored.created {
        // A retry of a post that was stored: nothing new, nothing to tell.
        tracing::info!(notification = %notification.id, source = %notification.source.kind,
            source_id = %notification.source.id, "notification posted again with its key; nothing stored");
        return Ok((StatusCode::OK, axum::Json(notification)).into_response());
    }
    let pruned = stored.pruned;
    app.metrics
        .notifications
        .get_or_create(&NotificationLabels {
            kind: notification.kind.clone(),
        })
        .inc();
    app.inbox
        .publish("notification.created", &json!(notification));
    tracing::info!(notification = %notification.id, kind = %notification.kind,
        source = %notification.source.kind, source_id = %notification.source.id, pruned, "notification stored");
    Ok((StatusCode::CREATED, axum::Json(notification)).into_response())
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct ListParams {
    unread: Option<String>,
    limit: Option<String>,
}

pub async fn list(
    State(app): State<Arc<App>>,
    Query(params): Query<ListParams>,
) -> Result<axum::Json<Value>, ApiError> {
    let limit = match params.limit.as_deref() {
        None | Some("") => inbox::DEFAULT_LIMIT,
        Some(text) => match text.parse::<usize>() {
            Ok(n) if (1..=inbox::MAX_LIMIT).contains(&n) => n,
            _ => {
                return Err(ApiError::bad_input(
                    "limit",
                    format!("{text:?} is not a number from 1 to {}", inbox::MAX_LIMIT),
                )
                .with("limit", inbox::MAX_LIMIT))
            }
        },
    };
    let listing = match params.unread.as_deref() {
        None | Some("" | "0" | "false") => store::inbox::Listing::All,
        Some("1" | "true") => store::inbox::Listing::Unread,
        Some(other) => {
            return Err(ApiError::bad_input(
                "unread",
                format!("{other:?} is not 1 or 0"),
            ))
        }
    };
    let now = tandem_shared::time::now_unix();
    let (notifications, (unread, _)) = app
        .store
        .read(move |conn| {
            Ok((
                store::inbox::list(conn, listing, limit, now)?,
                store::inbox::counts(conn, now)?,
            ))
        })
        .await?;
    Ok(axum::Json(
        json!({"notifications": notifications, "unread": unread}),
    ))
}

pub async fn count(State(app): State<Arc<App>>) -> Result<axum::Json<Value>, ApiError> {
    let now = tandem_shared::time::now_unix();
    let (unread, total) = app
        .store
        .read(move |conn| Ok(store::inbox::counts(conn, now)?))
        .await?;
    Ok(axum::Json(json!({"unread": unread, "total": total})))
}

/// `{ids: [...]}` or `{all: true}`; a delete may add `read_only: true`.
#[derive(Deserialize, Default)]
#[serde(default)]
pub struct SelectBody {
    ids: Option<Vec<String>>,
    all: Option<bool>,
    read_only: Option<bool>,
}

fn which(body: &SelectBody) -> Result<Which, ApiError> {
    let all = body.all == Some(true);
    match (&body.ids, all) {
        (Some(_), true) => Err(ApiError::bad_input(
            "ids",
            "give ids or all: true, not both",
        )),
        (None, false) => Err(ApiError::bad_input("ids", "give ids: [...] or all: true")),
        (None, true) => Ok(Which::All),
        (Some(ids), false) => {
            if ids.len() > inbox::MAX_IDS {
                return Err(ApiError::bad_input(
                    "ids",
                    format!("{} ids is more than {}", ids.len(), inbox::MAX_IDS),
                )
                .with("limit", inbox::MAX_IDS));
            }
            if ids.iter().any(|id| id.is_empty() || id.len() > 64) {
                return Err(
                    ApiError::bad_input("ids", "each id is 1 to 64 characters").with("limit", 64)
                );
            }
            Ok(Which::Ids(ids.clone()))
        }
    }
}

/// The event data naming what changed.
fn selection_data(which: &Which, changed: Vec<String>) -> Value {
    match which {
        Which::All => json!({"all": true}),
        Which::Ids(_) => json!({ "ids": changed }),
    }
}

pub async fn mark_read(
    State(app): State<Arc<App>>,
    Json(body): Json<SelectBody>,
) -> Result<axum::Json<Value>, ApiError> {
    let which = which(&body)?;
    let selection = which.clone();
    let (updated, changed) = app
        .store
        .write(move |ctx| {
            Ok(store::inbox::mark_read(
                ctx.conn(),
                &selection,
                tandem_shared::time::now_unix(),
            )?)
        })
        .await?;
    if updated > 0 {
        app.inbox
            .publish("notification.read", &selection_data(&which, changed));
    }
    tracing::info!(updated, "notifications marked read");
    Ok(axum::Json(json!({ "updated": updated })))
}

pub async fn remove(
    State(app): State<Arc<App>>,
    Json(body): Json<SelectBody>,
) -> Result<axum::Json<Value>, ApiError> {
    let which = which(&body)?;
    let read_only = body.read_only == Some(true);
    let removal = if read_only {
        store::inbox::Removal::ReadOnly
    } else {
        store::inbox::Removal::Any
    };
    let selection = which.clone();
    let (deleted, gone) = app
        .store
        .write(move |ctx| {
            Ok(store::inbox::delete(
                ctx.conn(),
                &selection,
                removal,
                tandem_shared::time::now_unix(),
            )?)
        })
        .await?;
    if deleted > 0 {
        let mut data = selection_data(&which, gone);
        if read_only {
            data["read_only"] = json!(true);
        }
        app.inbox.publish("notification.deleted", &data);
    }
    tracing::info!(deleted, read_only, "notifications deleted");
    Ok(axum::Json(json!({ "deleted": deleted })))
}

/// `GET /notifications/events`: what commits from now on (no replay), and
/// `: keepalive` every `sse_keepalive_s`. A device that falls too far behind
/// is cut off: it reconnects and reloads the list.
pub async fn events(State(app): State<Arc<App>>) -> Response {
    // Subscribed before the answer's head goes out: a device that has the
    // head sees every change committed after it.
    let live = app.inbox.subscribe();
    app.metrics.sse_devices.inc();
    let every = Duration::from_secs(app.config.sse_keepalive_s);
    let listener = Listener {
        live,
        keepalive: tokio::time::interval_at(tokio::time::Instant::now() + every, every),
        stopping: {
            let shutdown = app.shutdown.clone();
            Box::pin(async move { shutdown.wait().await })
        },
        app,
    };
    let body = futures_util::stream::unfold(listener, |mut listener| async move {
        let frame = listener.next().await?;
        Some((Ok::<Bytes, std::convert::Infallible>(frame), listener))
    });
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::HeaderName::from_static("x-accel-buffering"), "no"),
        ],
        Body::from_stream(body),
    )
        .into_response()
}

struct Listener {
    app: Arc<App>,
    live: broadcast::Receiver<Bytes>,
    keepalive: tokio::time::Interval,
    stopping: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.app.metrics.sse_devices.dec();
    }
}

impl Listener {
    /// The next frame; `None` ends the stream.
    async fn next(&mut self) -> Option<Bytes> {
        tokio::select! {
            got = self.live.recv() => match got {
                Ok(frame) => Some(frame),
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::info!(missed, "an inbox device fell behind; its stream ends");
                    None
                }
                Err(broadcast::error::RecvError::Closed) => None,
            },
            _ = self.keepalive.tick() => Some(Bytes::from_static(b": keepalive\n\n")),
            _ = &mut self.stopping => None,
        }
    }
}
