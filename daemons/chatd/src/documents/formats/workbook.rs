//! Workbooks (.xlsx, .xlsm, .ods by their zip, .xls by its OLE file), read
//! by calamine sheet by sheet under `## Sheet <name>`: rows as tab-separated
//! cells, each cell as a person sees it (dates in ISO form, TRUE/FALSE, a
//! formula's cached result), cut at [`SHEET_ROWS`] × [`SHEET_COLS`].
//! [`open`] and [`cell`] serve a preview as well.

use std::io::Cursor;

use calamine::{Data, Range, Reader, Sheets};

use super::zipcheck::{self, OLE_MAGIC};
use super::{
    cause, grouped, one_line, Builder, DocKind, Extracted, Refusal, SHEET_COLS, SHEET_ROWS,
};

pub(super) fn read(bytes: &[u8]) -> Result<Extracted, Refusal> {
    let mut sheets = open(bytes)?;
    let mut out = Builder::default();
    for name in sheets.sheet_names() {
        let range = match sheets.worksheet_range(&name) {
            Ok(range) => range,
            Err(e) => {
                out.part(format!("sheet {name}"), &format!("## Sheet {name}"));
                out.note(format!("sheet {name} could not be read ({})", cause(e)));
                continue;
            }
        };
        sheet(&mut out, &name, &range);
    }
    Ok(out.finish())
}

/// The workbook in `bytes`, after the checks: a zip that holds a workbook
/// part and is no bomb, or an OLE file that is not an encrypted package.
pub(super) fn open(bytes: &[u8]) -> Result<Sheets<Cursor<&[u8]>>, Refusal> {
    if zipcheck::is_zip(bytes) {
        let archive = zipcheck::open(bytes, DocKind::Workbook)?;
        let known = ["xl/workbook.xml", "xl/workbook.bin", "content.xml"];
        let mut found = false;
        for part in known {
            found |= archive.index_for_name(part).is_some();
        }
        if !found {
            return Err(Refusal::NotWhatItSays(DocKind::Workbook.word().into()));
        }
    } else if zipcheck::is_encrypted_office(bytes) {
        return Err(Refusal::Encrypted);
    } else if !bytes.starts_with(OLE_MAGIC) {
        return Err(Refusal::NotWhatItSays(DocKind::Workbook.word().into()));
    }
    calamine::open_workbook_auto_from_rs(Cursor::new(bytes)).map_err(refusal)
}

fn refusal(e: calamine::Error) -> Refusal {
    let password = matches!(
        &e,
        calamine::Error::Xls(calamine::XlsError::Password)
            | calamine::Error::Xlsx(calamine::XlsxError::Password)
            | calamine::Error::Ods(calamine::OdsError::Password)
    );
    if password {
        Refusal::Encrypted
    } else {
        Refusal::Damaged(cause(e))
    }
}

/// One sheet: its mark, its rows, and a note when the cut left some out.
/// Row and column numbers in the note are the sheet's own (1-based).
fn sheet(out: &mut Builder, name: &str, range: &Range<Data>) {
    out.part(format!("sheet {name}"), &format!("## Sheet {name}"));
    let (Some((first_row, first_col)), Some((last_row, last_col))) = (range.start(), range.end())
    else {
        return;
    };
    for row in range.rows().take(SHEET_ROWS) {
        let kept = &row[..row.len().min(SHEET_COLS)];
        let used = kept
            .iter()
            .rposition(|c| !matches!(c, Data::Empty))
            .map_or(0, |i| i + 1);
        let cells: Vec<String> = kept[..used].iter().map(cell).collect();
        out.line(&cells.join("\t"));
    }
    let rows_cut = range.height() > SHEET_ROWS;
    let cols_cut = range.width() > SHEET_COLS;
    let number = |n: u32, skip: usize| grouped(n as usize + skip + 1);
    let rows = format!(
        "rows {} to {}",
        number(first_row, SHEET_ROWS),
        number(last_row, 0)
    );
    let cols = format!(
        "columns {} to {}",
        number(first_col, SHEET_COLS),
        number(last_col, 0)
    );
    let left_out = match (rows_cut, cols_cut) {
        (true, true) => format!("{rows} and {cols}"),
        (true, false) => rows,
        (false, true) => cols,
        (false, false) => return,
    };
    out.note(format!("sheet {name}: {left_out} left out"));
}

/// A cell as a person reads it.
pub(super) fn cell(data: &Data) -> String {
    match data {
        Data::Empty => String::new(),
        Data::String(text) => one_line(text),
        Data::Int(n) => n.to_string(),
        Data::Float(x) => x.to_string(),
        Data::Bool(true) => "TRUE".into(),
        Data::Bool(false) => "FALSE".into(),
        Data::DateTime(when) if when.is_duration() => duration(when.as_f64()),
        Data::DateTime(when) => {
            let (y, mo, d, h, mi, s, _ms) = when.to_ymd_hms_milli();
            if when.as_f64() < 1.0 {
                // A time of day with no date (Excel's day 0).
                format!("{h:02}:{mi:02}:{s:02}")
            } else if (h, mi, s) == (0, 0, 0) {
                format!("{y:04}-{mo:02}-{d:02}")
            } else {
                format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}")
            }
        }
        Data::DateTimeIso(text) | Data::DurationIso(text) => text.clone(),
        Data::Error(e) => e.to_string(),
    }
}

/// A duration in days as `[h]:mm:ss`, as a spreadsheet shows `[h]:mm:ss`.
fn duration(days: f64) -> String {
    // Whole seconds; a duration past i64's seconds is no real sheet's.
    #[allow(clippy::cast_possible_truncation)]
    let total = (days * 86_400.0).round() as i64;
    let sign = if total < 0 { "-" } else { "" };
    let total = total.unsigned_abs();
    format!(
        "{sign}{}:{:02}:{:02}",
        total / 3600,
        total / 60 % 60,
        total % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use calamine::{ExcelDateTime, ExcelDateTimeType};

    fn date(serial: f64) -> Data {
        Data::DateTime(ExcelDateTime::new(
            serial,
            ExcelDateTimeType::DateTime,
            false,
        ))
    }

    #[test]
    fn cells_read_as_a_person_sees_them() {
        assert_eq!(cell(&date(46_082.0)), "2026-03-01");
        assert_eq!(cell(&date(46_082.5)), "2026-03-01 12:00:00");
        assert_eq!(cell(&date(0.25)), "06:00:00");
        assert_eq!(cell(&Data::Float(84.0)), "84");
        assert_eq!(cell(&Data::Float(2.5)), "2.5");
        assert_eq!(cell(&Data::Bool(true)), "TRUE");
        assert_eq!(cell(&Data::String("a\tb\nc".into())), "a b c");
        let hours = Data::DateTime(ExcelDateTime::new(1.5, ExcelDateTimeType::TimeDelta, false));
        assert_eq!(cell(&hours), "36:00:00");
    }
}
