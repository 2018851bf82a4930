//! The inbox: notifications triggerd, connectord (and chatd) leave for the
//! box's person ("the nightly report ran", "a run failed"). Rows live in
//! chat.sqlite3, written through the store's writer like everything else;
//! each insert keeps the newest `KEEP` and none older than `KEEP_DAYS` in the
//! same transaction. Devices follow `GET /notifications/events`: live only,
//! each frame sent after its write committed.

use bytes::Bytes;
use rusqlite::{params, Connection, Row};
use serde::Serialize;
use serde_json::Value;
use tokio::sync::broadcast;

pub const KINDS: &[&str] = &["run_ended", "run_failed", "needs_attention"];
pub const SOURCE_TYPES: &[&str] = &["trigger", "connector", "chatd"];
pub const MAX_TITLE: usize = 200;
pub const MAX_BODY: usize = 2000;
pub const MAX_SOURCE_ID: usize = 64;
pub const MAX_SOURCE_NAME: usize = 200;
/// Notifications kept at most; an insert past it drops the oldest.
pub const KEEP: i64 = 500;
/// Days a notification is kept at most.
pub const KEEP_DAYS: i64 = 90;
/// A list answers this many at most (and 50 unless asked).
pub const MAX_LIMIT: usize = 500;
pub const DEFAULT_LIMIT: usize = 50;
/// Ids one read or delete may name.
pub const MAX_IDS: usize = 500;

/// Frames a slow device may fall behind before its stream ends (it
/// reconnects and reloads the list).
const LIVE_BACKLOG: usize = 1024;

#[derive(Debug, Clone, Serialize)]
pub struct Source {
    #[serde(rename = "type")]
    pub kind: String,
    pub id: String,
    pub name: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Notification {
    pub id: String,
    pub kind: String,
    pub title: String,
    pub body: String,
    pub source: Source,
    pub conversation_id: Option<String>,
    /// The chat it is about, as an API path.
    pub link: Option<String>,
    pub created: String,
    pub read: bool,
}

/// A notification's fields, checked by the API.
pub struct NewNotification {
    pub kind: String,
    pub title: String,
    pub body: String,
    pub source: Source,
    pub conversation_id: Option<String>,
}

const COLUMNS: &str =
    "id, kind, title, body, source_type, source_id, source_name, conversation_id, created, read";

impl Notification {
    fn from_row(row: &Row) -> rusqlite::Result<Notification> {
        let conversation_id: Option<String> = row.get(7)?;
        Ok(Notification {
            id: row.get(0)?,
            kind: row.get(1)?,
            title: row.get(2)?,
            body: row.get(3)?,
            source: Source {
                kind: row.get(4)?,
                id: row.get(5)?,
                name: row.get(6)?,
            },
            link: conversation_id
                .as_ref()
                .map(|c| format!("/v1/chat-app/conversations/{c}")),
            conversation_id,
            created: row.get(8)?,
            read: row.get::<_, i64>(9)? != 0,
        })
    }
}

/// Stores a notification (inside the writer's transaction), then keeps the
/// newest `KEEP` and none older than `KEEP_DAYS`. Returns it and how many
/// old ones went.
pub fn insert(
    conn: &Connection,
    new: &NewNotification,
    now_unix: i64,
) -> rusqlite::Result<(Notification, usize)> {
    let id = tandem_shared::time::new_id("n_");
    let created = tandem_shared::time::now_rfc3339();
    conn.prepare_cached(
        "INSERT INTO notifications (id, kind, title, body, source_type, source_id, source_name, \
         conversation_id, created, created_unix) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )?
    .execute(params![
        id,
        new.kind,
        new.title,
        new.body,
        new.source.kind,
        new.source.id,
        new.source.name,
        new.conversation_id,
        created,
        now_unix
    ])?;
    let pruned = prune(conn, now_unix)?;
    let notification = conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM notifications WHERE id = ?1"
        ))?
        .query_row([&id], Notification::from_row)?;
    Ok((notification, pruned))
}

/// Drops what is past the bounds: older than `KEEP_DAYS`, or not among the
/// newest `KEEP`.
pub fn prune(conn: &Connection, now_unix: i64) -> rusqlite::Result<usize> {
    let oldest = now_unix - KEEP_DAYS * 86_400;
    let old = conn
        .prepare_cached("DELETE FROM notifications WHERE created_unix < ?1")?
        .execute([oldest])?;
    let over = conn
        .prepare_cached(
            "DELETE FROM notifications WHERE rowid <= \
             (SELECT rowid FROM notifications ORDER BY rowid DESC LIMIT 1 OFFSET ?1)",
        )?
        .execute([KEEP])?;
    Ok(old + over)
}

/// Newest first, at most `limit`; only unread ones when asked.
pub fn list(
    conn: &Connection,
    unread_only: bool,
    limit: usize,
) -> rusqlite::Result<Vec<Notification>> {
    let filter = if unread_only { "WHERE read = 0" } else { "" };
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM notifications {filter} ORDER BY rowid DESC LIMIT ?1"
    ))?;
    let rows = stmt.query_map([limit as i64], Notification::from_row)?;
    rows.collect()
}

/// `(unread, total)`.
pub fn counts(conn: &Connection) -> rusqlite::Result<(i64, i64)> {
    conn.prepare_cached("SELECT COALESCE(SUM(read = 0), 0), COUNT(*) FROM notifications")?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))
}

