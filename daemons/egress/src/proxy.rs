//! The forward proxy. A request comes on a chat's own socket (the socket is
//! the chat) or on the loopback listener (the token names the chat), and
//! names a host (a `CONNECT` authority, or an absolute `http://` URL); the
//! gate decides whether that chat may reach the host at all (preset, rules,
//! cards); the name is resolved once, every address is checked, and the
//! connection goes to a checked address. A refusal is the proxy's answer
//! (403 with one line why) and an audit record.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tandem_shared::netpolicy::LivePolicy;
use tandem_shared::netpolicy::{self, Host};
use tandem_shared::secrets::Secret;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixListener};

use crate::framing;
use crate::gate::Gate;
use crate::metrics::Metrics;
use crate::policy::{Audit, Decision};
use crate::relay;
use crate::verdicts::AuditVerdict;

/// Who is calling: a chat's own socket names it; on the loopback listener
/// the caller shows the chat's token.
#[derive(Debug, Clone)]
pub enum Caller {
    Chat(String),
    Token,
}

/// Loopback callers still reading their head (no chat named yet): more
/// wait at accept, so slow heads cannot use up egressd's descriptors.
const LOOPBACK_HEADS: usize = 256;

/// What every connection needs.
pub struct Proxy {
    pub gate: Arc<Gate>,
    pub audit: Arc<dyn Audit>,
    pub metrics: Arc<Metrics>,
    /// The forward key the loopback tokens are made from.
    pub key: Option<Secret>,
    /// The address policy, following this box's interfaces.
    policy: LivePolicy,
    heads: Arc<tokio::sync::Semaphore>,
}

impl Proxy {
    pub fn new(
        gate: Arc<Gate>,
        policy: LivePolicy,
        audit: Arc<dyn Audit>,
        metrics: Arc<Metrics>,
        key: Option<Secret>,
    ) -> Proxy {
        Proxy {
            gate,
            audit,
            metrics,
            key,
            policy,
            heads: Arc::new(tokio::sync::Semaphore::new(LOOPBACK_HEADS)),
        }
    }

