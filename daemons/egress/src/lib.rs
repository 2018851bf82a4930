//! egressd: the only way out for a chat's sandboxed commands.
//!
//! `proxy.rs` is the forward proxy of one chat: a unix socket whose path is
//! the chat's identity (`<chatd data>/egress/<chat>/proxy.sock`), plain HTTP
//! and `CONNECT`, every address a name resolves to checked by
//! `tandem_shared::netpolicy`, the connection made to the checked address,
//! never by a second lookup; the loopback listener serves chatd's web tools,
//! a chat named by its token; `framing.rs` reads a plain request's one body
//! length. `gate.rs` decides who may reach what (presets, rules, the
//! administrator's settings, consent cards), `relay.rs` carries a tunnel
//! with its idle bound, `api.rs` is the API on `egress.sock` (peer uid
//! checked), `store.rs` keeps presets, rules and the audit in egress.sqlite3,
//! `nft.rs` builds the nftables rules that keep the sandbox user to egressd.

pub mod api;
pub mod config;
pub mod framing;
pub mod gate;
pub mod metrics;
pub mod nft;
pub mod policy;
pub mod proxy;
pub mod relay;
pub mod store;
pub mod verdicts;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use tandem_shared::netpolicy::LivePolicy;
use tandem_shared::shutdown::Shutdown;
use tandem_shared::sync::lock;
use tokio::sync::oneshot;

use crate::config::EgressConfig;
use crate::gate::Gate;
use crate::proxy::Proxy;
use crate::store::Store;

/// The daemon's state.
pub struct Egress {
    pub config: EgressConfig,
    pub proxy: Arc<Proxy>,
    pub started: Instant,
    pub registry: Arc<tandem_shared::metrics::Registry>,
    /// Where the loopback listener listens (port 0 in the settings: the one
    /// the system chose).
    pub listen: std::net::SocketAddr,
    /// Ends long answers (the card stream) when egressd stops.
    pub shutdown: Shutdown,
    /// Each open chat's listener, and the switch that closes it.
    chats: Mutex<HashMap<String, oneshot::Sender<()>>>,
}

impl Egress {
    pub fn gate(&self) -> &Arc<Gate> {
        &self.proxy.gate
    }

    pub fn store(&self) -> &Arc<Store> {
        self.proxy.gate.store()
    }

    /// The proxy socket of a chat.
    pub fn socket_of(&self, chat: &str) -> PathBuf {
        self.config
            .chat_data
            .join("egress")
            .join(chat)
            .join("proxy.sock")
    }

    pub fn open_chats(&self) -> usize {
        lock(&self.chats).len()
    }

    /// Opens a chat's socket, unless it is open already (its rules are read
    /// at each connection, so a new preset needs no new socket). Must run
    /// inside the runtime.
    pub fn open_chat(&self, chat: &str) -> anyhow::Result<()> {
        let path = self.socket_of(chat);
        let mut chats = lock(&self.chats);
        if chats.contains_key(chat) && path.exists() {
            return Ok(());
        }
        if let Some(stop) = chats.remove(chat) {
            let _ = stop.send(());
        }
        let listener = tandem_shared::daemon::bind_unix(&path)?;
        // The socket belongs to whoever owns the chat's egress folder: chatd
        // hands the folder to the sandbox's user, whose commands connect
        // (only root may give it away; otherwise both are this user's).
        if nix::unistd::geteuid().is_root() {
            use std::os::unix::fs::MetadataExt;
            if let Some(meta) = path.parent().and_then(|d| std::fs::metadata(d).ok()) {
                std::os::unix::fs::lchown(&path, Some(meta.uid()), Some(meta.gid()))
                    .with_context(|| format!("giving {} to uid {}", path.display(), meta.uid()))?;
            }
        }
        let (stop, stopped) = oneshot::channel();
        chats.insert(chat.to_string(), stop);
        tracing::info!(chat, "chat socket open");
        tokio::spawn(
            self.proxy
                .clone()
                .serve_chat(listener, chat.to_string(), async move {
                    let _ = stopped.await;
                }),
        );
        Ok(())
    }
}

