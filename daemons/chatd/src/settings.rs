//! A chat's model settings: what each request to the engine carries beside
//! the messages (sampling, reasoning, the answer's length), the person's
//! system prompt, and the window the chat plans its compaction with.
//!
//! A body is checked whole before anything is stored: an unknown name or a
//! value out of range is a 400 naming `settings.<field>` and the range.
//! Stored settings are read leniently (a value an older build kept that this
//! one would refuse is left out), so a row never stops a chat from loading.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use tandem_shared::http::ApiError;

/// The longest system prompt, in bytes.
pub const MAX_SYSTEM_PROMPT: usize = 32 * 1024;
/// The smallest window a chat may plan with: room for chatd's own block,
/// the tools and one exchange.
pub const MIN_CONTEXT_SIZE: u64 = 1_024;

/// How hard a reasoning model thinks before it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningEffort {
    None,
    Minimal,
    Low,
    Medium,
    High,
}

impl ReasoningEffort {
    const NAMES: &'static str = "none, minimal, low, medium or high";

    pub fn as_str(self) -> &'static str {
        match self {
            ReasoningEffort::None => "none",
            ReasoningEffort::Minimal => "minimal",
            ReasoningEffort::Low => "low",
            ReasoningEffort::Medium => "medium",
            ReasoningEffort::High => "high",
        }
    }

    pub fn parse(text: &str) -> Option<ReasoningEffort> {
        Some(match text {
            "none" => ReasoningEffort::None,
            "minimal" => ReasoningEffort::Minimal,
            "low" => ReasoningEffort::Low,
            "medium" => ReasoningEffort::Medium,
            "high" => ReasoningEffort::High,
            _ => return None,
        })
    }
}

/// A chat's (or a saved agent's, or the box's defaults') settings. A field
/// left out is left to whatever comes under it: the agent's, then the
/// engine's own default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<ReasoningEffort>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// The window the chat's compaction line plans with (never above the
    /// model's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_size: Option<u64>,
    /// Agents mode: the chat's model plans and hands every write and build
    /// to a worker (`task`); off unless set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<bool>,
}

/// The names a settings object may hold, as a person reads them.
const NAMES: &str =
    "system_prompt, temperature, top_p, top_k, reasoning_effort, max_tokens, context_size, agents";

/// One field of a settings body: absent, set to null (cleared), or a value.
enum Given<'a> {
    Absent,
    Cleared,
    Value(&'a Value),
}

impl Settings {
    /// Checks a settings object from a request. `field` is where it sits in
    /// the body (`settings`, `defaults.settings`), for the error's name.
    /// A null value clears that setting.
    pub fn check(field: &str, value: &Value) -> Result<Settings, ApiError> {
        Settings::default().patched(field, value)
    }

    /// These settings with `patch` laid over them: a name with a value sets
    /// it, a name with null clears it, a name left out keeps what it was.
    pub fn patched(&self, field: &str, patch: &Value) -> Result<Settings, ApiError> {
        let Some(map) = patch.as_object() else {
            return Err(ApiError::bad_input(field, "must be an object"));
        };
        if let Some(name) = map
            .keys()
            .find(|k| !NAMES.split(", ").any(|n| n == k.as_str()))
        {
            let shown: String = name.chars().take(64).collect();
            return Err(ApiError::bad_input(
                &format!("{field}.{shown}"),
                format!("is not a setting: the settings are {NAMES}"),
            ));
        }
        let given = |name: &str| match map.get(name) {
            None => Given::Absent,
            Some(Value::Null) => Given::Cleared,
            Some(v) => Given::Value(v),
        };
        let name = |n: &str| format!("{field}.{n}");
        let mut out = self.clone();
        set(&mut out.system_prompt, given("system_prompt"), |v| {
            let text = v
                .as_str()
                .ok_or_else(|| ApiError::bad_input(&name("system_prompt"), "must be a string"))?;
            if text.len() > MAX_SYSTEM_PROMPT {
                return Err(ApiError::bad_input(
                    &name("system_prompt"),
                    format!(
                        "is {} bytes, more than {MAX_SYSTEM_PROMPT} (32 KiB)",
                        text.len()
                    ),
                ));
            }
            if text.contains('\0') {
                return Err(ApiError::bad_input(
                    &name("system_prompt"),
                    "holds a NUL byte",
                ));
            }
            Ok(text.to_string())
        })?;
        set(&mut out.temperature, given("temperature"), |v| {
            number_in(v, &name("temperature"), "a number from 0 to 2", |x| {
                (0.0..=2.0).contains(&x)
            })
        })?;
        set(&mut out.top_p, given("top_p"), |v| {
            number_in(v, &name("top_p"), "a number above 0 and at most 1", |x| {
                x > 0.0 && x <= 1.0
            })
        })?;
        set(&mut out.top_k, given("top_k"), |v| {
            whole_at_least(v, &name("top_k"), 1)
        })?;
        set(&mut out.reasoning_effort, given("reasoning_effort"), |v| {
            v.as_str().and_then(ReasoningEffort::parse).ok_or_else(|| {
                ApiError::bad_input(
                    &name("reasoning_effort"),
                    format!("must be {}", ReasoningEffort::NAMES),
                )
            })
        })?;
        set(&mut out.max_tokens, given("max_tokens"), |v| {
            whole_at_least(v, &name("max_tokens"), 1)
        })?;
        set(&mut out.context_size, given("context_size"), |v| {
            whole_at_least(v, &name("context_size"), MIN_CONTEXT_SIZE)
        })?;
        set(&mut out.agents, given("agents"), |v| {
            v.as_bool()
                .ok_or_else(|| ApiError::bad_input(&name("agents"), "must be true or false"))
        })?;
        Ok(out)
    }

