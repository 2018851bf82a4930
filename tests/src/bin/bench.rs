//! `bench`: tandem's benchmarks, run against the real `engine-sim` and
//! `chatd` processes on 127.0.0.1.
//!
//! Figures (each with its aim and a baseline measured in the same run):
//! 1. relay: added latency of a `text.delta` from the engine to 1, 100 and
//!    1,000 attached devices, against a client reading the engine directly
//!    (and, for scale, against a bare fan-out relay on the same machine);
//! 2. throughput: durable events per second, against raw SQLite inserts;
//! 3. snapshot: snapshot + attach, and a 1,999-event tail, on a chat of
//!    100,000 events, against the same on a chat of ~10 events;
//! 4. rss: chatd's resident memory idle and busy (1,000 devices);
//! 5. status: the wall time of `tandem status` with chatd and the engine up,
//!    against `tandem --version` (the cost of starting the process at all);
//! 6. toolloop: an agent run of 100 tool steps (write_file of ~4 KB, then
//!    read_file): chatd's time from the engine's last byte of one step to
//!    its next request, against the bench posting the same requests straight
//!    to the engine; and the bytes each request carries and how much of it is
//!    not a pure extension of what the engine had, with chatd's argument
//!    stubs and without them.
//! 7. egress: egressd (the real binary) relaying a 1 GiB transfer each way
//!    through a chat's socket and its loopback listener with CONNECT, new
//!    CONNECTs a second and its idle RSS with 100 chat sockets open, against
//!    direct loopback TCP and tinyproxy (`tests/src/egressbench.rs`).
//! 8. hostexec: the per-call overhead of hostexecd's `POST /exec` running
//!    `true` against a plain `bash -c true` spawned from Rust (median and
//!    p99 over 1,000 calls), and the time from a stop to the last process
//!    of the call gone.
//! 9. sandbox: chatd's per-chat containers (podman, the busybox test image)
//!    through chatd's own `Sandboxes` and `run_command`: a cold start (no
//!    container yet) and a stopped one to the first byte of `echo hi`, a warm
//!    call to its first byte and end against `bash -c` from Rust, and a call
//!    of `true` against hostexecd's (`tests/src/sandboxbench.rs`). Needs
//!    root and podman; skipped with a line otherwise.
//! 10. triggers: triggerd with 10,000 enabled triggers: the time to find
//!     every next due time in-process (triggerd's `schedule`) against as many
//!     `daily 09:00` in UTC, its start with them stored against an empty
//!     start, the lateness of 200 runs due in the same minute (the real
//!     triggerd, chatd and engine-sim, triggerd's clock file driven by the
//!     bench) against the check interval, and its idle CPU and RSS against a
//!     triggerd with none (`tests/src/triggerbench.rs`).
//! 11. connectors: connectord (the real binary) between a fake Telegram
//!     Bot API and chatd + engine-sim: messages a second and per-message
//!     latency of 200 messages from 20 senders pushed at once (reply modes
//!     off and progress, and edit_ms 50), against the bench sending the same
//!     straight to chatd; its idle CPU and RSS long polling 10 bindings
//!     against none (`tests/src/connectorbench.rs`).
//! 12. web: the time from a chunk leaving engine-sim to its text in the web
//!     page's DOM (headless Chromium, measured in the page), p50/p99, with 50
//!     other pages attached to the chat, against 0 other pages and an SSE
//!     client in the bench timing the same stamps (`tests/src/webbench.rs`).
//! 13. requests: the time from `POST …/messages` to engine-sim having the
//!     chat request, p50/p90/p99, for a chat whose brief asks egressd for
//!     its network and one whose egressd is absent, against an agent chat
//!     with no network tool (`tests/src/requestbench.rs`).
//!
//! Build with `cargo build --release --workspace`, then `target/release/bench`.
//! `--quick` shrinks everything for a smoke run (well under a minute).
//! Every wait is bounded; every child process is stopped on the way out.
//! docs/benchmarks.md has a run's figures and what dominates each.

use std::io::Write as _;
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use clap::{Parser, ValueEnum};
use futures_util::future::join_all;
use serde_json::{json, Value};
use tandem_tests::harness::{Chatd, Client, Sim, FORWARD_KEY};
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::TcpStream;

/// tandem's benchmarks against the real engine-sim and chatd processes.
#[derive(Parser, Debug)]
#[command(name = "bench")]
struct Args {
    /// Shrink every figure for a smoke run (finishes well under 60 s).
    #[arg(long)]
    quick: bool,
    /// Run one figure only (`rss` runs the relay figure, which measures it;
    /// `egress` needs egressd built next to bench; `sandbox` needs root,
    /// podman, and tandem and tandem-shim built next to bench; `triggers`
    /// needs triggerd built next to bench; `connectors` connectord; `web`
    /// Debian's chromium and chromium-driver; `requests` egressd).
    #[arg(long, value_enum)]
    only: Option<Figure>,
    /// Also write the final table (markdown) to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Token rate of figure 1's answers (default 100; quick 200).
    #[arg(long)]
    relay_tps: Option<f64>,
    /// Tokens in each of figure 1's answers (default 300; quick 60).
    #[arg(long)]
    relay_tokens: Option<usize>,
    /// (Internal) serve the bare relay floor of figure 1 for the engine on this port.
    #[arg(long, hide = true)]
    floor_of: Option<u16>,
    /// (Internal) serve figure 7's bare relay floor (CONNECT, two copying threads).
    #[arg(long = "egress-floor", hide = true)]
    egress_floor: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Figure {
    Relay,
    Throughput,
    Snapshot,
    Rss,
    Status,
    Toolloop,
    Egress,
    Hostexec,
    Sandbox,
    Triggers,
    Connectors,
    Web,
    Requests,
}

/// How big each figure's workload is.
struct Sizes {
    relay_tokens: usize,
    relay_tps: f64,
    levels: Vec<usize>,
    tp_chats: usize,
    tp_tokens: usize,
    tp_rounds: usize,
    big_tokens: usize,
    repeats: usize,
    tool_steps: usize,
}

impl Sizes {
    fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                relay_tokens: 60,
                relay_tps: 200.0,
                levels: vec![1, 100],
                tp_chats: 4,
                tp_tokens: 1_500,
                tp_rounds: 1,
                big_tokens: 5_000,
                repeats: 3,
                tool_steps: 20,
            }
        } else {
            Sizes {
                relay_tokens: 300,
                relay_tps: 100.0,
                levels: vec![1, 100, 1_000],
                tp_chats: 8,
                tp_tokens: 10_000,
                tp_rounds: 3,
                big_tokens: 100_000,
                repeats: 7,
                tool_steps: 100,
            }
        }
    }
}

/// One line of the final table.
struct Row {
    figure: String,
    measured: String,
    aim: String,
    baseline: String,
    ratio: String,
    met: Option<bool>,
}

fn row(figure: impl Into<String>, measured: impl Into<String>) -> Row {
    Row {
        figure: figure.into(),
        measured: measured.into(),
        aim: "—".into(),
        baseline: "—".into(),
        ratio: "—".into(),
        met: None,
    }
}

impl Row {
    fn aim(mut self, aim: impl Into<String>, met: bool) -> Row {
        self.aim = aim.into();
        self.met = Some(met);
        self
    }

    fn baseline(mut self, baseline: impl Into<String>, ratio: impl Into<String>) -> Row {
        self.baseline = baseline.into();
        self.ratio = ratio.into();
        self
    }
}

fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| Figure | Measured | Aim | Baseline (same run) | Ratio | Met? |\n|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let met = match r.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "—",
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            r.figure, r.measured, r.aim, r.baseline, r.ratio, met
        ));
    }
    out
}

fn say(line: impl AsRef<str>) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", line.as_ref());
    let _ = out.flush();
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // No libtest here to hide the logs of daemons that did well.
    tandem_tests::daemon::logs_only_on_panic();
    if args.egress_floor {
        return tandem_tests::egressbench::serve_floor();
    }
    // Before any thread or child exists, so chatd and engine-sim inherit it.
    let nofile = raise_nofile(16_384);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match args.floor_of {
        Some(sim_port) => runtime.block_on(floor::serve(sim_port)),
        None => runtime.block_on(run(args, nofile)),
    }
}

async fn run(args: Args, nofile: (u64, u64)) -> anyhow::Result<()> {
    let mut sizes = Sizes::new(args.quick);
    if let Some(tps) = args.relay_tps.filter(|t| *t > 0.0) {
        sizes.relay_tps = tps;
    }
    if let Some(tokens) = args.relay_tokens.filter(|t| *t > 0) {
        sizes.relay_tokens = tokens;
    }
    let wants = |f: Figure| args.only.is_none_or(|o| o == f);
    say(format!(
        "bench{}: {} cores, RLIMIT_NOFILE soft {} hard {} (raised before spawning; chatd inherits it)",
        if args.quick { " --quick" } else { "" },
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        nofile.0,
        nofile.1
    ));
    let started = Instant::now();
    let mut rows = Vec::new();
    if wants(Figure::Relay) || wants(Figure::Rss) {
        relay(&sizes, &mut rows, nofile.0)
            .await
            .context("figure 1 (relay) and 4 (rss)")?;
    }
    if wants(Figure::Throughput) {
        throughput(&sizes, &mut rows)
            .await
            .context("figure 2 (throughput)")?;
    }
    if wants(Figure::Snapshot) {
        snapshot(&sizes, &mut rows)
            .await
            .context("figure 3 (snapshot)")?;
    }
    if wants(Figure::Status) {
        status(&sizes, &mut rows)
            .await
            .context("figure 5 (tandem status)")?;
    }
    if wants(Figure::Toolloop) {
        toolloop::figure(&sizes, &mut rows)
            .await
            .context("figure 6 (tool loop)")?;
    }
    if wants(Figure::Egress) {
        egress(args.quick, &mut rows)
            .await
            .context("figure 7 (egress)")?;
    }
    if wants(Figure::Hostexec) {
        hostexec(args.quick, &mut rows)
            .await
            .context("figure 8 (hostexec)")?;
    }
    if wants(Figure::Sandbox) {
        sandbox(args.quick, &mut rows)
            .await
            .context("figure 9 (sandbox)")?;
    }
    if wants(Figure::Triggers) {
        triggers(args.quick, &mut rows)
            .await
            .context("figure 10 (triggers)")?;
    }
    if wants(Figure::Connectors) {
        connectors(args.quick, &mut rows)
            .await
            .context("figure 11 (connectors)")?;
    }
    if args.quick && args.only.is_none() {
        // Chromium's start and 5 tabs would take --quick past its minute
        // on a debug build; `--quick --only web` runs the small figure.
        say("\n## 12. web page: skipped by --quick (`--quick --only web` runs it small)");
    } else if wants(Figure::Web) {
        web(args.quick, &mut rows)
            .await
            .context("figure 12 (web page)")?;
    }
    if wants(Figure::Requests) {
        requests(args.quick, &mut rows)
            .await
            .context("figure 13 (requests)")?;
    }
    let table = table(&rows);
    say(format!(
        "\n{table}\n(total {:.1} s)",
        started.elapsed().as_secs_f64()
    ));
    if let Some(path) = &args.out {
        std::fs::write(path, &table).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Raises the soft open-files limit towards `want` (at most the hard limit).
fn raise_nofile(want: u64) -> (u64, u64) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return (0, 0);
    };
    let target = want.min(hard);
    if target > soft && setrlimit(Resource::RLIMIT_NOFILE, target, hard).is_ok() {
        return (target, hard);
    }
    (soft, hard)
}

