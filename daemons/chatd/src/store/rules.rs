//! Permission rules as the API lists, adds and removes them (a chat's own,
//! or every chat's), and as "Always" on a card adds them.

use rusqlite::{params, Connection, OptionalExtension};
use serde_json::{json, Value};
use tandem_shared::http::ApiError;
use tandem_shared::time::{new_id, now_rfc3339};

use super::Ctx;

/// The rules of a chat (`None`: every chat's), oldest first, as the API shows them.
pub fn list(conn: &Connection, conversation_id: Option<&str>) -> Result<Vec<Value>, ApiError> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, tool, pattern, verdict, created FROM rules \
         WHERE conversation_id IS ?1 ORDER BY rowid",
    )?;
    let rows = stmt.query_map([conversation_id], |r| {
        Ok(json!({
            "id": r.get::<_, String>(0)?,
            "tool": r.get::<_, String>(1)?,
            "pattern": r.get::<_, String>(2)?,
            "verdict": r.get::<_, String>(3)?,
            "created": r.get::<_, String>(4)?,
        }))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// A rule to add: `conversation_id` `None` is every chat's.
pub struct NewRule<'a> {
    pub conversation_id: Option<&'a str>,
    pub tool: &'a str,
    /// The command words, spaces already made single.
    pub pattern: &'a str,
    pub verdict: &'a str,
}

/// Stores a rule; answers it as the API shows it.
pub fn insert(ctx: &mut Ctx, new: &NewRule) -> Result<Value, ApiError> {
    let id = new_id("rule_");
    let created = now_rfc3339();
    ctx.conn().execute(
        "INSERT INTO rules (id, conversation_id, tool, pattern, verdict, created) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            id,
            new.conversation_id,
            new.tool,
            new.pattern,
            new.verdict,
            created
        ],
    )?;
    Ok(
        json!({"id": id, "tool": new.tool, "pattern": new.pattern, "verdict": new.verdict, "created": created}),
    )
}

/// Deletes the rule `rule_id` of that chat (`None`: of every chat's); a
/// rule that is not there, or is another chat's, is not found.
pub fn delete(ctx: &mut Ctx, conversation_id: Option<&str>, rule_id: &str) -> Result<(), ApiError> {
    let found: Option<String> = ctx
        .conn()
        .query_row(
            "SELECT id FROM rules WHERE id = ?1 AND conversation_id IS ?2",
            params![rule_id, conversation_id],
            |r| r.get(0),
        )
        .optional()?;
    if found.is_none() {
        return Err(ApiError::not_found("rule", rule_id));
    }
    ctx.conn()
        .execute("DELETE FROM rules WHERE id = ?1", [rule_id])?;
    Ok(())
}

/// Stores the rules "Always" on a card adds, for one chat or (`None`) every chat.
pub fn insert_always(
    ctx: &mut Ctx,
    conversation_id: Option<&str>,
    rules: &[crate::permissions::Rule],
) -> Result<(), ApiError> {
    for rule in rules {
        ctx.conn().execute(
            "INSERT INTO rules (id, conversation_id, tool, pattern, verdict, created) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                new_id("rule_"),
                conversation_id,
                rule.tool,
                rule.pattern,
                rule.verdict.as_str(),
                now_rfc3339()
            ],
        )?;
    }
    Ok(())
}
