//! Figure 10 of `bench`: triggerd with 10,000 enabled triggers.
//!
//! - **Next times, in-process.** triggerd's own `schedule` module parses
//!   10,000 mixed `when` texts (daily, weekdays, weekly, monthly, cron with
//!   steps, ranges and lists), looks up their zones (UTC, Europe/Rome,
//!   America/New_York, Australia/Lord_Howe) and finds each next time, as
//!   `scheduler::Entry::new` does for every trigger at start. *Baseline:* the
//!   same count of `daily 09:00` in UTC, the cheapest schedule there is;
//!   *for scale:* 10,000 instants converted to civil time in the same zones.
//! - **Start with 10,000 stored triggers.** The real triggerd, restarted on
//!   a data folder holding them (made through its API), timed from spawn to
//!   its first `/health` answer. *Baseline:* the same start with none.
//! - **Lateness.** The real triggerd, chatd and engine-sim (`tps=0`): of the
//!   10,000 triggers, `due` are due in each of `rounds` minutes (09:00,
//!   09:10, … UTC). For each minute, after a random pause within one
//!   `check_ms`, the bench drives triggerd's clock file as the system clock
//!   shifted to 2 s before the minute (rewritten every 5 ms, so triggerd's
//!   times are wall times to within that) and reads every run's due,
//!   queued, started and ended times from triggers.sqlite3 (read-only,
//!   after the runs), and when each run's chat reached the engine from
//!   engine-sim's request log. *Baseline:* the check interval (`check_ms`),
//!   the wait a due time may have before any check looks at it; for the
//!   run throughput, the bench making the same chats through chatd itself,
//!   2 at a time.
//! - **Idle.** CPU (utime + stime, and the threads' schedstat, finer) and
//!   VmRSS of the triggerd holding 10,000 triggers over `idle` with nothing
//!   due; *baseline:* a triggerd with none, measured at the same time.
//!
//! Every wait is bounded; every process is stopped on the way out (the
//! harness's drops).

use std::collections::HashMap;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use futures_util::StreamExt;
use jiff::tz::TimeZone;
use jiff::Timestamp;
use serde_json::{json, Value};
use triggerd::schedule::{self, Schedule};

use crate::egressbench::{cpu_secs, loadavg, rss_kib, Line};
use crate::harness::{Chatd, Client, Sim};
use crate::triggerd::{socket_in, Triggerd};

mod due;
mod in_process;
mod load;
mod measure;
mod process;
mod schedules;

use due::*;
use in_process::*;
use load::*;
use measure::*;
pub use process::*;
pub use schedules::*;

/// How big the figure's workload is.
#[derive(Debug, Clone)]
pub struct Sizes {
    /// Enabled triggers (in-process and in triggerd).
    pub triggers: usize,
    /// Of them, due in the same minute.
    pub due: usize,
    /// triggerd's `check_ms`.
    pub check_ms: u64,
    /// Timed starts of each triggerd (median).
    pub restarts: usize,
    /// How long idle CPU is measured.
    pub idle: Duration,
    /// Repetitions of the in-process timings (median).
    pub reps: usize,
    /// API clients creating triggers at once.
    pub creators: usize,
    /// Due minutes, one after the other (each with `due` triggers): each
    /// is one sample of where the check timer stands when a minute comes.
    pub rounds: usize,
    /// Bound on the runs of one due minute.
    pub runs_bound: Duration,
}

impl Sizes {
    pub fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                triggers: 1_000,
                due: 10,
                // A smoke run: a shorter check than the default, so the runs
                // end within seconds.
                check_ms: 500,
                restarts: 2,
                idle: Duration::from_secs(3),
                reps: 5,
                creators: 4,
                rounds: 1,
                runs_bound: Duration::from_secs(30),
            }
        } else {
            Sizes {
                triggers: 10_000,
                due: 200,
                check_ms: 5_000,
                restarts: 5,
                idle: Duration::from_secs(30),
                reps: 21,
                creators: 4,
                rounds: 3,
                runs_bound: Duration::from_secs(600),
            }
        }
    }
}

fn line(figure: impl Into<String>, measured: impl Into<String>) -> Line {
    Line {
        figure: figure.into(),
        measured: measured.into(),
        aim: None,
        baseline: None,
    }
}

