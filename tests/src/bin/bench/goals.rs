//! Figure 18g: a goal's turns against a person typing "continue", on a real
//! chatd (defaults) and engine-sim at tps=0, every answer one scripted
//! token. A goal of `TURNS` turns (its last calls goal_done) against a chat
//! whose client sends "continue" the moment it sees each run end. Measured
//! on one watching device, from its SSE events: the gap from a turn's
//! `run.finished` to the next turn's `run.started`, and the whole of the
//! turns, first `run.started` to last `run.finished`.

use super::*;

use crate::subagents::{p50_p95, Watch};

/// Turns of the goal (the default `goal_max_turns`), and quick's.
const TURNS: usize = 20;
const QUICK_TURNS: usize = 5;

fn is(kind: &'static str) -> impl Fn(&tandem_tests::harness::SseEvent) -> bool {
    move |e| e.kind == kind
}

/// The gaps (µs) between each `run.finished` and the next `run.started`,
/// and the whole (µs), over `turns` turns seen by `watch`.
async fn gaps(watch: &mut Watch, turns: usize) -> anyhow::Result<(Vec<i64>, i64)> {
    let mut started = Vec::with_capacity(turns);
    let mut finished = Vec::with_capacity(turns);
    for n in 1..=turns {
        started.push(watch.nth("a run's start", n, is("run.started")).await?);
        finished.push(watch.nth("a run's end", n, is("run.finished")).await?);
    }
    let gaps = (1..turns)
        .map(|k| {
            started[k]
                .saturating_duration_since(finished[k - 1])
                .as_micros() as i64
        })
        .collect();
    let whole = finished[turns - 1]
        .saturating_duration_since(started[0])
        .as_micros() as i64;
    Ok((gaps, whole))
}

pub(crate) async fn figure(quick: bool, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    say("\n## 18g. goals: the next turn of a goal against a person sending \"continue\" at once");
    let turns = if quick { QUICK_TURNS } else { TURNS };
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start(&sim.url(), &[]).await?;
    let client = chatd.client();

    // A person at the keyboard who types "continue" the moment a run ends.
    let chat = client.create_chat_in("auto").await?;
    let mut watch = Watch::open(&client, &chat).await?;
    for n in 1..=turns {
        client.send(&chat, "continue").await?;
        watch
            .nth("the person's run to end", n, is("run.finished"))
            .await?;
    }
    let (person, person_whole) = gaps(&mut watch, turns).await?;

    // The goal: plain turns, then goal_done with its words.
    let chat = client.create_chat_in("auto").await?;
    let mut next: Vec<Value> = (1..turns).map(|_| json!({"tokens": 1})).collect();
    next.push(json!({"tool_calls": [{"name": "goal_done",
        "arguments": {"summary": "done", "evidence": ["bench"]}}]}));
    next.push(json!({"tokens": 1}));
    sim.post(
        "/sim/faults",
        json!({"session": format!("chat-{chat}"), "next": next}),
    )
    .await?;
    let mut watch = Watch::open(&client, &chat).await?;
    let set = client
        .call(
            reqwest::Method::PUT,
            &format!("/conversations/{chat}/goal"),
            Some(json!({"text": "the bench's goal"})),
        )
        .await?;
    anyhow::ensure!(set.status == 200, "set the goal: {set:?}");
    let (goal, goal_whole) = gaps(&mut watch, turns).await?;
    let state = client.get(&format!("/conversations/{chat}/goal")).await?;
    anyhow::ensure!(
        state.body["goal"]["state"] == "done",
        "the goal did not end done: {}",
        state.body
    );

    let (g50, g95) = p50_p95(goal);
    let (p50, _) = p50_p95(person);
    let msf = |us: i64| us as f64 / 1000.0;
    say(format!(
        "goal: next turn {:.2} ms p50 / {:.2} p95, {turns} turns in {:.1} ms; \
         a person's continue: {:.2} ms p50, {turns} turns in {:.1} ms",
        msf(g50),
        msf(g95),
        msf(goal_whole),
        msf(p50),
        msf(person_whole)
    ));
    rows.push(
        row(
            "18g goals: run.finished to the next turn's run.started",
            format!("{:.2} ms p50 / {:.2} p95", msf(g50), msf(g95)),
        )
        .aim("below a person's instant continue", g50 < p50)
        .baseline(
            format!("continue sent on run.finished {:.2} ms p50", msf(p50)),
            format!("{:.2}×", g50 as f64 / p50.max(1) as f64),
        ),
    );
    rows.push(
        row(
            format!("18g goals: {turns} turns, first start to last end"),
            format!("{:.1} ms", msf(goal_whole)),
        )
        .baseline(
            format!("a person's continues {:.1} ms", msf(person_whole)),
            format!("{:.2}×", goal_whole as f64 / person_whole.max(1) as f64),
        ),
    );
    Ok(())
}
