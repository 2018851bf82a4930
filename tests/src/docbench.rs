//! Figure 15 of `bench`: documents read into text. A 50-page PDF, a DOCX
//! of 2,000 paragraphs and a table, and a workbook of 3 sheets × 2,000 rows
//! (written by `docfixtures`), each read by chatd's own
//! `documents::formats::extract` in-process and through the real reader
//! process (`documents::Reader`, chatd's binary with its limits), median of
//! N runs. The baseline, in the same run: reading the same bytes from disk
//! and their sha-256, which chatd does before any read (the cache key); the
//! ratio is the read's time over it. Then the cached path: a second
//! `Documents::read` of the same bytes (sha-256 and a SQLite lookup) on a
//! real store, and a message with the PDF attached posted to a real chatd,
//! the first time (read) and again (cached), against the same message with
//! no file.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use chatd::documents::formats::{self, DocKind};
use chatd::documents::{Documents, Limits, Reader};
use sha2::{Digest, Sha256};

use crate::docfixtures;
use crate::egressbench::{loadavg, Line};
use crate::harness::{bin_dir, form_body, run_id, Chatd, Client, FormPart, Sim};

/// How big the documents are and how many times each is read.
pub struct Sizes {
    pub pdf_pages: usize,
    pub docx_paragraphs: usize,
    pub sheets: usize,
    pub sheet_rows: u32,
    /// Reads of each document, each way (the median is the figure).
    pub runs: usize,
    /// Messages posted to chatd with the cached PDF (and without a file).
    pub posts: usize,
}

impl Sizes {
    pub fn new(quick: bool) -> Sizes {
        if quick {
            // A debug build reads a 50-page PDF in seconds: smaller
            // documents, so the smoke run stays short.
            Sizes {
                pdf_pages: 10,
                docx_paragraphs: 400,
                sheets: 3,
                sheet_rows: 400,
                runs: 3,
                posts: 3,
            }
        } else {
            Sizes {
                pdf_pages: 50,
                docx_paragraphs: 2_000,
                sheets: 3,
                sheet_rows: 2_000,
                runs: 15,
                posts: 15,
            }
        }
    }
}

/// One document of the figure.
struct Doc {
    kind: DocKind,
    path: PathBuf,
    bytes: Vec<u8>,
    /// What the document is, for the table ("PDF, 50 pages").
    what: String,
    /// How many units it holds, and the unit's name for a rate ("pages").
    units: f64,
    unit: &'static str,
}

