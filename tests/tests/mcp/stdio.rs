//! stdio connectors: the reference server from npm started by its command
//! in each chat's sandbox (podman, the busybox test image with this
//! machine's node added), as a uid of its own; what a body may say; a
//! command that fails says why. Every wait is on a condition with a bound.

use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};
use tandem_tests::harness::{
    run_id, tool_results, Chatd, Client, Podman, SandboxCleanup, Sim, TOOLS_IMAGE,
};
use tandem_tests::mcpservers::EVERYTHING;
use tandem_tests::{npm, pip};

const QUICK: Duration = Duration::from_secs(90);
const SECRET: &str = "env-secret-5c1e-never-shown";

struct Setup {
    sim: Sim,
    chatd: Chatd,
    client: Client,
    _cleanup: SandboxCleanup,
}

impl Setup {
    /// Scripts the engine's next answers, sends `text` and waits for the
    /// run to end done; the chat's tool results so far.
    async fn turn(&self, chat: &str, text: &str, script: Value) -> anyhow::Result<Vec<String>> {
        self.sim.faults(script).await?;
        let run = run_id(&self.client.send(chat, text).await?)?;
        let ended = self.wait(chat, &run).await?;
        anyhow::ensure!(ended["status"] == "done", "{ended}");
        Ok(tool_results(&self.client.snapshot(chat).await?))
    }

    /// Saves a connector from `body` and presses Test: Test's answer.
    async fn save_and_test(&self, body: Value) -> anyhow::Result<Value> {
        let made = self.client.post("/mcp-connectors", body).await?;
        anyhow::ensure!(made.status == 201, "{made:?}");
        let id = made.body["id"].as_str().context("id")?;
        let tested = self
            .client
            .post(&format!("/mcp-connectors/{id}/test"), json!({}))
            .await?;
        Ok(tested.body)
    }

    async fn wait(&self, chat: &str, run: &str) -> anyhow::Result<Value> {
        let ends = ["done", "failed", "stopped", "interrupted", "paused"];
        self.client.wait_run(chat, run, &ends, QUICK).await
    }
}

async fn start(podman: &Podman) -> anyhow::Result<Setup> {
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let env = podman.chatd_env(TOOLS_IMAGE, "0.5");
    let all: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let chatd = Chatd::start(&sim.url(), &all).await?;
    let client = chatd.client();
    let cleanup = SandboxCleanup(chatd.data_dir());
    Ok(Setup {
        sim,
        chatd,
        client,
        _cleanup: cleanup,
    })
}

/// server-everything saved as the stdio connector `Everything` (its
/// command node, run from the npm cache) with `env`, beside a chatd of its
/// own; the answer to the save. None where the machine lacks podman or the
/// package (tests/src/needs.rs fails the test under CI).
async fn everything(env: Value) -> anyhow::Result<Option<(&'static Podman, Setup, Value)>> {
    let Some(podman) = Podman::shared() else {
        return Ok(None);
    };
    let Some(package) = npm::package(EVERYTHING) else {
        return Ok(None);
    };
    let node = podman.tools_image()?.node;
    let setup = start(podman).await?;
    let made = setup
        .client
        .post(
            "/mcp-connectors",
            json!({
                "name": "Everything",
                "transport": "stdio",
                "command": node.display().to_string(),
                "args": [package.join("dist/index.js").display().to_string(), "stdio"],
                "env": env,
            }),
        )
        .await?;
    anyhow::ensure!(made.status == 201, "{made:?}");
    Ok(Some((podman, setup, made.body)))
}

