//! Figure 18d: saved agents as sub-agents, on a real chatd (defaults) and
//! engine-sim at tps=0; each parent's answers scripted per chat
//! (`/sim/faults` with its session), each sub-agent's by the cue in its
//! task. Every chat is new, in `auto`, with the opt-in `saved_agents`
//! switched on (`PUT …/builtins`), the baselines' chats too, so the two
//! kinds differ only in the call. Times are taken in the bench when the
//! run's `run.finished` arrives on the chat's event stream (read by a task
//! of its own, stamped on receipt).
//!
//! - as an agent: a turn whose one call is a foreground `spawn_agent` of a
//!   5-token task as a saved agent (granting read_file and grep, 2,000
//!   characters of instructions), send to the parent's `run.finished`,
//!   against the same turn with a plain foreground `spawn_agent` (no
//!   agent); the two kinds taken in turn. The engine's request log splits
//!   each: the parent's first answer's end to the sub-agent's request, its
//!   answer, its end to the parent's next request; and the sub-agent's
//!   request's size.
//! - list_agents: with 100 saved agents of a 1,000-character description,
//!   the result as stored in the chat (the tool message's text: characters,
//!   characters/4 as tokens) and as the engine got it in the next request,
//!   and the turn's time against a turn whose one call is `read_file` of a
//!   small file; on engine-sim's default window (32,768 tokens, where the
//!   result takes the request over chatd's compaction line) and on one of
//!   131,072 tokens (where it goes to the model whole). A request between
//!   the call's and the next step's that offers no tools is a compaction's.

use super::*;

use tandem_tests::harness::{offered_tools, sim_answer, system_text, tool_results};

use crate::subagents::{self, p50_p95, turn, Turn, Watch};

/// The saved agent of the first part.
const AGENT: &str = "Counter";
/// In its instructions: the sub-agent's system block shows they reached it.
const MARK: &str = "MARK-18D-COUNTER";
/// chatd's most characters for one tool result (`context::MAX_RESULT_CHARS`).
const RESULT_CAP: usize = 64_000;

fn p50(v: Vec<i64>) -> i64 {
    p50_p95(v).0
}

/// The parent's answers: one step of `calls`, then its one-token answer.
async fn script(sim: &Sim, chat: &str, calls: Vec<Value>) -> anyhow::Result<()> {
    subagents::script(sim, chat, calls, 1).await
}

/// Figure 18's chat (in `auto`, a small file in its workspace) with saved
/// agents switched on.
async fn new_chat(client: &Client, chatd: &Chatd) -> anyhow::Result<String> {
    let chat = subagents::new_chat(client, chatd).await?;
    let on = client
        .call(
            reqwest::Method::PUT,
            &format!("/conversations/{chat}/builtins"),
            Some(json!({"on": ["saved_agents"]})),
        )
        .await?;
    anyhow::ensure!(on.status == 200, "switching saved agents on: {on:?}");
    Ok(chat)
}

/// A new chat whose one call is `call`, its turn taken: the chat and its
/// time. `sub`: the call starts a sub-agent; its id is answered too.
async fn one_call(
    sim: &Sim,
    chatd: &Chatd,
    client: &Client,
    call: Value,
    sub: bool,
) -> anyhow::Result<(String, Turn, Option<String>)> {
    let chat = new_chat(client, chatd).await?;
    script(sim, &chat, vec![call]).await?;
    let mut watch = Watch::open(client, &chat).await?;
    let took = turn(client, &mut watch, &chat).await?;
    let sub_id = if sub {
        let (_, started) = watch
            .until("sub_agent_started", |e| e.kind == "sub_agent_started")
            .await?;
        Some(
            started.data["subagent_id"]
                .as_str()
                .context("subagent_id")?
                .to_string(),
        )
    } else {
        None
    };
    Ok((chat, took, sub_id))
}

/// The engine's request log: a session's requests as (arrived, answered
/// its last byte, body bytes, body), unix µs.
struct Log(Vec<Value>);

impl Log {
    async fn take(sim: &Sim) -> anyhow::Result<Log> {
        Ok(Log(sim.requests().await?))
    }

    fn of(&self, chat: &str) -> Vec<(i64, i64, i64, &Value)> {
        let session = format!("chat-{chat}");
        self.0
            .iter()
            .filter(|r| r["session_id"] == session.as_str())
            .map(|r| {
                (
                    r["at_us"].as_i64().unwrap_or(0),
                    r["done_us"].as_i64().unwrap_or(0),
                    r["body_bytes"].as_i64().unwrap_or(0),
                    &r["body"],
                )
            })
            .collect()
    }
}

