//! connectord: Telegram and Slack bots bound to saved agents.
//!
//! `platform.rs` is what a platform and the core say to each other;
//! `telegram/` (long polling, MarkdownV2) and `slack/` (Socket Mode,
//! mrkdwn) read messages and post answers; `bindings.rs` checks a binding
//! and shows it without its token; `store.rs` keeps bindings (tokens sealed
//! with `connectors.key`), every message read until it is answered, the
//! sender log, each sender's chat and followed threads; `turns.rs` takes a
//! message through chatd (a chat with the agent) and posts the answer;
//! `pacer.rs` keeps a binding's edits 400 ms apart; `api.rs` serves the
//! connector routes on `connectors.sock`, which chatd forwards
//! `/v1/chat-app/connectors*` to.
//!
//! Only the connectord holding `connectord.lock` in the data folder runs:
//! two readers of one bot would take each other's updates.

pub mod api;
pub mod bindings;
pub mod config;
pub mod markup;
pub mod metrics;
pub mod pacer;
pub mod platform;
pub mod slack;
pub mod states;
pub mod store;
pub mod telegram;
pub mod tls;
pub mod turns;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures_util::future::BoxFuture;
use serde_json::{json, Value};
use tandem_shared::chatd::ChatClient;
use tandem_shared::seal::SealKey;
use tandem_shared::secrets::Secret;
use tandem_shared::shutdown::{Shutdown, ShutdownTrigger};
use tandem_shared::sync::lock;

use crate::bindings::{Kind, Settings};
use crate::config::ConnectorsConfig;
use crate::platform::{Inbound, Link, Posted, SendError, Sink, Target};
use crate::states::{BindingState, InboundState};
use crate::store::{Store, Stored, Verdict};

/// The most characters a message may have; a longer one gets a notice.
pub const MAX_TEXT: usize = 8000;
/// Messages a sender may send a minute; more are dropped with a notice.
pub const PER_MINUTE: usize = 20;

/// The daemon's state.
pub struct Connectord {
    pub config: ConnectorsConfig,
    pub store: Store,
    pub seal: SealKey,
    pub chat: ChatClient,
    pub metrics: metrics::Metrics,
    pub registry: Arc<tandem_shared::metrics::Registry>,
    /// Each running binding's reader and what it last said of its link.
    pub links: Mutex<HashMap<String, LinkState>>,
    /// Each binding's pace of edits.
    pub pacers: Mutex<HashMap<String, Arc<pacer::Pacer>>>,
    /// When each (binding, sender) last sent, for the per-minute limit.
    pub rates: Mutex<HashMap<(String, String), VecDeque<Instant>>>,
    /// When each (binding, sender) last had a notice.
    pub noticed: Mutex<HashMap<(String, String), Instant>>,
    /// The chats whose worker runs: (binding, conversation).
    pub workers: Mutex<HashSet<(String, String)>>,
    /// A message was queued: deliver it now.
    pub work: tokio::sync::Notify,
    pub started: Instant,
    pub shutdown: Shutdown,
}

/// One binding's reader.
pub struct LinkState {
    pub state: BindingState,
    pub reason: Option<String>,
    pub since: String,
    /// Stops the reader (a binding switched off, changed or deleted).
    stop: ShutdownTrigger,
}

impl Drop for LinkState {
    fn drop(&mut self) {
        self.stop.begin();
    }
}

/// Where a binding's answers go.
#[derive(Clone)]
pub enum Outbox {
    Telegram(telegram::Outbox),
    Slack(slack::Outbox),
}

impl Outbox {
    pub fn is_slack(&self) -> bool {
        matches!(self, Outbox::Slack(_))
    }

    pub async fn typing(&self, to: &Target) -> Result<(), SendError> {
        match self {
            Outbox::Telegram(o) => o.typing(to).await,
            Outbox::Slack(o) => o.typing(to).await,
        }
    }

    pub async fn post(&self, to: &Target, text: &str) -> Result<Posted, SendError> {
        match self {
            Outbox::Telegram(o) => o.post(to, text).await,
            Outbox::Slack(o) => o.post(to, text).await,
        }
    }

