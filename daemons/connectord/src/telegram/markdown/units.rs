//! The Markdown read into units, one an output line: fences and code lines,
//! headings, bullets, rules and text, a line too long for a part cut at
//! words (or characters) so every unit fits.

use super::inline::{inline, push_text, Run, Style};
use super::render::{
    escape_code, escaped_cost, is_code_reserved, markers_cost, render_plain, render_v2,
};
use super::{utf16_len, MAX_LANG};
use crate::markup::is_rule;

/// One output line: how it is sent, how it reads as plain text (`None`: not
/// there, like a fence), and what it is to the packer.
#[derive(Debug, Clone)]
pub(super) struct Unit {
    pub(super) out: String,
    pub(super) plain: Option<String>,
    pub(super) kind: Kind,
    pub(super) len: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Kind {
    Text,
    Blank,
    /// A code block's first line; `close` is the line that ends it.
    Open {
        close: String,
    },
    Code,
    Close,
}

impl Unit {
    pub(super) fn new(out: String, plain: Option<String>, kind: Kind) -> Unit {
        Unit {
            len: utf16_len(&out),
            out,
            plain,
            kind,
        }
    }
}

pub(super) fn join<'a>(lines: impl Iterator<Item = Option<&'a str>>) -> String {
    lines.flatten().collect::<Vec<_>>().join("\n")
}

/// A fenced code block's opening (``` or ~~~, three or more).
pub(super) struct Fence {
    pub(super) ch: char,
    pub(super) n: usize,
    pub(super) info: String,
    pub(super) open: String,
    pub(super) close: String,
}

impl Fence {
    pub(super) fn opening(line: &str) -> Option<Fence> {
        let trimmed = line.trim_start_matches(' ');
        if line.len() - trimmed.len() > 3 {
            return None;
        }
        let ch = trimmed.chars().next().filter(|c| *c == '`' || *c == '~')?;
        let n = trimmed.chars().take_while(|c| *c == ch).count();
        if n < 3 {
            return None;
        }
        let info = trimmed[n..].trim();
        // CommonMark: a backtick fence's info string has no backtick.
        if ch == '`' && info.contains('`') {
            return None;
        }
        Some(Fence {
            ch,
            n,
            info: info.to_string(),
            open: line.to_string(),
            close: std::iter::repeat_n(ch, n).collect(),
        })
    }

    pub(super) fn closes(&self, line: &str) -> bool {
        let trimmed = line.trim();
        let n = trimmed.chars().take_while(|c| *c == self.ch).count();
        n >= self.n && trimmed.chars().all(|c| c == self.ch)
    }
}

/// The language of a code block as Telegram takes it (no spaces, no
/// backticks): the info string's first word, if it looks like one.
pub(super) fn language(info: &str) -> String {
    let word = info.split_whitespace().next().unwrap_or("");
    let ok = word.len() <= MAX_LANG
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+#-_.".contains(c));
    if ok {
        word.to_string()
    } else {
        String::new()
    }
}

/// Room for one code line in a part that opens and closes its block.
pub(super) fn code_room(limit: usize, open: &str, close: &str) -> usize {
    limit
        .saturating_sub(utf16_len(open) + utf16_len(close) + 2)
        .max(1)
}

/// The agent's Markdown as units, every one short enough for a part of
/// `limit` on its own (with its block's fences).
pub(super) fn units(markdown: &str, limit: usize) -> Vec<Unit> {
    let mut units = Vec::new();
    let mut block: Option<(Fence, String)> = None;
    for line in markdown.lines() {
        if let Some((fence, open)) = &block {
            if fence.closes(line) {
                units.push(Unit::new("```".into(), None, Kind::Close));
                block = None;
            } else {
                let room = code_room(limit, open, "```");
                for piece in cut_chars(line, room, |c| {
                    c.len_utf16() + usize::from(is_code_reserved(c))
                }) {
                    units.push(Unit::new(escape_code(&piece), Some(piece), Kind::Code));
                }
            }
            continue;
        }
        if let Some(fence) = Fence::opening(line) {
            let open = format!("```{}", language(&fence.info));
            units.push(Unit::new(
                open.clone(),
                None,
                Kind::Open {
                    close: "```".into(),
                },
            ));
            block = Some((fence, open));
            continue;
        }
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        if trimmed.is_empty() {
            units.push(Unit::new(String::new(), Some(String::new()), Kind::Blank));
            continue;
        }
        let plain_style = Style::default();
        let (prefix_v2, prefix_plain, runs) = if let Some(text) = heading(trimmed) {
            let bold = Style {
                bold: true,
                ..Style::default()
            };
            (String::new(), String::new(), inline(text, &bold))
        } else if is_rule(trimmed) {
            ("——————".into(), "——————".into(), Vec::new())
        } else if let Some(text) = trimmed.strip_prefix('>') {
            let text = text.trim_start_matches('>');
            let text = text.strip_prefix(' ').unwrap_or(text);
            if text.trim().is_empty() {
                // An empty quote line shows nothing: a blank line.
                units.push(Unit::new(String::new(), Some(String::new()), Kind::Blank));
                continue;
            }
            (">".into(), "> ".into(), inline(text, &plain_style))
        } else if let Some(text) = bullet(trimmed) {
            let prefix = format!("{}• ", " ".repeat(indent.chars().count()));
            (prefix.clone(), prefix, inline(text, &plain_style))
        } else {
            let mut runs = Vec::new();
            push_text(&mut runs, indent, &plain_style);
            runs.extend(inline(trimmed, &plain_style));
            (String::new(), String::new(), runs)
        };
        units.extend(text_units(&prefix_v2, &prefix_plain, runs, limit));
    }
    if block.is_some() {
        // An answer that never closed its block: close it.
        units.push(Unit::new("```".into(), None, Kind::Close));
    }
    units
}

