//! What is left outside a call's containment is killed here: whatever is
//! reparented to hostexecd (its only children are the keepers it started),
//! a keeper that does not answer with everything below it, the keepers of
//! calls a crashed hostexecd did not see end, and, at start, the processes an
//! earlier hostexecd's calls left running (one from before calls had their
//! own PID namespace, or killed with its process group): processes of the
//! commands' user whose HOME or working folder is in the chats' folders.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tandem_shared::sync::lock;

use crate::spawner::{is_keeper, SPAWNING};
use crate::tree;

/// Kills every process below hostexecd but its keepers (and theirs);
/// returns how many were left. Quick when there is nothing to kill: only
/// hostexecd's children are read then.
pub fn adopted() -> usize {
    // Not while a keeper is being spawned: it is not known as one yet.
    let _spawning = lock(&SPAWNING);
    if tree::own_children().iter().all(|pid| is_keeper(*pid)) {
        return 0;
    }
    let me = std::process::id() as i32;
    let left = tree::kill_tree(me, &is_keeper, &mut reap, Duration::from_secs(5));
    tracing::warn!(left, "processes reparented to hostexecd were killed");
    left
}

/// Collects every child that has ended (keepers, and what was killed);
/// the caller holds `SPAWNING`.
pub fn reap() {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    while let Ok(status) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
        match status {
            WaitStatus::StillAlive => break,
            WaitStatus::Exited(pid, _) | WaitStatus::Signaled(pid, _, _) => {
                crate::spawner::reaped(pid.as_raw())
            }
            _ => {}
        }
    }
}

/// Stops and kills every process below the keeper `pid` (if it is still
/// the process that started at `start`), as its end would: used when the
/// keeper does not answer (stopped, or a previous hostexecd's). Returns how
/// many were left.
pub fn end_keeper_tree(pid: i32, start: u64) -> usize {
    let Some(fd) = tree::pidfd_open(pid) else {
        return 0;
    };
    // Opened before the check: the same start time means the pidfd (and
    // the walk below it) is the keeper's.
    if tree::stat_of(pid).map(|p| p.start) != Some(start) {
        return 0;
    }
    let left = tree::kill_tree(pid, &|_| false, &mut || {}, Duration::from_secs(5));
    drop(fd);
    left
}

/// Ends the keepers of calls a previous hostexecd did not see end, and all
/// below them: a keeper still there (pid and start time match, same boot)
/// has its processes stopped and killed while it still holds them, then is
/// killed itself. Gives each call's workspace back (`give_back`) and writes
/// the rows as ended by the restart.
pub fn recover(store: &crate::store::Store, give_back: &dyn Fn(&Path)) -> anyhow::Result<usize> {
    let open = store.unfinished()?;
    for call in &open {
        if let (Some(pid), Some(start)) = (call.keeper_pid, call.keeper_start) {
            let alive = tree::stat_of(pid).is_some_and(|p| p.start == start && !p.is_dead());
            if alive {
                let left = end_keeper_tree(pid, start);
                tree::signal_exact(pid, start, libc::SIGKILL);
                let until = Instant::now() + Duration::from_secs(5);
                while tree::stat_of(pid).is_some_and(|p| p.start == start && !p.is_dead())
                    && Instant::now() < until
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                tracing::warn!(call = %call.call_id, keeper = pid, left, "a keeper of a call before the restart was ended, with its processes");
            }
        }
        if let Some(workspace) = &call.workspace {
            give_back(Path::new(workspace));
        }
        store.finish_restarted(call)?;
        tracing::info!(
            "[host-exec] call {} ended by a restart of hostexecd",
            call.call_id
        );
    }
    Ok(open.len())
}

/// How a process left by a call is known.
pub struct LeftBy {
    /// The user commands run as.
    pub uid: u32,
    /// `<chat_data>/homes`: every call's HOME is below it.
    pub homes: PathBuf,
    /// Working folders that only a call uses: the workspaces, when commands
    /// run as a user of their own (as the box's user, a person's shell may
    /// well be in a workspace).
    pub workspaces: Vec<PathBuf>,
}

impl LeftBy {
    fn matches(&self, pid: i32) -> bool {
        use std::os::unix::fs::MetadataExt;
        let at = PathBuf::from(format!("/proc/{pid}"));
        if std::fs::metadata(&at).map(|m| m.uid()).ok() != Some(self.uid) {
            return false;
        }
        let home = std::fs::read(at.join("environ")).ok().and_then(|env| {
            env.split(|b| *b == 0).find_map(|v| {
                v.strip_prefix(b"HOME=")
                    .map(|h| PathBuf::from(String::from_utf8_lossy(h).into_owned()))
            })
        });
        if home.is_some_and(|h| h.starts_with(&self.homes)) {
            return true;
        }
        let Ok(cwd) = std::fs::read_link(at.join("cwd")) else {
            return false;
        };
        cwd.starts_with(&self.homes) || self.workspaces.iter().any(|w| cwd.starts_with(w))
    }
}

/// Kills what an earlier hostexecd's calls left running (see [`LeftBy`]);
/// returns how many were found.
pub fn leftovers(left_by: &LeftBy) -> usize {
    let me = std::process::id() as i32;
    let find = || -> Vec<tree::Proc> {
        tree::all()
            .into_iter()
            .filter(|p| p.pid != me && !p.is_dead() && left_by.matches(p.pid))
            .collect()
    };
    let found = find().len();
    if found > 0 {
        let left = tree::kill_found(&find, &mut || {}, Duration::from_secs(5));
        tracing::warn!(
            found,
            left,
            "processes an earlier hostexecd's calls left running were killed"
        );
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_known_by_its_home_or_folder_and_its_user() {
        let me = std::process::id() as i32;
        let uid = nix::unistd::geteuid().as_raw();
        let cwd = std::env::current_dir().unwrap();
        let by_cwd = LeftBy {
            uid,
            homes: PathBuf::from("/nowhere/homes"),
            workspaces: vec![cwd.clone()],
        };
        assert!(by_cwd.matches(me));
        let other_user = LeftBy {
            uid: uid + 1,
            ..by_cwd
        };
        assert!(!other_user.matches(me));
        let elsewhere = LeftBy {
            uid,
            homes: PathBuf::from("/nowhere/homes"),
            workspaces: vec![PathBuf::from("/nowhere/workspaces")],
        };
        assert!(!elsewhere.matches(me));
    }
}
