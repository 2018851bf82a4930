//! Figure 18: sub-agents (`spawn_agent`), on a real chatd (default
//! `max_runs`, 2) and engine-sim at tps=0; each parent's answers scripted
//! per chat (`/sim/faults` with its session), each sub-agent's by the cue in
//! its task. Every time is taken in the bench when an event arrives on a
//! chat's event stream (read by a task of its own, stamped on receipt).
//!
//! - 18a: a turn whose one call is a foreground `spawn_agent` of a 5-token
//!   task, from the send to the parent's `run.finished`, against the same
//!   turn whose one call is `read_file` of a small file; each turn in a
//!   new chat, the two kinds taken in turn. The engine's request log splits
//!   the sub-agent's turn: the parent's first answer's end to the child's
//!   request, the child's answer, its end to the parent's next request.
//! - 18b: a background sub-agent's hand-back: the child's `run.finished`
//!   (on the child's own stream) to the parent's `message.created` of the
//!   result (card `sub_agent_result`) and to `sub_agent_done`; and the same
//!   in the stored stamps (the child's run's `ended` to the row's `ended`).
//! - 18c: 4 background sub-agents of a 200-token task at once against the
//!   same 4 as foreground calls one after another, from the send to the 4th
//!   `sub_agent_done` and to the parent idle; and the background 4 again on
//!   a chatd with `max_runs` 4, to show what limits them.
//! - memory (first, on the fresh chatd): its RSS before and after 100
//!   chats of one plain turn (the baseline), then 100 background
//!   sub-agents (25 chats of 4), all ended, then 100 more; and (not with
//!   `--quick`) after chatd's sweep a minute from its start, which lets go
//!   of the event rings of chats nobody watches, then 100 more.

use super::*;

use tandem_tests::harness::SseEvent;
use tokio::sync::mpsc;

const BOUND: Duration = Duration::from_secs(60);

/// A chat's event stream read by a task of its own, each event stamped
/// when it arrived.
pub(super) struct Watch {
    rx: mpsc::UnboundedReceiver<(Instant, SseEvent)>,
    seen: Vec<(Instant, SseEvent)>,
    task: tokio::task::JoinHandle<()>,
}

impl Watch {
    /// Attached once chatd has answered the stream's head.
    pub(super) async fn open(client: &Client, chat: &str) -> anyhow::Result<Watch> {
        let mut stream = client.events(chat, 0).await?;
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            while let Ok(Some(event)) = stream.next().await {
                if tx.send((Instant::now(), event)).is_err() {
                    break;
                }
            }
        });
        Ok(Watch {
            rx,
            seen: Vec::new(),
            task,
        })
    }

    /// Takes in whatever has arrived, without waiting.
    fn drain(&mut self) {
        while let Ok(got) = self.rx.try_recv() {
            self.seen.push(got);
        }
    }

    /// The first event (seen already or to come) that `hit` picks.
    pub(super) async fn until<F>(
        &mut self,
        what: &str,
        hit: F,
    ) -> anyhow::Result<(Instant, SseEvent)>
    where
        F: Fn(&SseEvent) -> bool,
    {
        self.drain();
        if let Some(found) = self.seen.iter().find(|(_, e)| hit(e)) {
            return Ok(found.clone());
        }
        let deadline = tokio::time::Instant::now() + BOUND;
        loop {
            let next = tokio::time::timeout_at(deadline, self.rx.recv())
                .await
                .map_err(|_| anyhow::anyhow!("timed out waiting for {what}"))?;
            let Some(got) = next else {
                bail!("the stream ended before {what}")
            };
            self.seen.push(got.clone());
            if hit(&got.1) {
                return Ok(got);
            }
        }
    }

    /// How many events `hit` picks, once `n` of them have arrived; the
    /// arrival of the n-th.
    pub(super) async fn nth<F>(&mut self, what: &str, n: usize, hit: F) -> anyhow::Result<Instant>
    where
        F: Fn(&SseEvent) -> bool,
    {
        let count = |seen: &[(Instant, SseEvent)]| seen.iter().filter(|(_, e)| hit(e)).count();
        self.drain();
        let deadline = tokio::time::Instant::now() + BOUND;
        while count(&self.seen) < n {
            let next = tokio::time::timeout_at(deadline, self.rx.recv())
                .await
                .map_err(|_| anyhow::anyhow!("timed out waiting for {what}"))?;
            let Some(got) = next else {
                bail!("the stream ended before {what}")
            };
            self.seen.push(got);
        }
        self.seen
            .iter()
            .filter(|(_, e)| hit(e))
            .nth(n - 1)
            .map(|(at, _)| *at)
            .context(what.to_string())
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub(super) fn us(d: Duration) -> i64 {
    d.as_micros() as i64
}

/// p50 and p95 of samples (µs).
pub(super) fn p50_p95(mut v: Vec<i64>) -> (i64, i64) {
    v.sort_unstable();
    (quantile(&v, 0.50), quantile(&v, 0.95))
}

fn spawn_call(task: &str, wait: bool) -> Value {
    json!({"name": "spawn_agent", "arguments": {"task": task, "wait": wait}})
}

/// The parent's answers: one step of `calls`, then `finals` answers of one
/// token (its last answer, and one for each run a result starts).
pub(super) async fn script(
    sim: &Sim,
    chat: &str,
    calls: Vec<Value>,
    finals: usize,
) -> anyhow::Result<()> {
    let mut next = vec![json!({"tool_calls": calls})];
    next.extend((0..finals).map(|_| json!({"tokens": 1})));
    sim.post(
        "/sim/faults",
        json!({"session": format!("chat-{chat}"), "next": next}),
    )
    .await?;
    Ok(())
}

/// A chat in `auto` (the calls run without a card), its workspace made
/// with a small file in it.
pub(super) async fn new_chat(client: &Client, chatd: &Chatd) -> anyhow::Result<String> {
    let chat = client.create_chat_in("auto").await?;
    let dir = chatd.data_dir().join("workspaces").join(&chat);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("small.txt"), "a small file\nof two lines\n")?;
    Ok(chat)
}

