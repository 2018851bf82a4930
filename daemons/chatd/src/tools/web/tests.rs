//! Against an in-test proxy that answers as egressd's loopback listener
//! does (407 without the chat's token, 403 `egress: why`, absolute-form
//! `http://` sent on in origin form, `CONNECT` tunnels) and in-test
//! origins. Every wait is bounded; nothing sleeps to synchronise.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::json;
use tandem_shared::secrets::{egress_token, Secret};

use super::client::origin_form;
use super::search::ddg_target;
use super::*;
use crate::tools::{run, Registry, ToolContext, ToolOutput};
use crate::workspace::Workspace;
use serde_json::Value;
use url::Url;

const KEY: &str = "unit-test-forward-key";
const CHAT: &str = "c_web1";

/// A request as an origin got it.
#[derive(Debug, Clone)]
struct Req {
    method: String,
    target: String,
    head: String,
    body: Vec<u8>,
}

impl Req {
    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    }
}

enum Reply {
    Bytes(Vec<u8>),
    /// Writes these bytes, then holds the connection until the test ends.
    Hang(Vec<u8>),
}

fn answer(status: &str, content_type: &str, extra: &str, body: &[u8]) -> Reply {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    Reply::Bytes(out)
}

fn redirect(status: &str, to: &str) -> Reply {
    answer(
        status,
        "text/html",
        &format!("Location: {to}\r\n"),
        b"moved",
    )
}

type Handler = Arc<dyn Fn(&Req) -> Reply + Send + Sync>;
type Release = Arc<(Mutex<bool>, Condvar)>;

/// Reads a request head (and what came after it) from `s`.
fn read_head(s: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..i]).to_string();
            return Some((head, buf[i + 4..].to_vec()));
        }
        let n = s.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn content_length(head: &str) -> usize {
    head.lines()
        .find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim()
                .eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0)
}

/// An origin on 127.0.0.1 answering each request by `handler`.
struct Origin {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Req>>>,
    release: Release,
}

impl Drop for Origin {
    fn drop(&mut self) {
        let (lock, bell) = &*self.release;
        *lock.lock().unwrap() = true;
        bell.notify_all();
    }
}

fn origin(handler: impl Fn(&Req) -> Reply + Send + Sync + 'static) -> Origin {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let release: Release = Arc::new((Mutex::new(false), Condvar::new()));
    let handler: Handler = Arc::new(handler);
    let (seen2, release2) = (seen.clone(), release.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let (handler, seen, release) = (handler.clone(), seen2.clone(), release2.clone());
            std::thread::spawn(move || {
                let Some((head, mut body)) = read_head(&mut s) else {
                    return;
                };
                let want = content_length(&head);
                let mut chunk = [0u8; 4096];
                while body.len() < want {
                    match s.read(&mut chunk) {
                        Ok(n) if n > 0 => body.extend_from_slice(&chunk[..n]),
                        _ => break,
                    }
                }
                let mut words = head.split_whitespace();
                let req = Req {
                    method: words.next().unwrap_or("").to_string(),
                    target: words.next().unwrap_or("").to_string(),
                    head: head.clone(),
                    body,
                };
                seen.lock().unwrap().push(req.clone());
                match handler(&req) {
                    Reply::Bytes(bytes) => {
                        let _ = s.write_all(&bytes);
                        let _ = s.shutdown(Shutdown::Write);
                    }
                    Reply::Hang(bytes) => {
                        let _ = s.write_all(&bytes);
                        let (lock, bell) = &*release;
                        let mut done = lock.lock().unwrap();
                        while !*done {
                            done = bell.wait(done).unwrap();
                        }
                    }
                }
            });
        }
    });
    Origin {
        addr,
        seen,
        release,
    }
}

/// An in-test egressd loopback listener: names map to origins, some
/// hosts are refused with a reason.
struct Egress {
    addr: SocketAddr,
    heads: Arc<Mutex<Vec<String>>>,
}

