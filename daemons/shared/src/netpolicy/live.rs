//! [`LivePolicy`]: an administrator's allow-ranges and this box's
//! interfaces as one [`Policy`], read again before a decision whenever the
//! kernel said the interfaces changed (see `interfaces` for why before each
//! decision and not on a timer).

use std::io;
use std::sync::{Arc, Mutex};

use ipnet::IpNet;

use super::Policy;
use crate::interfaces::{Interfaces, Watch};
use crate::sync::lock;

/// An administrator's allow-ranges and this box's interfaces, as one
/// [`Policy`] that is read again whenever the interfaces change.
pub struct LivePolicy {
    allow_ranges: Vec<IpNet>,
    watch: Watch,
    state: Mutex<State>,
}

struct State {
    policy: Arc<Policy>,
    /// The last read after a notice failed: try again at the next decision.
    stale: bool,
}

impl LivePolicy {
    pub fn open(allow_ranges: Vec<IpNet>) -> io::Result<LivePolicy> {
        // The watch before the first read: a change while it runs leaves a
        // notice, taken at the first decision.
        let watch = Watch::open()?;
        let own = Interfaces::read()?;
        Ok(LivePolicy {
            state: Mutex::new(State {
                policy: Arc::new(Policy::new(allow_ranges.clone(), own)),
                stale: false,
            }),
            allow_ranges,
            watch,
        })
    }

    /// The policy for a decision now: with the interfaces read again first
    /// if any changed since the last decision.
    pub fn current(&self) -> Arc<Policy> {
        let mut state = lock(&self.state);
        if self.watch.changed() || state.stale {
            match Interfaces::read() {
                Ok(own) => {
                    tracing::info!(
                        addresses = own.addresses.len(),
                        networks = own.networks.len(),
                        "this box's interfaces changed: read again"
                    );
                    state.policy = Arc::new(Policy::new(self.allow_ranges.clone(), own));
                    state.stale = false;
                }
                Err(e) => {
                    // The last interfaces read stay in force until a read works.
                    tracing::warn!(error = %e, "this box's interfaces changed but could not be read");
                    state.stale = true;
                }
            }
        }
        state.policy.clone()
    }
}

/// The policy a daemon checks its own connections with (chatd's pushes and
/// MCP connectors): live when the box's interfaces can be watched, else the
/// address classes alone, said once in the log by `who`.
pub enum BoxPolicy {
    Live(LivePolicy),
    Classes(Arc<Policy>),
}

impl BoxPolicy {
    pub fn open(who: &str) -> BoxPolicy {
        match LivePolicy::open(Vec::new()) {
            Ok(live) => BoxPolicy::Live(live),
            Err(e) => {
                tracing::warn!(error = %e, "{who}: this box's interfaces cannot be watched; addresses are checked by class only");
                BoxPolicy::Classes(Arc::new(Policy::default()))
            }
        }
    }

    /// The policy for a decision now.
    pub fn current(&self) -> Arc<Policy> {
        match self {
            BoxPolicy::Live(live) => live.current(),
            BoxPolicy::Classes(policy) => policy.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netpolicy::Refusal;

    #[test]
    fn a_live_policy_starts_with_this_boxs_interfaces() {
        let live = LivePolicy::open(vec![]).unwrap();
        assert_eq!(
            live.current().check("127.0.0.1".parse().unwrap()),
            Err(Refusal::ThisBox)
        );
    }
}
