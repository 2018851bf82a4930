//! chatd's `bash` tool with the real hostexecd: a command runs on this
//! machine in the chat's workspace (the files it was given, the files the
//! file tools see) and its result says how it ended and what it saved; `host_exec`
//! decides whether it is offered and whether a card asks first ("Run this
//! command on this machine?"), a card not answered in time expires, a stop
//! kills the command, and hostexecd down is said plainly.

use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};
use tandem_tests::harness::{bash_call, tool_results, wait_until, Chatd, Client, Hostexecd, Sim};

const QUICK: Duration = Duration::from_secs(20);

pub(crate) struct Setup {
    pub(crate) sim: Sim,
    _chatd: Chatd,
    pub(crate) hostexecd: Hostexecd,
    pub(crate) client: Client,
}

/// hostexecd (as `nobody` when the tests run as root), then chatd using it
/// with `host_exec` and the extra environment; both keep the chats in the
/// same data folder, as on a box.
pub(crate) async fn start(host_exec: &str, env: &[(&str, &str)]) -> anyhow::Result<Setup> {
    start_with("", host_exec, env).await
}

async fn start_with(
    hostexec_extra: &str,
    host_exec: &str,
    env: &[(&str, &str)],
) -> anyhow::Result<Setup> {
    let hostexecd = Hostexecd::start(hostexec_extra).await?;
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let socket = hostexecd.socket.to_string_lossy().to_string();
    let chat_data = hostexecd.chat_data.to_string_lossy().to_string();
    let mut all = vec![
        ("QSE_HOSTEXEC_SOCKET", socket.as_str()),
        ("QSE_CHATS_HOST_EXEC", host_exec),
        ("QSE_CHAT_DATA", chat_data.as_str()),
    ];
    all.extend_from_slice(env);
    let chatd = Chatd::start(&sim.url(), &all).await?;
    let client = chatd.client();
    Ok(Setup {
        sim,
        _chatd: chatd,
        hostexecd,
        client,
    })
}

pub(crate) fn run_of(sent: &Value) -> anyhow::Result<String> {
    Ok(sent["run_id"].as_str().context("run id")?.to_string())
}

