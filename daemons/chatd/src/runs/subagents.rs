//! Sub-agents (`spawn_agent`): a call starts a chat of kind `subagent` that
//! works in its parent's places with the parent's tools or fewer, its mode
//! and rules held to the parent's (`consent.rs`), and either waits for its
//! result or goes on while it works in the background. The end of a
//! sub-agent's run ends its row and hands the result to the parent in one
//! job (`store::subagents::end`); a stop or a failed turn of the parent
//! stops its sub-agents.

use std::time::Duration;

use serde_json::Value;
use tandem_shared::http::ApiError;
use tokio::sync::{watch, OwnedSemaphorePermit};

use super::{EndRequest, Outcome, Runs};
use crate::agents::Agent;
use crate::history::Place;
use crate::model::Run;
use crate::store::queries::{self, Trashed};
use crate::store::subagents::{self, End, NewSub};
use crate::store::tool_groups;
use crate::tools::spawn::{self, Args};
use crate::words::{SubagentState, ToolGroup};

/// How long a stopped sub-agent's run is given to end before its parent
/// goes on without waiting further.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// How a `spawn_agent` call went.
pub(super) enum Spawned {
    /// Not started: the call's result says why.
    Refused(String),
    /// Started in the background: the call's result says so.
    Started(String),
    /// It ended and its result is the call's, written by the end's job.
    Answered,
    /// The parent was stopped while it waited (the sub-agent was stopped too).
    Stopped,
    /// chatd stops: the call stays open; the next start moves it to the background.
    Left,
}

