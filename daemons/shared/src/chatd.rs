//! chatd's API as the other daemons use it (triggerd, connectord): make a
//! chat, send a message, follow its events to a run's end (riding out a
//! chatd restart with the last seq), read the snapshot, stop a run, post to
//! the inbox. Every call carries the forward key; the key is never logged.

use std::time::Duration;

use crate::secrets::Secret;
use crate::sse;
use crate::words::ChatRunStatus;
use futures_util::StreamExt;
use serde_json::{json, Value};

#[derive(Clone)]
pub struct ChatClient {
    client: reqwest::Client,
    base: String,
    key: Secret,
}

/// Why a call to chatd did not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// chatd did not answer: worth trying again.
    #[error("chatd did not answer ({0})")]
    Unreachable(String),
    /// chatd answered with a refusal: trying again changes nothing.
    #[error("chatd refused: {status} {kind}: {message}")]
    Refused {
        status: u16,
        kind: String,
        message: String,
        /// The field a 400 or 404 names.
        field: Option<String>,
    },
}

/// chatd's refusal of a chat with a saved agent whose folder is missing or
/// not chosen (409): asking again changes nothing until a person restores it.
pub const AGENT_FOLDER_MISSING: &str = "agent_folder_missing";

impl ChatError {
    /// Whether chatd refused because the chat's agent's folder is missing.
    pub fn agent_folder_missing(&self) -> bool {
        matches!(self, ChatError::Refused { status: 409, kind, .. } if kind == AGENT_FOLDER_MISSING)
    }

    /// Whether asking again may go through: chatd down, busy or failing
    /// for a while, a key being rotated, an older chatd being replaced.
    /// Only a refusal of the request itself (400, 413, 422, …) is final.
    pub fn retryable(&self) -> bool {
        match self {
            ChatError::Unreachable(_) => true,
            // A 404 naming a field (a deleted agent) is about the request.
            ChatError::Refused { status, field, .. } => {
                *status >= 500
                    || matches!(*status, 401 | 408 | 429)
                    || (*status == 404 && field.is_none())
            }
        }
    }
}

/// What a message sent became.
#[derive(Debug, Clone, PartialEq)]
pub enum Sent {
    /// It started (or queued) this run.
    Run(String),
    /// A run works in the chat: the message waits (this pending id) and
    /// reaches the model at that run's next request.
    Pending(String),
    /// The text was a slash command: chatd ran it, and this is its answer
    /// for the sender (nothing was sent to the model).
    Command(String),
}

/// How a chat run ended, as its events and snapshot say.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunEnd {
    pub status: String,
    pub error: Option<String>,
    /// Tokens the run's model calls processed (prompt and completion, summed).
    pub tokens: i64,
}

impl ChatClient {
    pub fn new(base: String, key: Secret) -> anyhow::Result<ChatClient> {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .build()?;
        Ok(ChatClient { client, base, key })
    }

    fn url(&self, path: &str) -> String {
        format!("{}/v1/chat-app{path}", self.base)
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ChatError> {
        let mut request = self
            .client
            .request(method, self.url(path))
            .header("x-forward-key", self.key.expose())
            .timeout(Duration::from_secs(30));
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .map_err(|e| ChatError::Unreachable(without_url(&e)))?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| ChatError::Unreachable(without_url(&e)))?;
        let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if status.is_success() {
            return Ok(value);
        }
        Err(ChatError::Refused {
            status: status.as_u16(),
            kind: value["error"]["type"]
                .as_str()
                .unwrap_or("unknown")
                .to_string(),
            message: value["error"]["message"]
                .as_str()
                .unwrap_or("no message")
                .to_string(),
            field: value["error"]["field"].as_str().map(str::to_string),
        })
    }

    /// A new chat made with `body` (`POST /conversations`); its id.
    pub async fn create_chat(&self, body: &Value) -> Result<String, ChatError> {
        let value = self
            .call(reqwest::Method::POST, "/conversations", Some(body))
            .await?;
        id_field(&value, "id")
    }

