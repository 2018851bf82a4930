//! `GET /conversations/{id}/files?path=REL`: the bytes of one file in the
//! chat's workspace (its own or the shared one, the folder its file tools
//! use), for a sender that passes on what an agent wrote (connectord).
//!
//! The path goes through `workspace.rs` like a tool's: relative, no `..`,
//! every folder opened without following a link, a regular file only.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tandem_shared::http::ApiError;

use crate::store::queries::{self, Trashed};
use crate::workspace::Workspace;
use crate::App;
use tokio::io::AsyncReadExt;
use tokio_util::io::ReaderStream;

/// The largest file this route hands out.
pub const MAX_FILE_BYTES: u64 = 50 * 1024 * 1024;

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct FileParams {
    pub path: Option<String>,
    /// `1`: shown in the browser (images, PDF, plain text, audio, video
    /// only; never HTML or SVG), else downloaded.
    pub inline: Option<String>,
}

/// `GET …/files/content?path=`: the file streamed, whatever its size.
pub async fn download(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    params: Result<Query<FileParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    send_file(&app, &id, params, None).await
}

/// `GET …/files?path=`: the same, within [`MAX_FILE_BYTES`], the bound its
/// first caller (connectord, which holds a file whole to send it on) keeps.
pub async fn download_bounded(
    app: &App,
    id: &str,
    params: Result<Query<FileParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    send_file(app, id, params, Some(MAX_FILE_BYTES)).await
}

async fn send_file(
    app: &App,
    id: &str,
    params: Result<Query<FileParams>, QueryRejection>,
    max: Option<u64>,
) -> Result<Response, ApiError> {
    let (path, params) = path_param(params)?;
    let cid = id.to_string();
    app.store
        .read(move |conn| queries::conversation(conn, &cid, Trashed::Exclude))
        .await?;
    let root = app.runs.workspace_root(id);
    let (name, file, size) = tokio::task::spawn_blocking(move || open(&root, &path))
        .await
        .map_err(|_| ApiError::internal("reading the file stopped"))??;
    if max.is_some_and(|max| size > max) {
        return Err(too_large());
    }
    // Streamed, never held whole: exactly the size the header says (a file
    // that grew since the look sends what it was).
    let stream = ReaderStream::new(tokio::fs::File::from_std(file).take(size));
    let mut response = axum::body::Body::from_stream(stream).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type(&name)),
    );
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    let shown = params.inline.as_deref() == Some("1") && inline_type(content_type(&name));
    let mut value = disposition(&name);
    if shown {
        value = value.replacen("attachment", "inline", 1);
    }
    if let Ok(value) = HeaderValue::from_str(&value) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    Ok(response)
}

/// The longest `path` a route takes.
const PATH_MAX: usize = 4096;

/// The `path` of a files route's query: given, relative, at most 4,096
/// bytes; the query's other parameters beside it.
pub fn path_param(
    params: Result<Query<FileParams>, QueryRejection>,
) -> Result<(String, FileParams), ApiError> {
    // A query serde refuses (`path` twice) answers in the CONTRACT's shape too.
    let Query(mut params) = params.map_err(|e| ApiError::bad_input("path", e.body_text()))?;
    let path = params.path.take().unwrap_or_default();
    if path.is_empty() {
        return Err(ApiError::bad_input(
            "path",
            "is empty; give a path inside the chat's workspace, like notes/a.md",
        ));
    }
    if path.len() > PATH_MAX {
        return Err(ApiError::bad_input(
            "path",
            format!("is {} bytes; at most {PATH_MAX}", path.len()),
        ));
    }
    if path.starts_with('/') {
        return Err(ApiError::bad_input(
            "path",
            format!("`{path}` is absolute; give a path relative to the chat's workspace"),
        ));
    }
    Ok((path, params))
}

