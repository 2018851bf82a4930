//! The inbox's rows in chat.sqlite3: a notification stored (each insert
//! keeps the newest `KEEP` and none older than `KEEP_DAYS` in the same
//! transaction, and a `key` posted twice stores once), the prune
//! housekeeping runs when nothing is posted, marked read, deleted; and the
//! reads, which never show an entry past `KEEP_DAYS` whether or not it is
//! gone yet. The API's bounds and the live stream are `inbox.rs`'s.

use rusqlite::{params, Connection, OptionalExtension, Row};
use serde::Serialize;

/// Notifications kept at most; an insert past it drops the oldest.
pub const KEEP: i64 = 500;
/// Days a notification is kept at most.
pub const KEEP_DAYS: i64 = 90;

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
    /// The idempotency key it was posted with, if any.
    pub key: Option<String>,
}

/// A notification's fields, checked by the API.
pub struct NewNotification {
    pub kind: String,
    pub title: String,
    pub body: String,
    pub source: Source,
    pub conversation_id: Option<String>,
    pub key: Option<String>,
}

/// What an insert did.
#[derive(Debug)]
pub struct Stored {
    /// The notification stored now, or the one stored before with the key.
    pub notification: Notification,
    /// False when the key's notification was there already (nothing stored).
    pub created: bool,
    /// How many old ones went.
    pub pruned: usize,
}

const COLUMNS: &str =
    "id, kind, title, body, source_type, source_id, source_name, conversation_id, created, read, key";

/// The oldest `created_unix` still kept at `now_unix`.
fn oldest_kept(now_unix: i64) -> i64 {
    now_unix - KEEP_DAYS * 86_400
}

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
            key: row.get(10)?,
        })
    }
}

/// Stores a notification (inside the writer's transaction), then keeps the
/// newest `KEEP` and none older than `KEEP_DAYS`. With a key that a kept
/// notification has already, nothing is stored and that one is answered
/// (one past `KEEP_DAYS` is dropped first, so its key is free again).
pub fn insert(conn: &Connection, new: &NewNotification, now_unix: i64) -> rusqlite::Result<Stored> {
    let mut pruned = prune(conn, now_unix)?;
    if let Some(key) = &new.key {
        let before = conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM notifications WHERE key = ?1"
            ))?
            .query_row([key], Notification::from_row)
            .optional()?;
        if let Some(notification) = before {
            return Ok(Stored {
                notification,
                created: false,
                pruned,
            });
        }
    }
    let id = tandem_shared::time::new_id("n_");
    let created = tandem_shared::time::now_rfc3339();
    conn.prepare_cached(
        "INSERT INTO notifications (id, kind, title, body, source_type, source_id, source_name, \
         conversation_id, created, created_unix, key) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
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
        now_unix,
        new.key
    ])?;
    pruned += prune(conn, now_unix)?;
    let notification = conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM notifications WHERE id = ?1"
        ))?
        .query_row([&id], Notification::from_row)?;
    Ok(Stored {
        notification,
        created: true,
        pruned,
    })
}

/// Drops what is past the bounds: older than `KEEP_DAYS`, or not among the
/// newest `KEEP`. Each insert and each housekeeping pass call it.
pub fn prune(conn: &Connection, now_unix: i64) -> rusqlite::Result<usize> {
    let old = conn
        .prepare_cached("DELETE FROM notifications WHERE created_unix < ?1")?
        .execute([oldest_kept(now_unix)])?;
    let over = conn
        .prepare_cached(
            "DELETE FROM notifications WHERE rowid <= \
             (SELECT rowid FROM notifications ORDER BY rowid DESC LIMIT 1 OFFSET ?1)",
        )?
        .execute([KEEP])?;
    Ok(old + over)
}

/// Which notifications a list shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    All,
    Unread,
}

/// Which of the named notifications a delete removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    Any,
    /// Only those already read (`read_only: true`).
    ReadOnly,
}

/// Newest first, at most `limit`. Nothing older than `KEEP_DAYS` at
/// `now_unix`, dropped yet or not.
pub fn list(
    conn: &Connection,
    listing: Listing,
    limit: usize,
    now_unix: i64,
) -> rusqlite::Result<Vec<Notification>> {
    let unread = match listing {
        Listing::All => "",
        Listing::Unread => "AND read = 0",
    };
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM notifications WHERE created_unix >= ?1 {unread} \
         ORDER BY rowid DESC LIMIT ?2"
    ))?;
    let rows = stmt.query_map(
        params![oldest_kept(now_unix), limit as i64],
        Notification::from_row,
    )?;
    rows.collect()
}

