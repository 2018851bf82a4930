//! MCP tools in chats: a turn is offered a connector's tools and a call
//! runs in the chat's session, against the reference server from npm and
//! the fake; names that clash, a built-in's name, a server that is down,
//! the permission modes, a long result, a chat's switch and an agent's
//! grant. Every wait is on a condition with a bound.

use crate::setup::{connector, start, PRIVATE, QUICK};
use anyhow::Context;
use serde_json::{json, Value};
use tandem_tests::harness::{offered_tools, run_id, system_text, tool_results, Chatd, Client, Sim};
use tandem_tests::mcpservers::{Everything, FakeMcp};

const TOKEN: &str = "tok-in-chat-93d1-never-shown";

async fn chat(client: &Client, mode: &str) -> anyhow::Result<String> {
    let made = client
        .post("/conversations", json!({"permission_mode": mode}))
        .await?;
    anyhow::ensure!(made.status == 201, "{made:?}");
    Ok(made.body["id"].as_str().context("chat id")?.to_string())
}

/// Sends `text` and waits for the run to end; its record.
async fn turn(client: &Client, chat: &str, text: &str) -> anyhow::Result<Value> {
    let run = run_id(&client.send(chat, text).await?)?;
    client
        .wait_run(
            chat,
            &run,
            &["done", "failed", "stopped", "interrupted"],
            QUICK,
        )
        .await
}

/// The reference server's `echo` in a chat: offered with its description,
/// called by the model, its answer read back as the tool's result; the
/// system block names the server; the chat's tools list it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_servers_tool_is_offered_and_runs_in_a_chat() -> anyhow::Result<()> {
    let Some(server) = Everything::http().await? else {
        return Ok(());
    };
    let (sim, _chatd, client) = start().await?;
    let id = connector(&client, "Everything", &server.url(), None).await?;
    let chat = chat(&client, "yolo").await?;
    sim.faults(json!([
        {"tool_calls": [{"name": "echo", "arguments": {"message": "ping from a chat"}}]},
        {"tokens": 3},
    ]))
    .await?;
    let run = turn(&client, &chat, "echo it").await?;
    assert_eq!(run["status"], "done", "{run}");
    let results = tool_results(&client.snapshot(&chat).await?);
    assert_eq!(results, ["Echo: ping from a chat"], "{results:?}");

    let requests = sim.requests().await?;
    let first = requests.first().context("a request")?;
    assert!(
        offered_tools(&first["body"]).iter().any(|n| n == "echo"),
        "{:?}",
        offered_tools(&first["body"])
    );
    assert!(offered_tools(&first["body"])
        .iter()
        .any(|n| n == "read_file"));
    assert!(
        system_text(&first["body"]).contains("MCP server Everything"),
        "{}",
        system_text(&first["body"])
    );

    let tools = client.get(&format!("/conversations/{chat}/tools")).await?;
    assert_eq!(tools.status, 200, "{tools:?}");
    let echo = tools.body["tools"]
        .as_array()
        .and_then(|all| all.iter().find(|t| t["name"] == "echo"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(echo["source"], "mcp", "{}", tools.body);
    assert_eq!(echo["connector"], id.as_str());
    assert_eq!(echo["usable"], true);
    Ok(())
}

/// The reference server in its `sse` mode speaks only MCP's older HTTP+SSE
/// transport and answers Streamable HTTP's first POST with 404: chatd opens
/// its event stream instead. Its test says connected with its tools, and
/// two `echo` calls run in one chat's turn over that one stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_of_the_older_sse_transport_is_tested_and_used_in_a_chat() -> anyhow::Result<()> {
    let Some(server) = Everything::sse().await? else {
        return Ok(());
    };
    let (sim, _chatd, client) = start().await?;
    let id = connector(&client, "Older", &server.url(), None).await?;
    let tested = client
        .post(&format!("/mcp-connectors/{id}/test"), json!({}))
        .await?;
    assert_eq!(tested.body["ok"], true, "{}", tested.body);
    assert_eq!(tested.body["state"], "connected");
    assert!(
        tested.body["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|n| n == "echo" || n["name"] == "echo")),
        "{}",
        tested.body
    );

    let chat = chat(&client, "yolo").await?;
    sim.faults(json!([
        {"tool_calls": [{"name": "echo", "arguments": {"message": "one"}}]},
        {"tool_calls": [{"name": "echo", "arguments": {"message": "two"}}]},
        {"tokens": 3},
    ]))
    .await?;
    let record = turn(&client, &chat, "echo twice").await?;
    assert_eq!(record["status"], "done", "{record}");
    let results = tool_results(&client.snapshot(&chat).await?);
    assert_eq!(results, ["Echo: one", "Echo: two"], "{results:?}");
    Ok(())
}

/// Over the older transport a message's POST that fails (503) fails its
/// call alone, naming the connector: the event stream stays open, and the
/// next turn's call is answered in the same session; chatd never panics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_post_of_the_older_transport_fails_one_call_only() -> anyhow::Result<()> {
    let fake = FakeMcp::start(None).await?;
    let (sim, chatd, client) = start().await?;
    connector(&client, "Older", &fake.url("/sse"), None).await?;
    let chat = chat(&client, "yolo").await?;
    for (word, down) in [("one", false), ("two", true), ("three", false)] {
        fake.set_down(down);
        sim.faults(json!([
            {"tool_calls": [{"name": "lookup", "arguments": {"word": word}}]},
            {"tokens": 3},
        ]))
        .await?;
        let record = turn(&client, &chat, "look it up").await?;
        assert_eq!(record["status"], "done", "{record}");
        let results = tool_results(&client.snapshot(&chat).await?);
        let last = results.last().cloned().unwrap_or_default();
        if down {
            assert!(
                last.contains("Older") && last.contains("HTTP 503"),
                "{last}"
            );
        } else {
            assert_eq!(last, format!("glossary: {word} is a word the fake knows"));
        }
    }
    let streams = fake.seen().iter().filter(|s| s.path == "/sse").count();
    assert_eq!(streams, 1, "one event stream for the three turns");
    assert!(!chatd.log().contains("panicked"), "{}", chatd.log());
    Ok(())
}

