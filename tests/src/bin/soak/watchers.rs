//! The watchers of a soak run: chatd's RSS sampled, and a progress line.

use super::*;

pub(crate) async fn sample_rss(shared: Arc<Shared>, every: Duration) {
    let mut phase = shared.phase.subscribe();
    loop {
        let pid = shared.pid.load(Ordering::Relaxed);
        if let Some(kib) = rss_kib(pid) {
            lock(&shared.rss).push(RssSample {
                t: shared.t(),
                pid,
                kib,
            });
        }
        if !sleep_in(&mut phase, every, |p| p != Phase::Done).await {
            return;
        }
    }
}

pub(crate) async fn progress(shared: Arc<Shared>, every: Duration) {
    let mut phase = shared.phase.subscribe();
    loop {
        if !sleep_in(&mut phase, every, live).await {
            return;
        }
        let c = &shared.c;
        let rss = rss_kib(shared.pid.load(Ordering::Relaxed))
            .map(mib)
            .unwrap_or_else(|| "-".into());
        say(format!(
            "  t={:6.1}s  {:?}: sent {} (+{} pending), events seen {}, devices attached {}, resets {}, chatd RSS {rss}",
            shared.t(),
            shared.phase(),
            get(&c.sent_run),
            get(&c.sent_pending),
            get(&c.events),
            c.devices_up.load(Ordering::Relaxed),
            get(&c.resets),
        ));
    }
}
