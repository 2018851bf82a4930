//! chatd: chats kept on the server. Runs talk to the box's engine over HTTP;
//! every change is an event with a per-conversation seq, committed before it
//! is sent; a device attaches with a snapshot and tails the log over SSE.
//!
//! `main.rs` parses arguments and loads the config; `run` does the rest, so
//! tests can run chatd in-process or as the real binary alike.

pub mod agent_folder;
pub mod agent_templates;
pub mod agents;
pub mod api;
pub mod attachments;
pub mod config;
pub mod context;
pub mod documents;
pub mod egress;
pub mod engine;
pub mod events;
pub mod failure;
pub mod folders;
pub mod forward;
pub mod front;
pub mod history;
pub mod hostexec;
pub mod housekeeping;
pub mod inbox;
pub mod index;
pub mod kinds;
pub mod listeners;
pub mod mcp;
pub mod metrics;
pub mod model;
pub mod models;
pub mod ndjson;
pub mod permissions;
pub mod prompt;
pub mod push;
pub mod runs;
pub mod sandbox;
pub mod settings;
pub mod skills;
pub mod store;
pub mod titles;
pub mod tools;
pub mod voice;
pub mod words;
pub mod workspace;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use tandem_shared::metrics::Registry;
use tandem_shared::secrets::Secrets;
use tandem_shared::shutdown::Shutdown;
use tandem_shared::sync::lock;

use crate::config::ChatdConfig;
use crate::engine::{Engine, ModelInfo};
use crate::events::Hub;
use crate::metrics::Metrics;
use crate::runs::Runs;
use crate::store::Store;

/// Everything a request handler may need.
pub struct App {
    pub config: Arc<ChatdConfig>,
    pub store: Store,
    pub runs: Runs,
    /// What the engine says of its models (windows, vision, token counts).
    pub models: Arc<crate::models::Models>,
    /// egressd's API: chats' egress presets, rules, audit.
    pub egress: crate::egress::EgressClient,
    /// triggerd's API: `/v1/chat-app/triggers*` is forwarded there.
    pub triggers: crate::forward::Forward,
    /// connectord's API: `/v1/chat-app/connectors*` is forwarded there.
    pub connectors: crate::forward::Forward,
    /// The inbox's live stream (notifications as they commit).
    pub inbox: crate::inbox::Inbox,
    /// Web Push to subscribed browsers (runs ended, cards, inbox entries).
    pub push: Arc<crate::push::Push>,
    /// MCP connectors: the sealing key and the address rules.
    pub mcp: Arc<crate::mcp::Mcp>,
    pub engine: Engine,
    pub secrets: Secrets,
    pub metrics: Arc<Metrics>,
    pub registry: Arc<Registry>,
    /// Where each chat's workspace is (its own or the shared folder).
    pub folders: crate::folders::Folders,
    /// Every change to a chat's files, kept to list and undo.
    pub history: Arc<crate::history::FileHistory>,
    /// Documents read into text, for attachments and the tools.
    pub documents: crate::documents::Documents,
    /// The search index of the chats' files.
    pub index: crate::index::Index,
    /// Each chat's container; `None` when no runtime answered at start.
    pub sandboxes: Option<crate::sandbox::Sandboxes>,
    /// What the runtime said at start (capabilities read it).
    pub sandboxes_probe: crate::sandbox::Sandboxes,
    pub started: Instant,
    pub shutdown: Shutdown,
    engine_state: Mutex<EngineState>,
}

/// What the last look at the engine found.
#[derive(Clone, Default)]
pub struct EngineState {
    pub reachable: bool,
    pub models: Vec<ModelInfo>,
}

impl App {
    pub fn engine_state(&self) -> EngineState {
        lock(&self.engine_state).clone()
    }

    /// The model of a new chat: the configured default, else the engine's first.
    pub fn default_model(&self) -> String {
        if !self.config.default_model.is_empty() {
            return self.config.default_model.clone();
        }
        self.engine_state()
            .models
            .first()
            .map(|m| m.id.clone())
            .unwrap_or_else(|| "default".into())
    }

