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
use crate::folders::Scan;
use crate::schedule::{self, Schedule};
use crate::status::RunStatus;
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
                queued += store::queue_run(&tx, &run)?.is_some() as usize;
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
    scanned: Option<&Scan>,
    now: i64,
    quiet_ms: i64,
    gap_ms: i64,
    running: bool,
) -> FileDecision {
    let mut decision = FileDecision::default();
    let mut current: HashMap<String, FileState> =
        stored.iter().map(|f| (f.path.clone(), f.clone())).collect();
    let mut touched: HashSet<String> = HashSet::new();
    if let Some(scan) = scanned {
        let on_disk: HashSet<&str> = scan.files.iter().map(|(p, _)| p.as_str()).collect();
        for (path, version) in &scan.files {
            match current.get_mut(path) {
                Some(f) if &f.version == version => {}
                Some(f) => {
                    f.version = version.clone();
                    f.seen_ms = now;
                    touched.insert(path.clone());
                }
                None => {
                    current.insert(
                        path.clone(),
                        FileState {
                            path: path.clone(),
                            version: version.clone(),
                            seen_ms: now,
                            ran_version: None,
                            ran_ms: None,
                        },
                    );
                    touched.insert(path.clone());
                }
            }
        }
        // A scan cut short says nothing of the files it did not reach.
        if scan.complete {
            decision.removed = current
                .keys()
                .filter(|p| !on_disk.contains(p.as_str()))
                .cloned()
                .collect();
            decision.removed.sort();
            for gone in &decision.removed {
                current.remove(gone);
            }
        }
    }
    let mut paths: Vec<&String> = current.keys().collect();
    paths.sort();
    let mut due_paths = Vec::new();
    for path in paths {
        let f = &current[path];
        if f.ran_version.as_deref() == Some(f.version.as_str()) {
            continue;
        }
        if running || now - f.seen_ms < quiet_ms || f.ran_ms.is_some_and(|r| now - r < gap_ms) {
            decision.pending = true;
            continue;
        }
        due_paths.push(path.clone());
    }
    for path in due_paths {
        if let Some(f) = current.get_mut(&path) {
            f.ran_version = Some(f.version.clone());
            f.ran_ms = Some(now);
            decision.due.push((path.clone(), f.version.clone()));
            touched.insert(path);
        }
    }
    let mut touched: Vec<String> = touched.into_iter().collect();
    touched.sort();
    decision.changed = touched
        .into_iter()
        .filter_map(|p| current.get(&p).cloned())
        .collect();
    decision
}

/// What a run wrote, as its chat's tool calls say: the workspace paths of
/// its file tools, and whether it ran commands (whose writes no call names).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnWrites {
    pub paths: HashSet<String>,
    pub ran_commands: bool,
}

/// A workspace path as the file tools take it, in one spelling.
fn normal_path(path: &str) -> String {
    path.split('/')
        .filter(|part| !part.is_empty() && *part != ".")
        .collect::<Vec<_>>()
        .join("/")
}

/// The writes of `chat_run` in a chat's snapshot.
pub fn own_writes(snapshot: &serde_json::Value, chat_run: &str) -> OwnWrites {
    let mut own = OwnWrites::default();
    let Some(messages) = snapshot["messages"].as_array() else {
        return own;
    };
    for message in messages {
        if message["role"] != "assistant" || message["run_id"] != chat_run {
            continue;
        }
        let Some(calls) = message["tool_calls"].as_array() else {
            continue;
        };
        for call in calls {
            let name = call["function"]["name"].as_str().unwrap_or_default();
            let arguments: serde_json::Value = match &call["function"]["arguments"] {
                serde_json::Value::String(text) => {
                    serde_json::from_str(text).unwrap_or(serde_json::Value::Null)
                }
                other => other.clone(),
            };
            match name {
                "write_file" | "edit_file" => {
                    if let Some(path) = arguments["path"].as_str() {
                        own.paths.insert(normal_path(path));
                    }
                }
                "bash" => own.ran_commands = true,
                _ => {}
            }
        }
    }
    own
}

