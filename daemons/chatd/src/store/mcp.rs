//! The MCP connectors' rows in chat.sqlite3 (`mcp/`): at most
//! `mcp::MAX_CONNECTORS`, names unique whatever their case, the token,
//! headers and environment sealed (`mcp::Sealed`), and the last test's
//! state, reason and tools kept on the row. An edit clears the last test:
//! it was of what was saved before.

use rusqlite::{params, Connection, OptionalExtension, Row};

use crate::words::{ConnectorState, Transport};

/// One connector as stored. The secrets stay sealed here.
#[derive(Debug, Clone)]
pub struct Connector {
    pub id: String,
    pub name: String,
    pub transport: Transport,
    pub url: String,
    pub command: String,
    /// JSON array of strings.
    pub args: String,
    pub token: Option<String>,
    pub headers: Option<String>,
    pub env: Option<String>,
    pub enabled: bool,
    /// The last test's outcome; `None` until tested since the last edit.
    pub state: Option<ConnectorState>,
    pub reason: Option<String>,
    /// JSON array of `{name, description}`, from the last good test.
    pub tools: String,
    pub tested: Option<String>,
    pub created: String,
    pub updated: String,
}

fn from_row(row: &Row) -> rusqlite::Result<Connector> {
    Ok(Connector {
        id: row.get("id")?,
        name: row.get("name")?,
        transport: row.get("transport")?,
        url: row.get("url")?,
        command: row.get("command")?,
        args: row.get("args")?,
        token: row.get("token")?,
        headers: row.get("headers")?,
        env: row.get("env")?,
        enabled: row.get("enabled")?,
        state: row.get("state")?,
        reason: row.get("reason")?,
        tools: row.get("tools")?,
        tested: row.get("tested")?,
        created: row.get("created")?,
        updated: row.get("updated")?,
    })
}

pub fn list(conn: &Connection) -> rusqlite::Result<Vec<Connector>> {
    let mut stmt =
        conn.prepare_cached("SELECT * FROM mcp_connectors ORDER BY name COLLATE NOCASE")?;
    let rows = stmt.query_map([], from_row)?;
    rows.collect()
}

pub fn get(conn: &Connection, id: &str) -> rusqlite::Result<Option<Connector>> {
    conn.query_row("SELECT * FROM mcp_connectors WHERE id = ?1", [id], from_row)
        .optional()
}

pub fn count(conn: &Connection) -> rusqlite::Result<usize> {
    let n: i64 = conn.query_row("SELECT count(*) FROM mcp_connectors", [], |r| r.get(0))?;
    // A count is never negative.
    Ok(usize::try_from(n).unwrap_or(0))
}

/// The id of another connector with this name (any case), if there is one.
pub fn named(conn: &Connection, name: &str, except: &str) -> rusqlite::Result<Option<String>> {
    conn.query_row(
        "SELECT id FROM mcp_connectors WHERE name = ?1 COLLATE NOCASE AND id != ?2",
        params![name, except],
        |r| r.get(0),
    )
    .optional()
}

pub fn insert(conn: &Connection, c: &Connector) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO mcp_connectors (id, name, transport, url, command, args, token, headers, env,
             enabled, state, reason, tools, tested, created, updated)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, NULL, NULL, '[]', NULL, ?11, ?11)",
        params![
            c.id,
            c.name,
            c.transport,
            c.url,
            c.command,
            c.args,
            c.token,
            c.headers,
            c.env,
            c.enabled,
            c.created
        ],
    )?;
    Ok(())
}

/// Replaces what is saved of a connector (the last test goes with it).
pub fn replace(conn: &Connection, c: &Connector) -> rusqlite::Result<bool> {
    let changed = conn.execute(
        "UPDATE mcp_connectors SET name = ?2, transport = ?3, url = ?4, command = ?5, args = ?6,
             token = ?7, headers = ?8, env = ?9, enabled = ?10, state = NULL, reason = NULL,
             tools = '[]', tested = NULL, updated = ?11
         WHERE id = ?1",
        params![
            c.id,
            c.name,
            c.transport,
            c.url,
            c.command,
            c.args,
            c.token,
            c.headers,
            c.env,
            c.enabled,
            c.updated
        ],
    )?;
    Ok(changed == 1)
}

pub fn delete(conn: &Connection, id: &str) -> rusqlite::Result<bool> {
    conn.execute("DELETE FROM chat_mcp_off WHERE connector_id = ?1", [id])?;
    Ok(conn.execute("DELETE FROM mcp_connectors WHERE id = ?1", [id])? == 1)
}

/// The connectors chat `conversation_id` switched off, by id.
pub fn off_in(conn: &Connection, conversation_id: &str) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare_cached(
        "SELECT connector_id FROM chat_mcp_off WHERE conversation_id = ?1 ORDER BY connector_id",
    )?;
    let rows = stmt.query_map([conversation_id], |r| r.get(0))?;
    rows.collect()
}

/// Replaces the connectors a chat switched off.
pub fn set_off_in(
    conn: &Connection,
    conversation_id: &str,
    off: &[String],
) -> rusqlite::Result<()> {
    conn.execute(
        "DELETE FROM chat_mcp_off WHERE conversation_id = ?1",
        [conversation_id],
    )?;
    let mut insert = conn.prepare_cached(
        "INSERT OR IGNORE INTO chat_mcp_off (conversation_id, connector_id) VALUES (?1, ?2)",
    )?;
    for id in off {
        insert.execute(params![conversation_id, id])?;
    }
    Ok(())
}

pub fn set_enabled(
    conn: &Connection,
    id: &str,
    enabled: bool,
    now: &str,
) -> rusqlite::Result<bool> {
    let changed = conn.execute(
        "UPDATE mcp_connectors SET enabled = ?2, updated = ?3 WHERE id = ?1",
        params![id, enabled, now],
    )?;
    Ok(changed == 1)
}

/// What a test found, kept only if the connector is still as it was tested
/// (`saved`: its `updated` then): a test that raced an edit was of the old one.
pub struct Tested<'a> {
    pub id: &'a str,
    pub saved: &'a str,
    pub state: ConnectorState,
    pub reason: Option<&'a str>,
    pub tools: &'a str,
    pub now: &'a str,
}

pub fn tested(conn: &Connection, t: &Tested) -> rusqlite::Result<bool> {
    let changed = conn.execute(
        "UPDATE mcp_connectors SET state = ?3, reason = ?4,
             tools = CASE WHEN ?3 = 'connected' THEN ?5 ELSE tools END, tested = ?6
         WHERE id = ?1 AND updated = ?2",
        params![t.id, t.saved, t.state, t.reason, t.tools, t.now],
    )?;
    Ok(changed == 1)
}
