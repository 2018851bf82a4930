//! The rows of documents read into text (`document_texts`), keyed by the
//! content's sha-256 and the kind it was read as; a voice note's transcript
//! is such a row too, of its own kind ([`TRANSCRIPT`]).

use rusqlite::{params, Connection, OptionalExtension};

use crate::documents::formats::{DocKind, Extracted};

/// A document as it was read: its text, or why it could not be.
#[derive(Debug, Clone)]
pub enum Kept {
    Read(Extracted),
    Failed(String),
}

fn kind_word(kind: DocKind) -> String {
    // serde names it: the same word the reader's protocol uses.
    serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// What reader `reader` made of `sha` read as `kind`, if it was read.
pub fn get(
    conn: &Connection,
    sha: &str,
    kind: DocKind,
    reader: u32,
) -> rusqlite::Result<Option<Kept>> {
    let row = conn
        .query_row(
            "SELECT text, parts, notes, failure FROM document_texts
             WHERE sha = ?1 AND kind = ?2 AND reader = ?3",
            params![sha, kind_word(kind), reader],
            |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, Option<String>>(3)?,
                ))
            },
        )
        .optional()?;
    Ok(row.and_then(|(text, parts, notes, failure)| match failure {
        Some(cause) => Some(Kept::Failed(cause)),
        // A row that does not parse (written by another version) is a miss.
        None => Some(Kept::Read(Extracted {
            text,
            parts: serde_json::from_str(&parts).ok()?,
            notes: serde_json::from_str(&notes).ok()?,
        })),
    }))
}

/// Keeps what reader `reader` made of `sha` as `kind`.
pub fn put(
    conn: &Connection,
    sha: &str,
    kind: DocKind,
    reader: u32,
    kept: &Kept,
    now_unix: i64,
) -> rusqlite::Result<()> {
    let (text, parts, notes, failure) = match kept {
        Kept::Read(e) => (
            e.text.as_str(),
            serde_json::to_string(&e.parts).unwrap_or_else(|_| "[]".into()),
            serde_json::to_string(&e.notes).unwrap_or_else(|_| "[]".into()),
            None,
        ),
        Kept::Failed(cause) => ("", "[]".into(), "[]".into(), Some(cause.as_str())),
    };
    conn.execute(
        "INSERT INTO document_texts (sha, kind, reader, text, parts, notes, failure, read_unix)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
         ON CONFLICT (sha, kind) DO UPDATE SET reader = ?3, text = ?4, parts = ?5,
             notes = ?6, failure = ?7, read_unix = ?8",
        params![
            sha,
            kind_word(kind),
            reader,
            text,
            parts,
            notes,
            failure,
            now_unix
        ],
    )?;
    Ok(())
}

/// The kind of a voice note's transcript row.
pub const TRANSCRIPT: &str = "transcript";

/// The transcript kept for the audio of `sha`, if it was transcribed.
pub fn transcript(conn: &Connection, sha: &str) -> rusqlite::Result<Option<String>> {
    conn.query_row(
        "SELECT text FROM document_texts WHERE sha = ?1 AND kind = ?2 AND failure IS NULL",
        params![sha, TRANSCRIPT],
        |r| r.get(0),
    )
    .optional()
}

/// Keeps the transcript of the audio of `sha` (as `reader`'s, so the
/// prune of old readers' rows treats it like a document's).
pub fn put_transcript(
    conn: &Connection,
    sha: &str,
    text: &str,
    reader: u32,
    now_unix: i64,
) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO document_texts (sha, kind, reader, text, parts, notes, failure, read_unix)
         VALUES (?1, ?2, ?3, ?4, '[]', '[]', NULL, ?5)
         ON CONFLICT (sha, kind) DO UPDATE SET reader = ?3, text = ?4, parts = '[]',
             notes = '[]', failure = NULL, read_unix = ?5",
        params![sha, TRANSCRIPT, reader, text, now_unix],
    )?;
    Ok(())
}

/// Drops what was read, before `read_before`, of contents no file of a
/// workspace and no kept version is any more (or by an older reader): they
/// are read again if they come back. Returns how many rows went.
pub fn prune(conn: &Connection, read_before: i64, reader: u32) -> rusqlite::Result<usize> {
    conn.execute(
        "DELETE FROM document_texts
         WHERE reader < ?2
            OR (read_unix < ?1
                AND sha NOT IN (SELECT sha FROM workspace_files WHERE sha IS NOT NULL)
                AND sha NOT IN (SELECT after_sha FROM file_changes WHERE after_sha IS NOT NULL))",
        params![read_before, reader],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_of_contents_no_file_holds_go_and_the_rest_stay() {
        let dir = tempfile::tempdir().unwrap();
        let conn = tandem_shared::db::open_writer(
            &dir.path().join("chat.sqlite3"),
            crate::store::schema::MIGRATIONS,
        )
        .unwrap();
        let text = Kept::Read(Extracted {
            text: "## Page 1\n".into(),
            parts: Vec::new(),
            notes: Vec::new(),
        });
        for sha in ["held", "kept", "gone", "fresh"] {
            put(&conn, sha, DocKind::Pdf, 1, &text, 100).unwrap();
        }
        put(&conn, "fresh", DocKind::Pdf, 1, &text, 5_000).unwrap();
        put(&conn, "old", DocKind::Pdf, 0, &text, 5_000).unwrap();
        conn.execute(
            "INSERT INTO workspace_files (workspace, path, size, mtime_ns, ino, sha)
             VALUES ('c', 'a.pdf', 1, 1, 1, 'held')",
            [],
        )
        .unwrap();
        conn.execute_batch(
            "INSERT INTO conversations (id, title, model, created, updated) VALUES ('c', 't', 'm', 'x', 'x');
             INSERT INTO file_sets (rev, conversation_id, workspace, origin, created, created_unix)
             VALUES (1, 'c', 'c', 'user', 'x', 1);
             INSERT INTO file_changes (rev, path, op, after_sha, size) VALUES (1, 'b.pdf', 'created', 'kept', 1);",
        )
        .unwrap();
        assert_eq!(prune(&conn, 1_000, 1).unwrap(), 2);
        let left: Vec<String> = conn
            .prepare("SELECT sha FROM document_texts ORDER BY sha")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(left, ["fresh", "held", "kept"]);
    }
}
