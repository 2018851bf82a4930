//! `edit_file`: one exact string replaced (or every one, when asked), or a
//! say-why when it is missing or found more than once.

use super::{EDIT_MAX, PATH_HINT};
use crate::tools::fit::commas;
use crate::tools::{Args, ToolContext, ToolOutput};
use crate::workspace::ToolError;

pub fn edit_file(args: &Args, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let path = args.string("path", PATH_HINT)?;
    let old = args.string("old_string", "the exact text to replace")?;
    let new = args.string("new_string", "the text to put in its place")?;
    let all = args.opt_bool("replace_all")?.unwrap_or(false);
    if old.is_empty() {
        return Err(args.field_error(
            "old_string",
            "is empty; give the exact text to replace (write_file creates or replaces a whole file)",
        ));
    }
    if old == new {
        return Err(ToolError::new(
            "edit_file: old_string and new_string are the same; nothing would change",
        ));
    }
    let (rel, bytes) = ctx.workspace.read_all(path, EDIT_MAX)?;
    let found: Vec<usize> = memchr::memmem::find_iter(&bytes, old.as_bytes()).collect();
    if found.is_empty() {
        let mut message = format!(
            "old_string was not found in `{rel}`; read_file it and copy the text exactly, including spaces and line ends"
        );
        if memchr::memmem::find(&bytes, b"\r\n").is_some()
            && !old.contains("\r\n")
            && old.contains('\n')
        {
            message.push_str(" (this file ends its lines with \\r\\n)");
        }
        return Err(ToolError::new(message));
    }
    let old_lines = line_numbers(&bytes, &found);
    if found.len() > 1 && !all {
        return Err(ToolError::new(format!(
            "old_string matches {} times in `{rel}` (at lines {}); add surrounding lines so it matches once, or set replace_all",
            found.len(),
            list_numbers(&old_lines, 20)
        )));
    }
    let mut edited = Vec::with_capacity(bytes.len() + found.len() * new.len());
    let mut from = 0;
    let mut new_starts = Vec::with_capacity(found.len());
    for &at in &found {
        edited.extend_from_slice(&bytes[from..at]);
        new_starts.push(edited.len());
        edited.extend_from_slice(new.as_bytes());
        from = at + old.len();
    }
    edited.extend_from_slice(&bytes[from..]);
    ctx.workspace.write_file(&rel.to_string(), &edited)?;

    let span = memchr::memchr_iter(b'\n', new.as_bytes()).count() as u64;
    let mut starts = line_numbers(&edited, &new_starts);
    // Several replacements on one line name it once.
    starts.dedup();
    let ranges: Vec<String> = starts
        .iter()
        .take(20)
        .map(|&l| {
            if span == 0 {
                commas(l)
            } else {
                format!("{}-{}", commas(l), commas(l + span))
            }
        })
        .collect();
    let more = if starts.len() > 20 {
        format!(" and {} more", starts.len() - 20)
    } else {
        String::new()
    };
    let n = found.len();
    let text = format!(
        "edited {rel}: {n} replacement{}; changed line{} now {}{more}",
        if n == 1 { "" } else { "s" },
        if starts.len() == 1 && span == 0 {
            ""
        } else {
            "s"
        },
        ranges.join(", ")
    );
    let summary = format!(
        "edited {rel}: {n} replacement{} (line {})",
        if n == 1 { "" } else { "s" },
        list_numbers(&old_lines, 5)
    );
    Ok(ToolOutput::ok(text.clone(), summary, text.len() as u64))
}

/// The 1-based line of each byte index (sorted ascending).
fn line_numbers(bytes: &[u8], at: &[usize]) -> Vec<u64> {
    let mut lines = Vec::with_capacity(at.len());
    let mut line = 1u64;
    let mut from = 0usize;
    for &i in at {
        line += memchr::memchr_iter(b'\n', &bytes[from..i]).count() as u64;
        from = i;
        lines.push(line);
    }
    lines
}

fn list_numbers(numbers: &[u64], max: usize) -> String {
    let mut shown: Vec<String> = numbers.iter().take(max).map(|&n| commas(n)).collect();
    if numbers.len() > max {
        shown.push("…".into());
    }
    shown.join(", ")
}
