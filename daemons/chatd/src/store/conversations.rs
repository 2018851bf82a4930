//! Writes of a conversation's row: made, changed, its head moved, trashed
//! and restored, its permission mode set, and deleted for good with
//! everything of it (by a person, or by housekeeping once the trash is old).

use rusqlite::params;
use tandem_shared::http::ApiError;
use tandem_shared::time::{new_id, now_rfc3339};

use super::Ctx;
use crate::settings::Settings;
use crate::words::Origin;

/// The values a new conversation starts with, checked.
pub struct NewConversation {
    pub title: String,
    pub model: String,
    pub settings: Settings,
    pub permission_mode: String,
    pub origin: Origin,
    /// own | shared
    pub workspace: String,
    /// The saved agent it is made with.
    pub agent_id: Option<String>,
}

/// Stores a new conversation; answers its id.
pub fn insert(ctx: &mut Ctx, new: &NewConversation) -> Result<String, ApiError> {
    let id = new_id("c_");
    let now = now_rfc3339();
    ctx.conn().execute(
        "INSERT INTO conversations (id, title, model, created, updated, permission_mode, settings, origin, workspace, agent_id) \
         VALUES (?1, ?2, ?3, ?4, ?4, ?5, ?6, ?7, ?8, ?9)",
        params![id, new.title, new.model, now, new.permission_mode, new.settings.to_text(), new.origin, new.workspace, new.agent_id],
    )?;
    Ok(id)
}

/// What a change of a conversation sets; `None` keeps what it has.
pub struct ConversationChange<'a> {
    pub title: Option<&'a str>,
    pub model: Option<&'a str>,
    pub settings: Option<&'a Settings>,
}

/// Sets what `change` names and the time it changed.
pub fn update(ctx: &mut Ctx, id: &str, change: &ConversationChange) -> Result<(), ApiError> {
    let now = now_rfc3339();
    ctx.conn().execute(
        "UPDATE conversations SET title = COALESCE(?1, title), model = COALESCE(?2, model), \
         settings = COALESCE(?3, settings), updated = ?4 WHERE id = ?5",
        params![
            change.title,
            change.model,
            change.settings.map(Settings::to_text),
            now,
            id
        ],
    )?;
    Ok(())
}

/// Moves the conversation's head (the leaf of its active path) to `message_id`.
pub fn set_head(ctx: &mut Ctx, id: &str, message_id: &str) -> Result<(), ApiError> {
    ctx.conn().execute(
        "UPDATE conversations SET head_id = ?1 WHERE id = ?2",
        params![message_id, id],
    )?;
    Ok(())
}

pub fn set_permission_mode(ctx: &mut Ctx, id: &str, mode: &str) -> Result<(), ApiError> {
    ctx.conn().execute(
        "UPDATE conversations SET permission_mode = ?1 WHERE id = ?2",
        params![mode, id],
    )?;
    Ok(())
}

/// Puts the conversation in the trash as of `at_unix`.
pub fn trash(ctx: &mut Ctx, id: &str, at_unix: i64) -> Result<(), ApiError> {
    ctx.conn().execute(
        "UPDATE conversations SET deleted_at = ?1 WHERE id = ?2",
        params![at_unix, id],
    )?;
    Ok(())
}

/// Takes the conversation out of the trash.
pub fn restore(ctx: &mut Ctx, id: &str) -> Result<(), ApiError> {
    ctx.conn().execute(
        "UPDATE conversations SET deleted_at = NULL WHERE id = ?1",
        [id],
    )?;
    Ok(())
}

/// Removes a conversation and everything of it from the database.
pub fn delete_forever(ctx: &mut Ctx, id: &str) -> Result<(), ApiError> {
    for table in ["events", "pending", "runs", "messages"] {
        ctx.conn().execute(
            &format!("DELETE FROM {table} WHERE conversation_id = ?1"),
            [id],
        )?;
    }
    ctx.conn()
        .execute("DELETE FROM conversations WHERE id = ?1", [id])?;
    ctx.forget(id);
    Ok(())
}

/// Deletes for good every conversation put in the trash before
/// `cutoff_unix`; answers their ids.
pub fn purge_trash(ctx: &mut Ctx, cutoff_unix: i64) -> Result<Vec<String>, ApiError> {
    let ids: Vec<String> = {
        let mut stmt = ctx.conn().prepare(
            "SELECT id FROM conversations WHERE deleted_at IS NOT NULL AND deleted_at < ?1",
        )?;
        let ids = stmt
            .query_map([cutoff_unix], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        ids
    };
    for id in &ids {
        delete_forever(ctx, id)?;
    }
    Ok(ids)
}
