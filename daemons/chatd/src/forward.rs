//! chatd's side of triggerd and connectord: `/v1/chat-app/triggers*` and
//! `/v1/chat-app/connectors*` are byte-forwarded to the owner's unix socket
//! (the same path and query, the body and its content type), and its answer
//! comes back unchanged. They own their data; chatd only guards the door
//! (forward key, cross-site writes).

use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::Response;
use tandem_shared::http::ApiError;

/// The largest body forwarded.
pub const MAX_BODY: usize = 1 << 20;
/// How long the owner has to answer, its whole body included.
const TIMEOUT: Duration = Duration::from_secs(30);

/// A daemon's API over its unix socket.
#[derive(Clone)]
pub struct Forward {
    client: reqwest::Client,
    socket: PathBuf,
    /// Its name in messages and logs: `triggerd`, `connectord`.
    daemon: &'static str,
    /// The error type of a 503 (`triggers_unavailable`), and the command
    /// that starts it (`tandem triggers start`).
    unavailable: &'static str,
    start: &'static str,
    /// The error type of a 504 (`triggers_timeout`).
    timeout: &'static str,
}

impl Forward {
    /// triggerd's routes.
    pub fn triggers(socket: &Path) -> anyhow::Result<Forward> {
        Forward::new(
            socket,
            "triggerd",
            ["triggers_unavailable", "triggers_timeout"],
            "tandem triggers start",
        )
    }

    /// connectord's routes.
    pub fn connectors(socket: &Path) -> anyhow::Result<Forward> {
        Forward::new(
            socket,
            "connectord",
            ["connectors_unavailable", "connectors_timeout"],
            "tandem connectors start",
        )
    }

    fn new(
        socket: &Path,
        daemon: &'static str,
        [unavailable, timeout]: [&'static str; 2],
        start: &'static str,
    ) -> anyhow::Result<Forward> {
        let client = reqwest::Client::builder()
            .unix_socket(socket.to_path_buf())
            .connect_timeout(Duration::from_secs(2))
            .build()?;
        Ok(Forward {
            client,
            socket: socket.to_path_buf(),
            daemon,
            unavailable,
            start,
            timeout,
        })
    }

    /// Whether the daemon's socket is there (capabilities say so).
    pub fn installed(&self) -> bool {
        self.socket.exists()
    }

    /// Sends one request to the daemon and answers with its status, content
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
            .request(
                method.clone(),
                format!("http://{}{path_and_query}", self.daemon),
            )
            .timeout(TIMEOUT)
            .body(body);
        if let Some(content_type) = content_type {
            request = request.header(header::CONTENT_TYPE, content_type);
        }
        let answer = match request.send().await {
            Ok(answer) => answer,
            Err(e) if e.is_timeout() => {
                tracing::warn!(%method, daemon = self.daemon, "no answer in time");
                return Err(ApiError::new(
                    StatusCode::GATEWAY_TIMEOUT,
                    self.timeout,
                    format!(
                        "{} did not answer within {} s",
                        self.daemon,
                        TIMEOUT.as_secs()
                    ),
                ));
            }
            Err(e) => {
                tracing::warn!(socket = %self.socket.display(), daemon = self.daemon, error = %e, "no answer");
                return Err(self.unavailable());
            }
        };
        let status =
            StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
        tracing::debug!(%method, status = status.as_u16(), daemon = self.daemon, "forwarded");
        let mut response = Response::builder().status(status);
        if let Some(content_type) = answer.headers().get(header::CONTENT_TYPE) {
            response = response.header(header::CONTENT_TYPE, content_type);
        }
        response
            .body(Body::from_stream(answer.bytes_stream()))
            .map_err(|e| {
                ApiError::internal(format!(
                    "{}'s answer could not be passed on: {e}",
                    self.daemon
                ))
            })
    }

    /// 503 while the daemon is not running.
    pub fn unavailable(&self) -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            self.unavailable,
            format!(
                "{} is not running (start it with `{}`)",
                self.daemon, self.start
            ),
        )
    }
}
