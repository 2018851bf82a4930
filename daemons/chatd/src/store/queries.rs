//! Reads shared by the API (on read connections) and by write jobs (inside
//! the writer's transaction): both hold a `&Connection`.

use std::collections::HashMap;
use std::sync::Arc;

use rusqlite::{params, Connection, OptionalExtension};
use tandem_shared::http::ApiError;

use crate::events::Event;
use crate::kinds::EventKind;
use crate::model::*;
use crate::words::{PendingState, RunStatus};

/// Whether a trashed conversation counts as found.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Trashed {
    Include,
    Exclude,
}

pub fn conversation(
    conn: &Connection,
    id: &str,
    trashed: Trashed,
) -> Result<Conversation, ApiError> {
    let found = conn
        .prepare_cached(&format!(
            "SELECT {CONVERSATION_COLUMNS} FROM conversations WHERE id = ?1"
        ))?
        .query_row([id], Conversation::from_row)
        .optional()?;
    match found {
        Some(c) if c.deleted.is_none() || trashed == Trashed::Include => Ok(c),
        _ => Err(ApiError::not_found("conversation", id)),
    }
}

pub fn message(conn: &Connection, conversation_id: &str, id: &str) -> Result<Message, ApiError> {
    conn.prepare_cached(&format!(
        "SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = ?1 AND conversation_id = ?2"
    ))?
    .query_row([id, conversation_id], Message::from_row)
    .optional()?
    .ok_or_else(|| ApiError::not_found("message", id))
}

/// The messages from the root to `leaf`, oldest first.
pub fn path_to(
    conn: &Connection,
    conversation_id: &str,
    leaf: Option<&str>,
) -> Result<Vec<Message>, ApiError> {
    let Some(leaf) = leaf else {
        return Ok(Vec::new());
    };
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ?1"
    ))?;
    let mut all: HashMap<String, Message> = stmt
        .query_map([conversation_id], Message::from_row)?
        .map(|m| m.map(|m| (m.id.clone(), m)))
        .collect::<Result<_, _>>()?;
    let mut path = Vec::new();
    let mut next = Some(leaf.to_string());
    while let Some(id) = next {
        let Some(message) = all.remove(&id) else {
            break;
        };
        next = message.parent_id.clone();
        path.push(message);
    }
    path.reverse();
    Ok(path)
}

/// The transcript: the active path of the conversation.
pub fn transcript(
    conn: &Connection,
    conversation: &Conversation,
) -> Result<Vec<Message>, ApiError> {
    path_to(conn, &conversation.id, conversation.head_id.as_deref())
}

pub fn runs(conn: &Connection, conversation_id: &str) -> Result<Vec<Run>, ApiError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {RUN_COLUMNS} FROM runs WHERE conversation_id = ?1 ORDER BY rowid"
    ))?;
    let runs = stmt
        .query_map([conversation_id], Run::from_row)?
        .collect::<Result<_, _>>()?;
    Ok(runs)
}

pub fn run(conn: &Connection, run_id: &str) -> Result<Run, ApiError> {
    conn.prepare_cached(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1"))?
        .query_row([run_id], Run::from_row)
        .optional()?
        .ok_or_else(|| ApiError::not_found("run", run_id))
}

/// The conversation's queued, running or waiting run, if any.
pub fn active_run(conn: &Connection, conversation_id: &str) -> Result<Option<Run>, ApiError> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE conversation_id = ?1 \
             AND status IN (?2, ?3, ?4) ORDER BY rowid DESC LIMIT 1"
        ))?
        .query_row(
            params![
                conversation_id,
                RunStatus::Queued,
                RunStatus::Running,
                RunStatus::Waiting
            ],
            Run::from_row,
        )
        .optional()?)
}

/// Which of `call_ids` began in the chat (`tool.started` is in its log).
pub fn calls_begun(
    conn: &Connection,
    conversation_id: &str,
    call_ids: &[String],
) -> Result<Vec<String>, ApiError> {
    let mut stmt = conn.prepare_cached(
        "SELECT 1 FROM events WHERE conversation_id = ?1 AND kind = ?2 \
         AND json_extract(data, '$.call_id') = ?3 LIMIT 1",
    )?;
    let mut begun = Vec::new();
    for id in call_ids {
        let found = stmt
            .query_row(params![conversation_id, EventKind::ToolStarted, id], |_| {
                Ok(())
            })
            .optional()?;
        if found.is_some() {
            begun.push(id.clone());
        }
    }
    Ok(begun)
}

