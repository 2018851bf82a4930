//! Writes of a conversation's messages: a message added under the head
//! (or under a given parent) and made the head, a run's answer started,
//! resumed, its calls kept and its status set, a call's result, the
//! `compacted` marker a compaction puts in, the parts an import or a fork
//! sets on a copied message, the waiting messages sent while a run works
//! (and their delivery), the idempotency keys of sends, and the streamed
//! deltas housekeeping drops once old (messages keep their text).

use rusqlite::{params, Connection, OptionalExtension};
use serde_json::{json, Value};
use tandem_shared::http::ApiError;
use tandem_shared::time::now_rfc3339;

use super::conversations::{name_if_untitled, set_head};
use super::{queries, Ctx};
use crate::kinds::EventKind;
use crate::model::Message;
use crate::words::{MessageStatus, PendingState, Role};

/// Adds a message under the conversation's head and makes it the head.
pub fn insert_message(
    ctx: &mut Ctx,
    conversation_id: &str,
    role: Role,
    text: &str,
    run_id: Option<&str>,
    status: Option<MessageStatus>,
) -> Result<Message, ApiError> {
    let mut message = Message::draft(role, text);
    message.run_id = run_id.map(str::to_string);
    message.status = status;
    insert_at_head(ctx, conversation_id, message)
}

/// Adds `message` under the conversation's head and makes it the head.
pub fn insert_at_head(
    ctx: &mut Ctx,
    conversation_id: &str,
    mut message: Message,
) -> Result<Message, ApiError> {
    message.parent_id = ctx.conn().query_row(
        "SELECT head_id FROM conversations WHERE id = ?1",
        [conversation_id],
        |r| r.get(0),
    )?;
    insert_row(ctx, conversation_id, message)
}

/// Adds a message under `parent` and makes it the head.
pub fn insert_message_under(
    ctx: &mut Ctx,
    conversation_id: &str,
    parent: Option<&str>,
    role: Role,
    text: &str,
    run_id: Option<&str>,
    status: Option<MessageStatus>,
) -> Result<Message, ApiError> {
    let mut message = Message::draft(role, text);
    message.parent_id = parent.map(str::to_string);
    message.run_id = run_id.map(str::to_string);
    message.status = status;
    insert_row(ctx, conversation_id, message)
}

/// Stores `message` (its parent set), makes it the head and says so.
pub fn insert_row(
    ctx: &mut Ctx,
    conversation_id: &str,
    message: Message,
) -> Result<Message, ApiError> {
    ctx.conn().execute(
        "INSERT INTO messages (id, conversation_id, parent_id, role, text, tool_call_id, run_id, status, created, attachments, summary, card, goal_event, goal_turn, loop_id, loop_run) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
        params![message.id, conversation_id, message.parent_id, message.role, message.text, message.tool_call_id, message.run_id, message.status, message.created,
                message.attachments.as_ref().map(Value::to_string), message.summary, message.card.as_ref().map(Value::to_string),
                message.goal_event, message.goal_turn,
                message.loop_ref.as_ref().map(|l| l.id.as_str()), message.loop_ref.as_ref().map(|l| l.run)],
    )?;
    ctx.conn().execute(
        "UPDATE conversations SET head_id = ?1, updated = ?2 WHERE id = ?3",
        params![message.id, message.created, conversation_id],
    )?;
    ctx.emit(
        conversation_id,
        EventKind::MessageCreated,
        json!({"message": message}),
    )?;
    if message.role == Role::User {
        name_if_untitled(ctx, conversation_id, &message.text)?;
    }
    Ok(message)
}

/// A run's new answer, empty and `streaming`, under the head.
pub fn new_assistant_message(
    ctx: &mut Ctx,
    conversation_id: &str,
    run_id: &str,
) -> Result<Message, ApiError> {
    insert_message(
        ctx,
        conversation_id,
        Role::Assistant,
        "",
        Some(run_id),
        Some(MessageStatus::Streaming),
    )
}

/// An answer the run `run_id` goes on writing: `streaming` again, and said so.
pub fn resume_answer(
    ctx: &mut Ctx,
    conversation_id: &str,
    run_id: &str,
    message_id: &str,
) -> Result<Message, ApiError> {
    ctx.conn().execute(
        "UPDATE messages SET status = ?1, run_id = ?2 WHERE id = ?3",
        params![MessageStatus::Streaming, run_id, message_id],
    )?;
    let message = queries::message(ctx.conn(), conversation_id, message_id)?;
    ctx.emit(
        conversation_id,
        EventKind::MessageUpdated,
        json!({"message": message}),
    )?;
    Ok(message)
}

