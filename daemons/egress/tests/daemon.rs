//! The real egressd binary: its API socket sets a chat's preset, the chat's
//! proxy socket appears under chatd's data, connections are audited, and
//! presets survive a restart.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UnixStream};

struct Daemon {
    child: Child,
    dir: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(dir: &Path, config: &Path) -> Daemon {
    let child = Command::new(env!("CARGO_BIN_EXE_egressd"))
        .args(["--config", config.to_str().unwrap()])
        .current_dir(dir)
        .env_clear()
        .env("HOME", dir)
        .env("QSE_LOG_TO", "stderr")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("egressd starts");
    Daemon {
        child,
        dir: dir.to_path_buf(),
    }
}

/// One HTTP request over a unix socket: (status, JSON body).
async fn call(socket: &Path, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
    let mut s = UnixStream::connect(socket)
        .await
        .expect("the API socket answers");
    let body = body.unwrap_or("");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: egressd\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text[9..12].parse().unwrap_or(0);
    let json = text
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    (status, json)
}

/// Checks `check` until it gives a value, at most `bound`; the panic names what never came.
async fn wait_until<T, F, Fut>(what: &str, bound: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} within {bound:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn wait_for(path: &Path) {
    wait_until(
        &format!("{} to answer", path.display()),
        Duration::from_secs(5),
        || async { UnixStream::connect(path).await.ok().map(|_| ()) },
    )
    .await
}

/// An origin on 127.0.0.2 (opened by the tests' allow-range) that echoes
/// what it reads first; its port.
async fn echo_origin() -> u16 {
    let origin = TcpListener::bind("127.0.0.2:0").await.unwrap();
    let port = origin.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = origin.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let _ = s.write_all(&buf[..n]).await;
            });
        }
    });
    port
}

