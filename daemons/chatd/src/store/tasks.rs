//! Agents mode's tasks: a worker is a sub-agent row with its task's number
//! (`subagents.rs` makes, ends and delivers it); this holds what is a
//! task's own: its number, the cap a run has, the record chatd checks a
//! report against, and a task left open when its chat went on without it.

use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;
use serde_json::Value;
use tandem_shared::http::ApiError;

use super::queries::{self, Trashed};
use super::Ctx;
use crate::model::{Subagent, SUBAGENT_COLUMNS};
use crate::runs::report::{CallRan, Record};
use crate::words::{MessageStatus, Role, SubagentState};

/// What makes a sub-agent a worker.
pub struct Worker<'a> {
    pub n: i64,
    pub expect: &'a str,
    /// Its first message: the task, the brief, the plan and the person's words.
    pub message: &'a str,
    /// The workspace's last change set before it started.
    pub start_rev: Option<i64>,
}

/// A task as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Task {
    /// Its worker's conversation id.
    pub id: String,
    pub n: i64,
    pub title: String,
    pub brief: String,
    pub expect: String,
    pub state: SubagentState,
    pub call_id: String,
    /// Times chatd asked the worker again for its report (0 or 1).
    pub report_asks: i64,
    /// Stopped with its chat and not ended: Continue of the chat resumes it.
    pub held: bool,
    pub created: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The whole report with chatd's check, once it ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<String>,
}

const TASK_COLUMNS: &str = "s.id, s.task_n, s.title, s.task, s.expect, s.state, s.call_id, \
     s.report_asks, s.created, s.ended, \
     (SELECT r.id FROM runs r WHERE r.conversation_id = s.id ORDER BY r.rowid DESC LIMIT 1), \
     s.report, s.by_parent";

impl Task {
    fn from_row(row: &rusqlite::Row) -> rusqlite::Result<Task> {
        Ok(Task {
            id: row.get(0)?,
            n: row.get(1)?,
            title: row.get(2)?,
            brief: row.get(3)?,
            expect: row.get::<_, Option<String>>(4)?.unwrap_or_default(),
            state: row.get(5)?,
            call_id: row.get(6)?,
            report_asks: row.get(7)?,
            created: row.get(8)?,
            ended: row.get(9)?,
            run_id: row.get(10)?,
            report: row.get(11)?,
            held: row.get::<_, bool>(12)?
                && row.get::<_, SubagentState>(5)? == SubagentState::Running,
        })
    }
}

/// Marks a just-made sub-agent as the worker of task `worker.n`.
pub fn mark_worker(ctx: &mut Ctx, id: &str, worker: &Worker) -> Result<(), ApiError> {
    ctx.conn().execute(
        "UPDATE subagents SET task_n = ?1, expect = ?2, start_rev = ?3 WHERE id = ?4",
        params![worker.n, worker.expect, worker.start_rev, id],
    )?;
    Ok(())
}

/// The number the chat's next task gets.
pub fn next_n(conn: &Connection, parent: &str) -> Result<i64, ApiError> {
    let last: Option<i64> = conn.query_row(
        "SELECT MAX(task_n) FROM subagents WHERE parent_id = ?1",
        [parent],
        |r| r.get(0),
    )?;
    Ok(last.unwrap_or(0) + 1)
}

/// Workers run `run_id` of the main agent started.
pub fn started_in_run(conn: &Connection, run_id: &str) -> Result<usize, ApiError> {
    let n: i64 = conn.query_row(
        "SELECT COUNT(*) FROM subagents WHERE parent_run_id = ?1 AND task_n IS NOT NULL",
        [run_id],
        |r| r.get(0),
    )?;
    Ok(n as usize)
}

/// The worker a call of the main agent started, if one did.
pub fn of_call(
    conn: &Connection,
    parent: &str,
    call_id: &str,
) -> Result<Option<Subagent>, ApiError> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {SUBAGENT_COLUMNS} FROM subagents s WHERE parent_id = ?1 AND call_id = ?2 \
             AND task_n IS NOT NULL"
        ))?
        .query_row([parent, call_id], Subagent::from_row)
        .optional()?)
}

