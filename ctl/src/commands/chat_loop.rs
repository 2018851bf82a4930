//! `tandem chat loop`: a chat's loops (a prompt sent to it again and again,
//! at an interval or when its model says) listed, started with the
//! person's yes, paused, resumed and stopped; the line `send` and `attach`
//! print of a `loops` event, and of a user line a loop sent.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{bail, Context};
use serde_json::{json, Value};

use crate::answer::text;
use crate::client::Client;
use crate::commands::chat_subagents::when;

/// The hex digits of an id a list shows (more when two loops share them).
const SHORT_HEX: usize = 8;
/// Prompt characters a list line shows.
const PROMPT_WIDTH: usize = 60;

/// What `tandem chat loop` was asked, its words and flags as typed.
pub struct Asked<'a> {
    pub chat: &'a str,
    pub action: Option<&'a str>,
    pub words: &'a [String],
    pub every: Option<&'a str>,
    pub yes: bool,
    pub all: bool,
}

/// Lists the loops, or makes the change `action` names.
pub async fn exec(asked: &Asked<'_>) -> anyhow::Result<ExitCode> {
    checked(asked)?;
    let chat = asked.chat;
    let client = Client::new()?;
    match asked.action {
        None => {
            let listed = listed(&client, chat).await?;
            print!("{}", table(chat, &listed));
            Ok(ExitCode::SUCCESS)
        }
        Some("start") => start(&client, asked).await,
        Some("stop") if asked.all => {
            let answer = client
                .ask(reqwest::Method::DELETE, &loops_path(chat), None)
                .await?;
            let n = answer["removed"].as_i64().unwrap_or(0);
            println!("{}", stopped_all(chat, n));
            Ok(ExitCode::SUCCESS)
        }
        Some(verb) => {
            let given = asked.words.first().map(String::as_str).unwrap_or("");
            let all = listed(&client, chat).await?;
            let lp = resolve(chat, &all, given)?;
            let id = text(&lp["id"]);
            let route = format!("{}/{id}", loops_path(chat));
            let short = short_id(id, &all);
            if verb == "stop" {
                client.ask(reqwest::Method::DELETE, &route, None).await?;
                println!(
                    "loop {short} stopped and removed; a run it started goes on \
                     (tandem chat cancel {chat} stops that)"
                );
                return Ok(ExitCode::SUCCESS);
            }
            let state = if verb == "pause" { "paused" } else { "active" };
            let changed = client
                .ask(
                    reqwest::Method::PUT,
                    &route,
                    Some(json!({ "state": state })),
                )
                .await?;
            println!(
                "{}",
                after_change(chat, &short, text(&lp["state"]), &changed)
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The words and flags `action` takes, or what is wrong with them.
fn checked(asked: &Asked) -> anyhow::Result<()> {
    let chat = asked.chat;
    let verb = asked.action.unwrap_or("show");
    if asked.every.is_some() && verb != "start" {
        bail!("--every goes with `start`: tandem chat loop {chat} start --every 5m PROMPT…");
    }
    if asked.yes && verb != "start" {
        bail!("--yes goes with `start` (the yes to a waiting loop: tandem chat loop {chat} resume ID)");
    }
    if asked.all && verb != "stop" {
        bail!("--all goes with `stop`: tandem chat loop {chat} stop --all");
    }
    match (verb, asked.words) {
        ("show", [first, ..]) => bail!(
            "`show` takes no text (`{first}`); to start a loop: \
             tandem chat loop {chat} start --every 5m PROMPT…"
        ),
        ("stop", [first, ..]) if asked.all => {
            bail!("`stop --all` takes no id (`{first}`): it stops every loop of the chat")
        }
        ("stop", []) if asked.all => Ok(()),
        ("pause" | "resume" | "stop", []) => bail!(
            "{verb} which loop? give its id (or the start of it) as the list shows: \
             tandem chat loop {chat}"
        ),
        ("pause" | "resume" | "stop", [_, second, ..]) => {
            bail!("`{verb}` takes one loop id, not more (`{second}`)")
        }
        // An empty prompt goes to chatd too: its refusal names the field.
        _ => Ok(()),
    }
}

fn loops_path(chat: &str) -> String {
    format!("/conversations/{chat}/loops")
}

/// The chat's loops, oldest first.
async fn listed(client: &Client, chat: &str) -> anyhow::Result<Vec<Value>> {
    let answer = client
        .ask(reqwest::Method::GET, &loops_path(chat), None)
        .await?;
    Ok(answer["loops"].as_array().cloned().unwrap_or_default())
}

/// Makes a loop; the chat's first one waits for the person's yes, asked
/// here (`--yes`, or y at a terminal).
async fn start(client: &Client, asked: &Asked<'_>) -> anyhow::Result<ExitCode> {
    let chat = asked.chat;
    let mut body = json!({ "prompt": asked.words.join(" ") });
    if let Some(every) = asked.every {
        body["interval"] = json!(every);
    }
    let made = client
        .ask(reqwest::Method::POST, &loops_path(chat), Some(body))
        .await?;
    let id = text(&made["id"]).to_string();
    anyhow::ensure!(!id.is_empty(), "chatd gave no loop id");
    let all = listed(client, chat).await.unwrap_or_default();
    let short = short_id(&id, &all);
    if made["state"] != "pending" {
        println!("{}", started(chat, &short, &made));
        return Ok(ExitCode::SUCCESS);
    }
    let question = question(&made);
    let yes = if asked.yes {
        eprintln!("tandem: {question} yes (--yes)");
        true
    } else if crate::tty::stdin_is_terminal() {
        eprint!("tandem: {question} [y/N] ");
        let _ = std::io::stderr().flush();
        let typed = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).map(|_| line)
        })
        .await
        .context("reading the terminal")?
        .context("reading the terminal")?;
        let said = typed.trim().to_ascii_lowercase();
        if !matches!(said.as_str(), "y" | "yes") {
            let route = format!("{}/{id}", loops_path(chat));
            client.ask(reqwest::Method::DELETE, &route, None).await?;
            println!("not started: the loop was removed");
            return Ok(ExitCode::SUCCESS);
        }
        true
    } else {
        false
    };
    if !yes {
        println!(
            "loop {short} made; it waits for your yes (this chat's first loop): \
             tandem chat loop {chat} resume {short}"
        );
        return Ok(ExitCode::SUCCESS);
    }
    let route = format!("{}/{id}", loops_path(chat));
    let changed = client
        .ask(
            reqwest::Method::PUT,
            &route,
            Some(json!({ "state": "active" })),
        )
        .await?;
    println!("{}", started(chat, &short, &changed));
    Ok(ExitCode::SUCCESS)
}

/// What the person says yes to.
fn question(lp: &Value) -> String {
    match lp["interval"].as_str() {
        Some(every) => {
            format!("Run this every {every} until you stop it? Each run costs tokens.")
        }
        None => "Run this again and again, when the model says, until you stop it? \
                 Each run costs tokens."
            .to_string(),
    }
}

/// `every 5m`, or `self-paced`.
fn pace(lp: &Value) -> String {
    match lp["interval"].as_str() {
        Some(every) => format!("every {every}"),
        None => "self-paced".to_string(),
    }
}

/// The line a loop that starts prints.
fn started(chat: &str, short: &str, lp: &Value) -> String {
    format!(
        "loop {short} started, {}: its first run is due now (see it: tandem chat loop {chat})",
        pace(lp)
    )
}

/// The line a pause or resume prints, by the state the loop was in.
fn after_change(chat: &str, short: &str, before: &str, lp: &Value) -> String {
    match (text(&lp["state"]), before) {
        ("paused", _) => format!(
            "loop {short} paused; a run that works goes on \
             (tandem chat loop {chat} resume {short} goes on)"
        ),
        (_, "pending") => format!(
            "loop {short} confirmed, {}: its first run is due now",
            pace(lp)
        ),
        _ => format!(
            "loop {short} resumed, {}: its next run is due now",
            pace(lp)
        ),
    }
}

/// The line `stop --all` prints.
fn stopped_all(chat: &str, n: i64) -> String {
    match n {
        0 => "this chat had no loops".to_string(),
        1 => format!(
            "1 loop stopped and removed; a run it started goes on \
             (tandem chat cancel {chat} stops that)"
        ),
        n => format!(
            "{n} loops stopped and removed; a run they started goes on \
             (tandem chat cancel {chat} stops that)"
        ),
    }
}

/// The loop `given` names: its whole id, or the start of it (with or
/// without `l_`) shared with no other loop of the chat.
fn resolve<'a>(chat: &str, all: &'a [Value], given: &str) -> anyhow::Result<&'a Value> {
    // A short id copied with the ellipsis some lines cut it with.
    let given = given.trim().trim_end_matches('…');
    if given.is_empty() {
        bail!("give a loop's id (or the start of it) as the list shows: tandem chat loop {chat}");
    }
    if let Some(exact) = all.iter().find(|l| l["id"] == given) {
        return Ok(exact);
    }
    let matches: Vec<&Value> = all
        .iter()
        .filter(|l| {
            let id = text(&l["id"]);
            id.starts_with(given) || id.strip_prefix("l_").is_some_and(|r| r.starts_with(given))
        })
        .collect();
    match matches.as_slice() {
        [one] => Ok(one),
        [] => bail!(
            "no loop of this chat has an id starting with `{given}` \
             (its loops: tandem chat loop {chat})"
        ),
        many => {
            let ids: Vec<&str> = many.iter().map(|l| text(&l["id"])).collect();
            bail!(
                "`{given}` is the start of {} loops' ids ({}): give more of it",
                many.len(),
                ids.join(", ")
            )
        }
    }
}

