//! The chats' load: messages sent at random (some while a run works), stops,
//! continues and send-now.

use super::*;

pub(crate) const WORDS: &[&str] = &[
    "hello there",
    "héllo wörld",
    "漢字 テスト",
    "emoji 😀 fine",
    "plain words, a comma",
    "tabs\tand \"quotes\"",
];

/// A message with a unique cue: its answer's length and pace, and now and
/// then a fault for the engine to play.
pub(crate) fn message_text(shared: &Shared, rng: &mut StdRng, chat: usize, n: u64) -> String {
    // Now and then a long answer as fast as the engine goes: a burst of
    // thousands of events, so devices away or reading slowly fall more
    // than 2,000 behind and get `reset`.
    let long = rng.random_bool(0.02);
    let tokens: usize = if long {
        rng.random_range(1_000..=3_000)
    } else {
        rng.random_range(4..=80)
    };
    let tps = match rng.random_range(0..10) {
        _ if long => 0,
        0..=2 => 0,
        3..=5 => 100,
        6..=8 => 200,
        _ => 400,
    };
    let mut cue = format!("tokens={tokens} tps={tps} id=c{chat}m{n}");
    if rng.random_bool(0.3) {
        cue.push_str(" stamp=1");
    }
    match rng.random_range(0..100) {
        0..=6 => {
            let k = rng.random_range(0..tokens);
            let _ = write!(cue, " cut_after={k} fail_times=1");
            shared.fault("cut stream (cue cut_after, once)");
        }
        7..=11 => {
            let s = rng.random_range(1..=3);
            let _ = write!(cue, " status=503 retry_after={s} fail_times=1");
            shared.fault("503 + Retry-After (cue, once: retried)");
        }
        12 => {
            cue.push_str(" status=503 retry_after=1 fail_times=2");
            shared.fault("503 + Retry-After twice (cue: the run fails)");
        }
        _ => {}
    }
    let words = WORDS[rng.random_range(0..WORDS.len())];
    format!("{words} #{n} [sim {cue}]")
}

pub(crate) async fn drive_chat(shared: Arc<Shared>, index: usize, seed: u64) {
    let chat = shared.chats[index].clone();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut phase = shared.phase.subscribe();
    let mut n = 0u64;
    let path = |what: &str| format!("/conversations/{chat}/{what}");
    loop {
        let pause = Duration::from_secs_f64(rng.random_range(0.5..5.0));
        if !sleep_in(&mut phase, pause, |p| p == Phase::Load).await {
            return;
        }
        if lock(&shared.filling).contains(&chat) {
            continue;
        }
        let roll = rng.random_range(0..100);
        if roll < 70 {
            // Now and then two or three at once: the later ones find a run working.
            let burst = if rng.random_bool(0.25) {
                rng.random_range(2..=3)
            } else {
                1
            };
            for _ in 0..burst {
                n += 1;
                let text = message_text(&shared, &mut rng, index, n);
                match shared
                    .call(
                        reqwest::Method::POST,
                        &path("messages"),
                        Some(json!({ "text": text })),
                    )
                    .await
                {
                    Ok((202, body)) if body["run_id"].is_string() => inc(&shared.c.sent_run),
                    Ok((202, body)) if body["pending_id"].is_string() => {
                        inc(&shared.c.sent_pending)
                    }
                    Ok((status, body)) => shared.unexpected(format!(
                        "send → {status} {}",
                        body["error"]["type"].as_str().unwrap_or("?")
                    )),
                    // chatd is down (or was killed while answering).
                    Err(_) => inc(&shared.c.send_failed),
                }
            }
            continue;
        }
        let (what, ok, refused, ok_counter, refused_counter) = match roll {
            70..=81 => ("stop", 200, 409, &shared.c.stops, &shared.c.stops_idle),
            82..=93 => (
                "continue",
                202,
                409,
                &shared.c.continues,
                &shared.c.continues_refused,
            ),
            _ => (
                "send-now",
                202,
                409,
                &shared.c.send_now,
                &shared.c.send_now_refused,
            ),
        };
        let done = post_action(
            &shared,
            &chat,
            what,
            ok,
            refused,
            ok_counter,
            refused_counter,
        )
        .await;
        // Half the stopped answers are continued soon after, as a person would.
        if what == "stop" && done && rng.random_bool(0.5) {
            let pause = Duration::from_secs_f64(rng.random_range(0.1..1.5));
            if !sleep_in(&mut phase, pause, |p| p == Phase::Load).await {
                return;
            }
            let c = &shared.c;
            post_action(
                &shared,
                &chat,
                "continue",
                202,
                409,
                &c.continues,
                &c.continues_refused,
            )
            .await;
        }
    }
}

/// POSTs `/conversations/{chat}/{what}`; counts the answer; says whether it was `ok`.
pub(crate) async fn post_action(
    shared: &Shared,
    chat: &str,
    what: &str,
    ok: u16,
    refused: u16,
    ok_counter: &AtomicU64,
    refused_counter: &AtomicU64,
) -> bool {
    match shared
        .call(
            reqwest::Method::POST,
            &format!("/conversations/{chat}/{what}"),
            Some(json!({})),
        )
        .await
    {
        Ok((status, _)) if status == ok => {
            inc(ok_counter);
            return true;
        }
        Ok((status, _)) if status == refused => inc(refused_counter),
        Ok((status, body)) => shared.unexpected(format!(
            "{what} → {status} {}",
            body["error"]["type"].as_str().unwrap_or("?")
        )),
        Err(_) => inc(&shared.c.requests_failed),
    }
    false
}
