//! Skills in the sub-agents part (`subagents.rs`): the owner's skills folder
//! is the part's (`QSE_CHAT_SKILLS_DIR`), and one chat of its own uses four
//! skills while they change under it (docs/api.md, "Skills"). Every 1 to
//! 3 s while the load lasts:
//!
//! - one look in two writes version v+1 of a skill `soak-k`, through `PUT
//!   /skills/soak-k` or by hand as an editor saves (a temp file renamed over
//!   `SKILL.md`); every version's procedure says `SOAK-SKILL k VERSION v`;
//! - one in five puts a broken folder in the layer or takes it away (a
//!   `SKILL.md` over 64 KiB, or one with no front matter): it never serves;
//! - while the chat is idle, a turn: its model scripted to call `load_skill
//!   soak-k` and then `read_file`, sent as `/soak-j words` (a message with
//!   skill j) or plain; one turn in three first switches the chat's file
//!   tools off or on (`PUT …/builtins`), and the message says which.
//!
//! After the load the part waits (bounded) until no run of the chat works.
//! `check` (`Inv::Skills`): every `/soak-j` send was taken (202); every
//! message sent with a skill carries a version of it that was written, and
//! every load_skill result a whole version written (never a torn or a
//! broken file), or a refusal when chatd was asked in the instant a kill
//! took; the broken folder never serves; every run ended; a read_file in a
//! turn sent with the file tools off was refused for that switch, and one
//! sent with them on was not.

use super::*;

use reqwest::Method;
use rusqlite::{Connection, OpenFlags};

use crate::subagents::{sim_queued, RIDE, SETTLE};

/// The skills the chat uses.
const SKILLS: u64 = 4;

#[derive(Default, Debug)]
pub(crate) struct Tally {
    pub(crate) versions: u64,
    pub(crate) by_hand: u64,
    pub(crate) broken: u64,
    pub(crate) turns: u64,
    pub(crate) skill_sends: u64,
    pub(crate) flips: u64,
    pub(crate) down: u64,
}

pub(crate) struct SkillsRun {
    pub(crate) chat: String,
    pub(crate) data: PathBuf,
    pub(crate) tally: Tally,
    /// The versions written of each skill (1 is the first).
    pub(crate) written: Vec<u64>,
    /// Whether the chat's file tools are off, as chatd last said; `None`
    /// after a switch whose answer a kill took.
    pub(crate) files_off: Option<bool>,
    pub(crate) settled: Result<f64, String>,
}

/// What a turn's message says of the file tools.
const FILES_OFF: &str = "[files off]";
const FILES_ON: &str = "[files on]";
/// The words of a refusal for a switched-off group.
const SWITCHED: &str = "which the person switched off for this chat";

/// The owner's skills folder chatd reads, in the part's folder.
pub(crate) fn skills_dir(dir: &Path) -> PathBuf {
    dir.join("skills")
}

fn text_of(k: u64, v: u64) -> String {
    format!(
        "---\nname: soak-{k}\ndescription: Soak skill {k}, version {v}\n---\n\nSOAK-SKILL {k} VERSION {v}\n{}\n",
        "Step by step. ".repeat(40)
    )
}

/// Writes `soak-k` at version `v` as an editor saves: a temp file renamed over.
fn by_hand(dir: &Path, k: u64, v: u64) -> std::io::Result<()> {
    let folder = skills_dir(dir).join(format!("soak-{k}"));
    std::fs::create_dir_all(&folder)?;
    let temp = folder.join(".SKILL.md.swp");
    std::fs::write(&temp, text_of(k, v))?;
    std::fs::rename(temp, folder.join("SKILL.md"))
}

pub(crate) async fn run(shared: &Shared, dir: &Path, seed: u64) -> Option<SkillsRun> {
    let mut rng = StdRng::seed_from_u64(seed);
    let made = async {
        for k in 0..SKILLS {
            by_hand(dir, k, 1)?;
        }
        let data = crate::agents_mode::data_dir(shared)?;
        let chat = shared
            .new_chat(
                json!({"title": "soak skills", "permission_mode": "auto"}),
                RIDE,
            )
            .await?;
        anyhow::Ok((data, chat))
    };
    let (data, chat) = match made.await {
        Ok(made) => made,
        Err(err) => {
            shared.violate(Inv::Skills, format!("skills: could not start: {err:#}"));
            return None;
        }
    };
    let mut run = SkillsRun {
        chat,
        data,
        tally: Tally::default(),
        written: vec![1; SKILLS as usize],
        files_off: Some(false),
        settled: Err("not waited for".into()),
    };
    load(shared, dir, &mut run, &mut rng).await;
    let load_end = shared.t();
    run.settled =
        crate::loops::settled(shared, &run.chat, load_end, "the skills chat to settle").await;
    Some(run)
}

