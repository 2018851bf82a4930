//! Previews for the files pane: a workbook, a CSV/TSV table, a Word file or
//! a slide deck as the structure a person looks at (sheets of rows, blocks,
//! slides) rather than the text the model reads. Made by the same readers
//! as the text and, like it, only inside the reader process
//! (`chatd read-document --preview <kind>`). This module holds the JSON
//! shape the route answers (docs/api.md "Previews").
//!
//! A preview is bounded: [`PREVIEW_ROWS`] rows and [`SHEET_COLS`] columns a
//! sheet, [`CELL_CHARS`] characters a cell, and [`PREVIEW_BYTES`] of text in
//! all; what a bound leaves out is said (`cut`, `notes`).

use calamine::{Data, Range, Reader};
use serde::{Deserialize, Serialize};

use super::{docx, grouped, pptx, table, workbook, DocKind, Refusal, SHEET_COLS};

/// The rows of a sheet a preview shows.
pub const PREVIEW_ROWS: usize = 200;
/// The most characters of one cell shown; a longer one ends in `…`.
pub const CELL_CHARS: usize = 1_000;
/// The most text (in bytes, a cell or a block counted with its JSON
/// quotes) one preview holds: a page renders it at once.
pub const PREVIEW_BYTES: usize = 2 << 20;

tandem_shared::words! {
    /// The kinds of file a preview is made of.
    pub enum PreviewKind("preview kind") {
        /// .xlsx, .xlsm, .xls, .ods.
        Workbook => "workbook",
        Csv => "csv",
        Tsv => "tsv",
        Docx => "docx",
        Pptx => "pptx",
    }
}

impl PreviewKind {
    /// The extensions of the files a preview is made of, for a refusal.
    pub const EXTENSIONS: &'static str =
        ".xlsx, .xlsm, .xls, .ods, .csv, .tsv, .tab, .docx and .pptx";

    /// The preview kind of a file's name (its extension, any case).
    pub fn of(name: &str) -> Option<PreviewKind> {
        Some(match DocKind::of(name)? {
            DocKind::Workbook => PreviewKind::Workbook,
            DocKind::Csv => PreviewKind::Csv,
            DocKind::Tsv => PreviewKind::Tsv,
            DocKind::Docx => PreviewKind::Docx,
            DocKind::Pptx => PreviewKind::Pptx,
            DocKind::Pdf | DocKind::Epub => return None,
        })
    }
}

/// What a preview shows, and what it leaves out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preview {
    #[serde(flatten)]
    pub content: Content,
    /// Whether a bound left anything out (a sheet's rows or columns, the
    /// blocks or slides past [`PREVIEW_BYTES`]).
    pub cut: bool,
    /// What could not be read or was left out, a line each.
    pub notes: Vec<String>,
}

/// The structure shown, by `view`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "view", rename_all = "snake_case")]
pub enum Content {
    /// A workbook's sheets, or a CSV/TSV table as one sheet.
    Sheets { sheets: Vec<Sheet> },
    /// A Word document's blocks in reading order.
    Document { blocks: Vec<Block> },
    /// A deck's slides in presentation order.
    Slides { slides: Vec<Slide> },
}

/// One sheet: its first rows, cells as a person reads them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sheet {
    /// The sheet's name; empty for a CSV/TSV table.
    pub name: String,
    /// From the sheet's first used row and column; a row's empty cells at
    /// its end are left out.
    pub rows: Vec<Vec<String>>,
    pub total_rows: usize,
    pub total_columns: usize,
    /// Whether rows, columns or a cell's text were left out.
    pub cut: bool,
}

/// A block of a Word document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    /// Level 1 (Title, Heading 1) to 3.
    Heading {
        level: usize,
        text: String,
    },
    /// An item of a list, level 0 at the left.
    ListItem {
        level: usize,
        text: String,
    },
    /// A paragraph; its line breaks are `\n`, tabs `\t`.
    Paragraph {
        text: String,
    },
    Table {
        rows: Vec<Vec<String>>,
    },
}

/// A slide: its title, its text (a paragraph a line) and its notes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slide {
    pub number: usize,
    pub title: Option<String>,
    pub text: String,
    pub notes: Option<String>,
}

