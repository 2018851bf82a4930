//! A run's copy of its chat's active path, kept across its steps and
//! brought up to date from the chat's event log, the way a device follows
//! a chat: read whole once, then only the events since. A step then costs
//! what it adds, not the whole transcript read again.
//!
//! Every change to a message is an event (`message.created`,
//! `message.updated`, the deltas); what the events cannot say for sure (a
//! compaction, a clear, a message off the path's end, a gap in the log, a
//! head that is not the path's end) makes the path read whole again.
//!
//! It keeps the path's request messages too, rendered to JSON text once per
//! group (a question, an answer with its results) and reused while the
//! group's messages are unchanged: each message carries a stamp, new
//! whenever it changes.

use std::collections::HashMap;

use rusqlite::Connection;
use serde::Deserialize;
use serde_json::Value;
use tandem_shared::http::ApiError;

use crate::context::{self, Transcript};
use crate::kinds::EventKind;
use crate::model::Message;
use crate::store::queries::{self, Trashed};
use crate::store::Store;

/// More events than this since the last read: the path is read whole.
const MAX_EVENTS: i64 = 2_000;

/// The chat's path, root to head, as of event `seq`.
pub(crate) struct KeptPath {
    conversation_id: String,
    messages: Vec<Message>,
    seq: i64,
    loaded: bool,
    /// Each kept message's stamp, by id.
    stamps: HashMap<String, u64>,
    next_stamp: u64,
    /// Rendered groups by their messages' stamps.
    groups: HashMap<Vec<u64>, Group>,
    /// `context::message_tokens` of each message, by its stamp.
    tokens: HashMap<u64, u64>,
    /// The list of the chat's files the turn's question carries (its id,
    /// the lines): made once a turn, so every step sends the same bytes and
    /// the engine's prompt cache holds.
    pub(crate) told: Option<(String, String)>,
}

/// One group's request messages as JSON text (comma-joined) and what the
/// estimate counts of them.
struct Group {
    json: String,
    chars: usize,
    count: usize,
}

/// A transcript's request messages as JSON text, comma-joined, and what
/// the estimate counts of them.
#[derive(Default)]
pub(crate) struct Rendered {
    pub json: String,
    pub chars: usize,
    pub count: usize,
}

impl Rendered {
    /// `transcript`'s request messages rendered afresh, system message first.
    pub fn whole(
        system: &str,
        transcript: &Transcript,
        stub: &dyn Fn(&str, &str, &str) -> Option<String>,
        images: &dyn Fn(&Message) -> Vec<Value>,
    ) -> Rendered {
        let mut out = Rendered::default();
        for m in context::request_messages(system, transcript, stub, images) {
            out.push(&m);
        }
        out
    }

    /// Appends one more message.
    pub fn push(&mut self, message: &Value) {
        self.push_json(&message.to_string(), context::message_chars(message), 1);
    }

    fn push_json(&mut self, json: &str, chars: usize, count: usize) {
        if json.is_empty() {
            return;
        }
        if !self.json.is_empty() {
            self.json.push(',');
        }
        self.json.push_str(json);
        self.chars += chars;
        self.count += count;
    }
}

/// What one read of the store found.
enum Found {
    /// No event since.
    Same,
    /// The events since, and the head and last event they lead to.
    Events {
        events: Vec<(EventKind, String)>,
        head: Option<String>,
        last: i64,
    },
    /// The path read whole.
    Whole { messages: Vec<Message>, last: i64 },
}

/// A delta's data.
#[derive(Deserialize)]
struct DeltaData {
    message_id: String,
    text: String,
}

/// A `message.created` or `message.updated` event's data.
#[derive(Deserialize)]
struct MessageData {
    message: Message,
}

impl KeptPath {
    pub(crate) fn new(conversation_id: &str) -> KeptPath {
        KeptPath {
            conversation_id: conversation_id.to_string(),
            messages: Vec::new(),
            seq: 0,
            loaded: false,
            stamps: HashMap::new(),
            next_stamp: 0,
            groups: HashMap::new(),
            tokens: HashMap::new(),
            told: None,
        }
    }

