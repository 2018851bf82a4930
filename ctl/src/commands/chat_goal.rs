//! `tandem chat goal`: a chat's goal (what it works toward turn after turn
//! by itself) shown, set, paused, resumed and cleared, and the line `send`
//! and `attach` print of a `goal` event.

use std::process::ExitCode;

use serde_json::{json, Value};

use crate::answer::text;
use crate::client::Client;
use crate::commands::chat_subagents::when;

/// Shows the goal, or makes the change `action` names (`set` with `words`).
pub async fn exec(chat: &str, action: Option<&str>, words: &[String]) -> anyhow::Result<ExitCode> {
    if let (false, Some(first)) = (action == Some("set"), words.first()) {
        anyhow::bail!(
            "`{}` takes no text (`{first}`); to set a goal: tandem chat goal {chat} set WORDS…",
            action.unwrap_or("show")
        );
    }
    let client = Client::new()?;
    let path = format!("/conversations/{chat}/goal");
    let (method, route, body) = match action {
        None => {
            let shown = client.ask(reqwest::Method::GET, &path, None).await?;
            print!("{}", shown_goal(chat, &shown["goal"]));
            return Ok(ExitCode::SUCCESS);
        }
        // An empty text goes to chatd too: its refusal names the field.
        Some("set") => (
            reqwest::Method::PUT,
            path,
            Some(json!({"text": words.join(" ")})),
        ),
        Some("clear") => (reqwest::Method::DELETE, path, None),
        Some(verb) => (
            reqwest::Method::POST,
            format!("{path}/{verb}"),
            Some(json!({})),
        ),
    };
    let answer = client.ask(method, &route, body).await?;
    println!("{}", changed(chat, action.unwrap_or(""), &answer));
    Ok(ExitCode::SUCCESS)
}

/// The one line a change prints, from chatd's answer.
fn changed(chat: &str, verb: &str, answer: &Value) -> String {
    let next = match answer["run_id"].as_str() {
        Some(run) => format!("started (run {run})"),
        None => "follows the turn that runs now".to_string(),
    };
    match verb {
        "set" => match answer["run_id"].as_str() {
            Some(run) => format!("goal set; its first turn started (run {run})"),
            None => "goal set; it follows the turn that runs now".to_string(),
        },
        "resume" => format!("goal resumed with new counts; its next turn {next}"),
        "pause" => format!(
            "goal paused; a turn that runs goes on and no new one starts \
             (tandem chat goal {chat} resume goes on)"
        ),
        _ => "goal cleared; a turn that runs goes on and no new one starts".to_string(),
    }
}

/// The goal as `tandem chat goal CHAT` prints it; `goal` is null when none.
fn shown_goal(chat: &str, goal: &Value) -> String {
    if goal.is_null() {
        return format!("this chat has no goal (set one: tandem chat goal {chat} set WORDS…)\n");
    }
    let mut out = format!("goal: {}\n", text(&goal["text"]));
    out.push_str(&format!("state: {}\n", state_line(goal)));
    let state = text(&goal["state"]);
    if let Some(by) = goal["paused_by"].as_str() {
        out.push_str(&format!("paused by: {by}\n"));
    }
    if let Some(note) = goal["note"].as_str() {
        // The note is the summary once done, the reason once blocked.
        let label = match state {
            "done" => "summary",
            "blocked" => "reason",
            _ => "note",
        };
        out.push_str(&format!("{label}: {note}\n"));
    }
    if let Some(needs) = goal["needs"].as_str() {
        out.push_str(&format!("needs: {needs}\n"));
    }
    let evidence = goal["evidence"].as_array().cloned().unwrap_or_default();
    if !evidence.is_empty() {
        out.push_str("evidence:\n");
        for item in &evidence {
            out.push_str(&format!("  - {}\n", text(item)));
        }
    }
    out.push_str(&format!(
        "set {}, changed {}\n",
        when(&goal["set"]),
        when(&goal["updated"])
    ));
    if matches!(state, "paused" | "blocked") {
        out.push_str(&format!(
            "go on with new counts: tandem chat goal {chat} resume\n"
        ));
    }
    out
}

