//! The agent's Markdown as Slack mrkdwn, and mrkdwn cut into messages.
//!
//! Slack has no escape for `*`, `_` or `~`; only `&`, `<` and `>` must be
//! written as entities (everywhere, code included: Slack reads `<…>` as a
//! link or mention anywhere). Emphasis is converted only where it has a
//! closing partner on the same line, so a lone `*` stays literal.

use crate::markup::{code_close, is_rule, run_len};

/// Converts the agent's Markdown to Slack mrkdwn.
pub fn to_mrkdwn(markdown: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    // The open fence's character and length while inside a fenced block.
    let mut fence: Option<(char, usize)> = None;
    for line in markdown.lines() {
        if let Some((c, n)) = fence {
            if is_closing_fence(line, c, n) {
                out.push("```".into());
                fence = None;
            } else {
                out.push(escape(line));
            }
            continue;
        }
        if let Some(open) = opening_fence(line) {
            // Slack shows no language: the info string is dropped.
            out.push("```".into());
            fence = Some(open);
            continue;
        }
        out.push(block_line(line));
    }
    if fence.is_some() {
        out.push("```".into());
    }
    out.join("\n")
}

/// A line outside code: heading, bullet, rule or plain text.
fn block_line(line: &str) -> String {
    let trimmed = line.trim_start();
    let indent = &line[..line.len() - trimmed.len()];
    if indent.len() <= 3 {
        let hashes = trimmed.chars().take_while(|&c| c == '#').count();
        if (1..=6).contains(&hashes) {
            let rest = &trimmed[hashes..];
            if rest.is_empty() || rest.starts_with(' ') {
                let text = rest.trim().trim_end_matches('#').trim_end();
                if text.is_empty() {
                    return String::new();
                }
                // Slack has no bold inside bold: the heading's own stars go.
                let plain = text.replace("**", "").replace("__", "");
                return format!("*{}*", inline(&plain));
            }
        }
        if is_rule(trimmed) {
            return "──────────".into();
        }
    }
    for marker in ["- ", "* ", "+ "] {
        if let Some(rest) = trimmed.strip_prefix(marker) {
            return format!("{indent}• {}", inline(rest.trim_start()));
        }
    }
    format!("{indent}{}", inline(trimmed))
}

fn opening_fence(line: &str) -> Option<(char, usize)> {
    let trimmed = line.trim_start();
    if line.len() - trimmed.len() > 3 {
        return None;
    }
    let c = trimmed.chars().next()?;
    if c != '`' && c != '~' {
        return None;
    }
    let n = trimmed.chars().take_while(|&x| x == c).count();
    // A backtick fence's info string has no backtick.
    if n < 3 || (c == '`' && trimmed[n..].contains('`')) {
        return None;
    }
    Some((c, n))
}

fn is_closing_fence(line: &str, c: char, n: usize) -> bool {
    let trimmed = line.trim();
    trimmed.chars().count() >= n && trimmed.chars().all(|x| x == c)
}

/// `&`, `<`, `>` as Slack's entities.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

/// Inline Markdown of one line: code spans, links, emphasis, strikethrough.
fn inline(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::new();
    inline_into(&chars, &mut out);
    out
}

fn inline_into(s: &[char], out: &mut String) {
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        match c {
            '\\' if i + 1 < s.len() && s[i + 1].is_ascii_punctuation() => {
                push_escaped(out, s[i + 1]);
                i += 2;
            }
            '`' => {
                let n = run_len(s, i, '`');
                if let Some(end) = code_close(s, i + n, n) {
                    let code: String = s[i + n..end].iter().collect();
                    out.push('`');
                    out.push_str(&escape(code.trim()));
                    out.push('`');
                    i = end + n;
                } else {
                    for _ in 0..n {
                        out.push('`');
                    }
                    i += n;
                }
            }
            '!' if s.get(i + 1) == Some(&'[') => {
                if let Some((label, url, next)) = link_at(s, i + 1) {
                    push_link(out, &url, &label);
                    i = next;
                } else {
                    out.push('!');
                    i += 1;
                }
            }
            '[' => {
                if let Some((label, url, next)) = link_at(s, i) {
                    push_link(out, &url, &label);
                    i = next;
                } else {
                    out.push('[');
                    i += 1;
                }
            }
            '<' => {
                if let Some((url, next)) = autolink_at(s, i) {
                    out.push('<');
                    out.push_str(&link_url(&url));
                    out.push('>');
                    i = next;
                } else {
                    out.push_str("&lt;");
                    i += 1;
                }
            }
            '*' | '_' | '~' => {
                let n = run_len(s, i, c);
                match emphasis_close(s, i, n, c) {
                    Some(end) => {
                        let mut inner = String::new();
                        inline_into(&s[i + n..end], &mut inner);
                        let (open, close) = match (c, n) {
                            ('~', _) => ("~", "~"),
                            (_, 1) => ("_", "_"),
                            (_, 2) => ("*", "*"),
                            _ => ("*_", "_*"),
                        };
                        out.push_str(open);
                        out.push_str(&inner);
                        out.push_str(close);
                        i = end + n;
                    }
                    None => {
                        for _ in 0..n {
                            out.push(c);
                        }
                        i += n;
                    }
                }
            }
            c => {
                push_escaped(out, c);
                i += 1;
            }
        }
    }
}

