//! The proxy over real sockets: a chat's unix socket in, real TCP out to an
//! origin on 127.0.0.2 that the test's allow-range opens (the one way an
//! administrator opens a range); everything else on loopback stays refused.
//! `framing`: how a plain request's body length may be written.

mod framing;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use egressd::gate::{CardEvent, Gate};
use egressd::metrics::Metrics;
use egressd::policy::{Audit, Cards, Decision, Preset, Settings};
use egressd::proxy::Proxy;
use egressd::store::Store;
use egressd::verdicts::{AuditVerdict, RuleSource, RuleVerdict};
use tandem_shared::netpolicy::LivePolicy;
use tandem_shared::secrets::Secret;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener, UnixStream};

#[derive(Default)]
struct Log(Mutex<Vec<Decision>>);

impl Audit for Log {
    fn record(&self, decision: Decision) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(decision);
    }
}

impl Log {
    fn all(&self) -> Vec<Decision> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    socket: std::path::PathBuf,
    origin_port: u16,
    log: Arc<Log>,
    gate: Arc<Gate>,
    proxy: Arc<Proxy>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Setup {
    /// Opens another chat's socket on the same proxy.
    async fn dir_socket(&self, chat: &str) -> std::path::PathBuf {
        let path = self._dir.path().join(format!("{chat}.sock"));
        let listener = UnixListener::bind(&path).unwrap();
        tokio::spawn(
            self.proxy
                .clone()
                .serve_chat(listener, chat.into(), std::future::pending()),
        );
        path
    }
}

fn settings(origin_port: u16) -> Settings {
    Settings {
        ceiling: Preset::All,
        default_preset: Preset::Off,
        registries: vec!["pypi.org".into()],
        always: Vec::new(),
        ports: vec![80, 443, origin_port],
        lookup: Duration::from_secs(5),
        connect: Duration::from_secs(10),
        header: Duration::from_secs(10),
        idle: Duration::from_secs(300),
        max_header: 64 * 1024,
        card_wait: Duration::from_secs(60),
        once: Duration::from_secs(1800),
        tunnels_per_chat: 32,
    }
}

/// An origin on 127.0.0.2 that answers each connection with what it read
/// first, and a proxy for chat `c_test` in `preset` (settings changed by
/// `change`).
async fn setup(preset: Preset, change: impl FnOnce(&mut Settings)) -> Setup {
    let origin = TcpListener::bind("127.0.0.2:0")
        .await
        .expect("bind 127.0.0.2");
    let origin_port = origin.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = origin.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let mut answer = b"ORIGIN SAW: ".to_vec();
                answer.extend_from_slice(&buf[..n]);
                let _ = s.write_all(&answer).await;
                // Held open until the client closes (tunnels stay up).
                let _ = s.read(&mut buf).await;
            });
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("proxy.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let mut s = settings(origin_port);
    change(&mut s);
    let store = Arc::new(Store::open(&dir.path().join("egress.sqlite3")).unwrap());
    let gate = Gate::new(s, store).unwrap();
    gate.set_chat("c_test", preset, Cards::Ask).unwrap();
    let policy = LivePolicy::open(vec!["127.0.0.2/32".parse().unwrap()]).unwrap();
    let log = Arc::new(Log::default());
    let proxy = Arc::new(Proxy::new(
        gate.clone(),
        policy,
        log.clone(),
        Arc::new(Metrics::default()),
        Some(Secret::new("test-key".into())),
    ));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(
        proxy
            .clone()
            .serve_chat(listener, "c_test".into(), async move {
                let _ = stopped.await;
            }),
    );
    Setup {
        _dir: dir,
        socket,
        origin_port,
        log,
        gate,
        proxy,
        _stop: stop,
    }
}

/// Sends `request` on a new connection and reads until the proxy closes or
/// the first answer has come (for tunnels: writes `then` after the 200).
async fn ask(socket: &std::path::Path, request: &str, then: Option<&str>) -> String {
    let s = UnixStream::connect(socket).await.unwrap();
    exchange(s, request, then).await
}

