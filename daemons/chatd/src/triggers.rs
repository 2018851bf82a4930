//! chatd's side of triggerd: `/v1/chat-app/triggers*` is byte-forwarded to
//! triggerd's unix socket (the same path and query, the body and its
//! content type), and triggerd's answer comes back unchanged. triggerd owns
//! the triggers; chatd only guards the door (forward key, cross-site writes).

use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::Response;
use tandem_shared::http::ApiError;

/// The largest body forwarded to triggerd.
pub const MAX_BODY: usize = 1 << 20;
/// How long triggerd has to answer, its whole body included.
const TIMEOUT: Duration = Duration::from_secs(30);

/// triggerd's API over its unix socket.
#[derive(Clone)]
pub struct TriggersClient {
    client: reqwest::Client,
    socket: PathBuf,
}

impl TriggersClient {
    pub fn new(socket: &Path) -> anyhow::Result<TriggersClient> {
        let client = reqwest::Client::builder()
            .unix_socket(socket.to_path_buf())
            .connect_timeout(Duration::from_secs(2))
            .build()?;
        Ok(TriggersClient {
            client,
            socket: socket.to_path_buf(),
        })
    }

    /// Whether triggerd's socket is there (capabilities say so).
    pub fn installed(&self) -> bool {
        self.socket.exists()
    }

    /// Sends one request to triggerd and answers with its status, content
    /// type and body as they come.
    pub async fn forward(
        &self,
        method: Method,
        path_and_query: &str,
        content_type: Option<HeaderValue>,
        body: Bytes,
    ) -> Result<Response, ApiError> {
        let mut request = self
            .client
            .request(method.clone(), format!("http://triggerd{path_and_query}"))
            .timeout(TIMEOUT)
            .body(body);
        if let Some(content_type) = content_type {
            request = request.header(header::CONTENT_TYPE, content_type);
        }
        let answer = match request.send().await {
            Ok(answer) => answer,
            Err(e) if e.is_timeout() => {
                tracing::warn!(%method, "triggerd did not answer in time");
                return Err(ApiError::new(
                    StatusCode::GATEWAY_TIMEOUT,
                    "triggers_timeout",
                    format!("triggerd did not answer within {} s", TIMEOUT.as_secs()),
                ));
            }
            Err(e) => {
                tracing::warn!(socket = %self.socket.display(), error = %e, "triggerd did not answer");
                return Err(unavailable());
            }
        };
        let status =
            StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
        tracing::debug!(%method, status = status.as_u16(), "forwarded to triggerd");
        let mut response = Response::builder().status(status);
        if let Some(content_type) = answer.headers().get(header::CONTENT_TYPE) {
            response = response.header(header::CONTENT_TYPE, content_type);
        }
        response
            .body(Body::from_stream(answer.bytes_stream()))
            .map_err(|e| {
                ApiError::internal(format!("triggerd's answer could not be passed on: {e}"))
            })
    }
}

/// 503 while triggerd is not running.
pub fn unavailable() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "triggers_unavailable",
        "triggerd is not running (start it with `tandem triggers start`)",
    )
}
