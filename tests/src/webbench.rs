//! Figure 12 of `bench`: the time from a chunk leaving the engine simulator
//! to its text in the web page's DOM, measured in the browser, with 0 and
//! with 50 other pages attached to the same chat.
//!
//! The real chatd with its front (no admin token: trusted-network mode, so
//! no sign-in), engine-sim stamping each token with its send time
//! (`[sim stamp=1]`: `w{i}:{unix µs} `), headless Chromium over WebDriver.
//! One measured page (a desktop browser of its own) has a MutationObserver
//! on `#messages` that, on every mutation, scans the new answer's text for
//! stamps it has not seen and records `performance.timeOrigin +
//! performance.now()` minus the stamp. The other pages are tabs of a second
//! browser, each open on the same chat (their event streams tail it).
//! Chromium opens at most 6 connections to one host, and each attached page
//! holds one, so the tabs are spread 5 to a host over 127.0.0.2, 127.0.0.3, …
//! (a byte relay in the bench to the front on 127.0.0.1; the measured page
//! talks to the front directly). Baseline, same run: an SSE client in the
//! bench (the harness's `EventStream`, through the front like the page)
//! timing the same stamps at arrival: what the page adds over the wire.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{ensure, Context};
use tokio::net::{TcpListener, TcpStream};

use crate::browser::{Browser, Chromedriver, DESKTOP};
use crate::egressbench::{loadavg, Line};
use crate::harness::{bin_dir, wait_until, Chatd, Client, Sim, FORWARD_KEY};

/// How big the figure's workload is.
#[derive(Debug, Clone)]
pub struct Sizes {
    /// Other pages attached in the loaded run.
    pub others: usize,
    /// Tokens of each answer, and their pace.
    pub tokens: usize,
    pub tps: f64,
    /// A first answer, not counted, before the measured ones.
    pub warmup: bool,
}

impl Sizes {
    pub fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                others: 5,
                tokens: 60,
                tps: 100.0,
                warmup: false,
            }
        } else {
            Sizes {
                others: 50,
                tokens: 300,
                tps: 50.0,
                warmup: true,
            }
        }
    }
}

/// Tabs of the other browser per loopback host (Chromium's limit is 6
/// connections a host; one is left for the pages' other requests).
const TABS_PER_HOST: usize = 5;

/// The observer the measured page gets before each answer: samples are
/// `[token index, ms from stamp to DOM]` in `window.__lat`, for the first
/// assistant message that was not there when it was installed.
const OBSERVER: &str = r#"
const old = new Set([...document.querySelectorAll('#messages .message[data-role="assistant"]')]
    .map(m => m.dataset.messageId));
const seen = new Set();
const stamp = /w(\d+):(\d{16})/g;
let target = null, scanned = 0;
window.__lat = [];
const scan = () => {
  const now = performance.timeOrigin + performance.now();
  const all = document.querySelectorAll('#messages .message[data-role="assistant"]');
  const m = all.length ? all[all.length - 1] : null;
  if (!m || old.has(m.dataset.messageId)) return;
  const body = m.querySelector('.body');
  if (!body) return;
  if (body !== target) { target = body; scanned = 0; }
  const text = body.textContent;
  stamp.lastIndex = Math.max(0, scanned - 40);
  let x;
  while ((x = stamp.exec(text))) {
    const i = Number(x[1]);
    if (!seen.has(i)) { seen.add(i); window.__lat.push([i, now - Number(x[2]) / 1000]); }
  }
  scanned = text.length;
};
if (window.__observer) window.__observer.disconnect();
window.__observer = new MutationObserver(scan);
window.__observer.observe(document.querySelector('#messages'),
    {childList: true, subtree: true, characterData: true});
return true;
"#;

fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// p50, p99 and max of samples in ms.
#[derive(Debug, Clone, Copy)]
struct Dist {
    p50: f64,
    p99: f64,
    max: f64,
    n: usize,
}

fn dist(mut v: Vec<f64>) -> Dist {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| {
        if v.is_empty() {
            return 0.0;
        }
        let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
        v[rank - 1]
    };
    Dist {
        p50: at(0.5),
        p99: at(0.99),
        max: v.last().copied().unwrap_or(0.0),
        n: v.len(),
    }
}

impl std::fmt::Display for Dist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "p50 {:.2} ms / p99 {:.2} ms / max {:.2} ms (n {})",
            self.p50, self.p99, self.max, self.n
        )
    }
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("×{:.2}", a / b)
    } else {
        "—".into()
    }
}

