//! A `stdio` connector's server: its command run in the chat's sandbox as
//! an exec with stdin attached (no shell: the command and its arguments as
//! given), MCP's JSON lines over that stream. It runs as a uid of the
//! connector's own, never the commands' user and never root, so a `bash`
//! call's clean-up (`kill -9 -1` as the commands' user) cannot reach it and
//! its environment (the connector's sealed values) cannot be read by the
//! chat's commands. That uid cannot enter the chat's workspace (the
//! commands' user's, 0700): the server works in the sandbox's /tmp, its
//! HOME a folder of its own there, and goes out, like the commands, through
//! the chat's egress proxy only.
//!
//! Closing the session closes its stdin and kills every process of its uid
//! in that sandbox.
//!
//! On a box without a container runtime the server runs through hostexecd
//! instead (`open_on_host`): as hostexecd's commands do (its clean
//! environment, a PID namespace of its own, never root) but without a
//! shell, in a HOME of its own out of the commands' view; the stream
//! hostexecd gives back carries the same frames as a sandbox's (and a last
//! one with hostexecd's words on its end), and closing it ends the server.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::ServiceExt;
use serde_json::json;
use tandem_shared::docker::Demux;
use tandem_shared::secrets::Secret;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use rmcp::transport::async_rw::AsyncRwTransport;

use super::client::{Failure, Handler, Session, OPEN};
use crate::hostexec::HostExec;
use crate::sandbox::Sandboxes;
use crate::store::mcp::Connector;

/// What a stdio server is started with (the environment opened from its seal).
#[derive(Clone)]
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
/// The first uid of the servers' range; a server's is this plus a number
/// from its connector and that connector's version (below `UID_SPAN`),
/// within the 65536 ids a rootless runtime maps.
const UID_BASE: u32 = 20_000;
const UID_SPAN: u32 = 40_000;

/// The uid:gid a server runs as: one per connector version (`saved`, its
/// `updated`), so a server opened after an edit never shares a uid with
/// the one its close is killing; never the commands' (`commands`), never
/// root.
pub fn user_of(connector: &str, saved: &str, commands: u32) -> (u32, u32) {
    let mut uid = UID_BASE + fnv(&format!("{connector}\n{saved}")) % UID_SPAN;
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
/// by every chatd on it). Stopped after each test.
pub fn probe_chat(data_dir: &std::path::Path) -> String {
    format!("mcp_test_{:08x}", fnv(&data_dir.to_string_lossy()))
}

/// Where a server runs, and so how it is ended.
enum Place {
    /// In the chat's sandbox as the connector's uid; its HOME is taken by
    /// the kill.
    Sandbox {
        sandboxes: Sandboxes,
        container: String,
        user: String,
        home: Option<String>,
    },
    /// Through hostexecd: the stream's close ends it and all it started.
    Host,
}

/// A server process in a chat's sandbox (or run by hostexecd). It does not
/// hold the sandbox busy: a session lasts minutes, and the sandbox's limits
/// (running sandboxes, the memory guard, the idle stop) must still apply; a
/// call holds it (`Sessions::call`). Dropped, it closes the server's stdin
/// and kills every process of its uid there.
pub struct Process {
    place: Place,
    chat: String,
    stderr: Arc<Mutex<Vec<u8>>>,
    /// hostexecd's words on the server's end (stream 3), kept apart: the
    /// server's own last line is the one a person needs.
    ending: Arc<Mutex<Vec<u8>>>,
    pump: tokio::task::JoinHandle<()>,
}

impl Drop for Process {
    /// The fallback when a start was cut short: the kill on a task.
    fn drop(&mut self) {
        self.pump.abort();
        let Some(kill) = self.kill_job() else {
            return;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(kill);
        }
    }
}

impl Process {
    /// Kills every process of its uid in the sandbox and removes its HOME;
    /// done before this returns. Through hostexecd, the stream's close
    /// (the pump's end with the session's) is what ends it.
    pub async fn kill(mut self) {
        self.pump.abort();
        if let Some(kill) = self.kill_job() {
            kill.await;
        }
    }

    /// The kill in a sandbox, once: `None` when it was taken already or
    /// there is none to make.
    fn kill_job(&mut self) -> Option<impl std::future::Future<Output = ()> + Send + 'static> {
        let Place::Sandbox {
            sandboxes,
            container,
            user,
            home,
        } = &mut self.place
        else {
            return None;
        };
        let home = home.take()?;
        let (sandboxes, chat) = (sandboxes.clone(), self.chat.clone());
        let (container, user) = (container.clone(), user.clone());
        Some(async move {
            // `kill -1` spares the shell that sends it, which then removes
            // the server's HOME (npx and uvx caches fill the sandbox's /tmp).
            let script = "kill -9 -1 2>/dev/null; rm -rf -- \"$1\"; true";
            let cmd = ["/bin/sh", "-c", script, "sh", &home];
            let killed = sandboxes
                .docker()
                .exec_output(&container, &cmd, &user, Duration::from_secs(10))
                .await;
            // A sandbox already stopped (idle, trash, guard) took it along.
            if let Err(err) = killed.map(drop) {
                if sandboxes.is_running(&chat) {
                    tracing::warn!(chat = %chat, error = %err, "mcp: could not kill a stdio server");
                }
            }
        })
    }

    /// The chat whose sandbox it runs in.
    pub fn chat(&self) -> &str {
        &self.chat
    }

    /// The last line the server wrote on stderr, if any, with hostexecd's
    /// words on its end after it.
    pub fn last_words(&self) -> Option<String> {
        let kept = tandem_shared::sync::lock(&self.stderr);
        let text = String::from_utf8_lossy(&kept);
        // podman may add its own line about its attach socket when the
        // process ends first: that is not the server's.
        let said = text
            .lines()
            .rev()
            .map(str::trim)
            .find(|l| !l.is_empty() && !podmans(l))
            .map(str::to_string);
        let ending = String::from_utf8_lossy(&tandem_shared::sync::lock(&self.ending))
            .trim()
            .to_string();
        match (said, ending.is_empty()) {
            (Some(said), false) => Some(format!("{said} ({ending})")),
            (Some(said), true) => Some(said),
            (None, false) => Some(ending),
            (None, true) => None,
        }
    }
}

