//! Writes of a conversation's messages beside the run's own: the parts an
//! import or a fork sets on a copied message, the waiting messages sent
//! while a run works, the idempotency keys of sends, and the streamed
//! deltas housekeeping drops once old (messages keep their text).

use rusqlite::{params, Connection, OptionalExtension};
use serde_json::Value;
use tandem_shared::http::ApiError;
use tandem_shared::time::now_rfc3339;

use super::Ctx;

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
) -> Result<(), ApiError> {
    ctx.conn().execute(
        "INSERT INTO pending (id, conversation_id, text, created, attachments) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![id, conversation_id, text, now_rfc3339(), attachments.map(Value::to_string)],
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
