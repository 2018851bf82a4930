//! `chatd::documents::formats::extract` on each fixture: the text where it
//! matters exactly (page marks, the scan line, sheet rows with dates and
//! formula results, the DOCX table, slide order and notes, chapters), the
//! parts and notes, and the refusals of bad files.

use std::path::{Path, PathBuf};

use anyhow::Result;
use chatd::documents::formats::{extract, DocKind, Extracted, Refusal, MAX_INPUT};
use tandem_tests::docfixtures;

/// Writes a fixture into a fresh folder and reads it by its name's kind.
fn read_fixture(write: fn(&Path) -> Result<PathBuf>) -> Result<Extracted, Refusal> {
    let dir = tempfile::tempdir().expect("a temp folder");
    let path = write(dir.path()).expect("the fixture is written");
    let kind = DocKind::of(&path.to_string_lossy()).expect("a document's name");
    extract(kind, &std::fs::read(&path).expect("the fixture reads back"))
}

fn read_ok(write: fn(&Path) -> Result<PathBuf>) -> Extracted {
    read_fixture(write).expect("the document reads")
}

fn labels(out: &Extracted) -> Vec<&str> {
    out.parts.iter().map(|p| p.label.as_str()).collect()
}

/// Each part starts at its mark line.
fn check_marks(out: &Extracted, mark: &str) {
    for part in &out.parts {
        assert!(
            out.text[part.start..].starts_with(mark),
            "{} starts at {}, where the text is {:?}",
            part.label,
            part.start,
            &out.text[part.start..(part.start + 30).min(out.text.len())]
        );
    }
}

#[test]
fn a_pdf_reads_page_by_page_and_a_scanned_page_is_named() {
    let out = read_ok(docfixtures::pdf);
    assert_eq!(
        out.text,
        "## Page 1\nQuarterly report\nRevenue grew in every region.\n\n\
         ## Page 2\nCosts\nTravel and hosting stayed flat.\n\n\
         ## Page 3\nAcme invoice 2026-117\nTotal due: 4,200 EUR by 2026-03-31.\n\n\
         ## Page 4\n[no text layer: a probable scan]\n"
    );
    assert_eq!(labels(&out), ["page 1", "page 2", "page 3", "page 4"]);
    check_marks(&out, "## Page ");
    assert_eq!(out.notes, ["page 4 has no text layer: a probable scan"]);
    let page_3 = &out.text[out.parts[2].start..out.parts[3].start];
    assert!(page_3.contains("Acme invoice"), "{page_3:?}");
}

#[test]
fn a_workbook_reads_sheet_by_sheet_with_dates_booleans_and_formula_results() {
    let out = read_ok(docfixtures::workbook);
    let summary = "## Sheet Summary\n\
                   Item\tAmount\tDate\tPaid\n\
                   Hosting\t42\t2026-03-01\tTRUE\n\
                   Travel\t12.5\t2026-03-02 14:30:00\tFALSE\n\
                   Total\t54.5\t\tFALSE\n\
                   Twice the hosting\t84\n\n\
                   ## Sheet Customers\n\
                   Customer\tOwes\n\
                   Acme\t4200\n\
                   Globex\t0\n\n\
                   ## Sheet Data\n";
    assert!(out.text.starts_with(summary), "{:?}", &out.text[..400]);
    assert_eq!(
        labels(&out),
        ["sheet Summary", "sheet Customers", "sheet Data"]
    );
    check_marks(&out, "## Sheet ");
    let data = &out.text[out.parts[2].start..];
    let rows: Vec<&str> = data.lines().skip(1).collect();
    assert_eq!(rows.len(), chatd::documents::formats::SHEET_ROWS);
    let last = rows.last().expect("rows");
    assert!(last.starts_with("199900\t199901\t"), "{last}");
    assert!(last.ends_with("\t199949"), "{last}");
    assert_eq!(
        out.notes,
        ["sheet Data: rows 2,001 to 2,100 and columns 51 to 52 left out"]
    );
}

#[test]
fn a_docx_reads_headings_lists_paragraphs_and_its_table() {
    let out = read_ok(docfixtures::docx);
    assert_eq!(
        out.text,
        "# Supplier review\n\
         # Findings\n\
         Acme & Globex both delivered late.\n\
         ## Actions\n\
         - Call Acme\n\
         - Renew the Globex contract\n\
         Supplier\tDays late\tPenalty\n\
         Acme\t12\t600 EUR\n\
         Globex\t3 (weather)\n\
         ### Next review\n\
         In\tJune.\n"
    );
    assert_eq!(labels(&out), ["document"]);
    assert!(out.notes.is_empty(), "{:?}", out.notes);
}

