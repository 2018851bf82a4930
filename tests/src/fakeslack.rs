//! A fake Slack for tests: the Web API methods connectord calls (under
//! `/api/`, Bearer tokens checked like Slack does: HTTP 200 with
//! `{"ok":false,"error":"invalid_auth"}`) and Socket Mode (`/link`), which
//! says `hello`, sends the events a test queues as `events_api` envelopes,
//! records acks and sends an envelope again (with `retry_attempt` one
//! higher) when it is not acked in time or its connection closes first.
//! Faults on cue: a 429 with `Retry-After`, a `disconnect`, a cut socket.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

pub const BOT_TOKEN: &str = "xoxb-fake-bot-token-0123456789";
pub const APP_TOKEN: &str = "xapp-1-fake-app-token-9876543210";
pub const BOT_ID: &str = "U0FAKEBOT";
pub const BOT_NAME: &str = "tandembot";

/// A message the bot posted or updated, as the fake saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Posted {
    /// `chat.postMessage` or `chat.update`.
    pub method: String,
    pub channel: String,
    pub thread_ts: Option<String>,
    pub text: String,
    /// The message's ts (the new one, or the one updated).
    pub ts: String,
    pub at: Instant,
}

/// One Web API call: its method, the HTTP status answered and when.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    pub status: u16,
    pub at: Instant,
}

/// A file shared by `files.completeUploadExternal`.
#[derive(Debug, Clone)]
pub struct File {
    pub id: String,
    pub name: String,
    pub channel: String,
    pub thread_ts: Option<String>,
    /// The body POSTed to the upload address (raw or multipart): it
    /// contains the file's bytes.
    pub body: Vec<u8>,
}

/// What `push_*` queued: the ids to look for in acks and in the sink.
#[derive(Debug, Clone)]
pub struct Pushed {
    pub envelope_id: String,
    pub event_id: String,
    pub ts: String,
    pub channel: String,
    /// A mention also arrives as a plain `message` event (Slack sends both
    /// when the app subscribes to both): its ids, which must not become a
    /// second message.
    pub twin_envelope_id: Option<String>,
    pub twin_event_id: Option<String>,
}

/// One envelope sent on a connection.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub envelope_id: String,
    pub event_id: Option<String>,
    pub retry_attempt: u32,
    pub connection: u64,
}

#[derive(Debug, Clone)]
struct Envelope {
    id: String,
    kind: String,
    event_id: Option<String>,
    payload: Value,
    retry_attempt: u32,
    retry_reason: String,
}

impl Envelope {
    fn frame(&self) -> String {
        json!({
            "envelope_id": self.id,
            "payload": self.payload,
            "type": self.kind,
            "accepts_response_payload": false,
            "retry_attempt": self.retry_attempt,
            "retry_reason": self.retry_reason,
        })
        .to_string()
    }
}

#[derive(Debug)]
enum Control {
    /// `{"type":"disconnect"}`, then close after the grace time.
    Disconnect(String),
    /// Drop the socket, no close frame.
    Cut,
}

struct InFlight {
    envelope: Envelope,
    connection: u64,
    sent: Instant,
}

struct Inner {
    counter: u64,
    ack_timeout: Duration,
    disconnect_grace: Duration,
    tickets: HashSet<String>,
    queue: VecDeque<Envelope>,
    in_flight: HashMap<String, InFlight>,
    deliveries: Vec<Delivery>,
    acks: Vec<String>,
    posted: Vec<Posted>,
    /// ts → channel of every message the bot posted.
    messages: HashMap<String, String>,
    uploads: HashMap<String, (String, Option<Vec<u8>>)>,
    files: Vec<File>,
    rate_limits: HashMap<String, VecDeque<u64>>,
    calls: Vec<Call>,
    opens: usize,
    connections: u64,
    live: HashMap<u64, mpsc::UnboundedSender<Control>>,
    draining: HashSet<u64>,
}

impl Inner {
    fn next(&mut self) -> u64 {
        self.counter += 1;
        self.counter
    }

    fn ts(&mut self) -> String {
        let n = self.next();
        format!("1700000000.{n:06}")
    }

