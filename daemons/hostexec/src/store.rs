//! hostexec.sqlite3: the audit of every call. A row is written when the
//! call starts (with its keeper's pid and start time, so a hostexecd
//! started again finds the keepers of calls it did not see end) and
//! completed when it ends. hostexecd is its only writer: the shared
//! `db::Writer`, used from blocking tasks.

use std::path::Path;

use rusqlite::params;
use serde::Serialize;
use tandem_shared::db::Writer;

use crate::calls::KilledBy;

const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE calls (
    call_id TEXT PRIMARY KEY,
    chat TEXT NOT NULL,
    started_ms INTEGER NOT NULL,
    command TEXT NOT NULL,
    keeper_pid INTEGER,
    keeper_start INTEGER,
    ended_ms INTEGER,
    exit_code INTEGER,
    signal TEXT,
    duration_ms INTEGER,
    timed_out INTEGER NOT NULL DEFAULT 0,
    truncated INTEGER NOT NULL DEFAULT 0,
    killed_by TEXT,
    bytes INTEGER NOT NULL DEFAULT 0,
    error TEXT
);
CREATE INDEX calls_chat ON calls(chat, started_ms);
CREATE INDEX calls_started ON calls(started_ms);
"#,
    // The workspace a call works in: lent to the commands' user, given back
    // at the end, or by the next start when hostexecd died first.
    r#"ALTER TABLE calls ADD COLUMN workspace TEXT;"#,
];

/// The command is kept cut at this many bytes.
pub const COMMAND_KEPT: usize = 4096;

pub struct Store {
    db: Writer,
}

/// How a call ended, as the audit keeps it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ending {
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    pub duration_ms: u64,
    pub timed_out: bool,
    pub truncated: bool,
    pub killed_by: Option<KilledBy>,
    pub bytes: u64,
    pub error: Option<String>,
}

/// One audit row as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub at: String,
    pub chat: String,
    pub call_id: String,
    pub command: String,
    pub ended: Option<String>,
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    pub duration_ms: Option<u64>,
    pub timed_out: bool,
    pub truncated: bool,
    pub killed_by: Option<KilledBy>,
    pub bytes: u64,
    pub error: Option<String>,
}

/// A call as its row begins.
#[derive(Debug, Clone)]
pub struct Begun<'a> {
    pub call_id: &'a str,
    pub chat: &'a str,
    pub command: &'a str,
    pub keeper_pid: i32,
    pub keeper_start: u64,
    /// The workspace lent for the call; none for an MCP server, which is
    /// lent none.
    pub workspace: Option<&'a Path>,
}

/// A call a previous hostexecd did not see end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfinished {
    pub call_id: String,
    pub started_ms: i64,
    pub keeper_pid: Option<i32>,
    pub keeper_start: Option<u64>,
    pub workspace: Option<String>,
}

/// `text` cut at `max` bytes, on a character boundary.
pub fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

