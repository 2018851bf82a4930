//! The writer thread: group commit of every waiting job, seq numbering,
//! and publication of committed events.

use std::collections::HashMap;
use std::sync::Arc;

use rusqlite::{params, Connection, OptionalExtension};
use serde_json::Value;
use tokio::sync::mpsc;

use super::Delta;
use crate::events::{Event, Hub};
use crate::kinds::EventKind;
use crate::metrics::Metrics;

/// Called after the batch's commit: `Some(reason)` when the commit failed.
pub type Deliver = Box<dyn FnOnce(Option<String>) + Send>;
/// A job runs inside the batch transaction and says whether it succeeded.
pub type Closure = Box<dyn FnOnce(&mut Ctx) -> (bool, Deliver) + Send>;

pub enum Job {
    Closure(Closure),
    Delta(Delta),
    Stop,
}

/// Jobs taken into one transaction at most: bounds the latency a batch adds.
const MAX_BATCH: usize = 8_192;

/// What a job sees: the open transaction and a way to write events.
pub struct Ctx<'a> {
    conn: &'a Connection,
    seqs: &'a mut HashMap<String, i64>,
    /// Seqs this job moved, to put back if it fails.
    moved: Vec<(String, Option<i64>)>,
    events: Vec<Arc<Event>>,
    now: i64,
}

impl<'a> Ctx<'a> {
    pub fn conn(&self) -> &Connection {
        self.conn
    }

