//! Figure 16's build: 1,000 distinct documents (PDF, DOCX, XLSX) put in a
//! chat's workspace, indexed through the route, the index's size measured.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use sha2::{Digest, Sha256};

use super::prose::{tag, Prose};
use super::{count, hits, mib, ms, search, secs, stored, until_indexed, Sizes};
use crate::docfixtures;
use crate::egressbench::{loadavg, Line};
use crate::harness::{Chatd, Sim};

/// The kinds of document the build mixes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Format {
    Pdf,
    Docx,
    Workbook,
}

impl Format {
    /// Half PDFs, a quarter each DOCX and XLSX.
    fn of(k: usize) -> Format {
        match k % 4 {
            2 => Format::Docx,
            3 => Format::Workbook,
            _ => Format::Pdf,
        }
    }

    fn ext(self) -> &'static str {
        match self {
            Format::Pdf => "pdf",
            Format::Docx => "docx",
            Format::Workbook => "xlsx",
        }
    }

    /// The part a hit on the document's own word names.
    fn part(self) -> &'static str {
        match self {
            Format::Pdf => "page 2",
            Format::Docx => "document",
            Format::Workbook => "sheet Ledger",
        }
    }
}

/// One document written into the workspace.
struct Written {
    /// Its path in the workspace.
    path: String,
    file: PathBuf,
    format: Format,
    tag: String,
    bytes: u64,
}

/// A workbook of two sheets of prose and numbers, `tag` in sheet 2, row 8.
fn workbook_of(dir: &Path, name: &str, tag: &str, prose: &mut Prose) -> anyhow::Result<PathBuf> {
    let mut book = rust_xlsxwriter::Workbook::new();
    for sheet_name in ["Summary", "Ledger"] {
        let sheet = book.add_worksheet().set_name(sheet_name)?;
        for row in 0..20u32 {
            let first = if sheet_name == "Ledger" && row == 7 {
                format!("Reference {tag}")
            } else {
                prose.word().to_string()
            };
            sheet.write_string(row, 0, first)?;
            sheet.write_number(row, 1, f64::from(row) * 12.5)?;
            sheet.write_string(row, 2, prose.line())?;
        }
    }
    let path = dir.join(name);
    book.save(&path).context("writing a workbook")?;
    Ok(path)
}

/// Document `k` in `dir`, its own word where [`Format::part`] says.
fn write_document(dir: &Path, k: usize, prose: &mut Prose) -> anyhow::Result<Written> {
    let format = Format::of(k);
    let tag = tag(k);
    let name = format!("d{k:04}.{}", format.ext());
    let path = match format {
        Format::Pdf => {
            let mut pages: Vec<Vec<String>> = (0..3).map(|_| prose.lines(14)).collect();
            pages[1][4] = format!("Reference {tag} {}", prose.line());
            let lines: Vec<Vec<&str>> = pages
                .iter()
                .map(|p| p.iter().map(String::as_str).collect())
                .collect();
            let pages: Vec<&[&str]> = lines.iter().map(Vec::as_slice).collect();
            docfixtures::pdf_of(dir, &name, &pages)?
        }
        Format::Docx => {
            let mut paragraphs = prose.lines(30);
            paragraphs[16] = format!("Reference {tag} {}", prose.line());
            let paragraphs: Vec<&str> = paragraphs.iter().map(String::as_str).collect();
            docfixtures::docx_of(dir, &name, &paragraphs)?
        }
        Format::Workbook => workbook_of(dir, &name, &tag, prose)?,
    };
    Ok(Written {
        path: format!("docs/{name}"),
        format,
        tag,
        bytes: std::fs::metadata(&path)?.len(),
        file: path,
    })
}