/// `(unread, total)` of those not older than `KEEP_DAYS` at `now_unix`.
pub fn counts(conn: &Connection, now_unix: i64) -> rusqlite::Result<(i64, i64)> {
    conn.prepare_cached(
        "SELECT COALESCE(SUM(read = 0), 0), COUNT(*) FROM notifications WHERE created_unix >= ?1",
    )?
    .query_row([oldest_kept(now_unix)], |r| Ok((r.get(0)?, r.get(1)?)))
}

/// Which notifications a read or delete names.
#[derive(Debug, Clone)]
pub enum Which {
    Ids(Vec<String>),
    All,
}

/// Marks them read; answers the ids that were unread (all: their count).
/// What is past `KEEP_DAYS` is dropped first, so it is never counted.
pub fn mark_read(
    conn: &Connection,
    which: &Which,
    now_unix: i64,
) -> rusqlite::Result<(usize, Vec<String>)> {
    prune(conn, now_unix)?;
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

/// Deletes them (only read ones with `Removal::ReadOnly`); answers the
/// count and the ids that went (for `Ids`). What is past `KEEP_DAYS` is
/// dropped first, so it is never counted.
pub fn delete(
    conn: &Connection,
    which: &Which,
    removal: Removal,
    now_unix: i64,
) -> rusqlite::Result<(usize, Vec<String>)> {
    prune(conn, now_unix)?;
    let read_only = removal == Removal::ReadOnly;
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

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000;
    const DAY: i64 = 86_400;

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
            key: None,
        }
    }

    fn keyed(title: &str, key: &str) -> NewNotification {
        NewNotification {
            key: Some(key.into()),
            ..new(title)
        }
    }

    fn put(conn: &Connection, n: &NewNotification, at: i64) -> Notification {
        insert(conn, n, at).unwrap().notification
    }

    fn titles(conn: &Connection, listing: Listing, now: i64) -> Vec<String> {
        list(conn, listing, crate::inbox::MAX_LIMIT, now)
            .unwrap()
            .into_iter()
            .map(|n| n.title)
            .collect()
    }

    /// Moves a stored notification's time back by `days` (and a second).
    fn backdate(conn: &Connection, id: &str, days: i64) {
        let changed = conn
            .execute(
                "UPDATE notifications SET created_unix = created_unix - ?1 WHERE id = ?2",
                params![days * DAY + 1, id],
            )
            .unwrap();
        assert_eq!(changed, 1);
    }

    fn rows(conn: &Connection) -> i64 {
        conn.query_row("SELECT COUNT(*) FROM notifications", [], |r| r.get(0))
            .unwrap()
    }

    /// Past 90 days a notification goes at the next insert; the newest 500
    /// stay, the oldest go first.
    #[test]
    fn an_insert_keeps_the_newest_500_and_nothing_older_than_90_days() {
        let conn = open();
        let now = NOW;
        let old = put(&conn, &new("old"), now - KEEP_DAYS * DAY - 1);
        let edge = put(&conn, &new("edge"), now - KEEP_DAYS * DAY + 5);
        let stored = insert(&conn, &new("now"), now).unwrap();
        assert!(stored.created);
        assert_eq!(stored.pruned, 1);
        let ids: Vec<String> = list(&conn, Listing::All, 10, now)
            .unwrap()
            .into_iter()
            .map(|n| n.id)
            .collect();
        assert!(!ids.contains(&old.id));
        assert!(ids.contains(&edge.id));

        for i in 0..600 {
            put(&conn, &new(&format!("n{i}")), now);
        }
        assert_eq!(counts(&conn, now).unwrap(), (500, 500));
        let all = list(&conn, Listing::All, 500, now).unwrap();
        assert_eq!(all[0].title, "n599");
        assert_eq!(all[499].title, "n100");
    }

    /// With no post at all, what grew older than 90 days is neither listed
    /// nor counted (read or not), and the housekeeping prune drops it.
    #[test]
    fn without_new_posts_nothing_older_than_90_days_is_shown_and_prune_drops_it() {
        let conn = open();
        let gone = put(&conn, &new("gone"), NOW);
        let read_gone = put(&conn, &new("read and gone"), NOW);
        let edge = put(&conn, &new("edge"), NOW);
        put(&conn, &new("fresh"), NOW);
        mark_read(&conn, &Which::Ids(vec![read_gone.id.clone()]), NOW).unwrap();
        backdate(&conn, &gone.id, KEEP_DAYS);
        backdate(&conn, &read_gone.id, KEEP_DAYS);
        // 89 days and a second back: still inside the bound.
        backdate(&conn, &edge.id, KEEP_DAYS - 1);

        assert_eq!(titles(&conn, Listing::All, NOW), ["fresh", "edge"]);
        assert_eq!(titles(&conn, Listing::Unread, NOW), ["fresh", "edge"]);
        assert_eq!(counts(&conn, NOW).unwrap(), (2, 2));
        assert_eq!(rows(&conn), 4, "the reads filter, they drop nothing");

        // A day later the edge one is past the bound too.
        let later = NOW + DAY;
        assert_eq!(titles(&conn, Listing::All, later), ["fresh"]);
        assert_eq!(counts(&conn, later).unwrap(), (1, 1));

        assert_eq!(prune(&conn, NOW).unwrap(), 2);
        assert_eq!(rows(&conn), 2);
        assert_eq!(prune(&conn, NOW).unwrap(), 0);
        assert_eq!(prune(&conn, later).unwrap(), 1);
        assert_eq!(titles(&conn, Listing::All, later), ["fresh"]);
    }

    /// Reads and deletes never count what is past the bound.
    #[test]
    fn read_and_delete_leave_out_what_is_past_90_days() {
        let conn = open();
        let old = put(&conn, &new("old"), NOW);
        put(&conn, &new("fresh"), NOW);
        backdate(&conn, &old.id, KEEP_DAYS);
        assert_eq!(mark_read(&conn, &Which::All, NOW).unwrap().0, 1);
        let ids = Which::Ids(vec![old.id.clone()]);
        assert_eq!(delete(&conn, &ids, Removal::Any, NOW).unwrap(), (0, vec![]));
        assert_eq!(rows(&conn), 1);
    }

    /// A key posted again stores nothing and answers the first; keys are
    /// unique, no key never is.
    #[test]
    fn a_key_posted_twice_is_stored_once() {
        let conn = open();
        let first = insert(&conn, &keyed("first", "run:t_1:2026-12-01"), NOW).unwrap();
        assert!(first.created);
        assert_eq!(
            first.notification.key.as_deref(),
            Some("run:t_1:2026-12-01")
        );
        let again = insert(&conn, &keyed("again", "run:t_1:2026-12-01"), NOW + 5).unwrap();
        assert!(!again.created);
        assert_eq!(again.notification.id, first.notification.id);
        assert_eq!(again.notification.title, "first");
        let other = insert(&conn, &keyed("other", "run:t_1:2026-12-02"), NOW).unwrap();
        assert!(other.created);
        put(&conn, &new("no key"), NOW);
        put(&conn, &new("no key either"), NOW);
        assert_eq!(counts(&conn, NOW).unwrap(), (4, 4));
        // The index holds even against a write that skips the check.
        let twice = conn.execute(
            "INSERT INTO notifications (id, kind, title, source_type, source_id, created, \
             created_unix, key) VALUES ('n_x', 'run_ended', 't', 'trigger', 't_1', '', 1, \
             'run:t_1:2026-12-01')",
            [],
        );
        assert!(twice.is_err());

        // Once its notification is past the bound, the key is free again.
        backdate(&conn, &first.notification.id, KEEP_DAYS);
        let anew = insert(&conn, &keyed("anew", "run:t_1:2026-12-01"), NOW).unwrap();
        assert!(anew.created);
        assert_ne!(anew.notification.id, first.notification.id);
        assert_eq!(anew.pruned, 1);
    }

    #[test]
    fn read_and_delete_count_what_changed() {
        let conn = open();
        let a = put(&conn, &new("a"), NOW);
        let b = put(&conn, &new("b"), NOW);
        put(&conn, &new("c"), NOW);
        let ids = Which::Ids(vec![a.id.clone(), a.id.clone(), "n_nope".into()]);
        assert_eq!(
            mark_read(&conn, &ids, NOW).unwrap(),
            (1, vec![a.id.clone()])
        );
        assert_eq!(mark_read(&conn, &ids, NOW).unwrap().0, 0);
        assert_eq!(counts(&conn, NOW).unwrap(), (2, 3));
        let both = Which::Ids(vec![a.id.clone(), b.id.clone()]);
        assert_eq!(
            delete(&conn, &both, Removal::ReadOnly, NOW).unwrap(),
            (1, vec![a.id.clone()])
        );
        assert_eq!(
            delete(&conn, &Which::All, Removal::ReadOnly, NOW)
                .unwrap()
                .0,
            0
        );
        assert_eq!(mark_read(&conn, &Which::All, NOW).unwrap().0, 2);
        assert_eq!(delete(&conn, &Which::All, Removal::Any, NOW).unwrap().0, 2);
        assert_eq!(counts(&conn, NOW).unwrap(), (0, 0));
    }
}
