//! `engine-sim`: an OpenAI-compatible inference engine simulator.
//!
//! It stands in for the box's real engine (llama.cpp `llama-server`, vLLM)
//! in tests, benchmarks and in `tandem up` when no engine answers. It speaks
//! the same wire format, including the failures a real engine shows:
//! refused connections, streams cut mid-answer, 503/429 with `Retry-After`,
//! 400 over the context window, junk lines in the event stream.
//!
//! Answers are deterministic: token `i` of an answer is `w{i} `, so a whole
//! answer of N tokens is `w0 w1 ... w{N-1} ` and a test can check that
//! nothing was lost or repeated. A request whose last message is a
//! non-empty `assistant` message (a resume by prefill) continues at the first
//! missing index.
//!
//! Behaviour is steered per request by cues (`[sim key=value ...]`) in the
//! last user message, or by faults queued over `POST /sim/faults`; see
//! [`CUE_HELP`].

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use serde::Serialize;
use serde_json::{json, Map, Value};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};

/// The cue and fault syntax, for `--help` and the README.
pub const CUE_HELP: &str = "\
CUES
  Put `[sim key=value key=value ...]` anywhere in the text of the LAST user
  message. Several cue blocks are merged. Values have no spaces (or are
  \"quoted\"); unknown keys or bad values get a 400 naming the problem.

  tokens=N          answer length in tokens (default --tokens; 0 with tool calls)
  tps=F             pace in tokens per second (0 = as fast as possible)
  first_token_ms=M  delay before the first token
  reasoning=N       N tokens `r{i} ` in delta.reasoning_content before the content
  tool_call=NAME    finish with one tool call (finish_reason \"tool_calls\")
  args=JSON         its arguments, JSON without spaces (default {})
  tool_calls=JSON   finish with several tool calls, a JSON array without spaces:
                    [{\"name\":\"read_file\",\"arguments\":{\"path\":\"a.txt\"}},...]
                    (arguments an object or a string, default {}; the OpenAI
                    shape {\"function\":{\"name\":..,\"arguments\":..}} is taken too).
                    Streamed like vLLM: each call has its own `index`; its first
                    chunk carries id, type and function.name (arguments \"\"),
                    then 2+ chunks of argument pieces. Not streamed:
                    message.tool_calls. Use tool_call or tool_calls, not both
                    A request that offers no `tools` gets text instead, as from a
                    real engine (the tool cues are ignored for it).
  tool_steps=N      with tool_call/tool_calls: call the tool(s) only while the
                    `tool` messages after the last user message are fewer than
                    N x (calls per answer), then answer with text (tokens=N or
                    --tokens). Without it every request calls the tool(s): a
                    model that never stops
  plain_ids=1       tool call ids are `call_0`, `call_1`, … in every answer, as
                    engines that number calls per answer send them
  stamp=1           tokens are `w{i}:{unix micros at send} `
  text=STRING       answer exactly this text instead of `w{i} ` tokens (any
                    string: best queued as JSON, {\"next\":[{\"text\":\"..\"}]};
                    in a cue, \"quoted\" as a JSON string). Streamed in pieces of
                    4 characters; tokens, tps, cut_after and max_tokens count
                    pieces, stamp does not apply. A prefill that is the start of
                    the text continues at the first piece it does not hold whole
  garbage=1         junk SSE lines between the real chunks
  cut_after=K       drop the connection after K content tokens of this request,
                    only while the answer continues from an index < K (a resumed
                    answer that already has K tokens is not cut again);
                    cut_after=0 drops right after the response headers
  status=CODE       answer CODE (4xx/5xx) with an OpenAI error body
  retry_after=S     with status: a `Retry-After: S` header
  message=TEXT      with status: the error message
  refuse_s=F        drop this request and refuse connections for F seconds
                    (an engine restart)
  fail_times=K      the failing keys (status, cut_after, refuse_s) apply to the
                    first K requests carrying the same cue text only; default:
                    always for status and cut_after, once for refuse_s
  id=ANY            ignored; makes a cue text (and its fail_times count) unique

  Token i of an answer is `w{i} `. A request whose last message is a non-empty
  assistant message continues the answer at the first index missing from it.
  Cues are read from the last message with role `user`, so the assistant
  tool_calls and `tool` results after it keep its cue.

PROMPT TOKENS
  prompt_tokens = C/4 + 4 x (number of messages) + T/4 + 1  (each / rounded down)
    C = characters of every message's content (a string, or the `text` of its
        content parts) + of each assistant message's tool_calls[].function.name
        and tool_calls[].function.arguments + of each message's tool_call_id
    T = characters of the compact JSON of the request's `tools` (0 if absent)
  POST /v1/tokenize counts exactly the same. More than --context-window gives
  llama.cpp's 400 {\"error\":{\"type\":\"exceed_context_size_error\",
  \"n_prompt_tokens\":N,\"n_ctx\":W,..}}. More than --memory-limit-tokens M gives,
  every time, a 503 with `Retry-After: 1` and {\"error\":{\"code\":503,
  \"type\":\"unavailable_error\",\"message\":\"engine-sim: could not allocate
  memory for N tokens (the KV cache holds M), retry later\"}} (a full KV cache).

ENGINE ROUTES
  GET  /health, GET /v1/models, POST /v1/chat/completions
  POST /v1/tokenize  (also /tokenize; vLLM's shape)
         {\"model\":..,\"messages\":[..],\"tools\":[..]} -> the chat request's count
         {\"prompt\":\"text\"}                          -> characters/4 + 1
         answer {\"count\":N,\"max_model_len\":W,\"tokens\":[0,1,..,N-1]};
         404 with --no-tokenize (like llama.cpp without it)

CONTROL ROUTES
  POST   /sim/faults   {\"next\":[{\"status\":503,\"retry_after\":1},{\"cut_after\":5},{}]}
                       queue faults (same keys as cues) for the next chat requests,
                       one each, in order, whatever their answer (a 400 over the
                       window or a 503 by memory takes one too); {} is a normal
                       answer; cues still apply beside it. A multi-step
                       tool run is scripted with one fault per request:
                       {\"next\":[{\"tool_calls\":[{\"name\":\"read_file\",
                         \"arguments\":{\"path\":\"a.txt\"}}]},{\"tool_calls\":[..]},{}]}
                       (tool_calls: a JSON array or a string holding one)
  GET    /sim/faults   the queue;  DELETE /sim/faults clears it
  POST   /sim/refuse   {\"seconds\":F} close the listening socket (new connections
                       are refused; open ones are cut), re-bind after F seconds
  GET    /sim/requests chat requests received (last 1000):
                       [{\"session_id\":<x-session-id or null>,\"body\":{..},
                         \"prompt_tokens\":<counted, null if no messages array>,
                         \"at\":\"RFC 3339\",\"at_us\":<unix micros when the whole
                         request had arrived>,\"done_us\":<unix micros when the last
                         byte of the answer was handed to the connection, null while
                         none (yet)>,\"body_bytes\":<size of the request body>,
                         \"n\":<the request's number since the sim started>}]
  DELETE /sim/requests clear that list
  GET    /sim/stats    {\"requests\",\"completed\",\"tokens_sent\",\"cuts\",\"refusals\",
                        \"statuses\",\"queued_faults\",\"tokenize_requests\"}
  POST   /sim/reset    clear queue, request list, fail_times counters and stats
";

/// How the simulated engine is set up.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The model id served at `/v1/models` and named in answers.
    pub model: String,
    /// Context window in tokens.
    pub context_window: u64,
    /// Pace of the answer; 0 means as fast as possible.
    pub tokens_per_second: f64,
    /// Default answer length in tokens.
    pub tokens: usize,
    /// Prompts over this many tokens get a 503 (simulated full KV cache).
    pub memory_limit_tokens: Option<u64>,
    /// Serve `POST /v1/tokenize` (and `/tokenize`); off, they are 404.
    pub tokenize: bool,
    /// `/v1/models` says the model reads images (`capabilities: ["vision"]`).
    pub vision: bool,
    /// The box's memory as the engine frees it: `POST /v1/cache/release`
    /// adds what it frees (at most what `/sim/cache` says it can) to
    /// MemAvailable in this /proc/meminfo-shaped file.
    pub meminfo: Option<std::path::PathBuf>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            model: "sim-small".into(),
            context_window: 32768,
            tokens_per_second: 50.0,
            tokens: 24,
            memory_limit_tokens: None,
            tokenize: true,
            vision: false,
            meminfo: None,
        }
    }
}

/// One fault, from a cue or from the `/sim/faults` queue. Every key is
/// optional; a later source overrides an earlier one key by key.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fault {
    pub tokens: Option<usize>,
    pub tps: Option<f64>,
    pub first_token_ms: Option<u64>,
    pub reasoning: Option<usize>,
    pub tool_call: Option<String>,
    pub args: Option<String>,
    pub tool_calls: Option<Vec<ToolCallSpec>>,
    pub tool_steps: Option<u64>,
    pub plain_ids: Option<bool>,
    pub stamp: Option<bool>,
    /// A literal answer (in pieces of [`TEXT_PIECE_CHARS`]) instead of `w{i} ` tokens.
    pub text: Option<String>,
    pub garbage: Option<bool>,
    pub cut_after: Option<usize>,
    pub status: Option<u16>,
    pub retry_after: Option<String>,
    pub message: Option<String>,
    pub refuse_s: Option<f64>,
    pub fail_times: Option<u64>,
}

/// One tool call an answer makes: `{"name": .., "arguments": "<JSON text>"}`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolCallSpec {
    pub name: String,
    pub arguments: String,
}

const KNOWN_KEYS: &str = "tokens tps first_token_ms reasoning tool_call args tool_calls \
                          tool_steps plain_ids stamp text garbage cut_after status retry_after message \
                          refuse_s fail_times id";

/// Parses `tool_calls`: a JSON array of `{"name", "arguments"?}` (or OpenAI's
/// `{"function": {"name", "arguments"}}`); arguments an object or a string.
pub fn parse_tool_calls(text: &str) -> Result<Vec<ToolCallSpec>, String> {
    let v: Value = serde_json::from_str(text)
        .map_err(|e| format!("tool_calls={text}: not JSON ({e}); spaces end a cue value"))?;
    let calls = v
        .as_array()
        .filter(|a| !a.is_empty())
        .ok_or_else(|| format!("tool_calls={text}: must be a non-empty JSON array"))?;
    calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let f = c.get("function").filter(|f| f.is_object()).unwrap_or(c);
            let name = f
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .ok_or_else(|| format!("tool_calls[{i}]: needs a non-empty \"name\": {c}"))?;
            let arguments = match f.get("arguments") {
                None | Some(Value::Null) => "{}".to_string(),
                Some(Value::String(s)) => s.clone(),
                Some(o @ Value::Object(_)) => o.to_string(),
                Some(other) => {
                    return Err(format!(
                        "tool_calls[{i}]: arguments must be an object or a string, got {other}"
                    ))
                }
            };
            Ok(ToolCallSpec {
                name: name.to_string(),
                arguments,
            })
        })
        .collect()
}

impl Fault {
    /// Sets one key from its text value.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        fn num<T: std::str::FromStr>(key: &str, v: &str) -> Result<T, String> {
            v.parse()
                .map_err(|_| format!("{key}={v}: not a whole number"))
        }
        fn float(key: &str, v: &str) -> Result<f64, String> {
            match v.parse::<f64>() {
                Ok(f) if f.is_finite() && f >= 0.0 => Ok(f),
                _ => Err(format!("{key}={v}: not a number >= 0")),
            }
        }
        fn flag(key: &str, v: &str) -> Result<bool, String> {
            match v {
                "1" | "true" | "yes" | "on" => Ok(true),
                "0" | "false" | "no" | "off" => Ok(false),
                _ => Err(format!("{key}={v}: not 1/0/true/false")),
            }
        }
        fn upto<T: std::str::FromStr + PartialOrd + std::fmt::Display>(
            key: &str,
            v: &str,
            max: T,
        ) -> Result<T, String> {
            let n: T = num(key, v)?;
            if n > max {
                return Err(format!("{key}={v}: at most {max}"));
            }
            Ok(n)
        }
        const MAX_TOKENS: usize = 1_000_000;
        match key {
            "tokens" => self.tokens = Some(upto(key, value, MAX_TOKENS)?),
            "tps" => self.tps = Some(float(key, value)?),
            "first_token_ms" => self.first_token_ms = Some(upto(key, value, 86_400_000)?),
            "reasoning" => self.reasoning = Some(upto(key, value, MAX_TOKENS)?),
            "tool_call" => {
                if value.is_empty() {
                    return Err("tool_call needs a name".into());
                }
                if self.tool_calls.is_some() {
                    return Err("use tool_call (with args) or tool_calls, not both".into());
                }
                self.tool_call = Some(value.to_string())
            }
            "args" => self.args = Some(value.to_string()),
            "tool_calls" => {
                if self.tool_call.is_some() {
                    return Err("use tool_call (with args) or tool_calls, not both".into());
                }
                self.tool_calls = Some(parse_tool_calls(value)?)
            }
            "tool_steps" => self.tool_steps = Some(upto(key, value, 1_000_000)?),
            "plain_ids" => self.plain_ids = Some(flag(key, value)?),
            "stamp" => self.stamp = Some(flag(key, value)?),
            "text" => self.text = Some(value.to_string()),
            "garbage" => self.garbage = Some(flag(key, value)?),
            "cut_after" => self.cut_after = Some(num(key, value)?),
            "status" => {
                let s: u16 = num(key, value)?;
                if !(400..=599).contains(&s) {
                    return Err(format!("status={s}: must be 400..=599"));
                }
                self.status = Some(s)
            }
            "retry_after" => {
                if value.is_empty() || HeaderValue::from_str(value).is_err() {
                    return Err(format!("retry_after={value}: not a header value"));
                }
                self.retry_after = Some(value.to_string())
            }
            "message" => self.message = Some(value.to_string()),
            "refuse_s" => {
                let f = float(key, value)?;
                if f > 86400.0 {
                    return Err(format!("{key}={value}: at most 86400"));
                }
                self.refuse_s = Some(f)
            }
            "fail_times" => self.fail_times = Some(num(key, value)?),
            "id" => {}
            _ => return Err(format!("unknown key `{key}` (known: {KNOWN_KEYS})")),
        }
        Ok(())
    }

    /// A fault from a JSON object with the cue keys (`{"status":503}`).
    pub fn from_json(v: &Value) -> Result<Fault, String> {
        let obj = v
            .as_object()
            .ok_or_else(|| format!("a fault must be an object, got {v}"))?;
        let mut f = Fault::default();
        for (k, v) in obj {
            let text = match v {
                Value::Null => continue,
                Value::String(s) => s.clone(),
                Value::Bool(b) => b.to_string(),
                other => other.to_string(),
            };
            f.set(k, &text)?;
        }
        Ok(f)
    }

    /// `other`'s keys override ours; its tool_call or tool_calls replaces
    /// whichever of the two we had.
    fn merge(&mut self, other: &Fault) {
        if other.tool_calls.is_some() {
            self.tool_call = None;
            self.args = None;
        }
        if other.tool_call.is_some() {
            self.tool_calls = None;
        }
        macro_rules! take {
            ($($field:ident),*) => { $( if other.$field.is_some() { self.$field = other.$field.clone(); } )* };
        }
        take!(
            tokens,
            tps,
            first_token_ms,
            reasoning,
            tool_call,
            args,
            tool_calls,
            tool_steps,
            plain_ids,
            stamp,
            text,
            garbage,
            cut_after,
            status,
            retry_after,
            message,
            refuse_s,
            fail_times
        );
    }

    fn to_json(&self) -> Value {
        let mut m = Map::new();
        macro_rules! put {
            ($($field:ident),*) => { $( if let Some(v) = &self.$field { m.insert(stringify!($field).into(), json!(v)); } )* };
        }
        put!(
            tokens,
            tps,
            first_token_ms,
            reasoning,
            tool_call,
            args,
            tool_calls,
            tool_steps,
            plain_ids,
            stamp,
            text,
            garbage,
            cut_after,
            status,
            retry_after,
            message,
            refuse_s,
            fail_times
        );
        Value::Object(m)
    }

    /// The tool calls an answer makes (before `tool_steps` is applied).
    pub fn calls(&self) -> Vec<ToolCallSpec> {
        if let Some(calls) = &self.tool_calls {
            return calls.clone();
        }
        self.tool_call
            .iter()
            .map(|name| ToolCallSpec {
                name: name.clone(),
                arguments: self.args.clone().unwrap_or_else(|| "{}".into()),
            })
            .collect()
    }
}

/// Finds every `[sim ...]` cue in `text`. Returns the cue texts joined (the
/// key of the fail_times counter) and the merged fault, or `None` if the
/// text has no cue.
pub fn parse_cues(text: &str) -> Result<Option<(String, Fault)>, String> {
    let mut fault = Fault::default();
    let mut texts: Vec<&str> = Vec::new();
    let mut from = 0;
    while let Some(rel) = text[from..].find("[sim") {
        let start = from + rel;
        let body_at = start + 4;
        let rest = &text[body_at..];
        if !(rest.starts_with(char::is_whitespace) || rest.starts_with(']')) {
            from = body_at;
            continue;
        }
        let used = parse_pairs(rest, &mut fault)?;
        texts.push(&text[start..body_at + used]);
        from = body_at + used;
    }
    if texts.is_empty() {
        return Ok(None);
    }
    Ok(Some((texts.join(" "), fault)))
}

/// Parses `key=value ...]`; returns the bytes used, through the `]`.
fn parse_pairs(s: &str, fault: &mut Fault) -> Result<usize, String> {
    let mut it = s.char_indices().peekable();
    loop {
        while it.peek().is_some_and(|(_, c)| c.is_whitespace()) {
            it.next();
        }
        let Some(&(i, c)) = it.peek() else {
            return Err("unclosed [sim ...] cue".into());
        };
        if c == ']' {
            return Ok(i + 1);
        }
        let key_start = i;
        let mut key_end = s.len();
        while let Some(&(j, c)) = it.peek() {
            if c.is_whitespace() || c == '=' || c == ']' {
                key_end = j;
                break;
            }
            it.next();
        }
        let key = &s[key_start..key_end];
        if it.peek().map(|&(_, c)| c) != Some('=') {
            return Err(format!("cue `{key}` needs a value (key=value)"));
        }
        it.next();
        let value_start = it.peek().map_or(s.len(), |&(j, _)| j);
        let mut value_end = s.len();
        let (mut depth, mut in_str, mut esc) = (0usize, false, false);
        while let Some(&(j, c)) = it.peek() {
            if in_str {
                if esc {
                    esc = false;
                } else if c == '\\' {
                    esc = true;
                } else if c == '"' {
                    in_str = false;
                }
            } else {
                match c {
                    '"' => in_str = true,
                    '{' | '[' => depth += 1,
                    '}' | ']' if depth > 0 => depth -= 1,
                    ']' => {
                        value_end = j;
                        break;
                    }
                    c if c.is_whitespace() && depth == 0 => {
                        value_end = j;
                        break;
                    }
                    _ => {}
                }
            }
            it.next();
        }
        let raw = &s[value_start..value_end];
        // A "quoted" value is a JSON string literal.
        let value = if raw.len() >= 2 && raw.starts_with('"') && raw.ends_with('"') {
            serde_json::from_str::<String>(raw).unwrap_or_else(|_| raw[1..raw.len() - 1].into())
        } else {
            raw.to_string()
        };
        fault.set(key, &value)?;
    }
}

/// The text of a message's `content`: a string, or the text parts of an array.
fn content_text(msg: &Value) -> String {
    match msg.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// Characters of a message's `content` (as [`content_text`] joins it).
fn content_chars(msg: &Value) -> usize {
    match msg.get("content") {
        Some(Value::String(s)) => s.chars().count(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .map(|t| t.chars().count())
            .sum(),
        _ => 0,
    }
}

/// Characters of a string, or of the compact JSON of anything else but null.
fn value_chars(v: Option<&Value>) -> usize {
    match v {
        None | Some(Value::Null) => 0,
        Some(Value::String(s)) => s.chars().count(),
        Some(other) => other.to_string().chars().count(),
    }
}

fn role(msg: &Value) -> Option<&str> {
    msg.get("role").and_then(Value::as_str)
}

/// The prompt tokens of a chat request (and of `/v1/tokenize` on the same
/// messages and tools): C/4 + 4 per message + T/4 + 1, where C counts the
/// characters of every content, of each assistant tool call's function name
/// and arguments and of each `tool_call_id`, and T those of the JSON of
/// `tools`.
pub fn count_prompt_tokens(messages: &[Value], tools: Option<&Value>) -> u64 {
    let mut chars = 0usize;
    for m in messages {
        chars += content_chars(m);
        if role(m) == Some("assistant") {
            if let Some(calls) = m.get("tool_calls").and_then(Value::as_array) {
                for call in calls {
                    let f = call.get("function");
                    chars += value_chars(f.and_then(|f| f.get("name")));
                    chars += value_chars(f.and_then(|f| f.get("arguments")));
                }
            }
        }
        chars += value_chars(m.get("tool_call_id"));
    }
    let tools_chars = tools
        .filter(|t| !t.is_null())
        .map_or(0, |t| t.to_string().chars().count());
    (chars / 4 + 4 * messages.len() + tools_chars / 4 + 1) as u64
}

/// Characters per streamed piece of a literal `text` answer.
pub const TEXT_PIECE_CHARS: usize = 4;

/// A literal answer cut into the pieces it is streamed in.
pub fn text_pieces(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars
        .chunks(TEXT_PIECE_CHARS)
        .map(|c| c.iter().collect())
        .collect()
}

/// The first piece of a literal answer missing from a prefill: the pieces
/// the prefill holds whole when it is the start of the text, else 0.
pub fn text_continuation_start(pieces: &[String], prefill: &str) -> usize {
    let mut have = 0;
    let mut rest = prefill;
    for piece in pieces {
        match rest.strip_prefix(piece.as_str()) {
            Some(r) => {
                rest = r;
                have += 1;
            }
            None => break,
        }
    }
    if rest.is_empty() || pieces.len() == have {
        have
    } else if pieces[have].starts_with(rest) {
        // The prefill ends inside a piece: that piece comes again whole.
        have
    } else {
        0
    }
}

/// The first answer index missing from a prefilled answer (`w<k> ` or
/// `w<k>:<stamp> ` tokens).
pub fn continuation_start(prefill: &str) -> usize {
    let have: HashSet<usize> = prefill
        .split_whitespace()
        .filter_map(|w| {
            let digits = w.strip_prefix('w')?;
            let digits = digits.split_once(':').map_or(digits, |(d, _)| d);
            digits.parse().ok()
        })
        .collect();
    (0..).find(|k| !have.contains(k)).unwrap_or(0)
}

#[derive(Default)]
struct Stats {
    requests: u64,
    completed: u64,
    tokens_sent: u64,
    cuts: u64,
    refusals: u64,
    statuses: BTreeMap<u16, u64>,
    tokenizes: u64,
}

#[derive(Default)]
struct Inner {
    queue: VecDeque<Fault>,
    counters: HashMap<String, u64>,
    log: VecDeque<Value>,
    stats: Stats,
    /// Bytes the cache can still give back (`/sim/cache`).
    can_free: u64,
    /// Every `/v1/cache/release` asked: (bytes asked, bytes freed).
    releases: Vec<(u64, u64)>,
}

enum Cmd {
    Refuse {
        seconds: f64,
        ack: oneshot::Sender<()>,
    },
}

struct Sim {
    config: SimConfig,
    inner: Mutex<Inner>,
    cmd: mpsc::UnboundedSender<Cmd>,
    /// Bumped when open connections and streams must be cut (refuse, shutdown).
    cut: watch::Receiver<u64>,
    seq: AtomicU64,
    /// Numbers the chat requests (`n` in the request log); never reset.
    received: AtomicU64,
}

impl Sim {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn count_status(&self, status: u16) {
        *self.lock().stats.statuses.entry(status).or_default() += 1;
    }

    /// Closes the listener (acknowledged once it is closed).
    async fn refuse(&self, seconds: f64) {
        let (ack, done) = oneshot::channel();
        if self.cmd.send(Cmd::Refuse { seconds, ack }).is_ok() {
            let _ = done.await;
        }
    }
}

const REQUEST_LOG_MAX: usize = 1000;
const GRACE: Duration = Duration::from_millis(300);

/// A simulator served in this process (for tests that want no child process).
/// Dropping it stops it.
pub struct SimServer {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl SimServer {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops serving and waits for the accept loop to end.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => task.await.context("engine-sim task")?,
            None => Ok(()),
        }
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Binds `listen` (port 0 allowed) and serves in a background task.
pub async fn start(listen: &str, config: SimConfig) -> anyhow::Result<SimServer> {
    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("bind {listen}"))?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve_with_shutdown(listener, config, async move {
        let _ = stopped.await;
    }));
    Ok(SimServer {
        addr,
        stop: Some(stop),
        task: Some(task),
    })
}

/// Serves until the process ends.
pub async fn serve(listener: TcpListener, config: SimConfig) -> anyhow::Result<()> {
    serve_with_shutdown(listener, config, std::future::pending()).await
}

/// Serves until `shutdown` completes; then open connections are cut.
pub async fn serve_with_shutdown(
    listener: TcpListener,
    config: SimConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let addr = listener.local_addr().context("listener address")?;
    let (cmd_tx, mut cmd_rx) = mpsc::unbounded_channel();
    let (cut_tx, cut_rx) = watch::channel(0u64);
    let sim = Arc::new(Sim {
        config,
        inner: Mutex::new(Inner::default()),
        cmd: cmd_tx,
        cut: cut_rx,
        seq: AtomicU64::new(1),
        received: AtomicU64::new(0),
    });
    let app = router(sim.clone());

    let mut listener = Some(listener);
    let mut rebind_at: Option<tokio::time::Instant> = None;
    let mut bind_warned = false;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            Some(cmd) = cmd_rx.recv() => match cmd {
                Cmd::Refuse { seconds, ack } => {
                    listener = None;
                    cut_tx.send_modify(|e| *e += 1);
                    let until = tokio::time::Instant::now()
                        + Duration::try_from_secs_f64(seconds.min(86400.0)).unwrap_or_default();
                    rebind_at = Some(rebind_at.map_or(until, |r| r.max(until)));
                    sim.lock().stats.refusals += 1;
                    let _ = ack.send(());
                }
            },
            accepted = accept(listener.as_ref()) => match accepted {
                Ok((stream, _)) => {
                    tokio::spawn(serve_connection(stream, app.clone(), cut_tx.subscribe()));
                }
                Err(e) => {
                    // Out of file descriptors and the like: wait, go on.
                    eprintln!("engine-sim: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
            _ = sleep_until(rebind_at), if listener.is_none() => {
                match TcpListener::bind(addr).await {
                    Ok(l) => {
                        listener = Some(l);
                        rebind_at = None;
                        bind_warned = false;
                    }
                    Err(e) => {
                        if !bind_warned {
                            eprintln!("engine-sim: re-bind {addr}: {e}; retrying");
                            bind_warned = true;
                        }
                        rebind_at = Some(tokio::time::Instant::now() + Duration::from_millis(50));
                    }
                }
            }
        }
    }
    drop(listener);
    cut_tx.send_modify(|e| *e += 1);
    Ok(())
}

async fn accept(listener: Option<&TcpListener>) -> std::io::Result<(TcpStream, SocketAddr)> {
    match listener {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn serve_connection(stream: TcpStream, app: Router, mut cut: watch::Receiver<u64>) {
    let _ = stream.set_nodelay(true);
    let conn = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        _ = cut.changed() => {}
    }
    // An engine restart: let a response being written finish briefly, then
    // close whatever is left (idle keep-alive connections included).
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(GRACE, conn).await;
}

fn router(sim: Arc<Sim>) -> Router {
    let mut app = Router::new();
    if sim.config.tokenize {
        app = app
            .route("/v1/tokenize", post(tokenize))
            .route("/tokenize", post(tokenize));
    }
    app.route("/health", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat))
        .route(
            "/sim/faults",
            post(faults_push).get(faults_get).delete(faults_clear),
        )
        .route("/v1/cache/release", post(cache_release))
        .route("/sim/cache", post(cache_set).get(cache_get))
        .route("/sim/refuse", post(refuse))
        .route("/sim/requests", get(requests_get).delete(requests_clear))
        .route("/sim/stats", get(stats))
        .route("/sim/reset", post(reset))
        .fallback(|| async {
            error_response(404, "engine-sim: no such route", "not_found_error", None)
        })
        .layer(DefaultBodyLimit::max(256 * 1024 * 1024))
        .with_state(sim)
}

fn error_type(status: u16) -> &'static str {
    match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        501 => "not_supported_error",
        503 => "unavailable_error",
        _ => "server_error",
    }
}

fn error_response(status: u16, message: &str, typ: &str, retry_after: Option<&str>) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = json!({"error": {"code": status, "message": message, "type": typ}});
    let mut resp = (code, Json(body)).into_response();
    if let Some(v) = retry_after.and_then(|v| HeaderValue::from_str(v).ok()) {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

fn bad_request(sim: &Sim, message: &str) -> Response {
    sim.count_status(400);
    error_response(400, message, "invalid_request_error", None)
}

async fn models(State(sim): State<Arc<Sim>>) -> Json<Value> {
    let c = &sim.config;
    let mut capabilities = vec!["completion", "tools"];
    if c.vision {
        capabilities.push("vision");
    }
    Json(json!({
        "object": "list",
        "data": [{
            "id": c.model,
            "object": "model",
            "created": unix_secs(),
            "owned_by": "engine-sim",
            "max_model_len": c.context_window,
            "meta": {"n_ctx_train": c.context_window},
            "capabilities": capabilities,
        }]
    }))
}

fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn unix_micros() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

async fn faults_push(State(sim): State<Arc<Sim>>, body: Bytes) -> Response {
    let v: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return bad_request(&sim, &format!("malformed JSON: {e}")),
    };
    let Some(next) = v.get("next").and_then(Value::as_array) else {
        return bad_request(&sim, "body must be {\"next\":[{...fault...}]}");
    };
    let mut faults = Vec::with_capacity(next.len());
    for f in next {
        match Fault::from_json(f) {
            Ok(f) => faults.push(f),
            Err(e) => return bad_request(&sim, &format!("bad fault: {e}")),
        }
    }
    let mut inner = sim.lock();
    inner.queue.extend(faults);
    Json(json!({"queued": inner.queue.len()})).into_response()
}

async fn faults_get(State(sim): State<Arc<Sim>>) -> Json<Value> {
    let inner = sim.lock();
    Json(json!({"next": inner.queue.iter().map(Fault::to_json).collect::<Vec<_>>()}))
}

async fn faults_clear(State(sim): State<Arc<Sim>>) -> Json<Value> {
    sim.lock().queue.clear();
    Json(json!({"queued": 0}))
}

async fn refuse(State(sim): State<Arc<Sim>>, body: Bytes) -> Response {
    let v: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return bad_request(&sim, &format!("malformed JSON: {e}")),
    };
    let seconds = match v.get("seconds").and_then(Value::as_f64) {
        Some(s) if s.is_finite() && (0.0..=86400.0).contains(&s) => s,
        _ => return bad_request(&sim, "body must be {\"seconds\": F} with 0 <= F <= 86400"),
    };
    sim.refuse(seconds).await;
    Json(json!({"refusing_for_s": seconds})).into_response()
}

/// `POST /v1/cache/release {"bytes"}`: frees what the cache can, up to the
/// bytes asked, and says how much.
async fn cache_release(State(sim): State<Arc<Sim>>, body: Bytes) -> Response {
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let Some(asked) = v.get("bytes").and_then(Value::as_u64) else {
        return bad_request(&sim, "body must be {\"bytes\": N}");
    };
    let freed = {
        let mut inner = sim.lock();
        let freed = asked.min(inner.can_free);
        inner.can_free -= freed;
        inner.releases.push((asked, freed));
        freed
    };
    if let (Some(path), true) = (&sim.config.meminfo, freed > 0) {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let now = text
            .lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0);
        write_meminfo(path, now + freed / 1024);
    }
    Json(json!({"released": freed})).into_response()
}

/// Writes a /proc/meminfo-shaped file saying `available_kb` is available.
pub fn write_meminfo(path: &std::path::Path, available_kb: u64) {
    let text = format!(
        "MemTotal:       25165824 kB\nMemFree:        {available_kb} kB\nMemAvailable:   {available_kb} kB\n"
    );
    // Written whole then renamed, so a reader never sees half a file.
    let tmp = path.with_extension("tmp");
    if std::fs::write(&tmp, text).is_ok() {
        let _ = std::fs::rename(&tmp, path);
    }
}

/// `POST /sim/cache {"can_free"}`: what the next releases may free.
async fn cache_set(State(sim): State<Arc<Sim>>, body: Bytes) -> Response {
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let Some(can_free) = v.get("can_free").and_then(Value::as_u64) else {
        return bad_request(&sim, "body must be {\"can_free\": N}");
    };
    sim.lock().can_free = can_free;
    Json(json!({"can_free": can_free})).into_response()
}

/// `GET /sim/cache`: `{can_free, releases: [{asked, freed}]}`.
async fn cache_get(State(sim): State<Arc<Sim>>) -> Json<Value> {
    let inner = sim.lock();
    let releases: Vec<Value> = inner
        .releases
        .iter()
        .map(|(asked, freed)| json!({"asked": asked, "freed": freed}))
        .collect();
    Json(json!({"can_free": inner.can_free, "releases": releases}))
}

async fn requests_get(State(sim): State<Arc<Sim>>) -> Json<Value> {
    Json(Value::Array(sim.lock().log.iter().cloned().collect()))
}

async fn requests_clear(State(sim): State<Arc<Sim>>) -> Json<Value> {
    sim.lock().log.clear();
    Json(json!({"cleared": true}))
}

async fn stats(State(sim): State<Arc<Sim>>) -> Json<Value> {
    let inner = sim.lock();
    let s = &inner.stats;
    let statuses: Map<String, Value> = s
        .statuses
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    Json(json!({
        "requests": s.requests,
        "completed": s.completed,
        "tokens_sent": s.tokens_sent,
        "cuts": s.cuts,
        "refusals": s.refusals,
        "statuses": statuses,
        "queued_faults": inner.queue.len(),
        "tokenize_requests": s.tokenizes,
    }))
}

async fn reset(State(sim): State<Arc<Sim>>) -> Json<Value> {
    *sim.lock() = Inner::default();
    Json(json!({"reset": true}))
}

/// What a request fails with, if anything.
#[derive(Clone, Copy, Debug)]
enum Failure {
    Refuse(f64),
    Status(u16),
    Cut(usize),
}

fn failure_of(f: &Fault, start: usize) -> Option<Failure> {
    if let Some(s) = f.refuse_s {
        Some(Failure::Refuse(s))
    } else if let Some(s) = f.status {
        Some(Failure::Status(s))
    } else {
        match f.cut_after {
            Some(k) if k == 0 || start < k => Some(Failure::Cut(k)),
            _ => None,
        }
    }
}

/// A chunk (or, with `object: "chat.completion"`, a whole answer) in the
/// field order OpenAI and llama.cpp use.
#[derive(Serialize)]
struct ChunkOut<'a, C = Vec<ChoiceOut>> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    system_fingerprint: &'static str,
    choices: C,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timings: Option<Value>,
}

#[derive(Serialize)]
struct ChoiceOut {
    index: u32,
    delta: DeltaOut,
    finish_reason: Option<&'static str>,
}

#[derive(Serialize, Default)]
struct DeltaOut {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Value>,
}

struct PlannedCall {
    id: String,
    name: String,
    arguments: String,
}

/// Everything needed to produce one answer.
struct Plan {
    id: String,
    created: u64,
    model: String,
    /// Content token indices `start..start + content`.
    start: usize,
    content: usize,
    reasoning: usize,
    /// Tool calls that end the answer (finish_reason "tool_calls").
    tools: Vec<PlannedCall>,
    finish: &'static str,
    interval: Option<Duration>,
    first_token: Duration,
    cut_after: Option<usize>,
    garbage: bool,
    stamp: bool,
    /// A literal answer's pieces: token `i` is piece `i`.
    pieces: Option<Vec<String>>,
    include_usage: bool,
    prompt_tokens: u64,
}

impl Plan {
    fn completion_tokens(&self) -> usize {
        self.reasoning + self.content
    }

    fn token(&self, i: usize) -> String {
        if let Some(pieces) = &self.pieces {
            pieces.get(i).cloned().unwrap_or_default()
        } else if self.stamp {
            format!("w{i}:{} ", unix_micros())
        } else {
            format!("w{i} ")
        }
    }

    fn usage(&self, completion: usize) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens + completion as u64,
        })
    }

    fn timings(&self, completion: usize, generating: Duration) -> Value {
        let prompt_ms = self.first_token.as_secs_f64() * 1000.0;
        let predicted_ms = generating.as_secs_f64() * 1000.0;
        let per_second = |n: f64, ms: f64| if ms > 0.0 { n * 1000.0 / ms } else { 0.0 };
        let per_token = |n: f64, ms: f64| if n > 0.0 { ms / n } else { 0.0 };
        let (pn, cn) = (self.prompt_tokens as f64, completion as f64);
        json!({
            "cache_n": 0,
            "prompt_n": self.prompt_tokens,
            "prompt_ms": prompt_ms,
            "prompt_per_token_ms": per_token(pn, prompt_ms),
            "prompt_per_second": per_second(pn, prompt_ms),
            "predicted_n": completion,
            "predicted_ms": predicted_ms,
            "predicted_per_token_ms": per_token(cn, predicted_ms),
            "predicted_per_second": per_second(cn, predicted_ms),
        })
    }

    fn chunk(&self, choices: Vec<ChoiceOut>) -> ChunkOut<'_> {
        ChunkOut {
            id: &self.id,
            object: "chat.completion.chunk",
            created: self.created,
            model: &self.model,
            system_fingerprint: "engine-sim",
            choices,
            usage: None,
            timings: None,
        }
    }

    fn delta(&self, delta: DeltaOut, finish_reason: Option<&'static str>) -> ChunkOut<'_> {
        self.chunk(vec![ChoiceOut {
            index: 0,
            delta,
            finish_reason,
        }])
    }

    /// The tool call's arguments in 2+ pieces.
    fn arg_pieces(args: &str) -> Vec<String> {
        let chars: Vec<char> = args.chars().collect();
        if chars.len() < 2 {
            return vec![args.to_string(), String::new()];
        }
        let n = chars.len().min(4);
        let size = chars.len().div_ceil(n);
        chars.chunks(size).map(|c| c.iter().collect()).collect()
    }
}

/// The request's `messages` checked as a chat request checks them.
fn checked_messages(req: &Value) -> Result<&[Value], String> {
    let messages = match req.get("messages").and_then(Value::as_array) {
        Some(m) if !m.is_empty() => m,
        Some(_) => return Err("'messages' must not be empty".into()),
        None => return Err("'messages' is required and must be an array".into()),
    };
    if let Some(bad) = messages.iter().find(|m| role(m).is_none()) {
        return Err(format!("each message needs a 'role': {bad}"));
    }
    Ok(messages)
}

/// `POST /v1/tokenize`, vLLM's shape: `{"messages", "tools"?}` or
/// `{"prompt"}` -> `{"count", "max_model_len", "tokens"}`.
async fn tokenize(State(sim): State<Arc<Sim>>, body: Bytes) -> Response {
    sim.lock().stats.tokenizes += 1;
    let req = match serde_json::from_slice::<Value>(&body) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => return bad_request(&sim, "the request body must be a JSON object"),
        Err(e) => return bad_request(&sim, &format!("malformed JSON: {e}")),
    };
    let count = if req.get("messages").is_some() {
        match checked_messages(&req) {
            Ok(messages) => count_prompt_tokens(messages, req.get("tools")),
            Err(e) => return bad_request(&sim, &e),
        }
    } else if let Some(prompt) = req.get("prompt") {
        match prompt.as_str() {
            Some(p) => (p.chars().count() / 4 + 1) as u64,
            None => return bad_request(&sim, "'prompt' must be a string"),
        }
    } else {
        return bad_request(&sim, "the body needs 'messages' (chat) or 'prompt' (text)");
    };
    Json(json!({
        "count": count,
        "max_model_len": sim.config.context_window,
        "tokens": (0..count).collect::<Vec<u64>>(),
    }))
    .into_response()
}

/// `POST /v1/chat/completions`: the answer, its body wrapped so that the
/// request log gets `done_us` when its last byte goes out.
async fn chat(State(sim): State<Arc<Sim>>, headers: HeaderMap, body: Bytes) -> Response {
    let at_us = unix_micros() as u64;
    let n = sim.received.fetch_add(1, Ordering::Relaxed);
    let response = chat_answer(sim.clone(), headers, body, n, at_us).await;
    let (parts, body) = response.into_parts();
    Response::from_parts(
        parts,
        Body::new(Stamped {
            inner: body,
            sim,
            n,
            stamped: false,
        }),
    )
}

/// A response body that notes in the request log when its end went out
/// (its last frame handed to the connection, or its error).
struct Stamped {
    inner: Body,
    sim: Arc<Sim>,
    n: u64,
    stamped: bool,
}

impl Stamped {
    fn stamp(&mut self) {
        if std::mem::replace(&mut self.stamped, true) {
            return;
        }
        let done = unix_micros() as u64;
        let mut inner = self.sim.lock();
        if let Some(entry) = inner
            .log
            .iter_mut()
            .rev()
            .find(|e| e.get("n").and_then(Value::as_u64) == Some(self.n))
        {
            entry["done_us"] = json!(done);
        }
    }
}

impl hyper::body::Body for Stamped {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, axum::Error>>> {
        use std::task::Poll;
        let this = self.get_mut();
        let polled = hyper::body::Body::poll_frame(std::pin::Pin::new(&mut this.inner), cx);
        match &polled {
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => this.stamp(),
            // A body that knows it has ended is not polled again.
            Poll::Ready(Some(Ok(_))) if hyper::body::Body::is_end_stream(&this.inner) => {
                this.stamp()
            }
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        hyper::body::Body::is_end_stream(&self.inner)
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::Body::size_hint(&self.inner)
    }
}

async fn chat_answer(
    sim: Arc<Sim>,
    headers: HeaderMap,
    body: Bytes,
    n: u64,
    at_us: u64,
) -> Response {
    sim.lock().stats.requests += 1;
    let session_id = headers
        .get("x-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let parsed = serde_json::from_slice::<Value>(&body);
    let counted = parsed.as_ref().ok().and_then(|req| {
        let messages = req.get("messages")?.as_array()?;
        Some(count_prompt_tokens(messages, req.get("tools")))
    });
    {
        let logged = match &parsed {
            Ok(v) => v.clone(),
            Err(_) => Value::String(String::from_utf8_lossy(&body).into_owned()),
        };
        let mut inner = sim.lock();
        if inner.log.len() >= REQUEST_LOG_MAX {
            inner.log.pop_front();
        }
        inner.log.push_back(json!({
            "session_id": session_id,
            "body": logged,
            "prompt_tokens": counted,
            "at": jiff::Timestamp::now().to_string(),
            "at_us": at_us,
            "done_us": null,
            "body_bytes": body.len(),
            "n": n,
        }));
    }
    let req = match parsed {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => return bad_request(&sim, "the request body must be a JSON object"),
        Err(e) => return bad_request(&sim, &format!("malformed JSON: {e}")),
    };
    let messages = match checked_messages(&req) {
        Ok(m) => m,
        Err(e) => return bad_request(&sim, &e),
    };
    let stream = req.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let include_usage = req
        .pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let max_tokens = req
        .get("max_completion_tokens")
        .or_else(|| req.get("max_tokens"))
        .and_then(Value::as_u64)
        .map(|n| n as usize);

    let prompt_tokens = count_prompt_tokens(messages, req.get("tools"));

    // Continuation by prefill.
    let last = &messages[messages.len() - 1];
    let prefill = (last.get("role").and_then(Value::as_str) == Some("assistant"))
        .then(|| content_text(last))
        .filter(|t| !t.is_empty());

    // Cues in the last user message (not the last message: tool calls and
    // their results may follow it), then the queued fault.
    let last_user = messages.iter().rposition(|m| role(m) == Some("user"));
    let user_text = last_user
        .map(|i| content_text(&messages[i]))
        .unwrap_or_default();
    let tool_results = messages[last_user.map_or(0, |i| i + 1)..]
        .iter()
        .filter(|m| role(m) == Some("tool"))
        .count();
    let cue = match parse_cues(&user_text) {
        Ok(c) => c,
        Err(e) => return bad_request(&sim, &format!("engine-sim: bad cue: {e}")),
    };
    let (failure, fault, pieces, start) = {
        let mut inner = sim.lock();
        let queued = inner.queue.pop_front();
        let mut fault = Fault::default();
        let mut failure = None;
        if let Some((_, cf)) = &cue {
            fault.merge(cf);
        }
        if let Some(q) = &queued {
            fault.merge(q);
        }
        // A literal answer is counted in its pieces, `w{i} ` ones in tokens.
        let pieces = fault.text.as_deref().map(text_pieces);
        let start = match (&pieces, prefill.as_deref()) {
            (_, None) => 0,
            (Some(pieces), Some(p)) => text_continuation_start(pieces, p),
            (None, Some(p)) => continuation_start(p),
        };
        if let Some(q) = &queued {
            failure = failure_of(q, start);
        }
        if failure.is_none() {
            if let Some((key, cf)) = &cue {
                if let Some(f) = failure_of(cf, start) {
                    let limit = cf
                        .fail_times
                        .or(matches!(f, Failure::Refuse(_)).then_some(1));
                    let count = inner.counters.entry(key.clone()).or_insert(0);
                    if limit.is_none_or(|l| *count < l) {
                        *count += 1;
                        failure = Some(f);
                    }
                }
            }
        }
        (failure, fault, pieces, start)
    };

    match failure {
        Some(Failure::Refuse(seconds)) => {
            sim.refuse(seconds).await;
            // The engine went away mid-request: no answer; the connection is
            // closed under us.
            return std::future::pending().await;
        }
        Some(Failure::Status(status)) => {
            sim.count_status(status);
            let typ = error_type(status);
            let message = fault.message.clone().unwrap_or_else(|| match status {
                503 => {
                    "engine-sim: the engine is busy (simulated out of memory), retry later".into()
                }
                429 => "engine-sim: too many requests (simulated), retry later".into(),
                _ => format!("engine-sim: simulated error {status}"),
            });
            return error_response(status, &message, typ, fault.retry_after.as_deref());
        }
        _ => {}
    }
    let cut_after = match failure {
        Some(Failure::Cut(k)) => Some(k),
        _ => None,
    };

    if prompt_tokens > sim.config.context_window {
        sim.count_status(400);
        let body = json!({"error": {
            "code": 400,
            "message": "the request exceeds the available context size, try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": prompt_tokens,
            "n_ctx": sim.config.context_window,
        }});
        return (StatusCode::BAD_REQUEST, Json(body)).into_response();
    }
    if let Some(limit) = sim
        .config
        .memory_limit_tokens
        .filter(|&l| prompt_tokens > l)
    {
        sim.count_status(503);
        let message = format!(
            "engine-sim: could not allocate memory for {prompt_tokens} tokens \
             (the KV cache holds {limit}), retry later"
        );
        return error_response(503, &message, error_type(503), Some("1"));
    }

    let mut calls = fault.calls();
    // Like a real engine: a request that offers no tools gets text.
    if req
        .get("tools")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        calls.clear();
    }
    if let Some(steps) = fault.tool_steps {
        let per_step = calls.len().max(1) as u64;
        if tool_results as u64 >= steps.saturating_mul(per_step) {
            calls.clear();
        }
    }
    let default_tokens = if calls.is_empty() {
        sim.config.tokens
    } else {
        0
    };
    let total = match &pieces {
        Some(p) => fault.tokens.map_or(p.len(), |t| t.min(p.len())),
        None => fault.tokens.unwrap_or(default_tokens),
    };
    let mut reasoning = if start == 0 {
        fault.reasoning.unwrap_or(0)
    } else {
        0
    };
    let mut content = total.saturating_sub(start);
    let mut finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    if let Some(max) = max_tokens {
        if reasoning + content + calls.len() > max {
            reasoning = reasoning.min(max);
            content = content.min(max - reasoning);
            finish = "length";
        }
    }
    let tps = fault.tps.unwrap_or(sim.config.tokens_per_second);
    let seq = sim.seq.fetch_add(1, Ordering::Relaxed);
    let plan = Plan {
        id: format!("chatcmpl-sim{seq:06}"),
        created: unix_secs(),
        model: sim.config.model.clone(),
        start,
        content,
        reasoning,
        tools: if finish == "tool_calls" {
            calls
                .into_iter()
                .enumerate()
                .map(|(i, c)| PlannedCall {
                    // Some engines number calls per answer, the same in every answer.
                    id: if fault.plain_ids.unwrap_or(false) {
                        format!("call_{i}")
                    } else {
                        format!("call_sim{seq:06}_{i}")
                    },
                    name: c.name,
                    arguments: c.arguments,
                })
                .collect()
        } else {
            Vec::new()
        },
        finish,
        interval: (tps > 0.0).then(|| {
            Duration::try_from_secs_f64(1.0 / tps)
                .unwrap_or(Duration::MAX)
                .min(Duration::from_secs(3600))
        }),
        first_token: Duration::from_millis(fault.first_token_ms.unwrap_or(0)),
        cut_after,
        garbage: fault.garbage.unwrap_or(false),
        stamp: fault.stamp.unwrap_or(false),
        pieces,
        include_usage,
        prompt_tokens,
    };
    if stream {
        stream_answer(sim, plan)
    } else {
        whole_answer(sim, plan).await
    }
}

/// Why an answer stopped early.
enum Stop {
    /// Cut: by a cue, or by a refuse (engine restart).
    Cut,
    /// The client went away.
    Gone,
}

/// Sends the frames of one streamed answer.
struct Sender {
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    cut: watch::Receiver<u64>,
    junk: Option<Junk>,
}

impl Sender {
    async fn send(&mut self, frame: String) -> Result<(), Stop> {
        tokio::select! {
            r = self.tx.send(Ok(Bytes::from(frame))) => r.map_err(|_| Stop::Gone),
            _ = self.cut.changed() => Err(Stop::Cut),
        }
    }

    async fn chunk(&mut self, v: &impl Serialize) -> Result<(), Stop> {
        let text = serde_json::to_string(v).unwrap_or_default();
        self.send(format!("data: {text}\n\n")).await?;
        if let Some(junk) = &mut self.junk {
            let line = junk.next_line();
            self.send(line).await?;
        }
        Ok(())
    }

    async fn pause(&mut self, d: Duration) -> Result<(), Stop> {
        if d.is_zero() {
            return Ok(());
        }
        tokio::select! {
            _ = tokio::time::sleep(d) => Ok(()),
            _ = self.cut.changed() => Err(Stop::Cut),
            _ = self.tx.closed() => Err(Stop::Gone),
        }
    }

    async fn fail(&mut self) {
        let err = std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "engine-sim cut");
        let _ = self.tx.send(Err(err)).await;
    }
}

/// Junk SSE lines that a robust client must skip.
struct Junk {
    n: u64,
    rng: u64,
}

impl Junk {
    fn next_line(&mut self) -> String {
        self.n += 1;
        match self.n % 4 {
            1 => "data: {not json\n\n".into(),
            2 => ": engine-sim comment\n\n".into(),
            3 => "data: \n\n".into(),
            _ => {
                const ALPHABET: &[char] = &[
                    'a', 'Z', '7', '#', '%', '{', '}', '"', ' ', 'é', 'ß', '€', '漢', '字', '😀',
                    '\u{fffd}', '\t', '\u{7f}', '\u{1}',
                ];
                let mut s = String::from("~");
                for _ in 0..24 {
                    self.rng = self
                        .rng
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    s.push(ALPHABET[(self.rng >> 33) as usize % ALPHABET.len()]);
                }
                s.push_str("\n\n");
                s
            }
        }
    }
}

fn stream_answer(sim: Arc<Sim>, plan: Plan) -> Response {
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    let mut cut = sim.cut.clone();
    cut.mark_unchanged();
    let sender = Sender {
        tx,
        cut,
        junk: plan.garbage.then(|| Junk {
            n: 0,
            rng: unix_micros() as u64,
        }),
    };
    tokio::spawn(async move {
        let mut sender = sender;
        match produce_stream(&sim, &plan, &mut sender).await {
            Ok(()) => sim.lock().stats.completed += 1,
            Err(Stop::Cut) => {
                sim.lock().stats.cuts += 1;
                sender.fail().await;
            }
            Err(Stop::Gone) => {}
        }
    });
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    let mut resp = Response::new(Body::from_stream(body));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

async fn produce_stream(sim: &Sim, plan: &Plan, tx: &mut Sender) -> Result<(), Stop> {
    let count_token = || sim.lock().stats.tokens_sent += 1;
    if plan.cut_after == Some(0) {
        tx.pause(Duration::from_millis(20)).await?;
        return Err(Stop::Cut);
    }
    tx.pause(plan.first_token).await?;
    let began = Instant::now();
    let mut next_at = tokio::time::Instant::now();
    let mut role = true;
    let mut first = true;
    // Waits for the next token's slot (none before the first).
    macro_rules! pace {
        () => {
            if !first {
                if let Some(iv) = plan.interval {
                    next_at += iv;
                    let now = tokio::time::Instant::now();
                    if next_at > now {
                        tx.pause(next_at - now).await?;
                    } else {
                        next_at = now;
                    }
                }
            }
            first = false;
        };
    }
    let with_role = |role: &mut bool, mut d: DeltaOut| {
        if std::mem::take(role) {
            d.role = Some("assistant");
        }
        d
    };
    for i in 0..plan.reasoning {
        pace!();
        let d = DeltaOut {
            reasoning_content: Some(format!("r{i} ")),
            ..Default::default()
        };
        tx.chunk(&plan.delta(with_role(&mut role, d), None)).await?;
        count_token();
    }
    for n in 0..plan.content {
        pace!();
        let d = DeltaOut {
            content: Some(plan.token(plan.start + n)),
            ..Default::default()
        };
        tx.chunk(&plan.delta(with_role(&mut role, d), None)).await?;
        count_token();
        if plan.cut_after == Some(n + 1) {
            // Let the last token reach the client, then drop the stream.
            tx.pause(Duration::from_millis(20)).await?;
            return Err(Stop::Cut);
        }
    }
    // Like vLLM: per call, a first chunk with its index, id, type and name,
    // then its arguments in pieces.
    for (index, call) in plan.tools.iter().enumerate() {
        pace!();
        let d = DeltaOut {
            tool_calls: Some(json!([{"index": index, "id": call.id, "type": "function",
                                     "function": {"name": call.name, "arguments": ""}}])),
            ..Default::default()
        };
        tx.chunk(&plan.delta(with_role(&mut role, d), None)).await?;
        for piece in Plan::arg_pieces(&call.arguments) {
            pace!();
            let d = DeltaOut {
                tool_calls: Some(json!([{"index": index, "function": {"arguments": piece}}])),
                ..Default::default()
            };
            tx.chunk(&plan.delta(d, None)).await?;
        }
    }
    if role {
        // Nothing was generated (a continuation that was already complete).
        let d = DeltaOut {
            content: Some(String::new()),
            ..Default::default()
        };
        tx.chunk(&plan.delta(with_role(&mut role, d), None)).await?;
    }
    let generating = began.elapsed();
    let completion = plan.completion_tokens();
    tx.chunk(&plan.delta(DeltaOut::default(), Some(plan.finish)))
        .await?;
    if plan.include_usage {
        let mut usage = plan.chunk(Vec::new());
        usage.usage = Some(plan.usage(completion));
        usage.timings = Some(plan.timings(completion, generating));
        tx.chunk(&usage).await?;
    }
    tx.send("data: [DONE]\n\n".into()).await?;
    Ok(())
}

async fn whole_answer(sim: Arc<Sim>, plan: Plan) -> Response {
    let mut cut = sim.cut.clone();
    cut.mark_unchanged();
    let per = plan.interval.unwrap_or_default();
    let steps = |n: usize| per.saturating_mul(n.saturating_sub(1).try_into().unwrap_or(u32::MAX));
    let cut_at = plan.cut_after.filter(|&k| k == 0 || k <= plan.content);
    let produced = match cut_at {
        Some(0) => 0,
        Some(k) => plan.reasoning + k,
        None => plan.completion_tokens() + plan.tools.len(),
    };
    let wait = if produced > 0 {
        plan.first_token.saturating_add(steps(produced))
    } else {
        Duration::ZERO
    };
    let began = Instant::now();
    tokio::select! {
        _ = tokio::time::sleep(wait) => {}
        _ = cut.changed() => {
            sim.lock().stats.cuts += 1;
            return truncated_body(b"{\"id\":\"".to_vec(), 1024);
        }
    }
    let generating = began.elapsed().saturating_sub(plan.first_token);
    let reasoning: String = (0..plan.reasoning).map(|i| format!("r{i} ")).collect();
    let content: String = (0..plan.content)
        .map(|n| plan.token(plan.start + n))
        .collect();
    let completion = plan.completion_tokens();
    let mut message = json!({"role": "assistant", "content": content});
    if !reasoning.is_empty() {
        message["reasoning_content"] = json!(reasoning);
    }
    if !plan.tools.is_empty() {
        if content.is_empty() {
            message["content"] = Value::Null;
        }
        let calls: Vec<Value> = plan
            .tools
            .iter()
            .map(|c| {
                json!({"id": c.id, "type": "function",
                       "function": {"name": c.name, "arguments": c.arguments}})
            })
            .collect();
        message["tool_calls"] = Value::Array(calls);
    }
    let body = ChunkOut {
        id: &plan.id,
        object: "chat.completion",
        created: plan.created,
        model: &plan.model,
        system_fingerprint: "engine-sim",
        choices: json!([{"index": 0, "message": message, "finish_reason": plan.finish}]),
        usage: Some(plan.usage(completion)),
        timings: Some(plan.timings(completion, generating)),
    };
    let bytes = serde_json::to_vec(&body).unwrap_or_default();
    {
        let mut inner = sim.lock();
        inner.stats.tokens_sent += produced.min(completion) as u64;
        if cut_at.is_some() {
            inner.stats.cuts += 1;
        } else {
            inner.stats.completed += 1;
        }
    }
    if let Some(k) = cut_at {
        // Send part of the body, then drop the connection.
        let full = bytes.len();
        let part = if k == 0 {
            0
        } else {
            (full * k / (plan.content + 1)).min(full - 1)
        };
        return truncated_body(bytes[..part].to_vec(), full);
    }
    let mut resp = Response::new(Body::from(bytes));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// A response that announces `full` bytes, sends `part`, then fails.
fn truncated_body(part: Vec<u8>, full: usize) -> Response {
    let frames: Vec<Result<Bytes, std::io::Error>> = vec![
        Ok(Bytes::from(part)),
        Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "engine-sim cut",
        )),
    ];
    let body = futures_util::stream::unfold(frames.into_iter(), |mut it| async move {
        let item = it.next()?;
        if item.is_err() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Some((item, it))
    });
    let mut resp = Response::new(Body::from_stream(body));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(full));
    resp
}
