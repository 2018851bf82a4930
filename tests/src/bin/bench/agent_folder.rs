//! Figure 18e: a saved agent kept to one folder, on a real chatd (defaults)
//! and engine-sim at tps=0; each chat's answers scripted per chat
//! (`/sim/faults` with its session): one step of one tool call, then a
//! one-token answer. Every chat is new and in `auto`; times are taken in
//! the bench when the run's `run.finished` arrives on the chat's event
//! stream (read by a task of its own, stamped on receipt), as figure 18's.
//!
//! - read: a turn whose one call is `read_file folder/notes/2026/12/a.md`
//!   (4,096 bytes, its folder 3 levels deep in the agent's folder, which
//!   is `<temp>/a/b/c/notes-root` on the box) in a chat of a read-only
//!   folder agent, send to `run.finished`; against the same turn reading
//!   `notes/2026/12/a.md` (the same bytes, the same depth) in a plain
//!   chat's own folder. Every access under `folder/` opens the agent's
//!   folder one name at a time from `/` (O_NOFOLLOW), and chatd looks at
//!   the folder (canonicalize + is_dir) before each tool call.
//! - list: a turn whose one call is `list_files .` in a chat of a
//!   read-only folder agent whose folder holds 2,000 files (20 folders of
//!   100), against the same 2,000 files in a plain chat's own folder.
//!
//! The four kinds are taken in turn. The engine's request log splits each
//! turn: the engine's first answer's end (the call) to chatd's next
//! request, which is chatd's time running the call.

use std::path::Path;

use super::*;

use tandem_tests::harness::tool_results;

use crate::subagents::{self, p50_p95, turn, Turn, Watch};

/// The read file: 4,096 bytes, its first line a mark the result must hold.
const MARK: &str = "MARK-18E-NOTES";
const FILE_BYTES: usize = 4_096;
/// Where it is, inside the agent's folder and inside a plain chat's own.
const NOTE: &str = "notes/2026/12/a.md";
/// The listed files: `DIRS` folders of `PER_DIR`.
const DIRS: usize = 20;
const PER_DIR: usize = 100;

fn note_bytes() -> Vec<u8> {
    let mut text = format!("{MARK}\n");
    while text.len() < FILE_BYTES {
        text.push_str("a line of the notes, to be read back by the model whole.\n");
    }
    text.truncate(FILE_BYTES - 1);
    text.push('\n');
    text.into_bytes()
}

/// The 2,000 listed files, under `root`.
fn put_listed(root: &Path) -> anyhow::Result<()> {
    for d in 0..DIRS {
        let dir = root.join(format!("d{d:02}"));
        std::fs::create_dir_all(&dir)?;
        for f in 0..PER_DIR {
            std::fs::write(dir.join(format!("f{f:03}.md")), format!("file {d} {f}\n"))?;
        }
    }
    Ok(())
}

/// A read-only folder agent of `folder`: its id.
async fn make_agent(client: &Client, name: &str, folder: &Path) -> anyhow::Result<String> {
    let made = client
        .post(
            "/agents",
            json!({"name": name,
                   "folder": {"path": folder.to_string_lossy(), "mode": "read"}}),
        )
        .await?;
    anyhow::ensure!(made.status == 201, "making the agent: {made:?}");
    anyhow::ensure!(
        made.body["folder"]["state"] == "ok" && made.body["folder"]["mode"] == "read",
        "the agent's folder: {}",
        made.body
    );
    Ok(made.body["id"].as_str().context("agent id")?.to_string())
}

/// A new chat of the agent, in `auto`.
async fn agent_chat(client: &Client, agent: &str) -> anyhow::Result<String> {
    let made = client
        .post(
            "/conversations",
            json!({"agent_id": agent, "permission_mode": "auto"}),
        )
        .await?;
    anyhow::ensure!(made.status == 201, "a chat of the agent: {made:?}");
    Ok(made.body["id"].as_str().context("chat id")?.to_string())
}

/// A new plain chat in `auto`, its own folder made (empty), and that
/// folder's path.
async fn plain_chat(client: &Client, chatd: &Chatd) -> anyhow::Result<(String, PathBuf)> {
    let chat = client.create_chat_in("auto").await?;
    let dir = chatd.data_dir().join("workspaces").join(&chat);
    std::fs::create_dir_all(&dir)?;
    Ok((chat, dir))
}

/// `chat`'s turn whose one call is `call`: its time.
async fn one_call(sim: &Sim, client: &Client, chat: &str, call: Value) -> anyhow::Result<Turn> {
    subagents::script(sim, chat, vec![call], 1).await?;
    let mut watch = Watch::open(client, chat).await?;
    turn(client, &mut watch, chat).await
}

