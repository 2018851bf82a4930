//! Slack: the Socket Mode reader (`read`) and the `Outbox` answers go out
//! through.
//!
//! The reader asks `apps.connections.open` for an address, keeps one
//! WebSocket open, hands each event to the `Sink` and acks its envelope
//! only once the sink has stored it: an envelope not acked is sent again by
//! Slack (on this connection or the next), and the event's id as the key
//! makes the second copy a no-op in the core.

pub mod api;
pub mod mrkdwn;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tandem_shared::shutdown::Shutdown;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::{http::Uri, Message};
use tokio_tungstenite::WebSocketStream;

use crate::platform::{Identity, Inbound, Link, Posted, SendError, Sink, Target};
pub use api::SlackApi;

/// Slack cuts messages longer than this into "show more"; answers are split.
pub const MAX_MESSAGE: usize = 4000;

const MIN_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long opening the WebSocket (TCP, TLS, upgrade) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// We ping this often; a socket silent for `SILENCE` is taken as cut (a
/// dead network path gives no error of its own).
const PING_EVERY: Duration = Duration::from_secs(30);
const SILENCE: Duration = Duration::from_secs(90);

/// What `apps.connections.open` may refuse that no retry fixes.
const FATAL_OPEN_ERRORS: &[&str] = &[
    "not_allowed_token_type",
    "missing_scope",
    "no_permission",
    "invalid_app_token",
];

/// One Slack binding as its reader needs it.
pub struct SlackLink {
    pub binding: String,
    pub api: SlackApi,
    /// The bot user (`auth.test`): its own messages are skipped and its
    /// mention removed.
    pub bot: Identity,
}

