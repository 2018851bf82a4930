//! `Inv::Subagents` at the end of the sub-agents part (`subagents.rs`), once
//! the part's wait after the load is over. For each of its chats, from
//! chatd's routes (the chat's snapshot, each sub-agent's row and
//! transcript, asked again while chatd is down) and from chat.sqlite3
//! (opened read-only: the chat's `sub_agent_*`, `message.created`,
//! `pending.*` events, which a device could read only from its ring, and the
//! conversations under the chat):
//!
//! - every sub-agent ended, started once (`sub_agent_started`) and ended
//!   once (`sub_agent_done`);
//! - one not stopped with its parent handed back exactly one result: its
//!   call's result while the call waited in its run, else one message or
//!   waiting message with its card (`sub_agent_result`); it is stored
//!   before its `sub_agent_done`, which names it; a done one's result is its
//!   whole answer (the tokens its task's cue asked for). One stopped with its
//!   parent handed back nothing from the background, and from a waited call
//!   its call's result at most;
//! - never more than 4 in the background at once: in every sample of the
//!   list, and in the chat's log (a background start while 4 ran there);
//! - every refused call (the 5th, the same task again) started no
//!   sub-agent, and every conversation under the chat is a sub-agent's;
//!   the same task started twice only when the first had failed or been
//!   stopped (chatd refuses the words of one that works on or ended done);
//! - a sub-agent is taken up again after at most 3 kills;
//! - one runs as the saved agent exactly when its call named it (the
//!   agent's id on its row and its conversation, its name in its title);
//! - the saved agent's file, exported and imported, made a new agent under
//!   a free name with the same definition.

use super::*;

use std::collections::BTreeSet;

use reqwest::Method;
use rusqlite::{Connection, OpenFlags};
use tandem_tests::harness::wait_until;

use crate::subagents::{ChatLoad, Run, Shape, Tally, BACKGROUND_MAX, HELPER, RIDE, SETTLE};

/// Runs of mode `resume` a sub-agent may have (chatd's `RESUMES_MAX`).
const RESUMES_MAX: usize = 3;

/// What the checks counted, for the summary.
#[derive(Default)]
struct Found {
    started_fg: u64,
    started_bg: u64,
    moved: u64,
    /// The first few moved to the background by a kill: their runs (mode
    /// and status: taken up again, or still queued when the kill came).
    moved_runs: Vec<String>,
    refused_cap: u64,
    refused_same: u64,
    refused_other: u64,
    /// The same words started again after the first failed or was stopped.
    again_after_end: u64,
    /// Started as the part's saved agent.
    as_agent: u64,
    done: u64,
    stopped: u64,
    failed: u64,
    running: u64,
    by_parent: u64,
    /// Stopped with the parent, nothing handed back (from the background,
    /// or a waited call that no longer waited).
    silent: u64,
    by_route: u64,
    resumed: u64,
    resume_runs: u64,
    as_call: u64,
    as_message: u64,
    as_waiting: u64,
    whole: u64,
    /// spawn_agent calls with no result (their parent cut by a kill or a stop).
    unanswered: u64,
}

/// One event of a chat's log.
struct Logged {
    seq: i64,
    kind: String,
    data: Value,
}

/// The chat's events the checks read, in order.
fn events_of(db: &Path, chat: &str) -> rusqlite::Result<Vec<Logged>> {
    let conn = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    let mut statement = conn.prepare(
        "SELECT seq, kind, data FROM events WHERE conversation_id = ?1 AND kind IN \
         ('sub_agent_started', 'sub_agent_done', 'message.created', 'pending.added', 'pending.delivered') \
         ORDER BY seq",
    )?;
    let rows = statement
        .query_map([chat], |r| {
            let data: String = r.get(2)?;
            Ok(Logged {
                seq: r.get(0)?,
                kind: r.get(1)?,
                data: serde_json::from_str(&data).unwrap_or(Value::Null),
            })
        })?
        .collect();
    rows
}

