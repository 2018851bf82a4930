//! Consent: a call that must ask shows a stored card and waits for a
//! person's answer (a stop, chatd's shutdown or the card's wait end it
//! first); the chat's mode and rules decide which calls ask, a sub-agent's
//! being its parent's.

use serde_json::json;
use tandem_shared::http::ApiError;
use tokio::sync::watch;

use super::{EndRequest, Runs};
use crate::model::Run;
use crate::permissions::{Mode, Rule, Verdict};
use crate::store::consents::{self, NewCard};
use crate::store::queries::{self, Trashed};
use crate::store::{conversations, rules as stored_rules, runs};
use crate::words::{ChatState, Choice, RunStatus};

/// How a call that asked was answered.
pub(super) enum Answer {
    Decided(Choice),
    Stopped,
    Shutdown,
    /// Nobody answered within the card's wait.
    Expired,
}

pub(super) const HOST_ASK_REASON: &str = "commands on this machine ask first (host_exec = ask)";

/// What a card shows, and how long it waits.
pub(super) struct Card {
    summary: String,
    /// The buttons' words, when they are not the usual ones.
    labels: Option<serde_json::Value>,
    wait: Option<std::time::Duration>,
}

impl Card {
    pub(super) fn tool(summary: &str) -> Card {
        Card {
            summary: summary.to_string(),
            labels: None,
            wait: None,
        }
    }

    /// "Run this command on this machine?": `wait_s`, 5 minutes at most.
    pub(super) fn host(summary: &str, wait_s: u64) -> Card {
        Card {
            summary: format!("Run this command on this machine? {summary}"),
            labels: Some(
                json!({"once": "Run once", "always": "Always on this instance", "deny": "Don't run"}),
            ),
            wait: Some(std::time::Duration::from_secs(wait_s.min(300))),
        }
    }
}

impl Runs {
    /// The run and its chat back to `running`.
    pub(super) async fn set_running(&self, run: &Run) -> Result<(), ApiError> {
        let (rid, cid) = (run.id.clone(), run.conversation_id.clone());
        self.inner
            .store
            .write(move |ctx| {
                runs::set_status(ctx, &rid, RunStatus::Running)?;
                conversations::set_state(ctx, &cid, ChatState::Running)
            })
            .await
    }

    /// The chat's mode, rules and tool policies. A sub-agent's are its parent's, read now
    /// (a parent switched to `ask` holds its sub-agents too): the stricter
    /// of the two modes, and the parent's rules, so no deny rule of the
    /// parent's is ever passed.
    pub(super) async fn permissions_of(
        &self,
        conversation_id: &str,
    ) -> Result<(Mode, Vec<Rule>, crate::store::policies::Policies), ApiError> {
        let cid = conversation_id.to_string();
        let home = self.inner.folders.home(conversation_id);
        self.inner
            .store
            .read(move |conn| {
                let conversation = queries::conversation(conn, &cid, Trashed::Include)?;
                let mut mode = conversation.permission_mode;
                if home != cid {
                    let parent = queries::conversation(conn, &home, Trashed::Include)?;
                    mode = mode.stricter(parent.permission_mode);
                }
                let rules = queries::rules(conn, &home)?
                    .into_iter()
                    .map(|(tool, pattern, verdict)| Rule {
                        tool,
                        pattern,
                        verdict: if verdict == "allow" {
                            Verdict::Allow
                        } else {
                            Verdict::Deny
                        },
                    })
                    .collect();
                let policies = crate::store::policies::effective(conn, &home)?;
                Ok((mode, rules, policies))
            })
            .await
    }

    /// Saves rules for one chat, or (`None`) for every chat.
    pub(super) async fn save_rules(
        &self,
        conversation_id: Option<&str>,
        rules: Vec<Rule>,
    ) -> Result<(), ApiError> {
        let cid = conversation_id.map(str::to_string);
        self.inner
            .store
            .write(move |ctx| stored_rules::insert_always(ctx, cid.as_deref(), &rules))
            .await
    }

