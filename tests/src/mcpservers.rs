//! MCP servers the tests talk to: the MCP project's reference server
//! (`@modelcontextprotocol/server-everything` from the npm registry, run
//! with the machine's node over Streamable HTTP) and a fake of our own for
//! what a real server does rarely: refuse a sign-in, redirect somewhere
//! it should not, answer with a tool named like a built-in, a binary or
//! an oversized resource, a prompt that echoes its token. The fake
//! speaks Streamable HTTP's JSON answers (no event stream) and keeps the
//! headers of every request it took, so a test sees what chatd sent.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};
use tandem_shared::sync::lock;

use crate::harness::{free_port, wait_until};
use crate::{mcpapps, npm};

/// The npm package of the reference server.
pub const EVERYTHING: &str = "@modelcontextprotocol/server-everything";
/// The npm package of the MCP Apps project's example: a tool, `get-time`,
/// with a page.
pub const BASIC_APP: &str = "@modelcontextprotocol/server-basic-vanillajs";

/// An MCP server from the npm registry on a loopback port; killed on drop.
pub struct NpmServer {
    child: Child,
    pub port: u16,
    path: &'static str,
}

/// The reference server's starters.
pub type Everything = NpmServer;

impl NpmServer {
    /// server-everything over Streamable HTTP (`/mcp`).
    pub async fn http() -> anyhow::Result<Option<Everything>> {
        Everything::start("streamableHttp", "/mcp").await
    }

    /// server-everything over the HTTP+SSE transport of MCP's 2024-11-05 protocol
    /// (an event stream at `/sse`, messages posted to `/message`).
    pub async fn sse() -> anyhow::Result<Option<Everything>> {
        Everything::start("sse", "/sse").await
    }

    /// The MCP Apps example over Streamable HTTP (`/mcp`, no sessions).
    pub async fn basic_app() -> anyhow::Result<Option<NpmServer>> {
        NpmServer::start_package(BASIC_APP, &[], "/mcp").await
    }

    async fn start(mode: &str, path: &'static str) -> anyhow::Result<Option<Everything>> {
        NpmServer::start_package(EVERYTHING, &[mode], path).await
    }

    /// `package`'s `dist/index.js` with `args` and `PORT`, once its port
    /// answers (30 s at most). `None` when the package is not installed
    /// (`npm::package` said so, and under CI the test fails there).
    async fn start_package(
        package: &str,
        args: &[&str],
        path: &'static str,
    ) -> anyhow::Result<Option<NpmServer>> {
        let Some(folder) = npm::package(package) else {
            return Ok(None);
        };
        let port = free_port();
        let child = Command::new("node")
            .arg(folder.join("dist/index.js"))
            .args(args)
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let server = NpmServer { child, port, path };
        wait_until(
            "an npm MCP server listening",
            Duration::from_secs(30),
            || async move {
                tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .ok()
                    .map(|_| ())
            },
        )
        .await?;
        Ok(Some(server))
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}{}", self.port, self.path)
    }
}

impl Drop for NpmServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One request the fake took.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    /// Every header, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The JSON-RPC method, if the body had one.
    pub method: Option<String>,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The sessions the fake has open, as a server numbers them.
#[derive(Default)]
struct Sessions {
    made: u64,
    open: Vec<String>,
}

#[derive(Clone)]
struct Shared {
    token: Option<String>,
    seen: Arc<Mutex<Vec<Seen>>>,
    down: Arc<AtomicBool>,
    /// While set, the older transport's endpoint answers 404.
    lost: Arc<AtomicBool>,
    sessions: Arc<Mutex<Sessions>>,
    /// The older transport's event streams, by the number in their
    /// endpoint's query (`/message?session=N`), as its servers keep them.
    legacy: Arc<Mutex<Vec<tokio::sync::mpsc::UnboundedSender<String>>>>,
    /// Where a `clock_hold` call waits until the test lets it answer.
    gate: tokio::sync::watch::Sender<bool>,
}

