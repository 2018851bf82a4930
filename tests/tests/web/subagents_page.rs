//! The page's sub-agents (README "Sub-agents"; subagents.js) in headless
//! Chromium against the real chatd with its front and the engine simulator:
//! a chat whose model (scripted per chat by engine-sim's session faults)
//! starts a slow and a quick background sub-agent; the header's count, the
//! menu, one's read-only panel following its answer, Stop, and the results
//! folded in the chat. Every wait is a bounded poll.

use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};
use tandem_tests::browser::{self, Browser, Chromedriver, DESKTOP};
use tandem_tests::harness::{wait_until, Chatd, Sim};

const BOUND: Duration = Duration::from_secs(60);

fn spawn(task: &str) -> Value {
    json!({"name": "spawn_agent", "arguments": {"task": task, "wait": false}})
}

/// A chat starts a slow background sub-agent (400 tokens at 10 a second)
/// and a quick one. The header says "Sub-agents (n)", n the running ones;
/// the quick one's result shows as a folded "Result of «Quick one» (done)"
/// block, not as the person's message; the menu lists the slow one running
/// in the background; its panel shows its task and its answer as it
/// streams; Stop there makes it stopped (the menu says so, the count is 0)
/// and what it had arrives folded too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_lists_a_chats_sub_agents_shows_one_and_stops_it() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start_with_front(&sim.url(), &[], None).await?;
    let client = chatd.client();
    let driver = Chromedriver::start().await?;
    let chat = client.create_chat_in("auto").await?;
    sim.post(
        "/sim/faults",
        json!({"session": format!("chat-{chat}"), "next": [{"tool_calls": [
            spawn("Slow one\n[sim tokens=400 tps=10]"),
            spawn("Quick one\n[sim tokens=5]"),
        ]}]}),
    )
    .await?;
    let b = Browser::open_chat(
        &driver,
        DESKTOP,
        &chatd.front_url(),
        Some(&chat),
        "#files-toggle",
    )
    .await?;
    assert!(
        !b.visible("#subagents").await?,
        "no control before the chat has a sub-agent"
    );
    b.type_into("#composer", "Look into it with two helpers")
        .await?;
    b.click("#send").await?;

    // The quick one's result: folded, in its own words, not a bubble of the person's.
    let result = ".message[data-role='result'] details.sub-result > summary";
    b.wait_text(result, |t| t.contains("«Quick one»"), BOUND)
        .await?;
    assert_eq!(b.text(result).await?, "Result of «Quick one» (done)");
    b.wait_text("#subagents > summary", |t| t == "Sub-agents (1)", BOUND)
        .await?;
    let listed = client
        .get(&format!("/conversations/{chat}/subagents"))
        .await?;
    let id_of = |title: &str| -> anyhow::Result<String> {
        listed.body["subagents"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|s| s["title"] == title)
            .and_then(|s| s["id"].as_str())
            .map(str::to_string)
            .with_context(|| format!("no {title} in {}", listed.body))
    };
    let (slow, quick) = (id_of("Slow one")?, id_of("Quick one")?);

    // The menu: each one's title, state and kind; Stop on the running one only.
    b.click("#subagents > summary").await?;
    let row = |id: &str| format!(".sub-row[data-sub-id='{id}']");
    let shown = b
        .wait_text(&row(&slow), |t| t.contains("running"), BOUND)
        .await?;
    assert!(
        shown.contains("Slow one") && shown.contains("background"),
        "{shown:?}"
    );
    assert!(b.visible(&format!("{} .sub-stop", row(&slow))).await?);
    let shown = b.text(&row(&quick)).await?;
    assert!(
        shown.contains("Quick one") && shown.contains("done"),
        "{shown:?}"
    );
    assert_eq!(b.count(&format!("{} .sub-stop", row(&quick))).await?, 0);

    // Its panel: the task, then its answer growing as it streams.
    b.click(&format!("{} .sub-open", row(&slow))).await?;
    b.wait_visible("#sub-panel", BOUND).await?;
    assert_eq!(b.text("#sub-title").await?, "Slow one");
    b.wait_text(
        "#sub-log .sub-msg[data-role='user']",
        |t| t.starts_with("Slow one"),
        BOUND,
    )
    .await?;
    let answer = "#sub-log .sub-msg[data-role='assistant']";
    let first = b.wait_text(answer, |t| t.contains("w1 "), BOUND).await?;
    b.wait_text(answer, |t| t.len() > first.len(), BOUND)
        .await?;
    assert!(b.text("#sub-state").await?.starts_with("running"));

    // Stop: stopped, here, in the menu and in chatd; the count goes to 0.
    b.click("#sub-stop").await?;
    b.wait_text("#sub-state", |t| t.starts_with("stopped"), BOUND)
        .await?;
    b.wait_hidden("#sub-stop", BOUND).await?;
    let state = wait_until("chatd to say the slow one stopped", BOUND, || async {
        let answer = client
            .get(&format!("/conversations/{chat}/subagents/{slow}"))
            .await
            .ok()?;
        let state = answer.body["subagent"]["state"].as_str()?.to_string();
        (state != "running").then_some(state)
    })
    .await?;
    assert_eq!(state, "stopped");
    b.click("#sub-close").await?;
    b.wait_hidden("#sub-panel", BOUND).await?;
    b.wait_text("#subagents > summary", |t| t == "Sub-agents (0)", BOUND)
        .await?;
    b.click("#subagents > summary").await?;
    b.wait_text(&row(&slow), |t| t.contains("stopped"), BOUND)
        .await?;
    assert_eq!(b.count(".sub-row .sub-stop").await?, 0);

    // What it had reaches the chat, folded like the quick one's.
    let folded = ".message[data-role='result'] details.sub-result";
    b.wait_count(folded, |n| n == 2, BOUND).await?;
    let summaries = b
        .eval(&format!(
            "return [...document.querySelectorAll(\"{folded} > summary\")].map((s) => s.textContent);"
        ))
        .await?;
    assert!(
        summaries
            .as_array()
            .is_some_and(|s| s.iter().any(|t| t == "Result of «Slow one» (stopped)")),
        "{summaries}"
    );
    assert_eq!(
        b.count(".message[data-role='user'] details.sub-result")
            .await?,
        0,
        "no result is shown as the person's message"
    );
    b.close().await?;
    Ok(())
}

