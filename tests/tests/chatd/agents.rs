//! Saved agents end to end: the real `chatd` and `engine-sim`; CRUD under
//! `/agents`, its refusals, and a chat made with an agent (its model, its
//! instructions in the system message, only its tools offered). Every wait is
//! on a condition with a bound.

use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};
use tandem_tests::harness::{Chatd, Client, Sim};

const QUICK: Duration = Duration::from_secs(20);

async fn start() -> anyhow::Result<(Sim, Chatd, Client)> {
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start(&sim.url(), &[]).await?;
    let client = chatd.client();
    Ok((sim, chatd, client))
}

async fn agents(client: &Client) -> anyhow::Result<Vec<Value>> {
    let listed = client.get("/agents").await?;
    anyhow::ensure!(listed.status == 200, "{listed:?}");
    Ok(listed.body["agents"]
        .as_array()
        .context("agents array")?
        .clone())
}

async fn conversation_count(client: &Client) -> anyhow::Result<usize> {
    let listed = client.get("/conversations").await?;
    anyhow::ensure!(listed.status == 200, "{listed:?}");
    Ok(listed.body["conversations"]
        .as_array()
        .context("conversations")?
        .len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_round_trip_through_crud() -> anyhow::Result<()> {
    let (_sim, _chatd, client) = start().await?;
    assert!(agents(&client).await?.is_empty());

    let made = client
        .post(
            "/agents",
            json!({"name": "Reviewer", "instructions": "Review the code.", "tools": ["read_file", "grep"]}),
        )
        .await?;
    assert_eq!(made.status, 201, "{made:?}");
    let agent = made.body.clone();
    let id = agent["id"].as_str().context("id")?.to_string();
    assert!(id.starts_with("a_"), "{id}");
    assert_eq!(agent["name"], "Reviewer");
    assert_eq!(agent["instructions"], "Review the code.");
    assert_eq!(agent["model"], "");
    assert_eq!(agent["tools"], json!(["read_file", "grep"]));
    assert!(agent["created"].is_string() && agent["updated"].is_string());

    let shown = client.get(&format!("/agents/{id}")).await?;
    assert_eq!(shown.status, 200);
    assert_eq!(shown.body, agent);
    assert_eq!(agents(&client).await?, vec![agent.clone()]);

    // PUT replaces the whole agent: tools left out means every tool.
    let replaced = client
        .call(
            reqwest::Method::PUT,
            &format!("/agents/{id}"),
            Some(json!({"name": "Writer", "instructions": "", "model": "m-big"})),
        )
        .await?;
    assert_eq!(replaced.status, 200, "{replaced:?}");
    assert_eq!(replaced.body["id"], id.as_str());
    assert_eq!(replaced.body["name"], "Writer");
    assert_eq!(replaced.body["instructions"], "");
    assert_eq!(replaced.body["model"], "m-big");
    assert_eq!(replaced.body["tools"], Value::Null);
    assert_eq!(replaced.body["created"], agent["created"]);

    // Capabilities list the agents by id and name.
    let caps = client.get("/capabilities").await?;
    assert_eq!(
        caps.body["defaults"]["agents"],
        json!([{"id": id, "name": "Writer"}])
    );

    let deleted = client
        .call(reqwest::Method::DELETE, &format!("/agents/{id}"), None)
        .await?;
    assert_eq!(deleted.status, 204, "{deleted:?}");
    assert!(agents(&client).await?.is_empty());
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let gone = client.call(method, &format!("/agents/{id}"), None).await?;
        assert_eq!(gone.status, 404, "{gone:?}");
        assert_eq!(gone.body["error"]["type"], "not_found");
    }
    let put_gone = client
        .call(
            reqwest::Method::PUT,
            &format!("/agents/{id}"),
            Some(json!({"name": "x"})),
        )
        .await?;
    assert_eq!(put_gone.status, 404, "{put_gone:?}");

    // A chat made with the deleted agent's id is refused.
    let refused = client
        .post("/conversations", json!({"agent_id": id}))
        .await?;
    assert_eq!(refused.status, 404, "{refused:?}");
    assert_eq!(refused.body["error"]["field"], "agent_id");
    assert_eq!(conversation_count(&client).await?, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_agent_bodies_name_the_field_and_store_nothing() -> anyhow::Result<()> {
    let (_sim, _chatd, client) = start().await?;
    let kept = client
        .post(
            "/agents",
            json!({"name": "Kept", "instructions": "Be brief."}),
        )
        .await?;
    assert_eq!(kept.status, 201, "{kept:?}");
    let kept_id = kept.body["id"].as_str().context("id")?.to_string();

    let cases: Vec<(Value, &str)> = vec![
        (json!({}), "name"),
        (json!({"name": ""}), "name"),
        (json!({"name": "x".repeat(101)}), "name"),
        (json!({"name": "a\nb"}), "name"),
        (
            json!({"name": "ok", "instructions": "é".repeat(16_001)}),
            "instructions",
        ),
        (json!({"name": "ok", "model": "m".repeat(201)}), "model"),
        (
            json!({"name": "ok", "tools": ["read_file", "no_such_tool"]}),
            "tools",
        ),
        (json!({"name": "ok", "tools": "read_file"}), "tools"),
    ];
    for (body, field) in &cases {
        let answer = client.post("/agents", body.clone()).await?;
        assert_eq!(answer.status, 400, "{body}: {answer:?}");
        assert_eq!(answer.body["error"]["type"], "bad_input", "{answer:?}");
        assert_eq!(answer.body["error"]["field"], *field, "{body}: {answer:?}");
        let message = answer.body["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains(field), "{message}");
        // The same body on PUT changes nothing.
        let put = client
            .call(
                reqwest::Method::PUT,
                &format!("/agents/{kept_id}"),
                Some(body.clone()),
            )
            .await?;
        assert_eq!(put.status, 400, "{body}: {put:?}");
    }
    let unknown = client
        .post("/agents", json!({"name": "ok", "tools": ["no_such_tool"]}))
        .await?;
    assert!(
        unknown.body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no_such_tool")),
        "{unknown:?}"
    );
    // The limits themselves are accepted.
    let edge = client
        .post(
            "/agents",
            json!({"name": "x".repeat(100), "instructions": "é".repeat(16_000), "model": "m".repeat(200), "tools": []}),
        )
        .await?;
    assert_eq!(edge.status, 201, "{edge:?}");
    assert_eq!(edge.body["tools"], json!([]));

    let listed = agents(&client).await?;
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0], kept.body, "the kept agent is unchanged");

    // At most 100 agents.
    for i in 2..100 {
        let made = client
            .post("/agents", json!({"name": format!("a{i}")}))
            .await?;
        assert_eq!(made.status, 201, "{made:?}");
    }
    let full = client
        .post("/agents", json!({"name": "one too many"}))
        .await?;
    assert_eq!(full.status, 409, "{full:?}");
    assert_eq!(full.body["error"]["type"], "too_many_agents");
    assert_eq!(agents(&client).await?.len(), 100);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_made_with_an_agent_runs_with_its_model_instructions_and_tools() -> anyhow::Result<()>
{
    let (sim, _chatd, client) = start().await?;
    let made = client
        .post(
            "/agents",
            json!({
                "name": "Reader",
                "instructions": "You are the Reader agent. Only read.",
                "model": "agent-model-7",
                "tools": ["read_file", "list_files"],
            }),
        )
        .await?;
    assert_eq!(made.status, 201, "{made:?}");
    let agent_id = made.body["id"].as_str().context("id")?.to_string();

    // Unknown agent: 404 naming agent_id, no conversation made.
    let unknown = client
        .post("/conversations", json!({"agent_id": "a_nope"}))
        .await?;
    assert_eq!(unknown.status, 404, "{unknown:?}");
    assert_eq!(unknown.body["error"]["type"], "not_found");
    assert_eq!(unknown.body["error"]["field"], "agent_id");
    assert!(unknown.body["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("no agent with id")));
    assert_eq!(conversation_count(&client).await?, 0);

    let chat = client
        .post("/conversations", json!({"agent_id": agent_id}))
        .await?;
    assert_eq!(chat.status, 201, "{chat:?}");
    assert_eq!(chat.body["model"], "agent-model-7");
    assert_eq!(chat.body["agent_id"], agent_id.as_str());
    let chat_id = chat.body["id"].as_str().context("chat id")?.to_string();

    // A model named in the body wins over the agent's.
    let named = client
        .post(
            "/conversations",
            json!({"agent_id": agent_id, "model": "mine"}),
        )
        .await?;
    assert_eq!(named.body["model"], "mine", "{named:?}");

    let sent = client.send(&chat_id, "hello").await?;
    let run_id = sent["run_id"].as_str().context("run id")?.to_string();
    let run = client
        .wait_run(&chat_id, &run_id, &["done", "failed"], QUICK)
        .await?;
    assert_eq!(run["status"], "done", "{run}");

    let session = format!("chat-{chat_id}");
    let requests = sim.requests().await?;
    let first = requests
        .iter()
        .find(|r| r["session_id"] == session.as_str())
        .context("the chat's first engine request")?;
    let body = &first["body"];
    assert_eq!(body["model"], "agent-model-7");
    let system = body["messages"][0].clone();
    assert_eq!(system["role"], "system", "{system}");
    assert!(system["content"]
        .as_str()
        .is_some_and(|c| c.contains("You are the Reader agent. Only read.")));
    let mut offered: Vec<&str> = body["tools"]
        .as_array()
        .context("tools")?
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    offered.sort_unstable();
    assert_eq!(offered, vec!["list_files", "read_file"]);
    Ok(())
}

/// A call to a tool the agent does not grant (the model names it anyway) is
/// answered with a refusal and never runs; a deleted agent leaves the chat
/// with every tool and no instructions at its next run, and its model is
/// told the agent was deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ungranted_call_is_refused_and_a_deleted_agent_is_dropped() -> anyhow::Result<()> {
    let (sim, chatd, client) = start().await?;
    let made = client
        .post(
            "/agents",
            json!({"name": "Reader", "instructions": "READER-INSTRUCTIONS", "tools": ["read_file"]}),
        )
        .await?;
    let agent_id = made.body["id"].as_str().context("id")?.to_string();
    let chat = client
        .post(
            "/conversations",
            json!({"agent_id": agent_id, "permission_mode": "yolo"}),
        )
        .await?;
    assert_eq!(chat.status, 201, "{chat:?}");
    let chat_id = chat.body["id"].as_str().context("chat id")?.to_string();
    sim.faults(json!([
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "x.txt", "content": "no"}}]},
        {"tokens": 3},
    ]))
    .await?;
    let sent = client.send(&chat_id, "write it").await?;
    let run_id = sent["run_id"].as_str().context("run id")?.to_string();
    let run = client
        .wait_run(&chat_id, &run_id, &["done", "failed"], QUICK)
        .await?;
    assert_eq!(run["status"], "done", "{run}");
    let results = tandem_tests::harness::tool_results(&client.snapshot(&chat_id).await?);
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(
        results[0].contains("may not use `write_file`"),
        "{}",
        results[0]
    );
    assert!(!chatd
        .data_dir()
        .join("workspaces")
        .join(&chat_id)
        .join("x.txt")
        .exists());

    let deleted = client
        .call(
            reqwest::Method::DELETE,
            &format!("/agents/{agent_id}"),
            None,
        )
        .await?;
    assert_eq!(deleted.status, 204);
    let before = sim.requests().await?.len();
    let sent = client.send(&chat_id, "again").await?;
    let run_id = sent["run_id"].as_str().context("run id")?.to_string();
    client
        .wait_run(&chat_id, &run_id, &["done", "failed"], QUICK)
        .await?;
    let requests = sim.requests().await?;
    let last = &requests
        .get(before..)
        .and_then(|r| r.first())
        .context("a new request")?["body"];
    let system = last["messages"][0]["content"].as_str().unwrap_or("");
    assert!(!system.contains("READER-INSTRUCTIONS"), "{system}");
    assert!(
        system.contains("The saved agent this chat was made with was deleted"),
        "the model is told: {system}"
    );
    assert!(last["tools"].as_array().is_some_and(|t| t.len() > 1));
    Ok(())
}