async fn clear_log(sim: &Sim) -> anyhow::Result<()> {
    let answer = reqwest::Client::new()
        .delete(format!("{}/sim/requests", sim.url()))
        .send()
        .await?;
    anyhow::ensure!(answer.status().is_success(), "clearing the sim's log");
    Ok(())
}

pub(crate) async fn figure(quick: bool, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    say(
        "\n## 18d. saved agents as sub-agents: a foreground spawn_agent as a saved agent against a plain one, list_agents of 100 agents against read_file",
    );
    let (warm, n) = if quick { (2, 10) } else { (5, 30) };
    {
        let sim = Sim::start(&["--tokens-per-second", "0"])?;
        let chatd = Chatd::start(&sim.url(), &[]).await?;
        let client = chatd.client();
        as_agent(&sim, &chatd, &client, warm, n, rows).await?;
    }
    // On a chatd of its own: the part-1 agent would be the 101st of 100 kept.
    let small = {
        let sim = Sim::start(&["--tokens-per-second", "0"])?;
        let chatd = Chatd::start(&sim.url(), &[]).await?;
        let client = chatd.client();
        make_agents(&client).await?;
        listing(&sim, &chatd, &client, warm, n).await?
    };
    // The same on an engine whose window holds the list.
    let sim = Sim::start(&["--tokens-per-second", "0", "--context-window", "131072"])?;
    let chatd = Chatd::start(&sim.url(), &[]).await?;
    let client = chatd.client();
    make_agents(&client).await?;
    let big = listing(&sim, &chatd, &client, warm, n).await?;
    report_listing(n, warm, &small, &big, rows);
    Ok(())
}

/// Where a foreground sub-agent's turn goes in the engine's log (µs): the
/// parent's answer's end to the sub-agent's request, its answer, its end
/// to the parent's next request, outside the steps; the sub-agent's
/// request's bytes.
#[derive(Default)]
struct Split {
    before: Vec<i64>,
    child: Vec<i64>,
    after: Vec<i64>,
    outside: Vec<i64>,
    child_bytes: Vec<i64>,
}

impl Split {
    /// One turn's; answers the sub-agent's request's body.
    fn add<'a>(
        &mut self,
        log: &'a Log,
        parent: &str,
        sub: &str,
        t: &Turn,
    ) -> anyhow::Result<&'a Value> {
        let (p, c) = (log.of(parent), log.of(sub));
        anyhow::ensure!(
            p.len() == 2 && c.len() == 1,
            "{} parent and {} sub-agent requests",
            p.len(),
            c.len()
        );
        self.before.push(c[0].0 - p[0].1);
        self.child.push(c[0].1 - c[0].0);
        self.after.push(p[1].0 - c[0].1);
        self.outside
            .push((p[0].0 - t.sent_us) + (t.finished_us - p[1].1));
        self.child_bytes.push(c[0].2);
        Ok(c[0].3)
    }

    fn line(self) -> String {
        format!(
            "the parent's answer to the sub-agent's request {}, its answer {}, its end to the parent's next request {}, outside the steps {}; the sub-agent's request {} bytes",
            ms(p50(self.before)),
            ms(p50(self.child)),
            ms(p50(self.after)),
            ms(p50(self.outside)),
            p50(self.child_bytes)
        )
    }
}