/// Two servers with one tool name: both prefixed, each call reaching its
/// own server; a tool named `read_file` is dropped (the built-in stays);
/// `auto` runs a read-only tool and asks before `send`; a server that went
/// down costs the next chat one line, never the turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clashing_names_builtins_permissions_and_a_server_down() -> anyhow::Result<()> {
    let (docs_server, mail_server) = (
        FakeMcp::start(None).await?,
        FakeMcp::start(Some(TOKEN)).await?,
    );
    let (sim, chatd, client) = start().await?;
    connector(&client, "Docs", &docs_server.url("/mcp"), None).await?;
    connector(&client, "Mail box", &mail_server.url("/mcp"), Some(TOKEN)).await?;
    let chat = chat(&client, "auto").await?;
    sim.faults(json!([
        {"tool_calls": [
            {"name": "docs__lookup", "arguments": {"word": "tandem"}},
            {"name": "mail_box__lookup", "arguments": {"word": "bicycle"}},
            {"name": "mail_box__whoami", "arguments": {}},
        ]},
        {"tool_calls": [{"name": "mail_box__send", "arguments": {"note": "hello"}}]},
        {"tokens": 3},
    ]))
    .await?;
    let sent = client.send(&chat, "look both up").await?;
    let run = run_id(&sent)?;
    let mut device = client.events(&chat, 0).await?;
    let events = device
        .read_until(QUICK, |e| e.kind == "tool.consent")
        .await?;
    let card = events.last().context("card")?.data.clone();
    assert_eq!(card["name"], "mail_box__send", "{card}");
    let results = tool_results(&client.snapshot(&chat).await?);
    assert_eq!(
        results,
        [
            "glossary: tandem is a word the fake knows",
            "glossary: bicycle is a word the fake knows",
            "presented: Bearer …",
        ],
        "read-only tools ran without asking in auto; a server's echo of the token is cut"
    );
    let calls_before = mail_server.asked("tools/call");
    let denied = client
        .post(
            &format!("/conversations/{chat}/consent"),
            json!({"card_id": card["card_id"], "decision": "deny"}),
        )
        .await?;
    assert_eq!(denied.status, 200, "{denied:?}");
    let record = client
        .wait_run(&chat, &run, &["done", "failed"], QUICK)
        .await?;
    assert_eq!(record["status"], "done", "{record}");
    assert_eq!(
        mail_server.asked("tools/call"),
        calls_before,
        "a denied call never reached the server"
    );
    // Each server got its own call, with its own token.
    assert_eq!(docs_server.asked("tools/call"), 1);
    assert_eq!(mail_server.asked("tools/call"), 2);
    let call = mail_server
        .seen()
        .into_iter()
        .find(|s| s.method.as_deref() == Some("tools/call"))
        .context("the mail server's call")?;
    assert_eq!(
        call.header("authorization"),
        Some(format!("Bearer {TOKEN}").as_str())
    );
    let requests = sim.requests().await?;
    let names = offered_tools(&requests.first().context("a request")?["body"]);
    assert!(names.contains(&"docs__lookup".to_string()), "{names:?}");
    assert!(names.contains(&"mail_box__send".to_string()), "{names:?}");
    assert_eq!(
        names.iter().filter(|n| n.as_str() == "read_file").count(),
        1,
        "the server's read_file is dropped: {names:?}"
    );
    let read_file = requests[0]["body"]["tools"]
        .as_array()
        .and_then(|all| all.iter().find(|t| t["function"]["name"] == "read_file"))
        .cloned()
        .unwrap_or_default();
    assert!(
        !read_file["function"]["description"]
            .as_str()
            .unwrap_or("")
            .contains("named like a built-in"),
        "the built-in kept its place: {read_file}"
    );

    // The mail server goes down: a new chat is told in one line, and its
    // turn ends well.
    mail_server.set_down(true);
    let other = self::chat(&client, "auto").await?;
    let before = sim.requests().await?.len();
    let record = turn(&client, &other, "anything there? [sim tokens=3]").await?;
    assert_eq!(record["status"], "done", "{record}");
    let requests = sim.requests().await?;
    let last = requests.get(before).context("the new chat's request")?;
    let system = system_text(&last["body"]);
    assert!(
        system.contains("unavailable this turn: MCP connector Mail box (cannot be reached)"),
        "{system}"
    );
    let names = offered_tools(&last["body"]);
    assert!(
        names.contains(&"docs__lookup".to_string()),
        "names stay: {names:?}"
    );
    assert!(
        !names.iter().any(|n| n.starts_with("mail_box__")),
        "{names:?}"
    );

    for text in [
        client.snapshot(&chat).await?.to_string(),
        serde_json::to_string(&requests)?,
    ] {
        assert!(!text.contains(TOKEN), "the token came out");
    }
    let holding = chatd.files_holding(&[TOKEN])?;
    assert!(holding.is_empty(), "the token in {holding:?}");
    Ok(())
}