fn with_baseline(mut l: Line, baseline: impl Into<String>, ratio: impl Into<String>) -> Line {
    l.baseline = Some((baseline.into(), ratio.into()));
    l
}

// The schedules

/// Runs figure 10; `say` prints a progress line.
pub async fn figure(sizes: &Sizes, say: &dyn Fn(String)) -> anyhow::Result<Vec<Line>> {
    let bin = crate::harness::bin_dir().join("triggerd");
    ensure!(
        bin.exists(),
        "triggerd is not built next to bench: `cargo build --release -p triggerd -p tandem-tests`"
    );
    let release = bin.components().any(|c| c.as_os_str() == "release");
    let n = sizes.triggers;
    let rounds = sizes.rounds.max(1);
    say(format!(
        "triggerd: {} ({}); load average {}; {n} triggers, {} due in each of {rounds} minute(s) from {}, \
         check_ms {}, max_runs 2",
        bin.display(),
        if release {
            "release build"
        } else {
            "not a release build: the figures mean little"
        },
        loadavg(),
        sizes.due,
        due_minute(0).1,
        sizes.check_ms
    ));
    let mut lines = in_process(sizes, say)?;

    // The box: engine-sim at full speed, chatd forwarding to the loaded triggerd.
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let dir = tempfile::tempdir()?;
    let socket = socket_in(dir.path());
    let chatd = Chatd::start(
        &sim.url(),
        &[("QSE_TRIGGERS_SOCKET", socket.to_string_lossy().as_ref())],
    )
    .await?;
    let mut loaded = made(&chatd, dir, sizes.check_ms)?;
    let mut empty = made(&chatd, tempfile::tempdir()?, sizes.check_ms)?;
    timed_start(&mut loaded, 0).await?;
    timed_start(&mut empty, 0).await?;
    let client = socket_client(&loaded.socket)?;
    let empty_client = socket_client(&empty.socket)?;

    // 10,000 triggers through the API.
    let set = stored_set(sizes)?;
    let checks_before = health(&client).await?["checks"].as_u64().unwrap_or(0);
    let (sum0, count0) = check_seconds(&client).await?;
    let began = Instant::now();
    let (took, rounds_of) = create_all(&client, &set, sizes.creators).await?;
    let create_wall = began.elapsed();
    let (sum1, count1) = check_seconds(&client).await?;
    ensure!(
        rounds_of.len() == sizes.due * rounds,
        "{} due triggers made",
        rounds_of.len()
    );
    let h = health(&client).await?;
    ensure!(
        h["enabled"].as_u64() == Some(n as u64),
        "triggerd holds {} enabled triggers, not {n}",
        h["enabled"]
    );
    let tenth = (n / 10).max(1);
    let (first, last) = (mean(&took[..tenth]), mean(&took[took.len() - tenth..]));
    say(format!(
        "{n} creates through the API ({} clients): {:.1} s, {:.0} creates/s; mean latency first {tenth}: {}, last {tenth}: {}; \
         {} checks meanwhile (each create wakes one), {:.2} ms each",
        sizes.creators,
        create_wall.as_secs_f64(),
        n as f64 / create_wall.as_secs_f64(),
        ms_d(first),
        ms_d(last),
        h["checks"].as_u64().unwrap_or(0) - checks_before,
        (sum1 - sum0) / (count1 - count0).max(1.0) * 1000.0
    ));
    lines.push(with_baseline(
        line(
            format!(
                "10. {n} trigger creates through triggerd's API ({} clients)",
                sizes.creators
            ),
            format!(
                "{:.1} s ({:.0}/s); the last {tenth} {} each",
                create_wall.as_secs_f64(),
                n as f64 / create_wall.as_secs_f64(),
                ms_d(last)
            ),
        ),
        format!("the first {tenth} {} each", ms_d(first)),
        ratio(last, first),
    ));
    let (list_took, health_took) = health_during_list(&client).await?;
    let started = Instant::now();
    health(&client).await?;
    let health_alone = started.elapsed();
    say(format!(
        "GET /v1/chat-app/triggers with {n} triggers: {}; a /health sent 5 ms into it answered in {} (alone: {})",
        ms_d(list_took),
        ms_d(health_took),
        ms_d(health_alone)
    ));

    // (a) start to /health, loaded and empty, alternately.
    let (mut loaded_starts, mut empty_starts) = (Vec::new(), Vec::new());
    for _ in 0..sizes.restarts.max(1) {
        empty_starts.push(timed_start(&mut empty, 0).await?);
        loaded_starts.push(timed_start(&mut loaded, n).await?);
    }
    let (ls, es) = (
        median_d(loaded_starts.clone()),
        median_d(empty_starts.clone()),
    );
    let lmax = loaded_starts.iter().max().copied().unwrap_or_default();
    say(format!(
        "start → /health: {n} triggers {} ({}), none {} ({})",
        ms_d(ls),
        loaded_starts
            .iter()
            .map(|d| ms_d(*d))
            .collect::<Vec<_>>()
            .join(", "),
        ms_d(es),
        empty_starts
            .iter()
            .map(|d| ms_d(*d))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let (open, read, plan, raw) = load_in_process(&loaded.data, &loaded.workspace, sizes.reps)?;
    say(format!(
        "the same load in-process on a copy of the store (median of {}): open {}, read {n} rows {} \
         (store::all_triggers; the same rows by column index, connection opened included: {}), {n} × Entry::new {}",
        sizes.reps,
        ms_d(open),
        ms_d(read),
        ms_d(raw),
        ms_d(plan)
    ));
    let per = ls.saturating_sub(es);
    lines.push(with_baseline(
        line(
            format!(
                "10. triggerd start → /health with {n} stored triggers (median of {})",
                sizes.restarts.max(1)
            ),
            format!(
                "median {} / max {}; in-process: read {} + plan {}",
                ms_d(ls),
                ms_d(lmax),
                ms_d(read),
                ms_d(plan)
            ),
        ),
        format!("the same start with 0 triggers {}", ms_d(es)),
        format!("+{} ({} per trigger)", ms_d(per), us_each(per, n)),
    ));

    // (c) idle, both at once, nothing due (the clock stands at BEFORE).
    let (lpid, epid) = (
        loaded.pid().context("triggerd's pid")?,
        empty.pid().context("triggerd's pid")?,
    );
    // Past the first check and the hourly purge that comes with it.
    let settle = Instant::now();
    while health(&client).await?["checks"].as_u64().unwrap_or(0) < 2
        || health(&empty_client).await?["checks"].as_u64().unwrap_or(0) < 2
    {
        ensure!(
            settle.elapsed() < Duration::from_secs(30) + Duration::from_millis(3 * sizes.check_ms),
            "no checks"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (li, ei) = tokio::join!(
        idle(lpid, &client, sizes.idle),
        idle(epid, &empty_client, sizes.idle)
    );
    let (li, ei) = (li?, ei?);
    let span = sizes.idle.as_secs_f64();
    say(format!(
        "idle {span:.0} s: {n} triggers: CPU {:.0} ms by /proc stat ({:.2} ms by schedstat, {:.3} % of a core), \
         {} checks of {:.2} ms mean, RSS {} (peak {}); 0 triggers: CPU {:.0} ms by stat ({:.2} ms by schedstat), \
         {} checks of {:.3} ms mean, RSS {} (peak {})",
        li.cpu * 1000.0,
        li.cpu_ns as f64 / 1e6,
        li.cpu_ns as f64 / 1e9 / span * 100.0,
        li.checks,
        li.check_mean * 1000.0,
        mib(li.rss),
        mib(li.peak),
        ei.cpu * 1000.0,
        ei.cpu_ns as f64 / 1e6,
        ei.checks,
        ei.check_mean * 1000.0,
        mib(ei.rss),
        mib(ei.peak)
    ));
    lines.push(with_baseline(
        line(
            format!(
                "10. triggerd idle CPU, {n} enabled triggers ({span:.0} s, check_ms {})",
                sizes.check_ms
            ),
            format!(
                "{:.1} ms CPU ({:.3} % of a core; utime+stime {:.0} ms); {} checks, {:.2} ms each",
                li.cpu_ns as f64 / 1e6,
                li.cpu_ns as f64 / 1e9 / span * 100.0,
                li.cpu * 1000.0,
                li.checks,
                li.check_mean * 1000.0
            ),
        ),
        format!(
            "0 triggers {:.1} ms CPU (utime+stime {:.0} ms); checks {:.2} ms each",
            ei.cpu_ns as f64 / 1e6,
            ei.cpu * 1000.0,
            ei.check_mean * 1000.0
        ),
        format!(
            "+{:.1} ms CPU in {span:.0} s",
            (li.cpu_ns as f64 - ei.cpu_ns as f64) / 1e6
        ),
    ));
    lines.push(with_baseline(
        line(
            format!("10. triggerd idle RSS, {n} enabled triggers"),
            mib(li.rss),
        ),
        format!("0 triggers {}", mib(ei.rss)),
        format!(
            "×{:.2}; +{:.2} KiB per trigger",
            li.rss as f64 / ei.rss.max(1) as f64,
            (li.rss as f64 - ei.rss as f64) / n as f64
        ),
    ));
    drop(empty);

    // The floor of (b)'s throughput: the same chats made by the bench
    // itself, 2 at a time, as fast as chatd and the engine go.
    let (direct, direct_wall) = direct_runs(&chatd.client(), sizes.due, 2).await?;
    let direct_len = median_d(direct.clone());
    let direct_rate = sizes.due as f64 / direct_wall.as_secs_f64();
    say(format!(
        "{} chats made straight through chatd's API by the bench, 2 at a time: {:.2} s, {direct_rate:.1} runs/s; \
         run median {} / max {}",
        sizes.due,
        direct_wall.as_secs_f64(),
        ms_d(direct_len),
        ms_d(direct.iter().max().copied().unwrap_or_default())
    ));

    // (b) the due minutes, one after the other.
    let conn = read_only(&loaded.data)?;
    ensure!(open_runs(&conn)?.0 == 0, "runs before the first due minute");
    let mut all = Vec::new();
    for r in 0..rounds {
        let round = due_round(r, sizes, &mut loaded, &chatd, &sim, &conn, &rounds_of).await?;
        let mut s: Vec<i64> = round.runs.iter().filter_map(|x| x.started).collect();
        let mut e: Vec<i64> = round.runs.iter().filter_map(|x| x.ended).collect();
        s.sort_unstable();
        e.sort_unstable();
        let due_ms = round.due_ms;
        let noticed = round.runs.iter().map(|x| x.queued).min().unwrap_or(due_ms) - due_ms;
        let makespan = e.last().copied().unwrap_or(due_ms) - s.first().copied().unwrap_or(due_ms);
        let late = dist(
            round
                .runs
                .iter()
                .map(|x| x.started.unwrap_or(0) - due_ms)
                .collect(),
        );
        let mut checks = s.clone();
        checks.dedup();
        say(format!(
            "minute {}: {} runs ({} done); noticed {noticed} ms after due; started − due {}; engine asked − due {} \
             ({} seen); first start → last end {makespan} ms; {} checks started runs ({} checks, {:.2} ms each); \
             triggerd CPU {:.2} s, chatd CPU {:.2} s",
            rounds_of_label(due_ms),
            round.runs.len(),
            round.runs.iter().filter(|x| x.status == "done").count(),
            dist_text(late),
            dist_text(dist(round.engine.iter().map(|t| t - due_ms).collect())),
            round.engine.len(),
            checks.len(),
            round.checks,
            round.check_mean * 1000.0,
            round.td_cpu,
            round.chatd_cpu
        ));
        all.push(round);
    }
    let runs: Vec<(&StoredRun, i64)> = all
        .iter()
        .flat_map(|r| r.runs.iter().map(move |x| (x, r.due_ms)))
        .collect();
    let total = runs.len();
    let done = runs.iter().filter(|(x, _)| x.status == "done").count();
    let late_start = dist(
        runs.iter()
            .map(|(x, due)| x.started.unwrap_or(0) - due)
            .collect(),
    );
    let noticed: Vec<i64> = all
        .iter()
        .map(|r| r.runs.iter().map(|x| x.queued).min().unwrap_or(r.due_ms) - r.due_ms)
        .collect();
    let in_line = dist(
        runs.iter()
            .map(|(x, _)| x.started.unwrap_or(0) - x.queued)
            .collect(),
    );
    let durations = dist(
        runs.iter()
            .map(|(x, _)| x.ended.unwrap_or(0) - x.started.unwrap_or(0))
            .collect(),
    );
    let late_engine = dist(
        all.iter()
            .flat_map(|r| r.engine.iter().map(move |t| t - r.due_ms))
            .collect(),
    );
    let engine_seen: usize = all.iter().map(|r| r.engine.len()).sum();
    // With 2 slots, the k-th start of a minute waits for its (k-2)-th end:
    // how long a freed slot stood empty while runs waited.
    let mut idle_slot = Vec::new();
    let mut makespan_sum = 0i64;
    for r in &all {
        let mut s: Vec<i64> = r.runs.iter().filter_map(|x| x.started).collect();
        let mut e: Vec<i64> = r.runs.iter().filter_map(|x| x.ended).collect();
        s.sort_unstable();
        e.sort_unstable();
        idle_slot.extend((2..s.len()).map(|k| (s[k] - e[k - 2]).max(0)));
        makespan_sum += (e.last().copied().unwrap_or(0) - s.first().copied().unwrap_or(0)).max(1);
    }
    let idle_slot = dist(idle_slot);
    let rate = total as f64 / (makespan_sum as f64 / 1000.0);
    say(format!(
        "all {total} runs ({done} done): queued − due (one value a minute) {}; started − queued {}; started − due {}; \
         engine asked − due {} ({engine_seen} seen); run length {}; a freed slot stood empty {}; {rate:.1} runs/s \
         (first start → last end of each minute; times on triggerd's clock to within {CLOCK_TICK_MS} ms)",
        noticed.iter().map(|v| format!("{v} ms")).collect::<Vec<_>>().join(", "),
        dist_text(in_line),
        dist_text(late_start),
        dist_text(late_engine),
        dist_text(durations),
        dist_text(idle_slot),
    ));
    let check = sizes.check_ms as i64;
    let vs_check = |v: i64| format!("{:.2}", v as f64 / check as f64);
    let per_minute = sizes.due;
    lines.push(with_baseline(
        line(
            format!(
                "10. lateness started − due, {per_minute} runs due in one minute among {n} (max_runs 2; {rounds} minute(s), {total} runs)"
            ),
            dist_text(late_start),
        ),
        format!("check interval {check} ms"),
        format!(
            "p50 ×{} / max ×{} check_ms",
            vs_check(late_start.p50),
            vs_check(late_start.max)
        ),
    ));
    lines.push(with_baseline(
        line(
            "10. queued − due (when triggerd notices the minute; one value per minute)",
            noticed
                .iter()
                .map(|v| format!("{v} ms"))
                .collect::<Vec<_>>()
                .join(", "),
        ),
        format!("check interval {check} ms"),
        format!(
            "max ×{} check_ms",
            vs_check(noticed.iter().max().copied().unwrap_or(0))
        ),
    ));
    lines.push(with_baseline(
        line(
            "10. engine asked − due (the run's chat request reached engine-sim)",
            dist_text(late_engine),
        ),
        format!("started − due {}", dist_text(late_start)),
        format!("+{} ms p50", late_engine.p50 - late_start.p50),
    ));
    lines.push(with_baseline(
        line(
            format!("10. run throughput of a due minute (chatd + engine-sim, tps=0; {total} runs)"),
            format!(
                "{rate:.1} runs/s; run length p50 {} ms; a freed slot waited p50 {} / max {} ms",
                durations.p50, idle_slot.p50, idle_slot.max
            ),
        ),
        format!(
            "the bench making the same chats through chatd, 2 at a time: {direct_rate:.1} runs/s, run median {}",
            ms_d(direct_len)
        ),
        format!("×{:.2}", rate / direct_rate),
    ));
    drop(conn);
    drop(loaded);
    drop(chatd);
    drop(sim);
    Ok(lines)
}

/// A due minute as `HH:MM` UTC.
fn rounds_of_label(due_ms: i64) -> String {
    Timestamp::from_millisecond(due_ms)
        .map(|t| t.strftime("%H:%M UTC").to_string())
        .unwrap_or_default()
}
