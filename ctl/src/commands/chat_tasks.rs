//! `tandem chat tasks`, `cancel` and `continue`: the jobs a chat in Agents mode handed to workers
//! (`task`), each with its state and its report, the lines `send` and
//! `attach` print when one starts and ends, and a chat's answer stopped and
//! continued (its worker with it).

use std::process::ExitCode;

use serde_json::{json, Value};

use crate::answer::text;
use crate::client::Client;
use crate::commands::chat_subagents::{transcript, when};

/// The chat's tasks, in their order.
pub async fn list(chat: &str) -> anyhow::Result<ExitCode> {
    let client = Client::new()?;
    let listed = client
        .ask(
            reqwest::Method::GET,
            &format!("/conversations/{chat}/tasks"),
            None,
        )
        .await?;
    print!("{}", table(chat, &listed));
    Ok(ExitCode::SUCCESS)
}

/// One line a task: number, state, title, its report's size, its id.
fn table(chat: &str, listed: &Value) -> String {
    let tasks = listed["tasks"].as_array().cloned().unwrap_or_default();
    if tasks.is_empty() {
        return format!(
            "{chat}: no tasks (a chat in Agents mode hands its work to workers: \
             tandem chat settings {chat} agents=on)\n"
        );
    }
    let mut out = String::new();
    for t in &tasks {
        let report = match t["report_chars"].as_u64() {
            Some(n) => format!("report {n} chars"),
            None => "no report yet".to_string(),
        };
        let asked = if t["report_asks"].as_i64().unwrap_or(0) > 0 {
            ", asked again"
        } else {
            ""
        };
        // Stopped with its chat: `running` to chatd until Continue.
        let state = if t["held"] == true {
            "held"
        } else {
            text(&t["state"])
        };
        out.push_str(&format!(
            "{:>3}  {:<8} {:<40} {report}{asked}  {}\n",
            t["n"].as_i64().unwrap_or(0),
            state,
            text(&t["title"]).chars().take(40).collect::<String>(),
            text(&t["id"])
        ));
    }
    out
}

/// One task: its brief, its state, its whole report, its worker's transcript.
pub async fn show(chat: &str, id: &str) -> anyhow::Result<ExitCode> {
    let client = Client::new()?;
    let shown = client
        .ask(
            reqwest::Method::GET,
            &format!("/conversations/{chat}/tasks/{id}"),
            None,
        )
        .await?;
    let task = &shown["task"];
    println!(
        "task {} «{}»: {}",
        task["n"].as_i64().unwrap_or(0),
        text(&task["title"]),
        text(&task["state"])
    );
    println!(
        "started {}, ended {}",
        when(&task["created"]),
        when(&task["ended"])
    );
    println!(
        "\n{}\n\nexpected back: {}",
        text(&task["brief"]),
        text(&task["expect"])
    );
    match task["report"].as_str() {
        Some(report) => println!("\n{report}"),
        None => println!("\nno report yet"),
    }
    let messages = shown["snapshot"]["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    println!("\nthe worker's transcript:\n");
    print!("{}", transcript(&messages));
    Ok(ExitCode::SUCCESS)
}

/// Stops the chat's answer; chatd's refusal is printed and exits 1.
pub async fn stop(chat: &str) -> anyhow::Result<ExitCode> {
    let client = Client::new()?;
    let answered = client
        .send_or_refuse(
            reqwest::Method::POST,
            &format!("/conversations/{chat}/stop"),
            &[],
            Some(json!({})),
        )
        .await?;
    if answered.is_err() {
        return Ok(ExitCode::FAILURE);
    }
    eprintln!("tandem: stopped {chat}; `tandem chat continue {chat}` goes on");
    Ok(ExitCode::SUCCESS)
}

/// Continues the chat's last answer: the seq to follow from and the run,
/// or `None` when chatd refused (its words printed).
pub async fn resume(client: &Client, chat: &str) -> anyhow::Result<Option<(i64, String)>> {
    let snapshot = client
        .ask(
            reqwest::Method::GET,
            &format!("/conversations/{chat}"),
            None,
        )
        .await?;
    let after = snapshot["seq"].as_i64().unwrap_or(0);
    let answered = client
        .send_or_refuse(
            reqwest::Method::POST,
            &format!("/conversations/{chat}/continue"),
            &[],
            Some(json!({})),
        )
        .await?;
    let Ok(answer) = answered else {
        return Ok(None);
    };
    Ok(Some((after, text(&answer["run_id"]).to_string())))
}

/// The line `send` and `attach` print for a task's event, if it is one.
pub fn event_line(kind: &str, data: &Value) -> Option<String> {
    let n = data["n"].as_i64().unwrap_or(0);
    match kind {
        "task_started" => Some(format!(
            "tandem: task {n} «{}» handed to a worker",
            text(&data["title"])
        )),
        "task_done" => Some(format!(
            "tandem: task {n} {} (its report: tandem chat tasks {} {})",
            text(&data["status"]),
            text(&data["conversation_id"]),
            text(&data["task_id"])
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_reads_as_one_line_with_its_state_and_report() {
        let listed = json!({"tasks": [{"id": "c_w1", "n": 1, "title": "Clock", "state": "done",
            "report_chars": 812, "report_asks": 1}]});
        let out = table("c_1", &listed);
        assert!(out.contains("  1  done     Clock"), "{out}");
        assert!(out.contains("report 812 chars, asked again  c_w1"), "{out}");
        assert!(table("c_1", &json!({"tasks": []})).contains("agents=on"));
        let done = json!({"n": 2, "status": "done", "conversation_id": "c_1", "task_id": "c_w2"});
        assert_eq!(
            event_line("task_done", &done).unwrap(),
            "tandem: task 2 done (its report: tandem chat tasks c_1 c_w2)"
        );
    }
}
