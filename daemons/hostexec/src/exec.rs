//! A call on hostexecd's side: its place among the running calls (one per
//! chat, `max_chats` chats), its scratch folder, its keeper (started from
//! one long-lived thread, since PR_SET_PDEATHSIG follows the thread that
//! forked), and the task that drives it: the spec to the keeper, the output
//! read and forwarded as NDJSON events, the time limit, the output limit, a
//! stop, shutdown; then what the command saved, the audit row, the log line
//! and the `finished` event.

use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, Notify};

use crate::changes::{self, Changes};
use crate::keeper::{RunAs, Spec, Status};
use crate::store::Ending;
use crate::Hostexec;

/// How long output is still read once the keeper has reported (the pipe
/// normally ends at once: every process of the call is gone).
const DRAIN: Duration = Duration::from_millis(250);
/// How long a keeper may take to end a call before hostexecd ends it
/// itself: the keeper's processes, then the keeper (a command of the same
/// uid may have stopped its keeper with SIGSTOP).
const KEEPER_GRACE: Duration = Duration::from_secs(1);

/// Why hostexecd ended a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KilledBy {
    Timeout,
    Output,
    Stop,
    Shutdown,
}

impl KilledBy {
    pub fn as_str(self) -> &'static str {
        match self {
            KilledBy::Timeout => "timeout",
            KilledBy::Output => "output",
            KilledBy::Stop => "stop",
            KilledBy::Shutdown => "shutdown",
        }
    }
}

/// A running call, as the API and the driver share it.
pub struct Running {
    pub call_id: String,
    pub chat: String,
    killed_by: Mutex<Option<KilledBy>>,
    wake: Notify,
    keeper: AtomicI32,
    finished: AtomicBool,
}

impl Running {
    /// Asks for the call to end; the first reason given is the one kept.
    pub fn kill(&self, why: KilledBy) {
        {
            let mut k = self.killed_by.lock().unwrap_or_else(|p| p.into_inner());
            if k.is_none() {
                *k = Some(why);
            }
        }
        self.wake.notify_one();
    }

    pub fn killed_by(&self) -> Option<KilledBy> {
        *self.killed_by.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Why a call was refused before it started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    ChatBusy { call_id: String },
    TooManyChats { running: usize, max: usize },
}

/// The running calls, by chat and by id.
pub struct Calls {
    inner: Mutex<HashMap<String, Arc<Running>>>,
    max_chats: usize,
}

/// A call's place; given back when dropped.
pub struct Slot {
    calls: Arc<Calls>,
    pub running: Arc<Running>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut calls = self.calls.lock();
        if calls
            .get(&self.running.chat)
            .is_some_and(|r| Arc::ptr_eq(r, &self.running))
        {
            calls.remove(&self.running.chat);
        }
    }
}

