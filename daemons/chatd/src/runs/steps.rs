//! A run's tool calls: each one decided by the chat's permission mode and
//! rules, asked on a stored consent card when it must be, run on the chat's
//! workspace, and answered with a `tool` message. A run waiting for a card
//! gives its engine slot back.

use serde_json::json;
use tandem_shared::http::ApiError;
use tokio::sync::{watch, OwnedSemaphorePermit};

use super::brief::Chat;
use super::consent::{Answer, Card, HOST_ASK_REASON};
use super::files::CallFiles;
use super::kept::KeptPath;
use super::mcp::McpEnd;
use super::subagents::Spawned;
use super::tasks::Tasked;
use super::{EndRequest, Outcome, Runs, StepEnd};
use crate::config::HostExec;
use crate::kinds::EventKind;
use crate::model::{Message, Run};
use crate::permissions::{self, Approval, Call, Decision, Rule};
use crate::store::messages::{self, ToolResult};
use crate::store::queries;
use crate::tools::{self, ToolContext};
use crate::words::{Choice, MessageStatus, Origin, Role, RunStatus, ToolPolicy};
use crate::workspace::Workspace;

/// One call of an answer, as the model sent it.
struct ToolCall {
    id: String,
    name: String,
    arguments: String,
}

/// A call cleared to run: what it is, how it was approved, and the room its
/// result gets in the request.
struct AllowedCall<'a> {
    run: &'a Run,
    call: &'a ToolCall,
    /// The call in one line, for `tool.started`.
    summary: &'a str,
    approved: Approval,
    budget: usize,
    /// What the call may change, for its change set.
    files: Option<CallFiles<'a>>,
}

/// How a command on this machine ended for the run.
enum HostEnd {
    Done,
    Stopped,
    Shutdown,
}

/// The `command` of a bash call's arguments ("" when there is none: the
/// call then fails on its arguments, and asks nothing meanwhile).
fn command_of(arguments: &str) -> String {
    serde_json::from_str::<serde_json::Value>(arguments)
        .ok()
        .and_then(|v| v["command"].as_str().map(str::to_string))
        .unwrap_or_default()
}

