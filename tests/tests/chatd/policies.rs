//! Plan mode and tool policies end to end: the real `chatd` and
//! `engine-sim`. Plan mode offers the read tools only and refuses a call
//! to another; a box's or a chat's policy (`always`, `ask`, `never`) over
//! the chat's permission mode: `never` is not offered and is refused,
//! `ask` raises a card in every mode (yolo too) and is refused in a run
//! nobody watches, `always` runs without a card even in ask mode, and a
//! chat's own beats the box's. `PATCH …/settings` sets the mode and the
//! settings in one write, and a bad body changes nothing. Every wait is
//! bounded.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use reqwest::Method;
use serde_json::{json, Value};
use tandem_tests::harness::{
    offered_tools, run_id, system_text, tool_results, wait_until, Answer, Chatd, Client,
    EventStream, Sim, SseEvent,
};

use crate::scripted::{bodies_of, call, script, turn, LONG};

const QUICK: Duration = Duration::from_secs(30);
/// The words of the plan-mode refusal (`PLAN_REASON`).
const PLAN_WORDS: &str = "the chat is in plan mode, which offers the read tools only";
/// The tools plan mode never offers.
const CHANGES: [&str; 6] = [
    "write_file",
    "edit_file",
    "move_file",
    "delete_file",
    "bash",
    "spawn_agent",
];

async fn start(env: &[(&str, &str)]) -> anyhow::Result<(Sim, Chatd, Client)> {
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start(&sim.url(), env).await?;
    let client = chatd.client();
    Ok((sim, chatd, client))
}

/// Makes a chat with `body`; answers its id and its workspace (made).
async fn create(client: &Client, chatd: &Chatd, body: Value) -> anyhow::Result<(String, PathBuf)> {
    let made = client.post("/conversations", body).await?;
    anyhow::ensure!(made.status == 201, "{made:?}");
    let id = made.body["id"].as_str().context("chat id")?.to_string();
    let workspace = chatd.data_dir().join("workspaces").join(&id);
    std::fs::create_dir_all(&workspace)?;
    Ok((id, workspace))
}

async fn put(client: &Client, path: &str, body: Value) -> anyhow::Result<Answer> {
    client.call(Method::PUT, path, Some(body)).await
}

async fn patch(client: &Client, path: &str, body: Value) -> anyhow::Result<Answer> {
    client.call(Method::PATCH, path, Some(body)).await
}

/// `PUT /tools/policies {policies}`, which must be taken.
async fn box_policies(client: &Client, policies: Value) -> anyhow::Result<Value> {
    let set = put(client, "/tools/policies", json!({ "policies": policies })).await?;
    anyhow::ensure!(set.status == 200, "{set:?}");
    Ok(set.body)
}

fn has(tools: &[String], name: &str) -> bool {
    tools.iter().any(|t| t == name)
}

fn error_field(answer: &Answer) -> &str {
    answer.body["error"]["field"].as_str().unwrap_or("")
}

fn events_of<'a>(events: &'a [SseEvent], kind: &str) -> Vec<&'a SseEvent> {
    events.iter().filter(|e| e.kind == kind).collect()
}

/// The line of tool `name` in a `GET …/tools` view.
async fn tool_line(client: &Client, chat: &str, name: &str) -> anyhow::Result<Value> {
    let view = client.get(&format!("/conversations/{chat}/tools")).await?;
    anyhow::ensure!(view.status == 200, "{view:?}");
    Ok(view.body["tools"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == name).cloned())
        .unwrap_or(Value::Null))
}

/// The run's events from `device` to its `run.finished`.
async fn to_the_end(device: &mut EventStream, run: &str) -> anyhow::Result<Vec<SseEvent>> {
    device
        .read_until(LONG, |e| {
            e.kind == "run.finished" && e.data["run_id"] == run
        })
        .await
}

async fn finished(client: &Client, chat: &str, run: &str) -> anyhow::Result<Value> {
    client
        .wait_run(
            chat,
            run,
            &["done", "failed", "stopped", "interrupted", "paused"],
            LONG,
        )
        .await
}

fn write(path: &str, content: &str) -> Value {
    json!({"tool_calls": [call("write_file", json!({"path": path, "content": content}))]})
}

