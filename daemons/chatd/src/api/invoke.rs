//! A message that asks for a saved agent: `agent` on a send, or text that
//! starts `/agent <name> <task>`. The message keeps the person's task; an
//! `{kind: "agent"}` record beside its files names the agent, and the
//! model is told to start that agent as a sub-agent (context.rs). Such a
//! message starts a turn: while one runs it is refused, not left waiting.

use serde_json::{json, Value};
use tandem_shared::http::ApiError;

use crate::agents::{self, Agent};
use crate::store::tool_groups;
use crate::words::ToolGroup;
use crate::App;

/// What a message's text starts with to ask for an agent.
const COMMAND: &str = "/agent";

/// The record a message that asks for `agent` with `task` (the person's
/// words alone, without the files' text) carries.
pub fn record(agent: &Agent, task: &str) -> Value {
    json!({"kind": "agent", "agent_id": agent.id, "name": agent.name, "task": task})
}

/// The agent a message asks for, and the task left once a `/agent <name>`
/// lead is taken off; `None` when it asks for none. Refused (400 naming
/// `agent`) where saved agents are off for the chat or no agent answers
/// to the name.
pub async fn asked(
    app: &App,
    chat: &str,
    field: Option<String>,
    text: &str,
) -> Result<Option<(Value, String)>, ApiError> {
    let lead = text.trim_start();
    let commanded = lead
        .strip_prefix(COMMAND)
        .filter(|rest| rest.is_empty() || rest.starts_with(char::is_whitespace));
    if field.is_none() && commanded.is_none() {
        return Ok(None);
    }
    let chat_id = chat.to_string();
    let (chat, text) = (chat.to_string(), text.to_string());
    let commanded = commanded.map(str::to_string);
    app.store
        .read(move |conn| {
            crate::store::queries::conversation(
                conn,
                &chat,
                crate::store::queries::Trashed::Exclude,
            )?;
            let all = agents::list(conn)?;
            // The field wins over a lead in the text.
            let (agent, task) = if let Some(word) = &field {
                match agents::named(conn, word)? {
                    Ok(Some(agent)) => (agent, text.clone()),
                    Ok(None) => return Err(unknown(word, &all)),
                    Err(why) => return Err(ApiError::bad_input("agent", why)),
                }
            } else {
                let rest = commanded.as_deref().unwrap_or("");
                match by_lead(&all, rest) {
                    Some((agent, task)) => (agent.clone(), task.to_string()),
                    None => return Err(unknown(rest.split_whitespace().next().unwrap_or(""), &all)),
                }
            };
            if !tool_groups::is_on(conn, &chat, ToolGroup::Subagents)? {
                return Err(ApiError::bad_input(
                    "agent",
                    "sub-agents are switched off for this chat: switch them on first \
                     (PUT …/builtins, or the chat's Tools menu on the page)",
                ));
            }
            if !tool_groups::is_on(conn, &chat, ToolGroup::SavedAgents)? {
                return Err(ApiError::bad_input(
                    "agent",
                    "saved agents are switched off for this chat: switch them on first \
                     (PUT …/builtins {\"on\": [\"saved_agents\"]}, or the chat's tools on the page)",
                ));
            }
            if task.trim().is_empty() {
                return Err(ApiError::bad_input(
                    "text",
                    format!("is empty: say what {:?} should do after its name", agent.name),
                ));
            }
            fits_a_task(&task)?;
            if agents::of_conversation(conn, &chat)?
                .is_some_and(|a| !a.grants(crate::tools::spawn::NAME))
            {
                return Err(ApiError::bad_input(
                    "agent",
                    "this chat's own agent does not grant spawn_agent, so it cannot start another",
                ));
            }
            // Checked again in the job that stores it; a refusal here saves no file.
            if crate::store::queries::active_run(conn, &chat)?.is_some() {
                return Err(busy());
            }
            Ok(Some((agent, task)))
        })
        .await?
        .map(|(agent, task)| {
            // A folder agent only where its folder is inside this chat's.
            let chat = chat_id.as_str();
            app.folders
                .fits(chat, &agent.name, agent.folder.as_ref())
                .map_err(|why| ApiError::bad_input("agent", why))?;
            Ok(Some((record(&agent, &task), task)))
        })
        .unwrap_or(Ok(None))
}

