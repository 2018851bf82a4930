//! `tandem skill …`: the skills chats offer (chatd's `/v1/chat-app/skills`):
//! list the layers, show one, write the owner's, switch them per chat.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use reqwest::Method;
use serde_json::{json, Value};

use crate::answer::text;
use crate::client::Client;

pub const LONG_ABOUT: &str = "\
A skill teaches the chats a job once: a folder with a SKILL.md, whose front
matter gives its name, a one-line description (when to use it) and, for a
procedure that runs commands, `requires: [exec]`; the procedure follows.

Skills come from three layers, nearest first, and the nearest wins a name:
a chat's workspace (.skills/<name>/SKILL.md), yours (~/.tandemllm/skills/
<name>/SKILL.md, written by `tandem skill add` or by hand), and the ones
built into chatd (docx, pdf, pptx, xlsx, writing). Every chat lists its
skills to the model, which loads one before a task that matches it; in a
chat, `/<name> words` (or `/skill <name> words`) sends your words with it.

A chat stores the skills switched off, not the ones on: a skill added later
is on everywhere. `tandem skill off review --chat ID` switches one off
there; a name switches off the one that wins (a farther one of that name
then serves), `layer:name` (owner:review) that layer's only.

Examples:
  tandem skill list
  tandem skill add review --description 'Check a change before it ships' --file review.md
  tandem skill show review
  tandem skill off pdf --chat c_58bc144a880ac418
  tandem skill rm review";

#[derive(clap::Subcommand)]
pub enum SkillCommand {
    /// Every skill, one row each: name, layer, on, needs, description (with
    /// --chat: as that chat has them, and its switches).
    ///
    /// Example: tandem skill list --chat c_58bc144a880ac418
    List {
        /// A chat's id: its workspace's skills too, and its switches.
        #[arg(long, value_name = "CHAT")]
        chat: Option<String>,
    },
    /// Print the skill that serves a name: its layer, files and text.
    ///
    /// Example: tandem skill show pdf
    Show {
        name: String,
        /// As this chat has it (its workspace's layer first).
        #[arg(long, value_name = "CHAT")]
        chat: Option<String>,
    },
    /// Write one of your skills (~/.tandemllm/skills/NAME/SKILL.md); it
    /// stands in front of a built-in one of the same name.
    ///
    /// Example: tandem skill add review --description 'Check a change' --file review.md
    Add(WriteArgs),
    /// Change one of your skills: what you leave out stays.
    ///
    /// Example: tandem skill edit review --file review.md
    Edit(WriteArgs),
    /// Delete one of your skills (its folder goes to ~/.tandemllm/skills/.trash/).
    ///
    /// Example: tandem skill rm review
    Rm { name: String },
    /// Switch skills off for one chat (a name, or layer:name).
    ///
    /// Example: tandem skill off pdf writing --chat c_58bc144a880ac418
    Off {
        #[arg(required = true)]
        names: Vec<String>,
        #[arg(long, value_name = "CHAT")]
        chat: String,
    },
    /// Switch skills on again for one chat (--all: every one).
    ///
    /// Example: tandem skill on pdf --chat c_58bc144a880ac418
    On {
        #[arg(required_unless_present = "all")]
        names: Vec<String>,
        #[arg(long, value_name = "CHAT")]
        chat: String,
        #[arg(long)]
        all: bool,
    },
}

#[derive(clap::Args)]
pub struct WriteArgs {
    /// 1 to 64 of a-z 0-9 - _.
    name: String,
    /// One line: when the model should use it.
    #[arg(long)]
    description: Option<String>,
    /// The procedure, from a file (`-`: stdin); a front matter in it is
    /// taken off (--description and --requires say those).
    #[arg(long, value_name = "PATH")]
    file: Option<PathBuf>,
    /// It runs commands: only offered where a chat can run them.
    #[arg(long, value_name = "NEED", value_parser = ["exec", "none"])]
    requires: Option<String>,
}

impl WriteArgs {
    fn body(&self) -> anyhow::Result<Value> {
        let mut body = json!({});
        if let Some(d) = &self.description {
            body["description"] = json!(d);
        }
        if let Some(path) = &self.file {
            let text = if path.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin()).context("reading the procedure")?
            } else {
                std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?
            };
            body["body"] = json!(without_front_matter(&text));
        }
        if let Some(need) = &self.requires {
            body["requires"] = json!(if need == "exec" {
                vec!["exec"]
            } else {
                Vec::new()
            });
        }
        Ok(body)
    }
}

/// A procedure file may be a whole SKILL.md: its front matter is left out.
fn without_front_matter(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("---\n") else {
        return text;
    };
    match rest.find("\n---\n") {
        Some(end) => &rest[end + 5..],
        None => text,
    }
}

/// A skill's name as a path segment: its own characters only, so no name
/// reaches another route (`../conversations/…`).
fn segment(name: &str) -> anyhow::Result<&str> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    anyhow::ensure!(
        ok,
        "{name:?} is no skill's name: 1 to 64 of a-z 0-9 - _ (tandem skill list shows them)"
    );
    Ok(name)
}

