//! A saved agent kept to one folder, end to end on the real `chatd` and
//! `engine-sim`: its chats reach that folder at `folder/` (read only or
//! read and write) and their own folder, nothing else; host `bash` is never
//! offered to them; a folder that is gone refuses new chats and messages
//! (409 `agent_folder_missing`), as does the agent's deletion; a PUT
//! without `folder` keeps it; sub-agents never reach past it; the agent
//! file carries it as version 2. Every wait is on a condition with a bound.

use std::path::Path;

use super::scripted::{bodies_of, call, script, turn};
use anyhow::Context;
use serde_json::{json, Value};
use tandem_tests::harness::{offered_tools, system_text, tool_results, Chatd, Client, Sim};

async fn start(env: &[(&str, &str)]) -> anyhow::Result<(Sim, Chatd, Client)> {
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start(&sim.url(), env).await?;
    let client = chatd.client();
    Ok((sim, chatd, client))
}

async fn make_agent(client: &Client, body: Value) -> anyhow::Result<Value> {
    let made = client.post("/agents", body).await?;
    anyhow::ensure!(made.status == 201, "{made:?}");
    Ok(made.body)
}

async fn chat_with(client: &Client, agent: &str) -> anyhow::Result<String> {
    let made = client
        .post(
            "/conversations",
            json!({"agent_id": agent, "permission_mode": "auto", "workspace": "shared"}),
        )
        .await?;
    anyhow::ensure!(made.status == 201, "{made:?}");
    // Kept to its folder and its own: never the box's shared one.
    anyhow::ensure!(made.body["workspace"] == "own", "{made:?}");
    Ok(made.body["id"].as_str().context("chat id")?.to_string())
}

