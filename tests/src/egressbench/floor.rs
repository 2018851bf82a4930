//! `bench --egress-floor`: the bare relay floor of the throughput figures
//! (CONNECT, two copying threads), and its handle in the bench.

use super::*;

/// `bench --egress-floor`, the floor of the throughput figures: the least
/// a relay in its own process costs on this machine. It takes `CONNECT
/// ip:port` (nothing checked), connects, answers 200, and copies each
/// direction on its own thread with 256 KiB reads and blocking writes: no
/// async runtime, no policy, no audit. It prints its port on the first line.
pub fn serve_floor() -> anyhow::Result<()> {
    use std::io::Write as _;
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "listening on 127.0.0.1:{}",
        listener.local_addr()?.port()
    )?;
    out.flush()?;
    drop(out);
    for client in listener.incoming() {
        let Ok(client) = client else { continue };
        std::thread::spawn(move || {
            let _ = floor_one(client);
        });
    }
    Ok(())
}

pub(super) fn floor_one(mut client: std::net::TcpStream) -> anyhow::Result<()> {
    use std::io::{Read as _, Write as _};
    client.set_nodelay(true)?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = client.read(&mut buf)?;
        ensure!(n > 0 && head.len() < 16 * 1024, "no request head");
        head.extend_from_slice(&buf[..n]);
    }
    let target = head.split(|b| *b == b' ').nth(1).unwrap_or_default();
    let target: std::net::SocketAddr = std::str::from_utf8(target)?.parse()?;
    let upstream = std::net::TcpStream::connect(target)?;
    upstream.set_nodelay(true)?;
    client.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")?;
    let (client_up, upstream_up) = (client.try_clone()?, upstream.try_clone()?);
    let up = std::thread::spawn(move || pump(client_up, upstream_up));
    pump(upstream, client);
    let _ = up.join();
    Ok(())
}

/// Copies until the end of `from`, then ends `to`'s writing side.
pub(super) fn pump(mut from: std::net::TcpStream, mut to: std::net::TcpStream) {
    use std::io::{Read as _, Write as _};
    let mut buf = vec![0u8; CHUNK];
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 || to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

/// The floor relay as a child process (this executable, `--egress-floor`).
pub struct Floor {
    proc: Proc,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl Floor {
    pub fn start() -> anyhow::Result<Floor> {
        use std::io::BufRead as _;
        let dir = tempfile::tempdir()?;
        let log = dir.path().join("floor.err");
        let mut child = Command::new(std::env::current_exe()?)
            .arg("--egress-floor")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .context("starting the floor relay (bench --egress-floor)")?;
        let stdout = child.stdout.take().context("the floor relay's stdout")?;
        let proc = Proc {
            child,
            name: "the floor relay",
            log,
        };
        // Its first line names the port; the read ends when it prints it or exits.
        let mut first = String::new();
        std::io::BufReader::new(stdout).read_line(&mut first)?;
        let port = first
            .trim()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .with_context(|| format!("the floor relay printed {first:?}"))?;
        Ok(Floor {
            proc,
            port,
            _dir: dir,
        })
    }

    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }
}

// Measuring
