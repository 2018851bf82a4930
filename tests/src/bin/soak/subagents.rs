//! The sub-agents part (`--parts subagents`): chatd's sub-agents
//! (`spawn_agent`) under the soak's load and chatd's SIGKILLs. Two chats of
//! its own in `auto`; every 1 to 4 s one of them takes a turn whose answer,
//! scripted for that chat alone (`POST /sim/faults` with its session), calls
//! `spawn_agent` 1 to 3 times (one call in four waits for its sub-agent, the
//! others go on in the background); now and then 5 background calls at once
//! (the 5th meets the cap of 4), now and then the words of a sub-agent
//! already started again, case and spaces changed (refused as the same
//! task). Each sub-agent's own answer is cued in its task (20 to 200 tokens
//! at 50 to 200 a second), and a `#n` keeps the tasks apart. One plain
//! call in four runs as the part's saved agent (`agent`; the chats have
//! saved agents switched on), which grants three read tools; at the start
//! the agent's file is exported and imported again (a new agent, the same
//! definition).
//!
//! Faults: the soak's own kills of chatd (a sub-agent cut while it streams is
//! taken up again; a call that waited on one is answered "goes on in the
//! background"), a stop of the parent (`POST …/stop`: its sub-agents stop
//! with it, and one in the background hands nothing back), a stop of one
//! sub-agent on its own route (`POST …/subagents/{id}/stop`: what it had
//! comes back). The list (`GET …/subagents`) is sampled twice a second for
//! the cap. After the load the part waits (bounded) until no sub-agent runs
//! and no run of its chats is left; the end's checks are
//! `subagents_checks.rs` (`Inv::Subagents`). Beside them, a chat with a
//! saved agent kept to a folder (`agent_folder.rs`, `Inv::AgentFolder`), and
//! a chat in Agents mode (`agents_mode.rs`, `Inv::AgentsMode`), and a chat
//! working toward goals by itself (`goals.rs`, `Inv::Goals`), and a chat
//! with loops on a clock the part moves (`loops.rs`, `Inv::Loops`).

use super::*;

use std::collections::BTreeSet;

use futures_util::future::BoxFuture;
use reqwest::Method;
use tandem_tests::harness::wait_until;

use crate::subagents_checks::check;

/// Chats of its own: the soak's chats carry the token answers that
/// `Inv::Answers` counts, which a sub-agent's result must not disturb.
const CHATS: usize = 2;
/// How long a request is asked again while chatd is down (its kills).
pub(crate) const RIDE: Duration = Duration::from_secs(45);
/// How long after the load the part waits for its sub-agents and its
/// chats' runs: they share chatd's two run slots with the soak's chats, so
/// as long as the soak's drain (110 s), inside the time the soak gives a
/// part after it (30 s more).
pub(crate) const SETTLE: Duration = Duration::from_secs(130);
/// The most sub-agents chatd runs for one chat in the background at once.
pub(crate) const BACKGROUND_MAX: usize = 4;

/// What a scripted call was meant to meet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// One of the 1 to 3 calls of a turn.
    Plain,
    /// One of 5 background calls in one answer: the 5th meets the cap.
    Five,
    /// A started sub-agent's words again: refused as the same task.
    Repeat,
}

/// One `spawn_agent` call the part scripted.
pub(crate) struct Planned {
    pub(crate) task: String,
    pub(crate) wait: bool,
    pub(crate) shape: Shape,
    /// Run as the part's saved agent (`agent`: its id).
    pub(crate) agent: bool,
}

/// The saved agent a plain call runs as, one in four: it grants less than
/// the chats have, so a sub-agent of it gets only that.
pub(crate) const HELPER: &str = "Soak helper";

/// What one chat's load did.
#[derive(Default)]
pub(crate) struct Tally {
    /// Turns sent (answered 202).
    pub(crate) turns: u64,
    /// Of them, waited as pending (the chat was working).
    pub(crate) pending: u64,
    /// Turns sent on a script not taken yet (no new one queued): its
    /// message lost to a kill, or the chat still working.
    pub(crate) leftover: u64,
    /// Turns not taken: engine-sim refused its control routes (an outage).
    pub(crate) engine_away: u64,
    /// Requests that found chatd down (the soak kills it on purpose).
    pub(crate) down: u64,
    pub(crate) parent_stops: u64,
    /// Stops of the parent that found no run and no sub-agent (409).
    pub(crate) parent_idle: u64,
    pub(crate) route_stops: u64,
    /// Stops of a sub-agent that had ended meanwhile (409 not_running).
    pub(crate) route_late: u64,
}

