//! Sub-agents' rows: one made with its conversation, task and first run in
//! one job (or refused with nothing stored), ended once, and its result put
//! into the parent in the job that ends it, so a result is delivered once
//! whatever stops chatd when: as the parent's call result while the call
//! waits, else as a message (a waiting message while the parent works).

use rusqlite::{params, Connection, OptionalExtension};
use serde_json::json;
use tandem_shared::http::ApiError;
use tandem_shared::time::{new_id, now_rfc3339};

use super::conversations::{self, NewConversation};
use super::messages::{self, ToolResult};
use super::queries::{self, Trashed};
use super::runs::insert_run;
use super::Ctx;
use crate::kinds::EventKind;
use crate::model::{Conversation, Message, Run, Subagent, SUBAGENT_COLUMNS};
use crate::words::{ChatKind, MessageStatus, Origin, Role, RunMode, RunStatus, SubagentState};

/// Sub-agents a chat runs in the background at once, at most.
pub const BACKGROUND_MAX: usize = 4;
/// A result's characters as the parent gets it, at most.
pub const RESULT_CHARS: usize = 12_000;
/// Restarts a sub-agent is taken up again after, at most.
pub const RESUMES_MAX: i64 = 3;

/// A sub-agent to start.
pub struct NewSub<'a> {
    pub call_id: &'a str,
    pub title: &'a str,
    pub task: &'a str,
    /// The task's words as the same-task check compares them.
    pub key: &'a str,
    pub tools: Option<&'a [String]>,
    pub wait: bool,
    /// The parent's workspace key (`history::Place`), for the same-task check.
    pub place: &'a str,
    /// The saved agent it runs as: its instructions, model and grants.
    pub agent: Option<&'a crate::agents::Agent>,
    /// Agents mode: it is the worker of a task (`task` holds the brief).
    pub worker: Option<super::tasks::Worker<'a>>,
}

/// Makes the sub-agent: its conversation (the parent's model, settings,
/// mode, agent and workspace), the task as its first message, its run
/// queued, and `sub_agent_started` on the parent. `Ok(Err(why))`: refused,
/// nothing stored.
pub fn insert(
    ctx: &mut Ctx,
    parent: &Conversation,
    parent_run: &Run,
    new: &NewSub,
) -> Result<Result<(Subagent, Run), String>, ApiError> {
    if let Some(why) = refusal(ctx.conn(), &parent.id, new)? {
        return Ok(Err(why));
    }
    // As a saved agent it is what a chat made with that agent is: its
    // model (else the parent's) and its settings alone.
    let (model, settings, agent_id) = match new.agent {
        Some(agent) if !agent.model.is_empty() => (
            agent.model.clone(),
            Default::default(),
            Some(agent.id.clone()),
        ),
        Some(agent) => (
            parent.model.clone(),
            Default::default(),
            Some(agent.id.clone()),
        ),
        None => (
            parent.model.clone(),
            parent.settings.clone(),
            parent.agent_id.clone(),
        ),
    };
    let id = conversations::insert(
        ctx,
        &NewConversation {
            title: new.title.to_string(),
            model,
            settings,
            permission_mode: parent.permission_mode,
            origin: parent_run.origin,
            workspace: parent.workspace.clone(),
            agent_id,
        },
    )?;
    ctx.conn().execute(
        "UPDATE conversations SET kind = ?1, parent_id = ?2 WHERE id = ?3",
        params![ChatKind::Subagent, parent.id, id],
    )?;
    let tools = new.tools.map(|t| json!(t).to_string());
    ctx.conn().execute(
        "INSERT INTO subagents (id, parent_id, parent_run_id, call_id, title, task, task_key, tools, wait, state, created, agent_id) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        params![id, parent.id, parent_run.id, new.call_id, new.title, new.task, new.key, tools,
                new.wait, SubagentState::Running, now_rfc3339(), new.agent.map(|a| &a.id)],
    )?;
    let first = new.worker.as_ref().map_or(new.task, |w| w.message);
    messages::insert_message(ctx, &id, Role::User, first, None, None)?;
    let child = queries::conversation(ctx.conn(), &id, Trashed::Include)?;
    let run = insert_run(ctx, &child, RunMode::Send, parent_run.origin, None)?;
    if let Some(worker) = &new.worker {
        super::tasks::mark_worker(ctx, &id, worker)?;
        let started = json!({"task_id": id, "n": worker.n, "run_id": run.id,
            "call_id": new.call_id, "title": new.title});
        ctx.emit(&parent.id, EventKind::TaskStarted, started)?;
        let sub = one(ctx.conn(), &parent.id, &id)?;
        return Ok(Ok((sub, run)));
    }
    let sub = one(ctx.conn(), &parent.id, &id)?;
    let mut started = json!({"subagent_id": id, "run_id": run.id, "call_id": new.call_id,
        "title": new.title, "wait": new.wait});
    if let Some(tools) = new.tools {
        started["tools"] = json!(tools);
    }
    if let Some(agent) = new.agent {
        started["agent"] = json!({"id": agent.id, "name": agent.name});
    }
    ctx.emit(&parent.id, EventKind::SubAgentStarted, started)?;
    Ok(Ok((sub, run)))
}

