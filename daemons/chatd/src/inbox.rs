//! The inbox: notifications triggerd, connectord (and chatd) leave for the
//! box's person ("the nightly report ran", "a run failed"): the bounds the
//! API checks a post and a request against, and the live side. Rows live in
//! chat.sqlite3 and are written and read in `store/inbox.rs`, through the
//! store's writer like everything else. A post may carry a `key`: a second
//! post with it stores nothing and answers the first's notification.
//! Devices follow `GET /notifications/events`: live only, each frame sent
//! after its write committed.

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::broadcast;

pub const KINDS: &[&str] = &["run_ended", "run_failed", "needs_attention"];
pub const SOURCE_TYPES: &[&str] = &["trigger", "connector", "chatd"];
pub const MAX_TITLE: usize = 200;
pub const MAX_BODY: usize = 2000;
pub const MAX_SOURCE_ID: usize = 64;
pub const MAX_SOURCE_NAME: usize = 200;
/// An idempotency key: 1 to this many of `[A-Za-z0-9_:.-]`.
pub const MAX_KEY: usize = 128;
/// A list answers this many at most (and 50 unless asked).
pub const MAX_LIMIT: usize = 500;
pub const DEFAULT_LIMIT: usize = 50;
/// Ids one read or delete may name.
pub const MAX_IDS: usize = 500;

/// Frames a slow device may fall behind before its stream ends (it
/// reconnects and reloads the list).
const LIVE_BACKLOG: usize = 1024;

/// Whether `key` is a key a post may carry.
pub fn is_key(key: &str) -> bool {
    (1..=MAX_KEY).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b':' | b'.' | b'-'))
}

/// The live side: committed changes as SSE frames, to every device attached.
#[derive(Clone)]
pub struct Inbox {
    live: broadcast::Sender<Bytes>,
}

impl Default for Inbox {
    fn default() -> Self {
        Inbox {
            live: broadcast::channel(LIVE_BACKLOG).0,
        }
    }
}

impl Inbox {
    pub fn subscribe(&self) -> broadcast::Receiver<Bytes> {
        self.live.subscribe()
    }

    /// Sends one event to the devices attached now (call it after the commit).
    pub fn publish(&self, kind: &str, data: &Value) {
        let frame = Bytes::from(format!("event: {kind}\ndata: {data}\n\n"));
        // No device attached is not an error: the stream is live only.
        let _ = self.live.send(frame);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_1_to_128_of_letters_digits_and_a_few_marks() {
        assert!(is_key("a"));
        assert!(is_key("trigger:t_1.run-2026-12-01T09:00:00Z"));
        assert!(is_key(&"k".repeat(128)));
        for bad in ["", " ", "a b", "a/b", "ü", "a\n"] {
            assert!(!is_key(bad), "{bad:?}");
        }
        assert!(!is_key(&"k".repeat(129)));
    }
}