impl Runs {
    /// Runs the calls of the chat's last answer that have no result yet.
    pub(super) async fn run_tool_calls(
        &self,
        run: &Run,
        kept: &mut KeptPath,
        slot: &mut Option<OwnedSemaphorePermit>,
        stop: &mut watch::Receiver<EndRequest>,
    ) -> Result<StepEnd, ApiError> {
        // The path, the run and the chat in one trip to the store.
        let (rid, cid) = (run.id.clone(), run.conversation_id.clone());
        let (stored, chat) = kept
            .current_and(&self.inner.store, move |conn| {
                Ok((queries::run(conn, &rid)?, Chat::read(conn, &cid)?))
            })
            .await?;
        let chat = self.placed(chat);
        let calls = unanswered(kept.path());
        // A run resumed while `waiting` stays so (its card shown) until a
        // call runs without asking: the mode or the rules may have changed.
        let mut waiting = stored.status == RunStatus::Waiting;
        if calls.is_empty() {
            if waiting {
                self.set_running(run).await?;
            }
            return Ok(StepEnd::Go);
        }
        // The step's results share the room the request leaves.
        let brief = self
            .brief_of(&chat, &run.model, super::mcp::Lists::Open)
            .await;
        let sizes = brief.window;
        // Sized from the stored messages (a written file counted whole:
        // on the safe side) without building the request.
        let used = brief.fixed_tokens() + kept.transcript_tokens();
        let mut budget = sizes.result_chars(used, calls.len());
        let main = chat.part == super::brief::Part::Main;
        if main {
            budget = budget.min(super::tasks::MAIN_RESULT_CHARS);
        }
        let workspace_root = self.workspace_root(&run.conversation_id);

        let agent = self.agent_of(&run.conversation_id).await?;
        for mut call in calls {
            if main && call.name == "read_file" {
                call.arguments = super::tasks::main_read(&call.arguments);
            }
            if *stop.borrow() == EndRequest::Stop {
                return Ok(StepEnd::End(Outcome::Stopped, None));
            }
            // An MCP tool is offered only from connectors the agent names.
            let mcp_tool = brief.mcp.find(&call.name).cloned();
            let granted = mcp_tool.is_some() || agent.as_ref().is_none_or(|a| a.grants(&call.name));
            let shown = call.name.chars().take(60).collect::<String>();
            let refused = match &agent {
                Some(agent) if !granted => Some(format!(
                    "the agent {:?} may not use `{shown}` here; its tools are: {}",
                    agent.name,
                    agent.tools.as_deref().unwrap_or_default().join(", ")
                )),
                // A sub-agent has its call's tools, never spawn_agent.
                _ => chat.refusal_with(&call.name, mcp_tool.as_ref()),
            };
            if let Some(text) = refused {
                self.record_failure(run, &call, &text, "not granted", text.len() as u64)
                    .await?;
                continue;
            }
            let (mode, mut rules, policies) = self.permissions_of(&run.conversation_id).await?;
            let summary = match &mcp_tool {
                Some(t) => mcp_summary(t, &call.arguments),
                None => tools::summarize_call(&call.name, &call.arguments),
            };
            let effect = match self.inner.registry.get(&call.name).map(|s| s.effect) {
                Some(tools::Effect::Read) => permissions::Effect::Read,
                Some(tools::Effect::Write) => permissions::Effect::Write,
                Some(tools::Effect::Command) => permissions::Effect::Command,
                // A server's read-only hint is its word: `auto` runs such a
                // tool, and asks for every other.
                None if mcp_tool.as_ref().is_some_and(|t| t.read_only) => permissions::Effect::Read,
                None if mcp_tool.is_some() => permissions::Effect::Write,
                None => {
                    let mut known = self.inner.registry.names().join(", ");
                    for name in brief.mcp.names() {
                        known.push_str(", ");
                        known.push_str(name);
                    }
                    let text = format!(
                        "there is no tool `{}` here; the tools are: {known}",
                        call.name.chars().take(60).collect::<String>()
                    );
                    self.record_failure(run, &call, &text, "unknown tool", text.len() as u64)
                        .await?;
                    continue;
                }
            };
            // bash in the chat's sandbox is the chat's own; without one it
            // runs on this machine, and host_exec decides.
            let sandboxed = call.name == "bash" && self.inner.sandboxes.is_some();
            let host = call.name == "bash" && !sandboxed;
            let command = (host || sandboxed).then(|| command_of(&call.arguments));
            let workspace_text = workspace_root.to_string_lossy().to_string();
            let host_exec = self.inner.config.host_exec();
            // An MCP tool's rules go by its server and its own name, never
            // by the offered name, which another server's tool may take.
            let rule_name = mcp_tool.as_ref().map(|t| t.rule_name());
            let permission = Call {
                tool: rule_name.as_deref().unwrap_or(&call.name),
                effect,
                command: command.as_deref(),
                // The workspace tools stay inside the chat's workspace; the
                // web tools read, and egressd asks the person for each new
                // host, so chatd does not ask a second time. A host command
                // runs in the chat's workspace: with host_exec = on it
                // counts as the chat's own, and `auto` runs it.
                inside: match &mcp_tool {
                    // An MCP tool acts on the server's side, outside the
                    // workspace, unless the server says it only reads.
                    Some(t) => t.read_only,
                    None => !host || host_exec == HostExec::On,
                },
                workspace_root: host.then_some(workspace_text.as_str()),
            };
            let policy = policies.get(permission.tool).copied();
            // `always` is an allow rule for any use: a deny rule, plan mode
            // and an rm at / still win.
            if policy == Some(ToolPolicy::Always) {
                rules.push(Rule::allow(permission.tool, ""));
            }
            let mut decision = permissions::decide(mode, &permission, &rules);
            // host_exec = ask: every command on this machine asks, unless a
            // saved rule allows it ("Always on this instance").
            if host && host_exec == HostExec::Ask {
                if let Decision::Run(Approval::Auto | Approval::Yolo) = decision {
                    decision = Decision::Ask {
                        reason: HOST_ASK_REASON.to_string(),
                    };
                }
            }
            // `ask` asks over the mode; an allow rule the person saved
            // (Always on such a card) is their answer for good.
            if let (Some(ToolPolicy::Ask), Decision::Run(Approval::Auto | Approval::Yolo))
            | (Some(ToolPolicy::Ask), Decision::Ask { .. }) = (policy, &decision)
            {
                decision = policy_ask(&shown, run.origin);
            }
            if waiting && !matches!(decision, Decision::Ask { .. }) {
                self.set_running(run).await?;
                waiting = false;
            }
            let approved = match decision {
                Decision::Run(approval) => approval,
                Decision::Refuse { reason } => {
                    let text = format!("refused: {reason}; this call did not run");
                    self.record_failure(run, &call, &text, &text, 0).await?;
                    continue;
                }
                Decision::Ask { reason } => {
                    // The slot goes back while a person decides.
                    slot.take();
                    let card = if host {
                        // The whole command (to 2,000 characters): the
                        // person approves what will run, not a summary.
                        let whole: String = command
                            .as_deref()
                            .unwrap_or("")
                            .chars()
                            .take(2000)
                            .collect();
                        Card::host(&whole, self.inner.config.host_card_wait_s)
                    } else {
                        Card::tool(&summary)
                    };
                    match self
                        .ask(run, (&call.id, &call.name), &card, &reason, stop)
                        .await?
                    {
                        Answer::Stopped => return Ok(StepEnd::End(Outcome::Stopped, None)),
                        Answer::Shutdown => return Ok(StepEnd::Left),
                        Answer::Expired => {
                            let text = "nobody answered the card in time; the command \
                                        did not run. Ask the person, or go on without it.";
                            self.record_failure(run, &call, text, "not answered", 0)
                                .await?;
                            continue;
                        }
                        Answer::Decided(choice) => match choice {
                            Choice::Deny => {
                                let text = "the person declined this call; it did not run. \
                                            Ask them what they want instead, or go on without it.";
                                self.record_failure(run, &call, text, "declined", 0).await?;
                                continue;
                            }
                            Choice::Always if host => {
                                // "Always on this instance": this exact
                                // command line, in every chat of this chatd
                                // (never its first word: `python3 x.py`
                                // must not let `python3 -c …` through).
                                let rule = Rule::exact("bash", command.as_deref().unwrap_or(""));
                                self.save_rules(None, vec![rule]).await?;
                                Approval::User
                            }
                            Choice::Always => {
                                // A sub-agent's "always" is its parent's rule.
                                let rules = permissions::rules_for_always(&permission);
                                self.save_rules(Some(&chat.home), rules).await?;
                                Approval::User
                            }
                            Choice::Once => Approval::User,
                        },
                    }
                }
            };
            let goal_tool = tools::goal::is_goal_tool(&call.name);
            let skill_tool = call.name == tools::skill::NAME;
            if goal_tool || skill_tool || tools::loops::is_loop_tool(&call.name) {
                self.tool_started(run, &call, &summary, approved).await?;
                let taken = if goal_tool {
                    self.goal_call(run, &call.name, &call.arguments).await?
                } else if skill_tool {
                    let (home, args) = (&chat.home, &call.arguments);
                    self.skill_call(home, args, &brief.tools).await?
                } else {
                    self.loop_call(run, &call.name, &call.arguments).await?
                };
                match taken {
                    Ok(text) => {
                        let output = tools::ToolOutput::ok(text, summary, 0);
                        self.record_result(run, &call, output, None).await?
                    }
                    Err(text) => self.record_failure(run, &call, &text, "refused", 0).await?,
                }
                continue;
            }
            if call.name == tools::spawn::LIST_NAME {
                self.tool_started(run, &call, &summary, approved).await?;
                let output = self.list_agents_call(&run.conversation_id).await?;
                self.record_result(run, &call, output, None).await?;
                continue;
            }
            if call.name == tools::task::NAME {
                self.tool_started(run, &call, &summary, approved).await?;
                match self
                    .task_call(run, &call.id, &call.arguments, slot, stop)
                    .await?
                {
                    Tasked::Refused(text) => {
                        self.record_failure(run, &call, &text, "refused", 0).await?
                    }
                    Tasked::Answered => {}
                    Tasked::Stopped => return Ok(StepEnd::End(Outcome::Stopped, None)),
                    Tasked::Left => return Ok(StepEnd::Left),
                    Tasked::Interrupted(why) => {
                        return Ok(StepEnd::End(Outcome::Interrupted, Some(why)))
                    }
                    Tasked::Report(text) => {
                        let bytes = text.len() as u64;
                        let output = tools::ToolOutput::ok(text, "task report".into(), bytes);
                        self.record_result(run, &call, output, None).await?
                    }
                }
                continue;
            }
            if call.name == tools::spawn::NAME {
                self.tool_started(run, &call, &summary, approved).await?;
                let spawned = self
                    .spawn_call(run, &call.id, &call.arguments, &brief.tools, slot, stop)
                    .await?;
                match spawned {
                    Spawned::Refused(text) => {
                        self.record_failure(run, &call, &text, "refused", 0).await?
                    }
                    Spawned::Started(text) => {
                        let bytes = text.len() as u64;
                        let summary = "sub-agent in the background".to_string();
                        let output = tools::ToolOutput::ok(text, summary, bytes);
                        self.record_result(run, &call, output, None).await?
                    }
                    Spawned::Answered => {}
                    Spawned::Stopped => return Ok(StepEnd::End(Outcome::Stopped, None)),
                    Spawned::Left => return Ok(StepEnd::Left),
                }
                continue;
            }
            if let Some(tool) = &mcp_tool {
                // A server may work for minutes: the engine slot goes back.
                slot.take();
                self.tool_started(run, &call, &summary, approved).await?;
                let began = std::time::Instant::now();
                let ended = self
                    .call_mcp(&chat.home, &call.id, tool, &call.arguments, budget, stop)
                    .await;
                match ended {
                    McpEnd::Done(output, app) => {
                        self.count_call(run, &call, &output, began);
                        self.record_result(run, &call, output, app).await?;
                        continue;
                    }
                    McpEnd::Stopped(output) => {
                        self.finish_call(run, &call, output, began, None).await?;
                        return Ok(StepEnd::End(Outcome::Stopped, None));
                    }
                    McpEnd::Shutdown => {
                        // Answered now: a resumed run must not send a call
                        // that may have changed something a second time.
                        let text = "chatd stopped while the MCP server worked on this call: \
                                    whether it took effect is not known; check before calling it again";
                        let _ = self
                            .record_failure(run, &call, text, "interrupted", 0)
                            .await;
                        return Ok(StepEnd::Left);
                    }
                }
            }
            if tools::web::is_web_tool(&call.name) || host || sandboxed {
                // egressd may hold the call while a person answers its card,
                // and a command may run for minutes: the engine slot goes
                // back meanwhile.
                slot.take();
            }
            let scope = super::files::scope_of(&call.name, &call.arguments, &workspace_root);
            let held = match &scope {
                Some(scope) => self.hold_files(run, scope).await,
                None => None,
            };
            let files = scope.as_ref().map(|scope| CallFiles {
                scope,
                held: held.as_ref(),
            });
            if let Some(files) = files {
                self.files_before(run, files).await;
            }
            let allowed = AllowedCall {
                run,
                call: &call,
                summary: &summary,
                approved,
                budget,
                files,
            };
            if sandboxed {
                match self.execute_sandboxed(&allowed, stop).await? {
                    HostEnd::Done => continue,
                    HostEnd::Stopped => return Ok(StepEnd::End(Outcome::Stopped, None)),
                    HostEnd::Shutdown => return Ok(StepEnd::Left),
                }
            }
            if host {
                match self.execute_host(&allowed, &workspace_root, stop).await? {
                    HostEnd::Done => continue,
                    HostEnd::Stopped => return Ok(StepEnd::End(Outcome::Stopped, None)),
                    HostEnd::Shutdown => return Ok(StepEnd::Left),
                }
            }
            self.execute(&allowed, &workspace_root).await?;
        }
        Ok(StepEnd::Go)
    }

