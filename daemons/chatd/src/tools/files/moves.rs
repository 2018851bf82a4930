//! move_file and delete_file. A deleted file's bytes stay in the chat's file
//! history (its trash), so a deletion is undone like any other change.

use serde_json::json;

use super::PATH_HINT;
use crate::tools::{Args, Effect, ToolContext, ToolOutput, ToolSpec};
use crate::workspace::ToolError;

pub fn move_file_spec() -> ToolSpec {
    ToolSpec {
        name: "move_file",
        description: "Move or rename a file of the workspace (missing folders are made). \
            An existing file at `to` is never replaced: delete it first if that is meant. \
            A helper that is done with (a script, a log, a draft) belongs under work/.",
        parameters: json!({
            "type": "object",
            "properties": {
                "from": {"type": "string", "description": "The file's path now, relative to the workspace"},
                "to": {"type": "string", "description": "Its new path, relative to the workspace"}
            },
            "required": ["from", "to"],
            "additionalProperties": false
        }),
        effect: Effect::Write,
    }
}

pub fn delete_file_spec() -> ToolSpec {
    ToolSpec {
        name: "delete_file",
        description: "Delete a file of the workspace. Its bytes stay in the chat's file \
            history, so the person can restore it.",
        parameters: json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path relative to the workspace"}
            },
            "required": ["path"],
            "additionalProperties": false
        }),
        effect: Effect::Write,
    }
}

pub fn move_file(args: &Args, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let from = args.string("from", PATH_HINT)?;
    let to = args.string("to", "the new path inside the workspace")?;
    let (from, to) = ctx.workspace.rename_file(from, to)?;
    let text = format!("moved {from} to {to}");
    Ok(ToolOutput::ok(
        text.clone(),
        text.clone(),
        text.len() as u64,
    ))
}

pub fn delete_file(args: &Args, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let path = args.string("path", PATH_HINT)?;
    let rel = ctx.workspace.remove_file(path)?;
    let text = format!("deleted {rel} (kept in the file history)");
    Ok(ToolOutput::ok(
        text.clone(),
        text.clone(),
        text.len() as u64,
    ))
}