// 1 ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_mode_offers_the_read_tools_only_and_refuses_a_write_until_switched_back(
) -> anyhow::Result<()> {
    // Commands run on this box: bash is offered outside plan mode.
    let (sim, chatd, client) = start(&[("QSE_CHATS_HOST_EXEC", "on")]).await?;
    let (chat, workspace) = create(&client, &chatd, json!({"permission_mode": "plan"})).await?;
    let snapshot = client.snapshot(&chat).await?;
    assert_eq!(snapshot["conversation"]["permission_mode"], "plan");

    // The tools view says why write_file is not usable.
    let line = tool_line(&client, &chat, "write_file").await?;
    assert_eq!(line["usable"], false, "{line}");
    assert!(
        line["reason"]
            .as_str()
            .is_some_and(|r| r.contains(PLAN_WORDS)),
        "{line}"
    );
    assert_eq!(
        tool_line(&client, &chat, "read_file").await?["usable"],
        true
    );

    script(
        &sim,
        &chat,
        vec![
            write("plan.md", "step one\n"),
            json!({"text": "Here is the plan."}),
        ],
    )
    .await?;
    let snapshot = turn(&client, &chat, "plan the change").await?;
    let bodies = bodies_of(&sim, &chat).await?;
    let first = bodies.first().context("a request")?;
    let offered = offered_tools(first);
    for name in ["read_file", "list_files", "grep"] {
        assert!(has(&offered, name), "{name} not offered: {offered:?}");
    }
    for name in CHANGES {
        assert!(
            !has(&offered, name),
            "{name} offered in plan mode: {offered:?}"
        );
    }
    let system = system_text(first);
    assert!(system.contains("# Plan mode"), "{system}");

    let results = tool_results(&snapshot);
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(
        results[0].contains("write_file") && results[0].contains(PLAN_WORDS),
        "{}",
        results[0]
    );
    assert!(
        !workspace.join("plan.md").exists(),
        "the refused write wrote"
    );

    // Back to auto, with a setting, in one PATCH: write_file (and bash,
    // spawn_agent) at the next turn, and no plan part.
    let patched = patch(
        &client,
        &format!("/conversations/{chat}/settings"),
        json!({"permission_mode": "auto", "temperature": 0.5}),
    )
    .await?;
    assert_eq!(patched.status, 200, "{patched:?}");
    assert_eq!(patched.body["permission_mode"], "auto", "{patched:?}");
    assert_eq!(patched.body["settings"]["temperature"], 0.5, "{patched:?}");
    script(
        &sim,
        &chat,
        vec![write("plan.md", "step one\n"), json!({"text": "Written."})],
    )
    .await?;
    turn(&client, &chat, "carry it out").await?;
    let bodies = bodies_of(&sim, &chat).await?;
    let this_turn = &bodies[bodies.len() - 2];
    let offered = offered_tools(this_turn);
    for name in [
        "write_file",
        "edit_file",
        "bash",
        "spawn_agent",
        "read_file",
    ] {
        assert!(
            has(&offered, name),
            "{name} not offered in auto: {offered:?}"
        );
    }
    assert!(!system_text(this_turn).contains("# Plan mode"));
    assert_eq!(
        this_turn["temperature"], 0.5,
        "the setting reached the request"
    );
    assert_eq!(
        std::fs::read_to_string(workspace.join("plan.md"))?,
        "step one\n"
    );

    // And into plan mode again by PUT …/permission-mode.
    let set = put(
        &client,
        &format!("/conversations/{chat}/permission-mode"),
        json!({"mode": "plan"}),
    )
    .await?;
    assert_eq!(set.status, 200, "{set:?}");
    script(&sim, &chat, vec![json!({"text": "Planning again."})]).await?;
    turn(&client, &chat, "what next?").await?;
    let bodies = bodies_of(&sim, &chat).await?;
    let last = bodies.last().context("a request")?;
    let offered = offered_tools(last);
    assert!(!has(&offered, "write_file"), "{offered:?}");
    assert!(has(&offered, "read_file"), "{offered:?}");
    assert!(system_text(last).contains("# Plan mode"));
    Ok(())
}

