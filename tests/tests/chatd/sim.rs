//! Tests of `engine-sim`, run as the real binary (a child process).

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{json, Value};
use tandem_tests::sim::{self, continuation_start, parse_cues, Fault, SimConfig, ToolCallSpec};

/// The engine-sim binary as a child process; killed on drop.
struct SimProc {
    child: Child,
    base: String,
}

impl SimProc {
    fn start(extra: &[&str]) -> SimProc {
        let mut child = Command::new(env!("CARGO_BIN_EXE_engine-sim"))
            .args(["--listen", "127.0.0.1:0", "--tokens-per-second", "500"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn engine-sim");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let _ = tx.send(line);
            // Drain whatever else comes so the child never blocks on a full pipe.
            let _ = std::io::copy(&mut reader.take(u64::MAX), &mut std::io::sink());
        });
        let Ok(line) = rx.recv_timeout(Duration::from_secs(30)) else {
            let _ = child.kill();
            panic!("engine-sim printed no address within 30 s");
        };
        let base = line
            .trim_end()
            .strip_prefix("engine-sim listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        assert!(base.starts_with("http://127.0.0.1:"), "{base}");
        assert!(
            !base.ends_with(":0"),
            "the printed port must be the real one: {base}"
        );
        SimProc { child, base }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

impl Drop for SimProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

/// What a streamed answer looked like on the wire.
#[derive(Debug, Default)]
struct Streamed {
    chunks: Vec<Value>,
    done: bool,
    junk: usize,
    error: Option<String>,
}

impl Streamed {
    fn content(&self) -> String {
        self.deltas("content")
    }

    fn reasoning(&self) -> String {
        self.deltas("reasoning_content")
    }

    fn deltas(&self, field: &str) -> String {
        self.chunks
            .iter()
            .filter_map(|c| c.pointer(&format!("/choices/0/delta/{field}"))?.as_str())
            .collect()
    }

    fn content_chunks(&self) -> usize {
        self.chunks
            .iter()
            .filter(|c| {
                c.pointer("/choices/0/delta/content")
                    .is_some_and(Value::is_string)
            })
            .count()
    }

    fn finish_reason(&self) -> Option<&str> {
        self.chunks
            .iter()
            .find_map(|c| c.pointer("/choices/0/finish_reason")?.as_str())
    }

    fn usage_chunk(&self) -> Option<&Value> {
        self.chunks.iter().find(|c| c.get("usage").is_some())
    }

    /// Parses SSE text: `data: {json}` lines are chunks, anything else is junk.
    fn feed_line(&mut self, line: &str) {
        if line.is_empty() {
            return;
        }
        match line.strip_prefix("data: ") {
            Some("[DONE]") => self.done = true,
            Some(payload) => match serde_json::from_str::<Value>(payload) {
                Ok(v) if v.is_object() => {
                    assert!(!self.done, "a chunk after [DONE]: {payload}");
                    self.chunks.push(v)
                }
                _ => self.junk += 1,
            },
            None => self.junk += 1,
        }
    }
}

/// Reads an SSE body to its end (or its cut).
async fn read_stream(resp: reqwest::Response) -> Streamed {
    read_stream_from(resp.bytes_stream(), Vec::new()).await
}

async fn read_stream_from(
    mut body: impl futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin,
    mut buf: Vec<u8>,
) -> Streamed {
    let mut out = Streamed::default();
    loop {
        while let Some(nl) = buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buf.drain(..=nl).collect();
            let line = String::from_utf8(line).expect("the stream must be UTF-8");
            out.feed_line(line.trim_end_matches(['\n', '\r']));
        }
        match tokio::time::timeout(Duration::from_secs(30), body.next()).await {
            Err(_) => panic!("stream stalled for 30 s"),
            Ok(None) => break,
            Ok(Some(Ok(bytes))) => buf.extend_from_slice(&bytes),
            Ok(Some(Err(e))) => {
                out.error = Some(format!("{e:?}"));
                break;
            }
        }
    }
    out
}

fn words(n: std::ops::Range<usize>) -> String {
    n.map(|i| format!("w{i} ")).collect()
}

fn chat_body(messages: Value) -> Value {
    json!({
        "model": "sim-small",
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    })
}

/// A body that offers a tool: the sim, like a real engine, calls tools only
/// when some are offered.
fn with_tools(mut body: Value) -> Value {
    body["tools"] = json!([{"type": "function", "function": {
        "name": "any", "description": "a tool", "parameters": {"type": "object"}}}]);
    body
}

fn user(text: &str) -> Value {
    json!([{"role": "system", "content": "be brief"}, {"role": "user", "content": text}])
}

async fn post_chat(c: &reqwest::Client, sim: &SimProc, body: &Value) -> reqwest::Response {
    c.post(sim.url("/v1/chat/completions"))
        .json(body)
        .send()
        .await
        .expect("send chat")
}

async fn stats(c: &reqwest::Client, sim: &SimProc) -> Value {
    c.get(sim.url("/sim/stats"))
        .send()
        .await
        .expect("stats")
        .json()
        .await
        .expect("stats json")
}

#[tokio::test]
async fn health_and_models() {
    let sim = SimProc::start(&["--model", "tiny-test", "--context-window", "4096"]);
    let c = client();
    let r = c.get(sim.url("/health")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap(), json!({"status": "ok"}));
    let m: Value = c
        .get(sim.url("/v1/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(m["object"], "list");
    let d = &m["data"][0];
    assert_eq!(d["id"], "tiny-test");
    assert_eq!(d["object"], "model");
    assert_eq!(d["owned_by"], "engine-sim");
    assert_eq!(d["max_model_len"], 4096);
    assert_eq!(d["meta"]["n_ctx_train"], 4096);
    let r = c.get(sim.url("/nope")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert!(r.json::<Value>().await.unwrap()["error"]["message"].is_string());
}

#[tokio::test]
async fn stream_of_ten_tokens_with_usage() {
    let sim = SimProc::start(&[]);
    let c = client();
    let resp = post_chat(&c, &sim, &chat_body(user("hello [sim tokens=10]"))).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let s = read_stream(resp).await;
    assert!(s.error.is_none(), "{s:?}");
    assert!(s.done, "no [DONE]");
    assert_eq!(s.junk, 0);
    assert_eq!(s.content(), words(0..10));
    assert_eq!(s.content_chunks(), 10, "one chunk per token");
    let first = &s.chunks[0];
    assert_eq!(first["object"], "chat.completion.chunk");
    assert_eq!(first["model"], "sim-small");
    assert!(first["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert!(first["created"].is_u64());
    assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
    assert!(first["choices"][0]["finish_reason"].is_null());
    assert_eq!(s.finish_reason(), Some("stop"));
    let usage = s.usage_chunk().expect("usage chunk");
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 10);
    let prompt = usage["usage"]["prompt_tokens"].as_u64().unwrap();
    // (8 + 21 chars) / 4 + 4 per message + 1
    assert_eq!(
        prompt,
        ("be brief".len() + "hello [sim tokens=10]".len()) as u64 / 4 + 2 * 4 + 1
    );
    assert_eq!(usage["usage"]["total_tokens"], prompt + 10);
    assert!(usage["timings"]["prompt_ms"].is_number());
    assert!(usage["timings"]["predicted_per_second"].is_number());
    // The usage chunk is the last chunk.
    assert!(s.chunks.last().unwrap().get("usage").is_some());

    // Without include_usage: no usage chunk. Default length is --tokens.
    let body = json!({"messages": user("hi"), "stream": true});
    let s = read_stream(post_chat(&c, &sim, &body).await).await;
    assert!(s.done);
    assert!(s.usage_chunk().is_none());
    assert_eq!(s.content(), words(0..24));

    // Not streaming: one chat.completion object.
    let body = json!({"messages": user("hi [sim tokens=5]")});
    let v: Value = post_chat(&c, &sim, &body).await.json().await.unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["message"]["content"], words(0..5));
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["usage"]["completion_tokens"], 5);

    // max_tokens cuts the answer short with finish_reason "length".
    let mut body = chat_body(user("hi [sim tokens=10]"));
    body["max_tokens"] = json!(4);
    let s = read_stream(post_chat(&c, &sim, &body).await).await;
    assert_eq!(s.content(), words(0..4));
    assert_eq!(s.finish_reason(), Some("length"));
}

#[tokio::test]
async fn continuation_from_prefill() {
    let sim = SimProc::start(&[]);
    let c = client();
    let prefill = words(0..4);
    let messages = json!([
        {"role": "user", "content": "go [sim tokens=10]"},
        {"role": "assistant", "content": prefill},
    ]);
    let s = read_stream(post_chat(&c, &sim, &chat_body(messages)).await).await;
    assert!(s.done);
    assert_eq!(s.content(), words(4..10));
    assert_eq!(format!("{prefill}{}", s.content()), words(0..10));
    assert_eq!(s.usage_chunk().unwrap()["usage"]["completion_tokens"], 6);

    // A complete answer as prefill: nothing more, finish "stop".
    let messages = json!([
        {"role": "user", "content": "go [sim tokens=3]"},
        {"role": "assistant", "content": words(0..3)},
    ]);
    let s = read_stream(post_chat(&c, &sim, &chat_body(messages)).await).await;
    assert!(s.done);
    assert_eq!(s.content(), "");
    assert_eq!(s.finish_reason(), Some("stop"));

    // Stamped tokens count too.
    let messages = json!([
        {"role": "user", "content": "go [sim tokens=5 stamp=1]"},
        {"role": "assistant", "content": "w0:1700000000000000 w1:1700000000000001 "},
    ]);
    let s = read_stream(post_chat(&c, &sim, &chat_body(messages)).await).await;
    assert!(s.done);
    let got: Vec<String> = s.content().split_whitespace().map(str::to_string).collect();
    assert_eq!(got.len(), 3, "{got:?}");
    for (tok, i) in got.iter().zip(2..) {
        let (w, micros) = tok.split_once(':').expect("stamped token");
        assert_eq!(w, format!("w{i}"));
        assert!(micros.parse::<u128>().unwrap() > 1_700_000_000_000_000);
    }
}

#[tokio::test]
async fn cut_after_then_resume() {
    let sim = SimProc::start(&[]);
    let c = client();
    let cue = "tell me [sim tokens=10 cut_after=3]";
    let s = read_stream(post_chat(&c, &sim, &chat_body(user(cue))).await).await;
    assert!(!s.done, "a cut stream has no [DONE]");
    assert!(s.error.is_some(), "the client must see a cut: {s:?}");
    assert_eq!(s.content(), words(0..3));
    assert_eq!(s.finish_reason(), None);
    assert!(s.usage_chunk().is_none());

    // The resume by prefill is not cut again and completes the answer.
    let messages = json!([
        {"role": "user", "content": cue},
        {"role": "assistant", "content": s.content()},
    ]);
    let s2 = read_stream(post_chat(&c, &sim, &chat_body(messages)).await).await;
    assert!(s2.done, "{s2:?}");
    assert_eq!(format!("{}{}", s.content(), s2.content()), words(0..10));
    assert_eq!(stats(&c, &sim).await["cuts"], 1);

    // Not streaming: the body is cut short.
    let body = json!({"messages": user("[sim tokens=10 cut_after=3 id=b]")});
    let resp = post_chat(&c, &sim, &body).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.bytes().await.is_err(), "a cut body must be an error");
}

#[tokio::test]
async fn status_503_with_retry_after_once() {
    let sim = SimProc::start(&[]);
    let c = client();
    let body = chat_body(user("hi [sim status=503 retry_after=1 fail_times=1]"));
    let r = post_chat(&c, &sim, &body).await;
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"].to_str().unwrap(), "1");
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["type"], "unavailable_error");
    assert_eq!(e["error"]["code"], 503);
    assert!(e["error"]["message"].is_string());
    // The same cue text again: answered.
    let r = post_chat(&c, &sim, &body).await;
    assert_eq!(r.status(), 200);
    let s = read_stream(r).await;
    assert!(s.done);
    assert_eq!(s.content(), words(0..24));

    // Without fail_times a status cue fails every time.
    let body = chat_body(user("[sim status=429 retry_after=2 message=slow_down]"));
    for _ in 0..3 {
        let r = post_chat(&c, &sim, &body).await;
        assert_eq!(r.status(), 429);
        assert_eq!(r.headers()["retry-after"].to_str().unwrap(), "2");
        let e: Value = r.json().await.unwrap();
        assert_eq!(e["error"]["message"], "slow_down");
    }
    let st = stats(&c, &sim).await;
    assert_eq!(st["statuses"]["503"], 1);
    assert_eq!(st["statuses"]["429"], 3);
}

#[tokio::test]
async fn queued_faults_apply_in_order() {
    let sim = SimProc::start(&[]);
    let c = client();
    let r = c
        .post(sim.url("/sim/faults"))
        .json(&json!({"next": [
            {"status": 503, "retry_after": 1},
            {"cut_after": 2, "tokens": 6},
            {},
            {"status": 500, "message": "boom"},
        ]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["queued"], 4);
    let body = chat_body(user("plain [sim tokens=6]"));

    let r = post_chat(&c, &sim, &body).await;
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"].to_str().unwrap(), "1");

    let s = read_stream(post_chat(&c, &sim, &body).await).await;
    assert!(!s.done);
    assert_eq!(s.content(), words(0..2));

    let s = read_stream(post_chat(&c, &sim, &body).await).await;
    assert!(s.done);
    assert_eq!(s.content(), words(0..6));

    let r = post_chat(&c, &sim, &body).await;
    assert_eq!(r.status(), 500);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["message"], "boom");

    let s = read_stream(post_chat(&c, &sim, &body).await).await;
    assert!(s.done);

    // Bad fault objects are refused.
    let r = c
        .post(sim.url("/sim/faults"))
        .json(&json!({"next": [{"status": "soon"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
}

#[tokio::test]
async fn over_context_is_400() {
    let sim = SimProc::start(&["--context-window", "100"]);
    let c = client();
    let long = "x".repeat(1000);
    let body = chat_body(json!([{"role": "user", "content": long}]));
    let r = post_chat(&c, &sim, &body).await;
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["type"], "exceed_context_size_error");
    assert_eq!(e["error"]["code"], 400);
    assert_eq!(e["error"]["n_ctx"], 100);
    // 1000 / 4 + 4 (one message) + 1
    assert_eq!(e["error"]["n_prompt_tokens"], 255);
    assert_eq!(
        e["error"]["message"],
        "the request exceeds the available context size, try increasing it"
    );
    // Just at the window is fine: 380 / 4 + 4 + 1 = 100.
    let body = chat_body(json!([{"role": "user", "content": "x".repeat(380)}]));
    assert_eq!(post_chat(&c, &sim, &body).await.status(), 200);
    // One character more per token is over it.
    let body = chat_body(json!([{"role": "user", "content": "x".repeat(384)}]));
    assert_eq!(post_chat(&c, &sim, &body).await.status(), 400);
}

#[tokio::test]
async fn bad_requests_are_400_not_crashes() {
    let sim = SimProc::start(&[]);
    let c = client();
    for raw in [
        "{not json",
        "[]",
        "{}",
        "{\"messages\": 3}",
        "{\"messages\": []}",
    ] {
        let r = c
            .post(sim.url("/v1/chat/completions"))
            .header("content-type", "application/json")
            .body(raw)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{raw}");
        let e: Value = r.json().await.unwrap();
        assert_eq!(e["error"]["type"], "invalid_request_error", "{raw}");
        assert!(e["error"]["message"].is_string());
    }
    let r = post_chat(&c, &sim, &chat_body(user("[sim tokens=lots]"))).await;
    assert_eq!(r.status(), 400);
    let msg = r.json::<Value>().await.unwrap()["error"]["message"].to_string();
    assert!(msg.contains("tokens=lots"), "{msg}");
    // Still serving.
    assert_eq!(
        c.get(sim.url("/health")).send().await.unwrap().status(),
        200
    );
}

#[tokio::test]
async fn garbage_lines_leave_tokens_intact() {
    let sim = SimProc::start(&[]);
    let c = client();
    let s =
        read_stream(post_chat(&c, &sim, &chat_body(user("[sim tokens=12 garbage=1]"))).await).await;
    assert!(s.done);
    assert!(s.junk >= 8, "junk lines: {}", s.junk);
    assert_eq!(s.content(), words(0..12));
    assert_eq!(s.content_chunks(), 12);
    assert!(s.usage_chunk().is_some());
}

#[tokio::test]
async fn reasoning_then_content() {
    let sim = SimProc::start(&[]);
    let c = client();
    let s = read_stream(post_chat(&c, &sim, &chat_body(user("[sim tokens=3 reasoning=4]"))).await)
        .await;
    assert!(s.done);
    assert_eq!(s.reasoning(), "r0 r1 r2 r3 ");
    assert_eq!(s.content(), words(0..3));
    // Reasoning comes first.
    let first_content = s
        .chunks
        .iter()
        .position(|c| {
            c.pointer("/choices/0/delta/content")
                .is_some_and(Value::is_string)
        })
        .unwrap();
    assert_eq!(first_content, 4);
    assert_eq!(s.usage_chunk().unwrap()["usage"]["completion_tokens"], 7);
}

#[tokio::test]
async fn tool_call_streaming() {
    let sim = SimProc::start(&[]);
    let c = client();
    let cue = r#"weather? [sim tool_call=get_weather args={"city":"Paris","days":[1,2]}]"#;
    let s = read_stream(post_chat(&c, &sim, &with_tools(chat_body(user(cue)))).await).await;
    assert!(s.done);
    assert_eq!(s.finish_reason(), Some("tool_calls"));
    let calls: Vec<&Value> = s
        .chunks
        .iter()
        .filter_map(|c| c.pointer("/choices/0/delta/tool_calls/0"))
        .collect();
    assert!(
        calls.len() >= 3,
        "a header and 2+ argument pieces: {calls:?}"
    );
    assert_eq!(calls[0]["index"], 0);
    assert_eq!(calls[0]["type"], "function");
    assert!(calls[0]["id"].as_str().unwrap().starts_with("call_"));
    assert_eq!(calls[0]["function"]["name"], "get_weather");
    let args: String = calls
        .iter()
        .filter_map(|c| c["function"]["arguments"].as_str())
        .collect();
    assert_eq!(args, r#"{"city":"Paris","days":[1,2]}"#);
    let pieces = calls
        .iter()
        .filter(|c| {
            c["function"]["arguments"]
                .as_str()
                .is_some_and(|a| !a.is_empty())
        })
        .count();
    assert!(pieces >= 2, "arguments in {pieces} piece(s)");
    assert_eq!(s.content(), "");

    // Default arguments {} and some text before the call; not streaming.
    let body = with_tools(json!({"messages": user("[sim tool_call=ls tokens=2]")}));
    let v: Value = post_chat(&c, &sim, &body).await.json().await.unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(v["choices"][0]["message"]["content"], words(0..2));
    let call = &v["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "ls");
    assert_eq!(call["function"]["arguments"], "{}");
}

#[tokio::test]
async fn refuse_then_answer_again() {
    let sim = SimProc::start(&[]);
    let c = client();
    // A slow stream in flight when the engine "restarts".
    let resp = post_chat(&c, &sim, &chat_body(user("[sim tokens=200 tps=20]"))).await;
    let mut body = resp.bytes_stream();
    let first = tokio::time::timeout(Duration::from_secs(30), body.next())
        .await
        .expect("first chunk")
        .expect("a chunk")
        .expect("bytes");

    let began = Instant::now();
    let r = client()
        .post(sim.url("/sim/refuse"))
        .json(&json!({"seconds": 1.5}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    let s = read_stream_from(body, first.to_vec()).await;
    assert!(!s.done);
    assert!(s.error.is_some(), "the open stream must be cut: {s:?}");
    assert!(s.content().starts_with("w0 "), "{:?}", s.content());

    // New connections are refused now.
    let err = client()
        .get(sim.url("/health"))
        .send()
        .await
        .expect_err("connection must be refused");
    assert!(err.is_connect(), "{err:?}");

    // ... and accepted again after the time.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match client().get(sim.url("/health")).send().await {
            Ok(r) if r.status() == 200 => break,
            other => {
                assert!(Instant::now() < deadline, "not back after 20 s: {other:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    let waited = began.elapsed();
    assert!(
        waited >= Duration::from_millis(1400),
        "back after {waited:?}"
    );
    let st = stats(&c, &sim).await;
    assert_eq!(st["refusals"], 1);
    assert!(st["cuts"].as_u64().unwrap() >= 1);

    // A queued refuse_s fault: that request gets no answer, then refusals.
    c.post(sim.url("/sim/faults"))
        .json(&json!({"next": [{"refuse_s": 0.5}]}))
        .send()
        .await
        .unwrap();
    let err = client()
        .post(sim.url("/v1/chat/completions"))
        .json(&chat_body(user("hi")))
        .send()
        .await
        .expect_err("the request dies with the engine");
    assert!(!err.is_timeout(), "{err:?}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match client().get(sim.url("/health")).send().await {
            Ok(r) if r.status() == 200 => break,
            other => {
                assert!(Instant::now() < deadline, "not back after 20 s: {other:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    assert_eq!(stats(&client(), &sim).await["refusals"], 2);
}

#[tokio::test]
async fn requests_are_recorded_with_session_id() {
    let sim = SimProc::start(&[]);
    let c = client();
    let body = chat_body(user("[sim tokens=2]"));
    let r = c
        .post(sim.url("/v1/chat/completions"))
        .header("x-session-id", "chat-42")
        .json(&body)
        .send()
        .await
        .unwrap();
    read_stream(r).await;
    let body2 = json!({"messages": user("second [sim tokens=1]")});
    post_chat(&c, &sim, &body2).await.bytes().await.unwrap();

    let log: Value = c
        .get(sim.url("/sim/requests"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let log = log.as_array().expect("a list");
    assert_eq!(log.len(), 2);
    assert_eq!(log[0]["session_id"], "chat-42");
    assert_eq!(log[0]["body"], body);
    assert!(log[0]["at"].as_str().unwrap().contains('T'));
    assert!(log[1]["session_id"].is_null());
    assert_eq!(log[1]["body"], body2);
    // The counted prompt tokens, beside each body.
    let counted = |b: &Value| sim::count_prompt_tokens(b["messages"].as_array().unwrap(), None);
    assert_eq!(log[0]["prompt_tokens"], counted(&body));
    assert_eq!(log[1]["prompt_tokens"], counted(&body2));
    assert_eq!(log[1]["prompt_tokens"], ("be brief".len() + 21) / 4 + 9);

    let r = c.delete(sim.url("/sim/requests")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let log: Value = c
        .get(sim.url("/sim/requests"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(log, json!([]));
    let st = stats(&c, &sim).await;
    assert_eq!(st["requests"], 2);
    assert_eq!(st["completed"], 2);
    assert_eq!(st["tokens_sent"], 3);
}

#[tokio::test]
async fn in_process_server() {
    let server = sim::start(
        "127.0.0.1:0",
        SimConfig {
            tokens_per_second: 0.0,
            tokens: 3,
            ..SimConfig::default()
        },
    )
    .await
    .unwrap();
    let c = client();
    let r = c
        .post(format!("{}/v1/chat/completions", server.url()))
        .json(&chat_body(user("hi")))
        .send()
        .await
        .unwrap();
    let s = read_stream(r).await;
    assert!(s.done);
    assert_eq!(s.content(), words(0..3));
    let url = server.url();
    server.stop().await.unwrap();
    let err = client()
        .get(format!("{url}/health"))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_connect(), "{err:?}");
}

#[test]
fn cue_parsing() {
    assert_eq!(parse_cues("no cue here").unwrap(), None);
    assert_eq!(parse_cues("[simple]").unwrap(), None);
    let (key, f) = parse_cues("a [sim tokens=3 tps=0] b [sim cut_after=2]")
        .unwrap()
        .unwrap();
    assert_eq!(key, "[sim tokens=3 tps=0] [sim cut_after=2]");
    assert_eq!(f.tokens, Some(3));
    assert_eq!(f.tps, Some(0.0));
    assert_eq!(f.cut_after, Some(2));
    let (_, f) = parse_cues(r#"[sim tool_call=x args={"a":[1,{"b":"]"}]} message="two words"]"#)
        .unwrap()
        .unwrap();
    assert_eq!(f.tool_call.as_deref(), Some("x"));
    assert_eq!(f.args.as_deref(), Some(r#"{"a":[1,{"b":"]"}]}"#));
    assert_eq!(f.message.as_deref(), Some("two words"));
    assert!(parse_cues("[sim tokens=3").is_err());
    assert!(parse_cues("[sim tokens]").is_err());
    assert!(parse_cues("[sim status=200]").is_err());
    assert!(parse_cues("[sim what=1]").is_err());
    let f = Fault::from_json(&json!({"status": 503, "retry_after": 1, "garbage": true})).unwrap();
    assert_eq!(f.status, Some(503));
    assert_eq!(f.retry_after.as_deref(), Some("1"));
    assert_eq!(f.garbage, Some(true));

    // tool_calls: in a cue (no spaces), and as a JSON array or string in a fault.
    let (_, f) = parse_cues(
        r#"[sim tool_calls=[{"name":"a","arguments":{"p":"]"}},{"name":"b","arguments":"{\"q\":1}"},{"name":"c"}] tool_steps=3]"#,
    )
    .unwrap()
    .unwrap();
    let want = vec![
        ToolCallSpec {
            name: "a".into(),
            arguments: r#"{"p":"]"}"#.into(),
        },
        ToolCallSpec {
            name: "b".into(),
            arguments: r#"{"q":1}"#.into(),
        },
        ToolCallSpec {
            name: "c".into(),
            arguments: "{}".into(),
        },
    ];
    assert_eq!(f.tool_calls.as_ref(), Some(&want));
    assert_eq!(f.calls(), want);
    assert_eq!(f.tool_steps, Some(3));
    let arr = json!([{"name": "a", "arguments": {"p": "]"}},
                     {"type": "function", "function": {"name": "b", "arguments": "{\"q\":1}"}},
                     {"name": "c"}]);
    let f1 = Fault::from_json(&json!({"tool_calls": arr})).unwrap();
    let f2 = Fault::from_json(&json!({"tool_calls": arr.to_string()})).unwrap();
    assert_eq!(f1.tool_calls.as_ref(), Some(&want));
    assert_eq!(f1, f2);
    // What GET /sim/faults shows can be queued again.
    let f = Fault::from_json(&json!({"tool_calls": want.clone()})).unwrap();
    assert_eq!(f.calls(), want);
    let (_, f) = parse_cues(r#"[sim tool_call=x args={"k":2}]"#)
        .unwrap()
        .unwrap();
    assert_eq!(
        f.calls(),
        vec![ToolCallSpec {
            name: "x".into(),
            arguments: r#"{"k":2}"#.into()
        }]
    );
    for bad in [
        "[sim tool_calls=[]]",
        "[sim tool_calls={}]",
        "[sim tool_calls=[{\"arguments\":{}}]]",
        "[sim tool_calls=[{\"name\":\"a\",\"arguments\":3}]]",
        "[sim tool_call=a tool_calls=[{\"name\":\"b\"}]]",
        "[sim tool_steps=-1]",
    ] {
        assert!(parse_cues(bad).is_err(), "{bad}");
    }
}

#[test]
fn prompt_token_counting() {
    let m = |v: Value| v.as_array().unwrap().clone();
    assert_eq!(sim::count_prompt_tokens(&[], None), 1);
    // 8 chars, one message.
    let one = m(json!([{"role": "user", "content": "abcdefgh"}]));
    assert_eq!(sim::count_prompt_tokens(&one, None), 2 + 4 + 1);
    // Content parts count their text; a null tools is no tools.
    let parts = m(json!([{"role": "user", "content": [
        {"type": "text", "text": "abcd"}, {"type": "image_url", "image_url": {"url": "x"}},
        {"type": "text", "text": "efgh"}]}]));
    assert_eq!(sim::count_prompt_tokens(&parts, Some(&Value::Null)), 7);
    // Tool calls (name + arguments) and tool_call_id; tools by their JSON.
    let msgs = m(json!([
        {"role": "user", "content": "abcd"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_x", "type": "function",
             "function": {"name": "ls", "arguments": "{\"d\":1}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]));
    let tools = json!([{"type": "function", "function": {"name": "ls"}}]);
    let tools_chars = tools.to_string().len();
    assert_eq!(
        sim::count_prompt_tokens(&msgs, Some(&tools)),
        ((4 + 2 + 7 + 2 + 2) / 4 + 3 * 4 + tools_chars / 4 + 1) as u64
    );
}

#[test]
fn continuation_counting() {
    assert_eq!(continuation_start(""), 0);
    assert_eq!(continuation_start("w0 w1 w2 "), 3);
    assert_eq!(continuation_start("w0 w1 w2"), 3);
    assert_eq!(continuation_start("w0:17 w1:18 "), 2);
    assert_eq!(continuation_start("w0 w2 "), 1);
    assert_eq!(continuation_start("some other text"), 0);
}

/// One tool call put back together from a stream, as a client does.
#[derive(Debug, Default, PartialEq)]
struct Call {
    id: String,
    name: String,
    arguments: String,
}

/// The tool calls of a streamed answer, by index; checks vLLM's framing:
/// a call's first chunk carries id, type and name, later ones only pieces.
fn streamed_calls(s: &Streamed) -> Vec<Call> {
    let mut calls: Vec<Call> = Vec::new();
    for chunk in &s.chunks {
        let Some(parts) = chunk
            .pointer("/choices/0/delta/tool_calls")
            .and_then(Value::as_array)
        else {
            continue;
        };
        for part in parts {
            let index = part["index"].as_u64().expect("an index") as usize;
            if index == calls.len() {
                // The first chunk of a call.
                assert!(part["id"].is_string(), "{part}");
                assert_eq!(part["type"], "function", "{part}");
                assert!(part["function"]["name"].is_string(), "{part}");
                calls.push(Call {
                    id: part["id"].as_str().unwrap().into(),
                    name: part["function"]["name"].as_str().unwrap().into(),
                    arguments: String::new(),
                });
            } else {
                assert!(index + 1 == calls.len(), "index {index} out of order");
                assert!(part.get("id").is_none(), "the id once: {part}");
                assert!(part["function"].get("name").is_none(), "{part}");
            }
            if let Some(a) = part["function"]["arguments"].as_str() {
                calls[index].arguments.push_str(a);
            }
        }
    }
    calls
}

/// The assistant message and tool results a client appends after `calls`.
fn append_tool_step(messages: &mut Vec<Value>, calls: &[Call]) {
    let tool_calls: Vec<Value> = calls
        .iter()
        .map(|c| {
            json!({"id": c.id, "type": "function",
                   "function": {"name": c.name, "arguments": c.arguments}})
        })
        .collect();
    messages.push(json!({"role": "assistant", "content": null, "tool_calls": tool_calls}));
    for c in calls {
        messages.push(json!({"role": "tool", "tool_call_id": c.id,
                             "content": format!("result of {}", c.name)}));
    }
}

async fn ask(c: &reqwest::Client, sim: &SimProc, messages: &[Value]) -> Streamed {
    ask_body(c, sim, chat_body(json!(messages))).await
}

/// `ask` with a tool offered.
async fn ask_tools(c: &reqwest::Client, sim: &SimProc, messages: &[Value]) -> Streamed {
    ask_body(c, sim, with_tools(chat_body(json!(messages)))).await
}

async fn ask_body(c: &reqwest::Client, sim: &SimProc, body: Value) -> Streamed {
    let resp = post_chat(c, sim, &body).await;
    assert_eq!(resp.status(), 200);
    let s = read_stream(resp).await;
    assert!(s.done, "{s:?}");
    s
}

#[tokio::test]
async fn two_tool_calls_in_one_answer() {
    let sim = SimProc::start(&[]);
    let c = client();
    let cue = r#"look [sim tool_calls=[{"name":"read_file","arguments":{"path":"a.txt"}},{"name":"list_dir","arguments":"{\"dir\":\".\"}"}]]"#;
    let s = ask_tools(&c, &sim, user(cue).as_array().unwrap()).await;
    assert_eq!(s.finish_reason(), Some("tool_calls"));
    assert_eq!(s.content(), "");
    let calls = streamed_calls(&s);
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0].name, "read_file");
    assert_eq!(
        serde_json::from_str::<Value>(&calls[0].arguments).unwrap(),
        json!({"path": "a.txt"})
    );
    assert_eq!(calls[1].name, "list_dir");
    assert_eq!(calls[1].arguments, r#"{"dir":"."}"#);
    assert!(calls.iter().all(|c| c.id.starts_with("call_")));
    assert_ne!(calls[0].id, calls[1].id);
    // Each call's arguments come in 2+ pieces after its header.
    let pieces = |i: u64| {
        s.chunks
            .iter()
            .filter_map(|c| c.pointer("/choices/0/delta/tool_calls/0"))
            .filter(|p| p["index"] == i && p.get("id").is_none())
            .count()
    };
    assert!(pieces(0) >= 2 && pieces(1) >= 2);

    // Not streamed: message.tool_calls.
    let body = with_tools(json!({"messages": user(cue)}));
    let v: Value = post_chat(&c, &sim, &body).await.json().await.unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    let message = &v["choices"][0]["message"];
    assert!(message["content"].is_null());
    let calls = message["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0]["type"], "function");
    assert_eq!(calls[0]["function"]["name"], "read_file");
    assert_eq!(calls[0]["function"]["arguments"], r#"{"path":"a.txt"}"#);
    assert_eq!(calls[1]["function"]["name"], "list_dir");
    assert_ne!(calls[0]["id"], calls[1]["id"]);

    // max_tokens too small for the calls: "length", no calls.
    let mut body = with_tools(chat_body(user(cue)));
    body["max_tokens"] = json!(1);
    let s = read_stream(post_chat(&c, &sim, &body).await).await;
    assert_eq!(s.finish_reason(), Some("length"));
    assert!(streamed_calls(&s).is_empty());
}

#[tokio::test]
async fn tool_steps_then_text() {
    let sim = SimProc::start(&[]);
    let c = client();
    // One call per step, two steps: tool, tool, text.
    let cue = r#"go [sim tool_call=read_file args={"path":"a.txt"} tool_steps=2]"#;
    let mut messages = user(cue).as_array().unwrap().clone();
    for step in 0..2 {
        let s = ask_tools(&c, &sim, &messages).await;
        assert_eq!(s.finish_reason(), Some("tool_calls"), "step {step}");
        let calls = streamed_calls(&s);
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].name, "read_file");
        assert_eq!(calls[0].arguments, r#"{"path":"a.txt"}"#);
        append_tool_step(&mut messages, &calls);
    }
    let s = ask_tools(&c, &sim, &messages).await;
    assert_eq!(s.finish_reason(), Some("stop"));
    assert!(streamed_calls(&s).is_empty());
    assert_eq!(s.content(), words(0..24));

    // Two calls per step, one step: the step needs both results.
    let cue = r#"[sim tool_calls=[{"name":"a"},{"name":"b"}] tool_steps=1 tokens=3]"#;
    let mut messages = user(cue).as_array().unwrap().clone();
    let calls = streamed_calls(&ask_tools(&c, &sim, &messages).await);
    assert_eq!(calls.len(), 2);
    append_tool_step(&mut messages, &calls[..1]);
    let s = ask_tools(&c, &sim, &messages).await;
    assert_eq!(s.finish_reason(), Some("tool_calls"), "one result of two");
    append_tool_step(&mut messages, &streamed_calls(&s)[1..]);
    let s = ask_tools(&c, &sim, &messages).await;
    assert_eq!(s.finish_reason(), Some("stop"));
    assert_eq!(s.content(), words(0..3));
    // A new user message starts counting again.
    messages.push(json!({"role": "assistant", "content": s.content()}));
    messages.push(json!({"role": "user", "content": cue}));
    let s = ask_tools(&c, &sim, &messages).await;
    assert_eq!(s.finish_reason(), Some("tool_calls"));

    // Without tool_steps the model never stops calling.
    let mut messages = user("[sim tool_call=ls]").as_array().unwrap().clone();
    for _ in 0..5 {
        let s = ask_tools(&c, &sim, &messages).await;
        assert_eq!(s.finish_reason(), Some("tool_calls"));
        append_tool_step(&mut messages, &streamed_calls(&s));
    }

    // A script queued over /sim/faults: one fault per request.
    let r = c
        .post(sim.url("/sim/faults"))
        .json(&json!({"next": [
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]},
            {"tool_calls": "[{\"name\":\"grep\",\"arguments\":\"{}\"},{\"name\":\"ls\"}]"},
            {"tokens": 2},
        ]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.json::<Value>().await.unwrap()["queued"], 3);
    let mut messages = user("plain question").as_array().unwrap().clone();
    let mut names = Vec::new();
    for _ in 0..2 {
        let s = ask_tools(&c, &sim, &messages).await;
        assert_eq!(s.finish_reason(), Some("tool_calls"));
        let calls = streamed_calls(&s);
        names.push(calls.iter().map(|c| c.name.clone()).collect::<Vec<_>>());
        append_tool_step(&mut messages, &calls);
    }
    assert_eq!(names, [vec!["read_file"], vec!["grep", "ls"]]);
    let s = ask_tools(&c, &sim, &messages).await;
    assert_eq!(s.finish_reason(), Some("stop"));
    assert_eq!(s.content(), words(0..2));
}

#[tokio::test]
async fn tokenize_counts_as_chat_does() {
    let sim = SimProc::start(&["--context-window", "8192"]);
    let c = client();
    let tools = json!([{"type": "function", "function": {
        "name": "read_file", "description": "Reads a file of the workspace",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                       "required": ["path"]}}}]);
    let messages = json!([
        {"role": "system", "content": "You are a helpful agent. Use tools."},
        {"role": "user", "content": [{"type": "text", "text": "read a.txt "},
                                     {"type": "text", "text": "[sim tokens=3]"}]},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "read_file", "arguments": "{\"path\":\"a.txt\"}"}},
            {"id": "call_2", "type": "function",
             "function": {"name": "read_file", "arguments": "{\"path\":\"b.txt\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "héllo wörld ".repeat(20)},
        {"role": "tool", "tool_call_id": "call_2", "content": "second file"},
    ]);
    let mut body = chat_body(messages.clone());
    body["tools"] = tools.clone();
    let s = read_stream(post_chat(&c, &sim, &body).await).await;
    assert!(s.done);
    assert_eq!(s.content(), words(0..3));
    let prompt = s.usage_chunk().unwrap()["usage"]["prompt_tokens"]
        .as_u64()
        .unwrap();

    let tok = |body: Value, path: &'static str| {
        let c = c.clone();
        let url = sim.url(path);
        async move {
            let r = c.post(url).json(&body).send().await.unwrap();
            assert_eq!(r.status(), 200);
            r.json::<Value>().await.unwrap()
        }
    };
    let v = tok(
        json!({"model": "sim-small", "messages": messages, "tools": tools}),
        "/v1/tokenize",
    )
    .await;
    assert_eq!(v["count"], prompt, "{v}");
    assert_eq!(v["max_model_len"], 8192);
    let tokens = v["tokens"].as_array().unwrap();
    assert_eq!(tokens.len() as u64, prompt);
    assert!(tokens.iter().enumerate().all(|(i, t)| t == i));
    // The formula, by hand.
    let chars = "You are a helpful agent. Use tools.".len()
        + "read a.txt [sim tokens=3]".len()
        + 2 * ("read_file".len() + "{\"path\":\"a.txt\"}".len())
        + "call_1".len()
        + "héllo wörld ".chars().count() * 20
        + "call_2".len()
        + "second file".len();
    let tools_chars = tools.to_string().chars().count();
    assert_eq!(prompt, (chars / 4 + 5 * 4 + tools_chars / 4 + 1) as u64);
    // Without tools they count less, still the same on both sides.
    let v = tok(json!({"messages": messages}), "/tokenize").await;
    let body = json!({"messages": messages});
    let whole: Value = post_chat(&c, &sim, &body).await.json().await.unwrap();
    assert_eq!(v["count"], whole["usage"]["prompt_tokens"]);
    assert!(v["count"].as_u64().unwrap() < prompt);
    // The request log records the same count.
    let log: Value = c
        .get(sim.url("/sim/requests"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(log[0]["prompt_tokens"], prompt);
    assert_eq!(log[1]["prompt_tokens"], v["count"]);

    // A plain prompt: characters / 4 + 1.
    let v = tok(json!({"prompt": "abcdefghij"}), "/v1/tokenize").await;
    assert_eq!(v["count"], 3);
    assert_eq!(v["tokens"], json!([0, 1, 2]));
    // Bad bodies are 400s.
    for bad in [json!({}), json!({"messages": []}), json!({"prompt": 3})] {
        let r = c.post(sim.url("/v1/tokenize")).json(&bad).send().await;
        assert_eq!(r.unwrap().status(), 400, "{bad}");
    }
    assert_eq!(stats(&c, &sim).await["tokenize_requests"], 6);
}

#[tokio::test]
async fn no_tokenize_is_404() {
    let sim = SimProc::start(&["--no-tokenize"]);
    let c = client();
    for path in ["/v1/tokenize", "/tokenize"] {
        let r = c
            .post(sim.url(path))
            .json(&json!({"messages": user("hi")}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{path}");
    }
    let s = ask_tools(&c, &sim, user("hi [sim tokens=2]").as_array().unwrap()).await;
    assert_eq!(s.content(), words(0..2));
}

#[tokio::test]
async fn memory_limit_refuses_big_prompts() {
    let sim = SimProc::start(&["--memory-limit-tokens", "50"]);
    let c = client();
    // 180 / 4 + 4 + 1 = 50: at the limit, answered.
    let at = json!([{"role": "user", "content": format!("{}[sim tokens=2]", "x".repeat(166))}]);
    let s = ask(&c, &sim, at.as_array().unwrap()).await;
    assert_eq!(s.usage_chunk().unwrap()["usage"]["prompt_tokens"], 50);
    assert_eq!(s.content(), words(0..2));
    // 51 tokens: 503 with Retry-After, every time.
    let over = json!([{"role": "user", "content": "x".repeat(184)}]);
    for _ in 0..3 {
        let r = post_chat(&c, &sim, &chat_body(over.clone())).await;
        assert_eq!(r.status(), 503);
        assert_eq!(r.headers()["retry-after"].to_str().unwrap(), "1");
        let e: Value = r.json().await.unwrap();
        assert_eq!(e["error"]["code"], 503);
        assert_eq!(e["error"]["type"], "unavailable_error");
        let msg = e["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains("could not allocate memory for 51 tokens"),
            "{msg}"
        );
    }
    assert_eq!(stats(&c, &sim).await["statuses"]["503"], 3);
    // Tokenize still answers for it.
    let v: Value = c
        .post(sim.url("/v1/tokenize"))
        .json(&json!({"messages": over}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["count"], 51);
}

#[tokio::test]
async fn a_literal_text_answer_streams_in_pieces() {
    let sim = SimProc::start(&[]);
    let c = client();
    // Markup, quotes, a fence and non-ASCII characters come back exactly.
    let text = "Look <img src=x onerror=\"x()\"> and `a`\n```\n<b>x</b>\n```\n€漢😀!";
    let r = c
        .post(sim.url("/sim/faults"))
        .json(&json!({"next": [{"text": text}, {"text": text, "tokens": 3}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let s = read_stream(post_chat(&c, &sim, &chat_body(user("anything"))).await).await;
    assert!(s.done);
    assert_eq!(s.content(), text);
    assert_eq!(s.content_chunks(), sim::text_pieces(text).len());
    assert_eq!(
        s.content_chunks(),
        text.chars().count().div_ceil(sim::TEXT_PIECE_CHARS)
    );
    assert_eq!(s.finish_reason(), Some("stop"));
    let completion = &s.usage_chunk().unwrap()["usage"]["completion_tokens"];
    assert_eq!(completion, s.content_chunks());

    // tokens=N keeps the first N pieces.
    let s = read_stream(post_chat(&c, &sim, &chat_body(user("anything"))).await).await;
    let first: String = sim::text_pieces(text)[..3].concat();
    assert_eq!(s.content(), first);

    // A cue takes a quoted JSON string; a prefill of whole pieces continues.
    let prefill = sim::text_pieces("hello, world")[..2].concat();
    let messages = json!([
        {"role": "user", "content": "go [sim text=\"hello, world\"]"},
        {"role": "assistant", "content": prefill},
    ]);
    let s = read_stream(post_chat(&c, &sim, &chat_body(messages)).await).await;
    assert!(s.done);
    assert_eq!(format!("{prefill}{}", s.content()), "hello, world");

    // Not streamed: the whole text in message.content.
    let r = c
        .post(sim.url("/v1/chat/completions"))
        .json(&json!({"model": "sim-small", "messages": user("x [sim text=\"a<b>c\"]")}))
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "a<b>c");
}

#[test]
fn literal_text_pieces_and_continuation() {
    assert_eq!(sim::text_pieces(""), Vec::<String>::new());
    assert_eq!(sim::text_pieces("abcdefghij"), ["abcd", "efgh", "ij"]);
    assert_eq!(sim::text_pieces("€€€€€"), ["€€€€", "€"]);
    let pieces = sim::text_pieces("abcdefghij");
    assert_eq!(sim::text_continuation_start(&pieces, ""), 0);
    assert_eq!(sim::text_continuation_start(&pieces, "abcd"), 1);
    assert_eq!(sim::text_continuation_start(&pieces, "abcdefghij"), 3);
    // Mid-piece: that piece again, whole.
    assert_eq!(sim::text_continuation_start(&pieces, "abcdef"), 1);
    // Not the start of the text: from the start.
    assert_eq!(sim::text_continuation_start(&pieces, "zz"), 0);
    let f = Fault::from_json(&json!({"text": "<script>x</script> [sim tokens=1]"})).unwrap();
    assert_eq!(f.text.as_deref(), Some("<script>x</script> [sim tokens=1]"));
    let (_, f) = parse_cues(r#"go [sim text="two words" tps=0]"#)
        .unwrap()
        .unwrap();
    assert_eq!(f.text.as_deref(), Some("two words"));
}

#[tokio::test]
async fn a_request_that_offers_no_tools_gets_text() {
    let sim = SimProc::start(&[]);
    let c = client();
    let cue = r#"weather? [sim tool_call=get_weather args={"city":"Paris"} tokens=3]"#;
    let s = read_stream(post_chat(&c, &sim, &chat_body(user(cue))).await).await;
    assert!(s.done);
    assert_eq!(s.finish_reason(), Some("stop"));
    assert!(streamed_calls(&s).is_empty());
    assert_eq!(s.content(), words(0..3));
    let mut empty = chat_body(user(cue));
    empty["tools"] = json!([]);
    let s = read_stream(post_chat(&c, &sim, &empty).await).await;
    assert_eq!(s.finish_reason(), Some("stop"));
}

/// Faults queued for one session (`{"session","next"}`) go to the chat
/// requests of that `x-session-id` only, before the global queue's; the
/// global queue still serves any session. Two chats on one sim and chatd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_queued_for_a_session_go_to_its_requests_only() -> anyhow::Result<()> {
    use tandem_tests::harness::{run_id, Chatd, Client, Sim};
    const QUICK: Duration = Duration::from_secs(30);
    /// Sends `text` to `chat`; the run's record once it has ended.
    async fn turn(client: &Client, chat: &str, text: &str) -> anyhow::Result<Value> {
        let run = run_id(&client.send(chat, text).await?)?;
        client
            .wait_run(chat, &run, &["done", "failed", "stopped", "paused"], QUICK)
            .await
    }
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start(&sim.url(), &[]).await?;
    let http = client();
    let api = chatd.client();
    let a = api.create_chat().await?;
    let b = api.create_chat().await?;
    let (session_a, session_b) = (format!("chat-{a}"), format!("chat-{b}"));
    let missing = json!({"status": 404, "message": "The model `gone` does not exist."});
    let faults_of = |session: &str| format!("/sim/faults?session={session}");

    // Queued for A: B's turn does not take it, A's does.
    let queued = sim
        .post(
            "/sim/faults",
            json!({"session": session_a, "next": [missing]}),
        )
        .await?;
    assert_eq!(queued, json!({"session": session_a, "queued": 1}));
    assert_eq!(
        sim.get(&faults_of(&session_a)).await?,
        json!({"session": session_a, "next": [missing]})
    );
    assert_eq!(sim.get("/sim/faults").await?, json!({"next": []}));
    assert_eq!(sim.get("/sim/stats").await?["queued_faults"], 1);
    let record = turn(&api, &b, "hello from b").await?;
    assert_eq!(record["status"], "done", "{record}");
    assert_eq!(
        sim.get(&faults_of(&session_a)).await?["next"],
        json!([missing])
    );
    let record = turn(&api, &a, "hello from a").await?;
    assert_eq!(record["status"], "failed", "{record}");
    assert_eq!(record["failure"]["cause"], "model_not_found", "{record}");
    assert_eq!(sim.get(&faults_of(&session_a)).await?["next"], json!([]));
    let sessions: Vec<Value> = sim
        .requests()
        .await?
        .iter()
        .map(|r| r["session_id"].clone())
        .filter(|s| *s == json!(session_a) || *s == json!(session_b))
        .collect();
    assert_eq!(sessions, [json!(session_b), json!(session_a)]);

    // The global queue serves either session.
    for chat in [&b, &a] {
        sim.faults(json!([missing])).await?;
        let record = turn(&api, chat, "global").await?;
        assert_eq!(record["failure"]["cause"], "model_not_found", "{record}");
    }

    // A's own queue comes first; the global fault waits for the next request.
    sim.faults(json!([missing])).await?;
    sim.post("/sim/faults", json!({"session": session_a, "next": [{}]}))
        .await?;
    let record = turn(&api, &a, "own first").await?;
    assert_eq!(record["status"], "done", "{record}");
    assert_eq!(sim.get("/sim/faults").await?, json!({"next": [missing]}));
    let record = turn(&api, &b, "then global").await?;
    assert_eq!(record["failure"]["cause"], "model_not_found", "{record}");

    // DELETE /sim/faults and /sim/reset clear the sessions' queues too.
    for clear in ["delete", "reset"] {
        sim.faults(json!([missing])).await?;
        sim.post(
            "/sim/faults",
            json!({"session": session_b, "next": [missing, {}]}),
        )
        .await?;
        assert_eq!(sim.get("/sim/stats").await?["queued_faults"], 3);
        let cleared = match clear {
            "delete" => http.delete(format!("{}/sim/faults", sim.url())),
            _ => http.post(format!("{}/sim/reset", sim.url())),
        }
        .send()
        .await?;
        assert_eq!(cleared.status(), 200, "{clear}");
        assert_eq!(sim.get(&faults_of(&session_b)).await?["next"], json!([]));
        assert_eq!(sim.get("/sim/faults").await?, json!({"next": []}));
        assert_eq!(sim.get("/sim/stats").await?["queued_faults"], 0);
    }
    let record = turn(&api, &b, "cleared").await?;
    assert_eq!(record["status"], "done", "{record}");

    // A bad session is a 400 naming the field.
    for bad in [json!(7), json!(""), json!("x".repeat(201)), Value::Null] {
        let r = http
            .post(format!("{}/sim/faults", sim.url()))
            .json(&json!({"session": bad, "next": [{}]}))
            .send()
            .await?;
        assert_eq!(r.status(), 400, "{bad}");
        let e: Value = r.json().await?;
        let message = e["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("session"), "{message}");
    }
    let r = http
        .get(format!("{}/sim/faults?session=", sim.url()))
        .send()
        .await?;
    assert_eq!(r.status(), 400);
    // 200 characters is fine.
    let longest = "x".repeat(200);
    let queued = sim
        .post("/sim/faults", json!({"session": longest, "next": [{}]}))
        .await?;
    assert_eq!(queued["queued"], 1);
    Ok(())
}