/// Writes `request` and reads until the proxy closes or the origin's answer
/// has come (for tunnels: writes `then` after the 200), 10 s a read at most.
async fn exchange<S>(mut s: S, request: &str, then: Option<&str>) -> String
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let read = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await;
        let n = match read {
            Ok(Ok(n)) if n > 0 => n,
            _ => break,
        };
        out.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&out).to_string();
        if let Some(more) = then {
            if text.starts_with("HTTP/1.1 200") && text.ends_with("\r\n\r\n") {
                s.write_all(more.as_bytes()).await.unwrap();
                continue;
            }
        }
        if text.contains("ORIGIN SAW") {
            break;
        }
    }
    String::from_utf8_lossy(&out).to_string()
}

#[tokio::test]
async fn connect_reaches_an_opened_address_and_only_that() {
    let s = setup(Preset::All, |_| {}).await;
    let p = s.origin_port;
    let through = ask(
        &s.socket,
        &format!("CONNECT 127.0.0.2:{p} HTTP/1.1\r\n\r\n"),
        Some("hello"),
    )
    .await;
    assert!(through.starts_with("HTTP/1.1 200"), "{through}");
    assert!(through.contains("ORIGIN SAW: hello"), "{through}");

    // Loopback in every spelling a URL allows: refused with one line why.
    for spelling in [
        "127.0.0.1",
        "2130706433",
        "0177.0.0.1",
        "0x7f.0.0.1",
        "127.1",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "[::]",
        "0.0.0.0",
        "localhost",
    ] {
        let answer = ask(
            &s.socket,
            &format!("CONNECT {spelling}:{p} HTTP/1.1\r\n\r\n"),
            None,
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{spelling}: {answer}");
        assert!(answer.contains("egress: "), "{spelling}: {answer}");
    }
    // Cloud metadata, by address and by name.
    for host in ["169.254.169.254:80", "metadata.google.internal:80"] {
        let answer = ask(&s.socket, &format!("CONNECT {host} HTTP/1.1\r\n\r\n"), None).await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{host}: {answer}");
    }
    // A port that is not open.
    let answer = ask(&s.socket, "CONNECT 127.0.0.2:22 HTTP/1.1\r\n\r\n", None).await;
    assert!(
        answer.starts_with("HTTP/1.1 403") && answer.contains("port 22"),
        "{answer}"
    );

    // A name that does not resolve is a failure, not a policy refusal.
    let answer = ask(
        &s.socket,
        "CONNECT nothing.invalid:443 HTTP/1.1\r\n\r\n",
        None,
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");

    let log = s.log.all();
    assert_eq!(
        log.iter()
            .filter(|d| d.verdict == AuditVerdict::Allowed)
            .count(),
        1
    );
    assert_eq!(
        log.iter()
            .filter(|d| d.verdict == AuditVerdict::Failed)
            .count(),
        1,
        "{log:?}"
    );
    assert!(log.iter().all(|d| d.chat == "c_test"));
    let loopback = log.iter().find(|d| d.host == "127.0.0.1").unwrap();
    assert_eq!(loopback.verdict, AuditVerdict::Refused);
    // Loopback is this box's own address too: either reason refuses it.
    assert!(
        loopback.reason.contains("loopback") || loopback.reason.contains("this box"),
        "{loopback:?}"
    );
    let decimal = log.iter().find(|d| d.host == "127.0.0.1" && d.port == p);
    assert!(
        decimal.is_some(),
        "the decimal spelling is audited as 127.0.0.1"
    );
}

#[tokio::test]
async fn plain_http_goes_on_in_origin_form_and_a_lying_host_header_is_refused() {
    let s = setup(Preset::All, |_| {}).await;
    let p = s.origin_port;
    let answer = ask(
        &s.socket,
        &format!("GET http://127.0.0.2:{p}/simple/pip/ HTTP/1.1\r\nHost: 127.0.0.2:{p}\r\nProxy-Authorization: x\r\n\r\n"),
        None,
    )
    .await;
    assert!(
        answer.contains("ORIGIN SAW: GET /simple/pip/ HTTP/1.1\r\n"),
        "{answer}"
    );
    assert!(!answer.contains("Proxy-Authorization"), "{answer}");
    let lying = ask(
        &s.socket,
        &format!("GET http://127.0.0.2:{p}/ HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\n\r\n"),
        None,
    )
    .await;
    assert!(
        lying.starts_with("HTTP/1.1 403") && lying.contains("Host header"),
        "{lying}"
    );
    // Two Host headers, or the URL's host on another port: refused too.
    for head in [
        format!("GET http://127.0.0.2:{p}/ HTTP/1.1\r\nHost: 127.0.0.2:{p}\r\nHost: internal.example\r\n\r\n"),
        format!("GET http://127.0.0.2:{p}/ HTTP/1.1\r\nHost: 127.0.0.2:1\r\n\r\n"),
        format!("GET http://127.0.0.2:{p}/ HTTP/1.1\r\nHost: 127.0.0.2\r\n\r\n"),
    ] {
        let answer = ask(&s.socket, &head, None).await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{head}: {answer}");
    }
    // A request pipelined after the first is never passed on: it was not checked.
    let answer = ask(
        &s.socket,
        &format!("POST http://127.0.0.2:{p}/a HTTP/1.1\r\nHost: 127.0.0.2:{p}\r\nContent-Length: 2\r\n\r\nhiGET /admin HTTP/1.1\r\nHost: other.internal\r\n\r\n"),
        None,
    )
    .await;
    assert!(
        answer.contains("ORIGIN SAW: POST /a HTTP/1.1\r\n"),
        "{answer}"
    );
    assert!(answer.ends_with("\r\n\r\nhi"), "{answer}");
    assert!(!answer.contains("/admin"), "{answer}");
    let chunked = ask(
        &s.socket,
        &format!(
            "POST http://127.0.0.2:{p}/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
        ),
        None,
    )
    .await;
    assert!(
        chunked.starts_with("HTTP/1.1 400") && chunked.contains("Content-Length"),
        "{chunked}"
    );
    let audited = s.log.all();
    let row = audited
        .iter()
        .find(|d| d.reason.contains("Host header"))
        .unwrap();
    assert_eq!(
        (row.verdict, row.host.as_str(), row.port),
        (AuditVerdict::Refused, "127.0.0.2", p)
    );
}

#[tokio::test]
async fn presets_decide_before_any_lookup() {
    let off = setup(Preset::Off, |_| {}).await;
    let p = off.origin_port;
    let answer = ask(
        &off.socket,
        &format!("CONNECT 127.0.0.2:{p} HTTP/1.1\r\n\r\n"),
        None,
    )
    .await;
    assert!(
        answer.starts_with("HTTP/1.1 403") && answer.contains("off"),
        "{answer}"
    );
    let registries = setup(Preset::Registries, |_| {}).await;
    let p = registries.origin_port;
    let answer = ask(
        &registries.socket,
        &format!("CONNECT 127.0.0.2:{p} HTTP/1.1\r\n\r\n"),
        None,
    )
    .await;
    assert!(
        answer.starts_with("HTTP/1.1 403") && answer.contains("registr"),
        "{answer}"
    );
}

#[tokio::test]
async fn bad_and_slow_requests_are_refused_within_their_bounds() {
    let s = setup(Preset::All, |s| s.header = Duration::from_secs(1)).await;
    let answer = ask(&s.socket, "NOT A REQUEST\r\n\r\n", None).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    let huge = format!(
        "GET http://127.0.0.2/ HTTP/1.1\r\nX: {}\r\n\r\n",
        "a".repeat(70_000)
    );
    let answer = ask(&s.socket, &huge, None).await;
    assert!(
        answer.starts_with("HTTP/1.1 400") && answer.contains("65536"),
        "{answer}"
    );
    // A head whose end arrives in the read that passes the bound.
    let just_over = format!(
        "GET http://127.0.0.2/ HTTP/1.1\r\nX: {}\r\n\r\n",
        "a".repeat(65_536 - 20)
    );
    assert!(just_over.len() > 65_536 && just_over.len() < 65_536 + 4096);
    let answer = ask(&s.socket, &just_over, None).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");

    // A slowloris client holds its connection; others are served meanwhile,
    // and it gets a 408 once the header bound has passed.
    let mut slow = UnixStream::connect(&s.socket).await.unwrap();
    slow.write_all(b"CONNECT 127.0.0.2:").await.unwrap();
    let p = s.origin_port;
    let other = ask(
        &s.socket,
        &format!("CONNECT 127.0.0.2:{p} HTTP/1.1\r\n\r\n"),
        Some("x"),
    )
    .await;
    assert!(other.contains("ORIGIN SAW: x"), "{other}");
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), slow.read_to_end(&mut out))
        .await
        .expect("the slow client is answered within the bound")
        .unwrap();
    assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 408"));
}