impl Runs {
    /// Runs one `spawn_agent` call of `run`; `offered` is the tools array
    /// the parent's model was offered (the most a sub-agent may have).
    pub(super) async fn spawn_call(
        &self,
        run: &Run,
        call_id: &str,
        arguments: &str,
        offered: &Value,
        slot: &mut Option<OwnedSemaphorePermit>,
        stop: &mut watch::Receiver<EndRequest>,
    ) -> Result<Spawned, ApiError> {
        if self.inner.folders.is_subagent(&run.conversation_id) {
            return Ok(Spawned::Refused(
                "refused: a sub-agent cannot start sub-agents; do the task yourself".to_string(),
            ));
        }
        let args = match Args::parse(arguments) {
            Ok(args) => args,
            Err(why) => return Ok(Spawned::Refused(format!("refused: {why}"))),
        };
        let names: Vec<&str> = offered
            .as_array()
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|t| t["function"]["name"].as_str())
                    .filter(|n| *n != spawn::NAME && *n != spawn::LIST_NAME)
                    .collect()
            })
            .unwrap_or_default();
        let agent = match &args.agent {
            None => None,
            Some(word) => match self.saved_agent(&run.conversation_id, word).await? {
                Ok(agent) => match self.inner.folders.fits(
                    &run.conversation_id,
                    &agent.name,
                    agent.folder.as_ref(),
                ) {
                    Ok(()) => Some(agent),
                    Err(why) => return Ok(Spawned::Refused(format!("refused: {why}"))),
                },
                Err(why) => return Ok(Spawned::Refused(format!("refused: {why}"))),
            },
        };
        if let Some(tools) = &args.tools {
            let unknown: Vec<String> = tools
                .iter()
                .filter(|t| !names.contains(&t.as_str()))
                .map(|t| t.chars().take(60).collect())
                .collect();
            if !unknown.is_empty() {
                return Ok(Spawned::Refused(format!(
                    "refused: `tools` names tools this chat does not have ({}); a sub-agent gets \
                     at most yours: {}",
                    unknown.join(", "),
                    names.join(", ")
                )));
            }
        }
        let chat_runs = names.contains(&"bash");
        let subset_runs = match &agent {
            Some(agent) => agent.grants("bash"),
            None => args
                .tools
                .as_ref()
                .is_none_or(|t| t.iter().any(|n| n == "bash")),
        };
        if !(chat_runs && subset_runs) && spawn::asks_to_run(&args.task) {
            let why = if chat_runs && agent.is_some() {
                "that agent is not granted bash"
            } else if chat_runs {
                "the tools you named leave out bash"
            } else {
                "this chat cannot run commands (no bash), so a sub-agent could not either"
            };
            return Ok(Spawned::Refused(format!(
                "refused: the task asks to run something, and {why}; no sub-agent started. Give \
                 it a task it can do by reading and writing files, or ask the person to run it."
            )));
        }
        // A saved agent gets what it grants within what this chat has now.
        let within: Option<Vec<String>> = agent
            .as_ref()
            .map(|_| names.iter().map(|n| n.to_string()).collect());
        let made = self
            .make_subagent(run, call_id, &args, agent.as_ref(), within)
            .await?;
        let (sub_id, child_run) = match made {
            Ok(made) => made,
            Err(why) => return Ok(Spawned::Refused(format!("refused: {why}"))),
        };
        self.inner.folders.borrow(&sub_id, &run.conversation_id);
        self.inner
            .folders
            .ran_with(&sub_id, agent.as_ref().map(|a| a.id.as_str()));
        tracing::info!(run = %run.id, subagent = %sub_id, wait = args.wait, "sub-agent started");
        self.spawn(child_run, sub_id.clone());
        if !args.wait {
            return Ok(Spawned::Started(format!(
                "started the sub-agent {sub_id} («{}») in the background; its result will come \
                 as a message. Go on with other work meanwhile.",
                spawn::title_as(agent.as_ref().map(|a| a.name.as_str()), &args.task)
            )));
        }
        // It needs an engine slot; a waiting parent holds none.
        slot.take();
        self.wait_for(run, &sub_id, stop).await
    }

    /// The saved agent `word` names, when this chat may start it: saved
    /// agents switched on for it (asked again at each call) and the agent
    /// found by id or name. Else the sentence the call is refused with.
    async fn saved_agent(&self, chat: &str, word: &str) -> Result<Result<Agent, String>, ApiError> {
        let (chat, word) = (chat.to_string(), word.to_string());
        self.inner
            .store
            .read(move |conn| {
                if !tool_groups::is_on(conn, &chat, ToolGroup::SavedAgents)? {
                    return Ok(Err(
                        "saved agents are switched off for this chat; the person can \
                         switch them on in the chat's tools, or you can do the task with \
                         spawn_agent without `agent`"
                            .to_string(),
                    ));
                }
                Ok(match crate::agents::named(conn, &word)? {
                    Ok(Some(agent)) => Ok(agent),
                    Ok(None) => Err(format!(
                        "{} (list_agents lists them)",
                        crate::agents::none_named(&word, &crate::agents::list(conn)?)
                    )),
                    Err(why) => Err(why),
                })
            })
            .await
    }

    /// Makes the sub-agent's rows in one job: its id and first run, or why not.
    async fn make_subagent(
        &self,
        run: &Run,
        call_id: &str,
        args: &Args,
        agent: Option<&Agent>,
        within: Option<Vec<String>>,
    ) -> Result<Result<(String, String), String>, ApiError> {
        let place = Place::of(&self.inner.folders, &run.conversation_id).key;
        let (run, call_id, args) = (run.clone(), call_id.to_string(), args.clone());
        let agent = agent.cloned();
        self.inner
            .store
            .write(move |ctx| {
                let parent =
                    queries::conversation(ctx.conn(), &run.conversation_id, Trashed::Include)?;
                let title = spawn::title_as(agent.as_ref().map(|a| a.name.as_str()), &args.task);
                // Another agent on the same words is another task.
                let key = match &agent {
                    Some(agent) => format!("{}\u{1} {}", agent.id, spawn::task_key(&args.task)),
                    None => spawn::task_key(&args.task),
                };
                let new = NewSub {
                    call_id: &call_id,
                    title: &title,
                    task: &args.task,
                    key: &key,
                    tools: within.as_deref().or(args.tools.as_deref()),
                    wait: args.wait,
                    place: &place,
                    agent: agent.as_ref(),
                    worker: None,
                };
                Ok(subagents::insert(ctx, &parent, &run, &new)?
                    .map(|(sub, child_run)| (sub.id, child_run.id)))
            })
            .await
    }

    /// Waits for a sub-agent the parent's call waits on.
    async fn wait_for(
        &self,
        run: &Run,
        sub_id: &str,
        stop: &mut watch::Receiver<EndRequest>,
    ) -> Result<Spawned, ApiError> {
        loop {
            // Made before the look, so an end between the two still rings.
            let bell = self.inner.subagent_bell.notified();
            if self.state_of(&run.conversation_id, sub_id).await? != SubagentState::Running {
                return Ok(Spawned::Answered);
            }
            let stopped = tokio::select! {
                _ = bell => false,
                _ = stop.wait_for(|r| *r == EndRequest::Stop) => true,
                _ = self.inner.shutdown.wait() => return Ok(Spawned::Left),
            };
            if stopped {
                // Stopped with its parent: what it had is the call's result.
                self.stop(sub_id);
                self.wait_idle(sub_id, STOP_WAIT).await;
                return Ok(Spawned::Stopped);
            }
        }
    }

    /// A list_agents call: the saved agents, `spawn::LIST_MAX` at most
    /// (offered only where saved agents are switched on).
    pub(super) async fn list_agents_call(
        &self,
        chat: &str,
    ) -> Result<crate::tools::ToolOutput, ApiError> {
        let mut agents = self.inner.store.read(crate::agents::list).await?;
        // One this chat could not start is not listed.
        agents.retain(|a| {
            self.inner
                .folders
                .fits(chat, &a.name, a.folder.as_ref())
                .is_ok()
        });
        let text = spawn::list_text(&agents);
        let bytes = text.len() as u64;
        let summary = format!("{} saved agents", agents.len().min(spawn::LIST_MAX));
        Ok(crate::tools::ToolOutput::ok(text, summary, bytes))
    }

    async fn state_of(&self, parent: &str, sub_id: &str) -> Result<SubagentState, ApiError> {
        let (parent, id) = (parent.to_string(), sub_id.to_string());
        self.inner
            .store
            .read(move |conn| Ok(subagents::one(conn, &parent, &id)?.state))
            .await
    }

    /// A sub-agent's run ended (not cut off by a stop of chatd): its row
    /// ends and the result goes to the parent.
    pub(super) async fn after_subagent(&self, sub_id: &str, outcome: Outcome) {
        let id = sub_id.to_string();
        let worker = self
            .inner
            .store
            .read(move |conn| crate::store::tasks::worker(conn, &id))
            .await;
        if let Ok(Some(worker)) = worker {
            return self.after_task(&worker, outcome).await;
        }
        let state = match outcome {
            Outcome::Done | Outcome::Paused => SubagentState::Done,
            Outcome::Stopped => SubagentState::Stopped,
            Outcome::Failed => SubagentState::Failed,
            // Cut off by chatd's stop: the next start takes it up again.
            Outcome::Interrupted if self.inner.shutdown.is_begun() => return,
            // The engine stayed away past the retry window: it ends here.
            Outcome::Interrupted => SubagentState::Failed,
        };
        let place = Place::of(&self.inner.folders, sub_id).key;
        let id = sub_id.to_string();
        let ended = self
            .inner
            .store
            .write(move |ctx| {
                let result = subagents::result_of(ctx.conn(), &id, state)?;
                let files_rev = subagents::files_rev(ctx.conn(), &place)?;
                let end = End {
                    state,
                    result: &result,
                    files_rev,
                };
                subagents::end(ctx, &id, &end)
            })
            .await;
        match ended {
            Ok(Some(parent_run)) => {
                tracing::info!(subagent = %sub_id, state = %state, "sub-agent ended");
                self.spawn(parent_run.id, parent_run.conversation_id)
            }
            Ok(None) => tracing::info!(subagent = %sub_id, state = %state, "sub-agent ended"),
            // The row stays running: the next start ends it from its run.
            Err(e) => {
                tracing::error!(subagent = %sub_id, status = e.status.as_u16(), "a sub-agent's end was not written")
            }
        }
        self.inner.subagent_bell.notify_waiters();
    }

    /// Stops the chat's running sub-agents, marked as stopped with it (no
    /// result handed back from the background). Answers their ids.
    pub async fn stop_subagents(&self, parent: &str) -> Result<Vec<String>, ApiError> {
        let p = parent.to_string();
        let ids = self
            .inner
            .store
            .write(move |ctx| subagents::mark_by_parent(ctx, &p))
            .await?;
        for id in &ids {
            self.stop(id);
        }
        Ok(ids)
    }

    /// Stops one sub-agent; what it had reaches its parent like any end.
    /// One whose row says running with no run task live (its run's end was
    /// never written) is ended here.
    pub async fn stop_subagent(&self, sub_id: &str) {
        if self.stop(sub_id) {
            self.wait_idle(sub_id, STOP_WAIT).await;
        } else {
            self.after_subagent(sub_id, Outcome::Stopped).await;
        }
    }
}
