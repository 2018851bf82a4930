//! Turns through chatd: a message let in goes to its sender's chat (made
//! with the binding's agent when there is none), then a worker per chat
//! follows the chat's run, shows progress or the growing answer, and posts
//! the answer. A message that arrives while the agent works waits in chatd
//! like any waiting message and is answered by the run it reaches (or by a
//! `send-now` run once the working one ended without reaching it).
//!
//! Every step is stored before the next: `queued` (read) → `sent` (in
//! chatd, with a key chatd dedupes on, so a restart that sends again adds
//! nothing) → `answered`. A restart picks up each state where it stood.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tandem_shared::chatd::{active_run, ChatError, Sent};
use tandem_shared::sync::lock;
use tandem_shared::words::ChatRunStatus;
use tokio::sync::mpsc;

use crate::bindings::{Conversation, ReplyMode, Settings};
use crate::pacer::Pacer;
use crate::platform::{Posted, SendError, Target};
use crate::states::InboundState;
use crate::store::{self, Message};
use crate::{Connectord, Outbox};

/// What a sender sees while the agent works, in progress mode.
const WORKING: &str = "Working…";
/// What a sender is told when chatd refuses the agent's chat because the
/// folder the agent keeps to is missing (409 `agent_folder_missing`). The
/// binding stays on: the next message tries again.
pub const FOLDER_MISSING: &str =
    "This agent can't work right now: the folder it keeps to is missing.";
/// The most of a growing answer shown in place (the platforms cut at 4,000
/// and 4,096; the whole answer follows, split, at the end).
const STREAM_TAIL: usize = 3500;

/// Sends every queued message to chatd, oldest first.
pub async fn deliver_queued(cd: &Arc<Connectord>) -> anyhow::Result<()> {
    let queued = cd
        .store
        .call(|conn| store::messages_in(conn, InboundState::Queued))
        .await?;
    for message in queued {
        if cd.shutdown.is_begun() {
            break;
        }
        match deliver(cd, &message).await {
            Ok(()) => {}
            // chatd down or busy: the message stays queued for the next round.
            Err(Some(err)) if err.retryable() => {
                tracing::warn!(binding = %message.binding_id, message = message.id, error = %err, "chatd did not take a message; trying again");
                return Ok(());
            }
            Err(Some(err)) => {
                let note = if err.agent_folder_missing() {
                    // Logged where it was refused, with the chat's id.
                    FOLDER_MISSING.to_string()
                } else {
                    // The refusal's kind only: its sentence may quote the sender.
                    let kind = match &err {
                        ChatError::Refused { status, kind, .. } => format!("{status} {kind}"),
                        ChatError::Unreachable(_) => "unreachable".into(),
                    };
                    tracing::warn!(binding = %message.binding_id, message = message.id, error = %kind, "chatd refused a message");
                    format!("I could not pass that on: {}", refusal(&err))
                };
                let id = message.id;
                cd.store
                    .call(move |conn| store::set_refused(conn, id, &note))
                    .await?;
            }
            Err(None) => return Ok(()),
        }
    }
    Ok(())
}

/// A refusal in one line for the sender: chatd's message, no ids.
fn refusal(err: &ChatError) -> String {
    match err {
        ChatError::Refused { message, .. } => message.clone(),
        ChatError::Unreachable(_) => "the chat service did not answer".into(),
    }
}

/// The chat a message belongs to under the binding's conversation mode.
fn scope(settings: &Settings, m: &Message) -> String {
    let inbound = &m.message;
    match settings.conversation {
        Conversation::Sender => format!("sender:{}", inbound.sender_id),
        Conversation::Chat => format!("chat:{}", inbound.chat_id),
        Conversation::Window => format!("window:{}", inbound.sender_id),
        Conversation::Thread => match &inbound.thread {
            Some(thread) => format!("thread:{}:{thread}", inbound.chat_id),
            None => format!("chat:{}", inbound.chat_id),
        },
    }
}

