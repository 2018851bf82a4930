//! A chat's tool group switches (`PUT …/builtins {off, on}`): a group is
//! on until the chat switches it off, an opt-in one off until switched on.

use rusqlite::{params, Connection};

use crate::words::ToolGroup;

/// What a chat switched away from the defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Switches {
    /// Default-on groups switched off.
    pub off: Vec<ToolGroup>,
    /// Opt-in groups switched on.
    pub on: Vec<ToolGroup>,
}

impl Switches {
    /// Whether `group` serves the chat by its switch (other rules aside).
    pub fn is_on(&self, group: ToolGroup) -> bool {
        if crate::tools::groups::opt_in(group) {
            self.on.contains(&group)
        } else {
            !self.off.contains(&group)
        }
    }
}

/// Chat `conversation_id`'s switches.
pub fn of(conn: &Connection, conversation_id: &str) -> rusqlite::Result<Switches> {
    let mut stmt = conn.prepare_cached(
        "SELECT name, is_on FROM chat_tool_groups WHERE conversation_id = ?1 ORDER BY name",
    )?;
    let rows = stmt.query_map([conversation_id], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, bool>(1)?))
    })?;
    let mut switches = Switches::default();
    for row in rows {
        let (name, on) = row?;
        // A group an older or newer build wrote that this one does not
        // know switches nothing.
        match (ToolGroup::parse(&name), on) {
            (Some(group), true) => switches.on.push(group),
            (Some(group), false) => switches.off.push(group),
            (None, _) => {}
        }
    }
    Ok(switches)
}

/// Whether chat `conversation_id` has `group` on by its switch.
pub fn is_on(conn: &Connection, conversation_id: &str, group: ToolGroup) -> rusqlite::Result<bool> {
    Ok(of(conn, conversation_id)?.is_on(group))
}

/// Replaces a chat's switches.
pub fn set(conn: &Connection, conversation_id: &str, switches: &Switches) -> rusqlite::Result<()> {
    conn.execute(
        "DELETE FROM chat_tool_groups WHERE conversation_id = ?1",
        [conversation_id],
    )?;
    let mut insert = conn.prepare_cached(
        "INSERT OR REPLACE INTO chat_tool_groups (conversation_id, name, is_on) VALUES (?1, ?2, ?3)",
    )?;
    for group in &switches.off {
        insert.execute(params![conversation_id, group, false])?;
    }
    for group in &switches.on {
        insert.execute(params![conversation_id, group, true])?;
    }
    Ok(())
}
