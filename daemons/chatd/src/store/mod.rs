//! chat.sqlite3: one writer thread owns the only write connection and
//! commits every job waiting at each commit in one transaction (a group
//! commit with no timer), then publishes that batch's events to the hub.
//! Reads use a small pool of read-only connections (WAL lets them run
//! beside the writer). Every write of chatd is a function of a module
//! here named for the rows it holds (`conversations`, `messages`, `runs`,
//! `consents`, `agents`, `rules`, `meta`, `inbox`, `files`, `push`), run in a
//! writer job.

pub mod agents;
pub mod consents;
pub mod conversations;
pub mod documents;
pub mod files;
pub mod goals;
pub mod inbox;
pub mod index;
pub mod loops;
pub mod mcp;
pub mod messages;
pub mod meta;
pub mod policies;
pub mod push;
pub mod queries;
pub mod rules;
pub mod runs;
pub mod schema;
pub mod skills;
pub mod subagents;
pub mod tasks;
pub mod tool_groups;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::Connection;
use tandem_shared::http::ApiError;
use tandem_shared::sync::lock;
use tokio::sync::{mpsc, oneshot};

use crate::events::Hub;
use crate::metrics::Metrics;
pub use writer::Ctx;
use writer::{Deliver, Job};

/// The longest queue of jobs waiting for the writer; senders wait beyond it.
const QUEUE: usize = 16_384;

#[derive(Clone)]
pub struct Store {
    jobs: mpsc::Sender<Job>,
    readers: Arc<Mutex<Vec<Connection>>>,
    path: PathBuf,
    pub hub: Hub,
    writer: Arc<Mutex<Option<std::thread::JoinHandle<()>>>>,
}

