//! Slack's Web API as connectord uses it: who the bot is, a Socket Mode
//! address, post and update a message, upload a file. Slack answers most
//! refusals with HTTP 200 and `{"ok":false,"error":…}`; a 429 is waited out
//! here (a few times, at most a minute) before it becomes `RetryAfter`.
//! Tokens go into the `Authorization` header only, never into an error.

use std::time::Duration;

use serde_json::{json, Value};
use tandem_shared::secrets::Secret;

use crate::platform::{Identity, Posted, SendError, Target};

/// 429s waited out by one call before it gives up.
const MAX_RATE_WAITS: u32 = 3;
/// Total time one call spends waiting out 429s.
const MAX_RATE_WAIT: Duration = Duration::from_secs(60);
/// Slack always sends `Retry-After`; this is for a proxy that does not.
const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);

/// The error codes that mean the token itself is no good.
const AUTH_ERRORS: &[&str] = &[
    "invalid_auth",
    "account_inactive",
    "token_revoked",
    "token_expired",
    "not_authed",
];

#[derive(Clone)]
pub struct SlackApi {
    client: reqwest::Client,
    base: String,
    bot: Secret,
    app: Secret,
}

impl std::fmt::Debug for SlackApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlackApi")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// Which of the two tokens a call carries.
#[derive(Clone, Copy)]
enum Token {
    Bot,
    App,
}

