//! `tandem egress …`: egressd's service verbs, and the nftables ruleset that
//! keeps the sandbox user's traffic on egressd's proxy.

use std::process::ExitCode;

use anyhow::Context;

use crate::commands::service::ServiceVerb;
use crate::settings::Settings;

pub const RULES_ABOUT: &str = "\
The nftables ruleset for the sandbox user: table `inet tandem_egress`, chain
`output` (policy accept). Packets of the sandbox user's sockets may go to
egressd's loopback proxy listener ([egress] listen, over lo) and nowhere
else; everything else of that user is counted in the named counter
`sbx_dropped` and refused (icmpx admin-prohibited). Other users are not
touched. The per-chat proxy sockets are unix sockets and need no rule.

Without --apply the JSON is printed (what `nft -j -f -` reads). With
--apply it is loaded (root): the old table is replaced whole in one
transaction, so applying twice is the same as once. sandbox/install.sh
makes the user and runs this.

Settings: [egress] sandbox_user (tandem-sbx) and listen (127.0.0.1:8017) of
the same tandem.toml, env files and environment the daemons read.

Examples:
  tandem egress rules
  sudo tandem egress rules --apply
  sudo nft list counter inet tandem_egress sbx_dropped";

#[derive(clap::Subcommand)]
pub enum EgressCommand {
    #[command(flatten)]
    Service(ServiceVerb),
    /// The sandbox user's nftables ruleset: print it, or load it with --apply.
    #[command(long_about = RULES_ABOUT)]
    Rules {
        /// The sandbox user (default: [egress] sandbox_user, tandem-sbx).
        #[arg(long, value_name = "NAME")]
        user: Option<String>,
        /// Load it with `nft -j -f -` (root), replacing the old table.
        #[arg(long)]
        apply: bool,
    },
}

pub async fn exec(command: EgressCommand) -> anyhow::Result<ExitCode> {
    match command {
        EgressCommand::Service(verb) => {
            let egressd =
                crate::daemons::by_name("egressd").context("egressd is in the daemon table")?;
            crate::commands::service::exec(egressd, verb).await
        }
        EgressCommand::Rules { user, apply: false } => print_rules(user),
        EgressCommand::Rules { user, apply: true } => apply_rules(user),
    }
}

/// Whom the nftables rules are for: the sandbox user (`user`, else the
/// configured one), its uid, and egressd's proxy address it may reach.
fn rules_for(user: Option<String>) -> anyhow::Result<(String, u32, std::net::SocketAddr)> {
    let settings = Settings::load()?;
    let user = user.unwrap_or_else(|| settings.egress.sandbox_user.clone());
    let proxy = egressd::nft::proxy_addr(&settings.egress.listen)?;
    let uid = egressd::nft::uid_of(&user)?;
    Ok((user, uid, proxy))
}

/// `tandem egress rules`: the ruleset as JSON, loaded nowhere.
fn print_rules(user: Option<String>) -> anyhow::Result<ExitCode> {
    let (_, uid, proxy) = rules_for(user)?;
    let ruleset = egressd::nft::ruleset(uid, proxy);
    println!("{}", serde_json::to_string_pretty(&ruleset)?);
    Ok(ExitCode::SUCCESS)
}

/// `tandem egress rules --apply`: the ruleset loaded into nftables.
fn apply_rules(user: Option<String>) -> anyhow::Result<ExitCode> {
    let (user, uid, proxy) = rules_for(user)?;
    let ruleset = egressd::nft::ruleset(uid, proxy);
    egressd::nft::apply(&ruleset)?;
    println!(
        "nftables table inet {} loaded: {user} (uid {uid}) may reach only {proxy}; \
         the rest is counted in {} and refused",
        egressd::nft::TABLE,
        egressd::nft::COUNTER
    );
    Ok(ExitCode::SUCCESS)
}