    /// Puts back what `connection` had in flight (all, or those older
    /// than the ack timeout), first in line, one retry more.
    fn requeue(&mut self, connection: u64, only_late: bool, reason: &str) {
        let now = Instant::now();
        let timeout = self.ack_timeout;
        let mut back: Vec<(Instant, Envelope)> = Vec::new();
        self.in_flight.retain(|_, f| {
            let late = now.duration_since(f.sent) >= timeout;
            if f.connection == connection && (!only_late || late) {
                back.push((f.sent, f.envelope.clone()));
                false
            } else {
                true
            }
        });
        back.sort_by_key(|(sent, _)| *sent);
        for (_, mut envelope) in back.into_iter().rev() {
            envelope.retry_attempt += 1;
            envelope.retry_reason = reason.to_string();
            self.queue.push_front(envelope);
        }
    }
}

struct Shared {
    inner: Mutex<Inner>,
    addr: SocketAddr,
}

pub struct FakeSlack {
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeSlack {
    fn drop(&mut self) {
        self.task.abort();
        for (_, tx) in self.shared.inner.lock().unwrap().live.drain() {
            let _ = tx.send(Control::Cut);
        }
    }
}

impl FakeSlack {
    /// Listens on 127.0.0.1 (a free port); envelopes not acked in 2 s are
    /// sent again.
    pub async fn start() -> anyhow::Result<FakeSlack> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            addr,
            inner: Mutex::new(Inner {
                counter: 0,
                ack_timeout: Duration::from_secs(2),
                disconnect_grace: Duration::from_millis(200),
                tickets: HashSet::new(),
                queue: VecDeque::new(),
                in_flight: HashMap::new(),
                deliveries: Vec::new(),
                acks: Vec::new(),
                posted: Vec::new(),
                messages: HashMap::new(),
                uploads: HashMap::new(),
                files: Vec::new(),
                rate_limits: HashMap::new(),
                calls: Vec::new(),
                opens: 0,
                connections: 0,
                live: HashMap::new(),
                draining: HashSet::new(),
            }),
        });
        let app = axum::Router::new()
            .route("/api/{method}", axum::routing::post(web_api))
            .route("/upload/{file}", axum::routing::post(upload))
            .route("/link", axum::routing::get(link))
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(FakeSlack { shared, task })
    }

    /// The Web API base: `http://127.0.0.1:PORT/api`.
    pub fn api_base(&self) -> String {
        format!("http://{}/api", self.shared.addr)
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.shared.inner.lock().unwrap()
    }

    /// How long an envelope may wait for its ack before it is sent again.
    pub fn set_ack_timeout(&self, timeout: Duration) {
        self.inner().ack_timeout = timeout;
    }

    /// How long a connection stays open after its `disconnect`.
    pub fn set_disconnect_grace(&self, grace: Duration) {
        self.inner().disconnect_grace = grace;
    }

    /// A direct message from `user` (channel `D<user>`).
    pub fn push_dm(&self, user: &str, text: &str) -> Pushed {
        let channel = format!("D{user}");
        let event = json!({
            "type": "message", "channel": channel, "channel_type": "im",
            "user": user, "text": escape(text),
        });
        self.push_event(event)
    }

    /// `<@BOT> text` in `channel` (in `thread_ts` if given): a `message`
    /// event and its `app_mention` twin, as Slack sends both.
    pub fn push_mention(
        &self,
        channel: &str,
        user: &str,
        text: &str,
        thread_ts: Option<&str>,
    ) -> Pushed {
        let text = format!("<@{BOT_ID}> {}", escape(text));
        let ts = self.inner().ts();
        let mut message = json!({
            "type": "message", "channel": channel, "channel_type": "channel",
            "user": user, "text": text, "ts": ts,
        });
        let mut mention = json!({
            "type": "app_mention", "channel": channel, "user": user, "text": text, "ts": ts,
        });
        if let Some(thread) = thread_ts {
            message["thread_ts"] = json!(thread);
            mention["thread_ts"] = json!(thread);
        }
        let twin = self.push_event(message);
        let mut pushed = self.push_event(mention);
        pushed.twin_envelope_id = Some(twin.envelope_id);
        pushed.twin_event_id = Some(twin.event_id);
        pushed
    }

    /// A message without a mention in a channel thread.
    pub fn push_thread_message(
        &self,
        channel: &str,
        user: &str,
        text: &str,
        thread_ts: &str,
    ) -> Pushed {
        self.push_event(json!({
            "type": "message", "channel": channel, "channel_type": "channel",
            "user": user, "text": escape(text), "thread_ts": thread_ts,
        }))
    }

    /// Any event (`ts` and `event_ts` added when missing) as an
    /// `events_api` envelope.
    pub fn push_event(&self, mut event: Value) -> Pushed {
        let mut inner = self.inner();
        if event["ts"].is_null() {
            event["ts"] = json!(inner.ts());
        }
        event["event_ts"] = event["ts"].clone();
        let n = inner.next();
        let event_id = format!("Ev{n:08}");
        let envelope_id = format!("env-{n:08}");
        let pushed = Pushed {
            envelope_id: envelope_id.clone(),
            event_id: event_id.clone(),
            ts: event["ts"].as_str().unwrap_or_default().to_string(),
            channel: event["channel"].as_str().unwrap_or_default().to_string(),
            twin_envelope_id: None,
            twin_event_id: None,
        };
        let payload = json!({
            "token": "verification-token-unused",
            "team_id": "T0FAKE",
            "api_app_id": "A0FAKE",
            "event": event,
            "type": "event_callback",
            "event_id": event_id,
            "event_time": 1700000000,
            "authorizations": [{"team_id": "T0FAKE", "user_id": BOT_ID, "is_bot": true}],
        });
        inner.queue.push_back(Envelope {
            id: envelope_id,
            kind: "events_api".into(),
            event_id: Some(event_id),
            payload,
            retry_attempt: 0,
            retry_reason: String::new(),
        });
        pushed
    }

    /// A `slash_commands` envelope (to be acked and ignored); its id.
    pub fn push_slash_command(&self, command: &str) -> String {
        let mut inner = self.inner();
        let id = format!("env-{:08}", inner.next());
        inner.queue.push_back(Envelope {
            id: id.clone(),
            kind: "slash_commands".into(),
            event_id: None,
            payload: json!({"command": command, "text": "", "user_id": "U1"}),
            retry_attempt: 0,
            retry_reason: String::new(),
        });
        id
    }

    /// Every open connection gets `{"type":"disconnect","reason":…}` and
    /// is closed after the grace time; it sends nothing new meanwhile.
    pub fn disconnect(&self, reason: &str) {
        for tx in self.inner().live.values() {
            let _ = tx.send(Control::Disconnect(reason.to_string()));
        }
    }

    /// Every open connection is dropped without a close frame.
    pub fn cut(&self) {
        for tx in self.inner().live.values() {
            let _ = tx.send(Control::Cut);
        }
    }

    /// The next call of `method` answers 429 with `Retry-After: secs`.
    pub fn rate_limit_next(&self, method: &str, retry_after_secs: u64) {
        self.inner()
            .rate_limits
            .entry(method.to_string())
            .or_default()
            .push_back(retry_after_secs);
    }

    /// 429s queued by `rate_limit_next` for `method` and not yet played.
    pub fn queued_rate_limits(&self, method: &str) -> usize {
        self.inner()
            .rate_limits
            .get(method)
            .map_or(0, VecDeque::len)
    }

    pub fn posted(&self) -> Vec<Posted> {
        self.inner().posted.clone()
    }

    /// Posts and updates from the `from`-th of `posted()` on (a reader
    /// that keeps its place need not copy the whole list each time).
    pub fn posted_from(&self, from: usize) -> Vec<Posted> {
        let inner = self.inner();
        inner
            .posted
            .get(from..)
            .map(<[Posted]>::to_vec)
            .unwrap_or_default()
    }

    /// The current text of every message the bot posted, by ts, in the
    /// order they were posted.
    pub fn messages(&self) -> Vec<(String, String)> {
        let inner = self.inner();
        let mut latest: Vec<(String, String)> = Vec::new();
        for p in &inner.posted {
            match latest.iter_mut().find(|(ts, _)| *ts == p.ts) {
                Some(entry) => entry.1 = p.text.clone(),
                None => latest.push((p.ts.clone(), p.text.clone())),
            }
        }
        latest
    }

    pub fn calls(&self, method: &str) -> Vec<Call> {
        self.inner()
            .calls
            .iter()
            .filter(|c| c.method == method)
            .cloned()
            .collect()
    }

    pub fn files(&self) -> Vec<File> {
        self.inner().files.clone()
    }

    /// Envelope ids acked, in order (a late ack of a resent one included).
    pub fn acks(&self) -> Vec<String> {
        self.inner().acks.clone()
    }

    pub fn is_acked(&self, envelope_id: &str) -> bool {
        self.inner().acks.iter().any(|a| a == envelope_id)
    }

    pub fn deliveries(&self) -> Vec<Delivery> {
        self.inner().deliveries.clone()
    }

    /// Envelopes queued or sent and not acked.
    pub fn unacked(&self) -> usize {
        let inner = self.inner();
        inner.queue.len() + inner.in_flight.len()
    }

    /// `apps.connections.open` calls that got an address.
    pub fn opens(&self) -> usize {
        self.inner().opens
    }

    /// WebSocket connections made.
    pub fn connections(&self) -> u64 {
        self.inner().connections
    }

    /// WebSocket connections open now.
    pub fn live_connections(&self) -> usize {
        self.inner().live.len()
    }

    /// Waits (at most `bound`) until `envelope_id` is acked.
    pub async fn wait_acked(&self, envelope_id: &str, bound: Duration) -> bool {
        wait_until(bound, || self.is_acked(envelope_id)).await
    }

    /// Waits (at most `bound`) for `n` posts or updates; what there is.
    pub async fn wait_posted(&self, n: usize, bound: Duration) -> Vec<Posted> {
        wait_until(bound, || self.inner().posted.len() >= n).await;
        self.posted()
    }

    /// Waits (at most `bound`) until `n` WebSocket connections were made
    /// and one is open.
    pub async fn wait_connections(&self, n: u64, bound: Duration) -> bool {
        wait_until(bound, || {
            let inner = self.inner();
            inner.connections >= n && inner.live.len() > inner.draining.len()
        })
        .await
    }
}