impl Tally {
    pub(crate) fn add(&mut self, other: &Tally) {
        self.turns += other.turns;
        self.pending += other.pending;
        self.leftover += other.leftover;
        self.engine_away += other.engine_away;
        self.down += other.down;
        self.parent_stops += other.parent_stops;
        self.parent_idle += other.parent_idle;
        self.route_stops += other.route_stops;
        self.route_late += other.route_late;
    }
}

/// One chat's load, for the checks.
pub(crate) struct ChatLoad {
    pub(crate) index: usize,
    pub(crate) id: String,
    pub(crate) planned: Vec<Planned>,
    /// Sub-agents a stop of the parent named (its answer's `subagents`).
    pub(crate) by_parent: BTreeSet<String>,
    /// Sub-agents stopped on their own route (answered 200).
    pub(crate) by_route: BTreeSet<String>,
    pub(crate) tally: Tally,
}

/// The list, sampled during the run.
#[derive(Default)]
pub(crate) struct Samples {
    pub(crate) taken: u64,
    /// Samples that found chatd down (its kills).
    pub(crate) down: u64,
    /// The most running in the background in one sample, of any chat.
    pub(crate) most: usize,
    /// Every sub-agent id a sample listed, by chat.
    pub(crate) seen: BTreeMap<String, BTreeSet<String>>,
    /// Samples over the cap: (chat, when, the ids running in the background).
    pub(crate) over: Vec<(String, f64, Vec<String>)>,
}

/// What the load did, for the checks.
pub(crate) struct Run {
    pub(crate) db: PathBuf,
    /// The saved agent's id (`HELPER`).
    pub(crate) agent: String,
    /// Its file exported and imported as a new agent with the same definition.
    pub(crate) round_trip: Result<(), String>,
    pub(crate) chats: Vec<ChatLoad>,
    pub(crate) samples: Samples,
    /// Seconds from the end of the load until nothing ran, or what still ran.
    pub(crate) settled: Result<f64, String>,
}

pub(crate) struct SubagentsPart {
    /// The load's length (s): each stop comes at least once past a share of it.
    duration: f64,
    /// The part's folder: the agent's folder is made in it.
    dir: PathBuf,
    run: Mutex<Option<Run>>,
    folder: Mutex<Option<crate::agent_folder::FolderRun>>,
    agents: Mutex<Option<crate::agents_mode::AgentsRun>>,
    goals: Mutex<Option<crate::goals::GoalsRun>>,
    loops: Mutex<Option<crate::loops::LoopsRun>>,
    skills: Mutex<Option<crate::skills::SkillsRun>>,
}

impl SubagentsPart {
    pub(crate) fn new(ctx: &Prepare) -> SubagentsPart {
        SubagentsPart {
            duration: ctx.duration,
            dir: ctx.dir.clone(),
            run: Mutex::new(None),
            folder: Mutex::new(None),
            agents: Mutex::new(None),
            goals: Mutex::new(None),
            loops: Mutex::new(None),
            skills: Mutex::new(None),
        }
    }
}

impl Part for SubagentsPart {
    fn name(&self) -> PartName {
        PartName::Subagents
    }

    /// chatd's loops go by the loops chat's clock file; its owner's
    /// skills are the part's (`skills.rs`).
    fn chatd_env(&self) -> Vec<(String, String)> {
        let clock = crate::loops::clock_file(&self.dir);
        let skills = crate::skills::skills_dir(&self.dir);
        let mut env = vec![(
            "QSE_CHAT_SKILLS_DIR".to_string(),
            skills.to_string_lossy().into_owned(),
        )];
        if crate::loops::prepare(&self.dir).is_ok() {
            env.push((
                "QSE_CHAT_CLOCK_FILE".into(),
                clock.to_string_lossy().into_owned(),
            ));
        }
        env
    }

