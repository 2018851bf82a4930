//! `GET /metrics` in the Prometheus text format, the same for every daemon:
//! the daemon registers its counters and histograms in a `Registry`, then
//! merges `metrics::router(registry)` into its HTTP router.

use std::sync::Arc;

use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
pub use prometheus_client::registry::Registry;

/// A router serving `GET /metrics` from `registry`.
pub fn router<S: Clone + Send + Sync + 'static>(registry: Arc<Registry>) -> Router<S> {
    Router::new().route(
        "/metrics",
        get(move || {
            let registry = registry.clone();
            async move {
                let mut text = String::new();
                if prometheus_client::encoding::text::encode(&mut text, &registry).is_err() {
                    return (
                        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                        "encoding failed\n",
                    )
                        .into_response();
                }
                (
                    [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
                    text,
                )
                    .into_response()
            }
        }),
    )
}

/// Histogram buckets for durations in seconds, from 5 ms to 30 minutes.
pub fn seconds_buckets() -> impl Iterator<Item = f64> {
    [
        0.005, 0.05, 0.25, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 1800.0,
    ]
    .into_iter()
}
