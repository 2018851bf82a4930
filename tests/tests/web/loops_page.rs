//! The page's part of a chat's loops (docs/api.md "Loops"; subagents.js) in
//! headless Chromium against the real chatd with its front and the engine
//! simulator, chatd's loop clock held in a clock file the test moves (never
//! minutes of waiting): `/loop 5m <prompt>` in the composer makes the chat's
//! first loop, shown as the card asking for a yes, from the snapshot too
//! after a reload; Start makes it a line over the composer that counts its
//! runs, each run's message labelled "Loop run N" in the transcript; Pause,
//! Resume and Stop work from that line. In the chat that said yes,
//! `/loop <prompt>` starts a self-paced loop at once; its run (the model
//! calls neither loop tool) ends it, the line says so and why, and Dismiss
//! takes it away. A refused `/loop` says why under the composer. Every wait
//! is a bounded poll.

use std::time::Duration;

use anyhow::ensure;
use serde_json::Value;
use tandem_tests::browser::{self, Browser, Chromedriver, DESKTOP, ENTER};
use tandem_tests::harness::{set_clock_file, Chatd, Sim};

const BOUND: Duration = Duration::from_secs(60);

const READY: &str = "#settings-open";

const T0: &str = "2026-12-07T10:00:00Z";
/// `T0` plus five minutes: the interval loop's second run is due.
const T5: &str = "2026-12-07T10:05:00Z";

/// The only loop line's state text.
const STATE: &str = "#loops .loop .loop-state";

/// What the composer holds.
async fn composer_text(b: &Browser) -> anyhow::Result<String> {
    let v = b
        .eval("return document.querySelector('#composer').value;")
        .await?;
    Ok(v.as_str().unwrap_or("").to_string())
}