    fn drive(self: Arc<Self>, shared: Arc<Shared>, seed: u64) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let mut rng = StdRng::seed_from_u64(seed);
            let (db, (agent, round_trip), ids) = match start(&shared).await {
                Ok(started) => started,
                Err(err) => {
                    shared.violate(
                        Inv::Subagents,
                        format!("sub-agents: could not start: {err:#}"),
                    );
                    return;
                }
            };
            let ended = AtomicBool::new(false);
            let seeds: Vec<u64> = ids.iter().map(|_| rng.random()).collect();
            let folder = crate::agent_folder::run(&shared, &self.dir, rng.random());
            let agents = crate::agents_mode::run(&shared, rng.random(), self.duration);
            let goals = crate::goals::run(&shared, rng.random());
            let loops = crate::loops::run(&shared, &self.dir, rng.random());
            let skills = crate::skills::run(&shared, &self.dir, rng.random());
            let work = async {
                let loads = futures_util::future::join_all(ids.iter().zip(seeds).enumerate().map(
                    |(i, (id, seed))| {
                        drive_chat(&shared, i, id.clone(), &agent, seed, self.duration)
                    },
                ))
                .await;
                let load_end = shared.t();
                let settled = settle(&shared, &ids, load_end).await;
                ended.store(true, Ordering::Relaxed);
                (loads, settled)
            };
            let (samples, (chats, settled), folder, agents, goals, loops, skills) = tokio::join!(
                sample(&shared, &ids, &ended),
                work,
                folder,
                agents,
                goals,
                loops,
                skills
            );
            *lock(&self.loops) = loops;
            *lock(&self.skills) = skills;
            *lock(&self.folder) = folder;
            *lock(&self.agents) = agents;
            *lock(&self.goals) = goals;
            *lock(&self.run) = Some(Run {
                db,
                agent,
                round_trip,
                chats,
                samples,
                settled,
            });
        })
    }

    fn finish(self: Arc<Self>, shared: Arc<Shared>) -> BoxFuture<'static, PartEnd> {
        Box::pin(async move {
            let folder = lock(&self.folder).take();
            let agents = lock(&self.agents).take();
            let goals = lock(&self.goals).take();
            let loops = lock(&self.loops).take();
            let skills = lock(&self.skills).take();
            let run = lock(&self.run).take();
            let mut totals = match run {
                Some(run) => check(&shared, &run).await,
                None => Vec::new(),
            };
            if let Some(folder) = folder {
                totals.extend(crate::agent_folder_checks::check(&shared, &folder).await);
            }
            if let Some(agents) = agents {
                totals.extend(crate::agents_mode_checks::check(&shared, &agents).await);
            }
            if let Some(goals) = goals {
                totals.extend(crate::goals::check(&shared, &goals).await);
            }
            if let Some(loops) = loops {
                totals.extend(crate::loops::check(&shared, &loops).await);
            }
            if let Some(skills) = skills {
                totals.extend(crate::skills::check(&shared, &skills).await);
            }
            PartEnd {
                totals,
                ..PartEnd::default()
            }
        })
    }
}

/// chatd's database (found in its environment, read by the checks), the
/// saved agent's id, and the chats of its own, in `auto` (a sub-agent's
/// token answer asks nothing) with saved agents switched on.
#[allow(clippy::type_complexity)]
async fn start(
    shared: &Shared,
) -> anyhow::Result<(PathBuf, (String, Result<(), String>), Vec<String>)> {
    let pid = shared.pid.load(Ordering::Relaxed);
    let environ = std::fs::read(format!("/proc/{pid}/environ"))
        .with_context(|| format!("reading chatd's (pid {pid}) environment"))?;
    let data = environ
        .split(|b| *b == 0)
        .filter_map(|kv| kv.strip_prefix(b"QSE_CHAT_DATA="))
        .next_back()
        .map(|v| PathBuf::from(String::from_utf8_lossy(v).into_owned()))
        .context("QSE_CHAT_DATA in chatd's environment")?;
    let helper = json!({"name": HELPER, "description": "Reads and searches the chat's files",
                        "instructions": "Answer briefly.", "tools": ["read_file", "grep", "list_files"]});
    // A kill may lose the answer to a made agent: another is made, and the
    // calls name this one by its id.
    let agent = wait_until("a saved agent of chatd", RIDE, || async {
        match shared
            .call(Method::POST, "/agents", Some(helper.clone()))
            .await
        {
            Ok((201, made)) => made["id"].as_str().map(String::from),
            _ => None,
        }
    })
    .await?;
    let round_trip = round_trip(shared, &agent, &helper).await;
    let mut ids = Vec::new();
    for i in 0..CHATS {
        let body = json!({"title": format!("soak sub-agents {i}"), "permission_mode": "auto"});
        let id = shared.new_chat(body, RIDE).await?;
        let path = format!("/conversations/{id}/builtins");
        wait_until("saved agents switched on", RIDE, || async {
            let on = json!({"on": ["saved_agents"]});
            matches!(
                shared.call(Method::PUT, &path, Some(on)).await,
                Ok((200, _))
            )
            .then_some(())
        })
        .await?;
        ids.push(id);
    }
    Ok((data.join("chat.sqlite3"), (agent, round_trip), ids))
}