/// Why a new sub-agent may not start now, if it may not.
fn refusal(conn: &Connection, parent: &str, new: &NewSub) -> Result<Option<String>, ApiError> {
    if !new.wait {
        let running: i64 = conn.query_row(
            "SELECT COUNT(*) FROM subagents WHERE parent_id = ?1 AND state = ?2 AND wait = 0",
            params![parent, SubagentState::Running],
            |r| r.get(0),
        )?;
        if running as usize >= BACKGROUND_MAX {
            return Ok(Some(format!(
                "this chat runs {BACKGROUND_MAX} sub-agents in the background already, the most \
                 it may; wait for one to finish (its result comes as a message), or run this \
                 one with wait: true"
            )));
        }
    }
    // The same words again: while the first works, or after it ended with
    // no file of the chat changed since (it would find what it found).
    // Only one that works on, or that ended whole (not failed, not stopped).
    let earlier: Option<(String, String, SubagentState, Option<i64>)> = conn
        .query_row(
            "SELECT id, title, state, files_rev FROM subagents WHERE parent_id = ?1 AND task_key = ?2 \
               AND by_parent = 0 AND state IN (?3, ?4) ORDER BY rowid DESC LIMIT 1",
            params![parent, new.key, SubagentState::Running, SubagentState::Done],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .optional()?;
    let Some((id, title, state, rev)) = earlier else {
        return Ok(None);
    };
    if state == SubagentState::Running {
        return Ok(Some(format!(
            "the sub-agent {id} («{title}») works on this same task now; its result will come"
        )));
    }
    if rev == files_rev(conn, new.place)? {
        return Ok(Some(format!(
            "the sub-agent {id} («{title}») did this same task and no file of the chat changed \
             since; use its result (GET …/subagents/{id} shows it), or change the task"
        )));
    }
    Ok(None)
}

/// The workspace's last change set (`None` before any).
pub fn files_rev(conn: &Connection, place: &str) -> Result<Option<i64>, ApiError> {
    Ok(conn.query_row(
        "SELECT MAX(rev) FROM file_sets WHERE workspace = ?1",
        [place],
        |r| r.get(0),
    )?)
}

/// How a sub-agent ended.
pub struct End<'a> {
    pub state: SubagentState,
    pub result: &'a str,
    pub files_rev: Option<i64>,
}

/// Ends a running sub-agent and hands its result to the parent in the
/// same job (nothing when it ended already). Answers the parent's run a
/// delivery started, for the caller to spawn.
pub fn end(ctx: &mut Ctx, id: &str, end: &End) -> Result<Option<Run>, ApiError> {
    let changed = ctx.conn().execute(
        "UPDATE subagents SET state = ?1, result = ?2, files_rev = ?3, ended = ?4 WHERE id = ?5 AND state = ?6",
        params![end.state, end.result, end.files_rev, now_rfc3339(), id, SubagentState::Running],
    )?;
    if changed == 0 {
        return Ok(None);
    }
    let parent: String =
        ctx.conn()
            .query_row("SELECT parent_id FROM subagents WHERE id = ?1", [id], |r| {
                r.get(0)
            })?;
    let sub = one(ctx.conn(), &parent, id)?;
    deliver(ctx, &sub, end.result)
}

