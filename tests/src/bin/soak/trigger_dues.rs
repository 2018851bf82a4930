//! The triggers the triggerd part makes (`plan`), and what it holds
//! triggerd to (`Inv::Triggers`): the due minutes of each schedule, found
//! by a reference of its own that looks at every minute's civil time in
//! the trigger's zone (not triggerd's next-time function), and the rule triggerd states for a downtime
//! (docs/triggers.md): a check at clock `x` queues one run for each
//! schedule's latest due time in (its last check, `x`]; missed times before
//! it never run. So, for a due minute `d` whose next due minute is `d2`:
//!
//! - a check a live triggerd surely made (two checks counted after the
//!   clock was set) at a clock in [d, d2) means `d` ran exactly once;
//! - `d` may run only if some live triggerd could have checked at a clock
//!   in [d, d2): a minute passed wholly while triggerd was dead folds into
//!   the next one;
//! - no minute runs twice, and no run is for a time that was not due.

use super::*;

use jiff::civil::Weekday;
use jiff::tz::TimeZone;

/// A schedule as the soak writes it, with the reference of when it is due.
#[derive(Clone, Debug)]
pub(crate) enum Due {
    /// Cron's minute field (a list), and its hour field when not `*`.
    Minutes {
        minutes: Vec<i8>,
        hours: Option<Vec<i8>>,
    },
    Daily {
        h: i8,
        m: i8,
    },
    Weekdays {
        h: i8,
        m: i8,
    },
    Weekly {
        days: Vec<Weekday>,
        h: i8,
        m: i8,
    },
    /// A day past the month's end runs on its last day.
    Monthly {
        day: i8,
        h: i8,
        m: i8,
    },
    Once {
        at: jiff::civil::DateTime,
    },
}

const MINUTE_MS: i64 = 60_000;

impl Due {
    /// Whether the minute starting at `ms` (unix) is due in `tz`.
    pub(crate) fn due_at(&self, ms: i64, tz: &TimeZone) -> bool {
        let Ok(t) = jiff::Timestamp::from_millisecond(ms) else {
            return false;
        };
        let z = tz.to_datetime(t);
        let (h, m) = (z.hour(), z.minute());
        match self {
            Due::Minutes { minutes, hours } => {
                minutes.contains(&m) && hours.as_ref().is_none_or(|hs| hs.contains(&h))
            }
            Due::Daily { h: dh, m: dm } => (h, m) == (*dh, *dm),
            Due::Weekdays { h: dh, m: dm } => {
                (h, m) == (*dh, *dm) && !matches!(z.weekday(), Weekday::Saturday | Weekday::Sunday)
            }
            Due::Weekly { days, h: dh, m: dm } => {
                (h, m) == (*dh, *dm) && days.contains(&z.weekday())
            }
            Due::Monthly { day, h: dh, m: dm } => {
                (h, m) == (*dh, *dm) && z.day() == (*day).min(z.date().days_in_month())
            }
            Due::Once { at } => z == *at,
        }
    }

    /// The due minutes (unix ms) after `after_ms`, up to `until_ms`.
    pub(crate) fn minutes(&self, tz: &TimeZone, after_ms: i64, until_ms: i64) -> Vec<i64> {
        let mut m = (after_ms.div_euclid(MINUTE_MS) + 1) * MINUTE_MS;
        let mut out = Vec::new();
        while m <= until_ms {
            if self.due_at(m, tz) {
                out.push(m);
            }
            m += MINUTE_MS;
        }
        out
    }
}

pub(crate) const TRIGGERS: usize = 500;
pub(crate) const FOLDERS: usize = 8;
pub(crate) const ZONES: [&str; 4] = [
    "UTC",
    "Europe/Rome",
    "America/New_York",
    "Australia/Lord_Howe",
];

