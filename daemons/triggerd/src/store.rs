//! triggers.sqlite3: the triggers, their runs (each with a unique due key,
//! so a due time or a file version runs once however many checks race for
//! it) and the file versions each file trigger has seen and run. triggerd
//! is its only writer, and only the triggerd holding `triggerd.lock` opens
//! it; one connection behind a mutex, used from blocking tasks.

use std::path::Path;

use rusqlite::{params, Connection, OptionalExtension, Row};
use serde::Serialize;

use crate::status::RunStatus;

const MIGRATIONS: &[&str] = &[r#"
CREATE TABLE triggers (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    when_text TEXT NOT NULL,
    tz TEXT NOT NULL,
    folder TEXT NOT NULL,
    quiet_seconds INTEGER NOT NULL,
    min_gap_seconds INTEGER NOT NULL,
    prompt TEXT NOT NULL,
    model TEXT NOT NULL,
    -- a saved agent of chatd's ('' for none)
    agent_id TEXT NOT NULL DEFAULT '',
    daily_cap INTEGER NOT NULL,
    enabled INTEGER NOT NULL,
    -- unix ms: nothing due before this runs
    enabled_ms INTEGER NOT NULL,
    -- unix ms: due times up to here have been looked at
    checked_ms INTEGER NOT NULL,
    disabled_reason TEXT,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL
);

CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    trigger_id TEXT NOT NULL,
    trigger_name TEXT NOT NULL,
    due_key TEXT NOT NULL UNIQUE,
    cause TEXT NOT NULL,
    due_ms INTEGER NOT NULL,
    file TEXT,
    status TEXT NOT NULL,
    chat_id TEXT,
    chat_run_id TEXT,
    queued_ms INTEGER NOT NULL,
    started_ms INTEGER,
    ended_ms INTEGER,
    tokens INTEGER NOT NULL DEFAULT 0,
    reason TEXT,
    summary TEXT,
    notified INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX runs_trigger ON runs(trigger_id, queued_ms);
CREATE INDEX runs_status ON runs(status);

CREATE TABLE files (
    trigger_id TEXT NOT NULL,
    path TEXT NOT NULL,
    version TEXT NOT NULL,
    -- unix ms when this version was first seen
    seen_ms INTEGER NOT NULL,
    -- the version a run was started for, or taken as the run's own write
    ran_version TEXT,
    -- unix ms the last run for this file started
    ran_ms INTEGER,
    PRIMARY KEY (trigger_id, path)
);

-- inbox entries not yet taken by chatd (a trigger switched off)
CREATE TABLE notices (
    id TEXT PRIMARY KEY,
    trigger_id TEXT NOT NULL,
    trigger_name TEXT NOT NULL,
    title TEXT NOT NULL,
    body TEXT NOT NULL,
    conversation_id TEXT,
    created_ms INTEGER NOT NULL
);
"#];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Schedule,
    File,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Schedule => "schedule",
            Kind::File => "file",
        }
    }
}

/// A trigger as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Trigger {
    pub id: String,
    pub name: String,
    pub kind: Kind,
    pub when: String,
    pub tz: String,
    /// Relative to the workspace, `""` for none (a schedule trigger's rules
    /// then come from the workspace's own AGENTS.md).
    pub folder: String,
    pub quiet_seconds: u64,
    pub min_gap_seconds: u64,
    pub prompt: String,
    pub model: String,
    /// chatd's saved agent the run's chat is made with; "" for none.
    pub agent_id: String,
    pub daily_cap: u32,
    pub enabled: bool,
    pub enabled_ms: i64,
    pub checked_ms: i64,
    pub disabled_reason: Option<String>,
    pub created_ms: i64,
    pub updated_ms: i64,
}

