//! read_file, write_file, edit_file, list_files.

use std::borrow::Cow;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;

use globset::GlobBuilder;
use serde_json::json;

use super::fit::{commas, content_budget, effective_budget, fit_output};
use super::{Args, Effect, ToolContext, ToolOutput, ToolSpec};
use crate::workspace::{EntryKind, ToolError, WALK_LIMIT};

/// Files up to this size are read whole; larger ones this much at a time.
pub const WINDOW: usize = 4 * 1024 * 1024;
/// A NUL byte in this much of the start makes a file binary.
pub const BINARY_PROBE: usize = 8 * 1024;
/// edit_file holds the file in memory twice: it works on files up to this size.
const EDIT_MAX: u64 = 16 * 1024 * 1024;
const DEFAULT_LIMIT: u64 = 2000;
const LIST_MAX: usize = 1000;

const PATH_HINT: &str = "a path inside the workspace";

pub fn read_file_spec() -> ToolSpec {
    ToolSpec {
        name: "read_file",
        description:
            "Read a text file of the workspace. Returns the text itself (no line numbers). \
            A long file is cut at whole lines; the last line then says how to read on \
            (call again with that offset). A single line too long to show at once is shown in \
            parts: call again with the offset and column it gives.",
        parameters: json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path relative to the workspace, like notes/a.md"},
                "offset": {"type": "integer", "minimum": 1, "description": "First line to show, 1-based (default 1)"},
                "limit": {"type": "integer", "minimum": 1, "description": "Most lines to show (default 2000)"},
                "column": {"type": "integer", "minimum": 1, "description": "1-based character column within line `offset` to start at, for a line too long to show at once"}
            },
            "required": ["path"],
            "additionalProperties": false
        }),
        effect: Effect::Read,
    }
}

pub fn write_file_spec() -> ToolSpec {
    ToolSpec {
        name: "write_file",
        description: "Create or replace a whole file in the workspace with `content` \
            (missing folders are made). To change part of an existing file, use edit_file.",
        parameters: json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path relative to the workspace, like notes/a.md"},
                "content": {"type": "string", "description": "The complete new content of the file"}
            },
            "required": ["path", "content"],
            "additionalProperties": false
        }),
        effect: Effect::Write,
    }
}

pub fn edit_file_spec() -> ToolSpec {
    ToolSpec {
        name: "edit_file",
        description: "Replace text in a workspace file. `old_string` must match the file exactly \
            (spaces, indentation and line ends included) and exactly once, unless replace_all is \
            true; add surrounding lines to make it unique. Read the file first.",
        parameters: json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path relative to the workspace"},
                "old_string": {"type": "string", "description": "The exact text to replace"},
                "new_string": {"type": "string", "description": "The text to put in its place (different from old_string)"},
                "replace_all": {"type": "boolean", "description": "Replace every occurrence (default false)"}
            },
            "required": ["path", "old_string", "new_string"],
            "additionalProperties": false
        }),
        effect: Effect::Write,
    }
}

