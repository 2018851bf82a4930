//! MCP Apps through chatd: a tool that declares a `ui://` page carries it
//! on its call's line and event; the page is read and its own calls are
//! made through `…/mcp-apps/resource` and `…/mcp-apps/call`, with the
//! connector's token kept in chatd. Against the MCP Apps project's example
//! server from npm and the fake's `/apps` (tandem_tests::mcpapps) for the
//! rules: visibility, a built-in's name, sizes, an undeclared page, a
//! chat's switch. Every wait is on a condition with a bound.

use crate::setup::{connector, start, QUICK};
use anyhow::Context;
use serde_json::{json, Value};
use tandem_tests::harness::{offered_tools, run_id, Client};
use tandem_tests::mcpapps::{CLOCK_PAGE, UNDECLARED_PAGE};
use tandem_tests::mcpservers::{FakeMcp, NpmServer};

const TOKEN: &str = "tok-apps-51c9-never-shown";

/// A chat that runs tools without asking; the model's calls scripted.
async fn chat_calling(
    client: &Client,
    sim: &tandem_tests::harness::Sim,
    calls: Value,
) -> anyhow::Result<String> {
    let chat = client.create_chat_in("yolo").await?;
    sim.faults(json!([{"tool_calls": calls}, {"tokens": 3}]))
        .await?;
    let run = run_id(&client.send(&chat, "show it").await?)?;
    let ended = client
        .wait_run(&chat, &run, &["done", "failed"], QUICK)
        .await?;
    anyhow::ensure!(ended["status"] == "done", "{ended}");
    Ok(chat)
}

