//! File history's rows: change sets (`file_sets`), the paths each touched
//! (`file_changes`) and every workspace's manifest (`workspace_files`).
//! The writes run in writer jobs; the reads take any connection.

use std::collections::HashMap;

use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;
use serde_json::json;
use tandem_shared::http::ApiError;

use super::Ctx;
use crate::history::scan::{Change, Seen};
use crate::kinds::EventKind;
use crate::words::{FileOp, FileOrigin};

/// Who made a change set, and for what.
#[derive(Debug, Clone)]
pub struct Author {
    pub conversation_id: String,
    pub run_id: Option<String>,
    pub call_id: Option<String>,
    pub origin: FileOrigin,
    /// The sets an undo put back (a turn's: several).
    pub undoes: Vec<i64>,
}

/// A scan's finding, to be kept as one change set.
pub struct NewSet<'a> {
    /// The manifest's workspace: a chat's id, or `shared`.
    pub workspace: &'a str,
    pub author: &'a Author,
    pub changes: &'a [Change],
    pub manifest: &'a [(String, Option<Seen>)],
    pub note: Option<&'a str>,
}

/// Writes the manifest's new rows and, when something changed, the change
/// set and a `files` event. Returns the set's rev.
pub fn record(ctx: &mut Ctx, set: &NewSet) -> Result<Option<i64>, ApiError> {
    let conn = ctx.conn();
    for (path, row) in set.manifest {
        match row {
            Some(seen) => {
                conn.prepare_cached(
                    "INSERT INTO workspace_files (workspace, path, size, mtime_ns, ino, sha) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (workspace, path) DO UPDATE \
                     SET size = ?3, mtime_ns = ?4, ino = ?5, sha = ?6",
                )?
                // SQLite keeps i64: an inode past i64::MAX reads back the same bits.
                .execute(params![
                    set.workspace,
                    path,
                    seen.size,
                    seen.mtime_ns,
                    seen.ino as i64,
                    seen.sha
                ])?;
            }
            None => {
                conn.prepare_cached(
                    "DELETE FROM workspace_files WHERE workspace = ?1 AND path = ?2",
                )?
                .execute(params![set.workspace, path])?;
            }
        }
    }
    if set.changes.is_empty() {
        return Ok(None);
    }
    let author = set.author;
    conn.execute(
        "INSERT INTO file_sets (conversation_id, workspace, run_id, call_id, origin, note, created, created_unix) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![author.conversation_id, set.workspace, author.run_id, author.call_id, author.origin,
                set.note, tandem_shared::time::now_rfc3339(), tandem_shared::time::now_unix()],
    )?;
    let rev = conn.last_insert_rowid();
    for undone in &author.undoes {
        conn.prepare_cached("INSERT OR IGNORE INTO file_undoes (rev, undone) VALUES (?1, ?2)")?
            .execute(params![rev, undone])?;
    }
    for c in set.changes {
        conn.prepare_cached(
            "INSERT INTO file_changes (rev, path, op, from_path, before_sha, after_sha, size) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?
        .execute(params![
            rev,
            c.path,
            c.op,
            c.from,
            c.before,
            c.after,
            c.size as i64
        ])?;
    }
    ctx.emit(
        &author.conversation_id,
        EventKind::Files,
        json!({"rev": rev, "origin": author.origin, "changes": set.changes.len(),
               "run_id": author.run_id, "call_id": author.call_id}),
    )?;
    Ok(Some(rev))
}

/// The manifest's rows of a workspace: all of them, or those of `paths`.
pub fn manifest(
    conn: &Connection,
    workspace: &str,
    paths: Option<&[String]>,
) -> Result<HashMap<String, Seen>, ApiError> {
    let row = |r: &rusqlite::Row| -> rusqlite::Result<(String, Seen)> {
        Ok((
            r.get(0)?,
            Seen {
                size: r.get(1)?,
                mtime_ns: r.get(2)?,
                ino: r.get::<_, i64>(3)? as u64,
                sha: r.get(4)?,
            },
        ))
    };
    let mut out = HashMap::new();
    match paths {
        None => {
            let mut stmt = conn.prepare_cached(
                "SELECT path, size, mtime_ns, ino, sha FROM workspace_files WHERE workspace = ?1",
            )?;
            for r in stmt.query_map([workspace], row)? {
                let (path, seen) = r?;
                out.insert(path, seen);
            }
        }
        Some(paths) => {
            let mut stmt = conn.prepare_cached(
                "SELECT path, size, mtime_ns, ino, sha FROM workspace_files WHERE workspace = ?1 AND path = ?2",
            )?;
            for path in paths {
                if let Some((p, seen)) = stmt.query_row(params![workspace, path], row).optional()? {
                    out.insert(p, seen);
                }
            }
        }
    }
    Ok(out)
}