    /// Answers "not run" to the calls a stopped or interrupted run left, so a
    /// new run starts from a closed step instead of running them.
    pub(super) async fn close_left_calls(
        &self,
        run: &Run,
        kept: &mut KeptPath,
    ) -> Result<(), ApiError> {
        // Its open tasks end first, each with a report built from the record.
        let closed = self.close_tasks(&run.conversation_id).await?;
        let history = kept.current(&self.inner.store).await?;
        let text = if run.mode == crate::words::RunMode::Resume {
            "cut off: chatd restarted while this call ran; whether it took effect is not known, \
             so check before calling it again"
        } else {
            "not run: the run that asked for it was stopped first"
        };
        for call in unanswered(history) {
            match closed.iter().find(|(id, _)| *id == call.id) {
                Some((_, path)) => {
                    let text = format!(
                        "stopped: the chat went on without this task; what its worker did is \
                         in {path} (a report chatd built from the record)"
                    );
                    self.record_failure(run, &call, &text, "task stopped", 0)
                        .await?
                }
                None => self.record_failure(run, &call, text, "not run", 0).await?,
            }
        }
        Ok(())
    }

    /// Closes the calls a cut-off run had begun (`tool.started` is in the
    /// log) and left with no result, so Continue never runs a write or a
    /// command twice. A `task` call is not closed: Continue resumes its worker.
    pub(super) async fn close_begun_calls(
        &self,
        run: &Run,
        kept: &mut KeptPath,
    ) -> Result<(), ApiError> {
        let history = kept.current(&self.inner.store).await?;
        let open: Vec<ToolCall> = unanswered(history)
            .into_iter()
            .filter(|c| c.name != tools::task::NAME)
            .collect();
        if open.is_empty() {
            return Ok(());
        }
        let cid = run.conversation_id.clone();
        let ids: Vec<String> = open.iter().map(|c| c.id.clone()).collect();
        let begun = self
            .inner
            .store
            .read(move |conn| crate::store::queries::calls_begun(conn, &cid, &ids))
            .await?;
        let text = "cut off: this call had begun when its run was cut off, and whether it took \
                    effect is not known; it is not run again. Check before calling it again.";
        for call in open.iter().filter(|c| begun.contains(&c.id)) {
            self.record_failure(run, call, text, "cut off", 0).await?;
        }
        Ok(())
    }

