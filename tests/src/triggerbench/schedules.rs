//! The schedules of figure 10: the mixed forms and zones of 10,000 triggers,
//! the ones due in one minute, and their next times planned in-process.

use super::*;

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

pub(super) fn at(text: &str) -> Timestamp {
    text.parse().expect("a constant timestamp")
}

/// What one trigger's plan costs, phase by phase (each a loop of its own).
pub(super) struct Planned {
    pub(super) parse: Duration,
    pub(super) zone: Duration,
    pub(super) next: Duration,
    /// The three together in one loop, as triggerd's start does them.
    pub(super) total: Duration,
}

pub(super) fn plan_all(pairs: &[(String, &str)], after: Timestamp) -> anyhow::Result<Planned> {
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
