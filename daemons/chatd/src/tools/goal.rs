//! goal_done and goal_blocked: the two tools a chat has while its goal is
//! active. What a call asks is read and checked here; `runs/goals.rs`
//! writes it.

use serde_json::{json, Value};

use super::{Effect, ToolSpec};

pub const DONE: &str = "goal_done";
pub const BLOCKED: &str = "goal_blocked";
/// A summary's, a reason's or a need's characters, at most.
const NOTE_CHARS: usize = 4_000;
/// Evidence items, at most, and each one's characters.
const EVIDENCE_MAX: usize = 20;
const EVIDENCE_CHARS: usize = 300;

pub fn done_spec() -> ToolSpec {
    ToolSpec {
        name: DONE,
        description: "Say that the chat's goal is reached. `summary`: what was reached, in a \
            few lines. `evidence`: the calls (their ids) or files that show it, such as a test \
            run or the file written. Call it only once the work is checked.",
        parameters: json!({
            "type": "object",
            "properties": {
                "summary": {"type": "string", "description": "What was reached"},
                "evidence": {"type": "array", "items": {"type": "string"},
                    "description": "Call ids or file paths that show the goal is reached"}
            },
            "required": ["summary", "evidence"],
            "additionalProperties": false
        }),
        effect: Effect::Read,
    }
}

pub fn blocked_spec() -> ToolSpec {
    ToolSpec {
        name: BLOCKED,
        description: "Say that you cannot go on toward the chat's goal without the person: \
            `reason` says why, `needs` what they must give or decide. The goal waits for them.",
        parameters: json!({
            "type": "object",
            "properties": {
                "reason": {"type": "string", "description": "Why the work cannot go on"},
                "needs": {"type": "string", "description": "What the person must give or decide"}
            },
            "required": ["reason", "needs"],
            "additionalProperties": false
        }),
        effect: Effect::Read,
    }
}

/// Whether `name` is one of the goal's tools.
pub fn is_goal_tool(name: &str) -> bool {
    name == DONE || name == BLOCKED
}

/// A goal tool call's arguments, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Args {
    Done {
        summary: String,
        evidence: Vec<String>,
    },
    Blocked {
        reason: String,
        needs: String,
    },
}

impl Args {
    /// The arguments of a call to `name`, or why not, naming the field and the limit.
    pub fn parse(name: &str, arguments: &str) -> Result<Args, String> {
        let names: &[&str] = match name {
            DONE => &["summary", "evidence"],
            _ => &["reason", "needs"],
        };
        let map = super::object_of(arguments, name, names)?;
        let text = |field: &str| -> Result<String, String> {
            let text = map
                .get(field)
                .and_then(Value::as_str)
                .map(str::trim)
                .unwrap_or("");
            if text.is_empty() {
                return Err(format!("`{field}` is required, as a string"));
            }
            if text.chars().count() > NOTE_CHARS {
                return Err(format!("`{field}` is over {NOTE_CHARS} characters"));
            }
            Ok(text.to_string())
        };
        if name != DONE {
            return Ok(Args::Blocked {
                reason: text("reason")?,
                needs: text("needs")?,
            });
        }
        let summary = text("summary")?;
        let evidence = match map.get("evidence") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(one)) => vec![one.clone()],
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| match item {
                    Value::String(s) => Ok(s.clone()),
                    _ => Err("`evidence` must be a list of strings".to_string()),
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err("`evidence` must be a list of strings".to_string()),
        };
        let evidence: Vec<String> = evidence
            .into_iter()
            .map(|e| e.trim().to_string())
            .filter(|e| !e.is_empty())
            .collect();
        if evidence.len() > EVIDENCE_MAX {
            return Err(format!("`evidence` has over {EVIDENCE_MAX} items"));
        }
        if evidence.iter().any(|e| e.chars().count() > EVIDENCE_CHARS) {
            return Err(format!(
                "an item of `evidence` is over {EVIDENCE_CHARS} characters"
            ));
        }
        Ok(Args::Done { summary, evidence })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn done_takes_a_summary_and_a_list_or_one_string_of_evidence() {
        let args = Args::parse(
            DONE,
            r#"{"summary":" ok ","evidence":["call_1"," notes.md "]}"#,
        );
        assert_eq!(
            args,
            Ok(Args::Done {
                summary: "ok".into(),
                evidence: vec!["call_1".into(), "notes.md".into()]
            })
        );
        let one = Args::parse(DONE, r#"{"summary":"ok","evidence":"out.txt"}"#).unwrap();
        assert_eq!(
            one,
            Args::Done {
                summary: "ok".into(),
                evidence: vec!["out.txt".into()]
            }
        );
        let none = Args::parse(DONE, r#"{"summary":"ok","evidence":[" "]}"#).unwrap();
        assert_eq!(
            none,
            Args::Done {
                summary: "ok".into(),
                evidence: vec![]
            }
        );
    }

    #[test]
    fn bad_arguments_name_the_field_and_the_limit() {
        let missing = Args::parse(DONE, r#"{"evidence":[]}"#).unwrap_err();
        assert!(missing.contains("`summary` is required"), "{missing}");
        let long = format!(r#"{{"reason":"{}","needs":"x"}}"#, "a".repeat(4_001));
        let long = Args::parse(BLOCKED, &long).unwrap_err();
        assert!(long.contains("`reason` is over 4000"), "{long}");
        let numbers = Args::parse(DONE, r#"{"summary":"ok","evidence":[1]}"#).unwrap_err();
        assert!(numbers.contains("list of strings"), "{numbers}");
        let other = Args::parse(BLOCKED, r#"{"reason":"r","needs":"n","x":1}"#).unwrap_err();
        assert!(other.contains("`x` is not an argument"), "{other}");
        let many: Vec<String> = (0..21).map(|i| format!("f{i}")).collect();
        let many = json!({"summary": "ok", "evidence": many}).to_string();
        assert!(Args::parse(DONE, &many)
            .unwrap_err()
            .contains("over 20 items"));
    }
}
