//! HTTP pieces every daemon shares: the CONTRACT's error shape, the unix
//! socket listener that checks its callers, body parsing. Serving with
//! timeouts and caps is `listen`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

/// `{"error": {"type", "message", ...numbers}}` with a fitting status.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub kind: &'static str,
    pub message: String,
    pub extra: Map<String, Value>,
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            kind,
            message: message.into(),
            extra: Map::new(),
            retry_after: None,
        }
    }
    /// 400 naming the field.
    pub fn bad_input(field: &str, message: impl std::fmt::Display) -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_input",
            format!("{field}: {message}"),
        )
        .with("field", field)
    }
    pub fn not_found(what: &str, id: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no {what} with id {id:?}"),
        )
    }
    pub fn conflict(kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, kind, message)
    }
    pub fn too_large(what: &str, limit: usize) -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("{what} is larger than the limit of {limit} bytes"),
        )
        .with("limit", limit)
    }
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> ApiError {
        self.extra.insert(key.to_string(), value.into());
        self
    }
    pub fn retry_after(mut self, seconds: u64) -> ApiError {
        self.retry_after = Some(seconds);
        self
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = Map::new();
        body.insert("type".into(), Value::from(self.kind));
        body.insert("message".into(), Value::from(self.message));
        body.extend(self.extra);
        let mut response = (self.status, axum::Json(json!({ "error": body }))).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, seconds.into());
        }
        response
    }
}

impl From<rusqlite::Error> for ApiError {
    fn from(err: rusqlite::Error) -> ApiError {
        tracing::error!(error = %err, "database error");
        ApiError::internal("database error; the daemon's log has the details")
    }
}

/// A unix socket's listener that drops a connection from a uid other than
/// the one allowed before a byte is read (the socket's mode already keeps
/// others out; this is the second lock).
pub struct PeerChecked {
    inner: tokio::net::UnixListener,
    uid: u32,
}

impl PeerChecked {
    /// Callers of this process's own uid only.
    pub fn new(inner: tokio::net::UnixListener) -> PeerChecked {
        PeerChecked::with_uid(inner, nix::unistd::getuid().as_raw())
    }

    /// Callers of `uid` only.
    pub fn with_uid(inner: tokio::net::UnixListener, uid: u32) -> PeerChecked {
        PeerChecked { inner, uid }
    }
}

impl axum::serve::Listener for PeerChecked {
    type Io = tokio::net::UnixStream;
    type Addr = tokio::net::unix::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.inner.accept().await {
                Ok((stream, addr)) => match stream.peer_cred() {
                    Ok(cred) if cred.uid() == self.uid => return (stream, addr),
                    Ok(cred) => {
                        tracing::warn!(uid = cred.uid(), "API caller of another uid refused")
                    }
                    Err(e) => tracing::warn!(error = %e, "API caller without credentials refused"),
                },
                // Out of descriptors or the like: the next accept may work.
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// A chat id as chatd makes them: letters, digits and `_`, 64 at most, so
/// it is a safe folder name and names exactly one chat.
pub fn is_chat_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// A text field of `min` to `max` characters, or a 400 naming the field, the
/// bounds and its length.
pub fn check_chars(field: &str, value: &str, min: usize, max: usize) -> Result<(), ApiError> {
    let n = value.chars().count();
    if n < min || n > max {
        return Err(ApiError::bad_input(
            field,
            format!("must be {min} to {max} characters (it is {n})"),
        ));
    }
    Ok(())
}

/// A listing's `limit` query parameter (the audits'): 100 when absent, else
/// within 1..=1000, or a 400 naming `limit` and the bound.
pub fn list_limit(limit: Option<usize>) -> Result<usize, ApiError> {
    let limit = limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_input(
            "limit",
            format!("{limit} is outside 1..=1000"),
        ));
    }
    Ok(limit)
}

/// Parses a JSON request body, naming the field at fault (400 `bad_input`
/// with `field`); an empty body reads as `{}` so all-optional bodies may be
/// left out.
pub fn parse_body<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
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

#[cfg(test)]
mod tests {
    use super::{check_chars, list_limit};

    #[test]
    fn a_text_fields_length_is_counted_in_characters() {
        assert!(check_chars("name", "é", 1, 1).is_ok());
        let err = check_chars("name", "", 1, 100).unwrap_err();
        assert_eq!(err.message, "name: must be 1 to 100 characters (it is 0)");
    }

    #[test]
    fn a_listings_limit_is_100_by_default_and_names_its_bound() {
        assert_eq!(list_limit(None).unwrap(), 100);
        assert_eq!(list_limit(Some(1000)).unwrap(), 1000);
        for bad in [0, 1001] {
            let err = list_limit(Some(bad)).unwrap_err();
            assert_eq!(err.message, format!("limit: {bad} is outside 1..=1000"));
            assert_eq!(err.extra["field"], "limit");
        }
    }
}
