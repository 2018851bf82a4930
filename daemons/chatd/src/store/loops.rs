//! A chat's loops: made (the chat's first one waits for the person's yes),
//! changed, removed, fired when due (claimed, with its user line and run,
//! in one job, so a restart never sends a run twice), and brought up to
//! date in the job that ends the run it started. Every change says the
//! chat's whole list in a `loops` event.

use rusqlite::{params, Connection, OptionalExtension};
use serde_json::json;
use tandem_shared::http::ApiError;
use tandem_shared::time::{new_id, now_rfc3339};

use super::messages::insert_at_head;
use super::{queries, Ctx};
use crate::kinds::EventKind;
use crate::model::{Conversation, Loop, LoopRef, Message, Run, LOOP_COLUMNS, LOOP_MAX_RUNS};
use crate::words::{ChatKind, LoopState, Role, RunStatus};

/// Loops a chat has at most, and the box (ended ones do not count).
pub const PER_CHAT: i64 = 3;
pub const ON_BOX: i64 = 10;
/// Failed runs in a row that pause a loop.
pub const FAILURES_MAX: i64 = 3;
/// A prompt's characters, at most.
pub const PROMPT_CHARS: usize = 4_000;
/// The longest interval or wait (s).
pub const LONGEST_S: i64 = 86_400;

/// One loop, or 404 naming it.
pub fn one(conn: &Connection, conversation_id: &str, id: &str) -> Result<Loop, ApiError> {
    conn.prepare_cached(&format!(
        "SELECT {LOOP_COLUMNS} FROM loops WHERE id = ?1 AND conversation_id = ?2"
    ))?
    .query_row([id, conversation_id], Loop::from_row)
    .optional()?
    .ok_or_else(|| ApiError::not_found("loop", id))
}

/// The chat's loop whose run `run_id` is, if one.
fn of_run(conn: &Connection, run_id: &str) -> Result<Option<Loop>, ApiError> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {LOOP_COLUMNS} FROM loops WHERE current_run = ?1"
        ))?
        .query_row([run_id], Loop::from_row)
        .optional()?)
}

/// Whether the chat has an active self-paced loop (its tools are offered).
pub fn self_paced(conn: &Connection, conversation_id: &str) -> Result<bool, ApiError> {
    Ok(conn
        .prepare_cached(
            "SELECT 1 FROM loops WHERE conversation_id = ?1 AND interval_s IS NULL AND state = ?2",
        )?
        .exists(params![conversation_id, LoopState::Active])?)
}

/// Tells every open device the chat's loops as they are now.
fn announce(ctx: &mut Ctx, conversation_id: &str) -> Result<(), ApiError> {
    let loops = queries::loops(ctx.conn(), conversation_id)?;
    ctx.emit(conversation_id, EventKind::Loops, json!({ "loops": loops }))?;
    Ok(())
}

/// A loop to make.
pub struct NewLoop<'a> {
    pub prompt: &'a str,
    pub interval_s: Option<i64>,
}

/// Makes a loop: `pending` in a chat whose person never said yes to one,
/// else `active` and due at once (`now`, unix ms of chatd's clock).
pub fn create(
    ctx: &mut Ctx,
    conversation: &Conversation,
    new: &NewLoop,
    now: i64,
) -> Result<Loop, ApiError> {
    if conversation.kind != ChatKind::Chat {
        return Err(ApiError::conflict(
            "loop_not_allowed",
            "a sub-agent's chat has no loops",
        ));
    }
    let id = &conversation.id;
    let open = |conn: &Connection, chat: Option<&str>| -> rusqlite::Result<i64> {
        conn.query_row(
            "SELECT COUNT(*) FROM loops WHERE state != ?1 AND (?2 IS NULL OR conversation_id = ?2)",
            params![LoopState::Ended, chat],
            |r| r.get(0),
        )
    };
    if open(ctx.conn(), Some(id))? >= PER_CHAT {
        return Err(ApiError::conflict(
            "loop_limit",
            format!("this chat has {PER_CHAT} loops already: stop one first"),
        )
        .with("limit", PER_CHAT));
    }
    if open(ctx.conn(), None)? >= ON_BOX {
        return Err(ApiError::conflict(
            "loop_limit",
            format!("the box runs {ON_BOX} loops already: stop one first"),
        )
        .with("limit", ON_BOX));
    }
    let confirmed = ctx
        .conn()
        .prepare_cached("SELECT 1 FROM loops_confirmed WHERE conversation_id = ?1")?
        .exists([id])?;
    let (state, next_at) = match confirmed {
        true => (LoopState::Active, Some(now)),
        false => (LoopState::Pending, None),
    };
    let loop_id = new_id("l_");
    let at = now_rfc3339();
    ctx.conn().execute(
        "INSERT INTO loops (id, conversation_id, prompt, interval_s, state, next_at, created, updated) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)",
        params![loop_id, id, new.prompt, new.interval_s, state, next_at, at],
    )?;
    announce(ctx, id)?;
    one(ctx.conn(), id, &loop_id)
}