/// Makes a page take itself as in sight whatever its tab: `visibilityState`
/// reads `visible` and no `visibilitychange` reaches the page's listener
/// (window's capture phase comes before the document's).
const STAYS_IN_SIGHT: &str =
    "Object.defineProperty(document, 'visibilityState', {get: () => 'visible'});
     window.addEventListener('visibilitychange', (e) => e.stopImmediatePropagation(), true);";

/// Relays every connection to `host:port` to the front on 127.0.0.1:port.
async fn relay(host: &str, port: u16) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let listener = TcpListener::bind((host, port))
        .await
        .with_context(|| format!("binding {host}:{port}"))?;
    Ok(tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut outbound) = TcpStream::connect(("127.0.0.1", port)).await else {
                    return;
                };
                let _ = inbound.set_nodelay(true);
                let _ = outbound.set_nodelay(true);
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            });
        }
    }))
}

/// The stamps' latencies at arrival of an SSE client through the front.
async fn sse_latencies(
    client: &Client,
    chat: &str,
    after: i64,
    bound: Duration,
) -> anyhow::Result<tokio::task::JoinHandle<anyhow::Result<Vec<f64>>>> {
    let mut stream = client.events(chat, after).await?;
    let stamp = |text: &str| -> Vec<i64> {
        text.split_whitespace()
            .filter_map(|w| w.split_once(':')?.1.parse().ok())
            .collect()
    };
    Ok(tokio::spawn(async move {
        let mut out = Vec::new();
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            let event = tokio::time::timeout_at(deadline, stream.next())
                .await
                .context("the SSE client waited past its bound")??
                .context("the event stream ended")?;
            let at = now_micros();
            match event.kind.as_str() {
                "text.delta" => {
                    let text = event.data["text"].as_str().unwrap_or("");
                    for s in stamp(text) {
                        out.push((at - s) as f64 / 1000.0);
                    }
                }
                "run.finished" => return Ok(out),
                _ => {}
            }
        }
    }))
}

/// One measured answer: the page's samples and the SSE client's.
struct Round {
    page: Dist,
    sse: Dist,
}

async fn round(
    sizes: &Sizes,
    page: &Browser,
    client: &Client,
    wire: &Client,
    chat: &str,
    bound: Duration,
) -> anyhow::Result<Round> {
    page.eval(OBSERVER).await?;
    let seq = client.snapshot(chat).await?["seq"].as_i64().unwrap_or(0);
    let sse = sse_latencies(wire, chat, seq, bound).await?;
    let sent = client
        .send(
            chat,
            &format!(
                "Stamped tokens, please [sim stamp=1 tokens={} tps={}]",
                sizes.tokens, sizes.tps
            ),
        )
        .await?;
    let run = sent["run_id"].as_str().context("run id")?.to_string();
    let record = client
        .wait_run(
            chat,
            &run,
            &["done", "failed", "interrupted", "stopped"],
            bound,
        )
        .await?;
    ensure!(
        record["status"] == "done",
        "the measured run ended {record}"
    );
    let sse = sse.await.context("the SSE client's task")??;
    // The last tokens are in the DOM by the frame after their delta.
    let want = sizes.tokens;
    let samples = page
        .poll(
            "every stamp in the page's DOM",
            Duration::from_secs(10),
            || async {
                let v = page.eval("return window.__lat").await?;
                let samples: Vec<(u64, f64)> = serde_json::from_value(v)?;
                Ok(if samples.len() >= want {
                    Ok(samples)
                } else {
                    Err(format!("{} of {want} stamps seen", samples.len()))
                })
            },
        )
        .await?;
    Ok(Round {
        page: dist(samples.into_iter().map(|(_, ms)| ms).collect()),
        sse: dist(sse),
    })
}