    /// The chat's workspace folder: its own, or the box's shared one.
    pub fn workspace_root(&self, conversation_id: &str) -> std::path::PathBuf {
        self.inner.folders.workspace(conversation_id)
    }

    /// Runs one allowed `bash` call through hostexecd. A stop or chatd's
    /// shutdown drops the request, and hostexecd kills the command's tree.
    async fn execute_host(
        &self,
        allowed: &AllowedCall<'_>,
        workspace_root: &std::path::Path,
        stop: &mut watch::Receiver<EndRequest>,
    ) -> Result<HostEnd, ApiError> {
        let AllowedCall {
            run,
            call,
            summary,
            approved,
            budget,
            files,
        } = *allowed;
        self.tool_started(run, call, summary, approved).await?;
        let began = std::time::Instant::now();
        let Some(hostexec) = self.inner.hostexec.clone() else {
            let output = tools::ToolOutput::failed("bash", "hostexecd's client could not be made");
            self.finish_call(run, call, output, began, files).await?;
            return Ok(HostEnd::Done);
        };
        let home = self.inner.folders.home(&run.conversation_id);
        let work = hostexec.bash(&home, &call.id, &call.arguments, budget, workspace_root);
        let ended = tokio::select! {
            out = work => Ok(out),
            _ = stop.wait_for(|r| *r == EndRequest::Stop) => Err(HostEnd::Stopped),
            _ = self.inner.shutdown.wait() => Err(HostEnd::Shutdown),
        };
        match ended {
            Ok(output) => {
                self.finish_call(run, call, output, began, files).await?;
                Ok(HostEnd::Done)
            }
            Err(HostEnd::Stopped) => {
                let text = "stopped: the run was stopped while the command ran; hostexecd \
                            kills it and everything it started";
                let output = stopped_output(text.to_string(), 0);
                self.finish_call(run, call, output, began, files).await?;
                Ok(HostEnd::Stopped)
            }
            // The run is written interrupted; Continue answers the call anew.
            Err(end) => Ok(end),
        }
    }

