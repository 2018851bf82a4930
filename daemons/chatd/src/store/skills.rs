//! A chat's skills: the switches it turned off, and the skills its model
//! loaded, so a compaction that summarizes them away puts them back.

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

/// Notes that the chat's model got skill `name` now: after the chat's
/// newest message so far (the mark a compaction is compared with).
pub fn loaded(conn: &Connection, conversation_id: &str, name: &str) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO chat_skills_loaded (conversation_id, name, at)
         VALUES (?1, ?2, (SELECT coalesce(max(rowid), 0) FROM messages))
         ON CONFLICT (conversation_id, name) DO UPDATE SET at = excluded.at",
        params![conversation_id, name],
    )?;
    Ok(())
}

/// The skills loaded before the chat's last compaction and after its last
/// clear, newest first: a summary stands where their text was.
pub fn summarized_away(conn: &Connection, conversation_id: &str) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare_cached(
        "SELECT name FROM chat_skills_loaded
         WHERE conversation_id = ?1
           AND at < (SELECT coalesce(max(rowid), 0) FROM messages
                     WHERE conversation_id = ?1 AND role = 'compacted')
           AND at > (SELECT coalesce(max(rowid), 0) FROM messages
                     WHERE conversation_id = ?1 AND role = 'cleared')
         ORDER BY at DESC, name",
    )?;
    let rows = stmt.query_map([conversation_id], |r| r.get(0))?;
    rows.collect()
}
