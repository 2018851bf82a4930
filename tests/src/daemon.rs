//! A tandem daemon as a real process for tests and benchmarks: started
//! with a config file and a clean environment in its own temp folder, its
//! log kept there, `/health` polled on its socket until a deadline, and
//! stopped by SIGTERM (or SIGKILL, as a crash). triggerd's and
//! connectord's harnesses are this plus what each needs. Every daemon handle
//! of the tests shows its log's tail as it drops (`show_log`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::Value;

/// The folder holding the built binaries (`target/<profile>/`).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test knows its own path");
    let mut dir = exe.parent().map(Path::to_path_buf);
    while let Some(d) = dir {
        if d.join("chatd").exists() && d.join("engine-sim").exists() {
            return d;
        }
        dir = d.parent().map(Path::to_path_buf);
    }
    panic!("chatd and engine-sim are not built: run `cargo build --workspace` first");
}

pub struct Daemon {
    /// The binary's name (`triggerd`, `connectord`).
    pub name: &'static str,
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub config: PathBuf,
    /// Extra environment for the process.
    pub env: Vec<(String, String)>,
}

impl Daemon {
    pub fn new(name: &'static str, dir: tempfile::TempDir, socket: PathBuf) -> Daemon {
        Daemon {
            name,
            child: None,
            config: dir.path().join("tandem.toml"),
            socket,
            dir,
            env: Vec::new(),
        }
    }

    /// Starts the binary; returns at once.
    pub fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())?;
        let mut command = Command::new(bin_dir().join(self.name));
        command
            .args(["--config", &self.config.to_string_lossy()])
            .current_dir(self.dir.path())
            .env_clear()
            .env("HOME", self.dir.path())
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("QSE_LOG_TO", "stderr")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        for (k, v) in &self.env {
            command.env(k, v);
        }
        self.child = Some(
            command
                .spawn()
                .with_context(|| format!("starting {}", self.name))?,
        );
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
                    bail!("{} exited ({status}):\n{}", self.name, self.log());
                }
            }
            if let Ok((200, _)) = self.call("GET", "/health", None).await {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "{} did not answer /health within {bound:?}:\n{}",
                    self.name,
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join(format!("{}.log", self.name))
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
        let mut child = self
            .child
            .take()
            .with_context(|| format!("{} is not running", self.name))?;
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
                bail!("{} did not exit within {bound:?} of SIGTERM", self.name);
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
        .request(method.parse()?, format!("http://daemon{path}"))
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

impl Drop for Daemon {
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
        let log = self.log();
        show_log(self.name, &mut self.dir, &log);
    }
}

/// The lines of a daemon's log shown as its handle drops.
const LOG_TAIL: usize = 60;

/// Whether a handle shows its log on every drop (tests) or only while
/// panicking (the bench and soak binaries, which have no capture to hide it).
static ON_EVERY_DROP: AtomicBool = AtomicBool::new(true);

/// For the bench and soak binaries: a daemon's log only on a panic.
pub fn logs_only_on_panic() {
    ON_EVERY_DROP.store(false, Ordering::Relaxed);
}

/// Shows the last lines of `name`'s log and its temp folder as its handle
/// drops. Always, in a test: libtest captures it and prints it only for a
/// test that failed, by a panic or by returning `Err` (which no drop can
/// tell apart from a pass). `TANDEM_TEST_LOGS=1` shows the whole log;
/// `TANDEM_TEST_KEEP=1` keeps the folder for a look after.
pub fn show_log(name: &str, dir: &mut tempfile::TempDir, log: &str) {
    if !ON_EVERY_DROP.load(Ordering::Relaxed) && !std::thread::panicking() {
        return;
    }
    let keep = std::env::var_os("TANDEM_TEST_KEEP").is_some();
    if keep {
        dir.disable_cleanup(true);
    }
    let lines: Vec<&str> = log.lines().collect();
    let shown = if std::env::var_os("TANDEM_TEST_LOGS").is_some() {
        lines.len()
    } else {
        lines.len().min(LOG_TAIL)
    };
    eprintln!(
        "---- {name}: the last {shown} of {} log lines; its folder {} ({}) ----\n{}\n---- end of {name}'s log ----",
        lines.len(),
        dir.path().display(),
        if keep {
            "kept"
        } else {
            "removed now: TANDEM_TEST_KEEP=1 keeps it"
        },
        lines[lines.len() - shown..].join("\n"),
    );
}
