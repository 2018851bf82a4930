//! What every daemon's `main` does the same way: the common arguments, the
//! config loaded from file, env files and environment, the failure line.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use std::process::ExitCode;

use serde::de::DeserializeOwned;

use crate::config::{EnvKey, Loaded, Sources};

/// The arguments every daemon takes (flattened into its own `Args`).
#[derive(clap::Args, Debug, Clone)]
pub struct CommonArgs {
    /// The config file (default: $QSE_CONFIG, else ~/.config/tandem/tandem.toml).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Print the commented default config and exit.
    #[arg(long)]
    pub print_default_config: bool,
    /// The folder holding run/serve.env and run/local.env (default: the current folder).
    #[arg(long, value_name = "DIR")]
    pub env_dir: Option<PathBuf>,
}

impl CommonArgs {
    /// The config file, then run/serve.env and run/local.env, then the environment.
    pub fn load<T: DeserializeOwned>(&self, keys: &[EnvKey]) -> anyhow::Result<Loaded<T>> {
        let run_dir = self.env_dir.clone().unwrap_or_else(|| PathBuf::from("."));
        let sources = Sources::from_process(self.config.clone(), Some(&run_dir));
        Ok(crate::config::load::<T>(&sources, keys)?)
    }
}

/// Runs a daemon's `start` unless `--print-default-config` asks for the
/// defaults; a failure is one line on stderr and in the log, exit 1.
pub fn main(
    name: &str,
    common: &CommonArgs,
    default_toml: &str,
    start: impl FnOnce() -> anyhow::Result<()>,
) -> ExitCode {
    if common.print_default_config {
        print!("{default_toml}");
        return ExitCode::SUCCESS;
    }
    // Before anything opens a descriptor; the first log line says the result.
    crate::nofile::raise();
    match start() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("{name}: {err:#}");
            tracing::error!(error = %format!("{err:#}"), "{name} failed");
            ExitCode::FAILURE
        }
    }
}

/// Logging to the journal (or `~/.tandemllm/logs/<name>.log`), and the
/// first line: the version and where the settings came from.
pub fn start_logging(name: &str, origins: &[String]) -> anyhow::Result<()> {
    let logs = crate::secrets::home().join(".tandemllm/logs");
    crate::logging::init(name, &logs)?;
    let nofile = crate::nofile::raise();
    tracing::info!(version = env!("CARGO_PKG_VERSION"), config_from = ?origins,
        nofile = nofile.soft, nofile_hard = nofile.hard, nofile_before = nofile.before, "{name} starting");
    if nofile.refused {
        tracing::warn!(nofile = nofile.soft, nofile_hard = nofile.hard,
            "the descriptor limit could not be raised to the hard limit; set LimitNOFILE= in the unit");
    }
    Ok(())
}

/// A multi-threaded runtime running `serve` until it returns; `serve` gets
/// the shutdown that SIGTERM and SIGINT begin.
pub fn block_on_signals<F, Fut>(serve: F) -> anyhow::Result<()>
where
    F: FnOnce(crate::shutdown::Shutdown) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    use anyhow::Context;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let (_trigger, shutdown) = crate::shutdown::Shutdown::on_signals()?;
        serve(shutdown).await
    })
}

/// `$XDG_RUNTIME_DIR/tandem` (sockets, pid files), else a private folder in /tmp.
pub fn runtime_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir).join("tandem"),
        _ => PathBuf::from(format!("/tmp/tandem-{}", nix::unistd::getuid())),
    }
}

/// `<name>.lock` in a daemon's data folder, held while the process lives
/// (the kernel lets go of it when the process ends, however it ends, so a
/// restart finds it free); it holds the holder's pid for a second one to name.
pub struct DataLock {
    _file: nix::fcntl::Flock<std::fs::File>,
}

/// Takes `<name>.lock` in `data_dir` (the folder must exist) or fails at once
/// with one line naming the pid that holds it: one daemon per data folder.
/// Taken before anything else is written and before any socket is bound.
pub fn hold_lock(data_dir: &Path, name: &str) -> anyhow::Result<DataLock> {
    let path = lock_path(data_dir, name);
    match try_lock(open_lock(&path)?, &path)? {
        Ok(lock) => claim(lock, &path),
        Err(_) => anyhow::bail!(
            "another {name} ({}) holds {}: one {name} per data folder",
            holder(&path),
            path.display()
        ),
    }
}

