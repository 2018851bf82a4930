//! What egressd decides with and what it keeps of each decision: the
//! presets, the administrator's settings every decision reads, one decision
//! as the audit records it, and where decisions go. The gate, the proxy,
//! the store and the metrics all speak these words; none of them owns them.

use std::net::IpAddr;
use std::time::Duration;

use tandem_shared::netpolicy::Host;

use crate::verdicts::AuditVerdict;

/// How far a chat's commands may reach.
/// Whether a person can be asked to allow a chat's connection with a card
/// (runs nobody watches set it to `Never`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cards {
    Ask,
    Never,
}

impl Cards {
    /// From the `cards` flag of the API and the chats table.
    pub fn from_flag(flag: bool) -> Cards {
        if flag {
            Cards::Ask
        } else {
            Cards::Never
        }
    }

    /// The `cards` flag the API answers and the chats table keeps.
    pub fn flag(self) -> bool {
        self == Cards::Ask
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// Nowhere.
    Off,
    /// The package registries' hosts only.
    Registries,
    /// Every public host.
    All,
}

impl Preset {
    pub fn parse(text: &str) -> Result<Preset, String> {
        match text {
            "off" => Ok(Preset::Off),
            "registries" => Ok(Preset::Registries),
            "all" => Ok(Preset::All),
            other => Err(format!(
                "{other:?} is not a preset: use off, registries or all"
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Preset::Off => "off",
            Preset::Registries => "registries",
            Preset::All => "all",
        }
    }

    /// The lower of two presets (a chat's preset under the ceiling).
    pub fn capped(self, ceiling: Preset) -> Preset {
        use Preset::*;
        match (self, ceiling) {
            (Off, _) | (_, Off) => Off,
            (Registries, _) | (_, Registries) => Registries,
            (All, All) => All,
        }
    }
}

/// The administrator's settings every decision reads (reloaded on SIGHUP).
#[derive(Debug, Clone)]
pub struct Settings {
    /// The most any chat may reach.
    pub ceiling: Preset,
    /// The preset of a chat nobody set one for.
    pub default_preset: Preset,
    /// Host names the `registries` preset opens (exact, lowercased).
    pub registries: Vec<String>,
    /// Hosts every chat may reach: (host, port or every open port).
    pub always: Vec<(String, Option<u16>)>,
    /// Ports a request may name.
    pub ports: Vec<u16>,
    pub lookup: Duration,
    pub connect: Duration,
    pub header: Duration,
    /// A tunnel that carries nothing this long is closed.
    pub idle: Duration,
    /// The largest request head.
    pub max_header: usize,
    /// How long a connection waits for a card's answer.
    pub card_wait: Duration,
    /// How long "Allow once" covers a host.
    pub once: Duration,
    /// Open connections one chat may have.
    pub tunnels_per_chat: usize,
}

impl Settings {
    pub fn is_registry(&self, host: &Host) -> bool {
        matches!(host, Host::Name(name) if self.registries.iter().any(|r| r == name))
    }

    pub fn always_allowed(&self, host: &str, port: u16) -> bool {
        self.always
            .iter()
            .any(|(h, p)| h == host && p.is_none_or(|p| p == port))
    }

    /// Whether the ceiling lets any chat reach `host` at all.
    pub fn inside_ceiling(&self, host: &Host, host_text: &str) -> Result<(), String> {
        match self.ceiling {
            Preset::All => Ok(()),
            Preset::Registries if self.is_registry(host) => Ok(()),
            Preset::Registries => Err(format!(
                "{host_text} is not a package registry, and this box lets chats reach only those (ceiling registries)"
            )),
            Preset::Off => Err(
                "egress is off on this box (the administrator's ceiling is off)".to_string(),
            ),
        }
    }
}

/// One decision, for the audit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Unix seconds when the connection ended.
    pub at: i64,
    pub chat: String,
    pub host: String,
    pub port: u16,
    pub address: Option<IpAddr>,
    pub verdict: AuditVerdict,
    pub reason: String,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub duration_ms: u64,
}

/// Where decisions go (egressd's SQLite; a list in tests).
pub trait Audit: Send + Sync + 'static {
    fn record(&self, decision: Decision);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_capped_by_the_ceiling() {
        assert_eq!(Preset::All.capped(Preset::Off), Preset::Off);
        assert_eq!(Preset::All.capped(Preset::Registries), Preset::Registries);
        assert_eq!(Preset::Registries.capped(Preset::All), Preset::Registries);
        assert_eq!(Preset::All.capped(Preset::All), Preset::All);
        assert!(Preset::parse("some")
            .unwrap_err()
            .contains("off, registries or all"));
    }
}
