//! Files sent with a message. Each one is saved in the chat's workspace
//! under `uploads/` with a free name (cut to 255 bytes). Text goes into the
//! message while it fits in a quarter of the free window (32,000 tokens at
//! most for all of them); a larger file is named by path, size and tokens so
//! the model can read it with `read_file`. Images go to a model that reads
//! images; to any other they are named only (with describe_image to have
//! them described, where a model of the box sees images). A voice note goes
//! in as its transcript (`voice`), or a line saying why there is none.
//!
//! A JSON send carries its files inline (text or base64, under the request
//! body limit); a multipart one streams them to disk (`api/form.rs`). Both
//! end as [`Placed`] files that [`describe`] turns into the message's text.

pub mod names;

use std::collections::HashMap;
use std::io::Read;
use std::sync::Arc;

use base64::Engine as _;
use serde::Deserialize;
use serde_json::{json, Value};
use tandem_shared::http::ApiError;

use crate::documents::{DocKind, DocText, INLINE_CHARS};
use crate::models::Sight;
use crate::tools::fit::commas;
use crate::voice::{NotTranscribed, Transcript};
use crate::workspace::Workspace;
pub use names::{free_base, guess_mime};

/// The most files one message may carry.
pub const MAX_FILES: usize = 20;
/// The most tokens of text all of a message's files may put inline.
pub const MAX_INLINE_TOKENS: u64 = 32_000;
/// The largest image shown to a model, in bytes (scaled to fit first:
/// `documents::images`).
pub const MAX_IMAGE_BYTES: u64 = crate::documents::formats::MAX_INPUT;
/// The folder of the workspace uploads go to.
pub const UPLOADS: &str = "uploads";
/// The most of a file read to put it inline: more can never fit the
/// 32,000 tokens (at most 4 bytes a character, about 4 characters a token).
const INLINE_READ_MAX: u64 = 1 << 20;

/// One file as a JSON request carries it: its text, or its bytes in base64.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Upload {
    pub name: String,
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub data_base64: Option<String>,
    #[serde(default)]
    pub mime: Option<String>,
}

/// An upload checked and decoded, not yet stored.
pub struct Decoded {
    name: String,
    bytes: Vec<u8>,
    mime: String,
}

/// A file of a message, on disk in the workspace.
pub struct Placed {
    /// Workspace-relative, `uploads/…`.
    pub path: String,
    pub mime: String,
    pub size: u64,
    /// The name asked for, when it was taken and the file got another.
    pub conflict_of: Option<String>,
}

/// Checks every upload before anything is stored; each error names the
/// field (`attachments[2].data_base64`) and the limit.
pub fn check(uploads: Vec<Upload>) -> Result<Vec<Decoded>, ApiError> {
    if uploads.len() > MAX_FILES {
        return Err(too_many(uploads.len()));
    }
    let mut out = Vec::with_capacity(uploads.len());
    for (i, upload) in uploads.into_iter().enumerate() {
        let field = |f: &str| format!("attachments[{i}].{f}");
        let name = free_base(&upload.name)
            .ok_or_else(|| ApiError::bad_input(&field("name"), "is not a file name"))?;
        let bytes = match (upload.text, upload.data_base64) {
            (Some(text), None) => text.into_bytes(),
            (None, Some(data)) => base64::engine::general_purpose::STANDARD
                .decode(data.trim())
                .map_err(|e| {
                    ApiError::bad_input(&field("data_base64"), format!("is not base64: {e}"))
                })?,
            _ => {
                return Err(ApiError::bad_input(
                    &field("text"),
                    "give exactly one of text and data_base64",
                ))
            }
        };
        let mime = upload.mime.unwrap_or_else(|| guess_mime(&name).to_string());
        out.push(Decoded { name, bytes, mime });
    }
    Ok(out)
}

/// The refusal of a message with more than [`MAX_FILES`] files.
pub fn too_many(count: usize) -> ApiError {
    ApiError::bad_input(
        "attachments",
        format!("{count} files is more than {MAX_FILES}"),
    )
    .with("limit", MAX_FILES)
}

