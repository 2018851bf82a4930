//! Agents mode in the sub-agents part (`subagents.rs`): one chat of its
//! own with `settings: {agents: true}` (`auto`), whose main agent hands
//! jobs to workers with `task` (docs/api.md, "Agents mode"). Every 1 to 3 s
//! while the load lasts, when the chat is idle (no run queued, running or
//! waiting, nothing waiting to be sent):
//!
//! - its last run `interrupted` or `stopped` with a task open (a worker cut
//!   by a kill or left by a stop), or a `task` call with no result:
//!   `POST …/continue`, which resumes the worker first, then the main agent;
//! - else a turn: the main agent's answers scripted on its session
//!   (`chat-<chat>`): one turn in four first a `task` call whose brief holds
//!   a code fence (refused: no worker, no number), then `task` "Soak task
//!   #k" with a brief naming `tasks/k.md`, then the text `done #k`; worker
//!   n's on `chat-<chat>-task-<n>` (n: the chat's highest task number + 1):
//!   one worker in three first streams 300 tokens at 60 a second ending in
//!   a `list_files` call (a window of 5 s that the soak's kills and the
//!   part's stops cut mid-worker; the write comes in the next answer, so a
//!   cut loses only the listing), then `write_file tasks/k.md` holding `k`,
//!   then its report; one in three first a report without `Open:` (chatd
//!   asks again once), then the whole one. Then a message with no cue (the
//!   worker reads the person's words, and a cue there would steer its
//!   answers too). When engine-sim still holds the main agent's script (a
//!   kill lost its message, a cut took another answer), no new one is
//!   queued and the message takes it; a worker's script a turn left (its
//!   task never started) is handed out again by the next turn's call.
//!
//! While a worker's run is `running` (not queued for one of chatd's two run
//! slots), one step in five stops the chat (`POST …/stop`: both stop, the
//! task is left open), and once a run at least, past 35 % of the load; each
//! task is stopped once at most (its runs wait for a slot behind the soak's
//! chats, so stops over and over would leave nothing done); a later step
//! continues it. After the load the part waits (bounded) until no run of
//! the chat works, continuing it while its last run was cut with a task
//! open, a `task` call unanswered or a message waiting. The end's checks
//! are `agents_mode_checks.rs` (`Inv::AgentsMode`).

use super::*;

use std::collections::BTreeSet;

use reqwest::Method;
use tandem_tests::harness::wait_until;

use crate::subagents::{sim_queued, RIDE, SETTLE};

/// The tasks' titles: `Soak task #k`.
pub(crate) const TITLE: &str = "Soak task #";
/// A slow worker's first answer: tokens and pace (5 s), before its write.
const SLOW_TOKENS: u64 = 300;
const SLOW_TPS: u64 = 60;

/// What the chat's load did.
#[derive(Default)]
pub(crate) struct Tally {
    /// Turns sent (answered 202).
    pub(crate) turns: u64,
    /// Of them, waited as pending.
    pub(crate) pending: u64,
    /// Turns sent on a main agent's script not taken yet (no new one queued).
    pub(crate) leftover: u64,
    /// New turns whose call handed out a task an earlier turn scripted and
    /// no worker took (engine-sim still held the worker's script).
    pub(crate) reused: u64,
    /// Steps not taken: engine-sim refused its control routes (an outage).
    pub(crate) engine_away: u64,
    /// Requests that found chatd down (the soak kills it on purpose).
    pub(crate) down: u64,
    pub(crate) continues: u64,
    /// Continues answered 409 (nothing to continue).
    pub(crate) continues_refused: u64,
    pub(crate) stops: u64,
    /// Stops that found nothing to stop (409).
    pub(crate) stops_idle: u64,
    /// Steps that found the chat working and did nothing.
    pub(crate) busy: u64,
}

/// A worker's script, by its task number.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Script {
    /// The job: `tasks/<job>.md` holding `<job>`.
    pub(crate) job: u64,
    /// First 300 tokens at 60 a second, ending in a `list_files` call.
    pub(crate) slow: bool,
    /// First a report without `Open:`.
    pub(crate) short: bool,
}

/// A turn the part scripted for the main agent.
pub(crate) struct Turn {
    pub(crate) k: u64,
    /// The job its `task` call hands out.
    pub(crate) job: u64,
    /// The worker number it was scripted for.
    pub(crate) n: i64,
    /// First a `task` call whose brief holds a code fence.
    pub(crate) coded: bool,
}