fn egress(names: &[(&str, SocketAddr)], refused: &[(&str, &str)]) -> Egress {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let names: Arc<HashMap<String, SocketAddr>> =
        Arc::new(names.iter().map(|(n, a)| (n.to_string(), *a)).collect());
    let refused: Arc<HashMap<String, String>> = Arc::new(
        refused
            .iter()
            .map(|(h, w)| (h.to_string(), w.to_string()))
            .collect(),
    );
    let heads = Arc::new(Mutex::new(Vec::new()));
    let heads2 = heads.clone();
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!(
            "{CHAT}:{}",
            egress_token(&Secret::new(KEY.into()), CHAT)
        ))
    );
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut client) = stream else { continue };
            let (names, refused, heads, expected) = (
                names.clone(),
                refused.clone(),
                heads2.clone(),
                expected.clone(),
            );
            std::thread::spawn(move || {
                let Some((head, rest)) = read_head(&mut client) else {
                    return;
                };
                heads.lock().unwrap().push(head.clone());
                let say = |client: &mut TcpStream, status: &str, why: &str| {
                    let body = format!("egress: {why}\n");
                    let challenge = if status.starts_with("407") {
                        "Proxy-Authenticate: Basic realm=\"tandem egress\"\r\n"
                    } else {
                        ""
                    };
                    let _ = client.write_all(
                        format!(
                            "HTTP/1.1 {status}\r\n{challenge}Content-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        )
                        .as_bytes(),
                    );
                };
                let auth = head.lines().skip(1).find_map(|l| {
                    let (n, v) = l.split_once(':')?;
                    n.trim()
                        .eq_ignore_ascii_case("proxy-authorization")
                        .then(|| v.trim().to_string())
                });
                if auth.as_deref() != Some(expected.as_str()) {
                    say(
                        &mut client,
                        "407 Proxy Authentication Required",
                        "the token is not this chat's",
                    );
                    return;
                }
                let mut words = head.split_whitespace();
                let method = words.next().unwrap_or("").to_string();
                let target = words.next().unwrap_or("").to_string();
                let (host, port, forward) = if method == "CONNECT" {
                    let (h, p) = target.rsplit_once(':').unwrap();
                    (h.to_string(), p.parse::<u16>().unwrap(), None)
                } else {
                    let url = Url::parse(&target).unwrap();
                    let mut fwd = format!("{method} {} HTTP/1.1\r\n", origin_form(&url));
                    for line in head.lines().skip(1) {
                        let name = line.split(':').next().unwrap_or("").to_ascii_lowercase();
                        if name.starts_with("proxy-") || name == "connection" {
                            continue;
                        }
                        fwd.push_str(line);
                        fwd.push_str("\r\n");
                    }
                    fwd.push_str("Connection: close\r\n\r\n");
                    (
                        url.host_str().unwrap().to_string(),
                        url.port_or_known_default().unwrap(),
                        Some(fwd),
                    )
                };
                if let Some(why) = refused.get(&host) {
                    say(&mut client, "403 Forbidden", why);
                    return;
                }
                let to = match names.get(&host) {
                    Some(a) => SocketAddr::new(a.ip(), port),
                    None => {
                        say(
                            &mut client,
                            "502 Bad Gateway",
                            &format!("{host} does not resolve"),
                        );
                        return;
                    }
                };
                let Ok(mut upstream) = TcpStream::connect(to) else {
                    say(&mut client, "502 Bad Gateway", "connection refused");
                    return;
                };
                match forward {
                    None => {
                        let _ = client.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n");
                    }
                    Some(fwd) => {
                        let _ = upstream.write_all(fwd.as_bytes());
                    }
                }
                let _ = upstream.write_all(&rest);
                let (mut c2, mut u2) = (client.try_clone().unwrap(), upstream.try_clone().unwrap());
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut c2, &mut u2);
                    let _ = u2.shutdown(Shutdown::Write);
                });
                let _ = std::io::copy(&mut upstream, &mut client);
                let _ = client.shutdown(Shutdown::Write);
            });
        }
    });
    Egress { addr, heads }
}

fn settings(proxy: SocketAddr) -> WebSettings {
    WebSettings {
        proxy: proxy.to_string(),
        engine: SearchEngine::DuckDuckGo,
        search_url: "https://html.duckduckgo.com/html/".into(),
        timeout: Duration::from_secs(10),
        max_bytes: 2 << 20,
        card_wait: Duration::from_secs(5),
        query: super::SearchQuery::default(),
    }
}

fn token() -> String {
    egress_token(&Secret::new(KEY.into()), CHAT)
}

/// The token, its Basic form and the key appear nowhere in `out`.
fn no_secret(out: &ToolOutput) {
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("{CHAT}:{}", token()));
    for secret in [token(), basic, KEY.to_string()] {
        assert!(
            !out.text.contains(&secret),
            "a secret in the text: {}",
            out.text
        );
        assert!(!out.summary.contains(&secret), "a secret in the summary");
    }
}

struct Call {
    _dir: tempfile::TempDir,
    ws: Workspace,
    access: WebAccess,
}

impl Call {
    fn new(settings: WebSettings) -> Call {
        Call::with_key(settings, KEY)
    }

    fn with_key(settings: WebSettings, key: &str) -> Call {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        Call {
            _dir: dir,
            ws,
            access: WebAccess::new(settings, CHAT, &Secret::new(key.into())),
        }
    }

    fn run(&self, name: &str, args: Value) -> ToolOutput {
        let ctx = ToolContext {
            workspace: &self.ws,
            call_id: "call_w",
            budget_chars: crate::tools::MAX_RESULT_CHARS,
            web: Some(&self.access),
            documents: None,
        };
        let out = run(&Registry::chatd(), name, &args.to_string(), &ctx);
        no_secret(&out);
        out
    }
}

