//! A chat's tool switches end to end: the real `chatd` and `engine-sim`.
//! Tool groups switched at `POST /conversations {switches}` and by `PUT
//! …/builtins {off, on}`, what `GET …/tools` and `GET /draft/tools` show,
//! and what the model is told and may do: a switched-off group's tools are
//! absent from the recorded requests and from the system block, a call to
//! one anyway is refused in its result and runs nothing, a sub-agent never
//! gets a group its parent switched off, Agents mode with sub-agents off is
//! one loop, and a fork keeps the switches. Every wait is bounded.

use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};
use tandem_tests::harness::{
    offered_tools, system_text, tool_results, wait_until, Chatd, Client, Sim,
};

use crate::scripted::{bodies_of, call, script, turn};

const WEB: [&str; 2] = ["web_search", "web_fetch"];
const FILES: [&str; 9] = [
    "list_files",
    "read_file",
    "write_file",
    "edit_file",
    "move_file",
    "delete_file",
    "grep",
    "search_files",
    "read_document",
];

async fn start(env: &[(&str, &str)]) -> anyhow::Result<(Sim, Chatd, Client)> {
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start(&sim.url(), env).await?;
    let client = chatd.client();
    Ok((sim, chatd, client))
}

/// Makes a chat with `body`; answers its id.
async fn create(client: &Client, body: Value) -> anyhow::Result<String> {
    let made = client.post("/conversations", body).await?;
    anyhow::ensure!(made.status == 201, "{made:?}");
    Ok(made.body["id"].as_str().context("chat id")?.to_string())
}

async fn builtins(client: &Client, chat: &str, body: Value) -> anyhow::Result<(u16, Value)> {
    let answer = client
        .call(
            reqwest::Method::PUT,
            &format!("/conversations/{chat}/builtins"),
            Some(body),
        )
        .await?;
    Ok((answer.status, answer.body))
}

async fn tools_of(client: &Client, chat: &str) -> anyhow::Result<Value> {
    let answer = client.get(&format!("/conversations/{chat}/tools")).await?;
    anyhow::ensure!(answer.status == 200, "{answer:?}");
    Ok(answer.body)
}

/// The line of group `name` in a tools view.
fn group(view: &Value, name: &str) -> Value {
    view["groups"]
        .as_array()
        .and_then(|g| g.iter().find(|g| g["name"] == name).cloned())
        .unwrap_or(Value::Null)
}

/// The line of tool `name` in a tools view.
fn tool(view: &Value, name: &str) -> Value {
    view["tools"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == name).cloned())
        .unwrap_or(Value::Null)
}

/// A view's `off`, sorted.
fn off_of(view: &Value) -> Vec<String> {
    let mut off: Vec<String> = view["off"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|w| w.as_str().map(str::to_string))
        .collect();
    off.sort();
    off
}

fn has(tools: &[String], name: &str) -> bool {
    tools.iter().any(|t| t == name)
}

async fn conversation_count(client: &Client) -> anyhow::Result<usize> {
    let listed = client.get("/conversations?limit=200").await?;
    anyhow::ensure!(listed.status == 200, "{listed:?}");
    Ok(listed.body["conversations"].as_array().map_or(0, Vec::len))
}

