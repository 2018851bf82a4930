//! The cues and faults a prompt or `/sim/faults` sets: their syntax, parsed
//! into a `Fault` (and the tool calls it scripts).

use super::*;

/// One fault, from a cue or from the `/sim/faults` queue. Every key is
/// optional; a later source overrides an earlier one key by key.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fault {
    pub tokens: Option<usize>,
    pub tps: Option<f64>,
    pub first_token_ms: Option<u64>,
    pub reasoning: Option<usize>,
    pub tool_call: Option<String>,
    pub args: Option<String>,
    pub tool_calls: Option<Vec<ToolCallSpec>>,
    pub tool_steps: Option<u64>,
    pub plain_ids: Option<bool>,
    pub stamp: Option<bool>,
    /// A literal answer (in pieces of [`TEXT_PIECE_CHARS`]) instead of `w{i} ` tokens.
    pub text: Option<String>,
    pub garbage: Option<bool>,
    pub cut_after: Option<usize>,
    pub status: Option<u16>,
    pub retry_after: Option<String>,
    pub message: Option<String>,
    pub refuse_s: Option<f64>,
    pub fail_times: Option<u64>,
}

/// One tool call an answer makes: `{"name": .., "arguments": "<JSON text>"}`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolCallSpec {
    pub name: String,
    pub arguments: String,
}

pub(super) const KNOWN_KEYS: &str = "tokens tps first_token_ms reasoning tool_call args tool_calls \
                          tool_steps plain_ids stamp text garbage cut_after status retry_after message \
                          refuse_s fail_times id";

/// Parses `tool_calls`: a JSON array of `{"name", "arguments"?}` (or OpenAI's
/// `{"function": {"name", "arguments"}}`); arguments an object or a string.
pub fn parse_tool_calls(text: &str) -> Result<Vec<ToolCallSpec>, String> {
    let v: Value = serde_json::from_str(text)
        .map_err(|e| format!("tool_calls={text}: not JSON ({e}); spaces end a cue value"))?;
    let calls = v
        .as_array()
        .filter(|a| !a.is_empty())
        .ok_or_else(|| format!("tool_calls={text}: must be a non-empty JSON array"))?;
    calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let f = c.get("function").filter(|f| f.is_object()).unwrap_or(c);
            let name = f
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .ok_or_else(|| format!("tool_calls[{i}]: needs a non-empty \"name\": {c}"))?;
            let arguments = match f.get("arguments") {
                None | Some(Value::Null) => "{}".to_string(),
                Some(Value::String(s)) => s.clone(),
                Some(o @ Value::Object(_)) => o.to_string(),
                Some(other) => {
                    return Err(format!(
                        "tool_calls[{i}]: arguments must be an object or a string, got {other}"
                    ))
                }
            };
            Ok(ToolCallSpec {
                name: name.to_string(),
                arguments,
            })
        })
        .collect()
}