/// The conversations under the chat (a sub-agent's has its parent's id).
fn conversations_under(db: &Path, chat: &str) -> rusqlite::Result<BTreeSet<String>> {
    let conn = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    let mut statement = conn.prepare("SELECT id FROM conversations WHERE parent_id = ?1")?;
    let ids = statement
        .query_map([chat], |r| r.get::<_, String>(0))?
        .collect();
    ids
}

/// `GET path`, asked again while chatd is down: its 200 body.
async fn fetch(shared: &Shared, path: &str) -> Option<Value> {
    wait_until("chatd to answer", RIDE, || async {
        match shared.call(Method::GET, path, None).await {
            Ok((200, body)) => Some(body),
            _ => None,
        }
    })
    .await
    .ok()
}

/// The `w0 w1 … w{n-1}` answer a task's cue (`tokens=n`) asks for.
fn asked_answer(task: &str) -> Option<String> {
    let cue = &task[task.find("[sim ")?..];
    let n = &cue[cue.find("tokens=")? + 7..];
    let n: usize = n[..n.find([' ', ']'])?].parse().ok()?;
    Some(
        (0..n)
            .map(|i| format!("w{i}"))
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// chatd's same-task key: small letters, spaces collapsed.
fn task_key(task: &str) -> String {
    task.split_whitespace()
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join(" ")
}

fn excerpt_of(text: &str) -> String {
    let cut: String = text.chars().take(160).collect();
    if cut.len() < text.len() {
        format!("{cut:?}…")
    } else {
        format!("{cut:?}")
    }
}

/// The part's checks; the summary's lines.
pub(crate) async fn check(shared: &Shared, run: &Run) -> Vec<String> {
    let mut found = Found::default();
    let mut tally = Tally::default();
    if let Err(what) = &run.round_trip {
        shared.violate(
            Inv::Subagents,
            format!("sub-agents: the agent file: {what}"),
        );
    }
    for load in &run.chats {
        tally.add(&load.tally);
        check_chat(shared, run, load, &mut found).await;
    }
    let settled = match &run.settled {
        Ok(s) => format!("all ended {s:.1} s after the load"),
        Err(what) => {
            shared.violate(
                Inv::Subagents,
                format!(
                    "sub-agents: still working {} s after the load: {what}",
                    SETTLE.as_secs()
                ),
            );
            format!(
                "NOT all ended {} s after the load: {what}",
                SETTLE.as_secs()
            )
        }
    };
    let planned = |shape: Shape| -> usize {
        run.chats
            .iter()
            .flat_map(|c| &c.planned)
            .filter(|p| p.shape == shape)
            .count()
    };
    let f = &found;
    let handed = f.as_call + f.as_message + f.as_waiting;
    vec![
        format!(
            "chats: {} of its own (auto); {} turns sent ({} waited as pending, {} took a script a kill or a busy chat left), {} not sent while engine-sim refused its control routes; {} requests found chatd down (its kills: not failures)",
            run.chats.len(), tally.turns, tally.pending, tally.leftover, tally.engine_away, tally.down
        ),
        format!(
            "sub-agents started: {} ({} foreground, {} background; {} as the saved agent {HELPER:?}; {} foreground ones moved to the background by a kill); refused: {} at the cap of {BACKGROUND_MAX} ({} turns asked for 5 at once), {} as the same task ({} repeats asked for), {} otherwise; {} started again after the same task failed or was stopped",
            f.started_fg + f.started_bg, f.started_fg, f.started_bg, f.as_agent, f.moved,
            f.refused_cap, planned(Shape::Five) / 5, f.refused_same, planned(Shape::Repeat), f.refused_other,
            f.again_after_end
        ),
        format!(
            "ended: done {}, stopped {}, failed {}, still running {}; {settled}",
            f.done, f.stopped, f.failed, f.running
        ),
        format!(
            "stops: {} of the parent ({} found nothing to stop), naming {} sub-agents; {} stopped with their parent (by_parent), {} of them handing nothing back; {} stopped on their own route ({} had ended meanwhile)",
            tally.parent_stops, tally.parent_idle,
            run.chats.iter().map(|c| c.by_parent.len()).sum::<usize>(),
            f.by_parent, f.silent, f.by_route, tally.route_late
        ),
        format!(
            "kills: {} sub-agents taken up again after a chatd kill ({} runs of mode resume){}",
            f.resumed,
            f.resume_runs,
            if f.moved_runs.is_empty() {
                String::new()
            } else {
                format!("; moved to the background: {}", f.moved_runs.join("; "))
            }
        ),
        format!(
            "results handed back: {handed} ({} as the call's result, {} as a message, {} as a waiting message), each with one sub_agent_done; {} done ones, each its whole answer; {} spawn calls left with no result (their parent cut by a kill or a stop)",
            f.as_call, f.as_message, f.as_waiting, f.whole, f.unanswered
        ),
        format!(
            "the list sampled {} times ({} more found chatd down): at most {} running in the background at once (the cap: {BACKGROUND_MAX})",
            run.samples.taken, run.samples.down, run.samples.most
        ),
        format!(
            "the agent's file exported and imported: {}",
            match &run.round_trip {
                Ok(()) => "a new agent with the same definition".to_string(),
                Err(what) => format!("NOT: {what}"),
            }
        ),
    ]
}

/// What the parent holds that the checks look up.
struct Parent<'a> {
    /// Tool messages by their call's id.
    results: HashMap<&'a str, Vec<&'a Value>>,
    /// User messages with a `sub_agent_result` card, by sub-agent.
    cards: HashMap<&'a str, Vec<&'a Value>>,
    /// Waiting messages with that card, by sub-agent.
    waiting: HashMap<&'a str, Vec<&'a Value>>,
    /// `spawn_agent` calls: (call id, task, wait).
    calls: Vec<(String, String, bool)>,
}

fn parent_of(snapshot: &Value) -> Parent<'_> {
    let mut parent = Parent {
        results: HashMap::new(),
        cards: HashMap::new(),
        waiting: HashMap::new(),
        calls: Vec::new(),
    };
    for m in snapshot["messages"].as_array().into_iter().flatten() {
        if m["role"] == "tool" {
            if let Some(call) = m["tool_call_id"].as_str() {
                parent.results.entry(call).or_default().push(m);
            }
        }
        if m["card"]["kind"] == "sub_agent_result" {
            if let Some(sid) = m["card"]["subagent_id"].as_str() {
                parent.cards.entry(sid).or_default().push(m);
            }
        }
        for call in m["tool_calls"].as_array().into_iter().flatten() {
            if call["function"]["name"] != "spawn_agent" {
                continue;
            }
            let args: Value = call["function"]["arguments"]
                .as_str()
                .and_then(|a| serde_json::from_str(a).ok())
                .unwrap_or(Value::Null);
            parent.calls.push((
                call["id"].as_str().unwrap_or("").to_string(),
                args["task"].as_str().unwrap_or("").trim().to_string(),
                args["wait"] != false,
            ));
        }
    }
    for p in snapshot["pending"].as_array().into_iter().flatten() {
        if p["card"]["kind"] == "sub_agent_result" {
            if let Some(sid) = p["card"]["subagent_id"].as_str() {
                parent.waiting.entry(sid).or_default().push(p);
            }
        }
    }
    parent
}