/// The one tool result of `chat`.
async fn result_of(client: &Client, chat: &str) -> anyhow::Result<String> {
    let results = tool_results(&client.snapshot(chat).await?);
    anyhow::ensure!(results.len() == 1, "{} tool results", results.len());
    Ok(results.into_iter().next().unwrap_or_default())
}

/// One kind's samples: send to done, and the call's time in chatd (the
/// engine's first answer's end to its next request), µs.
#[derive(Default)]
struct Kind {
    took: Vec<i64>,
    chats: Vec<String>,
    step: Vec<i64>,
}

impl Kind {
    fn add(&mut self, chat: String, t: &Turn) {
        self.took.push(t.took);
        self.chats.push(chat);
    }

    /// The call's time in chatd, from the engine's log.
    fn split(&mut self, log: &[Value]) -> anyhow::Result<()> {
        for chat in &self.chats {
            let session = format!("chat-{chat}");
            let p: Vec<(i64, i64)> = log
                .iter()
                .filter(|r| r["session_id"] == session.as_str())
                .map(|r| {
                    (
                        r["at_us"].as_i64().unwrap_or(0),
                        r["done_us"].as_i64().unwrap_or(0),
                    )
                })
                .collect();
            anyhow::ensure!(p.len() == 2, "{} requests for a turn", p.len());
            self.step.push(p[1].0 - p[0].1);
        }
        Ok(())
    }

    fn turn(&self) -> (i64, i64) {
        p50_p95(self.took.clone())
    }

    fn step(&self) -> (i64, i64) {
        p50_p95(self.step.clone())
    }
}

fn ratio(a: i64, b: i64) -> String {
    format!(
        "{:+.2} ms p50 ({:.2}×)",
        (a - b) as f64 / 1000.0,
        a as f64 / b.max(1) as f64
    )
}