/// A foreground sub-agent of a chat in `ask` mode asks before it writes:
/// its card shows in the chat as "Sub-agent «Write it» asks: write_file",
/// live and again on a page opened afterwards (the chat's snapshot does not
/// hold it: the page asks the running sub-agent for its cards); Allow once
/// there answers at the sub-agent's id, and the write is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agents_card_shows_in_its_chat_and_is_answered_at_its_id() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start_with_front(&sim.url(), &[], None).await?;
    let client = chatd.client();
    let driver = Chromedriver::start().await?;
    let chat = client.create_chat_in("ask").await?;
    let work = chatd.data_dir().join("workspaces").join(&chat);
    std::fs::create_dir_all(&work)?;
    let task = r#"Write it
[sim tool_steps=1 tool_calls=[{"name":"write_file","arguments":{"path":"b.txt","content":"from the sub-agent"}}]]"#;
    sim.post(
        "/sim/faults",
        json!({"session": format!("chat-{chat}"), "next": [{"tool_calls": [
            {"name": "spawn_agent", "arguments": {"task": task, "wait": true}},
        ]}]}),
    )
    .await?;
    let front = chatd.front_url();
    let b = Browser::open_chat(&driver, DESKTOP, &front, Some(&chat), "#files-toggle").await?;
    b.type_into("#composer", "Write b.txt with a helper")
        .await?;
    b.click("#send").await?;
    let head = "#consents .consent .consent-head";
    let live = b.wait_text(head, |t| t.contains("Write it"), BOUND).await?;
    assert_eq!(live, "Sub-agent «Write it» asks: write_file");
    b.wait_text("#subagents > summary", |t| t == "Sub-agents (1)", BOUND)
        .await?;
    b.close().await?;

    // A page opened now: the card again, from the sub-agent itself.
    let b = Browser::open_chat(&driver, DESKTOP, &front, Some(&chat), "#files-toggle").await?;
    let again = b.wait_text(head, |t| t.contains("Write it"), BOUND).await?;
    assert_eq!(again, "Sub-agent «Write it» asks: write_file");
    b.click("#consents .consent .decision.once").await?;
    b.wait_count("#consents .consent", |n| n == 0, BOUND)
        .await?;
    let written = work.join("b.txt");
    wait_until("the sub-agent's write", BOUND, || async {
        std::fs::read_to_string(&written).ok()
    })
    .await?;
    assert_eq!(std::fs::read_to_string(&written)?, "from the sub-agent");
    b.wait_text("#subagents > summary", |t| t == "Sub-agents (0)", BOUND)
        .await?;
    b.close().await?;
    Ok(())
}