/// How long one document took each way.
struct Timed {
    baseline: Duration,
    in_process: Duration,
    process: Duration,
    text_bytes: usize,
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

fn ratio(d: Duration, base: Duration) -> String {
    if base.is_zero() {
        "—".into()
    } else {
        let r = d.as_secs_f64() / base.as_secs_f64();
        if r < 10.0 {
            format!("×{r:.1}")
        } else {
            format!("×{r:.0}")
        }
    }
}

/// MB (10^6 bytes) a second of `bytes` read in `d`.
fn mb_s(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64().max(1e-9)
}

/// A workbook of `sheets` sheets of `rows` rows: a name and 9 numbers.
fn big_workbook(dir: &Path, sheets: usize, rows: u32) -> anyhow::Result<PathBuf> {
    let mut book = rust_xlsxwriter::Workbook::new();
    for s in 1..=sheets {
        let sheet = book.add_worksheet().set_name(format!("Sheet{s}"))?;
        for row in 0..rows {
            sheet.write_string(row, 0, format!("Item {row}"))?;
            for col in 1..10u16 {
                sheet.write_number(row, col, f64::from(row) * 1.5 + f64::from(col))?;
            }
        }
    }
    let path = dir.join(format!("big-{sheets}x{rows}.xlsx"));
    book.save(&path).context("writing the big workbook")?;
    Ok(path)
}

fn doc(
    kind: DocKind,
    path: PathBuf,
    what: String,
    units: usize,
    unit: &'static str,
) -> anyhow::Result<Doc> {
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(Doc {
        kind,
        path,
        bytes,
        what,
        units: units as f64,
        unit,
    })
}

fn documents(dir: &Path, sizes: &Sizes) -> anyhow::Result<Vec<Doc>> {
    let (pages, paragraphs) = (sizes.pdf_pages, sizes.docx_paragraphs);
    let rows = sizes.sheets * sizes.sheet_rows as usize;
    Ok(vec![
        doc(
            DocKind::Pdf,
            docfixtures::pdf_pages(dir, pages)?,
            format!("PDF, {pages} pages"),
            pages,
            "pages",
        )?,
        doc(
            DocKind::Docx,
            docfixtures::long_docx(dir, paragraphs)?,
            format!("DOCX, {paragraphs} paragraphs + a 100-row table"),
            paragraphs,
            "paragraphs",
        )?,
        doc(
            DocKind::Workbook,
            big_workbook(dir, sizes.sheets, sizes.sheet_rows)?,
            format!(
                "XLSX, {} sheets × {} rows × 10 columns",
                sizes.sheets, sizes.sheet_rows
            ),
            rows,
            "rows",
        )?,
    ])
}

/// What chatd does before a read: the file's bytes from disk, hashed.
fn read_and_hash(path: &Path) -> anyhow::Result<String> {
    let bytes = std::fs::read(path)?;
    let digest = Sha256::digest(&bytes);
    Ok(digest.iter().map(|b| format!("{b:02x}")).collect())
}

/// Times `doc` each way, `runs` times, alternated so a slow moment of the
/// machine falls on all three.
async fn time_doc(doc: &Doc, reader: &Reader, runs: usize) -> anyhow::Result<Timed> {
    let (mut base, mut inside, mut child) = (Vec::new(), Vec::new(), Vec::new());
    let mut text_bytes = 0;
    for _ in 0..runs {
        let began = Instant::now();
        std::hint::black_box(read_and_hash(&doc.path)?);
        base.push(began.elapsed());

        let began = Instant::now();
        let extracted = formats::extract(doc.kind, &doc.bytes)
            .map_err(|e| anyhow::anyhow!("{} {e}", doc.what))?;
        inside.push(began.elapsed());
        text_bytes = extracted.text.len();

        let file = std::fs::File::open(&doc.path)?;
        let began = Instant::now();
        let read = reader
            .read(file, doc.kind)
            .await
            .map_err(|e| anyhow::anyhow!("the reader process: {} {e}", doc.what))?;
        child.push(began.elapsed());
        ensure!(
            read.text == extracted.text,
            "{}: the reader process gave another text",
            doc.what
        );
    }
    Ok(Timed {
        baseline: median(base),
        in_process: median(inside),
        process: median(child),
        text_bytes,
    })
}

/// The lines of one document.
fn doc_lines(doc: &Doc, t: &Timed, runs: usize) -> Vec<Line> {
    let size = doc.bytes.len();
    let rate = |d: Duration| doc.units / d.as_secs_f64().max(1e-9);
    let base = format!("read + sha-256 {}", ms(t.baseline));
    vec![
        Line {
            figure: format!(
                "15. {} ({:.0} KiB → {:.0} KiB of text), extract in-process, median of {runs}",
                doc.what,
                size as f64 / 1024.0,
                t.text_bytes as f64 / 1024.0
            ),
            measured: format!(
                "{} ({:.0} {}/s, {:.1} MB/s)",
                ms(t.in_process),
                rate(t.in_process),
                doc.unit,
                mb_s(size, t.in_process)
            ),
            aim: None,
            baseline: Some((base.clone(), ratio(t.in_process, t.baseline))),
        },
        Line {
            figure: format!("15. {}, through the reader process", doc.what),
            measured: format!(
                "{} ({:.0} {}/s; the process +{})",
                ms(t.process),
                rate(t.process),
                doc.unit,
                ms(t.process.saturating_sub(t.in_process))
            ),
            aim: None,
            baseline: Some((base, ratio(t.process, t.baseline))),
        },
    ]
}

/// `Documents::read` on a real store: the first read of `doc` (hash,
/// lookup, reader process, row kept) and the median of `runs` more (hash
/// and lookup).
async fn cached(
    dir: &Path,
    reader: Reader,
    doc: &Doc,
    runs: usize,
) -> anyhow::Result<(Duration, Duration)> {
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Arc::new(chatd::metrics::Metrics::new(&mut registry));
    let store = chatd::store::Store::open(
        &dir.join("chat.sqlite3"),
        chatd::events::Hub::default(),
        metrics,
    )?;
    let documents = Documents::new(reader, store.clone());
    let read = |documents: Documents| async move {
        let file = std::fs::File::open(&doc.path)?;
        let began = Instant::now();
        documents
            .read(file, doc.kind)
            .await
            .map_err(|e| anyhow::anyhow!("{}: {e}", doc.what))?;
        Ok::<_, anyhow::Error>(began.elapsed())
    };
    let first = read(documents.clone()).await?;
    let mut again = Vec::with_capacity(runs);
    for _ in 0..runs {
        again.push(read(documents.clone()).await?);
    }
    store.close().await;
    Ok((first, median(again)))
}

/// Posts `text` with `files` to a new chat and waits for its run to end
/// (so no run is busy during the next post); the time to the 202.
async fn post(client: &Client, text: &str, files: Vec<FormPart>) -> anyhow::Result<Duration> {
    let chat = client.create_chat().await?;
    let mut parts = vec![FormPart::setting("text", text)];
    parts.extend(files);
    let body = form_body(&parts);
    let path = format!("/conversations/{chat}/messages");
    let began = Instant::now();
    let answer = client.send_form(reqwest::Method::POST, &path, body).await?;
    let took = began.elapsed();
    ensure!(answer.status == 202, "the post answered {answer:?}");
    let run = run_id(&answer.body)?;
    client
        .wait_run(&chat, &run, &["done", "failed"], Duration::from_secs(60))
        .await?;
    Ok(took)
}

/// The PDF attached to messages through a real chatd: the first post
/// (read), the median of `posts` more (cached), and as many posts of the
/// same text with no file.
async fn through_chatd(doc: &Doc, posts: usize) -> anyhow::Result<(Duration, Duration, Duration)> {
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start(&sim.url(), &[]).await?;
    let client = chatd.client();
    let name = doc
        .path
        .file_name()
        .context("the PDF's name")?
        .to_string_lossy()
        .into_owned();
    let file = || vec![FormPart::file(&name, "application/pdf", doc.bytes.clone())];
    let text = "What does this say?";
    let first = post(&client, text, file()).await?;
    let (mut again, mut bare) = (Vec::new(), Vec::new());
    for _ in 0..posts {
        again.push(post(&client, text, file()).await?);
        bare.push(post(&client, text, Vec::new()).await?);
    }
    Ok((first, median(again), median(bare)))
}

/// Runs figure 15; `say` prints progress.
pub async fn figure(sizes: &Sizes, say: &dyn Fn(String)) -> anyhow::Result<Vec<Line>> {
    let dir = tempfile::tempdir()?;
    let docs = documents(dir.path(), sizes)?;
    let reader = Reader::new(bin_dir().join("chatd"), Limits::default());
    let runs = sizes.runs;
    say(format!(
        "{} documents written; {runs} runs each; load average {}",
        docs.len(),
        loadavg()
    ));
    let mut lines = Vec::new();
    for doc in &docs {
        let t = time_doc(doc, &reader, runs).await?;
        say(format!(
            "  {}: {} bytes, {} bytes of text; read + sha-256 {}, extract {}, reader process {}",
            doc.what,
            doc.bytes.len(),
            t.text_bytes,
            ms(t.baseline),
            ms(t.in_process),
            ms(t.process)
        ));
        lines.extend(doc_lines(doc, &t, runs));
    }

    let pdf = docs.first().context("the PDF")?;
    let store_dir = tempfile::tempdir()?;
    let (first, again) = cached(store_dir.path(), reader, pdf, runs).await?;
    let baseline = median(
        (0..runs)
            .map(|_| {
                let began = Instant::now();
                read_and_hash(&pdf.path).map(|_| began.elapsed())
            })
            .collect::<anyhow::Result<Vec<_>>>()?,
    );
    say(format!(
        "  Documents::read of the {}: first {} (read), again {} (cached, median of {runs}); read + sha-256 {}",
        pdf.what,
        ms(first),
        ms(again),
        ms(baseline)
    ));
    lines.push(Line {
        figure: format!(
            "15. {}, Documents::read again (cached: sha-256 + SQLite lookup)",
            pdf.what
        ),
        measured: format!("{} (the first read {})", ms(again), ms(first)),
        aim: None,
        baseline: Some((
            format!("read + sha-256 {}", ms(baseline)),
            ratio(again, baseline),
        )),
    });

    let (first, again, bare) = through_chatd(pdf, sizes.posts).await?;
    say(format!(
        "  a message with the {} attached, through chatd: first post {}, again {} (median of {}); with no file {}",
        pdf.what,
        ms(first),
        ms(again),
        sizes.posts,
        ms(bare)
    ));
    lines.push(Line {
        figure: format!(
            "15. a message with the {} attached, POST to 202, median of {}",
            pdf.what, sizes.posts
        ),
        measured: format!(
            "again (cached) {} (the first, read, {})",
            ms(again),
            ms(first)
        ),
        aim: None,
        baseline: Some((
            format!("the same message with no file {}", ms(bare)),
            format!(
                "+{} (cached), +{} (first)",
                ms(again.saturating_sub(bare)),
                ms(first.saturating_sub(bare))
            ),
        )),
    });
    Ok(lines)
}
