//! `soak`: chatd under sustained load and random faults, checked at the end
//! for anything lost (issue 11). It starts the real `chatd` (max 2 runs) and
//! `engine-sim` on 127.0.0.1 and, for `--duration`, drives:
//!
//! - `--chats` chats: messages sent at random (some while a run works, so
//!   they wait as pending), stops, continues and send-now at random;
//! - `--devices` SSE devices attaching and dropping at random, each keeping
//!   its last seq and reconnecting with it (`Last-Event-ID`, or `?after=` as
//!   a reloaded page does), each rebuilding the text of every message from
//!   the snapshot and the `text.delta` events (a `reset` reloads the
//!   snapshot); one device per chat stays attached (it measures the relay
//!   latency) and a few read slowly through a small socket buffer;
//! - faults at random: streams cut mid-answer (`cut_after`), 503 with
//!   Retry-After, the engine refusing connections for up to 20 s
//!   (`/sim/refuse`), chatd SIGKILLed and restarted (every `--kill-every` on
//!   average, and at least once in every run).
//!
//! Then it stops sending, waits (bounded) until every run has ended, has
//! every device catch up to the last seq, stops chatd and checks:
//!
//! 1. every device's text of every message equals the stored text;
//! 2. per chat, the seqs each device saw rise by exactly one (a `reset` then
//!    a snapshot is the one allowed jump), and never go past chatd's head;
//! 3. each `message.updated` a device gets carries the text it rebuilt;
//! 4. every stored answer is a run of the engine's tokens with none lost or
//!    doubled, and a `done` one is whole;
//! 5. every run ended (done, stopped, failed or interrupted);
//! 6. chatd's RSS at the end is within 20 % of its RSS after warm-up: the
//!    chatd measured is the one alive at the end (started by the last
//!    kill); its warm-up lasts ~10 % of the run (5..60 s) and until every
//!    chat has gained the reset distance + 200 events since it started
//!    (the soak asks each chat for one long answer then), because chatd
//!    keeps a ring of ~2,100 recent events per attached chat and its RSS
//!    grows until those rings are full;
//! 7. no panic and no `ERROR` line without an id in chatd's log, and chatd
//!    came back after every kill;
//! 8. `PRAGMA integrity_check` of chat.sqlite3 says ok.
//!
//! It prints the counts, faults, relay latency, events/s and the RSS curve,
//! and ends with `soak: N passed, N failed`; the exit status is 0 only when
//! every invariant held. Every wait is bounded and everything it started is
//! stopped on the way out. docs/soak.md has how to run it and a run's figures.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use clap::Parser;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::{json, Value};
use tandem_tests::harness::{Chatd, Sim, FORWARD_KEY};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

/// A load and fault run of chatd and engine-sim that checks nothing was lost.
#[derive(Parser, Debug)]
#[command(name = "soak")]
struct Args {
    /// How long to drive load and faults: `60s`, `30m`, `1h30m` (a bare number is seconds).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    duration: Duration,
    /// Chats driven at once.
    #[arg(long, default_value_t = 50)]
    chats: usize,
    /// SSE devices attaching and dropping.
    #[arg(long, default_value_t = 500)]
    devices: usize,
    /// Seed of every random choice (default: from the clock; printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Also write the summary to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Mean time between chatd SIGKILLs (every run has at least one).
    #[arg(long, default_value = "90s", value_parser = parse_duration)]
    kill_every: Duration,
    /// Mean time between engine outages of up to 20 s (every run has at least one).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    refuse_every: Duration,
}

/// `60s`, `30m`, `1h30m`, `90` (seconds).
fn parse_duration(text: &str) -> Result<Duration, String> {
    let mut total = 0.0f64;
    let mut number = String::new();
    let mut any = false;
    for c in text.trim().chars() {
        if c.is_ascii_digit() || c == '.' {
            number.push(c);
            continue;
        }
        let unit = match c {
            's' => 1.0,
            'm' => 60.0,
            'h' => 3600.0,
            _ => {
                return Err(format!(
                    "{text:?}: unknown unit {c:?} (use s, m or h: 60s, 30m, 1h30m)"
                ))
            }
        };
        let n: f64 = number
            .parse()
            .map_err(|_| format!("{text:?}: a number must come before {c:?}"))?;
        total += n * unit;
        number.clear();
        any = true;
    }
    if !number.is_empty() {
        total += number
            .parse::<f64>()
            .map_err(|_| format!("{text:?}: {number:?} is not a number"))?;
        any = true;
    }
    if !any || !total.is_finite() || total <= 0.0 {
        return Err(format!("{text:?} is not a duration like 60s or 30m"));
    }
    Ok(Duration::from_secs_f64(total))
}

// ---------------------------------------------------------------------------
// Shared state
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Messages, faults, devices.
    Load,
    /// No more messages or faults; devices go on; runs end.
    Drain,
    /// Every device catches up to the final seq of its chat.
    CatchUp,
    /// Everyone hands in what they have.
    Done,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Inv {
    Text,
    Seqs,
    Live,
    Answers,
    Runs,
    Rss,
    Health,
    Integrity,
}

const INVARIANTS: [Inv; 8] = [
    Inv::Text,
    Inv::Seqs,
    Inv::Live,
    Inv::Answers,
    Inv::Runs,
    Inv::Rss,
    Inv::Health,
    Inv::Integrity,
];

impl Inv {
    fn title(self) -> &'static str {
        match self {
            Inv::Text => "every device's text of every message equals the stored text",
            Inv::Seqs => "per chat, each device's seqs rise by one (jumps only across a reset)",
            Inv::Live => "each message.updated carries the text the device rebuilt",
            Inv::Answers => "stored answers: no token lost or doubled, done ones whole",
            Inv::Runs => "every run ended (none queued or running after the drain)",
            Inv::Rss => "chatd's RSS at the end within 20 % of its RSS after warm-up",
            Inv::Health => "no panic, no ERROR line without an id, chatd back after every kill, a second chatd on its data refused",
            Inv::Integrity => "PRAGMA integrity_check = ok",
        }
    }
}

#[derive(Default)]
struct Counters {
    sent_run: AtomicU64,
    sent_pending: AtomicU64,
    send_failed: AtomicU64,
    stops: AtomicU64,
    stops_idle: AtomicU64,
    continues: AtomicU64,
    continues_refused: AtomicU64,
    send_now: AtomicU64,
    send_now_refused: AtomicU64,
    requests_failed: AtomicU64,
    events: AtomicU64,
    resets: AtomicU64,
    connections: AtomicU64,
    open_failed: AtomicU64,
    snapshots: AtomicU64,
    devices_up: AtomicI64,
}

