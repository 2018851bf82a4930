//! Runs: at most `max_runs` talk to the engine at once, the others wait in
//! order. A run belongs to chatd, not to a connection: only stop, the retry
//! window or chatd's own shutdown end it early.
//!
//! A run is a loop of steps: the calls of the last answer that have no
//! result yet run (`steps.rs`, asking on a card when they must), then the
//! model is asked again in an engine slot (`slots.rs`) and its answer
//! streamed (`answer.rs`), the context compacted first when it is full
//! (`compaction.rs`); what each request carries beside the messages is
//! `brief.rs`'s. Its state lives in the transcript, so a run resumed after
//! a restart picks up where the messages say it was. Every write is a
//! function of `store/`.

mod answer;
mod body;
mod brief;
mod cards;
mod compaction;
mod consent;
mod describe;
mod files;
mod goals;
mod kept;
mod loops;
pub(crate) mod mcp;
pub(crate) mod report;
mod skills;
pub(crate) use skills::ChatSkills;
mod slots;
mod steps;
mod subagents;
mod tasks;
mod tools_view;

pub use crate::store::runs::Outcome;
pub use body::{request_body, RequestBody};
pub use cards::spawn_card_listener;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tandem_shared::http::ApiError;
use tandem_shared::shutdown::Shutdown;
use tandem_shared::sync::lock;
use tokio::sync::{watch, Notify, Semaphore};

use crate::config::ChatdConfig;
use crate::context::{self, Window};
use crate::engine::Engine;
use crate::kinds::EventKind;
use crate::metrics::{Metrics, RunLabels};
use crate::model::Message;
use crate::models::Models;
use crate::store::queries::{self, Trashed};
use crate::store::{self, conversations, messages, Store};
use crate::tools::{self, Registry};
use crate::words::{ChatState, MessageStatus, Origin, RunMode, RunStatus};
use kept::KeptPath;
use slots::SlotLost;

/// Whether a model call may still use tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    More,
    /// The last call the step limit allows: no tools are offered.
    Last,
}

/// A request from outside to end a run early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EndRequest {
    None,
    Stop,
}

/// What a run does after its tool calls.
enum StepEnd {
    /// Ask the model next.
    Go,
    /// chatd stops while a card waits: the run stays waiting for the next start.
    Left,
    End(Outcome, Option<String>),
}

/// A sized request.
pub struct Request {
    pub body: RequestBody,
    /// Prompt tokens: the engine's count, or the estimate.
    pub tokens: u64,
    pub exact: bool,
    /// The sizes the chat's requests are held to, as this one was made.
    pub window: Window,
}

#[derive(Clone)]
pub struct Runs {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    /// The time loops go by.
    clock: tandem_shared::clock::Clock,
    engine: Engine,
    config: Arc<ChatdConfig>,
    metrics: Arc<Metrics>,
    slots: Arc<Semaphore>,
    /// Runs waiting for a slot, oldest first (their position in `run.queued`).
    queue: Mutex<VecDeque<String>>,
    /// The live run of each conversation: its stop switch.
    active: Mutex<HashMap<String, (String, watch::Sender<EndRequest>)>>,
    shutdown: Shutdown,
    /// Tasks still running, and a bell rung when one ends.
    tasks: Mutex<usize>,
    task_ended: Notify,
    /// What the engine says of its models (windows, vision, token counts).
    models: Arc<Models>,
    /// Finished calls' stubbed arguments by call id (ids are chatd's, unique):
    /// made once, not at every request.
    stubs: Mutex<HashMap<String, Option<String>>>,
    /// The size of a chat's request the engine refused for memory.
    refused: Mutex<HashMap<String, u64>>,
    /// The tools a model may call.
    registry: Arc<Registry>,
    /// Reads documents for read_document and read_file.
    documents: crate::documents::Documents,
    /// The search index, for search_files.
    index: crate::index::Index,
    /// hostexecd, where `bash` runs.
    hostexec: Option<crate::hostexec::HostExec>,
    /// Each chat's container, where `bash` runs when there is a runtime.
    sandboxes: Option<crate::sandbox::Sandboxes>,
    /// Rung when a consent card is answered.
    consent_bell: Notify,
    /// Rung when a sub-agent ended (its parent's call may wait on it).
    subagent_bell: Notify,
    /// egressd's API, where egress cards are answered (set at start).
    egress: std::sync::OnceLock<Arc<crate::egress::EgressClient>>,
    /// The forward key: each chat's egressd token is made from it (web tools).
    forward_key: tandem_shared::secrets::Secret,
    /// Where each chat's workspace is (its own or the shared folder).
    folders: crate::folders::Folders,
    /// Every change a call makes to the chat's files.
    history: Arc<crate::history::FileHistory>,
    /// Each chat's MCP sessions.
    mcp: Arc<crate::mcp::sessions::Sessions>,
}

