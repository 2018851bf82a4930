//! Loops in the sub-agents part (`subagents.rs`): one chat of its own with
//! two interval loops (`1m`, `2m`) and, while none is, a self-paced one
//! (docs/api.md, "Loops"). chatd's loop clock is a file this part owns
//! (`QSE_CHAT_CLOCK_FILE`): every 1 to 3 s of the load it moves 61 s on, so
//! loops come due over and over in a short soak. Beside that, one step in
//! five sends a slow message of the person's (the chat is busy when a loop
//! comes due: that run is skipped), one in ten pauses or resumes a loop.
//! The soak's kills cut loop runs (each counts a failure). The sim answers
//! with plain text, so a self-paced loop's run calls neither loop tool and
//! the loop ends with its note; the part makes a new one then.
//!
//! After the load the part waits (bounded) until no run of the chat works.
//! `check` (`Inv::Loops`): every run ended and no loop still says
//! `running`; each loop's user lines are runs 1 to `runs`, each once, and
//! each line was answered by one run at most; failures never past 3 on an
//! active loop.

use super::*;

use reqwest::Method;
use rusqlite::{Connection, OpenFlags};
use tandem_tests::harness::{set_clock_file, wait_until};

use crate::agent_folder::answer;
use crate::subagents::{RIDE, SETTLE};

/// Where the loop clock starts.
const T0_MS: i64 = 1_796_644_800_000; // 2026-12-07T12:00:00Z
/// A slow message of the person's: tokens and pace (4 s).
const SLOW_TOKENS: u64 = 240;
const SLOW_TPS: u64 = 60;

#[derive(Default, Debug)]
pub(crate) struct Tally {
    pub(crate) ticks: u64,
    pub(crate) busy_sends: u64,
    pub(crate) pauses: u64,
    pub(crate) resumes: u64,
    pub(crate) self_paced: u64,
    pub(crate) down: u64,
}

pub(crate) struct LoopsRun {
    pub(crate) chat: String,
    pub(crate) data: PathBuf,
    pub(crate) tally: Tally,
    pub(crate) settled: Result<f64, String>,
}

/// The clock file chatd's loops go by, in the part's folder.
pub(crate) fn clock_file(dir: &Path) -> PathBuf {
    dir.join("loops-clock")
}

fn rfc(ms: i64) -> String {
    tandem_shared::clock::rfc3339(ms)
}

/// Sets the loop clock before chatd starts.
pub(crate) fn prepare(dir: &Path) -> anyhow::Result<()> {
    set_clock_file(&clock_file(dir), &rfc(T0_MS))
}

pub(crate) async fn run(shared: &Shared, dir: &Path, seed: u64) -> Option<LoopsRun> {
    let mut rng = StdRng::seed_from_u64(seed);
    let made = async {
        let data = crate::agents_mode::data_dir(shared)?;
        let chat = shared
            .new_chat(json!({"title": "soak loops"}), RIDE)
            .await?;
        for (prompt, interval) in [("Soak loop A: check.", "1m"), ("Soak loop B: look.", "2m")] {
            let path = format!("/conversations/{chat}/loops");
            let body = json!({"prompt": prompt, "interval": interval});
            let (status, made) = shared.call(Method::POST, &path, Some(body)).await?;
            anyhow::ensure!(status == 201, "make a loop → {status} {made}");
            // The chat's first loop waits for the yes; the next starts at once.
            if made["state"] == "pending" {
                let id = made["id"].as_str().unwrap_or("");
                let (status, _) = shared
                    .call(
                        Method::PUT,
                        &format!("{path}/{id}"),
                        Some(json!({"state": "active"})),
                    )
                    .await?;
                anyhow::ensure!(status == 200, "say yes to a loop → {status}");
            }
        }
        anyhow::Ok((data, chat))
    };
    let (data, chat) = match made.await {
        Ok(made) => made,
        Err(err) => {
            shared.violate(Inv::Loops, format!("loops: could not start: {err:#}"));
            return None;
        }
    };
    let mut run = LoopsRun {
        chat,
        data,
        tally: Tally::default(),
        settled: Err("not waited for".into()),
    };
    load(shared, dir, &mut run, &mut rng).await;
    let load_end = shared.t();
    run.settled = settled(shared, &run.chat, load_end, "the loops chat to settle").await;
    Some(run)
}