/// Sends `request` to the loopback listener of `proxy` and reads the answer
/// (for tunnels: writes `then` after the 200).
async fn ask_loopback(proxy: &Arc<Proxy>, request: &str, then: Option<&str>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(proxy.clone().serve_loopback(listener, async move {
        let _ = stopped.await;
    }));
    let s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let answer = exchange(s, request, then).await;
    let _ = stop.send(());
    answer
}

fn basic(chat: &str, token: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(format!("{chat}:{token}"))
}

#[tokio::test]
async fn the_loopback_listener_names_the_chat_by_its_token_only() {
    let s = setup(Preset::All, |_| {}).await;
    let p = s.origin_port;
    let key = Secret::new("test-key".into());
    let good = tandem_shared::secrets::egress_token(&key, "c_test");
    let through = ask_loopback(
        &s.proxy,
        &format!(
            "CONNECT 127.0.0.2:{p} HTTP/1.1\r\nProxy-Authorization: Basic {}\r\n\r\n",
            basic("c_test", &good)
        ),
        Some("via loopback"),
    )
    .await;
    assert!(through.contains("ORIGIN SAW: via loopback"), "{through}");
    // No token, another chat's token, a made-up one: 407, nothing reached.
    let other = tandem_shared::secrets::egress_token(&key, "c_other");
    for auth in [
        String::new(),
        format!("Proxy-Authorization: Basic {}\r\n", basic("c_test", &other)),
        format!(
            "Proxy-Authorization: Basic {}\r\n",
            basic("c_test", "guess")
        ),
        "Proxy-Authorization: Bearer x\r\n".to_string(),
    ] {
        let answer = ask_loopback(
            &s.proxy,
            &format!("CONNECT 127.0.0.2:{p} HTTP/1.1\r\n{auth}\r\n"),
            None,
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 407"), "{auth:?}: {answer}");
        assert!(answer.contains("Proxy-Authenticate: Basic"), "{answer}");
    }
    // The chat named by the token gets its own preset: c_off is off.
    s.gate.set_chat("c_off", Preset::Off, Cards::Never).unwrap();
    let off = tandem_shared::secrets::egress_token(&key, "c_off");
    let answer = ask_loopback(
        &s.proxy,
        &format!(
            "GET http://127.0.0.2:{p}/ HTTP/1.1\r\nProxy-Authorization: Basic {}\r\n\r\n",
            basic("c_off", &off)
        ),
        None,
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    let log = s.log.all();
    assert!(log
        .iter()
        .any(|d| d.chat == "c_off" && d.verdict == AuditVerdict::Refused));
    assert!(log
        .iter()
        .any(|d| d.chat == "c_test" && d.verdict == AuditVerdict::Allowed));
    // A 407 has no chat to be audited under.
    assert!(log.iter().all(|d| !d.chat.is_empty()));
}

#[tokio::test]
async fn rules_deny_before_the_preset_and_allow_inside_the_ceiling_only() {
    let s = setup(Preset::Off, |_| {}).await;
    let p = s.origin_port;
    let connect = format!("CONNECT 127.0.0.2:{p} HTTP/1.1\r\n\r\n");
    s.gate
        .add_rule(
            "c_test",
            RuleVerdict::Allow,
            "127.0.0.2",
            p,
            RuleSource::Api,
        )
        .unwrap();
    let answer = ask(&s.socket, &connect, Some("ruled")).await;
    assert!(answer.contains("ORIGIN SAW: ruled"), "{answer}");
    // A deny rule for the same host:port replaces it, and beats preset all.
    s.gate
        .add_rule("c_test", RuleVerdict::Deny, "127.0.0.2", p, RuleSource::Api)
        .unwrap();
    s.gate.set_chat("c_test", Preset::All, Cards::Ask).unwrap();
    let answer = ask(&s.socket, &connect, None).await;
    assert!(
        answer.starts_with("HTTP/1.1 403") && answer.contains("denied by this chat's rule"),
        "{answer}"
    );
    assert_eq!(s.gate.rules("c_test").len(), 1);
    // An allow rule never passes the ceiling.
    s.gate
        .add_rule(
            "c_test",
            RuleVerdict::Allow,
            "127.0.0.2",
            p,
            RuleSource::Api,
        )
        .unwrap();
    let mut lowered = settings(p);
    lowered.ceiling = Preset::Off;
    s.gate.reload(lowered);
    let answer = ask(&s.socket, &connect, None).await;
    assert!(
        answer.starts_with("HTTP/1.1 403") && answer.contains("ceiling is off"),
        "{answer}"
    );
    // The administrator's always-allowed host passes even then; the
    // address policy still applies after.
    let mut always = settings(p);
    always.ceiling = Preset::Off;
    always.always = vec![("127.0.0.2".into(), None), ("127.0.0.1".into(), None)];
    s.gate.reload(always);
    s.gate.set_chat("c_test", Preset::Off, Cards::Ask).unwrap();
    let answer = ask(&s.socket, &connect, Some("always")).await;
    assert!(answer.contains("ORIGIN SAW: always"), "{answer}");
    let answer = ask(
        &s.socket,
        &format!("CONNECT 127.0.0.1:{p} HTTP/1.1\r\n\r\n"),
        None,
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
}

/// Waits for the next card on `events`, bounded.
async fn next_card(events: &mut tokio::sync::broadcast::Receiver<CardEvent>) -> String {
    loop {
        let event = tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .expect("a card within 10 s")
            .expect("the card stream is open");
        if let CardEvent::Card(card) = event {
            return card.card_id;
        }
    }
}

#[tokio::test]
async fn cards_ask_a_person_and_the_answer_holds() {
    use egressd::gate::{AnswerError, Answered};
    let s = setup(Preset::Off, |_| {}).await;
    let p = s.origin_port;
    let connect = format!("CONNECT 127.0.0.2:{p} HTTP/1.1\r\n\r\n");
    let (waiting, mut events) = s.gate.subscribe();
    assert!(waiting.is_empty());

    // Allow once: this connection and the next ones for a while.
    let socket = s.socket.clone();
    let c = connect.clone();
    let first = tokio::spawn(async move { ask(&socket, &c, Some("once")).await });
    let card = next_card(&mut events).await;
    let shown = s.gate.pending_cards();
    assert_eq!(shown.len(), 1);
    assert_eq!(
        shown[0].summary,
        format!("A command in this chat wants to reach 127.0.0.2:{p}")
    );
    assert_eq!(
        s.gate.answer("c_test", &card, "once"),
        Ok(Answered::Taken { rule: None })
    );
    assert_eq!(s.gate.answer("c_test", &card, "once"), Ok(Answered::Again));
    assert_eq!(
        s.gate.answer("c_test", &card, "deny"),
        Err(AnswerError::Already("once".into()))
    );
    assert!(first.await.unwrap().contains("ORIGIN SAW: once"));
    assert_eq!(
        s.gate.answer("c_other", &card, "once"),
        Err(AnswerError::Unknown),
        "another chat learns nothing of a closed card"
    );
    // What no answer could open never shows a card: a refused address, a
    // metadata name.
    for target in ["10.0.0.1:443", "metadata.google.internal:443"] {
        let answer = ask(
            &s.socket,
            &format!("CONNECT {target} HTTP/1.1\r\n\r\n"),
            None,
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{target}: {answer}");
        assert!(s.gate.pending_cards().is_empty(), "{target} showed a card");
    }
    let again = ask(&s.socket, &connect, Some("still")).await;
    assert!(
        again.contains("ORIGIN SAW: still"),
        "once covers the next connection"
    );
    assert!(s.gate.rules("c_test").is_empty(), "once saves no rule");

    // Deny: saved as a rule, the connection refused.
    s.gate.set_chat("c_two", Preset::Off, Cards::Ask).unwrap();
    let two = s.dir_socket("c_two").await;
    let c = connect.clone();
    let refused = tokio::spawn(async move { ask(&two, &c, None).await });
    let card = next_card(&mut events).await;
    assert_eq!(
        s.gate.answer("c_other", &card, "deny"),
        Err(AnswerError::Unknown),
        "a card answers only for its own chat"
    );
    assert!(matches!(
        s.gate.answer("c_two", &card, "deny"),
        Ok(Answered::Taken { rule: Some(_) })
    ));
    let answer = refused.await.unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 403") && answer.contains("denied by a person"),
        "{answer}"
    );
    assert_eq!(s.gate.rules("c_two")[0].verdict, RuleVerdict::Deny);

    // Always: saved as an allow rule.
    s.gate.set_chat("c_three", Preset::Off, Cards::Ask).unwrap();
    let three = s.dir_socket("c_three").await;
    let c = connect.clone();
    let allowed = tokio::spawn(async move { ask(&three, &c, Some("always")).await });
    let card = next_card(&mut events).await;
    assert!(matches!(
        s.gate.answer("c_three", &card, "always"),
        Ok(Answered::Taken { rule: Some(_) })
    ));
    assert!(allowed.await.unwrap().contains("ORIGIN SAW: always"));
    assert_eq!(s.gate.rules("c_three")[0].verdict, RuleVerdict::Allow);

    // A chat nobody watches never shows a card: refused at once.
    s.gate
        .set_chat("c_unwatched", Preset::Off, Cards::Never)
        .unwrap();
    let unwatched = s.dir_socket("c_unwatched").await;
    let answer = ask(&unwatched, &connect, None).await;
    assert!(answer.contains("nobody watches"), "{answer}");
    assert!(s.gate.pending_cards().is_empty());

    // Nobody listening for cards (chatd down): refused at once, too.
    drop(events);
    s.gate.set_chat("c_four", Preset::Off, Cards::Ask).unwrap();
    let four = s.dir_socket("c_four").await;
    let answer = ask(&four, &connect, None).await;
    assert!(answer.contains("no one can be asked now"), "{answer}");
}

#[tokio::test]
async fn an_unanswered_card_expires_and_a_lowered_ceiling_refuses_a_late_yes() {
    use egressd::gate::AnswerError;
    let s = setup(Preset::Off, |s| s.card_wait = Duration::from_millis(300)).await;
    let p = s.origin_port;
    let connect = format!("CONNECT 127.0.0.2:{p} HTTP/1.1\r\n\r\n");
    let (_, mut events) = s.gate.subscribe();
    let answer = ask(&s.socket, &connect, None).await;
    assert!(answer.contains("nobody answered the card"), "{answer}");
    let card = next_card(&mut events).await;
    assert_eq!(
        s.gate.answer("c_test", &card, "once"),
        Err(AnswerError::Expired)
    );

    // The ceiling is lowered while a card waits: a yes no longer opens it.
    let mut slow = settings(p);
    slow.card_wait = Duration::from_secs(30);
    s.gate.reload(slow);
    let socket = s.socket.clone();
    let c = connect.clone();
    let waiting = tokio::spawn(async move { ask(&socket, &c, None).await });
    let card = next_card(&mut events).await;
    let mut off = settings(p);
    off.ceiling = Preset::Off;
    s.gate.reload(off);
    assert!(matches!(
        s.gate.answer("c_test", &card, "always"),
        Err(AnswerError::OutsideCeiling(_))
    ));
    let answer = waiting.await.unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 403") && answer.contains("ceiling"),
        "{answer}"
    );
    assert!(s.gate.rules("c_test").is_empty());
}

#[tokio::test]
async fn a_chat_gets_at_most_its_tunnels_and_a_quiet_one_is_closed() {
    let s = setup(Preset::All, |s| {
        s.tunnels_per_chat = 2;
        s.idle = Duration::from_millis(500);
    })
    .await;
    let p = s.origin_port;
    let mut open = Vec::new();
    for _ in 0..2 {
        let mut t = UnixStream::connect(&s.socket).await.unwrap();
        t.write_all(format!("CONNECT 127.0.0.2:{p} HTTP/1.1\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut buf = [0u8; 64];
        let n = t.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        open.push(t);
    }
    let third = ask(
        &s.socket,
        &format!("CONNECT 127.0.0.2:{p} HTTP/1.1\r\n\r\n"),
        None,
    )
    .await;
    assert!(third.contains("Retry-After: 5"), "{third}");
    assert!(
        third.starts_with("HTTP/1.1 429") && third.contains("the most it may have (2)"),
        "{third}"
    );
    // Both open tunnels carry nothing: each is closed after the idle bound.
    for mut t in open {
        let mut rest = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), t.read_to_end(&mut rest))
            .await
            .expect("the idle bound closes the tunnel")
            .unwrap();
    }
    // Places are given back, and a connection still sending its head
    // holds one too: two silent ones leave no room for a third.
    let silent = vec![
        UnixStream::connect(&s.socket).await.unwrap(),
        UnixStream::connect(&s.socket).await.unwrap(),
    ];
    let crowded = wait_for_429(&s.socket, p).await;
    assert!(crowded.starts_with("HTTP/1.1 429"), "{crowded}");
    drop(silent);
    // Places are given back: a new tunnel opens.
    let again = ask(
        &s.socket,
        &format!("CONNECT 127.0.0.2:{p} HTTP/1.1\r\n\r\n"),
        Some("back"),
    )
    .await;
    assert!(again.contains("ORIGIN SAW: back"), "{again}");
    let log = s.log.all();
    assert_eq!(
        log.iter()
            .filter(|d| d.reason.contains("without traffic"))
            .count(),
        2,
        "{log:?}"
    );
}

/// A CONNECT tried until it meets a 429 (the silent connections' places are
/// taken as the proxy accepts them), at most 5 s.
async fn wait_for_429(socket: &std::path::Path, port: u16) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let answer = ask(
            socket,
            &format!("CONNECT 127.0.0.2:{port} HTTP/1.1\r\n\r\n"),
            Some("x"),
        )
        .await;
        if answer.starts_with("HTTP/1.1 429") || tokio::time::Instant::now() > deadline {
            return answer;
        }
    }
}

#[tokio::test]
async fn the_registries_preset_opens_registries_and_the_ceiling_caps_all() {
    use tandem_shared::netpolicy::Host;
    let s = setup(Preset::Registries, |_| {}).await;
    let pypi = Host::Name("pypi.org".into());
    let other = Host::Name("example.org".into());
    let (_, events) = s.gate.subscribe();
    let ok = s.gate.admit("c_test", &pypi, "pypi.org", 443, "x").await;
    assert_eq!(ok, Ok("allowed by the preset (registries)".to_string()));
    // A chat set to `all` under a `registries` ceiling reaches registries only.
    s.gate
        .set_chat("c_test", Preset::All, Cards::Never)
        .unwrap();
    let mut capped = settings(s.origin_port);
    capped.ceiling = Preset::Registries;
    s.gate.reload(capped);
    assert!(s
        .gate
        .admit("c_test", &pypi, "pypi.org", 443, "x")
        .await
        .is_ok());
    let refused = s
        .gate
        .admit("c_test", &other, "example.org", 443, "x")
        .await;
    assert!(
        refused
            .as_ref()
            .is_err_and(|why| why.contains("ceiling registries")),
        "{refused:?}"
    );
    drop(events);
}
