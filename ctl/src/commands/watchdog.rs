//! `tandem watchdog`, for cron every minute: when the engine answers and
//! chatd does not, start chatd, at most 3 times an hour. It never touches the
//! engine. Each decision is one line in ~/.tandemllm/logs/watchdog.log.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;

use crate::daemons;
use crate::manager::{self, Manager};
use crate::settings::Settings;

pub const LONG_ABOUT: &str = "\
For cron (`* * * * * tandem watchdog`) or tandem-watchdog.timer: when the
engine answers and chatd does not, start chatd. At most 3 starts an hour
(the times are kept in ~/.tandemllm/watchdog.json); the engine is never
started or restarted. QSE_CHATD=off turns it off. Every decision is a line in
~/.tandemllm/logs/watchdog.log.

Exit 0 when nothing needed doing or chatd was started; 1 when chatd is down
and was not started (refused by the hourly limit, or the start failed).

Example crontab line:
  * * * * * $HOME/.local/bin/tandem watchdog";

/// Starts allowed in any hour.
pub const MAX_STARTS_PER_HOUR: usize = 3;

fn state_path() -> PathBuf {
    tandem_shared::secrets::home().join(".tandemllm/watchdog.json")
}

fn log_path() -> PathBuf {
    daemons::logs_dir().join("watchdog.log")
}

fn note(line: &str) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = log_path();
    let _ = tandem_shared::fsmode::private_dir(&daemons::logs_dir());
    // Keep the log small: past 512 KiB, start it over with the last half.
    if std::fs::metadata(&path).is_ok_and(|m| m.len() > 512 * 1024) {
        let keep = manager::last_lines(&path, 2000).join("\n");
        let _ = std::fs::write(&path, keep + "\n");
    }
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&path)
    {
        let _ = writeln!(file, "{} {line}", tandem_shared::time::now_rfc3339());
    }
}

pub async fn exec() -> anyhow::Result<ExitCode> {
    if std::env::var("QSE_CHATD").is_ok_and(|v| v.eq_ignore_ascii_case("off")) {
        note("QSE_CHATD=off: nothing checked");
        return Ok(ExitCode::SUCCESS);
    }
    let settings = Settings::load()?;
    let client = reqwest::Client::new();
    let bound = Duration::from_secs(3);
    let engine = settings.engine_url().to_string();
    if !engine_healthy(&client, &engine, bound).await {
        note(&format!(
            "engine at {engine} does not answer: nothing started"
        ));
        return Ok(ExitCode::SUCCESS);
    }
    let chatd = daemons::by_name("chatd").context("chatd is in the daemon table")?;
    let url = settings.daemon_url(chatd);
    if daemons::health(&client, &url, bound).await.is_some() {
        note("engine up, chatd up: nothing to do");
        return Ok(ExitCode::SUCCESS);
    }
    let now = tandem_shared::time::now_unix();
    let mut starts = read_starts();
    starts.retain(|t| now - *t < 3600);
    if starts.len() >= MAX_STARTS_PER_HOUR {
        let line = format!(
            "engine up, chatd down: NOT starting chatd, {} starts in the last hour already (limit {MAX_STARTS_PER_HOUR}); see `tandem chat logs`",
            starts.len()
        );
        note(&line);
        eprintln!("tandem watchdog: {line}");
        return Ok(ExitCode::FAILURE);
    }
    starts.push(now);
    write_starts(&starts)?;
    let manager = Manager::detect(chatd);
    note(&format!(
        "engine up, chatd down: starting chatd (start {} of {MAX_STARTS_PER_HOUR} this hour)",
        starts.len()
    ));
    match manager::start(manager, chatd, &settings, Duration::from_secs(20)).await {
        Ok(pid) => {
            note(&format!("chatd started: pid {pid}"));
            println!("tandem watchdog: chatd was down; started it (pid {pid})");
            Ok(ExitCode::SUCCESS)
        }
        Err(err) => {
            let first = format!("{err:#}").lines().next().unwrap_or("").to_string();
            note(&format!("chatd start failed: {first}"));
            eprintln!("tandem watchdog: {err:#}");
            Ok(ExitCode::FAILURE)
        }
    }
}

async fn engine_healthy(client: &reqwest::Client, engine: &str, bound: Duration) -> bool {
    let base = engine.trim_end_matches('/');
    if let Ok(r) = client
        .get(format!("{base}/health"))
        .timeout(bound)
        .send()
        .await
    {
        if r.status().is_success() {
            return true;
        }
    }
    daemons::engine_answers(client, engine, bound)
        .await
        .is_some()
}

fn read_starts() -> Vec<i64> {
    std::fs::read_to_string(state_path())
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .and_then(|v| {
            v["starts"]
                .as_array()
                .map(|a| a.iter().filter_map(|t| t.as_i64()).collect())
        })
        .unwrap_or_default()
}

fn write_starts(starts: &[i64]) -> anyhow::Result<()> {
    let path = state_path();
    if let Some(dir) = path.parent() {
        tandem_shared::fsmode::private_dir(dir)?;
    }
    let tmp = path.with_extension("json.tmp");
    let _ = std::fs::remove_file(&tmp);
    tandem_shared::fsmode::write_private_new(
        &tmp,
        serde_json::json!({ "starts": starts })
            .to_string()
            .as_bytes(),
    )?;
    std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
