//! hostexecd's entry: arguments, config, logging; the rest is `hostexecd::run`.
//! `hostexecd --keeper` is the per-call keeper (see `keeper.rs`), decided
//! before anything else is read.

use std::process::ExitCode;

use clap::Parser;

/// tandem's host commands: a chat's command run on this machine with a
/// clean environment, a time limit, an output limit, never as root, and
/// nothing it started left running when it ends. Every command is audited.
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Args {
    #[command(flatten)]
    common: tandem_shared::daemon::CommonArgs,
}

fn main() -> ExitCode {
    if std::env::args_os().nth(1).is_some_and(|a| a == "--keeper") {
        hostexecd::keeper::main();
    }
    let args = Args::parse();
    let common = args.common.clone();
    tandem_shared::daemon::main(
        "hostexecd",
        &common,
        hostexecd::config::DEFAULT_TOML,
        || start(args),
    )
}

fn start(args: Args) -> anyhow::Result<()> {
    let loaded = args
        .common
        .load::<hostexecd::config::FileConfig>(hostexecd::config::ENV_KEYS)?;
    let config = loaded.config.hostexec;
    config.check()?;
    // Who runs commands is decided before anything is written: as root
    // without run_as, hostexecd stops here and says why.
    hostexecd::identities(&config)?;
    tandem_shared::daemon::start_logging("hostexecd", &loaded.origins)?;
    tandem_shared::daemon::block_on_signals(|shutdown| hostexecd::run(config, shutdown))
}
