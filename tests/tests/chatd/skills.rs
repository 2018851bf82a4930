//! Skills end to end: the real `chatd` and `engine-sim`, skills written in
//! a chat's workspace, in the owner's folder (by the routes and by hand)
//! and built in. What the model is told (the list, load_skill's answer, a
//! `/skill` message, the skills put back after a compaction) is read from
//! the requests the simulator recorded.

use anyhow::Context;
use serde_json::{json, Value};
use tandem_tests::harness::{form_body, run_id, Chatd, Client, FormPart, Sim};

use crate::scripted::{bodies_of, call, script, turn, LONG};

async fn start(env: &[(&str, &str)]) -> anyhow::Result<(Sim, Chatd, Client)> {
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start(&sim.url(), env).await?;
    let client = chatd.client();
    Ok((sim, chatd, client))
}

/// The owner's skills folder of this chatd (its HOME is the test's folder).
fn owner_dir(chatd: &Chatd) -> std::path::PathBuf {
    chatd
        .data_dir()
        .parent()
        .expect("the data folder is inside HOME")
        .join(".tandemllm/skills")
}

fn skill_md(name: &str, description: &str, body: &str) -> String {
    format!("---\nname: {name}\ndescription: {description}\n---\n\n{body}\n")
}

/// Writes a skill's folder by hand under `base` (a layer's folder).
fn write_skill(base: &std::path::Path, name: &str, text: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(base.join(name))?;
    std::fs::write(base.join(name).join("SKILL.md"), text)?;
    Ok(())
}

async fn put(client: &Client, path: &str, body: Value) -> anyhow::Result<(u16, Value)> {
    let answer = client.call(reqwest::Method::PUT, path, Some(body)).await?;
    Ok((answer.status, answer.body))
}