fn fetch(call: &Call, url: &str) -> ToolOutput {
    call.run("web_fetch", json!({ "url": url }))
}

#[test]
fn a_page_comes_through_the_proxy_labelled_untrusted() {
    let site = origin(|r| match r.target.as_str() {
        "/hello" => answer(
            "200 OK",
            "text/plain; charset=utf-8",
            "",
            b"hello from the origin\n",
        ),
        _ => answer("404 Not Found", "text/plain", "", b"no such page"),
    });
    let proxy = egress(&[("site.test", site.addr)], &[]);
    let call = Call::new(settings(proxy.addr));
    let url = format!("http://site.test:{}/hello", site.addr.port());
    let out = fetch(&call, &url);
    assert!(out.ok, "{}", out.text);
    assert!(out.text.starts_with(UNTRUSTED), "{}", out.text);
    assert!(out.text.contains(&format!("URL: {url}\n")), "{}", out.text);
    assert!(out.text.contains("Status: 200 OK\n"), "{}", out.text);
    assert!(
        out.text.ends_with("---\nhello from the origin\n"),
        "{}",
        out.text
    );
    assert!(
        out.summary.starts_with("web_fetch http://site.test"),
        "{}",
        out.summary
    );

    // The proxy saw the chat's token; the origin never did.
    let heads = proxy.heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 1);
    assert!(
        heads[0].starts_with(&format!("GET {url} HTTP/1.1")),
        "{}",
        heads[0]
    );
    let seen = site.seen.lock().unwrap().clone();
    assert_eq!(seen[0].header("proxy-authorization"), None);
    assert_eq!(
        seen[0].header("host").as_deref(),
        Some(&*format!("site.test:{}", site.addr.port()))
    );
    assert!(!seen[0].head.contains(&token()));

    // An origin's 404 is shown, and the call counts as failed.
    let out = fetch(
        &call,
        &format!("http://site.test:{}/gone", site.addr.port()),
    );
    assert!(!out.ok);
    assert!(
        out.text.contains("Status: 404 Not Found") && out.text.contains("no such page"),
        "{}",
        out.text
    );
}

