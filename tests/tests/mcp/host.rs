//! stdio connectors on a box without a container runtime: the reference
//! server from npm run through the real hostexecd (`POST /serve`), as
//! hostexecd's user (`nobody` here, never root), with its clean environment
//! and the connector's own values, in a HOME of its own that the chat's
//! commands cannot see; a `bash` call's clean-up cannot reach it; removing
//! the connector ends it and its HOME; no value is kept anywhere. Without hostexecd, or with host commands off, Test says
//! where a server would run. Every wait is on a condition with a bound.

use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};
use tandem_tests::harness::{run_id, tool_results, wait_until, Chatd, Client, Hostexecd, Sim};
use tandem_tests::mcpservers::EVERYTHING;
use tandem_tests::npm;
use tokio::io::AsyncReadExt;

const QUICK: Duration = Duration::from_secs(90);
const SECRET: &str = "host-env-secret-9d2e-never-shown";

/// The server's processes on this machine: (pid, uid, environment names).
fn servers(marker: &str) -> Vec<(u32, u32, Vec<String>)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        if !String::from_utf8_lossy(&cmdline).contains(marker) {
            continue;
        }
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let uid = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|u| u.parse().ok())
            .unwrap_or(u32::MAX);
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let mut names: Vec<String> = environ
            .split(|b| *b == 0)
            .filter_map(|v| {
                let v = String::from_utf8_lossy(v);
                v.split_once('=').map(|(k, _)| k.to_string())
            })
            .collect();
        names.sort();
        found.push((pid, uid, names));
    }
    found
}

/// `POST /serve` as chatd sends it: the body, asking for the upgrade.
async fn serve(hostexecd: &Hostexecd, body: &Value) -> anyhow::Result<reqwest::Response> {
    Ok(hostexecd
        .client()?
        .post("http://hostexecd/serve")
        .header("Connection", "Upgrade")
        .header("Upgrade", "tandem-stdio")
        .json(body)
        .send()
        .await?)
}

struct Setup {
    sim: Sim,
    chatd: Chatd,
    hostexecd: Hostexecd,
    client: Client,
}

impl Setup {
    async fn turn(&self, chat: &str, text: &str, script: Value) -> anyhow::Result<Vec<String>> {
        self.sim.faults(script).await?;
        let run = run_id(&self.client.send(chat, text).await?)?;
        let ends = ["done", "failed", "stopped", "interrupted", "paused"];
        let ended = self.client.wait_run(chat, &run, &ends, QUICK).await?;
        anyhow::ensure!(ended["status"] == "done", "{ended}");
        Ok(tool_results(&self.client.snapshot(chat).await?))
    }
}

