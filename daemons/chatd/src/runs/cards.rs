//! egressd's consent cards in the chat: a card egressd raises becomes a
//! stored card and a `tool.consent` event (name `egress`), the person's
//! answer goes to egressd first, and a card egressd closed (expired, the
//! ceiling lowered, answered elsewhere) is closed here too. A chat with no
//! run, or a run nobody watches (a trigger's, a connector's), never shows
//! one: the listener declines it and the host stays blocked. The listener
//! follows egressd's card stream for as long as chatd runs.

use std::sync::Arc;
use std::time::Duration;

use rusqlite::params;
use serde_json::{json, Value};
use tandem_shared::http::ApiError;
use tandem_shared::shutdown::Shutdown;
use tandem_shared::time::now_rfc3339;

use super::steps::CHOICES;
use super::{set_state, Runs};
use crate::egress::{error_of, EgressCard, EgressClient};
use crate::kinds::EventKind;
use crate::ndjson::Lines;
use crate::store::queries;
use crate::store::Ctx;
use crate::words::{ChatState, Origin, RunStatus};

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
            .write(move |ctx| {
                let open: Vec<(String, String)> = {
                    let mut stmt = ctx.conn().prepare(
                        "SELECT id, conversation_id FROM consents WHERE tool = 'egress' AND decision IS NULL",
                    )?;
                    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
                    rows.collect::<Result<_, _>>()?
                };
                for (card, chat) in open {
                    if !live.contains(&card) {
                        close_card(ctx, &chat, &card, "expired")?;
                    }
                }
                Ok(())
            })
            .await
    }

    /// A person's answer to an egress card: egressd takes it first (it may
    /// have expired there, or the ceiling may have been lowered), then it is
    /// recorded here. `Ok(false)`: the same answer came before.
    pub(super) async fn answer_egress_card(
        &self,
        conversation_id: &str,
        card_id: &str,
        decision: &str,
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
        let (cid, card, decision) = (
            conversation_id.to_string(),
            card_id.to_string(),
            decision.to_string(),
        );
        let always = decision == "always";
        self.inner
            .store
            .write(move |ctx| close_card(ctx, &cid, &card, &decision))
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

/// A card egressd raised, stored and shown in its chat (once: egressd may
/// send it again after a reconnect); false when nobody can answer it.
fn show_card(ctx: &mut Ctx, card: &EgressCard) -> Result<bool, ApiError> {
    let Some(run) = queries::active_run(ctx.conn(), &card.chat)? else {
        return Ok(false);
    };
    if run.origin != Origin::User {
        return Ok(false);
    }
    let known: i64 = ctx.conn().query_row(
        "SELECT COUNT(*) FROM consents WHERE id = ?1",
        [&card.card_id],
        |r| r.get(0),
    )?;
    if known > 0 {
        return Ok(true);
    }
    let reason = format!(
        "{}:{} is not allowed for this chat's commands yet",
        card.host, card.port
    );
    // The card's id stands in for a call id: one run may raise several.
    ctx.conn().execute(
        "INSERT INTO consents (id, conversation_id, run_id, call_id, tool, summary, reason, choices, created) \
         VALUES (?1, ?2, ?3, ?1, 'egress', ?4, ?5, ?6, ?7)",
        params![card.card_id, card.chat, run.id, card.summary, reason,
                json!(CHOICES).to_string(), now_rfc3339()],
    )?;
    ctx.emit(
        &card.chat,
        EventKind::ToolConsent,
        json!({"run_id": run.id, "card_id": card.card_id, "call_id": null, "name": "egress",
               "summary": card.summary, "reason": reason, "choices": CHOICES,
               "host": card.host, "port": card.port}),
    )?;
    set_state(ctx, &card.chat, ChatState::Waiting)?;
    Ok(true)
}

/// Records a card's end once; the chat goes back to running when its run
/// goes on and waits for nothing else.
fn close_card(ctx: &mut Ctx, chat: &str, card_id: &str, outcome: &str) -> Result<(), ApiError> {
    let changed = ctx.conn().execute(
        "UPDATE consents SET decision = ?1, answered = ?2 WHERE id = ?3 AND conversation_id = ?4 AND decision IS NULL",
        params![outcome, now_rfc3339(), card_id, chat],
    )?;
    if changed == 0 {
        return Ok(());
    }
    let run_id: String = ctx.conn().query_row(
        "SELECT run_id FROM consents WHERE id = ?1",
        [card_id],
        |r| r.get(0),
    )?;
    ctx.emit(
        chat,
        EventKind::ToolConsentAnswered,
        json!({"run_id": run_id, "card_id": card_id, "call_id": null, "decision": outcome}),
    )?;
    // `set_state` keeps the chat waiting while another card of the run is open.
    let run = queries::run(ctx.conn(), &run_id).ok();
    if run.is_some_and(|r| r.status == RunStatus::Running) {
        set_state(ctx, chat, ChatState::Running)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use tandem_shared::metrics::Registry;

    use super::*;
    use crate::events::Hub;
    use crate::metrics::Metrics;
    use crate::runs::{finish_run, insert_run, record_start, Outcome};
    use crate::store::queries::Trashed;
    use crate::store::Store;
    use crate::words::RunMode;

    const CHAT: &str = "c_1";

    fn open(dir: &Path) -> Store {
        let metrics = Arc::new(Metrics::new(&mut Registry::default()));
        Store::open(&dir.join("chat.sqlite3"), Hub::default(), metrics).unwrap()
    }

    async fn write<R: Send + 'static>(
        store: &Store,
        f: impl FnOnce(&mut Ctx) -> Result<R, ApiError> + Send + 'static,
    ) -> R {
        store.write(f).await.unwrap()
    }

    async fn new_chat(store: &Store) {
        write(store, |ctx| {
            ctx.conn().execute(
                "INSERT INTO conversations (id, title, model, created, updated) VALUES (?1, '', 'm', 't', 't')",
                [CHAT],
            )?;
            Ok(())
        })
        .await;
    }

    /// A person's run, as sending a message records it (`queued`).
    async fn new_run(store: &Store) -> String {
        write(store, |ctx| {
            let conversation = queries::conversation(ctx.conn(), CHAT, Trashed::Include)?;
            Ok(insert_run(ctx, &conversation, RunMode::Send, Origin::User, None)?.id)
        })
        .await
    }

    async fn card(store: &Store, id: &'static str) {
        let card = EgressCard {
            card_id: id.into(),
            chat: CHAT.into(),
            host: "127.0.0.2".into(),
            port: 443,
            summary: "A command in this chat wants to reach 127.0.0.2:443".into(),
        };
        assert!(write(store, move |ctx| show_card(ctx, &card)).await);
    }

    async fn close(store: &Store, id: &'static str, outcome: &'static str) {
        write(store, move |ctx| close_card(ctx, CHAT, id, outcome)).await;
    }

    async fn set(store: &Store, state: ChatState) {
        write(store, move |ctx| set_state(ctx, CHAT, state)).await;
    }

    async fn finish(store: &Store, run_id: String) {
        write(store, move |ctx| {
            let run = queries::run(ctx.conn(), &run_id)?;
            finish_run(ctx, &run, Outcome::Done, None, None)
        })
        .await;
    }

    /// What a device sees: the snapshot's state, and the states the
    /// `conversation.updated` events said, in order.
    async fn seen(store: &Store) -> (String, Vec<String>) {
        store
            .read(|conn| {
                let state = queries::conversation(conn, CHAT, Trashed::Include)?.state;
                let said = queries::events_after(conn, CHAT, 0, 10_000)?
                    .iter()
                    .filter(|e| e.kind == EventKind::ConversationUpdated)
                    .map(|e| {
                        let data: serde_json::Value = serde_json::from_str(&e.data).unwrap();
                        data["conversation"]["state"].as_str().unwrap().to_string()
                    })
                    .collect();
                Ok((state.as_str().to_string(), said))
            })
            .await
            .unwrap()
    }

    fn check(seen: (String, Vec<String>), state: &str, said: &[&str]) {
        assert_eq!(
            seen.0, state,
            "the snapshot's state (events said {:?})",
            seen.1
        );
        assert_eq!(seen.1, said, "the states conversation.updated said");
    }

    /// egressd's card can come before the run's task writes `running` (a
    /// loaded machine): the chat stays waiting for the person until they answer.
    #[tokio::test]
    async fn a_card_shown_before_its_run_starts_keeps_the_chat_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        new_chat(&store).await;
        let run = new_run(&store).await;
        card(&store, "eg_1").await;
        let rid = run.clone();
        write(&store, move |ctx| record_start(ctx, &rid)).await;
        check(seen(&store).await, "waiting", &["queued", "waiting"]);

        close(&store, "eg_1", "once").await;
        check(
            seen(&store).await,
            "running",
            &["queued", "waiting", "running"],
        );
        finish(&store, run).await;
        check(
            seen(&store).await,
            "idle",
            &["queued", "waiting", "running", "idle"],
        );
    }

    /// A run that goes on (a slot taken again after a tool, a tool card
    /// answered) or waits in line does not hide a card still open; the
    /// last card's answer puts the chat back to running.
    #[tokio::test]
    async fn a_run_going_on_leaves_the_chat_waiting_while_a_card_is_open() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        new_chat(&store).await;
        let run = new_run(&store).await;
        write(&store, move |ctx| record_start(ctx, &run)).await;
        card(&store, "eg_1").await;
        card(&store, "eg_2").await;
        set(&store, ChatState::Running).await;
        set(&store, ChatState::Queued).await;
        check(
            seen(&store).await,
            "waiting",
            &["queued", "running", "waiting"],
        );

        close(&store, "eg_1", "once").await;
        check(
            seen(&store).await,
            "waiting",
            &["queued", "running", "waiting"],
        );
        close(&store, "eg_2", "expired").await;
        check(
            seen(&store).await,
            "running",
            &["queued", "running", "waiting", "running"],
        );
    }

    /// A card an ended run left open (egressd still holds its command) is
    /// not the next run's: that run's chat is queued, then running.
    #[tokio::test]
    async fn a_card_of_an_ended_run_does_not_hold_the_next_run() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        new_chat(&store).await;
        let first = new_run(&store).await;
        let rid = first.clone();
        write(&store, move |ctx| record_start(ctx, &rid)).await;
        card(&store, "eg_1").await;
        finish(&store, first).await;
        let next = new_run(&store).await;
        write(&store, move |ctx| record_start(ctx, &next)).await;
        close(&store, "eg_1", "expired").await;
        check(
            seen(&store).await,
            "running",
            &["queued", "running", "waiting", "idle", "queued", "running"],
        );
    }
}