/// A run of a trigger.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub id: String,
    pub trigger_id: String,
    pub trigger_name: String,
    pub due_key: String,
    /// schedule | file | manual
    pub cause: String,
    pub due_ms: i64,
    pub file: Option<String>,
    pub status: RunStatus,
    pub chat_id: Option<String>,
    pub chat_run_id: Option<String>,
    pub queued_ms: i64,
    pub started_ms: Option<i64>,
    pub ended_ms: Option<i64>,
    pub tokens: i64,
    pub reason: Option<String>,
    /// The run's closing sentence, for the inbox.
    pub summary: Option<String>,
    pub notified: bool,
}

/// What one file trigger knows of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileState {
    pub path: String,
    pub version: String,
    pub seen_ms: i64,
    pub ran_version: Option<String>,
    pub ran_ms: Option<i64>,
}

/// The runs that ended (`RunStatus::is_finished`; a test keeps the two the same).
pub const FINISHED: &str = "status NOT IN ('queued', 'running')";

/// triggers.sqlite3's one connection.
pub type Store = tandem_shared::db::Writer;

/// Opens triggers.sqlite3 at `path`.
pub fn open(path: &Path) -> anyhow::Result<Store> {
    Store::open(path, MIGRATIONS)
}

fn trigger_of(row: &Row) -> rusqlite::Result<Trigger> {
    let kind: String = row.get("kind")?;
    Ok(Trigger {
        id: row.get("id")?,
        name: row.get("name")?,
        kind: if kind == "file" {
            Kind::File
        } else {
            Kind::Schedule
        },
        when: row.get("when_text")?,
        tz: row.get("tz")?,
        folder: row.get("folder")?,
        quiet_seconds: row.get::<_, i64>("quiet_seconds")?.max(0) as u64,
        min_gap_seconds: row.get::<_, i64>("min_gap_seconds")?.max(0) as u64,
        prompt: row.get("prompt")?,
        model: row.get("model")?,
        agent_id: row.get("agent_id")?,
        daily_cap: row
            .get::<_, i64>("daily_cap")?
            .clamp(0, i64::from(u32::MAX)) as u32,
        enabled: row.get::<_, i64>("enabled")? != 0,
        enabled_ms: row.get("enabled_ms")?,
        checked_ms: row.get("checked_ms")?,
        disabled_reason: row.get("disabled_reason")?,
        created_ms: row.get("created_ms")?,
        updated_ms: row.get("updated_ms")?,
    })
}

fn run_of(row: &Row) -> rusqlite::Result<Run> {
    Ok(Run {
        id: row.get("id")?,
        trigger_id: row.get("trigger_id")?,
        trigger_name: row.get("trigger_name")?,
        due_key: row.get("due_key")?,
        cause: row.get("cause")?,
        due_ms: row.get("due_ms")?,
        file: row.get("file")?,
        status: row.get("status")?,
        chat_id: row.get("chat_id")?,
        chat_run_id: row.get("chat_run_id")?,
        queued_ms: row.get("queued_ms")?,
        started_ms: row.get("started_ms")?,
        ended_ms: row.get("ended_ms")?,
        tokens: row.get("tokens")?,
        reason: row.get("reason")?,
        summary: row.get("summary")?,
        notified: row.get::<_, i64>("notified")? != 0,
    })
}

/// How a run ended, as it is recorded.
#[derive(Debug, Clone)]
pub struct Ending {
    pub status: RunStatus,
    pub tokens: i64,
    pub reason: Option<String>,
    pub summary: Option<String>,
}

impl Ending {
    /// An ending with `status` and nothing else said yet.
    pub fn new(status: RunStatus) -> Ending {
        Ending {
            status,
            tokens: 0,
            reason: None,
            summary: None,
        }
    }
}

pub fn all_triggers(conn: &Connection) -> rusqlite::Result<Vec<Trigger>> {
    let mut stmt = conn.prepare("SELECT * FROM triggers ORDER BY created_ms, id")?;
    let rows = stmt.query_map([], trigger_of)?;
    rows.collect()
}

pub fn trigger(conn: &Connection, id: &str) -> rusqlite::Result<Option<Trigger>> {
    conn.query_row("SELECT * FROM triggers WHERE id = ?1", [id], trigger_of)
        .optional()
}

