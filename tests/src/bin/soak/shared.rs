//! The soak's shared state: the phase of the run, the invariants and their
//! violations, the counters, chatd's generations and RSS samples, and the
//! small helpers every task uses (a lock, the clock, a bounded sleep).

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Messages, faults, devices.
    Load,
    /// No more messages or faults; devices go on; runs end.
    Drain,
    /// Every device catches up to the final seq of its chat.
    CatchUp,
    /// Everyone hands in what they have.
    Done,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Inv {
    Text,
    Seqs,
    Live,
    Answers,
    Runs,
    Rss,
    Health,
    Integrity,
    Ssrf,
    Leftovers,
    Triggers,
    Bots,
    Secrets,
    Files,
    Uploads,
    Push,
    Documents,
    Mcp,
    Subagents,
    AgentFolder,
    AgentsMode,
    Goals,
    Loops,
    /// 24: skills rewritten under a chat (`skills.rs`).
    Skills,
}

pub(crate) const INVARIANTS: [Inv; 24] = [
    Inv::Text,
    Inv::Seqs,
    Inv::Live,
    Inv::Answers,
    Inv::Runs,
    Inv::Rss,
    Inv::Health,
    Inv::Integrity,
    Inv::Ssrf,
    Inv::Leftovers,
    Inv::Triggers,
    Inv::Bots,
    Inv::Secrets,
    Inv::Files,
    Inv::Uploads,
    Inv::Push,
    Inv::Documents,
    Inv::Mcp,
    Inv::Subagents,
    Inv::AgentFolder,
    Inv::AgentsMode,
    Inv::Goals,
    Inv::Loops,
    Inv::Skills,
];

