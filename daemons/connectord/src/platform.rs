//! What a platform (Telegram, Slack) and connectord's core say to each
//! other: a message that came in, where an answer goes, a posted message to
//! edit, why a call failed, and the `Sink` a platform's reader hands what it
//! read to (stored before the platform is told it was read).

use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};

/// A message a platform delivered, read but not yet checked against the
/// allowlist or the rate limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inbound {
    /// Unique within the binding, stable across redeliveries: Telegram's
    /// `u<update_id>`, Slack's event id. A second message with the same key
    /// is the first one again and is dropped.
    pub key: String,
    /// The sender's user id on the platform.
    pub sender_id: String,
    /// The sender's @name without the `@` (Telegram's username), if any.
    pub sender_name: Option<String>,
    /// Telegram's chat id, Slack's channel id.
    pub chat_id: String,
    /// Slack's thread (the root message's ts) the message is in or starts;
    /// Telegram: none.
    pub thread: Option<String>,
    /// The platform's id of the message itself (Telegram's message_id,
    /// Slack's ts): an answer in a group replies to it.
    pub message_id: Option<String>,
    /// The text, with the bot's mention removed; at most what the platform
    /// sent (connectord refuses more than 8,000 characters itself).
    pub text: String,
    /// Sent in a group or channel (not a direct message).
    pub group: bool,
}

/// Where an answer goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    pub chat_id: String,
    /// Slack: the thread to answer in. Telegram: none.
    pub thread: Option<String>,
    /// Telegram, in a group: the message the answer replies to.
    pub reply_to: Option<String>,
}

/// A message the bot posted, which it may edit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Posted {
    /// Telegram's message_id, Slack's ts.
    pub id: String,
}

/// Why a call to a platform did not go through.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SendError {
    /// The platform refused the token (Telegram 401, Slack `invalid_auth`,
    /// `account_inactive`, `token_revoked`): the binding is switched off.
    #[error("the platform refused the token: {0}")]
    Unauthorized(String),
    /// Rate limited for longer than the call waits by itself.
    #[error("rate limited: retry after {0:?}")]
    RetryAfter(Duration),
    /// No answer, a cut connection or a 5xx: worth trying again.
    #[error("the platform did not answer: {0}")]
    Unreachable(String),
    /// The platform refused this request (a 400): trying again changes
    /// nothing. The platform's description, never the token.
    #[error("the platform refused: {0}")]
    Refused(String),
}

/// Who the token belongs to, as the platform says (Telegram's getMe,
/// Slack's auth.test).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// The bot's user id.
    pub id: String,
    /// The bot's @name (Telegram's username) or Slack's bot user name.
    pub name: String,
}

/// What a platform's reader reports about its link, for `/health`, the
/// binding's `status` and switching the binding off.
#[derive(Debug, Clone, PartialEq)]
pub enum Link {
    /// Reading: a long poll answered, or the WebSocket said `hello`.
    Connected,
    /// A failure it retries by itself (the reason, never the token).
    Retrying(String),
    /// The platform says the binding cannot go on (401, or another reader
    /// of the same bot for about a minute): connectord switches it off and
    /// posts a `needs_attention` notification with the reason.
    Fatal(String),
}

/// Where a platform's reader hands what it read. Implemented by
/// connectord's core; tests give their own.
pub trait Sink: Send + Sync + 'static {
    /// Stores `messages` of `binding` and, in the same transaction, the
    /// read position after them (Telegram: the next `offset`; Slack:
    /// none). Resolves once both are on disk: only then may the reader
    /// ask for more (Telegram) or ack (Slack). An error means nothing was
    /// stored: read the same messages again.
    fn accept(
        &self,
        binding: &str,
        messages: Vec<Inbound>,
        position: Option<i64>,
    ) -> BoxFuture<'_, anyhow::Result<()>>;

    /// The state of the binding's link changed.
    fn link(&self, binding: &str, link: Link) -> BoxFuture<'_, ()>;

    /// Slack: whether the bot follows `thread` in `channel` (it answers
    /// messages there without a mention), per the binding's follow mode.
    fn follows(&self, binding: &str, channel: &str, thread: &str) -> BoxFuture<'_, bool>;
}

/// Calls `send` again after a cut connection or a 5xx (waiting 1, 2 and
/// 4 s). Used per part of an answer: a retry can repeat at most the one
/// part whose answer was lost on the way back, and a cut never loses the
/// rest of the answer.
pub async fn again<T, F, Fut>(mut send: F) -> Result<T, SendError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, SendError>>,
{
    let mut wait = Duration::from_secs(1);
    for _ in 0..3 {
        match send().await {
            Err(SendError::Unreachable(why)) => {
                tracing::debug!(reason = %why, "a part did not go through; sending it again");
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
            other => return other,
        }
    }
    send().await
}
