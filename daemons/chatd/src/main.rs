//! chatd's entry: arguments, config, logging, the listener; the rest is `chatd::run`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;

/// tandem's chat daemon: chats kept on the server, runs against the box's
/// engine, every change an event that devices tail over SSE.
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
        print!("{}", chatd::config::DEFAULT_TOML);
        return ExitCode::SUCCESS;
    }
    match start(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("chatd: {err:#}");
            tracing::error!(error = %format!("{err:#}"), "chatd failed");
            ExitCode::FAILURE
        }
    }
}

fn start(args: Args) -> anyhow::Result<()> {
    let run_dir = args.env_dir.clone().unwrap_or_else(|| PathBuf::from("."));
    let sources = tandem_shared::config::Sources::from_process(args.config.clone(), Some(&run_dir));
    let loaded = tandem_shared::config::load::<chatd::config::FileConfig>(
        &sources,
        chatd::config::ENV_KEYS,
    )?;
    let config = loaded.config.chatd;
    config.check()?;
    let logs = tandem_shared::secrets::home().join(".tandemllm/logs");
    tandem_shared::logging::init("chatd", &logs)?;
    tracing::info!(version = env!("CARGO_PKG_VERSION"), config_from = ?loaded.origins, "chatd starting");
    let address = config
        .listen_addr()
        .map_err(|e| anyhow::anyhow!("chatd.listen: {e}"))?;
    // Blocking threads serve SQLite reads; a crowd of devices reconnecting at
    // once queues for a few of them instead of spawning hundreds of threads
    // (each with its own malloc arena: that was most of the RSS after a restart).
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(16)
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .with_context(|| {
                format!("listening on {address} (is another chatd running? `tandem chat status`)")
            })?;
        let (_trigger, shutdown) = tandem_shared::shutdown::Shutdown::on_signals()?;
        chatd::run(config, listener, shutdown).await
    })
}
