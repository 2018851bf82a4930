//! What an answer holds: its type (HTML, text or neither) by Content-Type or
//! a look at its bytes, and HTML laid out as readable text.

use super::TEXT_WIDTH;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Html,
    Text,
    Other,
}

impl Kind {
    /// By the Content-Type, or by a look at the bytes when there is none.
    pub(super) fn of(content_type: &str, body: Option<&[u8]>) -> Kind {
        let essence = essence(content_type);
        if essence.is_empty() {
            let Some(body) = body else {
                return Kind::Other;
            };
            let probe = &body[..body.len().min(1024)];
            if probe.contains(&0) {
                return Kind::Other;
            }
            let lower = String::from_utf8_lossy(probe).to_ascii_lowercase();
            return if lower.contains("<html") || lower.contains("<!doctype html") {
                Kind::Html
            } else {
                Kind::Text
            };
        }
        if essence == "text/html" || essence == "application/xhtml+xml" {
            return Kind::Html;
        }
        let textual = essence.starts_with("text/")
            || essence.ends_with("+json")
            || essence.ends_with("+xml")
            || matches!(
                essence.as_str(),
                "application/json"
                    | "application/xml"
                    | "application/javascript"
                    | "application/x-javascript"
                    | "application/ecmascript"
                    | "application/x-ndjson"
                    | "application/yaml"
                    | "application/x-yaml"
                    | "application/toml"
                    | "application/sql"
                    | "application/graphql"
                    | "application/x-sh"
            );
        if textual {
            Kind::Text
        } else {
            Kind::Other
        }
    }

    /// Whether a body of this Content-Type is worth reading.
    pub(super) fn read_body(content_type: &str) -> bool {
        !content_type.contains("(compressed: ")
            && (essence(content_type).is_empty() || Kind::of(content_type, None) != Kind::Other)
    }
}

pub(super) fn essence(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// HTML as readable text (links as numbered notes at the end). Laid out on a
/// thread of its own with a large stack: a deeply nested page must not
/// overflow the blocking pool's.
pub(super) fn html_to_text(bytes: Vec<u8>) -> String {
    let worker = std::thread::Builder::new()
        .name("web-html".into())
        .stack_size(64 << 20)
        .spawn(move || {
            html2text::config::plain()
                .allow_width_overflow()
                .no_link_wrapping()
                .string_from_read(&bytes[..], TEXT_WIDTH)
                .map_err(|e| e.to_string())
        });
    let converted = match worker {
        Ok(handle) => handle
            .join()
            .unwrap_or_else(|_| Err("the converter stopped".into())),
        Err(e) => Err(e.to_string()),
    };
    match converted {
        Ok(text) => tidy_text(&text),
        Err(why) => format!("[the HTML could not be converted to text: {why}]"),
    }
}

/// Lines trimmed at the end, runs of blank lines made one.
fn tidy_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = 0;
    for line in text.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank += 1;
            if blank > 1 {
                continue;
            }
        } else {
            blank = 0;
        }
        out.push_str(line);
        out.push('\n');
    }
    out.trim_matches('\n').to_string()
}
