//! An answer's plan: what one chat request is to get (tokens, reasoning,
//! tool calls, failures), read from its cue or the queued fault.

use super::*;

/// What a request fails with, if anything.
#[derive(Clone, Copy, Debug)]
pub(super) enum Failure {
    Refuse(f64),
    Status(u16),
    Cut(usize),
}

pub(super) fn failure_of(f: &Fault, start: usize) -> Option<Failure> {
    if let Some(s) = f.refuse_s {
        Some(Failure::Refuse(s))
    } else if let Some(s) = f.status {
        Some(Failure::Status(s))
    } else {
        match f.cut_after {
            Some(k) if k == 0 || start < k => Some(Failure::Cut(k)),
            _ => None,
        }
    }
}

/// A chunk (or, with `object: "chat.completion"`, a whole answer) in the
/// field order OpenAI and llama.cpp use.
#[derive(Serialize)]
pub(super) struct ChunkOut<'a, C = Vec<ChoiceOut>> {
    pub(super) id: &'a str,
    pub(super) object: &'static str,
    pub(super) created: u64,
    pub(super) model: &'a str,
    pub(super) system_fingerprint: &'static str,
    pub(super) choices: C,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) usage: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) timings: Option<Value>,
}

#[derive(Serialize)]
pub(super) struct ChoiceOut {
    pub(super) index: u32,
    pub(super) delta: DeltaOut,
    pub(super) finish_reason: Option<&'static str>,
}

#[derive(Serialize, Default)]
pub(super) struct DeltaOut {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) tool_calls: Option<Value>,
}

pub(super) struct PlannedCall {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) arguments: String,
}

/// Everything needed to produce one answer.
pub(super) struct Plan {
    pub(super) id: String,
    pub(super) created: u64,
    pub(super) model: String,
    /// Content token indices `start..start + content`.
    pub(super) start: usize,
    pub(super) content: usize,
    pub(super) reasoning: usize,
    /// Tool calls that end the answer (finish_reason "tool_calls").
    pub(super) tools: Vec<PlannedCall>,
    pub(super) finish: &'static str,
    pub(super) interval: Option<Duration>,
    pub(super) first_token: Duration,
    pub(super) cut_after: Option<usize>,
    pub(super) garbage: bool,
    pub(super) stamp: bool,
    /// A literal answer's pieces: token `i` is piece `i`.
    pub(super) pieces: Option<Vec<String>>,
    pub(super) include_usage: bool,
    pub(super) prompt_tokens: u64,
}

impl Plan {
    pub(super) fn completion_tokens(&self) -> usize {
        self.reasoning + self.content
    }

    pub(super) fn token(&self, i: usize) -> String {
        if let Some(pieces) = &self.pieces {
            pieces.get(i).cloned().unwrap_or_default()
        } else if self.stamp {
            format!("w{i}:{} ", unix_micros())
        } else {
            format!("w{i} ")
        }
    }

    pub(super) fn usage(&self, completion: usize) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens + completion as u64,
        })
    }

    pub(super) fn timings(&self, completion: usize, generating: Duration) -> Value {
        let prompt_ms = self.first_token.as_secs_f64() * 1000.0;
        let predicted_ms = generating.as_secs_f64() * 1000.0;
        let per_second = |n: f64, ms: f64| if ms > 0.0 { n * 1000.0 / ms } else { 0.0 };
        let per_token = |n: f64, ms: f64| if n > 0.0 { ms / n } else { 0.0 };
        let (pn, cn) = (self.prompt_tokens as f64, completion as f64);
        json!({
            "cache_n": 0,
            "prompt_n": self.prompt_tokens,
            "prompt_ms": prompt_ms,
            "prompt_per_token_ms": per_token(pn, prompt_ms),
            "prompt_per_second": per_second(pn, prompt_ms),
            "predicted_n": completion,
            "predicted_ms": predicted_ms,
            "predicted_per_token_ms": per_token(cn, predicted_ms),
            "predicted_per_second": per_second(cn, predicted_ms),
        })
    }

    pub(super) fn chunk(&self, choices: Vec<ChoiceOut>) -> ChunkOut<'_> {
        ChunkOut {
            id: &self.id,
            object: "chat.completion.chunk",
            created: self.created,
            model: &self.model,
            system_fingerprint: "engine-sim",
            choices,
            usage: None,
            timings: None,
        }
    }

    pub(super) fn delta(
        &self,
        delta: DeltaOut,
        finish_reason: Option<&'static str>,
    ) -> ChunkOut<'_> {
        self.chunk(vec![ChoiceOut {
            index: 0,
            delta,
            finish_reason,
        }])
    }

    /// The tool call's arguments in 2+ pieces.
    pub(super) fn arg_pieces(args: &str) -> Vec<String> {
        let chars: Vec<char> = args.chars().collect();
        if chars.len() < 2 {
            return vec![args.to_string(), String::new()];
        }
        let n = chars.len().min(4);
        let size = chars.len().div_ceil(n);
        chars.chunks(size).map(|c| c.iter().collect()).collect()
    }
}

/// The request's `messages` checked as a chat request checks them.
pub(super) fn checked_messages(req: &Value) -> Result<&[Value], String> {
    let messages = match req.get("messages").and_then(Value::as_array) {
        Some(m) if !m.is_empty() => m,
        Some(_) => return Err("'messages' must not be empty".into()),
        None => return Err("'messages' is required and must be an array".into()),
    };
    if let Some(bad) = messages.iter().find(|m| role(m).is_none()) {
        return Err(format!("each message needs a 'role': {bad}"));
    }
    Ok(messages)
}
