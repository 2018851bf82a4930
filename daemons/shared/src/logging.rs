//! Logging: journald when started by systemd (`JOURNAL_STREAM` is set), else
//! a log file `<logs>/<daemon>.log` (0600), or stderr when `QSE_LOG_TO=stderr`.
//! Log lines carry ids, counts and times, never message text or secrets.

use std::path::{Path, PathBuf};

use anyhow::Context;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{fmt, EnvFilter};

/// Where this process's log lines went, for the startup line and `tandem logs`.
#[derive(Debug, Clone)]
pub enum LogTarget {
    Journald,
    File(PathBuf),
    Stderr,
}

/// Installs the global subscriber. `logs_dir` is where the log file goes when
/// neither journald nor stderr is chosen. The level comes from `QSE_LOG_LEVEL`
/// or `RUST_LOG` (default `info`).
pub fn init(daemon: &str, logs_dir: &Path) -> anyhow::Result<LogTarget> {
    let filter = std::env::var("QSE_LOG_LEVEL")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "info".to_string());
    let mut parsed = EnvFilter::try_new(&filter)
        .with_context(|| format!("QSE_LOG_LEVEL/RUST_LOG: bad filter {filter:?}"))?;
    // The MCP SDK logs what a server sent (its self-description, a refusal's
    // headers) and calls a server's 401 an ERROR without an id; chatd's own
    // lines say what happened, with ids. Named in the filter, it speaks.
    if !filter.contains("rmcp") {
        parsed = parsed.add_directive("rmcp=off".parse().expect("a fixed directive parses"));
    }
    let filter = parsed;
    let choice = std::env::var("QSE_LOG_TO").unwrap_or_default();
    let target = match choice.as_str() {
        "stderr" => LogTarget::Stderr,
        "journald" => LogTarget::Journald,
        "file" => LogTarget::File(logs_dir.join(format!("{daemon}.log"))),
        "" if std::env::var_os("JOURNAL_STREAM").is_some() => LogTarget::Journald,
        "" => LogTarget::File(logs_dir.join(format!("{daemon}.log"))),
        other => anyhow::bail!("QSE_LOG_TO: {other:?} is not one of stderr, file, journald"),
    };
    let registry = tracing_subscriber::registry().with(filter);
    match &target {
        LogTarget::Journald => {
            let layer = tracing_journald::layer()
                .context("connecting to journald")?
                .with_syslog_identifier(daemon.to_string());
            registry.with(layer).try_init()?;
        }
        LogTarget::Stderr => {
            use std::io::IsTerminal;
            let ansi = std::io::stderr().is_terminal();
            registry
                .with(fmt::layer().with_ansi(ansi).with_writer(std::io::stderr))
                .try_init()?;
        }
        LogTarget::File(path) => {
            crate::fsmode::private_dir(logs_dir)
                .with_context(|| format!("making log folder {}", logs_dir.display()))?;
            let file = open_append_private(path)?;
            registry
                .with(
                    fmt::layer()
                        .with_ansi(false)
                        .with_writer(std::sync::Mutex::new(file)),
                )
                .try_init()?;
        }
    }
    Ok(target)
}

fn open_append_private(path: &Path) -> anyhow::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("opening log file {}", path.display()))?;
    Ok(file)
}