/// Runs egressd until `shutdown` begins. `reload` reads the settings again
/// (on SIGHUP): the ceiling, the registries, the always-allowed hosts, the
/// ports and the bounds apply to the next decision.
pub async fn run(
    config: EgressConfig,
    shutdown: Shutdown,
    reload: impl Fn() -> anyhow::Result<EgressConfig> + Send + 'static,
) -> anyhow::Result<()> {
    tandem_shared::fsmode::private_dir(&config.data_dir)
        .with_context(|| format!("making data folder {}", config.data_dir.display()))?;
    // Before anything is written or bound: a second egressd would take over
    // this one's sockets and write the same file.
    let _lock = tandem_shared::daemon::hold_lock(&config.data_dir, "egressd")?;
    let store = Arc::new(Store::open(&config.data_dir.join("egress.sqlite3"))?);
    let policy = LivePolicy::open(config.allow_ranges())
        .context("reading this box's interfaces and watching them for changes (netlink)")?;
    // The tokens of the loopback listener come from the forward key, the
    // same chatd has (its forward.key when the secrets file has none).
    let secrets = tandem_shared::secrets::load(&config.secrets, &config.chat_data)?;
    let mut registry = tandem_shared::metrics::Registry::default();
    let metrics = Arc::new(metrics::Metrics::new(&mut registry));
    let gate = Gate::new(config.settings(), store.clone())?;
    let proxy = Arc::new(Proxy::new(
        gate,
        policy,
        store.clone(),
        metrics,
        Some(secrets.forward_key.clone()),
    ));
    let loopback = tokio::net::TcpListener::bind(&config.listen)
        .await
        .with_context(|| format!("listening on {} (egress.listen)", config.listen))?;
    let egress = Arc::new(Egress {
        config: config.clone(),
        proxy: proxy.clone(),
        started: Instant::now(),
        registry: Arc::new(registry),
        listen: loopback.local_addr()?,
        shutdown: shutdown.clone(),
        chats: Mutex::new(HashMap::new()),
    });
    for (chat, _, _) in store.chats()? {
        if let Err(e) = egress.open_chat(&chat) {
            tracing::warn!(chat = %chat, error = %format!("{e:#}"), "a chat's socket could not be opened");
        }
    }
    let purged = store.purge(config.audit_days)?;
    {
        let shutdown = shutdown.clone();
        tokio::spawn(
            proxy
                .clone()
                .serve_loopback(loopback, async move { shutdown.wait().await }),
        );
    }
    let listener = tandem_shared::daemon::bind_unix(&config.socket)?;
    tracing::info!(socket = %config.socket.display(), listen = %egress.listen,
        chats = egress.open_chats(), purged, ceiling = %config.ceiling,
        key_from = %secrets.forward_key_source.display(), "egressd serving");
    // SIGHUP: the settings again (listened for before READY: a reload right
    // after start must not meet the default action, which ends the process).
    {
        let gate = egress.gate().clone();
        let shutdown = shutdown.clone();
        let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .context("listening for SIGHUP")?;
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    got = hangups.recv() => if got.is_none() { return },
                    _ = shutdown.wait() => return,
                }
                match reload().and_then(|c| c.check().map(|_| c)) {
                    Ok(new) => {
                        tracing::info!(ceiling = %new.ceiling, always = new.always_allowed.len(), "settings reloaded");
                        gate.reload(new.settings());
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "settings not reloaded: the old ones stay")
                    }
                }
            }
        });
    }
    // The watchdog pings while the runtime turns.
    tandem_shared::notify::spawn_heartbeat_watchdog(shutdown.clone());
    tandem_shared::notify::ready("serving");
    // The audit is purged daily.
    {
        let store = store.clone();
        let days = config.audit_days;
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(86_400)) => {}
                    _ = shutdown.wait() => return,
                }
                let _ = store.purge(days);
            }
        });
    }
    let router = api::router(egress.clone());
    tandem_shared::listen::serve_socket(
        "api",
        api::PeerChecked::new(listener),
        router,
        tandem_shared::listen::Limits::socket_api(),
        shutdown,
    )
    .await;
    tandem_shared::notify::stopping();
    store.close_audit();
    Ok(())
}