impl Calls {
    pub fn new(max_chats: usize) -> Arc<Calls> {
        Arc::new(Calls {
            inner: Mutex::new(HashMap::new()),
            max_chats,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Running>>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A place for a new call of `chat`, or why there is none.
    pub fn reserve(self: &Arc<Self>, chat: &str, call_id: &str) -> Result<Slot, Refusal> {
        let mut calls = self.lock();
        if let Some(r) = calls.get(chat) {
            return Err(Refusal::ChatBusy {
                call_id: r.call_id.clone(),
            });
        }
        if calls.len() >= self.max_chats {
            return Err(Refusal::TooManyChats {
                running: calls.len(),
                max: self.max_chats,
            });
        }
        let running = Arc::new(Running {
            call_id: call_id.to_string(),
            chat: chat.to_string(),
            killed_by: Mutex::new(None),
            wake: Notify::new(),
            keeper: AtomicI32::new(0),
            finished: AtomicBool::new(false),
        });
        calls.insert(chat.to_string(), running.clone());
        Ok(Slot {
            calls: self.clone(),
            running,
        })
    }

    pub fn count(&self) -> usize {
        self.lock().len()
    }

    pub fn by_id(&self, call_id: &str) -> Option<Arc<Running>> {
        self.lock().values().find(|r| r.call_id == call_id).cloned()
    }

    pub fn kill_all(&self, why: KilledBy) {
        for r in self.lock().values() {
            r.kill(why);
        }
    }

    /// The pids of the keepers running now.
    pub fn keepers(&self) -> Vec<i32> {
        self.lock()
            .values()
            .map(|r| r.keeper.load(Ordering::Relaxed))
            .filter(|p| *p > 0)
            .collect()
    }
}

/// A keeper just started: itself, the socket to it, the call's output.
pub struct Spawned {
    keeper: Keeper,
    control: std::os::unix::net::UnixStream,
    output: OwnedFd,
}

/// A keeper process, signalled through its pidfd.
pub struct Keeper {
    pub pid: i32,
    pub start: u64,
    pidfd: Option<OwnedFd>,
}

impl Keeper {
    /// Waits (blocking, at most `bound`) for the keeper to exit: its pidfd
    /// turns readable. Whether it did.
    fn wait_exit(pid: i32, start: u64, pidfd: Option<OwnedFd>, bound: Duration) -> bool {
        use std::os::fd::AsRawFd;
        let until = Instant::now() + bound;
        loop {
            let gone = match &pidfd {
                Some(fd) => {
                    let mut p = libc::pollfd {
                        fd: fd.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // SAFETY: poll on one descriptor we own.
                    unsafe { libc::poll(&mut p, 1, 10) > 0 }
                }
                None => {
                    std::thread::sleep(Duration::from_millis(10));
                    crate::tree::stat_of(pid).is_none_or(|p| p.start != start || p.is_dead())
                }
            };
            if gone {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
        }
    }

    fn signal(&self, signal: i32) {
        match &self.pidfd {
            Some(fd) => {
                crate::tree::pidfd_signal(fd, signal);
            }
            None => {
                crate::tree::signal_exact(self.pid, self.start, signal);
            }
        }
    }
}

type SpawnReply = oneshot::Sender<std::io::Result<Spawned>>;

/// Starts keepers from one thread that lives as long as hostexecd: a
/// keeper's PR_SET_PDEATHSIG fires when the thread that forked it ends.
pub struct Spawner {
    tx: Mutex<std::sync::mpsc::Sender<SpawnReply>>,
}

impl Spawner {
    pub fn start() -> std::io::Result<Spawner> {
        let (tx, rx) = std::sync::mpsc::channel::<SpawnReply>();
        std::thread::Builder::new()
            .name("keeper-spawner".into())
            .spawn(move || {
                while let Ok(reply) = rx.recv() {
                    let _ = reply.send(spawn_keeper());
                }
            })?;
        Ok(Spawner { tx: Mutex::new(tx) })
    }

    pub async fn spawn(&self) -> std::io::Result<Spawned> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send(reply)
            .map_err(|_| std::io::Error::other("the keeper spawner is gone"))?;
        answer
            .await
            .map_err(|_| std::io::Error::other("the keeper spawner is gone"))?
    }
}

/// Taken by the keeper spawner around `Command::spawn` and by the reaper
/// around `waitpid(-1)`.
pub static SPAWNING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn spawn_keeper() -> std::io::Result<Spawned> {
    let (control, theirs) = std::os::unix::net::UnixStream::pair()?;
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(std::io::Error::from)?;
    let write2 = write.try_clone()?;
    let mut command = std::process::Command::new("/proc/self/exe");
    command
        .arg0("hostexecd")
        .arg("--keeper")
        .env_clear()
        .current_dir("/")
        .stdin(std::process::Stdio::from(OwnedFd::from(theirs)))
        .stdout(std::process::Stdio::from(write))
        .stderr(std::process::Stdio::from(write2));
    // Held while std's spawn may still wait for a child whose exec failed:
    // hostexecd's reaper must not take that child first (std would panic).
    let child = {
        let _spawning = SPAWNING.lock().unwrap_or_else(|p| p.into_inner());
        command.spawn()?
    };
    // The pipe's write ends and the keeper's socket go with the command.
    drop(command);
    let pid = child.id() as i32;
    // Reaped by hostexecd's SIGCHLD task, not through `child`.
    drop(child);
    let pidfd = crate::tree::pidfd_open(pid);
    let start = crate::tree::stat_of(pid).map(|p| p.start).unwrap_or(0);
    Ok(Spawned {
        keeper: Keeper { pid, start, pidfd },
        control,
        output: read,
    })
}

/// A call as the API took it.
pub struct Request {
    pub chat: String,
    pub command: String,
    pub timeout: Duration,
}

/// Makes `<chat_data>/homes/<chat>/` and its `home/` (0700, owned by the
/// user commands run as), opening each from its parent with O_NOFOLLOW so a
/// link put there is never followed. Returns the scratch folder and home.
pub fn prepare_scratch(
    chat_data: &Path,
    chat: &str,
    owner: Option<&RunAs>,
) -> std::io::Result<(PathBuf, PathBuf)> {
    let homes = chat_data.join("homes");
    if !homes.exists() {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&homes)?;
    }
    let dir_flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    // Opened without following a link, and its mode set through the
    // descriptor: a `homes` link never has hostexecd (root, with run_as)
    // change the folder it points to.
    let homes_fd = nix::fcntl::open(&homes, dir_flags, Mode::empty()).map_err(|e| {
        if homes.is_symlink() {
            std::io::Error::other(format!(
                "{} is a symbolic link: hostexecd does not follow it; make it a folder",
                homes.display()
            ))
        } else {
            std::io::Error::from(e)
        }
    })?;
    // With another user, it must pass through homes/ (not list it).
    let mode = if owner.is_some() { 0o711 } else { 0o700 };
    nix::sys::stat::fchmod(homes_fd.as_fd(), Mode::from_bits_truncate(mode))?;
    let make = |parent: &OwnedFd, name: &str| -> std::io::Result<OwnedFd> {
        match nix::sys::stat::mkdirat(parent.as_fd(), name, Mode::from_bits_truncate(0o700)) {
            Ok(()) | Err(nix::Error::EEXIST) => {}
            Err(e) => return Err(e.into()),
        }
        let fd = nix::fcntl::openat(parent.as_fd(), name, dir_flags, Mode::empty())?;
        if let Some(user) = owner {
            let st = nix::sys::stat::fstat(fd.as_fd())?;
            if st.st_uid != user.uid || st.st_gid != user.gid {
                nix::unistd::fchown(
                    fd.as_fd(),
                    Some(nix::unistd::Uid::from_raw(user.uid)),
                    Some(nix::unistd::Gid::from_raw(user.gid)),
                )?;
            }
        }
        nix::sys::stat::fchmod(fd.as_fd(), Mode::from_bits_truncate(0o700))?;
        Ok(fd)
    };
    let scratch_fd = make(&homes_fd, chat)?;
    make(&scratch_fd, "home")?;
    let scratch = homes.join(chat);
    let home = scratch.join("home");
    Ok((scratch, home))
}

/// Whether `user` may pass through every folder from `/` down to `path`
/// (search permission): with `run_as`, the scratch folders must be reachable.
pub fn reachable(path: &Path, user: &RunAs) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let mut at = PathBuf::from("/");
    let mut folders = vec![at.clone()];
    for part in path.components().skip(1) {
        at.push(part);
        folders.push(at.clone());
    }
    for folder in folders {
        let meta = std::fs::metadata(&folder).map_err(|e| format!("{}: {e}", folder.display()))?;
        let mode = meta.mode();
        let ok = if meta.uid() == user.uid {
            mode & 0o100 != 0
        } else if meta.gid() == user.gid || user.groups.contains(&meta.gid()) {
            mode & 0o010 != 0
        } else {
            mode & 0o001 != 0
        };
        if !ok {
            return Err(format!(
                "{} (mode {:04o}, owner uid {}) cannot be passed through by {} (uid {}): \
                 give it o+x (chmod o+x) or choose a chat_data that user can reach",
                folder.display(),
                mode & 0o7777,
                meta.uid(),
                user.name,
                user.uid
            ));
        }
    }
    Ok(())
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

/// Starts a call whose place is `slot`: the scratch folder, the keeper,
/// the audit row; then the driver runs on its own and the stream carries
/// its events. An error here is before anything ran.
pub async fn start(hx: Arc<Hostexec>, slot: Slot, req: Request) -> anyhow::Result<CallStream> {
    let running = slot.running.clone();
    let chat_data = hx.config.chat_data.clone();
    let chat = req.chat.clone();
    let owner = hx.run_as.clone();
    let (scratch, home, before) = tokio::task::spawn_blocking(move || {
        let (scratch, home) = prepare_scratch(&chat_data, &chat, owner.as_ref())?;
        let before = changes::snapshot(&scratch);
        Ok::<_, std::io::Error>((scratch, home, before))
    })
    .await??;
    let spec = Spec {
        command: req.command.clone(),
        scratch: scratch.clone(),
        home,
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
    let spawned = hx.spawner.spawn().await?;
    running.keeper.store(spawned.keeper.pid, Ordering::Relaxed);
    {
        let store = hx.store.clone();
        let (id, chat, command) = (
            running.call_id.clone(),
            req.chat.clone(),
            req.command.clone(),
        );
        let (pid, start) = (spawned.keeper.pid, spawned.keeper.start);
        let begun =
            tokio::task::spawn_blocking(move || store.begin(&id, &chat, &command, pid, start))
                .await?;
        if let Err(e) = begun {
            spawned.keeper.signal(libc::SIGKILL);
            return Err(e.into());
        }
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let _ = tx.send(line(
        json!({"event": "started", "call_id": running.call_id}),
    ));
    hx.metrics.running.inc();
    tokio::spawn(drive(
        hx,
        slot,
        spawned,
        spec,
        req.timeout,
        before,
        scratch,
        tx,
    ));
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

#[allow(clippy::too_many_arguments)]
async fn drive(
    hx: Arc<Hostexec>,
    slot: Slot,
    spawned: Spawned,
    spec: Spec,
    timeout: Duration,
    before: changes::Snapshot,
    scratch: PathBuf,
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
    let deadline = tokio::time::Instant::now() + timeout;
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
            finish(
                &hx,
                slot,
                &keeper,
                &tx,
                None,
                error,
                Default::default(),
                began,
                before,
                scratch,
            )
            .await;
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
                    let room = limit.saturating_sub(sent) as usize;
                    let take = n.min(room);
                    if take > 0 {
                        sent += take as u64;
                        let text = take_text(&mut carry, &buf[..take], false);
                        if !text.is_empty() {
                            let _ = tx.send(line(json!({"event": "output", "text": text})));
                        }
                    }
                    if n > take {
                        truncated = true;
                        running.kill(KilledBy::Output);
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
    if !rest.is_empty() {
        let _ = tx.send(line(json!({"event": "output", "text": rest})));
    }
    let status: Option<Status> = serde_json::from_slice(status_buf.trim_ascii()).ok();
    let ended = Ended {
        total,
        truncated,
        timeout,
    };
    finish(
        &hx, slot, &keeper, &tx, status, error, ended, began, before, scratch,
    )
    .await;
}

#[derive(Default)]
struct Ended {
    total: u64,
    truncated: bool,
    timeout: Duration,
}

async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[allow(clippy::too_many_arguments)]
async fn finish(
    hx: &Arc<Hostexec>,
    slot: Slot,
    keeper: &Keeper,
    tx: &mpsc::UnboundedSender<Bytes>,
    status: Option<Status>,
    mut error: Option<String>,
    ended: Ended,
    began: Instant,
    before: changes::Snapshot,
    scratch: PathBuf,
) {
    let running = slot.running.clone();
    let duration_ms = began.elapsed().as_millis() as u64;
    // A keeper that gave no status, or left processes, leaves them to
    // hostexecd (the subreaper above it): they are killed here.
    let lost = status.as_ref().is_none_or(|s| s.left > 0);
    if lost {
        // Not before the keeper is gone: until then what it holds is below
        // it, not ours to sweep.
        let calls = hx.calls.clone();
        let (pid, start) = (keeper.pid, keeper.start);
        let pidfd = keeper.pidfd.as_ref().and_then(|fd| fd.try_clone().ok());
        let swept = tokio::task::spawn_blocking(move || {
            if !Keeper::wait_exit(pid, start, pidfd, Duration::from_secs(2)) {
                end_keeper_tree(pid, start);
                crate::tree::signal_exact(pid, start, libc::SIGKILL);
                let pidfd = crate::tree::pidfd_open(pid);
                Keeper::wait_exit(pid, start, pidfd, Duration::from_secs(2));
            }
            sweep(&calls)
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
    let changes: Changes = tokio::task::spawn_blocking(move || {
        let after = changes::snapshot(&scratch);
        changes::diff(&before, &after)
    })
    .await
    .unwrap_or_default();
    let ending = Ending {
        exit_code: status.exit_code,
        signal: status.signal.clone(),
        duration_ms,
        timed_out,
        truncated: ended.truncated,
        killed_by: killed_by.map(|k| k.as_str().to_string()),
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
        ended.timeout.as_secs(),
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
    let _ = tx.send(line(finished));
}

/// Kills whatever hostexecd adopted that is not a running keeper's (the
/// processes of a keeper that died); returns how many were left. A keeper
/// just spawned, not yet in `calls`, is known by its command line.
pub fn sweep(calls: &Calls) -> usize {
    let keepers = calls.keepers();
    let me = std::process::id() as i32;
    let is_keeper = |pid: i32| {
        keepers.contains(&pid)
            || std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.starts_with(b"hostexecd\0--keeper\0"))
    };
    crate::tree::kill_tree(me, &is_keeper, &mut || {}, Duration::from_secs(5))
}

/// Stops and kills every process below the keeper `pid` (if it is still
/// the process that started at `start`), as the keeper itself would: used
/// when the keeper does not answer (stopped, or a previous hostexecd's).
/// Returns how many were left.
pub fn end_keeper_tree(pid: i32, start: u64) -> usize {
    let Some(fd) = crate::tree::pidfd_open(pid) else {
        return 0;
    };
    // Opened before the check: the same start time means the pidfd (and
    // the walk below it) is the keeper's.
    if crate::tree::stat_of(pid).map(|p| p.start) != Some(start) {
        return 0;
    }
    let left = crate::tree::kill_tree(pid, &|_| false, &mut || {}, Duration::from_secs(5));
    drop(fd);
    left
}

/// Ends the keepers of calls a previous hostexecd did not see end, and all
/// below them: a keeper still there (pid and start time match, same boot)
/// has its processes stopped and killed while it still holds them, then is
/// killed itself (a keeper killed alone would leave them to init). Writes
/// the rows as ended by the restart.
pub fn recover(store: &crate::store::Store) -> anyhow::Result<usize> {
    let open = store.unfinished()?;
    for call in &open {
        if let (Some(pid), Some(start)) = (call.keeper_pid, call.keeper_start) {
            let alive = crate::tree::stat_of(pid).is_some_and(|p| p.start == start && !p.is_dead());
            if alive {
                let left = end_keeper_tree(pid, start);
                crate::tree::signal_exact(pid, start, libc::SIGKILL);
                let until = Instant::now() + Duration::from_secs(5);
                while crate::tree::stat_of(pid).is_some_and(|p| p.start == start && !p.is_dead())
                    && Instant::now() < until
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                tracing::warn!(call = %call.call_id, keeper = pid, left, "a keeper of a call before the restart was ended, with its processes");
            }
        }
        store.finish_restarted(call)?;
        tracing::info!(
            "[host-exec] call {} ended by a restart of hostexecd",
            call.call_id
        );
    }
    Ok(open.len())
}

/// The user named `name`, with its groups.
pub fn resolve_user(name: &str) -> anyhow::Result<RunAs> {
    let user = nix::unistd::User::from_name(name)
        .map_err(|e| anyhow::anyhow!("looking up user {name:?}: {e}"))?
        .ok_or_else(|| anyhow::anyhow!("there is no user {name:?} on this machine"))?;
    let cname = CString::new(name)?;
    let groups = nix::unistd::getgrouplist(&cname, user.gid)
        .map(|g| g.into_iter().map(|g| g.as_raw()).collect())
        .unwrap_or_else(|_| vec![user.gid.as_raw()]);
    Ok(RunAs {
        name: name.to_string(),
        uid: user.uid.as_raw(),
        gid: user.gid.as_raw(),
        groups,
    })
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

    #[test]
    fn one_call_per_chat_and_a_bound_on_chats() {
        let calls = Calls::new(2);
        let a = calls.reserve("a", "hx_1").unwrap();
        assert_eq!(
            calls.reserve("a", "hx_2").err(),
            Some(Refusal::ChatBusy {
                call_id: "hx_1".into()
            })
        );
        let _b = calls.reserve("b", "hx_3").unwrap();
        assert_eq!(
            calls.reserve("c", "hx_4").err(),
            Some(Refusal::TooManyChats { running: 2, max: 2 })
        );
        assert!(calls.by_id("hx_1").is_some());
        drop(a);
        assert_eq!(calls.count(), 1);
        assert!(calls.reserve("c", "hx_5").is_ok());
    }
}
