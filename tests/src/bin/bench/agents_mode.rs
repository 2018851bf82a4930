//! Figure 18f: Agents mode against the one loop, on a real chatd
//! (defaults) and engine-sim at tps=0, every answer scripted per session.
//! The same build both ways: `FILES` files of `FILE_CHARS` characters of
//! code written, then each read back as its check.
//!
//! - one loop: a chat in `auto` whose model writes the files one call a
//!   step, reads each back one call a step, then answers (17 requests).
//! - Agents mode: a chat in `auto` with `agents` on, whose main agent hands
//!   each file to a worker with `task` (a four-line brief), one task a
//!   step, then answers; each worker writes its file, reads it back and
//!   writes its report (3 requests), on its own session.
//!
//! Measured from the engine's request log: the prompt tokens of the chat's
//! last request (what a next turn starts from), the most of any request
//! of the turn, and the sum of every request's (what the engine reads when
//! nothing is cached); and the turn's time, send to `run.finished`.

use super::*;

use crate::subagents::{p50_p95, turn, Watch};

/// The build: files written and read back.
const FILES: usize = 8;
/// Characters a file holds (about 1,500 tokens of code).
const FILE_CHARS: usize = 6_000;

/// A file's text: lines of code, the file's number in each.
fn source(i: usize) -> String {
    let mut text = String::new();
    let mut n = 0;
    while text.len() < FILE_CHARS {
        text.push_str(&format!(
            "function part{i}_{n}(value) {{ return value * {n} + {i}; }} // step {n} of file {i}\n"
        ));
        n += 1;
    }
    text.truncate(FILE_CHARS);
    text
}

fn path(i: usize) -> String {
    format!("src/part{i}.js")
}

fn call(name: &str, arguments: Value) -> Value {
    json!({"tool_calls": [{"name": name, "arguments": arguments}]})
}

async fn queue(sim: &Sim, session: String, next: Vec<Value>) -> anyhow::Result<()> {
    sim.post("/sim/faults", json!({"session": session, "next": next}))
        .await?;
    Ok(())
}

/// The one loop's answers: every write, every read, then one token.
async fn script_loop(sim: &Sim, chat: &str) -> anyhow::Result<()> {
    let mut next: Vec<Value> = (0..FILES)
        .map(|i| call("write_file", json!({"path": path(i), "content": source(i)})))
        .collect();
    next.extend((0..FILES).map(|i| call("read_file", json!({"path": path(i)}))));
    next.push(json!({"tokens": 1}));
    queue(sim, format!("chat-{chat}"), next).await
}

/// Agents mode's answers: the main agent's tasks, and each worker's
/// write, read and report.
async fn script_agents(sim: &Sim, chat: &str) -> anyhow::Result<()> {
    let mut next: Vec<Value> = (0..FILES)
        .map(|i| {
            let brief = format!(
                "Goal: part {i} of the build\nFiles: {}\nConstraints: plain JavaScript\n\
                 Check: read the file back",
                path(i)
            );
            call(
                "task",
                json!({"title": format!("Part {i}"), "brief": brief, "expect": "the file and its check"}),
            )
        })
        .collect();
    next.push(json!({"tokens": 1}));
    queue(sim, format!("chat-{chat}"), next).await?;
    for i in 0..FILES {
        let report = format!(
            "## Report\nStatus: done\nSummary: wrote part {i}\nFiles: {}\nChecks:\n- read_file {}: \
             it reads back whole\nOpen: none",
            path(i),
            path(i)
        );
        let next = vec![
            call("write_file", json!({"path": path(i), "content": source(i)})),
            call("read_file", json!({"path": path(i)})),
            json!({"text": report}),
        ];
        queue(sim, format!("chat-{chat}-task-{}", i + 1), next).await?;
    }
    Ok(())
}

/// One turn's figures from the engine's log: the chat's last request's
/// prompt tokens, the most of any request, the sum, and the requests.
struct Tokens {
    last: i64,
    most: i64,
    sum: i64,
    requests: usize,
}