/// The agent's file exported and imported again (kills may land between):
/// a new agent under a free name with the same definition, else why not.
async fn round_trip(shared: &Shared, agent: &str, made: &Value) -> Result<(), String> {
    let path = format!("/agents/{agent}/export");
    let file = wait_until("the agent's file", RIDE, || async {
        match shared.call(Method::GET, &path, None).await {
            Ok((200, file)) => Some(file),
            _ => None,
        }
    })
    .await
    .map_err(|e| format!("no export: {e:#}"))?;
    let imported = wait_until("the agent imported", RIDE, || async {
        match shared
            .call(Method::POST, "/agents/import", Some(file.clone()))
            .await
        {
            Ok((201, answer)) => Some(answer),
            _ => None,
        }
    })
    .await
    .map_err(|e| format!("no import: {e:#}"))?;
    let new = &imported["agent"];
    let name = new["name"].as_str().unwrap_or("");
    if new["id"] == agent || !name.starts_with(&format!("{HELPER} (")) {
        return Err(format!("the import is {} named {name:?}", new["id"]));
    }
    for field in ["description", "instructions", "tools"] {
        if new[field] != made[field] {
            return Err(format!(
                "the import's {field} is {}, not {}",
                new[field], made[field]
            ));
        }
    }
    Ok(())
}

/// One chat's turns and stops while the load lasts. Each kind of stop
/// comes at least once in a run, the scarce run slots notwithstanding: a
/// chat that has not stopped one of its sub-agents by 30 % of the load does
/// at its next step when one runs, and the second chat stops its parent
/// once past 45 % when a sub-agent of it runs (past 70 %, whatever runs).
async fn drive_chat(
    shared: &Shared,
    index: usize,
    id: String,
    agent: &str,
    seed: u64,
    duration: f64,
) -> ChatLoad {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut phase = shared.phase.subscribe();
    let mut load = ChatLoad {
        index,
        id,
        planned: Vec::new(),
        by_parent: BTreeSet::new(),
        by_route: BTreeSet::new(),
        tally: Tally::default(),
    };
    let (mut turn, mut n) = (0u64, 0u64);
    // Pacing of the load, not a wait for anything.
    while sleep_in(
        &mut phase,
        Duration::from_secs_f64(rng.random_range(1.0..4.0)),
        |p| p == Phase::Load,
    )
    .await
    {
        let t = shared.t();
        if load.tally.route_stops == 0
            && t > 0.3 * duration
            && stop_one(shared, &mut load, &mut rng).await
        {
            continue;
        }
        if index == 1 && load.tally.parent_stops == 0 && t > 0.45 * duration {
            let running = running(shared, &mut load).await;
            if running.is_some_and(|r| !r.is_empty()) || t > 0.7 * duration {
                stop_parent(shared, &mut load).await;
                continue;
            }
        }
        match rng.random_range(0..100) {
            0..=4 => stop_parent(shared, &mut load).await,
            5..=12 => {
                stop_one(shared, &mut load, &mut rng).await;
            }
            _ => {
                turn += 1;
                take_turn(shared, &mut load, &mut rng, (turn, agent), &mut n).await;
            }
        }
    }
    load
}

/// How many scripted answers of `session` engine-sim still holds; `None`
/// when it does not answer (an outage closes its socket, control routes too).
pub(crate) async fn sim_queued(shared: &Shared, session: &str) -> Option<usize> {
    let answer = shared
        .http
        .get(format!("{}/sim/faults?session={session}", shared.sim_url))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .ok()?;
    let body: Value = answer.json().await.ok()?;
    Some(body["next"].as_array().map_or(0, Vec::len))
}

