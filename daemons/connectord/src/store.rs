//! connectors.sqlite3: the bindings (tokens sealed, the read position),
//! every message read (until answered, so a restart neither loses nor
//! repeats one), the sender log of strangers, each sender's chat and the
//! Slack threads the bot follows. connectord is its only writer.

use std::path::Path;

use rusqlite::{params, Connection, OptionalExtension, Row};
use serde::Serialize;
use serde_json::Value;

use crate::platform::{Inbound, Target};
use crate::states::InboundState;

const MIGRATIONS: &[&str] = &[r#"
CREATE TABLE bindings (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    enabled INTEGER NOT NULL,
    -- JSON: allowlist, accept_any, reply_mode, conversation, window_minutes,
    -- send_files, follow_threads
    settings TEXT NOT NULL,
    -- sealed with connectors.key, bound to the binding's id
    token TEXT NOT NULL,
    app_token TEXT,
    -- JSON {id, name}: who the token is, as the platform said at save
    bot TEXT,
    -- Telegram: the next getUpdates offset
    position INTEGER NOT NULL DEFAULT 0,
    -- why it was switched off by itself (401, another reader)
    off_reason TEXT,
    created TEXT NOT NULL,
    updated TEXT NOT NULL
);

-- Every message read and let in. Its text is kept until it is answered.
CREATE TABLE inbound (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    binding_id TEXT NOT NULL REFERENCES bindings(id) ON DELETE CASCADE,
    key TEXT NOT NULL,
    -- JSON of platform::Inbound
    message TEXT NOT NULL,
    -- queued (read, not yet in chatd), sent (in chatd), answered, refused
    -- (too long, too fast: a notice is due), noticed (its notice went out)
    state TEXT NOT NULL,
    conversation_id TEXT,
    run_id TEXT,
    pending_id TEXT,
    -- why it was refused, the notice's text
    note TEXT,
    created_unix INTEGER NOT NULL,
    UNIQUE (binding_id, key)
);
CREATE INDEX inbound_state ON inbound(state, binding_id);

-- Strangers: senders not on the allowlist, never answered.
CREATE TABLE senders (
    binding_id TEXT NOT NULL REFERENCES bindings(id) ON DELETE CASCADE,
    sender_id TEXT NOT NULL,
    name TEXT,
    chat_id TEXT NOT NULL,
    count INTEGER NOT NULL,
    first TEXT NOT NULL,
    last TEXT NOT NULL,
    PRIMARY KEY (binding_id, sender_id)
);

-- Each sender's chat in chatd, by the binding's conversation mode.
CREATE TABLE chats (
    binding_id TEXT NOT NULL REFERENCES bindings(id) ON DELETE CASCADE,
    scope TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    used_unix INTEGER NOT NULL,
    PRIMARY KEY (binding_id, scope)
);

-- Slack threads the bot answers without a mention, until `until_unix`.
CREATE TABLE followed (
    binding_id TEXT NOT NULL REFERENCES bindings(id) ON DELETE CASCADE,
    channel TEXT NOT NULL,
    thread TEXT NOT NULL,
    until_unix INTEGER NOT NULL,
    PRIMARY KEY (binding_id, channel, thread)
);
"#];

/// connectors.sqlite3's one connection.
pub type Store = tandem_shared::db::Writer;

/// Opens connectors.sqlite3 at `path`.
pub fn open(path: &Path) -> anyhow::Result<Store> {
    Store::open(path, MIGRATIONS)
}

/// A binding as stored (tokens still sealed).
#[derive(Debug, Clone)]
pub struct Stored {
    pub id: String,
    pub kind: String,
    pub name: String,
    pub agent_id: String,
    pub enabled: bool,
    pub settings: Value,
    pub token: String,
    pub app_token: Option<String>,
    pub bot: Option<Value>,
    pub position: i64,
    pub off_reason: Option<String>,
    pub created: String,
    pub updated: String,
}

fn binding_of(row: &Row) -> rusqlite::Result<Stored> {
    let settings: String = row.get(5)?;
    let bot: Option<String> = row.get(8)?;
    Ok(Stored {
        id: row.get(0)?,
        kind: row.get(1)?,
        name: row.get(2)?,
        agent_id: row.get(3)?,
        enabled: row.get::<_, i64>(4)? != 0,
        settings: serde_json::from_str(&settings).unwrap_or(Value::Null),
        token: row.get(6)?,
        app_token: row.get(7)?,
        bot: bot.and_then(|b| serde_json::from_str(&b).ok()),
        position: row.get(9)?,
        off_reason: row.get(10)?,
        created: row.get(11)?,
        updated: row.get(12)?,
    })
}

const BINDING_COLUMNS: &str = "id, kind, name, agent_id, enabled, settings, token, app_token, bot, position, off_reason, created, updated";

pub fn bindings(conn: &Connection) -> rusqlite::Result<Vec<Stored>> {
    let mut stmt = conn.prepare(&format!(
        "SELECT {BINDING_COLUMNS} FROM bindings ORDER BY created, id"
    ))?;
    let rows = stmt.query_map([], binding_of)?;
    rows.collect()
}

pub fn binding(conn: &Connection, id: &str) -> rusqlite::Result<Option<Stored>> {
    conn.query_row(
        &format!("SELECT {BINDING_COLUMNS} FROM bindings WHERE id = ?1"),
        [id],
        binding_of,
    )
    .optional()
}

pub fn count_bindings(conn: &Connection) -> rusqlite::Result<usize> {
    conn.query_row("SELECT COUNT(*) FROM bindings", [], |r| r.get::<_, i64>(0))
        .map(|n| n as usize)
}

/// Inserts or replaces the whole binding (the position is kept on replace).
pub fn put_binding(conn: &Connection, b: &Stored) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO bindings (id, kind, name, agent_id, enabled, settings, token, app_token, bot, position, off_reason, created, updated)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
         ON CONFLICT(id) DO UPDATE SET name = ?3, agent_id = ?4, enabled = ?5, settings = ?6,
           token = ?7, app_token = ?8, bot = ?9, off_reason = ?11, updated = ?13",
        params![
            b.id,
            b.kind,
            b.name,
            b.agent_id,
            i64::from(b.enabled),
            b.settings.to_string(),
            b.token,
            b.app_token,
            b.bot.as_ref().map(Value::to_string),
            b.position,
            b.off_reason,
            b.created,
            b.updated
        ],
    )?;
    Ok(())
}

