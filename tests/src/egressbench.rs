//! Figure 7 of `bench`: egressd, the real binary, against a direct loopback
//! connection and against tinyproxy, all in the same run.
//!
//! An origin in the bench on 127.0.0.2 speaks a one-line protocol
//! (`down N`: it writes N bytes and closes; `up N`: it reads N bytes and
//! answers `ok`; `ping`: it answers `pong` and closes). The same client
//! reaches it four ways: directly (the baseline), through a chat's unix
//! socket with `CONNECT`, through egressd's loopback listener with `CONNECT`
//! and the chat's token (when the binary has one), and through tinyproxy
//! (when it is installed), started by the bench with its own config.
//! Measured: throughput of a large transfer each way, new CONNECTs a second
//! with a few concurrent clients, and idle RSS. Every wait is bounded; both
//! proxies are stopped on the way out.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use futures_util::future::join_all;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};

use crate::harness::{free_port, wait_until};

/// The origin's address: loopback, but not 127.0.0.1, so egressd opens it
/// only through `allow_ranges` (as a test network would be opened).
pub const ORIGIN_IP: &str = "127.0.0.2";

/// Read and write size of the bench's own ends (origin and client).
const CHUNK: usize = 256 * 1024;

static BLOCK: [u8; CHUNK] = [b'x'; CHUNK];

/// How big the figure's workload is.
#[derive(Debug, Clone)]
pub struct Sizes {
    /// Bytes of each transfer.
    pub bytes: u64,
    /// Repetitions of each transfer (median).
    pub transfer_reps: usize,
    /// New connections per round of the rate test, and rounds (median).
    pub conns: usize,
    pub conn_reps: usize,
    /// Clients connecting at once.
    pub clients: usize,
    /// Chat sockets open while idle RSS is read.
    pub chats: usize,
}

impl Sizes {
    pub fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                bytes: 64 << 20,
                transfer_reps: 1,
                conns: 300,
                conn_reps: 1,
                clients: 2,
                chats: 10,
            }
        } else {
            Sizes {
                bytes: 1 << 30,
                transfer_reps: 5,
                conns: 3_000,
                conn_reps: 5,
                clients: 4,
                chats: 100,
            }
        }
    }
}

/// One line of the bench's final table.
pub struct Line {
    pub figure: String,
    pub measured: String,
    /// The aim and whether it was met.
    pub aim: Option<(String, bool)>,
    /// The baseline and the ratio to it.
    pub baseline: Option<(String, String)>,
}

fn line(figure: impl Into<String>, measured: impl Into<String>) -> Line {
    Line {
        figure: figure.into(),
        measured: measured.into(),
        aim: None,
        baseline: None,
    }
}

// ---------------------------------------------------------------------------
// The origin
// ---------------------------------------------------------------------------

/// The origin server, on 127.0.0.2 in the bench's runtime.
pub struct Origin {
    pub port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Origin {
    pub async fn start() -> anyhow::Result<Origin> {
        let listener = TcpListener::bind((ORIGIN_IP, 0))
            .await
            .with_context(|| format!("binding the origin on {ORIGIN_IP}"))?;
        let port = listener.local_addr()?.port();
        let task = tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((sock, _)) => {
                        tokio::spawn(async move {
                            let _ = serve_origin(sock).await;
                        });
                    }
                    // Out of descriptors or the like: the next accept may work.
                    Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                }
            }
        });
        Ok(Origin { port, task })
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve_origin(mut sock: TcpStream) -> anyhow::Result<()> {
    sock.set_nodelay(true)?;
    let mut buf = vec![0u8; CHUNK];
    let mut have = 0;
    let eol = loop {
        let n = sock.read(&mut buf[have..]).await?;
        if n == 0 {
            return Ok(());
        }
        have += n;
        if let Some(eol) = buf[..have].iter().position(|b| *b == b'\n') {
            break eol;
        }
        ensure!(have < 64, "no command line");
    };
    let command = std::str::from_utf8(&buf[..eol])?.to_string();
    let already = have - eol - 1;
    match command.split_once(' ') {
        Some(("down", n)) => {
            let mut left: u64 = n.parse()?;
            while left > 0 {
                let n = left.min(CHUNK as u64) as usize;
                sock.write_all(&BLOCK[..n]).await?;
                left -= n as u64;
            }
        }
        Some(("up", n)) => {
            let want: u64 = n.parse()?;
            let mut got = already as u64;
            while got < want {
                let n = sock.read(&mut buf).await?;
                ensure!(n > 0, "the upload ended after {got} of {want} bytes");
                got += n as u64;
            }
            sock.write_all(b"ok\n").await?;
        }
        _ if command == "ping" => sock.write_all(b"pong\n").await?,
        _ => bail!("unknown command {command:?}"),
    }
    // The origin closes first (its side keeps the TIME_WAIT, not the client's ports).
    Ok(())
}