fn path_of(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_of_a_read_only_folder_agent_reads_it_and_changes_nothing_outside_its_own_folder(
) -> anyhow::Result<()> {
    let (sim, chatd, client) = start(&[("QSE_CHATS_HOST_EXEC", "on")]).await?;
    let files = tempfile::tempdir()?;
    let notes = files.path().join("notes");
    let other = files.path().join("other");
    std::fs::create_dir_all(&notes)?;
    std::fs::create_dir_all(&other)?;
    std::fs::write(notes.join("a.md"), "hello from the notes")?;
    std::fs::write(other.join("secret.md"), "not for the agent")?;

    let agent = make_agent(
        &client,
        json!({"name": "Notes reader", "folder": {"path": path_of(&notes), "mode": "read"}}),
    )
    .await?;
    let shown = &agent["folder"];
    assert_eq!(
        (&shown["mode"], &shown["state"], &shown["name"]),
        (&json!("read"), &json!("ok"), &json!("notes")),
        "{agent}"
    );
    let id = agent["id"].as_str().context("id")?;
    let chat = chat_with(&client, id).await?;

    script(
        &sim,
        &chat,
        vec![
            json!({"tool_calls": [
                call("read_file", json!({"path": "folder/a.md"})),
                call("write_file", json!({"path": "folder/b.md", "content": "x"})),
                call("write_file", json!({"path": path_of(&notes.join("c.md")), "content": "x"})),
                call("delete_file", json!({"path": "folder/a.md"})),
                call("read_file", json!({"path": path_of(&other.join("secret.md"))})),
                call("write_file", json!({"path": "summary.md", "content": "my summary"})),
                call("list_files", json!({"path": "."})),
            ]}),
            json!({"text": "done"}),
        ],
    )
    .await?;
    let snapshot = turn(&client, &chat, "summarise my notes").await?;
    let results = tool_results(&snapshot);
    assert_eq!(results.len(), 7, "{results:?}");
    assert!(
        results[0].contains("hello from the notes"),
        "{}",
        results[0]
    );
    for refused in &results[1..4] {
        assert!(refused.contains("may only read"), "{refused}");
    }
    assert!(
        results[4].contains("outside the workspace"),
        "{}",
        results[4]
    );
    assert!(!results[4].contains("not for the agent"), "{}", results[4]);
    assert!(!results[5].contains("may only read"), "{}", results[5]);
    assert!(results[6].contains("folder/a.md"), "{}", results[6]);
    assert!(results[6].contains("summary.md"), "{}", results[6]);

    // Nothing changed in the folder; the chat's own file is in its own.
    let mut names: Vec<String> = std::fs::read_dir(&notes)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()?;
    names.sort();
    assert_eq!(names, vec!["a.md".to_string()]);
    let own = chatd.data_dir().join("workspaces").join(&chat);
    assert_eq!(
        std::fs::read_to_string(own.join("summary.md"))?,
        "my summary"
    );

    // Host bash (host_exec = on) is never offered to it; a plain chat has it.
    let bodies = bodies_of(&sim, &chat).await?;
    let first = bodies.first().context("a request")?;
    assert!(!offered_tools(first).iter().any(|t| t == "bash"), "{first}");
    let system = system_text(first);
    assert!(
        system.contains("folder/") && system.contains("read only"),
        "{system}"
    );
    let plain = client.create_chat_in("auto").await?;
    script(&sim, &plain, vec![json!({"text": "hi"})]).await?;
    turn(&client, &plain, "hello").await?;
    let plain_first = bodies_of(&sim, &plain).await?;
    assert!(offered_tools(plain_first.first().context("a request")?)
        .iter()
        .any(|t| t == "bash"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_folder_refuses_new_chats_and_messages_and_a_put_without_folder_keeps_it(
) -> anyhow::Result<()> {
    let (sim, _chatd, client) = start(&[]).await?;
    let files = tempfile::tempdir()?;
    let work = files.path().join("work");
    std::fs::create_dir_all(&work)?;
    let agent = make_agent(
        &client,
        json!({"name": "Writer", "folder": {"path": path_of(&work), "mode": "write"}}),
    )
    .await?;
    let id = agent["id"].as_str().context("id")?.to_string();
    let chat = chat_with(&client, &id).await?;
    script(
        &sim,
        &chat,
        vec![
            json!({"tool_calls": [call("write_file", json!({"path": "folder/out.md", "content": "written"}))]}),
            json!({"text": "done"}),
        ],
    )
    .await?;
    turn(&client, &chat, "write it").await?;
    assert_eq!(std::fs::read_to_string(work.join("out.md"))?, "written");

    // A PUT that does not name the folder keeps it.
    let put = client
        .call(
            reqwest::Method::PUT,
            &format!("/agents/{id}"),
            Some(json!({"name": "Writer 2", "instructions": "Be brief."})),
        )
        .await?;
    assert_eq!(put.status, 200, "{put:?}");
    assert_eq!(
        put.body["folder"]["path"],
        json!(path_of(&work.canonicalize()?))
    );
    assert_eq!(put.body["folder"]["mode"], "write");

    // Gone: the agent says so, and nothing starts.
    std::fs::rename(&work, files.path().join("moved"))?;
    let shown = client.get(&format!("/agents/{id}")).await?;
    assert_eq!(shown.body["folder"]["state"], "missing", "{shown:?}");
    let before = client.snapshot(&chat).await?["messages"]
        .as_array()
        .map(Vec::len);
    let refused = client
        .post(
            &format!("/conversations/{chat}/messages"),
            json!({"text": "again"}),
        )
        .await?;
    assert_eq!(refused.status, 409, "{refused:?}");
    assert_eq!(refused.body["error"]["type"], "agent_folder_missing");
    let made = client
        .post("/conversations", json!({"agent_id": id}))
        .await?;
    assert_eq!(made.status, 409, "{made:?}");
    assert_eq!(made.body["error"]["type"], "agent_folder_missing");

    // Back where it was: the chat goes on, nothing of the refusal stored.
    std::fs::rename(files.path().join("moved"), &work)?;
    let after = client.snapshot(&chat).await?["messages"]
        .as_array()
        .map(Vec::len);
    assert_eq!(before, after);
    script(&sim, &chat, vec![json!({"text": "back"})]).await?;
    turn(&client, &chat, "again").await?;

    // A folder swapped for a link to elsewhere is no longer the folder.
    std::fs::rename(&work, files.path().join("real"))?;
    std::os::unix::fs::symlink(files.path().join("real"), &work)?;
    let linked = client.get(&format!("/agents/{id}")).await?;
    assert_eq!(linked.body["folder"]["state"], "missing", "{linked:?}");
    std::fs::remove_file(&work)?;
    std::fs::rename(files.path().join("real"), &work)?;

    // A mode with no path is no way to clear it; `{"path": ""}` alone is.
    let half = client
        .call(
            reqwest::Method::PUT,
            &format!("/agents/{id}"),
            Some(json!({"name": "Writer 2", "folder": {"mode": "read"}})),
        )
        .await?;
    assert_eq!(half.status, 400, "{half:?}");
    assert_eq!(half.body["error"]["field"], "folder.path");
    let kept = client.get(&format!("/agents/{id}")).await?;
    assert_eq!(kept.body["folder"]["mode"], "write", "{kept:?}");

    // Deleted while kept to a folder: its chat never falls back to every file.
    let deleted = client
        .call(reqwest::Method::DELETE, &format!("/agents/{id}"), None)
        .await?;
    assert_eq!(deleted.status, 204, "{deleted:?}");
    let refused = client
        .post(
            &format!("/conversations/{chat}/messages"),
            json!({"text": "and now?"}),
        )
        .await?;
    assert_eq!(refused.status, 409, "{refused:?}");
    assert_eq!(refused.body["error"]["type"], "agent_gone");
    assert!(
        refused.body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("deleted")),
        "{refused:?}"
    );

    // Bad folders: named field, nothing stored.
    for (folder, says) in [
        (json!({"path": "notes", "mode": "read"}), "absolute"),
        (json!({"path": path_of(&work), "mode": "all"}), "read"),
        (
            json!({"path": path_of(&files.path().join("nope"))}),
            "cannot be opened",
        ),
    ] {
        let bad = client
            .post("/agents", json!({"name": "Bad", "folder": folder}))
            .await?;
        assert_eq!(bad.status, 400, "{bad:?}");
        let field = bad.body["error"]["field"].as_str().unwrap_or_default();
        assert!(field.starts_with("folder."), "{bad:?}");
        assert!(
            bad.body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(says)),
            "{bad:?}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folder_agent_starts_as_a_sub_agent_only_inside_the_chats_folder() -> anyhow::Result<()> {
    let (sim, _chatd, client) = start(&[]).await?;
    let files = tempfile::tempdir()?;
    let project = files.path().join("project");
    let docs = project.join("docs");
    std::fs::create_dir_all(&docs)?;
    std::fs::write(docs.join("guide.md"), "the guide")?;
    let lead = make_agent(
        &client,
        json!({"name": "Lead", "folder": {"path": path_of(&project), "mode": "read"}}),
    )
    .await?;
    let docs_agent = make_agent(
        &client,
        json!({"name": "Docs", "description": "edits the docs",
               "folder": {"path": path_of(&docs), "mode": "write"}}),
    )
    .await?;
    let lead_id = lead["id"].as_str().context("id")?;
    let chat = chat_with(&client, lead_id).await?;
    let plain = client.create_chat_in("auto").await?;
    for c in [&chat, &plain] {
        let on = client
            .call(
                reqwest::Method::PUT,
                &format!("/conversations/{c}/builtins"),
                Some(json!({"on": ["saved_agents"]})),
            )
            .await?;
        assert_eq!(on.status, 200, "{on:?}");
    }

    // From a plain chat: not listed, and refused by name.
    script(
        &sim,
        &plain,
        vec![
            json!({"tool_calls": [call("list_agents", json!({})),
                                  call("spawn_agent", json!({"task": "tidy the guide", "agent": "Docs"}))]}),
            json!({"text": "ok"}),
        ],
    )
    .await?;
    let results = tool_results(&turn(&client, &plain, "tidy").await?);
    assert!(!results[0].contains("\"Docs\""), "{}", results[0]);
    assert!(results[1].contains("another folder"), "{}", results[1]);
    // Asked for by the person in that chat: refused at once, nothing stored.
    let asked = client
        .post(
            &format!("/conversations/{plain}/messages"),
            json!({"text": "/agent Docs tidy the guide"}),
        )
        .await?;
    assert_eq!(asked.status, 400, "{asked:?}");
    assert_eq!(asked.body["error"]["field"], "agent", "{asked:?}");
    assert!(
        asked.body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("another folder")),
        "{asked:?}"
    );

    // From the lead's chat (its folder holds docs/): listed, it starts,
    // reads the guide at folder/, and, the lead being read only, writes
    // nothing there.
    let docs_id = docs_agent["id"].as_str().context("id")?.to_string();
    let task = r#"read the guide [sim tool_steps=1 tool_calls=[{"name":"read_file","arguments":{"path":"folder/guide.md"}},{"name":"write_file","arguments":{"path":"folder/guide.md","content":"x"}}]]"#;
    script(
        &sim,
        &chat,
        vec![
            json!({"tool_calls": [call("list_agents", json!({})),
                                  call("spawn_agent", json!({"task": task, "agent": "Docs"}))]}),
            json!({"text": "ok"}),
        ],
    )
    .await?;
    let results = tool_results(&turn(&client, &chat, "go").await?);
    assert!(results[0].contains(&docs_id), "{}", results[0]);
    assert!(results[0].contains("folder_mode"), "{}", results[0]);
    let subs = client
        .get(&format!("/conversations/{chat}/subagents"))
        .await?;
    let child = subs.body["subagents"][0]["id"]
        .as_str()
        .context("a sub-agent")?
        .to_string();
    let sub = client
        .get(&format!("/conversations/{chat}/subagents/{child}"))
        .await?;
    let child_results = tool_results(&sub.body["snapshot"]);
    assert!(child_results[0].contains("the guide"), "{child_results:?}");
    assert!(
        child_results[1].contains("may only read"),
        "{child_results:?}"
    );
    assert_eq!(std::fs::read_to_string(docs.join("guide.md"))?, "the guide");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folder_agent_is_exported_as_version_2_and_imported_with_its_folder_or_none(
) -> anyhow::Result<()> {
    let (_sim, _chatd, here) = start(&[]).await?;
    let (_sim2, _chatd2, there) = start(&[]).await?;
    let files = tempfile::tempdir()?;
    let notes = files.path().join("notes");
    std::fs::create_dir_all(&notes)?;
    let agent = make_agent(
        &here,
        json!({"name": "Notes", "folder": {"path": path_of(&notes), "mode": "read"}}),
    )
    .await?;
    let id = agent["id"].as_str().context("id")?;
    let file = here.get(&format!("/agents/{id}/export")).await?.body;
    assert_eq!(file["version"], 2, "{file}");
    assert_eq!(file["folder"]["mode"], "read");
    assert_eq!(
        file["folder"]["path"],
        json!(path_of(&notes.canonicalize()?))
    );

    // The same path is here: kept to it.
    let imported = there.post("/agents/import", file.clone()).await?;
    assert_eq!(imported.status, 201, "{imported:?}");
    assert_eq!(imported.body["agent"]["folder"]["state"], "ok");

    // Not here: kept to a folder with none chosen, said, and it does not start.
    let mut elsewhere = file.clone();
    elsewhere["folder"]["path"] = json!("/nowhere/on/this/box");
    let unset = there.post("/agents/import", elsewhere).await?;
    assert_eq!(unset.status, 201, "{unset:?}");
    let agent = &unset.body["agent"];
    assert_eq!(agent["folder"]["state"], "unset", "{unset:?}");
    assert_eq!(agent["folder"]["mode"], "read");
    assert!(
        unset.body["warnings"].to_string().contains("choose one"),
        "{unset:?}"
    );
    let made = there
        .post("/conversations", json!({"agent_id": agent["id"]}))
        .await?;
    assert_eq!(made.status, 409, "{made:?}");
    assert_eq!(made.body["error"]["type"], "agent_folder_missing");

    // Version 2 without a folder, version 1 with one: refused, nothing stored.
    let mut no_folder = file.clone();
    no_folder.as_object_mut().context("file")?.remove("folder");
    let mut v1 = file.clone();
    v1["version"] = json!(1);
    for body in [no_folder, v1] {
        let refused = there.post("/agents/import", body).await?;
        assert_eq!(refused.status, 400, "{refused:?}");
        assert_eq!(refused.body["error"]["field"], "folder", "{refused:?}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_chatd_keeps_chats_to_their_agents_folders_and_a_cleared_folder_frees_them(
) -> anyhow::Result<()> {
    let (sim, mut chatd, client) = start(&[]).await?;
    let files = tempfile::tempdir()?;
    let notes = files.path().join("notes");
    std::fs::create_dir_all(&notes)?;
    std::fs::write(notes.join("a.md"), "kept")?;
    let agent = make_agent(
        &client,
        json!({"name": "Keeper", "folder": {"path": path_of(&notes), "mode": "read"}}),
    )
    .await?;
    let id = agent["id"].as_str().context("id")?.to_string();
    let chat = chat_with(&client, &id).await?;
    // A chat made in the shared folder before its agent kept to one.
    let plain = make_agent(&client, json!({"name": "Later"})).await?;
    let later = plain["id"].as_str().context("id")?.to_string();
    let shared = client
        .post(
            "/conversations",
            json!({"agent_id": later, "workspace": "shared"}),
        )
        .await?;
    assert_eq!(shared.body["workspace"], "shared", "{shared:?}");
    let shared = shared.body["id"].as_str().context("id")?.to_string();
    let put = client
        .call(
            reqwest::Method::PUT,
            &format!("/agents/{later}"),
            Some(json!({"name": "Later", "folder": {"path": path_of(&notes)}})),
        )
        .await?;
    assert_eq!(put.status, 200, "{put:?}");

    chatd.restart().await?;
    let client = chatd.client();
    script(
        &sim,
        &chat,
        vec![
            json!({"tool_calls": [call("write_file", json!({"path": "folder/b.md", "content": "x"})),
                                  call("read_file", json!({"path": "folder/a.md"}))]}),
            json!({"text": "done"}),
        ],
    )
    .await?;
    let results = tool_results(&turn(&client, &chat, "after the restart").await?);
    assert!(results[0].contains("may only read"), "{results:?}");
    assert!(results[1].contains("kept"), "{results:?}");
    let refused = client
        .post(
            &format!("/conversations/{shared}/messages"),
            json!({"text": "hello"}),
        )
        .await?;
    assert_eq!(refused.status, 409, "{refused:?}");
    assert_eq!(refused.body["error"]["type"], "agent_gone");
    assert!(
        refused.body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("shared folder")),
        "{refused:?}"
    );

    // Cleared: the chat has its own folder only, and `folder/` is its own.
    let cleared = client
        .call(
            reqwest::Method::PUT,
            &format!("/agents/{id}"),
            Some(json!({"name": "Keeper", "folder": {"path": ""}})),
        )
        .await?;
    assert_eq!(cleared.status, 200, "{cleared:?}");
    assert_eq!(cleared.body["folder"], Value::Null);
    script(
        &sim,
        &chat,
        vec![
            json!({"tool_calls": [call("read_file", json!({"path": "folder/a.md"}))]}),
            json!({"text": "done"}),
        ],
    )
    .await?;
    let results = tool_results(&turn(&client, &chat, "and now").await?);
    assert!(
        results.last().is_some_and(|r| !r.contains("kept")),
        "{results:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_network_is_the_preset_its_chats_start_with_under_the_ceiling(
) -> anyhow::Result<()> {
    let sockets = tempfile::tempdir()?;
    let socket = sockets.path().join("egress.sock");
    let (_sim, chatd, client) =
        start(&[("QSE_EGRESS_SOCKET", socket.to_str().unwrap_or(""))]).await?;
    let _egressd = tandem_tests::harness::Egressd::start_at(
        &chatd.data_dir(),
        &chatd.dir.path().join("secrets.env"),
        &socket,
        "ceiling = \"registries\"\n",
    )
    .await?;
    let mut presets = Vec::new();
    for network in ["registries", "all"] {
        let agent = make_agent(
            &client,
            json!({"name": format!("Net {network}"), "network": network}),
        )
        .await?;
        assert_eq!(agent["network"], network, "{agent}");
        let made = client
            .post("/conversations", json!({"agent_id": agent["id"]}))
            .await?;
        let chat = made.body["id"].as_str().context("id")?.to_string();
        let egress = client.get(&format!("/conversations/{chat}/egress")).await?;
        presets.push(egress.body["preset"].clone());
    }
    // `all` is above the ceiling: the chat starts at the ceiling.
    assert_eq!(presets, vec![json!("registries"), json!("registries")]);
    let bad = client
        .post("/agents", json!({"name": "Bad", "network": "everywhere"}))
        .await?;
    assert_eq!(bad.status, 400, "{bad:?}");
    assert_eq!(bad.body["error"]["field"], "network");
    Ok(())
}
