//! MCP's older HTTP+SSE transport under a fault issue 27 names: its
//! endpoint answers 404 while the event stream stays open (a server that
//! restarted behind a proxy holding the stream). chatd must fail clearly
//! and at once, never wait out a bound, and leave no stream open. Every
//! wait is on a condition with a bound.

use std::time::{Duration, Instant};

use crate::setup::{connector, start, QUICK};
use anyhow::Context;
use serde_json::{json, Value};
use tandem_tests::harness::{offered_tools, run_id, system_text, tool_results, wait_until};
use tandem_tests::mcpservers::FakeMcp;

/// Far under every bound a hang would wait out: a message's POST (30 s),
/// an opening (30 s), a call (360 s).
const AT_ONCE: Duration = Duration::from_secs(15);

/// Waits (bounded) until the fake's event streams still held number `n`.
async fn streams_open(fake: &FakeMcp, n: usize) -> anyhow::Result<()> {
    wait_until(
        &format!("{n} event streams held open"),
        Duration::from_secs(10),
        || async move { (fake.legacy_streams_open() == n).then_some(()) },
    )
    .await
}

/// A chat's session is open on the stream; then every POST is answered
/// 404 and the stream stays open. The call in progress fails at once with
/// a line naming the connector and the 404 (the session, found gone, is
/// opened once more, which 404s too), the turn ends done, and both streams
/// are closed. The next turn is told the connector is unavailable and not
/// offered its tools; a test says cant_connect with the 404, at once, its
/// stream closed. The server back, a test connects again and lets its
/// stream go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_answered_404_while_the_stream_stays_open_fails_at_once_and_leaks_nothing(
) -> anyhow::Result<()> {
    let fake = FakeMcp::start(None).await?;
    let (sim, chatd, client) = start().await?;
    let id = connector(&client, "Older", &fake.url("/sse"), None).await?;
    let made = client
        .post("/conversations", json!({"permission_mode": "yolo"}))
        .await?;
    let chat = made.body["id"].as_str().context("chat id")?.to_string();
    let turn = |word: &'static str| {
        let (sim, client, chat) = (&sim, &client, &chat);
        async move {
            sim.faults(json!([
                {"tool_calls": [{"name": "lookup", "arguments": {"word": word}}]},
                {"tokens": 3},
            ]))
            .await?;
            let started = Instant::now();
            let run = run_id(&client.send(chat, "look it up").await?)?;
            let record = client
                .wait_run(chat, &run, &["done", "failed", "stopped"], QUICK)
                .await?;
            anyhow::Ok::<(Value, Duration)>((record, started.elapsed()))
        }
    };

    let (record, _) = turn("one").await?;
    assert_eq!(record["status"], "done", "{record}");
    streams_open(&fake, 1).await?;

    fake.set_legacy_lost(true);
    let (record, took) = turn("two").await?;
    assert_eq!(record["status"], "done", "{record}");
    assert!(took < AT_ONCE, "the turn took {took:?}");
    let results = tool_results(&client.snapshot(&chat).await?);
    assert_eq!(
        results,
        [
            "glossary: one is a word the fake knows",
            "MCP connector Older: the server answered HTTP 404",
        ],
        "{results:?}"
    );
    let streams = fake.seen().iter().filter(|s| s.path == "/sse").count();
    assert!(
        streams >= 2,
        "the session was opened again: {:?}",
        fake.seen()
    );
    streams_open(&fake, 0).await?;

    let before = sim.requests().await?.len();
    let (record, took) = turn("three").await?;
    assert_eq!(record["status"], "done", "{record}");
    assert!(took < AT_ONCE, "the turn took {took:?}");
    let requests = sim.requests().await?;
    let asked = requests.get(before).context("the third turn's request")?;
    let system = system_text(&asked["body"]);
    assert!(
        system.contains("unavailable this turn: MCP connector Older (cannot be reached)"),
        "{system}"
    );
    let offered = offered_tools(&asked["body"]);
    assert!(!offered.iter().any(|t| t == "lookup"), "{offered:?}");
    streams_open(&fake, 0).await?;

    let started = Instant::now();
    let tested = client
        .post(&format!("/mcp-connectors/{id}/test"), json!({}))
        .await?;
    assert!(started.elapsed() < AT_ONCE, "{:?}", started.elapsed());
    assert_eq!(tested.body["state"], "cant_connect", "{}", tested.body);
    assert_eq!(
        tested.body["reason"], "the server answered HTTP 404",
        "{}",
        tested.body
    );
    streams_open(&fake, 0).await?;

    fake.set_legacy_lost(false);
    let tested = client
        .post(&format!("/mcp-connectors/{id}/test"), json!({}))
        .await?;
    assert_eq!(tested.body["state"], "connected", "{}", tested.body);
    streams_open(&fake, 0).await?;
    assert!(!chatd.log().contains("panicked"), "{}", chatd.log());
    Ok(())
}
