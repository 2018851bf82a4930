//! The Bot API as connectord uses it: `{base}/bot{token}/{method}`, every
//! answer `{"ok":true,"result":…}` or `{"ok":false,"error_code":N,
//! "description":…,"parameters":{"retry_after":S}}`. A 429 is waited out
//! here (a few times, a minute at most); the token is in every URL and in
//! no error.

use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{json, Value};
use tandem_shared::secrets::Secret;

use crate::platform::{Identity, Posted, SendError, Target};

/// A 429 is waited out by the call itself this many times…
const RETRIES_429: usize = 3;
/// …and for at most this long in all; then the caller hears `RetryAfter`.
const WAIT_429: Duration = Duration::from_secs(60);
/// How long a call other than a long poll may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// A document upload may take longer.
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(120);
/// The HTTP timeout of a long poll is this much longer than the poll.
const POLL_SLACK: Duration = Duration::from_secs(10);

/// Why a Bot API call failed: what every call says (`SendError`), or a
/// 409 (another `getUpdates` reader, or a webhook set for the bot), which
/// only the reader acts on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApiError {
    #[error(transparent)]
    Send(#[from] SendError),
    #[error("conflict: {0}")]
    Conflict(String),
}

impl From<ApiError> for SendError {
    fn from(e: ApiError) -> SendError {
        match e {
            ApiError::Send(e) => e,
            ApiError::Conflict(description) => SendError::Refused(description),
        }
    }
}

/// A Bot API client for one bot.
#[derive(Clone)]
pub struct BotApi {
    client: reqwest::Client,
    base: String,
    token: Secret,
}

impl std::fmt::Debug for BotApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BotApi")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// A request body, built again for each try (a multipart form is used up
/// by sending it).
enum Body<'a> {
    Json(Value),
    Document {
        chat_id: &'a str,
        reply_to: Option<i64>,
        file_name: &'a str,
        bytes: &'a Bytes,
        caption: Option<&'a str>,
    },
}

impl BotApi {
    /// A client of `base` (`https://api.telegram.org`, or a fake's
    /// `http://127.0.0.1:PORT`) for the bot with `token`.
    pub fn new(base: &str, token: Secret) -> Result<BotApi, SendError> {
        let client = crate::tls::client()
            .build()
            .map_err(|e| SendError::Unreachable(scrub(&e, &token)))?;
        Ok(BotApi::with_client(client, base, token))
    }

    /// The same with a client the caller built (a proxy, TLS settings).
    pub fn with_client(client: reqwest::Client, base: &str, token: Secret) -> BotApi {
        BotApi {
            client,
            base: base.trim_end_matches('/').to_string(),
            token,
        }
    }

    /// Who the token belongs to; a refused token is `Unauthorized`.
    pub async fn get_me(&self) -> Result<Identity, SendError> {
        let me = self
            .call("getMe", &Body::Json(json!({})), CALL_TIMEOUT)
            .await?;
        let id = me["id"]
            .as_i64()
            .ok_or_else(|| SendError::Unreachable("getMe answered without an id".into()))?;
        let name = me["username"].as_str().unwrap_or_default().to_string();
        Ok(Identity {
            id: id.to_string(),
            name,
        })
    }

    /// Updates (messages only) from `offset`, held by Telegram up to
    /// `timeout_s` seconds until one comes. Updates before `offset` are
    /// confirmed by asking.
    pub async fn get_updates(&self, offset: i64, timeout_s: u64) -> Result<Vec<Value>, ApiError> {
        let body = json!({
            "offset": offset,
            "timeout": timeout_s,
            "limit": 100,
            "allowed_updates": ["message"],
        });
        let timeout = Duration::from_secs(timeout_s) + POLL_SLACK;
        let result = self.call("getUpdates", &Body::Json(body), timeout).await?;
        match result {
            Value::Array(updates) => Ok(updates),
            _ => Err(SendError::Unreachable("getUpdates answered without a list".into()).into()),
        }
    }

