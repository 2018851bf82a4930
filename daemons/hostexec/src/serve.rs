//! MCP servers on this machine (`POST /serve`): a chat's `stdio` server on
//! a box with no container runtime, run as a command is (its keeper, a PID
//! and a mount namespace of its own, the clean environment plus the
//! connector's values, never root) but without a shell and for as long as
//! chatd holds the connection. The request upgrades to a stream: chatd's
//! bytes are the server's stdin; hostexecd's are frames with Docker's
//! 8-byte head (stream 1 the server's stdout, 2 its stderr, 3 hostexecd's
//! words on its end). Closing the stream ends the server and everything it
//! started. It works in a HOME of its own (`folders::ready_server_home`),
//! out of the commands' view, and sees no workspace. Servers are
//! counted apart from commands, so a chat's server never keeps its commands
//! waiting, and no command's clean-up reaches it (another PID namespace).

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use nix::fcntl::OFlag;
use serde::Deserialize;
use tandem_shared::http::ApiError;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::calls::{KilledBy, Slot};
use crate::exec::drive::sleep_until_opt;
use crate::folders::{self, Unready};
use crate::keeper::{Program, Spec, Status};
use crate::spawner::Spawned;
use crate::Hostexec;

/// The protocol named in the request's `Upgrade` header.
pub const UPGRADE: &str = "tandem-stdio";
/// Servers running at once, every chat's together.
pub const MAX_SERVERS: usize = 64;
/// How long a server may run; chatd closes an idle one after 10 minutes
/// and opens it again when it is needed.
const LIFETIME: Duration = Duration::from_secs(24 * 3600);
const MAX_COMMAND: usize = 4096;
const MAX_ARGS: usize = 64;
const MAX_ARG: usize = 4096;
const MAX_ENV: usize = 64;
const MAX_ENV_NAME: usize = 128;
const MAX_ENV_VALUE: usize = 16 * 1024;
/// The request's body at most: the limits above, JSON-escaped.
const MAX_BODY: usize = 4 * 1024 * 1024;
/// How long the outputs are still read once the keeper has reported.
const DRAIN: Duration = Duration::from_millis(250);
/// One frame's write to chatd, at most.
const WRITE_BOUND: Duration = Duration::from_secs(30);
/// Names hostexecd sets itself.
const SET_HERE: [&str; 4] = ["PATH", "HOME", "LANG", "TZ"];

/// A server as chatd asks for it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ServeBody {
    chat_id: String,
    command: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
}

/// Checks a server's body; the refusal names the field and never repeats
/// an environment value (they are secrets).
fn check(body: &ServeBody) -> Result<(), ApiError> {
    if !tandem_shared::http::is_chat_id(&body.chat_id) {
        return Err(ApiError::bad_input(
            "chat_id",
            "is not a chat id (letters, digits and _, 64 at most)",
        ));
    }
    let text = |field: &str, value: &str, max: usize| -> Result<(), ApiError> {
        if value.len() > max {
            return Err(ApiError::bad_input(
                field,
                format!("is {} bytes, over the limit of {max}", value.len()),
            )
            .with("limit", max));
        }
        if value.contains('\0') {
            return Err(ApiError::bad_input(field, "holds a NUL byte"));
        }
        Ok(())
    };
    if body.command.trim().is_empty() {
        return Err(ApiError::bad_input("command", "is empty"));
    }
    text("command", &body.command, MAX_COMMAND)?;
    if body.args.len() > MAX_ARGS {
        return Err(
            ApiError::bad_input("args", format!("has over {MAX_ARGS} entries"))
                .with("limit", MAX_ARGS),
        );
    }
    for (i, arg) in body.args.iter().enumerate() {
        text(&format!("args[{i}]"), arg, MAX_ARG)?;
    }
    if body.env.len() > MAX_ENV {
        return Err(
            ApiError::bad_input("env", format!("has over {MAX_ENV} entries"))
                .with("limit", MAX_ENV),
        );
    }
    for (name, value) in &body.env {
        let plain = !name.is_empty()
            && name.len() <= MAX_ENV_NAME
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !plain {
            return Err(ApiError::bad_input(
                "env",
                format!("has a name that is not letters, digits and _ ({MAX_ENV_NAME} at most, not starting with a digit)"),
            ));
        }
        if SET_HERE.contains(&name.as_str()) {
            return Err(ApiError::bad_input(
                &format!("env.{name}"),
                "is set by hostexecd (PATH, HOME, LANG and TZ are its own)",
            ));
        }
        if value.len() > MAX_ENV_VALUE || value.contains('\0') {
            return Err(ApiError::bad_input(
                &format!("env.{name}"),
                format!("is over {MAX_ENV_VALUE} bytes or holds a NUL byte"),
            ));
        }
    }
    Ok(())
}