/// A streamed file waiting at its hidden staging name to be landed.
pub struct Staged {
    pub staged: String,
    /// The name asked for (already made safe).
    pub name: String,
    pub mime: String,
    pub size: u64,
}

/// A message's files on their way in: decoded from a JSON body, or
/// streamed to staging names by a form.
pub enum Incoming {
    Decoded(Vec<Decoded>),
    Staged(Vec<Staged>),
}

/// Puts a message's files under `uploads/`, each under a free name (run
/// under the workspace's history lock: `FileHistory::land`).
pub fn land(workspace: &Workspace, files: Incoming) -> Result<Vec<Placed>, String> {
    let mut placed = Vec::new();
    match files {
        Incoming::Decoded(files) => {
            for file in files {
                let path = names::free_path(workspace, UPLOADS, &file.name);
                workspace
                    .write_file(&path, &file.bytes)
                    .map_err(|e| e.to_string())?;
                placed.push(Placed {
                    conflict_of: asked_for(&path, &file.name),
                    path,
                    mime: file.mime,
                    size: file.bytes.len() as u64,
                });
            }
        }
        Incoming::Staged(files) => {
            for file in files {
                let path = names::land_free(workspace, &file.staged, UPLOADS, &file.name)
                    .map_err(|e| e.to_string())?;
                placed.push(Placed {
                    conflict_of: asked_for(&path, &file.name),
                    path,
                    mime: file.mime,
                    size: file.size,
                });
            }
        }
    }
    Ok(placed)
}

/// `uploads/<name>` when `path` is another name than the one asked for.
pub fn asked_for(path: &str, name: &str) -> Option<String> {
    let asked = format!("{UPLOADS}/{name}");
    (path != asked).then_some(asked)
}

/// What a message's files add to it: the text the model reads and the
/// record kept with the message (`attachments` of the message).
pub struct Saved {
    pub text: String,
    pub records: Vec<Value>,
}

/// What the reader made of each attached document, by path.
pub type DocTexts = HashMap<String, Result<Arc<DocText>, String>>;

/// What each attached voice note was heard as, by path.
pub type Voices = HashMap<String, Result<Transcript, NotTranscribed>>;

/// What was made of a message's files before they are described: its
/// documents read as text, its voice notes transcribed.
#[derive(Default)]
pub struct Readings {
    pub docs: DocTexts,
    pub voices: Voices,
}

/// The attached voice notes (audio by their names), with their base names.
pub fn voices_of(files: &[Placed]) -> Vec<(String, String)> {
    files
        .iter()
        .filter(|f| crate::voice::audio_type(&f.path).is_some())
        .map(|f| {
            let name = f.path.rsplit('/').next().unwrap_or(&f.path);
            (f.path.clone(), name.to_string())
        })
        .collect()
}

/// The attached files the document reader reads (a CSV or TSV is text and
/// goes in as it is).
pub fn documents_of(files: &[Placed]) -> Vec<(String, DocKind)> {
    files
        .iter()
        .filter_map(|f| {
            let kind = DocKind::of(&f.path)?;
            (!matches!(kind, DocKind::Csv | DocKind::Tsv)).then(|| (f.path.clone(), kind))
        })
        .collect()
}