// ---------------------------------------------------------------------------
// Small measuring tools
// ---------------------------------------------------------------------------

fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// The value at quantile `q` of sorted samples.
fn quantile(sorted: &[i64], q: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Microseconds as milliseconds.
fn ms(us: i64) -> String {
    format!("{:.2} ms", us as f64 / 1000.0)
}

fn ms_f(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn parse_u64(digits: &[u8]) -> Option<u64> {
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// `(i, stamp)` from a stamped token `w{i}:{stamp} ` that follows `key`.
fn stamp_after(frame: &[u8], key: &[u8]) -> Option<(u64, i64)> {
    let rest = &frame[find(frame, key)? + key.len()..];
    let colon = rest.iter().position(|b| *b == b':')?;
    let index = parse_u64(&rest[..colon])?;
    let rest = &rest[colon + 1..];
    let end = rest.iter().position(|b| !b.is_ascii_digit())?;
    Some((index, parse_u64(&rest[..end])? as i64))
}

/// Resident memory of a process in KiB (`VmRSS`).
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// CPU seconds (user + system) a process has used so far (USER_HZ = 100).
fn cpu_secs(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let Some(close) = stat.rfind(')') else {
        return 0.0;
    };
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// CPU seconds used by a process's threads named `name`.
fn thread_cpu_secs(pid: u32, name: &str) -> f64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0.0;
    };
    let mut total = 0.0;
    for task in tasks.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() == name {
            let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
                continue;
            };
            let Some(close) = stat.rfind(')') else {
                continue;
            };
            let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
            let ticks = |i: usize| {
                fields
                    .get(i)
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            total += (ticks(11) + ticks(12)) / 100.0;
        }
    }
    total
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// The open-files limit a process runs with (`/proc/<pid>/limits`).
fn nofile_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/limits"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("Max open files"))
                .map(|l| {
                    l.split_whitespace()
                        .skip(3)
                        .take(2)
                        .collect::<Vec<_>>()
                        .join("/")
                })
        })
        .unwrap_or_else(|| "?".into())
}