pub fn delete_binding(conn: &Connection, id: &str) -> rusqlite::Result<bool> {
    Ok(conn.execute("DELETE FROM bindings WHERE id = ?1", [id])? > 0)
}

/// Switches a binding on or off; off by itself carries the reason.
pub fn set_enabled(
    conn: &Connection,
    id: &str,
    enabled: bool,
    reason: Option<&str>,
    now: &str,
) -> rusqlite::Result<bool> {
    Ok(conn.execute(
        "UPDATE bindings SET enabled = ?2, off_reason = ?3, updated = ?4 WHERE id = ?1",
        params![id, i64::from(enabled), reason, now],
    )? > 0)
}

/// What `accept` decided for one message.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Let in: answer it.
    In,
    /// Let in but refused with a notice (too long, too fast): the text.
    Refused(String),
    /// Not on the allowlist: logged as a stranger, never answered.
    Stranger,
}

/// Stores what one read gave, and the read position after it, in one
/// transaction. A message with a key seen before is dropped.
pub fn accept(
    conn: &mut Connection,
    binding: &str,
    messages: &[(Inbound, Verdict)],
    position: Option<i64>,
    now: &str,
    now_unix: i64,
) -> rusqlite::Result<usize> {
    let tx = conn.transaction()?;
    let mut stored = 0;
    for (message, verdict) in messages {
        match verdict {
            Verdict::Stranger => {
                tx.execute(
                    "INSERT INTO senders (binding_id, sender_id, name, chat_id, count, first, last)
                     VALUES (?1, ?2, ?3, ?4, 1, ?5, ?5)
                     ON CONFLICT(binding_id, sender_id) DO UPDATE SET count = count + 1, last = ?5,
                       name = coalesce(?3, name), chat_id = ?4",
                    params![
                        binding,
                        message.sender_id,
                        message.sender_name,
                        message.chat_id,
                        now
                    ],
                )?;
            }
            Verdict::In | Verdict::Refused(_) => {
                let (state, note) = match verdict {
                    Verdict::Refused(note) => (InboundState::Refused, Some(note.as_str())),
                    _ => (InboundState::Queued, None),
                };
                // The text of a refused message is not kept.
                let mut kept = message.clone();
                if note.is_some() {
                    kept.text.clear();
                }
                stored += tx.execute(
                    "INSERT OR IGNORE INTO inbound (binding_id, key, message, state, note, created_unix)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    params![
                        binding,
                        message.key,
                        serde_json::to_string(&kept).unwrap_or_default(),
                        state,
                        note,
                        now_unix
                    ],
                )?;
            }
        }
    }
    if let Some(position) = position {
        tx.execute(
            "UPDATE bindings SET position = ?2 WHERE id = ?1",
            params![binding, position],
        )?;
    }
    tx.commit()?;
    Ok(stored)
}

