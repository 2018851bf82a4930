//! An MCP App in headless Chromium: the MCP Apps project's example server
//! from npm (`get-time`, whose page is the project's own App bundle) called
//! by the model; the page shows it under the call in a frame that is
//! sandboxed to scripts and an origin of its own, with no network; the
//! App's handshake gets the call's result (its time shows), its button
//! calls the server through chatd, its message is a suggestion the person
//! sends or dismisses, its link opens only on a click; the next call's
//! page comes live. Every wait is a bounded poll.

use std::time::Duration;

use anyhow::{ensure, Context};
use serde_json::json;
use tandem_tests::browser::{self, Browser, Chromedriver, DESKTOP, WAIT};
use tandem_tests::harness::{run_id, Chatd};
use tandem_tests::mcpservers::NpmServer;

const FRAME: &str = ".mcp-app .mcp-app-frame";

/// How many of the page's calls chatd made.
fn app_calls(chatd: &Chatd) -> usize {
    chatd.log().matches("mcp: an app's call").count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tools_page_shows_under_its_call_and_talks_to_its_server_through_chatd(
) -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let Some(server) = NpmServer::basic_app().await? else {
        return Ok(());
    };
    let (sim, chatd) = crate::mcp_page::front_for_mcp().await?;
    let client = chatd.client();
    let made = client
        .post(
            "/mcp-connectors",
            json!({"name": "Clock", "transport": "http", "url": server.url()}),
        )
        .await?;
    ensure!(made.status == 201, "{made:?}");
    let chat = client.create_chat_in("yolo").await?;
    let calling = |text: &'static str| {
        let (sim, client, chat) = (&sim, &client, &chat);
        async move {
            sim.faults(json!([
                {"tool_calls": [{"name": "get-time", "arguments": {}}]},
                {"tokens": 3}
            ]))
            .await?;
            let run = run_id(&client.send(chat, text).await?)?;
            client
                .wait_run(chat, &run, &["done"], Duration::from_secs(60))
                .await
        }
    };
    calling("what time is it?").await?;

    let driver = Chromedriver::start().await?;
    let b = Browser::open_chat(
        &driver,
        DESKTOP,
        &chatd.front_url(),
        Some(&chat),
        "#files-toggle",
    )
    .await?;
    b.wait_visible(FRAME, WAIT).await?;
    let sandbox = b
        .eval(&format!(
            "return document.querySelector('{FRAME}').getAttribute('sandbox');"
        ))
        .await?;
    ensure!(sandbox == json!("allow-scripts"), "{sandbox}");

    // Inside: the App's handshake brought the call's result.
    b.enter_frame(FRAME).await?;
    let time = b
        .wait_text("#server-time", |t| t.starts_with("20"), WAIT)
        .await?;
    let origin = b.eval("return String(window.origin);").await?;
    ensure!(origin == json!("null"), "an origin of its own: {origin}");
    let cookie = b
        .eval("try { return typeof document.cookie; } catch (e) { return 'refused'; }")
        .await?;
    ensure!(cookie == json!("refused"), "the page's cookies: {cookie}");
    let fetched = b
        .eval("return fetch('/v1/chat-app/capabilities').then(() => 'reached', () => 'blocked');")
        .await?;
    ensure!(fetched == json!("blocked"), "no network: {fetched}");

    // Its button calls the server through chatd.
    ensure!(app_calls(&chatd) == 0, "no page call yet");
    b.click("#get-time-btn").await?;
    tandem_tests::harness::wait_until("the page's call", WAIT, || async {
        (app_calls(&chatd) == 1).then_some(())
    })
    .await?;
    b.wait_text("#server-time", |t| t.starts_with("20") && t != time, WAIT)
        .await
        .context("the time the call answered")?;

    // A message: a suggestion, sent only by the person.
    b.click("#send-message-btn").await?;
    b.leave_frame().await?;
    let suggested = b
        .wait_text(
            ".mcp-app-suggestion .mcp-app-suggested",
            |t| !t.is_empty(),
            WAIT,
        )
        .await?;
    ensure!(suggested == "This is message text.", "{suggested}");
    let messages = |snapshot: &serde_json::Value| {
        snapshot["messages"]
            .as_array()
            .map(|m| m.iter().filter(|m| m["role"] == "user").count())
            .unwrap_or(0)
    };
    ensure!(
        messages(&client.snapshot(&chat).await?) == 1,
        "not sent by itself"
    );
    b.click(".mcp-app-suggestion .mcp-app-dismiss").await?;
    b.wait_count(".mcp-app-suggestion", |n| n == 0, WAIT)
        .await?;
    ensure!(messages(&client.snapshot(&chat).await?) == 1, "dismissed");
    // Suggested again and sent by the person: it alone, the draft kept.
    b.eval("document.querySelector('#composer').value = 'my draft'; return true;")
        .await?;
    b.enter_frame(FRAME).await?;
    b.click("#send-message-btn").await?;
    b.leave_frame().await?;
    b.click(".mcp-app-suggestion .mcp-app-send").await?;
    let sent = tandem_tests::harness::wait_until("the suggestion sent", WAIT, || async {
        let snapshot = client.snapshot(&chat).await.ok()?;
        let texts: Vec<String> = snapshot["messages"]
            .as_array()?
            .iter()
            .filter(|m| m["role"] == "user")
            .filter_map(|m| m["text"].as_str().map(str::to_string))
            .collect();
        (texts.len() == 2).then_some(texts)
    })
    .await?;
    ensure!(sent[1] == "This is message text.", "{sent:?}");
    let draft = b
        .eval("return document.querySelector('#composer').value;")
        .await?;
    ensure!(draft == json!("my draft"), "the draft stays: {draft}");
    let run = client.snapshot(&chat).await?["runs"]
        .as_array()
        .and_then(|r| r.last().cloned())
        .context("the suggestion's run")?;
    let run = run["id"].as_str().unwrap_or_default().to_string();
    client
        .wait_run(&chat, &run, &["done"], Duration::from_secs(60))
        .await?;

    // A link: offered, opened only on a click.
    b.enter_frame(FRAME).await?;
    b.click("#open-link-btn").await?;
    b.leave_frame().await?;
    b.wait_visible(".mcp-app-link", WAIT).await?;
    let link = b
        .eval("const a = document.querySelector('.mcp-app-link'); return [a.href, a.rel];")
        .await?;
    ensure!(
        link == json!(["https://modelcontextprotocol.io/", "noopener noreferrer"]),
        "{link}"
    );

    // Its size: what the App asked, within 60 to 600 px.
    let height = b
        .eval(&format!(
            "return document.querySelector('{FRAME}').getBoundingClientRect().height;"
        ))
        .await?;
    let height = height.as_f64().unwrap_or(0.0);
    ensure!(
        (60.0..=602.0).contains(&height) && (height - 160.0).abs() > 1.0,
        "the frame took the App's height: {height}"
    );

    // Live: the next call's page comes with its events, the page open.
    calling("and now?").await?;
    b.wait_count(FRAME, |n| n == 2, WAIT).await?;
    b.close().await
}