/// The `tool.finished` events of `chat` so far, and its tool lines.
async fn finished_and_lines(
    client: &Client,
    chat: &str,
) -> anyhow::Result<(Vec<Value>, Vec<Value>)> {
    let mut events = client.events(chat, 0).await?;
    let seen = events
        .read_until(QUICK, |e| e.kind == "run.finished")
        .await?;
    let finished = seen
        .into_iter()
        .filter(|e| e.kind == "tool.finished")
        .map(|e| e.data)
        .collect();
    let lines = client.snapshot(chat).await?["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .cloned()
        .collect();
    Ok((finished, lines))
}

fn resource_path(chat: &str, server: &str, uri: &str) -> String {
    format!(
        "/conversations/{chat}/mcp-apps/resource?server={}&uri={}",
        urlencoding(server),
        urlencoding(uri)
    )
}

fn urlencoding(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// The fake's clock: offered to the model (its page-only tool is not),
/// its call's line carries the page with the input and the whole result
/// (the token the server echoed taken out), the event names the page
/// only; the page reads through chatd with its content policy cut to
/// https/wss origins, and the page's calls follow the rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tools_page_rides_on_its_call_and_its_reads_and_calls_go_through_chatd(
) -> anyhow::Result<()> {
    let fake = FakeMcp::start(Some(TOKEN)).await?;
    let (sim, chatd, client) = start().await?;
    let id = connector(&client, "Clock", &fake.url("/apps"), Some(TOKEN)).await?;
    let server = format!("connector:{id}");
    let chat = chat_calling(
        &client,
        &sim,
        json!([{"name": "clock", "arguments": {"zone": "Europe/Paris"}}]),
    )
    .await?;

    let requests = sim.requests().await?;
    let offered = offered_tools(&requests.first().context("a request")?["body"]);
    assert!(offered.iter().any(|n| n == "clock"), "{offered:?}");
    assert!(offered.iter().any(|n| n == "lookup_model"), "{offered:?}");
    for not in ["clock_tick", "odd_visibility"] {
        assert!(
            !offered.iter().any(|n| n == not),
            "a tool for its page alone (or for nobody tandem knows) is not the model's: {offered:?}"
        );
    }

    let (finished, lines) = finished_and_lines(&client, &chat).await?;
    let app = &finished.first().context("tool.finished")?["app"];
    assert_eq!(
        *app,
        json!({"server": server, "tool": "clock", "resource_uri": CLOCK_PAGE,
               "visibility": ["model", "app"]}),
        "{finished:?}"
    );
    assert!(finished[0].get("card").is_none(), "{finished:?}");
    let card = &lines.first().context("a tool line")?["card"];
    assert_eq!(card["kind"], "mcp_app", "{card}");
    assert_eq!(card["input"], json!({"zone": "Europe/Paris"}));
    assert_eq!(
        card["result"]["structuredContent"]["time"], "12:00",
        "{card}"
    );
    assert_eq!(
        card["result"]["structuredContent"]["presented"], "Bearer …",
        "the token the server echoed is taken out: {card}"
    );
    assert_eq!(lines[0]["text"], "it is 12:00 in Europe/Paris");

    // The page, read through chatd.
    let page = client
        .get(&resource_path(&chat, &server, CLOCK_PAGE))
        .await?;
    assert_eq!(page.status, 200, "{page:?}");
    assert_eq!(page.body["mime_type"], "text/html;profile=mcp-app");
    let html = page.body["html"].as_str().unwrap_or_default();
    assert!(html.contains("<p id=t>12:00</p>"), "{html}");
    assert!(!html.contains(TOKEN), "{html}");
    assert_eq!(
        page.body["meta"],
        json!({"csp": {"connectDomains": ["https://api.example.com"],
                       "resourceDomains": ["wss://ws.example.com"]},
               "permissions": {}, "prefersBorder": true}),
        "only https/wss origins, no permission"
    );

    // The page's own calls.
    let call = |tool: &str, arguments: Value| {
        let body = json!({"server": server, "tool": tool, "arguments": arguments});
        let client = client.clone();
        let path = format!("/conversations/{chat}/mcp-apps/call");
        async move { client.post(&path, body).await }
    };
    let ticked = call("clock_tick", json!({"by": 5})).await?;
    assert_eq!(ticked.status, 200, "{ticked:?}");
    assert_eq!(ticked.body["result"]["structuredContent"]["time"], "12:05");
    let clock = call("clock", json!({})).await?;
    assert_eq!(clock.status, 200, "{clock:?}");
    assert!(!clock.body.to_string().contains(TOKEN), "{}", clock.body);
    for (tool, why) in [
        ("lookup_model", "not for its pages"),
        ("odd_visibility", "not for its pages"),
        ("read_file", "named like one of tandem's own"),
        ("no_such_tool", "no such tool"),
    ] {
        let refused = call(tool, json!({})).await?;
        assert_eq!(refused.status, 403, "{tool}: {refused:?}");
        assert_eq!(
            refused.body["error"]["type"], "mcp_app_refused",
            "{refused:?}"
        );
        assert!(
            refused.body["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains(why),
            "{tool}: {refused:?}"
        );
    }
    assert_eq!(
        fake.asked("tools/call"),
        3,
        "the model's call and the page's two; no refused one sent"
    );

    let big = call("clock_tick", json!({"pad": "x".repeat(16 * 1024)})).await?;
    assert_eq!(big.status, 400, "{big:?}");
    assert_eq!(big.body["error"]["field"], "arguments", "{big:?}");
    let not_object = call("clock_tick", json!("five")).await?;
    assert_eq!(
        not_object.body["error"]["field"], "arguments",
        "{not_object:?}"
    );
    let bad_server = client
        .post(
            &format!("/conversations/{chat}/mcp-apps/call"),
            json!({"server": "Clock", "tool": "clock"}),
        )
        .await?;
    assert_eq!(bad_server.status, 400, "{bad_server:?}");
    assert_eq!(bad_server.body["error"]["field"], "server");

    // Pages the rules keep out.
    let undeclared = client
        .get(&resource_path(&chat, &server, UNDECLARED_PAGE))
        .await?;
    assert_eq!(undeclared.status, 403, "{undeclared:?}");
    assert_eq!(undeclared.body["error"]["type"], "mcp_app_refused");
    assert_eq!(
        fake.asked("resources/read"),
        1,
        "the clock's page only: an undeclared one is never asked for"
    );
    let web = client
        .get(&resource_path(
            &chat,
            &server,
            "https://example.com/app.html",
        ))
        .await?;
    assert_eq!(web.status, 400, "{web:?}");
    assert_eq!(web.body["error"]["field"], "uri");
    let huge = client
        .get(&resource_path(&chat, &server, "ui://clock/huge.html"))
        .await?;
    assert_eq!(huge.status, 502, "{huge:?}");
    assert!(
        huge.body["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("4 MiB"),
        "{huge:?}"
    );
    let plain = client
        .get(&resource_path(&chat, &server, "ui://clock/plain.txt"))
        .await?;
    assert_eq!(plain.status, 502, "{plain:?}");
    assert!(plain.body["error"]["message"]
        .as_str()
        .unwrap_or("")
        .contains("not text/html"));

    // Switched off for the chat: neither route answers for it.
    let off = client
        .call(
            reqwest::Method::PUT,
            &format!("/conversations/{chat}/mcp"),
            Some(json!({"off": [id]})),
        )
        .await?;
    assert_eq!(off.status, 200, "{off:?}");
    let page = client
        .get(&resource_path(&chat, &server, CLOCK_PAGE))
        .await?;
    assert_eq!(page.status, 403, "{page:?}");
    assert_eq!(page.body["error"]["type"], "mcp_app_refused");
    let ticked = call("clock_tick", json!({})).await?;
    assert_eq!(ticked.status, 403, "{ticked:?}");

    // A connector whose tools declare no page has no page to call from.
    let plain = connector(&client, "Plain", &fake.url("/mcp"), Some(TOKEN)).await?;
    let from_nowhere = client
        .post(
            &format!("/conversations/{chat}/mcp-apps/call"),
            json!({"server": format!("connector:{plain}"), "tool": "lookup"}),
        )
        .await?;
    assert_eq!(from_nowhere.status, 403, "{from_nowhere:?}");
    assert!(from_nowhere.body["error"]["message"]
        .as_str()
        .unwrap_or("")
        .contains("no tool with a page"));
    assert_eq!(fake.asked("tools/call"), 3, "nothing sent for it");

    let holding = chatd.files_holding(&[TOKEN])?;
    assert!(holding.is_empty(), "the token in {holding:?}");
    Ok(())
}

/// The MCP Apps project's example server from npm: its `get-time` tool
/// carries its page; the page (the project's own App bundle) reads
/// through chatd and its call of `get-time` answers the time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_apps_example_server_from_npm_shows_its_page_and_answers_its_call(
) -> anyhow::Result<()> {
    let Some(server) = NpmServer::basic_app().await? else {
        return Ok(());
    };
    let (sim, _chatd, client) = start().await?;
    let id = connector(&client, "Basic app", &server.url(), None).await?;
    let chat = chat_calling(
        &client,
        &sim,
        json!([{"name": "get-time", "arguments": {}}]),
    )
    .await?;
    let (finished, lines) = finished_and_lines(&client, &chat).await?;
    let uri = "ui://get-time/mcp-app.html";
    assert_eq!(finished[0]["app"]["resource_uri"], uri, "{finished:?}");
    let card = &lines[0]["card"];
    let time = card["result"]["structuredContent"]["time"]
        .as_str()
        .unwrap_or_default();
    assert!(time.starts_with("20"), "an ISO time: {card}");

    let page = client
        .get(&resource_path(&chat, &format!("connector:{id}"), uri))
        .await?;
    assert_eq!(page.status, 200, "{page:?}");
    let html = page.body["html"].as_str().unwrap_or_default();
    assert!(
        html.len() > 100_000 && html.contains("ui/initialize"),
        "{} bytes",
        html.len()
    );
    let called = client
        .post(
            &format!("/conversations/{chat}/mcp-apps/call"),
            json!({"server": format!("connector:{id}"), "tool": "get-time"}),
        )
        .await?;
    assert_eq!(called.status, 200, "{called:?}");
    assert!(called.body["result"]["structuredContent"]["time"]
        .as_str()
        .is_some_and(|t| t.starts_with("20")));
    Ok(())
}

/// A page's call the server is still working on holds the chat's session;
/// a turn meanwhile is offered the server's tools from that session's list
/// (it neither waits on the call nor counts the server as failed), and its
/// own call runs once the page's is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pages_call_in_progress_does_not_take_the_server_from_a_turn() -> anyhow::Result<()> {
    let fake = FakeMcp::start(None).await?;
    let (sim, _chatd, client) = start().await?;
    let id = connector(&client, "Clock", &fake.url("/apps"), None).await?;
    let chat = client.create_chat_in("yolo").await?;
    let path = format!("/conversations/{chat}/mcp-apps/call");
    let body = json!({"server": format!("connector:{id}"), "tool": "clock_hold"});
    let held = tokio::spawn({
        let (client, path) = (client.clone(), path.clone());
        async move { client.post(&path, body).await }
    });
    tandem_tests::harness::wait_until("the page's call at the server", QUICK, || async {
        (fake.asked("tools/call") == 1).then_some(())
    })
    .await?;

    sim.faults(json!([
        {"tool_calls": [{"name": "lookup", "arguments": {"word": "busy"}}]},
        {"tokens": 3}
    ]))
    .await?;
    let run = run_id(&client.send(&chat, "look it up").await?)?;
    let asked = tandem_tests::harness::wait_until("the turn's request", QUICK, || async {
        sim.requests().await.ok()?.first().cloned()
    })
    .await?;
    let offered = offered_tools(&asked["body"]);
    assert!(
        offered.iter().any(|n| n == "lookup"),
        "offered while the page's call holds the session: {offered:?}"
    );
    assert_eq!(
        fake.asked("tools/call"),
        1,
        "the turn's call waits its turn"
    );

    fake.release_held();
    let answered = held.await??;
    assert_eq!(answered.status, 200, "{answered:?}");
    let ended = client
        .wait_run(&chat, &run, &["done", "failed"], QUICK)
        .await?;
    assert_eq!(ended["status"], "done", "{ended}");
    let snapshot = client.snapshot(&chat).await?;
    let results = tandem_tests::harness::tool_results(&snapshot);
    assert_eq!(results, ["glossary: busy is a word the fake knows"]);
    Ok(())
}
