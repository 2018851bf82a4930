//! A `stdio` connector's server: its command run in the chat's sandbox as
//! an exec with stdin attached (no shell: the command and its arguments as
//! given), MCP's JSON lines over that stream. It runs as a uid of the
//! connector's own, never the commands' user and never root, so a `bash`
//! call's clean-up (`kill -9 -1` as the commands' user) cannot reach it and
//! its environment (the connector's sealed values) cannot be read by the
//! chat's commands. Its HOME is a folder of its own under the sandbox's
//! /tmp; it reads the chat's workspace and goes out, like the commands,
//! through the chat's egress proxy only.
//!
//! The sandbox is held in use while the server runs; closing the session
//! closes its stdin and kills every process of its uid in that sandbox.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
use rmcp::ServiceExt;
use serde_json::json;
use tandem_shared::docker::Demux;
use tandem_shared::secrets::Secret;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::client::{Failure, Session, OPEN};
use crate::sandbox::{Lease, Sandboxes};

/// What a stdio server is started with (the environment opened from its seal).
pub struct Launch {
    pub command: String,
    pub args: Vec<String>,
    pub env: Vec<(String, Secret)>,
}

impl Launch {
    /// `text` without the environment's values (those of 4 bytes or more).
    pub fn clean(&self, text: String) -> String {
        super::client::without(text, self.env.iter().map(|(_, v)| v.expose()).collect())
    }
}

/// The last bytes of the server's stderr kept, for the reason it failed.
const STDERR_KEPT: usize = 2048;
/// The first uid of the servers' range; a connector's is this plus a
/// number from its id (below `UID_SPAN`).
const UID_BASE: u32 = 20_000;
const UID_SPAN: u32 = 10_000;

/// The uid:gid a connector's server runs as: stable for a connector, never
/// the commands' (`commands`) and never root.
pub fn user_of(connector: &str, commands: u32) -> (u32, u32) {
    let mut uid = UID_BASE + fnv(connector) % UID_SPAN;
    if uid == commands {
        uid += 1;
    }
    (uid, uid)
}

/// FNV-1a: stable across builds and runs, unlike std's hasher.
pub fn fnv(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// The sandbox a stdio connector's test runs in: a chat of no one's, named
/// for this chatd's data folder (container names are the runtime's, shared
/// by every chatd on it). The sweep of gone chats removes it in time.
pub fn probe_chat(data_dir: &std::path::Path) -> String {
    format!("mcp_test_{:08x}", fnv(&data_dir.to_string_lossy()))
}

/// A server process in a chat's sandbox.
pub struct Process {
    sandboxes: Sandboxes,
    lease: Lease,
    user: String,
    stderr: Arc<Mutex<Vec<u8>>>,
    pump: tokio::task::JoinHandle<()>,
}

impl Process {
    /// Kills every process of the server's uid in the sandbox; the lease
    /// goes with it.
    pub async fn kill(self) {
        self.pump.abort();
        let cmd = ["/bin/sh", "-c", "kill -9 -1 2>/dev/null; true"];
        if let Err(err) = self
            .sandboxes
            .docker()
            .exec_output(
                &self.lease.container,
                &cmd,
                &self.user,
                Duration::from_secs(10),
            )
            .await
        {
            tracing::warn!(chat = %self.lease.chat, error = %err, "mcp: could not kill a stdio server");
        }
    }

    /// The last line the server wrote on stderr, if any.
    pub fn last_words(&self) -> Option<String> {
        let kept = tandem_shared::sync::lock(&self.stderr);
        let text = String::from_utf8_lossy(&kept);
        // podman may add its own line about its attach socket when the
        // process ends first: that is not the server's.
        text.lines()
            .rev()
            .map(str::trim)
            .find(|l| !l.is_empty() && !podmans(l))
            .map(str::to_string)
    }
}

/// A line podman wrote about its attach socket.
fn podmans(line: &str) -> bool {
    line.starts_with("Error: ") && line.contains("/attach: ")
}

/// Starts the server in `chat`'s sandbox and opens the MCP session, within
/// [`OPEN`]. On a failure nothing is left running.
pub async fn open(
    sandboxes: &Sandboxes,
    chat: &str,
    connector: &str,
    launch: &Launch,
) -> Result<(Session, Process), Failure> {
    let lease = sandboxes
        .ensure(chat)
        .await
        .map_err(|e| Failure::Connect(format!("the chat's sandbox could not start: {e}")))?;
    let (uid, gid) = user_of(connector, sandboxes.user_ids().0);
    let user = format!("{uid}:{gid}");
    let mut env = vec![format!("HOME=/tmp/mcp-{uid}")];
    env.extend(
        launch
            .env
            .iter()
            .map(|(k, v)| format!("{k}={}", v.expose())),
    );
    let mut cmd = vec![launch.command.clone()];
    cmd.extend(launch.args.iter().cloned());
    let spec = json!({
        "Cmd": cmd,
        "Env": env,
        "AttachStdin": true,
        "AttachStdout": true,
        "AttachStderr": true,
        "Tty": false,
        "WorkingDir": "/workspace",
        "User": user,
    });
    let docker = sandboxes.docker();
    let id = docker
        .exec_create(&lease.container, &spec)
        .await
        .map_err(|e| Failure::Connect(format!("the sandbox could not run the command: {e}")))?;
    let stream = docker.exec_attach(&id).await.map_err(|e| {
        Failure::Connect(format!("the command could not start in the sandbox: {e}"))
    })?;
    let (mut from_exec, to_stdin) = tokio::io::split(stream);
    let (mut stdout_in, stdout_out) = tokio::io::duplex(64 * 1024);
    let stderr = Arc::new(Mutex::new(Vec::new()));
    let kept = stderr.clone();
    // The stream carries stdout and stderr in frames: stdout goes to the
    // session, stderr's tail is kept. Its end (the process ended) ends the
    // session's input.
    let pump = tokio::spawn(async move {
        let mut demux = Demux::default();
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let n = match from_exec.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            for (stream, bytes) in demux.push(&buffer[..n]) {
                if stream == 2 {
                    let mut kept = tandem_shared::sync::lock(&kept);
                    kept.extend_from_slice(&bytes);
                    let over = kept.len().saturating_sub(STDERR_KEPT);
                    kept.drain(..over);
                } else if stdout_in.write_all(&bytes).await.is_err() {
                    return;
                }
            }
        }
    });
    let process = Process {
        sandboxes: sandboxes.clone(),
        lease,
        user,
        stderr,
        pump,
    };
    let info = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("tandem", env!("CARGO_PKG_VERSION")),
    );
    match tokio::time::timeout(OPEN, info.serve((stdout_out, to_stdin))).await {
        Ok(Ok(session)) => Ok((session, process)),
        failed => {
            let why = match &failed {
                Err(_) => format!("no answer within {} s", OPEN.as_secs()),
                Ok(Err(_)) => "the server ended or did not answer as an MCP server does".into(),
                Ok(Ok(_)) => unreachable!("matched above"),
            };
            let why = match process.last_words() {
                Some(words) => format!("{why}; it said: {}", super::client::cut(&words)),
                None => why,
            };
            process.kill().await;
            Err(Failure::Connect(why))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connector_runs_as_its_own_uid_never_the_commands() {
        let (uid, gid) = user_of("mc_abc", 1000);
        assert_eq!(uid, gid);
        assert!((UID_BASE..UID_BASE + UID_SPAN).contains(&uid));
        assert_eq!(user_of("mc_abc", 1000), (uid, gid), "stable");
        assert_eq!(user_of("mc_abc", uid).0, uid + 1);
    }
}