/// After a run: the files it wrote (named by its file tools, or, when it
/// ran commands, everything that changed since it started) start nothing;
/// every other change follows the usual rules, and a later change of the
/// run's own file waits for its gap. `folder` is the trigger's folder in
/// the workspace ("" for its root).
pub fn absorb_writes(
    stored: &[FileState],
    scan: &Scan,
    folder: &str,
    own: &OwnWrites,
    started_ms: i64,
    now: i64,
) -> FileDecision {
    let mut decision = FileDecision::default();
    let stored: HashMap<&str, &FileState> = stored.iter().map(|f| (f.path.as_str(), f)).collect();
    for (path, version) in &scan.files {
        let in_workspace = if folder.is_empty() {
            path.clone()
        } else {
            format!("{folder}/{path}")
        };
        let known = stored.get(path.as_str()).copied();
        let changed_since_start = match known {
            Some(f) => &f.version != version || f.seen_ms >= started_ms,
            None => true,
        };
        let named = own.paths.contains(&in_workspace);
        if !(named || (own.ran_commands && changed_since_start)) {
            continue;
        }
        if known.is_some_and(|f| f.ran_version.as_deref() == Some(version.as_str())) {
            continue;
        }
        decision.changed.push(match known {
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
        });
    }
    decision
}

/// The due key of a file version: one run per trigger, file and version.
pub fn file_key(trigger: &str, path: &str, version: &str) -> String {
    format!("{trigger}:file:{path}:{version}")
}

