//! EPUB books: the documents of the package's spine in its order (found
//! through `META-INF/container.xml` and the OPF file it names), each as
//! `## Chapter N: <title>`, the title its first heading or else its
//! `<title>`, its HTML as text by html2text.

use std::collections::HashMap;

use quick_xml::events::Event;

use super::ooxml::{self, attr};
use super::zipcheck;
use super::{cause, one_line, Builder, DocKind, Extracted, Refusal};

const CONTAINER: &str = "META-INF/container.xml";
/// Lines are not wrapped for a screen: a phrase split over two lines
/// would not be found by a search.
const WIDTH: usize = 10_000;
/// html2text recurses over the HTML's nesting; a deeply nested chapter
/// gets a stack of this size rather than overflowing the caller's.
const STACK: usize = 64 << 20;

pub(super) fn read(bytes: &[u8]) -> Result<Extracted, Refusal> {
    let mut archive = zipcheck::open(bytes, DocKind::Epub)?;
    let not_epub = || Refusal::NotWhatItSays(DocKind::Epub.word().into());
    let container = zipcheck::read_text(&mut archive, CONTAINER)?.ok_or_else(not_epub)?;
    let package_path = package_path(&container)?.ok_or_else(not_epub)?;
    let package = zipcheck::read_text(&mut archive, &package_path)?
        .ok_or_else(|| Refusal::Damaged(format!("its package file {package_path} is missing")))?;
    let dir = package_path.rsplit_once('/').map_or("", |(dir, _)| dir);
    let spine = spine(&package, &package_path, dir)?;
    let mut out = Builder::default();
    let mut number = 0;
    for path in spine {
        let Some(html) = zipcheck::read(&mut archive, &path)? else {
            out.note(format!("{path} is in the book's order but not in the file"));
            continue;
        };
        number += 1;
        chapter(&html, number, &mut out);
    }
    Ok(out.finish())
}

fn chapter(html: &[u8], number: usize, out: &mut Builder) {
    let label = format!("chapter {number}");
    match title(html) {
        Some(title) => out.part(label, &format!("## Chapter {number}: {title}")),
        None => out.part(label, &format!("## Chapter {number}")),
    }
    match html_text(html) {
        Ok(text) => {
            for line in text.lines() {
                out.line(line.trim_end());
            }
        }
        Err(why) => out.note(format!("chapter {number} could not be read ({why})")),
    }
}

/// The OPF file `META-INF/container.xml` names.
fn package_path(xml: &str) -> Result<Option<String>, Refusal> {
    let mut reader = ooxml::reader(xml);
    loop {
        match reader
            .read_event()
            .map_err(|e| ooxml::broken(CONTAINER, e))?
        {
            Event::Start(e) | Event::Empty(e) if e.local_name().as_ref() == "rootfile" => {
                if let Some(path) = attr(&e, "full-path") {
                    return Ok(Some(ooxml::resolve("", &path)));
                }
            }
            Event::Eof => return Ok(None),
            _ => {}
        }
    }
}

/// The spine's documents as part names, in reading order (images and
/// other non-HTML items of the spine left out).
fn spine(xml: &str, part: &str, dir: &str) -> Result<Vec<String>, Refusal> {
    let mut reader = ooxml::reader(xml);
    let mut manifest: HashMap<String, (String, String)> = HashMap::new();
    let mut order = Vec::new();
    loop {
        match reader.read_event().map_err(|e| ooxml::broken(part, e))? {
            Event::Start(e) | Event::Empty(e) => match e.local_name().as_ref() {
                "item" => {
                    if let (Some(id), Some(href)) = (attr(&e, "id"), attr(&e, "href")) {
                        let media = attr(&e, "media-type").unwrap_or_default();
                        manifest.insert(id, (ooxml::resolve(dir, &href), media));
                    }
                }
                "itemref" => order.extend(attr(&e, "idref")),
                _ => {}
            },
            Event::Eof => break,
            _ => {}
        }
    }
    Ok(order
        .iter()
        .filter_map(|id| manifest.get(id))
        .filter(|(_, media)| media.is_empty() || media.contains("html"))
        .map(|(path, _)| path.clone())
        .collect())
}

/// The element whose text [`title`] is collecting.
#[derive(Clone, Copy)]
enum Inside {
    Heading,
    Title,
}

/// A chapter's title: its first heading's text, else its `<title>`.
fn title(html: &[u8]) -> Option<String> {
    let xml = String::from_utf8_lossy(html);
    let mut reader = ooxml::reader(&xml);
    let mut inside: Option<Inside> = None;
    let mut text = String::new();
    let mut page_title: Option<String> = None;
    loop {
        match reader.read_event() {
            Ok(Event::Start(e)) => {
                let name = e.local_name();
                let name = name.as_ref();
                if inside.is_none() {
                    if matches!(name, "h1" | "h2" | "h3" | "h4" | "h5" | "h6") {
                        inside = Some(Inside::Heading);
                        text.clear();
                    } else if name == "title" && page_title.is_none() {
                        inside = Some(Inside::Title);
                        text.clear();
                    }
                }
            }
            Ok(Event::Text(t)) if inside.is_some() => text.push_str(&t),
            Ok(Event::GeneralRef(r)) if inside.is_some() => text.push_str(&ooxml::entity(&r)),
            Ok(Event::End(e)) => {
                let name = e.local_name();
                let ends_heading = matches!(name.as_ref(), "h1" | "h2" | "h3" | "h4" | "h5" | "h6");
                match inside {
                    Some(Inside::Heading) if ends_heading => {
                        let heading = one_line(&text);
                        if !heading.is_empty() {
                            return Some(squeeze(&heading));
                        }
                        inside = None;
                    }
                    Some(Inside::Title) if name.as_ref() == "title" => {
                        page_title = Some(squeeze(&one_line(&text))).filter(|t| !t.is_empty());
                        inside = None;
                    }
                    _ => {}
                }
            }
            Ok(Event::Eof) | Err(_) => return page_title,
            Ok(_) => {}
        }
    }
}

/// Runs of spaces as one (a heading's source lines are indented).
fn squeeze(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A chapter's HTML as plain text, on a thread with a stack of its own.
fn html_text(html: &[u8]) -> Result<String, String> {
    std::thread::scope(|scope| {
        let worker = std::thread::Builder::new()
            .name("epub-html".into())
            .stack_size(STACK)
            .spawn_scoped(scope, || {
                html2text::config::plain_no_decorate()
                    .allow_width_overflow()
                    .no_link_wrapping()
                    .string_from_read(html, WIDTH)
                    .map_err(cause)
            })
            .map_err(cause)?;
        worker
            .join()
            .unwrap_or_else(|_| Err("the HTML reader stopped".into()))
    })
}
