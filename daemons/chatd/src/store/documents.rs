//! The rows of documents read into text (`document_texts`), keyed by the
//! content's sha-256 and the kind it was read as.

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
