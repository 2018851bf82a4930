//! Writes of saved agents: made, replaced, deleted, and the count the
//! bound on how many are kept is checked against (read in the same job).

use rusqlite::params;
use serde_json::json;
use tandem_shared::http::ApiError;
use tandem_shared::time::{new_id, now_rfc3339};

use super::Ctx;
use crate::settings::Settings;

/// A checked agent: what a made or replaced agent holds.
pub struct AgentFields {
    pub name: String,
    pub description: String,
    pub instructions: String,
    pub model: String,
    /// The tools it is granted; `None` grants every tool.
    pub tools: Option<Vec<String>>,
    pub settings: Settings,
    /// The one folder its chats reach beside their own, if any.
    pub folder: Option<crate::agent_folder::AgentFolder>,
    pub network: Option<crate::words::NetPreset>,
}

impl AgentFields {
    /// The tools as stored: JSON text, or NULL.
    fn tools_text(&self) -> Option<String> {
        self.tools.as_ref().map(|t| json!(t).to_string())
    }

    fn folder_columns(&self) -> (Option<&str>, Option<crate::words::FolderMode>) {
        match &self.folder {
            Some(f) => (Some(f.path.as_str()), Some(f.mode)),
            None => (None, None),
        }
    }
}

/// Takes `grant` (a removed connector's `connector:<id>`) out of every
/// agent's tools; an agent left with no tools keeps an empty list, which
/// grants nothing (never NULL, which grants all). Answers how many changed.
pub fn drop_grant(conn: &rusqlite::Connection, grant: &str) -> rusqlite::Result<usize> {
    let pattern = format!("%{}%", json!(grant));
    let mut rows: Vec<(String, String)> = Vec::new();
    {
        let mut stmt = conn.prepare("SELECT id, tools FROM agents WHERE tools LIKE ?1")?;
        for row in stmt.query_map([&pattern], |r| Ok((r.get(0)?, r.get(1)?)))? {
            rows.push(row?);
        }
    }
    let mut changed = 0;
    for (id, text) in rows {
        let Ok(mut tools) = serde_json::from_str::<Vec<String>>(&text) else {
            continue;
        };
        let before = tools.len();
        tools.retain(|t| t != grant);
        if tools.len() != before {
            conn.execute(
                "UPDATE agents SET tools = ?2, updated = ?3 WHERE id = ?1",
                params![id, json!(tools).to_string(), now_rfc3339()],
            )?;
            changed += 1;
        }
    }
    Ok(changed)
}

/// How many agents are kept.
pub fn count(ctx: &Ctx) -> Result<i64, ApiError> {
    Ok(ctx
        .conn()
        .query_row("SELECT COUNT(*) FROM agents", [], |r| r.get(0))?)
}

/// Stores a new agent; answers its id.
pub fn insert(ctx: &mut Ctx, new: &AgentFields) -> Result<String, ApiError> {
    let id = new_id("a_");
    let now = now_rfc3339();
    let (folder, mode) = new.folder_columns();
    ctx.conn().execute(
        "INSERT INTO agents (id, name, instructions, model, tools, created, updated, settings, description, \
         folder, folder_mode, network) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7, ?8, ?9, ?10, ?11)",
        params![
            id,
            new.name,
            new.instructions,
            new.model,
            new.tools_text(),
            now,
            new.settings.to_text(),
            new.description,
            folder,
            mode,
            new.network
        ],
    )?;
    Ok(id)
}

/// Replaces everything the agent `id` holds with `new`.
pub fn replace(ctx: &mut Ctx, id: &str, new: &AgentFields) -> Result<(), ApiError> {
    let (folder, mode) = new.folder_columns();
    ctx.conn().execute(
        "UPDATE agents SET name = ?2, instructions = ?3, model = ?4, tools = ?5, updated = ?6, settings = ?7, \
         description = ?8, folder = ?9, folder_mode = ?10, network = ?11 WHERE id = ?1",
        params![id, new.name, new.instructions, new.model, new.tools_text(), now_rfc3339(),
                new.settings.to_text(), new.description, folder, mode, new.network],
    )?;
    Ok(())
}

/// Deletes the agent; one that kept to a folder is remembered, so its
/// chats are refused rather than given every file.
pub fn delete(ctx: &mut Ctx, id: &str) -> Result<(), ApiError> {
    ctx.conn().execute(
        "INSERT OR IGNORE INTO agents_gone_confined (id) \
         SELECT id FROM agents WHERE id = ?1 AND folder_mode IS NOT NULL",
        [id],
    )?;
    ctx.conn()
        .execute("DELETE FROM agents WHERE id = ?1", [id])?;
    Ok(())
}