/// One message into chatd. `Err(None)`: the binding is gone or off.
async fn deliver(cd: &Arc<Connectord>, m: &Message) -> Result<(), Option<ChatError>> {
    let bid = m.binding_id.clone();
    let Some(binding) = cd
        .store
        .call(move |conn| store::binding(conn, &bid))
        .await
        .map_err(|_| None)?
        .filter(|b| b.enabled)
    else {
        return Err(None);
    };
    let settings = Settings::of(&binding);
    let scope = scope(&settings, m);
    let now = tandem_shared::time::now_unix();
    let fresh_after = match settings.conversation {
        Conversation::Window => now - i64::from(settings.window_minutes) * 60,
        _ => i64::MIN,
    };
    let (bid, sc) = (binding.id.clone(), scope.clone());
    let known = cd
        .store
        .call(move |conn| store::chat_of(conn, &bid, &sc, fresh_after))
        .await
        .map_err(|_| None)?;
    let body = json!({
        "text": m.message.text,
        "origin": "connector",
        "key": format!("{}-{}", binding.id, m.id),
    });
    // A message that went to a chat before (a crash before it was marked
    // sent) goes to that chat again, where chatd knows its key.
    let mut conversation = m.conversation_id.clone().or(known);
    let mut tries = 0;
    let sent = loop {
        tries += 1;
        let chat = match conversation.clone() {
            Some(chat) => chat,
            None => {
                let who = m
                    .message
                    .sender_name
                    .as_deref()
                    .map(|n| format!("@{n}"))
                    .unwrap_or_else(|| m.message.sender_id.clone());
                let title: String = format!("{} · {who}", binding.name)
                    .chars()
                    .take(100)
                    .collect();
                let made = cd
                    .chat
                    .create_chat(&json!({"title": title, "agent_id": binding.agent_id, "origin": "connector"}))
                    .await;
                let chat = match made {
                    Ok(chat) => chat,
                    Err(err) => {
                        if err.agent_folder_missing() {
                            tracing::warn!(binding = %binding.id, message = m.id, "the agent's folder is missing: no chat made");
                        }
                        return Err(Some(err));
                    }
                };
                let (bid, sc, c) = (binding.id.clone(), scope.clone(), chat.clone());
                cd.store
                    .call(move |conn| store::set_chat(conn, &bid, &sc, &c, now))
                    .await
                    .map_err(|_| None)?;
                tracing::info!(binding = %binding.id, chat = %chat, "a sender's chat made");
                chat
            }
        };
        let (id, c) = (m.id, chat.clone());
        cd.store
            .call(move |conn| store::set_conversation(conn, id, &c))
            .await
            .map_err(|_| None)?;
        match cd.chat.send(&chat, &body).await {
            Ok(sent) => break (chat, sent),
            // The person deleted the chat in chatd: a new one.
            Err(ChatError::Refused {
                status: 404,
                field: None,
                ..
            }) if tries < 2 => {
                conversation = None;
            }
            Err(err) => {
                if err.agent_folder_missing() {
                    tracing::warn!(binding = %binding.id, message = m.id, chat = %chat, "the agent's folder is missing: the message was not taken");
                }
                return Err(Some(err));
            }
        }
    };
    let (chat, sent) = sent;
    let (id, c, bid, sc) = (m.id, chat.clone(), binding.id.clone(), scope);
    let (run, pending) = match &sent {
        Sent::Run(run) => (Some(run.clone()), None),
        Sent::Pending(p) => (None, Some(p.clone())),
        Sent::Command(answer) => {
            // A command's answer goes to the sender as it is, no run to follow.
            let answer = answer.clone();
            cd.store
                .call(move |conn| {
                    store::set_reply(conn, id, &answer)?;
                    store::set_chat(conn, &bid, &sc, &c, now)
                })
                .await
                .map_err(|_| None)?;
            tracing::info!(binding = %binding.id, message = m.id, chat = %chat, "a command answered");
            cd.work.notify_one();
            return Ok(());
        }
    };
    cd.store
        .call(move |conn| {
            store::set_sent(conn, id, &c, run.as_deref(), pending.as_deref())?;
            store::set_chat(conn, &bid, &sc, &c, now)
        })
        .await
        .map_err(|_| None)?;
    cd.metrics
        .messages
        .get_or_create(&crate::metrics::Outcome {
            outcome: "sent".into(),
        })
        .inc();
    tracing::info!(binding = %binding.id, message = m.id, chat = %chat, waiting = matches!(sent, Sent::Pending(_)), "message in chatd");
    spawn_worker(cd, &binding.id, &chat);
    Ok(())
}

