//! The proxy over real sockets: a chat's unix socket in, real TCP out to an
//! origin on 127.0.0.2 that the test's allow-range opens (the one way an
//! administrator opens a range); everything else on loopback stays refused.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use egressd::proxy::{serve_chat, Audit, Decision, Preset, Rules};
use tandem_shared::netpolicy::Policy;
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
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// An origin on 127.0.0.2 that answers each connection with what it read
/// first, and a proxy for chat `c_test` in `preset`.
async fn setup(preset: Preset, header: Duration) -> Setup {
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
            });
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("proxy.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let rules = Arc::new(Rules {
        preset,
        registries: vec!["pypi.org".into()],
        ports: vec![80, 443, origin_port],
        lookup: Duration::from_secs(5),
        connect: Duration::from_secs(10),
        header,
        max_header: 64 * 1024,
    });
    let own = tandem_shared::netpolicy::own_addresses().unwrap();
    let policy = Arc::new(Policy::new(vec!["127.0.0.2/32".parse().unwrap()], own));
    let log = Arc::new(Log::default());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve_chat(
        listener,
        "c_test".into(),
        rules,
        policy,
        log.clone(),
        async move {
            let _ = stopped.await;
        },
    ));
    Setup {
        _dir: dir,
        socket,
        origin_port,
        log,
        _stop: stop,
    }
}

/// Sends `request` on a new connection and reads until the proxy closes or
/// the first answer has come (for tunnels: writes `then` after the 200).
async fn ask(socket: &std::path::Path, request: &str, then: Option<&str>) -> String {
    let mut s = UnixStream::connect(socket).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let read = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await;
        let n = match read {
            Ok(Ok(n)) => n,
            _ => break,
        };
        if n == 0 {
            break;
        }
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
    let s = setup(Preset::All, Duration::from_secs(10)).await;
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
    assert_eq!(log.iter().filter(|d| d.verdict == "allowed").count(), 1);
    assert_eq!(
        log.iter().filter(|d| d.verdict == "failed").count(),
        1,
        "{log:?}"
    );
    assert!(log.iter().all(|d| d.chat == "c_test"));
    let loopback = log.iter().find(|d| d.host == "127.0.0.1").unwrap();
    assert_eq!(loopback.verdict, "refused");
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
    let s = setup(Preset::All, Duration::from_secs(10)).await;
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
    assert!(lying.starts_with("HTTP/1.1 400"), "{lying}");
}

#[tokio::test]
async fn presets_decide_before_any_lookup() {
    let off = setup(Preset::Off, Duration::from_secs(10)).await;
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
    let registries = setup(Preset::Registries, Duration::from_secs(10)).await;
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
    let s = setup(Preset::All, Duration::from_secs(1)).await;
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
