//! `tandem trigger …`: chats that start by themselves, through chatd's
//! front door (`/v1/chat-app/triggers…`, which chatd forwards to triggerd)
//! with the forward key, as `tandem chat send` talks to chatd.

use std::process::ExitCode;

use anyhow::bail;
use reqwest::Method;
use serde_json::{json, Map, Value};

use crate::answer::text;
use crate::client::{refusal, Client};

pub const LONG_ABOUT: &str = "\
Triggers: chats that start by themselves, on a schedule or when a file
arrives in a folder of the shared workspace. Each run is a chat of its own
(made by triggerd through chatd's API) with the trigger's prompt, and an
inbox entry when it ends or fails.

A schedule (--when) is one of:
  daily 08:00            weekdays 09:30         weekly mon,thu 09:30
  monthly 15 08:00       once 2026-12-24 18:00  five cron fields: */15 9-17 * * 1-5
read in a time zone (--tz, an IANA name like Europe/Rome; default UTC).
A file trigger (--folder) runs when a file in that folder of the workspace
has been quiet (unchanged) for --quiet seconds.

These talk to chatd (QSE_CHAT_URL) with the forward key, as `tandem chat
send` does; chatd passes them to triggerd (`tandem triggers start` starts
it). Times are printed in this machine's time zone, but for `preview`,
which prints them in the schedule's. A refusal is printed as one line, with
the field it is about. Exit 0 when the request was done, 1 otherwise.

Examples:
  tandem trigger preview 'weekdays 09:30' --tz Europe/Rome
  tandem trigger add --name 'Morning news' --when 'weekdays 09:30' --tz Europe/Rome \\
      --prompt 'Summarise the news in inbox/news.md'
  tandem trigger add --name Contracts --folder Contracts --quiet 60 --prompt 'Review the new contract'
  tandem trigger list
  tandem trigger runs t_0123abcd";

#[derive(clap::Subcommand)]
pub enum TriggerCommand {
    /// Every trigger, one line each: id, name, kind, next run, on or off.
    ///
    /// Example: tandem trigger list
    List,
    /// One trigger in full: its schedule or folder, prompt, limits and state.
    ///
    /// Example: tandem trigger show t_0123abcd
    Show {
        /// The trigger id.
        id: String,
    },
    /// Add a trigger: a schedule (--when) or a folder to watch (--folder).
    #[command(long_about = ADD_ABOUT)]
    Add(AddArgs),
    /// Delete a trigger; its queued runs go, the chats of its runs stay.
    ///
    /// Example: tandem trigger rm t_0123abcd
    Rm {
        /// The trigger id.
        id: String,
    },
    /// Switch a trigger on: times and files before now start nothing.
    ///
    /// Example: tandem trigger on t_0123abcd
    On {
        /// The trigger id.
        id: String,
    },
    /// Switch a trigger off: nothing starts until it is on again.
    ///
    /// Example: tandem trigger off t_0123abcd
    Off {
        /// The trigger id.
        id: String,
    },
    /// Run a trigger now, once (on or off); refused while one of its runs works.
    ///
    /// Example: tandem trigger run t_0123abcd
    Run {
        /// The trigger id.
        id: String,
    },
    /// A trigger's runs, newest first: status, due time, chat, tokens, reason.
    ///
    /// Example: tandem trigger runs t_0123abcd --limit 5
    Runs {
        /// The trigger id.
        id: String,
        /// How many runs, 1 to 1000.
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
    /// What a schedule means and its next five times, without saving anything.
    ///
    /// Example: tandem trigger preview 'weekly mon,thu 09:30' --tz Europe/Rome
    Preview {
        /// The schedule text, as --when takes it.
        when: String,
        /// The time zone, an IANA name (default UTC).
        #[arg(long, value_name = "ZONE")]
        tz: Option<String>,
    },
}

const ADD_ABOUT: &str = "\
Add a trigger. It starts on: a schedule (--when, in --tz) or a folder of the
shared workspace (--folder, relative to it; a run when a file there has not
changed for --quiet seconds, 30 by default). Every run is a new chat with
--prompt as its first message, on --model (default: chatd's) or as a
saved agent of chatd's (--agent: its instructions, model and tools), at
most --daily-cap runs a day (24 by default). It is on at once; prints the new
trigger's line and what its schedule means.

Examples:
  tandem trigger add --name 'Morning news' --when 'weekdays 09:30' --tz Europe/Rome \\
      --prompt 'Summarise the news in inbox/news.md'
  tandem trigger add --name Contracts --folder Contracts --quiet 60 --prompt 'Review the new contract'";

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("start").required(true).args(["when", "folder"])))]
pub struct AddArgs {
    /// A name for people (1 to 100 characters).
    #[arg(long)]
    name: String,
    /// The schedule: daily 08:00, weekdays 09:30, weekly mon,thu 09:30,
    /// monthly 15 08:00, once 2026-12-24 18:00, or five cron fields.
    #[arg(long, value_name = "TEXT")]
    when: Option<String>,
    /// The schedule's time zone, an IANA name (default UTC).
    #[arg(long, value_name = "ZONE", conflicts_with = "folder")]
    tz: Option<String>,
    /// The folder of the shared workspace to watch.
    #[arg(long, value_name = "FOLDER")]
    folder: Option<String>,
    /// Seconds a file must stay unchanged before it starts a run (1 to 3600).
    #[arg(long, value_name = "SECONDS", conflicts_with = "when")]
    quiet: Option<u64>,
    /// The message each run's chat starts with.
    #[arg(long)]
    prompt: String,
    /// The model (default: chatd's).
    #[arg(long)]
    model: Option<String>,
    /// A saved agent of chatd's (its id) the runs' chats are made with.
    #[arg(long, value_name = "ID")]
    agent: Option<String>,
    /// Runs a day at most (1 to 1000).
    #[arg(long, value_name = "N")]
    daily_cap: Option<u64>,
}

