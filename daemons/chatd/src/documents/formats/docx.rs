//! Word documents (.docx): `word/document.xml` read as a stream. Headings
//! (the Title and Heading 1-3 styles, by the name `word/styles.xml` gives
//! their id, so a Word in another language reads the same) as `#`, `##`,
//! `###`; list paragraphs as `- item`, indented by level; other paragraphs
//! as lines; tables as tab-separated rows. One part, "document", with no
//! mark line. [`blocks`] gives the same reading as blocks, for a preview.

use std::collections::HashMap;

use quick_xml::events::{BytesStart, Event};

use super::ooxml::{self, attr};
use super::zipcheck;
use super::{one_line, Builder, DocKind, Extracted, Part, Refusal};

const DOCUMENT: &str = "word/document.xml";
const STYLES: &str = "word/styles.xml";

/// One block of a Word document, in reading order.
pub(super) enum Block {
    /// Title and Heading 1 are level 1, Heading 2 is 2, deeper 3.
    Heading { level: usize, text: String },
    /// An item of a list, its level 0 at the left (8 at most).
    Item { level: usize, text: String },
    /// A paragraph's lines, each with its end trimmed.
    Paragraph(String),
    /// A table's rows, each without its empty cells at the end (a table in
    /// a table reads into its outer cell).
    Table(Vec<Vec<String>>),
}

pub(super) fn read(bytes: &[u8]) -> Result<Extracted, Refusal> {
    let blocks = blocks(bytes)?;
    let mut out = Builder::default();
    // One part, the whole text: a page is the renderer's, not the file's.
    out.parts.push(Part {
        label: "document".into(),
        start: 0,
    });
    for block in &blocks {
        match block {
            Block::Heading { level, text } => out.line(&format!("{} {text}", "#".repeat(*level))),
            Block::Item { level, text } => out.line(&format!("{}- {text}", "  ".repeat(*level))),
            Block::Paragraph(text) => {
                for line in text.lines() {
                    out.line(line);
                }
            }
            Block::Table(rows) => {
                for row in rows {
                    out.line(&row.join("\t"));
                }
            }
        }
    }
    Ok(out.finish())
}

/// The document's blocks: headings, list items, paragraphs and tables.
pub(super) fn blocks(bytes: &[u8]) -> Result<Vec<Block>, Refusal> {
    let mut archive = zipcheck::open(bytes, DocKind::Docx)?;
    let Some(xml) = zipcheck::read_text(&mut archive, DOCUMENT)? else {
        return Err(Refusal::NotWhatItSays(DocKind::Docx.word().into()));
    };
    let styles = match zipcheck::read_text(&mut archive, STYLES)? {
        Some(styles) => style_names(&styles),
        None => HashMap::new(),
    };
    body(&xml, &styles)
}

/// Each paragraph style's id and its name, lower case ("Heading1" →
/// "heading 1"; a French Word writes "Titre1" → "heading 1").
fn style_names(xml: &str) -> HashMap<String, String> {
    let mut names = HashMap::new();
    let mut reader = ooxml::reader(xml);
    let mut current: Option<String> = None;
    loop {
        match reader.read_event() {
            Ok(Event::Start(e)) if e.local_name().as_ref() == "style" => {
                current = attr(&e, "styleId");
            }
            Ok(Event::Start(e) | Event::Empty(e)) if e.local_name().as_ref() == "name" => {
                if let (Some(id), Some(name)) = (current.take(), attr(&e, "val")) {
                    names.insert(id, name.to_lowercase());
                }
            }
            Ok(Event::Eof) | Err(_) => break,
            Ok(_) => {}
        }
    }
    names
}

/// What a paragraph is, from its properties.
#[derive(Default)]
struct Paragraph {
    text: String,
    style: Option<String>,
    /// The list level (0 at the left) when it is an item of a list.
    list_level: Option<usize>,
}

/// Where the stream is inside `word/document.xml`.
#[derive(Default)]
struct State {
    paragraph: Option<Paragraph>,
    /// Inside `w:t`: only its text is the document's.
    in_text: bool,
    /// Inside paragraph properties (their `w:tab` are tab stops, no tabs).
    in_properties: usize,
    /// Inside what is no text of the page: deleted runs, field codes, the
    /// fallback copy of a drawing's text.
    skipping: usize,
    /// Tables open (a table in a table reads into its outer cell).
    tables: usize,
    /// The rows of the outermost table open.
    rows: Vec<Vec<String>>,
    row: Vec<String>,
    cell: String,
    blocks: Vec<Block>,
}

