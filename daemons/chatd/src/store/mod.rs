//! chat.sqlite3: one writer thread owns the only write connection and
//! commits every job waiting at each commit in one transaction (a group
//! commit with no timer), then publishes that batch's events to the hub.
//! Reads use a small pool of read-only connections (WAL lets them run
//! beside the writer).

pub mod queries;
pub mod schema;
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
