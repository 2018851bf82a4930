//! Agents mode's workers: a `task` call of the main agent starts a worker
//! (a sub-agent row with its task's number, run with the chat's tools and
//! places and a fresh context) and waits for its report. One worker runs at
//! a time (the main agent waits on it), `task::PER_RUN_MAX` a run. A report
//! with a field missing is asked for once more, then built from the record;
//! chatd's own check goes under it, the whole is kept in the workspace and
//! the main agent reads `report::READ_CHARS` of it. A worker stopped with its
//! chat or cut off is left open: Continue of the chat resumes it first.

use std::time::Duration;

use tandem_shared::http::ApiError;
use tandem_shared::sync::lock;
use tokio::sync::{watch, OwnedSemaphorePermit};

use super::report::{self, Report, Source};
use super::{EndRequest, Outcome, Runs};
use crate::history::Place;
use crate::model::{Run, Subagent};
use crate::store::queries::{self, Trashed};
use crate::store::runs::insert_run;
use crate::store::subagents::{self, End, NewSub};
use crate::store::tasks::{self, Worker};
use crate::tools::task::{self, Args};
use crate::words::{RunMode, SubagentState};

/// Model calls a worker's run makes, at most (the last one writes its report).
pub const MAX_STEPS: u32 = 40;
/// A result's characters the main agent reads, at most.
pub const MAIN_RESULT_CHARS: usize = 12_000;
/// Lines one read_file of the main agent shows, at most.
const MAIN_READ_LINES: u64 = 200;
/// How long a stopped worker is given to end.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// How a `task` call went.
pub(super) enum Tasked {
    /// No worker started: the call's result says why.
    Refused(String),
    /// Its report is the call's result, written by the worker's end.
    Answered,
    /// The main agent was stopped, and its worker with it (left open).
    Stopped,
    /// chatd stops: the call stays open for Continue.
    Left,
    /// The worker was cut off (left open): the chat ends interrupted.
    Interrupted(String),
    /// It had ended: its stored report is the call's result.
    Report(String),
}

/// Where task `n` of `chat` keeps its whole report in the workspace (in
/// the box's shared folder, under the chat's id: other chats number theirs).
pub fn report_path(folders: &crate::folders::Folders, chat: &str, n: i64) -> String {
    let dir = crate::workspace::TANDEM_DIR;
    if folders.is_shared(chat) {
        format!("{dir}/tasks/{chat}-{n}/report.md")
    } else {
        format!("{dir}/tasks/{n}/report.md")
    }
}

impl Runs {
    /// Runs one `task` call of the main agent's `run`: starts its worker,
    /// or resumes the one it started (Continue), and waits for the report.
    pub(super) async fn task_call(
        &self,
        run: &Run,
        call_id: &str,
        arguments: &str,
        slot: &mut Option<OwnedSemaphorePermit>,
        stop: &mut watch::Receiver<EndRequest>,
    ) -> Result<Tasked, ApiError> {
        let (parent, call) = (run.conversation_id.clone(), call_id.to_string());
        let earlier = self
            .inner
            .store
            .read(move |conn| tasks::of_call(conn, &parent, &call))
            .await?;
        let sub_id = match earlier {
            // It ended while no run of the chat waited: its report is the call's now.
            Some(sub) if sub.state != SubagentState::Running => {
                return Ok(Tasked::Report(handed(&sub)))
            }
            Some(sub) => {
                // Its report goes to this run, whether it works on or is resumed.
                self.resume_worker(&sub, &run.id, !self.is_live(&sub.id))
                    .await?;
                sub.id
            }
            None => {
                let args = match Args::parse(arguments) {
                    Ok(args) => args,
                    Err(why) => return Ok(Tasked::Refused(format!("refused: {why}"))),
                };
                match self.start_worker(run, call_id, &args).await? {
                    Ok(id) => id,
                    Err(why) => return Ok(Tasked::Refused(format!("refused: {why}"))),
                }
            }
        };
        // The worker takes the engine slot while the main agent waits.
        slot.take();
        let waited = self.wait_for_worker(run, &sub_id, stop).await?;
        if let Tasked::Answered = waited {
            // Its end answers the call; were it handed back elsewhere, the
            // stored report answers it here.
            let (parent, id, call) = (
                run.conversation_id.clone(),
                sub_id.clone(),
                call_id.to_string(),
            );
            let unanswered = self
                .inner
                .store
                .read(move |conn| {
                    let sub = subagents::one(conn, &parent, &id)?;
                    let answered = subagents::answered(conn, &parent, &call)?;
                    Ok((!answered).then(|| handed(&sub)))
                })
                .await?;
            if let Some(report) = unanswered {
                return Ok(Tasked::Report(report));
            }
        }
        Ok(waited)
    }