/// Starts the chat's worker unless it runs already.
pub fn spawn_worker(cd: &Arc<Connectord>, binding: &str, chat: &str) {
    let key = (binding.to_string(), chat.to_string());
    if !lock(&cd.workers).insert(key.clone()) {
        return;
    }
    /// Frees the chat's worker slot however the worker ends (a panic too).
    struct Slot(Arc<Connectord>, (String, String));
    impl Drop for Slot {
        fn drop(&mut self) {
            lock(&self.0.workers).remove(&self.1);
            // A message may have come in while it was ending.
            self.0.work.notify_one();
        }
    }
    let slot = Slot(cd.clone(), key);
    tokio::spawn(async move {
        let (cd, key) = (&slot.0, &slot.1);
        if let Err(err) = work(cd, &key.0, &key.1).await {
            tracing::warn!(binding = %key.0, chat = %key.1, error = %format!("{err:#}"), "a chat's turn stopped; it is taken up again");
        }
    });
}

/// Posts each command's answer chatd gave (not rate-limited like notices:
/// the sender asked for it). One that does not go out is tried again.
async fn send_replies(cd: &Arc<Connectord>) -> anyhow::Result<()> {
    let due = cd
        .store
        .call(|conn| store::messages_in(conn, InboundState::Reply))
        .await?;
    for m in due {
        let bid = m.binding_id.clone();
        let binding = cd
            .store
            .call(move |conn| store::binding(conn, &bid))
            .await?;
        let (Some(binding), Some(answer)) = (binding, &m.note) else {
            continue;
        };
        let Some(outbox) = cd.outbox(&binding) else {
            continue;
        };
        if let Err(err) = outbox.post(&m.target(), answer).await {
            tracing::warn!(binding = %m.binding_id, error = %err, "a command's answer did not go out; trying again");
            continue;
        }
        let id = m.id;
        cd.store
            .call(move |conn| store::set_answered(conn, &[id]))
            .await?;
    }
    Ok(())
}

/// Answers the chat's unanswered messages, run by run, until none is left.
async fn work(cd: &Arc<Connectord>, binding_id: &str, chat: &str) -> anyhow::Result<()> {
    let mut answered_runs: HashSet<String> = HashSet::new();
    loop {
        if cd.shutdown.is_begun() {
            return Ok(());
        }
        let (bid, c) = (binding_id.to_string(), chat.to_string());
        let rows = cd
            .store
            .call(move |conn| store::unanswered(conn, &bid, &c))
            .await?;
        let Some(last) = rows.last() else {
            return Ok(());
        };
        let bid = binding_id.to_string();
        let Some(binding) = cd
            .store
            .call(move |conn| store::binding(conn, &bid))
            .await?
        else {
            return Ok(());
        };
        if !binding.enabled {
            return Ok(());
        }
        let Some(outbox) = cd.outbox(&binding) else {
            anyhow::bail!("the binding's token does not open");
        };
        let run = match rows.iter().find_map(|r| r.run_id.clone()) {
            Some(run) => run,
            None => match run_to_follow(cd, chat, &rows, &answered_runs).await? {
                Some(run) => run,
                None => {
                    // Their run was answered already: nothing more to post.
                    let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
                    cd.store
                        .call(move |conn| store::set_answered(conn, &ids))
                        .await?;
                    continue;
                }
            },
        };
        // The answer goes where the run's own (latest) message came from.
        let target = rows
            .iter()
            .rev()
            .find(|r| r.run_id.as_deref() == Some(run.as_str()))
            .unwrap_or(last)
            .target();
        let settings = Settings::of(&binding);
        let pacer = cd.pacer(&binding.id);
        // A thread the bot works in is its own from the start: a follow-up
        // there while it works is read too.
        if settings.follow_threads != crate::bindings::Follow::Never {
            if let (Some(thread), true) = (&target.thread, binding.kind == "slack") {
                let (bid, ch, th) = (binding.id.clone(), target.chat_id.clone(), thread.clone());
                let until = tandem_shared::time::now_unix() + 24 * 3600;
                cd.store
                    .call(move |conn| store::follow(conn, &bid, &ch, &th, until))
                    .await?;
            }
        }
        let (answer, delivered) = follow(cd, &outbox, &pacer, &settings, &target, chat, &run).await;
        let (rid, d) = (run.clone(), delivered.clone());
        cd.store
            .call(move |conn| {
                for p in &d {
                    store::set_run_of_pending(conn, p, &rid)?;
                }
                Ok(())
            })
            .await?;
        // Deleted or switched off while the run worked: nothing more goes out.
        let bid = binding.id.clone();
        let now = cd
            .store
            .call(move |conn| store::binding(conn, &bid))
            .await?;
        match &now {
            Some(b) if b.enabled && b.token == binding.token => {}
            _ => return Ok(()),
        }
        // Replacing what was shown is an edit, and takes the binding's turn;
        // an answer sent as a new message (reply mode off) does not.
        if answer.progress.is_some() {
            pacer.turn().await;
        }
        let posted = post_answer(&outbox, &target, answer.progress.as_ref(), &answer.text).await;
        let outcome = match &posted {
            Ok(_) => "answered",
            Err(SendError::Unauthorized(_)) => "unauthorized",
            Err(_) => "not_delivered",
        };
        cd.metrics
            .messages
            .get_or_create(&crate::metrics::Outcome {
                outcome: outcome.into(),
            })
            .inc();
        if let Err(err) = &posted {
            tracing::warn!(binding = %binding.id, chat = %chat, run = %run, error = %err, "the answer did not reach the sender");
            if let SendError::Unauthorized(reason) = err {
                crate::switch_off(cd, &binding.id, reason).await;
                return Ok(());
            }
        }
        if settings.send_files && posted.is_ok() {
            send_files(cd, &outbox, &target, chat, &answer.files).await;
        }
        // Marked answered also when the platform refused it for good: sending
        // it again would be refused again.
        let (bid, c, rid) = (binding.id.clone(), chat.to_string(), run.clone());
        cd.store
            .call(move |conn| {
                let ids: Vec<i64> = store::unanswered(conn, &bid, &c)?
                    .into_iter()
                    .filter(|r| r.run_id.as_deref() == Some(rid.as_str()))
                    .map(|r| r.id)
                    .collect();
                store::set_answered(conn, &ids)
            })
            .await?;
        tracing::info!(binding = %binding.id, chat = %chat, run = %run, chars = answer.text.chars().count(), "answered");
        answered_runs.insert(run);
    }
}

