//! The `bash` tool in a chat's sandbox: an exec in the chat's container with
//! hostexecd's limits (a time limit, 64 KiB of output, a stop kills it). A
//! kill is `kill -9 -1` as the commands' user inside: every process of the
//! call and whatever it left in the background, never the shim (PID 1).

use std::future::Future;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tandem_shared::docker::Demux;

use super::cgroup::CallEnded;
use super::{guard, Lease, Sandboxes};
use crate::hostexec::Ended;
use crate::tools::{self, Args, Effect, ToolOutput, ToolSpec};
use crate::workspace::Workspace;

/// Output past this kills the command (as in hostexecd).
pub const OUTPUT_LIMIT: usize = 64 * 1024;
/// The time limit when the call names none, and the most it may name.
pub const DEFAULT_TIMEOUT_S: u64 = 120;
pub const MAX_TIMEOUT_S: u64 = 1800;

/// Kills every process of the commands' user but the shell running it
/// (`kill -1` spares the caller and PID 1, the shim), then waits (2 s at
/// most) until the shim has reaped them: killed processes hold their pids
/// until then, and the next call must not meet a full pids limit. Only the
/// commands' user's processes are counted (`-O`: owned by this user): an
/// MCP server runs beside them as another uid.
macro_rules! kill_all_script {
    () => {
        "kill -9 -1 2>/dev/null; n=0; while [ $n -lt 200 ]; do c=0; for p in /proc/[0-9]*; do \
         [ \"$p\" != /proc/1 ] && [ -O \"$p\" ] && c=$((c+1)); done; [ $c -le 1 ] && break; n=$((n+1)); \
         sleep 0.01 2>/dev/null || break; done; "
    };
}

/// bash when the image has it, sh otherwise (the test image is busybox);
/// then whatever the command left running is killed, so nothing outlives its
/// call.
const SHELL: &str = concat!(
    "if command -v bash >/dev/null 2>&1; then bash -c \"$1\"; else sh -c \"$1\"; fi; code=$?; ",
    kill_all_script!(),
    "exit $code"
);

/// What ended a call from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancel {
    /// The run was stopped.
    Stop,
    /// chatd is shutting down.
    Shutdown,
}

pub fn bash_spec(sandboxes: &Sandboxes) -> ToolSpec {
    let limit = guard::size(sandboxes.limit());
    ToolSpec {
        name: "bash",
        description: Box::leak(
            format!(
                "Run a shell command with bash in this chat's own sandbox: a container with \
                 the chat's files at /workspace (the working folder; files saved there are the \
                 chat's), a home at /home/sandbox, a read-only system and a scratch /tmp. No \
                 network except the chat's web proxy (HTTP_PROXY, allowed hosts only). {limit} of \
                 memory, {} processes. It has a time limit (timeout_s, 120 by default, 1800 at \
                 most) and 64 KiB of output; past either, it and everything it started are \
                 killed, and nothing it starts in the background outlives it.",
                sandboxes.inner.settings.pids
            )
            .into_boxed_str(),
        ),
        parameters: json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "the command line, run with bash -c in /workspace"},
                "timeout_s": {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_S,
                    "description": "seconds before it is killed (default 120)"}
            },
            "required": ["command"]
        }),
        effect: Effect::Command,
    }
}

