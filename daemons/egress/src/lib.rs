//! egressd: the only way out for a chat's sandboxed commands.
//!
//! `proxy.rs` is the forward proxy of one chat: a unix socket whose path is
//! the chat's identity (`<chatd data>/egress/<chat>/proxy.sock`), plain HTTP
//! and `CONNECT`, every address a name resolves to checked by
//! `tandem_shared::netpolicy`, the connection made to the checked address,
//! never by a second lookup. `api.rs` sets a chat's preset and reads the
//! audit; `store.rs` keeps both in egress.sqlite3. Still to come (issue 5):
//! per-chat rules and consent cards, the loopback listener for chatd's web
//! tools, nftables, chatd forwarding the routes.

pub mod api;
pub mod config;
pub mod proxy;
pub mod store;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use tandem_shared::netpolicy::Policy;
use tandem_shared::shutdown::Shutdown;
use tokio::sync::oneshot;

use crate::config::EgressConfig;
use crate::proxy::Preset;
use crate::store::Store;

/// The daemon's state.
pub struct Egress {
    pub config: EgressConfig,
    pub store: Arc<Store>,
    pub policy: Arc<Policy>,
    pub started: Instant,
    /// Each open chat's listener, and the switch that closes it.
    chats: Mutex<HashMap<String, oneshot::Sender<()>>>,
}

impl Egress {
    /// The proxy socket of a chat.
    pub fn socket_of(&self, chat: &str) -> PathBuf {
        self.config
            .chat_data
            .join("egress")
            .join(chat)
            .join("proxy.sock")
    }

    pub fn open_chats(&self) -> usize {
        self.chats.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// (Re)opens a chat's socket with the rules of `preset` under the
    /// ceiling. Must run inside the runtime.
    pub fn open_chat(&self, chat: &str, preset: Preset) -> std::io::Result<()> {
        let path = self.socket_of(chat);
        if let Some(dir) = path.parent() {
            tandem_shared::fsmode::private_dir(dir)?;
        }
        // The old listener closes first; its open tunnels run on.
        if let Some(stop) = self
            .chats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(chat)
        {
            let _ = stop.send(());
        }
        if path.exists() {
            std::fs::remove_file(&path)?;
        }
        let listener = tokio::net::UnixListener::bind(&path)?;
        tandem_shared::fsmode::private_file(&path)?;
        let (stop, stopped) = oneshot::channel();
        self.chats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(chat.to_string(), stop);
        let rules = Arc::new(self.config.rules(preset));
        tracing::info!(
            chat,
            preset = preset.as_str(),
            effective = rules.preset.as_str(),
            "chat socket open"
        );
        tokio::spawn(proxy::serve_chat(
            listener,
            chat.to_string(),
            rules,
            self.policy.clone(),
            self.store.clone(),
            async move {
                let _ = stopped.await;
            },
        ));
        Ok(())
    }
}

/// Runs egressd until `shutdown` begins.
pub async fn run(config: EgressConfig, shutdown: Shutdown) -> anyhow::Result<()> {
    tandem_shared::fsmode::private_dir(&config.data_dir)
        .with_context(|| format!("making data folder {}", config.data_dir.display()))?;
    let store = Arc::new(Store::open(&config.data_dir.join("egress.sqlite3"))?);
    let own = tandem_shared::netpolicy::own_addresses().context("reading this box's addresses")?;
    let policy = Arc::new(Policy::new(config.allow_ranges(), own));
    let egress = Arc::new(Egress {
        config: config.clone(),
        store: store.clone(),
        policy,
        started: Instant::now(),
        chats: Mutex::new(HashMap::new()),
    });
    for (chat, preset) in store.presets()? {
        let preset = Preset::parse(&preset).unwrap_or(Preset::Off);
        if let Err(e) = egress.open_chat(&chat, preset) {
            tracing::warn!(chat = %chat, error = %e, "a chat's socket could not be opened");
        }
    }
    let purged = store.purge(config.audit_days)?;
    if let Some(dir) = config.socket.parent() {
        tandem_shared::fsmode::private_dir(dir)?;
    }
    if config.socket.exists() {
        std::fs::remove_file(&config.socket)?;
    }
    let listener = tokio::net::UnixListener::bind(&config.socket)
        .with_context(|| format!("listening on {}", config.socket.display()))?;
    tandem_shared::fsmode::private_file(&config.socket)?;
    tracing::info!(socket = %config.socket.display(), chats = egress.open_chats(), purged,
        ceiling = %config.ceiling, "egressd serving");
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
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { shutdown.wait().await })
        .await
        .context("serving the API")?;
    tandem_shared::notify::stopping();
    Ok(())
}