/// What `Runs` is made from: chatd's store, engine, what it knows of the
/// engine's models, config, metrics and shutdown, the forward key (each
/// chat's egressd token), the sandboxes when there is a runtime, and where
/// each chat's workspace is.
pub struct RunsParts {
    pub store: Store,
    pub engine: Engine,
    pub models: Arc<Models>,
    pub config: Arc<ChatdConfig>,
    pub metrics: Arc<Metrics>,
    pub shutdown: Shutdown,
    pub forward_key: tandem_shared::secrets::Secret,
    pub sandboxes: Option<crate::sandbox::Sandboxes>,
    pub folders: crate::folders::Folders,
    pub history: Arc<crate::history::FileHistory>,
    pub documents: crate::documents::Documents,
    pub index: crate::index::Index,
    pub mcp: Arc<crate::mcp::sessions::Sessions>,
}

impl Runs {
    pub fn new(parts: RunsParts) -> Runs {
        let RunsParts {
            store,
            engine,
            models,
            config,
            metrics,
            shutdown,
            forward_key,
            sandboxes,
            folders,
            history,
            documents,
            index,
            mcp,
        } = parts;
        let slots = Arc::new(Semaphore::new(config.max_runs as usize));
        // `bash` runs in the chat's sandbox when there is a runtime;
        // otherwise on this machine through hostexecd, unless host commands
        // are off.
        let mut registry = Registry::chatd();
        registry.register(crate::index::tool::spec());
        registry.register(tools::spawn::spec());
        registry.register(tools::spawn::list_spec());
        registry.register(tools::task::spec());
        registry.register(tools::goal::done_spec());
        registry.register(tools::goal::blocked_spec());
        registry.register(tools::loops::next_spec());
        registry.register(tools::loops::done_spec());
        registry.register(tools::skill::spec());
        if let Some(sandboxes) = &sandboxes {
            registry.register(crate::sandbox::exec::bash_spec(sandboxes));
        } else if config.host_exec() != crate::config::HostExec::Off {
            registry.register(crate::hostexec::bash_spec());
        }
        let hostexec = crate::hostexec::HostExec::new(&config.hostexec_socket).ok();
        Runs {
            inner: Arc::new(Inner {
                clock: tandem_shared::clock::Clock::new(&config.clock_file),
                store,
                engine,
                config,
                metrics,
                slots,
                queue: Mutex::new(VecDeque::new()),
                active: Mutex::new(HashMap::new()),
                shutdown,
                tasks: Mutex::new(0),
                task_ended: Notify::new(),
                models,
                stubs: Mutex::new(HashMap::new()),
                refused: Mutex::new(HashMap::new()),
                registry: Arc::new(registry),
                hostexec,
                sandboxes,
                consent_bell: Notify::new(),
                subagent_bell: Notify::new(),
                egress: std::sync::OnceLock::new(),
                forward_key,
                folders,
                history,
                documents,
                index,
                mcp,
            }),
        }
    }

    /// The chat's active path, root to head.
    pub(crate) async fn head_path(&self, conversation_id: &str) -> Result<Vec<Message>, ApiError> {
        let cid = conversation_id.to_string();
        self.inner
            .store
            .read(move |conn| {
                let conversation = queries::conversation(conn, &cid, Trashed::Include)?;
                queries::path_to(conn, &cid, conversation.head_id.as_deref())
            })
            .await
    }

    /// A finished call's arguments as later requests carry them (see
    /// `tools::stub_arguments`), remembered by call id.
    pub(crate) fn stub(&self, call_id: &str, name: &str, arguments: &str) -> Option<String> {
        if let Some(known) = lock(&self.inner.stubs).get(call_id) {
            return known.clone();
        }
        let stub = tools::stub_arguments(name, arguments);
        let mut stubs = lock(&self.inner.stubs);
        // A bound, not a cache policy: past it, stubs are made again.
        if stubs.len() >= 100_000 {
            stubs.clear();
        }
        if !call_id.is_empty() {
            stubs.insert(call_id.to_string(), stub.clone());
        }
        stub
    }