/// A message read and let in, with what became of it.
#[derive(Debug, Clone)]
pub struct Message {
    pub id: i64,
    pub binding_id: String,
    pub message: Inbound,
    pub state: InboundState,
    pub conversation_id: Option<String>,
    pub run_id: Option<String>,
    pub pending_id: Option<String>,
    pub note: Option<String>,
}

impl Message {
    /// Where its answer goes: into its thread, replying to it in a group.
    pub fn target(&self) -> Target {
        Target {
            chat_id: self.message.chat_id.clone(),
            thread: self.message.thread.clone(),
            reply_to: if self.message.group {
                self.message.message_id.clone()
            } else {
                None
            },
        }
    }
}

fn message_of(row: &Row) -> rusqlite::Result<Message> {
    let message: String = row.get(2)?;
    Ok(Message {
        id: row.get(0)?,
        binding_id: row.get(1)?,
        message: serde_json::from_str(&message).unwrap_or(Inbound {
            key: String::new(),
            sender_id: String::new(),
            sender_name: None,
            chat_id: String::new(),
            thread: None,
            message_id: None,
            text: String::new(),
            group: false,
        }),
        state: row.get(3)?,
        conversation_id: row.get(4)?,
        run_id: row.get(5)?,
        pending_id: row.get(6)?,
        note: row.get(7)?,
    })
}

const MESSAGE_COLUMNS: &str =
    "id, binding_id, message, state, conversation_id, run_id, pending_id, note";

/// Messages in `state` (of enabled bindings), oldest first.
pub fn messages_in(conn: &Connection, state: InboundState) -> rusqlite::Result<Vec<Message>> {
    let mut stmt = conn.prepare(&format!(
        "SELECT {MESSAGE_COLUMNS} FROM inbound WHERE state = ?1
           AND binding_id IN (SELECT id FROM bindings WHERE enabled = 1) ORDER BY id"
    ))?;
    let rows = stmt.query_map([state], message_of)?;
    rows.collect()
}

/// The messages of one chat sent to chatd and not answered yet.
pub fn unanswered(
    conn: &Connection,
    binding: &str,
    conversation: &str,
) -> rusqlite::Result<Vec<Message>> {
    let mut stmt = conn.prepare(&format!(
        "SELECT {MESSAGE_COLUMNS} FROM inbound WHERE binding_id = ?1 AND conversation_id = ?2
           AND state = ?3 ORDER BY id"
    ))?;
    let rows = stmt.query_map(
        params![binding, conversation, InboundState::Sent],
        message_of,
    )?;
    rows.collect()
}

/// The message is in chatd: its chat, and its run or waiting message.
pub fn set_sent(
    conn: &Connection,
    id: i64,
    conversation: &str,
    run_id: Option<&str>,
    pending_id: Option<&str>,
) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE inbound SET state = ?5, conversation_id = ?2, run_id = ?3, pending_id = ?4 WHERE id = ?1",
        params![id, conversation, run_id, pending_id, InboundState::Sent],
    )?;
    Ok(())
}

/// The chat a message is being sent to (before chatd is asked).
pub fn set_conversation(conn: &Connection, id: i64, conversation: &str) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE inbound SET conversation_id = ?2 WHERE id = ?1",
        params![id, conversation],
    )?;
    Ok(())
}

