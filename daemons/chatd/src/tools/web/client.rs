//! The HTTP client of the web tools: each hop a new connection to egressd's
//! loopback listener with the chat's token (`CONNECT` and TLS by hand for
//! `https://`), redirects followed one checked hop at a time, egressd's
//! refusals turned into lines the model can act on.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout_at, Instant};
use url::Url;

use super::content::{essence, Kind};
use super::{WebAccess, WebSettings, MAX_HEAD_BYTES, MAX_REDIRECTS, MAX_REFUSAL_BYTES, USER_AGENT};
use crate::tools::one_line;
use crate::workspace::ToolError;

/// What a fetch ended with.
pub(super) struct Fetched {
    pub(super) url: Url,
    pub(super) first_url: Url,
    pub(super) status: u16,
    pub(super) reason: String,
    /// The Content-Type as sent, trimmed ("" when none).
    pub(super) content_type: String,
    /// Content-Length, when given.
    pub(super) length: Option<u64>,
    /// Retry-After, when given.
    pub(super) retry_after: Option<String>,
    /// The body, when its type is one that is read.
    pub(super) body: Option<Vec<u8>>,
    pub(super) end: BodyEnd,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BodyEnd {
    Complete,
    /// More than `web_max_bytes`.
    Cut,
    TimedOut,
    Broken,
}

/// A URL the web tools may ask for: http or https, a host, no user name.
pub(super) fn parse_url(raw: &str) -> Result<Url, String> {
    let url = Url::parse(raw).map_err(|e| {
        format!(
            "{:?} is not a web address ({e}); give a whole URL such as https://example.org/page",
            one_line(raw, 200)
        )
    })?;
    check_url(&url)?;
    Ok(url)
}

fn check_url(url: &Url) -> Result<(), String> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "{}: only http:// and https:// addresses can be fetched, not {}:",
            one_line(url.as_str(), 200),
            url.scheme()
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("{} names no host", one_line(url.as_str(), 200)));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(
            "an address with a user name or password in it is not fetched; give it without them"
                .into(),
        );
    }
    Ok(())
}

#[derive(Debug, Clone)]
pub(super) enum Method {
    Get,
    /// A GET with a login header (a SearXNG's): sent on the first hop
    /// only, so a redirect never carries it elsewhere.
    GetAuthed {
        header: String,
        value: tandem_shared::secrets::Secret,
    },
    /// A form: its `application/x-www-form-urlencoded` body.
    PostForm(String),
}