    /// The tools this chatd offers.
    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// Each chat's MCP sessions.
    pub fn mcp(&self) -> &crate::mcp::sessions::Sessions {
        &self.inner.mcp
    }

    /// The agent of a chat, when it was made with one that still exists.
    pub(crate) async fn agent_of(
        &self,
        conversation_id: &str,
    ) -> Result<Option<crate::agents::Agent>, ApiError> {
        let cid = conversation_id.to_string();
        self.inner
            .store
            .read(move |conn| crate::agents::of_conversation(conn, &cid))
            .await
    }

    /// The image parts of the turn's question (the transcript's last user
    /// message), read from the workspace, for a model that reads images;
    /// an earlier message's images are a one-line note each: an image goes
    /// with the requests of its own turn only, so it never fills every
    /// later request. None for a model that does not read images.
    async fn images_of(
        &self,
        transcript: &context::Transcript<'_>,
        model: &str,
        conversation_id: &str,
    ) -> HashMap<String, Vec<Value>> {
        if !self.inner.models.reads_images(model) {
            return HashMap::new();
        }
        let question = transcript
            .messages
            .iter()
            .rev()
            .find(|m| m.role == crate::words::Role::User)
            .map(|m| m.id.clone());
        let mut parts: HashMap<String, Vec<Value>> = HashMap::new();
        let mut wanted: Vec<(String, String, String)> = Vec::new();
        let pictures = transcript
            .messages
            .iter()
            .filter_map(|m| Some((m, m.attachments.as_ref()?.as_array()?)))
            .flat_map(|(m, files)| files.iter().map(move |f| (m, f)))
            .filter(|(_, f)| f["image"] == true);
        for (m, f) in pictures {
            let Some(path) = f["path"].as_str() else {
                continue;
            };
            if question.as_deref() == Some(m.id.as_str()) {
                let mime = f["mime"].as_str().unwrap_or("image/png");
                wanted.push((m.id.clone(), path.to_string(), mime.to_string()));
            } else {
                parts.entry(m.id.clone()).or_default().push(json!({
                    "type": "text",
                    "text": format!("[{path} was shown with this message's turn only; it is not sent again]"),
                }));
            }
        }
        if wanted.is_empty() {
            return parts;
        }
        let root = self.workspace_root(conversation_id);
        for (mid, path, mime) in wanted {
            let part = self.image_part(&root, &path, &mime).await;
            parts.entry(mid).or_default().push(part);
        }
        parts
    }

    /// One image as a request part: scaled to fit by the reader when it is
    /// too large, else its own bytes; a note when it cannot be shown.
    async fn image_part(&self, root: &std::path::Path, path: &str, mime: &str) -> Value {
        use crate::documents::images::{Scaled, MAX_SENT_BYTES};
        let note = |why: &str| json!({"type": "text", "text": format!("[{path} could not be shown: {why}]")});
        let (root, rel) = (root.to_path_buf(), path.to_string());
        let opened = tokio::task::spawn_blocking(move || {
            let workspace = crate::workspace::Workspace::open(&root).ok()?;
            let opened = workspace.open_file(&rel).ok()?;
            Some((workspace, opened.file))
        })
        .await
        .ok()
        .flatten();
        // An image deleted or swapped for a link since.
        let Some((workspace, file)) = opened else {
            return note("it is no longer there");
        };
        match self.inner.documents.scale_image(file).await {
            Ok(Scaled::Smaller {
                mime, data_base64, ..
            }) => json!({
                "type": "image_url",
                "image_url": {"url": format!("data:{mime};base64,{data_base64}")},
            }),
            Ok(Scaled::AsItIs { .. }) => {
                let rel = path.to_string();
                let read = tokio::task::spawn_blocking(move || {
                    workspace.read_all(&rel, MAX_SENT_BYTES).map(|(_, b)| b)
                })
                .await;
                match read {
                    Ok(Ok(bytes)) => json!({
                        "type": "image_url",
                        "image_url": {"url": crate::attachments::data_url(mime, &bytes)},
                    }),
                    _ => note("it could not be read"),
                }
            }
            Err(cause) => note(&cause),
        }
    }

