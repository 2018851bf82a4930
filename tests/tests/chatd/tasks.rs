//! Agents mode end to end: the real `chatd` and `engine-sim`, the main
//! agent's answers scripted on its session and each worker's on
//! `chat-<id>-task-<n>`. What a person sees: the main agent hands a build to
//! a worker and reads its report with chatd's check under it; a brief with
//! code never starts a worker; a report with a field missing is asked for
//! again; Stop stops both and Continue resumes the worker, then the main
//! agent, never running a cut-off command again.

use anyhow::Context;
use serde_json::{json, Value};
use tandem_tests::harness::{
    offered_tools, run_id, system_text, tool_results, wait_until, Chatd, Client, Hostexecd, Sim,
};

use crate::scripted::{bodies_of, call, script, LONG};

const BRIEF: &str = "Goal: a clock page that shows the time\n\
    Files: clock.html\n\
    Constraints: no libraries\n\
    Check: run the tests";

async fn start() -> anyhow::Result<(Sim, Chatd, Client)> {
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start(&sim.url(), &[]).await?;
    let client = chatd.client();
    Ok((sim, chatd, client))
}

/// A chat in Agents mode (and `auto`, so a worker's writes run).
async fn agents_chat(client: &Client) -> anyhow::Result<String> {
    let made = client
        .post(
            "/conversations",
            json!({"permission_mode": "auto", "settings": {"agents": true}}),
        )
        .await?;
    anyhow::ensure!(made.status == 201, "{made:?}");
    Ok(made.body["id"].as_str().context("id")?.to_string())
}

fn task(title: &str, brief: &str) -> Value {
    call(
        "task",
        json!({"title": title, "brief": brief, "expect": "what changed and what the check showed"}),
    )
}

fn report(checks: &str) -> String {
    format!(
        "I wrote it.\n\n## Report\nStatus: done\nSummary: a clock page\nFiles: clock.html\n\
         Checks:\n{checks}\nOpen: none"
    )
}

/// The session of task `n` of `chat`, as `scripted::script` takes it.
fn worker(chat: &str, n: u32) -> String {
    format!("{chat}-task-{n}")
}

async fn tasks_of(client: &Client, chat: &str) -> anyhow::Result<Vec<Value>> {
    let answer = client.get(&format!("/conversations/{chat}/tasks")).await?;
    anyhow::ensure!(answer.status == 200, "{answer:?}");
    Ok(answer.body["tasks"].as_array().cloned().unwrap_or_default())
}