fn rfc3339(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

impl Store {
    pub fn open(path: &Path) -> anyhow::Result<Store> {
        Ok(Store {
            db: Writer::open(path, MIGRATIONS)?,
        })
    }

    /// The row of a call that starts now.
    pub fn begin(&self, call: &Begun<'_>) -> rusqlite::Result<()> {
        self.db.call_now(|conn| {
            conn.execute(
                "INSERT INTO calls (call_id, chat, started_ms, command, keeper_pid, keeper_start, workspace) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    call.call_id,
                    call.chat,
                    now_ms(),
                    cut(call.command, COMMAND_KEPT),
                    call.keeper_pid,
                    call.keeper_start as i64,
                    call.workspace.map(|w| w.to_string_lossy().into_owned())
                ],
            )
        })?;
        Ok(())
    }

    pub fn finish(&self, call_id: &str, e: &Ending) -> rusqlite::Result<()> {
        self.db.call_now(|conn| {
            conn.execute(
                "UPDATE calls SET ended_ms = ?2, exit_code = ?3, signal = ?4, duration_ms = ?5, \
                 timed_out = ?6, truncated = ?7, killed_by = ?8, bytes = ?9, error = ?10 \
                 WHERE call_id = ?1",
                params![
                    call_id,
                    now_ms(),
                    e.exit_code,
                    e.signal,
                    e.duration_ms as i64,
                    e.timed_out,
                    e.truncated,
                    e.killed_by,
                    e.bytes as i64,
                    e.error
                ],
            )
        })?;
        Ok(())
    }

    /// Calls with a start and no end.
    pub fn unfinished(&self) -> rusqlite::Result<Vec<Unfinished>> {
        self.db.call_now(|conn| {
            let mut stmt = conn.prepare(
                "SELECT call_id, started_ms, keeper_pid, keeper_start, workspace FROM calls \
             WHERE ended_ms IS NULL",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok(Unfinished {
                    call_id: r.get(0)?,
                    started_ms: r.get(1)?,
                    keeper_pid: r.get(2)?,
                    keeper_start: r.get::<_, Option<i64>>(3)?.map(|s| s.max(0) as u64),
                    workspace: r.get(4)?,
                })
            })?;
            rows.collect()
        })
    }

    /// Ends a call a restart interrupted.
    pub fn finish_restarted(&self, call: &Unfinished) -> rusqlite::Result<()> {
        let now = now_ms();
        self.db.call_now(|conn| {
            conn.execute(
                "UPDATE calls SET ended_ms = ?2, duration_ms = ?3, killed_by = ?4, \
                 error = 'interrupted by a restart of hostexecd' WHERE call_id = ?1",
                params![
                    call.call_id,
                    now,
                    (now - call.started_ms).max(0),
                    KilledBy::Restart
                ],
            )
        })?;
        Ok(())
    }

    /// The newest rows first, of one chat or all.
    pub fn audit(&self, chat: Option<&str>, limit: usize) -> rusqlite::Result<Vec<Row>> {
        self.db.call_now(|conn| {
            let mut stmt = conn.prepare(
                "SELECT started_ms, chat, call_id, command, ended_ms, exit_code, signal, duration_ms, \
                 timed_out, truncated, killed_by, bytes, error FROM calls \
                 WHERE (?1 IS NULL OR chat = ?1) ORDER BY started_ms DESC, rowid DESC LIMIT ?2",
            )?;
            let rows = stmt.query_map(params![chat, limit as i64], |r| {
                Ok(Row {
                    at: rfc3339(r.get(0)?),
                    chat: r.get(1)?,
                    call_id: r.get(2)?,
                    command: r.get(3)?,
                    ended: r.get::<_, Option<i64>>(4)?.map(rfc3339),
                    exit_code: r.get(5)?,
                    signal: r.get(6)?,
                    duration_ms: r.get::<_, Option<i64>>(7)?.map(|d| d.max(0) as u64),
                    timed_out: r.get(8)?,
                    truncated: r.get(9)?,
                    killed_by: r.get(10)?,
                    bytes: r.get::<_, i64>(11)?.max(0) as u64,
                    error: r.get(12)?,
                })
            })?;
            rows.collect()
        })
    }

    /// Drops rows older than `days`.
    pub fn purge(&self, days: u64) -> rusqlite::Result<usize> {
        let cutoff = now_ms() - (days as i64) * 86_400_000;
        self.db.call_now(|conn| {
            conn.execute(
                "DELETE FROM calls WHERE started_ms < ?1 AND ended_ms IS NOT NULL",
                [cutoff],
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_begin_finish_and_survive_a_restart_as_unfinished() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("hostexec.sqlite3")).unwrap();
        let long = "é".repeat(3000);
        let begun = |call_id, chat, command, keeper_pid| Begun {
            call_id,
            chat,
            command,
            keeper_pid,
            keeper_start: keeper_pid as u64 - 35,
            workspace: Some(Path::new("/data/workspaces/c1")),
        };
        store.begin(&begun("hx_1", "c1", &long, 42)).unwrap();
        store.begin(&begun("hx_2", "c2", "true", 43)).unwrap();
        store
            .finish(
                "hx_2",
                &Ending {
                    exit_code: Some(0),
                    duration_ms: 5,
                    bytes: 3,
                    ..Ending::default()
                },
            )
            .unwrap();
        let open = store.unfinished().unwrap();
        assert_eq!(open.len(), 1);
        assert_eq!(open[0].keeper_pid, Some(42));
        assert_eq!(open[0].keeper_start, Some(7));
        assert_eq!(open[0].workspace.as_deref(), Some("/data/workspaces/c1"));
        store.finish_restarted(&open[0]).unwrap();
        let rows = store.audit(None, 10).unwrap();
        assert_eq!(rows.len(), 2);
        let first = rows.iter().find(|r| r.call_id == "hx_1").unwrap();
        assert_eq!(first.killed_by, Some(KilledBy::Restart));
        assert!(first.command.len() <= COMMAND_KEPT);
        assert!(first.command.chars().all(|c| c == 'é'));
        let c2 = store.audit(Some("c2"), 10).unwrap();
        assert_eq!(c2.len(), 1);
        assert_eq!(c2[0].exit_code, Some(0));
        assert!(store.unfinished().unwrap().is_empty());
        assert_eq!(store.purge(30).unwrap(), 0);
    }
}
