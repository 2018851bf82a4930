//! `tandem chat files`: a chat's files and its change sets, and undo.

use std::process::ExitCode;

use anyhow::bail;
use serde_json::{json, Value};

use crate::client::Client;

/// Change sets printed at most.
const SHOWN: usize = 20;

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or("?")
}

/// Lists the chat's files and its newest change sets.
pub async fn show(chat: &str) -> anyhow::Result<ExitCode> {
    let client = Client::new()?;
    let files = client
        .call(
            reqwest::Method::GET,
            &format!("/conversations/{chat}/files"),
            None,
        )
        .await?;
    let list = files["files"].as_array().cloned().unwrap_or_default();
    println!("{chat}: {} file(s)", list.len());
    for f in &list {
        println!(
            "  {:<40} {:>10} B  {:<11} {:<7} rev {}",
            text(&f["path"]),
            f["size"],
            text(&f["kind"]),
            text(&f["origin"]),
            f["rev"]
        );
    }
    let changes = client
        .call(
            reqwest::Method::GET,
            &format!("/conversations/{chat}/files/changes?limit={SHOWN}"),
            None,
        )
        .await?;
    let sets = changes["changes"].as_array().cloned().unwrap_or_default();
    if !sets.is_empty() {
        println!("change sets, newest first (undo one: tandem chat files {chat} undo REV):");
    }
    for set in &sets {
        let paths: Vec<String> = set["changes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| format!("{} {}", text(&c["op"]), text(&c["path"])))
            .collect();
        let mut line = format!(
            "  rev {:<6} {:<8} {}",
            set["rev"],
            text(&set["origin"]),
            paths.iter().take(3).cloned().collect::<Vec<_>>().join(", ")
        );
        if paths.len() > 3 {
            line.push_str(&format!(" and {} more", paths.len() - 3));
        }
        if let Some(run) = set["run_id"].as_str() {
            line.push_str(&format!("  ({run})"));
        }
        let undoes: Vec<String> = set["undoes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(Value::to_string)
            .collect();
        if !undoes.is_empty() {
            line.push_str(&format!("  (undoes rev {})", undoes.join(", ")));
        }
        println!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Undoes a change set (a number) or a whole turn (a run id).
pub async fn undo(chat: &str, target: &str, skip_conflicts: bool) -> anyhow::Result<ExitCode> {
    let mut body = match target.parse::<i64>() {
        Ok(rev) => json!({"rev": rev}),
        Err(_) if target.starts_with("r_") => json!({"run": target}),
        Err(_) => bail!("`{target}` is neither a change set's number nor a run id (r_…)"),
    };
    if skip_conflicts {
        body["skip_conflicts"] = json!(true);
    }
    let route = format!("/conversations/{chat}/files/undo");
    let answer = match Client::new()?
        .send_or_refuse(reqwest::Method::POST, &route, &[], Some(body))
        .await?
    {
        Ok(answer) => answer,
        Err(refused) => {
            if refused["error"]["type"] == "undo_conflict" {
                eprintln!(
                    "tandem: nothing was changed; --skip-conflicts puts back the other files"
                );
            }
            return Ok(ExitCode::FAILURE);
        }
    };
    match answer["rev"].as_i64() {
        Some(rev) => println!("undone; the undo is change set {rev} (undo it to redo)"),
        None => println!("nothing to undo: the files already are as they were"),
    }
    for f in answer["card"]["files"].as_array().into_iter().flatten() {
        println!("  {} {}", text(&f["op"]), text(&f["path"]));
    }
    for s in answer["skipped"].as_array().into_iter().flatten() {
        println!("  left {}: {}", text(&s["path"]), text(&s["reason"]));
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints the chat's trash.
pub async fn trash(chat: &str) -> anyhow::Result<ExitCode> {
    let client = Client::new()?;
    let answer = client
        .call(
            reqwest::Method::GET,
            &format!("/conversations/{chat}/files/trash"),
            None,
        )
        .await?;
    let files = answer["files"].as_array().cloned().unwrap_or_default();
    println!(
        "{chat}: {} file(s) in the trash (kept {} days; restore one: tandem chat files {chat} restore PATH)",
        files.len(),
        answer["days"]
    );
    for f in &files {
        println!(
            "  {:<40} {:>10} B  deleted {} by {}",
            text(&f["path"]),
            f["size"],
            text(&f["deleted"]),
            text(&f["origin"])
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Uploads a local file to `to` (default: its name) in the chat's folder.
pub async fn put(
    chat: &str,
    local: &str,
    to: Option<String>,
    base: Option<i64>,
) -> anyhow::Result<ExitCode> {
    let local = std::path::PathBuf::from(local);
    let path = match to {
        Some(to) => to,
        None => local
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| anyhow::anyhow!("{} names no file", local.display()))?,
    };
    let settings: Vec<(&str, String)> = base.map(|b| ("base", b.to_string())).into_iter().collect();
    let sent = Client::new()?
        .send_form(
            reqwest::Method::PUT,
            &format!("/conversations/{chat}/files/content"),
            &[("path", &path)],
            &settings,
            std::slice::from_ref(&local),
        )
        .await?;
    let Ok(answer) = sent else {
        return Ok(ExitCode::FAILURE);
    };
    let saved = text(&answer["path"]);
    match (answer["conflict_of"].as_str(), base) {
        (Some(there), None) => println!(
            "{there} is there already: yours is saved beside it as {saved} (--base REV replaces it; REV is its rev in `tandem chat files {chat}`)"
        ),
        (Some(there), Some(base)) => println!(
            "{there} changed since change set {base}: yours is saved beside it as {saved}"
        ),
        (None, _) => println!(
            "{saved}: {} bytes saved (change set {})",
            answer["bytes"], answer["rev"]
        ),
    }
    Ok(ExitCode::SUCCESS)
}

/// Moves a file to the trash, or puts one back.
pub async fn delete_or_restore(chat: &str, verb: &str, path: &str) -> anyhow::Result<ExitCode> {
    let (method, route, body) = if verb == "delete" {
        (reqwest::Method::DELETE, "/files", None)
    } else {
        (
            reqwest::Method::POST,
            "/files/trash/restore",
            Some(json!({"path": path})),
        )
    };
    let query: &[(&str, &str)] = if verb == "delete" {
        &[("path", path)]
    } else {
        &[]
    };
    let route = format!("/conversations/{chat}{route}");
    let Ok(answer) = Client::new()?
        .send_or_refuse(method, &route, query, body)
        .await?
    else {
        return Ok(ExitCode::FAILURE);
    };
    let done = if verb == "delete" {
        "moved to the trash"
    } else {
        "restored"
    };
    match answer["rev"].as_i64() {
        Some(rev) => println!("{path}: {done} (change set {rev})"),
        None => println!("{path}: {done}"),
    }
    Ok(ExitCode::SUCCESS)
}

/// Deletes a file of the trash (or the whole trash) for good.
pub async fn purge(chat: &str, path: Option<&str>) -> anyhow::Result<ExitCode> {
    let body = match path {
        Some(path) => json!({"paths": [path]}),
        None => json!({}),
    };
    let route = format!("/conversations/{chat}/files/trash/purge");
    let Ok(answer) = Client::new()?
        .send_or_refuse(reqwest::Method::POST, &route, &[], Some(body))
        .await?
    else {
        return Ok(ExitCode::FAILURE);
    };
    println!(
        "deleted for good: {} file(s), {} bytes freed",
        answer["files"], answer["bytes"]
    );
    Ok(ExitCode::SUCCESS)
}

/// What `tandem chat files CHAT search` asks.
pub struct Search {
    pub words: String,
    pub path: Option<String>,
    pub regex: bool,
    pub case: bool,
}

/// Prints the lines and names that match, each `path (page 3, line 40): text`.
pub async fn search(chat: &str, asked: &Search) -> anyhow::Result<ExitCode> {
    let client = Client::new()?;
    let mut query = reqwest::Url::parse("http://chatd/")?;
    {
        let mut pairs = query.query_pairs_mut();
        pairs.append_pair("q", &asked.words);
        if let Some(path) = &asked.path {
            pairs.append_pair("path", path);
        }
        if asked.regex {
            pairs.append_pair("regex", "1");
        }
        if asked.case {
            pairs.append_pair("ignore_case", "0");
        }
    }
    let found = client
        .call(
            reqwest::Method::GET,
            &format!(
                "/conversations/{chat}/files/search?{}",
                query.query().unwrap_or("")
            ),
            None,
        )
        .await?;
    let hits = found["hits"].as_array().cloned().unwrap_or_default();
    let names = found["names"].as_array().cloned().unwrap_or_default();
    for hit in &hits {
        let place = match hit["part"].as_str() {
            Some(part) => format!("{part}, line {}", hit["line"]),
            None => format!("line {}", hit["line"]),
        };
        println!("{} ({place}): {}", text(&hit["path"]), text(&hit["text"]));
    }
    for name in &names {
        println!("{} (file name)", text(name));
    }
    if hits.is_empty() && names.is_empty() {
        println!("nothing matches in {} file(s)", found["files"]);
    }
    if found["more_hits"] == json!(true) {
        println!(
            "(only the first {} lines: more words or --path narrow it)",
            hits.len()
        );
    }
    let pending = found["pending"].as_u64().unwrap_or(0);
    if pending > 0 {
        println!("({pending} file(s) still being indexed: search again in a moment)");
    }
    let beyond = found["beyond"].as_u64().unwrap_or(0);
    if beyond > 0 {
        println!("({beyond} file(s) past the search's limits were not looked at: give --path)");
    }
    Ok(if hits.is_empty() && names.is_empty() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Prints a table's or a document's preview: each sheet's rows
/// tab-separated under its name, a document's blocks, each slide with its
/// notes; then what was left out.
pub async fn preview(chat: &str, path: &str) -> anyhow::Result<ExitCode> {
    let client = Client::new()?;
    let mut query = reqwest::Url::parse("http://chatd/")?;
    query.query_pairs_mut().append_pair("path", path);
    let shown = client
        .call(
            reqwest::Method::GET,
            &format!(
                "/conversations/{chat}/files/preview?{}",
                query.query().unwrap_or("")
            ),
            None,
        )
        .await?;
    let cells = |row: &Value| -> String {
        row.as_array()
            .into_iter()
            .flatten()
            .map(|c| c.as_str().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\t")
    };
    for sheet in shown["sheets"].as_array().into_iter().flatten() {
        if let Some(name) = sheet["name"].as_str().filter(|n| !n.is_empty()) {
            println!("## Sheet {name}");
        }
        for row in sheet["rows"].as_array().into_iter().flatten() {
            println!("{}", cells(row));
        }
        if sheet["cut"] == json!(true) {
            println!(
                "(the first rows and columns of {} rows and {} columns)",
                sheet["total_rows"], sheet["total_columns"]
            );
        }
    }
    for block in shown["blocks"].as_array().into_iter().flatten() {
        match text(&block["type"]) {
            "heading" => println!(
                "{} {}",
                "#".repeat(block["level"].as_u64().unwrap_or(1) as usize),
                text(&block["text"])
            ),
            "list_item" => println!(
                "{}- {}",
                "  ".repeat(block["level"].as_u64().unwrap_or(0) as usize),
                text(&block["text"])
            ),
            "table" => {
                for row in block["rows"].as_array().into_iter().flatten() {
                    println!("{}", cells(row));
                }
            }
            _ => println!("{}", text(&block["text"])),
        }
    }
    for slide in shown["slides"].as_array().into_iter().flatten() {
        match slide["title"].as_str() {
            Some(title) => println!("## Slide {}: {title}", slide["number"]),
            None => println!("## Slide {}", slide["number"]),
        }
        if let Some(body) = slide["text"].as_str().filter(|t| !t.is_empty()) {
            println!("{body}");
        }
        if let Some(notes) = slide["notes"].as_str() {
            println!("Notes: {notes}");
        }
    }
    for note in shown["notes"].as_array().into_iter().flatten() {
        println!("({})", text(note));
    }
    Ok(ExitCode::SUCCESS)
}
