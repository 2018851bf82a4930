//! Real documents written by the tests into a folder: a PDF with text on
//! three pages and a scanned fourth, a three-sheet workbook with dates,
//! booleans and formulas, a DOCX, a PPTX with notes, an EPUB, a CSV, and
//! the bad ones (a PDF cut in half, a zip bomb, a 60 MiB PDF); and PDFs
//! and DOCX files of words the caller gives (`pdf_of`, `docx_of`).
//!
//! The PDF and workbook come from lopdf and rust_xlsxwriter; the OOXML and
//! EPUB zips are written part by part with the XML each format needs, so
//! the tests know every byte the readers see. Words the search tests look
//! for: "Acme invoice" on page 3 of the PDF, "Acme" in sheet 2.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use lopdf::content::{Content, Operation};
use lopdf::{dictionary, Document, Object, ObjectId, Stream};
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

/// The text of the PDF's pages 1 to 3, a line an element.
pub const PDF_PAGES: [&[&str]; 3] = [
    &["Quarterly report", "Revenue grew in every region."],
    &["Costs", "Travel and hosting stayed flat."],
    &[
        "Acme invoice 2026-117",
        "Total due: 4,200 EUR by 2026-03-31.",
    ],
];

/// The PDF: [`PDF_PAGES`] as text, then a page that is only an image.
pub fn pdf(dir: &Path) -> Result<PathBuf> {
    let path = dir.join("report.pdf");
    let mut doc = pdf_document(&PDF_PAGES, ScanPage::Last, None)?;
    save_pdf(&mut doc, &path)?;
    Ok(path)
}

/// The PDF of [`pdf`] cut in half, as an interrupted download leaves it.
pub fn truncated_pdf(dir: &Path) -> Result<PathBuf> {
    let mut doc = pdf_document(&PDF_PAGES, ScanPage::Last, None)?;
    let mut bytes = Vec::new();
    doc.save_to(&mut bytes).context("writing the PDF")?;
    bytes.truncate(bytes.len() / 2);
    let path = dir.join("cut.pdf");
    std::fs::write(&path, bytes).context("writing cut.pdf")?;
    Ok(path)
}

/// A 60 MiB PDF (past chatd's 50 MiB input limit): one page of text and
/// a 60 MiB image of noise, which no compression would shrink.
pub fn big_pdf(dir: &Path) -> Result<PathBuf> {
    const WIDTH: i64 = 7_680;
    const HEIGHT: i64 = 8_192;
    let mut noise = vec![0u8; 60 << 20];
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    for chunk in noise.chunks_mut(8) {
        // xorshift64: cheap bytes that look random to a compressor.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
    }
    let image = Stream::new(
        dictionary! {
            "Type" => "XObject", "Subtype" => "Image", "Width" => WIDTH, "Height" => HEIGHT,
            "ColorSpace" => "DeviceGray", "BitsPerComponent" => 8,
        },
        noise,
    );
    let mut doc = pdf_document(&[&["A large scan"]], ScanPage::None, Some(image))?;
    let path = dir.join("large.pdf");
    save_pdf(&mut doc, &path)?;
    Ok(path)
}

/// Whether a PDF gets a last page that is only an image.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ScanPage {
    Last,
    None,
}

fn save_pdf(doc: &mut Document, path: &Path) -> Result<()> {
    let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut out = BufWriter::new(file);
    doc.save_to(&mut out).context("writing the PDF")?;
    out.flush().context("writing the PDF")
}

/// A PDF with a page of Helvetica lines for each of `pages`, then (with
/// [`ScanPage::Last`]) a page drawing one grey image and no text; `extra`,
/// an image stream, is drawn small on the first page.
fn pdf_document(pages: &[&[&str]], scan: ScanPage, extra: Option<Stream>) -> Result<Document> {
    let mut doc = Document::with_version("1.5");
    let pages_id = doc.new_object_id();
    let font = doc.add_object(dictionary! {
        "Type" => "Font", "Subtype" => "Type1", "BaseFont" => "Helvetica",
        "Encoding" => "WinAnsiEncoding",
    });
    let extra = extra.map(|image| doc.add_object(image));
    let mut kids: Vec<Object> = Vec::new();
    for (i, lines) in pages.iter().enumerate() {
        let mut ops = vec![
            Operation::new("BT", vec![]),
            Operation::new("Tf", vec!["F1".into(), 14.into()]),
            Operation::new("Td", vec![72.into(), 760.into()]),
            Operation::new("TL", vec![20.into()]),
        ];
        for line in *lines {
            ops.push(Operation::new("Tj", vec![Object::string_literal(*line)]));
            ops.push(Operation::new("T*", vec![]));
        }
        ops.push(Operation::new("ET", vec![]));
        let mut resources = dictionary! { "Font" => dictionary! { "F1" => font } };
        if let (0, Some(image)) = (i, extra) {
            ops.extend(draw_image(72, 72, 100, 100));
            resources.set("XObject", dictionary! { "Im1" => image });
        }
        kids.push(page(&mut doc, pages_id, ops, resources)?.into());
    }
    if scan == ScanPage::Last {
        let image = doc.add_object(gray_image());
        let resources = dictionary! { "XObject" => dictionary! { "Im1" => image } };
        let ops = draw_image(36, 36, 523, 770);
        kids.push(page(&mut doc, pages_id, ops, resources)?.into());
    }
    let count = i64::try_from(kids.len()).context("page count")?;
    doc.objects.insert(
        pages_id,
        Object::Dictionary(dictionary! { "Type" => "Pages", "Kids" => kids, "Count" => count }),
    );
    let catalog = doc.add_object(dictionary! { "Type" => "Catalog", "Pages" => pages_id });
    doc.trailer.set("Root", catalog);
    Ok(doc)
}