/// Waits (bounded) until no run of `chat` works: the seconds it took from
/// `load_end`, or what still ran.
pub(crate) async fn settled(
    shared: &Shared,
    chat: &str,
    load_end: f64,
    what: &str,
) -> Result<f64, String> {
    let settled = wait_until(what, SETTLE, || async {
        let (status, snapshot) = shared
            .call(Method::GET, &format!("/conversations/{chat}"), None)
            .await
            .ok()?;
        let working = snapshot["runs"]
            .as_array()?
            .iter()
            .any(|r| matches!(r["status"].as_str(), Some("queued" | "running" | "waiting")));
        (status == 200 && !working).then_some(())
    })
    .await;
    settled
        .map(|()| shared.t() - load_end)
        .map_err(|e| format!("{e:#}"))
}

async fn load(shared: &Shared, dir: &Path, run: &mut LoopsRun, rng: &mut StdRng) {
    let mut phase = shared.phase.subscribe();
    let mut now = T0_MS;
    let path = format!("/conversations/{}/loops", run.chat);
    loop {
        // Pacing of the load, not a wait for anything.
        let pace = Duration::from_secs_f64(rng.random_range(1.0..3.0));
        if !sleep_in(&mut phase, pace, |p| p == Phase::Load).await {
            return;
        }
        now += 61_000;
        if set_clock_file(&clock_file(dir), &rfc(now)).is_err() {
            shared.unexpected("loops: the clock file was not written".into());
            continue;
        }
        run.tally.ticks += 1;
        let Ok((200, listed)) = shared.call(Method::GET, &path, None).await else {
            run.tally.down += 1;
            continue;
        };
        let loops = listed["loops"].as_array().cloned().unwrap_or_default();
        if rng.random_bool(0.2) {
            let text = format!("A slow question [sim tokens={SLOW_TOKENS} tps={SLOW_TPS}]");
            match shared.send_text(&run.chat, &text).await {
                Ok((202, _)) => run.tally.busy_sends += 1,
                Ok((status, _)) => shared.unexpected(format!("loops: send → {status}")),
                Err(_) => run.tally.down += 1,
            }
        }
        if rng.random_bool(0.1) {
            let interval: Vec<&Value> =
                loops.iter().filter(|l| l["interval"].is_string()).collect();
            if let Some(lp) = interval.get(rng.random_range(0..interval.len().max(1))) {
                let state = if lp["state"] == "active" {
                    "paused"
                } else {
                    "active"
                };
                let id = lp["id"].as_str().unwrap_or("");
                match shared
                    .call(
                        Method::PUT,
                        &format!("{path}/{id}"),
                        Some(json!({ "state": state })),
                    )
                    .await
                {
                    Ok((200, _)) if state == "paused" => run.tally.pauses += 1,
                    Ok((200, _)) => run.tally.resumes += 1,
                    Ok((409, _)) => {}
                    Ok((status, _)) => shared.unexpected(format!("loops: {state} → {status}")),
                    Err(_) => run.tally.down += 1,
                }
            }
        }
        let self_paced = loops
            .iter()
            .any(|l| l["interval"].is_null() && l["state"] != "ended");
        if !self_paced {
            // The ended ones go, as a person dismisses them.
            for lp in loops.iter().filter(|l| l["state"] == "ended") {
                let id = lp["id"].as_str().unwrap_or("");
                let _ = shared
                    .call(Method::DELETE, &format!("{path}/{id}"), None)
                    .await;
            }
            let body = json!({"prompt": "Soak loop C: watch, self-paced."});
            match shared.call(Method::POST, &path, Some(body)).await {
                Ok((201, _)) => run.tally.self_paced += 1,
                Ok((409, _)) => {}
                Ok((status, _)) => shared.unexpected(format!("loops: self-paced → {status}")),
                Err(_) => run.tally.down += 1,
            }
        }
    }
}