/// A trigger the part makes.
pub(crate) struct Planned {
    pub(crate) name: String,
    pub(crate) when: String,
    pub(crate) tz: &'static str,
    pub(crate) due: Option<Due>,
    /// File triggers: the folder's index.
    pub(crate) folder: Option<usize>,
}

/// The 500 triggers of a run: one due every minute, a few every 5 or 15,
/// 40 hourly, 15 daily, 5 on weekdays, the rest rarely or never due within
/// a day, and 8 on folders.
pub(crate) fn plan(rng: &mut StdRng) -> Vec<Planned> {
    let mut out = Vec::new();
    let add = |out: &mut Vec<Planned>, name: String, when: String, tz: &'static str, due: Due| {
        out.push(Planned {
            name,
            when,
            tz,
            due: Some(due),
            folder: None,
        })
    };
    add(
        &mut out,
        "every minute".into(),
        "* * * * *".into(),
        "UTC",
        Due::Minutes {
            minutes: (0..60).collect(),
            hours: None,
        },
    );
    for (i, step) in [5i8, 5, 15, 15].into_iter().enumerate() {
        let o = rng.random_range(0..step);
        add(
            &mut out,
            format!("every {step} #{i}"),
            format!("{o}-59/{step} * * * *"),
            "UTC",
            Due::Minutes {
                minutes: (o..60).step_by(step as usize).collect(),
                hours: None,
            },
        );
    }
    for i in 0..40 {
        let m = rng.random_range(0..60i8);
        add(
            &mut out,
            format!("hourly #{i}"),
            format!("{m} * * * *"),
            "UTC",
            Due::Minutes {
                minutes: vec![m],
                hours: None,
            },
        );
    }
    for i in 0..15 {
        let (h, m) = (rng.random_range(0..24i8), rng.random_range(0..60i8));
        let tz = ZONES[i % ZONES.len()];
        add(
            &mut out,
            format!("daily #{i}"),
            format!("daily {h:02}:{m:02}"),
            tz,
            Due::Daily { h, m },
        );
    }
    for i in 0..5 {
        let m = rng.random_range(0..60i8);
        add(
            &mut out,
            format!("weekdays #{i}"),
            format!("weekdays 09:{m:02}"),
            "UTC",
            Due::Weekdays { h: 9, m },
        );
    }
    use jiff::civil::Weekday;
    let rare = TRIGGERS - FOLDERS - out.len();
    for i in 0..rare {
        let (h, m) = (rng.random_range(0..24i8), rng.random_range(0..60i8));
        let tz = ZONES[i % ZONES.len()];
        match i % 4 {
            0 => add(
                &mut out,
                format!("weekend #{i}"),
                format!("weekly sat,sun {h:02}:{m:02}"),
                tz,
                Due::Weekly {
                    days: vec![Weekday::Saturday, Weekday::Sunday],
                    h,
                    m,
                },
            ),
            1 => {
                let day = rng.random_range(10..=31i8);
                add(
                    &mut out,
                    format!("monthly #{i}"),
                    format!("monthly {day} {h:02}:{m:02}"),
                    tz,
                    Due::Monthly { day, h, m },
                )
            }
            2 => {
                let day = rng.random_range(10..=28i8);
                let at = jiff::civil::date(2026, 6, day).at(h, m, 0, 0);
                add(
                    &mut out,
                    format!("once #{i}"),
                    format!("once 2026-06-{day:02} {h:02}:{m:02}"),
                    tz,
                    Due::Once { at },
                )
            }
            _ => {
                let hours = vec![rng.random_range(0..24i8)];
                add(
                    &mut out,
                    format!("cron #{i}"),
                    format!("{m} {} * * *", hours[0]),
                    "UTC",
                    Due::Minutes {
                        minutes: vec![m],
                        hours: Some(hours),
                    },
                )
            }
        }
    }
    for f in 0..FOLDERS {
        out.push(Planned {
            name: format!("files #{f}"),
            when: String::new(),
            tz: "UTC",
            due: None,
            folder: Some(f),
        });
    }
    out
}

