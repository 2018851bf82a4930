//! A chat's skills: the switches it turned off (a name, or layer:name).

use rusqlite::{params, Connection};

/// The most switches a chat stores.
pub const MAX_OFF: usize = 500;

/// The switches chat `conversation_id` turned off, sorted.
pub fn off(conn: &Connection, conversation_id: &str) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare_cached(
        "SELECT switch FROM chat_skills_off WHERE conversation_id = ?1 ORDER BY switch",
    )?;
    let rows = stmt.query_map([conversation_id], |r| r.get(0))?;
    rows.collect()
}

/// Replaces the chat's switches.
pub fn set_off(conn: &Connection, conversation_id: &str, off: &[String]) -> rusqlite::Result<()> {
    conn.execute(
        "DELETE FROM chat_skills_off WHERE conversation_id = ?1",
        [conversation_id],
    )?;
    let mut insert = conn.prepare_cached(
        "INSERT OR IGNORE INTO chat_skills_off (conversation_id, switch) VALUES (?1, ?2)",
    )?;
    for switch in off {
        insert.execute(params![conversation_id, switch])?;
    }
    Ok(())
}
