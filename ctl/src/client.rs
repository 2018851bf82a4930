//! `tandem`'s HTTP client of chatd's front door (`/v1/chat-app`, with the
//! forward key), used by the chat, trigger and connector commands, and a
//! refusal of that API as one line.

use anyhow::{bail, Context};
use serde_json::Value;

use crate::settings::Settings;

/// chatd's front door, `/v1/chat-app`, with the forward key: found as the
/// daemons find it (settings, then the secrets file or chatd's forward.key).
pub(crate) struct Client {
    pub(crate) base: String,
    pub(crate) key: String,
    pub(crate) http: reqwest::Client,
}

impl Client {
    pub(crate) fn new() -> anyhow::Result<Client> {
        let settings = Settings::load()?;
        let secrets =
            tandem_shared::secrets::load(&settings.chatd.secrets, &settings.chatd.data_dir)
                .context("reading the forward key")?;
        let chatd = crate::daemons::by_name("chatd").context("chatd is in the daemon table")?;
        Ok(Client {
            base: format!("{}/v1/chat-app", settings.daemon_url(chatd)),
            key: secrets.forward_key.expose().to_string(),
            http: reqwest::Client::new(),
        })
    }

    /// One request under `/v1/chat-app` (`path` starts with `/`): the
    /// status and the JSON body (`Null` when there is none), whatever the
    /// status; an error only when chatd does not answer.
    pub(crate) async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<Value>,
    ) -> anyhow::Result<(reqwest::StatusCode, Value)> {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("x-forward-key", &self.key);
        if !query.is_empty() {
            request = request.query(query);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        self.exchange(request).await
    }

    /// Sends a request built on this client: the status and the JSON body
    /// (`Null` when there is none); an error only when chatd does not answer.
    async fn exchange(
        &self,
        request: reqwest::RequestBuilder,
    ) -> anyhow::Result<(reqwest::StatusCode, Value)> {
        let response = request.send().await.with_context(|| {
            format!(
                "chatd does not answer at {} (is it running? `tandem up`)",
                self.base
            )
        })?;
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        Ok((status, body))
    }

    /// A `multipart/form-data` request: `settings` as text parts first,
    /// then each local file, read from disk as it is sent. A refusal is
    /// printed and handed back as `Err` with its body.
    pub(crate) async fn send_form(
        &self,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, &str)],
        settings: &[(&str, String)],
        files: &[std::path::PathBuf],
    ) -> anyhow::Result<Result<Value, Value>> {
        let mut form = reqwest::multipart::Form::new();
        for (name, value) in settings {
            form = form.text(name.to_string(), value.clone());
        }
        for file in files {
            let opened = tokio::fs::File::open(file)
                .await
                .with_context(|| format!("cannot read {}", file.display()))?;
            let size = opened.metadata().await?.len();
            let name = file
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .with_context(|| format!("{} names no file", file.display()))?;
            let body = reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::new(opened));
            let part = reqwest::multipart::Part::stream_with_length(body, size).file_name(name);
            form = form.part("file", part);
        }
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("x-forward-key", &self.key)
            .multipart(form);
        if !query.is_empty() {
            request = request.query(query);
        }
        let (status, answer) = self.exchange(request).await?;
        Ok(answered(status, answer))
    }

    /// [`Client::send`], with a refusal printed (the daemon's words) and
    /// handed back as `Err` with its body, so a caller can add its own hint.
    pub(crate) async fn send_or_refuse(
        &self,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<Value>,
    ) -> anyhow::Result<Result<Value, Value>> {
        let (status, answer) = self.send(method, path, query, body).await?;
        Ok(answered(status, answer))
    }

    /// [`Client::send`] without a query: the body of a success, or the
    /// refusal as one line (the API's message, which names the field).
    pub(crate) async fn ask(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let (status, answer) = self.send(method, path, &[], body).await?;
        if status.is_success() {
            return Ok(answer);
        }
        bail!("{}", refusal(status.as_u16(), &answer))
    }

    pub(crate) async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let (status, body) = self.send(method, path, &[], body).await?;
        if !status.is_success() {
            let message = body
                .pointer("/error/message")
                .and_then(Value::as_str)
                .unwrap_or("no message");
            bail!("chatd answered {status}: {message}");
        }
        Ok(body)
    }
}

/// A success's body, or a refusal printed and handed back.
fn answered(status: reqwest::StatusCode, answer: Value) -> Result<Value, Value> {
    if status.is_success() {
        return Ok(answer);
    }
    eprintln!("tandem: {}", refusal(status.as_u16(), &answer));
    Err(answer)
}

/// `{"error": {"type", "message", "field"?}}` as one line.
pub(crate) fn refusal(status: u16, answer: &Value) -> String {
    let error = &answer["error"];
    let kind = error["type"].as_str().unwrap_or("error");
    let mut message = error["message"]
        .as_str()
        .unwrap_or("no message")
        .replace('\n', " ");
    if let Some(field) = error["field"].as_str() {
        if !message.starts_with(&format!("{field}:")) {
            message = format!("{field}: {message}");
        }
    }
    format!("{message} ({kind}, HTTP {status})")
}
