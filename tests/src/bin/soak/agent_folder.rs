//! A saved agent kept to one folder, in the sub-agents part
//! (`subagents.rs`): at the part's start a folder of the soak's own with a
//! few files, the agent "Soak folder" kept to it read only, and one chat
//! with that agent (`auto`). While the load lasts, every 1 to 3 s:
//!
//! - a turn, while no message of the chat waits: its next answer scripted
//!   to read `folder/<file>`, to write `folder/x.md` (refused: "may only
//!   read") and to write `own.md` in its own folder, then a message (it
//!   waits as pending when the chat works);
//! - the folder renamed away, only when the chat is idle: the first time
//!   once the first turn has ended, again after each chatd restart once a
//!   turn went to the new chatd (no turn is sent until the chat is idle),
//!   and one idle step in three. A message and a new chat with the agent
//!   are refused 409 `agent_folder_missing`, the agent shows its folder
//!   `missing`, and the chat's messages and waiting messages are as they
//!   were; renamed back, a message is taken again (202).
//!
//! The soak's kills of chatd land among them: a chatd started again loads
//! the agent's folder anew, and a write there is still refused. Once per
//! run it also drives the agents' routes nothing else touches: the
//! templates (`GET /agents/templates`, one made with `POST
//! /agents/templates/{id}/create`, then deleted), and after the load the
//! agent's run history (`GET /agents/{id}/runs`, which lists the chat and
//! no chat a refusal would have made), then the agent's deletion (its chat
//! refused 409 `agent_folder_missing` after it, storing nothing). The
//! end's checks are `Inv::AgentFolder`: the folder's files never changed,
//! every refused send stored nothing, every turn of the chat ended, each
//! tool call answered as the folder's mode says.

use super::*;

use reqwest::Method;
use tandem_tests::harness::wait_until;

use crate::subagents::{sim_queued, RIDE, SETTLE};

/// The agent's name.
pub(crate) const AGENT: &str = "Soak folder";
/// Titles of the chats asked for while the folder was away: none may exist.
const REFUSED_TITLE: &str = "soak folder refused";
/// The folder's files (a path inside it, the start of its text).
const FILES: [&str; 3] = ["a.md", "b.txt", "notes/c.md"];
/// The file a turn tries to write in the folder.
pub(crate) const INTRUDER: &str = "x.md";
/// The error type of a refusal for the folder.
pub(crate) const MISSING: &str = "agent_folder_missing";
/// The message sent once the agent is deleted (refused, never stored).
pub(crate) const DELETED_TEXT: &str = "after the deletion [sim tokens=2 tps=0 id=fdel]";

/// What the chat's load did.
#[derive(Default)]
pub(crate) struct Tally {
    /// Turns sent (answered 202).
    pub(crate) turns: u64,
    /// Of them, waited as pending (the chat was working).
    pub(crate) pending: u64,
    /// Of them, sent after chatd had been killed and started again.
    pub(crate) after_restart: u64,
    /// Turns sent on a script not taken yet (its message lost to a kill).
    pub(crate) leftover: u64,
    /// Turns not taken: engine-sim refused its control routes (an outage).
    pub(crate) engine_away: u64,
    /// Steps that found a message waiting, or the chat working while the
    /// folder was wanted away: nothing done.
    pub(crate) busy: u64,
    /// Requests that found chatd down (its kills).
    pub(crate) down: u64,
}

/// What the chat held: its messages and waiting messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Stored {
    pub(crate) messages: Vec<String>,
    pub(crate) pending: Vec<String>,
}

/// One time the folder was away.
pub(crate) struct Away {
    pub(crate) n: u64,
    pub(crate) t: f64,
    /// After chatd was killed and started again.
    pub(crate) after_restart: bool,
    /// The message sent meanwhile (its text) and the answer: status, error type.
    pub(crate) text: String,
    pub(crate) send: Result<(u16, String), String>,
    /// A new chat with the agent asked for meanwhile.
    pub(crate) create: Result<(u16, String), String>,
    /// The agent's folder state as `GET /agents/{id}` showed it.
    pub(crate) shown: String,
    pub(crate) before: Option<Stored>,
    pub(crate) after: Option<Stored>,
    /// The message sent once it was back: its status.
    pub(crate) back: Result<u16, String>,
}

