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
//! last user message, or by faults queued over `POST /sim/faults` (for any
//! request, or for one `x-session-id`'s); see [`CUE_HELP`].

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Query, State};
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

mod answer;
mod audio;
mod cues;
mod plan;
mod routes;
mod stream;
mod tokens;
mod vision;

use answer::*;
use audio::*;
pub use cues::*;
use plan::*;
pub use routes::*;
use stream::*;
pub use tokens::*;
use vision::*;

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
         A chat request to --vision-model takes no cue and no queued fault:
         it is answered \"NAME sees a WxH JPEG image. Asked: <question>\",
         each image part of its last user message decoded for its size.
  POST /v1/audio/transcriptions  (OpenAI's multipart: file, model; 404 with
         --no-transcriptions) -> {\"text\"}. A cue inside the audio's bytes:
         [sim transcript=\"TEXT\"] the transcript (default: \"engine-sim heard
         N bytes of audio.\"), [sim status=CODE message=\"TEXT\"] an OpenAI
         error body, [sim hang=1] no answer for 10 minutes
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
                       -> {\"queued\":N} (the global queue's length)
  POST   /sim/faults   {\"session\":\"chat-<id>\",\"next\":[..]}  the same, for the chat
                       requests whose x-session-id is that session only
                       (a string of 1 to 200 characters) -> {\"session\",\"queued\":N}.
                       A request takes its session's next fault first; when
                       its session has none, the global queue's next one
  GET    /sim/faults   the global queue {\"next\":[..]};
                       ?session=S: that session's {\"session\":S,\"next\":[..]}
  DELETE /sim/faults   clears every queue, the sessions' too
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
  GET    /sim/transcriptions  transcription requests received (last 1000):
                       [{\"model\",\"file_name\",\"content_type\",\"file_bytes\",
                         \"fields\",\"at_us\",\"n\"}];  DELETE clears them
  GET    /sim/stats    {\"requests\",\"completed\",\"tokens_sent\",\"cuts\",\"refusals\",
                        \"statuses\",\"queued_faults\",\"tokenize_requests\"}
                       (queued_faults: in all queues, the sessions' included)
  POST   /sim/reset    clear the fault queues (global and sessions'), request
                       list, fail_times counters and stats
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
    /// More model ids `/v1/models` lists after `model` (same window, text
    /// only): a picker has more than one to choose from. Any id is answered.
    pub extra_models: Vec<String>,
    /// A second model `/v1/models` lists as seeing images; a request to it
    /// is answered with the sizes of the images it was shown.
    pub vision_model: Option<String>,
    /// Serve `POST /v1/audio/transcriptions`; off, it is 404.
    pub transcriptions: bool,
    /// A model `/v1/models` lists as transcribing (`capabilities:
    /// ["transcription"]`).
    pub transcription_model: Option<String>,
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
            extra_models: Vec::new(),
            meminfo: None,
            vision_model: None,
            transcriptions: true,
            transcription_model: None,
        }
    }
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
    /// Faults for any chat request (`POST /sim/faults {"next"}`).
    queue: VecDeque<Fault>,
    /// Faults for the chat requests of one `x-session-id` only
    /// (`POST /sim/faults {"session","next"}`), taken before `queue`'s.
    sessions: HashMap<String, VecDeque<Fault>>,
    counters: HashMap<String, u64>,
    log: VecDeque<Value>,
    /// Transcription requests, as `/sim/transcriptions` lists them.
    transcriptions: VecDeque<Value>,
    stats: Stats,
    /// Bytes the cache can still give back (`/sim/cache`).
    can_free: u64,
    /// Every `/v1/cache/release` asked: (bytes asked, bytes freed).
    releases: Vec<(u64, u64)>,
}

impl Inner {
    /// The fault a chat request of `session` takes: its session's next one,
    /// else the global queue's next one.
    fn take_fault(&mut self, session: Option<&str>) -> Option<Fault> {
        if let Some(queue) = session.and_then(|s| self.sessions.get_mut(s)) {
            let taken = queue.pop_front();
            if queue.is_empty() {
                self.sessions.remove(session.unwrap_or_default());
            }
            if taken.is_some() {
                return taken;
            }
        }
        self.queue.pop_front()
    }

    /// Faults queued in all queues, the sessions' included.
    fn queued_faults(&self) -> usize {
        self.queue.len() + self.sessions.values().map(VecDeque::len).sum::<usize>()
    }
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