/// hostexecd, then a chatd with no sandbox runtime using it, both on one
/// chats folder, as on a box.
async fn start(host_exec: &str) -> anyhow::Result<Setup> {
    let hostexecd = Hostexecd::start("").await?;
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let socket = hostexecd.socket.to_string_lossy().to_string();
    let chat_data = hostexecd.chat_data.to_string_lossy().to_string();
    let env = [
        ("QSE_HOSTEXEC_SOCKET", socket.as_str()),
        ("QSE_CHATS_HOST_EXEC", host_exec),
        ("QSE_CHAT_DATA", chat_data.as_str()),
    ];
    let chatd = Chatd::start(&sim.url(), &env).await?;
    let client = chatd.client();
    Ok(Setup {
        sim,
        chatd,
        hostexecd,
        client,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_server_runs_through_hostexecd_where_there_is_no_sandbox() -> anyhow::Result<()> {
    let Some(package) = npm::package(EVERYTHING) else {
        return Ok(());
    };
    let setup = start("on").await?;
    let client = &setup.client;
    let index = package.join("dist/index.js").display().to_string();
    let made = client
        .post(
            "/mcp-connectors",
            json!({
                "name": "Everything",
                "transport": "stdio",
                "command": "node",
                "args": [index, "stdio"],
                "env": {"TANDEM_TEST_SECRET": SECRET},
            }),
        )
        .await?;
    assert_eq!(made.status, 201, "{made:?}");
    let id = made.body["id"].as_str().context("id")?.to_string();

    // Test runs it through hostexecd, lists its tools and ends it.
    let tested = client
        .post(&format!("/mcp-connectors/{id}/test"), json!({}))
        .await?;
    assert_eq!(tested.status, 200, "{tested:?}");
    assert_eq!(tested.body["ok"], true, "{}", tested.body);
    let names = tested.body["tools"].to_string();
    assert!(
        names.contains("\"echo\"") && names.contains("\"get-env\""),
        "{names}"
    );
    wait_until("the test's server ended", QUICK, || async {
        servers(&index).is_empty().then_some(())
    })
    .await?;

    let chat = client.create_chat_in("yolo").await?;
    let results = setup
        .turn(
            &chat,
            "use the server",
            json!([
                {"tool_calls": [{"name": "echo", "arguments": {"message": "from this machine"}}]},
                {"tool_calls": [{"name": "get-env", "arguments": {}}]},
                {"tokens": 3},
            ]),
        )
        .await?;
    assert_eq!(results[0], "Echo: from this machine", "{results:?}");
    let homes = setup.hostexecd.chat_data.join("homes").join(&chat);
    let own_home = format!("{}/mcp-hs_", homes.display());
    assert!(
        results[1].contains("TANDEM_TEST_SECRET") && results[1].contains(&own_home),
        "the server got its environment and a HOME of its own: {}",
        results[1]
    );
    assert!(!results[1].contains(SECRET), "{}", results[1]);

    let running = servers(&index);
    assert_eq!(running.len(), 1, "one server for the chat: {running:?}");
    let (pid, uid, env) = running[0].clone();
    let nobody = nix::unistd::User::from_name("nobody")?
        .context("nobody")?
        .uid
        .as_raw();
    assert_eq!(uid, nobody, "hostexecd's user, never root");
    assert_eq!(
        env,
        ["HOME", "LANG", "PATH", "TANDEM_TEST_SECRET", "TZ"],
        "the clean four and the connector's own"
    );
    let (status, health) = setup.hostexecd.call("GET", "/health", None).await?;
    assert_eq!(
        (status, health["servers"].clone()),
        (200, json!(1)),
        "{health}"
    );

    // A command's clean-up kills its own namespace's processes only, and
    // the chat's commands are not kept waiting by its server.
    let results = setup
        .turn(
            &chat,
            "again",
            json!([
                {"tool_calls": [{"name": "bash", "arguments": {"command":
                    "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c TANDEM_TEST_SECRET; ls -a \"$HOME/..\"; kill -9 -1; echo done"}}]},
                {"tool_calls": [{"name": "echo", "arguments": {"message": "still here"}}]},
                {"tokens": 3},
            ]),
        )
        .await?;
    assert_eq!(
        results.last().map(String::as_str),
        Some("Echo: still here"),
        "{results:?}"
    );
    let seen = &results[results.len() - 2];
    assert!(
        seen.contains("0\n") && seen.contains("home") && !seen.contains("mcp-"),
        "the chat's commands see neither the server's environment nor its HOME: {seen}"
    );
    assert_eq!(
        servers(&index).first().map(|s| s.0),
        Some(pid),
        "the same server process answered"
    );

    // Removing the connector ends the server and all it started.
    let gone = client
        .call(
            reqwest::Method::DELETE,
            &format!("/mcp-connectors/{id}"),
            None,
        )
        .await?;
    assert_eq!(gone.status, 204, "{gone:?}");
    wait_until("the server ended", QUICK, || async {
        servers(&index).is_empty().then_some(())
    })
    .await?;
    wait_until("hostexecd counts no server", QUICK, || async {
        let (_, health) = setup.hostexecd.call("GET", "/health", None).await.ok()?;
        (health["servers"] == 0).then_some(())
    })
    .await?;
    let (_, audit) = setup
        .hostexecd
        .call("GET", &format!("/audit?chat={chat}"), None)
        .await?;
    let rows = audit["audit"].as_array().cloned().unwrap_or_default();
    let server = rows
        .iter()
        .find(|r| {
            r["command"]
                .as_str()
                .is_some_and(|c| c.contains("index.js stdio"))
        })
        .context("the server's audit row")?;
    assert_eq!(server["killed_by"], "stop", "{server}");
    let left: Vec<String> = std::fs::read_dir(&homes)?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("mcp-"))
        .collect();
    assert!(
        left.is_empty(),
        "the server's HOME is removed at its end: {left:?}"
    );
    let metrics = setup
        .hostexecd
        .client()?
        .get("http://hostexecd/metrics")
        .send()
        .await?
        .text()
        .await?;
    assert!(metrics.contains("tandem_hostexec_servers 0"), "{metrics}");

    // chatd's log, store and folders, hostexecd's log and audit: none
    // holds the value.
    let holding = setup.chatd.files_holding(&[SECRET])?;
    assert!(holding.is_empty(), "the environment's value in {holding:?}");
    assert!(!setup.hostexecd.log().contains(SECRET));
    // The audit's database, its WAL and anything else hostexecd keeps.
    for entry in std::fs::read_dir(setup.hostexecd.dir.path().join("data"))?.flatten() {
        let bytes = std::fs::read(entry.path()).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(SECRET),
            "{}",
            entry.path().display()
        );
    }
    Ok(())
}

/// hostexecd's `/serve` refuses a request that does not upgrade, and a bad
/// body naming its field, never repeating an environment value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostexecd_refuses_a_bad_server_naming_the_field() -> anyhow::Result<()> {
    let hostexecd = Hostexecd::start("").await?;
    let body = json!({"chat_id": "c_1", "command": "node"});
    let (status, answer) = hostexecd.call("POST", "/serve", Some(body)).await?;
    assert_eq!(
        (status, answer["error"]["field"].clone()),
        (400, json!("Upgrade")),
        "{answer}"
    );
    let value = "v".repeat(16 * 1024 + 1);
    for (body, field) in [
        (json!({"chat_id": "../c", "command": "node"}), "chat_id"),
        (json!({"chat_id": "c_1", "command": ""}), "command"),
        (
            json!({"chat_id": "c_1", "command": "node", "args": ["a", "b\u{0}"]}),
            "args[1]",
        ),
        (
            json!({"chat_id": "c_1", "command": "node", "env": {"KEY": value}}),
            "env.KEY",
        ),
        (
            json!({"chat_id": "c_1", "command": "node", "shell": true}),
            "body",
        ),
    ] {
        let response = serve(&hostexecd, &body).await?;
        assert_eq!(response.status().as_u16(), 400, "{body}");
        let answer: Value = response.json().await?;
        assert_eq!(answer["error"]["field"], field, "{answer}");
        assert!(!answer.to_string().contains("vvvv"), "{answer}");
    }
    let (_, health) = hostexecd.call("GET", "/health", None).await?;
    assert_eq!(health["servers"], 0, "nothing started: {health}");
    Ok(())
}