async fn folders(td: &Arc<Triggerd>, now: i64) -> anyhow::Result<()> {
    let dirty: HashSet<String> = std::mem::take(&mut *tandem_shared::sync::lock(&td.dirty));
    let looks: Vec<(Trigger, PathBuf, bool, bool)> = {
        let mut live = tandem_shared::sync::lock(&td.live);
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
    for (trigger, folder, _dirty, running) in looks {
        // Every look is a fresh scan: a quiet period never ends on what an
        // older scan saw. The folder is checked again first: one swapped for
        // a link out of the workspace is never followed.
        let (workspace, relative) = (td.workspace.clone(), trigger.folder.clone());
        let looked = tokio::task::spawn_blocking(move || {
            crate::folders::resolve(&workspace, &relative).map_err(Unusable::Folder)?;
            crate::folders::scan(&folder).map_err(Unusable::Io)
        })
        .await?;
        let named = if trigger.folder.is_empty() {
            "(the workspace itself)".to_string()
        } else {
            trigger.folder.clone()
        };
        let scanned = match looked {
            Ok(scan) => scan,
            Err(unusable) => {
                match unusable.reason(&named) {
                    Some(reason) => crate::switch_off(td, &trigger.id, &reason).await?,
                    None => {
                        tracing::warn!(trigger = %trigger.id, "scanning a folder failed; trying again");
                        tandem_shared::sync::lock(&td.dirty).insert(trigger.id.clone());
                    }
                }
                continue;
            }
        };
        if !scanned.complete {
            tracing::warn!(trigger = %trigger.id, files = crate::folders::MAX_FILES,
                "a folder holds more files than a scan reads; the rest wait");
        }
        let scanned = Some(scanned);
        let id = trigger.id.clone();
        let decision = td
            .store
            .call(move |conn| {
                let stored = store::files_of(conn, &trigger.id)?;
                let decision = decide_files(
                    &stored,
                    scanned.as_ref(),
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
            if let Some(e) = tandem_shared::sync::lock(&td.live).entries.get_mut(&id) {
                e.pending = true;
            }
        }
    }
    Ok(())
}

/// Why a trigger's folder could not be looked at.
enum Unusable {
    Folder(String),
    Io(std::io::Error),
}

impl Unusable {
    /// The reason to switch the trigger off, or `None`: try again.
    fn reason(&self, folder: &str) -> Option<String> {
        use std::io::ErrorKind;
        match self {
            Unusable::Folder(why) if why.contains("does not exist") => {
                Some(format!("its folder {folder} is gone from the workspace"))
            }
            Unusable::Folder(why) => Some(format!("its folder {folder} cannot be used: {why}")),
            Unusable::Io(e) if e.kind() == ErrorKind::NotFound => {
                Some(format!("its folder {folder} is gone from the workspace"))
            }
            Unusable::Io(e) if e.kind() == ErrorKind::PermissionDenied => Some(format!(
                "its folder {folder} cannot be read (permission denied)"
            )),
            Unusable::Io(e) if e.kind() == ErrorKind::NotADirectory => {
                Some(format!("its folder {folder} is no longer a folder"))
            }
            Unusable::Io(_) => None,
        }
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

    fn scanned(list: &[(&str, &str)]) -> Scan {
        Scan {
            files: list
                .iter()
                .map(|(p, v)| (p.to_string(), v.to_string()))
                .collect(),
            complete: true,
        }
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

    fn named(paths: &[&str]) -> OwnWrites {
        OwnWrites {
            paths: paths.iter().map(|p| p.to_string()).collect(),
            ran_commands: false,
        }
    }

    #[test]
    fn a_runs_own_writes_start_nothing_and_others_still_do() {
        // a.pdf ran at 10 s; the run wrote Contracts/summary.md and changed
        // a.pdf; meanwhile b.pdf arrived from outside.
        let stored = [
            file("a.pdf", "v1", 0, Some("v1"), Some(10_000)),
            file("old.txt", "o1", 0, Some("o1"), None),
        ];
        let s = scanned(&[
            ("a.pdf", "v2"),
            ("b.pdf", "b1"),
            ("old.txt", "o1"),
            ("summary.md", "s1"),
        ]);
        let own = named(&["Contracts/summary.md", "Contracts/a.pdf"]);
        let d = absorb_writes(&stored, &s, "Contracts", &own, 10_000, 20_000);
        let paths: Vec<&str> = d.changed.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["a.pdf", "summary.md"], "b.pdf is not the run's");
        assert!(d
            .changed
            .iter()
            .all(|f| f.ran_version.as_deref() == Some(f.version.as_str())));
        let mut after: Vec<FileState> = vec![stored[1].clone()];
        after.extend(d.changed);
        let d = decide_files(&after, Some(&s), 200_000, 1_000, 60_000, false);
        assert!(d.pending, "b.pdf waits for its quiet period");
        let d = decide_files(
            &merge(&after, &d.changed),
            Some(&s),
            202_000,
            1_000,
            60_000,
            false,
        );
        assert_eq!(d.due, [("b.pdf".to_string(), "b1".to_string())]);
    }

    fn merge(stored: &[FileState], changed: &[FileState]) -> Vec<FileState> {
        let mut out: Vec<FileState> = stored
            .iter()
            .filter(|f| !changed.iter().any(|c| c.path == f.path))
            .cloned()
            .collect();
        out.extend(changed.iter().cloned());
        out
    }

    #[test]
    fn a_run_that_ran_commands_owns_what_changed_since_it_started() {
        let stored = [
            file("a.pdf", "v1", 0, Some("v1"), Some(10_000)),
            file("old.txt", "o1", 0, Some("o1"), None),
            file("seen.txt", "n1", 12_000, None, None),
        ];
        let s = scanned(&[
            ("a.pdf", "v1"),
            ("old.txt", "o1"),
            ("seen.txt", "n1"),
            ("made.txt", "m1"),
        ]);
        let own = OwnWrites {
            paths: HashSet::new(),
            ran_commands: true,
        };
        let d = absorb_writes(&stored, &s, "", &own, 10_000, 20_000);
        let paths: Vec<&str> = d.changed.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["seen.txt", "made.txt"]);
    }

    #[test]
    fn own_writes_come_from_the_runs_tool_calls() {
        let snapshot = serde_json::json!({"messages": [
            {"role": "user", "text": "go"},
            {"role": "assistant", "run_id": "r_1", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "write_file", "arguments": "{\"path\":\"/Contracts/./out.md\",\"content\":\"x\"}"}},
                {"id": "c2", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"Contracts/a.pdf\"}"}}
            ]},
            {"role": "assistant", "run_id": "r_2", "tool_calls": [
                {"id": "c3", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}}
            ]}
        ]});
        let own = own_writes(&snapshot, "r_1");
        assert_eq!(own, named(&["Contracts/out.md"]));
        assert!(own_writes(&snapshot, "r_2").ran_commands);
    }

    #[test]
    fn a_scan_cut_short_takes_nothing_as_gone() {
        let stored = [file("far.txt", "f1", 0, Some("f1"), None)];
        let mut s = scanned(&[("near.txt", "n1")]);
        s.complete = false;
        let d = decide_files(&stored, Some(&s), 1_000, 1_000, 0, false);
        assert!(d.removed.is_empty());
        s.complete = true;
        let d = decide_files(&stored, Some(&s), 1_000, 1_000, 0, false);
        assert_eq!(d.removed, ["far.txt"]);
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
            agent_id: String::new(),
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
        let due = due_schedules(&live, now);
        assert_eq!(due.len(), 1, "{due:?}");
        assert_eq!(rfc3339(due[0].2), "2025-12-04T09:00:00Z");
        assert_eq!(due_schedules(&live, now), due, "due until stored");
        advance(&mut live, &due, now);
        assert!(due_schedules(&live, now + 1000).is_empty());
        assert_eq!(
            live.entries["t_1"].next_ms.map(rfc3339).as_deref(),
            Some("2025-12-05T09:00:00Z")
        );
    }
}
