//! Sub-agents end to end: the real `chatd` and `engine-sim`; the parent's
//! answers scripted per chat (`/sim/faults` with a session), each
//! sub-agent's by the cue in its task. Every wait is on a condition with a
//! bound.

use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};
use tandem_tests::harness::{
    offered_tools, run_id, sim_answer, tool_results, wait_until, Chatd, Client, Sim, SseEvent,
};

const QUICK: Duration = Duration::from_secs(30);
const LONG: Duration = Duration::from_secs(120);

async fn start() -> anyhow::Result<(Sim, Chatd, Client)> {
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start(&sim.url(), &[]).await?;
    let client = chatd.client();
    Ok((sim, chatd, client))
}

async fn chat_in(client: &Client, mode: &str) -> anyhow::Result<String> {
    client.create_chat_in(mode).await
}

/// The parent's next model answers: each step's calls.
async fn script(sim: &Sim, chat: &str, steps: Vec<Value>) -> anyhow::Result<()> {
    sim.post(
        "/sim/faults",
        json!({"session": format!("chat-{chat}"), "next": steps}),
    )
    .await?;
    Ok(())
}

fn spawn(task: &str, wait: bool) -> Value {
    json!({"name": "spawn_agent", "arguments": {"task": task, "wait": wait}})
}

fn step(calls: Vec<Value>) -> Value {
    json!({"tool_calls": calls})
}

async fn subagents(client: &Client, chat: &str) -> anyhow::Result<Value> {
    let answer = client
        .get(&format!("/conversations/{chat}/subagents"))
        .await?;
    anyhow::ensure!(answer.status == 200, "{answer:?}");
    Ok(answer.body)
}

async fn wait_subagents<F>(
    client: &Client,
    chat: &str,
    what: &str,
    bound: Duration,
    done: F,
) -> anyhow::Result<Vec<Value>>
where
    F: Fn(&[Value]) -> bool,
{
    wait_until(what, bound, || async {
        let list = subagents(client, chat).await.ok()?;
        let rows = list["subagents"].as_array()?.clone();
        done(&rows).then_some(rows)
    })
    .await
}

/// Every event of the chat's log, from the first to the snapshot's seq.
async fn log_of(client: &Client, chat: &str) -> anyhow::Result<Vec<SseEvent>> {
    let seq = client.snapshot(chat).await?["seq"].as_i64().unwrap_or(0);
    let mut stream = client.events(chat, 0).await?;
    stream
        .read_until(QUICK, |e| e.seq.is_some_and(|s| s >= seq))
        .await
}

fn of_kind<'a>(events: &'a [SseEvent], kind: &str) -> Vec<&'a SseEvent> {
    events.iter().filter(|e| e.kind == kind).collect()
}

