//! One MCP session with a connector's server, on the `rmcp` client: an
//! `http` connector over Streamable HTTP, through a reqwest client of its
//! own whose only resolver and redirect rule are `address.rs`'s, with TLS
//! from the shared config and no proxy from the environment. A test opens
//! a session, lists the tools and closes it.
//!
//! Errors never carry the token, a header's value or the address's query:
//! the reason is made here from what failed (a status, a refusal, a
//! timeout), not from reqwest's text, which names the whole URL.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{ClientInitializeError, RoleClient, RunningService};
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransportConfig, StreamableHttpError,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::ServiceExt;
use serde::Serialize;
use tandem_shared::netpolicy::Policy;
use tandem_shared::secrets::Secret;
use url::Url;

use super::address::{self, Checked, Private, Refused};
use super::legacy;

/// Connecting and the first answers (initialize, the tool list).
pub const OPEN: Duration = Duration::from_secs(30);
/// A connection attempt to one address.
const CONNECT: Duration = Duration::from_secs(5);
/// The most bytes of one answer taken (a 10 MB tool list is refused).
pub(crate) const MAX_ANSWER: usize = 4 << 20;
/// The longest reason kept from a server's own words.
const MAX_REASON: usize = 300;

/// What a connection is made with: the address and the opened secrets.
pub struct Target {
    pub url: Url,
    pub token: Option<Secret>,
    pub headers: Vec<(String, Secret)>,
}

impl Target {
    /// A failure's reason with this connector's secrets taken out: its
    /// token, its headers' values and its address's query, should a server
    /// have sent one of them back in its words.
    pub fn redact(&self, failure: Failure) -> Failure {
        let clean = |text: String| self.clean(text);
        match failure {
            Failure::SignIn(why) => Failure::SignIn(clean(why)),
            Failure::Connect(why) => Failure::Connect(clean(why)),
        }
    }
}

impl Target {
    /// `text` with this connector's secrets taken out: its token, its
    /// headers' values, its address's query and each of the query's values,
    /// and its path when that is more than a word (a key may live there).
    pub fn clean(&self, text: String) -> String {
        let mut secrets: Vec<&str> = self.headers.iter().map(|(_, v)| v.expose()).collect();
        secrets.extend(self.token.as_ref().map(Secret::expose));
        secrets.extend(self.url.query());
        if let Some(query) = self.url.query() {
            secrets.extend(query.split('&').filter_map(|pair| pair.split('=').nth(1)));
        }
        let path = self.url.path().trim_matches('/');
        if path.contains('/') {
            secrets.push(path);
        }
        without(text, secrets)
    }
}

/// `text` with each of `secrets` of 4 bytes or more replaced by "…", as
/// it is and as a JSON string carries it (a server may echo it in JSON),
/// longest first (one may hold another).
pub(crate) fn without(text: String, secrets: Vec<&str>) -> String {
    let mut all: Vec<String> = Vec::new();
    for secret in secrets.into_iter().filter(|s| s.len() >= 4) {
        let quoted = serde_json::to_string(secret).unwrap_or_default();
        // The quotes JSON put around it, and only those.
        let escaped = quoted
            .get(1..quoted.len().saturating_sub(1))
            .unwrap_or_default();
        if escaped != secret {
            all.push(escaped.to_string());
        }
        all.push(secret.to_string());
    }
    all.sort_by_key(|s| std::cmp::Reverse(s.len()));
    all.iter().fold(text, |t, s| t.replace(s.as_str(), "…"))
}

/// A tool as the connectors list shows it.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct ToolInfo {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub description: Option<String>,
}

/// Why a session could not be opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// 401 or 403: the token or headers were refused.
    SignIn(String),
    /// Anything else: refused address, no answer, not an MCP server.
    Connect(String),
}

/// An open session.
pub type Session = RunningService<RoleClient, Handler>;

/// chatd's side of a session: who it is, whether the server said its
/// tools changed since the list was last taken, and what its resolver
/// refused (a connection made later in the session looks its name up again).
pub struct Handler {
    info: ClientConfig,
    changed: AtomicBool,
    refused: Refused,
}