/// Messages of a chat chatd no longer has go back to the queue, to a new chat.
pub fn requeue(conn: &Connection, binding: &str, conversation: &str) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE inbound SET state = ?3, conversation_id = NULL, run_id = NULL, pending_id = NULL
         WHERE binding_id = ?1 AND conversation_id = ?2 AND state = ?4",
        params![
            binding,
            conversation,
            InboundState::Queued,
            InboundState::Sent
        ],
    )?;
    conn.execute(
        "DELETE FROM chats WHERE binding_id = ?1 AND conversation_id = ?2",
        params![binding, conversation],
    )?;
    Ok(())
}

/// Only the settings (the allowlist grows), nothing else of the binding.
pub fn set_settings(
    conn: &Connection,
    id: &str,
    settings: &Value,
    now: &str,
) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE bindings SET settings = ?2, updated = ?3 WHERE id = ?1",
        params![id, settings.to_string(), now],
    )?;
    Ok(())
}

/// The waiting message `pending_id` went into `run_id`.
pub fn set_run_of_pending(
    conn: &Connection,
    pending_id: &str,
    run_id: &str,
) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE inbound SET run_id = ?2 WHERE pending_id = ?1 AND state = ?3",
        params![pending_id, run_id, InboundState::Sent],
    )?;
    Ok(())
}

/// Answered (its text is dropped: the chat in chatd keeps it).
pub fn set_answered(conn: &Connection, ids: &[i64]) -> rusqlite::Result<()> {
    let tx = conn.unchecked_transaction()?;
    for id in ids {
        tx.execute(
            "UPDATE inbound SET state = ?2,
               message = json_set(message, '$.text', '') WHERE id = ?1",
            params![id, InboundState::Answered],
        )?;
    }
    tx.commit()
}

/// A message chatd did not take: its sender gets `note`, its text goes.
pub fn set_refused(conn: &Connection, id: i64, note: &str) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE inbound SET state = ?3, note = ?2,
           message = json_set(message, '$.text', '') WHERE id = ?1",
        params![id, note, InboundState::Refused],
    )?;
    Ok(())
}

/// A slash command chatd answered at once: its sender gets `answer`.
pub fn set_reply(conn: &Connection, id: i64, answer: &str) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE inbound SET state = ?3, note = ?2,
           message = json_set(message, '$.text', '') WHERE id = ?1",
        params![id, answer, InboundState::Reply],
    )?;
    Ok(())
}

/// A refused message's notice went out (or was not due).
pub fn set_noticed(conn: &Connection, id: i64) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE inbound SET state = ?2 WHERE id = ?1",
        params![id, InboundState::Noticed],
    )?;
    Ok(())
}

/// Answered messages older than `before_unix` go: their keys only guard
/// against a platform's redelivery, which comes within minutes.
pub fn purge(conn: &Connection, before_unix: i64) -> rusqlite::Result<usize> {
    let a = conn.execute(
        "DELETE FROM inbound WHERE state IN (?2, ?3) AND created_unix < ?1",
        params![before_unix, InboundState::Answered, InboundState::Noticed],
    )?;
    let b = conn.execute("DELETE FROM followed WHERE until_unix < ?1", [before_unix])?;
    Ok(a + b)
}

/// A stranger in the sender log.
#[derive(Debug, Clone, Serialize)]
pub struct Stranger {
    pub sender_id: String,
    pub name: Option<String>,
    pub chat_id: String,
    pub count: i64,
    pub first: String,
    pub last: String,
}

pub fn strangers(conn: &Connection, binding: &str) -> rusqlite::Result<Vec<Stranger>> {
    let mut stmt = conn.prepare(
        "SELECT sender_id, name, chat_id, count, first, last FROM senders
         WHERE binding_id = ?1 ORDER BY last DESC",
    )?;
    let rows = stmt.query_map([binding], |r| {
        Ok(Stranger {
            sender_id: r.get(0)?,
            name: r.get(1)?,
            chat_id: r.get(2)?,
            count: r.get(3)?,
            first: r.get(4)?,
            last: r.get(5)?,
        })
    })?;
    rows.collect()
}

pub fn forget_stranger(conn: &Connection, binding: &str, sender: &str) -> rusqlite::Result<()> {
    conn.execute(
        "DELETE FROM senders WHERE binding_id = ?1 AND sender_id = ?2",
        params![binding, sender],
    )?;
    Ok(())
}

