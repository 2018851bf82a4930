//! Figure 7 of `bench`: egressd, the real binary, against a direct loopback
//! connection and against tinyproxy, all in the same run.
//!
//! An origin in the bench on 127.0.0.2 speaks a one-line protocol
//! (`down N`: it writes N bytes and closes; `up N`: it reads N bytes and
//! answers `ok`; `ping`: it answers `pong` and closes). The same client
//! reaches it four ways: directly (the baseline), through a chat's unix
//! socket with `CONNECT`, through egressd's loopback listener with `CONNECT`
//! and the chat's token (when the binary has one), and through tinyproxy
//! (when it is installed), started by the bench with its own config.
//! Measured: throughput of a large transfer each way, new CONNECTs a second
//! with a few concurrent clients, and idle RSS. Every wait is bounded; both
//! proxies are stopped on the way out.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use futures_util::future::join_all;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};

use crate::harness::{free_port, wait_until};

mod floor;
mod measure;
mod origin;
mod proxies;
mod routes;

pub use floor::*;
pub use measure::*;
pub use origin::*;
pub use proxies::*;
pub use routes::*;

/// The origin's address: loopback, but not 127.0.0.1, so egressd opens it
/// only through `allow_ranges` (as a test network would be opened).
pub const ORIGIN_IP: &str = "127.0.0.2";

/// Read and write size of the bench's own ends (origin and client).
const CHUNK: usize = 256 * 1024;

static BLOCK: [u8; CHUNK] = [b'x'; CHUNK];

/// How big the figure's workload is.
#[derive(Debug, Clone)]
pub struct Sizes {
    /// Bytes of each transfer.
    pub bytes: u64,
    /// Repetitions of each transfer (median).
    pub transfer_reps: usize,
    /// New connections per round of the rate test, and rounds (median).
    pub conns: usize,
    pub conn_reps: usize,
    /// Clients connecting at once.
    pub clients: usize,
    /// Chat sockets open while idle RSS is read.
    pub chats: usize,
}

impl Sizes {
    pub fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                bytes: 64 << 20,
                transfer_reps: 1,
                conns: 300,
                conn_reps: 1,
                clients: 2,
                chats: 10,
            }
        } else {
            Sizes {
                bytes: 1 << 30,
                transfer_reps: 5,
                conns: 3_000,
                conn_reps: 5,
                clients: 4,
                chats: 100,
            }
        }
    }
}

/// One line of the bench's final table.
pub struct Line {
    pub figure: String,
    pub measured: String,
    /// The aim and whether it was met.
    pub aim: Option<(String, bool)>,
    /// The baseline and the ratio to it.
    pub baseline: Option<(String, String)>,
}

fn line(figure: impl Into<String>, measured: impl Into<String>) -> Line {
    Line {
        figure: figure.into(),
        measured: measured.into(),
        aim: None,
        baseline: None,
    }
}

// The origin