/// The run that answers messages with no run yet: the chat's working run
/// (they wait in it), a `send-now` run when they still wait after it, or
/// the chat's last run when they reached one that was not followed here.
async fn run_to_follow(
    cd: &Arc<Connectord>,
    chat: &str,
    rows: &[Message],
    answered: &HashSet<String>,
) -> anyhow::Result<Option<String>> {
    for _ in 0..3 {
        if let Some(next) = next_run(cd, chat, rows, answered).await? {
            return Ok(next);
        }
    }
    anyhow::bail!("the chat's runs kept changing while a run for its waiting messages was started")
}

/// `None`: another device started a run meanwhile; look again.
async fn next_run(
    cd: &Arc<Connectord>,
    chat: &str,
    rows: &[Message],
    answered: &HashSet<String>,
) -> anyhow::Result<Option<Option<String>>> {
    let snapshot = match cd.chat.snapshot(chat).await {
        Ok(snapshot) => snapshot,
        // The person deleted the chat while messages waited in it: they go
        // again, to a new chat.
        Err(ChatError::Refused { status: 404, .. }) => {
            if let Some(binding) = rows.first().map(|r| r.binding_id.clone()) {
                let c = chat.to_string();
                cd.store
                    .call(move |conn| store::requeue(conn, &binding, &c))
                    .await?;
                cd.work.notify_one();
            }
            anyhow::bail!("the chat is gone from chatd; its waiting messages go to a new one");
        }
        Err(err) => anyhow::bail!("{err}"),
    };
    let runs = snapshot["runs"].as_array().cloned().unwrap_or_default();
    if let Some(active) = active_run(&snapshot) {
        return Ok(Some(active["id"].as_str().map(str::to_string)));
    }
    let waiting: HashSet<&str> = snapshot["pending"]
        .as_array()
        .map(|p| {
            p.iter()
                .filter(|p| p["state"].as_str().unwrap_or("waiting") == "waiting")
                .filter_map(|p| p["id"].as_str())
                .collect()
        })
        .unwrap_or_default();
    let ours: Vec<String> = rows
        .iter()
        .filter_map(|r| r.pending_id.clone())
        .filter(|p| waiting.contains(p.as_str()))
        .collect();
    if !ours.is_empty() {
        let run = match cd.chat.send_now(chat, "connector").await {
            Ok(run) => run,
            // The agent's folder went while they waited: they get its
            // sentence, as a message sent now would (no run to follow).
            Err(err) if err.agent_folder_missing() => {
                // Taken back from chatd too, so no later run acts on what
                // the sender was told was not passed on.
                for pending in &ours {
                    cd.chat.remove_pending(chat, pending).await?;
                }
                let ids: Vec<i64> = rows
                    .iter()
                    .filter(|r| r.pending_id.as_ref().is_some_and(|p| ours.contains(p)))
                    .map(|r| r.id)
                    .collect();
                let n = ids.len();
                cd.store
                    .call(move |conn| {
                        for id in ids {
                            store::set_refused(conn, id, FOLDER_MISSING)?;
                        }
                        Ok(())
                    })
                    .await?;
                anyhow::bail!("the agent's folder is missing: {n} waiting messages were refused");
            }
            // Another device started one meanwhile: follow it next round.
            Err(ChatError::Refused { status: 409, .. }) => return Ok(None),
            Err(err) => anyhow::bail!("starting a run for the waiting messages: {err}"),
        };
        let r = run.clone();
        cd.store
            .call(move |conn| {
                for p in &ours {
                    store::set_run_of_pending(conn, p, &r)?;
                }
                Ok(())
            })
            .await?;
        return Ok(Some(Some(run)));
    }
    let last = runs
        .last()
        .and_then(|r| r["id"].as_str())
        .map(str::to_string);
    Ok(Some(last.filter(|r| !answered.contains(r))))
}

