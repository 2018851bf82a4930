//! The agent loop end to end: the real `chatd` and `engine-sim` binaries,
//! real files in a chat's workspace, scripted tool calls. Every wait is on a
//! condition with a bound.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};
use tandem_tests::harness::{run_id, tool_results, wait_until, Chatd, Client, Sim, SseEvent};

const QUICK: Duration = Duration::from_secs(20);
const LONG: Duration = Duration::from_secs(240);

async fn start(sim_args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<(Sim, Chatd, Client)> {
    let mut args = vec!["--tokens-per-second", "0"];
    args.extend_from_slice(sim_args);
    let sim = Sim::start(&args)?;
    let chatd = Chatd::start(&sim.url(), env).await?;
    let client = chatd.client();
    Ok((sim, chatd, client))
}

/// A chat in `mode`, and its workspace folder (made, empty).
async fn chat(client: &Client, chatd: &Chatd, mode: &str) -> anyhow::Result<(String, PathBuf)> {
    let made = client
        .post("/conversations", json!({"permission_mode": mode}))
        .await?;
    anyhow::ensure!(made.status == 201, "{made:?}");
    let id = made.body["id"].as_str().context("chat id")?.to_string();
    let workspace = chatd.data_dir().join("workspaces").join(&id);
    std::fs::create_dir_all(&workspace)?;
    Ok((id, workspace))
}

fn call(name: &str, arguments: Value) -> Value {
    json!({"name": name, "arguments": arguments})
}

/// One scripted model step: these tool calls.
fn step(calls: &[Value]) -> Value {
    json!({"tool_calls": calls})
}

fn messages(snapshot: &Value) -> Vec<Value> {
    snapshot["messages"].as_array().cloned().unwrap_or_default()
}

async fn finished_run(
    client: &Client,
    chat: &str,
    run: &str,
    bound: Duration,
) -> anyhow::Result<Value> {
    client
        .wait_run(
            chat,
            run,
            &["done", "failed", "interrupted", "stopped", "paused"],
            bound,
        )
        .await
}

fn events_of<'a>(events: &'a [SseEvent], kind: &str) -> Vec<&'a SseEvent> {
    events.iter().filter(|e| e.kind == kind).collect()
}

// 1 ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_step_run_reads_edits_and_greps_real_files() -> anyhow::Result<()> {
    let (sim, chatd, client) = start(&[], &[]).await?;
    let (chat, workspace) = chat(&client, &chatd, "auto").await?;
    std::fs::create_dir_all(workspace.join("notes"))?;
    std::fs::write(
        workspace.join("notes/plan.md"),
        "# Plan\nbuy milk\ncall Ada\n",
    )?;
    std::fs::write(workspace.join("notes/other.md"), "nothing here\n")?;
    sim.faults(json!([
        step(&[call("read_file", json!({"path": "notes/plan.md"}))]),
        step(&[call(
            "edit_file",
            json!({"path": "notes/plan.md", "old_string": "buy milk", "new_string": "buy oat milk"}),
        )]),
        step(&[
            call("grep", json!({"pattern": "oat", "path": "notes"})),
            call("list_files", json!({"pattern": "**/*.md"})),
        ]),
        {"tokens": 5},
    ]))
    .await?;
    let mut device = client.events(&chat, 0).await?;
    let sent = client.send(&chat, "tidy my plan").await?;
    let run = run_id(&sent)?;
    let events = device
        .read_until(QUICK, |e| {
            e.kind == "run.finished" && e.data["run_id"] == run
        })
        .await?;
    assert_eq!(
        events.last().context("end")?.data["status"],
        "done",
        "{events:?}"
    );

    // The file really changed.
    assert_eq!(
        std::fs::read_to_string(workspace.join("notes/plan.md"))?,
        "# Plan\nbuy oat milk\ncall Ada\n"
    );
    // Every call shows as it runs, approved automatically in auto mode.
    let started = events_of(&events, "tool.started");
    let names: Vec<&str> = started
        .iter()
        .map(|e| e.data["name"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(names, ["read_file", "edit_file", "grep", "list_files"]);
    assert!(started.iter().all(|e| e.data["approved"] == "auto"));
    assert_eq!(events_of(&events, "tool.auto_approved").len(), 4);
    let finished = events_of(&events, "tool.finished");
    assert_eq!(finished.len(), 4);
    assert!(
        finished.iter().all(|e| e.data["ok"] == true),
        "{finished:?}"
    );
    assert!(started[0].data["summary"]
        .as_str()
        .is_some_and(|s| s.contains("notes/plan.md")));

    // The transcript shows every call and its result, in order.
    let snapshot = client.snapshot(&chat).await?;
    let roles: Vec<String> = messages(&snapshot)
        .iter()
        .map(|m| m["role"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "tool",
            "assistant"
        ]
    );
    let results = tool_results(&snapshot);
    assert!(results[0].contains("buy milk"), "{}", results[0]);
    assert!(results[2].contains("notes/plan.md:2"), "{}", results[2]);
    assert!(results[3].contains("notes/other.md"), "{}", results[3]);

    // The model got the results back, each answering its call.
    let requests = sim.requests().await?;
    let last = &requests.last().context("requests")?["body"];
    let sent_roles: Vec<&str> = last["messages"]
        .as_array()
        .context("messages")?
        .iter()
        .map(|m| m["role"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(sent_roles.first(), Some(&"system"));
    assert_eq!(sent_roles.iter().filter(|r| **r == "tool").count(), 4);
    assert!(last["tools"].as_array().is_some_and(|t| t.len() >= 6));

    // Exported and imported again, the calls and their results come along.
    let exported = client
        .get(&format!("/conversations/{chat}/export?format=json"))
        .await?;
    let imported = client
        .post("/conversations/import", exported.body.clone())
        .await?;
    assert_eq!(imported.status, 201, "{imported:?}");
    let copy = imported.body["id"].as_str().context("import id")?;
    let again = client.snapshot(copy).await?;
    let shape = |s: &Value| -> Vec<(String, bool, bool)> {
        messages(s)
            .iter()
            .map(|m| {
                (
                    m["role"].as_str().unwrap_or("").to_string(),
                    m.get("tool_calls").is_some(),
                    m.get("tool_call_id").is_some(),
                )
            })
            .collect()
    };
    assert_eq!(shape(&again), shape(&snapshot));
    Ok(())
}

// 2 ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folder_swapped_for_a_symlink_never_lets_a_call_out() -> anyhow::Result<()> {
    let (_sim, chatd, client) = start(&[], &[("QSE_CHAT_MAX_STEPS", "150")]).await?;
    let (chat, workspace) = chat(&client, &chatd, "auto").await?;
    let outside = tempfile::tempdir()?;
    std::fs::write(outside.path().join("canary.txt"), "CANARY-SECRET\n")?;
    let real = workspace.join("box");
    std::fs::create_dir_all(&real)?;
    std::fs::write(real.join("canary.txt"), "inside\n")?;

    // A racer swaps box/ for a symlink to the outside folder and back.
    let stop = Arc::new(AtomicBool::new(false));
    let racer = {
        let stop = stop.clone();
        let workspace = workspace.clone();
        let target = outside.path().to_path_buf();
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            let parked = workspace.join("box.real");
            while !stop.load(Ordering::Relaxed) {
                let link = workspace.join("box");
                if std::fs::rename(&link, &parked).is_ok() {
                    let _ = std::os::unix::fs::symlink(&target, &link);
                    std::thread::yield_now();
                    let _ = std::fs::remove_file(&link);
                    // A write meanwhile may have made a new box/: drop it.
                    if std::fs::rename(&parked, &link).is_err() {
                        let _ = std::fs::remove_dir_all(&link);
                        let _ = std::fs::rename(&parked, &link);
                    }
                }
                swaps += 1;
            }
            swaps
        })
    };
    // The model reads and writes through box/ at every step but the last.
    let cue = r#"[sim tool_calls=[{"name":"read_file","arguments":{"path":"box/canary.txt"}},{"name":"write_file","arguments":{"path":"box/out.txt","content":"written"}}]]"#;
    let run = run_id(&client.send(&chat, &format!("loop {cue}")).await?)?;
    let record = finished_run(&client, &chat, &run, LONG).await?;
    stop.store(true, Ordering::Relaxed);
    let swaps = racer
        .join()
        .map_err(|_| anyhow::anyhow!("racer panicked"))?;
    assert_eq!(record["status"], "paused", "{record}");

    let snapshot = client.snapshot(&chat).await?;
    let results = tool_results(&snapshot);
    assert_eq!(
        results.len(),
        298,
        "two calls a step for 149 steps (the 150th, the last, offers no tools)"
    );
    for text in &results {
        assert!(
            !text.contains("CANARY-SECRET"),
            "a read went outside: {text}"
        );
    }
    let refused = results.iter().filter(|t| t.contains("symlink")).count();
    // The file, a write, or a one-line refusal naming the path.
    let clean = results.iter().all(|t| {
        t == "inside\n"
            || t.starts_with("wrote box/out.txt")
            || (!t.contains('\n') && t.contains("`box"))
    });
    assert!(
        clean,
        "every result is the file or a clean refusal: {results:?}"
    );
    // Nothing was written outside, and the canary is untouched.
    assert!(!outside.path().join("out.txt").exists());
    assert_eq!(
        std::fs::read_to_string(outside.path().join("canary.txt"))?,
        "CANARY-SECRET\n"
    );
    let names: Vec<String> = std::fs::read_dir(outside.path())?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()?;
    assert_eq!(names, ["canary.txt"], "no temp file left outside either");
    eprintln!("{swaps} swaps, {refused} refusals of 298 calls");
    Ok(())
}

