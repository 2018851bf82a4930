//! Goals end to end: the real `chatd` and `engine-sim`, the model's answers
//! scripted on the chat's session. What a person sees: a goal set from a
//! phone goes on turn after turn without "continue" and ends done with its
//! evidence, or blocked with a question, or paused at a limit, stuck, a stop
//! or a restart, and never runs a turn twice.

use anyhow::Context;
use serde_json::{json, Value};
use tandem_tests::harness::{offered_tools, system_text, wait_until, Chatd, Client, Sim};

use crate::scripted::{bodies_of, call, script, LONG};

const GOAL: &str = "Turn the notes in research/ into a two-page summary";

async fn start(env: &[(&str, &str)]) -> anyhow::Result<(Sim, Chatd, Client)> {
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start(&sim.url(), env).await?;
    let client = chatd.client();
    Ok((sim, chatd, client))
}

async fn set_goal(client: &Client, chat: &str, text: &str) -> anyhow::Result<Value> {
    let answer = client
        .call(
            reqwest::Method::PUT,
            &format!("/conversations/{chat}/goal"),
            Some(json!({ "text": text })),
        )
        .await?;
    anyhow::ensure!(answer.status == 200, "{answer:?}");
    Ok(answer.body)
}

async fn goal_of(client: &Client, chat: &str) -> anyhow::Result<Value> {
    let answer = client.get(&format!("/conversations/{chat}/goal")).await?;
    anyhow::ensure!(answer.status == 200, "{answer:?}");
    Ok(answer.body["goal"].clone())
}

/// Waits until the goal is in `state` and the chat has no run working.
async fn settled(client: &Client, chat: &str, state: &str) -> anyhow::Result<Value> {
    wait_until(
        &format!("the goal {state} and the chat idle"),
        LONG,
        || async {
            let snapshot = client.snapshot(chat).await.ok()?;
            let idle = snapshot["conversation"]["state"] == "idle";
            (idle && snapshot["goal"]["state"] == state).then_some(snapshot)
        },
    )
    .await
}

