//! Making a tool's output fit the room the model has for it.

use crate::workspace::Workspace;

/// Room kept for a cut line (`[truncated at ...]`) inside the budget, so the
/// whole result stays within what chatd computed.
pub const MARKER_ROOM: usize = 200;

/// Below this a result cannot even say it was cut; chatd's budgets are larger.
pub const MIN_BUDGET: usize = 400;

/// The folder under the workspace where whole outputs of cut results go.
pub const OUTPUTS_DIR: &str = ".tandem/outputs";

/// `1234567` → `1,234,567`.
pub fn commas(n: u64) -> String {
    let digits = n.to_string();
    // Digits before the first comma: 1 to 3 of them.
    let head = (digits.len() - 1) % 3 + 1;
    let mut out = String::from(&digits[..head]);
    for group in digits.as_bytes()[head..].chunks(3) {
        out.push(',');
        out.extend(group.iter().map(|&b| char::from(b)));
    }
    out
}

/// The characters of text a result may hold besides its cut line.
pub fn content_budget(budget_chars: usize) -> usize {
    budget_chars
        .saturating_sub(MARKER_ROOM)
        .max(budget_chars / 2)
}

/// The budget chatd gave, within the bounds a result can work with.
pub fn effective_budget(budget_chars: usize) -> usize {
    budget_chars.clamp(MIN_BUDGET, super::MAX_RESULT_CHARS)
}

/// Cuts `s` to at most `max` characters, on a character boundary, adding `…`.
pub fn cut_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_string(),
        Some(_) => {
            let keep: String = s.chars().take(max.saturating_sub(1)).collect();
            keep + "…"
        }
    }
}

/// Fits a long tool output into `budget_chars`: the first and last quarter of
/// the budget (cut at line ends), a line saying how much was cut, and the
/// whole output saved to `.tandem/outputs/<call_id>.txt` for read_file or grep.
pub fn fit_output(
    workspace: &Workspace,
    call_id: &str,
    text: String,
    budget_chars: usize,
) -> String {
    let budget = effective_budget(budget_chars);
    let total = text.chars().count();
    if total <= budget {
        return text;
    }
    let quarter = budget / 4;
    let head_end = head_cut(&text, quarter);
    let tail_start = tail_cut(&text, quarter).max(head_end);
    let head = &text[..head_end];
    let tail = &text[tail_start..];
    let cut = total - head.chars().count() - tail.chars().count();
    let name = format!("{OUTPUTS_DIR}/{}.txt", file_stem(call_id));
    let whereabouts = match workspace.write_file(&name, text.as_bytes()) {
        Ok(_) => format!("the whole output is in {name}"),
        Err(err) => format!("the whole output could not be saved: {err}"),
    };
    let mut out = String::with_capacity(head.len() + tail.len() + 160);
    out.push_str(head);
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&format!(
        "[... {} characters cut; {whereabouts} ...]\n",
        commas(cut as u64)
    ));
    out.push_str(tail);
    out
}

/// The byte index ending the longest run of whole lines within `max`
/// characters from the start (mid-line only when the first line is longer).
fn head_cut(text: &str, max: usize) -> usize {
    let limit = text.char_indices().nth(max).map_or(text.len(), |(i, _)| i);
    match text[..limit].rfind('\n') {
        Some(i) => i + 1,
        None => limit,
    }
}

/// The byte index starting the longest run of whole lines within `max`
/// characters from the end (mid-line only when the last line is longer).
fn tail_cut(text: &str, max: usize) -> usize {
    let start = if max == 0 {
        text.len()
    } else {
        text.char_indices().rev().nth(max - 1).map_or(0, |(i, _)| i)
    };
    if start == 0 {
        return 0;
    }
    // A line starts right after a newline; the newline before `start` may be just it.
    if text.as_bytes().get(start - 1) == Some(&b'\n') {
        return start;
    }
    match text[start..].find('\n') {
        Some(i) if start + i + 1 < text.len() => start + i + 1,
        _ => start,
    }
}

/// A call id made safe as a file name.
fn file_stem(call_id: &str) -> String {
    let stem: String = call_id
        .chars()
        .take(80)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if stem.is_empty() {
        "output".into()
    } else {
        stem
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commas_group_thousands() {
        assert_eq!(commas(0), "0");
        assert_eq!(commas(999), "999");
        assert_eq!(commas(1000), "1,000");
        assert_eq!(commas(639_237), "639,237");
        assert_eq!(commas(9_000_000), "9,000,000");
    }

    #[test]
    fn short_output_is_unchanged() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = Workspace::open(dir.path()).expect("ws");
        assert_eq!(fit_output(&ws, "c1", "hello\n".into(), 1000), "hello\n");
        assert!(!ws.root().join(OUTPUTS_DIR).exists());
    }

    #[test]
    fn long_output_keeps_head_and_tail_and_saves_the_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = Workspace::open(dir.path()).expect("ws");
        let text: String = (0..1000).map(|i| format!("line {i:04}\n")).collect();
        let out = fit_output(&ws, "call/7", text.clone(), 4000);
        assert!(out.chars().count() <= 4000, "{}", out.len());
        assert!(out.starts_with("line 0000\n"));
        assert!(out.ends_with("line 0999\n"));
        let marker = out.lines().find(|l| l.starts_with("[...")).expect("marker");
        assert!(
            marker.contains("characters cut; the whole output is in .tandem/outputs/call_7.txt")
        );
        // Whole lines only on both sides of the cut line.
        assert!(out.lines().all(|l| l.len() == 9 || l.starts_with("[...")));
        let saved =
            std::fs::read_to_string(ws.root().join(".tandem/outputs/call_7.txt")).expect("saved");
        assert_eq!(saved, text);
    }
}
