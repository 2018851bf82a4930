//! `bench`: tandem's benchmarks, run against the real `engine-sim` and
//! `chatd` processes on 127.0.0.1.
//!
//! Figures (each with its aim and a baseline measured in the same run):
//! 1. relay: added latency of a `text.delta` from the engine to 1, 100 and
//!    1,000 attached devices, against a client reading the engine directly
//!    (and, for scale, against a bare fan-out relay on the same machine);
//! 2. throughput: durable events per second, against raw SQLite inserts;
//! 3. snapshot: snapshot + attach, and a 1,999-event tail, on a chat of
//!    100,000 events, against the same on a chat of ~10 events;
//! 4. rss: chatd's resident memory idle and busy (1,000 devices);
//! 5. status: the wall time of `tandem status` with chatd and the engine up,
//!    against `tandem --version` (the cost of starting the process at all);
//! 6. toolloop: an agent run of 100 tool steps (write_file of ~4 KB, then
//!    read_file): chatd's time from the engine's last byte of one step to
//!    its next request, against the bench posting the same requests straight
//!    to the engine; and the bytes each request carries and how much of it is
//!    not a pure extension of what the engine had, with chatd's argument
//!    stubs and without them.
//! 7. egress: egressd (the real binary) relaying a 1 GiB transfer each way
//!    through a chat's socket and its loopback listener with CONNECT, new
//!    CONNECTs a second and its idle RSS with 100 chat sockets open, against
//!    direct loopback TCP and tinyproxy (`tests/src/egressbench.rs`).
//! 8. hostexec: the per-call overhead of hostexecd's `POST /exec` running
//!    `true` against a plain `bash -c true` spawned from Rust (median and
//!    p99 over 1,000 calls), and the time from a stop to the last process
//!    of the call gone.
//! 9. sandbox: chatd's per-chat containers (podman, the busybox test image)
//!    through chatd's own `Sandboxes` and `run_command`: a cold start (no
//!    container yet) and a stopped one to the first byte of `echo hi`, a warm
//!    call to its first byte and end against `bash -c` from Rust, and a call
//!    of `true` against hostexecd's (`tests/src/sandboxbench.rs`). Needs
//!    root and podman; skipped with a line otherwise.
//! 10. triggers: triggerd with 10,000 enabled triggers: the time to find
//!     every next due time in-process (triggerd's `schedule`) against as many
//!     `daily 09:00` in UTC, its start with them stored against an empty
//!     start, the lateness of 200 runs due in the same minute (the real
//!     triggerd, chatd and engine-sim, triggerd's clock file driven by the
//!     bench) against the check interval, and its idle CPU and RSS against a
//!     triggerd with none (`tests/src/triggerbench.rs`).
//! 11. connectors: connectord (the real binary) between a fake Telegram
//!     Bot API and chatd + engine-sim: messages a second and per-message
//!     latency of 200 messages from 20 senders pushed at once (reply modes
//!     off and progress, and edit_ms 50), against the bench sending the same
//!     straight to chatd; its idle CPU and RSS long polling 10 bindings
//!     against none (`tests/src/connectorbench.rs`).
//! 12. web: the time from a chunk leaving engine-sim to its text in the web
//!     page's DOM (headless Chromium, measured in the page), p50/p99, with 50
//!     other pages attached to the chat, against 0 other pages and an SSE
//!     client in the bench timing the same stamps (`tests/src/webbench.rs`).
//! 13. requests: the time from `POST …/messages` to engine-sim having the
//!     chat request, p50/p90/p99, for a chat whose brief asks egressd for
//!     its network and one whose egressd is absent, against an agent chat
//!     with no network tool (`tests/src/requestbench.rs`).
//! 14. files: what file history costs a tool call, in-process through
//!     chatd's `FileHistory`: a 4 KB write with its two scans against the
//!     write alone, a `bash` call in a workspace of 10,000 files with its two
//!     whole-workspace scans against the call alone (p50, p99), and the blob
//!     bytes kept per MiB changed (`files.rs`).
//! 15. documents: a 50-page PDF, a DOCX of 2,000 paragraphs and a workbook
//!     of 3 × 2,000 rows read into text by chatd's `formats::extract`
//!     in-process and through its reader process, against reading the same
//!     bytes and their sha-256; the cached read, and a message with the PDF
//!     attached through chatd (`tests/src/docbench.rs`).
//! 16. search: 1,000 documents (PDF, DOCX, XLSX) put in a chat's workspace
//!     and indexed by a real chatd, from the first `…/files/search` to
//!     nothing pending, and the index's size in chat.sqlite3; searches of
//!     10,000 text files through the route (p50, p99) against `grep -r` of
//!     the same files, and the route's time split in-process
//!     (`tests/src/searchbench.rs`).
//! 17. mcp: an MCP tool call through chatd (a whole agent step) against
//!     the same call made directly with rmcp, and with a built-in tool; the
//!     memory an open MCP session costs chatd (`mcp.rs`).
//! 18. subagents: a turn whose one call is a foreground `spawn_agent`
//!     against the same turn with `read_file`; a background sub-agent's
//!     hand-back to its parent; 4 background sub-agents at once against 4
//!     foreground ones one after another; chatd's RSS after 100 sub-agents
//!     (`subagents.rs`). 18d, saved_agents: a foreground `spawn_agent` as
//!     a saved agent against a plain one; `list_agents` of 100 agents (its
//!     result's size) against a `read_file` turn (`saved_agents.rs`).
//!     18e, agent_folder: `read_file` of a 4 KiB file under `folder/` in a
//!     chat of a read-only folder agent against the same file in a plain
//!     chat's own folder; `list_files .` of 2,000 files in the agent's
//!     folder against the same files in a plain chat's (`agent_folder.rs`).
//!     18f, agents_mode: a build of 8 files written and read back, in
//!     Agents mode (a worker a file) against the one loop: the chat's last
//!     request, the largest, the sum, the turn's time (`agents_mode.rs`).
//!     18g, goals: the gap from a goal turn's end to the next one's start
//!     against a client that sends "continue" on each run.finished, and
//!     20 turns' whole time both ways (`goals.rs`).
//!     18h, skills: a turn with 200 skills in the owner's folder against
//!     the same chatd's chat with every skill switched off, the system
//!     block both ways, and a turn that loads one skill (`skills.rs`).
//!     18i, switches: a turn of a chat with 3 tool groups off and 20
//!     policies of its own over 40 of the box's against a chat with none,
//!     the request's tools and system block both ways, a turn calling
//!     `list_files` and `GET …/tools` both ways (`switches.rs`).
//!
//! Build with `cargo build --release --workspace`, then `target/release/bench`.
//! `--quick` shrinks everything for a smoke run (well under a minute).
//! Every wait is bounded; every child process is stopped on the way out.
//! docs/benchmarks.md has a run's figures and what dominates each.