/// Reads the binding's events until `shutdown` fires or Slack refuses the
/// app token (then `Link::Fatal`).
pub async fn read(link: SlackLink, sink: Arc<dyn Sink>, shutdown: Shutdown) {
    let binding = link.binding.as_str();
    let mut backoff = MIN_BACKOFF;
    let mut state = State::default();
    loop {
        let opened = tokio::select! {
            _ = shutdown.wait() => return,
            opened = link.api.open_connection() => opened,
        };
        let failure = match opened {
            Err(SendError::Unauthorized(why)) => {
                let reason = format!("Slack refused the app token: {why}");
                sink.link(binding, Link::Fatal(reason)).await;
                return;
            }
            Err(SendError::Refused(why)) if FATAL_OPEN_ERRORS.contains(&why.as_str()) => {
                let reason = format!("Slack refused to open Socket Mode: {why}");
                sink.link(binding, Link::Fatal(reason)).await;
                return;
            }
            Err(SendError::RetryAfter(after)) => {
                // Slack said how long; the backoff does not apply.
                state
                    .retrying(
                        &sink,
                        binding,
                        "Slack rate limited opening Socket Mode".into(),
                    )
                    .await;
                tokio::select! {
                    _ = shutdown.wait() => return,
                    _ = tokio::time::sleep(after) => {}
                }
                continue;
            }
            Err(e) => Some(format!("opening Socket Mode: {e}")),
            Ok(url) => {
                let connected = tokio::select! {
                    _ = shutdown.wait() => return,
                    c = tokio::time::timeout(CONNECT_TIMEOUT, connect(&url)) => c,
                };
                match connected {
                    Err(_) => Some("the Socket Mode connection did not open in time".into()),
                    Ok(Err(why)) => Some(why),
                    Ok(Ok(ws)) => {
                        let mut session = Session {
                            link: &link,
                            sink: &sink,
                            state: &mut state,
                            hello: false,
                        };
                        let end = session.run(ws, &shutdown).await;
                        let hello = session.hello;
                        if hello {
                            // It worked for a while: start the backoff over.
                            backoff = MIN_BACKOFF;
                        }
                        match end {
                            End::Shutdown => return,
                            // Slack asked us to move: at once, unless it
                            // keeps asking before saying hello.
                            End::Disconnect(_) if hello => continue,
                            End::Disconnect(reason) => {
                                Some(format!("Slack disconnected before hello ({reason})"))
                            }
                            End::Cut(reason) => Some(reason),
                        }
                    }
                }
            }
        };
        if let Some(reason) = failure {
            state.retrying(&sink, binding, reason).await;
            tokio::select! {
                _ = shutdown.wait() => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }
}

/// The link state last reported, so a reconnect after `disconnect` does
/// not report `Connected` again and again.
#[derive(Default)]
struct State {
    connected: bool,
}

impl State {
    async fn connected(&mut self, sink: &Arc<dyn Sink>, binding: &str) {
        if !self.connected {
            self.connected = true;
            sink.link(binding, Link::Connected).await;
        }
    }

    async fn retrying(&mut self, sink: &Arc<dyn Sink>, binding: &str, reason: String) {
        self.connected = false;
        tracing::warn!(binding, reason = %reason, "Slack link retrying");
        sink.link(binding, Link::Retrying(reason)).await;
    }
}

/// Why a WebSocket session ended.
enum End {
    Shutdown,
    /// Slack's `disconnect` (refresh_requested, warning, …).
    Disconnect(String),
    /// Closed or broken.
    Cut(String),
}

struct Session<'a> {
    link: &'a SlackLink,
    sink: &'a Arc<dyn Sink>,
    state: &'a mut State,
    hello: bool,
}

impl Session<'_> {
    async fn run(&mut self, mut ws: Ws, shutdown: &Shutdown) -> End {
        let mut ping =
            tokio::time::interval_at(tokio::time::Instant::now() + PING_EVERY, PING_EVERY);
        let mut seen = Instant::now();
        loop {
            tokio::select! {
                _ = shutdown.wait() => {
                    close(&mut ws).await;
                    return End::Shutdown;
                }
                _ = ping.tick() => {
                    if seen.elapsed() > SILENCE {
                        return End::Cut("Slack went silent".into());
                    }
                    if ws.send(Message::Ping(Vec::new().into())).await.is_err() {
                        return End::Cut("the Socket Mode connection broke".into());
                    }
                }
                frame = ws.next() => {
                    seen = Instant::now();
                    let text = match frame {
                        None | Some(Ok(Message::Close(_))) => {
                            return End::Cut("Slack closed the Socket Mode connection".into())
                        }
                        Some(Err(e)) => {
                            return End::Cut(format!("the Socket Mode connection broke: {e}"))
                        }
                        Some(Ok(Message::Text(text))) => text,
                        // Pings are answered by tungstenite itself.
                        Some(Ok(_)) => continue,
                    };
                    let Ok(frame) = serde_json::from_str::<Value>(text.as_str()) else {
                        tracing::debug!("Slack sent a frame that is not JSON");
                        continue;
                    };
                    match self.frame(&frame).await {
                        Next::Continue => {}
                        Next::Ack(id) => {
                            let ack = json!({ "envelope_id": id }).to_string();
                            if ws.send(Message::Text(ack.into())).await.is_err() {
                                return End::Cut("the Socket Mode connection broke".into());
                            }
                        }
                        Next::Disconnect(reason) => {
                            close(&mut ws).await;
                            return End::Disconnect(reason);
                        }
                    }
                }
            }
        }
    }

    async fn frame(&mut self, frame: &Value) -> Next {
        let binding = self.link.binding.as_str();
        match frame["type"].as_str() {
            Some("hello") => {
                self.hello = true;
                self.state.connected(self.sink, binding).await;
                return Next::Continue;
            }
            Some("disconnect") => {
                let reason = frame["reason"].as_str().unwrap_or("no reason").to_string();
                tracing::debug!(binding, reason = %reason, "Slack asked to reconnect");
                return Next::Disconnect(reason);
            }
            _ => {}
        }
        let Some(envelope) = frame["envelope_id"].as_str() else {
            return Next::Continue;
        };
        if frame["type"].as_str() != Some("events_api") {
            // Slash commands and interactions are not used: acked so Slack
            // stops sending them.
            return Next::Ack(envelope.to_string());
        }
        let inbound = match event_of(&self.link.bot, &frame["payload"]) {
            Seen::Skip => None,
            Seen::Take(inbound) => Some(inbound),
            Seen::IfFollowed(inbound) => {
                let thread = inbound.thread.clone().unwrap_or_default();
                self.sink
                    .follows(binding, &inbound.chat_id, &thread)
                    .await
                    .then_some(inbound)
            }
        };
        if let Some(inbound) = inbound {
            if let Err(e) = self.sink.accept(binding, vec![inbound], None).await {
                // Not acked: Slack sends it again.
                tracing::warn!(binding, error = %e, "a Slack event was not stored");
                return Next::Continue;
            }
        }
        Next::Ack(envelope.to_string())
    }
}

