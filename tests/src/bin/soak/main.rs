//! `soak`: chatd under sustained load and random faults, checked at the end
//! for anything lost (issue 11). It starts the real `chatd` (max 2 runs) and
//! `engine-sim` on 127.0.0.1 and, for `--duration`, drives:
//!
//! - `--chats` chats: messages sent at random (some while a run works, so
//!   they wait as pending), stops, continues and send-now at random;
//! - `--devices` SSE devices attaching and dropping at random, each keeping
//!   its last seq and reconnecting with it (`Last-Event-ID`, or `?after=` as
//!   a reloaded page does), each rebuilding the text of every message from
//!   the snapshot and the `text.delta` events (a `reset` reloads the
//!   snapshot); one device per chat stays attached (it measures the relay
//!   latency) and a few read slowly through a small socket buffer;
//! - faults at random: streams cut mid-answer (`cut_after`), 503 with
//!   Retry-After, the engine refusing connections for up to 20 s
//!   (`/sim/refuse`), chatd SIGKILLed and restarted (every `--kill-every` on
//!   average, and at least once in every run);
//! - the box's other daemons, each a part (`parts.rs`, `--parts`) with its
//!   own load and faults: egressd, hostexecd, triggerd, connectord, and
//!   push (chatd's Web Push to a fake push service, the settings, the
//!   permission mode and the inbox routes: `push.rs`), and documents
//!   (PDFs, workbooks, a damaged PDF and a zip bomb attached to messages:
//!   `documents.rs`), and mcp (MCP connectors tested against a fake MCP
//!   server that refuses a token, goes down and redirects: `mcp.rs`), and
//!   subagents (turns whose answers start sub-agents in the foreground and
//!   the background, past the cap and twice over, under kills and stops:
//!   `subagents.rs`; a chat of a saved agent kept to a folder read only,
//!   the folder renamed away and back: `agent_folder.rs`; and a chat in
//!   Agents mode whose main agent hands jobs to workers, under kills, stops
//!   and Continue: `agents_mode.rs`; a chat working toward goal after goal
//!   by itself, stopped and killed under it: `goals.rs`; a chat with loops
//!   on a clock the part moves a minute at a time: `loops.rs`; a chat using
//!   skills rewritten under it, with broken ones beside: `skills.rs`).
//!
//! Then it stops sending, waits (bounded) until every run has ended, has
//! every device catch up to the last seq, stops chatd and checks:
//!
//! 1. every device's text of every message equals the stored text;
//! 2. per chat, the seqs each device saw rise by exactly one (a `reset` then
//!    a snapshot is the one allowed jump), and never go past chatd's head;
//! 3. each `message.updated` a device gets carries the text it rebuilt;
//! 4. every stored answer is a run of the engine's tokens with none lost or
//!    doubled, and a `done` one is whole;
//! 5. every run ended (done, stopped, failed or interrupted);
//! 6. every daemon's RSS at the end is within 20 % of its RSS after
//!    warm-up: the process measured is the one alive at the end (started by
//!    the last kill). chatd's warm-up lasts ~10 % of the run (5..60 s) and
//!    until every chat has gained the reset distance + 200 events since it
//!    started (the soak asks each chat for one long answer then), because
//!    chatd keeps a ring of ~2,100 recent events per attached chat and its
//!    RSS grows until those rings are full; the others' is a sample ~10 % of
//!    the run after their start (`daemons.rs`);
//! 7. no panic and no `ERROR` line without an id in any daemon's log, and
//!    every daemon came back after every kill;
//! 8. `PRAGMA integrity_check` says ok for every SQLite file of every daemon;
//! 9. – 12. each part's own: no SSRF attempt reached a refused origin, no
//!    process of a host command outlived its call, every due trigger minute
//!    ran once, every bot message was answered once;
//! 13. no secret (the forward key, the parts' tokens and keys) in any log;
//! 14. every file a host command made is in its chat's file list, an undone
//!     or deleted one is gone from the disk, a restored one is back whole, a
//!     purged one is out of the trash, and `…/files/changes` pages each set
//!     once (`files.rs`, `files_trash.rs`);
//! 15. every upload chatd answered is there whole, a cut one not at all
//!     (`uploads.rs`);
//! 16. every push decrypts to a title and a link only, the unwatched chats
//!     were pushed, a gone browser removed, and the settings, modes and
//!     inbox hold what was saved (`push.rs`);
//! 17. every accepted message holds each attached document's text or one
//!     line why it could not be read, a good one never unreadable and no
//!     failure kept for its bytes; the search finds a PDF's page 3 and a
//!     deleted PDF no more; a workbook previews as its 3 sheets, a zip
//!     bomb's preview is 422 (`documents.rs`, `documents_checks.rs`);
//! 18. every MCP connector test says what its server deserved at that
//!     moment, an edit without the secrets keeps them, and the server only
//!     saw the tokens it was given (`mcp.rs`); no chat turn fails for an
//!     MCP server (`mcp_turns.rs`); the context lists and previews answer
//!     what the server deserves, or 502/403 naming the connector, and no
//!     secret (`mcp_context.rs`);
//! 19. every sub-agent ended; each not stopped with its parent handed back
//!     exactly one result (its call's result, or one message or waiting
//!     message with its card) and one `sub_agent_done`; never more than 4
//!     ran in the background; a refused 5th or repeat started no
//!     conversation (`subagents.rs`, `subagents_checks.rs`);
//! 20. a chat of a saved agent kept to a folder read only left its files as
//!     they were, and every send while the folder was away stored nothing
//!     (`agent_folder.rs`, `agent_folder_checks.rs`);
//! 21. a chat in Agents mode: every task ended, each `task` call has exactly
//!     one result, a brief with code started no worker, every `tasks/k.md` a
//!     worker wrote holds k and is created once in the change sets (no write
//!     ran again after a Continue), every done task's report is kept at
//!     `.tandem/tasks/<n>/report.md`, and every run ended (`agents_mode.rs`,
//!     `agents_mode_checks.rs`);
//! 22. a chat working toward goal after goal: every run ended, the goal is
//!     never active on an idle chat, every `continue` line follows a turn
//!     that ended by itself and was answered by one run at most, and every
//!     goal line has its one `goal` event (`goals.rs`);
//! 23. a chat with loops on a clock moved a minute at a time: every run
//!     ended and no loop still says running; each loop's user lines are its
//!     runs 1 to N, each once, each answered by one run at most; no active
//!     loop has 3 failures (`loops.rs`);
//! 24. a chat using skills while they are rewritten (by the routes and by
//!     hand) and broken ones come and go: every skill message and every
//!     load_skill result holds a whole version that was written, a broken
//!     folder never serves, every send with a skill was taken (`skills.rs`).
//!
//! It prints the counts, faults, relay latency, events/s and the RSS curve,
//! and ends with `soak: N passed, N failed`; the exit status is 0 only when
//! every invariant held. Every wait is bounded and everything it started is
//! stopped on the way out. docs/soak.md has how to run it and a run's figures.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use clap::Parser;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::{json, Value};
use tandem_tests::harness::{Chatd, Sim, FORWARD_KEY};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

