//! The `bash` tool on this machine, through hostexecd: the call goes to
//! hostexecd's socket with the chat's workspace (the command's working
//! folder), its output comes back as it is made, and the result the model
//! reads says how the command ended (exit code, the time limit, the output
//! limit, a stop) and which files it saved in the workspace. Dropping the
//! request (a stop, chatd's shutdown) makes hostexecd kill the command and
//! everything it started.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use crate::tools::{self, Args, Effect, ToolOutput, ToolSpec};
use crate::workspace::Workspace;

/// The `Upgrade` hostexecd's `/serve` answers to.
const SERVE_UPGRADE: &str = "tandem-stdio";
/// A server's start through hostexecd, until its stream is open.
const SERVE_START: Duration = Duration::from_secs(10);

/// hostexecd's API over its unix socket.
#[derive(Clone)]
pub struct HostExec {
    client: reqwest::Client,
}

/// How a command ended, as hostexecd says.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Ended {
    pub exit_code: Option<i64>,
    pub signal: Option<String>,
    pub timed_out: bool,
    pub truncated: bool,
    pub killed_by: Option<String>,
    pub duration_ms: u64,
    pub bytes: u64,
    pub changes: Value,
    /// Why the command could not run at all (bash did not start, …).
    pub error: Option<String>,
    /// How it ended, when the runner knows better than the fields above
    /// ("out of memory (4 GiB sandbox limit)").
    pub how: Option<String>,
    /// What hostexecd put right before the command (a home that had been
    /// replaced by a link), in words.
    pub repaired: Option<String>,
}

pub fn bash_spec() -> ToolSpec {
    ToolSpec {
        name: "bash",
        description: "Run a shell command with bash on this machine, in the chat's workspace (the \
            folder the file tools and uploads/ see: what it writes there they read), with HOME a \
            private folder of the chat's beside it. No isolation from the machine: it runs as \
            the box's user (or the one hostexecd is set to run commands as), with only PATH, \
            HOME, LANG and TZ set. It has a time \
            limit (timeout_s, 120 by default, 1800 at most) and 64 KiB of output; past either, \
            it and everything it started are killed. Nothing it starts outlives it. The result \
            gives the output, how it ended and the files it created, changed or deleted in the \
            workspace.",
        parameters: json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "the command line, run with bash -c"},
                "timeout_s": {"type": "integer", "minimum": 1, "maximum": 1800,
                    "description": "seconds before it is killed (default 120)"}
            },
            "required": ["command"]
        }),
        effect: Effect::Command,
    }
}

impl HostExec {
    pub fn new(socket: &Path) -> anyhow::Result<HostExec> {
        let client = reqwest::Client::builder()
            .unix_socket(socket.to_path_buf())
            .connect_timeout(Duration::from_secs(2))
            .build()?;
        Ok(HostExec { client })
    }

