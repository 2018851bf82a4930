//! triggerd's counters, served at `GET /metrics`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use tandem_shared::metrics::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RunLabels {
    /// schedule | file | manual
    pub cause: String,
    /// done | failed | interrupted | stopped | paused | skipped
    pub outcome: String,
}

pub struct Metrics {
    pub runs: Family<RunLabels, Counter>,
    pub run_seconds: Histogram,
    pub lateness_seconds: Histogram,
    pub check_seconds: Histogram,
    pub enabled: Gauge,
    pub running: Gauge,
    pub notifications: Counter,
}

impl Metrics {
    /// Makes the metrics and registers them (names get the `tandem_triggers_` prefix).
    pub fn new(registry: &mut Registry) -> Metrics {
        let metrics = Metrics {
            runs: Family::default(),
            run_seconds: Histogram::new(tandem_shared::metrics::seconds_buckets()),
            lateness_seconds: Histogram::new(tandem_shared::metrics::seconds_buckets()),
            check_seconds: Histogram::new(tandem_shared::metrics::seconds_buckets()),
            enabled: Gauge::default(),
            running: Gauge::default(),
            notifications: Counter::default(),
        };
        let r = registry.sub_registry_with_prefix("tandem_triggers");
        r.register(
            "runs",
            "Trigger runs ended, by cause and outcome",
            metrics.runs.clone(),
        );
        r.register(
            "run_seconds",
            "Seconds from a run's start to its end",
            metrics.run_seconds.clone(),
        );
        r.register(
            "lateness_seconds",
            "Seconds from a run's due time to its start",
            metrics.lateness_seconds.clone(),
        );
        r.register(
            "check_seconds",
            "Seconds one check of what is due took",
            metrics.check_seconds.clone(),
        );
        r.register("enabled", "Triggers switched on", metrics.enabled.clone());
        r.register("running", "Runs in progress", metrics.running.clone());
        r.register(
            "notifications",
            "Inbox entries delivered to chatd",
            metrics.notifications.clone(),
        );
        metrics
    }
}