/// What the part's Agents mode chat did, for the checks.
pub(crate) struct AgentsRun {
    pub(crate) chat: String,
    /// chatd's data folder: the workspace and chat.sqlite3 are under it.
    pub(crate) data: PathBuf,
    pub(crate) tally: Tally,
    pub(crate) turns: Vec<Turn>,
    pub(crate) scripts: BTreeMap<i64, Script>,
    /// Tasks open when a turn was sent instead of Continue (chatd ends them
    /// stopped); none is expected.
    pub(crate) abandoned: BTreeSet<i64>,
    /// Continues after the load, and why the wait gave up continuing.
    pub(crate) settle_continues: u64,
    /// Seconds from the end of the load until the chat was idle with no task
    /// open, or what was left.
    pub(crate) settled: Result<f64, String>,
}

/// The chat as one look sees it.
pub(crate) struct View {
    /// A run queued, running or waiting.
    pub(crate) active: bool,
    /// The status of its last run.
    pub(crate) last: Option<String>,
    pub(crate) pending: usize,
    /// The open task's number and id (state `running`).
    pub(crate) open: Option<(i64, String)>,
    /// The highest task number (0: none).
    pub(crate) highest: i64,
    /// `task` calls with no result.
    pub(crate) unanswered: usize,
}

/// Why a look failed.
enum Blind {
    /// chatd did not answer (its kills).
    Down,
    Odd(String),
}

/// chatd's data folder, from its environment (the same for every process).
pub(crate) fn data_dir(shared: &Shared) -> anyhow::Result<PathBuf> {
    let pid = shared.pid.load(Ordering::Relaxed);
    let environ = std::fs::read(format!("/proc/{pid}/environ"))
        .with_context(|| format!("reading chatd's (pid {pid}) environment"))?;
    environ
        .split(|b| *b == 0)
        .filter_map(|kv| kv.strip_prefix(b"QSE_CHAT_DATA="))
        .next_back()
        .map(|v| PathBuf::from(String::from_utf8_lossy(v).into_owned()))
        .context("QSE_CHAT_DATA in chatd's environment")
}

/// The chat, its load, the wait after it; `None` (and a violation) when the
/// chat could not be made.
pub(crate) async fn run(shared: &Shared, seed: u64, duration: f64) -> Option<AgentsRun> {
    let mut rng = StdRng::seed_from_u64(seed);
    let made = async {
        let data = data_dir(shared)?;
        let body = json!({"title": "soak agents mode", "permission_mode": "auto",
                          "settings": {"agents": true}});
        let chat = shared.new_chat(body, RIDE).await?;
        anyhow::Ok((data, chat))
    };
    let (data, chat) = match made.await {
        Ok(made) => made,
        Err(err) => {
            shared.violate(
                Inv::AgentsMode,
                format!("agents mode: could not start: {err:#}"),
            );
            return None;
        }
    };
    let mut run = AgentsRun {
        chat,
        data,
        tally: Tally::default(),
        turns: Vec::new(),
        scripts: BTreeMap::new(),
        abandoned: BTreeSet::new(),
        settle_continues: 0,
        settled: Err("not waited for".into()),
    };
    load(shared, &mut run, &mut rng, duration).await;
    let load_end = shared.t();
    let (settled, continues) = settle(shared, &run.chat).await;
    run.settle_continues = continues;
    run.settled = settled.map(|()| shared.t() - load_end);
    Some(run)
}

