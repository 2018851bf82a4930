//! The sd-notify protocol, tested directly: the test owns a NOTIFY_SOCKET
//! datagram socket, sets WATCHDOG_USEC, starts the real chatd and reads what
//! it sends. (PID 1 is not systemd on these machines; the units themselves
//! are checked with systemd-analyze.)

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use tandem_tests::harness::{Chatd, Sim};

/// Reads datagrams until one contains `want`, within `bound`; returns all read.
fn read_until(socket: &UnixDatagram, want: &str, bound: Duration) -> Vec<String> {
    let deadline = Instant::now() + bound;
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        socket
            .set_read_timeout(Some(deadline - Instant::now()))
            .unwrap();
        match socket.recv(&mut buf) {
            Ok(n) => {
                let text = String::from_utf8_lossy(&buf[..n]).to_string();
                let found = text.lines().any(|l| l == want);
                seen.push(text);
                if found {
                    return seen;
                }
            }
            Err(_) => break,
        }
    }
    panic!("no {want:?} within {bound:?}; got {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_watchdog_and_stopping_are_sent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    let sim = Sim::start(&[]).unwrap();
    let notify = path.to_string_lossy().to_string();
    let mut chatd = Chatd::start(
        &sim.url(),
        &[("NOTIFY_SOCKET", &notify), ("WATCHDOG_USEC", "400000")],
    )
    .await
    .unwrap();

    let seen = read_until(&socket, "READY=1", Duration::from_secs(10));
    let health = reqwest::get(format!("{}/health", chatd.url()))
        .await
        .unwrap();
    assert!(
        health.status().is_success(),
        "READY=1 comes only once /health answers"
    );
    assert!(
        seen.concat().contains("STATUS=serving on 127.0.0.1:"),
        "READY comes with a STATUS line naming the address: {seen:?}"
    );
    // Half of the 400 ms interval: two pings arrive well within two seconds.
    read_until(&socket, "WATCHDOG=1", Duration::from_secs(2));
    read_until(&socket, "WATCHDOG=1", Duration::from_secs(2));

    let (took, status) = chatd.sigterm(Duration::from_secs(10)).unwrap();
    read_until(&socket, "STOPPING=1", Duration::from_secs(1));
    assert!(status.success(), "chatd exits 0 on SIGTERM: {status}");
    assert!(took < Duration::from_secs(5), "chatd took {took:?} to stop");
}
