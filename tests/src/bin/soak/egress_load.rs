//! What the egressd part sends through the chats' proxy sockets, and the
//! origins that count what reaches them: tunnels to public origins with
//! their data echoed and checked, SSRF attempts in every spelling of the
//! matrix (each aimed at an origin the lab serves, so a leak is counted by
//! the origin, not by egressd's word), and hosts outside the preset that
//! ask a card.

use super::*;

use tokio::net::UnixStream;

/// How long one exchange on a proxy socket may take.
pub(crate) const EXCHANGE: Duration = Duration::from_secs(15);

/// What an origin saw from one of its addresses.
#[derive(Default, Clone, Debug)]
pub(crate) struct Seen {
    /// Connections accepted.
    pub(crate) accepted: u64,
    /// Bytes read.
    pub(crate) bytes: u64,
    /// The first line of each connection that sent one (the first 10,000).
    pub(crate) lines: Vec<String>,
}

/// What every origin saw, by its address.
pub(crate) type Book = Arc<Mutex<BTreeMap<String, Seen>>>;

/// An origin that counts each connection under the address it reached,
/// keeps its first line and echoes every byte back.
pub(crate) fn serve_counting(listener: tokio::net::TcpListener, book: Book) {
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let me = s
                .local_addr()
                .map(|a| a.ip().to_canonical().to_string())
                .unwrap_or_default();
            lock(&book).entry(me.clone()).or_default().accepted += 1;
            let book = book.clone();
            tokio::spawn(async move {
                let mut first = Vec::new();
                let mut line_kept = false;
                let mut buf = vec![0u8; 16 * 1024];
                loop {
                    let n = match tokio::time::timeout(EXCHANGE, s.read(&mut buf)).await {
                        Ok(Ok(n)) if n > 0 => n,
                        _ => break,
                    };
                    if !line_kept {
                        first.extend_from_slice(&buf[..n.min(256)]);
                        if let Some(end) = first.iter().position(|b| *b == b'\n') {
                            let line = String::from_utf8_lossy(&first[..end]).trim().to_string();
                            let mut book = lock(&book);
                            let seen = book.entry(me.clone()).or_default();
                            if seen.lines.len() < 10_000 {
                                seen.lines.push(line);
                            }
                            line_kept = true;
                        }
                    }
                    lock(&book).entry(me.clone()).or_default().bytes += n as u64;
                    if s.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
}

/// One spelling of a refused host: its class and the origin it means
/// (`box` for any address of egressd's own namespace).
pub(crate) struct Spelling {
    pub(crate) host: &'static str,
    pub(crate) class: &'static str,
    pub(crate) aim: &'static str,
}

const fn sp(host: &'static str, class: &'static str, aim: &'static str) -> Spelling {
    Spelling { host, class, aim }
}

/// The refused origins outside egressd's namespace: served in the origins'
/// namespace (on its `lo`), reached from the box by a default route.
pub(crate) const REFUSED_ORIGINS: &[&str] = &[
    "10.0.0.1",
    "10.0.0.5",
    "172.16.0.1",
    "192.168.1.1",
    "100.64.0.1",
    "169.254.169.254",
    "fc00::1",
    "fd00:ec2::254",
];

/// Names the lab's `/etc/hosts` gives refused addresses (and the card hosts).
pub(crate) const HOSTS: &str = "127.0.0.1 loop.test\n10.0.0.1 private.test\n\
    169.254.169.254 meta.test\n100.64.0.1 cgnat.test\nfc00::1 ula.test\n";

/// Every spelling the egress tests' matrix uses, and the forms of one
/// number, hex, octal and short IPv4 for each private class.
pub(crate) const SPELLINGS: &[Spelling] = &[
    sp("127.0.0.1", "loopback", "box"),
    sp("2130706433", "IPv4 as one number", "box"),
    sp("0177.0.0.1", "IPv4 octal", "box"),
    sp("0x7f.0.0.1", "IPv4 hex", "box"),
    sp("0X7F.0.0.1", "IPv4 hex", "box"),
    sp("0x7f000001", "IPv4 hex", "box"),
    sp("017700000001", "IPv4 octal", "box"),
    sp("127.1", "IPv4 short", "box"),
    sp("0x7f.1", "IPv4 short", "box"),
    sp("127.0.0.1.", "loopback", "box"),
    sp("127.0.0.2", "loopback", "box"),
    sp("localhost", "loopback", "box"),
    sp("[::1]", "loopback", "box"),
    sp("[0:0:0:0:0:0:0:1]", "loopback", "box"),
    sp("[::]", "unspecified", "box"),
    sp("0.0.0.0", "unspecified", "box"),
    sp("0", "unspecified", "box"),
    sp("[::ffff:127.0.0.1]", "IPv4-mapped IPv6", "box"),
    sp("[::ffff:7f00:1]", "IPv4-mapped IPv6", "box"),
    sp("[::ffff:10.0.0.1]", "IPv4-mapped IPv6", "10.0.0.1"),
    sp("[::ffff:a00:1]", "IPv4-mapped IPv6", "10.0.0.1"),
    sp(
        "[::ffff:169.254.169.254]",
        "IPv4-mapped IPv6",
        "169.254.169.254",
    ),
    sp("[::ffff:100.64.0.1]", "IPv4-mapped IPv6", "100.64.0.1"),
    sp("[64:ff9b::a00:1]", "IPv4 in IPv6 (NAT64, 6to4)", "none"),
    sp("[2002:7f00:1::]", "IPv4 in IPv6 (NAT64, 6to4)", "none"),
    sp("10.0.0.1", "private", "10.0.0.1"),
    sp("167772161", "IPv4 as one number", "10.0.0.1"),
    sp("0xa000001", "IPv4 hex", "10.0.0.1"),
    sp("012.0.0.1", "IPv4 octal", "10.0.0.1"),
    sp("10.1", "IPv4 short", "10.0.0.1"),
    sp("172.16.0.1", "private", "172.16.0.1"),
    sp("192.168.1.1", "private", "192.168.1.1"),
    sp("3232235777", "IPv4 as one number", "192.168.1.1"),
    sp("0xc0.0xa8.1.1", "IPv4 hex", "192.168.1.1"),
    sp("100.64.0.1", "CGNAT", "100.64.0.1"),
    sp("1681915905", "IPv4 as one number", "100.64.0.1"),
    sp("100.64.1", "IPv4 short", "100.64.0.1"),
    sp("169.254.169.254", "metadata", "169.254.169.254"),
    sp("2852039166", "IPv4 as one number", "169.254.169.254"),
    sp("0xa9fea9fe", "IPv4 hex", "169.254.169.254"),
    sp("0251.0376.0251.0376", "IPv4 octal", "169.254.169.254"),
    sp("169.254.43518", "IPv4 short", "169.254.169.254"),
    sp("metadata.google.internal", "metadata", "none"),
    sp("[fd00:ec2::254]", "metadata", "fd00:ec2::254"),
    sp("[fe80::1]", "link-local", "none"),
    sp("[fc00::1]", "unique-local", "fc00::1"),
    sp("loop.test", "name of a refused address", "box"),
    sp("private.test", "name of a refused address", "10.0.0.1"),
    sp("meta.test", "name of a refused address", "169.254.169.254"),
    sp("cgnat.test", "name of a refused address", "100.64.0.1"),
    sp("ula.test", "name of a refused address", "fc00::1"),
    sp(
        "mixed.test",
        "name of a public and a private address",
        "10.0.0.5",
    ),
];

/// An exchange's end: the status of the proxy's answer (0: none), its
/// first line.
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) line: String,
    /// Whether the socket could be reached at all (egressd up).
    pub(crate) connected: bool,
}

impl Answer {
    fn unreachable() -> Answer {
        Answer {
            status: 0,
            line: String::new(),
            connected: false,
        }
    }
}

/// Reads a proxy's answer head (to the blank line, or to the end).
async fn read_head(s: &mut UnixStream, bound: Duration) -> (u16, String) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    let read = async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
            match s.read(&mut buf).await {
                Ok(n) if n > 0 => head.extend_from_slice(&buf[..n]),
                _ => break,
            }
        }
    };
    let _ = tokio::time::timeout(bound, read).await;
    let text = String::from_utf8_lossy(&head).to_string();
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let line = text.lines().next().unwrap_or("").to_string();
    (status, line)
}