/// A turn: the chat's next answer scripted to call `spawn_agent`, then a
/// message. A script not taken yet is not topped up: this message takes it.
async fn take_turn(
    shared: &Shared,
    load: &mut ChatLoad,
    rng: &mut StdRng,
    (turn, agent): (u64, &str),
    n: &mut u64,
) {
    let session = format!("chat-{}", load.id);
    let Some(queued) = sim_queued(shared, &session).await else {
        load.tally.engine_away += 1;
        return;
    };
    if queued > 0 {
        load.tally.leftover += 1;
    } else {
        let planned = plan(shared, load, rng, turn, n).await;
        let calls: Vec<Value> = planned
            .iter()
            .map(|p| {
                let mut arguments = json!({"task": p.task, "wait": p.wait});
                if p.agent {
                    arguments["agent"] = json!(agent);
                }
                json!({"name": "spawn_agent", "arguments": arguments})
            })
            .collect();
        let body = json!({"session": session, "next": [{"tool_calls": calls}]});
        let posted = shared
            .http
            .post(format!("{}/sim/faults", shared.sim_url))
            .json(&body)
            .timeout(Duration::from_secs(5))
            .send()
            .await;
        match posted {
            Ok(answer) if answer.status().is_success() => load.planned.extend(planned),
            Ok(answer) => {
                shared.unexpected(format!("sub-agents: /sim/faults → {}", answer.status()));
                return;
            }
            Err(_) => {
                load.tally.engine_away += 1;
                return;
            }
        }
    }
    let text = format!(
        "turn {turn} [sim tokens=2 tps=0 id=sa{}t{turn}]",
        load.index
    );
    match shared.send_text(&load.id, &text).await {
        Ok((202, body)) => {
            load.tally.turns += 1;
            if body["pending_id"].is_string() {
                load.tally.pending += 1;
            }
        }
        Ok((status, body)) => shared.unexpected(format!(
            "sub-agents: send → {status} {}",
            body["error"]["type"].as_str().unwrap_or("?")
        )),
        Err(_) => load.tally.down += 1,
    }
}

/// The calls of a turn: 1 to 3 (one in four waits), or 5 in the background
/// (one turn in eight), or a started one's words again beside 0 or 1 new
/// (one in eight). Scripts are scarce (a turn's run waits for one of
/// chatd's two run slots behind the soak's chats), so each shape comes
/// early once: the first chat's first script is the 5, the second's first
/// two in the background and one waited on, each chat's next a repeat.
async fn plan(
    shared: &Shared,
    load: &mut ChatLoad,
    rng: &mut StdRng,
    turn: u64,
    n: &mut u64,
) -> Vec<Planned> {
    let index = load.index;
    let mut fresh = |rng: &mut StdRng, k: usize, wait: bool, shape: Shape| {
        *n += 1;
        let tokens = rng.random_range(20..=200);
        let tps = rng.random_range(50..=200);
        Planned {
            task: format!(
                "Part {k} of turn {turn} #{n}\n[sim tokens={tokens} tps={tps} id=sa{index}n{n}]"
            ),
            wait,
            shape,
            agent: shape == Shape::Plain && rng.random_bool(0.25),
        }
    };
    let first = load.planned.is_empty();
    let has = |shape: Shape| load.planned.iter().any(|p| p.shape == shape);
    let (five, repeat) = (has(Shape::Five), has(Shape::Repeat));
    let roll = rng.random_range(0..100);
    if first && index == 1 {
        return vec![
            fresh(rng, 1, false, Shape::Plain),
            fresh(rng, 2, false, Shape::Plain),
            fresh(rng, 3, true, Shape::Plain),
        ];
    }
    if roll < 12 || (index == 0 && !five) {
        return (1..=5).map(|k| fresh(rng, k, false, Shape::Five)).collect();
    }
    if roll < 24 || !repeat {
        if let Some(task) = repeatable(shared, load, rng).await {
            let mut calls = vec![Planned {
                task: vary(&task, rng.random_bool(0.5)),
                wait: rng.random_bool(0.5),
                shape: Shape::Repeat,
                agent: false,
            }];
            if rng.random_bool(0.5) {
                let at = rng.random_range(0..=1);
                calls.insert(at, fresh(rng, 1, false, Shape::Plain));
            }
            return calls;
        }
    }
    let k = rng.random_range(1..=3);
    (1..=k)
        .map(|i| {
            let wait = rng.random_bool(0.25);
            fresh(rng, i, wait, Shape::Plain)
        })
        .collect()
}