/// The user lines loops sent: `(loop id, run, runs that answered it)`.
fn lines(db: &Path, chat: &str) -> rusqlite::Result<Vec<(String, i64, i64)>> {
    let conn = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    let mut statement = conn.prepare(
        "SELECT u.loop_id, u.loop_run, (SELECT COUNT(DISTINCT a.run_id) FROM messages a \
         WHERE a.parent_id = u.id AND a.role = 'assistant') FROM messages u \
         WHERE u.conversation_id = ?1 AND u.loop_id IS NOT NULL ORDER BY u.rowid",
    )?;
    let rows = statement
        .query_map([chat], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect();
    rows
}

/// `Inv::Loops`; the summary's lines.
pub(crate) async fn check(shared: &Shared, run: &LoopsRun) -> Vec<String> {
    let chat = run.chat.as_str();
    let bad = |what: String| shared.violate(Inv::Loops, format!("loops: chat {chat}: {what}"));
    if let Err(what) = &run.settled {
        bad(format!(
            "still working {} s after the load: {what}",
            SETTLE.as_secs()
        ));
    }
    let snapshot = match answer(shared, Method::GET, &format!("/conversations/{chat}"), None).await
    {
        Ok((200, snapshot)) => snapshot,
        other => {
            bad(format!("no snapshot: {other:?}"));
            return Vec::new();
        }
    };
    for r in snapshot["runs"].as_array().into_iter().flatten() {
        let status = r["status"].as_str().unwrap_or("?");
        if !matches!(
            status,
            "done" | "stopped" | "failed" | "interrupted" | "paused"
        ) {
            bad(format!("run {} is {status} at the end", r["id"]));
        }
    }
    let loops = snapshot["loops"].as_array().cloned().unwrap_or_default();
    let (mut runs, mut skipped, mut failures) = (0, 0, 0);
    for lp in &loops {
        runs += lp["runs"].as_i64().unwrap_or(0);
        skipped += lp["skipped"].as_i64().unwrap_or(0);
        failures += lp["failures"].as_i64().unwrap_or(0);
        if lp["running"] == true {
            bad(format!("loop {} still says running at the end", lp["id"]));
        }
        if lp["state"] == "active" && lp["failures"].as_i64().unwrap_or(0) >= 3 {
            bad(format!(
                "loop {} is active with {} failures",
                lp["id"], lp["failures"]
            ));
        }
    }
    let db = run.data.join("chat.sqlite3");
    match lines(&db, chat) {
        Ok(lines) => {
            for lp in &loops {
                let id = lp["id"].as_str().unwrap_or("");
                let numbers: Vec<i64> = lines.iter().filter(|l| l.0 == id).map(|l| l.1).collect();
                let expected: Vec<i64> = (1..=lp["runs"].as_i64().unwrap_or(0)).collect();
                if numbers != expected {
                    bad(format!(
                        "loop {id}'s user lines are runs {numbers:?}, not {expected:?}"
                    ));
                }
            }
            for (id, n, answered) in &lines {
                if *answered > 1 {
                    bad(format!(
                        "loop {id}'s run {n} was answered by {answered} runs"
                    ));
                }
            }
        }
        Err(err) => bad(format!("its loop lines in {}: {err}", db.display())),
    }
    let t = &run.tally;
    vec![format!(
        "loops: {} clock ticks of 61 s, {runs} loop runs ({skipped} skipped while busy, {failures} \
         failures now), {} busy sends, {} pauses, {} resumes, {} self-paced made, {} down; settled {}",
        t.ticks,
        t.busy_sends,
        t.pauses,
        t.resumes,
        t.self_paced,
        t.down,
        match &run.settled {
            Ok(s) => format!("in {s:.1} s"),
            Err(e) => format!("not: {e}"),
        }
    )]
}
