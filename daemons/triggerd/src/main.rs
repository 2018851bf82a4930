//! triggerd's entry: arguments, config, logging; the rest is `triggerd::run`.

use std::process::ExitCode;

use clap::Parser;

/// tandem's triggers: chats that start by themselves, on a schedule
/// ("weekdays 09:30" in a time zone, or five cron fields) or when a file
/// arrives in a folder of the workspace. Each run is a chat of its own,
/// made through chatd's API, with an inbox entry when it ends or fails.
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Args {
    #[command(flatten)]
    common: tandem_shared::daemon::CommonArgs,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let common = args.common.clone();
    tandem_shared::daemon::main("triggerd", &common, triggerd::config::DEFAULT_TOML, || {
        start(args)
    })
}

fn start(args: Args) -> anyhow::Result<()> {
    let loaded = args
        .common
        .load::<triggerd::config::FileConfig>(triggerd::config::ENV_KEYS)?;
    let config = loaded.config.triggers;
    config.check()?;
    tandem_shared::daemon::start_logging("triggerd", &loaded.origins)?;
    tandem_shared::daemon::block_on_signals(|shutdown| triggerd::run(config, shutdown))
}