pub fn count_triggers(conn: &Connection) -> rusqlite::Result<usize> {
    conn.query_row("SELECT COUNT(*) FROM triggers", [], |r| r.get::<_, i64>(0))
        .map(|n| n as usize)
}

/// Inserts or replaces a trigger whole.
pub fn put_trigger(conn: &Connection, t: &Trigger) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT OR REPLACE INTO triggers (id, name, kind, when_text, tz, folder, quiet_seconds, \
         min_gap_seconds, prompt, model, daily_cap, enabled, enabled_ms, checked_ms, \
         disabled_reason, created_ms, updated_ms, agent_id) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
        params![
            t.id,
            t.name,
            t.kind.as_str(),
            t.when,
            t.tz,
            t.folder,
            t.quiet_seconds as i64,
            t.min_gap_seconds as i64,
            t.prompt,
            t.model,
            i64::from(t.daily_cap),
            i64::from(t.enabled),
            t.enabled_ms,
            t.checked_ms,
            t.disabled_reason,
            t.created_ms,
            t.updated_ms,
            t.agent_id,
        ],
    )?;
    Ok(())
}

/// Removes a trigger, its waiting runs and its file versions; finished and
/// running runs stay in the history until they age out.
pub fn delete_trigger(conn: &mut Connection, id: &str) -> rusqlite::Result<bool> {
    let tx = conn.transaction()?;
    let n = tx.execute("DELETE FROM triggers WHERE id = ?1", [id])?;
    tx.execute(
        "DELETE FROM runs WHERE trigger_id = ?1 AND status = ?2",
        params![id, RunStatus::Queued],
    )?;
    tx.execute("DELETE FROM files WHERE trigger_id = ?1", [id])?;
    tx.commit()?;
    Ok(n > 0)
}

pub fn set_checked(conn: &Connection, id: &str, checked_ms: i64) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE triggers SET checked_ms = ?2 WHERE id = ?1",
        params![id, checked_ms],
    )?;
    Ok(())
}

pub fn disable(
    conn: &Connection,
    id: &str,
    reason: Option<&str>,
    now_ms: i64,
) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE triggers SET enabled = 0, disabled_reason = ?2, updated_ms = ?3 WHERE id = ?1",
        params![id, reason, now_ms],
    )?;
    Ok(())
}

/// A new run, queued, unless its due key ran already: `None` then.
pub fn queue_run(conn: &Connection, run: &Run) -> rusqlite::Result<Option<Run>> {
    let n = conn.execute(
        "INSERT OR IGNORE INTO runs (id, trigger_id, trigger_name, due_key, cause, due_ms, file, \
         status, queued_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?9, ?8)",
        params![
            run.id,
            run.trigger_id,
            run.trigger_name,
            run.due_key,
            run.cause,
            run.due_ms,
            run.file,
            run.queued_ms,
            RunStatus::Queued
        ],
    )?;
    if n == 0 {
        return Ok(None);
    }
    self::run(conn, &run.id)
}

pub fn run(conn: &Connection, id: &str) -> rusqlite::Result<Option<Run>> {
    conn.query_row("SELECT * FROM runs WHERE id = ?1", [id], run_of)
        .optional()
}