/// The server's process line in a chat's sandbox (`ps` as root inside).
fn server_line(podman: &Podman, chat: &str) -> anyhow::Result<Option<String>> {
    let listed = podman.cli(&[
        "exec",
        "-u",
        "0",
        &format!("tandem-chat-{chat}"),
        "ps",
        "-o",
        "pid,user,args",
    ])?;
    Ok(listed
        .lines()
        .find(|l| l.contains("index.js stdio") && !l.contains("ps -o"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")))
}

/// server-everything as a stdio connector: saved with a sealed environment
/// (shown as `has_env`, never its value), tested in a sandbox of the
/// test's own, then used in a chat: `echo` answers, `get-env` shows the
/// server got the variable (its value taken out of the result), the chat's
/// commands cannot read it, and a `bash` call's clean-up leaves the server
/// running (the same process answers after it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_server_runs_by_its_command_in_the_chats_sandbox() -> anyhow::Result<()> {
    let Some((podman, setup, made)) = everything(json!({"TANDEM_TEST_SECRET": SECRET})).await?
    else {
        return Ok(());
    };
    let client = &setup.client;
    assert_eq!(made["has_env"], true, "{made}");
    assert_eq!(made["transport"], "stdio");
    assert!(made.get("host").is_none(), "{made}");
    assert!(!made.to_string().contains(SECRET));
    let id = made["id"].as_str().context("id")?.to_string();

    let tested = client
        .post(&format!("/mcp-connectors/{id}/test"), json!({}))
        .await?;
    assert_eq!(tested.status, 200, "{tested:?}");
    assert_eq!(tested.body["ok"], true, "{}", tested.body);
    let names: Vec<&str> = tested.body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        names.contains(&"echo") && names.contains(&"get-env"),
        "{names:?}"
    );

    let chat = client.create_chat_in("yolo").await?;
    let results = setup
        .turn(
            &chat,
            "use the server",
            json!([
            {"tool_calls": [{"name": "echo", "arguments": {"message": "from a sandbox"}}]},
            {"tool_calls": [{"name": "get-env", "arguments": {}}]},
            {"tool_calls": [{"name": "bash", "arguments": {"command":
                "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c TANDEM_TEST_SECRET; id -u"}}]},
            {"tokens": 3},
        ]),
        )
        .await?;
    assert_eq!(results.len(), 3, "{results:?}");
    assert_eq!(results[0], "Echo: from a sandbox");
    assert!(
        results[1].contains("TANDEM_TEST_SECRET") && results[1].contains("/tmp/mcp-"),
        "the server got its environment and its own HOME: {}",
        results[1]
    );
    assert!(!results[1].contains(SECRET), "{}", results[1]);
    assert!(
        results[2].contains("0\n1000"),
        "the commands' user cannot read the server's environment: {}",
        results[2]
    );

    let line =
        server_line(podman, &chat)?.context("the server is running in the chat's sandbox")?;
    let user = line.split(' ').nth(1).unwrap_or("");
    assert!(
        !["0", "root", "1000", "sandbox"].contains(&user),
        "the server runs as a uid of its own: {line}"
    );

    // A bash call's clean-up kills the commands' user's processes only.
    let results = setup
        .turn(
            &chat,
            "again",
            json!([
            {"tool_calls": [{"name": "bash", "arguments": {"command": "sleep 30 & echo started"}}]},
            {"tool_calls": [{"name": "echo", "arguments": {"message": "still here"}}]},
            {"tokens": 3},
        ]),
        )
        .await?;
    assert_eq!(results.last().map(String::as_str), Some("Echo: still here"));
    assert_eq!(
        server_line(podman, &chat)?.as_deref(),
        Some(line.as_str()),
        "the same server process answered"
    );

    // Removing the connector ends its process.
    let gone = client
        .call(
            reqwest::Method::DELETE,
            &format!("/mcp-connectors/{id}"),
            None,
        )
        .await?;
    assert_eq!(gone.status, 204, "{gone:?}");
    tandem_tests::harness::wait_until("the server's process ended", QUICK, || async {
        server_line(podman, &chat)
            .ok()
            .flatten()
            .is_none()
            .then_some(())
    })
    .await?;

    // The log, the store, its WAL, the chat's workspace: none holds it.
    let holding = setup.chatd.files_holding(&[SECRET])?;
    assert!(holding.is_empty(), "the environment's value in {holding:?}");
    Ok(())
}

/// The server's process killed in the middle of a call of a read-only tool:
/// the session is opened again once (a new process) and the call sent
/// again, so the turn gets its answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_call_is_started_again_for_a_read_only_tool() -> anyhow::Result<()> {
    let Some((podman, setup, _)) = everything(json!({})).await? else {
        return Ok(());
    };
    let client = &setup.client;
    let chat = client.create_chat_in("yolo").await?;
    setup
        .sim
        .faults(json!([
            {"tool_calls": [{"name": "trigger-long-running-operation",
                             "arguments": {"duration": 3, "steps": 3}}]},
            {"tokens": 3},
        ]))
        .await?;
    let mut device = client.events(&chat, 0).await?;
    let run = run_id(&client.send(&chat, "take your time").await?)?;
    device
        .read_until(QUICK, |e| e.kind == "tool.started")
        .await?;
    let first = server_line(podman, &chat)?.context("the server is running")?;
    let mut words = first.split(' ');
    let (pid, uid) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    // Root in the sandbox has no capability to kill another uid's process.
    let container = format!("tandem-chat-{chat}");
    podman.cli(&["exec", "-u", uid, &container, "kill", "-9", pid])?;
    let ended = setup.wait(&chat, &run).await?;
    assert_eq!(ended["status"], "done", "{ended}");
    let results = tool_results(&client.snapshot(&chat).await?);
    assert_eq!(
        results,
        ["Long running operation completed. Duration: 3 seconds, Steps: 3."],
        "{results:?}"
    );
    let second = server_line(podman, &chat)?.context("a server is running again")?;
    assert_ne!(second, first, "a new process answered");
    Ok(())
}

