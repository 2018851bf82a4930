//! The search index's rows (`search_files`, `search_parts`, the trigram
//! table `search_text`), keyed by a version's sha-256. A workspace's files
//! are found through its manifest (`workspace_files`): a deleted file's
//! version is no longer in it, so it is no longer found.

use rusqlite::{params, Connection};

use crate::words::IndexState;

/// A version waiting to be indexed, with one path it has (its kind of
/// reading follows the name).
#[derive(Debug, Clone)]
pub struct Todo {
    pub sha: String,
    pub path: String,
}

/// Versions in some manifest that reader `reader` has not indexed, at most `max`.
pub fn todo(conn: &Connection, reader: u32, max: usize) -> rusqlite::Result<Vec<Todo>> {
    let mut stmt = conn.prepare_cached(
        "SELECT w.sha, MIN(w.path) FROM workspace_files w
         WHERE w.sha IS NOT NULL AND NOT EXISTS
             (SELECT 1 FROM search_files s WHERE s.sha = w.sha AND s.reader = ?1)
         GROUP BY w.sha LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![reader, max as i64], |r| {
        Ok(Todo {
            sha: r.get(0)?,
            path: r.get(1)?,
        })
    })?;
    rows.collect()
}

/// One indexed part: a page, a sheet, a slide or a run of lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartRow {
    /// "page 3", "sheet Costs"; `None` for a text file's lines.
    pub label: Option<String>,
    /// The line of the file's text (as read_file or read_document shows
    /// it) the part starts at, from 1.
    pub first_line: u64,
    pub body: String,
}

/// What indexing one version found.
#[derive(Debug, Clone)]
pub struct Entry {
    pub sha: String,
    pub state: IndexState,
    pub parts: Vec<PartRow>,
    /// Why only the name is searched, or what was left out.
    pub note: Option<String>,
}

impl Entry {
    pub fn chars(&self) -> u64 {
        self.parts.iter().map(|p| p.body.len() as u64).sum()
    }
}

/// Keeps `entry` for reader `reader`, replacing what an older reader kept.
pub fn put(conn: &Connection, entry: &Entry, reader: u32, now_unix: i64) -> rusqlite::Result<()> {
    remove_parts(conn, &entry.sha)?;
    conn.prepare_cached(
        "INSERT INTO search_files (sha, reader, state, chars, note, indexed_unix)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (sha) DO UPDATE SET reader = ?2, state = ?3, chars = ?4, note = ?5,
             indexed_unix = ?6",
    )?
    .execute(params![
        entry.sha,
        reader,
        entry.state,
        entry.chars() as i64,
        entry.note,
        now_unix
    ])?;
    for part in &entry.parts {
        conn.prepare_cached(
            "INSERT INTO search_parts (sha, label, first_line) VALUES (?1, ?2, ?3)",
        )?
        .execute(params![entry.sha, part.label, part.first_line as i64])?;
        let id = conn.last_insert_rowid();
        conn.prepare_cached("INSERT INTO search_text (rowid, body) VALUES (?1, ?2)")?
            .execute(params![id, part.body])?;
    }
    Ok(())
}

fn remove_parts(conn: &Connection, sha: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "DELETE FROM search_text WHERE rowid IN (SELECT id FROM search_parts WHERE sha = ?1)",
    )?
    .execute([sha])?;
    conn.prepare_cached("DELETE FROM search_parts WHERE sha = ?1")?
        .execute([sha])?;
    Ok(())
}

/// One file of a workspace as the index knows it.
#[derive(Debug, Clone)]
pub struct Listed {
    pub path: String,
    /// `None`: too big to keep, so never read (its name is searched).
    pub sha: Option<String>,
    /// `None`: not indexed yet.
    pub state: Option<IndexState>,
    pub chars: u64,
}

/// A workspace's files in path order, with what the index holds of each.
pub fn listed(conn: &Connection, workspace: &str, reader: u32) -> rusqlite::Result<Vec<Listed>> {
    let mut stmt = conn.prepare_cached(
        "SELECT w.path, w.sha, s.state, s.chars FROM workspace_files w
         LEFT JOIN search_files s ON s.sha = w.sha AND s.reader = ?2
         WHERE w.workspace = ?1 ORDER BY w.path",
    )?;
    let rows = stmt.query_map(params![workspace, reader], |r| {
        Ok(Listed {
            path: r.get(0)?,
            sha: r.get(1)?,
            state: r.get(2)?,
            chars: r.get::<_, Option<i64>>(3)?.unwrap_or(0).max(0) as u64,
        })
    })?;
    rows.collect()
}

/// How many versions of `workspace`'s files reader `reader` has not indexed yet.
pub fn pending(conn: &Connection, workspace: &str, reader: u32) -> rusqlite::Result<u64> {
    conn.prepare_cached(
        "SELECT COUNT(DISTINCT w.sha) FROM workspace_files w
         WHERE w.workspace = ?1 AND w.sha IS NOT NULL AND NOT EXISTS
             (SELECT 1 FROM search_files s WHERE s.sha = w.sha AND s.reader = ?2)",
    )?
    .query_row(params![workspace, reader], |r| r.get::<_, i64>(0))
    .map(|n| n.max(0) as u64)
}

/// A part that may match, with its file's version.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub sha: String,
    pub label: Option<String>,
    pub first_line: u64,
    pub body: String,
}