/// Puts the result where the parent reads it, once, with `sub_agent_done`.
fn deliver(ctx: &mut Ctx, sub: &Subagent, result: &str) -> Result<Option<Run>, ApiError> {
    let (kind, mut done) = match sub.task_n {
        Some(n) => (
            EventKind::TaskDone,
            json!({"task_id": sub.id, "n": n, "run_id": sub.run_id, "status": sub.state,
                "title": sub.title}),
        ),
        None => (
            EventKind::SubAgentDone,
            json!({"subagent_id": sub.id, "run_id": sub.run_id, "status": sub.state,
                "title": sub.title}),
        ),
    };
    let parent = queries::conversation(ctx.conn(), &sub.parent_id, Trashed::Include)?;
    // The call's result only while the call still waits in its run: a late
    // end (its parent stopped and went on) is handed back as in the background.
    let waits = sub.wait
        && queries::run(ctx.conn(), &sub.parent_run_id)
            .is_ok_and(|r| r.status == RunStatus::Running);
    // Stopped with its parent, or a parent in the trash: nothing to hand back.
    if (sub.by_parent && !waits) || parent.deleted.is_some() {
        ctx.emit(&sub.parent_id, kind, done)?;
        return Ok(None);
    }
    let mut started = None;
    if waits {
        if !answered(ctx.conn(), &sub.parent_id, &sub.call_id)? {
            let text = format!("{}\n\n{result}", headline(sub));
            let summary = match sub.task_n {
                Some(n) => format!("task {n} {}", sub.state),
                None => format!("sub-agent {}", sub.state),
            };
            let status = match sub.state {
                SubagentState::Done => MessageStatus::Done,
                _ => MessageStatus::Failed,
            };
            let (parent_run, call_id) = (sub.parent_run_id.clone(), sub.call_id.clone());
            let tool = ToolResult {
                run_id: &parent_run,
                call_id: &call_id,
                text: &text,
                summary: &summary,
                status,
                card: None,
            };
            messages::insert_tool_message(ctx, &sub.parent_id, &tool)?;
            ctx.emit(
                &sub.parent_id,
                EventKind::ToolFinished,
                json!({"run_id": parent_run, "call_id": call_id, "ok": status == MessageStatus::Done,
                       "summary": summary, "bytes": text.len()}),
            )?;
        }
        done["call_id"] = json!(sub.call_id);
    } else {
        let text = format!("{}\n\n{result}", headline(sub));
        let card = json!({"kind": "sub_agent_result", "subagent_id": sub.id, "title": sub.title,
            "status": sub.state});
        if queries::active_run(ctx.conn(), &sub.parent_id)?.is_some() {
            let pending_id = new_id("p_");
            messages::insert_pending(ctx, &pending_id, &sub.parent_id, &text, None, Some(&card))?;
            let pending = queries::pending(ctx.conn(), &sub.parent_id, &pending_id)?;
            ctx.emit(
                &sub.parent_id,
                EventKind::PendingAdded,
                json!({"pending": pending}),
            )?;
            done["pending_id"] = json!(pending_id);
        } else {
            let mut message = Message::draft(Role::User, &text);
            message.card = Some(card);
            let message = messages::insert_at_head(ctx, &sub.parent_id, message)?;
            let origin = queries::run(ctx.conn(), &sub.parent_run_id)
                .map(|r| r.origin)
                .unwrap_or(Origin::User);
            let run = insert_run(ctx, &parent, RunMode::Send, origin, None)?;
            done["message_id"] = json!(message.id);
            started = Some(run);
        }
    }
    ctx.conn().execute(
        "UPDATE subagents SET delivered = ?1 WHERE id = ?2 AND delivered IS NULL",
        params![now_rfc3339(), sub.id],
    )?;
    ctx.emit(&sub.parent_id, kind, done)?;
    Ok(started)
}

/// The line a result starts with: whose it is, so the model never reads it
/// as the person's words.
pub fn headline(sub: &Subagent) -> String {
    if let Some(n) = sub.task_n {
        return format!(
            "[The report of task {n} («{}»), {}: the worker's words and chatd's check, not the \
             person's:]",
            sub.title, sub.state
        );
    }
    format!(
        "[The result of sub-agent {} («{}»), {}. Its words, not the person's:]",
        sub.id, sub.title, sub.state
    )
}

/// Whether the parent's call has a result already.
pub fn answered(conn: &Connection, parent: &str, call_id: &str) -> Result<bool, ApiError> {
    Ok(conn
        .query_row(
            "SELECT 1 FROM messages WHERE conversation_id = ?1 AND tool_call_id = ?2 AND role = ?3",
            params![parent, call_id, Role::Tool],
            |_| Ok(()),
        )
        .optional()?
        .is_some())
}

