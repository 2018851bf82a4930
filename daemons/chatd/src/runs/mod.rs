//! Runs: at most `max_runs` talk to the engine at once, the others wait in
//! order. A run belongs to chatd, not to a connection: only stop, the retry
//! window or chatd's own shutdown end it early.
//!
//! A run is a loop of steps: the calls of the last answer that have no
//! result yet run (`steps.rs`, asking on a card when they must), then the
//! model is asked again, the context compacted first when it is full
//! (`compaction.rs`). Its state lives in the transcript, so a run resumed
//! after a restart picks up where the messages say it was.

mod brief;
mod cards;
mod compaction;
mod steps;

pub use crate::store::runs::Outcome;
pub use cards::spawn_card_listener;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tandem_shared::http::ApiError;
use tandem_shared::shutdown::Shutdown;
use tandem_shared::sync::lock;
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};

use crate::config::ChatdConfig;
use crate::context::{self, Window};
use crate::engine::{Engine, Fault, Piece};
use crate::kinds::EventKind;
use crate::metrics::{Metrics, RunLabels};
use crate::model::{Conversation, Message, Run};
use crate::models::Models;
use crate::store::queries::{self, Trashed};
use crate::store::{self, conversations, messages, Delta, Store};
use crate::tools::{self, Registry};
use crate::words::{ChatState, MessageStatus, Origin, RunMode, RunStatus};

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

/// Why a run could not take an engine slot.
enum SlotLost {
    Stopped,
    Shutdown,
}

/// What a run does after its tool calls.
enum StepEnd {
    /// Ask the model next.
    Go,
    /// chatd stops while a card waits: the run stays waiting for the next start.
    Left,
    End(Outcome, Option<String>),
}

/// Where one answer is written: its run, its chat and its assistant message.
#[derive(Clone, Copy)]
struct Answering<'a> {
    run: &'a Run,
    conversation: &'a Conversation,
    message: &'a Message,
}

impl Answering<'_> {
    /// A delta of this answer's text (not its reasoning) holding `text`.
    fn delta(&self, text: String) -> Delta {
        Delta {
            conversation_id: self.conversation.id.clone(),
            run_id: self.run.id.clone(),
            message_id: self.message.id.clone(),
            reasoning: false,
            text,
        }
    }
}

/// What an answer's requests have received so far, kept across retries.
struct Received {
    /// The answer's text: the message's stored text, then what streamed.
    text: String,
    /// When the current streak of engine faults began (the retry window).
    streak_started: Option<Instant>,
    /// The last request's tool calls, merged from their chunks.
    tool_calls: Vec<Value>,
}

/// A sized request.
pub struct Request {
    pub body: Value,
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
    /// hostexecd, where `bash` runs.
    hostexec: Option<crate::hostexec::HostExec>,
    /// Each chat's container, where `bash` runs when there is a runtime.
    sandboxes: Option<crate::sandbox::Sandboxes>,
    /// Rung when a consent card is answered.
    consent_bell: Notify,
    /// egressd's API, where egress cards are answered (set at start).
    egress: std::sync::OnceLock<Arc<crate::egress::EgressClient>>,
    /// The forward key: each chat's egressd token is made from it (web tools).
    forward_key: tandem_shared::secrets::Secret,
    /// Where each chat's workspace is (its own or the shared folder).
    folders: crate::folders::Folders,
}

