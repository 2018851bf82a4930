//! `list_files`: the workspace's files matching a glob, sorted, `.git` left
//! out, at most `LIST_MAX` shown.

use globset::GlobBuilder;

use super::LIST_MAX;
use crate::tools::fit::{commas, fit_output};
use crate::tools::{Args, ToolContext, ToolOutput};
use crate::workspace::{EntryKind, ToolError, WALK_LIMIT};

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
