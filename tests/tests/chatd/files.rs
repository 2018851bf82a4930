//! File history end to end (docs/files.md): the real `chatd` and
//! `engine-sim`, scripted file tool calls on a real workspace, every change
//! kept as a change set, listed, and undone to the byte; an undo that would
//! overwrite a person's later edit refuses and names the file.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};
use tandem_tests::harness::{du, run_id, sha256_of, Chatd, Client, Sim};

const QUICK: Duration = Duration::from_secs(20);

fn call(name: &str, arguments: Value) -> Value {
    json!({"tool_calls": [{"name": name, "arguments": arguments}]})
}

async fn start() -> anyhow::Result<(Sim, Chatd, Client)> {
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start(&sim.url(), &[]).await?;
    let client = chatd.client();
    Ok((sim, chatd, client))
}

/// Sends `text` and waits for its run to end `done`; the run id.
async fn run(client: &Client, chat: &str, text: &str) -> anyhow::Result<String> {
    let run = run_id(&client.send(chat, text).await?)?;
    let record = client
        .wait_run(
            chat,
            &run,
            &["done", "failed", "stopped", "interrupted"],
            QUICK,
        )
        .await?;
    anyhow::ensure!(record["status"] == "done", "{record}");
    Ok(run)
}

/// The chat's change sets, oldest first.
async fn sets(client: &Client, chat: &str) -> anyhow::Result<Vec<Value>> {
    let answer = client
        .get(&format!("/conversations/{chat}/files/changes?limit=200"))
        .await?;
    anyhow::ensure!(answer.status == 200, "{answer:?}");
    let mut sets = answer.body["changes"]
        .as_array()
        .context("changes")?
        .clone();
    sets.reverse();
    Ok(sets)
}

