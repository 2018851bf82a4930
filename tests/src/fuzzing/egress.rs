//! Targets for egressd and the address policy: an address in every
//! spelling, a request head read as the proxy reads it, and a URL's host
//! and port as the web tools and the proxy take them, each against a
//! reference written apart from the product code.

use arbitrary::{Result as Built, Unstructured};

use super::text_of;
use super::Verdict;

/// An authority as a tunnel or a URL names it, in every spelling: whenever
/// it reads as an address that the reference below calls not public, the
/// egress policy refuses that address (no spelling slips a private, local
/// or metadata address past it).
pub(super) fn egress_address(u: &mut Unstructured) -> Verdict {
    use tandem_shared::netpolicy::{classify, split_authority, Host};
    const PIECES: &[&str] = &[
        "127",
        "0",
        "1",
        "10",
        "169",
        "254",
        "192",
        "168",
        "172",
        "16",
        "100",
        "64",
        "255",
        ".",
        "0x7f",
        "0x",
        "0177",
        "00",
        "2130706433",
        "4294967295",
        "[",
        "]",
        "::",
        ":",
        "ffff",
        "::1",
        "fe80",
        "fc00",
        "fd00",
        "%2e",
        "%31",
        "localhost",
        "metadata.google.internal",
        "xn--",
        ":80",
        ":443",
        "a",
        "-",
        "%25",
        "::ffff:",
        "0:0:0:0:0:ffff:7f00:1",
    ];
    let text = if u.ratio(1, 2).unwrap_or(true) {
        text_of(u, PIECES, 16)
    } else {
        let Ok(text) = spelled_address(u) else {
            return Ok(());
        };
        text
    };
    let Ok((Host::Ip(ip), _)) = split_authority(&text, 443) else {
        return Ok(());
    };
    if !public_by_reference(ip) && classify(ip).is_none() {
        return Err(format!(
            "{text:?} reads as {ip}, which is not public, yet it is allowed"
        ));
    }
    Ok(())
}

/// A v4 address near a class boundary, spelled one of the ways a URL host
/// may spell it, sometimes inside an IPv6 form.
fn spelled_address(u: &mut Unstructured) -> Built<String> {
    const NEAR: &[u32] = &[
        0x7f00_0001,
        0x0a00_0000,
        0xa9fe_a9fe,
        0xc0a8_0001,
        0xac10_0000,
        0xac1f_ffff,
        0x6440_0000,
        0x647f_ffff,
        0x0000_0000,
        0xffff_ffff,
        0xe000_0001,
        0x0808_0808,
        0x01_02_03_04,
    ];
    let v4 = if u.ratio(1, 2)? {
        u.choose(NEAR)?
            .wrapping_add(u.int_in_range(0..=3)?)
            .wrapping_sub(1)
    } else {
        u.arbitrary::<u32>()?
    };
    let b = v4.to_be_bytes();
    Ok(match u.int_in_range(0..=6)? {
        0 => format!("{}.{}.{}.{}", b[0], b[1], b[2], b[3]),
        1 => v4.to_string(),
        2 => format!("0x{v4:x}"),
        3 => format!("0{:o}.0{:o}.0{:o}.0{:o}", b[0], b[1], b[2], b[3]),
        4 => format!("{}.{}", b[0], v4 & 0x00ff_ffff),
        5 => format!("[::ffff:{}.{}.{}.{}]", b[0], b[1], b[2], b[3]),
        _ => format!("[::ffff:{:x}:{:x}]", v4 >> 16, v4 & 0xffff),
    })
}

/// The slow reference: what no chat may reach, from the standard library's
/// own tests of an address, written apart from the policy's tables.
fn public_by_reference(ip: std::net::IpAddr) -> bool {
    use std::net::IpAddr;
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || a == 0
                || (a == 100 && (64..128).contains(&b)))
        }
        IpAddr::V6(v6) => {
            if let Some(inner) = v6.to_ipv4_mapped() {
                return public_by_reference(IpAddr::V4(inner));
            }
            let first = v6.segments()[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || first & 0xfe00 == 0xfc00
                || first & 0xffc0 == 0xfe80)
        }
    }
}

