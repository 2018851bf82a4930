//! Saved agents as sub-agents end to end: the real `chatd` and
//! `engine-sim`; the chat's opt-in switch (`PUT …/builtins`), `list_agents`,
//! `spawn_agent agent=` (the agent's instructions, model and grants, within
//! the parent's), and a message that asks for an agent (`agent`, or
//! `/agent <name> <task>`). The parent's answers are scripted per chat
//! (`/sim/faults` with a session). Every wait is on a condition with a bound.

use super::scripted::{bodies_of, call, script, turn, LONG};
use anyhow::Context;
use serde_json::{json, Value};
use tandem_tests::harness::{
    offered_tools, run_id, sim_answer, system_text, tool_results, Chatd, Client, Sim,
};

async fn start() -> anyhow::Result<(Sim, Chatd, Client)> {
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start(&sim.url(), &[]).await?;
    let client = chatd.client();
    Ok((sim, chatd, client))
}

fn step(calls: Vec<Value>) -> Value {
    json!({"tool_calls": calls})
}

async fn make_agent(client: &Client, body: Value) -> anyhow::Result<String> {
    let made = client.post("/agents", body).await?;
    anyhow::ensure!(made.status == 201, "{made:?}");
    Ok(made.body["id"].as_str().context("agent id")?.to_string())
}

async fn switch(client: &Client, chat: &str, on: &[&str]) -> anyhow::Result<Value> {
    let answer = client
        .call(
            reqwest::Method::PUT,
            &format!("/conversations/{chat}/builtins"),
            Some(json!({ "on": on })),
        )
        .await?;
    anyhow::ensure!(answer.status == 200, "{answer:?}");
    Ok(answer.body)
}

async fn subagent_rows(client: &Client, chat: &str) -> anyhow::Result<Vec<Value>> {
    let list = client
        .get(&format!("/conversations/{chat}/subagents"))
        .await?;
    anyhow::ensure!(list.status == 200, "{list:?}");
    Ok(list.body["subagents"]
        .as_array()
        .context("subagents")?
        .clone())
}