/// A server made with the MCP project's Python SDK from PyPI, started by
/// Debian's python3 in the chat's sandbox: its tools answer, it runs as its
/// own uid in /tmp, the chat's workspace is closed to it, and a tool it adds
/// is offered from the next turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_sdk_server_answers_from_the_chats_sandbox() -> anyhow::Result<()> {
    let Some(podman) = Podman::shared() else {
        return Ok(());
    };
    let Some(site) = pip::site("mcp") else {
        return Ok(());
    };
    let tools = podman.tools_image()?;
    let setup = start(podman).await?;
    let client = &setup.client;
    let made = client
        .post(
            "/mcp-connectors",
            json!({
                "name": "Notes",
                "transport": "stdio",
                "command": tools.python.display().to_string(),
                "args": [pip::folder().join("notes_server.py").display().to_string()],
                "env": {"PYTHONPATH": site.display().to_string()},
            }),
        )
        .await?;
    assert_eq!(made.status, 201, "{made:?}");
    let chat = client.create_chat_in("yolo").await?;
    let results = setup
        .turn(
            &chat,
            "count them",
            json!([
            {"tool_calls": [{"name": "bash", "arguments": {"command": "printf 'one two' > notes.txt"}}]},
            {"tool_calls": [{"name": "count_words", "arguments": {"text": "one two three four"}}]},
            {"tool_calls": [{"name": "whoami", "arguments": {}}]},
            {"tokens": 3},
        ]),
        )
        .await?;
    assert_eq!(results.len(), 3, "{results:?}");
    assert_eq!(results[1], "4 words");
    let uid: u32 = results[2]
        .strip_prefix("uid ")
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .with_context(|| results[2].clone())?;
    assert!((20_000..60_000).contains(&uid), "{}", results[2]);
    assert!(results[2].contains("in /tmp"), "{}", results[2]);
    assert!(results[2].ends_with("workspace closed"), "{}", results[2]);

    // A tool the server adds (telling the client its list changed) is
    // offered from the next turn.
    let results = setup
        .turn(
            &chat,
            "learn a word",
            json!([
                {"tool_calls": [{"name": "learn", "arguments": {"word": "bonjour"}}]},
                {"tokens": 3},
            ]),
        )
        .await?;
    assert_eq!(results.last().map(String::as_str), Some("learned bonjour"));
    let results = setup
        .turn(
            &chat,
            "say it",
            json!([
                {"tool_calls": [{"name": "say_bonjour", "arguments": {}}]},
                {"tokens": 3},
            ]),
        )
        .await?;
    assert_eq!(
        results.last().map(String::as_str),
        Some("bonjour"),
        "{results:?}"
    );

    // Its prompt and resource, over the same session, as a message's context.
    let id = made.body["id"].as_str().context("id")?;
    let prompts = client
        .get(&format!("/conversations/{chat}/mcp/prompts"))
        .await?;
    assert_eq!(prompts.body["prompts"][0]["name"], "tidy", "{prompts:?}");
    let resources = client
        .get(&format!("/conversations/{chat}/mcp/resources"))
        .await?;
    assert_eq!(
        resources.body["resources"][0]["uri"], "notes://today",
        "{resources:?}"
    );
    let sent = client
        .post(
            &format!("/conversations/{chat}/messages"),
            json!({"text": "Go", "context": [
                {"connector": id, "name": "tidy", "arguments": {"style": "terse"}},
                {"connector": id, "uri": "notes://today"},
            ]}),
        )
        .await?;
    assert_eq!(sent.status, 202, "{sent:?}");
    setup.wait(&chat, &run_id(&sent.body)?).await?;
    let snapshot = client.snapshot(&chat).await?;
    let text = snapshot["messages"]
        .as_array()
        .and_then(|all| all.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["text"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(
        text.contains("Tidy these notes in a terse style."),
        "{text}"
    );
    assert!(text.contains("buy bread; call the bank"), "{text}");
    Ok(())
}

/// A command that ends at once: its test says so with the last line it
/// wrote on stderr; the chat's turn goes on with one line for the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_fails_says_why() -> anyhow::Result<()> {
    let Some(podman) = Podman::shared() else {
        return Ok(());
    };
    podman.tools_image()?;
    let setup = start(podman).await?;
    // It reads its stdin before it gives up, as a server does: an exec
    // that ends at its very start can lose its output in podman 4.3
    // ("connection reset by peer" on its attach socket).
    let tested = setup
        .save_and_test(
            json!({"name": "Broken", "transport": "stdio", "command": "/bin/sh",
            "args": ["-c", "read -r first; echo 'cannot find the notes folder' >&2; exit 3"]}),
        )
        .await?;
    assert_eq!(tested["ok"], false, "{tested}");
    assert_eq!(tested["state"], "cant_connect");
    let why = tested["reason"].as_str().unwrap_or("");
    assert!(why.contains("cannot find the notes folder"), "{why}");

    // One that ends at its very start (podman may lose what it said).
    let tested = setup
        .save_and_test(
            json!({"name": "Gone", "transport": "stdio", "command": "/bin/sh",
                              "args": ["-c", "exit 3"]}),
        )
        .await?;
    assert_eq!(tested["state"], "cant_connect", "{tested}");
    let why = tested["reason"].as_str().unwrap_or("");
    assert!(why.contains("the server ended"), "{why}");
    Ok(())
}