/// Part 1: a foreground spawn_agent as a saved agent against a plain one.
/// Answers the agent's id.
async fn as_agent(
    sim: &Sim,
    chatd: &Chatd,
    client: &Client,
    warm: usize,
    n: usize,
    rows: &mut Vec<Row>,
) -> anyhow::Result<String> {
    let mut instructions = format!("You are {AGENT}, {MARK}. ");
    while instructions.chars().count() < 2_000 {
        instructions.push_str(
            "Count what you are asked to count, carefully, and answer with the number alone. ",
        );
    }
    let instructions: String = instructions.chars().take(2_000).collect();
    let made = client
        .post(
            "/agents",
            json!({"name": AGENT, "description": "Counts things",
                   "instructions": instructions, "tools": ["read_file", "grep"]}),
        )
        .await?;
    anyhow::ensure!(made.status == 201, "making the agent: {made:?}");
    let agent = made.body["id"].as_str().context("agent id")?.to_string();

    clear_log(sim).await?;
    let task = "Count it\n[sim tokens=5]";
    let (mut saved, mut plain) = (Vec::new(), Vec::new());
    let (mut saved_turns, mut plain_turns) = (Vec::new(), Vec::new());
    for k in 0..warm + n {
        let call = json!({"name": "spawn_agent", "arguments": {"task": task, "agent": AGENT, "wait": true}});
        let (chat, t, sub) = one_call(sim, chatd, client, call, true).await?;
        let results = tool_results(&client.snapshot(&chat).await?);
        anyhow::ensure!(
            results.len() == 1 && results[0].contains(sim_answer(5).trim()),
            "the call's result is not the saved agent's answer: {results:?}"
        );
        let sub = sub.context("the sub-agent")?;
        let row = &client
            .get(&format!("/conversations/{chat}/subagents"))
            .await?
            .body["subagents"][0];
        anyhow::ensure!(
            row["agent_id"] == agent.as_str(),
            "the sub-agent ran as no saved agent: {row}"
        );

        let call = json!({"name": "spawn_agent", "arguments": {"task": task, "wait": true}});
        let (plain_chat, plain_t, plain_sub) = one_call(sim, chatd, client, call, true).await?;
        let results = tool_results(&client.snapshot(&plain_chat).await?);
        anyhow::ensure!(
            results.len() == 1 && results[0].contains(sim_answer(5).trim()),
            "the call's result is not the sub-agent's answer: {results:?}"
        );
        if k >= warm {
            saved.push(t.took);
            plain.push(plain_t.took);
            saved_turns.push((chat, sub, t));
            plain_turns.push((plain_chat, plain_sub.context("the sub-agent")?, plain_t));
        }
    }
    let log = Log::take(sim).await?;
    let (mut saved_split, mut plain_split) = (Split::default(), Split::default());
    let mut saved_tools = Vec::new();
    for (chat, sub, t) in &saved_turns {
        let body = saved_split.add(&log, chat, sub, t)?;
        anyhow::ensure!(
            system_text(body).contains(MARK),
            "the agent's instructions are not in the sub-agent's system block"
        );
        saved_tools = offered_tools(body);
        anyhow::ensure!(
            saved_tools.iter().all(|t| t == "read_file" || t == "grep"),
            "the saved agent was offered {saved_tools:?}"
        );
    }
    let mut plain_tools = 0;
    for (chat, sub, t) in &plain_turns {
        let body = plain_split.add(&log, chat, sub, t)?;
        anyhow::ensure!(
            !system_text(body).contains(MARK),
            "a plain sub-agent has the agent's instructions"
        );
        plain_tools = offered_tools(body).len();
    }
    let (s50, s95) = p50_p95(saved);
    let (b50, b95) = p50_p95(plain);
    say(format!(
        "18d, {n} turns each (after {warm} warm-up): spawn_agent (wait) of a 5-token task as the saved agent {AGENT} (read_file and grep, 2,000 characters of instructions), send to run done: p50 {} p95 {}; the same plain (no agent): p50 {} p95 {}",
        ms(s50),
        ms(s95),
        ms(b50),
        ms(b95)
    ));
    say(format!(
        "    in the engine's log, medians: as the agent (offered {saved_tools:?}): {}",
        saved_split.line()
    ));
    say(format!(
        "    plain (offered {plain_tools} tools): {}",
        plain_split.line()
    ));
    rows.push(
        row(
            format!("18d. a turn whose one call is a foreground spawn_agent (5-token task) as a saved agent (read_file + grep, 2,000-character instructions), send to run done ({n} turns)"),
            format!("p50 {} / p95 {}", ms(s50), ms(s95)),
        )
        .baseline(
            format!("the same turn with a plain spawn_agent {} / {}", ms(b50), ms(b95)),
            format!(
                "{:+.2} ms p50 ({:.2}×)",
                (s50 - b50) as f64 / 1000.0,
                s50 as f64 / b50.max(1) as f64
            ),
        ),
    );
    Ok(agent)
}

const AGENTS: usize = 100;
const DESCRIPTION: usize = 1_000;

/// 100 saved agents, each with a 1,000-character description.
async fn make_agents(client: &Client) -> anyhow::Result<()> {
    for i in 0..AGENTS {
        let mut description = format!("Agent {i:03}: ");
        while description.chars().count() < DESCRIPTION {
            description.push_str(
                "reviews drafts, checks facts and sources, and answers with a short list of what to change. ",
            );
        }
        let description: String = description.chars().take(DESCRIPTION).collect();
        let made = client
            .post(
                "/agents",
                json!({"name": format!("agent-{i:03}"), "description": description,
                       "instructions": "You review drafts.", "tools": ["read_file"]}),
            )
            .await?;
        anyhow::ensure!(made.status == 201, "making agent {i}: {made:?}");
    }
    let kept = client.get("/agents").await?.body["agents"]
        .as_array()
        .map_or(0, Vec::len);
    anyhow::ensure!(kept == AGENTS, "{kept} agents kept");
    Ok(())
}