pub fn runs_of(conn: &Connection, trigger_id: &str, limit: usize) -> rusqlite::Result<Vec<Run>> {
    let mut stmt = conn.prepare(
        "SELECT * FROM runs WHERE trigger_id = ?1 ORDER BY queued_ms DESC, rowid DESC LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![trigger_id, limit as i64], run_of)?;
    rows.collect()
}

pub fn runs_with_status(conn: &Connection, status: RunStatus) -> rusqlite::Result<Vec<Run>> {
    let mut stmt =
        conn.prepare_cached("SELECT * FROM runs WHERE status = ?1 ORDER BY queued_ms, rowid")?;
    let rows = stmt.query_map([status], run_of)?;
    rows.collect()
}

/// The oldest queued runs, at most `limit`: a check starts a few at most.
pub fn queued_runs(conn: &Connection, limit: usize) -> rusqlite::Result<Vec<Run>> {
    let mut stmt = conn.prepare_cached(
        "SELECT * FROM runs WHERE status = ?2 ORDER BY queued_ms, rowid LIMIT ?1",
    )?;
    let rows = stmt.query_map(params![limit as i64, RunStatus::Queued], run_of)?;
    rows.collect()
}

pub fn count_with_status(conn: &Connection, status: RunStatus) -> rusqlite::Result<i64> {
    conn.query_row(
        "SELECT COUNT(*) FROM runs WHERE status = ?1",
        [status],
        |r| r.get(0),
    )
}

/// Finished runs whose notification has not reached chatd yet.
pub fn unnotified(conn: &Connection) -> rusqlite::Result<Vec<Run>> {
    let mut stmt = conn.prepare(&format!(
        "SELECT * FROM runs WHERE notified = 0 AND {FINISHED} AND status != ?1 \
         ORDER BY ended_ms, rowid LIMIT 100"
    ))?;
    let rows = stmt.query_map([RunStatus::Skipped], run_of)?;
    rows.collect()
}

pub fn set_notified(conn: &Connection, id: &str) -> rusqlite::Result<()> {
    conn.execute("UPDATE runs SET notified = 1 WHERE id = ?1", [id])?;
    Ok(())
}

/// Runs of a trigger started since `since_ms` (the daily cap).
pub fn started_since(conn: &Connection, trigger_id: &str, since_ms: i64) -> rusqlite::Result<u32> {
    conn.query_row(
        "SELECT COUNT(*) FROM runs WHERE trigger_id = ?1 AND started_ms >= ?2",
        params![trigger_id, since_ms],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n as u32)
}

pub fn mark_started(conn: &Connection, id: &str, now_ms: i64) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE runs SET status = ?3, started_ms = ?2 WHERE id = ?1",
        params![id, now_ms, RunStatus::Running],
    )?;
    Ok(())
}

pub fn set_chat(
    conn: &Connection,
    id: &str,
    chat_id: &str,
    chat_run_id: Option<&str>,
) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE runs SET chat_id = ?2, chat_run_id = ?3 WHERE id = ?1",
        params![id, chat_id, chat_run_id],
    )?;
    Ok(())
}

/// The run's chat was deleted again (chatd refused its first message):
/// the run made none.
pub fn clear_chat(conn: &Connection, id: &str) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE runs SET chat_id = NULL, chat_run_id = NULL WHERE id = ?1",
        [id],
    )?;
    Ok(())
}

/// Records how a run ended; a run already ended keeps its first ending.
pub fn finish(conn: &Connection, id: &str, ending: &Ending, now_ms: i64) -> rusqlite::Result<bool> {
    let n = conn.execute(
        "UPDATE runs SET status = ?2, tokens = ?3, reason = ?4, summary = ?5, ended_ms = ?6, \
         notified = CASE WHEN ?2 = ?7 THEN 1 ELSE 0 END \
         WHERE id = ?1 AND status IN (?8, ?9)",
        params![
            id,
            ending.status,
            ending.tokens,
            ending.reason,
            ending.summary,
            now_ms,
            RunStatus::Skipped,
            RunStatus::Queued,
            RunStatus::Running
        ],
    )?;
    Ok(n > 0)
}