/// Follows redirects by hand from `url`, each hop through egressd, and
/// reads the last answer's body when its type is one that is read.
pub(super) async fn fetch(web: &WebAccess, url: Url, method: Method) -> Result<Fetched, ToolError> {
    let settings = &web.settings;
    let hard = Instant::now() + settings.timeout + settings.card_wait;
    let first_url = url.clone();
    let mut url = url;
    let mut method = method;
    for hop in 0..=MAX_REDIRECTS {
        let opened = match open(web, &url, &method, hard).await {
            Ok(opened) => opened,
            Err(failure) => return Err(ToolError::new(failure.describe(hop, &url, settings))),
        };
        let Opened {
            response,
            conn: _conn,
            after,
            plain,
        } = opened;
        let status = response.status().as_u16();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(|s| s.trim().to_string())
        };
        let content_type = one_line(&header("content-type").unwrap_or_default(), 200);
        // None was asked for; one sent anyway is named, not decoded.
        let encoding = header("content-encoding")
            .filter(|e| !e.is_empty() && !e.eq_ignore_ascii_case("identity"))
            .map(|e| one_line(&e, 40));
        let content_type = match encoding {
            Some(e) => format!("{content_type} (compressed: {e})"),
            None => content_type,
        };
        let length = header("content-length").and_then(|v| v.parse::<u64>().ok());
        let location = header("location");
        let retry_after = header("retry-after");
        let reason = response
            .status()
            .canonical_reason()
            .unwrap_or("")
            .to_string();
        let mut body = response.into_body();

        // egressd answers a plain request for itself with one text line
        // `egress: why` (inside a tunnel, only the origin answers).
        if plain
            && matches!(status, 403 | 407 | 429 | 502 | 504)
            && essence(&content_type) == "text/plain"
        {
            let (bytes, _) = read_body(&mut body, MAX_REFUSAL_BYTES, after).await;
            if let Some(why) = egress_line(&bytes) {
                let failure = Failure::Proxy {
                    status,
                    why,
                    retry_after,
                };
                return Err(ToolError::new(failure.describe(hop, &url, settings)));
            }
            // The origin's own answer: what was read is its start.
            let (rest, end) = read_body(
                &mut body,
                settings.max_bytes.saturating_sub(bytes.len()),
                after,
            )
            .await;
            let mut all = bytes;
            all.extend_from_slice(&rest);
            return Ok(Fetched {
                url,
                first_url,
                status,
                reason,
                content_type,
                length,
                retry_after,
                body: Some(all),
                end,
            });
        }
        if matches!(status, 301 | 302 | 303 | 307 | 308) {
            let Some(location) = location else {
                return Err(ToolError::new(format!(
                    "{} answered {status} (a redirect) without saying where to",
                    one_line(url.as_str(), 200)
                )));
            };
            if hop == MAX_REDIRECTS {
                return Err(ToolError::new(format!(
                    "{} redirects more than {MAX_REDIRECTS} times (the last to {}); fetch that address yourself if you need it",
                    one_line(first_url.as_str(), 200),
                    one_line(&location, 200)
                )));
            }
            let next = url.join(&location).map_err(|e| {
                ToolError::new(format!(
                    "redirect {} from {} names a bad address {:?}: {e}",
                    hop + 1,
                    one_line(url.as_str(), 200),
                    one_line(&location, 200)
                ))
            })?;
            if let Err(why) = check_url(&next) {
                return Err(ToolError::new(format!(
                    "redirect {} of {MAX_REDIRECTS} at most leads to an address that is not fetched: {why}",
                    hop + 1
                )));
            }
            let mut next = next;
            next.set_fragment(None);
            if matches!(status, 301..=303) || matches!(method, Method::GetAuthed { .. }) {
                method = Method::Get;
            }
            url = next;
            continue;
        }
        let (body, end) = if Kind::read_body(&content_type) {
            let (bytes, end) = read_body(&mut body, settings.max_bytes, after).await;
            (Some(bytes), end)
        } else {
            (None, BodyEnd::Complete)
        };
        return Ok(Fetched {
            url,
            first_url,
            status,
            reason,
            content_type,
            length,
            retry_after,
            body,
            end,
        });
    }
    unreachable!("the loop returns at the last hop")
}

/// egressd's refusal line, when `body` is one.
fn egress_line(body: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(body);
    let line = text.strip_prefix("egress: ")?;
    Some(one_line(line.trim(), 300))
}

/// Why a hop did not get an answer.
#[derive(Debug)]
enum Failure {
    /// Nothing listens at egress_proxy.
    ProxyDown,
    /// egressd answered for itself: refused, or could not reach the host.
    Proxy {
        status: u16,
        why: String,
        retry_after: Option<String>,
    },
    /// The wait for egressd to let the hop through ran out.
    GateTimeout,
    /// The wait for the origin's answer ran out.
    Timeout,
    /// Anything else, said in a line (never holding the token).
    Other(String),
}