#[tokio::test]
async fn presets_open_a_chat_socket_audit_its_connections_and_survive_a_restart() {
    let port = echo_origin().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let api = d.join("run/egress.sock");
    let config = d.join("tandem.toml");
    std::fs::write(
        &config,
        format!(
            "[egress]\ndata_dir = \"{}\"\nchat_data = \"{}\"\nsocket = \"{}\"\nlisten = \"127.0.0.1:0\"\nceiling = \"all\"\nports = [443, {port}]\nallow_ranges = [\"127.0.0.2/32\"]\n",
            d.join("egress").display(),
            d.join("chat").display(),
            api.display()
        ),
    )
    .unwrap();
    let daemon = start(d, &config);
    wait_for(&api).await;
    let (status, health) = call(&api, "GET", "/health", None).await;
    assert_eq!(status, 200, "{health}");
    assert_eq!(health["ok"], true);

    // Bad input names the field and changes nothing.
    let (status, bad) = call(
        &api,
        "PUT",
        "/chats/c_1/egress",
        Some(r#"{"preset":"most"}"#),
    )
    .await;
    assert_eq!(status, 400, "{bad}");
    assert!(bad["error"]["message"]
        .as_str()
        .unwrap_or("")
        .contains("preset"));
    let (status, _) = call(
        &api,
        "PUT",
        "/chats/..%2Fx/egress",
        Some(r#"{"preset":"all"}"#),
    )
    .await;
    assert_eq!(status, 400);

    let (status, set) = call(
        &api,
        "PUT",
        "/chats/c_1/egress",
        Some(r#"{"preset":"all"}"#),
    )
    .await;
    assert_eq!(status, 200, "{set}");
    assert_eq!(set["effective"], "all");
    let socket = d.join("chat/egress/c_1/proxy.sock");
    assert_eq!(set["socket"], socket.to_str().unwrap());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the chat's socket is private");

    let tunnel = |target: String| {
        let socket = socket.clone();
        async move {
            let mut s = UnixStream::connect(&socket).await.unwrap();
            s.write_all(format!("CONNECT {target} HTTP/1.1\r\n\r\n").as_bytes())
                .await
                .unwrap();
            let mut buf = [0u8; 256];
            let n = s.read(&mut buf).await.unwrap();
            let head = String::from_utf8_lossy(&buf[..n]).to_string();
            if head.starts_with("HTTP/1.1 200") {
                s.write_all(b"ping").await.unwrap();
                let n = s.read(&mut buf).await.unwrap();
                return format!("{head}{}", String::from_utf8_lossy(&buf[..n]));
            }
            head
        }
    };
    let through = tunnel(format!("127.0.0.2:{port}")).await;
    assert!(through.ends_with("ping"), "{through}");
    let refused = tunnel(format!("10.0.0.1:{port}")).await;
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");

    // Every decision is audited, with a filter by verdict.
    let audit = |q: &'static str| call(&api, "GET", q, None);
    let rows = wait_until("two audit rows", Duration::from_secs(5), || async {
        let (_, all) = audit("/audit?chat=c_1").await;
        all["audit"].as_array().filter(|a| a.len() == 2).cloned()
    })
    .await;
    // (A tunnel is recorded when it closes, so the order is by ending.)
    let refused_row = rows
        .iter()
        .find(|r| r["verdict"] == "refused")
        .expect("a refusal");
    assert_eq!(refused_row["address"], "10.0.0.1");
    assert!(refused_row["reason"]
        .as_str()
        .unwrap_or("")
        .contains("private"));
    let allowed = rows
        .iter()
        .find(|r| r["verdict"] == "allowed")
        .expect("an allowed row");
    assert_eq!(allowed["bytes_up"], 4);
    assert_eq!(allowed["bytes_down"], 4);
    let (_, refused_only) = audit("/audit?verdict=refused").await;
    assert_eq!(refused_only["audit"].as_array().map(Vec::len), Some(1));

    // A restart brings the chat's socket back from the stored preset.
    drop(daemon);
    let _daemon = start(d, &config);
    wait_for(&api).await;
    wait_for(&socket).await;
    let again = tunnel(format!("127.0.0.2:{port}")).await;
    assert!(again.ends_with("ping"), "{again}");
    let (_, preset) = call(&api, "GET", "/chats/c_1/egress", None).await;
    assert_eq!(preset["preset"], "all");
    let _ = &_daemon.dir;
}

/// Writes a config for a daemon in `d` with `extra` lines in `[egress]`.
fn write_config(d: &Path, port: u16, extra: &str) -> PathBuf {
    let config = d.join("tandem.toml");
    std::fs::write(
        &config,
        format!(
            "[egress]\ndata_dir = \"{}\"\nchat_data = \"{}\"\nsocket = \"{}\"\nlisten = \"127.0.0.1:0\"\nports = [443, {port}]\nallow_ranges = [\"127.0.0.2/32\"]\n{extra}",
            d.join("egress").display(),
            d.join("chat").display(),
            d.join("run/egress.sock").display()
        ),
    )
    .unwrap();
    config
}

#[tokio::test]
async fn cards_rules_and_settings_over_the_api() {
    let port = echo_origin().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let api = d.join("run/egress.sock");
    let config = write_config(d, port, "ceiling = \"all\"\n");
    let daemon = start(d, &config);
    wait_for(&api).await;
    let (_, set) = call(
        &api,
        "PUT",
        "/chats/c_9/egress",
        Some(r#"{"preset":"off"}"#),
    )
    .await;
    assert_eq!(set["cards"], true);
    let socket = d.join("chat/egress/c_9/proxy.sock");

    // chatd's side: the card stream, one JSON object a line.
    let mut stream = UnixStream::connect(&api).await.unwrap();
    stream
        .write_all(b"GET /cards/stream HTTP/1.1\r\nHost: egressd\r\n\r\n")
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    wait_until("the stream's head", Duration::from_secs(5), || {
        let got = futures_read(&mut stream, &mut buf, &mut seen);
        async move { got.then_some(()) }
    })
    .await;

    // A command reaches for the origin: it waits on a card.
    let target = format!("127.0.0.2:{port}");
    let s2 = socket.clone();
    let t2 = target.clone();
    let command = tokio::spawn(async move {
        let mut s = UnixStream::connect(&s2).await.unwrap();
        s.write_all(format!("CONNECT {t2} HTTP/1.1\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut buf = [0u8; 256];
        let n = s.read(&mut buf).await.unwrap();
        String::from_utf8_lossy(&buf[..n]).to_string()
    });
    let card_id = wait_until("a card line", Duration::from_secs(10), || {
        futures_read(&mut stream, &mut buf, &mut seen);
        let text = String::from_utf8_lossy(&seen).to_string();
        let card = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["event"] == "card")
            .map(|v| v["card_id"].as_str().unwrap_or("").to_string());
        async move { card }
    })
    .await;
    let (status, cards) = call(&api, "GET", "/cards", None).await;
    assert_eq!(status, 200);
    assert_eq!(cards["cards"][0]["host"], "127.0.0.2");
    assert_eq!(cards["cards"][0]["chat"], "c_9");
    let (status, bad) = call(
        &api,
        "POST",
        "/consent",
        Some(&format!(
            r#"{{"chat":"c_9","card_id":"{card_id}","decision":"maybe"}}"#
        )),
    )
    .await;
    assert_eq!(status, 400, "{bad}");
    let answer = format!(r#"{{"chat":"c_9","card_id":"{card_id}","decision":"always"}}"#);
    let (status, taken) = call(&api, "POST", "/consent", Some(&answer)).await;
    assert_eq!(status, 200, "{taken}");
    assert_eq!(taken["rule"]["verdict"], "allow");
    let (status, _) = call(&api, "POST", "/consent", Some(&answer)).await;
    assert_eq!(status, 204, "the same answer twice");
    let other = format!(r#"{{"chat":"c_9","card_id":"{card_id}","decision":"deny"}}"#);
    let (status, conflict) = call(&api, "POST", "/consent", Some(&other)).await;
    assert_eq!(status, 409, "{conflict}");
    assert_eq!(conflict["error"]["type"], "already_answered");
    let (status, gone) = call(
        &api,
        "POST",
        "/consent",
        Some(r#"{"chat":"c_9","card_id":"eg_none","decision":"once"}"#),
    )
    .await;
    assert_eq!(status, 410, "{gone}");
    assert!(command.await.unwrap().starts_with("HTTP/1.1 200"));
    wait_until("the closed line", Duration::from_secs(5), || {
        futures_read(&mut stream, &mut buf, &mut seen);
        let closed = String::from_utf8_lossy(&seen).contains(r#""outcome":"always""#);
        async move { closed.then_some(()) }
    })
    .await;

    // The rule is listed, survives nothing but its removal, and bad rules
    // are refused naming the field.
    let (_, rules) = call(&api, "GET", "/chats/c_9/rules", None).await;
    let rule_id = rules["rules"][0]["id"].as_str().unwrap().to_string();
    assert_eq!(rules["rules"][0]["source"], "card");
    for (body, field) in [
        (r#"{"verdict":"maybe","host":"a.example:443"}"#, "verdict"),
        (r#"{"verdict":"allow","host":"a.example"}"#, "port"),
        (
            r#"{"verdict":"allow","host":"a.example:443","port":80}"#,
            "port",
        ),
        (r#"{"verdict":"allow","host":"http://a/"}"#, "host"),
    ] {
        let (status, bad) = call(&api, "POST", "/chats/c_9/rules", Some(body)).await;
        assert_eq!(status, 400, "{body}: {bad}");
        assert!(
            bad["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains(field),
            "{bad}"
        );
    }
    let (status, _) = call(
        &api,
        "POST",
        "/chats/c_9/rules",
        Some(r#"{"verdict":"deny","host":"Example.COM:443"}"#),
    )
    .await;
    assert_eq!(status, 201);
    let (_, rules) = call(&api, "GET", "/chats/c_9/rules", None).await;
    assert_eq!(rules["rules"].as_array().map(Vec::len), Some(2));
    assert_eq!(rules["rules"][1]["host"], "example.com");
    let (status, _) = call(&api, "DELETE", &format!("/chats/c_9/rules/{rule_id}"), None).await;
    assert_eq!(status, 204);
    let (status, _) = call(&api, "DELETE", &format!("/chats/c_9/rules/{rule_id}"), None).await;
    assert_eq!(status, 404);

    // SIGHUP: a lowered ceiling applies to the next decision.
    let settings = write_config(d, port, "ceiling = \"off\"\n");
    assert_eq!(settings, config);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.child.id() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    wait_until("the new ceiling", Duration::from_secs(5), || async {
        let (_, s) = call(&api, "GET", "/settings", None).await;
        (s["ceiling"] == "off").then_some(())
    })
    .await;

    // Metrics count decisions by verdict.
    let mut m = UnixStream::connect(&api).await.unwrap();
    m.write_all(b"GET /metrics HTTP/1.1\r\nHost: egressd\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut text = String::new();
    m.read_to_string(&mut text).await.unwrap();
    assert!(
        text.contains("tandem_egress_decisions_total{verdict=\"allowed\"} 1"),
        "{text}"
    );
    // A stop ends the card stream chatd holds open: egressd exits at once.
    let mut daemon = daemon;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = wait_until("egressd to exit on SIGTERM", Duration::from_secs(5), || {
        let exited = daemon.child.try_wait().ok().flatten();
        async move { exited }
    })
    .await;
    assert!(status.success(), "{status:?}");
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest)).await;
}

/// Reads what is there now (without waiting) into `seen`; true when the
/// HTTP head has come.
fn futures_read(stream: &mut UnixStream, buf: &mut [u8], seen: &mut Vec<u8>) -> bool {
    while let Ok(n) = stream.try_read(buf) {
        if n == 0 {
            break;
        }
        seen.extend_from_slice(&buf[..n]);
    }
    seen.windows(4).any(|w| w == b"\r\n\r\n")
}
