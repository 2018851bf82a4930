//! `Inv::AgentFolder` at the end of the sub-agents part, for its chat with
//! the saved agent kept to a folder (`agent_folder.rs`): from the folder on
//! the disk, what the load saw, and the chat's final snapshot (asked again
//! while chatd is down):
//!
//! - the folder holds the same files with the same bytes as at the start;
//! - each time it was away a message and a new chat with the agent were
//!   refused 409 `agent_folder_missing`, the agent showed its folder
//!   `missing`, the chat's messages and waiting messages were as before,
//!   and a message once it was back was taken (202);
//! - no refused message is stored (the ones sent while it was away, the one
//!   after the agent's deletion);
//! - every run of the chat ended, within the part's wait after the load;
//! - each scripted tool call was answered as the folder's mode says: a read
//!   of `folder/<file>` with its text, a write there refused ("may only
//!   read"), a write of `own.md` done, and `own.md` holds one of the texts
//!   written;
//! - the templates, the run history and the agent's deletion answered as
//!   promised.

use super::*;

use reqwest::Method;

use crate::agent_folder::{answer, FolderRun, AGENT, DELETED_TEXT, INTRUDER, MISSING};
use crate::subagents::SETTLE;

/// The folder's files: path inside it → bytes (folders as `name/`).
fn files_of(root: &Path) -> std::io::Result<BTreeMap<String, Vec<u8>>> {
    let mut found = BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            let rel = path
                .strip_prefix(root)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            if path.is_dir() {
                todo.push(path);
            } else {
                found.insert(rel, std::fs::read(&path)?);
            }
        }
    }
    Ok(found)
}

/// `Inv::AgentFolder`; the summary's lines.
pub(crate) async fn check(shared: &Shared, run: &FolderRun) -> Vec<String> {
    let bad = |what: String| {
        shared.violate(
            Inv::AgentFolder,
            format!("agent folder: chat {}: {what}", run.chat),
        )
    };
    // The folder's files, as they were.
    match files_of(&run.folder) {
        Ok(now) if now == run.files => {}
        Ok(now) => bad(format!(
            "its folder changed: {:?} at the start, {:?} now",
            run.files.keys().collect::<Vec<_>>(),
            now.iter()
                .map(|(k, v)| format!("{k} ({} bytes)", v.len()))
                .collect::<Vec<_>>()
        )),
        Err(err) => bad(format!("its folder cannot be read: {err}")),
    }
    for (what, result) in [
        ("the templates", &run.templates),
        ("the run history", &run.history),
        ("the agent's deletion", &run.deleted),
    ] {
        if let Err(why) = result {
            bad(format!("{what}: {why}"));
        }
    }
    // Every time away: refused, nothing stored, taken again once back.
    for a in &run.aways {
        let missing =
            |r: &Result<(u16, String), String>| matches!(r, Ok((409, kind)) if kind == MISSING);
        if !missing(&a.send) {
            bad(format!(
                "away #{} at {:.1} s: a message answered {:?}",
                a.n, a.t, a.send
            ));
        }
        if !missing(&a.create) {
            bad(format!(
                "away #{} at {:.1} s: a new chat with the agent answered {:?}",
                a.n, a.t, a.create
            ));
        }
        if a.shown != "missing" {
            bad(format!(
                "away #{}: the agent showed its folder as {}",
                a.n, a.shown
            ));
        }
        if a.after.is_none() || a.before != a.after {
            bad(format!(
                "away #{} at {:.1} s: the refused message changed the chat: {:?} → {:?}",
                a.n, a.t, a.before, a.after
            ));
        }
        if a.back != Ok(202) {
            bad(format!(
                "away #{}: a message once the folder was back answered {:?}",
                a.n, a.back
            ));
        }
    }
    if let Err(what) = &run.settled {
        bad(format!(
            "still working {} s after the load: {what}",
            SETTLE.as_secs()
        ));
    }
    let mut counts = Counts::default();
    match answer(
        shared,
        Method::GET,
        &format!("/conversations/{}", run.chat),
        None,
    )
    .await
    {
        Ok((200, snapshot)) => check_snapshot(run, &snapshot, &mut counts, &bad),
        other => bad(format!("no snapshot: {other:?}")),
    }
    match &run.own_read {
        Ok(Some(text)) if run.own_contents.contains(text) => {}
        Ok(None) if counts.own == 0 => {}
        other => bad(format!("own.md after {} writes: {other:?}", counts.own)),
    }
    let t = &run.tally;
    let refused = run
        .aways
        .iter()
        .filter(|a| a.before == a.after && matches!(&a.send, Ok((409, kind)) if kind == MISSING))
        .count();
    vec![
        format!(
            "agent folder: {AGENT:?} kept to {} files (read only); its chat: {} turns sent ({} waited as pending, {} after a chatd restart, {} on a script not taken yet), {} not sent while engine-sim was away, {} steps waited, {} requests found chatd down",
            run.files.len(), t.turns, t.pending, t.after_restart, t.leftover, t.engine_away, t.busy, t.down
        ),
        format!(
            "agent folder: tool calls: {} reads of folder/ (each its file's text), {} writes to folder/{INTRUDER} refused (\"may only read\"), {} writes of own.md; {} left with no result (a kill)",
            counts.reads, counts.refused, counts.own, counts.unanswered
        ),
        format!(
            "agent folder: renamed away {} times (at {} s; {} after a chatd restart): {refused} messages refused 409 agent_folder_missing with nothing stored, new chats refused too, a message taken once it was back; runs {}; {}",
            run.aways.len(),
            run.aways.iter().map(|a| format!("{:.1}", a.t)).collect::<Vec<_>>().join(", "),
            run.aways.iter().filter(|a| a.after_restart).count(),
            counts.runs.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", "),
            match &run.settled {
                Ok(s) => format!("all ended {s:.1} s after the load"),
                Err(_) => "NOT all ended".into(),
            }
        ),
        format!(
            "agent folder: templates: {}; run history: {}; the agent deleted: {}; the folder's files unchanged",
            shown(&run.templates), shown(&run.history), shown(&run.deleted)
        ),
    ]
}

