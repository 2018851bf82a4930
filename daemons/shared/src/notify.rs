//! The sd-notify protocol: `READY=1` once serving, `WATCHDOG=1` at half of
//! the watchdog interval, `STATUS=` lines, `STOPPING=1` first on shutdown.
//! Without `NOTIFY_SOCKET` every call does nothing.

use std::time::Duration;

use sd_notify::NotifyState;

pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

pub fn status(status: &str) {
    send(&[NotifyState::Status(status)]);
}

pub fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
}

fn send(states: &[NotifyState]) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    if let Err(err) = sd_notify::notify(states) {
        tracing::warn!(error = %err, "sd-notify failed");
    }
}

/// The watchdog interval systemd asked for (`WATCHDOG_USEC`), if any.
pub fn watchdog_interval() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    if let Ok(pid) = std::env::var("WATCHDOG_PID") {
        if pid.parse::<u32>().ok() != Some(std::process::id()) {
            return None;
        }
    }
    (usec > 0).then(|| Duration::from_micros(usec))
}

/// Pings the watchdog at half its interval until shutdown. `healthy` is
/// asked before each ping: a daemon whose core loop is stuck stops pinging
/// and systemd restarts it.
pub fn spawn_watchdog<F>(shutdown: crate::shutdown::Shutdown, healthy: F)
where
    F: Fn() -> bool + Send + 'static,
{
    let Some(interval) = watchdog_interval() else {
        return;
    };
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval / 2);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    if healthy() {
                        send(&[NotifyState::Watchdog]);
                    } else {
                        tracing::warn!("watchdog ping withheld: core loop not healthy");
                    }
                }
                _ = shutdown.wait() => return,
            }
        }
    });
}

/// Pings the watchdog while the async runtime turns: a task stamps the time
/// each second, and a stamp older than 10 s withholds the ping (a runtime
/// stuck on a blocked worker gets the daemon restarted).
pub fn spawn_heartbeat_watchdog(shutdown: crate::shutdown::Shutdown) {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    if watchdog_interval().is_none() {
        return;
    }
    let beat = Arc::new(AtomicU64::new(0));
    let started = std::time::Instant::now();
    let stamp = beat.clone();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = tick.tick() => stamp.store(started.elapsed().as_secs(), Ordering::Relaxed),
                _ = stop.wait() => return,
            }
        }
    });
    spawn_watchdog(shutdown, move || {
        let last = beat.load(Ordering::Relaxed);
        started.elapsed().as_secs().saturating_sub(last) < 10
    });
}
