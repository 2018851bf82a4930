//! chatd's side of egressd: a client of its API socket (calls, the card
//! stream, a card declined) and the errors of the routes chatd forwards to
//! it. What a card becomes in a chat is the runs' (`runs/cards.rs`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::Value;
use tandem_shared::http::ApiError;

/// egressd's API over its unix socket.
#[derive(Clone)]
pub struct EgressClient {
    client: reqwest::Client,
    socket: PathBuf,
}

/// A card as egressd's stream carries it.
#[derive(Debug, Clone, Deserialize)]
pub struct EgressCard {
    pub card_id: String,
    pub chat: String,
    pub host: String,
    pub port: u16,
    pub summary: String,
}

impl EgressClient {
    pub fn new(socket: &Path) -> anyhow::Result<EgressClient> {
        let client = reqwest::Client::builder()
            .unix_socket(socket.to_path_buf())
            .connect_timeout(Duration::from_secs(2))
            .build()?;
        Ok(EgressClient {
            client,
            socket: socket.to_path_buf(),
        })
    }

    fn unavailable(&self, e: &reqwest::Error) -> ApiError {
        tracing::warn!(socket = %self.socket.display(), error = %e, "egressd did not answer");
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "egress_unavailable",
            "egressd is not running (start it with `tandem egress start`)",
        )
    }

    /// One call: egressd's status and JSON body (`Null` when it has none).
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(StatusCode, Value), ApiError> {
        let mut request = self
            .client
            .request(method, format!("http://egressd{path}"))
            .timeout(Duration::from_secs(10));
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(|e| self.unavailable(&e))?;
        let status =
            StatusCode::from_u16(response.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
        let bytes = response.bytes().await.map_err(|e| self.unavailable(&e))?;
        let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok((status, value))
    }

    /// A call whose error answers become chatd's errors, kind and message kept.
    pub async fn forward(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(StatusCode, Value), ApiError> {
        let (status, value) = self.call(method, path, body).await?;
        if status.is_client_error() || status.is_server_error() {
            return Err(error_of(status, &value));
        }
        Ok((status, value))
    }

    /// egressd's card stream (NDJSON, open for as long as egressd runs);
    /// `None` when egressd does not answer.
    pub async fn card_stream(&self) -> Option<reqwest::Response> {
        self.client
            .get("http://egressd/cards/stream")
            .send()
            .await
            .ok()
    }

    /// Declines a card nobody can answer for: egressd refuses at once.
    pub async fn decline(&self, chat: &str, card_id: &str) {
        let body = serde_json::json!({"chat": chat, "card_id": card_id, "decision": "decline"});
        let _ = self
            .call(reqwest::Method::POST, "/consent", Some(&body))
            .await;
    }
}

/// egressd's error body as chatd's error, its kind and message kept.
pub fn error_of(status: StatusCode, value: &Value) -> ApiError {
    let message = value["error"]["message"]
        .as_str()
        .unwrap_or("egressd refused the request")
        .to_string();
    let kind: &'static str = match value["error"]["type"].as_str() {
        Some("already_answered") => "already_answered",
        Some("consent_expired") => "consent_expired",
        Some("outside_ceiling") => "outside_ceiling",
        Some("egress_above_ceiling") => "egress_above_ceiling",
        Some("not_found") => "not_found",
        Some("bad_input") | Some("invalid_request") => "invalid_request",
        _ => "egress_error",
    };
    let mut error = ApiError::new(status, kind, message);
    // Its numbers and the field it names go on, as egressd gave them.
    if let Some(fields) = value["error"].as_object() {
        for (key, v) in fields {
            if !matches!(key.as_str(), "type" | "message") {
                error = error.with(key, v.clone());
            }
        }
    }
    error
}