    /// Writes an event for `conversation_id` with the next seq. `data` gets
    /// `conversation_id` added. Returns the seq.
    pub fn emit(
        &mut self,
        conversation_id: &str,
        kind: EventKind,
        mut data: Value,
    ) -> rusqlite::Result<i64> {
        if let Value::Object(map) = &mut data {
            map.insert("conversation_id".into(), Value::from(conversation_id));
        }
        let seq = next_seq(self.conn, self.seqs, &mut self.moved, conversation_id)?;
        let data = data.to_string();
        self.conn
            .prepare_cached(
                "INSERT INTO events (conversation_id, seq, kind, data, created) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![conversation_id, seq, kind.as_str(), data, self.now])?;
        self.events.push(Arc::new(Event::new(
            conversation_id.to_string(),
            seq,
            kind,
            data,
        )));
        Ok(seq)
    }

    /// The conversation's last seq, including events this batch wrote.
    pub fn last_seq(&mut self, conversation_id: &str) -> rusqlite::Result<i64> {
        current_seq(self.conn, self.seqs, conversation_id)
    }

    /// Forgets a conversation removed for good.
    pub fn forget(&mut self, conversation_id: &str) {
        let old = self.seqs.remove(conversation_id);
        self.moved.push((conversation_id.to_string(), old));
    }
}

fn current_seq(
    conn: &Connection,
    seqs: &mut HashMap<String, i64>,
    conversation_id: &str,
) -> rusqlite::Result<i64> {
    if let Some(seq) = seqs.get(conversation_id) {
        return Ok(*seq);
    }
    let seq: i64 = conn
        .prepare_cached("SELECT last_seq FROM conversations WHERE id = ?1")?
        .query_row([conversation_id], |r| r.get(0))
        .optional()?
        .unwrap_or(0);
    seqs.insert(conversation_id.to_string(), seq);
    Ok(seq)
}

fn next_seq(
    conn: &Connection,
    seqs: &mut HashMap<String, i64>,
    moved: &mut Vec<(String, Option<i64>)>,
    conversation_id: &str,
) -> rusqlite::Result<i64> {
    let seq = current_seq(conn, seqs, conversation_id)?;
    moved.push((conversation_id.to_string(), Some(seq)));
    seqs.insert(conversation_id.to_string(), seq + 1);
    Ok(seq + 1)
}

/// Text appended to one message in this batch, written once at its end.
#[derive(Default)]
struct Append {
    text: String,
    reasoning: String,
}

pub fn run(mut conn: Connection, mut rx: mpsc::Receiver<Job>, hub: Hub, metrics: Arc<Metrics>) {
    // Seqs as committed; the one writer keeps them, so they cannot go stale.
    let mut seqs: HashMap<String, i64> = HashMap::new();
    let mut stop = false;
    while !stop {
        let Some(first) = rx.blocking_recv() else {
            break;
        };
        let mut jobs = vec![first];
        while jobs.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        match commit_batch(&mut conn, jobs, &mut seqs, &mut stop) {
            Ok((events, delivers)) => {
                metrics.events_written.inc_by(events.len() as u64);
                publish(&hub, events);
                for deliver in delivers {
                    deliver(None);
                }
            }
            Err((err, delivers)) => {
                // The cache may hold seqs of the rolled-back batch: reload lazily.
                seqs.clear();
                tracing::error!(error = %err, jobs = delivers.len(), "batch commit failed");
                for deliver in delivers {
                    deliver(Some(
                        "the database refused the write; chatd's log has the details".into(),
                    ));
                }
            }
        }
    }
    tracing::debug!("writer stopped");
}

type BatchResult = Result<(Vec<Arc<Event>>, Vec<Deliver>), (rusqlite::Error, Vec<Deliver>)>;

fn commit_batch(
    conn: &mut Connection,
    jobs: Vec<Job>,
    seqs: &mut HashMap<String, i64>,
    stop: &mut bool,
) -> BatchResult {
    let mut delivers = Vec::new();
    let mut events: Vec<Arc<Event>> = Vec::new();
    let now = tandem_shared::time::now_unix();
    let tx = match conn.transaction() {
        Ok(tx) => tx,
        // The jobs are dropped unrun: each caller's reply channel closes and it gets an error.
        Err(err) => return Err((err, delivers)),
    };
    let mut appends: HashMap<String, Append> = HashMap::new();
    let mut touched: Vec<String> = Vec::new();
    let mut failure: Option<rusqlite::Error> = None;
    for job in jobs {
        if failure.is_some() {
            // Dropped unrun: its caller's reply channel closes with an error.
            continue;
        }
        match job {
            Job::Stop => *stop = true,
            Job::Delta(delta) => {
                let kind = if delta.reasoning {
                    EventKind::ReasoningDelta
                } else {
                    EventKind::TextDelta
                };
                let data = serde_json::json!({
                    "run_id": delta.run_id,
                    "message_id": delta.message_id,
                    "text": delta.text,
                });
                let mut ctx = Ctx {
                    conn: &tx,
                    seqs,
                    moved: Vec::new(),
                    events: Vec::new(),
                    now,
                };
                match ctx.emit(&delta.conversation_id, kind, data) {
                    Ok(_) => {
                        events.append(&mut ctx.events);
                        note_touched(&mut touched, &delta.conversation_id);
                        let entry = appends.entry(delta.message_id).or_default();
                        if delta.reasoning {
                            entry.reasoning.push_str(&delta.text);
                        } else {
                            entry.text.push_str(&delta.text);
                        }
                    }
                    Err(err) => failure = Some(err),
                }
            }
            Job::Closure(closure) => {
                // A job may read a message's text: bring it up to date first.
                if let Err(err) = flush_appends(&tx, &mut appends) {
                    failure = Some(err);
                    continue;
                }
                if let Err(err) = tx.execute_batch("SAVEPOINT job") {
                    failure = Some(err);
                    continue;
                }
                let mut ctx = Ctx {
                    conn: &tx,
                    seqs,
                    moved: Vec::new(),
                    events: Vec::new(),
                    now,
                };
                let (ok, deliver) = closure(&mut ctx);
                let Ctx {
                    moved,
                    events: job_events,
                    ..
                } = ctx;
                let end = if ok {
                    for (conversation, _) in &moved {
                        note_touched(&mut touched, conversation);
                    }
                    events.extend(job_events);
                    "RELEASE job"
                } else {
                    // Put back the seqs the failed job took, newest first.
                    for (conversation, old) in moved.into_iter().rev() {
                        match old {
                            Some(seq) => seqs.insert(conversation, seq),
                            None => seqs.remove(&conversation),
                        };
                    }
                    "ROLLBACK TO job; RELEASE job"
                };
                if let Err(err) = tx.execute_batch(end) {
                    failure = Some(err);
                }
                delivers.push(deliver);
            }
        }
    }
    if failure.is_none() {
        if let Err(err) = flush_appends(&tx, &mut appends) {
            failure = Some(err);
        }
    }
    if failure.is_none() {
        for conversation in &touched {
            if let Some(seq) = seqs.get(conversation) {
                let result = tx
                    .prepare_cached("UPDATE conversations SET last_seq = ?1 WHERE id = ?2")
                    .and_then(|mut s| s.execute(params![seq, conversation]));
                if let Err(err) = result {
                    failure = Some(err);
                    break;
                }
            }
        }
    }
    if let Some(err) = failure {
        let _ = tx.rollback();
        return Err((err, delivers));
    }
    match tx.commit() {
        Ok(()) => Ok((events, delivers)),
        Err(err) => Err((err, delivers)),
    }
}

fn note_touched(touched: &mut Vec<String>, conversation: &str) {
    if !touched.iter().any(|c| c == conversation) {
        touched.push(conversation.to_string());
    }
}

fn flush_appends(conn: &Connection, appends: &mut HashMap<String, Append>) -> rusqlite::Result<()> {
    for (message_id, append) in appends.drain() {
        if !append.text.is_empty() {
            conn.prepare_cached("UPDATE messages SET text = text || ?1 WHERE id = ?2")?
                .execute(params![append.text, message_id])?;
        }
        if !append.reasoning.is_empty() {
            conn.prepare_cached(
                "UPDATE messages SET reasoning = COALESCE(reasoning, '') || ?1 WHERE id = ?2",
            )?
            .execute(params![append.reasoning, message_id])?;
        }
    }
    Ok(())
}

fn publish(hub: &Hub, events: Vec<Arc<Event>>) {
    let mut by_conversation: Vec<(String, Vec<Arc<Event>>)> = Vec::new();
    for event in events {
        match by_conversation
            .iter_mut()
            .find(|(c, _)| *c == event.conversation_id)
        {
            Some((_, list)) => list.push(event),
            None => by_conversation.push((event.conversation_id.clone(), vec![event])),
        }
    }
    for (conversation, list) in by_conversation {
        hub.publish(&conversation, list);
    }
}
