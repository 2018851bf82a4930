//! A saved agent run as a sub-agent never reaches an MCP connector its
//! parent's agent does not name, even one whose tools share the names of
//! the parent's: the real chatd, engine-sim scripted per chat, the fake MCP
//! server saved as two connectors.

use crate::setup::{connector, start, QUICK};
use anyhow::Context;
use serde_json::{json, Value};
use tandem_tests::harness::{offered_tools, run_id, tool_results};
use tandem_tests::mcpservers::FakeMcp;

async fn agent(client: &tandem_tests::harness::Client, body: Value) -> anyhow::Result<String> {
    let made = client.post("/agents", body).await?;
    anyhow::ensure!(made.status == 201, "{made:?}");
    Ok(made.body["id"].as_str().context("agent id")?.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_agent_sub_agent_gets_no_connector_its_parents_agent_lacks() -> anyhow::Result<()> {
    let fake = FakeMcp::start(None).await?;
    let (sim, _chatd, client) = start().await?;
    let alpha = connector(&client, "Alpha", &fake.url("/mcp"), None).await?;
    let beta = connector(&client, "Beta", &fake.url("/mcp"), None).await?;
    let parent_agent = agent(
        &client,
        json!({"name": "Parent", "tools": ["read_file", "spawn_agent", format!("connector:{alpha}")]}),
    )
    .await?;
    agent(
        &client,
        json!({"name": "Other", "tools": ["read_file", format!("connector:{beta}")]}),
    )
    .await?;
    let made = client
        .post(
            "/conversations",
            json!({"agent_id": parent_agent, "permission_mode": "auto"}),
        )
        .await?;
    anyhow::ensure!(made.status == 201, "{made:?}");
    let chat = made.body["id"].as_str().context("chat id")?.to_string();
    let on = client
        .call(
            reqwest::Method::PUT,
            &format!("/conversations/{chat}/builtins"),
            Some(json!({"on": ["saved_agents"]})),
        )
        .await?;
    anyhow::ensure!(on.status == 200, "{on:?}");
    sim.post(
        "/sim/faults",
        json!({"session": format!("chat-{chat}"), "next": [{"tool_calls": [
            {"name": "spawn_agent", "arguments": {"task": "Look it up\n[sim tokens=2]", "agent": "Other"}}
        ]}]}),
    )
    .await?;
    let run = run_id(&client.send(&chat, "ask the other one").await?)?;
    let record = client
        .wait_run(
            &chat,
            &run,
            &["done", "failed", "stopped", "interrupted"],
            QUICK,
        )
        .await?;
    assert_eq!(record["status"], "done", "{record}");
    let results = tool_results(&client.snapshot(&chat).await?);
    assert!(
        results.len() == 1 && !results[0].starts_with("refused"),
        "{results:?}"
    );

    let listed = client
        .get(&format!("/conversations/{chat}/subagents"))
        .await?;
    let sub = listed.body["subagents"][0]["id"]
        .as_str()
        .context("the sub-agent")?
        .to_string();
    let requests = sim.requests().await?;
    let offered = |session: String| -> Vec<Vec<String>> {
        requests
            .iter()
            .filter(|r| r["session_id"] == session.as_str())
            .map(|r| offered_tools(&r["body"]))
            .collect()
    };
    let parent = offered(format!("chat-{chat}"));
    assert!(
        parent
            .first()
            .is_some_and(|t| t.iter().any(|n| n == "lookup")),
        "the parent has Alpha's lookup: {parent:?}"
    );
    let child = offered(format!("chat-{sub}"));
    assert_eq!(
        child.first().cloned().unwrap_or_default(),
        ["read_file"],
        "Beta's lookup shares a name with Alpha's, and the parent's agent does not name Beta"
    );
    Ok(())
}
