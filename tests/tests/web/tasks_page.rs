//! The page's Agents mode (README "Agents mode"; settings.js, subagents.js)
//! in headless Chromium against the real chatd with its front and the
//! engine simulator: the chat's settings switch Agents mode on (chatd keeps
//! it); the main agent, scripted on its session, hands a job to a worker
//! (scripted on `chat-<id>-task-1`) with `task`; the call shows as one line
//! "Task 1 · Clock · running", then "done"; its report opens in the panel
//! with the check no call ran marked unverified, over the worker's
//! transcript; a page opened afterwards shows the same line and the switch
//! on. Every wait is a bounded poll.

use std::time::Duration;

use anyhow::ensure;
use serde_json::{json, Value};
use tandem_tests::browser::{self, Browser, Chromedriver, DESKTOP};
use tandem_tests::harness::{Chatd, Sim};
use tandem_tests::npm;

const BOUND: Duration = Duration::from_secs(60);

const SWITCH: &str = "#set-agents";

/// Opens the chat's settings and answers whether the Agents mode switch is on.
async fn switch_on(b: &Browser) -> anyhow::Result<bool> {
    b.click("#settings-open").await?;
    b.wait_visible(SWITCH, BOUND).await?;
    let on = b
        .eval(&format!(
            "return document.querySelector('{SWITCH}').checked;"
        ))
        .await?;
    Ok(on == json!(true))
}

async fn script(sim: &Sim, session: &str, next: Value) -> anyhow::Result<()> {
    sim.post(
        "/sim/faults",
        json!({"session": format!("chat-{session}"), "next": next}),
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_in_agents_mode_shows_its_task_its_report_and_its_worker() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start_with_front(&sim.url(), &[], None).await?;
    let client = chatd.client();
    let driver = Chromedriver::start().await?;
    let chat = client.create_chat_in("auto").await?;
    let front = chatd.front_url();
    let b = Browser::open_chat(&driver, DESKTOP, &front, Some(&chat), "#settings-open").await?;

    // The switch, off until switched on; saved, chatd keeps it.
    ensure!(!switch_on(&b).await?, "Agents mode is off in a new chat");
    let hint = b.text("#settings-form label:has(#set-agents)").await?;
    ensure!(
        hint.contains("Agents mode") && hint.contains("workers"),
        "{hint}"
    );
    b.click(SWITCH).await?;
    b.click("#settings-save").await?;
    b.wait_js(
        "the panel closed",
        "return !document.querySelector('#settings-panel').open;",
        BOUND,
    )
    .await?;
    let stored = client.snapshot(&chat).await?;
    ensure!(
        stored["conversation"]["settings"]["agents"] == json!(true),
        "{}",
        stored["conversation"]
    );

    // The main agent hands the clock to a worker, then answers.
    let brief = "Goal: a clock\nFiles: clock.html\nConstraints: none\nCheck: run the tests";
    script(
        &sim,
        &chat,
        json!([
            {"tool_calls": [{"name": "task", "arguments":
                {"title": "Clock", "brief": brief, "expect": "what changed"}}]},
            {"text": "The worker built the clock."},
        ]),
    )
    .await?;
    script(
        &sim,
        &format!("{chat}-task-1"),
        json!([
            {"tool_calls": [{"name": "write_file", "arguments":
                {"path": "clock.html", "content": "<p>now</p>"}}]},
            {"text": "## Report\nStatus: done\nSummary: a clock\nFiles: clock.html\nChecks:\n- `npm test`: all pass\nOpen: none"},
        ]),
    )
    .await?;
    b.type_into("#composer", "Build me a clock").await?;
    b.click("#send").await?;

    // One line for the task, not a folded tool call; done once its report came.
    let line = ".message[data-role='assistant'] .task-line";
    let words = format!("{line} > span");
    let done = b
        .wait_text(&words, |t| t.ends_with("· done"), BOUND)
        .await?;
    ensure!(done == "Task 1 · Clock · done", "{done:?}");
    ensure!(
        b.count(".message[data-role='assistant'] .tool-call")
            .await?
            == 0,
        "the task call is a line of its own"
    );

    // Its report in the panel, the unverified check marked, over the worker's transcript.
    b.click(&format!("{line} .task-open")).await?;
    b.wait_visible("#sub-panel", BOUND).await?;
    b.wait_text("#sub-title", |t| t == "Task 1: Clock", BOUND)
        .await?;
    let report = b
        .wait_text("#sub-report", |t| t.contains("Status: done"), BOUND)
        .await?;
    ensure!(
        report.contains("chatd's check") && report.contains("created clock.html"),
        "{report}"
    );
    let marked = b.text("#sub-report li.unverified").await?;
    ensure!(
        marked.contains("unverified:") && marked.contains("npm test"),
        "{marked}"
    );
    let mark = b
        .eval(
            "return getComputedStyle(document.querySelector('#sub-report li.unverified'), '::marker').content;",
        )
        .await?;
    ensure!(mark.as_str().is_some_and(|m| m.contains('⚠')), "{mark}");
    ensure!(
        b.text("#sub-state").await?.starts_with("done"),
        "the worker's state"
    );
    b.wait_text(
        "#sub-log .sub-msg[data-role='user']",
        |t| t.contains("Goal: a clock"),
        BOUND,
    )
    .await?;
    b.wait_text(
        "#sub-log .sub-msg[data-role='assistant']",
        |t| t.contains("→ write_file clock.html"),
        BOUND,
    )
    .await?;
    ensure!(
        !b.visible("#sub-stop").await?,
        "a task is stopped with its chat"
    );

    // axe (when the test box has it) finds nothing serious in the panel.
    if let Some(axe) = npm::file("axe-core", "axe.min.js") {
        b.eval(&format!("{axe}\nreturn typeof window.axe;")).await?;
        let found = b
            .eval(
                "return axe.run(document.querySelector('#sub-panel'), {resultTypes: ['violations']})
                     .then((r) => r.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical')
                     .map((v) => `${v.id}: ${v.help} [${v.nodes.map((n) => n.target.join(' ')).join(', ')}]`));",
            )
            .await?;
        ensure!(found == json!([]), "axe in the task's panel: {found}");
    }
    b.click("#sub-close").await?;
    b.wait_hidden("#sub-panel", BOUND).await?;
    b.close().await?;

    // A page opened now: the same line from the snapshot and the list, the switch on.
    let b = Browser::open_chat(&driver, DESKTOP, &front, Some(&chat), "#settings-open").await?;
    let again = b
        .wait_text(&words, |t| t.starts_with("Task 1"), BOUND)
        .await?;
    ensure!(again == "Task 1 · Clock · done", "{again:?}");
    ensure!(switch_on(&b).await?, "the switch shows what chatd keeps");
    b.close().await?;
    Ok(())
}