/// `POST /serve`: the server started, then 101 and the stream; refused
/// before anything runs with 400 (the field named), 409
/// `workspace_unusable` (the chat's home), 429 `too_many_servers`.
pub async fn serve(
    State(hx): State<Arc<Hostexec>>,
    mut request: Request,
) -> Result<Response, ApiError> {
    let refuse = |e: ApiError| {
        hx.metrics.refused("bad_input");
        e
    };
    let asked = request
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case(UPGRADE));
    if !asked {
        return Err(refuse(ApiError::bad_input(
            "Upgrade",
            format!("must be {UPGRADE}: this route's answer is the server's stream"),
        )));
    }
    let upgrade = hyper::upgrade::on(&mut request);
    let bytes = axum::body::to_bytes(request.into_body(), MAX_BODY)
        .await
        .map_err(|_| {
            refuse(
                ApiError::bad_input("body", format!("is over {MAX_BODY} bytes or cut short"))
                    .with("limit", MAX_BODY),
            )
        })?;
    // serde's words may quote a value: they are not repeated.
    let body: ServeBody = serde_json::from_slice(&bytes).map_err(|_| {
        refuse(ApiError::bad_input(
            "body",
            "is not a server's JSON: {chat_id, command, args?, env?}",
        ))
    })?;
    check(&body).map_err(refuse)?;
    if hx.shutdown.is_begun() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "hostexecd is stopping: no new server starts",
        ));
    }
    let id = tandem_shared::time::new_id("hs_");
    // A server's id is new: the bound is the only refusal.
    let Ok(slot) = hx.servers.reserve_server(&body.chat_id, &id) else {
        hx.metrics.refused("too_many_servers");
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_servers",
            format!("{MAX_SERVERS} MCP servers are running, the most at once"),
        )
        .with("limit", MAX_SERVERS)
        .retry_after(1));
    };
    // The start, the upgrade and the driving run on a task of their own: a
    // caller gone mid-start (hyper drops this handler) leaves a task that
    // finds no upgrade and ends what it started, its row and its count too.
    let (told, answer) = tokio::sync::oneshot::channel();
    tokio::spawn({
        let hx = hx.clone();
        async move {
            let server = match start(hx.clone(), slot, body).await {
                Ok(server) => server,
                Err(why) => {
                    let _ = told.send(Err(why));
                    return;
                }
            };
            if told.send(Ok(())).is_err() {
                drive(hx, server, None).await;
                return;
            }
            let stream = upgrade.await.ok().map(hyper_util::rt::TokioIo::new);
            drive(hx, server, stream).await;
        }
    });
    match answer.await {
        Ok(Ok(())) => Ok((
            StatusCode::SWITCHING_PROTOCOLS,
            [(header::CONNECTION, "Upgrade"), (header::UPGRADE, UPGRADE)],
            Body::empty(),
        )
            .into_response()),
        Ok(Err(Unready::Unusable(why))) => {
            hx.metrics.refused("workspace_unusable");
            Err(ApiError::conflict("workspace_unusable", why))
        }
        Ok(Err(Unready::Failed(e))) => {
            tracing::error!(error = %e, "a server could not start");
            Err(ApiError::internal(format!(
                "the server could not start: {e}"
            )))
        }
        Err(_) => Err(ApiError::internal("the server's start was cut short")),
    }
}

