//! Reading chatd's JSON answers for the terminal: a field's text, where a
//! missing or non-text field prints as nothing.

use serde_json::Value;

/// `v`'s text, or "" when it is not a string.
pub fn text(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

/// The first line of `text` (a description's summary).
pub fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}