    /// Serves one chat's socket until `stop` resolves.
    pub async fn serve_chat(
        self: Arc<Proxy>,
        listener: UnixListener,
        chat: String,
        stop: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(stop);
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = &mut stop => return,
            };
            let Ok((stream, _)) = accepted else {
                // Out of descriptors or the like: the next accept may work.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            // A unix socket's send buffer stays at its default (~208 KiB)
            // where TCP's grows: downloads through a chat's socket were a
            // quarter slower for it.
            let _ = nix::sys::socket::setsockopt(
                &stream,
                nix::sys::socket::sockopt::SndBuf,
                &(2 << 20),
            );
            let proxy = self.clone();
            let caller = Caller::Chat(chat.clone());
            tokio::spawn(async move { proxy.serve_one(stream, caller, None).await });
        }
    }

    /// Serves the loopback listener (callers named by token) until `stop`.
    pub async fn serve_loopback(
        self: Arc<Proxy>,
        listener: TcpListener,
        stop: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(stop);
        loop {
            // A place for one more head first: past LOOPBACK_HEADS callers
            // wait in the kernel's backlog, not in egressd.
            let head = tokio::select! {
                p = self.heads.clone().acquire_owned() => p,
                _ = &mut stop => return,
            };
            let Ok(head) = head else { return };
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = &mut stop => return,
            };
            let Ok((stream, peer)) = accepted else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            // Bound to loopback at start; a peer from elsewhere is a bug, refuse it.
            if !peer.ip().is_loopback() {
                continue;
            }
            let _ = stream.set_nodelay(true);
            let proxy = self.clone();
            tokio::spawn(async move { proxy.serve_one(stream, Caller::Token, Some(head)).await });
        }
    }

    async fn serve_one<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        stream: S,
        caller: Caller,
        head: Option<tokio::sync::OwnedSemaphorePermit>,
    ) {
        let started = Instant::now();
        let Some(mut decision) = self.handle(stream, caller, head).await else {
            return;
        };
        decision.duration_ms = started.elapsed().as_millis() as u64;
        decision.at = tandem_shared::time::now_unix();
        tracing::info!(chat = %decision.chat, host = %decision.host, port = decision.port,
            verdict = decision.verdict.as_str(), up = decision.bytes_up,
            down = decision.bytes_down, ms = decision.duration_ms, "egress");
        self.metrics.record(&decision);
        self.audit.record(decision);
    }

    /// One connection, start to end. `None` for a loopback caller that never
    /// named a chat (there is no chat to audit it under).
    async fn handle<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        mut client: S,
        caller: Caller,
        mut head_place: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> Option<Decision> {
        let settings = self.gate.settings();
        let named = matches!(caller, Caller::Chat(_));
        let mut decision = Decision {
            at: 0,
            chat: match &caller {
                Caller::Chat(chat) => chat.clone(),
                Caller::Token => String::new(),
            },
            host: String::new(),
            port: 0,
            address: None,
            verdict: AuditVerdict::Refused,
            reason: String::new(),
            bytes_up: 0,
            bytes_down: 0,
            duration_ms: 0,
        };
        // A chat's socket names the chat: its place among the chat's
        // connections is taken before a byte is read, so slow heads count.
        let mut slot = None;
        if let Caller::Chat(chat) = &caller {
            match self.gate.acquire(chat) {
                Ok(s) => slot = Some(s),
                Err(open) => {
                    let why = too_many(open, settings.tunnels_per_chat);
                    return Some(refuse(&mut client, decision, 429, &why).await);
                }
            }
        }
        let read =
            tokio::time::timeout(settings.header, read_head(&mut client, settings.max_header))
                .await;
        let (head, rest) = match read {
            Ok(Ok(read)) => read,
            Ok(Err(why)) => {
                let d = refuse(&mut client, decision, 400, &why).await;
                return named.then_some(d);
            }
            Err(_) => {
                let why = format!("no whole request head in {} s", settings.header.as_secs());
                let d = refuse(&mut client, decision, 408, &why).await;
                return named.then_some(d);
            }
        };
        let ask = match parse(&head) {
            Ok(ask) => ask,
            Err(why) => {
                let d = refuse(&mut client, decision, 400, &why).await;
                return named.then_some(d);
            }
        };
        if let Caller::Token = caller {
            match self.caller_of(ask.proxy_auth.as_deref()) {
                Ok(chat) => decision.chat = chat,
                Err(why) => {
                    self.metrics.unauthenticated.inc();
                    write_status(&mut client, 407, &why).await;
                    return None;
                }
            }
            match self.gate.acquire(&decision.chat) {
                Ok(s) => slot = Some(s),
                Err(open) => {
                    let why = too_many(open, settings.tunnels_per_chat);
                    return Some(refuse(&mut client, decision, 429, &why).await);
                }
            }
            // The head is read: the place for another caller's head is free.
            head_place.take();
        }
        let _slot = slot;
        decision.host = ask.host_text.clone();
        decision.port = ask.port;
        if let Some(why) = &ask.malformed {
            return Some(refuse(&mut client, decision, 400, why).await);
        }
        // The origin would serve what the Host header says, not what was checked.
        if let Some(why) = &ask.mismatch {
            return Some(refuse(&mut client, decision, 403, why).await);
        }
        // What no rule or card can open is refused before anyone is asked.
        let policy = self.policy.current();
        match &ask.host {
            Host::Name(name) if netpolicy::is_metadata_name(name) => {
                let why = format!("{name} is a cloud metadata name");
                return Some(refuse(&mut client, decision, 403, &why).await);
            }
            Host::Ip(ip) => {
                if let Err(refusal) = policy.check(*ip) {
                    decision.address = Some(*ip);
                    let why = format!("{ip} is {refusal}");
                    return Some(refuse(&mut client, decision, 403, &why).await);
                }
            }
            Host::Name(_) => {}
        }

        // The chat's preset, rules and cards: may this chat reach the name at all?
        let asker = match caller {
            Caller::Chat(_) => "A command in this chat",
            Caller::Token => "This chat's web tools",
        };
        match self
            .gate
            .admit(&decision.chat, &ask.host, &ask.host_text, ask.port, asker)
            .await
        {
            Ok(reason) => decision.reason = reason,
            Err(why) => return Some(refuse(&mut client, decision, 403, &why).await),
        }
        // One lookup; every address checked; the connection to a checked one.
        let addresses = match &ask.host {
            Host::Ip(ip) => vec![*ip],
            Host::Name(name) => {
                let lookup = tokio::net::lookup_host((name.as_str(), ask.port));
                match tokio::time::timeout(settings.lookup, lookup).await {
                    Ok(Ok(found)) => {
                        let mut found: Vec<IpAddr> = found.map(|a| a.ip()).collect();
                        found.dedup();
                        found
                    }
                    Ok(Err(e)) => {
                        let why = format!("{name} does not resolve: {e}");
                        return Some(fail(&mut client, decision, 502, &why).await);
                    }
                    Err(_) => {
                        let why = format!(
                            "looking up {name} took over {} s",
                            settings.lookup.as_secs()
                        );
                        return Some(fail(&mut client, decision, 502, &why).await);
                    }
                }
            }
        };
        if addresses.is_empty() {
            let why = format!("{} has no address", ask.host_text);
            return Some(fail(&mut client, decision, 502, &why).await);
        }
        // The policy again: the interfaces may have changed during the lookup.
        if let Err((ip, refusal)) = self.policy.current().check_all(&addresses) {
            decision.address = Some(ip);
            let why = format!("{ip} is {refusal}");
            return Some(refuse(&mut client, decision, 403, &why).await);
        }
        // Each checked address in turn, all within the connect bound.
        let deadline = tokio::time::Instant::now() + settings.connect;
        let mut last_error = String::new();
        let mut upstream = None;
        for ip in &addresses {
            let target = SocketAddr::new(*ip, ask.port);
            decision.address = Some(*ip);
            match tokio::time::timeout_at(deadline, TcpStream::connect(target)).await {
                Ok(Ok(s)) => {
                    upstream = Some(s);
                    break;
                }
                Ok(Err(e)) => last_error = format!("connecting to {target}: {e}"),
                Err(_) => {
                    let why = format!(
                        "connecting to {target} took over {} s",
                        settings.connect.as_secs()
                    );
                    return Some(fail(&mut client, decision, 504, &why).await);
                }
            }
        }
        let Some(mut upstream) = upstream else {
            return Some(fail(&mut client, decision, 502, &last_error).await);
        };
        let _ = upstream.set_nodelay(true);
        decision.verdict = AuditVerdict::Allowed;
        self.metrics.open.inc();
        let relayed = if ask.connect {
            if client
                .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                .await
                .is_err()
            {
                self.metrics.open.dec();
                return Some(decision);
            }
            if !rest.is_empty() && upstream.write_all(&rest).await.is_err() {
                self.metrics.open.dec();
                return Some(decision);
            }
            let mut relayed = relay::relay(client, upstream, settings.idle).await;
            relayed.up += rest.len() as u64;
            relayed
        } else {
            // One request a connection: its head and its body, then only
            // the answer; whatever else the client sends is not passed on.
            relay::one_request(
                client,
                upstream,
                &ask.forward,
                rest,
                ask.body_length,
                settings.idle,
            )
            .await
        };
        self.metrics.open.dec();
        decision.bytes_up = relayed.up;
        decision.bytes_down = relayed.down;
        if relayed.idled {
            decision.reason = format!(
                "{}; closed after {} s without traffic",
                decision.reason,
                settings.idle.as_secs()
            );
        }
        Some(decision)
    }

    /// The chat a loopback caller's `Proxy-Authorization` names, if its
    /// token is that chat's.
    fn caller_of(&self, auth: Option<&str>) -> Result<String, String> {
        use base64::Engine;
        let Some(key) = &self.key else {
            return Err("this listener takes no callers (no forward key)".into());
        };
        let Some(auth) = auth else {
            return Err("name the chat: Proxy-Authorization: Basic base64(chat:token)".into());
        };
        let encoded = auth
            .strip_prefix("Basic ")
            .ok_or("Proxy-Authorization must be Basic")?;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .map_err(|_| "Proxy-Authorization is not base64")?;
        let text = String::from_utf8(decoded).map_err(|_| "Proxy-Authorization is not text")?;
        let (chat, token) = text
            .split_once(':')
            .ok_or("Proxy-Authorization is not chat:token")?;
        if !is_chat_id(chat) {
            return Err("Proxy-Authorization names no chat".into());
        }
        let expected = Secret::new(tandem_shared::secrets::egress_token(key, chat));
        if !expected.matches(token) {
            return Err("the token is not this chat's".into());
        }
        Ok(chat.to_string())
    }
}

