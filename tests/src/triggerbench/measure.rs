//! Measuring for figure 10: medians, quantiles and their texts, and a
//! daemon's idle CPU and RSS over a span.

use super::*;

pub(super) fn median_d(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

pub(super) fn ms_d(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

pub(super) fn us_each(d: Duration, n: usize) -> String {
    format!("{:.2} µs", d.as_secs_f64() * 1e6 / n.max(1) as f64)
}

pub(super) fn ratio(a: Duration, b: Duration) -> String {
    format!("×{:.1}", a.as_secs_f64() / b.as_secs_f64().max(1e-9))
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Dist {
    pub(super) p50: i64,
    pub(super) p99: i64,
    pub(super) max: i64,
}

pub(super) fn quantile(sorted: &[i64], q: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

pub(super) fn dist(mut v: Vec<i64>) -> Dist {
    v.sort_unstable();
    Dist {
        p50: quantile(&v, 0.5),
        p99: quantile(&v, 0.99),
        max: v.last().copied().unwrap_or(0),
    }
}

pub(super) fn msi(v: i64) -> String {
    format!("{v} ms")
}

pub(super) fn dist_text(d: Dist) -> String {
    format!(
        "p50 {} / p99 {} / max {}",
        msi(d.p50),
        msi(d.p99),
        msi(d.max)
    )
}

pub(super) fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

pub(super) fn mean(v: &[Duration]) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.iter().sum::<Duration>() / v.len() as u32
}

/// CPU (stat ticks and schedstat), RSS (last and peak) and checks of a
/// triggerd over `span`.
pub(super) struct Idle {
    pub(super) cpu: f64,
    pub(super) cpu_ns: u64,
    pub(super) rss: u64,
    pub(super) peak: u64,
    pub(super) checks: u64,
    pub(super) check_mean: f64,
}

pub(super) async fn idle(
    pid: u32,
    client: &reqwest::Client,
    span: Duration,
) -> anyhow::Result<Idle> {
    let checks0 = health(client).await?["checks"].as_u64().unwrap_or(0);
    let (sum0, count0) = check_seconds(client).await?;
    let cpu0 = cpu_secs(pid);
    let mut precise = crate::procstat::ThreadCpu::start(pid);
    let started = Instant::now();
    let mut peak = 0;
    while started.elapsed() < span {
        peak = peak.max(rss_kib(pid).unwrap_or(0));
        precise.sample();
        tokio::time::sleep(Duration::from_millis(250).min(span)).await;
    }
    precise.sample();
    let cpu = cpu_secs(pid) - cpu0;
    let rss = rss_kib(pid).context("triggerd's VmRSS")?;
    // The two calls below are after the window: they are not in its CPU.
    let checks = health(client).await?["checks"].as_u64().unwrap_or(0) - checks0;
    let (sum1, count1) = check_seconds(client).await?;
    Ok(Idle {
        cpu,
        cpu_ns: precise.total_ns,
        rss,
        peak: peak.max(rss),
        checks,
        check_mean: if count1 > count0 {
            (sum1 - sum0) / (count1 - count0)
        } else {
            0.0
        },
    })
}
