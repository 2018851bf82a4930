//! chatd's entry: arguments, config, logging, the data lock, the listener; the rest is `chatd::run`.

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;

/// tandem's chat daemon: chats kept on the server, runs against the box's
/// engine, every change an event that devices tail over SSE.
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Args {
    #[command(flatten)]
    common: tandem_shared::daemon::CommonArgs,
    /// Also serve the web page, the API with the admin token's sign-in and the
    /// engine's other routes at ADDR (e.g. 0.0.0.0:4180), for an engine without
    /// a /v1/chat-app forward. Overrides `[chatd] front` and QSE_CHAT_FRONT.
    #[arg(long, value_name = "ADDR")]
    front: Option<String>,
}

fn main() -> ExitCode {
    // The document reader: chatd's own binary in a child process (documents::helper).
    let mut argv = std::env::args();
    if argv.nth(1).as_deref() == Some(chatd::documents::helper::SUBCOMMAND) {
        return chatd::documents::helper::child_main(&argv.collect::<Vec<_>>());
    }
    few_malloc_arenas();
    let args = Args::parse();
    let common = args.common.clone();
    tandem_shared::daemon::main("chatd", &common, chatd::config::DEFAULT_TOML, || {
        start(args)
    })
}

/// glibc gives each new thread its own malloc arena, up to eight a core. Every
/// blocking thread that served a read, a document or an upload keeps ~12 MiB of
/// freed memory in its arena: under the soak's load chatd's RSS rose 30-40 %
/// after warm-up (175 -> 230 MiB) with ~105 MiB in use. With two it rose 13 %
/// (127 -> 144 MiB; four: 15 %, 142 -> 163). chatd's work waits on SQLite's
/// one writer and on sockets, not on malloc. Set before any thread starts.
fn few_malloc_arenas() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets a malloc parameter; no other thread exists yet.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

fn start(args: Args) -> anyhow::Result<()> {
    let loaded = args
        .common
        .load::<chatd::config::FileConfig>(chatd::config::ENV_KEYS)?;
    let mut config = loaded.config.chatd;
    if let Some(front) = args.front {
        config.front = front;
    }
    config.check()?;
    tandem_shared::daemon::start_logging("chatd", &loaded.origins)?;
    // One chatd per data folder, decided before the port is bound or a file
    // written (o+x an administrator gave the folder is kept, as in `run`).
    tandem_shared::fsmode::private_dir_passable(&config.data_dir)
        .with_context(|| format!("making data folder {}", config.data_dir.display()))?;
    let _lock = tandem_shared::daemon::hold_lock(&config.data_dir, "chatd")?;
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
        let listener = tandem_shared::listen::bind_tcp(address).with_context(|| {
            format!("listening on {address} (is another chatd running? `tandem chat status`)")
        })?;
        let (_trigger, shutdown) = tandem_shared::shutdown::Shutdown::on_signals()?;
        chatd::run(config, listener, shutdown).await
    })
}