/// `id` cut to `l_` and 8 hex digits, or longer while another loop of
/// `all` shares that start: what `pause`, `resume` and `stop` take back.
fn short_id(id: &str, all: &[Value]) -> String {
    let Some(hex) = id.strip_prefix("l_") else {
        return id.to_string();
    };
    let others: Vec<&str> = all
        .iter()
        .map(|l| text(&l["id"]))
        .filter(|other| *other != id)
        .collect();
    let mut n = SHORT_HEX.min(hex.len());
    while n < hex.len() {
        let cut = &id[..2 + n];
        if !others.iter().any(|o| o.starts_with(cut)) {
            break;
        }
        n += 1;
    }
    id[..2 + n].to_string()
}

/// The list as `tandem chat loop CHAT` prints it: one line a loop.
fn table(chat: &str, loops: &[Value]) -> String {
    if loops.is_empty() {
        return format!(
            "this chat has no loops (start one: tandem chat loop {chat} start --every 5m PROMPT…)\n"
        );
    }
    let mut out = String::new();
    for lp in loops {
        out.push_str(&row(lp, loops));
        out.push('\n');
    }
    if let Some(lp) = loops.iter().find(|l| l["state"] == "pending") {
        out.push_str(&format!(
            "a pending loop waits for your yes: tandem chat loop {chat} resume {}\n",
            short_id(text(&lp["id"]), loops)
        ));
    }
    out
}