    pub async fn send_message(
        &self,
        target: &Target,
        text: &str,
        parse_mode: Option<&str>,
    ) -> Result<Posted, SendError> {
        let mut body = json!({
            "chat_id": chat_id(&target.chat_id),
            "text": text,
            "link_preview_options": {"is_disabled": true},
        });
        if let Some(mode) = parse_mode {
            body["parse_mode"] = json!(mode);
        }
        if let Some(reply) = reply_to(target) {
            body["reply_parameters"] =
                json!({"message_id": reply, "allow_sending_without_reply": true});
        }
        let message = self
            .call("sendMessage", &Body::Json(body), CALL_TIMEOUT)
            .await?;
        posted(&message)
    }

    /// Replaces a posted message's text; the same text again is not an
    /// error.
    pub async fn edit_message_text(
        &self,
        target: &Target,
        posted: &Posted,
        text: &str,
        parse_mode: Option<&str>,
    ) -> Result<(), SendError> {
        let message_id: i64 = posted
            .id
            .parse()
            .map_err(|_| SendError::Refused("not a Telegram message id".into()))?;
        let mut body = json!({
            "chat_id": chat_id(&target.chat_id),
            "message_id": message_id,
            "text": text,
            "link_preview_options": {"is_disabled": true},
        });
        if let Some(mode) = parse_mode {
            body["parse_mode"] = json!(mode);
        }
        match self
            .call("editMessageText", &Body::Json(body), CALL_TIMEOUT)
            .await
        {
            Ok(_) => Ok(()),
            Err(ApiError::Send(SendError::Refused(d))) if d.contains("message is not modified") => {
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    pub async fn send_chat_action(&self, target: &Target, action: &str) -> Result<(), SendError> {
        let body = json!({"chat_id": chat_id(&target.chat_id), "action": action});
        self.call("sendChatAction", &Body::Json(body), CALL_TIMEOUT)
            .await?;
        Ok(())
    }

    pub async fn send_document(
        &self,
        target: &Target,
        file_name: &str,
        bytes: Bytes,
        caption: Option<&str>,
    ) -> Result<Posted, SendError> {
        let body = Body::Document {
            chat_id: &target.chat_id,
            reply_to: reply_to(target),
            file_name,
            bytes: &bytes,
            caption,
        };
        let message = self.call("sendDocument", &body, UPLOAD_TIMEOUT).await?;
        posted(&message)
    }

    /// One method call; a 429 is waited out and asked again.
    async fn call(
        &self,
        method: &str,
        body: &Body<'_>,
        timeout: Duration,
    ) -> Result<Value, ApiError> {
        let started = Instant::now();
        let mut tries = 0;
        loop {
            match self.once(method, body, timeout).await {
                Err(ApiError::Send(SendError::RetryAfter(wait)))
                    if tries < RETRIES_429 && started.elapsed() + wait <= WAIT_429 =>
                {
                    tries += 1;
                    tokio::time::sleep(wait).await;
                }
                other => return other,
            }
        }
    }

    async fn once(
        &self,
        method: &str,
        body: &Body<'_>,
        timeout: Duration,
    ) -> Result<Value, ApiError> {
        let url = format!("{}/bot{}/{method}", self.base, self.token.expose());
        let request = self.client.post(url).timeout(timeout);
        let request = match body {
            Body::Json(value) => request.json(value),
            Body::Document {
                chat_id,
                reply_to,
                file_name,
                bytes,
                caption,
            } => {
                let part = reqwest::multipart::Part::stream_with_length(
                    reqwest::Body::from((*bytes).clone()),
                    bytes.len() as u64,
                )
                .file_name(file_name.to_string());
                let mut form = reqwest::multipart::Form::new()
                    .text("chat_id", chat_id.to_string())
                    .part("document", part);
                if let Some(caption) = caption {
                    form = form.text("caption", caption.to_string());
                }
                if let Some(reply) = reply_to {
                    form = form.text(
                        "reply_parameters",
                        json!({"message_id": reply, "allow_sending_without_reply": true})
                            .to_string(),
                    );
                }
                request.multipart(form)
            }
        };
        let response = request
            .send()
            .await
            .map_err(|e| SendError::Unreachable(scrub(&e, &self.token)))?;
        let status = response.status().as_u16();
        let header_wait = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let bytes = response
            .bytes()
            .await
            .map_err(|e| SendError::Unreachable(scrub(&e, &self.token)))?;
        let answer: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if answer["ok"] == json!(true) {
            return Ok(answer["result"].clone());
        }
        let code = answer["error_code"].as_u64().map_or(status, |c| c as u16);
        let description = answer["description"]
            .as_str()
            .map(|d| self.clean(d))
            .unwrap_or_else(|| format!("HTTP {status} without a Bot API answer"));
        Err(match code {
            401 => SendError::Unauthorized(description).into(),
            409 => ApiError::Conflict(description),
            429 => {
                let seconds = answer["parameters"]["retry_after"]
                    .as_u64()
                    .or(header_wait)
                    .unwrap_or(1);
                SendError::RetryAfter(Duration::from_secs(seconds.max(1))).into()
            }
            400..=499 => SendError::Refused(description).into(),
            200..=299 => {
                SendError::Unreachable(format!("{method} answered {status} without \"ok\"")).into()
            }
            _ => SendError::Unreachable(description).into(),
        })
    }

    /// A description as Telegram wrote it, never with the token in it.
    fn clean(&self, text: &str) -> String {
        hide(text, &self.token)
    }
}

/// Telegram takes a numeric chat id as a number, a channel's @name as a
/// string.
fn chat_id(id: &str) -> Value {
    id.parse::<i64>().map_or_else(|_| json!(id), |n| json!(n))
}

fn reply_to(target: &Target) -> Option<i64> {
    target.reply_to.as_deref().and_then(|r| r.parse().ok())
}

fn posted(message: &Value) -> Result<Posted, SendError> {
    message["message_id"]
        .as_i64()
        .map(|id| Posted { id: id.to_string() })
        .ok_or_else(|| SendError::Unreachable("Telegram answered without a message_id".into()))
}

/// A reqwest error as words: without the URL (it holds the token), with
/// its cause, and with the token blotted out should it show anyway.
fn scrub(e: &reqwest::Error, token: &Secret) -> String {
    let text = if e.is_timeout() {
        "no answer in time".to_string()
    } else if e.is_connect() {
        "connection refused or unreachable".to_string()
    } else {
        let mut text = e.to_string();
        if let Some(url) = e.url() {
            text = text.replace(&format!(" ({url})"), "");
            text = text.replace(url.as_str(), "the Bot API");
        }
        let mut source = std::error::Error::source(e);
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        text
    };
    hide(&text, token)
}

fn hide(text: &str, token: &Secret) -> String {
    let token = token.expose();
    if token.is_empty() {
        return text.to_string();
    }
    text.replace(token, "<token>")
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "123456:AAE-secret_token-value";

    #[tokio::test]
    async fn errors_never_carry_the_token() {
        // Nothing listens on port 9 of loopback: a connection error, whose
        // reqwest text holds the URL with the token.
        let api = BotApi::new("http://127.0.0.1:9", Secret::new(TOKEN.into())).unwrap();
        let err = api.get_me().await.unwrap_err();
        assert!(matches!(err, SendError::Unreachable(_)), "{err:?}");
        assert!(!err.to_string().contains(TOKEN), "{err}");
        assert!(!format!("{err:?}").contains(TOKEN), "{err:?}");
        assert!(!format!("{api:?}").contains(TOKEN));

        // A reqwest error of another kind (a URL reqwest cannot use) shows
        // its URL in its Display: scrub takes it out.
        let api = BotApi::new("http://[::1", Secret::new(TOKEN.into())).unwrap();
        let err = api.get_me().await.unwrap_err();
        assert!(!err.to_string().contains(TOKEN), "{err}");
        let err = api.get_updates(0, 0).await.unwrap_err();
        assert!(!err.to_string().contains("secret_token"), "{err}");
    }

    #[tokio::test]
    async fn scrub_blots_the_token() {
        let token = Secret::new(TOKEN.into());
        let e = crate::tls::client()
            .build()
            .unwrap()
            .get(format!("http://127.0.0.1:9/bot{TOKEN}/getMe"))
            .send()
            .await
            .unwrap_err();
        assert!(e.to_string().contains(TOKEN) || e.url().is_some());
        assert!(!scrub(&e, &token).contains(TOKEN));
        assert_eq!(hide(&format!("x {TOKEN} y"), &token), "x <token> y");
    }

    #[test]
    fn chat_ids() {
        assert_eq!(chat_id("-100123"), json!(-100123));
        assert_eq!(chat_id("@channel"), json!("@channel"));
    }
}
