//! A request's body as the engine gets it: JSON text spliced from the
//! rendered messages (kept from step to step, see `kept.rs`) and the
//! request's fixed part, with the estimate of its prompt tokens made from
//! the same parts, so neither is done again over the whole transcript.

use bytes::Bytes;
use serde_json::{json, Value};

use super::kept::Rendered;
use crate::context;
use crate::settings::Settings;

/// A request's JSON body and its estimated prompt tokens.
pub struct RequestBody {
    pub bytes: Bytes,
    pub estimate: u64,
}

impl RequestBody {
    /// The body of a streamed request to `model` of `rendered` (the answer
    /// so far, `prefill`, after it), offering `tools`, with `settings`.
    pub(crate) fn new(
        model: &str,
        mut rendered: Rendered,
        tools: &Value,
        prefill: &str,
        settings: &Settings,
    ) -> RequestBody {
        let mut head = request_head(model, tools, prefill);
        settings.apply(&mut head);
        if !prefill.is_empty() {
            rendered.push(&prefill_message(prefill));
        }
        let chars = rendered.chars + context::tools_chars(head.get("tools"));
        let estimate = context::tokens_of(chars, rendered.count);
        // `{"messages":[…],` then the head's fields: the head always holds
        // the model, so it is never `{}`.
        let head = head.to_string();
        let mut text = String::with_capacity(rendered.json.len() + head.len() + 16);
        text.push_str("{\"messages\":[");
        text.push_str(&rendered.json);
        text.push_str("],");
        text.push_str(&head[1..]);
        RequestBody {
            bytes: Bytes::from(text),
            estimate,
        }
    }

    /// A body made whole as a value (a summary request).
    pub fn of_value(body: &Value) -> RequestBody {
        let empty = Vec::new();
        let messages = body["messages"].as_array().unwrap_or(&empty);
        RequestBody {
            bytes: Bytes::from(body.to_string()),
            estimate: context::estimate(messages, body.get("tools")),
        }
    }
}

/// A request's fields beside its messages.
fn request_head(model: &str, tools: &Value, prefill: &str) -> Value {
    let mut body = json!({
        "model": model,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if tools.as_array().is_some_and(|t| !t.is_empty()) {
        body["tools"] = tools.clone();
    }
    if !prefill.is_empty() {
        // vLLM continues a final assistant message with these; llama.cpp does by itself.
        body["continue_final_message"] = json!(true);
        body["add_generation_prompt"] = json!(false);
    }
    body
}

fn prefill_message(prefill: &str) -> Value {
    json!({"role": "assistant", "content": prefill})
}

/// The chat-completions body around `messages`, made whole (a summary, a
/// size check), with the answer's text so far as an assistant prefill the
/// engine continues.
pub fn request_body(model: &str, mut messages: Vec<Value>, tools: &Value, prefill: &str) -> Value {
    let mut body = request_head(model, tools, prefill);
    if !prefill.is_empty() {
        messages.push(prefill_message(prefill));
    }
    body["messages"] = Value::Array(messages);
    body
}