/// Sets a message's status and says so with `message.updated`.
pub fn set_status(
    ctx: &mut Ctx,
    conversation_id: &str,
    message_id: &str,
    status: MessageStatus,
) -> Result<(), ApiError> {
    ctx.conn().execute(
        "UPDATE messages SET status = ?1 WHERE id = ?2",
        params![status, message_id],
    )?;
    let message = queries::message(ctx.conn(), conversation_id, message_id)?;
    ctx.emit(
        conversation_id,
        EventKind::MessageUpdated,
        json!({"message": message}),
    )?;
    Ok(())
}

/// Keeps an answer's tool calls (`calls`: their JSON array).
pub fn set_tool_calls(ctx: &mut Ctx, message_id: &str, calls: &str) -> Result<(), ApiError> {
    ctx.conn().execute(
        "UPDATE messages SET tool_calls = ?1 WHERE id = ?2",
        params![calls, message_id],
    )?;
    Ok(())
}

/// A call's result, as its `tool` message.
pub struct ToolResult<'a> {
    pub run_id: &'a str,
    pub call_id: &'a str,
    /// What the model reads.
    pub text: &'a str,
    /// The result in one line ("" for none).
    pub summary: &'a str,
    pub status: MessageStatus,
    /// The line's card (a `files_change`), if the call changed files.
    pub card: Option<&'a Value>,
}

/// Adds a call's result under the head and makes it the head.
pub fn insert_tool_message(
    ctx: &mut Ctx,
    conversation_id: &str,
    result: &ToolResult,
) -> Result<Message, ApiError> {
    let mut message = Message::draft(Role::Tool, result.text);
    message.tool_call_id = Some(result.call_id.to_string());
    message.summary = (!result.summary.is_empty()).then(|| result.summary.to_string());
    message.run_id = Some(result.run_id.to_string());
    message.status = Some(result.status);
    message.card = result.card.cloned();
    insert_at_head(ctx, conversation_id, message)
}

/// The `compacted` marker a compaction puts in.
pub struct NewSummary<'a> {
    /// The leaf the summary goes under (the streaming answer's parent, or the head).
    pub leaf: Option<&'a str>,
    /// The answer a run is writing: it stays the head, moved under the marker.
    pub answer: Option<&'a str>,
    pub text: &'a str,
    /// The first message kept word for word after it.
    pub keep_from: Option<&'a str>,
}

/// Puts a compaction's summary under `leaf`, the answer being written (if
/// any) moved under it; a conflict when the chat moved on meanwhile (a
/// message sent during the summary call: the marker would cut it off).
pub fn insert_summary(
    ctx: &mut Ctx,
    conversation_id: &str,
    summary: &NewSummary,
) -> Result<Message, ApiError> {
    let cid = conversation_id;
    let conversation = queries::conversation(ctx.conn(), cid, queries::Trashed::Include)?;
    let expected = summary.answer.or(summary.leaf);
    if conversation.head_id.as_deref() != expected {
        return Err(ApiError::conflict(
            "chat_moved",
            "the chat changed while it was being compacted; nothing was compacted, try again",
        ));
    }
    let marker = insert_message_under(
        ctx,
        cid,
        summary.leaf,
        Role::Compacted,
        summary.text,
        None,
        None,
    )?;
    ctx.conn().execute(
        "UPDATE messages SET keep_from = ?1 WHERE id = ?2",
        params![summary.keep_from, marker.id],
    )?;
    // The answer being written stays the head, now under the summary.
    if let Some(mid) = summary.answer {
        ctx.conn().execute(
            "UPDATE messages SET parent_id = ?1 WHERE id = ?2",
            params![marker.id, mid],
        )?;
        set_head(ctx, cid, mid)?;
        let message = queries::message(ctx.conn(), cid, mid)?;
        ctx.emit(cid, EventKind::MessageUpdated, json!({"message": message}))?;
    }
    Ok(marker)
}

/// Turns every waiting message into a user message on the active path.
pub fn deliver_waiting(ctx: &mut Ctx, conversation_id: &str) -> Result<(), ApiError> {
    for pending in queries::waiting(ctx.conn(), conversation_id)? {
        ctx.conn().execute(
            "UPDATE pending SET state = ?1 WHERE id = ?2",
            params![PendingState::Delivered, pending.id],
        )?;
        let mut message = Message::draft(Role::User, &pending.text);
        message.attachments = pending.attachments;
        message.card = pending.card;
        let message = insert_at_head(ctx, conversation_id, message)?;
        ctx.emit(
            conversation_id,
            EventKind::PendingDelivered,
            json!({"pending_id": pending.id, "message_id": message.id}),
        )?;
    }
    Ok(())
}