/// One turn's times: from the send to the run's `run.finished` (µs), and
/// the send and that arrival on the simulator's clock (unix µs).
pub(super) struct Turn {
    pub(super) took: i64,
    pub(super) sent_us: i64,
    pub(super) finished_us: i64,
    run: String,
}

/// Sends "go" and waits for that run's `run.finished` (it must be done).
pub(super) async fn turn(client: &Client, watch: &mut Watch, chat: &str) -> anyhow::Result<Turn> {
    let sent_us = now_micros();
    let sent_at = Instant::now();
    let run = tandem_tests::harness::run_id(&client.send(chat, "go").await?)?;
    let (at, finished) = watch
        .until("the turn's run.finished", |e| {
            e.kind == "run.finished" && e.data["run_id"] == run.as_str()
        })
        .await?;
    anyhow::ensure!(
        finished.data["status"] == "done",
        "the run ended {}",
        finished.data
    );
    let took = us(at - sent_at);
    Ok(Turn {
        took,
        sent_us,
        finished_us: sent_us + took,
        run,
    })
}

pub(crate) async fn figure(quick: bool, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    say(
        "\n## 18. sub-agents: a foreground spawn_agent turn against read_file, a background hand-back, 4 at once against one after another, chatd's memory per sub-agent",
    );
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start(&sim.url(), &[]).await?;
    let up = Instant::now();
    let client = chatd.client();
    // Memory first, on a chatd that has done nothing else yet.
    let mut memory = Memory::measure(&sim, &chatd, &client, quick).await?;
    foreground(&sim, &chatd, &client, quick, rows).await?;
    hand_back(&sim, &chatd, &client, quick, rows).await?;
    let fg = at_once(&sim, &chatd, &client, quick, 2, None, rows).await?;
    {
        // The background 4 again with an engine slot for each, on a chatd
        // of its own, while the first one waits for its minute's sweep.
        let chatd = Chatd::start(&sim.url(), &[("QSE_CHAT_MAX_RUNS", "4")]).await?;
        let client = chatd.client();
        at_once(&sim, &chatd, &client, quick, 4, Some(fg), rows).await?;
    }
    if quick {
        say("memory after chatd's minute's sweep: skipped by --quick");
    } else {
        memory.after_sweep(&sim, &chatd, &client, up).await?;
    }
    memory.report(rows);
    Ok(())
}

