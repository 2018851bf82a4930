//! The daemons tandem operates, where their files are, and how to ask each
//! whether it is healthy.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

/// One daemon of the suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Daemon {
    /// The word on the command line: `tandem chat start`.
    pub verb: &'static str,
    /// The binary and the name in status lines.
    pub binary: &'static str,
    pub unit: &'static str,
    /// Whether this build ships it.
    pub built: bool,
}

pub const DAEMONS: &[Daemon] = &[
    Daemon {
        verb: "chat",
        binary: "chatd",
        unit: "tandem-chatd.service",
        built: true,
    },
    Daemon {
        verb: "egress",
        binary: "egressd",
        unit: "tandem-egress.service",
        built: true,
    },
    Daemon {
        verb: "hostexec",
        binary: "hostexecd",
        unit: "tandem-hostexec.service",
        built: true,
    },
    Daemon {
        verb: "triggers",
        binary: "triggerd",
        unit: "tandem-triggers.service",
        built: true,
    },
    Daemon {
        verb: "connectors",
        binary: "connectord",
        unit: "tandem-connectors.service",
        built: true,
    },
];

pub fn by_name(name: &str) -> Option<Daemon> {
    DAEMONS
        .iter()
        .copied()
        .find(|d| d.verb == name || d.binary == name)
}

/// The folder for pid files: `$XDG_RUNTIME_DIR/tandem`, else a private one in /tmp.
pub fn runtime_dir() -> PathBuf {
    tandem_shared::daemon::runtime_dir()
}

pub fn logs_dir() -> PathBuf {
    tandem_shared::secrets::home().join(".tandemllm/logs")
}

impl Daemon {
    pub fn pid_file(&self) -> PathBuf {
        runtime_dir().join(format!("{}.pid", self.binary))
    }

    pub fn log_file(&self) -> PathBuf {
        logs_dir().join(format!("{}.log", self.binary))
    }
}

/// What `/health` said.
#[derive(Debug, Clone)]
pub struct Health {
    pub version: String,
    pub uptime_s: u64,
    pub engine_reachable: Option<bool>,
    /// The daemon's own pid, which finds a daemon started without tandem.
    pub pid: Option<u32>,
    /// The whole answer, for what one daemon says beyond these.
    pub body: Value,
}

/// Asks `url/health` with a short bound; `None` when it does not answer well.
/// `url` is `http://host:port` or, for a daemon serving on a unix socket,
/// `unix:/path/to/daemon.sock`.
pub async fn health(client: &reqwest::Client, url: &str, bound: Duration) -> Option<Health> {
    let (client, base) = match url.strip_prefix("unix:") {
        Some(socket) => (
            reqwest::Client::builder()
                .unix_socket(socket)
                .build()
                .ok()?,
            // The host is not looked up: every request goes to the socket.
            "http://localhost".to_string(),
        ),
        None => (client.clone(), url.trim_end_matches('/').to_string()),
    };
    let response = client
        .get(format!("{base}/health"))
        .timeout(bound)
        .send()
        .await
        .ok()?;
    if !response.status().is_success() {
        return None;
    }
    let body: Value = response.json().await.ok()?;
    if body["ok"] != Value::Bool(true) {
        return None;
    }
    Some(Health {
        version: body["version"].as_str().unwrap_or("?").to_string(),
        uptime_s: body["uptime_s"].as_u64().unwrap_or(0),
        engine_reachable: body.pointer("/engine/reachable").and_then(Value::as_bool),
        pid: body["pid"].as_u64().map(|p| p as u32),
        body,
    })
}

/// Whether the engine answers `/health` (or, for engines without it, `/v1/models`).
pub async fn engine_answers(
    client: &reqwest::Client,
    url: &str,
    bound: Duration,
) -> Option<Vec<String>> {
    let base = url.trim_end_matches('/');
    let models = client
        .get(format!("{base}/v1/models"))
        .timeout(bound)
        .send()
        .await
        .ok()?;
    if !models.status().is_success() {
        return None;
    }
    let body: Value = models.json().await.unwrap_or(Value::Null);
    Some(
        body["data"]
            .as_array()
            .map(|list| {
                list.iter()
                    .filter_map(|m| m["id"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default(),
    )
}

/// `3m12s`, `2h05m`, `4d03h`.
pub fn human_duration(seconds: u64) -> String {
    match seconds {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s if s < 86_400 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        s => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_well() {
        for (s, want) in [
            (5, "5s"),
            (192, "3m12s"),
            (7500, "2h05m"),
            (97_200, "1d03h"),
        ] {
            assert_eq!(human_duration(s), want);
        }
    }
}
