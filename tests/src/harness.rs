//! Runs the real binaries for tests and benchmarks: each daemon in its own
//! temp folder on a free loopback port, waited on by polling `/health` with a
//! deadline (never a fixed sleep), stopped with SIGTERM then SIGKILL on drop,
//! and its log's tail shown when the test failed (`daemon::show_log`).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures_util::StreamExt;
use serde_json::{json, Value};

pub use crate::daemon::bin_dir;
use crate::daemon::show_log;

/// The forward key every test chatd is given.
pub const FORWARD_KEY: &str = "test-forward-key-0123456789";

/// Writes `text` to `path` with mode 0600, as ops/make-secrets.sh makes a
/// secrets file (the daemons refuse one that others may read).
pub fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("making {} 0600", path.display()))
}

/// A free loopback port (bound, then released for the daemon to take).
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binding a loopback port");
    listener
        .local_addr()
        .expect("a bound socket has an address")
        .port()
}

/// Polls `check` until it returns `Some`, failing after `bound`.
pub async fn wait_until<T, F, Fut>(what: &str, bound: Duration, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + bound;
    let mut pause = Duration::from_millis(5);
    loop {
        if let Some(value) = check().await {
            return Ok(value);
        }
        if Instant::now() >= deadline {
            bail!("timed out after {bound:?} waiting for {what}");
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

fn terminate(child: &mut Child, bound: Duration) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    let deadline = Instant::now() + bound;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// How a process that ended on its own ended, and what it said on stderr.
#[derive(Debug)]
pub struct Ended {
    pub status: std::process::ExitStatus,
    pub stderr: String,
}

/// Runs `command` (stdin and stdout closed, stderr kept) until it ends;
/// fails, killing it, when it still runs after `bound`.
pub async fn run_to_end(command: Command, bound: Duration) -> anyhow::Result<Ended> {
    use tokio::io::AsyncReadExt as _;
    let mut child = tokio::process::Command::from(command)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("starting the process")?;
    let mut stderr = child.stderr.take().context("stderr is piped")?;
    // Read beside the wait, so a chatty process never blocks on a full pipe.
    let reader = tokio::spawn(async move {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text).await;
        text
    });
    let Ok(status) = tokio::time::timeout(bound, child.wait()).await else {
        // `kill` also reaps it, which closes its end of the pipe.
        let _ = child.kill().await;
        let said = reader.await.unwrap_or_default();
        bail!("the process still ran after {bound:?}; its stderr:\n{said}");
    };
    let status = status?;
    let stderr = reader.await.unwrap_or_default();
    Ok(Ended { status, stderr })
}

/// The engine simulator as a real process.
pub struct Sim {
    child: Option<Child>,
    pub port: u16,
    args: Vec<String>,
}

impl Sim {
    /// Starts `engine-sim` on a free port with extra `args`.
    pub fn start(args: &[&str]) -> anyhow::Result<Sim> {
        let mut sim = Sim {
            child: None,
            port: 0,
            args: args.iter().map(|s| s.to_string()).collect(),
        };
        sim.spawn("127.0.0.1:0")?;
        Ok(sim)
    }

    fn spawn(&mut self, listen: &str) -> anyhow::Result<()> {
        let mut child = Command::new(bin_dir().join("engine-sim"))
            .arg("--listen")
            .arg(listen)
            .args(&self.args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting engine-sim")?;
        let stdout = child.stdout.take().context("engine-sim stdout")?;
        // The first line names the address; reading it blocks only until the
        // sim prints it (or exits, which ends the read).
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let addr = line
            .trim()
            .rsplit("http://")
            .next()
            .filter(|_| line.contains("listening"))
            .with_context(|| format!("engine-sim printed {line:?}"))?;
        self.port = addr
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .context("engine-sim port")?;
        self.child = Some(child);
        Ok(())
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// SIGKILL: the engine dies as a crashed one does.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill();
        let listen = format!("127.0.0.1:{}", self.port);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.spawn(&listen) {
                Ok(()) => return Ok(()),
                Err(err) if Instant::now() < deadline => {
                    let _ = err;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// Queues faults for the next chat requests (`POST /sim/faults`).
    pub async fn faults(&self, next: Value) -> anyhow::Result<()> {
        let response = reqwest::Client::new()
            .post(format!("{}/sim/faults", self.url()))
            .json(&json!({"next": next}))
            .send()
            .await?;
        if !response.status().is_success() {
            bail!("sim refused the faults: {}", response.text().await?);
        }
        Ok(())
    }

    /// POSTs `body` to one of the sim's routes; answers its JSON.
    pub async fn post(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        let response = reqwest::Client::new()
            .post(format!("{}{path}", self.url()))
            .json(&body)
            .send()
            .await?;
        anyhow::ensure!(
            response.status().is_success(),
            "sim {path}: {}",
            response.status()
        );
        Ok(response.json().await?)
    }

    /// GETs one of the sim's routes; answers its JSON.
    pub async fn get(&self, path: &str) -> anyhow::Result<Value> {
        Ok(reqwest::get(format!("{}{path}", self.url()))
            .await?
            .json()
            .await?)
    }

    /// The chat requests the sim received (`GET /sim/requests`).
    pub async fn requests(&self) -> anyhow::Result<Vec<Value>> {
        Ok(reqwest::get(format!("{}/sim/requests", self.url()))
            .await?
            .json()
            .await?)
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            terminate(&mut child, Duration::from_secs(2));
        }
    }
}

/// chatd as a real process in a temp folder.
pub struct Chatd {
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub port: u16,
    /// The front's port (`QSE_CHAT_FRONT`), kept across restarts.
    pub front_port: Option<u16>,
    engine_url: String,
    env: Vec<(String, String)>,
    /// The descriptor limit (soft and hard) chatd starts with, when set.
    nofile: Option<u64>,
}

impl Chatd {
    /// Starts chatd against `engine_url` with extra environment and waits for `/health`.
    pub async fn start(engine_url: &str, env: &[(&str, &str)]) -> anyhow::Result<Chatd> {
        Chatd::start_inner(engine_url, env, None, false, None).await
    }

    /// The same with a front (`QSE_CHAT_FRONT` on a free port: the web page,
    /// the API behind the browser's sign-in, the engine's other routes) and,
    /// when given, `QSE_ADMIN_TOKEN` in the secrets file beside the forward
    /// key; waits for the front to answer too.
    pub async fn start_with_front(
        engine_url: &str,
        env: &[(&str, &str)],
        admin_token: Option<&str>,
    ) -> anyhow::Result<Chatd> {
        Chatd::start_inner(engine_url, env, admin_token, true, None).await
    }

    /// With a front (no admin token) and `nofile` as both the soft and the
    /// hard descriptor limit, so chatd cannot raise it.
    pub async fn start_with_front_and_nofile(
        engine_url: &str,
        env: &[(&str, &str)],
        nofile: u64,
    ) -> anyhow::Result<Chatd> {
        Chatd::start_inner(engine_url, env, None, true, Some(nofile)).await
    }

    async fn start_inner(
        engine_url: &str,
        env: &[(&str, &str)],
        admin_token: Option<&str>,
        front: bool,
        nofile: Option<u64>,
    ) -> anyhow::Result<Chatd> {
        let dir = tempfile::tempdir()?;
        let mut secrets = format!("QSE_FORWARD_KEY={FORWARD_KEY}\n");
        if let Some(token) = admin_token {
            secrets.push_str(&format!("QSE_ADMIN_TOKEN={token}\n"));
        }
        write_private(&dir.path().join("secrets.env"), &secrets)?;
        let port = free_port();
        let front_port = front.then(|| loop {
            let p = free_port();
            if p != port {
                break p;
            }
        });
        let mut env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        if let Some(p) = front_port {
            env.retain(|(k, _)| k != "QSE_CHAT_FRONT");
            env.push(("QSE_CHAT_FRONT".into(), format!("127.0.0.1:{p}")));
        }
        let mut chatd = Chatd {
            child: None,
            dir,
            port,
            front_port,
            engine_url: engine_url.to_string(),
            env,
            nofile,
        };
        chatd.spawn()?;
        chatd.wait_healthy().await?;
        Ok(chatd)
    }

    /// `http://127.0.0.1:<front port>`; panics for a chatd without a front.
    pub fn front_url(&self) -> String {
        let port = self
            .front_port
            .expect("this chatd was started without a front (Chatd::start_with_front)");
        format!("http://127.0.0.1:{port}")
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("chat")
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("chatd.log")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// chatd with this one's data and settings, listening on `port`.
    fn command(&self, port: u16) -> Command {
        let mut command = Command::new(bin_dir().join("chatd"));
        command
            .current_dir(self.dir.path())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.dir.path())
            .env("QSE_CHAT_DATA", self.data_dir())
            .env("QSE_SECRETS", self.dir.path().join("secrets.env"))
            .env("QSE_CHAT_URL", format!("127.0.0.1:{port}"))
            .env("QSE_ENGINE_URL", &self.engine_url)
            .env("QSE_LOG_TO", "stderr")
            .env("QSE_LOG_LEVEL", "info")
            // No runtime unless a test gives one: these tests never touch
            // the box's docker or podman.
            .env(
                "QSE_SANDBOX_SOCKET",
                self.dir.path().join("no-runtime.sock"),
            );
        for (k, v) in &self.env {
            command.env(k, v);
        }
        command
    }

    /// A second chatd on this one's data (on another port, so only the
    /// data can stop it), run until it ends.
    pub async fn run_second(&self, bound: Duration) -> anyhow::Result<Ended> {
        let port = loop {
            let p = free_port();
            if p != self.port && Some(p) != self.front_port {
                break p;
            }
        };
        let mut command = self.command(port);
        // The front's port is this chatd's: the second gets none.
        command.env_remove("QSE_CHAT_FRONT");
        run_to_end(command, bound).await
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())?;
        let mut command = self.command(self.port);
        command
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        if let Some(limit) = self.nofile {
            use std::os::unix::process::CommandExt;
            // SAFETY: setrlimit is async-signal-safe and touches only the
            // child between fork and exec.
            unsafe {
                command.pre_exec(move || {
                    nix::sys::resource::setrlimit(
                        nix::sys::resource::Resource::RLIMIT_NOFILE,
                        limit,
                        limit,
                    )
                    .map_err(std::io::Error::from)
                });
            }
        }
        self.child = Some(command.spawn().context("starting chatd")?);
        Ok(())
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub async fn wait_healthy(&mut self) -> anyhow::Result<()> {
        let url = format!("{}/health", self.url());
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    bail!(
                        "chatd exited ({status}) before answering /health:\n{}",
                        self.log()
                    );
                }
            }
            if let Ok(r) = client
                .get(&url)
                .timeout(Duration::from_secs(1))
                .send()
                .await
            {
                if r.status().is_success() && self.front_answers(&client).await {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "chatd did not answer /health (and its front, if any) within 20 s:\n{}",
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Whether the front answers `GET /v1/chat-app/session` (true without a front).
    async fn front_answers(&self, client: &reqwest::Client) -> bool {
        let Some(port) = self.front_port else {
            return true;
        };
        client
            .get(format!("http://127.0.0.1:{port}/v1/chat-app/session"))
            .timeout(Duration::from_secs(1))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
    }

    /// SIGKILL, as a crash.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM and wait; returns how long the exit took and the exit status.
    pub fn sigterm(
        &mut self,
        bound: Duration,
    ) -> anyhow::Result<(Duration, std::process::ExitStatus)> {
        let mut child = self.child.take().context("chatd is not running")?;
        let started = Instant::now();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )?;
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok((started.elapsed(), status));
            }
            if started.elapsed() > bound {
                let _ = child.kill();
                bail!("chatd did not exit within {bound:?} of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sets (or replaces) one variable of its environment from the next
    /// start on (`restart`).
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.to_string(), value.to_string()));
    }

    /// Starts it again on the same port and data.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.kill9();
        self.spawn()?;
        self.wait_healthy().await
    }

    pub fn client(&self) -> Client {
        Client::new(&self.url(), FORWARD_KEY)
    }

    /// How many event streams devices hold open (`tandem_sse_devices` on
    /// `/metrics`); None while chatd does not answer.
    pub async fn sse_devices(&self) -> Option<u64> {
        let text = reqwest::get(format!("{}/metrics", self.url()))
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        metric(&text, "tandem_sse_devices").map(|v| v as u64)
    }
}

impl Drop for Chatd {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            terminate(&mut child, Duration::from_secs(6));
        }
        let log = self.log();
        show_log("chatd", &mut self.dir, &log);
    }
}

/// The value of one sample line (`name{labels} value`) of the metrics text.
pub fn metric(text: &str, sample: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(sample) && l[sample.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// A client of chatd's API with the forward key.
#[derive(Clone)]
pub struct Client {
    pub base: String,
    key: String,
    pub http: reqwest::Client,
}

/// An answer: status and JSON body (`Null` when the body is not JSON).
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
    pub headers: reqwest::header::HeaderMap,
}

impl Client {
    pub fn new(base: &str, key: &str) -> Client {
        Client {
            base: base.to_string(),
            key: key.to_string(),
            http: reqwest::Client::new(),
        }
    }

    pub fn api(&self, path: &str) -> String {
        format!("{}/v1/chat-app{path}", self.base)
    }

    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Answer> {
        let mut request = self
            .http
            .request(method, self.api(path))
            .header("x-forward-key", &self.key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await?;
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Ok(Answer {
            status,
            body,
            headers,
        })
    }

    pub async fn get(&self, path: &str) -> anyhow::Result<Answer> {
        self.call(reqwest::Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> anyhow::Result<Answer> {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    /// Creates a conversation and returns its id.
    pub async fn create_chat(&self) -> anyhow::Result<String> {
        let answer = self.post("/conversations", json!({})).await?;
        anyhow::ensure!(answer.status == 201, "create answered {answer:?}");
        Ok(answer.body["id"]
            .as_str()
            .context("conversation id")?
            .to_string())
    }

    /// Creates a conversation in permission mode `mode`; returns its id.
    pub async fn create_chat_in(&self, mode: &str) -> anyhow::Result<String> {
        let made = self
            .post("/conversations", json!({"permission_mode": mode}))
            .await?;
        anyhow::ensure!(made.status == 201, "create answered {made:?}");
        Ok(made.body["id"].as_str().context("chat id")?.to_string())
    }

    /// Sends a message; returns the 202 body.
    pub async fn send(&self, chat: &str, text: &str) -> anyhow::Result<Value> {
        let answer = self
            .post(
                &format!("/conversations/{chat}/messages"),
                json!({"text": text}),
            )
            .await?;
        anyhow::ensure!(answer.status == 202, "send answered {answer:?}");
        Ok(answer.body)
    }

    pub async fn snapshot(&self, chat: &str) -> anyhow::Result<Value> {
        let answer = self.get(&format!("/conversations/{chat}")).await?;
        anyhow::ensure!(answer.status == 200, "snapshot answered {answer:?}");
        Ok(answer.body)
    }

    /// The run with `run_id` in the snapshot.
    pub async fn run(&self, chat: &str, run_id: &str) -> anyhow::Result<Value> {
        let snapshot = self.snapshot(chat).await?;
        snapshot["runs"]
            .as_array()
            .and_then(|runs| runs.iter().find(|r| r["id"] == run_id).cloned())
            .with_context(|| format!("run {run_id} not in the snapshot"))
    }

    /// Waits (polling, bounded) until the run's status is one of `statuses`.
    pub async fn wait_run(
        &self,
        chat: &str,
        run_id: &str,
        statuses: &[&str],
        bound: Duration,
    ) -> anyhow::Result<Value> {
        wait_until(
            &format!("run {run_id} to be {statuses:?}"),
            bound,
            || async {
                let run = self.run(chat, run_id).await.ok()?;
                statuses.contains(&run["status"].as_str()?).then_some(run)
            },
        )
        .await
    }

    /// Opens an event stream after `seq` (sent as `Last-Event-ID`).
    pub async fn events(&self, chat: &str, after: i64) -> anyhow::Result<EventStream> {
        let request = self
            .http
            .get(self.api(&format!("/conversations/{chat}/events")))
            .header("last-event-id", after.to_string());
        self.open_events(request, after).await
    }

    /// Opens an event stream after `seq` given as `?after=`, as a browser's
    /// first `EventSource` request does.
    pub async fn events_query(&self, chat: &str, after: i64) -> anyhow::Result<EventStream> {
        let request = self
            .http
            .get(self.api(&format!("/conversations/{chat}/events?after={after}")));
        self.open_events(request, after).await
    }

    /// Opens any other event stream of chatd's (`/notifications/events`):
    /// answers once the head is in, so the device is attached.
    pub async fn sse(&self, path: &str) -> anyhow::Result<EventStream> {
        let request = self.http.get(self.api(path));
        self.open_events(request, 0).await
    }

    async fn open_events(
        &self,
        request: reqwest::RequestBuilder,
        after: i64,
    ) -> anyhow::Result<EventStream> {
        let response = request.header("x-forward-key", &self.key).send().await?;
        anyhow::ensure!(
            response.status() == 200,
            "events answered {}",
            response.status()
        );
        Ok(EventStream {
            body: Box::pin(response.bytes_stream()),
            buffer: String::new(),
            last_seq: after,
        })
    }
}

/// One SSE event.
#[derive(Debug, Clone)]
pub struct SseEvent {
    pub seq: Option<i64>,
    pub kind: String,
    pub data: Value,
}

type Bytes =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>;

/// A device's event stream, parsed frame by frame.
pub struct EventStream {
    body: Bytes,
    buffer: String,
    /// The last seq this device saw.
    pub last_seq: i64,
}

impl EventStream {
    /// The next event (keepalive comments skipped); `None` when the stream ends.
    pub async fn next(&mut self) -> anyhow::Result<Option<SseEvent>> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let frame: String = self.buffer.drain(..end + 2).collect();
                let mut seq = None;
                let mut kind = String::from("message");
                let mut data = String::new();
                for line in frame.lines() {
                    if let Some(v) = line.strip_prefix("id: ") {
                        seq = v.trim().parse().ok();
                    } else if let Some(v) = line.strip_prefix("event: ") {
                        kind = v.trim().to_string();
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        data.push_str(v);
                    }
                }
                if data.is_empty() && seq.is_none() {
                    continue; // a comment such as `: keepalive`
                }
                if let Some(s) = seq {
                    self.last_seq = s;
                }
                let data = serde_json::from_str(&data).unwrap_or(Value::String(data));
                return Ok(Some(SseEvent { seq, kind, data }));
            }
            match self.body.next().await {
                Some(Ok(bytes)) => self.buffer.push_str(&String::from_utf8_lossy(&bytes)),
                Some(Err(err)) => return Err(err.into()),
                None => return Ok(None),
            }
        }
    }

    /// Reads events until `stop` says so, within `bound`; returns them all.
    pub async fn read_until<F>(
        &mut self,
        bound: Duration,
        mut stop: F,
    ) -> anyhow::Result<Vec<SseEvent>>
    where
        F: FnMut(&SseEvent) -> bool,
    {
        let mut seen = Vec::new();
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            let next = tokio::time::timeout_at(deadline, self.next())
                .await
                .map_err(|_| {
                    anyhow::anyhow!("timed out after {bound:?}; saw {} events", seen.len())
                })??;
            let Some(event) = next else {
                bail!("the stream ended; saw {} events", seen.len())
            };
            let done = stop(&event);
            seen.push(event);
            if done {
                return Ok(seen);
            }
        }
    }
}

/// The run id of a send's (or continue's) 202 answer.
pub fn run_id(sent: &Value) -> anyhow::Result<String> {
    Ok(sent["run_id"]
        .as_str()
        .with_context(|| format!("no run_id in {sent}"))?
        .to_string())
}

/// The canonical answer of `n` tokens from the simulator.
pub fn sim_answer(n: usize) -> String {
    (0..n).map(|i| format!("w{i} ")).collect()
}

/// egressd as a real process: its data in a temp folder, the chats' sockets
/// under `chat_data` (chatd's), the loopback listener on a port the system
/// picks, the forward key from `secrets` (chatd's, so the tokens agree).
pub struct Egressd {
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub config: PathBuf,
    chat_data: PathBuf,
    secrets: PathBuf,
}

impl Egressd {
    /// Starts egressd with `extra` lines in `[egress]` and waits for `/health`.
    pub async fn start(chat_data: &Path, secrets: &Path, extra: &str) -> anyhow::Result<Egressd> {
        Egressd::start_with(chat_data, secrets, None, extra).await
    }

    /// The same, with the API socket at `socket`.
    pub async fn start_at(
        chat_data: &Path,
        secrets: &Path,
        socket: &Path,
        extra: &str,
    ) -> anyhow::Result<Egressd> {
        Egressd::start_with(chat_data, secrets, Some(socket), extra).await
    }

    async fn start_with(
        chat_data: &Path,
        secrets: &Path,
        socket: Option<&Path>,
        extra: &str,
    ) -> anyhow::Result<Egressd> {
        let dir = tempfile::tempdir()?;
        let mut egressd = Egressd {
            child: None,
            socket: socket
                .map(Path::to_path_buf)
                .unwrap_or_else(|| dir.path().join("run/egress.sock")),
            config: dir.path().join("tandem.toml"),
            chat_data: chat_data.to_path_buf(),
            secrets: secrets.to_path_buf(),
            dir,
        };
        egressd.write_config(extra)?;
        let log = std::fs::File::create(egressd.dir.path().join("egressd.log"))?;
        let child = egressd
            .command()
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting egressd")?;
        egressd.child = Some(child);
        wait_until("egressd's /health", Duration::from_secs(10), || async {
            egressd.call("GET", "/health", None).await.ok()
        })
        .await?;
        Ok(egressd)
    }

    /// egressd with this one's config.
    fn command(&self) -> Command {
        let mut command = Command::new(bin_dir().join("egressd"));
        command
            .args(["--config", &self.config.to_string_lossy()])
            .current_dir(self.dir.path())
            .env_clear()
            .env("HOME", self.dir.path())
            .env("QSE_LOG_TO", "stderr");
        command
    }

    /// A second egressd with this one's config, run until it ends.
    pub async fn run_second(&self, bound: Duration) -> anyhow::Result<Ended> {
        run_to_end(self.command(), bound).await
    }

    /// Rewrites the config with `extra` (SIGHUP makes egressd read it).
    pub fn write_config(&self, extra: &str) -> anyhow::Result<()> {
        std::fs::write(
            &self.config,
            format!(
                "[egress]\ndata_dir = \"{}\"\nchat_data = \"{}\"\nsocket = \"{}\"\nsecrets = \"{}\"\nlisten = \"127.0.0.1:0\"\n{extra}",
                self.dir.path().join("data").display(),
                self.chat_data.display(),
                self.socket.display(),
                self.secrets.display(),
            ),
        )?;
        Ok(())
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("egressd.log")).unwrap_or_default()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// One call on the API socket: status and JSON body.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(u16, Value)> {
        let client = reqwest::Client::builder()
            .unix_socket(self.socket.clone())
            .build()?;
        let mut request = client.request(method.parse()?, format!("http://egressd{path}"));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let value = response.json().await.unwrap_or(Value::Null);
        Ok((status, value))
    }

    /// Where the loopback listener listens (`127.0.0.1:port`).
    pub async fn listen(&self) -> anyhow::Result<String> {
        let (_, health) = self.call("GET", "/health", None).await?;
        health["listen"]
            .as_str()
            .map(str::to_string)
            .context("/health names no listen address")
    }
}

impl Drop for Egressd {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let log = self.log();
        show_log("egressd", &mut self.dir, &log);
    }
}

