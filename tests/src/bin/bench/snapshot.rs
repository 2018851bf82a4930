//! Figure 3: snapshot + attach, and a 1,999-event tail, on a chat of 100,000
//! events, against the same on a chat of ~10 events.

use super::*;

/// Snapshot, then attach after its seq until the stream's headers arrive.
pub(crate) async fn snapshot_attach(
    chatd: &Chatd,
    client: &Client,
    chat: &str,
) -> anyhow::Result<(Duration, i64)> {
    let began = Instant::now();
    let snapshot: Value = client.snapshot(chat).await?;
    let seq = snapshot["seq"].as_i64().context("snapshot seq")?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let stream = RawStream::open(chatd.port, &events_request(chat, seq), deadline).await?;
    let took = began.elapsed();
    drop(stream);
    Ok((took, seq))
}

/// Attach after `after` and read until the event `last` arrives; returns the
/// time and how many events came.
pub(crate) async fn tail(
    chatd: &Chatd,
    chat: &str,
    after: i64,
    last: i64,
) -> anyhow::Result<(Duration, usize)> {
    let began = Instant::now();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut s = RawStream::open(chatd.port, &events_request(chat, after), deadline).await?;
    let mut count = 0;
    let mut newest = after;
    let mut reset = false;
    loop {
        s.frames(|frame| {
            if let Some(id) = frame.strip_prefix(b"id: ") {
                let end = id.iter().position(|b| *b == b'\n').unwrap_or(id.len());
                newest = parse_u64(&id[..end]).map(|n| n as i64).unwrap_or(newest);
                count += 1;
                reset |= find(frame, b"event: reset\n").is_some();
            }
        });
        if reset {
            bail!("chatd answered a tail after {after} with a reset");
        }
        if newest >= last {
            return Ok((began.elapsed(), count));
        }
        if s.read_more(deadline).await?.is_none() {
            bail!("the stream ended after {count} events");
        }
    }
}

pub(crate) async fn snapshot(sizes: &Sizes, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let big_tokens = sizes.big_tokens;
    say(format!(
        "\n## 3. snapshot + tail of a chat with {big_tokens} text.delta events"
    ));
    let sim = Sim::start(&[])?;
    let mut chatd = Chatd::start(&sim.url(), &[]).await?;
    let client = chatd.client();
    let http = reqwest::Client::new();

    let small = client.create_chat().await?;
    let sent = client.send(&small, "[sim tokens=3 tps=0 id=small]").await?;
    client
        .wait_run(
            &small,
            sent["run_id"].as_str().unwrap_or(""),
            &["done"],
            Duration::from_secs(30),
        )
        .await?;

    let big = client.create_chat().await?;
    let before = events_written(&http, &chatd).await?;
    let began = Instant::now();
    let sent = client
        .send(&big, &format!("[sim tokens={big_tokens} tps=0 id=big]"))
        .await?;
    say(format!(
        "building the chat ({big_tokens} tokens at tps=0; progress every 5 s)…"
    ));
    let build_bound = Duration::from_secs(if big_tokens > 10_000 { 1_800 } else { 60 });
    wait_events(
        &http,
        &chatd,
        before + big_tokens as f64,
        build_bound,
        Some(before),
    )
    .await?;
    client
        .wait_run(
            &big,
            sent["run_id"].as_str().unwrap_or(""),
            &["done"],
            Duration::from_secs(120),
        )
        .await?;
    let build = began.elapsed();
    say(format!(
        "built in {:.1} s ({:.0} events/s on one chat)",
        build.as_secs_f64(),
        big_tokens as f64 / build.as_secs_f64()
    ));

    // Warm both paths once, then measure.
    snapshot_attach(&chatd, &client, &small).await?;
    snapshot_attach(&chatd, &client, &big).await?;
    let (mut small_times, mut big_times, mut tails) = (Vec::new(), Vec::new(), Vec::new());
    let mut seq = 0;
    let mut small_seq = 0;
    for _ in 0..sizes.repeats {
        let (t, s) = snapshot_attach(&chatd, &client, &small).await?;
        small_times.push(t);
        small_seq = s;
        let (t, s) = snapshot_attach(&chatd, &client, &big).await?;
        big_times.push(t);
        seq = s;
    }
    let tail_after = (seq - 1_999).max(0);
    let mut tail_count = 0;
    for _ in 0..sizes.repeats {
        let (t, n) = tail(&chatd, &big, tail_after, seq).await?;
        tails.push(t);
        tail_count = n;
    }
    let (small_med, big_med, big_max, tail_med, tail_max) = (
        median(small_times.clone()),
        median(big_times.clone()),
        big_times.iter().max().copied().unwrap_or_default(),
        median(tails.clone()),
        tails.iter().max().copied().unwrap_or_default(),
    );
    let snapshot_bytes = client
        .get(&format!("/conversations/{big}"))
        .await?
        .body
        .to_string()
        .len();
    say(format!(
        "snapshot+attach: {seq} events ({} KiB snapshot): median {} max {}; {small_seq} events: median {}",
        snapshot_bytes / 1024,
        ms_f(big_med),
        ms_f(big_max),
        ms_f(small_med)
    ));
    say(format!(
        "tail after {tail_after} ({tail_count} events, from the ring): median {} max {}",
        ms_f(tail_med),
        ms_f(tail_max)
    ));

    // The same tail with nothing in memory: after a restart it comes from SQLite.
    chatd.restart().await?;
    let mut cold = Vec::new();
    for _ in 0..sizes.repeats {
        cold.push(tail(&chatd, &big, tail_after, seq).await?.0);
    }
    let cold_med = median(cold);
    say(format!(
        "tail after a restart (from SQLite): median {}",
        ms_f(cold_med)
    ));

    let ratio =
        |a: Duration, b: Duration| format!("×{:.1}", a.as_secs_f64() / b.as_secs_f64().max(1e-9));
    rows.push(
        row(
            format!(
                "3. snapshot + attach, {seq} events ({} KiB)",
                snapshot_bytes / 1024
            ),
            format!("median {} / max {}", ms_f(big_med), ms_f(big_max)),
        )
        .aim("≤ 100 ms", big_max <= Duration::from_millis(100))
        .baseline(
            format!("{small_seq}-event chat {}", ms_f(small_med)),
            ratio(big_med, small_med),
        ),
    );
    rows.push(
        row(
            format!("3. tail after=seq-1999 ({tail_count} events, ring)"),
            format!("median {} / max {}", ms_f(tail_med), ms_f(tail_max)),
        )
        .aim("≤ 100 ms", tail_max <= Duration::from_millis(100))
        .baseline(
            format!("{small_seq}-event snapshot {}", ms_f(small_med)),
            ratio(tail_med, small_med),
        ),
    );
    rows.push(
        row(
            format!("3. same tail after restart ({tail_count} events, SQLite)"),
            format!("median {}", ms_f(cold_med)),
        )
        .aim("≤ 100 ms", cold_med <= Duration::from_millis(100))
        .baseline(
            format!("warm tail {}", ms_f(tail_med)),
            ratio(cold_med, tail_med),
        ),
    );
    Ok(())
}
