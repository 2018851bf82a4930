//! Figure 11 of `bench`: connectord (the real binary) between a fake
//! Telegram Bot API (`fakebot`) and the real chatd and engine-sim
//! (`--tokens-per-second 0`, answers of 2 – 11 tokens).
//!
//! - **Messages per second.** `messages` private messages from `senders`
//!   allowed senders (user ids in the binding's allowlist, conversation
//!   `sender`: one chat each) pushed into the fake at once, round robin,
//!   message `j` of a sender asking for `2 + j` tokens (`[sim tokens=…]`),
//!   so an answer's length says which message its run reached last. A
//!   message is answered when an answer (sendMessage or editMessageText
//!   whose shown text is the stored answer, trimmed) of a run that reached
//!   it arrives at the fake, at the fake's clock. Measured from the first
//!   push to the last answer; latency per message push → its answer.
//!   Each sender sends at most 10 (connectord takes 20 a minute).
//!   reply_mode `off` (no progress edits: one post per answer, sent at
//!   once), then `progress` with new senders, then a second connectord
//!   with `edit_ms = 50` (`progress` too): a "Working…" post and the answer
//!   that replaces it (an edit) take turns of the binding's edit pacer
//!   (400 ms by default), so the two `progress` bursts show what the pacer
//!   costs. *Baseline:* the bench making the same messages straight through
//!   chatd's API, one task per sender at once (its chat made with the
//!   agent, origin `connector`, each message sent when the previous run
//!   ended, its events to `run.finished`); for the `edit_ms` 50 burst, the
//!   `progress` burst at 400 ms.
//! - **Idle.** A connectord long polling 10 bindings (10 fakes, one token
//!   each, behind a small routing proxy of the bench, since connectord has
//!   one Bot API base) and one with none, at once, over `idle`: VmRSS,
//!   utime + stime from `/proc/<pid>/stat` and the threads' schedstat
//!   (finer), and the getUpdates calls the fakes saw in the window.
//!
//! Every wait is bounded; every process is stopped on the way out (the
//! harness's drops).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use futures_util::future::join_all;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::connectord::{socket_in, Connectord};
use crate::egressbench::{cpu_secs, loadavg, rss_kib, Line};
use crate::fakebot::{FakeBot, Sent};
use crate::harness::{sim_answer, wait_until, Chatd, Client, Sim};

/// How big the figure's workload is.
#[derive(Debug, Clone)]
pub struct Sizes {
    /// Messages of the `off` burst.
    pub messages: usize,
    /// Allowed senders they come from.
    pub senders: usize,
    /// Messages of each `progress` burst (`edit_ms` 400, then 50), from
    /// `senders` new senders (fewer if fewer messages).
    pub progress_messages: usize,
    /// Bindings of the idle connectord.
    pub bindings: usize,
    /// How long idle CPU and RSS are measured.
    pub idle: Duration,
    /// The pause after every binding polls, before the idle window.
    pub settle: Duration,
}

impl Sizes {
    pub fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                messages: 40,
                senders: 8,
                progress_messages: 8,
                bindings: 10,
                idle: Duration::from_secs(3),
                settle: Duration::from_secs(1),
            }
        } else {
            Sizes {
                messages: 200,
                senders: 20,
                progress_messages: 100,
                bindings: 10,
                idle: Duration::from_secs(30),
                settle: Duration::from_secs(3),
            }
        }
    }
}

const TOKEN: &str = "424242:AAE-bench-bot-token-for-figure-11";
const FAST_TOKEN: &str = "434343:AAE-bench-bot-token-edit-ms-50";
/// Sender ids of each burst: base + k.
const OFF_BASE: i64 = 10_000;
const PROGRESS_BASE: i64 = 20_000;
const FAST_BASE: i64 = 30_000;
const WARM: i64 = 999;

fn line(figure: impl Into<String>, measured: impl Into<String>) -> Line {
    Line {
        figure: figure.into(),
        measured: measured.into(),
        aim: None,
        baseline: None,
    }
}

fn with_baseline(mut l: Line, baseline: impl Into<String>, ratio: impl Into<String>) -> Line {
    l.baseline = Some((baseline.into(), ratio.into()));
    l
}

