//! The faults: chatd SIGKILLed and restarted (then warmed up again for the
//! RSS check), and the engine refusing connections for a while.

use super::*;

/// Times (s from the start) of a Poisson process with `mean` inside
/// `[from, to]`; `forced` when none falls there.
pub(crate) fn schedule(rng: &mut StdRng, mean: f64, from: f64, to: f64, forced: f64) -> Vec<f64> {
    let mut times = Vec::new();
    if to > from {
        let mut t = from + exponential(rng, mean);
        while t < to {
            times.push(t);
            t += exponential(rng, mean);
        }
    }
    if times.is_empty() {
        times.push(forced);
    }
    times
}

pub(crate) async fn killer(
    shared: Arc<Shared>,
    chatd: Arc<tokio::sync::Mutex<Chatd>>,
    times: Vec<f64>,
    kills: Arc<Mutex<Vec<(f64, f64)>>>,
    warm_s: f64,
) {
    let mut phase = shared.phase.subscribe();
    for at in times {
        if !until_in_load(&shared, &mut phase, at).await {
            break;
        }
        let mut chatd = chatd.lock().await;
        let killed_at = shared.t();
        shared.fault("chatd SIGKILL + restart");
        let mut back = None;
        for _ in 0..3 {
            match chatd.restart().await {
                Ok(()) => {
                    back = Some(shared.t());
                    break;
                }
                Err(err) => say(format!("soak: chatd did not come back: {err:#}")),
            }
        }
        let Some(back) = back else {
            shared.violate(
                Inv::Health,
                format!("chatd did not come back after the kill at {killed_at:.1} s"),
            );
            shared.abort.store(true, Ordering::Relaxed);
            return;
        };
        let pid = chatd.pid().unwrap_or(0);
        shared.pid.store(pid, Ordering::Relaxed);
        lock(&shared.generations).push(Generation { pid, started: back });
        lock(&kills).push((killed_at, back - killed_at));
        say(format!(
            "  t={killed_at:6.1}s  chatd SIGKILLed; back as pid {pid} in {:.2} s",
            back - killed_at
        ));
        // A second chatd on the same data (a careless restart, a unit and a
        // terminal at once) must go at once, naming the one that runs.
        shared.fault("second chatd on the same data");
        match chatd.run_second(Duration::from_secs(10)).await {
            Ok(second)
                if !second.status.success() && second.stderr.contains(&format!("(pid {pid})")) => {}
            Ok(second) => shared.violate(
                Inv::Health,
                format!(
                    "a second chatd on the data of pid {pid} ended {} saying {}",
                    second.status,
                    excerpt(&second.stderr)
                ),
            ),
            Err(err) => shared.violate(
                Inv::Health,
                format!("a second chatd on the data of pid {pid}: {err:#}"),
            ),
        }
        drop(chatd);
        // The answers the kill interrupted: continue them (the others refuse).
        let c = &shared.c;
        for chat in &shared.chats {
            post_action(
                &shared,
                chat,
                "continue",
                202,
                409,
                &c.continues,
                &c.continues_refused,
            )
            .await;
        }
    }
    warm_up(&shared, warm_s).await;
}

/// Warms up the chatd that will be measured at the end (the last one
/// started): every chat gets a long answer, so that every chat's ring of
/// recent events fills, then RSS is sampled once the rings are full and
/// `warm_s` has passed since the start. Before that, RSS grows with the
/// rings (bounded, ~0.5 KiB an event) and says nothing about a leak.
pub(crate) async fn warm_up(shared: &Shared, warm_s: f64) {
    let Some(generation) = lock(&shared.generations).last().cloned() else {
        return;
    };
    let mut phase = shared.phase.subscribe();
    let keep = |p: Phase| matches!(p, Phase::Load | Phase::Drain);
    let mut from: HashMap<&str, i64> = HashMap::new();
    let mut asked: HashMap<&str, Instant> = HashMap::new();
    let mut filled_at = None;
    let mut round = 0u64;
    lock(&shared.filling).extend(shared.chats.iter().cloned());
    while keep(*phase.borrow()) {
        round += 1;
        let mut left = 0;
        for (i, chat) in shared.chats.iter().enumerate() {
            let Ok(snapshot) = shared.snapshot(chat).await else {
                left += 1;
                continue;
            };
            let seq = snapshot["seq"].as_i64().unwrap_or(0);
            let start = *from.entry(chat.as_str()).or_insert(seq);
            if seq >= start + shared.fill {
                lock(&shared.filling).remove(chat);
                continue;
            }
            left += 1;
            // Never asked, or idle again short of the mark (the answer
            // failed, or went to a message that waited with it): ask again.
            let idle = snapshot["conversation"]["state"] == "idle";
            // (During the drain too: the warm-up is the measurement's, not load.)
            let due = live(shared.phase())
                && asked
                    .get(chat.as_str())
                    .is_none_or(|at| idle && at.elapsed() > Duration::from_secs(3));
            if due {
                let text = format!(
                    "fill the ring [sim tokens={} tps=0 id=fill-{}-{i}-{round}]",
                    shared.fill, generation.pid
                );
                let sent = shared.send_text(chat, &text).await;
                if matches!(sent, Ok((202, _))) {
                    asked.insert(chat.as_str(), Instant::now());
                    shared.fault("warm-up: a long answer per chat (fills its ring)");
                }
            }
        }
        if left == 0 && filled_at.is_none() {
            filled_at = Some(shared.t());
        }
        if let Some(filled) = filled_at {
            if shared.t() >= generation.started + warm_s {
                // Let the burst's deliveries settle, then sample.
                sleep_in(&mut phase, Duration::from_secs(2), keep).await;
                if let Some(kib) = rss_kib(generation.pid) {
                    let t = shared.t();
                    say(format!(
                        "  t={t:6.1}s  chatd pid {} warmed up (rings full {:.1} s after its start): RSS {}",
                        generation.pid,
                        filled - generation.started,
                        mib(kib)
                    ));
                    *lock(&shared.warm) = Some(Warm {
                        pid: generation.pid,
                        t,
                        kib,
                        filled_s: filled - generation.started,
                    });
                }
                break;
            }
        }
        sleep_in(&mut phase, Duration::from_secs(1), keep).await;
    }
    lock(&shared.filling).clear();
}

pub(crate) async fn refuser(
    shared: Arc<Shared>,
    times: Vec<f64>,
    seed: u64,
    outages: Arc<Mutex<Vec<(f64, f64)>>>,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut phase = shared.phase.subscribe();
    for at in times {
        if !until_in_load(&shared, &mut phase, at).await {
            return;
        }
        let seconds: f64 = (rng.random_range(1.0..20.0) * 10.0f64).round() / 10.0;
        let sent = shared
            .http
            .post(format!("{}/sim/refuse", shared.sim_url))
            .json(&json!({ "seconds": seconds }))
            .timeout(Duration::from_secs(5))
            .send()
            .await;
        match sent {
            Ok(r) if r.status().is_success() => {
                shared.fault("engine refused connections (/sim/refuse)");
                let t = shared.t();
                lock(&outages).push((t, seconds));
                say(format!(
                    "  t={t:6.1}s  engine refuses connections for {seconds:.1} s"
                ));
            }
            // Still refusing from the last outage: this one is skipped.
            _ => shared.fault("engine outage skipped (the engine was refusing already)"),
        }
    }
}