/// A task of one of the chat's sub-agents that works on or ended done and
/// was not stopped with its parent (chatd refuses those words again; a
/// failed or stopped one's may be given again), from the list.
async fn repeatable(shared: &Shared, load: &mut ChatLoad, rng: &mut StdRng) -> Option<String> {
    let path = format!("/conversations/{}/subagents", load.id);
    let list = match shared.call(Method::GET, &path, None).await {
        Ok((200, list)) => list,
        Ok(_) => return None,
        Err(_) => {
            load.tally.down += 1;
            return None;
        }
    };
    let tasks: Vec<String> = list["subagents"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| matches!(r["state"].as_str(), Some("running" | "done")))
        .filter(|r| r["by_parent"] != true && r["agent_id"].is_null())
        .filter_map(|r| r["task"].as_str().map(str::to_string))
        .collect();
    (!tasks.is_empty()).then(|| tasks[rng.random_range(0..tasks.len())].clone())
}

/// The same task in other letters: its first line in capitals, or in small
/// letters with its spaces doubled; its cue as it was.
pub(crate) fn vary(task: &str, capitals: bool) -> String {
    let (first, rest) = task.split_once('\n').unwrap_or((task, ""));
    let first = if capitals {
        first.to_uppercase()
    } else {
        first
            .to_lowercase()
            .split(' ')
            .collect::<Vec<_>>()
            .join("  ")
    };
    if rest.is_empty() {
        first
    } else {
        format!("{first}\n{rest}")
    }
}

/// `POST …/stop` on the parent: its run and every sub-agent of it stop.
async fn stop_parent(shared: &Shared, load: &mut ChatLoad) {
    let path = format!("/conversations/{}/stop", load.id);
    match shared.call(Method::POST, &path, Some(json!({}))).await {
        Ok((200, body)) => {
            load.tally.parent_stops += 1;
            let named = body["subagents"].as_array().into_iter().flatten();
            load.by_parent
                .extend(named.filter_map(|s| s.as_str().map(str::to_string)));
        }
        Ok((409, _)) => load.tally.parent_idle += 1,
        Ok((status, body)) => shared.unexpected(format!(
            "sub-agents: stop of the parent → {status} {}",
            body["error"]["type"].as_str().unwrap_or("?")
        )),
        Err(_) => load.tally.down += 1,
    }
}

/// The chat's running sub-agents, from the list; `None` when chatd does not answer.
async fn running(shared: &Shared, load: &mut ChatLoad) -> Option<Vec<String>> {
    let path = format!("/conversations/{}/subagents", load.id);
    let list = match shared.call(Method::GET, &path, None).await {
        Ok((200, list)) => list,
        Ok((status, _)) => {
            shared.unexpected(format!("sub-agents: list → {status}"));
            return None;
        }
        Err(_) => {
            load.tally.down += 1;
            return None;
        }
    };
    Some(
        list["subagents"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| r["state"] == "running")
            .filter_map(|r| r["id"].as_str().map(str::to_string))
            .collect(),
    )
}

/// `POST …/subagents/{id}/stop` on one running sub-agent, picked from the
/// list; whether one ran to be stopped.
async fn stop_one(shared: &Shared, load: &mut ChatLoad, rng: &mut StdRng) -> bool {
    let running = running(shared, load).await.unwrap_or_default();
    if running.is_empty() {
        return false;
    }
    let path = format!("/conversations/{}/subagents", load.id);
    let sid = running[rng.random_range(0..running.len())].clone();
    match shared
        .call(Method::POST, &format!("{path}/{sid}/stop"), Some(json!({})))
        .await
    {
        Ok((200, body)) => {
            load.tally.route_stops += 1;
            if body["subagent_id"] != sid.as_str() {
                shared.violate(
                    Inv::Subagents,
                    format!(
                        "sub-agents: chat {}: the stop of {sid} answered {body}",
                        load.id
                    ),
                );
            }
            load.by_route.insert(sid);
        }
        Ok((409, body)) if body["error"]["type"] == "not_running" => load.tally.route_late += 1,
        Ok((status, body)) => shared.unexpected(format!(
            "sub-agents: stop of a sub-agent → {status} {}",
            body["error"]["type"].as_str().unwrap_or("?")
        )),
        Err(_) => load.tally.down += 1,
    }
    true
}

