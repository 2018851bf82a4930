//! Web Push: a browser that subscribed (the page's "Notify me on this
//! device") is told, with no tab open, that a run ended, failed or waits
//! for an answer in a chat no device is watching, and of each new inbox
//! entry. A push carries a title and a link (`/#/c/<chat>`) and nothing
//! else: never a message's text.
//!
//! Who is watching is read at the moment the event is published: the hub's
//! tap (`events.rs`) sees how many devices hold the chat's event stream
//! open, and a tab lets its stream go 5 s after it is hidden. So a chat
//! followed by any client (a tab, `tandem chat attach`, triggerd or
//! connectord following the run they started) gets no push for its run;
//! a trigger's run reaches the phone by its inbox entry instead.
//!
//! The tap and the inbox listener put a message on a bounded queue (full:
//! dropped and counted, a run never waits); one task sends each message to
//! every subscription at once, each push checked and sent by `send.rs`. A
//! 404 or 410 removes the subscription; every outcome is kept on its row
//! and counted in `tandem_pushes`. Logs name subscription ids and counts,
//! never an endpoint, a key or a title.
//!
//! `vapid.rs`: the key pair (`vapid.key`, 0600) and the JWT; `endpoint.rs`:
//! what a subscription may name; `send.rs`: one push on the wire. The rows
//! are `store/push.rs`'s, the routes `api/push.rs`'s.

pub mod endpoint;
pub mod send;
pub mod vapid;

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Value};
use tandem_shared::netpolicy::{BoxPolicy, Policy};
use tandem_shared::shutdown::Shutdown;
use tokio::sync::{broadcast, mpsc};

use crate::config::ChatdConfig;
use crate::events::Event;
use crate::kinds::EventKind;
use crate::metrics::{Metrics, PushLabels};
use crate::store::{self, Store};
use crate::words::RunStatus;
use endpoint::Loopback;
use send::Sent;
use vapid::Vapid;

/// Messages waiting to be sent; past it a message is dropped and counted.
const QUEUE: usize = 256;
/// A push's title is cut to this many characters.
const MAX_TITLE: usize = 120;
/// A VAPID token is valid this long (push services take 24 h at most).
const TOKEN_LIFE: Duration = Duration::from_secs(12 * 3600);

tandem_shared::words! {
    /// How soon a push service should deliver a push (RFC 8030's `Urgency`).
    pub enum Urgency("push urgency") {
        /// A chat waits for the person's answer.
        High => "high",
        Normal => "normal",
    }
}

/// One notification for every subscribed browser.
#[derive(Debug, Clone)]
pub struct Message {
    pub title: String,
    /// Where a click goes: `/#/c/<chat>`, or `/` for no chat.
    pub url: String,
    /// `high` for a chat waiting for an answer, else `normal`.
    pub urgency: Urgency,
    /// What it is about, for the log: a chat or an inbox entry id.
    pub about: String,
}

/// How one message went, over every subscription.
#[derive(Debug, Default, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct Tally {
    pub subscriptions: usize,
    pub delivered: usize,
    pub gone: usize,
    pub refused: usize,
    pub failed: usize,
}

/// The push side of chatd.
pub struct Push {
    vapid: Vapid,
    contact: String,
    ttl: Duration,
    loopback: Loopback,
    /// What a push's endpoint is checked against.
    addresses: BoxPolicy,
    queue: mpsc::Sender<Message>,
    store: Store,
    metrics: Arc<Metrics>,
}

impl Push {
    /// Loads (or makes) the VAPID key, hooks the hub and the inbox, and
    /// starts the sending task.
    pub fn start(
        config: &ChatdConfig,
        store: Store,
        metrics: Arc<Metrics>,
        inbox: &crate::inbox::Inbox,
        shutdown: Shutdown,
    ) -> anyhow::Result<Arc<Push>> {
        let vapid = Vapid::load(&config.data_dir)?;
        let addresses = BoxPolicy::open("push");
        let loopback = if config.push_allow_loopback_for_tests {
            tracing::warn!("push: push_allow_loopback_for_tests is on: loopback endpoints are taken (tests only)");
            Loopback::AllowedForTests
        } else {
            Loopback::Refused
        };
        let (queue, rx) = mpsc::channel(QUEUE);
        let push = Arc::new(Push {
            vapid,
            contact: config.push_contact.clone(),
            ttl: Duration::from_secs(config.push_ttl_s),
            loopback,
            addresses,
            queue: queue.clone(),
            store: store.clone(),
            metrics: metrics.clone(),
        });
        let tap_metrics = metrics.clone();
        store.hub.set_tap(Box::new(move |event, watchers| {
            if watchers > 0 {
                return;
            }
            if let Some(message) = message_of(event) {
                if queue.try_send(message).is_err() {
                    count(&tap_metrics, "dropped", 1);
                }
            }
        }));
        tokio::spawn(listen_to_inbox(
            push.clone(),
            inbox.subscribe(),
            shutdown.clone(),
        ));
        tokio::spawn(work(push.clone(), rx, shutdown));
        Ok(push)
    }

