//! Runs: at most `max_runs` talk to the engine at once, the others wait in
//! order. A run belongs to chatd, not to a connection: only stop, the retry
//! window or chatd's own shutdown end it early.
//!
//! A run is a loop of steps: the calls of the last answer that have no
//! result yet run (`steps.rs`, asking on a card when they must), then the
//! model is asked again, the context compacted first when it is full
//! (`compaction.rs`). Its state lives in the transcript, so a run resumed
//! after a restart picks up where the messages say it was.

mod body;
mod brief;
mod cards;
mod compaction;
mod kept;
mod steps;

pub use body::{request_body, RequestBody};
pub use cards::spawn_card_listener;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rusqlite::params;
use serde_json::{json, Value};
use tandem_shared::http::ApiError;
use tandem_shared::shutdown::Shutdown;
use tandem_shared::sync::lock;
use tandem_shared::time::{new_id, now_rfc3339};
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};

use crate::config::ChatdConfig;
use crate::context::{self, Window};
use crate::engine::{Engine, Fault, Piece};
use crate::kinds::EventKind;
use crate::metrics::{Metrics, RunLabels};
use crate::model::{Conversation, Message, Run};
use crate::store::queries::{self, Trashed};
use crate::store::{Ctx, Delta, Store};
use crate::tools::{self, Registry};
use crate::words::{ChatState, MessageStatus, Origin, PendingState, Role, RunMode, RunStatus};
use kept::KeptPath;

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
    /// Context windows by model, from the engine, for `usage.limit`.
    windows: Mutex<HashMap<String, u64>>,
    /// The models that read images.
    vision: Mutex<std::collections::HashSet<String>>,
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
    /// Whether the engine counts tokens (`POST /v1/tokenize`): 0 not yet
    /// known, 1 yes, 2 no.
    tokenize: AtomicU8,
    /// Where each chat's workspace is (its own or the shared folder).
    folders: crate::folders::Folders,
}

