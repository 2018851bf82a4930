//! A chat's goal: its row (one a chat), every change to it with its goal
//! line in the transcript and a `goal` event in the same job, and the next
//! turn queued in the job that ends the last one, so a restart never starts
//! a goal's turn twice and never loses one.

use rusqlite::{params, Connection};
use serde_json::json;
use tandem_shared::http::ApiError;
use tandem_shared::time::now_rfc3339;

use super::messages::insert_at_head;
use super::{queries, Ctx};
use crate::kinds::EventKind;
use crate::model::{Conversation, Goal, Message, Run};
use crate::words::{ChatKind, GoalEvent, GoalState, Origin, PausedBy, Role, RunStatus};

/// A goal's text, at most (characters).
pub const TEXT_CHARS: usize = 4_000;

/// The limits a goal is set or resumed with (the config's).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_turns: i64,
    pub max_steps: i64,
}

/// The chat's goal, if it has one.
pub fn of(conn: &Connection, conversation_id: &str) -> Result<Option<Goal>, ApiError> {
    queries::goal(conn, conversation_id)
}

/// The chat's goal while it is active.
pub fn active(conn: &Connection, conversation_id: &str) -> Result<Option<Goal>, ApiError> {
    Ok(of(conn, conversation_id)?.filter(|g| g.state == GoalState::Active))
}

/// The chat's goal, or 404 naming it.
fn existing(conn: &Connection, conversation_id: &str) -> Result<Goal, ApiError> {
    of(conn, conversation_id)?.ok_or_else(|| {
        ApiError::not_found("goal", conversation_id).with(
            "hint",
            "this chat has no goal: PUT one with {\"text\": ...}",
        )
    })
}

/// Only a chat a person started has a goal: a sub-agent's, a trigger's or
/// a bot's chat never works on by itself.
pub fn check_allowed(conversation: &Conversation) -> Result<(), ApiError> {
    // A fork or an import of a person's chat is a person's chat too.
    let person = matches!(
        conversation.origin,
        Origin::User | Origin::Fork | Origin::Import
    );
    if conversation.kind != ChatKind::Chat || !person {
        return Err(ApiError::conflict(
            "goal_not_allowed",
            "only a chat a person started can have a goal",
        ));
    }
    Ok(())
}

/// Writes a goal line under the head and says that the goal changed.
fn line(
    ctx: &mut Ctx,
    conversation_id: &str,
    event: GoalEvent,
    text: &str,
    turn: Option<i64>,
) -> Result<Message, ApiError> {
    let mut message = Message::draft(Role::Goal, text);
    message.goal_event = Some(event);
    message.goal_turn = turn;
    insert_at_head(ctx, conversation_id, message)
}

/// Tells every open device the goal as it stands now (null once cleared).
fn announce(ctx: &mut Ctx, conversation_id: &str) -> Result<Option<Goal>, ApiError> {
    let goal = of(ctx.conn(), conversation_id)?;
    ctx.emit(conversation_id, EventKind::Goal, json!({"goal": goal}))?;
    Ok(goal)
}

/// The chat's goal after a change; it exists, as the change just wrote it.
fn announced(ctx: &mut Ctx, conversation_id: &str) -> Result<Goal, ApiError> {
    announce(ctx, conversation_id)?.ok_or_else(|| ApiError::internal("the goal was not kept"))
}

/// Sets the chat's goal, replacing the one it had, with new counts; with no
/// run working, its first turn is counted (`true`: the caller queues it).
pub fn set(
    ctx: &mut Ctx,
    conversation: &Conversation,
    text: &str,
    limits: Limits,
) -> Result<(Goal, bool), ApiError> {
    check_allowed(conversation)?;
    let id = &conversation.id;
    let old = of(ctx.conn(), id)?;
    let now = now_rfc3339();
    ctx.conn().execute(
        "INSERT OR REPLACE INTO goals (conversation_id, text, state, turns, max_turns, steps, \
         max_steps, set_at, updated) VALUES (?1, ?2, ?3, 0, ?4, 0, ?5, ?6, ?6)",
        params![
            id,
            text,
            GoalState::Active,
            limits.max_turns,
            limits.max_steps,
            now
        ],
    )?;
    match old {
        Some(old) => line(
            ctx,
            id,
            GoalEvent::Replaced,
            &format!("New goal, in place of \"{}\": {text}", old.text),
            None,
        )?,
        None => line(ctx, id, GoalEvent::Set, &format!("Goal: {text}"), None)?,
    };
    let start = turn_if_idle(ctx, id)?;
    Ok((announced(ctx, id)?, start))
}

/// With no run working in the chat, the goal's next turn is counted:
/// `true`, and the caller queues it in the same job.
fn turn_if_idle(ctx: &mut Ctx, conversation_id: &str) -> Result<bool, ApiError> {
    if queries::active_run(ctx.conn(), conversation_id)?.is_some() {
        return Ok(false);
    }
    count_turn(ctx, conversation_id)?;
    Ok(true)
}