/// The messages of the parent that carry a sub-agent's result card.
fn result_messages(snapshot: &Value, sub: &str) -> Vec<Value> {
    snapshot["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["card"]["kind"] == "sub_agent_result" && m["card"]["subagent_id"] == sub)
        .cloned()
        .collect()
}

async fn last_run_done(client: &Client, chat: &str, bound: Duration) -> anyhow::Result<Value> {
    wait_until("the chat's runs to end", bound, || async {
        let snapshot = client.snapshot(chat).await.ok()?;
        let runs = snapshot["runs"].as_array()?;
        let idle = runs
            .iter()
            .all(|r| !matches!(r["status"].as_str(), Some("queued" | "running" | "waiting")));
        idle.then_some(snapshot)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreground_sub_agent_answers_its_call() -> anyhow::Result<()> {
    let (sim, _chatd, client) = start().await?;
    let chat = chat_in(&client, "auto").await?;
    script(
        &sim,
        &chat,
        vec![step(vec![spawn("Count the words\n[sim tokens=7]", true)])],
    )
    .await?;
    let run = run_id(&client.send(&chat, "look into it").await?)?;
    let record = client
        .wait_run(
            &chat,
            &run,
            &["done", "failed", "stopped", "interrupted"],
            LONG,
        )
        .await?;
    assert_eq!(record["status"], "done", "{record}");

    let snapshot = client.snapshot(&chat).await?;
    let results = tool_results(&snapshot);
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(
        results[0].contains(sim_answer(7).trim())
            && results[0].contains("Its words, not the person's"),
        "the call's result is the sub-agent's answer: {}",
        results[0]
    );
    let list = subagents(&client, &chat).await?;
    let rows = list["subagents"].as_array().context("list")?;
    assert_eq!(rows.len(), 1, "{list}");
    let sub = rows[0]["id"].as_str().context("id")?.to_string();
    assert_eq!(rows[0]["state"], "done");
    assert_eq!(rows[0]["wait"], true);
    assert_eq!(rows[0]["title"], "Count the words");

    // Its own conversation: a sub-agent's, under its parent, not in the list.
    let own = client.snapshot(&sub).await?;
    assert_eq!(own["conversation"]["kind"], "subagent");
    assert_eq!(own["conversation"]["parent_id"], chat.as_str());
    let listed = client.get("/conversations").await?;
    let ids: Vec<&str> = listed.body["conversations"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["id"].as_str())
        .collect();
    assert!(
        ids.contains(&chat.as_str()) && !ids.contains(&sub.as_str()),
        "{ids:?}"
    );
    let shown = client
        .get(&format!("/conversations/{chat}/subagents/{sub}"))
        .await?;
    assert_eq!(shown.status, 200, "{shown:?}");
    assert!(shown.body["snapshot"]["messages"]
        .as_array()
        .is_some_and(|m| m.iter().any(|m| m["role"] == "assistant")));

    // It was offered the parent's tools but spawn_agent.
    let requests = sim.requests().await?;
    let of = |session: &str| -> Vec<Vec<String>> {
        requests
            .iter()
            .filter(|r| r["session_id"] == session)
            .map(|r| offered_tools(&r["body"]))
            .collect()
    };
    let parent_tools = of(&format!("chat-{chat}"));
    let child_tools = of(&format!("chat-{sub}"));
    anyhow::ensure!(
        !parent_tools.is_empty() && !child_tools.is_empty(),
        "requests: {requests:?}"
    );
    assert!(parent_tools[0].iter().any(|t| t == "spawn_agent"));
    let mut expected: Vec<String> = parent_tools[0]
        .iter()
        .filter(|t| *t != "spawn_agent")
        .cloned()
        .collect();
    expected.sort();
    let mut got = child_tools[0].clone();
    got.sort();
    assert_eq!(got, expected);

    // The parent's log: started, then done naming the call.
    let log = log_of(&client, &chat).await?;
    let started = of_kind(&log, "sub_agent_started");
    let done = of_kind(&log, "sub_agent_done");
    assert_eq!((started.len(), done.len()), (1, 1));
    assert!(started[0].seq < done[0].seq);
    assert_eq!(done[0].data["status"], "done");
    assert!(done[0].data["call_id"].is_string(), "{:?}", done[0].data);

    // Read-only to the API.
    for (method, path) in [
        ("POST", format!("/conversations/{sub}/messages")),
        ("POST", format!("/conversations/{sub}/stop")),
        ("PATCH", format!("/conversations/{sub}")),
        ("DELETE", format!("/conversations/{sub}")),
        ("PUT", format!("/conversations/{sub}/permission-mode")),
        ("POST", format!("/conversations/{sub}/rules")),
        // The id as a route reads it, percent-decoded.
        ("POST", format!("/conversations/%63{}/messages", &sub[1..])),
    ] {
        let m = reqwest::Method::from_bytes(method.as_bytes())?;
        let answer = client
            .call(m, &path, Some(json!({"text": "hi", "mode": "yolo"})))
            .await?;
        assert_eq!(answer.status, 409, "{method} {path}: {answer:?}");
        assert_eq!(
            answer.body["error"]["type"], "subagent_read_only",
            "{answer:?}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_sub_agent_answers_with_a_message_and_an_event() -> anyhow::Result<()> {
    let (sim, _chatd, client) = start().await?;
    let chat = chat_in(&client, "auto").await?;
    let task = "Summarise the notes\n[sim tokens=5 first_token_ms=1500]";
    script(&sim, &chat, vec![step(vec![spawn(task, false)])]).await?;
    let run = run_id(&client.send(&chat, "go").await?)?;
    let record = client
        .wait_run(&chat, &run, &["done", "failed"], LONG)
        .await?;
    assert_eq!(record["status"], "done", "{record}");
    let results = tool_results(&client.snapshot(&chat).await?);
    assert!(results[0].contains("in the background"), "{results:?}");

    let rows = wait_subagents(&client, &chat, "the sub-agent to end", LONG, |rows| {
        rows.len() == 1 && rows[0]["state"] != "running"
    })
    .await?;
    assert_eq!(rows[0]["state"], "done");
    assert_eq!(rows[0]["wait"], false);
    let sub = rows[0]["id"].as_str().context("id")?.to_string();
    let snapshot = last_run_done(&client, &chat, LONG).await?;
    let results = result_messages(&snapshot, &sub);
    assert_eq!(results.len(), 1, "one message with its result");
    assert_eq!(results[0]["role"], "user");
    assert!(results[0]["text"]
        .as_str()
        .unwrap_or("")
        .contains(sim_answer(5).trim()));
    let runs = snapshot["runs"].as_array().context("runs")?;
    assert_eq!(
        runs.len(),
        2,
        "the result started a run of the parent: {runs:?}"
    );
    assert_eq!(runs[1]["status"], "done");

    let log = log_of(&client, &chat).await?;
    let done = of_kind(&log, "sub_agent_done");
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].data["message_id"], results[0]["id"]);
    let created = log
        .iter()
        .find(|e| e.kind == "message.created" && e.data["message"]["id"] == results[0]["id"])
        .context("message.created of the result")?;
    assert!(created.seq < done[0].seq, "stored before it is announced");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_result_after_kill9_arrives_once() -> anyhow::Result<()> {
    let (sim, mut chatd, client) = start().await?;
    let chat = chat_in(&client, "auto").await?;
    let task = "Read it all\n[sim tokens=120 tps=20]";
    script(&sim, &chat, vec![step(vec![spawn(task, false)])]).await?;
    client.send(&chat, "go").await?;
    let rows = wait_subagents(&client, &chat, "the sub-agent to start", LONG, |rows| {
        rows.len() == 1
    })
    .await?;
    let sub = rows[0]["id"].as_str().context("id")?.to_string();
    // Mid-answer: its run streams.
    wait_until("the sub-agent to stream", LONG, || async {
        let own = client.snapshot(&sub).await.ok()?;
        let text = own["messages"]
            .as_array()?
            .iter()
            .rev()
            .find(|m| m["role"] == "assistant")?["text"]
            .as_str()?
            .to_string();
        (text.len() > 20).then_some(())
    })
    .await?;
    chatd.restart().await?;

    let rows = wait_subagents(
        &client,
        &chat,
        "the sub-agent to end after the restart",
        LONG,
        |rows| rows.len() == 1 && rows[0]["state"] != "running",
    )
    .await?;
    assert_eq!(rows[0]["state"], "done", "{rows:?}");
    let own = client.snapshot(&sub).await?;
    let modes: Vec<&str> = own["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["mode"].as_str())
        .collect();
    assert_eq!(modes, ["send", "resume"], "taken up again once");
    let snapshot = last_run_done(&client, &chat, LONG).await?;
    assert_eq!(result_messages(&snapshot, &sub).len(), 1);
    let done = of_kind(&log_of(&client, &chat).await?, "sub_agent_done").len();
    assert_eq!(done, 1);

    // Another restart changes nothing.
    chatd.restart().await?;
    let snapshot = last_run_done(&client, &chat, LONG).await?;
    assert_eq!(result_messages(&snapshot, &sub).len(), 1);
    assert_eq!(
        of_kind(&log_of(&client, &chat).await?, "sub_agent_done").len(),
        1
    );
    Ok(())
}

/// The text of an assistant message in a sub-agent's own snapshot that has
/// some, if any.
fn streamed(own: &Value) -> Option<String> {
    own["messages"]
        .as_array()?
        .iter()
        .rev()
        .find(|m| m["role"] == "assistant" && m["text"].as_str().is_some_and(|t| t.len() > 20))
        .and_then(|m| m["text"].as_str())
        .map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_sub_agent_cut_by_kill9_hands_back_its_whole_answer() -> anyhow::Result<()> {
    let (sim, mut chatd, client) = start().await?;
    let chat = chat_in(&client, "auto").await?;
    let n = 120;
    let task = format!("Write it all\n[sim tokens={n} tps=40 id=whole-after-kill]");
    script(&sim, &chat, vec![step(vec![spawn(&task, false)])]).await?;
    client.send(&chat, "go").await?;
    let rows = wait_subagents(&client, &chat, "the sub-agent to start", LONG, |rows| {
        rows.len() == 1
    })
    .await?;
    let sub = rows[0]["id"].as_str().context("id")?.to_string();
    // Part of its answer is stored when chatd dies.
    let before = wait_until("part of its answer to stream", LONG, || async {
        streamed(&client.snapshot(&sub).await.ok()?)
    })
    .await?;
    chatd.kill9();
    assert!(
        sim_answer(n).starts_with(&before) && before.len() < sim_answer(n).len(),
        "cut mid-answer: {before:?}"
    );
    chatd.restart().await?;

    let rows = wait_subagents(
        &client,
        &chat,
        "the sub-agent to end after the restart",
        LONG,
        |rows| rows.len() == 1 && rows[0]["state"] != "running",
    )
    .await?;
    assert_eq!(rows[0]["state"], "done", "{rows:?}");
    let whole = sim_answer(n);
    let whole = whole.trim();

    // Its transcript holds the answer once, whole, in one message.
    let shown = client
        .get(&format!("/conversations/{chat}/subagents/{sub}"))
        .await?;
    anyhow::ensure!(shown.status == 200, "{shown:?}");
    let own = &shown.body["snapshot"];
    let modes: Vec<&str> = own["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["mode"].as_str())
        .collect();
    assert_eq!(modes, ["send", "resume"], "cut, then taken up again");
    let answers: Vec<&str> = own["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "assistant")
        .filter_map(|m| m["text"].as_str())
        .filter(|t| !t.trim().is_empty())
        .collect();
    assert_eq!(answers.len(), 1, "one answer: {answers:?}");
    assert_eq!(answers[0].trim(), whole);
    assert_eq!(shown.body["subagent"]["result"].as_str(), Some(whole));

    // The parent gets the whole answer, once.
    let snapshot = last_run_done(&client, &chat, LONG).await?;
    let results = result_messages(&snapshot, &sub);
    assert_eq!(results.len(), 1, "one message with its result");
    let text = results[0]["text"].as_str().context("text")?;
    let (_, result) = text.split_once("\n\n").context("headline")?;
    assert_eq!(result, whole, "the result is the whole answer");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_runs_at_most_four_sub_agents_in_the_background() -> anyhow::Result<()> {
    let (sim, _chatd, client) = start().await?;
    let chat = chat_in(&client, "auto").await?;
    let calls = (0..5)
        .map(|i| spawn(&format!("Part {i}\n[sim tokens=40 tps=10]"), false))
        .collect();
    script(&sim, &chat, vec![step(calls)]).await?;
    let run = run_id(&client.send(&chat, "split it").await?)?;
    client.wait_run(&chat, &run, &["done"], LONG).await?;
    let results = tool_results(&client.snapshot(&chat).await?);
    assert_eq!(results.len(), 5);
    let started = results
        .iter()
        .filter(|t| t.contains("in the background;"))
        .count();
    let refused: Vec<&String> = results
        .iter()
        .filter(|t| t.starts_with("refused"))
        .collect();
    assert_eq!(started, 4, "{results:?}");
    assert_eq!(refused.len(), 1);
    assert!(
        refused[0].contains("4 sub-agents in the background"),
        "{}",
        refused[0]
    );
    let list = subagents(&client, &chat).await?;
    assert!(
        list["running_background"].as_u64().is_some_and(|n| n <= 4),
        "{list}"
    );
    assert_eq!(list["limit"]["background"], 4);
    // Once they end, another may start.
    wait_subagents(&client, &chat, "the four to end", LONG, |rows| {
        rows.len() == 4 && rows.iter().all(|r| r["state"] != "running")
    })
    .await?;
    last_run_done(&client, &chat, LONG).await?;
    script(
        &sim,
        &chat,
        vec![step(vec![spawn("Part 5\n[sim tokens=3]", false)])],
    )
    .await?;
    let run = run_id(&client.send(&chat, "one more").await?)?;
    client.wait_run(&chat, &run, &["done"], LONG).await?;
    let results = tool_results(&client.snapshot(&chat).await?);
    assert!(
        results
            .last()
            .is_some_and(|t| t.contains("in the background;")),
        "{results:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agent_cannot_pass_its_parents_rules_or_tools() -> anyhow::Result<()> {
    let (sim, chatd, client) = start().await?;
    let chat = chat_in(&client, "auto").await?;
    let rule = client
        .post(
            &format!("/conversations/{chat}/rules"),
            json!({"tool": "write_file", "verdict": "deny"}),
        )
        .await?;
    assert!(rule.status == 201 || rule.status == 200, "{rule:?}");
    // The sub-agent's model writes a file: the parent's deny rule holds it.
    let writes = r#"Write it
[sim tool_steps=1 tool_calls=[{"name":"write_file","arguments":{"path":"a.txt","content":"x"}}]]"#;
    // One limited to read_file tries list_files and spawn_agent anyway.
    let limited = r#"Look only
[sim tool_steps=1 tool_calls=[{"name":"list_files","arguments":{}},{"name":"spawn_agent","arguments":{"task":"deeper"}}]]"#;
    let only_read =
        json!({"name": "spawn_agent", "arguments": {"task": limited, "tools": ["read_file"]}});
    let runs_something = json!({"name": "spawn_agent", "arguments": {"task": "Run make_deck.py and report", "tools": ["read_file"]}});
    let unknown =
        json!({"name": "spawn_agent", "arguments": {"task": "x", "tools": ["format_disk"]}});
    script(
        &sim,
        &chat,
        vec![step(vec![
            spawn(writes, true),
            only_read,
            runs_something,
            unknown,
        ])],
    )
    .await?;
    let run = run_id(&client.send(&chat, "try").await?)?;
    let record = client
        .wait_run(&chat, &run, &["done", "failed"], LONG)
        .await?;
    assert_eq!(record["status"], "done", "{record}");
    let results = tool_results(&client.snapshot(&chat).await?);
    assert_eq!(results.len(), 4, "{results:?}");
    assert!(
        !chatd
            .data_dir()
            .join("workspaces")
            .join(&chat)
            .join("a.txt")
            .exists(),
        "the deny rule held the sub-agent's write"
    );
    let rows = subagents(&client, &chat).await?["subagents"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(rows.len(), 2, "two started, two refused: {results:?}");
    let id_of = |title: &str| {
        rows.iter()
            .find(|r| r["title"] == title)
            .and_then(|r| r["id"].as_str())
            .map(str::to_string)
    };
    let writer = id_of("Write it").context("the writer")?;
    let own = tool_results(&client.snapshot(&writer).await?);
    assert!(own[0].starts_with("refused"), "{own:?}");
    let looker = id_of("Look only").context("the looker")?;
    let own = tool_results(&client.snapshot(&looker).await?);
    assert_eq!(own.len(), 2, "{own:?}");
    assert!(
        own.iter()
            .all(|t| t.contains("not one of the tools this sub-agent was given")),
        "{own:?}"
    );
    assert!(
        results[2].contains("asks to run something") && results[2].contains("bash"),
        "{}",
        results[2]
    );
    assert!(results[3].contains("format_disk"), "{}", results[3]);
    // Offered read_file only.
    let requests = sim.requests().await?;
    let looker_tools: Vec<Vec<String>> = requests
        .iter()
        .filter(|r| r["session_id"] == format!("chat-{looker}"))
        .map(|r| offered_tools(&r["body"]))
        .collect();
    assert!(!looker_tools.is_empty());
    assert_eq!(looker_tools[0], ["read_file"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agents_card_shows_on_its_parent_and_its_write_is_the_parents() -> anyhow::Result<()>
{
    let (sim, chatd, client) = start().await?;
    let chat = chat_in(&client, "ask").await?;
    std::fs::create_dir_all(chatd.data_dir().join("workspaces").join(&chat))?;
    let writes = r#"Write it
[sim tool_steps=1 tool_calls=[{"name":"write_file","arguments":{"path":"b.txt","content":"from the sub-agent"}}]]"#;
    script(&sim, &chat, vec![step(vec![spawn(writes, true)])]).await?;
    let mut events = client.events(&chat, 0).await?;
    let run = run_id(&client.send(&chat, "write").await?)?;
    let seen = events
        .read_until(LONG, |e| {
            e.kind == "tool.consent" && e.data["subagent_id"].is_string()
        })
        .await?;
    let card = &seen.last().context("card")?.data;
    assert_eq!(card["subagent_title"], "Write it");
    let sub = card["subagent_id"].as_str().context("sub")?;
    let answer = client
        .post(
            &format!("/conversations/{sub}/consent"),
            json!({"card_id": card["card_id"], "decision": "once"}),
        )
        .await?;
    assert!(answer.status < 300, "{answer:?}");
    client.wait_run(&chat, &run, &["done"], LONG).await?;
    let written = chatd
        .data_dir()
        .join("workspaces")
        .join(&chat)
        .join("b.txt");
    assert_eq!(std::fs::read_to_string(&written)?, "from the sub-agent");
    assert!(
        !chatd.data_dir().join("workspaces").join(sub).exists(),
        "no folder of its own"
    );
    // Its change is the parent's.
    let files = client.get(&format!("/conversations/{chat}/files")).await?;
    assert!(files.body.to_string().contains("b.txt"), "{files:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_a_chat_stops_its_sub_agents() -> anyhow::Result<()> {
    let (sim, _chatd, client) = start().await?;
    // A foreground one: both stop, the call answered.
    let chat = chat_in(&client, "auto").await?;
    script(
        &sim,
        &chat,
        vec![step(vec![spawn("Slow\n[sim tokens=400 tps=10]", true)])],
    )
    .await?;
    let run = run_id(&client.send(&chat, "go").await?)?;
    wait_subagents(&client, &chat, "it to start", LONG, |r| r.len() == 1).await?;
    let stopped = client
        .post(&format!("/conversations/{chat}/stop"), json!({}))
        .await?;
    assert_eq!(stopped.status, 200, "{stopped:?}");
    let record = client.wait_run(&chat, &run, &["stopped"], QUICK).await?;
    assert_eq!(record["status"], "stopped");
    let rows = wait_subagents(&client, &chat, "it to stop", QUICK, |r| {
        r[0]["state"] != "running"
    })
    .await?;
    assert_eq!(rows[0]["state"], "stopped");
    let results = tool_results(&client.snapshot(&chat).await?);
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].contains("stopped"), "{}", results[0]);

    // A background one with the parent idle: stop answers it, nothing comes back.
    let chat = chat_in(&client, "auto").await?;
    script(
        &sim,
        &chat,
        vec![step(vec![spawn("Slower\n[sim tokens=400 tps=10]", false)])],
    )
    .await?;
    let run = run_id(&client.send(&chat, "go").await?)?;
    client.wait_run(&chat, &run, &["done"], LONG).await?;
    let rows = wait_subagents(&client, &chat, "it to run", LONG, |r| r.len() == 1).await?;
    let sub = rows[0]["id"].as_str().context("id")?.to_string();
    let stopped = client
        .post(&format!("/conversations/{chat}/stop"), json!({}))
        .await?;
    assert_eq!(stopped.status, 200, "{stopped:?}");
    assert_eq!(stopped.body["subagents"], json!([sub]));
    let rows = wait_subagents(&client, &chat, "it to stop", QUICK, |r| {
        r[0]["state"] != "running"
    })
    .await?;
    assert_eq!(rows[0]["state"], "stopped");
    assert_eq!(rows[0]["by_parent"], true);
    let snapshot = last_run_done(&client, &chat, QUICK).await?;
    assert!(result_messages(&snapshot, &sub).is_empty());
    assert_eq!(
        snapshot["runs"].as_array().map(Vec::len),
        Some(1),
        "no new run"
    );
    let again = client
        .post(
            &format!("/conversations/{chat}/subagents/{sub}/stop"),
            json!({}),
        )
        .await?;
    assert_eq!(again.status, 409, "{again:?}");
    assert_eq!(again.body["error"]["type"], "not_running");

    // Its own stop: what it had comes back as a message.
    let chat = chat_in(&client, "auto").await?;
    script(
        &sim,
        &chat,
        vec![step(vec![spawn("Slowest\n[sim tokens=400 tps=10]", false)])],
    )
    .await?;
    let run = run_id(&client.send(&chat, "go").await?)?;
    client.wait_run(&chat, &run, &["done"], LONG).await?;
    let rows = wait_subagents(&client, &chat, "it to run", LONG, |r| r.len() == 1).await?;
    let sub = rows[0]["id"].as_str().context("id")?.to_string();
    wait_until("it to say something", LONG, || async {
        let own = client.snapshot(&sub).await.ok()?;
        own["messages"]
            .as_array()?
            .iter()
            .any(|m| m["role"] == "assistant" && m["text"].as_str().is_some_and(|t| t.len() > 5))
            .then_some(())
    })
    .await?;
    let stopped = client
        .post(
            &format!("/conversations/{chat}/subagents/{sub}/stop"),
            json!({}),
        )
        .await?;
    assert_eq!(stopped.status, 200, "{stopped:?}");
    assert_eq!(stopped.body["status"], "stopped");
    let snapshot = last_run_done(&client, &chat, LONG).await?;
    let back = result_messages(&snapshot, &sub);
    assert_eq!(back.len(), 1);
    assert!(
        back[0]["text"].as_str().unwrap_or("").contains("w0"),
        "{back:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_task_is_refused_until_a_file_of_the_chat_changes() -> anyhow::Result<()> {
    let (sim, _chatd, client) = start().await?;
    let chat = chat_in(&client, "auto").await?;
    let task = "Find the TODOs\n[sim tokens=3]";
    let again = "find  the todos\n[sim   tokens=3]";
    script(
        &sim,
        &chat,
        vec![
            step(vec![spawn(task, true)]),
            json!({"text": "ok"}),
            step(vec![spawn(again, true)]),
        ],
    )
    .await?;
    let run = run_id(&client.send(&chat, "first").await?)?;
    client.wait_run(&chat, &run, &["done"], LONG).await?;
    let run = run_id(&client.send(&chat, "again").await?)?;
    client.wait_run(&chat, &run, &["done"], LONG).await?;
    let results = tool_results(&client.snapshot(&chat).await?);
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(
        results[1].starts_with("refused") && results[1].contains("same task"),
        "{}",
        results[1]
    );
    assert_eq!(
        subagents(&client, &chat).await?["subagents"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );

    // A file changes: the same words go.
    script(&sim, &chat, vec![step(vec![json!({"name": "write_file", "arguments": {"path": "notes.md", "content": "TODO: x"}})]), json!({"text": "ok"}), step(vec![spawn(task, true)])]).await?;
    let run = run_id(&client.send(&chat, "write a note").await?)?;
    client.wait_run(&chat, &run, &["done"], LONG).await?;
    let run = run_id(&client.send(&chat, "and again").await?)?;
    client.wait_run(&chat, &run, &["done"], LONG).await?;
    let results = tool_results(&client.snapshot(&chat).await?);
    assert!(
        !results.last().is_some_and(|t| t.starts_with("refused")),
        "{results:?}"
    );
    assert_eq!(
        subagents(&client, &chat).await?["subagents"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreground_sub_agent_cut_by_kill9_comes_back_as_a_message() -> anyhow::Result<()> {
    let (sim, mut chatd, client) = start().await?;
    let chat = chat_in(&client, "auto").await?;
    script(
        &sim,
        &chat,
        vec![step(vec![spawn("Dig\n[sim tokens=120 tps=20]", true)])],
    )
    .await?;
    let run = run_id(&client.send(&chat, "go").await?)?;
    let rows = wait_subagents(&client, &chat, "it to start", LONG, |r| r.len() == 1).await?;
    let sub = rows[0]["id"].as_str().context("id")?.to_string();
    wait_until("it to stream", LONG, || async {
        let own = client.snapshot(&sub).await.ok()?;
        own["messages"]
            .as_array()?
            .iter()
            .any(|m| m["role"] == "assistant" && m["text"].as_str().is_some_and(|t| t.len() > 20))
            .then_some(())
    })
    .await?;
    chatd.restart().await?;
    let record = client
        .wait_run(&chat, &run, &["interrupted"], QUICK)
        .await?;
    assert_eq!(record["status"], "interrupted");
    let rows = wait_subagents(&client, &chat, "it to end", LONG, |r| {
        r[0]["state"] != "running"
    })
    .await?;
    assert_eq!(rows[0]["state"], "done");
    assert_eq!(rows[0]["wait"], false, "moved to the background");
    let snapshot = last_run_done(&client, &chat, LONG).await?;
    let results = tool_results(&snapshot);
    assert_eq!(results.len(), 1, "the call answered once: {results:?}");
    assert!(
        results[0].contains("goes on in the background"),
        "{}",
        results[0]
    );
    assert_eq!(result_messages(&snapshot, &sub).len(), 1);
    // Continue of the cut-off parent starts no second sub-agent.
    let resumed = client
        .post(&format!("/conversations/{chat}/continue"), json!({}))
        .await?;
    if resumed.status == 202 {
        let again = run_id(&resumed.body)?;
        client
            .wait_run(&chat, &again, &["done", "failed"], LONG)
            .await?;
    }
    assert_eq!(
        subagents(&client, &chat).await?["subagents"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_turn_stops_its_sub_agents() -> anyhow::Result<()> {
    let (sim, _chatd, client) = start().await?;
    let chat = chat_in(&client, "auto").await?;
    // The step after the spawn fails at once (the engine knows no such model).
    script(
        &sim,
        &chat,
        vec![
            step(vec![spawn("Long\n[sim tokens=400 tps=10]", false)]),
            json!({"status": 404}),
        ],
    )
    .await?;
    let run = run_id(&client.send(&chat, "go").await?)?;
    let record = client
        .wait_run(&chat, &run, &["failed", "done"], LONG)
        .await?;
    assert_eq!(record["status"], "failed", "{record}");
    let rows = wait_subagents(&client, &chat, "it to stop", QUICK, |r| {
        r.len() == 1 && r[0]["state"] != "running"
    })
    .await?;
    assert_eq!(rows[0]["state"], "stopped");
    assert_eq!(rows[0]["by_parent"], true);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agent_whose_engine_stays_away_ends_failed_and_its_parent_goes_on(
) -> anyhow::Result<()> {
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start(&sim.url(), &[("QSE_CHAT_RETRY_WINDOW_S", "2")]).await?;
    let client = chatd.client();
    let chat = chat_in(&client, "auto").await?;
    script(
        &sim,
        &chat,
        vec![step(vec![spawn("Unlucky\n[sim status=500]", true)])],
    )
    .await?;
    let run = run_id(&client.send(&chat, "go").await?)?;
    let record = client
        .wait_run(&chat, &run, &["done", "failed"], LONG)
        .await?;
    assert_eq!(record["status"], "done", "the parent goes on: {record}");
    let rows = subagents(&client, &chat).await?["subagents"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(rows[0]["state"], "failed", "{rows:?}");
    let results = tool_results(&client.snapshot(&chat).await?);
    assert!(results[0].contains("failed"), "{results:?}");
    Ok(())
}
