//! Figure 16's latency: 10,000 text files searched through the route
//! against `grep -r` of the same files, and the route's time split
//! in-process on the stopped chatd's store.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use serde_json::Value;

use super::prose::Prose;
use super::{
    encode, hits, mib, ms, pair, quantiles, search, secs, stored, until_indexed, Sizes, MAX_HITS,
};
use crate::egressbench::Line;
use crate::harness::{bin_dir, Chatd, Sim};

/// A word no generated line holds (`q`, `x` and `y` are in no syllable).
const RARE: &str = "quixotry";

/// The searches of the latency figure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ask {
    Rare,
    Common,
    TwoWords,
    Pattern,
}

const ASKS: [Ask; 4] = [Ask::Rare, Ask::Common, Ask::TwoWords, Ask::Pattern];

/// The words the searches look for, from the prose's vocabulary.
struct Words {
    common: String,
    pair: (String, String),
}

impl Ask {
    fn what(self) -> &'static str {
        match self {
            Ask::Rare => "a rare word",
            Ask::Common => "a common word",
            Ask::TwoWords => "two words on a line",
            Ask::Pattern => "a regular expression",
        }
    }

    /// The route's query and whether it is a regular expression.
    fn route(self, words: &Words) -> (String, bool) {
        match self {
            Ask::Rare => (RARE.to_string(), false),
            Ask::Common => (words.common.clone(), false),
            Ask::TwoWords => (format!("{} {}", words.pair.0, words.pair.1), false),
            Ask::Pattern => (r"invoice-\d{4}".to_string(), true),
        }
    }

    /// grep's arguments for the same lines (`-E` where it needs one).
    fn grep(self, words: &Words) -> Vec<String> {
        match self {
            Ask::Rare => vec![RARE.to_string()],
            Ask::Common => vec![words.common.clone()],
            Ask::TwoWords => {
                let (a, b) = &words.pair;
                vec!["-E".into(), format!("{a}.*{b}|{b}.*{a}")]
            }
            Ask::Pattern => vec!["-E".into(), "invoice-[0-9]{4}".into()],
        }
    }

    fn query(self, words: &Words) -> String {
        let (text, regex) = self.route(words);
        format!("q={}{}", encode(&text), if regex { "&regex=1" } else { "" })
    }
}

/// `count` text files of 10 to 40 lines in `root/texts/dNN/`, with the rare
/// word, the two words and invoice numbers planted in a few; their bytes.
fn write_texts(root: &Path, count: usize, words: &Words, prose: &mut Prose) -> anyhow::Result<u64> {
    let every = |n: usize| (count / n).max(1);
    let mut bytes = 0u64;
    for i in 0..count {
        let path = root.join(format!("texts/d{:02}/f{i:05}.txt", i % 100));
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let n = 10 + i * 7919 % 31;
        let mut lines = prose.lines(n);
        if i % every(10) == 7 {
            lines[n / 2] = format!("The {RARE} of it all, {}", prose.line());
        }
        if i % every(20) == 3 {
            lines[n / 3] = format!("{} and {} met.", words.pair.0, words.pair.1);
        }
        if i % every(20) == 11 {
            lines[n - 1] = format!("Paid invoice-{} in full.", 1_000 + i);
        }
        let text = lines.join("\n") + "\n";
        bytes += text.len() as u64;
        std::fs::write(&path, text)?;
    }
    Ok(bytes)
}

