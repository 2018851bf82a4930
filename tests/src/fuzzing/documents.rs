//! The document readers (`chatd::documents::formats::extract`) on bytes
//! that are mostly real documents damaged at random: a PDF, a workbook, a
//! DOCX, a PPTX, an EPUB and a CSV (docfixtures', and a small workbook made
//! here, written once), with bytes flipped, cut, spliced or doubled; now and
//! then bytes of nothing. Each input goes through every kind's reader, and
//! every kind's preview (the files pane's rows and blocks). A
//! reader answers text or a refusal; a panic is a finding (pdf-extract's own
//! panics are caught page by page inside formats/pdf.rs, so one that gets
//! here escaped that).

use std::sync::OnceLock;

use arbitrary::Unstructured;
use chatd::documents::formats::preview::{preview, PreviewKind, PREVIEW_BYTES};
use chatd::documents::formats::{extract, DocKind, MAX_TEXT};

use super::Verdict;

const KINDS: [DocKind; 7] = [
    DocKind::Pdf,
    DocKind::Workbook,
    DocKind::Docx,
    DocKind::Pptx,
    DocKind::Epub,
    DocKind::Csv,
    DocKind::Tsv,
];

const PREVIEW_KINDS: [PreviewKind; 5] = [
    PreviewKind::Workbook,
    PreviewKind::Csv,
    PreviewKind::Tsv,
    PreviewKind::Docx,
    PreviewKind::Pptx,
];

/// The real documents inputs start from, made once a process.
fn seeds() -> &'static [Vec<u8>] {
    static SEEDS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    SEEDS.get_or_init(|| match write_seeds() {
        Ok(seeds) => seeds,
        Err(err) => {
            // Without them the target still runs on bytes of nothing.
            eprintln!("fuzz documents: no seed documents ({err:#})");
            Vec::new()
        }
    })
}

fn write_seeds() -> anyhow::Result<Vec<Vec<u8>>> {
    use crate::docfixtures;
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    let mut seeds = Vec::new();
    for path in [
        docfixtures::pdf(d)?,
        docfixtures::docx(d)?,
        docfixtures::pptx(d)?,
        docfixtures::epub(d)?,
        docfixtures::csv(d)?,
    ] {
        seeds.push(std::fs::read(path)?);
    }
    seeds.push(small_workbook()?);
    Ok(seeds)
}

/// A sheet with a date, a boolean and a formula: docfixtures' workbook has
/// a 2,100 × 52 grid, which would make every input slow to read.
fn small_workbook() -> anyhow::Result<Vec<u8>> {
    use rust_xlsxwriter::{DocProperties, ExcelDateTime, Format, Formula, Workbook};
    let mut book = Workbook::new();
    // A fixed creation time: the same bytes in every process, so an input
    // replays as it failed.
    let made = ExcelDateTime::from_ymd(2026, 1, 1)?;
    book.set_properties(&DocProperties::new().set_creation_datetime(&made));
    let date = Format::new().set_num_format("yyyy-mm-dd");
    let sheet = book.add_worksheet().set_name("Summary")?;
    sheet.write_string(0, 0, "Hosting")?;
    sheet.write_number(0, 1, 42)?;
    sheet.write_datetime_with_format(0, 2, ExcelDateTime::from_ymd(2026, 3, 1)?, &date)?;
    sheet.write_boolean(0, 3, true)?;
    sheet.write_formula(1, 1, Formula::new("=B1*2").set_result("84"))?;
    book.add_worksheet()
        .set_name("Acme")?
        .write_string(0, 0, "Acme")?;
    Ok(book.save_to_buffer()?)
}

/// A seed damaged a few times, or (one in eight) bytes of nothing.
fn input(u: &mut Unstructured) -> Vec<u8> {
    let seeds = seeds();
    if seeds.is_empty() || u.ratio(1, 8).unwrap_or(true) {
        return u.bytes(u.len()).map(<[u8]>::to_vec).unwrap_or_default();
    }
    let mut bytes = u.choose(seeds).cloned().unwrap_or_default();
    let damages = u.int_in_range(0..=4).unwrap_or(0);
    for _ in 0..damages {
        if bytes.is_empty() {
            break;
        }
        let at = u.choose_index(bytes.len()).unwrap_or(0);
        match u.int_in_range(0..=4).unwrap_or(0) {
            0 => {
                let end = (at + u.int_in_range(1..=8).unwrap_or(1)).min(bytes.len());
                for byte in &mut bytes[at..end] {
                    *byte ^= u.arbitrary::<u8>().unwrap_or(0xff).max(1);
                }
            }
            1 => bytes.truncate(at),
            2 => {
                let most = u.len().min(64);
                let n = u.int_in_range(0..=most).unwrap_or(0);
                let piece = u.bytes(n).map(<[u8]>::to_vec).unwrap_or_default();
                bytes.splice(at..at, piece);
            }
            3 => {
                let end = (at + u.int_in_range(1..=256).unwrap_or(1)).min(bytes.len());
                bytes.drain(at..end);
            }
            _ => {
                // A stretch said twice: lengths and offsets no longer agree.
                let end = (at + u.int_in_range(1..=512).unwrap_or(1)).min(bytes.len());
                let copy = bytes[at..end].to_vec();
                bytes.splice(end..end, copy);
            }
        }
    }
    bytes
}

/// Every kind's reader on the input: text within its bound whose parts are
/// in order inside it, or a refusal; never a panic.
pub(super) fn documents(u: &mut Unstructured) -> Verdict {
    let bytes = input(u);
    for kind in KINDS {
        let Ok(out) = extract(kind, &bytes) else {
            continue;
        };
        if out.text.len() > MAX_TEXT {
            return Err(format!(
                "{kind:?}: {} bytes of text, over the {MAX_TEXT} it is cut at",
                out.text.len()
            ));
        }
        let mut last = None;
        for part in &out.parts {
            if part.start > out.text.len() || !out.text.is_char_boundary(part.start) {
                return Err(format!(
                    "{kind:?}: part {:?} starts at {}, not a character of its {} bytes of text",
                    part.label,
                    part.start,
                    out.text.len()
                ));
            }
            if last.is_some_and(|l| part.start < l) {
                return Err(format!(
                    "{kind:?}: part {:?} at {} comes before the one ahead of it ({last:?})",
                    part.label, part.start
                ));
            }
            last = Some(part.start);
        }
    }
    // The files pane's previews read the same bytes their own way (rows
    // and blocks, not text): a preview or a refusal, within its bound.
    for kind in PREVIEW_KINDS {
        let Ok(shown) = preview(kind, &bytes) else {
            continue;
        };
        let json = serde_json::to_vec(&shown).map_err(|e| format!("{kind:?}: {e}"))?;
        // The bound counts text; the JSON adds its quotes and brackets.
        if json.len() > 2 * PREVIEW_BYTES {
            return Err(format!(
                "{kind:?}: a preview of {} bytes of JSON, past its {PREVIEW_BYTES} bytes of text",
                json.len()
            ));
        }
    }
    Ok(())
}