/// What the folder's load did, for the checks.
pub(crate) struct FolderRun {
    pub(crate) folder: PathBuf,
    pub(crate) away_path: PathBuf,
    /// The folder's files at the start: path inside it → bytes.
    pub(crate) files: BTreeMap<String, Vec<u8>>,
    pub(crate) agent: String,
    pub(crate) chat: String,
    pub(crate) tally: Tally,
    pub(crate) aways: Vec<Away>,
    /// The texts written to `own.md` by the scripted turns.
    pub(crate) own_contents: Vec<String>,
    /// `own.md` read back after the load: its text, or why not.
    pub(crate) own_read: Result<Option<String>, String>,
    /// The templates round: what it did, or what went wrong.
    pub(crate) templates: Result<String, String>,
    /// The agent's run history after the load.
    pub(crate) history: Result<String, String>,
    /// The agent deleted, its chat refused: what happened, or what went wrong.
    pub(crate) deleted: Result<String, String>,
    /// Seconds from the end of the load until the chat was idle, or what still ran.
    pub(crate) settled: Result<f64, String>,
}

/// The folder, the agent, its chat, the load, the routes after it; `None`
/// (and a violation) when they could not be made.
pub(crate) async fn run(shared: &Shared, dir: &Path, seed: u64) -> Option<FolderRun> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut run = match start(shared, dir, &mut rng).await {
        Ok(run) => run,
        Err(err) => {
            shared.violate(
                Inv::AgentFolder,
                format!("agent folder: could not start: {err:#}"),
            );
            return None;
        }
    };
    load(shared, &mut run, &mut rng).await;
    let load_end = shared.t();
    let last = Mutex::new(String::from("no answer yet"));
    let idle = wait_until("the folder chat's runs to end", SETTLE, || async {
        match stored_idle(shared, &run.chat).await {
            Ok((_, true)) => Some(()),
            Ok((_, false)) => {
                *lock(&last) = "a run queued, running or waiting, or a message waiting".into();
                None
            }
            Err(err) => {
                *lock(&last) = err;
                None
            }
        }
    })
    .await;
    run.settled = match idle {
        Ok(()) => Ok(shared.t() - load_end),
        Err(_) => Err(lock(&last).clone()),
    };
    run.own_read = read_own(shared, &run.chat).await;
    run.history = history(shared, &run).await;
    run.deleted = delete_agent(shared, &run).await;
    Some(run)
}

/// The folder and its files, the templates round, the agent and its chat.
async fn start(shared: &Shared, dir: &Path, rng: &mut StdRng) -> anyhow::Result<FolderRun> {
    let folder = dir.join("agent-folder");
    let mut files = BTreeMap::new();
    let mark: u32 = rng.random();
    for name in FILES {
        let path = folder.join(name);
        std::fs::create_dir_all(path.parent().context("a parent")?)?;
        let text = format!("soak folder {name} {mark:08x}\n").into_bytes();
        std::fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
        files.insert(name.to_string(), text);
    }
    let templates = templates(shared, rng).await;
    let body = json!({"name": AGENT, "description": "Reads the soak's folder",
                      "folder": {"path": folder.to_string_lossy(), "mode": "read"}});
    let made = answer(shared, Method::POST, "/agents", Some(body)).await;
    let agent = match made {
        Ok((201, made)) => {
            let shown = &made["folder"];
            anyhow::ensure!(
                shown["mode"] == "read" && shown["state"] == "ok",
                "the agent was made with the folder {shown}"
            );
            made["id"].as_str().context("the agent's id")?.to_string()
        }
        other => bail!("making the agent answered {other:?}"),
    };
    let body = json!({"agent_id": agent, "title": "soak folder", "permission_mode": "auto"});
    let chat = shared.new_chat(body, RIDE).await?;
    Ok(FolderRun {
        away_path: dir.join("agent-folder-away"),
        folder,
        files,
        agent,
        chat,
        tally: Tally::default(),
        aways: Vec::new(),
        own_contents: Vec::new(),
        own_read: Ok(None),
        templates,
        history: Err("not asked".into()),
        deleted: Err("not asked".into()),
        settled: Err("not waited for".into()),
    })
}

