//! PDF: text page by page under `## Page N`, by pdf-extract (fonts'
//! encodings and ToUnicode maps, spaces and line breaks from where glyphs
//! sit), on a document lopdf loaded once. A page with no text but an image
//! is a probable scan, said in the text and in a note.

use std::panic::{catch_unwind, AssertUnwindSafe};

use lopdf::{Dictionary, Document, Object, ObjectId};

use super::{cause, Builder, DocKind, Extracted, Refusal};

/// How far into the file the header may start, and how near its end the
/// end-of-file mark must be (the window readers have always allowed).
const SLACK: usize = 1024;

pub(super) fn read(bytes: &[u8]) -> Result<Extracted, Refusal> {
    let head = &bytes[..bytes.len().min(SLACK)];
    if memchr::memmem::find(head, b"%PDF-").is_none() {
        return Err(Refusal::NotWhatItSays(DocKind::Pdf.word().into()));
    }
    // lopdf rebuilds a file whose end is gone from what is left; a cut file
    // would read as a shorter document without a word of what was lost.
    let tail = &bytes[bytes.len().saturating_sub(SLACK)..];
    if memchr::memmem::find(tail, b"%%EOF").is_none() {
        return Err(Refusal::Damaged(
            "cut short: it has no end-of-file mark".into(),
        ));
    }
    let doc = match Document::load_mem(bytes) {
        Ok(doc) => doc,
        Err(lopdf::Error::Decryption(_)) => return Err(Refusal::Encrypted),
        Err(e) => return Err(Refusal::Damaged(cause(e))),
    };
    // Loading opens a document whose password is empty; one still
    // encrypted after it needs a password.
    if doc.is_encrypted() {
        return Err(Refusal::Encrypted);
    }
    let pages = doc.get_pages();
    if pages.is_empty() {
        return Err(Refusal::Damaged("it has no pages".into()));
    }
    let mut out = Builder::default();
    for (&number, &id) in &pages {
        out.part(format!("page {number}"), &format!("## Page {number}"));
        match page_text(&doc, number) {
            Ok(text) if !text.is_empty() => out.line(&text),
            Ok(_) if has_image(&doc, id) => {
                out.line("[no text layer: a probable scan]");
                out.note(format!("page {number} has no text layer: a probable scan"));
            }
            Ok(_) => {}
            Err(why) => out.note(format!("page {number} could not be read ({why})")),
        }
    }
    Ok(out.finish())
}

/// A page's text, tidied. pdf-extract panics on fonts and colour spaces it
/// does not know where a `Result` would do; such a page is read again by
/// lopdf's plainer extraction (no spacing by position), and only when both
/// fail is it left out.
fn page_text(doc: &Document, number: u32) -> Result<String, String> {
    let extracted = catch_unwind(AssertUnwindSafe(|| {
        let mut text = String::new();
        let done = {
            let mut output = pdf_extract::PlainTextOutput::new(&mut text);
            pdf_extract::output_doc_page(doc, &mut output, number)
        };
        done.map(|()| text)
    }));
    let text = match extracted {
        Ok(Ok(text)) => text,
        Ok(Err(_)) | Err(_) => doc.extract_text(&[number]).map_err(cause)?,
    };
    Ok(tidy(&text))
}

/// Lines without trailing blanks, at most one empty line in a row, none at
/// either end.
fn tidy(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank_run = 0;
    for line in text.lines().map(str::trim_end) {
        if line.trim().is_empty() {
            blank_run += 1;
            continue;
        }
        if !out.is_empty() {
            out.push_str(if blank_run > 0 { "\n\n" } else { "\n" });
        }
        blank_run = 0;
        out.push_str(line);
    }
    out
}

/// Whether a page draws an image: an image XObject among its resources
/// (its own or inherited), or inside a form XObject it uses.
fn has_image(doc: &Document, page: ObjectId) -> bool {
    let Ok((own, inherited)) = doc.get_page_resources(page) else {
        return false;
    };
    own.into_iter()
        .chain(
            inherited
                .iter()
                .filter_map(|id| doc.get_dictionary(*id).ok()),
        )
        .any(|resources| resources_draw_image(doc, resources, 2))
}

fn resources_draw_image(doc: &Document, resources: &Dictionary, depth: u8) -> bool {
    let Some(xobjects) = resources.get(b"XObject").ok().and_then(|o| dict(doc, o)) else {
        return false;
    };
    xobjects.iter().any(|(_, value)| {
        let Some(stream) = deref(doc, value).and_then(|o| o.as_stream().ok()) else {
            return false;
        };
        match stream.dict.get(b"Subtype").and_then(Object::as_name) {
            Ok(b"Image") => true,
            Ok(b"Form") if depth > 0 => stream
                .dict
                .get(b"Resources")
                .ok()
                .and_then(|o| dict(doc, o))
                .is_some_and(|r| resources_draw_image(doc, r, depth - 1)),
            _ => false,
        }
    })
}

fn deref<'a>(doc: &'a Document, object: &'a Object) -> Option<&'a Object> {
    match object {
        Object::Reference(id) => doc.get_object(*id).ok(),
        other => Some(other),
    }
}

fn dict<'a>(doc: &'a Document, object: &'a Object) -> Option<&'a Dictionary> {
    deref(doc, object).and_then(|o| o.as_dict().ok())
}

#[cfg(test)]
mod tests {
    use super::tidy;

    #[test]
    fn text_is_tidied() {
        assert_eq!(
            tidy("\n\n  Hello  \nworld\n\n\n\nnext\n\n"),
            "  Hello\nworld\n\nnext"
        );
    }
}
