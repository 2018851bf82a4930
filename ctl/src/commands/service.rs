//! The service verbs of each daemon (`tandem chat start|stop|restart|status|logs`)
//! and of the suite (`tandem start|stop|restart [DAEMON…]`).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;

use crate::daemons::{self, Daemon, DAEMONS};
use crate::manager::{self, Manager, Stopped};
use crate::settings::Settings;

/// How long `start` waits for `/health`.
const START_BOUND: Duration = Duration::from_secs(20);
/// How long `stop` waits after SIGTERM before SIGKILL (chatd needs at most 5 s).
const STOP_BOUND: Duration = Duration::from_secs(10);

#[derive(clap::Subcommand, Debug, Clone)]
pub enum ServiceVerb {
    /// Start the daemon and wait until it answers /health.
    ///
    /// Exits 1 with the log's last lines when it does not answer in 20 s.
    /// Uses `systemctl --user` when the unit is installed and a user manager
    /// answers; otherwise tandem starts it in a session of its own with a pid
    /// file in $XDG_RUNTIME_DIR/tandem and its log in ~/.tandemllm/logs.
    ///
    /// `tandem chat start --front ADDR` also has chatd serve the web page
    /// at ADDR (e.g. 0.0.0.0:4180) for an engine without a /v1/chat-app
    /// forward; the address is kept as QSE_CHAT_FRONT in run/local.env, so
    /// later starts keep it, and `--front off` removes it. A running chatd
    /// is restarted to take a changed front.
    ///
    /// Example: tandem chat start --front 0.0.0.0:4180
    Start {
        /// chatd only: serve the web page and the API at ADDR (`off`: no front).
        #[arg(long, value_name = "ADDR")]
        front: Option<String>,
    },
    /// Stop the daemon (SIGTERM; SIGKILL after 10 s).
    ///
    /// chatd ends open runs `interrupted` with their text kept; Continue
    /// finishes them after the next start.
    ///
    /// Example: tandem chat stop
    Stop,
    /// Stop, then start.
    ///
    /// Example: tandem chat restart
    Restart,
    /// Pid, binary, data folder, URL and /health of the daemon.
    ///
    /// Exits 0 when it runs and answers /health, 1 otherwise.
    ///
    /// Example: tandem chat status
    Status,
    /// The daemon's last log lines.
    ///
    /// Example: tandem chat logs 50 -f
    Logs {
        /// How many lines.
        #[arg(default_value_t = 50)]
        lines: usize,
        /// Keep printing new lines until Ctrl-C.
        #[arg(short, long)]
        follow: bool,
    },
}