    /// What the transcript of the whole path weighs by the estimate: its
    /// summary's characters / 3 and each message's `message_tokens`,
    /// counted once while the message is unchanged.
    pub(crate) fn transcript_tokens(&mut self) -> u64 {
        let transcript = context::transcript(&self.messages);
        let mut total = transcript
            .summary
            .map_or(0, |s| s.chars().count() as u64 / 3);
        let mut counted = HashMap::with_capacity(transcript.messages.len());
        for m in &transcript.messages {
            let stamp = self.stamps.get(&m.id).copied();
            let known = stamp.and_then(|s| self.tokens.get(&s).copied());
            let tokens = known.unwrap_or_else(|| context::message_tokens(m));
            if let Some(stamp) = stamp {
                counted.insert(stamp, tokens);
            }
            total += tokens;
        }
        self.tokens = counted;
        total
    }

    /// The path as `current` last read it.
    pub(crate) fn path(&self) -> &[Message] {
        &self.messages
    }

    /// `transcript`'s messages rendered, groups unchanged since the last
    /// call reused. A group holding images is rendered each time (the
    /// image may be gone); a message off the kept path is never reused.
    ///
    /// The transcript is that of the path's first `upto` messages; the
    /// system message (`system` and the transcript's summary) comes first.
    pub(crate) fn render(
        &mut self,
        upto: usize,
        system: &str,
        stub: &dyn Fn(&str, &str, &str) -> Option<String>,
        images: &dyn Fn(&Message) -> Vec<Value>,
    ) -> Rendered {
        let transcript = context::transcript(&self.messages[..upto]);
        let all = &transcript.messages;
        let mut out = Rendered::default();
        if let Some(system) = context::system_message(system, transcript.summary) {
            out.push(&system);
        }
        let mut used = HashMap::with_capacity(self.groups.len());
        let mut i = 0;
        while i < all.len() {
            let end = context::group_end(all, i);
            let key: Option<Vec<u64>> = all[i..end]
                .iter()
                .map(|m| self.stamps.get(&m.id).copied())
                .collect();
            let pictured = all[i..end].iter().any(|m| !images(m).is_empty());
            if let (Some(key), false) = (&key, pictured) {
                if let Some(group) = self.groups.remove(key) {
                    out.push_json(&group.json, group.chars, group.count);
                    used.insert(key.clone(), group);
                    i = end;
                    continue;
                }
            }
            let (values, next) = context::render_group(all, i, stub, images);
            let mut group = Rendered::default();
            for v in &values {
                group.push(v);
            }
            out.push_json(&group.json, group.chars, group.count);
            if let (Some(key), false) = (key, pictured) {
                let Rendered { json, chars, count } = group;
                used.insert(key, Group { json, chars, count });
            }
            i = next;
        }
        // Only the groups of this transcript are kept: a bound, and what
        // the next request reuses.
        self.groups = used;
        out
    }

    /// A fresh stamp for `id`: the message is new or changed.
    fn stamp(&mut self, id: &str) {
        self.next_stamp += 1;
        self.stamps.insert(id.to_string(), self.next_stamp);
    }

    /// The path read whole: every message stamped afresh.
    fn replace_all(&mut self, messages: Vec<Message>, last: i64) {
        self.messages = messages;
        self.seq = last;
        self.stamps.clear();
        self.groups.clear();
        self.tokens.clear();
        for i in 0..self.messages.len() {
            let id = self.messages[i].id.clone();
            self.stamp(&id);
        }
    }

    /// The path as the store has it now.
    pub(crate) async fn current(&mut self, store: &Store) -> Result<&[Message], ApiError> {
        self.current_and(store, |_| Ok(())).await?;
        Ok(&self.messages)
    }

    /// Brings the path up to date, and reads `also` in the same trip to the
    /// store (a request's chat, read with its path).
    pub(crate) async fn current_and<R, F>(&mut self, store: &Store, also: F) -> Result<R, ApiError>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R, ApiError> + Send + 'static,
    {
        let (found, extra) = self.read(store, false, also).await?;
        let applied = match found {
            Found::Same => true,
            Found::Whole { messages, last } => {
                self.replace_all(messages, last);
                true
            }
            Found::Events { events, head, last } => {
                let fits = self.apply(&events) && self.head_id() == head.as_deref();
                self.seq = last;
                fits
            }
        };
        if !applied {
            if let (Found::Whole { messages, last }, ()) =
                self.read(store, true, |_| Ok(())).await?
            {
                self.replace_all(messages, last);
            }
        }
        self.loaded = true;
        #[cfg(debug_assertions)]
        self.check(store).await?;
        Ok(extra)
    }

    /// The path's end.
    fn head_id(&self) -> Option<&str> {
        self.messages.last().map(|m| m.id.as_str())
    }

