//! What the benchmarks read of a process in /proc beyond `egressbench`'s
//! RSS and stat ticks: its CPU time to the nanosecond.

use std::collections::HashMap;

/// The resident memory of a process, in KiB (`VmRSS`).
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// CPU time of a process to the nanosecond: the sum over its threads of
/// `/proc/<pid>/task/<tid>/schedstat`'s first field, followed thread by
/// thread (a thread that ends between two samples loses at most what it ran
/// since the last one; one made after the first sample counts whole).
pub struct ThreadCpu {
    pid: u32,
    seen: HashMap<u32, u64>,
    pub total_ns: u64,
}

impl ThreadCpu {
    pub fn start(pid: u32) -> ThreadCpu {
        let mut t = ThreadCpu {
            pid,
            seen: HashMap::new(),
            total_ns: 0,
        };
        t.sample();
        t.total_ns = 0;
        t
    }

    pub fn sample(&mut self) {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", self.pid)) else {
            return;
        };
        for task in tasks.flatten() {
            let Some(tid) = task
                .file_name()
                .to_str()
                .and_then(|t| t.parse::<u32>().ok())
            else {
                continue;
            };
            let Some(ns) = std::fs::read_to_string(task.path().join("schedstat"))
                .ok()
                .and_then(|t| t.split_whitespace().next()?.parse::<u64>().ok())
            else {
                continue;
            };
            let before = self.seen.insert(tid, ns).unwrap_or(0);
            self.total_ns += ns.saturating_sub(before);
        }
    }
}