#[test]
fn html_becomes_text_and_json_stays_as_it_is() {
    let site = origin(|r| match r.target.as_str() {
        "/page" => answer(
            "200 OK",
            "text/html; charset=utf-8",
            "",
            b"<!doctype html><html><head><title>T</title><style>p{color:red}</style>\
              <script>alert('nope')</script></head><body><h1>Release notes</h1>\
              <p>Version <b>2.0</b> is out.</p><ul><li>faster</li><li>smaller</li></ul>\
              <a href=\"https://example.org/more\">more</a></body></html>",
        ),
        "/data" => answer("200 OK", "application/json", "", br#"{"a": [1, 2]}"#),
        "/nodata" => answer(
            "200 OK",
            "",
            "",
            b"<html><body><p>sniffed</p></body></html>",
        ),
        _ => answer("404 Not Found", "text/plain", "", b""),
    });
    let proxy = egress(&[("site.test", site.addr)], &[]);
    let call = Call::new(settings(proxy.addr));
    let base = format!("http://site.test:{}", site.addr.port());
    let out = fetch(&call, &format!("{base}/page"));
    assert!(out.ok, "{}", out.text);
    assert!(
        out.text
            .contains("Type: text/html; charset=utf-8 (converted to text)"),
        "{}",
        out.text
    );
    let content = out.text.split("---\n").nth(1).expect("content");
    assert!(content.contains("Release notes"), "{content}");
    assert!(content.contains("Version **2.0** is out."), "{content}");
    assert!(
        content.contains("faster") && content.contains("https://example.org/more"),
        "{content}"
    );
    assert!(
        !content.contains('<') && !content.contains("alert") && !content.contains("color:red"),
        "{content}"
    );

    let out = fetch(&call, &format!("{base}/data"));
    assert!(out.text.ends_with("---\n{\"a\": [1, 2]}\n"), "{}", out.text);
    let out = fetch(&call, &format!("{base}/nodata"));
    assert!(
        out.text.contains("Type: not given") && out.text.ends_with("---\nsniffed\n"),
        "{}",
        out.text
    );
}

#[test]
fn redirects_are_followed_hop_by_hop_and_a_refused_hop_is_named() {
    let site = origin(|r| match r.target.as_str() {
        "/a" => redirect("301 Moved Permanently", "/b"),
        "/b" => redirect("302 Found", "/c#frag"),
        "/c" => answer("200 OK", "text/plain", "", b"the end"),
        "/away" => redirect("302 Found", "http://evil.test/steal"),
        "/loop" => redirect("307 Temporary Redirect", "/loop"),
        "/ftp" => redirect("302 Found", "ftp://files.test/x"),
        _ => answer("404 Not Found", "text/plain", "", b""),
    });
    let proxy = egress(
        &[("site.test", site.addr)],
        &[(
            "evil.test",
            "evil.test is not allowed for this chat (preset registries)",
        )],
    );
    let call = Call::new(settings(proxy.addr));
    let base = format!("http://site.test:{}", site.addr.port());
    let out = fetch(&call, &format!("{base}/a"));
    assert!(out.ok, "{}", out.text);
    assert!(
        out.text.contains(&format!("URL: {base}/c\n")),
        "{}",
        out.text
    );
    assert!(
        out.text.contains(&format!("Redirected from: {base}/a\n")),
        "{}",
        out.text
    );
    // Each hop went through the proxy again.
    assert_eq!(proxy.heads.lock().unwrap().len(), 3);

    let out = fetch(&call, &format!("{base}/away"));
    assert!(!out.ok);
    assert_eq!(
        out.text,
        "egressd refused redirect 1 of 5 at most (to http://evil.test/steal): evil.test is not allowed \
         for this chat (preset registries). Tell the person if they need this site; they decide what this chat may reach."
    );

    let out = fetch(&call, &format!("{base}/loop"));
    assert!(
        !out.ok && out.text.contains("redirects more than 5 times"),
        "{}",
        out.text
    );
    let out = fetch(&call, &format!("{base}/ftp"));
    assert!(
        !out.ok
            && out
                .text
                .contains("redirect 1 of 5 at most leads to an address that is not fetched"),
        "{}",
        out.text
    );
    assert!(
        out.text.contains("only http:// and https://"),
        "{}",
        out.text
    );
}

#[test]
fn a_long_answer_is_cut_at_max_bytes_and_max_chars() {
    let site = origin(|r| match r.target.as_str() {
        "/big" => answer("200 OK", "text/plain", "", &b"0123456789".repeat(1000)),
        _ => answer("404 Not Found", "text/plain", "", b""),
    });
    let proxy = egress(&[("site.test", site.addr)], &[]);
    let call = Call::new(WebSettings {
        max_bytes: 4096,
        ..settings(proxy.addr)
    });
    let url = format!("http://site.test:{}/big", site.addr.port());
    let out = fetch(&call, &url);
    assert!(out.ok, "{}", out.text);
    assert!(
        out.text.contains("[cut: the answer is longer than 4,096 bytes (web_max_bytes); only its first 4,096 bytes were read]"),
        "{}",
        out.text
    );
    assert_eq!(
        out.text.split("---\n").nth(1).unwrap().trim_end().len(),
        4096
    );

    let out = call.run("web_fetch", json!({"url": url, "max_chars": 100}));
    assert!(
        out.text
            .contains("[cut at max_chars=100: 3,996 more characters not shown]"),
        "{}",
        out.text
    );
    assert_eq!(
        out.text.split("---\n").nth(1).unwrap().trim_end().len(),
        100
    );
}

#[test]
fn egressd_refusals_are_quoted_for_http_and_https() {
    let proxy = egress(&[], &[("blocked.test", "egress is off for this chat")]);
    let call = Call::new(settings(proxy.addr));
    for url in ["http://blocked.test/x", "https://blocked.test/x"] {
        let out = fetch(&call, url);
        assert!(!out.ok);
        assert!(
            out.text.starts_with(&format!(
                "egressd refused {url}: egress is off for this chat."
            )),
            "{}",
            out.text
        );
        assert!(
            out.summary.starts_with("web_fetch failed: egressd refused"),
            "{}",
            out.summary
        );
    }
    let heads = proxy.heads.lock().unwrap().clone();
    assert!(
        heads[1].starts_with("CONNECT blocked.test:443 HTTP/1.1"),
        "{}",
        heads[1]
    );
    let out = fetch(&call, "https://nowhere.test/");
    assert!(
        out.text
            .contains("could not be reached through egressd: nowhere.test does not resolve"),
        "{}",
        out.text
    );
}

#[test]
fn a_tunnel_carries_tls_to_the_origin() {
    // Not a TLS server: it answers plain HTTP at once, so the handshake
    // fails after the tunnel opened.
    let plain = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = plain.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in plain.incoming() {
            let Ok(mut s) = stream else { continue };
            let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
            let _ = s.shutdown(Shutdown::Write);
        }
    });
    let proxy = egress(&[("site.test", addr)], &[]);
    let call = Call::new(settings(proxy.addr));
    let out = fetch(&call, &format!("https://site.test:{}/", addr.port()));
    assert!(!out.ok);
    assert!(
        out.text.contains("the TLS handshake with site.test failed"),
        "{}",
        out.text
    );
    let heads = proxy.heads.lock().unwrap().clone();
    assert!(heads[0].starts_with(&format!("CONNECT site.test:{} HTTP/1.1", addr.port())));
}

