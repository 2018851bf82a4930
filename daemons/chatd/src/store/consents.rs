//! Writes of the consent cards: a tool call's card stored and shown, an
//! egressd card stored and shown (only in a chat whose live run a person
//! started), a card answered, expired or closed, and the egress cards
//! egressd no longer holds closed; each with its `tool.consent` or
//! `tool.consent_answered` event and the chat's state moved on.

use rusqlite::{params, OptionalExtension};
use serde_json::{json, Value};
use tandem_shared::http::ApiError;
use tandem_shared::time::{new_id, now_rfc3339};

use super::conversations::set_state;
use super::runs::set_status;
use super::{queries, Ctx};
use crate::egress::EgressCard;
use crate::kinds::EventKind;
use crate::words::{ChatState, Choice, Origin, RunStatus};

/// A tool call's card, as a run asks it.
pub struct NewCard<'a> {
    pub run_id: &'a str,
    pub call_id: &'a str,
    /// The tool's name.
    pub name: &'a str,
    pub summary: &'a str,
    pub reason: &'a str,
    /// The buttons' words, when they are not the usual ones.
    pub labels: Option<Value>,
}

/// Shows the call's card (once: a card made before a restart is reused);
/// the run and its chat wait.
pub fn ask(ctx: &mut Ctx, conversation_id: &str, card: NewCard) -> Result<(), ApiError> {
    let NewCard {
        run_id: rid,
        call_id,
        name,
        summary,
        reason,
        labels,
    } = card;
    let cid = conversation_id;
    if queries::consent_for_call(ctx.conn(), cid, rid, call_id)?.is_none() {
        let card_id = new_id("card_");
        ctx.conn().execute(
            "INSERT INTO consents (id, conversation_id, run_id, call_id, tool, summary, reason, choices, created, labels) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            params![card_id, cid, rid, call_id, name, summary, reason, json!(Choice::ALL).to_string(), now_rfc3339(),
                labels.as_ref().map(|l| l.to_string())],
        )?;
        let mut event = json!({"run_id": rid, "card_id": card_id, "call_id": call_id,
            "name": name, "summary": summary, "reason": reason, "choices": Choice::ALL});
        if let Some(labels) = labels {
            event["labels"] = labels;
        }
        emit_mirrored(ctx, cid, EventKind::ToolConsent, event)?;
    }
    set_status(ctx, rid, RunStatus::Waiting)?;
    set_state(ctx, cid, ChatState::Waiting)
}

/// Closes a call's unanswered card as expired; false when an answer
/// came first (it is then read as usual).
pub fn expire(
    ctx: &mut Ctx,
    conversation_id: &str,
    run_id: &str,
    call_id: &str,
) -> Result<bool, ApiError> {
    let (cid, rid) = (conversation_id, run_id);
    let Some(card) = queries::consent_for_call(ctx.conn(), cid, rid, call_id)? else {
        return Ok(false);
    };
    if card.decision.is_some() {
        return Ok(false);
    }
    ctx.conn().execute(
        "UPDATE consents SET decision = 'expired', answered = ?1 WHERE id = ?2",
        params![now_rfc3339(), card.card_id],
    )?;
    emit_mirrored(
        ctx,
        cid,
        EventKind::ToolConsentAnswered,
        json!({"run_id": rid, "card_id": card.card_id, "call_id": call_id, "decision": "expired"}),
    )?;
    Ok(true)
}

/// Records a person's answer to a tool call's card. The same answer twice
/// is fine (`Ok(false)`), another one is a conflict, and a card whose run
/// no longer waits has expired.
pub fn answer(
    ctx: &mut Ctx,
    conversation_id: &str,
    card_id: &str,
    decision: Choice,
) -> Result<bool, ApiError> {
    let cid = conversation_id;
    let card = queries::consent(ctx.conn(), cid, card_id)?;
    if card.decision.as_deref() == Some("expired") {
        return Err(ApiError::new(
            axum::http::StatusCode::GONE,
            "consent_expired",
            "nobody waits for this card any more: it was not answered in time",
        ));
    }
    if let Some(given) = &card.decision {
        if given == decision.as_str() {
            return Ok(false);
        }
        return Err(ApiError::conflict(
            "already_answered",
            format!("this card was answered \"{given}\" already"),
        )
        .with("decision", given.clone()));
    }
    let run = queries::run(ctx.conn(), &card.run_id)?;
    if run.status != RunStatus::Waiting {
        return Err(ApiError::new(
            axum::http::StatusCode::GONE,
            "consent_expired",
            format!(
                "nobody waits for this card any more: its run ended {}",
                run.status
            ),
        ));
    }
    ctx.conn().execute(
        "UPDATE consents SET decision = ?1, answered = ?2 WHERE id = ?3",
        params![decision, now_rfc3339(), card_id],
    )?;
    emit_mirrored(
        ctx,
        cid,
        EventKind::ToolConsentAnswered,
        json!({"run_id": run.id, "card_id": card_id, "call_id": card.call_id, "decision": decision}),
    )?;
    Ok(true)
}

/// A card's event in its chat, and for a sub-agent's card in its parent
/// too (with `subagent_id` and `subagent_title`), where a person watches.
fn emit_mirrored(
    ctx: &mut Ctx,
    cid: &str,
    kind: EventKind,
    mut event: serde_json::Value,
) -> Result<(), ApiError> {
    ctx.emit(cid, kind, event.clone())?;
    let parent: Option<(String, String)> = ctx
        .conn()
        .query_row(
            "SELECT parent_id, title FROM conversations WHERE id = ?1 AND kind = ?2 AND parent_id IS NOT NULL",
            params![cid, crate::words::ChatKind::Subagent],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    if let Some((parent, title)) = parent {
        event["subagent_id"] = json!(cid);
        event["subagent_title"] = json!(title);
        ctx.emit(&parent, kind, event)?;
    }
    Ok(())
}

/// A card egressd raised, stored and shown in its chat (once: egressd may
/// send it again after a reconnect); false when nobody can answer it.
pub fn show_card(ctx: &mut Ctx, card: &EgressCard) -> Result<bool, ApiError> {
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
                json!(Choice::ALL).to_string(), now_rfc3339()],
    )?;
    ctx.emit(
        &card.chat,
        EventKind::ToolConsent,
        json!({"run_id": run.id, "card_id": card.card_id, "call_id": null, "name": "egress",
               "summary": card.summary, "reason": reason, "choices": Choice::ALL,
               "host": card.host, "port": card.port}),
    )?;
    set_state(ctx, &card.chat, ChatState::Waiting)?;
    Ok(true)
}

/// Records a card's end once; the chat goes back to running when its run
/// goes on and waits for nothing else.
pub fn close_card(ctx: &mut Ctx, chat: &str, card_id: &str, outcome: &str) -> Result<(), ApiError> {
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

/// Closes, as expired, the open egress cards egressd no longer has (`live`).
pub fn close_left_egress_cards(ctx: &mut Ctx, live: &[String]) -> Result<(), ApiError> {
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
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use tandem_shared::metrics::Registry;

    use super::*;
    use crate::events::Hub;
    use crate::metrics::Metrics;
    use crate::store::queries::Trashed;
    use crate::store::runs::{finish_run, insert_run, record_start, Outcome};
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
