//! Small measuring tools of the bench: quantiles and units, stamps in a frame,
//! a process's RSS, CPU seconds and open-files limit read from /proc.

use super::*;

pub(crate) fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// The value at quantile `q` of sorted samples.
pub(crate) fn quantile(sorted: &[i64], q: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Microseconds as milliseconds.
pub(crate) fn ms(us: i64) -> String {
    format!("{:.2} ms", us as f64 / 1000.0)
}

pub(crate) fn ms_f(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

pub(crate) fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

pub(crate) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

pub(crate) fn parse_u64(digits: &[u8]) -> Option<u64> {
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// `(i, stamp)` from a stamped token `w{i}:{stamp} ` that follows `key`.
pub(crate) fn stamp_after(frame: &[u8], key: &[u8]) -> Option<(u64, i64)> {
    let rest = &frame[find(frame, key)? + key.len()..];
    let colon = rest.iter().position(|b| *b == b':')?;
    let index = parse_u64(&rest[..colon])?;
    let rest = &rest[colon + 1..];
    let end = rest.iter().position(|b| !b.is_ascii_digit())?;
    Some((index, parse_u64(&rest[..end])? as i64))
}

/// Resident memory of a process in KiB (`VmRSS`).
pub(crate) fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// CPU seconds (user + system) a process has used so far (USER_HZ = 100).
pub(crate) fn cpu_secs(pid: u32) -> f64 {
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

/// CPU seconds used by a process's threads named `name`.
pub(crate) fn thread_cpu_secs(pid: u32, name: &str) -> f64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0.0;
    };
    let mut total = 0.0;
    for task in tasks.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() == name {
            let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
                continue;
            };
            let Some(close) = stat.rfind(')') else {
                continue;
            };
            let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
            let ticks = |i: usize| {
                fields
                    .get(i)
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            total += (ticks(11) + ticks(12)) / 100.0;
        }
    }
    total
}

pub(crate) fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// The open-files limit a process runs with (`/proc/<pid>/limits`).
pub(crate) fn nofile_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/limits"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("Max open files"))
                .map(|l| {
                    l.split_whitespace()
                        .skip(3)
                        .take(2)
                        .collect::<Vec<_>>()
                        .join("/")
                })
        })
        .unwrap_or_else(|| "?".into())
}

/// The pid of this process's child named `name` (the harness keeps the sim's private).
pub(crate) fn child_pid(name: &str) -> Option<u32> {
    let me = std::process::id();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`; comm may hold spaces, so split at the last ')'.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = &stat[open + 1..close];
        let ppid = stat[close + 1..]
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok());
        if comm == name && ppid == Some(me) {
            return Some(pid);
        }
    }
    None
}

/// Samples a process's RSS every 20 ms until stopped; returns the peak (KiB).
pub(crate) struct RssSampler {
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) task: tokio::task::JoinHandle<u64>,
}

impl RssSampler {
    pub(crate) fn start(pid: u32, bound: Duration) -> RssSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let deadline = Instant::now() + bound;
            let mut peak = 0;
            while !flag.load(Ordering::Relaxed) && Instant::now() < deadline {
                peak = peak.max(rss_kib(pid).unwrap_or(0));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            peak.max(rss_kib(pid).unwrap_or(0))
        });
        RssSampler { stop, task }
    }

    pub(crate) async fn peak(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap_or(0)
    }
}