/// Writes what the model reads of files on disk. `inline_tokens`: the room
/// for text in the message. `sight`: how the chat's model gets at images.
/// `read`: the documents among them as the reader read them, the voice
/// notes as they were transcribed.
pub fn describe(
    workspace: &Workspace,
    files: &[Placed],
    inline_tokens: u64,
    sight: &Sight,
    read: &Readings,
) -> Saved {
    let vision = *sight == Sight::Direct;
    let budget = inline_tokens.min(MAX_INLINE_TOKENS);
    let mut used = 0u64;
    let mut text = String::new();
    let mut records = Vec::new();
    for file in files {
        let (path, size) = (&file.path, file.size);
        let mut record = json!({"path": path, "bytes": size, "mime": file.mime});
        if let Some(asked) = &file.conflict_of {
            record["conflict_of"] = json!(asked);
        }
        if file.mime.starts_with("image/") {
            record["kind"] = json!("image");
            let seen = vision && size <= MAX_IMAGE_BYTES;
            record["image"] = json!(seen);
            let why = if let Sight::Described(_) = sight {
                ": this model does not read images; describe_image has it described"
            } else if !vision {
                ": this model does not read images"
            } else if !seen {
                ": over the 50 MiB an image may be to be shown"
            } else {
                ""
            };
            text.push_str(&format!(
                "\n\n[attached image {path}, {} bytes{why}]",
                commas(size)
            ));
        } else if let Some(heard) = read.voices.get(path) {
            used += voice(
                &mut text,
                &mut record,
                file,
                heard,
                budget.saturating_sub(used),
            );
        } else if let Some(read) = read.docs.get(path) {
            used += document(
                &mut text,
                &mut record,
                file,
                read,
                budget.saturating_sub(used),
            );
        } else if let Some((content, whole)) = text_of(workspace, path, size) {
            let tokens = if whole {
                estimate_tokens(&content)
            } else {
                // Past the read: bytes stand for characters, an upper bound.
                ((size / 4 + 1) as f64 * 1.15).ceil() as u64
            };
            record["kind"] = json!("text");
            record["tokens"] = json!(tokens);
            if whole && used + tokens <= budget {
                used += tokens;
                record["inline"] = json!(true);
                let fence = fence_for(&content);
                text.push_str(&format!(
                    "\n\n[attached file {path}, {} bytes]\n{fence}\n{content}{}{fence}",
                    commas(size),
                    if content.ends_with('\n') { "" } else { "\n" }
                ));
            } else {
                record["inline"] = json!(false);
                text.push_str(&format!(
                    "\n\n[attached file {path}: {} bytes, about {} tokens, too big to include here; read it with read_file]",
                    commas(size),
                    commas(tokens)
                ));
            }
        } else {
            record["kind"] = json!("binary");
            text.push_str(&format!(
                "\n\n[attached file {path}: {} bytes of binary data ({}); {}]",
                commas(size),
                file.mime,
                crate::documents::hints::for_binary(path)
            ));
        }
        records.push(record);
    }
    Saved { text, records }
}

/// A document's part of the message: its first [`INLINE_CHARS`] characters
/// (whole lines, within `room` tokens), and where to read on. Returns the
/// tokens it put in.
fn document(
    text: &mut String,
    record: &mut Value,
    file: &Placed,
    read: &Result<Arc<DocText>, String>,
    room: u64,
) -> u64 {
    let (path, size) = (&file.path, commas(file.size));
    record["kind"] = json!("document");
    let doc = match read {
        Ok(doc) => doc,
        Err(cause) => {
            record["inline"] = json!(false);
            record["unread"] = json!(cause);
            text.push_str(&format!(
                "\n\n[attached file {path}: {size} bytes; it could not be read: {cause}]"
            ));
            return 0;
        }
    };
    let all = &doc.extracted.text;
    let total_chars = all.chars().count();
    let total_tokens = estimate_tokens(all);
    record["tokens"] = json!(total_tokens);
    record["document"] = json!(doc.kind);
    // Characters run about 4 to a token: the room in characters.
    let fits = INLINE_CHARS.min(room.saturating_mul(4).min(usize::MAX as u64) as usize);
    let (shown, lines) = whole_lines(all, fits);
    if shown.is_empty() && !all.is_empty() {
        record["inline"] = json!(false);
        text.push_str(&format!(
            "\n\n[attached {} {path}: {size} bytes, {}, about {} tokens, no room for it here; read it with read_document]",
            doc.kind.word(),
            doc.line(),
            commas(total_tokens)
        ));
        return 0;
    }
    record["inline"] = json!(true);
    let fence = fence_for(shown);
    text.push_str(&format!(
        "\n\n[attached {} {path}, {size} bytes: {}]\n{fence}\n{shown}{}{fence}",
        doc.kind.word(),
        doc.line(),
        if shown.ends_with('\n') { "" } else { "\n" }
    ));
    let shown_chars = shown.chars().count();
    if shown_chars < total_chars {
        record["inline_chars"] = json!(shown_chars);
        text.push_str(&format!(
            "\n[the first {} of {} characters; read on with read_document path={path} offset={}]",
            commas(shown_chars as u64),
            commas(total_chars as u64),
            lines + 1
        ));
    }
    estimate_tokens(shown)
}

