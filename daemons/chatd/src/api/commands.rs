//! Slash commands: one registry, so the page, `tandem chat send` and the
//! bots offer the same commands with the same answers. A message whose text
//! is `/name …` with a name here (or a `command` field) runs the command
//! instead of being sent; any other text that starts with `/` is a message.
//! Each command is the route it stands for (goal, loops, model, compact,
//! clear, a new chat, a saved agent), called as a device would, so a
//! command answers what its route answers, 409 `run_active` included.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use tandem_shared::http::ApiError;

use super::Json;
use crate::store::queries::{self, Trashed};
use crate::App;

/// One command of the registry.
pub struct Command {
    pub name: &'static str,
    /// Its arguments as `/help` shows them.
    pub usage: &'static str,
    pub about: &'static str,
    /// Offered where no chat exists yet (the page's start screen).
    pub home: bool,
}

pub const COMMANDS: [Command; 11] = [
    Command {
        name: "help",
        usage: "",
        about: "list every command with what it does",
        home: true,
    },
    Command {
        name: "about",
        usage: "",
        about: "the chat's model, its tools, where its commands run and its context size",
        home: false,
    },
    Command {
        name: "model",
        usage: "[name]",
        about: "show the chat's model and the others, or switch to one",
        home: true,
    },
    Command {
        name: "new",
        usage: "",
        about: "start a new chat with this one's settings",
        home: true,
    },
    Command {
        name: "compact",
        usage: "",
        about: "summarize the older part of the chat now",
        home: false,
    },
    Command {
        name: "clear",
        usage: "",
        about: "a fresh start: the model sees nothing above this line",
        home: false,
    },
    Command {
        name: "goal",
        usage: "[text | clear | resume | pause]",
        about: "show, set, clear, resume or pause the goal the chat works toward by itself",
        home: false,
    },
    Command {
        name: "loop",
        usage: "[interval] prompt | list | stop [id]",
        about:
            "send a prompt again and again (every 5m, or as the model decides), list or stop loops",
        home: false,
    },
    Command {
        name: "agent",
        usage: "name task",
        about: "hand a task to one of your saved agents",
        home: true,
    },
    Command {
        name: "skill",
        usage: "name [words]",
        about: "send your words with one of the chat's skills (or type /name of the skill)",
        home: true,
    },
    Command {
        name: "attach",
        usage: "",
        about: "send files: the page's clip button, or tandem chat send --file",
        home: true,
    },
];

/// The command a message's text names: `(name, the rest)`, or `None` when
/// the text is a message (`/etc/hosts …` is not a command).
pub fn of_text(text: &str) -> Option<(&'static str, String)> {
    let rest = text.trim_start().strip_prefix('/')?;
    let (word, args) = match rest.split_once(char::is_whitespace) {
        Some((word, args)) => (word, args.trim()),
        None => (rest.trim_end(), ""),
    };
    let command = COMMANDS
        .iter()
        .find(|c| c.name.eq_ignore_ascii_case(word))?;
    Some((command.name, args.to_string()))
}

#[derive(Deserialize)]
pub struct ListQuery {
    #[serde(default)]
    conversation_id: Option<String>,
}