fn too_many(open: usize, most: usize) -> String {
    format!(
        "this chat has {open} connections open, the most it may have ({most}); retry when one ends"
    )
}

pub use tandem_shared::http::is_chat_id;

/// What the head of a request asks for. Public (with [`read_head`] and
/// [`parse`]) only so the fuzzer (tests/src/bin/fuzz) can read heads as the
/// proxy does; nothing else outside this module uses it.
pub struct Ask {
    pub connect: bool,
    pub host: Host,
    pub host_text: String,
    pub port: u16,
    /// For plain HTTP: the head to send on, in origin form.
    pub forward: Vec<u8>,
    /// For plain HTTP: the bytes of body after the head (Content-Length).
    pub body_length: u64,
    /// The Proxy-Authorization header (the loopback listener's token).
    pub proxy_auth: Option<String>,
    /// Why the request is refused whatever the chat may reach (a `Host`
    /// header that names another host than the URL).
    pub mismatch: Option<String>,
    /// Why the request is malformed although its host could be read (a body
    /// length that could be read two ways): a 400.
    pub malformed: Option<String>,
}

/// Reads up to the blank line that ends a request head; what came after it
/// (the start of a body or of a tunnel) is returned too. A head over `max`
/// bytes is an error.
pub async fn read_head<S: AsyncRead + Unpin>(
    client: &mut S,
    max: usize,
) -> Result<(Vec<u8>, Vec<u8>), String> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let n = client
            .read(&mut chunk)
            .await
            .map_err(|e| format!("reading the request: {e}"))?;
        if n == 0 {
            return Err("the request ended before its head did".into());
        }
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(at) = buf[from..].windows(4).position(|w| w == b"\r\n\r\n") {
            let end = from + at + 4;
            if end > max {
                return Err(format!("the request head is over {max} bytes"));
            }
            let rest = buf.split_off(end);
            return Ok((buf, rest));
        }
        if buf.len() > max {
            return Err(format!("the request head is over {max} bytes"));
        }
    }
}