fn push_escaped(out: &mut String, c: char) {
    match c {
        '&' => out.push_str("&amp;"),
        '<' => out.push_str("&lt;"),
        '>' => out.push_str("&gt;"),
        c => out.push(c),
    }
}

/// Where the emphasis opened by the run of `n` × `c` at `i` closes (the
/// start of the closing run), if it is emphasis at all: the opening run is
/// followed by a non-space, the closing one (the same length) preceded by
/// one; `_` and `~` not inside a word.
fn emphasis_close(s: &[char], i: usize, n: usize, c: char) -> Option<usize> {
    let valid = match c {
        '~' => n == 2,
        _ => (1..=3).contains(&n),
    };
    if !valid {
        return None;
    }
    let after = *s.get(i + n)?;
    if after.is_whitespace() {
        return None;
    }
    if c != '*' && i > 0 && s[i - 1].is_alphanumeric() {
        return None;
    }
    let mut j = i + n;
    while j < s.len() {
        let x = s[j];
        if x == '`' {
            // Emphasis does not close inside a code span.
            let m = run_len(s, j, '`');
            j = code_close(s, j + m, m).map_or(j + m, |e| e + m);
            continue;
        }
        if x == c {
            let m = run_len(s, j, c);
            let before_ok = !s[j - 1].is_whitespace();
            let after_ok = c == '*' || !matches!(s.get(j + m), Some(a) if a.is_alphanumeric());
            if m == n && before_ok && after_ok && j > i + n {
                return Some(j);
            }
            j += m;
            continue;
        }
        j += 1;
    }
    None
}

/// `[label](url "title")` starting at `i` (the `[`): label, url and the
/// index after the `)`.
fn link_at(s: &[char], i: usize) -> Option<(String, String, usize)> {
    let mut depth = 0;
    let mut j = i;
    let close = loop {
        match s.get(j)? {
            '\\' => j += 1,
            '[' => depth += 1,
            ']' => {
                depth -= 1;
                if depth == 0 {
                    break j;
                }
            }
            _ => {}
        }
        j += 1;
    };
    if s.get(close + 1) != Some(&'(') {
        return None;
    }
    let mut k = close + 2;
    let mut parens = 0;
    let end = loop {
        match s.get(k)? {
            '(' => parens += 1,
            ')' if parens == 0 => break k,
            ')' => parens -= 1,
            _ => {}
        }
        k += 1;
    };
    let target: String = s[close + 2..end].iter().collect();
    let target = target.trim();
    let url = target
        .split_once(char::is_whitespace)
        .map_or(target, |(u, _)| u)
        .trim_start_matches('<')
        .trim_end_matches('>');
    if url.is_empty() {
        return None;
    }
    let label: String = s[i + 1..close].iter().collect();
    Some((label, url.to_string(), end + 1))
}

/// `<https://…>` or `<mailto:…>` at `i`: the address and the index after.
fn autolink_at(s: &[char], i: usize) -> Option<(String, usize)> {
    let end = (i + 1..s.len()).find(|&j| s[j] == '>' || s[j].is_whitespace() || s[j] == '<')?;
    if s[end] != '>' {
        return None;
    }
    let url: String = s[i + 1..end].iter().collect();
    let lower = url.to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https://") || lower.starts_with("mailto:")
    {
        Some((url, end + 1))
    } else {
        None
    }
}

/// `<url|label>`; the label's own formatting dropped (Slack shows a link
/// label as plain text).
fn push_link(out: &mut String, url: &str, label: &str) {
    let label: String = label
        .chars()
        .filter(|c| !matches!(c, '*' | '_' | '~' | '`'))
        .collect();
    let label = label.trim();
    out.push('<');
    out.push_str(&link_url(url));
    if !label.is_empty() && label != url {
        out.push('|');
        out.push_str(&escape(label));
    }
    out.push('>');
}