/// A long result is cut to the call's room with the whole of it kept in
/// the workspace under `.tandem/outputs/`, where read_file reaches it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_result_is_cut_and_kept_whole_in_the_workspace() -> anyhow::Result<()> {
    let fake = FakeMcp::start(None).await?;
    let (sim, chatd, client) = start().await?;
    connector(&client, "Docs", &fake.url("/mcp"), None).await?;
    let chat = chat(&client, "auto").await?;
    sim.faults(json!([
        {"tool_calls": [{"name": "big", "arguments": {"bytes": 300_000}}]},
        {"tokens": 3},
    ]))
    .await?;
    let record = turn(&client, &chat, "the long one").await?;
    assert_eq!(record["status"], "done", "{record}");
    let results = tool_results(&client.snapshot(&chat).await?);
    let result = results.first().context("a result")?;
    assert!(result.len() < 70_000, "cut: {} bytes", result.len());
    assert!(
        result.contains("characters cut"),
        "{}",
        &result[..200.min(result.len())]
    );
    assert!(result.starts_with("line 00000000"));
    let outputs = chatd
        .data_dir()
        .join("workspaces")
        .join(&chat)
        .join(".tandem/outputs");
    let kept: Vec<_> = std::fs::read_dir(&outputs)?.flatten().collect();
    assert_eq!(kept.len(), 1, "{outputs:?}");
    let whole = std::fs::read_to_string(kept[0].path())?;
    assert!(whole.len() >= 300_000, "{}", whole.len());
    assert!(result.contains(".tandem/outputs/"), "the path is given");
    Ok(())
}

