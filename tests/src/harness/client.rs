//! A test's HTTP client of chatd's API: chats, messages, snapshots, the
//! event stream read as SSE, and the small readers of what came back.

use super::*;

/// A client of chatd's API with the forward key.
#[derive(Clone)]
pub struct Client {
    pub base: String,
    key: String,
    pub http: reqwest::Client,
}

/// An answer: status and JSON body (`Null` when the body is not JSON).
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
    pub headers: reqwest::header::HeaderMap,
}

impl Client {
    pub fn new(base: &str, key: &str) -> Client {
        Client {
            base: base.to_string(),
            key: key.to_string(),
            http: reqwest::Client::new(),
        }
    }

    /// The forward key the client sends.
    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn api(&self, path: &str) -> String {
        format!("{}/v1/chat-app{path}", self.base)
    }

    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Answer> {
        let mut request = self
            .http
            .request(method, self.api(path))
            .header("x-forward-key", &self.key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await?;
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Ok(Answer {
            status,
            body,
            headers,
        })
    }

    pub async fn get(&self, path: &str) -> anyhow::Result<Answer> {
        self.call(reqwest::Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> anyhow::Result<Answer> {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    /// Creates a conversation and returns its id.
    pub async fn create_chat(&self) -> anyhow::Result<String> {
        let answer = self.post("/conversations", json!({})).await?;
        anyhow::ensure!(answer.status == 201, "create answered {answer:?}");
        Ok(answer.body["id"]
            .as_str()
            .context("conversation id")?
            .to_string())
    }

    /// Creates a conversation in permission mode `mode`; returns its id.
    pub async fn create_chat_in(&self, mode: &str) -> anyhow::Result<String> {
        let made = self
            .post("/conversations", json!({"permission_mode": mode}))
            .await?;
        anyhow::ensure!(made.status == 201, "create answered {made:?}");
        Ok(made.body["id"].as_str().context("chat id")?.to_string())
    }

    /// Sends a message; returns the 202 body.
    pub async fn send(&self, chat: &str, text: &str) -> anyhow::Result<Value> {
        let answer = self
            .post(
                &format!("/conversations/{chat}/messages"),
                json!({"text": text}),
            )
            .await?;
        anyhow::ensure!(answer.status == 202, "send answered {answer:?}");
        Ok(answer.body)
    }

    pub async fn snapshot(&self, chat: &str) -> anyhow::Result<Value> {
        let answer = self.get(&format!("/conversations/{chat}")).await?;
        anyhow::ensure!(answer.status == 200, "snapshot answered {answer:?}");
        Ok(answer.body)
    }

    /// The run with `run_id` in the snapshot.
    pub async fn run(&self, chat: &str, run_id: &str) -> anyhow::Result<Value> {
        let snapshot = self.snapshot(chat).await?;
        snapshot["runs"]
            .as_array()
            .and_then(|runs| runs.iter().find(|r| r["id"] == run_id).cloned())
            .with_context(|| format!("run {run_id} not in the snapshot"))
    }

    /// Waits (polling, bounded) until the run's status is one of `statuses`.
    pub async fn wait_run(
        &self,
        chat: &str,
        run_id: &str,
        statuses: &[&str],
        bound: Duration,
    ) -> anyhow::Result<Value> {
        wait_until(
            &format!("run {run_id} to be {statuses:?}"),
            bound,
            || async {
                let run = self.run(chat, run_id).await.ok()?;
                statuses.contains(&run["status"].as_str()?).then_some(run)
            },
        )
        .await
    }

    /// Opens an event stream after `seq` (sent as `Last-Event-ID`).
    pub async fn events(&self, chat: &str, after: i64) -> anyhow::Result<EventStream> {
        let request = self
            .http
            .get(self.api(&format!("/conversations/{chat}/events")))
            .header("last-event-id", after.to_string());
        self.open_events(request, after).await
    }

    /// Opens an event stream after `seq` given as `?after=`, as a browser's
    /// first `EventSource` request does.
    pub async fn events_query(&self, chat: &str, after: i64) -> anyhow::Result<EventStream> {
        let request = self
            .http
            .get(self.api(&format!("/conversations/{chat}/events?after={after}")));
        self.open_events(request, after).await
    }

    /// Opens any other event stream of chatd's (`/notifications/events`):
    /// answers once the head is in, so the device is attached.
    pub async fn sse(&self, path: &str) -> anyhow::Result<EventStream> {
        let request = self.http.get(self.api(path));
        self.open_events(request, 0).await
    }

    pub(crate) async fn open_events(
        &self,
        request: reqwest::RequestBuilder,
        after: i64,
    ) -> anyhow::Result<EventStream> {
        let response = request.header("x-forward-key", &self.key).send().await?;
        anyhow::ensure!(
            response.status() == 200,
            "events answered {}",
            response.status()
        );
        Ok(EventStream {
            body: Box::pin(response.bytes_stream()),
            frames: Default::default(),
            last_seq: after,
        })
    }
}

/// One SSE event.
#[derive(Debug, Clone)]
pub struct SseEvent {
    pub seq: Option<i64>,
    pub kind: String,
    pub data: Value,
}

pub(crate) type Bytes =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>;

/// A device's event stream, parsed frame by frame.
pub struct EventStream {
    body: Bytes,
    /// Bytes, not text: a chunk may end inside a character.
    frames: tandem_shared::sse::Frames,
    /// The last seq this device saw.
    pub last_seq: i64,
}

impl EventStream {
    /// A stream of `chunks` as if chatd had sent them: for the fuzzer
    /// (tests/src/bin/fuzz), which cuts one stream anywhere.
    pub fn of_chunks(chunks: Vec<bytes::Bytes>) -> EventStream {
        let chunks: Vec<reqwest::Result<bytes::Bytes>> = chunks.into_iter().map(Ok).collect();
        EventStream {
            body: Box::pin(futures_util::stream::iter(chunks)),
            frames: Default::default(),
            last_seq: 0,
        }
    }

    /// The next event (keepalive comments skipped); `None` when the stream ends.
    pub async fn next(&mut self) -> anyhow::Result<Option<SseEvent>> {
        loop {
            if let Some(frame) = self.frames.next_frame() {
                let mut seq = None;
                let mut kind = String::from("message");
                let mut data = String::new();
                for line in frame.lines() {
                    if let Some(v) = line.strip_prefix("id: ") {
                        seq = v.trim().parse().ok();
                    } else if let Some(v) = line.strip_prefix("event: ") {
                        kind = v.trim().to_string();
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        data.push_str(v);
                    }
                }
                if data.is_empty() && seq.is_none() {
                    continue; // a comment such as `: keepalive`
                }
                if let Some(s) = seq {
                    self.last_seq = s;
                }
                let data = serde_json::from_str(&data).unwrap_or(Value::String(data));
                return Ok(Some(SseEvent { seq, kind, data }));
            }
            match self.body.next().await {
                Some(Ok(bytes)) => self.frames.push(&bytes),
                Some(Err(err)) => return Err(err.into()),
                None => return Ok(None),
            }
        }
    }

    /// Reads events until `stop` says so, within `bound`; returns them all.
    pub async fn read_until<F>(
        &mut self,
        bound: Duration,
        mut stop: F,
    ) -> anyhow::Result<Vec<SseEvent>>
    where
        F: FnMut(&SseEvent) -> bool,
    {
        let mut seen = Vec::new();
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            let next = tokio::time::timeout_at(deadline, self.next())
                .await
                .map_err(|_| {
                    anyhow::anyhow!("timed out after {bound:?}; saw {} events", seen.len())
                })??;
            let Some(event) = next else {
                bail!("the stream ended; saw {} events", seen.len())
            };
            let done = stop(&event);
            seen.push(event);
            if done {
                return Ok(seen);
            }
        }
    }
}

/// The run id of a send's (or continue's) 202 answer.
pub fn run_id(sent: &Value) -> anyhow::Result<String> {
    Ok(sent["run_id"]
        .as_str()
        .with_context(|| format!("no run_id in {sent}"))?
        .to_string())
}

/// The canonical answer of `n` tokens from the simulator.
pub fn sim_answer(n: usize) -> String {
    (0..n).map(|i| format!("w{i} ")).collect()
}

/// The texts of a snapshot's tool results, in order.
pub fn tool_results(snapshot: &Value) -> Vec<String> {
    snapshot["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["text"].as_str().unwrap_or("").to_string())
        .collect()
}

/// The `bash` call the engine simulator is to make (a `/sim/faults` entry).
/// The sha-256 of a file's bytes in hex, as chatd names a kept version;
/// `None` when there is no file.
pub fn sha256_of(path: &std::path::Path) -> Option<String> {
    use sha2::{Digest, Sha256};
    let bytes = std::fs::read(path).ok()?;
    Some(
        Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
    )
}

/// Bytes of the files under a folder, recursively (the blobs a purge frees).
pub fn du(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => du(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

pub fn bash_call(command: &str) -> Value {
    json!({"tool_calls": [{"name": "bash", "arguments": {"command": command}}]})
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by `fuzz --only sse-lines`: a chunk that ends inside a UTF-8
    /// character must not turn it into U+FFFD.
    #[tokio::test]
    async fn a_character_cut_between_chunks_is_read_whole() {
        let whole = "id: 3\nevent: text.delta\ndata: {\"text\":\"é😀\"}\n\n".as_bytes();
        for cut in 1..whole.len() {
            let (a, b) = whole.split_at(cut);
            let chunks = vec![
                bytes::Bytes::copy_from_slice(a),
                bytes::Bytes::copy_from_slice(b),
            ];
            let mut stream = EventStream::of_chunks(chunks);
            let event = stream.next().await.unwrap().expect("one event");
            assert_eq!(event.data["text"], "é😀", "cut at {cut}");
            assert_eq!(event.seq, Some(3));
        }
    }
}
