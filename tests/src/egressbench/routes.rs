//! The ways to the origin (direct TCP, a CONNECT proxy, egressd's chat
//! socket or listener with a token) and the transfers and CONNECT rates
//! measured over each.

use super::*;

/// A byte stream of any kind.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// How the client reaches the origin.
#[derive(Clone, Debug)]
pub enum Route {
    /// TCP straight to the origin.
    Direct,
    /// `CONNECT` on a chat's unix socket.
    ChatSocket(PathBuf),
    /// `CONNECT` on egressd's loopback listener, with `Proxy-Authorization`.
    Listener { port: u16, auth: String },
    /// `CONNECT` on tinyproxy.
    Tinyproxy(u16),
    /// `CONNECT` on the bare relay floor (`bench --egress-floor`).
    Floor(u16),
}

impl Route {
    pub fn name(&self) -> &'static str {
        match self {
            Route::Direct => "direct",
            Route::ChatSocket(_) => "egressd chat socket",
            Route::Listener { .. } => "egressd listener + token",
            Route::Tinyproxy(_) => "tinyproxy",
            Route::Floor(_) => "bare relay floor",
        }
    }

    /// Connects and, through a proxy, opens a tunnel to the origin.
    pub async fn open(&self, origin: u16) -> anyhow::Result<Box<dyn Io>> {
        match self {
            Route::Direct => {
                let s = TcpStream::connect((ORIGIN_IP, origin)).await?;
                s.set_nodelay(true)?;
                Ok(Box::new(s))
            }
            Route::ChatSocket(path) => {
                let mut s = UnixStream::connect(path)
                    .await
                    .with_context(|| format!("connecting to {}", path.display()))?;
                tunnel(&mut s, origin, None).await?;
                Ok(Box::new(s))
            }
            Route::Listener { port, auth } => {
                let mut s = TcpStream::connect(("127.0.0.1", *port)).await?;
                s.set_nodelay(true)?;
                tunnel(&mut s, origin, Some(auth)).await?;
                Ok(Box::new(s))
            }
            Route::Tinyproxy(port) | Route::Floor(port) => {
                let mut s = TcpStream::connect(("127.0.0.1", *port)).await?;
                s.set_nodelay(true)?;
                tunnel(&mut s, origin, None).await?;
                Ok(Box::new(s))
            }
        }
    }
}

/// Sends `CONNECT` and reads the proxy's answer up to its blank line.
pub(super) async fn tunnel<S: Io>(
    s: &mut S,
    origin: u16,
    auth: Option<&str>,
) -> anyhow::Result<()> {
    let mut head =
        format!("CONNECT {ORIGIN_IP}:{origin} HTTP/1.1\r\nHost: {ORIGIN_IP}:{origin}\r\n");
    if let Some(auth) = auth {
        head.push_str(&format!("Proxy-Authorization: {auth}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).await?;
    let mut got = Vec::with_capacity(256);
    let mut buf = [0u8; 512];
    loop {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            bail!(
                "the proxy closed before it answered the CONNECT ({:?})",
                String::from_utf8_lossy(&got)
            );
        }
        got.extend_from_slice(&buf[..n]);
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let status = got.split(|b| *b == b' ').nth(1).unwrap_or_default();
            ensure!(
                status == b"200",
                "CONNECT answered {:?}",
                String::from_utf8_lossy(&got).trim_end()
            );
            // The origin speaks only when asked: nothing may follow the head.
            ensure!(end + 4 == got.len(), "bytes after the proxy's 200");
            return Ok(());
        }
        ensure!(got.len() < 16 * 1024, "the proxy's answer has no end");
    }
}

/// The origin writes `bytes`; the client reads and counts them. The time
/// runs from the connect to the last byte.
pub async fn download(route: &Route, origin: u16, bytes: u64) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let mut s = route.open(origin).await?;
    s.write_all(format!("down {bytes}\n").as_bytes()).await?;
    let mut buf = vec![0u8; CHUNK];
    let mut got = 0u64;
    while got < bytes {
        let n = s.read(&mut buf).await?;
        ensure!(n > 0, "the stream ended after {got} of {bytes} bytes");
        got += n as u64;
    }
    let took = started.elapsed();
    ensure!(got == bytes, "{got} bytes came for {bytes}");
    Ok(took)
}

/// The client writes `bytes`; the time runs until the origin says it has them all.
pub async fn upload(route: &Route, origin: u16, bytes: u64) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let mut s = route.open(origin).await?;
    s.write_all(format!("up {bytes}\n").as_bytes()).await?;
    let mut left = bytes;
    while left > 0 {
        let n = left.min(CHUNK as u64) as usize;
        s.write_all(&BLOCK[..n]).await?;
        left -= n as u64;
    }
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).await?;
    let took = started.elapsed();
    ensure!(answer == b"ok\n", "the origin answered {answer:?}");
    Ok(took)
}

/// One new connection: connect, CONNECT, `ping`/`pong`, close.
pub(super) async fn ping(route: &Route, origin: u16) -> anyhow::Result<()> {
    let mut s = route.open(origin).await?;
    s.write_all(b"ping\n").await?;
    let mut answer = Vec::with_capacity(8);
    s.read_to_end(&mut answer).await?;
    ensure!(answer == b"pong\n", "the origin answered {answer:?}");
    Ok(())
}

/// `count` new connections made by `clients` at once; the wall time.
pub async fn connections(
    route: &Route,
    origin: u16,
    count: usize,
    clients: usize,
) -> anyhow::Result<Duration> {
    let left = Arc::new(AtomicUsize::new(count));
    let started = Instant::now();
    let tasks = (0..clients).map(|_| {
        let (route, left) = (route.clone(), left.clone());
        tokio::spawn(async move {
            while left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
            {
                ping(&route, origin).await?;
            }
            Ok::<_, anyhow::Error>(())
        })
    });
    for done in join_all(tasks).await {
        done??;
    }
    Ok(started.elapsed())
}

// The proxies as real processes
