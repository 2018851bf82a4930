//! Figure 13 of `bench`: what chatd's brief costs each model request.
//!
//! Before every request chatd makes the chat's brief (its system block,
//! tools and settings); for a chat offered `bash`, `web_fetch` or
//! `web_search` that includes asking egressd for the chat's preset and
//! ceiling over its unix socket. This figure times a message from the
//! moment the bench sends `POST …/messages` to the moment engine-sim has
//! the whole chat request (its request log's `at_us`, matched by
//! `session_id` = `chat-<id>`), one message at a time, each after the
//! previous run ended, engine-sim at `tps=0` answering 1 token:
//!
//! - **(a)** a chat made with a saved agent granted only `read_file` (no
//!   network tool, so no egressd call): the baseline;
//! - **(b)** a plain chat (every tool) on the same chatd, with the real
//!   egressd running (`ceiling = "all"`);
//! - **(c)** a plain chat on a second chatd whose egress socket does not
//!   exist (the call fails at once);
//! - **(a′)** the agent chat of (a) on (c)'s chatd: the two chatds compared.
//!
//! The four chats take turns, a message each per round (the order turned
//! every round), so they grow alike and share the machine's moments. The
//! engine's window is 4,000,000 tokens, so chatd never asks `/v1/tokenize`
//! (checked) and never compacts. Each setup's first request is checked for
//! what it claims: the tools offered and what the system block says of the
//! network. *For scale, same run:* the bench posting the last request body
//! of (b) straight to engine-sim (send → `at_us`), and asking egressd for
//! the same chat's preset itself over one kept-alive connection.
//!
//! Every wait is bounded; every process is stopped on the way out (the
//! harness's drops).

use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{ensure, Context};
use serde_json::{json, Value};

use crate::egressbench::{loadavg, Line};
use crate::harness::{wait_until, Chatd, Client, Egressd, EventStream, Sim};
use crate::procstat::ThreadCpu;

/// How big the figure's workload is.
#[derive(Debug, Clone)]
pub struct Sizes {
    /// Measured messages per setup.
    pub messages: usize,
    /// Rounds before them that are not counted (connections, caches).
    pub warmup: usize,
}

impl Sizes {
    pub fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                messages: 30,
                warmup: 2,
            }
        } else {
            Sizes {
                messages: 300,
                warmup: 10,
            }
        }
    }
}

/// The longest one run may take (a 1-token answer at tps=0 takes ms).
const RUN_BOUND: Duration = Duration::from_secs(30);
/// The window engine-sim says its model holds: far from any line.
const WINDOW: &str = "4000000";

/// p50 / p90 / p99 / max of milliseconds (nearest rank).
#[derive(Debug, Clone, Copy, Default)]
struct Dist {
    p50: f64,
    p90: f64,
    p99: f64,
    max: f64,
}

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
        p90: q(0.9),
        p99: q(0.99),
        max: v.last().copied().unwrap_or(0.0),
    }
}

fn ms3(d: Dist) -> String {
    format!("p50 {:.2} / p90 {:.2} / p99 {:.2} ms", d.p50, d.p90, d.p99)
}

fn ratio(x: Dist, base: Dist) -> String {
    let r = |a: f64, b: f64| a / b.max(1e-6);
    format!(
        "p50 ×{:.2}, p90 ×{:.2}, p99 ×{:.2}",
        r(x.p50, base.p50),
        r(x.p90, base.p90),
        r(x.p99, base.p99)
    )
}

fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// One of the chats being timed.
struct Setup {
    name: &'static str,
    what: &'static str,
    client: Client,
    chat: String,
    events: EventStream,
    /// Send → the engine has the request (ms), one per measured message.
    arrived: Vec<f64>,
    /// Send → the 202 came back (ms).
    accepted: Vec<f64>,
    /// The last message's send and 202 times (unix µs), matched after the round.
    sent: Option<(u64, u64)>,
    /// The last request body the engine got for this chat.
    last_body: Value,
}