/// A chat switches a server off for itself (an unknown id refuses the
/// whole body and changes nothing); an agent that names one connector gets
/// only that one's tools, and an agent naming no connector none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_switches_a_server_off_and_an_agent_gets_only_what_it_names() -> anyhow::Result<()> {
    let (first, second) = (FakeMcp::start(None).await?, FakeMcp::start(None).await?);
    let (sim, _chatd, client) = start().await?;
    let docs = connector(&client, "Docs", &first.url("/mcp"), None).await?;
    let notes = connector(&client, "Notes", &second.url("/mcp"), None).await?;
    let chat = chat(&client, "auto").await?;

    let bad = client
        .call(
            reqwest::Method::PUT,
            &format!("/conversations/{chat}/mcp"),
            Some(json!({"off": [docs, "mc_nothere"]})),
        )
        .await?;
    assert_eq!(bad.status, 400, "{bad:?}");
    assert_eq!(bad.body["error"]["field"], "off", "{}", bad.body);
    let view = client.get(&format!("/conversations/{chat}/tools")).await?;
    assert!(
        view.body["mcp"]
            .as_array()
            .is_some_and(|all| all.iter().all(|c| c["on"] == true)),
        "nothing changed: {}",
        view.body
    );

    let off = client
        .call(
            reqwest::Method::PUT,
            &format!("/conversations/{chat}/mcp"),
            Some(json!({"off": [docs]})),
        )
        .await?;
    assert_eq!(off.status, 200, "{off:?}");
    let docs_line = off.body["mcp"]
        .as_array()
        .and_then(|all| all.iter().find(|c| c["id"] == docs.as_str()))
        .cloned()
        .unwrap_or_default();
    assert_eq!(docs_line["on"], false, "{}", off.body);
    assert_eq!(docs_line["reason"], "switched off for this chat");
    let before = sim.requests().await?.len();
    turn(&client, &chat, "which tools? [sim tokens=3]").await?;
    let requests = sim.requests().await?;
    let names = offered_tools(&requests.get(before).context("request")?["body"]);
    assert!(
        names.contains(&"notes__lookup".to_string()) || names.contains(&"lookup".to_string()),
        "{names:?}"
    );
    assert_eq!(
        names.iter().filter(|n| n.ends_with("lookup")).count(),
        1,
        "the Notes server's lookup only: {names:?}"
    );

    // An agent naming the Notes connector; one naming none.
    let unknown = client
        .post(
            "/agents",
            json!({"name": "Bad", "tools": ["read_file", "connector:mc_nothere"]}),
        )
        .await?;
    assert_eq!(unknown.status, 400, "{unknown:?}");
    for (name, tools, wanted) in [
        (
            "Notes reader",
            json!(["read_file", format!("connector:{notes}")]),
            1,
        ),
        ("Plain reader", json!(["read_file"]), 0),
    ] {
        let agent = client
            .post("/agents", json!({"name": name, "tools": tools}))
            .await?;
        assert_eq!(agent.status, 201, "{agent:?}");
        let made = client
            .post(
                "/conversations",
                json!({"agent_id": agent.body["id"], "permission_mode": "auto"}),
            )
            .await?;
        let with_agent = made.body["id"].as_str().context("id")?.to_string();
        let before = sim.requests().await?.len();
        turn(&client, &with_agent, "go [sim tokens=3]").await?;
        let requests = sim.requests().await?;
        let names = offered_tools(&requests.get(before).context("request")?["body"]);
        assert_eq!(
            names.iter().filter(|n| n.ends_with("lookup")).count(),
            wanted,
            "{name}: {names:?}"
        );
        assert!(
            !names.iter().any(|n| n.starts_with("docs__")),
            "{name}: {names:?}"
        );
    }

    // Removing the connector takes the grant out of the agent that named it.
    let gone = client
        .call(
            reqwest::Method::DELETE,
            &format!("/mcp-connectors/{notes}"),
            None,
        )
        .await?;
    assert_eq!(gone.status, 204, "{gone:?}");
    let agents = client.get("/agents").await?;
    let reader = agents.body["agents"]
        .as_array()
        .and_then(|all| all.iter().find(|a| a["name"] == "Notes reader"))
        .cloned()
        .context("the agent")?;
    assert_eq!(reader["tools"], json!(["read_file"]), "{reader}");
    Ok(())
}