    /// Starts a worker on `args`: its message holds the task, the brief,
    /// the plan and the person's words that started the run.
    async fn start_worker(
        &self,
        run: &Run,
        call_id: &str,
        args: &Args,
    ) -> Result<Result<String, String>, ApiError> {
        let root = self.workspace_root(&run.conversation_id);
        let plan = tokio::task::spawn_blocking(move || plan_of(&root))
            .await
            .unwrap_or_default();
        let place = Place::of(&self.inner.folders, &run.conversation_id).key;
        let parent_id = run.conversation_id.clone();
        let (run, call_id, args) = (run.clone(), call_id.to_string(), args.clone());
        let made = self
            .inner
            .store
            .write(move |ctx| {
                if tasks::started_in_run(ctx.conn(), &run.id)? >= task::PER_RUN_MAX {
                    return Ok(Err(format!(
                        "this run started {} workers, the most one run may; tell the person \
                         what is done and what is left",
                        task::PER_RUN_MAX
                    )));
                }
                let parent =
                    queries::conversation(ctx.conn(), &run.conversation_id, Trashed::Include)?;
                let n = tasks::next_n(ctx.conn(), &parent.id)?;
                let words = words_of(ctx.conn(), &parent.id)?;
                let message = worker_message(n, &args, &plan, &words);
                let start_rev = subagents::files_rev(ctx.conn(), &place)?;
                let key = format!("task\u{1}{}", crate::tools::spawn::task_key(&args.brief));
                let new = NewSub {
                    call_id: &call_id,
                    title: &args.title,
                    task: &args.brief,
                    key: &key,
                    tools: None,
                    wait: true,
                    place: &place,
                    agent: None,
                    worker: Some(Worker {
                        n,
                        expect: &args.expect,
                        message: &message,
                        start_rev,
                    }),
                };
                Ok(subagents::insert(ctx, &parent, &run, &new)?
                    .map(|(sub, child_run)| (sub.id, child_run.id)))
            })
            .await?;
        let (sub_id, child_run) = match made {
            Ok(made) => made,
            Err(why) => return Ok(Err(why)),
        };
        self.inner.folders.borrow(&sub_id, &parent_id);
        tracing::info!(chat = %parent_id, task = %sub_id, "worker started");
        self.spawn(child_run, sub_id.clone());
        Ok(Ok(sub_id))
    }

    /// Continue of the chat: its open worker goes on where it was cut off
    /// (a call it had begun is closed, never run again).
    async fn resume_worker(
        &self,
        sub: &Subagent,
        parent_run: &str,
        cut_off: bool,
    ) -> Result<(), ApiError> {
        let (id, parent_run) = (sub.id.clone(), parent_run.to_string());
        let run = self
            .inner
            .store
            .write(move |ctx| {
                tasks::reopen(ctx, &id, &parent_run)?;
                if !cut_off {
                    return Ok(None);
                }
                let child = queries::conversation(ctx.conn(), &id, Trashed::Include)?;
                let last = queries::last_run(ctx.conn(), &id)?;
                let origin = last
                    .as_ref()
                    .map_or(crate::words::Origin::User, |r| r.origin);
                let cut = last.as_ref().and_then(|r| r.message_id.as_deref());
                insert_run(ctx, &child, RunMode::Continue, origin, cut).map(Some)
            })
            .await?;
        let Some(run) = run else {
            return Ok(());
        };
        self.inner.folders.borrow(&sub.id, &sub.parent_id);
        tracing::info!(task = %sub.id, "worker resumed");
        self.spawn(run.id, sub.id.clone());
        Ok(())
    }

