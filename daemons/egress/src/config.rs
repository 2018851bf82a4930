//! egressd's settings: the `[egress]` section of tandem.toml, the operator
//! env files and the QSE_* environment (later wins).

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use tandem_shared::config::EnvKey;
use tandem_shared::netpolicy;

use crate::policy::{Preset, Settings};

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
    /// The preset of a chat nobody set one for: off, registries or all, at
    /// most the ceiling.
    pub default_preset: String,
    /// The hosts the `registries` preset opens.
    pub registries: Vec<String>,
    /// Ports a request may name.
    pub ports: Vec<u16>,
    /// Address ranges the administrator opens although their class or this
    /// box's own network refuses them (CIDR).
    pub allow_ranges: Vec<String>,
    /// Days audit rows are kept.
    pub audit_days: u64,
    pub lookup_s: u64,
    pub connect_s: u64,
    pub header_s: u64,
    /// The loopback listener for host-side tools (chatd's web_fetch and
    /// web_search): a chat is named by its token, never by the request.
    pub listen: String,
    /// The secrets file with QSE_FORWARD_KEY= (the chats' proxy tokens are
    /// made from it); without one, chatd's `forward.key` in `chat_data`.
    pub secrets: PathBuf,
    /// Hosts every chat may reach whatever its preset (`host` or `host:port`).
    pub always_allowed: Vec<String>,
    /// Seconds a connection waits for a card's answer.
    pub card_wait_s: u64,
    /// Minutes an "Allow once" answer covers the host for the chat's command.
    pub once_minutes: u64,
    /// Seconds a tunnel may carry nothing before it is closed.
    pub tunnel_idle_s: u64,
    /// Open connections one chat may have at once (more: 429).
    pub tunnels_per_chat: usize,
    /// The user sandboxed commands run as; the nftables rules bind its traffic.
    pub sandbox_user: String,
}