#[test]
fn a_pptx_reads_slides_in_presentation_order_with_their_notes() {
    let out = read_ok(docfixtures::pptx);
    assert_eq!(
        out.text,
        "## Slide 1: Acme plan 2026\nBoard meeting\nNotes: Welcome everyone.\n\n\
         ## Slide 2: Numbers\nQuarter\tRevenue\nQ1\t1.2M\nNotes: Say the Q1 figure twice.\n\n\
         ## Slide 3: Next steps\nHire two engineers\nShip in May\n"
    );
    assert_eq!(labels(&out), ["slide 1", "slide 2", "slide 3"]);
    check_marks(&out, "## Slide ");
}

#[test]
fn an_epub_reads_its_spine_in_order_as_chapters() {
    let out = read_ok(docfixtures::epub);
    assert_eq!(
        out.text,
        "## Chapter 1: The Beginning\n# The Beginning\n\n\
         Acme was founded in a garage.\n\nIt sold anvils.\n\n\
         ## Chapter 2: Growth\nSales doubled & then tripled.\n\nThe end.\n"
    );
    assert_eq!(labels(&out), ["chapter 1", "chapter 2"]);
    check_marks(&out, "## Chapter ");
}

#[test]
fn a_csv_reads_as_tab_separated_rows() {
    let out = read_ok(docfixtures::csv);
    assert_eq!(
        out.text,
        "name\tamount\tnote\nAcme\t4200\tlate, again\nGlobex\t12\ttwo lines\nInitech\n"
    );
    assert!(out.parts.is_empty());
    assert!(out.notes.is_empty());
}

#[test]
fn a_long_csv_is_cut_with_a_note() {
    let mut csv = String::new();
    for row in 0..2_345 {
        let cells: Vec<String> = (0..55).map(|col| format!("r{row}c{col}")).collect();
        csv.push_str(&cells.join(","));
        csv.push('\n');
    }
    let out = extract(DocKind::Csv, csv.as_bytes()).expect("a CSV");
    assert_eq!(out.text.lines().count(), 2_000);
    assert!(
        out.text.ends_with("\tr1999c49\n"),
        "{:?}",
        &out.text[out.text.len() - 40..]
    );
    assert_eq!(
        out.notes,
        ["table: rows 2,001 to 2,345 and columns 51 to 55 left out"]
    );
}

#[test]
fn a_truncated_pdf_is_damaged() {
    let refused = read_fixture(docfixtures::truncated_pdf).expect_err("refused");
    assert!(matches!(refused, Refusal::Damaged(_)), "{refused:?}");
}

#[test]
fn a_zip_bomb_is_refused_before_it_unpacks() {
    let refused = read_fixture(docfixtures::zip_bomb).expect_err("refused");
    assert_eq!(
        refused,
        Refusal::Bomb("its entries declare more than 256 MiB unpacked".into())
    );
}

#[test]
fn an_entry_that_unpacks_past_its_declared_size_is_a_bomb() {
    let refused = read_fixture(docfixtures::lying_zip).expect_err("refused");
    assert_eq!(
        refused,
        Refusal::Bomb("word/document.xml unpacks past the 4,096 bytes it declares".into())
    );
}

#[test]
fn bytes_of_another_kind_are_not_what_the_name_says() {
    let dir = tempfile::tempdir().expect("a temp folder");
    let docx = std::fs::read(docfixtures::docx(dir.path()).expect("a docx")).expect("bytes");
    let pdf = std::fs::read(docfixtures::pdf(dir.path()).expect("a pdf")).expect("bytes");
    let refused = |kind, bytes: &[u8]| extract(kind, bytes).expect_err("refused");
    assert_eq!(
        refused(DocKind::Pdf, &docx),
        Refusal::NotWhatItSays("PDF".into())
    );
    for kind in [
        DocKind::Docx,
        DocKind::Pptx,
        DocKind::Epub,
        DocKind::Workbook,
        DocKind::Csv,
    ] {
        assert_eq!(
            refused(kind, &pdf),
            Refusal::NotWhatItSays(kind.word().into())
        );
    }
    // A zip, but not of a slide deck.
    assert_eq!(
        refused(DocKind::Pptx, &docx),
        Refusal::NotWhatItSays("slide deck".into())
    );
}

#[test]
fn the_large_document_is_past_the_input_limit() {
    let dir = tempfile::tempdir().expect("a temp folder");
    let path = docfixtures::big_pdf(dir.path()).expect("the large PDF");
    let len = std::fs::metadata(&path).expect("its size").len();
    assert!(
        len > MAX_INPUT && len < MAX_INPUT + (20 << 20),
        "{len} bytes"
    );
    let head = std::fs::read(&path).expect("bytes");
    assert!(head.starts_with(b"%PDF-"));
}