/// The chat's socket, or `None` while egressd is down.
async fn open(socket: &Path) -> Option<UnixStream> {
    tokio::time::timeout(Duration::from_secs(5), UnixStream::connect(socket))
        .await
        .ok()?
        .ok()
}

/// One SSRF attempt of `chat` with spelling `index`, by CONNECT or plain
/// HTTP. Whatever egressd answers, the attempt's mark goes on the wire
/// after it, so an origin that is reached knows the chat and the spelling.
pub(crate) async fn ssrf_attempt(socket: &Path, chat: &str, index: usize, connect: bool) -> Answer {
    let host = SPELLINGS[index].host;
    let Some(mut s) = open(socket).await else {
        return Answer::unreachable();
    };
    let request = if connect {
        format!("CONNECT {host}:80 HTTP/1.1\r\nHost: {host}:80\r\n\r\n")
    } else {
        format!("GET http://{host}/ssrf/{chat}/{index} HTTP/1.1\r\nHost: {host}\r\n\r\n")
    };
    if s.write_all(request.as_bytes()).await.is_err() {
        return Answer::unreachable();
    }
    let (status, line) = read_head(&mut s, EXCHANGE).await;
    if connect {
        let _ = s
            .write_all(format!("ssrf {chat} {index}\n").as_bytes())
            .await;
    }
    Answer {
        status,
        line,
        connected: true,
    }
}