/// An address inside `<…>`: `&` as an entity, and the characters that
/// would end the link percent-encoded.
fn link_url(url: &str) -> String {
    let mut out = String::new();
    for c in url.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("%3C"),
            '>' => out.push_str("%3E"),
            '|' => out.push_str("%7C"),
            ' ' => out.push_str("%20"),
            c => out.push(c),
        }
    }
    out
}

const FENCE: &str = "```";

/// Cuts mrkdwn into parts of at most `max` characters, at a paragraph, a
/// line or a space when one is far enough in; a code block cut in two is
/// closed at the end of one part and opened again at the start of the next.
pub fn split(text: &str, max: usize) -> Vec<String> {
    // Room for a reopened fence at the start and a closing one at the end.
    let max = max.max(16);
    let mut parts = Vec::new();
    let mut rest = text.trim_end();
    let mut reopen = false;
    while !rest.is_empty() {
        let prefix = if reopen { "```\n" } else { "" };
        let room = max - prefix.len();
        if rest.chars().count() <= room {
            parts.push(format!("{prefix}{rest}"));
            break;
        }
        // Always leave room for a closing "\n```".
        let window = byte_at(rest, room - (FENCE.len() + 1));
        let cut = best_cut(rest, window);
        let head = &rest[..cut];
        let in_code = code_open_after(reopen, head);
        let mut part = String::from(prefix);
        if in_code {
            part.push_str(head.strip_suffix('\n').unwrap_or(head));
            part.push('\n');
            part.push_str(FENCE);
            rest = &rest[cut..];
        } else {
            part.push_str(head.trim_end());
            rest = rest[cut..].trim_start_matches(['\n', ' ']);
        }
        if !part.trim().is_empty() && part.trim() != FENCE {
            parts.push(part);
        }
        reopen = in_code;
    }
    parts
}

/// The byte index of the `n`th character (or the end).
fn byte_at(text: &str, n: usize) -> usize {
    text.char_indices().nth(n).map_or(text.len(), |(i, _)| i)
}

/// Where to cut `text` at or before byte `window`: after a blank line, then
/// a line end, then a space, each only when it keeps at least half the
/// window; else a hard cut that does not split an entity or a `<…>` link.
fn best_cut(text: &str, window: usize) -> usize {
    let head = &text[..window];
    let half = window / 2;
    if let Some(i) = head.rfind("\n\n").filter(|&i| i >= half) {
        return i + 2;
    }
    if let Some(i) = head.rfind('\n').filter(|&i| i >= half) {
        return i + 1;
    }
    if let Some(i) = head.rfind(' ').filter(|&i| i >= half) {
        return i + 1;
    }
    let mut cut = window;
    // An entity (`&amp;`) or link (`<…>`) open at the cut moves the cut
    // before it, when that still leaves something in this part.
    if let Some(amp) = head.rfind('&') {
        if !head[amp..].contains(';') && window - amp <= 6 && amp > 0 {
            cut = amp;
        }
    }
    if let Some(lt) = head[..cut].rfind('<') {
        if !head[lt..cut].contains('>') && lt > 0 {
            cut = lt;
        }
    }
    cut.max(first_char_end(text))
}

fn first_char_end(text: &str) -> usize {
    text.chars().next().map_or(0, char::len_utf8)
}

