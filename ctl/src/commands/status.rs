//! `tandem status`: one line per daemon and one for the engine.

use std::process::ExitCode;
use std::time::Duration;

use crate::daemons::{self, DAEMONS};
use crate::manager::{self, Manager};
use crate::settings::Settings;

pub const LONG_ABOUT: &str = "\
One line per daemon (running or not, pid, version, address, /health, uptime)
and one for the engine. Exits 0 only when everything that should run does:
every daemon this build has, and the engine.

Example:
  tandem status && echo all good";

pub async fn exec() -> anyhow::Result<ExitCode> {
    let settings = Settings::load()?;
    let client = reqwest::Client::builder().build()?;
    let bound = Duration::from_millis(800);
    // Ask everyone at once: the slowest answer bounds the wall time.
    let engine_url = settings.engine_url().to_string();
    let engine = daemons::engine_answers(&client, &engine_url, bound);
    let checks = DAEMONS.iter().map(|d| {
        let url = settings.daemon_url(*d);
        let client = client.clone();
        async move {
            let health = if d.built {
                daemons::health(&client, &url, bound).await
            } else {
                None
            };
            (d, url, health)
        }
    });
    let (engine, rows) = tokio::join!(engine, futures_util::future::join_all(checks));
    let mut all_ok = true;
    for (daemon, url, health) in rows {
        if !daemon.built {
            println!(
                "{:<11} not installed (not part of this build yet)",
                daemon.binary
            );
            continue;
        }
        let manager = Manager::detect(*daemon);
        let pid = manager::pid(manager, *daemon)
            .map(|p| format!("pid {p}"))
            .unwrap_or_else(|| "pid -".into());
        match health {
            Some(h) => println!(
                "{:<11} running  {pid:<10} {:<8} {url}  health ok  up {}",
                daemon.binary,
                h.version,
                daemons::human_duration(h.uptime_s)
            ),
            None => {
                all_ok = false;
                println!(
                    "{:<11} NOT RUNNING  {pid:<10} {url}  no /health answer  (tandem {} start)",
                    daemon.binary, daemon.verb
                );
            }
        }
    }
    match engine {
        Some(models) => println!(
            "{:<11} reachable  {engine_url}  models: {}",
            "engine",
            if models.is_empty() {
                "-".into()
            } else {
                models.join(", ")
            }
        ),
        None => {
            all_ok = false;
            println!(
                "{:<11} NOT REACHABLE  {engine_url}  (the box's engine; tandem never starts it)",
                "engine"
            );
        }
    }
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