fn shown(result: &Result<String, String>) -> String {
    match result {
        Ok(what) => what.clone(),
        Err(why) => format!("NOT: {why}"),
    }
}

/// What the final snapshot held.
#[derive(Default)]
struct Counts {
    reads: u64,
    refused: u64,
    own: u64,
    unanswered: u64,
    runs: BTreeMap<String, u64>,
}

/// Every run ended; no refused text stored; each tool call answered as
/// the folder's mode says.
fn check_snapshot(run: &FolderRun, snapshot: &Value, counts: &mut Counts, bad: &dyn Fn(String)) {
    for r in snapshot["runs"].as_array().into_iter().flatten() {
        let status = r["status"].as_str().unwrap_or("?");
        *counts.runs.entry(status.to_string()).or_default() += 1;
        if !matches!(status, "done" | "stopped" | "failed" | "interrupted") {
            bad(format!("the run {} is {status} at the end", r["id"]));
        }
    }
    let mut refused: Vec<&str> = run.aways.iter().map(|a| a.text.as_str()).collect();
    refused.push(DELETED_TEXT);
    let messages = snapshot["messages"].as_array().cloned().unwrap_or_default();
    let waiting = snapshot["pending"].as_array().cloned().unwrap_or_default();
    for m in messages.iter().chain(&waiting) {
        let text = m["text"].as_str().unwrap_or("");
        if let Some(r) = refused.iter().find(|r| text.contains(**r)) {
            bad(format!("a refused message is stored: {r:?} as {}", m["id"]));
        }
    }
    let results: HashMap<&str, &str> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| {
            Some((
                m["tool_call_id"].as_str()?,
                m["text"].as_str().unwrap_or(""),
            ))
        })
        .collect();
    for call in messages
        .iter()
        .flat_map(|m| m["tool_calls"].as_array().into_iter().flatten())
    {
        let name = call["function"]["name"].as_str().unwrap_or("");
        let args: Value = call["function"]["arguments"]
            .as_str()
            .and_then(|a| serde_json::from_str(a).ok())
            .unwrap_or(Value::Null);
        let path = args["path"].as_str().unwrap_or("");
        let Some(text) = call["id"].as_str().and_then(|id| results.get(id)) else {
            counts.unanswered += 1;
            continue;
        };
        let said = excerpt(text);
        match (name, path.strip_prefix("folder/")) {
            ("read_file", Some(file)) => {
                let want = run
                    .files
                    .get(file)
                    .map(|b| String::from_utf8_lossy(b).trim().to_string());
                match want {
                    Some(want) if text.contains(&want) => counts.reads += 1,
                    _ => bad(format!("read_file {path} answered {said}")),
                }
            }
            ("write_file", Some(_)) if text.contains("may only read") => counts.refused += 1,
            ("write_file", Some(_)) => bad(format!(
                "write_file {path} in the read-only folder answered {said}"
            )),
            ("write_file", None) if text.starts_with(&format!("wrote {path}")) => counts.own += 1,
            _ => bad(format!("{name} {path} answered {said}")),
        }
    }
}
