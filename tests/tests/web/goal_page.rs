//! The page's part of a chat's goal (docs/api.md "Goals"; subagents.js) in
//! headless Chromium against the real chatd with its front and the engine
//! simulator, the model scripted on the chat's session: `/goal <text>` in
//! the composer sets the goal instead of sending a message; the line over
//! the composer shows it with its turn while it runs, the transcript its
//! goal lines (the turn that goes on by itself as such), and "Goal reached"
//! with the summary at the end, from the snapshot too; on a slow turn
//! Pause, Resume and Clear work from that line, and a refused `/goal`
//! command says why under the composer. Every wait is a bounded poll.

use std::time::Duration;

use anyhow::ensure;
use serde_json::{json, Value};
use tandem_tests::browser::{self, Browser, Chromedriver, DESKTOP, ENTER};
use tandem_tests::harness::{Chatd, Sim};

const BOUND: Duration = Duration::from_secs(60);

const READY: &str = "#settings-open";

async fn script(sim: &Sim, chat: &str, next: Value) -> anyhow::Result<()> {
    sim.post(
        "/sim/faults",
        json!({"session": format!("chat-{chat}"), "next": next}),
    )
    .await?;
    Ok(())
}

/// Keeps, in `window.goalSeen`, every text the goal line's state showed:
/// a turn that lasts a few milliseconds is still seen.
async fn record_goal_states(b: &Browser) -> anyhow::Result<()> {
    b.eval(
        "window.goalSeen = [];
         new MutationObserver((records) => {
           for (const r of records) for (const n of r.addedNodes) window.goalSeen.push(n.data);
         }).observe(document.querySelector('#goal-state'), { childList: true });
         return true;",
    )
    .await?;
    Ok(())
}