/// Runs the model's `{command, timeout_s?}` in `chat`'s sandbox; the tool
/// result fitted to `budget` characters, and what cancelled it, if anything.
pub async fn bash(
    sandboxes: &Sandboxes,
    chat: &str,
    call_id: &str,
    arguments: &str,
    budget: usize,
    cancel: impl Future<Output = Cancel>,
) -> (ToolOutput, Option<Cancel>) {
    let (command, timeout) = match parse(arguments) {
        Ok(parsed) => parsed,
        Err(message) => return (ToolOutput::failed("bash", &message), None),
    };
    tokio::pin!(cancel);
    let mut retried = false;
    let (output, ended, cancelled) = loop {
        // The start (and its wait for memory) runs on its own task, so a stop
        // answers at once and a start cut short leaves nothing half made.
        let starting = {
            let sandboxes = sandboxes.clone();
            let chat = chat.to_string();
            tokio::spawn(async move { sandboxes.ensure(&chat).await })
        };
        let lease = tokio::select! {
            started = starting => match started {
                Ok(Ok(lease)) => lease,
                Ok(Err(err)) => return (ToolOutput::failed("bash", &format!("not run: {err}")), None),
                Err(_) => return (ToolOutput::failed("bash", "not run: the sandbox's start failed"), None),
            },
            why = cancel.as_mut() => {
                let text = "not run: stopped while the sandbox started";
                return (ToolOutput::failed("bash", text), Some(why));
            }
        };
        sandboxes.hand_over_folders(chat).await;
        let (output, ended, cancelled) =
            run_command(sandboxes, &lease, &command, timeout, cancel.as_mut(), None).await;
        // The container went away under the lease (stopped by hand, its
        // runtime restarted): once, it is started again.
        if ended.error.is_some() && output.is_empty() && cancelled.is_none() && !retried {
            retried = true;
            drop(lease);
            sandboxes.forget(chat);
            continue;
        }
        // The command may have killed the shell that ends its call: what it
        // left is killed here.
        if sandboxes.anything_left(chat) {
            kill_all(sandboxes, &lease).await;
        }
        break (output, ended, cancelled);
    };
    let workspace_root = sandboxes.inner.folders.workspace(chat);
    let fitted = match Workspace::open(&workspace_root) {
        Ok(workspace) => tools::fit_output(&workspace, call_id, output, budget.saturating_sub(600)),
        Err(_) => output,
    };
    (
        crate::hostexec::result(&command, &fitted, Some(ended)),
        cancelled,
    )
}

fn parse(arguments: &str) -> Result<(String, Duration), String> {
    let args = Args::parse("bash", arguments).map_err(|e| e.message().to_string())?;
    let command = args
        .string("command", "the command line")
        .map_err(|e| e.message().to_string())?
        .to_string();
    let timeout = args
        .opt_count("timeout_s", 1)
        .map_err(|e| e.message().to_string())?
        .unwrap_or(DEFAULT_TIMEOUT_S);
    if timeout > MAX_TIMEOUT_S {
        return Err(format!(
            "bash: timeout_s is {timeout}; at most {MAX_TIMEOUT_S} seconds"
        ));
    }
    Ok((command, Duration::from_secs(timeout)))
}

