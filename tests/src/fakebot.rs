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

async fn serve(listener: TcpListener, app: Router, mut stopped: oneshot::Receiver<()>) {
    let (cut_tx, cut_rx) = watch::channel(false);
    loop {
        tokio::select! {
            _ = &mut stopped => break,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                let app = app.clone();
                let mut cut = cut_rx.clone();
                tokio::spawn(async move {
                    let conn = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
                    tokio::select! {
                        _ = conn => {}
                        _ = cut.wait_for(|c| *c) => {}
                    }
                });
            }
        }
    }
    let _ = cut_tx.send(true);
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn bot_user(shared: &Shared) -> Value {
    json!({"id": BOT_ID, "is_bot": true, "first_name": "Tandem Fake", "username": shared.username})
}

/// `mention` entities for @names and a `bot_command` for a leading
/// /command, with UTF-16 offsets as Telegram gives them.
fn entities_of(text: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut offset = 0usize;
    let mut i = 0;
    while i < chars.len() {
        let start_ok = i == 0 || !is_name_char(chars[i - 1]);
        if (chars[i] == '@' || (chars[i] == '/' && i == 0)) && start_ok {
            let mut j = i + 1;
            while j < chars.len()
                && (is_name_char(chars[j]) || (chars[i] == '/' && chars[j] == '@'))
            {
                j += 1;
            }
            if j - i > 1 {
                let length: usize = chars[i..j].iter().map(|c| c.len_utf16()).sum();
                let kind = if chars[i] == '@' {
                    "mention"
                } else {
                    "bot_command"
                };
                out.push(json!({"type": kind, "offset": offset, "length": length}));
                offset += length;
                i = j;
                continue;
            }
        }
        offset += chars[i].len_utf16();
        i += 1;
    }
    out
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn answer_ok(result: Value) -> Response {
    let body = json!({"ok": true, "result": result}).to_string();
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn answer_error(code: u16, description: &str, retry_after: Option<u64>) -> Response {
    let mut body = json!({"ok": false, "error_code": code, "description": description});
    if let Some(seconds) = retry_after {
        body["parameters"] = json!({"retry_after": seconds});
    }
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_REQUEST);
    let mut response = (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response();
    if let Some(seconds) = retry_after {
        if let Ok(v) = seconds.to_string().parse() {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
    }
    response
}

fn fault_response(fault: &Fault) -> Response {
    match fault {
        Fault::Conflict409 => answer_error(409, CONFLICT, None),
        Fault::Unauthorized401 => answer_error(401, "Unauthorized", None),
        Fault::TooMany429 { retry_after } => answer_error(
            429,
            &format!("Too Many Requests: retry after {retry_after}"),
            Some(*retry_after),
        ),
        Fault::ParseError400 => answer_error(400, PARSE_ERROR, None),
        Fault::ServerError500 => answer_error(500, "Internal Server Error", None),
        Fault::CutConnection => {
            // Headers promise a body that never comes: hyper drops the
            // connection, and the client sees it cut.
            let stream = futures_util::stream::once(async {
                Err::<Bytes, std::io::Error>(std::io::Error::other("cut on cue"))
            });
            Response::builder()
                .status(200)
                .header(header::CONTENT_LENGTH, "64")
                .body(Body::from_stream(stream))
                .unwrap_or_default()
        }
    }
}

/// A request's parameters (JSON, a form, multipart or the query) and its
/// uploaded file, if any.
struct Params {
    fields: Map<String, Value>,
    file: Option<(String, String, Bytes)>,
}

impl Params {
    fn parse(headers: &HeaderMap, query: Option<String>, body: &Bytes) -> Result<Params, String> {
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let mut params = Params {
            fields: Map::new(),
            file: None,
        };
        if let Some(query) = query {
            form_fields(&query, &mut params.fields);
        }
        if body.is_empty() {
            return Ok(params);
        }
        if content_type.starts_with("application/json") {
            match serde_json::from_slice::<Value>(body) {
                Ok(Value::Object(map)) => params.fields.extend(map),
                _ => return Err("Bad Request: can't parse JSON".into()),
            }
        } else if content_type.starts_with("multipart/form-data") {
            multipart(&content_type, body, &mut params)?;
        } else if content_type.starts_with("application/x-www-form-urlencoded") {
            form_fields(&String::from_utf8_lossy(body), &mut params.fields);
        }
        Ok(params)
    }

    fn get(&self, key: &str) -> Option<&Value> {
        self.fields.get(key)
    }

    /// A field as a string (numbers as their digits).
    fn string(&self, key: &str) -> Option<String> {
        match self.get(key)? {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }

    fn int(&self, key: &str) -> Option<i64> {
        match self.get(key)? {
            Value::Number(n) => n.as_i64(),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        }
    }

    /// A field holding JSON (a form sends objects as JSON text).
    fn object(&self, key: &str) -> Option<Value> {
        match self.get(key)? {
            Value::String(s) => serde_json::from_str(s).ok(),
            other => Some(other.clone()),
        }
    }
}

fn form_fields(text: &str, fields: &mut Map<String, Value>) {
    for pair in text.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        fields.insert(percent_decode(k), Value::String(percent_decode(v)));
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// multipart/form-data: text fields into `fields`, the one file (if any)
/// into `file` as (field, file name, bytes).
fn multipart(content_type: &str, body: &[u8], params: &mut Params) -> Result<(), String> {
    let boundary = content_type
        .split(';')
        .find_map(|p| p.trim().strip_prefix("boundary="))
        .map(|b| b.trim_matches('"').to_string())
        .ok_or("Bad Request: no multipart boundary")?;
    let delimiter = format!("--{boundary}").into_bytes();
    let mut rest = body;
    let Some(first) = find(rest, &delimiter) else {
        return Err("Bad Request: a broken multipart body".into());
    };
    rest = &rest[first + delimiter.len()..];
    loop {
        if rest.starts_with(b"--") {
            return Ok(());
        }
        rest = rest.strip_prefix(b"\r\n").unwrap_or(rest);
        let Some(end) = find(rest, &delimiter) else {
            return Err("Bad Request: a broken multipart body".into());
        };
        let part = &rest[..end];
        let part = part.strip_suffix(b"\r\n").unwrap_or(part);
        let Some(split) = find(part, b"\r\n\r\n") else {
            return Err("Bad Request: a multipart part without headers".into());
        };
        let head = String::from_utf8_lossy(&part[..split]).into_owned();
        let content = &part[split + 4..];
        let disposition = head
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("content-disposition"))
            .unwrap_or("");
        let name = quoted(disposition, "name=").unwrap_or_default();
        match quoted(disposition, "filename=") {
            Some(file_name) => {
                params.file = Some((name, file_name, Bytes::copy_from_slice(content)));
            }
            None => {
                params.fields.insert(
                    name,
                    Value::String(String::from_utf8_lossy(content).into_owned()),
                );
            }
        }
        rest = &rest[end + delimiter.len()..];
    }
}

fn quoted(header: &str, key: &str) -> Option<String> {
    header.split(';').find_map(|p| {
        let p = p.trim();
        p.strip_prefix(key).map(|v| v.trim_matches('"').to_string())
    })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

async fn handle(
    AxumState(shared): AxumState<Arc<Shared>>,
    Path((bot, method)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let record = |status: u16, offset: Option<i64>| {
        shared.lock().calls.push(Call {
            method: method.clone(),
            status,
            offset,
            at: Instant::now(),
        });
    };
    let token = bot.strip_prefix("bot").unwrap_or("");
    let other = shared.lock().other_bots.iter().any(|t| t == token);
    if token != shared.token && !other {
        record(401, None);
        return answer_error(401, "Unauthorized", None);
    }
    if other && method == "getMe" {
        record(200, None);
        let id: i64 = token
            .split(':')
            .next()
            .and_then(|d| d.parse().ok())
            .unwrap_or(1);
        return answer_ok(
            json!({"id": id, "is_bot": true, "first_name": "Tandem Fake", "username": format!("bot{id}_bot")}),
        );
    }
    let params = match Params::parse(&headers, query, &body) {
        Ok(p) => p,
        Err(why) => {
            record(400, None);
            return answer_error(400, &why, None);
        }
    };
    let offset = (method == "getUpdates").then(|| params.int("offset").unwrap_or(0));
    if let Some(offset) = offset {
        shared.lock().polls.push(offset);
    }
    let fault = {
        let mut inner = shared.lock();
        let queued = inner
            .next_faults
            .get_mut(&method)
            .and_then(VecDeque::pop_front)
            .or_else(|| inner.next_faults.get_mut("*").and_then(VecDeque::pop_front));
        queued.or_else(|| {
            inner
                .always
                .get(&method)
                .or_else(|| inner.always.get("*"))
                .cloned()
        })
    };
    if let Some(fault) = fault {
        let status = match fault {
            Fault::Conflict409 => 409,
            Fault::Unauthorized401 => 401,
            Fault::TooMany429 { .. } => 429,
            Fault::ParseError400 => 400,
            Fault::ServerError500 => 500,
            Fault::CutConnection => 0,
        };
        record(status, offset);
        return fault_response(&fault);
    }
    let outcome = match method.as_str() {
        "getMe" => Ok(bot_user(&shared)),
        "getUpdates" => get_updates(&shared, &params).await,
        "sendMessage" => send_message(&shared, &params),
        "editMessageText" => edit_message_text(&shared, &params),
        "sendChatAction" => send_chat_action(&shared, &params),
        "sendDocument" => send_document(&shared, &params),
        _ => Err((404, "Not Found".to_string(), None)),
    };
    match outcome {
        Ok(result) => {
            record(200, offset);
            answer_ok(result)
        }
        Err((code, description, retry_after)) => {
            record(code, offset);
            answer_error(code, &description, retry_after)
        }
    }
}

type Outcome = Result<Value, (u16, String, Option<u64>)>;

fn bad(description: &str) -> (u16, String, Option<u64>) {
    (400, format!("Bad Request: {description}"), None)
}

async fn get_updates(shared: &Shared, params: &Params) -> Outcome {
    let offset = params.int("offset").unwrap_or(0);
    let limit = params.int("limit").unwrap_or(100).clamp(1, 100) as usize;
    let timeout = params.int("timeout").unwrap_or(0).clamp(0, 50) as u64;
    let allowed: Vec<String> = params
        .object("allowed_updates")
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    let generation = {
        let mut inner = shared.lock();
        inner.poll_generation += 1;
        inner.poll_generation
    };
    shared.wake();
    let mut changed = shared.changed.subscribe();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
    loop {
        changed.borrow_and_update();
        {
            let mut inner = shared.lock();
            if inner.poll_generation != generation {
                return Err((409, CONFLICT.into(), None));
            }
            if inner.always.contains_key("getUpdates") {
                // A fault switched on while this poll waited: ended like
                // Telegram ends it, with the fault at the next call.
                return Ok(json!([]));
            }
            // Telegram: an offset confirms every update before it; a
            // negative one keeps only the last -offset updates.
            if offset > 0 {
                inner
                    .updates
                    .retain(|u| u["update_id"].as_i64().unwrap_or(0) >= offset);
            } else if offset < 0 {
                let keep = offset.unsigned_abs() as usize;
                while inner.updates.len() > keep {
                    inner.updates.pop_front();
                }
            }
            let ready: Vec<Value> = inner
                .updates
                .iter()
                .filter(|u| allowed.is_empty() || allowed.iter().any(|k| u.get(k).is_some()))
                .take(limit)
                .cloned()
                .collect();
            if !ready.is_empty() {
                return Ok(Value::Array(ready));
            }
        }
        tokio::select! {
            _ = changed.changed() => {}
            _ = tokio::time::sleep_until(deadline) => return Ok(json!([])),
        }
    }
}

/// The chat a call names, which must be one the fake has seen.
fn chat_of(
    shared: &Shared,
    params: &Params,
) -> Result<(String, String), (u16, String, Option<u64>)> {
    let chat_id = params
        .string("chat_id")
        .ok_or_else(|| bad("chat_id is empty"))?;
    let inner = shared.lock();
    let (kind, _) = inner
        .chats
        .get(&chat_id)
        .ok_or_else(|| bad("chat not found"))?;
    Ok((chat_id, kind.clone()))
}

/// The text as Telegram shows it after `parse_mode`, or its refusal.
fn visible_text(
    text: &str,
    parse_mode: Option<&str>,
) -> Result<String, (u16, String, Option<u64>)> {
    let visible = match parse_mode {
        None | Some("") => text.to_string(),
        Some("MarkdownV2") => {
            parse_markdown_v2(text).map_err(|why| bad(&format!("can't parse entities: {why}")))?
        }
        Some("HTML") | Some("Markdown") => text.to_string(),
        Some(_) => return Err(bad("unsupported parse_mode")),
    };
    if visible.trim().is_empty() {
        return Err(bad("message text is empty"));
    }
    if visible.encode_utf16().count() > TEXT_LIMIT {
        return Err(bad("message is too long"));
    }
    Ok(visible)
}

fn reply_of(params: &Params) -> (Option<i64>, bool) {
    if let Some(reply) = params.object("reply_parameters") {
        let id = reply["message_id"].as_i64();
        let lenient = reply["allow_sending_without_reply"]
            .as_bool()
            .unwrap_or(false);
        return (id, lenient);
    }
    let lenient = matches!(
        params.get("allow_sending_without_reply"),
        Some(Value::Bool(true))
    );
    (params.int("reply_to_message_id"), lenient)
}

fn message_object(
    shared: &Shared,
    chat_id: &str,
    kind: &str,
    message_id: i64,
    text: &str,
) -> Value {
    let id: Value = chat_id
        .parse::<i64>()
        .map_or_else(|_| json!(chat_id), |n| json!(n));
    json!({
        "message_id": message_id,
        "from": bot_user(shared),
        "chat": {"id": id, "type": kind},
        "date": now_s(),
        "text": text,
    })
}

fn send_message(shared: &Shared, params: &Params) -> Outcome {
    let (chat_id, kind) = chat_of(shared, params)?;
    let text = params.string("text").unwrap_or_default();
    let parse_mode = params.string("parse_mode");
    let visible = visible_text(&text, parse_mode.as_deref())?;
    let (reply_to, lenient) = reply_of(params);
    let mut inner = shared.lock();
    let reply_to = match reply_to {
        Some(r) if inner.messages.contains_key(&(chat_id.clone(), r)) => Some(r),
        Some(_) if lenient => None,
        Some(_) => return Err(bad("message to be replied not found")),
        None => None,
    };
    let message_id = next_message_id(&mut inner, &chat_id);
    inner.messages.insert(
        (chat_id.clone(), message_id),
        Stored {
            from_bot: true,
            visible: visible.clone(),
            parse_mode: parse_mode.clone(),
        },
    );
    inner.sent.push(Sent {
        method: "sendMessage".into(),
        chat_id: chat_id.clone(),
        message_id,
        text,
        visible: visible.clone(),
        parse_mode,
        reply_to,
        action: None,
        file_name: None,
        file: None,
        at: Instant::now(),
    });
    let mut message = message_object(shared, &chat_id, &kind, message_id, &visible);
    if let Some(r) = reply_to {
        message["reply_to_message"] = json!({"message_id": r});
    }
    Ok(message)
}

fn next_message_id(inner: &mut Inner, chat_id: &str) -> i64 {
    let chat = inner.chats.get_mut(chat_id).expect("the chat was checked");
    let id = chat.1;
    chat.1 += 1;
    id
}

fn edit_message_text(shared: &Shared, params: &Params) -> Outcome {
    let (chat_id, kind) = chat_of(shared, params)?;
    let message_id = params
        .int("message_id")
        .ok_or_else(|| bad("message identifier is not specified"))?;
    let text = params.string("text").unwrap_or_default();
    let parse_mode = params.string("parse_mode");
    let visible = visible_text(&text, parse_mode.as_deref())?;
    let mut inner = shared.lock();
    let key = (chat_id.clone(), message_id);
    let Some(stored) = inner.messages.get(&key).cloned() else {
        return Err(bad("message to edit not found"));
    };
    if !stored.from_bot {
        return Err(bad("message can't be edited"));
    }
    if stored.visible == visible && stored.parse_mode == parse_mode {
        return Err(bad(
            "message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message",
        ));
    }
    inner.messages.insert(
        key,
        Stored {
            from_bot: true,
            visible: visible.clone(),
            parse_mode: parse_mode.clone(),
        },
    );
    inner.sent.push(Sent {
        method: "editMessageText".into(),
        chat_id: chat_id.clone(),
        message_id,
        text,
        visible: visible.clone(),
        parse_mode,
        reply_to: None,
        action: None,
        file_name: None,
        file: None,
        at: Instant::now(),
    });
    let mut message = message_object(shared, &chat_id, &kind, message_id, &visible);
    message["edit_date"] = json!(now_s());
    Ok(message)
}

const ACTIONS: &[&str] = &[
    "typing",
    "upload_photo",
    "record_video",
    "upload_video",
    "record_voice",
    "upload_voice",
    "upload_document",
    "choose_sticker",
    "find_location",
    "record_video_note",
    "upload_video_note",
];

fn send_chat_action(shared: &Shared, params: &Params) -> Outcome {
    let (chat_id, _) = chat_of(shared, params)?;
    let action = params.string("action").unwrap_or_default();
    if !ACTIONS.contains(&action.as_str()) {
        return Err(bad("wrong parameter action in request"));
    }
    shared.lock().sent.push(Sent {
        method: "sendChatAction".into(),
        chat_id,
        message_id: 0,
        text: String::new(),
        visible: String::new(),
        parse_mode: None,
        reply_to: None,
        action: Some(action),
        file_name: None,
        file: None,
        at: Instant::now(),
    });
    Ok(json!(true))
}

fn send_document(shared: &Shared, params: &Params) -> Outcome {
    let (chat_id, kind) = chat_of(shared, params)?;
    let Some((field, file_name, bytes)) = params.file.clone() else {
        return Err(bad("there is no document in the request"));
    };
    if field != "document" {
        return Err(bad("there is no document in the request"));
    }
    if bytes.is_empty() {
        return Err(bad("file must be non-empty"));
    }
    let caption = params.string("caption").unwrap_or_default();
    let (reply_to, lenient) = reply_of(params);
    let mut inner = shared.lock();
    let reply_to = match reply_to {
        Some(r) if inner.messages.contains_key(&(chat_id.clone(), r)) => Some(r),
        Some(_) if lenient => None,
        Some(_) => return Err(bad("message to be replied not found")),
        None => None,
    };
    let message_id = next_message_id(&mut inner, &chat_id);
    inner.messages.insert(
        (chat_id.clone(), message_id),
        Stored {
            from_bot: true,
            visible: caption.clone(),
            parse_mode: None,
        },
    );
    inner.sent.push(Sent {
        method: "sendDocument".into(),
        chat_id: chat_id.clone(),
        message_id,
        text: caption.clone(),
        visible: caption.clone(),
        parse_mode: None,
        reply_to,
        action: None,
        file_name: Some(file_name.clone()),
        file: Some(bytes.clone()),
        at: Instant::now(),
    });
    let mut message = message_object(shared, &chat_id, &kind, message_id, "");
    if let Some(m) = message.as_object_mut() {
        m.remove("text");
        if !caption.is_empty() {
            m.insert("caption".into(), json!(caption));
        }
    }
    message["document"] = json!({
        "file_name": file_name,
        "mime_type": "application/octet-stream",
        "file_id": format!("doc{message_id}"),
        "file_unique_id": format!("u{message_id}"),
        "file_size": bytes.len(),
    });
    Ok(message)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entity {
    Bold,
    Italic,
    Underline,
    Strike,
    Spoiler,
    Code,
    Pre,
    TextUrl,
}

/// MarkdownV2 as Telegram parses it (after tdlib's `parse_markdown_v2`):
/// the visible text, or why it cannot be parsed in Telegram's words.
pub fn parse_markdown_v2(text: &str) -> Result<String, String> {
    const RESERVED: &str = "_*[]()~`>#+-=|{}.!";
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let at = |i: usize| chars.get(i).map(|c| c.1);
    let mut out = String::new();
    let mut stack: Vec<(Entity, usize)> = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let (byte, c) = chars[i];
        if c == '\\' && at(i + 1).is_some_and(|n| (1..=126).contains(&(n as u32))) {
            out.push(chars[i + 1].1);
            i += 2;
            continue;
        }
        let top = stack.last().map(|e| e.0);
        let in_code = matches!(top, Some(Entity::Code | Entity::Pre));
        let reserved = if in_code {
            c == '`'
        } else {
            RESERVED.contains(c)
        };
        if !reserved {
            out.push(c);
            i += 1;
            continue;
        }
        // A block quote: '>' at the start of a line.
        if c == '>' && !in_code && (i == 0 || chars[i - 1].1 == '\n') {
            i += 1;
            continue;
        }
        let next = at(i + 1);
        let ends = match top {
            Some(Entity::Bold) => c == '*',
            Some(Entity::Italic) => c == '_' && next != Some('_'),
            Some(Entity::Underline) => c == '_' && next == Some('_'),
            Some(Entity::Strike) => c == '~',
            Some(Entity::Spoiler) => c == '|' && next == Some('|'),
            Some(Entity::Code) => c == '`',
            Some(Entity::Pre) => c == '`' && next == Some('`') && at(i + 2) == Some('`'),
            Some(Entity::TextUrl) => c == ']',
            None => false,
        };
        if !ends {
            let reserved_error = || {
                Err(format!(
                    "Character '{c}' is reserved and must be escaped with the preceding '\\'"
                ))
            };
            let entity = match c {
                '_' if next == Some('_') => {
                    i += 1;
                    Entity::Underline
                }
                '_' => Entity::Italic,
                '*' => Entity::Bold,
                '~' => Entity::Strike,
                '|' if next == Some('|') => {
                    i += 1;
                    Entity::Spoiler
                }
                '[' => Entity::TextUrl,
                '`' if in_code => return reserved_error(),
                '`' if next == Some('`') && at(i + 2) == Some('`') => {
                    stack.push((Entity::Pre, byte));
                    i += 3;
                    // The language: up to a space or a backtick; then one
                    // newline is skipped.
                    let mut end = i;
                    while at(end).is_some_and(|c| !c.is_whitespace() && c != '`') {
                        end += 1;
                    }
                    if end != i && at(end).is_some_and(|c| c != '`') {
                        i = end;
                    }
                    if at(i) == Some('\n') || at(i) == Some('\r') {
                        i += 1;
                    }
                    continue;
                }
                '`' => Entity::Code,
                _ => return reserved_error(),
            };
            stack.push((entity, byte));
            i += 1;
            continue;
        }
        let (entity, _) = stack.pop().expect("an entity is open");
        match entity {
            Entity::Pre => i += 3,
            Entity::TextUrl if next == Some('(') => {
                i += 2;
                let mut closed = false;
                while i < chars.len() {
                    let u = chars[i].1;
                    if u == '\\' && at(i + 1).is_some_and(|n| (1..=126).contains(&(n as u32))) {
                        i += 2;
                        continue;
                    }
                    i += 1;
                    if u == ')' {
                        closed = true;
                        break;
                    }
                }
                if !closed {
                    return Err(format!("Can't find end of a URL at byte offset {byte}"));
                }
            }
            Entity::Underline | Entity::Spoiler => i += 2,
            _ => i += 1,
        }
    }
    if let Some((_, byte)) = stack.last() {
        return Err(format!(
            "Can't find end of the entity starting at byte offset {byte}"
        ));
    }
    Ok(out)
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