/// hostexecd as a real process: its data, socket and the chats' folders in
/// one temp folder (0711, so the user commands run as can pass it). Run as
/// root (as the tests are here), it is given `run_as = "nobody"` unless
/// `extra` names another.
pub struct Hostexecd {
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub config: PathBuf,
    pub chat_data: PathBuf,
    /// The uid hostexecd itself runs as when a test gave one (a plain
    /// user, as under its user unit); calls then go through curl as it.
    pub as_uid: Option<u32>,
    /// A command hostexecd is started under (e.g. `setpriv` taking a
    /// capability away); empty: none.
    pub launcher: Vec<String>,
}

/// One call of `POST /exec` read to its end.
#[derive(Debug, Clone)]
pub struct ExecRun {
    pub status: u16,
    /// The error body when refused; the `finished` event otherwise.
    pub body: Value,
    pub events: Vec<Value>,
}

impl ExecRun {
    /// The output events' text, joined.
    pub fn output(&self) -> String {
        self.events
            .iter()
            .filter(|e| e["event"] == "output")
            .filter_map(|e| e["text"].as_str())
            .collect()
    }
}

impl Hostexecd {
    /// Whether this process is root (hostexecd then needs `run_as`).
    pub fn as_root() -> bool {
        nix::unistd::geteuid().is_root()
    }

