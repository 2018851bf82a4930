//! One trigger run: a chat of the owner made through chatd's API (origin
//! `trigger`, in the shared workspace), its first message (the prompt, the
//! folder's AGENTS.md rules, the file that arrived, the closing line), the
//! run followed to its end, and what it did recorded: status, tokens,
//! reason, the closing sentence for the inbox. A run has `run_timeout_s`
//! (15 minutes); past that its chat run is stopped.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::ts;
use crate::status::RunStatus;
use crate::store::{self, Ending, Run, Trigger};
use crate::Triggerd;
use tandem_shared::chatd::{self as chat, ChatClient, ChatError, Sent};

/// The line every run's message ends with: the inbox shows its answer.
pub const CLOSING: &str =
    "When you are done, end your answer with one plain sentence that says what changed.";

/// The most of an answer the inbox entry carries.
pub const MAX_SUMMARY: usize = 300;

/// The first message of a run.
pub fn compose(trigger: &Trigger, rules: Option<&str>, file: Option<&str>) -> String {
    let mut text = trigger.prompt.trim().to_string();
    if let Some(rules) = rules {
        let from = if trigger.folder.is_empty() {
            "AGENTS.md".to_string()
        } else {
            format!("{}/AGENTS.md", trigger.folder)
        };
        text.push_str(&format!("\n\nRules from {from}:\n{rules}"));
    }
    if let Some(file) = file {
        let path = if trigger.folder.is_empty() {
            file.to_string()
        } else {
            format!("{}/{file}", trigger.folder)
        };
        text.push_str(&format!("\n\nA new file arrived: {path}"));
    }
    text.push_str("\n\n");
    text.push_str(CLOSING);
    text
}

/// The chat's title: the trigger's name and what started it.
pub fn title(trigger: &Trigger, run: &Run) -> String {
    let what = match &run.file {
        Some(file) => file.clone(),
        None => {
            let zone = crate::schedule::zone(&trigger.tz).unwrap_or(jiff::tz::TimeZone::UTC);
            ts(run.due_ms)
                .to_zoned_datetime(zone)
                .strftime("%Y-%m-%d %H:%M")
                .to_string()
        }
    };
    // A file's name may hold control characters; a title may not.
    let what: String = what
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    let mut title = format!("{} · {what}", trigger.name);
    if title.chars().count() > 200 {
        title = title.chars().take(199).collect::<String>() + "…";
    }
    title
}

/// The answer's last sentence (its closing line), cut at MAX_SUMMARY.
pub fn summary(answer: &str) -> String {
    let text = answer.trim();
    let last = text
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with("```"))
        .unwrap_or("");
    let sentence = {
        let body = last.trim_end_matches(['.', '!', '?']);
        match body.rfind(". ") {
            Some(i) => &last[i + 2..],
            None => last,
        }
    };
    let mut out: String = sentence.chars().take(MAX_SUMMARY).collect();
    if sentence.chars().count() > MAX_SUMMARY {
        out.push('…');
    }
    out
}

/// Seconds as a person says them: "15 minutes", "90 s".
pub fn span(seconds: u64) -> String {
    match seconds {
        60 => "1 minute".into(),
        s if s % 60 == 0 => format!("{} minutes", s / 60),
        s => format!("{s} s"),
    }
}

