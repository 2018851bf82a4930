//! triggerd's settings: the `[triggers]` section of tandem.toml, the
//! operator env files and the QSE_* environment (later wins).

use std::path::PathBuf;

use serde::Deserialize;
use tandem_shared::config::{checks, EnvKey};

/// The whole tandem.toml as triggerd reads it: its own section checked key
/// by key, the other daemons' sections left to them.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct FileConfig {
    pub triggers: TriggersConfig,
    pub chatd: Option<toml::Table>,
    pub egress: Option<toml::Table>,
    pub hostexec: Option<toml::Table>,
    pub connectors: Option<toml::Table>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TriggersConfig {
    /// triggerd's own data: triggers.sqlite3 and triggerd.lock.
    pub data_dir: PathBuf,
    /// The API socket; default `$XDG_RUNTIME_DIR/tandem/triggers.sock`.
    pub socket: PathBuf,
    /// chatd's address: runs are chats made through its API.
    pub chat_url: String,
    /// chatd's data folder: its `forward.key` when the secrets file has none.
    pub chat_data: PathBuf,
    /// The secrets file with QSE_FORWARD_KEY=.
    pub secrets: PathBuf,
    /// The shared workspace: file triggers watch folders in it, and a
    /// trigger's chat works in it. chatd's `shared_workspace`.
    pub workspace: PathBuf,
    /// Seconds between checks of what is due.
    pub check_ms: u64,
    /// Trigger runs at once (each a chat run in chatd).
    pub max_runs: usize,
    /// Seconds a run may take before it is stopped.
    pub run_timeout_s: u64,
    /// Triggers at most.
    pub max_triggers: usize,
    /// Days finished runs are kept (the last `keep_runs` of each trigger and
    /// every run of the last two days stay within that).
    pub history_days: u64,
    /// Finished runs kept per trigger beyond two days.
    pub keep_runs: usize,
    /// For tests: a file holding the current time (RFC 3339), read at every
    /// check instead of the system clock. Empty: the system clock.
    pub clock_file: PathBuf,
}

impl Default for TriggersConfig {
    fn default() -> Self {
        let home = tandem_shared::secrets::home();
        TriggersConfig {
            data_dir: home.join(".tandemllm/triggers"),
            socket: tandem_shared::daemon::runtime_dir().join("triggers.sock"),
            chat_url: "http://127.0.0.1:8016".into(),
            chat_data: home.join(".tandemllm/chat"),
            secrets: tandem_shared::secrets::default_secrets_path(),
            workspace: home.join(".tandemllm/workspace"),
            check_ms: 5000,
            max_runs: 2,
            run_timeout_s: 900,
            max_triggers: 20_000,
            history_days: 30,
            keep_runs: 200,
            clock_file: PathBuf::new(),
        }
    }
}

pub const ENV_KEYS: &[EnvKey] = &[
    EnvKey::new("QSE_TRIGGERS_DATA", "triggers.data_dir"),
    EnvKey::new("QSE_TRIGGERS_SOCKET", "triggers.socket"),
    EnvKey::new("QSE_CHAT_URL", "triggers.chat_url"),
    EnvKey::new("QSE_CHAT_DATA", "triggers.chat_data"),
    EnvKey::new("QSE_SECRETS", "triggers.secrets"),
    EnvKey::new("QSE_SHARED_WORKSPACE", "triggers.workspace"),
    EnvKey::new("QSE_TRIGGERS_CHECK_MS", "triggers.check_ms"),
    EnvKey::new("QSE_TRIGGERS_MAX_RUNS", "triggers.max_runs"),
    EnvKey::new("QSE_TRIGGERS_RUN_TIMEOUT_S", "triggers.run_timeout_s"),
    EnvKey::new("QSE_TRIGGERS_CLOCK_FILE", "triggers.clock_file"),
];

/// The commented default configuration, as `--print-default-config` prints it.
pub const DEFAULT_TOML: &str = include_str!("../../../config/tandem.toml");

impl TriggersConfig {
    /// chatd's address with a scheme, without a trailing slash.
    pub fn chat_base(&self) -> String {
        checks::http_base(&self.chat_url)
    }

    /// Checks what types alone cannot; each error names the key and the limit.
    pub fn check(&self) -> anyhow::Result<()> {
        const S: &str = "triggers";
        for (key, value, min, max) in [
            ("check_ms", self.check_ms, 10, 60_000),
            ("max_runs", self.max_runs as u64, 1, 64),
            ("run_timeout_s", self.run_timeout_s, 10, 86_400),
            ("max_triggers", self.max_triggers as u64, 1, 100_000),
            ("history_days", self.history_days, 2, 3650),
            ("keep_runs", self.keep_runs as u64, 1, 100_000),
        ] {
            checks::range(S, key, value, min, max)?;
        }
        for (key, path) in [
            ("data_dir", &self.data_dir),
            ("chat_data", &self.chat_data),
            ("workspace", &self.workspace),
        ] {
            checks::absolute(S, key, path)?;
        }
        if !self.clock_file.as_os_str().is_empty() {
            checks::absolute(S, "clock_file", &self.clock_file)?;
        }
        checks::socket(S, "socket", &self.socket)?;
        checks::http_url(S, "chat_url", &self.chat_url, "http://127.0.0.1:8016")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// config/tandem.toml's [triggers] values are the built-in defaults.
    #[test]
    fn default_file_matches_the_built_in_defaults() {
        let file: FileConfig = toml::from_str(DEFAULT_TOML).expect("config/tandem.toml parses");
        assert_eq!(file.triggers, TriggersConfig::default());
        file.triggers.check().expect("the defaults pass the checks");
    }

    #[test]
    fn checks_name_the_key_and_the_limit() {
        let check = |change: fn(&mut TriggersConfig), expect: &str| {
            let mut config = TriggersConfig::default();
            change(&mut config);
            let err = config.check().unwrap_err().to_string();
            assert!(err.contains(expect), "{err:?} should contain {expect:?}");
        };
        check(
            |c| c.check_ms = 5,
            "triggers.check_ms: 5 is outside 10..=60000",
        );
        check(|c| c.max_runs = 0, "triggers.max_runs: 0 is outside 1..=64");
        check(
            |c| c.run_timeout_s = 1,
            "triggers.run_timeout_s: 1 is outside 10..=86400",
        );
        check(
            |c| c.workspace = "rel".into(),
            "triggers.workspace: rel is not an absolute path",
        );
        check(|c| c.clock_file = "rel".into(), "triggers.clock_file");
        check(|c| c.chat_url = "http://[".into(), "triggers.chat_url");
    }

    #[test]
    fn chat_base_takes_an_address_or_a_url() {
        let mut c = TriggersConfig {
            chat_url: "127.0.0.1:9016".into(),
            ..TriggersConfig::default()
        };
        assert_eq!(c.chat_base(), "http://127.0.0.1:9016");
        c.chat_url = "http://127.0.0.1:9016/".into();
        assert_eq!(c.chat_base(), "http://127.0.0.1:9016");
    }
}
