//! Figure 14's upload rows: a file put through chatd as
//! `multipart/form-data` (streamed to disk, kept in the file history) against
//! the same bytes written straight to a file and synced, in one run; and
//! chatd's resident memory while it takes the upload, over its idle.

use tandem_tests::harness::{generated_chunk, streamed_form};
use tandem_tests::procstat::{rss_kib, PeakRss};

use super::*;

pub(crate) async fn figure(quick: bool, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let mib: u64 = if quick { 32 } else { 200 };
    // The baseline: the same bytes to a file on the same disk, synced.
    let dir = tempfile::tempdir()?;
    let started = Instant::now();
    {
        let mut file = std::fs::File::create(dir.path().join("baseline.bin"))?;
        for i in 0..mib {
            file.write_all(&generated_chunk(i))?;
        }
        file.sync_all()?;
    }
    let baseline = mib as f64 / started.elapsed().as_secs_f64();

    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start(&sim.url(), &[]).await?;
    let client = chatd.client();
    let pid = chatd.pid().context("chatd's pid")?;
    let chat = client.create_chat().await?;
    let idle = rss_kib(pid).context("chatd's VmRSS")?;
    let peak = PeakRss::start(pid);
    let started = Instant::now();
    let answer = client
        .send_form(
            reqwest::Method::PUT,
            &format!("/conversations/{chat}/files/content?path=big.bin"),
            streamed_form(&[], "big.bin", mib),
        )
        .await?;
    let took = started.elapsed().as_secs_f64();
    let peak = peak.end();
    if answer.status != 201 {
        bail!("the upload answered {}: {}", answer.status, answer.body);
    }
    let rate = mib as f64 / took;
    let grew = peak.saturating_sub(idle) as f64 / 1024.0;
    say(format!(
        "  a {mib} MiB upload: {rate:.0} MiB/s to the 201 (streamed, synced, hashed and kept), the bytes written and synced alone {baseline:.0} MiB/s; chatd's RSS {:.1} MiB idle, +{grew:.1} MiB at its peak",
        idle as f64 / 1024.0
    ));
    rows.push(
        row(
            format!("14. a {mib} MiB upload, to its answer"),
            format!("{rate:.0} MiB/s, RSS +{grew:.1} MiB"),
        )
        .baseline(
            format!("{baseline:.0} MiB/s (written and synced alone)"),
            format!("{:.2}×", rate / baseline),
        ),
    );
    Ok(())
}