/// 18a.
async fn foreground(
    sim: &Sim,
    chatd: &Chatd,
    client: &Client,
    quick: bool,
    rows: &mut Vec<Row>,
) -> anyhow::Result<()> {
    let (warm, n) = if quick { (2, 5) } else { (5, 40) };
    let http = reqwest::Client::new();
    http.delete(format!("{}/sim/requests", sim.url()))
        .send()
        .await?;
    let (mut spawned, mut read) = (Vec::new(), Vec::new());
    // Per sub-agent turn: the parent's and the child's sessions.
    let mut sessions = Vec::new();
    let mut read_chats = Vec::new();
    for k in 0..warm + n {
        let chat = new_chat(client, chatd).await?;
        let task = format!("Part 1 #{k}\n[sim tokens=5]");
        script(sim, &chat, vec![spawn_call(&task, true)], 1).await?;
        let mut watch = Watch::open(client, &chat).await?;
        let spun = turn(client, &mut watch, &chat).await?;
        let (_, started) = watch
            .until("sub_agent_started", |e| e.kind == "sub_agent_started")
            .await?;
        let sub = started.data["subagent_id"]
            .as_str()
            .context("subagent_id")?
            .to_string();
        let results = tandem_tests::harness::tool_results(&client.snapshot(&chat).await?);
        anyhow::ensure!(
            results.len() == 1 && results[0].contains(tandem_tests::harness::sim_answer(5).trim()),
            "the call's result is not the sub-agent's answer: {results:?}"
        );

        let plain = new_chat(client, chatd).await?;
        let read_call = json!({"name": "read_file", "arguments": {"path": "small.txt"}});
        script(sim, &plain, vec![read_call], 1).await?;
        let mut watch = Watch::open(client, &plain).await?;
        let plain_turn = turn(client, &mut watch, &plain).await?;
        let results = tandem_tests::harness::tool_results(&client.snapshot(&plain).await?);
        anyhow::ensure!(
            results.len() == 1 && results[0].contains("of two lines"),
            "read_file answered {results:?}"
        );
        if k >= warm {
            spawned.push(spun.took);
            read.push(plain_turn.took);
            sessions.push((format!("chat-{chat}"), format!("chat-{sub}"), spun));
            read_chats.push((format!("chat-{plain}"), plain_turn));
        }
    }
    // The engine's log: where the sub-agent's turn goes.
    let log: Vec<Value> = http
        .get(format!("{}/sim/requests", sim.url()))
        .send()
        .await?
        .json()
        .await?;
    let of = |session: &str| -> Vec<(i64, i64)> {
        log.iter()
            .filter(|r| r["session_id"] == session)
            .map(|r| {
                (
                    r["at_us"].as_i64().unwrap_or(0),
                    r["done_us"].as_i64().unwrap_or(0),
                )
            })
            .collect()
    };
    let (mut before, mut child, mut after, mut read_gap) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // Outside the steps: the send to the first request, the last answer's
    // end to run.finished.
    let (mut ends, mut read_ends) = (Vec::new(), Vec::new());
    for (parent, sub, t) in &sessions {
        let (p, c) = (of(parent), of(sub));
        anyhow::ensure!(
            p.len() == 2 && c.len() == 1,
            "{} parent and {} child requests",
            p.len(),
            c.len()
        );
        before.push(c[0].0 - p[0].1);
        child.push(c[0].1 - c[0].0);
        after.push(p[1].0 - c[0].1);
        ends.push((p[0].0 - t.sent_us) + (t.finished_us - p[1].1));
    }
    for (plain, t) in &read_chats {
        let p = of(plain);
        anyhow::ensure!(p.len() == 2, "{} requests", p.len());
        read_gap.push(p[1].0 - p[0].1);
        read_ends.push((p[0].0 - t.sent_us) + (t.finished_us - p[1].1));
    }
    let (s50, s95) = p50_p95(spawned);
    let (r50, r95) = p50_p95(read);
    let (b50, _) = p50_p95(before);
    let (c50, _) = p50_p95(child);
    let (a50, _) = p50_p95(after);
    let (g50, g95) = p50_p95(read_gap);
    let (e50, _) = p50_p95(ends);
    let (re50, _) = p50_p95(read_ends);
    say(format!(
        "18a, {n} turns each (after {warm} warm-up): spawn_agent (wait) of a 5-token task, send to run done: p50 {} p95 {}; read_file of a small file: p50 {} p95 {}",
        ms(s50),
        ms(s95),
        ms(r50),
        ms(r95)
    ));
    say(format!(
        "    in the engine's log, medians: the parent's answer's end to the sub-agent's request {}, its answer {}, its end to the parent's next request {}, outside the steps (send to the first request, the last answer to run.finished) {}; read_file: the answer's end to the next request {} (p95 {}), outside the steps {}",
        ms(b50),
        ms(c50),
        ms(a50),
        ms(e50),
        ms(g50),
        ms(g95),
        ms(re50)
    ));
    rows.push(
        row(
            format!("18a. a turn whose one call is a foreground spawn_agent (5-token task), send to run done ({n} turns)"),
            format!("p50 {} / p95 {}", ms(s50), ms(s95)),
        )
        .baseline(
            format!("the same turn with read_file {} / {}", ms(r50), ms(r95)),
            format!(
                "+{} p50 ({:.2}×)",
                ms(s50 - r50),
                s50 as f64 / r50.max(1) as f64
            ),
        ),
    );
    Ok(())
}