impl Inv {
    pub(crate) fn title(self) -> &'static str {
        match self {
            Inv::Text => "every device's text of every message equals the stored text",
            Inv::Seqs => "per chat, each device's seqs rise by one (jumps only across a reset)",
            Inv::Live => "each message.updated carries the text the device rebuilt",
            Inv::Answers => "stored answers: no token lost or doubled, done ones whole",
            Inv::Runs => "every run ended (none queued or running after the drain)",
            Inv::Rss => "every daemon's RSS at the end within 20 % of its RSS after warm-up",
            Inv::Health => "no panic and no ERROR line without an id in any log; every daemon back after every kill, a second one on its data refused, exit 0 on SIGTERM",
            Inv::Integrity => "PRAGMA integrity_check = ok for every SQLite file",
            Inv::Ssrf => "no SSRF attempt reached a refused address (the origins count what reached them)",
            Inv::Leftovers => "no process a host command started is alive after its call ended",
            Inv::Triggers => "every due trigger minute ran exactly once; every run ended and has its inbox entry",
            Inv::Bots => "every bot message answered exactly once: none lost, none twice (but a kill inside connectord's documented window)",
            Inv::Secrets => "no secret in any log",
            Inv::Uploads => "every upload chatd answered is there with its bytes, every one cut part-way is not there at all, none is there with other bytes",
            Inv::Push => "every push decrypts to a title and a chat link only, no message text; unwatched chats were pushed; a gone (410) browser was removed; settings and modes hold the last saved (a bad one changed nothing); the inbox's count matches its list",
            Inv::Documents => "every accepted message holds each attached document's text or one line why it could not be read (damaged, a bomb); a good one never reads as unreadable and no failure is kept for its bytes; the search finds a PDF's page 3, and a deleted PDF no more; a workbook previews as its 3 sheets and a zip bomb's preview is 422",
            Inv::Mcp => "every MCP connector's test says what its server deserves at that moment (connected, needs sign-in, down, a redirect to metadata refused); an edit without the secrets keeps them; the server only ever saw the tokens it was given; no chat turn failed for an MCP server and every call was answered by it or with a line saying why not; a resource sent as context is in front of the stored message, a send refused for it stored nothing; the context lists answered the server's entries or named it unavailable, a preview its text or 502 mcp_error / 403 mcp_refused naming the connector, none a secret",
            Inv::Subagents => "every sub-agent ended; each not stopped with its parent handed back exactly one result (its call's result, or one message or waiting message with its card) and exactly one sub_agent_done; never more than 4 running in the background in any sample; every refused repeat or 5th started no conversation",
            Inv::AgentFolder => "a chat with a saved agent kept to a folder (read only): the folder's files never changed, a write there was refused, every send while it was away was refused 409 agent_folder_missing and stored nothing, and every turn of the chat ended",
            Inv::AgentsMode => "a chat in Agents mode: every task ended; each task call has exactly one result, a brief with code was refused and started no worker (as many tasks as calls that started one); every tasks/k.md a worker wrote holds k and is created once in the change sets (no write ran again after a Continue); every done task's report is kept at .tandem/tasks/<n>/report.md; every run of the chat ended",
            Inv::Goals => "a chat working toward goal after goal: every run ended; the goal is never active on an idle chat; every continue line follows a turn that ended by itself (a stop, a failure or a kill pauses the goal) and was answered by one run at most; every goal line has its one goal event",
            Inv::Loops => "a chat with loops on a clock moved a minute at a time: every run ended and no loop still says running; each loop's user lines are its runs 1 to N, each once, each answered by one run at most; no active loop has 3 failures",
            Inv::Skills => "a chat using skills rewritten under it (by the routes and by hand) with broken ones beside: every skill message and every load_skill result holds a whole version that was written, a broken folder never serves, every send with a skill was taken, and a read_file in a turn sent with the chat's file tools switched off was refused for it (and never with them on)",
            Inv::Files => "every file a host command made is in its chat's file list, an undone or deleted one is gone from the disk, a restored one is back whole, a purged one is out of the trash, and the changes list pages each set once",
        }
    }

    /// The part an invariant belongs to, when only that part checks it.
    pub(crate) fn part(self) -> Option<PartName> {
        match self {
            Inv::Ssrf => Some(PartName::Egressd),
            Inv::Leftovers | Inv::Files => Some(PartName::Hostexecd),
            Inv::Triggers => Some(PartName::Triggerd),
            Inv::Bots => Some(PartName::Connectord),
            Inv::Push => Some(PartName::Push),
            Inv::Documents => Some(PartName::Documents),
            Inv::Mcp => Some(PartName::Mcp),
            Inv::Subagents
            | Inv::AgentFolder
            | Inv::AgentsMode
            | Inv::Goals
            | Inv::Loops
            | Inv::Skills => Some(PartName::Subagents),
            _ => None,
        }
    }
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) sent_run: AtomicU64,
    pub(crate) sent_pending: AtomicU64,
    pub(crate) send_failed: AtomicU64,
    pub(crate) stops: AtomicU64,
    pub(crate) stops_idle: AtomicU64,
    pub(crate) continues: AtomicU64,
    pub(crate) continues_refused: AtomicU64,
    pub(crate) send_now: AtomicU64,
    pub(crate) send_now_refused: AtomicU64,
    pub(crate) requests_failed: AtomicU64,
    pub(crate) events: AtomicU64,
    pub(crate) resets: AtomicU64,
    pub(crate) connections: AtomicU64,
    pub(crate) open_failed: AtomicU64,
    pub(crate) snapshots: AtomicU64,
    pub(crate) devices_up: AtomicI64,
}