/// Finished runs older than `days` go; beyond two days, only the last
/// `keep` of each trigger stay. Queued and running runs are never removed.
pub fn purge_runs(
    conn: &Connection,
    now_ms: i64,
    days: u64,
    keep: usize,
) -> rusqlite::Result<usize> {
    let day = 86_400_000i64;
    let old = now_ms - days as i64 * day;
    let recent = now_ms - 2 * day;
    let mut n = conn.execute(
        &format!("DELETE FROM runs WHERE {FINISHED} AND COALESCE(ended_ms, queued_ms) < ?1"),
        [old],
    )?;
    n += conn.execute(
        &format!(
            "DELETE FROM runs WHERE {FINISHED} AND COALESCE(ended_ms, queued_ms) < ?1 AND id IN ( \
               SELECT id FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY trigger_id \
                 ORDER BY queued_ms DESC, rowid DESC) AS n FROM runs WHERE {FINISHED}) \
               WHERE n > ?2)"
        ),
        params![recent, keep as i64],
    )?;
    Ok(n)
}

pub fn files_of(conn: &Connection, trigger_id: &str) -> rusqlite::Result<Vec<FileState>> {
    let mut stmt = conn.prepare(
        "SELECT path, version, seen_ms, ran_version, ran_ms FROM files WHERE trigger_id = ?1",
    )?;
    let rows = stmt.query_map([trigger_id], |r| {
        Ok(FileState {
            path: r.get(0)?,
            version: r.get(1)?,
            seen_ms: r.get(2)?,
            ran_version: r.get(3)?,
            ran_ms: r.get(4)?,
        })
    })?;
    rows.collect()
}

/// Writes what a scan found: changed rows replaced, vanished ones removed.
/// The caller holds a transaction when it writes runs with them.
pub fn put_files(
    conn: &Connection,
    trigger_id: &str,
    changed: &[FileState],
    removed: &[String],
) -> rusqlite::Result<()> {
    let mut put = conn.prepare_cached(
        "INSERT OR REPLACE INTO files (trigger_id, path, version, seen_ms, ran_version, ran_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    for f in changed {
        put.execute(params![
            trigger_id,
            f.path,
            f.version,
            f.seen_ms,
            f.ran_version,
            f.ran_ms
        ])?;
    }
    let mut gone = conn.prepare_cached("DELETE FROM files WHERE trigger_id = ?1 AND path = ?2")?;
    for path in removed {
        gone.execute(params![trigger_id, path])?;
    }
    Ok(())
}

/// A run for `path` started: its gap counts from now.
pub fn file_run_started(
    conn: &Connection,
    trigger_id: &str,
    path: &str,
    now_ms: i64,
) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE files SET ran_ms = ?3 WHERE trigger_id = ?1 AND path = ?2",
        params![trigger_id, path, now_ms],
    )?;
    Ok(())
}

pub fn clear_files(conn: &Connection, trigger_id: &str) -> rusqlite::Result<()> {
    conn.execute("DELETE FROM files WHERE trigger_id = ?1", [trigger_id])?;
    Ok(())
}

/// An inbox entry waiting for chatd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub id: String,
    pub trigger_id: String,
    pub trigger_name: String,
    pub title: String,
    pub body: String,
    /// The chat it is about, when there is one.
    pub conversation_id: Option<String>,
}

pub fn add_notice(conn: &Connection, n: &Notice, now_ms: i64) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO notices (id, trigger_id, trigger_name, title, body, conversation_id, created_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![n.id, n.trigger_id, n.trigger_name, n.title, n.body, n.conversation_id, now_ms],
    )?;
    Ok(())
}

pub fn notices(conn: &Connection) -> rusqlite::Result<Vec<Notice>> {
    let mut stmt = conn.prepare(
        "SELECT id, trigger_id, trigger_name, title, body, conversation_id FROM notices \
         ORDER BY created_ms, rowid LIMIT 100",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(Notice {
            id: r.get(0)?,
            trigger_id: r.get(1)?,
            trigger_name: r.get(2)?,
            title: r.get(3)?,
            body: r.get(4)?,
            conversation_id: r.get(5)?,
        })
    })?;
    rows.collect()
}

