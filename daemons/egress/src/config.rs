//! egressd's settings: the `[egress]` section of tandem.toml, the operator
//! env files and the QSE_* environment (later wins).

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use tandem_shared::config::EnvKey;

use crate::proxy::{Preset, Rules};

/// The whole tandem.toml as egressd reads it: its own section checked key
/// by key, the other daemons' sections left to them.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct FileConfig {
    pub egress: EgressConfig,
    pub chatd: Option<toml::Table>,
    pub hostexec: Option<toml::Table>,
    pub triggers: Option<toml::Table>,
    pub connectors: Option<toml::Table>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EgressConfig {
    /// egressd's own data: egress.sqlite3 (presets, audit).
    pub data_dir: PathBuf,
    /// chatd's data folder: each chat's proxy socket is `egress/<chat>/proxy.sock` in it.
    pub chat_data: PathBuf,
    /// The API socket (`egress.sock`); default `$XDG_RUNTIME_DIR/tandem/egress.sock`.
    pub socket: PathBuf,
    /// The most any chat may reach: off, registries or all.
    pub ceiling: String,
    /// The hosts the `registries` preset opens.
    pub registries: Vec<String>,
    /// Ports a request may name.
    pub ports: Vec<u16>,
    /// Address ranges the administrator opens although their class is refused (CIDR).
    pub allow_ranges: Vec<String>,
    /// Days audit rows are kept.
    pub audit_days: u64,
    pub lookup_s: u64,
    pub connect_s: u64,
    pub header_s: u64,
}

impl Default for EgressConfig {
    fn default() -> Self {
        let home = tandem_shared::secrets::home();
        EgressConfig {
            data_dir: home.join(".tandemllm/egress"),
            chat_data: home.join(".tandemllm/chat"),
            socket: tandem_shared::daemon::runtime_dir().join("egress.sock"),
            ceiling: "off".into(),
            registries: DEFAULT_REGISTRIES.iter().map(|s| s.to_string()).collect(),
            ports: vec![80, 443],
            allow_ranges: Vec::new(),
            audit_days: 30,
            lookup_s: 5,
            connect_s: 10,
            header_s: 10,
        }
    }
}

/// PyPI, the npm registry, crates.io, Go modules, RubyGems, Maven Central
/// and GitHub releases, by their hosts.
pub const DEFAULT_REGISTRIES: &[&str] = &[
    "pypi.org",
    "files.pythonhosted.org",
    "registry.npmjs.org",
    "crates.io",
    "index.crates.io",
    "static.crates.io",
    "proxy.golang.org",
    "sum.golang.org",
    "rubygems.org",
    "repo.maven.apache.org",
    "repo1.maven.org",
    "github.com",
    "objects.githubusercontent.com",
];

pub const ENV_KEYS: &[EnvKey] = &[
    EnvKey {
        env: "QSE_EGRESS_DATA",
        key: "egress.data_dir",
    },
    EnvKey {
        env: "QSE_CHAT_DATA",
        key: "egress.chat_data",
    },
    EnvKey {
        env: "QSE_EGRESS_SOCKET",
        key: "egress.socket",
    },
    EnvKey {
        env: "QSE_CHATS_EGRESS_CEILING",
        key: "egress.ceiling",
    },
    EnvKey {
        env: "QSE_CHATS_EGRESS_AUDIT_DAYS",
        key: "egress.audit_days",
    },
];

/// The commented default configuration, as `--print-default-config` prints it.
pub const DEFAULT_TOML: &str = include_str!("../../../config/tandem.toml");

impl EgressConfig {
    /// Checks what types alone cannot; each error names the key and the limit.
    pub fn check(&self) -> anyhow::Result<()> {
        let bad = |key: &str, why: String| anyhow::anyhow!("egress.{key}: {why}");
        Preset::parse(&self.ceiling).map_err(|e| bad("ceiling", e))?;
        if self.ports.is_empty() || self.ports.contains(&0) {
            return Err(bad("ports", "name at least one port, 1 to 65535".into()));
        }
        for (i, range) in self.allow_ranges.iter().enumerate() {
            range.parse::<ipnet::IpNet>().map_err(|_| {
                bad(
                    &format!("allow_ranges[{i}]"),
                    format!("{range:?} is not a CIDR range like 203.0.113.0/24"),
                )
            })?;
        }
        for (key, value, max) in [
            ("lookup_s", self.lookup_s, 60),
            ("connect_s", self.connect_s, 120),
            ("header_s", self.header_s, 120),
            ("audit_days", self.audit_days, 3650),
        ] {
            if !(1..=max).contains(&value) {
                return Err(bad(key, format!("{value} is outside 1..={max}")));
            }
        }
        Ok(())
    }

    pub fn ceiling(&self) -> Preset {
        // Checked at start: an unknown ceiling stops egressd there.
        Preset::parse(&self.ceiling).unwrap_or(Preset::Off)
    }

    pub fn allow_ranges(&self) -> Vec<ipnet::IpNet> {
        self.allow_ranges
            .iter()
            .filter_map(|r| r.parse().ok())
            .collect()
    }

    /// The rules of a chat whose preset is `preset`, under the ceiling.
    pub fn rules(&self, preset: Preset) -> Rules {
        Rules {
            preset: preset.capped(self.ceiling()),
            registries: self
                .registries
                .iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
            ports: self.ports.clone(),
            lookup: Duration::from_secs(self.lookup_s),
            connect: Duration::from_secs(self.connect_s),
            header: Duration::from_secs(self.header_s),
            max_header: 64 * 1024,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// config/tandem.toml's [egress] values are the built-in defaults.
    #[test]
    fn default_file_matches_the_built_in_defaults() {
        let file: FileConfig = toml::from_str(DEFAULT_TOML).expect("config/tandem.toml parses");
        assert_eq!(file.egress, EgressConfig::default());
        file.egress.check().expect("the defaults pass the checks");
        assert_eq!(
            file.egress.ceiling(),
            Preset::Off,
            "egress is off unless opened"
        );
    }

    #[test]
    fn checks_name_the_key_and_the_limit() {
        let check = |change: fn(&mut EgressConfig), expect: &str| {
            let mut config = EgressConfig::default();
            change(&mut config);
            let err = config.check().unwrap_err().to_string();
            assert!(err.contains(expect), "{err:?} should contain {expect:?}");
        };
        check(|c| c.ceiling = "most".into(), "egress.ceiling");
        check(
            |c| c.allow_ranges = vec!["10.0.0.0/33".into()],
            "egress.allow_ranges[0]",
        );
        check(|c| c.ports = vec![], "egress.ports");
        check(|c| c.lookup_s = 0, "egress.lookup_s: 0 is outside 1..=60");
    }

    #[test]
    fn a_chat_never_passes_the_ceiling() {
        let config = EgressConfig {
            ceiling: "registries".into(),
            ..EgressConfig::default()
        };
        assert_eq!(config.rules(Preset::All).preset, Preset::Registries);
        assert_eq!(config.rules(Preset::Off).preset, Preset::Off);
    }
}
