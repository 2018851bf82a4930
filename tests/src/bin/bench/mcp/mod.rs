//! Figure 17: an MCP tool call through chatd against the same call made
//! directly with the same client (`rmcp`), on the MCP project's reference
//! server from npm, over Streamable HTTP and over stdio (chatd running the
//! server in the chat's podman sandbox); and the memory an open HTTP
//! session costs chatd.
//!
//! Through chatd: an agent run whose every step is one `echo` call
//! (scripted on the simulator at tps=0); a step's time is the simulator's
//! arrival of request i+1 minus the end of answer i, so it holds chatd's
//! whole step: the call in the chat's session, the result stored and
//! announced, the next request built. The same run with `todo_write` (a
//! built-in tool) shows chatd's step without MCP. Directly: the bench's own
//! rmcp session calling `echo` one call after the other.
//!
//! stdio: the same run with a `stdio` connector, chatd starting
//! `node …/dist/index.js stdio` in each chat's sandbox (the busybox test
//! image with this machine's node, `Podman::tools_image`); directly, the
//! bench's rmcp session over the stdin/stdout of the same command run as
//! its child on this machine. And a new chat's first turn, from the
//! message posted to the engine's first request (the sandbox started, the
//! server started, initialize and tools/list), against the same turn with
//! the session open and against the bench starting the server itself.
//! Needs root and podman; skipped with a line otherwise. `host.rs`: the
//! same stdio server run through hostexecd, as on a box without podman.
//!
//! Memory: chatd's RSS after a turn in each of N chats with the connector
//! off (no session), then after a turn in each with it on (N sessions).

use super::*;

mod host;

use std::path::Path;
use std::process::Stdio;

use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt};
use tandem_tests::harness::{SandboxCleanup, TOOLS_IMAGE};
use tandem_tests::mcpservers::{Everything, EVERYTHING};
use tandem_tests::{npm, sandboxbench};

/// The bench's own rmcp session.
type Direct = RunningService<RoleClient, ClientConfig>;

fn client_config() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("bench", "1"),
    )
}

/// Microseconds since the epoch, the simulator's clock in its request log.
fn unix_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// The simulator's script: `steps` answers of one call each, then text.
fn script(steps: usize, name: &str, args: impl Fn(usize) -> Value) -> Value {
    let mut next: Vec<Value> = (0..steps)
        .map(|k| json!({"tool_calls": [{"name": name, "arguments": args(k)}]}))
        .collect();
    next.push(json!({"tokens": 2}));
    Value::Array(next)
}

/// One scripted turn's times (µs).
struct Turn {
    /// Per step: request i+1's arrival minus answer i's end.
    steps: Vec<i64>,
    /// The message posted to the engine's first request (sessions opened).
    first: i64,
}

/// engine-sim, and a chatd beside it that takes `steps` steps in a turn,
/// with the http connector `Everything` at `url` saved; the save's answer.
async fn with_connector(
    url: &str,
    steps: usize,
) -> anyhow::Result<(Sim, Chatd, Client, tandem_tests::harness::Answer)> {
    let sim = Sim::start(&["--tokens-per-second", "0", "--context-window", "4000000"])?;
    let max_steps = (steps + 10).to_string();
    let chatd = Chatd::start(
        &sim.url(),
        &[
            ("QSE_CHAT_MCP_ALLOW_PRIVATE", "true"),
            ("QSE_CHAT_MAX_STEPS", max_steps.as_str()),
            ("QSE_CHAT_CONTEXT_WINDOW", "4000000"),
        ],
    )
    .await?;
    let client = chatd.client();
    let made = client
        .post("/mcp-connectors", json!({"name": "Everything", "url": url}))
        .await?;
    anyhow::ensure!(made.status == 201, "{made:?}");
    Ok((sim, chatd, client, made))
}

/// Five warm-up `echo` steps in `chat`, then `steps` measured ones: the
/// warm-up turn and the measured steps.
async fn echo_steps(
    sim: &Sim,
    client: &Client,
    chat: &str,
    steps: usize,
) -> anyhow::Result<(Turn, Vec<i64>)> {
    let warm = steps_through_chatd(
        sim,
        client,
        chat,
        5,
        script(5, "echo", |k| json!({"message": format!("warm {k}")})),
    )
    .await?;
    let through = steps_through_chatd(
        sim,
        client,
        chat,
        steps,
        script(steps, "echo", |k| json!({"message": format!("step {k}")})),
    )
    .await?
    .steps;
    Ok((warm, through))
}