/// Polls `cond` every 10 ms until it holds or `bound` passes; whether it
/// held.
pub async fn wait_until(bound: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + bound;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Slack's escaping of user text.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn ok(mut value: Value) -> Response {
    value["ok"] = json!(true);
    axum::Json(value).into_response()
}

fn refuse(error: &str) -> Response {
    axum::Json(json!({"ok": false, "error": error})).into_response()
}

/// The call's arguments: a JSON body, or form fields.
fn arguments(headers: &HeaderMap, body: &[u8]) -> HashMap<String, String> {
    let json = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if json {
        let value: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let Some(map) = value.as_object() else {
            return HashMap::new();
        };
        return map
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (k.clone(), v)
            })
            .collect();
    }
    String::from_utf8_lossy(body)
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'+', _) => out.push(b' '),
            (b'%', Some(b)) => {
                out.push(b);
                i += 2;
            }
            (b, _) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn web_api(
    State(shared): State<Arc<Shared>>,
    Path(method): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string);
    let mut inner = shared.inner.lock().unwrap();
    let status = if inner
        .rate_limits
        .get(&method)
        .is_some_and(|q| !q.is_empty())
    {
        429
    } else {
        200
    };
    inner.calls.push(Call {
        method: method.clone(),
        status,
        at: Instant::now(),
    });
    if status == 429 {
        let after = inner
            .rate_limits
            .get_mut(&method)
            .and_then(VecDeque::pop_front)
            .unwrap_or(1);
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", after.to_string())],
            axum::Json(json!({"ok": false, "error": "ratelimited"})),
        )
            .into_response();
    }
    let wants_app = method == "apps.connections.open";
    match token.as_deref() {
        None => return refuse("not_authed"),
        Some(BOT_TOKEN) if wants_app => return refuse("not_allowed_token_type"),
        Some(APP_TOKEN) if !wants_app => return refuse("not_allowed_token_type"),
        Some(BOT_TOKEN) | Some(APP_TOKEN) => {}
        Some(_) => return refuse("invalid_auth"),
    }
    let args = arguments(&headers, &body);
    let arg = |name: &str| args.get(name).cloned().filter(|v| !v.is_empty());
    match method.as_str() {
        "auth.test" => ok(json!({
            "url": "https://fake.slack.com/", "team": "Fake", "user": BOT_NAME,
            "team_id": "T0FAKE", "user_id": BOT_ID, "bot_id": "B0FAKE",
        })),
        "apps.connections.open" => {
            let ticket = format!("ticket-{}", inner.next());
            inner.tickets.insert(ticket.clone());
            inner.opens += 1;
            ok(json!({ "url": format!("ws://{}/link?ticket={ticket}", shared.addr) }))
        }
        "chat.postMessage" | "chat.update" => {
            let Some(channel) = arg("channel") else {
                return refuse("channel_not_found");
            };
            let Some(text) = arg("text") else {
                return refuse("no_text");
            };
            if text.chars().count() > 40_000 {
                return refuse("msg_too_long");
            }
            let (ts, thread_ts) = if method == "chat.update" {
                let Some(ts) = arg("ts") else {
                    return refuse("message_not_found");
                };
                if inner.messages.get(&ts) != Some(&channel) {
                    return refuse("message_not_found");
                }
                (ts, None)
            } else {
                let ts = inner.ts();
                inner.messages.insert(ts.clone(), channel.clone());
                (ts, arg("thread_ts"))
            };
            inner.posted.push(Posted {
                method: method.clone(),
                channel: channel.clone(),
                thread_ts,
                text: text.clone(),
                ts: ts.clone(),
                at: Instant::now(),
            });
            ok(json!({ "channel": channel, "ts": ts, "message": {"text": text, "user": BOT_ID} }))
        }
        "files.getUploadURLExternal" => {
            let (Some(name), Some(length)) = (arg("filename"), arg("length")) else {
                return refuse("invalid_arguments");
            };
            if length.parse::<u64>().is_err() {
                return refuse("invalid_arguments");
            }
            let id = format!("F{:08}", inner.next());
            inner.uploads.insert(id.clone(), (name, None));
            ok(json!({
                "upload_url": format!("http://{}/upload/{id}", shared.addr),
                "file_id": id,
            }))
        }
        "files.completeUploadExternal" => {
            let files: Value = arg("files")
                .and_then(|f| serde_json::from_str(&f).ok())
                .unwrap_or(Value::Null);
            let Some(list) = files.as_array().filter(|l| !l.is_empty()) else {
                return refuse("invalid_arguments");
            };
            let channel = arg("channel_id").unwrap_or_default();
            let thread_ts = arg("thread_ts");
            let mut done = Vec::new();
            for f in list {
                let id = f["id"].as_str().unwrap_or_default().to_string();
                let Some((name, Some(body))) = inner.uploads.remove(&id) else {
                    return refuse("file_not_found");
                };
                let title = f["title"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or(name.clone());
                done.push(json!({"id": id, "title": title}));
                inner.files.push(File {
                    id,
                    name,
                    channel: channel.clone(),
                    thread_ts: thread_ts.clone(),
                    body,
                });
            }
            ok(json!({ "files": done }))
        }
        _ => refuse("unknown_method"),
    }
}