/// Drives `run` (already marked running) to its end and records it.
pub async fn drive(td: Arc<Triggerd>, run: Run, trigger: Trigger) {
    let limit = Duration::from_secs(td.config.run_timeout_s);
    let started = std::time::Instant::now();
    let cancel = tandem_shared::sync::lock(&td.live)
        .cancels
        .get(&trigger.id)
        .cloned()
        .unwrap_or_default();
    let outcome = tokio::select! {
        outcome = tokio::time::timeout(limit, attempt(&td, &run, &trigger)) => Some(outcome),
        // The trigger was deleted: its run ends now, its chat stays.
        _ = cancel.notified() => None,
        // The run stays `running` in the store: the next start records it
        // interrupted, as it does after a crash.
        _ = td.shutdown.wait() => return,
    };
    let (ending, snapshot) = match outcome {
        None => {
            stop_chat(&td, &run.id, "deleted").await;
            (
                Ending {
                    reason: Some("its trigger was deleted".into()),
                    ..Ending::new(RunStatus::Stopped)
                },
                None,
            )
        }
        Some(Ok(Ok(ended))) => ended,
        Some(Ok(Err(reason))) => (
            Ending {
                reason: Some(reason),
                ..Ending::new(RunStatus::Failed)
            },
            None,
        ),
        Some(Err(_)) => {
            stop_chat(&td, &run.id, "past its time").await;
            (
                Ending {
                    reason: Some(format!(
                        "stopped after {} (run_timeout_s {})",
                        span(td.config.run_timeout_s),
                        td.config.run_timeout_s
                    )),
                    ..Ending::new(RunStatus::Failed)
                },
                None,
            )
        }
    };
    let started_ms = run.started_ms.unwrap_or(run.queued_ms);
    take_out_own_writes(&td, &trigger, &run.id, started_ms, snapshot).await;
    let now = td.clock.now_ms();
    let (id, recorded) = (run.id.clone(), ending.clone());
    if let Err(err) = td
        .store
        .call(move |conn| store::finish(conn, &id, &recorded, now))
        .await
    {
        tracing::error!(run = %run.id, error = %format!("{err:#}"), "could not record a run's end");
    }
    tandem_shared::sync::lock(&td.live).stopped(&trigger.id);
    td.metrics.running.dec();
    td.metrics
        .runs
        .get_or_create(&crate::metrics::RunLabels {
            cause: run.cause.clone(),
            outcome: ending.status.as_str().into(),
        })
        .inc();
    td.metrics
        .run_seconds
        .observe(started.elapsed().as_secs_f64());
    tracing::info!(run = %run.id, trigger = %trigger.id, status = %ending.status,
        tokens = ending.tokens, seconds = started.elapsed().as_secs(), "trigger run ended");
    td.wake.notify_one();
    td.deliver.notify_one();
}

/// Stops the run's chat in chatd, when the run made one.
async fn stop_chat(td: &Arc<Triggerd>, run_id: &str, why: &str) {
    if let Some((chat, _)) = recorded_chat(td, run_id).await {
        if let Err(err) = td.chat.stop(&chat).await {
            tracing::warn!(run = %run_id, chat, why, error = %err, "could not stop a run's chat");
        }
    }
}

/// Calls chatd until it answers or refuses; the refusal itself, or `None`
/// (never: the caller's time bound ends the wait).
async fn retry_chat<T, F, Fut>(what: &str, mut call: F) -> Result<T, Option<ChatError>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ChatError>>,
{
    let mut wait = Duration::from_secs(1);
    loop {
        match call().await {
            Ok(value) => return Ok(value),
            Err(err) if err.retryable() => {
                tracing::warn!(what, error = %err, wait_s = wait.as_secs(), "chatd did not answer; trying again");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(30));
            }
            Err(err) => return Err(Some(err)),
        }
    }
}