    /// Waits for the worker's end; a stop of the main agent stops it (left
    /// open for Continue).
    async fn wait_for_worker(
        &self,
        run: &Run,
        sub_id: &str,
        stop: &mut watch::Receiver<EndRequest>,
    ) -> Result<Tasked, ApiError> {
        loop {
            // Made before the look, so an end between the two still rings.
            let bell = self.inner.subagent_bell.notified();
            let ended = self.inner.task_ended.notified();
            let (parent, id) = (run.conversation_id.clone(), sub_id.to_string());
            let sub = self
                .inner
                .store
                .read(move |conn| subagents::one(conn, &parent, &id))
                .await?;
            if sub.state != SubagentState::Running {
                return Ok(Tasked::Answered);
            }
            if !self.is_live(sub_id) {
                // Looked at again: it may have ended between the two looks.
                let (parent, id) = (run.conversation_id.clone(), sub_id.to_string());
                let (sub, last) = self
                    .inner
                    .store
                    .read(move |conn| {
                        Ok((
                            subagents::one(conn, &parent, &id)?,
                            queries::last_run(conn, &id)?,
                        ))
                    })
                    .await?;
                if sub.state != SubagentState::Running {
                    return Ok(Tasked::Answered);
                }
                // Stopped with this chat (its Stop reached the worker first).
                if sub.by_parent {
                    return Ok(Tasked::Stopped);
                }
                let why = last
                    .and_then(|r| r.error)
                    .unwrap_or_else(|| "cut off".into());
                return Ok(Tasked::Interrupted(format!(
                    "the worker of task {} («{}») stopped before its report ({why}); Continue \
                     resumes it, then this chat",
                    sub.task_n.unwrap_or(0),
                    sub.title
                )));
            }
            let stopped = tokio::select! {
                _ = bell => false,
                _ = ended => false,
                _ = stop.wait_for(|r| *r == EndRequest::Stop) => true,
                _ = self.inner.shutdown.wait() => return Ok(Tasked::Left),
            };
            if stopped {
                // Held open before it stops, so Continue can take it up.
                let id = sub_id.to_string();
                self.inner
                    .store
                    .write(move |ctx| tasks::hold(ctx, &id))
                    .await?;
                self.stop(sub_id);
                self.wait_idle(sub_id, STOP_WAIT).await;
                return Ok(Tasked::Stopped);
            }
        }
    }

    /// Ends the chat's open tasks, stopped, each with a report built from
    /// the record (a live worker is stopped first): the chat goes on
    /// without them. Answers each one's call id and report's path.
    pub(super) async fn close_tasks(
        &self,
        parent: &str,
    ) -> Result<Vec<(String, String)>, ApiError> {
        let p = parent.to_string();
        let open = self
            .inner
            .store
            .read(move |conn| tasks::open_of(conn, &p))
            .await?;
        let mut closed = Vec::with_capacity(open.len());
        for sub in open {
            let id = sub.id.clone();
            // Held, so its end hands nothing to the chat's run.
            self.inner
                .store
                .write(move |ctx| tasks::hold(ctx, &id))
                .await?;
            if self.stop(&sub.id) {
                self.wait_idle(&sub.id, STOP_WAIT).await;
            }
            self.finish_task(&sub, SubagentState::Stopped, None).await?;
            let path = report_path(&self.inner.folders, parent, sub.task_n.unwrap_or(0));
            tracing::info!(chat = %parent, task = %sub.id, "open task ended: the chat went on");
            closed.push((sub.call_id, path));
        }
        Ok(closed)
    }

    /// Whether a run of `conversation_id` is live in this chatd.
    pub(super) fn is_live(&self, conversation_id: &str) -> bool {
        lock(&self.inner.active).contains_key(conversation_id)
    }

    /// A worker's run ended (not cut off by chatd's stop): its report is
    /// read, asked for again once, or built; a worker stopped with its chat
    /// or cut off stays open.
    pub(super) async fn after_task(&self, sub: &Subagent, outcome: Outcome) {
        let ended = match outcome {
            Outcome::Done | Outcome::Paused => self.report_or_ask(sub).await,
            Outcome::Stopped if sub.by_parent => Ok(()),
            Outcome::Stopped => self.finish_task(sub, SubagentState::Stopped, None).await,
            Outcome::Failed => self.finish_task(sub, SubagentState::Failed, None).await,
            // Left open: its chat ends interrupted, and Continue resumes it.
            Outcome::Interrupted => Ok(()),
        };
        if let Err(e) = ended {
            tracing::error!(task = %sub.id, status = e.status.as_u16(), "a worker's end was not written");
        }
        self.inner.subagent_bell.notify_waiters();
    }

