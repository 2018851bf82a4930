//! Prompts and resources of a chat's MCP servers as context for a message:
//! what a message's `context: [...]` may ask for, how a prompt's messages
//! and a resource's contents become text, and the block each makes in
//! front of the person's text. Binary parts are named, never inlined; the
//! expanded text is cut at [`MAX_TEXT`] bytes in all.
//!
//! A message's text is its blocks, then the person's: each block is one
//! line saying where it came from, then the text in a code fence longer
//! than any run of backticks in it, so a reader (the page) can find where
//! the typed text begins.

use std::collections::BTreeMap;
use std::time::Duration;

use rmcp::model::{ContentBlock, GetPromptResult, ReadResourceResult, ResourceContents};
use serde::Serialize;
use serde_json::{json, Value};
use tandem_shared::http::ApiError;

use super::client::cut_to;
use crate::attachments::fence_for;

/// The expanded text of one message's context (or one preview), in bytes.
pub const MAX_TEXT: usize = 256 * 1024;
/// Prompts and resources one message may carry.
pub const MAX_ITEMS: usize = 8;
/// The most characters the blocks in front of a message may take: the
/// text, and each block's line and fences (an edit brings them back).
/// A block's two fences may each be as long as a run of backticks in its
/// text, so three times the text's room, and each head line within 16 Ki.
pub const MAX_LEAD_CHARS: usize = 3 * MAX_TEXT + MAX_ITEMS * 16 * 1024;
/// A prompt's arguments, at most, and one argument's bytes.
const MAX_ARGS: usize = 32;
const MAX_ARG: usize = 4096;
/// An argument's name, in bytes (the block's line names each).
const MAX_ARG_NAME: usize = 128;
/// A prompt's name or a resource's URI, in bytes.
const MAX_NAME: usize = 2048;
/// One prompt or resource asked of its server, at most.
pub const ASK: Duration = Duration::from_secs(30);

/// One prompt or resource a message (or a preview) asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asked {
    Prompt {
        connector: String,
        name: String,
        arguments: BTreeMap<String, String>,
    },
    Resource {
        connector: String,
        uri: String,
    },
}

impl Asked {
    pub fn connector(&self) -> &str {
        match self {
            Asked::Prompt { connector, .. } | Asked::Resource { connector, .. } => connector,
        }
    }

    /// One item of `context` (or a preview's body), its fields named under
    /// `field` in an error: `{connector, name, arguments?}` is a prompt,
    /// `{connector, uri}` a resource.
    pub fn parse(value: &Value, field: &str) -> Result<Asked, ApiError> {
        let at = |f: &str| {
            if field.is_empty() {
                f.to_string()
            } else {
                format!("{field}.{f}")
            }
        };
        let Some(object) = value.as_object() else {
            return Err(ApiError::bad_input(
                if field.is_empty() { "body" } else { field },
                "must be an object: {connector, name, arguments?} or {connector, uri}",
            ));
        };
        for key in object.keys() {
            if !["connector", "name", "arguments", "uri"].contains(&key.as_str()) {
                return Err(ApiError::bad_input(
                    &at(key),
                    "is not a field of a prompt or a resource",
                ));
            }
        }
        let text = |f: &str| -> Result<Option<String>, ApiError> {
            match object.get(f) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if s.is_empty() => {
                    Err(ApiError::bad_input(&at(f), "is empty"))
                }
                Some(Value::String(s)) if s.len() > MAX_NAME => Err(ApiError::bad_input(
                    &at(f),
                    format!("is {} bytes; {MAX_NAME} at most", s.len()),
                )),
                // A block's first line names it: one line, no control characters.
                Some(Value::String(s)) if s.chars().any(char::is_control) => Err(
                    ApiError::bad_input(&at(f), "holds a control character (a line break, a tab…)"),
                ),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(ApiError::bad_input(&at(f), "must be a string")),
            }
        };
        let Some(connector) = text("connector")? else {
            return Err(ApiError::bad_input(&at("connector"), "is missing"));
        };
        match (text("name")?, text("uri")?) {
            (Some(_), Some(_)) => Err(ApiError::bad_input(
                &at("uri"),
                "names a resource, and `name` a prompt: give one",
            )),
            (None, None) => Err(ApiError::bad_input(
                &at("name"),
                "is missing: a prompt's `name` or a resource's `uri`",
            )),
            (None, Some(uri)) => {
                if object.contains_key("arguments") {
                    return Err(ApiError::bad_input(
                        &at("arguments"),
                        "are a prompt's; a resource takes none",
                    ));
                }
                Ok(Asked::Resource { connector, uri })
            }
            (Some(name), None) => Ok(Asked::Prompt {
                connector,
                name,
                arguments: arguments(object.get("arguments"), &at("arguments"))?,
            }),
        }
    }

    /// How the block's first line and the record name it.
    fn label(&self) -> String {
        match self {
            Asked::Prompt {
                name, arguments, ..
            } => {
                let args: Vec<String> = arguments
                    .iter()
                    .map(|(k, v)| format!("{k}: {}", cut_to(v, 60)))
                    .collect();
                let name = cut_to(name, 200);
                if args.is_empty() {
                    format!("prompt {name:?}")
                } else {
                    format!("prompt {name:?} ({})", args.join(", "))
                }
            }
            Asked::Resource { uri, .. } => format!("resource {}", cut_to(uri, 500)),
        }
    }
}