fn count_turn(ctx: &mut Ctx, conversation_id: &str) -> Result<(), ApiError> {
    ctx.conn().execute(
        "UPDATE goals SET turns = turns + 1, updated = ?1 WHERE conversation_id = ?2",
        params![now_rfc3339(), conversation_id],
    )?;
    Ok(())
}

/// Removes the chat's goal; a run that works goes on, and nothing follows it.
pub fn clear(ctx: &mut Ctx, conversation_id: &str) -> Result<(), ApiError> {
    let goal = existing(ctx.conn(), conversation_id)?;
    ctx.conn().execute(
        "DELETE FROM goals WHERE conversation_id = ?1",
        [conversation_id],
    )?;
    line(
        ctx,
        conversation_id,
        GoalEvent::Cleared,
        &format!("Goal cleared: {}", goal.text),
        None,
    )?;
    announce(ctx, conversation_id)?;
    Ok(())
}

/// Pauses an active goal (`why` a person reads on its line); a goal not
/// active is left as it is. Whether it paused.
pub fn pause(
    ctx: &mut Ctx,
    conversation_id: &str,
    by: PausedBy,
    why: &str,
) -> Result<bool, ApiError> {
    if active(ctx.conn(), conversation_id)?.is_none() {
        return Ok(false);
    }
    ctx.conn().execute(
        "UPDATE goals SET state = ?1, paused_by = ?2, note = ?3, updated = ?4 \
         WHERE conversation_id = ?5",
        params![GoalState::Paused, by, why, now_rfc3339(), conversation_id],
    )?;
    line(
        ctx,
        conversation_id,
        GoalEvent::Paused,
        &format!("Goal paused: {why}"),
        None,
    )?;
    announce(ctx, conversation_id)?;
    Ok(true)
}

/// Whether the chat's live run is a goal's turn still queued (its goal
/// line is the head): paused or cleared, the goal lets nothing follow, so
/// the caller stops it.
pub fn queued_turn(conn: &Connection, conversation_id: &str) -> Result<bool, ApiError> {
    let queued = queries::active_run(conn, conversation_id)?
        .is_some_and(|r| r.status == crate::words::RunStatus::Queued);
    if !queued {
        return Ok(false);
    }
    let head = queries::transcript(
        conn,
        &queries::conversation(conn, conversation_id, queries::Trashed::Include)?,
    )?
    .pop();
    Ok(head
        .is_some_and(|m| m.role == Role::Goal && m.goal_event.is_some_and(GoalEvent::starts_turn)))
}

/// Pauses the goal at a person's word: 409 unless it is active.
pub fn pause_by_person(ctx: &mut Ctx, conversation_id: &str) -> Result<Goal, ApiError> {
    let goal = existing(ctx.conn(), conversation_id)?;
    if !pause(ctx, conversation_id, PausedBy::User, "paused by you")? {
        return Err(not_in(&goal, "active", "pause"));
    }
    existing(ctx.conn(), conversation_id)
}

fn not_in(goal: &Goal, wanted: &str, verb: &str) -> ApiError {
    ApiError::conflict(
        "goal_state",
        format!(
            "the goal is {}, not {wanted}: there is nothing to {verb}",
            goal.state
        ),
    )
    .with("state", goal.state.as_str())
}

/// Resumes a paused or blocked goal with new counts; with no run working,
/// its next turn is counted (`true`: the caller queues it).
pub fn resume(
    ctx: &mut Ctx,
    conversation: &Conversation,
    limits: Limits,
) -> Result<(Goal, bool), ApiError> {
    check_allowed(conversation)?;
    let id = &conversation.id;
    let goal = existing(ctx.conn(), id)?;
    if !matches!(goal.state, GoalState::Paused | GoalState::Blocked) {
        let mut refused = not_in(&goal, "paused or blocked", "resume");
        if goal.state == GoalState::Done {
            refused = refused.with("hint", "the goal is reached: set a new one to go on");
        }
        return Err(refused);
    }
    ctx.conn().execute(
        "UPDATE goals SET state = ?1, paused_by = NULL, note = NULL, needs = NULL, turns = 0, \
         steps = 0, max_turns = ?2, max_steps = ?3, asked_evidence = 0, updated = ?4 \
         WHERE conversation_id = ?5",
        params![
            GoalState::Active,
            limits.max_turns,
            limits.max_steps,
            now_rfc3339(),
            id
        ],
    )?;
    line(
        ctx,
        id,
        GoalEvent::Resumed,
        &format!("Resume work toward the goal: \"{}\"", goal.text),
        None,
    )?;
    let start = turn_if_idle(ctx, id)?;
    Ok((announced(ctx, id)?, start))
}