/// A worker's row by its own id (`None`: not a worker).
pub fn worker(conn: &Connection, id: &str) -> Result<Option<Subagent>, ApiError> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {SUBAGENT_COLUMNS} FROM subagents s WHERE id = ?1 AND task_n IS NOT NULL"
        ))?
        .query_row([id], Subagent::from_row)
        .optional()?)
}

/// The chat's tasks, in their order.
pub fn list(conn: &Connection, parent: &str) -> Result<Vec<Task>, ApiError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {TASK_COLUMNS} FROM subagents s WHERE parent_id = ?1 AND task_n IS NOT NULL \
         ORDER BY task_n"
    ))?;
    let rows = stmt
        .query_map([parent], Task::from_row)?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// One task of the chat (404 when it is not this chat's).
pub fn one(conn: &Connection, parent: &str, id: &str) -> Result<Task, ApiError> {
    conn.prepare_cached(&format!(
        "SELECT {TASK_COLUMNS} FROM subagents s WHERE parent_id = ?1 AND id = ?2 \
         AND task_n IS NOT NULL"
    ))?
    .query_row([parent, id], Task::from_row)
    .optional()?
    .ok_or_else(|| ApiError::not_found("task", id))
}

/// How often the worker was asked again, and where its changes start.
pub fn asks_and_start(conn: &Connection, id: &str) -> Result<(i64, Option<i64>), ApiError> {
    Ok(conn.query_row(
        "SELECT report_asks, start_rev FROM subagents WHERE id = ?1",
        [id],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?)
}

/// Counts an ask for the report again.
pub fn count_ask(ctx: &mut Ctx, id: &str) -> Result<(), ApiError> {
    ctx.conn().execute(
        "UPDATE subagents SET report_asks = report_asks + 1 WHERE id = ?1",
        [id],
    )?;
    Ok(())
}

/// Keeps the whole report beside what the main agent read.
pub fn keep_report(ctx: &mut Ctx, id: &str, report: &str) -> Result<(), ApiError> {
    ctx.conn().execute(
        "UPDATE subagents SET report = ?1 WHERE id = ?2",
        params![report, id],
    )?;
    Ok(())
}

/// Holds a worker open as its chat stops it: its end hands nothing back.
pub fn hold(ctx: &mut Ctx, id: &str) -> Result<(), ApiError> {
    ctx.conn()
        .execute("UPDATE subagents SET by_parent = 1 WHERE id = ?1", [id])?;
    Ok(())
}

/// The task number of a worker, `None` for any other sub-agent.
pub fn task_n(conn: &Connection, id: &str) -> Result<Option<i64>, ApiError> {
    Ok(conn
        .query_row("SELECT task_n FROM subagents WHERE id = ?1", [id], |r| {
            r.get::<_, Option<i64>>(0)
        })
        .optional()?
        .flatten())
}

/// Lets a worker stopped with its chat be taken up again by Continue: its
/// report goes to the run that continues the chat (its call waits there).
pub fn reopen(ctx: &mut Ctx, id: &str, parent_run: &str) -> Result<(), ApiError> {
    ctx.conn().execute(
        "UPDATE subagents SET by_parent = 0, parent_run_id = ?1 WHERE id = ?2",
        params![parent_run, id],
    )?;
    Ok(())
}

/// The chat's tasks whose workers have not ended.
pub fn open_of(conn: &Connection, parent: &str) -> Result<Vec<Subagent>, ApiError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {SUBAGENT_COLUMNS} FROM subagents s WHERE parent_id = ?1 AND state = ?2 \
         AND task_n IS NOT NULL ORDER BY task_n"
    ))?;
    let rows = stmt
        .query_map(params![parent, SubagentState::Running], Subagent::from_row)?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// After a restart: a worker's queued or waiting run is not started again
/// but ended interrupted, as its chat's run was; Continue of the chat takes
/// it up. Answers the other runs to start.
pub fn hold_queued(
    ctx: &mut Ctx,
    queued: Vec<(String, String)>,
) -> Result<Vec<(String, String)>, ApiError> {
    let mut start = Vec::with_capacity(queued.len());
    for (run_id, chat) in queued {
        if task_n(ctx.conn(), &chat)?.is_none() {
            start.push((run_id, chat));
            continue;
        }
        let run = queries::run(ctx.conn(), &run_id)?;
        super::runs::finish_run(
            ctx,
            &run,
            super::runs::Outcome::Interrupted,
            Some("chatd stopped while the worker waited; Continue of its chat resumes it"),
            None,
        )?;
    }
    Ok(start)
}