/// Marks the parent's running sub-agents as stopped with it (a stop or a
/// failed turn): their results are not handed back. Answers their ids.
pub fn mark_by_parent(ctx: &mut Ctx, parent: &str) -> Result<Vec<String>, ApiError> {
    let ids = running(ctx.conn(), parent)?;
    ctx.conn().execute(
        "UPDATE subagents SET by_parent = 1 WHERE parent_id = ?1 AND state = ?2",
        params![parent, SubagentState::Running],
    )?;
    Ok(ids)
}

/// The parent's running sub-agents' ids.
pub fn running(conn: &Connection, parent: &str) -> Result<Vec<String>, ApiError> {
    let mut stmt = conn.prepare_cached(
        "SELECT id FROM subagents WHERE parent_id = ?1 AND state = ?2 ORDER BY rowid",
    )?;
    let ids = stmt
        .query_map(params![parent, SubagentState::Running], |r| r.get(0))?
        .collect::<Result<Vec<String>, _>>()?;
    Ok(ids)
}

/// The chat's sub-agents, newest first, 200 at most.
pub fn list(conn: &Connection, parent: &str) -> Result<Vec<Subagent>, ApiError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {SUBAGENT_COLUMNS} FROM subagents s WHERE parent_id = ?1 AND task_n IS NULL \
         ORDER BY rowid DESC LIMIT 200"
    ))?;
    let rows = stmt
        .query_map([parent], Subagent::from_row)?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// One sub-agent of the chat (404 when it is not this chat's).
pub fn one(conn: &Connection, parent: &str, id: &str) -> Result<Subagent, ApiError> {
    conn.prepare_cached(&format!(
        "SELECT {SUBAGENT_COLUMNS} FROM subagents s WHERE parent_id = ?1 AND id = ?2"
    ))?
    .query_row([parent, id], Subagent::from_row)
    .optional()?
    .ok_or_else(|| ApiError::not_found("sub-agent", id))
}

/// The sub-agent's result: its last words (the last answer with text),
/// `RESULT_CHARS` at most, and the run's error when it failed.
pub fn result_of(conn: &Connection, id: &str, state: SubagentState) -> Result<String, ApiError> {
    let conversation = queries::conversation(conn, id, Trashed::Include)?;
    let path = queries::path_to(conn, id, conversation.head_id.as_deref())?;
    let words = path
        .iter()
        .rev()
        .find(|m| m.role == Role::Assistant && !m.text.trim().is_empty())
        .map(|m| m.text.trim().to_string())
        .unwrap_or_default();
    let mut text = if words.chars().count() > RESULT_CHARS {
        let cut: String = words.chars().take(RESULT_CHARS).collect();
        format!("{cut}\n[cut at {RESULT_CHARS} characters: the whole transcript is at GET …/subagents/{id}]")
    } else {
        words
    };
    if state != SubagentState::Done {
        let error: Option<String> = conn
            .query_row(
                "SELECT error FROM runs WHERE conversation_id = ?1 ORDER BY rowid DESC LIMIT 1",
                [id],
                |r| r.get(0),
            )
            .optional()?
            .flatten();
        let why = match (state, error) {
            (_, Some(error)) => format!("({state}: {error})"),
            (SubagentState::Stopped, None) => "(stopped before it finished)".to_string(),
            _ => format!("({state})"),
        };
        text = if text.is_empty() {
            why
        } else {
            format!("{text}\n\n{why}")
        };
    }
    if text.is_empty() {
        text = "(it gave no answer)".to_string();
    }
    Ok(text)
}

