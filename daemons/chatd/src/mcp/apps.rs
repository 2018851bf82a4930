//! MCP Apps: a tool may name an HTML page of its server
//! (`_meta.ui.resourceUri`, a `ui://` URI) that the chat page shows under
//! the tool's call. The server's session stays in chatd: the page is read
//! and its tool calls are made by `api/mcp_apps.rs`, with the connector's
//! own secrets, which never reach the browser. This module reads what a
//! server declares and cuts what goes back to a page down to the rules:
//! only `ui://` pages a tool declares, HTML of 4 MiB at most, a content
//! policy of `https`/`wss` origins only, results of 256 KiB at most.

use rmcp::model::{CallToolResult, ReadResourceResult, ResourceContents, Tool};
use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::words::AppAudience;

/// A page's HTML, in bytes.
pub const MAX_PAGE: usize = 4 << 20;
/// A page's tool call's arguments, in bytes of JSON.
pub const MAX_ARGUMENTS: usize = 16 * 1024;
/// A call's result kept for a page and the transcript, in bytes of JSON.
pub const MAX_RESULT: usize = 256 * 1024;
/// A `ui://` URI, in bytes.
const MAX_URI: usize = 2048;
/// Origins kept per content-policy list.
const MAX_ORIGINS: usize = 32;
/// The content-policy lists a page may ask for.
const CSP_LISTS: [&str; 4] = [
    "connectDomains",
    "resourceDomains",
    "frameDomains",
    "baseUriDomains",
];

/// A tool's page, as its call's line and event carry it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AppRef {
    pub resource_uri: String,
    pub visibility: Vec<AppAudience>,
}

/// The `ui` object of a tool's `_meta`.
fn ui_of(tool: &Tool) -> Option<&Map<String, Value>> {
    tool.meta.as_ref()?.0.get("ui")?.as_object()
}

/// The page `tool` declares: `_meta.ui.resourceUri` (or the older flat
/// `_meta["ui/resourceUri"]`), a `ui://` URI; none for anything else.
pub fn app_of(tool: &Tool) -> Option<AppRef> {
    let flat = tool.meta.as_ref().and_then(|m| m.0.get("ui/resourceUri"));
    let uri = ui_of(tool)
        .and_then(|ui| ui.get("resourceUri"))
        .or(flat)
        .and_then(Value::as_str)?;
    if !uri.starts_with("ui://") || uri.len() > MAX_URI || uri.chars().any(char::is_control) {
        return None;
    }
    Some(AppRef {
        resource_uri: uri.to_string(),
        visibility: visibility_of(tool),
    })
}

/// Who may call `tool` (`_meta.ui.visibility`): the model and its page
/// when it says nothing; only the audiences it names when it says
/// something (one word or a list), none when it names none we know (a
/// server that meant its page alone is not read as meaning the model).
pub fn visibility_of(tool: &Tool) -> Vec<AppAudience> {
    let Some(said) = ui_of(tool).and_then(|ui| ui.get("visibility")) else {
        return vec![AppAudience::Model, AppAudience::App];
    };
    let words: Vec<&Value> = match said {
        Value::Array(list) => list.iter().collect(),
        one => vec![one],
    };
    let named = |audience: AppAudience| {
        words
            .iter()
            .any(|w| w.as_str().and_then(AppAudience::parse) == Some(audience))
    };
    [AppAudience::Model, AppAudience::App]
        .into_iter()
        .filter(|a| named(*a))
        .collect()
}

/// Whether the model is offered `tool`.
pub fn for_model(tool: &Tool) -> bool {
    visibility_of(tool).contains(&AppAudience::Model)
}

/// Whether a page may call `tool`.
pub fn for_app(tool: &Tool) -> bool {
    visibility_of(tool).contains(&AppAudience::App)
}

/// A page as `…/mcp-apps/resource` answers it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Page {
    pub uri: String,
    pub mime_type: String,
    pub html: String,
    pub meta: Value,
}

