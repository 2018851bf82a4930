//! The tool groups a chat opted into (`PUT …/builtins {on}`): off for
//! every chat until switched on for it.

use rusqlite::{params, Connection};

use crate::words::OptIn;

/// The groups chat `conversation_id` has switched on.
pub fn on_in(conn: &Connection, conversation_id: &str) -> rusqlite::Result<Vec<OptIn>> {
    let mut stmt = conn
        .prepare_cached("SELECT name FROM chat_opt_in WHERE conversation_id = ?1 ORDER BY name")?;
    let rows = stmt.query_map([conversation_id], |r| r.get::<_, String>(0))?;
    let mut on = Vec::new();
    for name in rows {
        // A group an older or newer build wrote that this one does not know is off.
        if let Some(group) = OptIn::parse(&name?) {
            on.push(group);
        }
    }
    Ok(on)
}

/// Whether chat `conversation_id` has `group` switched on.
pub fn is_on(conn: &Connection, conversation_id: &str, group: OptIn) -> rusqlite::Result<bool> {
    Ok(on_in(conn, conversation_id)?.contains(&group))
}

/// Replaces the groups a chat has switched on.
pub fn set_on_in(conn: &Connection, conversation_id: &str, on: &[OptIn]) -> rusqlite::Result<()> {
    conn.execute(
        "DELETE FROM chat_opt_in WHERE conversation_id = ?1",
        [conversation_id],
    )?;
    let mut insert = conn.prepare_cached(
        "INSERT OR IGNORE INTO chat_opt_in (conversation_id, name) VALUES (?1, ?2)",
    )?;
    for group in on {
        insert.execute(params![conversation_id, group])?;
    }
    Ok(())
}