pub(crate) async fn figure(quick: bool, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    say(
        "\n## 18e. an agent kept to one folder: read_file and list_files under folder/ against the same in a plain chat's own folder",
    );
    let (warm, n) = if quick { (2, 10) } else { (5, 40) };
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start(&sim.url(), &[]).await?;
    let client = chatd.client();

    // The agents' folders, deep on the box, outside chatd's data folder.
    let boxed = tempfile::tempdir()?;
    let notes_root = boxed.path().join("a/b/c/notes-root");
    let list_root = boxed.path().join("a/b/c/archive-root");
    let note = note_bytes();
    std::fs::create_dir_all(notes_root.join(NOTE).parent().context("a folder")?)?;
    std::fs::write(notes_root.join(NOTE), &note)?;
    put_listed(&list_root)?;
    let notes_agent = make_agent(&client, "Notes reader", &notes_root).await?;
    let list_agent = make_agent(&client, "Archive reader", &list_root).await?;
    let depth = |p: &Path| p.components().count() - 1;
    let own_depth = depth(&chatd.data_dir().join("workspaces").join("CHAT"));

    let files = DIRS * PER_DIR;
    let (mut f_read, mut p_read, mut f_list, mut p_list) = (
        Kind::default(),
        Kind::default(),
        Kind::default(),
        Kind::default(),
    );
    let (mut f_chars, mut p_chars) = (0, 0);
    let log_url = format!("{}/sim/requests", sim.url());
    let cleared = reqwest::Client::new().delete(&log_url).send().await?;
    anyhow::ensure!(cleared.status().is_success(), "clearing the sim's log");
    for k in 0..warm + n {
        // read_file under folder/ in a chat of the agent.
        let chat = agent_chat(&client, &notes_agent).await?;
        let call = json!({"name": "read_file", "arguments": {"path": format!("folder/{NOTE}")}});
        let t = one_call(&sim, &client, &chat, call).await?;
        let got = result_of(&client, &chat).await?;
        anyhow::ensure!(
            got.contains(MARK) && !got.contains("may only read"),
            "read_file under folder/ answered {got:?}"
        );
        if k >= warm {
            f_read.add(chat, &t);
        }

        // The same in a plain chat's own folder.
        let (chat, dir) = plain_chat(&client, &chatd).await?;
        std::fs::create_dir_all(dir.join(NOTE).parent().context("a folder")?)?;
        std::fs::write(dir.join(NOTE), &note)?;
        let call = json!({"name": "read_file", "arguments": {"path": NOTE}});
        let t = one_call(&sim, &client, &chat, call).await?;
        let got = result_of(&client, &chat).await?;
        anyhow::ensure!(got.contains(MARK), "read_file answered {got:?}");
        if k >= warm {
            p_read.add(chat, &t);
        }

        // list_files . of a chat of the agent of 2,000 files.
        let chat = agent_chat(&client, &list_agent).await?;
        let call = json!({"name": "list_files", "arguments": {"path": "."}});
        let t = one_call(&sim, &client, &chat, call).await?;
        let got = result_of(&client, &chat).await?;
        anyhow::ensure!(
            got.contains("folder/d00/f000.md"),
            "list_files . of the agent's chat answered {}",
            got.chars().take(400).collect::<String>()
        );
        f_chars = got.chars().count();
        if k >= warm {
            f_list.add(chat, &t);
        }

        // The same 2,000 files in a plain chat's own folder.
        let (chat, dir) = plain_chat(&client, &chatd).await?;
        put_listed(&dir)?;
        let call = json!({"name": "list_files", "arguments": {"path": "."}});
        let t = one_call(&sim, &client, &chat, call).await?;
        let got = result_of(&client, &chat).await?;
        anyhow::ensure!(
            got.contains("d00/f000.md") && !got.contains("folder/"),
            "list_files . of a plain chat answered {}",
            got.chars().take(400).collect::<String>()
        );
        p_chars = got.chars().count();
        if k >= warm {
            p_list.add(chat, &t);
        }
    }
    let log = sim.requests().await?;
    for kind in [&mut f_read, &mut p_read, &mut f_list, &mut p_list] {
        kind.split(&log)?;
    }

    let (fr, pr, fl, pl) = (f_read.turn(), p_read.turn(), f_list.turn(), p_list.turn());
    let (frs, prs, fls, pls) = (f_read.step(), p_read.step(), f_list.step(), p_list.step());
    say(format!(
        "18e, {n} turns of each kind (after {warm} warm-up), taken in turn; the agent's folders {} names below / ({}), a chat's own {own_depth}",
        depth(&notes_root),
        notes_root.display()
    ));
    say(format!(
        "    read_file folder/{NOTE} ({FILE_BYTES} bytes), read-only folder agent, send to run done: p50 {} p95 {}; the call in chatd (the engine's answer's end to its next request) p50 {} p95 {}",
        ms(fr.0), ms(fr.1), ms(frs.0), ms(frs.1)
    ));
    say(format!(
        "    read_file {NOTE} in a plain chat's own folder: p50 {} p95 {}; the call in chatd p50 {} p95 {}; ratio {} (the call {})",
        ms(pr.0), ms(pr.1), ms(prs.0), ms(prs.1), ratio(fr.0, pr.0), ratio(frs.0, prs.0)
    ));
    say(format!(
        "    list_files . with {files} files in the agent's folder: p50 {} p95 {}; the call in chatd p50 {} p95 {}; its result {f_chars} characters",
        ms(fl.0), ms(fl.1), ms(fls.0), ms(fls.1)
    ));
    say(format!(
        "    list_files . with the same {files} files in a plain chat's own folder: p50 {} p95 {}; the call in chatd p50 {} p95 {}; its result {p_chars} characters; ratio {} (the call {})",
        ms(pl.0), ms(pl.1), ms(pls.0), ms(pls.1), ratio(fl.0, pl.0), ratio(fls.0, pls.0)
    ));
    rows.push(
        row(
            format!("18e. a turn whose one call is read_file folder/{NOTE} ({FILE_BYTES} bytes) in a chat of a read-only folder agent, send to run done ({n} turns)"),
            format!("p50 {} / p95 {} (the call in chatd {} / {})", ms(fr.0), ms(fr.1), ms(frs.0), ms(frs.1)),
        )
        .baseline(
            format!(
                "the same file at the same depth in a plain chat's own folder {} / {} (the call {} / {})",
                ms(pr.0), ms(pr.1), ms(prs.0), ms(prs.1)
            ),
            format!("{}; the call {}", ratio(fr.0, pr.0), ratio(frs.0, prs.0)),
        ),
    );
    rows.push(
        row(
            format!("18e. a turn whose one call is list_files . with {files} files in the agent's folder, send to run done ({n} turns)"),
            format!("p50 {} / p95 {} (the call in chatd {} / {})", ms(fl.0), ms(fl.1), ms(fls.0), ms(fls.1)),
        )
        .baseline(
            format!(
                "the same {files} files in a plain chat's own folder {} / {} (the call {} / {})",
                ms(pl.0), ms(pl.1), ms(pls.0), ms(pls.1)
            ),
            format!("{}; the call {}", ratio(fl.0, pl.0), ratio(fls.0, pls.0)),
        ),
    );
    Ok(())
}
