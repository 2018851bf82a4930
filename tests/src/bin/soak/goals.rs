//! Goals in the sub-agents part (`subagents.rs`): one chat of its own
//! (`auto`) that works toward goal after goal by itself (docs/api.md,
//! "Goals"). Every 1 to 3 s while the load lasts:
//!
//! - a run works: one look in ten stops the chat (the goal pauses `user`);
//! - the chat is idle: a goal that is missing, done or blocked is replaced by
//!   goal #k, a paused one is resumed, each with the model's next answers
//!   scripted on the chat's session: one in three first a slow answer (300
//!   tokens at 60 a second: a window the soak's kills and the part's stops
//!   cut), then a shape: 0 to 2 plain turns and `goal_done` naming
//!   `goals/k.md`, which its first step wrote; `goal_blocked`; or the same
//!   failing `read_file` four times (stuck). A script engine-sim still holds
//!   (a kill took its turn) is not topped up. An active goal with no run
//!   working is never right: the goal and its next turn are one job;
//! - one look in five sends `/goal` as a message: the command registry must
//!   answer 200 with the goal's line (a `goals` violation otherwise).
//!
//! After the load the part waits (bounded) until no run of the chat works.
//! `check` (`Inv::Goals`): every run ended; the goal is not active on an
//! idle chat; every `continue` line follows a turn that ended by itself
//! (done or paused, never one a stop, a failure or a kill cut: those pause
//! the goal) and was answered by one run at most; every goal line has its
//! one `goal` event.

use super::*;

use reqwest::Method;
use rusqlite::{Connection, OpenFlags};
use tandem_tests::harness::wait_until;

use crate::agent_folder::answer;
use crate::subagents::{sim_queued, RIDE, SETTLE};

/// A slow first answer: tokens and pace (5 s).
const SLOW_TOKENS: u64 = 300;
const SLOW_TPS: u64 = 60;

#[derive(Default, Debug)]
pub(crate) struct Tally {
    pub(crate) sets: u64,
    pub(crate) resumes: u64,
    pub(crate) stops: u64,
    pub(crate) stops_idle: u64,
    pub(crate) busy: u64,
    pub(crate) down: u64,
    pub(crate) engine_away: u64,
    /// Sets and resumes on a script engine-sim still held.
    pub(crate) leftover: u64,
    /// Looks that found the goal active with no run working.
    pub(crate) active_idle: u64,
    /// `/goal` sent as a message: answered with the goal's line, nothing stored.
    pub(crate) commands: u64,
    /// Goals seen ended, by their end (done, blocked, paused_by …).
    pub(crate) ends: BTreeMap<String, u64>,
}

pub(crate) struct GoalsRun {
    pub(crate) chat: String,
    pub(crate) data: PathBuf,
    pub(crate) tally: Tally,
    /// Seconds from the end of the load until the chat was idle, or what ran.
    pub(crate) settled: Result<f64, String>,
}

/// The chat, its load, the wait after it; `None` (and a violation) when the
/// chat could not be made.
pub(crate) async fn run(shared: &Shared, seed: u64) -> Option<GoalsRun> {
    let mut rng = StdRng::seed_from_u64(seed);
    let made = async {
        let data = crate::agents_mode::data_dir(shared)?;
        let body = json!({"title": "soak goals", "permission_mode": "auto"});
        let chat = shared.new_chat(body, RIDE).await?;
        anyhow::Ok((data, chat))
    };
    let (data, chat) = match made.await {
        Ok(made) => made,
        Err(err) => {
            shared.violate(Inv::Goals, format!("goals: could not start: {err:#}"));
            return None;
        }
    };
    let mut run = GoalsRun {
        chat,
        data,
        tally: Tally::default(),
        settled: Err("not waited for".into()),
    };
    load(shared, &mut run, &mut rng).await;
    let load_end = shared.t();
    let chat = run.chat.clone();
    let settled = wait_until("the goals chat to settle", SETTLE, || async {
        let (snapshot, working) = look(shared, &chat).await.ok()?;
        (!working).then_some(snapshot)
    })
    .await;
    run.settled = settled
        .map(|_| shared.t() - load_end)
        .map_err(|e| format!("{e:#}"));
    Some(run)
}