pub fn drop_notice(conn: &Connection, id: &str) -> rusqlite::Result<()> {
    conn.execute("DELETE FROM notices WHERE id = ?1", [id])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str, trigger: &str, key: &str, queued_ms: i64) -> Run {
        crate::scheduler::new_run(
            trigger,
            "name",
            key.into(),
            "schedule",
            queued_ms,
            None,
            queued_ms,
        )
        .with_id(id)
    }

    impl Run {
        fn with_id(mut self, id: &str) -> Run {
            self.id = id.into();
            self
        }
    }

    fn open() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = super::open(&dir.path().join("t.sqlite3")).unwrap();
        (dir, store)
    }

    #[test]
    fn a_due_key_runs_once() {
        let (_dir, store) = open();
        store
            .call_now(|conn| {
                assert!(queue_run(conn, &run("r1", "t", "t@9", 1))?.is_some());
                assert!(
                    queue_run(conn, &run("r2", "t", "t@9", 2))?.is_none(),
                    "same key"
                );
                assert!(queue_run(conn, &run("r3", "t", "t@10", 3))?.is_some());
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn history_keeps_the_last_runs_two_days_and_never_what_waits() {
        let (_dir, store) = open();
        let day = 86_400_000i64;
        let now = 100 * day;
        store
            .call_now(|conn| {
                // 250 finished runs a minute apart, 10 to 3 days old.
                for i in 0..250i64 {
                    let at = now - 10 * day + i * 60_000;
                    queue_run(
                        conn,
                        &run(&format!("old{i:03}"), "a", &format!("a@{i}"), at),
                    )?;
                    let ending = Ending {
                        ..Ending::new(RunStatus::Done)
                    };
                    finish(conn, &format!("old{i:03}"), &ending, at)?;
                }
                // 300 finished in the last two days: all kept.
                for i in 0..300i64 {
                    let at = now - day + i * 60_000;
                    queue_run(
                        conn,
                        &run(&format!("new{i:03}"), "a", &format!("b@{i}"), at),
                    )?;
                    let ending = Ending {
                        ..Ending::new(RunStatus::Failed)
                    };
                    finish(conn, &format!("new{i:03}"), &ending, at)?;
                }
                // 40 days old: finished goes, queued and running stay.
                let ancient = now - 40 * day;
                queue_run(conn, &run("gone", "b", "c@1", ancient))?;
                finish(
                    conn,
                    "gone",
                    &Ending {
                        ..Ending::new(RunStatus::Done)
                    },
                    ancient,
                )?;
                queue_run(conn, &run("waits", "b", "c@2", ancient))?;
                queue_run(conn, &run("works", "b", "c@3", ancient))?;
                mark_started(conn, "works", ancient)?;
                let removed = purge_runs(conn, now, 30, 200)?;
                // trigger a: 550 finished; the newest 200 are the 2-day ones,
                // so every older one goes; trigger b: the 40-day-old one.
                assert_eq!(removed, 250 + 1);
                assert_eq!(runs_of(conn, "a", 1000)?.len(), 300);
                let b: Vec<String> = runs_of(conn, "b", 10)?.into_iter().map(|r| r.id).collect();
                assert_eq!(b.len(), 2);
                assert!(b.contains(&"waits".to_string()) && b.contains(&"works".to_string()));
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn beyond_two_days_the_last_200_of_a_trigger_stay() {
        let (_dir, store) = open();
        let day = 86_400_000i64;
        let now = 100 * day;
        store
            .call_now(|conn| {
                for i in 0..260i64 {
                    let at = now - 20 * day + i * 60_000;
                    queue_run(conn, &run(&format!("r{i:03}"), "a", &format!("a@{i}"), at))?;
                    finish(
                        conn,
                        &format!("r{i:03}"),
                        &Ending {
                            ..Ending::new(RunStatus::Done)
                        },
                        at,
                    )?;
                }
                assert_eq!(purge_runs(conn, now, 30, 200)?, 60);
                let kept = runs_of(conn, "a", 1000)?;
                assert_eq!(kept.len(), 200);
                assert_eq!(
                    kept.last().map(|r| r.id.as_str()),
                    Some("r060"),
                    "the oldest go first"
                );
                Ok(())
            })
            .unwrap();
    }
}