    /// Starts a stdio MCP server of `chat` (`POST /serve`): the command as
    /// given, no shell, with `env` beside hostexecd's clean four; the stream
    /// of its frames, or why not in words (never holding an env value:
    /// hostexecd's refusals do not repeat them).
    pub async fn serve<'a>(
        &self,
        chat: &str,
        command: &str,
        args: &[String],
        env: impl Iterator<Item = (&'a str, &'a str)>,
    ) -> Result<reqwest::Upgraded, String> {
        let env: serde_json::Map<String, Value> =
            env.map(|(k, v)| (k.to_string(), json!(v))).collect();
        let body = json!({"chat_id": chat, "command": command, "args": args, "env": env});
        let request = self
            .client
            .post("http://hostexecd/serve")
            .header(reqwest::header::CONNECTION, "Upgrade")
            .header(reqwest::header::UPGRADE, SERVE_UPGRADE)
            .json(&body);
        // Bounded here, not with the request's timeout, which would reach
        // past the upgrade into the stream.
        let response = match tokio::time::timeout(SERVE_START, request.send()).await {
            Err(_) => {
                return Err(format!(
                    "hostexecd did not answer within {} s",
                    SERVE_START.as_secs()
                ))
            }
            Ok(Err(e)) if e.is_connect() => {
                return Err(
                    "hostexecd is not running, and this box has no container runtime: \
                    a stdio server runs through one of them (`tandem hostexec start`)"
                        .into(),
                )
            }
            Ok(Err(e)) => return Err(format!("hostexecd could not be asked to start it: {e}")),
            Ok(Ok(response)) => response,
        };
        if response.status() != reqwest::StatusCode::SWITCHING_PROTOCOLS {
            let value: Value = tokio::time::timeout(SERVE_START, response.json())
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or(Value::Null);
            let why = value["error"]["message"]
                .as_str()
                .unwrap_or("no reason given");
            return Err(format!("hostexecd refused the server: {why}"));
        }
        response
            .upgrade()
            .await
            .map_err(|e| format!("hostexecd's stream could not be opened: {e}"))
    }

    /// Runs `arguments` (the model's `{command, timeout_s?}`) for `chat`;
    /// the whole tool result, fitted to `budget` characters.
    pub async fn bash(
        &self,
        chat: &str,
        call_id: &str,
        arguments: &str,
        budget: usize,
        workspace_root: &Path,
    ) -> ToolOutput {
        let args = match Args::parse("bash", arguments) {
            Ok(args) => args,
            Err(e) => return ToolOutput::failed("bash", e.message()),
        };
        let command = match args.string("command", "the command line") {
            Ok(c) => c.to_string(),
            Err(e) => return ToolOutput::failed("bash", e.message()),
        };
        let timeout = match args.opt_count("timeout_s", 1) {
            Ok(t) => t,
            Err(e) => return ToolOutput::failed("bash", e.message()),
        };
        // The chat's workspace (its own, or the shared one): hostexecd takes
        // no other.
        let mut body = json!({"chat_id": chat, "command": command, "workspace": workspace_root});
        if let Some(t) = timeout {
            body["timeout_s"] = json!(t);
        }
        let Ok(response) = self
            .client
            .post("http://hostexecd/exec")
            .json(&body)
            .send()
            .await
        else {
            return ToolOutput::failed(
                "bash",
                "hostexecd is not running, so commands cannot run on this machine now \
                 (the person can start it with `tandem hostexec start`)",
            );
        };
        let status = response.status();
        if !status.is_success() {
            let value: Value = response.json().await.unwrap_or(Value::Null);
            let why = value["error"]["message"]
                .as_str()
                .unwrap_or("hostexecd refused the command")
                .to_string();
            return ToolOutput::failed("bash", &format!("not run: {why}"));
        }
        let (output, ended) = read_stream(response).await;
        // A long output keeps its first and last quarter here, the whole in
        // the workspace's .tandem/outputs/ (as for every tool).
        let fitted = match Workspace::open(workspace_root) {
            Ok(workspace) => {
                tools::fit_output(&workspace, call_id, output, budget.saturating_sub(600))
            }
            Err(_) => output,
        };
        result(&command, &fitted, ended)
    }
}

/// Reads hostexecd's NDJSON answer: the output, and how it ended (`None`
/// when the stream broke first).
async fn read_stream(mut response: reqwest::Response) -> (String, Option<Ended>) {
    let mut output = String::new();
    let mut ended = None;
    let mut lines = crate::ndjson::Lines::default();
    while let Ok(Some(chunk)) = response.chunk().await {
        for event in lines.push(&chunk) {
            match event["event"].as_str() {
                Some("output") => output.push_str(event["text"].as_str().unwrap_or("")),
                Some("finished") => ended = Some(ended_of(&event)),
                _ => {}
            }
        }
    }
    (output, ended)
}

fn ended_of(event: &Value) -> Ended {
    Ended {
        exit_code: event["exit_code"].as_i64(),
        signal: event["signal"].as_str().map(str::to_string),
        timed_out: event["timed_out"].as_bool().unwrap_or(false),
        truncated: event["truncated"].as_bool().unwrap_or(false),
        killed_by: event["killed_by"].as_str().map(str::to_string),
        duration_ms: event["duration_ms"].as_u64().unwrap_or(0),
        bytes: event["bytes"].as_u64().unwrap_or(0),
        changes: event["changes"].clone(),
        error: event["error"].as_str().map(str::to_string),
        how: None,
        repaired: event["repaired"].as_str().map(str::to_string),
    }
}