async fn load(shared: &Shared, dir: &Path, run: &mut SkillsRun, rng: &mut StdRng) {
    let mut phase = shared.phase.subscribe();
    let broken = skills_dir(dir).join("soak-broken");
    loop {
        // Pacing of the load, not a wait for anything.
        let pace = Duration::from_secs_f64(rng.random_range(1.0..3.0));
        if !sleep_in(&mut phase, pace, |p| p == Phase::Load).await {
            return;
        }
        if rng.random_bool(0.5) {
            let k = rng.random_range(0..SKILLS);
            let v = run.written[k as usize] + 1;
            // Counted before it is asked: a kill may take the answer of a
            // write that landed, and the check must know that version.
            run.written[k as usize] = v;
            if rng.random_bool(0.5) {
                match by_hand(dir, k, v) {
                    Ok(()) => run.tally.by_hand += 1,
                    Err(e) => shared.unexpected(format!("skills: by hand: {e}")),
                }
            } else {
                let body = json!({"body": text_of(k, v).split("---\n\n").nth(1).unwrap_or(""),
                                  "description": format!("Soak skill {k}, version {v}")});
                match shared
                    .call(Method::PUT, &format!("/skills/soak-{k}"), Some(body))
                    .await
                {
                    Ok((200, _)) => run.tally.versions += 1,
                    Ok((status, body)) => {
                        shared.unexpected(format!("skills: PUT → {status} {body}"))
                    }
                    Err(_) => run.tally.down += 1,
                }
            }
        }
        if rng.random_bool(0.2) {
            let there = broken.exists();
            let _ = std::fs::remove_dir_all(&broken);
            if !there {
                let text = if rng.random_bool(0.5) {
                    format!(
                        "---\nname: soak-broken\ndescription: d\n---\n{}",
                        "x".repeat(70_000)
                    )
                } else {
                    "no front matter".to_string()
                };
                let made = std::fs::create_dir_all(&broken)
                    .and_then(|()| std::fs::write(broken.join("SKILL.md"), text));
                if made.is_ok() {
                    run.tally.broken += 1;
                }
            }
        }
        turn(shared, run, rng).await;
    }
}

/// A turn while the chat is idle and the sim holds none of its script.
async fn turn(shared: &Shared, run: &mut SkillsRun, rng: &mut StdRng) {
    let session = format!("chat-{}", run.chat);
    let Some(0) = sim_queued(shared, &session).await else {
        return;
    };
    let Ok((200, snapshot)) = shared
        .call(Method::GET, &format!("/conversations/{}", run.chat), None)
        .await
    else {
        run.tally.down += 1;
        return;
    };
    if snapshot["conversation"]["state"] != "idle" {
        return;
    }
    if rng.random_bool(0.33) {
        let off = !run.files_off.unwrap_or(false);
        let body = json!({"off": if off { vec!["files"] } else { Vec::new() }});
        let path = format!("/conversations/{}/builtins", run.chat);
        match shared.call(Method::PUT, &path, Some(body)).await {
            Ok((200, _)) => {
                run.files_off = Some(off);
                run.tally.flips += 1;
            }
            Ok((status, body)) => shared.violate(
                Inv::Skills,
                format!("skills: PUT builtins → {status} {body}"),
            ),
            Err(_) => {
                run.files_off = None;
                run.tally.down += 1;
            }
        }
    }
    let k = rng.random_range(0..SKILLS);
    let call =
        json!({"tool_calls": [{"name": "load_skill", "arguments": {"name": format!("soak-{k}")}}]});
    let read =
        json!({"tool_calls": [{"name": "read_file", "arguments": {"path": "soak-notes.md"}}]});
    let body = json!({"session": session, "next": [call, read, {"text": "Done with the skill."}]});
    let posted = shared
        .http
        .post(format!("{}/sim/faults", shared.sim_url))
        .json(&body)
        .timeout(Duration::from_secs(5))
        .send()
        .await;
    if !posted.is_ok_and(|p| p.status().is_success()) {
        return;
    }
    let with_skill = rng.random_bool(0.5);
    let files = match run.files_off {
        Some(true) => FILES_OFF,
        Some(false) => FILES_ON,
        None => "",
    };
    let text = if with_skill {
        format!(
            "/soak-{} do the soak job {files}",
            rng.random_range(0..SKILLS)
        )
    } else {
        format!("do the soak job {files}")
    };
    match shared.send_text(&run.chat, &text).await {
        Ok((202, _)) => {
            run.tally.turns += 1;
            run.tally.skill_sends += u64::from(with_skill);
        }
        Ok((status, body)) => shared.violate(
            Inv::Skills,
            format!("skills: send {text:?} → {status} {body}"),
        ),
        Err(_) => run.tally.down += 1,
    }
}

/// `(skill record's name and body, or none; load_skill results' texts;
/// each read_file result's text with its turn's message)`.
type Seen = (Vec<(String, String)>, Vec<String>, Vec<(String, String)>);

