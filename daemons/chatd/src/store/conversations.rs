//! Writes of a conversation's row: made, changed, its head moved, its
//! state set (a card of its live run keeps it waiting), named after its
//! first question, trashed and restored, its permission mode set, and
//! deleted for good with everything of it (by a person, or by housekeeping
//! once the trash is old); each change said with `conversation.updated`.

use rusqlite::params;
use serde_json::json;
use tandem_shared::http::ApiError;
use tandem_shared::time::{new_id, now_rfc3339};

use super::queries::{self, Trashed};
use super::Ctx;
use crate::kinds::EventKind;
use crate::model::Conversation;
use crate::permissions::Mode;
use crate::settings::Settings;
use crate::words::{ChatState, Origin};

/// The values a new conversation starts with, checked.
pub struct NewConversation {
    pub title: String,
    pub model: String,
    pub settings: Settings,
    pub permission_mode: Mode,
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
        params![id, new.title, new.model, now, new.permission_mode.as_str(), new.settings.to_text(), new.origin, new.workspace, new.agent_id],
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

pub fn set_permission_mode(ctx: &mut Ctx, id: &str, mode: Mode) -> Result<(), ApiError> {
    ctx.conn().execute(
        "UPDATE conversations SET permission_mode = ?1 WHERE id = ?2",
        params![mode.as_str(), id],
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

/// Removes a conversation and everything of it from the database, its
/// sub-agents' conversations too.
pub fn delete_forever(ctx: &mut Ctx, id: &str) -> Result<(), ApiError> {
    let children: Vec<String> = {
        let mut stmt = ctx
            .conn()
            .prepare("SELECT id FROM conversations WHERE parent_id = ?1 AND id != ?1")?;
        let ids = stmt
            .query_map([id], |r| r.get(0))?
            .collect::<Result<Vec<_>, _>>()?;
        ids
    };
    for child in children {
        delete_forever(ctx, &child)?;
    }
    for table in ["events", "pending", "runs", "messages"] {
        ctx.conn().execute(
            &format!("DELETE FROM {table} WHERE conversation_id = ?1"),
            [id],
        )?;
    }
    // Its change sets go with it (file_changes by cascade) and so does the
    // manifest of its own workspace, whose folder is removed with it.
    ctx.conn()
        .execute("DELETE FROM file_sets WHERE conversation_id = ?1", [id])?;
    ctx.conn()
        .execute("DELETE FROM workspace_files WHERE workspace = ?1", [id])?;
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

/// Says what the conversation is now with `conversation.updated`, and returns it.
pub fn announce_conversation(
    ctx: &mut Ctx,
    conversation_id: &str,
) -> Result<Conversation, ApiError> {
    let conversation = queries::conversation(ctx.conn(), conversation_id, Trashed::Include)?;
    ctx.emit(
        conversation_id,
        EventKind::ConversationUpdated,
        json!({ "conversation": conversation }),
    )?;
    Ok(conversation)
}

/// A chat with no title is named after the first line of its first user
/// message, whoever made it: a list of "New chat"s says nothing.
pub fn name_if_untitled(ctx: &mut Ctx, conversation_id: &str, text: &str) -> Result<(), ApiError> {
    let Some(title) = crate::titles::from_message(text) else {
        return Ok(());
    };
    let named = ctx.conn().execute(
        "UPDATE conversations SET title = ?1 WHERE id = ?2 AND title = ''",
        params![title, conversation_id],
    )?;
    if named > 0 {
        announce_conversation(ctx, conversation_id)?;
    }
    Ok(())
}

/// Sets the conversation's state and says so with `conversation.updated`.
/// While a card of the chat's live run waits for the person, `running` and
/// `queued` leave it `waiting`: egressd's cards come whenever a command
/// reaches out, also before the run's own `running` or while it goes on.
/// The last card's answer, or the run's end, moves it on.
pub fn set_state(ctx: &mut Ctx, conversation_id: &str, state: ChatState) -> Result<(), ApiError> {
    let state = match state {
        ChatState::Running | ChatState::Queued if card_waits(ctx.conn(), conversation_id)? => {
            ChatState::Waiting
        }
        state => state,
    };
    let changed = ctx.conn().execute(
        "UPDATE conversations SET state = ?1 WHERE id = ?2 AND state != ?1",
        params![state, conversation_id],
    )?;
    if changed > 0 {
        announce_conversation(ctx, conversation_id)?;
    }
    Ok(())
}

/// Whether the chat's live run has a card open (what the snapshot shows).
fn card_waits(conn: &rusqlite::Connection, conversation_id: &str) -> Result<bool, ApiError> {
    let Some(run) = queries::active_run(conn, conversation_id)? else {
        return Ok(false);
    };
    Ok(queries::open_consents(conn, conversation_id)?
        .iter()
        .any(|card| card.run_id == run.id))
}
