//! `read_document`, and `read_file` on a document: the document's text as
//! the reader made it (`documents`), shown by lines like a text file, with
//! a first line saying what it is (pages, sheets, what was left out).

use serde_json::json;

use super::read::{show_lines, Text};
use super::{DEFAULT_LIMIT, PATH_HINT};
use crate::documents::DocKind;
use crate::tools::{Args, Effect, ToolContext, ToolOutput, ToolSpec};
use crate::workspace::ToolError;

pub fn read_document_spec() -> ToolSpec {
    ToolSpec {
        name: "read_document",
        description:
            "Read the text of a document of the workspace: a PDF page by page, a workbook \
            (.xlsx .xlsm .xls .ods) sheet by sheet as tab-separated rows, a Word file (.docx), \
            slides (.pptx) with their notes, an EPUB, a CSV or TSV table. Each page, sheet or \
            slide starts with a line of its own (`## Page 3`). Shown by lines like read_file: \
            the last line says how to read on (call again with that offset). read_file on a \
            document does the same.",
        parameters: json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Document path relative to the workspace, like uploads/report.pdf"},
                "offset": {"type": "integer", "minimum": 1, "description": "First line of the text to show, 1-based (default 1)"},
                "limit": {"type": "integer", "minimum": 1, "description": "Most lines to show (default 2000)"}
            },
            "required": ["path"],
            "additionalProperties": false
        }),
        effect: Effect::Read,
    }
}

pub fn read_document(args: &Args, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let path = args.string("path", PATH_HINT)?;
    let offset = args.opt_count("offset", 1)?.unwrap_or(1);
    let limit = args.opt_count("limit", 1)?.unwrap_or(DEFAULT_LIMIT);
    let opened = ctx.workspace.open_file(path)?;
    let rel = opened.path.to_string();
    let Some(kind) = DocKind::of(&rel) else {
        return Err(ToolError::new(format!(
            "`{rel}` is not a document read_document reads (PDF, .xlsx .xlsm .xls .ods, \
             .docx, .pptx, .epub, .csv, .tsv); read_file shows a text file"
        )));
    };
    show_document(&rel, opened.file, kind, offset, limit, ctx)
}

/// read_file on a document of a binary kind, where documents are read;
/// `None` for any other file (a CSV or TSV is text, shown as it is).
pub(super) fn as_document(args: &Args, ctx: &ToolContext) -> Option<Result<ToolOutput, ToolError>> {
    let path = args.string("path", PATH_HINT).ok()?;
    let kind = DocKind::of(path).filter(|k| !matches!(k, DocKind::Csv | DocKind::Tsv))?;
    ctx.documents?;
    let shown = (|| {
        let offset = args.opt_count("offset", 1)?.unwrap_or(1);
        let limit = args.opt_count("limit", 1)?.unwrap_or(DEFAULT_LIMIT);
        let opened = ctx.workspace.open_file(path)?;
        let rel = opened.path.to_string();
        show_document(&rel, opened.file, kind, offset, limit, ctx)
    })();
    Some(shown)
}

/// The document's text from line `offset`.
fn show_document(
    rel: &str,
    file: std::fs::File,
    kind: DocKind,
    offset: u64,
    limit: u64,
    ctx: &ToolContext,
) -> Result<ToolOutput, ToolError> {
    let Some(documents) = ctx.documents else {
        return Err(ToolError::new(format!(
            "`{rel}` is a {}, and documents are not read here",
            kind.word()
        )));
    };
    let doc = documents.read_blocking(file, kind).map_err(|cause| {
        ToolError::new(format!("cannot read `{rel}` as a {}: {cause}", kind.word()))
    })?;
    let head = format!("[{rel}: {}]", doc.line());
    if doc.extracted.text.trim().is_empty() {
        return Ok(ToolOutput::ok(
            format!("{head}\nIt has no text."),
            format!("read {rel}: no text"),
            0,
        ));
    }
    let text = Text::whole(doc.extracted.text.as_bytes().to_vec());
    let mut out = show_lines(rel, &text, offset, limit, 1, ctx.budget_chars)?;
    if offset == 1 {
        out.text = format!("{head}\n{}", out.text);
    }
    Ok(out)
}
