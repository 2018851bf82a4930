//! `bench`: tandem's benchmarks, run against the real `engine-sim` and
//! `chatd` processes on 127.0.0.1.
//!
//! Figures (each with its aim and a baseline measured in the same run):
//! 1. relay: added latency of a `text.delta` from the engine to 1, 100 and
//!    1,000 attached devices, against a client reading the engine directly;
//! 2. throughput: durable events per second, against raw SQLite inserts;
//! 3. snapshot: snapshot + attach, and a 1,999-event tail, on a chat of
//!    100,000 events, against the same on a chat of ~10 events;
//! 4. rss: chatd's resident memory idle and busy (1,000 devices).
//!
//! Build with `cargo build --release --workspace`, then `target/release/bench`.
//! `--quick` shrinks everything for a smoke run (well under a minute).

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use clap::{Parser, ValueEnum};
use futures_util::future::join_all;
use serde_json::{json, Value};
use tandem_tests::harness::{Chatd, Client, Sim, FORWARD_KEY};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// tandem's benchmarks against the real engine-sim and chatd processes.
#[derive(Parser, Debug)]
#[command(name = "bench")]
struct Args {
    /// Shrink every figure for a smoke run (finishes well under 60 s).
    #[arg(long)]
    quick: bool,
    /// Run one figure only (`rss` runs the relay figure, which measures it).
    #[arg(long, value_enum)]
    only: Option<Figure>,
    /// Also write the final table (markdown) to this file.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Figure {
    Relay,
    Throughput,
    Snapshot,
    Rss,
}

/// How big each figure's workload is.
struct Sizes {
    relay_tokens: usize,
    relay_tps: f64,
    levels: Vec<usize>,
    tp_chats: usize,
    tp_tokens: usize,
    big_tokens: usize,
    repeats: usize,
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
                big_tokens: 5_000,
                repeats: 3,
            }
        } else {
            Sizes {
                relay_tokens: 300,
                relay_tps: 150.0,
                levels: vec![1, 100, 1_000],
                tp_chats: 8,
                tp_tokens: 10_000,
                big_tokens: 100_000,
                repeats: 7,
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
    // Before any thread or child exists, so chatd and engine-sim inherit it.
    let nofile = raise_nofile(16_384);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(args, nofile))
}