/// 18b.
async fn hand_back(
    sim: &Sim,
    chatd: &Chatd,
    client: &Client,
    quick: bool,
    rows: &mut Vec<Row>,
) -> anyhow::Result<()> {
    let (warm, n) = if quick { (1, 5) } else { (3, 30) };
    let (mut to_message, mut to_done, mut stored) = (Vec::new(), Vec::new(), Vec::new());
    let mut k = 0;
    let mut replayed = 0;
    while to_message.len() < n {
        k += 1;
        anyhow::ensure!(
            k < 3 * (warm + n),
            "too few samples: {replayed} ended before the bench attached"
        );
        let chat = new_chat(client, chatd).await?;
        // Long enough to start that the bench is attached to it before it ends.
        let task = format!("Part 2 #{k}\n[sim tokens=5 first_token_ms=150]");
        script(sim, &chat, vec![spawn_call(&task, false)], 2).await?;
        let mut parent = Watch::open(client, &chat).await?;
        let first = turn(client, &mut parent, &chat).await?.run;
        let (_, started) = parent
            .until("sub_agent_started", |e| e.kind == "sub_agent_started")
            .await?;
        let sub = started.data["subagent_id"]
            .as_str()
            .context("subagent_id")?
            .to_string();
        let mut child = Watch::open(client, &sub).await?;
        let attached = Instant::now();
        let (ended_at, finished) = child
            .until("the sub-agent's run.finished", |e| e.kind == "run.finished")
            .await?;
        anyhow::ensure!(finished.data["status"] == "done", "{}", finished.data);
        let s = sub.clone();
        let (message_at, _) = parent
            .until("the result's message.created", |e| {
                e.kind == "message.created"
                    && e.data["message"]["card"]["kind"] == "sub_agent_result"
                    && e.data["message"]["card"]["subagent_id"] == s.as_str()
            })
            .await?;
        let (done_at, done) = parent
            .until("sub_agent_done", |e| {
                e.kind == "sub_agent_done" && e.data["subagent_id"] == s.as_str()
            })
            .await?;
        anyhow::ensure!(
            done.data["message_id"].is_string(),
            "the result did not come as a message: {}",
            done.data
        );
        // The run the result started ends before the next sample.
        parent
            .until("the result's run to end", |e| {
                e.kind == "run.finished" && e.data["run_id"] != first.as_str()
            })
            .await?;
        if k <= warm {
            continue;
        }
        // An end seen in the replay of the stream's backlog is not timed.
        if ended_at - attached < Duration::from_millis(50) {
            replayed += 1;
            continue;
        }
        to_message.push(us(message_at - ended_at));
        to_done.push(us(done_at - ended_at));
        // The same in the stored stamps (milliseconds).
        let row = client
            .get(&format!("/conversations/{chat}/subagents"))
            .await?
            .body["subagents"][0]
            .clone();
        let own = client.snapshot(&sub).await?;
        let run_end = own["runs"][0]["ended"].as_str().unwrap_or("").to_string();
        let row_end = row["ended"].as_str().unwrap_or("").to_string();
        if let (Ok(a), Ok(b)) = (
            run_end.parse::<jiff::Timestamp>(),
            row_end.parse::<jiff::Timestamp>(),
        ) {
            stored.push(b.as_microsecond() - a.as_microsecond());
        }
    }
    let (m50, m95) = p50_p95(to_message);
    let (d50, d95) = p50_p95(to_done);
    let (st50, st95) = p50_p95(stored);
    say(format!(
        "18b, {n} background sub-agents (5 tokens, first token after 150 ms): the child's run.finished to the parent's message.created: p50 {} p95 {}; to sub_agent_done: p50 {} p95 {}; stored (the child's run ended to the row's ended, ms stamps): p50 {} p95 {}{}",
        ms(m50),
        ms(m95),
        ms(d50),
        ms(d95),
        ms(st50),
        ms(st95),
        if replayed > 0 {
            format!(" ({replayed} ended before the bench attached, not timed)")
        } else {
            String::new()
        }
    ));
    rows.push(
        row(
            format!("18b. a background sub-agent's hand-back: its run.finished to the parent's result message.created ({n})"),
            format!("p50 {} / p95 {}", ms(m50), ms(m95)),
        )
        .baseline(
            format!("to sub_agent_done {} / {}; stored stamps {} / {}", ms(d50), ms(d95), ms(st50), ms(st95)),
            "—",
        ),
    );
    Ok(())
}