/// Files a turn may send (with `send_files`): documents, data, pictures,
/// sound and video, by extension; at most this many a turn.
const FILE_KINDS: &[&str] = &[
    "pdf", "doc", "docx", "odt", "rtf", "txt", "md", "xls", "xlsx", "ods", "ppt", "pptx", "odp",
    "csv", "tsv", "json", "xml", "yaml", "yml", "zip", "png", "jpg", "jpeg", "gif", "webp", "svg",
    "mp3", "ogg", "oga", "wav", "flac", "m4a", "mp4", "webm", "mov", "mkv",
];
pub const MAX_FILES: usize = 5;

/// The files the run wrote (`write_file` calls), in order, each once,
/// of the kinds a sender may get; at most `MAX_FILES`.
fn files_of(snapshot: &Value, run: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let messages = snapshot["messages"].as_array().cloned().unwrap_or_default();
    for m in messages
        .iter()
        .filter(|m| m["role"] == "assistant" && m["run_id"] == run)
    {
        for call in m["tool_calls"].as_array().into_iter().flatten() {
            let function = &call["function"];
            if function["name"] != "write_file" {
                continue;
            }
            let args = match &function["arguments"] {
                Value::String(text) => serde_json::from_str(text).unwrap_or(Value::Null),
                other => other.clone(),
            };
            let Some(path) = args["path"].as_str() else {
                continue;
            };
            let kind = path.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
            if kind.is_some_and(|k| FILE_KINDS.contains(&k.as_str()))
                && !out.iter().any(|p| p == path)
            {
                out.push(path.to_string());
            }
        }
    }
    out.truncate(MAX_FILES);
    out
}

/// The run's answer, and what showed it growing.
struct Answer {
    text: String,
    /// The files the run wrote that a sender may get.
    files: Vec<String>,
    /// The progress or stream message the answer replaces.
    progress: Option<Posted>,
}