/// A reader that hands out its bytes in the chunks given, as a socket might.
struct Chunks(std::collections::VecDeque<Vec<u8>>);

impl tokio::io::AsyncRead for Chunks {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if let Some(mut chunk) = self.0.pop_front() {
            let n = chunk.len().min(buf.remaining());
            buf.put_slice(&chunk[..n]);
            if n < chunk.len() {
                self.0.push_front(chunk.split_off(n));
            }
        }
        std::task::Poll::Ready(Ok(()))
    }
}

/// egressd's reading of a head that came in these chunks: the head and
/// what followed it, then what the head asks for.
fn proxy_read(chunks: Vec<&[u8]>, max: usize) -> Result<(Vec<u8>, Vec<u8>), String> {
    use futures_util::FutureExt;
    let mut reader = Chunks(chunks.into_iter().map(<[u8]>::to_vec).collect());
    egressd::proxy::read_head(&mut reader, max)
        .now_or_never()
        .unwrap_or_else(|| Err("read_head waited on a reader that never waits".into()))
}

/// A request head as the reference reads it: strict HTTP/1.1, `\r\n` line
/// ends, one space between the request line's three parts, headers
/// `name: value` with a token name. `None` for anything else.
struct RefHead {
    method: String,
    target: String,
    /// (name, value trimmed), in order.
    headers: Vec<(String, String)>,
}

fn reference_head(head: &[u8]) -> Option<RefHead> {
    let text = std::str::from_utf8(head).ok()?;
    let text = text.strip_suffix("\r\n\r\n")?;
    let mut lines = text.split("\r\n");
    let first: Vec<&str> = lines.next()?.split(' ').collect();
    let [method, target, version] = first.as_slice() else {
        return None;
    };
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    };
    if !token(method) || target.is_empty() || !matches!(*version, "HTTP/1.1" | "HTTP/1.0") {
        return None;
    }
    if !target.bytes().all(|b| b.is_ascii_graphic()) {
        return None;
    }
    let mut headers = Vec::new();
    for line in lines {
        let (name, value) = line.split_once(':')?;
        if !token(name)
            || !value
                .bytes()
                .all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
        {
            return None;
        }
        headers.push((name.to_string(), value.trim().to_string()));
    }
    Some(RefHead {
        method: (*method).to_string(),
        target: (*target).to_string(),
        headers,
    })
}

/// A host and port as the reference reads an authority: the port after the
/// last ':' (outside brackets), digits for 1..=65535, else `default`; the
/// host as the url crate reads a URL's, as `Host` prints it.
fn reference_authority(authority: &str, default: u16) -> Option<(String, u16)> {
    if authority.is_empty() || authority.contains(['@', '/', '?', '#', '\\']) {
        return None;
    }
    let (host, port) = match authority.rfind(':') {
        Some(i) if !authority[i..].contains(']') => (&authority[..i], Some(&authority[i + 1..])),
        _ => (authority, None),
    };
    let port = match port {
        None => default,
        Some(digits) if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
            match digits.parse::<u32>() {
                Ok(p @ 1..=65535) => p as u16,
                _ => return None,
            }
        }
        Some(_) => return None,
    };
    let url = url::Url::parse(&format!("http://{host}/")).ok()?;
    if url.port().is_some() {
        return None;
    }
    let host = match url.host()? {
        url::Host::Domain(d) => d.trim_end_matches('.').to_ascii_lowercase(),
        url::Host::Ipv4(v4) => v4.to_string(),
        url::Host::Ipv6(v6) => std::net::Ipv6Addr::to_string(&v6),
    };
    Some((host, port))
}