async fn attempt(
    td: &Arc<Triggerd>,
    run: &Run,
    trigger: &Trigger,
) -> Result<(Ending, Option<serde_json::Value>), String> {
    // An agent kept to a folder reaches nothing of the shared workspace, so
    // its run gets none of its rules either (an agent not read: none too).
    let kept = !trigger.agent_id.is_empty()
        && match td.chat.agent(&trigger.agent_id).await {
            Ok(Some(agent)) => chat::agent_folder(&agent) != chat::AgentFolder::None,
            _ => true,
        };
    // The folder is checked again: rules never come from outside the workspace.
    let (workspace, relative) = (td.workspace.clone(), trigger.folder.clone());
    let rules = match kept {
        true => None,
        false => tokio::task::spawn_blocking(move || {
            let (_, folder) = crate::folders::resolve(&workspace, &relative).ok()?;
            crate::folders::rules(&folder)
        })
        .await
        .ok()
        .flatten(),
    };
    let text = compose(trigger, rules.as_deref(), run.file.as_deref());
    let title = title(trigger, run);
    let client: &ChatClient = &td.chat;
    // A chat of origin `trigger` in the shared workspace, as its agent when
    // it names one.
    let mut body = serde_json::json!({"title": title, "origin": "trigger", "workspace": "shared"});
    if !trigger.model.is_empty() {
        body["model"] = serde_json::json!(trigger.model);
    }
    if !trigger.agent_id.is_empty() {
        body["agent_id"] = serde_json::json!(trigger.agent_id);
    }
    if let Some(skipped) = unfit_agent(td, trigger).await {
        return Ok(skipped);
    }
    let made = retry_chat("making the run's chat", || client.create_chat(&body)).await;
    let chat_id = match made {
        Ok(id) => id,
        Err(Some(err)) if err.agent_folder_missing() => {
            return Ok(folder_missing(td, trigger, &run.id).await)
        }
        // Its agent is gone: the trigger cannot run again until it is fixed.
        Err(Some(ChatError::Refused {
            field: Some(field), ..
        })) if field == "agent_id" => {
            let reason = format!("its agent {} is gone from chatd", trigger.agent_id);
            if let Err(err) = crate::switch_off(td, &trigger.id, &reason).await {
                tracing::warn!(trigger = %trigger.id, error = %format!("{err:#}"), "could not switch a trigger off");
            }
            return Err(reason);
        }
        Err(Some(err)) => return Err(format!("making the run's chat: {err}")),
        Err(None) => return Err("making the run's chat: chatd did not answer".into()),
    };
    let (rid, cid) = (run.id.clone(), chat_id.clone());
    td.store
        .call(move |conn| store::set_chat(conn, &rid, &cid, None))
        .await
        .map_err(|e| format!("recording the chat: {e:#}"))?;
    let first = serde_json::json!({"text": text, "origin": "trigger"});
    let sent = retry_chat("sending the first message", || {
        client.send(&chat_id, &first)
    })
    .await;
    let chat_run = match sent {
        Ok(Sent::Run(run)) => run,
        // The chat was made for this run: nothing else can be working in it.
        Ok(Sent::Pending(_)) => return Err("the run's new chat already had a run working".into()),
        // chatd runs no command for a trigger: its prompt is always a message.
        Ok(Sent::Command(_)) => return Err("the trigger's prompt was taken as a command".into()),
        // The folder went after the chat was made: the empty chat goes too.
        Err(Some(err)) if err.agent_folder_missing() => {
            forget_chat(td, &run.id, &chat_id).await;
            return Ok(folder_missing(td, trigger, &run.id).await);
        }
        Err(Some(err)) => return Err(format!("sending the first message: {err}")),
        Err(None) => return Err("sending the first message: chatd did not answer".into()),
    };
    let (rid, cid, crid) = (run.id.clone(), chat_id.clone(), chat_run.clone());
    td.store
        .call(move |conn| store::set_chat(conn, &rid, &cid, Some(&crid)))
        .await
        .map_err(|e| format!("recording the chat run: {e:#}"))?;
    tracing::info!(run = %run.id, chat = %chat_id, chat_run = %chat_run, "trigger run's chat started");
    // A card the run shows waits for a person: the inbox asks for one.
    let mut on_event = |kind: &str, card: &serde_json::Value| {
        if kind != "tool.consent" {
            return;
        }
        let notice = store::Notice {
            id: tandem_shared::time::new_id("nt_"),
            trigger_id: trigger.id.clone(),
            trigger_name: trigger.name.clone(),
            title: format!("{} is waiting for you", trigger.name),
            body: format!(
                "It asks: {}. Answer in the chat within {}, or the run stops.",
                card["summary"].as_str().unwrap_or("a tool call"),
                span(td.config.run_timeout_s)
            ),
            conversation_id: Some(chat_id.clone()),
        };
        let td = td.clone();
        tokio::spawn(async move {
            let now = td.clock.now_ms();
            match td
                .store
                .call(move |conn| store::add_notice(conn, &notice, now))
                .await
            {
                Ok(()) => td.deliver.notify_one(),
                Err(err) => {
                    tracing::warn!(error = %format!("{err:#}"), "could not keep an inbox entry")
                }
            }
        });
    };
    let end = client.follow(&chat_id, &chat_run, &mut on_event).await;
    let snapshot = client.snapshot(&chat_id).await.ok();
    let answer = snapshot.as_ref().and_then(chat::last_answer);
    Ok((
        Ending {
            status: RunStatus::of_chat_end(&end.status),
            tokens: end.tokens,
            reason: end.error,
            summary: answer.map(|a| summary(&a)).filter(|s| !s.is_empty()),
        },
        snapshot,
    ))
}