/// The snapshot, and whether a run of the chat works.
async fn look(shared: &Shared, chat: &str) -> Result<(Value, bool), Option<String>> {
    match shared
        .call(Method::GET, &format!("/conversations/{chat}"), None)
        .await
    {
        Ok((200, snapshot)) => {
            let working =
                snapshot["runs"].as_array().into_iter().flatten().any(|r| {
                    matches!(r["status"].as_str(), Some("queued" | "running" | "waiting"))
                });
            Ok((snapshot, working))
        }
        Ok((status, _)) => Err(Some(format!("snapshot → {status}"))),
        Err(_) => Err(None),
    }
}

async fn load(shared: &Shared, run: &mut GoalsRun, rng: &mut StdRng) {
    let mut phase = shared.phase.subscribe();
    let mut k = 0u64;
    loop {
        // Pacing of the load, not a wait for anything.
        let pace = Duration::from_secs_f64(rng.random_range(1.0..3.0));
        if !sleep_in(&mut phase, pace, |p| p == Phase::Load).await {
            return;
        }
        let (snapshot, working) = match look(shared, &run.chat).await {
            Ok(seen) => seen,
            Err(None) => {
                run.tally.down += 1;
                continue;
            }
            Err(Some(what)) => {
                shared.unexpected(format!("goals: {what}"));
                continue;
            }
        };
        let goal = &snapshot["goal"];
        let state = goal["state"].as_str().unwrap_or("none");
        // One look in five asks `/goal` as a person would type it: the
        // registry answers with the goal, and no message is stored.
        if rng.random_bool(0.2) {
            command(shared, run, &snapshot).await;
        }
        if working {
            if state == "active" && rng.random_bool(0.1) {
                stop(shared, run).await;
            } else {
                run.tally.busy += 1;
            }
            continue;
        }
        if state == "active" {
            run.tally.active_idle += 1;
            continue;
        }
        if state != "none" {
            let end = goal["paused_by"].as_str().unwrap_or(state);
            *run.tally.ends.entry(end.to_string()).or_default() += 1;
        }
        k += 1;
        let Some(fresh) = script(shared, &run.chat, rng, k).await else {
            run.tally.engine_away += 1;
            continue;
        };
        if !fresh {
            run.tally.leftover += 1;
        }
        let path = format!("/conversations/{}/goal", run.chat);
        let asked = match state {
            "paused" => {
                shared
                    .call(Method::POST, &format!("{path}/resume"), Some(json!({})))
                    .await
            }
            _ => {
                let text = format!("Soak goal #{k}: write goals/{k}.md and check it");
                shared
                    .call(Method::PUT, &path, Some(json!({ "text": text })))
                    .await
            }
        };
        match asked {
            Ok((200, _)) if state == "paused" => run.tally.resumes += 1,
            Ok((200, _)) => run.tally.sets += 1,
            Ok((status, body)) => shared.unexpected(format!(
                "goals: {} → {status} {}",
                if state == "paused" { "resume" } else { "set" },
                body["error"]["type"].as_str().unwrap_or("?")
            )),
            Err(_) => run.tally.down += 1,
        }
    }
}

/// Goal #k's answers on the chat's session: `Some(true)` when queued,
/// `Some(false)` when engine-sim still held some (none added), `None` when
/// it did not answer.
async fn script(shared: &Shared, chat: &str, rng: &mut StdRng, k: u64) -> Option<bool> {
    let session = format!("chat-{chat}");
    if sim_queued(shared, &session).await? > 0 {
        return Some(false);
    }
    let next = steps(k, rng.random_bool(1.0 / 3.0), rng.random_range(0..6u8));
    let body = json!({"session": session, "next": next});
    let posted = shared
        .http
        .post(format!("{}/sim/faults", shared.sim_url))
        .json(&body)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .ok()?;
    posted.status().is_success().then_some(true)
}