/// Takes `<name>.lock` in `data_dir`, waiting while another process of the
/// same daemon has it (or until shutdown: `None`): a standby for the one
/// that runs (triggerd, connectord).
pub async fn take_lock(
    data_dir: &Path,
    name: &str,
    shutdown: &crate::shutdown::Shutdown,
) -> anyhow::Result<Option<DataLock>> {
    let path = lock_path(data_dir, name);
    let mut file = match try_lock(open_lock(&path)?, &path)? {
        Ok(lock) => return claim(lock, &path).map(Some),
        Err(file) => file,
    };
    let holder = holder(&path);
    tracing::info!(lock = %path.display(), daemon = name, %holder,
        "another process of this daemon runs on this data folder ({holder}); waiting for its lock");
    crate::notify::status(&format!("waiting for another {name}'s lock ({holder})"));
    // Asked again every 250 ms rather than waited for in a blocking call, so
    // a SIGTERM while waiting ends this daemon at once.
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            _ = shutdown.wait() => return Ok(None),
        }
        match try_lock(file, &path)? {
            Ok(lock) => {
                tracing::info!(lock = %path.display(), "the lock is ours");
                return claim(lock, &path).map(Some);
            }
            Err(back) => file = back,
        }
    }
}

fn lock_path(data_dir: &Path, name: &str) -> PathBuf {
    data_dir.join(format!("{name}.lock"))
}

fn open_lock(path: &Path) -> anyhow::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    // Not truncated here: until the lock is ours the pid in it is the holder's.
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))
}

/// The lock, or the file back when another process holds it.
type Tried = Result<nix::fcntl::Flock<std::fs::File>, std::fs::File>;

fn try_lock(file: std::fs::File, path: &Path) -> anyhow::Result<Tried> {
    use nix::fcntl::{Flock, FlockArg};
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(Ok(lock)),
        Err((file, nix::errno::Errno::EWOULDBLOCK)) => Ok(Err(file)),
        Err((_, errno)) => anyhow::bail!("locking {}: {errno}", path.display()),
    }
}

/// Writes this process's pid into the lock it now holds.
fn claim(lock: nix::fcntl::Flock<std::fs::File>, path: &Path) -> anyhow::Result<DataLock> {
    use std::io::Write;
    let mut file: &std::fs::File = &lock;
    file.set_len(0)
        .and_then(|()| file.write_all(format!("{}\n", std::process::id()).as_bytes()))
        .with_context(|| format!("writing this pid into {}", path.display()))?;
    Ok(DataLock { _file: lock })
}

/// `pid N` of the lock's holder, as its file says; unknown for the moment
/// between its lock and its write, or when a build that wrote none holds it.
fn holder(path: &Path) -> String {
    match std::fs::read_to_string(path)
        .ok()
        .and_then(|text| text.trim().parse::<u32>().ok())
    {
        Some(pid) => format!("pid {pid}"),
        None => "pid unknown".to_string(),
    }
}

/// Listens on the unix socket `socket` (0600, its folder made private),
/// replacing a socket a previous run left.
pub fn bind_unix(socket: &Path) -> anyhow::Result<tokio::net::UnixListener> {
    // Made private even when it is there already: a folder another user
    // made first (say in /tmp) would let them stand in for this socket.
    if let Some(dir) = socket.parent() {
        crate::fsmode::private_dir(dir)
            .with_context(|| format!("making {} private (0700)", dir.display()))?;
    }
    bind_unix_in_prepared_dir(socket)
}

/// The same in a folder the caller made and keeps as it is (hostexecd's,
/// given to the uid that calls it): the socket 0600, a stale one replaced.
pub fn bind_unix_in_prepared_dir(socket: &Path) -> anyhow::Result<tokio::net::UnixListener> {
    if socket.exists() {
        std::fs::remove_file(socket)
            .with_context(|| format!("removing the old socket {}", socket.display()))?;
    }
    let listener = tokio::net::UnixListener::bind(socket)
        .with_context(|| format!("listening on {}", socket.display()))?;
    crate::fsmode::private_file(socket)
        .with_context(|| format!("setting mode 0600 on {}", socket.display()))?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_with_the_first_ones_pid() {
        let dir = tempfile::tempdir().unwrap();
        let first = hold_lock(dir.path(), "testd").unwrap();
        let path = dir.path().join("testd.lock");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("{}\n", std::process::id())
        );
        // flock belongs to the open file: a second open in this process is refused too.
        let err = hold_lock(dir.path(), "testd").err().unwrap();
        assert_eq!(
            format!("{err:#}"),
            format!(
                "another testd (pid {}) holds {}: one testd per data folder",
                std::process::id(),
                path.display()
            )
        );
        drop(first);
        drop(hold_lock(dir.path(), "testd").unwrap());
    }

    #[test]
    fn a_stale_pid_is_replaced_by_the_new_holder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("testd.lock");
        std::fs::write(&path, "4294967\n").unwrap();
        let _lock = hold_lock(dir.path(), "testd").unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("{}\n", std::process::id())
        );
    }
}