/// The chat's snapshot and tasks, as a [`View`].
async fn look(shared: &Shared, chat: &str) -> Result<View, Blind> {
    let snapshot = match shared
        .call(Method::GET, &format!("/conversations/{chat}"), None)
        .await
    {
        Ok((200, snapshot)) => snapshot,
        Ok((status, _)) => return Err(Blind::Odd(format!("snapshot → {status}"))),
        Err(_) => return Err(Blind::Down),
    };
    let tasks = match shared
        .call(Method::GET, &format!("/conversations/{chat}/tasks"), None)
        .await
    {
        Ok((200, tasks)) => tasks,
        Ok((status, _)) => return Err(Blind::Odd(format!("tasks → {status}"))),
        Err(_) => return Err(Blind::Down),
    };
    let runs = snapshot["runs"].as_array().cloned().unwrap_or_default();
    let rows = tasks["tasks"].as_array().cloned().unwrap_or_default();
    let answered: BTreeSet<&str> = snapshot["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["tool_call_id"].as_str())
        .collect();
    let unanswered = task_calls(&snapshot)
        .iter()
        .filter(|c| !answered.contains(c.id.as_str()))
        .count();
    Ok(View {
        active: runs
            .iter()
            .any(|r| matches!(r["status"].as_str(), Some("queued" | "running" | "waiting"))),
        last: runs
            .last()
            .and_then(|r| r["status"].as_str())
            .map(str::to_string),
        pending: snapshot["pending"].as_array().map_or(0, Vec::len),
        open: rows
            .iter()
            .find(|r| r["state"] == "running")
            .and_then(|r| Some((r["n"].as_i64()?, r["id"].as_str()?.to_string()))),
        highest: rows
            .iter()
            .filter_map(|r| r["n"].as_i64())
            .max()
            .unwrap_or(0),
        unanswered,
    })
}

/// One `task` call of the main agent, as its message holds it.
pub(crate) struct TaskCall {
    pub(crate) id: String,
    pub(crate) title: String,
    pub(crate) brief: String,
}

/// The chat's `task` calls, in order.
pub(crate) fn task_calls(snapshot: &Value) -> Vec<TaskCall> {
    snapshot["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["tool_calls"].as_array().into_iter().flatten())
        .filter(|c| c["function"]["name"] == "task")
        .map(|c| {
            let args: Value = c["function"]["arguments"]
                .as_str()
                .and_then(|a| serde_json::from_str(a).ok())
                .unwrap_or(Value::Null);
            TaskCall {
                id: c["id"].as_str().unwrap_or("").to_string(),
                title: args["title"].as_str().unwrap_or("").to_string(),
                brief: args["brief"].as_str().unwrap_or("").to_string(),
            }
        })
        .collect()
}

/// Turns, continues and stops while the load lasts.
async fn load(shared: &Shared, run: &mut AgentsRun, rng: &mut StdRng, duration: f64) {
    let mut phase = shared.phase.subscribe();
    let mut k = 0u64;
    // Tasks stopped once: each is stopped at most once, so it ends.
    let mut stopped: BTreeSet<i64> = BTreeSet::new();
    loop {
        // Pacing of the load, not a wait for anything.
        let pace = Duration::from_secs_f64(rng.random_range(1.0..3.0));
        if !sleep_in(&mut phase, pace, |p| p == Phase::Load).await {
            return;
        }
        let view = match look(shared, &run.chat).await {
            Ok(view) => view,
            Err(Blind::Down) => {
                run.tally.down += 1;
                continue;
            }
            Err(Blind::Odd(what)) => {
                shared.unexpected(format!("agents mode: {what}"));
                continue;
            }
        };
        if view.active {
            // A worker's run streams or runs a call (not queued for a slot):
            // one step in five stops it (and once a run, past 35 % of the load).
            let forced = run.tally.stops == 0 && shared.t() > 0.35 * duration;
            let worker = match &view.open {
                Some((n, id)) if !stopped.contains(n) && (forced || rng.random_bool(0.2)) => {
                    worker_running(shared, id).await.then_some(*n)
                }
                _ => None,
            };
            match worker {
                Some(n) => {
                    stopped.insert(n);
                    stop(shared, run).await;
                }
                None => run.tally.busy += 1,
            }
            continue;
        }
        // A `task` call left with no result by a cut run is taken up by
        // Continue too: a new turn would close it "not run" (and a worker
        // of it may have run).
        let cut = matches!(view.last.as_deref(), Some("interrupted" | "stopped"));
        if cut && (view.open.is_some() || view.unanswered > 0) {
            continue_chat(shared, run).await;
            continue;
        }
        if let Some((n, _)) = view.open {
            run.abandoned.insert(n);
        }
        k += 1;
        turn(shared, run, rng, k, view.highest).await;
    }
}

/// A brief naming `tasks/<job>.md`, with a code fence when `coded`.
pub(crate) fn brief(job: u64, coded: bool) -> String {
    let mut brief = format!(
        "Goal: write the number {job} into tasks/{job}.md\n\
         Files: tasks/{job}.md\n\
         Constraints: that file alone, holding the number and nothing else\n\
         Check: the file holds the number"
    );
    if coded {
        brief.push_str(&format!("\n```sh\nprintf {job} > tasks/{job}.md\n```"));
    }
    brief
}

/// A worker's report of `job`; `whole: false` leaves out `Open:`.
pub(crate) fn report(job: u64, whole: bool) -> String {
    let mut text = format!(
        "Wrote it.\n\n## Report\nStatus: done\nSummary: wrote {job} into tasks/{job}.md\n\
         Files: tasks/{job}.md\nChecks:\n- `write_file tasks/{job}.md`: wrote it"
    );
    if whole {
        text.push_str("\nOpen: none");
    }
    text
}

fn task_call(k: u64, job: u64, coded: bool) -> Value {
    let title = if coded {
        format!("{TITLE}{k} (with code)")
    } else {
        format!("{TITLE}{job}")
    };
    json!({"name": "task", "arguments": {"title": title, "brief": brief(job, coded),
           "expect": "what was written and the check"}})
}

/// Worker steps: a slow listing (one in three), the write, the report (one
/// in three first without `Open:`).
fn worker_steps(script: &Script) -> Vec<Value> {
    let job = script.job;
    let mut steps = Vec::new();
    if script.slow {
        steps.push(json!({"tokens": SLOW_TOKENS, "tps": SLOW_TPS,
                          "tool_calls": [{"name": "list_files", "arguments": {}}]}));
    }
    let write = json!({"name": "write_file",
                       "arguments": {"path": format!("tasks/{job}.md"), "content": job.to_string()}});
    steps.push(json!({"tool_calls": [write]}));
    if script.short {
        steps.push(json!({"text": report(job, false)}));
    }
    steps.push(json!({"text": report(job, true)}));
    steps
}

/// `next` queued on engine-sim's `session`; `None` when it was not taken
/// (engine-sim away; any other answer is also noted as unexpected).
async fn post_script(shared: &Shared, session: &str, next: Vec<Value>) -> Option<()> {
    let body = json!({"session": session, "next": next});
    let posted = shared
        .http
        .post(format!("{}/sim/faults", shared.sim_url))
        .json(&body)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .ok()?;
    if !posted.status().is_success() {
        shared.unexpected(format!("agents mode: /sim/faults → {}", posted.status()));
        return None;
    }
    Some(())
}

/// A turn: the main agent's script and worker n's (unless engine-sim still
/// holds one), then a message.
async fn turn(shared: &Shared, run: &mut AgentsRun, rng: &mut StdRng, k: u64, highest: i64) {
    let main = format!("chat-{}", run.chat);
    let Some(queued) = sim_queued(shared, &main).await else {
        run.tally.engine_away += 1;
        return;
    };
    if queued > 0 {
        run.tally.leftover += 1;
    } else {
        let n = highest + 1;
        let session = format!("chat-{}-task-{n}", run.chat);
        let Some(waiting) = sim_queued(shared, &session).await else {
            run.tally.engine_away += 1;
            return;
        };
        // Each shape comes early once: the first turn's worker is slow and
        // its call first has code, the second's worker first reports short.
        let first = run.turns.is_empty();
        let job = match run.scripts.get(&n) {
            Some(script) if waiting > 0 => {
                run.tally.reused += 1;
                script.job
            }
            _ => {
                let script = Script {
                    job: k,
                    slow: first || rng.random_bool(1.0 / 3.0),
                    short: run.turns.len() == 1 || rng.random_bool(1.0 / 3.0),
                };
                if waiting > 0 {
                    shared.unexpected(format!(
                        "agents mode: engine-sim holds a script for task {n} the part did not queue"
                    ));
                    return;
                }
                if post_script(shared, &session, worker_steps(&script))
                    .await
                    .is_none()
                {
                    run.tally.engine_away += 1;
                    return;
                }
                run.scripts.insert(n, script);
                k
            }
        };
        let coded = first || rng.random_bool(0.25);
        let mut steps = Vec::new();
        if coded {
            steps.push(json!({"tool_calls": [task_call(k, job, true)]}));
        }
        steps.push(json!({"tool_calls": [task_call(k, job, false)]}));
        steps.push(json!({"text": format!("done #{k}")}));
        if post_script(shared, &main, steps).await.is_none() {
            // The worker's script stays queued: the next turn hands it out.
            run.tally.engine_away += 1;
            return;
        }
        run.turns.push(Turn { k, job, n, coded });
    }
    let text = format!("Agents turn {k}: hand the next job to a worker.");
    match shared.send_text(&run.chat, &text).await {
        Ok((202, body)) => {
            run.tally.turns += 1;
            if body["pending_id"].is_string() {
                run.tally.pending += 1;
            }
        }
        Ok((status, body)) => shared.unexpected(format!(
            "agents mode: send → {status} {}",
            body["error"]["type"].as_str().unwrap_or("?")
        )),
        Err(_) => run.tally.down += 1,
    }
}

/// Whether the worker's last run is `running` (not queued for a slot).
async fn worker_running(shared: &Shared, id: &str) -> bool {
    match shared
        .call(Method::GET, &format!("/conversations/{id}"), None)
        .await
    {
        Ok((200, own)) => own["runs"]
            .as_array()
            .and_then(|r| r.last())
            .is_some_and(|r| r["status"] == "running"),
        _ => false,
    }
}

/// `POST …/continue`: the open worker first, then the main agent.
async fn continue_chat(shared: &Shared, run: &mut AgentsRun) {
    let path = format!("/conversations/{}/continue", run.chat);
    match shared.call(Method::POST, &path, Some(json!({}))).await {
        Ok((202, _)) => run.tally.continues += 1,
        Ok((409, _)) => run.tally.continues_refused += 1,
        Ok((status, body)) => shared.unexpected(format!(
            "agents mode: continue → {status} {}",
            body["error"]["type"].as_str().unwrap_or("?")
        )),
        Err(_) => run.tally.down += 1,
    }
}

/// `POST …/stop`: the main agent and its worker stop, the task left open.
async fn stop(shared: &Shared, run: &mut AgentsRun) {
    let path = format!("/conversations/{}/stop", run.chat);
    match shared.call(Method::POST, &path, Some(json!({}))).await {
        Ok((200, _)) => {
            run.tally.stops += 1;
            shared.fault("agents mode: a chat stopped while its worker ran");
        }
        Ok((409, _)) => run.tally.stops_idle += 1,
        Ok((status, body)) => shared.unexpected(format!(
            "agents mode: stop → {status} {}",
            body["error"]["type"].as_str().unwrap_or("?")
        )),
        Err(_) => run.tally.down += 1,
    }
}

/// Waits (bounded) until no run of the chat works, continuing it while its
/// last run was cut with a task open, a `task` call unanswered or a message
/// waiting (a Continue refused is not asked again: what is left then is for
/// the checks): `Ok` once idle, or what still worked; and how many
/// Continues it took.
async fn settle(shared: &Shared, chat: &str) -> (Result<(), String>, u64) {
    let last = Mutex::new(String::from("no answer yet"));
    let continues = AtomicU64::new(0);
    let refused = AtomicBool::new(false);
    let path = format!("/conversations/{chat}/continue");
    let settled = wait_until("the Agents mode chat to settle", SETTLE, || async {
        let view = match look(shared, chat).await {
            Ok(view) => view,
            Err(Blind::Down) => {
                *lock(&last) = "chatd did not answer".into();
                return None;
            }
            Err(Blind::Odd(what)) => {
                *lock(&last) = what;
                return None;
            }
        };
        if view.active {
            *lock(&last) = "a run queued, running or waiting".into();
            return None;
        }
        let cut = matches!(view.last.as_deref(), Some("interrupted" | "stopped"));
        let left = view.open.is_some() || view.unanswered > 0 || view.pending > 0;
        if cut && left && !refused.load(Ordering::Relaxed) {
            match shared.call(Method::POST, &path, Some(json!({}))).await {
                Ok((202, _)) => {
                    continues.fetch_add(1, Ordering::Relaxed);
                }
                Ok((status, body)) => {
                    refused.store(true, Ordering::Relaxed);
                    *lock(&last) = format!("a Continue answered {status} {}", body["error"]);
                }
                Err(_) => {}
            }
            return None;
        }
        Some(())
    })
    .await;
    let answer = match settled {
        Ok(()) => Ok(()),
        Err(_) => Err(lock(&last).clone()),
    };
    (answer, continues.load(Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_good_brief_has_its_four_lines_and_no_code_and_a_coded_one_a_fence() {
        let good = brief(7, false);
        for line in ["Goal:", "Files: tasks/7.md", "Constraints:", "Check:"] {
            assert!(good.lines().any(|l| l.starts_with(line)), "{good}");
        }
        assert!(!good.contains("```"), "{good}");
        assert!(brief(7, true).contains("\n```sh\n"));
    }

    #[test]
    fn a_short_report_leaves_out_open_only() {
        let (whole, short) = (report(3, true), report(3, false));
        assert!(whole.ends_with("\nOpen: none"), "{whole}");
        assert_eq!(format!("{short}\nOpen: none"), whole);
        let steps = worker_steps(&Script {
            job: 3,
            slow: true,
            short: true,
        });
        assert_eq!(steps.len(), 4);
        assert_eq!(steps[0]["tokens"], SLOW_TOKENS);
        assert_eq!(steps[1]["tool_calls"][0]["arguments"]["content"], "3");
    }
}
