//! What a run sends the engine and what the model is told match what the
//! chat says: its settings in every request, the defaults a new chat starts
//! with, a system block made from what the chat is really offered, the
//! window it plans with, titles made from the first message, a fork that is
//! the whole chat, the network's preset checked against the box's ceiling,
//! and events that read back with their kind. The real chatd, engine-sim
//! (which keeps the bodies it gets) and, where the network matters, egressd.

use std::time::Duration;

use anyhow::Context;
use reqwest::Method;
use serde_json::{json, Value};
use tandem_tests::harness::{
    offered_tools, run_id, system_text, tool_results, wait_until, Chatd, Client, Egressd, Sim,
};

const QUICK: Duration = Duration::from_secs(20);

async fn start(env: &[(&str, &str)]) -> anyhow::Result<(Sim, Chatd, Client)> {
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start(&sim.url(), env).await?;
    let client = chatd.client();
    // chatd knows the model's window once it asked the engine.
    wait_until("chatd to know the engine's models", QUICK, || async {
        let caps = client.get("/capabilities").await.ok()?;
        (caps.body["engine"]["models"].as_array()?.len() == 1).then_some(())
    })
    .await?;
    Ok((sim, chatd, client))
}

async fn create(client: &Client, body: Value) -> anyhow::Result<String> {
    let made = client.post("/conversations", body).await?;
    anyhow::ensure!(made.status == 201, "{made:?}");
    Ok(made.body["id"].as_str().context("chat id")?.to_string())
}

/// Sends `text` and waits for the run to end; its record.
async fn exchange(client: &Client, chat: &str, text: &str) -> anyhow::Result<Value> {
    let run = run_id(&client.send(chat, text).await?)?;
    client
        .wait_run(chat, &run, &["done", "failed", "paused", "stopped"], QUICK)
        .await
}

/// The chat requests engine-sim got for `chat`, oldest first.
async fn bodies(sim: &Sim, chat: &str) -> anyhow::Result<Vec<Value>> {
    let session = format!("chat-{chat}");
    Ok(sim
        .requests()
        .await?
        .into_iter()
        .filter(|r| r["session_id"] == session.as_str())
        .map(|r| r["body"].clone())
        .collect())
}

async fn last_body(sim: &Sim, chat: &str) -> anyhow::Result<Value> {
    bodies(sim, chat)
        .await?
        .pop()
        .context("no request for the chat")
}