/// An edited message's records: an agent's record takes the new words as
/// its task (held to a task's length), the rest as they were.
pub fn retask(records: Option<Value>, text: &str) -> Result<Option<Value>, ApiError> {
    let Some(Value::Array(mut records)) = records else {
        return Ok(records);
    };
    for record in records.iter_mut().filter(|r| r["kind"] == "agent") {
        fits_a_task(text)?;
        record["task"] = json!(text);
    }
    Ok(Some(Value::Array(records)))
}

/// 400 naming `text` when it is longer than a sub-agent's task may be.
fn fits_a_task(text: &str) -> Result<(), ApiError> {
    let most = crate::tools::spawn::TASK_CHARS;
    if text.chars().count() > most {
        return Err(ApiError::bad_input(
            "text",
            format!("is over {most} characters, the most a sub-agent's task may hold"),
        ));
    }
    Ok(())
}

/// 409 `run_active`: a message for an agent starts a turn, it does not wait.
pub fn busy() -> ApiError {
    ApiError::conflict(
        "run_active",
        "a message for a saved agent starts a turn and does not wait: send it again when the \
         model has answered",
    )
}

/// The agent whose id or name (in any case, the longest that fits) leads
/// `rest`, and the words after it.
fn by_lead<'a>(all: &'a [Agent], rest: &'a str) -> Option<(&'a Agent, &'a str)> {
    let rest = rest.trim_start();
    let ends_word =
        |at: usize| rest[at..].is_empty() || rest[at..].starts_with(char::is_whitespace);
    all.iter()
        .filter_map(|a| {
            [a.id.as_str(), a.name.as_str()]
                .into_iter()
                .find_map(|word| {
                    let head = rest.get(..word.len())?;
                    (head.to_lowercase() == word.to_lowercase())
                        .then_some(word.len())
                        .filter(|at| ends_word(*at))
                        .map(|at| (a, at))
                })
        })
        .max_by_key(|(_, at)| *at)
        .map(|(a, at)| (a, rest[at..].trim_start()))
}

fn unknown(word: &str, all: &[Agent]) -> ApiError {
    ApiError::bad_input("agent", agents::none_named(word, all))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(id: &str, name: &str) -> Agent {
        Agent {
            id: id.into(),
            name: name.into(),
            description: String::new(),
            instructions: String::new(),
            model: String::new(),
            tools: None,
            settings: Default::default(),
            folder: None,
            network: None,
            created: String::new(),
            updated: String::new(),
        }
    }

    #[test]
    fn the_longest_name_that_leads_the_text_is_the_agent() {
        let all = [
            agent("a_1", "Code"),
            agent("a_2", "Code reviewer"),
            agent("a_3", "Écrivain"),
        ];
        let (a, task) = by_lead(&all, " code REVIEWER check the draft").unwrap();
        assert_eq!((a.id.as_str(), task), ("a_2", "check the draft"));
        let (a, task) = by_lead(&all, "Code check it").unwrap();
        assert_eq!((a.id.as_str(), task), ("a_1", "check it"));
        let (a, task) = by_lead(&all, "a_3 relis ceci").unwrap();
        assert_eq!((a.id.as_str(), task), ("a_3", "relis ceci"));
        let (a, _) = by_lead(&all, "écrivain relis").unwrap();
        assert_eq!(a.id, "a_3");
        // A name must end at a space: "Coder" is not "Code".
        assert!(by_lead(&all, "Coder fix it").is_none());
        assert!(by_lead(&all, "").is_none());
    }
}