async fn run(args: Args, nofile: (u64, u64)) -> anyhow::Result<()> {
    let sizes = Sizes::new(args.quick);
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
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0.0 };
    let Some(close) = stat.rfind(')') else { return 0.0 };
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
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

    /// Reads once; returns the receive time (unix µs), or `None` at the end.
    async fn read_more(&mut self, deadline: tokio::time::Instant) -> anyhow::Result<Option<i64>> {
        if self.ended {
            return Ok(None);
        }
        let n = tokio::time::timeout_at(deadline, self.sock.read(&mut self.buf))
            .await
            .context("read timed out")??;
        let at = now_micros();
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
        let mut pos = 0;
        loop {
            match self.chunk_left {
                None => {
                    let Some(eol) = find(&self.raw[pos..], b"\r\n") else {
                        break;
                    };
                    let line = &self.raw[pos..pos + eol];
                    let hex = line.split(|b| *b == b';').next().unwrap_or_default();
                    let size = std::str::from_utf8(hex)
                        .ok()
                        .and_then(|h| usize::from_str_radix(h.trim(), 16).ok())
                        .unwrap_or(0);
                    pos += eol + 2;
                    if size == 0 {
                        self.ended = true;
                        break;
                    }
                    self.chunk_left = Some(size);
                }
                Some(0) => {
                    // The CRLF after a chunk's data.
                    if self.raw.len() - pos < 2 {
                        break;
                    }
                    pos += 2;
                    self.chunk_left = None;
                }
                Some(left) => {
                    let take = left.min(self.raw.len() - pos);
                    if take == 0 {
                        break;
                    }
                    self.body.extend_from_slice(&self.raw[pos..pos + take]);
                    pos += take;
                    self.chunk_left = Some(left - take);
                }
            }
        }
        self.raw.drain(..pos);
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

fn events_request(chat: &str, after: i64) -> Vec<u8> {
    format!(
        "GET /v1/chat-app/conversations/{chat}/events?after={after} HTTP/1.1\r\nHost: 127.0.0.1\r\n\
         X-Forward-Key: {FORWARD_KEY}\r\nAccept: text/event-stream\r\n\r\n"
    )
    .into_bytes()
}

/// What one device saw of a run.
#[derive(Default)]
struct Seen {
    /// Receive time minus the engine's stamp, per token (µs).
    latencies: Vec<i64>,
    finished: bool,
}

/// Reads a chatd event stream until `run.finished` (or the deadline):
/// the latency of every stamped `text.delta`.
async fn read_deltas(
    mut s: RawStream,
    expect: usize,
    deadline: tokio::time::Instant,
) -> anyhow::Result<Seen> {
    let mut seen = Seen {
        latencies: Vec::with_capacity(expect),
        finished: false,
    };
    let mut at = now_micros();
    loop {
        s.frames(|frame| {
            if find(frame, b"event: text.delta\n").is_some() {
                if let Some((_, stamp)) = stamp_after(frame, b"\"text\":\"w") {
                    seen.latencies.push(at - stamp);
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
            None => bail!("the stream ended after {} deltas", seen.latencies.len()),
        }
    }
}

/// The baseline of figure 1: a client reading the engine's own stream.
async fn direct_latencies(
    sim_port: u16,
    tokens: usize,
    tps: f64,
    bound: Duration,
) -> anyhow::Result<Vec<i64>> {
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
    let mut latencies = Vec::with_capacity(tokens);
    let mut done = false;
    let mut at = now_micros();
    loop {
        s.frames(|frame| {
            if let Some((_, stamp)) = stamp_after(frame, b"\"content\":\"w") {
                latencies.push(at - stamp);
            } else if find(frame, b"data: [DONE]").is_some() {
                done = true;
            }
        });
        if done {
            return Ok(latencies);
        }
        match s.read_more(deadline).await? {
            Some(t) => at = t,
            None => bail!("the engine stream ended after {} tokens", latencies.len()),
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
/// every device's latencies and the fewest tokens any device got.
async fn relay_once(
    chatd: &Chatd,
    client: &Client,
    devices: usize,
    tokens: usize,
    tps: f64,
    id: &str,
) -> anyhow::Result<(Vec<i64>, usize)> {
    let chat = client.create_chat().await?;
    let seq = client.snapshot(&chat).await?["seq"].as_i64().unwrap_or(0);
    let request = events_request(&chat, seq);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    // Attach in waves, each device's headers received before the next wave.
    let mut streams = Vec::with_capacity(devices);
    while streams.len() < devices {
        let wave = (devices - streams.len()).min(100);
        let opened =
            join_all((0..wave).map(|_| RawStream::open(chatd.port, &request, deadline))).await;
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
    client
        .send(
            &chat,
            &format!("[sim tokens={tokens} tps={tps} stamp=1 id={id}]"),
        )
        .await?;
    let mut all = Vec::with_capacity(devices * tokens);
    let mut fewest = usize::MAX;
    for (i, reader) in readers.into_iter().enumerate() {
        let seen = reader
            .await
            .context("device task")?
            .with_context(|| format!("device {i}"))?;
        fewest = fewest.min(seen.latencies.len());
        all.extend(seen.latencies);
    }
    Ok((all, fewest))
}

async fn relay(sizes: &Sizes, rows: &mut Vec<Row>, nofile: u64) -> anyhow::Result<()> {
    let (tokens, tps) = (sizes.relay_tokens, sizes.relay_tps);
    say(format!(
        "\n## 1. token relay latency ({tokens} tokens at {tps} tokens/s, stamp=1)"
    ));
    let most = sizes.levels.iter().copied().max().unwrap_or(1);
    if (most as u64) * 2 + 200 > nofile {
        bail!("{most} devices need ~{} open files here and in chatd; the limit is {nofile} (raise `ulimit -n`)", most * 2 + 200);
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
    let direct = dist(direct_latencies(sim.port, tokens, tps, Duration::from_secs(120)).await?);
    say(format!(
        "direct (client reads the engine): p50 {} p99 {} max {} ({} tokens)",
        ms(direct.p50),
        ms(direct.p99),
        ms(direct.max),
        direct.n
    ));
    let mut busy = 0;
    for &devices in &sizes.levels {
        let sampler = (devices == most).then(|| RssSampler::start(pid, Duration::from_secs(600)));
        let cpu = |p: Option<u32>| p.map(cpu_secs).unwrap_or(0.0);
        let (me, sim_pid) = (std::process::id(), child_pid("engine-sim"));
        let (c0, b0, s0, w0) = (cpu(Some(pid)), cpu(Some(me)), cpu(sim_pid), Instant::now());
        let (latencies, fewest) = relay_once(
            &chatd,
            &client,
            devices,
            tokens,
            tps,
            &format!("relay{devices}"),
        )
        .await?;
        say(format!(
            "{devices:>5} devices: CPU over {:.1} s: chatd {:.2} s, bench (the devices) {:.2} s, engine-sim {:.2} s",
            w0.elapsed().as_secs_f64(),
            cpu(Some(pid)) - c0,
            cpu(Some(me)) - b0,
            cpu(sim_pid) - s0
        ));
        if let Some(sampler) = sampler {
            busy = sampler.peak().await;
        }
        let through = dist(latencies);
        let (added50, added99) = (through.p50 - direct.p50, through.p99 - direct.p99);
        say(format!(
            "{devices:>5} devices: through chatd p50 {} p99 {} max {} ({} samples, fewest per device {fewest}/{tokens}); added p50 {} p99 {}",
            ms(through.p50),
            ms(through.p99),
            ms(through.max),
            through.n,
            ms(added50),
            ms(added99)
        ));
        if fewest < tokens {
            say(format!(
                "  WARNING: a device got {fewest} of {tokens} deltas"
            ));
        }
        let mut r = row(
            format!(
                "1. relay added latency, {devices} device{}",
                if devices == 1 { "" } else { "s" }
            ),
            format!(
                "added p50 {} / p99 {} (through chatd p50 {} / p99 {} / max {})",
                ms(added50),
                ms(added99),
                ms(through.p50),
                ms(through.p99),
                ms(through.max)
            ),
        )
        .baseline(
            format!(
                "direct from engine p50 {} / p99 {}",
                ms(direct.p50),
                ms(direct.p99)
            ),
            format!("p99 ×{:.1}", through.p99 as f64 / direct.p99.max(1) as f64),
        );
        if devices == most {
            let aim = if most == 1_000 {
                "p99 added ≤ 2 ms at 1,000 devices".to_string()
            } else {
                format!("p99 added ≤ 2 ms (quick: {most} devices, aim is at 1,000)")
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

    let mut ids = Vec::new();
    for _ in 0..chats {
        ids.push(client.create_chat().await?);
    }
    let before = events_written(&http, &chatd).await?;
    let began = Instant::now();
    let texts: Vec<String> = (0..chats)
        .map(|i| format!("[sim tokens={tokens} tps=0 id=tp{i}]"))
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
        &http,
        &chatd,
        before + total as f64,
        Duration::from_secs(300),
        Some(before),
    )
    .await?;
    let wall = began.elapsed();
    let rate = (reached - before) / wall.as_secs_f64();
    for (chat, run) in ids.iter().zip(&runs) {
        client
            .wait_run(chat, run, &["done"], Duration::from_secs(60))
            .await?;
    }
    let after = events_written(&http, &chatd).await?;
    let mut seqs = 0;
    for chat in &ids {
        seqs += client.snapshot(chat).await?["seq"].as_i64().unwrap_or(0);
    }
    say(format!(
        "chatd: {} events in {} = {rate:.0} events/s (all runs done: {} events written, seqs of the chats sum to {seqs})",
        reached - before,
        ms_f(wall),
        after - before
    ));
    let baseline = tokio::task::spawn_blocking(move || sqlite_insert_rate(total, chats)).await??;
    say(format!(
        "raw SQLite: {total} rows in one transaction = {baseline:.0} rows/s"
    ));
    rows.push(
        row(
            format!("2. durable events/s ({chats} chats × {tokens} tokens)"),
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