/// Runs figure 12; `say` prints a progress line.
pub async fn figure(sizes: &Sizes, say: &dyn Fn(String)) -> anyhow::Result<Vec<Line>> {
    let bin = bin_dir().join("chatd");
    let release = bin.components().any(|c| c.as_os_str() == "release");
    say(format!(
        "chatd: {} ({}); load average {}; {} tokens at {} tps, stamped; {} other pages",
        bin.display(),
        if release {
            "release build"
        } else {
            "not a release build: the figures mean little"
        },
        loadavg(),
        sizes.tokens,
        sizes.tps,
        sizes.others
    ));
    let bound = Duration::from_secs(30) + Duration::from_secs_f64(sizes.tokens as f64 / sizes.tps);
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    // The relays bring 50 devices' connections from one address, 127.0.0.1:
    // past the front's 64 a peer, a page's boot requests beside 51 streams
    // were refused (on a real box each device is an address of its own).
    let chatd =
        Chatd::start_with_front(&sim.url(), &[("QSE_CHAT_FRONT_MAX_PER_PEER", "1024")], None)
            .await?;
    let front = chatd.front_url();
    let front_port = chatd.front_port.context("the front's port")?;
    let client = chatd.client();
    // Through the front, as the page: no key needed on a trusted network.
    let wire = Client::new(&front, FORWARD_KEY);
    let chat = client.create_chat().await?;
    let driver = Chromedriver::start().await?;

    let page = Browser::open(&driver, DESKTOP).await?;
    page.goto(&format!("{front}/#/c/{chat}")).await?;
    page.wait_state("live").await?;
    let attached = |n: u64| {
        let chatd = &chatd;
        async move {
            wait_until(
                &format!("{n} devices attached"),
                Duration::from_secs(60),
                || async { chatd.sse_devices().await.filter(|d| *d >= n) },
            )
            .await
        }
    };
    attached(1).await?;
    // Warm-up: the first answer pays for what is cold (page code, caches).
    if sizes.warmup {
        round(sizes, &page, &client, &wire, &chat, bound).await?;
    }
    let alone = round(sizes, &page, &client, &wire, &chat, bound).await?;
    say(format!(
        "0 other pages: DOM {}; SSE {}",
        alone.page, alone.sse
    ));

    // The other pages: tabs of a second browser on the same chat.
    let started = Instant::now();
    let hosts = sizes.others.div_ceil(TABS_PER_HOST);
    let mut relays = Vec::new();
    for h in 0..hosts {
        relays.push(relay(&format!("127.0.0.{}", h + 2), front_port).await?);
    }
    let others = Browser::open(&driver, DESKTOP).await?;
    for i in 0..sizes.others {
        if i > 0 {
            let tab = others.client().new_window(true).await?;
            others.client().switch_to_window(tab.handle).await?;
        }
        let host = format!("127.0.0.{}", i / TABS_PER_HOST + 2);
        others
            .goto(&format!("http://{host}:{front_port}/#/c/{chat}"))
            .await?;
        // Each tab is told it stays in sight, as a page on another device
        // is: a tab out of sight lets its stream go after 5 s (the page's
        // HIDDEN_DROP_MS). It still parses every event and updates its DOM
        // (on the 100 ms timer a background tab gets instead of frames), but
        // paints nothing: 50 painting windows would measure this box's two
        // cores, not chatd (docs/benchmarks.md, figure 12).
        others.eval(STAYS_IN_SIGHT).await?;
    }
    // Every page attached: the measured one, the others (the SSE client is
    // not attached between rounds).
    let want = 1 + sizes.others as u64;
    attached(want).await?;
    say(format!(
        "{} other pages attached in {:.1} s over {hosts} loopback hosts",
        sizes.others,
        started.elapsed().as_secs_f64()
    ));
    let loaded = round(sizes, &page, &client, &wire, &chat, bound).await?;
    say(format!(
        "{} other pages: DOM {}; SSE {}",
        sizes.others, loaded.page, loaded.sse
    ));
    // The last tab (the one in front) shows the same answer.
    let shown = others
        .eval(
            "const m = document.querySelectorAll('#messages .message[data-role=\"assistant\"] .body');
             return m.length ? m[m.length - 1].textContent.trim().split(/\\s+/).length : 0;",
        )
        .await?;
    say(format!(
        "the last other tab shows {shown} tokens of the last answer"
    ));

    others.close().await?;
    page.close().await?;
    for r in relays {
        r.abort();
    }
    drop(driver);

    let n = sizes.others;
    Ok(vec![
        Line {
            figure: "12. chunk → page DOM, 0 other pages".into(),
            measured: alone.page.to_string(),
            aim: None,
            baseline: Some((
                format!(
                    "SSE client via the front p50 {:.2} ms / p99 {:.2} ms",
                    alone.sse.p50, alone.sse.p99
                ),
                format!(
                    "p50 {}, p99 {}",
                    ratio(alone.page.p50, alone.sse.p50),
                    ratio(alone.page.p99, alone.sse.p99)
                ),
            )),
        },
        Line {
            figure: format!("12. chunk → page DOM, {n} other pages"),
            measured: format!(
                "{} (SSE client: p50 {:.2} ms / p99 {:.2} ms)",
                loaded.page, loaded.sse.p50, loaded.sse.p99
            ),
            aim: None,
            baseline: Some((
                format!(
                    "0 other pages p50 {:.2} ms / p99 {:.2} ms",
                    alone.page.p50, alone.page.p99
                ),
                format!(
                    "p50 {}, p99 {}",
                    ratio(loaded.page.p50, alone.page.p50),
                    ratio(loaded.page.p99, alone.page.p99)
                ),
            )),
        },
    ])
}