fn error_field(answer: &tandem_tests::harness::Answer) -> String {
    answer.body["error"]["field"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_reach_the_engine_and_a_patch_changes_the_next_request() -> anyhow::Result<()> {
    let (sim, _chatd, client) = start(&[]).await?;
    let chat = create(
        &client,
        json!({"settings": {
            "system_prompt": "Answer in French.",
            "temperature": 0.3, "top_p": 0.9, "top_k": 40,
            "reasoning_effort": "low", "max_tokens": 64,
        }}),
    )
    .await?;
    let mut device = client.events(&chat, 0).await?;
    assert_eq!(exchange(&client, &chat, "Hello").await?["status"], "done");
    let body = last_body(&sim, &chat).await?;
    assert_eq!(body["temperature"], 0.3, "{body}");
    assert_eq!(body["top_p"], 0.9);
    assert_eq!(body["top_k"], 40);
    assert_eq!(body["max_tokens"], 64);
    assert_eq!(body["reasoning_effort"], "low");
    assert_eq!(body["chat_template_kwargs"]["reasoning_effort"], "low");
    assert_eq!(body["chat_template_kwargs"]["enable_thinking"], true);
    assert!(
        system_text(&body).starts_with("Answer in French.\n\n# Tools in this chat"),
        "{}",
        system_text(&body)
    );
    // The usage event names the model it counts for.
    let events = device
        .read_until(QUICK, |e| e.kind == "run.finished")
        .await?;
    let usage = events
        .iter()
        .find(|e| e.kind == "usage")
        .context("a usage event")?;
    assert_eq!(usage.data["model"], "sim-small", "{:?}", usage.data);

    // A patch lays itself over: a value changes, null clears, the rest stays.
    let patched = client
        .call(
            Method::PATCH,
            &format!("/conversations/{chat}"),
            Some(json!({"settings": {"temperature": 1.5, "top_k": null, "reasoning_effort": "none"}})),
        )
        .await?;
    assert_eq!(patched.status, 200, "{patched:?}");
    assert_eq!(patched.body["settings"]["temperature"], 1.5);
    assert!(patched.body["settings"].get("top_k").is_none());
    exchange(&client, &chat, "And now?").await?;
    let body = last_body(&sim, &chat).await?;
    assert_eq!(body["temperature"], 1.5, "{body}");
    assert!(body.get("top_k").is_none(), "{body}");
    assert_eq!(body["top_p"], 0.9);
    assert_eq!(body["chat_template_kwargs"]["enable_thinking"], false);
    assert!(system_text(&body).starts_with("Answer in French."));

    // A chat with none leaves every field to the engine.
    let plain = create(&client, json!({})).await?;
    exchange(&client, &plain, "Hi").await?;
    let body = last_body(&sim, &plain).await?;
    for field in [
        "temperature",
        "top_p",
        "top_k",
        "max_tokens",
        "reasoning_effort",
        "chat_template_kwargs",
    ] {
        assert!(body.get(field).is_none(), "{field} in {body}");
    }
    assert!(system_text(&body).starts_with("# Tools in this chat"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_settings_are_refused_naming_the_field_and_change_nothing() -> anyhow::Result<()> {
    let (_sim, _chatd, client) = start(&[]).await?;
    let chat = create(&client, json!({"settings": {"temperature": 0.5}})).await?;
    let cases = [
        (json!({"temperature": 2.5}), "settings.temperature"),
        (json!({"top_p": 0}), "settings.top_p"),
        (json!({"top_k": 0}), "settings.top_k"),
        (
            json!({"reasoning_effort": "max"}),
            "settings.reasoning_effort",
        ),
        (json!({"max_tokens": 0}), "settings.max_tokens"),
        (
            json!({"system_prompt": "x".repeat(32 * 1024 + 1)}),
            "settings.system_prompt",
        ),
        (json!({"temprature": 1}), "settings.temprature"),
        // The sim's model holds 32,768 tokens.
        (json!({"context_size": 65536}), "settings.context_size"),
    ];
    for (settings, field) in cases {
        for (method, path) in [
            (Method::PATCH, format!("/conversations/{chat}")),
            (Method::POST, "/conversations".to_string()),
            (Method::PATCH, "/defaults".to_string()),
        ] {
            let answer = client
                .call(
                    method.clone(),
                    &path,
                    Some(json!({"settings": settings.clone()})),
                )
                .await?;
            assert_eq!(answer.status, 400, "{method} {path} {settings}: {answer:?}");
            assert_eq!(error_field(&answer), field, "{answer:?}");
        }
    }
    let snapshot = client.snapshot(&chat).await?;
    assert_eq!(
        snapshot["conversation"]["settings"],
        json!({"temperature": 0.5})
    );
    let listed = client.get("/conversations").await?;
    assert_eq!(
        listed.body["conversations"].as_array().map(Vec::len),
        Some(1)
    );
    let defaults = client.get("/defaults").await?;
    assert_eq!(defaults.body["settings"], json!({}), "{defaults:?}");
    let agent = client
        .post("/agents", json!({"name": "A", "settings": {"top_p": 3}}))
        .await?;
    assert_eq!(agent.status, 400, "{agent:?}");
    assert_eq!(error_field(&agent), "settings.top_p");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defaults_start_a_new_chat_and_an_agent_brings_its_own() -> anyhow::Result<()> {
    let (sim, _chatd, client) = start(&[]).await?;
    let set = client
        .call(
            Method::PATCH,
            "/defaults",
            Some(json!({"settings": {"temperature": 0.1, "system_prompt": "Be brief."}, "permission_mode": "ask"})),
        )
        .await?;
    assert_eq!(set.status, 200, "{set:?}");
    let caps = client.get("/capabilities").await?;
    assert_eq!(
        caps.body["defaults"]["settings"]["temperature"], 0.1,
        "{caps:?}"
    );
    assert_eq!(caps.body["defaults"]["permission_mode"], "ask");

    let made = client.post("/conversations", json!({})).await?;
    assert_eq!(
        made.body["settings"],
        json!({"temperature": 0.1, "system_prompt": "Be brief."})
    );
    assert_eq!(made.body["permission_mode"], "ask");
    // The body's settings lie over the defaults.
    let warm = client
        .post("/conversations", json!({"settings": {"temperature": 0.9}}))
        .await?;
    assert_eq!(
        warm.body["settings"],
        json!({"temperature": 0.9, "system_prompt": "Be brief."})
    );

    // An agent's settings stand under a chat made with it, and the chat's
    // own system prompt comes before the agent's instructions.
    let agent = client
        .post(
            "/agents",
            json!({"name": "Reviewer", "instructions": "You review drafts.",
                   "settings": {"temperature": 0.2, "max_tokens": 99}}),
        )
        .await?;
    assert_eq!(agent.status, 201, "{agent:?}");
    let agent_id = agent.body["id"].as_str().context("agent id")?;
    let chat = create(
        &client,
        json!({"agent_id": agent_id, "permission_mode": "auto",
               "settings": {"system_prompt": "Answer as a pirate.", "max_tokens": 50}}),
    )
    .await?;
    let snapshot = client.snapshot(&chat).await?;
    assert_eq!(
        snapshot["conversation"]["settings"],
        json!({"system_prompt": "Answer as a pirate.", "max_tokens": 50}),
        "the box's defaults are not copied into an agent's chat"
    );
    exchange(&client, &chat, "Look at this").await?;
    let body = last_body(&sim, &chat).await?;
    assert_eq!(body["temperature"], 0.2, "{body}");
    assert_eq!(body["max_tokens"], 50);
    assert!(
        system_text(&body).starts_with("Answer as a pirate.\n\nYou review drafts.\n\n# Tools"),
        "{}",
        system_text(&body)
    );
    Ok(())
}

/// What a saved agent with two read tools is told, on a box that runs
/// commands on the host: no commands, no web, reading only.
const READER_BLOCK: &str = "You read notes.\n\n# Tools in this chat\n\n\
You have these tools: read_file, grep.\n\
File paths are relative to this chat's workspace folder (for example notes/a.md); the workspace is the only place you can read files (you cannot change them), and symlinks are not followed.\n\
A long result is cut; its last line says how to read on (read_file offset/column) or where the whole output was saved.\n\
No model of this box sees images: when one is attached, say so and ask what it shows.\n\
There is NO command execution in this chat: you cannot run programs, scripts, tests, builds or shell commands. Never say or imply that you ran, executed or tested anything, and never present output you did not get from a tool. You may tell the person what to run and what to look for.\n\
You cannot reach the web in this chat.\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_without_bash_is_told_word_for_word_what_it_has() -> anyhow::Result<()> {
    let (sim, _chatd, client) = start(&[("QSE_CHATS_HOST_EXEC", "on")]).await?;
    let caps = client.get("/capabilities").await?;
    assert_eq!(caps.body["commands"], "host", "{caps:?}");
    let reason = caps.body["sandbox"]["reason"].as_str().unwrap_or("");
    assert!(!reason.contains("not offered"), "{reason}");
    assert!(
        reason.contains("runs on this machine through hostexecd"),
        "{reason}"
    );
    let agent = client
        .post(
            "/agents",
            json!({"name": "Reader", "instructions": "You read notes.", "tools": ["read_file", "grep"]}),
        )
        .await?;
    let agent_id = agent.body["id"].as_str().context("agent id")?;
    let chat = create(
        &client,
        json!({"agent_id": agent_id, "permission_mode": "auto"}),
    )
    .await?;
    exchange(&client, &chat, "What do my notes say?").await?;
    let body = last_body(&sim, &chat).await?;
    assert_eq!(system_text(&body), READER_BLOCK);
    assert_eq!(offered_tools(&body), ["read_file", "grep"]);

    // The same box's plain chat is told the truth about its host commands.
    let plain = create(&client, json!({"permission_mode": "ask"})).await?;
    exchange(&client, &plain, "Hi").await?;
    let system = system_text(&last_body(&sim, &plain).await?);
    assert!(
        system.contains("They run on this machine itself, with NO isolation"),
        "{system}"
    );
    assert!(
        system.contains("waits for the person's approval on a card"),
        "{system}"
    );
    assert!(
        system.contains("egress service does not answer"),
        "{system}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_context_size_is_the_window_the_chat_plans_with() -> anyhow::Result<()> {
    let (sim, _chatd, client) = start(&[]).await?;
    let chat = create(&client, json!({"settings": {"context_size": 8192}})).await?;
    let mut device = client.events(&chat, 0).await?;
    // Each message is about 2,300 tokens: the whole chat stays far under the
    // model's 32,768, and passes the line of 8,192 by the third.
    let words = "lorem ipsum dolor sit amet ".repeat(300);
    for i in 0..4 {
        exchange(&client, &chat, &format!("{i}: {words}")).await?;
    }
    let events = device.read_until(QUICK, |e| e.kind == "compacted").await?;
    let usage = events
        .iter()
        .rfind(|e| e.kind == "usage")
        .context("usage")?;
    assert_eq!(usage.data["limit"], 8192, "{:?}", usage.data);
    let all = bodies(&sim, &chat).await?;
    let biggest = sim
        .requests()
        .await?
        .iter()
        .filter(|r| r["session_id"] == format!("chat-{chat}").as_str())
        .filter_map(|r| r["prompt_tokens"].as_u64())
        .max()
        .context("prompt tokens")?;
    assert!(
        biggest < 8192,
        "a request of {biggest} tokens over the chat's 8,192 ({} requests)",
        all.len()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untitled_chat_is_named_after_its_first_line() -> anyhow::Result<()> {
    let (_sim, _chatd, client) = start(&[]).await?;
    let chat = create(&client, json!({})).await?;
    let mut device = client.events(&chat, 0).await?;
    exchange(
        &client,
        &chat,
        "\n  Plan the\ttrip to Lyon  \nwith the kids",
    )
    .await?;
    let snapshot = client.snapshot(&chat).await?;
    assert_eq!(snapshot["conversation"]["title"], "Plan the trip to Lyon");
    // Every device hears of it.
    device
        .read_until(QUICK, |e| {
            e.kind == "conversation.updated"
                && e.data["conversation"]["title"] == "Plan the trip to Lyon"
        })
        .await?;
    // The second message does not rename it; a title given is kept.
    exchange(&client, &chat, "Something else").await?;
    assert_eq!(
        client.snapshot(&chat).await?["conversation"]["title"],
        "Plan the trip to Lyon"
    );
    let named = create(&client, json!({"title": "Mine"})).await?;
    exchange(&client, &named, "Other words").await?;
    assert_eq!(
        client.snapshot(&named).await?["conversation"]["title"],
        "Mine"
    );
    // At most 80 characters.
    let long = create(&client, json!({})).await?;
    exchange(&client, &long, &"word ".repeat(40)).await?;
    let title = client.snapshot(&long).await?["conversation"]["title"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert_eq!(title.chars().count(), 80, "{title}");
    assert!(title.ends_with('…'), "{title}");
    // An import without a title is named the same way.
    let imported = client
        .post(
            "/conversations/import",
            json!({"version": 1, "model": "sim-small", "messages": [
                {"role": "user", "text": "Budget for March"},
                {"role": "assistant", "text": "Here it is."}]}),
        )
        .await?;
    assert_eq!(imported.status, 201, "{imported:?}");
    assert_eq!(imported.body["title"], "Budget for March");
    Ok(())
}

/// chatd following egressd on a socket of the test's, and egressd with
/// `extra` in `[egress]`.
async fn with_egressd(
    extra: &str,
) -> anyhow::Result<(Sim, Chatd, Client, Egressd, tempfile::TempDir)> {
    let sockets = tempfile::tempdir()?;
    let socket = sockets.path().join("egress.sock");
    let (sim, chatd, client) =
        start(&[("QSE_EGRESS_SOCKET", socket.to_str().unwrap_or(""))]).await?;
    let egressd = Egressd::start_at(
        &chatd.data_dir(),
        &chatd.dir.path().join("secrets.env"),
        &socket,
        extra,
    )
    .await?;
    Ok((sim, chatd, client, egressd, sockets))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_is_the_whole_chat_up_to_its_message() -> anyhow::Result<()> {
    let (sim, chatd, client, _egressd, _sockets) = with_egressd("ceiling = \"all\"\n").await?;
    let chat = create(
        &client,
        json!({"permission_mode": "auto", "settings": {"temperature": 0.7, "system_prompt": "Be kind."}}),
    )
    .await?;
    let preset = client
        .call(
            Method::PUT,
            &format!("/conversations/{chat}/egress"),
            Some(json!({"preset": "registries"})),
        )
        .await?;
    assert_eq!(preset.status, 200, "{preset:?}");
    let rule = client
        .post(
            &format!("/conversations/{chat}/egress/rules"),
            json!({"verdict": "allow", "host": "example.org:443"}),
        )
        .await?;
    assert_eq!(rule.status, 201, "{rule:?}");
    sim.faults(json!([
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "uploads/notes.md"}}]},
        {"tokens": 3}
    ]))
    .await?;
    let sent = client
        .post(
            &format!("/conversations/{chat}/messages"),
            json!({"text": "Read my notes", "attachments": [{"name": "notes.md", "text": "one\ntwo\n"}]}),
        )
        .await?;
    assert_eq!(sent.status, 202, "{sent:?}");
    let run = run_id(&sent.body)?;
    client.wait_run(&chat, &run, &["done"], QUICK).await?;
    let source = client.snapshot(&chat).await?;
    let last = source["messages"]
        .as_array()
        .and_then(|m| m.last())
        .context("messages")?;

    let forked = client
        .post(
            &format!("/conversations/{chat}/fork"),
            json!({"from_message_id": last["id"]}),
        )
        .await?;
    assert_eq!(forked.status, 201, "{forked:?}");
    let fork = forked.body["id"].as_str().context("fork id")?.to_string();
    assert_eq!(
        forked.body["settings"],
        json!({"temperature": 0.7, "system_prompt": "Be kind."})
    );
    assert_eq!(forked.body["title"], "Read my notes (fork)");
    let copy = client.snapshot(&fork).await?;
    let roles = |s: &Value| -> Vec<String> {
        s["messages"]
            .as_array()
            .map(|m| {
                m.iter()
                    .map(|m| m["role"].as_str().unwrap_or("").to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(roles(&copy), roles(&source));
    assert_eq!(roles(&copy), ["user", "assistant", "tool", "assistant"]);
    assert_eq!(
        copy["messages"][0]["attachments"],
        source["messages"][0]["attachments"]
    );
    assert_eq!(
        copy["messages"][1]["tool_calls"],
        source["messages"][1]["tool_calls"]
    );
    assert_eq!(
        copy["messages"][2]["tool_call_id"],
        source["messages"][2]["tool_call_id"]
    );
    assert_eq!(
        copy["messages"][2]["summary"],
        source["messages"][2]["summary"]
    );
    assert_eq!(tool_results(&copy), tool_results(&source));
    // The attached file is the fork's own.
    let file = chatd
        .data_dir()
        .join("workspaces")
        .join(&fork)
        .join("uploads/notes.md");
    assert_eq!(std::fs::read_to_string(&file)?, "one\ntwo\n");
    // Its network is the source's.
    let egress = client.get(&format!("/conversations/{fork}/egress")).await?;
    assert_eq!(egress.body["preset"], "registries", "{egress:?}");
    let rules = client
        .get(&format!("/conversations/{fork}/egress/rules"))
        .await?;
    assert_eq!(rules.body["rules"][0]["host"], "example.org", "{rules:?}");

    // Its next request carries the copied call and result, and the settings.
    exchange(&client, &fork, "Go on").await?;
    let body = last_body(&sim, &fork).await?;
    assert_eq!(body["temperature"], 0.7);
    assert!(system_text(&body).starts_with("Be kind."));
    let messages = body["messages"].as_array().context("messages")?;
    let call = messages
        .iter()
        .find(|m| m["tool_calls"].is_array())
        .context("the copied call")?;
    let id = call["tool_calls"][0]["id"].clone();
    assert!(
        messages
            .iter()
            .any(|m| m["role"] == "tool" && m["tool_call_id"] == id),
        "{body}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preset_above_the_ceiling_is_refused_and_changes_are_said_in_the_chat(
) -> anyhow::Result<()> {
    let (_sim, _chatd, client, _egressd, _sockets) =
        with_egressd("ceiling = \"registries\"\ndefault_preset = \"registries\"\n").await?;
    let chat = create(&client, json!({})).await?;
    let path = format!("/conversations/{chat}/egress");
    // A chat nobody set a preset for has the box's default.
    let shown = client.get(&path).await?;
    assert_eq!(shown.body["preset"], "registries", "{shown:?}");
    let above = client
        .call(Method::PUT, &path, Some(json!({"preset": "all"})))
        .await?;
    assert_eq!(above.status, 400, "{above:?}");
    assert_eq!(above.body["error"]["type"], "egress_above_ceiling");
    assert_eq!(error_field(&above), "preset");
    let message = above.body["error"]["message"].as_str().unwrap_or("");
    assert!(
        message.contains("above this box's ceiling (registries)"),
        "{message}"
    );
    assert_eq!(
        client.get(&path).await?.body["preset"],
        "registries",
        "nothing changed"
    );
    let settings = client.get("/egress/settings").await?;
    assert_eq!(settings.body["default_preset"], "registries");

    // Each change is an event of the chat.
    let mut device = client.events(&chat, 0).await?;
    let off = client
        .call(Method::PUT, &path, Some(json!({"preset": "off"})))
        .await?;
    assert_eq!(off.status, 200, "{off:?}");
    let events = device
        .read_until(QUICK, |e| e.kind == "egress.updated")
        .await?;
    let changed = &events.last().context("event")?.data;
    assert_eq!(changed["preset"], "off", "{changed}");
    assert_eq!(changed["ceiling"], "registries");
    let added = client
        .post(
            &format!("{path}/rules"),
            json!({"verdict": "deny", "host": "pypi.org:443"}),
        )
        .await?;
    assert_eq!(added.status, 201, "{added:?}");
    let events = device
        .read_until(QUICK, |e| e.kind == "egress.updated")
        .await?;
    let changed = &events.last().context("event")?.data;
    assert_eq!(changed["rules"][0]["host"], "pypi.org", "{changed}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_event_keeps_its_kind_from_the_ring_and_from_the_database() -> anyhow::Result<()>
{
    let (sim, mut chatd, client) = start(&[]).await?;
    let chat = create(&client, json!({"permission_mode": "ask"})).await?;
    let workspace = chatd.data_dir().join("workspaces").join(&chat);
    std::fs::create_dir_all(&workspace)?;
    sim.faults(json!([
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "a.txt", "content": "hi\n"}}]},
        {"tokens": 2}
    ]))
    .await?;
    let mut live = client.events(&chat, 0).await?;
    let run = run_id(&client.send(&chat, "write it").await?)?;
    let cards = live.read_until(QUICK, |e| e.kind == "tool.consent").await?;
    let card = cards.last().context("card")?.data["card_id"].clone();
    let answer = client
        .post(
            &format!("/conversations/{chat}/consent"),
            json!({"card_id": card, "decision": "once"}),
        )
        .await?;
    assert_eq!(answer.status, 200, "{answer:?}");
    let mut seen = cards;
    seen.extend(live.read_until(QUICK, |e| e.kind == "run.finished").await?);
    client.wait_run(&chat, &run, &["done"], QUICK).await?;
    let kinds = |events: &[tandem_tests::harness::SseEvent]| -> Vec<String> {
        events.iter().map(|e| e.kind.clone()).collect()
    };
    let live_kinds = kinds(&seen);
    assert!(
        live_kinds.iter().any(|k| k == "tool.consent_answered"),
        "{live_kinds:?}"
    );
    let last = seen.last().and_then(|e| e.seq).context("last seq")?;

    // From the ring (this chatd wrote them all).
    let mut again = client.events(&chat, 0).await?;
    let ring = again.read_until(QUICK, |e| e.seq == Some(last)).await?;
    assert_eq!(kinds(&ring), live_kinds);
    // From the database, after a restart.
    chatd.restart().await?;
    let mut later = client.events(&chat, 0).await?;
    let stored = later.read_until(QUICK, |e| e.seq == Some(last)).await?;
    assert_eq!(kinds(&stored), live_kinds);
    assert!(!kinds(&stored).iter().any(|k| k == "unknown"));
    Ok(())
}