#[test]
fn egressd_down_and_a_wrong_token_say_what_to_do() {
    let free = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let call = Call::new(settings(free));
    let out = fetch(&call, "https://example.org/");
    assert!(!out.ok);
    assert!(
        out.text.starts_with(&format!(
            "egressd is not running: nothing answers at {free}"
        )),
        "{}",
        out.text
    );
    assert!(out.text.contains("`tandem egress start`"), "{}", out.text);
    let out = call.run("web_search", json!({"query": "rust"}));
    assert!(
        out.text.starts_with("egressd is not running"),
        "{}",
        out.text
    );

    let proxy = egress(&[], &[]);
    let call = Call::with_key(settings(proxy.addr), "another-key");
    for url in ["http://example.org/", "https://example.org/"] {
        let out = fetch(&call, url);
        assert!(
            out.text.starts_with(
                "egressd did not accept this chat's token (407: the token is not this chat's)"
            ),
            "{}",
            out.text
        );
        let wrong = egress_token(&Secret::new("another-key".into()), CHAT);
        assert!(!out.text.contains(&wrong));
    }
}

#[test]
fn addresses_other_than_http_are_refused_at_once() {
    let call = Call::new(settings("127.0.0.1:9".parse().unwrap()));
    let out = fetch(&call, "ftp://example.org/a");
    assert_eq!(
        out.text,
        "web_fetch: ftp://example.org/a: only http:// and https:// addresses can be fetched, not ftp:"
    );
    assert!(fetch(&call, "file:///etc/passwd")
        .text
        .contains("only http:// and https://"));
    assert!(fetch(&call, "example.org")
        .text
        .contains("is not a web address"));
    assert!(fetch(&call, "http://u:p@example.org/")
        .text
        .contains("user name or password"));
    let out = call.run("web_fetch", json!({}));
    assert_eq!(
        out.text,
        "web_fetch: \"url\" is required (an http:// or https:// address)"
    );
}

#[test]
fn other_types_are_named_not_shown() {
    let site = origin(|r| {
        if r.target == "/page.gz" {
            return answer(
                "200 OK",
                "text/html",
                "Content-Encoding: gzip\r\n",
                b"\x1f\x8b\x08\x00",
            );
        }
        let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
        png.resize(5000, 7);
        answer("200 OK", "image/png", "", &png)
    });
    let proxy = egress(&[("site.test", site.addr)], &[]);
    let call = Call::new(settings(proxy.addr));
    let out = fetch(
        &call,
        &format!("http://site.test:{}/cat.png", site.addr.port()),
    );
    assert!(out.ok);
    assert!(
        out.text.contains("[not shown: the answer is image/png, 5,000 bytes; web_fetch reads text, HTML and JSON only]"),
        "{}",
        out.text
    );
    assert!(
        !out.text.contains("PNG") && !out.text.contains("---"),
        "{}",
        out.text
    );
    let out = fetch(
        &call,
        &format!("http://site.test:{}/page.gz", site.addr.port()),
    );
    assert!(
        out.text
            .contains("[not shown: the answer is text/html (compressed: gzip), 4 bytes;"),
        "{}",
        out.text
    );
}

#[test]
fn timeouts_are_bounded_and_say_so() {
    let site = origin(|r| match r.target.as_str() {
        "/silent" => Reply::Hang(Vec::new()),
        _ => Reply::Hang(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\nfirst part"
                .to_vec(),
        ),
    });
    let proxy = egress(&[("site.test", site.addr)], &[]);
    let call = Call::new(WebSettings {
        timeout: Duration::from_secs(1),
        card_wait: Duration::from_secs(1),
        ..settings(proxy.addr)
    });
    let began = Instant::now();
    let out = fetch(
        &call,
        &format!("http://site.test:{}/silent", site.addr.port()),
    );
    assert!(began.elapsed() < Duration::from_secs(10));
    assert!(!out.ok);
    assert!(
        out.text.contains(
            "got no answer within 2 s (web_timeout_s 1 + up to 1 s for egressd's consent card)"
        ),
        "{}",
        out.text
    );

    let out = fetch(
        &call,
        &format!("http://site.test:{}/stalls", site.addr.port()),
    );
    assert!(out.ok, "{}", out.text);
    assert!(
        out.text.contains(
            "[cut: the answer stopped coming; 10 bytes were read within 1 s (web_timeout_s)]"
        ),
        "{}",
        out.text
    );
    assert!(out.text.ends_with("---\nfirst part\n"), "{}", out.text);
}

/// What DuckDuckGo's HTML endpoint serves, trimmed: an ad, three results
/// whose links go through `/l/?uddg=`, one of them twice.
pub(crate) const DDG_PAGE: &str = r##"<!DOCTYPE html>
<html><head><title>rust async at DuckDuckGo</title></head>
<body class="body--html">
<div id="links" class="results">
  <div class="result results_links results_links_deep result--ad ">