pub async fn exec(command: TriggerCommand) -> anyhow::Result<ExitCode> {
    let client = Client::new()?;
    match command {
        TriggerCommand::List => {
            let listed = call(&client, Method::GET, "", &[], None).await?;
            let triggers = listed["triggers"].as_array().cloned().unwrap_or_default();
            if triggers.is_empty() {
                println!("no triggers (add one: tandem trigger add --help)");
            }
            let width = triggers
                .iter()
                .map(|t| name_of(t).chars().count())
                .max()
                .unwrap_or(0);
            for t in &triggers {
                println!("{}", line(t, width));
            }
        }
        TriggerCommand::Show { id } => {
            let t = call(&client, Method::GET, &format!("/{id}"), &[], None).await?;
            show(&t);
        }
        TriggerCommand::Add(args) => {
            let made = call(&client, Method::POST, "", &[], Some(args.body())).await?;
            println!("added {}", line(&made, 0));
            println!("  {}", text(&made["description"]));
        }
        TriggerCommand::Rm { id } => {
            call(&client, Method::DELETE, &format!("/{id}"), &[], None).await?;
            println!("removed {id}");
        }
        TriggerCommand::On { id } => {
            let t = call(&client, Method::POST, &format!("/{id}/enable"), &[], None).await?;
            println!("{}", line(&t, 0));
        }
        TriggerCommand::Off { id } => {
            let t = call(&client, Method::POST, &format!("/{id}/disable"), &[], None).await?;
            println!("{}", line(&t, 0));
        }
        TriggerCommand::Run { id } => {
            let run = call(&client, Method::POST, &format!("/{id}/run"), &[], None).await?;
            println!(
                "run {} of {id} queued; follow it with: tandem trigger runs {id}",
                text(&run["id"])
            );
        }
        TriggerCommand::Runs { id, limit } => {
            let limit = limit.to_string();
            let listed = call(
                &client,
                Method::GET,
                &format!("/{id}/runs"),
                &[("limit", &limit)],
                None,
            )
            .await?;
            let runs = listed["runs"].as_array().cloned().unwrap_or_default();
            if runs.is_empty() {
                println!("{id} has not run yet (run it now: tandem trigger run {id})");
            }
            for run in &runs {
                println!("{}", run_line(run));
            }
        }
        TriggerCommand::Preview { when, tz } => {
            let mut query = vec![("when", when.as_str())];
            if let Some(tz) = &tz {
                query.push(("tz", tz.as_str()));
            }
            let preview = call(&client, Method::GET, "/preview", &query, None).await?;
            println!(
                "{} ({})",
                text(&preview["description"]),
                text(&preview["tz"])
            );
            for next in preview["next"].as_array().into_iter().flatten() {
                println!("  {}  ({})", text(&next["local"]), text(&next["at"]));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

impl AddArgs {
    /// The create body: only what was given, so triggerd's defaults apply.
    fn body(self) -> Value {
        let mut body = Map::new();
        body.insert("name".into(), json!(self.name));
        body.insert("prompt".into(), json!(self.prompt));
        for (key, value) in [
            ("when", self.when),
            ("tz", self.tz),
            ("folder", self.folder),
            ("model", self.model),
            ("agent_id", self.agent),
        ] {
            if let Some(value) = value {
                body.insert(key.into(), json!(value));
            }
        }
        for (key, value) in [("quiet_seconds", self.quiet), ("daily_cap", self.daily_cap)] {
            if let Some(value) = value {
                body.insert(key.into(), json!(value));
            }
        }
        Value::Object(body)
    }
}

/// A request under `/v1/chat-app/triggers`; a refusal is one line: the
/// API's message (which names the field of a bad input) and its type.
async fn call(
    client: &Client,
    method: Method,
    path: &str,
    query: &[(&str, &str)],
    body: Option<Value>,
) -> anyhow::Result<Value> {
    let (status, answer) = client
        .send(method, &format!("/triggers{path}"), query, body)
        .await?;
    if status.is_success() {
        return Ok(answer);
    }
    bail!("{}", refusal(status.as_u16(), &answer))
}

fn name_of(t: &Value) -> &str {
    text(&t["name"])
}

/// An RFC 3339 time in this machine's time zone, as the preview prints
/// times; the text as it came when it is not one.
pub(crate) fn local(at: &str) -> String {
    match at.parse::<jiff::Timestamp>() {
        Ok(ts) => ts
            .to_zoned_datetime(jiff::tz::TimeZone::system())
            .strftime("%a %Y-%m-%d %H:%M %Z")
            .to_string(),
        Err(_) => at.to_string(),
    }
}

/// One trigger: id, name, kind, when it runs next, on or off.
fn line(t: &Value, name_width: usize) -> String {
    let next = if t["kind"] == "file" {
        let folder = text(&t["folder"]);
        format!("watches {}", if folder.is_empty() { "/" } else { folder })
    } else {
        match t["next_run"].as_str() {
            Some(at) => format!("next {}", local(at)),
            None => "next -".into(),
        }
    };
    let mut state = if t["enabled"] == true {
        "on".to_string()
    } else {
        match t["disabled_reason"].as_str() {
            Some(why) => format!("off ({why})"),
            None => "off".to_string(),
        }
    };
    if t["running"] == true {
        state.push_str(", running");
    }
    format!(
        "{}  {:<name_width$}  {:<8}  {next}  {state}",
        text(&t["id"]),
        name_of(t),
        text(&t["kind"]),
    )
}

fn show(t: &Value) {
    println!("{}  {}", text(&t["id"]), name_of(t));
    let row = |k: &str, v: String| println!("  {k:<10} {v}");
    row("kind", text(&t["kind"]).to_string());
    if t["kind"] == "file" {
        let folder = text(&t["folder"]);
        row(
            "folder",
            if folder.is_empty() { "/" } else { folder }.to_string(),
        );
        row("quiet", format!("{} s", t["quiet_seconds"]));
        row("min gap", format!("{} s", t["min_gap_seconds"]));
    } else {
        let tz = match text(&t["tz"]) {
            "" => "UTC",
            tz => tz,
        };
        row("when", format!("{} ({tz})", text(&t["when"])));
    }
    row("means", text(&t["description"]).to_string());
    if t["kind"] != "file" {
        row(
            "next",
            t["next_run"]
                .as_str()
                .map(local)
                .unwrap_or_else(|| "-".into()),
        );
    }
    row(
        "enabled",
        match (t["enabled"] == true, t["disabled_reason"].as_str()) {
            (true, _) => "on".into(),
            (false, Some(why)) => format!("off ({why})"),
            (false, None) => "off".into(),
        },
    );
    row(
        "running",
        if t["running"] == true { "yes" } else { "no" }.into(),
    );
    row(
        "model",
        match text(&t["model"]) {
            "" => "(chatd's default)".to_string(),
            model => model.to_string(),
        },
    );
    if let Some(agent) = t["agent_id"].as_str() {
        row("agent", agent.to_string());
    }
    row("daily cap", format!("{} runs", t["daily_cap"]));
    row("created", local(text(&t["created"])));
    row("updated", local(text(&t["updated"])));
    let mut lines = text(&t["prompt"]).lines();
    row("prompt", lines.next().unwrap_or("").to_string());
    for more in lines {
        println!("  {:<10} {more}", "");
    }
}

/// One run: id, status, cause, due time, chat, tokens, why it ended so.
fn run_line(run: &Value) -> String {
    let chat = run["chat_id"].as_str().unwrap_or("-");
    let tokens = run["tokens"]
        .as_u64()
        .map(|n| format!("{n} tokens"))
        .unwrap_or_else(|| "- tokens".into());
    let mut line = format!(
        "{}  {:<11}  {:<8}  due {}  chat {chat}  {tokens}",
        text(&run["id"]),
        text(&run["status"]),
        text(&run["cause"]),
        local(text(&run["due"])),
    );
    if let Some(file) = run["file"].as_str().filter(|f| !f.is_empty()) {
        line.push_str(&format!("  file {file}"));
    }
    if let Some(reason) = run["reason"].as_str().filter(|r| !r.is_empty()) {
        line.push_str(&format!("  reason: {}", reason.replace('\n', " ")));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_one_line_naming_the_field() {
        let check = |status: u16, answer: Value, expect: &str| {
            assert_eq!(refusal(status, &answer), expect);
        };
        check(
            400,
            json!({"error": {"type": "bad_input", "message": "when: cannot read \"at noon\"", "field": "when"}}),
            "when: cannot read \"at noon\" (bad_input, HTTP 400)",
        );
        check(
            400,
            json!({"error": {"type": "bad_input", "message": "is empty", "field": "name"}}),
            "name: is empty (bad_input, HTTP 400)",
        );
        check(
            503,
            json!({"error": {"type": "triggers_unavailable", "message": "triggerd is not running\n(start it)"}}),
            "triggerd is not running (start it) (triggers_unavailable, HTTP 503)",
        );
        check(502, Value::Null, "no message (error, HTTP 502)");
    }

    #[test]
    fn a_trigger_line_says_when_it_runs_and_whether_it_is_on() {
        let file = json!({"id": "t_1", "name": "Contracts", "kind": "file", "folder": "Contracts",
            "enabled": false, "disabled_reason": "its folder is gone", "running": false});
        assert_eq!(
            line(&file, 10),
            "t_1  Contracts   file      watches Contracts  off (its folder is gone)"
        );
        let waiting = json!({"id": "t_2", "name": "Later", "kind": "schedule", "next_run": null,
            "enabled": true, "running": true});
        assert_eq!(
            line(&waiting, 0),
            "t_2  Later  schedule  next -  on, running"
        );
    }

    #[test]
    fn a_run_line_names_status_chat_tokens_and_reason() {
        let run = json!({"id": "r_1", "status": "failed", "cause": "schedule", "due": "not a time",
            "chat_id": null, "tokens": null, "reason": "the engine\ndid not answer"});
        assert_eq!(
            run_line(&run),
            "r_1  failed       schedule  due not a time  chat -  - tokens  reason: the engine did not answer"
        );
    }

    #[test]
    fn the_add_body_holds_only_what_was_given() {
        let args = AddArgs {
            name: "n".into(),
            when: None,
            tz: None,
            folder: Some("F".into()),
            quiet: Some(5),
            prompt: "p".into(),
            model: None,
            agent: None,
            daily_cap: None,
        };
        assert_eq!(
            args.body(),
            json!({"name": "n", "prompt": "p", "folder": "F", "quiet_seconds": 5})
        );
    }
}