fn inc(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

fn get(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

/// One chatd process (the first, or one started after a kill).
#[derive(Clone, Debug)]
struct Generation {
    pid: u32,
    started: f64,
}

struct RssSample {
    t: f64,
    pid: u32,
    kib: u64,
}

struct Shared {
    t0: Instant,
    http: reqwest::Client,
    chatd_url: String,
    chatd_port: u16,
    sim_url: String,
    chats: Vec<String>,
    phase: watch::Sender<Phase>,
    /// The final seq of each chat, set before the catch-up.
    targets: Mutex<HashMap<String, i64>>,
    c: Counters,
    faults: Mutex<BTreeMap<String, u64>>,
    broken: Mutex<BTreeMap<Inv, (u64, Vec<String>)>>,
    /// Answers nobody expected (`stop 500 internal`), by kind.
    unexpected: Mutex<BTreeMap<String, u64>>,
    generations: Mutex<Vec<Generation>>,
    pid: AtomicU32,
    rss: Mutex<Vec<RssSample>>,
    /// Set when chatd could not be brought back: the load ends early.
    abort: AtomicBool,
    /// Events each chat must gain after a start for chatd's per-chat ring
    /// of recent events to be full (the reset distance and a margin).
    fill: i64,
    /// The warm-up of the chatd measured at the end, once it is over.
    warm: Mutex<Option<Warm>>,
    /// Chats whose ring the warm-up is filling: their drivers wait meanwhile
    /// (a later message would replace the long answer's cue, a stop cut it).
    filling: Mutex<std::collections::HashSet<String>>,
}

/// The end of a chatd process's warm-up: every chat has gained `fill`
/// events since it started (its rings are full) and ~10 % of the run has passed.
#[derive(Clone, Debug)]
struct Warm {
    pid: u32,
    t: f64,
    kib: u64,
    /// Seconds from the process's start until the rings were full.
    filled_s: f64,
}

impl Shared {
    fn t(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    fn phase(&self) -> Phase {
        *self.phase.borrow()
    }

    fn violate(&self, inv: Inv, detail: String) {
        let mut broken = lock(&self.broken);
        let entry = broken.entry(inv).or_default();
        entry.0 += 1;
        if entry.1.len() < 8 {
            entry.1.push(detail);
        }
    }

    fn fault(&self, kind: &str) {
        *lock(&self.faults).entry(kind.to_string()).or_default() += 1;
    }

    fn unexpected(&self, what: String) {
        *lock(&self.unexpected).entry(what).or_default() += 1;
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(u16, Value)> {
        let mut request = self
            .http
            .request(method, format!("{}/v1/chat-app{path}", self.chatd_url))
            .header("x-forward-key", FORWARD_KEY)
            .timeout(Duration::from_secs(15));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let text = response.text().await?;
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
    }

    async fn snapshot(&self, chat: &str) -> anyhow::Result<Value> {
        let (status, body) = self
            .call(
                reqwest::Method::GET,
                &format!("/conversations/{chat}"),
                None,
            )
            .await?;
        if status != 200 {
            bail!("snapshot of {chat} answered {status}: {body}");
        }
        Ok(body)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

fn say(line: impl AsRef<str>) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", line.as_ref());
    let _ = out.flush();
}

/// Sleeps `d` unless the phase leaves `keep` first; says whether it is still in `keep`.
async fn sleep_in(
    phase: &mut watch::Receiver<Phase>,
    d: Duration,
    keep: impl Fn(Phase) -> bool,
) -> bool {
    let deadline = tokio::time::Instant::now() + d;
    loop {
        if !keep(*phase.borrow_and_update()) {
            return false;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => return keep(*phase.borrow()),
            changed = phase.changed() => if changed.is_err() { return false; },
        }
    }
}

fn live(p: Phase) -> bool {
    matches!(p, Phase::Load | Phase::Drain)
}

/// A sample of an exponential distribution with `mean`.
fn exponential(rng: &mut StdRng, mean: f64) -> f64 {
    -mean * (1.0 - rng.random::<f64>()).ln()
}

/// Resident memory of a process in KiB (`VmRSS`).
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// Raises the soft open-files limit towards `want` (at most the hard limit).
fn raise_nofile(want: u64) -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 0;
    };
    let target = want.min(hard);
    if target > soft && setrlimit(Resource::RLIMIT_NOFILE, target, hard).is_ok() {
        return target;
    }
    soft
}

// ---------------------------------------------------------------------------
// Chats: messages, stops, continues
// ---------------------------------------------------------------------------

const WORDS: &[&str] = &[
    "hello there",
    "héllo wörld",
    "漢字 テスト",
    "emoji 😀 fine",
    "plain words, a comma",
    "tabs\tand \"quotes\"",
];

/// A message with a unique cue: its answer's length and pace, and now and
/// then a fault for the engine to play.
fn message_text(shared: &Shared, rng: &mut StdRng, chat: usize, n: u64) -> String {
    // Now and then a long answer as fast as the engine goes: a burst of
    // thousands of events, so devices away or reading slowly fall more
    // than 2,000 behind and get `reset`.
    let long = rng.random_bool(0.02);
    let tokens: usize = if long {
        rng.random_range(1_000..=3_000)
    } else {
        rng.random_range(4..=80)
    };
    let tps = match rng.random_range(0..10) {
        _ if long => 0,
        0..=2 => 0,
        3..=5 => 100,
        6..=8 => 200,
        _ => 400,
    };
    let mut cue = format!("tokens={tokens} tps={tps} id=c{chat}m{n}");
    if rng.random_bool(0.3) {
        cue.push_str(" stamp=1");
    }
    match rng.random_range(0..100) {
        0..=6 => {
            let k = rng.random_range(0..tokens);
            let _ = write!(cue, " cut_after={k} fail_times=1");
            shared.fault("cut stream (cue cut_after, once)");
        }
        7..=11 => {
            let s = rng.random_range(1..=3);
            let _ = write!(cue, " status=503 retry_after={s} fail_times=1");
            shared.fault("503 + Retry-After (cue, once: retried)");
        }
        12 => {
            cue.push_str(" status=503 retry_after=1 fail_times=2");
            shared.fault("503 + Retry-After twice (cue: the run fails)");
        }
        _ => {}
    }
    let words = WORDS[rng.random_range(0..WORDS.len())];
    format!("{words} #{n} [sim {cue}]")
}

async fn drive_chat(shared: Arc<Shared>, index: usize, seed: u64) {
    let chat = shared.chats[index].clone();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut phase = shared.phase.subscribe();
    let mut n = 0u64;
    let path = |what: &str| format!("/conversations/{chat}/{what}");
    loop {
        let pause = Duration::from_secs_f64(rng.random_range(0.5..5.0));
        if !sleep_in(&mut phase, pause, |p| p == Phase::Load).await {
            return;
        }
        if lock(&shared.filling).contains(&chat) {
            continue;
        }
        let roll = rng.random_range(0..100);
        if roll < 70 {
            // Now and then two or three at once: the later ones find a run working.
            let burst = if rng.random_bool(0.25) {
                rng.random_range(2..=3)
            } else {
                1
            };
            for _ in 0..burst {
                n += 1;
                let text = message_text(&shared, &mut rng, index, n);
                match shared
                    .call(
                        reqwest::Method::POST,
                        &path("messages"),
                        Some(json!({ "text": text })),
                    )
                    .await
                {
                    Ok((202, body)) if body["run_id"].is_string() => inc(&shared.c.sent_run),
                    Ok((202, body)) if body["pending_id"].is_string() => {
                        inc(&shared.c.sent_pending)
                    }
                    Ok((status, body)) => shared.unexpected(format!(
                        "send → {status} {}",
                        body["error"]["type"].as_str().unwrap_or("?")
                    )),
                    // chatd is down (or was killed while answering).
                    Err(_) => inc(&shared.c.send_failed),
                }
            }
            continue;
        }
        let (what, ok, refused, ok_counter, refused_counter) = match roll {
            70..=81 => ("stop", 200, 409, &shared.c.stops, &shared.c.stops_idle),
            82..=93 => (
                "continue",
                202,
                409,
                &shared.c.continues,
                &shared.c.continues_refused,
            ),
            _ => (
                "send-now",
                202,
                409,
                &shared.c.send_now,
                &shared.c.send_now_refused,
            ),
        };
        let done = post_action(
            &shared,
            &chat,
            what,
            ok,
            refused,
            ok_counter,
            refused_counter,
        )
        .await;
        // Half the stopped answers are continued soon after, as a person would.
        if what == "stop" && done && rng.random_bool(0.5) {
            let pause = Duration::from_secs_f64(rng.random_range(0.1..1.5));
            if !sleep_in(&mut phase, pause, |p| p == Phase::Load).await {
                return;
            }
            let c = &shared.c;
            post_action(
                &shared,
                &chat,
                "continue",
                202,
                409,
                &c.continues,
                &c.continues_refused,
            )
            .await;
        }
    }
}

/// POSTs `/conversations/{chat}/{what}`; counts the answer; says whether it was `ok`.
async fn post_action(
    shared: &Shared,
    chat: &str,
    what: &str,
    ok: u16,
    refused: u16,
    ok_counter: &AtomicU64,
    refused_counter: &AtomicU64,
) -> bool {
    match shared
        .call(
            reqwest::Method::POST,
            &format!("/conversations/{chat}/{what}"),
            Some(json!({})),
        )
        .await
    {
        Ok((status, _)) if status == ok => {
            inc(ok_counter);
            return true;
        }
        Ok((status, _)) if status == refused => inc(refused_counter),
        Ok((status, body)) => shared.unexpected(format!(
            "{what} → {status} {}",
            body["error"]["type"].as_str().unwrap_or("?")
        )),
        Err(_) => inc(&shared.c.requests_failed),
    }
    false
}

// ---------------------------------------------------------------------------
// Devices: a raw SSE client each
// ---------------------------------------------------------------------------

/// A streamed response on a raw socket: chunked decoding, split into SSE frames.
struct Sse {
    sock: TcpStream,
    raw: Vec<u8>,
    body: Vec<u8>,
    chunked: bool,
    chunk_left: Option<usize>,
    ended: bool,
    buf: Box<[u8]>,
}

enum OpenError {
    /// No connection or no answer: chatd is down or starting.
    Down,
    /// An answer other than 200.
    Status(u16, String),
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

impl Sse {
    async fn open(
        port: u16,
        chat: &str,
        after: i64,
        by_query: bool,
        slow: bool,
    ) -> Result<Sse, OpenError> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let socket = tokio::net::TcpSocket::new_v4().map_err(|_| OpenError::Down)?;
        if slow {
            // A small receive window: the device really reads slowly, and
            // chatd's writes back up behind it.
            let _ = socket.set_recv_buffer_size(4096);
        }
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let sock = tokio::time::timeout_at(deadline, socket.connect(addr))
            .await
            .map_err(|_| OpenError::Down)?
            .map_err(|_| OpenError::Down)?;
        let _ = sock.set_nodelay(true);
        let (target, header) = if by_query {
            (
                format!("/v1/chat-app/conversations/{chat}/events?after={after}"),
                String::new(),
            )
        } else {
            (
                format!("/v1/chat-app/conversations/{chat}/events"),
                format!("Last-Event-ID: {after}\r\n"),
            )
        };
        let request = format!(
            "GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Forward-Key: {FORWARD_KEY}\r\n\
             Accept: text/event-stream\r\n{header}\r\n"
        );
        let mut s = Sse {
            sock,
            raw: Vec::new(),
            body: Vec::new(),
            chunked: false,
            chunk_left: None,
            ended: false,
            buf: vec![0u8; 16 * 1024].into_boxed_slice(),
        };
        tokio::time::timeout_at(deadline, s.sock.write_all(request.as_bytes()))
            .await
            .map_err(|_| OpenError::Down)?
            .map_err(|_| OpenError::Down)?;
        let head_end = loop {
            if let Some(end) = find(&s.raw, b"\r\n\r\n") {
                break end;
            }
            let n = tokio::time::timeout_at(deadline, s.sock.read(&mut s.buf))
                .await
                .map_err(|_| OpenError::Down)?
                .map_err(|_| OpenError::Down)?;
            if n == 0 {
                return Err(OpenError::Down);
            }
            s.raw.extend_from_slice(&s.buf[..n]);
        };
        let head = String::from_utf8_lossy(&s.raw[..head_end]).to_ascii_lowercase();
        s.chunked = head.contains("transfer-encoding: chunked");
        s.raw.drain(..head_end + 4);
        let status: u16 = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        if status != 200 {
            // Read the (small) error body, bounded.
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            let body_deadline = tokio::time::Instant::now() + Duration::from_secs(2);
            while s.raw.len() < length {
                match tokio::time::timeout_at(body_deadline, s.sock.read(&mut s.buf)).await {
                    Ok(Ok(n)) if n > 0 => s.raw.extend_from_slice(&s.buf[..n]),
                    _ => break,
                }
            }
            return Err(OpenError::Status(
                status,
                String::from_utf8_lossy(&s.raw).into_owned(),
            ));
        }
        s.decode();
        Ok(s)
    }

    /// Reads at most `max` bytes once; `false` at the end of the stream.
    /// Cancel-safe: nothing is lost if the read is dropped before it returns.
    async fn read(&mut self, max: usize) -> std::io::Result<bool> {
        if self.ended {
            return Ok(false);
        }
        let max = max.min(self.buf.len());
        let n = self.sock.read(&mut self.buf[..max]).await?;
        if n == 0 {
            self.ended = true;
            return Ok(false);
        }
        self.raw.extend_from_slice(&self.buf[..n]);
        self.decode();
        Ok(true)
    }

    fn decode(&mut self) {
        if !self.chunked {
            self.body.append(&mut self.raw);
            return;
        }
        if tandem_tests::chunked::decode(&mut self.raw, &mut self.body, &mut self.chunk_left) {
            self.ended = true;
        }
    }

    /// Every complete frame received so far (a frame cut by a dropped
    /// connection is never handed out).
    fn frames(&mut self) -> Vec<Vec<u8>> {
        let mut frames = Vec::new();
        let mut start = 0;
        while let Some(end) = find(&self.body[start..], b"\n\n") {
            frames.push(self.body[start..start + end].to_vec());
            start += end + 2;
        }
        self.body.drain(..start);
        frames
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// Stays attached (reconnecting only when chatd dies); measures latency.
    Steady,
    /// Attaches for a while, drops, comes back with its last seq.
    Roaming,
    /// Reads 512 bytes every 100 ms through a 4 KiB receive buffer.
    Slow,
}

struct Device {
    index: usize,
    chat: String,
    role: Role,
    /// The last seq this device applied (-1: no snapshot yet).
    last_seq: i64,
    need_snapshot: bool,
    /// Message id → the text this device rebuilt.
    texts: HashMap<String, String>,
    caught_up: bool,
    /// Seconds from the start of the catch-up until it had the final seq.
    caught_up_s: f64,
    connections: u64,
    resets: u64,
    /// Relay latencies (µs) of stamped tokens, steady devices only.
    latencies: Vec<i64>,
}

/// What the device does after a frame.
enum After {
    Go,
    /// A `reset`: reload the snapshot and reconnect from its seq.
    Reload,
}

/// Keeps the count of attached devices right however a connection ends.
struct Attached<'a>(&'a AtomicI64);

impl Drop for Attached<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Device {
    fn name(&self) -> String {
        format!(
            "device {} ({:?}, chat {})",
            self.index, self.role, self.chat
        )
    }

    async fn load_snapshot(&mut self, shared: &Shared) -> bool {
        let asked = Instant::now();
        let snapshot = match shared.snapshot(&self.chat).await {
            Ok(snapshot) => snapshot,
            Err(err) => {
                // Refused while chatd is down is expected; anything else is told.
                let refused = err
                    .downcast_ref::<reqwest::Error>()
                    .is_some_and(|e| e.is_connect());
                if !refused {
                    shared.unexpected(format!(
                        "snapshot failed after {:.1} s in {:?}: {err:#}",
                        asked.elapsed().as_secs_f64(),
                        shared.phase()
                    ));
                }
                return false;
            }
        };
        let Some(seq) = snapshot["seq"].as_i64() else {
            shared.unexpected("snapshot without seq".into());
            return false;
        };
        if seq < self.last_seq {
            shared.violate(
                Inv::Seqs,
                format!(
                    "{}: the snapshot has seq {seq}, but the device already saw {}",
                    self.name(),
                    self.last_seq
                ),
            );
        }
        self.texts = snapshot["messages"]
            .as_array()
            .map(|ms| {
                ms.iter()
                    .map(|m| {
                        (
                            m["id"].as_str().unwrap_or("").to_string(),
                            m["text"].as_str().unwrap_or("").to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        self.last_seq = seq;
        self.need_snapshot = false;
        inc(&shared.c.snapshots);
        true
    }

    /// Applies one frame; checks its seq as it comes.
    fn apply(&mut self, shared: &Shared, frame: &[u8], at: i64, measure: bool) -> After {
        let text = String::from_utf8_lossy(frame);
        let mut id: Option<i64> = None;
        let mut kind = "message";
        let mut data = String::new();
        for line in text.split('\n') {
            if let Some(v) = line.strip_prefix("id:") {
                id = v.trim().parse().ok();
            } else if let Some(v) = line.strip_prefix("event:") {
                kind = v.trim();
            } else if let Some(v) = line.strip_prefix("data:") {
                data.push_str(v.strip_prefix(' ').unwrap_or(v));
            }
        }
        if id.is_none() && data.is_empty() {
            return After::Go; // `: keepalive`
        }
        inc(&shared.c.events);
        if kind == "reset" {
            self.resets += 1;
            inc(&shared.c.resets);
            self.need_snapshot = true;
            return After::Reload;
        }
        let Some(seq) = id else {
            shared.violate(
                Inv::Seqs,
                format!("{}: a {kind} event without an id", self.name()),
            );
            return After::Go;
        };
        if seq != self.last_seq + 1 {
            shared.violate(
                Inv::Seqs,
                format!(
                    "{}: after seq {} came {seq} ({kind}): {}",
                    self.name(),
                    self.last_seq,
                    if seq <= self.last_seq {
                        "a repeat"
                    } else {
                        "a gap"
                    }
                ),
            );
            if seq <= self.last_seq {
                return After::Go; // not applied twice
            }
        }
        self.last_seq = seq;
        let data: Value = serde_json::from_str(&data).unwrap_or(Value::Null);
        match kind {
            "message.created" => {
                let m = &data["message"];
                let mid = m["id"].as_str().unwrap_or("").to_string();
                let stored = m["text"].as_str().unwrap_or("");
                match self.texts.get(&mid) {
                    Some(known) if known != stored => shared.violate(
                        Inv::Live,
                        format!(
                            "{}: message.created (seq {seq}) for {mid}, which it already knew with other text",
                            self.name()
                        ),
                    ),
                    Some(_) => {}
                    None => {
                        self.texts.insert(mid, stored.to_string());
                    }
                }
            }
            "text.delta" => {
                let mid = data["message_id"].as_str().unwrap_or("");
                let piece = data["text"].as_str().unwrap_or("");
                match self.texts.get_mut(mid) {
                    Some(t) => t.push_str(piece),
                    None => {
                        shared.violate(
                            Inv::Live,
                            format!(
                                "{}: text.delta (seq {seq}) for {mid}, a message it never saw created",
                                self.name()
                            ),
                        );
                        self.texts.insert(mid.to_string(), piece.to_string());
                    }
                }
                if measure {
                    if let Some(stamp) = stamp_of(piece) {
                        self.latencies.push(at - stamp);
                    }
                }
            }
            "message.updated" => {
                let m = &data["message"];
                let mid = m["id"].as_str().unwrap_or("");
                let stored = m["text"].as_str().unwrap_or("");
                match self.texts.get(mid) {
                    Some(known) if known == stored => {}
                    Some(known) => shared.violate(
                        Inv::Live,
                        format!(
                            "{}: message.updated (seq {seq}) for {mid}: {}",
                            self.name(),
                            difference(known, stored)
                        ),
                    ),
                    None => shared.violate(
                        Inv::Live,
                        format!(
                            "{}: message.updated (seq {seq}) for {mid}, a message it never saw created",
                            self.name()
                        ),
                    ),
                }
            }
            _ => {}
        }
        After::Go
    }

    fn open_failed(&mut self, shared: &Shared, error: OpenError) {
        inc(&shared.c.open_failed);
        if let OpenError::Status(status, body) = error {
            if status == 400 && body.contains("past the last event") {
                // Events this device saw are no longer in chatd's log.
                shared.violate(
                    Inv::Seqs,
                    format!(
                        "{}: at seq {} but chatd says that is past its last event: {}",
                        self.name(),
                        self.last_seq,
                        body.trim()
                    ),
                );
                self.need_snapshot = true;
            } else {
                shared.unexpected(format!("events → {status}"));
            }
        }
    }

    /// One connection's life: attach (after a snapshot if needed), read for
    /// a while, drop. `false` when it could not attach.
    async fn roam(
        &mut self,
        shared: &Shared,
        rng: &mut StdRng,
        phase: &mut watch::Receiver<Phase>,
    ) -> bool {
        if (self.need_snapshot || self.last_seq < 0) && !self.load_snapshot(shared).await {
            return false;
        }
        let slow = self.role == Role::Slow;
        let by_query = rng.random_bool(0.2);
        let mut sse =
            match Sse::open(shared.chatd_port, &self.chat, self.last_seq, by_query, slow).await {
                Ok(sse) => sse,
                Err(error) => {
                    self.open_failed(shared, error);
                    return false;
                }
            };
        self.connections += 1;
        inc(&shared.c.connections);
        shared.c.devices_up.fetch_add(1, Ordering::Relaxed);
        let _attached = Attached(&shared.c.devices_up);
        let hold = match self.role {
            Role::Steady => Duration::from_secs(24 * 3600),
            Role::Roaming => Duration::from_secs_f64(rng.random_range(1.0..20.0)),
            Role::Slow => Duration::from_secs_f64(rng.random_range(10.0..40.0)),
        };
        let deadline = tokio::time::Instant::now() + hold;
        loop {
            // Frames first: the first ones may have come with the headers.
            let at = now_micros();
            let measure = self.role == Role::Steady && live(shared.phase());
            for frame in sse.frames() {
                if let After::Reload = self.apply(shared, &frame, at, measure) {
                    return true;
                }
            }
            if slow {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let max = if slow { 512 } else { usize::MAX };
            tokio::select! {
                read = sse.read(max) => {
                    if !matches!(read, Ok(true)) {
                        return true;
                    }
                }
                _ = tokio::time::sleep_until(deadline) => return true,
                changed = phase.changed() => {
                    if changed.is_err() || !live(*phase.borrow()) {
                        return true;
                    }
                }
            }
        }
    }

    /// Reads until the device has the chat's final seq (or the phase ends).
    async fn catch_up(&mut self, shared: &Shared, phase: &mut watch::Receiver<Phase>) {
        let Some(target) = lock(&shared.targets).get(&self.chat).copied() else {
            return;
        };
        let started = Instant::now();
        let mut failures = 0u32;
        while *phase.borrow() == Phase::CatchUp {
            if (self.need_snapshot || self.last_seq < 0) && !self.load_snapshot(shared).await {
                failures += 1;
                tokio::time::sleep(backoff(failures)).await;
                continue;
            }
            if self.last_seq >= target {
                self.caught_up = true;
                self.caught_up_s = started.elapsed().as_secs_f64();
                return;
            }
            let mut sse =
                match Sse::open(shared.chatd_port, &self.chat, self.last_seq, false, false).await {
                    Ok(sse) => sse,
                    Err(error) => {
                        self.open_failed(shared, error);
                        failures += 1;
                        tokio::time::sleep(backoff(failures)).await;
                        continue;
                    }
                };
            self.connections += 1;
            inc(&shared.c.connections);
            'read: loop {
                for frame in sse.frames() {
                    if let After::Reload = self.apply(shared, &frame, now_micros(), false) {
                        break 'read;
                    }
                }
                if self.last_seq >= target {
                    break 'read;
                }
                tokio::select! {
                    read = sse.read(usize::MAX) => {
                        if !matches!(read, Ok(true)) {
                            break 'read;
                        }
                    }
                    changed = phase.changed() => {
                        if changed.is_err() || *phase.borrow() != Phase::CatchUp {
                            return;
                        }
                    }
                }
            }
        }
    }

    /// Every stored message: known to the device, with the same text.
    fn compare(&self, shared: &Shared, snapshot: &Value) {
        if !self.caught_up {
            shared.violate(
                Inv::Text,
                format!(
                    "{}: did not catch up to seq {} (stopped at {})",
                    self.name(),
                    snapshot["seq"],
                    self.last_seq
                ),
            );
            return;
        }
        for m in snapshot["messages"].as_array().into_iter().flatten() {
            let mid = m["id"].as_str().unwrap_or("");
            let stored = m["text"].as_str().unwrap_or("");
            match self.texts.get(mid) {
                None => shared.violate(
                    Inv::Text,
                    format!("{}: never saw message {mid} ({})", self.name(), m["role"]),
                ),
                Some(text) if text != stored => shared.violate(
                    Inv::Text,
                    format!(
                        "{}: message {mid} ({}, {}): {}",
                        self.name(),
                        m["role"],
                        m["status"],
                        difference(text, stored)
                    ),
                ),
                Some(_) => {}
            }
        }
    }
}

/// A short view of a text for a report: its length and both ends.
fn excerpt(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= 60 {
        return format!("{text:?} ({} chars)", chars.len());
    }
    let head: String = chars[..28].iter().collect();
    let tail: String = chars[chars.len() - 28..].iter().collect();
    format!("{head:?}…{tail:?} ({} chars)", chars.len())
}

/// Where two texts part: the first differing character, with a little of
/// both around it.
fn difference(rebuilt: &str, stored: &str) -> String {
    let a: Vec<char> = rebuilt.chars().collect();
    let b: Vec<char> = stored.chars().collect();
    let at = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let around = |v: &[char]| -> String {
        let from = at.saturating_sub(20);
        let to = (at + 20).min(v.len());
        v[from..to].iter().collect()
    };
    format!(
        "they part at char {at} of {} / {}: rebuilt …{:?}… stored …{:?}…",
        a.len(),
        b.len(),
        around(&a),
        around(&b)
    )
}

/// The engine's stamp in a token `w{i}:{unix µs} `.
fn stamp_of(piece: &str) -> Option<i64> {
    let (_, stamp) = piece.trim().split_once(':')?;
    stamp.parse().ok()
}

fn backoff(failures: u32) -> Duration {
    Duration::from_millis((100u64 << failures.min(5)).min(2_000))
}

async fn run_device(shared: Arc<Shared>, mut device: Device, seed: u64) -> Device {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut phase = shared.phase.subscribe();
    // The first attaches spread over three seconds.
    let first = Duration::from_millis(rng.random_range(0..3_000));
    sleep_in(&mut phase, first, live).await;
    let mut failures = 0u32;
    loop {
        let now = *phase.borrow_and_update();
        match now {
            Phase::Load | Phase::Drain => {
                let attached = device.roam(&shared, &mut rng, &mut phase).await;
                let off = if attached {
                    failures = 0;
                    match device.role {
                        Role::Steady => Duration::ZERO,
                        Role::Roaming => Duration::from_secs_f64(rng.random_range(0.1..4.0)),
                        Role::Slow => Duration::from_secs_f64(rng.random_range(0.5..3.0)),
                    }
                } else {
                    failures += 1;
                    // Jittered, so 500 devices do not come back in one wave.
                    backoff(failures).mul_f64(rng.random_range(0.5..1.5))
                };
                sleep_in(&mut phase, off, live).await;
            }
            Phase::CatchUp => {
                device.catch_up(&shared, &mut phase).await;
                return device;
            }
            Phase::Done => return device,
        }
    }
}

// ---------------------------------------------------------------------------
// Faults: chatd kills, engine outages
// ---------------------------------------------------------------------------

/// Times (s from the start) of a Poisson process with `mean` inside
/// `[from, to]`; `forced` when none falls there.
fn schedule(rng: &mut StdRng, mean: f64, from: f64, to: f64, forced: f64) -> Vec<f64> {
    let mut times = Vec::new();
    if to > from {
        let mut t = from + exponential(rng, mean);
        while t < to {
            times.push(t);
            t += exponential(rng, mean);
        }
    }
    if times.is_empty() {
        times.push(forced);
    }
    times
}

async fn killer(
    shared: Arc<Shared>,
    chatd: Arc<tokio::sync::Mutex<Chatd>>,
    times: Vec<f64>,
    kills: Arc<Mutex<Vec<(f64, f64)>>>,
    warm_s: f64,
) {
    let mut phase = shared.phase.subscribe();
    for at in times {
        let wait = Duration::from_secs_f64((at - shared.t()).max(0.0));
        if !sleep_in(&mut phase, wait, |p| p == Phase::Load).await {
            break;
        }
        let mut chatd = chatd.lock().await;
        let killed_at = shared.t();
        shared.fault("chatd SIGKILL + restart");
        let mut back = None;
        for _ in 0..3 {
            match chatd.restart().await {
                Ok(()) => {
                    back = Some(shared.t());
                    break;
                }
                Err(err) => say(format!("soak: chatd did not come back: {err:#}")),
            }
        }
        let Some(back) = back else {
            shared.violate(
                Inv::Health,
                format!("chatd did not come back after the kill at {killed_at:.1} s"),
            );
            shared.abort.store(true, Ordering::Relaxed);
            return;
        };
        let pid = chatd.pid().unwrap_or(0);
        shared.pid.store(pid, Ordering::Relaxed);
        lock(&shared.generations).push(Generation { pid, started: back });
        lock(&kills).push((killed_at, back - killed_at));
        say(format!(
            "  t={killed_at:6.1}s  chatd SIGKILLed; back as pid {pid} in {:.2} s",
            back - killed_at
        ));
        // A second chatd on the same data (a careless restart, a unit and a
        // terminal at once) must go at once, naming the one that runs.
        shared.fault("second chatd on the same data");
        match chatd.run_second(Duration::from_secs(10)).await {
            Ok(second)
                if !second.status.success() && second.stderr.contains(&format!("(pid {pid})")) => {}
            Ok(second) => shared.violate(
                Inv::Health,
                format!(
                    "a second chatd on the data of pid {pid} ended {} saying {}",
                    second.status,
                    excerpt(&second.stderr)
                ),
            ),
            Err(err) => shared.violate(
                Inv::Health,
                format!("a second chatd on the data of pid {pid}: {err:#}"),
            ),
        }
        drop(chatd);
        // The answers the kill interrupted: continue them (the others refuse).
        let c = &shared.c;
        for chat in &shared.chats {
            post_action(
                &shared,
                chat,
                "continue",
                202,
                409,
                &c.continues,
                &c.continues_refused,
            )
            .await;
        }
    }
    warm_up(&shared, warm_s).await;
}

/// Warms up the chatd that will be measured at the end (the last one
/// started): every chat gets a long answer, so that every chat's ring of
/// recent events fills, then RSS is sampled once the rings are full and
/// `warm_s` has passed since the start. Before that, RSS grows with the
/// rings (bounded, ~0.5 KiB an event) and says nothing about a leak.
async fn warm_up(shared: &Shared, warm_s: f64) {
    let Some(generation) = lock(&shared.generations).last().cloned() else {
        return;
    };
    let mut phase = shared.phase.subscribe();
    let keep = |p: Phase| matches!(p, Phase::Load | Phase::Drain);
    let mut from: HashMap<&str, i64> = HashMap::new();
    let mut asked: HashMap<&str, Instant> = HashMap::new();
    let mut filled_at = None;
    let mut round = 0u64;
    lock(&shared.filling).extend(shared.chats.iter().cloned());
    while keep(*phase.borrow()) {
        round += 1;
        let mut left = 0;
        for (i, chat) in shared.chats.iter().enumerate() {
            let Ok(snapshot) = shared.snapshot(chat).await else {
                left += 1;
                continue;
            };
            let seq = snapshot["seq"].as_i64().unwrap_or(0);
            let start = *from.entry(chat.as_str()).or_insert(seq);
            if seq >= start + shared.fill {
                lock(&shared.filling).remove(chat);
                continue;
            }
            left += 1;
            // Never asked, or idle again short of the mark (the answer
            // failed, or went to a message that waited with it): ask again.
            let idle = snapshot["conversation"]["state"] == "idle";
            // (During the drain too: the warm-up is the measurement's, not load.)
            let due = live(shared.phase())
                && asked
                    .get(chat.as_str())
                    .is_none_or(|at| idle && at.elapsed() > Duration::from_secs(3));
            if due {
                let text = format!(
                    "fill the ring [sim tokens={} tps=0 id=fill-{}-{i}-{round}]",
                    shared.fill, generation.pid
                );
                let sent = shared
                    .call(
                        reqwest::Method::POST,
                        &format!("/conversations/{chat}/messages"),
                        Some(json!({ "text": text })),
                    )
                    .await;
                if matches!(sent, Ok((202, _))) {
                    asked.insert(chat.as_str(), Instant::now());
                    shared.fault("warm-up: a long answer per chat (fills its ring)");
                }
            }
        }
        if left == 0 && filled_at.is_none() {
            filled_at = Some(shared.t());
        }
        if let Some(filled) = filled_at {
            if shared.t() >= generation.started + warm_s {
                // Let the burst's deliveries settle, then sample.
                sleep_in(&mut phase, Duration::from_secs(2), keep).await;
                if let Some(kib) = rss_kib(generation.pid) {
                    let t = shared.t();
                    say(format!(
                        "  t={t:6.1}s  chatd pid {} warmed up (rings full {:.1} s after its start): RSS {}",
                        generation.pid,
                        filled - generation.started,
                        mib(kib)
                    ));
                    *lock(&shared.warm) = Some(Warm {
                        pid: generation.pid,
                        t,
                        kib,
                        filled_s: filled - generation.started,
                    });
                }
                break;
            }
        }
        sleep_in(&mut phase, Duration::from_secs(1), keep).await;
    }
    lock(&shared.filling).clear();
}

async fn refuser(
    shared: Arc<Shared>,
    times: Vec<f64>,
    seed: u64,
    outages: Arc<Mutex<Vec<(f64, f64)>>>,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut phase = shared.phase.subscribe();
    for at in times {
        let wait = Duration::from_secs_f64((at - shared.t()).max(0.0));
        if !sleep_in(&mut phase, wait, |p| p == Phase::Load).await {
            return;
        }
        let seconds: f64 = (rng.random_range(1.0..20.0) * 10.0f64).round() / 10.0;
        let sent = shared
            .http
            .post(format!("{}/sim/refuse", shared.sim_url))
            .json(&json!({ "seconds": seconds }))
            .timeout(Duration::from_secs(5))
            .send()
            .await;
        match sent {
            Ok(r) if r.status().is_success() => {
                shared.fault("engine refused connections (/sim/refuse)");
                let t = shared.t();
                lock(&outages).push((t, seconds));
                say(format!(
                    "  t={t:6.1}s  engine refuses connections for {seconds:.1} s"
                ));
            }
            // Still refusing from the last outage: this one is skipped.
            _ => shared.fault("engine outage skipped (the engine was refusing already)"),
        }
    }
}

async fn sample_rss(shared: Arc<Shared>, every: Duration) {
    let mut phase = shared.phase.subscribe();
    loop {
        let pid = shared.pid.load(Ordering::Relaxed);
        if let Some(kib) = rss_kib(pid) {
            lock(&shared.rss).push(RssSample {
                t: shared.t(),
                pid,
                kib,
            });
        }
        if !sleep_in(&mut phase, every, |p| p != Phase::Done).await {
            return;
        }
    }
}

async fn progress(shared: Arc<Shared>, every: Duration) {
    let mut phase = shared.phase.subscribe();
    loop {
        if !sleep_in(&mut phase, every, live).await {
            return;
        }
        let c = &shared.c;
        let rss = rss_kib(shared.pid.load(Ordering::Relaxed))
            .map(mib)
            .unwrap_or_else(|| "-".into());
        say(format!(
            "  t={:6.1}s  {:?}: sent {} (+{} pending), events seen {}, devices attached {}, resets {}, chatd RSS {rss}",
            shared.t(),
            shared.phase(),
            get(&c.sent_run),
            get(&c.sent_pending),
            get(&c.events),
            c.devices_up.load(Ordering::Relaxed),
            get(&c.resets),
        ));
    }
}

// ---------------------------------------------------------------------------
// The end: checks
// ---------------------------------------------------------------------------

/// Every stored answer is `w0 w1 … w{k-1} ` (stamped tokens `w{i}:{µs} `):
/// none lost, none doubled; a `done` one has all the tokens its question asked for.
fn check_answers(shared: &Shared, chat: &str, snapshot: &Value) -> (u64, u64) {
    let messages = snapshot["messages"].as_array().cloned().unwrap_or_default();
    let by_id: HashMap<&str, &Value> = messages
        .iter()
        .filter_map(|m| Some((m["id"].as_str()?, m)))
        .collect();
    let (mut answers, mut whole) = (0, 0);
    for m in &messages {
        if m["role"] != "assistant" {
            continue;
        }
        answers += 1;
        let text = m["text"].as_str().unwrap_or("");
        let mid = m["id"].as_str().unwrap_or("");
        let count = match answer_tokens(text) {
            Ok(count) => count,
            Err(why) => {
                shared.violate(
                    Inv::Answers,
                    format!("chat {chat}, answer {mid}: {why}: {}", excerpt(text)),
                );
                continue;
            }
        };
        if m["status"] != "done" {
            continue;
        }
        let asked = m["parent_id"]
            .as_str()
            .and_then(|p| by_id.get(p))
            .filter(|q| q["role"] == "user")
            .and_then(|q| q["text"].as_str())
            .and_then(|q| {
                let cue = &q[q.find("[sim ")?..];
                let n = &cue[cue.find("tokens=")? + 7..];
                n[..n.find(' ')?].parse::<usize>().ok()
            });
        match asked {
            Some(n) if n == count => whole += 1,
            Some(n) => shared.violate(
                Inv::Answers,
                format!(
                    "chat {chat}, answer {mid} is done with {count} of the {n} tokens asked for"
                ),
            ),
            None => {}
        }
    }
    (answers, whole)
}

/// The number of tokens of an answer `w0 w1 … w{k-1} ` (or stamped
/// `w{i}:{µs} `), or what is wrong with it.
fn answer_tokens(text: &str) -> Result<usize, String> {
    let mut count = 0;
    for (i, token) in text.split(' ').filter(|t| !t.is_empty()).enumerate() {
        let index = token
            .strip_prefix('w')
            .map(|t| t.split_once(':').map_or(t, |(d, _)| d))
            .and_then(|d| d.parse::<usize>().ok());
        if index != Some(i) {
            return Err(format!("token {i} is {token:?}"));
        }
        count += 1;
    }
    if !text.is_empty() && !text.ends_with(' ') {
        return Err("the last token is cut".into());
    }
    Ok(count)
}

/// An `ERROR` line names what it is about; one without an id is a bug report nobody can follow.
fn error_without_id(line: &str) -> bool {
    let is_error = line.split_whitespace().take(3).any(|w| w == "ERROR");
    const IDS: &[&str] = &[
        "run=",
        "conversation=",
        "message=",
        "chat=",
        "run_id=",
        "conversation_id=",
        "message_id=",
        "card=",
        "call=",
    ];
    is_error && !IDS.iter().any(|id| line.contains(id))
}

fn quantile(sorted: &[i64], q: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn main() {
    let args = Args::parse();
    // No libtest here to hide the logs of daemons that did well.
    tandem_tests::daemon::logs_only_on_panic();
    // Before any thread or child exists, so chatd and engine-sim inherit it.
    let nofile = raise_nofile(16_384);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(err) => {
            eprintln!("soak: {err}");
            std::process::exit(2);
        }
    };
    let code = match runtime.block_on(soak(args, nofile)) {
        Ok(0) => 0,
        Ok(_) => 1,
        Err(err) => {
            eprintln!("soak: {err:#}");
            say("soak: could not run (see above)");
            2
        }
    };
    // Device tasks may still hold sockets; the children are stopped already.
    runtime.shutdown_timeout(Duration::from_secs(2));
    std::process::exit(code);
}

/// Runs the soak; returns how many invariants broke.
async fn soak(args: Args, nofile: u64) -> anyhow::Result<usize> {
    anyhow::ensure!(args.chats >= 1, "--chats must be at least 1");
    anyhow::ensure!(args.devices >= 1, "--devices must be at least 1");
    let seed = args.seed.unwrap_or_else(|| now_micros() as u64);
    let mut rng = StdRng::seed_from_u64(seed);
    let duration = args.duration.as_secs_f64();
    // Warm-up: ~10 % of the run (5..60 s), after the start and after each restart.
    let warm = (duration * 0.1).clamp(5.0, 60.0);
    let run_started = Instant::now();
    say(format!(
        "soak: {} for {:.0} s: {} chats, {} devices, QSE_CHAT_MAX_RUNS=2, seed {seed} \
         ({} cores, RLIMIT_NOFILE {nofile})",
        env!("CARGO_PKG_VERSION"),
        duration,
        args.chats,
        args.devices,
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
    ));

    let sim = Sim::start(&[
        "--tokens-per-second",
        "100",
        // Long chats must not hit the context window: that is another test.
        "--context-window",
        "100000000",
    ])?;
    let chatd = Chatd::start(&sim.url(), &[("QSE_CHAT_MAX_RUNS", "2")]).await?;
    let chatd_url = chatd.url();
    let chatd_port = chatd.port;
    let log_path = chatd.log_path();
    let db_path = chatd.data_dir().join("chat.sqlite3");
    let first_pid = chatd.pid().context("chatd's pid")?;
    let chatd = Arc::new(tokio::sync::Mutex::new(chatd));
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()?;

    let (phase, _) = watch::channel(Phase::Load);
    let mut shared = Shared {
        t0: Instant::now(),
        http,
        chatd_url,
        chatd_port,
        sim_url: sim.url(),
        chats: Vec::new(),
        phase,
        targets: Mutex::new(HashMap::new()),
        c: Counters::default(),
        faults: Mutex::new(BTreeMap::new()),
        broken: Mutex::new(BTreeMap::new()),
        unexpected: Mutex::new(BTreeMap::new()),
        generations: Mutex::new(vec![Generation {
            pid: first_pid,
            started: 0.0,
        }]),
        pid: AtomicU32::new(first_pid),
        rss: Mutex::new(Vec::new()),
        abort: AtomicBool::new(false),
        fill: 0,
        warm: Mutex::new(None),
        filling: Mutex::new(std::collections::HashSet::new()),
    };
    // The ring of recent events per chat holds a little more than the reset distance.
    let (status, capabilities) = shared
        .call(reqwest::Method::GET, "/capabilities", None)
        .await?;
    anyhow::ensure!(status == 200, "capabilities answered {status}");
    shared.fill = capabilities["limits"]["sse_reset_after"]
        .as_i64()
        .context("limits.sse_reset_after in the capabilities")?
        + 200;
    for i in 0..args.chats {
        let (status, body) = shared
            .call(
                reqwest::Method::POST,
                "/conversations",
                Some(json!({ "title": format!("soak {i}") })),
            )
            .await?;
        anyhow::ensure!(status == 201, "creating a chat answered {status}: {body}");
        shared
            .chats
            .push(body["id"].as_str().context("conversation id")?.to_string());
    }
    shared.t0 = Instant::now();
    let shared = Arc::new(shared);
    say(format!(
        "soak: chatd {} (pid {first_pid}), engine-sim {}; warm-up {warm:.0} s",
        shared.chatd_url, shared.sim_url
    ));

    // Faults on a schedule. Kills stay clear of the first warm-up and of the
    // last quarter of the run (at least twice the warm-up), so the chatd
    // measured at the end warms up under load and then runs on a while.
    let kill_to = duration - (0.25 * duration).max(2.0 * warm).max(15.0);
    let forced_kill = duration * rng.random_range(0.25..0.5);
    let kill_times = schedule(
        &mut rng,
        args.kill_every.as_secs_f64(),
        warm + 2.0,
        kill_to,
        forced_kill,
    );
    let forced_outage = duration * rng.random_range(0.1..0.5);
    let refuse_times = schedule(
        &mut rng,
        args.refuse_every.as_secs_f64(),
        2.0,
        duration - 25.0,
        forced_outage,
    );
    let kills = Arc::new(Mutex::new(Vec::new()));
    let outages = Arc::new(Mutex::new(Vec::new()));
    let sample_every = Duration::from_secs_f64((duration / 30.0).clamp(1.0, 10.0));
    let killer = tokio::spawn(killer(
        shared.clone(),
        chatd.clone(),
        kill_times,
        kills.clone(),
        warm,
    ));
    let mut background = vec![
        tokio::spawn(refuser(
            shared.clone(),
            refuse_times,
            rng.random(),
            outages.clone(),
        )),
        tokio::spawn(sample_rss(shared.clone(), sample_every)),
        tokio::spawn(progress(
            shared.clone(),
            Duration::from_secs_f64((duration / 6.0).clamp(10.0, 60.0)),
        )),
    ];
    let drivers: Vec<_> = (0..args.chats)
        .map(|i| tokio::spawn(drive_chat(shared.clone(), i, rng.random())))
        .collect();
    let chats = args.chats;
    let slow_every = 90;
    let devices: Vec<_> = (0..args.devices)
        .map(|i| {
            let role = if i < chats {
                Role::Steady
            } else if (i - chats).is_multiple_of(slow_every) {
                Role::Slow
            } else {
                Role::Roaming
            };
            if role == Role::Slow {
                shared.fault("slow-reading device");
            }
            let device = Device {
                index: i,
                chat: shared.chats[i % chats].clone(),
                role,
                last_seq: -1,
                need_snapshot: true,
                texts: HashMap::new(),
                caught_up: false,
                caught_up_s: 0.0,
                connections: 0,
                resets: 0,
                latencies: Vec::new(),
            };
            tokio::spawn(run_device(shared.clone(), device, rng.random()))
        })
        .collect();
    let steady = args.devices.min(chats);
    let slow = (0..args.devices)
        .filter(|i| *i >= chats && (i - chats).is_multiple_of(slow_every))
        .count();

    // Load.
    let load_end = tokio::time::Instant::now() + args.duration;
    while tokio::time::Instant::now() < load_end && !shared.abort.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(200).min(load_end - tokio::time::Instant::now()))
            .await;
    }
    let load_s = shared.t();
    shared.phase.send_replace(Phase::Drain);
    say(format!("  t={load_s:6.1}s  load ends; draining"));
    for driver in drivers {
        let _ = tokio::time::timeout(Duration::from_secs(30), driver).await;
    }
    // A restart in progress finishes before the drain is judged.
    let _ = tokio::time::timeout(Duration::from_secs(60), chatd.lock()).await;

    // Drain: every run ends, bounded (60 s, plus the engine's longest
    // outage and chatd's longest retry wait).
    let drain_bound = Duration::from_secs(60 + 20 + 30);
    let drain_started = Instant::now();
    let mut last_active: Vec<String> = Vec::new();
    let mut drained = false;
    while drain_started.elapsed() < drain_bound {
        let mut active = Vec::new();
        let mut complete = true;
        for chat in &shared.chats {
            match shared.snapshot(chat).await {
                Ok(s) => {
                    for run in s["runs"].as_array().into_iter().flatten() {
                        let status = run["status"].as_str().unwrap_or("?");
                        if !matches!(status, "done" | "stopped" | "failed" | "interrupted") {
                            active.push(format!("chat {chat}: run {} is {status}", run["id"]));
                        }
                    }
                }
                Err(_) => complete = false,
            }
        }
        if complete && active.is_empty() {
            drained = true;
            break;
        }
        last_active = active;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let drain_s = drain_started.elapsed().as_secs_f64();
    if !drained {
        for what in &last_active {
            shared.violate(
                Inv::Runs,
                format!("{what} {drain_bound:?} after the load ended"),
            );
        }
        if last_active.is_empty() {
            shared.violate(
                Inv::Runs,
                "the snapshots could not be read to the end of the drain".into(),
            );
        }
    }
    say(format!(
        "  t={:6.1}s  drain {}: {drain_s:.1} s",
        shared.t(),
        if drained { "done" } else { "TIMED OUT" }
    ));

    // The warm-up of the chatd measured at the end may still be sampling.
    if tokio::time::timeout(Duration::from_secs(30), killer)
        .await
        .is_err()
    {
        say("  the warm-up did not end within 30 s of the drain");
    }

    // The final state, then every device catches up to it.
    let mut finals: HashMap<String, Value> = HashMap::new();
    for chat in &shared.chats {
        let snapshot = tandem_tests::harness::wait_until(
            "a final snapshot",
            Duration::from_secs(20),
            || async { shared.snapshot(chat).await.ok() },
        )
        .await?;
        lock(&shared.targets).insert(chat.clone(), snapshot["seq"].as_i64().unwrap_or(0));
        finals.insert(chat.clone(), snapshot);
    }
    let rss_drained = rss_kib(shared.pid.load(Ordering::Relaxed));
    shared.phase.send_replace(Phase::CatchUp);
    let catch_started = Instant::now();
    let mut joined = futures_util::future::join_all(devices);
    let devices: Vec<Device> =
        match tokio::time::timeout(Duration::from_secs(60), &mut joined).await {
            Ok(done) => done.into_iter().filter_map(Result::ok).collect(),
            Err(_) => {
                shared.phase.send_replace(Phase::Done);
                tokio::time::timeout(Duration::from_secs(15), joined)
                    .await
                    .map(|done| done.into_iter().filter_map(Result::ok).collect())
                    .unwrap_or_default()
            }
        };
    let catch_s = catch_started.elapsed().as_secs_f64();
    shared.phase.send_replace(Phase::Done);
    let end_pid = shared.pid.load(Ordering::Relaxed);
    let rss_end = rss_kib(end_pid);
    let end_t = shared.t();
    if let Some(kib) = rss_end {
        lock(&shared.rss).push(RssSample {
            t: end_t,
            pid: end_pid,
            kib,
        });
    }
    for task in background.drain(..) {
        task.abort();
    }

    // Invariant 1 and the answers.
    if devices.len() < args.devices {
        shared.violate(
            Inv::Text,
            format!(
                "only {} of {} devices handed in their state",
                devices.len(),
                args.devices
            ),
        );
    }
    for device in &devices {
        if let Some(snapshot) = finals.get(&device.chat) {
            device.compare(&shared, snapshot);
        }
    }
    let (mut answers, mut whole) = (0, 0);
    let mut runs_by_status: BTreeMap<String, u64> = BTreeMap::new();
    let mut events_written = 0i64;
    let mut waiting_left = 0usize;
    for (chat, snapshot) in &finals {
        let (a, w) = check_answers(&shared, chat, snapshot);
        answers += a;
        whole += w;
        for run in snapshot["runs"].as_array().into_iter().flatten() {
            *runs_by_status
                .entry(run["status"].as_str().unwrap_or("?").to_string())
                .or_default() += 1;
        }
        events_written += snapshot["seq"].as_i64().unwrap_or(0);
        waiting_left += snapshot["pending"].as_array().map_or(0, Vec::len);
    }

    // The engine's own count of the faults it played.
    let sim_stats: Value = match shared
        .http
        .get(format!("{}/sim/stats", shared.sim_url))
        .timeout(Duration::from_secs(5))
        .send()
        .await
    {
        Ok(r) => r.json().await.unwrap_or(Value::Null),
        Err(_) => Value::Null,
    };

    // Stop chatd, then its log and its database.
    let stopped = {
        let mut chatd = chatd.lock().await;
        chatd.sigterm(Duration::from_secs(15))
    };
    match &stopped {
        Ok((_, status)) if status.success() => {}
        Ok((took, status)) => shared.violate(
            Inv::Health,
            format!("chatd exited {status} after SIGTERM ({took:?})"),
        ),
        Err(err) => shared.violate(Inv::Health, format!("chatd did not stop: {err:#}")),
    }
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    let mut warnings: BTreeMap<String, u64> = BTreeMap::new();
    for line in log.lines() {
        if line.contains("panicked at") {
            shared.violate(Inv::Health, format!("a panic: {line}"));
        }
        if error_without_id(line) {
            shared.violate(Inv::Health, format!("an ERROR line without an id: {line}"));
        }
        if line.split_whitespace().take(3).any(|w| w == "WARN") {
            // The message: after the target, before the fields.
            let message = line
                .split_once(": ")
                .map(|(_, rest)| rest)
                .unwrap_or(line)
                .split(" run=")
                .next()
                .unwrap_or("")
                .to_string();
            *warnings.entry(message).or_default() += 1;
        }
    }
    let integrity =
        rusqlite::Connection::open_with_flags(&db_path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .and_then(|db| {
                let mut stmt = db.prepare("PRAGMA integrity_check")?;
                let rows = stmt
                    .query_map([], |r| r.get::<_, String>(0))?
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(rows)
            });
    match &integrity {
        Ok(rows) if rows.len() == 1 && rows[0] == "ok" => {}
        Ok(rows) => shared.violate(Inv::Integrity, format!("integrity_check: {rows:?}")),
        Err(err) => shared.violate(Inv::Integrity, format!("could not check: {err}")),
    }

    // RSS: the process alive at the end, against its own warm-up.
    let generations = lock(&shared.generations).clone();
    let samples = std::mem::take(&mut *lock(&shared.rss));
    let current = generations
        .iter()
        .rev()
        .find(|g| g.pid == end_pid)
        .cloned()
        .unwrap_or(Generation {
            pid: end_pid,
            started: 0.0,
        });
    let which = if generations.len() > 1 {
        format!(
            "pid {} (started at {:.1} s, after kill #{})",
            current.pid,
            current.started,
            generations.len() - 1
        )
    } else {
        format!("pid {} (the only chatd of the run)", current.pid)
    };
    let warmed = lock(&shared.warm).clone().filter(|w| w.pid == current.pid);
    let rss_line = match (warmed, rss_end) {
        (Some(w), Some(end)) => {
            let change = (end as f64 - w.kib as f64) / w.kib as f64 * 100.0;
            let verdict = format!(
                "chatd {which}: after warm-up (t={:.1} s: its rings full {:.1} s after its start, \
                 at least {warm:.0} s) {}, at the end (t={end_t:.1} s, after drain and catch-up) {} ({change:+.1} %)",
                w.t,
                w.filled_s,
                mib(w.kib),
                mib(end)
            );
            if change.abs() > 20.0 {
                shared.violate(Inv::Rss, verdict.clone());
            }
            verdict
        }
        _ => {
            let verdict = format!(
                "chatd {which}: its warm-up (every chat +{} events, at least {warm:.0} s) did not end before the drain did (end sample: {:?})",
                shared.fill,
                rss_end.map(mib)
            );
            shared.violate(Inv::Rss, verdict.clone());
            verdict
        }
    };

    // The summary.
    let c = &shared.c;
    let mut s = String::new();
    let total_s = run_started.elapsed().as_secs_f64();
    let _ = writeln!(s, "\n== soak summary (seed {seed}) ==");
    let _ = writeln!(
        s,
        "time: load {load_s:.1} s, drain {drain_s:.1} s, catch-up {catch_s:.1} s; whole run {total_s:.1} s"
    );
    let _ = writeln!(
        s,
        "messages: {} sent ({} started a run, {} waited as pending; {} failed while chatd was down); \
         {} stops ({} found no run), {} continues ({} refused), {} send-now ({} refused); \
         {} other requests failed while chatd was down; {} still waiting at the end",
        get(&c.sent_run) + get(&c.sent_pending),
        get(&c.sent_run),
        get(&c.sent_pending),
        get(&c.send_failed),
        get(&c.stops),
        get(&c.stops_idle),
        get(&c.continues),
        get(&c.continues_refused),
        get(&c.send_now),
        get(&c.send_now_refused),
        get(&c.requests_failed),
        waiting_left,
    );
    let runs_total: u64 = runs_by_status.values().sum();
    let _ = writeln!(
        s,
        "runs: {runs_total} ({}); answers stored {answers}, {whole} of them done and checked whole",
        runs_by_status
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let busy_s = (load_s + drain_s).max(0.001);
    let _ = writeln!(
        s,
        "events: {events_written} written ({:.0}/s over load+drain), {} delivered to devices ({:.0}/s); {} resets",
        events_written as f64 / busy_s,
        get(&c.events),
        get(&c.events) as f64 / (busy_s + catch_s),
        get(&c.resets),
    );
    let _ = writeln!(
        s,
        "devices: {} ({steady} steady, {slow} slow, {} roaming); {} connections, {} refused or failed to open, {} snapshots loaded",
        args.devices,
        args.devices - steady - slow,
        get(&c.connections),
        get(&c.open_failed),
        get(&c.snapshots),
    );
    let mut catch: Vec<(f64, String)> = devices
        .iter()
        .filter(|d| d.caught_up)
        .map(|d| (d.caught_up_s, d.name()))
        .collect();
    catch.sort_by(|a, b| a.0.total_cmp(&b.0));
    if let Some((slowest, name)) = catch.last() {
        let _ = writeln!(
            s,
            "catch-up: {} of {} devices had the final seq; median {:.2} s, slowest {slowest:.2} s ({name})",
            catch.len(),
            devices.len(),
            catch[catch.len() / 2].0
        );
    }
    let _ = writeln!(s, "faults injected:");
    for (kind, n) in lock(&shared.faults).iter() {
        let _ = writeln!(s, "  {n:5}  {kind}");
    }
    let kills = lock(&kills).clone();
    if !kills.is_empty() {
        let _ = writeln!(
            s,
            "  chatd kills at {} s (back within {})",
            kills
                .iter()
                .map(|(t, _)| format!("{t:.1}"))
                .collect::<Vec<_>>()
                .join(", "),
            kills
                .iter()
                .map(|(_, d)| format!("{d:.2} s"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let outages = lock(&outages).clone();
    if !outages.is_empty() {
        let _ = writeln!(
            s,
            "  engine outages at {}",
            outages
                .iter()
                .map(|(t, d)| format!("{t:.1} s for {d:.1} s"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if !sim_stats.is_null() {
        let _ = writeln!(
            s,
            "  engine-sim played: {} requests, {} streams cut, {} refusals, statuses {}",
            sim_stats["requests"], sim_stats["cuts"], sim_stats["refusals"], sim_stats["statuses"]
        );
    }
    let unexpected = lock(&shared.unexpected).clone();
    if !unexpected.is_empty() {
        let _ = writeln!(s, "answers nobody expected:");
        for (what, n) in &unexpected {
            let _ = writeln!(s, "  {n:5}  {what}");
        }
    }
    if !warnings.is_empty() {
        let _ = writeln!(s, "chatd WARN lines:");
        for (what, n) in &warnings {
            let _ = writeln!(s, "  {n:5}  {what}");
        }
    }
    let mut latencies: Vec<i64> = devices
        .iter()
        .flat_map(|d| d.latencies.iter().copied())
        .collect();
    latencies.sort_unstable();
    let _ = writeln!(
        s,
        "relay latency (engine stamp → steady device read, {} stamped tokens): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        latencies.len(),
        quantile(&latencies, 0.5) as f64 / 1000.0,
        quantile(&latencies, 0.99) as f64 / 1000.0,
        latencies.last().copied().unwrap_or(0) as f64 / 1000.0,
    );
    let _ = writeln!(
        s,
        "RSS curve (chatd VmRSS, a sample every {:.0} s{}):",
        sample_every.as_secs_f64(),
        if samples.len() > 40 {
            ", every few shown"
        } else {
            ""
        }
    );
    let step = samples.len().div_ceil(40).max(1);
    for (i, sample) in samples.iter().enumerate() {
        if i % step == 0 || i + 1 == samples.len() {
            let _ = writeln!(
                s,
                "  t={:6.1}s  pid {:7}  {:>10}",
                sample.t,
                sample.pid,
                mib(sample.kib)
            );
        }
    }
    if let Some(kib) = rss_drained {
        let _ = writeln!(s, "  (after the drain, before the catch-up: {})", mib(kib));
    }
    let _ = writeln!(s, "RSS check: {rss_line}");
    let _ = writeln!(s, "invariants:");
    let broken = lock(&shared.broken).clone();
    let mut failed = 0;
    for (n, inv) in INVARIANTS.iter().enumerate() {
        match broken.get(inv) {
            None => {
                let _ = writeln!(s, "  {}. PASS  {}", n + 1, inv.title());
            }
            Some((count, examples)) => {
                failed += 1;
                let _ = writeln!(s, "  {}. FAIL  {} ({count} times)", n + 1, inv.title());
                for e in examples {
                    let _ = writeln!(s, "          {e}");
                }
            }
        }
    }
    let _ = write!(
        s,
        "soak: {} passed, {failed} failed",
        INVARIANTS.len() - failed
    );
    say(&s);
    if failed > 0 {
        let keep = std::env::temp_dir().join(format!("soak-{seed}-chatd.log"));
        if std::fs::copy(&log_path, &keep).is_ok() {
            eprintln!("soak: chatd's log is kept at {}", keep.display());
        }
    }
    if let Some(out) = &args.out {
        std::fs::write(out, format!("{}\n", s.trim_start()))
            .with_context(|| format!("writing {}", out.display()))?;
    }
    drop(sim);
    Ok(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_the_issue_writes_them() {
        assert_eq!(parse_duration("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1.5m"), Ok(Duration::from_secs(90)));
        for bad in ["", "s", "10x", "0s", "-5s", "500ms"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} was taken");
        }
    }

    #[test]
    fn answers_are_checked_token_by_token() {
        assert_eq!(answer_tokens(""), Ok(0));
        assert_eq!(answer_tokens("w0 w1 w2 "), Ok(3));
        assert_eq!(answer_tokens("w0:17 w1:18 "), Ok(2));
        assert!(answer_tokens("w0 w2 ").is_err(), "a lost token");
        assert!(answer_tokens("w0 w1 w1 w2 ").is_err(), "a doubled token");
        assert!(answer_tokens("w0 w1").is_err(), "a cut token");
    }

    #[test]
    fn texts_part_where_they_differ() {
        let d = difference("w0 w1 w2 ", "w0 w1 w3 ");
        assert!(d.starts_with("they part at char 7 of 9 / 9"), "{d}");
    }

    /// A chunked SSE body split at awkward places, the first frames in the
    /// same read as the headers: every frame comes out whole, once.
    #[tokio::test]
    async fn chunked_frames_come_out_whole() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let frames = [
            "id: 1\nevent: a\ndata: {}\n\n",
            "id: 2\nevent: b\ndata: {\"x\":1}\n\n",
        ];
        let body: String = frames
            .iter()
            .map(|f| format!("{:x}\r\n{f}\r\n", f.len()))
            .collect::<String>()
            + "0\r\n\r\n";
        let server = tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut request = vec![0u8; 4096];
            let _ = sock.read(&mut request).await.unwrap();
            let head = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";
            let all = format!("{head}{}", &body[..20]);
            sock.write_all(all.as_bytes()).await.unwrap();
            for piece in body.as_bytes()[20..].chunks(7) {
                sock.write_all(piece).await.unwrap();
                sock.flush().await.unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        });
        let Ok(mut sse) = Sse::open(port, "c", 0, false, false).await else {
            panic!("the stream did not open");
        };
        let mut got = sse.frames();
        while sse.read(usize::MAX).await.unwrap() {
            got.extend(sse.frames());
        }
        got.extend(sse.frames());
        let expected: Vec<Vec<u8>> = frames
            .iter()
            .map(|f| f.trim_end_matches('\n').as_bytes().to_vec())
            .collect();
        assert_eq!(got, expected);
        assert!(sse.ended);
        server.await.unwrap();
    }
}