pub(crate) async fn finished(client: &Client, chat: &str, run: &str) -> anyhow::Result<Value> {
    client
        .wait_run(chat, run, &["done", "failed", "stopped", "paused"], QUICK)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_runs_on_this_machine_and_says_how_it_ended() -> anyhow::Result<()> {
    let _not_the_bomb = crate::hostexec::shared().await;
    let s = start("on", &[]).await?;
    let chat = s.client.create_chat_in("auto").await?;
    s.sim
        .faults(json!([
            bash_call("echo hello from $HOME; touch made.txt; env | sort"),
            bash_call("exit 3"),
            {"tokens": 2}
        ]))
        .await?;
    let mut device = s.client.events(&chat, 0).await?;
    let run = run_of(&s.client.send(&chat, "run it").await?)?;
    let record = finished(&s.client, &chat, &run).await?;
    assert_eq!(record["status"], "done", "{record}");
    let results = tool_results(&s.client.snapshot(&chat).await?);
    assert_eq!(results.len(), 2, "{results:?}");
    let first = &results[0];
    assert!(first.contains("hello from /"), "{first}");
    assert!(first.contains("[exit code 0 after"), "{first}");
    assert!(first.contains("created made.txt"), "{first}");
    // Exactly the four variables (bash adds its own few: PWD, SHLVL, _).
    for name in ["HOME=", "LANG=", "PATH=", "TZ="] {
        assert!(first.contains(name), "{name} in {first}");
    }
    assert!(!first.contains("QSE_"), "{first}");
    assert!(results[1].contains("[exit code 3 after"), "{}", results[1]);
    let events = device
        .read_until(QUICK, |e| e.kind == "run.finished")
        .await?;
    let done: Vec<&Value> = events
        .iter()
        .filter(|e| e.kind == "tool.finished")
        .map(|e| &e.data)
        .collect();
    assert_eq!(done[0]["ok"], true);
    assert_eq!(done[1]["ok"], false, "a failing command is not ok");
    // On record in hostexecd's audit.
    let (_, audit) = s
        .hostexecd
        .call("GET", &format!("/audit?chat={chat}"), None)
        .await?;
    assert_eq!(audit["audit"].as_array().map(Vec::len), Some(2), "{audit}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_shows_a_host_card_and_always_holds_for_every_chat() -> anyhow::Result<()> {
    let _not_the_bomb = crate::hostexec::shared().await;
    let s = start("ask", &[]).await?;
    // Even yolo asks for a command on this machine when host_exec is ask.
    let chat_a = s.client.create_chat_in("yolo").await?;
    s.sim
        .faults(json!([bash_call("echo once"), {"tokens": 2}]))
        .await?;
    let mut device = s.client.events(&chat_a, 0).await?;
    let run = run_of(&s.client.send(&chat_a, "go").await?)?;
    let cards = device
        .read_until(QUICK, |e| e.kind == "tool.consent")
        .await?;
    let card = cards.last().context("a card")?.data.clone();
    assert!(
        card["summary"]
            .as_str()
            .unwrap_or("")
            .starts_with("Run this command on this machine?"),
        "{card}"
    );
    assert_eq!(card["labels"]["always"], "Always on this instance");
    assert_eq!(card["labels"]["deny"], "Don't run");
    // A device that attaches now (the phone, a reloaded page) gets the same
    // buttons: "always" here holds for the whole box, not just this chat.
    let snapshot = s.client.snapshot(&chat_a).await?;
    let open = &snapshot["consents"][0];
    assert_eq!(open["card_id"], card["card_id"], "{snapshot}");
    assert_eq!(open["labels"], card["labels"], "{snapshot}");
    let answer = s
        .client
        .post(
            &format!("/conversations/{chat_a}/consent"),
            json!({"card_id": card["card_id"], "decision": "always"}),
        )
        .await?;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(finished(&s.client, &chat_a, &run).await?["status"], "done");
    assert!(tool_results(&s.client.snapshot(&chat_a).await?)[0].contains("once"));

    // "Always on this instance": another chat runs the same command unasked
    // (the same line only: `echo once; …` would ask again).
    let chat_b = s.client.create_chat_in("auto").await?;
    s.sim
        .faults(json!([bash_call("echo once"), {"tokens": 2}]))
        .await?;
    let mut device = s.client.events(&chat_b, 0).await?;
    let run = run_of(&s.client.send(&chat_b, "go").await?)?;
    let events = device
        .read_until(QUICK, |e| e.kind == "run.finished")
        .await?;
    assert!(
        events.iter().all(|e| e.kind != "tool.consent"),
        "no card the second time"
    );
    let started = events
        .iter()
        .find(|e| e.kind == "tool.started")
        .context("started")?;
    assert_eq!(started.data["approved"], "rule");
    assert_eq!(finished(&s.client, &chat_b, &run).await?["status"], "done");
    s.sim
        .faults(json!([bash_call("echo once; touch x"), {"tokens": 2}]))
        .await?;
    let run = run_of(&s.client.send(&chat_b, "more").await?)?;
    let cards = device
        .read_until(QUICK, |e| e.kind == "tool.consent")
        .await?;
    let card = cards
        .last()
        .context("a card for another command")?
        .data
        .clone();
    assert!(
        card["summary"]
            .as_str()
            .unwrap_or("")
            .ends_with("echo once; touch x"),
        "the card shows the whole command: {card}"
    );
    let denied = s
        .client
        .post(
            &format!("/conversations/{chat_b}/consent"),
            json!({"card_id": card["card_id"], "decision": "deny"}),
        )
        .await?;
    assert_eq!(denied.status, 200, "{denied:?}");
    assert_eq!(finished(&s.client, &chat_b, &run).await?["status"], "done");
    let results = tool_results(&s.client.snapshot(&chat_b).await?);
    assert!(
        results.last().is_some_and(|r| r.contains("declined")),
        "{results:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_host_card_expires_and_a_late_answer_is_410() -> anyhow::Result<()> {
    let _not_the_bomb = crate::hostexec::shared().await;
    let s = start("ask", &[("QSE_CHAT_HOST_CARD_WAIT_S", "1")]).await?;
    let chat = s.client.create_chat_in("auto").await?;
    s.sim
        .faults(json!([bash_call("touch never.txt"), {"tokens": 2}]))
        .await?;
    let mut device = s.client.events(&chat, 0).await?;
    let run = run_of(&s.client.send(&chat, "go").await?)?;
    let cards = device
        .read_until(QUICK, |e| e.kind == "tool.consent")
        .await?;
    let card_id = cards.last().context("card")?.data["card_id"].clone();
    assert_eq!(finished(&s.client, &chat, &run).await?["status"], "done");
    let results = tool_results(&s.client.snapshot(&chat).await?);
    assert!(
        results[0].contains("nobody answered the card in time"),
        "{results:?}"
    );
    let late = s
        .client
        .post(
            &format!("/conversations/{chat}/consent"),
            json!({"card_id": card_id, "decision": "once"}),
        )
        .await?;
    assert_eq!(late.status, 410, "{late:?}");
    assert_eq!(late.body["error"]["type"], "consent_expired");
    assert!(!s.hostexecd.workspace(&chat).join("never.txt").exists());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_kills_the_command_and_off_offers_no_bash() -> anyhow::Result<()> {
    let _not_the_bomb = crate::hostexec::shared().await;
    let s = start("on", &[]).await?;
    let chat = s.client.create_chat_in("auto").await?;
    let chat = chat.as_str();
    s.sim
        .faults(json!([bash_call("echo started; sleep 600"), {"tokens": 2}]))
        .await?;
    let run = run_of(&s.client.send(chat, "go").await?)?;
    // The command is running when hostexecd says so.
    wait_until("the command to run", QUICK, || async {
        let (_, health) = s.hostexecd.call("GET", "/health", None).await.ok()?;
        (health["running"].as_u64()? >= 1).then_some(())
    })
    .await?;
    s.client
        .post(&format!("/conversations/{chat}/stop"), json!({}))
        .await?;
    let record = finished(&s.client, chat, &run).await?;
    assert_eq!(record["status"], "stopped", "{record}");
    wait_until("hostexecd to end the call", QUICK, || async {
        let (_, health) = s.hostexecd.call("GET", "/health", None).await.ok()?;
        (health["running"].as_u64()? == 0).then_some(())
    })
    .await?;
    let (_, audit) = s
        .hostexecd
        .call("GET", &format!("/audit?chat={chat}"), None)
        .await?;
    assert_eq!(audit["audit"][0]["killed_by"], "stop", "{audit}");

    // host_exec = off: bash is not among the tools the engine is offered.
    let off = start("off", &[]).await?;
    let quiet = off.client.create_chat_in("auto").await?;
    let run = run_of(&off.client.send(&quiet, "hello [sim tokens=2]").await?)?;
    finished(&off.client, &quiet, &run).await?;
    let requests = off.sim.requests().await?;
    let tools = requests.last().context("a request")?["body"]["tools"].clone();
    let names: Vec<&str> = tools
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(!names.is_empty() && !names.contains(&"bash"), "{names:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostexecd_down_is_said_plainly() -> anyhow::Result<()> {
    let _not_the_bomb = crate::hostexec::shared().await;
    let mut s = start("on", &[]).await?;
    let chat = s.client.create_chat_in("auto").await?;
    // Stopped, its folder kept: chatd's data folder is in it.
    s.hostexecd.sigterm(QUICK)?;
    s.sim
        .faults(json!([bash_call("echo hi"), {"tokens": 2}]))
        .await?;
    let run = run_of(&s.client.send(&chat, "go").await?)?;
    finished(&s.client, &chat, &run).await?;
    let results = tool_results(&s.client.snapshot(&chat).await?);
    assert!(
        results[0].contains("hostexecd is not running")
            && results[0].contains("tandem hostexec start"),
        "{results:?}"
    );
    Ok(())
}

/// The chat's own files, with a message's attachment among them.
async fn send_with_notes(client: &Client, chat: &str, lines: usize) -> anyhow::Result<String> {
    let notes: String = (1..=lines).map(|i| format!("note {i}\n")).collect();
    let sent = client
        .post(
            &format!("/conversations/{chat}/messages"),
            json!({"text": "count my notes", "attachments": [{"name": "notes.md", "text": notes}]}),
        )
        .await?;
    anyhow::ensure!(sent.status == 202, "send answered {sent:?}");
    run_of(&sent.body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_bash_works_in_the_chats_own_files() -> anyhow::Result<()> {
    let _not_the_bomb = crate::hostexec::shared().await;
    let s = start("on", &[]).await?;
    let chat = s.client.create_chat_in("auto").await?;
    s.sim
        .faults(json!([
            bash_call("wc -l uploads/notes.md; echo \"made by bash\" > made.txt; echo mine > ~/private; pwd"),
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "made.txt"}}]},
            {"tokens": 2}
        ]))
        .await?;
    let run = send_with_notes(&s.client, &chat, 7).await?;
    let record = finished(&s.client, &chat, &run).await?;
    assert_eq!(record["status"], "done", "{record}");
    let results = tool_results(&s.client.snapshot(&chat).await?);
    assert_eq!(results.len(), 2, "{results:?}");
    let workspace = s.hostexecd.workspace(&chat);
    assert!(results[0].contains("7 uploads/notes.md"), "{}", results[0]);
    assert!(
        results[0].contains(&format!("{}\n", workspace.display())),
        "{}",
        results[0]
    );
    assert!(
        results[0].contains("[files in the workspace: created made.txt]"),
        "{}",
        results[0]
    );
    assert!(results[1].contains("made by bash"), "{}", results[1]);
    // HOME is the chat's own, beside the workspace, not in it.
    assert!(!workspace.join("private").exists());
    assert!(s.hostexecd.home(&chat).join("private").exists());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_chats_host_bash_works_in_the_shared_workspace() -> anyhow::Result<()> {
    let _not_the_bomb = crate::hostexec::shared().await;
    let shared = tempfile::tempdir()?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o711))?;
    let workspace = shared.path().join("workspace");
    let ws = workspace.to_string_lossy().to_string();
    let s = start_with(
        &format!("shared_workspace = \"{ws}\"\n"),
        "on",
        &[("QSE_SHARED_WORKSPACE", ws.as_str())],
    )
    .await?;
    let made = s
        .client
        .post(
            "/conversations",
            json!({"workspace": "shared", "permission_mode": "auto"}),
        )
        .await?;
    anyhow::ensure!(made.status == 201, "create answered {made:?}");
    let chat = made.body["id"].as_str().context("chat id")?.to_string();
    s.sim
        .faults(json!([bash_call("pwd; echo shared > from-bash.txt"), {"tokens": 2}]))
        .await?;
    let run = run_of(&s.client.send(&chat, "go").await?)?;
    assert_eq!(finished(&s.client, &chat, &run).await?["status"], "done");
    let results = tool_results(&s.client.snapshot(&chat).await?);
    assert!(results[0].starts_with(&format!("{ws}\n")), "{results:?}");
    assert!(results[0].contains("created from-bash.txt"), "{results:?}");
    assert_eq!(
        std::fs::read_to_string(workspace.join("from-bash.txt"))?,
        "shared\n"
    );
    Ok(())
}