impl Default for EgressConfig {
    fn default() -> Self {
        let home = tandem_shared::secrets::home();
        EgressConfig {
            data_dir: home.join(".tandemllm/egress"),
            chat_data: home.join(".tandemllm/chat"),
            socket: tandem_shared::daemon::runtime_dir().join("egress.sock"),
            ceiling: "off".into(),
            default_preset: "off".into(),
            registries: DEFAULT_REGISTRIES.iter().map(|s| s.to_string()).collect(),
            ports: vec![80, 443],
            allow_ranges: Vec::new(),
            audit_days: 30,
            lookup_s: 5,
            connect_s: 10,
            header_s: 10,
            listen: "127.0.0.1:8017".into(),
            secrets: tandem_shared::secrets::default_secrets_path(),
            always_allowed: Vec::new(),
            card_wait_s: 60,
            once_minutes: 30,
            tunnel_idle_s: 300,
            tunnels_per_chat: 32,
            sandbox_user: "tandem-sbx".into(),
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
        env: "QSE_CHATS_EGRESS_DEFAULT_PRESET",
        key: "egress.default_preset",
    },
    EnvKey {
        env: "QSE_CHATS_EGRESS_AUDIT_DAYS",
        key: "egress.audit_days",
    },
    EnvKey {
        env: "QSE_EGRESS_PROXY",
        key: "egress.listen",
    },
    EnvKey {
        env: "QSE_SECRETS",
        key: "egress.secrets",
    },
];

/// The commented default configuration, as `--print-default-config` prints it.
pub const DEFAULT_TOML: &str = include_str!("../../../config/tandem.toml");

impl EgressConfig {
    /// Checks what types alone cannot; each error names the key and the limit.
    pub fn check(&self) -> anyhow::Result<()> {
        let bad = |key: &str, why: String| anyhow::anyhow!("egress.{key}: {why}");
        let ceiling = Preset::parse(&self.ceiling).map_err(|e| bad("ceiling", e))?;
        let default = Preset::parse(&self.default_preset).map_err(|e| bad("default_preset", e))?;
        if default.capped(ceiling) != default {
            return Err(bad(
                "default_preset",
                format!(
                    "{} is above the ceiling ({}): a new chat could not have it",
                    self.default_preset, self.ceiling
                ),
            ));
        }
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
            ("card_wait_s", self.card_wait_s, 60),
            ("once_minutes", self.once_minutes, 1440),
            ("tunnel_idle_s", self.tunnel_idle_s, 86_400),
            ("tunnels_per_chat", self.tunnels_per_chat as u64, 4096),
        ] {
            if !(1..=max).contains(&value) {
                return Err(bad(key, format!("{value} is outside 1..={max}")));
            }
        }
        match self.listen.parse::<std::net::SocketAddr>() {
            Ok(addr) if addr.ip().is_loopback() => {}
            Ok(addr) => {
                return Err(bad(
                    "listen",
                    format!(
                        "{addr} is not a loopback address: the token listener stays on this box"
                    ),
                ))
            }
            Err(_) => {
                return Err(bad(
                    "listen",
                    format!("{:?} is not an address like 127.0.0.1:8017", self.listen),
                ))
            }
        }
        for (i, entry) in self.always_allowed.iter().enumerate() {
            let key = format!("always_allowed[{i}]");
            let (_, port) = netpolicy::split_authority(entry, 443)
                .map_err(|e| bad(&key, format!("{entry:?}: {e}")))?;
            if names_port(entry) && !self.ports.contains(&port) {
                return Err(bad(
                    &key,
                    format!("{entry:?} names port {port}, which is not in ports (add it there)"),
                ));
            }
        }
        for (i, host) in self.registries.iter().enumerate() {
            match netpolicy::parse_host(host) {
                Ok(netpolicy::Host::Name(_)) => {}
                _ => {
                    return Err(bad(
                        &format!("registries[{i}]"),
                        format!("{host:?} is not a host name like pypi.org"),
                    ))
                }
            }
        }
        if self.sandbox_user.is_empty() || self.sandbox_user == "root" {
            return Err(bad(
                "sandbox_user",
                format!(
                    "{:?} cannot be the sandbox user: name an unprivileged one",
                    self.sandbox_user
                ),
            ));
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

    /// What every decision reads, from these settings.
    pub fn settings(&self) -> Settings {
        Settings {
            ceiling: self.ceiling(),
            // Checked at start (known, and under the ceiling).
            default_preset: Preset::parse(&self.default_preset).unwrap_or(Preset::Off),
            // The spelling requests are compared in (lowercase, no
            // trailing dot, IDNA); checked at start.
            registries: self
                .registries
                .iter()
                .filter_map(|h| match netpolicy::parse_host(h) {
                    Ok(netpolicy::Host::Name(name)) => Some(name),
                    _ => None,
                })
                .collect(),
            always: self
                .always_allowed
                .iter()
                .filter_map(|entry| {
                    // Checked at start.
                    let (host, port) = netpolicy::split_authority(entry, 443).ok()?;
                    let host = match host {
                        netpolicy::Host::Ip(ip) => ip.to_string(),
                        netpolicy::Host::Name(name) => name,
                    };
                    Some((host, names_port(entry).then_some(port)))
                })
                .collect(),
            ports: self.ports.clone(),
            lookup: Duration::from_secs(self.lookup_s),
            connect: Duration::from_secs(self.connect_s),
            header: Duration::from_secs(self.header_s),
            idle: Duration::from_secs(self.tunnel_idle_s),
            max_header: 64 * 1024,
            card_wait: Duration::from_secs(self.card_wait_s),
            once: Duration::from_secs(self.once_minutes * 60),
            tunnels_per_chat: self.tunnels_per_chat,
        }
    }
}

/// Whether `host[:port]` names a port (`[v6]:port` for IPv6).
fn names_port(entry: &str) -> bool {
    match entry.strip_prefix('[') {
        Some(rest) => rest.contains("]:"),
        None => entry.contains(':'),
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
    fn always_allowed_hosts_keep_their_port_or_take_every_one() {
        let config = EgressConfig {
            always_allowed: vec!["Mirror.Example.org".into(), "10.1.2.3:8443".into()],
            ports: vec![80, 443, 8443],
            ..EgressConfig::default()
        };
        config.check().unwrap();
        let s = config.settings();
        assert!(s.always_allowed("mirror.example.org", 443));
        assert!(s.always_allowed("10.1.2.3", 8443));
        assert!(!s.always_allowed("10.1.2.3", 443));
        let bad = EgressConfig {
            always_allowed: vec!["http://x/".into()],
            ..EgressConfig::default()
        };
        assert!(bad
            .check()
            .unwrap_err()
            .to_string()
            .contains("egress.always_allowed[0]"));
        let closed_port = EgressConfig {
            always_allowed: vec!["mirror.example.org:8443".into()],
            ..EgressConfig::default()
        };
        let err = closed_port.check().unwrap_err().to_string();
        assert!(err.contains("not in ports"), "{err}");
        let registry = EgressConfig {
            registries: vec!["PyPI.org.".into(), "10.0.0.1".into()],
            ..EgressConfig::default()
        };
        let err = registry.check().unwrap_err().to_string();
        assert!(err.contains("egress.registries[1]"), "{err}");
        let spelled = EgressConfig {
            registries: vec!["PyPI.org.".into()],
            ..EgressConfig::default()
        };
        assert!(spelled
            .settings()
            .is_registry(&netpolicy::Host::Name("pypi.org".into())));
    }
}