    /// The worker's report, read from its last answer; a missing field
    /// asks once more (a new run of the worker), then chatd builds it.
    async fn report_or_ask(&self, sub: &Subagent) -> Result<(), ApiError> {
        let id = sub.id.clone();
        let (words, asks) = self
            .inner
            .store
            .read(move |conn| {
                let words = tasks::last_words(conn, &id)?;
                Ok((words, tasks::asks_and_start(conn, &id)?.0))
            })
            .await?;
        match report::parse(&words) {
            Ok(report) => {
                let source = if asks > 0 {
                    Source::AskedAgain
                } else {
                    Source::Worker
                };
                self.finish_task(sub, SubagentState::Done, Some((report, source)))
                    .await
            }
            Err(missing) if asks == 0 => {
                let (id, text) = (sub.id.clone(), report::ask_again(&missing));
                let run = self
                    .inner
                    .store
                    .write(move |ctx| {
                        tasks::count_ask(ctx, &id)?;
                        crate::store::messages::insert_message(
                            ctx,
                            &id,
                            crate::words::Role::User,
                            &text,
                            None,
                            None,
                        )?;
                        let child = queries::conversation(ctx.conn(), &id, Trashed::Include)?;
                        let origin = queries::last_run(ctx.conn(), &id)?
                            .map_or(crate::words::Origin::User, |r| r.origin);
                        insert_run(ctx, &child, RunMode::Send, origin, None)
                    })
                    .await?;
                tracing::info!(task = %sub.id, missing = missing.len(), "worker asked again for its report");
                self.spawn(run.id, sub.id.clone());
                Ok(())
            }
            Err(_) => self.finish_task(sub, SubagentState::Done, None).await,
        }
    }

