//! egressd's consent cards in the chat: a card egressd raises becomes a
//! stored card and a `tool.consent` event (name `egress`), the person's
//! answer goes to egressd first, and a card egressd closed (expired, the
//! ceiling lowered, answered elsewhere) is closed here too. A chat with no
//! run, or a run nobody watches (a trigger's, a connector's), never shows
//! one: the listener declines it and the host stays blocked. The listener
//! follows egressd's card stream for as long as chatd runs.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tandem_shared::http::ApiError;
use tandem_shared::shutdown::Shutdown;

use super::Runs;
use crate::egress::{error_of, EgressCard, EgressClient};
use crate::kinds::EventKind;
use crate::ndjson::Lines;
use crate::store::consents::{close_card, close_left_egress_cards, show_card};
use crate::words::Choice;

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
    let Some(mut response) = client.card_stream().await else {
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
                // Nobody can answer for this chat now: egressd refuses at once.
                Ok(false) => client.decline(&card.chat, &card.card_id).await,
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

impl Runs {
    /// Where egress cards are answered; set once at start.
    pub fn set_egress(&self, client: EgressClient) {
        let _ = self.inner.egress.set(Arc::new(client));
    }

    /// Shows an egressd card in its chat; false when nobody can answer it.
    pub async fn egress_card(&self, card: &EgressCard) -> Result<bool, ApiError> {
        let card = card.clone();
        self.inner
            .store
            .write(move |ctx| show_card(ctx, &card))
            .await
    }

    /// egressd closed a card (`outcome`: expired, declined, outside_ceiling,
    /// or an answer given elsewhere).
    pub async fn egress_card_closed(
        &self,
        chat: &str,
        card_id: &str,
        outcome: &str,
    ) -> Result<(), ApiError> {
        let (chat, card_id, outcome) = (chat.to_string(), card_id.to_string(), outcome.to_string());
        self.inner
            .store
            .write(move |ctx| close_card(ctx, &chat, &card_id, &outcome))
            .await
    }

    /// Closes, as expired, the open egress cards egressd no longer has.
    pub async fn egress_cards_left(&self, live: Vec<String>) -> Result<(), ApiError> {
        self.inner
            .store
            .write(move |ctx| close_left_egress_cards(ctx, &live))
            .await
    }

    /// A person's answer to an egress card: egressd takes it first (it may
    /// have expired there, or the ceiling may have been lowered), then it is
    /// recorded here. `Ok(false)`: the same answer came before.
    pub(super) async fn answer_egress_card(
        &self,
        conversation_id: &str,
        card_id: &str,
        decision: Choice,
    ) -> Result<bool, ApiError> {
        let Some(egress) = self.inner.egress.get().cloned() else {
            return Err(ApiError::new(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                "egress_unavailable",
                "egressd is not configured in this chatd",
            ));
        };
        let body = json!({"chat": conversation_id, "card_id": card_id, "decision": decision});
        let (status, value) = egress
            .call(reqwest::Method::POST, "/consent", Some(&body))
            .await?;
        match status.as_u16() {
            200 => {}
            204 => return Ok(false),
            // Ended there (expired, the ceiling lowered): ended here too,
            // so the card does not stay open in the chat.
            409 | 410 if value["error"]["type"] != "already_answered" => {
                let outcome = if status.as_u16() == 410 {
                    "expired"
                } else {
                    "outside_ceiling"
                };
                let (cid, card) = (conversation_id.to_string(), card_id.to_string());
                self.inner
                    .store
                    .write(move |ctx| close_card(ctx, &cid, &card, outcome))
                    .await?;
                return Err(error_of(status, &value));
            }
            _ => return Err(error_of(status, &value)),
        }
        let (cid, card) = (conversation_id.to_string(), card_id.to_string());
        let always = decision == Choice::Always;
        self.inner
            .store
            .write(move |ctx| close_card(ctx, &cid, &card, decision.as_str()))
            .await?;
        if always {
            // egressd saved an allow rule for the host.
            self.announce_egress(conversation_id).await;
        }
        Ok(true)
    }

    /// Says a chat's egress preset and rules as egressd has them now, with
    /// an `egress.updated` event (after each change, so every device shows
    /// the chat's network as it is). Nothing when egressd does not answer.
    pub async fn announce_egress(&self, conversation_id: &str) {
        let Some(egress) = self.inner.egress.get().cloned() else {
            return;
        };
        let get = |path: String| {
            let egress = egress.clone();
            async move { egress.forward(reqwest::Method::GET, &path, None).await }
        };
        let (Ok((_, preset)), Ok((_, rules))) = (
            get(format!("/chats/{conversation_id}/egress")).await,
            get(format!("/chats/{conversation_id}/rules")).await,
        ) else {
            tracing::warn!(
                conversation = conversation_id,
                "egressd did not answer: no egress.updated"
            );
            return;
        };
        let data = json!({
            "preset": preset["preset"],
            "effective": preset["effective"],
            "ceiling": preset["ceiling"],
            "rules": rules["rules"],
        });
        let cid = conversation_id.to_string();
        let written = self
            .inner
            .store
            .write(move |ctx| Ok(ctx.emit(&cid, EventKind::EgressUpdated, data).map(|_| ())?))
            .await;
        if let Err(e) = written {
            tracing::warn!(conversation = conversation_id, error = %e.message, "egress.updated not written");
        }
    }
}