/// Makes the preview of `bytes`, a file of `kind`.
pub fn preview(kind: PreviewKind, bytes: &[u8]) -> Result<Preview, Refusal> {
    let mut budget = Budget {
        left: PREVIEW_BYTES,
        notes: Vec::new(),
        cut: false,
    };
    let content = match kind {
        PreviewKind::Workbook => sheets(bytes, &mut budget)?,
        PreviewKind::Csv => delimited(bytes, table::Delimiter::Comma, &mut budget)?,
        PreviewKind::Tsv => delimited(bytes, table::Delimiter::Tab, &mut budget)?,
        PreviewKind::Docx => document(bytes, &mut budget)?,
        PreviewKind::Pptx => slides(bytes, &mut budget)?,
    };
    Ok(Preview {
        content,
        cut: budget.cut,
        notes: budget.notes,
    })
}

/// What is left of [`PREVIEW_BYTES`], and what the preview says of itself.
struct Budget {
    left: usize,
    notes: Vec<String>,
    cut: bool,
}

/// The room a text takes in the JSON: itself, its quotes and a comma.
fn room(text: &str) -> usize {
    text.len() + 3
}

impl Budget {
    /// Takes `room` bytes; false, taking nothing, when they do not fit.
    fn take(&mut self, room: usize) -> bool {
        if room > self.left {
            return false;
        }
        self.left -= room;
        true
    }

    /// The preview stops here: what follows `at` is left out.
    fn stop(&mut self, at: &str) {
        self.left = 0;
        self.cut = true;
        self.notes.push(format!(
            "the preview stops {at}, at its {} MiB of text: the rest is in the download",
            PREVIEW_BYTES >> 20
        ));
    }
}

/// A cell's text within [`CELL_CHARS`]; whether it was cut.
fn cell_text(text: String) -> (String, bool) {
    match text.char_indices().nth(CELL_CHARS) {
        Some((at, _)) => (format!("{}…", &text[..at]), true),
        None => (text, false),
    }
}

/// A row's cells within [`CELL_CHARS`] each; whether one was cut.
fn fit_row(row: Vec<String>) -> (Vec<String>, bool) {
    let mut cut = false;
    let cells = row
        .into_iter()
        .map(|cell| {
            let (cell, was_cut) = cell_text(cell);
            cut |= was_cut;
            cell
        })
        .collect();
    (cells, cut)
}

/// Rows into a sheet while the budget lasts; whether any was left out.
fn keep_rows(
    rows: impl Iterator<Item = Vec<String>>,
    at: &str,
    budget: &mut Budget,
) -> (Vec<Vec<String>>, bool) {
    let mut kept = Vec::new();
    let mut cut = false;
    if budget.left == 0 {
        return (kept, true);
    }
    for row in rows {
        let (row, cell_cut) = fit_row(row);
        if !budget.take(row.iter().map(|c| room(c)).sum::<usize>() + 2) {
            budget.stop(&format!("at row {} of {at}", grouped(kept.len() + 1)));
            return (kept, true);
        }
        cut |= cell_cut;
        kept.push(row);
    }
    (kept, cut)
}

fn sheets(bytes: &[u8], budget: &mut Budget) -> Result<Content, Refusal> {
    let mut book = workbook::open(bytes)?;
    let mut sheets = Vec::new();
    for name in book.sheet_names() {
        match book.worksheet_range(&name) {
            Ok(range) => sheets.push(sheet(name, &range, budget)),
            Err(e) => {
                budget.notes.push(format!(
                    "sheet {name} could not be read ({})",
                    super::cause(e)
                ));
                sheets.push(Sheet {
                    name,
                    rows: Vec::new(),
                    total_rows: 0,
                    total_columns: 0,
                    cut: true,
                });
            }
        }
    }
    Ok(Content::Sheets { sheets })
}

fn sheet(name: String, range: &Range<Data>, budget: &mut Budget) -> Sheet {
    let rows = range.rows().take(PREVIEW_ROWS).map(|row| {
        let kept = &row[..row.len().min(SHEET_COLS)];
        let used = kept
            .iter()
            .rposition(|c| !matches!(c, Data::Empty))
            .map_or(0, |i| i + 1);
        kept[..used].iter().map(workbook::cell).collect()
    });
    let (rows, cut) = keep_rows(rows, &format!("sheet {name}"), budget);
    let (total_rows, total_columns) = (range.height(), range.width());
    Sheet {
        cut: cut || rows.len() < total_rows || total_columns > SHEET_COLS,
        name,
        rows,
        total_rows,
        total_columns,
    }
}