impl Fault {
    /// Sets one key from its text value.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        fn num<T: std::str::FromStr>(key: &str, v: &str) -> Result<T, String> {
            v.parse()
                .map_err(|_| format!("{key}={v}: not a whole number"))
        }
        fn float(key: &str, v: &str) -> Result<f64, String> {
            match v.parse::<f64>() {
                Ok(f) if f.is_finite() && f >= 0.0 => Ok(f),
                _ => Err(format!("{key}={v}: not a number >= 0")),
            }
        }
        fn flag(key: &str, v: &str) -> Result<bool, String> {
            match v {
                "1" | "true" | "yes" | "on" => Ok(true),
                "0" | "false" | "no" | "off" => Ok(false),
                _ => Err(format!("{key}={v}: not 1/0/true/false")),
            }
        }
        fn upto<T: std::str::FromStr + PartialOrd + std::fmt::Display>(
            key: &str,
            v: &str,
            max: T,
        ) -> Result<T, String> {
            let n: T = num(key, v)?;
            if n > max {
                return Err(format!("{key}={v}: at most {max}"));
            }
            Ok(n)
        }
        const MAX_TOKENS: usize = 1_000_000;
        match key {
            "tokens" => self.tokens = Some(upto(key, value, MAX_TOKENS)?),
            "tps" => self.tps = Some(float(key, value)?),
            "first_token_ms" => self.first_token_ms = Some(upto(key, value, 86_400_000)?),
            "reasoning" => self.reasoning = Some(upto(key, value, MAX_TOKENS)?),
            "tool_call" => {
                if value.is_empty() {
                    return Err("tool_call needs a name".into());
                }
                if self.tool_calls.is_some() {
                    return Err("use tool_call (with args) or tool_calls, not both".into());
                }
                self.tool_call = Some(value.to_string())
            }
            "args" => self.args = Some(value.to_string()),
            "tool_calls" => {
                if self.tool_call.is_some() {
                    return Err("use tool_call (with args) or tool_calls, not both".into());
                }
                self.tool_calls = Some(parse_tool_calls(value)?)
            }
            "tool_steps" => self.tool_steps = Some(upto(key, value, 1_000_000)?),
            "plain_ids" => self.plain_ids = Some(flag(key, value)?),
            "stamp" => self.stamp = Some(flag(key, value)?),
            "text" => self.text = Some(value.to_string()),
            "garbage" => self.garbage = Some(flag(key, value)?),
            "cut_after" => self.cut_after = Some(num(key, value)?),
            "status" => {
                let s: u16 = num(key, value)?;
                if !(400..=599).contains(&s) {
                    return Err(format!("status={s}: must be 400..=599"));
                }
                self.status = Some(s)
            }
            "retry_after" => {
                if value.is_empty() || HeaderValue::from_str(value).is_err() {
                    return Err(format!("retry_after={value}: not a header value"));
                }
                self.retry_after = Some(value.to_string())
            }
            "message" => self.message = Some(value.to_string()),
            "refuse_s" => {
                let f = float(key, value)?;
                if f > 86400.0 {
                    return Err(format!("{key}={value}: at most 86400"));
                }
                self.refuse_s = Some(f)
            }
            "fail_times" => self.fail_times = Some(num(key, value)?),
            "id" => {}
            _ => return Err(format!("unknown key `{key}` (known: {KNOWN_KEYS})")),
        }
        Ok(())
    }

    /// A fault from a JSON object with the cue keys (`{"status":503}`).
    pub fn from_json(v: &Value) -> Result<Fault, String> {
        let obj = v
            .as_object()
            .ok_or_else(|| format!("a fault must be an object, got {v}"))?;
        let mut f = Fault::default();
        for (k, v) in obj {
            let text = match v {
                Value::Null => continue,
                Value::String(s) => s.clone(),
                Value::Bool(b) => b.to_string(),
                other => other.to_string(),
            };
            f.set(k, &text)?;
        }
        Ok(f)
    }

    /// `other`'s keys override ours; its tool_call or tool_calls replaces
    /// whichever of the two we had.
    pub(super) fn merge(&mut self, other: &Fault) {
        if other.tool_calls.is_some() {
            self.tool_call = None;
            self.args = None;
        }
        if other.tool_call.is_some() {
            self.tool_calls = None;
        }
        macro_rules! take {
            ($($field:ident),*) => { $( if other.$field.is_some() { self.$field = other.$field.clone(); } )* };
        }
        take!(
            tokens,
            tps,
            first_token_ms,
            reasoning,
            tool_call,
            args,
            tool_calls,
            tool_steps,
            plain_ids,
            stamp,
            text,
            garbage,
            cut_after,
            status,
            retry_after,
            message,
            refuse_s,
            fail_times
        );
    }

    pub(super) fn to_json(&self) -> Value {
        let mut m = Map::new();
        macro_rules! put {
            ($($field:ident),*) => { $( if let Some(v) = &self.$field { m.insert(stringify!($field).into(), json!(v)); } )* };
        }
        put!(
            tokens,
            tps,
            first_token_ms,
            reasoning,
            tool_call,
            args,
            tool_calls,
            tool_steps,
            plain_ids,
            stamp,
            text,
            garbage,
            cut_after,
            status,
            retry_after,
            message,
            refuse_s,
            fail_times
        );
        Value::Object(m)
    }

    /// The tool calls an answer makes (before `tool_steps` is applied).
    pub fn calls(&self) -> Vec<ToolCallSpec> {
        if let Some(calls) = &self.tool_calls {
            return calls.clone();
        }
        self.tool_call
            .iter()
            .map(|name| ToolCallSpec {
                name: name.clone(),
                arguments: self.args.clone().unwrap_or_else(|| "{}".into()),
            })
            .collect()
    }
}