    /// The public key the page subscribes with.
    pub fn public_key(&self) -> &str {
        self.vapid.public_key()
    }

    /// Whether loopback endpoints are taken (the test setting).
    pub fn loopback(&self) -> Loopback {
        self.loopback
    }

    /// The address policy as it is now.
    pub fn policy(&self) -> Arc<Policy> {
        self.addresses.current()
    }

    /// Sends `message` to every subscription now and answers how it went
    /// (the queue's task, and `POST /push/test`).
    pub async fn send_to_all(&self, message: &Message) -> Tally {
        let subscriptions = match self.store.read(|c| Ok(store::push::all(c)?)).await {
            Ok(all) => all,
            Err(e) => {
                tracing::warn!(about = %message.about, error = ?e, "push: the subscriptions could not be read");
                return Tally::default();
            }
        };
        let mut tally = Tally {
            subscriptions: subscriptions.len(),
            ..Tally::default()
        };
        if subscriptions.is_empty() {
            return tally;
        }
        let policy = self.policy();
        let payload = json!({"title": message.title, "url": message.url}).to_string();
        let sends = subscriptions
            .iter()
            .map(|s| self.send_one(s, &payload, message.urgency, &policy));
        let outcomes = futures_util::future::join_all(sends).await;
        let mut results = Vec::new();
        for (subscription, sent) in subscriptions.iter().zip(outcomes) {
            let (word, kept) = match &sent {
                Sent::Delivered(status) => {
                    tally.delivered += 1;
                    ("delivered", status.to_string())
                }
                Sent::Gone(status) => {
                    tally.gone += 1;
                    ("gone", status.to_string())
                }
                Sent::Refused(status) => {
                    tally.refused += 1;
                    ("refused", format!("refused {status}"))
                }
                Sent::Failed(why) => {
                    tally.failed += 1;
                    // The reason names an address at most, never the endpoint's path.
                    tracing::info!(subscription = %subscription.id, about = %message.about, reason = %why, "push: not sent");
                    ("failed", "failed".to_string())
                }
            };
            count(&self.metrics, word, 1);
            results.push((subscription.id.clone(), matches!(sent, Sent::Gone(_)), kept));
        }
        let now = tandem_shared::time::now_rfc3339();
        let written = self
            .store
            .write(move |ctx| {
                for (id, gone, result) in &results {
                    if *gone {
                        store::push::remove(ctx.conn(), id)?;
                    } else {
                        store::push::record(ctx.conn(), id, result, &now)?;
                    }
                }
                Ok(())
            })
            .await;
        if let Err(e) = written {
            tracing::warn!(about = %message.about, error = ?e, "push: the outcomes could not be kept");
        }
        tracing::info!(about = %message.about, subscriptions = tally.subscriptions,
            delivered = tally.delivered, gone = tally.gone, refused = tally.refused,
            failed = tally.failed, "push sent");
        tally
    }

    async fn send_one(
        &self,
        subscription: &store::push::Subscription,
        payload: &str,
        urgency: Urgency,
        policy: &Policy,
    ) -> Sent {
        let endpoint = match endpoint::parse(&subscription.endpoint, self.loopback) {
            Ok(endpoint) => endpoint,
            Err(why) => return Sent::Failed(format!("the endpoint {why}")),
        };
        let keys = match endpoint::keys(&subscription.p256dh, &subscription.auth) {
            Ok(keys) => keys,
            Err((field, why)) => return Sent::Failed(format!("{field} {why}")),
        };
        let Ok(uri) = subscription.endpoint.parse::<hyper::Uri>() else {
            return Sent::Failed("the endpoint is not a request URI".into());
        };
        let built = web_push_native::WebPushBuilder::new(
            uri,
            keys.p256dh,
            web_push_native::Auth::clone_from_slice(&keys.auth),
        )
        .with_valid_duration(self.ttl)
        .build(payload.as_bytes().to_vec());
        let mut request = match built {
            Ok(request) => request,
            Err(e) => return Sent::Failed(format!("the payload could not be encrypted: {e}")),
        };
        let expires = tandem_shared::time::now_unix() + TOKEN_LIFE.as_secs() as i64;
        let authorization = self
            .vapid
            .authorization(&endpoint.origin(), expires, &self.contact);
        let Ok(mut value) = hyper::header::HeaderValue::from_str(&authorization) else {
            return Sent::Failed("the VAPID token cannot go in a header".into());
        };
        value.set_sensitive(true);
        let headers = request.headers_mut();
        headers.insert(hyper::header::AUTHORIZATION, value);
        headers.insert(
            "urgency",
            hyper::header::HeaderValue::from_static(urgency.as_str()),
        );
        send::send(&endpoint, policy, self.loopback, request).await
    }
}

fn count(metrics: &Metrics, outcome: &str, n: u64) {
    metrics
        .pushes
        .get_or_create(&PushLabels {
            outcome: outcome.to_string(),
        })
        .inc_by(n);
}