    /// Ends runs a crash left open (`interrupted`, text kept) and starts the
    /// queued and consent-waiting ones again, in their order.
    pub async fn recover(&self) -> anyhow::Result<()> {
        let queued = self
            .inner
            .store
            .write(|ctx| {
                // A worker waits for Continue of its chat, as that chat's run does.
                let queued = store::runs::recover(ctx)?;
                let mut queued = store::tasks::hold_queued(ctx, queued)?;
                // After the runs: a sub-agent's cut-off run is interrupted by now.
                queued.extend(store::subagents::recover(ctx)?);
                Ok(queued)
            })
            .await
            .map_err(|e| anyhow::anyhow!("recovering runs: {e}"))?;
        for (run_id, conversation_id) in queued {
            self.spawn(run_id, conversation_id);
        }
        Ok(())
    }

    /// Starts the task of a run recorded as `queued`.
    pub fn spawn(&self, run_id: String, conversation_id: String) {
        let (stop_tx, stop_rx) = watch::channel(EndRequest::None);
        lock(&self.inner.active).insert(conversation_id.clone(), (run_id.clone(), stop_tx));
        *lock(&self.inner.tasks) += 1;
        let runs = self.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let origin_outcome = runs.drive(&run_id, &conversation_id, stop_rx).await;
            match origin_outcome {
                Ok(Some((origin, outcome))) => {
                    runs.inner
                        .metrics
                        .runs
                        .get_or_create(&RunLabels {
                            origin: origin.as_str().into(),
                            outcome: outcome.run_status().as_str().into(),
                        })
                        .inc();
                    runs.inner
                        .metrics
                        .run_seconds
                        .observe(started.elapsed().as_secs_f64());
                    tracing::info!(run = %run_id, conversation = %conversation_id, outcome = outcome.run_status().as_str(),
                        seconds = started.elapsed().as_secs_f64(), "run ended");
                    runs.after_run(&conversation_id, outcome).await;
                }
                Ok(None) => tracing::info!(run = %run_id, "run left queued for the next start"),
                Err(err) => {
                    tracing::error!(run = %run_id, error = %err, "run task failed");
                    runs.after_run(&conversation_id, Outcome::Failed).await;
                }
            }
            {
                let mut active = lock(&runs.inner.active);
                if active
                    .get(&conversation_id)
                    .is_some_and(|(id, _)| *id == run_id)
                {
                    active.remove(&conversation_id);
                }
            }
            *lock(&runs.inner.tasks) -= 1;
            runs.inner.task_ended.notify_waiters();
        });
    }

    /// A sub-agent's end reaches its parent; a parent's stop or failed turn
    /// stops its sub-agents.
    async fn after_run(&self, conversation_id: &str, outcome: Outcome) {
        if self.inner.folders.is_subagent(conversation_id) {
            self.after_subagent(conversation_id, outcome).await;
        } else if matches!(outcome, Outcome::Stopped | Outcome::Failed) {
            if let Err(e) = self.stop_subagents(conversation_id).await {
                tracing::warn!(conversation = %conversation_id, status = e.status.as_u16(), "its sub-agents were not stopped");
            }
        }
    }

    /// Asks the conversation's live run to stop. `false` when none is live.
    pub fn stop(&self, conversation_id: &str) -> bool {
        match lock(&self.inner.active).get(conversation_id) {
            Some((_, stop)) => {
                let _ = stop.send(EndRequest::Stop);
                true
            }
            None => false,
        }
    }

    /// Waits until every run task has ended, at most `bound`.
    pub async fn drain(&self, bound: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            let notified = self.inner.task_ended.notified();
            let left = *lock(&self.inner.tasks);
            if left == 0 {
                return 0;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return *lock(&self.inner.tasks);
            }
        }
    }

    /// Waits until the conversation has no live run task, at most `bound`.
    pub async fn wait_idle(&self, conversation_id: &str, bound: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            let notified = self.inner.task_ended.notified();
            if !lock(&self.inner.active).contains_key(conversation_id) {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return false;
            }
        }
    }

    pub fn running_count(&self) -> usize {
        lock(&self.inner.active).len()
    }

    /// The whole life of one run. `Ok(None)`: left queued (or waiting) for the next start.
    async fn drive(
        &self,
        run_id: &str,
        conversation_id: &str,
        mut stop: watch::Receiver<EndRequest>,
    ) -> Result<Option<(Origin, Outcome)>, ApiError> {
        let inner = &self.inner;
        let store = &inner.store;
        let run = store
            .read({
                let id = run_id.to_string();
                move |conn| queries::run(conn, &id)
            })
            .await?;
        let origin = run.origin;

        // A run that waited for consent when chatd stopped goes on: it takes
        // a slot only for its next model call, and is `running` again until
        // it really asks (the mode or the rules may have changed meanwhile).
        let mut slot = None;
        let resumed = run.status == RunStatus::Waiting;
        if !resumed {
            match self.take_slot(run_id, &mut stop).await? {
                Ok(permit) => slot = Some(permit),
                Err(SlotLost::Shutdown) => return Ok(None),
                Err(SlotLost::Stopped) => {
                    self.end(run_id, Outcome::Stopped, None).await?;
                    return Ok(Some((origin, Outcome::Stopped)));
                }
            }
            let rid = run_id.to_string();
            store
                .write(move |ctx| store::runs::record_start(ctx, &rid))
                .await?;
        }
        let (run, conversation) = store
            .read({
                let rid = run_id.to_string();
                move |conn| {
                    let run = queries::run(conn, &rid)?;
                    let conversation =
                        queries::conversation(conn, &run.conversation_id, Trashed::Include)?;
                    Ok((run, conversation))
                }
            })
            .await?;
        tracing::info!(run = %run.id, conversation = %conversation.id, mode = %run.mode, "run started");

        // A worker has its own cap: its last call writes its report.
        let worker = self.task_n_of(conversation_id).await.is_some();
        let max_steps = match worker {
            true => self.worker_steps(conversation_id).await,
            // A goal's turn ends by the model calls its goal has left too.
            false => match self.goal_steps_left(conversation_id).await? {
                Some(left) => inner.config.max_steps.min(left),
                None => inner.config.max_steps,
            },
        };
        let mut steps = 0u32;
        // Continue, and a sub-agent's run taken up after a restart, write on
        // in the answer that was cut: one message, not its rest in another.
        let mut continue_message = matches!(run.mode, RunMode::Continue | RunMode::Resume)
            .then(|| run.message_id.clone())
            .flatten();
        // A continued, regenerated or edited answer belongs right under its
        // question: waiting messages join at the step after it, not before.
        let mut deliver_now = run.mode == RunMode::Send;
        let mut kept = KeptPath::new(conversation_id);
        // A new run does not run the calls a stopped one left: they are
        // closed as not run (only Continue, or a resumed run, goes on with them).
        if !resumed && run.mode != RunMode::Continue {
            self.close_left_calls(&run, &mut kept).await?;
        }
        // Continue goes on with them, but never runs again one that had
        // begun when its run was cut off: whether it took effect is unknown.
        if run.mode == RunMode::Continue {
            self.close_begun_calls(&run, &mut kept).await?;
        }
        loop {
            // The calls of the last answer that have no result yet.
            match self
                .run_tool_calls(&run, &mut kept, &mut slot, &mut stop)
                .await?
            {
                StepEnd::Go => {}
                StepEnd::Left => return Ok(None),
                StepEnd::End(outcome, error) => {
                    self.end(run_id, outcome, error.as_deref()).await?;
                    return Ok(Some((origin, outcome)));
                }
            }
            // A stop while the tools ran ends the run here: waiting messages stay.
            if *stop.borrow() == EndRequest::Stop {
                self.end(run_id, Outcome::Stopped, None).await?;
                return Ok(Some((origin, Outcome::Stopped)));
            }
            if let Some(why) = self.goal_stuck(conversation_id, &mut kept).await? {
                self.end(run_id, Outcome::Paused, Some(&why)).await?;
                return Ok(Some((origin, Outcome::Paused)));
            }
            if slot.is_none() {
                match self.take_slot(run_id, &mut stop).await? {
                    Ok(permit) => slot = Some(permit),
                    Err(lost) => {
                        let (outcome, error) = match lost {
                            SlotLost::Stopped => (Outcome::Stopped, None),
                            SlotLost::Shutdown => (Outcome::Interrupted, Some("chatd stopped")),
                        };
                        self.end(run_id, outcome, error).await?;
                        return Ok(Some((origin, outcome)));
                    }
                }
                let cid = conversation_id.to_string();
                store
                    .write(move |ctx| conversations::set_state(ctx, &cid, ChatState::Running))
                    .await?;
            }
            steps += 1;
            let cid = conversation_id.to_string();
            let rid = run_id.to_string();
            let resume = continue_message.take();
            let deliver = std::mem::replace(&mut deliver_now, true);
            let message = store
                .write(move |ctx| {
                    // Waiting messages reach the model at this request.
                    if deliver {
                        messages::deliver_waiting(ctx, &cid)?;
                    }
                    // An answer that ended in tool calls is not continued as text.
                    let resume = match resume {
                        // An answer that ended in tool calls, or ended whole
                        // (a paused run's last words), is not continued as
                        // text: the run goes on with a new step.
                        Some(mid) => Some(queries::message(ctx.conn(), &cid, &mid)?).filter(|m| {
                            m.tool_calls.is_none() && m.status != Some(MessageStatus::Done)
                        }),
                        None => None,
                    };
                    // A worker is shown what its chat got meanwhile, between steps.
                    if worker && resume.is_none() {
                        store::tasks::note_waiting(ctx, &cid)?;
                    }
                    let message = match resume {
                        Some(message) => messages::resume_answer(ctx, &cid, &rid, &message.id)?,
                        None => messages::new_assistant_message(ctx, &cid, &rid)?,
                    };
                    store::runs::count_step(ctx, &rid, &message.id)?;
                    Ok(message)
                })
                .await?;

            // The last call the step limit allows gets no tools: the run
            // pauses with the model's words on what it has, not mid-step.
            let step = if steps >= max_steps {
                Step::Last
            } else {
                Step::More
            };
            let called_tools = match self
                .answer(&run, &conversation, &message, step, &mut kept, &mut stop)
                .await
            {
                Ok(called) => called,
                Err((outcome, error)) => {
                    self.end(run_id, outcome, error.as_deref()).await?;
                    return Ok(Some((origin, outcome)));
                }
            };
            // Done: with tool calls the loop runs them; else the run ends
            // unless messages came in meanwhile (decided in the writer, so a
            // message sent now either sees the run still active and waits, or
            // sees it ended and starts a new one).
            let rid = run_id.to_string();
            let mid = message.id.clone();
            let ended = store
                .write(move |ctx| {
                    let run = queries::run(ctx.conn(), &rid)?;
                    messages::set_status(ctx, &run.conversation_id, &mid, MessageStatus::Done)?;
                    // A worker's last call is its report: its run ends
                    // there, done, and a call in it never runs.
                    if step == Step::Last && worker {
                        store::runs::finish_run(ctx, &run, Outcome::Done, None, None)?;
                        return Ok(Some((Outcome::Done, None)));
                    }
                    if step == Step::Last {
                        let why = format!("paused after {max_steps} model calls; Continue goes on");
                        ctx.emit(
                            &run.conversation_id,
                            EventKind::Paused,
                            json!({"run_id": run.id, "steps": steps, "reason": why}),
                        )?;
                        store::runs::finish_run(ctx, &run, Outcome::Paused, Some(&why), None)?;
                        // A goal goes on past a turn's own limit.
                        let next = store::runs::goal_turn(ctx, &run)?;
                        return Ok(Some((Outcome::Paused, next)));
                    }
                    if called_tools
                        || !queries::waiting(ctx.conn(), &run.conversation_id)?.is_empty()
                    {
                        return Ok(None);
                    }
                    store::runs::finish_run(ctx, &run, Outcome::Done, None, None)?;
                    let next = store::runs::goal_turn(ctx, &run)?;
                    Ok(Some((Outcome::Done, next)))
                })
                .await?;
            if let Some((ended, next)) = ended {
                // The goal's next turn, queued in the job that ended this one.
                if let Some(next) = next {
                    self.spawn(next.id, conversation_id.to_string());
                    // A stop that came as this turn ended stops the next:
                    // it went to this run's switch, which nothing reads now.
                    if *stop.borrow() == EndRequest::Stop {
                        self.stop(conversation_id);
                    }
                }
                return Ok(Some((origin, ended)));
            }
        }
    }

    async fn end(
        &self,
        run_id: &str,
        outcome: Outcome,
        error: Option<&str>,
    ) -> Result<(), ApiError> {
        let rid = run_id.to_string();
        let error = error.map(str::to_string);
        self.inner
            .store
            .write(move |ctx| {
                let run = queries::run(ctx.conn(), &rid)?;
                store::runs::finish_run(ctx, &run, outcome, error.as_deref(), None)
            })
            .await
    }
}
