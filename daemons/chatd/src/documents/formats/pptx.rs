//! Slide decks (.pptx): slides in the order the presentation lists them
//! (`ppt/presentation.xml`'s slide ids through its relationships; file
//! names say nothing of order), each as `## Slide N: <title>`, its text a
//! paragraph a line (tables as tab-separated rows), then `Notes: …` from
//! its notes slide. [`deck`] gives the slides themselves, for a preview.

use quick_xml::events::Event;

use super::ooxml::{self, attr, prefixed_attr};
use super::zipcheck::{self, Archive};
use super::{one_line, Builder, DocKind, Extracted, Refusal};

const PRESENTATION: &str = "ppt/presentation.xml";

/// One slide as read.
pub(super) struct Slide {
    /// Its place in the deck, from 1.
    pub number: usize,
    pub title: Option<String>,
    /// Its text, a paragraph a line (a table's row a line, cells
    /// tab-separated).
    pub lines: Vec<String>,
    /// Its notes' text, lines joined.
    pub notes: Option<String>,
}

/// The slides in presentation order, and what could not be read.
pub(super) struct Deck {
    pub slides: Vec<Slide>,
    pub notes: Vec<String>,
}

pub(super) fn read(bytes: &[u8]) -> Result<Extracted, Refusal> {
    let deck = deck(bytes)?;
    let mut out = Builder::default();
    for slide in &deck.slides {
        let number = slide.number;
        match &slide.title {
            Some(title) => out.part(
                format!("slide {number}"),
                &format!("## Slide {number}: {title}"),
            ),
            None => out.part(format!("slide {number}"), &format!("## Slide {number}")),
        }
        for line in &slide.lines {
            out.line(line);
        }
        if let Some(notes) = &slide.notes {
            out.line(&format!("Notes: {notes}"));
        }
    }
    for note in deck.notes {
        out.note(note);
    }
    Ok(out.finish())
}

pub(super) fn deck(bytes: &[u8]) -> Result<Deck, Refusal> {
    let mut archive = zipcheck::open(bytes, DocKind::Pptx)?;
    let Some(xml) = zipcheck::read_text(&mut archive, PRESENTATION)? else {
        return Err(Refusal::NotWhatItSays(DocKind::Pptx.word().into()));
    };
    let relations = ooxml::relations(&mut archive, PRESENTATION)?;
    let mut deck = Deck {
        slides: Vec::new(),
        notes: Vec::new(),
    };
    for id in slide_ids(&xml)? {
        let Some(relation) = relations.get(&id) else {
            deck.notes.push(format!("slide id {id} points to no slide"));
            continue;
        };
        let number = deck.slides.len() + 1;
        let slide = slide(&mut archive, &relation.target, number, &mut deck.notes)?;
        deck.slides.push(slide);
    }
    Ok(deck)
}

/// The relationship ids of the slides, in presentation order.
fn slide_ids(xml: &str) -> Result<Vec<String>, Refusal> {
    let mut reader = ooxml::reader(xml);
    let mut ids = Vec::new();
    loop {
        match reader
            .read_event()
            .map_err(|e| ooxml::broken(PRESENTATION, e))?
        {
            Event::Start(e) | Event::Empty(e) if e.local_name().as_ref() == "sldId" => {
                ids.extend(prefixed_attr(&e, "id"));
            }
            Event::Eof => return Ok(ids),
            _ => {}
        }
    }
}

fn slide(
    archive: &mut Archive<'_>,
    part: &str,
    number: usize,
    missing: &mut Vec<String>,
) -> Result<Slide, Refusal> {
    let mut slide = Slide {
        number,
        title: None,
        lines: Vec::new(),
        notes: None,
    };
    let Some(xml) = zipcheck::read_text(archive, part)? else {
        missing.push(format!("slide {number} is missing from the file ({part})"));
        return Ok(slide);
    };
    let text = shapes(&xml, part, Placeholders::Slide)?;
    slide.title = text.title;
    slide.lines = text.lines;
    let relations = ooxml::relations(archive, part)?;
    let notes = relations.values().find(|r| r.kind == "notesSlide");
    if let Some(notes) = notes {
        if let Some(xml) = zipcheck::read_text(archive, &notes.target)? {
            let notes = shapes(&xml, &notes.target, Placeholders::Notes)?;
            if !notes.lines.is_empty() {
                slide.notes = Some(notes.lines.join("\n"));
            }
        }
    }
    Ok(slide)
}

