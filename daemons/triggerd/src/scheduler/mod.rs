//! What is due, and starting it. Every check (`check_ms`, 5 s) looks at the
//! triggers held in memory: a schedule whose next time has come queues one
//! run for its latest due time (after a downtime: once, not once per missed
//! time); a file trigger's folder that changed is scanned again, and a file
//! quiet for `quiet_seconds` queues one run for its version. Then queued
//! runs start while there is room: `max_runs` at once, one per trigger,
//! `daily_cap` in 24 hours. A due key is unique in the store, so a due time
//! or a file version runs once however often it is looked at.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use jiff::tz::TimeZone;
use tandem_shared::time::new_id;

use crate::clock::{rfc3339, ts};
use crate::schedule::{self, Schedule};
use crate::status::RunStatus;
use crate::store::{self, Ending, Kind, Run, Trigger};
use crate::Triggerd;

mod files;
#[cfg(test)]
mod tests;

use files::folders;
pub use files::{absorb_writes, decide_files, file_key, own_writes, FileDecision, OwnWrites};

/// One trigger as the checks hold it.
pub struct Entry {
    pub trigger: Trigger,
    pub schedule: Option<Schedule>,
    pub zone: TimeZone,
    /// The next due time (unix ms) of an enabled schedule trigger.
    pub next_ms: Option<i64>,
    /// The folder's absolute path (file triggers, and schedule triggers with a folder).
    pub folder: PathBuf,
    /// A file waits for its quiet period or its gap: look again next check.
    pub pending: bool,
}

impl Entry {
    pub fn new(trigger: Trigger, workspace: &std::path::Path) -> Entry {
        // What is stored passed the checks when it was saved; a text this
        // build no longer reads leaves the trigger without a next time.
        let schedule = if trigger.kind == Kind::Schedule {
            Schedule::parse(&trigger.when).ok()
        } else {
            None
        };
        let zone = schedule::zone(&trigger.tz).unwrap_or(TimeZone::UTC);
        let folder = workspace.join(&trigger.folder);
        let mut entry = Entry {
            trigger,
            schedule,
            zone,
            next_ms: None,
            folder,
            pending: true,
        };
        entry.plan();
        entry
    }

    /// Sets `next_ms` from where the trigger's checks stand.
    pub fn plan(&mut self) {
        self.next_ms = match (&self.schedule, self.trigger.enabled) {
            (Some(s), true) => {
                let since = self.trigger.checked_ms.max(self.trigger.enabled_ms);
                s.next_after(ts(since), &self.zone)
                    .map(|t| t.as_millisecond())
            }
            _ => None,
        };
    }
}

/// The triggers in memory, and which of them run now.
#[derive(Default)]
pub struct Live {
    pub entries: HashMap<String, Entry>,
    /// trigger id → its running run's id.
    pub running: HashMap<String, String>,
    /// trigger id → the bell that ends its running run (the trigger was
    /// deleted). A permit is kept if it rings before the run listens.
    pub cancels: HashMap<String, std::sync::Arc<tokio::sync::Notify>>,
}

impl Live {
    /// A trigger's run ended (or never started).
    pub fn stopped(&mut self, trigger_id: &str) {
        self.running.remove(trigger_id);
        self.cancels.remove(trigger_id);
    }

    pub fn enabled(&self) -> usize {
        self.entries.values().filter(|e| e.trigger.enabled).count()
    }
}

