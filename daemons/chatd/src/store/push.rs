//! The push subscriptions' rows in chat.sqlite3: one per browser (its
//! endpoint unique), at most `KEEP` (a subscribe past it drops the oldest in
//! the same transaction; a browser subscribing again counts as the newest),
//! removed by the browser, or when its push service answers 404/410; each
//! push's outcome kept on its row. And the reads.

use rusqlite::{params, Connection, OptionalExtension, Row};
use serde::Serialize;
use tandem_shared::time::new_id;

/// Browsers subscribed at most; the oldest go first.
pub const KEEP: i64 = 10;

/// One browser's subscription. `endpoint` and the keys never leave chatd
/// but in the push itself: the API lists only `origin`.
#[derive(Debug, Clone)]
pub struct Subscription {
    pub id: String,
    pub endpoint: String,
    pub p256dh: String,
    pub auth: String,
    pub created: String,
    /// The last push's outcome (`201`, `refused 413`, `failed`), if any.
    pub last_result: Option<String>,
    pub last_sent: Option<String>,
}

/// What the API lists of a subscription.
#[derive(Debug, Clone, Serialize)]
pub struct Listed {
    pub id: String,
    /// `scheme://host[:port]` of the endpoint: which push service.
    pub origin: String,
    pub created: String,
    pub last_result: Option<String>,
    pub last_sent: Option<String>,
}

/// What a subscribe did.
#[derive(Debug)]
pub struct Subscribed {
    pub id: String,
    /// False when the endpoint was there already (its keys were renewed).
    pub created: bool,
    /// The oldest subscriptions dropped to keep `KEEP`.
    pub dropped: Vec<String>,
}

fn from_row(row: &Row) -> rusqlite::Result<Subscription> {
    Ok(Subscription {
        id: row.get("id")?,
        endpoint: row.get("endpoint")?,
        p256dh: row.get("p256dh")?,
        auth: row.get("auth")?,
        created: row.get("created")?,
        last_result: row.get("last_result")?,
        last_sent: row.get("last_sent")?,
    })
}

/// Stores a subscription (or renews one with the same endpoint, which then
/// counts as the newest) and drops the oldest past `KEEP`.
pub fn subscribe(
    conn: &Connection,
    endpoint: &str,
    p256dh: &str,
    auth: &str,
    now: &str,
) -> rusqlite::Result<Subscribed> {
    let before: Option<String> = conn
        .query_row(
            "SELECT id FROM push_subscriptions WHERE endpoint = ?1",
            [endpoint],
            |r| r.get(0),
        )
        .optional()?;
    let id = before.clone().unwrap_or_else(|| new_id("ps_"));
    // Deleted and inserted again: the row's rowid, its age, becomes the newest.
    conn.execute(
        "DELETE FROM push_subscriptions WHERE endpoint = ?1",
        [endpoint],
    )?;
    conn.execute(
        "INSERT INTO push_subscriptions (id, endpoint, p256dh, auth, created) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![id, endpoint, p256dh, auth, now],
    )?;
    let dropped = {
        let mut stmt = conn
            .prepare("SELECT id FROM push_subscriptions ORDER BY rowid DESC LIMIT -1 OFFSET ?1")?;
        let ids = stmt
            .query_map([KEEP], |r| r.get::<_, String>(0))?
            .collect::<Result<Vec<_>, _>>()?;
        ids
    };
    for old in &dropped {
        conn.execute("DELETE FROM push_subscriptions WHERE id = ?1", [old])?;
    }
    Ok(Subscribed {
        id,
        created: before.is_none(),
        dropped,
    })
}

/// Removes the subscription of `endpoint`; answers how many went (0 or 1).
pub fn unsubscribe(conn: &Connection, endpoint: &str) -> rusqlite::Result<usize> {
    conn.execute(
        "DELETE FROM push_subscriptions WHERE endpoint = ?1",
        [endpoint],
    )
}

/// Removes a subscription its push service said is gone.
pub fn remove(conn: &Connection, id: &str) -> rusqlite::Result<usize> {
    conn.execute("DELETE FROM push_subscriptions WHERE id = ?1", [id])
}

/// Keeps a push's outcome on its subscription.
pub fn record(conn: &Connection, id: &str, result: &str, now: &str) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE push_subscriptions SET last_result = ?1, last_sent = ?2 WHERE id = ?3",
        params![result, now, id],
    )?;
    Ok(())
}

/// Every subscription, oldest first.
pub fn all(conn: &Connection) -> rusqlite::Result<Vec<Subscription>> {
    let mut stmt = conn.prepare_cached("SELECT * FROM push_subscriptions ORDER BY rowid")?;
    let rows = stmt.query_map([], from_row)?;
    rows.collect()
}

/// Every subscription as the API lists it, newest first.
pub fn listed(conn: &Connection) -> rusqlite::Result<Vec<Listed>> {
    let mut all = all(conn)?;
    all.reverse();
    Ok(all
        .into_iter()
        .map(|s| Listed {
            origin: url::Url::parse(&s.endpoint)
                .map(|u| u.origin().ascii_serialization())
                .unwrap_or_default(),
            id: s.id,
            created: s.created,
            last_result: s.last_result,
            last_sent: s.last_sent,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open() -> Connection {
        let dir = tempfile::tempdir().unwrap();
        let conn = tandem_shared::db::open_writer(
            &dir.path().join("c.sqlite3"),
            super::super::schema::MIGRATIONS,
        )
        .unwrap();
        std::mem::forget(dir);
        conn
    }

    #[test]
    fn the_eleventh_browser_drops_the_oldest_and_a_renewal_counts_as_new() {
        let conn = open();
        let mut ids = Vec::new();
        for i in 0..10 {
            let s = subscribe(&conn, &format!("https://p.example/{i}"), "k", "a", "t").unwrap();
            assert!(s.created && s.dropped.is_empty());
            ids.push(s.id);
        }
        // The first browser subscribes again: same id, now the newest.
        let again = subscribe(&conn, "https://p.example/0", "k2", "a2", "t2").unwrap();
        assert_eq!((again.id.as_str(), again.created), (ids[0].as_str(), false));
        let eleventh = subscribe(&conn, "https://p.example/10", "k", "a", "t").unwrap();
        assert_eq!(eleventh.dropped, vec![ids[1].clone()], "the oldest went");
        let endpoints: Vec<String> = all(&conn)
            .unwrap()
            .into_iter()
            .map(|s| s.endpoint)
            .collect();
        assert_eq!(endpoints.len(), 10);
        assert_eq!(endpoints.last().unwrap(), "https://p.example/10");
        assert_eq!(endpoints[endpoints.len() - 2], "https://p.example/0");
        assert_eq!(unsubscribe(&conn, "https://p.example/0").unwrap(), 1);
        assert_eq!(unsubscribe(&conn, "https://p.example/0").unwrap(), 0);
        assert_eq!(listed(&conn).unwrap()[0].origin, "https://p.example");
    }
}