/// `GET /commands`: the registry, with each argument's choices for the chat
/// named (its goal's verbs, its loops, the models, the saved agents).
pub async fn list(
    State(app): State<Arc<App>>,
    Query(query): Query<ListQuery>,
) -> Result<axum::Json<Value>, ApiError> {
    let chat = query.conversation_id;
    let skills = match &chat {
        Some(id) => Some(app.runs.chat_skills_of(id).await?),
        None => None,
    };
    let skills: Vec<crate::skills::Skill> = skills
        .as_ref()
        .map(|s| s.on().into_iter().cloned().collect())
        .unwrap_or_default();
    let (goal, loops, agents) = app
        .store
        .read(move |conn| {
            let (goal, loops) = match &chat {
                Some(id) => {
                    queries::conversation(conn, id, Trashed::Include)?;
                    (queries::goal(conn, id)?, queries::loops(conn, id)?)
                }
                None => (None, Vec::new()),
            };
            Ok((goal, loops, crate::agents::list(conn)?))
        })
        .await?;
    let models: Vec<String> = app
        .engine_state()
        .models
        .into_iter()
        .map(|m| m.id)
        .collect();
    let commands: Vec<Value> = COMMANDS
        .iter()
        .map(|c| {
            let choices: Vec<String> = match c.name {
                "model" => models.clone(),
                "agent" => agents.iter().map(|a| a.name.clone()).collect(),
                "skill" => skills.iter().map(|s| s.name.clone()).collect(),
                "goal" if goal.is_some() => ["clear", "resume", "pause"].map(String::from).to_vec(),
                "loop" => {
                    let mut verbs = vec!["list".to_string()];
                    verbs.extend(loops.iter().map(|l| format!("stop {}", l.id)));
                    verbs
                }
                _ => Vec::new(),
            };
            json!({"name": c.name, "usage": c.usage, "about": c.about, "home": c.home, "choices": choices})
        })
        .collect();
    // Each skill of the chat is a command of its own, unless a command
    // of the registry has its name (`/skill NAME` reaches it then).
    let skills: Vec<Value> = skills
        .iter()
        .map(|s| {
            let usage = if of_text(&format!("/{}", s.name)).is_some() {
                format!("/skill {} [words]", s.name)
            } else {
                format!("/{} [words]", s.name)
            };
            json!({"name": s.name, "usage": usage, "about": s.description, "layer": s.layer})
        })
        .collect();
    Ok(axum::Json(
        json!({ "commands": commands, "skills": skills }),
    ))
}

/// A body for a route, made as a device would send it.
fn body<T: DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    serde_json::from_value(value).map_err(|e| ApiError::bad_input("text", e))
}

/// Runs command `name` with `args` in chat `id`: `{command, text, …}`,
/// `text` what a person reads (the bots send it as it is).
pub async fn run(
    app: Arc<App>,
    id: String,
    name: &str,
    args: String,
) -> Result<Response, ApiError> {
    let chat = id.clone();
    let conversation = app
        .store
        .read(move |conn| queries::conversation(conn, &chat, Trashed::Exclude))
        .await?;
    let (text, extra) = match name {
        "help" => (help(), json!({})),
        "about" => about(&app, &conversation).await?,
        "model" => model(&app, &conversation, &args).await?,
        "new" => {
            let made = super::conversations::create(
                State(app.clone()),
                Json(body(
                    json!({"model": conversation.model, "settings": conversation.settings}),
                )?),
            )
            .await?;
            let made = super::body::json_of(made).await?;
            let new_id = made["id"].as_str().unwrap_or("").to_string();
            (
                format!("New chat {new_id}."),
                json!({"conversation_id": new_id}),
            )
        }
        "compact" => {
            let done = super::conversations::compact(State(app.clone()), Path(id))
                .await?
                .0;
            let said = format!("Compacted: {} → {} tokens.", done["before"], done["after"]);
            (said, done)
        }
        "clear" => {
            let _cleared = super::conversations::clear(State(app.clone()), Path(id)).await?;
            (
                "Cleared: the model sees nothing above this line.".into(),
                json!({}),
            )
        }
        "goal" => super::goals::command(&app, id, &args).await?,
        "loop" => super::loops::command(&app, id, &args).await?,
        // A message with its agent: `messages::send` sends it as one.
        "agent" => return Err(ApiError::bad_input("text", "write /agent NAME TASK")),
        "skill" => {
            return Err(ApiError::bad_input(
                "text",
                "write /skill NAME and your words",
            ))
        }
        _ => (
            "Attach files with the clip button on the page, or `tandem chat send --file PATH`."
                .to_string(),
            json!({}),
        ),
    };
    let mut out = json!({"command": name, "text": text});
    if let (Value::Object(out), Value::Object(extra)) = (&mut out, extra) {
        out.extend(extra);
    }
    Ok(axum::Json(out).into_response())
}