    /// Shows the call's card (once: a card made before a restart is reused)
    /// and waits for its answer, a stop or chatd's shutdown.
    pub(super) async fn ask(
        &self,
        run: &Run,
        (call_id, name): (&str, &str),
        card: &Card,
        reason: &str,
        stop: &mut watch::Receiver<EndRequest>,
    ) -> Result<Answer, ApiError> {
        let rid = run.id.clone();
        let cid = run.conversation_id.clone();
        let call = call_id.to_string();
        let (call_id, name, summary, reason) = (
            call.clone(),
            name.to_string(),
            card.summary.clone(),
            reason.to_string(),
        );
        let labels = card.labels.clone();
        self.inner
            .store
            .write(move |ctx| {
                let card = NewCard {
                    run_id: &rid,
                    call_id: &call_id,
                    name: &name,
                    summary: &summary,
                    reason: &reason,
                    labels,
                };
                consents::ask(ctx, &cid, card)
            })
            .await?;
        let deadline = card.wait.map(|w| tokio::time::Instant::now() + w);
        loop {
            // Made before the look, so an answer between the two still rings.
            let bell = self.inner.consent_bell.notified();
            let (rid, cid, call_id) = (run.id.clone(), run.conversation_id.clone(), call.clone());
            let card = self
                .inner
                .store
                .read(move |conn| queries::consent_for_call(conn, &cid, &rid, &call_id))
                .await?;
            if let Some(decision) = card.and_then(|c| c.decision) {
                self.set_running(run).await?;
                // A card closed without a choice (expired before a restart)
                // ran nothing: the call is answered as not answered.
                return Ok(match Choice::parse(&decision) {
                    Some(choice) => Answer::Decided(choice),
                    None => Answer::Expired,
                });
            }
            let expiry = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let expired = tokio::select! {
                _ = bell => false,
                _ = stop.wait_for(|r| *r == EndRequest::Stop) => return Ok(Answer::Stopped),
                _ = self.inner.shutdown.wait() => return Ok(Answer::Shutdown),
                _ = expiry => true,
            };
            if expired && self.expire_card(run, &call).await? {
                self.set_running(run).await?;
                return Ok(Answer::Expired);
            }
        }
    }

    /// Closes a call's unanswered card as expired; false when an answer
    /// came first (it is then read as usual).
    async fn expire_card(&self, run: &Run, call_id: &str) -> Result<bool, ApiError> {
        let (rid, cid, call_id) = (
            run.id.clone(),
            run.conversation_id.clone(),
            call_id.to_string(),
        );
        self.inner
            .store
            .write(move |ctx| consents::expire(ctx, &cid, &rid, &call_id))
            .await
    }

    /// Records a card's answer; the run waiting on it goes on. The same
    /// answer twice is fine (`Ok(false)`), another one is a conflict, and a
    /// card whose run no longer waits has expired.
    pub async fn answer_consent(
        &self,
        conversation_id: &str,
        card_id: &str,
        decision: Choice,
    ) -> Result<bool, ApiError> {
        // An egress card is egressd's: it takes the answer first.
        if card_id.starts_with("eg_") {
            return self
                .answer_egress_card(conversation_id, card_id, decision)
                .await;
        }
        let (cid, card_id) = (conversation_id.to_string(), card_id.to_string());
        // Written and rung in a task of its own: a client gone mid-request
        // must not leave an answered card whose run never hears of it.
        let runs = self.clone();
        let answered = tokio::spawn(async move {
            let changed = runs
                .inner
                .store
                .write(move |ctx| consents::answer(ctx, &cid, &card_id, decision))
                .await?;
            if changed {
                runs.inner.consent_bell.notify_waiters();
            }
            Ok::<_, ApiError>(changed)
        });
        answered
            .await
            .map_err(|_| ApiError::internal("the answer was not written"))?
    }
}
