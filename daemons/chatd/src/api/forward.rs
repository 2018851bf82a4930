//! `/v1/chat-app/triggers` and `/v1/chat-app/connectors` and everything
//! under them, any method: after the guard (forward key, cross-site writes
//! refused), the request goes to triggerd or connectord as it came
//! (`crate::forward`); they serve these paths themselves and their answer
//! is passed back unchanged.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::response::Response;
use tandem_shared::http::ApiError;

use crate::forward::{Forward, MAX_BODY};
use crate::App;

pub async fn triggers(State(app): State<Arc<App>>, request: Request) -> Result<Response, ApiError> {
    pass(&app.triggers, request).await
}

pub async fn connectors(
    State(app): State<Arc<App>>,
    request: Request,
) -> Result<Response, ApiError> {
    pass(&app.connectors, request).await
}

async fn pass(to: &Forward, request: Request) -> Result<Response, ApiError> {
    let (parts, body) = request.into_parts();
    // Nested under /v1/chat-app, the router sees `/triggers…`: the owner is
    // given the whole path back, query included.
    let rest = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or_else(|| parts.uri.path());
    let path = format!("/v1/chat-app{rest}");
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > MAX_BODY) {
        return Err(ApiError::too_large("the request body", MAX_BODY));
    }
    let bytes = axum::body::to_bytes(body, MAX_BODY)
        .await
        .map_err(|_| ApiError::too_large("the request body", MAX_BODY))?;
    let content_type = parts.headers.get(header::CONTENT_TYPE).cloned();
    to.forward(parts.method, &path, content_type, bytes).await
}
