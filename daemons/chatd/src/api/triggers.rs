//! `/v1/chat-app/triggers` and everything under it, any method: after the
//! guard (forward key, cross-site writes refused), the request goes to
//! triggerd as it came (`crate::triggers`); triggerd serves these paths
//! itself and its answer is passed back unchanged.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::response::Response;
use tandem_shared::http::ApiError;

use crate::triggers::MAX_BODY;
use crate::App;

pub async fn forward(State(app): State<Arc<App>>, request: Request) -> Result<Response, ApiError> {
    let (parts, body) = request.into_parts();
    // Nested under /v1/chat-app, the router sees `/triggers…`: triggerd is
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
    app.triggers
        .forward(parts.method, &path, content_type, bytes)
        .await
}