fn help() -> String {
    let mut text = String::from("Commands:");
    for c in &COMMANDS {
        let usage = if c.usage.is_empty() {
            String::new()
        } else {
            format!(" {}", c.usage)
        };
        text.push_str(&format!("\n/{}{usage} — {}", c.name, c.about));
    }
    text
}

async fn about(
    app: &Arc<App>,
    conversation: &crate::model::Conversation,
) -> Result<(String, Value), ApiError> {
    let loaded = app
        .engine_state()
        .models
        .iter()
        .any(|m| m.id == conversation.model);
    let (tools, window) = app
        .runs
        .about(&conversation.id, &conversation.model)
        .await?;
    let skills = app.runs.chat_skills_of(&conversation.id).await?.on().len();
    let commands = if app.sandboxes.is_some() {
        "in the chat's sandbox"
    } else {
        match app.config.host_exec() {
            crate::config::HostExec::Off => "nowhere (no sandbox, host commands off)",
            crate::config::HostExec::Ask => "on this machine, each asked for first",
            crate::config::HostExec::On => "on this machine",
        }
    };
    let text = format!(
        "Model: {} ({}). Tools: {tools}. Skills: {skills}. Commands run {commands}. Context: {window} tokens.",
        conversation.model,
        if loaded { "the engine serves it" } else { "the engine does not list it" },
    );
    let extra = json!({"model": conversation.model, "loaded": loaded, "tools": tools,
                       "skills": skills, "commands_run": commands, "context_window": window});
    Ok((text, extra))
}

async fn model(
    app: &Arc<App>,
    conversation: &crate::model::Conversation,
    args: &str,
) -> Result<(String, Value), ApiError> {
    let models: Vec<String> = app
        .engine_state()
        .models
        .into_iter()
        .map(|m| m.id)
        .collect();
    if args.is_empty() {
        let text = format!(
            "Model: {}. The engine serves: {}.",
            conversation.model,
            if models.is_empty() {
                "nothing it lists".to_string()
            } else {
                models.join(", ")
            }
        );
        return Ok((text, json!({"model": conversation.model, "models": models})));
    }
    let changed = super::conversations::update(
        State(app.clone()),
        Path(conversation.id.clone()),
        Json(body(json!({ "model": args }))?),
    )
    .await?;
    Ok((
        format!("Model: {}.", changed.model),
        json!({"model": changed.model}),
    ))
}

/// The command of a send: its `command` field (the text its arguments),
/// or its text when that names one. `Err` for a `command` not in the registry.
pub fn of_send(
    command: Option<&str>,
    text: &str,
) -> Result<Option<(&'static str, String)>, ApiError> {
    let Some(command) = command else {
        return Ok(of_text(text));
    };
    let line = format!("/{} {text}", command.trim().trim_start_matches('/'));
    match of_text(&line) {
        Some(found) => Ok(Some(found)),
        None => Err(ApiError::bad_input(
            "command",
            format!(
                "{:?} is not a command; they are: {}",
                command.chars().take(40).collect::<String>(),
                COMMANDS
                    .iter()
                    .map(|c| c.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_is_a_command_only_when_its_first_word_names_one() {
        assert_eq!(of_text("/help"), Some(("help", String::new())));
        assert_eq!(
            of_text("  /GOAL  write the summary "),
            Some(("goal", "write the summary".into()))
        );
        assert_eq!(
            of_text("/loop 5m check\nthe build"),
            Some(("loop", "5m check\nthe build".into()))
        );
        assert_eq!(of_text("/etc/hosts is broken"), None);
        assert_eq!(of_text("help"), None);
        assert_eq!(of_text("/"), None);
        assert_eq!(of_text("/é"), None);
    }

    #[test]
    fn help_names_every_command() {
        let text = help();
        for c in &COMMANDS {
            assert!(text.contains(&format!("/{}", c.name)), "{text}");
        }
    }
}