    /// Runs one allowed `bash` call in the chat's sandbox. A stop or chatd's
    /// shutdown kills the command inside before the call is answered.
    async fn execute_sandboxed(
        &self,
        allowed: &AllowedCall<'_>,
        stop: &mut watch::Receiver<EndRequest>,
    ) -> Result<HostEnd, ApiError> {
        let AllowedCall {
            run,
            call,
            summary,
            approved,
            budget,
            files,
        } = *allowed;
        use crate::sandbox::exec::{self, Cancel};
        self.tool_started(run, call, summary, approved).await?;
        let began = std::time::Instant::now();
        let Some(sandboxes) = self.inner.sandboxes.clone() else {
            let output = tools::ToolOutput::failed("bash", "this chat has no sandbox");
            self.finish_call(run, call, output, began, files).await?;
            return Ok(HostEnd::Done);
        };
        let shutdown = self.inner.shutdown.clone();
        let cancel = async {
            tokio::select! {
                _ = stop.wait_for(|r| *r == EndRequest::Stop) => Cancel::Stop,
                _ = shutdown.wait() => Cancel::Shutdown,
            }
        };
        let home = self.inner.folders.home(&run.conversation_id);
        let (output, cancelled) =
            exec::bash(&sandboxes, &home, &call.id, &call.arguments, budget, cancel).await;
        match cancelled {
            None => {
                self.finish_call(run, call, output, began, files).await?;
                Ok(HostEnd::Done)
            }
            Some(Cancel::Stop) => {
                let text = format!(
                    "{}\nstopped: the run was stopped while the command ran; it and \
                     everything it started were killed",
                    output.text
                );
                let output = stopped_output(text, output.bytes);
                self.finish_call(run, call, output, began, files).await?;
                Ok(HostEnd::Stopped)
            }
            // The run is written interrupted; Continue answers the call anew.
            Some(Cancel::Shutdown) => Ok(HostEnd::Shutdown),
        }
    }

