//! egressd's counters, served at `GET /metrics`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tandem_shared::metrics::Registry;

use crate::policy::Decision;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerdictLabels {
    /// allowed | refused | failed
    pub verdict: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DirectionLabels {
    /// up | down
    pub direction: String,
}

#[derive(Default)]
pub struct Metrics {
    pub decisions: Family<VerdictLabels, Counter>,
    pub bytes: Family<DirectionLabels, Counter>,
    pub open: Gauge,
    pub unauthenticated: Counter,
}

impl Metrics {
    /// Makes the metrics and registers them (names get the `tandem_egress_` prefix).
    pub fn new(registry: &mut Registry) -> Metrics {
        let metrics = Metrics::default();
        let r = registry.sub_registry_with_prefix("tandem_egress");
        r.register(
            "decisions",
            "Connections decided, by verdict",
            metrics.decisions.clone(),
        );
        r.register(
            "bytes",
            "Bytes carried, up (to the origin) and down",
            metrics.bytes.clone(),
        );
        r.register("open", "Tunnels open now", metrics.open.clone());
        r.register(
            "unauthenticated",
            "Loopback callers refused for a missing or wrong token",
            metrics.unauthenticated.clone(),
        );
        metrics
    }

    pub fn record(&self, d: &Decision) {
        self.decisions
            .get_or_create(&VerdictLabels {
                verdict: d.verdict.to_string(),
            })
            .inc();
        for (direction, n) in [("up", d.bytes_up), ("down", d.bytes_down)] {
            if n > 0 {
                self.bytes
                    .get_or_create(&DirectionLabels {
                        direction: direction.to_string(),
                    })
                    .inc_by(n);
            }
        }
    }
}
