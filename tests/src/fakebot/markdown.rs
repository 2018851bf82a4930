//! Telegram's MarkdownV2, checked as the Bot API checks it: the text as shown,
//! or the error Telegram gives for an unescaped character.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Entity {
    Bold,
    Italic,
    Underline,
    Strike,
    Spoiler,
    Code,
    Pre,
    TextUrl,
}

/// MarkdownV2 as Telegram parses it (after tdlib's `parse_markdown_v2`):
/// the visible text, or why it cannot be parsed in Telegram's words.
pub fn parse_markdown_v2(text: &str) -> Result<String, String> {
    pub(super) const RESERVED: &str = "_*[]()~`>#+-=|{}.!";
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let at = |i: usize| chars.get(i).map(|c| c.1);
    let mut out = String::new();
    let mut stack: Vec<(Entity, usize)> = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let (byte, c) = chars[i];
        if c == '\\' && at(i + 1).is_some_and(|n| (1..=126).contains(&(n as u32))) {
            out.push(chars[i + 1].1);
            i += 2;
            continue;
        }
        let top = stack.last().map(|e| e.0);
        let in_code = matches!(top, Some(Entity::Code | Entity::Pre));
        let reserved = if in_code {
            c == '`'
        } else {
            RESERVED.contains(c)
        };
        if !reserved {
            out.push(c);
            i += 1;
            continue;
        }
        // A block quote: '>' at the start of a line.
        if c == '>' && !in_code && (i == 0 || chars[i - 1].1 == '\n') {
            i += 1;
            continue;
        }
        let next = at(i + 1);
        let ends = match top {
            Some(Entity::Bold) => c == '*',
            Some(Entity::Italic) => c == '_' && next != Some('_'),
            Some(Entity::Underline) => c == '_' && next == Some('_'),
            Some(Entity::Strike) => c == '~',
            Some(Entity::Spoiler) => c == '|' && next == Some('|'),
            Some(Entity::Code) => c == '`',
            Some(Entity::Pre) => c == '`' && next == Some('`') && at(i + 2) == Some('`'),
            Some(Entity::TextUrl) => c == ']',
            None => false,
        };
        if !ends {
            let reserved_error = || {
                Err(format!(
                    "Character '{c}' is reserved and must be escaped with the preceding '\\'"
                ))
            };
            let entity = match c {
                '_' if next == Some('_') => {
                    i += 1;
                    Entity::Underline
                }
                '_' => Entity::Italic,
                '*' => Entity::Bold,
                '~' => Entity::Strike,
                '|' if next == Some('|') => {
                    i += 1;
                    Entity::Spoiler
                }
                '[' => Entity::TextUrl,
                '`' if in_code => return reserved_error(),
                '`' if next == Some('`') && at(i + 2) == Some('`') => {
                    stack.push((Entity::Pre, byte));
                    i += 3;
                    // The language: up to a space or a backtick; then one
                    // newline is skipped.
                    let mut end = i;
                    while at(end).is_some_and(|c| !c.is_whitespace() && c != '`') {
                        end += 1;
                    }
                    if end != i && at(end).is_some_and(|c| c != '`') {
                        i = end;
                    }
                    if at(i) == Some('\n') || at(i) == Some('\r') {
                        i += 1;
                    }
                    continue;
                }
                '`' => Entity::Code,
                _ => return reserved_error(),
            };
            stack.push((entity, byte));
            i += 1;
            continue;
        }
        let (entity, _) = stack.pop().expect("an entity is open");
        match entity {
            Entity::Pre => i += 3,
            Entity::TextUrl if next == Some('(') => {
                i += 2;
                let mut closed = false;
                while i < chars.len() {
                    let u = chars[i].1;
                    if u == '\\' && at(i + 1).is_some_and(|n| (1..=126).contains(&(n as u32))) {
                        i += 2;
                        continue;
                    }
                    i += 1;
                    if u == ')' {
                        closed = true;
                        break;
                    }
                }
                if !closed {
                    return Err(format!("Can't find end of a URL at byte offset {byte}"));
                }
            }
            Entity::Underline | Entity::Spoiler => i += 2,
            _ => i += 1,
        }
    }
    if let Some((_, byte)) = stack.last() {
        return Err(format!(
            "Can't find end of the entity starting at byte offset {byte}"
        ));
    }
    Ok(out)
}