/// The chat's log, indexed.
#[derive(Default)]
struct Log<'a> {
    started: BTreeMap<&'a str, Vec<(i64, &'a Value)>>,
    done: BTreeMap<&'a str, Vec<(i64, &'a Value)>>,
    /// `message.created` by message id.
    created: HashMap<&'a str, i64>,
    /// `pending.added` by waiting message id.
    added: HashMap<&'a str, i64>,
    /// `pending.delivered`: the message a waiting one became.
    became: HashMap<&'a str, &'a str>,
}

fn log_of(events: &[Logged]) -> Log<'_> {
    let mut log = Log::default();
    for e in events {
        let d = &e.data;
        match e.kind.as_str() {
            "sub_agent_started" | "sub_agent_done" => {
                let Some(sid) = d["subagent_id"].as_str() else {
                    continue;
                };
                let map = if e.kind == "sub_agent_started" {
                    &mut log.started
                } else {
                    &mut log.done
                };
                map.entry(sid).or_default().push((e.seq, d));
            }
            "message.created" => {
                if let Some(id) = d["message"]["id"].as_str() {
                    log.created.insert(id, e.seq);
                }
            }
            "pending.added" => {
                if let Some(id) = d["pending"]["id"].as_str() {
                    log.added.insert(id, e.seq);
                }
            }
            _ => {
                if let (Some(p), Some(m)) = (d["pending_id"].as_str(), d["message_id"].as_str()) {
                    log.became.insert(p, m);
                }
            }
        }
    }
    log
}