/// Runs figure 7; `say` prints a progress line.
pub async fn figure(sizes: &Sizes, say: &dyn Fn(String)) -> anyhow::Result<Vec<Line>> {
    let Some(egressd_bin) = sibling_bin("egressd") else {
        bail!("egressd is not built next to bench: `cargo build --release -p egressd -p tandem-tests`");
    };
    let release = egressd_bin.components().any(|c| c.as_os_str() == "release");
    say(format!(
        "egressd: {} ({}); load average {}; origin on {ORIGIN_IP}; {} each way × {} round(s); \
         {} new connections × {} round(s), {} clients at once",
        egressd_bin.display(),
        if release {
            "release build"
        } else {
            "not a release build: the figures mean little"
        },
        loadavg(),
        size(sizes.bytes),
        sizes.transfer_reps,
        sizes.conns,
        sizes.conn_reps,
        sizes.clients
    ));
    let origin = Origin::start().await?;
    let egressd = Egressd::start(&egressd_bin, origin.port).await?;
    let egressd_pid = egressd.pid();
    let egressd_empty = rss_kib(egressd_pid).context("egressd's VmRSS")?;
    let chats = sizes.chats.max(1);
    let mut chat_socket = PathBuf::new();
    for i in 0..chats {
        let socket = egressd.open_chat(&format!("c_bench{i:03}")).await?;
        if i == 0 {
            chat_socket = socket;
        }
    }
    let egressd_idle = rss_kib(egressd_pid).context("egressd's VmRSS")?;
    say(format!(
        "egressd pid {egressd_pid}: RSS {} with no chat, {} with {chats} chat sockets open",
        mib(egressd_empty),
        mib(egressd_idle),
    ));

    let mut ways = vec![
        Way::new(Route::Direct, None),
        Way::new(Route::ChatSocket(chat_socket), Some(egressd_pid)),
    ];
    // (c): only when this egressd has its loopback listener.
    let listener_missing = if egressd.listener_answers().await {
        let route = Route::Listener {
            port: egressd.listen_port,
            auth: egressd.auth("c_bench000"),
        };
        match download(&route, origin.port, 1 << 20).await {
            Ok(_) => {
                ways.push(Way::new(route, Some(egressd_pid)));
                None
            }
            Err(e) => Some(format!(
                "its listener refused the bench's CONNECT + token: {e:#}"
            )),
        }
    } else {
        Some(format!(
            "this egressd does not listen on 127.0.0.1:{} ([egress] listen)",
            egressd.listen_port
        ))
    };
    if let Some(why) = &listener_missing {
        say(format!("egressd listener + token: not available: {why}"));
    }
    let tinyproxy = match tinyproxy_bin() {
        Some(bin) => Some(Tinyproxy::start(&bin, origin.port).await?),
        None => {
            say(
                "tinyproxy is not installed (apt-get install tinyproxy): its rows are skipped"
                    .into(),
            );
            None
        }
    };
    let tinyproxy_idle = tinyproxy.as_ref().and_then(|t| rss_kib(t.pid()));
    if let Some(tp) = &tinyproxy {
        say(format!(
            "tinyproxy pid {}: RSS {} idle",
            tp.pid(),
            mib(tinyproxy_idle.unwrap_or(0))
        ));
        ways.push(Way::new(Route::Tinyproxy(tp.port), Some(tp.pid())));
    }
    let floor = Floor::start()?;
    ways.push(Way::new(Route::Floor(floor.port), Some(floor.pid())));

    // Warm-up: every way works before anything is timed.
    for way in &ways {
        download(&way.route, origin.port, 8 << 20)
            .await
            .with_context(|| format!("warm-up download via {}", way.route.name()))?;
        upload(&way.route, origin.port, 8 << 20)
            .await
            .with_context(|| format!("warm-up upload via {}", way.route.name()))?;
    }

    // 1. Throughput, the ways taking turns in each round.
    let bound = Duration::from_secs(120);
    let per_mib = |d: Duration| sizes.bytes as f64 / f64::from(1 << 20) / d.as_secs_f64();
    for round in 0..sizes.transfer_reps {
        for way in &mut ways {
            let name = way.route.name();
            let cpu = way.pid.map(cpu_secs).unwrap_or(0.0);
            let down = tokio::time::timeout(bound, download(&way.route, origin.port, sizes.bytes))
                .await
                .with_context(|| format!("a download via {name} took over {bound:?}"))?
                .with_context(|| format!("download via {name}"))?;
            let up = tokio::time::timeout(bound, upload(&way.route, origin.port, sizes.bytes))
                .await
                .with_context(|| format!("an upload via {name} took over {bound:?}"))?
                .with_context(|| format!("upload via {name}"))?;
            way.m.transfer_cpu += way.pid.map(cpu_secs).unwrap_or(0.0) - cpu;
            way.m.down.push(per_mib(down));
            way.m.up.push(per_mib(up));
            say(format!(
                "round {}: {name:<26} down {:>6.0} MiB/s, up {:>6.0} MiB/s",
                round + 1,
                per_mib(down),
                per_mib(up)
            ));
        }
    }

    // 2. New connections a second.
    let bound = Duration::from_secs(60);
    for round in 0..sizes.conn_reps {
        for way in ways.iter_mut().filter(|w| w.rate) {
            let name = way.route.name();
            let cpu = way.pid.map(cpu_secs).unwrap_or(0.0);
            let took = tokio::time::timeout(
                bound,
                connections(&way.route, origin.port, sizes.conns, sizes.clients),
            )
            .await
            .with_context(|| format!("{} connections via {name} took over {bound:?}", sizes.conns))?
            .with_context(|| format!("connections via {name}"))?;
            way.m.conn_cpu += way.pid.map(cpu_secs).unwrap_or(0.0) - cpu;
            let rate = sizes.conns as f64 / took.as_secs_f64();
            way.m.rate.push(rate);
            say(format!(
                "round {}: {name:<26} {rate:>6.0} new connections/s",
                round + 1
            ));
        }
    }
    let egressd_after = rss_kib(egressd_pid).unwrap_or(0);
    let tinyproxy_after = tinyproxy.as_ref().and_then(|t| rss_kib(t.pid()));
    match egressd.audited("c_bench000").await {
        Ok(n) => say(format!(
            "egressd audit: {n} rows for c_bench000 (at most 1000 read)"
        )),
        Err(e) => say(format!("egressd audit: could not be read: {e:#}")),
    }
    let gib = (sizes.transfer_reps * 2) as f64 * sizes.bytes as f64 / (1u64 << 30) as f64;
    let conns = (sizes.conn_reps * sizes.conns) as f64;
    for way in &ways {
        let Some(pid) = way.pid else { continue };
        let mut text = format!(
            "{}: CPU {:.2} s per GiB relayed",
            way.route.name(),
            way.m.transfer_cpu / gib
        );
        if way.rate {
            text.push_str(&format!(
                ", {:.0} µs per connection",
                way.m.conn_cpu / conns * 1e6
            ));
        }
        say(format!("{text} (pid {pid})"));
    }
    say(format!("load average after: {}", loadavg()));
    let lines = table(
        &Medians { ways: &ways },
        sizes,
        listener_missing.as_deref(),
        (egressd_empty, egressd_idle, egressd_after),
        tinyproxy_idle.map(|t| (t, tinyproxy_after.unwrap_or(0))),
    );
    drop(floor);
    drop(tinyproxy);
    drop(egressd);
    drop(origin);
    Ok(lines)
}

