//! Figures 7, 9 to 13, 15 and 16, whose measuring lives in the `tandem_tests` library
//! (egressbench, sandboxbench, triggerbench, connectorbench, webbench,
//! requestbench, docbench, searchbench): each prints its heading and turns the library's lines into
//! rows of the table.

use super::*;

use tandem_tests::egressbench::Line;

/// The library's lines of a figure as rows of the table (a line without an
/// aim, as figure 13's, makes a row without one).
fn push_lines(rows: &mut Vec<Row>, lines: Vec<Line>) {
    for l in lines {
        let mut r = row(l.figure, l.measured);
        if let Some((aim, met)) = l.aim {
            r = r.aim(aim, met);
        }
        if let Some((baseline, ratio)) = l.baseline {
            r = r.baseline(baseline, ratio);
        }
        rows.push(r);
    }
}

/// Figure 9: the measuring is in `tandem_tests::sandboxbench`. Skipped, with
/// a line saying why, where podman cannot run (not root, no podman).
pub(crate) async fn sandbox(quick: bool, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    use tandem_tests::sandboxbench;
    say("\n## 9. sandbox: cold, stopped and warm starts to the first byte, per-call overhead");
    if let Some(why) = sandboxbench::unavailable() {
        say(format!("figure 9 SKIPPED: {why}"));
        return Ok(());
    }
    let began = Instant::now();
    let podman = sandboxbench::podman().await?;
    say(format!(
        "podman's API service and the busybox test image (`tandem sandbox build`): {:.1} s",
        began.elapsed().as_secs_f64()
    ));
    let sizes = sandboxbench::Sizes::new(quick);
    push_lines(
        rows,
        sandboxbench::figure(&sizes, podman, &|line| say(line)).await?,
    );
    Ok(())
}

// Figure 10: triggerd with 10,000 triggers

/// Figure 10: the measuring is in `tandem_tests::triggerbench`.
pub(crate) async fn triggers(quick: bool, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    say("\n## 10. triggerd: next times, start, lateness of a due minute, idle CPU and RSS");
    let sizes = tandem_tests::triggerbench::Sizes::new(quick);
    push_lines(
        rows,
        tandem_tests::triggerbench::figure(&sizes, &|line| say(line)).await?,
    );
    Ok(())
}

// Figure 11: connectord between a fake Bot API and chatd

/// Figure 11: the measuring is in `tandem_tests::connectorbench`.
pub(crate) async fn web(quick: bool, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    say("\n## 12. web page: chunk → DOM in headless Chromium, with other pages attached");
    let sizes = tandem_tests::webbench::Sizes::new(quick);
    push_lines(
        rows,
        tandem_tests::webbench::figure(&sizes, &|line| say(line)).await?,
    );
    say("\n## 12b. web page: its bytes and a cold first paint, against their budgets");
    let loads = if quick { 3 } else { 9 };
    push_lines(
        rows,
        tandem_tests::pagebench::figure(loads, &|line| say(line)).await?,
    );
    Ok(())
}

pub(crate) async fn connectors(quick: bool, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    say("\n## 11. connectord: messages/s through a fake Bot API, idle CPU and RSS of 10 bindings");
    let sizes = tandem_tests::connectorbench::Sizes::new(quick);
    push_lines(
        rows,
        tandem_tests::connectorbench::figure(&sizes, &|line| say(line)).await?,
    );
    Ok(())
}

/// Figure 15: the measuring is in `tandem_tests::docbench`.
pub(crate) async fn documents(quick: bool, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    say("\n## 15. documents read into text: PDF, DOCX, XLSX, against reading their bytes");
    let sizes = tandem_tests::docbench::Sizes::new(quick);
    push_lines(
        rows,
        tandem_tests::docbench::figure(&sizes, &|line| say(line)).await?,
    );
    Ok(())
}

/// Figure 16: the measuring is in `tandem_tests::searchbench`.
pub(crate) async fn search(quick: bool, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    say("\n## 16. search: the index of 1,000 documents built, and searches against grep -r");
    let sizes = tandem_tests::searchbench::Sizes::new(quick);
    push_lines(
        rows,
        tandem_tests::searchbench::figure(&sizes, &|line| say(line)).await?,
    );
    Ok(())
}

/// Figure 13: the measuring is in `tandem_tests::requestbench`.
pub(crate) async fn requests(quick: bool, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    say("\n## 13. message sent → request at the engine: the brief's egressd call");
    let sizes = tandem_tests::requestbench::Sizes::new(quick);
    push_lines(
        rows,
        tandem_tests::requestbench::figure(&sizes, &|line| say(line)).await?,
    );
    Ok(())
}

// Figure 7: egressd against direct TCP and tinyproxy

/// Figure 7: the measuring is in `tandem_tests::egressbench`.
pub(crate) async fn egress(quick: bool, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    say("\n## 7. egressd: throughput, new CONNECTs/s, idle RSS");
    let sizes = tandem_tests::egressbench::Sizes::new(quick);
    push_lines(
        rows,
        tandem_tests::egressbench::figure(&sizes, &|line| say(line)).await?,
    );
    Ok(())
}