<div class="links_main links_deep result__body">
  <h2 class="result__title"><a rel="nofollow" class="result__a" href="https://duckduckgo.com/y.js?ad_domain=ads.example&amp;ad_provider=bing">Buy Rust Now</a></h2>
  <a class="result__snippet" href="https://duckduckgo.com/y.js?ad_domain=ads.example">An ad.</a>
</div>
  </div>
  <div class="result results_links results_links_deep web-result ">
<div class="links_main links_deep result__body">
  <h2 class="result__title">
    <a rel="nofollow" class="result__a" href="//duckduckgo.com/l/?uddg=https%3A%2F%2Frust%2Dlang.github.io%2Fasync%2Dbook%2F&amp;rut=6f1a">Asynchronous Programming in <b>Rust</b></a>
  </h2>
  <div class="result__extras"><div class="result__extras__url">
    <a class="result__url" href="//duckduckgo.com/l/?uddg=https%3A%2F%2Frust%2Dlang.github.io%2Fasync%2Dbook%2F&amp;rut=6f1a">rust-lang.github.io/async-book</a>
  </div></div>
  <a class="result__snippet" href="//duckduckgo.com/l/?uddg=https%3A%2F%2Frust%2Dlang.github.io%2Fasync%2Dbook%2F&amp;rut=6f1a">This book aims to be a thorough guide to <b>asynchronous</b> programming in <b>Rust</b>, from beginner to advanced.</a>
</div>
  </div>
  <div class="result results_links results_links_deep web-result ">
<div class="links_main links_deep result__body">
  <h2 class="result__title"><a rel="nofollow" class="result__a" href="//duckduckgo.com/l/?uddg=https%3A%2F%2Ftokio.rs%2Ftokio%2Ftutorial%3Fa%3D1%26b%3D2&amp;rut=ab12">Tutorial | Tokio - An asynchronous Rust runtime</a></h2>
  <a class="result__snippet" href="//duckduckgo.com/l/?uddg=https%3A%2F%2Ftokio.rs%2Ftokio%2Ftutorial%3Fa%3D1%26b%3D2&amp;rut=ab12">Tokio is an asynchronous runtime for the <b>Rust</b> programming language.</a>
</div>
  </div>
  <div class="result results_links results_links_deep web-result ">
<div class="links_main links_deep result__body">
  <h2 class="result__title"><a rel="nofollow" class="result__a" href="//duckduckgo.com/l/?uddg=https%3A%2F%2Frust%2Dlang.github.io%2Fasync%2Dbook%2F&amp;rut=77">Async book (again)</a></h2>
</div>
  </div>
  <div class="result results_links results_links_deep web-result ">
<div class="links_main links_deep result__body">
  <h2 class="result__title"><a rel="nofollow" class="result__a" href="//duckduckgo.com/l/?uddg=https%3A%2F%2Fdocs.rs%2Ffutures%2F&amp;rut=cd">futures - Rust</a></h2>
  <a class="result__snippet" href="//duckduckgo.com/l/?uddg=https%3A%2F%2Fdocs.rs%2Ffutures%2F&amp;rut=cd">Abstractions for   asynchronous
    programming.</a>
</div>
  </div>
  <div class="nav-link"><form action="/html/" method="post"><input type="submit" class="btn btn--alt" value="Next" /></form></div>
</div>
</body></html>
"##;

#[test]
fn duckduckgo_results_are_parsed_and_their_links_decoded() {
    let hits = parse_duckduckgo(DDG_PAGE);
    assert_eq!(
        hits,
        vec![
            Hit {
                title: "Asynchronous Programming in Rust".into(),
                url: "https://rust-lang.github.io/async-book/".into(),
                snippet: "This book aims to be a thorough guide to asynchronous programming in Rust, from beginner to advanced.".into(),
                date: None,
                engine: None,
            },
            Hit {
                title: "Tutorial | Tokio - An asynchronous Rust runtime".into(),
                url: "https://tokio.rs/tokio/tutorial?a=1&b=2".into(),
                snippet: "Tokio is an asynchronous runtime for the Rust programming language.".into(),
                date: None,
                engine: None,
            },
            Hit {
                title: "futures - Rust".into(),
                url: "https://docs.rs/futures/".into(),
                snippet: "Abstractions for asynchronous programming.".into(),
                date: None,
                engine: None,
            },
        ]
    );
    assert_eq!(ddg_target("https://duckduckgo.com/y.js?ad_domain=x"), None);
    assert_eq!(
        ddg_target("//duckduckgo.com/l/?uddg=javascript%3Aalert(1)"),
        None
    );
    assert_eq!(
        ddg_target("https://example.org/x").as_deref(),
        Some("https://example.org/x")
    );
    assert!(parse_duckduckgo(
        "<html><body><div class=\"no-results\">No results.</div></body></html>"
    )
    .is_empty());
}

