//! Files sent with a message. Each one is saved in the chat's workspace
//! under `uploads/` with a free name (cut to 255 bytes). Text goes into the
//! message while it fits in a quarter of the free window (32,000 tokens at
//! most for all of them); a larger file is named by path, size and tokens so
//! the model can read it with `read_file`. Images go to a model that reads
//! images; to any other they are named only.

use base64::Engine as _;
use serde::Deserialize;
use serde_json::{json, Value};
use tandem_shared::http::ApiError;

use crate::tools::fit::commas;
use crate::workspace::Workspace;

/// The most files one message may carry.
pub const MAX_FILES: usize = 20;
/// The most tokens of text all of a message's files may put inline.
pub const MAX_INLINE_TOKENS: u64 = 32_000;
/// The largest image sent to a model, in bytes.
pub const MAX_IMAGE_BYTES: u64 = 10 << 20;
/// The folder of the workspace uploads go to.
pub const UPLOADS: &str = "uploads";

/// One file as a request carries it: its text, or its bytes in base64.
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
    image: bool,
    mime: String,
}

/// Checks every upload before anything is stored; each error names the
/// field (`attachments[2].data_base64`) and the limit.
pub fn check(uploads: Vec<Upload>) -> Result<Vec<Decoded>, ApiError> {
    if uploads.len() > MAX_FILES {
        return Err(ApiError::bad_input(
            "attachments",
            format!("{} files is more than {MAX_FILES}", uploads.len()),
        )
        .with("limit", MAX_FILES));
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
        let image = mime.starts_with("image/");
        if image && bytes.len() as u64 > MAX_IMAGE_BYTES {
            return Err(ApiError::too_large(
                &field("data_base64"),
                MAX_IMAGE_BYTES as usize,
            ));
        }
        out.push(Decoded {
            name,
            bytes,
            image,
            mime,
        });
    }
    Ok(out)
}

/// What saving a message's files made: the text added to the message and
/// the record kept with it (`attachments` of the message).
pub struct Saved {
    pub text: String,
    pub records: Vec<Value>,
}

/// Saves the files under `uploads/` and writes what the model reads of them.
/// `inline_tokens`: the room for text in the message. `vision`: whether the
/// chat's model reads images.
pub fn save(
    workspace: &Workspace,
    files: Vec<Decoded>,
    inline_tokens: u64,
    vision: bool,
) -> Result<Saved, String> {
    let budget = inline_tokens.min(MAX_INLINE_TOKENS);
    let mut used = 0u64;
    let mut text = String::new();
    let mut records = Vec::new();
    for file in files {
        let path = free_path(workspace, &file.name);
        workspace
            .write_file(&path, &file.bytes)
            .map_err(|e| e.to_string())?;
        let size = file.bytes.len() as u64;
        let utf8 = std::str::from_utf8(&file.bytes)
            .ok()
            .filter(|t| !t.contains('\0'));
        let mut record = json!({"path": path, "bytes": size, "mime": file.mime});
        if file.image {
            record["kind"] = json!("image");
            record["image"] = json!(vision);
            if vision {
                text.push_str(&format!(
                    "\n\n[attached image {path}, {} bytes]",
                    commas(size)
                ));
            } else {
                text.push_str(&format!(
                    "\n\n[attached image {path}, {} bytes: this model does not read images]",
                    commas(size)
                ));
            }
        } else if let Some(content) = utf8 {
            let tokens = estimate_tokens(content);
            record["kind"] = json!("text");
            record["tokens"] = json!(tokens);
            if used + tokens <= budget {
                used += tokens;
                record["inline"] = json!(true);
                let fence = fence_for(content);
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
                "\n\n[attached file {path}: {} bytes of binary data ({})]",
                commas(size),
                file.mime
            ));
        }
        records.push(record);
    }
    Ok(Saved { text, records })
}

/// The estimate of `context`: characters/4 with a 15 % margin.
fn estimate_tokens(text: &str) -> u64 {
    ((text.chars().count() as u64 / 4 + 1) as f64 * 1.15).ceil() as u64
}