/// What `Runs` is made from: chatd's store, engine, what it knows of the
/// engine's models, config, metrics and shutdown, the forward key (each chat's egressd token), the sandboxes when
/// there is a runtime, and where each chat's workspace is.
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
        } = parts;
        let slots = Arc::new(Semaphore::new(config.max_runs as usize));
        // `bash` runs in the chat's sandbox when there is a runtime;
        // otherwise on this machine through hostexecd, unless host commands
        // are off.
        let mut registry = Registry::chatd();
        if let Some(sandboxes) = &sandboxes {
            registry.register(crate::sandbox::exec::bash_spec(sandboxes));
        } else if config.host_exec() != crate::config::HostExec::Off {
            registry.register(crate::hostexec::bash_spec());
        }
        let hostexec = crate::hostexec::HostExec::new(&config.hostexec_socket).ok();
        Runs {
            inner: Arc::new(Inner {
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
                egress: std::sync::OnceLock::new(),
                forward_key,
                folders,
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

    /// The image parts of the transcript's user messages, read from the
    /// workspace, for a model that reads images (none for any other).
    async fn images_of(
        &self,
        transcript: &context::Transcript<'_>,
        model: &str,
        conversation_id: &str,
    ) -> HashMap<String, Vec<Value>> {
        if !self.inner.models.reads_images(model) {
            return HashMap::new();
        }
        let wanted: Vec<(String, String, String)> = transcript
            .messages
            .iter()
            .filter_map(|m| Some((m, m.attachments.as_ref()?.as_array()?)))
            .flat_map(|(m, files)| {
                files.iter().filter(|f| f["image"] == true).filter_map(|f| {
                    Some((
                        m.id.clone(),
                        f["path"].as_str()?.to_string(),
                        f["mime"].as_str().unwrap_or("image/png").to_string(),
                    ))
                })
            })
            .collect();
        if wanted.is_empty() {
            return HashMap::new();
        }
        let root = self.workspace_root(conversation_id);
        tokio::task::spawn_blocking(move || {
            let mut parts: HashMap<String, Vec<Value>> = HashMap::new();
            let Ok(workspace) = crate::workspace::Workspace::open(&root) else {
                return parts;
            };
            for (mid, path, mime) in wanted {
                // An image deleted or swapped for a link since is left out.
                if let Ok((_, bytes)) =
                    workspace.read_all(&path, crate::attachments::MAX_IMAGE_BYTES)
                {
                    parts.entry(mid).or_default().push(json!({
                        "type": "image_url",
                        "image_url": {"url": crate::attachments::data_url(&mime, &bytes)},
                    }));
                }
            }
            parts
        })
        .await
        .unwrap_or_default()
    }

    /// Ends runs a crash left open (`interrupted`, text kept) and starts the
    /// queued and consent-waiting ones again, in their order.
    pub async fn recover(&self) -> anyhow::Result<()> {
        let queued = self
            .inner
            .store
            .write(store::runs::recover)
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
                }
                Ok(None) => tracing::info!(run = %run_id, "run left queued for the next start"),
                Err(err) => tracing::error!(run = %run_id, error = %err, "run task failed"),
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

        let max_steps = inner.config.max_steps;
        let mut steps = 0u32;
        let mut continue_message = (run.mode == RunMode::Continue)
            .then(|| run.message_id.clone())
            .flatten();
        // A continued, regenerated or edited answer belongs right under its
        // question: waiting messages join at the step after it, not before.
        let mut deliver_now = run.mode == RunMode::Send;
        // A new run does not run the calls a stopped one left: they are
        // closed as not run (only Continue, or a resumed run, goes on with them).
        if !resumed && run.mode != RunMode::Continue {
            self.close_left_calls(&run).await?;
        }
        loop {
            // The calls of the last answer that have no result yet.
            match self.run_tool_calls(&run, &mut slot, &mut stop).await? {
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
                .answer(&run, &conversation, &message, step, &mut stop)
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
                    if step == Step::Last {
                        let why = format!("paused after {max_steps} model calls; Continue goes on");
                        ctx.emit(
                            &run.conversation_id,
                            EventKind::Paused,
                            json!({"run_id": run.id, "steps": steps, "reason": why}),
                        )?;
                        store::runs::finish_run(ctx, &run, Outcome::Paused, Some(&why), None)?;
                        return Ok(Some(Outcome::Paused));
                    }
                    if called_tools
                        || !queries::waiting(ctx.conn(), &run.conversation_id)?.is_empty()
                    {
                        return Ok(None);
                    }
                    store::runs::finish_run(ctx, &run, Outcome::Done, None, None)?;
                    Ok(Some(Outcome::Done))
                })
                .await?;
            if let Some(ended) = ended {
                return Ok(Some((origin, ended)));
            }
        }
    }

    /// An engine slot for the run: at once when one is free, else in line
    /// (`run.queued` with its position, the chat `queued`).
    async fn take_slot(
        &self,
        run_id: &str,
        stop: &mut watch::Receiver<EndRequest>,
    ) -> Result<Result<OwnedSemaphorePermit, SlotLost>, ApiError> {
        let inner = &self.inner;
        if let Ok(permit) = inner.slots.clone().try_acquire_owned() {
            return Ok(Ok(permit));
        }
        let position = {
            let mut queue = lock(&inner.queue);
            queue.push_back(run_id.to_string());
            queue.len()
        };
        inner.metrics.runs_queued.set(position as i64);
        let rid = run_id.to_string();
        inner
            .store
            .write(move |ctx| {
                let run = queries::run(ctx.conn(), &rid)?;
                ctx.emit(
                    &run.conversation_id,
                    EventKind::RunQueued,
                    json!({"run_id": rid, "position": position}),
                )?;
                conversations::set_state(ctx, &run.conversation_id, ChatState::Queued)?;
                Ok(())
            })
            .await?;
        let acquired = tokio::select! {
            permit = inner.slots.clone().acquire_owned() => match permit {
                Ok(permit) => Ok(permit),
                // The semaphore is never closed; treat it like a stop.
                Err(_) => Err(SlotLost::Stopped),
            },
            _ = stop.wait_for(|r| *r == EndRequest::Stop) => Err(SlotLost::Stopped),
            _ = inner.shutdown.wait() => Err(SlotLost::Shutdown),
        };
        self.dequeue(run_id);
        Ok(acquired)
    }

    fn dequeue(&self, run_id: &str) {
        let mut queue = lock(&self.inner.queue);
        queue.retain(|id| id != run_id);
        self.inner.metrics.runs_queued.set(queue.len() as i64);
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

    /// One model request and its stream into `message`, with retries. The
    /// request is sized first and the chat compacted at the line. `Ok(true)`:
    /// the answer ended in tool calls. `Err((outcome, error))` ends the run.
    async fn answer(
        &self,
        run: &Run,
        conversation: &Conversation,
        message: &Message,
        step: Step,
        stop: &mut watch::Receiver<EndRequest>,
    ) -> Result<bool, (Outcome, Option<String>)> {
        let inner = &self.inner;
        let session = format!("chat-{}", conversation.id);
        let answering = Answering {
            run,
            conversation,
            message,
        };
        let mut received = Received {
            text: message.text.clone(),
            streak_started: None,
            tool_calls: Vec::new(),
        };
        let mut wait = Duration::from_secs(1);
        let mut busy_retried = false;
        let mut compacted_for_memory = false;
        let mut compacted_for_size = false;
        let mut line_checked = false;
        let mut attempt = 0u32;
        let window = Duration::from_secs(inner.config.retry_window_s);
        let store_err = |e: ApiError| {
            (
                Outcome::Interrupted,
                Some(format!("chatd could not write: {}", e.message)),
            )
        };
        loop {
            let mut request = self
                .request(&conversation.id, &run.model, message, &received.text, step)
                .await
                .map_err(store_err)?;
            let sizes = request.window;
            if request.tokens >= sizes.line && !line_checked {
                line_checked = true;
                if self
                    .compact_during(run, message, compaction::LINE, stop)
                    .await?
                    .is_some_and(|c| c.cut)
                {
                    request = self
                        .request(&conversation.id, &run.model, message, &received.text, step)
                        .await
                        .map_err(store_err)?;
                }
            }
            if request.tokens > sizes.window {
                let how = if request.exact {
                    "counted by the engine"
                } else {
                    "estimated"
                };
                return Err((
                    Outcome::Failed,
                    Some(format!(
                        "the request is {} tokens ({how}), more than the model's window of {} tokens, and compaction cannot make it smaller",
                        request.tokens, sizes.window
                    )),
                ));
            }
            let fault = tokio::select! {
                result = self.stream_once(&session, &request.body, &answering, &mut received, sizes.window) => {
                    match result {
                        Ok(()) => return Ok(!received.tool_calls.is_empty()),
                        Err(fault) => fault,
                    }
                }
                _ = stop.wait_for(|r| *r == EndRequest::Stop) => return Err((Outcome::Stopped, None)),
                _ = inner.shutdown.wait() => return Err((Outcome::Interrupted, Some("chatd stopped".into()))),
            };
            let reason = fault.reason();
            // Over the window by the engine's count: compact and send once
            // more if that made the request smaller.
            if fault.is_over_context() {
                if !compacted_for_size {
                    compacted_for_size = true;
                    let compacted = self
                        .compact_during(run, message, "over the window", stop)
                        .await?;
                    if compacted.is_some_and(|c| c.cut && c.after < c.before) {
                        continue;
                    }
                }
                return Err((Outcome::Failed, Some(reason)));
            }
            let wait_for = match &fault {
                Fault::Rejected { .. } => return Err((Outcome::Failed, Some(reason))),
                Fault::Busy {
                    retry_after,
                    status,
                    ..
                } => {
                    if busy_retried {
                        // Refused twice for memory: compact, send again, and
                        // from now on compact at 80 % of the refused size.
                        if *status == 503 && !compacted_for_memory {
                            compacted_for_memory = true;
                            let before = lock(&inner.refused)
                                .insert(conversation.id.clone(), request.tokens);
                            let compacted =
                                self.compact_during(run, message, "memory", stop).await?;
                            if compacted.is_some_and(|c| c.cut) {
                                continue;
                            }
                            // Nothing compacted (the summary call failed too):
                            // the refusal is not taken as the chat's size.
                            let mut refused = lock(&inner.refused);
                            match before {
                                Some(b) => refused.insert(conversation.id.clone(), b),
                                None => refused.remove(&conversation.id),
                            };
                        }
                        return Err((Outcome::Failed, Some(reason)));
                    }
                    busy_retried = true;
                    Duration::from_secs(retry_after.unwrap_or(1).clamp(1, 120))
                }
                Fault::Unreachable(_) | Fault::Cut(_) | Fault::Server { .. } => {
                    let began = *received.streak_started.get_or_insert_with(Instant::now);
                    if began.elapsed() >= window {
                        return Err((Outcome::Interrupted, Some(reason)));
                    }
                    let this = wait.min(window.saturating_sub(began.elapsed()));
                    wait = (wait * 2).min(Duration::from_secs(inner.config.retry_max_wait_s));
                    this
                }
            };
            attempt += 1;
            inner.metrics.engine_retries.inc();
            tracing::warn!(run = %run.id, attempt, wait_s = wait_for.as_secs_f64(), fault = fault_kind(&fault), "engine fault, retrying");
            let cid = conversation.id.clone();
            let data = json!({"run_id": run.id, "attempt": attempt, "wait_s": wait_for.as_secs_f64(), "reason": reason});
            inner
                .store
                .write(move |ctx| Ok(ctx.emit(&cid, EventKind::RunRetrying, data).map(|_| ())?))
                .await
                .map_err(store_err)?;
            tokio::select! {
                _ = tokio::time::sleep(wait_for) => {}
                _ = stop.wait_for(|r| *r == EndRequest::Stop) => return Err((Outcome::Stopped, None)),
                _ = inner.shutdown.wait() => return Err((Outcome::Interrupted, Some("chatd stopped".into()))),
            }
        }
    }

    /// A compaction inside a run, ended by a stop or chatd's shutdown (then
    /// nothing is written). `Ok(None)`: it failed; the run goes on without.
    async fn compact_during(
        &self,
        run: &Run,
        message: &Message,
        reason: &str,
        stop: &mut watch::Receiver<EndRequest>,
    ) -> Result<Option<compaction::Compacted>, (Outcome, Option<String>)> {
        tokio::select! {
            compacted = self.compact(&run.conversation_id, &run.model, reason, Some(&message.id)) => {
                match compacted {
                    Ok(c) => Ok(Some(c)),
                    Err(e) => {
                        tracing::warn!(run = %run.id, reason, error = %e.message, "compaction failed");
                        Ok(None)
                    }
                }
            }
            _ = stop.wait_for(|r| *r == EndRequest::Stop) => Err((Outcome::Stopped, None)),
            _ = self.inner.shutdown.wait() => Err((Outcome::Interrupted, Some("chatd stopped".into()))),
        }
    }

    /// One request. Text received is appended to `received.text` and
    /// written as deltas; `received.tool_calls` holds this answer's calls.
    async fn stream_once(
        &self,
        session: &str,
        body: &Value,
        answering: &Answering<'_>,
        received: &mut Received,
        limit: u64,
    ) -> Result<(), Fault> {
        let inner = &self.inner;
        let Answering {
            run,
            conversation,
            message,
        } = *answering;
        let Received {
            text,
            streak_started,
            tool_calls,
        } = received;
        tool_calls.clear();
        let mut stream = inner.engine.stream(session, body).await?;
        let result = loop {
            let piece = match stream.next().await {
                Ok(Some(piece)) => piece,
                Ok(None) => break Ok(()),
                Err(fault) => break Err(fault),
            };
            match piece {
                Piece::Text(t) | Piece::Reasoning(t) if t.is_empty() => {}
                Piece::Text(t) => {
                    *streak_started = None;
                    text.push_str(&t);
                    self.answer_delta(answering, t).await;
                }
                Piece::Reasoning(t) => {
                    *streak_started = None;
                    self.reasoning_delta(answering, t).await;
                }
                Piece::ToolCall {
                    index,
                    id,
                    name,
                    arguments,
                } => merge_tool_call(tool_calls, index, id, name, &arguments),
                Piece::Usage {
                    prompt,
                    completion,
                    tokens_per_second,
                    prompt_ms,
                } => {
                    let mut data = json!({"run_id": run.id, "model": run.model, "used": prompt + completion, "limit": limit, "completion": completion});
                    if let Some(tps) = tokens_per_second {
                        data["tokens_per_second"] = json!(tps);
                    }
                    if let Some(ms) = prompt_ms {
                        data["prompt_ms"] = json!(ms);
                    }
                    let cid = conversation.id.clone();
                    let rid = run.id.clone();
                    let usage = data.clone();
                    let _ = inner
                        .store
                        .write(move |ctx| {
                            store::runs::set_usage(ctx, &rid, &usage)?;
                            Ok(ctx.emit(&cid, EventKind::Usage, data).map(|_| ())?)
                        })
                        .await;
                }
                Piece::Finish(_) => {}
            }
        };
        if stream.garbage > 0 {
            inner.metrics.engine_garbage_lines.inc_by(stream.garbage);
            tracing::warn!(run = %run.id, lines = stream.garbage, "skipped lines of the engine stream that were not chunks");
        }
        if result.is_ok() && !tool_calls.is_empty() {
            // Every call gets an id of chatd's own, unique in the chat: some
            // engines number calls per answer (`call_0`), and a card or a
            // result found by a repeated id would answer the wrong call.
            for (i, call) in tool_calls.iter_mut().enumerate() {
                call["id"] = json!(format!("call_{}_{i}", message.id.trim_start_matches("m_")));
            }
            let mid = message.id.clone();
            let calls = Value::Array(tool_calls.clone()).to_string();
            let saved = inner
                .store
                .write(move |ctx| messages::set_tool_calls(ctx, &mid, &calls))
                .await;
            if let Err(e) = saved {
                return Err(Fault::Cut(format!(
                    "chatd could not keep the tool calls: {}",
                    e.message
                )));
            }
        }
        result
    }

    /// A piece of the answer's text, appended to the message.
    async fn answer_delta(&self, answering: &Answering<'_>, text: String) {
        self.write_delta(answering.delta(text)).await;
    }

    /// A piece of the model's reasoning, sent to devices only.
    async fn reasoning_delta(&self, answering: &Answering<'_>, text: String) {
        let delta = Delta {
            reasoning: true,
            ..answering.delta(text)
        };
        self.write_delta(delta).await;
    }

    async fn write_delta(&self, delta: Delta) {
        let run_id = delta.run_id.clone();
        if self.inner.store.delta(delta).await.is_err() {
            tracing::warn!(run = %run_id, "delta not written: the store is closing");
        }
    }
}

fn fault_kind(fault: &Fault) -> &'static str {
    match fault {
        Fault::Unreachable(_) => "unreachable",
        Fault::Cut(_) => "cut",
        Fault::Busy { .. } => "busy",
        Fault::Server { .. } => "server",
        Fault::Rejected { .. } => "rejected",
    }
}