/// A line podman wrote about its attach socket.
fn podmans(line: &str) -> bool {
    line.starts_with("Error: ") && line.contains("/attach: ")
}

/// Starts the server in `chat`'s sandbox and opens the MCP session, within
/// [`OPEN`]. The work runs on a task of its own: a turn that stops waiting
/// leaves no sandbox half started and no server running (the `Process` it
/// made is dropped with the task's result).
pub async fn open(
    sandboxes: &Sandboxes,
    chat: &str,
    connector: &Connector,
    launch: Launch,
) -> Result<(Session, Process), Failure> {
    let (sandboxes, chat, connector) = (sandboxes.clone(), chat.to_string(), connector.clone());
    let work = tokio::spawn(async move { start(&sandboxes, &chat, &connector, &launch).await });
    match work.await {
        Ok(opened) => opened,
        Err(_) => Err(Failure::Connect("the server's start failed".into())),
    }
}

async fn start(
    sandboxes: &Sandboxes,
    chat: &str,
    connector: &Connector,
    launch: &Launch,
) -> Result<(Session, Process), Failure> {
    let lease = sandboxes
        .ensure(chat)
        .await
        .map_err(|e| Failure::Connect(format!("the chat's sandbox could not start: {e}")))?;
    let (uid, gid) = user_of(&connector.id, &connector.updated, sandboxes.user_ids().0);
    let user = format!("{uid}:{gid}");
    let docker = sandboxes.docker();
    // A HOME (and working folder) of the server's own, made by its uid
    // under a name the chat's commands cannot guess: they can write /tmp,
    // and a folder of theirs there would hand them the server's caches and
    // module paths, and with them its environment.
    let home = format!("/tmp/mcp-{uid}-{}", tandem_shared::time::new_id(""));
    let made = docker
        .exec_output(
            &lease.container,
            &["mkdir", "-m", "700", &home],
            &user,
            Duration::from_secs(10),
        )
        .await;
    if !matches!(made, Ok((0, _))) {
        return Err(Failure::Connect(
            "the server's folder could not be made in the sandbox".into(),
        ));
    }
    let mut env = vec![format!("HOME={home}")];
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
        "WorkingDir": home,
        "User": user,
    });
    let id = docker
        .exec_create(&lease.container, &spec)
        .await
        .map_err(|e| Failure::Connect(format!("the sandbox could not run the command: {e}")))?;
    let stream = docker.exec_attach(&id).await.map_err(|e| {
        Failure::Connect(format!("the command could not start in the sandbox: {e}"))
    })?;
    let place = Place::Sandbox {
        sandboxes: sandboxes.clone(),
        container: lease.container.clone(),
        user,
        home: Some(home),
    };
    attach(stream, place, chat).await
}

