//! Processes as /proc shows them: who descends from whom, and killing a
//! whole tree so that nothing of it is left.
//!
//! A call's processes are ended by its PID namespace (`contain.rs`); these
//! walks are for what is outside one: a keeper that does not answer, what
//! hostexecd adopted, what an earlier hostexecd left. Killing is done in rounds: every
//! descendant is sent SIGSTOP (a stopped process cannot fork, and SIGSTOP
//! cannot be caught or ignored), the walk is repeated until it finds no
//! process it has not stopped, then all of them get SIGKILL, and the round
//! repeats until none is left. Each process is signalled through a pidfd
//! opened while its start time still matched what the walk saw, so a pid
//! reused meanwhile is never signalled.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// One line of `/proc/<pid>/stat`, the fields used here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proc {
    pub pid: i32,
    pub ppid: i32,
    /// R, S, D, T, Z, ...
    pub state: u8,
    /// Clock ticks after boot; with the pid it names one process.
    pub start: u64,
    /// Its threads (the zombie main thread of a process counts while
    /// another thread still runs).
    pub threads: u64,
}

impl Proc {
    /// Whether the process is dead: a zombie with no thread left but its
    /// own. A main thread that called `pthread_exit` shows `Z` while the
    /// process's other threads run (and may fork): that process is alive.
    pub fn is_dead(&self) -> bool {
        matches!(self.state, b'Z' | b'X' | b'x') && self.threads <= 1
    }
}

/// Parses the text of `/proc/<pid>/stat` (the name may hold spaces and
/// parentheses: fields are counted after the last `)`).
pub fn parse_stat(text: &str) -> Option<Proc> {
    let pid = text.split_whitespace().next()?.parse().ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state (3), ppid (4), ..., num_threads (20), starttime (22).
    Some(Proc {
        pid,
        state: *fields.first()?.as_bytes().first()?,
        ppid: fields.get(1)?.parse().ok()?,
        threads: fields.get(17)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

/// The process `pid`, if it exists.
pub fn stat_of(pid: i32) -> Option<Proc> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// Every process /proc shows.
pub fn all() -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let name = e.ok()?.file_name();
        let pid: i32 = name.to_str()?.parse().ok()?;
        stat_of(pid)
    })
    .collect()
}

/// The processes below `root` in `procs` (children, their children, ...),
/// leaving out the subtrees of the children `skip` names.
pub fn descendants(root: i32, procs: &[Proc], skip: &dyn Fn(i32) -> bool) -> Vec<Proc> {
    let mut children: HashMap<i32, Vec<Proc>> = HashMap::new();
    for p in procs {
        children.entry(p.ppid).or_default().push(*p);
    }
    let mut out = Vec::new();
    let mut stack: Vec<Proc> = children
        .get(&root)
        .map(|c| c.iter().filter(|p| !skip(p.pid)).copied().collect())
        .unwrap_or_default();
    while let Some(p) = stack.pop() {
        if p.pid == root || out.iter().any(|q: &Proc| q.pid == p.pid) {
            continue;
        }
        if let Some(c) = children.get(&p.pid) {
            stack.extend(c.iter().copied());
        }
        out.push(p);
    }
    out
}

/// A handle on one process: its pidfd when one could be opened.
struct Handle {
    start: u64,
    pidfd: Option<OwnedFd>,
}

pub fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: a plain system call; a non-negative result is a new descriptor we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

pub fn pidfd_signal(fd: &OwnedFd, signal: i32) -> bool {
    // SAFETY: a plain system call on a descriptor we own.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    r == 0
}

impl Handle {
    /// Opens a handle on `p` if it is still the same process.
    fn open(p: &Proc) -> Option<Handle> {
        let pidfd = pidfd_open(p.pid);
        // Read after the pidfd is open: the same start time means the pid
        // was not reused in between, so the pidfd names `p`.
        let now = stat_of(p.pid)?;
        if now.start != p.start {
            return None;
        }
        Some(Handle {
            start: p.start,
            pidfd,
        })
    }