/// A request head as a chat's command or web tool might send egressd's
/// proxy, cut into chunks and read under a size limit: reading and parsing
/// never panic; a head over the limit, over 100 headers or without its
/// end is refused, never cut short; a head taken is what the bytes said
/// (the reference reads the same method, target host and port), and a
/// `Host` header that names another host or port is caught.
pub(super) fn proxy_head(u: &mut Unstructured) -> Verdict {
    let Ok((bytes, max)) = head_bytes(u) else {
        return Ok(());
    };
    let chunks = super::cut(u, &bytes);
    let say = |what: String| {
        format!(
            "head {:?} (limit {max}): {what}",
            String::from_utf8_lossy(&bytes)
        )
    };
    let end = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| at + 4);
    let head = match (proxy_read(chunks, max), end) {
        (Err(_), None) => return Ok(()),
        (Err(_), Some(end)) if end > max => return Ok(()),
        (Err(why), Some(_)) => {
            return Err(say(format!(
                "a whole head within the limit is refused: {why}"
            )))
        }
        (Ok(_), None) => return Err(say("a head without its end is taken".into())),
        (Ok(_), Some(end)) if end > max => {
            return Err(say(format!("a head of {end} bytes is taken")))
        }
        (Ok((head, rest)), Some(end)) => {
            // What came after the head is what was read past it so far.
            if head != bytes[..end] || !bytes[end..].starts_with(&rest) {
                return Err(say(format!(
                    "read as a head of {} bytes and {} after it, not {end} and what follows",
                    head.len(),
                    rest.len()
                )));
            }
            head
        }
    };
    let parsed = egressd::proxy::parse(&head);
    let Some(reference) = reference_head(&head) else {
        return Ok(());
    };
    let Ok(ask) = parsed else {
        return Ok(());
    };
    if reference.headers.len() > 100 {
        return Err(say(format!(
            "a head of {} headers is taken (100 at most)",
            reference.headers.len()
        )));
    }
    let connect = reference.method == "CONNECT";
    if ask.connect != connect {
        return Err(say(format!("read as CONNECT: {}", ask.connect)));
    }
    let (authority, path, default) = if connect {
        (reference.target.as_str(), "", 443)
    } else {
        let Some(after) = reference.target.strip_prefix("http://") else {
            return Err(say("a target other than http:// is taken".into()));
        };
        match after.find('/') {
            Some(i) => (&after[..i], &after[i..], 80),
            None => (after, "/", 80),
        }
    };
    let got = (ask.host_text.clone(), ask.port);
    match reference_authority(authority, default) {
        Some(want) if want != got => {
            return Err(say(format!(
                "read as {got:?}, the reference reads {want:?}"
            )))
        }
        Some(_) => {}
        None => {
            return Err(say(format!(
                "the target's authority {authority:?} is taken as {got:?}; the reference refuses it"
            )))
        }
    }
    if connect {
        return Ok(());
    }
    let forward = String::from_utf8_lossy(&ask.forward).into_owned();
    let first = format!("{} {path} HTTP/1.1\r\n", reference.method);
    if !forward.starts_with(&first) {
        return Err(say(format!(
            "passed on as {forward:?}, not starting {first:?}"
        )));
    }
    let hosts: Vec<&str> = reference
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("host"))
        .map(|(_, v)| v.as_str())
        .collect();
    let agrees = |h: &str| reference_authority(h, 80).is_some_and(|a| a == got);
    let caught = ask.mismatch.is_some();
    match hosts.as_slice() {
        [] if !forward.contains(&format!("\r\nHost: {authority}\r\n")) => {
            return Err(say(format!("passed on without a Host: {forward:?}")))
        }
        [one] if !agrees(one) && !caught => {
            return Err(say(format!(
                "Host {one:?} names another host than {got:?}, not caught"
            )))
        }
        [_, _, ..] if !caught => return Err(say("several Host headers, not caught".into())),
        _ => {}
    }
    let lower = forward.to_ascii_lowercase();
    if lower.contains("\r\nproxy-") || !forward.ends_with("Connection: close\r\n\r\n") {
        return Err(say(format!("passed on as {forward:?}")));
    }
    Ok(())
}

