//! Measuring for figure 7: RSS and CPU from /proc, medians and sizes, and
//! the medians of each way's runs.

use super::*;

/// Resident memory of a process in KiB (`VmRSS`).
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// CPU seconds (user + system) a process has used so far (USER_HZ = 100).
pub fn cpu_secs(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let Some(close) = stat.rfind(')') else {
        return 0.0;
    };
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

pub(super) fn median_f(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

pub(super) fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

pub(super) fn size(bytes: u64) -> String {
    if bytes >= 1 << 30 && bytes.is_multiple_of(1 << 30) {
        format!("{} GiB", bytes >> 30)
    } else {
        format!("{} MiB", bytes >> 20)
    }
}

/// What one route measured.
#[derive(Default)]
pub(super) struct Measured {
    pub(super) down: Vec<f64>,
    pub(super) up: Vec<f64>,
    pub(super) rate: Vec<f64>,
    /// The relay's CPU seconds over its transfers and over its connections.
    pub(super) transfer_cpu: f64,
    pub(super) conn_cpu: f64,
}

/// A route the figure measures, with the process behind it (none for direct).
pub(super) struct Way {
    pub(super) route: Route,
    pub(super) pid: Option<u32>,
    /// Whether the connection rate is measured too (not for the floor relay,
    /// which starts two threads a connection: a floor for bytes only).
    pub(super) rate: bool,
    pub(super) m: Measured,
}

impl Way {
    pub(super) fn new(route: Route, pid: Option<u32>) -> Way {
        let rate = !matches!(route, Route::Floor(_));
        Way {
            route,
            pid,
            rate,
            m: Measured::default(),
        }
    }
}

/// Which of a way's samples: downloads, uploads or connection rates.
pub(super) type Pick = fn(&Measured) -> &Vec<f64>;

/// The medians the table reads.
pub(super) struct Medians<'a> {
    pub(super) ways: &'a [Way],
}

impl Medians<'_> {
    pub(super) fn of(&self, name: &str, pick: Pick) -> Option<f64> {
        self.ways
            .iter()
            .find(|w| w.route.name() == name)
            .map(|w| pick(&w.m))
            .filter(|v| !v.is_empty())
            .map(|v| median_f(v.clone()))
    }
}

pub(super) const EGRESSD_WAYS: [&str; 2] = ["egressd chat socket", "egressd listener + token"];

/// The machine's load average (1, 5, 15 min), to tell a quiet run from a busy one.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}
