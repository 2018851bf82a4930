//! The second model that sees images (`--vision-model NAME`): a chat
//! request to it is logged like any other, takes no queued fault and reads
//! no cue, and is answered with what it was shown: the size of each image
//! part, decoded, and the question, so a test can tell its answer came
//! back whole.

use std::io::Cursor;

use base64::Engine as _;

use super::*;

/// How a request to the vision model is answered: `None` for a request to
/// another model.
pub(super) async fn vision_answer(
    sim: &Arc<Sim>,
    req: &Value,
    messages: &[Value],
) -> Option<Response> {
    let name = sim.config.vision_model.as_deref()?;
    if req.get("model").and_then(Value::as_str) != Some(name) {
        return None;
    }
    let last_user = messages.iter().rev().find(|m| role(m) == Some("user"))?;
    let question = content_text(last_user);
    let seen: Vec<String> = last_user
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|part| part.pointer("/image_url/url").and_then(Value::as_str))
        .map(image_size)
        .collect();
    let text = if seen.is_empty() {
        format!("{name} was shown no image.")
    } else {
        let question: String = question.chars().take(120).collect();
        format!("{name} sees {}. Asked: {question}", seen.join(" and "))
    };
    let stream = req.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let pieces = text_pieces(&text);
    let seq = sim.seq.fetch_add(1, Ordering::Relaxed);
    let plan = Plan {
        id: format!("chatcmpl-sim{seq:06}"),
        created: unix_secs(),
        model: name.to_string(),
        start: 0,
        content: pieces.len(),
        reasoning: 0,
        tools: Vec::new(),
        finish: "stop",
        interval: None,
        first_token: Duration::ZERO,
        cut_after: None,
        garbage: false,
        stamp: false,
        pieces: Some(pieces),
        include_usage: false,
        prompt_tokens: count_prompt_tokens(messages, None),
    };
    Some(if stream {
        stream_answer(sim.clone(), plan)
    } else {
        whole_answer(sim.clone(), plan).await
    })
}

/// "a 2048×1536 JPEG image" from a data URL, or why it is none.
fn image_size(url: &str) -> String {
    let Some((head, data)) = url.split_once(";base64,") else {
        return "an image that is not a base64 data URL".into();
    };
    let kind = head
        .strip_prefix("data:image/")
        .unwrap_or("?")
        .to_uppercase();
    let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(data) else {
        return "an image whose base64 does not decode".into();
    };
    match image::ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .ok()
        .and_then(|r| r.into_dimensions().ok())
    {
        Some((width, height)) => format!("a {width}×{height} {kind} image"),
        None => format!("a {kind} image that does not decode"),
    }
}