/// Whether a code block is open at the end of `head`, given whether one
/// was open at its start.
fn code_open_after(mut open: bool, head: &str) -> bool {
    for line in head.lines() {
        let t = line.trim();
        if t.starts_with(FENCE) {
            // ```code``` on one line opens and closes.
            let closes_itself = !open && t.len() >= 6 && t.ends_with(FENCE);
            if !closes_itself {
                open = !open;
            }
        }
    }
    open
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slack_mrkdwn_inline() {
        assert_eq!(
            to_mrkdwn("**bold** and *it* and _it_"),
            "*bold* and _it_ and _it_"
        );
        assert_eq!(to_mrkdwn("~~gone~~ `a<b>&c`"), "~gone~ `a&lt;b&gt;&amp;c`");
        assert_eq!(to_mrkdwn("***both***"), "*_both_*");
        assert_eq!(to_mrkdwn("**a *b* c**"), "*a _b_ c*");
        assert_eq!(
            to_mrkdwn("see [the docs](https://x.io/a?b=1&c=2) now"),
            "see <https://x.io/a?b=1&amp;c=2|the docs> now"
        );
        assert_eq!(to_mrkdwn("<https://x.io>"), "<https://x.io>");
        assert_eq!(to_mrkdwn("a < b && c > d"), "a &lt; b &amp;&amp; c &gt; d");
        assert_eq!(
            to_mrkdwn("2 * 3 * 4 and snake_case_name"),
            "2 * 3 * 4 and snake_case_name"
        );
        assert_eq!(to_mrkdwn("a lone * star"), "a lone * star");
        assert_eq!(to_mrkdwn(r"\*not it\*"), "*not it*");
        assert_eq!(to_mrkdwn("![pic](http://p/x.png)"), "<http://p/x.png|pic>");
        assert_eq!(to_mrkdwn("[**b**](http://u)"), "<http://u|b>");
        assert_eq!(to_mrkdwn("[x|y](http://u|v)"), "<http://u%7Cv|x|y>");
    }

    #[test]
    fn slack_mrkdwn_blocks() {
        let md = "# Title\n\n## Sub **x**\n- one\n* two\n  + nested\n1. first\n---\n> quote";
        assert_eq!(
            to_mrkdwn(md),
            "*Title*\n\n*Sub x*\n• one\n• two\n  • nested\n1. first\n──────────\n&gt; quote"
        );
        assert_eq!(to_mrkdwn("# **All bold**"), "*All bold*");
        let code = "text\n```rust\nlet a = b < c && **d**;\n```\nafter";
        assert_eq!(
            to_mrkdwn(code),
            "text\n```\nlet a = b &lt; c &amp;&amp; **d**;\n```\nafter"
        );
        // An unclosed fence is closed.
        assert_eq!(to_mrkdwn("```\ncode"), "```\ncode\n```");
        assert_eq!(to_mrkdwn("~~~\n*x*\n~~~"), "```\n*x*\n```");
    }

    fn fences_balanced(part: &str) -> bool {
        !code_open_after(false, part)
    }

    #[test]
    fn slack_split_short_and_paragraphs() {
        assert_eq!(split("hello", 4000), vec!["hello"]);
        assert!(split("", 4000).is_empty());
        let para = "a".repeat(30);
        let text = format!("{para}\n\n{para}\n\n{para}");
        let parts = split(&text, 70);
        assert_eq!(parts, vec![format!("{para}\n\n{para}"), para.clone()]);
        // Words: cut at a space, none lost.
        let words = "word ".repeat(100);
        let parts = split(&words, 50);
        assert!(parts.iter().all(|p| p.chars().count() <= 50));
        assert_eq!(parts.join(" ").split_whitespace().count(), 100);
    }

    #[test]
    fn slack_split_keeps_code_blocks_whole() {
        let code: String = (0..300).map(|i| format!("line {i} of code\n")).collect();
        let text = format!("Intro paragraph.\n\n```\n{code}```\nThe end.");
        let parts = split(&text, 1000);
        assert!(parts.len() >= 5, "{}", parts.len());
        for (i, part) in parts.iter().enumerate() {
            assert!(part.chars().count() <= 1000, "part {i} too long");
            assert!(
                fences_balanced(part),
                "part {i} leaves a block open:\n{part}"
            );
            if i > 0 && i < parts.len() - 1 {
                assert!(part.starts_with("```\n"), "part {i}");
            }
        }
        // Every code line arrives once, whole.
        let all = parts.join("\n");
        for i in 0..300 {
            assert_eq!(
                all.matches(&format!("line {i} of code\n")).count(),
                1,
                "{i}"
            );
        }
        assert!(all.ends_with("The end."));
    }

    #[test]
    fn slack_split_hard_cut_spares_entities_and_links() {
        let text = format!("{}&amp;{}", "x".repeat(45), "y".repeat(40));
        let parts = split(&text, 52);
        assert!(parts
            .iter()
            .all(|p| !p.ends_with('&') && !p.contains("&am;")));
        assert_eq!(parts.concat(), text);
        let text = format!("{}<http://example.com/long|label>", "x".repeat(40));
        let parts = split(&text, 55);
        assert_eq!(parts[0], "x".repeat(40));
        // Multi-byte text is cut at characters.
        let text = "é".repeat(100);
        let parts = split(&text, 30);
        assert!(parts.iter().all(|p| p.chars().count() <= 30));
        assert_eq!(parts.concat(), text);
    }
}