/// One run of grep over `root/texts`: its time (the process's start
/// included) and its lines.
fn grep(root: &Path, mode: &str, args: &[String]) -> anyhow::Result<(Duration, Vec<String>)> {
    let began = Instant::now();
    let out = Command::new("grep")
        .args(["-r", "-i", mode])
        .args(args)
        .arg("texts")
        .current_dir(root)
        .env("LC_ALL", "C.UTF-8")
        .output()
        .context("running grep")?;
    let took = began.elapsed();
    ensure!(
        out.status.code().is_some_and(|c| c <= 1),
        "grep {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    Ok((took, lines))
}

/// The route's answer to `ask` is grep's: the same (path, line) pairs up
/// to [`MAX_HITS`], and `more_hits` exactly when grep found more.
fn same_as_grep(ask: Ask, body: &Value, grep_lines: &[String]) -> anyhow::Result<()> {
    let route: BTreeSet<(String, u64)> = hits(body).into_iter().map(|(p, _, l)| (p, l)).collect();
    let grep: BTreeSet<(String, u64)> = grep_lines
        .iter()
        .filter_map(|l| {
            let mut fields = l.splitn(3, ':');
            Some((fields.next()?.to_string(), fields.next()?.parse().ok()?))
        })
        .collect();
    let more = body["more_hits"].as_bool().unwrap_or(false);
    ensure!(
        more == (grep.len() > MAX_HITS) && route.len() == grep.len().min(MAX_HITS),
        "{}: the route found {} lines (more: {more}), grep {}",
        ask.what(),
        route.len(),
        grep.len()
    );
    ensure!(
        more || route == grep,
        "{}: the route's lines are not grep's",
        ask.what()
    );
    Ok(())
}

/// The latency figure: text files indexed, then searched each way.
pub(super) async fn latency(
    sim: &Sim,
    sizes: &Sizes,
    say: &dyn Fn(String),
) -> anyhow::Result<Vec<Line>> {
    let mut chatd = Chatd::start(&sim.url(), &[]).await?;
    let client = chatd.client();
    let chat = client.create_chat().await?;
    let data = chatd.data_dir();
    let root = data.join("workspaces").join(&chat);
    let mut prose = Prose::new(2_000, 16);
    let words = Words {
        common: prose.words[0].clone(),
        pair: (prose.words[60].clone(), prose.words[80].clone()),
    };
    let files = sizes.files;
    let bytes = write_texts(&root, files, &words, &mut prose)?;
    let db = data.join("chat.sqlite3");
    let before = stored(&db)?;
    let bound = Duration::from_secs(120).max(Duration::from_millis(50) * files as u32);
    let built = until_indexed(&client, &chat, &Ask::Rare.query(&words), bound).await?;
    let index = stored(&db)?.index.saturating_sub(before.index);
    say(format!(
        "  {files} text files ({}) indexed in {} ({:.0} files/s; the first answer after {}); the search tables {}",
        mib(bytes),
        secs(built.done),
        files as f64 / built.done.as_secs_f64().max(1e-9),
        secs(built.first),
        mib(index)
    ));
    let mut lines = vec![Line {
        figure: format!("16. index build, {files} text files ({})", mib(bytes)),
        measured: format!(
            "{} ({:.0} files/s; first answer {} with {} pending), search tables {}",
            secs(built.done),
            files as f64 / built.done.as_secs_f64().max(1e-9),
            secs(built.first),
            built.first_pending,
            mib(index)
        ),
        aim: None,
        baseline: Some((
            format!("the files {}", mib(bytes)),
            format!("index ×{:.1} the text", index as f64 / bytes.max(1) as f64),
        )),
    }];

    let n = sizes.queries;
    let mut rare = Duration::ZERO;
    for ask in ASKS {
        let query = ask.query(&words);
        let args = ask.grep(&words);
        let (_, listed) = grep(&root, "-n", &args)?;
        same_as_grep(ask, &search(&client, &chat, &query).await?, &listed)?;
        let (mut route, mut by_name, mut by_line) = (Vec::new(), Vec::new(), Vec::new());
        let mut found = 0;
        for _ in 0..n {
            let began = Instant::now();
            let body = search(&client, &chat, &query).await?;
            route.push(began.elapsed());
            found = hits(&body).len();
            by_name.push(grep(&root, "-l", &args)?.0);
            by_line.push(grep(&root, "-n", &args)?.0);
        }
        let (r50, _) = quantiles(route.clone());
        let (l50, _) = quantiles(by_name.clone());
        let (n50, _) = quantiles(by_line.clone());
        if ask == Ask::Rare {
            rare = r50;
        }
        let what = format!(
            "{} ({} of {} matching lines shown)",
            ask.what(),
            found,
            listed.len()
        );
        say(format!(
            "  {what}: route p50/p99 {}; grep -r -l -i {}; grep -r -n -i {}",
            pair(route.clone()),
            pair(by_name.clone()),
            pair(by_line.clone())
        ));
        let ratio = |b: Duration| r50.as_secs_f64() / b.as_secs_f64().max(1e-9);
        lines.push(Line {
            figure: format!("16. search {files} files, {what}, route p50 / p99 of {n}"),
            measured: pair(route),
            aim: None,
            baseline: Some((
                format!(
                    "grep -r -l -i {}; grep -r -n -i {} (process start included)",
                    pair(by_name),
                    pair(by_line)
                ),
                format!("×{:.2} -l, ×{:.2} -n (p50)", ratio(l50), ratio(n50)),
            )),
        });
    }

    // chatd stopped: the same store and workspace, in-process.
    chatd.sigterm(Duration::from_secs(15))?;
    let (scan, queries) = in_process(&data, &chat, &words, n).await?;
    let query = |ask: Ask| {
        queries
            .iter()
            .find(|(a, _)| *a == ask)
            .map_or(Duration::ZERO, |(_, d)| *d)
    };
    let each: Vec<String> = queries
        .iter()
        .map(|(ask, d)| format!("{} {}", ask.what(), ms(*d)))
        .collect();
    say(format!(
        "  in-process on the stopped chatd's store, p50: the unchanged workspace's scan {}; the index's query: {}",
        ms(scan),
        each.join(", ")
    ));
    let rare_query = query(Ask::Rare);
    lines.push(Line {
        figure: format!("16. where a search's time goes ({files} files, a rare word, p50)"),
        measured: format!(
            "the route {}: the workspace's scan {}, the index query {}, the rest (HTTP, checks) {}",
            ms(rare),
            ms(scan),
            ms(rare_query),
            ms(rare.saturating_sub(scan + rare_query))
        ),
        aim: None,
        baseline: Some((
            format!(
                "in-process on the same store; the other queries: {}",
                each.join(", ")
            ),
            format!(
                "scan {:.0} % of the route",
                scan.as_secs_f64() * 100.0 / rare.as_secs_f64().max(1e-9)
            ),
        )),
    });
    Ok(lines)
}

/// The medians of `n` scans of the unchanged workspace and of `n` of each
/// search, through chatd's own `FileHistory` and `Index` on the stopped
/// chatd's store.
async fn in_process(
    data: &Path,
    chat: &str,
    words: &Words,
    n: usize,
) -> anyhow::Result<(Duration, Vec<(Ask, Duration)>)> {
    use chatd::documents::{Documents, Limits, Reader};
    use chatd::history::{FileHistory, Place, Scope};
    use chatd::index::{Index, Matcher, Query, Request};
    use chatd::store::files::Author;

    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Arc::new(chatd::metrics::Metrics::new(&mut registry));
    let store = chatd::store::Store::open(
        &data.join("chat.sqlite3"),
        chatd::events::Hub::default(),
        metrics,
    )?;
    let history = FileHistory::new(store.clone(), data);
    let place = Place {
        key: chat.to_string(),
        root: data.join("workspaces").join(chat),
    };
    let author = Author {
        conversation_id: chat.to_string(),
        run_id: None,
        call_id: None,
        origin: chatd::words::FileOrigin::Outside,
        undoes: Vec::new(),
    };
    let reader = Reader::new(bin_dir().join("chatd"), Limits::default());
    let index = Index::new(
        store.clone(),
        history.blobs().clone(),
        Documents::new(reader, store.clone()),
        history.changed(),
    );
    let mut scans = Vec::with_capacity(n);
    for _ in 0..n {
        let began = Instant::now();
        history
            .sync(&place, Scope::All, &author)
            .await
            .map_err(|e| anyhow::anyhow!("the scan: {e}"))?;
        scans.push(began.elapsed());
    }
    let mut queries = Vec::new();
    for ask in ASKS {
        let (text, regex) = ask.route(words);
        let matcher = Matcher::new(&Query {
            text,
            regex,
            ignore_case: true,
        })
        .map_err(|e| anyhow::anyhow!("{}: the query {e}", ask.what()))?;
        let mut took = Vec::with_capacity(n);
        for _ in 0..n {
            let request = Request {
                matcher: matcher.clone(),
                under: None,
                max_hits: MAX_HITS,
            };
            let began = Instant::now();
            let found = index
                .search(chat, request)
                .await
                .map_err(|e| anyhow::anyhow!("{}: the search: {e}", ask.what()))?;
            took.push(began.elapsed());
            ensure!(
                !found.hits.is_empty() && found.pending == 0,
                "{}: the in-process search found {} hits, {} pending",
                ask.what(),
                found.hits.len(),
                found.pending
            );
        }
        queries.push((ask, quantiles(took).0));
    }
    store.close().await;
    Ok((quantiles(scans).0, queries))
}
