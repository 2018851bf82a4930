//! triggerd: chats that start by themselves, on a schedule or when a file
//! arrives, each run a chat of its own with an inbox entry at its end.
//!
//! `schedule.rs` reads a schedule's text and finds its times in a time zone
//! (daylight-saving gaps and repeats included); `scheduler.rs` holds the
//! triggers in memory and decides, at every check, what is due and what
//! starts; `runner.rs` drives one run through chatd's API (`chat.rs`);
//! `folders.rs` checks and scans the workspace's folders; `store.rs` keeps
//! triggers, runs (each with a unique due key), file versions and inbox
//! entries in triggers.sqlite3; `api.rs` serves the trigger routes on
//! `triggers.sock`, which chatd forwards `/v1/chat-app/triggers*` to;
//! `clock.rs` is the time (the system's, or a test's file).
//!
//! Only the triggerd holding `triggerd.lock` in the data folder runs: a
//! second one waits for the lock before it opens anything.

pub mod api;
pub use tandem_shared::clock;
pub mod config;
pub mod folders;
pub mod metrics;
pub mod runner;
pub mod schedule;
pub mod scheduler;
pub mod status;
pub mod store;
pub mod triggers;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;
use tandem_shared::shutdown::Shutdown;
use tandem_shared::sync::lock;
use tandem_shared::time::new_id;

use crate::clock::Clock;
use crate::config::TriggersConfig;
use crate::scheduler::{Entry, Live};
use crate::status::RunStatus;
use crate::store::{Ending, Kind, Notice, Store};
use tandem_shared::chatd::{self as chat, ChatClient};

/// The daemon's state.
pub struct Triggerd {
    pub config: TriggersConfig,
    /// The shared workspace, as configured (absolute).
    pub workspace: PathBuf,
    pub store: Store,
    pub clock: Clock,
    pub chat: ChatClient,
    pub metrics: metrics::Metrics,
    pub registry: Arc<tandem_shared::metrics::Registry>,
    pub live: Mutex<Live>,
    /// File triggers whose folder changed since the last check.
    pub dirty: Mutex<HashSet<String>>,
    pub watcher: Mutex<Watches>,
    /// A change that should be looked at before the next check.
    pub wake: tokio::sync::Notify,
    /// An inbox entry waits: deliver it before the next round.
    pub deliver: tokio::sync::Notify,
    pub started: Instant,
    pub shutdown: Shutdown,
    /// Checks done since start (`/health` says it: tests wait on it).
    pub checks: std::sync::atomic::AtomicU64,
}

/// The inotify watches on file triggers' folders.
#[derive(Default)]
pub struct Watches {
    pub watcher: Option<notify::RecommendedWatcher>,
    pub folders: HashSet<PathBuf>,
}

/// Runs triggerd until `shutdown` begins.
pub async fn run(config: TriggersConfig, shutdown: Shutdown) -> anyhow::Result<()> {
    tandem_shared::fsmode::private_dir(&config.data_dir)
        .with_context(|| format!("making data folder {}", config.data_dir.display()))?;
    let Some(_lock) =
        tandem_shared::daemon::take_lock(&config.data_dir, "triggerd", &shutdown).await?
    else {
        return Ok(());
    };
    tandem_shared::fsmode::private_dir(&config.workspace)
        .with_context(|| format!("making the workspace {}", config.workspace.display()))?;
    let secrets = tandem_shared::secrets::load(&config.secrets, &config.chat_data)?;
    let store = store::open(&config.data_dir.join("triggers.sqlite3"))?;
    let mut registry = tandem_shared::metrics::Registry::default();
    let metrics = metrics::Metrics::new(&mut registry);
    let td = Arc::new(Triggerd {
        workspace: config.workspace.clone(),
        clock: Clock::new(&config.clock_file),
        chat: ChatClient::new(config.chat_base(), secrets.forward_key.clone())?,
        config: config.clone(),
        store,
        metrics,
        registry: Arc::new(registry),
        live: Mutex::new(Live::default()),
        dirty: Mutex::new(HashSet::new()),
        watcher: Mutex::new(Watches::default()),
        wake: tokio::sync::Notify::new(),
        deliver: tokio::sync::Notify::new(),
        started: Instant::now(),
        shutdown: shutdown.clone(),
        checks: std::sync::atomic::AtomicU64::new(0),
    });
    let triggers = td.store.call(|conn| store::all_triggers(conn)).await?;
    {
        let mut live = lock(&td.live);
        let mut dirty = lock(&td.dirty);
        for t in triggers {
            if t.kind == Kind::File && t.enabled {
                // A file that arrived while triggerd was down still runs.
                dirty.insert(t.id.clone());
            }
            live.entries
                .insert(t.id.clone(), Entry::new(t, &td.workspace));
        }
        td.metrics.enabled.set(live.enabled() as i64);
    }
    let interrupted = recover(&td).await?;
    start_watching(&td)?;
    sync_watches(&td);
    let listener = tandem_shared::daemon::bind_unix(&config.socket)?;
    let (total, enabled) = {
        let live = lock(&td.live);
        (live.entries.len(), live.enabled())
    };
    tracing::info!(socket = %config.socket.display(), chatd = %config.chat_base(),
        workspace = %config.workspace.display(), triggers = total, enabled, interrupted,
        clock = ?td.clock, "triggerd serving");
    tandem_shared::notify::spawn_heartbeat_watchdog(shutdown.clone());
    tandem_shared::notify::ready("serving");
    tokio::spawn(checks(td.clone()));
    tokio::spawn(deliveries(td.clone()));
    let router = api::router(td.clone());
    tandem_shared::listen::serve_socket(
        "api",
        tandem_shared::http::PeerChecked::new(listener),
        router,
        tandem_shared::listen::Limits::socket_api(),
        shutdown.clone(),
    )
    .await;
    tandem_shared::notify::stopping();
    Ok(())
}

