//! Opening a daemon's SQLite file: WAL, `synchronous=NORMAL`, mode 0600 in a
//! 0700 folder (an existing folder keeps the o+x an administrator gave it),
//! and numbered migrations tracked by `PRAGMA user_version`.
//!
//! WAL with `synchronous=NORMAL` means a crash of the process never loses a
//! commit, and a power cut may lose the last commits but never corrupts the
//! file. Each file has exactly one writing process: its daemon.

use std::path::Path;

use anyhow::Context;
use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags};

use crate::sync::lock;

/// Opens (creating when needed) the database at `path` for writing and brings
/// its schema up to date with `migrations`: migration `i` (0-based) moves the
/// schema from version `i` to `i + 1`, in one transaction with the version bump.
pub fn open_writer(path: &Path, migrations: &[&str]) -> anyhow::Result<Connection> {
    if let Some(dir) = path.parent() {
        // Not private_dir: chatd's data folder may keep o+x for hostexecd's
        // run_as user, and opening the database must not take it away.
        crate::fsmode::private_dir_passable(dir)
            .with_context(|| format!("making data folder {}", dir.display()))?;
    }
    if !path.exists() {
        // SQLite gives its -wal and -shm files the mode of the main file, so
        // creating it 0600 first keeps all three private.
        crate::fsmode::write_private_new(path, b"")
            .with_context(|| format!("creating {}", path.display()))?;
    } else {
        crate::fsmode::private_file(path)
            .with_context(|| format!("setting mode 0600 on {}", path.display()))?;
    }
    let mut conn = Connection::open(path).with_context(|| format!("opening {}", path.display()))?;
    tune(&conn)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    migrate(&mut conn, migrations).with_context(|| format!("migrating {}", path.display()))?;
    Ok(conn)
}

/// Opens another connection to an existing database for reading only.
pub fn open_reader(path: &Path) -> anyhow::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .with_context(|| format!("opening {} for reading", path.display()))?;
    tune(&conn)?;
    Ok(conn)
}

fn tune(conn: &Connection) -> anyhow::Result<()> {
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // The plan of a cached statement does not depend on the values bound to
    // it: without this, SQLite compiles again at every run a statement whose
    // plan a bound value could change (an `ORDER BY rowid` beside an indexed
    // `=`, a bound `LIMIT`), which a run's step pays several times over. The
    // files are never ANALYZEd, so no plan is lost.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    Ok(())
}

/// Applies the migrations the file has not seen yet.
pub fn migrate(conn: &mut Connection, migrations: &[&str]) -> anyhow::Result<()> {
    let current: i64 = conn.pragma_query_value(None, "user_version", |row| row.get(0))?;
    let current = current.max(0) as usize;
    if current > migrations.len() {
        anyhow::bail!(
            "the database is at schema version {current}, newer than this build knows ({}); \
             run the newer build or restore a backup",
            migrations.len()
        );
    }
    for (index, sql) in migrations.iter().enumerate().skip(current) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)
            .with_context(|| format!("migration {}", index + 1))?;
        tx.pragma_update(None, "user_version", (index + 1) as i64)?;
        tx.commit()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cached statement runs as compiled, whatever is bound to it (SQLite
    /// otherwise compiles this one again at every run).
    #[test]
    fn a_cached_statement_is_not_compiled_again_at_each_run() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("t.sqlite3");
        let schema = "CREATE TABLE t (id INTEGER PRIMARY KEY, k TEXT); CREATE INDEX t_k ON t(k);";
        let writer = open_writer(&path, &[schema]).expect("writer");
        let reader = open_reader(&path).expect("reader");
        for conn in [&writer, &reader] {
            let sql = "SELECT id FROM t WHERE k = ?1 ORDER BY rowid LIMIT ?2";
            for (i, k) in ["a", "b", "c"].iter().enumerate() {
                let mut stmt = conn.prepare_cached(sql).expect("prepare");
                let ids: Vec<i64> = stmt
                    .query_map(rusqlite::params![k, 10], |r| r.get(0))
                    .expect("query")
                    .collect::<Result<_, _>>()
                    .expect("rows");
                assert!(ids.is_empty());
                let again = stmt.get_status(rusqlite::StatementStatus::RePrepare);
                assert_eq!(again, 0, "compiled again at run {i}");
            }
        }
    }

    #[test]
    fn migrations_run_once_and_files_are_private() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let path = data.join("x.sqlite3");
        let migrations = ["CREATE TABLE a (x);", "CREATE TABLE b (y);"];
        drop(open_writer(&path, &migrations).unwrap());
        let conn = open_writer(&path, &migrations).unwrap();
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, 2);
        assert_eq!(crate::fsmode::mode_of(&path).unwrap(), 0o600);
        assert_eq!(crate::fsmode::mode_of(&data).unwrap(), 0o700);
        let wal = data.join("x.sqlite3-wal");
        assert_eq!(crate::fsmode::mode_of(&wal).unwrap(), 0o600);
    }

    #[test]
    fn an_existing_folder_keeps_its_search_bits_and_loses_read_and_write() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("chat");
        std::fs::create_dir(&data).unwrap();
        let path = data.join("x.sqlite3");
        for (before, after) in [
            (0o711, 0o711),
            (0o755, 0o711),
            (0o777, 0o711),
            (0o750, 0o710),
        ] {
            std::fs::set_permissions(&data, std::fs::Permissions::from_mode(before)).unwrap();
            drop(open_writer(&path, &["CREATE TABLE IF NOT EXISTS a (x);"]).unwrap());
            assert_eq!(crate::fsmode::mode_of(&data).unwrap(), after, "{before:o}");
        }
    }

    #[test]
    fn newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.sqlite3");
        drop(open_writer(&path, &["CREATE TABLE a (x);", "CREATE TABLE b (y);"]).unwrap());
        let err = open_writer(&path, &["CREATE TABLE a (x);"]).unwrap_err();
        assert!(format!("{err:#}").contains("newer than this build"));
    }
}

/// A daemon's one writing connection behind a mutex, used from blocking
/// tasks so a slow disk never stalls the async threads.
#[derive(Clone)]
pub struct Writer {
    conn: std::sync::Arc<std::sync::Mutex<Connection>>,
}

impl Writer {
    /// Opens the file at `path` with `open_writer`.
    pub fn open(path: &Path, migrations: &[&str]) -> anyhow::Result<Writer> {
        let conn = open_writer(path, migrations)?;
        Ok(Writer {
            conn: std::sync::Arc::new(std::sync::Mutex::new(conn)),
        })
    }

    /// Runs `f` on the connection on a blocking thread.
    pub async fn call<T, F>(&self, f: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let conn = self.conn.clone();
        let joined = tokio::task::spawn_blocking(move || {
            // A panic while the lock was held left no half-done write: each
            // write is one statement or one transaction.
            let mut conn = lock(&conn);
            f(&mut conn)
        })
        .await?;
        Ok(joined?)
    }

    /// The same, on the caller's thread (start-up, tests, benchmarks).
    pub fn call_now<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        let mut conn = lock(&self.conn);
        f(&mut conn)
    }
}