fn ops(set: &Value) -> Vec<(String, String)> {
    set["changes"]
        .as_array()
        .map(|c| {
            c.iter()
                .map(|c| {
                    (
                        c["path"].as_str().unwrap_or("").to_string(),
                        c["op"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

async fn undo(
    client: &Client,
    chat: &str,
    body: Value,
) -> anyhow::Result<tandem_tests::harness::Answer> {
    client
        .post(&format!("/conversations/{chat}/files/undo"), body)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_file_tool_change_is_kept_and_undone_to_the_byte() -> anyhow::Result<()> {
    let (sim, chatd, client) = start().await?;
    let chat = client.create_chat_in("auto").await?;
    let ws = chatd.data_dir().join("workspaces").join(&chat);
    std::fs::create_dir_all(&ws)?;
    std::fs::write(ws.join("given.txt"), "the person's notes\n")?;
    let given = sha256_of(&ws.join("given.txt"));
    sim.faults(json!([
        call("write_file", json!({"path": "a.md", "content": "one\n"})),
        call("edit_file", json!({"path": "a.md", "old_string": "one", "new_string": "two"})),
        call("move_file", json!({"from": "a.md", "to": "docs/a.md"})),
        call("write_file", json!({"path": "work/helper.py", "content": "print(1)\n"})),
        call("delete_file", json!({"path": "given.txt"})),
        {"tokens": 3},
    ]))
    .await?;
    let mut device = client.events(&chat, 0).await?;
    let first = run(&client, &chat, "tidy up").await?;
    let events = device
        .read_until(QUICK, |e| e.kind == "run.finished")
        .await?;

    // One set per call, each with the right op; the file there before the
    // run is the person's, kept as found when a call first reached for it.
    let all = sets(&client, &chat).await?;
    let seen: Vec<(String, Vec<(String, String)>)> = all
        .iter()
        .map(|s| (s["origin"].as_str().unwrap_or("").to_string(), ops(s)))
        .collect();
    let pair = |p: &str, o: &str| (p.to_string(), o.to_string());
    assert_eq!(
        seen,
        vec![
            ("tool".into(), vec![pair("a.md", "created")]),
            ("tool".into(), vec![pair("a.md", "changed")]),
            ("tool".into(), vec![pair("docs/a.md", "moved")]),
            ("tool".into(), vec![pair("work/helper.py", "created")]),
            ("outside".into(), vec![pair("given.txt", "created")]),
            ("tool".into(), vec![pair("given.txt", "deleted")]),
        ]
    );
    assert_eq!(all[2]["changes"][0]["from"], "a.md");
    assert!(all
        .iter()
        .filter(|s| s["origin"] == "tool")
        .all(|s| s["run_id"] == first.as_str()));
    assert!(all[4]["run_id"].is_null());

    // Each tool line carries its card, live and in the snapshot.
    let cards: Vec<&Value> = events
        .iter()
        .filter(|e| e.kind == "tool.finished")
        .map(|e| &e.data["card"])
        .collect();
    assert_eq!(cards.len(), 5);
    assert!(
        cards.iter().all(|c| c["kind"] == "files_change"),
        "{cards:?}"
    );
    assert_eq!(cards[3]["files"][0]["kind"], "working");
    assert_eq!(cards[2]["files"][0]["kind"], "deliverable");
    let snapshot = client.snapshot(&chat).await?;
    let stored: Vec<Value> = snapshot["messages"]
        .as_array()
        .context("messages")?
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["card"]["rev"].clone())
        .collect();
    let live: Vec<Value> = cards.iter().map(|c| c["rev"].clone()).collect();
    assert_eq!(stored, live);

    // The list: what is there now, who brought it, which turn.
    let list = client.get(&format!("/conversations/{chat}/files")).await?;
    assert_eq!(list.status, 200, "{list:?}");
    let files = list.body["files"].as_array().context("files")?;
    let paths: Vec<&str> = files.iter().filter_map(|f| f["path"].as_str()).collect();
    assert_eq!(paths, ["docs/a.md", "work/helper.py"]);
    assert_eq!(files[0]["origin"], "tool");
    assert_eq!(files[0]["turn"], first.as_str());
    assert_eq!(files[0]["size"], 4);
    assert_eq!(files[1]["kind"], "working");
    let history = client
        .get(&format!(
            "/conversations/{chat}/files/history?path=docs/a.md"
        ))
        .await?;
    assert_eq!(history.body["changes"].as_array().map(Vec::len), Some(1));

    // Undo the deletion: the bytes come back exactly.
    let rev = |i: usize| all[i]["rev"].as_i64().unwrap_or(0);
    let back = undo(&client, &chat, json!({"rev": rev(5)})).await?;
    assert_eq!(back.status, 200, "{back:?}");
    assert_eq!(sha256_of(&ws.join("given.txt")), given);
    // Undo the move, then undo that undo.
    let moved_back = undo(&client, &chat, json!({"rev": rev(2)})).await?;
    assert_eq!(moved_back.status, 200, "{moved_back:?}");
    assert_eq!(std::fs::read_to_string(ws.join("a.md"))?, "two\n");
    assert!(!ws.join("docs/a.md").exists());
    let redo = moved_back.body["rev"].as_i64().context("the undo's rev")?;
    assert_eq!(
        undo(&client, &chat, json!({"rev": redo})).await?.status,
        200
    );
    assert_eq!(std::fs::read_to_string(ws.join("docs/a.md"))?, "two\n");
    assert!(!ws.join("a.md").exists());

    // Undo the whole turn: everything as before it (given.txt already back).
    let turn = undo(&client, &chat, json!({"run": first})).await?;
    assert_eq!(turn.status, 200, "{turn:?}");
    // The turn's undo names every set it put back: a device that opens the
    // chat later sees each of the turn's lines undone.
    let after = sets(&client, &chat).await?;
    let last = after.last().context("the turn's undo")?;
    assert_eq!(last["origin"], "user");
    let named: Vec<i64> = last["undoes"]
        .as_array()
        .context("undoes")?
        .iter()
        .filter_map(Value::as_i64)
        .collect();
    let of_turn: Vec<i64> = all
        .iter()
        .filter(|s| s["run_id"] == first.as_str())
        .filter_map(|s| s["rev"].as_i64())
        .collect();
    assert_eq!(named, of_turn);
    let mut left: Vec<String> = walk(&ws);
    left.sort();
    assert_eq!(left, ["given.txt"]);
    assert_eq!(sha256_of(&ws.join("given.txt")), given);
    Ok(())
}

/// Regular files under `root`, relative, chatd's `.tandem` left out.
fn walk(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let rel = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .to_string_lossy()
                .to_string();
            if rel.starts_with(".tandem") {
                continue;
            }
            if path.is_dir() {
                todo.push(path);
            } else {
                out.push(rel);
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undo_never_overwrites_a_later_edit() -> anyhow::Result<()> {
    let (sim, chatd, client) = start().await?;
    let chat = client.create_chat_in("auto").await?;
    let ws = chatd.data_dir().join("workspaces").join(&chat);
    sim.faults(json!([
        call("write_file", json!({"path": "c.txt", "content": "the model's\n"})),
        call("write_file", json!({"path": "d.txt", "content": "also the model's\n"})),
        {"tokens": 2},
    ]))
    .await?;
    let turn = run(&client, &chat, "write two files").await?;
    // The person edits one of them by hand afterwards.
    std::fs::write(ws.join("c.txt"), "my own edit\n")?;
    let refused = undo(&client, &chat, json!({"run": turn})).await?;
    assert_eq!(refused.status, 409, "{refused:?}");
    assert_eq!(
        refused.body["error"]["type"], "undo_conflict",
        "{refused:?}"
    );
    let conflicts = &refused.body["error"]["conflicts"];
    assert_eq!(conflicts[0]["path"], "c.txt", "{refused:?}");
    assert_eq!(conflicts.as_array().map(Vec::len), Some(1));
    assert!(refused.body["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("c.txt") && m.contains("changed since")));
    // Nothing changed.
    assert_eq!(std::fs::read_to_string(ws.join("c.txt"))?, "my own edit\n");
    assert!(ws.join("d.txt").exists());
    // The person's edit was kept as its own set, found at the undo's scan.
    let all = sets(&client, &chat).await?;
    assert_eq!(all.last().context("sets")?["origin"], "outside");

    // skip_conflicts undoes the rest and says what it left.
    let partly = undo(&client, &chat, json!({"run": turn, "skip_conflicts": true})).await?;
    assert_eq!(partly.status, 200, "{partly:?}");
    assert_eq!(partly.body["skipped"][0]["path"], "c.txt");
    assert!(!ws.join("d.txt").exists());
    assert_eq!(std::fs::read_to_string(ws.join("c.txt"))?, "my own edit\n");
    // It names as undone only d.txt's set: c.txt's was left as it is.
    let now = sets(&client, &chat).await?;
    let d_set = now
        .iter()
        .find(|s| s["origin"] == "tool" && ops(s)[0].0 == "d.txt")
        .and_then(|s| s["rev"].as_i64());
    assert_eq!(now.last().context("the undo")?["undoes"], json!([d_set]));

    // Bad input names the field and changes nothing.
    let both = undo(&client, &chat, json!({"rev": 1, "run": turn})).await?;
    assert_eq!(both.status, 400, "{both:?}");
    assert_eq!(both.body["error"]["field"], "rev");
    let missing = undo(&client, &chat, json!({"rev": 999_999})).await?;
    assert_eq!(missing.status, 404, "{missing:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_sent_is_the_person_s_set_and_shown_inline_only_when_safe() -> anyhow::Result<()> {
    let (_sim, _chatd, client) = start().await?;
    let chat = client.create_chat_in("auto").await?;
    let sent = client
        .post(
            &format!("/conversations/{chat}/messages"),
            json!({"text": "[sim tokens=2]", "attachments": [
                {"name": "notes.txt", "text": "mine\n"},
                {"name": "page.html", "text": "<script>alert(1)</script>"}
            ]}),
        )
        .await?;
    assert_eq!(sent.status, 202, "{sent:?}");
    let all = sets(&client, &chat).await?;
    assert_eq!(all[0]["origin"], "user", "{all:?}");
    assert_eq!(
        ops(&all[0]),
        vec![
            ("uploads/notes.txt".to_string(), "created".to_string()),
            ("uploads/page.html".to_string(), "created".to_string()),
        ]
    );
    let disposition = |a: &tandem_tests::harness::Answer| {
        a.headers
            .get("content-disposition")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let text = client
        .get(&format!(
            "/conversations/{chat}/files/content?path=uploads/notes.txt&inline=1"
        ))
        .await?;
    assert_eq!(text.status, 200);
    assert!(disposition(&text).starts_with("inline;"), "{text:?}");
    // HTML is never shown in place, whatever is asked.
    let html = client
        .get(&format!(
            "/conversations/{chat}/files/content?path=uploads/page.html&inline=1"
        ))
        .await?;
    assert_eq!(html.status, 200);
    assert!(disposition(&html).starts_with("attachment;"), "{html:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trash_keeps_a_deleted_file_until_it_is_deleted_for_good() -> anyhow::Result<()> {
    let (sim, chatd, client) = start().await?;
    let chat = client.create_chat_in("auto").await?;
    let ws = chatd.data_dir().join("workspaces").join(&chat);
    let blobs = chatd.data_dir().join("blobs");
    let big: String = (0..300_000)
        .map(|i| char::from(b'a' + (i * 7 % 26) as u8))
        .collect();
    sim.faults(json!([
        call("write_file", json!({"path": "big.txt", "content": big})),
        call("write_file", json!({"path": "keep.txt", "content": "stays\n"})),
        {"tokens": 2},
    ]))
    .await?;
    run(&client, &chat, "write").await?;
    let made = sha256_of(&ws.join("big.txt"));
    let files = |q: &str| format!("/conversations/{chat}/files{q}");

    // The person deletes it: gone from the folder, listed in the trash.
    let deleted = client
        .call(reqwest::Method::DELETE, &files("?path=big.txt"), None)
        .await?;
    assert_eq!(deleted.status, 200, "{deleted:?}");
    assert!(!ws.join("big.txt").exists());
    let trash = client.get(&files("/trash")).await?;
    assert_eq!(trash.body["files"][0]["path"], "big.txt", "{trash:?}");
    assert_eq!(trash.body["files"][0]["size"], 300_000);
    assert_eq!(trash.body["files"][0]["origin"], "user");
    assert_eq!(trash.body["days"], 30);

    // Restored: the same bytes, and the trash is empty again.
    let restored = client
        .post(&files("/trash/restore"), json!({"path": "big.txt"}))
        .await?;
    assert_eq!(restored.status, 200, "{restored:?}");
    assert_eq!(sha256_of(&ws.join("big.txt")), made);
    let again = client
        .post(&files("/trash/restore"), json!({"path": "big.txt"}))
        .await?;
    assert_eq!(again.status, 404, "{again:?}");

    // Deleted again and then for good: the kept bytes leave the disk;
    // keep.txt's stay.
    let deleted = client
        .call(reqwest::Method::DELETE, &files("?path=big.txt"), None)
        .await?;
    assert_eq!(deleted.status, 200, "{deleted:?}");
    let before = du(&blobs);
    let purged = client.post(&files("/trash/purge"), json!({})).await?;
    assert_eq!(purged.status, 200, "{purged:?}");
    assert_eq!(purged.body["files"], 1, "{purged:?}");
    let freed = purged.body["bytes"].as_u64().unwrap_or(0);
    assert_eq!(freed, 300_000, "{purged:?}");
    assert_eq!(before - du(&blobs), freed);
    let trash = client.get(&files("/trash")).await?;
    assert_eq!(trash.body["files"].as_array().map(Vec::len), Some(0));
    assert_eq!(std::fs::read_to_string(ws.join("keep.txt"))?, "stays\n");

    // Bad input names the field and changes nothing.
    let none = client
        .post(&files("/trash/purge"), json!({"paths": []}))
        .await?;
    assert_eq!(none.status, 400, "{none:?}");
    assert_eq!(none.body["error"]["field"], "paths");
    let nameless = client
        .call(reqwest::Method::DELETE, &files(""), None)
        .await?;
    assert_eq!(nameless.status, 400, "{nameless:?}");
    assert_eq!(nameless.body["error"]["field"], "path");
    let missing = client
        .call(reqwest::Method::DELETE, &files("?path=nothere.txt"), None)
        .await?;
    assert_eq!(missing.status, 404, "{missing:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_helper_outside_work_gets_one_nudge_a_turn_never_a_refusal() -> anyhow::Result<()> {
    let (sim, chatd, client) = start().await?;
    let chat = client.create_chat_in("auto").await?;
    let ws = chatd.data_dir().join("workspaces").join(&chat);
    let turn = |n: u32| {
        json!([
            call("write_file", json!({"path": "work/ok.py", "content": format!("print({n})\n")})),
            call("write_file", json!({"path": "helper.py", "content": format!("print({n})\n")})),
            call("write_file", json!({"path": "run.sh", "content": format!("echo {n}\n")})),
            {"tokens": 2},
        ])
    };
    sim.faults(turn(1)).await?;
    run(&client, &chat, "first").await?;
    sim.faults(turn(2)).await?;
    run(&client, &chat, "second").await?;
    let results = tandem_tests::harness::tool_results(&client.snapshot(&chat).await?);
    let nudged: Vec<bool> = results.iter().map(|r| r.contains("[work/: ")).collect();
    // Once a turn, at the first helper outside work/; the writes all ran.
    assert_eq!(
        nudged,
        [false, true, false, false, true, false],
        "{results:?}"
    );
    assert!(
        results[1].contains("`helper.py` looks like a script"),
        "{}",
        results[1]
    );
    assert!(ws.join("helper.py").exists() && ws.join("run.sh").exists());
    Ok(())
}

/// The last user message of an engine request, as its text parts joined.
fn question_of(request: &Value) -> String {
    let question = request["body"]["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .map(|m| m["content"].clone())
        .unwrap_or(Value::Null);
    match question {
        Value::String(text) => text,
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_turn_tells_the_model_the_newest_files_once() -> anyhow::Result<()> {
    let (sim, _chatd, client) = start().await?;
    let chat = client.create_chat_in("auto").await?;
    // A first turn without files: its question carries no list.
    sim.faults(json!([
        call("write_file", json!({"path": "report.md", "content": "# Report\n"})),
        {"tokens": 3},
    ]))
    .await?;
    run(&client, &chat, "write the report").await?;
    let first = sim.requests().await?;
    assert!(
        !question_of(&first[0]).contains("[The files of this chat"),
        "{}",
        question_of(&first[0])
    );
    // The next turn: its question carries the list, and every step of the
    // turn sends the same list (a file made mid-turn waits for the next).
    sim.faults(json!([
        call("write_file", json!({"path": "work/notes.txt", "content": "n\n"})),
        {"tokens": 3},
    ]))
    .await?;
    run(&client, &chat, "add notes").await?;
    let all = sim.requests().await?;
    let turn: Vec<String> = all[first.len()..].iter().map(question_of).collect();
    assert_eq!(turn.len(), 2, "{turn:?}");
    let list = "[The files of this chat, newest change first (1 in all):\n\
                - report.md (9 bytes, last changed by a file tool)]";
    assert!(turn[0].ends_with(list), "{}", turn[0]);
    assert_eq!(turn[0], turn[1], "the list changed within the turn");
    // The turn after names both, the newest first.
    sim.faults(json!([{"tokens": 3}])).await?;
    run(&client, &chat, "thanks").await?;
    let last = sim.requests().await?;
    let third = question_of(last.last().context("the third turn's request")?);
    assert!(
        third.contains(
            "(2 in all):\n- work/notes.txt (2 bytes, last changed by a file tool; a working file)\n- report.md"
        ),
        "{third}"
    );
    Ok(())
}