/// One change set as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct SetRow {
    pub rev: i64,
    pub run_id: Option<String>,
    pub call_id: Option<String>,
    pub origin: FileOrigin,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub undoes: Vec<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    pub created: String,
    #[serde(skip)]
    pub workspace: String,
    pub changes: Vec<ChangeRow>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChangeRow {
    pub path: String,
    pub op: FileOp,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    pub before: Option<String>,
    pub after: Option<String>,
    pub size: i64,
}

const SET_COLUMNS: &str = "rev, run_id, call_id, origin, note, created, workspace";

fn set_row(r: &rusqlite::Row) -> rusqlite::Result<SetRow> {
    Ok(SetRow {
        rev: r.get(0)?,
        run_id: r.get(1)?,
        call_id: r.get(2)?,
        origin: r.get(3)?,
        undoes: Vec::new(),
        note: r.get(4)?,
        created: r.get(5)?,
        workspace: r.get(6)?,
        changes: Vec::new(),
    })
}

fn with_changes(conn: &Connection, mut sets: Vec<SetRow>) -> Result<Vec<SetRow>, ApiError> {
    let mut stmt = conn.prepare_cached(
        "SELECT path, op, from_path, before_sha, after_sha, size FROM file_changes WHERE rev = ?1 ORDER BY path",
    )?;
    let mut undone =
        conn.prepare_cached("SELECT undone FROM file_undoes WHERE rev = ?1 ORDER BY undone")?;
    for set in &mut sets {
        set.undoes = undone
            .query_map([set.rev], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        set.changes = stmt
            .query_map([set.rev], |r| {
                Ok(ChangeRow {
                    path: r.get(0)?,
                    op: r.get(1)?,
                    from: r.get(2)?,
                    before: r.get(3)?,
                    after: r.get(4)?,
                    size: r.get(5)?,
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
    }
    Ok(sets)
}

/// A chat's change set `rev`; 404 when it is not this chat's.
pub fn set(conn: &Connection, conversation_id: &str, rev: i64) -> Result<SetRow, ApiError> {
    let found = conn
        .query_row(
            &format!("SELECT {SET_COLUMNS} FROM file_sets WHERE rev = ?1 AND conversation_id = ?2"),
            params![rev, conversation_id],
            set_row,
        )
        .optional()?
        .ok_or_else(|| ApiError::not_found("change set", &rev.to_string()))?;
    Ok(with_changes(conn, vec![found])?.remove(0))
}

/// The change sets of one run of the chat, oldest first; 404 when it made none.
pub fn sets_of_run(
    conn: &Connection,
    conversation_id: &str,
    run_id: &str,
) -> Result<Vec<SetRow>, ApiError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {SET_COLUMNS} FROM file_sets WHERE run_id = ?1 AND conversation_id = ?2 AND origin != 'outside' ORDER BY rev"
    ))?;
    let sets = stmt
        .query_map(params![run_id, conversation_id], set_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    if sets.is_empty() {
        return Err(ApiError::not_found("run with file changes", run_id));
    }
    with_changes(conn, sets)
}

/// A chat's change sets, newest first, at most `limit`, before `before` when given.
pub fn sets(
    conn: &Connection,
    conversation_id: &str,
    before: Option<i64>,
    limit: usize,
) -> Result<Vec<SetRow>, ApiError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {SET_COLUMNS} FROM file_sets WHERE conversation_id = ?1 AND rev < ?2 ORDER BY rev DESC LIMIT ?3"
    ))?;
    let sets = stmt
        .query_map(
            params![conversation_id, before.unwrap_or(i64::MAX), limit as i64],
            set_row,
        )?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    with_changes(conn, sets)
}

/// One path's history in a chat, newest first: the sets that touched it
/// (as itself, or as the old path of a move).
pub fn path_history(
    conn: &Connection,
    conversation_id: &str,
    path: &str,
) -> Result<Vec<SetRow>, ApiError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {SET_COLUMNS} FROM file_sets WHERE conversation_id = ?1 AND rev IN \
         (SELECT rev FROM file_changes WHERE path = ?2 OR from_path = ?2) ORDER BY rev DESC LIMIT 500"
    ))?;
    let sets = stmt
        .query_map(params![conversation_id, path], set_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    with_changes(conn, sets)
}