impl Default for Handler {
    fn default() -> Handler {
        Handler::new()
    }
}

impl Handler {
    pub fn new() -> Handler {
        Handler {
            info: ClientConfig::new(
                ClientCapabilities::default(),
                Implementation::new("tandem", env!("CARGO_PKG_VERSION")),
            ),
            changed: AtomicBool::new(false),
            refused: Refused::default(),
        }
    }

    /// One whose session's connections `refused` notes the refusals of.
    fn checked(refused: Refused) -> Handler {
        Handler {
            refused,
            ..Handler::new()
        }
    }

    /// Whether the tools changed since last asked (and forgets it).
    pub fn take_changed(&self) -> bool {
        self.changed.swap(false, Ordering::SeqCst)
    }

    /// Asks for the list again at the next turn.
    pub fn mark_changed(&self) {
        self.changed.store(true, Ordering::SeqCst);
    }
}

impl rmcp::ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    fn on_tool_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) -> impl std::future::Future<Output = ()> + Send + '_ {
        self.mark_changed();
        std::future::ready(())
    }
}

/// Opens a session: the transport, MCP's initialize, within [`OPEN`].
pub async fn open(
    target: &Target,
    policy: Arc<Policy>,
    private: Private,
) -> Result<Session, Failure> {
    address::check_literal(&policy, private, &target.url).map_err(Failure::Connect)?;
    let refused = Refused::default();
    let http = reqwest::Client::builder()
        .no_proxy()
        .dns_resolver(Arc::new(Checked {
            policy: policy.clone(),
            private,
            refused: refused.clone(),
        }))
        .redirect(address::redirects(
            policy,
            private,
            refused.clone(),
            target.url.clone(),
        ))
        // A Referer would carry the address's query (a key) to another page.
        .referer(false)
        .tls_backend_preconfigured((*tandem_shared::tls::client_config()).clone())
        .connect_timeout(CONNECT)
        .build()
        .map_err(|_| Failure::Connect("the HTTP client could not be made".into()))?;
    let mut headers = HashMap::new();
    for (name, value) in &target.headers {
        // Checked when saved; a stored pair that no longer parses is skipped.
        if let (Ok(name), Ok(mut value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value.expose()),
        ) {
            value.set_sensitive(true);
            headers.insert(name, value);
        }
    }
    let mut config = StreamableHttpClientTransportConfig::with_uri(target.url.as_str())
        .custom_headers(headers.clone())
        .max_json_response_size(MAX_ANSWER)
        .max_sse_event_size(MAX_ANSWER);
    if let Some(token) = &target.token {
        config = config.auth_header(token.expose());
    }
    let started = tokio::time::Instant::now();
    let transport = StreamableHttpClientTransport::with_client(http.clone(), config);
    let handler = Handler::checked(refused.clone());
    let error = match tokio::time::timeout(OPEN, handler.serve(transport)).await {
        Err(_) => {
            return Err(refused_or(&refused, || {
                Failure::Connect(format!("no answer within {} s", OPEN.as_secs()))
            }))
        }
        Ok(Ok(session)) => return Ok(session),
        Ok(Err(e)) => e,
    };
    if refused.taken().is_some() || !older_transport_wanted(&error) {
        return Err(refused_or(&refused, || of_initialize(&error)));
    }
    // A server from before Streamable HTTP: the same address, the older
    // HTTP+SSE transport, within what is left of the opening's time.
    let mut legacy_headers: reqwest::header::HeaderMap = headers.into_iter().collect();
    if let Some(token) = &target.token {
        if let Ok(mut value) = HeaderValue::from_str(&format!("Bearer {}", token.expose())) {
            value.set_sensitive(true);
            legacy_headers.insert(reqwest::header::AUTHORIZATION, value);
        }
    }
    let left = OPEN.saturating_sub(started.elapsed());
    let transport = legacy::open(&http, &target.url, legacy_headers, left, MAX_ANSWER)
        .await
        .map_err(|e| refused_or(&refused, || of_legacy(e)))?;
    let left = OPEN.saturating_sub(started.elapsed());
    match tokio::time::timeout(left, Handler::checked(refused.clone()).serve(transport)).await {
        Err(_) => Err(refused_or(&refused, || {
            Failure::Connect(format!("no answer within {} s", OPEN.as_secs()))
        })),
        Ok(Err(e)) => Err(refused_or(&refused, || of_initialize(&e))),
        Ok(Ok(session)) => Ok(session),
    }
}