/// Runs one scripted chat turn of `steps` calls.
async fn steps_through_chatd(
    sim: &Sim,
    client: &Client,
    chat: &str,
    steps: usize,
    script: Value,
) -> anyhow::Result<Turn> {
    let http = reqwest::Client::new();
    http.delete(format!("{}/sim/requests", sim.url()))
        .send()
        .await?;
    sim.faults(script).await?;
    let posted = unix_us();
    let sent = client.send(chat, "go").await?;
    let run = sent["run_id"].as_str().context("run_id")?.to_string();
    let record = client
        .wait_run(
            chat,
            &run,
            &["done", "failed", "stopped", "interrupted"],
            Duration::from_secs(600),
        )
        .await?;
    anyhow::ensure!(record["status"] == "done", "the run ended: {record}");
    let log: Vec<Value> = http
        .get(format!("{}/sim/requests", sim.url()))
        .send()
        .await?
        .json()
        .await?;
    anyhow::ensure!(
        log.len() == steps + 1,
        "{} requests for {steps} steps",
        log.len()
    );
    let results = tandem_tests::harness::tool_results(&client.snapshot(chat).await?);
    anyhow::ensure!(
        results
            .iter()
            .rev()
            .take(steps)
            .all(|r| !r.contains("failed")),
        "a call failed: {:?}",
        results.last()
    );
    Ok(Turn {
        steps: log
            .windows(2)
            .map(|w| w[1]["at_us"].as_i64().unwrap_or(0) - w[0]["done_us"].as_i64().unwrap_or(0))
            .collect(),
        first: log[0]["at_us"].as_i64().unwrap_or(0) - posted,
    })
}

/// `calls` echo calls, one after the other, in one session of our own.
async fn direct(url: &str, calls: usize) -> anyhow::Result<Vec<i64>> {
    let transport = StreamableHttpClientTransport::with_client(
        reqwest::Client::new(),
        StreamableHttpClientTransportConfig::with_uri(url),
    );
    let session = client_config().serve(transport).await?;
    let out = echoes(&session, calls).await;
    let _ = session.cancel().await;
    out
}

/// `calls` echo calls in `session`, after five that warm it up (as chatd's
/// first steps do); each call's time (µs).
async fn echoes(session: &Direct, calls: usize) -> anyhow::Result<Vec<i64>> {
    let mut out = Vec::with_capacity(calls);
    for k in 0..calls + 5 {
        let mut args = serde_json::Map::new();
        args.insert("message".into(), json!(format!("step {k}")));
        let started = Instant::now();
        session
            .call_tool(CallToolRequestParams::new("echo").with_arguments(args))
            .await?;
        if k >= 5 {
            out.push(started.elapsed().as_micros() as i64);
        }
    }
    Ok(out)
}

pub(crate) async fn mcp(quick: bool, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    say("\n## 17. MCP: a tool call through chatd (HTTP; stdio in the chat's sandbox) against the same client directly; memory per session");
    let steps = if quick { 20 } else { 200 };
    let http = over_http(quick, steps, rows).await?;
    over_sse(steps, http, rows).await?;
    host::over_host(quick, steps, http, rows).await?;
    over_stdio(quick, steps, http, rows).await
}

/// The reference server over MCP's older HTTP+SSE transport (chatd's own
/// client for it, `mcp/legacy.rs`), against the Streamable HTTP step of
/// the same run (`http`: p50, p99); rmcp has no such client to call it
/// directly with.
async fn over_sse(steps: usize, http: (i64, i64), rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let server = Everything::sse()
        .await?
        .context("server-everything is not installed (ops/test installs it under tests/npm)")?;
    let (sim, _chatd, client, _) = with_connector(&server.url(), steps).await?;
    let chat = client.create_chat_in("yolo").await?;
    let (warm, through) = echo_steps(&sim, &client, &chat, steps).await?;
    let t = dist(through);
    say(format!(
        "HTTP+SSE: a new chat's first turn to its first request (a POST refused, the event stream opened): {}; chatd step with an MCP echo: median {} p99 {} ({steps} calls); over Streamable HTTP above: median {} p99 {}",
        ms(warm.first), ms(t.p50), ms(t.p99), ms(http.0), ms(http.1)
    ));
    rows.push(
        row(
            format!("17. MCP echo call through chatd, the older HTTP+SSE transport, a whole step ({steps} steps)"),
            format!("median {} / p99 {}", ms(t.p50), ms(t.p99)),
        )
        .baseline(
            format!("Streamable HTTP through chatd {} / {}", ms(http.0), ms(http.1)),
            format!("{} median ({:.2}×)", ms(t.p50 - http.0), t.p50 as f64 / http.0.max(1) as f64),
        ),
    );
    Ok(())
}

