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
            "  t={:6.1}s  {:?}: sent {} (+{} waited as pending, so far), events seen {}, devices attached {}, resets {}, chatd RSS {rss}",
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

/// chatd's RSS check: the process alive at the end, against its own warm-up
/// (its rings full, see `faults::warm_up`). Returns the summary's line.
pub(crate) fn check_chatd_rss(
    shared: &Shared,
    end_pid: u32,
    rss_end: Option<u64>,
    end_t: f64,
) -> String {
    let warm = shared.warm_s;
    let generations = lock(&shared.generations).clone();
    let current = generations
        .iter()
        .rev()
        .find(|g| g.pid == end_pid)
        .cloned()
        .unwrap_or(Generation {
            pid: end_pid,
            started: 0.0,
        });
    let which = if generations.len() > 1 {
        format!(
            "pid {} (started at {:.1} s, after kill #{})",
            current.pid,
            current.started,
            generations.len() - 1
        )
    } else {
        format!("pid {} (the only chatd of the run)", current.pid)
    };
    let warmed = lock(&shared.warm).clone().filter(|w| w.pid == current.pid);
    match (warmed, rss_end) {
        (Some(w), Some(end)) => {
            let change = (end as f64 - w.kib as f64) / w.kib as f64 * 100.0;
            let verdict = format!(
                "chatd {which}: after warm-up (t={:.1} s: its rings full {:.1} s after its start, \
                 at least {warm:.0} s) {}, at the end (t={end_t:.1} s, after drain and catch-up) {} ({change:+.1} %)",
                w.t,
                w.filled_s,
                mib(w.kib),
                mib(end)
            );
            if change.abs() > 20.0 {
                shared.violate(Inv::Rss, verdict.clone());
            }
            verdict
        }
        _ => {
            let verdict = format!(
                "chatd {which}: its warm-up (every chat +{} events, at least {warm:.0} s) did not end before the drain did (end sample: {:?})",
                shared.fill,
                rss_end.map(mib)
            );
            shared.violate(Inv::Rss, verdict.clone());
            verdict
        }
    }
}