fn delimited(
    bytes: &[u8],
    delimiter: table::Delimiter,
    budget: &mut Budget,
) -> Result<Content, Refusal> {
    let scanned = table::scan(bytes, delimiter, PREVIEW_ROWS)?;
    budget.notes.extend(scanned.stopped);
    let (rows, cut) = keep_rows(scanned.rows.into_iter(), "the table", budget);
    let sheet = Sheet {
        name: String::new(),
        cut: cut || rows.len() < scanned.total_rows || scanned.widest > SHEET_COLS,
        rows,
        total_rows: scanned.total_rows,
        total_columns: scanned.widest,
    };
    Ok(Content::Sheets {
        sheets: vec![sheet],
    })
}

fn document(bytes: &[u8], budget: &mut Budget) -> Result<Content, Refusal> {
    let mut blocks = Vec::new();
    for block in docx::blocks(bytes)? {
        let block = match block {
            docx::Block::Heading { level, text } => Block::Heading { level, text },
            docx::Block::Item { level, text } => Block::ListItem { level, text },
            docx::Block::Paragraph(text) => Block::Paragraph { text },
            docx::Block::Table(rows) => {
                let at = format!("in table {}", blocks.len() + 1);
                let (rows, cut) = keep_rows(rows.into_iter(), &at, budget);
                budget.cut |= cut;
                let stopped = budget.left == 0;
                blocks.push(Block::Table { rows });
                if stopped {
                    break;
                }
                continue;
            }
        };
        let text = match &block {
            Block::Heading { text, .. }
            | Block::ListItem { text, .. }
            | Block::Paragraph { text } => text.as_str(),
            Block::Table { .. } => "",
        };
        if !budget.take(room(text) + 32) {
            budget.stop(&format!("before block {}", grouped(blocks.len() + 1)));
            break;
        }
        blocks.push(block);
    }
    Ok(Content::Document { blocks })
}

fn slides(bytes: &[u8], budget: &mut Budget) -> Result<Content, Refusal> {
    let deck = pptx::deck(bytes)?;
    budget.notes.extend(deck.notes);
    let mut slides = Vec::new();
    for slide in deck.slides {
        let slide = Slide {
            number: slide.number,
            title: slide.title,
            text: slide.lines.join("\n"),
            notes: slide.notes,
        };
        let texts = [
            Some(&slide.text),
            slide.title.as_ref(),
            slide.notes.as_ref(),
        ];
        let needed: usize = texts.iter().flatten().map(|t| room(t)).sum::<usize>() + 64;
        if !budget.take(needed) {
            budget.stop(&format!("before slide {}", slide.number));
            break;
        }
        slides.push(slide);
    }
    Ok(Content::Slides { slides })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_cell_ends_in_an_ellipsis() {
        let (short, cut) = cell_text("abc".into());
        assert_eq!((short.as_str(), cut), ("abc", false));
        let (long, cut) = cell_text("é".repeat(CELL_CHARS + 5));
        assert!(cut);
        assert_eq!(long.chars().count(), CELL_CHARS + 1);
        assert!(long.ends_with('…'));
    }

    #[test]
    fn rows_past_the_budget_are_left_out_with_a_note() {
        let mut budget = Budget {
            left: 20,
            notes: Vec::new(),
            cut: false,
        };
        let rows = vec![
            vec!["abcd".to_string()],
            vec!["efgh".into()],
            vec!["ijkl".into()],
        ];
        let (kept, cut) = keep_rows(rows.into_iter(), "sheet A", &mut budget);
        assert_eq!(kept, [vec!["abcd".to_string()], vec!["efgh".to_string()]]);
        assert!(cut && budget.cut);
        assert_eq!(
            budget.notes,
            ["the preview stops at row 3 of sheet A, at its 2 MiB of text: the rest is in the download"]
        );
    }

    #[test]
    fn kinds_by_name() {
        assert_eq!(PreviewKind::of("a/B.XLSX"), Some(PreviewKind::Workbook));
        assert_eq!(PreviewKind::of("t.tab"), Some(PreviewKind::Tsv));
        assert_eq!(PreviewKind::of("r.pdf"), None);
        assert_eq!(PreviewKind::of("notes.txt"), None);
        tandem_shared::words::check_reads_back::<PreviewKind>();
    }
}