/// Follows `run` to its end while showing what it does; the answer, and
/// the waiting messages that went into the run.
async fn follow(
    cd: &Arc<Connectord>,
    outbox: &Outbox,
    pacer: &Arc<Pacer>,
    settings: &Settings,
    target: &Target,
    chat: &str,
    run: &str,
) -> (Answer, Vec<String>) {
    let (tx, rx) = mpsc::unbounded_channel::<(String, Value)>();
    let delivered: Arc<Mutex<Vec<String>>> = Arc::default();
    let render = tokio::spawn(render(
        rx,
        outbox.clone(),
        pacer.clone(),
        settings.reply_mode,
        target.clone(),
        Duration::from_millis(cd.config.typing_ms),
        outbox.is_slack(),
    ));
    let mut on_event = {
        let delivered = delivered.clone();
        move |kind: &str, data: &Value| {
            if kind == "pending.delivered" {
                if let Some(p) = data["pending_id"].as_str() {
                    lock(&delivered).push(p.to_string());
                }
            }
            let _ = tx.send((kind.to_string(), data.clone()));
        }
    };
    let limit = Duration::from_secs(cd.config.turn_timeout_s);
    let end = match tokio::time::timeout(limit, cd.chat.follow(chat, run, &mut on_event)).await {
        Ok(end) => Some(end),
        Err(_) => {
            let _ = cd.chat.stop(chat).await;
            None
        }
    };
    drop(on_event);
    let progress = render.await.ok().flatten();
    let snapshot = cd.chat.snapshot(chat).await.ok();
    let mut text = snapshot
        .as_ref()
        .and_then(|s| answer_of(s, run))
        .unwrap_or_default();
    let files = snapshot
        .as_ref()
        .map(|s| files_of(s, run))
        .unwrap_or_default();
    match end {
        None => text.push_str(&format!(
            "\n\n(Stopped: an answer may take {} at most.)",
            span(cd.config.turn_timeout_s)
        )),
        Some(end) => match ChatRunStatus::parse(&end.status) {
            Some(ChatRunStatus::Done) => {}
            Some(ChatRunStatus::Interrupted) => text
                .push_str("\n\n(The answer was cut short by a restart. Send a message to go on.)"),
            Some(ChatRunStatus::Stopped) => text.push_str("\n\n(Stopped.)"),
            _ => text.push_str(&format!(
                "\n\n(That failed: {}.)",
                end.error.as_deref().unwrap_or("the run did not finish")
            )),
        },
    }
    if text.trim().is_empty() {
        text = "(No answer.)".into();
    }
    let delivered = lock(&delivered).clone();
    (
        Answer {
            text: text.trim().to_string(),
            files,
            progress,
        },
        delivered,
    )
}

fn span(seconds: u64) -> String {
    if seconds.is_multiple_of(60) {
        format!("{} minutes", seconds / 60)
    } else {
        format!("{seconds} s")
    }
}

/// The text of the run's assistant messages in the snapshot.
fn answer_of(snapshot: &Value, run: &str) -> Option<String> {
    let parts: Vec<&str> = snapshot["messages"]
        .as_array()?
        .iter()
        .filter(|m| m["role"] == "assistant" && m["run_id"] == run)
        .filter_map(|m| m["text"].as_str())
        .filter(|t| !t.trim().is_empty())
        .collect();
    // Between tool calls a run writes several messages; the last is the answer.
    parts.last().map(|t| t.to_string())
}

/// Shows the run while it works: typing, and a progress line or the
/// growing answer, edited at the binding's pace; the message it posted.
async fn render(
    mut rx: mpsc::UnboundedReceiver<(String, Value)>,
    outbox: Outbox,
    pacer: Arc<Pacer>,
    mode: ReplyMode,
    target: Target,
    typing_every: Duration,
    slack: bool,
) -> Option<Posted> {
    let mut posted: Option<Posted> = None;
    let mut shown = String::new();
    // Slack shows "Working…" whatever the mode: it has no typing sign.
    let mut want = if mode == ReplyMode::Progress || slack {
        WORKING.to_string()
    } else {
        String::new()
    };
    let mut streamed = String::new();
    let mut typing = tokio::time::interval(typing_every);
    let mut wake: Option<tokio::time::Instant> = None;
    let mut open = true;
    while open || (want != shown && !want.is_empty() && wake.is_some()) {
        tokio::select! {
            event = rx.recv(), if open => match event {
                None => open = false,
                Some((kind, data)) => match (kind.as_str(), mode) {
                    ("text.delta", ReplyMode::Stream) => {
                        streamed.push_str(data["text"].as_str().unwrap_or(""));
                        want = tail(&streamed);
                    }
                    ("tool.consent", _) => {
                        let summary = data["summary"].as_str().or(data["name"].as_str()).unwrap_or("a tool call");
                        want = format!(
                            "Waiting for approval in tandem: {}",
                            summary.chars().take(200).collect::<String>()
                        );
                    }
                    ("tool.started", ReplyMode::Progress) => {
                        let summary = data["summary"].as_str().or(data["name"].as_str()).unwrap_or("a tool");
                        want = format!("{WORKING} {}", summary.chars().take(200).collect::<String>());
                    }
                    _ => {}
                },
            },
            _ = typing.tick(), if open && !slack => {
                let _ = outbox.typing(&target).await;
            }
            _ = async { tokio::time::sleep_until(wake.unwrap_or_else(tokio::time::Instant::now)).await }, if wake.is_some() => {
                wake = None;
            }
        }
        if !open {
            // The answer replaces what is shown: no last edit needed.
            break;
        }
        if want.is_empty() || want == shown || wake.is_some() {
            continue;
        }
        match pacer.try_turn() {
            Err(at) => wake = Some(at),
            Ok(()) => {
                let result = match &posted {
                    None => outbox.post(&target, &want).await.map(|p| posted = Some(p)),
                    Some(p) => outbox.edit(&target, p, &want).await,
                };
                if result.is_ok() {
                    shown = want.clone();
                }
            }
        }
    }
    posted
}