/// Sets an imported message's calls, the call it answers, and where a
/// compaction's kept part starts.
pub fn set_imported_parts(
    ctx: &mut Ctx,
    message_id: &str,
    tool_calls: Option<&[Value]>,
    tool_call_id: Option<&str>,
    keep_from: Option<&str>,
) -> Result<(), ApiError> {
    ctx.conn().execute(
        "UPDATE messages SET tool_calls = ?1, tool_call_id = ?2, keep_from = ?3 WHERE id = ?4",
        params![
            tool_calls.map(|c| Value::Array(c.to_vec()).to_string()),
            tool_call_id,
            keep_from,
            message_id
        ],
    )?;
    Ok(())
}

/// Sets a forked copy's calls, reasoning and compaction's kept part.
pub fn set_forked_parts(
    ctx: &mut Ctx,
    message_id: &str,
    tool_calls: Option<&Value>,
    reasoning: Option<&str>,
    keep_from: Option<&str>,
) -> Result<(), ApiError> {
    ctx.conn().execute(
        "UPDATE messages SET tool_calls = ?1, reasoning = ?2, keep_from = ?3 WHERE id = ?4",
        params![
            tool_calls.map(Value::to_string),
            reasoning,
            keep_from,
            message_id
        ],
    )?;
    Ok(())
}

/// Stores a message sent while a run works, waiting for the model.
pub fn insert_pending(
    ctx: &mut Ctx,
    id: &str,
    conversation_id: &str,
    text: &str,
    attachments: Option<&Value>,
    card: Option<&Value>,
) -> Result<(), ApiError> {
    ctx.conn().execute(
        "INSERT INTO pending (id, conversation_id, text, created, attachments, card) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![id, conversation_id, text, now_rfc3339(), attachments.map(Value::to_string), card.map(Value::to_string)],
    )?;
    Ok(())
}

pub fn set_pending_text(ctx: &mut Ctx, id: &str, text: &str) -> Result<(), ApiError> {
    ctx.conn().execute(
        "UPDATE pending SET text = ?1 WHERE id = ?2",
        params![text, id],
    )?;
    Ok(())
}

pub fn delete_pending(ctx: &mut Ctx, id: &str) -> Result<(), ApiError> {
    ctx.conn()
        .execute("DELETE FROM pending WHERE id = ?1", [id])?;
    Ok(())
}

/// What the first send with `key` in the chat answered, as stored.
pub fn send_key_answer(
    conn: &Connection,
    conversation_id: &str,
    key: &str,
) -> Result<Option<String>, ApiError> {
    Ok(conn
        .query_row(
            "SELECT answer FROM send_keys WHERE conversation_id = ?1 AND key = ?2",
            params![conversation_id, key],
            |r| r.get(0),
        )
        .optional()?)
}

/// Keeps what a send with `key` answered, for the same key again.
pub fn insert_send_key(
    ctx: &mut Ctx,
    conversation_id: &str,
    key: &str,
    answer: &Value,
) -> Result<(), ApiError> {
    ctx.conn().execute(
        "INSERT INTO send_keys (conversation_id, key, answer, created_unix) VALUES (?1, ?2, ?3, ?4)",
        params![conversation_id, key, answer.to_string(), tandem_shared::time::now_unix()],
    )?;
    Ok(())
}

/// Drops the keys of sends made before `cutoff_unix`; answers how many.
pub fn drop_send_keys_before(ctx: &mut Ctx, cutoff_unix: i64) -> Result<usize, ApiError> {
    Ok(ctx.conn().execute(
        "DELETE FROM send_keys WHERE created_unix < ?1",
        params![cutoff_unix],
    )?)
}

/// Drops the `text.delta` and `reasoning.delta` events written before
/// `cutoff_unix`; answers how many.
pub fn drop_deltas_before(ctx: &mut Ctx, cutoff_unix: i64) -> Result<usize, ApiError> {
    Ok(ctx.conn().execute(
        "DELETE FROM events WHERE kind IN ('text.delta', 'reasoning.delta') AND created < ?1",
        params![cutoff_unix],
    )?)
}