    fn signal(&self, pid: i32, signal: i32) {
        match &self.pidfd {
            Some(fd) => {
                pidfd_signal(fd, signal);
            }
            None => {
                // Out of descriptors: the start time is checked once more.
                if stat_of(pid).map(|p| p.start) == Some(self.start) {
                    // SAFETY: a plain system call.
                    unsafe { libc::kill(pid, signal) };
                }
            }
        }
    }
}

/// Sends `signal` to the process `pid` if it still started at `start`.
pub fn signal_exact(pid: i32, start: u64, signal: i32) -> bool {
    let Some(p) = stat_of(pid) else {
        return false;
    };
    if p.start != start {
        return false;
    }
    match Handle::open(&p) {
        Some(h) => {
            h.signal(pid, signal);
            true
        }
        None => false,
    }
}

/// Stops and kills every process below `root` (but the subtrees of the
/// children `skip` names) until none is left or `bound` has passed; returns
/// how many are left (dead zombies are not counted; a zombie main thread
/// whose process still has threads is alive, and is stopped and killed). `reap` is
/// called each round, so a subreaper collects what it inherits.
pub fn kill_tree(
    root: i32,
    skip: &dyn Fn(i32) -> bool,
    reap: &mut dyn FnMut(),
    bound: Duration,
) -> usize {
    kill_found(&|| descendants(root, &all(), skip), reap, bound)
}

/// Stops and kills every process `find` names (it is asked again each
/// walk, so what they start meanwhile is found too) until it names none or
/// `bound` has passed; returns how many are left.
pub fn kill_found(find: &dyn Fn() -> Vec<Proc>, reap: &mut dyn FnMut(), bound: Duration) -> usize {
    let deadline = Instant::now() + bound;
    let mut handles: HashMap<i32, Handle> = HashMap::new();
    let mut pause = Duration::from_micros(200);
    loop {
        reap();
        // Freeze: stop everything the walk finds, until a walk finds nothing new.
        let mut rounds = 0;
        loop {
            rounds += 1;
            let live: Vec<Proc> = find().into_iter().filter(|p| !p.is_dead()).collect();
            let mut new = false;
            for p in &live {
                if handles.get(&p.pid).is_some_and(|h| h.start == p.start) {
                    continue;
                }
                if let Some(h) = Handle::open(p) {
                    h.signal(p.pid, libc::SIGSTOP);
                    handles.insert(p.pid, h);
                    new = true;
                }
            }
            if !new || rounds > 64 {
                break;
            }
        }
        for (pid, h) in &handles {
            h.signal(*pid, libc::SIGKILL);
        }
        reap();
        let live = find().iter().filter(|p| !p.is_dead()).count();
        if live == 0 {
            reap();
            return 0;
        }
        if Instant::now() >= deadline {
            return live;
        }
        handles.retain(|pid, h| stat_of(*pid).is_some_and(|p| p.start == h.start && !p.is_dead()));
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(10));
    }
}

/// The children of this process (of each of its threads: an orphan is
/// given to one of them).
pub fn own_children() -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let mut children = Vec::new();
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            children.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            );
        }
    }
    children
}

/// Tasks (processes and threads) whose /proc entry belongs to `uid` and
/// that live in this process's user namespace: what RLIMIT_NPROC counts,
/// near enough (the entry's owner is the effective uid; the kernel counts a
/// uid's processes per user namespace, so under the unit's `PrivateUsers`
/// the box user's processes outside it do not count).
pub fn tasks_of(uid: u32) -> u64 {
    let proc = std::path::Path::new("/proc");
    let ns = std::fs::read_link("/proc/self/ns/user").ok();
    count_tasks(proc, uid, ns.as_deref())
}

