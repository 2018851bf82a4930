//! The box's engine, reached as any OpenAI-compatible client reaches it:
//! `POST /v1/chat/completions` streamed, `GET /v1/models`. chatd never
//! imports engine code. Faults are sorted here into what a run does next.

use std::time::Duration;

use bytes::{Buf, BytesMut};
use futures_util::StreamExt;
use serde::Serialize;
use serde_json::Value;

#[derive(Clone)]
pub struct Engine {
    base: String,
    http: reqwest::Client,
}

/// What a model can do, as `GET /v1/models` says.
#[derive(Debug, Clone, Serialize)]
pub struct ModelInfo {
    pub id: String,
    pub context_window: Option<u64>,
    pub vision: bool,
    pub tools: bool,
    /// It transcribes speech (`capabilities` holds "transcription" or "audio").
    pub transcription: bool,
}

/// One piece of a streamed answer.
#[derive(Debug)]
pub enum Piece {
    Text(String),
    Reasoning(String),
    /// A fragment of a tool call, merged by `index`.
    ToolCall {
        index: u64,
        id: Option<String>,
        name: Option<String>,
        arguments: String,
    },
    Usage {
        prompt: u64,
        completion: u64,
        tokens_per_second: Option<f64>,
        prompt_ms: Option<f64>,
    },
    Finish(String),
}

/// Why a request did not give a whole answer, sorted by what to do next.
#[derive(Debug)]
pub enum Fault {
    /// Refused, reset or timed out before an answer: retry with backoff.
    Unreachable(String),
    /// The stream stopped before its end: retry with backoff, continuing the text.
    Cut(String),
    /// 503 or 429: wait `retry_after` and try once more.
    Busy {
        status: u16,
        retry_after: Option<u64>,
        message: String,
    },
    /// Another 5xx: retry with backoff.
    Server { status: u16, message: String },
    /// A 4xx: the run fails with the engine's message.
    Rejected { status: u16, message: String },
}

impl Fault {
    /// A 400 saying the request is longer than the model's context window
    /// (llama.cpp: "exceeds the available context size", vLLM: "maximum
    /// context length").
    pub fn is_over_context(&self) -> bool {
        match self {
            Fault::Rejected {
                status: 400,
                message,
            } => {
                let m = message.to_ascii_lowercase();
                m.contains("context size")
                    || m.contains("context length")
                    || m.contains("context window")
                    || m.contains("exceed_context")
            }
            _ => false,
        }
    }

    /// One line for `run.retrying` and a run's error.
    pub fn reason(&self) -> String {
        match self {
            Fault::Unreachable(m) => format!("engine unreachable: {m}"),
            Fault::Cut(m) => format!("engine stream cut: {m}"),
            Fault::Busy {
                status, message, ..
            } => format!("engine busy ({status}): {message}"),
            Fault::Server { status, message } => format!("engine error ({status}): {message}"),
            Fault::Rejected { status, message } => {
                format!("engine refused the request ({status}): {message}")
            }
        }
    }
}

impl Engine {
    pub fn new(base: &str) -> Engine {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            // Keep-alive connections to a restarted engine fail once; a short
            // idle time keeps that rare.
            .pool_idle_timeout(Duration::from_secs(20))
            .build()
            .unwrap_or_else(|_| reqwest::Client::new());
        Engine {
            base: base.trim_end_matches('/').to_string(),
            http,
        }
    }

    pub fn url(&self) -> &str {
        &self.base
    }