/// What `Runs` is made from: chatd's store, engine, config, metrics and
/// shutdown, the forward key (each chat's egressd token), the sandboxes when
/// there is a runtime, and where each chat's workspace is.
pub struct RunsParts {
    pub store: Store,
    pub engine: Engine,
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
                windows: Mutex::new(HashMap::new()),
                vision: Mutex::new(Default::default()),
                stubs: Mutex::new(HashMap::new()),
                refused: Mutex::new(HashMap::new()),
                registry: Arc::new(registry),
                hostexec,
                sandboxes,
                consent_bell: Notify::new(),
                egress: std::sync::OnceLock::new(),
                forward_key,
                tokenize: AtomicU8::new(0),
                folders,
            }),
        }
    }

    /// What the engine says of a model: its window, whether it reads images.
    pub fn remember_model(&self, model: &crate::engine::ModelInfo) {
        if let Some(window) = model.context_window {
            lock(&self.inner.windows).insert(model.id.clone(), window);
        }
        let mut vision = lock(&self.inner.vision);
        if model.vision {
            vision.insert(model.id.clone());
        } else {
            vision.remove(&model.id);
        }
    }

    /// Whether `model` reads images (`/v1/models` says so).
    pub fn reads_images(&self, model: &str) -> bool {
        lock(&self.inner.vision).contains(model)
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
        if !self.reads_images(model) {
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

    /// The prompt tokens of `body`: the engine's count when it has
    /// `/v1/tokenize` and the request is near enough the chat's line to need
    /// it, else the estimate.
    pub(crate) async fn count(&self, model: &str, body: &Value, line: u64) -> (u64, bool) {
        let empty = Vec::new();
        let messages = body["messages"].as_array().unwrap_or(&empty);
        let estimate = context::estimate(messages, body.get("tools"));
        self.count_near_line(model, estimate, line, || Some(body.clone()))
            .await
    }

    /// `count` of a body made as text.
    pub(crate) async fn count_body(
        &self,
        model: &str,
        body: &RequestBody,
        line: u64,
    ) -> (u64, bool) {
        self.count_near_line(model, body.estimate, line, || {
            serde_json::from_slice(&body.bytes).ok()
        })
        .await
    }

    /// The engine's count of the body `value` makes when the estimate is
    /// near the line and the engine counts; else the estimate.
    async fn count_near_line(
        &self,
        model: &str,
        estimate: u64,
        line: u64,
        value: impl FnOnce() -> Option<Value>,
    ) -> (u64, bool) {
        // Far under the line the estimate decides alike, and the count costs
        // a round trip with the whole chat. A tokenizer can find up to a
        // third more than characters/4: under half the line, no request can
        // be near it.
        if estimate < line / 2 {
            return (estimate, false);
        }
        let Some(body) = value() else {
            return (estimate, false);
        };
        let tools = body.get("tools");
        if self.inner.tokenize.load(Ordering::Relaxed) != 2 {
            match self
                .inner
                .engine
                .tokenize(model, &body["messages"], tools)
                .await
            {
                Ok(Some(count)) => {
                    self.inner.tokenize.store(1, Ordering::Relaxed);
                    return (count, true);
                }
                Ok(None) => {
                    tracing::info!(
                        "the engine has no /v1/tokenize: requests are sized by estimate"
                    );
                    self.inner.tokenize.store(2, Ordering::Relaxed);
                }
                Err(e) => tracing::warn!(error = %e, "token count failed; using the estimate"),
            }
        }
        (estimate, false)
    }

    /// Ends runs a crash left open (`interrupted`, text kept) and starts the
    /// queued and consent-waiting ones again, in their order.
    pub async fn recover(&self) -> anyhow::Result<()> {
        let queued = self
            .inner
            .store
            .write(|ctx| {
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
                let mut stmt = ctx.conn().prepare(
                    "SELECT id, conversation_id FROM runs WHERE status IN (?1, ?2) ORDER BY rowid",
                )?;
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
            store.write(move |ctx| record_start(ctx, &rid)).await?;
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
        let mut kept = KeptPath::new(conversation_id);
        if !resumed && run.mode != RunMode::Continue {
            self.close_left_calls(&run, &mut kept).await?;
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
                    .write(move |ctx| set_state(ctx, &cid, ChatState::Running))
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
                        deliver_waiting(ctx, &cid)?;
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
                        Some(message) => {
                            ctx.conn().execute(
                                "UPDATE messages SET status = ?1, run_id = ?2 WHERE id = ?3",
                                params![MessageStatus::Streaming, rid, message.id],
                            )?;
                            let message = queries::message(ctx.conn(), &cid, &message.id)?;
                            ctx.emit(&cid, EventKind::MessageUpdated, json!({"message": message}))?;
                            message
                        }
                        None => new_assistant_message(ctx, &cid, &rid)?,
                    };
                    ctx.conn().execute(
                        "UPDATE runs SET message_id = ?1, steps = steps + 1 WHERE id = ?2",
                        params![message.id, rid],
                    )?;
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
                    ctx.conn().execute(
                        "UPDATE messages SET status = ?1 WHERE id = ?2",
                        params![MessageStatus::Done, mid],
                    )?;
                    let message = queries::message(ctx.conn(), &run.conversation_id, &mid)?;
                    ctx.emit(
                        &run.conversation_id,
                        EventKind::MessageUpdated,
                        json!({"message": message}),
                    )?;
                    if step == Step::Last {
                        let why = format!("paused after {max_steps} model calls; Continue goes on");
                        ctx.emit(
                            &run.conversation_id,
                            EventKind::Paused,
                            json!({"run_id": run.id, "steps": steps, "reason": why}),
                        )?;
                        finish_run(ctx, &run, Outcome::Paused, Some(&why), None)?;
                        return Ok(Some(Outcome::Paused));
                    }
                    if called_tools
                        || !queries::waiting(ctx.conn(), &run.conversation_id)?.is_empty()
                    {
                        return Ok(None);
                    }
                    finish_run(ctx, &run, Outcome::Done, None, None)?;
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
                set_state(ctx, &run.conversation_id, ChatState::Queued)?;
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
                finish_run(ctx, &run, outcome, error.as_deref(), None)
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
        kept: &mut KeptPath,
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
                .request(
                    &conversation.id,
                    &run.model,
                    message,
                    &received.text,
                    step,
                    kept,
                )
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
                        .request(
                            &conversation.id,
                            &run.model,
                            message,
                            &received.text,
                            step,
                            kept,
                        )
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
                result = self.stream_once(&session, &request.body.bytes, &answering, &mut received, sizes.window) => {
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
        body: &bytes::Bytes,
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
        let mut stream = inner.engine.stream(session, body.clone()).await?;
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
                            ctx.conn().execute(
                                "UPDATE runs SET usage = ?1 WHERE id = ?2",
                                params![usage.to_string(), rid],
                            )?;
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
                .write(move |ctx| {
                    ctx.conn().execute(
                        "UPDATE messages SET tool_calls = ?1 WHERE id = ?2",
                        params![calls, mid],
                    )?;
                    Ok(())
                })
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

/// Turns every waiting message into a user message on the active path.
fn deliver_waiting(ctx: &mut Ctx, conversation_id: &str) -> Result<(), ApiError> {
    for pending in queries::waiting(ctx.conn(), conversation_id)? {
        ctx.conn().execute(
            "UPDATE pending SET state = ?1 WHERE id = ?2",
            params![PendingState::Delivered, pending.id],
        )?;
        let mut message = Message::draft(Role::User, &pending.text);
        message.attachments = pending.attachments;
        let message = insert_at_head(ctx, conversation_id, message)?;
        ctx.emit(
            conversation_id,
            EventKind::PendingDelivered,
            json!({"pending_id": pending.id, "message_id": message.id}),
        )?;
    }
    Ok(())
}

fn new_assistant_message(
    ctx: &mut Ctx,
    conversation_id: &str,
    run_id: &str,
) -> Result<Message, ApiError> {
    insert_message(
        ctx,
        conversation_id,
        Role::Assistant,
        "",
        Some(run_id),
        Some(MessageStatus::Streaming),
    )
}

/// Adds a message under the conversation's head and makes it the head.
pub fn insert_message(
    ctx: &mut Ctx,
    conversation_id: &str,
    role: Role,
    text: &str,
    run_id: Option<&str>,
    status: Option<MessageStatus>,
) -> Result<Message, ApiError> {
    let mut message = Message::draft(role, text);
    message.run_id = run_id.map(str::to_string);
    message.status = status;
    insert_at_head(ctx, conversation_id, message)
}

/// Adds `message` under the conversation's head and makes it the head.
pub fn insert_at_head(
    ctx: &mut Ctx,
    conversation_id: &str,
    mut message: Message,
) -> Result<Message, ApiError> {
    message.parent_id = ctx.conn().query_row(
        "SELECT head_id FROM conversations WHERE id = ?1",
        [conversation_id],
        |r| r.get(0),
    )?;
    insert_row(ctx, conversation_id, message)
}

/// Adds a message under `parent` and makes it the head.
pub fn insert_message_under(
    ctx: &mut Ctx,
    conversation_id: &str,
    parent: Option<&str>,
    role: Role,
    text: &str,
    run_id: Option<&str>,
    status: Option<MessageStatus>,
) -> Result<Message, ApiError> {
    let mut message = Message::draft(role, text);
    message.parent_id = parent.map(str::to_string);
    message.run_id = run_id.map(str::to_string);
    message.status = status;
    insert_row(ctx, conversation_id, message)
}

/// Stores `message` (its parent set), makes it the head and says so.
pub fn insert_row(
    ctx: &mut Ctx,
    conversation_id: &str,
    message: Message,
) -> Result<Message, ApiError> {
    ctx.conn().execute(
        "INSERT INTO messages (id, conversation_id, parent_id, role, text, tool_call_id, run_id, status, created, attachments, summary) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        params![message.id, conversation_id, message.parent_id, message.role, message.text, message.tool_call_id, message.run_id, message.status, message.created,
                message.attachments.as_ref().map(Value::to_string), message.summary],
    )?;
    ctx.conn().execute(
        "UPDATE conversations SET head_id = ?1, updated = ?2 WHERE id = ?3",
        params![message.id, message.created, conversation_id],
    )?;
    ctx.emit(
        conversation_id,
        EventKind::MessageCreated,
        json!({"message": message}),
    )?;
    if message.role == Role::User {
        name_if_untitled(ctx, conversation_id, &message.text)?;
    }
    Ok(message)
}

/// A chat with no title is named after the first line of its first user
/// message, whoever made it: a list of "New chat"s says nothing.
fn name_if_untitled(ctx: &mut Ctx, conversation_id: &str, text: &str) -> Result<(), ApiError> {
    let Some(title) = crate::titles::from_message(text) else {
        return Ok(());
    };
    let named = ctx.conn().execute(
        "UPDATE conversations SET title = ?1 WHERE id = ?2 AND title = ''",
        params![title, conversation_id],
    )?;
    if named > 0 {
        announce_conversation(ctx, conversation_id)?;
    }
    Ok(())
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
fn record_start(ctx: &mut Ctx, run_id: &str) -> Result<(), ApiError> {
    let run = queries::run(ctx.conn(), run_id)?;
    ctx.conn().execute(
        "UPDATE runs SET status = ?1 WHERE id = ?2",
        params![RunStatus::Running, run_id],
    )?;
    ctx.emit(
        &run.conversation_id,
        EventKind::RunStarted,
        json!({"run_id": run_id, "mode": run.mode, "model": run.model}),
    )?;
    set_state(ctx, &run.conversation_id, ChatState::Running)
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
    ctx.emit(&run.conversation_id, EventKind::RunFinished, data)?;
    set_state(ctx, &run.conversation_id, ChatState::Idle)?;
    Ok(())
}

/// Says what the conversation is now with `conversation.updated`, and returns it.
pub fn announce_conversation(
    ctx: &mut Ctx,
    conversation_id: &str,
) -> Result<Conversation, ApiError> {
    let conversation = queries::conversation(ctx.conn(), conversation_id, Trashed::Include)?;
    ctx.emit(
        conversation_id,
        EventKind::ConversationUpdated,
        json!({ "conversation": conversation }),
    )?;
    Ok(conversation)
}

/// Sets the conversation's state and says so with `conversation.updated`.
/// While a card of the chat's live run waits for the person, `running` and
/// `queued` leave it `waiting`: egressd's cards come whenever a command
/// reaches out, also before the run's own `running` or while it goes on.
/// The last card's answer, or the run's end, moves it on.
pub fn set_state(ctx: &mut Ctx, conversation_id: &str, state: ChatState) -> Result<(), ApiError> {
    let state = match state {
        ChatState::Running | ChatState::Queued if card_waits(ctx.conn(), conversation_id)? => {
            ChatState::Waiting
        }
        state => state,
    };
    let changed = ctx.conn().execute(
        "UPDATE conversations SET state = ?1 WHERE id = ?2 AND state != ?1",
        params![state, conversation_id],
    )?;
    if changed > 0 {
        announce_conversation(ctx, conversation_id)?;
    }
    Ok(())
}

/// Whether the chat's live run has a card open (what the snapshot shows).
fn card_waits(conn: &rusqlite::Connection, conversation_id: &str) -> Result<bool, ApiError> {
    let Some(run) = queries::active_run(conn, conversation_id)? else {
        return Ok(false);
    };
    Ok(queries::open_consents(conn, conversation_id)?
        .iter()
        .any(|card| card.run_id == run.id))
}
