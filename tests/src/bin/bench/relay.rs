//! Figure 1 (relay latency) and figure 4 (chatd's RSS): a stamped answer
//! relayed to 1, 100 and 1,000 attached devices, against the engine read
//! directly and the bare fan-out floor (`floor`).

use super::*;

pub(crate) struct Dist {
    pub(crate) p50: i64,
    pub(crate) p99: i64,
    pub(crate) max: i64,
    pub(crate) n: usize,
}

pub(crate) fn dist(mut v: Vec<i64>) -> Dist {
    v.sort_unstable();
    Dist {
        p50: quantile(&v, 0.50),
        p99: quantile(&v, 0.99),
        max: v.last().copied().unwrap_or(0),
        n: v.len(),
    }
}

/// Runs one stamped answer on a fresh chat with `devices` attached; returns
/// every device's latencies together and the fewest tokens any device got.
pub(crate) async fn relay_once(
    chatd: &Chatd,
    client: &Client,
    devices: usize,
    tokens: usize,
    tps: f64,
    id: &str,
) -> anyhow::Result<(Seen, usize)> {
    let chat = client.create_chat().await?;
    let seq = client.snapshot(&chat).await?["seq"].as_i64().unwrap_or(0);
    let text = format!("[sim tokens={tokens} tps={tps} stamp=1 id={id}]");
    let start = async {
        client.send(&chat, &text).await?;
        Ok(())
    };
    attach_and_read(
        chatd.port,
        &events_request(&chat, seq),
        devices,
        tokens,
        tps,
        start,
    )
    .await
}

/// Attaches `devices` streams to `port` with `request`, then runs `start`
/// and reads every device until its `run.finished`.
pub(crate) async fn attach_and_read(
    port: u16,
    request: &[u8],
    devices: usize,
    tokens: usize,
    tps: f64,
    start: impl std::future::Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<(Seen, usize)> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    // Attach in waves, each device's headers received before the next wave.
    let mut streams = Vec::with_capacity(devices);
    while streams.len() < devices {
        let wave = (devices - streams.len()).min(100);
        let opened = join_all((0..wave).map(|_| RawStream::open(port, request, deadline))).await;
        for s in opened {
            streams.push(
                s.with_context(|| format!("attaching device {} of {devices}", streams.len() + 1))?,
            );
        }
    }
    let run_bound = Duration::from_secs_f64(tokens as f64 / tps.max(1.0)) + Duration::from_secs(60);
    let read_deadline = tokio::time::Instant::now() + run_bound;
    let readers: Vec<_> = streams
        .into_iter()
        .map(|s| tokio::spawn(read_deltas(s, tokens, read_deadline)))
        .collect();
    start.await?;
    let mut all = Seen::with_capacity(devices * tokens);
    let mut fewest = usize::MAX;
    for (i, reader) in readers.into_iter().enumerate() {
        let seen = reader
            .await
            .context("device task")?
            .with_context(|| format!("device {i}"))?;
        fewest = fewest.min(seen.read.len());
        all.read.extend(seen.read);
        all.arrived.extend(seen.arrived);
    }
    Ok((all, fewest))
}