/// Finds every `[sim ...]` cue in `text`. Returns the cue texts joined (the
/// key of the fail_times counter) and the merged fault, or `None` if the
/// text has no cue.
pub fn parse_cues(text: &str) -> Result<Option<(String, Fault)>, String> {
    let mut fault = Fault::default();
    let mut texts: Vec<&str> = Vec::new();
    let mut from = 0;
    while let Some(rel) = text[from..].find("[sim") {
        let start = from + rel;
        let body_at = start + 4;
        let rest = &text[body_at..];
        if !(rest.starts_with(char::is_whitespace) || rest.starts_with(']')) {
            from = body_at;
            continue;
        }
        let used = parse_pairs(rest, &mut fault)?;
        texts.push(&text[start..body_at + used]);
        from = body_at + used;
    }
    if texts.is_empty() {
        return Ok(None);
    }
    Ok(Some((texts.join(" "), fault)))
}

/// Parses `key=value ...]`; returns the bytes used, through the `]`.
pub(super) fn parse_pairs(s: &str, fault: &mut Fault) -> Result<usize, String> {
    let mut it = s.char_indices().peekable();
    loop {
        while it.peek().is_some_and(|(_, c)| c.is_whitespace()) {
            it.next();
        }
        let Some(&(i, c)) = it.peek() else {
            return Err("unclosed [sim ...] cue".into());
        };
        if c == ']' {
            return Ok(i + 1);
        }
        let key_start = i;
        let mut key_end = s.len();
        while let Some(&(j, c)) = it.peek() {
            if c.is_whitespace() || c == '=' || c == ']' {
                key_end = j;
                break;
            }
            it.next();
        }
        let key = &s[key_start..key_end];
        if it.peek().map(|&(_, c)| c) != Some('=') {
            return Err(format!("cue `{key}` needs a value (key=value)"));
        }
        it.next();
        let value_start = it.peek().map_or(s.len(), |&(j, _)| j);
        let mut value_end = s.len();
        let (mut depth, mut in_str, mut esc) = (0usize, false, false);
        while let Some(&(j, c)) = it.peek() {
            if in_str {
                if esc {
                    esc = false;
                } else if c == '\\' {
                    esc = true;
                } else if c == '"' {
                    in_str = false;
                }
            } else {
                match c {
                    '"' => in_str = true,
                    '{' | '[' => depth += 1,
                    '}' | ']' if depth > 0 => depth -= 1,
                    ']' => {
                        value_end = j;
                        break;
                    }
                    c if c.is_whitespace() && depth == 0 => {
                        value_end = j;
                        break;
                    }
                    _ => {}
                }
            }
            it.next();
        }
        let raw = &s[value_start..value_end];
        // A "quoted" value is a JSON string literal.
        let value = if raw.len() >= 2 && raw.starts_with('"') && raw.ends_with('"') {
            serde_json::from_str::<String>(raw).unwrap_or_else(|_| raw[1..raw.len() - 1].into())
        } else {
            raw.to_string()
        };
        fault.set(key, &value)?;
    }
}
