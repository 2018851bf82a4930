//! Figure 8: hostexecd's per-call overhead against a plain `bash -c true`, and
//! the time from a stop to the last process of the call gone.

use super::*;

/// Pids whose command line holds `marker`.
pub(crate) fn processes_with(marker: &str) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| {
                    String::from_utf8_lossy(&c)
                        .replace('\0', " ")
                        .contains(marker)
                })
                .unwrap_or(false)
        })
        .count()
}

/// Figure 8: `POST /exec` of `true` (sent to the `finished` event read)
/// against `bash -c true` spawned and waited for from Rust, one after the
/// other; then calls with three background sleeps, each stopped: the time
/// from sending the stop to the last of its processes gone from /proc.
pub(crate) async fn hostexec(quick: bool, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    say("\n## 8. hostexecd: per-call overhead, stop to the last process gone");
    let calls = if quick { 50 } else { 1_000 };
    let stops = if quick { 5 } else { 20 };
    let hx = tandem_tests::harness::Hostexecd::start("").await?;
    let bound = Duration::from_secs(30);
    // Warm-up: the first call makes the chat's folder and the caches.
    for _ in 0..5 {
        hx.exec("bench", "true", None, bound).await?;
    }
    let mut through = Vec::with_capacity(calls);
    for i in 0..calls {
        let started = Instant::now();
        let run = hx.exec("bench", "true", None, bound).await?;
        through.push(started.elapsed().as_micros() as i64);
        anyhow::ensure!(
            run.status == 200 && run.body["exit_code"] == 0,
            "call {i}: {run:?}"
        );
    }
    let mut plain = Vec::with_capacity(calls);
    for _ in 0..calls {
        let started = Instant::now();
        let status = std::process::Command::new("bash")
            .args(["-c", "true"])
            .stdin(std::process::Stdio::null())
            .status()?;
        plain.push(started.elapsed().as_micros() as i64);
        anyhow::ensure!(status.success(), "bash -c true failed");
    }
    let t = dist(through);
    let p = dist(plain);
    say(format!(
        "POST /exec true: median {} p99 {}; bash -c true: median {} p99 {} ({calls} calls each)",
        ms(t.p50),
        ms(t.p99),
        ms(p.p50),
        ms(p.p99)
    ));
    rows.push(
        row(
            format!("8. hostexecd call of `true` ({calls} calls)"),
            format!("median {} / p99 {}", ms(t.p50), ms(t.p99)),
        )
        .baseline(
            format!("`bash -c true` from Rust {} / {}", ms(p.p50), ms(p.p99)),
            format!("+{} median / +{} p99", ms(t.p50 - p.p50), ms(t.p99 - p.p99)),
        ),
    );
    let mut gone = Vec::with_capacity(stops);
    for i in 0..stops {
        let marker = format!("600.{}{i}", rand::random::<u32>());
        let command = format!(
            "sleep {marker} & setsid sleep {marker} & (sleep {marker} &); echo ready; sleep {marker}"
        );
        let mut stream = hx.exec_open("bench_stop", &command, None).await?;
        let first = stream.read_until(bound, |e| e["event"] == "output").await?;
        let call_id = first[0]["call_id"]
            .as_str()
            .context("the started event names the call")?
            .to_string();
        let until = Instant::now() + bound;
        while processes_with(&marker) < 4 {
            anyhow::ensure!(Instant::now() < until, "the call's sleeps did not start");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let started = Instant::now();
        let (status, _) = hx
            .call("POST", &format!("/exec/{call_id}/stop"), None)
            .await?;
        anyhow::ensure!(status == 200, "stop answered {status}");
        while processes_with(&marker) > 0 {
            anyhow::ensure!(
                Instant::now() < until,
                "the call's processes outlived the stop"
            );
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        gone.push(started.elapsed().as_micros() as i64);
        stream
            .read_until(bound, |e| e["event"] == "finished")
            .await?;
    }
    let g = dist(gone);
    say(format!(
        "stop to the last process gone: median {} max {} ({stops} calls, 4 sleeps each)",
        ms(g.p50),
        ms(g.max)
    ));
    rows.push(
        row(
            "8. hostexecd stop to the last process gone",
            format!("median {} / max {}", ms(g.p50), ms(g.max)),
        )
        .aim("< 1 s", g.max < 1_000_000),
    );
    Ok(())
}
