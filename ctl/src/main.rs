//! `tandem`: the one command that operates tandem. `main` only dispatches;
//! each verb lives in its own file under `commands/`.
//!
//! Exit codes: 0 success, 1 the thing asked for did not happen (a daemon did
//! not start, a run failed), 2 bad usage.

mod commands;
mod paths;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Operate tandem, the chat services of this box.
#[derive(Parser)]
#[command(name = "tandem", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run chatd in the foreground, with the engine simulator when no engine answers.
    #[command(long_about = commands::up::LONG_ABOUT)]
    Up(commands::up::Args),
    /// Talk to chats: send a message and stream the answer, or follow a chat.
    #[command(subcommand)]
    Chat(commands::chat::ChatCommand),
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
        match cli.command {
            Command::Up(args) => commands::up::exec(args).await,
            Command::Chat(command) => commands::chat::exec(command).await,
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
