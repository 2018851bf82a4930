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

mod chatd;
mod client;
mod egressd;
mod engine;
mod form;
mod hostexecd;
mod leftovers;
mod podman;

pub use chatd::*;
pub use client::*;
pub use egressd::*;
pub use engine::*;
pub use form::*;
pub use hostexecd::*;
pub use leftovers::*;
pub use podman::*;

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

/// Sets a daemon's clock file (triggerd's, chatd's loops') to RFC 3339 `at`:
/// written whole then renamed, so the daemon never reads half a time.
pub fn set_clock_file(path: &std::path::Path, at: &str) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, at)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
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
