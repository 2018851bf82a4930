//! connectord's counters, served at `GET /metrics`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tandem_shared::metrics::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Outcome {
    /// accepted | stranger | refused | sent | answered | not_delivered | unauthorized
    pub outcome: String,
}

pub struct Metrics {
    pub messages: Family<Outcome, Counter>,
}

impl Metrics {
    /// Makes the metrics and registers them (names get the `tandem_connectors_` prefix).
    pub fn new(registry: &mut Registry) -> Metrics {
        let metrics = Metrics {
            messages: Family::default(),
        };
        let r = registry.sub_registry_with_prefix("tandem_connectors");
        r.register(
            "messages",
            "Connector messages by what became of them",
            metrics.messages.clone(),
        );
        metrics
    }
}