/// The figure's lines of the final table.
fn table(
    med: &Medians,
    sizes: &Sizes,
    listener_missing: Option<&str>,
    egressd_rss: (u64, u64, u64),
    tinyproxy_rss: Option<(u64, u64)>,
) -> Vec<Line> {
    let missing = |name: &str| match name {
        "tinyproxy" => "not installed".to_string(),
        _ => listener_missing.unwrap_or_default().to_string(),
    };
    let mut lines = Vec::new();
    let n = sizes.transfer_reps;
    let picks: [(&str, Pick); 2] = [("download", |m| &m.down), ("upload", |m| &m.up)];
    for (dir, pick) in picks {
        let direct = med.of("direct", pick).unwrap_or(0.0);
        let tiny = med.of("tinyproxy", pick);
        let floor = med.of("bare relay floor", pick);
        for name in EGRESSD_WAYS
            .into_iter()
            .chain(["tinyproxy", "bare relay floor"])
        {
            let figure = format!("7. {dir} {} via {name} (CONNECT)", size(sizes.bytes));
            let Some(v) = med.of(name, pick) else {
                lines.push(line(figure, format!("not available: {}", missing(name))));
                continue;
            };
            let mut l = line(figure, format!("{v:.0} MiB/s (median of {n})"));
            let of_direct = v / direct.max(1e-9);
            let mut ratio = format!("{:.0} % of direct", of_direct * 100.0);
            if EGRESSD_WAYS.contains(&name) {
                if let Some(f) = floor {
                    ratio.push_str(&format!("; {:.0} % of the floor", v / f.max(1e-9) * 100.0));
                }
                if let Some(t) = tiny {
                    ratio.push_str(&format!("; ×{:.2} tinyproxy", v / t.max(1e-9)));
                }
                l.aim = Some((
                    "≥ 90 % of direct, ahead of tinyproxy".into(),
                    of_direct >= 0.9 && tiny.is_none_or(|t| v > t),
                ));
            }
            l.baseline = Some((format!("direct loopback TCP {direct:.0} MiB/s"), ratio));
            lines.push(l);
        }
    }
    let direct = med.of("direct", |m| &m.rate).unwrap_or(0.0);
    let tiny = med.of("tinyproxy", |m| &m.rate);
    for name in EGRESSD_WAYS.into_iter().chain(["tinyproxy"]) {
        let figure = format!(
            "7. new CONNECTs/s via {name} ({} clients; ping, close)",
            sizes.clients
        );
        let Some(v) = med.of(name, |m| &m.rate) else {
            lines.push(line(figure, format!("not available: {}", missing(name))));
            continue;
        };
        let mut l = line(
            figure,
            format!(
                "{v:.0}/s (median of {}, {} each)",
                sizes.conn_reps, sizes.conns
            ),
        );
        let of_direct = format!("{:.0} % of direct", v / direct.max(1e-9) * 100.0);
        let direct_text = format!("direct TCP, no proxy, {direct:.0}/s");
        l.baseline = Some(match tiny {
            Some(t) if name != "tinyproxy" => {
                l.aim = Some(("ahead of tinyproxy".into(), v > t));
                (
                    format!("tinyproxy {t:.0}/s; {direct_text}"),
                    format!("×{:.2} tinyproxy; {of_direct}", v / t.max(1e-9)),
                )
            }
            _ => (direct_text, of_direct),
        });
        lines.push(l);
    }
    let (empty, idle, after) = egressd_rss;
    let mut l = line(
        format!(
            "7. egressd RSS idle, {} chat sockets open",
            sizes.chats.max(1)
        ),
        format!(
            "{} (no chat {}; after the runs {})",
            mib(idle),
            mib(empty),
            mib(after)
        ),
    );
    l.baseline = Some(match tinyproxy_rss {
        Some((t, t_after)) => (
            format!(
                "tinyproxy idle {} (after the runs {})",
                mib(t),
                mib(t_after)
            ),
            format!("×{:.2}", idle as f64 / t.max(1) as f64),
        ),
        None => ("tinyproxy: not installed".into(), "—".into()),
    });
    lines.push(l);
    lines
}
