//! Runs written out as MarkdownV2 (entities opened and closed, the Bot
//! API's reserved characters escaped, in code and URLs by their own rules)
//! or as plain text, and what each costs in UTF-16 units.

use super::inline::{Run, Style};
use super::RESERVED;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Entity {
    Link(String),
    Bold,
    Italic,
    Strike,
    Code,
}

/// The entities a style needs, outermost first; code is always innermost
/// (it cannot contain another entity).
pub(super) fn entities(style: &Style) -> Vec<Entity> {
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

pub(super) fn markers_cost(style: &Style) -> usize {
    entities(style)
        .iter()
        .map(|e| match e {
            Entity::Link(url) => 4 + url.chars().map(escaped_url_cost).sum::<usize>(),
            _ => 2,
        })
        .sum()
}

pub(super) fn open(entity: &Entity, out: &mut String) {
    out.push_str(match entity {
        Entity::Link(_) => "[",
        Entity::Bold => "*",
        Entity::Italic => "_",
        Entity::Strike => "~",
        Entity::Code => "`",
    });
}

pub(super) fn close(entity: &Entity, out: &mut String) {
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
pub(super) fn render_v2(runs: &[Run], out: &mut String) {
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
pub(super) fn render_plain(runs: &[Run], out: &mut String) {
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

pub(super) fn is_code_reserved(c: char) -> bool {
    c == '`' || c == '\\'
}

pub(super) fn escaped_cost(c: char, code: bool) -> usize {
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
pub(super) fn escape_text(text: &str, out: &mut String) {
    for c in text.chars() {
        if RESERVED.contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
}

/// Text inside `code` or a ``` block: only ` and \.
pub(super) fn escape_code(text: &str) -> String {
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