/// Runs a previous triggerd left `running` were cut short by its end. A
/// chat run that ended meanwhile is recorded as it ended; any other is
/// stopped and recorded `interrupted` (the inbox says so). What the run
/// wrote starts nothing either way. At most `max_runs` runs, 5 s each.
async fn recover(td: &Arc<Triggerd>) -> anyhow::Result<usize> {
    let running = td
        .store
        .call(|conn| store::runs_with_status(conn, RunStatus::Running))
        .await?;
    let now = td.clock.now_ms();
    for run in &running {
        let mut ending = Ending {
            reason: Some("interrupted by a restart".into()),
            ..Ending::new(RunStatus::Interrupted)
        };
        let mut snapshot = None;
        if let Some(chat) = &run.chat_id {
            let read = tokio::time::timeout(Duration::from_secs(5), td.chat.snapshot(chat)).await;
            if let Ok(Ok(s)) = read {
                let ended = run
                    .chat_run_id
                    .as_deref()
                    .and_then(|r| chat::ended_in_snapshot(&s, r));
                match ended {
                    Some(end) => {
                        ending = Ending {
                            reason: end.error,
                            summary: chat::last_answer(&s)
                                .map(|a| runner::summary(&a))
                                .filter(|t| !t.is_empty()),
                            ..Ending::new(RunStatus::of_chat_end(&end.status))
                        }
                    }
                    None => {
                        let stop =
                            tokio::time::timeout(Duration::from_secs(5), td.chat.stop(chat)).await;
                        if !matches!(stop, Ok(Ok(()))) {
                            tracing::warn!(run = %run.id, chat, "could not stop an interrupted run's chat");
                        }
                    }
                }
                snapshot = Some(s);
            } else {
                tracing::warn!(run = %run.id, chat, "could not read an interrupted run's chat");
            }
        }
        let trigger = lock(&td.live)
            .entries
            .get(&run.trigger_id)
            .map(|e| e.trigger.clone());
        if let Some(trigger) = trigger {
            let started = run.started_ms.unwrap_or(run.queued_ms);
            runner::take_out_own_writes(td, &trigger, &run.id, started, snapshot).await;
        }
        let (id, recorded) = (run.id.clone(), ending.clone());
        td.store
            .call(move |conn| store::finish(conn, &id, &recorded, now))
            .await?;
        td.metrics
            .runs
            .get_or_create(&metrics::RunLabels {
                cause: run.cause.clone(),
                outcome: ending.status.as_str().into(),
            })
            .inc();
        tracing::info!(run = %run.id, trigger = %run.trigger_id, status = %ending.status,
            "a run the last triggerd left is recorded");
    }
    Ok(running.len())
}