/// The Streamable HTTP part and the memory; the MCP step's (p50, p99).
async fn over_http(quick: bool, steps: usize, rows: &mut Vec<Row>) -> anyhow::Result<(i64, i64)> {
    let chats = if quick { 10 } else { 100 };
    let server = Everything::http()
        .await?
        .context("server-everything is not installed (ops/test installs it under tests/npm)")?;
    let (sim, chatd, client, made) = with_connector(&server.url(), steps).await?;
    let id = made.body["id"].as_str().context("id")?.to_string();
    let chat = client.create_chat_in("yolo").await?;
    // Warm-up: the session opened, the caches filled.
    let (warm, through) = echo_steps(&sim, &client, &chat, steps).await?;
    say(format!(
        "a new chat's first turn to its first request (the HTTP session opened): {}",
        ms(warm.first)
    ));
    let builtin_chat = client.create_chat_in("yolo").await?;
    let builtin = steps_through_chatd(
        &sim,
        &client,
        &builtin_chat,
        steps,
        script(
            steps,
            "todo_write",
            |k| json!({"todos": [{"content": format!("step {k}"), "status": "pending"}]}),
        ),
    )
    .await?
    .steps;
    let plain = direct(&server.url(), steps).await?;
    let (t, b, d) = (dist(through), dist(builtin), dist(plain));
    let http = (t.p50, t.p99);
    say(format!(
        "chatd step with an MCP echo: median {} p99 {}; with todo_write: median {} p99 {}; echo directly with rmcp: median {} p99 {} ({steps} calls each)",
        ms(t.p50), ms(t.p99), ms(b.p50), ms(b.p99), ms(d.p50), ms(d.p99)
    ));
    rows.push(
        row(
            format!("17. MCP echo call through chatd, a whole step ({steps} steps)"),
            format!("median {} / p99 {}", ms(t.p50), ms(t.p99)),
        )
        .baseline(
            format!("rmcp directly {} / {}", ms(d.p50), ms(d.p99)),
            format!("+{} median / +{} p99", ms(t.p50 - d.p50), ms(t.p99 - d.p99)),
        ),
    );
    rows.push(
        row(
            format!("17. chatd step with todo_write, no MCP ({steps} steps)"),
            format!("median {} / p99 {}", ms(b.p50), ms(b.p99)),
        )
        .baseline(
            format!("the MCP step {} / {}", ms(t.p50), ms(t.p99)),
            format!("MCP adds {} median", ms(t.p50 - b.p50)),
        ),
    );

    // Memory: N chats' turns with the connector off, then on.
    let pid = chatd.pid().context("chatd's pid")?;
    let off = client
        .post(&format!("/mcp-connectors/{id}/disable"), json!({}))
        .await?;
    anyhow::ensure!(off.status == 200, "{off:?}");
    let mut ids = Vec::with_capacity(chats);
    for _ in 0..chats {
        let chat = client.create_chat_in("yolo").await?;
        let sent = client.send(&chat, "hello [sim tokens=1]").await?;
        let run = sent["run_id"].as_str().context("run_id")?.to_string();
        client
            .wait_run(&chat, &run, &["done"], Duration::from_secs(60))
            .await?;
        ids.push(chat);
    }
    let before = rss_kib(pid).unwrap_or(0);
    let on = client
        .post(&format!("/mcp-connectors/{id}/enable"), json!({}))
        .await?;
    anyhow::ensure!(on.status == 200, "{on:?}");
    for chat in &ids {
        let sent = client.send(chat, "hello [sim tokens=1]").await?;
        let run = sent["run_id"].as_str().context("run_id")?.to_string();
        client
            .wait_run(chat, &run, &["done"], Duration::from_secs(60))
            .await?;
    }
    let after = rss_kib(pid).unwrap_or(0);
    let per = (after as f64 - before as f64) / chats as f64;
    say(format!(
        "chatd RSS: {before} KiB after {chats} chats' turns without a session, {after} KiB with {chats} sessions open: {per:.1} KiB a session"
    ));
    rows.push(
        row(
            format!("17. chatd memory per open MCP session ({chats} sessions)"),
            format!("{per:.1} KiB"),
        )
        .baseline(
            format!("{} MiB with none", before / 1024),
            format!("+{:.1} MiB in all", (after as f64 - before as f64) / 1024.0),
        ),
    );
    Ok(http)
}

