//! chatd's two listeners and their bounds (`[chatd.connections]`): the API
//! listener (the engine's forward, the daemons, `tandem`; loopback) and the
//! front (browsers on the network, so also a cap per address). Each has its
//! own cap, so a crowd on the front never takes the API's connections; both
//! are cut further when the descriptor limit is low
//! (`tandem_shared::listen::Limits::within_descriptors`).

use std::time::Duration;

use serde::Deserialize;
use tandem_shared::listen::Limits;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConnectionsConfig {
    /// Seconds a request's head may take to arrive, from a new connection's
    /// start or a kept-alive one's first byte; then the connection is closed.
    pub header_timeout_s: u64,
    /// Seconds a kept-alive connection may wait, with nothing asked, for its
    /// next request.
    pub idle_timeout_s: u64,
    /// Connections open at once on the API listener.
    pub max: usize,
    /// Connections open at once on the front.
    pub front_max: usize,
    /// Connections open at once on the front from one address.
    pub front_max_per_peer: usize,
}

impl Default for ConnectionsConfig {
    fn default() -> Self {
        ConnectionsConfig {
            header_timeout_s: tandem_shared::listen::HEADER_TIMEOUT.as_secs(),
            idle_timeout_s: tandem_shared::listen::IDLE_TIMEOUT.as_secs(),
            max: 4096,
            front_max: 1024,
            front_max_per_peer: 64,
        }
    }
}

impl ConnectionsConfig {
    /// Checks the ranges; an error names the key (under `chatd.`) and the limit.
    pub fn check(&self) -> Result<(), String> {
        let range = |key: &str, value: u64, low: u64, high: u64| {
            if (low..=high).contains(&value) {
                Ok(())
            } else {
                Err(format!(
                    "connections.{key}: {value} is outside {low}..={high}"
                ))
            }
        };
        range("header_timeout_s", self.header_timeout_s, 1, 300)?;
        range("idle_timeout_s", self.idle_timeout_s, 1, 3600)?;
        range("max", self.max as u64, 16, 1_000_000)?;
        range("front_max", self.front_max as u64, 16, 1_000_000)?;
        range(
            "front_max_per_peer",
            self.front_max_per_peer as u64,
            1,
            self.front_max as u64,
        )?;
        Ok(())
    }

    /// The API listener's bounds: no cap per address (every caller is on
    /// this box, the engine's forward among them).
    pub fn api(&self) -> Limits {
        Limits {
            header_timeout: Duration::from_secs(self.header_timeout_s),
            idle_timeout: Duration::from_secs(self.idle_timeout_s),
            max_connections: self.max,
            max_per_peer: None,
        }
    }

    /// The front's bounds.
    pub fn front(&self) -> Limits {
        Limits {
            max_connections: self.front_max,
            max_per_peer: Some(self.front_max_per_peer),
            ..self.api()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_name_the_key_and_the_range() {
        let check = |change: fn(&mut ConnectionsConfig), expect: &str| {
            let mut config = ConnectionsConfig::default();
            change(&mut config);
            assert_eq!(config.check().unwrap_err(), expect);
        };
        check(
            |c| c.header_timeout_s = 0,
            "connections.header_timeout_s: 0 is outside 1..=300",
        );
        check(
            |c| c.idle_timeout_s = 7200,
            "connections.idle_timeout_s: 7200 is outside 1..=3600",
        );
        check(|c| c.max = 2, "connections.max: 2 is outside 16..=1000000");
        check(
            |c| c.front_max_per_peer = 2000,
            "connections.front_max_per_peer: 2000 is outside 1..=1024",
        );
        assert!(ConnectionsConfig::default().check().is_ok());
        let front = ConnectionsConfig::default().front();
        assert_eq!(front.max_per_peer, Some(64));
        assert_eq!(front.header_timeout, Duration::from_secs(10));
    }
}
