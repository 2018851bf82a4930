//! How connectors read in a terminal: the list as a table, one connector's
//! details (every field, never a token), its bot, the senders' table.

use serde_json::Value;

use crate::commands::trigger::local;

pub(super) use crate::answer::text;

pub(super) fn list(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|all| {
            all.iter()
                .map(|s| match s.as_str() {
                    Some(s) => s.to_string(),
                    None => s.to_string(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `connected`, `retrying`, `off`, `disabled` (`off` with no status).
pub(super) fn state(c: &Value) -> String {
    match c["status"]["state"].as_str() {
        Some(state) => state.to_string(),
        None if c["enabled"] == false => "disabled".into(),
        None => "-".into(),
    }
}

/// Whether the binding holds what its platform needs: a bot token, and
/// for Slack the app token too.
fn token_state(c: &Value) -> &'static str {
    match (
        c["has_token"] == true,
        c["kind"] == "slack",
        c["has_app_token"] == true,
    ) {
        (false, _, _) => "no",
        (true, true, false) => "no app token",
        (true, _, _) => "yes",
    }
}

/// `@name (id)` (Telegram's names with their `@`), `name (id)`, or none
/// when the platform was not asked yet.
pub(super) fn bot_name(bot: &Value, kind: &str) -> Option<String> {
    let name = bot["name"].as_str().filter(|n| !n.is_empty()).map(|n| {
        if kind == "telegram" && !n.starts_with('@') {
            format!("@{n}")
        } else {
            n.to_string()
        }
    });
    let id = match &bot["id"] {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    match (name, id) {
        (Some(name), Some(id)) => Some(format!("{name} ({id})")),
        (Some(name), None) => Some(name),
        (None, Some(id)) => Some(id),
        (None, None) => None,
    }
}

pub(super) fn print_bot(c: &Value) {
    if let Some(bot) = bot_name(&c["bot"], text(&c["kind"])) {
        println!("  bot {bot}");
    }
}

const HEADERS: [&str; 6] = ["ID", "KIND", "NAME", "AGENT", "STATE", "TOKEN"];

/// The column widths of a table of connectors.
#[derive(Default)]
pub(super) struct Widths([usize; 5]);

impl Widths {
    pub(super) fn of(all: &[Value]) -> Widths {
        let mut w = Widths(std::array::from_fn(|i| HEADERS[i].len()));
        for c in all {
            for (i, cell) in cells(c).iter().take(5).enumerate() {
                w.0[i] = w.0[i].max(cell.chars().count());
            }
        }
        w
    }
}

fn cells(c: &Value) -> [String; 6] {
    [
        text(&c["id"]).to_string(),
        text(&c["kind"]).to_string(),
        text(&c["name"]).to_string(),
        text(&c["agent_id"]).to_string(),
        state(c),
        token_state(c).to_string(),
    ]
}

pub(super) fn row(cells: &[String; 6], w: &Widths) -> String {
    let [id, kind, name, agent, state, token] = cells;
    let [a, b, c, d, e] = w.0;
    format!("{id:<a$}  {kind:<b$}  {name:<c$}  {agent:<d$}  {state:<e$}  {token}")
}

/// One connector: id, kind, name, agent, state, token (no padding with
/// the default widths).
pub(super) fn line(c: &Value, w: &Widths) -> String {
    row(&cells(c), w)
}

pub(super) fn table(all: &[Value]) -> String {
    let w = Widths::of(all);
    let mut out = row(&HEADERS.map(str::to_string), &w);
    out.push('\n');
    for c in all {
        out.push_str(&line(c, &w));
        out.push('\n');
    }
    out
}

pub(super) fn details(c: &Value) -> String {
    let mut out = format!("{}  {}\n", text(&c["id"]), text(&c["name"]));
    let mut row = |k: &str, v: String| out.push_str(&format!("  {k:<13} {v}\n"));
    let slack = c["kind"] == "slack";
    row("kind", text(&c["kind"]).to_string());
    row(
        "bot",
        bot_name(&c["bot"], text(&c["kind"])).unwrap_or_else(|| "- (not asked yet)".into()),
    );
    row("agent", text(&c["agent_id"]).to_string());
    row(
        "enabled",
        if c["enabled"] == true { "on" } else { "off" }.into(),
    );
    let status = &c["status"];
    let mut state_line = state(c);
    if let Some(since) = status["since"].as_str() {
        state_line.push_str(&format!(" since {}", local(since)));
    }
    row("state", state_line);
    if let Some(reason) = status["reason"].as_str().filter(|r| !r.is_empty()) {
        row("reason", reason.replace('\n', " "));
    }
    row(
        "token",
        if c["has_token"] == true {
            "set (sealed)"
        } else {
            "none"
        }
        .into(),
    );
    if slack {
        row(
            "app token",
            if c["has_app_token"] == true {
                "set (sealed)"
            } else {
                "none"
            }
            .into(),
        );
    }
    let allowlist = list(&c["allowlist"]);
    row(
        "allowlist",
        if allowlist.is_empty() {
            "(nobody: who writes goes in the sender log)".into()
        } else {
            allowlist.join(", ")
        },
    );
    row(
        "accept any",
        if c["accept_any"] == true {
            "yes (anyone who finds the bot is answered)"
        } else {
            "no"
        }
        .into(),
    );
    row("reply mode", text(&c["reply_mode"]).to_string());
    let conversation = text(&c["conversation"]);
    row(
        "conversation",
        if conversation == "window" {
            format!(
                "window (a new chat after {} minutes of quiet)",
                c["window_minutes"]
            )
        } else {
            conversation.to_string()
        },
    );
    row(
        "send files",
        if c["send_files"] == true { "yes" } else { "no" }.into(),
    );
    if slack {
        row("follow", text(&c["follow_threads"]).to_string());
    }
    row("created", local(text(&c["created"])));
    row("updated", local(text(&c["updated"])));
    out
}

/// The sender log: who, what they are called, how many messages, when last.
pub(super) fn senders_table(all: &[Value]) -> String {
    let pick = |s: &Value, keys: &[&str]| -> String {
        keys.iter()
            .find_map(|k| match &s[*k] {
                Value::String(v) if !v.is_empty() => Some(v.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
            .unwrap_or_else(|| "-".into())
    };
    let rows: Vec<[String; 4]> = all
        .iter()
        .map(|s| {
            let last = pick(s, &["last_seen", "last", "updated"]);
            [
                pick(s, &["sender_id", "sender", "id"]),
                pick(s, &["name", "username", "display_name"]),
                pick(s, &["count", "messages"]),
                if last == "-" { last } else { local(&last) },
            ]
        })
        .collect();
    let headers = ["SENDER", "NAME", "MESSAGES", "LAST"].map(str::to_string);
    let mut w = [0usize; 3];
    for r in std::iter::once(&headers).chain(rows.iter()) {
        for i in 0..3 {
            w[i] = w[i].max(r[i].chars().count());
        }
    }
    let mut out = String::new();
    for [sender, name, count, last] in std::iter::once(&headers).chain(rows.iter()) {
        let [a, b, c] = w;
        out.push_str(&format!("{sender:<a$}  {name:<b$}  {count:<c$}  {last}\n"));
    }
    out
}