/// server-everything over stdio as the bench's child on this machine:
/// started, initialized and its tools listed; that time (µs).
async fn open_stdio(
    node: &Path,
    script: &Path,
) -> anyhow::Result<(Direct, tokio::process::Child, i64)> {
    let started = Instant::now();
    let mut child = tokio::process::Command::new(node)
        .arg(script)
        .arg("stdio")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {} {} stdio", node.display(), script.display()))?;
    let stdout = child.stdout.take().context("the server's stdout")?;
    let stdin = child.stdin.take().context("the server's stdin")?;
    let session = client_config().serve((stdout, stdin)).await?;
    session.list_all_tools().await?;
    Ok((session, child, started.elapsed().as_micros() as i64))
}

/// Microsecond samples as "a, b, c ms".
fn listed(v: &[i64]) -> String {
    let each: Vec<String> = v
        .iter()
        .map(|us| format!("{:.0}", *us as f64 / 1000.0))
        .collect();
    format!("{} ms", each.join(", "))
}

fn median_us(v: &[i64]) -> i64 {
    let mut v = v.to_vec();
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// The stdio part: server-everything started by chatd in each chat's podman
/// sandbox, against the same command run by the bench on this machine.
/// `http` is the HTTP connector's step (p50, p99), for scale.
async fn over_stdio(
    quick: bool,
    steps: usize,
    http: (i64, i64),
    rows: &mut Vec<Row>,
) -> anyhow::Result<()> {
    say("\n### 17, stdio: server-everything run by chatd in the chat's podman sandbox (sandboxed stdio)");
    if let Some(why) = sandboxbench::unavailable() {
        say(format!("figure 17's stdio part SKIPPED: {why}"));
        return Ok(());
    }
    let fresh = if quick { 1 } else { 3 };
    let package = npm::package(EVERYTHING)
        .context("server-everything is not installed (ops/test installs it under tests/npm)")?;
    let script_path = package.join("dist/index.js");
    let began = Instant::now();
    let podman = sandboxbench::podman().await?;
    let tools = tokio::task::spawn_blocking(move || podman.tools_image()).await??;
    say(format!(
        "podman's API service and the tools image (`tandem sandbox build --add` node, tests/npm): {:.1} s",
        began.elapsed().as_secs_f64()
    ));
    // Directly: the same command, this machine's node, no sandbox.
    let (opened, plain) = stdio_directly(&tools.node, &script_path, fresh, steps).await?;

    // Through chatd: a stdio connector, the server in each chat's sandbox.
    let sim = Sim::start(&["--tokens-per-second", "0", "--context-window", "4000000"])?;
    let max_steps = (steps + 10).to_string();
    // This box's real memory is not the figure's subject.
    let mut env = podman.chatd_env(TOOLS_IMAGE, "0.5");
    env.extend(
        [
            ("QSE_SANDBOX_MAX_RUNNING", "8"),
            ("QSE_CHAT_MAX_STEPS", max_steps.as_str()),
            ("QSE_CHAT_CONTEXT_WINDOW", "4000000"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let all: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let chatd = Chatd::start(&sim.url(), &all).await?;
    let cleanup = SandboxCleanup(chatd.data_dir());
    let client = chatd.client();
    let (cold, warm, through) =
        stdio_through_chatd(&sim, &client, &tools.node, &script_path, fresh, steps).await?;
    drop(client);
    drop(chatd);
    drop(cleanup);
    let figures = StdioFigures {
        label: "sandboxed stdio",
        server: "stdio server in the chat's podman sandbox (sandboxed stdio)",
        through,
        plain,
        cold,
        warm,
        opened,
    };
    figures.report(steps, http, rows);
    Ok(())
}

/// The bench's own runs of `node script stdio` on this machine: the times
/// of `fresh` starts (started, initialize, tools/list), then `steps` echo
/// calls one after the other in the last.
async fn stdio_directly(
    node: &Path,
    script: &Path,
    fresh: usize,
    steps: usize,
) -> anyhow::Result<(Vec<i64>, Vec<i64>)> {
    let mut opened = Vec::with_capacity(fresh);
    for _ in 1..fresh {
        let (session, child, took) = open_stdio(node, script).await?;
        opened.push(took);
        let _ = session.cancel().await;
        drop(child);
    }
    let (session, child, took) = open_stdio(node, script).await?;
    opened.push(took);
    let plain = echoes(&session, steps).await;
    let _ = session.cancel().await;
    drop(child);
    Ok((opened, plain?))
}

/// Through `client`'s chatd: a stdio connector running `node script stdio`
/// wherever that chatd runs it; `fresh` new chats' first turns (the server
/// started, initialize and tools/list, all before the first request), then
/// `steps` echo steps in the first: (the first turns, its warm turn, the
/// steps).
async fn stdio_through_chatd(
    sim: &Sim,
    client: &Client,
    node: &Path,
    script_path: &Path,
    fresh: usize,
    steps: usize,
) -> anyhow::Result<(Vec<i64>, Turn, Vec<i64>)> {
    let made = client
        .post(
            "/mcp-connectors",
            json!({
                "name": "Everything",
                "transport": "stdio",
                "command": node.display().to_string(),
                "args": [script_path.display().to_string(), "stdio"],
            }),
        )
        .await?;
    anyhow::ensure!(made.status == 201, "{made:?}");
    let mut cold = Vec::with_capacity(fresh);
    let mut chat = String::new();
    for n in 0..fresh {
        let new = client.create_chat_in("yolo").await?;
        let turn = steps_through_chatd(
            sim,
            client,
            &new,
            1,
            script(1, "echo", |_| json!({"message": format!("cold {n}")})),
        )
        .await?;
        cold.push(turn.first);
        if n == 0 {
            chat = new;
        }
    }
    // Warm-up in the first chat, its session open: the same turn's start.
    let (warm, through) = echo_steps(sim, client, &chat, steps).await?;
    Ok((cold, warm, through))
}

/// What one place of a stdio server measured.
struct StdioFigures {
    /// The lines' first words ("sandboxed stdio").
    label: &'static str,
    /// Where the server ran, in the rows' words.
    server: &'static str,
    through: Vec<i64>,
    plain: Vec<i64>,
    cold: Vec<i64>,
    warm: Turn,
    opened: Vec<i64>,
}

impl StdioFigures {
    /// Says the figures and puts their rows in `rows`; `http` is the HTTP
    /// connector's step (p50, p99), for scale.
    fn report(self, steps: usize, http: (i64, i64), rows: &mut Vec<Row>) {
        let fresh = self.cold.len();
        let (t, d) = (dist(self.through), dist(self.plain));
        say(format!(
            "{}: chatd step with an MCP echo: median {} p99 {}; echo directly with rmcp over stdio (node on the host): median {} p99 {}; the HTTP connector's step above: median {} p99 {} ({steps} calls each)",
            self.label, ms(t.p50), ms(t.p99), ms(d.p50), ms(d.p99), ms(http.0), ms(http.1)
        ));
        let (c, o) = (median_us(&self.cold), median_us(&self.opened));
        say(format!(
            "{}: a new chat's first turn to its first request (the server started, initialize, tools/list): {}; the same turn with the session open: {}; node started + initialize + tools/list directly: {}",
            self.label,
            listed(&self.cold),
            ms(self.warm.first),
            listed(&self.opened)
        ));
        rows.push(
            row(
                format!(
                    "17. MCP echo call through chatd, {}, a whole step ({steps} steps)",
                    self.server
                ),
                format!("median {} / p99 {}", ms(t.p50), ms(t.p99)),
            )
            .baseline(
                format!(
                    "rmcp over stdio directly (node on the host) {} / {}",
                    ms(d.p50),
                    ms(d.p99)
                ),
                format!(
                    "+{} median / +{} p99 (HTTP step {} / {})",
                    ms(t.p50 - d.p50),
                    ms(t.p99 - d.p99),
                    ms(http.0),
                    ms(http.1)
                ),
            ),
        );
        rows.push(
            row(
                format!(
                    "17. a new chat's first turn to its first request, {} (median of {fresh})",
                    self.server
                ),
                format!("{} (each {})", ms(c), listed(&self.cold)),
            )
            .baseline(
                format!(
                    "the session open {}; node + initialize directly {}",
                    ms(self.warm.first),
                    ms(o)
                ),
                format!("+{} over the open session", ms(c - self.warm.first)),
            ),
        );
    }
}
