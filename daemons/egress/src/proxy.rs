//! The forward proxy of one chat. A request names a host (a `CONNECT`
//! authority, or an absolute `http://` URL); the chat's preset decides
//! whether that host may be reached at all; the name is resolved once, every
//! address is checked, and the connection goes to a checked address. A
//! refusal is the proxy's answer (403 with one line why) and an audit record.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tandem_shared::netpolicy::{self, Host, Policy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener, UnixStream};

/// How far a chat's commands may reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// Nowhere.
    Off,
    /// The package registries' hosts only.
    Registries,
    /// Every public host.
    All,
}

impl Preset {
    pub fn parse(text: &str) -> Result<Preset, String> {
        match text {
            "off" => Ok(Preset::Off),
            "registries" => Ok(Preset::Registries),
            "all" => Ok(Preset::All),
            other => Err(format!(
                "{other:?} is not a preset: use off, registries or all"
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Preset::Off => "off",
            Preset::Registries => "registries",
            Preset::All => "all",
        }
    }

    /// The lower of two presets (a chat's preset under the ceiling).
    pub fn capped(self, ceiling: Preset) -> Preset {
        use Preset::*;
        match (self, ceiling) {
            (Off, _) | (_, Off) => Off,
            (Registries, _) | (_, Registries) => Registries,
            (All, All) => All,
        }
    }
}

/// What a chat may reach, and the bounds every connection keeps.
#[derive(Debug, Clone)]
pub struct Rules {
    pub preset: Preset,
    /// Host names the `registries` preset opens (exact, lowercased).
    pub registries: Vec<String>,
    /// Ports a request may name.
    pub ports: Vec<u16>,
    pub lookup: Duration,
    pub connect: Duration,
    pub header: Duration,
    /// The largest request head.
    pub max_header: usize,
}

/// One decision, for the audit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub chat: String,
    pub host: String,
    pub port: u16,
    pub address: Option<IpAddr>,
    /// allowed | refused | failed
    pub verdict: &'static str,
    pub reason: String,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub duration_ms: u64,
}

/// Where decisions go (egressd's SQLite; a list in tests).
pub trait Audit: Send + Sync + 'static {
    fn record(&self, decision: Decision);
}

/// Serves one chat's socket until `stop` resolves.
pub async fn serve_chat(
    listener: UnixListener,
    chat: String,
    rules: Arc<Rules>,
    policy: Arc<Policy>,
    audit: Arc<dyn Audit>,
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
        let (chat, rules, policy, audit) =
            (chat.clone(), rules.clone(), policy.clone(), audit.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let mut decision = handle(stream, &chat, &rules, &policy).await;
            decision.duration_ms = started.elapsed().as_millis() as u64;
            tracing::info!(chat = %decision.chat, host = %decision.host, port = decision.port,
                verdict = decision.verdict, reason = %decision.reason, up = decision.bytes_up,
                down = decision.bytes_down, ms = decision.duration_ms, "egress");
            audit.record(decision);
        });
    }
}

/// What the head of a request asks for.
struct Ask {
    connect: bool,
    host: Host,
    host_text: String,
    port: u16,
    /// For plain HTTP: the head to send on, in origin form.
    forward: Vec<u8>,
}

async fn handle(mut client: UnixStream, chat: &str, rules: &Rules, policy: &Policy) -> Decision {
    let mut decision = Decision {
        chat: chat.to_string(),
        host: String::new(),
        port: 0,
        address: None,
        verdict: "refused",
        reason: String::new(),
        bytes_up: 0,
        bytes_down: 0,
        duration_ms: 0,
    };
    let (head, rest) =
        match tokio::time::timeout(rules.header, read_head(&mut client, rules.max_header)).await {
            Ok(Ok(read)) => read,
            Ok(Err(why)) => return refuse(&mut client, decision, 400, &why).await,
            Err(_) => {
                let why = format!("no whole request head in {} s", rules.header.as_secs());
                return refuse(&mut client, decision, 408, &why).await;
            }
        };
    let ask = match parse(&head) {
        Ok(ask) => ask,
        Err(why) => return refuse(&mut client, decision, 400, &why).await,
    };
    decision.host = ask.host_text.clone();
    decision.port = ask.port;

    // The preset: which names and ports this chat may reach at all.
    if let Err(why) = allowed_by_preset(rules, &ask) {
        return refuse(&mut client, decision, 403, &why).await;
    }
    // One lookup; every address checked; the connection to a checked one.
    let addresses = match &ask.host {
        Host::Ip(ip) => vec![*ip],
        Host::Name(name) => {
            if netpolicy::is_metadata_name(name) {
                let why = format!("{name} is a cloud metadata name");
                return refuse(&mut client, decision, 403, &why).await;
            }
            let lookup = tokio::net::lookup_host((name.as_str(), ask.port));
            match tokio::time::timeout(rules.lookup, lookup).await {
                Ok(Ok(found)) => found.map(|a| a.ip()).collect(),
                Ok(Err(e)) => {
                    decision.verdict = "failed";
                    let why = format!("{name} does not resolve: {e}");
                    return answer_failed(&mut client, decision, 502, &why).await;
                }
                Err(_) => {
                    decision.verdict = "failed";
                    let why = format!("looking up {name} took over {} s", rules.lookup.as_secs());
                    return answer_failed(&mut client, decision, 502, &why).await;
                }
            }
        }
    };
    if addresses.is_empty() {
        decision.verdict = "failed";
        let why = format!("{} has no address", ask.host_text);
        return answer_failed(&mut client, decision, 502, &why).await;
    }
    if let Err((ip, refusal)) = policy.check_all(&addresses) {
        decision.address = Some(ip);
        let why = format!("{} is {refusal}", ip);
        return refuse(&mut client, decision, 403, &why).await;
    }
    let target = SocketAddr::new(addresses[0], ask.port);
    decision.address = Some(target.ip());
    let mut upstream = match tokio::time::timeout(rules.connect, TcpStream::connect(target)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            decision.verdict = "failed";
            let why = format!("connecting to {target}: {e}");
            return answer_failed(&mut client, decision, 502, &why).await;
        }
        Err(_) => {
            decision.verdict = "failed";
            let why = format!(
                "connecting to {target} took over {} s",
                rules.connect.as_secs()
            );
            return answer_failed(&mut client, decision, 504, &why).await;
        }
    };
    let _ = upstream.set_nodelay(true);
    decision.verdict = "allowed";
    decision.reason = "allowed by the preset".into();
    let sent = if ask.connect {
        client
            .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            .await
    } else {
        upstream.write_all(&ask.forward).await
    };
    if sent.is_err() {
        return decision;
    }
    if !rest.is_empty() && upstream.write_all(&rest).await.is_err() {
        return decision;
    }
    decision.bytes_up = rest.len() as u64;
    if let Ok((up, down)) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
        decision.bytes_up += up;
        decision.bytes_down = down;
    }
    decision
}