fn body(xml: &str, styles: &HashMap<String, String>) -> Result<Vec<Block>, Refusal> {
    let mut reader = ooxml::reader(xml);
    let mut state = State::default();
    loop {
        let event = reader
            .read_event()
            .map_err(|e| ooxml::broken(DOCUMENT, e))?;
        match event {
            Event::Start(e) => start(&mut state, &e, false),
            Event::Empty(e) => start(&mut state, &e, true),
            Event::End(e) => end(&mut state, e.local_name().as_ref(), styles),
            Event::Text(t) if state.in_text && state.skipping == 0 => {
                if let Some(p) = &mut state.paragraph {
                    p.text.push_str(&t);
                }
            }
            Event::GeneralRef(r) if state.in_text && state.skipping == 0 => {
                if let Some(p) = &mut state.paragraph {
                    p.text.push_str(&ooxml::entity(&r));
                }
            }
            Event::Eof => {
                // A table the file never closed still holds its rows.
                end_table(&mut state);
                return Ok(state.blocks);
            }
            _ => {}
        }
    }
}

fn start(state: &mut State, e: &BytesStart<'_>, empty: bool) {
    let name = e.local_name();
    match name.as_ref() {
        "delText" | "instrText" | "Fallback" if !empty => state.skipping += 1,
        _ if state.skipping > 0 => {}
        "p" if !empty => state.paragraph = Some(Paragraph::default()),
        "pPr" if !empty => state.in_properties += 1,
        "pStyle" => {
            if let Some(p) = &mut state.paragraph {
                p.style = attr(e, "val");
            }
        }
        "numPr" => {
            if let Some(p) = &mut state.paragraph {
                p.list_level.get_or_insert(0);
            }
        }
        "ilvl" => {
            if let Some(p) = &mut state.paragraph {
                let level = attr(e, "val").and_then(|v| v.parse().ok()).unwrap_or(0);
                p.list_level = Some(level);
            }
        }
        "t" if !empty => state.in_text = true,
        "tab" if state.in_properties == 0 => push(state, "\t"),
        "br" | "cr" => push(state, "\n"),
        "tbl" if !empty => state.tables += 1,
        "tr" if !empty && state.tables == 1 => state.row.clear(),
        "tc" if !empty && state.tables == 1 => state.cell.clear(),
        _ => {}
    }
}

fn push(state: &mut State, text: &str) {
    if let Some(p) = &mut state.paragraph {
        p.text.push_str(text);
    }
}

fn end(state: &mut State, name: &str, styles: &HashMap<String, String>) {
    match name {
        "delText" | "instrText" | "Fallback" if state.skipping > 0 => state.skipping -= 1,
        _ if state.skipping > 0 => {}
        "t" => state.in_text = false,
        "pPr" => state.in_properties = state.in_properties.saturating_sub(1),
        "p" => {
            let Some(p) = state.paragraph.take() else {
                return;
            };
            if state.tables > 0 {
                let text = one_line(&p.text);
                if !text.is_empty() {
                    if !state.cell.is_empty() {
                        state.cell.push(' ');
                    }
                    state.cell.push_str(&text);
                }
            } else if let Some(block) = paragraph(&p, styles) {
                state.blocks.push(block);
            }
        }
        "tc" if state.tables == 1 => state.row.push(std::mem::take(&mut state.cell)),
        "tr" if state.tables == 1 => {
            let mut row = std::mem::take(&mut state.row);
            let used = row.iter().rposition(|c| !c.is_empty()).map_or(0, |i| i + 1);
            row.truncate(used);
            state.rows.push(row);
        }
        "tbl" => {
            state.tables = state.tables.saturating_sub(1);
            if state.tables == 0 {
                end_table(state);
            }
        }
        _ => {}
    }
}

/// The rows of the table that just ended as a block.
fn end_table(state: &mut State) {
    if !state.rows.is_empty() {
        let rows = std::mem::take(&mut state.rows);
        state.blocks.push(Block::Table(rows));
    }
}

/// A paragraph outside tables as its block; an empty one as none.
fn paragraph(p: &Paragraph, styles: &HashMap<String, String>) -> Option<Block> {
    let text = p.text.trim();
    if text.is_empty() {
        return None;
    }
    Some(
        if let Some(level) = p.style.as_deref().and_then(|id| heading_level(id, styles)) {
            Block::Heading {
                level,
                text: one_line(text),
            }
        } else if let Some(level) = p.list_level {
            Block::Item {
                level: level.min(8),
                text: one_line(text),
            }
        } else {
            let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
            Block::Paragraph(lines.join("\n"))
        },
    )
}

/// The heading level of style `id`: Title and Heading 1 are 1, Heading 2 is
/// 2, Heading 3 and deeper 3; any other style none.
fn heading_level(id: &str, styles: &HashMap<String, String>) -> Option<usize> {
    let name = styles.get(id).cloned().unwrap_or_else(|| id.to_lowercase());
    let name = name.replace(' ', "");
    if name == "title" {
        return Some(1);
    }
    let level: usize = name.strip_prefix("heading")?.parse().ok()?;
    (level >= 1).then_some(level.min(3))
}
