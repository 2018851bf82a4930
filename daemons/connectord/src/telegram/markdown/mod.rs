//! The agent's Markdown as Telegram shows it: MarkdownV2 escaping exactly
//! the characters the Bot API names, plain text (link addresses written
//! out) for when Telegram cannot parse that, and parts of at most 4,096
//! characters that never break a code block.
//!
//! Lengths are counted as Telegram counts them: UTF-16 code units (an
//! emoji outside the BMP is two). The Markdown is parsed once into lines
//! ("units"); each unit is rendered both ways, and parts are packed from
//! rendered units, so every part is within the limit after conversion and
//! valid on its own: only a code block spans lines in the output, and a
//! block cut at a part boundary is closed there and reopened with its
//! language in the next part.

mod inline;
mod pack;
mod render;
#[cfg(test)]
mod tests;
mod units;

use pack::pack;
use units::{code_room, cut_chars, cut_words, join, units, Fence, Kind, Unit};

/// Telegram's limit on a message's text.
pub const LIMIT: usize = 4096;

/// The longest language tag kept on a code block (a longer one is dropped).
const MAX_LANG: usize = 32;

/// Characters the Bot API says must be escaped outside code and URLs.
const RESERVED: &str = "_*[]()~`>#+-=|{}.!\\";

/// The length Telegram counts: UTF-16 code units.
pub fn utf16_len(s: &str) -> usize {
    s.chars().map(char::len_utf16).sum()
}

/// The whole answer as MarkdownV2 (not split).
pub fn to_markdown_v2(markdown: &str) -> String {
    join(
        units(markdown, usize::MAX)
            .iter()
            .map(|u| Some(u.out.as_str())),
    )
}

/// The whole answer as plain text: no markup, links as "text (address)",
/// code blocks as their lines.
pub fn to_plain(markdown: &str) -> String {
    join(
        units(markdown, usize::MAX)
            .iter()
            .map(|u| u.plain.as_deref()),
    )
}

/// One message of an answer: its MarkdownV2 and the same part as plain
/// text, to send instead when Telegram cannot parse the MarkdownV2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub v2: String,
    pub plain: String,
}

/// The answer as MarkdownV2 messages of at most `limit` UTF-16 units each.
pub fn parts(markdown: &str, limit: usize) -> Vec<Part> {
    let units = units(markdown, limit);
    pack(&units, limit)
        .into_iter()
        // A part whose plain text is empty (an empty code block) is left
        // out: Telegram refuses a message with nothing to show.
        .filter(|(_, plain)| !plain.trim().is_empty())
        .map(|(v2, plain)| Part { v2, plain })
        .collect()
}

/// `text` (plain text or Markdown) cut into parts of at most `limit`
/// UTF-16 units, at a paragraph, a line or a space when it can; a fenced
/// code block cut at a part boundary is closed at the end of the part and
/// reopened with its fence and language at the start of the next.
pub fn split(text: &str, limit: usize) -> Vec<String> {
    let limit = limit.max(1);
    let mut units = Vec::new();
    let mut fence: Option<Fence> = None;
    for line in text.lines() {
        if let Some(f) = &fence {
            if f.closes(line) {
                units.push(Unit::new(line.to_string(), None, Kind::Close));
                fence = None;
            } else {
                let room = code_room(limit, &f.open, &f.close);
                for piece in cut_chars(line, room, |c| c.len_utf16()) {
                    units.push(Unit::new(piece, None, Kind::Code));
                }
            }
            continue;
        }
        if let Some(f) = Fence::opening(line) {
            if utf16_len(line) + utf16_len(&f.close) + 2 < limit {
                units.push(Unit::new(
                    line.to_string(),
                    None,
                    Kind::Open {
                        close: f.close.clone(),
                    },
                ));
                fence = Some(f);
                continue;
            }
        }
        if line.trim().is_empty() {
            units.push(Unit::new(String::new(), None, Kind::Blank));
            continue;
        }
        for piece in cut_words(line, limit) {
            units.push(Unit::new(piece, None, Kind::Text));
        }
    }
    pack(&units, limit)
        .into_iter()
        .map(|(out, _)| out)
        .collect()
}