/// The page `uri` out of a server's `resources/read` answer; why not when
/// it is not HTML, is over [`MAX_PAGE`] or is not there.
pub fn page_of(result: &ReadResourceResult, uri: &str) -> Result<Page, String> {
    let of = |c: &ResourceContents| match c {
        ResourceContents::TextResourceContents { uri, .. }
        | ResourceContents::BlobResourceContents { uri, .. } => Some(uri.clone()),
        _ => None,
    };
    // The page asked for, and no other the server might send instead.
    let content = result
        .contents
        .iter()
        .find(|c| of(c).as_deref() == Some(uri))
        .ok_or("the server did not send the page asked for")?;
    let (mime, html, meta) = match content {
        ResourceContents::TextResourceContents {
            mime_type,
            text,
            meta,
            ..
        } => (mime_type, text.clone(), meta),
        ResourceContents::BlobResourceContents {
            mime_type,
            blob,
            meta,
            ..
        } => {
            use base64::Engine as _;
            if blob.len() / 4 * 3 > MAX_PAGE + 3 {
                return Err(too_big(blob.len() / 4 * 3));
            }
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(blob)
                .map_err(|_| "the page's bytes are not base64".to_string())?;
            let text =
                String::from_utf8(bytes).map_err(|_| "the page is not UTF-8 text".to_string())?;
            (mime_type, text, meta)
        }
        _ => return Err("the server sent a part of a kind tandem does not read".into()),
    };
    let mime = mime.as_deref().unwrap_or("");
    if !is_page_type(mime) {
        return Err(format!(
            "the page is {:?}, not text/html",
            mime.chars().take(80).collect::<String>()
        ));
    }
    if html.len() > MAX_PAGE {
        return Err(too_big(html.len()));
    }
    let ui = meta.as_ref().and_then(|m| m.0.get("ui"));
    Ok(Page {
        uri: uri.to_string(),
        mime_type: mime.to_string(),
        html,
        meta: page_meta(ui),
    })
}

fn too_big(bytes: usize) -> String {
    format!(
        "the page is {:.1} MiB, over the {} MiB a page may be",
        bytes as f64 / f64::from(1 << 20),
        MAX_PAGE >> 20
    )
}

/// `text/html`, with the `mcp-app` profile or none.
fn is_page_type(mime: &str) -> bool {
    let mut parts = mime.split(';').map(str::trim);
    if !parts
        .next()
        .is_some_and(|t| t.eq_ignore_ascii_case("text/html"))
    {
        return false;
    }
    parts.all(|p| match p.split_once('=') {
        Some((k, v)) if k.trim().eq_ignore_ascii_case("profile") => {
            v.trim().trim_matches('"') == "mcp-app"
        }
        _ => true,
    })
}

/// What a page's `_meta.ui` may ask: a content policy of `https`/`wss`
/// origins, and a border; no browser permission is granted.
fn page_meta(ui: Option<&Value>) -> Value {
    let mut csp = Map::new();
    for list in CSP_LISTS {
        let origins: Vec<String> = ui
            .and_then(|ui| ui["csp"][list].as_array())
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().and_then(origin))
            .take(MAX_ORIGINS)
            .collect();
        if !origins.is_empty() {
            csp.insert(list.to_string(), json!(origins));
        }
    }
    let border = ui.and_then(|ui| ui["prefersBorder"].as_bool());
    json!({"csp": csp, "permissions": {}, "prefersBorder": border})
}

/// An `https` or `wss` origin, written as a content policy wants it;
/// anything else (another scheme, a path, a wildcard, a quote) is none.
pub fn origin(text: &str) -> Option<String> {
    if text.len() > 255 {
        return None;
    }
    let url = url::Url::parse(text).ok()?;
    let plain = matches!(url.scheme(), "https" | "wss")
        && url.username().is_empty()
        && url.password().is_none()
        && matches!(url.path(), "" | "/")
        && url.query().is_none()
        && url.fragment().is_none();
    let host = url.host_str()?;
    let host_chars = host
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '[' | ']' | ':'));
    if !plain || host.is_empty() || !host_chars {
        return None;
    }
    Some(match url.port() {
        Some(port) => format!("{}://{host}:{port}", url.scheme()),
        None => format!("{}://{host}", url.scheme()),
    })
}

