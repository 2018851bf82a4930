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

// ---------------------------------------------------------------------------
// The schedules
// ---------------------------------------------------------------------------

/// The zones the triggers are read in ("" is triggerd's UTC).
pub const ZONES: [&str; 4] = ["", "Europe/Rome", "America/New_York", "Australia/Lord_Howe"];

/// The forms of `mixed`, in the order of `k % FORMS.len()`.
pub const FORMS: [&str; 10] = [
    "daily",
    "weekdays",
    "weekly mon,thu",
    "weekly sat",
    "monthly",
    "cron */5 13-17 * * 1-5",
    "cron M H * * *",
    "cron 0,30 A-B * * 1-5",
    "cron */15 H 1-7 * *",
    "cron M H 1,15 1-6,9-12 *",
];

/// The `i`-th of the mixed schedules: its `when`, its zone and its form.
pub fn mixed(i: usize) -> (String, &'static str, usize) {
    let zone = ZONES[i % ZONES.len()];
    let k = i / ZONES.len();
    let form = k % FORMS.len();
    let hh = (k * 5 + k / 10) % 24;
    let mm = (k * 7) % 60;
    let when = match form {
        0 => format!("daily {hh:02}:{mm:02}"),
        1 => format!("weekdays {hh:02}:{mm:02}"),
        2 => format!("weekly mon,thu {hh:02}:{mm:02}"),
        3 => format!("weekly sat {hh:02}:{mm:02}"),
        4 => format!("monthly {} {hh:02}:{mm:02}", 1 + (k / 10) % 31),
        5 => "*/5 13-17 * * 1-5".to_string(),
        6 => format!("{mm} {hh} * * *"),
        7 => format!("0,30 {}-{} * * 1-5", hh % 12, hh % 12 + 8),
        8 => format!("*/15 {hh} 1-7 * *"),
        _ => format!("{mm} {hh} 1,15 1-6,9-12 *"),
    };
    (when, zone, form)
}

/// The schedules due at 09:MM UTC on 2030-01-08 (a Tuesday in January:
/// Rome is UTC+1, New York UTC−5, Lord Howe UTC+11), the `i`-th of eight.
pub fn due_form(i: usize, mm: usize) -> (String, &'static str) {
    match i % 8 {
        0 => (format!("daily 09:{mm:02}"), ""),
        1 => (format!("daily 10:{mm:02}"), "Europe/Rome"),
        2 => (format!("weekdays 04:{mm:02}"), "America/New_York"),
        3 => (format!("{mm} 20 * * *"), "Australia/Lord_Howe"),
        4 => (format!("weekly tue 09:{mm:02}"), ""),
        5 => (format!("monthly 8 10:{mm:02}"), "Europe/Rome"),
        6 => (format!("{mm} 4 * * 1-5"), "America/New_York"),
        _ => (format!("weekly mon,tue 20:{mm:02}"), "Australia/Lord_Howe"),
    }
}

/// The clock while triggers are made, restarted and idle: nothing is due.
pub const BEFORE: &str = "2030-01-08T08:00:00Z";

/// The minute of round `r`: 09:00, 09:10, 09:20, … UTC.
pub fn due_minute(r: usize) -> (usize, Timestamp) {
    let mm = 10 * r;
    (mm, at(&format!("2030-01-08T09:{mm:02}:00Z")))
}

fn at(text: &str) -> Timestamp {
    text.parse().expect("a constant timestamp")
}

/// What one trigger's plan costs, phase by phase (each a loop of its own).
struct Planned {
    parse: Duration,
    zone: Duration,
    next: Duration,
    /// The three together in one loop, as triggerd's start does them.
    total: Duration,
}