async fn check_chat(shared: &Shared, run: &Run, load: &ChatLoad, found: &mut Found) {
    let chat = load.id.as_str();
    let bad =
        |what: String| shared.violate(Inv::Subagents, format!("sub-agents: chat {chat}: {what}"));
    let events = match events_of(&run.db, chat) {
        Ok(events) => events,
        Err(err) => {
            bad(format!("its events in {}: {err}", run.db.display()));
            return;
        }
    };
    let Some(snapshot) = fetch(shared, &format!("/conversations/{chat}")).await else {
        bad("no snapshot".into());
        return;
    };
    let log = log_of(&events);
    let parent = parent_of(&snapshot);
    for (call, results) in &parent.results {
        if results.len() > 1 {
            bad(format!("the call {call} has {} results", results.len()));
        }
    }

    // Every conversation under the chat is a sub-agent's that started.
    let mut ids: BTreeSet<String> = log.started.keys().map(|s| s.to_string()).collect();
    ids.extend(run.samples.seen.get(chat).into_iter().flatten().cloned());
    match conversations_under(&run.db, chat) {
        Ok(under) => {
            for extra in under.difference(&ids) {
                bad(format!("the conversation {extra} is under the chat, and no sub-agent of it started (a refused call's?)"));
            }
            for missing in ids.difference(&under) {
                bad(format!(
                    "the sub-agent {missing} has no conversation under the chat"
                ));
            }
        }
        Err(err) => bad(format!("its conversations in {}: {err}", run.db.display())),
    }

    let mut rows: BTreeMap<String, Value> = BTreeMap::new();
    for sid in &ids {
        let path = format!("/conversations/{chat}/subagents/{sid}");
        let Some(shown) = fetch(shared, &path).await else {
            bad(format!("no answer for the sub-agent {sid}"));
            continue;
        };
        check_one(shared, chat, sid, &shown, &log, &parent, load, found);
        check_agent(run, load, &shown, found)
            .map_err(|what| bad(format!("{sid}: {what}")))
            .ok();
        rows.insert(sid.clone(), shown["subagent"].clone());
    }

    // Refused calls started nothing.
    let started_calls: HashMap<&str, &str> = log
        .started
        .iter()
        .flat_map(|(sid, v)| {
            v.iter()
                .map(move |(_, d)| (d["call_id"].as_str().unwrap_or(""), *sid))
        })
        .collect();
    for (call, task, _) in &parent.calls {
        let text = parent
            .results
            .get(call.as_str())
            .and_then(|r| r.first())
            .and_then(|m| m["text"].as_str());
        let Some(text) = text else {
            found.unanswered += 1;
            continue;
        };
        if !text.starts_with("refused") {
            continue;
        }
        if text.contains(&format!("{BACKGROUND_MAX} sub-agents in the background")) {
            found.refused_cap += 1;
        } else if text.contains("same task") {
            found.refused_same += 1;
        } else {
            found.refused_other += 1;
            bad(format!(
                "the call {call} ({:?}) was refused: {}",
                task,
                excerpt_of(text)
            ));
        }
        let rowed = rows.iter().find(|(_, r)| r["call_id"] == call.as_str());
        if let Some(sid) = started_calls
            .get(call.as_str())
            .copied()
            .or(rowed.map(|(s, _)| s.as_str()))
        {
            bad(format!(
                "the call {call} was refused ({}) and still started the sub-agent {sid}",
                excerpt_of(text)
            ));
        }
    }

    // The same words start again only when no earlier one with them works
    // on or ended done (chatd lets one that failed or was stopped, or was
    // stopped with its parent, be given again; no file of these chats
    // changes, so an ended done one always blocks).
    let mut by_key: BTreeMap<String, Vec<(i64, &str)>> = BTreeMap::new();
    for (sid, started) in &log.started {
        let Some(task) = rows.get(*sid).and_then(|r| r["task"].as_str()) else {
            continue;
        };
        // Another agent on the same words is another task.
        let agent = rows
            .get(*sid)
            .and_then(|r| r["agent_id"].as_str())
            .unwrap_or("");
        if let Some((seq, _)) = started.first() {
            by_key
                .entry(format!("{agent} {}", task_key(task)))
                .or_default()
                .push((*seq, sid));
        }
    }
    for group in by_key.values_mut().filter(|g| g.len() > 1) {
        group.sort_unstable();
        for (i, (later, second)) in group.iter().enumerate().skip(1) {
            let blocking = group[..i].iter().find(|(_, first)| {
                let by_parent = rows.get(*first).is_some_and(|r| r["by_parent"] == true);
                let ended = log
                    .done
                    .get(first)
                    .into_iter()
                    .flatten()
                    .find(|(seq, _)| seq < later);
                !by_parent && ended.is_none_or(|(_, d)| d["status"] == "done")
            });
            match blocking {
                None => found.again_after_end += 1,
                Some((_, first)) => bad(format!(
                    "the same task started twice: {second} while {first} ({} at the end) worked on it or had done it",
                    rows.get(*first).map_or(Value::Null, |r| r["state"].clone())
                )),
            }
        }
    }

    // The cap in the log: a background start while 4 ran there (a
    // foreground one moved to the background by a kill is not counted).
    let mut background: BTreeSet<&str> = BTreeSet::new();
    for e in &events {
        let Some(sid) = e.data["subagent_id"].as_str() else {
            continue;
        };
        match e.kind.as_str() {
            "sub_agent_started" if e.data["wait"] == false => {
                if background.len() >= BACKGROUND_MAX {
                    bad(format!(
                        "{sid} started in the background (seq {}) while {} ran there: {}",
                        e.seq,
                        background.len(),
                        background.iter().copied().collect::<Vec<_>>().join(", ")
                    ));
                }
                background.insert(sid);
            }
            "sub_agent_done" => {
                background.remove(sid);
            }
            _ => {}
        }
    }
    for (c, t, over) in &run.samples.over {
        if c != chat {
            continue;
        }
        let moved: Vec<&str> = over
            .iter()
            .filter(|sid| {
                log.started
                    .get(sid.as_str())
                    .and_then(|s| s.first())
                    .is_some_and(|(_, d)| d["wait"] == true)
            })
            .map(String::as_str)
            .collect();
        bad(format!(
            "at {t:.1} s the list had {} running in the background, over the {BACKGROUND_MAX} allowed: {}{}",
            over.len(),
            over.join(", "),
            if moved.is_empty() {
                String::new()
            } else {
                format!(" ({} started waited on, moved to the background by a kill)", moved.join(", "))
            }
        ));
    }
}