    pub async fn edit(&self, to: &Target, posted: &Posted, text: &str) -> Result<(), SendError> {
        match self {
            Outbox::Telegram(o) => o.edit(to, posted, text).await,
            Outbox::Slack(o) => o.edit(to, posted, text).await,
        }
    }

    pub async fn answer(
        &self,
        to: &Target,
        replace: Option<&Posted>,
        markdown: &str,
    ) -> Result<Vec<Posted>, SendError> {
        match self {
            Outbox::Telegram(o) => o.answer(to, replace, markdown).await,
            Outbox::Slack(o) => o.answer(to, replace, markdown).await,
        }
    }

    pub async fn send_file(
        &self,
        to: &Target,
        name: &str,
        bytes: Vec<u8>,
    ) -> Result<(), SendError> {
        match self {
            Outbox::Telegram(o) => o.send_file(to, name, bytes.into()).await.map(|_| ()),
            Outbox::Slack(o) => o.send_file(to, name, bytes).await,
        }
    }
}

impl Connectord {
    /// The binding's tokens, opened.
    pub fn tokens(&self, b: &Stored) -> Option<(Secret, Option<Secret>)> {
        let token = self.seal.open(&b.token, &b.id).ok()?;
        let app = match &b.app_token {
            Some(sealed) => Some(self.seal.open(sealed, &format!("{}:app", b.id)).ok()?),
            None => None,
        };
        Some((token, app))
    }

    /// Where the binding's answers go; `None` when its tokens do not open
    /// (another connectors.key).
    pub fn outbox(&self, b: &Stored) -> Option<Outbox> {
        let (token, app) = self.tokens(b)?;
        match Kind::parse(&b.kind)? {
            Kind::Telegram => {
                let api = telegram::api::BotApi::new(&self.config.telegram_api, token).ok()?;
                Some(Outbox::Telegram(telegram::Outbox::new(api)))
            }
            Kind::Slack => {
                let api = slack::api::SlackApi::new(&self.config.slack_api, token, app?).ok()?;
                Some(Outbox::Slack(slack::Outbox::new(api)))
            }
        }
    }

    pub fn pacer(&self, binding: &str) -> Arc<pacer::Pacer> {
        lock(&self.pacers)
            .entry(binding.to_string())
            .or_insert_with(|| {
                Arc::new(pacer::Pacer::new(Duration::from_millis(
                    self.config.edit_ms,
                )))
            })
            .clone()
    }

    /// The binding's link as `status` shows it.
    pub fn status(&self, b: &Stored) -> Value {
        if !b.enabled {
            return match &b.off_reason {
                Some(reason) => json!({"state": BindingState::Off, "reason": reason}),
                None => json!({"state": BindingState::Disabled}),
            };
        }
        match lock(&self.links).get(&b.id) {
            Some(link) => json!({"state": link.state, "reason": link.reason, "since": link.since}),
            None => json!({"state": BindingState::Starting}),
        }
    }

    /// Whether the sender may send one more this minute (and counts it).
    fn within_rate(&self, binding: &str, sender: &str) -> bool {
        let mut rates = lock(&self.rates);
        let times = rates
            .entry((binding.to_string(), sender.to_string()))
            .or_default();
        let now = Instant::now();
        while times
            .front()
            .is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(60))
        {
            times.pop_front();
        }
        if times.len() >= PER_MINUTE {
            return false;
        }
        times.push_back(now);
        true
    }
}

/// The core's side of the platforms' readers.
struct Core(Arc<Connectord>);

