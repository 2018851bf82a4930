//! Tool policies (`always`, `ask`, `never`): the box's, and one chat's over
//! them. A tool with neither follows the chat's permission mode.

use std::collections::BTreeMap;

use rusqlite::{params, Connection};

use crate::words::ToolPolicy;

pub type Policies = BTreeMap<String, ToolPolicy>;

/// The box's policies.
pub fn of_box(conn: &Connection) -> rusqlite::Result<Policies> {
    let mut stmt = conn.prepare_cached("SELECT tool, policy FROM tool_policies")?;
    let policies = read(stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?);
    policies
}

/// Chat `conversation_id`'s own policies.
pub fn of_chat(conn: &Connection, conversation_id: &str) -> rusqlite::Result<Policies> {
    let mut stmt = conn
        .prepare_cached("SELECT tool, policy FROM chat_tool_policies WHERE conversation_id = ?1")?;
    let policies = read(stmt.query_map([conversation_id], |r| Ok((r.get(0)?, r.get(1)?)))?);
    policies
}

/// What holds for chat `conversation_id`: its own over the box's.
pub fn effective(conn: &Connection, conversation_id: &str) -> rusqlite::Result<Policies> {
    let mut all = of_box(conn)?;
    all.extend(of_chat(conn, conversation_id)?);
    Ok(all)
}

fn read(
    rows: impl Iterator<Item = rusqlite::Result<(String, String)>>,
) -> rusqlite::Result<Policies> {
    let mut out = Policies::new();
    for row in rows {
        let (tool, policy) = row?;
        // A word an older or newer build wrote that this one does not know
        // sets nothing: the mode decides.
        if let Some(policy) = ToolPolicy::parse(&policy) {
            out.insert(tool, policy);
        }
    }
    Ok(out)
}

/// Replaces the box's policies.
pub fn set_box(conn: &Connection, policies: &Policies) -> rusqlite::Result<()> {
    conn.execute("DELETE FROM tool_policies", [])?;
    let mut insert =
        conn.prepare_cached("INSERT INTO tool_policies (tool, policy) VALUES (?1, ?2)")?;
    for (tool, policy) in policies {
        insert.execute(params![tool, policy])?;
    }
    Ok(())
}

/// Replaces chat `conversation_id`'s own policies.
pub fn set_chat(
    conn: &Connection,
    conversation_id: &str,
    policies: &Policies,
) -> rusqlite::Result<()> {
    conn.execute(
        "DELETE FROM chat_tool_policies WHERE conversation_id = ?1",
        [conversation_id],
    )?;
    let mut insert = conn.prepare_cached(
        "INSERT INTO chat_tool_policies (conversation_id, tool, policy) VALUES (?1, ?2, ?3)",
    )?;
    for (tool, policy) in policies {
        insert.execute(params![conversation_id, tool, policy])?;
    }
    Ok(())
}
