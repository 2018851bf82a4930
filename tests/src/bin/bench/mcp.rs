//! Figure 17: an MCP tool call through chatd against the same call made
//! directly with the same client (`rmcp` over Streamable HTTP), on the MCP
//! project's reference server from npm; and the memory an open session
//! costs chatd.
//!
//! Through chatd: an agent run whose every step is one `echo` call
//! (scripted on the simulator at tps=0); a step's time is the simulator's
//! arrival of request i+1 minus the end of answer i, so it holds chatd's
//! whole step: the call in the chat's session, the result stored and
//! announced, the next request built. The same run with `todo_write` (a
//! built-in tool) shows chatd's step without MCP. Directly: the bench's own
//! rmcp session calling `echo` one call after the other.
//!
//! Memory: chatd's RSS after a turn in each of N chats with the connector
//! off (no session), then after a turn in each with it on (N sessions).

use super::*;

use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::ServiceExt;
use tandem_tests::mcpservers::Everything;

/// The simulator's script: `steps` answers of one call each, then text.
fn script(steps: usize, name: &str, args: impl Fn(usize) -> Value) -> Value {
    let mut next: Vec<Value> = (0..steps)
        .map(|k| json!({"tool_calls": [{"name": name, "arguments": args(k)}]}))
        .collect();
    next.push(json!({"tokens": 2}));
    Value::Array(next)
}

/// Runs one scripted chat turn of `steps` calls; the per-step times (µs).
async fn steps_through_chatd(
    sim: &Sim,
    client: &Client,
    chat: &str,
    steps: usize,
    script: Value,
) -> anyhow::Result<Vec<i64>> {
    let http = reqwest::Client::new();
    http.delete(format!("{}/sim/requests", sim.url()))
        .send()
        .await?;
    sim.faults(script).await?;
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
    Ok(log
        .windows(2)
        .map(|w| w[1]["at_us"].as_i64().unwrap_or(0) - w[0]["done_us"].as_i64().unwrap_or(0))
        .collect())
}

/// `calls` echo calls, one after the other, in one session of our own.
async fn direct(url: &str, calls: usize) -> anyhow::Result<Vec<i64>> {
    let transport = StreamableHttpClientTransport::with_client(
        reqwest::Client::new(),
        StreamableHttpClientTransportConfig::with_uri(url),
    );
    let session = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("bench", "1"),
    )
    .serve(transport)
    .await?;
    let mut out = Vec::with_capacity(calls);
    for k in 0..calls + 5 {
        let mut args = serde_json::Map::new();
        args.insert("message".into(), json!(format!("step {k}")));
        let started = Instant::now();
        session
            .call_tool(CallToolRequestParams::new("echo").with_arguments(args))
            .await?;
        // The first five warm the session up, as chatd's first steps do.
        if k >= 5 {
            out.push(started.elapsed().as_micros() as i64);
        }
    }
    let _ = session.cancel().await;
    Ok(out)
}

pub(crate) async fn mcp(quick: bool, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    say("\n## 17. MCP: a tool call through chatd against the same client directly; memory per session");
    let steps = if quick { 20 } else { 200 };
    let chats = if quick { 10 } else { 100 };
    let server = Everything::http()
        .await?
        .context("server-everything is not installed (ops/test installs it under tests/npm)")?;
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
        .post(
            "/mcp-connectors",
            json!({"name": "Everything", "url": server.url()}),
        )
        .await?;
    anyhow::ensure!(made.status == 201, "{made:?}");
    let id = made.body["id"].as_str().context("id")?.to_string();
    let chat = client.create_chat_in("yolo").await?;
    // Warm-up: the session opened, the caches filled.
    steps_through_chatd(
        &sim,
        &client,
        &chat,
        5,
        script(5, "echo", |k| json!({"message": format!("warm {k}")})),
    )
    .await?;
    let through = steps_through_chatd(
        &sim,
        &client,
        &chat,
        steps,
        script(steps, "echo", |k| json!({"message": format!("step {k}")})),
    )
    .await?;
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
    .await?;
    let plain = direct(&server.url(), steps).await?;
    let (t, b, d) = (dist(through), dist(builtin), dist(plain));
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
    Ok(())
}
