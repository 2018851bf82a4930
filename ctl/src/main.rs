//! `tandem`: the one command that operates tandem. `main` only dispatches;
//! each verb lives in its own file under `commands/`.
//!
//! Exit codes: 0 success; 1 the thing asked for did not happen (a daemon did
//! not start or is not healthy, a run did not end done); 2 bad usage.

mod answer;
mod checks;
mod client;
mod commands;
mod daemons;
mod front;
mod image;
mod manager;
mod paths;
mod settings;
mod tty;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use commands::service::ServiceVerb;

/// Operate tandem, the chat services of this box.
#[derive(Parser)]
#[command(name = "tandem", version, about, long_about = LONG_ABOUT)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

const LONG_ABOUT: &str = "\
Operate tandem, the chat services of this box: chatd (chats kept on the
server), egressd (the only way out for a chat's commands), hostexecd (a
chat's commands on this machine), triggerd (chats that start by themselves)
and connectord (Telegram and Slack bots bound to saved agents).

Daemons run under `systemctl --user` when their units are installed and a
user manager answers; otherwise tandem runs them itself, with pid files in
$XDG_RUNTIME_DIR/tandem and logs in ~/.tandemllm/logs. The verbs and their
output are the same either way.

Exit codes: 0 success; 1 what was asked did not happen; 2 bad usage.";

#[derive(Subcommand)]
enum Command {
    /// Run chatd in the foreground, with the engine simulator when no engine answers.
    #[command(long_about = commands::up::LONG_ABOUT)]
    Up(commands::up::Args),
    /// One line per daemon and one for the engine; exit 0 when all is well.
    #[command(long_about = commands::status::LONG_ABOUT)]
    Status,
    /// Start daemons (all of this build, or those named).
    ///
    /// Example: tandem start chat
    Start {
        /// chat, egress, hostexec, triggers, connectors (default: all).
        daemons: Vec<String>,
    },
    /// Stop daemons (all, or those named).
    ///
    /// Example: tandem stop
    Stop { daemons: Vec<String> },
    /// Restart daemons (all, or those named).
    ///
    /// Example: tandem restart chat
    Restart { daemons: Vec<String> },
    /// chatd: start, stop, restart, status, logs; send, cancel and continue an answer; attach to a chat; its files and undo; its sub-agents, tasks, goal and loops.
    #[command(subcommand)]
    Chat(commands::chat::ChatCommand),
    /// egressd: start, stop, restart, status, logs; the sandbox user's nftables rules.
    #[command(subcommand)]
    Egress(commands::egress::EgressCommand),
    /// hostexecd: start, stop, restart, status, logs; a chat's commands on this machine.
    #[command(subcommand)]
    Hostexec(ServiceVerb),
    /// The chats' sandbox image: make it and load it into podman or docker.
    #[command(subcommand)]
    Sandbox(commands::sandbox::SandboxCommand),
    /// triggerd: start, stop, restart, status, logs; it runs the triggers (`tandem trigger`).
    #[command(subcommand)]
    Triggers(ServiceVerb),
    /// Chats that start by themselves: list, show, add, rm, on, off, run, runs, preview.
    #[command(subcommand, long_about = commands::trigger::LONG_ABOUT)]
    Trigger(commands::trigger::TriggerCommand),
    /// connectord: start, stop, restart, status, logs; it runs the bots (`tandem connector`).
    #[command(subcommand)]
    Connectors(ServiceVerb),
    /// Telegram and Slack bots bound to saved agents: list, show, add, rm, test, senders, allow, on, off, set.
    #[command(subcommand, long_about = commands::connector::LONG_ABOUT)]
    Connector(commands::connector::ConnectorCommand),
    /// Saved agents: list, show, add, edit, export, import, rm, templates.
    #[command(subcommand, long_about = commands::agent::LONG_ABOUT)]
    Agent(commands::agent::AgentCommand),
    /// Skills the chats offer: list, show, add, edit, rm, and per chat off, on.
    #[command(subcommand, long_about = commands::skill::LONG_ABOUT)]
    Skill(commands::skill::SkillCommand),
    /// MCP servers for the chats' tools: list, add, test, on, off, rm.
    #[command(subcommand, long_about = commands::mcp::LONG_ABOUT)]
    Mcp(commands::mcp::McpCommand),
    /// For cron: start chatd when the engine answers and chatd does not (3 an hour at most).
    #[command(long_about = commands::watchdog::LONG_ABOUT)]
    Watchdog,
    /// Check this box's set-up, one line per check, with fixes.
    #[command(long_about = commands::doctor::LONG_ABOUT)]
    Doctor,
    /// Print shell completions.
    ///
    /// Example: tandem completions bash > ~/.local/share/bash-completion/completions/tandem
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Write man pages (tandem.1 and one per verb) into a folder.
    ///
    /// Example: tandem man ~/.local/share/man/man1
    Man {
        /// The folder to write into.
        dir: std::path::PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("tandem: starting the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let daemon = |name: &str| {
            daemons::by_name(name)
                .ok_or_else(|| anyhow::anyhow!("{name} is not in the daemon table"))
        };
        match cli.command {
            Command::Up(args) => commands::up::exec(args).await,
            Command::Status => commands::status::exec().await,
            Command::Start { daemons } => {
                commands::service::suite(ServiceVerb::Start { front: None }, &daemons).await
            }
            Command::Stop { daemons } => {
                commands::service::suite(ServiceVerb::Stop, &daemons).await
            }
            Command::Restart { daemons } => {
                commands::service::suite(ServiceVerb::Restart, &daemons).await
            }
            Command::Chat(command) => commands::chat::exec(command).await,
            Command::Egress(command) => commands::egress::exec(command).await,
            Command::Hostexec(verb) => commands::service::exec(daemon("hostexec")?, verb).await,
            Command::Sandbox(command) => commands::sandbox::exec(command).await,
            Command::Triggers(verb) => commands::service::exec(daemon("triggers")?, verb).await,
            Command::Trigger(command) => commands::trigger::exec(command).await,
            Command::Connectors(verb) => commands::service::exec(daemon("connectors")?, verb).await,
            Command::Connector(command) => commands::connector::exec(command).await,
            Command::Agent(command) => commands::agent::exec(command).await,
            Command::Mcp(command) => commands::mcp::exec(command).await,
            Command::Skill(command) => commands::skill::exec(command).await,
            Command::Watchdog => commands::watchdog::exec().await,
            Command::Doctor => commands::doctor::exec().await,
            Command::Completions { shell } => {
                clap_complete::generate(
                    shell,
                    &mut Cli::command(),
                    "tandem",
                    &mut std::io::stdout(),
                );
                Ok(ExitCode::SUCCESS)
            }
            Command::Man { dir } => {
                std::fs::create_dir_all(&dir)?;
                clap_mangen::generate_to(Cli::command(), &dir)?;
                println!("man pages written to {}", dir.display());
                Ok(ExitCode::SUCCESS)
            }
        }
    });
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("tandem: {err:#}");
            ExitCode::FAILURE
        }
    }
}
