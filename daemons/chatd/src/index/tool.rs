//! `search_files`: the model's way into the index. chatd runs it itself
//! (it waits on the index, not on a blocking thread), after the scan that
//! brings the chat's manifest up to date.

use std::time::Duration;

use serde_json::json;

use super::{Found, Index, Matcher, Query, Request, MAX_FILES, MAX_TEXT};
use crate::tools::fit::{commas, fit_output};
use crate::tools::{Args, Effect, ToolOutput, ToolSpec};
use crate::workspace::{ToolError, Workspace};

pub const NAME: &str = "search_files";
/// How long a search waits for files still being indexed.
pub const SETTLE: Duration = Duration::from_secs(10);
/// The most matching lines a result lists.
pub const MAX_HITS: usize = 100;

pub fn spec() -> ToolSpec {
    ToolSpec {
        name: NAME,
        description: "Find which files of the workspace mention something: file names, text \
            files and the text of documents (PDF pages, workbook sheets, Word files, slides, \
            EPUB), from an index kept up to date as files change. Every word of `query` must be \
            on one line (in any case unless ignore_case is false), or `query` is a regular \
            expression with regex=true. Prints `path (page 3, line 40): text`, the line as \
            read_file or read_document numbers it, to read on from there.",
        parameters: json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Words that must all be on one line, or a regular expression with regex=true"},
                "path": {"type": "string", "description": "Only this folder or file, relative to the workspace (default: all of it)"},
                "regex": {"type": "boolean", "description": "query is a regular expression (Rust syntax; default false)"},
                "ignore_case": {"type": "boolean", "description": "Match in any case (default true)"}
            },
            "required": ["query"],
            "additionalProperties": false
        }),
        effect: Effect::Read,
    }
}

/// Runs one call over the chat's workspace (`root`, manifest `key`).
pub async fn run(
    index: &Index,
    root: &std::path::Path,
    key: &str,
    arguments: &str,
    call_id: &str,
    budget_chars: usize,
) -> ToolOutput {
    let (workspace, request) = match request_of(root, arguments) {
        Ok(made) => made,
        Err(err) => return ToolOutput::failed(NAME, err.message()),
    };
    let left = match index.settle(key, SETTLE).await {
        Ok(left) => left,
        Err(e) => {
            return ToolOutput::failed(
                NAME,
                &format!("the index could not be read ({})", e.status.as_u16()),
            )
        }
    };
    let query = request.query.clone();
    let found = match index.search(key, request.request).await {
        Ok(found) => found,
        Err(e) => {
            return ToolOutput::failed(
                NAME,
                &format!("the index could not be read ({})", e.status.as_u16()),
            )
        }
    };
    let text = shown(&query, &found, left);
    let bytes = text.len() as u64;
    let summary = format!(
        "{} line{} in {} file{} for \"{query}\"",
        commas(found.hits.len() as u64),
        if found.hits.len() == 1 { "" } else { "s" },
        commas(files_of(&found) as u64),
        if files_of(&found) == 1 { "" } else { "s" },
    );
    ToolOutput::ok(
        fit_output(&workspace, call_id, text, budget_chars),
        summary,
        bytes,
    )
}

struct Asked {
    query: String,
    request: Request,
}

fn request_of(root: &std::path::Path, arguments: &str) -> Result<(Workspace, Asked), ToolError> {
    let args = Args::parse(NAME, arguments)?;
    let text = args.string("query", "the words to look for")?.to_string();
    let regex = args.opt_bool("regex")?.unwrap_or(false);
    let ignore_case = args.opt_bool("ignore_case")?.unwrap_or(true);
    let workspace = Workspace::open(root).map_err(|e| {
        ToolError::new(format!(
            "the chat's workspace could not be opened: {}",
            e.kind()
        ))
    })?;
    let under = match args.opt_string("path", "a folder or file inside the workspace")? {
        None => None,
        Some(path) => {
            let rel = workspace.resolve(path)?;
            (!rel.is_root()).then(|| rel.to_string())
        }
    };
    let matcher = Matcher::new(&Query {
        text: text.clone(),
        regex,
        ignore_case,
    })
    .map_err(|e| args.field_error("query", &e))?;
    Ok((
        workspace,
        Asked {
            query: text,
            request: Request {
                matcher,
                under,
                max_hits: MAX_HITS,
            },
        },
    ))
}

