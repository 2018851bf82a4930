//! egressd's entry: arguments, config, logging; the rest is `egressd::run`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;

/// tandem's egress proxy: the only way out for a chat's sandboxed commands,
/// by the chat's preset (off, registries, all) under the administrator's
/// ceiling, never to the LAN, the box itself or a cloud metadata address.
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Args {
    /// The config file (default: $QSE_CONFIG, else ~/.config/tandem/tandem.toml).
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Print the commented default config and exit.
    #[arg(long)]
    print_default_config: bool,
    /// The folder holding run/serve.env and run/local.env (default: the current folder).
    #[arg(long, value_name = "DIR")]
    env_dir: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.print_default_config {
        print!("{}", egressd::config::DEFAULT_TOML);
        return ExitCode::SUCCESS;
    }
    match start(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("egressd: {err:#}");
            tracing::error!(error = %format!("{err:#}"), "egressd failed");
            ExitCode::FAILURE
        }
    }
}

fn start(args: Args) -> anyhow::Result<()> {
    let run_dir = args.env_dir.clone().unwrap_or_else(|| PathBuf::from("."));
    let sources = tandem_shared::config::Sources::from_process(args.config.clone(), Some(&run_dir));
    let loaded = tandem_shared::config::load::<egressd::config::FileConfig>(
        &sources,
        egressd::config::ENV_KEYS,
    )?;
    let config = loaded.config.egress;
    config.check()?;
    let logs = tandem_shared::secrets::home().join(".tandemllm/logs");
    tandem_shared::logging::init("egressd", &logs)?;
    tracing::info!(version = env!("CARGO_PKG_VERSION"), config_from = ?loaded.origins, "egressd starting");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let (_trigger, shutdown) = tandem_shared::shutdown::Shutdown::on_signals()?;
        egressd::run(config, shutdown).await
    })
}
