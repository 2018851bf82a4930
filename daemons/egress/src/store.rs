//! egress.sqlite3: each chat's preset and the audit of every decision.
//! egressd is its only writer; one connection behind a mutex is enough for
//! a row a connection.

use std::path::Path;
use std::sync::Mutex;

use rusqlite::{params, Connection};
use serde::Serialize;

use crate::proxy::{Audit, Decision};

const MIGRATIONS: &[&str] = &[r#"
CREATE TABLE chats (
    id TEXT PRIMARY KEY,
    preset TEXT NOT NULL,
    updated INTEGER NOT NULL
);
CREATE TABLE audit (
    at INTEGER NOT NULL,
    chat TEXT NOT NULL,
    host TEXT NOT NULL,
    port INTEGER NOT NULL,
    address TEXT,
    verdict TEXT NOT NULL,
    reason TEXT NOT NULL,
    bytes_up INTEGER NOT NULL,
    bytes_down INTEGER NOT NULL,
    duration_ms INTEGER NOT NULL
);
CREATE INDEX audit_chat ON audit(chat, at);
CREATE INDEX audit_at ON audit(at);
"#];

pub struct Store {
    conn: Mutex<Connection>,
}

/// One audit row as the API shows it.
#[derive(Debug, Serialize)]
pub struct Row {
    pub at: String,
    pub chat: String,
    pub host: String,
    pub port: u16,
    pub address: Option<String>,
    pub verdict: String,
    pub reason: String,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub duration_ms: u64,
}

/// What an audit read keeps.
#[derive(Debug, Default)]
pub struct Filter {
    pub chat: Option<String>,
    pub host: Option<String>,
    pub verdict: Option<String>,
    pub limit: usize,
}

impl Store {
    pub fn open(path: &Path) -> anyhow::Result<Store> {
        let conn = tandem_shared::db::open_writer(path, MIGRATIONS)?;
        Ok(Store {
            conn: Mutex::new(conn),
        })
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        // Nothing panics while holding it; a poisoned lock still holds a valid connection.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn set_preset(&self, chat: &str, preset: &str) -> rusqlite::Result<()> {
        self.conn().execute(
            "INSERT INTO chats (id, preset, updated) VALUES (?1, ?2, ?3) \
             ON CONFLICT(id) DO UPDATE SET preset = ?2, updated = ?3",
            params![chat, preset, tandem_shared::time::now_unix()],
        )?;
        Ok(())
    }

    pub fn presets(&self) -> rusqlite::Result<Vec<(String, String)>> {
        let conn = self.conn();
        let mut stmt = conn.prepare("SELECT id, preset FROM chats ORDER BY id")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        rows.collect()
    }

    pub fn preset(&self, chat: &str) -> rusqlite::Result<Option<String>> {
        use rusqlite::OptionalExtension;
        self.conn()
            .query_row("SELECT preset FROM chats WHERE id = ?1", [chat], |r| {
                r.get(0)
            })
            .optional()
    }

    pub fn audit(&self, filter: &Filter) -> rusqlite::Result<Vec<Row>> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT at, chat, host, port, address, verdict, reason, bytes_up, bytes_down, duration_ms \
             FROM audit WHERE (?1 IS NULL OR chat = ?1) AND (?2 IS NULL OR host = ?2) \
             AND (?3 IS NULL OR verdict = ?3) ORDER BY rowid DESC LIMIT ?4",
        )?;
        let rows = stmt.query_map(
            params![
                filter.chat,
                filter.host,
                filter.verdict,
                filter.limit as i64
            ],
            |r| {
                let at: i64 = r.get(0)?;
                Ok(Row {
                    at: jiff::Timestamp::from_second(at)
                        .map(|t| t.to_string())
                        .unwrap_or_default(),
                    chat: r.get(1)?,
                    host: r.get(2)?,
                    port: r.get(3)?,
                    address: r.get(4)?,
                    verdict: r.get(5)?,
                    reason: r.get(6)?,
                    bytes_up: r.get::<_, i64>(7)?.max(0) as u64,
                    bytes_down: r.get::<_, i64>(8)?.max(0) as u64,
                    duration_ms: r.get::<_, i64>(9)?.max(0) as u64,
                })
            },
        )?;
        rows.collect()
    }

    /// Drops audit rows older than `days`.
    pub fn purge(&self, days: u64) -> rusqlite::Result<usize> {
        let cutoff = tandem_shared::time::now_unix() - (days as i64) * 86_400;
        self.conn()
            .execute("DELETE FROM audit WHERE at < ?1", [cutoff])
    }
}

impl Audit for Store {
    fn record(&self, d: Decision) {
        let written = self.conn().execute(
            "INSERT INTO audit (at, chat, host, port, address, verdict, reason, bytes_up, bytes_down, duration_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            params![
                tandem_shared::time::now_unix(),
                d.chat,
                d.host,
                d.port,
                d.address.map(|a| a.to_string()),
                d.verdict,
                d.reason,
                d.bytes_up as i64,
                d.bytes_down as i64,
                d.duration_ms as i64
            ],
        );
        if let Err(e) = written {
            tracing::error!(error = %e, chat = %d.chat, "audit row not written");
        }
    }
}