/// The file's name, the file open and its size, checked the way the tools
/// check a path.
pub(super) fn open(
    root: &std::path::Path,
    path: &str,
) -> Result<(String, std::fs::File, u64), ApiError> {
    let missing = || {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no file `{path}` in this chat's workspace"),
        )
        .with("field", "path")
    };
    let workspace = match Workspace::existing(root) {
        Ok(workspace) => workspace,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(missing()),
        Err(e) => {
            return Err(ApiError::internal(format!(
                "the chat's workspace cannot be opened: {e}"
            )))
        }
    };
    let rel = workspace
        .resolve(path)
        .map_err(|e| ApiError::bad_input("path", e.message()))?;
    let Some(name) = rel.parts().last().cloned() else {
        return Err(ApiError::bad_input(
            "path",
            "`.` is the workspace folder, not a file",
        ));
    };
    let opened = workspace.open_file(&rel.to_string()).map_err(|e| {
        if e.is_missing() {
            missing()
        } else {
            // The tools' hint for a model is no use to an HTTP caller.
            let message = e.message();
            let message = message.split("; list_files").next().unwrap_or(message);
            ApiError::bad_input("path", message)
        }
    })?;
    Ok((name, opened.file, opened.size))
}

fn too_large() -> ApiError {
    ApiError::too_large("the file", MAX_FILE_BYTES as usize)
}

/// Whether a browser may show this type in place: images, PDF, plain text,
/// audio and video. Never HTML or SVG (a page or a script in chatd's origin);
/// `content_type` never names them anyway.
fn inline_type(mime: &str) -> bool {
    mime.starts_with("image/")
        || mime.starts_with("audio/")
        || mime.starts_with("video/")
        || mime == "application/pdf"
        || mime.starts_with("text/plain")
        || mime.starts_with("text/markdown")
        || mime.starts_with("text/csv")
}

/// The type a file's extension says; anything unknown is plain bytes.
pub fn content_type(name: &str) -> &'static str {
    let extension = match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => ext.to_ascii_lowercase(),
        _ => return "application/octet-stream",
    };
    match extension.as_str() {
        "pdf" => "application/pdf",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "mp3" => "audio/mpeg",
        "ogg" => "audio/ogg",
        "wav" => "audio/wav",
        "mp4" => "video/mp4",
        "webm" => "video/webm",
        "csv" => "text/csv; charset=utf-8",
        "json" => "application/json",
        "txt" => "text/plain; charset=utf-8",
        "md" => "text/markdown; charset=utf-8",
        "zip" => "application/zip",
        _ => "application/octet-stream",
    }
}

/// `attachment; filename="<name>"`, the quoted name printable ASCII without
/// `"` or `\` (others become `_`); a name that needed that also gets
/// `filename*=UTF-8''<percent-encoded>` (RFC 6266) with the real name.
pub fn disposition(name: &str) -> String {
    let plain: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut value = format!("attachment; filename=\"{plain}\"");
    if plain != name {
        value.push_str("; filename*=UTF-8''");
        for b in name.bytes() {
            let keep = b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&b);
            if keep {
                value.push(char::from(b));
            } else {
                value.push_str(&format!("%{b:02X}"));
            }
        }
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_by_extension() {
        assert_eq!(content_type("report.PDF"), "application/pdf");
        assert_eq!(content_type("a.b.jpeg"), "image/jpeg");
        assert_eq!(content_type("notes.md"), "text/markdown; charset=utf-8");
        assert_eq!(content_type("Makefile"), "application/octet-stream");
        assert_eq!(content_type(".png"), "application/octet-stream");
        assert_eq!(content_type("x.exe"), "application/octet-stream");
        assert!(inline_type(content_type("a.png")) && inline_type(content_type("a.pdf")));
        for name in ["a.html", "a.svg", "a.htm", "a.xhtml", "a.json", "a.zip"] {
            assert!(!inline_type(content_type(name)), "{name}");
        }
    }

    #[test]
    fn disposition_is_quote_safe() {
        assert_eq!(disposition("a b.txt"), "attachment; filename=\"a b.txt\"");
        assert_eq!(
            disposition("say \"hi\"\\.txt"),
            "attachment; filename=\"say _hi__.txt\"; filename*=UTF-8''say%20%22hi%22%5C.txt"
        );
        assert_eq!(
            disposition("café\r\n.txt"),
            "attachment; filename=\"caf___.txt\"; filename*=UTF-8''caf%C3%A9%0D%0A.txt"
        );
        for name in ["a\"b", "é", "x\ny", "tab\there"] {
            assert!(HeaderValue::from_str(&disposition(name)).is_ok(), "{name}");
        }
    }
}