/// A request body: JSON, or form fields for the methods that take no JSON.
enum Body {
    Json(Value),
    Form(Vec<(&'static str, String)>),
}

impl SlackApi {
    /// `base` is `https://slack.com/api` or a fake's `http://…/api`;
    /// `bot` the `xoxb-` token, `app` the `xapp-` token for Socket Mode.
    pub fn new(base: &str, bot: Secret, app: Secret) -> anyhow::Result<SlackApi> {
        let client = crate::tls::client()
            // The upload URL is Slack's own; a redirect elsewhere is not.
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(SlackApi {
            client,
            base: base.trim_end_matches('/').to_string(),
            bot,
            app,
        })
    }

    /// `auth.test` with the bot token: the bot's user id and name.
    pub async fn auth_test(&self) -> Result<Identity, SendError> {
        let value = self
            .call("auth.test", Token::Bot, Body::Form(Vec::new()))
            .await?;
        let id = field(&value, "user_id")?;
        let name = value["user"].as_str().unwrap_or(&id).to_string();
        Ok(Identity { id, name })
    }

    /// `apps.connections.open` with the app token: a Socket Mode address
    /// (`wss://…`), good for one connection.
    pub async fn open_connection(&self) -> Result<String, SendError> {
        let value = self
            .call("apps.connections.open", Token::App, Body::Form(Vec::new()))
            .await?;
        field(&value, "url")
    }

    /// Posts `text` (mrkdwn) in the target's channel, in its thread if any.
    pub async fn post_message(&self, target: &Target, text: &str) -> Result<Posted, SendError> {
        let mut body = json!({ "channel": target.chat_id, "text": text, "mrkdwn": true });
        if let Some(thread) = &target.thread {
            body["thread_ts"] = json!(thread);
        }
        let value = self
            .call("chat.postMessage", Token::Bot, Body::Json(body))
            .await?;
        Ok(Posted {
            id: field(&value, "ts")?,
        })
    }

    /// Replaces the text of a message the bot posted.
    pub async fn update(
        &self,
        target: &Target,
        posted: &Posted,
        text: &str,
    ) -> Result<(), SendError> {
        let body = json!({ "channel": target.chat_id, "ts": posted.id, "text": text });
        self.call("chat.update", Token::Bot, Body::Json(body))
            .await
            .map(|_| ())
    }

    /// Uploads `bytes` as file `name` and shares it in the target's channel
    /// (and thread): ask for an upload address, send the bytes there, then
    /// complete the upload.
    pub async fn upload_file(
        &self,
        target: &Target,
        name: &str,
        bytes: Vec<u8>,
    ) -> Result<(), SendError> {
        let value = self
            .call(
                "files.getUploadURLExternal",
                Token::Bot,
                Body::Form(vec![
                    ("filename", name.to_string()),
                    ("length", bytes.len().to_string()),
                ]),
            )
            .await?;
        let upload_url = field(&value, "upload_url")?;
        let file_id = field(&value, "file_id")?;
        self.send_upload(&upload_url, name, bytes).await?;
        let mut form = vec![
            (
                "files",
                json!([{ "id": file_id, "title": name }]).to_string(),
            ),
            ("channel_id", target.chat_id.clone()),
        ];
        if let Some(thread) = &target.thread {
            form.push(("thread_ts", thread.clone()));
        }
        self.call("files.completeUploadExternal", Token::Bot, Body::Form(form))
            .await
            .map(|_| ())
    }

    /// The bytes to the address `files.getUploadURLExternal` gave. The
    /// address is signed: no token goes with it.
    async fn send_upload(&self, url: &str, name: &str, bytes: Vec<u8>) -> Result<(), SendError> {
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            return Err(SendError::Refused(
                "Slack gave an upload address that is not http(s)".into(),
            ));
        }
        let part = reqwest::multipart::Part::bytes(bytes).file_name(name.to_string());
        let form = reqwest::multipart::Form::new().part("file", part);
        let response = self
            .client
            .post(url)
            .multipart(form)
            .timeout(Duration::from_secs(120))
            .send()
            .await
            .map_err(|e| SendError::Unreachable(without_url(&e)))?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        if status.is_server_error() {
            return Err(SendError::Unreachable(format!(
                "the file upload answered HTTP {}",
                status.as_u16()
            )));
        }
        Err(SendError::Refused(format!(
            "the file upload answered HTTP {}",
            status.as_u16()
        )))
    }

    /// One Web API call, 429s waited out; the answer's JSON when `ok`.
    async fn call(&self, method: &str, token: Token, body: Body) -> Result<Value, SendError> {
        let mut waits = 0;
        let mut waited = Duration::ZERO;
        loop {
            match self.call_once(method, token, &body).await {
                Err(Attempt::RateLimited(after)) => {
                    if waits >= MAX_RATE_WAITS || waited + after > MAX_RATE_WAIT {
                        return Err(SendError::RetryAfter(after));
                    }
                    tracing::debug!(method, ?after, "Slack rate limited; waiting");
                    tokio::time::sleep(after).await;
                    waits += 1;
                    waited += after;
                }
                Err(Attempt::Failed(e)) => return Err(e),
                Ok(value) => return Ok(value),
            }
        }
    }

    async fn call_once(&self, method: &str, token: Token, body: &Body) -> Result<Value, Attempt> {
        let token = match token {
            Token::Bot => &self.bot,
            Token::App => &self.app,
        };
        let request = self
            .client
            .post(format!("{}/{method}", self.base))
            .bearer_auth(token.expose())
            .timeout(Duration::from_secs(30));
        let request = match body {
            Body::Json(value) => request
                .header("content-type", "application/json; charset=utf-8")
                .body(value.to_string()),
            Body::Form(fields) => request
                .header("content-type", "application/x-www-form-urlencoded")
                .body(form_encode(fields)),
        };
        let response = request
            .send()
            .await
            .map_err(|e| Attempt::Failed(SendError::Unreachable(without_url(&e))))?;
        let status = response.status();
        if status.as_u16() == 429 {
            let after = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs)
                .unwrap_or(DEFAULT_RETRY_AFTER);
            return Err(Attempt::RateLimited(after));
        }
        let bytes = response
            .bytes()
            .await
            .map_err(|e| Attempt::Failed(SendError::Unreachable(without_url(&e))))?;
        if status.is_server_error() {
            return Err(Attempt::Failed(SendError::Unreachable(format!(
                "Slack answered HTTP {} to {method}",
                status.as_u16()
            ))));
        }
        let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if value["ok"].as_bool() == Some(true) {
            return Ok(value);
        }
        let error = match value["error"].as_str() {
            // Said in the body only (no 429): wait the usual second.
            Some("ratelimited") => return Err(Attempt::RateLimited(DEFAULT_RETRY_AFTER)),
            Some(error) => one_line(error),
            None if status.is_success() => {
                return Err(Attempt::Failed(SendError::Unreachable(format!(
                    "Slack's answer to {method} is not the JSON it should be"
                ))))
            }
            None => format!("HTTP {}", status.as_u16()),
        };
        Err(Attempt::Failed(classify(status.as_u16(), error)))
    }
}

