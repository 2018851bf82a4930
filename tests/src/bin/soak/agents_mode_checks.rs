//! `Inv::AgentsMode` at the end of the sub-agents part, for its chat in
//! Agents mode (`agents_mode.rs`), once the part's wait after the load is
//! over: from chatd's routes (the chat's snapshot and tasks, each worker's
//! conversation and task, the chat's change sets; asked again while chatd
//! is down), chat.sqlite3 opened read-only (the chat's `task_started` and
//! `task_done`, the workers' `run.retrying`) and the chat's workspace on
//! the disk:
//!
//! - the chat was idle within the wait, every run of it and of its workers
//!   ended, and no task was left behind by a turn sent instead of Continue;
//! - every task ended `done` (`stopped` only for one a turn abandoned), with
//!   one `task_started` and one `task_done`, asked again at most once, and
//!   its report handed back exactly once (its call's result, or a message
//!   or waiting message with its card);
//! - each `task` call has exactly one result; one with a code fence in its
//!   brief was refused and started no worker; every other call started
//!   exactly one (or was closed "not run" by a turn after a cut), so the
//!   tasks are as many as the calls that started one, numbered 1, 2, …;
//! - no worker's call has two results; each `tasks/k.md` a write made
//!   (`wrote …`) holds exactly `k` on the disk, was written once in the
//!   whole chat and is created once in the chat's change sets, touched by no
//!   other set (no write ran again after a Continue); every file under
//!   `tasks/` holds its own number;
//! - a worker that reported `Status: done` in its own words made its write,
//!   unless a cut explains it (its write answered "cut off", a run of it
//!   cut, or an engine retry took its next scripted answer);
//! - every done task's whole report is kept at `.tandem/tasks/<n>/report.md`
//!   (`# Task n: title`, the same as its row's), and its check lists the
//!   file its worker wrote as created.

use super::*;

use std::collections::BTreeSet;

use reqwest::Method;
use rusqlite::{Connection, OpenFlags};

use crate::agent_folder::answer;
use crate::agents_mode::{task_calls, AgentsRun};
use crate::subagents::SETTLE;

/// Pages of `…/files/changes` read at most.
const PAGES_MAX: usize = 200;

/// What the checks counted, for the summary.
#[derive(Default)]
struct Found {
    calls: u64,
    accepted: u64,
    refused: u64,
    refused_coded: u64,
    not_run: u64,
    states: BTreeMap<String, u64>,
    as_written: u64,
    asked_again: u64,
    built: u64,
    kept: u64,
    worker_continues: u64,
    worker_cut: u64,
    retried: u64,
    written: u64,
    lost: u64,
    cut_writes: u64,
    sets: u64,
    runs: BTreeMap<String, u64>,
    /// Reports handed back as the call's result, as a message, as a waiting message.
    as_call: u64,
    as_message: u64,
    as_waiting: u64,
    /// Messages still waiting at the end.
    waiting: u64,
}

/// A write of a worker that was done (`wrote …`).
struct Written {
    n: i64,
    path: String,
    content: String,
}

/// The events of `kinds` of the chat and of the conversations under it:
/// (kind, the task's id for `task_*`, the conversation for `run.retrying`).
fn counts(db: &Path, chat: &str, kinds: &[&str]) -> rusqlite::Result<Vec<(String, String)>> {
    let conn = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    let marks = vec!["?"; kinds.len()].join(", ");
    let sql = format!(
        "SELECT e.kind, e.conversation_id, e.data FROM events e \
         WHERE (e.conversation_id = ?1 OR e.conversation_id IN \
         (SELECT id FROM conversations WHERE parent_id = ?1)) AND e.kind IN ({marks})"
    );
    let mut statement = conn.prepare(&sql)?;
    let mut params: Vec<&dyn rusqlite::ToSql> = vec![&chat];
    for kind in kinds {
        params.push(kind);
    }
    let rows = statement
        .query_map(params.as_slice(), |r| {
            let kind: String = r.get(0)?;
            let conversation: String = r.get(1)?;
            let data: String = r.get(2)?;
            let data: Value = serde_json::from_str(&data).unwrap_or(Value::Null);
            let key = if kind == "run.retrying" {
                conversation
            } else {
                data["task_id"].as_str().unwrap_or("").to_string()
            };
            Ok((kind, key))
        })?
        .collect();
    rows
}

fn excerpt(text: &str) -> String {
    let cut: String = text.chars().take(160).collect();
    if cut.len() < text.len() {
        format!("{cut:?}…")
    } else {
        format!("{cut:?}")
    }
}

