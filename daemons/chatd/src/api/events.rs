//! `GET /conversations/{id}/events`: every event after the device's last
//! seq, exactly once and in order, then live ones as they commit. A device
//! too far behind gets one `reset` and reloads the snapshot.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use serde::Deserialize;
use tandem_shared::http::ApiError;

use crate::events::{Fetch, Subscription};
use crate::store::queries::{self, Trashed};
use crate::App;

/// Events sent in one write at most, so one device cannot hog a core.
const MAX_FRAMES: usize = 512;

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct EventParams {
    after: Option<String>,
}

fn parse_cursor(field: &str, text: &str) -> Result<i64, ApiError> {
    text.trim()
        .parse::<i64>()
        .ok()
        .filter(|n| *n >= 0)
        .ok_or_else(|| {
            ApiError::bad_input(
                field,
                format!("{text:?} is not a sequence number (a whole number from 0)"),
            )
        })
}

pub async fn stream(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Query(params): Query<EventParams>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let from_header = headers.get("last-event-id").and_then(|v| v.to_str().ok());
    let cursor = match (from_header, params.after.as_deref()) {
        (Some(text), _) => parse_cursor("Last-Event-ID", text)?,
        (None, Some(text)) => parse_cursor("after", text)?,
        (None, None) => 0,
    };
    let cid = id.clone();
    let stored = app
        .store
        .read(move |conn| queries::conversation(conn, &cid, Trashed::Include))
        .await?;
    let subscription = app.store.hub.subscribe(&id, stored.last_seq);
    let head = subscription.head();
    if cursor > head {
        return Err(ApiError::bad_input(
            "after",
            format!("{cursor} is past the last event of this chat ({head})"),
        )
        .with("last_seq", head));
    }
    app.metrics.sse_devices.inc();
    let device = Device {
        app: app.clone(),
        conversation_id: id,
        cursor,
        subscription,
        keepalive: tokio::time::interval_at(
            tokio::time::Instant::now() + Duration::from_secs(app.config.sse_keepalive_s),
            Duration::from_secs(app.config.sse_keepalive_s),
        ),
        // One shutdown future per device, made once: a fresh one each wake
        // would register and drop a waiter on the shared channel every time.
        stopping: {
            let shutdown = app.shutdown.clone();
            Box::pin(async move { shutdown.wait().await })
        },
        ended: false,
    };
    let body = futures_util::stream::unfold(device, |mut device| async move {
        let frames = device.next_frames().await?;
        Some((Ok::<Bytes, std::convert::Infallible>(frames), device))
    });
    Ok((
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::HeaderName::from_static("x-accel-buffering"), "no"),
        ],
        Body::from_stream(body),
    )
        .into_response())
}

struct Device {
    app: Arc<App>,
    conversation_id: String,
    cursor: i64,
    subscription: Subscription,
    keepalive: tokio::time::Interval,
    stopping: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
    ended: bool,
}

impl Drop for Device {
    fn drop(&mut self) {
        self.app.metrics.sse_devices.dec();
    }
}

impl Device {
    /// The next bytes to send; `None` ends the stream (chatd is stopping).
    async fn next_frames(&mut self) -> Option<Bytes> {
        loop {
            if self.ended {
                return None;
            }
            let head = self.subscription.head();
            if self.cursor < head {
                if (head - self.cursor) as u64 > self.app.config.sse_reset_after {
                    return Some(self.reset(head));
                }
                let events = match self.subscription.fetch(self.cursor, MAX_FRAMES) {
                    Fetch::Events(events) if !events.is_empty() => events,
                    _ => {
                        let (cid, after) = (self.conversation_id.clone(), self.cursor);
                        match self
                            .app
                            .store
                            .read(move |conn| queries::events_after(conn, &cid, after, MAX_FRAMES))
                            .await
                        {
                            Ok(events) => events,
                            Err(_) => {
                                // The stream cannot go on honestly; the device reconnects with its seq.
                                return None;
                            }
                        }
                    }
                };
                // Events dropped by housekeeping: the device must reload.
                if events.first().is_none_or(|e| e.seq != self.cursor + 1) {
                    return Some(self.reset(head));
                }
                // Housekeeping drops deltas from the middle of the log too:
                // send only up to the first hole, so the device never sees a
                // gap; the next fetch then starts past the hole and resets.
                let mut events = events;
                let whole = events
                    .iter()
                    .zip(self.cursor + 1..)
                    .take_while(|(e, seq)| e.seq == *seq)
                    .count();
                events.truncate(whole);
                self.cursor = events.last().map(|e| e.seq).unwrap_or(self.cursor);
                if let [one] = events.as_slice() {
                    // The common live case: share the frame, copy nothing.
                    return Some(one.frame.clone());
                }
                let mut frames = BytesMut::new();
                for event in &events {
                    frames.extend_from_slice(&event.frame);
                }
                return Some(frames.freeze());
            }
            let cursor = self.cursor;
            tokio::select! {
                _ = self.subscription.wait_past(cursor) => {}
                _ = self.keepalive.tick() => return Some(Bytes::from_static(b": keepalive\n\n")),
                _ = &mut self.stopping => {
                    self.ended = true;
                }
            }
        }
    }

    fn reset(&mut self, head: i64) -> Bytes {
        self.cursor = head;
        let data = serde_json::json!({"seq": head, "conversation_id": self.conversation_id});
        Bytes::from(format!("id: {head}\nevent: reset\ndata: {data}\n\n"))
    }
}
