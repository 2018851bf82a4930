//! Telegram: a binding's reader (long polling `getUpdates` from the stored
//! offset, handing each batch to the core's `Sink` and asking for more only
//! once it is stored) and its `Outbox` (typing, progress, answers in
//! MarkdownV2 cut at 4,096 with a plain-text fallback, documents).

pub mod api;
pub mod markdown;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::Value;
use tandem_shared::shutdown::Shutdown;

pub use api::{ApiError, BotApi};

use crate::platform::{Identity, Inbound, Link, Posted, SendError, Sink, Target};

/// How long a long poll waits for an update.
pub const POLL_TIMEOUT_S: u64 = 30;
/// How long another reader of the same bot (409) is ridden out by default.
pub const CONFLICT_GRACE: Duration = Duration::from_secs(60);
/// Between tries while another reader holds the bot.
const CONFLICT_RETRY: Duration = Duration::from_secs(3);
const BACKOFF_FIRST: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// The reason a 409 gives, for the binding's status and the notification.
pub const CONFLICT_REASON: &str = "another program reads this bot's updates (409)";
const WEBHOOK_REASON: &str = "a webhook is set for this bot, so it cannot be polled (409)";

/// What the reader of one binding needs.
pub struct TelegramLink {
    pub binding: String,
    pub api: BotApi,
    /// Who the token belongs to (getMe at save): its id and @name decide
    /// which group messages are for it.
    pub bot: Identity,
    /// The stored read position: the next `getUpdates` offset.
    pub offset: i64,
    /// How long a 409 is retried before the binding is switched off.
    pub conflict_grace: Duration,
}

impl TelegramLink {
    pub fn new(binding: String, api: BotApi, bot: Identity, offset: i64) -> TelegramLink {
        TelegramLink {
            binding,
            api,
            bot,
            offset,
            conflict_grace: CONFLICT_GRACE,
        }
    }
}

/// Reads the binding's updates until `shutdown` fires or Telegram says the
/// binding cannot go on (`Link::Fatal`, then it returns).
pub async fn read(link: TelegramLink, sink: Arc<dyn Sink>, shutdown: Shutdown) {
    let TelegramLink {
        binding,
        api,
        bot,
        mut offset,
        conflict_grace,
    } = link;
    let mut reported: Option<Link> = None;
    let mut backoff = BACKOFF_FIRST;
    let mut conflict_since: Option<Instant> = None;
    // The first poll answers at once: the binding shows `connected` (or why
    // not) right after it is saved, not after the first 30 s poll.
    let mut timeout_s = 0;
    loop {
        let polled = tokio::select! {
            _ = shutdown.wait() => return,
            polled = api.get_updates(offset, timeout_s) => polled,
        };
        timeout_s = POLL_TIMEOUT_S;
        let pause = match polled {
            Ok(updates) => {
                backoff = BACKOFF_FIRST;
                conflict_since = None;
                report(&*sink, &binding, &mut reported, Link::Connected).await;
                let Some(last) = updates.iter().filter_map(|u| u["update_id"].as_i64()).max()
                else {
                    continue;
                };
                // Ids come in order; a batch never moves the offset back.
                let next = (last + 1).max(offset);
                let inbounds: Vec<Inbound> =
                    updates.iter().filter_map(|u| inbound(u, &bot)).collect();
                if !accept(&*sink, &binding, inbounds, next, &shutdown).await {
                    return;
                }
                offset = next;
                continue;
            }
            Err(ApiError::Conflict(description)) => {
                let reason = if description.to_ascii_lowercase().contains("webhook") {
                    WEBHOOK_REASON
                } else {
                    CONFLICT_REASON
                };
                let since = *conflict_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= conflict_grace {
                    report(&*sink, &binding, &mut reported, Link::Fatal(reason.into())).await;
                    return;
                }
                report(
                    &*sink,
                    &binding,
                    &mut reported,
                    Link::Retrying(reason.into()),
                )
                .await;
                CONFLICT_RETRY.min(conflict_grace.saturating_sub(since.elapsed()))
            }
            Err(ApiError::Send(SendError::Unauthorized(description))) => {
                let reason = format!("Telegram refused the bot token: {description}");
                report(&*sink, &binding, &mut reported, Link::Fatal(reason)).await;
                return;
            }
            Err(ApiError::Send(SendError::RetryAfter(wait))) => {
                let reason = format!("rate limited by Telegram for {} s", wait.as_secs());
                report(&*sink, &binding, &mut reported, Link::Retrying(reason)).await;
                wait
            }
            Err(ApiError::Send(e @ (SendError::Unreachable(_) | SendError::Refused(_)))) => {
                let reason = match e {
                    SendError::Unreachable(why) => format!("Telegram did not answer: {why}"),
                    other => other.to_string(),
                };
                report(&*sink, &binding, &mut reported, Link::Retrying(reason)).await;
                let pause = backoff;
                backoff = (backoff * 2).min(BACKOFF_MAX);
                pause
            }
        };
        tokio::select! {
            _ = shutdown.wait() => return,
            _ = tokio::time::sleep(pause) => {}
        }
    }
}

