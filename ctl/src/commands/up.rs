//! `tandem up`: chatd in the foreground; the engine simulator beside it only
//! when no engine answers at QSE_ENGINE_URL, and it says so.

use std::process::{ExitCode, Stdio};
use std::time::Duration;

use anyhow::Context;
use tokio::process::{Child, Command};

use crate::paths;
use crate::settings::Settings;

pub const LONG_ABOUT: &str = "\
Run chatd in the foreground until Ctrl-C.

If no engine answers at QSE_ENGINE_URL (default http://127.0.0.1:8000), the
engine simulator is started there first, and tandem says so: chats then get
deterministic simulated answers. A real engine (llama-server, vLLM, ...) is
used as soon as it is the one answering.

With --front ADDR chatd also serves the web page there (for this run only;
`tandem chat start --front ADDR` keeps it): open http://ADDR/ in a browser.

Example:
  tandem up --front 127.0.0.1:4180  # then open http://127.0.0.1:4180/
  tandem chat send 'hello'          # in another terminal";

#[derive(clap::Args)]
pub struct Args {
    /// Never start the simulator: fail when no engine answers.
    #[arg(long)]
    no_sim: bool,
    /// Also serve the web page and the API at ADDR (e.g. 127.0.0.1:4180).
    #[arg(long, value_name = "ADDR")]
    front: Option<String>,
}

pub async fn exec(args: Args) -> anyhow::Result<ExitCode> {
    let mut settings = Settings::load()?;
    if let Some(front) = &args.front {
        settings.chatd.front = front.clone();
        settings
            .chatd
            .front_addr()
            .map_err(|e| anyhow::anyhow!("--front: {e}"))?;
    }
    let engine = settings.engine_url().to_string();
    let mut sim: Option<Child> = None;
    if engine_answers(&engine).await {
        eprintln!("tandem: the engine at {engine} answers; using it");
    } else if args.no_sim {
        anyhow::bail!(
            "no engine answers at {engine} (--no-sim given): start the engine, or drop --no-sim"
        );
    } else {
        let listen = engine
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        eprintln!("tandem: no engine answers at {engine}; starting the engine simulator there (simulated answers)");
        let child = Command::new(paths::sibling_binary("engine-sim"))
            .args(["--listen", &listen])
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("starting engine-sim (build it with `cargo build --release --workspace`)")?;
        sim = Some(child);
        wait_for(&engine)
            .await
            .context("the engine simulator did not answer within 10 s")?;
    }
    let mut chatd = Command::new(paths::sibling_binary("chatd"));
    if let Some(front) = &args.front {
        chatd.args(["--front", front]);
    }
    let mut chatd = chatd
        .current_dir(&settings.root)
        .env(
            "QSE_LOG_TO",
            std::env::var("QSE_LOG_TO").unwrap_or_else(|_| "stderr".into()),
        )
        .kill_on_drop(true)
        .spawn()
        .context("starting chatd")?;
    let chatd_daemon = crate::daemons::by_name("chatd").context("chatd is in the daemon table")?;
    eprintln!(
        "tandem: chatd at {}; data in {}; Ctrl-C stops",
        settings.daemon_url(chatd_daemon),
        settings.chatd.data_dir.display()
    );
    if let Some(front) = crate::front::describe(&settings) {
        eprintln!("tandem: the chat page: {front}");
    }
    let status = tokio::select! {
        status = chatd.wait() => status?,
        _ = tokio::signal::ctrl_c() => {
            // chatd has the same terminal and got the Ctrl-C too; give it its grace period.
            if let Some(pid) = chatd.id() {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM);
            }
            match tokio::time::timeout(Duration::from_secs(8), chatd.wait()).await {
                Ok(status) => status?,
                Err(_) => {
                    let _ = chatd.kill().await;
                    chatd.wait().await?
                }
            }
        }
    };
    if let Some(mut sim) = sim {
        let _ = sim.kill().await;
    }
    Ok(if status.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

async fn engine_answers(engine: &str) -> bool {
    crate::daemons::engine_answers(&reqwest::Client::new(), engine, Duration::from_secs(2))
        .await
        .is_some()
}

async fn wait_for(engine: &str) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::time::Instant::now() < deadline {
        if engine_answers(engine).await {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!("timed out")
}