enum Next {
    Continue,
    Ack(String),
    Disconnect(String),
}

/// What one `events_api` payload is to the core.
#[derive(Debug, PartialEq)]
enum Seen {
    Skip,
    Take(Inbound),
    /// A message in a channel thread without a mention: taken only when
    /// the bot follows that thread.
    IfFollowed(Inbound),
}

fn event_of(bot: &Identity, payload: &Value) -> Seen {
    let event = &payload["event"];
    let (Some(kind), Some(channel), Some(user), Some(ts)) = (
        event["type"].as_str(),
        event["channel"].as_str(),
        event["user"].as_str(),
        event["ts"].as_str(),
    ) else {
        return Seen::Skip;
    };
    if user == bot.id || !event["bot_id"].is_null() || event["hidden"].as_bool() == Some(true) {
        return Seen::Skip;
    }
    // A user's message with files, or a thread reply also sent to the
    // channel, is still a user's message; every other subtype is not.
    if !matches!(
        event["subtype"].as_str(),
        None | Some("file_share") | Some("thread_broadcast")
    ) {
        return Seen::Skip;
    }
    let raw = event["text"].as_str().unwrap_or("");
    let thread_ts = event["thread_ts"].as_str().map(str::to_string);
    let direct = event["channel_type"].as_str() == Some("im")
        || (event["channel_type"].is_null() && channel.starts_with('D'));
    let key = payload["event_id"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| format!("{channel}/{ts}"));
    let inbound = |text: String, thread: Option<String>, group: bool| Inbound {
        key: key.clone(),
        sender_id: user.to_string(),
        sender_name: None,
        chat_id: channel.to_string(),
        thread,
        message_id: Some(ts.to_string()),
        text,
        group,
    };
    let text = plain_text(&without_mention(raw, &bot.id));
    if text.trim().is_empty() {
        return Seen::Skip;
    }
    match kind {
        // The DM itself comes as `message`; a mention there would be a
        // second copy of it.
        "app_mention" if direct => Seen::Skip,
        "app_mention" => {
            let thread = thread_ts.unwrap_or_else(|| ts.to_string());
            Seen::Take(inbound(text, Some(thread), true))
        }
        "message" if direct => Seen::Take(inbound(text, thread_ts, false)),
        // Its `app_mention` twin is the one taken.
        "message" if mentions(raw, &bot.id) => Seen::Skip,
        "message" => match thread_ts {
            Some(thread) => Seen::IfFollowed(inbound(text, Some(thread), true)),
            None => Seen::Skip,
        },
        _ => Seen::Skip,
    }
}

fn mentions(text: &str, bot: &str) -> bool {
    text.contains(&format!("<@{bot}>")) || text.contains(&format!("<@{bot}|"))
}