/// The text of the last tool result of the chat.
fn last_result(snapshot: &Value) -> String {
    snapshot["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "tool"))
        .and_then(|m| m["text"].as_str())
        .unwrap_or("")
        .to_string()
}

/// The system message of the last request the sim got for the chat.
async fn last_system(sim: &Sim, chat: &str) -> anyhow::Result<String> {
    let bodies = bodies_of(sim, chat).await?;
    let last = bodies.last().context("a request")?;
    Ok(last["messages"][0]["content"]
        .as_str()
        .unwrap_or("")
        .to_string())
}

/// One turn whose model loads `name` and then answers.
async fn load(sim: &Sim, client: &Client, chat: &str, name: &str) -> anyhow::Result<String> {
    script(
        sim,
        chat,
        vec![
            json!({"tool_calls": [call("load_skill", json!({"name": name}))]}),
            json!({"text": "Loaded."}),
        ],
    )
    .await?;
    let snapshot = turn(client, chat, "do the job").await?;
    Ok(last_result(&snapshot))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nearest_layer_wins_a_name_and_a_switch_lets_the_next_one_serve() -> anyhow::Result<()>
{
    let (sim, chatd, client) = start(&[]).await?;
    let made = client
        .post(
            "/skills",
            json!({"name": "pdf", "description": "The owner's way with PDFs", "body": "OWNER-PDF-STEPS"}),
        )
        .await?;
    assert_eq!(made.status, 201, "{made:?}");
    let chat = client.create_chat().await?;
    let workspace = chatd.data_dir().join("workspaces").join(&chat);
    let layer = workspace.join(".skills");
    write_skill(
        &layer,
        "pdf",
        &skill_md("pdf", "This project's PDFs", "WORKSPACE-PDF-STEPS"),
    )?;
    std::fs::write(layer.join("pdf/fonts.md"), "Use the house font.")?;

    let listed = client
        .get(&format!("/skills?conversation_id={chat}"))
        .await?
        .body;
    let of = |id: &str| {
        listed["skills"]
            .as_array()
            .and_then(|s| s.iter().find(|k| k["id"] == id).cloned())
            .unwrap_or(Value::Null)
    };
    assert_eq!(of("workspace:pdf")["on"], true, "{listed}");
    assert_eq!(of("owner:pdf")["shadowed_by"], "workspace:pdf", "{listed}");
    assert_eq!(of("builtin:pdf")["on"], false, "{listed}");
    assert_eq!(of("builtin:writing")["on"], true, "{listed}");

    let text = load(&sim, &client, &chat, "pdf").await?;
    assert!(text.contains("WORKSPACE-PDF-STEPS"), "{text}");
    assert!(
        text.contains("Base directory for this skill: .skills/pdf"),
        "{text}"
    );
    assert!(text.contains("fonts.md"), "{text}");
    let system = last_system(&sim, &chat).await?;
    assert!(system.contains("- pdf: This project's PDFs"), "{system}");
    assert!(system.contains("load_skill"), "{system}");

    // A plain name switches off the skill that wins: the owner's serves.
    let (status, view) = put(
        &client,
        &format!("/conversations/{chat}/skills"),
        json!({"off": ["pdf"]}),
    )
    .await?;
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["off"], json!(["pdf"]));
    let text = load(&sim, &client, &chat, "pdf").await?;
    assert!(text.contains("OWNER-PDF-STEPS"), "{text}");

    // layer:name switches off that layer's: the built-in one serves.
    put(
        &client,
        &format!("/conversations/{chat}/skills"),
        json!({"off": ["workspace:pdf", "owner:pdf"]}),
    )
    .await?;
    let text = load(&sim, &client, &chat, "pdf").await?;
    assert!(text.contains("# PDF work"), "{text}");

    // A switch that names no skill refuses the whole body and changes nothing.
    let (status, refused) = put(
        &client,
        &format!("/conversations/{chat}/skills"),
        json!({"off": ["writing", "pfd"]}),
    )
    .await?;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["field"], "off", "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("did you mean pdf"),
        "{refused}"
    );
    let listed = client
        .get(&format!("/skills?conversation_id={chat}"))
        .await?
        .body;
    assert_eq!(listed["off"], json!(["owner:pdf", "workspace:pdf"]));

    // A fork keeps the chat's switches (and its opt-in groups).
    put(
        &client,
        &format!("/conversations/{chat}/builtins"),
        json!({"on": ["saved_agents"]}),
    )
    .await?;
    let last = client.snapshot(&chat).await?["messages"]
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
    let fork_view = client
        .get(&format!("/skills?conversation_id={fork}"))
        .await?
        .body;
    assert_eq!(
        fork_view["off"],
        json!(["owner:pdf", "workspace:pdf"]),
        "{fork_view}"
    );
    let tools = client
        .get(&format!("/conversations/{fork}/tools"))
        .await?
        .body;
    assert!(
        tools["opt_in"].as_array().is_some_and(|g| g
            .iter()
            .any(|g| g["name"] == "saved_agents" && g["on"] == true)),
        "{tools}"
    );

    // Every skill off: no list, no load_skill.
    let all = [
        "workspace:pdf",
        "owner:pdf",
        "builtin:pdf",
        "docx",
        "pptx",
        "xlsx",
        "writing",
    ];
    put(
        &client,
        &format!("/conversations/{chat}/skills"),
        json!({"off": all}),
    )
    .await?;
    script(&sim, &chat, vec![json!({"text": "Plain."})]).await?;
    turn(&client, &chat, "hello").await?;
    let bodies = bodies_of(&sim, &chat).await?;
    let last = bodies.last().context("a request")?;
    let tools: Vec<&str> = last["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| t["function"]["name"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert!(!tools.contains(&"load_skill"), "{tools:?}");
    assert!(!last_system(&sim, &chat).await?.contains("# Skills"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_near_name_is_suggested_and_a_skill_needing_commands_is_unavailable_without_them(
) -> anyhow::Result<()> {
    let (sim, _chatd, client) = start(&[("QSE_CHATS_HOST_EXEC", "off")]).await?;
    let chat = client.create_chat().await?;
    let text = load(&sim, &client, &chat, "PDF").await?;
    assert!(text.contains("Did you mean pdf?"), "{text}");
    assert!(text.contains("The chat's skills: pdf"), "{text}");
    let system = last_system(&sim, &chat).await?;
    assert!(
        system.contains("- pdf: ") && system.contains("unavailable here: needs command execution"),
        "{system}"
    );
    assert!(!system.contains("- writing: Write or edit prose for a reader (summaries, reports, emails, docs) plainly and checked. (unavailable"));

    let text = load(&sim, &client, &chat, "xlsx").await?;
    assert!(text.contains("cannot be used here"), "{text}");
    let text = load(&sim, &client, &chat, "writing").await?;
    assert!(text.contains("# Writing for a reader"), "{text}");

    // A message with it is refused the same way, and stores nothing.
    let sent = client
        .post(
            &format!("/conversations/{chat}/messages"),
            json!({"text": "/pdf merge these"}),
        )
        .await?;
    assert_eq!(sent.status, 400, "{sent:?}");
    assert_eq!(sent.body["error"]["field"], "skill");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slash_skill_message_carries_the_skill_again_on_regenerate_and_after_a_compaction(
) -> anyhow::Result<()> {
    let (sim, chatd, client) = start(&[]).await?;
    write_skill(
        &owner_dir(&chatd),
        "review",
        &skill_md(
            "review",
            "Check a change before it ships",
            "REVIEW-PROCEDURE-7",
        ),
    )?;
    let chat = client.create_chat().await?;

    // The command list offers it, and `/review …` sends the words with it.
    let commands = client
        .get(&format!("/commands?conversation_id={chat}"))
        .await?
        .body;
    assert!(
        commands["skills"].as_array().is_some_and(|s| s
            .iter()
            .any(|k| k["name"] == "review" && k["usage"] == "/review [words]")),
        "{commands}"
    );
    script(&sim, &chat, vec![json!({"text": "Reviewed."})]).await?;
    let snapshot = turn(&client, &chat, "/review check the diff").await?;
    let question = snapshot["messages"][0].clone();
    assert_eq!(question["text"], "check the diff", "{question}");
    assert_eq!(
        question["invoked"],
        json!({"kind": "skill", "name": "review"})
    );
    let bodies = bodies_of(&sim, &chat).await?;
    let user = bodies.last().context("a request")?["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "user").cloned())
        .context("the question")?;
    let said = user["content"].to_string();
    assert!(
        said.contains("REVIEW-PROCEDURE-7") && said.contains("check the diff"),
        "{said}"
    );

    // A regenerate runs it again.
    script(&sim, &chat, vec![json!({"text": "Reviewed again."})]).await?;
    let again = client
        .post(&format!("/conversations/{chat}/regenerate"), json!({}))
        .await?;
    assert_eq!(again.status, 202, "{again:?}");
    let run = run_id(&again.body)?;
    client.wait_run(&chat, &run, &["done"], LONG).await?;
    let bodies = bodies_of(&sim, &chat).await?;
    assert!(bodies
        .last()
        .context("a request")?
        .to_string()
        .contains("REVIEW-PROCEDURE-7"));

    // `/skill NAME` reaches it too; an unknown one is refused by name;
    // `/word` naming no skill is a message.
    script(
        &sim,
        &chat,
        vec![json!({"text": "ok"}), json!({"text": "ok"})],
    )
    .await?;
    turn(&client, &chat, "/skill review the tests too").await?;
    let refused = client
        .post(
            &format!("/conversations/{chat}/messages"),
            json!({"text": "/skill reveiw it"}),
        )
        .await?;
    assert_eq!(refused.status, 400, "{refused:?}");
    assert!(refused.body["error"]["message"]
        .as_str()
        .unwrap_or("")
        .contains("Did you mean review?"));
    turn(&client, &chat, "/usr/bin is where it lives").await?;

    // A form with a file runs a skill the same way (`skill`, or the lead).
    script(&sim, &chat, vec![json!({"text": "ok"})]).await?;
    let parts = [
        FormPart::setting("text", "/review the attached patch"),
        FormPart::file("fix.patch", "text/x-diff", "--- a\n+++ b\n"),
    ];
    let sent = client
        .send_form(
            reqwest::Method::POST,
            &format!("/conversations/{chat}/messages"),
            form_body(&parts),
        )
        .await?;
    assert_eq!(sent.status, 202, "{sent:?}");
    client
        .wait_run(&chat, &run_id(&sent.body)?, &["done"], LONG)
        .await?;
    let snapshot = client.snapshot(&chat).await?;
    let last_user = snapshot["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user").cloned())
        .context("the form's message")?;
    assert_eq!(last_user["invoked"]["name"], "review", "{last_user}");
    assert!(
        last_user["text"]
            .as_str()
            .unwrap_or("")
            .starts_with("the attached patch"),
        "{last_user}"
    );

    // The model loads a skill itself too.
    script(
        &sim,
        &chat,
        vec![
            json!({"tool_calls": [call("load_skill", json!({"name": "writing"}))]}),
            json!({"text": "Loaded."}),
        ],
    )
    .await?;
    turn(&client, &chat, "write it up").await?;

    // A compaction summarizes the turns away: the skills are put back.
    for i in 0..4 {
        script(&sim, &chat, vec![json!({"text": format!("answer {i}")})]).await?;
        let long = format!("more {i}: {}", "words of a long paste ".repeat(1_200));
        turn(&client, &chat, &long).await?;
    }
    let compacted = client
        .post(&format!("/conversations/{chat}/compact"), json!({}))
        .await?;
    assert_eq!(compacted.status, 200, "{compacted:?}");
    let snapshot = client.snapshot(&chat).await?;
    let marks = snapshot["messages"]
        .as_array()
        .map_or(0, |m| m.iter().filter(|m| m["role"] == "compacted").count());
    assert!(marks > 0, "the chat was compacted: {compacted:?}");
    script(&sim, &chat, vec![json!({"text": "after"})]).await?;
    turn(&client, &chat, "go on").await?;
    let system = last_system(&sim, &chat).await?;
    assert!(
        system.contains("# Skills loaded before the summary")
            && system.contains("REVIEW-PROCEDURE-7"),
        "{system}"
    );
    assert!(system.contains("# Writing for a reader"), "{system}");
    let (kept, summary) = (
        system
            .find("# Skills loaded before the summary")
            .unwrap_or(0),
        system
            .find("Summary of the conversation")
            .context("the summary")?,
    );
    assert!(kept < summary, "the summary comes last: {system}");

    // After a clear nothing is put back.
    let cleared = client
        .post(&format!("/conversations/{chat}/clear"), json!({}))
        .await?;
    assert_eq!(cleared.status, 200, "{cleared:?}");
    script(&sim, &chat, vec![json!({"text": "fresh"})]).await?;
    turn(&client, &chat, "start over").await?;
    let system = last_system(&sim, &chat).await?;
    assert!(
        !system.contains("# Skills loaded before the summary"),
        "{system}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_skills_keep_the_list_to_its_room_and_say_how_many_are_left_out(
) -> anyhow::Result<()> {
    let (sim, chatd, client) = start(&[]).await?;
    let dir = owner_dir(&chatd);
    for i in 0..200 {
        let name = format!("job-{i:03}");
        write_skill(
            &dir,
            &name,
            &skill_md(
                &name,
                &format!("Do job {i} the house way, step by step"),
                &format!("STEPS-{i:03}"),
            ),
        )?;
    }
    let chat = client.create_chat().await?;
    let text = load(&sim, &client, &chat, "job-199").await?;
    assert!(
        text.contains("STEPS-199"),
        "a skill past the list loads: {text}"
    );
    let system = last_system(&sim, &chat).await?;
    let described = system.lines().filter(|l| l.starts_with("- job-")).count();
    assert!(described > 20 && described < 200, "{described}");
    let left = 205 - described; // 200 of the owner's and 5 built in
    assert!(
        system.contains(&format!("{left} more skills are not described")),
        "{system}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owners_skills_are_written_checked_and_deleted_and_a_bad_folder_is_named(
) -> anyhow::Result<()> {
    let (_sim, chatd, client) = start(&[]).await?;
    let cases = [
        (
            json!({"name": "Bad Name", "description": "d", "body": "b"}),
            "name",
        ),
        (json!({"name": "ok", "body": "b"}), "description"),
        (json!({"name": "ok", "description": "d"}), "body"),
        (
            json!({"name": "ok", "description": "d", "body": "b", "requires": ["gpu"]}),
            "requires",
        ),
        (
            json!({"name": "ok", "description": "d", "body": "x".repeat(70_000)}),
            "body",
        ),
    ];
    for (body, field) in cases {
        let answer = client.post("/skills", body).await?;
        assert_eq!(answer.status, 400, "{answer:?}");
        assert_eq!(answer.body["error"]["field"], field, "{answer:?}");
    }
    assert!(
        !owner_dir(&chatd).join("ok").exists(),
        "a refusal writes nothing"
    );

    let made = client
        .post("/skills", json!({"name": "notes", "description": "Keep notes tidy", "body": "One file a day.", "requires": ["exec"]}))
        .await?;
    assert_eq!(made.status, 201, "{made:?}");
    assert_eq!(made.body["requires"], json!(["exec"]));
    let again = client
        .post(
            "/skills",
            json!({"name": "notes", "description": "d", "body": "b"}),
        )
        .await?;
    assert_eq!(again.status, 409, "{again:?}");
    let (status, changed) = put(
        &client,
        "/skills/notes",
        json!({"body": "Two files a day."}),
    )
    .await?;
    assert_eq!(status, 200, "{changed}");
    assert_eq!(
        changed["description"], "Keep notes tidy",
        "what is left out stays"
    );
    assert_eq!(changed["body"], "Two files a day.");
    let (status, builtin) = put(&client, "/skills/pdf", json!({"body": "x"})).await?;
    assert_eq!(status, 400, "{builtin}");
    assert!(builtin["error"]["message"]
        .as_str()
        .unwrap_or("")
        .contains("built in"));

    // A folder that is no skill is listed with why, and serves nothing.
    let dir = owner_dir(&chatd);
    write_skill(&dir, "huge", &skill_md("huge", "d", &"y".repeat(70_000)))?;
    write_skill(&dir, "bare", "no front matter here")?;
    let listed = client.get("/skills").await?.body;
    let problems = listed["problems"].to_string();
    assert!(
        problems.contains("huge") && problems.contains("65536"),
        "{problems}"
    );
    assert!(
        problems.contains("bare") && problems.contains("no front matter"),
        "{problems}"
    );

    let gone = client
        .call(reqwest::Method::DELETE, "/skills/notes", None)
        .await?;
    assert_eq!(gone.status, 204, "{gone:?}");
    assert!(!dir.join("notes").exists());
    let trashed = std::fs::read_dir(dir.join(".trash"))?.count();
    assert_eq!(trashed, 1, "the folder is kept in the trash");
    let missing = client.get("/skills/notes").await?;
    assert_eq!(missing.status, 404);
    Ok(())
}