/// Saved agents from the page: the chat's settings hold the "Saved agents"
/// switch (unticked until switched on); switched on and saved, chatd says so;
/// a message typed as `/agent Reviewer check the draft` keeps the person's
/// task, shows a chip naming the agent, and the model's sub-agent runs as
/// that agent (listed as "Reviewer: check the draft" in the menu).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_switches_saved_agents_on_and_a_slash_command_asks_for_one() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start_with_front(&sim.url(), &[], None).await?;
    let client = chatd.client();
    let driver = Chromedriver::start().await?;
    let made = client
        .post(
            "/agents",
            json!({"name": "Reviewer", "instructions": "Review."}),
        )
        .await?;
    anyhow::ensure!(made.status == 201, "{made:?}");
    let chat = client.create_chat_in("auto").await?;
    sim.post(
        "/sim/faults",
        json!({"session": format!("chat-{chat}"), "next": [{"tool_calls": [
            {"name": "spawn_agent", "arguments": {"task": "check the draft\n[sim tokens=3]", "agent": "Reviewer"}},
        ]}]}),
    )
    .await?;
    let b = Browser::open_chat(
        &driver,
        DESKTOP,
        &chatd.front_url(),
        Some(&chat),
        "#settings-open",
    )
    .await?;
    b.click("#settings-open").await?;
    b.wait_visible("#set-mcp", BOUND).await?;
    let rows = b.text("#set-mcp-rows").await?;
    assert!(rows.contains("Saved agents"), "{rows}");
    let switch = "#set-mcp-rows input[data-opt='saved_agents']";
    assert_eq!(
        b.eval(&format!(
            "return document.querySelector(\"{switch}\").checked;"
        ))
        .await?,
        json!(false)
    );
    b.click(switch).await?;
    b.click("#settings-save").await?;
    b.wait_js(
        "the panel closed",
        "return !document.querySelector('#settings-panel').open;",
        BOUND,
    )
    .await?;
    let view = client.get(&format!("/conversations/{chat}/tools")).await?;
    assert_eq!(view.body["opt_in"][0]["on"], json!(true), "{}", view.body);

    b.type_into("#composer", "/agent Reviewer check the draft")
        .await?;
    b.click("#send").await?;
    let mine = ".message[data-role='user']";
    b.wait_text(
        &format!("{mine} .agent-chip"),
        |t| t == "For Reviewer",
        BOUND,
    )
    .await?;
    assert_eq!(b.text(&format!("{mine} .body")).await?, "check the draft");
    b.wait_text(
        "#subagents > summary",
        |t| t.starts_with("Sub-agents"),
        BOUND,
    )
    .await?;
    b.click("#subagents > summary").await?;
    b.wait_text(
        ".sub-row",
        |t| t.contains("Reviewer: check the draft"),
        BOUND,
    )
    .await?;
    b.close().await?;
    Ok(())
}
