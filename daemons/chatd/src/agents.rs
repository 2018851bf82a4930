//! Saved agents: a name, instructions for the system message, a model and
//! the tools they may use. A conversation made with one keeps its id and
//! looks the agent up at each request, so an edit reaches its next run and a
//! deleted agent leaves the chat with chatd's plain system block (which says
//! so) and every tool. An agent's run history is read here too.

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
    /// The one folder its chats reach beside their own, if it keeps to one.
    pub folder: Option<crate::agent_folder::AgentFolder>,
    /// The network its chats start with (`None`: the box's default), under
    /// the box's ceiling; its trigger and bot runs never show a card.
    pub network: Option<crate::words::NetPreset>,
    pub created: String,
    pub updated: String,
}

const COLUMNS: &str =
    "id, name, instructions, model, tools, created, updated, settings, description, folder, folder_mode, network";

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
            folder: crate::agent_folder::AgentFolder::from_columns(row.get(9)?, row.get(10)?),
            network: row.get(11)?,
        })
    }

    /// Whether the agent may use `tool`.
    pub fn grants(&self, tool: &str) -> bool {
        // The goal's and the loop's tools are the chat's, offered by its
        // state (`runs/brief.rs`), never an agent's to take away.
        if crate::tools::goal::is_goal_tool(tool) || crate::tools::loops::is_loop_tool(tool) {
            return true;
        }
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

/// The sentence for a word that names no agent, naming up to 20 there are.
pub fn none_named(word: &str, all: &[Agent]) -> String {
    let names: Vec<String> = all
        .iter()
        .take(20)
        .map(|a| format!("{} ({})", a.name, a.id))
        .collect();
    let known = if names.is_empty() {
        "there is no saved agent yet".to_string()
    } else {
        format!("the saved agents are: {}", names.join(", "))
    };
    format!(
        "no saved agent is named {:?}; {known}",
        word.chars().take(60).collect::<String>()
    )
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

/// What `Folders` keeps of the agents: each folder, each chat's agent and
/// the folder agents deleted (read at start).
pub fn places(conn: &Connection) -> Result<crate::agent_folder::AgentPlaces, ApiError> {
    let mut places = crate::agent_folder::AgentPlaces::default();
    for agent in list(conn)? {
        if let Some(folder) = agent.folder {
            places.folders.insert(agent.id, (agent.name, folder));
        }
    }
    let mut stmt =
        conn.prepare("SELECT id, agent_id FROM conversations WHERE agent_id IS NOT NULL")?;
    for row in stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))? {
        let (chat, agent) = row?;
        places.chat_agent.insert(chat, agent);
    }
    let mut stmt = conn.prepare("SELECT id FROM agents_gone_confined")?;
    for id in stmt.query_map([], |r| r.get::<_, String>(0))? {
        places.gone.insert(id?);
    }
    Ok(places)
}

/// The chats most recently run with an agent that `runs_of` lists.
pub const RUNS_LISTED: usize = 200;

/// One chat that ran with an agent, as its run history shows it.
#[derive(Debug, Clone, Serialize)]
pub struct AgentRun {
    pub conversation_id: String,
    pub title: String,
    /// Who made the chat: a person, a trigger, a connector.
    pub origin: crate::words::Origin,
    pub kind: crate::words::ChatKind,
    /// A run of it is queued, running or waiting now.
    pub running: bool,
    /// When its last run began; its status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_turn: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_status: Option<crate::words::RunStatus>,
}

/// An agent's run history: the chats made with it (not in the trash), the
/// newest turn first, `RUNS_LISTED` at most; `total`, `running` and `failed`
/// count them all.
#[derive(Debug, Clone, Serialize)]
pub struct RunHistory {
    pub runs: Vec<AgentRun>,
    pub total: usize,
    pub running: usize,
    pub failed: usize,
}

pub fn runs_of(conn: &Connection, agent_id: &str) -> Result<RunHistory, ApiError> {
    let mut stmt = conn.prepare_cached(
        "SELECT c.id, c.title, c.origin, c.kind, r.started, r.status \
         FROM conversations c \
         LEFT JOIN runs r ON r.rowid = \
           (SELECT r2.rowid FROM runs r2 WHERE r2.conversation_id = c.id ORDER BY r2.rowid DESC LIMIT 1) \
         WHERE c.agent_id = ?1 AND c.deleted_at IS NULL \
           AND NOT EXISTS (SELECT 1 FROM conversations p \
                           WHERE p.id = c.parent_id AND p.deleted_at IS NOT NULL) \
         ORDER BY COALESCE(r.started, c.created) DESC, c.rowid DESC",
    )?;
    let rows = stmt.query_map([agent_id], |r| {
        let status: Option<crate::words::RunStatus> = r.get(5)?;
        Ok(AgentRun {
            conversation_id: r.get(0)?,
            title: r.get(1)?,
            origin: r.get(2)?,
            kind: r.get(3)?,
            running: status.is_some_and(|s| s.is_active()),
            last_turn: r.get(4)?,
            last_status: status,
        })
    })?;
    let all: Vec<AgentRun> = rows.collect::<Result<_, _>>()?;
    let running = all.iter().filter(|r| r.running).count();
    let failed = all
        .iter()
        .filter(|r| r.last_status == Some(crate::words::RunStatus::Failed))
        .count();
    Ok(RunHistory {
        total: all.len(),
        running,
        failed,
        runs: all.into_iter().take(RUNS_LISTED).collect(),
    })
}
