//! Writes of a run's row: recorded `queued`, started, its status, usage
//! and step count set, ended with its answer's status, and the runs a
//! crash left open ended at the next start. How a run ended (`Outcome`)
//! lives here with the write that records it.

use rusqlite::params;
use serde_json::{json, Value};
use tandem_shared::http::ApiError;
use tandem_shared::time::{new_id, now_rfc3339};

use super::conversations::set_state;
use super::{queries, Ctx};
use crate::kinds::EventKind;
use crate::model::{Conversation, Run};
use crate::words::{ChatState, MessageStatus, Origin, RunMode, RunStatus};

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Done,
    Failed,
    Stopped,
    Interrupted,
    /// The step limit was reached; Continue goes on.
    Paused,
}

impl Outcome {
    /// The run's status once it ended so.
    pub fn run_status(self) -> RunStatus {
        match self {
            Outcome::Done => RunStatus::Done,
            Outcome::Failed => RunStatus::Failed,
            Outcome::Stopped => RunStatus::Stopped,
            Outcome::Interrupted => RunStatus::Interrupted,
            Outcome::Paused => RunStatus::Paused,
        }
    }

    /// The status of the answer it was writing, when the run ended so.
    pub fn message_status(self) -> MessageStatus {
        match self {
            Outcome::Done => MessageStatus::Done,
            Outcome::Failed => MessageStatus::Failed,
            Outcome::Stopped => MessageStatus::Stopped,
            Outcome::Interrupted => MessageStatus::Interrupted,
            Outcome::Paused => MessageStatus::Paused,
        }
    }
}

/// Records a new run `queued` for the conversation (its task starts it).
/// Its origin is the request's (`user`, `trigger`, `connector`), not the
/// chat's: a person's follow-up in a trigger's chat is a person's run.
pub fn insert_run(
    ctx: &mut Ctx,
    conversation: &Conversation,
    mode: RunMode,
    origin: Origin,
    message_id: Option<&str>,
) -> Result<Run, ApiError> {
    let run = Run {
        id: new_id("r_"),
        conversation_id: conversation.id.clone(),
        status: RunStatus::Queued,
        mode,
        model: conversation.model.clone(),
        origin,
        message_id: message_id.map(str::to_string),
        steps: 0,
        error: None,
        started: now_rfc3339(),
        ended: None,
        usage: None,
        failure: None,
    };
    ctx.conn().execute(
        "INSERT INTO runs (id, conversation_id, status, mode, model, origin, message_id, started) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![
            run.id,
            run.conversation_id,
            run.status,
            run.mode,
            run.model,
            run.origin,
            run.message_id,
            run.started
        ],
    )?;
    set_state(ctx, &conversation.id, ChatState::Queued)?;
    Ok(run)
}

/// A run that took its slot: `running`, `run.started`, and the chat running.
pub fn record_start(ctx: &mut Ctx, run_id: &str) -> Result<(), ApiError> {
    let run = queries::run(ctx.conn(), run_id)?;
    set_status(ctx, run_id, RunStatus::Running)?;
    ctx.emit(
        &run.conversation_id,
        EventKind::RunStarted,
        json!({"run_id": run_id, "mode": run.mode, "model": run.model}),
    )?;
    set_state(ctx, &run.conversation_id, ChatState::Running)
}

/// Sets the run's status (its end is `finish_run`'s).
pub fn set_status(ctx: &mut Ctx, run_id: &str, status: RunStatus) -> Result<(), ApiError> {
    ctx.conn().execute(
        "UPDATE runs SET status = ?1 WHERE id = ?2",
        params![status, run_id],
    )?;
    Ok(())
}

/// Keeps the last `usage` event's data on the run.
pub fn set_usage(ctx: &mut Ctx, run_id: &str, usage: &Value) -> Result<(), ApiError> {
    ctx.conn().execute(
        "UPDATE runs SET usage = ?1 WHERE id = ?2",
        params![usage.to_string(), run_id],
    )?;
    Ok(())
}

/// One more step of the run, writing the answer `message_id`.
pub fn count_step(ctx: &mut Ctx, run_id: &str, message_id: &str) -> Result<(), ApiError> {
    ctx.conn().execute(
        "UPDATE runs SET message_id = ?1, steps = steps + 1 WHERE id = ?2",
        params![message_id, run_id],
    )?;
    super::goals::count_step(ctx, run_id)
}