pub(crate) async fn relay(sizes: &Sizes, rows: &mut Vec<Row>, nofile: u64) -> anyhow::Result<()> {
    let (tokens, tps) = (sizes.relay_tokens, sizes.relay_tps);
    say(format!(
        "\n## 1. token relay latency ({tokens} tokens at {tps} tokens/s, stamp=1)"
    ));
    say(
        "latency = when a device got the token − the engine's stamp in it; \"read\": when the\n\
         device's read returned, \"arrival\": the kernel's receive timestamp of its socket",
    );
    let most = sizes.levels.iter().copied().max().unwrap_or(1);
    if (most as u64) * 2 + 200 > nofile {
        bail!(
            "{most} devices need ~{} open files here and in chatd; the limit is {nofile} (raise `ulimit -n`)",
            most * 2 + 200
        );
    }
    let sim = Sim::start(&[])?;
    let chatd = Chatd::start(&sim.url(), &[]).await?;
    let pid = chatd.pid().context("chatd pid")?;
    say(format!(
        "chatd pid {pid}: open files limit (soft/hard) {}",
        nofile_of(pid)
    ));
    // Idle RSS: after start, before any chat.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle = rss_kib(pid).context("reading chatd's VmRSS")?;
    let sim_idle = child_pid("engine-sim").and_then(rss_kib).unwrap_or(0);

    let client = chatd.client();
    // Warm-up: engine connection pool, reader connections, code paths.
    relay_once(&chatd, &client, 1, 20, 500.0, "warm")
        .await
        .context("warm-up run")?;
    let direct = direct_latencies(sim.port, tokens, tps, Duration::from_secs(120)).await?;
    let (direct_read, direct_arrived) = (dist(direct.read), dist(direct.arrived));
    say(format!(
        "direct (one client reads the engine): read p50 {} p99 {} max {}; arrival p50 {} p99 {} ({} tokens)",
        ms(direct_read.p50),
        ms(direct_read.p99),
        ms(direct_read.max),
        ms(direct_arrived.p50),
        ms(direct_arrived.p99),
        direct_read.n
    ));
    let floor = floor::Floor::start(sim.port)?;
    let mut busy = 0;
    for &devices in &sizes.levels {
        let sampler = (devices == most).then(|| RssSampler::start(pid, Duration::from_secs(600)));
        let cpu = |p: Option<u32>| p.map(cpu_secs).unwrap_or(0.0);
        let (me, sim_pid) = (std::process::id(), child_pid("engine-sim"));
        let (c0, b0, s0, w0) = (cpu(Some(pid)), cpu(Some(me)), cpu(sim_pid), Instant::now());
        let (seen, fewest) = relay_once(
            &chatd,
            &client,
            devices,
            tokens,
            tps,
            &format!("relay{devices}"),
        )
        .await?;
        let (wall, chatd_cpu, bench_cpu, sim_cpu) = (
            w0.elapsed(),
            cpu(Some(pid)) - c0,
            cpu(Some(me)) - b0,
            cpu(sim_pid) - s0,
        );
        if let Some(sampler) = sampler {
            busy = sampler.peak().await;
        }
        let (read, arrived) = (dist(seen.read), dist(seen.arrived));
        let (added50, added99) = (read.p50 - direct_read.p50, read.p99 - direct_read.p99);
        let (arr50, arr99) = (
            arrived.p50 - direct_arrived.p50,
            arrived.p99 - direct_arrived.p99,
        );
        say(format!(
            "{devices:>5} devices: read p50 {} p99 {} max {}; arrival p50 {} p99 {} max {}; \
             added (read) p50 {} p99 {}; added (arrival) p50 {} p99 {}",
            ms(read.p50),
            ms(read.p99),
            ms(read.max),
            ms(arrived.p50),
            ms(arrived.p99),
            ms(arrived.max),
            ms(added50),
            ms(added99),
            ms(arr50),
            ms(arr99)
        ));
        say(format!(
            "       {} samples, fewest per device {fewest}/{tokens}; CPU over {:.1} s: chatd {chatd_cpu:.2} s, \
             bench (the devices) {bench_cpu:.2} s, engine-sim {sim_cpu:.2} s",
            read.n,
            wall.as_secs_f64()
        ));
        if fewest < tokens {
            say(format!(
                "  WARNING: a device got {fewest} of {tokens} deltas"
            ));
        }
        // The same answer through the bare relay floor.
        let f0 = (cpu(Some(floor.pid())), cpu(Some(me)));
        let (floor_seen, floor_fewest) = floor::once(&floor, devices, tokens, tps).await?;
        let (floor_read, floor_arrived) = (dist(floor_seen.read), dist(floor_seen.arrived));
        say(format!(
            "       bare relay floor: read p50 {} p99 {} max {}; arrival p50 {} p99 {}; fewest per device \
             {floor_fewest}/{tokens}; CPU: floor {:.2} s, bench {:.2} s",
            ms(floor_read.p50),
            ms(floor_read.p99),
            ms(floor_read.max),
            ms(floor_arrived.p50),
            ms(floor_arrived.p99),
            cpu(Some(floor.pid())) - f0.0,
            cpu(Some(me)) - f0.1
        ));
        let plural = if devices == 1 { "" } else { "s" };
        let mut r = row(
            format!("1. relay added latency, {devices} device{plural}"),
            format!(
                "added p50 {} / p99 {} (read: p50 {} / p99 {} / max {}); at socket arrival: added p50 {} / p99 {}",
                ms(added50),
                ms(added99),
                ms(read.p50),
                ms(read.p99),
                ms(read.max),
                ms(arr50),
                ms(arr99)
            ),
        )
        .baseline(
            format!(
                "direct from engine p50 {} / p99 {}; bare relay floor p50 {} / p99 {}",
                ms(direct_read.p50),
                ms(direct_read.p99),
                ms(floor_read.p50),
                ms(floor_read.p99)
            ),
            format!(
                "p99 ×{:.1} direct, ×{:.1} floor",
                read.p99 as f64 / direct_read.p99.max(1) as f64,
                read.p99 as f64 / floor_read.p99.max(1) as f64
            ),
        );
        if devices == most {
            let aim = if most == 1_000 {
                "p99 added ≤ 2 ms at 1,000 devices".to_string()
            } else {
                format!("p99 added ≤ 2 ms (quick: {most} devices; the aim is at 1,000)")
            };
            r = r.aim(aim, added99 <= 2_000);
        }
        rows.push(r);
    }
    rows.push(
        row("4. chatd RSS idle (after start)", mib(idle))
            .aim("≤ 20 MiB", idle <= 20 * 1024)
            .baseline(
                format!("engine-sim idle {}", mib(sim_idle)),
                format!("×{:.2}", idle as f64 / sim_idle.max(1) as f64),
            ),
    );
    say(format!(
        "chatd RSS idle {}, peak busy with {most} devices {}",
        mib(idle),
        mib(busy)
    ));
    rows.push(
        row(
            format!("4. chatd RSS busy (peak, {most} devices)"),
            mib(busy),
        )
        .baseline(
            format!("idle {}", mib(idle)),
            format!("×{:.2}", busy as f64 / idle.max(1) as f64),
        ),
    );
    Ok(())
}