// ---------------------------------------------------------------------------
// The ways to the origin
// ---------------------------------------------------------------------------

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
async fn tunnel<S: Io>(s: &mut S, origin: u16, auth: Option<&str>) -> anyhow::Result<()> {
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
async fn ping(route: &Route, origin: u16) -> anyhow::Result<()> {
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

// ---------------------------------------------------------------------------
// The proxies as real processes
// ---------------------------------------------------------------------------

/// A child process with its output in a file; SIGTERM, then SIGKILL on drop.
struct Proc {
    child: Child,
    name: &'static str,
    log: PathBuf,
}

impl Proc {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fails with the process's output if it has exited.
    fn check_running(&mut self) -> anyhow::Result<()> {
        if let Ok(Some(status)) = self.child.try_wait() {
            let output = std::fs::read_to_string(&self.log).unwrap_or_default();
            bail!("{} exited ({status}):\n{}", self.name, output.trim_end());
        }
        Ok(())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `name` next to this executable (or one folder up, from `deps/`).
pub fn sibling_bin(name: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [dir.join(name), dir.parent()?.join(name)]
        .into_iter()
        .find(|p| p.is_file())
}

/// `tinyproxy` on the PATH (or in /usr/sbin, /usr/bin).
pub fn tinyproxy_bin() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|d| d.join("tinyproxy"))
        .find(|p| p.is_file())
}

/// One HTTP/1.1 request on a unix socket: (status, body).
async fn unix_call(
    socket: &Path,
    method: &str,
    path: &str,
    body: &str,
) -> anyhow::Result<(u16, String)> {
    let call = async {
        let mut s = UnixStream::connect(socket).await?;
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: egressd\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(request.as_bytes()).await?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await?;
        anyhow::Ok(String::from_utf8_lossy(&out).to_string())
    };
    let text = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .with_context(|| format!("{method} {path} took over 10 s"))??;
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// egressd in a temp folder: ceiling `all`, the origin's range and port
/// opened, a secrets file of its own, its loopback listener on a free port.
pub struct Egressd {
    proc: Proc,
    pub api: PathBuf,
    pub listen_port: u16,
    key: String,
    pub dir: tempfile::TempDir,
}

impl Egressd {
    pub async fn start(bin: &Path, origin: u16) -> anyhow::Result<Egressd> {
        let dir = tempfile::tempdir()?;
        let d = dir.path();
        let api = d.join("run/egress.sock");
        let listen_port = free_port();
        let key: String = (0..32)
            .map(|_| format!("{:02x}", rand::random::<u8>()))
            .collect();
        let secrets = d.join("secrets.env");
        crate::harness::write_private(&secrets, &format!("QSE_FORWARD_KEY={key}\n"))?;
        std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o600))?;
        let config = d.join("tandem.toml");
        std::fs::write(
            &config,
            format!(
                "[egress]\ndata_dir = \"{}\"\nchat_data = \"{}\"\nsocket = \"{}\"\n\
                 ceiling = \"all\"\nports = [{origin}]\nallow_ranges = [\"{ORIGIN_IP}/32\"]\n\
                 listen = \"127.0.0.1:{listen_port}\"\nsecrets = \"{}\"\n",
                d.join("egress").display(),
                d.join("chat").display(),
                api.display(),
                secrets.display()
            ),
        )?;
        let log = d.join("egressd.out");
        // Its log goes where a daemon's goes outside systemd: a file under HOME.
        let child = Command::new(bin)
            .arg("--config")
            .arg(&config)
            .current_dir(d)
            .env_clear()
            .env("HOME", d)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log)?)
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut egressd = Egressd {
            proc: Proc {
                child,
                name: "egressd",
                log,
            },
            api,
            listen_port,
            key,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            egressd.proc.check_running()?;
            if UnixStream::connect(&egressd.api).await.is_ok() {
                break;
            }
            ensure!(
                Instant::now() < deadline,
                "egressd's API socket did not answer within 10 s"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(egressd)
    }

    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// Sets a chat's preset to `all`; its socket, once it answers.
    pub async fn open_chat(&self, chat: &str) -> anyhow::Result<PathBuf> {
        let (status, body) = unix_call(
            &self.api,
            "PUT",
            &format!("/chats/{chat}/egress"),
            r#"{"preset":"all"}"#,
        )
        .await?;
        ensure!(status == 200, "PUT /chats/{chat}/egress: {status} {body}");
        let answer: serde_json::Value = serde_json::from_str(&body)?;
        ensure!(answer["effective"] == "all", "{chat} is not open: {body}");
        let socket = PathBuf::from(answer["socket"].as_str().context("no socket")?);
        wait_until(
            &format!("{} to answer", socket.display()),
            Duration::from_secs(5),
            || async { UnixStream::connect(&socket).await.ok().map(|_| ()) },
        )
        .await?;
        Ok(socket)
    }

    /// `Proxy-Authorization` of a chat on the loopback listener.
    pub fn auth(&self, chat: &str) -> String {
        use base64::Engine;
        let key = tandem_shared::secrets::Secret::new(self.key.clone());
        let token = tandem_shared::secrets::egress_token(&key, chat);
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{chat}:{token}"))
        )
    }

    /// Whether the loopback listener answers (a binary without one: no).
    pub async fn listener_answers(&self) -> bool {
        wait_until("egressd's listener", Duration::from_secs(2), || async {
            TcpStream::connect(("127.0.0.1", self.listen_port))
                .await
                .ok()
                .map(|_| ())
        })
        .await
        .is_ok()
    }

    /// The number of audit rows of `chat` (at most 1000).
    pub async fn audited(&self, chat: &str) -> anyhow::Result<usize> {
        let (status, body) = unix_call(
            &self.api,
            "GET",
            &format!("/audit?chat={chat}&limit=1000"),
            "",
        )
        .await?;
        ensure!(status == 200, "GET /audit: {status} {body}");
        let answer: serde_json::Value = serde_json::from_str(&body)?;
        Ok(answer["audit"].as_array().map(Vec::len).unwrap_or(0))
    }
}

