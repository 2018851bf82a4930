//! Figure 12b of `bench`: the web page's weight and its first paint, each
//! against its budget, and the first paint against a one-paragraph page
//! served on the same loopback in the same run.
//!
//! Weight: the bytes of `/` and of every file it names under `/chat-app/`,
//! as the front serves them (no compression: the front sends them as built
//! in). First paint: a cold browser (a new profile, nothing cached) opens
//! the page; `first-contentful-paint` and the page's own `tandem-live` mark
//! (set when the chat list is shown, app.js `goLive`) are read from the
//! page's performance timeline, from navigation start. The baseline is the
//! same cold load of a page of one paragraph from a server in the bench:
//! what Chromium itself costs, so the ratio is what the page adds.

use std::time::Duration;

use anyhow::{ensure, Context};

use crate::browser::{Browser, Chromedriver, DESKTOP};
use crate::egressbench::{loadavg, Line};
use crate::harness::{Chatd, Sim};

/// The page's bytes may not pass this (the "kept in a budget").
pub const WEIGHT_BUDGET: u64 = 394 * 1024;
/// A cold first paint on loopback may not take longer than this.
pub const PAINT_BUDGET_MS: f64 = 600.0;

/// The baseline page: one paragraph, nothing else.
const MINIMAL: &str =
    "<!doctype html><html lang=en><meta charset=utf-8><title>minimal</title><p>Hello.</p>";

/// The page's own files: "/" and what it names under /chat-app/, with
/// their sizes.
pub async fn weight(front: &str) -> anyhow::Result<Vec<(String, u64)>> {
    let http = reqwest::Client::new();
    let index = http.get(format!("{front}/")).send().await?.text().await?;
    let mut files = vec![("/".to_string(), index.len() as u64)];
    let mut named: Vec<&str> = index
        .split('"')
        .filter(|p| p.starts_with("/chat-app/"))
        .collect();
    named.sort_unstable();
    named.dedup(); // the icon is named more than once
    for path in named {
        let r = http.get(format!("{front}{path}")).send().await?;
        ensure!(r.status() == 200, "{path}: {}", r.status());
        files.push((path.to_string(), r.bytes().await?.len() as u64));
    }
    ensure!(files.len() > 5, "the page names its files: {files:?}");
    Ok(files)
}

/// One cold load of `url` in a new browser: (first contentful paint ms,
/// the `tandem-live` mark's ms if the page sets it).
async fn cold_load(
    driver: &Chromedriver,
    url: &str,
    live: bool,
) -> anyhow::Result<(f64, Option<f64>)> {
    let b = Browser::open(driver, DESKTOP).await?;
    b.goto(url).await?;
    if live {
        b.wait_state("live").await?;
    }
    let marks = b
        .poll("the first paint", Duration::from_secs(30), || async {
            let v = b
                .eval(
                    "const p = performance.getEntriesByName('first-contentful-paint')[0];
                     const l = performance.getEntriesByName('tandem-live')[0];
                     return p ? [p.startTime, l ? l.startTime : null] : null;",
                )
                .await?;
            Ok(if v.is_null() {
                Err("no first-contentful-paint entry yet".to_string())
            } else {
                Ok(v)
            })
        })
        .await?;
    b.close().await?;
    let paint = marks[0].as_f64().context("a paint time")?;
    Ok((paint, marks[1].as_f64()))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Runs figure 12b: `loads` cold loads of each page; `say` prints progress.
pub async fn figure(loads: usize, say: &dyn Fn(String)) -> anyhow::Result<Vec<Line>> {
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start_with_front(&sim.url(), &[], None).await?;
    let front = chatd.front_url();
    let files = weight(&front).await?;
    let total: u64 = files.iter().map(|(_, n)| n).sum();
    say(format!(
        "the page: {} files, {:.1} KiB ({}); load average {}",
        files.len(),
        total as f64 / 1024.0,
        files
            .iter()
            .map(|(p, n)| format!(
                "{} {:.1}",
                p.trim_start_matches("/chat-app/"),
                *n as f64 / 1024.0
            ))
            .collect::<Vec<_>>()
            .join(", "),
        loadavg()
    ));

    let minimal = axum::Router::new().route(
        "/",
        axum::routing::get(|| async { axum::response::Html(MINIMAL) }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base_url = format!("http://{}/", listener.local_addr()?);
    let server = tokio::spawn(async move { axum::serve(listener, minimal).await });

    let driver = Chromedriver::start().await?;
    let (mut page, mut live, mut base) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..loads {
        // Alternated, so a slow moment of the machine falls on both.
        let (p, l) = cold_load(&driver, &format!("{front}/"), true).await?;
        page.push(p);
        live.push(l.context("the page sets its tandem-live mark")?);
        base.push(cold_load(&driver, &base_url, false).await?.0);
    }
    drop(driver);
    server.abort();
    let (page, live, base) = (median(page), median(live), median(base));
    say(format!(
        "cold loads (median of {loads}): first paint {page:.0} ms, chat list shown {live:.0} ms; \
         one-paragraph page's first paint {base:.0} ms"
    ));
    Ok(vec![
        Line {
            figure: "12b. the page's own bytes".into(),
            measured: format!("{:.1} KiB in {} files", total as f64 / 1024.0, files.len()),
            aim: Some((
                format!("≤ {} KiB", WEIGHT_BUDGET / 1024),
                total <= WEIGHT_BUDGET,
            )),
            baseline: None,
        },
        Line {
            figure: format!("12b. cold first paint (median of {loads})"),
            measured: format!("{page:.0} ms (chat list shown at {live:.0} ms)"),
            aim: Some((
                format!("≤ {PAINT_BUDGET_MS:.0} ms"),
                page <= PAINT_BUDGET_MS,
            )),
            baseline: Some((
                format!("a one-paragraph page {base:.0} ms"),
                if base > 0.0 {
                    format!("×{:.2}", page / base)
                } else {
                    "—".into()
                },
            )),
        },
    ])
}