/// Part 2 on one engine window: what list_agents stored and sent, and its
/// turn against read_file's.
struct Listing {
    /// The engine's window (tokens), as chatd read it.
    window: i64,
    /// The tool message's text as stored (characters, the most of the turns).
    chars: i64,
    /// The longest description in the result (characters).
    longest: usize,
    /// The agents the result listed (of `AGENTS`).
    shown: usize,
    /// Turns whose step went through a compaction (a request offering no tools).
    compacted: usize,
    /// Medians, in the request after the call (the parent's next step): its
    /// tool message's characters and its bytes; read_file's bytes.
    sent_chars: i64,
    sent_bytes: i64,
    read_bytes: i64,
    /// Send to run done, p50 / p95 (µs): list_agents, read_file.
    list: (i64, i64),
    read: (i64, i64),
    /// The answer's end to the parent's next step's request (µs).
    gap: (i64, i64),
    read_gap: (i64, i64),
    /// Medians (µs) in a compacted turn: the answer's end to the compaction
    /// request, that request in the engine, its end to the next step's.
    compaction: (i64, i64, i64),
}

/// list_agents with the chatd's 100 saved agents, against read_file.
async fn listing(
    sim: &Sim,
    chatd: &Chatd,
    client: &Client,
    warm: usize,
    n: usize,
) -> anyhow::Result<Listing> {
    clear_log(sim).await?;
    let (mut listed, mut read) = (Vec::new(), Vec::new());
    let (mut stored_chars, mut longest, mut shown) = (Vec::new(), 0, 0);
    let (mut list_turns, mut read_turns) = (Vec::new(), Vec::new());
    for k in 0..warm + n {
        let call = json!({"name": "list_agents", "arguments": {}});
        let (chat, t, _) = one_call(sim, chatd, client, call, false).await?;
        let results = tool_results(&client.snapshot(&chat).await?);
        anyhow::ensure!(results.len() == 1, "list_agents answered {results:?}");
        let here = results[0].chars().count() as i64;
        let answer: Value = serde_json::from_str(&results[0])
            .with_context(|| format!("list_agents' result is not JSON ({here} characters)"))?;
        let agents = answer["agents"].as_array().map_or(0, Vec::len);
        shown = agents;
        anyhow::ensure!(
            answer["count"] == AGENTS && agents > 0 && agents <= AGENTS,
            "list_agents listed {agents}, count {}",
            answer["count"]
        );
        longest = answer["agents"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a["description"].as_str())
            .map(|d| d.chars().count())
            .max()
            .unwrap_or(0);

        let call = json!({"name": "read_file", "arguments": {"path": "small.txt"}});
        let (plain, plain_t, _) = one_call(sim, chatd, client, call, false).await?;
        let results = tool_results(&client.snapshot(&plain).await?);
        anyhow::ensure!(
            results.len() == 1 && results[0].contains("of two lines"),
            "read_file answered {results:?}"
        );
        if k >= warm {
            stored_chars.push(here);
            listed.push(t.took);
            read.push(plain_t.took);
            list_turns.push(chat);
            read_turns.push(plain);
        }
    }
    // The window chatd holds the chat's requests to, as it read the engine's.
    let window = client.get("/capabilities").await?.body["engine"]["models"]
        .as_array()
        .and_then(|m| m.first())
        .and_then(|m| m["context_window"].as_i64());
    // The engine's log: the parent's next step's request (the last one),
    // and a compaction's between them (a request offering no tools).
    let log = Log::take(sim).await?;
    let (mut sent_chars, mut sent_bytes, mut gap, mut compactions) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut compacted = 0;
    let (mut to_compaction, mut from_compaction) = (Vec::new(), Vec::new());
    for chat in &list_turns {
        let p = log.of(chat);
        anyhow::ensure!(p.len() >= 2, "{} requests for a list_agents turn", p.len());
        let (first, last) = (&p[0], &p[p.len() - 1]);
        let between = &p[1..p.len() - 1];
        anyhow::ensure!(
            between.iter().all(|r| offered_tools(r.3).is_empty()),
            "a list_agents turn made {} requests, not all compactions",
            p.len()
        );
        if !between.is_empty() {
            compacted += 1;
        }
        if let (Some(c), Some(d)) = (between.first(), between.last()) {
            to_compaction.push(c.0 - first.1);
            compactions.push(d.1 - c.0);
            from_compaction.push(last.0 - d.1);
        }
        let tool = last.3["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["role"] == "tool")
            .map(|m| match m["content"].as_str() {
                Some(text) => text.chars().count(),
                None => m["content"].to_string().chars().count(),
            })
            .sum::<usize>();
        sent_chars.push(tool as i64);
        sent_bytes.push(last.2);
        gap.push(last.0 - first.1);
    }
    let (mut read_gap, mut read_bytes) = (Vec::new(), Vec::new());
    for chat in &read_turns {
        let p = log.of(chat);
        anyhow::ensure!(p.len() == 2, "{} requests for a read_file turn", p.len());
        read_gap.push(p[1].0 - p[0].1);
        read_bytes.push(p[1].2);
    }
    Ok(Listing {
        window: window.context("the engine's window in /capabilities")?,
        chars: stored_chars.iter().copied().max().unwrap_or(0),
        longest,
        shown,
        compacted,
        sent_chars: p50(sent_chars),
        sent_bytes: p50(sent_bytes),
        read_bytes: p50(read_bytes),
        list: p50_p95(listed),
        read: p50_p95(read),
        gap: p50_p95(gap),
        read_gap: p50_p95(read_gap),
        compaction: (p50(to_compaction), p50(compactions), p50(from_compaction)),
    })
}

fn report_listing(n: usize, warm: usize, small: &Listing, big: &Listing, rows: &mut Vec<Row>) {
    let chars = small.chars.max(big.chars);
    let tokens = chars / 4;
    let under = (chars as usize) < RESULT_CAP;
    say(format!(
        "18d, list_agents with {AGENTS} saved agents of a {DESCRIPTION}-character description: the tool message as stored {chars} characters (~{tokens} tokens at 4 a token; {} of {AGENTS} listed, the longest description {} characters): {} chatd's {RESULT_CAP}-character cap on a tool result",
        small.shown,
        small.longest.max(big.longest),
        if under { "under" } else { "OVER" },
    ));
    for l in [small, big] {
        say(format!(
            "    window {} tokens, {n} turns each (after {warm} warm-up), send to run done: list_agents p50 {} p95 {}; read_file of a small file p50 {} p95 {}; {} of {n} list_agents turns compacted{}; the parent's next step's request: its tool message {} characters, {} bytes (read_file's {}); the answer's end to it: list_agents p50 {} p95 {}, read_file p50 {} p95 {}",
            l.window,
            ms(l.list.0),
            ms(l.list.1),
            ms(l.read.0),
            ms(l.read.1),
            l.compacted,
            if l.compacted > 0 {
                format!(
                    " (medians: the answer's end to the compaction request {}, that request {}, its end to the next step's request {})",
                    ms(l.compaction.0),
                    ms(l.compaction.1),
                    ms(l.compaction.2)
                )
            } else {
                String::new()
            },
            l.sent_chars,
            l.sent_bytes,
            l.read_bytes,
            ms(l.gap.0),
            ms(l.gap.1),
            ms(l.read_gap.0),
            ms(l.read_gap.1)
        ));
    }
    rows.push(
        row(
            format!("18d. list_agents with {AGENTS} saved agents ({DESCRIPTION}-character descriptions): the tool message as stored"),
            format!("{chars} characters (~{tokens} tokens)"),
        )
        .aim(format!("under chatd's {RESULT_CAP}-character cap on a tool result"), under),
    );
    for l in [small, big] {
        let what = if l.compacted > 0 {
            format!(
                "compacted in {} of {n}; the model's next request holds {} characters of it",
                l.compacted, l.sent_chars
            )
        } else {
            format!(
                "the model's next request holds {} characters of it",
                l.sent_chars
            )
        };
        rows.push(
            row(
                format!("18d. a turn whose one call is list_agents ({AGENTS} agents), send to run done, window {} tokens ({n} turns; {what})", l.window),
                format!("p50 {} / p95 {}", ms(l.list.0), ms(l.list.1)),
            )
            .baseline(
                format!("the same turn with read_file {} / {}", ms(l.read.0), ms(l.read.1)),
                format!(
                    "{:+.2} ms p50 ({:.2}×)",
                    (l.list.0 - l.read.0) as f64 / 1000.0,
                    l.list.0 as f64 / l.read.0.max(1) as f64
                ),
            ),
        );
    }
}