impl Setup {
    async fn new(
        name: &'static str,
        what: &'static str,
        client: &Client,
        agent: Option<&str>,
    ) -> anyhow::Result<Setup> {
        let body = match agent {
            Some(id) => json!({"title": format!("Bench 13{name}"), "agent_id": id}),
            None => json!({"title": format!("Bench 13{name}")}),
        };
        let made = client.post("/conversations", body).await?;
        ensure!(made.status == 201, "making chat ({name}): {made:?}");
        let chat = made.body["id"].as_str().context("chat id")?.to_string();
        let events = client.events(&chat, 0).await?;
        Ok(Setup {
            name,
            what,
            client: client.clone(),
            chat,
            events,
            arrived: Vec::new(),
            accepted: Vec::new(),
            sent: None,
            last_body: Value::Null,
        })
    }

    /// Sends one message and waits for its run to end.
    async fn exchange(&mut self, round: usize) -> anyhow::Result<()> {
        let path = format!("/conversations/{}/messages", self.chat);
        let body = json!({"text": format!("Note {round}: keep it short. [sim tokens=1]")});
        let t0 = unix_us();
        let sent = self.client.post(&path, body).await?;
        let t1 = unix_us();
        ensure!(sent.status == 202, "send ({}): {sent:?}", self.name);
        let run = sent.body["run_id"]
            .as_str()
            .with_context(|| format!("no run started ({}): {}", self.name, sent.body))?
            .to_string();
        let seen = self
            .events
            .read_until(RUN_BOUND, |e| {
                e.kind == "run.finished" && e.data["run_id"] == run.as_str()
            })
            .await
            .with_context(|| format!("run {run} of ({}) to finish", self.name))?;
        let end = seen.last().map(|e| e.data.clone()).unwrap_or(Value::Null);
        ensure!(
            end["status"] == "done",
            "run of ({}) ended {end}",
            self.name
        );
        self.sent = Some((t0, t1));
        Ok(())
    }

    /// Takes this chat's request from the engine's log of one round.
    fn take(&mut self, log: &[Value], counted: bool) -> anyhow::Result<()> {
        let session = format!("chat-{}", self.chat);
        let mine: Vec<&Value> = log
            .iter()
            .filter(|r| r["session_id"] == session.as_str())
            .collect();
        ensure!(
            mine.len() == 1,
            "({}) made {} chat requests in one round, not 1",
            self.name,
            mine.len()
        );
        let at = mine[0]["at_us"].as_u64().context("at_us")?;
        let (t0, t1) = self.sent.take().context("a message was sent")?;
        if counted {
            self.arrived.push(at.saturating_sub(t0) as f64 / 1000.0);
            self.accepted.push(t1.saturating_sub(t0) as f64 / 1000.0);
        }
        self.last_body = mine[0]["body"].clone();
        Ok(())
    }
}