/// Hands a batch to the sink until it is stored; false when shutdown
/// began first. The same batch is handed again after a failure: nothing of
/// it was stored, and the offset is not moved past it.
async fn accept(
    sink: &dyn Sink,
    binding: &str,
    inbounds: Vec<Inbound>,
    next: i64,
    shutdown: &Shutdown,
) -> bool {
    let mut backoff = Duration::from_millis(100);
    loop {
        // Not cut by shutdown: a store half done would be asked again anyway.
        match sink.accept(binding, inbounds.clone(), Some(next)).await {
            Ok(()) => return true,
            Err(e) => {
                tracing::warn!(binding, error = %e, "storing read messages failed; trying again");
            }
        }
        tokio::select! {
            _ = shutdown.wait() => return false,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// Tells the sink of a change of the link's state (not of every poll).
async fn report(sink: &dyn Sink, binding: &str, reported: &mut Option<Link>, link: Link) {
    if reported.as_ref() == Some(&link) {
        return;
    }
    *reported = Some(link.clone());
    sink.link(binding, link).await;
}

/// An update as a message for the core, if it is one for the bot: every
/// text message of a private chat; in a group, one that mentions the bot
/// (the mention taken out) or replies to one of its messages.
pub fn inbound(update: &Value, bot: &Identity) -> Option<Inbound> {
    let update_id = update["update_id"].as_i64()?;
    let message = &update["message"];
    let text = message["text"].as_str()?;
    let chat = &message["chat"];
    let chat_id = id_string(&chat["id"])?;
    let from = &message["from"];
    let sender_id = id_string(&from["id"])?;
    if from["is_bot"].as_bool() == Some(true) && sender_id == bot.id {
        return None;
    }
    let group = match chat["type"].as_str()? {
        "private" => false,
        "group" | "supergroup" => true,
        _ => return None,
    };
    let text = if group {
        let replies_to_bot =
            id_string(&message["reply_to_message"]["from"]["id"]).is_some_and(|id| id == bot.id);
        let (mentioned, without) = take_mention(text, message, bot);
        if !mentioned && !replies_to_bot {
            return None;
        }
        without
    } else {
        text.to_string()
    };
    let text = text.trim().to_string();
    if text.is_empty() {
        return None;
    }
    Some(Inbound {
        key: format!("u{update_id}"),
        sender_id,
        sender_name: from["username"].as_str().map(str::to_string),
        chat_id,
        thread: None,
        message_id: message["message_id"].as_i64().map(|id| id.to_string()),
        text,
        group,
    })
}

fn id_string(value: &Value) -> Option<String> {
    value.as_i64().map(|n| n.to_string())
}

/// Whether `text` mentions the bot (a `mention` entity naming it, a
/// `text_mention` of it, or an @name in the text) and the text without it.
fn take_mention(text: &str, message: &Value, bot: &Identity) -> (bool, String) {
    let handle = format!("@{}", bot.name).to_lowercase();
    let units: Vec<u16> = text.encode_utf16().collect();
    let mut cuts: Vec<(usize, usize)> = Vec::new();
    let mut mentioned = false;
    for entity in message["entities"].as_array().into_iter().flatten() {
        let (Some(offset), Some(length)) = (entity["offset"].as_u64(), entity["length"].as_u64())
        else {
            continue;
        };
        // Offsets from the wire: out of range (or overflowing) is skipped.
        let Some(end) = offset.checked_add(length) else {
            continue;
        };
        let (start, end) = (offset as usize, end as usize);
        if start > end || end > units.len() {
            continue;
        }
        let named = String::from_utf16_lossy(&units[start..end]).to_lowercase();
        let is_bot = match entity["type"].as_str() {
            Some("mention") => !bot.name.is_empty() && named == handle,
            Some("text_mention") => id_string(&entity["user"]["id"]).is_some_and(|id| id == bot.id),
            _ => false,
        };
        if is_bot {
            mentioned = true;
            cuts.push((start, end));
        }
    }
    if cuts.is_empty() && !bot.name.is_empty() {
        // No entities (an older client, a forwarded text): find the @name.
        let lower: Vec<u16> = text.to_lowercase().encode_utf16().collect();
        let needle: Vec<u16> = handle.encode_utf16().collect();
        if lower.len() == units.len() {
            let mut i = 0;
            while i + needle.len() <= lower.len() {
                let boundary_after = lower
                    .get(i + needle.len())
                    .is_none_or(|c| !is_name_unit(*c));
                let boundary_before = i == 0 || !is_name_unit(lower[i - 1]);
                if lower[i..i + needle.len()] == needle[..] && boundary_after && boundary_before {
                    mentioned = true;
                    cuts.push((i, i + needle.len()));
                    i += needle.len();
                } else {
                    i += 1;
                }
            }
        }
    }
    let mut out: Vec<u16> = Vec::with_capacity(units.len());
    let mut at = 0;
    cuts.sort_unstable();
    for (start, end) in cuts {
        if start >= at {
            out.extend_from_slice(&units[at..start]);
            at = end;
        }
    }
    out.extend_from_slice(&units[at..]);
    let without = String::from_utf16_lossy(&out);
    // "@bot, what is…" reads "what is…".
    let without = without.trim_start_matches([',', ':', ' ']).to_string();
    (
        mentioned,
        without.split_whitespace().collect::<Vec<_>>().join(" "),
    )
}

fn is_name_unit(c: u16) -> bool {
    char::from_u32(u32::from(c)).is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Where a binding's answers go out. No pacing here (the core paces edits);
/// a 429 is waited out by the call.
#[derive(Clone, Debug)]
pub struct Outbox {
    api: BotApi,
}

impl Outbox {
    pub fn new(api: BotApi) -> Outbox {
        Outbox { api }
    }

    /// "typing…" in the chat (Telegram shows it about 5 s).
    pub async fn typing(&self, target: &Target) -> Result<(), SendError> {
        self.api.send_chat_action(target, "typing").await
    }

    /// A plain-text message (progress); cut at 4,096.
    pub async fn post(&self, target: &Target, text: &str) -> Result<Posted, SendError> {
        self.api.send_message(target, &clip(text), None).await
    }

    /// Replaces a posted message's text with plain `text`; cut at 4,096.
    pub async fn edit(
        &self,
        target: &Target,
        posted: &Posted,
        text: &str,
    ) -> Result<(), SendError> {
        self.api
            .edit_message_text(target, posted, &clip(text), None)
            .await
    }

    /// The agent's answer: MarkdownV2 in parts of at most 4,096; the first
    /// part replaces `replace` when given (a progress message), the rest
    /// are sent. A part Telegram cannot parse goes again as plain text. An
    /// empty answer sends nothing.
    pub async fn answer(
        &self,
        target: &Target,
        replace: Option<&Posted>,
        markdown: &str,
    ) -> Result<Vec<Posted>, SendError> {
        let mut posted = Vec::new();
        let mut replace = replace.cloned();
        for part in markdown::parts(markdown, markdown::LIMIT) {
            let over = replace.as_ref();
            match crate::platform::again(|| self.put(target, over, &part.v2, Some("MarkdownV2")))
                .await
            {
                Ok(p) => posted.push(p),
                Err(SendError::Refused(why)) if why.contains("can't parse entities") => {
                    tracing::warn!(error = %why, "Telegram could not parse an answer's MarkdownV2; sending it as plain text");
                    for (n, piece) in markdown::split(&part.plain, markdown::LIMIT)
                        .into_iter()
                        .enumerate()
                    {
                        let over = if n == 0 { replace.as_ref() } else { None };
                        posted.push(
                            crate::platform::again(|| self.put(target, over, &piece, None)).await?,
                        );
                    }
                }
                Err(e) => return Err(e),
            }
            replace = None;
        }
        Ok(posted)
    }

    /// Edits `over` when given, else sends; an edit Telegram refuses for
    /// another reason than parsing (the message was deleted, too old) is
    /// sent as a new message instead.
    async fn put(
        &self,
        target: &Target,
        over: Option<&Posted>,
        text: &str,
        mode: Option<&str>,
    ) -> Result<Posted, SendError> {
        if let Some(over) = over {
            match self.api.edit_message_text(target, over, text, mode).await {
                Ok(()) => return Ok(over.clone()),
                Err(SendError::Refused(why)) if !why.contains("can't parse entities") => {
                    tracing::debug!(error = %why, "editing the progress message failed; sending the answer anew");
                }
                Err(e) => return Err(e),
            }
        }
        self.api.send_message(target, text, mode).await
    }

    /// A file the turn made, as a document.
    pub async fn send_file(
        &self,
        target: &Target,
        name: &str,
        bytes: Bytes,
    ) -> Result<Posted, SendError> {
        self.api.send_document(target, name, bytes, None).await
    }
}

/// Plain text within Telegram's limit (cut with an ellipsis).
fn clip(text: &str) -> String {
    if markdown::utf16_len(text) <= markdown::LIMIT {
        return text.to_string();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        if used + c.len_utf16() > markdown::LIMIT - 1 {
            break;
        }
        used += c.len_utf16();
        out.push(c);
    }
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bot() -> Identity {
        Identity {
            id: "900".into(),
            name: "tandem_bot".into(),
        }
    }

    #[test]
    fn private_messages_are_taken() {
        let u = json!({"update_id": 7, "message": {"message_id": 3, "date": 1,
            "from": {"id": 42, "is_bot": false, "first_name": "A", "username": "ann"},
            "chat": {"id": 42, "type": "private"}, "text": "hello"}});
        let m = inbound(&u, &bot()).unwrap();
        assert_eq!(m.key, "u7");
        assert_eq!(m.sender_id, "42");
        assert_eq!(m.sender_name.as_deref(), Some("ann"));
        assert_eq!(m.chat_id, "42");
        assert_eq!(m.message_id.as_deref(), Some("3"));
        assert!(!m.group);
        // A photo with a caption has no text: not taken.
        let u = json!({"update_id": 8, "message": {"message_id": 4, "from": {"id": 42},
            "chat": {"id": 42, "type": "private"}, "caption": "look"}});
        assert!(inbound(&u, &bot()).is_none());
    }

    #[test]
    fn groups_need_a_mention_or_a_reply() {
        let base = |text: &str, entities: Value, reply: Value| {
            json!({"update_id": 9, "message": {"message_id": 5,
                "from": {"id": 42, "username": "ann"}, "chat": {"id": -100, "type": "supergroup"},
                "text": text, "entities": entities, "reply_to_message": reply}})
        };
        let plain = base("just talking", json!([]), Value::Null);
        assert!(inbound(&plain, &bot()).is_none());
        // "😀 " is three UTF-16 units: the entity's offset counts them so.
        let u = base(
            "😀 @Tandem_Bot what is up?",
            json!([{"type": "mention", "offset": 3, "length": 11}]),
            Value::Null,
        );
        let m = inbound(&u, &bot()).unwrap();
        assert_eq!(m.text, "😀 what is up?");
        assert!(m.group);
        let u = base("@tandem_bot, hi", Value::Null, Value::Null);
        assert_eq!(inbound(&u, &bot()).unwrap().text, "hi");
        let u = base("@tandem_botx hi", Value::Null, Value::Null);
        assert!(inbound(&u, &bot()).is_none(), "another name");
        let u = base(
            "@other hi",
            json!([{"type": "mention", "offset": 0, "length": 6}]),
            Value::Null,
        );
        assert!(inbound(&u, &bot()).is_none());
        let reply = json!({"message_id": 2, "from": {"id": 900, "is_bot": true}});
        let u = base("and then?", Value::Null, reply);
        assert_eq!(inbound(&u, &bot()).unwrap().text, "and then?");
        let reply = json!({"message_id": 2, "from": {"id": 43}});
        assert!(inbound(&base("and then?", Value::Null, reply), &bot()).is_none());
        assert!(
            inbound(&base("@tandem_bot", Value::Null, Value::Null), &bot()).is_none(),
            "nothing left"
        );
    }

    #[test]
    fn clip_counts_utf16() {
        let text = "😀".repeat(3000);
        let clipped = clip(&text);
        assert!(markdown::utf16_len(&clipped) <= markdown::LIMIT);
        assert!(clipped.ends_with('…'));
        assert_eq!(clip("short"), "short");
    }
}