/// The operations drawing image `/Im1` at (x, y), w × h points.
fn draw_image(x: i64, y: i64, w: i64, h: i64) -> Vec<Operation> {
    vec![
        Operation::new("q", vec![]),
        Operation::new(
            "cm",
            vec![w.into(), 0.into(), 0.into(), h.into(), x.into(), y.into()],
        ),
        Operation::new("Do", vec!["Im1".into()]),
        Operation::new("Q", vec![]),
    ]
}

/// A 64 × 64 grey gradient, as a scanner's page would be (in small).
fn gray_image() -> Stream {
    let pixels: Vec<u8> = (0..64u32 * 64).map(|i| (i % 251) as u8).collect();
    Stream::new(
        dictionary! {
            "Type" => "XObject", "Subtype" => "Image", "Width" => 64, "Height" => 64,
            "ColorSpace" => "DeviceGray", "BitsPerComponent" => 8,
        },
        pixels,
    )
}

fn page(
    doc: &mut Document,
    parent: ObjectId,
    ops: Vec<Operation>,
    resources: lopdf::Dictionary,
) -> Result<ObjectId> {
    let content = Content { operations: ops }
        .encode()
        .context("encoding a page")?;
    let contents = doc.add_object(Stream::new(dictionary! {}, content));
    let media_box: Vec<Object> = vec![0.into(), 0.into(), 595.into(), 842.into()];
    Ok(doc.add_object(dictionary! {
        "Type" => "Page", "Parent" => parent, "Contents" => contents,
        "Resources" => resources, "MediaBox" => media_box,
    }))
}

/// Rows and columns of the workbook's third sheet, past chatd's cut of
/// 2,000 rows and 50 columns a sheet.
pub const DATA_ROWS: u32 = 2_100;
pub const DATA_COLS: u16 = 52;

/// The workbook: "Summary" (dates, a date with a time, booleans, formulas
/// with their results), "Customers" (Acme), "Data" (a grid past the cut).
pub fn workbook(dir: &Path) -> Result<PathBuf> {
    use rust_xlsxwriter::{ExcelDateTime, Format, Formula, Workbook};
    let mut book = Workbook::new();
    let date = Format::new().set_num_format("yyyy-mm-dd");
    let stamp = Format::new().set_num_format("yyyy-mm-dd hh:mm");
    let summary = book.add_worksheet().set_name("Summary")?;
    summary.write_string(0, 0, "Item")?;
    summary.write_string(0, 1, "Amount")?;
    summary.write_string(0, 2, "Date")?;
    summary.write_string(0, 3, "Paid")?;
    summary.write_string(1, 0, "Hosting")?;
    summary.write_number(1, 1, 42)?;
    summary.write_datetime_with_format(1, 2, ExcelDateTime::from_ymd(2026, 3, 1)?, &date)?;
    summary.write_boolean(1, 3, true)?;
    summary.write_string(2, 0, "Travel")?;
    summary.write_number(2, 1, 12.5)?;
    let at = ExcelDateTime::from_ymd(2026, 3, 2)?.and_hms(14, 30, 0)?;
    summary.write_datetime_with_format(2, 2, at, &stamp)?;
    summary.write_boolean(2, 3, false)?;
    summary.write_string(3, 0, "Total")?;
    summary.write_formula(3, 1, Formula::new("=SUM(B2:B3)").set_result("54.5"))?;
    summary.write_formula(3, 3, Formula::new("=AND(D2,D3)").set_result("FALSE"))?;
    summary.write_string(4, 0, "Twice\tthe\nhosting")?;
    summary.write_formula(4, 1, Formula::new("=B2*2").set_result("84"))?;
    let customers = book.add_worksheet().set_name("Customers")?;
    customers.write_string(0, 0, "Customer")?;
    customers.write_string(0, 1, "Owes")?;
    customers.write_string(1, 0, "Acme")?;
    customers.write_number(1, 1, 4200)?;
    customers.write_string(2, 0, "Globex")?;
    customers.write_number(2, 1, 0)?;
    let data = book.add_worksheet().set_name("Data")?;
    for row in 0..DATA_ROWS {
        for col in 0..DATA_COLS {
            data.write_number(row, col, f64::from(row) * 100.0 + f64::from(col))?;
        }
    }
    let path = dir.join("accounts.xlsx");
    book.save(&path).context("writing accounts.xlsx")?;
    Ok(path)
}