    /// Removes a chat's container and folders for good. A shared chat's
    /// workspace is the box's shared folder: it stays (only the chat's own
    /// folders under the data folder go).
    pub async fn remove_folders(&self, conversation_id: &str) {
        // A sub-agent has no container or folder of its own: its parent's stay.
        if self.folders.is_subagent(conversation_id) {
            self.folders.forget(conversation_id);
            return;
        }
        self.sandboxes_probe.remove(conversation_id).await;
        remove_chat_folders(&self.config.data_dir, conversation_id);
        self.folders.forget(conversation_id);
    }

    async fn probe_engine(&self) {
        let state = match self.engine.models(Duration::from_secs(2)).await {
            Ok(models) => {
                self.models.remember_all(&models);
                EngineState {
                    reachable: true,
                    models,
                }
            }
            Err(_) => EngineState {
                reachable: false,
                models: self.engine_state().models,
            },
        };
        let was = self.engine_state().reachable;
        if was != state.reachable {
            tracing::info!(reachable = state.reachable, "engine reachability changed");
        }
        *lock(&self.engine_state) = state;
    }
}

/// Pings systemd's watchdog only while the writer commits: a stuck writer
/// (the one thing every request waits on) stops the pings and systemd
/// restarts chatd.
fn spawn_watchdog(app: &Arc<App>) {
    let Some(interval) = tandem_shared::notify::watchdog_interval() else {
        return;
    };
    let last_commit = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let started = Instant::now();
    let probe = app.clone();
    let seen = last_commit.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval / 4);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = probe.shutdown.wait() => return,
            }
            if probe.store.barrier().await.is_ok() {
                seen.store(
                    started.elapsed().as_millis() as u64,
                    std::sync::atomic::Ordering::Relaxed,
                );
            }
        }
    });
    tandem_shared::notify::spawn_watchdog(app.shutdown.clone(), move || {
        let last = last_commit.load(std::sync::atomic::Ordering::Relaxed);
        (started.elapsed().as_millis() as u64).saturating_sub(last) < interval.as_millis() as u64
    });
}

/// Removes a chat's folders (workspace, home, egress, snapshots) for good:
/// only those under the data folder, never the box's shared workspace.
pub fn remove_chat_folders(data_dir: &Path, conversation_id: &str) {
    // Ids are made by chatd, but a folder name from a request is checked anyway.
    if conversation_id.is_empty()
        || !conversation_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return;
    }
    for folder in ["workspaces", "homes", "egress", "snapshots"] {
        let path = data_dir.join(folder).join(conversation_id);
        if path.exists() {
            if let Err(err) = std::fs::remove_dir_all(&path) {
                tracing::warn!(conversation = conversation_id, folder, error = %err, "could not remove a chat folder");
            }
        }
    }
}

