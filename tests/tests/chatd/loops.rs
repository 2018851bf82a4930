//! Loops end to end: the real `chatd` and `engine-sim`, chatd's loop clock
//! held in a clock file the test moves (never minutes of waiting). What a
//! person sees: the first loop of a chat waits for a yes; an interval loop
//! sends its prompt at each interval and skips a run while the chat is
//! busy; a self-paced loop runs when its model says; the day's cap, three
//! failures and a restart are each what the docs say.

use std::path::PathBuf;

use anyhow::Context;
use serde_json::{json, Value};
use tandem_tests::harness::{offered_tools, set_clock_file, wait_until, Chatd, Client, Sim};

use crate::scripted::{bodies_of, call, script, LONG};

const T0: &str = "2026-12-07T10:00:00Z";

struct Box {
    sim: Sim,
    chatd: Chatd,
    client: Client,
    clock: PathBuf,
    _dir: tempfile::TempDir,
}

async fn start(extra: &[(&str, &str)]) -> anyhow::Result<Box> {
    let dir = tempfile::tempdir()?;
    let clock = dir.path().join("clock");
    set_clock_file(&clock, T0)?;
    let clock_text = clock.to_string_lossy().to_string();
    let mut env = vec![("QSE_CHAT_CLOCK_FILE", clock_text.as_str())];
    env.extend_from_slice(extra);
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start(&sim.url(), &env).await?;
    let client = chatd.client();
    Ok(Box {
        sim,
        chatd,
        client,
        clock,
        _dir: dir,
    })
}

/// `T0` plus `seconds`, as the clock file holds it.
fn at(seconds: i64) -> String {
    let t0: jiff::Timestamp = T0.parse().expect("T0 parses");
    (t0 + jiff::SignedDuration::from_secs(seconds)).to_string()
}

async fn make(client: &Client, chat: &str, body: Value) -> anyhow::Result<Value> {
    let made = client
        .post(&format!("/conversations/{chat}/loops"), body)
        .await?;
    anyhow::ensure!(made.status == 201, "{made:?}");
    Ok(made.body)
}

async fn set_state(client: &Client, chat: &str, id: &str, state: &str) -> anyhow::Result<Value> {
    let changed = client
        .call(
            reqwest::Method::PUT,
            &format!("/conversations/{chat}/loops/{id}"),
            Some(json!({ "state": state })),
        )
        .await?;
    anyhow::ensure!(changed.status == 200, "{changed:?}");
    Ok(changed.body)
}

async fn loop_of(client: &Client, chat: &str, id: &str) -> anyhow::Result<Value> {
    let listed = client.get(&format!("/conversations/{chat}/loops")).await?;
    listed.body["loops"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|l| l["id"] == id)
        .cloned()
        .context("the loop is listed")
}