fn stored() -> SimpleFileOptions {
    SimpleFileOptions::default().compression_method(CompressionMethod::Stored)
}

fn deflated() -> SimpleFileOptions {
    SimpleFileOptions::default().compression_method(CompressionMethod::Deflated)
}

/// A zip of `parts` (name, text), deflated; EPUB's `mimetype` stored.
fn write_zip(path: &Path, parts: &[(&str, String)]) -> Result<()> {
    let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut zip = ZipWriter::new(BufWriter::new(file));
    for (name, text) in parts {
        let options = if *name == "mimetype" {
            stored()
        } else {
            deflated()
        };
        zip.start_file(*name, options)?;
        zip.write_all(text.as_bytes())?;
    }
    zip.finish()?.flush()?;
    Ok(())
}

const W: &str = "http://schemas.openxmlformats.org/wordprocessingml/2006/main";
const R: &str = "http://schemas.openxmlformats.org/officeDocument/2006/relationships";
const PKG_RELS: &str = "http://schemas.openxmlformats.org/package/2006/relationships";
const XML_HEAD: &str = r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>"#;

fn docx_paragraph(style: Option<&str>, list: bool, text: &str) -> String {
    let style = style.map_or(String::new(), |s| format!(r#"<w:pStyle w:val="{s}"/>"#));
    let list = if list {
        r#"<w:numPr><w:ilvl w:val="0"/><w:numId w:val="1"/></w:numPr>"#
    } else {
        ""
    };
    format!(
        r#"<w:p><w:pPr>{style}{list}</w:pPr><w:r><w:t xml:space="preserve">{text}</w:t></w:r></w:p>"#
    )
}

fn docx_row(cells: &[&str]) -> String {
    let cells: String = cells
        .iter()
        .map(|c| format!("<w:tc><w:p><w:r><w:t>{c}</w:t></w:r></w:p></w:tc>"))
        .collect();
    format!("<w:tr>{cells}</w:tr>")
}

/// The DOCX: a title, headings, a paragraph with an entity and a tab, a
/// bulleted list, and a table whose cell holds two paragraphs.
pub fn docx(dir: &Path) -> Result<PathBuf> {
    let body = [
        docx_paragraph(Some("Title"), false, "Supplier review"),
        docx_paragraph(Some("Heading1"), false, "Findings"),
        docx_paragraph(None, false, "Acme &amp; Globex both delivered late."),
        docx_paragraph(Some("Heading2"), false, "Actions"),
        docx_paragraph(Some("ListParagraph"), true, "Call Acme"),
        docx_paragraph(Some("ListParagraph"), true, "Renew the Globex contract"),
        format!(
            "<w:tbl>{}{}{}</w:tbl>",
            docx_row(&["Supplier", "Days late", "Penalty"]),
            docx_row(&["Acme", "12", "600 EUR"]),
            "<w:tr><w:tc><w:p><w:r><w:t>Globex</w:t></w:r></w:p></w:tc><w:tc><w:p><w:r><w:t>3</w:t></w:r></w:p><w:p><w:r><w:t>(weather)</w:t></w:r></w:p></w:tc><w:tc><w:p/></w:tc></w:tr>",
        ),
        docx_paragraph(Some("Heading3"), false, "Next review"),
        r#"<w:p><w:r><w:t>In</w:t></w:r><w:r><w:tab/><w:t>June.</w:t></w:r><w:r><w:delText>Never.</w:delText></w:r></w:p>"#.to_owned(),
    ]
    .concat();
    let document = format!(
        r#"{XML_HEAD}<w:document xmlns:w="{W}" xmlns:r="{R}"><w:body>{body}<w:sectPr/></w:body></w:document>"#
    );
    let style = |id: &str, name: &str| {
        format!(
            r#"<w:style w:type="paragraph" w:styleId="{id}"><w:name w:val="{name}"/></w:style>"#
        )
    };
    let styles = format!(
        r#"{XML_HEAD}<w:styles xmlns:w="{W}">{}{}{}{}{}</w:styles>"#,
        style("Title", "Title"),
        style("Heading1", "heading 1"),
        style("Heading2", "heading 2"),
        style("Heading3", "heading 3"),
        style("ListParagraph", "List Paragraph"),
    );
    let numbering = format!(
        r#"{XML_HEAD}<w:numbering xmlns:w="{W}"><w:abstractNum w:abstractNumId="0"><w:lvl w:ilvl="0"><w:numFmt w:val="bullet"/><w:lvlText w:val="•"/></w:lvl></w:abstractNum><w:num w:numId="1"><w:abstractNumId w:val="0"/></w:num></w:numbering>"#
    );
    let main = "application/vnd.openxmlformats-officedocument.wordprocessingml";
    let types = format!(
        r#"{XML_HEAD}<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/word/document.xml" ContentType="{main}.document.main+xml"/><Override PartName="/word/styles.xml" ContentType="{main}.styles+xml"/><Override PartName="/word/numbering.xml" ContentType="{main}.numbering+xml"/></Types>"#
    );
    let rels = format!(
        r#"{XML_HEAD}<Relationships xmlns="{PKG_RELS}"><Relationship Id="rId1" Type="{R}/officeDocument" Target="word/document.xml"/></Relationships>"#
    );
    let document_rels = format!(
        r#"{XML_HEAD}<Relationships xmlns="{PKG_RELS}"><Relationship Id="rId1" Type="{R}/styles" Target="styles.xml"/><Relationship Id="rId2" Type="{R}/numbering" Target="numbering.xml"/></Relationships>"#
    );
    let path = dir.join("review.docx");
    write_zip(
        &path,
        &[
            ("[Content_Types].xml", types),
            ("_rels/.rels", rels),
            ("word/document.xml", document),
            ("word/_rels/document.xml.rels", document_rels),
            ("word/styles.xml", styles),
            ("word/numbering.xml", numbering),
        ],
    )?;
    Ok(path)
}

const P: &str = "http://schemas.openxmlformats.org/presentationml/2006/main";
const A: &str = "http://schemas.openxmlformats.org/drawingml/2006/main";

/// A shape: a placeholder of `kind` (or a plain text box) with paragraphs.
fn pptx_shape(kind: Option<&str>, paragraphs: &[&str]) -> String {
    let ph = kind.map_or(String::new(), |k| format!(r#"<p:ph type="{k}"/>"#));
    let paras: String = paragraphs
        .iter()
        .map(|t| format!("<a:p><a:r><a:t>{t}</a:t></a:r></a:p>"))
        .collect();
    format!(
        r#"<p:sp><p:nvSpPr><p:cNvPr id="2" name="s"/><p:cNvSpPr/><p:nvPr>{ph}</p:nvPr></p:nvSpPr><p:spPr/><p:txBody><a:bodyPr/>{paras}</p:txBody></p:sp>"#
    )
}

fn pptx_part(root: &str, shapes: &str) -> String {
    format!(
        r#"{XML_HEAD}<p:{root} xmlns:p="{P}" xmlns:a="{A}" xmlns:r="{R}"><p:cSld><p:spTree><p:nvGrpSpPr><p:cNvPr id="1" name=""/><p:cNvGrpSpPr/><p:nvPr/></p:nvGrpSpPr><p:grpSpPr/>{shapes}</p:spTree></p:cSld></p:{root}>"#
    )
}

/// The PPTX: three slides whose files are not in presentation order
/// (slide3.xml shows first), titles, a bullet body, a table, and notes on
/// two of them.
pub fn pptx(dir: &Path) -> Result<PathBuf> {
    let table = r#"<p:graphicFrame><p:nvGraphicFramePr><p:cNvPr id="3" name="t"/><p:cNvGraphicFramePr/><p:nvPr/></p:nvGraphicFramePr><p:xfrm/><a:graphic><a:graphicData uri="http://schemas.openxmlformats.org/drawingml/2006/table"><a:tbl><a:tr h="0"><a:tc><a:txBody><a:p><a:r><a:t>Quarter</a:t></a:r></a:p></a:txBody></a:tc><a:tc><a:txBody><a:p><a:r><a:t>Revenue</a:t></a:r></a:p></a:txBody></a:tc></a:tr><a:tr h="0"><a:tc><a:txBody><a:p><a:r><a:t>Q1</a:t></a:r></a:p></a:txBody></a:tc><a:tc><a:txBody><a:p><a:r><a:t>1.2M</a:t></a:r></a:p></a:txBody></a:tc></a:tr></a:tbl></a:graphicData></a:graphic></p:graphicFrame>"#;
    let slides = [
        // (file, shapes, notes) in file-name order.
        (
            "slide1.xml",
            pptx_shape(Some("title"), &["Numbers"]) + table,
            Some("Say the Q1 figure twice."),
        ),
        (
            "slide2.xml",
            pptx_shape(Some("title"), &["Next steps"])
                + &pptx_shape(Some("body"), &["Hire two engineers", "Ship in May"]),
            None,
        ),
        (
            "slide3.xml",
            pptx_shape(Some("ctrTitle"), &["Acme plan 2026"])
                + &pptx_shape(Some("subTitle"), &["Board meeting"])
                + &pptx_shape(Some("sldNum"), &["1"]),
            Some("Welcome everyone."),
        ),
    ];
    let order = ["slide3.xml", "slide1.xml", "slide2.xml"];
    let slide_type = format!("{R}/slide");
    let ids: String = order
        .iter()
        .enumerate()
        .map(|(i, _)| format!(r#"<p:sldId id="{}" r:id="rId{}"/>"#, 256 + i, i + 1))
        .collect();
    let presentation = format!(
        r#"{XML_HEAD}<p:presentation xmlns:p="{P}" xmlns:a="{A}" xmlns:r="{R}"><p:sldIdLst>{ids}</p:sldIdLst><p:sldSz cx="9144000" cy="6858000"/><p:notesSz cx="6858000" cy="9144000"/></p:presentation>"#
    );
    let rels: String = order
        .iter()
        .enumerate()
        .map(|(i, file)| {
            format!(
                r#"<Relationship Id="rId{}" Type="{slide_type}" Target="slides/{file}"/>"#,
                i + 1
            )
        })
        .collect();
    let mut parts = vec![
        ("ppt/presentation.xml".to_owned(), presentation),
        (
            "ppt/_rels/presentation.xml.rels".to_owned(),
            format!(r#"{XML_HEAD}<Relationships xmlns="{PKG_RELS}">{rels}</Relationships>"#),
        ),
        (
            "_rels/.rels".to_owned(),
            format!(
                r#"{XML_HEAD}<Relationships xmlns="{PKG_RELS}"><Relationship Id="rId1" Type="{R}/officeDocument" Target="ppt/presentation.xml"/></Relationships>"#
            ),
        ),
    ];
    let mut overrides = String::new();
    let pml = "application/vnd.openxmlformats-officedocument.presentationml";
    for (i, (file, shapes, notes)) in slides.iter().enumerate() {
        parts.push((format!("ppt/slides/{file}"), pptx_part("sld", shapes)));
        overrides +=
            &format!(r#"<Override PartName="/ppt/slides/{file}" ContentType="{pml}.slide+xml"/>"#);
        let Some(notes) = notes else { continue };
        let notes_file = format!("notesSlide{}.xml", i + 1);
        let shapes = pptx_shape(Some("sldImg"), &[]) + &pptx_shape(Some("body"), &[notes]);
        parts.push((
            format!("ppt/notesSlides/{notes_file}"),
            pptx_part("notes", &shapes),
        ));
        parts.push((
            format!("ppt/slides/_rels/{file}.rels"),
            format!(
                r#"{XML_HEAD}<Relationships xmlns="{PKG_RELS}"><Relationship Id="rId2" Type="{R}/notesSlide" Target="../notesSlides/{notes_file}"/></Relationships>"#
            ),
        ));
        overrides += &format!(
            r#"<Override PartName="/ppt/notesSlides/{notes_file}" ContentType="{pml}.notesSlide+xml"/>"#
        );
    }
    parts.push((
        "[Content_Types].xml".to_owned(),
        format!(
            r#"{XML_HEAD}<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/ppt/presentation.xml" ContentType="{pml}.presentation.main+xml"/>{overrides}</Types>"#
        ),
    ));
    parts.sort_by_key(|(name, _)| !name.starts_with("[Content_Types]"));
    let parts: Vec<(&str, String)> = parts.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    let path = dir.join("plan.pptx");
    write_zip(&path, &parts)?;
    Ok(path)
}

fn xhtml(title: &str, body: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?><!DOCTYPE html><html xmlns="http://www.w3.org/1999/xhtml"><head><title>{title}</title></head><body>{body}</body></html>"#
    )
}

/// The EPUB (3): two chapters, the manifest listing them in the reverse
/// of the spine's order, a navigation document outside the spine.
pub fn epub(dir: &Path) -> Result<PathBuf> {
    let container = format!(
        r#"{XML_HEAD}<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/></rootfiles></container>"#
    );
    let opf = format!(
        r#"{XML_HEAD}<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id"><metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:identifier id="id">urn:uuid:7d4c9a57-2b7e-4c1a-9a55-0f1d2c3b4a59</dc:identifier><dc:title>The Acme Story</dc:title><dc:language>en</dc:language><meta property="dcterms:modified">2026-12-01T00:00:00Z</meta></metadata><manifest><item id="c2" href="Text/chapter%202.xhtml" media-type="application/xhtml+xml"/><item id="c1" href="Text/one.xhtml" media-type="application/xhtml+xml"/><item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/></manifest><spine><itemref idref="c1"/><itemref idref="c2"/></spine></package>"#
    );
    let nav = xhtml(
        "Contents",
        r#"<nav xmlns:epub="http://www.idpf.org/2007/ops" epub:type="toc"><ol><li><a href="Text/one.xhtml">One</a></li><li><a href="Text/chapter%202.xhtml">Two</a></li></ol></nav>"#,
    );
    let one = xhtml(
        "ch1",
        "<h1>The Beginning</h1><p>Acme was founded in a garage.</p><p>It sold anvils.</p>",
    );
    let two = xhtml(
        "Growth",
        "<p>Sales doubled &amp; then tripled.</p><p>The end.</p>",
    );
    let path = dir.join("story.epub");
    write_zip(
        &path,
        &[
            ("mimetype", "application/epub+zip".to_owned()),
            ("META-INF/container.xml", container),
            ("OEBPS/content.opf", opf),
            ("OEBPS/nav.xhtml", nav),
            ("OEBPS/Text/one.xhtml", one),
            ("OEBPS/Text/chapter 2.xhtml", two),
        ],
    )?;
    Ok(path)
}

/// A CSV with a header, a quoted comma, a quoted line break and a short row.
pub const CSV: &str =
    "name,amount,note\nAcme,4200,\"late, again\"\n\"Globex\",12,\"two\nlines\"\nInitech\n";

pub fn csv(dir: &Path) -> Result<PathBuf> {
    let path = dir.join("ledger.csv");
    std::fs::write(&path, CSV).context("writing ledger.csv")?;
    Ok(path)
}

/// A PDF of `n` pages of 36 lines of text each (no scan), named by `n`:
/// the documents benchmark's long PDF.
pub fn pdf_pages(dir: &Path, n: usize) -> Result<PathBuf> {
    let pages: Vec<Vec<String>> = (1..=n)
        .map(|p| {
            (1..=36)
                .map(|l| {
                    format!("Page {p}, line {l}: the figures for region {l} were checked twice.")
                })
                .collect()
        })
        .collect();
    let lines: Vec<Vec<&str>> = pages
        .iter()
        .map(|p| p.iter().map(String::as_str).collect())
        .collect();
    let pages: Vec<&[&str]> = lines.iter().map(Vec::as_slice).collect();
    let mut doc = pdf_document(&pages, ScanPage::None, None)?;
    let path = dir.join(format!("pages-{n}.pdf"));
    save_pdf(&mut doc, &path)?;
    Ok(path)
}

/// A long DOCX: `paragraphs` paragraphs, a heading before every 20, then a
/// table of 100 rows (no styles part: the headings read as plain lines).
pub fn long_docx(dir: &Path, paragraphs: usize) -> Result<PathBuf> {
    let mut body = String::new();
    for i in 0..paragraphs {
        if i % 20 == 0 {
            body += &docx_paragraph(Some("Heading1"), false, &format!("Section {}", i / 20 + 1));
        }
        let text =
            format!("Paragraph {i}: the supplier delivered on time and the invoice was paid.");
        body += &docx_paragraph(None, false, &text);
    }
    let rows: String = (0..100)
        .map(|r| docx_row(&[&format!("Supplier {r}"), &format!("{}", r * 7), "EUR"]))
        .collect();
    let path = dir.join(format!("long-{paragraphs}.docx"));
    write_plain_docx(&path, &format!("{body}<w:tbl>{rows}</w:tbl>"))?;
    Ok(path)
}

/// A DOCX of `body` (the XML of its paragraphs and tables) with no styles
/// or numbering part: the fewest parts Word's format needs.
fn write_plain_docx(path: &Path, body: &str) -> Result<()> {
    let document = format!(
        r#"{XML_HEAD}<w:document xmlns:w="{W}" xmlns:r="{R}"><w:body>{body}<w:sectPr/></w:body></w:document>"#
    );
    let types = format!(
        r#"{XML_HEAD}<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>"#
    );
    let rels = format!(
        r#"{XML_HEAD}<Relationships xmlns="{PKG_RELS}"><Relationship Id="rId1" Type="{R}/officeDocument" Target="word/document.xml"/></Relationships>"#
    );
    let parts = [
        ("[Content_Types].xml", types),
        ("_rels/.rels", rels),
        ("word/document.xml", document),
    ];
    write_zip(path, &parts)
}

/// A PDF named `name` with a page of lines for each of `pages` and no
/// scan: many documents of their own words (the search benchmark's).
pub fn pdf_of(dir: &Path, name: &str, pages: &[&[&str]]) -> Result<PathBuf> {
    let mut doc = pdf_document(pages, ScanPage::None, None)?;
    let path = dir.join(name);
    save_pdf(&mut doc, &path)?;
    Ok(path)
}

/// A DOCX named `name` of plain `paragraphs` (their `&` and `<` escaped).
pub fn docx_of(dir: &Path, name: &str, paragraphs: &[&str]) -> Result<PathBuf> {
    let body: String = paragraphs
        .iter()
        .map(|p| docx_paragraph(None, false, &p.replace('&', "&amp;").replace('<', "&lt;")))
        .collect();
    let path = dir.join(name);
    write_plain_docx(&path, &body)?;
    Ok(path)
}

/// How much the zip bomb's one entry unpacks to.
pub const BOMB_UNPACKED: u32 = 1 << 30;

/// A .docx whose `word/document.xml` is 1 GiB of zeros deflated to 1 MiB,
/// as a real bomb is: one dynamic-Huffman block whose matches of 258 bytes
/// cost 2 bits each. Its deflate stream and CRC are computed, not run
/// through a compressor (which would take a minute over 1 GiB in a debug
/// build), so nothing near 1 GiB is ever held or even produced.
pub fn zip_bomb(dir: &Path) -> Result<PathBuf> {
    let entries = [
        ZipEntry::stored("[Content_Types].xml", XML_HEAD.as_bytes().to_vec()),
        ZipEntry {
            name: "word/document.xml",
            method: 8,
            crc: crc32_of_zeros(u64::from(BOMB_UNPACKED)),
            size: BOMB_UNPACKED,
            data: deflated_zeros(BOMB_UNPACKED),
        },
    ];
    let path = dir.join("bomb.docx");
    std::fs::write(&path, zip_bytes(&entries)?).context("writing bomb.docx")?;
    Ok(path)
}

/// A .docx whose `word/document.xml` says it unpacks to 4 KiB and unpacks
/// to 64 MiB: only unpacking shows a lying size.
pub fn lying_zip(dir: &Path) -> Result<PathBuf> {
    let entries = [ZipEntry {
        name: "word/document.xml",
        method: 8,
        crc: crc32_of_zeros(64 << 20),
        size: 4_096,
        data: deflated_zeros(64 << 20),
    }];
    let path = dir.join("liar.docx");
    std::fs::write(&path, zip_bytes(&entries)?).context("writing liar.docx")?;
    Ok(path)
}

struct ZipEntry {
    name: &'static str,
    /// 0 stored, 8 deflated.
    method: u16,
    crc: u32,
    size: u32,
    data: Vec<u8>,
}

impl ZipEntry {
    fn stored(name: &'static str, data: Vec<u8>) -> ZipEntry {
        let crc = crc32(&data);
        let size = u32::try_from(data.len()).unwrap_or(u32::MAX);
        ZipEntry {
            name,
            method: 0,
            crc,
            size,
            data,
        }
    }
}

/// A zip of `entries`: local headers and data, the central directory, its end.
fn zip_bytes(entries: &[ZipEntry]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for entry in entries {
        let offset = u32::try_from(out.len()).context("a small zip")?;
        let packed = u32::try_from(entry.data.len()).context("a small zip")?;
        let name_len = u16::try_from(entry.name.len()).context("a short name")?;
        // Version 2.0, no flags, method, DOS time and date 0 (1980).
        let common = |head: &mut Vec<u8>| {
            head.extend_from_slice(&20u16.to_le_bytes());
            head.extend_from_slice(&0u16.to_le_bytes());
            head.extend_from_slice(&entry.method.to_le_bytes());
            head.extend_from_slice(&0u32.to_le_bytes());
            head.extend_from_slice(&entry.crc.to_le_bytes());
            head.extend_from_slice(&packed.to_le_bytes());
            head.extend_from_slice(&entry.size.to_le_bytes());
            head.extend_from_slice(&name_len.to_le_bytes());
            head.extend_from_slice(&0u16.to_le_bytes());
        };
        out.extend_from_slice(b"PK\x03\x04");
        common(&mut out);
        out.extend_from_slice(entry.name.as_bytes());
        out.extend_from_slice(&entry.data);
        central.extend_from_slice(b"PK\x01\x02");
        central.extend_from_slice(&20u16.to_le_bytes());
        common(&mut central);
        // Comment length, disk, internal and external attributes, offset.
        central.extend_from_slice(&[0; 6]);
        central.extend_from_slice(&0u32.to_le_bytes());
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(entry.name.as_bytes());
    }
    let central_offset = u32::try_from(out.len()).context("a small zip")?;
    let central_len = u32::try_from(central.len()).context("a small zip")?;
    let count = u16::try_from(entries.len()).context("a few entries")?;
    out.extend_from_slice(&central);
    out.extend_from_slice(b"PK\x05\x06");
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&central_len.to_le_bytes());
    out.extend_from_slice(&central_offset.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    Ok(out)
}

/// Bits written least significant first, as deflate packs them.
#[derive(Default)]
struct Bits {
    bytes: Vec<u8>,
    used: u8,
}

impl Bits {
    /// `count` bits of `value`, low bit first (header fields, extra bits).
    fn put(&mut self, value: u32, count: u8) {
        for i in 0..count {
            if self.used == 0 {
                self.bytes.push(0);
            }
            if value >> i & 1 == 1 {
                if let Some(last) = self.bytes.last_mut() {
                    *last |= 1 << self.used;
                }
            }
            self.used = (self.used + 1) % 8;
        }
    }

    /// A Huffman code of `len` bits, its first bit first.
    fn code(&mut self, code: u32, len: u8) {
        for i in (0..len).rev() {
            self.put(code >> i & 1, 1);
        }
    }
}

/// A deflate stream of `n` zeros: one final dynamic block whose codes are
/// literal 0 = `10`, end = `11`, length 258 = `0`, distance 1 = `0`.
fn deflated_zeros(n: u32) -> Vec<u8> {
    let mut bits = Bits::default();
    bits.put(1, 1); // the final block
    bits.put(2, 2); // dynamic Huffman codes
    bits.put(286 - 257, 5); // literal/length codes 0..=285
    bits.put(2 - 1, 5); // distance codes 0 and 1
    bits.put(18 - 4, 4); // code-length codes sent, in the order below
                         // Lengths of the code-length codes 16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11,
                         // 4, 12, 3, 13, 2, 14, 1: 18 → 1 bit (`0`), 2 and 1 → 2 bits (`11`, `10`).
    for len in [0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 2] {
        bits.put(len, 3);
    }
    // Literal/length lengths: 0 → 2, 1..=255 → 0, 256 → 2, 257..=284 → 0,
    // 285 → 1; then the distance lengths 1, 1.
    bits.code(0b11, 2);
    bits.code(0, 1);
    bits.put(138 - 11, 7);
    bits.code(0, 1);
    bits.put(117 - 11, 7);
    bits.code(0b11, 2);
    bits.code(0, 1);
    bits.put(28 - 11, 7);
    for _ in 0..3 {
        bits.code(0b10, 2);
    }
    // One literal zero, then copies of the 258 bytes before, then zeros.
    bits.code(0b10, 2);
    let rest = n - 1;
    for _ in 0..rest / 258 {
        bits.code(0, 1);
        bits.code(0, 1);
    }
    for _ in 0..rest % 258 {
        bits.code(0b10, 2);
    }
    bits.code(0b11, 2);
    bits.bytes
}

const CRC_POLY: u32 = 0xEDB8_8320;

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                crc >> 1 ^ CRC_POLY
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// The CRC-32 of `n` zero bytes without running over them: a zero bit
/// moves the register by a linear map, so 8n of them are that map's 8n-th
/// power, by squaring (as zlib's `crc32_combine` does).
fn crc32_of_zeros(n: u64) -> u32 {
    fn apply(map: &[u32; 32], vector: u32) -> u32 {
        (0..32)
            .filter(|i| vector >> i & 1 == 1)
            .fold(0, |acc, i| acc ^ map[i])
    }
    let mut power: [u32; 32] =
        std::array::from_fn(|i| if i == 0 { CRC_POLY } else { 1 << (i - 1) });
    let mut register = !0u32;
    let mut bits = n * 8;
    while bits > 0 {
        if bits & 1 == 1 {
            register = apply(&power, register);
        }
        power = std::array::from_fn(|i| apply(&power, power[i]));
        bits >>= 1;
    }
    !register
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crc_of_zeros_is_the_crc_of_zero_bytes() {
        for n in [0usize, 1, 7, 258, 4_096] {
            assert_eq!(crc32_of_zeros(n as u64), crc32(&vec![0; n]), "{n} zeros");
        }
    }
}
