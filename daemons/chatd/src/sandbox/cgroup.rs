//! What a sandbox's cgroup says: processes killed for memory (`oom_kill`)
//! and whether anything but the shim still runs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{container_name, Sandboxes};

/// How the call whose memory kills are asked about ended: only a failed one
/// is worth an exec inside the container to ask.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum CallEnded {
    /// Exit 0 and not killed.
    Cleanly,
    /// A non-zero exit, or killed.
    Failed,
}

#[derive(Clone)]
pub(super) struct CgroupFiles {
    /// `memory.oom_control` (v1) or `memory.events` (v2).
    pub(super) oom: PathBuf,
    /// `cgroup.procs` of the pids (v1) or unified (v2) hierarchy.
    pub(super) procs: PathBuf,
}

impl Sandboxes {
    /// The container cgroup's count of processes killed for memory (cgroup
    /// v2 `memory.events`, v1 `memory.oom_control`), read from inside.
    pub async fn oom_kills(&self, container: &str) -> Option<u64> {
        let cmd = [
            "/bin/sh",
            "-c",
            "cat /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null",
        ];
        let (_, out) = self
            .inner
            .docker
            .exec_output(container, &cmd, &self.user(), Duration::from_secs(10))
            .await
            .ok()?;
        String::from_utf8_lossy(&out)
            .lines()
            .filter_map(|l| l.strip_prefix("oom_kill "))
            .filter_map(|n| n.trim().parse::<u64>().ok())
            .max()
    }

    /// The container cgroup's files as this side sees them, from its first
    /// process's /proc/<pid>/cgroup (readable by anyone), and that pid.
    pub(super) async fn cgroup_files(&self, container: &str) -> (Option<CgroupFiles>, u32) {
        let Ok(Some(found)) = self.inner.docker.container(container).await else {
            return (None, 0);
        };
        let pid = found["State"]["Pid"].as_u64().unwrap_or(0) as u32;
        if pid == 0 {
            return (None, 0);
        }
        let files = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .ok()
            .and_then(|text| cgroup_files_of(&text))
            .filter(|f| read_oom_count(&f.oom).is_some() && std::fs::metadata(&f.procs).is_ok());
        (files, pid)
    }

    /// Whether the chat's sandbox lost a process to its memory limit since
    /// last asked. Without the cgroup file on this side, it is asked inside
    /// (an exec) only when the call `CallEnded::Failed`.
    pub async fn oom_since_last(&self, chat: &str, ended: CallEnded) -> bool {
        let file = self
            .lock_running()
            .running
            .get(chat)
            .and_then(|r| r.cgroup.as_ref().map(|c| c.oom.clone()));
        let count = match file {
            Some(file) => read_oom_count(&file),
            None if ended == CallEnded::Failed => self.oom_kills(&container_name(chat)).await,
            None => None,
        };
        let Some(count) = count else {
            return false;
        };
        let mut chats = self.lock_running();
        match chats.running.get_mut(chat) {
            Some(r) if count > r.oom_seen => {
                r.oom_seen = count;
                true
            }
            _ => false,
        }
    }

    /// Whether anything of the commands' user but the shim may still run
    /// in the chat's sandbox: read from the cgroup on this side (an MCP
    /// server runs as a uid of its own and is not counted); `true` when it
    /// cannot be read.
    pub fn anything_left(&self, chat: &str) -> bool {
        let (files, init) = {
            let chats = self.lock_running();
            match chats.running.get(chat) {
                Some(r) => (r.cgroup.clone(), r.init_pid),
                None => return false,
            }
        };
        let Some(files) = files else {
            return true;
        };
        match std::fs::read_to_string(&files.procs) {
            Ok(text) => text
                .lines()
                .filter_map(|l| l.trim().parse::<u32>().ok())
                .any(|pid| pid != init && same_user(pid, init)),
            Err(_) => true,
        }
    }
}

/// Whether `pid` runs as `init`'s real uid (as this side sees uids: the
/// same mapping for both); one that cannot be read counts as the same.
fn same_user(pid: u32, init: u32) -> bool {
    let uid = |pid: u32| {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().next().map(str::to_string))
    };
    match (uid(pid), uid(init)) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    }
}

/// The container cgroup's files, from a /proc/<pid>/cgroup: cgroup v1's
/// `memory.oom_control` and the pids hierarchy's `cgroup.procs`, or v2's
/// `memory.events` and `cgroup.procs`.
pub(super) fn cgroup_files_of(cgroups: &str) -> Option<CgroupFiles> {
    let root = Path::new("/sys/fs/cgroup");
    let mut memory = None;
    let mut pids = None;
    let mut unified = None;
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let path = path.trim_start_matches('/');
        if controllers.is_empty() {
            unified = Some(root.join(path));
        }
        for controller in controllers.split(',') {
            match controller {
                "memory" => memory = Some(root.join("memory").join(path)),
                "pids" => pids = Some(root.join("pids").join(path)),
                _ => {}
            }
        }
    }
    match (memory, pids, unified) {
        (Some(memory), Some(pids), _) => Some(CgroupFiles {
            oom: memory.join("memory.oom_control"),
            procs: pids.join("cgroup.procs"),
        }),
        (None, None, Some(dir)) => Some(CgroupFiles {
            oom: dir.join("memory.events"),
            procs: dir.join("cgroup.procs"),
        }),
        _ => None,
    }
}

/// The `oom_kill` count of such a file.
pub(super) fn read_oom_count(file: &Path) -> Option<u64> {
    std::fs::read_to_string(file)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
}