use std::io::Write as _;
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use clap::{Parser, ValueEnum};
use futures_util::future::join_all;
use serde_json::{json, Value};
use tandem_tests::harness::{Chatd, Client, Sim, FORWARD_KEY};
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::TcpStream;

mod agent_folder;
mod agents_mode;
mod delegated;
mod files;
mod floor;
mod goals;
mod hostexec;
mod mcp;
mod measure;
mod rawstream;
mod relay;
mod saved_agents;
mod skills;
mod snapshot;
mod status;
mod subagents;
mod switches;
mod throughput;
mod toolloop;
mod uploads;

use delegated::*;
use hostexec::*;
use measure::*;
use rawstream::*;
use relay::*;
use snapshot::*;
use status::*;
use throughput::*;

/// tandem's benchmarks against the real engine-sim and chatd processes.
#[derive(Parser, Debug)]
#[command(name = "bench")]
struct Args {
    /// Shrink every figure for a smoke run (finishes well under 60 s).
    #[arg(long)]
    quick: bool,
    /// Run one figure only (`rss` runs the relay figure, which measures it;
    /// `egress` needs egressd built next to bench; `sandbox` needs root,
    /// podman, and tandem and tandem-shim built next to bench; `triggers`
    /// needs triggerd built next to bench; `connectors` connectord; `web`
    /// Debian's chromium and chromium-driver; `requests` egressd; `documents`
    /// and `search` chatd).
    #[arg(long, value_enum)]
    only: Option<Figure>,
    /// Also write the final table (markdown) to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Token rate of figure 1's answers (default 100; quick 200).
    #[arg(long)]
    relay_tps: Option<f64>,
    /// Tokens in each of figure 1's answers (default 300; quick 60).
    #[arg(long)]
    relay_tokens: Option<usize>,
    /// (Internal) serve the bare relay floor of figure 1 for the engine on this port.
    #[arg(long, hide = true)]
    floor_of: Option<u16>,
    /// (Internal) serve figure 7's bare relay floor (CONNECT, two copying threads).
    #[arg(long = "egress-floor", hide = true)]
    egress_floor: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Figure {
    Relay,
    Throughput,
    Snapshot,
    Rss,
    Status,
    Toolloop,
    Egress,
    Hostexec,
    Sandbox,
    Triggers,
    Connectors,
    Web,
    Requests,
    Files,
    Documents,
    Search,
    Mcp,
    Subagents,
    #[value(name = "saved_agents", alias = "saved-agents")]
    SavedAgents,
    #[value(name = "agent_folder", alias = "agent-folder")]
    AgentFolder,
    #[value(name = "agents_mode", alias = "agents-mode")]
    AgentsMode,
    Goals,
    Skills,
    Switches,
}

/// How big each figure's workload is.
struct Sizes {
    relay_tokens: usize,
    relay_tps: f64,
    levels: Vec<usize>,
    tp_chats: usize,
    tp_tokens: usize,
    tp_rounds: usize,
    big_tokens: usize,
    repeats: usize,
    tool_steps: usize,
}

impl Sizes {
    fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                relay_tokens: 60,
                relay_tps: 200.0,
                levels: vec![1, 100],
                tp_chats: 4,
                tp_tokens: 1_500,
                tp_rounds: 1,
                big_tokens: 5_000,
                repeats: 3,
                tool_steps: 20,
            }
        } else {
            Sizes {
                relay_tokens: 300,
                relay_tps: 100.0,
                levels: vec![1, 100, 1_000],
                tp_chats: 8,
                tp_tokens: 10_000,
                tp_rounds: 3,
                big_tokens: 100_000,
                repeats: 7,
                tool_steps: 100,
            }
        }
    }
}