/// A server started, to be driven.
struct Server {
    slot: Slot,
    /// Its own HOME, removed at its end.
    home: PathBuf,
    spawned: Spawned,
    spec: Spec,
    stdin: OwnedFd,
    stderr: OwnedFd,
    began: Instant,
}

fn pipe() -> Result<(OwnedFd, OwnedFd), Unready> {
    nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(Unready::from)
}

async fn start(hx: Arc<Hostexec>, slot: Slot, body: ServeBody) -> Result<Server, Unready> {
    let chat = body.chat_id.clone();
    let home = {
        let hx = hx.clone();
        let (chat, id) = (chat.clone(), slot.running.call_id.clone());
        tokio::task::spawn_blocking(move || {
            folders::ready_server_home(&hx.config, &chat, &id, hx.run_as.as_ref(), hx.owner)
        })
        .await
        .map_err(|e| Unready::Failed(std::io::Error::other(e.to_string())))??
    };
    let started = spawn(&hx, &slot, &chat, &home, body).await;
    let (spawned, spec, stdin, stderr) = match started {
        Ok(started) => started,
        Err(why) => {
            let home = home.clone();
            let _ = tokio::task::spawn_blocking(move || folders::remove_server_home(&home)).await;
            return Err(why);
        }
    };
    hx.metrics.servers.inc();
    Ok(Server {
        slot,
        home,
        spawned,
        spec,
        stdin,
        stderr,
        began: Instant::now(),
    })
}

/// The server's keeper started with its pipes, and its audit row.
async fn spawn(
    hx: &Arc<Hostexec>,
    slot: &Slot,
    chat: &str,
    home: &std::path::Path,
    body: ServeBody,
) -> Result<(Spawned, Spec, OwnedFd, OwnedFd), Unready> {
    let (stdin_read, stdin_write) = pipe()?;
    let (stderr_read, stderr_write) = pipe()?;
    let mut hidden = vec![
        hx.config.data_dir.clone(),
        hx.config.shared_workspace.clone(),
    ];
    hidden.extend(hx.config.socket.parent().map(|p| p.to_path_buf()));
    let program = Program {
        command: body.command.clone(),
        args: body.args.clone(),
        env: body.env.into_iter().collect(),
        stdin_fd: stdin_read.as_raw_fd(),
        stderr_fd: stderr_write.as_raw_fd(),
    };
    // The audit keeps the command and its arguments, never the environment.
    let mut line = vec![body.command];
    line.extend(body.args);
    let spec = hx.spec(line.join(" "), Some(program), home, home, hidden, LIFETIME);
    let spawned = hx
        .spawner
        .spawn_with(vec![stdin_read, stderr_write])
        .await
        .map_err(Unready::Failed)?;
    let begun = {
        let store = hx.store.clone();
        let (id, command, chat) = (
            slot.running.call_id.clone(),
            spec.command.clone(),
            chat.to_string(),
        );
        let (pid, start) = (spawned.keeper.pid, spawned.keeper.start);
        // No workspace: a server is lent none, so a restart gives none back.
        tokio::task::spawn_blocking(move || {
            store.begin(&crate::store::Begun {
                call_id: &id,
                chat: &chat,
                command: &command,
                keeper_pid: pid,
                keeper_start: start,
                workspace: None,
            })
        })
        .await
    };
    if !matches!(begun, Ok(Ok(()))) {
        spawned.keeper.signal(libc::SIGKILL);
        return Err(Unready::Failed(std::io::Error::other(
            "the audit row could not be written",
        )));
    }
    Ok((spawned, spec, stdin_write, stderr_read))
}

/// One frame of the stream: Docker's head (the stream, three zeros, the
/// length big-endian) and the bytes.
pub fn frame(stream: u8, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + bytes.len());
    out.extend_from_slice(&[stream, 0, 0, 0]);
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
    out
}

type Stream = hyper_util::rt::TokioIo<hyper::upgrade::Upgraded>;