/// One check: schedules, folders, then queued runs.
pub async fn check(td: &Arc<Triggerd>) {
    let started = std::time::Instant::now();
    let now = td.clock.now_ms();
    if let Err(err) = schedules(td, now).await {
        tracing::warn!(error = %format!("{err:#}"), "checking schedules failed");
    }
    if let Err(err) = folders(td, now).await {
        tracing::warn!(error = %format!("{err:#}"), "checking folders failed");
    }
    if let Err(err) = start_queued(td, now).await {
        tracing::warn!(error = %format!("{err:#}"), "starting runs failed");
    }
    td.metrics
        .check_seconds
        .observe(started.elapsed().as_secs_f64());
    td.checks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// The due runs of schedules whose time has come, as (trigger, name, due).
/// Nothing changes here: `advance` moves the checked triggers on once
/// their runs are stored, so a failed write leaves them due.
pub fn due_schedules(live: &Live, now: i64) -> Vec<(String, String, i64)> {
    let mut due = Vec::new();
    for entry in live.entries.values() {
        let Some(next) = entry.next_ms else {
            continue;
        };
        if next > now || !entry.trigger.enabled {
            continue;
        }
        let Some(schedule) = &entry.schedule else {
            continue;
        };
        let since = entry.trigger.checked_ms.max(entry.trigger.enabled_ms);
        let at = schedule
            .last_due(ts(since), ts(now), &entry.zone)
            .map(|t| t.as_millisecond())
            .unwrap_or(next);
        due.push((entry.trigger.id.clone(), entry.trigger.name.clone(), at));
    }
    due
}

/// The triggers in `due` have been looked at up to `now`.
pub fn advance(live: &mut Live, due: &[(String, String, i64)], now: i64) {
    for (id, _, _) in due {
        if let Some(entry) = live.entries.get_mut(id) {
            entry.trigger.checked_ms = entry.trigger.checked_ms.max(now);
            entry.plan();
        }
    }
}

/// The due key of a schedule's due time: one run per trigger and time.
pub fn schedule_key(trigger: &str, due_ms: i64) -> String {
    format!("{trigger}@{}", rfc3339(due_ms))
}

async fn schedules(td: &Arc<Triggerd>, now: i64) -> anyhow::Result<()> {
    let due = due_schedules(&tandem_shared::sync::lock(&td.live), now);
    if due.is_empty() {
        return Ok(());
    }
    let stored = due.clone();
    let queued = td
        .store
        .call(move |conn| {
            let tx = conn.transaction()?;
            let mut queued = 0usize;
            for (id, name, at) in &stored {
                let run = new_run(id, name, schedule_key(id, *at), "schedule", *at, None, now);
                queued += usize::from(store::queue_run(&tx, &run)?.is_some());
                store::set_checked(&tx, id, now)?;
            }
            tx.commit()?;
            Ok(queued)
        })
        .await?;
    advance(&mut tandem_shared::sync::lock(&td.live), &due, now);
    tracing::debug!(queued, "schedules due");
    Ok(())
}

pub fn new_run(
    trigger: &str,
    name: &str,
    due_key: String,
    cause: &str,
    due_ms: i64,
    file: Option<String>,
    now: i64,
) -> Run {
    Run {
        id: new_id("tr_"),
        trigger_id: trigger.to_string(),
        trigger_name: name.to_string(),
        due_key,
        cause: cause.to_string(),
        due_ms,
        file,
        status: RunStatus::Queued,
        chat_id: None,
        chat_run_id: None,
        queued_ms: now,
        started_ms: None,
        ended_ms: None,
        tokens: 0,
        reason: None,
        summary: None,
        notified: false,
    }
}

enum Next {
    Start(Box<Trigger>),
    Skip(String),
    Wait,
    Full,
}

async fn start_queued(td: &Arc<Triggerd>, now: i64) -> anyhow::Result<()> {
    if tandem_shared::sync::lock(&td.live).running.len() >= td.config.max_runs {
        return Ok(());
    }
    // The oldest few hundred: enough to fill max_runs past triggers that
    // already run, without reading a long queue at every check.
    let queued = td.store.call(|conn| store::queued_runs(conn, 256)).await?;
    for run in queued {
        let next = {
            let mut live = tandem_shared::sync::lock(&td.live);
            if live.running.len() >= td.config.max_runs {
                Next::Full
            } else if live.running.contains_key(&run.trigger_id) {
                Next::Wait
            } else {
                match live.entries.get(&run.trigger_id) {
                    None => Next::Skip("the trigger was deleted".into()),
                    Some(e) if !e.trigger.enabled && run.cause != "manual" => {
                        Next::Skip("the trigger was switched off".into())
                    }
                    Some(e) => {
                        let trigger = e.trigger.clone();
                        live.running.insert(run.trigger_id.clone(), run.id.clone());
                        live.cancels
                            .insert(run.trigger_id.clone(), Default::default());
                        Next::Start(Box::new(trigger))
                    }
                }
            }
        };
        let trigger = match next {
            Next::Full => break,
            Next::Wait => continue,
            Next::Skip(reason) => {
                skip(td, &run, reason, now).await?;
                continue;
            }
            Next::Start(trigger) => *trigger,
        };
        let (rid, tid, cap) = (run.id.clone(), trigger.id.clone(), trigger.daily_cap);
        let file = run.file.clone();
        let started = td
            .store
            .call(move |conn| {
                if store::started_since(conn, &tid, now - 86_400_000)? >= cap {
                    return Ok(false);
                }
                store::mark_started(conn, &rid, now)?;
                if let Some(file) = &file {
                    store::file_run_started(conn, &tid, file, now)?;
                }
                Ok(true)
            })
            .await;
        match started {
            Ok(true) => {}
            Ok(false) => {
                tandem_shared::sync::lock(&td.live).stopped(&run.trigger_id);
                let reason = format!("the daily cap of {cap} runs in 24 hours was reached");
                skip(td, &run, reason, now).await?;
                continue;
            }
            Err(err) => {
                tandem_shared::sync::lock(&td.live).stopped(&run.trigger_id);
                return Err(err);
            }
        }
        let lateness = (now - run.due_ms).max(0) as f64 / 1000.0;
        td.metrics.lateness_seconds.observe(lateness);
        td.metrics.running.inc();
        tracing::info!(run = %run.id, trigger = %trigger.id, cause = %run.cause,
            late_ms = now - run.due_ms, "trigger run started");
        let mut run = run;
        run.status = RunStatus::Running;
        run.started_ms = Some(now);
        let td = td.clone();
        tokio::spawn(async move { crate::runner::drive(td, run, trigger).await });
    }
    Ok(())
}

async fn skip(td: &Arc<Triggerd>, run: &Run, reason: String, now: i64) -> anyhow::Result<()> {
    tracing::info!(run = %run.id, trigger = %run.trigger_id, reason = %reason, "trigger run skipped");
    td.metrics
        .runs
        .get_or_create(&crate::metrics::RunLabels {
            cause: run.cause.clone(),
            outcome: RunStatus::Skipped.as_str().into(),
        })
        .inc();
    let id = run.id.clone();
    td.store
        .call(move |conn| {
            let ending = Ending {
                reason: Some(reason),
                ..Ending::new(RunStatus::Skipped)
            };
            store::finish(conn, &id, &ending, now)
        })
        .await?;
    Ok(())
}