    /// The models the engine serves; `Err` when it does not answer in time.
    pub async fn models(&self, timeout: Duration) -> Result<Vec<ModelInfo>, String> {
        let response = self
            .http
            .get(format!("{}/v1/models", self.base))
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| short(&e))?;
        if !response.status().is_success() {
            return Err(format!("GET /v1/models answered {}", response.status()));
        }
        let body: Value = response.json().await.map_err(|e| short(&e))?;
        let list = body
            .get("data")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        Ok(list
            .iter()
            .filter_map(|m| {
                let id = m.get("id")?.as_str()?.to_string();
                let window = ["context_length", "max_model_len", "context_window"]
                    .iter()
                    .find_map(|k| m.get(*k).and_then(Value::as_u64))
                    .or_else(|| m.pointer("/meta/n_ctx_train").and_then(Value::as_u64));
                let caps = m.get("capabilities");
                let has = |c: &str| {
                    caps.and_then(Value::as_array)
                        .is_some_and(|a| a.iter().any(|v| v.as_str() == Some(c)))
                };
                Some(ModelInfo {
                    id,
                    context_window: window,
                    vision: has("vision"),
                    tools: true,
                    transcription: has("transcription") || has("audio"),
                })
            })
            .collect())
    }

    /// The exact prompt size of `messages` and `tools` by the engine's
    /// `POST /v1/tokenize` (vLLM's shape: `{count}` or `{tokens}`).
    /// `Ok(None)`: the engine has no such route; `Err`: it did not answer.
    pub async fn tokenize(
        &self,
        model: &str,
        messages: &Value,
        tools: Option<&Value>,
    ) -> Result<Option<u64>, String> {
        // Borrowed, not copied: the request is the whole chat.
        #[derive(Serialize)]
        struct Body<'a> {
            model: &'a str,
            messages: &'a Value,
            #[serde(skip_serializing_if = "Option::is_none")]
            tools: Option<&'a Value>,
        }
        let body = Body {
            model,
            messages,
            tools,
        };
        let response = self
            .http
            .post(format!("{}/v1/tokenize", self.base))
            .json(&body)
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .map_err(|e| short(&e))?;
        match response.status().as_u16() {
            200 => {}
            404 | 405 | 501 => return Ok(None),
            status => return Err(format!("POST /v1/tokenize answered {status}")),
        }
        let bytes = response.bytes().await.map_err(|e| short(&e))?;
        let answer: TokenizeAnswer = serde_json::from_slice(&bytes)
            .map_err(|e| format!("POST /v1/tokenize answered what is not a count: {e}"))?;
        answer
            .count
            .or(answer.tokens.map(|t| t.0))
            .map(Some)
            .ok_or_else(|| "POST /v1/tokenize answered without a count".to_string())
    }

    /// The text of `audio` (named `file_name`, of type `mime`) as `model`
    /// hears it, by `POST /v1/audio/transcriptions` (OpenAI's multipart
    /// shape, answer `{"text"}`). The caller bounds the time.
    pub async fn transcribe(
        &self,
        model: &str,
        file_name: &str,
        mime: &str,
        audio: Vec<u8>,
    ) -> Result<String, Fault> {
        let file = reqwest::multipart::Part::bytes(audio)
            .file_name(file_name.to_string())
            .mime_str(mime)
            .map_err(|e| Fault::Rejected {
                status: 0,
                message: format!("{mime:?} is not a media type: {e}"),
            })?;
        let form = reqwest::multipart::Form::new()
            .text("model", model.to_string())
            .text("response_format", "json")
            .part("file", file);
        let response = self
            .http
            .post(format!("{}/v1/audio/transcriptions", self.base))
            .multipart(form)
            .send()
            .await
            .map_err(|e| Fault::Unreachable(short(&e)))?;
        let status = response.status().as_u16();
        let text = response.text().await.map_err(|e| Fault::Cut(short(&e)))?;
        if status != 200 {
            let message = error_message(&text);
            return Err(match status {
                503 | 429 => Fault::Busy {
                    status,
                    retry_after: None,
                    message,
                },
                400..=499 => Fault::Rejected { status, message },
                _ => Fault::Server { status, message },
            });
        }
        let answer: Value = serde_json::from_str(&text).map_err(|_| Fault::Server {
            status,
            message: "the answer was not JSON".into(),
        })?;
        answer
            .get("text")
            .and_then(Value::as_str)
            .map(|t| t.trim().to_string())
            .ok_or_else(|| Fault::Server {
                status,
                message: "the answer had no text".into(),
            })
    }

    /// Starts a streamed chat completion for `session` (`x-session-id`).
    /// `body` is the request's JSON text.
    pub async fn stream(&self, session: &str, body: bytes::Bytes) -> Result<EngineStream, Fault> {
        let response = self
            .http
            .post(format!("{}/v1/chat/completions", self.base))
            .header("x-session-id", session)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| Fault::Unreachable(short(&e)))?;
        let status = response.status().as_u16();
        if status != 200 {
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok());
            let text = response.text().await.unwrap_or_default();
            let message = error_message(&text);
            return Err(match status {
                503 | 429 => Fault::Busy {
                    status,
                    retry_after,
                    message,
                },
                400..=499 => Fault::Rejected { status, message },
                _ => Fault::Server { status, message },
            });
        }
        Ok(EngineStream {
            body: Box::pin(response.bytes_stream()),
            buffer: BytesMut::new(),
            queue: std::collections::VecDeque::new(),
            done: false,
            finished: false,
            garbage: 0,
        })
    }
}