/// The last run of the conversation, whatever its status.
pub fn last_run(conn: &Connection, conversation_id: &str) -> Result<Option<Run>, ApiError> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE conversation_id = ?1 ORDER BY rowid DESC LIMIT 1"
        ))?
        .query_row([conversation_id], Run::from_row)
        .optional()?)
}

pub fn waiting(conn: &Connection, conversation_id: &str) -> Result<Vec<Pending>, ApiError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {PENDING_COLUMNS} FROM pending WHERE conversation_id = ?1 AND state = ?2 ORDER BY rowid"
    ))?;
    let pending = stmt
        .query_map(
            params![conversation_id, PendingState::Waiting],
            Pending::from_row,
        )?
        .collect::<Result<_, _>>()?;
    Ok(pending)
}

pub fn pending(conn: &Connection, conversation_id: &str, id: &str) -> Result<Pending, ApiError> {
    conn.prepare_cached(&format!(
        "SELECT {PENDING_COLUMNS} FROM pending WHERE id = ?1 AND conversation_id = ?2"
    ))?
    .query_row([id, conversation_id], Pending::from_row)
    .optional()?
    .ok_or_else(|| ApiError::not_found("pending message", id))
}

/// A consistent snapshot: one read transaction, so `seq` names exactly the
/// last event whose effect the records include.
pub fn snapshot(conn: &Connection, id: &str) -> Result<Snapshot, ApiError> {
    conn.execute_batch("BEGIN")?;
    let result = (|| {
        let conversation = conversation(conn, id, Trashed::Include)?;
        let messages = transcript(conn, &conversation)?;
        let runs = runs(conn, id)?;
        let pending = waiting(conn, id)?;
        let consents = open_consents(conn, id)?;
        let answered = answered_consents(conn, id)?;
        let seq = conversation.last_seq;
        let goal = goal(conn, id)?;
        let loops = loops(conn, id)?;
        Ok(Snapshot {
            conversation,
            messages,
            runs,
            pending,
            consents,
            answered,
            goal,
            loops,
            seq,
        })
    })();
    let _ = conn.execute_batch("COMMIT");
    result
}

/// The chat's loops, oldest first.
pub fn loops(conn: &Connection, conversation_id: &str) -> Result<Vec<Loop>, ApiError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {LOOP_COLUMNS} FROM loops WHERE conversation_id = ?1 ORDER BY rowid"
    ))?;
    let rows = stmt.query_map([conversation_id], Loop::from_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The chat's goal, if it has one.
pub fn goal(conn: &Connection, conversation_id: &str) -> Result<Option<Goal>, ApiError> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {GOAL_COLUMNS} FROM goals WHERE conversation_id = ?1"
        ))?
        .query_row([conversation_id], Goal::from_row)
        .optional()?)
}

/// The unanswered consent cards of the chat's live (waiting) run, and
/// egressd's cards still open (their run goes on while a command waits;
/// egressd closes them).
pub fn open_consents(conn: &Connection, conversation_id: &str) -> Result<Vec<Consent>, ApiError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {CONSENT_COLUMNS} FROM consents c WHERE conversation_id = ?1 AND decision IS NULL \
         AND (c.tool = 'egress' OR EXISTS (SELECT 1 FROM runs r WHERE r.id = c.run_id AND r.status = ?2)) \
         ORDER BY rowid"
    ))?;
    let rows = stmt.query_map(
        params![conversation_id, RunStatus::Waiting],
        Consent::from_row,
    )?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Answered cards a snapshot carries at most (a long chat's older ones
/// are in its events).
pub const ANSWERED_SHOWN: usize = 200;

/// The chat's newest answered cards, oldest first.
pub fn answered_consents(
    conn: &Connection,
    conversation_id: &str,
) -> Result<Vec<Consent>, ApiError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {CONSENT_COLUMNS} FROM consents WHERE conversation_id = ?1 AND decision IS NOT NULL \
         ORDER BY rowid DESC LIMIT ?2"
    ))?;
    let rows = stmt.query_map(
        params![conversation_id, ANSWERED_SHOWN as i64],
        Consent::from_row,
    )?;
    let mut cards: Vec<Consent> = rows.collect::<Result<_, _>>()?;
    cards.reverse();
    Ok(cards)
}