/// Runs chatd on `listener` until `shutdown` begins, then ends open runs
/// `interrupted` and returns within the grace period.
pub async fn run(
    config: ChatdConfig,
    listener: tokio::net::TcpListener,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let config = Arc::new(config);
    // o+x an administrator gave (for hostexecd's run_as user) is kept.
    tandem_shared::fsmode::private_dir_passable(&config.data_dir)
        .with_context(|| format!("making data folder {}", config.data_dir.display()))?;
    let secrets = tandem_shared::secrets::load(&config.secrets, &config.data_dir)?;
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::new(&mut registry));
    let hub = Hub::default();
    let store = Store::open(
        &config.data_dir.join("chat.sqlite3"),
        hub.clone(),
        metrics.clone(),
    )?;
    let engine = Engine::new(&config.engine_url);
    // The shared folder trigger chats work in, private like the others.
    tandem_shared::fsmode::private_dir(&config.shared_workspace).with_context(|| {
        format!(
            "making the shared workspace {}",
            config.shared_workspace.display()
        )
    })?;
    let folders = crate::folders::Folders::from_config(&config);
    let (shared, borrowed) = store
        .read(|conn| {
            let mut stmt =
                conn.prepare("SELECT id FROM conversations WHERE workspace = 'shared'")?;
            let ids = stmt
                .query_map([], |r| r.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()?;
            let mut stmt = conn.prepare(
                "SELECT id, parent_id FROM conversations WHERE kind = 'subagent' AND parent_id IS NOT NULL",
            )?;
            let pairs = stmt
                .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?
                .collect::<Result<Vec<_>, _>>()?;
            Ok((ids, pairs))
        })
        .await
        .map_err(|e| anyhow::anyhow!("reading the shared chats: {e:?}"))?;
    folders.load(shared);
    folders.load_borrowed(borrowed);
    folders.load_agents(
        store
            .read(crate::agents::places)
            .await
            .map_err(|e| anyhow::anyhow!("reading the agents' folders: {e:?}"))?,
    );
    // A runtime that answers with the image there: bash runs in sandboxes.
    // Otherwise chats go on without, and bash runs as host_exec says.
    let probe = crate::sandbox::Sandboxes::new(&config, shutdown.clone(), folders.clone())?;
    let status = probe.probe_at_start().await;
    let sandboxes = status.installed.then(|| probe.clone());
    match &status.reason {
        None => {
            tracing::info!(runtime = status.runtime.as_deref().unwrap_or(""), image = %config.sandbox.image, "sandboxes available")
        }
        Some(reason) => tracing::info!(%reason, "no sandboxes"),
    }
    let models = Arc::new(crate::models::Models::new(
        engine.clone(),
        config.context_window,
    ));
    let history = Arc::new(crate::history::FileHistory::new(
        store.clone(),
        &config.data_dir,
    ));
    // The reader is chatd's own binary (main.rs starts it as the reader).
    let documents = crate::documents::Documents::new(
        crate::documents::Reader::new("/proc/self/exe".into(), crate::documents::Limits::default()),
        store.clone(),
    );
    let index = crate::index::Index::new(
        store.clone(),
        history.blobs().clone(),
        documents.clone(),
        history.changed(),
    );
    let mcp = Arc::new(crate::mcp::Mcp::start(&config)?);
    let runs = Runs::new(crate::runs::RunsParts {
        mcp: Arc::new(crate::mcp::sessions::Sessions::new(
            mcp.clone(),
            sandboxes.clone(),
            // Without a runtime, stdio servers run through hostexecd
            // unless host commands are off.
            (config.host_exec() != crate::config::HostExec::Off)
                .then(|| {
                    crate::hostexec::HostExec::new(&config.hostexec_socket)
                        .inspect_err(|e| tracing::warn!(error = %e, "no client for hostexecd: stdio MCP servers cannot run without a sandbox"))
                        .ok()
                })
                .flatten(),
            folders.clone(),
            crate::mcp::stdio::probe_chat(&config.data_dir),
            std::time::Duration::from_secs(config.mcp_call_limit_s),
        )),
        documents: documents.clone(),
        index: index.clone(),
        history: history.clone(),
        store: store.clone(),
        engine: engine.clone(),
        models: models.clone(),
        config: config.clone(),
        metrics: metrics.clone(),
        shutdown: shutdown.clone(),
        forward_key: secrets.forward_key.clone(),
        sandboxes: sandboxes.clone(),
        folders: folders.clone(),
    });
    // egressd may start before or after chatd: the listener waits for it.
    let egress = crate::egress::EgressClient::new(&config.egress_socket)?;
    runs.set_egress(egress.clone());
    crate::runs::spawn_card_listener(egress.clone(), runs.clone(), shutdown.clone());
    let triggers = crate::forward::Forward::triggers(&config.triggers_socket)?;
    let connectors = crate::forward::Forward::connectors(&config.connectors_socket)?;
    let inbox = crate::inbox::Inbox::default();
    let push = crate::push::Push::start(
        &config,
        store.clone(),
        metrics.clone(),
        &inbox,
        shutdown.clone(),
    )?;
    let app = Arc::new(App {
        config: config.clone(),
        store: store.clone(),
        runs: runs.clone(),
        models,
        egress,
        triggers,
        connectors,
        inbox,
        push,
        mcp,
        engine,
        secrets,
        metrics,
        registry: Arc::new(registry),
        folders,
        history,
        documents,
        index: index.clone(),
        sandboxes: sandboxes.clone(),
        sandboxes_probe: probe.clone(),
        started: Instant::now(),
        shutdown: shutdown.clone(),
        engine_state: Mutex::new(EngineState::default()),
    });
    app.probe_engine().await;
    // Before runs are recovered: a recovered run's command finds its
    // sandbox counted.
    if status.runtime.is_some() {
        // Containers of chats that are gone or in the trash go now; running
        // ones of live chats count as started.
        let live = store
            .read(|conn| {
                let mut stmt =
                    conn.prepare("SELECT id FROM conversations WHERE deleted_at IS NULL")?;
                let ids = stmt
                    .query_map([], |r| r.get::<_, String>(0))?
                    .collect::<Result<std::collections::HashSet<_>, _>>()?;
                Ok(ids)
            })
            .await
            .map_err(|e| anyhow::anyhow!("reading the chats for the sandbox sweep: {e:?}"))?;
        probe.sweep(|chat| live.contains(chat)).await;
        probe.spawn_monitor();
    }
    runs.recover().await?;

    let probe = app.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(10));
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    probe.probe_engine().await;
                    // systemctl status shows this line.
                    tandem_shared::notify::status(&format!(
                        "serving; {} runs, {} devices; engine {}",
                        probe.runs.running_count(),
                        probe.metrics.sse_devices.get(),
                        if probe.engine_state().reachable { "reachable" } else { "NOT reachable" },
                    ));
                }
                _ = probe.shutdown.wait() => return,
            }
        }
    });
    let sweeper = app.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(60));
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    sweeper.store.hub.sweep();
                    let closed = sweeper.runs.mcp().close_idle().await;
                    if closed > 0 {
                        tracing::info!(closed, "mcp: idle sessions closed");
                    }
                }
                _ = sweeper.shutdown.wait() => return,
            }
        }
    });
    housekeeping::spawn(app.clone());
    app.runs.start_loops();
    index.spawn(shutdown.clone());

    let address = listener.local_addr()?;
    tracing::info!(%address, data = %config.data_dir.display(), engine = %config.engine_url,
        forward_key_from = %app.secrets.forward_key_source.display(), max_runs = config.max_runs, "chatd serving");
    let router = api::router(app.clone());
    // The front binds before READY: a front that cannot listen is a failed start.
    let front = match config
        .front_addr()
        .map_err(|e| anyhow::anyhow!("chatd.front: {e}"))?
    {
        Some(front_address) => {
            let front_listener = tandem_shared::listen::bind_tcp(front_address)
                .with_context(|| format!("listening on the front {front_address} (chatd.front)"))?;
            let front_router = front::router(app.clone(), router.clone())?;
            tracing::info!(address = %front_address, admin_token = app.secrets.admin_token.is_some(),
                "front serving the page");
            Some(tokio::spawn(tandem_shared::listen::serve_tcp(
                "front",
                front_listener,
                front_router,
                config.connections.front(),
                shutdown.clone(),
            )))
        }
        None => None,
    };
    let server = tokio::spawn(tandem_shared::listen::serve_tcp(
        "api",
        listener,
        router,
        config.connections.api(),
        shutdown.clone(),
    ));
    // READY only now: the listener is bound, the database migrated, runs
    // recovered and the server task running, so /health answers.
    tandem_shared::notify::ready(&format!("serving on {address}"));
    spawn_watchdog(&app);
    shutdown.wait().await;
    tandem_shared::notify::stopping();
    let grace = Duration::from_secs(config.shutdown_grace_s);
    let left = runs.drain(grace).await;
    if left > 0 {
        tracing::warn!(
            runs = left,
            "runs still open at the end of the grace period"
        );
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), server).await;
    if let Some(front) = front {
        let _ = tokio::time::timeout(Duration::from_secs(1), front).await;
    }
    store.close().await;
    tracing::info!("chatd stopped");
    Ok(())
}
