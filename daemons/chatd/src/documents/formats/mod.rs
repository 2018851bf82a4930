//! Reading documents into text: PDF, workbooks, Word documents, slide
//! decks, EPUB and CSV/TSV. Runs only inside the extraction helper
//! process (`documents::helper`): these parsers take untrusted bytes, and a
//! panic, a loop or a blow-up here costs that process, never chatd.
//!
//! The text marks where each part starts (`## Page 3`, `## Sheet Costs`,
//! `## Slide 2: Title`, `## Chapter 1: Title`) and [`Extracted::parts`]
//! says where in the text each mark is, so a search hit can name its page.
//! [`preview`] makes of the same readers what the files pane shows.

mod docx;
mod epub;
mod ooxml;
mod pdf;
mod pptx;
pub mod preview;
mod table;
mod workbook;
mod zipcheck;

use serde::{Deserialize, Serialize};

/// The largest document read, in bytes.
pub const MAX_INPUT: u64 = 50 << 20;
/// A sheet (or a CSV/TSV table) is read to this many rows …
pub const SHEET_ROWS: usize = 2_000;
/// … and this many columns; a note says what the cut left out.
pub const SHEET_COLS: usize = 50;
/// The most text one document gives; a note says where it was cut.
pub const MAX_TEXT: usize = 8 << 20;

/// The kinds of document tandem reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DocKind {
    Pdf,
    /// .xlsx, .xlsm, .xls, .ods (calamine reads all four).
    Workbook,
    Docx,
    Pptx,
    Epub,
    Csv,
    Tsv,
}

impl DocKind {
    /// The kind a file's name says (its extension, any case).
    pub fn of(name: &str) -> Option<DocKind> {
        let ext = name.rsplit_once('.')?.1.to_ascii_lowercase();
        Some(match ext.as_str() {
            "pdf" => DocKind::Pdf,
            "xlsx" | "xlsm" | "xls" | "ods" => DocKind::Workbook,
            "docx" => DocKind::Docx,
            "pptx" => DocKind::Pptx,
            "epub" => DocKind::Epub,
            "csv" => DocKind::Csv,
            "tsv" | "tab" => DocKind::Tsv,
            _ => return None,
        })
    }

    /// The kind in words, for what the model and the person read.
    pub fn word(self) -> &'static str {
        match self {
            DocKind::Pdf => "PDF",
            DocKind::Workbook => "workbook",
            DocKind::Docx => "Word document",
            DocKind::Pptx => "slide deck",
            DocKind::Epub => "EPUB book",
            DocKind::Csv => "CSV table",
            DocKind::Tsv => "TSV table",
        }
    }
}

/// What a document reads as.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extracted {
    pub text: String,
    /// Each part's mark in `text`, in order.
    pub parts: Vec<Part>,
    /// What the reading left out or could not read, one line each
    /// ("page 4 has no text layer: a probable scan", "sheet Data: rows
    /// 2,001 to 9,000 left out").
    pub notes: Vec<String>,
}

/// One page, sheet, slide or chapter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    /// "page 3", "sheet Costs", "slide 2", "chapter 1".
    pub label: String,
    /// The byte offset in [`Extracted::text`] where its mark line starts.
    pub start: usize,
}

/// Why a document could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum Refusal {
    /// The bytes are not the kind the name says (a `.pdf` that is a zip).
    #[error("is not a {0} (its bytes are something else)")]
    NotWhatItSays(String),
    #[error("is protected with a password")]
    Encrypted,
    /// An archive that unpacks to far more than it weighs.
    #[error("unpacks to more than it may ({0})")]
    Bomb(String),
    #[error("is damaged ({0})")]
    Damaged(String),
}

/// Reads `bytes` as a document of `kind`.
pub fn extract(kind: DocKind, bytes: &[u8]) -> Result<Extracted, Refusal> {
    let mut out = match kind {
        DocKind::Pdf => pdf::read(bytes)?,
        DocKind::Workbook => workbook::read(bytes)?,
        DocKind::Docx => docx::read(bytes)?,
        DocKind::Pptx => pptx::read(bytes)?,
        DocKind::Epub => epub::read(bytes)?,
        DocKind::Csv => table::read(bytes, table::Delimiter::Comma)?,
        DocKind::Tsv => table::read(bytes, table::Delimiter::Tab)?,
    };
    cut_to(&mut out, MAX_TEXT);
    Ok(out)
}

/// Cuts `out.text` to at most `max` bytes, at the last line end before the
/// bound when there is one, dropping the parts that start past the cut.
fn cut_to(out: &mut Extracted, max: usize) {
    let total = out.text.len();
    if total <= max {
        return;
    }
    let mut end = max;
    while !out.text.is_char_boundary(end) {
        end -= 1;
    }
    if let Some(line_end) = out.text[..end].rfind('\n') {
        end = line_end + 1;
    }
    out.text.truncate(end);
    out.parts.retain(|p| p.start < end);
    let at = match out.parts.last() {
        Some(part) => format!(" in {}", part.label),
        None => String::new(),
    };
    out.notes.push(format!(
        "the text stops{at} at {} of its {} bytes: the rest is left out",
        grouped(end),
        grouped(total)
    ));
}

/// A count with thousands separators, as the notes show it ("2,001").
pub(crate) fn grouped(n: usize) -> String {
    crate::tools::fit::commas(n as u64)
}

/// The text of a document as it is built: parts each under a mark line,
/// separated by a blank line.
#[derive(Default)]
struct Builder {
    text: String,
    parts: Vec<Part>,
    notes: Vec<String>,
}

impl Builder {
    /// Starts a part: its `mark` line, recorded as where `label` starts.
    fn part(&mut self, label: String, mark: &str) {
        if !self.text.is_empty() {
            if !self.text.ends_with('\n') {
                self.text.push('\n');
            }
            self.text.push('\n');
        }
        self.parts.push(Part {
            label,
            start: self.text.len(),
        });
        self.line(mark);
    }

    /// One line of text (a line end is added).
    fn line(&mut self, line: &str) {
        self.text.push_str(line);
        self.text.push('\n');
    }

    fn note(&mut self, note: String) {
        self.notes.push(note);
    }

    fn finish(mut self) -> Extracted {
        while self.text.ends_with("\n\n") {
            self.text.pop();
        }
        Extracted {
            text: self.text,
            parts: self.parts,
            notes: self.notes,
        }
    }
}

/// A cell's text on one line: tabs and line breaks inside it would read as
/// more cells or rows.
fn one_line(cell: &str) -> String {
    cell.trim()
        .chars()
        .map(|c| {
            if matches!(c, '\t' | '\n' | '\r') {
                ' '
            } else {
                c
            }
        })
        .collect()
}

/// A short cause for [`Refusal::Damaged`]: a parser's message, cut so the
/// one line a person reads stays one line.
fn cause(message: impl std::fmt::Display) -> String {
    const MAX: usize = 160;
    let text = one_line(&message.to_string());
    match text.char_indices().nth(MAX) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_text_is_cut_at_a_line_end_with_a_note() {
        let mut out = Extracted {
            text: "## Page 1\nabc\n\n## Page 2\ndefgh\n".into(),
            parts: vec![
                Part {
                    label: "page 1".into(),
                    start: 0,
                },
                Part {
                    label: "page 2".into(),
                    start: 15,
                },
            ],
            notes: vec![],
        };
        cut_to(&mut out, 12);
        assert_eq!(out.text, "## Page 1\n");
        assert_eq!(out.parts.len(), 1);
        assert_eq!(
            out.notes,
            ["the text stops in page 1 at 10 of its 31 bytes: the rest is left out"]
        );
    }
}