/// The wall times of one way of running the 4: to the 4th result handed
/// back and to the parent idle (µs).
struct Four {
    results: i64,
    idle: i64,
}

/// 4 sub-agents of a 200-token task: in the background at once, or one
/// after another in the foreground.
async fn four(
    sim: &Sim,
    chatd: &Chatd,
    client: &Client,
    tag: &str,
    tps: u32,
    background: bool,
) -> anyhow::Result<Four> {
    let chat = new_chat(client, chatd).await?;
    let calls = (0..4)
        .map(|i| {
            spawn_call(
                &format!("Part 3 {tag} #{i}\n[sim tokens=200 tps={tps}]"),
                !background,
            )
        })
        .collect();
    // Each background result may start a run of the parent.
    script(sim, &chat, calls, if background { 5 } else { 1 }).await?;
    let mut watch = Watch::open(client, &chat).await?;
    let sent_at = Instant::now();
    client.send(&chat, "go").await?;
    let fourth = watch
        .nth("the 4th sub_agent_done", 4, |e| e.kind == "sub_agent_done")
        .await?;
    // Idle: no run queued or going, nothing pending; the last run.finished.
    tandem_tests::harness::wait_until("the parent to be idle", BOUND, || async {
        let snapshot = client.snapshot(&chat).await.ok()?;
        let runs = snapshot["runs"].as_array()?;
        let idle = runs
            .iter()
            .all(|r| !matches!(r["status"].as_str(), Some("queued" | "running" | "waiting")))
            && snapshot["pending"].as_array().is_some_and(Vec::is_empty);
        idle.then_some(())
    })
    .await?;
    // Every run.finished chatd wrote before the snapshot has arrived.
    let seq = client.snapshot(&chat).await?["seq"].as_i64().unwrap_or(0);
    watch
        .until("the snapshot's last event", |e| {
            e.seq.is_some_and(|s| s >= seq)
        })
        .await?;
    let last = watch
        .seen
        .iter()
        .filter(|(_, e)| e.kind == "run.finished")
        .map(|(at, _)| *at)
        .max()
        .context("no run.finished")?;
    let list = client
        .get(&format!("/conversations/{chat}/subagents"))
        .await?
        .body;
    let states: Vec<&str> = list["subagents"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["state"].as_str())
        .collect();
    anyhow::ensure!(states == ["done"; 4], "the 4 ended {states:?}");
    Ok(Four {
        results: us(fourth - sent_at),
        idle: us(last.max(fourth) - sent_at),
    })
}