/// Tool results by their call's id.
fn results_of(snapshot: &Value) -> HashMap<String, Vec<String>> {
    let mut results: HashMap<String, Vec<String>> = HashMap::new();
    for m in snapshot["messages"].as_array().into_iter().flatten() {
        if m["role"] != "tool" {
            continue;
        }
        if let Some(call) = m["tool_call_id"].as_str() {
            let text = m["text"].as_str().unwrap_or("").to_string();
            results.entry(call.to_string()).or_default().push(text);
        }
    }
    results
}

/// `Inv::AgentsMode`; the summary's lines.
pub(crate) async fn check(shared: &Shared, run: &AgentsRun) -> Vec<String> {
    let chat = run.chat.as_str();
    let bad =
        |what: String| shared.violate(Inv::AgentsMode, format!("agents mode: chat {chat}: {what}"));
    let mut f = Found::default();
    if let Err(what) = &run.settled {
        bad(format!(
            "still working {} s after the load: {what}",
            SETTLE.as_secs()
        ));
    }
    for n in &run.abandoned {
        bad(format!(
            "task {n} was open while the chat's last run was neither interrupted nor stopped, so a turn was sent instead of Continue"
        ));
    }
    let snapshot = match answer(shared, Method::GET, &format!("/conversations/{chat}"), None).await
    {
        Ok((200, snapshot)) => snapshot,
        other => {
            bad(format!("no snapshot: {other:?}"));
            return summary(run, &f);
        }
    };
    let rows = match answer(
        shared,
        Method::GET,
        &format!("/conversations/{chat}/tasks"),
        None,
    )
    .await
    {
        Ok((200, tasks)) => tasks["tasks"].as_array().cloned().unwrap_or_default(),
        other => {
            bad(format!("no tasks: {other:?}"));
            return summary(run, &f);
        }
    };
    f.waiting = snapshot["pending"].as_array().map_or(0, Vec::len) as u64;
    for r in snapshot["runs"].as_array().into_iter().flatten() {
        let status = r["status"].as_str().unwrap_or("?");
        *f.runs.entry(status.to_string()).or_default() += 1;
        if !matches!(status, "done" | "stopped" | "failed" | "interrupted") {
            bad(format!(
                "the main agent's run {} is {status} at the end",
                r["id"]
            ));
        }
    }
    check_calls(&snapshot, &rows, &mut f, &bad);

    let db = run.data.join("chat.sqlite3");
    let events =
        counts(&db, chat, &["task_started", "task_done", "run.retrying"]).unwrap_or_else(|err| {
            bad(format!("its events in {}: {err}", db.display()));
            Vec::new()
        });
    let count = |kind: &str, key: &str| {
        events
            .iter()
            .filter(|(k, id)| k == kind && id == key)
            .count()
    };
    let workspace = run.data.join("workspaces").join(chat);
    let mut writes: Vec<Written> = Vec::new();
    for row in &rows {
        let id = row["id"].as_str().unwrap_or("");
        let n = row["n"].as_i64().unwrap_or(0);
        let state = row["state"].as_str().unwrap_or("?");
        *f.states.entry(state.to_string()).or_default() += 1;
        let bad = |what: String| bad(format!("task {n} ({id}): {what}"));
        match state {
            "done" => {}
            "stopped" if run.abandoned.contains(&n) => {}
            _ => bad(format!("it is {state} at the end")),
        }
        if state != "running" && !run.abandoned.contains(&n) {
            handed_back(&snapshot, row, &mut f, &bad);
        }
        let (started, done) = (count("task_started", id), count("task_done", id));
        if started != 1 || (state != "running" && done != 1) {
            bad(format!(
                "{started} task_started and {done} task_done events, not one each"
            ));
        }
        if row["report_asks"].as_i64().unwrap_or(0) > 1 {
            bad(format!(
                "asked again {} times, not once at most",
                row["report_asks"]
            ));
        }
        let Ok((200, own)) =
            answer(shared, Method::GET, &format!("/conversations/{id}"), None).await
        else {
            bad("no snapshot of its worker".into());
            continue;
        };
        let retried = count("run.retrying", id) > 0;
        f.retried += u64::from(retried);
        let mut cut = retried;
        for r in own["runs"].as_array().into_iter().flatten() {
            let status = r["status"].as_str().unwrap_or("?");
            if !matches!(status, "done" | "stopped" | "failed" | "interrupted") {
                bad(format!(
                    "its worker's run {} is {status} at the end",
                    r["id"]
                ));
            }
            if matches!(status, "stopped" | "interrupted") {
                f.worker_cut += 1;
                cut = true;
            }
            f.worker_continues += u64::from(r["mode"] == "continue");
        }
        let results = results_of(&own);
        let mut wrote = Vec::new();
        for call in own["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|m| m["tool_calls"].as_array().into_iter().flatten())
        {
            let call_id = call["id"].as_str().unwrap_or("");
            let name = call["function"]["name"].as_str().unwrap_or("");
            let texts = results.get(call_id).cloned().unwrap_or_default();
            if texts.len() > 1 {
                bad(format!(
                    "its {name} call {call_id} has {} results (ran twice?)",
                    texts.len()
                ));
            }
            if name != "write_file" {
                continue;
            }
            let args: Value = call["function"]["arguments"]
                .as_str()
                .and_then(|a| serde_json::from_str(a).ok())
                .unwrap_or(Value::Null);
            let path = args["path"].as_str().unwrap_or("").to_string();
            let content = args["content"].as_str().unwrap_or("").to_string();
            match texts.first() {
                Some(text) if text.starts_with(&format!("wrote {path}")) => {
                    wrote.push(path.clone());
                    writes.push(Written { n, path, content });
                }
                Some(text) if text.starts_with("cut off") => {
                    f.cut_writes += 1;
                    cut = true;
                }
                Some(text) => bad(format!("its write of {path} answered {}", excerpt(text))),
                None => cut = true,
            }
        }
        if state != "done" {
            continue;
        }
        let Ok((200, detail)) = answer(
            shared,
            Method::GET,
            &format!("/conversations/{chat}/tasks/{id}"),
            None,
        )
        .await
        else {
            bad("no answer for its task".into());
            continue;
        };
        let report = detail["task"]["report"].as_str().unwrap_or("");
        let kept = workspace.join(format!(".tandem/tasks/{n}/report.md"));
        match std::fs::read_to_string(&kept) {
            Ok(text)
                if text == report
                    && text.starts_with(&format!(
                        "# Task {n}: {}\n",
                        row["title"].as_str().unwrap_or("")
                    )) =>
            {
                f.kept += 1
            }
            Ok(text) => bad(format!(
                "its kept report is not its row's, or not headed `# Task {n}: title`: {}",
                excerpt(&text)
            )),
            Err(err) => bad(format!("no kept report at {}: {err}", kept.display())),
        }
        let built = report.contains("Report: built by chatd");
        if built {
            f.built += 1;
        } else if report.contains("Report: the worker's, asked again") {
            f.asked_again += 1;
        } else {
            f.as_written += 1;
        }
        for path in &wrote {
            if !report.contains(&format!("- created {path}\n")) {
                bad(format!("its worker wrote {path}, and its report's check does not list it as created: {}", excerpt(report)));
            }
        }
        if report.contains("\nStatus: done\n") && !built && wrote.is_empty() {
            if cut {
                f.lost += 1;
            } else {
                bad("its worker reported done with no write, and nothing cut it".into());
            }
        }
    }
    check_files(shared, run, &workspace, &writes, &mut f, &bad).await;
    summary(run, &f)
}

/// An ended task's report was handed back exactly once: as its call's
/// result (headed `[The report of task n`), or as a message or waiting
/// message with its card (the call then answered otherwise).
fn handed_back(snapshot: &Value, row: &Value, f: &mut Found, bad: &dyn Fn(String)) {
    let id = row["id"].as_str().unwrap_or("");
    let n = row["n"].as_i64().unwrap_or(0);
    let headline = format!("[The report of task {n} ");
    let results = results_of(snapshot);
    let call = results
        .get(row["call_id"].as_str().unwrap_or(""))
        .cloned()
        .unwrap_or_default();
    let as_call = call.iter().filter(|t| t.starts_with(&headline)).count();
    let carded = |key: &str| {
        snapshot[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["card"]["kind"] == "sub_agent_result" && m["card"]["subagent_id"] == id)
            .count()
    };
    let (as_message, as_waiting) = (carded("messages"), carded("pending"));
    f.as_call += as_call as u64;
    f.as_message += as_message as u64;
    f.as_waiting += as_waiting as u64;
    if as_call + as_message + as_waiting != 1 {
        bad(format!(
            "its report was handed back {as_call} times as its call's result, {as_message} as a message, {as_waiting} as a waiting message, not once; its call answered {:?}",
            call.iter().map(|t| excerpt(t)).collect::<Vec<_>>()
        ));
    }
}

/// Each `task` call has one result; a brief with code was refused and
/// started nothing; every other call started exactly one worker or was
/// closed "not run"; the tasks are the calls that started one, numbered 1, 2, ….
fn check_calls(snapshot: &Value, rows: &[Value], f: &mut Found, bad: &dyn Fn(String)) {
    let results = results_of(snapshot);
    let calls = task_calls(snapshot);
    let mut by_call: HashMap<&str, Vec<i64>> = HashMap::new();
    for row in rows {
        by_call
            .entry(row["call_id"].as_str().unwrap_or(""))
            .or_default()
            .push(row["n"].as_i64().unwrap_or(0));
    }
    for call in &calls {
        f.calls += 1;
        let texts = results.get(&call.id).cloned().unwrap_or_default();
        if texts.len() != 1 {
            bad(format!(
                "the task call {} ({:?}) has {} results, not one",
                call.id,
                call.title,
                texts.len()
            ));
        }
        let text = texts.first().map(String::as_str).unwrap_or("");
        let coded = call.brief.contains("```");
        let started = by_call.get(call.id.as_str()).cloned().unwrap_or_default();
        if text.starts_with("refused:") {
            f.refused += 1;
            f.refused_coded += u64::from(coded);
            if !coded {
                bad(format!(
                    "the call {} with a good brief was refused: {}",
                    call.id,
                    excerpt(text)
                ));
            }
            if !started.is_empty() {
                bad(format!(
                    "the call {} was refused, yet started tasks {started:?}",
                    call.id
                ));
            }
            continue;
        }
        if coded {
            bad(format!(
                "the call {} with a code fence in its brief was not refused: {}",
                call.id,
                excerpt(text)
            ));
        }
        match started.len() {
            1 => f.accepted += 1,
            0 if text.starts_with("not run:") => f.not_run += 1,
            k => bad(format!(
                "the call {} started {k} workers ({started:?}), answered {}",
                call.id,
                excerpt(text)
            )),
        }
    }
    let ids: BTreeSet<&str> = calls.iter().map(|c| c.id.as_str()).collect();
    for (call, ns) in &by_call {
        if !ids.contains(call) {
            bad(format!(
                "tasks {ns:?} were started by the call {call}, which is not in the chat"
            ));
        }
    }
    if rows.len() as u64 != f.accepted {
        bad(format!(
            "{} tasks for {} task calls that started one",
            rows.len(),
            f.accepted
        ));
    }
    let ns: Vec<i64> = rows.iter().filter_map(|r| r["n"].as_i64()).collect();
    let want: Vec<i64> = (1..=rows.len() as i64).collect();
    if ns != want {
        bad(format!("the tasks are numbered {ns:?}, not 1, 2, …"));
    }
}

/// Every write made holds its number on the disk, once in the chat and
/// created once in the change sets; every file under `tasks/` holds its number.
async fn check_files(
    shared: &Shared,
    run: &AgentsRun,
    workspace: &Path,
    writes: &[Written],
    f: &mut Found,
    bad: &(dyn Fn(String) + Sync),
) {
    let mut by_path: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for w in writes {
        by_path.entry(&w.path).or_default().push(w.n);
        let number = w
            .path
            .strip_prefix("tasks/")
            .and_then(|p| p.strip_suffix(".md"))
            .unwrap_or("?");
        if w.content != number {
            bad(format!(
                "task {} wrote {:?} into {} (the part scripted its number)",
                w.n, w.content, w.path
            ));
        }
        match std::fs::read_to_string(workspace.join(&w.path)) {
            Ok(text) if text == w.content => {}
            Ok(text) => bad(format!("{} holds {text:?}, not {:?}", w.path, w.content)),
            Err(err) => bad(format!("{} written by task {}: {err}", w.path, w.n)),
        }
    }
    f.written = by_path.len() as u64;
    for (path, ns) in &by_path {
        if ns.len() > 1 {
            bad(format!(
                "{path} was written {} times (tasks {ns:?})",
                ns.len()
            ));
        }
    }
    if let Ok(dir) = std::fs::read_dir(workspace.join("tasks")) {
        for entry in dir.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let number = name.strip_suffix(".md").unwrap_or("?");
            match std::fs::read_to_string(entry.path()) {
                Ok(text) if text == number => {}
                Ok(text) => bad(format!("tasks/{name} holds {}", excerpt(&text))),
                Err(err) => bad(format!("tasks/{name}: {err}")),
            }
        }
    }
    // The chat's change sets, every page: each file of tasks/ created once.
    let mut ops: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut before: Option<i64> = None;
    for page in 0.. {
        if page == PAGES_MAX {
            bad(format!("…/files/changes did not end in {PAGES_MAX} pages"));
            break;
        }
        let query = before.map_or("limit=200".to_string(), |b| format!("before={b}&limit=200"));
        let path = format!("/conversations/{}/files/changes?{query}", run.chat);
        let body = match answer(shared, Method::GET, &path, None).await {
            Ok((200, body)) => body,
            other => {
                bad(format!("{path} answered {other:?}"));
                return;
            }
        };
        for set in body["changes"].as_array().into_iter().flatten() {
            let mut ours = false;
            for change in set["changes"].as_array().into_iter().flatten() {
                let Some(p) = change["path"].as_str().filter(|p| p.starts_with("tasks/")) else {
                    continue;
                };
                ours = true;
                let op = change["op"].as_str().unwrap_or("?");
                ops.entry(p.to_string())
                    .or_default()
                    .push(format!("{op} (set {}, {})", set["rev"], set["origin"]));
            }
            f.sets += u64::from(ours);
        }
        match body["next_before"].as_i64() {
            Some(next) => before = Some(next),
            None => break,
        }
    }
    for path in by_path.keys() {
        let seen = ops.get(*path).cloned().unwrap_or_default();
        if seen.len() != 1 || !seen[0].starts_with("created ") {
            bad(format!(
                "{path} in the change sets: {seen:?}, not created once"
            ));
        }
    }
    for (path, seen) in &ops {
        let created = seen.iter().filter(|s| s.starts_with("created ")).count();
        if created > 1 {
            bad(format!(
                "{path} created {created} times in the change sets: {seen:?}"
            ));
        }
    }
}