    /// Ends the worker: its report (or one built from the record) with
    /// chatd's check, kept whole in the workspace, and what the main agent
    /// reads of it handed back as the call's result.
    async fn finish_task(
        &self,
        sub: &Subagent,
        state: SubagentState,
        given: Option<(Report, Source)>,
    ) -> Result<(), ApiError> {
        let n = sub.task_n.unwrap_or(0);
        let place = Place::of(&self.inner.folders, &sub.parent_id).key;
        let (id, where_) = (sub.id.clone(), place.clone());
        let record = self
            .inner
            .store
            .read(move |conn| {
                let (_, start) = tasks::asks_and_start(conn, &id)?;
                let mut record = tasks::record(conn, &id, &where_, start)?;
                record.last_words = subagents::result_of(conn, &id, state)?;
                Ok(record)
            })
            .await?;
        let (report, source) = given.unwrap_or_else(|| {
            (
                report::built(&record, state == SubagentState::Done),
                Source::Built,
            )
        });
        let whole = report::render(n, &sub.title, &report, source, &record);
        let path = report_path(&self.inner.folders, &sub.parent_id, n);
        let root = self.workspace_root(&sub.parent_id);
        let (kept_path, text) = (path.clone(), whole.clone());
        let kept = tokio::task::spawn_blocking(move || {
            let ws = crate::workspace::Workspace::open(&root).map_err(|e| e.to_string())?;
            ws.write_file(&kept_path, text.as_bytes())
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
        .await;
        let read = match kept {
            Ok(Ok(())) => report::for_main(&whole, &path),
            _ => {
                tracing::warn!(task = %sub.id, "a worker's report was not kept in the workspace");
                report::for_main(&whole, &format!("GET …/tasks/{}", sub.id))
            }
        };
        let id = sub.id.clone();
        let parent_run = self
            .inner
            .store
            .write(move |ctx| {
                tasks::keep_report(ctx, &id, &whole)?;
                let files_rev = subagents::files_rev(ctx.conn(), &place)?;
                let end = End {
                    state,
                    result: &read,
                    files_rev,
                };
                subagents::end(ctx, &id, &end)
            })
            .await?;
        tracing::info!(task = %sub.id, state = %state, "worker ended");
        if let Some(run) = parent_run {
            self.spawn(run.id, run.conversation_id);
        }
        Ok(())
    }

    /// The engine session of a worker (`chat-<chat>-task-<n>`), else the chat's.
    pub(super) async fn session_of(&self, conversation: &crate::model::Conversation) -> String {
        if let Some(parent) = &conversation.parent_id {
            if let Some(n) = self.task_n_of(&conversation.id).await {
                return format!("chat-{parent}-task-{n}");
            }
        }
        format!("chat-{}", conversation.id)
    }

    /// The model calls a worker's run may make: `MAX_STEPS`, and one with
    /// no tools once it was asked again for its report (only the report).
    pub(super) async fn worker_steps(&self, id: &str) -> u32 {
        let id = id.to_string();
        let asks = self
            .inner
            .store
            .read(move |conn| tasks::asks_and_start(conn, &id))
            .await
            .map_or(0, |(asks, _)| asks);
        if asks > 0 {
            1
        } else {
            MAX_STEPS
        }
    }

    /// The task number of a worker; `None` for any other chat.
    pub(super) async fn task_n_of(&self, conversation_id: &str) -> Option<i64> {
        if !self.inner.folders.is_subagent(conversation_id) {
            return None;
        }
        let id = conversation_id.to_string();
        self.inner
            .store
            .read(move |conn| tasks::task_n(conn, &id))
            .await
            .ok()
            .flatten()
    }
}

/// A read_file call of the main agent, held to `MAIN_READ_LINES` lines
/// (arguments that are not an object are left for the tool to refuse).
pub(super) fn main_read(arguments: &str) -> String {
    let Ok(serde_json::Value::Object(mut map)) = serde_json::from_str(arguments) else {
        return arguments.to_string();
    };
    let asked = map.get("limit").and_then(serde_json::Value::as_u64);
    let limit = asked.map_or(MAIN_READ_LINES, |l| l.min(MAIN_READ_LINES));
    map.insert("limit".into(), limit.into());
    serde_json::Value::Object(map).to_string()
}

/// An ended worker's report as its call's result, headed as its end hands it.
fn handed(sub: &Subagent) -> String {
    format!(
        "{}\n\n{}",
        subagents::headline(sub),
        sub.result.as_deref().unwrap_or("(no report was kept)")
    )
}

/// The chat's todo list as the worker reads it ("" when there is none).
fn plan_of(root: &std::path::Path) -> String {
    let Ok(text) = std::fs::read_to_string(root.join(crate::tools::todo::TODOS_PATH)) else {
        return String::new();
    };
    serde_json::from_str::<Vec<crate::tools::todo::Todo>>(&text)
        .map(|todos| crate::tools::todo::render(&todos))
        .unwrap_or_default()
}

/// The person's last words in the chat (a sub-agent's result, a message
/// with a card, is not theirs), with their attachments by name and path.
fn words_of(conn: &rusqlite::Connection, chat: &str) -> Result<String, ApiError> {
    let conversation = queries::conversation(conn, chat, Trashed::Include)?;
    let path = queries::path_to(conn, chat, conversation.head_id.as_deref())?;
    let Some(m) = path
        .iter()
        .rev()
        .find(|m| m.role == crate::words::Role::User && m.card.is_none())
    else {
        return Ok(String::new());
    };
    let mut words = m.text.clone();
    for a in m
        .attachments
        .as_ref()
        .and_then(|a| a.as_array())
        .into_iter()
        .flatten()
    {
        let name = a["name"].as_str().unwrap_or("");
        let path = a["path"].as_str().unwrap_or("");
        words.push_str(&format!("\n[attached: {name} at {path}]"));
    }
    Ok(words)
}

/// A worker's first message.
fn worker_message(n: i64, args: &Args, plan: &str, words: &str) -> String {
    let plan = if plan.trim().is_empty() {
        "(none)".to_string()
    } else {
        plan.trim_end().to_string()
    };
    format!(
        "Task {n}: {}\n\n{}\n\nExpected back: {}\n\nThe plan so far:\n{plan}\n\nThe person's \
         message this work answers, word for word (the brief scopes it; do only the brief's \
         part):\n{words}",
        args.title, args.brief, args.expect
    )
}
