//! CSV and TSV: rows as tab-separated cells (quoted fields, separators and
//! line breaks inside them, rows of any length), cut at [`SHEET_ROWS`] ×
//! [`SHEET_COLS`] like a sheet; [`scan`] gives the rows themselves, for a
//! preview.

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
    let table = scan(bytes, delimiter, SHEET_ROWS)?;
    let mut out = Builder::default();
    for row in &table.rows {
        out.line(&row.join("\t"));
    }
    if let Some(stopped) = table.stopped {
        out.note(stopped);
    }
    let rows_cut = (table.total_rows > SHEET_ROWS).then(|| {
        format!(
            "rows {} to {}",
            grouped(SHEET_ROWS + 1),
            grouped(table.total_rows)
        )
    });
    let cols_cut = (table.widest > SHEET_COLS).then(|| {
        format!(
            "columns {} to {}",
            grouped(SHEET_COLS + 1),
            grouped(table.widest)
        )
    });
    let left_out = match (rows_cut, cols_cut) {
        (Some(rows), Some(cols)) => Some(format!("{rows} and {cols}")),
        (one, other) => one.or(other),
    };
    if let Some(left_out) = left_out {
        out.note(format!("table: {left_out} left out"));
    }
    Ok(out.finish())
}

/// A table read through: its first rows, how many rows it has and how
/// wide its widest row is.
pub(super) struct Scanned {
    /// The first rows asked for, each cut to [`SHEET_COLS`] cells, the
    /// empty cells at a row's end dropped.
    pub rows: Vec<Vec<String>>,
    pub total_rows: usize,
    pub widest: usize,
    /// Where a broken row stopped the reading, as a note.
    pub stopped: Option<String>,
}

/// Reads every row of the table (to count them), keeping the first `keep`.
pub(super) fn scan(bytes: &[u8], delimiter: Delimiter, keep: usize) -> Result<Scanned, Refusal> {
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
    let mut table = Scanned {
        rows: Vec::new(),
        total_rows: 0,
        widest: 0,
        stopped: None,
    };
    let mut record = csv::ByteRecord::new();
    loop {
        match reader.read_byte_record(&mut record) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => {
                table.stopped = Some(format!(
                    "the table stops at row {}: {}",
                    grouped(table.total_rows + 1),
                    cause(e)
                ));
                break;
            }
        }
        table.total_rows += 1;
        table.widest = table.widest.max(record.len());
        if table.total_rows > keep {
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
        table.rows.push(cells);
    }
    Ok(table)
}