fn shown(map: &BTreeMap<String, u64>) -> String {
    if map.is_empty() {
        return "none".into();
    }
    map.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn summary(run: &AgentsRun, f: &Found) -> Vec<String> {
    let t = &run.tally;
    let scripts = run.scripts.values();
    let slow = scripts.clone().filter(|s| s.slow).count();
    let short = scripts.filter(|s| s.short).count();
    let coded = run.turns.iter().filter(|t| t.coded).count();
    let mut plan: Vec<String> = run
        .turns
        .iter()
        .take(10)
        .map(|t| format!("#{} job {} task {}", t.k, t.job, t.n))
        .collect();
    if run.turns.len() > 10 {
        plan.push("…".into());
    }
    vec![
        format!(
            "agents mode: its chat: {} turns sent ({} waited as pending, {} on a script not taken yet, {} handing out a job a worker had not taken), {} steps not taken while engine-sim was away, {} found it working, {} requests found chatd down; {} Continues ({} refused), {} stops while a worker ran ({} found nothing to stop); after the load {} Continues, {}",
            t.turns, t.pending, t.leftover, t.reused, t.engine_away, t.busy, t.down,
            t.continues, t.continues_refused, t.stops, t.stops_idle, run.settle_continues,
            match &run.settled {
                Ok(s) => format!("idle {s:.1} s after the load"),
                Err(_) => "NOT idle".into(),
            }
        ),
        format!(
            "agents mode: scripted {} turns ({}; {coded} first with a brief holding code), {} workers ({slow} slow, {short} first reporting without Open:); task calls: {} ({} started a worker, {} refused, {} of them for code, {} closed not run), each with one result",
            run.turns.len(), plan.join(", "), run.scripts.len(), f.calls, f.accepted, f.refused, f.refused_coded, f.not_run
        ),
        format!(
            "agents mode: tasks: {}; reports: {} as the worker wrote them, {} asked again once, {} built by chatd; {} kept in .tandem/tasks/<n>/report.md; handed back {} as the call's result, {} as a message, {} as a waiting message; workers: {} runs of mode continue, {} runs cut (stopped or interrupted), {} with engine retries",
            shown(&f.states), f.as_written, f.asked_again, f.built, f.kept,
            f.as_call, f.as_message, f.as_waiting,
            f.worker_continues, f.worker_cut, f.retried
        ),
        format!(
            "agents mode: files: {} tasks/<k>.md written, each holding k, created once in the change sets ({} sets touched tasks/); {} workers reported done without their write (a cut took it), {} writes answered \"cut off … not run again\"; the main agent's runs: {}; {} messages still waiting",
            f.written, f.sets, f.lost, f.cut_writes, shown(&f.runs), f.waiting
        ),
    ]
}