/// The goal lines of a snapshot: `(goal_event, goal_turn)`.
fn goal_lines(snapshot: &Value) -> Vec<(String, Option<i64>)> {
    snapshot["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "goal")
        .map(|m| {
            (
                m["goal_event"].as_str().unwrap_or("").to_string(),
                m["goal_turn"].as_i64(),
            )
        })
        .collect()
}

fn runs_of(snapshot: &Value) -> Vec<Value> {
    snapshot["runs"].as_array().cloned().unwrap_or_default()
}

fn last_user_text(body: &Value) -> String {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_goal_goes_on_by_itself_and_ends_done_with_its_evidence_in_three_turns(
) -> anyhow::Result<()> {
    let (sim, _chatd, client) = start(&[]).await?;
    let chat = client.create_chat_in("auto").await?;
    script(
        &sim,
        &chat,
        vec![
            json!({"text": "I read the notes; the summary comes next."}),
            json!({"tool_calls": [call("write_file", json!({"path": "summary.md", "content": "two pages"}))]}),
            json!({"text": "The summary is written; I check the figures next."}),
            json!({"tool_calls": [call("goal_done", json!({"summary": "summary.md holds the two pages", "evidence": ["summary.md"]}))]}),
            json!({"text": "Done: summary.md has the two pages, every figure checked."}),
        ],
    )
    .await?;
    let set = set_goal(&client, &chat, GOAL).await?;
    assert!(
        set["run_id"].is_string(),
        "an idle chat starts at once: {set}"
    );
    assert_eq!(set["goal"]["state"], "active");
    assert_eq!(set["goal"]["max_turns"], 20);
    assert_eq!(set["goal"]["max_steps"], 400);

    let snapshot = settled(&client, &chat, "done").await?;
    let goal = &snapshot["goal"];
    assert_eq!(goal["note"], "summary.md holds the two pages", "{goal}");
    assert_eq!(goal["evidence"], json!(["summary.md"]));
    assert_eq!(goal["turns"], 3, "{goal}");
    // The words after goal_done are no longer the goal's.
    assert_eq!(goal["steps"], 4, "{goal}");
    assert_eq!(
        goal_lines(&snapshot),
        vec![
            ("set".to_string(), None),
            ("continue".to_string(), Some(2)),
            ("continue".to_string(), Some(3)),
            ("done".to_string(), None),
        ]
    );
    let runs = runs_of(&snapshot);
    assert_eq!(runs.len(), 3, "one run a turn, none after done: {runs:?}");
    assert!(runs.iter().all(|r| r["status"] == "done"), "{runs:?}");

    // Every request names the goal in its system block, afresh; the goal's
    // tools are offered while it is active; the next turn is asked to go on.
    let bodies = bodies_of(&sim, &chat).await?;
    assert_eq!(bodies.len(), 5, "five model calls");
    for body in &bodies[..4] {
        assert!(system_text(body).contains(GOAL), "the goal is named");
        let tools = offered_tools(body);
        assert!(tools.iter().any(|t| t == "goal_done"), "{tools:?}");
        assert!(tools.iter().any(|t| t == "goal_blocked"), "{tools:?}");
    }
    assert_eq!(
        last_user_text(&bodies[1]),
        format!("Continue toward the goal: \"{GOAL}\"")
    );
    // goal_done's result is read as its call's, though the goal's line was
    // written between the call and its result.
    let results: Vec<&Value> = bodies[4]["messages"]
        .as_array()
        .context("messages")?
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert!(
        results.iter().any(|m| m["content"]
            .as_str()
            .is_some_and(|c| c.starts_with("The goal is marked reached"))),
        "{results:?}"
    );
    let after = offered_tools(&bodies[4]);
    assert!(
        !after.iter().any(|t| t == "goal_done"),
        "no goal tools once it is done: {after:?}"
    );

    // Goal lines are the chat's, not its words: not exported, not forked.
    let export = client
        .get(&format!("/conversations/{chat}/export?format=json"))
        .await?;
    let roles: Vec<&str> = export.body["messages"]
        .as_array()
        .context("messages")?
        .iter()
        .filter_map(|m| m["role"].as_str())
        .collect();
    assert!(!roles.contains(&"goal"), "{roles:?}");
    let last = snapshot["messages"]
        .as_array()
        .and_then(|m| m.last())
        .context("a message")?;
    let fork = client
        .post(
            &format!("/conversations/{chat}/fork"),
            json!({"from_message_id": last["id"]}),
        )
        .await?;
    assert_eq!(fork.status, 201, "{fork:?}");
    let forked = client
        .snapshot(fork.body["id"].as_str().context("id")?)
        .await?;
    assert!(goal_lines(&forked).is_empty(), "{forked}");
    assert!(forked["goal"].is_null(), "a fork has no goal");
    // A fork is a person's chat: it may have a goal of its own.
    let fork_id = fork.body["id"].as_str().context("id")?;
    let theirs = client
        .call(
            reqwest::Method::PUT,
            &format!("/conversations/{fork_id}/goal"),
            Some(json!({"text": "another goal"})),
        )
        .await?;
    assert_eq!(theirs.status, 200, "{theirs:?}");

    // Regenerate answers the goal's last turn again; its lines stay.
    let again = client
        .post(&format!("/conversations/{chat}/regenerate"), json!({}))
        .await?;
    assert_eq!(again.status, 202, "{again:?}");
    let run = again.body["run_id"].as_str().context("run_id")?;
    client.wait_run(&chat, run, &["done"], LONG).await?;
    let after = client.snapshot(&chat).await?;
    assert_eq!(
        goal_lines(&after).len(),
        3,
        "set and both continues stay; the done line was after the answer: {:?}",
        goal_lines(&after)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_goal_asks_and_resumes_with_new_counts_and_done_needs_evidence_once(
) -> anyhow::Result<()> {
    let (sim, _chatd, client) = start(&[]).await?;
    let chat = client.create_chat_in("auto").await?;
    script(
        &sim,
        &chat,
        vec![
            json!({"tool_calls": [call("goal_blocked", json!({"reason": "research/ is empty.", "needs": "the notes"}))]}),
            json!({"text": "Where are the notes?"}),
        ],
    )
    .await?;
    set_goal(&client, &chat, GOAL).await?;
    let snapshot = settled(&client, &chat, "blocked").await?;
    assert_eq!(snapshot["goal"]["note"], "research/ is empty.");
    assert_eq!(snapshot["goal"]["needs"], "the notes");
    assert_eq!(runs_of(&snapshot).len(), 1, "a blocked goal waits");

    // Resume: a done without evidence is asked for it once, then taken.
    script(
        &sim,
        &chat,
        vec![
            json!({"tool_calls": [call("goal_done", json!({"summary": "done", "evidence": []}))]}),
            json!({"tool_calls": [call("goal_done", json!({"summary": "done", "evidence": []}))]}),
            json!({"text": "All done."}),
        ],
    )
    .await?;
    let resumed = client
        .post(&format!("/conversations/{chat}/goal/resume"), json!({}))
        .await?;
    assert_eq!(resumed.status, 200, "{resumed:?}");
    assert_eq!(resumed.body["goal"]["turns"], 1, "new counts, this turn");
    assert!(resumed.body["run_id"].is_string());
    let snapshot = settled(&client, &chat, "done").await?;
    let results: Vec<String> = tandem_tests::harness::tool_results(&snapshot);
    assert!(
        results[1].starts_with("name the evidence"),
        "asked once: {results:?}"
    );
    assert!(
        results[2].starts_with("The goal is marked reached"),
        "{results:?}"
    );
    let events: Vec<String> = goal_lines(&snapshot).into_iter().map(|l| l.0).collect();
    assert_eq!(events, ["set", "blocked", "resumed", "done"]);

    // A done goal is not resumed: a new one is set.
    let again = client
        .post(&format!("/conversations/{chat}/goal/resume"), json!({}))
        .await?;
    assert_eq!(again.status, 409, "{again:?}");
    assert_eq!(again.body["error"]["type"], "goal_state");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_goal_pauses_at_its_turn_limit_and_its_step_limit() -> anyhow::Result<()> {
    let env = [
        ("QSE_CHAT_GOAL_MAX_TURNS", "2"),
        ("QSE_CHAT_GOAL_MAX_STEPS", "3"),
    ];
    let (sim, _chatd, client) = start(&env).await?;

    // Turn limit: the simulator's plain answers never end the goal.
    let chat = client.create_chat_in("auto").await?;
    set_goal(&client, &chat, GOAL).await?;
    let snapshot = settled(&client, &chat, "paused").await?;
    assert_eq!(
        snapshot["goal"]["paused_by"], "turn_limit",
        "{}",
        snapshot["goal"]
    );
    assert_eq!(runs_of(&snapshot).len(), 2);

    // Step limit: three model calls over the goal's turns, mid-turn.
    let chat = client.create_chat_in("auto").await?;
    let list =
        |n: usize| json!({"tool_calls": [call("list_files", json!({"path": format!("d{n}")}))]});
    script(&sim, &chat, vec![list(1), list(2), list(3), list(4)]).await?;
    set_goal(&client, &chat, GOAL).await?;
    let snapshot = settled(&client, &chat, "paused").await?;
    let goal = &snapshot["goal"];
    assert_eq!(goal["paused_by"], "step_limit", "{goal}");
    assert_eq!(goal["steps"], 3, "{goal}");
    let runs = runs_of(&snapshot);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["status"], "paused");

    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_failing_call_four_times_pauses_the_goal_as_stuck_and_stop_pauses_it(
) -> anyhow::Result<()> {
    let (sim, _chatd, client) = start(&[]).await?;
    let chat = client.create_chat_in("auto").await?;
    let again = json!({"tool_calls": [call("read_file", json!({"path": "missing.txt"}))]});
    script(
        &sim,
        &chat,
        vec![again.clone(), again.clone(), again.clone(), again],
    )
    .await?;
    set_goal(&client, &chat, GOAL).await?;
    let snapshot = settled(&client, &chat, "paused").await?;
    let goal = &snapshot["goal"];
    assert_eq!(goal["paused_by"], "stuck", "{goal}");
    assert!(
        goal["note"].as_str().unwrap_or("").contains("`read_file`"),
        "{goal}"
    );
    assert_eq!(goal["steps"], 4, "it stopped at the fourth: {goal}");
    let runs = runs_of(&snapshot);
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["status"], "paused");
    assert_eq!(bodies_of(&sim, &chat).await?.len(), 4, "no fifth call");

    // Resume goes on; a stop pauses it by the person.
    script(&sim, &chat, vec![json!({"tokens": 4000, "tps": 20})]).await?;
    client
        .post(&format!("/conversations/{chat}/goal/resume"), json!({}))
        .await?;
    wait_until("the resumed turn to stream", LONG, || async {
        let snapshot = client.snapshot(&chat).await.ok()?;
        (snapshot["conversation"]["state"] == "running").then_some(())
    })
    .await?;
    let stopped = client
        .post(&format!("/conversations/{chat}/stop"), json!({}))
        .await?;
    assert_eq!(stopped.status, 200, "{stopped:?}");
    let snapshot = settled(&client, &chat, "paused").await?;
    assert_eq!(snapshot["goal"]["paused_by"], "user");
    assert_eq!(runs_of(&snapshot).len(), 2, "nothing followed the stop");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill9_during_a_goal_turn_pauses_it_interrupted_and_no_turn_runs_twice(
) -> anyhow::Result<()> {
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let mut chatd = Chatd::start(&sim.url(), &[]).await?;
    let client = chatd.client();
    let chat = client.create_chat_in("auto").await?;
    script(
        &sim,
        &chat,
        vec![
            json!({"text": "first turn"}),
            json!({"tokens": 4000, "tps": 20}),
        ],
    )
    .await?;
    set_goal(&client, &chat, GOAL).await?;
    wait_until("the goal's second turn to stream", LONG, || async {
        let snapshot = client.snapshot(&chat).await.ok()?;
        let runs = runs_of(&snapshot);
        (runs.len() == 2 && runs[1]["status"] == "running").then_some(())
    })
    .await?;
    chatd.restart().await?;
    let snapshot = settled(&client, &chat, "paused").await?;
    assert_eq!(snapshot["goal"]["paused_by"], "interrupted");
    let runs = runs_of(&snapshot);
    assert_eq!(runs.len(), 2, "no turn after the restart: {runs:?}");
    assert_eq!(runs[1]["status"], "interrupted");
    let events: Vec<String> = goal_lines(&snapshot).into_iter().map(|l| l.0).collect();
    assert_eq!(events, ["set", "continue", "paused"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_goals_are_refused_naming_the_field_and_only_a_persons_chat_has_one(
) -> anyhow::Result<()> {
    let (_sim, _chatd, client) = start(&[]).await?;
    let chat = client.create_chat().await?;
    let put = |body: Value| {
        let client = &client;
        let path = format!("/conversations/{chat}/goal");
        async move { client.call(reqwest::Method::PUT, &path, Some(body)).await }
    };
    let empty = put(json!({"text": "  "})).await?;
    assert_eq!(empty.status, 400, "{empty:?}");
    assert_eq!(empty.body["error"]["field"], "text", "{empty:?}");
    let long = put(json!({"text": "x".repeat(4001)})).await?;
    assert_eq!(long.status, 400);
    assert!(long.body["error"]["message"]
        .as_str()
        .unwrap_or("")
        .contains("4000"));
    let other = put(json!({"text": "ok", "turns": 5})).await?;
    assert_eq!(other.status, 400, "{other:?}");
    assert!(goal_of(&client, &chat).await?.is_null(), "nothing was kept");
    let none = client
        .call(
            reqwest::Method::DELETE,
            &format!("/conversations/{chat}/goal"),
            None,
        )
        .await?;
    assert_eq!(none.status, 404, "{none:?}");

    let made = client
        .post("/conversations", json!({"origin": "trigger"}))
        .await?;
    let theirs = made.body["id"].as_str().context("id")?;
    let refused = client
        .call(
            reqwest::Method::PUT,
            &format!("/conversations/{theirs}/goal"),
            Some(json!({"text": GOAL})),
        )
        .await?;
    assert_eq!(refused.status, 409, "{refused:?}");
    assert_eq!(refused.body["error"]["type"], "goal_not_allowed");
    Ok(())
}