/// A person's change: `active` (the yes to a pending loop, or resume) or
/// `paused`.
pub fn set_state(
    ctx: &mut Ctx,
    conversation_id: &str,
    id: &str,
    state: LoopState,
    now: i64,
) -> Result<Loop, ApiError> {
    let current = one(ctx.conn(), conversation_id, id)?;
    let refused = |why: &str| {
        ApiError::conflict(
            "loop_state",
            format!("the loop is {}: {why}", current.state),
        )
        .with("state", current.state.as_str())
    };
    match (current.state, state) {
        (LoopState::Ended, _) => return Err(refused("start a new one")),
        (LoopState::Paused, LoopState::Paused) => return Err(refused("nothing to pause")),
        (LoopState::Active, LoopState::Active) => return Err(refused("nothing to start")),
        (_, LoopState::Active) => {
            ctx.conn().execute(
                "INSERT OR IGNORE INTO loops_confirmed (conversation_id) VALUES (?1)",
                [conversation_id],
            )?;
            // Due at once, with its failures forgotten.
            ctx.conn().execute(
                "UPDATE loops SET state = ?1, reason = NULL, failures = 0, next_at = ?2, updated = ?3 \
                 WHERE id = ?4",
                params![LoopState::Active, now, now_rfc3339(), id],
            )?;
        }
        (_, LoopState::Paused) => {
            ctx.conn().execute(
                "UPDATE loops SET state = ?1, reason = 'paused by you', next_at = NULL, updated = ?2 \
                 WHERE id = ?3",
                params![LoopState::Paused, now_rfc3339(), id],
            )?;
        }
        (_, other) => {
            return Err(ApiError::bad_input(
                "state",
                format!("{other} is not one to set: active or paused"),
            ))
        }
    }
    announce(ctx, conversation_id)?;
    one(ctx.conn(), conversation_id, id)
}

/// Removes one loop, or all of the chat's (`id` None). A run it started
/// goes on. How many went.
pub fn remove(ctx: &mut Ctx, conversation_id: &str, id: Option<&str>) -> Result<usize, ApiError> {
    if let Some(id) = id {
        one(ctx.conn(), conversation_id, id)?;
    }
    let gone = ctx.conn().execute(
        "DELETE FROM loops WHERE conversation_id = ?1 AND (?2 IS NULL OR id = ?2)",
        params![conversation_id, id],
    )?;
    announce(ctx, conversation_id)?;
    Ok(gone)
}

/// Pauses the chat's active and pending loops, saying `why` (the chat went
/// to the trash: nothing of it runs there).
pub fn pause_all(ctx: &mut Ctx, conversation_id: &str, why: &str) -> Result<(), ApiError> {
    let changed = ctx.conn().execute(
        "UPDATE loops SET state = ?1, reason = ?2, next_at = NULL, updated = ?3 \
         WHERE conversation_id = ?4 AND state IN (?5, ?6)",
        params![
            LoopState::Paused,
            why,
            now_rfc3339(),
            conversation_id,
            LoopState::Active,
            LoopState::Pending
        ],
    )?;
    if changed > 0 {
        announce(ctx, conversation_id)?;
    }
    Ok(())
}