/// The tasks of `uid` under the /proc-like folder `proc`; with `ns`, only
/// those of processes whose `ns/user` link reads `ns` (a process whose link
/// cannot be read is left out: it is not known to be in it).
pub fn count_tasks(proc: &std::path::Path, uid: u32, ns: Option<&std::path::Path>) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(dir) = std::fs::read_dir(proc) else {
        return 0;
    };
    let mut count = 0;
    for entry in dir.flatten() {
        let name = entry.file_name();
        if !name
            .to_str()
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        {
            continue;
        }
        let at = proc.join(&name);
        let Ok(meta) = std::fs::metadata(&at) else {
            continue;
        };
        if meta.uid() != uid {
            continue;
        }
        if let Some(ns) = ns {
            if std::fs::read_link(at.join("ns/user")).ok().as_deref() != Some(ns) {
                continue;
            }
        }
        let threads = std::fs::read_dir(at.join("task"))
            .map(|d| d.count() as u64)
            .unwrap_or(1)
            .max(1);
        count += threads;
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_odd_names_parse() {
        let line = "4242 (a (b) c) S 17 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100 18446744073709551615";
        let p = parse_stat(line).unwrap();
        assert_eq!(
            p,
            Proc {
                pid: 4242,
                ppid: 17,
                state: b'S',
                start: 987654,
                threads: 1,
            }
        );
        let me = stat_of(std::process::id() as i32).unwrap();
        assert_eq!(me.pid, std::process::id() as i32);
        assert!(me.start > 0);
    }

    #[test]
    fn descendants_follow_parents_and_skip_named_children() {
        let p = |pid, ppid| Proc {
            pid,
            ppid,
            state: b'S',
            start: 1,
            threads: 1,
        };
        let procs = [
            p(1, 0),
            p(10, 1),
            p(11, 10),
            p(12, 11),
            p(20, 10),
            p(21, 20),
            p(30, 1),
        ];
        let mut got: Vec<i32> = descendants(10, &procs, &|_| false)
            .iter()
            .map(|p| p.pid)
            .collect();
        got.sort_unstable();
        assert_eq!(got, vec![11, 12, 20, 21]);
        let mut got: Vec<i32> = descendants(10, &procs, &|pid| pid == 20)
            .iter()
            .map(|p| p.pid)
            .collect();
        got.sort_unstable();
        assert_eq!(got, vec![11, 12]);
    }

    #[test]
    fn this_process_counts_among_its_users_tasks() {
        let uid = nix::unistd::geteuid().as_raw();
        assert!(tasks_of(uid) >= 1);
    }

    #[test]
    fn a_zombie_main_thread_with_threads_left_is_alive() {
        let line = |state: &str, threads: u32| {
            format!("7 (py) {state} 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 {threads} 0 555 0 0")
        };
        let p = parse_stat(&line("Z", 2)).unwrap();
        assert_eq!((p.state, p.threads, p.start), (b'Z', 2, 555));
        assert!(!p.is_dead());
        assert!(parse_stat(&line("Z", 1)).unwrap().is_dead());
        assert!(!parse_stat(&line("S", 1)).unwrap().is_dead());
    }

    #[test]
    fn only_tasks_in_this_user_namespace_count() {
        use std::os::unix::fs::symlink;
        let uid = nix::unistd::geteuid().as_raw();
        let proc = tempfile::tempdir().unwrap();
        // pid: (its user namespace, its threads)
        let procs: [(&str, Option<&str>, &[&str]); 5] = [
            ("10", Some("user:[4026531837]"), &["10"]),
            ("11", Some("user:[4026532999]"), &["11", "12"]),
            ("13", Some("user:[4026531837]"), &["13", "14", "15"]),
            ("16", None, &["16"]),
            ("self", Some("user:[4026531837]"), &["1"]),
        ];
        for (pid, ns, tasks) in procs {
            let at = proc.path().join(pid);
            std::fs::create_dir_all(at.join("ns")).unwrap();
            if let Some(ns) = ns {
                symlink(ns, at.join("ns/user")).unwrap();
            }
            for t in tasks {
                std::fs::create_dir_all(at.join("task").join(t)).unwrap();
            }
        }
        let ours = std::path::Path::new("user:[4026531837]");
        assert_eq!(count_tasks(proc.path(), uid, Some(ours)), 1 + 3);
        let other = std::path::Path::new("user:[4026532999]");
        assert_eq!(count_tasks(proc.path(), uid, Some(other)), 2);
        // Without a namespace to compare (ours unreadable): every one counts.
        assert_eq!(count_tasks(proc.path(), uid, None), 1 + 2 + 3 + 1);
        assert_eq!(count_tasks(proc.path(), uid + 1, Some(ours)), 0);
    }
}
