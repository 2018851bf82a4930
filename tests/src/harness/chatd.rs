//! chatd as a real process for a test: its temp folder, config and port,
//! started and restarted, and its metrics read.

use super::*;

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
    /// The command line chatd's binary is appended to (empty: run directly).
    launcher: Vec<String>,
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

    /// Starts chatd under `launcher`, a command line that runs the program
    /// appended to it (`netlab::in_box` makes one for a network namespace),
    /// listening on 127.0.0.1:`port` where it runs; waits for `/health` at
    /// 127.0.0.1:`port` of the test, which the caller makes lead there.
    pub async fn start_launched(
        engine_url: &str,
        env: &[(&str, &str)],
        launcher: Vec<String>,
        port: u16,
    ) -> anyhow::Result<Chatd> {
        let mut chatd = Chatd::made(engine_url, env, None, false, None)?;
        chatd.port = port;
        chatd.launcher = launcher;
        chatd.spawn()?;
        chatd.wait_healthy().await?;
        Ok(chatd)
    }

    pub(crate) async fn start_inner(
        engine_url: &str,
        env: &[(&str, &str)],
        admin_token: Option<&str>,
        front: bool,
        nofile: Option<u64>,
    ) -> anyhow::Result<Chatd> {
        let mut chatd = Chatd::made(engine_url, env, admin_token, front, nofile)?;
        chatd.spawn()?;
        chatd.wait_healthy().await?;
        Ok(chatd)
    }

    /// Its folder, secrets and ports, not started yet.
    fn made(
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
        Ok(Chatd {
            child: None,
            dir,
            port,
            front_port,
            engine_url: engine_url.to_string(),
            env,
            nofile,
            launcher: Vec::new(),
        })
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

    /// Every file of this chatd (its log, the store and its WAL, the
    /// workspaces and what tools kept in them) that holds any of `secrets`
    /// in its bytes: none, after a run that handled sealed secrets. A
    /// folder or file it cannot read is an error, never passed over.
    pub fn files_holding(&self, secrets: &[&str]) -> anyhow::Result<Vec<PathBuf>> {
        anyhow::ensure!(secrets.iter().all(|s| !s.is_empty()), "an empty secret");
        let mut found = Vec::new();
        let mut folders = vec![self.dir.path().to_path_buf()];
        while let Some(folder) = folders.pop() {
            let entries = std::fs::read_dir(&folder)
                .with_context(|| format!("reading {}", folder.display()))?;
            for entry in entries {
                let entry = entry?;
                let kind = entry.file_type()?;
                if kind.is_dir() {
                    folders.push(entry.path());
                } else if kind.is_file() {
                    let bytes = std::fs::read(entry.path())
                        .with_context(|| format!("reading {}", entry.path().display()))?;
                    let holds = |s: &&str| bytes.windows(s.len()).any(|w| w == s.as_bytes());
                    if secrets.iter().any(holds) {
                        found.push(entry.path());
                    }
                }
            }
        }
        Ok(found)
    }

    /// chatd with this one's data and settings, listening on `port`.
    pub(crate) fn command(&self, port: u16) -> Command {
        let chatd = bin_dir().join("chatd");
        let mut command = match self.launcher.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(chatd);
                command
            }
            None => Command::new(chatd),
        };
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

    pub(crate) fn spawn(&mut self) -> anyhow::Result<()> {
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
    pub(crate) async fn front_answers(&self, client: &reqwest::Client) -> bool {
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