/// Active loops due by `now`: the earliest due first and, among loops due
/// together, the one that ran least (two loops of one chat due at once
/// take turns, never the same one skipped every time).
pub fn due(conn: &Connection, now: i64) -> Result<Vec<(String, String)>, ApiError> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, conversation_id FROM loops WHERE state = ?1 AND next_at IS NOT NULL \
         AND next_at <= ?2 ORDER BY next_at, runs, rowid",
    )?;
    let rows = stmt.query_map(params![LoopState::Active, now], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// What firing a due loop did.
pub enum Fired {
    /// Its user line is written: the caller queues its run in the same job
    /// and names it with [`started`].
    Due(Box<Conversation>),
    /// Not run now (busy, the day's cap, gone, ended).
    Not,
}

/// The UTC day of unix ms `at`.
fn day_of(at: i64) -> String {
    tandem_shared::clock::rfc3339(at)
        .get(..10)
        .unwrap_or("")
        .to_string()
}

/// Fires loop `id` if it is still due at `now`: its user line (the caller
/// queues its run), or why not written on the loop. One job, so a loop
/// fires once a due time.
pub fn fire(ctx: &mut Ctx, id: &str, now: i64, daily: i64) -> Result<Fired, ApiError> {
    let Some(lp) = ctx
        .conn()
        .prepare_cached(&format!("SELECT {LOOP_COLUMNS} FROM loops WHERE id = ?1"))?
        .query_row([id], Loop::from_row)
        .optional()?
    else {
        return Ok(Fired::Not);
    };
    if lp.state != LoopState::Active || lp.next_at.is_none_or(|at| at > now) {
        return Ok(Fired::Not);
    }
    let cid = lp.conversation_id.clone();
    let at = now_rfc3339();
    let conversation = queries::conversation(ctx.conn(), &cid, queries::Trashed::Include)?;
    let next = lp.interval_seconds.map(|s| now + s * 1000);
    if lp.runs >= LOOP_MAX_RUNS {
        end(ctx, &lp, &format!("it ran its {LOOP_MAX_RUNS} runs"))?;
        return Ok(Fired::Not);
    }
    let day = day_of(now);
    let today: i64 = ctx
        .conn()
        .query_row("SELECT runs FROM loop_days WHERE day = ?1", [&day], |r| {
            r.get(0)
        })
        .optional()?
        .unwrap_or(0);
    if today >= daily {
        // It waits for the next UTC day.
        let midnight = (now / 86_400_000 + 1) * 86_400_000;
        ctx.conn().execute(
            "UPDATE loops SET next_at = ?1, reason = ?2, updated = ?3 WHERE id = ?4",
            params![
                midnight,
                format!("the box's {daily} loop runs of the day are used: it waits for the next day (UTC)"),
                at,
                id
            ],
        )?;
        announce(ctx, &cid)?;
        return Ok(Fired::Not);
    }
    let busy = queries::active_run(ctx.conn(), &cid)?.is_some() || conversation.deleted.is_some();
    if busy {
        // An interval loop skips this run; a self-paced one runs once the
        // chat is free (it stays due).
        if let Some(next) = next {
            ctx.conn().execute(
                "UPDATE loops SET next_at = ?1, skipped = skipped + 1, \
                 reason = 'a run was skipped: the chat was busy', updated = ?2 WHERE id = ?3",
                params![next, at, id],
            )?;
            announce(ctx, &cid)?;
        }
        return Ok(Fired::Not);
    }
    ctx.conn().execute(
        "INSERT INTO loop_days (day, runs) VALUES (?1, 1) \
         ON CONFLICT(day) DO UPDATE SET runs = runs + 1",
        [&day],
    )?;
    let run_n = lp.runs + 1;
    let mut line = Message::draft(Role::User, &lp.prompt);
    line.loop_ref = Some(LoopRef {
        id: lp.id.clone(),
        run: run_n,
    });
    insert_at_head(ctx, &cid, line)?;
    ctx.conn().execute(
        "UPDATE loops SET runs = ?1, next_at = ?2, reason = NULL, wait = NULL, updated = ?3 \
         WHERE id = ?4",
        params![run_n, next, at, id],
    )?;
    if run_n >= LOOP_MAX_RUNS {
        // Its last run goes; nothing comes after it.
        end(ctx, &lp, &format!("it ran its {LOOP_MAX_RUNS} runs"))?;
    }
    Ok(Fired::Due(Box::new(conversation)))
}

/// The run a fired loop queued: the loop is `running` until it ends.
pub fn started(ctx: &mut Ctx, id: &str, run: &Run) -> Result<(), ApiError> {
    ctx.conn().execute(
        "UPDATE loops SET current_run = ?1 WHERE id = ?2",
        params![run.id, id],
    )?;
    announce(ctx, &run.conversation_id)
}

fn end(ctx: &mut Ctx, lp: &Loop, why: &str) -> Result<(), ApiError> {
    ctx.conn().execute(
        "UPDATE loops SET state = ?1, reason = ?2, next_at = NULL, updated = ?3 WHERE id = ?4",
        params![LoopState::Ended, why, now_rfc3339(), lp.id],
    )?;
    announce(ctx, &lp.conversation_id)
}

/// In the job that ends run `run`: the loop that started it learns how it
/// went. A failed or cut-off run counts toward the pause after three in a
/// row; a self-paced loop's run that set no next wait ends the loop.
pub fn after_run(ctx: &mut Ctx, run: &Run, ended: RunStatus) -> Result<(), ApiError> {
    let Some(lp) = of_run(ctx.conn(), &run.id)? else {
        return Ok(());
    };
    let at = now_rfc3339();
    ctx.conn().execute(
        "UPDATE loops SET current_run = NULL, updated = ?1 WHERE id = ?2",
        params![at, lp.id],
    )?;
    let self_paced = lp.interval_seconds.is_none();
    match ended {
        RunStatus::Failed | RunStatus::Interrupted => {
            let failures = lp.failures + 1;
            ctx.conn().execute(
                "UPDATE loops SET failures = ?1 WHERE id = ?2",
                params![failures, lp.id],
            )?;
            if failures >= FAILURES_MAX && lp.state == LoopState::Active {
                ctx.conn().execute(
                    "UPDATE loops SET state = ?1, next_at = NULL, reason = ?2 WHERE id = ?3",
                    params![
                        LoopState::Paused,
                        format!("{FAILURES_MAX} failed runs in a row: resume starts it again"),
                        lp.id
                    ],
                )?;
            } else if self_paced && lp.state == LoopState::Active && lp.next_at.is_none() {
                // A self-paced loop whose run failed tries again when free.
                ctx.conn().execute(
                    "UPDATE loops SET next_at = 0, reason = 'its last run failed' WHERE id = ?1",
                    [&lp.id],
                )?;
            }
        }
        RunStatus::Stopped if self_paced && lp.state == LoopState::Active => {
            ctx.conn().execute(
                "UPDATE loops SET state = ?1, next_at = NULL, reason = 'its run was stopped' \
                 WHERE id = ?2",
                params![LoopState::Paused, lp.id],
            )?;
        }
        RunStatus::Done | RunStatus::Paused => {
            ctx.conn()
                .execute("UPDATE loops SET failures = 0 WHERE id = ?1", [&lp.id])?;
            if self_paced && lp.state == LoopState::Active && lp.next_at.is_none() {
                end(
                    ctx,
                    &lp,
                    "its run called neither schedule_next nor loop_done",
                )?;
                return Ok(());
            }
        }
        _ => {}
    }
    announce(ctx, &lp.conversation_id)
}

/// What a loop tool call of run `run_id` asks.
pub enum Asked<'a> {
    /// Run again at unix ms `at`; `why` is what it waits for.
    Next {
        at: i64,
        why: &'a str,
    },
    Done {
        why: &'a str,
    },
}

/// Takes schedule_next or loop_done for the self-paced loop whose run
/// `run_id` is: `Err` says why not, for the model.
pub fn take(ctx: &mut Ctx, run_id: &str, asked: Asked) -> Result<Result<(), String>, ApiError> {
    let Some(lp) = of_run(ctx.conn(), run_id)? else {
        return Ok(Err(
            "this run was not started by a loop: only a loop's run schedules it".into(),
        ));
    };
    if let Some(every) = &lp.interval {
        return Ok(Err(format!(
            "the loop that started this run runs every {every}: it is not self-paced"
        )));
    }
    if lp.state != LoopState::Active {
        return Ok(Err(format!(
            "the loop that started this run is {}",
            lp.state
        )));
    }
    match asked {
        Asked::Next { at, why } => {
            ctx.conn().execute(
                "UPDATE loops SET next_at = ?1, wait = ?2, updated = ?3 WHERE id = ?4",
                params![at, why, now_rfc3339(), lp.id],
            )?;
            announce(ctx, &lp.conversation_id)?;
        }
        Asked::Done { why } => end(ctx, &lp, why)?,
    }
    Ok(Ok(()))
}