/// Sends `text` and waits for the chat's run to end `status`.
async fn turn_ending(
    client: &Client,
    chat: &str,
    text: &str,
    status: &str,
) -> anyhow::Result<Value> {
    let run = run_id(&client.send(chat, text).await?)?;
    let ended = client
        .wait_run(
            chat,
            &run,
            &["done", "failed", "stopped", "interrupted"],
            LONG,
        )
        .await?;
    anyhow::ensure!(ended["status"] == status, "{ended}");
    client.snapshot(chat).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_main_agent_hands_a_build_to_a_worker_and_reads_its_checked_report(
) -> anyhow::Result<()> {
    let (sim, chatd, client) = start().await?;
    let chat = agents_chat(&client).await?;
    script(
        &sim,
        &chat,
        vec![
            json!({"tool_calls": [task("Clock", BRIEF)]}),
            json!({"text": "The worker built it; its npm test claim is unverified."}),
        ],
    )
    .await?;
    script(
        &sim,
        &worker(&chat, 1),
        vec![
            json!({"tool_calls": [call("write_file", json!({"path": "clock.html", "content": "<p>now</p>"}))]}),
            json!({"text": report("- `npm test`: all pass")}),
        ],
    )
    .await?;
    let snapshot = turn_ending(&client, &chat, "Build me a clock page", "done").await?;

    // The main agent reads and plans; the worker has the write tools.
    let main = bodies_of(&sim, &chat).await?;
    let offered = offered_tools(main.first().context("a request")?);
    assert!(offered.iter().any(|t| t == "task"), "{offered:?}");
    assert!(offered.iter().any(|t| t == "read_file"), "{offered:?}");
    for off in ["bash", "write_file", "edit_file", "spawn_agent"] {
        assert!(
            !offered.iter().any(|t| t == off),
            "{off} offered: {offered:?}"
        );
    }
    assert!(system_text(&main[0]).contains("# Agents mode"));
    let work = bodies_of(&sim, &worker(&chat, 1)).await?;
    assert_eq!(work.len(), 2, "the worker's two calls, on its own session");
    let tools = offered_tools(&work[0]);
    assert!(tools.iter().any(|t| t == "write_file"), "{tools:?}");
    assert!(
        !tools.iter().any(|t| t == "task" || t == "spawn_agent"),
        "{tools:?}"
    );
    assert!(system_text(&work[0]).contains("# You are a worker"));
    let first = work[0]["messages"][1]["content"].to_string();
    assert!(
        first.contains("Task 1: Clock") && first.contains("Goal: a clock page"),
        "{first}"
    );
    assert!(
        first.contains("Build me a clock page"),
        "the person's words: {first}"
    );

    // The report with chatd's check is the task call's result.
    let results = tool_results(&snapshot);
    let read = results.last().context("the task's result")?;
    assert!(read.contains("Status: done"), "{read}");
    assert!(read.contains("## chatd's check"), "{read}");
    assert!(read.contains("- created clock.html"), "{read}");
    assert!(
        read.contains("- unverified: `npm test`: all pass"),
        "{read}"
    );
    assert!(read.contains("write_file ×1"), "{read}");

    // Kept whole in the workspace, and listed.
    let kept = chatd
        .data_dir()
        .join("workspaces")
        .join(&chat)
        .join(".tandem/tasks/1/report.md");
    let whole = std::fs::read_to_string(&kept)?;
    assert!(whole.starts_with("# Task 1: Clock"), "{whole}");
    let rows = tasks_of(&client, &chat).await?;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["state"], "done");
    assert_eq!(rows[0]["n"], 1);
    let id = rows[0]["id"].as_str().context("id")?;
    let one = client
        .get(&format!("/conversations/{chat}/tasks/{id}"))
        .await?;
    assert_eq!(one.body["task"]["report"].as_str(), Some(whole.as_str()));
    // A worker's conversation is its chat's to run.
    let write = client
        .post(
            &format!("/conversations/{id}/messages"),
            json!({"text": "hi"}),
        )
        .await?;
    assert_eq!(write.status, 409, "{write:?}");
    // It is a task, not a sub-agent of the menu.
    let subs = client
        .get(&format!("/conversations/{chat}/subagents"))
        .await?;
    assert_eq!(subs.body["subagents"], json!([]));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_brief_with_code_is_refused_before_any_worker_starts() -> anyhow::Result<()> {
    let (sim, chatd, client) = start().await?;
    let chat = agents_chat(&client).await?;
    let own = chatd.data_dir().join("workspaces").join(&chat);
    std::fs::create_dir_all(&own)?;
    let lines: Vec<String> = (1..=500).map(|i| format!("line {i}")).collect();
    std::fs::write(own.join("long.txt"), lines.join("\n"))?;
    let coded = format!("{BRIEF}\n```html\n<p id=t></p>\n```");
    script(
        &sim,
        &chat,
        vec![
            json!({"tool_calls": [task("Clock", &coded), call("write_file", json!({"path": "a.md", "content": "x"}))]}),
            json!({"tool_calls": [task("Clock", "Goal: a clock")]}),
            json!({"tool_calls": [call("read_file", json!({"path": "long.txt", "limit": 1000}))]}),
            json!({"text": "I will write the brief in words."}),
        ],
    )
    .await?;
    let snapshot = turn_ending(&client, &chat, "Build me a clock page", "done").await?;
    let results = tool_results(&snapshot);
    assert!(
        results[0].contains("refused") && results[0].contains("a code fence"),
        "{}",
        results[0]
    );
    assert!(
        results[1].contains("not the main agent's in Agents mode"),
        "{}",
        results[1]
    );
    assert!(
        results[2].contains("Files:, Constraints:, Check:"),
        "{}",
        results[2]
    );
    // The main agent reads 200 lines a call at most, whatever it asks.
    assert!(
        results[3].contains("line 200\n") && !results[3].contains("line 201\n"),
        "{}",
        results[3]
    );
    assert!(results[3].contains("offset=201"), "{}", results[3]);
    assert!(
        tasks_of(&client, &chat).await?.is_empty(),
        "no worker started"
    );
    assert!(bodies_of(&sim, &worker(&chat, 1)).await?.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_missing_a_field_is_asked_for_again_then_built_from_the_record(
) -> anyhow::Result<()> {
    let (sim, _chatd, client) = start().await?;
    let chat = agents_chat(&client).await?;
    script(
        &sim,
        &chat,
        vec![
            json!({"tool_calls": [task("First", BRIEF)]}),
            json!({"tool_calls": [task("Second", &BRIEF.replace("clock", "timer"))]}),
            json!({"text": "Both ran."}),
        ],
    )
    .await?;
    // Task 1 leaves out Checks and Open, then answers whole.
    script(
        &sim,
        &worker(&chat, 1),
        vec![
            json!({"text": "## Report\nStatus: done\nSummary: nothing to do\nFiles: none"}),
            json!({"text": "## Report\nStatus: done\nSummary: nothing to do\nFiles: none\nChecks: none\nOpen: none"}),
        ],
    )
    .await?;
    // Task 2 never gives one.
    script(
        &sim,
        &worker(&chat, 2),
        vec![
            json!({"text": "I looked around."}),
            json!({"text": "Still looking."}),
        ],
    )
    .await?;
    let snapshot = turn_ending(&client, &chat, "Do both", "done").await?;
    let first = bodies_of(&sim, &worker(&chat, 1)).await?;
    assert_eq!(first.len(), 2, "asked again once");
    let asked = first[1]["messages"]
        .as_array()
        .and_then(|m| m.last())
        .map(|m| m["content"].to_string())
        .unwrap_or_default();
    assert!(asked.contains("it misses Checks, Open"), "{asked}");
    let results = tool_results(&snapshot);
    assert!(
        results[0].contains("asked again once for a missing field"),
        "{}",
        results[0]
    );
    assert!(
        results[0].contains("Summary: nothing to do"),
        "{}",
        results[0]
    );
    assert_eq!(
        bodies_of(&sim, &worker(&chat, 2)).await?.len(),
        2,
        "asked once, not twice"
    );
    assert!(
        results[1].contains("built by chatd from the record"),
        "{}",
        results[1]
    );
    assert!(results[1].contains("Open: unknown"), "{}", results[1]);
    let rows = tasks_of(&client, &chat).await?;
    let asks: Vec<i64> = rows
        .iter()
        .filter_map(|r| r["report_asks"].as_i64())
        .collect();
    assert_eq!(asks, [1, 1]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_stops_both_and_continue_resumes_the_worker_then_the_main_agent() -> anyhow::Result<()>
{
    let (sim, _chatd, client) = start().await?;
    let chat = agents_chat(&client).await?;
    script(
        &sim,
        &chat,
        vec![
            json!({"tool_calls": [task("Slow", BRIEF)]}),
            json!({"text": "All done."}),
        ],
    )
    .await?;
    script(
        &sim,
        &worker(&chat, 1),
        vec![json!({"tokens": 4000, "tps": 20, "id": "slow-worker"})],
    )
    .await?;
    let run = run_id(&client.send(&chat, "Go").await?)?;
    let id = wait_until("the worker to stream", LONG, || async {
        let rows = tasks_of(&client, &chat).await.ok()?;
        let id = rows.first()?["id"].as_str()?.to_string();
        let own = client.snapshot(&id).await.ok()?;
        let streamed = own["messages"]
            .as_array()?
            .iter()
            .any(|m| m["role"] == "assistant" && m["text"].as_str().is_some_and(|t| t.len() > 20));
        streamed.then_some(id)
    })
    .await?;
    let stop = client
        .post(&format!("/conversations/{chat}/stop"), json!({}))
        .await?;
    assert!(stop.status < 300, "{stop:?}");
    client.wait_run(&chat, &run, &["stopped"], LONG).await?;
    let own = client.snapshot(&id).await?;
    let statuses: Vec<&str> = own["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["status"].as_str())
        .collect();
    assert_eq!(statuses, ["stopped"], "the worker stopped with it");
    assert_eq!(
        tasks_of(&client, &chat).await?[0]["state"],
        "running",
        "left open"
    );

    // Continue: the worker goes on first, then the main agent reads its report.
    script(
        &sim,
        &worker(&chat, 1),
        vec![json!({"text": report("none")})],
    )
    .await?;
    let resumed = client
        .post(&format!("/conversations/{chat}/continue"), json!({}))
        .await?;
    assert_eq!(resumed.status, 202, "{resumed:?}");
    let run = run_id(&resumed.body)?;
    client.wait_run(&chat, &run, &["done"], LONG).await?;
    let own = client.snapshot(&id).await?;
    let modes: Vec<&str> = own["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["mode"].as_str())
        .collect();
    assert_eq!(modes, ["send", "continue"]);
    let snapshot = client.snapshot(&chat).await?;
    let results = tool_results(&snapshot);
    assert_eq!(
        results.len(),
        1,
        "one result for the one task call: {results:?}"
    );
    assert!(results[0].contains("Status: done"), "{}", results[0]);
    assert_eq!(tasks_of(&client, &chat).await?[0]["state"], "done");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_after_a_worker_cut_off_by_kill9_runs_no_command_twice() -> anyhow::Result<()> {
    let hostexecd = Hostexecd::start("").await?;
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let socket = hostexecd.socket.to_string_lossy().to_string();
    let chat_data = hostexecd.chat_data.to_string_lossy().to_string();
    let env = [
        ("QSE_HOSTEXEC_SOCKET", socket.as_str()),
        ("QSE_CHATS_HOST_EXEC", "on"),
        ("QSE_CHAT_DATA", chat_data.as_str()),
    ];
    let mut chatd = Chatd::start(&sim.url(), &env).await?;
    let client = chatd.client();
    let chat = agents_chat(&client).await?;
    script(
        &sim,
        &chat,
        vec![
            json!({"tool_calls": [task("Log", BRIEF)]}),
            json!({"text": "Logged once."}),
        ],
    )
    .await?;
    let command = "echo once >> marker.txt && sleep 60";
    script(
        &sim,
        &worker(&chat, 1),
        vec![
            json!({"tool_calls": [call("write_file", json!({"path": "first.md", "content": "one"}))]}),
            json!({"tool_calls": [call("bash", json!({"command": command}))]}),
            json!({"text": report("- `echo once >> marker.txt`: appended")}),
        ],
    )
    .await?;
    client.send(&chat, "Log it").await?;
    let marker = hostexecd
        .chat_data
        .join("workspaces")
        .join(&chat)
        .join("marker.txt");
    wait_until("the command to begin", LONG, || async {
        std::fs::read_to_string(&marker)
            .ok()
            .filter(|t| !t.is_empty())
    })
    .await?;
    chatd.restart().await?;

    // Nothing goes on by itself: the chat waits for Continue.
    let last = client.snapshot(&chat).await?["runs"]
        .as_array()
        .and_then(|r| r.last().cloned())
        .context("a run")?;
    assert_eq!(last["status"], "interrupted", "{last}");
    let resumed = client
        .post(&format!("/conversations/{chat}/continue"), json!({}))
        .await?;
    assert_eq!(resumed.status, 202, "{resumed:?}");
    client
        .wait_run(&chat, &run_id(&resumed.body)?, &["done"], LONG)
        .await?;
    assert_eq!(
        std::fs::read_to_string(&marker)?,
        "once\n",
        "the command ran once"
    );
    let id = tasks_of(&client, &chat).await?[0]["id"]
        .as_str()
        .context("id")?
        .to_string();
    let own = client.snapshot(&id).await?;
    let results = tool_results(&own);
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(
        results[1].contains("cut off") && results[1].contains("not run again"),
        "{}",
        results[1]
    );
    let report = tool_results(&client.snapshot(&chat).await?);
    assert!(report[0].contains("- created first.md"), "{}", report[0]);
    // The claimed check's only call was cut off: it is not taken as passed.
    assert!(
        report[0].contains(
            "- unverified: `echo once >> marker.txt`: appended (its call failed or was cut off)"
        ),
        "{}",
        report[0]
    );
    Ok(())
}

/// A saved agent whose settings say Agents mode, started as a sub-agent of
/// a plain chat: it is a sub-agent, with the chat's tools (writes
/// included) and never `task`: no worker of a worker's kind below a chat
/// that does not plan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agent_never_plans_even_as_an_agent_in_agents_mode() -> anyhow::Result<()> {
    let (sim, _chatd, client) = start().await?;
    let made = client
        .post(
            "/agents",
            json!({"name": "Planner", "settings": {"agents": true}}),
        )
        .await?;
    anyhow::ensure!(made.status == 201, "{made:?}");
    let chat = client.create_chat_in("auto").await?;
    let on = client
        .call(
            reqwest::Method::PUT,
            &format!("/conversations/{chat}/builtins"),
            Some(json!({"on": ["saved_agents"]})),
        )
        .await?;
    assert_eq!(on.status, 200, "{on:?}");
    script(
        &sim,
        &chat,
        vec![
            json!({"tool_calls": [call("spawn_agent", json!({"task": "Write notes.md", "agent": "Planner"}))]}),
            json!({"text": "done"}),
        ],
    )
    .await?;
    let snapshot = turn_ending(&client, &chat, "Ask the planner", "done").await?;
    let subs = client
        .get(&format!("/conversations/{chat}/subagents"))
        .await?;
    let sub = subs.body["subagents"][0]["id"]
        .as_str()
        .context("the sub-agent")?
        .to_string();
    let asked = bodies_of(&sim, &sub).await?;
    let tools = offered_tools(asked.first().context("its request")?);
    assert!(tools.iter().any(|t| t == "write_file"), "{tools:?}");
    assert!(!tools.iter().any(|t| t == "task"), "{tools:?}");
    assert!(!system_text(&asked[0]).contains("# Agents mode"));
    assert!(tasks_of(&client, &chat).await?.is_empty());
    assert_eq!(tool_results(&snapshot).len(), 1);
    Ok(())
}

/// A worker makes 40 model calls at most: the 40th is offered no tools and
/// a call in it never runs; with no report in it, it is asked once more,
/// in one call with no tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stops_at_40_model_calls_and_its_last_runs_no_call() -> anyhow::Result<()> {
    let (sim, _chatd, client) = start().await?;
    let chat = agents_chat(&client).await?;
    script(
        &sim,
        &chat,
        vec![
            json!({"tool_calls": [task("Long", BRIEF)]}),
            json!({"text": "It ran out of steps."}),
        ],
    )
    .await?;
    let mut steps: Vec<Value> = (0..40)
        .map(|i| json!({"tool_calls": [call("list_files", json!({"path": format!("step{i}")}))]}))
        .collect();
    steps.push(json!({"text": report("none")}));
    script(&sim, &worker(&chat, 1), steps).await?;
    let snapshot = turn_ending(&client, &chat, "Go on as long as you like", "done").await?;
    let asked = bodies_of(&sim, &worker(&chat, 1)).await?;
    assert_eq!(asked.len(), 41, "40 calls, then the report asked for once");
    assert!(!offered_tools(&asked[38]).is_empty());
    assert!(
        offered_tools(&asked[39]).is_empty(),
        "the 40th offers no tools"
    );
    assert!(
        offered_tools(&asked[40]).is_empty(),
        "nor does the ask again"
    );
    let rows = tasks_of(&client, &chat).await?;
    let own = client
        .snapshot(rows[0]["id"].as_str().context("id")?)
        .await?;
    let ran = tool_results(&own);
    assert_eq!(ran.len(), 39, "the 40th call's list_files never ran");
    let read = tool_results(&snapshot);
    assert!(read[0].contains("asked again once"), "{}", read[0]);
    assert_eq!(rows[0]["state"], "done");
    Ok(())
}

/// A message the person sends while a worker works waits for the main
/// agent (it reads it after the report), and the worker is shown it once,
/// as a note before its next model call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_sent_while_a_worker_works_reaches_it_as_a_note_and_the_main_agent_after(
) -> anyhow::Result<()> {
    let (sim, _chatd, client) = start().await?;
    let chat = agents_chat(&client).await?;
    script(
        &sim,
        &chat,
        vec![
            json!({"tool_calls": [task("Clock", BRIEF)]}),
            json!({"text": "Blue it is."}),
        ],
    )
    .await?;
    script(
        &sim,
        &worker(&chat, 1),
        vec![
            json!({"tokens": 300, "tps": 60, "tool_calls": [call("list_files", json!({"path": "."}))]}),
            json!({"tokens": 1, "tool_calls": [call("list_files", json!({"path": "."}))]}),
            json!({"text": report("none")}),
        ],
    )
    .await?;
    let run = run_id(&client.send(&chat, "Build me a clock page").await?)?;
    wait_until("the worker to stream", LONG, || async {
        let rows = tasks_of(&client, &chat).await.ok()?;
        let own = client.snapshot(rows.first()?["id"].as_str()?).await.ok()?;
        own["messages"]
            .as_array()?
            .iter()
            .any(|m| m["role"] == "assistant" && m["text"].as_str().is_some_and(|t| t.len() > 20))
            .then_some(())
    })
    .await?;
    let waiting = client.send(&chat, "Make the hands blue").await?;
    assert!(waiting["pending_id"].is_string(), "{waiting}");
    client.wait_run(&chat, &run, &["done"], LONG).await?;

    let work = bodies_of(&sim, &worker(&chat, 1)).await?;
    let noted = |body: &Value| {
        body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| {
                m["role"] == "user" && m["content"].to_string().contains("Make the hands blue")
            })
            .count()
    };
    assert_eq!(work.len(), 3);
    assert_eq!(noted(&work[0]), 0);
    assert_eq!(
        noted(&work[1]),
        1,
        "shown before its next call: {}",
        work[1]
    );
    assert_eq!(noted(&work[2]), 1, "once");
    assert!(work[1]
        .to_string()
        .contains("While you work, the person wrote"));
    let main = bodies_of(&sim, &chat).await?;
    let last = main.last().context("the main agent's last request")?;
    let told = last["messages"].as_array().context("messages")?;
    let report_at = told
        .iter()
        .position(|m| m["role"] == "tool")
        .context("the report")?;
    let message_at = told
        .iter()
        .position(|m| {
            m["role"] == "user" && m["content"].to_string().contains("Make the hands blue")
        })
        .context("the message")?;
    assert!(
        message_at > report_at,
        "the main agent reads it after the report"
    );
    Ok(())
}