enum Attempt {
    RateLimited(Duration),
    Failed(SendError),
}

/// What an `ok: false` answer with `error` means.
fn classify(status: u16, error: String) -> SendError {
    if AUTH_ERRORS.contains(&error.as_str()) || status == 401 {
        SendError::Unauthorized(error)
    } else if matches!(
        error.as_str(),
        "internal_error" | "fatal_error" | "service_unavailable"
    ) {
        SendError::Unreachable(error)
    } else {
        SendError::Refused(error)
    }
}

fn field(value: &Value, name: &str) -> Result<String, SendError> {
    value[name]
        .as_str()
        .filter(|v| !v.is_empty())
        .map(str::to_string)
        .ok_or_else(|| SendError::Unreachable(format!("Slack's answer has no {name}")))
}

/// Slack's error codes are short; anything else is cut to one short line.
fn one_line(text: &str) -> String {
    let line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(200)
        .collect();
    line.trim().to_string()
}

/// A reqwest error without its URL (an upload address is signed).
fn without_url(e: &reqwest::Error) -> String {
    if e.is_connect() {
        return "connection refused or unreachable".into();
    }
    if e.is_timeout() {
        return "no answer in time".into();
    }
    let mut text = e.to_string();
    if let Some(url) = e.url() {
        text = text.replace(&format!(" ({url})"), "");
        text = text.replace(url.as_str(), "Slack");
    }
    one_line(&text)
}

