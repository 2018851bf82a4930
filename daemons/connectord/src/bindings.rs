//! A binding: a bot (Telegram) or app (Slack) bound to one saved agent, who
//! may talk to it, and how it answers. The request bodies, their checks
//! (every error names the field and the limit; nothing is stored on one)
//! and the view the routes answer with, which never holds a token.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tandem_shared::http::{check_chars, ApiError};

use crate::store::Stored;

/// Bindings at most.
pub const MAX_BINDINGS: usize = 10;
/// Allowlist entries at most.
pub const MAX_ALLOW: usize = 500;
/// The phrase that turns `accept_any` on.
pub const ACCEPT_ANY_PHRASE: &str = "accept any message";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Telegram,
    Slack,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Telegram => "telegram",
            Kind::Slack => "slack",
        }
    }

    pub fn parse(text: &str) -> Option<Kind> {
        match text {
            "telegram" => Some(Kind::Telegram),
            "slack" => Some(Kind::Slack),
            _ => None,
        }
    }
}

/// What the sender sees while the agent works.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReplyMode {
    /// One message that says what the agent is doing, replaced by the answer.
    Progress,
    /// The answer growing in place.
    Stream,
    /// Typing only, then the answer.
    Off,
}

/// Which messages share one chat in chatd.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Conversation {
    /// One chat per sender.
    Sender,
    /// One chat per platform chat or channel (a group shares it).
    Chat,
    /// Per sender, a new chat after `window_minutes` of quiet.
    Window,
    /// Per thread (Slack); per chat on Telegram.
    Thread,
}

/// Slack: threads answered without a mention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Follow {
    /// Threads the bot answered in.
    Own,
    /// Any thread of a channel the bot is in.
    Any,
    /// None: a mention each time.
    Never,
}

/// The settings kept as JSON with the binding. A field added later reads
/// as its default in older rows, not as a reason to drop them all.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    pub allowlist: Vec<String>,
    pub accept_any: bool,
    pub reply_mode: ReplyMode,
    pub conversation: Conversation,
    pub window_minutes: u32,
    pub send_files: bool,
    pub follow_threads: Follow,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            allowlist: Vec::new(),
            accept_any: false,
            reply_mode: ReplyMode::Progress,
            conversation: Conversation::Sender,
            window_minutes: 30,
            send_files: false,
            follow_threads: Follow::Own,
        }
    }
}

impl Settings {
    pub fn of(stored: &Stored) -> Settings {
        serde_json::from_value(stored.settings.clone()).unwrap_or_default()
    }

    /// Whether this sender may talk to the bot: the allowlist names their
    /// user id, their @name, or the chat/channel the message came from.
    pub fn lets_in(&self, sender_id: &str, sender_name: Option<&str>, chat_id: &str) -> bool {
        if self.accept_any {
            return true;
        }
        self.allowlist.iter().any(|entry| {
            if let Some(name) = entry.strip_prefix('@') {
                sender_name.is_some_and(|n| n.eq_ignore_ascii_case(name))
            } else {
                entry == sender_id || entry == chat_id
            }
        })
    }
}

/// A create or update body. On update every field is optional and a left
/// out token keeps the stored one.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Body {
    pub kind: Option<String>,
    pub name: Option<String>,
    pub token: Option<String>,
    pub app_token: Option<String>,
    pub agent_id: Option<String>,
    pub enabled: Option<bool>,
    pub allowlist: Option<Vec<String>>,
    pub accept_any: Option<bool>,
    pub confirm_accept_any: Option<String>,
    pub reply_mode: Option<ReplyMode>,
    pub conversation: Option<Conversation>,
    pub window_minutes: Option<u32>,
    pub send_files: Option<bool>,
    pub follow_threads: Option<Follow>,
}

/// A checked body, merged over what was stored (on update).
#[derive(Debug, Clone)]
pub struct Checked {
    pub kind: Kind,
    pub name: String,
    /// New tokens given in this body (None: keep the stored one).
    pub token: Option<String>,
    pub app_token: Option<String>,
    pub agent_id: String,
    pub enabled: bool,
    pub settings: Settings,
}

/// A token's shape, without saying the token back.
fn token_shape(field: &str, token: &str, kind: Kind) -> Result<(), ApiError> {
    check_chars(field, token, 10, 512)?;
    if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(ApiError::bad_input(
            field,
            "must not hold spaces or control characters",
        ));
    }
    match (kind, field) {
        (Kind::Telegram, _) if !token.contains(':') => Err(ApiError::bad_input(
            field,
            "is not a Telegram bot token (digits, a colon, then letters: from @BotFather)",
        )),
        (Kind::Slack, "token") if !token.starts_with("xoxb-") => Err(ApiError::bad_input(
            field,
            "is not a Slack bot token (it starts with xoxb-)",
        )),
        (Kind::Slack, "app_token") if !token.starts_with("xapp-") => Err(ApiError::bad_input(
            field,
            "is not a Slack app-level token (it starts with xapp-)",
        )),
        _ => Ok(()),
    }
}