/// A code fence longer than any run of backticks in `content`.
fn fence_for(content: &str) -> String {
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

/// The file name part of what a device sent, safe as one path component,
/// cut to 255 bytes keeping its extension. `None`: nothing usable is left.
fn free_base(name: &str) -> Option<String> {
    let base = name.rsplit(['/', '\\']).next().unwrap_or("");
    let clean: String = base.chars().filter(|c| !c.is_control()).collect();
    let clean = clean.trim().trim_start_matches('.').to_string();
    if clean.is_empty() {
        return None;
    }
    Some(cut_name(&clean, 255))
}

/// `name` cut to `max` bytes on a character boundary, its extension kept.
fn cut_name(name: &str, max: usize) -> String {
    if name.len() <= max {
        return name.to_string();
    }
    let (stem, ext) = match name.rfind('.') {
        Some(dot) if name.len() - dot <= 16 && dot > 0 => (&name[..dot], &name[dot..]),
        _ => (name, ""),
    };
    let mut end = max.saturating_sub(ext.len());
    while end > 0 && !stem.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{ext}", &stem[..end])
}

/// `uploads/<name>`, or `uploads/<stem> (2).<ext>` and on while that is taken.
fn free_path(workspace: &Workspace, name: &str) -> String {
    let taken = |p: &str| workspace.stat(p).is_ok();
    let first = format!("{UPLOADS}/{name}");
    if !taken(&first) {
        return first;
    }
    let (stem, ext) = match name.rfind('.') {
        Some(dot) if dot > 0 => (&name[..dot], &name[dot..]),
        _ => (name, ""),
    };
    for n in 2..10_000 {
        let suffix = format!(" ({n}){ext}");
        let candidate = cut_name(&format!("{stem}{suffix}"), 255);
        // Cutting may have eaten the suffix: put it back after a shorter stem.
        let candidate = if candidate.ends_with(&suffix) {
            candidate
        } else {
            let mut end = 255usize.saturating_sub(suffix.len()).min(stem.len());
            while end > 0 && !stem.is_char_boundary(end) {
                end -= 1;
            }
            format!("{}{suffix}", &stem[..end])
        };
        let path = format!("{UPLOADS}/{candidate}");
        if !taken(&path) {
            return path;
        }
    }
    format!("{UPLOADS}/{}", tandem_shared::time::new_id("upload_"))
}

fn guess_mime(name: &str) -> &'static str {
    let ext = name.rsplit('.').next().unwrap_or("").to_ascii_lowercase();
    match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "pdf" => "application/pdf",
        "json" => "application/json",
        _ => "application/octet-stream",
    }
}

/// A data URL for an image part of a request.
pub fn data_url(mime: &str, bytes: &[u8]) -> String {
    format!(
        "data:{mime};base64,{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upload(name: &str, text: &str) -> Upload {
        Upload {
            name: name.into(),
            text: Some(text.into()),
            data_base64: None,
            mime: None,
        }
    }

    #[test]
    fn names_are_one_safe_component_cut_to_255_bytes() {
        assert_eq!(free_base("../../etc/passwd").as_deref(), Some("passwd"));
        assert_eq!(free_base("C:\\x\\notes.txt").as_deref(), Some("notes.txt"));
        assert_eq!(free_base(".bashrc").as_deref(), Some("bashrc"));
        assert_eq!(free_base(".."), None);
        assert_eq!(free_base("a\u{0}b\n").as_deref(), Some("ab"));
        let long = format!("{}.txt", "é".repeat(300));
        let cut = free_base(&long).unwrap();
        assert!(cut.len() <= 255 && cut.ends_with(".txt"), "{cut}");
    }

    #[test]
    fn text_inlines_while_it_fits_and_big_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let files = check(vec![
            upload("a.md", "hello ```code```\n"),
            upload("big.log", &"x".repeat(40_000)),
        ])
        .unwrap();
        let saved = save(&ws, files, 1_000, false).unwrap();
        assert!(saved
            .text
            .contains("[attached file uploads/a.md, 17 bytes]\n````\nhello"));
        assert!(saved.text.contains(
            "[attached file uploads/big.log: 40,000 bytes, about 11,502 tokens, too big to include here; read it with read_file]"
        ));
        assert_eq!(
            std::fs::read(dir.path().join("uploads/big.log"))
                .unwrap()
                .len(),
            40_000
        );
        // The same name again gets a free one.
        let again = save(&ws, check(vec![upload("a.md", "2")]).unwrap(), 1_000, false).unwrap();
        assert_eq!(again.records[0]["path"], "uploads/a (2).md");
    }

    #[test]
    fn bad_uploads_name_the_field() {
        let both = Upload {
            name: "x".into(),
            text: Some("a".into()),
            data_base64: Some("YQ==".into()),
            mime: None,
        };
        let err = check(vec![upload("ok.txt", "a"), both]).err().unwrap();
        assert!(
            err.message.contains("attachments[1].text"),
            "{}",
            err.message
        );
        let bad = Upload {
            name: "x.png".into(),
            text: None,
            data_base64: Some("***".into()),
            mime: None,
        };
        let err = check(vec![bad]).err().unwrap();
        assert!(
            err.message.contains("attachments[0].data_base64"),
            "{}",
            err.message
        );
    }

    #[test]
    fn images_reach_only_a_model_that_reads_them() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let png = Upload {
            name: "shot.png".into(),
            text: None,
            data_base64: Some("iVBORw0KGgo=".into()),
            mime: None,
        };
        let saved = save(&ws, check(vec![png]).unwrap(), 1_000, false).unwrap();
        assert!(saved.text.contains("this model does not read images"));
        assert_eq!(saved.records[0]["image"], false);
    }
}