/// The head read: what it asks for, or why it is refused (a 400).
pub fn parse(head: &[u8]) -> Result<Ask, String> {
    let mut headers = [httparse::EMPTY_HEADER; 100];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err("an incomplete request head".into()),
        Err(e) => return Err(format!("a malformed request: {e}")),
    }
    let method = request.method.unwrap_or("");
    let target = request.path.unwrap_or("");
    let host_headers: Vec<String> = request
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("host"))
        .map(|h| String::from_utf8_lossy(h.value).trim().to_string())
        .collect();
    let host_header = host_headers.first().cloned();
    let proxy_auth = request
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("proxy-authorization"))
        .map(|h| String::from_utf8_lossy(h.value).trim().to_string());
    if method == "CONNECT" {
        let (host, port) = netpolicy::split_authority(target, 443)?;
        return Ok(Ask {
            connect: true,
            host_text: host_text(&host),
            host,
            port,
            forward: Vec::new(),
            body_length: 0,
            proxy_auth,
            mismatch: None,
            malformed: None,
        });
    }
    let Some(after) = target.strip_prefix("http://") else {
        return Err(format!(
            "{method} {target}: a proxy request names an absolute http:// URL (https goes through CONNECT)"
        ));
    };
    let (authority, path) = match after.find('/') {
        Some(i) => (&after[..i], &after[i..]),
        None => (after, "/"),
    };
    let (host, port) = netpolicy::split_authority(authority, 80)?;
    // A Host header that names another host than the URL is refused: the
    // origin would serve what the header says, not what was checked.
    // Host and port both: `Host: example.com` means port 80.
    let mut mismatch = None;
    if host_headers.len() > 1 {
        mismatch = Some(format!(
            "the request has {} Host headers; one is allowed",
            host_headers.len()
        ));
    } else if let Some(h) = &host_header {
        let agrees = netpolicy::split_authority(h, 80)
            .is_ok_and(|(header_host, header_port)| header_host == host && header_port == port);
        if !agrees {
            mismatch = Some(format!(
                "the Host header ({h}) names another host or port than the URL ({authority})"
            ));
        }
    }
    // The body is passed on by its one length; any other framing is a 400
    // once the host is known (for the audit row).
    let (body_length, malformed) = match framing::body_length(request.headers) {
        Ok(length) => (length, None),
        Err(why) => (0, Some(why)),
    };
    let mut forward = format!("{method} {path} HTTP/1.1\r\n").into_bytes();
    for h in request.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        if name.starts_with("proxy-") || name == "connection" || name == "keep-alive" {
            continue;
        }
        forward.extend_from_slice(h.name.as_bytes());
        forward.extend_from_slice(b": ");
        forward.extend_from_slice(h.value);
        forward.extend_from_slice(b"\r\n");
    }
    if host_header.is_none() {
        forward.extend_from_slice(format!("Host: {authority}\r\n").as_bytes());
    }
    // One request a connection: the next one is checked again.
    forward.extend_from_slice(b"Connection: close\r\n\r\n");
    Ok(Ask {
        connect: false,
        host_text: host_text(&host),
        host,
        port,
        forward,
        body_length,
        proxy_auth,
        mismatch,
        malformed,
    })
}