/// Which notifications a read or delete names.
#[derive(Debug, Clone)]
pub enum Which {
    Ids(Vec<String>),
    All,
}

/// Marks them read; answers the ids that were unread (all: their count).
pub fn mark_read(conn: &Connection, which: &Which) -> rusqlite::Result<(usize, Vec<String>)> {
    match which {
        Which::All => {
            let n = conn
                .prepare_cached("UPDATE notifications SET read = 1 WHERE read = 0")?
                .execute([])?;
            Ok((n, Vec::new()))
        }
        Which::Ids(ids) => {
            let mut stmt = conn
                .prepare_cached("UPDATE notifications SET read = 1 WHERE id = ?1 AND read = 0")?;
            let mut changed = Vec::new();
            for id in ids {
                if stmt.execute([id])? > 0 {
                    changed.push(id.clone());
                }
            }
            Ok((changed.len(), changed))
        }
    }
}

/// Deletes them (only read ones with `read_only`); answers the count and
/// the ids that went (for `Ids`).
pub fn delete(
    conn: &Connection,
    which: &Which,
    read_only: bool,
) -> rusqlite::Result<(usize, Vec<String>)> {
    match which {
        Which::All => {
            let sql = if read_only {
                "DELETE FROM notifications WHERE read = 1"
            } else {
                "DELETE FROM notifications"
            };
            Ok((conn.prepare_cached(sql)?.execute([])?, Vec::new()))
        }
        Which::Ids(ids) => {
            let mut stmt = conn.prepare_cached(
                "DELETE FROM notifications WHERE id = ?1 AND (read = 1 OR ?2 = 0)",
            )?;
            let mut gone = Vec::new();
            for id in ids {
                if stmt.execute(params![id, read_only])? > 0 {
                    gone.push(id.clone());
                }
            }
            Ok((gone.len(), gone))
        }
    }
}

/// The live side: committed changes as SSE frames, to every device attached.
#[derive(Clone)]
pub struct Inbox {
    live: broadcast::Sender<Bytes>,
}

impl Default for Inbox {
    fn default() -> Self {
        Inbox {
            live: broadcast::channel(LIVE_BACKLOG).0,
        }
    }
}

impl Inbox {
    pub fn subscribe(&self) -> broadcast::Receiver<Bytes> {
        self.live.subscribe()
    }

    /// Sends one event to the devices attached now (call it after the commit).
    pub fn publish(&self, kind: &str, data: &Value) {
        let frame = Bytes::from(format!("event: {kind}\ndata: {data}\n\n"));
        // No device attached is not an error: the stream is live only.
        let _ = self.live.send(frame);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open() -> Connection {
        let mut conn = Connection::open_in_memory().unwrap();
        tandem_shared::db::migrate(&mut conn, crate::store::schema::MIGRATIONS).unwrap();
        conn
    }

    fn new(title: &str) -> NewNotification {
        NewNotification {
            kind: "run_ended".into(),
            title: title.into(),
            body: String::new(),
            source: Source {
                kind: "trigger".into(),
                id: "t_1".into(),
                name: "nightly".into(),
            },
            conversation_id: None,
        }
    }

    /// Past 90 days a notification goes at the next insert; the newest 500
    /// stay, the oldest go first.
    #[test]
    fn an_insert_keeps_the_newest_500_and_nothing_older_than_90_days() {
        let conn = open();
        let now = 1_800_000_000;
        let (old, _) = insert(&conn, &new("old"), now - KEEP_DAYS * 86_400 - 1).unwrap();
        let (edge, _) = insert(&conn, &new("edge"), now - KEEP_DAYS * 86_400 + 5).unwrap();
        let (_, pruned) = insert(&conn, &new("now"), now).unwrap();
        assert_eq!(pruned, 1);
        let ids: Vec<String> = list(&conn, false, 10)
            .unwrap()
            .into_iter()
            .map(|n| n.id)
            .collect();
        assert!(!ids.contains(&old.id));
        assert!(ids.contains(&edge.id));

        for i in 0..600 {
            insert(&conn, &new(&format!("n{i}")), now).unwrap();
        }
        assert_eq!(counts(&conn).unwrap(), (500, 500));
        let all = list(&conn, false, 500).unwrap();
        assert_eq!(all[0].title, "n599");
        assert_eq!(all[499].title, "n100");
    }

    #[test]
    fn read_and_delete_count_what_changed() {
        let conn = open();
        let a = insert(&conn, &new("a"), 1).unwrap().0;
        let b = insert(&conn, &new("b"), 1).unwrap().0;
        insert(&conn, &new("c"), 1).unwrap();
        let ids = Which::Ids(vec![a.id.clone(), a.id.clone(), "n_nope".into()]);
        assert_eq!(mark_read(&conn, &ids).unwrap(), (1, vec![a.id.clone()]));
        assert_eq!(mark_read(&conn, &ids).unwrap().0, 0);
        assert_eq!(counts(&conn).unwrap(), (2, 3));
        let both = Which::Ids(vec![a.id.clone(), b.id.clone()]);
        assert_eq!(delete(&conn, &both, true).unwrap(), (1, vec![a.id.clone()]));
        assert_eq!(delete(&conn, &Which::All, true).unwrap().0, 0);
        assert_eq!(mark_read(&conn, &Which::All).unwrap().0, 2);
        assert_eq!(delete(&conn, &Which::All, false).unwrap().0, 2);
        assert_eq!(counts(&conn).unwrap(), (0, 0));
    }
}
