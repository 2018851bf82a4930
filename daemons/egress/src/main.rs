//! egressd's entry: arguments, config, logging; the rest is `egressd::run`.

use std::process::ExitCode;

use clap::Parser;

/// tandem's egress proxy: the only way out for a chat's sandboxed commands,
/// by the chat's preset (off, registries, all) under the administrator's
/// ceiling, never to the LAN, the box itself or a cloud metadata address.
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Args {
    #[command(flatten)]
    common: tandem_shared::daemon::CommonArgs,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let common = args.common.clone();
    tandem_shared::daemon::main("egressd", &common, egressd::config::DEFAULT_TOML, || {
        start(args)
    })
}

fn start(args: Args) -> anyhow::Result<()> {
    let loaded = args
        .common
        .load::<egressd::config::FileConfig>(egressd::config::ENV_KEYS)?;
    let config = loaded.config.egress;
    config.check()?;
    tandem_shared::daemon::start_logging("egressd", &loaded.origins)?;
    let common = args.common.clone();
    let reload = move || {
        common
            .load::<egressd::config::FileConfig>(egressd::config::ENV_KEYS)
            .map(|loaded| loaded.config.egress)
    };
    tandem_shared::daemon::block_on_signals(|shutdown| egressd::run(config, shutdown, reload))
}