/// Runs `command` in the leased sandbox to its end, its time limit, its
/// output limit or `cancel`. Answers the output (64 KiB at most), how it
/// ended, and what cancelled it. `first_byte` is told when output first
/// arrives (the benchmark's measure).
pub async fn run_command(
    sandboxes: &Sandboxes,
    lease: &Lease,
    command: &str,
    timeout: Duration,
    cancel: impl Future<Output = Cancel>,
    first_byte: Option<tokio::sync::oneshot::Sender<Instant>>,
) -> (String, Ended, Option<Cancel>) {
    let began = Instant::now();
    let docker = sandboxes.docker();
    let spec = json!({
        "Cmd": ["/bin/sh", "-c", SHELL, "sh", command],
        "AttachStdout": true,
        "AttachStderr": true,
        "WorkingDir": "/workspace",
        "User": sandboxes.user(),
    });
    let started = async {
        let id = docker.exec_create(&lease.container, &spec).await?;
        let response = docker.exec_start(&id).await?;
        Ok::<_, tandem_shared::docker::DockerError>((id, response))
    };
    let (id, mut response) = match started.await {
        Ok(started) => started,
        Err(err) => {
            let ended = Ended {
                error: Some(format!("the sandbox could not run it: {err}")),
                duration_ms: began.elapsed().as_millis() as u64,
                ..Ended::default()
            };
            return (String::new(), ended, None);
        }
    };
    let mut output: Vec<u8> = Vec::new();
    let mut bytes = 0u64;
    let mut demux = Demux::default();
    let mut killed_by: Option<&str> = None;
    let mut cancelled = None;
    let mut first_byte = first_byte;
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    tokio::pin!(cancel);
    // After a kill the stream ends at once; if it does not (the kill failed,
    // the runtime hangs), the container is stopped 10 s later.
    let hard_stop = tokio::time::sleep(Duration::from_secs(u64::from(u32::MAX)));
    tokio::pin!(hard_stop);
    let mut killed_at: Option<Instant> = None;
    loop {
        tokio::select! {
            chunk = response.chunk() => match chunk {
                Ok(Some(chunk)) => {
                    for (_, frame) in demux.push(&chunk) {
                        if frame.is_empty() {
                            continue;
                        }
                        if let Some(tell) = first_byte.take() {
                            let _ = tell.send(Instant::now());
                        }
                        bytes += frame.len() as u64;
                        let room = OUTPUT_LIMIT.saturating_sub(output.len());
                        output.extend_from_slice(&frame[..frame.len().min(room)]);
                    }
                    if bytes as usize > OUTPUT_LIMIT && killed_by.is_none() {
                        killed_by = Some("output");
                        kill_all(sandboxes, lease).await;
                        killed_at = Some(Instant::now());
                        hard_stop.as_mut().reset(tokio::time::Instant::now() + Duration::from_secs(10));
                    }
                }
                // The stream ends when the exec's process does.
                Ok(None) | Err(_) => break,
            },
            _ = &mut deadline, if killed_by.is_none() => {
                killed_by = Some("timeout");
                kill_all(sandboxes, lease).await;
                killed_at = Some(Instant::now());
                hard_stop.as_mut().reset(tokio::time::Instant::now() + Duration::from_secs(10));
            }
            _ = &mut hard_stop, if killed_at.is_some() => {
                tracing::warn!(chat = %lease.chat, "a killed command did not end; stopping its sandbox");
                sandboxes.stop(&lease.chat, "a killed command did not end").await;
                break;
            }
            why = &mut cancel, if cancelled.is_none() => {
                cancelled = Some(why);
                killed_by = Some(match why { Cancel::Stop => "stop", Cancel::Shutdown => "shutdown" });
                kill_all(sandboxes, lease).await;
                // After a kill the stream ends at once; a runtime that keeps
                // it open does not hold a stop or a shutdown.
                let _ = tokio::time::timeout(Duration::from_secs(5), async {
                    while let Ok(Some(_)) = response.chunk().await {}
                })
                .await;
                break;
            }
        }
    }
    let state = docker.exec_inspect(&id).await.unwrap_or(Value::Null);
    let exit_code = state["ExitCode"].as_i64();
    let mut how = None;
    let failed = exit_code != Some(0) || killed_by.is_some();
    // A process killed at the limit may leave its shell going on (exit 0):
    // the cgroup's count says so either way.
    let ended = if failed {
        CallEnded::Failed
    } else {
        CallEnded::Cleanly
    };
    let oom = cancelled.is_none() && sandboxes.oom_since_last(&lease.chat, ended).await;
    if failed || oom {
        if let Some(why) = sandboxes.take_stop_reason(&lease.chat) {
            killed_by = Some("chatd");
            how = Some(format!("killed: chatd stopped the sandbox ({why})"));
        } else if oom {
            killed_by = Some("oom");
            how = Some(format!(
                "out of memory ({} sandbox limit): a process was killed at the limit",
                guard::size(lease.limit)
            ));
        } else if killed_by == Some("shutdown") {
            how = Some("killed: chatd stopped".into());
        }
    }
    let ended = Ended {
        exit_code,
        killed_by: killed_by.map(str::to_string),
        timed_out: killed_by == Some("timeout"),
        truncated: bytes as usize > OUTPUT_LIMIT,
        duration_ms: began.elapsed().as_millis() as u64,
        bytes,
        how,
        ..Ended::default()
    };
    (
        String::from_utf8_lossy(&output).into_owned(),
        ended,
        cancelled,
    )
}

/// Kills every process of the commands' user in the sandbox but the shim.
async fn kill_all(sandboxes: &Sandboxes, lease: &Lease) {
    let cmd = ["/bin/sh", "-c", concat!(kill_all_script!(), "true")];
    if let Err(err) = sandboxes
        .docker()
        .exec_output(
            &lease.container,
            &cmd,
            &sandboxes.user(),
            Duration::from_secs(10),
        )
        .await
    {
        tracing::warn!(chat = %lease.chat, error = %err, "could not kill a sandbox's commands");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_checked_before_anything_runs() {
        assert_eq!(
            parse(r#"{"command": "ls"}"#).unwrap(),
            ("ls".to_string(), Duration::from_secs(120))
        );
        let err = parse(r#"{"command": "ls", "timeout_s": 5000}"#).unwrap_err();
        assert!(err.contains("at most 1800"), "{err}");
        assert!(parse(r#"{"timeout_s": 5}"#)
            .unwrap_err()
            .contains("command"));
    }
}
