//! What every daemon's `main` does the same way: the common arguments, the
//! config loaded from file, env files and environment, the failure line.

use std::path::PathBuf;
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

/// Holds `<name>.lock` in `data_dir`, waiting while another process of the
/// same daemon has it (or until shutdown: `None`): one daemon per data folder.
pub async fn take_lock(
    data_dir: &std::path::Path,
    name: &str,
    shutdown: &crate::shutdown::Shutdown,
) -> anyhow::Result<Option<nix::fcntl::Flock<std::fs::File>>> {
    use nix::fcntl::{Flock, FlockArg};
    use std::os::unix::fs::OpenOptionsExt;
    let path = data_dir.join(format!("{name}.lock"));
    let open = || {
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))
    };
    match Flock::lock(open()?, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => return Ok(Some(lock)),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => {}
        Err((_, errno)) => anyhow::bail!("locking {}: {errno}", path.display()),
    }
    tracing::info!(lock = %path.display(), daemon = name, "another process of this daemon runs on this data folder; waiting for its lock");
    crate::notify::status(&format!("waiting for another {name}'s lock"));
    // Asked again every 250 ms rather than waited for in a blocking call, so
    // a SIGTERM while waiting ends this triggerd at once.
    let mut file = open()?;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            _ = shutdown.wait() => return Ok(None),
        }
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => {
                tracing::info!(lock = %path.display(), "the lock is ours");
                return Ok(Some(lock));
            }
            Err((back, nix::errno::Errno::EWOULDBLOCK)) => file = back,
            Err((_, errno)) => anyhow::bail!("locking {}: {errno}", path.display()),
        }
    }
}

/// Listens on the unix socket `socket` (0600, its folder made private),
/// replacing a socket a previous run left.
pub fn bind_unix(socket: &std::path::Path) -> anyhow::Result<tokio::net::UnixListener> {
    // Made private even when it is there already: a folder another user
    // made first (say in /tmp) would let them stand in for this socket.
    if let Some(dir) = socket.parent() {
        crate::fsmode::private_dir(dir)
            .with_context(|| format!("making {} private (0700)", dir.display()))?;
    }
    if socket.exists() {
        std::fs::remove_file(socket)?;
    }
    let listener = tokio::net::UnixListener::bind(socket)
        .with_context(|| format!("listening on {}", socket.display()))?;
    crate::fsmode::private_file(socket)?;
    Ok(listener)
}
