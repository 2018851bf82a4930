//! What the MCP tests in chats share: chatd (loopback servers allowed)
//! beside engine-sim, and an http connector saved through the API.

use std::time::Duration;

use anyhow::Context;
use serde_json::json;
use tandem_tests::harness::{Chatd, Client, Sim};

pub const PRIVATE: (&str, &str) = ("QSE_CHAT_MCP_ALLOW_PRIVATE", "true");
/// A turn's bound.
pub const QUICK: Duration = Duration::from_secs(60);

/// engine-sim answering at once, and chatd beside it.
pub async fn start() -> anyhow::Result<(Sim, Chatd, Client)> {
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start(&sim.url(), &[PRIVATE]).await?;
    let client = chatd.client();
    Ok((sim, chatd, client))
}

/// Saves an http connector (with its token, if any); its id.
pub async fn connector(
    client: &Client,
    name: &str,
    url: &str,
    token: Option<&str>,
) -> anyhow::Result<String> {
    let mut body = json!({"name": name, "transport": "http", "url": url});
    if let Some(token) = token {
        body["token"] = json!(token);
    }
    let made = client.post("/mcp-connectors", body).await?;
    anyhow::ensure!(made.status == 201, "{made:?}");
    Ok(made.body["id"].as_str().context("id")?.to_string())
}
