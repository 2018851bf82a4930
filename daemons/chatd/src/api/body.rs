//! Request bodies: read with the size limit (413 naming it) and parsed as
//! JSON (400 naming the field) before anything is stored.

use std::sync::Arc;

use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
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

/// Parses a body; an empty body reads as `{}` so all-optional bodies may be left out.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let bytes: &[u8] = if bytes.iter().all(|b| b.is_ascii_whitespace()) {
        b"{}"
    } else {
        bytes
    };
    // Every body of the contract is an object; serde would also read a
    // struct from an array (`["hi"]`), which no client means.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_input",
            "body: must be a JSON object",
        )
        .with("field", "body"));
    }
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        // Text that is not JSON (or is cut short) is the body's fault, not a
        // field's: serde_path_to_error would name "?" or the field it was in.
        let field = if inner.is_syntax() || inner.is_eof() {
            "body".to_string()
        } else if path == "." {
            // A missing or unknown field is named inside serde's message.
            let message = inner.to_string();
            match message.split('`').nth(1) {
                Some(name) if message.contains("field") => name.to_string(),
                _ => "body".to_string(),
            }
        } else {
            path
        };
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_input",
            format!("{field}: {inner}"),
        )
        .with("field", field)
    })?;
    // serde_path_to_error stops after the value: text after it (`{..} junk`)
    // would pass unseen, so check the rest is only whitespace.
    deserializer.end().map_err(|err| {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_input", format!("body: {err}"))
            .with("field", "body")
    })?;
    Ok(value)
}