impl Sink for Core {
    fn accept(
        &self,
        binding: &str,
        messages: Vec<Inbound>,
        position: Option<i64>,
    ) -> BoxFuture<'_, anyhow::Result<()>> {
        let binding = binding.to_string();
        Box::pin(async move {
            let cd = &self.0;
            let bid = binding.clone();
            let stored = cd
                .store
                .call(move |conn| store::binding(conn, &bid))
                .await?
                .context("the binding is gone")?;
            let settings = Settings::of(&stored);
            let mut judged = Vec::with_capacity(messages.len());
            for m in messages {
                let verdict = if !settings.lets_in(
                    &m.sender_id,
                    m.sender_name.as_deref(),
                    &m.chat_id,
                ) {
                    Verdict::Stranger
                } else if m.text.chars().count() > MAX_TEXT {
                    Verdict::Refused(format!(
                        "That message is {} characters; I read at most {MAX_TEXT}. Send it in parts.",
                        m.text.chars().count()
                    ))
                } else if !cd.within_rate(&binding, &m.sender_id) {
                    Verdict::Refused(format!(
                        "That is more than {PER_MINUTE} messages a minute: I skip the rest for a minute."
                    ))
                } else if m.text.trim().is_empty() {
                    continue;
                } else {
                    Verdict::In
                };
                let outcome = match &verdict {
                    Verdict::In => "accepted",
                    Verdict::Refused(_) => "refused",
                    Verdict::Stranger => "stranger",
                };
                cd.metrics
                    .messages
                    .get_or_create(&metrics::Outcome {
                        outcome: outcome.into(),
                    })
                    .inc();
                tracing::info!(binding = %binding, key = %m.key, outcome, "message read");
                judged.push((m, verdict));
            }
            let now = tandem_shared::time::now_rfc3339();
            let now_unix = tandem_shared::time::now_unix();
            // Slack: a thread the bot is asked in is followed from then on,
            // so a follow-up while it works is read too.
            let follow: Vec<(String, String)> =
                if stored.kind == "slack" && settings.follow_threads != bindings::Follow::Never {
                    judged
                        .iter()
                        .filter(|(m, v)| *v == Verdict::In && m.group)
                        .filter_map(|(m, _)| Some((m.chat_id.clone(), m.thread.clone()?)))
                        .collect()
                } else {
                    Vec::new()
                };
            let bid = binding.clone();
            cd.store
                .call(move |conn| {
                    let tx = conn.transaction()?;
                    for (channel, thread) in &follow {
                        store::follow(&tx, &bid, channel, thread, now_unix + 24 * 3600)?;
                    }
                    tx.commit()?;
                    store::accept(conn, &bid, &judged, position, &now, now_unix)
                })
                .await?;
            cd.work.notify_one();
            Ok(())
        })
    }

    fn link(&self, binding: &str, link: Link) -> BoxFuture<'_, ()> {
        let binding = binding.to_string();
        Box::pin(async move {
            let cd = &self.0;
            let (state, reason) = match &link {
                Link::Connected => (BindingState::Connected, None),
                Link::Retrying(r) => (BindingState::Retrying, Some(r.clone())),
                Link::Fatal(r) => (BindingState::Off, Some(r.clone())),
            };
            if let Some(l) = lock(&cd.links).get_mut(&binding) {
                l.state = state;
                l.reason = reason.clone();
                l.since = tandem_shared::time::now_rfc3339();
            }
            tracing::info!(binding = %binding, state = state.as_str(), reason = reason.as_deref().unwrap_or(""), "link");
            if let Link::Fatal(reason) = link {
                switch_off(cd, &binding, &reason).await;
            }
        })
    }

    fn follows(&self, binding: &str, channel: &str, thread: &str) -> BoxFuture<'_, bool> {
        let (binding, channel, thread) =
            (binding.to_string(), channel.to_string(), thread.to_string());
        Box::pin(async move {
            let cd = &self.0;
            let bid = binding.clone();
            let Ok(Some(stored)) = cd.store.call(move |conn| store::binding(conn, &bid)).await
            else {
                return false;
            };
            match Settings::of(&stored).follow_threads {
                bindings::Follow::Never => false,
                bindings::Follow::Any => true,
                bindings::Follow::Own => {
                    let now = tandem_shared::time::now_unix();
                    cd.store
                        .call(move |conn| store::follows(conn, &binding, &channel, &thread, now))
                        .await
                        .unwrap_or(false)
                }
            }
        })
    }
}