/// The chat's loops as chatd has them.
fn loops_of(snapshot: &Value) -> Vec<Value> {
    snapshot["loops"].as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_typed_in_the_composer_asks_first_then_runs_pauses_stops_and_a_self_paced_one_ends(
) -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let clock = dir.path().join("clock");
    set_clock_file(&clock, T0)?;
    let clock_text = clock.to_string_lossy().to_string();
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start_with_front(
        &sim.url(),
        &[("QSE_CHAT_CLOCK_FILE", clock_text.as_str())],
        None,
    )
    .await?;
    let client = chatd.client();
    let driver = Chromedriver::start().await?;
    let chat = client.create_chat().await?;
    let b = Browser::open_chat(&driver, DESKTOP, &chatd.front_url(), Some(&chat), READY).await?;
    ensure!(!b.visible("#loops").await?, "no loop, no line");

    // A refused command says why under the composer and gives the words back.
    b.type_into("#composer", &format!("/loop 10s check too often{ENTER}"))
        .await?;
    let refused = b
        .wait_text("#composer-error", |t| !t.is_empty(), BOUND)
        .await?;
    ensure!(refused.contains("outside 60 seconds"), "{refused:?}");
    ensure!(
        composer_text(&b).await? == "/loop 10s check too often",
        "the words are back"
    );
    b.eval("const box = document.querySelector('#composer'); box.value = ''; box.dispatchEvent(new Event('input')); return true;")
        .await?;

    // The chat's first loop waits for a yes: the card, with its prompt.
    b.type_into("#composer", &format!("/loop 5m check the build{ENTER}"))
        .await?;
    let card = "#loops .loop-card[data-state='pending']";
    let asks = b
        .wait_text(&format!("{card} .loop-state"), |t| !t.is_empty(), BOUND)
        .await?;
    ensure!(
        asks == "Run this every 5 minutes until you stop it?",
        "{asks:?}"
    );
    ensure!(
        b.text(&format!("{card} .goal-note")).await? == "check the build",
        "the card shows the prompt"
    );
    ensure!(
        composer_text(&b).await?.is_empty(),
        "the box is empty again"
    );
    let stored = client.snapshot(&chat).await?;
    let loops = loops_of(&stored);
    ensure!(
        loops.len() == 1 && loops[0]["state"] == "pending" && loops[0]["interval"] == "5m",
        "{loops:?}"
    );
    ensure!(
        stored["messages"].as_array().is_none_or(Vec::is_empty),
        "the command sent no message"
    );

    // Opened again, the page has the card from the snapshot.
    b.eval("window.before = true; return true;").await?;
    b.client().refresh().await?;
    b.wait_state("live").await?;
    b.wait_js(
        "the card after the reload",
        "return !window.before && !!document.querySelector(\"#loops .loop-card .loop-start\");",
        BOUND,
    )
    .await?;

    // Start: due at once, its first run done; the transcript labels its message.
    b.click(".loop-card .loop-start").await?;
    let line = b
        .wait_text(
            STATE,
            |t| t.contains("run 1") && !t.contains("running"),
            BOUND,
        )
        .await?;
    ensure!(line == "Loop · every 5 min · run 1", "{line:?}");
    ensure!(
        b.text("#loops .loop .goal-text").await? == "check the build",
        "the line shows the prompt"
    );
    let label = b
        .wait_text(
            ".message[data-role='user'] .loop-chip",
            |t| !t.is_empty(),
            BOUND,
        )
        .await?;
    ensure!(label == "Loop run 1", "{label:?}");
    ensure!(
        b.text(".message[data-role='user'] .body").await? == "check the build",
        "the loop's message is its prompt"
    );

    // `/loop list` goes to the lines: the focus is on the loop's first button.
    b.type_into("#composer", &format!("/loop list{ENTER}"))
        .await?;
    b.wait_js(
        "the focus on the loop's Pause",
        "return document.activeElement && document.activeElement.matches('#loops .loop-pause');",
        BOUND,
    )
    .await?;

    // `/loop stop` with an id no loop has says so under the composer.
    b.type_into("#composer", &format!("/loop stop zzzz{ENTER}"))
        .await?;
    let refused = b
        .wait_text("#composer-error", |t| t.contains("zzzz"), BOUND)
        .await?;
    ensure!(
        refused == "No loop of this chat starts with zzzz.",
        "{refused:?}"
    );
    b.eval("const box = document.querySelector('#composer'); box.value = ''; box.dispatchEvent(new Event('input')); return true;")
        .await?;

    // Five minutes on by chatd's clock: the second run.
    set_clock_file(&clock, T5)?;
    b.wait_text(STATE, |t| t == "Loop · every 5 min · run 2", BOUND)
        .await?;
    b.wait_js(
        "the second run's label",
        "const l = [...document.querySelectorAll('.loop-chip')].map((n) => n.textContent);
         return l.length === 2 && l[1] === 'Loop run 2';",
        BOUND,
    )
    .await?;

    // Pause says it is paused and why; Resume makes it active again.
    b.click("#loops .loop-pause").await?;
    b.wait_text(STATE, |t| t.starts_with("Loop paused · every 5 min"), BOUND)
        .await?;
    ensure!(
        b.text("#loops .loop .goal-note").await? == "Paused by you",
        "why it is paused"
    );
    ensure!(!b.visible("#loops .loop-pause").await?, "paused already");
    // Resumed, it is due at once: its third run.
    b.click("#loops .loop-resume").await?;
    b.wait_text(STATE, |t| t == "Loop · every 5 min · run 3", BOUND)
        .await?;
    ensure!(b.visible("#loops .loop-pause").await?, "active again");

    // Stop: the line goes, chatd has no loop.
    b.click("#loops .loop-stop").await?;
    b.wait_hidden("#loops", BOUND).await?;
    ensure!(b.count("#loops .loop").await? == 0, "no line left");
    ensure!(
        loops_of(&client.snapshot(&chat).await?).is_empty(),
        "chatd removed it"
    );

    // The chat said yes before: a self-paced loop starts at once. Its run
    // (the simulator answers plain text) calls neither loop tool: it ends.
    b.type_into("#composer", &format!("/loop watch the deploy{ENTER}"))
        .await?;
    b.wait_js(
        "the self-paced loop's label",
        "const l = [...document.querySelectorAll('.loop-chip')].map((n) => n.textContent);
         return l.length === 4 && l[3] === 'Loop run 1';",
        BOUND,
    )
    .await?;
    ensure!(
        b.count("#loops .loop-card").await? == 0,
        "no card: the chat said yes before"
    );
    let ended = b
        .wait_text(STATE, |t| t.starts_with("Loop ended"), BOUND)
        .await?;
    ensure!(ended == "Loop ended · self-paced · run 1", "{ended:?}");
    let why = b.text("#loops .loop .goal-note").await?;
    ensure!(
        why == "Its run called neither schedule_next nor loop_done",
        "{why:?}"
    );
    ensure!(
        !b.visible("#loops .loop-stop").await? && b.visible("#loops .loop-dismiss").await?,
        "an ended loop is dismissed"
    );
    b.click("#loops .loop-dismiss").await?;
    b.wait_hidden("#loops", BOUND).await?;
    ensure!(
        loops_of(&client.snapshot(&chat).await?).is_empty(),
        "chatd removed it"
    );
    b.close().await?;
    Ok(())
}