    /// Runs one allowed call and records its result.
    async fn execute(
        &self,
        allowed: &AllowedCall<'_>,
        workspace_root: &std::path::Path,
    ) -> Result<(), ApiError> {
        let AllowedCall {
            run,
            call,
            summary,
            approved,
            budget,
            files,
        } = *allowed;
        self.tool_started(run, call, summary, approved).await?;
        let began = std::time::Instant::now();
        let registry = self.inner.registry.clone();
        let root = workspace_root.to_path_buf();
        let documents = self.inner.documents.clone();
        let (name, arguments, call_id) =
            (call.name.clone(), call.arguments.clone(), call.id.clone());
        // The box's web search settings, read at each web call: a change
        // counts from the next search.
        let web_settings = if tools::web::is_web_tool(&name) {
            let config = self.inner.config.clone();
            let search = self
                .inner
                .store
                .read(move |conn| crate::store::meta::web_search(conn, &config))
                .await?;
            let auth = search.searxng_auth_sealed.as_deref().and_then(|sealed| {
                let owner = tools::web::search_settings::AUTH_OWNER;
                // A value that does not open (another key) is no login.
                self.inner.mcp.mcp().open_for(owner, sealed).ok()
            });
            tools::web::WebSettings::with_search(&self.inner.config, &search, auth)
        } else {
            tools::web::WebSettings::from_config(&self.inner.config)
        };
        let web = tools::web::WebAccess::new(
            web_settings,
            &self.inner.folders.home(&run.conversation_id),
            &self.inner.forward_key,
        );
        if name == crate::index::tool::NAME {
            let output = self.search_files(run, &arguments, &call_id, budget).await;
            return self.finish_call(run, call, output, began, files).await;
        }
        // The image goes through the reader process and another model of
        // the engine, not the workspace tools.
        if name == tools::describe::NAME {
            let output = self.describe_image(run, &arguments, &root, budget).await;
            return self.finish_call(run, call, output, began, files).await;
        }
        let reach = self.inner.folders.reach(&run.conversation_id);
        let mount = reach.mount().cloned();
        let output = tokio::task::spawn_blocking(move || {
            let workspace = match Workspace::open(&root) {
                Ok(w) => w.with_mount(mount.as_ref()),
                Err(e) => {
                    return tools::ToolOutput::failed(
                        &name,
                        &format!("the chat's workspace could not be opened: {}", e.kind()),
                    )
                }
            };
            let ctx = ToolContext {
                workspace: &workspace,
                call_id: &call_id,
                budget_chars: budget,
                web: Some(&web),
                documents: Some(&documents),
            };
            tools::run(&registry, &name, &arguments, &ctx)
        })
        .await
        .unwrap_or_else(|_| tools::ToolOutput::failed(&call.name, "the tool stopped unexpectedly"));
        self.finish_call(run, call, output, began, files).await
    }