#[derive(Debug, Clone, Copy, Default)]
struct Dist {
    p50: f64,
    p99: f64,
    max: f64,
}

/// p50 / p99 / max of milliseconds.
fn dist(mut v: Vec<f64>) -> Dist {
    v.sort_by(f64::total_cmp);
    let q = |q: f64| {
        if v.is_empty() {
            return 0.0;
        }
        let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
        v[rank - 1]
    };
    Dist {
        p50: q(0.5),
        p99: q(0.99),
        max: v.last().copied().unwrap_or(0.0),
    }
}

fn dist_text(d: Dist) -> String {
    format!("p50 {:.0} ms / p99 {:.0} ms", d.p50, d.p99)
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// The text of message `j` of a sender: its answer is `2 + j` tokens.
fn text_of(j: usize, sender: i64) -> String {
    format!(
        "Message {j} from {sender}: what is on today? [sim tokens={}]",
        2 + j
    )
}

/// The tokens of a shown answer if it is a whole simulator answer
/// (`w0 w1 … w{n-1}`, trimmed as connectord posts it).
fn answer_len(visible: &str) -> Option<usize> {
    let n = visible.split_whitespace().count();
    (n > 0 && visible == sim_answer(n).trim_end()).then_some(n)
}

/// Per chat id: each answer's last message index and when it arrived.
fn answers(sent: &[Sent]) -> HashMap<String, Vec<(usize, Instant)>> {
    let mut out: HashMap<String, Vec<(usize, Instant)>> = HashMap::new();
    for s in sent {
        if s.method != "sendMessage" && s.method != "editMessageText" {
            continue;
        }
        if let Some(n) = answer_len(&s.visible).filter(|n| *n >= 2) {
            out.entry(s.chat_id.clone())
                .or_default()
                .push((n - 2, s.at));
        }
    }
    out
}

/// A binding body for chatd's or connectord's API.
fn binding(token: &str, agent: &str, allow: &[i64], reply_mode: &str) -> Value {
    json!({"kind": "telegram", "name": "Bench", "token": token, "agent_id": agent,
           "allowlist": allow.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
           "reply_mode": reply_mode, "conversation": "sender"})
}

/// Of what the fake was sent: "Working…" posts or edits, and answers
/// that replaced a shown message (edits, each after a turn of the pacer).
fn paced(sent: &[Sent]) -> (usize, usize) {
    let working = sent
        .iter()
        .filter(|s| s.visible.starts_with("Working"))
        .count();
    let edited = sent
        .iter()
        .filter(|s| s.method == "editMessageText" && answer_len(&s.visible).is_some())
        .count();
    (working, edited)
}

fn allowlist(sizes: &Sizes) -> Vec<i64> {
    let mut allow = vec![WARM];
    for k in 0..sizes.senders.max(sizes.progress_messages) as i64 {
        allow.extend([OFF_BASE + k, PROGRESS_BASE + k, FAST_BASE + k]);
    }
    allow
}

/// Waits for a getUpdates after `calls` (the binding says `connected`
/// only once a poll has returned, up to 30 s later on a quiet bot).
async fn wait_polling(bot: &FakeBot, calls: usize) -> anyhow::Result<()> {
    bot.wait_for("a getUpdates", Duration::from_secs(20), |b| {
        (b.get_updates_calls() > calls).then_some(())
    })
    .await
}

/// One message from `sender` asking for 2 tokens, and its answer seen.
async fn warm_up(bot: &FakeBot, sender: i64) -> anyhow::Result<()> {
    let chat = sender.to_string();
    let before = answers(&bot.sent()).get(&chat).map_or(0, Vec::len);
    bot.push_private(sender, "warm", &text_of(0, sender));
    bot.wait_for("the warm-up answer", Duration::from_secs(30), |b| {
        (answers(&b.sent()).get(&chat).map_or(0, Vec::len) > before).then_some(())
    })
    .await?;
    // The binding's edit turn free again.
    tokio::time::sleep(Duration::from_millis(500)).await;
    Ok(())
}

struct Burst {
    n: usize,
    wall: Duration,
    latency: Dist,
    answers: usize,
    cd_cpu: f64,
    chatd_cpu: f64,
    sim_cpu: f64,
}

impl Burst {
    fn rate(&self) -> f64 {
        self.n as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// Pids whose processes the bench watches for CPU.
struct Pids {
    cd: u32,
    chatd: u32,
    sim: u32,
}

fn cpus(p: &Pids) -> (f64, f64, f64) {
    (cpu_secs(p.cd), cpu_secs(p.chatd), cpu_secs(p.sim))
}

/// `n` messages from `senders` senders (ids `base + k`) pushed at once;
/// waits for every one's answer.
async fn burst(
    bot: &FakeBot,
    n: usize,
    senders: usize,
    base: i64,
    pids: &Pids,
) -> anyhow::Result<Burst> {
    let senders = senders.clamp(1, n.max(1));
    let c0 = cpus(pids);
    let mut pushed = Vec::with_capacity(n);
    let first = Instant::now();
    for i in 0..n {
        let (k, j) = ((i % senders) as i64, i / senders);
        let sender = base + k;
        bot.push_private(sender, &format!("s{sender}"), &text_of(j, sender));
        pushed.push((sender.to_string(), j, Instant::now()));
    }
    // The last index each sender sent.
    let mut last: HashMap<String, usize> = HashMap::new();
    for (chat, j, _) in &pushed {
        let e = last.entry(chat.clone()).or_default();
        *e = (*e).max(*j);
    }
    let bound = Duration::from_secs(30) + Duration::from_millis(600 * n as u64);
    let seen = bot
        .wait_for("every message answered", bound, |b| {
            let got = answers(&b.sent());
            last.iter()
                .all(|(chat, j)| {
                    got.get(chat)
                        .is_some_and(|a| a.iter().any(|(reached, _)| reached >= j))
                })
                .then_some(got)
        })
        .await?;
    let c1 = cpus(pids);
    let mut latencies = Vec::with_capacity(n);
    let mut end = first;
    for (chat, j, at) in &pushed {
        let answered = seen[chat]
            .iter()
            .filter(|(reached, _)| reached >= j)
            .map(|(_, t)| *t)
            .min()
            .context("an answer")?;
        end = end.max(answered);
        latencies.push(answered.saturating_duration_since(*at).as_secs_f64() * 1000.0);
    }
    let answers = last
        .keys()
        .map(|chat| seen.get(chat).map_or(0, Vec::len))
        .sum();
    Ok(Burst {
        n,
        wall: end.duration_since(first),
        latency: dist(latencies),
        answers,
        cd_cpu: c1.0 - c0.0,
        chatd_cpu: c1.1 - c0.1,
        sim_cpu: c1.2 - c0.2,
    })
}

/// The baseline: the same messages made by the bench straight through
/// chatd's API, one task per sender at once, each message sent when the
/// previous run ended.
async fn direct(
    client: &Client,
    agent: &str,
    n: usize,
    senders: usize,
    pids: &Pids,
) -> anyhow::Result<Burst> {
    let senders = senders.clamp(1, n.max(1));
    let c0 = cpus(pids);
    let first = Instant::now();
    let tasks = (0..senders).map(|k| async move {
        let sender = 40_000 + k as i64;
        let made = client
            .post(
                "/conversations",
                json!({"title": format!("Bench · {sender}"), "agent_id": agent, "origin": "connector"}),
            )
            .await?;
        ensure!(made.status == 201, "making a chat: {made:?}");
        let chat = made.body["id"].as_str().context("chat id")?.to_string();
        let mut events = client.events(&chat, 0).await?;
        let mut done = Vec::new();
        let mut j = 0;
        while j * senders + k < n {
            let sent = client
                .post(
                    &format!("/conversations/{chat}/messages"),
                    json!({"text": text_of(j, sender), "origin": "connector",
                           "key": format!("bench-{sender}-{j}")}),
                )
                .await?;
            ensure!(sent.status == 202, "send: {sent:?}");
            let run = sent.body["run_id"]
                .as_str()
                .with_context(|| format!("no run started: {}", sent.body))?
                .to_string();
            events
                .read_until(Duration::from_secs(30), |e| {
                    e.kind == "run.finished" && e.data["run_id"] == run.as_str()
                })
                .await?;
            done.push(first.elapsed().as_secs_f64() * 1000.0);
            j += 1;
        }
        anyhow::Ok(done)
    });
    let mut latencies = Vec::with_capacity(n);
    for done in join_all(tasks).await {
        latencies.extend(done?);
    }
    let wall = first.elapsed();
    let c1 = cpus(pids);
    Ok(Burst {
        n,
        wall,
        answers: latencies.len(),
        latency: dist(latencies),
        cd_cpu: 0.0,
        chatd_cpu: c1.1 - c0.1,
        sim_cpu: c1.2 - c0.2,
    })
}

fn burst_text(name: &str, b: &Burst) -> String {
    format!(
        "{name}: {} messages in {:.2} s, {:.1} messages/s; latency {} / max {:.0} ms; {} answers \
         (runs); CPU connectord {:.2} s, chatd {:.2} s, engine-sim {:.2} s",
        b.n,
        b.wall.as_secs_f64(),
        b.rate(),
        dist_text(b.latency),
        b.latency.max,
        b.answers,
        b.cd_cpu,
        b.chatd_cpu,
        b.sim_cpu
    )
}

// ---------------------------------------------------------------------------
// The idle part: 10 fakes behind one Bot API base
// ---------------------------------------------------------------------------

/// Routes `/bot<token>/<method>` to the fake that serves `token`.
struct Router10 {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
}

impl Drop for Router10 {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

struct Routes {
    to: HashMap<String, String>,
    http: reqwest::Client,
}

async fn route(
    State(routes): State<Arc<Routes>>,
    Path((bot, method)): Path<(String, String)>,
    verb: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(base) = bot.strip_prefix("bot").and_then(|t| routes.to.get(t)) else {
        return (StatusCode::NOT_FOUND, "no such bot").into_response();
    };
    let mut request = routes
        .http
        .request(verb, format!("{base}/{bot}/{method}"))
        .body(body);
    if let Some(ct) = headers.get(header::CONTENT_TYPE) {
        request = request.header(header::CONTENT_TYPE, ct.clone());
    }
    let Ok(answer) = request.send().await else {
        return (StatusCode::BAD_GATEWAY, "fake unreachable").into_response();
    };
    let status = answer.status();
    let ct = answer.headers().get(header::CONTENT_TYPE).cloned();
    let bytes = answer.bytes().await.unwrap_or_default();
    let mut response = (status, bytes).into_response();
    if let Some(ct) = ct {
        response.headers_mut().insert(header::CONTENT_TYPE, ct);
    }
    response
}

async fn router10(to: HashMap<String, String>) -> anyhow::Result<Router10> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let routes = Arc::new(Routes {
        to,
        http: reqwest::Client::builder().build()?,
    });
    let app = Router::new()
        .route("/{bot}/{method}", any(route))
        .with_state(routes);
    let (stop, mut stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = &mut stopped => break,
                accepted = listener.accept() => {
                    let Ok((stream, _)) = accepted else { continue };
                    let app = app.clone();
                    tokio::spawn(async move {
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app))
                            .await;
                    });
                }
            }
        }
    });
    Ok(Router10 {
        addr,
        stop: Some(stop),
    })
}