/// Switches a binding off by itself (the platform refused its token,
/// another reader for a minute), with a `needs_attention` inbox entry.
pub async fn switch_off(cd: &Arc<Connectord>, binding: &str, reason: &str) {
    let (bid, r) = (binding.to_string(), reason.to_string());
    let now = tandem_shared::time::now_rfc3339();
    let stored = cd
        .store
        .call(move |conn| {
            store::set_enabled(conn, &bid, false, Some(&r), &now)?;
            store::binding(conn, &bid)
        })
        .await;
    lock(&cd.links).remove(binding);
    tracing::warn!(binding, reason, "binding switched off");
    let name = match stored {
        Ok(Some(b)) => b.name,
        _ => binding.to_string(),
    };
    let notice = json!({
        "kind": "needs_attention",
        "source": {"type": "connector", "id": binding, "name": name},
        "title": format!("{name} was switched off"),
        "body": format!("{reason}. Fix it, then switch it on again (tandem connector on {binding})."),
        "key": format!("connector-off-{binding}-{}", tandem_shared::time::now_unix()),
    });
    if let Err(err) = cd.chat.notify(&notice).await {
        tracing::warn!(binding, error = %err, "the inbox entry did not reach chatd");
    }
}

/// Starts, restarts or stops the reader of every binding as stored.
pub async fn sync_links(cd: &Arc<Connectord>) -> anyhow::Result<()> {
    let all = cd.store.call(|conn| store::bindings(conn)).await?;
    let wanted: HashSet<String> = all
        .iter()
        .filter(|b| b.enabled)
        .map(|b| b.id.clone())
        .collect();
    lock(&cd.links).retain(|id, _| wanted.contains(id));
    for b in all.into_iter().filter(|b| b.enabled) {
        if lock(&cd.links).contains_key(&b.id) {
            continue;
        }
        start_link(cd, b);
    }
    Ok(())
}

/// Restarts one binding's reader (its token or settings changed).
pub async fn restart_link(cd: &Arc<Connectord>, id: &str) -> anyhow::Result<()> {
    lock(&cd.links).remove(id);
    sync_links(cd).await
}

fn start_link(cd: &Arc<Connectord>, b: Stored) {
    let (stop, stopped) = Shutdown::new();
    {
        // Stops with the daemon too; ends with the reader's own stop.
        let (stop, all, own) = (stop.clone(), cd.shutdown.clone(), stopped.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = all.wait() => stop.begin(),
                _ = own.wait() => {}
            }
        });
    }
    let Some((token, app)) = cd.tokens(&b) else {
        tracing::warn!(binding = %b.id, "its token does not open with connectors.key");
        lock(&cd.links).insert(
            b.id.clone(),
            LinkState {
                state: BindingState::Off,
                reason: Some(
                    "its token does not open with this connectors.key: save the token again".into(),
                ),
                since: tandem_shared::time::now_rfc3339(),
                stop,
            },
        );
        return;
    };
    let bot: platform::Identity = b
        .bot
        .clone()
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or(platform::Identity {
            id: String::new(),
            name: String::new(),
        });
    let sink: Arc<dyn Sink> = Arc::new(Core(cd.clone()));
    lock(&cd.links).insert(
        b.id.clone(),
        LinkState {
            state: BindingState::Starting,
            reason: None,
            since: tandem_shared::time::now_rfc3339(),
            stop,
        },
    );
    match Kind::parse(&b.kind) {
        Some(Kind::Telegram) => match telegram::api::BotApi::new(&cd.config.telegram_api, token) {
            Ok(api) => {
                let mut link = telegram::TelegramLink::new(b.id.clone(), api, bot, b.position);
                link.conflict_grace = Duration::from_secs(cd.config.conflict_grace_s);
                tokio::spawn(telegram::read(link, sink, stopped));
            }
            Err(err) => tracing::warn!(binding = %b.id, error = %err, "no Telegram client"),
        },
        Some(Kind::Slack) => {
            match app.map(|app| slack::api::SlackApi::new(&cd.config.slack_api, token, app)) {
                Some(Ok(api)) => {
                    let link = slack::SlackLink {
                        binding: b.id.clone(),
                        api,
                        bot,
                    };
                    tokio::spawn(slack::read(link, sink, stopped));
                }
                _ => tracing::warn!(binding = %b.id, "no Slack client (the app token is missing)"),
            }
        }
        None => tracing::warn!(binding = %b.id, kind = %b.kind, "unknown kind"),
    }
    tracing::info!(binding = %b.id, kind = %b.kind, "reading");
}