pub(crate) fn inc(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

pub(crate) fn get(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

/// One chatd process (the first, or one started after a kill).
#[derive(Clone, Debug)]
pub(crate) struct Generation {
    pub(crate) pid: u32,
    pub(crate) started: f64,
}

pub(crate) struct RssSample {
    pub(crate) t: f64,
    pub(crate) pid: u32,
    pub(crate) kib: u64,
}

pub(crate) struct Shared {
    pub(crate) t0: Instant,
    pub(crate) http: reqwest::Client,
    pub(crate) chatd_url: String,
    pub(crate) chatd_port: u16,
    pub(crate) sim_url: String,
    pub(crate) chats: Vec<String>,
    pub(crate) phase: watch::Sender<Phase>,
    /// The final seq of each chat, set before the catch-up.
    pub(crate) targets: Mutex<HashMap<String, i64>>,
    pub(crate) c: Counters,
    pub(crate) faults: Mutex<BTreeMap<String, u64>>,
    pub(crate) broken: Mutex<BTreeMap<Inv, (u64, Vec<String>)>>,
    /// Answers nobody expected (`stop 500 internal`), by kind.
    pub(crate) unexpected: Mutex<BTreeMap<String, u64>>,
    pub(crate) generations: Mutex<Vec<Generation>>,
    pub(crate) pid: AtomicU32,
    pub(crate) rss: Mutex<Vec<RssSample>>,
    /// Set when chatd could not be brought back: the load ends early.
    pub(crate) abort: AtomicBool,
    /// Events each chat must gain after a start for chatd's per-chat ring
    /// of recent events to be full (the reset distance and a margin).
    pub(crate) fill: i64,
    /// The warm-up of the chatd measured at the end, once it is over.
    pub(crate) warm: Mutex<Option<Warm>>,
    /// Chats whose ring the warm-up is filling: their drivers wait meanwhile
    /// (a later message would replace the long answer's cue, a stop cut it).
    pub(crate) filling: Mutex<std::collections::HashSet<String>>,
    /// The warm-up after a start, and the end of the window for kills (s).
    pub(crate) warm_s: f64,
    pub(crate) kill_to: f64,
    /// The processes of the other daemons, in the order they started.
    pub(crate) procs: Mutex<Vec<Proc>>,
    /// Their RSS samples, by daemon.
    pub(crate) daemon_rss: Mutex<Vec<(String, RssSample)>>,
}

/// The end of a chatd process's warm-up: every chat has gained `fill`
/// events since it started (its rings are full) and ~10 % of the run has passed.
#[derive(Clone, Debug)]
pub(crate) struct Warm {
    pub(crate) pid: u32,
    pub(crate) t: f64,
    pub(crate) kib: u64,
    /// Seconds from the process's start until the rings were full.
    pub(crate) filled_s: f64,
}

impl Shared {
    pub(crate) fn t(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    pub(crate) fn phase(&self) -> Phase {
        *self.phase.borrow()
    }

    pub(crate) fn violate(&self, inv: Inv, detail: String) {
        let mut broken = lock(&self.broken);
        let entry = broken.entry(inv).or_default();
        entry.0 += 1;
        if entry.1.len() < 8 {
            entry.1.push(detail);
        }
    }

    pub(crate) fn fault(&self, kind: &str) {
        *lock(&self.faults).entry(kind.to_string()).or_default() += 1;
    }

    pub(crate) fn unexpected(&self, what: String) {
        *lock(&self.unexpected).entry(what).or_default() += 1;
    }

    /// Makes a chat with `body`, asking again while chatd is down (its own
    /// killer) for `ride` at most; its id.
    pub(crate) async fn new_chat(&self, body: Value, ride: Duration) -> anyhow::Result<String> {
        tandem_tests::harness::wait_until("a chat of chatd", ride, || async {
            match self
                .call(reqwest::Method::POST, "/conversations", Some(body.clone()))
                .await
            {
                Ok((201, b)) => b["id"].as_str().map(String::from),
                _ => None,
            }
        })
        .await
    }

    pub(crate) async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(u16, Value)> {
        let mut request = self
            .http
            .request(method, format!("{}/v1/chat-app{path}", self.chatd_url))
            .header("x-forward-key", FORWARD_KEY)
            .timeout(Duration::from_secs(15));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let text = response.text().await?;
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
    }

    /// Posts a message to a chat as a person would; its status and answer.
    pub(crate) async fn send_text(&self, chat: &str, text: &str) -> anyhow::Result<(u16, Value)> {
        self.call(
            reqwest::Method::POST,
            &format!("/conversations/{chat}/messages"),
            Some(json!({ "text": text })),
        )
        .await
    }

    pub(crate) async fn snapshot(&self, chat: &str) -> anyhow::Result<Value> {
        let (status, body) = self
            .call(
                reqwest::Method::GET,
                &format!("/conversations/{chat}"),
                None,
            )
            .await?;
        if status != 200 {
            bail!("snapshot of {chat} answered {status}: {body}");
        }
        Ok(body)
    }
}

/// Writes each invariant's verdict (`----` for a part not driven) and the
/// last line; returns how many broke.
pub(crate) fn verdicts(shared: &Shared, driven: &[PartName], s: &mut String) -> usize {
    let _ = writeln!(s, "invariants:");
    let broken = lock(&shared.broken).clone();
    let mut failed = 0;
    for (n, inv) in INVARIANTS.iter().enumerate() {
        if let Some(part) = inv.part().filter(|p| !driven.contains(p)) {
            let _ = writeln!(
                s,
                "  {}. ----  {} ({} not driven)",
                n + 1,
                inv.title(),
                part.as_str()
            );
            continue;
        }
        match broken.get(inv) {
            None => {
                let _ = writeln!(s, "  {}. PASS  {}", n + 1, inv.title());
            }
            Some((count, examples)) => {
                failed += 1;
                let _ = writeln!(s, "  {}. FAIL  {} ({count} times)", n + 1, inv.title());
                for e in examples {
                    let _ = writeln!(s, "          {e}");
                }
            }
        }
    }
    let checked = INVARIANTS
        .iter()
        .filter(|i| i.part().is_none_or(|p| driven.contains(&p)))
        .count();
    let _ = write!(s, "soak: {} passed, {failed} failed", checked - failed);
    failed
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

pub(crate) fn say(line: impl AsRef<str>) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", line.as_ref());
    let _ = out.flush();
}

/// Sleeps `d` unless the phase leaves `keep` first; says whether it is still in `keep`.
pub(crate) async fn sleep_in(
    phase: &mut watch::Receiver<Phase>,
    d: Duration,
    keep: impl Fn(Phase) -> bool,
) -> bool {
    let deadline = tokio::time::Instant::now() + d;
    loop {
        if !keep(*phase.borrow_and_update()) {
            return false;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => return keep(*phase.borrow()),
            changed = phase.changed() => if changed.is_err() { return false; },
        }
    }
}

/// Sleeps until `at` (s from the start) while the load lasts; says whether
/// the load still lasts (a fault scheduled past its end is not played).
pub(crate) async fn until_in_load(
    shared: &Shared,
    phase: &mut watch::Receiver<Phase>,
    at: f64,
) -> bool {
    let wait = Duration::from_secs_f64((at - shared.t()).max(0.0));
    sleep_in(phase, wait, |p| p == Phase::Load).await
}

pub(crate) fn live(p: Phase) -> bool {
    matches!(p, Phase::Load | Phase::Drain)
}

/// A sample of an exponential distribution with `mean`.
pub(crate) fn exponential(rng: &mut StdRng, mean: f64) -> f64 {
    -mean * (1.0 - rng.random::<f64>()).ln()
}

/// Resident memory of a process in KiB (`VmRSS`).
pub(crate) fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

pub(crate) fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// Raises the soft open-files limit towards `want` (at most the hard limit).
pub(crate) fn raise_nofile(want: u64) -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 0;
    };
    let target = want.min(hard);
    if target > soft && setrlimit(Resource::RLIMIT_NOFILE, target, hard).is_ok() {
        return target;
    }
    soft
}