/// 18c with `max_runs` engine slots: the foreground 4 (measured here when
/// `fg` is `None`) and the background 4; answers the foreground's times.
async fn at_once(
    sim: &Sim,
    chatd: &Chatd,
    client: &Client,
    quick: bool,
    max_runs: u32,
    fg: Option<(i64, i64)>,
    rows: &mut Vec<Row>,
) -> anyhow::Result<(i64, i64)> {
    let tps = if quick { 800 } else { 200 };
    let answer_ms = 200 * 1000 / tps;
    let tag = format!("m{max_runs}");
    let back = four(sim, chatd, client, &tag, tps, true).await?;
    let fg = match fg {
        Some(fg) => fg,
        None => {
            let f = four(sim, chatd, client, &tag, tps, false).await?;
            (f.results, f.idle)
        }
    };
    say(format!(
        "18c, max_runs {max_runs}: 4 sub-agents of 200 tokens at {tps} tokens/s ({answer_ms} ms each): in the background at once, to the 4th result handed back {} (the parent idle {}); in the foreground one after another {} (idle {}): {:.2}×",
        ms(back.results),
        ms(back.idle),
        ms(fg.0),
        ms(fg.1),
        back.results as f64 / fg.0.max(1) as f64
    ));
    let label = if max_runs == 2 {
        "chatd's default max_runs 2".to_string()
    } else {
        format!("max_runs {max_runs}")
    };
    rows.push(
        row(
            format!("18c. 4 background sub-agents of 200 tokens ({answer_ms} ms each) at once, send to the 4th result back ({label})"),
            format!("{} (parent idle {})", ms(back.results), ms(back.idle)),
        )
        .baseline(
            format!("4 foreground one after another {} (idle {})", ms(fg.0), ms(fg.1)),
            format!("{:.2}×", back.results as f64 / fg.0.max(1) as f64),
        ),
    );
    Ok(fg)
}

/// chatd's RSS (KiB) around batches of chats and of sub-agents.
struct Memory {
    n: usize,
    pid: u32,
    /// Before anything measured (a small batch of each done).
    start: u64,
    /// After `n` chats of one plain turn (the baseline).
    plain: u64,
    /// After `n` background sub-agents, ended.
    first: u64,
    /// After `n` more.
    second: u64,
    /// After chatd's minute's sweep of idle event rings, and after `n`
    /// more sub-agents then.
    swept: Option<(u64, u64)>,
}

impl Memory {
    async fn measure(
        sim: &Sim,
        chatd: &Chatd,
        client: &Client,
        quick: bool,
    ) -> anyhow::Result<Memory> {
        let n = if quick { 20 } else { 100 };
        let pid = chatd.pid().context("chatd's pid")?;
        // One small batch of each first, to warm what any batch warms.
        plain_chats(chatd, client, 8).await?;
        batch(sim, chatd, client, "warm", 8).await?;
        let start = settled_rss(pid).await;
        plain_chats(chatd, client, n).await?;
        let plain = settled_rss(pid).await;
        batch(sim, chatd, client, "a", n).await?;
        let first = settled_rss(pid).await;
        batch(sim, chatd, client, "b", n).await?;
        let second = settled_rss(pid).await;
        Ok(Memory {
            n,
            pid,
            start,
            plain,
            first,
            second,
            swept: None,
        })
    }

    /// Waits for the sweep chatd makes each minute from its start (event
    /// rings of chats nobody watches let go), then `n` more sub-agents.
    async fn after_sweep(
        &mut self,
        sim: &Sim,
        chatd: &Chatd,
        client: &Client,
        up: Instant,
    ) -> anyhow::Result<()> {
        let swept_by = up + Duration::from_secs(62);
        let now = Instant::now();
        if swept_by > now {
            say(format!(
                "memory: waiting {:.0} s for chatd's minute's sweep",
                (swept_by - now).as_secs_f64()
            ));
            tokio::time::sleep(swept_by - now).await;
        }
        let swept = settled_rss(self.pid).await;
        batch(sim, chatd, client, "c", self.n).await?;
        let then = settled_rss(self.pid).await;
        self.swept = Some((swept, then));
        Ok(())
    }

