//! `tandem chat subagents`: the helpers a chat's model starts with
//! `spawn_agent` (each a chat of its own, read-only to people): the list,
//! one's transcript, stop; the lines `send` and `attach` print of their
//! events on the parent chat; and `tandem chat tools`, where saved agents
//! are switched on for a chat.

use std::process::ExitCode;

use serde_json::{json, Value};

use crate::answer::text;
use crate::client::Client;

/// Title characters the list shows.
const TITLE_WIDTH: usize = 40;

/// The chat's sub-agents, newest first, and how many work in the background.
pub async fn list(chat: &str) -> anyhow::Result<ExitCode> {
    let client = Client::new()?;
    let listed = client
        .ask(
            reqwest::Method::GET,
            &format!("/conversations/{chat}/subagents"),
            None,
        )
        .await?;
    print!("{}", table(chat, &listed));
    Ok(ExitCode::SUCCESS)
}

/// The list as printed: a header, one row each, and the background count.
fn table(chat: &str, listed: &Value) -> String {
    let subs = listed["subagents"].as_array().cloned().unwrap_or_default();
    let mut out = String::new();
    if subs.is_empty() {
        out.push_str(&format!("{chat}: no sub-agents\n"));
    } else {
        let id_width = subs
            .iter()
            .map(|s| text(&s["id"]).chars().count())
            .max()
            .unwrap_or(2)
            .max(2);
        out.push_str(&format!(
            "{:<id_width$}  {:<7}  {:<4}  {:<TITLE_WIDTH$}  {:<19}  ENDED\n",
            "ID", "STATE", "MODE", "TITLE", "STARTED"
        ));
        for s in &subs {
            let row = format!(
                "{:<id_width$}  {:<7}  {:<4}  {}  {:<19}  {}",
                text(&s["id"]),
                text(&s["state"]),
                if s["wait"] == true { "fg" } else { "bg" },
                padded(text(&s["title"]), TITLE_WIDTH),
                when(&s["created"]),
                when(&s["ended"]),
            );
            out.push_str(row.trim_end());
            if s["by_parent"] == true {
                out.push_str(" (with the chat)");
            }
            out.push('\n');
        }
    }
    out.push_str(&format!(
        "{} running in the background (at most {})\n",
        listed["running_background"].as_u64().unwrap_or(0),
        listed["limit"]["background"].as_u64().unwrap_or(4)
    ));
    out
}