impl Store {
    /// Opens the database (migrating it) and starts the writer thread.
    pub fn open(path: &Path, hub: Hub, metrics: Arc<Metrics>) -> anyhow::Result<Store> {
        let conn = tandem_shared::db::open_writer(path, schema::MIGRATIONS)?;
        let (jobs, rx) = mpsc::channel(QUEUE);
        let writer_hub = hub.clone();
        let handle = std::thread::Builder::new()
            .name("chatd-writer".into())
            .spawn(move || writer::run(conn, rx, writer_hub, metrics))?;
        Ok(Store {
            jobs,
            readers: Arc::new(Mutex::new(Vec::new())),
            path: path.to_path_buf(),
            hub,
            writer: Arc::new(Mutex::new(Some(handle))),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` in the writer's next transaction. Its changes and events
    /// commit together; an `Err` from `f` rolls back what `f` did and nothing else.
    pub async fn write<R, F>(&self, f: F) -> Result<R, ApiError>
    where
        R: Send + 'static,
        F: FnOnce(&mut Ctx) -> Result<R, ApiError> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job = Job::Closure(Box::new(move |ctx: &mut Ctx| {
            let result = f(ctx);
            let ok = result.is_ok();
            let deliver: Deliver = Box::new(move |failure: Option<String>| {
                let _ = tx.send(match failure {
                    Some(message) => Err(ApiError::internal(message)),
                    None => result,
                });
            });
            (ok, deliver)
        }));
        self.jobs
            .send(job)
            .await
            .map_err(|_| ApiError::internal("chatd is stopping"))?;
        rx.await
            .map_err(|_| ApiError::internal("chatd is stopping"))?
    }

    /// Appends a piece of an answer (or its reasoning) to a message and
    /// writes its `text.delta` / `reasoning.delta` event, without waiting for
    /// the commit: deltas of one run keep their order because one task sends them.
    pub async fn delta(&self, delta: Delta) -> Result<(), ApiError> {
        self.jobs
            .send(Job::Delta(delta))
            .await
            .map_err(|_| ApiError::internal("chatd is stopping"))
    }

    /// Waits until every job sent before this call has committed.
    pub async fn barrier(&self) -> Result<(), ApiError> {
        self.write(|_| Ok(())).await
    }

    /// Runs `f` on a read-only connection on the blocking pool.
    pub async fn read<R, F>(&self, f: F) -> Result<R, ApiError>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R, ApiError> + Send + 'static,
    {
        let store = self.clone();
        tokio::task::spawn_blocking(move || {
            let conn = match lock(&store.readers).pop() {
                Some(conn) => conn,
                None => tandem_shared::db::open_reader(&store.path)
                    .map_err(|e| ApiError::internal(format!("{e:#}")))?,
            };
            let result = f(&conn);
            let mut readers = lock(&store.readers);
            if readers.len() < 8 {
                readers.push(conn);
            }
            result
        })
        .await
        .map_err(|_| ApiError::internal("read task failed"))?
    }

    /// Commits what is queued, stops the writer thread and waits for it.
    pub async fn close(&self) {
        let _ = self.jobs.send(Job::Stop).await;
        let handle = lock(&self.writer).take();
        if let Some(handle) = handle {
            let _ = tokio::task::spawn_blocking(move || handle.join()).await;
        }
    }
}

/// A piece of streamed text for the writer.
#[derive(Debug)]
pub struct Delta {
    pub conversation_id: String,
    pub run_id: String,
    pub message_id: String,
    pub reasoning: bool,
    pub text: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tandem_shared::metrics::Registry;

    /// Whether `text` holds an SQL write: `INSERT INTO`/`INSERT OR`,
    /// `UPDATE … SET` on one line, or `DELETE FROM`.
    fn holds_a_write(text: &str) -> bool {
        text.lines().any(|line| {
            line.contains("INSERT INTO")
                || line.contains("INSERT OR ")
                || line.contains("DELETE FROM")
                || line
                    .find("UPDATE ")
                    .is_some_and(|at| line[at..].contains(" SET "))
        })
    }

    /// The `.rs` files below `src`, each with its path relative to it, sorted.
    fn sources(src: &Path) -> Vec<(String, PathBuf)> {
        let mut found = Vec::new();
        let mut stack = vec![src.to_path_buf()];
        while let Some(dir) = stack.pop() {
            // The tree is the crate's own: a folder that cannot be read is a broken checkout.
            for entry in std::fs::read_dir(&dir).expect("a source folder reads") {
                let path = entry.expect("a source folder's entry reads").path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let relative = path.strip_prefix(src).expect("below src");
                    found.push((relative.to_string_lossy().into_owned(), path));
                }
            }
        }
        found.sort();
        found
    }

    #[test]
    fn a_write_is_an_insert_an_update_set_or_a_delete_from() {
        for write in [
            "\"INSERT INTO rules (id) VALUES (?1)\"",
            "\"INSERT OR IGNORE INTO meta\"",
            "\"UPDATE runs SET status = ?1 WHERE id = ?2\"",
            "\"DELETE FROM pending WHERE id = ?1\"",
        ] {
            assert!(holds_a_write(write), "{write}");
        }
        for read in [
            "\"SELECT id FROM rules WHERE id = ?1\"",
            "// an UPDATE of the page, then a new SET",
            "// UPDATE the list",
        ] {
            assert!(!holds_a_write(read), "{read}");
        }
    }

    /// Every write of chatd is a function of `store/`, run in a writer job.
    #[test]
    fn every_write_of_chatd_is_in_the_store() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut outside = Vec::new();
        for (name, path) in sources(&src) {
            if name.starts_with("store/") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("a source file reads");
            if holds_a_write(&text) {
                outside.push(name);
            }
        }
        assert!(
            outside.is_empty(),
            "these files write to chat.sqlite3 outside store/: move each write into a \
             function of a store/ module named for the rows it holds: {outside:?}"
        );
    }

    fn open(dir: &Path) -> Store {
        let metrics = Arc::new(Metrics::new(&mut Registry::default()));
        Store::open(&dir.join("chat.sqlite3"), Hub::default(), metrics).unwrap()
    }

    async fn add_conversation(store: &Store, id: &'static str) {
        store
            .write(move |ctx| {
                ctx.conn().execute(
                    "INSERT INTO conversations (id, title, model, created, updated) VALUES (?1, '', 'm', 't', 't')",
                    [id],
                )?;
                Ok(())
            })
            .await
            .unwrap();
    }

    async fn seqs(store: &Store, id: &'static str) -> Vec<i64> {
        store
            .read(move |conn| {
                Ok(queries::events_after(conn, id, 0, 10_000)?
                    .iter()
                    .map(|e| e.seq)
                    .collect())
            })
            .await
            .unwrap()
    }

    /// Jobs sent together share a commit; a job that fails takes back its own
    /// events and seqs and nothing of the others'.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_job_rolls_back_alone_and_seqs_stay_whole() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        add_conversation(&store, "c").await;
        let mut jobs = Vec::new();
        for i in 0..200 {
            let store = store.clone();
            jobs.push(tokio::spawn(async move {
                store
                    .write(move |ctx| {
                        ctx.emit("c", crate::kinds::EventKind::Usage, json!({"i": i}))?;
                        if i % 3 == 0 {
                            return Err(ApiError::bad_input("i", "a multiple of 3"));
                        }
                        ctx.emit(
                            "c",
                            crate::kinds::EventKind::Usage,
                            json!({"i": i, "second": true}),
                        )?;
                        Ok(())
                    })
                    .await
            }));
        }
        let mut failed = 0;
        for job in jobs {
            if job.await.unwrap().is_err() {
                failed += 1;
            }
        }
        assert_eq!(failed, 67);
        let seqs = seqs(&store, "c").await;
        let want: Vec<i64> = (1..=(2 * (200 - 67))).collect();
        assert_eq!(
            seqs, want,
            "only the successful jobs' events, numbered without gaps"
        );
        let last: i64 = store
            .read(|conn| {
                Ok(conn.query_row(
                    "SELECT last_seq FROM conversations WHERE id = 'c'",
                    [],
                    |r| r.get(0),
                )?)
            })
            .await
            .unwrap();
        assert_eq!(last, 266);
        store.close().await;
    }

    /// Deltas are appended to their message once per batch and keep their order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn deltas_build_the_message_text_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        add_conversation(&store, "c").await;
        store
            .write(|ctx| {
                ctx.conn().execute(
                    "INSERT INTO messages (id, conversation_id, role, created) VALUES ('m', 'c', 'assistant', 't')",
                    [],
                )?;
                Ok(())
            })
            .await
            .unwrap();
        let mut want = String::new();
        for i in 0..1000 {
            let text = format!("w{i} ");
            want.push_str(&text);
            let delta = Delta {
                conversation_id: "c".into(),
                run_id: "r".into(),
                message_id: "m".into(),
                reasoning: i % 10 == 9,
                text,
            };
            store.delta(delta).await.unwrap();
        }
        store.barrier().await.unwrap();
        let (text, reasoning): (String, String) = store
            .read(|conn| {
                Ok(conn.query_row(
                    "SELECT text, reasoning FROM messages WHERE id = 'm'",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )?)
            })
            .await
            .unwrap();
        let want_text: String = (0..1000)
            .filter(|i| i % 10 != 9)
            .map(|i| format!("w{i} "))
            .collect();
        let want_reasoning: String = (0..1000)
            .filter(|i| i % 10 == 9)
            .map(|i| format!("w{i} "))
            .collect();
        assert_eq!(text, want_text);
        assert_eq!(reasoning, want_reasoning);
        assert_eq!(seqs(&store, "c").await.len(), 1000);
        store.close().await;
    }
}