/// Pumps the server's stdin from the stream and its outputs into it until
/// the server ends or chatd goes away; then the last frame, the audit row
/// and the log line.
async fn drive(hx: Arc<Hostexec>, server: Server, stream: Option<Stream>) {
    let Server {
        slot,
        home,
        spawned,
        spec,
        stdin,
        stderr,
        began,
    } = server;
    let running = slot.running.clone();
    let Spawned {
        keeper,
        control,
        output,
    } = spawned;
    let mut error: Option<String> = None;
    let opened = (|| {
        let control = control
            .set_nonblocking(true)
            .and_then(|_| tokio::net::UnixStream::from_std(control))?;
        let output = tokio::net::unix::pipe::Receiver::from_owned_fd(output)?;
        let stderr = tokio::net::unix::pipe::Receiver::from_owned_fd(stderr)?;
        let stdin = tokio::net::unix::pipe::Sender::from_owned_fd(stdin)?;
        Ok::<_, std::io::Error>((control, output, stderr, stdin))
    })();
    let (Some(stream), Ok((mut control, mut output, mut stderr, mut stdin))) = (stream, opened)
    else {
        // No stream (the caller went away before the upgrade) or no pipes.
        keeper.signal(libc::SIGKILL);
        running.kill(KilledBy::Stop);
        crate::exec::finish::sweep_lost(&keeper, &running.call_id).await;
        let error = Some("the server's stream was not opened".into());
        end(&hx, slot, home, None, error, began, 0).await;
        return;
    };
    let body = serde_json::to_vec(&spec).unwrap_or_default();
    let sent = tokio::time::timeout(Duration::from_secs(5), async {
        control.write_all(&body).await?;
        control.shutdown().await
    })
    .await;
    if !matches!(sent, Ok(Ok(()))) {
        keeper.signal(libc::SIGKILL);
        error = Some("the server's keeper did not take it".into());
    }
    let (mut from_chatd, mut to_chatd) = tokio::io::split(stream);
    // chatd's bytes go to stdin on a task of their own: a server that does
    // not read its stdin must not stop its output being read. The stream's
    // end is chatd closing the session: the server ends.
    let feeder = {
        let running = running.clone();
        tokio::spawn(async move {
            let _ = tokio::io::copy(&mut from_chatd, &mut stdin).await;
            drop(stdin);
            // Whether the copy ended on chatd's side or the server's, the
            // stream is done with: a server that closed its stdin is ending.
            let mut rest = [0u8; 1024];
            while matches!(from_chatd.read(&mut rest).await, Ok(n) if n > 0) {}
            running.kill(KilledBy::Stop);
        })
    };
    let deadline = tokio::time::Instant::now() + LIFETIME;
    let (mut out_done, mut err_done, mut status_done) = (false, false, false);
    let mut status_buf = Vec::new();
    let mut signalled: Option<tokio::time::Instant> = None;
    let mut drain_until: Option<tokio::time::Instant> = None;
    let mut chatd_gone = false;
    let mut bytes: u64 = 0;
    let (mut obuf, mut ebuf, mut sbuf) = (vec![0u8; 16 * 1024], vec![0u8; 4096], [0u8; 1024]);
    while !(out_done && err_done && status_done) {
        let killed = running.killed_by();
        // What to send chatd this turn, once the select has chosen.
        let mut frame_out: Option<Vec<u8>> = None;
        tokio::select! {
            _ = running.wake.notified() => {}
            _ = tokio::time::sleep_until(deadline), if killed.is_none() => {
                running.kill(KilledBy::Timeout);
            }
            r = output.read(&mut obuf), if !out_done => match r {
                Ok(0) | Err(_) => out_done = true,
                Ok(n) => {
                    bytes += n as u64;
                    frame_out = Some(frame(1, &obuf[..n]));
                }
            },
            r = stderr.read(&mut ebuf), if !err_done => match r {
                Ok(0) | Err(_) => err_done = true,
                Ok(n) => frame_out = Some(frame(2, &ebuf[..n])),
            },
            r = control.read(&mut sbuf), if !status_done => match r {
                Ok(0) | Err(_) => {
                    status_done = true;
                    drain_until = Some(tokio::time::Instant::now() + DRAIN);
                }
                Ok(n) => status_buf.extend_from_slice(&sbuf[..n]),
            },
            _ = sleep_until_opt(drain_until), if status_done => {
                out_done = true;
                err_done = true;
            }
            _ = sleep_until_opt(signalled.map(|s| s + Duration::from_secs(1))), if signalled.is_some() && !status_done => {
                // The keeper did not end it in its grace: hostexecd does.
                let (pid, start) = (keeper.pid, keeper.start);
                let _ = tokio::task::spawn_blocking(move || crate::sweep::end_keeper_tree(pid, start)).await;
                keeper.signal(libc::SIGKILL);
                error.get_or_insert_with(|| "the server's keeper did not answer: hostexecd ended it".into());
                signalled = Some(tokio::time::Instant::now() + Duration::from_secs(3600));
            }
        }
        if let Some(frame) = frame_out {
            // Bounded: a chatd that holds the stream without reading it
            // must not keep a kill, the lifetime or shutdown waiting.
            let sent = tokio::time::timeout(WRITE_BOUND, to_chatd.write_all(&frame)).await;
            if !chatd_gone && !matches!(sent, Ok(Ok(()))) {
                chatd_gone = true;
                running.kill(KilledBy::Stop);
            }
        }
        if running.killed_by().is_some() && signalled.is_none() && !status_done {
            keeper.signal(libc::SIGTERM);
            signalled = Some(tokio::time::Instant::now());
        }
    }
    feeder.abort();
    let status: Option<Status> = serde_json::from_slice(status_buf.trim_ascii()).ok();
    if status.as_ref().is_none_or(|s| s.left > 0) {
        crate::exec::finish::sweep_lost(&keeper, &running.call_id).await;
    }
    let words = ending_words(status.as_ref(), error.as_deref(), running.killed_by());
    if !chatd_gone {
        let last = async {
            to_chatd.write_all(&frame(3, words.as_bytes())).await?;
            to_chatd.shutdown().await
        };
        let _ = tokio::time::timeout(Duration::from_secs(2), last).await;
    }
    end(&hx, slot, home, status, error, began, bytes).await;
}

