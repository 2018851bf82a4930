//! The task that drives a call once started: the output read and sent on
//! as text cut at whole characters, within `output_bytes`; the time limit, a
//! stop, shutdown and a keeper that does not end the call in its grace.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::finish::{finish, Ended};
use super::{line, Call, DRAIN, KEEPER_GRACE};
use crate::calls::{KilledBy, Slot};
use crate::keeper::{Spec, Status};
use crate::spawner::Spawned;
use crate::sweep::end_keeper_tree;
use crate::Hostexec;

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

/// The text of `carry` + `chunk` up to the last complete character; the
/// rest stays in `carry`.
pub(super) fn take_text(carry: &mut Vec<u8>, chunk: &[u8]) -> String {
    carry.extend_from_slice(chunk);
    let upto = carry.len() - incomplete_tail(carry);
    drain_text(carry, upto)
}

/// All of `carry` as text at the end of the output, an unfinished
/// character as U+FFFD.
pub(super) fn take_rest(carry: &mut Vec<u8>) -> String {
    drain_text(carry, carry.len())
}

fn drain_text(carry: &mut Vec<u8>, upto: usize) -> String {
    let text = String::from_utf8_lossy(&carry[..upto]).into_owned();
    carry.drain(..upto);
    text
}

pub(super) async fn drive(
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
                        let text = take_text(&mut carry, &buf[..n]);
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
    let rest = take_rest(&mut carry);
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

/// Sleeps until `at`, or forever when there is none (a select's branch
/// that is off).
pub(crate) async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