/// Where a tunnel ended.
pub(crate) enum Tunnel {
    /// Opened, and every chunk came back as sent: the bytes echoed.
    Whole(u64),
    /// The socket could not be reached (egressd down).
    Unreachable,
    /// Answered, but not opened.
    Refused(Answer),
    /// Opened, then cut or garbled.
    Broken { opened: bool, why: String },
}

/// A tunnel of `chat` to `target`: random chunks written and read back.
pub(crate) async fn tunnel(socket: &Path, target: &str, rng: &mut StdRng) -> Tunnel {
    let Some(mut s) = open(socket).await else {
        return Tunnel::Unreachable;
    };
    let connect = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    if s.write_all(connect.as_bytes()).await.is_err() {
        return Tunnel::Unreachable;
    }
    let (status, line) = read_head(&mut s, EXCHANGE).await;
    if status != 200 {
        return Tunnel::Refused(Answer {
            status,
            line,
            connected: true,
        });
    }
    let mut echoed = 0u64;
    for chunk in 0..rng.random_range(2..9usize) {
        // Paced, so a tunnel lives a while (a kill cuts some mid-way).
        if chunk > 0 {
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..80))).await;
        }
        let len = rng.random_range(1..8 * 1024usize);
        let sent: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        if let Err(e) = s.write_all(&sent).await {
            return Tunnel::Broken {
                opened: true,
                why: format!("chunk {chunk} ({len} bytes) not written: {e}"),
            };
        }
        let mut back = vec![0u8; len];
        match tokio::time::timeout(EXCHANGE, s.read_exact(&mut back)).await {
            Ok(Ok(_)) if back == sent => echoed += len as u64,
            Ok(Ok(_)) => {
                let at = back.iter().zip(&sent).position(|(a, b)| a != b);
                return Tunnel::Broken {
                    opened: true,
                    why: format!("chunk {chunk} ({len} bytes) came back changed at byte {at:?}"),
                };
            }
            Ok(Err(e)) => {
                return Tunnel::Broken {
                    opened: true,
                    why: format!("chunk {chunk} ({len} bytes) cut: {e}"),
                }
            }
            Err(_) => {
                return Tunnel::Broken {
                    opened: true,
                    why: format!("chunk {chunk} ({len} bytes) not back in {EXCHANGE:?}"),
                }
            }
        }
    }
    Tunnel::Whole(echoed)
}

