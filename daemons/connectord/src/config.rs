//! connectord's settings: the `[connectors]` section of tandem.toml, the
//! operator env files and the QSE_* environment (later wins).

use std::path::PathBuf;

use serde::Deserialize;
use tandem_shared::config::{checks, EnvKey};

/// The whole tandem.toml as connectord reads it: its own section checked
/// key by key, the other daemons' sections left to them.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct FileConfig {
    pub connectors: ConnectorsConfig,
    pub chatd: Option<toml::Table>,
    pub egress: Option<toml::Table>,
    pub hostexec: Option<toml::Table>,
    pub triggers: Option<toml::Table>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConnectorsConfig {
    /// connectord's own data: connectors.sqlite3 and connectors.key.
    pub data_dir: PathBuf,
    /// The API socket; default `$XDG_RUNTIME_DIR/tandem/connectors.sock`.
    pub socket: PathBuf,
    /// chatd's address: each sender's chat is made through its API.
    pub chat_url: String,
    /// chatd's data folder: its `forward.key` when the secrets file has none.
    pub chat_data: PathBuf,
    /// The secrets file with QSE_FORWARD_KEY=.
    pub secrets: PathBuf,
    /// Telegram's Bot API (calls are `{telegram_api}/bot<token>/<method>`).
    pub telegram_api: String,
    /// Slack's Web API (calls are `{slack_api}/<method>`).
    pub slack_api: String,
    /// Milliseconds between two edits (progress, stream) of one binding,
    /// across its chats.
    pub edit_ms: u64,
    /// Milliseconds between two "typing" signs while the agent works.
    pub typing_ms: u64,
    /// Seconds another reader of a bot's updates (Telegram 409) is ridden
    /// out before the binding is switched off.
    pub conflict_grace_s: u64,
    /// Seconds one turn may take before its run is stopped.
    pub turn_timeout_s: u64,
}

impl Default for ConnectorsConfig {
    fn default() -> Self {
        let home = tandem_shared::secrets::home();
        ConnectorsConfig {
            data_dir: home.join(".tandemllm/connectors"),
            socket: tandem_shared::daemon::runtime_dir().join("connectors.sock"),
            chat_url: "http://127.0.0.1:8016".into(),
            chat_data: home.join(".tandemllm/chat"),
            secrets: tandem_shared::secrets::default_secrets_path(),
            telegram_api: "https://api.telegram.org".into(),
            slack_api: "https://slack.com/api".into(),
            edit_ms: 400,
            typing_ms: 4000,
            conflict_grace_s: 60,
            turn_timeout_s: 900,
        }
    }
}

pub const ENV_KEYS: &[EnvKey] = &[
    EnvKey::new("QSE_CONNECTORS_DATA", "connectors.data_dir"),
    EnvKey::new("QSE_CONNECTORS_SOCKET", "connectors.socket"),
    EnvKey::new("QSE_CHAT_URL", "connectors.chat_url"),
    EnvKey::new("QSE_CHAT_DATA", "connectors.chat_data"),
    EnvKey::new("QSE_SECRETS", "connectors.secrets"),
    EnvKey::new("QSE_TELEGRAM_API", "connectors.telegram_api"),
    EnvKey::new("QSE_SLACK_API", "connectors.slack_api"),
    EnvKey::new("QSE_CONNECTORS_EDIT_MS", "connectors.edit_ms"),
    EnvKey::new(
        "QSE_CONNECTORS_CONFLICT_GRACE_S",
        "connectors.conflict_grace_s",
    ),
    EnvKey::new("QSE_CONNECTORS_TURN_TIMEOUT_S", "connectors.turn_timeout_s"),
];

/// The commented default configuration, as `--print-default-config` prints it.
pub const DEFAULT_TOML: &str = include_str!("../../../config/tandem.toml");

impl ConnectorsConfig {
    /// chatd's address with a scheme, without a trailing slash.
    pub fn chat_base(&self) -> String {
        checks::http_base(&self.chat_url)
    }

    /// Checks what types alone cannot; each error names the key and the limit.
    pub fn check(&self) -> anyhow::Result<()> {
        const S: &str = "connectors";
        for (key, value, min, max) in [
            ("edit_ms", self.edit_ms, 50, 60_000),
            ("typing_ms", self.typing_ms, 500, 60_000),
            ("conflict_grace_s", self.conflict_grace_s, 1, 3600),
            ("turn_timeout_s", self.turn_timeout_s, 10, 86_400),
        ] {
            checks::range(S, key, value, min, max)?;
        }
        for (key, path) in [("data_dir", &self.data_dir), ("chat_data", &self.chat_data)] {
            checks::absolute(S, key, path)?;
        }
        checks::socket(S, "socket", &self.socket)?;
        checks::http_url(S, "chat_url", &self.chat_url, "http://127.0.0.1:8016")?;
        checks::http_url(
            S,
            "telegram_api",
            &self.telegram_api,
            "https://api.telegram.org",
        )?;
        checks::http_url(S, "slack_api", &self.slack_api, "https://slack.com/api")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// config/tandem.toml's [connectors] values are the built-in defaults.
    #[test]
    fn default_file_matches_the_built_in_defaults() {
        let file: FileConfig = toml::from_str(DEFAULT_TOML).expect("config/tandem.toml parses");
        assert_eq!(file.connectors, ConnectorsConfig::default());
        file.connectors
            .check()
            .expect("the defaults pass the checks");
    }

    #[test]
    fn checks_name_the_key_and_the_limit() {
        let mut c = ConnectorsConfig {
            edit_ms: 10,
            ..ConnectorsConfig::default()
        };
        let err = c.check().unwrap_err().to_string();
        assert_eq!(err, "connectors.edit_ms: 10 is outside 50..=60000");
        c.edit_ms = 400;
        c.data_dir = "rel".into();
        let err = c.check().unwrap_err().to_string();
        assert_eq!(err, "connectors.data_dir: rel is not an absolute path");
    }
}