/// tinyproxy in the foreground with a config of the bench's: loopback only,
/// CONNECT to the origin's port only, its log to a file at `Error`.
pub struct Tinyproxy {
    proc: Proc,
    pub port: u16,
    pub dir: tempfile::TempDir,
}

impl Tinyproxy {
    pub async fn start(bin: &Path, origin: u16) -> anyhow::Result<Tinyproxy> {
        let dir = tempfile::tempdir()?;
        let d = dir.path();
        let port = free_port();
        let config = d.join("tinyproxy.conf");
        std::fs::write(
            &config,
            format!(
                "Port {port}\nListen 127.0.0.1\nTimeout 600\nAllow 127.0.0.1\nConnectPort {origin}\n\
                 MaxClients 1024\nLogLevel Error\nLogFile \"{}\"\nDisableViaHeader Yes\n",
                d.join("tinyproxy.log").display()
            ),
        )?;
        let log = d.join("tinyproxy.out");
        let child = Command::new(bin)
            .arg("-d")
            .arg("-c")
            .arg(&config)
            .current_dir(d)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log)?)
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut tp = Tinyproxy {
            proc: Proc {
                child,
                name: "tinyproxy",
                log,
            },
            port,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            tp.proc.check_running()?;
            if TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                break;
            }
            ensure!(
                Instant::now() < deadline,
                "tinyproxy did not listen on 127.0.0.1:{port} within 10 s"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(tp)
    }

    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }
}

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