    /// One read: the events since `seq`, or the whole path when `whole`,
    /// not yet loaded, or the events are too many or have a gap.
    async fn read<R, F>(&self, store: &Store, whole: bool, also: F) -> Result<(Found, R), ApiError>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R, ApiError> + Send + 'static,
    {
        let cid = self.conversation_id.clone();
        let (seq, whole) = (self.seq, whole || !self.loaded);
        store
            .read(move |conn| {
                // One snapshot: the head, the last seq and the events agree.
                let tx = conn.unchecked_transaction()?;
                let found = read_in(&tx, &cid, seq, whole)?;
                let extra = also(&tx)?;
                tx.finish()?;
                Ok((found, extra))
            })
            .await
    }

    /// Applies the events in order; false when they change the path in a
    /// way they do not spell out.
    fn apply(&mut self, events: &[(EventKind, String)]) -> bool {
        for (kind, data) in events {
            let fits = match kind {
                EventKind::MessageCreated => match serde_json::from_str::<MessageData>(data) {
                    Ok(MessageData { message })
                        if message.parent_id.as_deref() == self.head_id() =>
                    {
                        self.stamp(&message.id);
                        self.messages.push(message);
                        true
                    }
                    _ => false,
                },
                EventKind::MessageUpdated => match serde_json::from_str::<MessageData>(data) {
                    Ok(MessageData { message }) => self.replace(message),
                    Err(_) => false,
                },
                EventKind::TextDelta | EventKind::ReasoningDelta => {
                    match serde_json::from_str::<DeltaData>(data) {
                        Ok(delta) => {
                            if let Some(m) = self.find(&delta.message_id) {
                                if *kind == EventKind::TextDelta {
                                    m.text.push_str(&delta.text);
                                } else if !delta.text.is_empty() {
                                    m.reasoning
                                        .get_or_insert_with(String::new)
                                        .push_str(&delta.text);
                                }
                                self.stamp(&delta.message_id);
                            }
                            true
                        }
                        Err(_) => false,
                    }
                }
                // They move messages under a summary or a marker.
                EventKind::Compacted | EventKind::Cleared => false,
                _ => true,
            };
            if !fits {
                return false;
            }
        }
        true
    }

    /// A message of the path, looked for from its end (where runs write).
    fn find(&mut self, id: &str) -> Option<&mut Message> {
        self.messages.iter_mut().rev().find(|m| m.id == id)
    }

    /// Puts an updated message in its place; one off the path is not ours,
    /// and one that moved to another parent makes the path read whole.
    fn replace(&mut self, message: Message) -> bool {
        let Some(kept) = self.find(&message.id) else {
            return true;
        };
        if kept.parent_id != message.parent_id {
            return false;
        }
        *kept = message;
        let id = kept.id.clone();
        self.stamp(&id);
        true
    }

    /// In debug builds (every test) the kept path must be the stored one.
    #[cfg(debug_assertions)]
    async fn check(&self, store: &Store) -> Result<(), ApiError> {
        let (Found::Whole { messages, .. }, ()) = self.read(store, true, |_| Ok(())).await? else {
            return Ok(());
        };
        let kept = serde_json::to_value(&self.messages).unwrap_or_default();
        let stored = serde_json::to_value(&messages).unwrap_or_default();
        assert!(
            kept == stored,
            "the kept path of {} is not the stored one:\nkept {kept}\nstored {stored}",
            self.conversation_id
        );
        Ok(())
    }
}

fn read_in(conn: &Connection, cid: &str, seq: i64, whole: bool) -> Result<Found, ApiError> {
    let conversation = queries::conversation(conn, cid, Trashed::Include)?;
    let last = conversation.last_seq;
    if whole || last - seq > MAX_EVENTS || last < seq {
        let messages = queries::path_to(conn, cid, conversation.head_id.as_deref())?;
        return Ok(Found::Whole { messages, last });
    }
    if last == seq {
        return Ok(Found::Same);
    }
    let events = queries::events_after(conn, cid, seq, (last - seq) as usize)?;
    // A gap (deltas dropped by housekeeping, a kind left out): read whole.
    let contiguous = events.len() as i64 == last - seq
        && events.iter().zip(seq + 1..).all(|(e, want)| e.seq == want);
    if !contiguous {
        let messages = queries::path_to(conn, cid, conversation.head_id.as_deref())?;
        return Ok(Found::Whole { messages, last });
    }
    Ok(Found::Events {
        events: events.iter().map(|e| (e.kind, e.data.clone())).collect(),
        head: conversation.head_id,
        last,
    })
}

#[cfg(test)]
mod tests;
