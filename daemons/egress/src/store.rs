//! egress.sqlite3: each chat's preset and rules, and the audit of every
//! decision. egressd is its only writer: the shared `db::Writer`.
//! Audit rows go through a channel to a writer thread, so a connection's
//! end never waits on the disk inside the async runtime.

use std::path::Path;
use std::sync::{mpsc, Mutex};

use rusqlite::{params, Connection};
use serde::Serialize;
use tandem_shared::db::Writer;
use tandem_shared::sync::lock;

use crate::policy::{Audit, Cards, Decision};
use crate::verdicts::{AuditVerdict, RuleSource, RuleVerdict};

const MIGRATIONS: &[&str] = &[
    r#"
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
"#,
    r#"
ALTER TABLE chats ADD COLUMN cards INTEGER NOT NULL DEFAULT 1;
CREATE TABLE rules (
    id TEXT PRIMARY KEY,
    chat TEXT NOT NULL,
    verdict TEXT NOT NULL,
    host TEXT NOT NULL,
    port INTEGER NOT NULL,
    source TEXT NOT NULL,
    created TEXT NOT NULL,
    UNIQUE (chat, host, port)
);
"#,
];

pub struct Store {
    db: Writer,
    /// To the audit writer; `None` once closed.
    audit: Mutex<Option<mpsc::Sender<Decision>>>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// A chat's rule: `allow` or `deny` for one host:port.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Rule {
    pub id: String,
    pub verdict: RuleVerdict,
    pub host: String,
    pub port: u16,
    pub source: RuleSource,
    pub created: String,
}

/// One audit row as the API shows it.
#[derive(Debug, Serialize)]
pub struct Row {
    pub at: String,
    pub chat: String,
    pub host: String,
    pub port: u16,
    pub address: Option<String>,
    pub verdict: AuditVerdict,
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
    pub verdict: Option<AuditVerdict>,
    pub limit: usize,
}

impl Store {
    pub fn open(path: &Path) -> anyhow::Result<Store> {
        let db = Writer::open(path, MIGRATIONS)?;
        let (tx, rx) = mpsc::channel::<Decision>();
        let audit_db = db.clone();
        let writer = std::thread::Builder::new()
            .name("audit-writer".into())
            .spawn(move || {
                // Ends when the store (the last sender) is dropped.
                while let Ok(first) = rx.recv() {
                    // Rows that come within 50 ms share one transaction: at
                    // thousands of connections a second, one commit each
                    // would be most of the writer's time.
                    let mut batch = vec![first];
                    let until = std::time::Instant::now() + std::time::Duration::from_millis(50);
                    while batch.len() < 512 {
                        let left = until.saturating_duration_since(std::time::Instant::now());
                        match rx.recv_timeout(left) {
                            Ok(row) => batch.push(row),
                            Err(_) => break,
                        }
                    }
                    if let Err(e) = audit_db.call_now(|conn| write_audit(conn, &batch)) {
                        tracing::error!(error = %e, rows = batch.len(), "audit rows not written");
                    }
                }
            })?;
        Ok(Store {
            db,
            audit: Mutex::new(Some(tx)),
            writer: Mutex::new(Some(writer)),
        })
    }

    /// Writes the audit rows still on their way and ends the writer (at
    /// shutdown: nothing decided is lost).
    pub fn close_audit(&self) {
        lock(&self.audit).take();
        let writer = lock(&self.writer).take();
        if let Some(writer) = writer {
            let _ = writer.join();
        }
    }

    pub fn set_chat(&self, chat: &str, preset: &str, cards: Cards) -> rusqlite::Result<()> {
        self.db.call_now(|conn| {
            conn.execute(
                "INSERT INTO chats (id, preset, cards, updated) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT(id) DO UPDATE SET preset = ?2, cards = ?3, updated = ?4",
                params![chat, preset, cards.flag(), tandem_shared::time::now_unix()],
            )
        })?;
        Ok(())
    }