/// The answers of one goal: a slow start when `slow`; then by `shape`
/// 0..=3 done after 0 to 2 plain turns, 4 blocked, 5 stuck.
fn steps(k: u64, slow: bool, shape: u8) -> Vec<Value> {
    let mut steps = Vec::new();
    if slow {
        steps.push(json!({"tokens": SLOW_TOKENS, "tps": SLOW_TPS}));
    }
    let call = |name: &str, arguments: Value| json!({"tool_calls": [{"name": name, "arguments": arguments}]});
    let file = format!("goals/{k}.md");
    steps.push(call(
        "write_file",
        json!({"path": file, "content": k.to_string()}),
    ));
    match shape {
        4 => steps.push(call(
            "goal_blocked",
            json!({"reason": format!("goal #{k} needs a word"), "needs": "a yes"}),
        )),
        5 => {
            let missing = call("read_file", json!({"path": format!("missing-{k}.txt")}));
            steps.extend(std::iter::repeat_n(missing, 4));
        }
        turns => {
            for t in 0..turns.min(2) {
                steps.push(json!({"text": format!("goal #{k}: turn {t} went on")}));
            }
            steps.push(call(
                "goal_done",
                json!({"summary": format!("goal #{k} reached"), "evidence": [file]}),
            ));
        }
    }
    steps.push(json!({"text": format!("goal #{k}: said")}));
    steps
}

/// `/goal` as a message: 200 with the goal's line, and no message more.
async fn command(shared: &Shared, run: &mut GoalsRun, before: &Value) {
    let Ok((status, answer)) = shared.send_text(&run.chat, "/goal").await else {
        run.tally.down += 1;
        return;
    };
    let shows = match before["goal"]["text"].as_str() {
        Some(text) => answer["text"].as_str().is_some_and(|t| t.contains(text)),
        None => answer["text"]
            .as_str()
            .is_some_and(|t| t.contains("no goal")),
    };
    if status != 200 || answer["command"] != "goal" || !shows {
        shared.violate(
            Inv::Goals,
            format!("goals: `/goal` answered {status} {}", answer["text"]),
        );
        return;
    }
    run.tally.commands += 1;
}

async fn stop(shared: &Shared, run: &mut GoalsRun) {
    let path = format!("/conversations/{}/stop", run.chat);
    match shared.call(Method::POST, &path, Some(json!({}))).await {
        Ok((200, _)) => {
            run.tally.stops += 1;
            shared.fault("goals: a goal's turn stopped");
        }
        Ok((409, _)) => run.tally.stops_idle += 1,
        Ok((status, body)) => shared.unexpected(format!(
            "goals: stop → {status} {}",
            body["error"]["type"].as_str().unwrap_or("?")
        )),
        Err(_) => run.tally.down += 1,
    }
}

/// What the store says of the chat's goal lines: each `continue` line with
/// the distinct runs that answered it, and the counts of goal lines and
/// `goal` events.
struct Stored {
    continues: Vec<(String, i64)>,
    lines: i64,
    events: i64,
}