/// Ends a run: its status, its message's status, `run.finished`, and the
/// conversation back to idle.
pub fn finish_run(
    ctx: &mut Ctx,
    run: &Run,
    outcome: Outcome,
    error: Option<&str>,
    _usage: Option<&Value>,
) -> Result<(), ApiError> {
    let ended = now_rfc3339();
    ctx.conn().execute(
        "UPDATE runs SET status = ?1, error = ?2, ended = ?3 WHERE id = ?4",
        params![outcome.run_status(), error, ended, run.id],
    )?;
    let current = queries::run(ctx.conn(), &run.id)?;
    if let Some(mid) = &current.message_id {
        let changed = ctx.conn().execute(
            "UPDATE messages SET status = ?1 WHERE id = ?2 AND status = ?3",
            params![outcome.message_status(), mid, MessageStatus::Streaming],
        )?;
        if changed > 0 {
            let message = queries::message(ctx.conn(), &run.conversation_id, mid)?;
            ctx.emit(
                &run.conversation_id,
                EventKind::MessageUpdated,
                json!({"message": message}),
            )?;
        }
    }
    let mut data = json!({"run_id": run.id, "status": outcome.run_status()});
    if let Some(error) = error {
        data["error"] = json!(error);
    }
    if let Some(failure) = crate::failure::of_run(outcome.run_status(), error) {
        data["failure"] = json!(failure);
    }
    ctx.emit(&run.conversation_id, EventKind::RunFinished, data)?;
    set_state(ctx, &run.conversation_id, ChatState::Idle)?;
    // The loop that started the run learns how it went.
    super::loops::after_run(ctx, run, outcome.run_status())?;
    // A turn cut short pauses the chat's goal: nothing goes on by itself.
    super::goals::after_cut(ctx, run, outcome.run_status())
}

/// Ends the runs a crash left `running` as interrupted (their text kept);
/// answers the queued and consent-waiting ones, `(run, conversation)` in
/// their order, for their tasks to start again.
pub fn recover(ctx: &mut Ctx) -> Result<Vec<(String, String)>, ApiError> {
    let open: Vec<Run> = {
        let mut stmt = ctx.conn().prepare(&format!(
            "SELECT {} FROM runs WHERE status = ?1 ORDER BY rowid",
            crate::model::RUN_COLUMNS
        ))?;
        let rows = stmt
            .query_map([RunStatus::Running], Run::from_row)?
            .collect::<Result<Vec<_>, _>>()?;
        rows
    };
    for run in &open {
        finish_run(
            ctx,
            run,
            Outcome::Interrupted,
            Some("chatd stopped while the run worked"),
            None,
        )?;
    }
    // A run waiting for consent waits on: its card is stored.
    let mut stmt = ctx
        .conn()
        .prepare("SELECT id, conversation_id FROM runs WHERE status IN (?1, ?2) ORDER BY rowid")?;
    let queued = stmt
        .query_map([RunStatus::Queued, RunStatus::Waiting], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    if !open.is_empty() {
        tracing::info!(
            runs = open.len(),
            "ended runs left open by a stop as interrupted"
        );
    }
    Ok(queued)
}

/// After a turn that ended by itself: the chat's goal's next turn, queued
/// in the same job (or the goal paused at a limit: `None`).
pub fn goal_turn(ctx: &mut Ctx, run: &Run) -> Result<Option<Run>, ApiError> {
    if !super::goals::follow(ctx, run)? {
        return Ok(None);
    }
    let conversation =
        queries::conversation(ctx.conn(), &run.conversation_id, queries::Trashed::Include)?;
    insert_run(ctx, &conversation, RunMode::Send, Origin::User, None).map(Some)
}

/// Fires loop `id` if it is due at `now` (unix ms of chatd's clock): its
/// user line and its run, queued in one job (`None`: not now).
pub fn fire_loop(ctx: &mut Ctx, id: &str, now: i64, daily: i64) -> Result<Option<Run>, ApiError> {
    match super::loops::fire(ctx, id, now, daily)? {
        super::loops::Fired::Due(conversation) => {
            let run = insert_run(ctx, &conversation, RunMode::Send, Origin::User, None)?;
            super::loops::started(ctx, id, &run)?;
            Ok(Some(run))
        }
        super::loops::Fired::Not => Ok(None),
    }
}