/// The end of a growing answer, as much as fits in place.
fn tail(text: &str) -> String {
    let n = text.chars().count();
    if n <= STREAM_TAIL {
        return text.to_string();
    }
    let rest: String = text.chars().skip(n - STREAM_TAIL).collect();
    format!("…{rest}")
}

/// Sends the files the turn wrote; one that cannot be read or sent is
/// logged and skipped (the answer went out already).
async fn send_files(
    cd: &Arc<Connectord>,
    outbox: &Outbox,
    target: &Target,
    chat: &str,
    files: &[String],
) {
    for path in files {
        let bytes = match cd.chat.file(chat, path).await {
            Ok(bytes) => bytes,
            Err(err) => {
                tracing::warn!(chat = %chat, error = %err, "a file of the turn could not be read");
                continue;
            }
        };
        let name = path.rsplit('/').next().unwrap_or(path);
        let size = bytes.len();
        match outbox.send_file(target, name, bytes).await {
            Ok(()) => tracing::info!(chat = %chat, bytes = size, "a file of the turn sent"),
            Err(err) => {
                tracing::warn!(chat = %chat, bytes = size, error = %err, "a file of the turn did not go out")
            }
        }
    }
}

async fn post_answer(
    outbox: &Outbox,
    target: &Target,
    progress: Option<&Posted>,
    text: &str,
) -> Result<Vec<Posted>, SendError> {
    let mut tries = 0;
    loop {
        tries += 1;
        match outbox.answer(target, progress, text).await {
            // A 429 delivered nothing; a cut is retried part by part inside
            // `answer` (sending it all again would repeat the parts that arrived).
            Err(SendError::RetryAfter(_)) if tries < 5 => {
                tokio::time::sleep(Duration::from_secs(1 << tries)).await;
            }
            other => return other,
        }
    }
}

/// Sends the notices of refused messages (too long, too fast, chatd
/// refused): one a minute a sender at most.
pub async fn send_notices(cd: &Arc<Connectord>) -> anyhow::Result<()> {
    send_replies(cd).await?;
    let refused = cd
        .store
        .call(|conn| store::messages_in(conn, InboundState::Refused))
        .await?;
    for m in refused {
        let key = (m.binding_id.clone(), m.message.sender_id.clone());
        let due = {
            let mut last = lock(&cd.noticed);
            let now = std::time::Instant::now();
            match last.get(&key) {
                Some(at) if now.duration_since(*at) < Duration::from_secs(60) => false,
                _ => {
                    last.insert(key, now);
                    true
                }
            }
        };
        let bid = m.binding_id.clone();
        let binding = cd
            .store
            .call(move |conn| store::binding(conn, &bid))
            .await?;
        if let (true, Some(binding)) = (due, binding) {
            if let (Some(outbox), Some(note)) = (cd.outbox(&binding), &m.note) {
                if let Err(err) = outbox.post(&m.target(), note).await {
                    tracing::warn!(binding = %m.binding_id, error = %err, "a notice did not go out");
                }
            }
        }
        let id = m.id;
        cd.store
            .call(move |conn| store::set_noticed(conn, id))
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_a_turn_wrote_of_the_kinds_a_sender_may_get() {
        let call = |path: &str| json!({"id": "c", "type": "function", "function": {"name": "write_file", "arguments": json!({"path": path, "content": "x"}).to_string()}});
        let snap = json!({"messages": [
            {"role": "assistant", "run_id": "r_1", "tool_calls": [call("report.pdf"), call("notes/a.md"), call("tool.sh"), call("report.pdf")]},
            {"role": "assistant", "run_id": "r_0", "tool_calls": [call("old.png")]},
            {"role": "assistant", "run_id": "r_1", "tool_calls": [call("a.png"), call("b.mp3"), call("c.csv"), call("d.mp4")]}
        ]});
        assert_eq!(
            files_of(&snap, "r_1"),
            vec!["report.pdf", "notes/a.md", "a.png", "b.mp3", "c.csv"],
            "in order, once each, no scripts, another run's not, at most 5"
        );
    }
}