    /// Starts hostexecd with `extra` lines in `[hostexec]` and waits for `/health`.
    pub async fn start(extra: &str) -> anyhow::Result<Hostexecd> {
        let dir = tempfile::tempdir()?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))?;
        let chat_data = dir.path().join("chat");
        std::fs::create_dir_all(&chat_data)?;
        std::fs::set_permissions(&chat_data, std::fs::Permissions::from_mode(0o711))?;
        let mut hx = Hostexecd {
            child: None,
            socket: dir.path().join("run/hostexec.sock"),
            config: dir.path().join("tandem.toml"),
            chat_data,
            dir,
            as_uid: None,
            launcher: Vec::new(),
        };
        hx.write_config(extra)?;
        hx.spawn()?;
        hx.wait_healthy().await?;
        Ok(hx)
    }

    /// Starts hostexecd under `launcher` (its arguments before hostexecd's
    /// path) with `extra` lines in `[hostexec]`.
    pub async fn start_launched(launcher: &[&str], extra: &str) -> anyhow::Result<Hostexecd> {
        let mut hx = Hostexecd::start(extra).await?;
        if let Some(mut child) = hx.child.take() {
            terminate(&mut child, Duration::from_secs(5));
        }
        hx.launcher = launcher.iter().map(|a| a.to_string()).collect();
        hx.spawn()?;
        hx.wait_healthy().await?;
        Ok(hx)
    }

    /// Starts hostexecd as the plain user `uid` (its folders given to it),
    /// as the user unit runs it: commands run as that user, in a user
    /// namespace of the call's own. Needs root (to start it as `uid`).
    pub async fn start_as(uid: u32, extra: &str) -> anyhow::Result<Hostexecd> {
        let dir = tempfile::tempdir()?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))?;
        let chat_data = dir.path().join("chat");
        std::fs::create_dir_all(&chat_data)?;
        for d in [dir.path(), chat_data.as_path()] {
            std::os::unix::fs::chown(d, Some(uid), Some(uid))?;
        }
        let mut hx = Hostexecd {
            child: None,
            socket: dir.path().join("run/hostexec.sock"),
            config: dir.path().join("tandem.toml"),
            chat_data,
            dir,
            as_uid: Some(uid),
            launcher: Vec::new(),
        };
        hx.write_config(extra)?;
        hx.spawn()?;
        hx.wait_healthy().await?;
        Ok(hx)
    }

    fn write_config(&self, extra: &str) -> anyhow::Result<()> {
        let hx = self;
        let run_as = if Hostexecd::as_root() && hx.as_uid.is_none() && !extra.contains("run_as") {
            "run_as = \"nobody\"\n"
        } else {
            ""
        };
        std::fs::write(
            &hx.config,
            format!(
                "[hostexec]\ndata_dir = \"{}\"\nchat_data = \"{}\"\nsocket = \"{}\"\n{run_as}{extra}",
                hx.dir.path().join("data").display(),
                hx.chat_data.display(),
                hx.socket.display(),
            ),
        )?;
        Ok(())
    }

    /// Starts the binary with this config; returns at once.
    pub fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("hostexecd.log"))?;
        let child = self
            .command()
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting hostexecd")?;
        self.child = Some(child);
        Ok(())
    }

    /// A second hostexecd with this one's config (and user, and launcher),
    /// run until it ends.
    pub async fn run_second(&self, bound: Duration) -> anyhow::Result<Ended> {
        run_to_end(self.command(), bound).await
    }

    /// hostexecd with this config, under its launcher and as its user.
    fn command(&self) -> Command {
        use std::os::unix::process::CommandExt;
        let mut command = match self.launcher.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(bin_dir().join("hostexecd"));
                c
            }
            None => Command::new(bin_dir().join("hostexecd")),
        };
        if let Some(uid) = self.as_uid {
            command.uid(uid).gid(uid);
        }
        command
            .args(["--config", &self.config.to_string_lossy()])
            // A group of its own, as under a shell or a supervisor: a test
            // may kill the whole group without killing itself.
            .process_group(0)
            .current_dir(self.dir.path())
            .env_clear()
            .env("HOME", self.dir.path())
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("QSE_LOG_TO", "stderr");
        command
    }

    pub async fn wait_healthy(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    bail!("hostexecd exited ({status}):\n{}", self.log());
                }
            }
            let healthy = match self.as_uid {
                Some(_) => self
                    .curl("GET", "/health", None)
                    .await
                    .is_ok_and(|(s, _)| s == 200),
                None => matches!(self.call("GET", "/health", None).await, Ok((200, _))),
            };
            if healthy {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "hostexecd did not answer /health within 10 s:\n{}",
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits (bounded) for the process to exit; its status.
    pub fn wait_exit(&mut self, bound: Duration) -> anyhow::Result<std::process::ExitStatus> {
        let child = self.child.as_mut().context("hostexecd is not running")?;
        let deadline = Instant::now() + bound;
        loop {
            if let Some(status) = child.try_wait()? {
                self.child = None;
                return Ok(status);
            }
            if Instant::now() > deadline {
                bail!("hostexecd did not exit within {bound:?}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("hostexecd.log")).unwrap_or_default()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL, as a crash.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGKILL to hostexecd's whole process group (`kill -9 -<pgid>`, as a
    /// shell job or a supervisor would), and the exit waited for.
    pub fn kill9_group(&mut self) -> anyhow::Result<()> {
        let pid = self.pid().context("hostexecd is not running")?;
        nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        )?;
        self.wait_exit(Duration::from_secs(5))?;
        Ok(())
    }

    /// The workspace of an own chat: the command's working folder.
    pub fn workspace(&self, chat: &str) -> PathBuf {
        self.chat_data.join("workspaces").join(chat)
    }

    /// The chat's HOME, beside its workspace.
    pub fn home(&self, chat: &str) -> PathBuf {
        self.chat_data.join("homes").join(chat).join("home")
    }

    /// SIGTERM, and the exit waited for.
    pub fn sigterm(&mut self, bound: Duration) -> anyhow::Result<std::process::ExitStatus> {
        let pid = self.pid().context("hostexecd is not running")?;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        )?;
        self.wait_exit(bound)
    }

    pub fn client(&self) -> anyhow::Result<reqwest::Client> {
        Ok(reqwest::Client::builder()
            .unix_socket(self.socket.clone())
            .build()?)
    }

    /// One call on the API socket: status and JSON body.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(u16, Value)> {
        let mut request = self
            .client()?
            .request(method.parse()?, format!("http://hostexecd{path}"));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let value = response.json().await.unwrap_or(Value::Null);
        Ok((status, value))
    }

    /// One call through `curl` as the uid hostexecd runs as (`start_as`):
    /// the status and the body's text.
    pub async fn curl(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(u16, String)> {
        let uid = self
            .as_uid
            .context("hostexecd runs as this process's user")?;
        let mut command = tokio::process::Command::new("setpriv");
        command
            .args([
                &format!("--reuid={uid}"),
                &format!("--regid={uid}"),
                "--clear-groups",
                "curl",
                "-sS",
                "-N",
                "--max-time",
                "30",
                "-o",
                "-",
                "-w",
                "\n%{http_code}",
                "--unix-socket",
            ])
            .arg(&self.socket)
            .args(["-X", method]);
        if let Some(body) = body {
            command.args([
                "-H",
                "Content-Type: application/json",
                "-d",
                &body.to_string(),
            ]);
        }
        let out = command
            .arg(format!("http://hostexecd{path}"))
            .stdin(Stdio::null())
            .output()
            .await?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, status) = text.rsplit_once('\n').context("curl's output")?;
        Ok((status.trim().parse().unwrap_or(0), body.to_string()))
    }

    /// `POST /exec` through `curl` (`start_as`), read to its end.
    pub async fn curl_exec(&self, chat: &str, command: &str) -> anyhow::Result<ExecRun> {
        let body = json!({"chat_id": chat, "command": command});
        let (status, text) = self.curl("POST", "/exec", Some(body)).await?;
        let events: Vec<Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        Ok(ExecRun {
            status,
            body: events.last().cloned().unwrap_or(Value::Null),
            events,
        })
    }

    /// `POST /exec`, the response left open (to read as it comes).
    pub async fn exec_open(
        &self,
        chat: &str,
        command: &str,
        timeout_s: Option<u64>,
    ) -> anyhow::Result<ExecStream> {
        let mut body = json!({"chat_id": chat, "command": command});
        if let Some(t) = timeout_s {
            body["timeout_s"] = json!(t);
        }
        let response = self
            .client()?
            .post("http://hostexecd/exec")
            .json(&body)
            .send()
            .await?;
        Ok(ExecStream {
            status: response.status().as_u16(),
            response,
            buffer: Vec::new(),
        })
    }

    /// `POST /exec` read to its end (bounded by `bound`).
    pub async fn exec(
        &self,
        chat: &str,
        command: &str,
        timeout_s: Option<u64>,
        bound: Duration,
    ) -> anyhow::Result<ExecRun> {
        let stream = self.exec_open(chat, command, timeout_s).await?;
        Hostexecd::read_run(stream, bound).await
    }

    /// `POST /exec` in the workspace `workspace` (the shared one), read to its end.
    pub async fn exec_in(
        &self,
        chat: &str,
        workspace: &Path,
        command: &str,
        bound: Duration,
    ) -> anyhow::Result<ExecRun> {
        let body = json!({"chat_id": chat, "command": command, "workspace": workspace});
        let response = self
            .client()?
            .post("http://hostexecd/exec")
            .json(&body)
            .send()
            .await?;
        let stream = ExecStream {
            status: response.status().as_u16(),
            response,
            buffer: Vec::new(),
        };
        Hostexecd::read_run(stream, bound).await
    }

    async fn read_run(mut stream: ExecStream, bound: Duration) -> anyhow::Result<ExecRun> {
        if stream.status != 200 {
            let body = stream.response.json().await.unwrap_or(Value::Null);
            return Ok(ExecRun {
                status: stream.status,
                body,
                events: Vec::new(),
            });
        }
        let events = stream
            .read_until(bound, |e| e["event"] == "finished")
            .await?;
        Ok(ExecRun {
            status: 200,
            body: events.last().cloned().unwrap_or(Value::Null),
            events,
        })
    }
}

/// An open `POST /exec` answer, read event by event.
pub struct ExecStream {
    pub status: u16,
    pub response: reqwest::Response,
    buffer: Vec<u8>,
}

impl ExecStream {
    /// The next event; `None` when the stream ends.
    pub async fn next(&mut self) -> anyhow::Result<Option<Value>> {
        loop {
            if let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                return Ok(Some(serde_json::from_slice(&line)?));
            }
            match self.response.chunk().await? {
                Some(chunk) => self.buffer.extend_from_slice(&chunk),
                None => return Ok(None),
            }
        }
    }

    /// Events until `stop` says so, within `bound`.
    pub async fn read_until(
        &mut self,
        bound: Duration,
        mut stop: impl FnMut(&Value) -> bool,
    ) -> anyhow::Result<Vec<Value>> {
        let mut seen = Vec::new();
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            let next = tokio::time::timeout_at(deadline, self.next())
                .await
                .map_err(|_| anyhow::anyhow!("timed out after {bound:?}; saw {seen:?}"))??;
            let Some(event) = next else {
                bail!("the stream ended; saw {seen:?}")
            };
            let done = stop(&event);
            seen.push(event);
            if done {
                return Ok(seen);
            }
        }
    }
}

