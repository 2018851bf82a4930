//! Prompt tokens as the simulator counts them, and an answer's text in
//! pieces (and where a prefill's continuation starts).

use super::*;

/// The text of a message's `content`: a string, or the text parts of an array.
pub(super) fn content_text(msg: &Value) -> String {
    match msg.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// Characters of a message's `content` (as [`content_text`] joins it).
pub(super) fn content_chars(msg: &Value) -> usize {
    match msg.get("content") {
        Some(Value::String(s)) => s.chars().count(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .map(|t| t.chars().count())
            .sum(),
        _ => 0,
    }
}

/// Characters of a string, or of the compact JSON of anything else but null.
pub(super) fn value_chars(v: Option<&Value>) -> usize {
    match v {
        None | Some(Value::Null) => 0,
        Some(Value::String(s)) => s.chars().count(),
        Some(other) => other.to_string().chars().count(),
    }
}

pub(super) fn role(msg: &Value) -> Option<&str> {
    msg.get("role").and_then(Value::as_str)
}

/// The prompt tokens of a chat request (and of `/v1/tokenize` on the same
/// messages and tools): C/4 + 4 per message + T/4 + 1, where C counts the
/// characters of every content, of each assistant tool call's function name
/// and arguments and of each `tool_call_id`, and T those of the JSON of
/// `tools`.
pub fn count_prompt_tokens(messages: &[Value], tools: Option<&Value>) -> u64 {
    let mut chars = 0usize;
    for m in messages {
        chars += content_chars(m);
        if role(m) == Some("assistant") {
            if let Some(calls) = m.get("tool_calls").and_then(Value::as_array) {
                for call in calls {
                    let f = call.get("function");
                    chars += value_chars(f.and_then(|f| f.get("name")));
                    chars += value_chars(f.and_then(|f| f.get("arguments")));
                }
            }
        }
        chars += value_chars(m.get("tool_call_id"));
    }
    let tools_chars = tools
        .filter(|t| !t.is_null())
        .map_or(0, |t| t.to_string().chars().count());
    (chars / 4 + 4 * messages.len() + tools_chars / 4 + 1) as u64
}

/// Characters per streamed piece of a literal `text` answer.
pub const TEXT_PIECE_CHARS: usize = 4;

/// A literal answer cut into the pieces it is streamed in.
pub fn text_pieces(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars
        .chunks(TEXT_PIECE_CHARS)
        .map(|c| c.iter().collect())
        .collect()
}

/// The first piece of a literal answer missing from a prefill: the pieces
/// the prefill holds whole when it is the start of the text, else 0.
pub fn text_continuation_start(pieces: &[String], prefill: &str) -> usize {
    let mut have = 0;
    let mut rest = prefill;
    for piece in pieces {
        match rest.strip_prefix(piece.as_str()) {
            Some(r) => {
                rest = r;
                have += 1;
            }
            None => break,
        }
    }
    if rest.is_empty() || pieces.len() == have {
        have
    } else if pieces[have].starts_with(rest) {
        // The prefill ends inside a piece: that piece comes again whole.
        have
    } else {
        0
    }
}

/// The first answer index missing from a prefilled answer (`w<k> ` or
/// `w<k>:<stamp> ` tokens).
pub fn continuation_start(prefill: &str) -> usize {
    let have: HashSet<usize> = prefill
        .split_whitespace()
        .filter_map(|w| {
            let digits = w.strip_prefix('w')?;
            let digits = digits.split_once(':').map_or(digits, |(d, _)| d);
            digits.parse().ok()
        })
        .collect();
    (0..).find(|k| !have.contains(k)).unwrap_or(0)
}