/// The checks: every `check_ms`, or at once when something asks; history
/// purged every hour.
async fn checks(td: Arc<Triggerd>) {
    let every = Duration::from_millis(td.config.check_ms);
    let mut purged: Option<Instant> = None;
    let mut rescanned = Instant::now();
    loop {
        // A folder whose watch failed or an event lost is still looked at.
        if rescanned.elapsed() > Duration::from_secs(60) {
            rescanned = Instant::now();
            let live = lock(&td.live);
            let mut dirty = lock(&td.dirty);
            for e in live.entries.values() {
                if e.trigger.kind == Kind::File && e.trigger.enabled {
                    dirty.insert(e.trigger.id.clone());
                }
            }
        }
        scheduler::check(&td).await;
        if purged.is_none_or(|at| at.elapsed() > Duration::from_secs(3600)) {
            purged = Some(Instant::now());
            let (now, days, keep) = (
                td.clock.now_ms(),
                td.config.history_days,
                td.config.keep_runs,
            );
            match td
                .store
                .call(move |conn| store::purge_runs(conn, now, days, keep))
                .await
            {
                Ok(n) if n > 0 => tracing::info!(removed = n, "old trigger runs removed"),
                Ok(_) => {}
                Err(err) => tracing::warn!(error = %format!("{err:#}"), "purging runs failed"),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = td.wake.notified() => {}
            _ = td.shutdown.wait() => return,
        }
    }
}

/// Inbox entries go to chatd; one that chatd did not take is tried again
/// at the next round (every second while something waits).
async fn deliveries(td: Arc<Triggerd>) {
    loop {
        let waiting = deliver(&td).await;
        let pause = if waiting {
            Duration::from_secs(1)
        } else {
            Duration::from_millis(td.config.check_ms)
        };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = td.deliver.notified() => {}
            _ = td.shutdown.wait() => return,
        }
    }
}

/// The inbox entry of a finished run.
pub fn run_notification(run: &store::Run) -> serde_json::Value {
    let name = &run.trigger_name;
    let (kind, title, body) = match run.status {
        RunStatus::Done => (
            "run_ended",
            format!("{name} ran"),
            run.summary
                .clone()
                .unwrap_or_else(|| "The run ended.".into()),
        ),
        RunStatus::Interrupted => (
            "run_failed",
            format!("{name} was interrupted"),
            run.reason.clone().unwrap_or_else(|| "interrupted".into()),
        ),
        RunStatus::Stopped => (
            "run_failed",
            format!("{name} was stopped"),
            run.reason.clone().unwrap_or_else(|| "stopped".into()),
        ),
        RunStatus::Paused => (
            "run_failed",
            format!("{name} paused"),
            run.reason
                .clone()
                .unwrap_or_else(|| "it reached its step limit: Continue goes on".into()),
        ),
        RunStatus::Failed | RunStatus::Queued | RunStatus::Running | RunStatus::Skipped => (
            "run_failed",
            format!("{name} failed"),
            run.reason
                .clone()
                .unwrap_or_else(|| "the run failed".into()),
        ),
    };
    let mut value = json!({
        "kind": kind,
        "title": cut(&title, 200),
        "body": cut(&body, 2000),
        "source": {"type": "trigger", "id": run.trigger_id, "name": cut(name, 200)},
        // chatd keeps one entry per key: a delivery retried after a lost
        // answer is not an entry twice.
        "key": format!("trigger-run:{}", run.id),
    });
    if let Some(chat) = &run.chat_id {
        value["conversation_id"] = json!(chat);
    }
    value
}

fn cut(text: &str, max: usize) -> String {
    text.chars().take(max).collect()
}

/// The inbox entry of a notice (a trigger switched off, a run that asks).
pub fn notice_notification(notice: &Notice) -> serde_json::Value {
    let mut value = json!({
        "kind": "needs_attention",
        "title": cut(&notice.title, 200),
        "body": cut(&notice.body, 2000),
        "source": {"type": "trigger", "id": notice.trigger_id, "name": cut(&notice.trigger_name, 200)},
        "key": format!("trigger-notice:{}", notice.id),
    });
    if let Some(chat) = &notice.conversation_id {
        value["conversation_id"] = json!(chat);
    }
    value
}

/// What became of one delivery.
enum Delivered {
    /// chatd took it, or refused it for good (logged): it is done.
    Done,
    /// chatd did not answer or failed: ask again later.
    Again,
}

async fn post(td: &Arc<Triggerd>, what: &str, notification: &serde_json::Value) -> Delivered {
    match td.chat.notify(notification).await {
        Ok(()) => {
            td.metrics.notifications.inc();
            Delivered::Done
        }
        Err(err) if err.retryable() => Delivered::Again,
        // A refusal of the entry itself does not change by asking again.
        Err(err) => {
            tracing::warn!(entry = what, error = %err, "chatd refused an inbox entry");
            Delivered::Done
        }
    }
}