/// What the composer holds.
async fn composer_text(b: &Browser) -> anyhow::Result<String> {
    let v = b
        .eval("return document.querySelector('#composer').value;")
        .await?;
    Ok(v.as_str().unwrap_or("").to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_goal_typed_in_the_composer_runs_its_turns_and_ends_reached_with_its_summary(
) -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start_with_front(&sim.url(), &[], None).await?;
    let client = chatd.client();
    let driver = Chromedriver::start().await?;
    let chat = client.create_chat_in("auto").await?;
    let front = chatd.front_url();
    script(
        &sim,
        &chat,
        json!([
            {"text": "working"},
            {"tool_calls": [{"name": "goal_done", "arguments":
                {"summary": "summary written", "evidence": ["summary.md"]}}]},
            {"text": "done"},
        ]),
    )
    .await?;
    let b = Browser::open_chat(&driver, DESKTOP, &front, Some(&chat), READY).await?;
    ensure!(!b.visible("#goal").await?, "no goal, no line");
    record_goal_states(&b).await?;

    b.type_into("#composer", "/goal Write the summary").await?;
    b.click("#send").await?;

    // The goal ends reached, its summary and evidence under "Goal reached".
    b.wait_text("#goal-state", |t| t == "Goal reached", BOUND)
        .await?;
    let note = b.text("#goal .goal-note").await?;
    ensure!(
        note.contains("summary written") && note.contains("summary.md"),
        "{note:?}"
    );
    ensure!(
        b.text("#goal .goal-text").await? == "Write the summary",
        "the goal's text"
    );
    ensure!(
        b.text("#goal-clear").await? == "Dismiss",
        "a reached goal is dismissed"
    );
    ensure!(
        !b.visible("#goal-pause").await? && !b.visible("#goal-resume").await?,
        "nothing to pause or resume"
    );
    // While it ran the line said which turn it was on.
    let seen = b.eval("return window.goalSeen;").await?;
    let seen: Vec<&str> = seen
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    ensure!(
        seen.contains(&"Goal · turn 1 of 20") && seen.contains(&"Goal · turn 2 of 20"),
        "{seen:?}"
    );

    // The command set a goal; it sent no message.
    ensure!(
        composer_text(&b).await?.is_empty(),
        "the box is empty again"
    );
    let stored = client.snapshot(&chat).await?;
    ensure!(stored["goal"]["state"] == "done", "{}", stored["goal"]);
    let messages = stored["messages"].as_array().cloned().unwrap_or_default();
    ensure!(
        !messages.iter().any(|m| m["role"] == "user"),
        "no message of the person's: {messages:?}"
    );

    // The transcript: small goal lines, not bubbles; the turn that went on by itself as such.
    let line = |event: &str| format!(".message[data-role='goal'][data-goal-event='{event}'] .body");
    let set = b.wait_text(&line("set"), |t| !t.is_empty(), BOUND).await?;
    ensure!(set == "Goal set: Write the summary", "{set:?}");
    let next = b
        .wait_text(&line("continue"), |t| !t.is_empty(), BOUND)
        .await?;
    ensure!(
        next.contains("Continue toward the goal · turn 2"),
        "{next:?}"
    );
    let reached = b.wait_text(&line("done"), |t| !t.is_empty(), BOUND).await?;
    ensure!(reached == "Goal reached: summary written", "{reached:?}");
    ensure!(
        b.count(".message[data-role='goal'] .actions").await? == 0,
        "a goal line has no Edit and no Branch"
    );
    let style = b
        .eval(
            "const s = getComputedStyle(document.querySelector(\".message[data-goal-event='continue'] .body\"));
             return [s.fontStyle, s.borderLeftStyle];",
        )
        .await?;
    ensure!(style == json!(["italic", "dashed"]), "{style}");
    b.close().await?;

    // A page opened now has the same line from the snapshot.
    let b = Browser::open_chat(&driver, DESKTOP, &front, Some(&chat), READY).await?;
    b.wait_text("#goal-state", |t| t == "Goal reached", BOUND)
        .await?;
    b.click("#goal-clear").await?;
    b.wait_hidden("#goal", BOUND).await?;
    b.wait_text(
        ".message[data-goal-event='cleared'] .body",
        |t| t == "Goal cleared: Write the summary",
        BOUND,
    )
    .await?;
    ensure!(
        client.snapshot(&chat).await?["goal"].is_null(),
        "chatd cleared it"
    );
    b.close().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_goal_on_a_slow_turn_is_paused_resumed_and_cleared_from_its_line() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start_with_front(&sim.url(), &[], None).await?;
    let client = chatd.client();
    let driver = Chromedriver::start().await?;
    let chat = client.create_chat_in("auto").await?;
    script(&sim, &chat, json!([{"tokens": 4000, "tps": 20}])).await?;
    let b = Browser::open_chat(&driver, DESKTOP, &chatd.front_url(), Some(&chat), READY).await?;

    b.type_into("#composer", &format!("/goal Count to four thousand{ENTER}"))
        .await?;
    b.wait_text("#goal-state", |t| t == "Goal · turn 1 of 20", BOUND)
        .await?;
    ensure!(
        b.text("#goal .goal-text").await? == "Count to four thousand",
        "the goal's text"
    );
    ensure!(
        b.visible("#goal-pause").await?,
        "an active goal can be paused"
    );
    ensure!(!b.visible("#goal-resume").await?, "and not resumed");

    // Pause: the turn goes on, the line says paused and why.
    b.click("#goal-pause").await?;
    b.wait_text("#goal-state", |t| t == "Goal paused", BOUND)
        .await?;
    let why = b.text("#goal .goal-note").await?;
    ensure!(why == "Paused by you", "{why:?}");
    ensure!(!b.visible("#goal-pause").await?, "paused already");
    b.wait_text(
        ".message[data-goal-event='paused'] .body",
        |t| t == "Goal paused: paused by you",
        BOUND,
    )
    .await?;
    ensure!(
        client.snapshot(&chat).await?["conversation"]["state"] == "running",
        "the turn goes on"
    );

    // Resume: active again with new counts; its turn follows the one under way.
    b.click("#goal-resume").await?;
    b.wait_text(
        "#goal-state",
        |t| t == "Goal · starts after this answer",
        BOUND,
    )
    .await?;
    ensure!(b.visible("#goal-pause").await?, "active again");
    ensure!(
        !b.visible("#goal .goal-note").await?,
        "no note while active"
    );

    // A refused command says why under the composer, and gives the words back.
    b.type_into("#composer", &format!("/goal resume{ENTER}"))
        .await?;
    let refused = b
        .wait_text("#composer-error", |t| !t.is_empty(), BOUND)
        .await?;
    ensure!(refused.contains("not paused or blocked"), "{refused:?}");
    ensure!(
        composer_text(&b).await? == "/goal resume",
        "the words are back"
    );
    b.eval("const box = document.querySelector('#composer'); box.value = ''; box.dispatchEvent(new Event('input')); return true;")
        .await?;

    // Clear: the line goes; chatd has no goal.
    b.click("#goal-clear").await?;
    b.wait_hidden("#goal", BOUND).await?;
    b.wait_text(
        ".message[data-goal-event='cleared'] .body",
        |t| t == "Goal cleared: Count to four thousand",
        BOUND,
    )
    .await?;
    ensure!(
        client.snapshot(&chat).await?["goal"].is_null(),
        "chatd cleared it"
    );
    b.click("#stop").await?;
    b.close().await?;
    Ok(())
}
