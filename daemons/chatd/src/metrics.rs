//! chatd's counters and histograms, served at `GET /metrics`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use tandem_shared::metrics::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RunLabels {
    /// user | trigger | connector | import
    pub origin: String,
    /// done | failed | stopped | interrupted | paused
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ToolLabels {
    pub tool: String,
    /// true | false
    pub ok: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NotificationLabels {
    /// run_ended | run_failed | needs_attention
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PushLabels {
    /// delivered | gone | refused | failed | dropped (the queue was full)
    pub outcome: String,
}

pub struct Metrics {
    pub tool_calls: Family<ToolLabels, Counter>,
    pub compactions: Counter,
    pub runs: Family<RunLabels, Counter>,
    pub run_seconds: Histogram,
    pub events_written: Counter,
    pub sse_devices: Gauge,
    pub engine_retries: Counter,
    pub runs_queued: Gauge,
    pub engine_garbage_lines: Counter,
    pub notifications: Family<NotificationLabels, Counter>,
    pub pushes: Family<PushLabels, Counter>,
}

impl Metrics {
    /// Makes the metrics and registers them (names get the `tandem_` prefix).
    pub fn new(registry: &mut Registry) -> Metrics {
        let metrics = Metrics {
            tool_calls: Family::default(),
            compactions: Counter::default(),
            runs: Family::default(),
            run_seconds: Histogram::new(tandem_shared::metrics::seconds_buckets()),
            events_written: Counter::default(),
            sse_devices: Gauge::default(),
            engine_retries: Counter::default(),
            runs_queued: Gauge::default(),
            engine_garbage_lines: Counter::default(),
            notifications: Family::default(),
            pushes: Family::default(),
        };
        let r = registry.sub_registry_with_prefix("tandem");
        r.register(
            "runs",
            "Runs ended, by origin and outcome",
            metrics.runs.clone(),
        );
        r.register(
            "run_seconds",
            "Seconds from a run's start to its end",
            metrics.run_seconds.clone(),
        );
        r.register(
            "events_written",
            "Events committed to the event log",
            metrics.events_written.clone(),
        );
        r.register(
            "sse_devices",
            "Devices attached to an event stream now",
            metrics.sse_devices.clone(),
        );
        r.register(
            "engine_retries",
            "Engine requests retried after a fault",
            metrics.engine_retries.clone(),
        );
        r.register(
            "runs_queued",
            "Runs waiting for a free slot now",
            metrics.runs_queued.clone(),
        );
        r.register(
            "engine_garbage_lines",
            "Lines of the engine's stream that were not valid chunks, skipped",
            metrics.engine_garbage_lines.clone(),
        );
        r.register(
            "tool_calls",
            "Tool calls run, by tool and whether they succeeded",
            metrics.tool_calls.clone(),
        );
        r.register(
            "compactions",
            "Chats compacted because their context filled",
            metrics.compactions.clone(),
        );
        r.register(
            "notifications",
            "Notifications stored in the inbox, by kind",
            metrics.notifications.clone(),
        );
        r.register(
            "pushes",
            "Web Push messages sent to browsers, by outcome",
            metrics.pushes.clone(),
        );
        metrics
    }
}