/// A message's `context`, each item checked.
pub fn parse_list(values: &[Value]) -> Result<Vec<Asked>, ApiError> {
    if values.len() > MAX_ITEMS {
        return Err(ApiError::bad_input(
            "context",
            format!("holds {} items; {MAX_ITEMS} at most", values.len()),
        )
        .with("limit", MAX_ITEMS));
    }
    values
        .iter()
        .enumerate()
        .map(|(i, v)| Asked::parse(v, &format!("context[{i}]")))
        .collect()
}

/// A prompt's arguments: strings by name, as MCP's `prompts/get` takes them.
fn arguments(value: Option<&Value>, field: &str) -> Result<BTreeMap<String, String>, ApiError> {
    let Some(value) = value.filter(|v| !v.is_null()) else {
        return Ok(BTreeMap::new());
    };
    let Some(object) = value.as_object() else {
        return Err(ApiError::bad_input(field, "must be an object of strings"));
    };
    if object.len() > MAX_ARGS {
        return Err(ApiError::bad_input(
            field,
            format!("holds {} arguments; {MAX_ARGS} at most", object.len()),
        ));
    }
    let mut out = BTreeMap::new();
    for (name, v) in object {
        let Some(text) = v.as_str() else {
            return Err(ApiError::bad_input(
                &format!("{field}.{name}"),
                "must be a string",
            ));
        };
        if name.len() > MAX_ARG_NAME {
            return Err(ApiError::bad_input(
                field,
                format!("an argument's name is over {MAX_ARG_NAME} bytes"),
            ));
        }
        if text.len() > MAX_ARG {
            return Err(ApiError::bad_input(
                &format!("{field}.{name}"),
                format!("is over {MAX_ARG} bytes"),
            ));
        }
        if name.is_empty() || name.chars().any(char::is_control) {
            return Err(ApiError::bad_input(
                field,
                "an argument's name is empty or holds a control character",
            ));
        }
        out.insert(name.clone(), text.to_string());
    }
    Ok(out)
}

/// What a prompt or a resource came to: its text, how many binary parts
/// were left out, whether it was cut.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Expanded {
    pub text: String,
    pub left_out: usize,
    pub cut: bool,
}

/// A prompt's messages as text: one message is its text; several are each
/// headed by their role. An image, audio or a binary resource is named.
/// Not cut yet: the connector's secrets are taken out first ([`fit`]).
pub fn of_prompt(result: &GetPromptResult) -> Expanded {
    let mut left_out = 0;
    let several = result.messages.len() > 1;
    let mut parts = Vec::new();
    for message in &result.messages {
        let role = match message.role {
            rmcp::model::Role::User => "user",
            rmcp::model::Role::Assistant => "assistant",
        };
        let text = match &message.content {
            ContentBlock::Text(t) => t.text.clone(),
            ContentBlock::Resource(r) => match &r.resource {
                contents @ ResourceContents::TextResourceContents { .. } => {
                    of_contents(std::slice::from_ref(contents), &mut left_out)
                }
                other => of_contents(std::slice::from_ref(other), &mut left_out),
            },
            ContentBlock::ResourceLink(r) => format!("[a resource: {}]", r.uri),
            ContentBlock::Image(i) => {
                left_out += 1;
                format!("[an image ({}): left out]", i.mime_type)
            }
            ContentBlock::Audio(a) => {
                left_out += 1;
                format!("[audio ({}): left out]", a.mime_type)
            }
            _ => {
                left_out += 1;
                "[a part of a kind tandem does not read: left out]".to_string()
            }
        };
        parts.push(if several {
            format!("[{role}]\n{text}")
        } else {
            text
        });
    }
    Expanded {
        text: parts.join("\n\n"),
        left_out,
        cut: false,
    }
}

/// A resource's contents as text: text parts joined, binary ones named.
pub fn of_resource(result: &ReadResourceResult) -> Expanded {
    let mut left_out = 0;
    let text = of_contents(&result.contents, &mut left_out);
    Expanded {
        text,
        left_out,
        cut: false,
    }
}

fn of_contents(contents: &[ResourceContents], left_out: &mut usize) -> String {
    let mut parts = Vec::new();
    for part in contents {
        match part {
            ResourceContents::TextResourceContents { text, .. } => parts.push(text.clone()),
            ResourceContents::BlobResourceContents {
                uri,
                mime_type,
                blob,
                ..
            } => {
                *left_out += 1;
                // Its size from its length: nothing is decoded.
                let padding = blob.bytes().rev().take_while(|b| *b == b'=').count();
                let bytes = (blob.len() / 4 * 3).saturating_sub(padding);
                parts.push(format!(
                    "[binary content of {uri} ({}, {bytes} bytes): left out]",
                    mime_type.as_deref().unwrap_or("no type given")
                ));
            }
            _ => {
                *left_out += 1;
                parts.push("[a part of a kind tandem does not read: left out]".into());
            }
        }
    }
    parts.join("\n")
}

