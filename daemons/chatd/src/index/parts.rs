//! A version of a file cut into the parts the index keeps: a document by
//! its pages, sheets, slides or chapters (the reader's marks), a text file
//! by runs of lines. Each part knows the line it starts at, so a hit names
//! the line read_file or read_document shows it on.

use std::io::Read;

use crate::documents::Extracted;
use crate::store::index::{Entry, PartRow};
use crate::words::IndexState;

/// The most bytes of a text file indexed; a note says the rest was not.
pub const MAX_TEXT_BYTES: u64 = 8 << 20;
/// A text file's part ends at the first line end past this many bytes …
const PART_BYTES: usize = 32 << 10;
/// … or after this many lines.
const PART_LINES: usize = 500;
/// A NUL in the first bytes: binary, searched by name only.
const BINARY_PROBE: usize = 8 << 10;

/// The entry of a text file's bytes read from `source`.
pub fn of_text(sha: &str, source: &mut impl Read) -> std::io::Result<Entry> {
    let mut bytes = Vec::new();
    source.take(MAX_TEXT_BYTES + 1).read_to_end(&mut bytes)?;
    let cut = bytes.len() as u64 > MAX_TEXT_BYTES;
    if bytes[..bytes.len().min(BINARY_PROBE)].contains(&0) {
        return Ok(names(sha, "binary: its bytes are not text"));
    }
    bytes.truncate(MAX_TEXT_BYTES as usize);
    let text = String::from_utf8_lossy(&bytes);
    Ok(Entry {
        sha: sha.to_string(),
        state: IndexState::Text,
        parts: runs_of_lines(&text, None, 1),
        note: cut.then(|| "only its first 8 MiB are searched".to_string()),
    })
}

/// The entry of a document as the reader read it.
pub fn of_document(sha: &str, extracted: &Extracted) -> Entry {
    let text = &extracted.text;
    let mut parts = Vec::new();
    // Where each part starts, and the text before the first mark.
    let mut starts: Vec<(Option<&str>, usize)> = Vec::new();
    if extracted.parts.first().is_none_or(|p| p.start > 0) {
        starts.push((None, 0));
    }
    for part in &extracted.parts {
        starts.push((Some(part.label.as_str()), part.start.min(text.len())));
    }
    let mut line = 1u64;
    let mut seen = 0usize;
    for (i, &(label, start)) in starts.iter().enumerate() {
        let end = starts.get(i + 1).map_or(text.len(), |next| next.1);
        let (Some(before), Some(body)) = (text.get(seen..start), text.get(start..end.max(start)))
        else {
            // A mark off a character boundary: the reader's bug, not the
            // file's; the rest is not indexed rather than misnumbered.
            break;
        };
        line += before.matches('\n').count() as u64;
        seen = start;
        parts.extend(runs_of_lines(body, label, line));
    }
    parts.retain(|p| !p.body.trim().is_empty());
    Entry {
        sha: sha.to_string(),
        state: IndexState::Text,
        parts,
        note: (!extracted.notes.is_empty()).then(|| extracted.notes.join("; ")),
    }
}

/// A version searched by its name only, and why.
pub fn names(sha: &str, why: &str) -> Entry {
    Entry {
        sha: sha.to_string(),
        state: IndexState::Names,
        parts: Vec::new(),
        note: Some(why.to_string()),
    }
}

/// `text` (which starts at line `first`) as parts of at most
/// [`PART_LINES`] lines, each ending at a line's end.
fn runs_of_lines(text: &str, label: Option<&str>, first: u64) -> Vec<PartRow> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut lines = 0;
    let mut line = first;
    for (at, _) in text.match_indices('\n') {
        lines += 1;
        if lines >= PART_LINES || at + 1 - start >= PART_BYTES {
            parts.push(PartRow {
                label: label.map(str::to_string),
                first_line: line,
                body: text[start..at + 1].to_string(),
            });
            line += lines as u64;
            start = at + 1;
            lines = 0;
        }
    }
    if start < text.len() {
        parts.push(PartRow {
            label: label.map(str::to_string),
            first_line: line,
            body: text[start..].to_string(),
        });
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::documents::Part;

    #[test]
    fn each_part_knows_its_first_line() {
        let text = "intro\n## Page 1\na\nb\n## Page 2\nc\n";
        let extracted = Extracted {
            text: text.into(),
            parts: vec![
                Part {
                    label: "page 1".into(),
                    start: 6,
                },
                Part {
                    label: "page 2".into(),
                    start: 20,
                },
            ],
            notes: vec!["page 3 is a probable scan".into()],
        };
        let entry = of_document("s", &extracted);
        let got: Vec<(Option<&str>, u64, &str)> = entry
            .parts
            .iter()
            .map(|p| (p.label.as_deref(), p.first_line, p.body.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (None, 1, "intro\n"),
                (Some("page 1"), 2, "## Page 1\na\nb\n"),
                (Some("page 2"), 5, "## Page 2\nc\n"),
            ]
        );
        assert_eq!(entry.note.as_deref(), Some("page 3 is a probable scan"));
    }

    #[test]
    fn a_long_text_is_cut_at_line_ends_and_numbered_on() {
        let text: String = (1..=1_200).map(|n| format!("line {n}\n")).collect();
        let entry = of_text("s", &mut text.as_bytes()).unwrap();
        let firsts: Vec<u64> = entry.parts.iter().map(|p| p.first_line).collect();
        assert_eq!(firsts, [1, 501, 1001]);
        assert!(entry.parts[1].body.starts_with("line 501\n"));
        assert_eq!(entry.chars() as usize, text.len());
    }

    #[test]
    fn binary_bytes_are_searched_by_name() {
        let entry = of_text("s", &mut &b"PK\x03\x04\0\0rest"[..]).unwrap();
        assert_eq!(entry.state, IndexState::Names);
        assert!(entry.parts.is_empty());
    }
}