/// One line of the final table.
struct Row {
    figure: String,
    measured: String,
    aim: String,
    baseline: String,
    ratio: String,
    met: Option<bool>,
}

fn row(figure: impl Into<String>, measured: impl Into<String>) -> Row {
    Row {
        figure: figure.into(),
        measured: measured.into(),
        aim: "—".into(),
        baseline: "—".into(),
        ratio: "—".into(),
        met: None,
    }
}

impl Row {
    fn aim(mut self, aim: impl Into<String>, met: bool) -> Row {
        self.aim = aim.into();
        self.met = Some(met);
        self
    }

    fn baseline(mut self, baseline: impl Into<String>, ratio: impl Into<String>) -> Row {
        self.baseline = baseline.into();
        self.ratio = ratio.into();
        self
    }
}

fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| Figure | Measured | Aim | Baseline (same run) | Ratio | Met? |\n|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let met = match r.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "—",
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            r.figure, r.measured, r.aim, r.baseline, r.ratio, met
        ));
    }
    out
}

fn say(line: impl AsRef<str>) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", line.as_ref());
    let _ = out.flush();
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // No libtest here to hide the logs of daemons that did well.
    tandem_tests::daemon::logs_only_on_panic();
    if args.egress_floor {
        return tandem_tests::egressbench::serve_floor();
    }
    // Before any thread or child exists, so chatd and engine-sim inherit it.
    let nofile = raise_nofile(16_384);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match args.floor_of {
        Some(sim_port) => runtime.block_on(floor::serve(sim_port)),
        None => runtime.block_on(run(args, nofile)),
    }
}