/// `l_3f9a1c2d  every 5m · active · run 4 of 100 · next … · reason  «prompt»`.
fn row(lp: &Value, all: &[Value]) -> String {
    let mut parts = vec![pace(lp), text(&lp["state"]).to_string(), runs(lp)];
    if lp["next"].is_string() {
        parts.push(format!("next {}", when(&lp["next"])));
    }
    let n = |k: &str| lp[k].as_i64().unwrap_or(0);
    if n("skipped") > 0 {
        parts.push(format!("{} skipped", n("skipped")));
    }
    if n("failures") > 0 {
        parts.push(format!("{} failed in a row", n("failures")));
    }
    if let Some(wait) = lp["wait"].as_str() {
        parts.push(format!("waits for: {}", one_line(wait, PROMPT_WIDTH)));
    }
    if let Some(reason) = lp["reason"].as_str() {
        parts.push(one_line(reason, PROMPT_WIDTH));
    }
    format!(
        "{}  {}  «{}»",
        short_id(text(&lp["id"]), all),
        parts.join(" · "),
        one_line(text(&lp["prompt"]), PROMPT_WIDTH)
    )
}

/// `run 4 of 100`, with `(running)` while a run it started works.
fn runs(lp: &Value) -> String {
    let mut said = format!(
        "run {} of {}",
        lp["runs"].as_i64().unwrap_or(0),
        lp["max_runs"].as_i64().unwrap_or(100)
    );
    if lp["running"] == true {
        said.push_str(" (running)");
    }
    said
}