fn plan_all(pairs: &[(String, &str)], after: Timestamp) -> anyhow::Result<Planned> {
    let started = Instant::now();
    let mut found = 0usize;
    for (when, tz) in pairs {
        let s = Schedule::parse(when).map_err(|e| anyhow::anyhow!("{when:?}: {e}"))?;
        let z = schedule::zone(tz).map_err(|e| anyhow::anyhow!("{tz:?}: {e}"))?;
        found += usize::from(black_box(s.next_after(after, &z)).is_some());
    }
    let total = started.elapsed();
    ensure!(
        found == pairs.len(),
        "{} schedules have no next time",
        pairs.len() - found
    );
    let started = Instant::now();
    let schedules: Vec<Schedule> = pairs
        .iter()
        .map(|(w, _)| Schedule::parse(w).expect("parsed above"))
        .collect();
    let parse = started.elapsed();
    let started = Instant::now();
    let zones: Vec<TimeZone> = pairs
        .iter()
        .map(|(_, z)| schedule::zone(z).expect("looked up above"))
        .collect();
    let zone = started.elapsed();
    let started = Instant::now();
    for (s, z) in schedules.iter().zip(&zones) {
        black_box(s.next_after(after, z));
    }
    let next = started.elapsed();
    Ok(Planned {
        parse,
        zone,
        next,
        total,
    })
}