/// What a goal tool call asked, to be written in the job that answers it.
pub enum Ending<'a> {
    Done {
        summary: &'a str,
        evidence: &'a [String],
    },
    Blocked {
        reason: &'a str,
        needs: &'a str,
    },
}

/// How a goal tool call was taken.
#[derive(Debug, PartialEq, Eq)]
pub enum Taken {
    Ended,
    /// goal_done named no evidence the first time: asked for it once.
    AskedEvidence,
    /// The goal was not active any more (cleared, paused meanwhile).
    NotActive,
}

/// Ends the active goal done or blocked, with its line.
pub fn end(ctx: &mut Ctx, conversation_id: &str, ending: Ending) -> Result<Taken, ApiError> {
    let Some(goal) = active(ctx.conn(), conversation_id)? else {
        return Ok(Taken::NotActive);
    };
    let now = now_rfc3339();
    match ending {
        Ending::Done { evidence, .. } if evidence.is_empty() && !goal.asked_evidence => {
            ctx.conn().execute(
                "UPDATE goals SET asked_evidence = 1 WHERE conversation_id = ?1",
                [conversation_id],
            )?;
            return Ok(Taken::AskedEvidence);
        }
        Ending::Done { summary, evidence } => {
            ctx.conn().execute(
                "UPDATE goals SET state = ?1, note = ?2, evidence = ?3, updated = ?4 \
                 WHERE conversation_id = ?5",
                params![
                    GoalState::Done,
                    summary,
                    json!(evidence).to_string(),
                    now,
                    conversation_id
                ],
            )?;
            line(
                ctx,
                conversation_id,
                GoalEvent::Done,
                &format!("Goal reached: {summary}"),
                None,
            )?;
        }
        Ending::Blocked { reason, needs } => {
            ctx.conn().execute(
                "UPDATE goals SET state = ?1, note = ?2, needs = ?3, updated = ?4 \
                 WHERE conversation_id = ?5",
                params![GoalState::Blocked, reason, needs, now, conversation_id],
            )?;
            line(
                ctx,
                conversation_id,
                GoalEvent::Blocked,
                &format!("Goal blocked: {reason} It needs: {needs}"),
                None,
            )?;
        }
    }
    announce(ctx, conversation_id)?;
    Ok(Taken::Ended)
}

/// One more model call in a chat whose goal is active.
pub fn count_step(ctx: &mut Ctx, run_id: &str) -> Result<(), ApiError> {
    ctx.conn().execute(
        "UPDATE goals SET steps = steps + 1 WHERE state = ?1 AND conversation_id = \
         (SELECT conversation_id FROM runs WHERE id = ?2)",
        params![GoalState::Active, run_id],
    )?;
    Ok(())
}

/// A run that did not end by itself pauses the chat's goal: a stop, a
/// failure, chatd stopping under it. Written in the job that ends the run.
pub fn after_cut(ctx: &mut Ctx, run: &Run, ended: RunStatus) -> Result<(), ApiError> {
    let (by, why) = match ended {
        RunStatus::Stopped => (PausedBy::User, "the turn was stopped"),
        RunStatus::Failed => (PausedBy::Error, "the turn failed"),
        RunStatus::Interrupted => (
            PausedBy::Interrupted,
            "chatd stopped during the turn; resume goes on",
        ),
        _ => return Ok(()),
    };
    pause(ctx, &run.conversation_id, by, why)?;
    Ok(())
}

/// After a turn that ended by itself (done, or at its own step limit): the
/// goal's next turn counted with its `continue` line (`true`: the caller
/// queues it in the same job), or the goal paused at one of its limits.
pub fn follow(ctx: &mut Ctx, run: &Run) -> Result<bool, ApiError> {
    let id = &run.conversation_id;
    let Some(goal) = active(ctx.conn(), id)? else {
        return Ok(false);
    };
    if goal.steps >= goal.max_steps {
        let why = format!("it used its {} model calls", goal.max_steps);
        pause(ctx, id, PausedBy::StepLimit, &why)?;
        return Ok(false);
    }
    if goal.turns >= goal.max_turns {
        let why = format!("it used its {} turns", goal.max_turns);
        pause(ctx, id, PausedBy::TurnLimit, &why)?;
        return Ok(false);
    }
    // A chat put in the trash works on no more.
    let conversation = queries::conversation(ctx.conn(), id, queries::Trashed::Include)?;
    if conversation.deleted.is_some() {
        return Ok(false);
    }
    count_turn(ctx, id)?;
    line(
        ctx,
        id,
        GoalEvent::Continue,
        &format!("Continue toward the goal: \"{}\"", goal.text),
        Some(goal.turns + 1),
    )?;
    announce(ctx, id)?;
    Ok(true)
}