/// A request head built mostly from what egressd cares about, and the size
/// limit to read it under.
fn head_bytes(u: &mut Unstructured) -> Built<(Vec<u8>, usize)> {
    const METHODS: &[&str] = &[
        "GET", "GET", "CONNECT", "CONNECT", "POST", "HEAD", "get", "G ET", "",
    ];
    const HOSTS: &[&str] = &[
        "example.com",
        "EXAMPLE.com.",
        "127.0.0.1",
        "0x7f.1",
        "[::1]",
        "[::ffff:10.0.0.1]",
        "%31%30.0.0.1",
        "a..b",
        "",
        "xn--nxasmq6b.example",
        "bücher.example",
        "user@example.com",
        "example.com\\x",
    ];
    const PORTS: &[&str] = &[
        "", ":80", ":443", ":8080", ":0", ":65536", ":", ":+80", ":0080",
    ];
    const HEADERS: &[&str] = &[
        "Host: example.com",
        "Host: example.com:80",
        "Host: EXAMPLE.COM",
        "Host: 127.0.0.1",
        "Host: example.com:8080",
        "Host:",
        "host: [::1]",
        "Content-Length: 5",
        "Content-Length: +5",
        "content-length: 18446744073709551616",
        "Transfer-Encoding: chunked",
        "Proxy-Authorization: Basic eA==",
        "Proxy-Connection: keep-alive",
        "Connection: keep-alive",
        "Keep-Alive: 5",
        "User-Agent: é",
        "X: y",
        "Bad Name: x",
        " folded",
        "NoColon",
    ];
    let method = *u.choose(METHODS)?;
    let host = *u.choose(HOSTS)?;
    let port = *u.choose(PORTS)?;
    let target = match u.int_in_range(0..=5)? {
        0 | 1 if method != "CONNECT" => format!(
            "http://{host}{port}{}",
            u.choose(&["/", "/a?b=1", "", "/ /"])?
        ),
        2 => format!("https://{host}{port}/"),
        3 => "/path".to_string(),
        _ => format!("{host}{port}"),
    };
    let version = *u.choose(&["HTTP/1.1", "HTTP/1.1", "HTTP/1.0", "HTTP/2", ""])?;
    let mut head = format!("{method} {target} {version}\r\n");
    let many = u.ratio(1, 20)?;
    let count = if many {
        u.int_in_range(90..=110)?
    } else {
        u.int_in_range(0..=6)?
    };
    for _ in 0..count {
        head.push_str(u.choose(HEADERS)?);
        head.push_str(u.choose(&["\r\n", "\r\n", "\r\n", "\n"])?);
    }
    if u.ratio(1, 10)? {
        head.push_str(&format!(
            "X-Long: {}\r\n",
            "v".repeat(u.int_in_range(0..=2000)?)
        ));
    }
    if u.ratio(9, 10)? {
        head.push_str("\r\n");
    }
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(
        &text_of(u, &["body", "\r\n", "\r\n\r\n", "GET / HTTP/1.1"], 4).into_bytes(),
    );
    let max = *u.choose(&[64usize, 256, 1024, 4096, 64 * 1024])?;
    Ok((bytes, max))
}

/// A URL a chat asks for, in every spelling: the url crate's reading is the
/// reference. Through the web tools (an https URL's CONNECT, an http URL's
/// absolute form, as chatd's client sends them) and as a command's own
/// client sends it, egressd never takes a URL whose host the reference
/// reads as a non-public address for another host, nor for a public one;
/// where egressd takes a URL the web tools send, its host and its port
/// (the scheme's default when none is given) are the reference's.
pub(super) fn egress_url(u: &mut Unstructured) -> Verdict {
    let Ok(text) = url_text(u) else {
        return Ok(());
    };
    let say = |what: String| format!("URL {text:?}: {what}");
    let reference = url::Url::parse(&text).ok();
    // The web tools: what chatd's client would send egressd for this URL.
    if let Some(url) = reference.as_ref().filter(|url| {
        matches!(url.scheme(), "http" | "https")
            && url.host_str().is_some_and(|h| !h.is_empty())
            && url.username().is_empty()
            && url.password().is_none()
    }) {
        let host = url.host_str().unwrap_or_default();
        let port = url.port_or_known_default().unwrap_or(80);
        let head = if url.scheme() == "https" {
            format!("CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n")
        } else {
            let authority = match url.port() {
                Some(p) => format!("{host}:{p}"),
                None => host.to_string(),
            };
            let mut absolute = url.clone();
            absolute.set_fragment(None);
            format!("GET {absolute} HTTP/1.1\r\nHost: {authority}\r\n\r\n")
        };
        if let Ok(ask) = egressd::proxy::parse(head.as_bytes()) {
            if ask.mismatch.is_none() {
                let want = reference_host(url).map(|h| (h, port));
                let got = (ask.host_text.clone(), ask.port);
                if want.as_ref() != Some(&got) {
                    return Err(say(format!(
                        "sent as {head:?}, egressd reads {got:?}, the reference {want:?}"
                    )));
                }
            }
            check_refused(url, &ask).map_err(&say)?;
        }
    }
    // A command's own client, sending the text as it is.
    if !text.contains([' ', '\r', '\n']) {
        let head = format!("GET {text} HTTP/1.1\r\n\r\n");
        if let (Ok(ask), Some(url)) = (egressd::proxy::parse(head.as_bytes()), &reference) {
            check_refused(url, &ask).map_err(&say)?;
        }
    }
    Ok(())
}