/// What a stdio body may say, each refusal naming its field, nothing
/// stored; an edit keeps the environment unless the command line changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_body_is_checked_and_its_environment_follows_its_command() -> anyhow::Result<()> {
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start(&sim.url(), &[]).await?;
    let client = chatd.client();
    for (body, field) in [
        (
            json!({"name": "A", "transport": "stdio", "command": "npx -y pkg"}),
            "command",
        ),
        (json!({"name": "A", "transport": "stdio"}), "command"),
        (
            json!({"name": "A", "transport": "stdio", "command": "npx", "url": "https://x.example/mcp"}),
            "url",
        ),
        (
            json!({"name": "A", "transport": "stdio", "command": "npx", "token": "t0k3n"}),
            "token",
        ),
        (
            json!({"name": "A", "transport": "stdio", "command": "npx", "env": {"HOME": "/x"}}),
            "env",
        ),
        (
            json!({"name": "A", "transport": "stdio", "command": "npx", "env": {"1BAD": "x"}}),
            "env",
        ),
        (
            json!({"name": "A", "transport": "stdio", "command": "npx", "args": vec!["a"; 65]}),
            "args",
        ),
        (
            json!({"name": "A", "url": "https://x.example/mcp", "command": "npx"}),
            "command",
        ),
    ] {
        let refused = client.post("/mcp-connectors", body.clone()).await?;
        assert_eq!(refused.status, 400, "{body}: {refused:?}");
        assert_eq!(
            refused.body["error"]["field"], field,
            "{body}: {}",
            refused.body
        );
    }
    let listed = client.get("/mcp-connectors").await?;
    assert_eq!(listed.body["connectors"], json!([]), "nothing stored");

    let made = client
        .post(
            "/mcp-connectors",
            json!({"name": "Notes", "transport": "stdio", "command": "uvx",
                   "args": ["notes-mcp"], "env": {"NOTES_KEY": SECRET}, "enabled": false}),
        )
        .await?;
    assert_eq!(made.status, 201, "{made:?}");
    assert_eq!(made.body["command"], "uvx");
    assert_eq!(made.body["args"], json!(["notes-mcp"]));
    let id = made.body["id"].as_str().context("id")?;
    let kept = client
        .call(
            reqwest::Method::PUT,
            &format!("/mcp-connectors/{id}"),
            Some(json!({"name": "My notes", "transport": "stdio", "command": "uvx", "args": ["notes-mcp"]})),
        )
        .await?;
    assert_eq!(
        kept.body["has_env"], true,
        "an edit keeps it: {}",
        kept.body
    );
    let moved = client
        .call(
            reqwest::Method::PUT,
            &format!("/mcp-connectors/{id}"),
            Some(json!({"name": "My notes", "transport": "stdio", "command": "uvx", "args": ["other-pkg"]})),
        )
        .await?;
    assert_eq!(
        moved.body["has_env"], false,
        "another package does not get it: {}",
        moved.body
    );
    Ok(())
}