/// Calls `each` with the parts of `workspace`'s files that the trigram
/// query `fts` finds (`None`: every part, for a regular expression or
/// words too short for trigrams), in file then part order, until it
/// answers `false`.
pub fn candidates(
    conn: &Connection,
    workspace: &str,
    fts: Option<&str>,
    mut each: impl FnMut(Candidate) -> bool,
) -> rusqlite::Result<()> {
    let row = |r: &rusqlite::Row| -> rusqlite::Result<Candidate> {
        Ok(Candidate {
            sha: r.get(0)?,
            label: r.get(1)?,
            first_line: r.get::<_, i64>(2)?.max(1) as u64,
            body: r.get(3)?,
        })
    };
    // In id order either way: by the trigram table's rowid (the same id),
    // which it gives in order, so no match is sorted before the first row.
    let mut stmt;
    let mut rows = match fts {
        Some(query) => {
            stmt = conn.prepare_cached(
                "SELECT p.sha, p.label, p.first_line, t.body FROM search_text t
                 JOIN search_parts p ON p.id = t.rowid
                 WHERE search_text MATCH ?1
                   AND p.sha IN (SELECT sha FROM workspace_files WHERE workspace = ?2)
                 ORDER BY t.rowid",
            )?;
            stmt.query(params![query, workspace])?
        }
        None => {
            stmt = conn.prepare_cached(
                "SELECT p.sha, p.label, p.first_line, t.body FROM search_parts p
                 JOIN search_text t ON t.rowid = p.id
                 WHERE p.sha IN (SELECT sha FROM workspace_files WHERE workspace = ?1)
                 ORDER BY p.id",
            )?;
            stmt.query(params![workspace])?
        }
    };
    while let Some(r) = rows.next()? {
        if !each(row(r)?) {
            break;
        }
    }
    Ok(())
}

/// Drops what was indexed before `indexed_before` of versions no
/// workspace's file is any more (or by an older reader). Returns how many
/// versions went.
pub fn prune(conn: &Connection, indexed_before: i64, reader: u32) -> rusqlite::Result<usize> {
    let gone: Vec<String> = conn
        .prepare(
            "SELECT sha FROM search_files
             WHERE reader < ?2
                OR (indexed_unix < ?1
                    AND sha NOT IN (SELECT sha FROM workspace_files WHERE sha IS NOT NULL))",
        )?
        .query_map(params![indexed_before, reader], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for sha in &gone {
        remove_parts(conn, sha)?;
        conn.prepare_cached("DELETE FROM search_files WHERE sha = ?1")?
            .execute([sha])?;
    }
    Ok(gone.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let conn = tandem_shared::db::open_writer(
            &dir.path().join("chat.sqlite3"),
            crate::store::schema::MIGRATIONS,
        )
        .unwrap();
        (dir, conn)
    }

    fn file(conn: &Connection, path: &str, sha: &str) {
        conn.execute(
            "INSERT INTO workspace_files (workspace, path, size, mtime_ns, ino, sha)
             VALUES ('c', ?1, 1, 1, 1, ?2)",
            params![path, sha],
        )
        .unwrap();
    }

    fn entry(sha: &str, bodies: &[&str]) -> Entry {
        Entry {
            sha: sha.into(),
            state: IndexState::Text,
            parts: bodies
                .iter()
                .enumerate()
                .map(|(i, b)| PartRow {
                    label: Some(format!("page {}", i + 1)),
                    first_line: 1 + 10 * i as u64,
                    body: b.to_string(),
                })
                .collect(),
            note: None,
        }
    }

    fn found(conn: &Connection, fts: Option<&str>) -> Vec<(String, Option<String>)> {
        let mut out = Vec::new();
        candidates(conn, "c", fts, |c| {
            out.push((c.sha, c.label));
            true
        })
        .unwrap();
        out
    }

    #[test]
    fn a_word_is_found_in_its_part_of_a_file_the_workspace_still_has() {
        let (_dir, conn) = conn();
        file(&conn, "a.pdf", "s1");
        file(&conn, "b.txt", "s2");
        put(&conn, &entry("s1", &["nothing", "the ACME invoice"]), 1, 10).unwrap();
        put(&conn, &entry("s2", &["acme"]), 1, 10).unwrap();
        put(&conn, &entry("s3", &["acme invoice too"]), 1, 10).unwrap();
        assert_eq!(
            found(&conn, Some("\"acme\" AND \"invoice\"")),
            [("s1".to_string(), Some("page 2".to_string()))]
        );
        assert_eq!(found(&conn, None).len(), 3);
        assert_eq!(todo(&conn, 1, 10).unwrap().len(), 0);
        assert_eq!(todo(&conn, 2, 10).unwrap().len(), 2);
        // Indexed again: the old parts go.
        put(&conn, &entry("s1", &["other"]), 2, 20).unwrap();
        assert_eq!(found(&conn, Some("\"invoice\"")), []);
        conn.execute("DELETE FROM workspace_files WHERE path = 'b.txt'", [])
            .unwrap();
        // s2 and s3 are in no workspace and old; s1 is held.
        assert_eq!(prune(&conn, 15, 1).unwrap(), 2);
        let parts: i64 = conn
            .query_row("SELECT COUNT(*) FROM search_text", [], |r| r.get(0))
            .unwrap();
        assert_eq!(parts, 1);
        let listed = listed(&conn, "c", 2).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].state, Some(IndexState::Text));
        assert_eq!(listed[0].chars, 5);
    }
}
