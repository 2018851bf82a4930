//! connectord's entry: arguments, config, logging; the rest is `connectord::run`.

use std::process::ExitCode;

use clap::Parser;

/// tandem's connectors: Telegram bots (long polling) and Slack apps (Socket
/// Mode) bound to saved agents. The people on a binding's allowlist talk to
/// the agent from their phones; each sender's chat is a chat in chatd, and
/// the answer grows in place while the agent works. Tokens are sealed with
/// connectors.key and never leave connectord.
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Args {
    #[command(flatten)]
    common: tandem_shared::daemon::CommonArgs,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let common = args.common.clone();
    tandem_shared::daemon::main(
        "connectord",
        &common,
        connectord::config::DEFAULT_TOML,
        || start(args),
    )
}

fn start(args: Args) -> anyhow::Result<()> {
    let loaded = args
        .common
        .load::<connectord::config::FileConfig>(connectord::config::ENV_KEYS)?;
    let config = loaded.config.connectors;
    config.check()?;
    tandem_shared::daemon::start_logging("connectord", &loaded.origins)?;
    tandem_shared::daemon::block_on_signals(|shutdown| connectord::run(config, shutdown))
}