/// A chat keeps its session from turn to turn; another chat opens its
/// own; an edit of the connector opens a new one at the next turn, and a
/// chat that goes to the trash ends its session with the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_lasts_across_turns_and_ends_with_an_edit_or_the_chat() -> anyhow::Result<()> {
    let fake = FakeMcp::start(None).await?;
    let (_sim, _chatd, client) = start().await?;
    let id = connector(&client, "Docs", &fake.url("/mcp"), None).await?;
    let first = chat(&client, "auto").await?;
    for _ in 0..2 {
        let record = turn(&client, &first, "hello [sim tokens=3]").await?;
        assert_eq!(record["status"], "done", "{record}");
    }
    assert_eq!(fake.asked("initialize"), 1, "one session for two turns");
    let second = chat(&client, "auto").await?;
    turn(&client, &second, "hello [sim tokens=3]").await?;
    assert_eq!(fake.asked("initialize"), 2, "a session per chat");

    let edited = client
        .call(
            reqwest::Method::PUT,
            &format!("/mcp-connectors/{id}"),
            Some(json!({"name": "Docs again", "url": fake.url("/mcp")})),
        )
        .await?;
    assert_eq!(edited.status, 200, "{edited:?}");
    turn(&client, &first, "hello [sim tokens=3]").await?;
    assert_eq!(fake.asked("initialize"), 3, "opened again after the edit");
    let ended_before = fake.asked("DELETE");
    let gone = client
        .call(
            reqwest::Method::DELETE,
            &format!("/conversations/{first}"),
            None,
        )
        .await?;
    assert_eq!(gone.status, 204, "{gone:?}");
    tandem_tests::harness::wait_until("the session ended", QUICK, || async {
        (fake.asked("DELETE") > ended_before).then_some(())
    })
    .await?;
    Ok(())
}

/// The server forgets its sessions, as one that restarted does: the next
/// call is answered 404 before the server runs it, so the session's
/// transport (rmcp's, which chatd leaves it to) opens a new session and
/// sends it again, a tool that changes things included, and the turn goes
/// on as if nothing happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_the_server_lost_is_opened_again_and_the_call_runs_once() -> anyhow::Result<()> {
    let fake = FakeMcp::start(None).await?;
    let (sim, _chatd, client) = start().await?;
    connector(&client, "Docs", &fake.url("/mcp"), None).await?;
    let chat = chat(&client, "yolo").await?;
    for (note, initialized) in [("first", 1), ("second", 2)] {
        if note == "second" {
            fake.forget_sessions();
        }
        sim.faults(json!([
            {"tool_calls": [{"name": "send", "arguments": {"note": note}}]},
            {"tokens": 3},
        ]))
        .await?;
        let record = turn(&client, &chat, "send a note").await?;
        assert_eq!(record["status"], "done", "{record}");
        let results = tool_results(&client.snapshot(&chat).await?);
        assert_eq!(
            results.last().map(String::as_str),
            Some(format!("sent: {note}").as_str()),
            "{results:?}"
        );
        assert_eq!(fake.asked("initialize"), initialized, "{note}");
    }
    // The first call, the second refused unread (404), the second again.
    assert_eq!(fake.asked("tools/call"), 3);
    Ok(())
}