pub async fn exec(command: SkillCommand) -> anyhow::Result<ExitCode> {
    let client = Client::new()?;
    match command {
        SkillCommand::List { chat } => {
            let path = match &chat {
                Some(id) => format!("/skills?conversation_id={id}"),
                None => "/skills".to_string(),
            };
            let listed = client.ask(Method::GET, &path, None).await?;
            print!("{}", list_text(&listed, chat.is_some()));
        }
        SkillCommand::Show { name, chat } => {
            let path = match &chat {
                Some(id) => format!("/skills/{}?conversation_id={id}", segment(&name)?),
                None => format!("/skills/{}", segment(&name)?),
            };
            let skill = client.ask(Method::GET, &path, None).await?;
            println!(
                "{} ({} layer){}",
                text(&skill["name"]),
                text(&skill["layer"]),
                needs(&skill)
            );
            println!("{}", text(&skill["description"]));
            if let Some(files) = skill["files"].as_array().filter(|f| !f.is_empty()) {
                let names: Vec<&str> = files.iter().map(text).collect();
                println!("files: {}", names.join(", "));
            }
            println!("\n{}", text(&skill["body"]));
        }
        SkillCommand::Add(args) => {
            let mut body = args.body()?;
            body["name"] = json!(args.name);
            let made = client.ask(Method::POST, "/skills", Some(body)).await?;
            println!("added {} (owner layer)", text(&made["name"]));
        }
        SkillCommand::Edit(args) => {
            let body = args.body()?;
            let path = format!("/skills/{}", segment(&args.name)?);
            let changed = client.ask(Method::PUT, &path, Some(body)).await?;
            println!("changed {}", text(&changed["name"]));
        }
        SkillCommand::Rm { name } => {
            client
                .ask(Method::DELETE, &format!("/skills/{name}"), None)
                .await?;
            println!("deleted {name} (kept in ~/.tandemllm/skills/.trash/)");
        }
        SkillCommand::Off { names, chat } => {
            let now = switches(&client, &chat).await?;
            let mut off = now;
            off.extend(names);
            set(&client, &chat, off).await?;
        }
        SkillCommand::On { names, chat, all } => {
            let off = if all {
                Vec::new()
            } else {
                let now = switches(&client, &chat).await?;
                now.into_iter().filter(|s| !names.contains(s)).collect()
            };
            set(&client, &chat, off).await?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn switches(client: &Client, chat: &str) -> anyhow::Result<Vec<String>> {
    let listed = client
        .ask(
            Method::GET,
            &format!("/skills?conversation_id={chat}"),
            None,
        )
        .await?;
    Ok(listed["off"]
        .as_array()
        .map(|a| a.iter().map(|s| text(s).to_string()).collect())
        .unwrap_or_default())
}

async fn set(client: &Client, chat: &str, off: Vec<String>) -> anyhow::Result<()> {
    let path = format!("/conversations/{chat}/skills");
    let listed = client
        .ask(Method::PUT, &path, Some(json!({ "off": off })))
        .await?;
    let total = listed["skills"].as_array().map_or(0, |s| {
        let mut names: Vec<&str> = s.iter().map(|k| text(&k["name"])).collect();
        names.dedup();
        names.len()
    });
    println!("{} of {total} skills on in {chat}", listed["on"]);
    let off: Vec<&str> = listed["off"]
        .as_array()
        .map_or(Vec::new(), |a| a.iter().map(text).collect());
    if !off.is_empty() {
        println!("off: {}", off.join(", "));
    }
    Ok(())
}

fn needs(skill: &Value) -> &'static str {
    match skill["requires"].as_array() {
        Some(r) if !r.is_empty() => " · needs commands",
        _ => "",
    }
}

/// `tandem skill list`'s rows.
fn list_text(listed: &Value, chat: bool) -> String {
    let mut out = String::new();
    let skills = listed["skills"].as_array().cloned().unwrap_or_default();
    if skills.is_empty() {
        out.push_str("no skills (write one: tandem skill add --help)\n");
    }
    for s in &skills {
        let state = if let Some(by) = s["shadowed_by"].as_str() {
            format!("behind {by}")
        } else if chat && s["on"] == false {
            "off".to_string()
        } else {
            "on".to_string()
        };
        let description: String = text(&s["description"]).chars().take(70).collect();
        out.push_str(&format!(
            "{:<20} {:<9} {:<22}{} {description}\n",
            text(&s["name"]),
            text(&s["layer"]),
            state,
            if needs(s).is_empty() { "" } else { " [exec]" },
        ));
    }
    for p in listed["problems"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "not a skill: {} ({} layer): {}\n",
            text(&p["folder"]),
            text(&p["layer"]),
            text(&p["why"])
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_skill_md_given_as_the_procedure_loses_its_front_matter() {
        assert_eq!(
            without_front_matter("---\nname: x\ndescription: d\n---\nRead it.\n"),
            "Read it.\n"
        );
        assert_eq!(without_front_matter("Read it.\n"), "Read it.\n");
    }
}