/// Starts the server through hostexecd (a box without a container
/// runtime) and opens the MCP session, within [`OPEN`]; on a task of its
/// own, as [`open`].
pub async fn open_on_host(
    hostexec: &HostExec,
    chat: &str,
    launch: Launch,
) -> Result<(Session, Process), Failure> {
    let (hostexec, chat) = (hostexec.clone(), chat.to_string());
    let work = tokio::spawn(async move {
        let env = launch.env.iter().map(|(k, v)| (k.as_str(), v.expose()));
        let stream = hostexec
            .serve(&chat, &launch.command, &launch.args, env)
            .await
            .map_err(Failure::Connect)?;
        attach(stream, Place::Host, &chat).await
    });
    match work.await {
        Ok(opened) => opened,
        Err(_) => Err(Failure::Connect("the server's start failed".into())),
    }
}

/// Opens the MCP session over a started server's stream of frames (stream
/// 1 its stdout, 2 its stderr, 3 hostexecd's words on its end).
async fn attach<S>(stream: S, place: Place, chat: &str) -> Result<(Session, Process), Failure>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    let (mut from_exec, to_stdin) = tokio::io::split(stream);
    let (mut stdout_in, stdout_out) = tokio::io::duplex(64 * 1024);
    let stderr = Arc::new(Mutex::new(Vec::new()));
    let ending = Arc::new(Mutex::new(Vec::new()));
    let (kept, ended) = (stderr.clone(), ending.clone());
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
                let kept = match stream {
                    1 => {
                        if stdout_in.write_all(&bytes).await.is_err() {
                            return;
                        }
                        continue;
                    }
                    3 => &ended,
                    _ => &kept,
                };
                let mut kept = tandem_shared::sync::lock(kept);
                kept.extend_from_slice(&bytes);
                let over = kept.len().saturating_sub(STDERR_KEPT);
                kept.drain(..over);
            }
        }
    });
    let process = Process {
        place,
        chat: chat.to_string(),
        stderr,
        ending,
        pump,
    };
    // An answer past 4 MiB is refused, as over http.
    let transport = AsyncRwTransport::new_client(stdout_out, to_stdin)
        .with_max_line_length(super::client::MAX_ANSWER);
    let why = match tokio::time::timeout(OPEN, Handler::new().serve(transport)).await {
        Ok(Ok(session)) => return Ok((session, process)),
        Err(_) => format!("no answer within {} s", OPEN.as_secs()),
        Ok(Err(_)) => "the server ended or did not answer as an MCP server does".into(),
    };
    Err(failed(process, why).await)
}

/// A failed start's reason, with the server's last words when it said any:
/// read once the stream has ended (a write to a server that already exited
/// fails before its last stderr frame is read), 2 s at most.
async fn failed(mut process: Process, why: String) -> Failure {
    let _ = tokio::time::timeout(Duration::from_secs(2), &mut process.pump).await;
    Failure::Connect(match process.last_words() {
        Some(words) => format!("{why}; it said: {}", super::client::cut(&words)),
        None => why,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_environment_value_is_taken_out_as_it_is_and_as_json_carries_it() {
        let launch = Launch {
            command: "npx".into(),
            args: Vec::new(),
            env: vec![("KEY".into(), Secret::new("{\"k\": \"v1\"}\nline".into()))],
        };
        let echoed = format!(
            "raw {} json {}",
            "{\"k\": \"v1\"}\nline",
            serde_json::to_string("{\"k\": \"v1\"}\nline").unwrap()
        );
        assert_eq!(launch.clean(echoed), "raw … json \"…\"");
    }

    #[test]
    fn a_connector_runs_as_its_own_uid_never_the_commands() {
        let (uid, gid) = user_of("mc_abc", "t1", 1000);
        assert_eq!(uid, gid);
        assert!((UID_BASE..UID_BASE + UID_SPAN).contains(&uid));
        assert_eq!(user_of("mc_abc", "t1", 1000), (uid, gid), "stable");
        assert_ne!(user_of("mc_abc", "t2", 1000).0, uid, "another version");
        assert_eq!(user_of("mc_abc", "t1", uid).0, uid + 1);
    }
}
