//! A call on hostexecd's side, the task that drives it: the chat's folders
//! readied (`folders.rs`), the keeper spawned (`spawner.rs`) and given the
//! call, the output read and forwarded as NDJSON events (at most
//! `output_bytes` of text in all), the time limit, the output limit, a stop,
//! shutdown; then what the command saved in the workspace, the workspace
//! given back, the audit row, the log line and the `finished` event.

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::calls::{KilledBy, Running, Slot};
use crate::changes::{self, Changes};
use crate::contain::View;
use crate::folders::{self, Kind, Unready};
use crate::keeper::{Spec, Status};
use crate::spawner::{Keeper, Spawned};
use crate::store::Ending;
use crate::sweep::end_keeper_tree;
use crate::Hostexec;

/// How long output is still read once the keeper has reported (the pipe
/// normally ends at once: every process of the call is gone).
const DRAIN: Duration = Duration::from_millis(250);
/// How long a keeper may take to end a call before hostexecd ends it
/// itself: the keeper's processes, then the keeper (a command of the same
/// uid may have stopped its keeper with SIGSTOP).
const KEEPER_GRACE: Duration = Duration::from_secs(1);

/// A call as the API took it.
pub struct Request {
    pub chat: String,
    pub command: String,
    pub timeout: Duration,
    /// Its workspace, checked (`folders::workspace_of`).
    pub workspace: PathBuf,
    pub kind: Kind,
}

/// Why a call did not start.
#[derive(Debug)]
pub enum NotStarted {
    /// The chat's workspace or home cannot be used as it is (409).
    Unusable(String),
    /// Something failed around it (500).
    Failed(anyhow::Error),
}

impl<E: Into<anyhow::Error>> From<E> for NotStarted {
    fn from(e: E) -> NotStarted {
        NotStarted::Failed(e.into())
    }
}

/// What the driver carries from the start to the end of a call.
struct Call {
    workspace: PathBuf,
    before: changes::Snapshot,
    repaired: Option<String>,
    timeout: Duration,
}

/// Ends the call when the response is dropped before it finished (the
/// caller went away).
struct StopOnDrop(Arc<Running>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if !self.0.finished.load(Ordering::SeqCst) {
            self.0.kill(KilledBy::Stop);
        }
    }
}

/// The NDJSON lines of one call, as the response body.
pub struct CallStream {
    rx: mpsc::UnboundedReceiver<Bytes>,
    _stop: StopOnDrop,
}

impl futures_util::Stream for CallStream {
    type Item = Result<Bytes, std::convert::Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx).map(|o| o.map(Ok))
    }
}