fn seen(db: &Path, chat: &str) -> rusqlite::Result<Seen> {
    let conn = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    let mut records = Vec::new();
    let mut statement = conn.prepare(
        "SELECT attachments FROM messages WHERE conversation_id = ?1 AND role = 'user' \
         AND attachments IS NOT NULL",
    )?;
    for row in statement.query_map([chat], |r| r.get::<_, String>(0))? {
        let value: Value = serde_json::from_str(&row?).unwrap_or(Value::Null);
        for r in value.as_array().into_iter().flatten() {
            if r["kind"] == "skill" {
                let name = r["name"].as_str().unwrap_or("").to_string();
                records.push((name, r["body"].as_str().unwrap_or("").to_string()));
            }
        }
    }
    let mut statement = conn.prepare(
        "SELECT t.text FROM messages t WHERE t.conversation_id = ?1 AND t.role = 'tool' \
         AND EXISTS (SELECT 1 FROM messages a WHERE a.id = t.parent_id \
                     AND a.tool_calls LIKE '%load_skill%')",
    )?;
    let results = statement
        .query_map([chat], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<String>>>()?;
    Ok((records, results, reads(&conn, chat)?))
}

/// Each read_file result with the message of its turn (up the parents to
/// the person's line).
fn reads(conn: &Connection, chat: &str) -> rusqlite::Result<Vec<(String, String)>> {
    let mut statement = conn.prepare(
        "SELECT id, parent_id, role, text, COALESCE(tool_calls, '') FROM messages \
         WHERE conversation_id = ?1",
    )?;
    type Row = (Option<String>, String, String, String);
    let mut all: std::collections::HashMap<String, Row> = std::collections::HashMap::new();
    for row in statement.query_map([chat], |r| {
        Ok((
            r.get::<_, String>(0)?,
            (r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?),
        ))
    })? {
        let (id, row) = row?;
        all.insert(id, row);
    }
    let mut out = Vec::new();
    for (parent, role, text, _) in all.values() {
        let call = parent.as_ref().and_then(|p| all.get(p));
        if role != "tool" || !call.is_some_and(|c| c.3.contains("\"read_file\"")) {
            continue;
        }
        let mut up = parent.clone();
        // Bounded: a path is at most every message of the chat.
        for _ in 0..all.len() {
            match up.as_ref().and_then(|p| all.get(p)) {
                Some((_, r, t, _)) if r == "user" => {
                    out.push((t.clone(), text.clone()));
                    break;
                }
                Some((p, _, _, _)) => up = p.clone(),
                None => break,
            }
        }
    }
    Ok(out)
}

/// Whether `text` holds a whole version of skill `k` that was written.
fn a_version(text: &str, written: &[u64]) -> bool {
    written.iter().enumerate().any(|(k, last)| {
        (1..=*last).any(|v| {
            text.contains(&format!("SOAK-SKILL {k} VERSION {v}\n"))
                && text.contains(&"Step by step. ".repeat(40).trim_end().to_string())
        })
    })
}

/// `Inv::Skills`; the summary's lines.
pub(crate) async fn check(shared: &Shared, run: &SkillsRun) -> Vec<String> {
    let chat = run.chat.as_str();
    let bad = |what: String| shared.violate(Inv::Skills, format!("skills: chat {chat}: {what}"));
    if let Err(what) = &run.settled {
        bad(format!(
            "still working {} s after the load: {what}",
            SETTLE.as_secs()
        ));
    }
    let (records, results, reads) = match seen(&run.data.join("chat.sqlite3"), chat) {
        Ok(seen) => seen,
        Err(e) => {
            bad(format!("the store could not be read: {e}"));
            return Vec::new();
        }
    };
    for (name, body) in &records {
        if !name.starts_with("soak-") || !a_version(body, &run.written) {
            bad(format!(
                "a message ran {name} with a text never written: {body:.80}"
            ));
        }
    }
    let mut loaded = 0;
    for text in &results {
        if a_version(text, &run.written) {
            loaded += 1;
        } else if !text.contains("cut off") && !text.contains("not run") {
            bad(format!(
                "load_skill answered what was never written: {text:.120}"
            ));
        }
    }
    let mut switched = 0;
    for (asked, result) in &reads {
        let refused = result.contains(SWITCHED);
        let cut = result.contains("cut off") || result.contains("not run");
        if asked.contains(FILES_OFF) && !refused && !cut {
            bad(format!(
                "read_file ran in a turn sent with the file tools off: {result:.120}"
            ));
        }
        if asked.contains(FILES_ON) && refused {
            bad(format!(
                "read_file was refused as switched off in a turn sent with the file tools on: \
                 {result:.120}"
            ));
        }
        switched += u64::from(refused);
    }
    if let Ok((200, listed)) = shared.call(Method::GET, "/skills", None).await {
        let serving = listed["skills"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|s| s["name"] == "soak-broken");
        if serving {
            bad("a broken skill folder serves".into());
        }
    }
    let t = &run.tally;
    vec![format!(
        "skills: {} versions by PUT, {} by hand, {} broken folders, {} turns ({} with a skill), \
         {} skill messages and {loaded} load_skill results checked, {} file-tool switches, {} \
         read_file results checked ({switched} refused as switched off), {} looks while chatd \
         was down",
        t.versions,
        t.by_hand,
        t.broken,
        t.turns,
        t.skill_sends,
        records.len(),
        t.flips,
        reads.len(),
        t.down
    )]
}
