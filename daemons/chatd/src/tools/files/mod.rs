//! The file tools: read_file, write_file, edit_file, list_files, move_file,
//! delete_file. Here the specs of the first four, the line count they share
//! and write_file; the others each have a module.

use serde_json::json;

use super::fit::commas;
use super::{Args, Effect, ToolContext, ToolOutput, ToolSpec};
use crate::workspace::ToolError;

mod document;
mod edit;
mod list;
mod moves;
mod read;
#[cfg(test)]
mod tests;

pub use document::{read_document, read_document_spec};
pub use edit::edit_file;
pub use list::list_files;
pub use moves::{delete_file, delete_file_spec, move_file, move_file_spec};

/// read_file: a document (a PDF, a workbook, …) as the reader's text, any
/// other file as it is.
pub fn read_file(args: &Args, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    match document::as_document(args, ctx) {
        Some(shown) => shown,
        None => read::read_file(args, ctx),
    }
}

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
            (missing folders are made). To change part of an existing file, use edit_file. \
            Put scripts, logs and drafts under work/; the files the person asked for go \
            elsewhere. Every write is kept and can be undone.",
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