    /// Every chat with a setting: id, preset, cards.
    pub fn chats(&self) -> rusqlite::Result<Vec<(String, String, Cards)>> {
        self.db.call_now(|conn| {
            let mut stmt = conn.prepare("SELECT id, preset, cards FROM chats ORDER BY id")?;
            let rows = stmt.query_map([], |r| {
                Ok((r.get(0)?, r.get(1)?, Cards::from_flag(r.get(2)?)))
            })?;
            rows.collect()
        })
    }

    pub fn rules(&self, chat: &str) -> rusqlite::Result<Vec<Rule>> {
        self.db.call_now(|conn| {
            let mut stmt = conn.prepare(
                "SELECT id, verdict, host, port, source, created FROM rules WHERE chat = ?1 ORDER BY created, id",
            )?;
            let rows = stmt.query_map([chat], |r| {
                Ok(Rule {
                    id: r.get(0)?,
                    verdict: r.get(1)?,
                    host: r.get(2)?,
                    port: r.get(3)?,
                    source: r.get(4)?,
                    created: r.get(5)?,
                })
            })?;
            rows.collect()
        })
    }

    /// Saves a rule; one for the same host:port is replaced.
    pub fn add_rule(
        &self,
        chat: &str,
        verdict: RuleVerdict,
        host: &str,
        port: u16,
        source: RuleSource,
    ) -> rusqlite::Result<Rule> {
        let bytes: [u8; 6] = rand::random();
        let rule = Rule {
            id: format!(
                "er_{}",
                bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
            ),
            verdict,
            host: host.to_string(),
            port,
            source,
            created: tandem_shared::time::now_rfc3339(),
        };
        self.db.call_now(|conn| {
            conn.execute(
                "INSERT INTO rules (id, chat, verdict, host, port, source, created) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
                 ON CONFLICT(chat, host, port) DO UPDATE SET id = ?1, verdict = ?3, source = ?6, created = ?7",
                params![rule.id, chat, rule.verdict, rule.host, rule.port, rule.source, rule.created],
            )
        })?;
        Ok(rule)
    }

    pub fn remove_rule(&self, chat: &str, id: &str) -> rusqlite::Result<bool> {
        let removed = self.db.call_now(|conn| {
            conn.execute("DELETE FROM rules WHERE chat = ?1 AND id = ?2", [chat, id])
        })?;
        Ok(removed > 0)
    }

    pub fn audit(&self, filter: &Filter) -> rusqlite::Result<Vec<Row>> {
        self.db.call_now(|conn| {
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
        })
    }

    /// Drops audit rows older than `days`.
    pub fn purge(&self, days: u64) -> rusqlite::Result<usize> {
        let cutoff = tandem_shared::time::now_unix() - (days as i64) * 86_400;
        self.db
            .call_now(|conn| conn.execute("DELETE FROM audit WHERE at < ?1", [cutoff]))
    }
}

impl Audit for Store {
    fn record(&self, decision: Decision) {
        let audit = lock(&self.audit);
        let sent = match audit.as_ref() {
            Some(tx) => tx.send(decision).map_err(|e| e.0),
            None => Err(decision),
        };
        if let Err(d) = sent {
            tracing::error!(chat = %d.chat, "audit writer closed: a row was not written");
        }
    }
}

fn write_audit(conn: &Connection, batch: &[Decision]) -> rusqlite::Result<()> {
    let tx = conn.unchecked_transaction()?;
    {
        let mut stmt = tx.prepare_cached(
            "INSERT INTO audit (at, chat, host, port, address, verdict, reason, bytes_up, bytes_down, duration_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        )?;
        for d in batch {
            stmt.execute(params![
                d.at,
                d.chat,
                d.host,
                d.port,
                d.address.map(|a| a.to_string()),
                d.verdict,
                d.reason,
                d.bytes_up as i64,
                d.bytes_down as i64,
                d.duration_ms as i64
            ])?;
        }
    }
    tx.commit()
}
