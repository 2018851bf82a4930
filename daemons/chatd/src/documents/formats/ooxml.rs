//! What the zip-and-XML formats (DOCX, PPTX, EPUB) share: reading a part's
//! XML as events, an element's attributes by local name, entity text, a
//! part's relationships and the paths they point to.

use std::borrow::Cow;
use std::collections::HashMap;

use quick_xml::events::{BytesRef, BytesStart};
use quick_xml::{Reader, XmlVersion};

use super::zipcheck::{self, Archive};
use super::{cause, Refusal};

/// A reader of `xml` that does not insist on matching end names: a part
/// written by a careless tool still reads.
pub(super) fn reader(xml: &str) -> Reader<&[u8]> {
    let mut reader = Reader::from_str(xml);
    reader.config_mut().check_end_names = false;
    reader
}

/// A part's XML that does not parse.
pub(super) fn broken(part: &str, e: impl std::fmt::Display) -> Refusal {
    Refusal::Damaged(cause(format_args!("{part}: {e}")))
}

/// The value of the attribute whose local name is `local` (any prefix).
pub(super) fn attr(e: &BytesStart<'_>, local: &str) -> Option<String> {
    e.attributes()
        .flatten()
        .find(|a| a.key.local_name().as_ref() == local)
        .and_then(|a| {
            a.normalized_value(XmlVersion::Implicit1_0)
                .ok()
                .map(Cow::into_owned)
        })
}

/// The value of a prefixed attribute with local name `local` (`r:id`, not
/// the plain `id` beside it on a `p:sldId`).
pub(super) fn prefixed_attr(e: &BytesStart<'_>, local: &str) -> Option<String> {
    e.attributes()
        .flatten()
        .find(|a| a.key.prefix().is_some() && a.key.local_name().as_ref() == local)
        .and_then(|a| {
            a.normalized_value(XmlVersion::Implicit1_0)
                .ok()
                .map(Cow::into_owned)
        })
}

/// The text an entity or character reference stands for.
pub(super) fn entity(r: &BytesRef<'_>) -> String {
    if let Ok(Some(c)) = r.resolve_char_ref() {
        return c.to_string();
    }
    match &**r {
        "amp" => "&",
        "lt" => "<",
        "gt" => ">",
        "quot" => "\"",
        "apos" => "'",
        "nbsp" => "\u{a0}",
        _ => "",
    }
    .to_owned()
}

/// One relationship of a part: what it is (the end of its type URI, such
/// as `slide` or `notesSlide`) and the part it points to.
pub(super) struct Relation {
    pub kind: String,
    pub target: String,
}

/// The relationships of `part` (`ppt/slides/slide1.xml` reads
/// `ppt/slides/_rels/slide1.xml.rels`), by id, targets resolved to part names.
pub(super) fn relations(
    archive: &mut Archive<'_>,
    part: &str,
) -> Result<HashMap<String, Relation>, Refusal> {
    let (dir, file) = part.rsplit_once('/').unwrap_or(("", part));
    let rels_name = if dir.is_empty() {
        format!("_rels/{file}.rels")
    } else {
        format!("{dir}/_rels/{file}.rels")
    };
    let mut out = HashMap::new();
    let Some(xml) = zipcheck::read_text(archive, &rels_name)? else {
        return Ok(out);
    };
    let mut reader = reader(&xml);
    loop {
        match reader.read_event() {
            Ok(quick_xml::events::Event::Start(e) | quick_xml::events::Event::Empty(e))
                if e.local_name().as_ref() == "Relationship" =>
            {
                let (Some(id), Some(target)) = (attr(&e, "Id"), attr(&e, "Target")) else {
                    continue;
                };
                if attr(&e, "TargetMode").is_some_and(|m| m == "External") {
                    continue;
                }
                let kind = attr(&e, "Type")
                    .and_then(|t| t.rsplit('/').next().map(str::to_owned))
                    .unwrap_or_default();
                let target = resolve(dir, &target);
                out.insert(id, Relation { kind, target });
            }
            Ok(quick_xml::events::Event::Eof) => break,
            Ok(_) => {}
            Err(e) => return Err(broken(&rels_name, e)),
        }
    }
    Ok(out)
}

/// The part name `target` points to from a part in folder `dir`: `/` starts
/// at the root, `..` goes up, `%20` and the like are decoded.
pub(super) fn resolve(dir: &str, target: &str) -> String {
    let target = target.split('#').next().unwrap_or_default();
    let target = percent_decoded(target);
    let mut parts: Vec<&str> = Vec::new();
    if !target.starts_with('/') {
        parts.extend(dir.split('/').filter(|p| !p.is_empty()));
    }
    for piece in target.split('/') {
        match piece {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    parts.join("/")
}

fn percent_decoded(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::resolve;

    #[test]
    fn targets_resolve_against_their_part() {
        assert_eq!(resolve("ppt", "slides/slide2.xml"), "ppt/slides/slide2.xml");
        assert_eq!(
            resolve("ppt/slides", "../notesSlides/notesSlide1.xml"),
            "ppt/notesSlides/notesSlide1.xml"
        );
        assert_eq!(resolve("ppt", "/ppt/slides/s.xml"), "ppt/slides/s.xml");
        assert_eq!(
            resolve("OEBPS", "Text/chapter%201.xhtml#top"),
            "OEBPS/Text/chapter 1.xhtml"
        );
    }
}
