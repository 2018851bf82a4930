//! A fake Telegram Bot API server on 127.0.0.1, for connectord's tests and
//! the benchmark: `/bot<token>/<method>` for getMe, getUpdates (real long
//! polling, Telegram's offset semantics, a second poll ending the first
//! with 409), sendMessage, editMessageText, sendChatAction and sendDocument
//! (multipart), answering in Telegram's JSON shapes and refusing what
//! Telegram refuses: a wrong token (401), MarkdownV2 with an unescaped
//! reserved character or an entity never closed (400 "can't parse
//! entities"), a text over 4,096 UTF-16 units, an edit that changes
//! nothing. Faults come on cue (`fail_next`, `fail_always`).
//!
//! Tests push messages (`push_private`, `push_group`, `push_reply`), read
//! what the bot sent (`sent`, with times) and wait on a condition with a
//! bound (`wait_for`, `wait_sent`), never on a bare sleep.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State as AxumState};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use serde_json::{json, Map, Value};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

mod actions;
mod markdown;
mod messages;
mod params;
mod server;
mod updates;

use actions::*;
pub use markdown::*;
use messages::*;
use params::*;
use server::*;
use updates::*;

/// The bot's user id in every answer.
pub const BOT_ID: i64 = 7_000_001;

/// Telegram's limit on a message's text, in UTF-16 code units.
const TEXT_LIMIT: usize = 4096;

const CONFLICT: &str =
    "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running";
const PARSE_ERROR: &str =
    "Bad Request: can't parse entities: Can't find end of the entity starting at byte offset 12";

/// A failure the fake answers with instead of doing the call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// 409, as when another program polls the same bot.
    Conflict409,
    /// 401, as for a revoked token.
    Unauthorized401,
    /// 429 with `parameters.retry_after` (and a `Retry-After` header).
    TooMany429 { retry_after: u64 },
    /// 400 "can't parse entities".
    ParseError400,
    /// 500 Internal Server Error.
    ServerError500,
    /// The connection is dropped without an answer.
    CutConnection,
}

/// A message the bot sent or edited, or a chat action, as the fake took it.
#[derive(Debug, Clone)]
pub struct Sent {
    /// sendMessage, editMessageText, sendChatAction or sendDocument.
    pub method: String,
    pub chat_id: String,
    /// The message sent or edited (0 for a chat action).
    pub message_id: i64,
    /// The text as sent (MarkdownV2 markup included); a document's caption.
    pub text: String,
    /// The text as Telegram shows it (markup parsed away).
    pub visible: String,
    pub parse_mode: Option<String>,
    pub reply_to: Option<i64>,
    pub action: Option<String>,
    pub file_name: Option<String>,
    pub file: Option<Bytes>,
    pub at: Instant,
}

/// Any request that reached a method, with the status it got.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    pub status: u16,
    /// getUpdates: the offset asked for.
    pub offset: Option<i64>,
    pub at: Instant,
}

#[derive(Debug, Clone)]
struct Stored {
    from_bot: bool,
    visible: String,
    parse_mode: Option<String>,
}

#[derive(Default)]
struct Inner {
    /// Other bots this server also answers getMe for (`add_bot`); each is
    /// its own bot by the digits before its token's colon.
    other_bots: Vec<String>,
    next_update: i64,
    updates: VecDeque<Value>,
    /// Chats seen in pushed updates: id → (type, next message id).
    chats: HashMap<String, (String, i64)>,
    messages: HashMap<(String, i64), Stored>,
    sent: Vec<Sent>,
    calls: Vec<Call>,
    /// getUpdates offsets as asked, recorded on arrival (a long poll ends
    /// only much later).
    polls: Vec<i64>,
    next_faults: HashMap<String, VecDeque<Fault>>,
    always: HashMap<String, Fault>,
    /// Bumped by each getUpdates: an older one still waiting ends with 409.
    poll_generation: u64,
}

struct Shared {
    token: String,
    username: String,
    inner: Mutex<Inner>,
    /// Bumped whenever a waiting getUpdates should look again.
    changed: watch::Sender<u64>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn wake(&self) {
        self.changed.send_modify(|n| *n += 1);
    }
}

/// A running fake; dropping it stops the server and cuts its connections.
pub struct FakeBot {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
}

