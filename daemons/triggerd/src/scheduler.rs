//! What is due, and starting it. Every check (`check_ms`, 5 s) looks at the
//! triggers held in memory: a schedule whose next time has come queues one
//! run for its latest due time (after a downtime: once, not once per missed
//! time); a file trigger's folder that changed is scanned again, and a file
//! quiet for `quiet_seconds` queues one run for its version. Then queued
//! runs start while there is room: `max_runs` at once, one per trigger,
//! `daily_cap` in 24 hours. A due key is unique in the store, so a due time
//! or a file version runs once however often it is looked at.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use jiff::tz::TimeZone;
use tandem_shared::time::new_id;

use crate::clock::{rfc3339, ts};
use crate::schedule::{self, Schedule};
use crate::store::{self, Ending, FileState, Kind, Run, Trigger};
use crate::Triggerd;

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
}

impl Live {
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
pub fn due_schedules(live: &mut Live, now: i64) -> Vec<(String, String, i64)> {
    let mut due = Vec::new();
    for entry in live.entries.values_mut() {
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
        entry.trigger.checked_ms = now;
        entry.next_ms = schedule
            .next_after(ts(now), &entry.zone)
            .map(|t| t.as_millisecond());
    }
    due
}

/// The due key of a schedule's due time: one run per trigger and time.
pub fn schedule_key(trigger: &str, due_ms: i64) -> String {
    format!("{trigger}@{}", rfc3339(due_ms))
}

async fn schedules(td: &Arc<Triggerd>, now: i64) -> anyhow::Result<()> {
    let due = due_schedules(&mut crate::lock(&td.live), now);
    if due.is_empty() {
        return Ok(());
    }
    let queued = td
        .store
        .call(move |conn| {
            let tx = conn.transaction()?;
            let mut queued = 0usize;
            for (id, name, at) in &due {
                let run = new_run(id, name, schedule_key(id, *at), "schedule", *at, None, now);
                queued += store::queue_run(&tx, &run)?.is_some() as usize;
                store::set_checked(&tx, id, now)?;
            }
            tx.commit()?;
            Ok(queued)
        })
        .await?;
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
        status: "queued".into(),
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

/// What one look at a file trigger's folder decided.
#[derive(Debug, Default, PartialEq)]
pub struct FileDecision {
    /// Rows to write.
    pub changed: Vec<FileState>,
    /// Paths gone from the folder.
    pub removed: Vec<String>,
    /// Files due now: (path, version).
    pub due: Vec<(String, String)>,
    /// A file still waits for its quiet period or its gap.
    pub pending: bool,
}

/// The rules for a trigger's files. `scanned` is the folder as it is now
/// (`None`: not scanned this time, decide on what is stored); `running`: a
/// run of the trigger is under way (what changes meanwhile waits for its
/// end, when the run's own writes are taken out).
pub fn decide_files(
    stored: &[FileState],
    scanned: Option<&[(String, String)]>,
    now: i64,
    quiet_ms: i64,
    gap_ms: i64,
    running: bool,
) -> FileDecision {
    let mut decision = FileDecision::default();
    let mut current: Vec<FileState> = stored.to_vec();
    if let Some(scanned) = scanned {
        let on_disk: HashSet<&str> = scanned.iter().map(|(p, _)| p.as_str()).collect();
        for (path, version) in scanned {
            match current.iter_mut().find(|f| &f.path == path) {
                Some(f) if &f.version == version => {}
                Some(f) => {
                    f.version = version.clone();
                    f.seen_ms = now;
                    decision.changed.push(f.clone());
                }
                None => {
                    let f = FileState {
                        path: path.clone(),
                        version: version.clone(),
                        seen_ms: now,
                        ran_version: None,
                        ran_ms: None,
                    };
                    decision.changed.push(f.clone());
                    current.push(f);
                }
            }
        }
        for f in &current {
            if !on_disk.contains(f.path.as_str()) {
                decision.removed.push(f.path.clone());
            }
        }
        current.retain(|f| on_disk.contains(f.path.as_str()));
    }
    for f in &mut current {
        if f.ran_version.as_deref() == Some(f.version.as_str()) {
            continue;
        }
        if running || now - f.seen_ms < quiet_ms || f.ran_ms.is_some_and(|r| now - r < gap_ms) {
            decision.pending = true;
            continue;
        }
        f.ran_version = Some(f.version.clone());
        f.ran_ms = Some(now);
        decision.due.push((f.path.clone(), f.version.clone()));
        match decision.changed.iter_mut().find(|c| c.path == f.path) {
            Some(c) => *c = f.clone(),
            None => decision.changed.push(f.clone()),
        }
    }
    decision
}

/// After a run: every file that changed since it started is the run's own
/// write (or arrived while it worked) and starts nothing; a later change
/// of the run's own file waits for its gap.
pub fn absorb_writes(
    stored: &[FileState],
    scanned: &[(String, String)],
    started_ms: i64,
    now: i64,
) -> FileDecision {
    let mut decision = FileDecision::default();
    for (path, version) in scanned {
        let known = stored.iter().find(|f| &f.path == path);
        let row = match known {
            Some(f) if &f.version == version && f.seen_ms < started_ms => continue,
            Some(f) if f.ran_version.as_deref() == Some(version.as_str()) => continue,
            Some(f) => FileState {
                version: version.clone(),
                seen_ms: if &f.version == version {
                    f.seen_ms
                } else {
                    now
                },
                ran_version: Some(version.clone()),
                ..f.clone()
            },
            None => FileState {
                path: path.clone(),
                version: version.clone(),
                seen_ms: now,
                ran_version: Some(version.clone()),
                ran_ms: None,
            },
        };
        decision.changed.push(row);
    }
    let on_disk: HashSet<&str> = scanned.iter().map(|(p, _)| p.as_str()).collect();
    decision.removed = stored
        .iter()
        .filter(|f| !on_disk.contains(f.path.as_str()))
        .map(|f| f.path.clone())
        .collect();
    decision
}

/// The due key of a file version: one run per trigger, file and version.
pub fn file_key(trigger: &str, path: &str, version: &str) -> String {
    format!("{trigger}:file:{path}:{version}")
}

async fn folders(td: &Arc<Triggerd>, now: i64) -> anyhow::Result<()> {
    let dirty: HashSet<String> = std::mem::take(&mut *crate::lock(&td.dirty));
    let looks: Vec<(Trigger, PathBuf, bool, bool)> = {
        let mut live = crate::lock(&td.live);
        let running: HashSet<String> = live.running.keys().cloned().collect();
        live.entries
            .values_mut()
            .filter(|e| e.trigger.enabled && e.trigger.kind == Kind::File)
            .filter(|e| e.pending || dirty.contains(&e.trigger.id))
            .map(|e| {
                e.pending = false;
                (
                    e.trigger.clone(),
                    e.folder.clone(),
                    dirty.contains(&e.trigger.id),
                    running.contains(&e.trigger.id),
                )
            })
            .collect()
    };
    for (trigger, folder, rescan, running) in looks {
        let scanned = if rescan {
            match tokio::task::spawn_blocking(move || crate::folders::scan(&folder)).await? {
                Ok(found) => Some(found),
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                    let reason = format!(
                        "its folder {} is gone from the workspace",
                        if trigger.folder.is_empty() {
                            "(the workspace itself)"
                        } else {
                            &trigger.folder
                        }
                    );
                    crate::switch_off(td, &trigger.id, &reason).await?;
                    continue;
                }
                Err(err) => {
                    tracing::warn!(trigger = %trigger.id, error = %err, "scanning a folder failed");
                    crate::lock(&td.dirty).insert(trigger.id.clone());
                    continue;
                }
            }
        } else {
            None
        };
        let id = trigger.id.clone();
        let decision = td
            .store
            .call(move |conn| {
                let stored = store::files_of(conn, &trigger.id)?;
                let decision = decide_files(
                    &stored,
                    scanned.as_deref(),
                    now,
                    trigger.quiet_seconds as i64 * 1000,
                    trigger.min_gap_seconds as i64 * 1000,
                    running,
                );
                let tx = conn.transaction()?;
                for (path, version) in &decision.due {
                    let key = file_key(&trigger.id, path, version);
                    let run = new_run(
                        &trigger.id,
                        &trigger.name,
                        key,
                        "file",
                        now,
                        Some(path.clone()),
                        now,
                    );
                    store::queue_run(&tx, &run)?;
                }
                store::put_files(&tx, &trigger.id, &decision.changed, &decision.removed)?;
                tx.commit()?;
                Ok(decision)
            })
            .await?;
        if decision.pending {
            if let Some(e) = crate::lock(&td.live).entries.get_mut(&id) {
                e.pending = true;
            }
        }
    }
    Ok(())
}

enum Next {
    Start(Box<Trigger>),
    Skip(String),
    Wait,
    Full,
}

async fn start_queued(td: &Arc<Triggerd>, now: i64) -> anyhow::Result<()> {
    if crate::lock(&td.live).running.len() >= td.config.max_runs {
        return Ok(());
    }
    let queued = td
        .store
        .call(|conn| store::runs_with_status(conn, "queued"))
        .await?;
    for run in queued {
        let next = {
            let mut live = crate::lock(&td.live);
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
        let started = td
            .store
            .call(move |conn| {
                if store::started_since(conn, &tid, now - 86_400_000)? >= cap {
                    return Ok(false);
                }
                store::mark_started(conn, &rid, now)?;
                Ok(true)
            })
            .await;
        match started {
            Ok(true) => {}
            Ok(false) => {
                crate::lock(&td.live).running.remove(&run.trigger_id);
                let reason = format!("the daily cap of {cap} runs in 24 hours was reached");
                skip(td, &run, reason, now).await?;
                continue;
            }
            Err(err) => {
                crate::lock(&td.live).running.remove(&run.trigger_id);
                return Err(err);
            }
        }
        let lateness = (now - run.due_ms).max(0) as f64 / 1000.0;
        td.metrics.lateness_seconds.observe(lateness);
        td.metrics.running.inc();
        tracing::info!(run = %run.id, trigger = %trigger.id, cause = %run.cause,
            late_ms = now - run.due_ms, "trigger run started");
        let mut run = run;
        run.status = "running".into();
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
            outcome: "skipped".into(),
        })
        .inc();
    let id = run.id.clone();
    td.store
        .call(move |conn| {
            let ending = Ending {
                status: "skipped".into(),
                reason: Some(reason),
                ..Ending::default()
            };
            store::finish(conn, &id, &ending, now)
        })
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(
        path: &str,
        version: &str,
        seen: i64,
        ran: Option<&str>,
        ran_ms: Option<i64>,
    ) -> FileState {
        FileState {
            path: path.into(),
            version: version.into(),
            seen_ms: seen,
            ran_version: ran.map(str::to_string),
            ran_ms,
        }
    }

    fn scanned(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(p, v)| (p.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_new_file_waits_for_its_quiet_period_then_runs_once() {
        let s = scanned(&[("a.pdf", "v1")]);
        let first = decide_files(&[], Some(&s), 1_000, 30_000, 60_000, false);
        assert!(first.due.is_empty());
        assert!(first.pending);
        let stored = first.changed.clone();
        // 29 s later, still quiet: waits.
        let d = decide_files(&stored, Some(&s), 30_000, 30_000, 60_000, false);
        assert!(d.due.is_empty() && d.pending);
        // 30 s after it was seen: due once.
        let d = decide_files(&stored, None, 31_000, 30_000, 60_000, false);
        assert_eq!(d.due, [("a.pdf".to_string(), "v1".to_string())]);
        let after: Vec<FileState> = d.changed.clone();
        let again = decide_files(&after, Some(&s), 90_000, 30_000, 60_000, false);
        assert!(
            again.due.is_empty() && !again.pending,
            "one run per version"
        );
    }

    #[test]
    fn a_file_still_being_written_restarts_its_quiet_period() {
        let mut stored = vec![];
        for (i, t) in [(1, 0), (2, 2_000), (3, 4_000)] {
            let s = scanned(&[("a.pdf", &format!("v{i}"))]);
            let d = decide_files(&stored, Some(&s), t, 5_000, 60_000, false);
            assert!(d.due.is_empty(), "piece {i} does not run");
            for c in d.changed {
                stored.retain(|f: &FileState| f.path != c.path);
                stored.push(c);
            }
        }
        assert!(decide_files(&stored, None, 8_000, 5_000, 60_000, false)
            .due
            .is_empty());
        assert_eq!(
            decide_files(&stored, None, 9_000, 5_000, 60_000, false)
                .due
                .len(),
            1
        );
    }

    #[test]
    fn a_changed_file_waits_for_the_gap_after_its_run() {
        let stored = [file("a.pdf", "v2", 10_000, Some("v1"), Some(5_000))];
        let d = decide_files(&stored, None, 50_000, 1_000, 60_000, false);
        assert!(d.due.is_empty() && d.pending, "55 s after the run began");
        let d = decide_files(&stored, None, 65_000, 1_000, 60_000, false);
        assert_eq!(d.due.len(), 1);
    }

    #[test]
    fn nothing_starts_while_the_trigger_runs() {
        let stored = [file("a.pdf", "v1", 0, None, None)];
        let d = decide_files(&stored, None, 100_000, 1_000, 0, true);
        assert!(d.due.is_empty() && d.pending);
    }

    #[test]
    fn a_runs_own_writes_start_nothing() {
        // a.pdf ran at 10 s; the run wrote summary.md and changed a.pdf.
        let stored = [
            file("a.pdf", "v1", 0, Some("v1"), Some(10_000)),
            file("old.txt", "o1", 0, Some("o1"), None),
        ];
        let s = scanned(&[("a.pdf", "v2"), ("old.txt", "o1"), ("summary.md", "s1")]);
        let d = absorb_writes(&stored, &s, 10_000, 20_000);
        let paths: Vec<&str> = d.changed.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["a.pdf", "summary.md"]);
        assert!(d
            .changed
            .iter()
            .all(|f| f.ran_version.as_deref() == Some(f.version.as_str())));
        let mut after: Vec<FileState> = vec![stored[1].clone()];
        after.extend(d.changed);
        let d = decide_files(&after, Some(&s), 200_000, 1_000, 60_000, false);
        assert!(d.due.is_empty() && !d.pending);
    }

    #[test]
    fn due_schedules_collapse_a_downtime_into_one_run() {
        let day = 86_400_000i64;
        let saved = jiff::Timestamp::from_second(1_764_576_000)
            .unwrap()
            .as_millisecond(); // 2025-12-01T08:00Z
        let trigger = Trigger {
            id: "t_1".into(),
            name: "daily".into(),
            kind: Kind::Schedule,
            when: "daily 09:00".into(),
            tz: String::new(),
            folder: String::new(),
            quiet_seconds: 30,
            min_gap_seconds: 60,
            prompt: "p".into(),
            model: String::new(),
            daily_cap: 24,
            enabled: true,
            enabled_ms: saved,
            checked_ms: saved,
            disabled_reason: None,
            created_ms: saved,
            updated_ms: saved,
        };
        let mut live = Live::default();
        live.entries.insert(
            "t_1".into(),
            Entry::new(trigger, std::path::Path::new("/ws")),
        );
        let now = saved + 3 * day + 2 * 3_600_000; // three days later, 10:00
        let due = due_schedules(&mut live, now);
        assert_eq!(due.len(), 1, "{due:?}");
        assert_eq!(rfc3339(due[0].2), "2025-12-04T09:00:00Z");
        assert!(due_schedules(&mut live, now + 1000).is_empty());
        assert_eq!(
            live.entries["t_1"].next_ms.map(rfc3339).as_deref(),
            Some("2025-12-05T09:00:00Z")
        );
    }
}
