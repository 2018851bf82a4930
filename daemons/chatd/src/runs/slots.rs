//! The engine's slots: at most `max_runs` runs talk to the engine at
//! once; a run that finds none free waits in line (`run.queued` with its
//! position, the chat `queued`) until one is, it is stopped, or chatd stops.

use serde_json::json;
use tandem_shared::http::ApiError;
use tandem_shared::sync::lock;
use tokio::sync::{watch, OwnedSemaphorePermit};

use super::{EndRequest, Runs};
use crate::kinds::EventKind;
use crate::store::{conversations, queries};
use crate::words::ChatState;

/// Why a run could not take an engine slot.
pub(super) enum SlotLost {
    Stopped,
    Shutdown,
}

impl Runs {
    /// An engine slot for the run: at once when one is free, else in line
    /// (`run.queued` with its position, the chat `queued`).
    pub(super) async fn take_slot(
        &self,
        run_id: &str,
        stop: &mut watch::Receiver<EndRequest>,
    ) -> Result<Result<OwnedSemaphorePermit, SlotLost>, ApiError> {
        let inner = &self.inner;
        if let Ok(permit) = inner.slots.clone().try_acquire_owned() {
            return Ok(Ok(permit));
        }
        let position = {
            let mut queue = lock(&inner.queue);
            queue.push_back(run_id.to_string());
            queue.len()
        };
        inner.metrics.runs_queued.set(position as i64);
        let rid = run_id.to_string();
        inner
            .store
            .write(move |ctx| {
                let run = queries::run(ctx.conn(), &rid)?;
                ctx.emit(
                    &run.conversation_id,
                    EventKind::RunQueued,
                    json!({"run_id": rid, "position": position}),
                )?;
                conversations::set_state(ctx, &run.conversation_id, ChatState::Queued)?;
                Ok(())
            })
            .await?;
        let acquired = tokio::select! {
            permit = inner.slots.clone().acquire_owned() => match permit {
                Ok(permit) => Ok(permit),
                // The semaphore is never closed; treat it like a stop.
                Err(_) => Err(SlotLost::Stopped),
            },
            _ = stop.wait_for(|r| *r == EndRequest::Stop) => Err(SlotLost::Stopped),
            _ = inner.shutdown.wait() => Err(SlotLost::Shutdown),
        };
        self.dequeue(run_id);
        Ok(acquired)
    }

    fn dequeue(&self, run_id: &str) {
        let mut queue = lock(&self.inner.queue);
        queue.retain(|id| id != run_id);
        self.inner.metrics.runs_queued.set(queue.len() as i64);
    }
}