mod agent_folder;
mod agent_folder_checks;
mod agents_mode;
mod agents_mode_checks;
mod bots;
mod bots_ledger;
mod chats;
mod checks;
mod daemons;
mod devices;
mod documents;
mod documents_checks;
mod egress;
mod egress_load;
mod faults;
mod files;
mod files_trash;
mod goals;
mod hostexec;
mod hostexec_calls;
mod hostexec_serve;
mod loops;
mod mcp;
mod mcp_context;
mod mcp_pages;
mod mcp_turns;
mod parts;
mod push;
mod push_checks;
mod shared;
mod skills;
mod sse;
mod subagents;
mod subagents_checks;
mod trigger_dues;
mod triggers;
mod uploads;
mod watchers;

use chats::*;
use checks::*;
use daemons::*;
use devices::*;
use egress::*;
use faults::*;
use hostexec::hostexec_part;
use parts::*;
use shared::*;
use sse::*;
use triggers::*;
use watchers::*;

/// A load and fault run of chatd and engine-sim that checks nothing was lost.
#[derive(Parser, Debug)]
#[command(name = "soak")]
struct Args {
    /// How long to drive load and faults: `60s`, `30m`, `1h30m` (a bare number is seconds).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    duration: Duration,
    /// Chats driven at once.
    #[arg(long, default_value_t = 50)]
    chats: usize,
    /// SSE devices attaching and dropping.
    #[arg(long, default_value_t = 500)]
    devices: usize,
    /// Seed of every random choice (default: from the clock; printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Also write the summary to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Mean time between chatd SIGKILLs (every run has at least one).
    #[arg(long, default_value = "90s", value_parser = parse_duration)]
    kill_every: Duration,
    /// Mean time between engine outages of up to 20 s (every run has at least one).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    refuse_every: Duration,
    /// The daemons driven beside chatd: `all`, `none`, or some of egressd,
    /// hostexecd, triggerd, connectord, push, documents, mcp, subagents
    /// (comma-separated).
    #[arg(long, default_value = "all", value_parser = parse_parts)]
    parts: Chosen,
}