/// The text with every `<@BOT>` / `<@BOT|name>` taken out, and the space
/// that separated it; the rest of the text as it was.
fn without_mention(text: &str, bot: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    let open = format!("<@{bot}");
    while let Some(at) = rest.find(&open) {
        let after = &rest[at + open.len()..];
        let end = match after.chars().next() {
            Some('>') => Some(1),
            Some('|') => after.find('>').map(|e| e + 1),
            _ => None,
        };
        match end {
            Some(end) => {
                out.push_str(&rest[..at]);
                rest = &after[end..];
                if out.is_empty() || out.ends_with(char::is_whitespace) {
                    rest = rest.strip_prefix(' ').unwrap_or(rest);
                }
            }
            None => {
                out.push_str(&rest[..at + open.len()]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out.trim().to_string()
}

/// Slack's markup as plain text for the agent: `<url|label>` as
/// `label (url)`, mentions and channels by name, entities decoded.
fn plain_text(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(open) = rest.find('<') {
        let Some(len) = rest[open..].find('>') else {
            break;
        };
        out.push_str(&rest[..open]);
        let inner = &rest[open + 1..open + len];
        let (target, label) = match inner.split_once('|') {
            Some((t, l)) => (t, Some(l)),
            None => (inner, None),
        };
        let shown = if let Some(id) = target.strip_prefix('@') {
            format!("@{}", label.unwrap_or(id))
        } else if let Some(id) = target.strip_prefix('#') {
            format!("#{}", label.unwrap_or(id))
        } else if let Some(special) = target.strip_prefix('!') {
            match label {
                Some(label) => label.to_string(),
                None => format!("@{}", special.split('^').next().unwrap_or(special)),
            }
        } else if let Some(address) = target.strip_prefix("mailto:") {
            label.unwrap_or(address).to_string()
        } else {
            match label {
                Some(label) if label != target && !target.ends_with(label) => {
                    format!("{label} ({target})")
                }
                _ => target.to_string(),
            }
        };
        out.push_str(&shown);
        rest = &rest[open + len + 1..];
    }
    out.push_str(rest);
    out.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// Where answers to a Slack binding go out. No pacing here: the core paces
/// edits; a 429 is waited out by the API client.
#[derive(Clone, Debug)]
pub struct Outbox {
    api: SlackApi,
}

impl Outbox {
    pub fn new(api: SlackApi) -> Outbox {
        Outbox { api }
    }

    /// Slack bots have no typing indicator over the Web API.
    pub async fn typing(&self, _target: &Target) -> Result<(), SendError> {
        Ok(())
    }

    /// Posts plain `text` (escaped, cut to one message), e.g. "Working…".
    pub async fn post(&self, target: &Target, text: &str) -> Result<Posted, SendError> {
        self.api.post_message(target, &plain(text)).await
    }

    /// Replaces a posted message's text with plain `text` (escaped, cut to
    /// one message): progress and the streamed answer so far.
    pub async fn edit(
        &self,
        target: &Target,
        posted: &Posted,
        text: &str,
    ) -> Result<(), SendError> {
        self.api.update(target, posted, &plain(text)).await
    }

    /// Sends the agent's Markdown answer as mrkdwn in parts of at most
    /// 4,000 characters: the first replaces `replace` (the "Working…"
    /// message) when given, the others follow in the target's thread. The
    /// messages the answer is in, in order.
    pub async fn answer(
        &self,
        target: &Target,
        replace: Option<&Posted>,
        markdown: &str,
    ) -> Result<Vec<Posted>, SendError> {
        let mut parts = mrkdwn::split(&mrkdwn::to_mrkdwn(markdown), MAX_MESSAGE);
        if parts.is_empty() {
            parts.push("_(no text)_".into());
        }
        let mut posted = Vec::with_capacity(parts.len());
        for (i, part) in parts.iter().enumerate() {
            if let (0, Some(old)) = (i, replace) {
                match crate::platform::again(|| self.api.update(target, old, part)).await {
                    Ok(()) => {
                        posted.push(old.clone());
                        continue;
                    }
                    // Deleted or no longer editable: the answer is posted
                    // anew rather than lost.
                    Err(SendError::Refused(why)) => {
                        tracing::debug!(reason = %why, "Slack refused the edit; posting instead");
                    }
                    Err(e) => return Err(e),
                }
            }
            posted.push(crate::platform::again(|| self.api.post_message(target, part)).await?);
        }
        Ok(posted)
    }

    /// Uploads a file the turn made into the target's channel and thread.
    pub async fn send_file(
        &self,
        target: &Target,
        name: &str,
        bytes: Vec<u8>,
    ) -> Result<(), SendError> {
        self.api.upload_file(target, name, bytes).await
    }
}

/// Plain text as one message: escaped, and cut with an ellipsis when too
/// long.
fn plain(text: &str) -> String {
    let escaped = mrkdwn::escape(text);
    if escaped.chars().count() <= MAX_MESSAGE {
        return escaped;
    }
    // Cut the source, not the escaped text, so no entity is split.
    let mut out = String::new();
    let mut len = 0;
    for c in text.chars() {
        let piece = mrkdwn::escape(c.encode_utf8(&mut [0; 4]));
        let n = piece.chars().count();
        if len + n > MAX_MESSAGE - 1 {
            break;
        }
        out.push_str(&piece);
        len += n;
    }
    out.push('…');
    out
}

/// A byte stream a WebSocket runs over: plain TCP (`ws://`, tests) or TLS.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

type Ws = WebSocketStream<Box<dyn Io>>;

/// Opens the WebSocket at `url`. Errors name the host only (the address
/// carries a ticket).
async fn connect(url: &str) -> Result<Ws, String> {
    let uri: Uri = url
        .parse()
        .map_err(|_| "Slack gave a Socket Mode address that is not a URL".to_string())?;
    let tls = match uri.scheme_str() {
        Some("wss") => true,
        Some("ws") => false,
        _ => return Err("Slack gave a Socket Mode address that is not ws(s)".into()),
    };
    let host = uri
        .host()
        .ok_or_else(|| "Slack gave a Socket Mode address without a host".to_string())?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let tcp = TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| format!("connecting to {host}: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let io: Box<dyn Io> = if tls {
        Box::new(tls_handshake(tcp, &host).await?)
    } else {
        Box::new(tcp)
    };
    let (ws, _) = tokio_tungstenite::client_async(url, io)
        .await
        .map_err(|e| format!("the WebSocket handshake with {host} failed: {e}"))?;
    Ok(ws)
}

async fn tls_handshake(
    tcp: TcpStream,
    host: &str,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, String> {
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|_| format!("{host} is not a name TLS can check"))?;
    tokio_rustls::TlsConnector::from(tandem_shared::tls::client_config())
        .connect(name, tcp)
        .await
        .map_err(|e| format!("the TLS handshake with {host} failed: {e}"))
}

/// A close frame, not waited on for long: the socket is dropped anyway.
async fn close(ws: &mut Ws) {
    let _ = tokio::time::timeout(Duration::from_secs(1), ws.close(None)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bot() -> Identity {
        Identity {
            id: "U0BOT".into(),
            name: "tandem".into(),
        }
    }

    fn payload(event: Value) -> Value {
        json!({ "type": "event_callback", "event_id": "Ev1", "event": event })
    }

    #[test]
    fn slack_dm_is_taken() {
        let p = payload(
            json!({"type": "message", "channel": "D1", "channel_type": "im",
            "user": "U1", "text": "hi &lt;there&gt; &amp; <https://x.io|x.io>", "ts": "1.1"}),
        );
        let Seen::Take(inbound) = event_of(&bot(), &p) else {
            panic!()
        };
        assert_eq!(inbound.key, "Ev1");
        assert_eq!(inbound.text, "hi <there> & https://x.io");
        assert!(!inbound.group);
        assert_eq!(inbound.thread, None);
        assert_eq!(inbound.message_id.as_deref(), Some("1.1"));
        assert_eq!(inbound.chat_id, "D1");
        // In a DM thread, the thread comes along.
        let p = payload(
            json!({"type": "message", "channel": "D1", "channel_type": "im",
            "user": "U1", "text": "more", "ts": "1.3", "thread_ts": "1.1"}),
        );
        let Seen::Take(inbound) = event_of(&bot(), &p) else {
            panic!()
        };
        assert_eq!(inbound.thread.as_deref(), Some("1.1"));
    }

    #[test]
    fn slack_skips_bots_edits_and_own_messages() {
        for event in [
            json!({"type": "message", "channel": "D1", "channel_type": "im", "user": "U0BOT", "text": "me", "ts": "1"}),
            json!({"type": "message", "channel": "D1", "channel_type": "im", "user": "U2", "bot_id": "B2", "text": "bot", "ts": "1"}),
            json!({"type": "message", "subtype": "message_changed", "channel": "D1", "channel_type": "im", "user": "U1", "text": "x", "ts": "1"}),
            json!({"type": "message", "channel": "C1", "channel_type": "channel", "user": "U1", "text": "no mention", "ts": "1"}),
            json!({"type": "app_mention", "channel": "D1", "user": "U1", "text": "<@U0BOT> dm twin", "ts": "1"}),
            json!({"type": "app_mention", "channel": "C1", "user": "U1", "text": "<@U0BOT>", "ts": "1"}),
            json!({"type": "reaction_added", "user": "U1", "item": {}}),
        ] {
            assert_eq!(
                event_of(&bot(), &payload(event.clone())),
                Seen::Skip,
                "{event}"
            );
        }
    }

    #[test]
    fn slack_mention_takes_the_thread_and_loses_the_mention() {
        let mention = payload(json!({"type": "app_mention", "channel": "C1", "user": "U1",
            "text": "<@U0BOT> what is <@U9|bob> doing?", "ts": "5.5"}));
        let Seen::Take(inbound) = event_of(&bot(), &mention) else {
            panic!()
        };
        assert_eq!(inbound.text, "what is @bob doing?");
        assert_eq!(inbound.thread.as_deref(), Some("5.5"));
        assert!(inbound.group);
        // Its `message` twin is skipped.
        let twin = payload(
            json!({"type": "message", "channel": "C1", "channel_type": "channel",
            "user": "U1", "text": "<@U0BOT> what is <@U9|bob> doing?", "ts": "5.5"}),
        );
        assert_eq!(event_of(&bot(), &twin), Seen::Skip);
        // In a thread, the thread's root.
        let in_thread = payload(json!({"type": "app_mention", "channel": "C1", "user": "U1",
            "text": "again <@U0BOT|tandem>", "ts": "6.6", "thread_ts": "5.5"}));
        let Seen::Take(inbound) = event_of(&bot(), &in_thread) else {
            panic!()
        };
        assert_eq!(inbound.text, "again");
        assert_eq!(inbound.thread.as_deref(), Some("5.5"));
    }

    #[test]
    fn slack_mention_removal_keeps_the_rest() {
        assert_eq!(without_mention("ask <@U0BOT> now", "U0BOT"), "ask now");
        assert_eq!(
            without_mention("<@U0BOT> fix:\n    indented  code", "U0BOT"),
            "fix:\n    indented  code"
        );
        assert_eq!(
            without_mention("<@U0BOTX> other", "U0BOT"),
            "<@U0BOTX> other"
        );
    }

    #[test]
    fn slack_thread_reply_depends_on_following() {
        let p = payload(
            json!({"type": "message", "channel": "C1", "channel_type": "channel",
            "user": "U1", "text": "and then?", "ts": "7.7", "thread_ts": "5.5"}),
        );
        let Seen::IfFollowed(inbound) = event_of(&bot(), &p) else {
            panic!()
        };
        assert_eq!(inbound.thread.as_deref(), Some("5.5"));
        assert_eq!(inbound.message_id.as_deref(), Some("7.7"));
    }

    #[test]
    fn slack_plain_text() {
        assert_eq!(
            plain_text("<!here> see <#C1|general> and <mailto:a@b.c|a@b.c> <https://a.io/x?a=1&amp;b=2|docs>"),
            "@here see #general and a@b.c docs (https://a.io/x?a=1&b=2)"
        );
        assert_eq!(plain_text("a &amp;lt; b"), "a &lt; b");
        assert_eq!(plain_text("unclosed < stays"), "unclosed < stays");
    }

    #[test]
    fn slack_plain_is_one_message() {
        assert_eq!(plain("a<b"), "a&lt;b");
        let long = "<".repeat(5000);
        let cut = plain(&long);
        assert!(cut.chars().count() <= MAX_MESSAGE);
        assert!(cut.ends_with("&lt;…"));
    }
}