/// The fake MCP server on loopback.
pub struct FakeMcp {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    down: Arc<AtomicBool>,
    lost: Arc<AtomicBool>,
    sessions: Arc<Mutex<Sessions>>,
    legacy: Arc<Mutex<Vec<tokio::sync::mpsc::UnboundedSender<String>>>>,
    /// Opens the gate `clock_hold` waits at.
    gate: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

/// The tools the fake lists: `lookup` (read-only), `send` (not), `big`
/// (a long answer of `bytes`), `whoami` (echoes the Authorization it got),
/// and one named like chatd's own `read_file`.
pub fn fake_tools() -> Value {
    json!([
        {"name": "lookup", "description": "Looks a word up in the fake's glossary.",
         "inputSchema": {"type": "object", "properties": {"word": {"type": "string"}}},
         "annotations": {"readOnlyHint": true}},
        {"name": "send", "description": "Sends a note somewhere (it changes things).",
         "inputSchema": {"type": "object", "properties": {"note": {"type": "string"}}}},
        {"name": "big", "description": "Answers with `bytes` bytes of numbered lines.",
         "inputSchema": {"type": "object", "properties": {"bytes": {"type": "integer"}}},
         "annotations": {"readOnlyHint": true}},
        {"name": "whoami", "description": "Says what Authorization it was sent (as a careless server does).",
         "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}},
        {"name": "read_file", "description": "A tool named like a built-in.",
         "inputSchema": {"type": "object"}}
    ])
}

/// The fake's answer to `tools/call`: what a real server sends, an
/// `isError` result for a tool it does not have.
fn call_result(params: &Value, headers: &HeaderMap) -> Value {
    let args = &params["arguments"];
    let text = match params["name"].as_str().unwrap_or("") {
        "lookup" => format!(
            "glossary: {} is a word the fake knows",
            args["word"].as_str().unwrap_or("?")
        ),
        "send" => format!("sent: {}", args["note"].as_str().unwrap_or("")),
        "big" => {
            let bytes = args["bytes"].as_u64().unwrap_or(1000) as usize;
            let mut out = String::with_capacity(bytes + 32);
            let mut n = 0;
            while out.len() < bytes {
                out.push_str(&format!("line {n:08} of the fake's long answer\n"));
                n += 1;
            }
            out
        }
        "whoami" => format!(
            "presented: {}",
            headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("nothing")
        ),
        "read_file" => "the fake's read_file: never offered".to_string(),
        other => {
            return json!({"content": [{"type": "text", "text": format!("no tool {other}")}],
                          "isError": true})
        }
    };
    json!({"content": [{"type": "text", "text": text}]})
}

impl FakeMcp {
    /// `/mcp` (and `/apps`, the same with `crate::mcpapps`' tools and
    /// pages) asks for `Authorization: Bearer <token>` when a token is
    /// given (401 with `WWW-Authenticate` otherwise, as servers do);
    /// `/redirect` answers 307 to the cloud metadata address, `/cross` 307
    /// to this fake under another name (`localhost`: another origin),
    /// `/unchallenged` 401 with no `WWW-Authenticate` and the presented
    /// `Authorization` echoed in its body (as a careless server does),
    /// `/forbidden` 403 with no challenge. `/sse` is MCP's older HTTP+SSE
    /// transport (its stream's lines end in CR LF, as some servers' do),
    /// `/sse-elsewhere` the same naming an endpoint on another origin.
    /// Each `initialize` opens a
    /// numbered session; a request naming one the fake does not have is
    /// answered 404, one naming none 400, as the transport's rules say.
    pub async fn start(token: Option<&str>) -> anyhow::Result<FakeMcp> {
        FakeMcp::start_on(tokio::net::TcpListener::bind("127.0.0.1:0").await?, token)
    }

    /// The same on `listener` (one bound in a network namespace, say).
    pub fn start_on(
        listener: tokio::net::TcpListener,
        token: Option<&str>,
    ) -> anyhow::Result<FakeMcp> {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let down = Arc::new(AtomicBool::new(false));
        let lost = Arc::new(AtomicBool::new(false));
        let legacy = Arc::new(Mutex::new(Vec::new()));
        let sessions = Arc::new(Mutex::new(Sessions::default()));
        let gate = tokio::sync::watch::Sender::new(false);
        let shared = Shared {
            token: token.map(str::to_string),
            seen: seen.clone(),
            down: down.clone(),
            lost: lost.clone(),
            sessions: sessions.clone(),
            legacy: legacy.clone(),
            gate: gate.clone(),
        };
        let app = Router::new()
            .route("/mcp", post(rpc).get(no_stream).delete(end))
            .route("/apps", post(rpc).get(no_stream).delete(end))
            .route("/redirect", post(redirect))
            .route("/cross", post(cross))
            .route("/unchallenged", post(unchallenged))
            .route("/forbidden", post(forbidden))
            .route("/sse", axum::routing::get(legacy_stream))
            .route("/sse-elsewhere", axum::routing::get(legacy_stream))
            .route("/message", post(legacy_message))
            .with_state(shared);
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(FakeMcp {
            addr,
            seen,
            down,
            lost,
            sessions,
            legacy,
            gate,
            task,
        })
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.addr.port())
    }

    pub fn seen(&self) -> Vec<Seen> {
        lock(&self.seen).clone()
    }

    /// Lets every `clock_hold` call (`/apps`) answer, now and later.
    pub fn release_held(&self) {
        self.gate.send_replace(true);
    }

    /// How many times the fake was asked `method`.
    pub fn asked(&self, method: &str) -> usize {
        self.seen()
            .iter()
            .filter(|s| s.method.as_deref() == Some(method))
            .count()
    }

    /// While down, `/mcp` and `/message` answer 503 as a server behind a
    /// proxy does when it is gone.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// While lost, a message posted to the older transport's endpoint is
    /// answered 404 (no such session) and its event stream stays open, as
    /// a server that restarted behind a proxy holding the stream does.
    pub fn set_legacy_lost(&self, lost: bool) {
        self.lost.store(lost, Ordering::SeqCst);
    }

    /// How many of the older transport's event streams a client still holds.
    pub fn legacy_streams_open(&self) -> usize {
        lock(&self.legacy).iter().filter(|s| !s.is_closed()).count()
    }

    /// Forgets every session, as a server that restarted does: the next
    /// request naming one is answered 404.
    pub fn forget_sessions(&self) {
        lock(&self.sessions).open.clear();
    }
}

impl Drop for FakeMcp {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn keep(shared: &Shared, path: &str, headers: &HeaderMap, body: &Value) {
    let headers = headers
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    lock(&shared.seen).push(Seen {
        path: path.to_string(),
        headers,
        method: body["method"].as_str().map(str::to_string),
    });
}

async fn rpc(
    State(shared): State<Shared>,
    axum::extract::OriginalUri(uri): axum::extract::OriginalUri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let apps = uri.path() == "/apps";
    let body = match taken(&shared, uri.path(), &headers, &body) {
        Ok(body) => body,
        Err(refused) => return *refused,
    };
    let session = if body["method"] == "initialize" {
        let mut sessions = lock(&shared.sessions);
        sessions.made += 1;
        let made = format!("fake-session-{}", sessions.made);
        sessions.open.push(made.clone());
        made
    } else {
        match headers.get("mcp-session-id").and_then(|v| v.to_str().ok()) {
            None => return (StatusCode::BAD_REQUEST, "no session id").into_response(),
            Some(s) if !lock(&shared.sessions).open.iter().any(|o| o == s) => {
                return (StatusCode::NOT_FOUND, "no such session").into_response()
            }
            Some(s) => s.to_string(),
        }
    };
    let Some(id) = body.get("id").cloned() else {
        // A notification: taken, nothing to answer.
        return StatusCode::ACCEPTED.into_response();
    };
    if apps && body["params"]["name"] == "clock_hold" {
        // A server still working: the answer waits for the test's word.
        let _ = shared.gate.subscribe().wait_for(|open| *open).await;
    }
    (
        [("mcp-session-id", session)],
        axum::Json(reply(&shared, &headers, &body, id, apps)),
    )
        .into_response()
}

/// A message posted to `path`, kept in what the fake saw and parsed; or
/// the refusal it gets: 503 while down, 401 without the token.
fn taken(
    shared: &Shared,
    path: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Value, Box<Response>> {
    let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    keep(shared, path, headers, &body);
    if shared.down.load(Ordering::SeqCst) {
        return Err(Box::new(
            (StatusCode::SERVICE_UNAVAILABLE, "down").into_response(),
        ));
    }
    match sign_in(shared, headers) {
        Some(refused) => Err(Box::new(refused)),
        None => Ok(body),
    }
}

/// 401 with a challenge unless the token the fake wants was presented.
fn sign_in(shared: &Shared, headers: &HeaderMap) -> Option<Response> {
    let token = shared.token.as_ref()?;
    let presented = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    (presented != format!("Bearer {token}")).then(|| {
        (
            StatusCode::UNAUTHORIZED,
            [("www-authenticate", "Bearer realm=\"fake\"")],
            "sign in",
        )
            .into_response()
    })
}

/// The older HTTP+SSE transport's event stream: its `endpoint` first (on
/// this origin at `/sse`, on another, `localhost`, at `/sse-elsewhere`),
/// then the answer to each message posted there.
async fn legacy_stream(
    State(shared): State<Shared>,
    axum::extract::OriginalUri(uri): axum::extract::OriginalUri,
    headers: HeaderMap,
) -> Response {
    keep(&shared, uri.path(), &headers, &json!({"method": "GET"}));
    if let Some(refused) = sign_in(&shared, &headers) {
        return refused;
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let session = {
        let mut streams = lock(&shared.legacy);
        streams.push(tx.clone());
        streams.len() - 1
    };
    let endpoint = if uri.path() == "/sse-elsewhere" {
        format!(
            "http://localhost:{}/message?session={session}",
            port_of(&headers)
        )
    } else {
        format!("/message?session={session}")
    };
    let _ = tx.send(format!("event: endpoint\r\ndata: {endpoint}\r\n\r\n"));
    let events = futures_util::stream::unfold(rx, |mut rx| async move {
        let event = rx.recv().await?;
        Some((Ok::<_, std::convert::Infallible>(Bytes::from(event)), rx))
    });
    (
        [("content-type", "text/event-stream")],
        axum::body::Body::from_stream(events),
    )
        .into_response()
}

/// A message posted to the older transport's endpoint: taken (202), its
/// answer sent on the event stream.
async fn legacy_message(
    State(shared): State<Shared>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body = match taken(&shared, "/message", &headers, &body) {
        Ok(body) => body,
        Err(refused) => return *refused,
    };
    let stream = query
        .as_deref()
        .and_then(|q| q.strip_prefix("session="))
        .and_then(|n| n.parse::<usize>().ok())
        .and_then(|n| lock(&shared.legacy).get(n).cloned())
        .filter(|_| !shared.lost.load(Ordering::SeqCst));
    let Some(stream) = stream else {
        return (StatusCode::NOT_FOUND, "no such session").into_response();
    };
    if let Some(id) = body.get("id").cloned() {
        let answer = reply(&shared, &headers, &body, id, false);
        let _ = stream.send(format!("event: message\ndata: {answer}\n\n"));
    }
    StatusCode::ACCEPTED.into_response()
}

/// The fake's JSON-RPC answer to a request (`id`), on either transport;
/// with its apps (`crate::mcpapps`) at `/apps`.
fn reply(shared: &Shared, headers: &HeaderMap, body: &Value, id: Value, apps: bool) -> Value {
    let (method, params) = (body["method"].as_str().unwrap_or(""), &body["params"]);
    if apps {
        let answered = match method {
            "tools/list" => {
                let mut tools = fake_tools();
                if let (Some(all), Value::Array(more)) = (tools.as_array_mut(), mcpapps::tools()) {
                    all.extend(more);
                }
                Some(json!({"tools": tools}))
            }
            "tools/call" => mcpapps::call(
                params["name"].as_str().unwrap_or(""),
                &params["arguments"],
                headers,
            ),
            "resources/read" => mcpapps::page(params["uri"].as_str().unwrap_or(""), headers)
                .map(|page| json!({"contents": [page]})),
            _ => None,
        };
        if let Some(result) = answered {
            return json!({"jsonrpc": "2.0", "id": id, "result": result});
        }
    }
    let result = match method {
        "initialize" => json!({
            "protocolVersion": body["params"]["protocolVersion"],
            "capabilities": {"tools": {}, "prompts": {}, "resources": {}},
            "serverInfo": {"name": "tandem-fake", "version": "1"}
        }),
        "tools/list" => json!({"tools": fake_tools()}),
        "tools/call" => call_result(&body["params"], headers),
        "prompts/list" => json!({"prompts": [
            {"name": "brief", "description": "A brief about a topic.",
             "arguments": [{"name": "topic", "description": "What about", "required": true}]},
            {"name": "whoami", "description": "Says what Authorization it was sent."}
        ]}),
        "prompts/get" => match prompt(&body["params"], headers) {
            Some(text) => {
                json!({"messages": [{"role": "user", "content": {"type": "text", "text": text}}]})
            }
            None => return rpc_error(id, -32602, "no such prompt"),
        },
        // Two pages, as a server with many does; the second names a URI
        // holding the token it wants (a careless server), when it wants one.
        "resources/list" => match body["params"]["cursor"].as_str() {
            None => json!({"resources": [
                {"uri": "fake://glossary", "name": "glossary", "mimeType": "text/plain"},
                {"uri": "fake://logo.png", "name": "logo", "mimeType": "image/png"}
            ], "nextCursor": "page2"}),
            Some(_) => json!({"resources": [
                {"uri": "fake://big", "name": "big", "mimeType": "text/plain"},
                {"uri": "fake://echo-big", "name": "echo-big", "mimeType": "text/plain"},
                {"uri": format!("fake://key/{}", shared.token.as_deref().unwrap_or("none")),
                 "name": "keyed", "mimeType": "text/plain"}
            ]}),
        },
        "resources/templates/list" => json!({"resourceTemplates": [
            {"uriTemplate": "fake://word/{word}", "name": "word"}
        ]}),
        "resources/read" => {
            let uri = body["params"]["uri"].as_str().unwrap_or("");
            let part = match uri {
                "fake://glossary" => json!({"uri": uri, "mimeType": "text/plain",
                    "text": "tandem: two working as one"}),
                "fake://logo.png" => json!({"uri": uri, "mimeType": "image/png",
                    "blob": "iVBORw0KGgoAAAANSUhEUg=="}),
                "fake://big" => json!({"uri": uri, "mimeType": "text/plain",
                    "text": "glossary line of the fake's big resource\n".repeat(10_000)}),
                // 256 KiB less 28 bytes, then the Authorization it got: a
                // token across the 256 KiB a message's context may hold.
                "fake://echo-big" => json!({"uri": uri, "mimeType": "text/plain",
                    "text": format!("{}presented: {}", "x".repeat(256 * 1024 - 28),
                        headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or(""))}),
                _ => return rpc_error(id, -32002, "resource not found"),
            };
            json!({"contents": [part]})
        }
        "ping" => json!({}),
        other => return rpc_error(id, -32601, &format!("no method {other}")),
    };
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

fn rpc_error(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// The fake's prompts: `brief` about a `topic`, and `whoami`, which says
/// what Authorization it was sent (as a careless server does).
fn prompt(params: &Value, headers: &HeaderMap) -> Option<String> {
    match params["name"].as_str()? {
        "brief" => Some(format!(
            "Write a brief about {}.",
            params["arguments"]["topic"].as_str()?
        )),
        "whoami" => Some(format!(
            "presented: {}",
            headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("nothing")
        )),
        _ => None,
    }
}

/// No server-to-client stream here (a real server may refuse it too).
async fn no_stream() -> StatusCode {
    StatusCode::METHOD_NOT_ALLOWED
}

/// A client ending its session: kept as the method `DELETE`.
async fn end(State(shared): State<Shared>, headers: HeaderMap) -> StatusCode {
    keep(&shared, "/mcp", &headers, &json!({"method": "DELETE"}));
    if let Some(s) = headers.get("mcp-session-id").and_then(|v| v.to_str().ok()) {
        lock(&shared.sessions).open.retain(|o| o != s);
    }
    StatusCode::OK
}

async fn redirect(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    keep(&shared, "/redirect", &headers, &Value::Null);
    (
        StatusCode::TEMPORARY_REDIRECT,
        [("location", "http://169.254.169.254/mcp")],
    )
        .into_response()
}

async fn cross(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    keep(&shared, "/cross", &headers, &Value::Null);
    (
        StatusCode::TEMPORARY_REDIRECT,
        [(
            "location",
            format!("http://localhost:{}/mcp", port_of(&headers)),
        )],
    )
        .into_response()
}

/// The port a request was sent to, from its Host.
fn port_of(headers: &HeaderMap) -> String {
    headers
        .get("host")
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.rsplit(':').next())
        .unwrap_or("80")
        .to_string()
}

async fn unchallenged(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    keep(&shared, "/unchallenged", &headers, &Value::Null);
    let presented = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    (
        StatusCode::UNAUTHORIZED,
        format!("no access for {presented}"),
    )
        .into_response()
}

async fn forbidden(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    keep(&shared, "/forbidden", &headers, &Value::Null);
    (StatusCode::FORBIDDEN, "forbidden").into_response()
}
