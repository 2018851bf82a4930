//! The bounds on running sandboxes: `max_running` and `total_gb` (the least
//! recently used idle one stopped to make room), and the memory floor a start
//! must leave (the engine asked to release cache first).

use std::time::{Duration, Instant};

use serde_json::json;

use super::{guard, Chats, SandboxError, Sandboxes};

impl Sandboxes {
    /// Stops sandboxes (least recently used idle first) until one more of
    /// `limit` fits `max_running` and `total_gb`.
    pub(super) async fn make_room(&self, limit: u64) -> Result<(), SandboxError> {
        let settings = &self.inner.settings;
        let total_cap = if settings.total_gb > 0.0 {
            guard::bytes_of_gb(settings.total_gb)
        } else {
            u64::from(settings.max_running) * limit
        };
        loop {
            let (count, used, idle) = {
                let chats = self.lock_running();
                (
                    chats.running.len(),
                    chats.running.values().map(|r| r.limit).sum::<u64>(),
                    least_recently_used_idle(&chats),
                )
            };
            if (count as u32) < settings.max_running && used + limit <= total_cap {
                return Ok(());
            }
            let Some(chat) = idle else {
                return Err(SandboxError::Busy(format!(
                    "{count} sandboxes are running ({} allowed, {} of {} memory in use) and \
                     all of them are working: try again when one is done",
                    settings.max_running,
                    guard::size(used),
                    guard::size(total_cap)
                )));
            };
            self.stop_if_idle(&chat, "making room for another chat's sandbox")
                .await;
        }
    }

    /// Waits for memory: MemAvailable minus the limit must stay at the
    /// floor. Asks the engine for the difference first. A stop of the chat
    /// or chatd's shutdown ends the wait.
    pub(super) async fn memory_guard(
        &self,
        limit: u64,
        chat: &str,
        epoch: u64,
    ) -> Result<(), SandboxError> {
        let settings = &self.inner.settings;
        let floor = guard::bytes_of_gb(settings.floor_gb);
        let Some(available) = guard::available(&settings.meminfo) else {
            return Ok(());
        };
        let short = guard::shortfall(available, limit, floor);
        if short == 0 {
            return Ok(());
        }
        let asked = self.ask_engine_to_release(short).await;
        tracing::info!(
            chat,
            available_mib = available >> 20,
            short_mib = short >> 20,
            asked,
            "sandbox start waits for memory"
        );
        let began = Instant::now();
        let wait = Duration::from_secs(settings.wait_s);
        let mut now_available = available;
        while began.elapsed() < wait {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(250)) => {}
                _ = self.inner.shutdown.wait() => {
                    return Err(SandboxError::Unavailable("chatd is stopping".into()));
                }
            }
            self.still_wanted(chat, epoch)?;
            now_available = guard::available(&settings.meminfo).unwrap_or(now_available);
            if guard::shortfall(now_available, limit, floor) == 0 {
                return Ok(());
            }
        }
        Err(SandboxError::Memory(format!(
            "not enough memory to start the sandbox: {} available, the sandbox takes {} and {} \
             must stay free for the engine (QSE_SANDBOX_FLOOR_GB); {} the engine to release {} \
             and waited {} s. Try again later, or go on without commands.",
            guard::size(now_available),
            guard::size(limit),
            guard::size(floor),
            if asked { "asked" } else { "could not ask" },
            guard::size(guard::shortfall(now_available, limit, floor).max(short)),
            began.elapsed().as_secs()
        )))
    }

    /// `POST /v1/cache/release {"bytes"}` to the engine; whether it took it.
    async fn ask_engine_to_release(&self, bytes: u64) -> bool {
        let url = format!("{}/v1/cache/release", self.inner.engine_url);
        match self
            .inner
            .http
            .post(&url)
            .json(&json!({"bytes": bytes}))
            .send()
            .await
        {
            Ok(r) => r.status().is_success(),
            Err(_) => false,
        }
    }
}

/// The least recently used sandbox nobody uses now.
pub(super) fn least_recently_used_idle(chats: &Chats) -> Option<String> {
    chats
        .running
        .iter()
        .filter(|(_, r)| r.busy == 0)
        .min_by_key(|(_, r)| r.last_used)
        .map(|(chat, _)| chat.clone())
}