/// One sub-agent: what it was asked, its state, and its transcript.
pub async fn show(chat: &str, id: &str) -> anyhow::Result<ExitCode> {
    let client = Client::new()?;
    let shown = client
        .ask(
            reqwest::Method::GET,
            &format!("/conversations/{chat}/subagents/{id}"),
            None,
        )
        .await?;
    let sub = &shown["subagent"];
    let ran = if sub["wait"] == true {
        "the chat waits for it"
    } else {
        "in the background"
    };
    println!(
        "sub-agent {} «{}»: {} ({ran})",
        text(&sub["id"]),
        text(&sub["title"]),
        text(&sub["state"])
    );
    println!(
        "started {}, ended {}",
        when(&sub["created"]),
        when(&sub["ended"])
    );
    if let Some(tools) = sub["tools"].as_array() {
        let names: Vec<&str> = tools.iter().map(text).collect();
        println!("tools: {}", names.join(", "));
    }
    match sub["result"].as_str() {
        Some(result) => println!("result: {} characters", result.chars().count()),
        None => println!("result: none yet"),
    }
    if sub["by_parent"] == true {
        println!("stopped with the chat: nothing was handed back");
    }
    let messages = shown["snapshot"]["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    println!();
    print!("{}", transcript(&messages));
    Ok(ExitCode::SUCCESS)
}

/// Stops one sub-agent; chatd's refusal (not running, not this chat's) is
/// printed and exits 1.
pub async fn stop(chat: &str, id: &str) -> anyhow::Result<ExitCode> {
    let client = Client::new()?;
    let answered = client
        .send_or_refuse(
            reqwest::Method::POST,
            &format!("/conversations/{chat}/subagents/{id}/stop"),
            &[],
            Some(json!({})),
        )
        .await?;
    let Ok(answer) = answered else {
        return Ok(ExitCode::FAILURE);
    };
    println!(
        "sub-agent {}: {}",
        text(&answer["subagent_id"]),
        text(&answer["status"])
    );
    Ok(ExitCode::SUCCESS)
}

/// `tandem chat tools`: the chat's tools and tool groups, after
/// switching the groups `off` and `on` names (the others left as they are).
pub async fn tools(chat: &str, off: &[String], on: &[String]) -> anyhow::Result<ExitCode> {
    let client = Client::new()?;
    let view = if off.is_empty() && on.is_empty() {
        client
            .ask(
                reqwest::Method::GET,
                &format!("/conversations/{chat}/tools"),
                None,
            )
            .await?
    } else {
        let view = set_groups(&client, chat, off, on).await?;
        for (list, word) in [(off, "off"), (on, "on")] {
            if !list.is_empty() {
                eprintln!("tandem: {} {word} for {chat}", list.join(", "));
            }
        }
        view
    };
    print!("{}", super::mcp::tools_text(&view));
    Ok(ExitCode::SUCCESS)
}

/// Switches groups `off` and `on` for a chat (`mcp:<id>` a connector),
/// the rest left as they are; answers its tools.
pub async fn set_groups(
    client: &Client,
    chat: &str,
    off: &[String],
    on: &[String],
) -> anyhow::Result<Value> {
    let now = client
        .ask(
            reqwest::Method::GET,
            &format!("/conversations/{chat}/tools"),
            None,
        )
        .await?;
    let listed = |field: &str| -> Vec<String> {
        now[field]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect()
    };
    let mut new_off: Vec<String> = listed("off")
        .into_iter()
        .filter(|g| !on.contains(g))
        .collect();
    new_off.extend(
        off.iter()
            .filter(|g| !new_off.contains(g))
            .cloned()
            .collect::<Vec<_>>(),
    );
    let mut new_on: Vec<String> = now["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|g| g["opt_in"] == true && g["on"] == true)
        .map(|g| text(&g["name"]).to_string())
        .filter(|g| !off.contains(g))
        .collect();
    new_on.extend(
        on.iter()
            .filter(|g| !new_on.contains(g) && !g.starts_with("mcp:"))
            .cloned()
            .collect::<Vec<_>>(),
    );
    client
        .ask(
            reqwest::Method::PUT,
            &format!("/conversations/{chat}/builtins"),
            Some(json!({ "off": new_off, "on": new_on })),
        )
        .await
}

/// A conversation's messages as the terminal shows them: each role and its
/// words, each tool call as `> name summary` (the line `send` prints).
pub fn transcript(messages: &[Value]) -> String {
    let result_of = |call_id: &str| {
        messages
            .iter()
            .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
    };
    let mut out = String::new();
    for m in messages {
        let role = text(&m["role"]);
        if role == "tool" {
            // Shown under the call it answers; alone only when none is found.
            let answered = messages.iter().any(|a| {
                a["tool_calls"]
                    .as_array()
                    .is_some_and(|calls| calls.iter().any(|c| c["id"] == m["tool_call_id"]))
            });
            if !answered {
                out.push_str(&format!("> {}\n", tool_line("tool", Some(m))));
            }
            continue;
        }
        let words = text(&m["text"]).trim_end();
        let calls = m["tool_calls"].as_array().cloned().unwrap_or_default();
        if words.is_empty() && calls.is_empty() {
            continue;
        }
        let status = match text(&m["status"]) {
            "" | "done" => String::new(),
            other => format!(" ({other})"),
        };
        out.push_str(&format!("[{role}]{status}\n"));
        if !words.is_empty() {
            out.push_str(words);
            out.push('\n');
        }
        for call in &calls {
            let name = call
                .pointer("/function/name")
                .and_then(Value::as_str)
                .unwrap_or("?");
            let id = text(&call["id"]);
            out.push_str(&format!("> {}\n", tool_line(name, result_of(id))));
        }
        out.push('\n');
    }
    out
}

/// `name summary` of one call, by its result (none yet: it still works).
fn tool_line(name: &str, result: Option<&Value>) -> String {
    let Some(result) = result else {
        return format!("{name} (working)");
    };
    let summary = match result["summary"].as_str() {
        Some(s) if !s.is_empty() => s.to_string(),
        _ => first_line(text(&result["text"]), 80),
    };
    if result["status"] == "failed" {
        format!("{name} failed: {summary}")
    } else {
        format!("{name} {summary}").trim_end().to_string()
    }
}

/// The line `send` and `attach` print for a sub-agent's event on the
/// parent chat, if it is one.
pub fn event_line(kind: &str, data: &Value) -> Option<String> {
    let id = text(&data["subagent_id"]);
    match kind {
        "sub_agent_started" => Some(format!(
            "tandem: sub-agent {id} «{}» started ({})",
            text(&data["title"]),
            if data["wait"] == true {
                "waits for it"
            } else {
                "background"
            }
        )),
        "sub_agent_done" => {
            let mut line = format!("tandem: sub-agent {id} {}", text(&data["status"]));
            if data["message_id"].is_string() || data["pending_id"].is_string() {
                line.push_str(" (its result comes to the chat as a message)");
            }
            Some(line)
        }
        _ => None,
    }
}

/// A sub-agent's consent card as it shows on the parent, with the command
/// that answers it: at the sub-agent's own chat, where the card is.
pub fn consent_line(data: &Value) -> Option<String> {
    let sub = data["subagent_id"].as_str()?;
    let who = format!("a sub-agent ({})", text(&data["subagent_title"]));
    let asks = if data["name"] == "egress" {
        format!("{who} asks: {}", text(&data["summary"]))
    } else {
        format!(
            "{who} asks to run {} ({}): {}",
            text(&data["name"]),
            text(&data["reason"]),
            text(&data["summary"])
        )
    };
    Some(format!(
        "tandem: {asks}\n        answer with: tandem chat consent {sub} {} once|always|deny",
        text(&data["card_id"])
    ))
}

/// `s` cut or padded to `width` characters.
fn padded(s: &str, width: usize) -> String {
    let cut = if s.chars().count() > width {
        let mut cut: String = s.chars().take(width - 1).collect();
        cut.push('…');
        cut
    } else {
        s.to_string()
    };
    let pad = width - cut.chars().count();
    format!("{cut}{}", " ".repeat(pad))
}

/// The first line of `s`, at most `max` characters.
fn first_line(s: &str, max: usize) -> String {
    let line = s.lines().next().unwrap_or("").trim();
    if line.chars().count() > max {
        format!("{}…", line.chars().take(max - 1).collect::<String>())
    } else {
        line.to_string()
    }
}

/// An RFC 3339 time in this machine's time zone to the second; `-` when
/// there is none.
pub fn when(at: &Value) -> String {
    let Some(at) = at.as_str() else {
        return "-".to_string();
    };
    match at.parse::<jiff::Timestamp>() {
        Ok(ts) => ts
            .to_zoned_datetime(jiff::tz::TimeZone::system())
            .strftime("%Y-%m-%d %H:%M:%S")
            .to_string(),
        Err(_) => at.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_is_a_table_with_the_background_count() {
        let listed = json!({
            "subagents": [
                {"id": "c_2", "state": "running", "wait": false, "title": "Count the words",
                 "created": "2026-01-02T10:11:12.345Z", "by_parent": false},
                {"id": "c_1", "state": "stopped", "wait": true, "title": "x".repeat(50),
                 "created": "2026-01-02T10:00:00Z", "ended": "2026-01-02T10:01:00Z",
                 "by_parent": true},
            ],
            "running_background": 1,
            "limit": {"background": 4},
        });
        let out = table("c_p", &listed);
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].starts_with("ID   STATE"), "{out}");
        assert!(
            lines[1].starts_with("c_2  running  bg    Count the words"),
            "{out}"
        );
        assert!(lines[1].ends_with('-'), "no end yet: {out}");
        assert!(lines[2].contains("fg") && lines[2].contains('…'), "{out}");
        assert!(lines[2].ends_with("(with the chat)"), "{out}");
        assert_eq!(lines[3], "1 running in the background (at most 4)");
        let none = table("c_p", &json!({"subagents": [], "running_background": 0}));
        assert!(none.starts_with("c_p: no sub-agents\n"), "{none}");
    }

    #[test]
    fn a_transcript_shows_roles_words_and_calls_by_their_results() {
        let messages = [
            json!({"role": "user", "text": "Read notes.md"}),
            json!({"role": "assistant", "text": "", "tool_calls": [
                {"id": "k1", "function": {"name": "read_file", "arguments": "{}"}},
                {"id": "k2", "function": {"name": "bash", "arguments": "{}"}},
                {"id": "k3", "function": {"name": "grep", "arguments": "{}"}},
            ]}),
            json!({"role": "tool", "tool_call_id": "k1", "text": "…",
                   "summary": "read notes.md: 3 lines", "status": "done"}),
            json!({"role": "tool", "tool_call_id": "k2", "text": "boom",
                   "summary": "exit 1", "status": "failed"}),
            json!({"role": "assistant", "text": "It says hi.", "status": "streaming"}),
        ];
        let out = transcript(&messages);
        assert_eq!(
            out,
            "[user]\nRead notes.md\n\n[assistant]\n> read_file read notes.md: 3 lines\n\
             > bash failed: exit 1\n> grep (working)\n\n[assistant] (streaming)\nIt says hi.\n\n"
        );
    }

    #[test]
    fn events_and_cards_of_a_sub_agent_read_as_its_own() {
        let started = json!({"subagent_id": "c_s", "title": "Count", "wait": false});
        assert_eq!(
            event_line("sub_agent_started", &started).unwrap(),
            "tandem: sub-agent c_s «Count» started (background)"
        );
        let waited = json!({"subagent_id": "c_s", "title": "Count", "wait": true});
        assert!(event_line("sub_agent_started", &waited)
            .unwrap()
            .ends_with("(waits for it)"));
        let done = json!({"subagent_id": "c_s", "status": "failed", "call_id": "k"});
        assert_eq!(
            event_line("sub_agent_done", &done).unwrap(),
            "tandem: sub-agent c_s failed"
        );
        assert!(event_line("text.delta", &done).is_none());
        let card = json!({"subagent_id": "c_s", "subagent_title": "Count", "name": "bash",
                          "reason": "writes", "summary": "bash make", "card_id": "card_1"});
        let line = consent_line(&card).unwrap();
        assert!(
            line.starts_with("tandem: a sub-agent (Count) asks to run bash"),
            "{line}"
        );
        assert!(
            line.ends_with("tandem chat consent c_s card_1 once|always|deny"),
            "{line}"
        );
        assert!(consent_line(&json!({"name": "bash"})).is_none());
    }
}