    /// `tool.started`, and `tool.auto_approved` for a call nobody was asked about.
    async fn tool_started(
        &self,
        run: &Run,
        call: &ToolCall,
        summary: &str,
        approved: Approval,
    ) -> Result<(), ApiError> {
        let (rid, cid, call_id, name) = (
            run.id.clone(),
            run.conversation_id.clone(),
            call.id.clone(),
            call.name.clone(),
        );
        let started = json!({"run_id": rid, "call_id": call_id, "name": name,
                             "summary": summary, "approved": approved.as_str()});
        self.inner
            .store
            .write(move |ctx| {
                ctx.emit(&cid, EventKind::ToolStarted, started)?;
                // Every call that ran without asking is on record as such.
                if approved != Approval::User {
                    ctx.emit(
                        &cid,
                        EventKind::ToolAutoApproved,
                        json!({"run_id": rid, "call_id": call_id, "name": name, "approved": approved.as_str()}),
                    )?;
                }
                Ok(())
            })
            .await
    }

    /// A call's metrics, log line, change set, `tool` message and `tool.finished`.
    async fn finish_call(
        &self,
        run: &Run,
        call: &ToolCall,
        mut output: tools::ToolOutput,
        began: std::time::Instant,
        files: Option<CallFiles<'_>>,
    ) -> Result<(), ApiError> {
        self.count_call(run, call, &output, began);
        let mut card = None;
        if let Some(files) = files {
            let found = self.files_after(run, &call.id, &call.name, output.ok, files);
            if let Some(kept) = found.await {
                output.text.push('\n');
                output.text.push_str(&kept.line());
                if let Some(line) = self.nudge_once(run, &kept).await {
                    output.text.push('\n');
                    output.text.push_str(&line);
                }
                card = Some(kept.card());
            }
        }
        self.record_result(run, call, output, card).await
    }

    /// A finished call in the metrics and the log.
    fn count_call(
        &self,
        run: &Run,
        call: &ToolCall,
        output: &tools::ToolOutput,
        began: std::time::Instant,
    ) {
        self.inner
            .metrics
            .tool_calls
            .get_or_create(&crate::metrics::ToolLabels {
                tool: call.name.clone(),
                ok: output.ok.to_string(),
            })
            .inc();
        tracing::info!(run = %run.id, call = %call.id, tool = %call.name, ok = output.ok,
            bytes = output.bytes, ms = began.elapsed().as_millis() as u64, "tool call");
    }

    /// The `tool` message and `tool.finished` of a call that did not run or
    /// did not finish: `text` is what the model reads, `summary` the event's.
    async fn record_failure(
        &self,
        run: &Run,
        call: &ToolCall,
        text: &str,
        summary: &str,
        bytes: u64,
    ) -> Result<(), ApiError> {
        let output = tools::ToolOutput {
            ok: false,
            text: text.to_string(),
            summary: summary.to_string(),
            bytes,
        };
        self.record_result(run, call, output, None).await
    }