fn opt_in_line(view: &Value) -> Value {
    view["opt_in"]
        .as_array()
        .and_then(|l| l.iter().find(|l| l["name"] == "saved_agents"))
        .cloned()
        .unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_agent_runs_as_a_sub_agent_with_its_instructions_model_and_grants(
) -> anyhow::Result<()> {
    let (sim, _chatd, client) = start().await?;
    let chat = client.create_chat_in("auto").await?;

    // No agent yet: the switch is off and could not serve.
    let tools = client.get(&format!("/conversations/{chat}/tools")).await?;
    let line = opt_in_line(&tools.body);
    assert_eq!(
        (&line["on"], &line["usable"]),
        (&json!(false), &json!(false)),
        "{line}"
    );
    assert!(line["reason"]
        .as_str()
        .is_some_and(|r| r.contains("no saved agent")));

    let reviewer = make_agent(
        &client,
        json!({"name": "Reviewer", "description": "Reviews drafts for clarity",
               "instructions": "You review drafts. MARK-R7", "model": "agent-model-7",
               "tools": ["read_file", "grep", "write_file"]}),
    )
    .await?;

    // Off: spawn_agent with `agent` is refused and starts nothing.
    script(
        &sim,
        &chat,
        vec![step(vec![call(
            "spawn_agent",
            json!({"task": "Check the draft", "agent": "reviewer"}),
        )])],
    )
    .await?;
    let snapshot = turn(&client, &chat, "review it").await?;
    let results = tool_results(&snapshot);
    assert!(
        results.len() == 1 && results[0].contains("switched off for this chat"),
        "{results:?}"
    );
    assert!(subagent_rows(&client, &chat).await?.is_empty());
    let first = bodies_of(&sim, &chat).await?;
    assert!(!offered_tools(&first[0]).contains(&"list_agents".to_string()));

    // A name that is no group refuses the whole body; then switched on.
    let bad = client
        .call(
            reqwest::Method::PUT,
            &format!("/conversations/{chat}/builtins"),
            Some(json!({"on": ["saved_agents", "everything"]})),
        )
        .await?;
    assert_eq!(bad.status, 400, "{bad:?}");
    assert_eq!(bad.body["error"]["field"], "on", "{bad:?}");
    let view = switch(&client, &chat, &["saved_agents"]).await?;
    let line = opt_in_line(&view);
    assert_eq!(
        (&line["on"], &line["usable"]),
        (&json!(true), &json!(true)),
        "{line}"
    );

    script(
        &sim,
        &chat,
        vec![
            step(vec![call("list_agents", json!({}))]),
            step(vec![call(
                "spawn_agent",
                json!({"task": "Check the draft\n[sim tokens=5]", "agent": "REVIEWER"}),
            )]),
        ],
    )
    .await?;
    let snapshot = turn(&client, &chat, "review it now").await?;
    let results = tool_results(&snapshot);
    assert_eq!(results.len(), 3, "{results:?}");
    let listed: Value = serde_json::from_str(&results[1]).context("list_agents is JSON")?;
    assert_eq!(listed["count"], 1, "{listed}");
    assert_eq!(listed["agents"][0]["id"], reviewer.as_str());
    assert_eq!(
        listed["agents"][0]["description"],
        "Reviews drafts for clarity"
    );
    assert!(
        results[2].contains(sim_answer(5).trim()),
        "the sub-agent's answer is the call's result: {}",
        results[2]
    );

    let rows = subagent_rows(&client, &chat).await?;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["agent_id"], reviewer.as_str());
    assert_eq!(rows[0]["title"], "Reviewer: Check the draft");
    let sub = rows[0]["id"].as_str().context("sub id")?;

    // The parent is offered list_agents now; the sub-agent runs as the
    // agent: its model, its instructions, its grants within the parent's.
    let parent = bodies_of(&sim, &chat).await?;
    let parent_tools = offered_tools(parent.last().context("parent request")?);
    assert!(parent_tools.iter().any(|t| t == "list_agents"));
    let child = bodies_of(&sim, sub).await?;
    let body = child.first().context("the sub-agent's request")?;
    assert_eq!(body["model"], "agent-model-7");
    assert!(
        system_text(body).contains("MARK-R7"),
        "{}",
        system_text(body)
    );
    let mut got = offered_tools(body);
    got.sort();
    assert_eq!(got, ["grep", "read_file", "write_file"]);
    let conversation = client.snapshot(sub).await?;
    assert_eq!(conversation["conversation"]["agent_id"], reviewer.as_str());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_agent_never_gets_more_than_the_chat_that_starts_it() -> anyhow::Result<()> {
    let (sim, _chatd, client) = start().await?;
    // Grants every tool; the chat's own agent grants little.
    let wide = make_agent(
        &client,
        json!({"name": "Wide", "instructions": "All of it."}),
    )
    .await?;
    let narrow = make_agent(
        &client,
        json!({"name": "Narrow", "tools": ["read_file", "spawn_agent", "list_agents"]}),
    )
    .await?;
    let made = client
        .post(
            "/conversations",
            json!({"agent_id": narrow, "permission_mode": "auto"}),
        )
        .await?;
    assert_eq!(made.status, 201, "{made:?}");
    let chat = made.body["id"].as_str().context("chat id")?.to_string();
    switch(&client, &chat, &["saved_agents"]).await?;

    script(
        &sim,
        &chat,
        vec![
            step(vec![call(
                "spawn_agent",
                json!({"task": "Look around", "agent": "Wide", "tools": ["read_file"]}),
            )]),
            step(vec![call(
                "spawn_agent",
                json!({"task": "Look around", "agent": "Nobody"}),
            )]),
            step(vec![call(
                "spawn_agent",
                json!({"task": "Look around\n[sim tokens=4]", "agent": wide}),
            )]),
        ],
    )
    .await?;
    let snapshot = turn(&client, &chat, "go").await?;
    let results = tool_results(&snapshot);
    assert_eq!(results.len(), 3, "{results:?}");
    assert!(
        results[0].contains("`tools` cannot be given with `agent`"),
        "{}",
        results[0]
    );
    assert!(
        results[1].contains("no saved agent is named \"Nobody\"")
            && results[1].contains("Wide")
            && results[1].contains("Narrow"),
        "{}",
        results[1]
    );
    assert!(results[2].contains(sim_answer(4).trim()), "{}", results[2]);

    let rows = subagent_rows(&client, &chat).await?;
    assert_eq!(rows.len(), 1, "refusals start nothing: {rows:?}");
    let sub = rows[0]["id"].as_str().context("sub id")?;
    let child = bodies_of(&sim, sub).await?;
    let body = child.first().context("the sub-agent's request")?;
    assert_eq!(
        offered_tools(body),
        ["read_file"],
        "the chat has read_file alone of what it may hand on"
    );
    assert!(system_text(body).contains("All of it."));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_asks_for_a_saved_agent_by_its_field_or_a_slash_command() -> anyhow::Result<()> {
    let (sim, chatd, client) = start().await?;
    let chat = client.create_chat_in("auto").await?;
    let agent = make_agent(&client, json!({"name": "Code reviewer"})).await?;
    let messages = |snapshot: &Value| snapshot["messages"].as_array().map_or(0, Vec::len);

    // Off for the chat: refused naming the field, nothing stored.
    let path = format!("/conversations/{chat}/messages");
    let off = client
        .post(
            &path,
            json!({"text": "check the draft", "agent": "Code reviewer"}),
        )
        .await?;
    assert_eq!(off.status, 400, "{off:?}");
    assert_eq!(off.body["error"]["field"], "agent");
    assert!(off.body["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("switched off")));
    switch(&client, &chat, &["saved_agents"]).await?;
    let unknown = client
        .post(&path, json!({"text": "/agent Nobody check the draft"}))
        .await?;
    assert_eq!(unknown.status, 400, "{unknown:?}");
    assert_eq!(unknown.body["error"]["field"], "agent");
    assert!(unknown.body["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("Code reviewer")));
    let bare = client
        .post(&path, json!({"text": "/agent code reviewer  "}))
        .await?;
    assert_eq!(bare.status, 400, "{bare:?}");
    assert_eq!(bare.body["error"]["field"], "text");
    assert_eq!(messages(&client.snapshot(&chat).await?), 0);

    // The slash command: the person's task is kept, the model told.
    script(
        &sim,
        &chat,
        vec![json!({"first_token_ms": 1500, "tool_calls": [
            {"name": "spawn_agent", "arguments": {"task": "check the draft", "agent": agent}}
        ]})],
    )
    .await?;
    let sent = client
        .post(
            &path,
            json!({"text": "/agent code reviewer check the draft"}),
        )
        .await?;
    assert_eq!(sent.status, 202, "{sent:?}");
    let run = run_id(&sent.body)?;
    // It starts a turn; another while it works is refused, not left
    // waiting, and the file it brought is not saved.
    let again = client
        .post(
            &path,
            json!({"text": "and the README", "agent": agent,
                   "attachments": [{"name": "extra.txt", "text": "more"}]}),
        )
        .await?;
    assert_eq!(again.status, 409, "{again:?}");
    assert_eq!(again.body["error"]["type"], "run_active");
    let uploads = chatd
        .data_dir()
        .join("workspaces")
        .join(&chat)
        .join("uploads");
    assert!(
        !uploads.join("extra.txt").exists(),
        "a refused send saved its file"
    );
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
    let asked = snapshot["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "user"))
        .context("the person's message")?;
    assert_eq!(asked["text"], "check the draft");
    assert_eq!(
        asked["attachments"],
        json!([{"kind": "agent", "agent_id": agent, "name": "Code reviewer",
                 "task": "check the draft"}])
    );
    let first = bodies_of(&sim, &chat).await?;
    let told = first[0]["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .context("the request's question")?;
    assert!(
        told.contains("saved agent \"Code reviewer\"")
            && told.contains(&json!({"agent": agent, "task": "check the draft"}).to_string())
            && told.ends_with("check the draft"),
        "{told}"
    );
    let rows = subagent_rows(&client, &chat).await?;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["title"], "Code reviewer: check the draft");

    // An edit: the agent gets the new words as its task, in the record and
    // in what the model is told.
    let mid = asked["id"].as_str().context("message id")?.to_string();
    let edited = client
        .post(
            &format!("/conversations/{chat}/messages/{mid}/edit"),
            json!({"text": "check the README instead"}),
        )
        .await?;
    assert_eq!(edited.status, 202, "{edited:?}");
    let run = run_id(&edited.body)?;
    client
        .wait_run(
            &chat,
            &run,
            &["done", "failed", "stopped", "interrupted"],
            LONG,
        )
        .await?;
    let bodies = bodies_of(&sim, &chat).await?;
    let told = bodies
        .last()
        .and_then(|b| b["messages"].as_array())
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .context("the edit's question")?;
    assert!(
        told.contains(&json!({"agent": agent, "task": "check the README instead"}).to_string()),
        "{told}"
    );

    // A send with a key answered before answers the same, whatever changed
    // since (saved agents switched off here).
    script(&sim, &chat, vec![json!({"tokens": 2})]).await?;
    let keyed = json!({"text": "/agent Code reviewer once more", "key": "k-agent-1"});
    let first = client.post(&path, keyed.clone()).await?;
    assert_eq!(first.status, 202, "{first:?}");
    switch(&client, &chat, &[]).await?;
    let replay = client.post(&path, keyed).await?;
    assert_eq!(replay.status, 202, "{replay:?}");
    assert_eq!(replay.body, first.body);
    Ok(())
}