/// The build: documents written, indexed through the route, measured.
pub(super) async fn build(
    sim: &Sim,
    sizes: &Sizes,
    say: &dyn Fn(String),
) -> anyhow::Result<Vec<Line>> {
    let chatd = Chatd::start(&sim.url(), &[]).await?;
    let client = chatd.client();
    let chat = client.create_chat().await?;
    let docs_dir = chatd.data_dir().join("workspaces").join(&chat).join("docs");
    std::fs::create_dir_all(&docs_dir)?;
    let mut prose = Prose::new(2_000, 15);
    let mut written = Vec::with_capacity(sizes.documents);
    for k in 0..sizes.documents {
        written.push(write_document(&docs_dir, k, &mut prose)?);
    }
    let bytes: u64 = written.iter().map(|w| w.bytes).sum();
    let mut by_format: BTreeMap<Format, usize> = BTreeMap::new();
    for w in &written {
        *by_format.entry(w.format).or_default() += 1;
    }
    // What chatd does to every file before anything else: read and hash.
    let began = Instant::now();
    for w in &written {
        let bytes = std::fs::read(&w.file)?;
        std::hint::black_box(Sha256::digest(&bytes));
    }
    let hashed = began.elapsed();
    let db = chatd.data_dir().join("chat.sqlite3");
    let before = stored(&db)?;
    say(format!(
        "  {} documents written ({:?}), {}; load average {}",
        written.len(),
        by_format,
        mib(bytes),
        loadavg()
    ));

    let last = written.last().context("no documents")?;
    let bound = Duration::from_secs(120).max(Duration::from_millis(500) * sizes.documents as u32);
    let built = until_indexed(&client, &chat, &format!("q={}", last.tag), bound).await?;
    let after = stored(&db)?;
    let read = count(
        &db,
        "SELECT COUNT(*) FROM document_texts WHERE failure IS NULL",
    )?;
    let failed = count(
        &db,
        "SELECT COUNT(*) FROM document_texts WHERE failure IS NOT NULL",
    )?;
    ensure!(
        read == written.len() as u64 && failed == 0,
        "{read} documents read and {failed} failed of {}",
        written.len()
    );
    let text = count(
        &db,
        "SELECT COALESCE(SUM(length(CAST(text AS BLOB))), 0) FROM document_texts",
    )?;
    let indexed = count(
        &db,
        "SELECT COALESCE(SUM(chars), 0) FROM search_files WHERE state = 'text'",
    )?;
    // Each document's own word finds it, on its page or sheet.
    let step = (written.len() / 10).max(1);
    for w in written.iter().step_by(step).chain([last]) {
        let body = search(&client, &chat, &format!("q={}", w.tag)).await?;
        let found = hits(&body);
        ensure!(
            found.len() == 1 && found[0].0 == w.path && found[0].1 == w.format.part(),
            "{} ({}) was found as {found:?}",
            w.tag,
            w.path
        );
    }
    let rate = written.len() as f64 / built.done.as_secs_f64().max(1e-9);
    let index = after.index.saturating_sub(before.index);
    let texts = after.texts.saturating_sub(before.texts);
    say(format!(
        "  indexed in {} ({rate:.0} documents/s; the first answer after {} with {} pending, {} searches in all); \
         the documents {}, their text {} (indexed {}); the search tables {}, document_texts {}",
        secs(built.done),
        secs(built.first),
        built.first_pending,
        built.searches,
        mib(bytes),
        mib(text),
        mib(indexed),
        mib(index),
        mib(texts)
    ));
    let n = written.len();
    let mix = format!(
        "{} PDF of 3 pages, {} DOCX, {} XLSX",
        by_format.get(&Format::Pdf).unwrap_or(&0),
        by_format.get(&Format::Docx).unwrap_or(&0),
        by_format.get(&Format::Workbook).unwrap_or(&0)
    );
    let ratio = |a: u64, b: u64| a as f64 / (b.max(1)) as f64;
    Ok(vec![
        Line {
            figure: format!("16. index build, {n} documents ({mix}), first search → pending 0"),
            measured: format!(
                "{} ({rate:.0} documents/s; first answer {} with {} pending)",
                secs(built.done),
                secs(built.first),
                built.first_pending
            ),
            aim: None,
            baseline: Some((
                format!("read + sha-256 of the same {} {}", mib(bytes), ms(hashed)),
                format!(
                    "×{:.0}",
                    ratio(built.done.as_micros() as u64, hashed.as_micros() as u64)
                ),
            )),
        },
        Line {
            figure: format!("16. index size, {n} documents"),
            measured: format!(
                "search tables {} (×{:.1} their text, ×{:.2} the files)",
                mib(index),
                ratio(index, indexed),
                ratio(index, bytes)
            ),
            aim: None,
            baseline: Some((
                format!(
                    "the files {}, their text {}; document_texts keeps it again in {}",
                    mib(bytes),
                    mib(text),
                    mib(texts)
                ),
                format!(
                    "index + texts ×{:.2} the files",
                    ratio(index + texts, bytes)
                ),
            )),
        },
    ])
}