fn host_text(host: &Host) -> String {
    match host {
        Host::Ip(ip) => ip.to_string(),
        Host::Name(name) => name.clone(),
    }
}

async fn refuse<S: AsyncWrite + Unpin>(
    client: &mut S,
    mut decision: Decision,
    status: u16,
    why: &str,
) -> Decision {
    decision.verdict = AuditVerdict::Refused;
    decision.reason = why.to_string();
    write_status(client, status, why).await;
    decision
}

/// Not a policy refusal: the name, the lookup or the connection failed.
async fn fail<S: AsyncWrite + Unpin>(
    client: &mut S,
    mut decision: Decision,
    status: u16,
    why: &str,
) -> Decision {
    decision.verdict = AuditVerdict::Failed;
    decision.reason = why.to_string();
    write_status(client, status, why).await;
    decision
}

async fn write_status<S: AsyncWrite + Unpin>(client: &mut S, status: u16, why: &str) {
    let reason = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        429 => "Too Many Requests",
        502 => "Bad Gateway",
        504 => "Gateway Timeout",
        _ => "Error",
    };
    let body = format!("egress: {why}\n");
    let challenge = match status {
        407 => "Proxy-Authenticate: Basic realm=\"tandem egress\"\r\n",
        429 => "Retry-After: 5\r\n",
        _ => "",
    };
    let answer = format!(
        "HTTP/1.1 {status} {reason}\r\n{challenge}Content-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = client.write_all(answer.as_bytes()).await;
    let _ = client.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_header_that_disagrees_is_refused() {
        let head = b"GET http://example.com/x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
        let ask = parse(head).expect("a well-formed request");
        assert!(ask.mismatch.is_some_and(|m| m.contains("Host header")));
        let ok = parse(b"GET http://example.com/x HTTP/1.1\r\nHost: example.com\r\n\r\n").unwrap();
        assert!(String::from_utf8_lossy(&ok.forward).starts_with("GET /x HTTP/1.1\r\n"));
        assert!(parse(b"GET https://example.com/ HTTP/1.1\r\n\r\n").is_err());
    }
}