/// One of the newest files a chat's sets touched that is there now.
#[derive(Debug, Clone)]
pub struct Recent {
    pub path: String,
    pub size: u64,
    /// Who changed it last.
    pub origin: FileOrigin,
}

/// The chat's files that are there now, newest change first: at most
/// `limit` of them, and how many there are in all.
pub fn recent(
    conn: &Connection,
    conversation_id: &str,
    workspace: &str,
    limit: usize,
) -> Result<(Vec<Recent>, usize), ApiError> {
    let mut stmt = conn.prepare_cached(
        "SELECT c.path, MAX(s.rev) AS newest, w.size FROM file_changes c \
         JOIN file_sets s ON s.rev = c.rev \
         JOIN workspace_files w ON w.workspace = ?2 AND w.path = c.path \
         WHERE s.conversation_id = ?1 GROUP BY c.path ORDER BY newest DESC",
    )?;
    let rows: Vec<(String, i64, i64)> = stmt
        .query_map(params![conversation_id, workspace], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let total = rows.len();
    let mut origin = conn.prepare_cached("SELECT origin FROM file_sets WHERE rev = ?1")?;
    let mut out = Vec::with_capacity(limit.min(total));
    for (path, rev, size) in rows.into_iter().take(limit) {
        out.push(Recent {
            path,
            size: size.max(0) as u64,
            origin: origin.query_row([rev], |r| r.get(0))?,
        });
    }
    Ok((out, total))
}

/// The newest change set that touched `path` in a workspace (any chat of
/// it): the version an upload's `base` must name to replace the file.
pub fn newest_rev_of(
    conn: &Connection,
    workspace: &str,
    path: &str,
) -> Result<Option<i64>, ApiError> {
    let rev = conn
        .prepare_cached(
            "SELECT MAX(c.rev) FROM file_changes c JOIN file_sets s ON s.rev = c.rev \
             WHERE s.workspace = ?1 AND (c.path = ?2 OR c.from_path = ?2)",
        )?
        .query_row(params![workspace, path], |r| r.get(0))?;
    Ok(rev)
}

/// Every path a chat's change sets touched, with the newest set touching it.
pub fn touched(conn: &Connection, conversation_id: &str) -> Result<Vec<Touched>, ApiError> {
    let mut stmt = conn.prepare_cached(
        "SELECT c.path, MAX(s.rev) FROM file_changes c JOIN file_sets s ON s.rev = c.rev \
         WHERE s.conversation_id = ?1 GROUP BY c.path ORDER BY c.path",
    )?;
    let paths: Vec<(String, i64)> = stmt
        .query_map([conversation_id], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut first = conn.prepare_cached(
        "SELECT s.origin, s.run_id FROM file_changes c JOIN file_sets s ON s.rev = c.rev \
         WHERE s.conversation_id = ?1 AND c.path = ?2 ORDER BY s.rev LIMIT 1",
    )?;
    let mut last = conn.prepare_cached(
        "SELECT s.run_id, s.created, c.op FROM file_changes c JOIN file_sets s ON s.rev = c.rev \
         WHERE s.rev = ?1 AND c.path = ?2",
    )?;
    let mut out = Vec::with_capacity(paths.len());
    for (path, rev) in paths {
        let (origin, _): (FileOrigin, Option<String>) = first
            .query_row(params![conversation_id, path], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?;
        let (run_id, changed, op): (Option<String>, String, FileOp) = last
            .query_row(params![rev, path], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?;
        out.push(Touched {
            path,
            rev,
            origin,
            run_id,
            changed,
            op,
        });
    }
    Ok(out)
}

/// A path some change set of a chat touched.
#[derive(Debug, Clone)]
pub struct Touched {
    pub path: String,
    /// The newest set that touched it.
    pub rev: i64,
    /// Who first brought it: `outside` (given), `user` (sent), `tool`/`command` (made).
    pub origin: FileOrigin,
    /// The run of the newest set.
    pub run_id: Option<String>,
    pub changed: String,
    /// What the newest set did to it.
    pub op: FileOp,
}

/// Whether a result of the run already holds `line_start` (the nudge about `work/`).
pub fn run_was_nudged(conn: &Connection, run_id: &str, line_start: &str) -> Result<bool, ApiError> {
    let pattern = format!("%{line_start}%");
    Ok(conn
        .prepare_cached(
            "SELECT 1 FROM messages WHERE run_id = ?1 AND role = 'tool' AND text LIKE ?2 LIMIT 1",
        )?
        .exists(params![run_id, pattern])?)
}

/// A file deleted and not made again: its last change is a deletion whose
/// bytes are kept.
#[derive(Debug, Clone, Serialize)]
pub struct TrashRow {
    pub path: String,
    /// The deletion's set.
    pub rev: i64,
    pub size: i64,
    pub deleted: String,
    #[serde(skip)]
    pub deleted_unix: i64,
    /// Who deleted it: `tool`, `command`, `user`, `outside`.
    pub origin: FileOrigin,
    /// The run that deleted it.
    pub turn: Option<String>,
    #[serde(skip)]
    pub sha: String,
}

/// A chat's trash: every path whose newest change is a deletion, newest first.
pub fn trash(conn: &Connection, conversation_id: &str) -> Result<Vec<TrashRow>, ApiError> {
    let mut stmt = conn.prepare_cached(
        "SELECT c.path, c.rev, c.size, s.created, s.created_unix, s.origin, s.run_id, c.before_sha \
         FROM file_changes c JOIN file_sets s ON s.rev = c.rev \
         WHERE s.conversation_id = ?1 AND c.op = 'deleted' AND c.before_sha IS NOT NULL \
         AND c.rev = (SELECT MAX(c2.rev) FROM file_changes c2 JOIN file_sets s2 ON s2.rev = c2.rev \
                      WHERE s2.workspace = s.workspace AND (c2.path = c.path OR c2.from_path = c.path)) \
         ORDER BY c.rev DESC",
    )?;
    let rows = stmt
        .query_map([conversation_id], |r| {
            Ok(TrashRow {
                path: r.get(0)?,
                rev: r.get(1)?,
                size: r.get(2)?,
                deleted: r.get(3)?,
                deleted_unix: r.get(4)?,
                origin: r.get(5)?,
                turn: r.get(6)?,
                sha: r.get(7)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// The chats with a deletion older than `cutoff_unix` (housekeeping's trash purge).
pub fn chats_with_old_deletions(
    conn: &Connection,
    cutoff_unix: i64,
) -> Result<Vec<String>, ApiError> {
    let mut stmt = conn.prepare_cached(
        "SELECT DISTINCT s.conversation_id FROM file_changes c JOIN file_sets s ON s.rev = c.rev \
         WHERE c.op = 'deleted' AND s.created_unix < ?1",
    )?;
    let rows = stmt
        .query_map([cutoff_unix], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// Of `shas`, those still needed: named by a change of any other path than
/// `paths` of `workspace` (another workspace's too), or by a manifest.
pub fn shas_in_use(
    conn: &Connection,
    shas: &[String],
    workspace: &str,
    paths: &[String],
) -> Result<std::collections::HashSet<String>, ApiError> {
    let mut used = std::collections::HashSet::new();
    let mut by_change = conn.prepare_cached(
        "SELECT s.workspace, c.path, c.from_path FROM file_changes c JOIN file_sets s ON s.rev = c.rev \
         WHERE c.before_sha = ?1 OR c.after_sha = ?1",
    )?;
    let mut by_manifest =
        conn.prepare_cached("SELECT 1 FROM workspace_files WHERE sha = ?1 LIMIT 1")?;
    let ours = |ws: &str, path: &str| ws == workspace && paths.iter().any(|p| p == path);
    for sha in shas {
        let others = by_change
            .query_map([sha], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, Option<String>>(2)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?
            .into_iter()
            .any(|(ws, path, from)| !ours(&ws, &path) || from.is_some_and(|f| !ours(&ws, &f)));
        if others || by_manifest.exists([sha])? {
            used.insert(sha.clone());
        }
    }
    Ok(used)
}

/// Every version a chat's history kept of `paths`.
pub fn shas_of_paths(
    conn: &Connection,
    conversation_id: &str,
    paths: &[String],
) -> Result<Vec<String>, ApiError> {
    let mut stmt = conn.prepare_cached(
        "SELECT c.before_sha, c.after_sha FROM file_changes c JOIN file_sets s ON s.rev = c.rev \
         WHERE s.conversation_id = ?1 AND (c.path = ?2 OR c.from_path = ?2)",
    )?;
    let mut out = std::collections::BTreeSet::new();
    for path in paths {
        for pair in stmt.query_map(params![conversation_id, path], |r| {
            Ok((
                r.get::<_, Option<String>>(0)?,
                r.get::<_, Option<String>>(1)?,
            ))
        })? {
            let (before, after) = pair?;
            out.extend(before);
            out.extend(after);
        }
    }
    Ok(out.into_iter().collect())
}