impl Drop for Hostexecd {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            terminate(&mut child, Duration::from_secs(5));
        }
        let log = self.log();
        show_log("hostexecd", &mut self.dir, &log);
    }
}

/// Pids whose command line (or, for a process whose main thread exited,
/// one of its threads' command lines) holds `marker`; never this process.
pub fn pids_with(marker: &str) -> Vec<i32> {
    let mut found = Vec::new();
    let me = std::process::id() as i32;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in dir.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        // Zombies have an empty command line; so has a process whose main
        // thread exited while others run: their own command lines tell.
        let mut texts = vec![cmdline];
        if texts[0].is_empty() {
            if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
                for task in tasks.flatten() {
                    texts.extend(std::fs::read(task.path().join("cmdline")));
                }
            }
        }
        if texts.iter().any(|t| {
            String::from_utf8_lossy(t)
                .replace('\0', " ")
                .contains(marker)
        }) {
            found.push(pid);
        }
    }
    found
}

/// Kills what a failed test left with `marker` in its command line, so a
/// regression does not leave processes on the machine (dropped at the end
/// of a test, passed or not).
pub struct KillLeftovers(pub String);

impl Drop for KillLeftovers {
    fn drop(&mut self) {
        for _ in 0..50 {
            let left = pids_with(&self.0);
            if left.is_empty() {
                return;
            }
            for pid in left {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The texts of a snapshot's tool results, in order.
pub fn tool_results(snapshot: &Value) -> Vec<String> {
    snapshot["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["text"].as_str().unwrap_or("").to_string())
        .collect()
}

/// The `bash` call the engine simulator is to make (a `/sim/faults` entry).
pub fn bash_call(command: &str) -> Value {
    json!({"tool_calls": [{"name": "bash", "arguments": {"command": command}}]})
}

/// A real container runtime for the sandbox tests: podman's Docker Engine API
/// service (runc, sandbox/containers.conf) on a socket of this test process,
/// and the busybox test image made by `tandem sandbox build --base busybox`.
/// One a test process; it ends with the process.
pub struct Podman {
    pub socket: PathBuf,
    pub image: String,
    _dir: tempfile::TempDir,
}

/// The image the sandbox tests run.
pub const TEST_IMAGE: &str = "localhost/tandem-sandbox-test:1";

static PODMAN: std::sync::OnceLock<Result<Podman, String>> = std::sync::OnceLock::new();

impl Podman {
    /// The shared runtime, started at the first call; `None` (the test is
    /// skipped, or fails in CI: `needs`) where there is none to start: not
    /// root, or no podman. CI runs as root with podman and runc installed.
    #[track_caller]
    pub fn shared() -> Option<&'static Podman> {
        if !crate::needs::root("the sandbox tests run podman as root")
            || !crate::needs::tools(&[("podman", "podman"), ("runc", "runc")])
        {
            return None;
        }
        match PODMAN.get_or_init(|| Podman::start().map_err(|e| format!("{e:#}"))) {
            Ok(podman) => Some(podman),
            Err(e) => panic!("podman could not start: {e} (.ci/run installs podman and runc)"),
        }
    }

    fn start() -> anyhow::Result<Podman> {
        let dir = tempfile::tempdir()?;
        let socket = dir.path().join("podman.sock");
        let conf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sandbox/containers.conf");
        anyhow::ensure!(conf.exists(), "{} is missing", conf.display());
        let (tx, rx) = std::sync::mpsc::channel();
        let url = format!("unix://{}", socket.display());
        // The service dies with this process (PDEATHSIG), so it is started
        // from a thread that lives as long as the process does.
        std::thread::spawn(move || {
            use std::os::unix::process::CommandExt;
            let mut command = Command::new("podman");
            command
                .args(["system", "service", "--time=0", &url])
                .env("CONTAINERS_CONF", &conf)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            // SAFETY: prctl is async-signal-safe; nothing else runs between
            // fork and exec.
            unsafe {
                command.pre_exec(|| {
                    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                        .map_err(std::io::Error::from)
                });
            }
            let spawned = command.spawn();
            let ok = spawned.is_ok();
            let _ = tx.send(spawned.map(|_| ()).map_err(|e| e.to_string()));
            if ok {
                loop {
                    std::thread::park();
                }
            }
        });
        rx.recv()?
            .map_err(|e| anyhow::anyhow!("starting podman system service: {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while !socket.exists() {
            anyhow::ensure!(
                Instant::now() < deadline,
                "podman's API socket did not appear in 30 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // The socket is there before the service answers on it (seen on a
        // loaded machine): a build refused for that is asked again, bounded.
        let out = loop {
            let out = Command::new(bin_dir().join("tandem"))
                .args([
                    "sandbox", "build", "--base", "busybox", "--tag", TEST_IMAGE, "--socket",
                ])
                .arg(&socket)
                .output()
                .context("running tandem sandbox build")?;
            let not_yet =
                String::from_utf8_lossy(&out.stderr).contains("no container runtime answers");
            if out.status.success() || !not_yet || Instant::now() >= deadline {
                break out;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        anyhow::ensure!(
            out.status.success(),
            "tandem sandbox build --base busybox failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(Podman {
            socket,
            image: TEST_IMAGE.to_string(),
            _dir: dir,
        })
    }

    /// The environment a chatd needs to use it.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            (
                "QSE_SANDBOX_SOCKET".into(),
                self.socket.display().to_string(),
            ),
            ("QSE_SANDBOX_IMAGE".into(), self.image.clone()),
        ]
    }

    /// `podman` against this service's storage (for what the tests check
    /// from outside); a failing podman is an error, with what it said.
    pub fn cli(&self, args: &[&str]) -> anyhow::Result<String> {
        let conf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sandbox/containers.conf");
        let out = Command::new("podman")
            .args(args)
            .env("CONTAINERS_CONF", conf)
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "podman {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}
