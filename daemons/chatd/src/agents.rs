//! Saved agents: a name, instructions for the system message, a model and
//! the tools they may use. A conversation made with one keeps its id and
//! looks the agent up at each request, so an edit reaches its next run and a
//! deleted agent leaves the chat with chatd's plain system block and every tool.

use rusqlite::{Connection, OptionalExtension, Row};
use serde::Serialize;
use tandem_shared::http::ApiError;

#[derive(Debug, Clone, Serialize)]
pub struct Agent {
    pub id: String,
    pub name: String,
    /// What it is for, as list_agents tells a chat's model.
    pub description: String,
    pub instructions: String,
    /// Empty: chatd's default model.
    pub model: String,
    /// The tools it may use; `None`: every tool.
    pub tools: Option<Vec<String>>,
    /// Its model settings; a chat made with it sets its own over them.
    pub settings: crate::settings::Settings,
    pub created: String,
    pub updated: String,
}

const COLUMNS: &str =
    "id, name, instructions, model, tools, created, updated, settings, description";

impl Agent {
    fn from_row(row: &Row) -> rusqlite::Result<Agent> {
        let tools: Option<String> = row.get(4)?;
        Ok(Agent {
            id: row.get(0)?,
            name: row.get(1)?,
            instructions: row.get(2)?,
            model: row.get(3)?,
            // Written by chatd as a JSON array; anything else reads as no grant.
            tools: tools.map(|t| serde_json::from_str(&t).unwrap_or_default()),
            created: row.get(5)?,
            updated: row.get(6)?,
            settings: crate::settings::Settings::from_stored_text(&row.get::<_, String>(7)?),
            description: row.get(8)?,
        })
    }

    /// Whether the agent may use `tool`.
    pub fn grants(&self, tool: &str) -> bool {
        match &self.tools {
            Some(tools) => tools.iter().any(|t| t == tool),
            None => true,
        }
    }
}

/// Every agent, oldest first.
pub fn list(conn: &Connection) -> Result<Vec<Agent>, ApiError> {
    let mut stmt = conn.prepare_cached(&format!("SELECT {COLUMNS} FROM agents ORDER BY rowid"))?;
    let rows = stmt.query_map([], Agent::from_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The agent `id`, if it exists.
pub fn find(conn: &Connection, id: &str) -> Result<Option<Agent>, ApiError> {
    Ok(conn
        .prepare_cached(&format!("SELECT {COLUMNS} FROM agents WHERE id = ?1"))?
        .query_row([id], Agent::from_row)
        .optional()?)
}

/// The agent `id`, or 404 `not_found`.
pub fn get(conn: &Connection, id: &str) -> Result<Agent, ApiError> {
    find(conn, id)?.ok_or_else(|| ApiError::not_found("agent", id))
}

/// The agent a word names: its id, else its name in any case. Two agents of
/// that name: `Err` with a sentence saying to use the id.
pub fn named(conn: &Connection, word: &str) -> Result<Result<Option<Agent>, String>, ApiError> {
    let word = word.trim();
    if let Some(agent) = find(conn, word)? {
        return Ok(Ok(Some(agent)));
    }
    let mut found: Vec<Agent> = list(conn)?
        .into_iter()
        .filter(|a| a.name.to_lowercase() == word.to_lowercase())
        .collect();
    Ok(match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        n => Err(format!(
            "{n} agents are named {:?}: name one by its id ({})",
            found[0].name,
            found
                .iter()
                .map(|a| a.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    })
}

/// The agent of a conversation, when it was made with one that still exists.
pub fn of_conversation(
    conn: &Connection,
    conversation_id: &str,
) -> Result<Option<Agent>, ApiError> {
    let agent_id: Option<String> = conn
        .prepare_cached("SELECT agent_id FROM conversations WHERE id = ?1")?
        .query_row([conversation_id], |r| r.get(0))
        .optional()?
        .flatten();
    match agent_id {
        Some(id) => find(conn, &id),
        None => Ok(None),
    }
}