/// `method path`, asked again while chatd is down (its kills): its answer.
pub(crate) async fn answer(
    shared: &Shared,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Result<(u16, Value), String> {
    wait_until("chatd to answer", RIDE, || async {
        shared.call(method.clone(), path, body.clone()).await.ok()
    })
    .await
    .map_err(|e| format!("{method} {path}: {e:#}"))
}

/// An answer as its status and error type.
fn refusal(answered: &Result<(u16, Value), String>) -> Result<(u16, String), String> {
    match answered {
        Ok((status, body)) => Ok((
            *status,
            body["error"]["type"].as_str().unwrap_or("").to_string(),
        )),
        Err(err) => Err(err.clone()),
    }
}

/// The starter templates listed (each granting nothing), one made as an
/// agent and deleted again.
async fn templates(shared: &Shared, rng: &mut StdRng) -> Result<String, String> {
    let listed = match answer(shared, Method::GET, "/agents/templates", None).await? {
        (200, listed) => listed,
        other => return Err(format!("the list answered {other:?}")),
    };
    let all = listed["templates"].as_array().cloned().unwrap_or_default();
    if all.is_empty() {
        return Err(format!("no template listed: {listed}"));
    }
    if let Some(t) = all.iter().find(|t| t["tools"] != json!([])) {
        return Err(format!("a template grants tools: {t}"));
    }
    let template = &all[rng.random_range(0..all.len())];
    let id = template["id"].as_str().unwrap_or("");
    let path = format!("/agents/templates/{id}/create");
    let made = match answer(shared, Method::POST, &path, Some(json!({}))).await? {
        (201, made) => made["agent"].clone(),
        other => return Err(format!("{path} answered {other:?}")),
    };
    let name = made["name"].as_str().unwrap_or("");
    let same = made["description"] == template["description"]
        && made["instructions"] == template["instructions"]
        && made["tools"] == json!([]);
    if !name.starts_with(template["name"].as_str().unwrap_or("?")) || !same {
        return Err(format!("{path} made {made}, not the template {template}"));
    }
    let made_id = made["id"].as_str().unwrap_or("");
    let at = format!("/agents/{made_id}");
    match answer(shared, Method::DELETE, &at, None).await? {
        (204, _) => {}
        other => return Err(format!("deleting the made agent answered {other:?}")),
    }
    match answer(shared, Method::GET, &at, None).await? {
        (404, _) => {}
        other => return Err(format!("the deleted agent still answers {other:?}")),
    }
    Ok(format!(
        "{} listed, {id:?} made as {name:?} and deleted",
        all.len()
    ))
}

/// The chat's messages and waiting messages, and whether it is idle (no
/// run queued, running or waiting, nothing waiting to be sent).
async fn stored_idle(shared: &Shared, chat: &str) -> Result<(Stored, bool), String> {
    let snapshot = shared.snapshot(chat).await.map_err(|e| format!("{e:#}"))?;
    let ids = |key: &str| -> Vec<String> {
        snapshot[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["id"].as_str().map(str::to_string))
            .collect()
    };
    let stored = Stored {
        messages: ids("messages"),
        pending: ids("pending"),
    };
    let working = snapshot["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|r| matches!(r["status"].as_str(), Some("queued" | "running" | "waiting")));
    let idle = !working && stored.pending.is_empty();
    Ok((stored, idle))
}

/// Turns and the folder away, while the load lasts. A turn is sent while
/// no message of the chat waits (so at most one waits behind its run). The
/// folder goes away only when the chat is idle: the first time once the
/// first turn has ended, again after each chatd restart once a turn was
/// sent to the new chatd (no turn is sent until the chat is idle), and at
/// random (one idle step in three).
async fn load(shared: &Shared, run: &mut FolderRun, rng: &mut StdRng) {
    let mut phase = shared.phase.subscribe();
    let generation = || lock(&shared.generations).len();
    let (mut n, mut turned, mut away_in) = (0u64, 0, generation());
    loop {
        // Pacing of the load, not a wait for anything.
        let pace = Duration::from_secs_f64(rng.random_range(1.0..3.0));
        if !sleep_in(&mut phase, pace, |p| p == Phase::Load).await {
            return;
        }
        let Ok((stored, idle)) = stored_idle(shared, &run.chat).await else {
            run.tally.down += 1;
            continue;
        };
        n += 1;
        let now = generation();
        let wanted = run.tally.turns > 0
            && (run.aways.is_empty() || (now > away_in && turned == now))
            || (idle && rng.random_bool(1.0 / 3.0));
        if wanted && idle {
            away_in = now;
            if !away(shared, run, n).await {
                return;
            }
        } else if wanted || !stored.pending.is_empty() {
            run.tally.busy += 1;
        } else if turn(shared, run, rng, n).await {
            turned = now;
        }
    }
}

/// A turn: the chat's next answer scripted to read a file of the folder,
/// write in it (refused) and write in its own folder, then a message;
/// whether chatd took it.
async fn turn(shared: &Shared, run: &mut FolderRun, rng: &mut StdRng, n: u64) -> bool {
    let session = format!("chat-{}", run.chat);
    match sim_queued(shared, &session).await {
        None => {
            run.tally.engine_away += 1;
            return false;
        }
        Some(queued) if queued > 0 => run.tally.leftover += 1,
        Some(_) => {
            let file = FILES[rng.random_range(0..FILES.len())];
            let own = format!("own {n}\n");
            let calls = json!([
                {"name": "read_file", "arguments": {"path": format!("folder/{file}")}},
                {"name": "write_file", "arguments": {"path": format!("folder/{INTRUDER}"), "content": format!("x {n}\n")}},
                {"name": "write_file", "arguments": {"path": "own.md", "content": own}},
            ]);
            let body = json!({"session": session, "next": [{"tool_calls": calls}]});
            let posted = shared
                .http
                .post(format!("{}/sim/faults", shared.sim_url))
                .json(&body)
                .timeout(Duration::from_secs(5))
                .send()
                .await;
            match posted {
                Ok(answer) if answer.status().is_success() => run.own_contents.push(own),
                Ok(answer) => {
                    shared.unexpected(format!("agent folder: /sim/faults → {}", answer.status()));
                    return false;
                }
                Err(_) => {
                    run.tally.engine_away += 1;
                    return false;
                }
            }
        }
    }
    let text = format!("folder turn {n} [sim tokens=2 tps=0 id=ft{n}]");
    match shared.send_text(&run.chat, &text).await {
        Ok((202, body)) => {
            run.tally.turns += 1;
            if body["pending_id"].is_string() {
                run.tally.pending += 1;
            }
            if lock(&shared.generations).len() > 1 {
                run.tally.after_restart += 1;
            }
            return true;
        }
        Ok((status, body)) => shared.violate(
            Inv::AgentFolder,
            format!(
                "agent folder: a turn's message with the folder there answered {status} {}",
                body["error"]
            ),
        ),
        Err(_) => run.tally.down += 1,
    }
    false
}

/// The folder renamed away: a message and a new chat refused, nothing
/// stored; renamed back: a message taken. Whether the folder is back.
async fn away(shared: &Shared, run: &mut FolderRun, n: u64) -> bool {
    let before = match stored_idle(shared, &run.chat).await {
        Ok((stored, true)) => stored,
        Ok(_) => {
            run.tally.busy += 1;
            return true;
        }
        Err(_) => {
            run.tally.down += 1;
            return true;
        }
    };
    if let Err(err) = std::fs::rename(&run.folder, &run.away_path) {
        shared.violate(
            Inv::AgentFolder,
            format!("agent folder: renaming it away: {err}"),
        );
        return true;
    }
    shared.fault("agent folder renamed away");
    let t = shared.t();
    let chat = run.chat.clone();
    let text = format!("away {n} [sim tokens=2 tps=0 id=fa{n}]");
    let path = format!("/conversations/{chat}/messages");
    let send = refusal(&answer(shared, Method::POST, &path, Some(json!({"text": text}))).await);
    let body = json!({"agent_id": run.agent, "title": format!("{REFUSED_TITLE} {n}"),
                      "permission_mode": "auto"});
    let create = refusal(&answer(shared, Method::POST, "/conversations", Some(body)).await);
    let shown = match answer(shared, Method::GET, &format!("/agents/{}", run.agent), None).await {
        Ok((200, agent)) => agent["folder"]["state"].as_str().unwrap_or("?").to_string(),
        other => format!("{other:?}"),
    };
    let after = wait_until("the chat's snapshot", RIDE, || async {
        stored_idle(shared, &chat).await.ok().map(|(s, _)| s)
    })
    .await
    .ok();
    if let Err(err) = std::fs::rename(&run.away_path, &run.folder) {
        shared.violate(
            Inv::AgentFolder,
            format!("agent folder: renaming it back: {err}"),
        );
        return false;
    }
    let back_text = format!("back {n} [sim tokens=2 tps=0 id=fb{n}]");
    let back = answer(
        shared,
        Method::POST,
        &path,
        Some(json!({"text": back_text})),
    )
    .await
    .map(|(status, _)| status);
    run.aways.push(Away {
        n,
        t,
        after_restart: lock(&shared.generations).len() > 1,
        text,
        send,
        create,
        shown,
        before: Some(before),
        after,
        back,
    });
    true
}

/// `own.md` of the chat's own folder, read through chatd (`None`: not there).
async fn read_own(shared: &Shared, chat: &str) -> Result<Option<String>, String> {
    let url = format!(
        "{}/v1/chat-app/conversations/{chat}/files/content?path=own.md",
        shared.chatd_url
    );
    let answered = shared
        .http
        .get(url)
        .header("x-forward-key", FORWARD_KEY)
        .timeout(Duration::from_secs(15))
        .send()
        .await
        .map_err(|e| format!("reading own.md: {e}"))?;
    match answered.status().as_u16() {
        200 => Ok(Some(answered.text().await.map_err(|e| e.to_string())?)),
        404 => Ok(None),
        status => Err(format!("reading own.md answered {status}")),
    }
}

/// The agent's run history lists its chat (ended) and no chat asked for
/// while its folder was away.
async fn history(shared: &Shared, run: &FolderRun) -> Result<String, String> {
    let path = format!("/agents/{}/runs", run.agent);
    let listed = match answer(shared, Method::GET, &path, None).await? {
        (200, listed) => listed,
        other => return Err(format!("{path} answered {other:?}")),
    };
    let runs = listed["runs"].as_array().cloned().unwrap_or_default();
    let Some(ours) = runs
        .iter()
        .find(|r| r["conversation_id"] == run.chat.as_str())
    else {
        return Err(format!(
            "{path} does not list the chat {}: {listed}",
            run.chat
        ));
    };
    if ours["running"] != false {
        return Err(format!(
            "{path} says the chat is running after the load: {ours}"
        ));
    }
    if let Some(made) = runs.iter().find(|r| {
        r["title"]
            .as_str()
            .is_some_and(|t| t.starts_with(REFUSED_TITLE))
    }) {
        return Err(format!(
            "{path} lists a chat asked for while the folder was away: {made}"
        ));
    }
    Ok(format!(
        "{} listed (total {}), the chat among them, last {}",
        runs.len(),
        listed["total"],
        ours["last_status"].as_str().unwrap_or("-")
    ))
}

/// The agent deleted: its chat is refused 409 `agent_gone` and
/// stores nothing (never widened to every file).
async fn delete_agent(shared: &Shared, run: &FolderRun) -> Result<String, String> {
    let before = stored_idle(shared, &run.chat).await?.0;
    let at = format!("/agents/{}", run.agent);
    match answer(shared, Method::DELETE, &at, None).await? {
        (204, _) => {}
        other => return Err(format!("DELETE {at} answered {other:?}")),
    }
    let path = format!("/conversations/{}/messages", run.chat);
    let body = json!({"text": DELETED_TEXT});
    let refused = refusal(&answer(shared, Method::POST, &path, Some(body)).await);
    let after = stored_idle(shared, &run.chat).await?.0;
    match refused? {
        (409, kind) if kind == "agent_gone" => {}
        other => return Err(format!("a message after the deletion answered {other:?}")),
    }
    if before != after {
        return Err(format!(
            "the refused message after the deletion changed the chat: {before:?} → {after:?}"
        ));
    }
    Ok("its chat refused 409 agent_gone, nothing stored".into())
}