fn error_field(body: &Value) -> &str {
    body["error"]["field"].as_str().unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switches_given_at_create_hold_from_the_first_turn_and_a_bad_one_makes_no_chat(
) -> anyhow::Result<()> {
    let (sim, _chatd, client) = start(&[]).await?;
    let made = client
        .post(
            "/agents",
            json!({"name": "Helper", "instructions": "You help."}),
        )
        .await?;
    assert_eq!(made.status, 201, "{made:?}");

    let chat = create(
        &client,
        json!({"permission_mode": "auto",
               "switches": {"builtins_off": ["web"], "builtins_on": ["saved_agents"]}}),
    )
    .await?;
    let view = tools_of(&client, &chat).await?;
    assert_eq!(off_of(&view), ["web"], "{view}");
    let web = group(&view, "web");
    assert_eq!((&web["on"], &web["opt_in"]), (&json!(false), &json!(false)));
    let saved = group(&view, "saved_agents");
    assert_eq!(
        (&saved["on"], &saved["opt_in"]),
        (&json!(true), &json!(true))
    );
    assert_eq!(group(&view, "files")["on"], true, "{view}");
    for name in WEB {
        let line = tool(&view, name);
        assert_eq!(line["usable"], false, "{line}");
        assert_eq!(line["group"], "web", "{line}");
        assert!(
            line["reason"]
                .as_str()
                .is_some_and(|r| r.contains("Web group (web)") && r.contains("switched off")),
            "{line}"
        );
    }
    assert_eq!(tool(&view, "read_file")["usable"], true, "{view}");

    // Its very first request: no web tools, list_agents offered.
    script(&sim, &chat, vec![json!({"text": "Hello."})]).await?;
    turn(&client, &chat, "hi").await?;
    let bodies = bodies_of(&sim, &chat).await?;
    let first = offered_tools(bodies.first().context("a request")?);
    for name in WEB {
        assert!(!has(&first, name), "{name} offered: {first:?}");
    }
    assert!(has(&first, "read_file"), "{first:?}");
    assert!(has(&first, "list_agents"), "{first:?}");
    let system = system_text(&bodies[0]);
    assert!(
        system.contains("You cannot reach the web in this chat."),
        "{system}"
    );
    assert!(!system.contains("web_fetch"), "{system}");

    // A bad entry in any list refuses the whole request and makes no chat.
    let before = conversation_count(&client).await?;
    let cases = [
        (
            json!({"builtins_off": ["web", "webb"]}),
            "switches.builtins_off",
        ),
        (
            json!({"builtins_on": ["saved_agents", "everything"]}),
            "switches.builtins_on",
        ),
        (
            json!({"mcp_off": ["no-such-connector"]}),
            "switches.mcp_off",
        ),
        (
            json!({"skills_off": ["writing", "no-such-skill"]}),
            "switches.skills_off",
        ),
    ];
    for (switches, field) in cases {
        let refused = client
            .post(
                "/conversations",
                json!({"title": "never made", "switches": switches}),
            )
            .await?;
        assert_eq!(refused.status, 400, "{switches}: {refused:?}");
        assert_eq!(refused.body["error"]["type"], "bad_input", "{refused:?}");
        assert_eq!(error_field(&refused.body), field, "{refused:?}");
    }
    assert_eq!(conversation_count(&client).await?, before);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_files_and_web_off_takes_them_from_the_next_request_and_a_fork_keeps_it(
) -> anyhow::Result<()> {
    let (sim, chatd, client) = start(&[]).await?;
    let chat = client.create_chat_in("auto").await?;
    let workspace = chatd.data_dir().join("workspaces").join(&chat);
    std::fs::create_dir_all(&workspace)?;
    std::fs::write(workspace.join("notes.md"), "SECRET-NOTES-42")?;

    // As made: the file and web tools are offered and described.
    script(&sim, &chat, vec![json!({"text": "Hi."})]).await?;
    turn(&client, &chat, "hello").await?;
    let bodies = bodies_of(&sim, &chat).await?;
    let before = bodies.last().context("a request")?;
    let offered = offered_tools(before);
    assert!(
        has(&offered, "read_file") && has(&offered, "web_fetch"),
        "{offered:?}"
    );
    assert!(system_text(before).contains("read_file"));

    let (status, view) = builtins(&client, &chat, json!({"off": ["web", "files"]})).await?;
    assert_eq!(status, 200, "{view}");
    assert_eq!(off_of(&view), ["files", "web"], "{view}");
    assert_eq!(group(&view, "files")["on"], false, "{view}");
    assert_eq!(group(&view, "web")["on"], false, "{view}");
    let line = tool(&view, "read_file");
    assert_eq!(line["usable"], false, "{line}");
    assert!(
        line["reason"]
            .as_str()
            .is_some_and(|r| r.contains("Your files group (files)")),
        "{line}"
    );

    // The next turn: neither group offered nor told of; a call anyway is
    // refused by its group and reads nothing.
    script(
        &sim,
        &chat,
        vec![
            json!({"tool_calls": [call("read_file", json!({"path": "notes.md"}))]}),
            json!({"text": "I cannot read it."}),
        ],
    )
    .await?;
    let snapshot = turn(&client, &chat, "what do my notes say?").await?;
    let bodies = bodies_of(&sim, &chat).await?;
    let after = &bodies[bodies.len() - 2];
    let offered = offered_tools(after);
    for name in FILES.iter().chain(WEB.iter()) {
        assert!(!has(&offered, name), "{name} still offered: {offered:?}");
    }
    let system = system_text(after);
    for word in ["read_file", "web_fetch", "list_files", "write_file"] {
        assert!(!system.contains(word), "the block names {word}: {system}");
    }
    assert!(system.contains("You cannot reach the web in this chat."));
    let results = tool_results(&snapshot);
    let last = results.last().context("the refused call's result")?;
    assert!(
        last.contains("Your files group (files)") && last.contains("switched off"),
        "{last}"
    );
    assert!(!last.contains("SECRET-NOTES-42"), "{last}");

    // A word that is no group refuses the whole body: nothing changes.
    let (status, refused) = builtins(&client, &chat, json!({"off": ["shell", "webb"]})).await?;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["type"], "bad_input", "{refused}");
    assert_eq!(error_field(&refused), "off", "{refused}");
    let view = tools_of(&client, &chat).await?;
    assert_eq!(off_of(&view), ["files", "web"], "{view}");
    assert_eq!(group(&view, "shell")["on"], true, "{view}");

    // `on` alone leaves `off` as it was.
    let (status, view) = builtins(&client, &chat, json!({"on": ["saved_agents"]})).await?;
    assert_eq!(status, 200, "{view}");
    assert_eq!(off_of(&view), ["files", "web"], "{view}");
    assert_eq!(group(&view, "saved_agents")["on"], true, "{view}");

    // A fork keeps them.
    let last = snapshot["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["id"].as_str().map(str::to_string))
        .context("a message to fork from")?;
    let forked = client
        .post(
            &format!("/conversations/{chat}/fork"),
            json!({"from_message_id": last}),
        )
        .await?;
    assert_eq!(forked.status, 201, "{forked:?}");
    let fork = forked.body["id"].as_str().context("the fork's id")?;
    let fork_view = tools_of(&client, fork).await?;
    assert_eq!(off_of(&fork_view), ["files", "web"], "{fork_view}");
    assert_eq!(group(&fork_view, "saved_agents")["on"], true);
    script(&sim, fork, vec![json!({"text": "Forked."})]).await?;
    turn(&client, fork, "go on").await?;
    let fork_bodies = bodies_of(&sim, fork).await?;
    let offered = offered_tools(fork_bodies.last().context("the fork's request")?);
    assert!(
        !has(&offered, "read_file") && !has(&offered, "web_search"),
        "{offered:?}"
    );

    // `off: []` switches every group back on; `on` stays.
    let (status, view) = builtins(&client, &chat, json!({"off": []})).await?;
    assert_eq!(status, 200, "{view}");
    assert!(off_of(&view).is_empty(), "{view}");
    assert_eq!(group(&view, "saved_agents")["on"], true, "{view}");
    script(&sim, &chat, vec![json!({"text": "Back."})]).await?;
    turn(&client, &chat, "again").await?;
    let bodies = bodies_of(&sim, &chat).await?;
    let offered = offered_tools(bodies.last().context("a request")?);
    assert!(
        has(&offered, "read_file") && has(&offered, "web_fetch"),
        "{offered:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_named_both_off_and_on_is_refused_opt_in_or_not() -> anyhow::Result<()> {
    let (_sim, _chatd, client) = start(&[]).await?;
    let chat = client.create_chat().await?;
    let (status, refused) =
        builtins(&client, &chat, json!({"off": ["web"], "on": ["web"]})).await?;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(error_field(&refused), "on", "{refused}");

    // The same for the opt-in group: the body is refused and it stays off.
    let (status, answer) = builtins(
        &client,
        &chat,
        json!({"off": ["saved_agents"], "on": ["saved_agents"]}),
    )
    .await?;
    let view = tools_of(&client, &chat).await?;
    let line = group(&view, "saved_agents");
    assert_eq!(
        status,
        400,
        "saved_agents named both off and on was taken: off {:?}, saved_agents {line}",
        off_of(&answer)
    );
    assert_eq!(line["on"], false, "{line}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_connector_in_builtins_off_at_create_names_builtins_off() -> anyhow::Result<()> {
    let (_sim, _chatd, client) = start(&[]).await?;
    let before = conversation_count(&client).await?;
    let refused = client
        .post(
            "/conversations",
            json!({"switches": {"builtins_off": ["web", "mcp:no-such-connector"]}}),
        )
        .await?;
    assert_eq!(refused.status, 400, "{refused:?}");
    assert_eq!(conversation_count(&client).await?, before);
    assert_eq!(
        error_field(&refused.body),
        "switches.builtins_off",
        "the entry was in builtins_off: {refused:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_commands_switched_off_bash_is_not_offered_the_model_is_told_and_a_call_runs_nothing(
) -> anyhow::Result<()> {
    let (sim, chatd, client) = start(&[("QSE_CHATS_HOST_EXEC", "on")]).await?;
    let chat = client.create_chat_in("auto").await?;

    // On this box commands run: the group serves until switched off.
    let view = tools_of(&client, &chat).await?;
    let shell = group(&view, "shell");
    assert_eq!(
        (&shell["on"], &shell["usable"], &shell["tools"]),
        (&json!(true), &json!(true), &json!(["bash"])),
        "{shell}"
    );
    let (status, view) = builtins(&client, &chat, json!({"off": ["shell"]})).await?;
    assert_eq!(status, 200, "{view}");
    assert_eq!(off_of(&view), ["shell"]);
    let bash = tool(&view, "bash");
    assert_eq!(bash["usable"], false, "{bash}");
    assert!(
        bash["reason"]
            .as_str()
            .is_some_and(|r| r.contains("Run commands group (shell)")),
        "{bash}"
    );

    script(
        &sim,
        &chat,
        vec![
            json!({"tool_calls": [call("bash", json!({"command": "touch ran-anyway.txt"}))]}),
            json!({"text": "I could not run it."}),
        ],
    )
    .await?;
    let snapshot = turn(&client, &chat, "run the build").await?;
    let bodies = bodies_of(&sim, &chat).await?;
    let first = bodies.first().context("a request")?;
    let offered = offered_tools(first);
    assert!(!has(&offered, "bash"), "{offered:?}");
    assert!(has(&offered, "write_file"), "the rest stays: {offered:?}");
    let system = system_text(first);
    assert!(
        system.contains("The person switched commands off for this chat"),
        "{system}"
    );
    assert!(system.contains("There is NO command execution"), "{system}");
    assert!(!system.contains("You can run commands"), "{system}");

    let results = tool_results(&snapshot);
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(
        results[0].contains("Run commands group (shell)")
            && results[0].contains("switched off for this chat"),
        "{}",
        results[0]
    );
    let workspace = chatd.data_dir().join("workspaces").join(&chat);
    assert!(
        !workspace.join("ran-anyway.txt").exists(),
        "the refused command ran"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agent_never_gets_a_group_its_parent_switched_off() -> anyhow::Result<()> {
    let (sim, _chatd, client) = start(&[]).await?;
    let chat = create(
        &client,
        json!({"permission_mode": "auto", "switches": {"builtins_off": ["web"]}}),
    )
    .await?;
    // The sub-agent's own model tries web_fetch once, then answers.
    let task = "Fetch the page\n[sim tool_call=web_fetch args={\"url\":\"https://example.com/\"} \
                tool_steps=1 tokens=3]";
    script(
        &sim,
        &chat,
        vec![json!({"tool_calls": [call("spawn_agent", json!({"task": task, "wait": true}))]})],
    )
    .await?;
    turn(&client, &chat, "look it up").await?;

    let list = client
        .get(&format!("/conversations/{chat}/subagents"))
        .await?;
    assert_eq!(list.status, 200, "{list:?}");
    let rows = list.body["subagents"].as_array().context("subagents")?;
    assert_eq!(rows.len(), 1, "{list:?}");
    assert_eq!(rows[0]["state"], "done", "{list:?}");
    let sub = rows[0]["id"].as_str().context("id")?.to_string();

    let parent = bodies_of(&sim, &chat).await?;
    assert!(has(&offered_tools(&parent[0]), "spawn_agent"));
    let child = bodies_of(&sim, &sub).await?;
    anyhow::ensure!(!child.is_empty(), "the sub-agent made no request");
    for body in &child {
        let offered = offered_tools(body);
        for name in WEB {
            assert!(
                !has(&offered, name),
                "the sub-agent got {name}: {offered:?}"
            );
        }
        assert!(has(&offered, "read_file"), "{offered:?}");
        assert!(
            system_text(body).contains("You cannot reach the web in this chat."),
            "{}",
            system_text(body)
        );
    }
    // Its call anyway was refused by the parent's switch.
    let own = client.snapshot(&sub).await?;
    let results = tool_results(&own);
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(
        results[0].contains("Web group (web)") && results[0].contains("switched off"),
        "{}",
        results[0]
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_sub_agents_off_agents_mode_is_one_loop_and_slash_agent_is_refused(
) -> anyhow::Result<()> {
    let (sim, _chatd, client) = start(&[]).await?;
    let made = client
        .post(
            "/agents",
            json!({"name": "Reviewer", "instructions": "You review drafts."}),
        )
        .await?;
    assert_eq!(made.status, 201, "{made:?}");

    // Agents mode with every switch at its default plans with `task`.
    let planner = create(
        &client,
        json!({"permission_mode": "auto", "settings": {"agents": true}}),
    )
    .await?;
    let view = tools_of(&client, &planner).await?;
    assert_eq!(tool(&view, "task")["usable"], true, "{view}");
    assert_eq!(tool(&view, "write_file")["usable"], false, "{view}");

    let chat = create(
        &client,
        json!({"permission_mode": "auto", "settings": {"agents": true},
               "switches": {"builtins_off": ["subagents"], "builtins_on": ["saved_agents"]}}),
    )
    .await?;
    let view = tools_of(&client, &chat).await?;
    assert_eq!(tool(&view, "task")["usable"], false, "{view}");
    assert_eq!(tool(&view, "write_file")["usable"], true, "{view}");
    script(&sim, &chat, vec![json!({"text": "Done alone."})]).await?;
    turn(&client, &chat, "write the report").await?;
    let bodies = bodies_of(&sim, &chat).await?;
    let body = bodies.first().context("a request")?;
    let offered = offered_tools(body);
    for name in ["task", "spawn_agent"] {
        assert!(!has(&offered, name), "{name} offered: {offered:?}");
    }
    assert!(has(&offered, "write_file"), "one loop writes: {offered:?}");
    assert!(!system_text(body).contains("# Agents mode"));

    let refused = client
        .post(
            &format!("/conversations/{chat}/messages"),
            json!({"text": "/agent Reviewer check the draft"}),
        )
        .await?;
    assert_eq!(refused.status, 400, "{refused:?}");
    assert_eq!(error_field(&refused.body), "agent", "{refused:?}");
    assert!(
        refused.body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("sub-agents are switched off")),
        "{refused:?}"
    );
    let snapshot = client.snapshot(&chat).await?;
    let users = snapshot["messages"]
        .as_array()
        .map_or(0, |m| m.iter().filter(|m| m["role"] == "user").count());
    assert_eq!(users, 1, "the refused message was stored");

    // Saved agents cannot serve without sub-agents (the view says so), so
    // list_agents, which lists agents to start, is neither usable nor offered.
    let saved = group(&view, "saved_agents");
    assert_eq!(saved["usable"], false, "{saved}");
    let list = tool(&view, "list_agents");
    assert_eq!(list["usable"], false, "the group is not usable: {list}");
    assert!(
        !has(&offered, "list_agents"),
        "list_agents offered with sub-agents off: {offered:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draft_tools_show_the_defaults_before_a_chat_exists() -> anyhow::Result<()> {
    let (_sim, _chatd, client) = start(&[]).await?;
    // The engine's models are known (a model check needs them).
    let model = wait_until(
        "chatd to list the engine's models",
        Duration::from_secs(30),
        || async {
            let caps = client.get("/capabilities").await.ok()?;
            caps.body["engine"]["models"][0]["id"]
                .as_str()
                .map(str::to_string)
        },
    )
    .await?;

    let draft = client.get("/draft/tools").await?;
    assert_eq!(draft.status, 200, "{draft:?}");
    let view = &draft.body;
    assert!(off_of(view).is_empty(), "{view}");
    for name in ["shell", "files", "web", "media", "subagents", "triggers"] {
        let line = group(view, name);
        assert_eq!(
            (&line["on"], &line["opt_in"]),
            (&json!(true), &json!(false)),
            "{name}: {line}"
        );
    }
    let saved = group(view, "saved_agents");
    assert_eq!(
        (&saved["on"], &saved["opt_in"]),
        (&json!(false), &json!(true)),
        "{saved}"
    );
    assert_eq!(group(view, "triggers")["usable"], false, "{view}");
    assert_eq!(tool(view, "web_fetch")["usable"], true, "{view}");
    assert_eq!(tool(view, "list_agents")["usable"], false, "{view}");

    // A chat made now has what the draft showed.
    let chat = client.create_chat().await?;
    let made = tools_of(&client, &chat).await?;
    let ons = |v: &Value| -> Vec<(String, bool)> {
        v["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|g| {
                (
                    g["name"].as_str().unwrap_or("").to_string(),
                    g["on"] == true,
                )
            })
            .collect()
    };
    assert_eq!(ons(view), ons(&made));

    let named = client.get(&format!("/draft/tools?model={model}")).await?;
    assert_eq!(named.status, 200, "{named:?}");
    let nope = client.get("/draft/tools?agent_id=nope").await?;
    assert_eq!(nope.status, 404, "{nope:?}");
    let unknown = client.get("/draft/tools?model=no-such-model").await?;
    assert_eq!(unknown.status, 400, "{unknown:?}");
    assert_eq!(error_field(&unknown.body), "model", "{unknown:?}");
    Ok(())
}