fn floor_one(mut client: std::net::TcpStream) -> anyhow::Result<()> {
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
fn pump(mut from: std::net::TcpStream, mut to: std::net::TcpStream) {
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

// ---------------------------------------------------------------------------
// Measuring
// ---------------------------------------------------------------------------

/// Resident memory of a process in KiB (`VmRSS`).
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// CPU seconds (user + system) a process has used so far (USER_HZ = 100).
pub fn cpu_secs(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let Some(close) = stat.rfind(')') else {
        return 0.0;
    };
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

fn median_f(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

fn size(bytes: u64) -> String {
    if bytes >= 1 << 30 && bytes.is_multiple_of(1 << 30) {
        format!("{} GiB", bytes >> 30)
    } else {
        format!("{} MiB", bytes >> 20)
    }
}

/// What one route measured.
#[derive(Default)]
struct Measured {
    down: Vec<f64>,
    up: Vec<f64>,
    rate: Vec<f64>,
    /// The relay's CPU seconds over its transfers and over its connections.
    transfer_cpu: f64,
    conn_cpu: f64,
}

/// A route the figure measures, with the process behind it (none for direct).
struct Way {
    route: Route,
    pid: Option<u32>,
    /// Whether the connection rate is measured too (not for the floor relay,
    /// which starts two threads a connection: a floor for bytes only).
    rate: bool,
    m: Measured,
}

impl Way {
    fn new(route: Route, pid: Option<u32>) -> Way {
        let rate = !matches!(route, Route::Floor(_));
        Way {
            route,
            pid,
            rate,
            m: Measured::default(),
        }
    }
}

/// Which of a way's samples: downloads, uploads or connection rates.
type Pick = fn(&Measured) -> &Vec<f64>;

/// The medians the table reads.
struct Medians<'a> {
    ways: &'a [Way],
}

impl Medians<'_> {
    fn of(&self, name: &str, pick: Pick) -> Option<f64> {
        self.ways
            .iter()
            .find(|w| w.route.name() == name)
            .map(|w| pick(&w.m))
            .filter(|v| !v.is_empty())
            .map(|v| median_f(v.clone()))
    }
}

const EGRESSD_WAYS: [&str; 2] = ["egressd chat socket", "egressd listener + token"];

/// The machine's load average (1, 5, 15 min), to tell a quiet run from a busy one.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// Runs figure 7; `say` prints a progress line.
pub async fn figure(sizes: &Sizes, say: &dyn Fn(String)) -> anyhow::Result<Vec<Line>> {
    let Some(egressd_bin) = sibling_bin("egressd") else {
        bail!("egressd is not built next to bench: `cargo build --release -p egressd -p tandem-tests`");
    };
    let release = egressd_bin.components().any(|c| c.as_os_str() == "release");
    say(format!(
        "egressd: {} ({}); load average {}; origin on {ORIGIN_IP}; {} each way × {} round(s); \
         {} new connections × {} round(s), {} clients at once",
        egressd_bin.display(),
        if release {
            "release build"
        } else {
            "not a release build: the figures mean little"
        },
        loadavg(),
        size(sizes.bytes),
        sizes.transfer_reps,
        sizes.conns,
        sizes.conn_reps,
        sizes.clients
    ));
    let origin = Origin::start().await?;
    let egressd = Egressd::start(&egressd_bin, origin.port).await?;
    let egressd_pid = egressd.pid();
    let egressd_empty = rss_kib(egressd_pid).context("egressd's VmRSS")?;
    let chats = sizes.chats.max(1);
    let mut chat_socket = PathBuf::new();
    for i in 0..chats {
        let socket = egressd.open_chat(&format!("c_bench{i:03}")).await?;
        if i == 0 {
            chat_socket = socket;
        }
    }
    let egressd_idle = rss_kib(egressd_pid).context("egressd's VmRSS")?;
    say(format!(
        "egressd pid {egressd_pid}: RSS {} with no chat, {} with {chats} chat sockets open",
        mib(egressd_empty),
        mib(egressd_idle),
    ));

    let mut ways = vec![
        Way::new(Route::Direct, None),
        Way::new(Route::ChatSocket(chat_socket), Some(egressd_pid)),
    ];
    // (c): only when this egressd has its loopback listener.
    let listener_missing = if egressd.listener_answers().await {
        let route = Route::Listener {
            port: egressd.listen_port,
            auth: egressd.auth("c_bench000"),
        };
        match download(&route, origin.port, 1 << 20).await {
            Ok(_) => {
                ways.push(Way::new(route, Some(egressd_pid)));
                None
            }
            Err(e) => Some(format!(
                "its listener refused the bench's CONNECT + token: {e:#}"
            )),
        }
    } else {
        Some(format!(
            "this egressd does not listen on 127.0.0.1:{} ([egress] listen)",
            egressd.listen_port
        ))
    };
    if let Some(why) = &listener_missing {
        say(format!("egressd listener + token: not available: {why}"));
    }
    let tinyproxy = match tinyproxy_bin() {
        Some(bin) => Some(Tinyproxy::start(&bin, origin.port).await?),
        None => {
            say(
                "tinyproxy is not installed (apt-get install tinyproxy): its rows are skipped"
                    .into(),
            );
            None
        }
    };
    let tinyproxy_idle = tinyproxy.as_ref().and_then(|t| rss_kib(t.pid()));
    if let Some(tp) = &tinyproxy {
        say(format!(
            "tinyproxy pid {}: RSS {} idle",
            tp.pid(),
            mib(tinyproxy_idle.unwrap_or(0))
        ));
        ways.push(Way::new(Route::Tinyproxy(tp.port), Some(tp.pid())));
    }
    let floor = Floor::start()?;
    ways.push(Way::new(Route::Floor(floor.port), Some(floor.pid())));

    // Warm-up: every way works before anything is timed.
    for way in &ways {
        download(&way.route, origin.port, 8 << 20)
            .await
            .with_context(|| format!("warm-up download via {}", way.route.name()))?;
        upload(&way.route, origin.port, 8 << 20)
            .await
            .with_context(|| format!("warm-up upload via {}", way.route.name()))?;
    }

    // 1. Throughput, the ways taking turns in each round.
    let bound = Duration::from_secs(120);
    let per_mib = |d: Duration| sizes.bytes as f64 / f64::from(1 << 20) / d.as_secs_f64();
    for round in 0..sizes.transfer_reps {
        for way in &mut ways {
            let name = way.route.name();
            let cpu = way.pid.map(cpu_secs).unwrap_or(0.0);
            let down = tokio::time::timeout(bound, download(&way.route, origin.port, sizes.bytes))
                .await
                .with_context(|| format!("a download via {name} took over {bound:?}"))?
                .with_context(|| format!("download via {name}"))?;
            let up = tokio::time::timeout(bound, upload(&way.route, origin.port, sizes.bytes))
                .await
                .with_context(|| format!("an upload via {name} took over {bound:?}"))?
                .with_context(|| format!("upload via {name}"))?;
            way.m.transfer_cpu += way.pid.map(cpu_secs).unwrap_or(0.0) - cpu;
            way.m.down.push(per_mib(down));
            way.m.up.push(per_mib(up));
            say(format!(
                "round {}: {name:<26} down {:>6.0} MiB/s, up {:>6.0} MiB/s",
                round + 1,
                per_mib(down),
                per_mib(up)
            ));
        }
    }

    // 2. New connections a second.
    let bound = Duration::from_secs(60);
    for round in 0..sizes.conn_reps {
        for way in ways.iter_mut().filter(|w| w.rate) {
            let name = way.route.name();
            let cpu = way.pid.map(cpu_secs).unwrap_or(0.0);
            let took = tokio::time::timeout(
                bound,
                connections(&way.route, origin.port, sizes.conns, sizes.clients),
            )
            .await
            .with_context(|| format!("{} connections via {name} took over {bound:?}", sizes.conns))?
            .with_context(|| format!("connections via {name}"))?;
            way.m.conn_cpu += way.pid.map(cpu_secs).unwrap_or(0.0) - cpu;
            let rate = sizes.conns as f64 / took.as_secs_f64();
            way.m.rate.push(rate);
            say(format!(
                "round {}: {name:<26} {rate:>6.0} new connections/s",
                round + 1
            ));
        }
    }
    let egressd_after = rss_kib(egressd_pid).unwrap_or(0);
    let tinyproxy_after = tinyproxy.as_ref().and_then(|t| rss_kib(t.pid()));
    match egressd.audited("c_bench000").await {
        Ok(n) => say(format!(
            "egressd audit: {n} rows for c_bench000 (at most 1000 read)"
        )),
        Err(e) => say(format!("egressd audit: could not be read: {e:#}")),
    }
    let gib = (sizes.transfer_reps * 2) as f64 * sizes.bytes as f64 / (1u64 << 30) as f64;
    let conns = (sizes.conn_reps * sizes.conns) as f64;
    for way in &ways {
        let Some(pid) = way.pid else { continue };
        let mut text = format!(
            "{}: CPU {:.2} s per GiB relayed",
            way.route.name(),
            way.m.transfer_cpu / gib
        );
        if way.rate {
            text.push_str(&format!(
                ", {:.0} µs per connection",
                way.m.conn_cpu / conns * 1e6
            ));
        }
        say(format!("{text} (pid {pid})"));
    }
    say(format!("load average after: {}", loadavg()));
    let lines = table(
        &Medians { ways: &ways },
        sizes,
        listener_missing.as_deref(),
        (egressd_empty, egressd_idle, egressd_after),
        tinyproxy_idle.map(|t| (t, tinyproxy_after.unwrap_or(0))),
    );
    drop(floor);
    drop(tinyproxy);
    drop(egressd);
    drop(origin);
    Ok(lines)
}

/// The figure's lines of the final table.
fn table(
    med: &Medians,
    sizes: &Sizes,
    listener_missing: Option<&str>,
    egressd_rss: (u64, u64, u64),
    tinyproxy_rss: Option<(u64, u64)>,
) -> Vec<Line> {
    let missing = |name: &str| match name {
        "tinyproxy" => "not installed".to_string(),
        _ => listener_missing.unwrap_or_default().to_string(),
    };
    let mut lines = Vec::new();
    let n = sizes.transfer_reps;
    let picks: [(&str, Pick); 2] = [("download", |m| &m.down), ("upload", |m| &m.up)];
    for (dir, pick) in picks {
        let direct = med.of("direct", pick).unwrap_or(0.0);
        let tiny = med.of("tinyproxy", pick);
        let floor = med.of("bare relay floor", pick);
        for name in EGRESSD_WAYS
            .into_iter()
            .chain(["tinyproxy", "bare relay floor"])
        {
            let figure = format!("7. {dir} {} via {name} (CONNECT)", size(sizes.bytes));
            let Some(v) = med.of(name, pick) else {
                lines.push(line(figure, format!("not available: {}", missing(name))));
                continue;
            };
            let mut l = line(figure, format!("{v:.0} MiB/s (median of {n})"));
            let of_direct = v / direct.max(1e-9);
            let mut ratio = format!("{:.0} % of direct", of_direct * 100.0);
            if EGRESSD_WAYS.contains(&name) {
                if let Some(f) = floor {
                    ratio.push_str(&format!("; {:.0} % of the floor", v / f.max(1e-9) * 100.0));
                }
                if let Some(t) = tiny {
                    ratio.push_str(&format!("; ×{:.2} tinyproxy", v / t.max(1e-9)));
                }
                l.aim = Some((
                    "≥ 90 % of direct, ahead of tinyproxy".into(),
                    of_direct >= 0.9 && tiny.is_none_or(|t| v > t),
                ));
            }
            l.baseline = Some((format!("direct loopback TCP {direct:.0} MiB/s"), ratio));
            lines.push(l);
        }
    }
    let direct = med.of("direct", |m| &m.rate).unwrap_or(0.0);
    let tiny = med.of("tinyproxy", |m| &m.rate);
    for name in EGRESSD_WAYS.into_iter().chain(["tinyproxy"]) {
        let figure = format!(
            "7. new CONNECTs/s via {name} ({} clients; ping, close)",
            sizes.clients
        );
        let Some(v) = med.of(name, |m| &m.rate) else {
            lines.push(line(figure, format!("not available: {}", missing(name))));
            continue;
        };
        let mut l = line(
            figure,
            format!(
                "{v:.0}/s (median of {}, {} each)",
                sizes.conn_reps, sizes.conns
            ),
        );
        let of_direct = format!("{:.0} % of direct", v / direct.max(1e-9) * 100.0);
        let direct_text = format!("direct TCP, no proxy, {direct:.0}/s");
        l.baseline = Some(match tiny {
            Some(t) if name != "tinyproxy" => {
                l.aim = Some(("ahead of tinyproxy".into(), v > t));
                (
                    format!("tinyproxy {t:.0}/s; {direct_text}"),
                    format!("×{:.2} tinyproxy; {of_direct}", v / t.max(1e-9)),
                )
            }
            _ => (direct_text, of_direct),
        });
        lines.push(l);
    }
    let (empty, idle, after) = egressd_rss;
    let mut l = line(
        format!(
            "7. egressd RSS idle, {} chat sockets open",
            sizes.chats.max(1)
        ),
        format!(
            "{} (no chat {}; after the runs {})",
            mib(idle),
            mib(empty),
            mib(after)
        ),
    );
    l.baseline = Some(match tinyproxy_rss {
        Some((t, t_after)) => (
            format!(
                "tinyproxy idle {} (after the runs {})",
                mib(t),
                mib(t_after)
            ),
            format!("×{:.2}", idle as f64 / t.max(1) as f64),
        ),
        None => ("tinyproxy: not installed".into(), "—".into()),
    });
    lines.push(l);
    lines
}