impl Failure {
    fn describe(&self, hop: usize, url: &Url, settings: &WebSettings) -> String {
        let target = one_line(url.as_str(), 200);
        let host = url.host_str().unwrap_or("?");
        let which = if hop == 0 {
            target.clone()
        } else {
            format!("redirect {hop} of {MAX_REDIRECTS} at most (to {target})")
        };
        match self {
            Failure::ProxyDown => format!(
                "egressd is not running: nothing answers at {} ([chatd] egress_proxy), so this chat cannot reach the web. \
                 Tell the person to start it with `tandem egress start`, then try again.",
                settings.proxy
            ),
            Failure::Proxy { status: 403, why, .. } => {
                format!("egressd refused {which}: {why}. Tell the person if they need this site; they decide what this chat may reach.")
            }
            Failure::Proxy { status: 407, why, .. } => format!(
                "egressd did not accept this chat's token (407: {why}): chatd and egressd must use the same forward key \
                 (QSE_FORWARD_KEY, or chatd's forward.key); tell the person, who may need to restart egressd."
            ),
            Failure::Proxy {
                status: 429,
                why,
                retry_after,
            } => format!(
                "egressd refused {which}: too many connections ({why}); {}",
                match retry_after {
                    Some(s) => format!("try again after {s} s"),
                    None => "try again when others have finished".into(),
                }
            ),
            Failure::Proxy { status: 502, why, .. } => {
                format!("{which} could not be reached through egressd: {why}")
            }
            Failure::Proxy { status: 504, why, .. } => {
                format!("connecting to {host} timed out in egressd: {why}")
            }
            Failure::Proxy { status, why, .. } => {
                format!("egressd answered {status} for {which}: {why}")
            }
            Failure::GateTimeout => format!(
                "{which} got no answer within {} s (web_timeout_s {} + up to {} s for egressd's consent card); \
                 if a card asked about {host}, it was not answered in time",
                (settings.timeout + settings.card_wait).as_secs(),
                settings.timeout.as_secs(),
                settings.card_wait.as_secs()
            ),
            Failure::Timeout => format!(
                "{which} did not answer within {} s (web_timeout_s)",
                settings.timeout.as_secs()
            ),
            Failure::Other(line) => format!("{which}: {line}"),
        }
    }
}

/// An answer's head, the task driving its connection (ended on drop), and
/// the deadline for reading on.
struct Opened {
    response: hyper::Response<Incoming>,
    conn: AbortOnDrop,
    after: Instant,
    /// Sent to egressd in absolute form (not in a tunnel): egressd may
    /// have answered for itself.
    plain: bool,
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One hop: a new connection to egressd, the request, the answer's head.
async fn open(
    web: &WebAccess,
    url: &Url,
    method: &Method,
    hard: Instant,
) -> Result<Opened, Failure> {
    let settings = &web.settings;
    let host = url.host_str().ok_or(Failure::Other("no host".into()))?;
    let port = url.port_or_known_default().unwrap_or(80);
    let authority = match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    };
    let stream = match timeout_at(hard, TcpStream::connect(&settings.proxy)).await {
        Err(_) => return Err(Failure::GateTimeout),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            return Err(Failure::ProxyDown)
        }
        Ok(Err(e)) => {
            return Err(Failure::Other(format!(
                "egressd at {} cannot be reached: {e}",
                settings.proxy
            )))
        }
        Ok(Ok(s)) => s,
    };
    let _ = stream.set_nodelay(true);
    let (target, proxy_auth) = if url.scheme() == "https" {
        (origin_form(url), None)
    } else {
        let mut absolute = url.clone();
        absolute.set_fragment(None);
        (absolute.to_string(), Some(web.proxy_authorization()))
    };
    let mut request = hyper::Request::builder()
        .uri(target.as_str())
        .header("host", &authority)
        .header("user-agent", USER_AGENT)
        .header("accept-encoding", "identity")
        .header("connection", "close");
    let body = match method {
        Method::GetAuthed { header, value } => {
            let mut secret =
                hyper::header::HeaderValue::from_str(value.expose()).map_err(|_| {
                    Failure::Other("the search login cannot be sent in a header".into())
                })?;
            secret.set_sensitive(true);
            request = request
                .method("GET")
                .header("accept", "application/json")
                .header(header.as_str(), secret);
            Bytes::new()
        }
        Method::Get => {
            request = request.method("GET").header(
                "accept",
                "text/html,application/xhtml+xml,application/json,text/plain;q=0.9,*/*;q=0.5",
            );
            Bytes::new()
        }
        Method::PostForm(form) => {
            request = request
                .method("POST")
                .header("accept", "text/html,application/json;q=0.9,*/*;q=0.5")
                .header("content-type", "application/x-www-form-urlencoded");
            Bytes::from(form.clone())
        }
    };
    if let Some(auth) = proxy_auth {
        let mut value = hyper::header::HeaderValue::from_str(&auth)
            .map_err(|_| Failure::Other("this chat's id cannot be sent in a header".into()))?;
        value.set_sensitive(true);
        request = request.header("proxy-authorization", value);
    }
    let request = request
        .body(Full::new(body))
        .map_err(|e| Failure::Other(format!("the request could not be made: {e}")))?;

    if url.scheme() == "https" {
        let mut stream = stream;
        // egressd decides (maybe after a card) before it answers CONNECT.
        connect_tunnel(&mut stream, host, port, &web.proxy_authorization(), hard).await?;
        let after = (Instant::now() + settings.timeout).min(hard);
        let tls = timeout_at(after, tls_handshake(stream, url))
            .await
            .map_err(|_| Failure::Timeout)??;
        let (response, conn) = exchange(tls, request, after).await?;
        Ok(Opened {
            response,
            conn,
            after,
            plain: false,
        })
    } else {
        // The origin's answer comes back through egressd's decision.
        let (response, conn) = exchange(stream, request, hard).await.map_err(|f| match f {
            Failure::Timeout => Failure::GateTimeout,
            other => other,
        })?;
        let after = (Instant::now() + settings.timeout).min(hard);
        Ok(Opened {
            response,
            conn,
            after,
            plain: true,
        })
    }
}