/// The system block and tool names of a logged request body.
fn system_and_tools(body: &Value) -> (String, Vec<String>) {
    let system = body["messages"][0]["content"]
        .as_str()
        .filter(|_| body["messages"][0]["role"] == "system")
        .unwrap_or("")
        .to_string();
    let tools = body["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    (system, tools)
}

/// Each setup is what it claims: (a) offers only `read_file` and says
/// nothing of the web; (b) knows the chat's network; (c) says egressd does
/// not answer.
fn check_setups(setups: &[Setup]) -> anyhow::Result<()> {
    for s in setups {
        let (system, tools) = system_and_tools(&s.last_body);
        let no_web = system.contains("You cannot reach the web in this chat.");
        let knows = system.contains("may wait for the person's permission");
        let unanswered = system.contains("egress service does not answer");
        match s.name {
            "a" | "a′" => ensure!(
                tools == ["read_file"] && no_web && !unanswered,
                "({}) should offer read_file only and no web: tools {tools:?}, system {system:?}",
                s.name
            ),
            "b" => ensure!(
                tools.iter().any(|t| t == "web_fetch") && knows && !unanswered,
                "(b) should be told its network by egressd: tools {tools:?}, system {system:?}"
            ),
            _ => ensure!(
                tools.iter().any(|t| t == "web_fetch") && unanswered,
                "(c) should be told egressd does not answer: tools {tools:?}, system {system:?}"
            ),
        }
    }
    Ok(())
}

async fn clear_log(http: &reqwest::Client, sim: &Sim) -> anyhow::Result<()> {
    let cleared = http
        .delete(format!("{}/sim/requests", sim.url()))
        .send()
        .await?;
    ensure!(
        cleared.status().is_success(),
        "DELETE /sim/requests: {}",
        cleared.status()
    );
    Ok(())
}

async fn engine_models(client: &Client) -> anyhow::Result<()> {
    wait_until(
        "chatd to know the engine's models",
        Duration::from_secs(20),
        || async {
            let caps = client.get("/capabilities").await.ok()?;
            (caps.body["engine"]["models"].as_array()?.len() == 1).then_some(())
        },
    )
    .await
}

async fn agent(client: &Client) -> anyhow::Result<String> {
    let made = client
        .post(
            "/agents",
            json!({"name": "Reader", "instructions": "Read the files you are pointed at.",
                   "tools": ["read_file"]}),
        )
        .await?;
    ensure!(made.status == 201, "agent: {made:?}");
    Ok(made.body["id"].as_str().context("agent id")?.to_string())
}

/// The bench asking egressd for a chat's preset itself, `n` times over one
/// kept-alive connection (ms each).
async fn egressd_direct(socket: &Path, chat: &str, n: usize) -> anyhow::Result<Vec<f64>> {
    let http = reqwest::Client::builder()
        .unix_socket(socket.to_path_buf())
        .build()?;
    let url = format!("http://egressd/chats/{chat}/egress");
    let mut out = Vec::with_capacity(n);
    for i in 0..n + 3 {
        let t = Instant::now();
        let answer = http.get(&url).send().await?;
        ensure!(answer.status().is_success(), "egressd: {}", answer.status());
        let value: Value = answer.json().await?;
        ensure!(value["preset"].is_string(), "egressd answered {value}");
        if i >= 3 {
            out.push(t.elapsed().as_secs_f64() * 1000.0);
        }
    }
    Ok(out)
}

/// The bench posting `body` (a request chatd made) straight to engine-sim,
/// `n` times: send → the engine has it (ms each).
async fn engine_direct(sim: &Sim, body: &Value, n: usize) -> anyhow::Result<Vec<f64>> {
    let http = reqwest::Client::new();
    let bytes = serde_json::to_vec(body)?;
    let url = format!("{}/v1/chat/completions", sim.url());
    let mut out = Vec::with_capacity(n);
    let mut sent = Vec::new();
    for i in 0..n + 3 {
        let t0 = unix_us();
        let answer = http
            .post(&url)
            .header("content-type", "application/json")
            .header("x-session-id", "bench-direct")
            .body(bytes.clone())
            .send()
            .await?;
        ensure!(answer.status().is_success(), "engine: {}", answer.status());
        answer.bytes().await?;
        if i >= 3 {
            sent.push(t0);
        }
        // The log keeps every body: read it in small batches.
        if sent.len() == 20 || i == n + 2 {
            let log = sim.requests().await?;
            let ats: Vec<u64> = log
                .iter()
                .filter(|r| r["session_id"] == "bench-direct")
                .filter_map(|r| r["at_us"].as_u64())
                .collect();
            let ats = &ats[ats.len().saturating_sub(sent.len())..];
            ensure!(
                ats.len() == sent.len(),
                "the engine logged {} of {}",
                ats.len(),
                sent.len()
            );
            out.extend(
                sent.iter()
                    .zip(ats)
                    .map(|(t0, at)| at.saturating_sub(*t0) as f64 / 1000.0),
            );
            sent.clear();
            clear_log(&http, sim).await?;
        }
    }
    Ok(out)
}

fn line(figure: String, measured: String, baseline: String, ratio: String) -> Line {
    Line {
        figure,
        measured,
        aim: None,
        baseline: Some((baseline, ratio)),
    }
}

/// Runs figure 13; `say` prints a progress line.
pub async fn figure(sizes: &Sizes, say: &dyn Fn(String)) -> anyhow::Result<Vec<Line>> {
    let bin = crate::harness::bin_dir().join("chatd");
    let release = bin.components().any(|c| c.as_os_str() == "release");
    let n = sizes.messages;
    say(format!(
        "chatd: {} ({}); load average {}; {n} messages per setup after {} warm-up rounds, \
         engine-sim tps=0, 1-token answers",
        bin.display(),
        if release {
            "release build"
        } else {
            "not a release build: the figures mean little"
        },
        loadavg(),
        sizes.warmup
    ));

    // One engine; chatd X with the real egressd, chatd Y whose socket is absent.
    let sim = Sim::start(&["--tokens-per-second", "0", "--context-window", WINDOW])?;
    let sockets = tempfile::tempdir()?;
    let socket = sockets.path().join("egress.sock");
    let absent = sockets.path().join("absent").join("egress.sock");
    let x = Chatd::start(
        &sim.url(),
        &[("QSE_EGRESS_SOCKET", socket.to_string_lossy().as_ref())],
    )
    .await?;
    let egressd = Egressd::start_at(
        &x.data_dir(),
        &x.dir.path().join("secrets.env"),
        &socket,
        "ceiling = \"all\"\n",
    )
    .await?;
    let y = Chatd::start(
        &sim.url(),
        &[("QSE_EGRESS_SOCKET", absent.to_string_lossy().as_ref())],
    )
    .await?;
    let (cx, cy) = (x.client(), y.client());
    engine_models(&cx).await?;
    engine_models(&cy).await?;
    let (agent_x, agent_y) = (agent(&cx).await?, agent(&cy).await?);
    let mut setups = vec![
        Setup::new(
            "a",
            "agent granted read_file only (no egressd call)",
            &cx,
            Some(&agent_x),
        )
        .await?,
        Setup::new("b", "plain chat, egressd running (ceiling all)", &cx, None).await?,
        Setup::new("c", "plain chat, no egressd (socket absent)", &cy, None).await?,
        Setup::new(
            "a′",
            "agent chat on (c)'s chatd (no egressd call)",
            &cy,
            Some(&agent_y),
        )
        .await?,
    ];
    let http = reqwest::Client::new();
    clear_log(&http, &sim).await?;

    let pids = (
        x.pid().context("chatd pid")?,
        y.pid().context("chatd pid")?,
        egressd.pid().context("egressd pid")?,
    );
    let mut cpu = None;
    let started = Instant::now();
    for round in 0..sizes.warmup + n {
        if round == sizes.warmup {
            cpu = Some((
                ThreadCpu::start(pids.0),
                ThreadCpu::start(pids.1),
                ThreadCpu::start(pids.2),
                Instant::now(),
            ));
        }
        let k = setups.len();
        for j in 0..k {
            setups[(round + j) % k].exchange(round).await?;
        }
        let log = sim.requests().await?;
        clear_log(&http, &sim).await?;
        for s in &mut setups {
            s.take(&log, round >= sizes.warmup)?;
        }
        if round == 0 {
            check_setups(&setups)?;
        }
    }
    let (mut cpu_x, mut cpu_y, mut cpu_e, measured_from) = cpu.context("no measured round")?;
    cpu_x.sample();
    cpu_y.sample();
    cpu_e.sample();
    let wall = measured_from.elapsed();
    let stats = sim.get("/sim/stats").await?;
    let tokenized = stats["tokenize_requests"].as_u64().unwrap_or(0);
    ensure!(
        tokenized == 0,
        "chatd asked /v1/tokenize {tokenized} times: the figure assumes requests far from the line"
    );
    say(format!(
        "{} messages in {:.1} s ({:.1} s measured); chatd CPU per message: {:.2} ms (a, b), \
         {:.2} ms (c, a′); egressd CPU per (b) message {:.3} ms",
        (sizes.warmup + n) * setups.len(),
        started.elapsed().as_secs_f64(),
        wall.as_secs_f64(),
        cpu_x.total_ns as f64 / 1e6 / (2 * n) as f64,
        cpu_y.total_ns as f64 / 1e6 / (2 * n) as f64,
        cpu_e.total_ns as f64 / 1e6 / n as f64,
    ));

    let d: Vec<Dist> = setups.iter().map(|s| dist(s.arrived.clone())).collect();
    let acc: Vec<Dist> = setups.iter().map(|s| dist(s.accepted.clone())).collect();
    for (i, s) in setups.iter().enumerate() {
        // The chat grows by two messages a round: its first and last tenth.
        let tenth = (n / 10).max(1);
        let first = dist(s.arrived[..tenth].to_vec());
        let last = dist(s.arrived[n - tenth..].to_vec());
        let after_202: Vec<f64> = s
            .arrived
            .iter()
            .zip(&s.accepted)
            .map(|(a, b)| a - b)
            .collect();
        say(format!(
            "({}) {}: send → engine has the request {} / max {:.2} ms (first {tenth} p50 {:.2}, \
             last {tenth} p50 {:.2}); send → 202 p50 {:.2} ms, 202 → engine p50 {:.2} ms; last \
             request {} B",
            s.name,
            s.what,
            ms3(d[i]),
            d[i].max,
            first.p50,
            last.p50,
            acc[i].p50,
            dist(after_202).p50,
            serde_json::to_vec(&s.last_body).map_or(0, |b| b.len())
        ));
    }

    // A short chat in the same, now larger, database: what the chat's own
    // length costs against what the database's size costs.
    let mut fresh = Setup::new(
        "a, new",
        "a new agent chat after the run",
        &cx,
        Some(&agent_x),
    )
    .await?;
    let short = n.min(30);
    for round in 0..sizes.warmup + short {
        fresh.exchange(round).await?;
        let log = sim.requests().await?;
        clear_log(&http, &sim).await?;
        fresh.take(&log, round >= sizes.warmup)?;
    }
    say(format!(
        "a new agent chat on (a)'s chatd after the run (its database now holds {} messages), \
         {short} messages: send → engine has the request {}",
        2 * (sizes.warmup + n) * 2,
        ms3(dist(fresh.arrived))
    ));

    // For scale: the same request posted by the bench, and egressd asked directly.
    let direct = dist(engine_direct(&sim, &setups[1].last_body, n).await?);
    let asked = dist(egressd_direct(&socket, &setups[1].chat, n).await?);
    say(format!(
        "for scale: (b)'s last request posted by the bench straight to engine-sim, send → at_us \
         {}; GET /chats/{{id}}/egress from the bench over one kept-alive connection {}",
        ms3(direct),
        ms3(asked)
    ));
    // The chats of one round are equally long: their differences, round by
    // round, leave out the growth and most of the machine's moods.
    let paired = |x: usize, y: usize| {
        let v: Vec<f64> = setups[x]
            .arrived
            .iter()
            .zip(&setups[y].arrived)
            .map(|(a, b)| a - b)
            .collect();
        dist(v).p50
    };
    say(format!(
        "(b)/(a) {}; (c)/(a) {}; round by round, median of the differences: (b) − (a) {:.3} ms, \
         (c) − (a′) {:.3} ms (same chatd each), (b) − (c) {:.3} ms, (a′) − (a) {:.3} ms",
        ratio(d[1], d[0]),
        ratio(d[2], d[0]),
        paired(1, 0),
        paired(2, 3),
        paired(1, 2),
        paired(3, 0)
    ));

    let figure = |s: &Setup| {
        format!(
            "13. message sent → request at the engine, ({}) {}",
            s.name, s.what
        )
    };
    let base_a = format!("(a) {}", ms3(d[0]));
    Ok(vec![
        line(
            figure(&setups[0]),
            format!("{} (n {n})", ms3(d[0])),
            format!(
                "the bench posting (b)'s last request straight to engine-sim {}",
                ms3(direct)
            ),
            format!("p50 ×{:.1}", d[0].p50 / direct.p50.max(1e-6)),
        ),
        line(
            figure(&setups[1]),
            format!(
                "{} (n {n}); per round (b) − (a) median {:.2} ms; egressd asked by the bench \
                 p50 {:.2} ms",
                ms3(d[1]),
                paired(1, 0),
                asked.p50
            ),
            base_a.clone(),
            ratio(d[1], d[0]),
        ),
        line(
            figure(&setups[2]),
            format!(
                "{} (n {n}); per round (c) − (a′) median {:.2} ms, (b) − (c) {:.2} ms",
                ms3(d[2]),
                paired(2, 3),
                paired(1, 2)
            ),
            base_a.clone(),
            ratio(d[2], d[0]),
        ),
        line(
            figure(&setups[3]),
            format!("{} (n {n})", ms3(d[3])),
            base_a,
            ratio(d[3], d[0]),
        ),
    ])
}
