//! Web Push's routes (docs/api.md "Push"): the public key the page
//! subscribes with, a browser's subscription stored or removed, the list
//! (which push service, never an endpoint) and a test push. The sending is
//! `push/`'s.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};
use tandem_shared::http::ApiError;

use super::Json;
use crate::push::{endpoint, Message};
use crate::store;
use crate::App;

/// `GET /push/key`: the VAPID public key (base64url, uncompressed P-256).
pub async fn key(State(app): State<Arc<App>>) -> Response {
    axum::Json(json!({"public_key": app.push.public_key()})).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubscribeBody {
    endpoint: String,
    keys: KeysBody,
    /// `PushSubscription.toJSON()` carries it; push services here never set it.
    #[serde(rename = "expirationTime", default)]
    _expiration_time: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeysBody {
    p256dh: String,
    auth: String,
}

/// `POST /push/subscribe {endpoint, keys: {p256dh, auth}}`: 201 stored (200
/// when the endpoint was there: its keys renewed); the oldest past 10 go.
pub async fn subscribe(
    State(app): State<Arc<App>>,
    Json(body): Json<SubscribeBody>,
) -> Result<Response, ApiError> {
    let loopback = app.push.loopback();
    let parsed = endpoint::parse(&body.endpoint, loopback)
        .map_err(|why| ApiError::bad_input("endpoint", why))?;
    endpoint::keys(&body.keys.p256dh, &body.keys.auth)
        .map_err(|(field, why)| ApiError::bad_input(field, why))?;
    endpoint::resolve(&parsed, &app.push.policy(), loopback)
        .await
        .map_err(|why| ApiError::bad_input("endpoint", why))?;
    let now = tandem_shared::time::now_rfc3339();
    let SubscribeBody { endpoint, keys, .. } = body;
    let done = app
        .store
        .write(move |ctx| {
            Ok(store::push::subscribe(
                ctx.conn(),
                &endpoint,
                &keys.p256dh,
                &keys.auth,
                &now,
            )?)
        })
        .await?;
    tracing::info!(subscription = %done.id, created = done.created, dropped = done.dropped.len(),
        "push: a browser subscribed");
    let status = if done.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        axum::Json(json!({"id": done.id, "dropped": done.dropped})),
    )
        .into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnsubscribeBody {
    endpoint: String,
}

/// `DELETE /push/subscribe {endpoint}`: answers how many went (0 or 1).
pub async fn unsubscribe(
    State(app): State<Arc<App>>,
    Json(body): Json<UnsubscribeBody>,
) -> Result<Response, ApiError> {
    if body.endpoint.is_empty() || body.endpoint.len() > endpoint::MAX_ENDPOINT {
        return Err(ApiError::bad_input(
            "endpoint",
            format!("must be 1 to {} characters", endpoint::MAX_ENDPOINT),
        ));
    }
    let deleted = app
        .store
        .write(move |ctx| Ok(store::push::unsubscribe(ctx.conn(), &body.endpoint)?))
        .await?;
    tracing::info!(deleted, "push: a browser unsubscribed");
    Ok(axum::Json(json!({"deleted": deleted})).into_response())
}

/// `GET /push/subscriptions`: each browser's id, push service and last push.
pub async fn list(State(app): State<Arc<App>>) -> Result<Response, ApiError> {
    let listed = app.store.read(|c| Ok(store::push::listed(c)?)).await?;
    Ok(axum::Json(json!({"subscriptions": listed})).into_response())
}

/// `POST /push/test`: a push "Test from tandem" to every browser now,
/// answered with how each went.
pub async fn test(State(app): State<Arc<App>>) -> Result<Response, ApiError> {
    let message = Message {
        title: "Test from tandem".into(),
        url: "/".into(),
        urgency: crate::push::Urgency::Normal,
        about: "test".into(),
    };
    let tally = app.push.send_to_all(&message).await;
    Ok(axum::Json(tally).into_response())
}