/// `active · turn 3 of 20 · 41 of 400 model calls`.
fn state_line(goal: &Value) -> String {
    let n = |k: &str| goal[k].as_i64().unwrap_or(0);
    format!(
        "{} · turn {} of {} · {} of {} model calls",
        text(&goal["state"]),
        n("turns"),
        n("max_turns"),
        n("steps"),
        n("max_steps")
    )
}

/// The line `send` and `attach` print of a `goal` event (`{goal}`, null
/// once cleared).
pub fn event_line(data: &Value) -> String {
    let goal = &data["goal"];
    if goal.is_null() {
        return "tandem: goal: cleared".to_string();
    }
    let said = match text(&goal["state"]) {
        "active" => format!(
            "active · turn {} of {}",
            goal["turns"].as_i64().unwrap_or(0),
            goal["max_turns"].as_i64().unwrap_or(0)
        ),
        "paused" => format!(
            "paused by {} — {}",
            text(&goal["paused_by"]),
            text(&goal["note"])
        ),
        "blocked" => format!(
            "blocked — {} (it needs: {})",
            text(&goal["note"]),
            text(&goal["needs"])
        ),
        state => format!("{state} — {}", text(&goal["note"])),
    };
    format!("tandem: goal: {said}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_goal_reads_with_its_counts_note_and_evidence() {
        let goal = json!({"text": "Write the summary", "state": "done", "note": "summary.md holds it",
            "evidence": ["summary.md", "call_1"], "turns": 3, "max_turns": 20, "steps": 41,
            "max_steps": 400, "set": "x", "updated": "y"});
        let out = shown_goal("c_1", &goal);
        assert!(out.starts_with("goal: Write the summary\n"), "{out}");
        assert!(
            out.contains("state: done · turn 3 of 20 · 41 of 400 model calls\n"),
            "{out}"
        );
        assert!(out.contains("summary: summary.md holds it\n"), "{out}");
        assert!(
            out.contains("evidence:\n  - summary.md\n  - call_1\n"),
            "{out}"
        );
        assert!(!out.contains("resume"), "{out}");
        assert!(shown_goal("c_1", &Value::Null).starts_with("this chat has no goal"));
        let paused = json!({"text": "t", "state": "paused", "paused_by": "turn_limit",
            "note": "20 turns", "turns": 20, "max_turns": 20});
        let out = shown_goal("c_1", &paused);
        assert!(
            out.contains("paused by: turn_limit\nnote: 20 turns\n"),
            "{out}"
        );
        assert!(out.contains("tandem chat goal c_1 resume"), "{out}");
    }

    #[test]
    fn a_goal_event_reads_as_one_line() {
        let active = json!({"goal": {"state": "active", "turns": 2, "max_turns": 20}});
        assert_eq!(event_line(&active), "tandem: goal: active · turn 2 of 20");
        let done = json!({"goal": {"state": "done", "note": "all written"}});
        assert_eq!(event_line(&done), "tandem: goal: done — all written");
        assert_eq!(event_line(&json!({"goal": null})), "tandem: goal: cleared");
        let set = json!({"goal": {}, "run_id": "r_1"});
        assert_eq!(
            changed("c_1", "set", &set),
            "goal set; its first turn started (run r_1)"
        );
        assert_eq!(
            changed("c_1", "resume", &json!({"goal": {}})),
            "goal resumed with new counts; its next turn follows the turn that runs now"
        );
    }

    #[test]
    fn a_goal_line_shows_in_a_transcript() {
        let messages = [json!({"role": "goal", "text": "Goal reached: all written"})];
        let out = crate::commands::chat_subagents::transcript(&messages);
        assert!(out.contains("[goal]\nGoal reached: all written\n"), "{out}");
    }
}