    /// Settings as a row keeps them. Lenient: what this build would refuse
    /// is left out, never an error (the row was checked when written).
    pub fn from_stored(value: &Value) -> Settings {
        let Some(map) = value.as_object() else {
            return Settings::default();
        };
        let mut out = Settings::default();
        for (name, v) in map {
            let one = Value::Object(Map::from_iter([(name.clone(), v.clone())]));
            if let Ok(checked) = out.patched("settings", &one) {
                out = checked;
            }
        }
        out
    }

    pub fn from_stored_text(text: &str) -> Settings {
        serde_json::from_str::<Value>(text)
            .map(|v| Settings::from_stored(&v))
            .unwrap_or_default()
    }

    /// The JSON a row keeps (and the API shows): only what is set.
    pub fn to_value(&self) -> Value {
        // A struct of strings, numbers and a unit enum always serializes.
        serde_json::to_value(self).unwrap_or_else(|_| json!({}))
    }

    pub fn to_text(&self) -> String {
        self.to_value().to_string()
    }

    /// These settings with what `under` sets filling the gaps (a chat's over
    /// its saved agent's). The system prompt is not filled: the chat's and
    /// the agent's instructions are both said, the chat's first.
    pub fn over(&self, under: &Settings) -> Settings {
        Settings {
            system_prompt: self.system_prompt.clone(),
            temperature: self.temperature.or(under.temperature),
            top_p: self.top_p.or(under.top_p),
            top_k: self.top_k.or(under.top_k),
            reasoning_effort: self.reasoning_effort.or(under.reasoning_effort),
            max_tokens: self.max_tokens.or(under.max_tokens),
            context_size: self.context_size.or(under.context_size),
            agents: self.agents.or(under.agents),
        }
    }

    /// Whether Agents mode is on.
    pub fn agents_on(&self) -> bool {
        self.agents == Some(true)
    }

    /// Puts the sampling and length settings into a chat-completions body,
    /// in the OpenAI fields (`top_k` as llama.cpp and vLLM read it). What is
    /// not set is not sent: the engine's own default holds.
    pub fn apply(&self, body: &mut Value) {
        if let Some(t) = self.temperature {
            body["temperature"] = json!(t);
        }
        if let Some(p) = self.top_p {
            body["top_p"] = json!(p);
        }
        if let Some(k) = self.top_k {
            body["top_k"] = json!(k);
        }
        if let Some(n) = self.max_tokens {
            body["max_tokens"] = json!(n);
        }
        if let Some(effort) = self.reasoning_effort {
            body["reasoning_effort"] = json!(effort.as_str());
            // llama-server hands the effort to the chat template only
            // through its kwargs (gpt-oss reads `reasoning_effort`, Qwen3
            // and others `enable_thinking`).
            body["chat_template_kwargs"] = json!({
                "reasoning_effort": effort.as_str(),
                "enable_thinking": effort != ReasoningEffort::None,
            });
        }
    }

    /// The window a chat plans with: its own size, never above the model's.
    pub fn window(&self, model_window: u64) -> u64 {
        match self.context_size {
            Some(size) => size.min(model_window),
            None => model_window,
        }
    }
}

fn set<T>(
    slot: &mut Option<T>,
    given: Given<'_>,
    check: impl FnOnce(&Value) -> Result<T, ApiError>,
) -> Result<(), ApiError> {
    match given {
        Given::Absent => {}
        Given::Cleared => *slot = None,
        Given::Value(v) => *slot = Some(check(v)?),
    }
    Ok(())
}

fn number_in(
    v: &Value,
    field: &str,
    range: &str,
    ok: impl Fn(f64) -> bool,
) -> Result<f64, ApiError> {
    match v.as_f64() {
        Some(x) if x.is_finite() && ok(x) => Ok(x),
        Some(x) => Err(ApiError::bad_input(field, format!("{x} is not {range}"))),
        None => Err(ApiError::bad_input(field, format!("must be {range}"))),
    }
}