fn merge_tool_call(
    calls: &mut Vec<Value>,
    index: u64,
    id: Option<String>,
    name: Option<String>,
    arguments: &str,
) {
    // The index comes from the engine: a wild one must not make chatd
    // allocate without end. No model calls this many tools in one step.
    const MAX_CALLS: u64 = 64;
    if index >= MAX_CALLS {
        tracing::warn!(
            index,
            "engine sent a tool call index past {MAX_CALLS}; ignored"
        );
        return;
    }
    let index = index as usize;
    while calls.len() <= index {
        calls
            .push(json!({"id": "", "type": "function", "function": {"name": "", "arguments": ""}}));
    }
    let call = &mut calls[index];
    if let Some(id) = id {
        call["id"] = json!(id);
    }
    if let Some(name) = name {
        call["function"]["name"] = json!(name);
    }
    // Appended in place: a long argument streamed piece by piece must not
    // be copied whole at every piece.
    match &mut call["function"]["arguments"] {
        Value::String(args) => args.push_str(arguments),
        other => *other = json!(arguments),
    }
}

/// The chat-completions body around `messages`, with the answer's text so
/// far as an assistant prefill the engine continues.
pub fn request_body(model: &str, mut messages: Vec<Value>, tools: &Value, prefill: &str) -> Value {
    let mut body = json!({
        "model": model,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if tools.as_array().is_some_and(|t| !t.is_empty()) {
        body["tools"] = tools.clone();
    }
    if !prefill.is_empty() {
        messages.push(json!({"role": "assistant", "content": prefill}));
        // vLLM continues a final assistant message with these; llama.cpp does by itself.
        body["continue_final_message"] = json!(true);
        body["add_generation_prompt"] = json!(false);
    }
    body["messages"] = Value::Array(messages);
    body
}