/// Why the older transport's event stream could not be opened.
fn of_legacy(error: legacy::OpenError) -> Failure {
    match error {
        legacy::OpenError::Status(status @ (401 | 403)) => Failure::SignIn(signin(status)),
        legacy::OpenError::Status(status) => Failure::Connect(format!(
            "the server refused Streamable HTTP, and answered HTTP {status} to the older HTTP+SSE transport's event stream: is this the MCP endpoint?"
        )),
        legacy::OpenError::NotAnEventStream => Failure::Connect(
            "the server answered neither Streamable HTTP nor an event stream: is this the MCP endpoint?"
                .into(),
        ),
        legacy::OpenError::Request(e) => of_reqwest(&e),
        legacy::OpenError::Endpoint(why) => Failure::Connect(why),
    }
}

/// Whether Streamable HTTP's first POST was refused as a server from
/// before it refuses it (a 4xx other than a sign-in's or a rate limit's:
/// 400, 404 or 405 in practice): the older transport is tried.
fn older_transport_wanted(error: &ClientInitializeError) -> bool {
    let ClientInitializeError::TransportError { error, .. } = error else {
        return false;
    };
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error.error.as_ref());
    while let Some(e) = source {
        if let Some(http) = e.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
            let status = match http {
                StreamableHttpError::HttpStatus(s) => Some(s.status),
                StreamableHttpError::UnexpectedServerResponse(text) => status_in(text),
                _ => None,
            };
            return status
                .is_some_and(|s| (400..500).contains(&s) && !matches!(s, 401 | 403 | 429));
        }
        source = e.source();
    }
    false
}

/// Opens a session, lists its tools and closes it.
pub async fn probe(
    target: &Target,
    policy: Arc<Policy>,
    private: Private,
) -> Result<Vec<ToolInfo>, Failure> {
    let started = tokio::time::Instant::now();
    let session = open(target, policy, private)
        .await
        .map_err(|f| target.redact(f))?;
    let left = OPEN.saturating_sub(started.elapsed());
    let listed = tokio::time::timeout(left, session.list_all_tools()).await;
    let refused = session.service().refused.clone();
    // Closing tells the server the session is over (a DELETE); its answer
    // changes nothing here.
    let _ = tokio::time::timeout(CONNECT, session.cancel()).await;
    match listed {
        Err(_) => Err(Failure::Connect(format!(
            "the tool list did not come within {} s",
            OPEN.as_secs()
        ))),
        // A new connection's lookup refused says why, not "refused or failed".
        Ok(Err(e)) => Err(target.redact(refused_or(&refused, || classify(&e)))),
        Ok(Ok(tools)) => Ok(tools.iter().map(info_of).collect()),
    }
}

/// A tool as the connectors list keeps it.
pub fn info_of(tool: &rmcp::model::Tool) -> ToolInfo {
    ToolInfo {
        name: tool.name.to_string(),
        description: tool.description.as_deref().map(cut),
    }
}

fn refused_or(refused: &Refused, otherwise: impl FnOnce() -> Failure) -> Failure {
    match refused.taken() {
        Some(why) => Failure::Connect(why),
        None => otherwise(),
    }
}

/// The reason an initialize failed: the transport's error it carries (which
/// is not its `source`), else its own words.
fn of_initialize(error: &ClientInitializeError) -> Failure {
    match error {
        ClientInitializeError::TransportError { error, .. } => classify(error.error.as_ref()),
        other => classify(other),
    }
}