    /// Sends a message (`POST /conversations/{chat}/messages` with `body`:
    /// `text`, `origin`, and an idempotency `key` when the sender may ask
    /// twice): the run it started, or the waiting message it became.
    pub async fn send(&self, chat: &str, body: &Value) -> Result<Sent, ChatError> {
        let value = self
            .call(
                reqwest::Method::POST,
                &format!("/conversations/{chat}/messages"),
                Some(body),
            )
            .await?;
        if value["pending_id"].is_string() {
            return Ok(Sent::Pending(id_field(&value, "pending_id")?));
        }
        if let Some(text) = value["text"]
            .as_str()
            .filter(|_| value["command"].is_string())
        {
            return Ok(Sent::Command(text.to_string()));
        }
        Ok(Sent::Run(id_field(&value, "run_id")?))
    }

    /// A saved agent, as chatd has it; `None` when it has none by that id.
    pub async fn agent(&self, id: &str) -> Result<Option<Value>, ChatError> {
        match self
            .call(reqwest::Method::GET, &format!("/agents/{id}"), None)
            .await
        {
            Ok(agent) => Ok(Some(agent)),
            Err(ChatError::Refused { status: 404, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Deletes a chat for good (`DELETE /conversations/{chat}?forever=1`);
    /// one already gone is not an error.
    pub async fn delete_chat(&self, chat: &str) -> Result<(), ChatError> {
        match self
            .call(
                reqwest::Method::DELETE,
                &format!("/conversations/{chat}?forever=1"),
                None,
            )
            .await
        {
            Ok(_) | Err(ChatError::Refused { status: 404, .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Takes back a message still waiting in the chat (`DELETE
    /// …/pending/{id}`); one delivered or gone meanwhile is not an error.
    pub async fn remove_pending(&self, chat: &str, pending: &str) -> Result<(), ChatError> {
        match self
            .call(
                reqwest::Method::DELETE,
                &format!("/conversations/{chat}/pending/{pending}"),
                None,
            )
            .await
        {
            Ok(_)
            | Err(ChatError::Refused {
                status: 404 | 409, ..
            }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    pub async fn snapshot(&self, chat: &str) -> Result<Value, ChatError> {
        self.call(
            reqwest::Method::GET,
            &format!("/conversations/{chat}"),
            None,
        )
        .await
    }

    /// A file of the chat's workspace (`GET /conversations/{chat}/files`).
    pub async fn file(&self, chat: &str, path: &str) -> Result<Vec<u8>, ChatError> {
        let response = self
            .client
            .get(self.url(&format!("/conversations/{chat}/files")))
            .query(&[("path", path)])
            .header("x-forward-key", self.key.expose())
            .timeout(Duration::from_secs(60))
            .send()
            .await
            .map_err(|e| ChatError::Unreachable(without_url(&e)))?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| ChatError::Unreachable(without_url(&e)))?;
        if status.is_success() {
            return Ok(bytes.to_vec());
        }
        let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Err(ChatError::Refused {
            status: status.as_u16(),
            kind: value["error"]["type"]
                .as_str()
                .unwrap_or("unknown")
                .to_string(),
            message: value["error"]["message"]
                .as_str()
                .unwrap_or("no message")
                .to_string(),
            field: value["error"]["field"].as_str().map(str::to_string),
        })
    }

    /// Starts a run from the chat's waiting messages (`send-now`).
    pub async fn send_now(&self, chat: &str, origin: &str) -> Result<String, ChatError> {
        let value = self
            .call(
                reqwest::Method::POST,
                &format!("/conversations/{chat}/send-now"),
                Some(&json!({ "origin": origin })),
            )
            .await?;
        id_field(&value, "run_id")
    }

    /// Stops the chat's active run; a chat with none is not an error.
    pub async fn stop(&self, chat: &str) -> Result<(), ChatError> {
        match self
            .call(
                reqwest::Method::POST,
                &format!("/conversations/{chat}/stop"),
                Some(&json!({})),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(ChatError::Refused { status, .. }) if status == 409 || status == 404 => Ok(()),
            Err(e) => Err(e),
        }
    }

    pub async fn notify(&self, notification: &Value) -> Result<(), ChatError> {
        self.call(reqwest::Method::POST, "/notifications", Some(notification))
            .await
            .map(|_| ())
    }

    /// Follows the chat's events until `run_id` finishes; `on_event` hears
    /// each event of the run (its type and data) as it comes (consent
    /// cards, text deltas, tool steps) and the chat's `pending.*` events. A cut stream or a chatd restart is
    /// ridden out (the stream resumes from the last seq seen, waiting up to
    /// 2 s between tries); the caller bounds the time.
    pub async fn follow(
        &self,
        chat: &str,
        run_id: &str,
        on_event: &mut (dyn FnMut(&str, &Value) + Send),
    ) -> RunEnd {
        let mut after: u64 = 0;
        let mut tokens: i64 = 0;
        let mut wait = Duration::from_millis(100);
        loop {
            let outcome = self
                .follow_once(chat, run_id, &mut after, &mut tokens, on_event)
                .await;
            if let Ok(Some(mut end)) = outcome {
                end.tokens = tokens;
                return end;
            }
            // A reset (too far behind) or a cut: the snapshot says whether
            // the run ended meanwhile; after a reset, tail from its seq.
            let snapshot = self.snapshot(chat).await;
            if let Err(ChatError::Refused { status: 404, .. }) = snapshot {
                return RunEnd {
                    status: "failed".into(),
                    error: Some("the run's chat was deleted".into()),
                    tokens,
                };
            }
            if let Ok(snapshot) = snapshot {
                if let Some(mut end) = ended_in_snapshot(&snapshot, run_id) {
                    end.tokens = if tokens == 0 {
                        end_tokens(&snapshot, run_id)
                    } else {
                        tokens
                    };
                    return end;
                }
                if matches!(outcome, Ok(None)) {
                    after = snapshot["seq"].as_u64().unwrap_or(after);
                }
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(2));
        }
    }

    /// One stream: `Some(end)` when the run finished, `None` on a reset.
    async fn follow_once(
        &self,
        chat: &str,
        run_id: &str,
        after: &mut u64,
        tokens: &mut i64,
        on_event: &mut (dyn FnMut(&str, &Value) + Send),
    ) -> Result<Option<RunEnd>, ChatError> {
        let response = self
            .client
            .get(self.url(&format!("/conversations/{chat}/events?after={after}")))
            .header("x-forward-key", self.key.expose())
            .send()
            .await
            .map_err(|e| ChatError::Unreachable(without_url(&e)))?;
        if !response.status().is_success() {
            return Err(ChatError::Refused {
                status: response.status().as_u16(),
                kind: "events".into(),
                message: "the event stream was refused".into(),
                field: None,
            });
        }
        let mut stream = response.bytes_stream();
        let mut frames = sse::Frames::default();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| ChatError::Unreachable(without_url(&e)))?;
            frames.push(&chunk);
            while let Some(frame) = frames.next_frame() {
                let Some(event) = sse::parse_frame(&frame) else {
                    continue;
                };
                if let Some(id) = event.id {
                    *after = id;
                }
                let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
                // The run's own events, and the chat's waiting messages
                // (delivered into the run at its next request).
                if event.kind != "reset"
                    && (data["run_id"] == run_id || event.kind.starts_with("pending."))
                {
                    on_event(&event.kind, &data);
                }
                match event.kind.as_str() {
                    "reset" => return Ok(None),
                    "usage" if data["run_id"] == run_id => {
                        *tokens += data["used"].as_i64().unwrap_or(0);
                    }
                    "run.finished" if data["run_id"] == run_id => {
                        return Ok(Some(RunEnd {
                            status: data["status"].as_str().unwrap_or("failed").to_string(),
                            error: data["error"].as_str().map(str::to_string),
                            tokens: 0,
                        }));
                    }
                    _ => {}
                }
            }
            // A frame never ends: not chatd's stream; start again.
            if frames.rest().len() > 4 << 20 {
                return Err(ChatError::Unreachable("an event larger than 4 MiB".into()));
            }
        }
        Err(ChatError::Unreachable("the event stream ended".into()))
    }
}

/// The error without the URL reqwest puts in it (no secrets are in URLs,
/// but the line stays short).
fn without_url(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    if let Some(url) = e.url() {
        text = text.replace(&format!(" ({url})"), "");
        text = text.replace(url.as_str(), "chatd");
    }
    if e.is_connect() {
        return "connection refused or unreachable".into();
    }
    text
}

fn id_field(value: &Value, field: &str) -> Result<String, ChatError> {
    value[field]
        .as_str()
        .filter(|id| crate::http::is_chat_id(id))
        .map(str::to_string)
        .ok_or_else(|| ChatError::Refused {
            status: 200,
            kind: "bad_answer".into(),
            message: format!("chatd's answer has no {field}"),
            field: None,
        })
}

/// Whether a run of a snapshot has not ended (its `status` one of chatd's
/// active words; a word this build does not know counts as ended).
pub fn run_is_active(run: &Value) -> bool {
    run["status"]
        .as_str()
        .and_then(ChatRunStatus::parse)
        .is_some_and(ChatRunStatus::is_active)
}

/// The chat's newest run that has not ended, from its snapshot.
pub fn active_run(snapshot: &Value) -> Option<&Value> {
    snapshot["runs"]
        .as_array()?
        .iter()
        .rev()
        .find(|r| run_is_active(r))
}

/// The run's ending if the snapshot shows it ended.
pub fn ended_in_snapshot(snapshot: &Value, run_id: &str) -> Option<RunEnd> {
    let run = snapshot["runs"]
        .as_array()?
        .iter()
        .find(|r| r["id"] == run_id)?;
    let status = run["status"].as_str()?;
    if run_is_active(run) {
        return None;
    }
    Some(RunEnd {
        status: status.to_string(),
        error: run["error"].as_str().map(str::to_string),
        tokens: 0,
    })
}

fn end_tokens(snapshot: &Value, run_id: &str) -> i64 {
    snapshot["runs"]
        .as_array()
        .and_then(|runs| runs.iter().find(|r| r["id"] == run_id))
        .and_then(|r| r["usage"]["used"].as_i64())
        .unwrap_or(0)
}

/// The folder a saved agent keeps to, as chatd shows the agent (`folder`:
/// null, or `{path, name, mode, state}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentFolder {
    /// It keeps to no folder: its chats may work anywhere.
    None,
    /// It keeps to a folder that is there.
    Ok,
    /// Its folder is gone, no folder, or none is chosen (`missing`,
    /// `unset`, or a state this build does not know).
    Missing,
}

/// The folder state of `agent` (the JSON of `GET /agents/{id}`).
pub fn agent_folder(agent: &Value) -> AgentFolder {
    match &agent["folder"] {
        Value::Null => AgentFolder::None,
        folder if folder["state"] == "ok" => AgentFolder::Ok,
        _ => AgentFolder::Missing,
    }
}

/// The last assistant message's text in the snapshot.
pub fn last_answer(snapshot: &Value) -> Option<String> {
    snapshot["messages"]
        .as_array()?
        .iter()
        .rev()
        .find(|m| m["role"] == "assistant" && m["text"].as_str().is_some_and(|t| !t.is_empty()))
        .and_then(|m| m["text"].as_str())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_readers() {
        let snap = json!({"runs": [{"id": "r_1", "status": "running"}, {"id": "r_2", "status": "failed", "error": "boom", "usage": {"used": 40}}],
            "messages": [{"role": "user", "text": "hi"}, {"role": "assistant", "text": "Done. I filed it."}, {"role": "assistant", "text": ""}]});
        assert_eq!(ended_in_snapshot(&snap, "r_1"), None);
        let end = ended_in_snapshot(&snap, "r_2").unwrap();
        assert_eq!(end.status, "failed");
        assert_eq!(end.error.as_deref(), Some("boom"));
        assert_eq!(end_tokens(&snap, "r_2"), 40);
        assert_eq!(last_answer(&snap).as_deref(), Some("Done. I filed it."));
    }

    #[test]
    fn an_agents_folder_is_ok_only_when_chatd_says_so() {
        assert_eq!(agent_folder(&json!({"id": "a_1"})), AgentFolder::None);
        assert_eq!(agent_folder(&json!({"folder": null})), AgentFolder::None);
        let folder =
            |state: &str| json!({"folder": {"path": "/n", "mode": "read", "state": state}});
        assert_eq!(agent_folder(&folder("ok")), AgentFolder::Ok);
        assert_eq!(agent_folder(&folder("missing")), AgentFolder::Missing);
        assert_eq!(agent_folder(&folder("unset")), AgentFolder::Missing);
        assert_eq!(agent_folder(&folder("newer")), AgentFolder::Missing);
        let refused = |status: u16, kind: &str| ChatError::Refused {
            status,
            kind: kind.into(),
            message: "m".into(),
            field: None,
        };
        assert!(refused(409, AGENT_FOLDER_MISSING).agent_folder_missing());
        assert!(!refused(409, "run_active").agent_folder_missing());
        assert!(!refused(409, AGENT_FOLDER_MISSING).retryable());
    }
}