/// The pid of this process's child named `name` (the harness keeps the sim's private).
fn child_pid(name: &str) -> Option<u32> {
    let me = std::process::id();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`; comm may hold spaces, so split at the last ')'.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = &stat[open + 1..close];
        let ppid = stat[close + 1..]
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok());
        if comm == name && ppid == Some(me) {
            return Some(pid);
        }
    }
    None
}

/// Samples a process's RSS every 20 ms until stopped; returns the peak (KiB).
struct RssSampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<u64>,
}

impl RssSampler {
    fn start(pid: u32, bound: Duration) -> RssSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let deadline = Instant::now() + bound;
            let mut peak = 0;
            while !flag.load(Ordering::Relaxed) && Instant::now() < deadline {
                peak = peak.max(rss_kib(pid).unwrap_or(0));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            peak.max(rss_kib(pid).unwrap_or(0))
        });
        RssSampler { stop, task }
    }

    async fn peak(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap_or(0)
    }
}

// ---------------------------------------------------------------------------
// A cheap HTTP/1.1 streaming client on a raw socket (one per device)
// ---------------------------------------------------------------------------

/// A streamed response read from a raw socket: chunked transfer decoding,
/// then split into SSE frames (`...\n\n`).
struct RawStream {
    sock: TcpStream,
    /// Received bytes not yet decoded.
    raw: Vec<u8>,
    /// Decoded body bytes not yet split into frames.
    body: Vec<u8>,
    chunked: bool,
    /// Bytes left in the current chunk; `None` while reading a size line.
    chunk_left: Option<usize>,
    /// Leading bytes of `body` already searched for a frame end.
    scanned: usize,
    ended: bool,
    buf: Box<[u8]>,
}

impl RawStream {
    /// Connects, sends `request` and reads up to the end of a 200's headers.
    async fn open(
        port: u16,
        request: &[u8],
        deadline: tokio::time::Instant,
    ) -> anyhow::Result<RawStream> {
        let sock = tokio::time::timeout_at(deadline, TcpStream::connect(("127.0.0.1", port)))
            .await
            .context("connect timed out")??;
        sock.set_nodelay(true)?;
        nix::sys::socket::setsockopt(&sock, nix::sys::socket::sockopt::ReceiveTimestampns, &true)?;
        let mut s = RawStream {
            sock,
            raw: Vec::new(),
            body: Vec::new(),
            chunked: false,
            chunk_left: None,
            scanned: 0,
            ended: false,
            buf: vec![0u8; 16 * 1024].into_boxed_slice(),
        };
        tokio::time::timeout_at(deadline, s.sock.write_all(request))
            .await
            .context("write timed out")??;
        let head_end = loop {
            if let Some(end) = find(&s.raw, b"\r\n\r\n") {
                break end;
            }
            let n = tokio::time::timeout_at(deadline, s.sock.read(&mut s.buf))
                .await
                .context("headers timed out")??;
            if n == 0 {
                bail!("the server closed the connection before its headers");
            }
            s.raw.extend_from_slice(&s.buf[..n]);
        };
        let head = String::from_utf8_lossy(&s.raw[..head_end]).to_ascii_lowercase();
        if !head.starts_with("http/1.1 200") {
            bail!("answered {:?}", head.lines().next().unwrap_or(""));
        }
        s.chunked = head.contains("transfer-encoding: chunked");
        s.raw.drain(..head_end + 4);
        s.decode();
        Ok(s)
    }

    /// Reads once; returns when it was read and when its last byte arrived
    /// at the socket (the kernel's receive timestamp), in unix µs; `None` at the end.
    async fn read_more(
        &mut self,
        deadline: tokio::time::Instant,
    ) -> anyhow::Result<Option<(i64, i64)>> {
        if self.ended {
            return Ok(None);
        }
        let fd = self.sock.as_raw_fd();
        let read = async {
            loop {
                self.sock.readable().await?;
                let buf = &mut self.buf;
                match self
                    .sock
                    .try_io(Interest::READABLE, || recv_stamped(fd, buf))
                {
                    Ok(got) => return Ok::<_, std::io::Error>(got),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                    Err(e) => return Err(e),
                }
            }
        };
        let (n, arrived) = tokio::time::timeout_at(deadline, read)
            .await
            .context("read timed out")??;
        let read_at = now_micros();
        let at = (read_at, arrived.unwrap_or(read_at));
        if n == 0 {
            self.ended = true;
            return Ok(None);
        }
        self.raw.extend_from_slice(&self.buf[..n]);
        self.decode();
        Ok(Some(at))
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

    /// Hands every complete frame received so far to `f`.
    /// (A large frame arriving in many reads is searched once, not per read.)
    fn frames(&mut self, mut f: impl FnMut(&[u8])) {
        let mut start = 0;
        let mut from = self.scanned.saturating_sub(1);
        while let Some(end) = find(&self.body[from..], b"\n\n") {
            let end = from + end;
            f(&self.body[start..end]);
            start = end + 2;
            from = start;
        }
        self.body.drain(..start);
        self.scanned = self.body.len();
    }
}

/// `recvmsg` with the socket's `SO_TIMESTAMPNS` receive timestamp (unix µs).
fn recv_stamped(fd: RawFd, buf: &mut [u8]) -> std::io::Result<(usize, Option<i64>)> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut iov = [std::io::IoSliceMut::new(buf)];
    let mut space = nix::cmsg_space!(nix::sys::time::TimeSpec);
    let msg = recvmsg::<()>(fd, &mut iov, Some(&mut space), MsgFlags::empty())
        .map_err(std::io::Error::from)?;
    let mut arrived = None;
    if let Ok(cmsgs) = msg.cmsgs() {
        for cmsg in cmsgs {
            if let ControlMessageOwned::ScmTimestampns(ts) = cmsg {
                arrived = Some(ts.tv_sec() * 1_000_000 + ts.tv_nsec() / 1_000);
            }
        }
    }
    Ok((msg.bytes, arrived))
}

fn events_request(chat: &str, after: i64) -> Vec<u8> {
    format!(
        "GET /v1/chat-app/conversations/{chat}/events?after={after} HTTP/1.1\r\nHost: 127.0.0.1\r\n\
         X-Forward-Key: {FORWARD_KEY}\r\nAccept: text/event-stream\r\n\r\n"
    )
    .into_bytes()
}

/// Per-token latencies (µs) after the engine's stamp: when the device read
/// the token, and when it arrived at the device's socket.
#[derive(Default)]
struct Seen {
    read: Vec<i64>,
    arrived: Vec<i64>,
    finished: bool,
}

impl Seen {
    fn with_capacity(n: usize) -> Seen {
        Seen {
            read: Vec::with_capacity(n),
            arrived: Vec::with_capacity(n),
            finished: false,
        }
    }

    fn note(&mut self, at: (i64, i64), stamp: i64) {
        self.read.push(at.0 - stamp);
        self.arrived.push(at.1 - stamp);
    }
}

/// Reads a chatd event stream until `run.finished` (or the deadline):
/// the latency of every stamped `text.delta`.
async fn read_deltas(
    mut s: RawStream,
    expect: usize,
    deadline: tokio::time::Instant,
) -> anyhow::Result<Seen> {
    let mut seen = Seen::with_capacity(expect);
    let mut at = (now_micros(), now_micros());
    loop {
        s.frames(|frame| {
            if find(frame, b"event: text.delta\n").is_some() {
                if let Some((_, stamp)) = stamp_after(frame, b"\"text\":\"w") {
                    seen.note(at, stamp);
                }
            } else if find(frame, b"event: run.finished\n").is_some() {
                seen.finished = true;
            }
        });
        if seen.finished {
            return Ok(seen);
        }
        match s.read_more(deadline).await? {
            Some(t) => at = t,
            None => bail!("the stream ended after {} deltas", seen.read.len()),
        }
    }
}

/// The baseline of figure 1: a client reading the engine's own stream.
async fn direct_latencies(
    sim_port: u16,
    tokens: usize,
    tps: f64,
    bound: Duration,
) -> anyhow::Result<Seen> {
    let body = json!({
        "model": "sim-small",
        "stream": true,
        "messages": [{"role": "user", "content": format!("[sim tokens={tokens} tps={tps} stamp=1 id=direct]")}],
    })
    .to_string();
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let deadline = tokio::time::Instant::now() + bound;
    let mut s = RawStream::open(sim_port, request.as_bytes(), deadline).await?;
    let mut seen = Seen::with_capacity(tokens);
    let mut at = (now_micros(), now_micros());
    loop {
        s.frames(|frame| {
            if let Some((_, stamp)) = stamp_after(frame, b"\"content\":\"w") {
                seen.note(at, stamp);
            } else if find(frame, b"data: [DONE]").is_some() {
                seen.finished = true;
            }
        });
        if seen.finished {
            return Ok(seen);
        }
        match s.read_more(deadline).await? {
            Some(t) => at = t,
            None => bail!("the engine stream ended after {} tokens", seen.read.len()),
        }
    }
}

// ---------------------------------------------------------------------------
// Figure 1 (relay latency) and figure 4 (RSS)
// ---------------------------------------------------------------------------

struct Dist {
    p50: i64,
    p99: i64,
    max: i64,
    n: usize,
}

fn dist(mut v: Vec<i64>) -> Dist {
    v.sort_unstable();
    Dist {
        p50: quantile(&v, 0.50),
        p99: quantile(&v, 0.99),
        max: v.last().copied().unwrap_or(0),
        n: v.len(),
    }
}

/// Runs one stamped answer on a fresh chat with `devices` attached; returns
/// every device's latencies together and the fewest tokens any device got.
async fn relay_once(
    chatd: &Chatd,
    client: &Client,
    devices: usize,
    tokens: usize,
    tps: f64,
    id: &str,
) -> anyhow::Result<(Seen, usize)> {
    let chat = client.create_chat().await?;
    let seq = client.snapshot(&chat).await?["seq"].as_i64().unwrap_or(0);
    let text = format!("[sim tokens={tokens} tps={tps} stamp=1 id={id}]");
    let start = async {
        client.send(&chat, &text).await?;
        Ok(())
    };
    attach_and_read(
        chatd.port,
        &events_request(&chat, seq),
        devices,
        tokens,
        tps,
        start,
    )
    .await
}

/// Attaches `devices` streams to `port` with `request`, then runs `start`
/// and reads every device until its `run.finished`.
async fn attach_and_read(
    port: u16,
    request: &[u8],
    devices: usize,
    tokens: usize,
    tps: f64,
    start: impl std::future::Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<(Seen, usize)> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    // Attach in waves, each device's headers received before the next wave.
    let mut streams = Vec::with_capacity(devices);
    while streams.len() < devices {
        let wave = (devices - streams.len()).min(100);
        let opened = join_all((0..wave).map(|_| RawStream::open(port, request, deadline))).await;
        for s in opened {
            streams.push(
                s.with_context(|| format!("attaching device {} of {devices}", streams.len() + 1))?,
            );
        }
    }
    let run_bound = Duration::from_secs_f64(tokens as f64 / tps.max(1.0)) + Duration::from_secs(60);
    let read_deadline = tokio::time::Instant::now() + run_bound;
    let readers: Vec<_> = streams
        .into_iter()
        .map(|s| tokio::spawn(read_deltas(s, tokens, read_deadline)))
        .collect();
    start.await?;
    let mut all = Seen::with_capacity(devices * tokens);
    let mut fewest = usize::MAX;
    for (i, reader) in readers.into_iter().enumerate() {
        let seen = reader
            .await
            .context("device task")?
            .with_context(|| format!("device {i}"))?;
        fewest = fewest.min(seen.read.len());
        all.read.extend(seen.read);
        all.arrived.extend(seen.arrived);
    }
    Ok((all, fewest))
}

/// The relay floor: what a bare fan-out achieves on this machine. A child
/// process (this binary with `--floor-of SIM_PORT`) reads the engine's
/// stream and writes each token, framed as chatd frames it, to every
/// attached device: one shared buffer, one task wake-up and one write per
/// device per token; no database, no HTTP framework.
mod floor {
    use super::*;
    use bytes::Bytes;
    use tokio::sync::broadcast;

    /// The child process, killed on drop.
    pub struct Floor {
        child: std::process::Child,
        pub port: u16,
    }

    impl Floor {
        pub fn start(sim_port: u16) -> anyhow::Result<Floor> {
            use std::io::BufRead as _;
            let mut child = std::process::Command::new(std::env::current_exe()?)
                .arg("--floor-of")
                .arg(sim_port.to_string())
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .context("starting the relay floor")?;
            let mut line = String::new();
            let stdout = child.stdout.take().context("floor stdout")?;
            std::io::BufReader::new(stdout).read_line(&mut line)?;
            let port = line.trim().rsplit(':').next().and_then(|p| p.parse().ok());
            let port = port.with_context(|| format!("the floor printed {line:?}"))?;
            Ok(Floor { child, port })
        }

        pub fn pid(&self) -> u32 {
            self.child.id()
        }
    }

    impl Drop for Floor {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    fn chunk(frame: String) -> Bytes {
        Bytes::from(format!("{:x}\r\n{frame}\r\n", frame.len()))
    }

    /// Serves devices and `GET /go?tokens=N&tps=F` (which streams one answer
    /// to them all); exits by itself after ten minutes.
    pub async fn serve(sim_port: u16) -> anyhow::Result<()> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        say(format!("floor listening on {}", listener.local_addr()?));
        let (tx, _) = broadcast::channel::<Bytes>(16_384);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
        loop {
            let (sock, _) = tokio::select! {
                accepted = listener.accept() => accepted?,
                _ = tokio::time::sleep_until(deadline) => return Ok(()),
            };
            sock.set_nodelay(true)?;
            let tx = tx.clone();
            tokio::spawn(async move {
                let _ = connection(sock, tx, sim_port).await;
            });
        }
    }

    async fn connection(
        mut sock: TcpStream,
        tx: broadcast::Sender<Bytes>,
        sim_port: u16,
    ) -> anyhow::Result<()> {
        let mut head = Vec::new();
        let mut buf = [0u8; 4096];
        while find(&head, b"\r\n\r\n").is_none() {
            let n = sock.read(&mut buf).await?;
            if n == 0 {
                return Ok(());
            }
            head.extend_from_slice(&buf[..n]);
        }
        let line = String::from_utf8_lossy(&head)
            .lines()
            .next()
            .unwrap_or("")
            .to_string();
        if let Some(query) = line.strip_prefix("GET /go?") {
            let arg = |key: &str| {
                query
                    .split(['&', ' '])
                    .find_map(|kv| kv.strip_prefix(key))
                    .unwrap_or("")
                    .to_string()
            };
            let (tokens, tps) = (arg("tokens="), arg("tps="));
            let body = json!({"model": "sim-small", "stream": true, "messages": [{"role": "user",
                "content": format!("[sim tokens={tokens} tps={tps} stamp=1 id=floor{}]", now_micros())}]})
            .to_string();
            let request = format!(
                "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
            let mut s = RawStream::open(sim_port, request.as_bytes(), deadline).await?;
            let (mut seq, mut done) = (0, false);
            while !done {
                s.frames(|frame| {
                    const KEY: &[u8] = b"\"content\":\"";
                    if let Some(at) = find(frame, KEY) {
                        let rest = &frame[at + KEY.len()..];
                        let end = rest.iter().position(|b| *b == b'"').unwrap_or(rest.len());
                        let text = String::from_utf8_lossy(&rest[..end]);
                        seq += 1;
                        let data = format!("{{\"text\":\"{text}\"}}");
                        let _ = tx.send(chunk(format!(
                            "id: {seq}\nevent: text.delta\ndata: {data}\n\n"
                        )));
                    } else if find(frame, b"data: [DONE]").is_some() {
                        done = true;
                    }
                });
                if !done && s.read_more(deadline).await?.is_none() {
                    break;
                }
            }
            let _ = tx.send(chunk(format!(
                "id: {}\nevent: run.finished\ndata: {{}}\n\n",
                seq + 1
            )));
            sock.write_all(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
                .await?;
            return Ok(());
        }
        let mut rx = tx.subscribe();
        sock.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            .await?;
        loop {
            match rx.recv().await {
                Ok(frame) => sock.write_all(&frame).await?,
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return Ok(()),
            }
        }
    }

    /// One stamped answer through the floor with `devices` attached.
    pub async fn once(
        floor: &Floor,
        devices: usize,
        tokens: usize,
        tps: f64,
    ) -> anyhow::Result<(Seen, usize)> {
        let request = b"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
        let url = format!(
            "http://127.0.0.1:{}/go?tokens={tokens}&tps={tps}",
            floor.port
        );
        let start = async move {
            // The answer to /go comes at the end of the stream: only start it here.
            tokio::spawn(async move { reqwest::get(url).await });
            Ok(())
        };
        attach_and_read(floor.port, request, devices, tokens, tps, start).await
    }
}

async fn relay(sizes: &Sizes, rows: &mut Vec<Row>, nofile: u64) -> anyhow::Result<()> {
    let (tokens, tps) = (sizes.relay_tokens, sizes.relay_tps);
    say(format!(
        "\n## 1. token relay latency ({tokens} tokens at {tps} tokens/s, stamp=1)"
    ));
    say(
        "latency = when a device got the token − the engine's stamp in it; \"read\": when the\n\
         device's read returned, \"arrival\": the kernel's receive timestamp of its socket",
    );
    let most = sizes.levels.iter().copied().max().unwrap_or(1);
    if (most as u64) * 2 + 200 > nofile {
        bail!(
            "{most} devices need ~{} open files here and in chatd; the limit is {nofile} (raise `ulimit -n`)",
            most * 2 + 200
        );
    }
    let sim = Sim::start(&[])?;
    let chatd = Chatd::start(&sim.url(), &[]).await?;
    let pid = chatd.pid().context("chatd pid")?;
    say(format!(
        "chatd pid {pid}: open files limit (soft/hard) {}",
        nofile_of(pid)
    ));
    // Idle RSS: after start, before any chat.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle = rss_kib(pid).context("reading chatd's VmRSS")?;
    let sim_idle = child_pid("engine-sim").and_then(rss_kib).unwrap_or(0);

    let client = chatd.client();
    // Warm-up: engine connection pool, reader connections, code paths.
    relay_once(&chatd, &client, 1, 20, 500.0, "warm")
        .await
        .context("warm-up run")?;
    let direct = direct_latencies(sim.port, tokens, tps, Duration::from_secs(120)).await?;
    let (direct_read, direct_arrived) = (dist(direct.read), dist(direct.arrived));
    say(format!(
        "direct (one client reads the engine): read p50 {} p99 {} max {}; arrival p50 {} p99 {} ({} tokens)",
        ms(direct_read.p50),
        ms(direct_read.p99),
        ms(direct_read.max),
        ms(direct_arrived.p50),
        ms(direct_arrived.p99),
        direct_read.n
    ));
    let floor = floor::Floor::start(sim.port)?;
    let mut busy = 0;
    for &devices in &sizes.levels {
        let sampler = (devices == most).then(|| RssSampler::start(pid, Duration::from_secs(600)));
        let cpu = |p: Option<u32>| p.map(cpu_secs).unwrap_or(0.0);
        let (me, sim_pid) = (std::process::id(), child_pid("engine-sim"));
        let (c0, b0, s0, w0) = (cpu(Some(pid)), cpu(Some(me)), cpu(sim_pid), Instant::now());
        let (seen, fewest) = relay_once(
            &chatd,
            &client,
            devices,
            tokens,
            tps,
            &format!("relay{devices}"),
        )
        .await?;
        let (wall, chatd_cpu, bench_cpu, sim_cpu) = (
            w0.elapsed(),
            cpu(Some(pid)) - c0,
            cpu(Some(me)) - b0,
            cpu(sim_pid) - s0,
        );
        if let Some(sampler) = sampler {
            busy = sampler.peak().await;
        }
        let (read, arrived) = (dist(seen.read), dist(seen.arrived));
        let (added50, added99) = (read.p50 - direct_read.p50, read.p99 - direct_read.p99);
        let (arr50, arr99) = (
            arrived.p50 - direct_arrived.p50,
            arrived.p99 - direct_arrived.p99,
        );
        say(format!(
            "{devices:>5} devices: read p50 {} p99 {} max {}; arrival p50 {} p99 {} max {}; \
             added (read) p50 {} p99 {}; added (arrival) p50 {} p99 {}",
            ms(read.p50),
            ms(read.p99),
            ms(read.max),
            ms(arrived.p50),
            ms(arrived.p99),
            ms(arrived.max),
            ms(added50),
            ms(added99),
            ms(arr50),
            ms(arr99)
        ));
        say(format!(
            "       {} samples, fewest per device {fewest}/{tokens}; CPU over {:.1} s: chatd {chatd_cpu:.2} s, \
             bench (the devices) {bench_cpu:.2} s, engine-sim {sim_cpu:.2} s",
            read.n,
            wall.as_secs_f64()
        ));
        if fewest < tokens {
            say(format!(
                "  WARNING: a device got {fewest} of {tokens} deltas"
            ));
        }
        // The same answer through the bare relay floor.
        let f0 = (cpu(Some(floor.pid())), cpu(Some(me)));
        let (floor_seen, floor_fewest) = floor::once(&floor, devices, tokens, tps).await?;
        let (floor_read, floor_arrived) = (dist(floor_seen.read), dist(floor_seen.arrived));
        say(format!(
            "       bare relay floor: read p50 {} p99 {} max {}; arrival p50 {} p99 {}; fewest per device \
             {floor_fewest}/{tokens}; CPU: floor {:.2} s, bench {:.2} s",
            ms(floor_read.p50),
            ms(floor_read.p99),
            ms(floor_read.max),
            ms(floor_arrived.p50),
            ms(floor_arrived.p99),
            cpu(Some(floor.pid())) - f0.0,
            cpu(Some(me)) - f0.1
        ));
        let plural = if devices == 1 { "" } else { "s" };
        let mut r = row(
            format!("1. relay added latency, {devices} device{plural}"),
            format!(
                "added p50 {} / p99 {} (read: p50 {} / p99 {} / max {}); at socket arrival: added p50 {} / p99 {}",
                ms(added50),
                ms(added99),
                ms(read.p50),
                ms(read.p99),
                ms(read.max),
                ms(arr50),
                ms(arr99)
            ),
        )
        .baseline(
            format!(
                "direct from engine p50 {} / p99 {}; bare relay floor p50 {} / p99 {}",
                ms(direct_read.p50),
                ms(direct_read.p99),
                ms(floor_read.p50),
                ms(floor_read.p99)
            ),
            format!(
                "p99 ×{:.1} direct, ×{:.1} floor",
                read.p99 as f64 / direct_read.p99.max(1) as f64,
                read.p99 as f64 / floor_read.p99.max(1) as f64
            ),
        );
        if devices == most {
            let aim = if most == 1_000 {
                "p99 added ≤ 2 ms at 1,000 devices".to_string()
            } else {
                format!("p99 added ≤ 2 ms (quick: {most} devices; the aim is at 1,000)")
            };
            r = r.aim(aim, added99 <= 2_000);
        }
        rows.push(r);
    }
    rows.push(
        row("4. chatd RSS idle (after start)", mib(idle))
            .aim("≤ 20 MiB", idle <= 20 * 1024)
            .baseline(
                format!("engine-sim idle {}", mib(sim_idle)),
                format!("×{:.2}", idle as f64 / sim_idle.max(1) as f64),
            ),
    );
    say(format!(
        "chatd RSS idle {}, peak busy with {most} devices {}",
        mib(idle),
        mib(busy)
    ));
    rows.push(
        row(
            format!("4. chatd RSS busy (peak, {most} devices)"),
            mib(busy),
        )
        .baseline(
            format!("idle {}", mib(idle)),
            format!("×{:.2}", busy as f64 / idle.max(1) as f64),
        ),
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// Figure 2: durable events per second
// ---------------------------------------------------------------------------

async fn events_written(http: &reqwest::Client, chatd: &Chatd) -> anyhow::Result<f64> {
    let text = http
        .get(format!("{}/metrics", chatd.url()))
        .timeout(Duration::from_secs(5))
        .send()
        .await?
        .text()
        .await?;
    text.lines()
        .find_map(|l| {
            l.strip_prefix("tandem_events_written_total ")
                .and_then(|v| v.trim().parse().ok())
        })
        .context("tandem_events_written_total not in /metrics")
}

/// Waits (bounded) until chatd has written `target` events; returns the count.
async fn wait_events(
    http: &reqwest::Client,
    chatd: &Chatd,
    target: f64,
    bound: Duration,
    progress: Option<f64>,
) -> anyhow::Result<f64> {
    let deadline = Instant::now() + bound;
    let mut last_note = Instant::now();
    loop {
        let now = events_written(http, chatd).await?;
        if now >= target {
            return Ok(now);
        }
        if Instant::now() > deadline {
            bail!("only {now} of {target} events written after {bound:?}");
        }
        if let Some(base) = progress {
            if last_note.elapsed() >= Duration::from_secs(5) {
                say(format!(
                    "  … {} of {} events written",
                    now - base,
                    target - base
                ));
                last_note = Instant::now();
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The baseline of figure 2: the same rows inserted straight into SQLite
/// (WAL, synchronous=NORMAL, one transaction) on the same disk.
fn sqlite_insert_rate(rows: usize, chats: usize) -> anyhow::Result<f64> {
    let dir = tempfile::tempdir()?;
    let mut conn = rusqlite::Connection::open(dir.path().join("baseline.sqlite3"))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.execute_batch(
        "CREATE TABLE events (conversation_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL,
         data TEXT NOT NULL, created INTEGER NOT NULL, PRIMARY KEY (conversation_id, seq)) WITHOUT ROWID;",
    )?;
    let chat_ids: Vec<String> = (0..chats).map(|i| format!("c_{i:020}")).collect();
    let started = Instant::now();
    let tx = conn.transaction()?;
    {
        let mut insert = tx.prepare_cached(
            "INSERT INTO events (conversation_id, seq, kind, data, created) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        for i in 0..rows {
            let chat = &chat_ids[i % chats];
            let seq = (i / chats + 1) as i64;
            let data = json!({"conversation_id": chat, "message_id": "m_0123456789abcdef0123", "run_id": "r_0123456789abcdef0123", "text": format!("w{seq} ")}).to_string();
            insert.execute(rusqlite::params![
                chat,
                seq,
                "text.delta",
                data,
                1_700_000_000i64
            ])?;
        }
    }
    tx.commit()?;
    Ok(rows as f64 / started.elapsed().as_secs_f64())
}

async fn throughput(sizes: &Sizes, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let (chats, tokens) = (sizes.tp_chats, sizes.tp_tokens);
    let total = chats * tokens;
    say(format!("\n## 2. durable events per second ({chats} chats × {tokens} tokens at tps=0, max_runs {chats})"));
    let sim = Sim::start(&[])?;
    let chatd = Chatd::start(&sim.url(), &[("QSE_CHAT_MAX_RUNS", &chats.to_string())]).await?;
    let client = chatd.client();
    let http = reqwest::Client::new();
    // Warm-up: one short answer.
    let warm = client.create_chat().await?;
    let sent = client.send(&warm, "[sim tokens=50 tps=0 id=warm]").await?;
    client
        .wait_run(
            &warm,
            sent["run_id"].as_str().unwrap_or(""),
            &["done"],
            Duration::from_secs(30),
        )
        .await?;

    let mut rates = Vec::new();
    for round in 0..sizes.tp_rounds {
        rates.push(throughput_round(&chatd, &client, &http, chats, tokens, round).await?);
    }
    rates.sort_by(f64::total_cmp);
    let rate = rates[rates.len() / 2];
    let mut baselines = Vec::new();
    for _ in 0..sizes.tp_rounds {
        baselines
            .push(tokio::task::spawn_blocking(move || sqlite_insert_rate(total, chats)).await??);
    }
    baselines.sort_by(f64::total_cmp);
    let baseline = baselines[baselines.len() / 2];
    let list = |v: &[f64]| {
        v.iter()
            .map(|r| format!("{r:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    say(format!(
        "chatd events/s by round (sorted): {}; median {rate:.0}",
        list(&rates)
    ));
    say(format!(
        "raw SQLite, {total} rows in one transaction, rows/s (sorted): {}; median {baseline:.0}",
        list(&baselines)
    ));
    let rounds = if sizes.tp_rounds > 1 {
        format!(", median of {}", sizes.tp_rounds)
    } else {
        String::new()
    };
    rows.push(
        row(
            format!("2. durable events/s ({chats} chats × {tokens} tokens{rounds})"),
            format!("{rate:.0} events/s"),
        )
        .aim("≥ 50,000 events/s", rate >= 50_000.0)
        .baseline(
            format!("raw SQLite insert {baseline:.0} rows/s"),
            format!("×{:.2}", rate / baseline),
        ),
    );
    Ok(())
}

/// One round: `chats` fresh chats answer `tokens` tokens each at once;
/// returns events committed per second.
async fn throughput_round(
    chatd: &Chatd,
    client: &Client,
    http: &reqwest::Client,
    chats: usize,
    tokens: usize,
    round: usize,
) -> anyhow::Result<f64> {
    let total = chats * tokens;
    let mut ids = Vec::new();
    for _ in 0..chats {
        ids.push(client.create_chat().await?);
    }
    let pid = chatd.pid().context("chatd pid")?;
    let sim_pid = child_pid("engine-sim");
    let cpu = || {
        (
            cpu_secs(pid),
            thread_cpu_secs(pid, "chatd-writer"),
            sim_pid.map(cpu_secs).unwrap_or(0.0),
        )
    };
    let cpu0 = cpu();
    let before = events_written(http, chatd).await?;
    let began = Instant::now();
    let texts: Vec<String> = (0..chats)
        .map(|i| format!("[sim tokens={tokens} tps=0 id=tp{round}-{i}]"))
        .collect();
    let sends = join_all(
        ids.iter()
            .zip(&texts)
            .map(|(chat, text)| client.send(chat, text)),
    )
    .await;
    let mut runs = Vec::new();
    for sent in sends {
        runs.push(sent?["run_id"].as_str().context("run_id")?.to_string());
    }
    let reached = wait_events(
        http,
        chatd,
        before + total as f64,
        Duration::from_secs(300),
        Some(before),
    )
    .await?;
    let wall = began.elapsed();
    let rate = (reached - before) / wall.as_secs_f64();
    let cpu1 = cpu();
    for (chat, run) in ids.iter().zip(&runs) {
        client
            .wait_run(chat, run, &["done"], Duration::from_secs(60))
            .await?;
    }
    let after = events_written(http, chatd).await?;
    let mut seqs = 0;
    for chat in &ids {
        seqs += client.snapshot(chat).await?["seq"].as_i64().unwrap_or(0);
    }
    say(format!(
        "round {}: {} events in {} = {rate:.0} events/s (all runs done: {} events written, \
         seqs sum to {seqs}); CPU: chatd {:.2} s (its writer thread {:.2} s), engine-sim {:.2} s",
        round + 1,
        reached - before,
        ms_f(wall),
        after - before,
        cpu1.0 - cpu0.0,
        cpu1.1 - cpu0.1,
        cpu1.2 - cpu0.2
    ));
    Ok(rate)
}

// ---------------------------------------------------------------------------
// Figure 3: snapshot + tail of a chat with 100,000 events
// ---------------------------------------------------------------------------

/// Snapshot, then attach after its seq until the stream's headers arrive.
async fn snapshot_attach(
    chatd: &Chatd,
    client: &Client,
    chat: &str,
) -> anyhow::Result<(Duration, i64)> {
    let began = Instant::now();
    let snapshot: Value = client.snapshot(chat).await?;
    let seq = snapshot["seq"].as_i64().context("snapshot seq")?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let stream = RawStream::open(chatd.port, &events_request(chat, seq), deadline).await?;
    let took = began.elapsed();
    drop(stream);
    Ok((took, seq))
}

/// Attach after `after` and read until the event `last` arrives; returns the
/// time and how many events came.
async fn tail(
    chatd: &Chatd,
    chat: &str,
    after: i64,
    last: i64,
) -> anyhow::Result<(Duration, usize)> {
    let began = Instant::now();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut s = RawStream::open(chatd.port, &events_request(chat, after), deadline).await?;
    let mut count = 0;
    let mut newest = after;
    let mut reset = false;
    loop {
        s.frames(|frame| {
            if let Some(id) = frame.strip_prefix(b"id: ") {
                let end = id.iter().position(|b| *b == b'\n').unwrap_or(id.len());
                newest = parse_u64(&id[..end]).map(|n| n as i64).unwrap_or(newest);
                count += 1;
                reset |= find(frame, b"event: reset\n").is_some();
            }
        });
        if reset {
            bail!("chatd answered a tail after {after} with a reset");
        }
        if newest >= last {
            return Ok((began.elapsed(), count));
        }
        if s.read_more(deadline).await?.is_none() {
            bail!("the stream ended after {count} events");
        }
    }
}

async fn snapshot(sizes: &Sizes, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let big_tokens = sizes.big_tokens;
    say(format!(
        "\n## 3. snapshot + tail of a chat with {big_tokens} text.delta events"
    ));
    let sim = Sim::start(&[])?;
    let mut chatd = Chatd::start(&sim.url(), &[]).await?;
    let client = chatd.client();
    let http = reqwest::Client::new();

    let small = client.create_chat().await?;
    let sent = client.send(&small, "[sim tokens=3 tps=0 id=small]").await?;
    client
        .wait_run(
            &small,
            sent["run_id"].as_str().unwrap_or(""),
            &["done"],
            Duration::from_secs(30),
        )
        .await?;

    let big = client.create_chat().await?;
    let before = events_written(&http, &chatd).await?;
    let began = Instant::now();
    let sent = client
        .send(&big, &format!("[sim tokens={big_tokens} tps=0 id=big]"))
        .await?;
    say(format!(
        "building the chat ({big_tokens} tokens at tps=0; progress every 5 s)…"
    ));
    let build_bound = Duration::from_secs(if big_tokens > 10_000 { 1_800 } else { 60 });
    wait_events(
        &http,
        &chatd,
        before + big_tokens as f64,
        build_bound,
        Some(before),
    )
    .await?;
    client
        .wait_run(
            &big,
            sent["run_id"].as_str().unwrap_or(""),
            &["done"],
            Duration::from_secs(120),
        )
        .await?;
    let build = began.elapsed();
    say(format!(
        "built in {:.1} s ({:.0} events/s on one chat)",
        build.as_secs_f64(),
        big_tokens as f64 / build.as_secs_f64()
    ));

    // Warm both paths once, then measure.
    snapshot_attach(&chatd, &client, &small).await?;
    snapshot_attach(&chatd, &client, &big).await?;
    let (mut small_times, mut big_times, mut tails) = (Vec::new(), Vec::new(), Vec::new());
    let mut seq = 0;
    let mut small_seq = 0;
    for _ in 0..sizes.repeats {
        let (t, s) = snapshot_attach(&chatd, &client, &small).await?;
        small_times.push(t);
        small_seq = s;
        let (t, s) = snapshot_attach(&chatd, &client, &big).await?;
        big_times.push(t);
        seq = s;
    }
    let tail_after = (seq - 1_999).max(0);
    let mut tail_count = 0;
    for _ in 0..sizes.repeats {
        let (t, n) = tail(&chatd, &big, tail_after, seq).await?;
        tails.push(t);
        tail_count = n;
    }
    let (small_med, big_med, big_max, tail_med, tail_max) = (
        median(small_times.clone()),
        median(big_times.clone()),
        big_times.iter().max().copied().unwrap_or_default(),
        median(tails.clone()),
        tails.iter().max().copied().unwrap_or_default(),
    );
    let snapshot_bytes = client
        .get(&format!("/conversations/{big}"))
        .await?
        .body
        .to_string()
        .len();
    say(format!(
        "snapshot+attach: {seq} events ({} KiB snapshot): median {} max {}; {small_seq} events: median {}",
        snapshot_bytes / 1024,
        ms_f(big_med),
        ms_f(big_max),
        ms_f(small_med)
    ));
    say(format!(
        "tail after {tail_after} ({tail_count} events, from the ring): median {} max {}",
        ms_f(tail_med),
        ms_f(tail_max)
    ));

    // The same tail with nothing in memory: after a restart it comes from SQLite.
    chatd.restart().await?;
    let mut cold = Vec::new();
    for _ in 0..sizes.repeats {
        cold.push(tail(&chatd, &big, tail_after, seq).await?.0);
    }
    let cold_med = median(cold);
    say(format!(
        "tail after a restart (from SQLite): median {}",
        ms_f(cold_med)
    ));

    let ratio =
        |a: Duration, b: Duration| format!("×{:.1}", a.as_secs_f64() / b.as_secs_f64().max(1e-9));
    rows.push(
        row(
            format!(
                "3. snapshot + attach, {seq} events ({} KiB)",
                snapshot_bytes / 1024
            ),
            format!("median {} / max {}", ms_f(big_med), ms_f(big_max)),
        )
        .aim("≤ 100 ms", big_max <= Duration::from_millis(100))
        .baseline(
            format!("{small_seq}-event chat {}", ms_f(small_med)),
            ratio(big_med, small_med),
        ),
    );
    rows.push(
        row(
            format!("3. tail after=seq-1999 ({tail_count} events, ring)"),
            format!("median {} / max {}", ms_f(tail_med), ms_f(tail_max)),
        )
        .aim("≤ 100 ms", tail_max <= Duration::from_millis(100))
        .baseline(
            format!("{small_seq}-event snapshot {}", ms_f(small_med)),
            ratio(tail_med, small_med),
        ),
    );
    rows.push(
        row(
            format!("3. same tail after restart ({tail_count} events, SQLite)"),
            format!("median {}", ms_f(cold_med)),
        )
        .aim("≤ 100 ms", cold_med <= Duration::from_millis(100))
        .baseline(
            format!("warm tail {}", ms_f(tail_med)),
            ratio(cold_med, tail_med),
        ),
    );
    Ok(())
}

/// Figure 5: `tandem status` as a script or a prompt runs it, with chatd,
/// egressd and the engine up; baseline `tandem --version` in the same
/// environment.
async fn status(sizes: &Sizes, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    say("\n## 5. tandem status wall time");
    let sim = Sim::start(&[])?;
    let chatd = Chatd::start(&sim.url(), &[]).await?;
    let tandem = tandem_tests::harness::bin_dir().join("tandem");
    let home = chatd.dir.path().to_path_buf();
    let egress_proxy = format!("127.0.0.1:{}", tandem_tests::harness::free_port());
    // hostexecd as root runs commands as `nobody`, whose way to the chats'
    // folders must be open (0711 down to them).
    let hx = tempfile::tempdir()?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(hx.path(), std::fs::Permissions::from_mode(0o711))?;
    }
    let config = hx.path().join("tandem.toml");
    std::fs::write(
        &config,
        format!("[hostexec]\nchat_data = \"{}\"\n", hx.path().display()),
    )?;
    let as_root = nix::unistd::geteuid().is_root();
    let time = |args: &'static [&'static str]| {
        let mut command = std::process::Command::new(&tandem);
        command
            .args(args)
            .env("HOME", &home)
            .env("XDG_RUNTIME_DIR", home.join("run"))
            .env("QSE_ROOT", &home)
            .env("QSE_CHAT_URL", chatd.url())
            .env("QSE_ENGINE_URL", sim.url())
            .env("QSE_EGRESS_PROXY", &egress_proxy)
            .env("QSE_CONFIG", &config)
            .env("QSE_HOSTEXEC_RUN_AS", if as_root { "nobody" } else { "" })
            .env("QSE_TANDEM_MANAGER", "processes")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let started = Instant::now();
        let status = command.status();
        (
            started.elapsed(),
            status.map(|s| s.success()).unwrap_or(false),
        )
    };
    // The whole suite up: egressd, hostexecd, triggerd and connectord too (tandem
    // status says so when one is not).
    let (_, egress_up) = time(&["egress", "start"]);
    anyhow::ensure!(egress_up, "tandem egress start failed");
    let (_, hostexec_up) = time(&["hostexec", "start"]);
    anyhow::ensure!(hostexec_up, "tandem hostexec start failed");
    let (_, triggers_up) = time(&["triggers", "start"]);
    anyhow::ensure!(triggers_up, "tandem triggers start failed");
    let (_, connectors_up) = time(&["connectors", "start"]);
    anyhow::ensure!(connectors_up, "tandem connectors start failed");
    let runs = sizes.repeats * 3;
    let mut status_times = Vec::new();
    let mut version_times = Vec::new();
    for _ in 0..runs {
        let (took, ok) = time(&["status"]);
        anyhow::ensure!(
            ok,
            "tandem status failed with chatd, egressd and the engine up"
        );
        status_times.push(took);
        version_times.push(time(&["--version"]).0);
    }
    let _ = time(&["egress", "stop"]);
    let _ = time(&["hostexec", "stop"]);
    let _ = time(&["triggers", "stop"]);
    let _ = time(&["connectors", "stop"]);
    let worst = status_times.iter().max().copied().unwrap_or_default();
    let status_median = median(status_times);
    let version_median = median(version_times);
    say(format!(
        "tandem status: median {} max {} over {runs} runs; tandem --version median {}",
        ms_f(status_median),
        ms_f(worst),
        ms_f(version_median)
    ));
    rows.push(
        row(
            "5. `tandem status` wall time, chatd and engine up",
            format!("median {} / max {}", ms_f(status_median), ms_f(worst)),
        )
        .aim("< 50 ms", status_median < Duration::from_millis(50))
        .baseline(
            format!("`tandem --version` {}", ms_f(version_median)),
            format!(
                "×{:.1}",
                status_median.as_secs_f64() / version_median.as_secs_f64().max(1e-6)
            ),
        ),
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// Figure 8: hostexecd's per-call overhead and stop-to-gone
// ---------------------------------------------------------------------------

/// Pids whose command line holds `marker`.
fn processes_with(marker: &str) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| {
                    String::from_utf8_lossy(&c)
                        .replace('\0', " ")
                        .contains(marker)
                })
                .unwrap_or(false)
        })
        .count()
}

/// Figure 8: `POST /exec` of `true` (sent to the `finished` event read)
/// against `bash -c true` spawned and waited for from Rust, one after the
/// other; then calls with three background sleeps, each stopped: the time
/// from sending the stop to the last of its processes gone from /proc.
async fn hostexec(quick: bool, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    say("\n## 8. hostexecd: per-call overhead, stop to the last process gone");
    let calls = if quick { 50 } else { 1_000 };
    let stops = if quick { 5 } else { 20 };
    let hx = tandem_tests::harness::Hostexecd::start("").await?;
    let bound = Duration::from_secs(30);
    // Warm-up: the first call makes the chat's folder and the caches.
    for _ in 0..5 {
        hx.exec("bench", "true", None, bound).await?;
    }
    let mut through = Vec::with_capacity(calls);
    for i in 0..calls {
        let started = Instant::now();
        let run = hx.exec("bench", "true", None, bound).await?;
        through.push(started.elapsed().as_micros() as i64);
        anyhow::ensure!(
            run.status == 200 && run.body["exit_code"] == 0,
            "call {i}: {run:?}"
        );
    }
    let mut plain = Vec::with_capacity(calls);
    for _ in 0..calls {
        let started = Instant::now();
        let status = std::process::Command::new("bash")
            .args(["-c", "true"])
            .stdin(std::process::Stdio::null())
            .status()?;
        plain.push(started.elapsed().as_micros() as i64);
        anyhow::ensure!(status.success(), "bash -c true failed");
    }
    let t = dist(through);
    let p = dist(plain);
    say(format!(
        "POST /exec true: median {} p99 {}; bash -c true: median {} p99 {} ({calls} calls each)",
        ms(t.p50),
        ms(t.p99),
        ms(p.p50),
        ms(p.p99)
    ));
    rows.push(
        row(
            format!("8. hostexecd call of `true` ({calls} calls)"),
            format!("median {} / p99 {}", ms(t.p50), ms(t.p99)),
        )
        .baseline(
            format!("`bash -c true` from Rust {} / {}", ms(p.p50), ms(p.p99)),
            format!("+{} median / +{} p99", ms(t.p50 - p.p50), ms(t.p99 - p.p99)),
        ),
    );
    let mut gone = Vec::with_capacity(stops);
    for i in 0..stops {
        let marker = format!("600.{}{i}", rand::random::<u32>());
        let command = format!(
            "sleep {marker} & setsid sleep {marker} & (sleep {marker} &); echo ready; sleep {marker}"
        );
        let mut stream = hx.exec_open("bench_stop", &command, None).await?;
        let first = stream.read_until(bound, |e| e["event"] == "output").await?;
        let call_id = first[0]["call_id"]
            .as_str()
            .context("the started event names the call")?
            .to_string();
        let until = Instant::now() + bound;
        while processes_with(&marker) < 4 {
            anyhow::ensure!(Instant::now() < until, "the call's sleeps did not start");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let started = Instant::now();
        let (status, _) = hx
            .call("POST", &format!("/exec/{call_id}/stop"), None)
            .await?;
        anyhow::ensure!(status == 200, "stop answered {status}");
        while processes_with(&marker) > 0 {
            anyhow::ensure!(
                Instant::now() < until,
                "the call's processes outlived the stop"
            );
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        gone.push(started.elapsed().as_micros() as i64);
        stream
            .read_until(bound, |e| e["event"] == "finished")
            .await?;
    }
    let g = dist(gone);
    say(format!(
        "stop to the last process gone: median {} max {} ({stops} calls, 4 sleeps each)",
        ms(g.p50),
        ms(g.max)
    ));
    rows.push(
        row(
            "8. hostexecd stop to the last process gone",
            format!("median {} / max {}", ms(g.p50), ms(g.max)),
        )
        .aim("< 1 s", g.max < 1_000_000),
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// Figure 9: the sandboxes' start, warm call and per-call overhead
// ---------------------------------------------------------------------------

/// Figure 9: the measuring is in `tandem_tests::sandboxbench`. Skipped, with
/// a line saying why, where podman cannot run (not root, no podman).
async fn sandbox(quick: bool, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    use tandem_tests::sandboxbench;
    say("\n## 9. sandbox: cold, stopped and warm starts to the first byte, per-call overhead");
    if let Some(why) = sandboxbench::unavailable() {
        say(format!("figure 9 SKIPPED: {why}"));
        return Ok(());
    }
    let began = Instant::now();
    let podman = sandboxbench::podman().await?;
    say(format!(
        "podman's API service and the busybox test image (`tandem sandbox build`): {:.1} s",
        began.elapsed().as_secs_f64()
    ));
    let sizes = sandboxbench::Sizes::new(quick);
    for l in sandboxbench::figure(&sizes, podman, &|line| say(line)).await? {
        let mut r = row(l.figure, l.measured);
        if let Some((aim, met)) = l.aim {
            r = r.aim(aim, met);
        }
        if let Some((baseline, ratio)) = l.baseline {
            r = r.baseline(baseline, ratio);
        }
        rows.push(r);
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Figure 10: triggerd with 10,000 triggers
// ---------------------------------------------------------------------------

/// Figure 10: the measuring is in `tandem_tests::triggerbench`.
async fn triggers(quick: bool, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    say("\n## 10. triggerd: next times, start, lateness of a due minute, idle CPU and RSS");
    let sizes = tandem_tests::triggerbench::Sizes::new(quick);
    for l in tandem_tests::triggerbench::figure(&sizes, &|line| say(line)).await? {
        let mut r = row(l.figure, l.measured);
        if let Some((aim, met)) = l.aim {
            r = r.aim(aim, met);
        }
        if let Some((baseline, ratio)) = l.baseline {
            r = r.baseline(baseline, ratio);
        }
        rows.push(r);
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Figure 11: connectord between a fake Bot API and chatd
// ---------------------------------------------------------------------------

/// Figure 11: the measuring is in `tandem_tests::connectorbench`.
async fn web(quick: bool, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    say("\n## 12. web page: chunk → DOM in headless Chromium, with other pages attached");
    let sizes = tandem_tests::webbench::Sizes::new(quick);
    for l in tandem_tests::webbench::figure(&sizes, &|line| say(line)).await? {
        let mut r = row(l.figure, l.measured);
        if let Some((aim, met)) = l.aim {
            r = r.aim(aim, met);
        }
        if let Some((baseline, ratio)) = l.baseline {
            r = r.baseline(baseline, ratio);
        }
        rows.push(r);
    }
    Ok(())
}

async fn connectors(quick: bool, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    say("\n## 11. connectord: messages/s through a fake Bot API, idle CPU and RSS of 10 bindings");
    let sizes = tandem_tests::connectorbench::Sizes::new(quick);
    for l in tandem_tests::connectorbench::figure(&sizes, &|line| say(line)).await? {
        let mut r = row(l.figure, l.measured);
        if let Some((aim, met)) = l.aim {
            r = r.aim(aim, met);
        }
        if let Some((baseline, ratio)) = l.baseline {
            r = r.baseline(baseline, ratio);
        }
        rows.push(r);
    }
    Ok(())
}

/// Figure 13: the measuring is in `tandem_tests::requestbench`.
async fn requests(quick: bool, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    say("\n## 13. message sent → request at the engine: the brief's egressd call");
    let sizes = tandem_tests::requestbench::Sizes::new(quick);
    for l in tandem_tests::requestbench::figure(&sizes, &|line| say(line)).await? {
        let mut r = row(l.figure, l.measured);
        if let Some((baseline, ratio)) = l.baseline {
            r = r.baseline(baseline, ratio);
        }
        rows.push(r);
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Figure 7: egressd against direct TCP and tinyproxy
// ---------------------------------------------------------------------------

/// Figure 7: the measuring is in `tandem_tests::egressbench`.
async fn egress(quick: bool, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    say("\n## 7. egressd: throughput, new CONNECTs/s, idle RSS");
    let sizes = tandem_tests::egressbench::Sizes::new(quick);
    for l in tandem_tests::egressbench::figure(&sizes, &|line| say(line)).await? {
        let mut r = row(l.figure, l.measured);
        if let Some((aim, met)) = l.aim {
            r = r.aim(aim, met);
        }
        if let Some((baseline, ratio)) = l.baseline {
            r = r.baseline(baseline, ratio);
        }
        rows.push(r);
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Figure 6: the agent tool loop
// ---------------------------------------------------------------------------

/// An agent run of N tool steps, each a `write_file` of ~4 KB and a
/// `read_file` of the same file, scripted on the simulator (`/sim/faults`)
/// at tps=0. chatd's overhead per step is the simulator's `at_us` of request
/// i+1 minus its `done_us` of request i; the baseline is the same requests
/// posted by the bench itself. The bytes: every request as chatd sent it
/// (with stubs) and as it would be with the scripted arguments put back
/// (without stubs).
mod toolloop {
    use super::*;
    use std::collections::HashMap;

    /// One scripted step: the two calls' names and exact argument texts.
    struct Step {
        calls: Vec<(&'static str, String)>,
    }

    /// ~4 KB of text that differs from step to step (64 lines of 64 bytes).
    fn content(step: usize) -> String {
        const WORDS: [&str; 16] = [
            "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
            "juliet", "kilo", "lima", "mike", "november", "oscar", "papa",
        ];
        let mut rng = (step as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut text = String::with_capacity(4_096);
        for line in 0..64 {
            let mut l = format!("step {step:03} line {line:02}:");
            while l.len() < 63 {
                rng = rng
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                l.push(' ');
                l.push_str(WORDS[(rng >> 60) as usize]);
            }
            l.truncate(63);
            text.push_str(&l);
            text.push('\n');
        }
        text
    }

    fn script(steps: usize) -> Vec<Step> {
        const DIRS: [&str; 4] = ["notes", "src/parts", "docs/drafts", "data"];
        const EXTS: [&str; 4] = ["md", "rs", "txt", "csv"];
        (0..steps)
            .map(|k| {
                let path = format!("{}/part-{k:03}.{}", DIRS[k % 4], EXTS[(k / 4) % 4]);
                let write = json!({"path": path, "content": content(k)}).to_string();
                let read = json!({"path": path}).to_string();
                Step {
                    calls: vec![("write_file", write), ("read_file", read)],
                }
            })
            .collect()
    }

    /// The `/sim/faults` queue: one answer of tool calls per step, then text.
    fn faults(script: &[Step]) -> Value {
        let mut next: Vec<Value> = script
            .iter()
            .map(|s| {
                let calls: Vec<Value> = s
                    .calls
                    .iter()
                    .map(|(name, args)| json!({"name": name, "arguments": args}))
                    .collect();
                json!({"tool_calls": calls})
            })
            .collect();
        next.push(json!({"tokens": 5}));
        Value::Array(next)
    }

    async fn sim_json(
        http: &reqwest::Client,
        method: reqwest::Method,
        url: String,
    ) -> anyhow::Result<Value> {
        let response = http
            .request(method, &url)
            .timeout(Duration::from_secs(60))
            .send()
            .await?;
        anyhow::ensure!(
            response.status().is_success(),
            "{url} answered {}",
            response.status()
        );
        Ok(response.json().await?)
    }

    /// The chat requests the sim logged, in order, each checked to have an answer.
    async fn logged(http: &reqwest::Client, sim: &Sim, want: usize) -> anyhow::Result<Vec<Value>> {
        let log = sim_json(
            http,
            reqwest::Method::GET,
            format!("{}/sim/requests", sim.url()),
        )
        .await?;
        let log = log.as_array().cloned().unwrap_or_default();
        anyhow::ensure!(
            log.len() == want,
            "the sim logged {} chat requests, expected {want}",
            log.len()
        );
        for (i, entry) in log.iter().enumerate() {
            anyhow::ensure!(
                entry["at_us"].is_u64() && entry["done_us"].is_u64(),
                "request {i} has no at_us/done_us: {}",
                entry["at_us"]
            );
        }
        Ok(log)
    }

    /// Per step: request i+1's arrival minus the end of answer i (µs).
    fn gaps(log: &[Value]) -> Vec<i64> {
        log.windows(2)
            .map(|w| w[1]["at_us"].as_i64().unwrap_or(0) - w[0]["done_us"].as_i64().unwrap_or(0))
            .collect()
    }

    async fn clear_log(http: &reqwest::Client, sim: &Sim) -> anyhow::Result<()> {
        sim_json(
            http,
            reqwest::Method::DELETE,
            format!("{}/sim/requests", sim.url()),
        )
        .await?;
        Ok(())
    }

    async fn tokenize_count(http: &reqwest::Client, sim: &Sim) -> anyhow::Result<u64> {
        let stats = sim_json(
            http,
            reqwest::Method::GET,
            format!("{}/sim/stats", sim.url()),
        )
        .await?;
        Ok(stats["tokenize_requests"].as_u64().unwrap_or(0))
    }

    /// A chat in auto mode (writes run without a card), its workspace made.
    async fn auto_chat(client: &Client, chatd: &Chatd) -> anyhow::Result<String> {
        let made = client
            .post("/conversations", json!({"permission_mode": "auto"}))
            .await?;
        anyhow::ensure!(made.status == 201, "create answered {made:?}");
        let id = made.body["id"].as_str().context("chat id")?.to_string();
        std::fs::create_dir_all(chatd.data_dir().join("workspaces").join(&id))?;
        Ok(id)
    }

    /// Sends `text` and waits for the run to end; it must end `done`. While
    /// the engine has not finished `answers` more answers, the bench asks the
    /// engine (`/sim/stats`), not chatd: polling chatd's snapshot of a chat
    /// of hundreds of KiB would take CPU from the loop it measures.
    async fn run_done(
        client: &Client,
        sim: &Sim,
        chat: &str,
        text: &str,
        answers: u64,
        bound: Duration,
    ) -> anyhow::Result<()> {
        let http = reqwest::Client::new();
        let stats = format!("{}/sim/stats", sim.url());
        let completed = |v: Value| v["completed"].as_u64().unwrap_or(0);
        let before = completed(sim_json(&http, reqwest::Method::GET, stats.clone()).await?);
        let sent = client.send(chat, text).await?;
        let run = sent["run_id"].as_str().context("run_id")?;
        tandem_tests::harness::wait_until("the engine's answers", bound, || async {
            let now = completed(
                sim_json(&http, reqwest::Method::GET, stats.clone())
                    .await
                    .ok()?,
            );
            (now >= before + answers).then_some(())
        })
        .await?;
        let record = client
            .wait_run(
                chat,
                run,
                &["done", "failed", "interrupted", "stopped", "paused"],
                bound,
            )
            .await?;
        anyhow::ensure!(record["status"] == "done", "the run ended: {record}");
        Ok(())
    }

    /// The baseline: the bench posts `bodies` to the sim one after the other,
    /// each as soon as the previous answer's stream has ended.
    async fn post_all(
        http: &reqwest::Client,
        sim: &Sim,
        bodies: &[bytes::Bytes],
    ) -> anyhow::Result<()> {
        let url = format!("{}/v1/chat/completions", sim.url());
        for body in bodies {
            let mut response = http
                .post(&url)
                .header("content-type", "application/json")
                .body(body.clone())
                .timeout(Duration::from_secs(60))
                .send()
                .await?;
            anyhow::ensure!(
                response.status().is_success(),
                "the sim answered {}",
                response.status()
            );
            while response.chunk().await?.is_some() {}
        }
        Ok(())
    }

    fn longest_common_prefix(a: &[u8], b: &[u8]) -> usize {
        a.iter().zip(b).take_while(|(x, y)| x == y).count()
    }

    /// `[m0,m1,...` (no closing bracket): the bytes a request's `messages`
    /// start with, so a request that only appends has it as a prefix.
    fn open_array(messages: &[Vec<u8>]) -> Vec<u8> {
        let mut out = vec![b'['];
        for (i, m) in messages.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(m);
        }
        out
    }

    /// Puts the scripted arguments back into every tool call (by call id).
    fn unstub(messages: &mut [Value], originals: &HashMap<String, String>) -> usize {
        let mut replaced = 0;
        for m in messages.iter_mut() {
            let Some(calls) = m.get_mut("tool_calls").and_then(Value::as_array_mut) else {
                continue;
            };
            for call in calls {
                let Some(original) = call["id"].as_str().and_then(|id| originals.get(id)) else {
                    continue;
                };
                if call["function"]["arguments"].as_str() != Some(original.as_str()) {
                    call["function"]["arguments"] = json!(original);
                    replaced += 1;
                }
            }
        }
        replaced
    }

    /// The byte figures of one variant of the run's requests.
    #[derive(Default)]
    struct ByteFigures {
        /// Body size of each request.
        body: Vec<usize>,
        /// Per request after the first: bytes standing where the engine's
        /// previous context (the previous request and the answer it
        /// generated) stood that differ from it.
        changed: Vec<i64>,
        /// Per request after the first: bytes of that previous context the
        /// request does not repeat as its prefix (what a prefix cache loses).
        lost: Vec<i64>,
        /// Per request after the first: bytes after the common prefix (what
        /// the engine must prefill: the changed bytes and the new messages).
        fresh: Vec<i64>,
        /// Requests whose messages extend the previous request's messages.
        extends_previous: usize,
    }

    /// `bodies`: the requests of the run in order; `originals`: call id →
    /// the arguments the model generated.
    fn measure(bodies: &[Value], originals: &HashMap<String, String>) -> ByteFigures {
        let mut out = ByteFigures::default();
        let ser = |v: &Value| serde_json::to_vec(v).unwrap_or_default();
        let mut prev: Option<Vec<Vec<u8>>> = None;
        for body in bodies {
            out.body.push(ser(body).len());
            let messages: Vec<Value> = body["messages"].as_array().cloned().unwrap_or_default();
            let each: Vec<Vec<u8>> = messages.iter().map(ser).collect();
            let whole = {
                let mut w = open_array(&each);
                w.push(b']');
                w
            };
            if let Some(prev) = prev.take() {
                let before = open_array(&prev);
                if longest_common_prefix(&whole, &before) == before.len() {
                    out.extends_previous += 1;
                }
                // The engine's context after the previous request: it and the
                // answer as generated (the scripted arguments).
                let np = prev.len();
                let mut context = prev.clone();
                let mut span = np;
                if let Some(answer) = messages.get(np).filter(|m| m["role"] == "assistant") {
                    let mut answer = vec![answer.clone()];
                    unstub(&mut answer, originals);
                    context.push(ser(&answer[0]));
                    span = np + 1;
                }
                let context = open_array(&context);
                let same_span = open_array(&each[..span.min(each.len())]).len();
                let common = longest_common_prefix(&whole, &context);
                out.changed.push(same_span.saturating_sub(common) as i64);
                out.lost.push(context.len().saturating_sub(common) as i64);
                out.fresh.push((whole.len() - common) as i64);
            }
            prev = Some(each);
        }
        out
    }

    fn mean(v: &[i64]) -> f64 {
        if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<i64>() as f64 / v.len() as f64
        }
    }

    fn med(v: &[i64]) -> i64 {
        let mut v = v.to_vec();
        v.sort_unstable();
        quantile(&v, 0.5)
    }

    fn size(bytes: f64) -> String {
        if bytes >= 1024.0 * 1024.0 {
            format!("{:.1} MiB", bytes / 1024.0 / 1024.0)
        } else if bytes >= 1024.0 {
            format!("{:.1} KiB", bytes / 1024.0)
        } else {
            format!("{bytes:.0} B")
        }
    }

    pub async fn figure(sizes: &Sizes, rows: &mut Vec<Row>) -> anyhow::Result<()> {
        let steps = sizes.tool_steps;
        say(format!(
            "\n## 6. agent tool loop ({steps} steps: write_file of ~4 KB, then read_file of it; sim at tps=0)"
        ));
        // A window no request of the run comes near: nothing is compacted.
        let sim = Sim::start(&["--tokens-per-second", "0", "--context-window", "4000000"])?;
        let max_steps = (steps + 20).min(1000).to_string();
        let chatd = Chatd::start(
            &sim.url(),
            &[
                ("QSE_CHAT_MAX_STEPS", max_steps.as_str()),
                ("QSE_CHAT_CONTEXT_WINDOW", "4000000"),
            ],
        )
        .await?;
        let client = chatd.client();
        let http = reqwest::Client::new();
        let bound = Duration::from_secs(60 + steps as u64);

        // Warm-up: a short tool run (engine connections, code paths).
        let warm = auto_chat(&client, &chatd).await?;
        sim.faults(faults(&script(2))).await?;
        run_done(&client, &sim, &warm, "warm-up", 3, bound).await?;
        // The baseline's connection too (no fault queued: a plain answer).
        post_all(
            &http,
            &sim,
            &[bytes::Bytes::from_static(
                br#"{"model":"sim-small","stream":true,"messages":[{"role":"user","content":"[sim tokens=1]"}]}"#,
            )],
        )
        .await?;
        clear_log(&http, &sim).await?;

        // The run through chatd.
        let script = script(steps);
        let chat = auto_chat(&client, &chatd).await?;
        let tokenized_before = tokenize_count(&http, &sim).await?;
        let pid = chatd.pid().context("chatd pid")?;
        let sim_pid = child_pid("engine-sim");
        let (c0, s0) = (cpu_secs(pid), sim_pid.map(cpu_secs).unwrap_or(0.0));
        sim.faults(faults(&script)).await?;
        let began = Instant::now();
        run_done(
            &client,
            &sim,
            &chat,
            &format!("write and read back {steps} files"),
            steps as u64 + 1,
            bound,
        )
        .await?;
        let wall = began.elapsed();
        let (chatd_cpu, sim_cpu) = (
            cpu_secs(pid) - c0,
            sim_pid.map(cpu_secs).unwrap_or(0.0) - s0,
        );
        let tokenized = tokenize_count(&http, &sim).await? - tokenized_before;
        let log = logged(&http, &sim, steps + 1).await?;
        let written = (0..steps)
            .filter(|k| {
                let path = serde_json::from_str::<Value>(&script[*k].calls[1].1)
                    .ok()
                    .and_then(|v| v["path"].as_str().map(str::to_string))
                    .unwrap_or_default();
                chatd
                    .data_dir()
                    .join("workspaces")
                    .join(&chat)
                    .join(path)
                    .is_file()
            })
            .count();
        anyhow::ensure!(
            written == steps,
            "{written} of {steps} files are in the workspace"
        );
        let through = gaps(&log);

        // The baseline: the same requests, posted by the bench.
        let bodies: Vec<Value> = log.iter().map(|e| e["body"].clone()).collect();
        let raw: Vec<bytes::Bytes> = bodies
            .iter()
            .map(|b| bytes::Bytes::from(serde_json::to_vec(b).unwrap_or_default()))
            .collect();
        let same_bytes = raw
            .iter()
            .zip(&log)
            .filter(|(r, e)| e["body_bytes"].as_u64() == Some(r.len() as u64))
            .count();
        clear_log(&http, &sim).await?;
        sim.faults(faults(&script)).await?;
        post_all(&http, &sim, &raw).await?;
        let floor = gaps(&logged(&http, &sim, steps + 1).await?);

        let chatd_d = dist(through.clone());
        let floor_d = dist(floor);
        let tenth = (steps / 10).max(1);
        let early = dist(through[..tenth].to_vec());
        let late = dist(through[through.len() - tenth..].to_vec());
        say(format!(
            "through chatd: {} requests in {:.2} s; per step median {} p99 {} max {} \
             (first {tenth} steps median {}, last {tenth} median {}); CPU chatd {chatd_cpu:.2} s, \
             engine-sim {sim_cpu:.2} s; chatd also sent {tokenized} /v1/tokenize requests",
            log.len(),
            wall.as_secs_f64(),
            ms(chatd_d.p50),
            ms(chatd_d.p99),
            ms(chatd_d.max),
            ms(early.p50),
            ms(late.p50)
        ));
        say(format!(
            "client floor (the bench posts the same {} bodies, {same_bytes} of them byte for byte \
             chatd's size): per step median {} p99 {} max {}",
            raw.len(),
            ms(floor_d.p50),
            ms(floor_d.p99),
            ms(floor_d.max)
        ));

        // Bytes: with stubs as sent; without, the scripted arguments put back.
        let mut originals = HashMap::new();
        let last = bodies.last().context("no request")?;
        let answers: Vec<&Value> = last["messages"]
            .as_array()
            .context("messages")?
            .iter()
            .filter(|m| m["role"] == "assistant" && m["tool_calls"].is_array())
            .collect();
        anyhow::ensure!(
            answers.len() == steps,
            "the last request holds {} answers with tool calls, expected {steps}",
            answers.len()
        );
        for (step, answer) in script.iter().zip(answers) {
            let calls = answer["tool_calls"].as_array().context("tool_calls")?;
            anyhow::ensure!(calls.len() == step.calls.len(), "calls per answer");
            for (call, (name, args)) in calls.iter().zip(&step.calls) {
                anyhow::ensure!(call["function"]["name"] == *name, "call order");
                originals.insert(
                    call["id"].as_str().context("call id")?.to_string(),
                    args.clone(),
                );
            }
        }
        let mut unstubbed = bodies.clone();
        let mut stubbed_calls = 0;
        for body in &mut unstubbed {
            if let Some(m) = body["messages"].as_array_mut() {
                // The last request's count is the one that matters: it holds every call.
                stubbed_calls = unstub(m, &originals);
            }
        }
        let with = measure(&bodies, &originals);
        let without = measure(&unstubbed, &originals);
        let line = |name: &str, b: &ByteFigures| {
            let total: usize = b.body.iter().sum();
            format!(
                "{name}: total {} over {} requests, mean {} per request (last {}); changed per \
                 step mean {:.0} B median {} B; engine context lost mean {:.0} B; after the common \
                 prefix mean {}; {} of {} requests extend the previous request's messages",
                size(total as f64),
                b.body.len(),
                size(total as f64 / b.body.len().max(1) as f64),
                size(b.body.last().copied().unwrap_or(0) as f64),
                mean(&b.changed),
                med(&b.changed),
                mean(&b.lost),
                size(mean(&b.fresh)),
                b.extends_previous,
                b.body.len().saturating_sub(1)
            )
        };
        say(format!(
            "stubbed calls in the last request: {stubbed_calls} (of {} calls). \"changed\": bytes of a \
             request, where the previous request and the answer generated for it stood, that differ \
             from them (0: a pure extension); \"engine context lost\": bytes of that context a prefix \
             cache cannot reuse; \"after the common prefix\": what the engine must prefill",
            steps * 2
        ));
        say(line("with stubs (as chatd sent them)", &with));
        say(line(
            "without stubs (scripted arguments put back)",
            &without,
        ));

        let (total_with, total_without) = (
            with.body.iter().sum::<usize>() as f64,
            without.body.iter().sum::<usize>() as f64,
        );
        let n = with.body.len().max(1) as f64;
        rows.push(
            row(
                format!("6. tool-loop overhead per step ({steps} steps: write 4 KB + read it)"),
                format!("median {} / p99 {}", ms(chatd_d.p50), ms(chatd_d.p99)),
            )
            .baseline(
                format!(
                    "client floor (same requests posted straight to the engine) median {} / p99 {}",
                    ms(floor_d.p50),
                    ms(floor_d.p99)
                ),
                format!(
                    "×{:.1} median, ×{:.1} p99",
                    chatd_d.p50 as f64 / floor_d.p50.max(1) as f64,
                    chatd_d.p99 as f64 / floor_d.p99.max(1) as f64
                ),
            ),
        );
        rows.push(
            row(
                format!(
                    "6. request bytes, with stubs ({} requests)",
                    with.body.len()
                ),
                format!(
                    "total {}, mean {} per request",
                    size(total_with),
                    size(total_with / n)
                ),
            )
            .baseline(
                format!(
                    "without stubs: total {}, mean {} per request",
                    size(total_without),
                    size(total_without / n)
                ),
                format!("×{:.2}", total_with / total_without.max(1.0)),
            ),
        );
        let changed_ratio = if mean(&without.changed) > 0.0 {
            format!("×{:.2}", mean(&with.changed) / mean(&without.changed))
        } else {
            "— (none without stubs)".to_string()
        };
        rows.push(
            row(
                "6. changed bytes per step, with stubs",
                format!(
                    "mean {:.0} B / median {} B",
                    mean(&with.changed),
                    med(&with.changed)
                ),
            )
            .baseline(
                format!(
                    "without stubs: mean {:.0} B / median {} B",
                    mean(&without.changed),
                    med(&without.changed)
                ),
                changed_ratio,
            ),
        );
        Ok(())
    }
}