/// The reference's host as egressd prints it.
fn reference_host(url: &url::Url) -> Option<String> {
    Some(match url.host()? {
        url::Host::Domain(d) => d.trim_end_matches('.').to_string(),
        url::Host::Ipv4(v4) => v4.to_string(),
        url::Host::Ipv6(v6) => v6.to_string(),
    })
}

/// Whether egressd's reading of a head for `url` lets it past the address
/// policy when the reference reads the host as a non-public address.
fn check_refused(url: &url::Url, ask: &egressd::proxy::Ask) -> Verdict {
    use std::net::IpAddr;
    use tandem_shared::netpolicy::{classify, Host};
    let ip = match url.host() {
        Some(url::Host::Ipv4(v4)) => IpAddr::V4(v4),
        Some(url::Host::Ipv6(v6)) => IpAddr::V6(v6),
        _ => return Ok(()),
    };
    if public_by_reference(ip) || ask.mismatch.is_some() {
        return Ok(());
    }
    match &ask.host {
        Host::Ip(got) if classify(*got).is_some() => Ok(()),
        other => Err(format!(
            "the reference reads {ip}, not public; egressd reads {other:?} and lets it by"
        )),
    }
}

/// A URL: mostly a scheme, maybe a user, a host in one of its spellings,
/// maybe a port, a path; now and then characters URLs treat specially.
fn url_text(u: &mut Unstructured) -> Built<String> {
    const NAMES: &[&str] = &[
        "example.com",
        "EXAMPLE.COM.",
        "localhost",
        "metadata.google.internal",
        "[::1]",
        "[::]",
        "[fe80::1]",
        "[::ffff:169.254.169.254]",
        "%31%32%37.0.0.1",
        "127.0.0.1%2e",
        "xn--nxasmq6b.example",
        "bücher.example",
        "１２７.０.０.１",
        "a..b",
    ];
    let scheme = *u.choose(&[
        "http://", "https://", "HTTP://", "HtTpS://", "ftp://", "http:", "http:/", "//", "",
    ])?;
    let user = *u.choose(&["", "", "", "u@", "u:p@", "@", "a@b@"])?;
    let host = if u.ratio(1, 2)? {
        spelled_address(u)?
    } else {
        (*u.choose(NAMES)?).to_string()
    };
    let port = *u.choose(&[
        "", "", ":80", ":443", ":8080", ":0", ":65535", ":65536", ":", ":08",
    ])?;
    let path = *u.choose(&[
        "", "/", "/a/b", "?q=1", "#f", "/a?b#c", "\\x", "/..", "\t/", " /",
    ])?;
    let mut text = format!("{scheme}{user}{host}{port}{path}");
    if u.ratio(1, 8)? {
        text = text_of(
            u,
            &[&text, "\t", "\n", "\\", "@", "#", "?", ":", "[", "]", "%"],
            4,
        );
    }
    Ok(text)
}