    fn report(&self, rows: &mut Vec<Row>) {
        let n = self.n;
        let per = |a: u64, b: u64| (b as f64 - a as f64) / n as f64;
        let swept = self.swept.map(|(s, t)| {
            format!(
                "; after the minute's sweep {}, {} after {n} more ({:+.1} KiB each)",
                mib(s),
                mib(t),
                per(s, t)
            )
        });
        say(format!(
            "memory: chatd's RSS {}, {} after {n} chats of one plain turn ({:+.1} KiB each), {} after {n} background sub-agents ended ({} chats of 4; {:+.1} KiB each), {} after {n} more ({:+.1} KiB each){}",
            mib(self.start),
            mib(self.plain),
            per(self.start, self.plain),
            mib(self.first),
            n.div_ceil(4),
            per(self.plain, self.first),
            mib(self.second),
            per(self.first, self.second),
            swept.clone().unwrap_or_default()
        ));
        rows.push(
            row(
                format!("18. chatd's RSS before and after {n} background sub-agents, ended, then {n} more"),
                format!(
                    "{} → {} → {} ({:+.1} / {:+.1} KiB per sub-agent){}",
                    mib(self.plain),
                    mib(self.first),
                    mib(self.second),
                    per(self.plain, self.first),
                    per(self.first, self.second),
                    swept.unwrap_or_default()
                ),
            )
            .baseline(
                format!("{n} chats of one plain turn before them: {} → {}", mib(self.start), mib(self.plain)),
                format!("{:+.1} KiB per chat", per(self.start, self.plain)),
            ),
        );
    }
}

/// chatd's RSS once its last writes have settled.
async fn settled_rss(pid: u32) -> u64 {
    tokio::time::sleep(Duration::from_millis(500)).await;
    rss_kib(pid).unwrap_or(0)
}

/// `n` new chats, each with one plain 5-token turn, sent at once.
async fn plain_chats(chatd: &Chatd, client: &Client, n: usize) -> anyhow::Result<()> {
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        ids.push(new_chat(client, chatd).await?);
    }
    let sends = ids
        .iter()
        .map(|chat| client.send(chat, "hello [sim tokens=5]"));
    let mut runs = Vec::with_capacity(n);
    for sent in join_all(sends).await {
        runs.push(tandem_tests::harness::run_id(&sent?)?);
    }
    for (chat, run) in ids.iter().zip(&runs) {
        client.wait_run(chat, run, &["done"], BOUND).await?;
    }
    Ok(())
}

/// `n` background sub-agents of a 5-token task, 4 to a chat, all sent at
/// once; returns once all ended and every parent is idle.
async fn batch(
    sim: &Sim,
    chatd: &Chatd,
    client: &Client,
    tag: &str,
    n: usize,
) -> anyhow::Result<()> {
    let chats = n.div_ceil(4);
    let mut ids = Vec::with_capacity(chats);
    for c in 0..chats {
        let chat = new_chat(client, chatd).await?;
        let here = (n - 4 * c).min(4);
        let calls = (0..here)
            .map(|i| spawn_call(&format!("Part 4 {tag} {c}.{i}\n[sim tokens=5]"), false))
            .collect();
        script(sim, &chat, calls, here + 1).await?;
        ids.push((chat, here));
    }
    let sends = ids.iter().map(|(chat, _)| client.send(chat, "go"));
    for sent in join_all(sends).await {
        sent?;
    }
    for (chat, here) in &ids {
        tandem_tests::harness::wait_until("the chat's sub-agents to end", BOUND, || async {
            let list = client
                .get(&format!("/conversations/{chat}/subagents"))
                .await
                .ok()?
                .body;
            let rows = list["subagents"].as_array()?;
            let ended = rows.len() == *here && rows.iter().all(|r| r["state"] == "done");
            if !ended {
                return None;
            }
            let snapshot = client.snapshot(chat).await.ok()?;
            let idle =
                snapshot["runs"].as_array()?.iter().all(|r| {
                    !matches!(r["status"].as_str(), Some("queued" | "running" | "waiting"))
                }) && snapshot["pending"].as_array().is_some_and(Vec::is_empty);
            idle.then_some(())
        })
        .await?;
    }
    Ok(())
}
