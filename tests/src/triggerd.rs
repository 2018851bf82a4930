//! triggerd as a real process for tests and benchmarks: its data, socket
//! and clock file in a temp folder, chatd's address, key and shared
//! workspace given, `/health` polled on its socket until a deadline.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::Value;

use crate::harness::{bin_dir, Chatd};

pub struct Triggerd {
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub config: PathBuf,
    pub data: PathBuf,
    pub workspace: PathBuf,
    pub clock: PathBuf,
}

/// chatd's shared workspace, as the harness starts chatd (its default under
/// the test's HOME).
pub fn shared_workspace(chatd: &Chatd) -> PathBuf {
    chatd.dir.path().join(".tandemllm/workspace")
}

/// The API socket of a triggerd made in `dir` (chatd is started with
/// `QSE_TRIGGERS_SOCKET` set to it, so it forwards there).
pub fn socket_in(dir: &Path) -> PathBuf {
    dir.join("run/triggers.sock")
}

impl Triggerd {
    /// A triggerd in `dir` for `chatd`, checking every 50 ms, with `extra`
    /// lines in `[triggers]`; not started.
    pub fn new(dir: tempfile::TempDir, chatd: &Chatd, extra: &str) -> anyhow::Result<Triggerd> {
        let data = dir.path().join("data");
        Triggerd::with_data(chatd, extra, dir, data)
    }

    /// Another triggerd on the same data folder as `other` (its own socket).
    pub fn beside(other: &Triggerd, chatd: &Chatd, extra: &str) -> anyhow::Result<Triggerd> {
        let dir = tempfile::tempdir()?;
        Triggerd::with_data(chatd, extra, dir, other.data.clone())
    }

    fn with_data(
        chatd: &Chatd,
        extra: &str,
        dir: tempfile::TempDir,
        data: PathBuf,
    ) -> anyhow::Result<Triggerd> {
        let workspace = shared_workspace(chatd);
        std::fs::create_dir_all(&workspace)?;
        let t = Triggerd {
            child: None,
            socket: socket_in(dir.path()),
            config: dir.path().join("tandem.toml"),
            clock: dir.path().join("clock"),
            data,
            workspace,
            dir,
        };
        let clock_line = if extra.contains("clock_file") {
            String::new()
        } else {
            format!("clock_file = \"{}\"\n", t.clock.display())
        };
        std::fs::write(
            &t.config,
            format!(
                "[triggers]\ndata_dir = \"{}\"\nsocket = \"{}\"\nchat_url = \"{}\"\nchat_data = \"{}\"\n\
                 secrets = \"{}\"\nworkspace = \"{}\"\ncheck_ms = 50\n{clock_line}{extra}",
                t.data.display(),
                t.socket.display(),
                chatd.url(),
                chatd.data_dir().display(),
                chatd.dir.path().join("secrets.env").display(),
                t.workspace.display(),
            ),
        )?;
        Ok(t)
    }

    /// Sets the clock the test drives (RFC 3339).
    pub fn set_clock(&self, at: &str) -> anyhow::Result<()> {
        // Written whole then renamed: triggerd never reads half a time.
        let tmp = self.clock.with_extension("tmp");
        std::fs::write(&tmp, at)?;
        std::fs::rename(&tmp, &self.clock)?;
        Ok(())
    }

    /// Starts the binary; returns at once.
    pub fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())?;
        let child = Command::new(bin_dir().join("triggerd"))
            .args(["--config", &self.config.to_string_lossy()])
            .current_dir(self.dir.path())
            .env_clear()
            .env("HOME", self.dir.path())
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("QSE_LOG_TO", "stderr")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting triggerd")?;
        self.child = Some(child);
        Ok(())
    }

    /// Starts it and waits for `/health`.
    pub async fn start(&mut self) -> anyhow::Result<()> {
        self.spawn()?;
        self.wait_healthy(Duration::from_secs(15)).await
    }

    pub async fn wait_healthy(&mut self, bound: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + bound;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    bail!("triggerd exited ({status}):\n{}", self.log());
                }
            }
            if let Ok((200, _)) = self.call("GET", "/health", None).await {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "triggerd did not answer /health within {bound:?}:\n{}",
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("triggerd.log")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// SIGKILL, as a crash.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, and the exit waited for (bounded).
    pub fn sigterm(&mut self, bound: Duration) -> anyhow::Result<std::process::ExitStatus> {
        let mut child = self.child.take().context("triggerd is not running")?;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )?;
        let deadline = Instant::now() + bound;
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                bail!("triggerd did not exit within {bound:?} of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// One call on the API socket: status and JSON body (`Null` if none).
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(u16, Value)> {
        call_socket(&self.socket, method, path, body).await
    }

    /// `call` on `/v1/chat-app/triggers{path}`.
    pub async fn api(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(u16, Value)> {
        self.call(method, &format!("/v1/chat-app/triggers{path}"), body)
            .await
    }

    /// A trigger's runs, newest first.
    pub async fn runs(&self, trigger: &str) -> anyhow::Result<Vec<Value>> {
        let (status, body) = self
            .api("GET", &format!("/{trigger}/runs?limit=1000"), None)
            .await?;
        anyhow::ensure!(status == 200, "runs of {trigger}: {status} {body}");
        Ok(body["runs"].as_array().cloned().unwrap_or_default())
    }
}

pub async fn call_socket(
    socket: &Path,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> anyhow::Result<(u16, Value)> {
    let client = reqwest::Client::builder()
        .unix_socket(socket.to_path_buf())
        .build()?;
    let mut request = client
        .request(method.parse()?, format!("http://triggerd{path}"))
        .timeout(Duration::from_secs(30));
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await?;
    let status = response.status().as_u16();
    let bytes = response.bytes().await?;
    Ok((
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    ))
}

impl Drop for Triggerd {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "--- triggerd log ({}) ---\n{}",
                self.dir.path().display(),
                self.log()
            );
        }
    }
}