/// A server that fails at its start through hostexecd: its Test gives the
/// server's own last line, then hostexecd's words on how it ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_fails_at_start_says_why_in_its_own_words() -> anyhow::Result<()> {
    let setup = start("on").await?;
    let made = setup
        .client
        .post(
            "/mcp-connectors",
            json!({"name": "Notes", "transport": "stdio", "command": "node",
                "args": ["-e", "console.error('Error: NOTES_KEY is required'); process.exit(3)"]}),
        )
        .await?;
    assert_eq!(made.status, 201, "{made:?}");
    let id = made.body["id"].as_str().context("id")?;
    let tested = setup
        .client
        .post(&format!("/mcp-connectors/{id}/test"), json!({}))
        .await?;
    let said = tested.body.to_string();
    assert!(
        said.contains("Error: NOTES_KEY is required (hostexecd: the server exited with code 3)"),
        "{said}"
    );
    Ok(())
}

/// hostexecd stopping ends its servers: the stream's last frame says so,
/// nothing of the server is left, and its audit row says `shutdown`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostexecd_stopping_ends_its_servers_and_says_so() -> anyhow::Result<()> {
    let mut hostexecd = Hostexecd::start("").await?;
    let marker = format!("7300.{}", std::process::id());
    let body = json!({"chat_id": "c_stop", "command": "sh",
        "args": ["-c", "sleep \"$0\" & cat", marker]});
    let response = serve(&hostexecd, &body).await?;
    assert_eq!(response.status().as_u16(), 101);
    let mut stream = response.upgrade().await?;
    wait_until("the server's processes", QUICK, || async {
        (servers(&marker).len() == 2).then_some(())
    })
    .await?;
    let stopped = tokio::task::spawn_blocking(move || {
        let status = hostexecd.sigterm(Duration::from_secs(20));
        (hostexecd, status)
    });
    let mut wire = Vec::new();
    tokio::time::timeout(QUICK, stream.read_to_end(&mut wire)).await??;
    let frames = tandem_shared::docker::Demux::default().push(&wire);
    let last = frames.last().context("a last frame")?;
    assert_eq!(last.0, 3, "{frames:?}");
    assert_eq!(
        String::from_utf8_lossy(&last.1),
        "hostexecd: the server was ended: hostexecd is stopping"
    );
    let (mut hostexecd, status) = stopped.await?;
    assert!(status?.success());
    assert!(servers(&marker).is_empty(), "nothing of the server is left");
    hostexecd.spawn()?;
    hostexecd.wait_healthy().await?;
    let (_, audit) = hostexecd.call("GET", "/audit?chat=c_stop", None).await?;
    assert_eq!(audit["audit"][0]["killed_by"], "shutdown", "{audit}");
    Ok(())
}

/// Where a stdio server cannot run, its Test says why in words: hostexecd
/// not running, or host commands switched off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_hostexecd_or_with_host_commands_off_a_command_server_says_why(
) -> anyhow::Result<()> {
    for (host_exec, hostexecd_up, words) in [
        ("on", false, "hostexecd is not running"),
        ("off", true, "host commands are off"),
    ] {
        let mut setup = start(host_exec).await?;
        if !hostexecd_up {
            setup.hostexecd.kill9();
        }
        let made = setup
            .client
            .post(
                "/mcp-connectors",
                json!({"name": "Notes", "transport": "stdio", "command": "node", "args": ["x.js"]}),
            )
            .await?;
        assert_eq!(made.status, 201, "{made:?}");
        let id = made.body["id"].as_str().context("id")?;
        let tested = setup
            .client
            .post(&format!("/mcp-connectors/{id}/test"), json!({}))
            .await?;
        assert_eq!(tested.body["ok"], false, "{}", tested.body);
        assert!(
            tested.body.to_string().contains(words),
            "{host_exec}: {}",
            tested.body
        );
    }
    Ok(())
}