async fn upload(
    State(shared): State<Arc<Shared>>,
    Path(file): Path<String>,
    body: Bytes,
) -> Response {
    let mut inner = shared.inner.lock().unwrap();
    match inner.uploads.get_mut(&file) {
        Some(entry) => {
            entry.1 = Some(body.to_vec());
            (StatusCode::OK, format!("OK - {}", body.len())).into_response()
        }
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// The Socket Mode endpoint: a ticket from `apps.connections.open`, used
/// once, then the WebSocket upgrade done by hand.
async fn link(
    State(shared): State<Arc<Shared>>,
    Query(query): Query<HashMap<String, String>>,
    mut request: Request,
) -> Response {
    let ticket = query.get("ticket").cloned().unwrap_or_default();
    if !shared.inner.lock().unwrap().tickets.remove(&ticket) {
        return (StatusCode::UNAUTHORIZED, "invalid ticket").into_response();
    }
    let Some(key) = request
        .headers()
        .get("sec-websocket-key")
        .map(|k| k.as_bytes().to_vec())
    else {
        return (StatusCode::BAD_REQUEST, "not a WebSocket upgrade").into_response();
    };
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(&key);
    let upgrade = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        let Ok(upgraded) = upgrade.await else {
            return;
        };
        let io = hyper_util::rt::TokioIo::new(upgraded);
        let ws = WebSocketStream::from_raw_socket(io, Role::Server, None).await;
        session(shared, ws).await;
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header("connection", "upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-accept", accept)
        .body(Body::empty())
        .unwrap()
}

async fn session<S>(shared: Arc<Shared>, mut ws: WebSocketStream<S>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (tx, mut control) = mpsc::unbounded_channel();
    let id = {
        let mut inner = shared.inner.lock().unwrap();
        inner.connections += 1;
        let id = inner.connections;
        inner.live.insert(id, tx);
        id
    };
    let hello = json!({
        "type": "hello",
        "num_connections": 1,
        "debug_info": {"host": "fake-slack", "approximate_connection_time": 18060},
        "connection_info": {"app_id": "A0FAKE"},
    });
    let mut closing_at: Option<Instant> = None;
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    if ws
        .send(Message::Text(hello.to_string().into()))
        .await
        .is_ok()
    {
        loop {
            tokio::select! {
                c = control.recv() => match c {
                    Some(Control::Disconnect(reason)) => {
                        let frame = json!({
                            "type": "disconnect", "reason": reason,
                            "debug_info": {"host": "fake-slack"},
                        });
                        let grace = {
                            let mut inner = shared.inner.lock().unwrap();
                            inner.draining.insert(id);
                            inner.disconnect_grace
                        };
                        closing_at = Some(Instant::now() + grace);
                        if ws.send(Message::Text(frame.to_string().into())).await.is_err() {
                            break;
                        }
                    }
                    Some(Control::Cut) | None => break,
                },
                frame = ws.next() => match frame {
                    Some(Ok(Message::Text(text))) => {
                        let value: Value = serde_json::from_str(text.as_str()).unwrap_or(Value::Null);
                        if let Some(envelope) = value["envelope_id"].as_str() {
                            let mut inner = shared.inner.lock().unwrap();
                            inner.in_flight.remove(envelope);
                            inner.acks.push(envelope.to_string());
                        }
                    }
                    Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
                    Some(Ok(_)) => {}
                },
                _ = tick.tick() => {
                    if closing_at.is_some_and(|at| Instant::now() >= at) {
                        let _ = tokio::time::timeout(Duration::from_secs(1), ws.close(None)).await;
                        break;
                    }
                    let out: Vec<Envelope> = {
                        let mut inner = shared.inner.lock().unwrap();
                        inner.requeue(id, true, "timeout");
                        if closing_at.is_some() {
                            Vec::new()
                        } else {
                            let out: Vec<Envelope> = inner.queue.drain(..).collect();
                            for envelope in &out {
                                inner.deliveries.push(Delivery {
                                    envelope_id: envelope.id.clone(),
                                    event_id: envelope.event_id.clone(),
                                    retry_attempt: envelope.retry_attempt,
                                    connection: id,
                                });
                                inner.in_flight.insert(envelope.id.clone(), InFlight {
                                    envelope: envelope.clone(),
                                    connection: id,
                                    sent: Instant::now(),
                                });
                            }
                            out
                        }
                    };
                    let mut broken = false;
                    for envelope in out {
                        if ws.send(Message::Text(envelope.frame().into())).await.is_err() {
                            broken = true;
                            break;
                        }
                    }
                    if broken {
                        break;
                    }
                }
            }
        }
    }
    let mut inner = shared.inner.lock().unwrap();
    inner.live.remove(&id);
    inner.draining.remove(&id);
    // What this connection did not get acked goes to the next one.
    inner.requeue(id, false, "connection_closed");
}