/// The first line of `s`, at most `max` characters (`…` when cut).
fn one_line(s: &str, max: usize) -> String {
    let mut lines = s.trim().lines();
    let line = lines.next().unwrap_or("").trim();
    let more = lines.next().is_some();
    if line.chars().count() > max {
        format!("{}…", line.chars().take(max - 1).collect::<String>())
    } else if more {
        format!("{line}…")
    } else {
        line.to_string()
    }
}

/// The lines `send` and `attach` print of a `loops` event (`{loops}`, the
/// chat's whole list): one a loop.
pub fn event_line(data: &Value) -> String {
    let loops = data["loops"].as_array().cloned().unwrap_or_default();
    if loops.is_empty() {
        return "tandem: loops: none".to_string();
    }
    let lines: Vec<String> = loops
        .iter()
        .map(|lp| {
            let mut line = format!(
                "tandem: loop {} {} · {} · {}",
                short_id(text(&lp["id"]), &loops),
                pace(lp),
                text(&lp["state"]),
                runs(lp)
            );
            if let Some(reason) = lp["reason"].as_str() {
                line.push_str(&format!(" — {}", one_line(reason, PROMPT_WIDTH)));
            }
            line
        })
        .collect();
    lines.join("\n")
}

/// The line `send` and `attach` print when a loop sends its prompt (a
/// `message.created` whose user line carries `loop: {id, run}`).
pub fn message_line(message: &Value) -> Option<String> {
    let run = message["loop"]["run"].as_i64()?;
    Some(format!(
        "tandem: [loop run {run}] {}",
        one_line(text(&message["text"]), PROMPT_WIDTH)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked<'a>(action: Option<&'a str>, words: &'a [String]) -> Asked<'a> {
        Asked {
            chat: "c_1",
            action,
            words,
            every: None,
            yes: false,
            all: false,
        }
    }

    #[test]
    fn a_list_line_reads_with_its_pace_state_runs_and_prompt() {
        let a = json!({"id": "l_3f9a1c2d00000001", "prompt": "Check the build.\nThen say so.",
            "interval": "5m", "interval_seconds": 300, "state": "active", "runs": 4,
            "max_runs": 100, "failures": 0, "skipped": 2, "running": true,
            "next": "2026-12-07T10:05:00Z", "reason": "a run was skipped: the chat was busy"});
        let b = json!({"id": "l_3f9a1c2d00000002", "prompt": "Watch the deploy", "interval": null,
            "state": "pending", "runs": 0, "max_runs": 100, "failures": 0, "skipped": 0,
            "running": false});
        let all = [a.clone(), b];
        let out = table("c_1", &all);
        let lines: Vec<&str> = out.lines().collect();
        assert!(
            lines[0].starts_with(
                "l_3f9a1c2d00000001  every 5m · active · run 4 of 100 (running) · next "
            ),
            "{out}"
        );
        assert!(
            lines[0].ends_with(
                " · 2 skipped · a run was skipped: the chat was busy  «Check the build.…»"
            ),
            "{out}"
        );
        assert!(
            lines[1].starts_with("l_3f9a1c2d00000002  self-paced · pending · run 0 of 100  «Watch"),
            "{out}"
        );
        assert_eq!(
            lines[2],
            "a pending loop waits for your yes: tandem chat loop c_1 resume l_3f9a1c2d00000002"
        );
        assert_eq!(short_id("l_3f9a1c2d00000001", &[a]), "l_3f9a1c2d");
        assert!(table("c_1", &[]).starts_with("this chat has no loops (start one: "));
    }

    #[test]
    fn an_id_is_found_by_its_start_or_refused_clearly() {
        let all = [
            json!({"id": "l_3f9a000000000001"}),
            json!({"id": "l_3f9b000000000002"}),
        ];
        let found = |given: &str| resolve("c_1", &all, given).map(|l| text(&l["id"]).to_string());
        assert_eq!(found("l_3f9a").unwrap(), "l_3f9a000000000001");
        assert_eq!(found("3f9b").unwrap(), "l_3f9b000000000002");
        assert_eq!(found("l_3f9a…").unwrap(), "l_3f9a000000000001");
        assert_eq!(found("l_3f9b000000000002").unwrap(), "l_3f9b000000000002");
        let many = found("l_3f9").unwrap_err().to_string();
        assert!(many.contains("is the start of 2 loops' ids"), "{many}");
        let none = found("l_77").unwrap_err().to_string();
        assert!(
            none.contains("no loop of this chat has an id starting with `l_77`"),
            "{none}"
        );
    }

    #[test]
    fn words_and_flags_go_with_their_action() {
        let id = ["l_1".to_string()];
        let two = ["l_1".to_string(), "l_2".to_string()];
        assert!(checked(&asked(None, &[])).is_ok());
        assert!(checked(&asked(None, &id)).is_err());
        assert!(checked(&asked(Some("pause"), &id)).is_ok());
        assert!(checked(&asked(Some("pause"), &[])).is_err());
        assert!(checked(&asked(Some("stop"), &two)).is_err());
        let mut all = asked(Some("stop"), &[]);
        all.all = true;
        assert!(checked(&all).is_ok());
        let mut every = asked(Some("pause"), &id);
        every.every = Some("5m");
        assert!(checked(&every).is_err());
        let mut yes = asked(Some("resume"), &id);
        yes.yes = true;
        assert!(checked(&yes).is_err());
    }

    #[test]
    fn events_and_loop_lines_read_as_one_line_each() {
        let data = json!({"loops": [
            {"id": "l_3f9a1c2d00000001", "interval": "5m", "state": "active", "runs": 4,
             "max_runs": 100},
            {"id": "l_0000000000000002", "interval": null, "state": "paused", "runs": 1,
             "max_runs": 100, "reason": "paused by you"},
        ]});
        assert_eq!(
            event_line(&data),
            "tandem: loop l_3f9a1c2d every 5m · active · run 4 of 100\n\
             tandem: loop l_00000000 self-paced · paused · run 1 of 100 — paused by you"
        );
        assert_eq!(event_line(&json!({"loops": []})), "tandem: loops: none");
        let line =
            json!({"role": "user", "text": "Check the build.", "loop": {"id": "l_1", "run": 3}});
        assert_eq!(
            message_line(&line).as_deref(),
            Some("tandem: [loop run 3] Check the build.")
        );
        assert_eq!(message_line(&json!({"role": "user", "text": "hi"})), None);
        assert_eq!(
            question(&json!({"interval": "5m"})),
            "Run this every 5m until you stop it? Each run costs tokens."
        );
        assert_eq!(stopped_all("c_1", 0), "this chat had no loops");
    }
}
