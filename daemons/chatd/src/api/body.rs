//! Request bodies: read with the size limit (413 naming it) and parsed as
//! JSON (400 naming the field) before anything is stored.

use std::sync::Arc;

use axum::extract::{FromRequest, Request};
use serde::de::DeserializeOwned;
use tandem_shared::http::ApiError;

use crate::App;

/// A JSON body read under `max_body_bytes`.
pub struct Json<T>(pub T);

impl<T: DeserializeOwned + Send> FromRequest<Arc<App>> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, app: &Arc<App>) -> Result<Self, ApiError> {
        let limit = app.config.max_body_bytes;
        let declared = request
            .headers()
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        if declared.is_some_and(|n| n > limit) {
            return Err(ApiError::too_large("the request body", limit));
        }
        let bytes = axum::body::to_bytes(request.into_body(), limit)
            .await
            .map_err(|_| ApiError::too_large("the request body", limit))?;
        parse(&bytes).map(Json)
    }
}

/// Parses a body (`tandem_shared::http::parse_body`).
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    tandem_shared::http::parse_body(bytes)
}

/// The JSON of a route's answer, read back when a route calls another (a
/// slash command runs the route it stands for).
pub async fn json_of(response: axum::response::Response) -> Result<serde_json::Value, ApiError> {
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .map_err(|_| ApiError::internal("a route's answer was not read"))?;
    Ok(serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null))
}
