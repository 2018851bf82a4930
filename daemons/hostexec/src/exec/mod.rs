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
use std::time::Duration;

use bytes::Bytes;
use serde_json::json;
use tokio::sync::mpsc;

use crate::calls::{KilledBy, Running, Slot};
use crate::changes;
use crate::folders::{self, Kind, Unready};
use crate::Hostexec;

pub(crate) mod drive;
pub(crate) mod finish;
#[cfg(test)]
mod tests;

use drive::drive;

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
    let spec = hx.spec(
        req.command.clone(),
        None,
        &ready.workspace,
        &ready.home,
        hidden,
        req.timeout,
    );
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
                workspace: Some(&workspace),
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