/// The content policy a page's frame document is served under: a
/// sandbox of its own (scripts, nothing else), its inline scripts and
/// styles, and no network but the `https`/`wss` origins of `csp` (a
/// page's `meta.csp`), checked again here.
pub fn frame_policy(csp: &Value) -> String {
    let list = |key: &str| {
        csp[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter(|s| origin(s).as_deref() == Some(*s))
            .take(MAX_ORIGINS)
            .collect::<Vec<_>>()
            .join(" ")
    };
    let or_none = |origins: String| {
        if origins.is_empty() {
            "'none'".to_string()
        } else {
            origins
        }
    };
    let res = list("resourceDomains");
    let with = |first: &str| format!("{first} {res}").trim_end().to_string();
    format!(
        "sandbox allow-scripts; default-src 'none'; script-src {}; style-src {}; \
         img-src {}; font-src {}; media-src {}; connect-src {}; frame-src {}; \
         base-uri {}; form-action 'none'; frame-ancestors 'self'",
        with("'unsafe-inline'"),
        with("'unsafe-inline'"),
        with("data: blob:"),
        with("data:"),
        with("data: blob:"),
        or_none(list("connectDomains")),
        or_none(list("frameDomains")),
        or_none(list("baseUriDomains")),
    )
}

/// A call's result as a page and the transcript get it: `clean` run over
/// its JSON (a server may echo a secret anywhere), whole up to
/// [`MAX_RESULT`], else `text` (the model's, cleaned already), cut,
/// saying so.
pub fn result_for_page(
    result: &CallToolResult,
    text: &str,
    clean: impl Fn(String) -> String,
) -> Value {
    let whole = serde_json::to_string(result).unwrap_or_default();
    let cleaned: Option<Value> = serde_json::from_str(&clean(whole)).ok();
    if let Some(value) = cleaned {
        if value.to_string().len() <= MAX_RESULT {
            return value;
        }
    }
    // Cut to fit as JSON: quotes, backslashes and control characters grow
    // when escaped, so the cut shrinks until it fits.
    let mut end = text.len().min(MAX_RESULT);
    loop {
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let cut = format!(
            "{}\n[cut: the result was over {} KiB]",
            &text[..end],
            MAX_RESULT >> 10
        );
        let value = json!({"content": [{"type": "text", "text": cut}],
                           "isError": result.is_error == Some(true)});
        let len = value.to_string().len();
        if len <= MAX_RESULT || end == 0 {
            return value;
        }
        // In proportion to what it came to, and at least a little.
        let scaled = end * (MAX_RESULT - 256) / len;
        end = scaled.min(end.saturating_sub(64));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn tool(meta: Value) -> Tool {
        let mut t = Tool::new("clock", "", Arc::new(Map::new()));
        t.meta = serde_json::from_value(meta).ok();
        t
    }

    #[test]
    fn a_page_is_a_ui_uri_and_visibility_defaults_to_both() {
        let app = app_of(&tool(json!({"ui": {"resourceUri": "ui://clock/app.html"}})));
        assert_eq!(
            app,
            Some(AppRef {
                resource_uri: "ui://clock/app.html".into(),
                visibility: vec![AppAudience::Model, AppAudience::App],
            })
        );
        let flat = tool(json!({"ui/resourceUri": "ui://clock/app.html"}));
        assert!(app_of(&flat).is_some(), "the older flat key");
        for not in [
            json!({"ui": {"resourceUri": "https://example.com/app.html"}}),
            json!({"ui": {"resourceUri": 7}}),
            json!({"ui": {}}),
        ] {
            assert_eq!(app_of(&tool(not.clone())), None, "{not}");
        }
        let only_app = tool(json!({"ui": {"resourceUri": "ui://a", "visibility": ["app"]}}));
        assert!(!for_model(&only_app) && for_app(&only_app));
        let only_model = tool(json!({"ui": {"visibility": ["model", "model", "elsewhere"]}}));
        assert!(for_model(&only_model) && !for_app(&only_model));
        assert!(for_model(&tool(json!({}))) && for_app(&tool(json!({}))));
        let one_word = tool(json!({"ui": {"visibility": "app"}}));
        assert!(!for_model(&one_word) && for_app(&one_word));
        for nobody in [json!([]), json!(["App"]), json!(7)] {
            let t = tool(json!({"ui": {"visibility": nobody}}));
            assert!(!for_model(&t) && !for_app(&t), "{nobody}");
        }
        let both = tool(json!({"ui": {"resourceUri": "ui://a", "visibility": ["app", "model"]}}));
        assert_eq!(
            app_of(&both).map(|a| a.visibility),
            Some(vec![AppAudience::Model, AppAudience::App]),
            "one order whatever the server's"
        );
    }

    #[test]
    fn a_content_policy_keeps_https_and_wss_origins_only() {
        assert_eq!(
            origin("https://api.example.com"),
            Some("https://api.example.com".into())
        );
        assert_eq!(
            origin("wss://ws.example.com:8443/"),
            Some("wss://ws.example.com:8443".into())
        );
        for not in [
            "http://plain.example.com",
            "javascript:alert(1)",
            "https://*.example.com",
            "https://api.example.com/path",
            "https://user:pw@example.com",
            "https://example.com; script-src *",
            "'unsafe-inline'",
            "data:",
        ] {
            assert_eq!(origin(not), None, "{not}");
        }
        let meta = page_meta(Some(&json!({"csp": {
            "connectDomains": ["https://api.example.com", "http://plain.example.com"],
            "scriptDomains": ["https://cdn.example.com"]},
            "permissions": {"camera": {}}, "prefersBorder": true})));
        assert_eq!(
            meta,
            json!({"csp": {"connectDomains": ["https://api.example.com"]},
                   "permissions": {}, "prefersBorder": true})
        );
    }

    #[test]
    fn a_frame_gets_no_network_but_what_its_page_asked_for() {
        let none = frame_policy(&json!({}));
        assert!(
            none.starts_with("sandbox allow-scripts; default-src 'none';"),
            "{none}"
        );
        assert!(
            none.contains("connect-src 'none'") && none.contains("script-src 'unsafe-inline';")
        );
        let some = frame_policy(&json!({
            "connectDomains": ["https://api.example.com", "https://x.example.com; script-src *"],
            "resourceDomains": ["https://cdn.example.com"]}));
        assert!(
            some.contains("connect-src https://api.example.com;"),
            "{some}"
        );
        assert!(
            some.contains("script-src 'unsafe-inline' https://cdn.example.com;"),
            "{some}"
        );
        assert!(!some.contains("x.example.com"), "{some}");
    }

    #[test]
    fn a_page_is_html_with_the_app_profile_or_none() {
        for yes in [
            "text/html",
            "text/html;profile=mcp-app",
            "TEXT/HTML; charset=utf-8",
        ] {
            assert!(is_page_type(yes), "{yes}");
        }
        for no in ["text/plain", "", "text/html;profile=other", "text/htmlx"] {
            assert!(!is_page_type(no), "{no}");
        }
    }

    #[test]
    fn a_long_result_is_its_text_cut_and_secrets_go_first() {
        let secret = "sekrit-token-123";
        let result = CallToolResult::success(vec![rmcp::model::ContentBlock::text(format!(
            "{secret} {}",
            "x".repeat(MAX_RESULT)
        ))]);
        let clean = |t: String| t.replace(secret, "…");
        let text = clean(crate::mcp::sessions::text_of(&result).text);
        let value = result_for_page(&result, &text, clean);
        let text = value["content"][0]["text"].as_str().unwrap_or_default();
        assert!(text.starts_with("… x") && text.ends_with("[cut: the result was over 256 KiB]"));
        assert!(value.to_string().len() <= MAX_RESULT);
        // Text that grows when escaped still fits.
        let quoted = CallToolResult::success(vec![rmcp::model::ContentBlock::text(
            "\"\\\u{1}".repeat(MAX_RESULT),
        )]);
        let text = crate::mcp::sessions::text_of(&quoted).text;
        let value = result_for_page(&quoted, &text, |t| t);
        assert!(
            value.to_string().len() <= MAX_RESULT,
            "{}",
            value.to_string().len()
        );
        assert!(value.to_string().len() > MAX_RESULT / 2);
        let small = CallToolResult::success(vec![rmcp::model::ContentBlock::text(secret)]);
        assert_eq!(
            result_for_page(&small, "…", clean)["content"][0]["text"],
            json!("…")
        );
    }
}