/// The chat of `scope`, if used since `fresh_after_unix`.
pub fn chat_of(
    conn: &Connection,
    binding: &str,
    scope: &str,
    fresh_after_unix: i64,
) -> rusqlite::Result<Option<String>> {
    conn.query_row(
        "SELECT conversation_id FROM chats WHERE binding_id = ?1 AND scope = ?2 AND used_unix >= ?3",
        params![binding, scope, fresh_after_unix],
        |r| r.get(0),
    )
    .optional()
}

pub fn set_chat(
    conn: &Connection,
    binding: &str,
    scope: &str,
    conversation: &str,
    now_unix: i64,
) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO chats (binding_id, scope, conversation_id, used_unix) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT(binding_id, scope) DO UPDATE SET conversation_id = ?3, used_unix = ?4",
        params![binding, scope, conversation, now_unix],
    )?;
    Ok(())
}

/// Slack: follow `thread` until `until_unix`.
pub fn follow(
    conn: &Connection,
    binding: &str,
    channel: &str,
    thread: &str,
    until_unix: i64,
) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO followed (binding_id, channel, thread, until_unix) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT(binding_id, channel, thread) DO UPDATE SET until_unix = ?4",
        params![binding, channel, thread, until_unix],
    )?;
    Ok(())
}

pub fn follows(
    conn: &Connection,
    binding: &str,
    channel: &str,
    thread: &str,
    now_unix: i64,
) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT 1 FROM followed WHERE binding_id = ?1 AND channel = ?2 AND thread = ?3 AND until_unix >= ?4",
        params![binding, channel, thread, now_unix],
        |_| Ok(()),
    )
    .optional()
    .map(|r| r.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inbound(key: &str) -> Inbound {
        Inbound {
            key: key.into(),
            sender_id: "42".into(),
            sender_name: Some("ann".into()),
            chat_id: "42".into(),
            thread: None,
            message_id: Some("7".into()),
            text: "hello".into(),
            group: false,
        }
    }

    fn sample(id: &str) -> Stored {
        Stored {
            id: id.into(),
            kind: "telegram".into(),
            name: "bot".into(),
            agent_id: "a_1".into(),
            enabled: true,
            settings: serde_json::json!({}),
            token: "sealed".into(),
            app_token: None,
            bot: None,
            position: 0,
            off_reason: None,
            created: "t".into(),
            updated: "t".into(),
        }
    }

    #[test]
    fn a_message_is_kept_once_with_its_position() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir.path().join("c.sqlite3")).unwrap();
        store
            .call_now(|conn| {
                put_binding(conn, &sample("cn_1"))?;
                let first = accept(
                    conn,
                    "cn_1",
                    &[(inbound("u1"), Verdict::In)],
                    Some(2),
                    "t",
                    1,
                )?;
                let again = accept(
                    conn,
                    "cn_1",
                    &[(inbound("u1"), Verdict::In)],
                    Some(2),
                    "t",
                    1,
                )?;
                assert_eq!((first, again), (1, 0), "the same key again is dropped");
                accept(
                    conn,
                    "cn_1",
                    &[(inbound("u2"), Verdict::Stranger)],
                    Some(3),
                    "t",
                    1,
                )?;
                accept(
                    conn,
                    "cn_1",
                    &[(inbound("u3"), Verdict::Stranger)],
                    Some(4),
                    "t",
                    1,
                )?;
                assert_eq!(binding_row(conn, "cn_1").position, 4);
                let strangers = strangers(conn, "cn_1")?;
                assert_eq!(strangers.len(), 1);
                assert_eq!(strangers[0].count, 2);
                let queued = messages_in(conn, InboundState::Queued)?;
                assert_eq!(queued.len(), 1);
                set_sent(conn, queued[0].id, "c_1", Some("r_1"), None)?;
                set_answered(conn, &[queued[0].id])?;
                let kept: String =
                    conn.query_row("SELECT message FROM inbound", [], |r| r.get(0))?;
                assert!(
                    !kept.contains("hello"),
                    "an answered message's text goes: {kept}"
                );
                Ok(())
            })
            .unwrap();
    }

    fn binding_row(conn: &Connection, id: &str) -> Stored {
        binding(conn, id).unwrap().unwrap()
    }
}