fn search_call(
    engine: SearchEngine,
    handler: impl Fn(&Req) -> Reply + Send + Sync + 'static,
) -> (Origin, Egress, Call) {
    let site = origin(handler);
    let proxy = egress(&[("search.test", site.addr)], &[]);
    let path = match engine {
        SearchEngine::DuckDuckGo => "/html/",
        SearchEngine::Searxng => "/search",
    };
    let call = Call::new(WebSettings {
        engine,
        search_url: format!("http://search.test:{}{path}", site.addr.port()),
        ..settings(proxy.addr)
    });
    (site, proxy, call)
}

#[test]
fn web_search_asks_duckduckgo_by_form_and_lists_results() {
    let (site, _proxy, call) = search_call(SearchEngine::DuckDuckGo, |r| {
        if r.method == "POST" && r.target == "/html/" {
            answer(
                "200 OK",
                "text/html; charset=UTF-8",
                "",
                DDG_PAGE.as_bytes(),
            )
        } else {
            answer("404 Not Found", "text/plain", "", b"")
        }
    });
    let out = call.run(
        "web_search",
        json!({"query": "rust async", "max_results": 2}),
    );
    assert!(out.ok, "{}", out.text);
    assert!(out.text.starts_with(UNTRUSTED));
    assert!(
        out.text
            .contains("Search results from DuckDuckGo for \"rust async\": 2 results\n"),
        "{}",
        out.text
    );
    assert!(
        out.text.contains("\n1. Asynchronous Programming in Rust\n   https://rust-lang.github.io/async-book/\n   This book aims"),
        "{}",
        out.text
    );
    assert!(out.text.contains("\n2. Tutorial | Tokio"), "{}", out.text);
    assert!(
        !out.text.contains("futures - Rust") && !out.text.contains("Buy Rust"),
        "{}",
        out.text
    );
    assert_eq!(out.summary, "web_search \"rust async\": 2 results");
    let seen = site.seen.lock().unwrap().clone();
    assert_eq!(String::from_utf8_lossy(&seen[0].body), "q=rust+async&b=");
    assert_eq!(
        seen[0].header("content-type").as_deref(),
        Some("application/x-www-form-urlencoded")
    );

    // At most what the settings give (8 by default).
    let out = call.run(
        "web_search",
        json!({"query": "rust async", "max_results": 50}),
    );
    assert!(out.text.contains(": 3 results\n"), "{}", out.text);
    let out = call.run("web_search", json!({"query": "  "}));
    assert_eq!(out.text, "web_search: \"query\" must not be empty");
}

#[test]
fn duckduckgo_refusals_say_what_to_do() {
    let (_site, _proxy, call) =
        search_call(
            SearchEngine::DuckDuckGo,
            |r| match String::from_utf8_lossy(&r.body).as_ref() {
                "q=bot&b=" => answer("202 Accepted", "text/html", "", b"<html>anomaly</html>"),
                "q=busy&b=" => answer(
                    "429 Too Many Requests",
                    "text/html",
                    "Retry-After: 30\r\n",
                    b"slow down",
                ),
                "q=forbidden&b=" => answer("403 Forbidden", "text/html", "", b"no"),
                _ => answer(
                    "200 OK",
                    "text/html",
                    "",
                    b"<html><body><div class=\"no-results\"></div></body></html>",
                ),
            },
        );
    let out = call.run("web_search", json!({"query": "bot"}));
    assert!(!out.ok);
    assert_eq!(
        out.text,
        "DuckDuckGo asked for a bot check (202) instead of answering; tell the person: set [chatd] \
         search_engine = \"searxng\" with your own SearXNG (search_url = its /search address)"
    );
    let out = call.run("web_search", json!({"query": "busy"}));
    assert_eq!(
        out.text,
        "DuckDuckGo rate-limited this search (429); try again after 30 s"
    );
    let out = call.run("web_search", json!({"query": "forbidden"}));
    assert!(
        out.text
            .starts_with("DuckDuckGo refused the search (403 Forbidden)"),
        "{}",
        out.text
    );
    let out = call.run("web_search", json!({"query": "nothing"}));
    assert!(
        out.ok && out.text.contains(": 0 results\nNo results."),
        "{}",
        out.text
    );
}