/// What the inbox entry asks for when a trigger's agent's folder is missing.
const FOLDER_FIX: &str = "Restore the folder, or choose another one for the agent";

/// chatd refused the run's chat because its agent's folder is missing (409
/// `agent_folder_missing`): every next run would be refused too, so the
/// trigger is switched off and the run skipped, with no chat of its own.
async fn folder_missing(
    td: &Arc<Triggerd>,
    trigger: &Trigger,
    run_id: &str,
) -> (Ending, Option<serde_json::Value>) {
    let reason = format!(
        "the folder its agent {} keeps to is missing",
        trigger.agent_id
    );
    tracing::warn!(run = %run_id, trigger = %trigger.id, agent = %trigger.agent_id, "the run's agent's folder is missing");
    if let Err(err) = crate::switch_off_saying(td, &trigger.id, &reason, FOLDER_FIX).await {
        tracing::warn!(trigger = %trigger.id, error = %format!("{err:#}"), "could not switch a trigger off");
    }
    let ending = Ending {
        reason: Some(reason),
        ..Ending::new(RunStatus::Skipped)
    };
    (ending, None)
}

/// A file trigger's agent that gained a folder since the trigger was saved
/// cannot reach the shared workspace's files: the run is skipped and the
/// trigger switched off. An agent that cannot be read now is left to the
/// chat's making, which says what is wrong.
async fn unfit_agent(
    td: &Arc<Triggerd>,
    trigger: &Trigger,
) -> Option<(Ending, Option<serde_json::Value>)> {
    if trigger.kind != store::Kind::File || trigger.agent_id.is_empty() {
        return None;
    }
    let agent = td.chat.agent(&trigger.agent_id).await.ok()??;
    if chat::agent_folder(&agent) == chat::AgentFolder::None {
        return None;
    }
    let why = format!(
        "its agent {} keeps to a folder of its own now, out of reach of the shared workspace's files",
        trigger.agent_id
    );
    let fix = "Choose an agent without a folder";
    if let Err(err) = crate::switch_off_saying(td, &trigger.id, &why, fix).await {
        tracing::warn!(trigger = %trigger.id, error = %format!("{err:#}"), "could not switch a trigger off");
    }
    Some((
        Ending {
            reason: Some(why),
            ..Ending::new(RunStatus::Skipped)
        },
        None,
    ))
}

/// Deletes the run's chat in chatd (made, then refused its first message)
/// and forgets it; one that cannot be deleted stays recorded.
async fn forget_chat(td: &Arc<Triggerd>, run_id: &str, chat: &str) {
    if let Err(err) = td.chat.delete_chat(chat).await {
        tracing::warn!(run = %run_id, chat, error = %err, "could not delete a refused run's chat");
        return;
    }
    let id = run_id.to_string();
    if let Err(err) = td
        .store
        .call(move |conn| store::clear_chat(conn, &id))
        .await
    {
        tracing::warn!(run = %run_id, error = %format!("{err:#}"), "could not forget a deleted chat");
    }
}

/// The chat and chat run recorded for a run, if it got that far.
pub async fn recorded_chat(td: &Arc<Triggerd>, run_id: &str) -> Option<(String, Option<String>)> {
    let id = run_id.to_string();
    let run = td
        .store
        .call(move |conn| store::run(conn, &id))
        .await
        .ok()
        .flatten()?;
    Some((run.chat_id?, run.chat_run_id))
}

