//! What the benchmarks read of a process in /proc beyond `egressbench`'s
//! RSS and stat ticks: its CPU time to the nanosecond.

use std::collections::HashMap;

/// The highest RSS of a process seen while a piece of work runs, sampled
/// every 2 ms from a thread of its own (a sampling period, not a wait).
pub struct PeakRss {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    peak: std::sync::Arc<std::sync::atomic::AtomicU64>,
    thread: std::thread::JoinHandle<()>,
}

impl PeakRss {
    pub fn start(pid: u32) -> PeakRss {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (s, p) = (stop.clone(), peak.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                if let Some(kib) = rss_kib(pid) {
                    p.fetch_max(kib, Ordering::SeqCst);
                }
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        });
        PeakRss { stop, peak, thread }
    }

    /// Stops sampling; the peak in KiB.
    pub fn end(self) -> u64 {
        use std::sync::atomic::Ordering;
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.thread.join();
        self.peak.load(Ordering::SeqCst)
    }
}

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
