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

use crate::markup::{code_close, is_rule, run_len};

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
    pack(&units, limit, true)
        .into_iter()
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
    pack(&units, limit, false)
        .into_iter()
        .map(|(out, _)| out)
        .collect()
}

// ---------------------------------------------------------------- units

/// One output line: how it is sent, how it reads as plain text (`None`: not
/// there, like a fence), and what it is to the packer.
#[derive(Debug, Clone)]
struct Unit {
    out: String,
    plain: Option<String>,
    kind: Kind,
    len: usize,
}

#[derive(Debug, Clone, PartialEq)]
enum Kind {
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
    fn new(out: String, plain: Option<String>, kind: Kind) -> Unit {
        Unit {
            len: utf16_len(&out),
            out,
            plain,
            kind,
        }
    }
}

fn join<'a>(lines: impl Iterator<Item = Option<&'a str>>) -> String {
    lines.flatten().collect::<Vec<_>>().join("\n")
}

/// A fenced code block's opening (``` or ~~~, three or more).
struct Fence {
    ch: char,
    n: usize,
    info: String,
    open: String,
    close: String,
}

impl Fence {
    fn opening(line: &str) -> Option<Fence> {
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

    fn closes(&self, line: &str) -> bool {
        let trimmed = line.trim();
        let n = trimmed.chars().take_while(|c| *c == self.ch).count();
        n >= self.n && trimmed.chars().all(|c| c == self.ch)
    }
}

/// The language of a code block as Telegram takes it (no spaces, no
/// backticks): the info string's first word, if it looks like one.
fn language(info: &str) -> String {
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
fn code_room(limit: usize, open: &str, close: &str) -> usize {
    limit
        .saturating_sub(utf16_len(open) + utf16_len(close) + 2)
        .max(1)
}

/// The agent's Markdown as units, every one short enough for a part of
/// `limit` on its own (with its block's fences).
fn units(markdown: &str, limit: usize) -> Vec<Unit> {
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
fn words(text: &str) -> Vec<String> {
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
fn cut_chars(text: &str, room: usize, cost: impl Fn(char) -> usize) -> Vec<String> {
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
fn cut_words(line: &str, limit: usize) -> Vec<String> {
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

// ---------------------------------------------------------------- packing

/// Units into parts of at most `limit`: (the sent text, its plain text).
/// With `visible`, a part whose plain text is empty (an empty code block)
/// is left out: Telegram refuses a message with nothing to show.
fn pack(units: &[Unit], limit: usize, visible: bool) -> Vec<(String, String)> {
    let mut parts = Vec::new();
    let mut i = 0;
    // The Open unit of the block units[i] is inside, if any.
    let mut open: Option<usize> = None;
    while i < units.len() {
        if open.is_none() && units[i].kind == Kind::Blank {
            i += 1;
            continue;
        }
        if open.is_some() && units[i].kind == Kind::Close {
            // The block ended exactly at the cut: nothing to reopen.
            open = None;
            i += 1;
            continue;
        }
        let start_open = open;
        let mut cost = start_open.map_or(0, |o| units[o].len);
        // (index after the unit, block open after it, cost so far)
        let mut taken: Vec<(usize, Option<usize>, usize)> = Vec::new();
        let mut paragraph: Option<usize> = None;
        let mut j = i;
        while j < units.len() {
            let unit = &units[j];
            let sep = usize::from(start_open.is_some() || !taken.is_empty());
            let after = match unit.kind {
                Kind::Open { .. } => Some(j),
                Kind::Close => None,
                _ => taken.last().map_or(start_open, |t| t.1),
            };
            let reserve = after.map_or(0, |o| 1 + close_of(&units[o]).len());
            if !taken.is_empty() && cost + sep + unit.len + reserve > limit {
                break;
            }
            let outside = taken.last().map_or(start_open, |t| t.1).is_none();
            // Before a block or after a blank line: a good place to cut.
            if outside
                && !taken.is_empty()
                && (unit.kind == Kind::Blank || matches!(unit.kind, Kind::Open { .. }))
                && cost * 2 >= limit
            {
                paragraph = Some(taken.len());
            }
            cost += sep + unit.len;
            taken.push((j + 1, after, cost));
            j += 1;
        }
        let mut keep = if j < units.len() {
            paragraph.unwrap_or(taken.len())
        } else {
            taken.len()
        };
        // Never end a part on a block's opening line.
        while keep > 1 && matches!(units[taken[keep - 1].0 - 1].kind, Kind::Open { .. }) {
            keep -= 1;
        }
        let (end, end_open, _) = taken[keep - 1];
        parts.push(render_part(units, i, end, start_open, end_open));
        i = end;
        open = end_open;
    }
    parts.retain(|(out, plain)| !out.trim().is_empty() && (!visible || !plain.trim().is_empty()));
    parts
}

fn close_of(unit: &Unit) -> &str {
    match &unit.kind {
        Kind::Open { close } => close,
        _ => "",
    }
}

fn render_part(
    units: &[Unit],
    start: usize,
    mut end: usize,
    reopen: Option<usize>,
    still_open: Option<usize>,
) -> (String, String) {
    if still_open.is_none() {
        while end > start && units[end - 1].kind == Kind::Blank {
            end -= 1;
        }
    }
    let mut out: Vec<&str> = Vec::new();
    let mut plain: Vec<&str> = Vec::new();
    if let Some(o) = reopen {
        out.push(&units[o].out);
    }
    for unit in &units[start..end] {
        out.push(&unit.out);
        if let Some(p) = &unit.plain {
            plain.push(p);
        }
    }
    if let Some(o) = still_open {
        out.push(close_of(&units[o]));
    }
    (out.join("\n"), plain.join("\n"))
}

// ---------------------------------------------------------------- inline

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Style {
    bold: bool,
    italic: bool,
    strike: bool,
    code: bool,
    link: Option<String>,
}

/// Text with one style.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Run {
    text: String,
    style: Style,
}

fn push_text(runs: &mut Vec<Run>, text: &str, style: &Style) {
    if text.is_empty() {
        return;
    }
    match runs.last_mut() {
        Some(last) if last.style == *style => last.text.push_str(text),
        _ => runs.push(Run {
            text: text.to_string(),
            style: style.clone(),
        }),
    }
}

fn push_char(runs: &mut Vec<Run>, c: char, style: &Style) {
    let mut buf = [0u8; 4];
    push_text(runs, c.encode_utf8(&mut buf), style);
}

fn inline(text: &str, style: &Style) -> Vec<Run> {
    let chars: Vec<char> = text.chars().collect();
    let mut runs = Vec::new();
    parse_inline(&chars, style, &mut runs);
    runs
}

/// From `j` (a backtick): past the code span starting there, or past its
/// backticks when it never closes.
fn skip_code(c: &[char], j: usize) -> usize {
    let n = run_len(c, j, '`');
    code_close(c, j + n, n).map_or(j + n, |close| close + n)
}

fn parse_inline(c: &[char], style: &Style, out: &mut Vec<Run>) {
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch == '\\' && i + 1 < c.len() && c[i + 1].is_ascii_punctuation() {
            push_char(out, c[i + 1], style);
            i += 2;
            continue;
        }
        if ch == '`' {
            let n = run_len(c, i, '`');
            if let Some(close) = code_close(c, i + n, n) {
                let mut code: String = c[i + n..close].iter().collect();
                if code.len() >= 2
                    && code.starts_with(' ')
                    && code.ends_with(' ')
                    && !code.trim().is_empty()
                {
                    code = code[1..code.len() - 1].to_string();
                }
                let mut code_style = style.clone();
                code_style.code = true;
                push_text(out, &code, &code_style);
                i = close + n;
            } else {
                for _ in 0..n {
                    push_char(out, '`', style);
                }
                i += n;
            }
            continue;
        }
        if ch == '*' || ch == '_' || ch == '~' {
            let n = run_len(c, i, ch);
            if let Some((k, close)) = emphasis(c, i, n, ch) {
                let mut inner = style.clone();
                match (ch, k) {
                    ('~', _) => inner.strike = true,
                    (_, 1) => inner.italic = true,
                    (_, 2) => inner.bold = true,
                    _ => {
                        inner.bold = true;
                        inner.italic = true;
                    }
                }
                parse_inline(&c[i + k..close], &inner, out);
                i = close + k;
            } else {
                for _ in 0..n {
                    push_char(out, ch, style);
                }
                i += n;
            }
            continue;
        }
        if ch == '!' && c.get(i + 1) == Some(&'[') {
            if let Some(link) = link_at(c, i + 1) {
                add_link(c, &link, style, out);
                i = link.after;
                continue;
            }
        }
        if ch == '[' {
            if let Some(link) = link_at(c, i) {
                add_link(c, &link, style, out);
                i = link.after;
                continue;
            }
        }
        if ch == '<' {
            if let Some(end) = c[i + 1..].iter().position(|x| *x == '>') {
                let inner: String = c[i + 1..i + 1 + end].iter().collect();
                if linkable(&inner) && !inner.contains(char::is_whitespace) {
                    let mut link_style = style.clone();
                    link_style.link = Some(inner.clone());
                    push_text(out, &inner, &link_style);
                    i += end + 2;
                    continue;
                }
            }
        }
        push_char(out, ch, style);
        i += 1;
    }
}

/// Whether the delimiter run of `n` × `ch` at `i` opens emphasis, and if so
/// how many delimiters it uses and where its closer starts.
fn emphasis(c: &[char], i: usize, n: usize, ch: char) -> Option<(usize, usize)> {
    let k = match ch {
        '~' if n == 2 => 2,
        '~' => return None,
        _ if n <= 3 => n,
        _ => return None,
    };
    let next = *c.get(i + n)?;
    if next.is_whitespace() {
        return None;
    }
    if ch == '_' && i > 0 && c[i - 1].is_alphanumeric() {
        return None;
    }
    let mut j = i + n;
    while j < c.len() {
        match c[j] {
            '\\' => j += 2,
            '`' => j = skip_code(c, j),
            x if x == ch => {
                let m = run_len(c, j, ch);
                let before_ok = !c[j - 1].is_whitespace();
                let after_ok = ch != '_' || c.get(j + m).is_none_or(|a| !a.is_alphanumeric());
                if m == k && before_ok && after_ok && j > i + k {
                    return Some((k, j));
                }
                j += m;
            }
            _ => j += 1,
        }
    }
    None
}

struct LinkAt {
    text: (usize, usize),
    url: String,
    after: usize,
}

/// `[text](url)` starting at `i` (a `[`).
fn link_at(c: &[char], i: usize) -> Option<LinkAt> {
    let mut depth = 0;
    let mut j = i;
    let close = loop {
        match c.get(j)? {
            '\\' => j += 2,
            '`' => j = skip_code(c, j),
            '[' => {
                depth += 1;
                j += 1;
            }
            ']' => {
                depth -= 1;
                if depth == 0 {
                    break j;
                }
                j += 1;
            }
            _ => j += 1,
        }
    };
    if c.get(close + 1) != Some(&'(') {
        return None;
    }
    let mut depth = 0;
    let mut k = close + 1;
    let end = loop {
        match c.get(k)? {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    break k;
                }
            }
            _ => {}
        }
        k += 1;
    };
    let inside: String = c[close + 2..end].iter().collect();
    let inside = inside.trim();
    let url = match inside.strip_prefix('<').and_then(|u| u.split_once('>')) {
        Some((url, _)) => url.to_string(),
        // A title after the address ("url "title"") is not part of it.
        None => inside.split_whitespace().next().unwrap_or("").to_string(),
    };
    if url.is_empty() {
        return None;
    }
    Some(LinkAt {
        text: (i + 1, close),
        url,
        after: end + 1,
    })
}

fn linkable(url: &str) -> bool {
    ["http://", "https://", "tg://", "mailto:"]
        .iter()
        .any(|scheme| url.len() > scheme.len() && url.to_ascii_lowercase().starts_with(scheme))
}

fn add_link(c: &[char], link: &LinkAt, style: &Style, out: &mut Vec<Run>) {
    let text = &c[link.text.0..link.text.1];
    if linkable(&link.url) {
        let mut link_style = style.clone();
        link_style.link = Some(link.url.clone());
        if text.is_empty() {
            push_text(out, &link.url, &link_style);
        } else {
            parse_inline(text, &link_style, out);
        }
    } else {
        // Not an address Telegram opens (a relative path): say it in words.
        parse_inline(text, style, out);
        push_text(out, &format!(" ({})", link.url), style);
    }
}

// ---------------------------------------------------------------- rendering

#[derive(Debug, Clone, PartialEq, Eq)]
enum Entity {
    Link(String),
    Bold,
    Italic,
    Strike,
    Code,
}

/// The entities a style needs, outermost first; code is always innermost
/// (it cannot contain another entity).
fn entities(style: &Style) -> Vec<Entity> {
    let mut out = Vec::new();
    if let Some(url) = &style.link {
        out.push(Entity::Link(url.clone()));
    }
    if style.bold {
        out.push(Entity::Bold);
    }
    if style.italic {
        out.push(Entity::Italic);
    }
    if style.strike {
        out.push(Entity::Strike);
    }
    if style.code {
        out.push(Entity::Code);
    }
    out
}

fn markers_cost(style: &Style) -> usize {
    entities(style)
        .iter()
        .map(|e| match e {
            Entity::Link(url) => 4 + url.chars().map(escaped_url_cost).sum::<usize>(),
            _ => 2,
        })
        .sum()
}

fn open(entity: &Entity, out: &mut String) {
    out.push_str(match entity {
        Entity::Link(_) => "[",
        Entity::Bold => "*",
        Entity::Italic => "_",
        Entity::Strike => "~",
        Entity::Code => "`",
    });
}

fn close(entity: &Entity, out: &mut String) {
    match entity {
        Entity::Link(url) => {
            out.push_str("](");
            escape_url(url, out);
            out.push(')');
        }
        Entity::Bold => out.push('*'),
        Entity::Italic => out.push('_'),
        Entity::Strike => out.push('~'),
        Entity::Code => out.push('`'),
    }
}

/// Runs as MarkdownV2: an entity stays open while the runs after it keep
/// it, so the same marker never closes and reopens back to back (`__`
/// would read as underline).
fn render_v2(runs: &[Run], out: &mut String) {
    let mut stack: Vec<Entity> = Vec::new();
    for run in runs.iter().filter(|r| !r.text.is_empty()) {
        let want = entities(&run.style);
        let mut keep = stack
            .iter()
            .position(|e| !want.contains(e))
            .unwrap_or(stack.len());
        let opens_more = want.iter().any(|e| !stack[..keep].contains(e));
        if opens_more && keep > 0 && stack[keep - 1] == Entity::Code {
            keep -= 1;
        }
        while stack.len() > keep {
            if let Some(e) = stack.pop() {
                close(&e, out);
            }
        }
        for e in want {
            if !stack.contains(&e) {
                open(&e, out);
                stack.push(e);
            }
        }
        if stack.last() == Some(&Entity::Code) {
            out.push_str(&escape_code(&run.text));
        } else {
            escape_text(&run.text, out);
        }
    }
    while let Some(e) = stack.pop() {
        close(&e, out);
    }
}

/// Runs as plain text: a link's address after its text, unless the text
/// is the address.
fn render_plain(runs: &[Run], out: &mut String) {
    let mut link: Option<(&str, String)> = None;
    let end_link = |link: &mut Option<(&str, String)>, out: &mut String| {
        if let Some((url, text)) = link.take() {
            if text.trim() != url {
                out.push_str(&format!(" ({url})"));
            }
        }
    };
    for run in runs {
        let url = run.style.link.as_deref();
        if link.as_ref().map(|l| l.0) != url {
            end_link(&mut link, out);
            if let Some(url) = url {
                link = Some((url, String::new()));
            }
        }
        if let Some((_, text)) = &mut link {
            text.push_str(&run.text);
        }
        out.push_str(&run.text);
    }
    end_link(&mut link, out);
}

fn is_code_reserved(c: char) -> bool {
    c == '`' || c == '\\'
}

fn escaped_cost(c: char, code: bool) -> usize {
    let reserved = if code {
        is_code_reserved(c)
    } else {
        RESERVED.contains(c)
    };
    c.len_utf16() + usize::from(reserved)
}

fn escaped_url_cost(c: char) -> usize {
    c.len_utf16() + usize::from(c == ')' || c == '\\')
}

/// Text outside code: every character the Bot API reserves, escaped.
fn escape_text(text: &str, out: &mut String) {
    for c in text.chars() {
        if RESERVED.contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
}

/// Text inside `code` or a ``` block: only ` and \.
fn escape_code(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if is_code_reserved(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The (...) of a link: only ) and \.
fn escape_url(url: &str, out: &mut String) {
    for c in url.chars() {
        if c == ')' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_table() {
        // Every reserved character outside entities, and nothing else.
        let all = "_*[]()~`>#+-=|{}.!\\";
        let escaped: String = all.chars().flat_map(|c| ['\\', c]).collect();
        assert_eq!(to_markdown_v2("a\\_b\\*c"), "a\\_b\\*c");
        let mut out = String::new();
        escape_text(all, &mut out);
        assert_eq!(out, escaped);
        assert_eq!(
            to_markdown_v2("plain, words; ok? yes: 100% @me $5 & 'q' \"d\" / ^ ,"),
            "plain, words; ok? yes: 100% @me $5 & 'q' \"d\" / ^ ,"
        );
        assert_eq!(
            to_markdown_v2("1. a.b! c-d (e) #f"),
            "1\\. a\\.b\\! c\\-d \\(e\\) \\#f"
        );
        // Inside code and pre: only ` and \.
        assert_eq!(to_markdown_v2("`a_b*c.d\\e`"), "`a_b*c.d\\\\e`");
        assert_eq!(
            to_markdown_v2("```rust\nlet x = a.b(c) * 2; // `q` \\n\n```"),
            "```rust\nlet x = a.b(c) * 2; // \\`q\\` \\\\n\n```"
        );
        // Inside a link's (...): only ) and \.
        assert_eq!(
            to_markdown_v2("[the docs](https://x.org/a_(b)?c=d.e)"),
            "[the docs](https://x.org/a_(b\\)?c=d.e)"
        );
        assert_eq!(
            to_markdown_v2("[a.b](https://x.org)"),
            "[a\\.b](https://x.org)"
        );
    }

    #[test]
    fn entities_convert() {
        assert_eq!(
            to_markdown_v2("**bold** and *it* and _it2_"),
            "*bold* and _it_ and _it2_"
        );
        assert_eq!(to_markdown_v2("~~gone~~"), "~gone~");
        assert_eq!(to_markdown_v2("***both***"), "*_both_*");
        assert_eq!(to_markdown_v2("**a *b* c**"), "*a _b_ c*");
        assert_eq!(to_markdown_v2("*a **b** c*"), "_a *b* c_");
        assert_eq!(to_markdown_v2("# Title.\n## Sub"), "*Title\\.*\n*Sub*");
        assert_eq!(
            to_markdown_v2("- one\n  * two\n+ three"),
            "• one\n  • two\n• three"
        );
        assert_eq!(
            to_markdown_v2("> quoted **x**\n>> deeper"),
            ">quoted *x*\n>deeper"
        );
        assert_eq!(to_markdown_v2("**`code` in bold**"), "*`code` in bold*");
        assert_eq!(
            to_markdown_v2("<https://a.b/c>"),
            "[https://a\\.b/c](https://a.b/c)"
        );
        assert_eq!(to_markdown_v2("[rel](docs/a.md)"), "rel \\(docs/a\\.md\\)");
        assert_eq!(to_markdown_v2("---"), "——————");
        // A fenced block with its language; an unknown info string is dropped.
        assert_eq!(
            to_markdown_v2("```python\nprint(1)\n```"),
            "```python\nprint(1)\n```"
        );
        assert_eq!(to_markdown_v2("~~~ {weird stuff}\nx\n~~~"), "```\nx\n```");
    }

    #[test]
    fn odd_input() {
        // Unbalanced and stray markers are text.
        assert_eq!(to_markdown_v2("**unbalanced"), "\\*\\*unbalanced");
        assert_eq!(to_markdown_v2("a lone ` backtick"), "a lone \\` backtick");
        assert_eq!(to_markdown_v2("2 * 3 * 4"), "2 \\* 3 \\* 4");
        assert_eq!(to_markdown_v2("snake_case_name"), "snake\\_case\\_name");
        assert_eq!(to_markdown_v2("**a `**` b**"), "*a `**` b*");
        assert_eq!(
            to_markdown_v2("[not a link] (x)"),
            "\\[not a link\\] \\(x\\)"
        );
        assert_eq!(to_markdown_v2("a **** b"), "a \\*\\*\\*\\* b");
        assert_eq!(to_markdown_v2("~one~"), "\\~one\\~");
        // A block that never closes is closed.
        assert_eq!(to_markdown_v2("```sh\nls"), "```sh\nls\n```");
        // Italic next to italic in another link: never `__`.
        let out = to_markdown_v2("[*a*](https://a.b)[*b*](https://c.d)");
        assert!(!out.contains("__"), "{out}");
    }

    #[test]
    fn plain_text() {
        assert_eq!(
            to_plain("**Bold** [the docs](https://x.org/a) and <https://y.org>\n```py\nx = 1\n```"),
            "Bold the docs (https://x.org/a) and https://y.org\nx = 1"
        );
        assert_eq!(to_plain("# Head\n- item `c`"), "Head\n• item c");
    }

    #[test]
    fn lengths_are_utf16() {
        assert_eq!(utf16_len("😀"), 2);
        assert_eq!(utf16_len("é"), 1);
        // 3,000 emoji are 6,000 units: two parts, none over 4,096.
        let text = "😀".repeat(3000);
        let parts = split(&text, LIMIT);
        assert_eq!(parts.len(), 2);
        assert!(parts.iter().all(|p| utf16_len(p) <= LIMIT));
        assert_eq!(parts.concat(), text);
        let parts = parts_of(&text);
        assert!(parts.iter().all(|p| utf16_len(&p.v2) <= LIMIT));
    }

    fn parts_of(markdown: &str) -> Vec<Part> {
        parts(markdown, LIMIT)
    }

    /// The 10,000-character answer: prose, a long Python block across the
    /// first cut, more prose.
    fn long_answer() -> String {
        let mut md = String::from("# Report\n\n");
        while md.len() < 2500 {
            md.push_str("Some prose with a [link](https://example.org/x) and **bold** words. ");
        }
        md.push_str("\n\n```python\n");
        let mut i = 0;
        while md.len() < 8000 {
            md.push_str(&format!(
                "value_{i} = compute(`x`, {i}) * 2.5  # step {i}\n"
            ));
            i += 1;
        }
        md.push_str("```\n\nAfter the block.\n\n");
        while md.chars().count() < 10_000 {
            md.push_str("More words after the code. ");
        }
        md
    }

    #[test]
    fn ten_thousand_characters_in_three_parts() {
        let md = long_answer();
        assert!(md.chars().count() >= 10_000);
        let parts = parts_of(&md);
        assert_eq!(
            parts.len(),
            3,
            "{:#?}",
            parts.iter().map(|p| p.v2.len()).collect::<Vec<_>>()
        );
        for part in &parts {
            assert!(utf16_len(&part.v2) <= LIMIT);
            // Fences balance in each part.
            assert_eq!(part.v2.matches("```").count() % 2, 0, "{}", part.v2);
        }
        // The block is cut at a part boundary: closed there, reopened
        // with its language (and not at its first line) in the next part.
        let cut = (0..parts.len() - 1)
            .find(|&n| parts[n].v2.ends_with("```") && parts[n + 1].v2.starts_with("```python\n"))
            .expect("a block cut across parts");
        assert!(parts[cut].v2.contains("value_"));
        assert!(!parts[cut + 1].v2.starts_with("```python\nvalue_0 "));
        // Nothing lost: the code lines all arrive once.
        let all: String = parts
            .iter()
            .map(|p| p.v2.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        assert_eq!(all.matches("value_0 =").count(), 1);
        assert!(all.contains("After the block\\."));
        // The plain parts carry the same text without markup.
        assert!(parts[1].plain.contains("value_"));
        assert!(!parts[1].plain.contains("```"));
    }

    #[test]
    fn split_reopens_blocks() {
        let mut text = String::from("intro\n\n```rust\n");
        for i in 0..40 {
            text.push_str(&format!("line {i}\n"));
        }
        text.push_str("```\nend");
        let parts = split(&text, 100);
        assert!(parts.len() > 2);
        for (n, part) in parts.iter().enumerate() {
            assert!(utf16_len(part) <= 100, "{part}");
            if n > 0 && part.contains("line") {
                assert!(part.starts_with("```rust\n"), "{part}");
            }
            assert_eq!(part.matches("```").count() % 2, 0, "{part}");
        }
        // Cut at a space when a line is too long.
        let parts = split("aaaa bbbb cccc dddd", 10);
        assert_eq!(parts, vec!["aaaa bbbb", "cccc dddd"]);
        // A paragraph break is preferred to a line break.
        let parts = split("one two three\nfour\n\nfive six seven\neight", 30);
        assert_eq!(parts, vec!["one two three\nfour", "five six seven\neight"]);
    }

    #[test]
    fn long_lines_keep_entities_valid() {
        let md = format!("**{}**", "word ".repeat(2000).trim_end());
        let parts = parts_of(&md);
        assert!(parts.len() >= 3);
        for part in &parts {
            assert!(utf16_len(&part.v2) <= LIMIT);
            assert!(
                part.v2.starts_with('*') && part.v2.ends_with('*'),
                "{}",
                &part.v2[..20]
            );
        }
        // One giant word of reserved characters: cut anywhere, still escaped.
        let md = ".".repeat(5000);
        let parts = parts_of(&md);
        assert_eq!(parts.len(), 3);
        for part in &parts {
            assert!(utf16_len(&part.v2) <= LIMIT);
            assert!(!part.v2.contains(".."), "every dot escaped");
        }
    }
}