/// One round of deliveries; whether something still waits.
async fn deliver(td: &Arc<Triggerd>) -> bool {
    let (runs, notices) = match td
        .store
        .call(|conn| Ok((store::unnotified(conn)?, store::notices(conn)?)))
        .await
    {
        Ok(found) => found,
        Err(err) => {
            tracing::warn!(error = %format!("{err:#}"), "reading the inbox queue failed");
            return true;
        }
    };
    for run in runs {
        if let Delivered::Again = post(td, &run.id, &run_notification(&run)).await {
            return true;
        }
        let id = run.id.clone();
        let _ = td
            .store
            .call(move |conn| store::set_notified(conn, &id))
            .await;
    }
    for notice in notices {
        if let Delivered::Again = post(td, &notice.id, &notice_notification(&notice)).await {
            return true;
        }
        let id = notice.id.clone();
        let _ = td
            .store
            .call(move |conn| store::drop_notice(conn, &id))
            .await;
    }
    false
}

/// Switches a trigger off by itself (its folder is gone, …), saying why in
/// the trigger and in the inbox.
pub async fn switch_off(td: &Arc<Triggerd>, id: &str, reason: &str) -> anyhow::Result<()> {
    switch_off_saying(td, id, reason, "Fix it").await
}

/// `switch_off`, the inbox entry saying what to do (`fix`) before the
/// trigger is switched on again.
pub async fn switch_off_saying(
    td: &Arc<Triggerd>,
    id: &str,
    reason: &str,
    fix: &str,
) -> anyhow::Result<()> {
    let now = td.clock.now_ms();
    let name = {
        let mut live = lock(&td.live);
        let Some(entry) = live.entries.get_mut(id) else {
            return Ok(());
        };
        entry.trigger.enabled = false;
        entry.trigger.disabled_reason = Some(reason.to_string());
        entry.trigger.updated_ms = now;
        entry.plan();
        let name = entry.trigger.name.clone();
        td.metrics.enabled.set(live.enabled() as i64);
        name
    };
    let notice = Notice {
        id: new_id("nt_"),
        trigger_id: id.to_string(),
        trigger_name: name.clone(),
        title: format!("{name} was switched off"),
        body: format!("Switched off because {reason}. {fix}, then switch the trigger on again."),
        conversation_id: None,
    };
    let (tid, why) = (id.to_string(), reason.to_string());
    td.store
        .call(move |conn| {
            let tx = conn.transaction()?;
            store::disable(&tx, &tid, Some(&why), now)?;
            store::add_notice(&tx, &notice, now)?;
            tx.commit()
        })
        .await?;
    tracing::warn!(trigger = %id, reason, "trigger switched off");
    sync_watches(td);
    td.deliver.notify_one();
    Ok(())
}

fn start_watching(td: &Arc<Triggerd>) -> anyhow::Result<()> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Vec<PathBuf>>();
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Ok(event) = event {
            if !event.kind.is_access() {
                let _ = tx.send(event.paths);
            }
        }
    })
    .context("starting the file watcher (inotify)")?;
    lock(&td.watcher).watcher = Some(watcher);
    let weak = Arc::downgrade(td);
    tokio::spawn(async move {
        while let Some(paths) = rx.recv().await {
            let Some(td) = weak.upgrade() else {
                return;
            };
            let live = lock(&td.live);
            let mut dirty = lock(&td.dirty);
            for entry in live.entries.values() {
                if entry.trigger.kind == Kind::File
                    && entry.trigger.enabled
                    && paths.iter().any(|p| p.starts_with(&entry.folder))
                {
                    dirty.insert(entry.trigger.id.clone());
                }
            }
        }
    });
    Ok(())
}

/// Watches exactly the folders of enabled file triggers.
pub fn sync_watches(td: &Arc<Triggerd>) {
    use notify::Watcher;
    let wanted: HashSet<PathBuf> = lock(&td.live)
        .entries
        .values()
        .filter(|e| e.trigger.kind == Kind::File && e.trigger.enabled)
        .map(|e| e.folder.clone())
        .collect();
    let mut watches = lock(&td.watcher);
    let Watches { watcher, folders } = &mut *watches;
    let Some(watcher) = watcher.as_mut() else {
        return;
    };
    for gone in folders.difference(&wanted).cloned().collect::<Vec<_>>() {
        let _ = watcher.unwatch(&gone);
        folders.remove(&gone);
    }
    for new in wanted.difference(&folders.clone()) {
        match watcher.watch(new, notify::RecursiveMode::Recursive) {
            Ok(()) => {
                folders.insert(new.clone());
            }
            // The next check's scan finds the folder gone and says so.
            Err(err) => {
                tracing::warn!(folder = %new.display(), error = %err, "could not watch a folder")
            }
        }
    }
}