fn heading(line: &str) -> Option<&str> {
    let hashes = line.chars().take_while(|c| *c == '#').count();
    if !(1..=6).contains(&hashes) {
        return None;
    }
    let rest = &line[hashes..];
    if !rest.is_empty() && !rest.starts_with(' ') {
        return None;
    }
    let text = rest.trim();
    // A closing run of #s is not part of the heading.
    let text = text.trim_end_matches('#').trim_end();
    Some(text)
}

fn bullet(line: &str) -> Option<&str> {
    ["- ", "* ", "+ "]
        .iter()
        .find_map(|marker| line.strip_prefix(marker))
}

/// A text line's unit, or several when it is longer than `limit`: cut
/// between words (a word longer than a part is cut anywhere), each piece
/// with its entities closed and reopened, so every piece is valid alone.
fn text_units(prefix_v2: &str, prefix_plain: &str, runs: Vec<Run>, limit: usize) -> Vec<Unit> {
    let mut out = prefix_v2.to_string();
    render_v2(&runs, &mut out);
    if utf16_len(&out) <= limit {
        let mut plain = prefix_plain.to_string();
        render_plain(&runs, &mut plain);
        return vec![Unit::new(out, Some(plain), Kind::Text)];
    }
    // A prefix that would leave less than half a part for the text (a
    // bullet indented past the limit) loses its indent, then itself: the
    // first piece is the prefix and at least one token, and must fit.
    let fits = |p: &str| utf16_len(p) <= limit / 2;
    let (prefix_v2, prefix_plain) = if fits(prefix_v2) {
        (prefix_v2, prefix_plain)
    } else if fits(prefix_v2.trim_start()) {
        (prefix_v2.trim_start(), prefix_plain.trim_start())
    } else {
        ("", "")
    };
    // A piece's cost is bounded by rendering each token alone: a run
    // continued from the previous token never costs more than that.
    let room = limit.saturating_sub(utf16_len(prefix_v2)).max(1);
    let mut tokens: Vec<Run> = Vec::new();
    for run in runs {
        let mut style = run.style.clone();
        if markers_cost(&style) + 1 > room {
            style.link = None;
        }
        let avail = room.saturating_sub(markers_cost(&style)).max(1);
        for word in words(&run.text) {
            for piece in cut_chars(&word, avail, |c| escaped_cost(c, style.code)) {
                tokens.push(Run {
                    text: piece,
                    style: style.clone(),
                });
            }
        }
    }
    let mut units = Vec::new();
    let mut piece: Vec<Run> = Vec::new();
    let mut cost = 0;
    let mut first = true;
    let mut flush = |piece: &mut Vec<Run>, first: &mut bool| {
        if piece.is_empty() {
            return;
        }
        let (mut v2, mut plain) = if *first {
            (prefix_v2.to_string(), prefix_plain.to_string())
        } else {
            (String::new(), String::new())
        };
        *first = false;
        render_v2(piece, &mut v2);
        render_plain(piece, &mut plain);
        units.push(Unit::new(v2, Some(plain), Kind::Text));
        piece.clear();
    };
    for token in tokens {
        let token_cost = markers_cost(&token.style)
            + token
                .text
                .chars()
                .map(|c| escaped_cost(c, token.style.code))
                .sum::<usize>();
        if !piece.is_empty() && cost + token_cost > room {
            flush(&mut piece, &mut first);
            cost = 0;
        }
        cost += token_cost;
        piece.push(token);
    }
    flush(&mut piece, &mut first);
    units
}

/// A text cut after each run of whitespace (the whitespace stays with the
/// word before it).
pub(super) fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut in_space = false;
    for c in text.chars() {
        if in_space && !c.is_whitespace() {
            out.push(std::mem::take(&mut current));
        }
        in_space = c.is_whitespace();
        current.push(c);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// `text` in pieces whose cost (per character) is at most `room` each.
pub(super) fn cut_chars(text: &str, room: usize, cost: impl Fn(char) -> usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut used = 0;
    for c in text.chars() {
        let c_cost = cost(c);
        if !current.is_empty() && used + c_cost > room {
            out.push(std::mem::take(&mut current));
            used = 0;
        }
        used += c_cost;
        current.push(c);
    }
    if !current.is_empty() || out.is_empty() {
        out.push(current);
    }
    out
}

/// A plain line in pieces of at most `limit`, cut at the last space that
/// fits (the space dropped), else anywhere.
pub(super) fn cut_words(line: &str, limit: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest: &str = line;
    while utf16_len(rest) > limit {
        let mut used = 0;
        let mut end = 0;
        let mut last_space = None;
        for (i, c) in rest.char_indices() {
            if used + c.len_utf16() > limit {
                break;
            }
            used += c.len_utf16();
            end = i + c.len_utf8();
            if c == ' ' && i > 0 {
                last_space = Some(i);
            }
        }
        match last_space {
            Some(space) => {
                out.push(rest[..space].to_string());
                rest = &rest[space + 1..];
            }
            None => {
                out.push(rest[..end].to_string());
                rest = &rest[end..];
            }
        }
    }
    out.push(rest.to_string());
    out
}