/// `/path?query` of `url`.
pub(super) fn origin_form(url: &Url) -> String {
    let mut out = url.path().to_string();
    if out.is_empty() {
        out.push('/');
    }
    if let Some(q) = url.query() {
        out.push('?');
        out.push_str(q);
    }
    out
}

/// Sends `request` on `io` (HTTP/1.1) and waits for the answer's head.
async fn exchange<S>(
    io: S,
    request: hyper::Request<Full<Bytes>>,
    deadline: Instant,
) -> Result<(hyper::Response<Incoming>, AbortOnDrop), Failure>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = hyper_util::rt::TokioIo::new(io);
    let (mut sender, conn) = timeout_at(deadline, hyper::client::conn::http1::handshake(io))
        .await
        .map_err(|_| Failure::Timeout)?
        .map_err(|e| Failure::Other(format!("the connection failed: {e}")))?;
    let conn = AbortOnDrop(tokio::spawn(async move {
        let _ = conn.await;
    }));
    let response = timeout_at(deadline, sender.send_request(request))
        .await
        .map_err(|_| Failure::Timeout)?
        .map_err(|e| Failure::Other(format!("no answer came: {}", hyper_error(&e))))?;
    Ok((response, conn))
}

fn hyper_error(e: &hyper::Error) -> String {
    if e.is_incomplete_message() {
        return "the connection closed before a whole answer came".into();
    }
    let mut line = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        line.push_str(": ");
        line.push_str(&s.to_string());
        source = s.source();
    }
    one_line(&line, 300)
}