/// `application/x-www-form-urlencoded`, every byte but the unreserved ones
/// percent-encoded.
fn form_encode(fields: &[(&str, String)]) -> String {
    fn encode(out: &mut String, text: &str) {
        for b in text.bytes() {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                out.push(b as char);
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    }
    let mut out = String::new();
    for (i, (key, value)) in fields.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        encode(&mut out, key);
        out.push('=');
        encode(&mut out, value);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, StatusCode};
    use axum::response::IntoResponse;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    const BOT: &str = "xoxb-secret-bot-token-1234";
    const APP: &str = "xapp-secret-app-token-5678";

    /// A tiny Slack: auth.test checks the bot token, chat.postMessage is
    /// rate limited `limited` times, chat.update fails with a 500.
    async fn server(limited: u32, retry_after: u64) -> (String, Arc<AtomicU32>) {
        let calls = Arc::new(AtomicU32::new(0));
        let c = calls.clone();
        let app = axum::Router::new()
            .route(
                "/api/auth.test",
                axum::routing::post(|headers: HeaderMap| async move {
                    let auth = headers["authorization"].to_str().unwrap().to_string();
                    if auth == format!("Bearer {BOT}") {
                        axum::Json(json!({"ok": true, "user_id": "U0BOT", "user": "bot"}))
                    } else {
                        axum::Json(json!({"ok": false, "error": "invalid_auth"}))
                    }
                }),
            )
            .route(
                "/api/chat.postMessage",
                axum::routing::post(move || {
                    let c = c.clone();
                    async move {
                        if c.fetch_add(1, Ordering::SeqCst) < limited {
                            (
                                StatusCode::TOO_MANY_REQUESTS,
                                [("retry-after", retry_after.to_string())],
                                axum::Json(json!({"ok": false, "error": "ratelimited"})),
                            )
                                .into_response()
                        } else {
                            axum::Json(json!({"ok": true, "ts": "1.000001"})).into_response()
                        }
                    }
                }),
            )
            .route(
                "/api/chat.update",
                axum::routing::post(|| async { StatusCode::BAD_GATEWAY }),
            )
            .route(
                "/api/files.getUploadURLExternal",
                axum::routing::post(|| async {
                    axum::Json(json!({"ok": false, "error": "channel_not_found"}))
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (format!("http://{addr}/api"), calls)
    }

    fn api(base: &str, bot: &str) -> SlackApi {
        SlackApi::new(
            base,
            Secret::new(bot.to_string()),
            Secret::new(APP.to_string()),
        )
        .unwrap()
    }

    fn target() -> Target {
        Target {
            chat_id: "C1".into(),
            thread: None,
            reply_to: None,
        }
    }

    fn assert_no_token(e: &SendError) {
        let text = format!("{e} {e:?}");
        assert!(!text.contains(BOT) && !text.contains(APP), "{text}");
        assert!(!text.contains("secret"), "{text}");
    }

    #[tokio::test]
    async fn slack_auth_test_and_refused_token() {
        let (base, _) = server(0, 1).await;
        let me = api(&base, BOT).auth_test().await.unwrap();
        assert_eq!(me.id, "U0BOT");
        assert_eq!(me.name, "bot");
        let wrong = "xoxb-secret-wrong-token";
        let e = api(&base, wrong).auth_test().await.unwrap_err();
        assert_eq!(e, SendError::Unauthorized("invalid_auth".into()));
        assert!(!e.to_string().contains(wrong));
        assert_no_token(&e);
    }

    #[tokio::test]
    async fn slack_errors_never_carry_a_token() {
        let (base, _) = server(0, 1).await;
        let api = api(&base, BOT);
        let e = api
            .update(&target(), &Posted { id: "1.1".into() }, "x")
            .await
            .unwrap_err();
        assert!(matches!(e, SendError::Unreachable(_)), "{e:?}");
        assert_no_token(&e);
        let e = api
            .upload_file(&target(), "a.txt", b"hi".to_vec())
            .await
            .unwrap_err();
        assert_eq!(e, SendError::Refused("channel_not_found".into()));
        assert_no_token(&e);
        // Nobody listening: a connection error, the address left out.
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = closed.local_addr().unwrap();
        drop(closed);
        let e = super::SlackApi::new(
            &format!("http://{addr}/api"),
            Secret::new(BOT.into()),
            Secret::new(APP.into()),
        )
        .unwrap()
        .open_connection()
        .await
        .unwrap_err();
        assert!(matches!(e, SendError::Unreachable(_)), "{e:?}");
        assert_no_token(&e);
    }

    #[tokio::test]
    async fn slack_rate_limit_is_waited_then_given_up() {
        let (base, calls) = server(1, 1).await;
        let started = std::time::Instant::now();
        let posted = api(&base, BOT).post_message(&target(), "hi").await.unwrap();
        assert_eq!(posted.id, "1.000001");
        assert!(started.elapsed() >= Duration::from_secs(1));
        assert_eq!(calls.load(Ordering::SeqCst), 2);

        // Longer than a minute: not waited, handed back at once.
        let (base, calls) = server(10, 120).await;
        let e = api(&base, BOT)
            .post_message(&target(), "hi")
            .await
            .unwrap_err();
        assert_eq!(e, SendError::RetryAfter(Duration::from_secs(120)));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn slack_classify_and_form() {
        assert!(matches!(
            classify(200, "token_revoked".into()),
            SendError::Unauthorized(_)
        ));
        assert!(matches!(
            classify(200, "channel_not_found".into()),
            SendError::Refused(_)
        ));
        assert_eq!(
            form_encode(&[("a", "x y&z".into()), ("files", "[{\"id\":1}]".into())]),
            "a=x%20y%26z&files=%5B%7B%22id%22%3A1%7D%5D"
        );
    }
}