/// A command reaching for a card host: the proxy's answer (it waits while
/// the card is open) and, when it opened, whether the mark came back.
pub(crate) async fn card_attempt(socket: PathBuf, name: String, mark: String) -> (Answer, bool) {
    let Some(mut s) = open(&socket).await else {
        return (Answer::unreachable(), false);
    };
    let connect = format!("CONNECT {name}:443 HTTP/1.1\r\nHost: {name}:443\r\n\r\n");
    if s.write_all(connect.as_bytes()).await.is_err() {
        return (Answer::unreachable(), false);
    }
    // The card waits up to card_wait_s; the answer comes after it.
    let (status, line) = read_head(&mut s, EXCHANGE + CARD_WAIT).await;
    // Sent whatever the answer: a denied host must not get it.
    let line_out = format!("{mark}\n");
    let written = s.write_all(line_out.as_bytes()).await.is_ok();
    let mut echoed = false;
    if status == 200 && written {
        let mut back = vec![0u8; line_out.len()];
        echoed = matches!(
            tokio::time::timeout(EXCHANGE, s.read_exact(&mut back)).await,
            Ok(Ok(_)) if back == line_out.as_bytes()
        );
    }
    (
        Answer {
            status,
            line,
            connected: true,
        },
        echoed,
    )
}

/// egressd's `card_wait_s` in the soak: a card nobody answers ends in this.
pub(crate) const CARD_WAIT: Duration = Duration::from_secs(10);

/// The chat and spelling an SSRF mark names (`ssrf CHAT N`, or the
/// request line `GET /ssrf/CHAT/N HTTP/1.1`).
pub(crate) fn parse_mark(line: &str) -> Option<(String, usize)> {
    if let Some(rest) = line.strip_prefix("ssrf ") {
        let (chat, n) = rest.split_once(' ')?;
        return Some((chat.to_string(), n.trim().parse().ok()?));
    }
    let path = line.split_whitespace().nth(1)?;
    let rest = path.strip_prefix("/ssrf/")?;
    let (chat, n) = rest.split_once('/')?;
    Some((chat.to_string(), n.parse().ok()?))
}

/// Rules a chat keeps from its cards: past this, the oldest go.
pub(crate) const CARD_RULES_KEPT: usize = 8;

/// Deletes a chat's oldest card rules (through chatd, as a person tidying
/// the chat's list would) until `CARD_RULES_KEPT` are left; how many went.
/// Each card host is a fresh name, and an `always` or `deny` answer keeps a
/// rule for it. A chat's `egress.updated` event carries its whole list, so
/// without this every event grew for as long as the soak ran (4 KiB after
/// 3 minutes), and chatd's rings with them (the 30 min run: +35 % RSS).
pub(crate) async fn tidy_card_rules(shared: &Shared, chat: &str) -> u64 {
    let path = format!("/conversations/{chat}/egress/rules");
    let Ok((200, body)) = shared.call(reqwest::Method::GET, &path, None).await else {
        return 0;
    };
    let mut cards: Vec<(String, String)> = body["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["source"] == "card")
        .filter_map(|r| {
            Some((
                r["created"].as_str()?.to_string(),
                r["id"].as_str()?.to_string(),
            ))
        })
        .collect();
    cards.sort();
    let extra = cards.len().saturating_sub(CARD_RULES_KEPT);
    let mut removed = 0;
    for (_, id) in cards.into_iter().take(extra) {
        if let Ok((204 | 200, _)) = shared
            .call(reqwest::Method::DELETE, &format!("{path}/{id}"), None)
            .await
        {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_name_the_chat_and_the_spelling() {
        assert_eq!(parse_mark("ssrf c_1 7"), Some(("c_1".into(), 7)));
        assert_eq!(
            parse_mark("GET /ssrf/c_2/12 HTTP/1.1"),
            Some(("c_2".into(), 12))
        );
        assert_eq!(parse_mark("GET / HTTP/1.1"), None);
    }

    #[test]
    fn every_aim_is_served_or_unroutable() {
        for s in SPELLINGS {
            assert!(
                s.aim == "box" || s.aim == "none" || REFUSED_ORIGINS.contains(&s.aim),
                "{} aims at {}",
                s.host,
                s.aim
            );
        }
    }
}
