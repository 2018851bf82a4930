//! Figure 16 of `bench`: the search index of a chat's files (issue 26),
//! through a real chatd (release binaries, engine-sim beside it).
//!
//! The build: 1,000 distinct documents (PDFs of 3 pages, DOCX, two-sheet
//! XLSX, each with a word of its own) put in one chat's workspace by hand;
//! the time from the first `GET …/files/search` (which scans the workspace
//! and wakes the indexer) until it answers `pending: 0`, and what the index
//! takes in chat.sqlite3 (SQLite's `dbstat`) against the documents' bytes
//! and their text. The latency: 10,000 text files of generated prose in
//! another chatd's chat, searched through the route for a rare word, a
//! common word, two words on a line and a regular expression, against
//! `grep -r -l -i` and `grep -r -n -i` of the same files in the same run;
//! then, chatd stopped, the same searches and the workspace's scan timed
//! in-process on its store, to say where the route's time goes.
//!
//! The build is in `documents.rs`, the latency in `texts.rs`, the words
//! both write in `prose.rs`; here, what both ask of the route and of
//! chat.sqlite3.

mod documents;
mod prose;
mod texts;

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use serde_json::Value;

use crate::egressbench::Line;
use crate::harness::{Client, Sim};

/// How big the figure's workloads are.
pub struct Sizes {
    /// Documents indexed in the build.
    pub documents: usize,
    /// Text files searched.
    pub files: usize,
    /// Searches of each kind, each way.
    pub queries: usize,
}

impl Sizes {
    pub fn new(quick: bool) -> Sizes {
        if quick {
            // A debug chatd reads a document in tens of ms: a few seconds.
            Sizes {
                documents: 50,
                files: 500,
                queries: 5,
            }
        } else {
            Sizes {
                documents: 1_000,
                files: 10_000,
                queries: 50,
            }
        }
    }
}

/// The most matching lines the route answers (api/search.rs).
const MAX_HITS: usize = 200;

/// `text` for a query string.
fn encode(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// `GET …/files/search?{query}`: its answer, which must be a 200.
async fn search(client: &Client, chat: &str, query: &str) -> anyhow::Result<Value> {
    let answer = client
        .get(&format!("/conversations/{chat}/files/search?{query}"))
        .await?;
    ensure!(
        answer.status == 200,
        "the search {query} answered {}: {}",
        answer.status,
        answer.body
    );
    Ok(answer.body)
}

fn pending(body: &Value) -> anyhow::Result<u64> {
    body["pending"].as_u64().context("the answer's pending")
}

/// How the index was built: from the first search to `pending: 0`.
struct Built {
    /// The first search's answer: the scan, then up to 2 s of waiting.
    first: Duration,
    first_pending: u64,
    done: Duration,
    searches: usize,
}

/// Asks `query` until nothing is pending (each search waits up to 2 s for
/// the indexer itself, so the asking is the waiting), within `bound`.
async fn until_indexed(
    client: &Client,
    chat: &str,
    query: &str,
    bound: Duration,
) -> anyhow::Result<Built> {
    let began = Instant::now();
    let body = search(client, chat, query).await?;
    let first = began.elapsed();
    let first_pending = pending(&body)?;
    let mut left = first_pending;
    let mut searches = 1;
    while left > 0 {
        if began.elapsed() > bound {
            bail!("{left} files were still being indexed after {bound:?}");
        }
        left = pending(&search(client, chat, query).await?)?;
        searches += 1;
    }
    Ok(Built {
        first,
        first_pending,
        done: began.elapsed(),
        searches,
    })
}

/// What chat.sqlite3 holds, in bytes of its pages (`dbstat`).
#[derive(Default, Clone, Copy)]
struct Stored {
    /// The search tables, the trigram table's shadow tables and their indexes.
    index: u64,
    /// `document_texts`: the reader's text of each document, kept apart.
    texts: u64,
}

fn stored(db: &Path) -> anyhow::Result<Stored> {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let mut stmt = conn.prepare("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name")?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
    let mut out = Stored::default();
    for row in rows {
        let (name, bytes) = row?;
        let bytes = bytes.max(0) as u64;
        if name.starts_with("search_") || name == "workspace_files_sha" {
            out.index += bytes;
        } else if name == "document_texts" {
            out.texts += bytes;
        }
    }
    Ok(out)
}

/// A number of a query on chat.sqlite3.
fn count(db: &Path, sql: &str) -> anyhow::Result<u64> {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let n: i64 = conn.query_row(sql, [], |r| r.get(0))?;
    Ok(n.max(0) as u64)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
}

fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// The hits of an answer as (path, part, line).
fn hits(body: &Value) -> Vec<(String, String, u64)> {
    body["hits"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|h| {
            (
                h["path"].as_str().unwrap_or("").to_string(),
                h["part"].as_str().unwrap_or("-").to_string(),
                h["line"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

fn quantiles(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort_unstable();
    let at = |q: f64| {
        v.get(((v.len() as f64 * q).ceil() as usize).saturating_sub(1))
            .copied()
    };
    (at(0.5).unwrap_or_default(), at(0.99).unwrap_or_default())
}

fn pair(v: Vec<Duration>) -> String {
    let (p50, p99) = quantiles(v);
    format!("{} / {}", ms(p50), ms(p99))
}

/// Runs figure 16; `say` prints progress.
pub async fn figure(sizes: &Sizes, say: &dyn Fn(String)) -> anyhow::Result<Vec<Line>> {
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let mut lines = documents::build(&sim, sizes, say).await?;
    lines.extend(texts::latency(&sim, sizes, say).await?);
    Ok(lines)
}
