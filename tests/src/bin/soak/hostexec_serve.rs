//! hostexecd's MCP servers (`POST /serve`) in the soak: one worker opens a
//! server after another (a shell that echoes its stdin line by line and
//! keeps a `sleep <marker>` in the background), sends lines through the
//! upgraded stream and reads each back from its stdout frames, then closes
//! the stream. Meanwhile the part's killer SIGKILLs hostexecd. Held to
//! `Inv::Leftovers`: once a stream is closed (after a kill, once hostexecd
//! is back), no process carrying its marker is alive; and to `Inv::Health`:
//! a server that is up echoes every line, and its audit row says `stop`.

use super::*;

use tandem_shared::docker::Demux;
use tandem_tests::harness::{pids_with, wait_until};

use crate::hostexec::{describe, kill_all, HostexecPart, LEFT_BOUND};

/// The server: a shell run without a shell of hostexecd's (the command and
/// its arguments as given), `$0` the marker so both processes carry it.
const SCRIPT: &str = "sleep \"$0\" & while IFS= read -r line; do printf '%s\\n' \"$line\"; done";

#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) opened: u64,
    pub(crate) echoed: u64,
    pub(crate) closed: u64,
    pub(crate) broken_by_kill: u64,
    pub(crate) refused: u64,
    pub(crate) audited: u64,
}

/// Opens servers until the load ends.
pub(crate) async fn serve_worker(part: Arc<HostexecPart>, shared: Arc<Shared>, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut phase = shared.phase.subscribe();
    let chat = "hxserve_0";
    loop {
        let pause = Duration::from_secs_f64(rng.random_range(0.3..2.0));
        if !sleep_in(&mut phase, pause, |p| p == Phase::Load).await {
            return;
        }
        let marker = part.marker();
        let kills = part.kills.load(Ordering::Relaxed);
        let lines = rng.random_range(1..=5u32);
        let mut opened = open(&part, chat, &marker).await;
        if opened.is_err() {
            // hostexecd may be coming back from a kill under its lock.
            drop(part.hx.lock().await);
            opened = open(&part, chat, &marker).await;
        }
        let mut stream = match opened {
            Ok(stream) => stream,
            Err(_) if part.kills.load(Ordering::Relaxed) != kills => {
                lock(&part.serve_tally).refused += 1;
                continue;
            }
            Err(err) => {
                shared.violate(
                    Inv::Health,
                    format!(
                        "hostexecd: a server of chat {chat} was not opened, with no kill: {err:#}"
                    ),
                );
                continue;
            }
        };
        lock(&part.serve_tally).opened += 1;
        // Held open a while between lines (the load's pacing, as every
        // worker's), so hostexecd's SIGKILLs find servers mid-talk too.
        let between = Duration::from_secs_f64(rng.random_range(0.0..1.5));
        let talked = talk(&mut stream, lines, between, &mut phase).await;
        drop(stream);
        match talked {
            Ok(echoed) => {
                {
                    let mut t = lock(&part.serve_tally);
                    t.echoed += u64::from(echoed);
                    t.closed += 1;
                }
                audited(&part, &shared, chat, &marker, kills).await;
            }
            Err(_) if part.kills.load(Ordering::Relaxed) != kills => {
                lock(&part.serve_tally).broken_by_kill += 1;
            }
            Err(err) => shared.violate(
                Inv::Health,
                format!("hostexecd: a server of chat {chat} stopped echoing with no kill: {err:#}"),
            ),
        }
        // After a kill, what a dead hostexecd left is ended by the next.
        drop(part.hx.lock().await);
        let gone = wait_until("a server's processes gone", LEFT_BOUND, || async {
            pids_with(&marker).is_empty().then_some(())
        })
        .await;
        if gone.is_err() {
            let left = pids_with(&marker);
            shared.violate(
                Inv::Leftovers,
                format!(
                    "hostexecd: {} s after its stream closed, a server's processes are alive: {}",
                    LEFT_BOUND.as_secs(),
                    describe(&left)
                ),
            );
            kill_all(&left);
        }
    }
}

/// The server's audit row says chatd's side closed it (`stop`), unless
/// hostexecd was killed meanwhile.
async fn audited(part: &HostexecPart, shared: &Shared, chat: &str, marker: &str, kills: u64) {
    let row = wait_until("a server's audit row", Duration::from_secs(10), || async {
        let guard = part.hx.lock().await;
        let (_, body) = guard
            .as_ref()?
            .call("GET", &format!("/audit?chat={chat}&limit=20"), None)
            .await
            .ok()?;
        let rows = body["audit"].as_array()?.clone();
        rows.into_iter()
            .find(|r| r["command"].as_str().is_some_and(|c| c.contains(marker)))
            .filter(|r| r["ended"].is_string())
    })
    .await;
    match row {
        Ok(r) if r["killed_by"] == "stop" => lock(&part.serve_tally).audited += 1,
        _ if part.kills.load(Ordering::Relaxed) != kills => {}
        other => shared.violate(
            Inv::Health,
            format!(
                "hostexecd: the audit row of a server closed by its caller is {} (killed_by \"stop\" expected)",
                other.map_or("missing".to_string(), |r| r.to_string())
            ),
        ),
    }
}

/// `POST /serve` upgraded: the server's stream.
async fn open(part: &HostexecPart, chat: &str, marker: &str) -> anyhow::Result<reqwest::Upgraded> {
    let client = reqwest::Client::builder()
        .unix_socket(part.socket.clone())
        .build()?;
    let body = json!({"chat_id": chat, "command": "sh", "args": ["-c", SCRIPT, marker]});
    let response = tokio::time::timeout(
        Duration::from_secs(10),
        client
            .post("http://hostexecd/serve")
            .header("Connection", "Upgrade")
            .header("Upgrade", "tandem-stdio")
            .json(&body)
            .send(),
    )
    .await??;
    anyhow::ensure!(
        response.status() == reqwest::StatusCode::SWITCHING_PROTOCOLS,
        "answered {}",
        response.status()
    );
    Ok(response.upgrade().await?)
}

/// Sends up to `lines` lines, `between` apart while the load lasts, and
/// reads each back from the stdout frames; how many were echoed.
async fn talk(
    stream: &mut reqwest::Upgraded,
    lines: u32,
    between: Duration,
    phase: &mut watch::Receiver<Phase>,
) -> anyhow::Result<u32> {
    let mut demux = Demux::default();
    let mut buffer = vec![0u8; 4096];
    for n in 0..lines {
        if n > 0 && !sleep_in(phase, between, |p| p == Phase::Load).await {
            return Ok(n);
        }
        let line = format!("soak line {n}\n");
        stream.write_all(line.as_bytes()).await?;
        let mut got = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), async {
            while !got.ends_with(b"\n") {
                let read = stream.read(&mut buffer).await?;
                anyhow::ensure!(read > 0, "the stream ended");
                for (which, bytes) in demux.push(&buffer[..read]) {
                    anyhow::ensure!(
                        which == 1,
                        "stream {which}: {}",
                        String::from_utf8_lossy(&bytes)
                    );
                    got.extend_from_slice(&bytes);
                }
            }
            Ok(())
        })
        .await;
        read.map_err(|_| anyhow::anyhow!("no echo within 10 s"))??;
        anyhow::ensure!(
            got == line.as_bytes(),
            "echoed {:?}",
            String::from_utf8_lossy(&got)
        );
    }
    Ok(lines)
}