// 3 ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_is_refused_at_once_and_chatd_never_blocks() -> anyhow::Result<()> {
    let (sim, chatd, client) = start(&[], &[]).await?;
    let (chat, workspace) = chat(&client, &chatd, "auto").await?;
    nix::unistd::mkfifo(&workspace.join("pipe"), nix::sys::stat::Mode::S_IRWXU)?;
    sim.faults(json!([
        step(&[call("read_file", json!({"path": "pipe"}))]),
        step(&[call("grep", json!({"pattern": "x", "path": "pipe"}))]),
        {"tokens": 3},
    ]))
    .await?;
    let run = run_id(&client.send(&chat, "read the pipe").await?)?;
    let record = finished_run(&client, &chat, &run, QUICK).await?;
    assert_eq!(record["status"], "done", "{record}");
    let results = tool_results(&client.snapshot(&chat).await?);
    assert!(results[0].contains("FIFO"), "{}", results[0]);
    assert!(results[1].contains("FIFO"), "{}", results[1]);
    let health = reqwest::get(format!("{}/health", chatd.url())).await?;
    assert_eq!(health.status(), 200);
    Ok(())
}

// 4 ---------------------------------------------------------------------------

/// 317 lines: lines 1-30 fit in 64,000 characters, line 31 does not, and
/// 639,237 bytes follow them.
fn file_of_317_lines(path: &Path) -> anyhow::Result<()> {
    let mut text = String::new();
    for _ in 0..30 {
        text.push_str(&"a".repeat(2_099));
        text.push('\n');
    }
    for _ in 0..286 {
        text.push_str(&"b".repeat(2_226));
        text.push('\n');
    }
    text.push_str(&"c".repeat(2_314));
    text.push('\n');
    anyhow::ensure!(text.len() == 63_000 + 639_237);
    std::fs::write(path, text)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_file_cuts_at_whole_lines_with_the_exact_marker() -> anyhow::Result<()> {
    let (sim, chatd, client) = start(&["--context-window", "131072"], &[]).await?;
    let (chat, workspace) = chat(&client, &chatd, "auto").await?;
    file_of_317_lines(&workspace.join("big.txt"))?;
    sim.faults(json!([
        step(&[call("read_file", json!({"path": "big.txt"}))]),
        step(&[call("read_file", json!({"path": "big.txt", "offset": 31, "limit": 2}))]),
        {"tokens": 3},
    ]))
    .await?;
    let run = run_id(&client.send(&chat, "read it").await?)?;
    let record = finished_run(&client, &chat, &run, QUICK).await?;
    assert_eq!(record["status"], "done", "{record}");
    let results = tool_results(&client.snapshot(&chat).await?);
    assert!(
        results[0].ends_with("[truncated at 64,000 characters: lines 1-30 of 317 shown, 639,237 more bytes; read on with offset=31]"),
        "{}",
        &results[0][results[0].len().saturating_sub(200)..]
    );
    assert_eq!(results[0].matches('\n').count(), 30);
    assert!(
        results[1].starts_with(&"b".repeat(2_226)),
        "read on at line 31"
    );
    Ok(())
}

// 5 ---------------------------------------------------------------------------

/// Sends `n` questions one after another, each answered, to fill a chat.
async fn fill(client: &Client, chat: &str, n: usize, words: usize) -> anyhow::Result<()> {
    for i in 0..n {
        let text = format!(
            "question {i}: {} [sim tokens=40]",
            "lorem ipsum ".repeat(words)
        );
        let run = run_id(&client.send(chat, &text).await?)?;
        let record = finished_run(client, chat, &run, QUICK).await?;
        anyhow::ensure!(record["status"] == "done", "filling: {record}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_refusal_retries_then_compacts_and_goes_on() -> anyhow::Result<()> {
    // The engine's memory holds 6,400 tokens, its window 16,384.
    let (sim, chatd, client) = start(
        &["--context-window", "16384", "--memory-limit-tokens", "6400"],
        &[],
    )
    .await?;
    let (chat, _) = chat(&client, &chatd, "auto").await?;
    // Three questions fit in the engine's memory...
    fill(&client, &chat, 3, 300).await?;
    let mut device = client
        .events(
            &chat,
            client.snapshot(&chat).await?["seq"].as_i64().unwrap_or(0),
        )
        .await?;
    // ...a long fourth does not.
    let text = format!("one more {} [sim tokens=5]", "lorem ipsum ".repeat(900));
    let run = run_id(&client.send(&chat, &text).await?)?;
    let events = device
        .read_until(QUICK, |e| {
            e.kind == "run.finished" && e.data["run_id"] == run
        })
        .await?;
    assert_eq!(
        events.last().context("end")?.data["status"],
        "done",
        "{events:?}"
    );
    let retried = events_of(&events, "run.retrying");
    assert_eq!(retried.len(), 1, "one wait-and-retry first: {retried:?}");
    let compacted = events_of(&events, "compacted");
    assert_eq!(compacted.len(), 1, "then one compaction");
    let before = compacted[0].data["before"].as_u64().context("before")?;
    let after = compacted[0].data["after"].as_u64().context("after")?;
    assert!(before > 6_400 && after < 6_400, "{before} -> {after}");
    assert!(chatd.log().contains("[compact]"), "a [compact] log line");

    // From now on the chat compacts at 80 % of the refused size, before sending.
    sim.faults(json!([])).await?;
    fill(&client, &chat, 4, 300).await?;
    let requests = sim.requests().await?;
    let refused_after: Vec<u64> = requests
        .iter()
        .rev()
        .take(6)
        .filter_map(|r| r["prompt_tokens"].as_u64())
        .filter(|t| *t > 6_000)
        .collect();
    assert!(
        refused_after.is_empty(),
        "no request over the memory again: {refused_after:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_400_over_the_window_compacts_and_resends_once() -> anyhow::Result<()> {
    let (sim, chatd, client) = start(&["--context-window", "16384"], &[]).await?;
    let (chat, _) = chat(&client, &chatd, "auto").await?;
    fill(&client, &chat, 6, 300).await?;
    sim.faults(json!([
        {"status": 400, "message": "the request exceeds the available context size, try increasing it"},
        {"tokens": 4},
    ]))
    .await?;
    let run = run_id(&client.send(&chat, "and now?").await?)?;
    let record = finished_run(&client, &chat, &run, QUICK).await?;
    assert_eq!(record["status"], "done", "{record}");
    let snapshot = client.snapshot(&chat).await?;
    assert!(
        messages(&snapshot).iter().any(|m| m["role"] == "compacted"),
        "a compacted marker in the transcript"
    );
    Ok(())
}

/// A long first message (a pasted document) past the compaction line whose
/// request still fits the window less the answer's room reaches the model
/// word for word: no summary of the question in its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_first_message_past_the_line_goes_as_it_is() -> anyhow::Result<()> {
    // A 32,768-token window and 1,024 for the answer: the line is at
    // 26,214 (80 %), the largest request 31,744.
    let (sim, chatd, client) = start(
        &["--context-window", "32768"],
        &[("QSE_CHAT_ANSWER_TOKENS", "1024")],
    )
    .await?;
    let (probe, _) = chat(&client, &chatd, "auto").await?;
    let run = run_id(&client.send(&probe, "hi [sim tokens=2]").await?)?;
    assert_eq!(
        finished_run(&client, &probe, &run, QUICK).await?["status"],
        "done"
    );
    let base = sim.requests().await?.last().context("a request")?["prompt_tokens"]
        .as_u64()
        .context("counted")?;
    // The engine counts a message's characters / 4: a request near 29,000.
    let words = 29_000u64.saturating_sub(base) * 4 / 12;
    let text = format!("{}[sim tokens=3]", "lorem ipsum ".repeat(words as usize));

    let (chat, _) = chat(&client, &chatd, "auto").await?;
    let run = run_id(&client.send(&chat, &text).await?)?;
    let record = finished_run(&client, &chat, &run, QUICK).await?;
    assert_eq!(record["status"], "done", "{record}");
    let snapshot = client.snapshot(&chat).await?;
    assert!(
        !messages(&snapshot).iter().any(|m| m["role"] == "compacted"),
        "nothing compacted"
    );
    let requests = sim.requests().await?;
    let sent = requests.last().context("the run's request")?;
    let tokens = sent["prompt_tokens"].as_u64().context("counted")?;
    assert!(
        (26_214..=31_744).contains(&tokens),
        "the request ({tokens} tokens) is between the line and the largest request"
    );
    let question = sent["body"]["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .context("a user message in the request")?;
    assert_eq!(
        question, text,
        "the question reached the model word for word"
    );
    Ok(())
}

// 6 ---------------------------------------------------------------------------

/// A model that reads a 9 KB file at every step, 100 steps, in a
/// 12,288-token window (the system block and the tools take about 3,400 of
/// it): the chat compacts as it goes and never sends a request over it.
async fn hundred_steps(tokenize: bool) -> anyhow::Result<()> {
    let mut args = vec!["--context-window", "12288"];
    if !tokenize {
        args.push("--no-tokenize");
    }
    let (sim, chatd, client) = start(&args, &[("QSE_CHAT_MAX_STEPS", "100")]).await?;
    let (chat, workspace) = chat(&client, &chatd, "auto").await?;
    let text: String = (0..150)
        .map(|i| format!("line {i:03} {}\n", "x".repeat(50)))
        .collect();
    std::fs::write(workspace.join("log.txt"), text)?;
    let cue = r#"[sim tool_call=read_file args={"path":"log.txt"}]"#;
    let run = run_id(&client.send(&chat, &format!("keep reading {cue}")).await?)?;
    let record = finished_run(&client, &chat, &run, LONG).await?;
    assert_eq!(record["status"], "paused", "{record}");
    assert_eq!(record["steps"], 100, "{record}");

    let requests = sim.requests().await?;
    let sizes: Vec<u64> = requests
        .iter()
        .filter_map(|r| r["prompt_tokens"].as_u64())
        .collect();
    // Never over the window, nor into the answer's room (a quarter of it here).
    let over: Vec<&u64> = sizes.iter().filter(|t| **t > 12_288 - 2_048).collect();
    assert!(
        over.is_empty(),
        "requests over the window less the answer: {over:?}"
    );
    let stats: Value = reqwest::get(format!("{}/sim/stats", sim.url()))
        .await?
        .json()
        .await?;
    assert!(
        stats["statuses"].get("400").is_none(),
        "the engine never refused: {stats}"
    );
    let snapshot = client.snapshot(&chat).await?;
    let compactions = messages(&snapshot)
        .iter()
        .filter(|m| m["role"] == "compacted")
        .count();
    assert!(compactions >= 2, "it compacted as it went: {compactions}");
    // Each compaction landed under half the line (here 80 % of the window,
    // 9,830 tokens).
    let mut device = client.events(&chat, 0).await?;
    let events = device
        .read_until(QUICK, |e| {
            e.kind == "run.finished" && e.data["run_id"] == run
        })
        .await?;
    for c in events_of(&events, "compacted") {
        let after = c.data["after"].as_u64().context("after")?;
        assert!(after < 9_830 / 2, "landed at {after}: {}", c.data);
    }
    eprintln!(
        "tokenize={tokenize}: {} requests, largest {:?}, {compactions} compactions",
        sizes.len(),
        sizes.iter().max()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_step_run_never_sends_over_the_window_counted() -> anyhow::Result<()> {
    hundred_steps(true).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_step_run_never_sends_over_the_window_estimated() -> anyhow::Result<()> {
    hundred_steps(false).await
}

// 7 ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consent_card_survives_a_restart_and_is_answered_once() -> anyhow::Result<()> {
    let (sim, mut chatd, client) = start(&[], &[("QSE_CHAT_MAX_RUNS", "1")]).await?;
    let (chat, workspace) = chat(&client, &chatd, "ask").await?;
    sim.faults(json!([step(&[call(
        "write_file",
        json!({"path": "hello.txt", "content": "hi\n"})
    )]),]))
        .await?;
    let mut device = client.events(&chat, 0).await?;
    let run = run_id(&client.send(&chat, "write hello [sim tokens=3]").await?)?;
    let events = device
        .read_until(QUICK, |e| e.kind == "tool.consent")
        .await?;
    let card = events.last().context("card")?.data.clone();
    assert_eq!(card["name"], "write_file");
    assert_eq!(card["choices"], json!(["once", "always", "deny"]));
    let card_id = card["card_id"].as_str().context("card id")?.to_string();
    assert!(
        !workspace.join("hello.txt").exists(),
        "nothing written before the answer"
    );
    let waiting = client.run(&chat, &run).await?;
    assert_eq!(waiting["status"], "waiting");

    // The waiting run gave its engine slot back: another chat runs meanwhile.
    let (other, _) = chat_in(&client, &chatd).await?;
    let other_run = run_id(&client.send(&other, "meanwhile [sim tokens=3]").await?)?;
    let record = finished_run(&client, &other, &other_run, QUICK).await?;
    assert_eq!(record["status"], "done", "{record}");

    // chatd restarts: the card is still there, on every device.
    chatd.restart().await?;
    let snapshot = client.snapshot(&chat).await?;
    let cards = snapshot["consents"].as_array().context("consents")?;
    assert_eq!(cards.len(), 1, "{snapshot}");
    assert_eq!(cards[0]["card_id"], card_id.as_str());
    assert_eq!(snapshot["conversation"]["state"], "waiting");

    // A phone answers; the run goes on and writes the file.
    let answer = client
        .post(
            &format!("/conversations/{chat}/consent"),
            json!({"card_id": card_id, "decision": "once"}),
        )
        .await?;
    assert_eq!(answer.status, 200, "{answer:?}");
    let record = finished_run(&client, &chat, &run, QUICK).await?;
    assert_eq!(record["status"], "done", "{record}");
    assert_eq!(
        std::fs::read_to_string(workspace.join("hello.txt"))?,
        "hi\n"
    );

    // The laptop answers the same again: 204; something else: 409.
    let same = client
        .post(
            &format!("/conversations/{chat}/consent"),
            json!({"card_id": card_id, "decision": "once"}),
        )
        .await?;
    assert_eq!(same.status, 204, "{same:?}");
    let other_answer = client
        .post(
            &format!("/conversations/{chat}/consent"),
            json!({"card_id": card_id, "decision": "deny"}),
        )
        .await?;
    assert_eq!(other_answer.status, 409, "{other_answer:?}");
    assert_eq!(other_answer.body["error"]["type"], "already_answered");

    // The started event says a person approved it.
    let mut device = client.events(&chat, 0).await?;
    let events = device
        .read_until(QUICK, |e| {
            e.kind == "run.finished" && e.data["run_id"] == run
        })
        .await?;
    let started = events_of(&events, "tool.started");
    assert_eq!(started.last().context("started")?.data["approved"], "user");
    Ok(())
}

async fn chat_in(client: &Client, chatd: &Chatd) -> anyhow::Result<(String, PathBuf)> {
    chat(client, chatd, "auto").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_always_and_bad_answers_do_what_they_say() -> anyhow::Result<()> {
    let (sim, chatd, client) = start(&[], &[]).await?;
    let (chat, workspace) = chat(&client, &chatd, "ask").await?;
    let write = |name: &str| step(&[call("write_file", json!({"path": name, "content": "x"}))]);
    sim.faults(
        json!([write("a.txt"), write("b.txt"), {"tokens": 2}, write("c.txt"), {"tokens": 2}]),
    )
    .await?;
    let mut device = client.events(&chat, 0).await?;
    let run = run_id(&client.send(&chat, "write").await?)?;
    let card = device
        .read_until(QUICK, |e| e.kind == "tool.consent")
        .await?;
    let card_id = card.last().context("card")?.data["card_id"].clone();

    // Bad answers change nothing.
    let bad = client
        .post(
            &format!("/conversations/{chat}/consent"),
            json!({"card_id": card_id, "decision": "maybe"}),
        )
        .await?;
    assert_eq!(bad.status, 400, "{bad:?}");
    assert!(bad.body["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("decision")));
    let unknown = client
        .post(
            &format!("/conversations/{chat}/consent"),
            json!({"card_id": "card_nope", "decision": "once"}),
        )
        .await?;
    assert_eq!(unknown.status, 404, "{unknown:?}");

    // Deny: the call does not run and the model is told.
    client
        .post(
            &format!("/conversations/{chat}/consent"),
            json!({"card_id": card_id, "decision": "deny"}),
        )
        .await?;
    // Always: runs, and the next write runs without a card (a rule).
    let card = device
        .read_until(QUICK, |e| e.kind == "tool.consent")
        .await?;
    let card_id = card.last().context("second card")?.data["card_id"].clone();
    client
        .post(
            &format!("/conversations/{chat}/consent"),
            json!({"card_id": card_id, "decision": "always"}),
        )
        .await?;
    let record = finished_run(&client, &chat, &run, QUICK).await?;
    assert_eq!(record["status"], "done", "{record}");
    assert!(!workspace.join("a.txt").exists(), "denied");
    assert!(workspace.join("b.txt").exists(), "allowed");
    let rules = client.get(&format!("/conversations/{chat}/rules")).await?;
    assert_eq!(
        rules.body["rules"][0]["tool"], "write_file",
        "{:?}",
        rules.body
    );
    assert_eq!(rules.body["rules"][0]["verdict"], "allow");
    let results = tool_results(&client.snapshot(&chat).await?);
    assert!(results[0].contains("declined"), "{}", results[0]);

    let run = run_id(&client.send(&chat, "again").await?)?;
    let events = device
        .read_until(QUICK, |e| {
            e.kind == "run.finished" && e.data["run_id"] == run
        })
        .await?;
    assert!(
        events_of(&events, "tool.consent").is_empty(),
        "the rule answered"
    );
    let started = events_of(&events, "tool.started");
    assert_eq!(started.last().context("started")?.data["approved"], "rule");
    assert!(workspace.join("c.txt").exists());

    // A card whose run was stopped: 410, and nothing is edited.
    sim.faults(json!([step(&[call(
        "edit_file",
        json!({"path": "c.txt", "old_string": "x", "new_string": "y"}),
    )])]))
    .await?;
    let run = run_id(&client.send(&chat, "edit").await?)?;
    let card = device
        .read_until(QUICK, |e| e.kind == "tool.consent")
        .await?;
    let card_id = card.last().context("edit card")?.data["card_id"].clone();
    let stopped = client
        .post(&format!("/conversations/{chat}/stop"), json!({}))
        .await?;
    assert_eq!(stopped.status, 200, "{stopped:?}");
    let record = finished_run(&client, &chat, &run, QUICK).await?;
    assert_eq!(record["status"], "stopped", "{record}");
    let late = client
        .post(
            &format!("/conversations/{chat}/consent"),
            json!({"card_id": card_id, "decision": "once"}),
        )
        .await?;
    assert_eq!(late.status, 410, "{late:?}");
    assert_eq!(late.body["error"]["type"], "consent_expired");
    assert_eq!(std::fs::read_to_string(workspace.join("c.txt"))?, "x");
    Ok(())
}

// 8 ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_step_limit_pauses_with_words_and_continue_goes_on() -> anyhow::Result<()> {
    let (sim, chatd, client) = start(&[], &[("QSE_CHAT_MAX_STEPS", "3")]).await?;
    let (chat, workspace) = chat(&client, &chatd, "auto").await?;
    std::fs::write(workspace.join("a.txt"), "alpha\n")?;
    let cue = r#"[sim tool_call=read_file args={"path":"a.txt"} tool_steps=5 tokens=4]"#;
    let mut device = client.events(&chat, 0).await?;
    let run = run_id(&client.send(&chat, &format!("read {cue}")).await?)?;
    let record = finished_run(&client, &chat, &run, QUICK).await?;
    assert_eq!(record["status"], "paused", "{record}");
    assert_eq!(record["steps"], 3);
    assert!(record["error"]
        .as_str()
        .is_some_and(|e| e.contains("Continue")));
    let events = device
        .read_until(QUICK, |e| e.kind == "run.finished")
        .await?;
    let paused = events_of(&events, "paused");
    assert_eq!(paused.len(), 1, "one paused event");
    assert_eq!(paused[0].data["steps"], 3);
    // The third call was offered no tools and told why: the run ends with
    // the model's words, not in the middle of a step.
    let requests = sim.requests().await?;
    let last_request = &requests.last().context("a request")?["body"];
    assert!(last_request.get("tools").is_none(), "{last_request}");
    let system = last_request["messages"][0]["content"]
        .as_str()
        .unwrap_or("");
    assert!(
        system.contains("This is the last model call of this run"),
        "{system}"
    );
    let snapshot = client.snapshot(&chat).await?;
    assert_eq!(tool_results(&snapshot).len(), 2);
    let words = messages(&snapshot).last().cloned().context("last")?;
    assert_eq!(words["role"], "assistant");
    assert_eq!(words["text"], "w0 w1 w2 w3 ");
    assert!(words.get("tool_calls").is_none(), "{words}");

    // Continue goes on with tools again (a new step, not more of the same
    // words): two more calls, the last words again; then the fifth call and
    // the answer.
    for expect in ["paused", "done"] {
        let resumed = client
            .post(&format!("/conversations/{chat}/continue"), json!({}))
            .await?;
        assert_eq!(resumed.status, 202, "{resumed:?}");
        let next = run_id(&resumed.body)?;
        let record = finished_run(&client, &chat, &next, QUICK).await?;
        assert_eq!(record["status"], expect, "{record}");
    }
    let snapshot = client.snapshot(&chat).await?;
    assert_eq!(tool_results(&snapshot).len(), 5);
    let last = messages(&snapshot).last().cloned().context("last")?;
    assert_eq!(last["role"], "assistant");
    assert_eq!(last["text"], "w0 w1 w2 w3 ");

    // Compact and clear by hand.
    let compacted = client
        .post(&format!("/conversations/{chat}/compact"), json!({}))
        .await?;
    assert_eq!(compacted.status, 200, "{compacted:?}");
    assert!(compacted.body["before"].as_u64().is_some());
    let cleared = client
        .post(&format!("/conversations/{chat}/clear"), json!({}))
        .await?;
    assert_eq!(cleared.body, json!({"cleared": true}));
    Ok(())
}

/// Waits until the chat has no run.
async fn settled(client: &Client, chat: &str) -> anyhow::Result<Value> {
    wait_until("the chat to settle", QUICK, || async {
        let s = client.snapshot(chat).await.ok()?;
        (s["conversation"]["state"] == "idle").then_some(s)
    })
    .await
}

// 9 ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attachments_are_saved_inlined_when_they_fit_and_named_when_not() -> anyhow::Result<()> {
    let (sim, chatd, client) = start(&[], &[]).await?;
    let (chat, workspace) = chat(&client, &chatd, "auto").await?;
    let big = "y".repeat(200_000);
    let sent = client
        .post(
            &format!("/conversations/{chat}/messages"),
            json!({
                "text": "look at these [sim tokens=3]",
                "attachments": [
                    {"name": "notes.txt", "text": "first line\nsecond line\n"},
                    {"name": "../../escape/big.log", "text": big},
                    {"name": "shot.png", "data_base64": "iVBORw0KGgo="},
                ],
            }),
        )
        .await?;
    assert_eq!(sent.status, 202, "{sent:?}");
    let run = run_id(&sent.body)?;
    let record = finished_run(&client, &chat, &run, QUICK).await?;
    assert_eq!(record["status"], "done", "{record}");

    // Each file is in the workspace's uploads/, the escaping name cut to its base.
    assert_eq!(
        std::fs::read_to_string(workspace.join("uploads/notes.txt"))?,
        "first line\nsecond line\n"
    );
    assert_eq!(
        std::fs::read(workspace.join("uploads/big.log"))?.len(),
        200_000
    );
    assert!(workspace.join("uploads/shot.png").exists());
    assert!(!chatd.data_dir().join("escape").exists());

    // The small text went to the model; the big one and the image are named.
    let requests = sim.requests().await?;
    let body = requests.last().context("a request")?["body"].to_string();
    assert!(body.contains("first line\\nsecond line"), "inline text");
    assert!(
        body.contains("uploads/big.log: 200,000 bytes"),
        "big file named"
    );
    assert!(!body.contains(&"y".repeat(1_000)), "big file not inlined");
    assert!(body.contains("this model does not read images"));
    let snapshot = client.snapshot(&chat).await?;
    let user = messages(&snapshot)
        .into_iter()
        .find(|m| m["role"] == "user")
        .context("user message")?;
    assert_eq!(user["attachments"].as_array().map(Vec::len), Some(3));

    // Bad uploads are refused whole and store nothing.
    let bad = client
        .post(
            &format!("/conversations/{chat}/messages"),
            json!({"text": "x", "attachments": [{"name": "a.txt", "text": "a"}, {"name": "b", "data_base64": "%%"}]}),
        )
        .await?;
    assert_eq!(bad.status, 400, "{bad:?}");
    assert!(bad.body["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("attachments[1].data_base64")));
    assert!(!workspace.join("uploads/a.txt").exists());
    Ok(())
}

// 10 --------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deny_rule_refuses_even_in_yolo_until_it_is_removed() -> anyhow::Result<()> {
    let (sim, chatd, client) = start(&[], &[]).await?;
    let (chat, workspace) = chat(&client, &chatd, "yolo").await?;
    let added = client
        .post(
            "/permissions/rules",
            json!({"tool": "write_file", "verdict": "deny"}),
        )
        .await?;
    assert_eq!(added.status, 201, "{added:?}");
    let rule = added.body["id"].as_str().context("rule id")?.to_string();
    let bad = client
        .post(
            &format!("/conversations/{chat}/rules"),
            json!({"tool": "Write File", "verdict": "deny"}),
        )
        .await?;
    assert_eq!(bad.status, 400, "{bad:?}");

    let write = step(&[call("write_file", json!({"path": "x.txt", "content": "x"}))]);
    sim.faults(json!([write.clone(), {"tokens": 2}])).await?;
    let run = run_id(&client.send(&chat, "write").await?)?;
    finished_run(&client, &chat, &run, QUICK).await?;
    let results = tool_results(&client.snapshot(&chat).await?);
    assert!(
        results[0].contains("refused") && results[0].contains("write_file"),
        "{}",
        results[0]
    );
    assert!(!workspace.join("x.txt").exists());

    let removed = client
        .call(
            reqwest::Method::DELETE,
            &format!("/permissions/rules/{rule}"),
            None,
        )
        .await?;
    assert_eq!(removed.status, 204, "{removed:?}");
    let listed = client.get("/permissions/rules").await?;
    assert_eq!(listed.body["rules"], json!([]));
    sim.faults(json!([write, {"tokens": 2}])).await?;
    let run = run_id(&client.send(&chat, "write again").await?)?;
    finished_run(&client, &chat, &run, QUICK).await?;
    assert!(workspace.join("x.txt").exists());
    Ok(())
}

// 11: what a review found --------------------------------------------------------

/// A card waits; the person sends "don't", stops, and sends now: the calls
/// the stopped run left are closed as not run, never run by the new run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_now_after_a_stop_does_not_run_the_stopped_calls() -> anyhow::Result<()> {
    let (sim, chatd, client) = start(&[], &[]).await?;
    let (chat, workspace) = chat(&client, &chatd, "ask").await?;
    sim.faults(json!([
        step(&[call("write_file", json!({"path": "b.txt", "content": "x"}))]),
        {"tokens": 2},
    ]))
    .await?;
    let mut device = client.events(&chat, 0).await?;
    let run = run_id(&client.send(&chat, "write b").await?)?;
    device
        .read_until(QUICK, |e| e.kind == "tool.consent")
        .await?;
    let pending = client.send(&chat, "NO, do not touch b.txt").await?;
    assert!(pending["pending_id"].is_string(), "{pending}");
    client
        .post(&format!("/conversations/{chat}/stop"), json!({}))
        .await?;
    assert_eq!(
        finished_run(&client, &chat, &run, QUICK).await?["status"],
        "stopped"
    );
    client
        .call(
            reqwest::Method::PUT,
            &format!("/conversations/{chat}/permission-mode"),
            Some(json!({"mode": "auto"})),
        )
        .await?;
    let now = client
        .post(&format!("/conversations/{chat}/send-now"), json!({}))
        .await?;
    assert_eq!(now.status, 202, "{now:?}");
    let second = run_id(&now.body)?;
    assert_eq!(
        finished_run(&client, &chat, &second, QUICK).await?["status"],
        "done"
    );
    assert!(
        !workspace.join("b.txt").exists(),
        "the stopped call never ran"
    );
    let snapshot = client.snapshot(&chat).await?;
    let results = tool_results(&snapshot);
    assert!(results[0].starts_with("not run"), "{results:?}");
    Ok(())
}

/// A card waits; the chat switches to auto and chatd restarts: the run goes
/// on without asking, is `running` again, and the stale card has expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_run_that_no_longer_asks_is_running_and_its_card_expired() -> anyhow::Result<()> {
    let (sim, mut chatd, client) = start(&[], &[]).await?;
    let (chat, workspace) = chat(&client, &chatd, "ask").await?;
    sim.faults(json!([
        step(&[call("write_file", json!({"path": "c.txt", "content": "x"}))]),
        {"tokens": 2},
    ]))
    .await?;
    let mut device = client.events(&chat, 0).await?;
    let run = run_id(&client.send(&chat, "write c").await?)?;
    let card = device
        .read_until(QUICK, |e| e.kind == "tool.consent")
        .await?;
    let card_id = card.last().context("card")?.data["card_id"].clone();
    client
        .call(
            reqwest::Method::PUT,
            &format!("/conversations/{chat}/permission-mode"),
            Some(json!({"mode": "auto"})),
        )
        .await?;
    chatd.restart().await?;
    let record = finished_run(&client, &chat, &run, QUICK).await?;
    assert_eq!(record["status"], "done", "{record}");
    assert!(workspace.join("c.txt").exists());
    let late = client
        .post(
            &format!("/conversations/{chat}/consent"),
            json!({"card_id": card_id, "decision": "deny"}),
        )
        .await?;
    assert_eq!(late.status, 410, "{late:?}");
    Ok(())
}

/// A summary call that fails writes nothing: the chat keeps its history and
/// the run goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_summary_call_keeps_the_history() -> anyhow::Result<()> {
    let (sim, chatd, client) = start(&["--context-window", "8192"], &[]).await?;
    let (chat, _) = chat(&client, &chatd, "auto").await?;
    fill(&client, &chat, 3, 250).await?;
    let before = messages(&client.snapshot(&chat).await?).len();
    // The next request is at the line: its summary call meets a 500, the
    // answer itself goes through.
    sim.faults(json!([{"status": 500}, {"tokens": 3}])).await?;
    // Past the line (6,144) with the system block and the tools, under the
    // window (8,192): it goes as it is once its summary failed.
    let text = format!("long {} [sim tokens=3]", "lorem ipsum ".repeat(600));
    let run = run_id(&client.send(&chat, &text).await?)?;
    let record = finished_run(&client, &chat, &run, QUICK).await?;
    assert_eq!(record["status"], "done", "{record}");
    let snapshot = client.snapshot(&chat).await?;
    assert!(
        messages(&snapshot).iter().all(|m| m["role"] != "compacted"),
        "no marker"
    );
    assert_eq!(messages(&snapshot).len(), before + 2);
    assert!(chatd.log().contains("compaction failed"));
    Ok(())
}

/// A message sent while `/compact` waits for its summary is not cut off:
/// the compaction gives way (409) and the message stays in the chat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_sent_during_compact_is_kept() -> anyhow::Result<()> {
    let (sim, chatd, client) = start(&[], &[]).await?;
    let (chat, _) = chat(&client, &chatd, "auto").await?;
    fill(&client, &chat, 6, 1_500).await?;
    // The summary call takes 2 s; a question comes in meanwhile.
    sim.faults(json!([{"first_token_ms": 2000}, {"tokens": 3}]))
        .await?;
    let compact = {
        let client = chatd.client();
        let chat = chat.clone();
        tokio::spawn(async move {
            client
                .post(&format!("/conversations/{chat}/compact"), json!({}))
                .await
        })
    };
    wait_until("the summary call to start", QUICK, || async {
        let n = sim.requests().await.ok()?.len();
        (n >= 7).then_some(())
    })
    .await?;
    let run = run_id(&client.send(&chat, "NEW QUESTION").await?)?;
    finished_run(&client, &chat, &run, QUICK).await?;
    let compacted = compact.await??;
    assert_eq!(compacted.status, 409, "{compacted:?}");
    assert_eq!(compacted.body["error"]["type"], "chat_moved");
    let snapshot = client.snapshot(&chat).await?;
    assert!(messages(&snapshot)
        .iter()
        .any(|m| m["text"] == "NEW QUESTION"));
    Ok(())
}

/// Files sent while a run works wait with their message and reach the
/// model with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attachments_sent_during_a_run_wait_with_their_message() -> anyhow::Result<()> {
    let (_sim, chatd, client) = start(&[], &[]).await?;
    let (chat, workspace) = chat(&client, &chatd, "auto").await?;
    let run = run_id(&client.send(&chat, "slow [sim tokens=60 tps=30]").await?)?;
    let sent = client
        .post(
            &format!("/conversations/{chat}/messages"),
            json!({"text": "and this", "attachments": [{"name": "late.txt", "text": "late file\n"}]}),
        )
        .await?;
    assert!(sent.body["pending_id"].is_string(), "{sent:?}");
    finished_run(&client, &chat, &run, QUICK).await?;
    settled(&client, &chat).await?;
    let snapshot = client.snapshot(&chat).await?;
    let delivered = messages(&snapshot)
        .into_iter()
        .find(|m| {
            m["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("and this"))
        })
        .context("the waiting message was delivered")?;
    assert_eq!(delivered["attachments"][0]["path"], "uploads/late.txt");
    assert!(workspace.join("uploads/late.txt").exists());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_say_what_they_cannot_mean() -> anyhow::Result<()> {
    let (_sim, _chatd, client) = start(&[], &[]).await?;
    let pattern = client
        .post(
            "/permissions/rules",
            json!({"tool": "write_file", "pattern": "secrets/*", "verdict": "deny"}),
        )
        .await?;
    assert_eq!(pattern.status, 400, "{pattern:?}");
    assert!(pattern.body["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("pattern")));
    let unknown = client
        .post(
            "/permissions/rules",
            json!({"tool": "wirte_file", "verdict": "deny"}),
        )
        .await?;
    assert_eq!(unknown.status, 400, "{unknown:?}");
    let bash = client
        .post(
            "/permissions/rules",
            json!({"tool": "bash", "pattern": "git   push", "verdict": "deny"}),
        )
        .await?;
    assert_eq!(bash.status, 201, "{bash:?}");
    assert_eq!(bash.body["pattern"], "git push");
    Ok(())
}

/// An engine that numbers calls per answer (`call_0` every time): one
/// "once" answers one call, the next call asks again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consent_answers_one_call_even_when_the_engine_repeats_ids() -> anyhow::Result<()> {
    let (sim, chatd, client) = start(&[], &[]).await?;
    let (chat, workspace) = chat(&client, &chatd, "ask").await?;
    let write = |name: &str| json!({"tool_calls": [call("write_file", json!({"path": name, "content": "x"}))], "plain_ids": true});
    sim.faults(json!([write("one.txt"), write("two.txt"), {"tokens": 2}]))
        .await?;
    let mut device = client.events(&chat, 0).await?;
    let run = run_id(&client.send(&chat, "write two files").await?)?;
    let first = device
        .read_until(QUICK, |e| e.kind == "tool.consent")
        .await?;
    let first = first.last().context("first card")?.data.clone();
    client
        .post(
            &format!("/conversations/{chat}/consent"),
            json!({"card_id": first["card_id"], "decision": "once"}),
        )
        .await?;
    let second = device
        .read_until(QUICK, |e| e.kind == "tool.consent")
        .await?;
    let second = second.last().context("second card")?.data.clone();
    assert_ne!(second["card_id"], first["card_id"]);
    assert_ne!(second["call_id"], first["call_id"]);
    client
        .post(
            &format!("/conversations/{chat}/consent"),
            json!({"card_id": second["card_id"], "decision": "deny"}),
        )
        .await?;
    assert_eq!(
        finished_run(&client, &chat, &run, QUICK).await?["status"],
        "done"
    );
    assert!(workspace.join("one.txt").exists());
    assert!(
        !workspace.join("two.txt").exists(),
        "the second call was denied"
    );
    Ok(())
}

/// The first user message of the last request the sim received.
fn first_question(requests: &[Value]) -> anyhow::Result<Value> {
    requests.last().context("a request")?["body"]["messages"]
        .as_array()
        .context("messages")?
        .iter()
        .find(|m| m["role"] == "user")
        .cloned()
        .context("the question")
}

/// A model whose `/v1/models` says it reads images gets the image itself,
/// as an `image_url` part of the question it came with, in that turn only:
/// the next turn's request has a one-line note in its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_reaches_a_model_that_reads_images_in_its_own_turn() -> anyhow::Result<()> {
    use base64::Engine as _;
    let (sim, chatd, client) = start(&["--vision"], &[]).await?;
    let (chat, workspace) = chat(&client, &chatd, "auto").await?;
    // A small real PNG: it fits, so its own bytes go.
    let mut png = Vec::new();
    image::RgbImage::from_pixel(3, 2, image::Rgb([200, 10, 10]))
        .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)?;
    let png = base64::engine::general_purpose::STANDARD.encode(&png);
    let sent = client
        .post(
            &format!("/conversations/{chat}/messages"),
            json!({
                "text": "what is in it? [sim tokens=2]",
                "attachments": [{"name": "shot.png", "data_base64": png}],
            }),
        )
        .await?;
    assert_eq!(sent.status, 202, "{sent:?}");
    let run = run_id(&sent.body)?;
    assert_eq!(
        finished_run(&client, &chat, &run, QUICK).await?["status"],
        "done"
    );
    assert!(workspace.join("uploads/shot.png").exists());
    let requests = sim.requests().await?;
    let question = first_question(&requests)?;
    assert_eq!(question["content"][0]["type"], "text");
    assert_eq!(
        question["content"][1]["image_url"]["url"],
        format!("data:image/png;base64,{png}")
    );

    let run = run_id(&client.send(&chat, "and now? [sim tokens=2]").await?)?;
    assert_eq!(
        finished_run(&client, &chat, &run, QUICK).await?["status"],
        "done"
    );
    let requests = sim.requests().await?;
    let body = serde_json::to_string(&requests.last().context("a request")?["body"])?;
    assert!(body.contains("and now?"), "{body}");
    assert!(!body.contains("image_url"), "the image went again: {body}");
    assert!(
        body.contains(
            "[uploads/shot.png was shown with this message's turn only; it is not sent again]"
        ),
        "{body}"
    );
    Ok(())
}

/// A 4,000 × 3,000 photo reaches the model at 2,048 px on its longest side,
/// as a JPEG (it is opaque); the stored file keeps every byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_photo_reaches_the_model_scaled_to_2048_px() -> anyhow::Result<()> {
    use base64::Engine as _;
    let (sim, chatd, client) = start(&["--vision"], &[]).await?;
    let (chat, workspace) = chat(&client, &chatd, "auto").await?;
    let photo = image::RgbImage::from_fn(4_000, 3_000, |x, y| {
        image::Rgb([(x % 251) as u8, (y % 241) as u8, ((x + y) % 239) as u8])
    });
    let mut png = Vec::new();
    photo.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)?;
    let sent = client
        .post(
            &format!("/conversations/{chat}/messages"),
            json!({
                "text": "what is in it? [sim tokens=2]",
                "attachments": [{"name": "big.png", "data_base64":
                    base64::engine::general_purpose::STANDARD.encode(&png)}],
            }),
        )
        .await;
    // Over the JSON body's 1 MiB: sent as a form instead.
    let sent = match sent {
        Ok(answer) if answer.status == 202 => answer,
        _ => {
            let parts = [
                tandem_tests::harness::FormPart::setting("text", "what is in it? [sim tokens=2]"),
                tandem_tests::harness::FormPart::file("big.png", "image/png", png.clone()),
            ];
            client
                .send_form(
                    reqwest::Method::POST,
                    &format!("/conversations/{chat}/messages"),
                    tandem_tests::harness::form_body(&parts),
                )
                .await?
        }
    };
    assert_eq!(sent.status, 202, "{sent:?}");
    let run = run_id(&sent.body)?;
    assert_eq!(
        finished_run(&client, &chat, &run, LONG).await?["status"],
        "done"
    );
    assert_eq!(std::fs::read(workspace.join("uploads/big.png"))?, png);
    let requests = sim.requests().await?;
    let question = first_question(&requests)?;
    let url = question["content"][1]["image_url"]["url"]
        .as_str()
        .context("an image part")?;
    let data = url
        .strip_prefix("data:image/jpeg;base64,")
        .with_context(|| format!("a JPEG: {}", &url[..40.min(url.len())]))?;
    let jpeg = base64::engine::general_purpose::STANDARD.decode(data)?;
    let seen = image::load_from_memory(&jpeg)?;
    assert_eq!((seen.width(), seen.height()), (2_048, 1_536));
    Ok(())
}