/// The pid of this process's child named `name`.
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
        // `pid (comm) state ppid ...`; comm may hold spaces.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let ppid = stat[close + 1..]
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok());
        if &stat[open + 1..close] == name && ppid == Some(me) {
            return Some(pid);
        }
    }
    None
}

struct Idle {
    cpu: f64,
    cpu_ns: u64,
    rss: u64,
    peak: u64,
}

async fn idle(pid: u32, span: Duration) -> anyhow::Result<Idle> {
    let cpu0 = cpu_secs(pid);
    let mut precise = crate::procstat::ThreadCpu::start(pid);
    let started = Instant::now();
    let mut peak = 0;
    while started.elapsed() < span {
        peak = peak.max(rss_kib(pid).unwrap_or(0));
        precise.sample();
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    precise.sample();
    let rss = rss_kib(pid).context("connectord's VmRSS")?;
    Ok(Idle {
        cpu: cpu_secs(pid) - cpu0,
        cpu_ns: precise.total_ns,
        rss,
        peak: peak.max(rss),
    })
}

// ---------------------------------------------------------------------------
// The figure
// ---------------------------------------------------------------------------

pub async fn figure(sizes: &Sizes, say: &dyn Fn(String)) -> anyhow::Result<Vec<Line>> {
    let bin = crate::harness::bin_dir().join("connectord");
    ensure!(
        bin.exists(),
        "connectord is not built next to bench: `cargo build --release --workspace`"
    );
    let release = bin.components().any(|c| c.as_os_str() == "release");
    let (n, m) = (sizes.messages, sizes.senders);
    say(format!(
        "connectord: {} ({}); load average {}; {n} messages from {m} senders, engine-sim tps=0, \
         chatd max_runs 2",
        bin.display(),
        if release {
            "release build"
        } else {
            "not a release build: the figures mean little"
        },
        loadavg()
    ));
    let mut lines = Vec::new();

    // The box: engine-sim, chatd forwarding to connectord, the fake, the agent.
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let dir = tempfile::tempdir()?;
    let socket = socket_in(dir.path());
    let chatd = Chatd::start(
        &sim.url(),
        &[("QSE_CONNECTORS_SOCKET", socket.to_string_lossy().as_ref())],
    )
    .await?;
    let client = chatd.client();
    let bot = FakeBot::start(TOKEN, "bench_bot").await?;
    let mut cd = Connectord::new(dir, &chatd, &bot.url(), "http://127.0.0.1:9/api", "")?;
    cd.start().await?;
    let agent = client
        .post(
            "/agents",
            json!({"name": "Concierge", "model": "sim-small",
                   "instructions": "You are the concierge of this box. Answer briefly."}),
        )
        .await?;
    ensure!(agent.status == 201, "agent: {agent:?}");
    let agent = agent.body["id"].as_str().context("agent id")?.to_string();
    let allow = allowlist(sizes);
    let made = client
        .post("/connectors", binding(TOKEN, &agent, &allow, "off"))
        .await?;
    ensure!(made.status == 201, "binding: {} {}", made.status, made.body);
    let id = made.body["id"].as_str().context("binding id")?.to_string();
    wait_polling(&bot, 0).await?;
    let pids = Pids {
        cd: cd.pid().context("connectord pid")?,
        chatd: chatd.pid().context("chatd pid")?,
        sim: child_pid("engine-sim").unwrap_or(0),
    };
    warm_up(&bot, WARM).await?;

    // (a) reply_mode off.
    let off = burst(&bot, n, m, OFF_BASE, &pids).await?;
    say(burst_text(
        "through connectord (reply_mode off, edit_ms 400)",
        &off,
    ));

    // The baseline: the bench straight to chatd, a task per sender.
    let warm_chat = client.create_chat().await?;
    client.send(&warm_chat, "[sim tokens=2]").await?;
    let floor = direct(&client, &agent, n, m, &pids).await?;
    say(burst_text(
        &format!("the bench straight to chatd ({m} senders at once, each message after the previous run)"),
        &floor,
    ));
    lines.push(with_baseline(
        line(
            format!(
                "11. messages/s fake Bot API → connectord → chatd → answer at the fake ({n} messages \
                 from {m} senders at once; reply_mode off, edit_ms 400; tps=0)"
            ),
            format!(
                "{:.1} msg/s; latency {}; {} answers",
                off.rate(),
                dist_text(off.latency),
                off.answers
            ),
        ),
        format!(
            "the bench straight to chatd, {m} senders at once: {:.1} msg/s; latency {}",
            floor.rate(),
            dist_text(floor.latency)
        ),
        format!(
            "×{:.3} msg/s; ×{:.1} p50",
            off.rate() / floor.rate().max(1e-9),
            off.latency.p50 / floor.latency.p50.max(1e-3)
        ),
    ));

    // (b) reply_mode progress, new senders.
    let pm = sizes.progress_messages;
    let pn = m.min(pm).max(1);
    let calls = bot.get_updates_calls();
    let patched = client
        .call(
            reqwest::Method::PATCH,
            &format!("/connectors/{id}"),
            Some(json!({"reply_mode": "progress"})),
        )
        .await?;
    ensure!(patched.status == 200, "patch: {}", patched.body);
    // A poll after the change, and a warm-up in the new mode.
    bot.wait_for("a getUpdates", Duration::from_secs(40), |b| {
        (b.get_updates_calls() > calls).then_some(())
    })
    .await?;
    warm_up(&bot, WARM).await?;
    let seen0 = bot.sent().len();
    let progress = burst(&bot, pm, pn, PROGRESS_BASE, &pids).await?;
    say(burst_text(
        "through connectord (reply_mode progress, edit_ms 400)",
        &progress,
    ));
    let (working, edited) = paced(&bot.sent()[seen0..]);
    say(format!(
        "progress, edit_ms 400: {working} \"Working…\" posts or edits, {edited} answers as edits \
         (paced), {} as new messages",
        progress.answers.saturating_sub(edited)
    ));
    lines.push(with_baseline(
        line(
            format!(
                "11. the same, reply_mode progress, edit_ms 400 ({pm} messages from {pn} senders)"
            ),
            format!(
                "{:.1} msg/s; latency {}; {working} \"Working…\", {edited} of {} answers edits",
                progress.rate(),
                dist_text(progress.latency),
                progress.answers
            ),
        ),
        format!(
            "reply_mode off above: {:.1} msg/s; latency {}",
            off.rate(),
            dist_text(off.latency)
        ),
        format!("×{:.2} msg/s", progress.rate() / off.rate().max(1e-9)),
    ));
    drop(cd);

    // (c) a second connectord with edit_ms 50 (progress): what the pacer costs.
    let fast_bot = FakeBot::start(FAST_TOKEN, "fast_bot").await?;
    let mut fast = Connectord::new(
        tempfile::tempdir()?,
        &chatd,
        &fast_bot.url(),
        "http://127.0.0.1:9/api",
        "edit_ms = 50\n",
    )?;
    fast.start().await?;
    let (code, fmade) = fast
        .api(
            "POST",
            "",
            Some(binding(FAST_TOKEN, &agent, &allow, "progress")),
        )
        .await?;
    ensure!(code == 201, "fast binding: {code} {fmade}");
    wait_polling(&fast_bot, 0).await?;
    warm_up(&fast_bot, WARM).await?;
    let fpids = Pids {
        cd: fast.pid().context("connectord pid")?,
        ..pids
    };
    let fseen0 = fast_bot.sent().len();
    let quick_edits = burst(&fast_bot, pm, pn, FAST_BASE, &fpids).await?;
    say(burst_text(
        "through connectord (reply_mode progress, edit_ms 50)",
        &quick_edits,
    ));
    let (fworking, fedited) = paced(&fast_bot.sent()[fseen0..]);
    say(format!(
        "progress, edit_ms 50: {fworking} \"Working…\" posts or edits, {fedited} answers as edits \
         (paced), {} as new messages",
        quick_edits.answers.saturating_sub(fedited)
    ));
    lines.push(with_baseline(
        line(
            format!(
                "11. the same, reply_mode progress, edit_ms 50 ({pm} messages from {pn} senders; \
                 a second connectord)"
            ),
            format!(
                "{:.1} msg/s; latency {}; {fworking} \"Working…\", {fedited} of {} answers edits; \
                 CPU connectord {:.2} s ({:.1} ms a message)",
                quick_edits.rate(),
                dist_text(quick_edits.latency),
                quick_edits.answers,
                quick_edits.cd_cpu,
                quick_edits.cd_cpu * 1000.0 / pm.max(1) as f64
            ),
        ),
        format!(
            "progress, edit_ms 400 above: {:.1} msg/s; latency {}",
            progress.rate(),
            dist_text(progress.latency)
        ),
        format!(
            "×{:.2} msg/s; ×{:.2} p50",
            quick_edits.rate() / progress.rate().max(1e-9),
            quick_edits.latency.p50 / progress.latency.p50.max(1e-3)
        ),
    ));
    drop(fast);
    drop(fast_bot);
    drop(bot);

    // (d) idle: 10 bindings long polling against none.
    let k = sizes.bindings;
    let mut bots = Vec::with_capacity(k);
    let mut to = HashMap::new();
    for b in 0..k {
        let token = format!("{}:AAE-idle-bench-token-{b:02}", 500_000 + b);
        let fake = FakeBot::start(&token, &format!("idle_bot_{b}")).await?;
        // Its getMe says the token's own id: connectord refuses a second
        // binding of the same bot.
        fake.add_bot(&token);
        to.insert(token.clone(), fake.url());
        bots.push((token, fake));
    }
    let routes = router10(to).await?;
    let base = format!("http://{}", routes.addr);
    let mut ten = Connectord::new(
        tempfile::tempdir()?,
        &chatd,
        &base,
        "http://127.0.0.1:9/api",
        "",
    )?;
    let mut none = Connectord::new(
        tempfile::tempdir()?,
        &chatd,
        &base,
        "http://127.0.0.1:9/api",
        "",
    )?;
    ten.start().await?;
    none.start().await?;
    for (token, _) in &bots {
        let (code, body) = ten
            .api("POST", "", Some(binding(token, &agent, &[WARM], "off")))
            .await?;
        ensure!(code == 201, "idle binding: {code} {body}");
    }
    wait_until("every binding polling", Duration::from_secs(30), || async {
        bots.iter()
            .all(|(_, f)| f.get_updates_calls() > 0)
            .then_some(())
    })
    .await?;
    // Past the start's allocations.
    tokio::time::sleep(sizes.settle).await;
    let polls = |bots: &[(String, FakeBot)]| -> usize {
        bots.iter().map(|(_, f)| f.get_updates_calls()).sum()
    };
    let polls0 = polls(&bots);
    let (tpid, npid) = (
        ten.pid().context("connectord pid")?,
        none.pid().context("connectord pid")?,
    );
    let (ti, ni) = tokio::join!(idle(tpid, sizes.idle), idle(npid, sizes.idle));
    let (ti, ni) = (ti?, ni?);
    let polls_seen = polls(&bots) - polls0;
    let span = sizes.idle.as_secs_f64();
    say(format!(
        "idle {span:.0} s: {k} bindings: CPU {:.0} ms by stat ({:.2} ms by schedstat, {:.3} % of a core), \
         {polls_seen} getUpdates calls in the window, RSS {} (peak {}); 0 bindings: CPU {:.0} ms by stat \
         ({:.2} ms by schedstat), RSS {} (peak {})",
        ti.cpu * 1000.0,
        ti.cpu_ns as f64 / 1e6,
        ti.cpu_ns as f64 / 1e9 / span * 100.0,
        mib(ti.rss),
        mib(ti.peak),
        ni.cpu * 1000.0,
        ni.cpu_ns as f64 / 1e6,
        mib(ni.rss),
        mib(ni.peak)
    ));
    lines.push(with_baseline(
        line(
            format!("11. connectord idle CPU, {k} Telegram bindings long polling ({span:.0} s)"),
            format!(
                "{:.1} ms CPU ({:.3} % of a core; utime+stime {:.0} ms); {polls_seen} getUpdates in the window",
                ti.cpu_ns as f64 / 1e6,
                ti.cpu_ns as f64 / 1e9 / span * 100.0,
                ti.cpu * 1000.0
            ),
        ),
        format!(
            "0 bindings {:.1} ms CPU (utime+stime {:.0} ms)",
            ni.cpu_ns as f64 / 1e6,
            ni.cpu * 1000.0
        ),
        format!(
            "{:+.1} ms CPU in {span:.0} s",
            (ti.cpu_ns as f64 - ni.cpu_ns as f64) / 1e6
        ),
    ));
    lines.push(with_baseline(
        line(
            format!("11. connectord idle RSS, {k} Telegram bindings"),
            mib(ti.rss),
        ),
        format!("0 bindings {}", mib(ni.rss)),
        format!(
            "×{:.2}; {:+.0} KiB per binding",
            ti.rss as f64 / ni.rss.max(1) as f64,
            (ti.rss as f64 - ni.rss as f64) / k as f64
        ),
    ));
    drop(ten);
    drop(none);
    drop(routes);
    drop(bots);
    drop(chatd);
    drop(sim);
    Ok(lines)
}