fn line(value: serde_json::Value) -> Bytes {
    let mut v = serde_json::to_vec(&value).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

/// Starts a call whose place is `slot`: the chat's folders, the keeper,
/// the audit row; then the driver runs on its own and the stream carries
/// its events. An error here is before anything ran.
pub async fn start(hx: Arc<Hostexec>, slot: Slot, req: Request) -> Result<CallStream, NotStarted> {
    let running = slot.running.clone();
    let ready = {
        let (hx, chat, kind) = (hx.clone(), req.chat.clone(), req.kind);
        tokio::task::spawn_blocking(move || {
            let ready = folders::ready(&hx.config, &chat, kind, hx.run_as.as_ref(), hx.owner)?;
            let before = changes::snapshot(&ready.workspace);
            Ok::<_, Unready>((ready, before))
        })
        .await?
    };
    let (ready, before) = match ready {
        Ok(r) => r,
        Err(Unready::Unusable(why)) => return Err(NotStarted::Unusable(why)),
        Err(Unready::Failed(e)) => return Err(NotStarted::Failed(e.into())),
    };
    let give_back = |hx: &Arc<Hostexec>| {
        if hx.run_as.is_some() {
            folders::give_back(&hx.config, &ready.workspace, hx.owner);
        }
    };
    let mut hidden = vec![hx.config.data_dir.clone()];
    hidden.extend(hx.config.socket.parent().map(|p| p.to_path_buf()));
    if req.kind == Kind::Own {
        hidden.push(hx.config.shared_workspace.clone());
    }
    let spec = Spec {
        command: req.command.clone(),
        workspace: ready.workspace.clone(),
        home: ready.home.clone(),
        namespaces: hx.namespaces,
        view: View {
            chat_data: hx.config.chat_data.clone(),
            workspace: ready.workspace.clone(),
            home: ready.home.clone(),
            hidden,
        },
        path: hx.config.path.clone(),
        lang: hx.config.lang.clone(),
        tz: hx.config.tz.clone(),
        run_as: hx.run_as.clone(),
        uid: hx.uid,
        max_processes: hx.config.max_processes,
        max_file_bytes: hx.config.max_file_bytes,
        parent: std::process::id() as i32,
        backstop_s: req.timeout.as_secs() + 30,
    };
    let spawned = match hx.spawner.spawn().await {
        Ok(s) => s,
        Err(e) => {
            give_back(&hx);
            return Err(e.into());
        }
    };
    {
        let store = hx.store.clone();
        let (id, chat, command, workspace) = (
            running.call_id.clone(),
            req.chat.clone(),
            req.command.clone(),
            ready.workspace.clone(),
        );
        let (pid, start) = (spawned.keeper.pid, spawned.keeper.start);
        let begun = tokio::task::spawn_blocking(move || {
            store.begin(&crate::store::Begun {
                call_id: &id,
                chat: &chat,
                command: &command,
                keeper_pid: pid,
                keeper_start: start,
                workspace: &workspace,
            })
        })
        .await?;
        if let Err(e) = begun {
            spawned.keeper.signal(libc::SIGKILL);
            give_back(&hx);
            return Err(e.into());
        }
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let _ = tx.send(line(
        json!({"event": "started", "call_id": running.call_id}),
    ));
    hx.metrics.running.inc();
    let call = Call {
        workspace: ready.workspace,
        before,
        repaired: ready.repaired,
        timeout: req.timeout,
    };
    tokio::spawn(drive(hx, slot, spawned, spec, call, tx));
    Ok(CallStream {
        rx,
        _stop: StopOnDrop(running),
    })
}

/// Bytes at the end of `b` that begin a UTF-8 character not yet complete.
fn incomplete_tail(b: &[u8]) -> usize {
    for back in 1..=b.len().min(3) {
        let byte = b[b.len() - back];
        if byte & 0xC0 == 0x80 {
            continue; // a continuation byte: look further back
        }
        let need = match byte {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => return 0,
        };
        return if need > back { back } else { 0 };
    }
    0
}

/// The text of `carry` + `chunk` up to the last complete character (all of
/// it when `last`); the rest stays in `carry`.
fn take_text(carry: &mut Vec<u8>, chunk: &[u8], last: bool) -> String {
    carry.extend_from_slice(chunk);
    let keep = if last { 0 } else { incomplete_tail(carry) };
    let upto = carry.len() - keep;
    let text = String::from_utf8_lossy(&carry[..upto]).into_owned();
    carry.drain(..upto);
    text
}

async fn drive(
    hx: Arc<Hostexec>,
    slot: Slot,
    spawned: Spawned,
    spec: Spec,
    call: Call,
    tx: mpsc::UnboundedSender<Bytes>,
) {
    let running = slot.running.clone();
    let began = Instant::now();
    let limit = hx.config.output_bytes;
    let mut total: u64 = 0;
    let mut sent: u64 = 0;
    let mut truncated = false;
    let mut carry = Vec::new();
    let mut status_buf = Vec::new();
    let mut out_done = false;
    let mut status_done = false;
    let mut signalled: Option<tokio::time::Instant> = None;
    let mut drain_until: Option<tokio::time::Instant> = None;
    let deadline = tokio::time::Instant::now() + call.timeout;
    let mut error: Option<String> = None;

    let Spawned {
        keeper,
        control,
        output,
    } = spawned;
    let control = control
        .set_nonblocking(true)
        .and_then(|_| tokio::net::UnixStream::from_std(control));
    let output = tokio::net::unix::pipe::Receiver::from_owned_fd(output);
    let (mut control, mut output) = match (control, output) {
        (Ok(c), Ok(o)) => (c, o),
        (c, o) => {
            keeper.signal(libc::SIGKILL);
            let why = c
                .err()
                .or(o.err())
                .map(|e| e.to_string())
                .unwrap_or_default();
            error = Some(format!("hostexecd could not follow the command: {why}"));
            let ended = Ended {
                status: None,
                error,
                began,
                ..Ended::default()
            };
            finish(&hx, slot, &keeper, &tx, ended, call).await;
            return;
        }
    };
    // The call, then the write side shut: the keeper reads to the end.
    let body = serde_json::to_vec(&spec).unwrap_or_default();
    let sent_spec = tokio::time::timeout(Duration::from_secs(5), async {
        control.write_all(&body).await?;
        control.shutdown().await
    })
    .await;
    if !matches!(sent_spec, Ok(Ok(()))) {
        keeper.signal(libc::SIGKILL);
        error = Some("the command's keeper did not take the call".into());
    }

    let mut buf = vec![0u8; 16 * 1024];
    let mut sbuf = [0u8; 1024];
    while !(out_done && status_done) {
        let killed = running.killed_by();
        tokio::select! {
            _ = running.wake.notified() => {}
            _ = tokio::time::sleep_until(deadline), if killed.is_none() => {
                running.kill(KilledBy::Timeout);
            }
            r = output.read(&mut buf), if !out_done => match r {
                Ok(0) | Err(_) => out_done = true,
                Ok(n) => {
                    total += n as u64;
                    hx.metrics.output_bytes.inc_by(n as u64);
                    if !truncated {
                        // The bound is on the text sent: a byte that is not
                        // UTF-8 is sent as U+FFFD, three bytes.
                        let text = take_text(&mut carry, &buf[..n], false);
                        let room = limit.saturating_sub(sent) as usize;
                        let kept = crate::store::cut(&text, room);
                        if !kept.is_empty() {
                            sent += kept.len() as u64;
                            let _ = tx.send(line(json!({"event": "output", "text": kept})));
                        }
                        if kept.len() < text.len() {
                            truncated = true;
                            running.kill(KilledBy::Output);
                        }
                    }
                }
            },
            r = control.read(&mut sbuf), if !status_done => match r {
                Ok(0) | Err(_) => {
                    status_done = true;
                    drain_until = Some(tokio::time::Instant::now() + DRAIN);
                }
                Ok(n) => status_buf.extend_from_slice(&sbuf[..n]),
            },
            _ = sleep_until_opt(drain_until), if status_done && !out_done => {
                out_done = true;
            }
            _ = sleep_until_opt(signalled.map(|s| s + KEEPER_GRACE)), if signalled.is_some() && !status_done => {
                // The keeper did not end the call in time (it may be
                // stopped): hostexecd stops and kills what is below it while
                // it still holds it, then the keeper; the rest is swept.
                let (pid, start) = (keeper.pid, keeper.start);
                let _ = tokio::task::spawn_blocking(move || end_keeper_tree(pid, start)).await;
                keeper.signal(libc::SIGKILL);
                error.get_or_insert_with(|| {
                    "the command's keeper did not answer: hostexecd ended the command itself".into()
                });
                signalled = Some(tokio::time::Instant::now() + Duration::from_secs(3600));
            }
        }
        if running.killed_by().is_some() && signalled.is_none() && !status_done {
            keeper.signal(libc::SIGTERM);
            signalled = Some(tokio::time::Instant::now());
        }
        if tx.is_closed() && running.killed_by().is_none() {
            running.kill(KilledBy::Stop);
        }
    }
    if truncated {
        // A character cut by the limit is left out, not shown as U+FFFD.
        carry.clear();
    }
    let rest = take_text(&mut carry, &[], true);
    let room = limit.saturating_sub(sent) as usize;
    let kept = crate::store::cut(&rest, room);
    if !kept.is_empty() {
        let _ = tx.send(line(json!({"event": "output", "text": kept})));
    }
    if kept.len() < rest.len() {
        truncated = true;
    }
    let status: Option<Status> = serde_json::from_slice(status_buf.trim_ascii()).ok();
    let ended = Ended {
        status,
        error,
        total,
        truncated,
        began,
    };
    finish(&hx, slot, &keeper, &tx, ended, call).await;
}

/// How the output and the keeper ended, as the driver saw it.
struct Ended {
    status: Option<Status>,
    error: Option<String>,
    total: u64,
    truncated: bool,
    began: Instant,
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

async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn finish(
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
            tracing::warn!(call = %running.call_id, left = swept, "processes of a call were still there after the sweep");
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_characters_wait_for_their_end() {
        let mut carry = Vec::new();
        let e = "é".as_bytes();
        assert_eq!(take_text(&mut carry, &[b'a', e[0]], false), "a");
        assert_eq!(carry, vec![e[0]]);
        assert_eq!(take_text(&mut carry, &[e[1], b'b'], false), "éb");
        assert!(carry.is_empty());
        let snow = "☃".as_bytes();
        assert_eq!(take_text(&mut carry, &snow[..2], false), "");
        assert_eq!(take_text(&mut carry, &[], true), "\u{FFFD}");
        assert_eq!(take_text(&mut carry, &[0xff, b'x'], false), "\u{FFFD}x");
    }
}