/// The card asked for one tool call of a run, if any.
pub fn consent_for_call(
    conn: &Connection,
    conversation_id: &str,
    run_id: &str,
    call_id: &str,
) -> Result<Option<Consent>, ApiError> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {CONSENT_COLUMNS} FROM consents WHERE conversation_id = ?1 AND run_id = ?2 AND call_id = ?3"
        ))?
        .query_row([conversation_id, run_id, call_id], Consent::from_row)
        .optional()?)
}

/// One card by its id.
pub fn consent(
    conn: &Connection,
    conversation_id: &str,
    card_id: &str,
) -> Result<Consent, ApiError> {
    conn.prepare_cached(&format!(
        "SELECT {CONSENT_COLUMNS} FROM consents WHERE conversation_id = ?1 AND id = ?2"
    ))?
    .query_row([conversation_id, card_id], Consent::from_row)
    .optional()?
    .ok_or_else(|| ApiError::not_found("consent card", card_id))
}

/// The permission rules that apply in a chat: its own and every chat's.
pub fn rules(
    conn: &Connection,
    conversation_id: &str,
) -> Result<Vec<(String, String, String)>, ApiError> {
    let mut stmt = conn.prepare_cached(
        "SELECT tool, pattern, verdict FROM rules WHERE conversation_id = ?1 OR conversation_id IS NULL ORDER BY rowid",
    )?;
    let rows = stmt.query_map([conversation_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Events after `after`, oldest first, at most `limit`.
pub fn events_after(
    conn: &Connection,
    conversation_id: &str,
    after: i64,
    limit: usize,
) -> Result<Vec<Arc<Event>>, ApiError> {
    let mut stmt = conn.prepare_cached(
        "SELECT seq, kind, data FROM events WHERE conversation_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
    )?;
    let rows = stmt.query_map(params![conversation_id, after, limit as i64], |row| {
        let kind: String = row.get(1)?;
        Ok((row.get::<_, i64>(0)?, kind, row.get::<_, String>(2)?))
    })?;
    let mut events = Vec::new();
    for row in rows {
        let (seq, kind, data) = row?;
        // Only kinds of `EventKind` are ever written; a row with another
        // (a damaged file) is left out, and the device past the hole resets.
        match EventKind::parse(&kind) {
            Some(kind) => events.push(Arc::new(Event::new(
                conversation_id.to_string(),
                seq,
                kind,
                data,
            ))),
            None => tracing::error!(
                conversation = conversation_id,
                seq,
                "a stored event has a kind chatd does not write; left out"
            ),
        }
    }
    Ok(events)
}

/// The oldest kept event's seq (events older than it were dropped).
pub fn first_kept_seq(conn: &Connection, conversation_id: &str) -> Result<Option<i64>, ApiError> {
    Ok(conn
        .prepare_cached("SELECT MIN(seq) FROM events WHERE conversation_id = ?1")?
        .query_row([conversation_id], |r| r.get(0))?)
}

pub struct ListQuery {
    pub limit: usize,
    /// A cursor from a previous page's `next`.
    pub before: Option<String>,
    pub q: Option<String>,
    pub trashed: bool,
}

/// Conversations newest first (by `updated`), with a cursor for the next page.
pub fn list(
    conn: &Connection,
    query: &ListQuery,
) -> Result<(Vec<Conversation>, Option<String>), ApiError> {
    let mut sql = format!("SELECT {CONVERSATION_COLUMNS} FROM conversations c WHERE ");
    sql.push_str(if query.trashed {
        "deleted_at IS NOT NULL"
    } else {
        "deleted_at IS NULL"
    });
    // A sub-agent is listed under its parent (`…/subagents`), not beside it.
    sql.push_str(" AND kind = 'chat'");
    let mut args: Vec<String> = Vec::new();
    if let Some(before) = &query.before {
        let (updated, id) = before
            .split_once('|')
            .ok_or_else(|| ApiError::bad_input("before", "is not a cursor from `next`"))?;
        args.push(updated.to_string());
        args.push(id.to_string());
        sql.push_str(" AND (updated < ?1 OR (updated = ?1 AND id < ?2))");
    }
    if let Some(q) = query.q.as_deref().filter(|q| !q.trim().is_empty()) {
        args.push(like_pattern(q));
        let n = args.len();
        sql.push_str(&format!(
            " AND (title LIKE ?{n} ESCAPE '\\' OR EXISTS (SELECT 1 FROM messages m \
             WHERE m.conversation_id = c.id AND m.text LIKE ?{n} ESCAPE '\\'))"
        ));
    }
    sql.push_str(&format!(
        " ORDER BY updated DESC, id DESC LIMIT {}",
        query.limit + 1
    ));
    let mut stmt = conn.prepare(&sql)?;
    let mut rows: Vec<Conversation> = stmt
        .query_map(
            rusqlite::params_from_iter(args.iter()),
            Conversation::from_row,
        )?
        .collect::<Result<_, _>>()?;
    let next = if rows.len() > query.limit {
        rows.truncate(query.limit);
        rows.last().map(|c| format!("{}|{}", c.updated, c.id))
    } else {
        None
    };
    Ok((rows, next))
}

/// `%q%` for `LIKE … ESCAPE '\'`, `q`'s own `%`, `_` and `\` taken as text.
fn like_pattern(q: &str) -> String {
    let escaped = q
        .replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_");
    format!("%{escaped}%")
}

/// The most characters of a matching line a search answers.
const MATCH_CHARS: usize = 160;

/// Where `q` is in a chat's messages, newest first: the message's id and
/// the line holding it, cut to 160 characters around the match; `None`
/// when only the title matches.
pub fn matching_line(
    conn: &Connection,
    conversation_id: &str,
    q: &str,
) -> Result<Option<(String, String)>, ApiError> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, text FROM messages WHERE conversation_id = ?1 AND text LIKE ?2 ESCAPE '\\' \
         ORDER BY created DESC, rowid DESC LIMIT 1",
    )?;
    let found: Option<(String, String)> = stmt
        .query_row(params![conversation_id, like_pattern(q)], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()?;
    let needle = q.to_lowercase();
    Ok(found.map(|(id, text)| {
        let line = text
            .lines()
            .find(|l| l.to_lowercase().contains(&needle))
            .unwrap_or_else(|| text.lines().next().unwrap_or(""));
        (id, around(line.trim(), &needle))
    }))
}

/// `line` cut to [`MATCH_CHARS`] characters with the match inside, an
/// ellipsis where it was cut.
fn around(line: &str, needle: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    if chars.len() <= MATCH_CHARS {
        return line.to_string();
    }
    let lower: Vec<char> = line.to_lowercase().chars().collect();
    let needle: Vec<char> = needle.chars().collect();
    let at = (0..lower.len().saturating_sub(needle.len()))
        .find(|&i| lower[i..].starts_with(&needle))
        .unwrap_or(0)
        .min(chars.len());
    let start = at.saturating_sub(MATCH_CHARS / 3);
    let end = (start + MATCH_CHARS).min(chars.len());
    let start = end.saturating_sub(MATCH_CHARS);
    let mut out: String = chars[start..end].iter().collect();
    if start > 0 {
        out.insert(0, '…');
    }
    if end < chars.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod search_tests {
    use super::*;

    #[test]
    fn a_long_line_is_cut_around_its_match() {
        assert_eq!(around("a short line", "short"), "a short line");
        let long = format!("{}needle{}", "x".repeat(300), "y".repeat(300));
        let cut = around(&long, "needle");
        assert!(
            cut.contains("needle") && cut.starts_with('…') && cut.ends_with('…'),
            "{cut}"
        );
        assert!(cut.chars().count() <= MATCH_CHARS + 2, "{cut}");
    }
}