/// `expanded` within [`MAX_TEXT`] bytes.
pub fn fit(expanded: Expanded) -> Expanded {
    let (text, cut) = within(expanded.text, MAX_TEXT);
    Expanded {
        text,
        left_out: expanded.left_out,
        cut: expanded.cut || cut,
    }
}

/// `text` within `max` bytes, cut at a character's start.
fn within(mut text: String, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let at = text.floor_char_boundary(max);
    text.truncate(at);
    (text, true)
}

/// The blocks of a message's context, in the order asked, and their
/// records; the whole within [`MAX_TEXT`] bytes (a later block is cut, or
/// left out with a line saying so).
pub struct Blocks {
    pub text: String,
    pub records: Vec<Value>,
    room: usize,
}

impl Default for Blocks {
    fn default() -> Blocks {
        Blocks {
            text: String::new(),
            records: Vec::new(),
            room: MAX_TEXT,
        }
    }
}

impl Blocks {
    /// Adds what `asked` came to, from the server named `server`.
    pub fn push(&mut self, asked: &Asked, server: &str, expanded: Expanded) {
        let (text, cut_here) = within(expanded.text, self.room);
        self.room -= text.len();
        let cut = expanded.cut || cut_here;
        let fence = fence_for(&text);
        let mut head = format!("[context from MCP connector {server}: {}", asked.label());
        if cut {
            head.push_str(&format!(", cut at {} KiB", MAX_TEXT / 1024));
        }
        head.push(']');
        self.text
            .push_str(&format!("{head}\n{fence}\n{text}\n{fence}\n\n"));
        let mut record = json!({
            "kind": "context",
            "connector": asked.connector(),
            "server": server,
            "chars": text.chars().count(),
            "cut": cut,
            "left_out": expanded.left_out,
        });
        match asked {
            Asked::Prompt {
                name, arguments, ..
            } => {
                record["prompt"] = json!(name);
                record["arguments"] = json!(arguments);
            }
            Asked::Resource { uri, .. } => record["uri"] = json!(uri),
        }
        self.records.push(record);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{PromptMessage, Role};

    #[test]
    fn a_prompt_and_a_resource_are_told_apart_and_bad_fields_named() {
        let prompt = Asked::parse(
            &json!({"connector": "mc_1", "name": "review", "arguments": {"lang": "Go"}}),
            "context[0]",
        )
        .unwrap();
        assert_eq!(prompt.label(), "prompt \"review\" (lang: Go)");
        let resource =
            Asked::parse(&json!({"connector": "mc_1", "uri": "wiki://home"}), "").unwrap();
        assert_eq!(resource.label(), "resource wiki://home");
        let field = |v: Value| {
            Asked::parse(&v, "context[1]").unwrap_err().extra["field"]
                .as_str()
                .map(str::to_string)
        };
        assert_eq!(
            field(json!({"name": "x"})).as_deref(),
            Some("context[1].connector")
        );
        assert_eq!(
            field(json!({"connector": "mc_1"})).as_deref(),
            Some("context[1].name")
        );
        assert_eq!(
            field(json!({"connector": "mc_1", "uri": "a://b", "arguments": {}})).as_deref(),
            Some("context[1].arguments")
        );
        assert_eq!(
            field(json!({"connector": "mc_1", "name": "n", "arguments": {"k": 1}})).as_deref(),
            Some("context[1].arguments.k")
        );
        assert_eq!(
            field(json!({"connector": "mc_1", "name": "n", "what": 1})).as_deref(),
            Some("context[1].what")
        );
        let many = vec![json!({"connector": "c", "uri": "u://x"}); MAX_ITEMS + 1];
        assert_eq!(parse_list(&many).unwrap_err().extra["field"], "context");
    }

    #[test]
    fn blocks_are_fenced_cut_in_all_and_binary_parts_named() {
        let result = ReadResourceResult::new(vec![
            ResourceContents::text("some ``` text", "demo://a"),
            ResourceContents::blob("AAAA", "demo://b"),
        ]);
        let expanded = of_resource(&result);
        assert_eq!(expanded.left_out, 1);
        assert!(expanded.text.contains("[binary content of demo://b"));
        assert!(!expanded.text.contains("AAAA"));
        let mut blocks = Blocks::default();
        let asked = Asked::Resource {
            connector: "mc_1".into(),
            uri: "demo://a".into(),
        };
        blocks.push(&asked, "Docs", expanded);
        assert!(blocks.text.starts_with(
            "[context from MCP connector Docs: resource demo://a]\n````\nsome ``` text"
        ));
        let big = GetPromptResult::new(vec![PromptMessage::new_text(
            Role::User,
            "é".repeat(MAX_TEXT),
        )]);
        let expanded = fit(of_prompt(&big));
        assert!(expanded.cut && expanded.text.len() <= MAX_TEXT);
        blocks.push(&asked, "Docs", expanded);
        assert_eq!(blocks.records.len(), 2);
        assert_eq!(blocks.records[1]["cut"], true);
        assert!(blocks.text.len() < MAX_TEXT + 1024);
    }
}