fn whole_at_least(v: &Value, field: &str, min: u64) -> Result<u64, ApiError> {
    match v.as_u64() {
        Some(n) if n >= min => Ok(n),
        _ => Err(ApiError::bad_input(
            field,
            format!("must be a whole number, at least {min}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(value: Value) -> String {
        match Settings::check("settings", &value) {
            Ok(s) => panic!("{value} was taken as {s:?}"),
            Err(e) => e.message,
        }
    }

    #[test]
    fn each_setting_is_checked_with_its_range_named() {
        let table = [
            (json!({"temperature": 2.5}), "settings.temperature: 2.5 is not a number from 0 to 2"),
            (json!({"temperature": "hot"}), "settings.temperature: must be a number from 0 to 2"),
            (json!({"top_p": 0}), "settings.top_p: 0 is not a number above 0 and at most 1"),
            (json!({"top_k": 0}), "settings.top_k: must be a whole number, at least 1"),
            (json!({"top_k": 1.5}), "settings.top_k: must be a whole number, at least 1"),
            (json!({"max_tokens": -1}), "settings.max_tokens: must be a whole number, at least 1"),
            (json!({"context_size": 10}), "settings.context_size: must be a whole number, at least 1024"),
            (
                json!({"reasoning_effort": "max"}),
                "settings.reasoning_effort: must be none, minimal, low, medium or high",
            ),
            (json!({"system_prompt": 3}), "settings.system_prompt: must be a string"),
            (
                json!({"system_prompt": "x".repeat(MAX_SYSTEM_PROMPT + 1)}),
                "settings.system_prompt: is 32769 bytes, more than 32768 (32 KiB)",
            ),
            (
                json!({"temprature": 1}),
                "settings.temprature: is not a setting: the settings are system_prompt, temperature, top_p, top_k, reasoning_effort, max_tokens, context_size, agents",
            ),
            (json!([1]), "settings: must be an object"),
        ];
        for (value, expect) in table {
            assert_eq!(refused(value), expect);
        }
    }

    #[test]
    fn a_patch_sets_clears_and_keeps() {
        let base = Settings::check(
            "settings",
            &json!({"system_prompt": "Be brief.", "temperature": 0.2, "top_k": 40}),
        )
        .expect("valid");
        let next = base
            .patched("settings", &json!({"temperature": 1.1, "top_k": null}))
            .expect("valid");
        assert_eq!(next.system_prompt.as_deref(), Some("Be brief."));
        assert_eq!(next.temperature, Some(1.1));
        assert_eq!(next.top_k, None);
        assert_eq!(
            next.to_value(),
            json!({"system_prompt": "Be brief.", "temperature": 1.1})
        );
        // A refused patch changes nothing (the caller keeps `base`).
        assert!(base.patched("settings", &json!({"top_p": 2})).is_err());
    }

    #[test]
    fn the_request_carries_what_is_set_and_nothing_else() {
        let s = Settings::check(
            "settings",
            &json!({"temperature": 0, "top_p": 0.9, "top_k": 20, "max_tokens": 300, "reasoning_effort": "low"}),
        )
        .expect("valid");
        let mut body = json!({"model": "m"});
        s.apply(&mut body);
        assert_eq!(body["temperature"], 0.0);
        assert_eq!(body["top_p"], 0.9);
        assert_eq!(body["top_k"], 20);
        assert_eq!(body["max_tokens"], 300);
        assert_eq!(body["reasoning_effort"], "low");
        assert_eq!(body["chat_template_kwargs"]["enable_thinking"], true);
        let mut plain = json!({"model": "m"});
        Settings::default().apply(&mut plain);
        assert_eq!(plain, json!({"model": "m"}));
        let off = Settings::check("settings", &json!({"reasoning_effort": "none"})).expect("valid");
        let mut body = json!({});
        off.apply(&mut body);
        assert_eq!(body["chat_template_kwargs"]["enable_thinking"], false);
    }

    #[test]
    fn a_chat_over_its_agent_and_the_window_under_the_model() {
        let agent = Settings::check(
            "settings",
            &json!({"temperature": 0.1, "max_tokens": 50, "system_prompt": "agent"}),
        )
        .expect("valid");
        let chat = Settings::check("settings", &json!({"temperature": 0.9})).expect("valid");
        let both = chat.over(&agent);
        assert_eq!(both.temperature, Some(0.9));
        assert_eq!(both.max_tokens, Some(50));
        assert_eq!(
            both.system_prompt, None,
            "the agent's prompt is not the chat's"
        );
        let sized = Settings::check("settings", &json!({"context_size": 8192})).expect("valid");
        assert_eq!(sized.window(32_768), 8192);
        assert_eq!(sized.window(4096), 4096);
        assert_eq!(Settings::default().window(4096), 4096);
    }

    #[test]
    fn stored_settings_are_read_leniently() {
        let s = Settings::from_stored(&json!({"temperature": 9, "top_k": 5, "old": true}));
        assert_eq!(
            s,
            Settings {
                top_k: Some(5),
                ..Settings::default()
            }
        );
        assert_eq!(Settings::from_stored_text("not json"), Settings::default());
    }
}