/// `/v1/tokenize`'s answer: vLLM sends `count` and every token id; only
/// their number is kept (a long chat's ids are a megabyte of JSON).
#[derive(serde::Deserialize)]
struct TokenizeAnswer {
    #[serde(default)]
    count: Option<u64>,
    #[serde(default)]
    tokens: Option<Counted>,
}

/// The length of a JSON array, read without keeping its elements.
struct Counted(u64);

impl<'de> serde::Deserialize<'de> for Counted {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Counted, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Counted;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an array of token ids")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Counted, A::Error> {
                let mut n = 0;
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(Counted(n))
            }
        }
        d.deserialize_seq(Visitor)
    }
}

/// The engine's message from an OpenAI error body, else the body's first line.
fn error_message(text: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(text).ok();
    let message = parsed
        .as_ref()
        .and_then(|v| {
            v.pointer("/error/message")
                .or_else(|| v.get("message"))
                .or_else(|| v.get("error"))
        })
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| text.lines().next().unwrap_or("").to_string());
    let mut message = message.trim().to_string();
    if message.len() > 300 {
        let mut cut = 300;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
    }
    if message.is_empty() {
        "no message".into()
    } else {
        message
    }
}

fn short(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        text = format!("{text}: {s}");
        source = s.source();
    }
    text
}

type ByteStream =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>;

/// The longest line of an engine's stream chatd keeps in memory.
const MAX_LINE: usize = 1 << 20;

/// The pieces of one streamed answer, line by line.
pub struct EngineStream {
    body: ByteStream,
    buffer: BytesMut,
    queue: std::collections::VecDeque<Piece>,
    done: bool,
    finished: bool,
    /// Lines that were neither a chunk nor an SSE field or comment.
    pub garbage: u64,
}

impl EngineStream {
    /// A stream of `chunks` as if the engine had sent them, read as a real
    /// one is. It exists for the fuzzer (tests/src/fuzzing) and this module's tests; the fuzzer cuts an
    /// answer into chunks anywhere and drives the line parser through them.
    pub fn of_chunks(chunks: Vec<bytes::Bytes>) -> EngineStream {
        let chunks: Vec<reqwest::Result<bytes::Bytes>> = chunks.into_iter().map(Ok).collect();
        EngineStream {
            body: Box::pin(futures_util::stream::iter(chunks)),
            buffer: BytesMut::new(),
            queue: std::collections::VecDeque::new(),
            done: false,
            finished: false,
            garbage: 0,
        }
    }

