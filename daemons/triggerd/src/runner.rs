//! One trigger run: a chat of the owner made through chatd's API (origin
//! `trigger`, in the shared workspace), its first message (the prompt, the
//! folder's AGENTS.md rules, the file that arrived, the closing line), the
//! run followed to its end, and what it did recorded: status, tokens,
//! reason, the closing sentence for the inbox. A run has `run_timeout_s`
//! (15 minutes); past that its chat run is stopped.

use std::sync::Arc;
use std::time::Duration;

use crate::chat::{self, ChatClient, ChatError};
use crate::clock::ts;
use crate::store::{self, Ending, Run, Trigger};
use crate::Triggerd;

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
    let outcome = tokio::select! {
        outcome = tokio::time::timeout(limit, attempt(&td, &run, &trigger)) => outcome,
        // The run stays `running` in the store: the next start records it
        // interrupted, as it does after a crash.
        _ = td.shutdown.wait() => return,
    };
    let ending = match outcome {
        Ok(Ok(ending)) => ending,
        Ok(Err(reason)) => Ending {
            status: "failed".into(),
            reason: Some(reason),
            ..Ending::default()
        },
        Err(_) => {
            let chat = td
                .store
                .call({
                    let id = run.id.clone();
                    move |conn| store::run(conn, &id)
                })
                .await
                .ok()
                .flatten()
                .and_then(|r| r.chat_id);
            if let Some(chat) = chat {
                if let Err(err) = td.chat.stop(&chat).await {
                    tracing::warn!(run = %run.id, chat, error = %err, "could not stop a run past its time");
                }
            }
            Ending {
                status: "failed".into(),
                reason: Some(format!(
                    "stopped after {} (run_timeout_s {})",
                    span(td.config.run_timeout_s),
                    td.config.run_timeout_s
                )),
                ..Ending::default()
            }
        }
    };
    if !trigger.folder.is_empty() || trigger.kind == store::Kind::File {
        absorb_own_writes(&td, &trigger, run.started_ms.unwrap_or(run.queued_ms)).await;
    }
    let now = td.clock.now_ms();
    let (id, recorded) = (run.id.clone(), ending.clone());
    if let Err(err) = td
        .store
        .call(move |conn| store::finish(conn, &id, &recorded, now))
        .await
    {
        tracing::error!(run = %run.id, error = %format!("{err:#}"), "could not record a run's end");
    }
    crate::lock(&td.live).running.remove(&trigger.id);
    td.metrics.running.dec();
    td.metrics
        .runs
        .get_or_create(&crate::metrics::RunLabels {
            cause: run.cause.clone(),
            outcome: ending.status.clone(),
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

/// Calls chatd until it answers or refuses; a refusal is the reason.
async fn retry<T, F, Fut>(what: &str, mut call: F) -> Result<T, String>
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
            Err(err) => return Err(format!("{what}: {err}")),
        }
    }
}

async fn attempt(td: &Arc<Triggerd>, run: &Run, trigger: &Trigger) -> Result<Ending, String> {
    let folder = td.workspace.join(&trigger.folder);
    let rules = tokio::task::spawn_blocking(move || crate::folders::rules(&folder))
        .await
        .ok()
        .flatten();
    let text = compose(trigger, rules.as_deref(), run.file.as_deref());
    let title = title(trigger, run);
    let client: &ChatClient = &td.chat;
    let chat_id = retry("making the run's chat", || {
        client.create_chat(&title, &trigger.model)
    })
    .await?;
    let (rid, cid) = (run.id.clone(), chat_id.clone());
    td.store
        .call(move |conn| store::set_chat(conn, &rid, &cid, None))
        .await
        .map_err(|e| format!("recording the chat: {e:#}"))?;
    let chat_run = retry("sending the first message", || client.send(&chat_id, &text)).await?;
    let (rid, cid, crid) = (run.id.clone(), chat_id.clone(), chat_run.clone());
    td.store
        .call(move |conn| store::set_chat(conn, &rid, &cid, Some(&crid)))
        .await
        .map_err(|e| format!("recording the chat run: {e:#}"))?;
    tracing::info!(run = %run.id, chat = %chat_id, chat_run = %chat_run, "trigger run's chat started");
    let end = client.follow(&chat_id, &chat_run).await;
    let answer = match client.snapshot(&chat_id).await {
        Ok(snapshot) => chat::last_answer(&snapshot),
        Err(_) => None,
    };
    Ok(Ending {
        status: end.status,
        tokens: end.tokens,
        reason: end.error,
        summary: answer.map(|a| summary(&a)).filter(|s| !s.is_empty()),
    })
}

/// What the run wrote in its folder starts nothing (see
/// `scheduler::absorb_writes`).
async fn absorb_own_writes(td: &Arc<Triggerd>, trigger: &Trigger, started_ms: i64) {
    if trigger.kind != store::Kind::File {
        return;
    }
    let folder = td.workspace.join(&trigger.folder);
    let Ok(Ok(scanned)) = tokio::task::spawn_blocking(move || crate::folders::scan(&folder)).await
    else {
        return;
    };
    let now = td.clock.now_ms();
    let id = trigger.id.clone();
    let result = td
        .store
        .call(move |conn| {
            let stored = store::files_of(conn, &id)?;
            let d = crate::scheduler::absorb_writes(&stored, &scanned, started_ms, now);
            let tx = conn.transaction()?;
            store::put_files(&tx, &id, &d.changed, &d.removed)?;
            tx.commit()?;
            Ok(d.changed.len())
        })
        .await;
    match result {
        Ok(n) if n > 0 => {
            tracing::info!(trigger = %trigger.id, files = n, "files the run changed start nothing")
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