/// What the run wrote in its folder starts nothing (see
/// `scheduler::absorb_writes`); the chat's tool calls say what it wrote.
/// `snapshot`: the chat as the run left it, read here when not given.
pub async fn take_out_own_writes(
    td: &Arc<Triggerd>,
    trigger: &Trigger,
    run_id: &str,
    started_ms: i64,
    snapshot: Option<serde_json::Value>,
) {
    if trigger.kind != store::Kind::File {
        return;
    }
    // A trigger deleted meanwhile keeps no file rows.
    if !tandem_shared::sync::lock(&td.live)
        .entries
        .contains_key(&trigger.id)
    {
        return;
    }
    let own = match recorded_chat(td, run_id).await {
        Some((chat, Some(chat_run))) => {
            let snapshot = match snapshot {
                Some(s) => Some(s),
                None => tokio::time::timeout(Duration::from_secs(5), td.chat.snapshot(&chat))
                    .await
                    .ok()
                    .and_then(Result::ok),
            };
            match snapshot {
                Some(s) => crate::scheduler::own_writes(&s, &chat_run),
                // The chat cannot be read: whatever changed since the start
                // is taken as the run's, rather than starting it again.
                None => crate::scheduler::OwnWrites {
                    ran_commands: true,
                    ..Default::default()
                },
            }
        }
        _ => return,
    };
    if own.paths.is_empty() && !own.ran_commands {
        return;
    }
    let (workspace, relative) = (td.workspace.clone(), trigger.folder.clone());
    let Ok(Ok(scanned)) = tokio::task::spawn_blocking(move || {
        let (_, folder) = crate::folders::resolve(&workspace, &relative)?;
        crate::folders::scan(&folder).map_err(|e| e.to_string())
    })
    .await
    else {
        return;
    };
    let now = td.clock.now_ms();
    let (id, folder) = (trigger.id.clone(), trigger.folder.clone());
    let result = td
        .store
        .call(move |conn| {
            let stored = store::files_of(conn, &id)?;
            let d =
                crate::scheduler::absorb_writes(&stored, &scanned, &folder, &own, started_ms, now);
            let tx = conn.transaction()?;
            store::put_files(&tx, &id, &d.changed, &d.removed)?;
            tx.commit()?;
            Ok(d.changed.len())
        })
        .await;
    match result {
        Ok(n) if n > 0 => {
            tracing::info!(trigger = %trigger.id, files = n, "files the run wrote start nothing")
        }
        Ok(_) => {}
        Err(err) => {
            tracing::warn!(trigger = %trigger.id, error = %format!("{err:#}"), "could not take out the run's writes")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trigger(folder: &str) -> Trigger {
        Trigger {
            id: "t_1".into(),
            name: "File contracts".into(),
            kind: store::Kind::File,
            when: String::new(),
            tz: "Europe/Rome".into(),
            folder: folder.into(),
            quiet_seconds: 30,
            min_gap_seconds: 60,
            prompt: "File it.".into(),
            model: String::new(),
            agent_id: String::new(),
            daily_cap: 24,
            enabled: true,
            enabled_ms: 0,
            checked_ms: 0,
            disabled_reason: None,
            created_ms: 0,
            updated_ms: 0,
        }
    }

    #[test]
    fn the_first_message_holds_prompt_rules_file_and_closing_line() {
        let text = compose(&trigger("Contracts"), Some("Keep names."), Some("a.pdf"));
        assert_eq!(
            text,
            format!(
                "File it.\n\nRules from Contracts/AGENTS.md:\nKeep names.\n\nA new file arrived: Contracts/a.pdf\n\n{CLOSING}"
            )
        );
        assert_eq!(
            compose(&trigger(""), None, None),
            format!("File it.\n\n{CLOSING}")
        );
    }

    #[test]
    fn the_summary_is_the_closing_sentence() {
        assert_eq!(
            summary("I read it.\n\nI moved a.pdf to Filed/. The folder is tidy."),
            "The folder is tidy."
        );
        assert_eq!(summary("Done"), "Done");
        assert_eq!(summary(&"x".repeat(400)).chars().count(), MAX_SUMMARY + 1);
    }
}
