//! Starting and stopping daemons: through `systemctl --user` when the unit is
//! installed and a user manager answers, otherwise by tandem itself (pid
//! files in the runtime folder, a new session, logs to files). Both give the
//! same verbs and the same output.

use std::io::{BufRead, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::daemons::{self, Daemon};
use crate::settings::Settings;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Manager {
    Systemd,
    Processes,
}

impl Manager {
    /// systemd when the unit is installed and `systemctl --user` answers;
    /// `QSE_TANDEM_MANAGER=processes|systemd` decides instead when set.
    pub fn detect(daemon: Daemon) -> Manager {
        match std::env::var("QSE_TANDEM_MANAGER").as_deref() {
            Ok("processes") => return Manager::Processes,
            Ok("systemd") => return Manager::Systemd,
            _ => {}
        }
        let unit = tandem_shared::secrets::home()
            .join(".config/systemd/user")
            .join(daemon.unit);
        if unit.exists() && user_manager_answers() {
            Manager::Systemd
        } else {
            Manager::Processes
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Manager::Systemd => "systemd --user",
            Manager::Processes => "tandem (pid files)",
        }
    }
}

fn user_manager_answers() -> bool {
    Command::new("systemctl")
        .args(["--user", "show-environment"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn systemctl(args: &[&str]) -> anyhow::Result<()> {
    let status = Command::new("systemctl")
        .arg("--user")
        .args(args)
        .status()
        .context("running systemctl --user")?;
    if !status.success() {
        bail!("systemctl --user {} failed ({status})", args.join(" "));
    }
    Ok(())
}

/// The daemon's main pid: systemd's MainPID, or the pid file when that
/// process is alive and is the daemon.
pub fn pid(manager: Manager, daemon: Daemon) -> Option<u32> {
    match manager {
        Manager::Systemd => {
            let out = Command::new("systemctl")
                .args(["--user", "show", "-p", "MainPID", "--value", daemon.unit])
                .output()
                .ok()?;
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse::<u32>()
                .ok()
                .filter(|p| *p > 0)
        }
        Manager::Processes => {
            let text = std::fs::read_to_string(daemon.pid_file()).ok()?;
            let pid: u32 = text.trim().parse().ok()?;
            is_daemon_process(pid, daemon).then_some(pid)
        }
    }
}

/// Alive, and its command name is the daemon's (a reused pid is not).
pub fn is_daemon_process(pid: u32, daemon: Daemon) -> bool {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // A zombie has exited already: it only waits for its parent.
    let zombie = stat
        .rsplit(')')
        .next()
        .is_some_and(|rest| rest.trim_start().starts_with('Z'));
    comm.trim() == daemon.binary && !zombie
}

/// The binary beside this `tandem`, else the one on PATH.
pub fn binary_path(daemon: Daemon) -> PathBuf {
    crate::paths::sibling_binary(daemon.binary)
}

/// Starts the daemon and waits for its `/health` within `bound`. On failure
/// the error carries the log's last lines.
pub async fn start(
    manager: Manager,
    daemon: Daemon,
    settings: &Settings,
    bound: Duration,
) -> anyhow::Result<u32> {
    let client = reqwest::Client::new();
    let url = settings.daemon_url(daemon);
    match manager {
        Manager::Systemd => systemctl(&["start", daemon.unit])?,
        Manager::Processes => {
            if let Some(pid) = pid(manager, daemon) {
                bail!("{} is already running (pid {pid})", daemon.binary);
            }
            spawn_detached(daemon, settings)?;
        }
    }
    let deadline = Instant::now() + bound;
    loop {
        if daemons::health(&client, &url, Duration::from_millis(500))
            .await
            .is_some()
        {
            return pid(manager, daemon)
                .context("the daemon answers /health but its pid is unknown");
        }
        let alive = pid(manager, daemon).is_some();
        if !alive || Instant::now() >= deadline {
            let why = if alive {
                format!("did not answer {url}/health within {}s", bound.as_secs())
            } else {
                "exited right after starting".to_string()
            };
            if manager == Manager::Processes {
                // Half-started is worse than stopped: a later start would find the port taken.
                let _ = stop(manager, daemon, Duration::from_secs(5)).await;
                let _ = std::fs::remove_file(daemon.pid_file());
            }
            bail!(
                "{} {why}. The log's last lines ({}):\n{}",
                daemon.binary,
                log_location(manager, daemon),
                tail(manager, daemon, 20)
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn spawn_detached(daemon: Daemon, settings: &Settings) -> anyhow::Result<()> {
    let logs = daemons::logs_dir();
    tandem_shared::fsmode::private_dir(&logs)
        .with_context(|| format!("making {}", logs.display()))?;
    let runtime = daemons::runtime_dir();
    tandem_shared::fsmode::private_dir(&runtime)
        .with_context(|| format!("making {}", runtime.display()))?;
    let log = open_log(&daemon.log_file())?;
    let binary = binary_path(daemon);
    let mut command = Command::new(&binary);
    command
        .current_dir(&settings.root)
        .env("QSE_LOG_TO", "file")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    // SAFETY: setsid is async-signal-safe; it runs in the child between fork and exec.
    unsafe {
        command.pre_exec(|| {
            nix::unistd::setsid()
                .map(|_| ())
                .map_err(std::io::Error::from)
        });
    }
    let child = command
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    let pid_file = daemon.pid_file();
    let _ = std::fs::remove_file(&pid_file);
    tandem_shared::fsmode::write_private_new(&pid_file, format!("{}\n", child.id()).as_bytes())
        .with_context(|| format!("writing {}", pid_file.display()))?;
    // The child lives on in its own session after tandem exits; dropping the
    // handle neither waits for it nor kills it.
    drop(child);
    Ok(())
}

/// Records a running daemon's pid (one started without tandem) so the
/// process verbs can manage it.
pub fn adopt(daemon: Daemon, pid: u32) -> anyhow::Result<()> {
    let runtime = daemons::runtime_dir();
    tandem_shared::fsmode::private_dir(&runtime)
        .with_context(|| format!("making {}", runtime.display()))?;
    let pid_file = daemon.pid_file();
    let _ = std::fs::remove_file(&pid_file);
    tandem_shared::fsmode::write_private_new(&pid_file, format!("{pid}\n").as_bytes())
        .with_context(|| format!("writing {}", pid_file.display()))
}

fn open_log(path: &Path) -> anyhow::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))
}

/// How the stop went.
pub enum Stopped {
    WasNotRunning,
    Exited { seconds: f64 },
    Killed,
}

/// Stops the daemon: SIGTERM (the daemon ends open work cleanly), SIGKILL past `bound`.
pub async fn stop(manager: Manager, daemon: Daemon, bound: Duration) -> anyhow::Result<Stopped> {
    let started = Instant::now();
    match manager {
        Manager::Systemd => {
            if pid(manager, daemon).is_none() {
                return Ok(Stopped::WasNotRunning);
            }
            systemctl(&["stop", daemon.unit])?;
            // systemd kills a unit that outlives its TimeoutStopSec and still
            // counts the stop done: its Result says which it was.
            let result = Command::new("systemctl")
                .args(["--user", "show", "-p", "Result", "--value", daemon.unit])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .unwrap_or_default();
            if result == "timeout" {
                return Ok(Stopped::Killed);
            }
            Ok(Stopped::Exited {
                seconds: started.elapsed().as_secs_f64(),
            })
        }
        Manager::Processes => {
            let Some(pid) = pid(manager, daemon) else {
                let _ = std::fs::remove_file(daemon.pid_file());
                return Ok(Stopped::WasNotRunning);
            };
            let target = Pid::from_raw(pid as i32);
            kill(target, Signal::SIGTERM).with_context(|| format!("signalling pid {pid}"))?;
            let deadline = Instant::now() + bound;
            while Instant::now() < deadline {
                if !is_daemon_process(pid, daemon) {
                    let _ = std::fs::remove_file(daemon.pid_file());
                    return Ok(Stopped::Exited {
                        seconds: started.elapsed().as_secs_f64(),
                    });
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let _ = kill(target, Signal::SIGKILL);
            let _ = std::fs::remove_file(daemon.pid_file());
            Ok(Stopped::Killed)
        }
    }
}

pub fn log_location(manager: Manager, daemon: Daemon) -> String {
    match manager {
        Manager::Systemd => format!("journalctl --user -u {}", daemon.unit),
        Manager::Processes => daemon.log_file().display().to_string(),
    }
}

/// The log's last `n` lines as one string.
pub fn tail(manager: Manager, daemon: Daemon, n: usize) -> String {
    match manager {
        Manager::Systemd => Command::new("journalctl")
            .args([
                "--user",
                "-u",
                daemon.unit,
                "-n",
                &n.to_string(),
                "--no-pager",
            ])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default(),
        Manager::Processes => last_lines(&daemon.log_file(), n).join("\n"),
    }
}

/// The last `n` lines of a file (reads only its end).
pub fn last_lines(path: &Path, n: usize) -> Vec<String> {
    let Ok(mut file) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let window = (n as u64 * 400).max(64 * 1024).min(len);
    let _ = file.seek(SeekFrom::Start(len - window));
    let mut lines: Vec<String> = std::io::BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .collect();
    if window < len && !lines.is_empty() {
        lines.remove(0); // the first line of the window may be cut
    }
    let skip = lines.len().saturating_sub(n);
    lines.split_off(skip)
}

/// Whether `logs` stops after the last lines or follows the log.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    Once,
    Follow,
}

/// Prints the log's last `n` lines, then follows it with `Tail::Follow`.
pub async fn logs(manager: Manager, daemon: Daemon, n: usize, tail: Tail) -> anyhow::Result<()> {
    if manager == Manager::Systemd {
        let mut args = vec![
            "--user".to_string(),
            "-u".into(),
            daemon.unit.into(),
            "-n".into(),
            n.to_string(),
            "--no-pager".into(),
        ];
        if tail == Tail::Follow {
            args.push("-f".into());
        }
        let status = Command::new("journalctl")
            .args(&args)
            .status()
            .context("running journalctl")?;
        if !status.success() {
            bail!("journalctl failed ({status})");
        }
        return Ok(());
    }
    let path = daemon.log_file();
    if !path.exists() {
        bail!("{} has no log yet at {}", daemon.binary, path.display());
    }
    for line in last_lines(&path, n) {
        println!("{line}");
    }
    if tail == Tail::Once {
        return Ok(());
    }
    let mut position = std::fs::metadata(&path)?.len();
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(()),
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
        let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        if len < position {
            position = 0; // the log was rotated or truncated
        }
        if len > position {
            let mut file = std::fs::File::open(&path)?;
            file.seek(SeekFrom::Start(position))?;
            let mut text = String::new();
            std::io::Read::read_to_string(&mut file, &mut text)?;
            print!("{text}");
            position = len;
        }
    }
}