impl Drop for FakeBot {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl FakeBot {
    /// Serves the bot `username` with `token` on a free loopback port.
    pub async fn start(token: &str, username: &str) -> anyhow::Result<FakeBot> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the fake Bot API")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            token: token.to_string(),
            username: username.to_string(),
            inner: Mutex::new(Inner {
                next_update: 100,
                ..Inner::default()
            }),
            changed: watch::channel(0).0,
        });
        let app = Router::new()
            .route("/{bot}/{method}", any(handle))
            .fallback(|| async { answer_error(404, "Not Found", None) })
            .with_state(shared.clone());
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(serve(listener, app, stopped));
        Ok(FakeBot {
            addr,
            shared,
            stop: Some(stop),
        })
    }

    /// `http://127.0.0.1:PORT`: the Bot API base (`telegram_api`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn username(&self) -> &str {
        &self.shared.username
    }

    /// A private message from user `from_id`; its update id.
    pub fn push_private(&self, from_id: i64, username: &str, text: &str) -> i64 {
        self.push_message(from_id, "private", from_id, username, text, None)
    }

    /// A message in group `chat_id` (negative, as Telegram's are) from
    /// `from_id`; its update id.
    pub fn push_group(&self, chat_id: i64, from_id: i64, username: &str, text: &str) -> i64 {
        self.push_message(chat_id, "supergroup", from_id, username, text, None)
    }

    /// A message in `chat_id` replying to message `reply_to` (one the bot
    /// sent, as `sent()` shows); its update id.
    pub fn push_reply(
        &self,
        chat_id: i64,
        from_id: i64,
        username: &str,
        text: &str,
        reply_to: i64,
    ) -> i64 {
        let kind = if chat_id < 0 { "supergroup" } else { "private" };
        self.push_message(chat_id, kind, from_id, username, text, Some(reply_to))
    }

    /// Any update object (its `update_id` is set here); its update id.
    pub fn push_update(&self, mut update: Value) -> i64 {
        let mut inner = self.shared.lock();
        let id = inner.next_update;
        inner.next_update += 1;
        update["update_id"] = json!(id);
        inner.updates.push_back(update);
        drop(inner);
        self.shared.wake();
        id
    }

    fn push_message(
        &self,
        chat_id: i64,
        kind: &str,
        from_id: i64,
        username: &str,
        text: &str,
        reply_to: Option<i64>,
    ) -> i64 {
        let chat_key = chat_id.to_string();
        let mut inner = self.shared.lock();
        let chat = inner
            .chats
            .entry(chat_key.clone())
            .or_insert_with(|| (kind.to_string(), 1));
        let message_id = chat.1;
        chat.1 += 1;
        let mut chat_obj = json!({"id": chat_id, "type": kind});
        if kind == "private" {
            chat_obj["username"] = json!(username);
            chat_obj["first_name"] = json!(username);
        } else {
            chat_obj["title"] = json!(format!("group {chat_id}"));
        }
        let mut message = json!({
            "message_id": message_id,
            "from": {"id": from_id, "is_bot": false, "first_name": username, "username": username},
            "chat": chat_obj,
            "date": now_s(),
            "text": text,
        });
        let entities = entities_of(text);
        if !entities.is_empty() {
            message["entities"] = Value::Array(entities);
        }
        if let Some(reply) = reply_to {
            let replied = inner.messages.get(&(chat_key.clone(), reply)).cloned();
            let from = if replied.as_ref().is_some_and(|m| m.from_bot) {
                self.bot_user()
            } else {
                json!({"id": from_id, "is_bot": false, "first_name": username})
            };
            message["reply_to_message"] = json!({
                "message_id": reply,
                "from": from,
                "chat": message["chat"].clone(),
                "date": now_s(),
                "text": replied.map(|m| m.visible).unwrap_or_default(),
            });
        }
        inner.messages.insert(
            (chat_key, message_id),
            Stored {
                from_bot: false,
                visible: text.to_string(),
                parse_mode: None,
            },
        );
        let id = inner.next_update;
        inner.next_update += 1;
        inner
            .updates
            .push_back(json!({"update_id": id, "message": message}));
        drop(inner);
        self.shared.wake();
        id
    }

    fn bot_user(&self) -> Value {
        bot_user(&self.shared)
    }

    /// Also answers for another bot's `token` (`<id>:<secret>`): its getMe
    /// says that id, as for a second bot from @BotFather. Its other
    /// methods share this bot's queue.
    pub fn add_bot(&self, token: &str) {
        self.shared.lock().other_bots.push(token.to_string());
    }

    /// Messages sent and edited and chat actions, in order.
    pub fn sent(&self) -> Vec<Sent> {
        self.shared.lock().sent.clone()
    }

    /// What was sent from the `from`-th entry of `sent()` on (a reader
    /// that keeps its place need not copy the whole list each time).
    pub fn sent_from(&self, from: usize) -> Vec<Sent> {
        let inner = self.shared.lock();
        inner
            .sent
            .get(from..)
            .map(<[Sent]>::to_vec)
            .unwrap_or_default()
    }

    /// Sends, edits and documents only (no chat actions).
    pub fn messages(&self) -> Vec<Sent> {
        self.sent()
            .into_iter()
            .filter(|s| s.method != "sendChatAction")
            .collect()
    }

    /// Every request that named a method, with its status.
    pub fn calls(&self) -> Vec<Call> {
        self.shared.lock().calls.clone()
    }

    /// getUpdates calls that arrived (answered or still waiting).
    pub fn get_updates_calls(&self) -> usize {
        self.shared.lock().polls.len()
    }

    /// The offsets getUpdates was asked for, in order of arrival.
    pub fn offsets(&self) -> Vec<i64> {
        self.shared.lock().polls.clone()
    }

    /// Updates queued and not yet confirmed by an offset past them.
    pub fn unconfirmed(&self) -> usize {
        self.shared.lock().updates.len()
    }

    /// The next call of `method` ("*": of any method) fails with `fault`;
    /// several queue up.
    pub fn fail_next(&self, method: &str, fault: Fault) {
        self.shared
            .lock()
            .next_faults
            .entry(method.to_string())
            .or_default()
            .push_back(fault);
    }

    /// Faults queued by `fail_next` for `method` and not yet played.
    pub fn queued_faults(&self, method: &str) -> usize {
        self.shared
            .lock()
            .next_faults
            .get(method)
            .map_or(0, VecDeque::len)
    }

    /// The status of the last answered call of `method` (0: cut), if any.
    pub fn last_status(&self, method: &str) -> Option<u16> {
        let inner = self.shared.lock();
        inner
            .calls
            .iter()
            .rev()
            .find(|c| c.method == method)
            .map(|c| c.status)
    }

    /// Every call of `method` fails with `fault` until `clear_faults`.
    pub fn fail_always(&self, method: &str, fault: Fault) {
        self.shared.lock().always.insert(method.to_string(), fault);
        // A poll waiting now is answered with the fault at its next look.
        self.shared.wake();
    }

    pub fn clear_faults(&self) {
        let mut inner = self.shared.lock();
        inner.next_faults.clear();
        inner.always.clear();
    }

    /// Waits until `check` gives a value, looking every few milliseconds,
    /// for at most `bound`.
    pub async fn wait_for<T>(
        &self,
        what: &str,
        bound: Duration,
        mut check: impl FnMut(&FakeBot) -> Option<T>,
    ) -> anyhow::Result<T> {
        let deadline = Instant::now() + bound;
        let mut pause = Duration::from_millis(2);
        loop {
            if let Some(value) = check(self) {
                return Ok(value);
            }
            if Instant::now() >= deadline {
                bail!("fake Bot API: timed out after {bound:?} waiting for {what}");
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    /// Waits until what was sent satisfies `done`; all of it.
    pub async fn wait_sent(
        &self,
        what: &str,
        bound: Duration,
        done: impl Fn(&[Sent]) -> bool,
    ) -> anyhow::Result<Vec<Sent>> {
        self.wait_for(what, bound, |bot| {
            let sent = bot.sent();
            done(&sent).then_some(sent)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_v2_like_telegram() {
        assert_eq!(
            parse_markdown_v2("*bold* _it_ `c.d` \\.").unwrap(),
            "bold it c.d ."
        );
        assert_eq!(
            parse_markdown_v2("```python\nx = a.b(1)\n```").unwrap(),
            "x = a.b(1)\n"
        );
        assert_eq!(
            parse_markdown_v2("[a\\.b](https://x.org/a_(b\\))").unwrap(),
            "a.b"
        );
        assert_eq!(parse_markdown_v2(">quoted").unwrap(), "quoted");
        let e = parse_markdown_v2("end.").unwrap_err();
        assert_eq!(
            e,
            "Character '.' is reserved and must be escaped with the preceding '\\'"
        );
        let e = parse_markdown_v2("hello there *bold").unwrap_err();
        assert_eq!(e, "Can't find end of the entity starting at byte offset 12");
        assert!(parse_markdown_v2("a > b").is_err());
        assert!(parse_markdown_v2("`a").is_err());
        assert!(parse_markdown_v2("[x](https://y").is_err());
        assert!(parse_markdown_v2("```\na ` b\n```").is_err());
    }

    #[test]
    fn multipart_bodies() {
        let body = b"--XyZ\r\nContent-Disposition: form-data; name=\"chat_id\"\r\n\r\n42\r\n--XyZ\r\nContent-Disposition: form-data; name=\"document\"; filename=\"a.txt\"\r\nContent-Type: text/plain\r\n\r\nhello\r\nworld\r\n--XyZ--\r\n";
        let mut params = Params {
            fields: Map::new(),
            file: None,
        };
        multipart("multipart/form-data; boundary=XyZ", body, &mut params).unwrap();
        assert_eq!(params.string("chat_id").as_deref(), Some("42"));
        let (field, name, bytes) = params.file.unwrap();
        assert_eq!((field.as_str(), name.as_str()), ("document", "a.txt"));
        assert_eq!(&bytes[..], b"hello\r\nworld");
    }

    #[test]
    fn mention_entities_count_utf16() {
        let e = entities_of("😀 @bot hi");
        assert_eq!(
            e,
            vec![json!({"type": "mention", "offset": 3, "length": 4})]
        );
        let e = entities_of("/start@bot go");
        assert_eq!(e[0]["type"], "bot_command");
        assert_eq!(e[0]["length"], 10);
    }
}