/// One run of a trigger as triggers.sqlite3 holds it.
#[derive(Clone, Debug)]
pub(crate) struct StoredRun {
    pub(crate) id: String,
    pub(crate) trigger_id: String,
    pub(crate) due_key: String,
    pub(crate) cause: String,
    pub(crate) due_ms: i64,
    pub(crate) file: Option<String>,
    pub(crate) status: String,
}

/// The clock values triggerd could have checked at (a live process saw
/// them), and whether a check surely happened at each.
#[derive(Clone, Debug, Default)]
pub(crate) struct Seen {
    pub(crate) at: Vec<(i64, bool)>,
}

impl Seen {
    fn in_range(&self, from: i64, to: i64, confirmed: bool) -> Option<i64> {
        self.at
            .iter()
            .find(|(at, c)| *at >= from && *at < to && (*c || !confirmed))
            .map(|(at, _)| *at)
    }
}

pub(crate) fn rfc(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| ms.to_string())
}

/// The breaches of the schedule rule for one trigger, each naming the
/// trigger and the minute. `dues`: its due minutes up to the last clock.
pub(crate) fn check_schedule(
    label: &str,
    dues: &[i64],
    runs: &[&StoredRun],
    seen: &Seen,
    last_ms: i64,
) -> Vec<String> {
    let mut broken = Vec::new();
    let mut by_due: BTreeMap<i64, Vec<&StoredRun>> = BTreeMap::new();
    for run in runs {
        if run.cause != "schedule" {
            broken.push(format!(
                "{label}: run {} has cause {:?}, not schedule",
                run.id, run.cause
            ));
            continue;
        }
        by_due.entry(run.due_ms).or_default().push(run);
    }
    for (due, list) in &by_due {
        if !dues.contains(due) {
            broken.push(format!(
                "{label}: ran {} (run {}), which is not one of its due minutes",
                rfc(*due),
                list[0].id
            ));
        }
        if list.len() > 1 {
            let ids: Vec<&str> = list.iter().map(|r| r.id.as_str()).collect();
            broken.push(format!(
                "{label}: minute {} ran {} times (runs {}; due keys {})",
                rfc(*due),
                list.len(),
                ids.join(", "),
                list.iter()
                    .map(|r| r.due_key.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    for (i, due) in dues.iter().enumerate() {
        let next = dues.get(i + 1).copied().unwrap_or(last_ms + 1);
        let ran = by_due.contains_key(due);
        match (ran, seen.in_range(*due, next, true)) {
            (false, Some(checked)) => broken.push(format!(
                "{label}: minute {} was due and checked (clock at {}) but never ran",
                rfc(*due),
                rfc(checked)
            )),
            (true, None) if seen.in_range(*due, next, false).is_none() => broken.push(format!(
                "{label}: minute {} ran, but no triggerd was alive from it to the next due \
                 minute {}: a missed time runs only as the latest of its downtime",
                rfc(*due),
                rfc(next)
            )),
            _ => {}
        }
    }
    broken
}

/// The breaches of the file rule for one path of a file trigger: every run
/// is of a version the writer made, none twice, and the last one ran.
pub(crate) fn check_file(
    label: &str,
    path: &str,
    written: &[String],
    runs: &[(&StoredRun, String)],
) -> Vec<String> {
    let mut broken = Vec::new();
    let mut count: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (run, version) in runs {
        if !written.contains(version) {
            broken.push(format!(
                "{label}: run {} is for version {version} of {path}, which the writer never made",
                run.id
            ));
        }
        count.entry(version).or_default().push(&run.id);
    }
    for (version, ids) in &count {
        if ids.len() > 1 {
            broken.push(format!(
                "{label}: version {version} of {path} ran {} times (runs {})",
                ids.len(),
                ids.join(", ")
            ));
        }
    }
    if let Some(last) = written.last() {
        if !count.contains_key(last.as_str()) {
            broken.push(format!(
                "{label}: the last version of {path} ({last}, of {} written) never ran",
                written.len()
            ));
        }
    }
    broken
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> i64 {
        text.parse::<jiff::Timestamp>().unwrap().as_millisecond()
    }

    fn run(id: &str, due: &str) -> StoredRun {
        StoredRun {
            id: id.into(),
            trigger_id: "t".into(),
            due_key: format!("t@{due}"),
            cause: "schedule".into(),
            due_ms: at(due),
            file: None,
            status: "done".into(),
        }
    }

    #[test]
    fn due_minutes_are_read_in_the_triggers_zone() {
        let rome = TimeZone::get("Europe/Rome").unwrap();
        let daily = Due::Daily { h: 10, m: 15 };
        // 10:15 in Rome is 09:15 UTC in March (before the change).
        let found = daily.minutes(
            &rome,
            at("2026-03-02T09:00:20Z"),
            at("2026-03-02T10:00:00Z"),
        );
        assert_eq!(found, vec![at("2026-03-02T09:15:00Z")]);
        let every = Due::Minutes {
            minutes: vec![1, 31],
            hours: None,
        };
        let found = every.minutes(
            &TimeZone::UTC,
            at("2026-03-02T09:01:00Z"),
            at("2026-03-02T10:01:00Z"),
        );
        assert_eq!(
            found,
            vec![at("2026-03-02T09:31:00Z"), at("2026-03-02T10:01:00Z")]
        );
        let monthly = Due::Monthly {
            day: 31,
            h: 8,
            m: 0,
        };
        assert!(monthly.due_at(at("2026-02-28T08:00:00Z"), &TimeZone::UTC));
    }

    #[test]
    fn a_checked_minute_runs_once_and_a_dead_one_folds_into_the_next() {
        let dues = [
            at("2026-03-02T09:01:00Z"),
            at("2026-03-02T09:02:00Z"),
            at("2026-03-02T09:03:00Z"),
        ];
        // Alive at 09:01 (checked), dead through 09:02, back at 09:03.
        let seen = Seen {
            at: vec![
                (at("2026-03-02T09:01:20Z"), true),
                (at("2026-03-02T09:03:20Z"), true),
            ],
        };
        let last = at("2026-03-02T09:03:20Z");
        let r1 = run("r1", "2026-03-02T09:01:00Z");
        let r3 = run("r3", "2026-03-02T09:03:00Z");
        assert!(check_schedule("t", &dues, &[&r1, &r3], &seen, last).is_empty());
        // 09:02 ran though no triggerd lived through it.
        let r2 = run("r2", "2026-03-02T09:02:00Z");
        let broken = check_schedule("t", &dues, &[&r1, &r2, &r3], &seen, last);
        assert!(
            broken[0].contains("09:02:00Z ran, but no triggerd"),
            "{broken:?}"
        );
        // 09:01 twice, 09:03 missed.
        let mut again = run("r1b", "2026-03-02T09:01:00Z");
        again.due_key.push('+');
        let broken = check_schedule("t", &dues, &[&r1, &again], &seen, last);
        assert!(
            broken.iter().any(|b| b.contains("09:01:00Z ran 2 times")),
            "{broken:?}"
        );
        assert!(
            broken
                .iter()
                .any(|b| b.contains("09:03:00Z was due and checked")),
            "{broken:?}"
        );
    }

    #[test]
    fn a_files_last_version_runs_once() {
        let written = vec!["1:1.0:7".to_string(), "2:2.0:8".to_string()];
        let r = run("r", "2026-03-02T09:01:00Z");
        assert!(check_file("t", "a.txt", &written, &[(&r, "2:2.0:8".into())]).is_empty());
        let broken = check_file("t", "a.txt", &written, &[(&r, "1:1.0:7".into())]);
        assert!(broken[0].contains("last version of a.txt"), "{broken:?}");
    }
}