/// Delivers queued messages, sends notices and picks up unanswered chats.
async fn dispatch(cd: Arc<Connectord>) {
    let mut purged = Instant::now() - Duration::from_secs(3600);
    loop {
        if let Err(err) = turns::send_notices(&cd).await {
            tracing::warn!(error = %format!("{err:#}"), "notices");
        }
        if let Err(err) = turns::deliver_queued(&cd).await {
            tracing::warn!(error = %format!("{err:#}"), "delivering messages");
        }
        // A chat left unanswered by a restart (or a worker that stopped).
        match cd
            .store
            .call(|conn| store::messages_in(conn, InboundState::Sent))
            .await
        {
            Ok(sent) => {
                for m in sent {
                    if let Some(chat) = &m.conversation_id {
                        turns::spawn_worker(&cd, &m.binding_id, chat);
                    }
                }
            }
            Err(err) => tracing::warn!(error = %format!("{err:#}"), "reading sent messages"),
        }
        if purged.elapsed() > Duration::from_secs(3600) {
            purged = Instant::now();
            let before = tandem_shared::time::now_unix() - 7 * 86_400;
            let _ = cd.store.call(move |conn| store::purge(conn, before)).await;
            // Senders quiet for a minute need no count and no notice time.
            let minute = Duration::from_secs(60);
            lock(&cd.rates).retain(|_, t| t.back().is_some_and(|t| t.elapsed() < minute));
            lock(&cd.noticed).retain(|_, t| t.elapsed() < minute);
        }
        tokio::select! {
            _ = cd.work.notified() => {}
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
            _ = cd.shutdown.wait() => return,
        }
    }
}

/// Runs connectord until `shutdown` begins.
pub async fn run(config: ConnectorsConfig, shutdown: Shutdown) -> anyhow::Result<()> {
    tandem_shared::fsmode::private_dir(&config.data_dir)
        .with_context(|| format!("making data folder {}", config.data_dir.display()))?;
    let Some(_lock) =
        tandem_shared::daemon::take_lock(&config.data_dir, "connectord", &shutdown).await?
    else {
        return Ok(());
    };
    let seal = SealKey::load_or_make(&config.data_dir.join("connectors.key"))?;
    let secrets = tandem_shared::secrets::load(&config.secrets, &config.chat_data)?;
    let store = store::open(&config.data_dir.join("connectors.sqlite3"))?;
    let mut registry = tandem_shared::metrics::Registry::default();
    let metrics = metrics::Metrics::new(&mut registry);
    let cd = Arc::new(Connectord {
        chat: ChatClient::new(config.chat_base(), secrets.forward_key.clone())?,
        config: config.clone(),
        store,
        seal,
        metrics,
        registry: Arc::new(registry),
        links: Mutex::default(),
        pacers: Mutex::default(),
        rates: Mutex::default(),
        noticed: Mutex::default(),
        workers: Mutex::default(),
        work: tokio::sync::Notify::new(),
        started: Instant::now(),
        shutdown: shutdown.clone(),
    });
    let listener = tandem_shared::daemon::bind_unix(&config.socket)?;
    sync_links(&cd).await?;
    let count = lock(&cd.links).len();
    tracing::info!(socket = %config.socket.display(), chatd = %config.chat_base(), bindings = count, "connectord serving");
    tandem_shared::notify::spawn_heartbeat_watchdog(shutdown.clone());
    tandem_shared::notify::ready("serving");
    tokio::spawn(dispatch(cd.clone()));
    let router = api::router(cd.clone());
    tandem_shared::listen::serve_socket(
        "api",
        tandem_shared::http::PeerChecked::new(listener),
        router,
        tandem_shared::listen::Limits::socket_api(),
        shutdown.clone(),
    )
    .await;
    lock(&cd.links).clear();
    tandem_shared::notify::stopping();
    Ok(())
}