async fn run(args: Args, nofile: (u64, u64)) -> anyhow::Result<()> {
    let mut sizes = Sizes::new(args.quick);
    if let Some(tps) = args.relay_tps.filter(|t| *t > 0.0) {
        sizes.relay_tps = tps;
    }
    if let Some(tokens) = args.relay_tokens.filter(|t| *t > 0) {
        sizes.relay_tokens = tokens;
    }
    let wants = |f: Figure| args.only.is_none_or(|o| o == f);
    say(format!(
        "bench{}: {} cores, RLIMIT_NOFILE soft {} hard {} (raised before spawning; chatd inherits it)",
        if args.quick { " --quick" } else { "" },
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        nofile.0,
        nofile.1
    ));
    let started = Instant::now();
    let mut rows = Vec::new();
    if wants(Figure::Relay) || wants(Figure::Rss) {
        relay(&sizes, &mut rows, nofile.0)
            .await
            .context("figure 1 (relay) and 4 (rss)")?;
    }
    if wants(Figure::Throughput) {
        throughput(&sizes, &mut rows)
            .await
            .context("figure 2 (throughput)")?;
    }
    if wants(Figure::Snapshot) {
        snapshot(&sizes, &mut rows)
            .await
            .context("figure 3 (snapshot)")?;
    }
    if wants(Figure::Status) {
        status(&sizes, &mut rows)
            .await
            .context("figure 5 (tandem status)")?;
    }
    if wants(Figure::Toolloop) {
        toolloop::figure(&sizes, &mut rows)
            .await
            .context("figure 6 (tool loop)")?;
    }
    if wants(Figure::Egress) {
        egress(args.quick, &mut rows)
            .await
            .context("figure 7 (egress)")?;
    }
    if wants(Figure::Hostexec) {
        hostexec(args.quick, &mut rows)
            .await
            .context("figure 8 (hostexec)")?;
    }
    if wants(Figure::Sandbox) {
        sandbox(args.quick, &mut rows)
            .await
            .context("figure 9 (sandbox)")?;
    }
    if wants(Figure::Triggers) {
        triggers(args.quick, &mut rows)
            .await
            .context("figure 10 (triggers)")?;
    }
    if wants(Figure::Connectors) {
        connectors(args.quick, &mut rows)
            .await
            .context("figure 11 (connectors)")?;
    }
    if args.quick && args.only.is_none() {
        // Chromium's start and 5 tabs would take --quick past its minute
        // on a debug build; `--quick --only web` runs the small figure.
        say("\n## 12. web page: skipped by --quick (`--quick --only web` runs it small)");
    } else if wants(Figure::Web) {
        web(args.quick, &mut rows)
            .await
            .context("figure 12 (web page)")?;
    }
    if wants(Figure::Requests) {
        requests(args.quick, &mut rows)
            .await
            .context("figure 13 (requests)")?;
    }
    if wants(Figure::Files) {
        files::figure(args.quick, &mut rows)
            .await
            .context("figure 14 (files)")?;
        uploads::figure(args.quick, &mut rows)
            .await
            .context("figure 14 (uploads)")?;
    }
    if wants(Figure::Documents) {
        documents(args.quick, &mut rows)
            .await
            .context("figure 15 (documents)")?;
    }
    if wants(Figure::Search) {
        search(args.quick, &mut rows)
            .await
            .context("figure 16 (search)")?;
    }
    if wants(Figure::Mcp) {
        mcp::mcp(args.quick, &mut rows)
            .await
            .context("figure 17 (mcp)")?;
    }
    if wants(Figure::Subagents) {
        subagents::figure(args.quick, &mut rows)
            .await
            .context("figure 18 (sub-agents)")?;
    }
    if wants(Figure::SavedAgents) {
        saved_agents::figure(args.quick, &mut rows)
            .await
            .context("figure 18d (saved agents)")?;
    }
    if wants(Figure::AgentFolder) {
        agent_folder::figure(args.quick, &mut rows)
            .await
            .context("figure 18e (agent folder)")?;
    }
    if wants(Figure::AgentsMode) {
        agents_mode::figure(args.quick, &mut rows)
            .await
            .context("figure 18f (Agents mode)")?;
    }
    if wants(Figure::Goals) {
        goals::figure(args.quick, &mut rows)
            .await
            .context("figure 18g (goals)")?;
    }
    if wants(Figure::Skills) {
        skills::figure(args.quick, &mut rows)
            .await
            .context("figure 18h (skills)")?;
    }
    if wants(Figure::Switches) {
        switches::figure(args.quick, &mut rows)
            .await
            .context("figure 18i (switches)")?;
    }
    let table = table(&rows);
    say(format!(
        "\n{table}\n(total {:.1} s)",
        started.elapsed().as_secs_f64()
    ));
    if let Some(path) = &args.out {
        std::fs::write(path, &table).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Raises the soft open-files limit towards `want` (at most the hard limit).
fn raise_nofile(want: u64) -> (u64, u64) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return (0, 0);
    };
    let target = want.min(hard);
    if target > soft && setrlimit(Resource::RLIMIT_NOFILE, target, hard).is_ok() {
        return (target, hard);
    }
    (soft, hard)
}