fn stored(db: &Path, chat: &str) -> rusqlite::Result<Stored> {
    let conn = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    let mut statement = conn.prepare(
        "SELECT g.id, (SELECT COUNT(DISTINCT a.run_id) FROM messages a \
         WHERE a.parent_id = g.id AND a.role = 'assistant') FROM messages g \
         WHERE g.conversation_id = ?1 AND g.role = 'goal' AND g.goal_event = 'continue'",
    )?;
    let continues = statement
        .query_map([chat], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let lines = conn.query_row(
        "SELECT COUNT(*) FROM messages WHERE conversation_id = ?1 AND role = 'goal'",
        [chat],
        |r| r.get(0),
    )?;
    let events = conn.query_row(
        "SELECT COUNT(*) FROM events WHERE conversation_id = ?1 AND kind = 'goal'",
        [chat],
        |r| r.get(0),
    )?;
    Ok(Stored {
        continues,
        lines,
        events,
    })
}

/// `Inv::Goals`; the summary's lines.
pub(crate) async fn check(shared: &Shared, run: &GoalsRun) -> Vec<String> {
    let chat = run.chat.as_str();
    let bad = |what: String| shared.violate(Inv::Goals, format!("goals: chat {chat}: {what}"));
    if let Err(what) = &run.settled {
        bad(format!(
            "still working {} s after the load: {what}",
            SETTLE.as_secs()
        ));
    }
    if run.tally.active_idle > 0 {
        bad(format!(
            "{} looks found the goal active with no run working",
            run.tally.active_idle
        ));
    }
    let snapshot = match answer(shared, Method::GET, &format!("/conversations/{chat}"), None).await
    {
        Ok((200, snapshot)) => snapshot,
        other => {
            bad(format!("no snapshot: {other:?}"));
            return summary(run, 0);
        }
    };
    let runs: BTreeMap<&str, &str> = snapshot["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| Some((r["id"].as_str()?, r["status"].as_str()?)))
        .collect();
    for (id, status) in &runs {
        if !matches!(
            *status,
            "done" | "stopped" | "failed" | "interrupted" | "paused"
        ) {
            bad(format!("run {id} is {status} at the end"));
        }
    }
    if snapshot["goal"]["state"] == "active" {
        bad("the goal is active on an idle chat at the end".into());
    }
    // Each continue line follows a turn that ended by itself.
    let mut last_run: Option<&str> = None;
    let mut continues = 0;
    for m in snapshot["messages"].as_array().into_iter().flatten() {
        if m["role"] == "goal" && m["goal_event"] == "continue" {
            continues += 1;
            let before = last_run.and_then(|id| runs.get(id).copied());
            if !matches!(before, Some("done" | "paused")) {
                bad(format!(
                    "continue line {} follows run {last_run:?} ended {before:?}",
                    m["id"]
                ));
            }
        }
        if let Some(id) = m["run_id"].as_str() {
            last_run = Some(id);
        }
    }
    let db = run.data.join("chat.sqlite3");
    match stored(&db, chat) {
        Ok(stored) => {
            for (line, answered) in &stored.continues {
                if *answered > 1 {
                    bad(format!(
                        "continue line {line} was answered by {answered} runs"
                    ));
                }
            }
            if stored.lines != stored.events {
                bad(format!(
                    "{} goal lines but {} goal events",
                    stored.lines, stored.events
                ));
            }
        }
        Err(err) => bad(format!("its goal lines in {}: {err}", db.display())),
    }
    summary(run, continues)
}

fn summary(run: &GoalsRun, continues: usize) -> Vec<String> {
    let t = &run.tally;
    vec![format!(
        "goals: {} set, {} resumed, {continues} turns went on by themselves, ends {:?}, \
         {} stops ({} idle), {} busy, {} `/goal` commands, {} leftover scripts, {} engine away, \
         {} down; settled {}",
        t.sets,
        t.resumes,
        t.ends,
        t.stops,
        t.stops_idle,
        t.busy,
        t.commands,
        t.leftover,
        t.engine_away,
        t.down,
        match &run.settled {
            Ok(s) => format!("in {s:.1} s"),
            Err(e) => format!("not: {e}"),
        }
    )]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_shape_ends_the_goal_its_way_after_writing_its_file() {
        let done = steps(3, false, 2);
        assert_eq!(done[0]["tool_calls"][0]["arguments"]["path"], "goals/3.md");
        assert_eq!(done[3]["tool_calls"][0]["name"], "goal_done");
        assert_eq!(
            done[3]["tool_calls"][0]["arguments"]["evidence"][0],
            "goals/3.md"
        );
        let blocked = steps(3, true, 4);
        assert_eq!(blocked[0]["tokens"], SLOW_TOKENS);
        assert_eq!(blocked[2]["tool_calls"][0]["name"], "goal_blocked");
        let stuck = steps(3, false, 5);
        assert_eq!(stuck.len(), 6);
        assert_eq!(stuck[1], stuck[4]);
    }
}