/// The reason a tool call failed: a server's own error (its code and its
/// words, without an address), or the transport's, as an opening's.
pub fn of_call(error: &rmcp::ServiceError) -> Failure {
    match error {
        rmcp::ServiceError::McpError(e) => Failure::Connect(format!(
            "the server answered an error ({}): {}",
            e.code.0,
            scrubbed(&e.message)
        )),
        rmcp::ServiceError::TransportSend(e) => classify(e.error.as_ref()),
        rmcp::ServiceError::TransportClosed => Failure::Connect("the session closed".into()),
        other => classify(other),
    }
}

/// The reason of an rmcp error, from the transport's error where there is
/// one (never reqwest's text: it names the URL with its query).
fn classify(error: &(dyn std::error::Error + 'static)) -> Failure {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(http) = e.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
            return of_http(http);
        }
        if let Some(e) = e.downcast_ref::<reqwest::Error>() {
            return of_reqwest(e);
        }
        if let Some(legacy::SendError::Status(status)) = e.downcast_ref::<legacy::SendError>() {
            return match status {
                401 | 403 => Failure::SignIn(signin(*status)),
                _ => Failure::Connect(format!("the server answered HTTP {status}")),
            };
        }
        source = e.source();
    }
    Failure::Connect(format!(
        "the server did not answer as an MCP server does ({})",
        scrubbed(&error.to_string())
    ))
}

fn of_http(error: &StreamableHttpError<reqwest::Error>) -> Failure {
    match error {
        StreamableHttpError::AuthRequired(_) => Failure::SignIn(signin(401)),
        StreamableHttpError::InsufficientScope(_) => Failure::SignIn(signin(403)),
        // rmcp's words for a status it has no variant for: "HTTP 401 …: <body>".
        // The status is kept, the server's text is not.
        StreamableHttpError::UnexpectedServerResponse(text) => match status_in(text) {
            Some(status @ (401 | 403)) => Failure::SignIn(signin(status)),
            Some(status) => Failure::Connect(format!("the server answered HTTP {status}")),
            None => Failure::Connect("the server's answer was not MCP's".into()),
        },
        StreamableHttpError::HttpStatus(s) if matches!(s.status, 401 | 403) => {
            Failure::SignIn(signin(s.status))
        }
        StreamableHttpError::HttpStatus(s) => {
            Failure::Connect(format!("the server answered HTTP {}", s.status))
        }
        StreamableHttpError::Client(e) => of_reqwest(e),
        StreamableHttpError::ResponseBodyTooLarge { max_size } => {
            Failure::Connect(format!("an answer was over {} MiB", max_size >> 20))
        }
        StreamableHttpError::UnexpectedContentType(kind) => Failure::Connect(format!(
            "the server answered {}, not JSON or an event stream: is this the MCP endpoint?",
            kind.as_deref().map_or("nothing".to_string(), cut)
        )),
        other => Failure::Connect(format!(
            "the MCP exchange failed: {}",
            scrubbed(&other.to_string())
        )),
    }
}

/// The status in "HTTP 401 Unauthorized: …".
fn status_in(text: &str) -> Option<u16> {
    let rest = text.trim_start().strip_prefix("HTTP ")?;
    rest.get(..3)?.parse().ok()
}

fn signin(status: u16) -> String {
    format!("the server refused the sign-in (HTTP {status}): check the token or the headers")
}

fn of_reqwest(error: &reqwest::Error) -> Failure {
    let what = if error.is_timeout() {
        "no answer in time"
    } else if error.is_connect() {
        "the connection was refused or failed"
    } else if error.is_redirect() {
        "a redirect was refused"
    } else if error.is_body() || error.is_decode() {
        "the answer broke off"
    } else {
        "the request failed"
    };
    Failure::Connect(what.to_string())
}

/// An error's words, cut to one short line; none at all when they hold an
/// address (its query may hold a key).
fn scrubbed(text: &str) -> String {
    if text.contains("://") {
        return "no detail given".into();
    }
    cut(text)
}

/// A server's words, cut to one short line.
pub(crate) fn cut(text: &str) -> String {
    cut_to(text, MAX_REASON)
}

/// `text`'s first line, at most `max` characters ("…" where it was cut).
pub(crate) fn cut_to(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or("");
    match line.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_string(),
    }
}