// 2 ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_set_to_ask_raises_a_card_in_yolo_and_one_set_to_never_is_neither_offered_nor_run(
) -> anyhow::Result<()> {
    let (sim, chatd, client) = start(&[]).await?;
    let set = box_policies(&client, json!({"write_file": "ask", "edit_file": "never"})).await?;
    assert_eq!(
        set["policies"],
        json!({"write_file": "ask", "edit_file": "never"}),
        "{set}"
    );
    let (chat, workspace) = create(&client, &chatd, json!({"permission_mode": "yolo"})).await?;
    std::fs::write(workspace.join("notes.md"), "old\n")?;

    // write_file asks even in yolo: the run waits on the card.
    script(
        &sim,
        &chat,
        vec![write("hello.txt", "hi\n"), json!({"text": "Written."})],
    )
    .await?;
    let mut device = client.events(&chat, 0).await?;
    let run = run_id(&client.send(&chat, "write hello").await?)?;
    let events = device
        .read_until(QUICK, |e| e.kind == "tool.consent")
        .await?;
    let card = events.last().context("card")?.data.clone();
    assert_eq!(card["name"], "write_file", "{card}");
    let card_id = card["card_id"].as_str().context("card id")?.to_string();
    assert!(
        !workspace.join("hello.txt").exists(),
        "written before the answer"
    );
    let waiting = client.run(&chat, &run).await?;
    assert_eq!(waiting["status"], "waiting", "{waiting}");
    let snapshot = client.snapshot(&chat).await?;
    assert_eq!(
        snapshot["consents"].as_array().map_or(0, Vec::len),
        1,
        "{snapshot}"
    );

    let answer = client
        .post(
            &format!("/conversations/{chat}/consent"),
            json!({"card_id": card_id, "decision": "once"}),
        )
        .await?;
    assert_eq!(answer.status, 200, "{answer:?}");
    let record = finished(&client, &chat, &run).await?;
    assert_eq!(record["status"], "done", "{record}");
    assert_eq!(
        std::fs::read_to_string(workspace.join("hello.txt"))?,
        "hi\n"
    );
    let events = to_the_end(&mut device, &run).await?;
    assert_eq!(
        events_of(&events, "tool.consent").len(),
        0,
        "one card only: {:?}",
        events_of(&events, "tool.consent")
    );
    let started = events_of(&events, "tool.started");
    assert_eq!(started.last().context("started")?.data["approved"], "user");

    // edit_file is never: not offered, and a call anyway edits nothing.
    script(
        &sim,
        &chat,
        vec![
            json!({"tool_calls": [call(
                "edit_file",
                json!({"path": "notes.md", "old_string": "old", "new_string": "new"})
            )]}),
            json!({"text": "I cannot edit it."}),
        ],
    )
    .await?;
    let run = run_id(&client.send(&chat, "edit the notes").await?)?;
    let record = finished(&client, &chat, &run).await?;
    assert_eq!(record["status"], "done", "{record}");
    let events = to_the_end(&mut device, &run).await?;
    assert!(
        events_of(&events, "tool.consent").is_empty(),
        "a never tool asked"
    );
    let bodies = bodies_of(&sim, &chat).await?;
    for body in &bodies {
        let offered = offered_tools(body);
        assert!(!has(&offered, "edit_file"), "{offered:?}");
        assert!(has(&offered, "write_file"), "ask is offered: {offered:?}");
    }
    let results = tool_results(&client.snapshot(&chat).await?);
    let last = results.last().context("the refused call's result")?;
    assert!(
        last.contains("edit_file") && last.contains("set to never"),
        "{last}"
    );
    assert_eq!(
        std::fs::read_to_string(workspace.join("notes.md"))?,
        "old\n"
    );
    let line = tool_line(&client, &chat, "edit_file").await?;
    assert_eq!(line["usable"], false, "{line}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chats_always_beats_the_boxs_ask_and_runs_with_no_card_in_ask_mode() -> anyhow::Result<()>
{
    let (sim, chatd, client) = start(&[]).await?;
    box_policies(&client, json!({"write_file": "ask", "edit_file": "never"})).await?;
    let (chat, workspace) = create(&client, &chatd, json!({"permission_mode": "ask"})).await?;
    let set = put(
        &client,
        &format!("/conversations/{chat}/tools/policies"),
        json!({"policies": {"write_file": "always"}}),
    )
    .await?;
    assert_eq!(set.status, 200, "{set:?}");
    assert_eq!(set.body["policies"], json!({"write_file": "always"}));
    assert_eq!(
        set.body["box"],
        json!({"write_file": "ask", "edit_file": "never"})
    );
    assert_eq!(
        set.body["effective"],
        json!({"write_file": "always", "edit_file": "never"})
    );
    let got = client
        .get(&format!("/conversations/{chat}/tools/policies"))
        .await?;
    assert_eq!(got.status, 200, "{got:?}");
    assert_eq!(got.body, set.body);

    script(
        &sim,
        &chat,
        vec![write("report.md", "done\n"), json!({"text": "Written."})],
    )
    .await?;
    let mut device = client.events(&chat, 0).await?;
    let run = run_id(&client.send(&chat, "write the report").await?)?;
    let events = to_the_end(&mut device, &run).await?;
    let record = client.run(&chat, &run).await?;
    assert_eq!(record["status"], "done", "{record}");
    assert!(
        events_of(&events, "tool.consent").is_empty(),
        "always asked: {:?}",
        events_of(&events, "tool.consent")
    );
    let started = events_of(&events, "tool.started");
    assert_eq!(started.last().context("started")?.data["approved"], "rule");
    assert_eq!(
        std::fs::read_to_string(workspace.join("report.md"))?,
        "done\n"
    );

    // Another chat of the box, without its own: the box's ask holds.
    let (other, other_space) = create(&client, &chatd, json!({"permission_mode": "yolo"})).await?;
    let got = client
        .get(&format!("/conversations/{other}/tools/policies"))
        .await?;
    assert_eq!(got.body["policies"], json!({}), "{:?}", got.body);
    assert_eq!(got.body["effective"]["write_file"], "ask", "{:?}", got.body);
    script(&sim, &other, vec![write("x.txt", "x")]).await?;
    let mut device = client.events(&other, 0).await?;
    let run = run_id(&client.send(&other, "write x").await?)?;
    let events = device
        .read_until(QUICK, |e| e.kind == "tool.consent")
        .await?;
    let card_id = events.last().context("card")?.data["card_id"].clone();
    let denied = client
        .post(
            &format!("/conversations/{other}/consent"),
            json!({"card_id": card_id, "decision": "deny"}),
        )
        .await?;
    assert_eq!(denied.status, 200, "{denied:?}");
    let record = finished(&client, &other, &run).await?;
    assert_eq!(record["status"], "done", "{record}");
    assert!(!other_space.join("x.txt").exists(), "denied yet written");
    Ok(())
}

// 3 ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_set_to_ask_is_refused_in_a_trigger_run_with_no_card() -> anyhow::Result<()> {
    let (sim, chatd, client) = start(&[]).await?;
    box_policies(&client, json!({"write_file": "ask"})).await?;
    let (chat, workspace) = create(&client, &chatd, json!({"permission_mode": "auto"})).await?;
    script(
        &sim,
        &chat,
        vec![write("digest.md", "news\n"), json!({"text": "Could not."})],
    )
    .await?;
    let mut device = client.events(&chat, 0).await?;
    let sent = client
        .post(
            &format!("/conversations/{chat}/messages"),
            json!({"text": "write today's digest", "origin": "trigger"}),
        )
        .await?;
    assert_eq!(sent.status, 202, "{sent:?}");
    let run = run_id(&sent.body)?;
    let events = to_the_end(&mut device, &run).await?;
    let record = client.run(&chat, &run).await?;
    assert_eq!(record["status"], "done", "{record}");
    assert!(
        events_of(&events, "tool.consent").is_empty(),
        "a card in a trigger run: {:?}",
        events_of(&events, "tool.consent")
    );
    let snapshot = client.snapshot(&chat).await?;
    assert_eq!(
        snapshot["consents"].as_array().map_or(0, Vec::len),
        0,
        "{snapshot}"
    );
    let results = tool_results(&snapshot);
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(
        results[0].contains("write_file")
            && results[0].contains("set to ask, and nobody is asked")
            && results[0].contains("trigger"),
        "{}",
        results[0]
    );
    assert!(
        !workspace.join("digest.md").exists(),
        "the refused write wrote"
    );
    Ok(())
}

// 4 ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_policies_and_bad_settings_are_refused_by_field_and_change_nothing(
) -> anyhow::Result<()> {
    let (_sim, chatd, client) = start(&[]).await?;
    let empty = client.get("/tools/policies").await?;
    assert_eq!(empty.status, 200, "{empty:?}");
    assert_eq!(empty.body, json!({"policies": {}}));
    box_policies(&client, json!({"write_file": "ask"})).await?;

    let cases = [
        (json!({"nope_tool": "ask"}), "policies"),
        (
            json!({"write_file": "never", "bash": "sometimes"}),
            "policies.bash",
        ),
        (json!({"bash": 3}), "policies.bash"),
        (json!({"mcp:": "ask"}), "policies"),
    ];
    for (policies, field) in &cases {
        let refused = put(&client, "/tools/policies", json!({ "policies": policies })).await?;
        assert_eq!(refused.status, 400, "{policies}: {refused:?}");
        assert_eq!(refused.body["error"]["type"], "bad_input", "{refused:?}");
        assert_eq!(error_field(&refused), *field, "{policies}: {refused:?}");
    }
    let got = client.get("/tools/policies").await?;
    assert_eq!(got.body, json!({"policies": {"write_file": "ask"}}));

    // The same for one chat's: refused, nothing stored.
    let (chat, _) = create(&client, &chatd, json!({"permission_mode": "ask"})).await?;
    for (policies, field) in &cases {
        let refused = put(
            &client,
            &format!("/conversations/{chat}/tools/policies"),
            json!({ "policies": policies }),
        )
        .await?;
        assert_eq!(refused.status, 400, "{policies}: {refused:?}");
        assert_eq!(error_field(&refused), *field, "{policies}: {refused:?}");
    }
    let got = client
        .get(&format!("/conversations/{chat}/tools/policies"))
        .await?;
    assert_eq!(got.body["policies"], json!({}), "{:?}", got.body);
    let nowhere = put(
        &client,
        "/conversations/c_nope/tools/policies",
        json!({"policies": {"bash": "never"}}),
    )
    .await?;
    assert_eq!(nowhere.status, 404, "{nowhere:?}");

    // PUT replaces the whole list; an MCP tool's key is taken.
    let set = box_policies(
        &client,
        json!({"bash": "never", "mcp:docs:search": "always"}),
    )
    .await?;
    assert_eq!(
        set["policies"],
        json!({"bash": "never", "mcp:docs:search": "always"}),
        "{set}"
    );

    // PATCH …/settings: a bad mode or a bad setting changes neither.
    let good = patch(
        &client,
        &format!("/conversations/{chat}/settings"),
        json!({"temperature": 0.3}),
    )
    .await?;
    assert_eq!(good.status, 200, "{good:?}");
    let before = client.snapshot(&chat).await?["conversation"].clone();
    assert_eq!(before["permission_mode"], "ask");
    assert_eq!(before["settings"]["temperature"], 0.3);
    let bad = [
        (
            json!({"permission_mode": "bogus", "temperature": 1.0}),
            "permission_mode",
        ),
        (json!({"permission_mode": 3}), "permission_mode"),
        (
            json!({"permission_mode": "yolo", "temperature": 9}),
            "settings.temperature",
        ),
        (
            json!({"permission_mode": "yolo", "colour": "red"}),
            "settings.colour",
        ),
    ];
    for (body, field) in bad {
        let refused = patch(
            &client,
            &format!("/conversations/{chat}/settings"),
            body.clone(),
        )
        .await?;
        assert_eq!(refused.status, 400, "{body}: {refused:?}");
        assert_eq!(error_field(&refused), field, "{body}: {refused:?}");
        let now = client.snapshot(&chat).await?["conversation"].clone();
        assert_eq!(
            (&now["permission_mode"], &now["settings"]),
            (&before["permission_mode"], &before["settings"]),
            "{body} changed the chat"
        );
    }
    let mode = client
        .get(&format!("/conversations/{chat}/permission-mode"))
        .await?;
    assert_eq!(mode.body["mode"], "ask", "{mode:?}");
    Ok(())
}