/// A sub-agent runs as the saved agent exactly when its call named it: the
/// agent's id on its row and its conversation, its name leading its title.
fn check_agent(run: &Run, load: &ChatLoad, shown: &Value, found: &mut Found) -> Result<(), String> {
    let row = &shown["subagent"];
    let task = row["task"].as_str().unwrap_or("");
    let asked = load.planned.iter().any(|p| p.agent && p.task == task);
    let on_row = row["agent_id"].as_str();
    let on_chat = shown["snapshot"]["conversation"]["agent_id"].as_str();
    if !asked {
        return match on_row {
            None => Ok(()),
            Some(a) => Err(format!("its call named no agent, and it runs as {a}")),
        };
    }
    found.as_agent += 1;
    if on_row != Some(run.agent.as_str()) || on_chat != Some(run.agent.as_str()) {
        return Err(format!(
            "its call named the agent {}, and its row says {on_row:?}, its conversation {on_chat:?}",
            run.agent
        ));
    }
    let title = row["title"].as_str().unwrap_or("");
    if !title.starts_with(&format!("{HELPER}: ")) {
        return Err(format!("run as {HELPER}, its title is {title:?}"));
    }
    Ok(())
}

/// One sub-agent: ended, started and done once, its result handed back once.
#[allow(clippy::too_many_arguments)]
fn check_one(
    shared: &Shared,
    chat: &str,
    sid: &str,
    shown: &Value,
    log: &Log,
    parent: &Parent,
    load: &ChatLoad,
    found: &mut Found,
) {
    let bad = |what: String| {
        shared.violate(
            Inv::Subagents,
            format!("sub-agents: chat {chat}, sub-agent {sid}: {what}"),
        )
    };
    let row = &shown["subagent"];
    let state = row["state"].as_str().unwrap_or("?");
    match state {
        "done" => found.done += 1,
        "stopped" => found.stopped += 1,
        "failed" => found.failed += 1,
        _ => {
            found.running += 1;
            bad(format!("it is {state} after the part's wait"));
            return;
        }
    }
    let started = log.started.get(sid).map_or(&[][..], Vec::as_slice);
    let done = log.done.get(sid).map_or(&[][..], Vec::as_slice);
    if started.len() != 1 {
        bad(format!(
            "{} sub_agent_started events, not one",
            started.len()
        ));
    }
    let first_wait = started.first().is_some_and(|(_, d)| d["wait"] == true);
    let wait = row["wait"] == true;
    if first_wait {
        found.started_fg += 1;
    } else {
        found.started_bg += 1;
    }
    if first_wait && !wait {
        found.moved += 1;
    }
    let by_parent = row["by_parent"] == true;
    found.by_parent += u64::from(by_parent);
    found.by_route += u64::from(load.by_route.contains(sid));
    let resumes = shown["snapshot"]["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["mode"] == "resume")
        .count();
    found.resumed += u64::from(resumes > 0);
    found.resume_runs += resumes as u64;
    if first_wait && !wait {
        let runs: Vec<String> = shown["snapshot"]["runs"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                format!(
                    "{} {}",
                    r["mode"].as_str().unwrap_or("?"),
                    r["status"].as_str().unwrap_or("?")
                )
            })
            .collect();
        if found.moved_runs.len() < 6 {
            found
                .moved_runs
                .push(format!("{sid} ({state}; runs: {})", runs.join(", ")));
        }
    }
    if resumes > RESUMES_MAX {
        bad(format!(
            "taken up again {resumes} times (at most {RESUMES_MAX})"
        ));
    }
    if done.len() != 1 {
        bad(format!("{} sub_agent_done events, not one", done.len()));
    }

    let call_id = row["call_id"].as_str().unwrap_or("");
    let headline = format!("[The result of sub-agent {sid} ");
    let as_call: Vec<&Value> = parent
        .results
        .get(call_id)
        .into_iter()
        .flatten()
        .copied()
        .filter(|m| m["text"].as_str().is_some_and(|t| t.starts_with(&headline)))
        .collect();
    let none = Vec::new();
    let as_message = parent.cards.get(sid).unwrap_or(&none);
    let as_waiting = parent.waiting.get(sid).unwrap_or(&none);
    let handed = as_call.len() + as_message.len() + as_waiting.len();
    let how = format!(
        "{state}, {}{}, by_parent {by_parent}",
        if wait {
            "waited on"
        } else {
            "in the background"
        },
        if first_wait && !wait {
            " (moved by a kill)"
        } else {
            ""
        }
    );
    // Stopped with its parent: nothing handed back from the background, and
    // from a waiting call only while that call still waited (else as in the
    // background: nothing).
    if by_parent && (handed == 0 || !wait) {
        found.silent += 1;
        if handed != 0 {
            bad(format!(
                "stopped with its parent ({how}), yet handed back {handed} results"
            ));
        }
        let named = done.first().is_some_and(|(_, d)| {
            ["call_id", "message_id", "pending_id"]
                .iter()
                .any(|k| d[*k].is_string())
        });
        if named {
            bad(format!(
                "{how}: handed back nothing, yet its sub_agent_done names a result: {}",
                done[0].1
            ));
        }
        return;
    }
    if handed != 1 {
        bad(format!(
            "{how}: handed back {handed} results ({} as the call's result, {} as messages, {} as waiting messages), not one",
            as_call.len(),
            as_message.len(),
            as_waiting.len()
        ));
        return;
    }
    // A call waited on may end after its parent's run went on (a stop that
    // outlasted the wait): then its result comes as in the background.
    if !wait && as_call.len() == 1 {
        bad(format!(
            "{how}: its result came as its call's result, not as a message"
        ));
    }
    found.as_call += as_call.len() as u64;
    found.as_message += as_message.len() as u64;
    found.as_waiting += as_waiting.len() as u64;
    if row["delivered"].as_str().is_none() {
        bad(format!(
            "{how}: handed back, and its row has no `delivered`"
        ));
    }
    let handed_item = as_call
        .first()
        .or(as_message.first())
        .or(as_waiting.first())
        .copied()
        .unwrap_or(&Value::Null);

    // Its sub_agent_done names what was handed back, stored before it.
    if let Some((seq, d)) = done.first() {
        let item = handed_item["id"].as_str().unwrap_or("");
        let stored_at = if let Some(call) = d["call_id"].as_str() {
            if call != call_id || !wait {
                bad(format!("{how}: its sub_agent_done names the call {call}"));
            }
            log.created.get(item).copied()
        } else if let Some(mid) = d["message_id"].as_str() {
            if mid != item {
                bad(format!(
                    "{how}: its sub_agent_done names the message {mid}, its card is on {item}"
                ));
            }
            log.created.get(mid).copied()
        } else if let Some(pid) = d["pending_id"].as_str() {
            let same = pid == item || log.became.get(pid).is_some_and(|m| *m == item);
            if !same {
                bad(format!("{how}: its sub_agent_done names the waiting message {pid}, its card is on {item}"));
            }
            log.added.get(pid).copied()
        } else {
            bad(format!(
                "{how}: its sub_agent_done names no call, message or waiting message: {d}"
            ));
            None
        };
        match stored_at {
            Some(at) if at < *seq => {}
            Some(at) => bad(format!(
                "{how}: its result was stored at seq {at}, after its sub_agent_done at {seq}"
            )),
            None => bad(format!(
                "{how}: no event of its result's storing before its sub_agent_done at {seq}"
            )),
        }
    }

    // A done one's result is its whole answer.
    if state == "done" {
        let text = handed_item["text"].as_str().unwrap_or("");
        let body = text.split_once(":]\n\n").map_or("", |(_, b)| b).trim();
        match row["task"].as_str().and_then(asked_answer) {
            Some(answer) if answer == body => found.whole += 1,
            Some(answer) => bad(format!(
                "{how}: its result is not its whole answer of {} tokens: {}",
                answer.split(' ').count(),
                excerpt_of(body)
            )),
            None => bad(format!("its task has no cue: {:?}", row["task"])),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tasks_cue_says_its_answer() {
        assert_eq!(
            asked_answer("Part 1 of turn 2 #3\n[sim tokens=3 tps=80 id=sa0n3]").as_deref(),
            Some("w0 w1 w2")
        );
        assert_eq!(asked_answer("no cue"), None);
        assert_eq!(task_key("PART  1\n[sim x=1]"), "part 1 [sim x=1]");
    }
}