/// Asks egressd for a tunnel to `host:port`; its refusal comes back as a
/// [`Failure::Proxy`] with its line.
async fn connect_tunnel(
    stream: &mut TcpStream,
    host: &str,
    port: u16,
    auth: &str,
    hard: Instant,
) -> Result<(), Failure> {
    let head = format!(
        "CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\nProxy-Authorization: {auth}\r\nUser-Agent: {USER_AGENT}\r\n\r\n"
    );
    let wrote = timeout_at(hard, stream.write_all(head.as_bytes())).await;
    match wrote {
        Err(_) => return Err(Failure::GateTimeout),
        Ok(Err(e)) => {
            return Err(Failure::Other(format!(
                "egressd closed the connection: {}",
                e.kind()
            )))
        }
        Ok(Ok(())) => {}
    }
    // The head is read a byte at a time: what follows it is the origin's
    // and must stay in the stream for TLS.
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 1];
    let (status, head_len, length, retry_after) = loop {
        let n = match timeout_at(hard, stream.read(&mut chunk)).await {
            Err(_) => return Err(Failure::GateTimeout),
            Ok(Err(e)) => {
                return Err(Failure::Other(format!(
                    "egressd closed the connection: {}",
                    e.kind()
                )))
            }
            Ok(Ok(0)) => {
                return Err(Failure::Other(
                    "egressd closed the connection without answering CONNECT".into(),
                ))
            }
            Ok(Ok(n)) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        if !buf.ends_with(b"\r\n\r\n") {
            if buf.len() < MAX_HEAD_BYTES {
                continue;
            }
            return Err(Failure::Other(
                "egressd's answer to CONNECT has no end".into(),
            ));
        }
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut response = httparse::Response::new(&mut headers);
        match response.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => {
                let find = |name: &str| {
                    response
                        .headers
                        .iter()
                        .find(|h| h.name.eq_ignore_ascii_case(name))
                        .and_then(|h| std::str::from_utf8(h.value).ok())
                        .map(|v| v.trim().to_string())
                };
                let length = find("content-length").and_then(|v| v.parse::<usize>().ok());
                break (response.code.unwrap_or(0), len, length, find("retry-after"));
            }
            Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD_BYTES => continue,
            _ => {
                return Err(Failure::Other(
                    "egressd's answer to CONNECT could not be read".into(),
                ))
            }
        }
    };
    if status == 200 {
        return Ok(());
    }
    // The refusal's line (bounded).
    let want = length.unwrap_or(MAX_REFUSAL_BYTES).min(MAX_REFUSAL_BYTES);
    let mut body = buf[head_len..].to_vec();
    let mut chunk = [0u8; 4096];
    let soon = (Instant::now() + Duration::from_secs(2)).min(hard);
    while body.len() < want {
        match timeout_at(soon, stream.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => body.extend_from_slice(&chunk[..n]),
            _ => break,
        }
    }
    let why = egress_line(&body).unwrap_or_else(|| {
        let text = String::from_utf8_lossy(&body);
        if text.trim().is_empty() {
            "no reason given".to_string()
        } else {
            one_line(text.trim(), 300)
        }
    });
    Err(Failure::Proxy {
        status,
        why,
        retry_after,
    })
}

async fn tls_handshake(
    stream: TcpStream,
    url: &Url,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, Failure> {
    use rustls::pki_types::ServerName;
    let name = match url.host() {
        Some(url::Host::Domain(d)) => ServerName::try_from(d.to_string())
            .map_err(|_| Failure::Other(format!("{d} is not a name TLS can check")))?,
        Some(url::Host::Ipv4(ip)) => ServerName::IpAddress(std::net::IpAddr::V4(ip).into()),
        Some(url::Host::Ipv6(ip)) => ServerName::IpAddress(std::net::IpAddr::V6(ip).into()),
        None => return Err(Failure::Other("no host".into())),
    };
    tokio_rustls::TlsConnector::from(tandem_shared::tls::client_config())
        .connect(name, stream)
        .await
        .map_err(|e| {
            let detail = e
                .get_ref()
                .map(|inner| inner.to_string())
                .unwrap_or_else(|| e.to_string());
            Failure::Other(format!(
                "the TLS handshake with {} failed: {}",
                url.host_str().unwrap_or("?"),
                one_line(&detail, 200)
            ))
        })
}

/// Reads `body` until it ends, `max` bytes, or `deadline`.
async fn read_body(body: &mut Incoming, max: usize, deadline: Instant) -> (Vec<u8>, BodyEnd) {
    let mut out = Vec::new();
    loop {
        match timeout_at(deadline, body.frame()).await {
            Err(_) => return (out, BodyEnd::TimedOut),
            Ok(None) => return (out, BodyEnd::Complete),
            Ok(Some(Err(_))) => return (out, BodyEnd::Broken),
            Ok(Some(Ok(frame))) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                if out.len() + data.len() > max {
                    let room = max - out.len();
                    out.extend_from_slice(&data[..room]);
                    return (out, BodyEnd::Cut);
                }
                out.extend_from_slice(&data);
            }
        }
    }
}

/// Runs `future` on a runtime of its own (tools run on blocking threads).
pub(super) fn block_on<F: std::future::Future>(future: F) -> Result<F::Output, ToolError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ToolError::new(format!("the web tools could not start: {e}")))?;
    Ok(runtime.block_on(future))
}