/// A card for a tool that changes things waits; the owner switches the
/// server off meanwhile; approved, the call is not sent, and the model is
/// told why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_approved_after_its_server_was_switched_off_is_not_sent() -> anyhow::Result<()> {
    let fake = FakeMcp::start(None).await?;
    let (sim, _chatd, client) = start().await?;
    let id = connector(&client, "Docs", &fake.url("/mcp"), None).await?;
    let chat = chat(&client, "ask").await?;
    sim.faults(json!([
        {"tool_calls": [{"name": "send", "arguments": {"note": "not now"}}]},
        {"tokens": 3},
    ]))
    .await?;
    let run = run_id(&client.send(&chat, "send it").await?)?;
    let mut device = client.events(&chat, 0).await?;
    let events = device
        .read_until(QUICK, |e| e.kind == "tool.consent")
        .await?;
    let card = events.last().context("card")?.data.clone();
    assert!(
        card["summary"].as_str().unwrap_or("").contains("not now"),
        "the card shows what will be sent: {card}"
    );
    let off = client
        .post(&format!("/mcp-connectors/{id}/disable"), json!({}))
        .await?;
    assert_eq!(off.status, 200, "{off:?}");
    let approved = client
        .post(
            &format!("/conversations/{chat}/consent"),
            json!({"card_id": card["card_id"], "decision": "once"}),
        )
        .await?;
    assert_eq!(approved.status, 200, "{approved:?}");
    let record = client
        .wait_run(&chat, &run, &["done", "failed"], QUICK)
        .await?;
    assert_eq!(record["status"], "done", "{record}");
    assert_eq!(fake.asked("tools/call"), 0, "nothing was sent");
    let results = tool_results(&client.snapshot(&chat).await?);
    assert!(
        results.first().is_some_and(|r| r.contains("no longer on")),
        "{results:?}"
    );
    Ok(())
}

/// A call's limit (here 2 s) starts again at each progress notification:
/// the reference server's 4-second operation reporting each second ends
/// well; the same operation reporting only at its end is given up at the
/// limit, and the model reads why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_keeps_a_long_call_alive_and_silence_ends_it_at_the_limit() -> anyhow::Result<()> {
    let Some(server) = Everything::http().await? else {
        return Ok(());
    };
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start(&sim.url(), &[PRIVATE, ("QSE_CHAT_MCP_CALL_LIMIT_S", "2")]).await?;
    let client = chatd.client();
    connector(&client, "Everything", &server.url(), None).await?;
    let chat = chat(&client, "yolo").await?;
    sim.faults(json!([
        {"tool_calls": [{"name": "trigger-long-running-operation",
                         "arguments": {"duration": 4, "steps": 4}}]},
        {"tool_calls": [{"name": "trigger-long-running-operation",
                         "arguments": {"duration": 4, "steps": 1}}]},
        {"tokens": 3},
    ]))
    .await?;
    let run = turn(&client, &chat, "take your time").await?;
    assert_eq!(run["status"], "done", "{run}");
    let results = tool_results(&client.snapshot(&chat).await?);
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(
        results[0],
        "Long running operation completed. Duration: 4 seconds, Steps: 4."
    );
    assert!(
        results[1].contains("no answer and no progress within 2 s"),
        "{}",
        results[1]
    );
    Ok(())
}