/// `60s`, `30m`, `1h30m`, `90` (seconds).
fn parse_duration(text: &str) -> Result<Duration, String> {
    let mut total = 0.0f64;
    let mut number = String::new();
    let mut any = false;
    for c in text.trim().chars() {
        if c.is_ascii_digit() || c == '.' {
            number.push(c);
            continue;
        }
        let unit = match c {
            's' => 1.0,
            'm' => 60.0,
            'h' => 3600.0,
            _ => {
                return Err(format!(
                    "{text:?}: unknown unit {c:?} (use s, m or h: 60s, 30m, 1h30m)"
                ))
            }
        };
        let n: f64 = number
            .parse()
            .map_err(|_| format!("{text:?}: a number must come before {c:?}"))?;
        total += n * unit;
        number.clear();
        any = true;
    }
    if !number.is_empty() {
        total += number
            .parse::<f64>()
            .map_err(|_| format!("{text:?}: {number:?} is not a number"))?;
        any = true;
    }
    if !any || !total.is_finite() || total <= 0.0 {
        return Err(format!("{text:?} is not a duration like 60s or 30m"));
    }
    Ok(Duration::from_secs_f64(total))
}

fn main() {
    let args = Args::parse();
    // No libtest here to hide the logs of daemons that did well.
    tandem_tests::daemon::logs_only_on_panic();
    // Before any thread or child exists, so chatd and engine-sim inherit it.
    let nofile = raise_nofile(16_384);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(err) => {
            eprintln!("soak: {err}");
            std::process::exit(2);
        }
    };
    let code = match runtime.block_on(soak(args, nofile)) {
        Ok(0) => 0,
        Ok(_) => 1,
        Err(err) => {
            eprintln!("soak: {err:#}");
            say("soak: could not run (see above)");
            2
        }
    };
    // Device tasks may still hold sockets; the children are stopped already.
    runtime.shutdown_timeout(Duration::from_secs(2));
    std::process::exit(code);
}

