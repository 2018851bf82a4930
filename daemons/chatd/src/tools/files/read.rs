//! `read_file`: a text file shown by lines (an offset and a limit), a large
//! one read a window at a time, a very long line by columns, all cut to the
//! room the step has.

use std::borrow::Cow;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;

use super::{BINARY_PROBE, DEFAULT_LIMIT, PATH_HINT, WINDOW};
use crate::tools::fit::{commas, content_budget, effective_budget};
use crate::tools::{Args, ToolContext, ToolOutput};
use crate::workspace::ToolError;

/// A file being read: whole when small, else read a window at a time.
pub(super) struct Text {
    source: Source,
    size: u64,
}

pub(super) enum Source {
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

    /// Text held in memory (a document's).
    pub(super) fn whole(bytes: Vec<u8>) -> Text {
        let size = bytes.len() as u64;
        Text {
            source: Source::Whole(bytes),
            size,
        }
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
pub(super) enum LongLine {
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
                "`{rel}` is a binary file ({} bytes); not shown: {}",
                commas(size),
                crate::documents::hints::for_binary(&rel)
            ),
            format!("read {rel}: binary, {} bytes", commas(size)),
            size,
        ));
    }
    drop(probe);
    show_lines(&rel, &text, offset, limit, column, budget)
}

/// `text` from line `offset` (and column `column` of it), at most `limit`
/// lines and the room `budget` leaves, with a line saying how to read on.
pub(super) fn show_lines(
    rel: &str,
    text: &Text,
    offset: u64,
    limit: u64,
    column: u64,
    budget: usize,
) -> Result<ToolOutput, ToolError> {
    let room = content_budget(budget);
    let size = text.size;
    let start = match text.line_start(offset).map_err(|e| read_error(rel, e))? {
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
        match long_line(text, pos, column, room).map_err(|e| read_error(rel, e))? {
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
                    rel,
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
    let mut buf = text.window(pos, WINDOW).map_err(|e| read_error(rel, e))?;
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
                buf = text.window(pos, WINDOW).map_err(|e| read_error(rel, e))?;
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
        return match long_line(text, pos, 1, room).map_err(|e| read_error(rel, e))? {
            LongLine::Cut {
                shown,
                chars,
                shown_chars,
            } => Ok(long_line_output(
                rel,
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
            let total = last + text.lines_from(pos).map_err(|e| read_error(rel, e))?;
            out.push_str(&format!(
                "[lines {range} of {} shown; read on with offset={line}]",
                commas(total)
            ));
            let summary = format!("read {rel} lines {range} of {}", commas(total));
            Ok(ToolOutput::ok(out, summary, size))
        }
        Stop::Budget => {
            let total = last + text.lines_from(pos).map_err(|e| read_error(rel, e))?;
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