/// Waits until loop `id` satisfies `check` and no run of the chat works.
async fn settled(
    client: &Client,
    chat: &str,
    id: &str,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> anyhow::Result<Value> {
    wait_until(what, LONG, || async {
        let snapshot = client.snapshot(chat).await.ok()?;
        let idle = snapshot["conversation"]["state"] == "idle";
        let lp = snapshot["loops"]
            .as_array()?
            .iter()
            .find(|l| l["id"] == id)?
            .clone();
        (idle && !lp["running"].as_bool().unwrap_or(true) && check(&lp)).then_some(lp)
    })
    .await
}

/// The user lines a loop sent: `(loop id, run)`.
fn loop_lines(snapshot: &Value) -> Vec<(String, i64)> {
    snapshot["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "user" && m["loop"].is_object())
        .map(|m| {
            (
                m["loop"]["id"].as_str().unwrap_or("").to_string(),
                m["loop"]["run"].as_i64().unwrap_or(0),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interval_loop_runs_at_each_interval_of_the_clock_and_skips_a_busy_chat(
) -> anyhow::Result<()> {
    let b = start(&[("QSE_CHAT_LOOP_MIN_INTERVAL_S", "30")]).await?;
    let client = &b.client;
    let chat = client.create_chat().await?;

    // The chat's first loop waits for the person's yes, with nothing run.
    let a = make(
        client,
        &chat,
        json!({"prompt": "Check the build.", "interval": "1m"}),
    )
    .await?;
    assert_eq!(a["state"], "pending", "{a}");
    assert_eq!(a["interval"], "1m");
    assert_eq!(a["interval_seconds"], 60);
    let a_id = a["id"].as_str().context("id")?.to_string();
    let yes = set_state(client, &chat, &a_id, "active").await?;
    assert_eq!(yes["state"], "active");
    let a1 = settled(client, &chat, &a_id, "loop A's first run", |l| {
        l["runs"] == 1
    })
    .await?;
    assert_eq!(a1["next"], at(60), "{a1}");

    // A second loop starts at once: the chat said yes already.
    let bl = make(
        client,
        &chat,
        json!({"prompt": "Check the deploy.", "interval": "30s"}),
    )
    .await?;
    assert_eq!(bl["state"], "active", "{bl}");
    let b_id = bl["id"].as_str().context("id")?.to_string();
    settled(client, &chat, &b_id, "loop B's first run", |l| {
        l["runs"] == 1
    })
    .await?;

    // At +40 s only B is due: once B ran again, A has still run once.
    set_clock_file(&b.clock, &at(40))?;
    settled(client, &chat, &b_id, "loop B's second run", |l| {
        l["runs"] == 2
    })
    .await?;
    assert_eq!(
        loop_of(client, &chat, &a_id).await?["runs"],
        1,
        "A is not due"
    );
    set_clock_file(&b.clock, &at(65))?;
    settled(client, &chat, &a_id, "loop A's second run", |l| {
        l["runs"] == 2
    })
    .await?;

    let snapshot = client.snapshot(&chat).await?;
    let lines = loop_lines(&snapshot);
    assert_eq!(
        lines,
        vec![
            (a_id.clone(), 1),
            (b_id.clone(), 1),
            (b_id.clone(), 2),
            (a_id.clone(), 2)
        ]
    );

    // Busy at the due time: the run is skipped, not queued.
    script(&b.sim, &chat, vec![json!({"tokens": 4000, "tps": 20})]).await?;
    client.send(&chat, "a long question").await?;
    wait_until("the person's turn to stream", LONG, || async {
        let snapshot = client.snapshot(&chat).await.ok()?;
        (snapshot["conversation"]["state"] == "running").then_some(())
    })
    .await?;
    set_clock_file(&b.clock, &at(130))?;
    let skipped = wait_until("loop A to skip its run", LONG, || async {
        let lp = loop_of(client, &chat, &a_id).await.ok()?;
        (lp["skipped"] == 1).then_some(lp)
    })
    .await?;
    assert_eq!(skipped["runs"], 2, "{skipped}");
    assert!(
        skipped["reason"].as_str().unwrap_or("").contains("busy"),
        "{skipped}"
    );
    assert_eq!(skipped["next"], at(190), "the next interval: {skipped}");
    let stopped = client
        .post(&format!("/conversations/{chat}/stop"), json!({}))
        .await?;
    assert_eq!(stopped.status, 200);

    // Pause and stop: a paused loop is not due; a removed one is gone.
    let paused = set_state(client, &chat, &a_id, "paused").await?;
    assert_eq!(paused["state"], "paused");
    let removed = client
        .call(
            reqwest::Method::DELETE,
            &format!("/conversations/{chat}/loops"),
            None,
        )
        .await?;
    assert_eq!(removed.body["removed"], 2, "{removed:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_paced_loop_runs_when_its_model_says_and_ends_when_done_or_silent(
) -> anyhow::Result<()> {
    let b = start(&[]).await?;
    let client = &b.client;
    let chat = client.create_chat_in("auto").await?;
    script(
        &b.sim,
        &chat,
        vec![
            json!({"tool_calls": [call("schedule_next", json!({"wait": "2m", "reason": "the build runs"}))]}),
            json!({"text": "Still building."}),
            json!({"tool_calls": [call("loop_done", json!({"reason": "the build is green"}))]}),
            json!({"text": "Green."}),
        ],
    )
    .await?;
    let made = make(client, &chat, json!({"prompt": "Watch the build."})).await?;
    assert!(made["interval"].is_null(), "{made}");
    let id = made["id"].as_str().context("id")?.to_string();
    set_state(client, &chat, &id, "active").await?;
    let first = settled(client, &chat, &id, "the first run", |l| l["runs"] == 1).await?;
    assert_eq!(first["wait"], "the build runs", "{first}");
    assert_eq!(first["next"], at(120), "{first}");
    assert_eq!(first["state"], "active");

    set_clock_file(&b.clock, &at(121))?;
    let ended = settled(client, &chat, &id, "the loop to end", |l| {
        l["state"] == "ended"
    })
    .await?;
    assert_eq!(ended["runs"], 2);
    assert_eq!(ended["reason"], "the build is green");

    // The loop's tools are offered only while the chat has a self-paced loop.
    let bodies = bodies_of(&b.sim, &chat).await?;
    assert!(offered_tools(&bodies[0])
        .iter()
        .any(|t| t == "schedule_next"));
    assert!(!offered_tools(&bodies[3])
        .iter()
        .any(|t| t == "schedule_next"));

    // A run that calls neither tool ends its loop with a note.
    let silent = make(client, &chat, json!({"prompt": "Watch again."})).await?;
    assert_eq!(silent["state"], "active", "the chat said yes before");
    let id = silent["id"].as_str().context("id")?.to_string();
    let ended = settled(client, &chat, &id, "the silent loop to end", |l| {
        l["state"] == "ended"
    })
    .await?;
    assert!(
        ended["reason"]
            .as_str()
            .unwrap_or("")
            .contains("neither schedule_next nor loop_done"),
        "{ended}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_days_cap_waits_for_the_next_day() -> anyhow::Result<()> {
    let b = start(&[("QSE_CHAT_LOOP_DAILY_RUNS", "2")]).await?;
    let client = &b.client;
    let chat = client.create_chat().await?;
    let made = make(client, &chat, json!({"prompt": "Ping.", "interval": "1m"})).await?;
    let id = made["id"].as_str().context("id")?.to_string();
    set_state(client, &chat, &id, "active").await?;
    settled(client, &chat, &id, "run 1", |l| l["runs"] == 1).await?;
    set_clock_file(&b.clock, &at(61))?;
    settled(client, &chat, &id, "run 2", |l| l["runs"] == 2).await?;
    set_clock_file(&b.clock, &at(122))?;
    let capped = settled(client, &chat, &id, "the day's cap", |l| {
        l["reason"].as_str().unwrap_or("").contains("next day")
    })
    .await?;
    assert_eq!(capped["runs"], 2);
    assert_eq!(capped["next"], "2026-12-08T00:00:00Z", "{capped}");
    set_clock_file(&b.clock, "2026-12-08T00:00:30Z")?;
    settled(client, &chat, &id, "run 3 the next day", |l| l["runs"] == 3).await?;

    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loops_go_on_after_a_kill9_the_cut_run_counts_failed_and_three_failures_pause(
) -> anyhow::Result<()> {
    let mut b = start(&[]).await?;
    let client = b.client.clone();
    let chat = client.create_chat().await?;
    script(&b.sim, &chat, vec![json!({"tokens": 4000, "tps": 20})]).await?;
    let made = make(
        &client,
        &chat,
        json!({"prompt": "Tail the log.", "interval": "5m"}),
    )
    .await?;
    let id = made["id"].as_str().context("id")?.to_string();
    set_state(&client, &chat, &id, "active").await?;
    wait_until("the loop's run to stream", LONG, || async {
        let snapshot = client.snapshot(&chat).await.ok()?;
        (snapshot["conversation"]["state"] == "running").then_some(())
    })
    .await?;
    b.chatd.restart().await?;
    let cut = settled(&client, &chat, &id, "the cut run counted", |l| {
        l["failures"] == 1
    })
    .await?;
    assert_eq!(cut["state"], "active");
    assert_eq!(cut["runs"], 1);
    set_clock_file(&b.clock, &at(301))?;
    let next = settled(&client, &chat, &id, "the next run after the restart", |l| {
        l["runs"] == 2
    })
    .await?;
    assert_eq!(next["failures"], 0, "a done run clears the count");

    // Three failed runs in a row pause it; resume starts it again.
    let fail = json!({"status": 404, "message": "The model `x` does not exist."});
    script(&b.sim, &chat, vec![fail.clone(), fail.clone(), fail]).await?;
    for (n, t) in [(3, 601), (4, 901), (5, 1201)] {
        set_clock_file(&b.clock, &at(t))?;
        settled(&client, &chat, &id, &format!("run {n}"), |l| l["runs"] == n).await?;
    }
    let paused = loop_of(&client, &chat, &id).await?;
    assert_eq!(paused["state"], "paused", "{paused}");
    assert_eq!(paused["failures"], 3);
    assert!(paused["reason"]
        .as_str()
        .unwrap_or("")
        .contains("3 failed runs"));
    set_clock_file(&b.clock, &at(1501))?;
    let resumed = set_state(&client, &chat, &id, "active").await?;
    assert_eq!(resumed["failures"], 0);
    settled(&client, &chat, &id, "run 6 after resume", |l| {
        l["runs"] == 6
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_loops_are_refused_by_name_and_a_chat_has_three_at_most() -> anyhow::Result<()> {
    let b = start(&[]).await?;
    let client = &b.client;
    let chat = client.create_chat().await?;
    let path = format!("/conversations/{chat}/loops");
    for (body, field, says) in [
        (json!({"prompt": " "}), "prompt", "empty"),
        (
            json!({"prompt": "x", "interval": "30s"}),
            "interval",
            "outside 60 seconds",
        ),
        (
            json!({"prompt": "x", "interval": "25h"}),
            "interval",
            "to 24h",
        ),
        (
            json!({"prompt": "x", "interval": "soon"}),
            "interval",
            "not an interval",
        ),
        (json!({"prompt": "x".repeat(4001)}), "prompt", "4000"),
    ] {
        let refused = client.post(&path, body).await?;
        assert_eq!(refused.status, 400, "{refused:?}");
        assert_eq!(refused.body["error"]["field"], field, "{refused:?}");
        let message = refused.body["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains(says), "{message}");
    }
    assert!(client.get(&path).await?.body["loops"]
        .as_array()
        .is_some_and(Vec::is_empty));
    for n in 0..3 {
        make(
            client,
            &chat,
            json!({"prompt": format!("p{n}"), "interval": "1h"}),
        )
        .await?;
    }
    let fourth = client
        .post(&path, json!({"prompt": "p3", "interval": "1h"}))
        .await?;
    assert_eq!(fourth.status, 409, "{fourth:?}");
    assert_eq!(fourth.body["error"]["type"], "loop_limit");
    let bad_state = client
        .call(
            reqwest::Method::PUT,
            &format!("{path}/nope"),
            Some(json!({"state": "ended"})),
        )
        .await?;
    assert_eq!(bad_state.status, 400, "{bad_state:?}");
    Ok(())
}
