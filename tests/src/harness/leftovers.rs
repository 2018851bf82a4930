//! Processes a test left behind: found by a marker in their command line
//! and killed when the test ends.

use super::*;

/// Pids whose command line (or, for a process whose main thread exited,
/// one of its threads' command lines) holds `marker`; never this process.
pub fn pids_with(marker: &str) -> Vec<i32> {
    let mut found = Vec::new();
    let me = std::process::id() as i32;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in dir.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        // Zombies have an empty command line; so has a process whose main
        // thread exited while others run: their own command lines tell.
        let mut texts = vec![cmdline];
        if texts[0].is_empty() {
            if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
                for task in tasks.flatten() {
                    texts.extend(std::fs::read(task.path().join("cmdline")));
                }
            }
        }
        if texts.iter().any(|t| {
            String::from_utf8_lossy(t)
                .replace('\0', " ")
                .contains(marker)
        }) {
            found.push(pid);
        }
    }
    found
}

/// Kills what a failed test left with `marker` in its command line, so a
/// regression does not leave processes on the machine (dropped at the end
/// of a test, passed or not).
pub struct KillLeftovers(pub String);

impl Drop for KillLeftovers {
    fn drop(&mut self) {
        for _ in 0..50 {
            let left = pids_with(&self.0);
            if left.is_empty() {
                return;
            }
            for pid in left {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
