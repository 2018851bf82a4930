//! What every daemon's `main` does the same way: the common arguments, the
//! config loaded from file, env files and environment, the failure line.

use std::path::PathBuf;
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
    tracing::info!(version = env!("CARGO_PKG_VERSION"), config_from = ?origins, "{name} starting");
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
