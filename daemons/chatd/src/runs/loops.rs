//! Loops inside chatd's run machinery: the scheduler that fires due loops
//! (each claimed in the store with its user line and run, so a restart
//! never sends a run twice), and the self-paced loop's two tools.

use std::time::Duration;

use tandem_shared::http::ApiError;

use super::Runs;
use crate::model::Run;
use crate::store::{self, loops::Asked};
use crate::tools::loops::Args;

/// How often the scheduler looks for due loops: a loop is a minute at the
/// shortest, and a test's clock file is read at each look.
const LOOK_EVERY: Duration = Duration::from_secs(1);

impl Runs {
    /// Unix ms by chatd's clock (the system's, or a test's clock file).
    pub fn now_ms(&self) -> i64 {
        self.inner.clock.now_ms()
    }

    /// Starts the scheduler: every second, each due loop is fired.
    pub fn start_loops(&self) {
        let runs = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(LOOK_EVERY) => {}
                    _ = runs.inner.shutdown.wait() => return,
                }
                if let Err(e) = runs.fire_due().await {
                    tracing::warn!(status = e.status.as_u16(), "loops were not looked at");
                }
            }
        });
    }

    async fn fire_due(&self) -> Result<(), ApiError> {
        let now = self.now_ms();
        let due = self
            .inner
            .store
            .read(move |conn| store::loops::due(conn, now))
            .await?;
        let daily = i64::from(self.inner.config.loop_daily_runs);
        for (id, conversation_id) in due {
            let lid = id.clone();
            let run = self
                .inner
                .store
                .write(move |ctx| store::runs::fire_loop(ctx, &lid, now, daily))
                .await?;
            if let Some(run) = run {
                tracing::info!(run = %run.id, conversation = %conversation_id, loop_id = %id, "loop run");
                self.spawn(run.id, conversation_id);
            }
        }
        Ok(())
    }

    /// Takes schedule_next or loop_done: the result the model reads, or why
    /// it is refused.
    pub(super) async fn loop_call(
        &self,
        run: &Run,
        name: &str,
        arguments: &str,
    ) -> Result<Result<String, String>, ApiError> {
        let min_s = i64::from(self.inner.config.loop_min_interval_s);
        let args = match Args::parse(name, arguments, min_s) {
            Ok(args) => args,
            Err(why) => return Ok(Err(format!("{why}; the loop is unchanged"))),
        };
        let now = self.now_ms();
        let rid = run.id.clone();
        let said = args.clone();
        let taken = self
            .inner
            .store
            .write(move |ctx| {
                let asked = match &said {
                    Args::Next { seconds, reason } => Asked::Next {
                        at: now + seconds * 1000,
                        why: reason,
                    },
                    Args::Done { reason } => Asked::Done { why: reason },
                };
                store::loops::take(ctx, &rid, asked)
            })
            .await?;
        Ok(taken.map(|()| match args {
            Args::Next { seconds, .. } => format!(
                "The loop runs again in {}. End this run with a short word on what you saw.",
                crate::model::interval_text(seconds)
            ),
            Args::Done { .. } => {
                "The loop is ended. Tell the person in a few lines what it found.".to_string()
            }
        }))
    }
}