/// After a restart: each running sub-agent whose run a stop cut off is
/// taken up again (`RESUMES_MAX` times), one whose parent waited on it goes
/// on in the background (the call answered so), and one whose run ended
/// before the stop let its end be written is ended now. Answers the runs
/// to start, `(run, conversation)`; run after `runs::recover`.
pub fn recover(ctx: &mut Ctx) -> Result<Vec<(String, String)>, ApiError> {
    let open: Vec<Subagent> = {
        let mut stmt = ctx.conn().prepare(&format!(
            // A worker is taken up by Continue of its chat, never by a start.
            "SELECT {SUBAGENT_COLUMNS} FROM subagents s WHERE state = ?1 AND task_n IS NULL \
             ORDER BY rowid"
        ))?;
        let rows = stmt
            .query_map([SubagentState::Running], Subagent::from_row)?
            .collect::<Result<Vec<_>, _>>()?;
        rows
    };
    let mut start = Vec::new();
    for mut sub in open {
        // Stopped with its parent before the restart: it ends so, not again.
        if sub.by_parent {
            let result = result_of(ctx.conn(), &sub.id, SubagentState::Stopped)?;
            let end_now = End {
                state: SubagentState::Stopped,
                result: &result,
                files_rev: None,
            };
            end(ctx, &sub.id, &end_now)?;
            continue;
        }
        // The parent's waiting call was cut off with its run: the result
        // comes as a message instead.
        let cut = queries::run(ctx.conn(), &sub.parent_run_id)
            .map(|r| r.status == RunStatus::Interrupted)
            .unwrap_or(true);
        if sub.wait && cut {
            move_to_background(ctx, &sub)?;
            sub.wait = false;
        }
        let last = sub
            .run_id
            .as_deref()
            .map(|r| queries::run(ctx.conn(), r))
            .transpose()?;
        let status = last.as_ref().map(|r| r.status);
        let ended = match status {
            Some(RunStatus::Queued | RunStatus::Waiting) => continue,
            Some(RunStatus::Interrupted) | None => None,
            Some(RunStatus::Done | RunStatus::Paused) => Some(SubagentState::Done),
            Some(RunStatus::Stopped) => Some(SubagentState::Stopped),
            Some(_) => Some(SubagentState::Failed),
        };
        if let Some(state) = ended {
            let result = result_of(ctx.conn(), &sub.id, state)?;
            let rev = files_rev(ctx.conn(), &place_of(ctx.conn(), &sub.parent_id)?)?;
            let end_now = End {
                state,
                result: &result,
                files_rev: rev,
            };
            if let Some(run) = end(ctx, &sub.id, &end_now)? {
                start.push((run.id, run.conversation_id));
            }
            continue;
        }
        if sub.resumes >= RESUMES_MAX {
            let result = format!("(failed: chatd restarted {RESUMES_MAX} times while it worked)");
            let rev = files_rev(ctx.conn(), &place_of(ctx.conn(), &sub.parent_id)?)?;
            let end_now = End {
                state: SubagentState::Failed,
                result: &result,
                files_rev: rev,
            };
            if let Some(run) = end(ctx, &sub.id, &end_now)? {
                start.push((run.id, run.conversation_id));
            }
            continue;
        }
        ctx.conn().execute(
            "UPDATE subagents SET resumes = resumes + 1 WHERE id = ?1",
            [&sub.id],
        )?;
        let child = queries::conversation(ctx.conn(), &sub.id, Trashed::Include)?;
        let origin = last.as_ref().map_or(Origin::User, |r| r.origin);
        // The cut answer goes on in place (a prefill), as Continue does.
        let cut_answer = last.as_ref().and_then(|r| r.message_id.as_deref());
        let run = insert_run(ctx, &child, RunMode::Resume, origin, cut_answer)?;
        start.push((run.id, run.conversation_id));
    }
    Ok(start)
}

/// A waiting call cut off by a restart: answered "goes on in the
/// background", and the result comes as a message.
fn move_to_background(ctx: &mut Ctx, sub: &Subagent) -> Result<(), ApiError> {
    if !answered(ctx.conn(), &sub.parent_id, &sub.call_id)? {
        let text = format!(
            "chatd restarted while the sub-agent {} («{}») worked; it goes on in the background \
             and its result will come as a message",
            sub.id, sub.title
        );
        let tool = ToolResult {
            run_id: &sub.parent_run_id,
            call_id: &sub.call_id,
            text: &text,
            summary: "sub-agent: in the background",
            status: MessageStatus::Done,
            card: None,
        };
        messages::insert_tool_message(ctx, &sub.parent_id, &tool)?;
        ctx.emit(
            &sub.parent_id,
            EventKind::ToolFinished,
            json!({"run_id": sub.parent_run_id, "call_id": sub.call_id, "ok": true,
                   "summary": "sub-agent: in the background", "bytes": text.len()}),
        )?;
    }
    ctx.conn()
        .execute("UPDATE subagents SET wait = 0 WHERE id = ?1", [&sub.id])?;
    Ok(())
}

/// The parent's workspace key as `history::Place` makes it.
fn place_of(conn: &Connection, parent: &str) -> Result<String, ApiError> {
    let c = queries::conversation(conn, parent, Trashed::Include)?;
    Ok(if c.workspace == "shared" {
        "shared".to_string()
    } else {
        c.id
    })
}