#[test]
fn searxng_answers_in_json_or_says_how_to_enable_it() {
    let (site, _proxy, call) = search_call(SearchEngine::Searxng, |r| {
        if r.target.starts_with("/search?q=rust+async&format=json") {
            let body = json!({"query": "rust async", "results": [
                {"title": "The async book", "url": "https://rust-lang.github.io/async-book/", "content": "A guide.",
                 "publishedDate": "2026-11-30T08:00:00", "engine": "duckduckgo"},
                {"title": "", "url": "https://tokio.rs/", "content": ""},
                {"title": "dup", "url": "https://tokio.rs/"},
            ]});
            answer(
                "200 OK",
                "application/json",
                "",
                body.to_string().as_bytes(),
            )
        } else if r.target.starts_with("/search?q=html") {
            answer("200 OK", "text/html", "", b"<html>the html page</html>")
        } else if r.target.starts_with("/search?q=limited") {
            answer("429 Too Many Requests", "text/plain", "", b"too many")
        } else {
            answer("403 Forbidden", "text/html", "", b"<html>Forbidden</html>")
        }
    });
    let out = call.run("web_search", json!({"query": "rust async"}));
    assert!(out.ok, "{}", out.text);
    assert!(
        out.text
            .contains("   (published 2026-11-30T08:00:00, from duckduckgo)\n"),
        "{}",
        out.text
    );
    assert!(
        out.text
            .contains("Search results from SearXNG for \"rust async\": 2 results\n"),
        "{}",
        out.text
    );
    assert!(
        out.text.contains(
            "\n1. The async book\n   https://rust-lang.github.io/async-book/\n   A guide.\n"
        ),
        "{}",
        out.text
    );
    assert!(
        out.text
            .contains("\n2. https://tokio.rs/\n   https://tokio.rs/\n"),
        "{}",
        out.text
    );
    assert_eq!(site.seen.lock().unwrap()[0].method, "GET");

    let out = call.run("web_search", json!({"query": "html"}));
    assert!(
        out.text
            .starts_with("SearXNG answered with something that is not JSON (text/html)"),
        "{}",
        out.text
    );
    let out = call.run("web_search", json!({"query": "off"}));
    assert!(
        out.text
            .starts_with("SearXNG refused the search (403): its JSON format is off"),
        "{}",
        out.text
    );
    let out = call.run("web_search", json!({"query": "limited"}));
    assert_eq!(
        out.text,
        "SearXNG rate-limited this search (429); wait a minute before searching again"
    );
}

#[test]
fn without_web_access_the_tools_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::open(dir.path()).unwrap();
    let ctx = ToolContext {
        workspace: &ws,
        call_id: "c",
        budget_chars: 10_000,
        web: None,
        documents: None,
    };
    let out = run(
        &Registry::chatd(),
        "web_fetch",
        r#"{"url":"https://example.org"}"#,
        &ctx,
    );
    assert!(
        !out.ok && out.text.contains("not available"),
        "{}",
        out.text
    );
    let access = WebAccess::new(
        settings("127.0.0.1:9".parse().unwrap()),
        CHAT,
        &Secret::new(KEY.into()),
    );
    assert!(!format!("{access:?}").contains(&token()));
}

#[test]
fn a_searxng_login_and_the_query_settings_go_to_it_and_the_login_is_never_shown() {
    use super::search_settings::{SafeSearch, TimeRange};
    const LOGIN: &str = "Basic c2VhcnhuZzpzM2NyZXQ=";
    let site = origin(|r| {
        let authed = r.header("x-searx-auth").as_deref() == Some(LOGIN);
        if !authed {
            return answer("401 Unauthorized", "text/plain", "", b"who are you");
        }
        let body = json!({"results": [
            {"title": "One", "url": "https://one.example/", "content": "1"},
            {"title": "Two", "url": "https://two.example/", "content": "2"},
            {"title": "Three", "url": "https://three.example/", "content": "3"},
        ]});
        answer(
            "200 OK",
            "application/json",
            "",
            body.to_string().as_bytes(),
        )
    });
    let proxy = egress(&[("search.test", site.addr)], &[]);
    let mut settings = WebSettings {
        engine: SearchEngine::Searxng,
        search_url: format!("http://search.test:{}/search", site.addr.port()),
        ..settings(proxy.addr)
    };
    settings.query = super::SearchQuery {
        max_results: 2,
        safe_search: SafeSearch::Strict,
        language: "de-CH".into(),
        time_range: Some(TimeRange::Week),
        auth: Some(("X-Searx-Auth".into(), Secret::new(LOGIN.into()))),
    };
    let call = Call::new(settings.clone());
    let out = call.run("web_search", json!({"query": "rust", "max_results": 9}));
    assert!(out.ok, "{}", out.text);
    // The box's max_results caps what the model asks for.
    assert!(out.text.contains(": 2 results\n"), "{}", out.text);
    assert!(!out.text.contains("c2VhcnhuZzpzM2NyZXQ"), "{}", out.text);
    let seen = site.seen.lock().unwrap().clone();
    assert!(
        seen[0]
            .target
            .contains("format=json&safesearch=2&language=de-CH&time_range=week"),
        "{}",
        seen[0].target
    );

    // A wrong login: the 401 says where to look, and shows no value.
    settings.query.auth = Some(("X-Searx-Auth".into(), Secret::new("Basic d3Jvbmc=".into())));
    let out = Call::new(settings).run("web_search", json!({"query": "rust"}));
    assert!(!out.ok);
    assert!(out.text.contains("refused the login (401)"), "{}", out.text);
    assert!(!out.text.contains("d3Jvbmc"), "{}", out.text);
}