/// A voice note's part of the message: the line saying it is one, then
/// its transcript (its first [`INLINE_CHARS`] characters at most, within
/// `room` tokens but never under 2,000 characters), or one line saying why
/// there is none. Returns the tokens it put in.
fn voice(
    text: &mut String,
    record: &mut Value,
    file: &Placed,
    heard: &Result<Transcript, NotTranscribed>,
    room: u64,
) -> u64 {
    let (path, size) = (&file.path, commas(file.size));
    record["kind"] = json!("audio");
    let transcript = match heard {
        Ok(transcript) => transcript,
        Err(why) => {
            record["transcribed"] = json!(false);
            record["untranscribed"] = json!(why.to_string());
            text.push_str(&format!(
                "\n\n[attached voice message {path}, {size} bytes; not transcribed: {why}]"
            ));
            return 0;
        }
    };
    let all = transcript.text.trim();
    let total = all.chars().count();
    let fits = INLINE_CHARS.min(room.saturating_mul(4).clamp(2_000, usize::MAX as u64) as usize);
    let shown = if total > fits {
        let kept: String = all.chars().take(fits).collect();
        record["inline_chars"] = json!(fits);
        format!(
            "{kept}\n[the first {} of {} characters of the transcript]",
            commas(fits as u64),
            commas(total as u64)
        )
    } else {
        all.to_string()
    };
    record["transcribed"] = json!(true);
    record["transcript_chars"] = json!(total);
    text.push_str(&format!(
        "\n\n[attached voice message {path}, {size} bytes]\n{}\n{shown}",
        crate::voice::LINE
    ));
    estimate_tokens(&shown)
}

/// The longest start of `text` of whole lines within `max` characters (a
/// first line longer than that is cut inside), and how many lines it has.
fn whole_lines(text: &str, max: usize) -> (&str, u64) {
    let mut end = 0;
    let mut chars = 0;
    let mut lines = 0;
    for line in text.split_inclusive('\n') {
        let n = line.chars().count();
        if chars + n > max {
            if lines == 0 {
                let cut = line.char_indices().nth(max).map_or(line.len(), |(i, _)| i);
                return (&text[..cut], 0);
            }
            break;
        }
        chars += n;
        end += line.len();
        lines += 1;
    }
    (&text[..end], lines)
}

/// The file's text (`true`: all of it) when it reads as UTF-8 without NUL,
/// judged on at most [`INLINE_READ_MAX`] bytes; `None` for binary or a
/// file that cannot be read.
fn text_of(workspace: &Workspace, path: &str, size: u64) -> Option<(String, bool)> {
    let mut bytes = Vec::new();
    let file = workspace.open_file(path).ok()?.file;
    file.take(INLINE_READ_MAX).read_to_end(&mut bytes).ok()?;
    let whole = (bytes.len() as u64) >= size;
    let valid = match std::str::from_utf8(&bytes) {
        Ok(_) => bytes.len(),
        // A character cut by the read's end is not a fault of the file.
        Err(e) if !whole && e.error_len().is_none() => e.valid_up_to(),
        Err(_) => return None,
    };
    bytes.truncate(valid);
    let content = String::from_utf8(bytes).ok()?;
    (!content.contains('\0')).then_some((content, whole))
}

/// The estimate of `context`: characters/4 with a 15 % margin.
fn estimate_tokens(text: &str) -> u64 {
    ((text.chars().count() as u64 / 4 + 1) as f64 * 1.15).ceil() as u64
}

/// A code fence longer than any run of backticks in `content`.
pub(crate) fn fence_for(content: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in content.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    "`".repeat((longest + 1).max(3))
}

/// A data URL for an image part of a request.
pub fn data_url(mime: &str, bytes: &[u8]) -> String {
    format!(
        "data:{mime};base64,{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

#[cfg(test)]
mod tests;