fn median_d(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn ms_d(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn us_each(d: Duration, n: usize) -> String {
    format!("{:.2} µs", d.as_secs_f64() * 1e6 / n.max(1) as f64)
}

fn ratio(a: Duration, b: Duration) -> String {
    format!("×{:.1}", a.as_secs_f64() / b.as_secs_f64().max(1e-9))
}

/// Part (a) in-process: the mixed schedules against `daily 09:00` UTC and
/// against bare zone conversions.
fn in_process(sizes: &Sizes, say: &dyn Fn(String)) -> anyhow::Result<Vec<Line>> {
    let n = sizes.triggers;
    let after = at(BEFORE);
    let mixed_pairs: Vec<(String, &str)> = (0..n)
        .map(|i| {
            let (w, z, _) = mixed(i);
            (w, z)
        })
        .collect();
    let floor_pairs: Vec<(String, &str)> =
        (0..n).map(|_| ("daily 09:00".to_string(), "")).collect();
    // A warm-up of each: the zone files are read and cached on first use.
    plan_all(&mixed_pairs, after)?;
    plan_all(&floor_pairs, after)?;
    let zones: Vec<TimeZone> = mixed_pairs
        .iter()
        .map(|(_, z)| schedule::zone(z).expect("a known zone"))
        .collect();
    let instants: Vec<Timestamp> = (0..n)
        .map(|i| after + jiff::SignedDuration::from_secs(i as i64 * 997))
        .collect();
    let (mut mixed_runs, mut floor_runs, mut conversions) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..sizes.reps.max(1) {
        mixed_runs.push(plan_all(&mixed_pairs, after)?);
        floor_runs.push(plan_all(&floor_pairs, after)?);
        let started = Instant::now();
        for (t, z) in instants.iter().zip(&zones) {
            black_box(z.to_datetime(*t));
        }
        conversions.push(started.elapsed());
    }
    let pick =
        |runs: &[Planned], f: fn(&Planned) -> Duration| median_d(runs.iter().map(f).collect());
    let (total, parse, zone, next) = (
        pick(&mixed_runs, |p| p.total),
        pick(&mixed_runs, |p| p.parse),
        pick(&mixed_runs, |p| p.zone),
        pick(&mixed_runs, |p| p.next),
    );
    let floor = pick(&floor_runs, |p| p.total);
    let floor_next = pick(&floor_runs, |p| p.next);
    let conv = median_d(conversions);
    say(format!(
        "in-process, {n} mixed schedules (median of {}): total {} ({} each); parse {}, zone lookup {}, next_after {}",
        sizes.reps,
        ms_d(total),
        us_each(total, n),
        ms_d(parse),
        ms_d(zone),
        ms_d(next)
    ));
    say(format!(
        "in-process, {n} × `daily 09:00` UTC: total {} ({} each), of it next_after {}; {n} zone conversions (Timestamp → civil, the mixed zones): {} ({} each)",
        ms_d(floor),
        us_each(floor, n),
        ms_d(floor_next),
        ms_d(conv),
        us_each(conv, n)
    ));
    // next_after per form and per zone, for what dominates.
    let mut by_form = vec![(Duration::ZERO, 0usize); FORMS.len()];
    let mut by_zone = vec![(Duration::ZERO, 0usize); ZONES.len()];
    for i in 0..n {
        let (w, z, form) = mixed(i);
        let s = Schedule::parse(&w).expect("parsed above");
        let tz = schedule::zone(z).expect("looked up above");
        let started = Instant::now();
        black_box(s.next_after(after, &tz));
        let took = started.elapsed();
        by_form[form].0 += took;
        by_form[form].1 += 1;
        let zi = i % ZONES.len();
        by_zone[zi].0 += took;
        by_zone[zi].1 += 1;
    }
    say(format!(
        "next_after by form (mean): {}",
        FORMS
            .iter()
            .zip(&by_form)
            .map(|(f, (d, c))| format!("{f} {}", us_each(*d, *c)))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    say(format!(
        "next_after by zone (mean): {}",
        ZONES
            .iter()
            .zip(&by_zone)
            .map(|(z, (d, c))| format!(
                "{} {}",
                if z.is_empty() { "UTC" } else { z },
                us_each(*d, *c)
            ))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    Ok(vec![with_baseline(
        line(
            format!(
                "10. next due times of {n} mixed schedules, in-process (parse + zone + next_after)"
            ),
            format!(
                "{} total, {} per trigger (parse {}, zone {}, next_after {})",
                ms_d(total),
                us_each(total, n),
                ms_d(parse),
                ms_d(zone),
                ms_d(next)
            ),
        ),
        format!(
            "{n} × `daily 09:00` UTC {} ({} each); {n} zone conversions {}",
            ms_d(floor),
            us_each(floor, n),
            ms_d(conv)
        ),
        format!(
            "{} the daily floor, {} the conversions",
            ratio(total, floor),
            ratio(total, conv)
        ),
    )])
}

// ---------------------------------------------------------------------------
// The real triggerd
// ---------------------------------------------------------------------------

fn socket_client(socket: &Path) -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .unix_socket(socket.to_path_buf())
        .build()?)
}

async fn call(
    client: &reqwest::Client,
    method: reqwest::Method,
    path: &str,
    body: Option<&Value>,
) -> anyhow::Result<(u16, Value, String)> {
    let mut request = client
        .request(method, format!("http://triggerd{path}"))
        .timeout(Duration::from_secs(30));
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().await?;
    let status = response.status().as_u16();
    let text = response.text().await?;
    let value = serde_json::from_str(&text).unwrap_or(Value::Null);
    Ok((status, value, text))
}

async fn health(client: &reqwest::Client) -> anyhow::Result<Value> {
    let (status, body, _) = call(client, reqwest::Method::GET, "/health", None).await?;
    ensure!(status == 200, "/health answered {status}");
    Ok(body)
}

/// `tandem_triggers_check_seconds` sum and count from `/metrics`.
async fn check_seconds(client: &reqwest::Client) -> anyhow::Result<(f64, f64)> {
    let (status, _, text) = call(client, reqwest::Method::GET, "/metrics", None).await?;
    ensure!(status == 200, "/metrics answered {status}");
    let value = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Ok((
        value("tandem_triggers_check_seconds_sum"),
        value("tandem_triggers_check_seconds_count"),
    ))
}

/// A triggerd for `chatd` in its own temp folder, checking every
/// `check_ms`, at most 2 runs at once, its clock file at `BEFORE`.
fn made(chatd: &Chatd, dir: tempfile::TempDir, check_ms: u64) -> anyhow::Result<Triggerd> {
    let td = Triggerd::new(dir, chatd, "max_runs = 2\n")?;
    let text = std::fs::read_to_string(&td.config)?;
    ensure!(
        text.contains("check_ms = 50\n"),
        "the harness's config changed:\n{text}"
    );
    std::fs::write(
        &td.config,
        text.replace("check_ms = 50\n", &format!("check_ms = {check_ms}\n")),
    )?;
    td.set_clock(BEFORE)?;
    Ok(td)
}

/// Starts (or restarts) `td` and times spawn → the first `/health` answer,
/// which must count `expect` triggers.
async fn timed_start(td: &mut Triggerd, expect: usize) -> anyhow::Result<Duration> {
    if td.running() {
        td.sigterm(Duration::from_secs(10))?;
    }
    let client = socket_client(&td.socket)?;
    let started = Instant::now();
    td.spawn()?;
    let deadline = started + Duration::from_secs(60);
    loop {
        if let Ok((200, body, _)) = call(&client, reqwest::Method::GET, "/health", None).await {
            let took = started.elapsed();
            ensure!(
                body["triggers"].as_u64() == Some(expect as u64),
                "triggerd holds {} triggers, not {expect}",
                body["triggers"]
            );
            return Ok(took);
        }
        ensure!(td.running(), "triggerd exited:\n{}", td.log());
        ensure!(
            Instant::now() < deadline,
            "triggerd did not answer /health within 60 s:\n{}",
            td.log()
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// How often the shifted clock file is rewritten: triggerd's times are
/// wall times to within this.
pub const CLOCK_TICK_MS: u64 = 5;

/// The clock file kept at the system clock shifted by a fixed offset,
/// rewritten every `CLOCK_TICK_MS` by a thread of its own until dropped (or `bound`).
struct ShiftedClock {
    offset_ms: i64,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn write_clock(path: &Path, ms: i64) -> std::io::Result<()> {
    let tmp = path.with_extension("bench-tmp");
    let t = Timestamp::from_millisecond(ms).unwrap_or(Timestamp::UNIX_EPOCH);
    std::fs::write(&tmp, t.to_string())?;
    std::fs::rename(&tmp, path)
}

impl ShiftedClock {
    /// Starts the clock at `from` (unix ms) now.
    fn start(path: PathBuf, from: i64, bound: Duration) -> anyhow::Result<ShiftedClock> {
        let offset_ms = from - Timestamp::now().as_millisecond();
        write_clock(&path, from)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let until = Instant::now() + bound;
            while !flag.load(Ordering::Relaxed) && Instant::now() < until {
                let _ = write_clock(&path, Timestamp::now().as_millisecond() + offset_ms);
                std::thread::sleep(Duration::from_millis(CLOCK_TICK_MS));
            }
        });
        Ok(ShiftedClock {
            offset_ms,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for ShiftedClock {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One run as triggers.sqlite3 has it (unix ms on triggerd's clock).
struct StoredRun {
    trigger: String,
    status: String,
    due: i64,
    queued: i64,
    started: Option<i64>,
    ended: Option<i64>,
}

fn read_only(data: &Path) -> anyhow::Result<rusqlite::Connection> {
    let path = data.join("triggers.sqlite3");
    rusqlite::Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .with_context(|| format!("opening {} read-only", path.display()))
}

fn stored_runs(conn: &rusqlite::Connection) -> anyhow::Result<Vec<StoredRun>> {
    let mut stmt = conn.prepare(
        "SELECT trigger_id, status, due_ms, queued_ms, started_ms, ended_ms FROM runs ORDER BY rowid",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(StoredRun {
            trigger: r.get(0)?,
            status: r.get(1)?,
            due: r.get(2)?,
            queued: r.get(3)?,
            started: r.get(4)?,
            ended: r.get(5)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Runs stored, and of them queued or running.
fn open_runs(conn: &rusqlite::Connection) -> anyhow::Result<(i64, i64)> {
    Ok(conn.query_row(
        "SELECT COUNT(*), COALESCE(SUM(status IN ('queued', 'running')), 0) FROM runs",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?)
}

#[derive(Debug, Clone, Copy)]
struct Dist {
    p50: i64,
    p99: i64,
    max: i64,
}

fn quantile(sorted: &[i64], q: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn dist(mut v: Vec<i64>) -> Dist {
    v.sort_unstable();
    Dist {
        p50: quantile(&v, 0.5),
        p99: quantile(&v, 0.99),
        max: v.last().copied().unwrap_or(0),
    }
}

fn msi(v: i64) -> String {
    format!("{v} ms")
}

fn dist_text(d: Dist) -> String {
    format!(
        "p50 {} / p99 {} / max {}",
        msi(d.p50),
        msi(d.p99),
        msi(d.max)
    )
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// The body of the `i`-th trigger the figure stores.
fn body(i: usize, when: &str, tz: &str) -> Value {
    json!({
        "name": format!("bench {i}"),
        "when": when,
        "tz": tz,
        "prompt": format!("Bench trigger {i}: summarise the notes that changed since the last run and list what needs me."),
    })
}

/// One trigger of the stored set: its schedule, and the round it is due in
/// (`None`: not due while the figure runs).
struct Stored {
    when: String,
    tz: &'static str,
    round: Option<usize>,
}

/// The stored set: `due` triggers due in each round's minute, the rest
/// mixed schedules whose next time after `BEFORE` is over an hour after the
/// last round's minute (nothing else runs while the figure goes on).
fn stored_set(sizes: &Sizes) -> anyhow::Result<Vec<Stored>> {
    let before = at(BEFORE);
    let (_, last) = due_minute(sizes.rounds.max(1) - 1);
    let quiet_from = last + jiff::SignedDuration::from_secs(3_600);
    let mut set = Vec::with_capacity(sizes.triggers);
    for r in 0..sizes.rounds.max(1) {
        let (mm, due) = due_minute(r);
        for i in 0..sizes.due {
            let (when, tz) = due_form(i, mm);
            let s = Schedule::parse(&when).map_err(|e| anyhow::anyhow!("{when}: {e}"))?;
            let z = schedule::zone(tz).map_err(|e| anyhow::anyhow!("{tz}: {e}"))?;
            ensure!(
                s.next_after(before, &z) == Some(due),
                "{when} in {tz:?} is not due at {due}"
            );
            set.push(Stored {
                when,
                tz,
                round: Some(r),
            });
        }
    }
    ensure!(
        set.len() <= sizes.triggers,
        "more due triggers than triggers"
    );
    let mut i = 0usize;
    while set.len() < sizes.triggers {
        ensure!(i < sizes.triggers * 4, "too few quiet schedules");
        let (when, tz, _) = mixed(i);
        i += 1;
        let s = Schedule::parse(&when).map_err(|e| anyhow::anyhow!("{when}: {e}"))?;
        let z = schedule::zone(tz).map_err(|e| anyhow::anyhow!("{tz}: {e}"))?;
        if s.next_after(before, &z).is_some_and(|t| t > quiet_from) {
            set.push(Stored {
                when,
                tz,
                round: None,
            });
        }
    }
    Ok(set)
}

/// Creates `set` through the API with `clients` at once; each create's
/// latency in completion order, and the round of each due trigger by id.
async fn create_all(
    client: &reqwest::Client,
    set: &[Stored],
    clients: usize,
) -> anyhow::Result<(Vec<Duration>, HashMap<String, usize>)> {
    let made = futures_util::stream::iter(set.iter().enumerate())
        .map(|(i, t)| async move {
            let b = body(i, &t.when, t.tz);
            let started = Instant::now();
            let (status, answer, text) = call(
                client,
                reqwest::Method::POST,
                "/v1/chat-app/triggers",
                Some(&b),
            )
            .await?;
            let took = started.elapsed();
            ensure!(status == 201, "creating {b}: {status} {text}");
            let id = answer["id"].as_str().unwrap_or_default().to_string();
            anyhow::Ok((took, t.round.map(|r| (id, r))))
        })
        .buffer_unordered(clients.max(1))
        .collect::<Vec<_>>()
        .await;
    let mut took = Vec::with_capacity(made.len());
    let mut due = HashMap::new();
    for m in made {
        let (t, id) = m?;
        took.push(t);
        due.extend(id);
    }
    Ok((took, due))
}

fn mean(v: &[Duration]) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.iter().sum::<Duration>() / v.len() as u32
}

/// CPU (stat ticks and schedstat), RSS (last and peak) and checks of a
/// triggerd over `span`.
struct Idle {
    cpu: f64,
    cpu_ns: u64,
    rss: u64,
    peak: u64,
    checks: u64,
    check_mean: f64,
}

async fn idle(pid: u32, client: &reqwest::Client, span: Duration) -> anyhow::Result<Idle> {
    let checks0 = health(client).await?["checks"].as_u64().unwrap_or(0);
    let (sum0, count0) = check_seconds(client).await?;
    let cpu0 = cpu_secs(pid);
    let mut precise = crate::procstat::ThreadCpu::start(pid);
    let started = Instant::now();
    let mut peak = 0;
    while started.elapsed() < span {
        peak = peak.max(rss_kib(pid).unwrap_or(0));
        precise.sample();
        tokio::time::sleep(Duration::from_millis(250).min(span)).await;
    }
    precise.sample();
    let cpu = cpu_secs(pid) - cpu0;
    let rss = rss_kib(pid).context("triggerd's VmRSS")?;
    // The two calls below are after the window: they are not in its CPU.
    let checks = health(client).await?["checks"].as_u64().unwrap_or(0) - checks0;
    let (sum1, count1) = check_seconds(client).await?;
    Ok(Idle {
        cpu,
        cpu_ns: precise.total_ns,
        rss,
        peak: peak.max(rss),
        checks,
        check_mean: if count1 > count0 {
            (sum1 - sum0) / (count1 - count0)
        } else {
            0.0
        },
    })
}

/// The index `i` in a logged chat request's "Bench trigger {i}:".
fn bench_index(body: &Value) -> Option<usize> {
    let text = body.to_string();
    let at = text.find("Bench trigger ")? + "Bench trigger ".len();
    let digits: String = text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// The first message triggerd sends for a trigger with `prompt` and no
/// folder rules (`runner::compose`).
fn first_message(prompt: &str) -> String {
    format!("{prompt}\n\n{}", triggerd::runner::CLOSING)
}

/// One run as triggerd makes it, made by the bench straight through chatd's
/// API: the chat, its first message, its events to `run.finished`, the
/// snapshot. Its length.
async fn direct_run(client: &Client, i: usize) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let made = client
        .post(
            "/conversations",
            json!({"title": format!("direct {i}"), "origin": "trigger", "workspace": "shared"}),
        )
        .await?;
    ensure!(made.status == 201, "making a chat: {made:?}");
    let chat = made.body["id"]
        .as_str()
        .context("the chat's id")?
        .to_string();
    let mut events = client.events(&chat, 0).await?;
    let prompt = format!(
        "Direct chat {i}: summarise the notes that changed since the last run and list what needs me."
    );
    let sent = client.send(&chat, &first_message(&prompt)).await?;
    let run = sent["run_id"].as_str().context("the run's id")?.to_string();
    events
        .read_until(Duration::from_secs(30), |e| {
            e.kind == "run.finished" && e.data["run_id"] == run.as_str()
        })
        .await?;
    client.snapshot(&chat).await?;
    Ok(started.elapsed())
}

/// `count` direct runs, `slots` at a time: their lengths and the wall time.
async fn direct_runs(
    client: &Client,
    count: usize,
    slots: usize,
) -> anyhow::Result<(Vec<Duration>, Duration)> {
    let began = Instant::now();
    let done = futures_util::stream::iter(0..count)
        .map(|i| direct_run(client, i))
        .buffer_unordered(slots.max(1))
        .collect::<Vec<_>>()
        .await;
    let wall = began.elapsed();
    Ok((done.into_iter().collect::<anyhow::Result<Vec<_>>>()?, wall))
}

/// The same rows as `store::all_triggers` reads, each column taken by its
/// index instead of its name: how many rows.
fn read_by_index(conn: &rusqlite::Connection) -> anyhow::Result<usize> {
    let mut stmt = conn.prepare("SELECT * FROM triggers ORDER BY created_ms, id")?;
    let rows = stmt.query_map([], |r| {
        let mut texts = Vec::with_capacity(9);
        let mut numbers = Vec::with_capacity(8);
        for i in 0..17 {
            match r.get_ref(i)? {
                rusqlite::types::ValueRef::Text(t) => {
                    texts.push(String::from_utf8_lossy(t).into_owned())
                }
                rusqlite::types::ValueRef::Integer(v) => numbers.push(v),
                _ => {}
            }
        }
        Ok((texts, numbers))
    })?;
    let mut n = 0;
    for row in rows {
        black_box(row?);
        n += 1;
    }
    Ok(n)
}

/// What triggerd's start does with the stored triggers, in-process on a
/// copy of its store: open it, read every trigger, make every `Entry`; and
/// the same rows read by column index.
fn load_in_process(
    data: &Path,
    workspace: &Path,
    reps: usize,
) -> anyhow::Result<(Duration, Duration, Duration, Duration)> {
    let scratch = tempfile::tempdir()?;
    let copy = scratch.path().join("triggers.sqlite3");
    read_only(data)?.execute("VACUUM INTO ?1", [copy.to_string_lossy()])?;
    let (mut opens, mut reads, mut plans, mut raw) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..reps.max(1) + 1 {
        let started = Instant::now();
        let store = triggerd::store::open(&copy)?;
        let opened = started.elapsed();
        let started = Instant::now();
        let triggers = store.call_now(|conn| triggerd::store::all_triggers(conn))?;
        let read = started.elapsed();
        let started = Instant::now();
        let by_index = read_by_index(&rusqlite::Connection::open(&copy)?)?;
        raw.push(started.elapsed());
        ensure!(
            by_index == triggers.len(),
            "{by_index} rows by index, {} by name",
            triggers.len()
        );
        let started = Instant::now();
        let entries: HashMap<String, triggerd::scheduler::Entry> = triggers
            .into_iter()
            .map(|t| (t.id.clone(), triggerd::scheduler::Entry::new(t, workspace)))
            .collect();
        let planned = started.elapsed();
        black_box(&entries);
        opens.push(opened);
        reads.push(read);
        plans.push(planned);
    }
    // The first round warmed the page cache and the zones: left out.
    Ok((
        median_d(opens[1..].to_vec()),
        median_d(reads[1..].to_vec()),
        median_d(plans[1..].to_vec()),
        median_d(raw[1..].to_vec()),
    ))
}

/// What one due minute gave.
struct Round {
    due_ms: i64,
    runs: Vec<StoredRun>,
    /// When each run's chat request reached the engine (triggerd's clock).
    engine: Vec<i64>,
    td_cpu: f64,
    chatd_cpu: f64,
    /// Checks made meanwhile, and their mean length (seconds).
    checks: u64,
    check_mean: f64,
}

/// Round `r`: the clock set 2 s before its minute and kept going with the
/// system clock until every run of the minute has ended.
async fn due_round(
    r: usize,
    sizes: &Sizes,
    loaded: &mut Triggerd,
    chatd: &Chatd,
    sim: &Sim,
    conn: &rusqlite::Connection,
    rounds_of: &HashMap<String, usize>,
) -> anyhow::Result<Round> {
    let (_, due) = due_minute(r);
    let due_ms = due.as_millisecond();
    let pid = loaded.pid().context("triggerd's pid")?;
    reqwest::Client::new()
        .delete(format!("{}/sim/requests", sim.url()))
        .send()
        .await?;
    let before = open_runs(conn)?.0 as usize;
    ensure!(before == r * sizes.due, "{before} runs before round {r}");
    // The last run's end woke a check, which restarted triggerd's timer: a
    // pause drawn from [0, check_ms) puts the minute anywhere in the cycle,
    // not where the bench's own polling would.
    tokio::time::sleep(Duration::from_millis(
        rand::random::<u64>() % sizes.check_ms.max(1),
    ))
    .await;
    let (td_cpu0, chatd_cpu0) = (cpu_secs(pid), chatd.pid().map(cpu_secs).unwrap_or(0.0));
    let td_client = socket_client(&loaded.socket)?;
    let (sum0, count0) = check_seconds(&td_client).await?;
    let clock = ShiftedClock::start(
        loaded.clock.clone(),
        due_ms - 2_000,
        sizes.runs_bound + Duration::from_secs(60),
    )?;
    let deadline = Instant::now() + sizes.runs_bound;
    loop {
        let (all, open) = open_runs(conn)?;
        if all as usize >= before + sizes.due && open == 0 {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "round {r}: {} of {} due runs ended within {:?} ({open} queued or running)",
                all as usize - before - open as usize,
                sizes.due,
                sizes.runs_bound
            );
        }
        ensure!(loaded.running(), "triggerd exited:\n{}", loaded.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (td_cpu, chatd_cpu) = (
        cpu_secs(pid) - td_cpu0,
        chatd.pid().map(cpu_secs).unwrap_or(0.0) - chatd_cpu0,
    );
    let (sum1, count1) = check_seconds(&td_client).await?;
    let offset = clock.offset_ms;
    // The clock stops where it is: nothing is due until the next round's minute.
    drop(clock);
    let runs: Vec<StoredRun> = stored_runs(conn)?.into_iter().skip(before).collect();
    ensure!(
        runs.iter()
            .all(|run| rounds_of.get(&run.trigger) == Some(&r) && run.due == due_ms),
        "round {r}: a run of a trigger not due at {due} ran"
    );
    ensure!(
        runs.len() == sizes.due,
        "round {r}: {} runs for {} due triggers",
        runs.len(),
        sizes.due
    );
    ensure!(
        runs.iter()
            .all(|run| run.started.is_some() && run.ended.is_some()),
        "round {r}: a run without its times"
    );
    let logged = sim.get("/sim/requests").await?;
    let mut by_index: HashMap<usize, i64> = HashMap::new();
    for q in logged.as_array().map(Vec::as_slice).unwrap_or_default() {
        if let (Some(i), Some(at_us)) = (bench_index(&q["body"]), q["at_us"].as_i64()) {
            let t = at_us / 1000 + offset;
            let first = by_index.entry(i).or_insert(t);
            *first = (*first).min(t);
        }
    }
    Ok(Round {
        due_ms,
        runs,
        engine: by_index.into_values().collect(),
        td_cpu,
        chatd_cpu,
        checks: (count1 - count0) as u64,
        check_mean: (sum1 - sum0) / (count1 - count0).max(1.0),
    })
}

/// While a list of every trigger is built, how long `/health` waits (both
/// take the lock on the triggers held in memory).
async fn health_during_list(client: &reqwest::Client) -> anyhow::Result<(Duration, Duration)> {
    let list = async {
        let started = Instant::now();
        let (status, _, _) =
            call(client, reqwest::Method::GET, "/v1/chat-app/triggers", None).await?;
        ensure!(status == 200, "the list answered {status}");
        anyhow::Ok(started.elapsed())
    };
    let probe = async {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let started = Instant::now();
        health(client).await?;
        anyhow::Ok(started.elapsed())
    };
    let (l, h) = tokio::join!(list, probe);
    Ok((l?, h?))
}

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