/// hostexecd's words on a server's end, as the last frame says them.
fn ending_words(status: Option<&Status>, error: Option<&str>, killed: Option<KilledBy>) -> String {
    if let Some(why) = error.or(status.and_then(|s| s.error.as_deref())) {
        return format!("hostexecd: {why}");
    }
    match (
        status.and_then(|s| s.exit_code),
        status.and_then(|s| s.signal.as_deref()),
        killed,
    ) {
        (_, _, Some(KilledBy::Timeout)) => {
            format!(
                "hostexecd: the server ran {} hours and was ended",
                LIFETIME.as_secs() / 3600
            )
        }
        (_, _, Some(KilledBy::Shutdown)) => {
            "hostexecd: the server was ended: hostexecd is stopping".into()
        }
        (Some(code), _, _) => format!("hostexecd: the server exited with code {code}"),
        (None, Some(signal), _) => format!("hostexecd: the server was ended by SIG{signal}"),
        (None, None, _) => "hostexecd: the server ended".into(),
    }
}

/// The audit row finished and the server's HOME removed, then the
/// metrics, the log line; the place given back last, so a shutdown that
/// waits for it finds the row written.
async fn end(
    hx: &Arc<Hostexec>,
    slot: Slot,
    home: PathBuf,
    status: Option<Status>,
    error: Option<String>,
    began: Instant,
    bytes: u64,
) {
    let running = slot.running.clone();
    let status = status.unwrap_or_default();
    let error = error.or(status.error.clone());
    let killed_by = running.killed_by();
    let duration_ms = began.elapsed().as_millis() as u64;
    let ending = crate::store::Ending {
        exit_code: status.exit_code,
        signal: status.signal.clone(),
        duration_ms,
        timed_out: killed_by == Some(KilledBy::Timeout),
        truncated: false,
        killed_by,
        bytes,
        error: error.clone(),
    };
    let store = hx.store.clone();
    let id = running.call_id.clone();
    let finished = tokio::task::spawn_blocking(move || {
        folders::remove_server_home(&home);
        store.finish(&id, &ending)
    })
    .await;
    if !matches!(finished, Ok(Ok(()))) {
        tracing::error!(call = %running.call_id, "the audit row of a server was not completed");
    }
    hx.metrics.servers.dec();
    tracing::info!(
        "[host-exec] server {} chat {} exit {} signal {} ms {} killed_by {} bytes {}{}",
        running.call_id,
        running.chat,
        status
            .exit_code
            .map(|c| c.to_string())
            .unwrap_or_else(|| "-".into()),
        status.signal.as_deref().unwrap_or("-"),
        duration_ms,
        killed_by.map(|k| k.as_str()).unwrap_or("-"),
        bytes,
        if error.is_some() {
            " (error: see the audit)"
        } else {
            ""
        },
    );
    drop(slot);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(json: serde_json::Value) -> ServeBody {
        serde_json::from_value(json).unwrap()
    }

    fn field(json: serde_json::Value) -> Option<String> {
        check(&body(json))
            .err()
            .map(|e| e.extra["field"].as_str().unwrap_or_default().to_string())
    }

    #[test]
    fn a_server_is_checked_field_by_field() {
        let ok = serde_json::json!({"chat_id": "c_1", "command": "npx", "args": ["-y", "x"], "env": {"TOKEN": "s"}});
        assert_eq!(field(ok), None);
        assert_eq!(
            field(serde_json::json!({"chat_id": "../x", "command": "npx"})).as_deref(),
            Some("chat_id")
        );
        assert_eq!(
            field(serde_json::json!({"chat_id": "c_1", "command": " "})).as_deref(),
            Some("command")
        );
        assert_eq!(
            field(serde_json::json!({"chat_id": "c_1", "command": "a", "args": ["ok", "b\u{0}"]}))
                .as_deref(),
            Some("args[1]")
        );
        assert_eq!(
            field(serde_json::json!({"chat_id": "c_1", "command": "a", "env": {"1X": "v"}}))
                .as_deref(),
            Some("env")
        );
        assert_eq!(
            field(serde_json::json!({"chat_id": "c_1", "command": "a", "env": {"PATH": "/x"}}))
                .as_deref(),
            Some("env.PATH"),
            "hostexecd's own four are not replaced"
        );
        let secret = "s".repeat(MAX_ENV_VALUE + 1);
        let refused = check(&body(
            serde_json::json!({"chat_id": "c_1", "command": "a", "env": {"KEY": secret}}),
        ))
        .unwrap_err();
        assert_eq!(refused.extra["field"], "env.KEY");
        assert!(
            !refused.message.contains("sss"),
            "the value is not repeated"
        );
    }

    #[test]
    fn frames_read_back_through_the_shared_demux() {
        let mut wire = frame(1, b"{\"jsonrpc\":\"2.0\"}\n");
        wire.extend(frame(2, b"starting\n"));
        wire.extend(frame(3, b"hostexecd: the server exited with code 0"));
        let frames = tandem_shared::docker::Demux::default().push(&wire);
        let streams: Vec<u8> = frames.iter().map(|(s, _)| *s).collect();
        assert_eq!(streams, vec![1, 2, 3]);
        assert_eq!(frames[2].1, b"hostexecd: the server exited with code 0");
    }

    #[test]
    fn the_last_words_say_how_it_ended() {
        let exited = Status {
            exit_code: Some(1),
            ..Status::default()
        };
        assert_eq!(
            ending_words(Some(&exited), None, None),
            "hostexecd: the server exited with code 1"
        );
        let failed = Status {
            error: Some("could not start nope in /h: No such file".into()),
            ..Status::default()
        };
        assert!(ending_words(Some(&failed), None, None).contains("could not start nope"));
        assert!(ending_words(None, None, Some(KilledBy::Shutdown)).contains("stopping"));
    }
}