/// The tool result: the output, then one line on how it ended and one on
/// the files it saved.
pub fn result(command: &str, output: &str, ended: Option<Ended>) -> ToolOutput {
    let Some(ended) = ended else {
        let text = format!(
            "{output}\n[the command's end was not reported: hostexecd stopped while it ran; \
             nothing it started is left running]"
        );
        return ToolOutput {
            ok: false,
            text,
            summary: "bash: hostexecd stopped".into(),
            bytes: output.len() as u64,
        };
    };
    let seconds = ended.duration_ms as f64 / 1000.0;
    if let Some(error) = &ended.error {
        if ended.exit_code.is_none() && ended.killed_by.is_none() {
            return ToolOutput {
                ok: false,
                text: format!("{output}\n[the command could not run: {error}]"),
                summary: "bash: could not run".into(),
                bytes: ended.bytes,
            };
        }
    }
    let how = match ended.how.clone() {
        Some(how) => how,
        None => how_it_ended(&ended, seconds),
    };
    let mut text = output.to_string();
    if ended.truncated {
        text.push_str(&format!(
            "\n[output cut at 64 KiB: {} bytes in all]",
            ended.bytes
        ));
    }
    text.push_str(&format!("\n[{how}]"));
    if let Some(files) = changes_line(&ended.changes) {
        text.push_str(&format!("\n[{files}]"));
    }
    if let Some(repaired) = &ended.repaired {
        text.push_str(&format!("\n[{repaired}]"));
    }
    let ok = ended.killed_by.is_none() && ended.exit_code == Some(0);
    let first: String = command
        .lines()
        .next()
        .unwrap_or("")
        .chars()
        .take(60)
        .collect();
    ToolOutput {
        ok,
        text,
        summary: format!("bash: {first} → {how}"),
        bytes: ended.bytes,
    }
}

/// How a command ended, from hostexecd's fields.
fn how_it_ended(ended: &Ended, seconds: f64) -> String {
    match ended.killed_by.as_deref() {
        Some("timeout") => format!("killed at its time limit after {seconds:.1} s"),
        Some("output") => "killed: its output passed 64 KiB".to_string(),
        Some("stop") => "killed: the run was stopped".to_string(),
        Some("shutdown") | Some("restart") => "killed: hostexecd stopped".to_string(),
        Some(other) => format!("killed ({other})"),
        None => match (ended.exit_code, &ended.signal) {
            (Some(code), _) => format!("exit code {code} after {seconds:.1} s"),
            (None, Some(signal)) => format!("ended by SIG{signal} after {seconds:.1} s"),
            (None, None) => format!("ended after {seconds:.1} s"),
        },
    }
}

/// "files in the workspace: created a; changed b; deleted c; 3 more", or
/// nothing (paths are relative to the workspace).
fn changes_line(changes: &Value) -> Option<String> {
    let mut parts = Vec::new();
    for key in ["created", "changed", "deleted"] {
        let names: Vec<&str> = changes[key]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if !names.is_empty() {
            parts.push(format!("{key} {}", names.join(", ")));
        }
    }
    let more = changes["more"].as_u64().unwrap_or(0);
    if more > 0 {
        parts.push(format!("{more} more"));
    }
    (!parts.is_empty()).then(|| format!("files in the workspace: {}", parts.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_result_says_how_the_command_ended_and_what_it_saved() {
        let ended = Ended {
            exit_code: Some(0),
            duration_ms: 1200,
            bytes: 3,
            changes: json!({"created": ["a.txt"], "changed": [], "deleted": ["b"], "more": 2}),
            ..Ended::default()
        };
        let out = result("ls", "hi\n", Some(ended));
        assert!(out.ok);
        assert!(
            out.text.contains("[exit code 0 after 1.2 s]"),
            "{}",
            out.text
        );
        assert!(
            out.text
                .contains("[files in the workspace: created a.txt; deleted b; 2 more]"),
            "{}",
            out.text
        );
        let repaired = Ended {
            exit_code: Some(0),
            repaired: Some("the chat's home had been replaced by a symbolic link: …".into()),
            ..Ended::default()
        };
        let out = result("ls", "", Some(repaired));
        assert!(
            out.ok
                && out
                    .text
                    .ends_with("[the chat's home had been replaced by a symbolic link: …]"),
            "{}",
            out.text
        );
        let killed = Ended {
            killed_by: Some("timeout".into()),
            timed_out: true,
            duration_ms: 120_000,
            ..Ended::default()
        };
        let out = result("sleep 999", "", Some(killed));
        assert!(!out.ok);
        assert!(
            out.text.contains("killed at its time limit after 120.0 s"),
            "{}",
            out.text
        );
        let flood = Ended {
            killed_by: Some("output".into()),
            truncated: true,
            bytes: 70_000,
            ..Ended::default()
        };
        let out = result("yes", "y\n", Some(flood));
        assert!(
            out.text.contains("output cut at 64 KiB: 70000 bytes"),
            "{}",
            out.text
        );
        let failed = Ended {
            error: Some("could not start bash: Permission denied".into()),
            ..Ended::default()
        };
        let out = result("x", "", Some(failed));
        assert!(
            !out.ok && out.text.contains("could not run: could not start bash"),
            "{}",
            out.text
        );
        let lost = result("x", "partial", None);
        assert!(!lost.ok && lost.text.contains("hostexecd stopped"));
    }
}