/// Checks `body` over `before` (None: a create). Nothing here reaches the
/// platform or chatd: the routes check the token and the agent after.
pub fn check(body: Body, before: Option<&Stored>) -> Result<Checked, ApiError> {
    let kind = match (&body.kind, before) {
        (Some(text), None) => Kind::parse(text).ok_or_else(|| {
            ApiError::bad_input("kind", format!("{text:?} is not telegram or slack"))
        })?,
        (None, None) => {
            return Err(ApiError::bad_input(
                "kind",
                "is required (telegram or slack)",
            ))
        }
        (Some(text), Some(b)) if text != &b.kind => {
            return Err(ApiError::bad_input(
                "kind",
                "cannot change: make a new binding",
            ))
        }
        (_, Some(b)) => Kind::parse(&b.kind).unwrap_or(Kind::Telegram),
    };
    let old = before.map(Settings::of).unwrap_or_default();
    let name = match (&body.name, before) {
        (Some(name), _) => name.trim().to_string(),
        (None, Some(b)) => b.name.clone(),
        (None, None) => return Err(ApiError::bad_input("name", "is required")),
    };
    check_chars("name", &name, 1, 100)?;
    if let Some(token) = &body.token {
        token_shape("token", token, kind)?;
    } else if before.is_none() {
        return Err(ApiError::bad_input("token", "is required"));
    }
    match (&body.app_token, kind) {
        (Some(_), Kind::Telegram) => {
            return Err(ApiError::bad_input(
                "app_token",
                "is for Slack bindings only",
            ))
        }
        (Some(token), Kind::Slack) => token_shape("app_token", token, kind)?,
        (None, Kind::Slack) if before.is_none() => {
            return Err(ApiError::bad_input(
                "app_token",
                "is required for Slack (an app-level token with connections:write, xapp-…)",
            ))
        }
        _ => {}
    }
    let agent_id = match (&body.agent_id, before) {
        (Some(a), _) => a.clone(),
        (None, Some(b)) => b.agent_id.clone(),
        (None, None) => {
            return Err(ApiError::bad_input(
                "agent_id",
                "is required: the saved agent it answers as",
            ))
        }
    };
    if !(agent_id.starts_with("a_")
        && (3..=64).contains(&agent_id.len())
        && agent_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'))
    {
        return Err(ApiError::bad_input(
            "agent_id",
            "is not a saved agent's id (a_…)",
        ));
    }
    let allowlist = body.allowlist.unwrap_or(old.allowlist);
    if allowlist.len() > MAX_ALLOW {
        return Err(ApiError::bad_input(
            "allowlist",
            format!("{} entries is more than {MAX_ALLOW}", allowlist.len()),
        )
        .with("limit", MAX_ALLOW));
    }
    let mut clean = Vec::with_capacity(allowlist.len());
    for (i, entry) in allowlist.iter().enumerate() {
        let entry = entry.trim();
        let field = format!("allowlist[{i}]");
        check_chars(&field, entry, 1, 100)?;
        if entry.chars().any(char::is_whitespace) {
            return Err(ApiError::bad_input(
                &field,
                "must be one id or @name, without spaces",
            ));
        }
        if !clean.iter().any(|e: &String| e == entry) {
            clean.push(entry.to_string());
        }
    }
    let accept_any = body.accept_any.unwrap_or(old.accept_any);
    if accept_any
        && !old.accept_any
        && body.confirm_accept_any.as_deref() != Some(ACCEPT_ANY_PHRASE)
    {
        return Err(ApiError::bad_input(
            "confirm_accept_any",
            format!(
                "accept_any answers anyone who finds the bot: say so with \"confirm_accept_any\": \"{ACCEPT_ANY_PHRASE}\""
            ),
        ));
    }
    let window_minutes = body.window_minutes.unwrap_or(old.window_minutes);
    if !(1..=10_080).contains(&window_minutes) {
        return Err(ApiError::bad_input(
            "window_minutes",
            format!("{window_minutes} is outside 1..=10080"),
        ));
    }
    let follow_threads = body.follow_threads.unwrap_or(old.follow_threads);
    if kind == Kind::Telegram && body.follow_threads.is_some_and(|f| f != Follow::Own) {
        return Err(ApiError::bad_input(
            "follow_threads",
            "is for Slack bindings only",
        ));
    }
    Ok(Checked {
        kind,
        name,
        token: body.token,
        app_token: body.app_token,
        agent_id,
        enabled: body.enabled.unwrap_or(before.is_none_or(|b| b.enabled)),
        settings: Settings {
            allowlist: clean,
            accept_any,
            reply_mode: body.reply_mode.unwrap_or(old.reply_mode),
            // On Slack a thread is one chat unless asked otherwise.
            conversation: body.conversation.unwrap_or(match (before, kind) {
                (None, Kind::Slack) => Conversation::Thread,
                _ => old.conversation,
            }),
            window_minutes,
            send_files: body.send_files.unwrap_or(old.send_files),
            follow_threads,
        },
    })
}

/// The binding as the routes show it: no token, only whether it has one.
pub fn view(b: &Stored, status: Value) -> Value {
    let settings = Settings::of(b);
    json!({
        "id": b.id,
        "kind": b.kind,
        "name": b.name,
        "agent_id": b.agent_id,
        "enabled": b.enabled,
        "allowlist": settings.allowlist,
        "accept_any": settings.accept_any,
        "reply_mode": settings.reply_mode,
        "conversation": settings.conversation,
        "window_minutes": settings.window_minutes,
        "send_files": settings.send_files,
        "follow_threads": settings.follow_threads,
        "has_token": !b.token.is_empty(),
        "has_app_token": b.app_token.as_deref().is_some_and(|t| !t.is_empty()),
        "bot": b.bot,
        "status": status,
        "created": b.created,
        "updated": b.updated,
    })
}

/// What each kind takes, for a form (`GET /connectors/kinds`).
pub fn kinds() -> Value {
    json!({"kinds": [
        {"kind": "telegram", "title": "Telegram bot",
         "tokens": [{"field": "token", "hint": "the bot token from @BotFather (123456:ABC…)"}],
         "reply_modes": ["progress", "stream", "off"],
         "conversations": ["sender", "chat", "window", "thread"],
         "allowlist": "user ids, chat ids (groups are negative), @usernames",
         "limit": {"message_chars": crate::MAX_TEXT, "answer_part_chars": 4096}},
        {"kind": "slack", "title": "Slack app (Socket Mode)",
         "tokens": [{"field": "token", "hint": "the bot token (xoxb-…)"},
                    {"field": "app_token", "hint": "an app-level token with connections:write (xapp-…)"}],
         "reply_modes": ["progress", "stream", "off"],
         "conversations": ["sender", "chat", "window", "thread"],
         "follow_threads": ["own", "any", "never"],
         "allowlist": "user ids (U…), channel ids (C…)",
         "limit": {"message_chars": crate::MAX_TEXT, "answer_part_chars": 4000}}
    ], "max_bindings": MAX_BINDINGS})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(v: Value) -> Result<Checked, ApiError> {
        check(serde_json::from_value(v).unwrap(), None)
    }

    #[test]
    fn bad_input_names_the_field() {
        let ok = json!({"kind": "telegram", "name": "Helper", "token": "123:abcdefghijk", "agent_id": "a_1"});
        assert!(create(ok.clone()).is_ok());
        let field = |mut v: Value, k: &str, x: Value| {
            v[k] = x;
            let err = create(v).unwrap_err();
            err.to_string()
        };
        assert!(field(ok.clone(), "kind", json!("irc")).contains("kind"));
        assert!(field(ok.clone(), "token", json!("nocolonhere")).contains("token"));
        assert!(field(ok.clone(), "agent_id", json!("x")).contains("agent_id"));
        assert!(field(ok.clone(), "window_minutes", json!(0)).contains("outside 1..=10080"));
        let err = field(ok.clone(), "accept_any", json!(true));
        assert!(err.contains("confirm_accept_any"), "{err}");
        let mut v = ok.clone();
        v["accept_any"] = json!(true);
        v["confirm_accept_any"] = json!(ACCEPT_ANY_PHRASE);
        assert!(create(v).unwrap().settings.accept_any);
        let err = create(
            json!({"kind": "slack", "name": "S", "token": "xoxb-123456789", "agent_id": "a_1"}),
        )
        .unwrap_err();
        assert!(err.to_string().contains("app_token"));
    }

    #[test]
    fn the_allowlist_takes_ids_names_and_chats() {
        let s = Settings {
            allowlist: vec!["42".into(), "@Ann".into(), "-100".into()],
            ..Settings::default()
        };
        assert!(s.lets_in("42", None, "42"));
        assert!(s.lets_in("7", Some("ann"), "7"));
        assert!(s.lets_in("9", None, "-100"));
        assert!(!s.lets_in("9", Some("bob"), "9"));
    }
}
