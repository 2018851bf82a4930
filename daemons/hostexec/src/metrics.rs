//! hostexecd's counters, served at `GET /metrics`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use tandem_shared::metrics::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndedLabels {
    /// ok | failed | timeout | output | stop | shutdown | error
    pub ended: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// chat_busy | too_many_chats | bad_input
    pub reason: String,
}

pub struct Metrics {
    pub commands: Family<EndedLabels, Counter>,
    pub refused: Family<ReasonLabels, Counter>,
    pub seconds: Histogram,
    pub output_bytes: Counter,
    pub running: Gauge,
    /// MCP servers running now (`serve.rs`).
    pub servers: Gauge,
}

impl Metrics {
    /// Makes the metrics and registers them (names get the `tandem_hostexec_` prefix).
    pub fn new(registry: &mut Registry) -> Metrics {
        let metrics = Metrics {
            commands: Family::default(),
            refused: Family::default(),
            seconds: Histogram::new(tandem_shared::metrics::seconds_buckets()),
            output_bytes: Counter::default(),
            running: Gauge::default(),
            servers: Gauge::default(),
        };
        let r = registry.sub_registry_with_prefix("tandem_hostexec");
        r.register(
            "commands",
            "Commands run, by how they ended (ok, failed, timeout, output, stop, shutdown, error)",
            metrics.commands.clone(),
        );
        r.register(
            "refused",
            "Calls refused before start, by reason",
            metrics.refused.clone(),
        );
        r.register(
            "command_seconds",
            "Wall time of a command, start to the last process gone",
            metrics.seconds.clone(),
        );
        r.register(
            "output_bytes",
            "Bytes of output read from commands",
            metrics.output_bytes.clone(),
        );
        r.register("running", "Commands running now", metrics.running.clone());
        r.register(
            "servers",
            "MCP servers running now",
            metrics.servers.clone(),
        );
        metrics
    }

    pub fn ended(&self, how: &str) {
        self.commands
            .get_or_create(&EndedLabels {
                ended: how.to_string(),
            })
            .inc();
    }

    pub fn refused(&self, reason: &str) {
        self.refused
            .get_or_create(&ReasonLabels {
                reason: reason.to_string(),
            })
            .inc();
    }
}