/// Reads up to the blank line that ends a request head; what came after it
/// (the start of a body or of a tunnel) is returned too.
async fn read_head(client: &mut UnixStream, max: usize) -> Result<(Vec<u8>, Vec<u8>), String> {
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
            let rest = buf.split_off(end);
            return Ok((buf, rest));
        }
        if buf.len() > max {
            return Err(format!("the request head is over {max} bytes"));
        }
    }
}

fn parse(head: &[u8]) -> Result<Ask, String> {
    let mut headers = [httparse::EMPTY_HEADER; 100];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err("an incomplete request head".into()),
        Err(e) => return Err(format!("a malformed request: {e}")),
    }
    let method = request.method.unwrap_or("");
    let target = request.path.unwrap_or("");
    let host_header = request
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("host"))
        .map(|h| String::from_utf8_lossy(h.value).trim().to_string());
    if method == "CONNECT" {
        let (host, port) = netpolicy::split_authority(target, 443)?;
        return Ok(Ask {
            connect: true,
            host_text: host_text(&host),
            host,
            port,
            forward: Vec::new(),
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
    if let Some(h) = &host_header {
        let (header_host, _) = netpolicy::split_authority(h, port)?;
        if header_host != host {
            return Err(format!(
                "the Host header ({h}) names another host than the URL ({authority})"
            ));
        }
    }
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
    })
}

fn host_text(host: &Host) -> String {
    match host {
        Host::Ip(ip) => ip.to_string(),
        Host::Name(name) => name.clone(),
    }
}

fn allowed_by_preset(rules: &Rules, ask: &Ask) -> Result<(), String> {
    if !rules.ports.contains(&ask.port) {
        return Err(format!(
            "port {} is not open (open: {})",
            ask.port,
            rules
                .ports
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    match rules.preset {
        Preset::Off => Err("egress is off for this chat".into()),
        Preset::All => Ok(()),
        Preset::Registries => match &ask.host {
            Host::Name(name) if rules.registries.iter().any(|r| r == name) => Ok(()),
            _ => Err(format!(
                "{} is not a package registry (this chat's preset is registries)",
                ask.host_text
            )),
        },
    }
}

async fn refuse(
    client: &mut UnixStream,
    mut decision: Decision,
    status: u16,
    why: &str,
) -> Decision {
    decision.verdict = "refused";
    decision.reason = why.to_string();
    write_status(client, status, why).await;
    decision
}

async fn answer_failed(
    client: &mut UnixStream,
    mut decision: Decision,
    status: u16,
    why: &str,
) -> Decision {
    decision.reason = why.to_string();
    write_status(client, status, why).await;
    decision
}

async fn write_status(client: &mut UnixStream, status: u16, why: &str) {
    let reason = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        408 => "Request Timeout",
        502 => "Bad Gateway",
        504 => "Gateway Timeout",
        _ => "Error",
    };
    let body = format!("egress: {why}\n");
    let answer = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = client.write_all(answer.as_bytes()).await;
    let _ = client.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_capped_by_the_ceiling() {
        assert_eq!(Preset::All.capped(Preset::Off), Preset::Off);
        assert_eq!(Preset::All.capped(Preset::Registries), Preset::Registries);
        assert_eq!(Preset::Registries.capped(Preset::All), Preset::Registries);
        assert_eq!(Preset::All.capped(Preset::All), Preset::All);
        assert!(Preset::parse("some")
            .unwrap_err()
            .contains("off, registries or all"));
    }

    #[test]
    fn a_host_header_that_disagrees_is_refused() {
        let head = b"GET http://example.com/x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
        assert!(parse(head).err().unwrap().contains("Host header"));
        let ok = parse(b"GET http://example.com/x HTTP/1.1\r\nHost: example.com\r\n\r\n").unwrap();
        assert!(String::from_utf8_lossy(&ok.forward).starts_with("GET /x HTTP/1.1\r\n"));
        assert!(parse(b"GET https://example.com/ HTTP/1.1\r\n\r\n").is_err());
    }
}