    /// The next piece; `Ok(None)` at the stream's proper end.
    pub async fn next(&mut self) -> Result<Option<Piece>, Fault> {
        loop {
            if let Some(piece) = self.queue.pop_front() {
                return Ok(Some(piece));
            }
            if self.done {
                return Ok(None);
            }
            if let Some(line) = self.take_line() {
                self.parse_line(&line);
                continue;
            }
            match self.body.next().await {
                Some(Ok(bytes)) => {
                    self.buffer.extend_from_slice(&bytes);
                    // No chunk is this long: a line without end is garbage,
                    // not a reason to hold the engine's stream in memory.
                    if self.buffer.len() > MAX_LINE && !self.buffer.contains(&b'\n') {
                        self.garbage += 1;
                        self.buffer.clear();
                    }
                }
                Some(Err(err)) => return Err(Fault::Cut(short(&err))),
                None => {
                    // A last line without its newline still counts.
                    if !self.buffer.is_empty() {
                        let rest = String::from_utf8_lossy(&self.buffer).into_owned();
                        self.buffer.clear();
                        self.parse_line(&rest);
                        continue;
                    }
                    if self.finished {
                        self.done = true;
                        continue;
                    }
                    return Err(Fault::Cut("the stream ended before the answer did".into()));
                }
            }
        }
    }

    fn take_line(&mut self) -> Option<String> {
        let end = self.buffer.iter().position(|b| *b == b'\n')?;
        let line = String::from_utf8_lossy(&self.buffer[..end])
            .trim_end_matches('\r')
            .to_string();
        self.buffer.advance(end + 1);
        Some(line)
    }

