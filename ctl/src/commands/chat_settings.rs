//! `tandem chat settings`: NAME=VALUE words turned into the settings patch
//! chatd takes, and the settings it answers shown one per line. chatd checks
//! every value; here a word is only read as the JSON it most likely means.

use std::io::Read;
use std::path::Path;

use anyhow::{bail, Context};
use serde_json::{Map, Value};

/// The settings patch of `changes` (`name=value`, `name=` clears) and the
/// system prompt's file; `None` when nothing is to change.
pub fn patch(
    changes: &[String],
    system_prompt_file: Option<&Path>,
) -> anyhow::Result<Option<Value>> {
    let mut map = Map::new();
    for change in changes {
        let Some((name, value)) = change.split_once('=') else {
            bail!("{change:?} is not NAME=VALUE (NAME= clears a setting)");
        };
        let name = name.trim();
        if name.is_empty() {
            bail!("{change:?} names no setting");
        }
        map.insert(name.to_string(), value_of(name, value));
    }
    if let Some(file) = system_prompt_file {
        let mut text = String::new();
        if file == Path::new("-") {
            std::io::stdin()
                .read_to_string(&mut text)
                .context("reading the system prompt from stdin")?;
        } else {
            text = std::fs::read_to_string(file)
                .with_context(|| format!("reading the system prompt from {}", file.display()))?;
        }
        map.insert("system_prompt".into(), Value::String(text));
    }
    Ok((!map.is_empty()).then_some(Value::Object(map)))
}

/// A word as JSON: empty clears, a number is a number (but for the system
/// prompt, always text), anything else is text.
fn value_of(name: &str, value: &str) -> Value {
    if value.is_empty() {
        return Value::Null;
    }
    if name != "system_prompt" {
        match value {
            "true" | "on" => return Value::Bool(true),
            "false" | "off" => return Value::Bool(false),
            _ => {}
        }
        if let Ok(number) = serde_json::from_str::<serde_json::Number>(value) {
            return Value::Number(number);
        }
    }
    Value::String(value.to_string())
}

/// One line a setting, the system prompt's first line and its size only.
pub fn shown(settings: &Value) -> String {
    let Some(map) = settings.as_object().filter(|m| !m.is_empty()) else {
        return "no settings: the engine's defaults hold\n".into();
    };
    let mut out = String::new();
    for (name, value) in map {
        let text = match (name.as_str(), value) {
            ("system_prompt", Value::String(prompt)) => {
                let first: String = prompt
                    .lines()
                    .next()
                    .unwrap_or("")
                    .chars()
                    .take(60)
                    .collect();
                format!("{first:?} ({} bytes)", prompt.len())
            }
            (_, Value::String(s)) => s.clone(),
            (_, other) => other.to_string(),
        };
        out.push_str(&format!("{name:<17} {text}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn words_become_the_patch_chatd_checks() {
        let words = [
            "temperature=0.3",
            "top_k=40",
            "reasoning_effort=low",
            "max_tokens=",
            "system_prompt=42",
        ]
        .map(String::from);
        let patch = patch(&words, None)
            .expect("a patch")
            .expect("something to change");
        assert_eq!(
            patch,
            json!({"temperature": 0.3, "top_k": 40, "reasoning_effort": "low", "max_tokens": null, "system_prompt": "42"})
        );
        assert!(patch_of("nothing").is_err());
        assert!(patch_of("=3").is_err());
        assert_eq!(super::patch(&[], None).expect("no words"), None);
    }

    fn patch_of(word: &str) -> anyhow::Result<Option<Value>> {
        patch(&[word.to_string()], None)
    }

    #[test]
    fn settings_are_shown_one_per_line() {
        let text =
            shown(&json!({"system_prompt": "Answer in French.\nAlways.", "temperature": 0.3}));
        assert_eq!(
            text,
            "system_prompt     \"Answer in French.\" (25 bytes)\ntemperature       0.3\n"
        );
        assert_eq!(
            shown(&json!({})),
            "no settings: the engine's defaults hold\n"
        );
    }
}