/// The list of each chat twice a second until the part's work has ended:
/// never more than [`BACKGROUND_MAX`] running in the background.
async fn sample(shared: &Shared, ids: &[String], ended: &AtomicBool) -> Samples {
    let mut samples = Samples::default();
    while !ended.load(Ordering::Relaxed) {
        for chat in ids {
            let path = format!("/conversations/{chat}/subagents");
            let list = match shared.call(Method::GET, &path, None).await {
                Ok((200, list)) => list,
                Ok((status, _)) => {
                    shared.unexpected(format!("sub-agents: list → {status}"));
                    continue;
                }
                Err(_) => {
                    samples.down += 1;
                    continue;
                }
            };
            samples.taken += 1;
            let seen = samples.seen.entry(chat.clone()).or_default();
            let mut background = Vec::new();
            for row in list["subagents"].as_array().into_iter().flatten() {
                let Some(id) = row["id"].as_str() else {
                    continue;
                };
                seen.insert(id.to_string());
                if row["state"] == "running" && row["wait"] == false {
                    background.push(id.to_string());
                }
            }
            let said = list["running_background"].as_u64().unwrap_or(0) as usize;
            samples.most = samples.most.max(background.len()).max(said);
            if background.len().max(said) > BACKGROUND_MAX {
                samples.over.push((chat.clone(), shared.t(), background));
            }
        }
        // Pacing of the samples, not a wait for anything.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    samples
}

/// Waits (bounded) until no sub-agent of the chats runs and no run of
/// theirs is queued, running or waiting: the seconds it took after the
/// load, or what still ran.
async fn settle(shared: &Shared, ids: &[String], load_end: f64) -> Result<f64, String> {
    let last = Mutex::new(String::from("no answer yet"));
    let last_seen = &last;
    let ended = wait_until(
        "the sub-agents and their chats' runs to end",
        SETTLE,
        move || async move {
            for chat in ids {
                if let Some(what) = busy(shared, chat).await {
                    *lock(last_seen) = what;
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
    match ended {
        Ok(()) => Ok(shared.t() - load_end),
        Err(_) => Err(lock(&last).clone()),
    }
}

/// What of `chat` still works (its sub-agents, its runs), or `None`.
async fn busy(shared: &Shared, chat: &str) -> Option<String> {
    let path = format!("/conversations/{chat}/subagents");
    let list = match shared.call(Method::GET, &path, None).await {
        Ok((200, list)) => list,
        other => return Some(format!("chat {chat}: the list answered {other:?}")),
    };
    let running: Vec<&str> = list["subagents"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["state"] == "running")
        .filter_map(|r| r["id"].as_str())
        .collect();
    if !running.is_empty() {
        return Some(format!(
            "chat {chat}: sub-agents {} still running",
            running.join(", ")
        ));
    }
    let snapshot = match shared.snapshot(chat).await {
        Ok(snapshot) => snapshot,
        Err(err) => return Some(format!("chat {chat}: {err:#}")),
    };
    let open: Vec<String> = snapshot["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| matches!(r["status"].as_str(), Some("queued" | "running" | "waiting")))
        .map(|r| format!("{} {}", r["id"], r["status"]))
        .collect();
    (!open.is_empty()).then(|| format!("chat {chat}: runs {}", open.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// chatd's same-task key: small letters, spaces collapsed.
    fn key(task: &str) -> String {
        task.split_whitespace()
            .map(str::to_lowercase)
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn a_varied_task_is_the_same_task_to_chatd_and_keeps_its_cue() {
        let task = "Part 2 of turn 7 #19\n[sim tokens=60 tps=80 id=sa0n19]";
        for capitals in [true, false] {
            let varied = vary(task, capitals);
            assert_ne!(varied, task);
            assert_eq!(key(&varied), key(task));
            assert!(
                varied.ends_with("\n[sim tokens=60 tps=80 id=sa0n19]"),
                "{varied}"
            );
        }
    }
}
