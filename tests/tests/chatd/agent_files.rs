//! Saved agents beyond their CRUD, end to end on the real `chatd` and
//! `engine-sim`: the agent file carried from one chatd to another (what it
//! holds, what an import changes and says), the starter templates, and an
//! agent's run history. Every wait is on a condition with a bound.

use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};
use tandem_tests::harness::{run_id, Chatd, Client, Sim};

const LONG: Duration = Duration::from_secs(60);

async fn start(sim_args: &[&str]) -> anyhow::Result<(Sim, Chatd, Client)> {
    let mut args = vec!["--tokens-per-second", "0"];
    args.extend_from_slice(sim_args);
    let sim = Sim::start(&args)?;
    let chatd = Chatd::start(&sim.url(), &[]).await?;
    let client = chatd.client();
    Ok((sim, chatd, client))
}

async fn agent_names(client: &Client) -> anyhow::Result<Vec<String>> {
    let listed = client.get("/agents").await?;
    anyhow::ensure!(listed.status == 200, "{listed:?}");
    Ok(listed.body["agents"]
        .as_array()
        .context("agents")?
        .iter()
        .filter_map(|a| a["name"].as_str().map(str::to_string))
        .collect())
}

/// An import's warnings, one a line.
fn warnings(answer: &Value) -> String {
    answer["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The text of a GET, with its headers (the export is a download).
async fn download(client: &Client, path: &str) -> anyhow::Result<(u16, String, String)> {
    let answer = reqwest::Client::new()
        .get(client.api(path))
        .header("x-forward-key", client.key())
        .send()
        .await?;
    let status = answer.status().as_u16();
    let disposition = answer
        .headers()
        .get("content-disposition")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    Ok((status, disposition, answer.text().await?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_exported_from_one_chatd_is_imported_on_another() -> anyhow::Result<()> {
    let (_sim, _chatd, here) = start(&["--extra-model", "m-big"]).await?;
    let made = here
        .post(
            "/agents",
            json!({"name": "Reviewer", "description": "Reviews drafts",
                   "instructions": "Be brief.", "model": "m-big",
                   "tools": ["read_file", "grep"], "settings": {"temperature": 0.3}}),
        )
        .await?;
    assert_eq!(made.status, 201, "{made:?}");
    let id = made.body["id"].as_str().context("id")?.to_string();

    let (status, disposition, text) = download(&here, &format!("/agents/{id}/export")).await?;
    assert_eq!(status, 200, "{text}");
    assert_eq!(disposition, "attachment; filename=\"reviewer.agent.json\"");
    let file: Value = serde_json::from_str(&text)?;
    assert_eq!(file["kind"], "tandem-agent");
    assert_eq!(file["version"], 1);
    for gone in ["id", "created", "updated", "folder"] {
        assert!(file.get(gone).is_none(), "the file holds {gone}: {file}");
    }
    assert_eq!(file["tools"], json!(["read_file", "grep"]));

    // Another box that serves m-big: the same agent, a new id, no warning.
    let (_sim2, _chatd2, there) = start(&["--extra-model", "m-big"]).await?;
    let imported = there.post("/agents/import", file.clone()).await?;
    assert_eq!(imported.status, 201, "{imported:?}");
    let agent = &imported.body["agent"];
    assert_ne!(agent["id"], id.as_str());
    for field in ["name", "description", "instructions", "model", "tools"] {
        assert_eq!(agent[field], made.body[field], "{field}");
    }
    assert_eq!(agent["settings"]["temperature"], 0.3, "{agent}");
    assert_eq!(imported.body["warnings"], json!([]));

    // Again: a new agent under a free name, said in a warning.
    let again = there.post("/agents/import", file.clone()).await?;
    assert_eq!(again.status, 201, "{again:?}");
    assert_eq!(again.body["agent"]["name"], "Reviewer (2)");
    let said = warnings(&again.body);
    assert!(said.contains("\"Reviewer\" is in use"), "{said}");

    // A box without the model, a tool and a connector it lacks: dropped, said.
    let mut other = file.clone();
    other["model"] = json!("m-gone");
    other["tools"] = json!(["read_file", "teleport", "connector:mc_nowhere"]);
    let dropped = there.post("/agents/import", other).await?;
    assert_eq!(dropped.status, 201, "{dropped:?}");
    assert_eq!(dropped.body["agent"]["model"], "");
    assert_eq!(dropped.body["agent"]["tools"], json!(["read_file"]));
    let said = warnings(&dropped.body);
    for named in ["m-gone", "teleport", "connector:mc_nowhere"] {
        assert!(said.contains(named), "{named}: {said}");
    }

    // Refused, nothing stored: not an agent file, version 1 with a folder,
    // a field past its limit.
    let before = agent_names(&there).await?;
    let mut wrong_kind = file.clone();
    wrong_kind["kind"] = json!("localai-agent");
    let mut with_folder = file.clone();
    with_folder["folder"] = json!({"path": "/notes", "mode": "read"});
    let mut long_name = file.clone();
    long_name["name"] = json!("n".repeat(101));
    for (body, field) in [
        (wrong_kind, "kind"),
        (with_folder, "folder"),
        (long_name, "name"),
        (
            json!({"kind": "tandem-agent", "version": 1, "name": "x", "id": "a_1"}),
            "",
        ),
    ] {
        let refused = there.post("/agents/import", body).await?;
        assert_eq!(refused.status, 400, "{refused:?}");
        if !field.is_empty() {
            assert_eq!(refused.body["error"]["field"], field, "{refused:?}");
        }
    }
    assert_eq!(agent_names(&there).await?, before);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_starter_template_saves_as_an_agent_that_grants_nothing() -> anyhow::Result<()> {
    let (_sim, _chatd, client) = start(&[]).await?;
    let listed = client.get("/agents/templates").await?;
    assert_eq!(listed.status, 200, "{listed:?}");
    let templates = listed.body["templates"].as_array().context("templates")?;
    let ids: Vec<&str> = templates.iter().filter_map(|t| t["id"].as_str()).collect();
    assert_eq!(ids, ["research", "reviewer", "digest", "editor"]);
    assert!(templates.iter().all(|t| t["tools"] == json!([])));

    let made = client
        .post("/agents/templates/reviewer/create", json!({}))
        .await?;
    assert_eq!(made.status, 201, "{made:?}");
    assert_eq!(made.body["agent"]["name"], "Code reviewer");
    assert_eq!(made.body["agent"]["tools"], json!([]));
    assert!(made.body["agent"]["instructions"]
        .as_str()
        .is_some_and(|t| !t.is_empty()));
    let named = client
        .post(
            "/agents/templates/reviewer/create",
            json!({"name": "code REVIEWER"}),
        )
        .await?;
    assert_eq!(named.status, 201, "{named:?}");
    assert_eq!(named.body["agent"]["name"], "code REVIEWER (2)");

    let unknown = client
        .post("/agents/templates/nothing/create", json!({}))
        .await?;
    assert_eq!(unknown.status, 404, "{unknown:?}");
    assert_eq!(agent_names(&client).await?.len(), 2);

    // A chat made with it is offered no tool.
    let id = made.body["agent"]["id"].as_str().context("id")?;
    let chat = client
        .post("/conversations", json!({"agent_id": id}))
        .await?;
    let chat = chat.body["id"].as_str().context("chat")?;
    let tools = client.get(&format!("/conversations/{chat}/tools")).await?;
    let usable: Vec<&Value> = tools.body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["usable"] == true)
        .collect();
    assert!(usable.is_empty(), "{usable:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_run_history_lists_its_chats_newest_turn_first() -> anyhow::Result<()> {
    let (sim, _chatd, client) = start(&[]).await?;
    let made = client.post("/agents", json!({"name": "Digest"})).await?;
    let id = made.body["id"].as_str().context("id")?.to_string();
    let make = |origin: &'static str| {
        let client = &client;
        let id = id.clone();
        async move {
            let chat = client
                .post("/conversations", json!({"agent_id": id, "origin": origin}))
                .await?;
            anyhow::ensure!(chat.status == 201, "{chat:?}");
            Ok::<String, anyhow::Error>(chat.body["id"].as_str().context("chat")?.to_string())
        }
    };
    let by_person = make("user").await?;
    let by_trigger = make("trigger").await?;
    let plain = client.create_chat().await?;
    let run = run_id(&client.send(&by_person, "today? [sim tokens=3]").await?)?;
    let record = client
        .wait_run(
            &by_person,
            &run,
            &["done", "failed", "stopped", "interrupted"],
            LONG,
        )
        .await?;
    assert_eq!(record["status"], "done", "{record}");

    let history = client.get(&format!("/agents/{id}/runs")).await?;
    assert_eq!(history.status, 200, "{history:?}");
    let runs = history.body["runs"].as_array().context("runs")?;
    let ids: Vec<&str> = runs
        .iter()
        .filter_map(|r| r["conversation_id"].as_str())
        .collect();
    assert_eq!(
        ids,
        [by_person.as_str(), by_trigger.as_str()],
        "{}",
        history.body
    );
    assert!(!ids.contains(&plain.as_str()));
    assert_eq!(runs[0]["origin"], "user");
    assert_eq!(runs[0]["running"], false);
    assert_eq!(runs[0]["last_status"], "done");
    assert!(runs[0]["last_turn"].is_string());
    assert_eq!(runs[1]["origin"], "trigger");
    assert!(runs[1].get("last_turn").is_none(), "{}", runs[1]);
    assert_eq!(
        (
            &history.body["total"],
            &history.body["running"],
            &history.body["failed"]
        ),
        (&json!(2), &json!(0), &json!(0))
    );
    let unknown = client.get("/agents/a_nothing/runs").await?;
    assert_eq!(unknown.status, 404, "{unknown:?}");

    // A chat's sub-agent runs as its agent too, and goes with it to the trash.
    sim.post(
        "/sim/faults",
        json!({"session": format!("chat-{by_person}"), "next": [{"tool_calls": [
            {"name": "spawn_agent", "arguments": {"task": "Sum it up\n[sim tokens=2]"}}
        ]}]}),
    )
    .await?;
    let run = run_id(&client.send(&by_person, "with a helper").await?)?;
    client
        .wait_run(
            &by_person,
            &run,
            &["done", "failed", "stopped", "interrupted"],
            LONG,
        )
        .await?;
    let history = client.get(&format!("/agents/{id}/runs")).await?;
    assert_eq!(history.body["total"], 3, "{}", history.body);
    assert!(history.body["runs"]
        .as_array()
        .is_some_and(|r| r.iter().any(|r| r["kind"] == "subagent")));
    let trashed = client
        .call(
            reqwest::Method::DELETE,
            &format!("/conversations/{by_person}"),
            None,
        )
        .await?;
    assert!(trashed.status < 300, "{trashed:?}");
    let history = client.get(&format!("/agents/{id}/runs")).await?;
    let left: Vec<&str> = history.body["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["conversation_id"].as_str())
        .collect();
    assert_eq!(left, [by_trigger.as_str()], "{}", history.body);
    Ok(())
}
