//! Inline Markdown read into runs of text with a style: bold, italic,
//! strikethrough, code spans and links.

use crate::markup::{code_close, run_len};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Style {
    pub(super) bold: bool,
    pub(super) italic: bool,
    pub(super) strike: bool,
    pub(super) code: bool,
    pub(super) link: Option<String>,
}

/// Text with one style.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Run {
    pub(super) text: String,
    pub(super) style: Style,
}

pub(super) fn push_text(runs: &mut Vec<Run>, text: &str, style: &Style) {
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

pub(super) fn inline(text: &str, style: &Style) -> Vec<Run> {
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

pub(super) struct LinkAt {
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