/// Shows the worker `id` the messages its chat got while it works (they
/// wait for the main agent, which reads them after the report), each once,
/// as a note before its next model call. Answers how many.
pub fn note_waiting(ctx: &mut Ctx, id: &str) -> Result<usize, ApiError> {
    let Some(sub) = worker(ctx.conn(), id)? else {
        return Ok(0);
    };
    let noted: Option<String> =
        ctx.conn()
            .query_row("SELECT noted FROM subagents WHERE id = ?1", [id], |r| {
                r.get(0)
            })?;
    let mut noted: Vec<String> = noted
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    let new: Vec<crate::model::Pending> = queries::waiting(ctx.conn(), &sub.parent_id)?
        .into_iter()
        .filter(|p| p.card.is_none() && p.created >= sub.created && !noted.contains(&p.id))
        .collect();
    if new.is_empty() {
        return Ok(0);
    }
    let mut text = "[While you work, the person wrote to the main agent, which reads it after \
                    your report. If it bears on your task, take it into account:]"
        .to_string();
    for p in &new {
        text.push_str(&format!("\n«{}»", p.text));
        noted.push(p.id.clone());
    }
    super::messages::insert_message(ctx, id, Role::User, &text, None, None)?;
    ctx.conn().execute(
        "UPDATE subagents SET noted = ?1 WHERE id = ?2",
        params![Value::from(noted.clone()).to_string(), id],
    )?;
    Ok(new.len())
}

/// What chatd checks a worker's report against: the files changed in the
/// workspace `place` since `start_rev`, the calls the worker ran, and its
/// last words.
pub fn record(
    conn: &Connection,
    id: &str,
    place: &str,
    start_rev: Option<i64>,
) -> Result<Record, ApiError> {
    let mut stmt = conn.prepare_cached(
        "SELECT c.op, c.path FROM file_changes c JOIN file_sets s ON s.rev = c.rev \
         WHERE s.workspace = ?1 AND s.rev > ?2 ORDER BY c.rev, c.path",
    )?;
    let mut changed: Vec<(String, String)> = Vec::new();
    for row in stmt.query_map(params![place, start_rev.unwrap_or(0)], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
    })? {
        let (op, path) = row?;
        // A file changed twice is named once, with its last change.
        changed.retain(|(_, p)| *p != path);
        changed.push((op, path));
    }
    let conversation = queries::conversation(conn, id, Trashed::Include)?;
    let path = queries::path_to(conn, id, conversation.head_id.as_deref())?;
    let mut calls = Vec::new();
    for m in &path {
        for call in m.calls() {
            // Only a call with a result ran (or was cut off running).
            let Some(result) = path
                .iter()
                .find(|r| r.role == Role::Tool && r.tool_call_id.as_deref() == Some(call.id))
            else {
                continue;
            };
            let what = if call.name == "bash" {
                serde_json::from_str::<Value>(call.arguments)
                    .ok()
                    .and_then(|v| v["command"].as_str().map(str::to_string))
                    .unwrap_or_default()
            } else {
                crate::tools::summarize_call(call.name, call.arguments)
            };
            calls.push(CallRan {
                name: call.name.to_string(),
                what,
                ok: result.status != Some(MessageStatus::Failed),
            });
        }
    }
    Ok(Record {
        changed,
        calls,
        last_words: last_words_in(&path),
    })
}

/// A worker's last words whole (its report is at their end).
pub fn last_words(conn: &Connection, id: &str) -> Result<String, ApiError> {
    let conversation = queries::conversation(conn, id, Trashed::Include)?;
    let path = queries::path_to(conn, id, conversation.head_id.as_deref())?;
    Ok(last_words_in(&path))
}

fn last_words_in(path: &[crate::model::Message]) -> String {
    path.iter()
        .rev()
        .find(|m| m.role == Role::Assistant && !m.text.trim().is_empty())
        .map(|m| m.text.clone())
        .unwrap_or_default()
}