/// Runs the soak; returns how many invariants broke.
async fn soak(args: Args, nofile: u64) -> anyhow::Result<usize> {
    anyhow::ensure!(args.chats >= 1, "--chats must be at least 1");
    anyhow::ensure!(args.devices >= 1, "--devices must be at least 1");
    let seed = args.seed.unwrap_or_else(|| now_micros() as u64);
    let mut rng = StdRng::seed_from_u64(seed);
    let duration = args.duration.as_secs_f64();
    // Warm-up: ~10 % of the run (5..60 s), after the start and after each restart.
    let warm = (duration * 0.1).clamp(5.0, 60.0);
    let run_started = Instant::now();
    say(format!(
        "soak: {} for {:.0} s: {} chats, {} devices, QSE_CHAT_MAX_RUNS=2, seed {seed} \
         ({} cores, RLIMIT_NOFILE {nofile})",
        env!("CARGO_PKG_VERSION"),
        duration,
        args.chats,
        args.devices,
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
    ));

    let sim = Sim::start(&[
        "--tokens-per-second",
        "100",
        // Long chats must not hit the context window: that is another test.
        "--context-window",
        "100000000",
    ])?;
    // The other daemons' files; some start here, since chatd is told where they listen.
    let dir = tempfile::Builder::new().prefix("soak-parts-").tempdir()?;
    let parts = prepare(
        &args.parts.0,
        &Prepare {
            seed,
            duration,
            sim_url: sim.url(),
            dir: dir.path().to_path_buf(),
        },
    )
    .await?;
    let mut chatd_env: Vec<(String, String)> = vec![("QSE_CHAT_MAX_RUNS".into(), "2".into())];
    for part in &parts {
        chatd_env.extend(part.chatd_env());
    }
    let env: Vec<(&str, &str)> = chatd_env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let chatd = Chatd::start(&sim.url(), &env).await?;
    let chatd_url = chatd.url();
    let chatd_port = chatd.port;
    let log_path = chatd.log_path();
    let db_path = chatd.data_dir().join("chat.sqlite3");
    let first_pid = chatd.pid().context("chatd's pid")?;
    let chatd = Arc::new(tokio::sync::Mutex::new(chatd));
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()?;

    let (phase, _) = watch::channel(Phase::Load);
    // Kills stay clear of the first warm-up and of the last quarter of the
    // run (at least twice the warm-up), so the process measured at the end
    // warms up under load and then runs on a while.
    let kill_to = duration - (0.25 * duration).max(2.0 * warm).max(15.0);
    let mut shared = Shared {
        t0: Instant::now(),
        http,
        chatd_url,
        chatd_port,
        sim_url: sim.url(),
        chats: Vec::new(),
        phase,
        targets: Mutex::new(HashMap::new()),
        c: Counters::default(),
        faults: Mutex::new(BTreeMap::new()),
        broken: Mutex::new(BTreeMap::new()),
        unexpected: Mutex::new(BTreeMap::new()),
        generations: Mutex::new(vec![Generation {
            pid: first_pid,
            started: 0.0,
        }]),
        pid: AtomicU32::new(first_pid),
        rss: Mutex::new(Vec::new()),
        abort: AtomicBool::new(false),
        fill: 0,
        warm: Mutex::new(None),
        filling: Mutex::new(std::collections::HashSet::new()),
        warm_s: warm,
        kill_to,
        procs: Mutex::new(Vec::new()),
        daemon_rss: Mutex::new(Vec::new()),
    };
    // The ring of recent events per chat holds a little more than the reset distance.
    let (status, capabilities) = shared
        .call(reqwest::Method::GET, "/capabilities", None)
        .await?;
    anyhow::ensure!(status == 200, "capabilities answered {status}");
    shared.fill = capabilities["limits"]["sse_reset_after"]
        .as_i64()
        .context("limits.sse_reset_after in the capabilities")?
        + 200;
    for i in 0..args.chats {
        let (status, body) = shared
            .call(
                reqwest::Method::POST,
                "/conversations",
                Some(json!({ "title": format!("soak {i}") })),
            )
            .await?;
        anyhow::ensure!(status == 201, "creating a chat answered {status}: {body}");
        shared
            .chats
            .push(body["id"].as_str().context("conversation id")?.to_string());
    }
    shared.t0 = Instant::now();
    let shared = Arc::new(shared);
    say(format!(
        "soak: chatd {} (pid {first_pid}), engine-sim {}; warm-up {warm:.0} s",
        shared.chatd_url, shared.sim_url
    ));

    // Faults on a schedule (kills inside the window above).
    let forced_kill = duration * rng.random_range(0.25..0.5);
    let kill_times = schedule(
        &mut rng,
        args.kill_every.as_secs_f64(),
        warm + 2.0,
        kill_to,
        forced_kill,
    );
    let forced_outage = duration * rng.random_range(0.1..0.5);
    let refuse_times = schedule(
        &mut rng,
        args.refuse_every.as_secs_f64(),
        2.0,
        duration - 25.0,
        forced_outage,
    );
    let kills = Arc::new(Mutex::new(Vec::new()));
    let outages = Arc::new(Mutex::new(Vec::new()));
    let sample_every = Duration::from_secs_f64((duration / 30.0).clamp(1.0, 10.0));
    let killer = tokio::spawn(killer(
        shared.clone(),
        chatd.clone(),
        kill_times,
        kills.clone(),
        warm,
    ));
    let mut background = vec![
        tokio::spawn(refuser(
            shared.clone(),
            refuse_times,
            rng.random(),
            outages.clone(),
        )),
        tokio::spawn(sample_rss(shared.clone(), sample_every)),
        tokio::spawn(sample_daemons(shared.clone(), sample_every)),
        tokio::spawn(progress(
            shared.clone(),
            Duration::from_secs_f64((duration / 6.0).clamp(10.0, 60.0)),
        )),
    ];
    let drivers: Vec<_> = (0..args.chats)
        .map(|i| tokio::spawn(drive_chat(shared.clone(), i, rng.random())))
        .collect();
    let uploader = tokio::spawn(uploads::drive(shared.clone(), rng.random()));
    let part_drivers: Vec<_> = parts
        .iter()
        .map(|part| tokio::spawn(part.clone().drive(shared.clone(), rng.random())))
        .collect();
    let chats = args.chats;
    let slow_every = 90;
    let devices: Vec<_> = (0..args.devices)
        .map(|i| {
            let role = if i < chats {
                Role::Steady
            } else if (i - chats).is_multiple_of(slow_every) {
                Role::Slow
            } else {
                Role::Roaming
            };
            if role == Role::Slow {
                shared.fault("slow-reading device");
            }
            let device = Device {
                index: i,
                chat: shared.chats[i % chats].clone(),
                role,
                last_seq: -1,
                need_snapshot: true,
                texts: HashMap::new(),
                caught_up: false,
                caught_up_s: 0.0,
                connections: 0,
                resets: 0,
                latencies: Vec::new(),
            };
            tokio::spawn(run_device(shared.clone(), device, rng.random()))
        })
        .collect();
    let steady = args.devices.min(chats);
    let slow = (0..args.devices)
        .filter(|i| *i >= chats && (i - chats).is_multiple_of(slow_every))
        .count();

    // Load.
    let load_end = tokio::time::Instant::now() + args.duration;
    while tokio::time::Instant::now() < load_end && !shared.abort.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(200).min(load_end - tokio::time::Instant::now()))
            .await;
    }
    let load_s = shared.t();
    shared.phase.send_replace(Phase::Drain);
    say(format!("  t={load_s:6.1}s  load ends; draining"));
    for driver in drivers {
        let _ = tokio::time::timeout(Duration::from_secs(30), driver).await;
    }
    // A restart in progress finishes before the drain is judged.
    let _ = tokio::time::timeout(Duration::from_secs(60), chatd.lock()).await;

    // Drain: every run ends, bounded (60 s, plus the engine's longest
    // outage and chatd's longest retry wait).
    let drain_bound = Duration::from_secs(60 + 20 + 30);
    let drain_started = Instant::now();
    let mut last_active: Vec<String> = Vec::new();
    let mut drained = false;
    while drain_started.elapsed() < drain_bound {
        let mut active = Vec::new();
        let mut complete = true;
        for chat in &shared.chats {
            match shared.snapshot(chat).await {
                Ok(s) => {
                    for run in s["runs"].as_array().into_iter().flatten() {
                        let status = run["status"].as_str().unwrap_or("?");
                        if !matches!(status, "done" | "stopped" | "failed" | "interrupted") {
                            active.push(format!("chat {chat}: run {} is {status}", run["id"]));
                        }
                    }
                }
                Err(_) => complete = false,
            }
        }
        if complete && active.is_empty() {
            drained = true;
            break;
        }
        last_active = active;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Each part drains its own work, bounded by the same time.
    let left = drain_bound.saturating_sub(drain_started.elapsed()) + Duration::from_secs(30);
    for (part, driver) in parts.iter().zip(part_drivers) {
        if tokio::time::timeout(left, driver).await.is_err() {
            shared.violate(
                Inv::Runs,
                format!(
                    "{}: its work had not ended {left:?} after chatd's drain",
                    part.name().as_str()
                ),
            );
        }
    }
    let upload_lines = match tokio::time::timeout(left, uploader).await {
        Ok(Ok(lines)) => lines,
        _ => {
            shared.violate(Inv::Uploads, "the uploads were not checked in time".into());
            Vec::new()
        }
    };
    let drain_s = drain_started.elapsed().as_secs_f64();
    if !drained {
        for what in &last_active {
            shared.violate(
                Inv::Runs,
                format!("{what} {drain_bound:?} after the load ended"),
            );
        }
        if last_active.is_empty() {
            shared.violate(
                Inv::Runs,
                "the snapshots could not be read to the end of the drain".into(),
            );
        }
    }
    say(format!(
        "  t={:6.1}s  drain {}: {drain_s:.1} s",
        shared.t(),
        if drained { "done" } else { "TIMED OUT" }
    ));

    // The warm-up of the chatd measured at the end may still be sampling.
    if tokio::time::timeout(Duration::from_secs(30), killer)
        .await
        .is_err()
    {
        say("  the warm-up did not end within 30 s of the drain");
    }

    // The final state, then every device catches up to it.
    let mut finals: HashMap<String, Value> = HashMap::new();
    for chat in &shared.chats {
        let snapshot = tandem_tests::harness::wait_until(
            "a final snapshot",
            Duration::from_secs(20),
            || async { shared.snapshot(chat).await.ok() },
        )
        .await?;
        lock(&shared.targets).insert(chat.clone(), snapshot["seq"].as_i64().unwrap_or(0));
        finals.insert(chat.clone(), snapshot);
    }
    let rss_drained = rss_kib(shared.pid.load(Ordering::Relaxed));
    shared.phase.send_replace(Phase::CatchUp);
    let catch_started = Instant::now();
    let mut joined = futures_util::future::join_all(devices);
    let devices: Vec<Device> =
        match tokio::time::timeout(Duration::from_secs(60), &mut joined).await {
            Ok(done) => done.into_iter().filter_map(Result::ok).collect(),
            Err(_) => {
                shared.phase.send_replace(Phase::Done);
                tokio::time::timeout(Duration::from_secs(15), joined)
                    .await
                    .map(|done| done.into_iter().filter_map(Result::ok).collect())
                    .unwrap_or_default()
            }
        };
    let catch_s = catch_started.elapsed().as_secs_f64();
    shared.phase.send_replace(Phase::Done);
    let end_pid = shared.pid.load(Ordering::Relaxed);
    let rss_end = rss_kib(end_pid);
    let end_t = shared.t();
    if let Some(kib) = rss_end {
        lock(&shared.rss).push(RssSample {
            t: end_t,
            pid: end_pid,
            kib,
        });
    }
    for task in background.drain(..) {
        task.abort();
    }

    // Invariant 1 and the answers.
    if devices.len() < args.devices {
        shared.violate(
            Inv::Text,
            format!(
                "only {} of {} devices handed in their state",
                devices.len(),
                args.devices
            ),
        );
    }
    for device in &devices {
        if let Some(snapshot) = finals.get(&device.chat) {
            device.compare(&shared, snapshot);
        }
    }
    let (mut answers, mut whole) = (0, 0);
    let mut runs_by_status: BTreeMap<String, u64> = BTreeMap::new();
    let mut events_written = 0i64;
    let mut waiting_left = 0usize;
    for (chat, snapshot) in &finals {
        let (a, w) = check_answers(&shared, chat, snapshot);
        answers += a;
        whole += w;
        for run in snapshot["runs"].as_array().into_iter().flatten() {
            *runs_by_status
                .entry(run["status"].as_str().unwrap_or("?").to_string())
                .or_default() += 1;
        }
        events_written += snapshot["seq"].as_i64().unwrap_or(0);
        waiting_left += snapshot["pending"].as_array().map_or(0, Vec::len);
    }

    // The engine's own count of the faults it played.
    let sim_stats: Value = match shared
        .http
        .get(format!("{}/sim/stats", shared.sim_url))
        .timeout(Duration::from_secs(5))
        .send()
        .await
    {
        Ok(r) => r.json().await.unwrap_or(Value::Null),
        Err(_) => Value::Null,
    };

    // The other daemons: their RSS while they run, then each part stops its
    // own and checks what it promised.
    let daemon_rss = check_daemons_rss(&shared);
    let mut ends: Vec<(PartName, PartEnd)> = Vec::new();
    for part in &parts {
        let end = part.clone().finish(shared.clone()).await;
        ends.push((part.name(), end));
    }

    // Stop chatd, then every log and every database.
    let stopped = {
        let mut chatd = chatd.lock().await;
        chatd.sigterm(Duration::from_secs(15))
    };
    match &stopped {
        Ok((_, status)) if status.success() => {}
        Ok((took, status)) => shared.violate(
            Inv::Health,
            format!("chatd exited {status} after SIGTERM ({took:?})"),
        ),
        Err(err) => shared.violate(Inv::Health, format!("chatd did not stop: {err:#}")),
    }
    let files = check_files(&shared, &log_path, &db_path, &ends);

    // RSS: the process alive at the end, against its own warm-up.
    let samples = std::mem::take(&mut *lock(&shared.rss));
    let rss_line = check_chatd_rss(&shared, end_pid, rss_end, end_t);

    // The summary.
    let c = &shared.c;
    let mut s = String::new();
    let total_s = run_started.elapsed().as_secs_f64();
    let _ = writeln!(s, "\n== soak summary (seed {seed}) ==");
    let _ = writeln!(
        s,
        "time: load {load_s:.1} s, drain {drain_s:.1} s, catch-up {catch_s:.1} s; whole run {total_s:.1} s"
    );
    let _ = writeln!(
        s,
        "messages: {} sent ({} started a run, {} waited as pending; {} failed while chatd was down); \
         {} stops ({} found no run), {} continues ({} refused), {} send-now ({} refused); \
         {} other requests failed while chatd was down; {} still waiting at the end",
        get(&c.sent_run) + get(&c.sent_pending),
        get(&c.sent_run),
        get(&c.sent_pending),
        get(&c.send_failed),
        get(&c.stops),
        get(&c.stops_idle),
        get(&c.continues),
        get(&c.continues_refused),
        get(&c.send_now),
        get(&c.send_now_refused),
        get(&c.requests_failed),
        waiting_left,
    );
    let runs_total: u64 = runs_by_status.values().sum();
    let _ = writeln!(
        s,
        "runs: {runs_total} ({}); answers stored {answers}, {whole} of them done and checked whole",
        runs_by_status
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let busy_s = (load_s + drain_s).max(0.001);
    let _ = writeln!(
        s,
        "events: {events_written} written ({:.0}/s over load+drain), {} delivered to devices ({:.0}/s); {} resets",
        events_written as f64 / busy_s,
        get(&c.events),
        get(&c.events) as f64 / (busy_s + catch_s),
        get(&c.resets),
    );
    let _ = writeln!(
        s,
        "devices: {} ({steady} steady, {slow} slow, {} roaming); {} connections, {} refused or failed to open, {} snapshots loaded",
        args.devices,
        args.devices - steady - slow,
        get(&c.connections),
        get(&c.open_failed),
        get(&c.snapshots),
    );
    let mut catch: Vec<(f64, String)> = devices
        .iter()
        .filter(|d| d.caught_up)
        .map(|d| (d.caught_up_s, d.name()))
        .collect();
    catch.sort_by(|a, b| a.0.total_cmp(&b.0));
    if let Some((slowest, name)) = catch.last() {
        let _ = writeln!(
            s,
            "catch-up: {} of {} devices had the final seq; median {:.2} s, slowest {slowest:.2} s ({name})",
            catch.len(),
            devices.len(),
            catch[catch.len() / 2].0
        );
    }
    let _ = writeln!(s, "faults injected:");
    for (kind, n) in lock(&shared.faults).iter() {
        let _ = writeln!(s, "  {n:5}  {kind}");
    }
    let kills = lock(&kills).clone();
    if !kills.is_empty() {
        let _ = writeln!(
            s,
            "  chatd kills at {} s (back within {})",
            kills
                .iter()
                .map(|(t, _)| format!("{t:.1}"))
                .collect::<Vec<_>>()
                .join(", "),
            kills
                .iter()
                .map(|(_, d)| format!("{d:.2} s"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let outages = lock(&outages).clone();
    if !outages.is_empty() {
        let _ = writeln!(
            s,
            "  engine outages at {}",
            outages
                .iter()
                .map(|(t, d)| format!("{t:.1} s for {d:.1} s"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if !sim_stats.is_null() {
        let _ = writeln!(
            s,
            "  engine-sim played: {} requests, {} streams cut, {} refusals, statuses {}",
            sim_stats["requests"], sim_stats["cuts"], sim_stats["refusals"], sim_stats["statuses"]
        );
    }
    let unexpected = lock(&shared.unexpected).clone();
    if !unexpected.is_empty() {
        let _ = writeln!(s, "answers nobody expected:");
        for (what, n) in &unexpected {
            let _ = writeln!(s, "  {n:5}  {what}");
        }
    }
    if !files.warnings.is_empty() {
        let _ = writeln!(s, "chatd WARN lines:");
        for (what, n) in &files.warnings {
            let _ = writeln!(s, "  {n:5}  {what}");
        }
    }
    let mut latencies: Vec<i64> = devices
        .iter()
        .flat_map(|d| d.latencies.iter().copied())
        .collect();
    latencies.sort_unstable();
    let _ = writeln!(
        s,
        "relay latency (engine stamp → steady device read, {} stamped tokens): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        latencies.len(),
        quantile(&latencies, 0.5) as f64 / 1000.0,
        quantile(&latencies, 0.99) as f64 / 1000.0,
        latencies.last().copied().unwrap_or(0) as f64 / 1000.0,
    );
    let _ = writeln!(
        s,
        "RSS curve (chatd VmRSS, a sample every {:.0} s{}):",
        sample_every.as_secs_f64(),
        if samples.len() > 40 {
            ", every few shown"
        } else {
            ""
        }
    );
    let step = samples.len().div_ceil(40).max(1);
    for (i, sample) in samples.iter().enumerate() {
        if i % step == 0 || i + 1 == samples.len() {
            let _ = writeln!(
                s,
                "  t={:6.1}s  pid {:7}  {:>10}",
                sample.t,
                sample.pid,
                mib(sample.kib)
            );
        }
    }
    if let Some(kib) = rss_drained {
        let _ = writeln!(s, "  (after the drain, before the catch-up: {})", mib(kib));
    }
    let _ = writeln!(s, "RSS check: {rss_line}");
    for line in &daemon_rss {
        let _ = writeln!(s, "RSS check: {line}");
    }
    for line in &upload_lines {
        let _ = writeln!(s, "{line}");
    }
    for (name, end) in &ends {
        let _ = writeln!(s, "{}:", name.as_str());
        for line in &end.totals {
            let _ = writeln!(s, "  {line}");
        }
    }
    if !files.part_warnings.is_empty() {
        let _ = writeln!(s, "other daemons' WARN lines:");
        for (what, n) in &files.part_warnings {
            let _ = writeln!(s, "  {n:5}  {what}");
        }
    }
    let _ = writeln!(
        s,
        "databases checked: {}; logs checked for {} secrets: {}",
        files.databases,
        files.secrets,
        files.logs.len()
    );
    let driven: Vec<PartName> = ends.iter().map(|(n, _)| *n).collect();
    let failed = verdicts(&shared, &driven, &mut s);
    say(&s);
    if failed > 0 {
        for (daemon, path) in &files.logs {
            let keep = std::env::temp_dir().join(format!("soak-{seed}-{daemon}.log"));
            if std::fs::copy(path, &keep).is_ok() {
                eprintln!("soak: {daemon}'s log is kept at {}", keep.display());
            }
        }
    }
    if let Some(out) = &args.out {
        std::fs::write(out, format!("{}\n", s.trim_start()))
            .with_context(|| format!("writing {}", out.display()))?;
    }
    drop(sim);
    drop(dir);
    Ok(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_the_issue_writes_them() {
        assert_eq!(parse_duration("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1.5m"), Ok(Duration::from_secs(90)));
        for bad in ["", "s", "10x", "0s", "-5s", "500ms"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} was taken");
        }
    }

    #[test]
    fn answers_are_checked_token_by_token() {
        assert_eq!(answer_tokens(""), Ok(0));
        assert_eq!(answer_tokens("w0 w1 w2 "), Ok(3));
        assert_eq!(answer_tokens("w0:17 w1:18 "), Ok(2));
        assert!(answer_tokens("w0 w2 ").is_err(), "a lost token");
        assert!(answer_tokens("w0 w1 w1 w2 ").is_err(), "a doubled token");
        assert!(answer_tokens("w0 w1").is_err(), "a cut token");
    }

    #[test]
    fn texts_part_where_they_differ() {
        let d = difference("w0 w1 w2 ", "w0 w1 w3 ");
        assert!(d.starts_with("they part at char 7 of 9 / 9"), "{d}");
    }

    /// A chunked SSE body split at awkward places, the first frames in the
    /// same read as the headers: every frame comes out whole, once.
    #[tokio::test]
    async fn chunked_frames_come_out_whole() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let frames = [
            "id: 1\nevent: a\ndata: {}\n\n",
            "id: 2\nevent: b\ndata: {\"x\":1}\n\n",
        ];
        let body: String = frames
            .iter()
            .map(|f| format!("{:x}\r\n{f}\r\n", f.len()))
            .collect::<String>()
            + "0\r\n\r\n";
        let server = tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut request = vec![0u8; 4096];
            let _ = sock.read(&mut request).await.unwrap();
            let head = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";
            let all = format!("{head}{}", &body[..20]);
            sock.write_all(all.as_bytes()).await.unwrap();
            for piece in body.as_bytes()[20..].chunks(7) {
                sock.write_all(piece).await.unwrap();
                sock.flush().await.unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        });
        let Ok(mut sse) = Sse::open(port, "c", 0, false, false).await else {
            panic!("the stream did not open");
        };
        let mut got = sse.frames();
        while sse.read(usize::MAX).await.unwrap() {
            got.extend(sse.frames());
        }
        got.extend(sse.frames());
        let expected: Vec<Vec<u8>> = frames
            .iter()
            .map(|f| f.trim_end_matches('\n').as_bytes().to_vec())
            .collect();
        assert_eq!(got, expected);
        assert!(sse.ended);
        server.await.unwrap();
    }
}
