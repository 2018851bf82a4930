//! One signal task turns SIGTERM/SIGINT into a `watch` channel that every
//! loop selects on.

use tokio::sync::watch;

/// A handle every task clones; `wait()` returns once shutdown has begun.
#[derive(Clone)]
pub struct Shutdown {
    rx: watch::Receiver<bool>,
}

/// The sending side: `begin()` starts shutdown from inside the daemon (tests, fatal errors).
#[derive(Clone)]
pub struct ShutdownTrigger {
    tx: std::sync::Arc<watch::Sender<bool>>,
}

impl ShutdownTrigger {
    pub fn begin(&self) {
        let _ = self.tx.send(true);
    }
}

impl Shutdown {
    /// A pair not tied to signals (tests and in-process use).
    pub fn new() -> (ShutdownTrigger, Shutdown) {
        let (tx, rx) = watch::channel(false);
        (
            ShutdownTrigger {
                tx: std::sync::Arc::new(tx),
            },
            Shutdown { rx },
        )
    }

    /// A pair whose trigger also fires on SIGTERM or SIGINT.
    pub fn on_signals() -> anyhow::Result<(ShutdownTrigger, Shutdown)> {
        use tokio::signal::unix::{signal, SignalKind};
        let (trigger, shutdown) = Self::new();
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let t = trigger.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => tracing::info!(signal = "SIGTERM", "shutting down"),
                _ = int.recv() => tracing::info!(signal = "SIGINT", "shutting down"),
            }
            t.begin();
        });
        Ok((trigger, shutdown))
    }

    pub fn is_begun(&self) -> bool {
        *self.rx.borrow()
    }

    /// Resolves once shutdown has begun.
    pub async fn wait(&self) {
        let mut rx = self.rx.clone();
        // An error means every trigger is gone: nobody can start shutdown any
        // more, so treat it as begun rather than hang.
        let _ = rx.wait_for(|begun| *begun).await;
    }
}