/// Which shapes of a part are read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Placeholders {
    /// A slide: all its text, the title placeholder apart.
    Slide,
    /// A notes slide: only the notes' body, not the slide's picture, its
    /// number, header or footer.
    Notes,
}

/// A part's text: its title (a slide's title placeholder) and its lines.
#[derive(Default)]
struct Text {
    title: Option<String>,
    lines: Vec<String>,
}

/// What the shape being read is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    Title,
    Body,
    Skipped,
}

fn shapes(xml: &str, part: &str, which: Placeholders) -> Result<Text, Refusal> {
    let mut reader = ooxml::reader(xml);
    let mut text = Text::default();
    let mut shape = Shape::Body;
    let mut paragraph = String::new();
    let mut in_text = false;
    let mut row: Option<Vec<String>> = None;
    let mut cell: Option<String> = None;
    loop {
        let event = reader.read_event().map_err(|e| ooxml::broken(part, e))?;
        match event {
            Event::Start(ref e) | Event::Empty(ref e) => match e.local_name().as_ref() {
                "sp" => {
                    shape = if which == Placeholders::Notes {
                        Shape::Skipped
                    } else {
                        Shape::Body
                    }
                }
                "ph" => {
                    let kind = attr(e, "type");
                    shape = match (which, kind.as_deref()) {
                        (Placeholders::Slide, Some("title" | "ctrTitle")) => Shape::Title,
                        (Placeholders::Slide, Some("sldNum" | "dt" | "ftr" | "hdr")) => {
                            Shape::Skipped
                        }
                        (Placeholders::Slide, _) => Shape::Body,
                        (Placeholders::Notes, Some("body")) => Shape::Body,
                        (Placeholders::Notes, _) => Shape::Skipped,
                    };
                }
                "t" => in_text = matches!(event, Event::Start(_)),
                "br" => paragraph.push('\n'),
                "tr" => row = Some(Vec::new()),
                "tc" => cell = Some(String::new()),
                _ => {}
            },
            Event::Text(t) if in_text => paragraph.push_str(&t),
            Event::GeneralRef(r) if in_text => paragraph.push_str(&ooxml::entity(&r)),
            Event::End(e) => match e.local_name().as_ref() {
                "t" => in_text = false,
                "p" => {
                    let line = std::mem::take(&mut paragraph);
                    let line = line.trim();
                    if let Some(cell) = &mut cell {
                        if !line.is_empty() {
                            if !cell.is_empty() {
                                cell.push(' ');
                            }
                            cell.push_str(&one_line(line));
                        }
                    } else if !line.is_empty() {
                        match shape {
                            Shape::Title => {
                                let title = text.title.get_or_insert_with(String::new);
                                if !title.is_empty() {
                                    title.push(' ');
                                }
                                title.push_str(&one_line(line));
                            }
                            Shape::Body => text.lines.extend(line.lines().map(str::to_owned)),
                            Shape::Skipped => {}
                        }
                    }
                }
                "tc" => {
                    if let (Some(row), Some(cell)) = (&mut row, cell.take()) {
                        row.push(cell);
                    }
                }
                "tr" => {
                    if let Some(cells) = row.take() {
                        let used = cells
                            .iter()
                            .rposition(|c| !c.is_empty())
                            .map_or(0, |i| i + 1);
                        text.lines.push(cells[..used].join("\t"));
                    }
                }
                "sp" => shape = Shape::Body,
                _ => {}
            },
            Event::Eof => return Ok(text),
            _ => {}
        }
    }
}
