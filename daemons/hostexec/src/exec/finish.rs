//! A call's end: what the command saved in the workspace, the workspace
//! given back, the audit row, the log line and the `finished` event.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::json;
use tokio::sync::mpsc;

use super::{line, Call};
use crate::calls::{KilledBy, Slot};
use crate::changes::{self, Changes};
use crate::folders;
use crate::keeper::Status;
use crate::spawner::Keeper;
use crate::store::Ending;
use crate::sweep::end_keeper_tree;
use crate::Hostexec;

/// How the output and the keeper ended, as the driver saw it.
pub(super) struct Ended {
    pub(super) status: Option<Status>,
    pub(super) error: Option<String>,
    pub(super) total: u64,
    pub(super) truncated: bool,
    pub(super) began: Instant,
}

impl Default for Ended {
    fn default() -> Ended {
        Ended {
            status: None,
            error: None,
            total: 0,
            truncated: false,
            began: Instant::now(),
        }
    }
}

/// Ends what a keeper that gave no status (or left processes) leaves to
/// hostexecd, the subreaper above it.
pub(crate) async fn sweep_lost(keeper: &Keeper, call_id: &str) {
    // Not before the keeper is gone: until then what it holds is below
    // it, not ours to sweep.
    let (pid, start) = (keeper.pid, keeper.start);
    let pidfd = keeper.pidfd.as_ref().and_then(|fd| fd.try_clone().ok());
    let swept = tokio::task::spawn_blocking(move || {
        if !Keeper::wait_exit(pid, start, pidfd, Duration::from_secs(2)) {
            end_keeper_tree(pid, start);
            crate::tree::signal_exact(pid, start, libc::SIGKILL);
            let pidfd = crate::tree::pidfd_open(pid);
            Keeper::wait_exit(pid, start, pidfd, Duration::from_secs(2));
        }
        crate::sweep::adopted()
    })
    .await
    .unwrap_or(0);
    if swept > 0 {
        tracing::warn!(call = %call_id, left = swept, "processes of a call were still there after the sweep");
    }
}

pub(super) async fn finish(
    hx: &Arc<Hostexec>,
    slot: Slot,
    keeper: &Keeper,
    tx: &mpsc::UnboundedSender<Bytes>,
    ended: Ended,
    call: Call,
) {
    let running = slot.running.clone();
    let (status, mut error, began) = (ended.status.clone(), ended.error.clone(), ended.began);
    let duration_ms = began.elapsed().as_millis() as u64;
    // A keeper that gave no status, or left processes, leaves them to
    // hostexecd (the subreaper above it): they are killed here.
    let lost = status.as_ref().is_none_or(|s| s.left > 0);
    if lost {
        sweep_lost(keeper, &running.call_id).await;
    }
    let status = status.unwrap_or_default();
    if error.is_none() {
        error = status.error.clone();
    }
    if error.is_none() && status.exit_code.is_none() && status.signal.is_none() {
        error = Some("the command's keeper ended without saying how the command ended".into());
    }
    // The reason counts when the keeper (or its loss) ended the command;
    // a command that ended by itself first was not killed.
    let killed_by = running.killed_by().filter(|_| status.killed || lost);
    let timed_out = killed_by == Some(KilledBy::Timeout);
    // What the command saved, then the workspace back to chatd's user
    // before the caller hears the end (it may read the files at once).
    let changes: Changes = {
        let hx = hx.clone();
        let (workspace, before) = (call.workspace.clone(), call.before);
        tokio::task::spawn_blocking(move || {
            let after = changes::snapshot(&workspace);
            if hx.run_as.is_some() {
                folders::give_back(&hx.config, &workspace, hx.owner);
            }
            changes::diff(&before, &after)
        })
        .await
        .unwrap_or_default()
    };
    let ending = Ending {
        exit_code: status.exit_code,
        signal: status.signal.clone(),
        duration_ms,
        timed_out,
        truncated: ended.truncated,
        killed_by,
        bytes: ended.total,
        error: error.clone(),
    };
    {
        let store = hx.store.clone();
        let id = running.call_id.clone();
        let e = ending.clone();
        match tokio::task::spawn_blocking(move || store.finish(&id, &e)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::error!(call = %running.call_id, error = %e, "the audit row was not completed")
            }
            Err(e) => {
                tracing::error!(call = %running.call_id, error = %e, "the audit row was not completed")
            }
        }
    }
    let how = match killed_by {
        Some(k) => k.as_str(),
        None if error.is_some() && status.exit_code.is_none() && status.signal.is_none() => "error",
        None if status.exit_code == Some(0) => "ok",
        None => "failed",
    };
    hx.metrics.ended(how);
    hx.metrics.seconds.observe(duration_ms as f64 / 1000.0);
    hx.metrics.running.dec();
    tracing::info!(
        "[host-exec] call {} chat {} exit {} signal {} ms {} killed_by {} bytes {} truncated {} timeout_s {}{}",
        running.call_id,
        running.chat,
        status.exit_code.map(|c| c.to_string()).unwrap_or_else(|| "-".into()),
        status.signal.as_deref().unwrap_or("-"),
        duration_ms,
        killed_by.map(|k| k.as_str()).unwrap_or("-"),
        ended.total,
        ended.truncated,
        call.timeout.as_secs(),
        if error.is_some() { " (error: see the audit)" } else { "" },
    );
    running.finished.store(true, Ordering::SeqCst);
    // The place is free before the caller hears the end: its next call is
    // not refused as busy.
    drop(slot);
    let mut finished = json!({
        "event": "finished",
        "call_id": running.call_id,
        "exit_code": status.exit_code,
        "signal": status.signal,
        "timed_out": timed_out,
        "truncated": ended.truncated,
        "killed_by": killed_by.map(|k| k.as_str()),
        "duration_ms": duration_ms,
        "bytes": ended.total,
        "changes": changes,
    });
    if let Some(e) = error {
        finished["error"] = json!(e);
    }
    if let Some(r) = call.repaired {
        finished["repaired"] = json!(r);
    }
    let _ = tx.send(line(finished));
}