// 5 ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agent_is_in_plan_mode_once_its_parent_is() -> anyhow::Result<()> {
    let (sim, chatd, client) = start(&[]).await?;
    let (chat, workspace) = create(&client, &chatd, json!({"permission_mode": "auto"})).await?;
    // The sub-agent's model thinks a while, then writes; then answers.
    let task = "Write the file\n[sim tool_call=write_file args={\"path\":\"sub.txt\",\
                \"content\":\"x\"} tool_steps=1 tokens=3 first_token_ms=6000]";
    script(
        &sim,
        &chat,
        vec![
            json!({"tool_calls": [call("spawn_agent", json!({"task": task, "wait": true}))]}),
            json!({"text": "Planned."}),
        ],
    )
    .await?;
    let run = run_id(&client.send(&chat, "get it written").await?)?;

    // While the sub-agent's first request is out, the parent goes to plan.
    let parent = format!("chat-{chat}");
    let sub_session = wait_until("the sub-agent's first request", QUICK, || async {
        sim.requests().await.ok()?.into_iter().find_map(|r| {
            r["session_id"]
                .as_str()
                .filter(|s| s.starts_with("chat-") && *s != parent)
                .map(str::to_string)
        })
    })
    .await?;
    let sub = sub_session.trim_start_matches("chat-").to_string();
    let set = put(
        &client,
        &format!("/conversations/{chat}/permission-mode"),
        json!({"mode": "plan"}),
    )
    .await?;
    assert_eq!(set.status, 200, "{set:?}");
    let record = finished(&client, &chat, &run).await?;
    assert_eq!(record["status"], "done", "{record}");

    let child = bodies_of(&sim, &sub).await?;
    assert_eq!(child.len(), 2, "the sub-agent's requests: {}", child.len());
    assert!(
        has(&offered_tools(&child[0]), "write_file"),
        "made before the switch"
    );
    let after = offered_tools(&child[1]);
    assert!(!has(&after, "write_file"), "{after:?}");
    assert!(has(&after, "read_file"), "{after:?}");
    assert!(system_text(&child[1]).contains("# Plan mode"));
    let results = tool_results(&client.snapshot(&sub).await?);
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].contains(PLAN_WORDS), "{}", results[0]);
    assert!(!workspace.join("sub.txt").exists(), "the sub-agent wrote");
    Ok(())
}