pub fn list_files_spec() -> ToolSpec {
    ToolSpec {
        name: "list_files",
        description:
            "List the files of the workspace (or of one folder) whose paths match a glob, \
            sorted, with their sizes. `*` stays within one folder, `**` crosses folders: \
            `**/*.rs` finds .rs files at any depth. .git is skipped, and so is .tandem (chatd's own \
            files: todos, saved outputs) unless `path` is inside it.",
        parameters: json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Glob matched against paths relative to `path` (default **/*)"},
                "path": {"type": "string", "description": "Folder to list, relative to the workspace (default .)"}
            },
            "additionalProperties": false
        }),
        effect: Effect::Read,
    }
}

/// Lines of `bytes` as an editor counts them: a last line without a newline counts.
pub fn line_count(bytes: &[u8]) -> u64 {
    let newlines = memchr::memchr_iter(b'\n', bytes).count() as u64;
    match bytes.last() {
        None => 0,
        Some(b'\n') => newlines,
        Some(_) => newlines + 1,
    }
}

/// A file being read: whole when small, else read a window at a time.
struct Text {
    source: Source,
    size: u64,
}

enum Source {
    Whole(Vec<u8>),
    File(File),
}

impl Text {
    fn new(file: File, size: u64) -> io::Result<Text> {
        if size <= WINDOW as u64 {
            let mut bytes = Vec::with_capacity(size as usize);
            file.take(size).read_to_end(&mut bytes)?;
            // A file that shrank since the look ends where its bytes end.
            let size = bytes.len() as u64;
            return Ok(Text {
                source: Source::Whole(bytes),
                size,
            });
        }
        Ok(Text {
            source: Source::File(file),
            size,
        })
    }

    /// Up to `len` bytes from `pos`; fewer only at the end of the file.
    fn window(&self, pos: u64, len: usize) -> io::Result<Cow<'_, [u8]>> {
        match &self.source {
            Source::Whole(bytes) => {
                let start = (pos.min(bytes.len() as u64)) as usize;
                let end = start.saturating_add(len).min(bytes.len());
                Ok(Cow::Borrowed(&bytes[start..end]))
            }
            Source::File(file) => {
                let want = (self.size.saturating_sub(pos)).min(len as u64) as usize;
                let mut buf = vec![0u8; want];
                let mut filled = 0;
                while filled < want {
                    match file.read_at(&mut buf[filled..], pos + filled as u64) {
                        Ok(0) => break,
                        Ok(n) => filled += n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                buf.truncate(filled);
                Ok(Cow::Owned(buf))
            }
        }
    }

    /// Where line `line` (1-based) starts, or `Err(total lines)` past the end.
    fn line_start(&self, line: u64) -> io::Result<Result<u64, u64>> {
        if line <= 1 {
            return Ok(if self.size > 0 { Ok(0) } else { Err(0) });
        }
        let mut seen = 0u64;
        let mut pos = 0u64;
        let mut last = None;
        loop {
            let window = self.window(pos, WINDOW)?;
            if window.is_empty() {
                break;
            }
            for i in memchr::memchr_iter(b'\n', &window) {
                seen += 1;
                if seen == line - 1 {
                    let start = pos + i as u64 + 1;
                    if start < self.size {
                        return Ok(Ok(start));
                    }
                }
            }
            last = window.last().copied();
            pos += window.len() as u64;
        }
        Ok(Err(if last.is_some_and(|b| b != b'\n') {
            seen + 1
        } else {
            seen
        }))
    }

    /// How many lines start at or after `pos`, streamed a window at a time.
    fn lines_from(&self, mut pos: u64) -> io::Result<u64> {
        let mut lines = 0u64;
        let mut last = None;
        loop {
            let window = self.window(pos, WINDOW)?;
            if window.is_empty() {
                break;
            }
            lines += memchr::memchr_iter(b'\n', &window).count() as u64;
            last = window.last().copied();
            pos += window.len() as u64;
        }
        Ok(lines + u64::from(last.is_some_and(|b| b != b'\n')))
    }
}

/// A line shown from a column: all of the rest, or as much as fits.
enum LongLine {
    /// The column is past the line's end; the line has this many characters.
    PastEnd(u64),
    /// The rest of the line fit; the next line starts at `next`.
    Rest { shown: String, next: u64 },
    /// Only `shown_chars` characters fit of a line of `chars`.
    Cut {
        shown: String,
        chars: u64,
        shown_chars: u64,
    },
}

/// Reads the line at `start` a window at a time, counting its characters
/// (UTF-8 lead bytes) and keeping those from `column` on that fit `budget`.
fn long_line(text: &Text, start: u64, column: u64, budget: usize) -> io::Result<LongLine> {
    // Saturating: `column` comes from the model and may be anything.
    let last_col = column.saturating_add(budget as u64 - 1);
    let mut chars = 0u64;
    let mut kept = Vec::new();
    let mut pos = start;
    let mut next = None;
    'read: loop {
        let window = text.window(pos, WINDOW)?;
        if window.is_empty() {
            break;
        }
        for (i, &b) in window.iter().enumerate() {
            if b == b'\n' {
                next = Some(pos + i as u64 + 1);
                break 'read;
            }
            if b & 0xC0 != 0x80 {
                chars += 1;
            }
            if chars >= column && chars <= last_col {
                kept.push(b);
            }
        }
        pos += window.len() as u64;
    }
    if column > chars.max(1) {
        return Ok(LongLine::PastEnd(chars));
    }
    let mut shown = String::from_utf8_lossy(&kept).into_owned();
    // column ≤ max(chars, 1), so this is the count of characters left.
    if chars + 1 - column <= budget as u64 {
        if next.is_some() {
            shown.push('\n');
        }
        return Ok(LongLine::Rest {
            shown,
            next: next.unwrap_or(text.size),
        });
    }
    // Invalid UTF-8 may decode to more characters than lead bytes counted.
    if shown.chars().count() > budget {
        shown = shown.chars().take(budget).collect();
    }
    Ok(LongLine::Cut {
        shown,
        chars,
        shown_chars: budget as u64,
    })
}

fn read_error(rel: &str, e: io::Error) -> ToolError {
    ToolError::new(format!("cannot read `{rel}`: {e}"))
}

pub fn read_file(args: &Args, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let path = args.string("path", PATH_HINT)?;
    let offset = args.opt_count("offset", 1)?.unwrap_or(1);
    let limit = args.opt_count("limit", 1)?.unwrap_or(DEFAULT_LIMIT);
    let column = args.opt_count("column", 1)?.unwrap_or(1);
    let budget = effective_budget(ctx.budget_chars);
    let room = content_budget(budget);

    let opened = ctx.workspace.open_file(path)?;
    let rel = opened.path.to_string();
    if opened.size == 0 {
        return Ok(ToolOutput::ok(
            format!("`{rel}` is empty (0 bytes)"),
            format!("read {rel}: empty"),
            0,
        ));
    }
    let text = Text::new(opened.file, opened.size).map_err(|e| read_error(&rel, e))?;
    let size = text.size;
    let probe = text
        .window(0, BINARY_PROBE)
        .map_err(|e| read_error(&rel, e))?;
    if probe.contains(&0) {
        return Ok(ToolOutput::ok(
            format!(
                "`{rel}` is a binary file ({} bytes); not shown",
                commas(size)
            ),
            format!("read {rel}: binary, {} bytes", commas(size)),
            size,
        ));
    }
    drop(probe);
    let start = match text.line_start(offset).map_err(|e| read_error(&rel, e))? {
        Ok(start) => start,
        Err(total) => {
            return Err(ToolError::new(format!(
                "`{rel}` has {} line{}; offset={offset} is past its end",
                commas(total),
                if total == 1 { "" } else { "s" }
            )))
        }
    };

    let mut out = String::new();
    let mut used = 0usize;
    let mut pos = start;
    let mut line = offset;
    let end_line = offset.saturating_add(limit);

    if column > 1 {
        match long_line(&text, pos, column, room).map_err(|e| read_error(&rel, e))? {
            LongLine::PastEnd(chars) => {
                return Err(ToolError::new(format!(
                    "line {offset} of `{rel}` has {} characters; column={column} is past its end",
                    commas(chars)
                )))
            }
            LongLine::Cut {
                shown,
                chars,
                shown_chars,
            } => {
                return Ok(long_line_output(
                    &rel,
                    offset,
                    column,
                    shown,
                    chars,
                    shown_chars,
                    size,
                ))
            }
            LongLine::Rest { shown, next } => {
                used += shown.chars().count();
                out.push_str(&shown);
                pos = next;
                line += 1;
            }
        }
    }

    enum Stop {
        End,
        Limit,
        Budget,
    }
    let mut buf = text.window(pos, WINDOW).map_err(|e| read_error(&rel, e))?;
    let mut buf_start = pos;
    let stop = loop {
        if pos >= size {
            break Stop::End;
        }
        if line >= end_line {
            break Stop::Limit;
        }
        let rest = &buf[(pos - buf_start) as usize..];
        let at_end = buf_start + buf.len() as u64 >= size;
        let line_bytes = match memchr::memchr(b'\n', rest) {
            Some(i) => &rest[..=i],
            None if at_end => rest,
            // Whole lines only: the next window starts where this line does.
            None if pos > buf_start => {
                buf = text.window(pos, WINDOW).map_err(|e| read_error(&rel, e))?;
                buf_start = pos;
                continue;
            }
            // A line longer than one window.
            None => break Stop::Budget,
        };
        let shown = String::from_utf8_lossy(line_bytes);
        let chars = shown.chars().count();
        if used + chars > room {
            break Stop::Budget;
        }
        out.push_str(&shown);
        used += chars;
        pos += line_bytes.len() as u64;
        line += 1;
    };
    drop(buf);

    if matches!(stop, Stop::Budget) && line == offset {
        // Not even the first line fits: show it in parts.
        return match long_line(&text, pos, 1, room).map_err(|e| read_error(&rel, e))? {
            LongLine::Cut {
                shown,
                chars,
                shown_chars,
            } => Ok(long_line_output(
                &rel,
                offset,
                1,
                shown,
                chars,
                shown_chars,
                size,
            )),
            // Cannot happen (the line did not fit), but answer sensibly.
            LongLine::Rest { shown, .. } => Ok(ToolOutput::ok(
                shown,
                format!("read {rel} line {offset}"),
                size,
            )),
            LongLine::PastEnd(_) => Err(ToolError::new(format!(
                "`{rel}` changed while being read; read it again"
            ))),
        };
    }
    let last = line - 1;
    let range = format!("{}-{}", commas(offset), commas(last));
    match stop {
        Stop::End => {
            let summary = format!("read {rel} lines {range} of {}", commas(last));
            Ok(ToolOutput::ok(out, summary, size))
        }
        Stop::Limit => {
            let total = last + text.lines_from(pos).map_err(|e| read_error(&rel, e))?;
            out.push_str(&format!(
                "[lines {range} of {} shown; read on with offset={line}]",
                commas(total)
            ));
            let summary = format!("read {rel} lines {range} of {}", commas(total));
            Ok(ToolOutput::ok(out, summary, size))
        }
        Stop::Budget => {
            let total = last + text.lines_from(pos).map_err(|e| read_error(&rel, e))?;
            out.push_str(&format!(
                "[truncated at {} characters: lines {range} of {} shown, {} more bytes; read on with offset={line}]",
                commas(budget as u64),
                commas(total),
                commas(size - pos)
            ));
            let summary = format!("read {rel} lines {range} of {}", commas(total));
            Ok(ToolOutput::ok(out, summary, size))
        }
    }
}

fn long_line_output(
    rel: &str,
    line: u64,
    column: u64,
    mut shown: String,
    chars: u64,
    shown_chars: u64,
    size: u64,
) -> ToolOutput {
    let last = column + shown_chars - 1;
    shown.push('\n');
    shown.push_str(&format!(
        "[line {line} is {} characters; shown columns {}-{}; read on with offset={line} column={}]",
        commas(chars),
        commas(column),
        commas(last),
        last + 1
    ));
    let summary = format!(
        "read {rel} line {} columns {}-{}",
        commas(line),
        commas(column),
        commas(last)
    );
    ToolOutput::ok(shown, summary, size)
}

pub fn write_file(args: &Args, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let path = args.string("path", PATH_HINT)?;
    let content = args.string("content", "the complete text of the file")?;
    let rel = ctx.workspace.write_file(path, content.as_bytes())?;
    let lines = line_count(content.as_bytes());
    let text = format!(
        "wrote {rel} ({} line{}, {} bytes)",
        commas(lines),
        if lines == 1 { "" } else { "s" },
        commas(content.len() as u64)
    );
    Ok(ToolOutput::ok(
        text.clone(),
        text.clone(),
        text.len() as u64,
    ))
}

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

pub fn list_files(args: &Args, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let pattern = args
        .opt_string("pattern", "a glob like **/*.md")?
        .unwrap_or("**/*");
    let folder = args
        .opt_string("path", "a folder inside the workspace")?
        .unwrap_or(".");
    let pattern = pattern.strip_prefix("./").unwrap_or(pattern);
    let glob = GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map_err(|e| args.field_error("pattern", &format!("is not a valid glob ({e})")))?
        .compile_matcher();
    let rel = ctx.workspace.resolve(folder)?;
    let walk = ctx.workspace.walk(folder, WALK_LIMIT)?;
    let prefix = if rel.is_root() {
        String::new()
    } else {
        format!("{rel}/")
    };
    let mut files = Vec::new();
    let mut links = 0usize;
    for entry in &walk.entries {
        let inner = entry.path.strip_prefix(&prefix).unwrap_or(&entry.path);
        if !glob.is_match(inner) {
            continue;
        }
        match entry.kind {
            EntryKind::File => files.push(entry),
            EntryKind::Link => links += 1,
            _ => {}
        }
    }
    let mut out = String::new();
    for entry in files.iter().take(LIST_MAX) {
        out.push_str(&format!("{} ({} bytes)\n", entry.path, commas(entry.size)));
    }
    if files.len() > LIST_MAX {
        out.push_str(&format!(
            "[... and {} more files; narrow the pattern or path]\n",
            commas((files.len() - LIST_MAX) as u64)
        ));
    }
    if files.is_empty() {
        out.push_str(&format!("no files match `{pattern}` in `{rel}`"));
        if !pattern.contains('/') && !pattern.starts_with("**") {
            out.push_str(&format!(
                " (`{pattern}` matches in that folder only; **/{pattern} looks in subfolders too)"
            ));
        }
        out.push('\n');
    }
    if links > 0 {
        out.push_str(&format!(
            "({links} symlink{} also match{}; the workspace does not follow links)\n",
            if links == 1 { "" } else { "s" },
            if links == 1 { "es" } else { "" }
        ));
    }
    if walk.stopped {
        out.push_str(&format!(
            "[stopped after {} entries; give a narrower path]\n",
            commas(WALK_LIMIT as u64)
        ));
    }
    if walk.too_deep > 0 {
        out.push_str(&format!(
            "[{} folders nested too deep were not entered]\n",
            walk.too_deep
        ));
    }
    let bytes = out.len() as u64;
    let summary = format!(
        "list_files {pattern} in {rel}: {} file{}",
        commas(files.len() as u64),
        if files.len() == 1 { "" } else { "s" }
    );
    let text = fit_output(ctx.workspace, ctx.call_id, out, ctx.budget_chars);
    Ok(ToolOutput::ok(text, summary, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{run, stub_arguments, Registry, ToolContext};
    use crate::workspace::Workspace;
    use serde_json::Value;

    struct Fixture {
        _dir: tempfile::TempDir,
        ws: Workspace,
        registry: Registry,
    }

    impl Fixture {
        fn new() -> Fixture {
            let dir = tempfile::tempdir().expect("tempdir");
            let ws = Workspace::open(&dir.path().join("ws")).expect("ws");
            Fixture {
                _dir: dir,
                ws,
                registry: Registry::base(),
            }
        }

        fn call(&self, name: &str, args: Value, budget: usize) -> ToolOutput {
            let ctx = ToolContext {
                workspace: &self.ws,
                call_id: "call1",
                budget_chars: budget,
                web: None,
            };
            run(&self.registry, name, &args.to_string(), &ctx)
        }

        fn put(&self, path: &str, bytes: &[u8]) {
            let full = self.ws.root().join(path);
            if let Some(parent) = full.parent() {
                std::fs::create_dir_all(parent).expect("mkdir");
            }
            std::fs::write(full, bytes).expect("write");
        }
    }

    /// A line of exactly `len` bytes (newline included) starting with its number.
    fn numbered(n: usize, len: usize) -> String {
        let mut line = format!("{n:04} ");
        line.push_str(&"x".repeat(len - line.len() - 1));
        line.push('\n');
        line
    }

    fn the_317_line_file() -> String {
        let mut text = String::new();
        for n in 1..=30 {
            text.push_str(&numbered(n, 2_100));
        }
        for n in 31..=316 {
            text.push_str(&numbered(n, 2_227));
        }
        text.push_str(&numbered(317, 2_315));
        text
    }

    #[test]
    fn read_file_truncation_marker_is_exact() {
        let f = Fixture::new();
        let text = the_317_line_file();
        assert_eq!(text.len(), 702_237);
        f.put("notes/a.md", text.as_bytes());
        let out = f.call("read_file", json!({"path": "notes/a.md"}), 64_000);
        assert!(out.ok, "{}", out.text);
        let marker = "[truncated at 64,000 characters: lines 1-30 of 317 shown, 639,237 more bytes; read on with offset=31]";
        assert!(
            out.text.ends_with(marker),
            "{}",
            &out.text[out.text.len() - 200..]
        );
        assert_eq!(&out.text[..out.text.len() - marker.len()], &text[..63_000]);
        assert!(out.text.chars().count() <= 64_000);
        assert_eq!(out.summary, "read notes/a.md lines 1-30 of 317");
        assert_eq!(out.bytes, 702_237);

        let on = f.call(
            "read_file",
            json!({"path": "notes/a.md", "offset": 31}),
            64_000,
        );
        assert!(on.ok, "{}", on.text);
        assert!(on.text.starts_with("0031 xxx"));
        // 28 lines of 2,227 bytes fit 63,800; a 29th does not.
        let shown = &text[63_000..63_000 + 28 * 2_227];
        assert!(on.text.starts_with(shown));
        assert!(on.text.ends_with(&format!(
            "[truncated at 64,000 characters: lines 31-58 of 317 shown, {} more bytes; read on with offset=59]",
            commas(702_237 - 63_000 - 28 * 2_227)
        )));

        let tail = f.call(
            "read_file",
            json!({"path": "notes/a.md", "offset": 317}),
            64_000,
        );
        assert_eq!(tail.text, numbered(317, 2_315));
        let past = f.call(
            "read_file",
            json!({"path": "notes/a.md", "offset": 318}),
            64_000,
        );
        assert!(!past.ok);
        assert_eq!(
            past.text,
            "`notes/a.md` has 317 lines; offset=318 is past its end"
        );

        let limited = f.call(
            "read_file",
            json!({"path": "notes/a.md", "limit": 2}),
            64_000,
        );
        assert_eq!(
            limited.text,
            format!(
                "{}{}[lines 1-2 of 317 shown; read on with offset=3]",
                numbered(1, 2_100),
                numbered(2, 2_100)
            )
        );

        // The stub of writing this file, as the issue describes it.
        let args = json!({"path": "notes/a.md", "content": text}).to_string();
        let stub = stub_arguments("write_file", &args).expect("stub");
        let v: Value = serde_json::from_str(&stub).expect("json");
        let content = v["content"].as_str().expect("string");
        assert!(content
            .starts_with("[content not repeated: notes/a.md, 317 lines, 702,237 bytes, sha256 "));
        assert_eq!(stub_arguments("write_file", &args), Some(stub.clone()));
    }

    #[test]
    fn read_file_streams_a_6_mb_file() {
        let f = Fixture::new();
        let mut text = String::with_capacity(6_000_000);
        for n in 1..=60_000 {
            let mut line = format!("line {n:06} ");
            line.push_str(&"a".repeat(99 - line.len()));
            line.push('\n');
            text.push_str(&line);
        }
        assert_eq!(text.len(), 6_000_000);
        f.put("big.txt", text.as_bytes());
        let out = f.call("read_file", json!({"path": "big.txt"}), 64_000);
        assert!(out.text.starts_with("line 000001 "));
        assert!(out.text.ends_with(
            "[truncated at 64,000 characters: lines 1-638 of 60,000 shown, 5,936,200 more bytes; read on with offset=639]"
        ), "{}", &out.text[out.text.len() - 200..]);

        // Line 50,000 starts at byte 4,999,900, past the first 4 MiB.
        let far = f.call(
            "read_file",
            json!({"path": "big.txt", "offset": 50_000, "limit": 3}),
            64_000,
        );
        assert_eq!(
            far.text,
            format!(
                "{}[lines 50,000-50,002 of 60,000 shown; read on with offset=50003]",
                &text[4_999_900..5_000_200]
            )
        );
        let last = f.call(
            "read_file",
            json!({"path": "big.txt", "offset": 60_000}),
            64_000,
        );
        assert_eq!(last.text, &text[5_999_900..]);
        let past = f.call(
            "read_file",
            json!({"path": "big.txt", "offset": 60_001}),
            64_000,
        );
        assert!(past.text.contains("has 60,000 lines"), "{}", past.text);

        // grep given the file directly reads it a window at a time.
        let found = f.call(
            "grep",
            json!({"pattern": "^line 05000[01] ", "path": "big.txt"}),
            64_000,
        );
        assert!(
            found.text.starts_with("big.txt:50000: line 050000 aaa"),
            "{}",
            found.text
        );
        assert!(
            found.text.contains("\nbig.txt:50001: line 050001 "),
            "{}",
            found.text
        );
        assert_eq!(
            found.summary,
            "grep \"^line 05000[01] \": 2 matches in 1 file"
        );
    }

    #[test]
    fn read_file_goes_on_by_column_in_a_5_mb_line() {
        let f = Fixture::new();
        let line: String = (0..5_000_000u32)
            .map(|i| char::from(b'0' + (i % 10) as u8))
            .collect();
        f.put("one.txt", format!("{line}\nend\n").as_bytes());
        let out = f.call("read_file", json!({"path": "one.txt"}), 64_000);
        assert_eq!(
            out.text,
            format!(
                "{}\n[line 1 is 5,000,000 characters; shown columns 1-63,800; read on with offset=1 column=63801]",
                &line[..63_800]
            )
        );
        let on = f.call(
            "read_file",
            json!({"path": "one.txt", "offset": 1, "column": 63_801}),
            64_000,
        );
        assert_eq!(
            on.text,
            format!(
                "{}\n[line 1 is 5,000,000 characters; shown columns 63,801-127,600; read on with offset=1 column=127601]",
                &line[63_800..127_600]
            )
        );
        // The rest of the line fits: it is shown, then the next lines.
        let rest = f.call(
            "read_file",
            json!({"path": "one.txt", "offset": 1, "column": 4_990_001}),
            64_000,
        );
        assert_eq!(rest.text, format!("{}\nend\n", &line[4_990_000..]));
        let past = f.call(
            "read_file",
            json!({"path": "one.txt", "offset": 1, "column": 5_000_001}),
            64_000,
        );
        assert!(
            !past.ok && past.text.contains("has 5,000,000 characters"),
            "{}",
            past.text
        );

        // Columns count characters, not bytes.
        f.put("wide.txt", "é".repeat(100_000).as_bytes());
        let wide = f.call("read_file", json!({"path": "wide.txt"}), 64_000);
        assert!(wide.text.ends_with(
            "[line 1 is 100,000 characters; shown columns 1-63,800; read on with offset=1 column=63801]"
        ));
        assert!(wide.text.starts_with(&"é".repeat(63_800)));
    }

    #[test]
    fn read_file_small_cases() {
        let f = Fixture::new();
        f.put("empty.txt", b"");
        f.put("bin.dat", b"abc\0def");
        f.put("latin.txt", b"caf\xe9\n");
        f.put("short.txt", b"one\ntwo");
        let empty = f.call("read_file", json!({"path": "empty.txt"}), 64_000);
        assert!(empty.ok && empty.text.contains("is empty"));
        let bin = f.call("read_file", json!({"path": "bin.dat"}), 64_000);
        assert_eq!(bin.text, "`bin.dat` is a binary file (7 bytes); not shown");
        let latin = f.call("read_file", json!({"path": "latin.txt"}), 64_000);
        assert_eq!(latin.text, "caf\u{fffd}\n");
        let short = f.call("read_file", json!({"path": "./short.txt"}), 64_000);
        assert_eq!(short.text, "one\ntwo");
        assert_eq!(short.summary, "read short.txt lines 1-2 of 2");
        let missing = f.call("read_file", json!({"path": "nope.txt"}), 64_000);
        assert!(!missing.ok && missing.text.contains("`nope.txt` does not exist"));
        let folder = f.call("read_file", json!({"path": "."}), 64_000);
        assert!(!folder.ok);
        let far = f.call(
            "read_file",
            json!({"path": "short.txt", "offset": u64::MAX, "limit": u64::MAX}),
            64_000,
        );
        assert_eq!(
            far.text,
            format!(
                "`short.txt` has 2 lines; offset={} is past its end",
                u64::MAX
            )
        );
        let wide = f.call(
            "read_file",
            json!({"path": "short.txt", "column": u64::MAX}),
            64_000,
        );
        assert!(
            !wide.ok && wide.text.contains("past its end"),
            "{}",
            wide.text
        );
        let all = f.call(
            "read_file",
            json!({"path": "short.txt", "limit": u64::MAX}),
            64_000,
        );
        assert_eq!(all.text, "one\ntwo");
        let tiny = f.call("read_file", json!({"path": "short.txt"}), 0);
        assert_eq!(tiny.text, "one\ntwo");
    }

    #[test]
    fn write_file_reports_lines_and_bytes() {
        let f = Fixture::new();
        let out = f.call(
            "write_file",
            json!({"path": "notes/a.md", "content": "a\nb\n"}),
            64_000,
        );
        assert!(out.ok, "{}", out.text);
        assert_eq!(out.text, "wrote notes/a.md (2 lines, 4 bytes)");
        assert_eq!(
            std::fs::read(f.ws.root().join("notes/a.md")).expect("read"),
            b"a\nb\n"
        );
        let missing = f.call("write_file", json!({"path": "x"}), 64_000);
        assert_eq!(
            missing.text,
            "write_file: \"content\" is required (the complete text of the file)"
        );
    }

    #[test]
    fn edit_file_matches_once_or_says_why_not() {
        let f = Fixture::new();
        f.put("x.txt", b"a\nfoo\nb\nfoo\n");
        let none = f.call(
            "edit_file",
            json!({"path": "x.txt", "old_string": "bar", "new_string": "baz"}),
            64_000,
        );
        assert!(!none.ok);
        assert_eq!(
            none.text,
            "old_string was not found in `x.txt`; read_file it and copy the text exactly, including spaces and line ends"
        );
        let several = f.call(
            "edit_file",
            json!({"path": "x.txt", "old_string": "foo", "new_string": "bar"}),
            64_000,
        );
        assert!(!several.ok);
        assert_eq!(
            several.text,
            "old_string matches 2 times in `x.txt` (at lines 2, 4); add surrounding lines so it matches once, or set replace_all"
        );
        let same = f.call(
            "edit_file",
            json!({"path": "x.txt", "old_string": "foo", "new_string": "foo"}),
            64_000,
        );
        assert!(!same.ok && same.text.contains("the same"));
        assert_eq!(
            std::fs::read(f.ws.root().join("x.txt")).expect("read"),
            b"a\nfoo\nb\nfoo\n"
        );

        let once = f.call(
            "edit_file",
            json!({"path": "x.txt", "old_string": "b\nfoo", "new_string": "B\nF\nG"}),
            64_000,
        );
        assert!(once.ok, "{}", once.text);
        assert_eq!(
            once.text,
            "edited x.txt: 1 replacement; changed lines now 3-5"
        );
        assert_eq!(
            std::fs::read(f.ws.root().join("x.txt")).expect("read"),
            b"a\nfoo\nB\nF\nG\n"
        );

        f.put("y.txt", b"foo foo\nfoo\n");
        let all = f.call(
            "edit_file",
            json!({"path": "y.txt", "old_string": "foo", "new_string": "bar", "replace_all": true}),
            64_000,
        );
        assert!(all.ok, "{}", all.text);
        assert_eq!(
            all.text,
            "edited y.txt: 3 replacements; changed lines now 1, 2"
        );
        assert_eq!(
            std::fs::read(f.ws.root().join("y.txt")).expect("read"),
            b"bar bar\nbar\n"
        );

        f.put("crlf.txt", b"one\r\ntwo\r\n");
        let crlf = f.call(
            "edit_file",
            json!({"path": "crlf.txt", "old_string": "one\ntwo", "new_string": "x"}),
            64_000,
        );
        assert!(crlf.text.contains("\\r\\n"), "{}", crlf.text);
    }

    #[test]
    fn list_files_globs_sorts_and_skips_git() {
        let f = Fixture::new();
        f.put("src/main.rs", b"fn main() {}\n");
        f.put("src/lib/util.rs", b"//\n");
        f.put("notes/b.md", b"# b\n");
        f.put("README.md", b"hello\n");
        f.put(".git/config", b"[core]\n");
        let all = f.call("list_files", json!({}), 64_000);
        assert_eq!(
            all.text,
            "README.md (6 bytes)\nnotes/b.md (4 bytes)\nsrc/lib/util.rs (3 bytes)\nsrc/main.rs (13 bytes)\n"
        );
        let rs = f.call("list_files", json!({"pattern": "**/*.rs"}), 64_000);
        assert_eq!(
            rs.text,
            "src/lib/util.rs (3 bytes)\nsrc/main.rs (13 bytes)\n"
        );
        let top = f.call("list_files", json!({"pattern": "*.md"}), 64_000);
        assert_eq!(top.text, "README.md (6 bytes)\n");
        let inside = f.call(
            "list_files",
            json!({"pattern": "*.rs", "path": "src"}),
            64_000,
        );
        assert_eq!(inside.text, "src/main.rs (13 bytes)\n");
        let none = f.call("list_files", json!({"pattern": "*.txt"}), 64_000);
        assert!(
            none.text.starts_with("no files match `*.txt` in `.`"),
            "{}",
            none.text
        );
        let bad = f.call("list_files", json!({"pattern": "a[b"}), 64_000);
        assert!(
            !bad.ok
                && bad
                    .text
                    .starts_with("list_files: \"pattern\" is not a valid glob")
        );
    }
}