fn chat_link(conversation_id: &str) -> String {
    format!("/#/c/{conversation_id}")
}

/// What an event of a chat nobody watches pushes, if anything: a run that
/// ended (not one a person stopped) or a card waiting for an answer.
pub fn message_of(event: &Event) -> Option<Message> {
    let (title, urgency) = match event.kind {
        EventKind::ToolConsent => ("A chat is waiting for your answer", Urgency::High),
        EventKind::RunFinished => {
            let data: Value = serde_json::from_str(&event.data).ok()?;
            match RunStatus::parse(data["status"].as_str()?)? {
                RunStatus::Done => ("A reply is ready", Urgency::Normal),
                RunStatus::Failed | RunStatus::Interrupted => ("A reply failed", Urgency::Normal),
                RunStatus::Paused => ("A run paused: Continue goes on", Urgency::Normal),
                _ => return None,
            }
        }
        _ => return None,
    };
    Some(Message {
        title: title.to_string(),
        url: chat_link(&event.conversation_id),
        urgency,
        about: event.conversation_id.clone(),
    })
}

/// An inbox entry's push: its title (a trigger's or a connector's words,
/// never a message's) and its chat.
fn message_of_entry(frame: &[u8]) -> Option<Message> {
    let text = std::str::from_utf8(frame).ok()?;
    let data = text
        .strip_prefix("event: notification.created\ndata: ")?
        .trim_end();
    let entry: Value = serde_json::from_str(data).ok()?;
    let title: String = entry["title"].as_str()?.chars().take(MAX_TITLE).collect();
    let url = entry["conversation_id"]
        .as_str()
        .map_or_else(|| "/".to_string(), chat_link);
    Some(Message {
        title,
        url,
        urgency: Urgency::Normal,
        about: entry["id"].as_str().unwrap_or("").to_string(),
    })
}

async fn listen_to_inbox(
    push: Arc<Push>,
    mut live: broadcast::Receiver<bytes::Bytes>,
    shutdown: Shutdown,
) {
    loop {
        let frame = tokio::select! {
            frame = live.recv() => frame,
            _ = shutdown.wait() => return,
        };
        match frame {
            Ok(frame) => {
                if let Some(message) = message_of_entry(&frame) {
                    if push.queue.try_send(message).is_err() {
                        count(&push.metrics, "dropped", 1);
                    }
                }
            }
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                tracing::warn!(missed, "push: inbox entries went by unheard");
                count(&push.metrics, "dropped", missed);
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

async fn work(push: Arc<Push>, mut queue: mpsc::Receiver<Message>, shutdown: Shutdown) {
    loop {
        let message = tokio::select! {
            message = queue.recv() => message,
            _ = shutdown.wait() => return,
        };
        let Some(message) = message else {
            return;
        };
        push.send_to_all(&message).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: EventKind, data: Value) -> Event {
        Event::new("c_1".into(), 7, kind, data.to_string())
    }

    #[test]
    fn ends_failures_and_cards_push_a_title_and_a_link_only() {
        let check = |kind, data: Value, expect: Option<(&str, &str)>| {
            let got = message_of(&event(kind, data.clone()));
            assert_eq!(
                got.as_ref().map(|m| (m.title.as_str(), m.urgency.as_str())),
                expect,
                "{kind} {data}"
            );
            if let Some(m) = got {
                assert_eq!(m.url, "/#/c/c_1");
            }
        };
        check(
            EventKind::RunFinished,
            json!({"status": "done"}),
            Some(("A reply is ready", "normal")),
        );
        check(
            EventKind::RunFinished,
            json!({"status": "failed", "error": "secret words"}),
            Some(("A reply failed", "normal")),
        );
        check(
            EventKind::RunFinished,
            json!({"status": "interrupted"}),
            Some(("A reply failed", "normal")),
        );
        check(EventKind::RunFinished, json!({"status": "stopped"}), None);
        check(
            EventKind::ToolConsent,
            json!({"summary": "rm -rf"}),
            Some(("A chat is waiting for your answer", "high")),
        );
        check(EventKind::TextDelta, json!({"text": "hello"}), None);
    }

    #[test]
    fn an_inbox_entry_pushes_its_title_and_its_chat() {
        let frame = format!(
            "event: notification.created\ndata: {}\n\n",
            json!({"id": "n_1", "title": "Nightly report ran", "body": "secret", "conversation_id": "c_9"})
        );
        let m = message_of_entry(frame.as_bytes()).unwrap();
        assert_eq!(
            (m.title.as_str(), m.url.as_str(), m.about.as_str()),
            ("Nightly report ran", "/#/c/c_9", "n_1")
        );
        let none = format!(
            "event: notification.created\ndata: {}\n\n",
            json!({"id": "n_2", "title": "x"})
        );
        assert_eq!(message_of_entry(none.as_bytes()).unwrap().url, "/");
        assert!(message_of_entry(b"event: notification.read\ndata: {}\n\n").is_none());
    }
}
