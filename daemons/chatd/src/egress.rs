//! chatd's side of egressd: a client of its API socket, the routes chatd
//! forwards to it, and the card listener that turns egressd's consent cards
//! into `tool.consent` events in the chat (and declines the cards of chats
//! nobody can answer for).

use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::Value;
use tandem_shared::http::ApiError;
use tandem_shared::shutdown::Shutdown;

use crate::runs::Runs;

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

/// An NDJSON stream cut into its JSON lines as chunks come (egressd's cards,
/// hostexecd's output).
#[derive(Default)]
pub struct Lines {
    buffer: Vec<u8>,
}

impl Lines {
    /// The whole lines `chunk` completes; a line that is not JSON is skipped.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<Value> {
        self.buffer.extend_from_slice(chunk);
        let mut out = Vec::new();
        while let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.buffer.drain(..=end).collect();
            if let Ok(event) = serde_json::from_slice::<Value>(&line) {
                out.push(event);
            }
        }
        // No line of these streams comes near 1 MiB: a runaway one is dropped.
        if self.buffer.len() > 1 << 20 {
            self.buffer.clear();
        }
        out
    }
}

/// Follows egressd's card stream for as long as chatd runs; reconnects
/// (1 s, doubling to 30 s) while egressd is away.
pub fn spawn_card_listener(client: EgressClient, runs: Runs, shutdown: Shutdown) {
    tokio::spawn(async move {
        let mut wait = Duration::from_secs(1);
        loop {
            let followed = tokio::select! {
                r = follow(&client, &runs) => r,
                _ = shutdown.wait() => return,
            };
            if followed {
                wait = Duration::from_secs(1);
            }
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.wait() => return,
            }
            wait = (wait * 2).min(Duration::from_secs(30));
        }
    });
}

/// One connection to the stream; true when it was up at all.
async fn follow(client: &EgressClient, runs: &Runs) -> bool {
    let response = client
        .client
        .get("http://egressd/cards/stream")
        .send()
        .await;
    let Ok(mut response) = response else {
        return false;
    };
    tracing::info!("following egressd's cards");
    let mut lines = Lines::default();
    while let Ok(Some(chunk)) = response.chunk().await {
        for event in lines.push(&chunk) {
            handle(client, runs, event).await;
        }
    }
    tracing::info!("egressd's card stream ended");
    true
}

async fn handle(client: &EgressClient, runs: &Runs, event: Value) {
    match event["event"].as_str() {
        // The cards waiting now: the chat's open egress cards not among
        // them ended while chatd was not listening.
        Some("sync") => {
            let live: Vec<String> = event["card_ids"]
                .as_array()
                .map(|ids| {
                    ids.iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            if let Err(e) = runs.egress_cards_left(live).await {
                tracing::warn!(error = %e, "old egress cards not closed");
            }
        }
        Some("card") => {
            let Ok(card) = serde_json::from_value::<EgressCard>(event) else {
                return;
            };
            match runs.egress_card(&card).await {
                Ok(true) => {}
                Ok(false) => {
                    // Nobody can answer for this chat now: egressd refuses at once.
                    let body = serde_json::json!({"chat": card.chat, "card_id": card.card_id, "decision": "decline"});
                    let _ = client
                        .call(reqwest::Method::POST, "/consent", Some(&body))
                        .await;
                }
                Err(e) => {
                    tracing::warn!(chat = %card.chat, card = %card.card_id, error = %e, "egress card not shown")
                }
            }
        }
        Some("closed") => {
            let (Some(chat), Some(card), Some(outcome)) = (
                event["chat"].as_str(),
                event["card_id"].as_str(),
                event["outcome"].as_str(),
            ) else {
                return;
            };
            if let Err(e) = runs.egress_card_closed(chat, card, outcome).await {
                tracing::warn!(chat, card, error = %e, "egress card not closed");
            }
        }
        _ => {}
    }
}