fn tokens_of(log: &[Value], chat: &str) -> Tokens {
    let own = format!("chat-{chat}");
    let of_turn: Vec<&Value> = log
        .iter()
        .filter(|r| {
            r["session_id"]
                .as_str()
                .is_some_and(|s| s == own || s.starts_with(&format!("{own}-task-")))
        })
        .collect();
    let count = |r: &Value| r["prompt_tokens"].as_i64().unwrap_or(0);
    Tokens {
        last: of_turn
            .iter()
            .filter(|r| r["session_id"] == own.as_str())
            .map(|r| count(r))
            .next_back()
            .unwrap_or(0),
        most: of_turn.iter().map(|r| count(r)).max().unwrap_or(0),
        sum: of_turn.iter().map(|r| count(r)).sum(),
        requests: of_turn.len(),
    }
}

pub(crate) async fn figure(quick: bool, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    say(format!(
        "\n## 18f. Agents mode against the one loop: a build of {FILES} files of {FILE_CHARS} characters written and read back"
    ));
    let rounds = if quick { 2 } else { 6 };
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start(&sim.url(), &[]).await?;
    let client = chatd.client();
    let (mut loop_took, mut agents_took) = (Vec::new(), Vec::new());
    let (mut loop_chats, mut agents_chats) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let chat = client.create_chat_in("auto").await?;
        script_loop(&sim, &chat).await?;
        let mut watch = Watch::open(&client, &chat).await?;
        loop_took.push(turn(&client, &mut watch, &chat).await?.took);
        loop_chats.push(chat);

        let made = client
            .post(
                "/conversations",
                json!({"permission_mode": "auto", "settings": {"agents": true}}),
            )
            .await?;
        anyhow::ensure!(made.status == 201, "an Agents-mode chat: {made:?}");
        let chat = made.body["id"].as_str().context("chat id")?.to_string();
        script_agents(&sim, &chat).await?;
        let mut watch = Watch::open(&client, &chat).await?;
        agents_took.push(turn(&client, &mut watch, &chat).await?.took);
        let tasks = client.get(&format!("/conversations/{chat}/tasks")).await?;
        let done = tasks.body["tasks"]
            .as_array()
            .map_or(0, |t| t.iter().filter(|t| t["state"] == "done").count());
        anyhow::ensure!(
            done == FILES,
            "{done} of {FILES} tasks done: {}",
            tasks.body
        );
        agents_chats.push(chat);
    }
    let log = sim.requests().await?;
    let (l, a) = (
        tokens_of(&log, &loop_chats[0]),
        tokens_of(&log, &agents_chats[0]),
    );
    anyhow::ensure!(
        l.requests == 2 * FILES + 1,
        "{} one-loop requests",
        l.requests
    );
    anyhow::ensure!(
        a.requests == FILES + 1 + 3 * FILES,
        "{} Agents-mode requests",
        a.requests
    );
    let (lp50, lp95) = p50_p95(loop_took);
    let (ap50, ap95) = p50_p95(agents_took);
    let ms = |us: i64| us as f64 / 1000.0;
    say(format!(
        "one loop: last request {} tokens, most {}, sum {} over {} requests; turn {:.1} ms p50 / {:.1} p95",
        l.last, l.most, l.sum, l.requests, ms(lp50), ms(lp95)
    ));
    say(format!(
        "Agents mode: main agent's last request {} tokens, most of any {}, sum {} over {} requests; turn {:.1} ms p50 / {:.1} p95",
        a.last, a.most, a.sum, a.requests, ms(ap50), ms(ap95)
    ));
    let ratio = |x: i64, y: i64| format!("{:.2}×", x as f64 / y.max(1) as f64);
    rows.push(
        row(
            "18f Agents mode: the chat's last request after the build",
            format!("{} tokens", a.last),
        )
        .aim("below the one loop's", a.last < l.last)
        .baseline(format!("one loop {} tokens", l.last), ratio(a.last, l.last)),
    );
    rows.push(
        row(
            "18f Agents mode: the largest request of the build",
            format!("{} tokens", a.most),
        )
        .baseline(format!("one loop {} tokens", l.most), ratio(a.most, l.most)),
    );
    rows.push(
        row(
            "18f Agents mode: prompt tokens the engine read, all requests",
            format!("{} over {} requests", a.sum, a.requests),
        )
        .baseline(
            format!("one loop {} over {}", l.sum, l.requests),
            ratio(a.sum, l.sum),
        ),
    );
    rows.push(
        row(
            "18f Agents mode: the build's turn, send to run.finished",
            format!("{:.1} ms p50 / {:.1} p95", ms(ap50), ms(ap95)),
        )
        .baseline(
            format!("one loop {:.1} ms p50", ms(lp50)),
            ratio(ap50, lp50),
        ),
    );
    Ok(())
}