fn files_of(found: &Found) -> usize {
    let mut paths: Vec<&str> = found.hits.iter().map(|h| h.path.as_str()).collect();
    paths.extend(found.names.iter().map(String::as_str));
    paths.sort_unstable();
    paths.dedup();
    paths.len()
}

/// The result the model reads.
fn shown(query: &str, found: &Found, left: u64) -> String {
    let mut out = String::new();
    if found.hits.is_empty() && found.names.is_empty() {
        out.push_str(&format!(
            "Nothing matches \"{query}\" in {} file{} searched.\n",
            commas(found.files as u64),
            if found.files == 1 { "" } else { "s" }
        ));
    }
    if !found.hits.is_empty() {
        out.push_str(&format!(
            "{}{} matching line{} in {} file{}:\n",
            if found.more_hits { "The first " } else { "" },
            commas(found.hits.len() as u64),
            if found.hits.len() == 1 { "" } else { "s" },
            commas(files_of(found) as u64),
            if files_of(found) == 1 { "" } else { "s" }
        ));
        for hit in &found.hits {
            match &hit.part {
                Some(part) => out.push_str(&format!(
                    "{} ({part}, line {}): {}\n",
                    hit.path, hit.line, hit.text
                )),
                None => out.push_str(&format!("{} (line {}): {}\n", hit.path, hit.line, hit.text)),
            }
        }
    }
    if !found.names.is_empty() {
        out.push_str("Files whose name matches:\n");
        for name in &found.names {
            out.push_str(name);
            out.push('\n');
        }
    }
    let pending = left.max(found.pending);
    if pending > 0 {
        out.push_str(&format!(
            "[{} file{} still being indexed: only {} name{} looked at; search again in a moment]\n",
            commas(pending),
            if pending == 1 { " is" } else { "s are" },
            if pending == 1 { "its" } else { "their" },
            if pending == 1 { " was" } else { "s were" },
        ));
    }
    if found.more_hits {
        out.push_str(&format!(
            "[results limited: the first {MAX_HITS} matching lines; more words or a path narrow it]\n"
        ));
    }
    if found.beyond > 0 {
        out.push_str(&format!(
            "[results limited: a search looks at {} files or {} MiB of text at most; {} more \
             file{} not looked at: give a folder with path]\n",
            commas(MAX_FILES as u64),
            MAX_TEXT >> 20,
            commas(found.beyond as u64),
            if found.beyond == 1 { " was" } else { "s were" }
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::Hit;

    #[test]
    fn hits_name_their_page_and_line_and_what_was_left_out() {
        let found = Found {
            hits: vec![
                Hit {
                    path: "q3.pdf".into(),
                    part: Some("page 3".into()),
                    line: 40,
                    text: "Acme invoice 2291".into(),
                },
                Hit {
                    path: "notes.txt".into(),
                    part: None,
                    line: 2,
                    text: "acme invoice paid".into(),
                },
            ],
            names: vec!["acme-invoice.txt".into()],
            more_hits: false,
            files: 12,
            pending: 2,
            beyond: 1,
        };
        let text = shown("Acme invoice", &found, 2);
        assert!(text.starts_with("2 matching lines in 3 files:\n"), "{text}");
        assert!(text.contains("q3.pdf (page 3, line 40): Acme invoice 2291\n"));
        assert!(text.contains("notes.txt (line 2): acme invoice paid\n"));
        assert!(text.contains("Files whose name matches:\nacme-invoice.txt\n"));
        assert!(text.contains("[2 files are still being indexed"));
        assert!(text.contains("[results limited: a search looks at 20,000 files or 64 MiB"));
        let none = shown(
            "zzz",
            &Found {
                files: 1,
                ..Found::default()
            },
            0,
        );
        assert_eq!(none, "Nothing matches \"zzz\" in 1 file searched.\n");
    }
}