    /// The call's `tool` message and `tool.finished`.
    async fn record_result(
        &self,
        run: &Run,
        call: &ToolCall,
        output: tools::ToolOutput,
        card: Option<serde_json::Value>,
    ) -> Result<(), ApiError> {
        let (rid, cid, call_id) = (run.id.clone(), run.conversation_id.clone(), call.id.clone());
        let tools::ToolOutput {
            ok,
            text,
            summary,
            bytes,
        } = output;
        self.inner
            .store
            .write(move |ctx| {
                // The request builder shortens only calls that succeeded.
                let status = if ok {
                    MessageStatus::Done
                } else {
                    MessageStatus::Failed
                };
                let result = ToolResult {
                    run_id: &rid,
                    call_id: &call_id,
                    text: &text,
                    summary: &summary,
                    status,
                    card: card.as_ref(),
                };
                messages::insert_tool_message(ctx, &cid, &result)?;
                let mut finished = json!({"run_id": rid, "call_id": call_id, "ok": ok, "summary": summary, "bytes": bytes});
                match card {
                    // A page's card: the event names the page; the input
                    // and the result are read from the transcript.
                    Some(mut app) if app["kind"] == "mcp_app" => {
                        if let Some(app) = app.as_object_mut() {
                            app.remove("input");
                            app.remove("result");
                            app.remove("kind");
                        }
                        finished["app"] = app;
                    }
                    Some(card) => finished["card"] = card,
                    None => {}
                }
                ctx.emit(&cid, EventKind::ToolFinished, finished)?;
                Ok(())
            })
            .await
    }
}

/// An MCP call for its card and its line: the server, its tool and the
/// arguments (2,000 characters: a person approves what will be sent).
fn mcp_summary(tool: &crate::mcp::offer::McpTool, arguments: &str) -> String {
    let args: String = arguments.split_whitespace().collect::<Vec<_>>().join(" ");
    let args: String = args.chars().take(2000).collect();
    format!("{} · {} {args}", tool.connector_name, tool.tool)
}

/// The result of a command a stop ended.
fn stopped_output(text: String, bytes: u64) -> tools::ToolOutput {
    tools::ToolOutput {
        ok: false,
        text,
        summary: "bash: stopped".to_string(),
        bytes,
    }
}

/// The calls of the last answer on `history` with no result after it.
fn unanswered(history: &[Message]) -> Vec<ToolCall> {
    let Some(at) = history.iter().rposition(|m| m.role == Role::Assistant) else {
        return Vec::new();
    };
    // Anything but results after it (a question, a summary) closes the step;
    // a goal line (the goal changed meanwhile) does not.
    if history[at + 1..]
        .iter()
        .any(|m| !matches!(m.role, Role::Tool | Role::Goal))
    {
        return Vec::new();
    }
    let answered: Vec<&str> = history[at + 1..]
        .iter()
        .filter_map(|m| m.tool_call_id.as_deref())
        .collect();
    history[at]
        .calls()
        .into_iter()
        // A call without an id cannot be answered; the request says "not run".
        .filter(|c| !c.id.is_empty() && !answered.contains(&c.id))
        .map(|c| ToolCall {
            id: c.id.to_string(),
            name: c.name.to_string(),
            arguments: if c.arguments.is_empty() {
                "{}".to_string()
            } else {
                c.arguments.to_string()
            },
        })
        .collect()
}

/// A call to a tool set to `ask`: a card in every mode, but refused in a
/// run nobody watches (a trigger's or a bot's), where no card is answered.
fn policy_ask(tool: &str, origin: Origin) -> Decision {
    match origin {
        Origin::User => Decision::Ask {
            reason: format!("`{tool}` is set to ask"),
        },
        other => Decision::Refuse {
            reason: format!(
                "`{tool}` is set to ask, and nobody is asked in a run a {other} started"
            ),
        },
    }
}