    fn parse_line(&mut self, line: &str) {
        if line.is_empty() || line.starts_with(':') {
            return;
        }
        let Some(data) = line.strip_prefix("data:") else {
            if !(line.starts_with("event:")
                || line.starts_with("id:")
                || line.starts_with("retry:"))
            {
                self.garbage += 1;
            }
            return;
        };
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            return;
        }
        let Ok(chunk) = serde_json::from_str::<Value>(data) else {
            self.garbage += 1;
            return;
        };
        if let Some(choice) = chunk.pointer("/choices/0") {
            let delta = choice.get("delta");
            let text_of = |key: &str| {
                delta
                    .and_then(|d| d.get(key))
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
            };
            if let Some(r) = text_of("reasoning_content").or_else(|| text_of("reasoning")) {
                self.queue.push_back(Piece::Reasoning(r.to_string()));
            }
            if let Some(t) = text_of("content") {
                self.queue.push_back(Piece::Text(t.to_string()));
            }
            if let Some(calls) = delta
                .and_then(|d| d.get("tool_calls"))
                .and_then(Value::as_array)
            {
                for call in calls {
                    self.queue.push_back(Piece::ToolCall {
                        index: call.get("index").and_then(Value::as_u64).unwrap_or(0),
                        id: call.get("id").and_then(Value::as_str).map(str::to_string),
                        name: call
                            .pointer("/function/name")
                            .and_then(Value::as_str)
                            .map(str::to_string),
                        arguments: call
                            .pointer("/function/arguments")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                    });
                }
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finished = true;
                self.queue.push_back(Piece::Finish(reason.to_string()));
            }
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            let get = |k: &str| usage.get(k).and_then(Value::as_u64).unwrap_or(0);
            self.queue.push_back(Piece::Usage {
                prompt: get("prompt_tokens"),
                completion: get("completion_tokens"),
                tokens_per_second: chunk
                    .pointer("/timings/predicted_per_second")
                    .and_then(Value::as_f64),
                prompt_ms: chunk.pointer("/timings/prompt_ms").and_then(Value::as_f64),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream_of(chunks: &[&str]) -> EngineStream {
        EngineStream::of_chunks(
            chunks
                .iter()
                .map(|c| bytes::Bytes::from(c.to_string()))
                .collect(),
        )
    }

    /// Reads the whole stream: the text, the pieces' kinds in order, the
    /// garbage count, and whether it ended properly.
    async fn read(chunks: &[&str]) -> (String, Vec<&'static str>, u64, bool) {
        let mut stream = stream_of(chunks);
        let (mut text, mut kinds) = (String::new(), Vec::new());
        let ended = loop {
            match stream.next().await {
                Ok(Some(piece)) => kinds.push(match piece {
                    Piece::Text(t) => {
                        text.push_str(&t);
                        "text"
                    }
                    Piece::Reasoning(_) => "reasoning",
                    Piece::ToolCall { .. } => "tool_call",
                    Piece::Usage { .. } => "usage",
                    Piece::Finish(_) => "finish",
                }),
                Ok(None) => break true,
                Err(Fault::Cut(_)) => break false,
                Err(other) => panic!("unexpected fault {other:?}"),
            }
        };
        (text, kinds, stream.garbage, ended)
    }

    fn chunk(content: &str) -> String {
        format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{content}\"}}}}]}}\n\n"
        )
    }

    const FINISH: &str =
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n";

    #[tokio::test]
    async fn a_whole_stream_reads_to_its_end() {
        let (a, b) = (chunk("w0 "), chunk("w1 "));
        let usage =
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\n";
        let (text, kinds, garbage, ended) =
            read(&[&a, &b, FINISH, usage, "data: [DONE]\n\n"]).await;
        assert_eq!((text.as_str(), garbage, ended), ("w0 w1 ", 0, true));
        assert_eq!(kinds, ["text", "text", "finish", "usage"]);
    }

    #[tokio::test]
    async fn chunks_split_anywhere_still_parse() {
        let whole = format!("{}{}{FINISH}data: [DONE]\n\n", chunk("w0 "), chunk("w1 "));
        let bytes = whole.as_bytes();
        for cut in 1..bytes.len() {
            let (a, b) = bytes.split_at(cut);
            let (a, b) = (
                String::from_utf8_lossy(a).to_string(),
                String::from_utf8_lossy(b).to_string(),
            );
            let (text, _, garbage, ended) = read(&[&a, &b]).await;
            assert_eq!(
                (text.as_str(), garbage, ended),
                ("w0 w1 ", 0, true),
                "split at {cut}"
            );
        }
    }

    #[tokio::test]
    async fn garbage_lines_are_counted_and_skipped() {
        let (a, b) = (chunk("w0 "), chunk("w1 "));
        let junk = "data: {not json\n\n: a comment\n\nrandom words\n\nevent: x\n\n";
        let (text, _, garbage, ended) = read(&[&a, junk, &b, FINISH, "data: [DONE]\n\n"]).await;
        assert_eq!((text.as_str(), garbage, ended), ("w0 w1 ", 2, true));
    }

    #[tokio::test]
    async fn a_stream_that_stops_early_is_a_cut() {
        let a = chunk("w0 ");
        let (text, _, _, ended) = read(&[&a]).await;
        assert_eq!(
            (text.as_str(), ended),
            ("w0 ", false),
            "no finish, no [DONE]: cut"
        );
        let (_, _, _, ended) = read(&[&a, FINISH]).await;
        assert!(ended, "a finish without [DONE] is a whole answer");
    }

    #[tokio::test]
    async fn an_endless_line_is_dropped_not_kept() {
        let endless = "x".repeat(MAX_LINE + 10);
        let a = chunk("w0 ");
        let (text, _, garbage, ended) = read(&[&endless, "\n", &a, FINISH]).await;
        assert_eq!((text.as_str(), ended), ("w0 ", true));
        assert!(garbage >= 1);
    }

    #[test]
    fn engine_messages_are_taken_from_openai_bodies() {
        let check = |body: &str, want: &str| assert_eq!(error_message(body), want, "{body}");
        check(
            r#"{"error":{"message":"the request exceeds the available context size","code":400}}"#,
            "the request exceeds the available context size",
        );
        check(r#"{"message":"busy"}"#, "busy");
        check("plain text\nsecond line", "plain text");
        check("", "no message");
    }
}