pub async fn exec(daemon: Daemon, verb: ServiceVerb) -> anyhow::Result<ExitCode> {
    if !daemon.built {
        bail!("{} is not part of this build yet", daemon.binary);
    }
    let mut settings = Settings::load()?;
    let manager = Manager::detect(daemon);
    match verb {
        ServiceVerb::Start { front: Some(front) } => {
            if daemon.binary != "chatd" {
                bail!("--front is chatd's: tandem chat start --front ADDR");
            }
            let changed = crate::front::save(&settings, &front)?;
            settings = Settings::load()?;
            if changed && running(&settings, daemon).await {
                println!("chatd restarts to take the new front");
                stop(&settings, manager, daemon).await?;
            }
            start(&settings, manager, daemon).await
        }
        ServiceVerb::Start { front: None } => start(&settings, manager, daemon).await,
        ServiceVerb::Stop => stop(&settings, manager, daemon).await,
        ServiceVerb::Restart => {
            stop(&settings, manager, daemon).await?;
            start(&settings, manager, daemon).await
        }
        ServiceVerb::Status => status(&settings, manager, daemon).await,
        ServiceVerb::Logs { lines, follow } => {
            let tail = if follow {
                manager::Tail::Follow
            } else {
                manager::Tail::Once
            };
            manager::logs(manager, daemon, lines, tail).await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn running(settings: &Settings, daemon: Daemon) -> bool {
    let client = reqwest::Client::new();
    daemons::health(
        &client,
        &settings.daemon_url(daemon),
        Duration::from_millis(500),
    )
    .await
    .is_some()
}

async fn start(settings: &Settings, manager: Manager, daemon: Daemon) -> anyhow::Result<ExitCode> {
    let url = settings.daemon_url(daemon);
    if running(settings, daemon).await {
        println!("{} is already running at {url}", daemon.binary);
        crate::front::print(settings, daemon);
        return Ok(ExitCode::SUCCESS);
    }
    let pid = manager::start(manager, daemon, settings, START_BOUND).await?;
    println!(
        "{} started: pid {pid}, {url}, managed by {}",
        daemon.binary,
        manager.name()
    );
    crate::front::print(settings, daemon);
    Ok(ExitCode::SUCCESS)
}

async fn stop(settings: &Settings, manager: Manager, daemon: Daemon) -> anyhow::Result<ExitCode> {
    // A daemon started without tandem (`tandem up`, by hand) has no pid
    // file; its /health names its pid.
    if manager == Manager::Processes && manager::pid(manager, daemon).is_none() {
        let client = reqwest::Client::new();
        if let Some(pid) = daemons::health(
            &client,
            &settings.daemon_url(daemon),
            Duration::from_millis(500),
        )
        .await
        .and_then(|h| h.pid)
        .filter(|pid| manager::is_daemon_process(*pid, daemon))
        {
            manager::adopt(daemon, pid)?;
        }
    }
    match manager::stop(manager, daemon, STOP_BOUND).await? {
        Stopped::WasNotRunning => println!("{} was not running", daemon.binary),
        Stopped::Exited { seconds } => {
            let note = if daemon.binary == "chatd" {
                " (open runs ended interrupted, text kept)"
            } else {
                ""
            };
            println!("{} stopped in {seconds:.1}s{note}", daemon.binary);
        }
        Stopped::Killed => println!(
            "{} did not stop within {}s of SIGTERM and was killed",
            daemon.binary,
            STOP_BOUND.as_secs()
        ),
    }
    Ok(ExitCode::SUCCESS)
}

async fn status(settings: &Settings, manager: Manager, daemon: Daemon) -> anyhow::Result<ExitCode> {
    let url = settings.daemon_url(daemon);
    let client = reqwest::Client::new();
    let health = daemons::health(&client, &url, Duration::from_millis(800)).await;
    let pid = manager::pid(manager, daemon).or(health.as_ref().and_then(|h| h.pid));
    let state = match (&health, pid) {
        (Some(_), _) => "running",
        (None, Some(_)) => "running, not answering /health",
        (None, None) => "not running",
    };
    println!("{}: {state}", daemon.binary);
    let row = |k: &str, v: String| println!("  {k:<8} {v}");
    row(
        "pid",
        pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
    );
    if let Some(h) = &health {
        row("version", h.version.clone());
        row("uptime", daemons::human_duration(h.uptime_s));
    }
    row("binary", manager::binary_path(daemon).display().to_string());
    match daemon.binary {
        "chatd" => {
            row("data", settings.chatd.data_dir.display().to_string());
            if let Some(front) = crate::front::describe(settings) {
                row("front", front);
            }
        }
        "egressd" => {
            row("data", settings.egress.data_dir.display().to_string());
            row("ceiling", settings.egress.ceiling.clone());
            row("proxy", settings.egress.listen.clone());
        }
        "hostexecd" => {
            row("data", settings.hostexec.data_dir.display().to_string());
            let run_as = if settings.hostexec.run_as.is_empty() {
                "(its own user)".to_string()
            } else {
                settings.hostexec.run_as.clone()
            };
            row("run as", run_as);
            if let Some(h) = &health {
                let n = |k: &str| h.body[k].as_u64().unwrap_or(0);
                row(
                    "running",
                    format!(
                        "{} commands ({} chats at once), {} MCP servers",
                        n("running"),
                        n("max_chats"),
                        n("servers")
                    ),
                );
            }
        }
        "triggerd" => {
            row("data", settings.triggers.data_dir.display().to_string());
            row("shared", settings.triggers.workspace.display().to_string());
            row("chatd", settings.triggers.chat_base());
            if let Some(h) = &health {
                let n = |k: &str| h.body[k].as_u64().unwrap_or(0);
                row(
                    "triggers",
                    format!(
                        "{} ({} on), {} running of {} at once",
                        n("triggers"),
                        n("enabled"),
                        n("running"),
                        n("max_runs")
                    ),
                );
            }
        }
        "connectord" => {
            row("data", settings.connectors.data_dir.display().to_string());
            row("chatd", settings.connectors.chat_base());
            row("telegram", settings.connectors.telegram_api.clone());
            row("slack", settings.connectors.slack_api.clone());
            if let Some(h) = &health {
                let n = |k: &str| h.body[k].as_u64().unwrap_or(0);
                row(
                    "bindings",
                    format!("{} ({} connected)", n("bindings"), n("connected")),
                );
            }
        }
        _ => {}
    }
    row("url", url.clone());
    row(
        "health",
        match &health {
            Some(h) => match h.engine_reachable {
                Some(true) => "ok (engine reachable)".into(),
                Some(false) => "ok (engine NOT reachable)".into(),
                None => "ok".into(),
            },
            None => "no answer".into(),
        },
    );
    row("managed", manager.name().to_string());
    row("log", manager::log_location(manager, daemon));
    Ok(if health.is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `tandem start|stop|restart [DAEMON…]`: the named daemons, or every one this build has.
pub async fn suite(verb: ServiceVerb, names: &[String]) -> anyhow::Result<ExitCode> {
    let chosen: Vec<Daemon> = if names.is_empty() {
        DAEMONS.iter().copied().filter(|d| d.built).collect()
    } else {
        names
            .iter()
            .map(|n| {
                daemons::by_name(n).ok_or_else(|| {
                    anyhow::anyhow!("{n:?} is not a daemon: one of chat, egress, hostexec, triggers, connectors")
                })
            })
            .collect::<Result<_, _>>()?
    };
    let mut failed = false;
    for daemon in chosen {
        match exec(daemon, verb.clone()).await {
            Ok(code) if code == ExitCode::SUCCESS => {}
            Ok(_) => failed = true,
            Err(err) => {
                eprintln!("tandem: {}: {err:#}", daemon.binary);
                failed = true;
            }
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
