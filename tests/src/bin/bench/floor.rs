//! The relay floor: what a bare fan-out achieves on this machine. A child
//! process (this binary with `--floor-of SIM_PORT`) reads the engine's
//! stream and writes each token, framed as chatd frames it, to every
//! attached device: one shared buffer, one task wake-up and one write per
//! device per token; no database, no HTTP framework.

use super::*;
use bytes::Bytes;
use tokio::sync::broadcast;

/// The child process, killed on drop.
pub struct Floor {
    child: std::process::Child,
    pub port: u16,
}

impl Floor {
    pub fn start(sim_port: u16) -> anyhow::Result<Floor> {
        use std::io::BufRead as _;
        let mut child = std::process::Command::new(std::env::current_exe()?)
            .arg("--floor-of")
            .arg(sim_port.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .context("starting the relay floor")?;
        let mut line = String::new();
        let stdout = child.stdout.take().context("floor stdout")?;
        std::io::BufReader::new(stdout).read_line(&mut line)?;
        let port = line.trim().rsplit(':').next().and_then(|p| p.parse().ok());
        let port = port.with_context(|| format!("the floor printed {line:?}"))?;
        Ok(Floor { child, port })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Floor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn chunk(frame: String) -> Bytes {
    Bytes::from(format!("{:x}\r\n{frame}\r\n", frame.len()))
}

/// Serves devices and `GET /go?tokens=N&tps=F` (which streams one answer
/// to them all); exits by itself after ten minutes.
pub async fn serve(sim_port: u16) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    say(format!("floor listening on {}", listener.local_addr()?));
    let (tx, _) = broadcast::channel::<Bytes>(16_384);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
    loop {
        let (sock, _) = tokio::select! {
            accepted = listener.accept() => accepted?,
            _ = tokio::time::sleep_until(deadline) => return Ok(()),
        };
        sock.set_nodelay(true)?;
        let tx = tx.clone();
        tokio::spawn(async move {
            let _ = connection(sock, tx, sim_port).await;
        });
    }
}

async fn connection(
    mut sock: TcpStream,
    tx: broadcast::Sender<Bytes>,
    sim_port: u16,
) -> anyhow::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while find(&head, b"\r\n\r\n").is_none() {
        let n = sock.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&head)
        .lines()
        .next()
        .unwrap_or("")
        .to_string();
    if let Some(query) = line.strip_prefix("GET /go?") {
        let arg = |key: &str| {
            query
                .split(['&', ' '])
                .find_map(|kv| kv.strip_prefix(key))
                .unwrap_or("")
                .to_string()
        };
        let (tokens, tps) = (arg("tokens="), arg("tps="));
        let body = json!({"model": "sim-small", "stream": true, "messages": [{"role": "user",
            "content": format!("[sim tokens={tokens} tps={tps} stamp=1 id=floor{}]", now_micros())}]})
        .to_string();
        let request = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
        let mut s = RawStream::open(sim_port, request.as_bytes(), deadline).await?;
        let (mut seq, mut done) = (0, false);
        while !done {
            s.frames(|frame| {
                const KEY: &[u8] = b"\"content\":\"";
                if let Some(at) = find(frame, KEY) {
                    let rest = &frame[at + KEY.len()..];
                    let end = rest.iter().position(|b| *b == b'"').unwrap_or(rest.len());
                    let text = String::from_utf8_lossy(&rest[..end]);
                    seq += 1;
                    let data = format!("{{\"text\":\"{text}\"}}");
                    let _ = tx.send(chunk(format!(
                        "id: {seq}\nevent: text.delta\ndata: {data}\n\n"
                    )));
                } else if find(frame, b"data: [DONE]").is_some() {
                    done = true;
                }
            });
            if !done && s.read_more(deadline).await?.is_none() {
                break;
            }
        }
        let _ = tx.send(chunk(format!(
            "id: {}\nevent: run.finished\ndata: {{}}\n\n",
            seq + 1
        )));
        sock.write_all(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
            .await?;
        return Ok(());
    }
    let mut rx = tx.subscribe();
    sock.write_all(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
    )
    .await?;
    loop {
        match rx.recv().await {
            Ok(frame) => sock.write_all(&frame).await?,
            Err(broadcast::error::RecvError::Lagged(_)) => continue,
            Err(broadcast::error::RecvError::Closed) => return Ok(()),
        }
    }
}

/// One stamped answer through the floor with `devices` attached.
pub async fn once(
    floor: &Floor,
    devices: usize,
    tokens: usize,
    tps: f64,
) -> anyhow::Result<(Seen, usize)> {
    let request = b"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    let url = format!(
        "http://127.0.0.1:{}/go?tokens={tokens}&tps={tps}",
        floor.port
    );
    let start = async move {
        // The answer to /go comes at the end of the stream: only start it here.
        tokio::spawn(async move { reqwest::get(url).await });
        Ok(())
    };
    attach_and_read(floor.port, request, devices, tokens, tps, start).await
}
