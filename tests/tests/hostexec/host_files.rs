//! A host `bash` call's file changes (docs/files.md): found by a scan of the
//! workspace before and after, kept as one change set with the right ops,
//! undone to the byte; a command that makes 30,000 files stops the scan at
//! its bound and says so, in its result and its set alike.

use anyhow::Context;
use serde_json::{json, Value};
use tandem_tests::harness::{bash_call, sha256_of};

use crate::host::{finished, run_of, start};

fn ops(set: &Value) -> Vec<(String, String)> {
    set["changes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["path"].as_str().unwrap_or("").to_string(),
                c["op"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_s_changes_are_one_set_and_undone_to_the_byte() -> anyhow::Result<()> {
    let _not_the_bomb = crate::hostexec::shared().await;
    let s = start("on", &[]).await?;
    let chat = s.client.create_chat_in("auto").await?;
    let ws = s.hostexecd.chat_data.join("workspaces").join(&chat);
    std::fs::create_dir_all(&ws)?;
    for (name, text) in [
        ("keep.txt", "keep\n"),
        ("old.txt", "old bytes\n"),
        ("mv.txt", "moving\n"),
    ] {
        std::fs::write(ws.join(name), text)?;
    }
    let before: Vec<Option<String>> = ["keep.txt", "old.txt", "mv.txt"]
        .iter()
        .map(|n| sha256_of(&ws.join(n)))
        .collect();
    s.sim
        .faults(json!([
            bash_call("echo new > new.txt; echo more >> keep.txt; rm old.txt; mkdir -p d; mv mv.txt d/mv.txt"),
            {"tokens": 2}
        ]))
        .await?;
    let run = run_of(&s.client.send(&chat, "go").await?)?;
    let record = finished(&s.client, &chat, &run).await?;
    assert_eq!(record["status"], "done", "{record}");
    let listed = s
        .client
        .get(&format!("/conversations/{chat}/files/changes"))
        .await?;
    let mut sets = listed.body["changes"]
        .as_array()
        .context("changes")?
        .clone();
    sets.reverse();
    // The files found before the call are the person's; the call's set
    // holds exactly what the command did.
    assert_eq!(sets.len(), 2, "{sets:?}");
    assert_eq!(sets[0]["origin"], "outside");
    assert_eq!(sets[1]["origin"], "command");
    assert_eq!(sets[1]["run_id"], run.as_str());
    let pair = |p: &str, o: &str| (p.to_string(), o.to_string());
    assert_eq!(
        ops(&sets[1]),
        vec![
            pair("d/mv.txt", "moved"),
            pair("keep.txt", "changed"),
            pair("new.txt", "created"),
            pair("old.txt", "deleted"),
        ]
    );
    // The undo puts every byte back and removes what the command made.
    let rev = sets[1]["rev"].as_i64().context("rev")?;
    let undone = s
        .client
        .post(
            &format!("/conversations/{chat}/files/undo"),
            json!({"rev": rev}),
        )
        .await?;
    assert_eq!(undone.status, 200, "{undone:?}");
    let after: Vec<Option<String>> = ["keep.txt", "old.txt", "mv.txt"]
        .iter()
        .map(|n| sha256_of(&ws.join(n)))
        .collect();
    assert_eq!(after, before);
    assert!(!ws.join("new.txt").exists());
    assert!(!ws.join("d/mv.txt").exists());

    // Undoing the undo puts the command's work back, byte for byte; then the
    // whole turn's undo (by its run) takes it away again.
    let redo_rev = undone.body["rev"].as_i64().context("the undo's rev")?;
    let redone = s
        .client
        .post(
            &format!("/conversations/{chat}/files/undo"),
            json!({"rev": redo_rev}),
        )
        .await?;
    assert_eq!(redone.status, 200, "{redone:?}");
    assert_eq!(std::fs::read_to_string(ws.join("new.txt"))?, "new\n");
    assert_eq!(
        std::fs::read_to_string(ws.join("keep.txt"))?,
        "keep\nmore\n"
    );
    assert_eq!(std::fs::read_to_string(ws.join("d/mv.txt"))?, "moving\n");
    assert!(!ws.join("old.txt").exists());
    let turn = s
        .client
        .post(
            &format!("/conversations/{chat}/files/undo"),
            json!({"run": run}),
        )
        .await?;
    assert_eq!(turn.status, 200, "{turn:?}");
    let after_turn: Vec<Option<String>> = ["keep.txt", "old.txt", "mv.txt"]
        .iter()
        .map(|n| sha256_of(&ws.join(n)))
        .collect();
    assert_eq!(after_turn, before);
    assert!(!ws.join("new.txt").exists());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_thousand_files_stop_the_scan_at_its_bound_and_say_so() -> anyhow::Result<()> {
    let _not_the_bomb = crate::hostexec::shared().await;
    let s = start("on", &[]).await?;
    let chat = s.client.create_chat_in("auto").await?;
    s.sim
        .faults(json!([
            bash_call("mkdir many && cd many && seq -w 1 30000 | xargs touch"),
            {"tokens": 2}
        ]))
        .await?;
    let mut device = s.client.events(&chat, 0).await?;
    let run = run_of(&s.client.send(&chat, "make many").await?)?;
    let record = finished(&s.client, &chat, &run).await?;
    assert_eq!(record["status"], "done", "{record}");
    let events = device
        .read_until(std::time::Duration::from_secs(60), |e| {
            e.kind == "run.finished"
        })
        .await?;
    let card = events
        .iter()
        .find(|e| e.kind == "tool.finished")
        .map(|e| e.data["card"].clone())
        .context("tool.finished")?;
    let note = card["note"].as_str().unwrap_or("");
    assert!(note.contains("stopped at 20000 entries"), "{card}");
    // What the card says, the set holds, and the model read the same.
    let rev = card["rev"].as_i64().context("rev")?;
    let listed = s
        .client
        .get(&format!("/conversations/{chat}/files/changes"))
        .await?;
    let set = listed.body["changes"]
        .as_array()
        .and_then(|sets| sets.iter().find(|s| s["rev"] == rev))
        .context("the card's set")?
        .clone();
    let kept = set["changes"].as_array().map(Vec::len).unwrap_or(0);
    let shown = card["files"].as_array().map(Vec::len).unwrap_or(0);
    assert_eq!(
        shown as u64 + card["files_more"].as_u64().unwrap_or(0),
        kept as u64
    );
    assert!((19_000..=20_000).contains(&kept), "{kept}");
    assert_eq!(set["note"], card["note"]);
    let results = tandem_tests::harness::tool_results(&s.client.snapshot(&chat).await?);
    assert!(
        results[0].contains(&format!("{kept} created (change set {rev}")),
        "{}",
        results[0]
    );
    assert!(
        results[0].contains("stopped at 20000 entries"),
        "{}",
        results[0]
    );
    Ok(())
}
