//! CSV and TSV: rows as tab-separated cells (quoted fields, separators and
//! line breaks inside them, rows of any length), cut at [`SHEET_ROWS`] ×
//! [`SHEET_COLS`] like a sheet.

use super::{
    cause, grouped, one_line, Builder, DocKind, Extracted, Refusal, SHEET_COLS, SHEET_ROWS,
};

/// What separates a table's cells.
#[derive(Clone, Copy)]
pub(super) enum Delimiter {
    Comma,
    Tab,
}

impl Delimiter {
    fn byte(self) -> u8 {
        match self {
            Delimiter::Comma => b',',
            Delimiter::Tab => b'\t',
        }
    }

    fn kind(self) -> DocKind {
        match self {
            Delimiter::Comma => DocKind::Csv,
            Delimiter::Tab => DocKind::Tsv,
        }
    }
}

/// How much of the start is looked at for bytes no text has.
const SNIFF: usize = 8 << 10;

pub(super) fn read(bytes: &[u8], delimiter: Delimiter) -> Result<Extracted, Refusal> {
    // A NUL is in no text table and in nearly every binary file.
    if bytes[..bytes.len().min(SNIFF)].contains(&0) {
        return Err(Refusal::NotWhatItSays(delimiter.kind().word().into()));
    }
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .delimiter(delimiter.byte())
        .from_reader(bytes);
    let mut out = Builder::default();
    let mut rows = 0usize;
    let mut widest = 0usize;
    let mut record = csv::ByteRecord::new();
    loop {
        match reader.read_byte_record(&mut record) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => {
                out.note(format!(
                    "the table stops at row {}: {}",
                    grouped(rows + 1),
                    cause(e)
                ));
                break;
            }
        }
        rows += 1;
        widest = widest.max(record.len());
        if rows > SHEET_ROWS {
            continue;
        }
        let mut cells: Vec<String> = record
            .iter()
            .take(SHEET_COLS)
            .map(|field| one_line(&String::from_utf8_lossy(field)))
            .collect();
        while cells.last().is_some_and(String::is_empty) {
            cells.pop();
        }
        out.line(&cells.join("\t"));
    }
    let rows_cut = (rows > SHEET_ROWS)
        .then(|| format!("rows {} to {}", grouped(SHEET_ROWS + 1), grouped(rows)));
    let cols_cut = (widest > SHEET_COLS)
        .then(|| format!("columns {} to {}", grouped(SHEET_COLS + 1), grouped(widest)));
    let left_out = match (rows_cut, cols_cut) {
        (Some(rows), Some(cols)) => Some(format!("{rows} and {cols}")),
        (one, other) => one.or(other),
    };
    if let Some(left_out) = left_out {
        out.note(format!("table: {left_out} left out"));
    }
    Ok(out.finish())
}