// 6 ---------------------------------------------------------------------------

/// A card a policy of `ask` raises either offers no "always", or its
/// "always" holds: the next call runs without a card (the allow rule it
/// saves is the person's answer for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_on_a_card_the_ask_policy_raised_holds_or_is_not_offered() -> anyhow::Result<()> {
    let (sim, chatd, client) = start(&[]).await?;
    box_policies(&client, json!({"write_file": "ask"})).await?;
    let (chat, workspace) = create(&client, &chatd, json!({"permission_mode": "auto"})).await?;
    script(
        &sim,
        &chat,
        vec![write("a.txt", "a"), json!({"text": "Written."})],
    )
    .await?;
    let mut device = client.events(&chat, 0).await?;
    let run = run_id(&client.send(&chat, "write a").await?)?;
    let events = device
        .read_until(QUICK, |e| e.kind == "tool.consent")
        .await?;
    let card = events.last().context("card")?.data.clone();
    assert_eq!(card["name"], "write_file", "{card}");
    let offers_always = card["choices"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c == "always"));
    if !offers_always {
        return Ok(());
    }
    let answer = client
        .post(
            &format!("/conversations/{chat}/consent"),
            json!({"card_id": card["card_id"], "decision": "always"}),
        )
        .await?;
    assert_eq!(answer.status, 200, "{answer:?}");
    let record = finished(&client, &chat, &run).await?;
    assert_eq!(record["status"], "done", "{record}");
    assert!(workspace.join("a.txt").exists());

    script(
        &sim,
        &chat,
        vec![write("b.txt", "b"), json!({"text": "Written."})],
    )
    .await?;
    let run = run_id(&client.send(&chat, "write b").await?)?;
    let events = device
        .read_until(QUICK, |e| {
            e.kind == "tool.consent" || (e.kind == "run.finished" && e.data["run_id"] == run)
        })
        .await?;
    let last = events.last().context("an event")?;
    assert_eq!(
        last.kind, "run.finished",
        "the card offered \"always\" and it was chosen, yet the next write_file asks \
         again: {} {}",
        last.kind, last.data
    );
    assert!(workspace.join("b.txt").exists());
    Ok(())
}
