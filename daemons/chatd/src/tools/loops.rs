//! schedule_next and loop_done: the two tools a chat has while it has an
//! active self-paced loop, and the intervals a person or the model writes
//! (`30s`, `5m`, `2h`, `1h30m`, or a number of seconds).

use serde_json::{json, Value};

use super::{Effect, ToolSpec};

pub const NEXT: &str = "schedule_next";
pub const DONE: &str = "loop_done";
/// A reason's characters, at most.
const REASON_CHARS: usize = 300;

pub fn next_spec() -> ToolSpec {
    ToolSpec {
        name: NEXT,
        description: "This run was started by a self-paced loop of the chat: say when it runs \
            again. `wait` is how long (`90s`, `5m`, `2h`, `1h30m`; at least the box's shortest \
            interval, at most 24h), `reason` what you wait for. Call it or loop_done once a \
            run, or the loop ends.",
        parameters: json!({
            "type": "object",
            "properties": {
                "wait": {"type": "string", "description": "How long to wait: 90s, 5m, 2h"},
                "reason": {"type": "string", "description": "What you wait for, in a few words"}
            },
            "required": ["wait", "reason"],
            "additionalProperties": false
        }),
        effect: Effect::Read,
    }
}

pub fn done_spec() -> ToolSpec {
    ToolSpec {
        name: DONE,
        description: "This run was started by a self-paced loop of the chat, and its task is \
            complete: end the loop. `reason` says why, in a few words.",
        parameters: json!({
            "type": "object",
            "properties": {
                "reason": {"type": "string", "description": "Why the loop is done"}
            },
            "required": ["reason"],
            "additionalProperties": false
        }),
        effect: Effect::Read,
    }
}

/// Whether `name` is one of the loop's tools.
pub fn is_loop_tool(name: &str) -> bool {
    name == NEXT || name == DONE
}

/// An interval's seconds: `30s`, `5m`, `2h`, `1h30m` or a bare number of
/// seconds; why not, in words a person reads.
pub fn parse_interval(text: &str) -> Result<i64, String> {
    let text = text.trim().to_ascii_lowercase();
    if let Ok(seconds) = text.parse::<i64>() {
        return Ok(seconds);
    }
    let mut total = 0i64;
    let mut digits = String::new();
    let mut units = 0;
    for c in text.chars() {
        match c {
            '0'..='9' => digits.push(c),
            'h' | 'm' | 's' if !digits.is_empty() && digits.len() <= 6 => {
                let n: i64 = digits.parse().map_err(|_| bad(&text))?;
                total += n * match c {
                    'h' => 3600,
                    'm' => 60,
                    _ => 1,
                };
                digits.clear();
                units += 1;
            }
            _ => return Err(bad(&text)),
        }
    }
    if !digits.is_empty() || units == 0 {
        return Err(bad(&text));
    }
    Ok(total)
}

fn bad(text: &str) -> String {
    format!(
        "{:?} is not an interval: write it as 30s, 5m, 2h or 1h30m",
        text.chars().take(40).collect::<String>()
    )
}

/// A loop tool call's arguments, checked against the shortest wait `min_s`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Args {
    Next { seconds: i64, reason: String },
    Done { reason: String },
}

impl Args {
    pub fn parse(name: &str, arguments: &str, min_s: i64) -> Result<Args, String> {
        let names: &[&str] = match name {
            NEXT => &["wait", "reason"],
            _ => &["reason"],
        };
        let map = super::object_of(arguments, name, names)?;
        let reason = map
            .get("reason")
            .and_then(Value::as_str)
            .map(str::trim)
            .unwrap_or("");
        if reason.is_empty() {
            return Err("`reason` is required, as a string".into());
        }
        if reason.chars().count() > REASON_CHARS {
            return Err(format!("`reason` is over {REASON_CHARS} characters"));
        }
        let reason = reason.to_string();
        if name == DONE {
            return Ok(Args::Done { reason });
        }
        let seconds = match map.get("wait") {
            Some(Value::String(text)) => {
                parse_interval(text).map_err(|e| format!("`wait`: {e}"))?
            }
            Some(Value::Number(n)) => n.as_i64().ok_or("`wait` must be whole seconds")?,
            _ => return Err("`wait` is required, as 90s, 5m or 2h".into()),
        };
        if !(min_s..=crate::store::loops::LONGEST_S).contains(&seconds) {
            return Err(format!(
                "`wait` must be from {min_s} seconds to 24h, not {seconds} seconds"
            ));
        }
        Ok(Args::Next { seconds, reason })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_read_as_a_person_writes_them() {
        assert_eq!(parse_interval("30s"), Ok(30));
        assert_eq!(parse_interval("5m"), Ok(300));
        assert_eq!(parse_interval(" 1h30m "), Ok(5400));
        assert_eq!(parse_interval("2H"), Ok(7200));
        assert_eq!(parse_interval("90"), Ok(90));
        for bad in ["", "m", "5x", "5m3", "five minutes", "1234567m"] {
            assert!(parse_interval(bad).is_err(), "{bad:?}");
        }
        assert_eq!(crate::model::interval_text(5400), "1h30m");
        assert_eq!(crate::model::interval_text(300), "5m");
        assert_eq!(crate::model::interval_text(45), "45s");
    }

    #[test]
    fn a_wait_is_kept_between_the_shortest_interval_and_a_day() {
        let next = |args: &str| Args::parse(NEXT, args, 60);
        assert_eq!(
            next(r#"{"wait":"5m","reason":"the build"}"#),
            Ok(Args::Next {
                seconds: 300,
                reason: "the build".into()
            })
        );
        assert!(next(r#"{"wait":"30s","reason":"x"}"#)
            .unwrap_err()
            .contains("from 60 seconds to 24h"));
        assert!(next(r#"{"wait":"25h","reason":"x"}"#).is_err());
        assert!(next(r#"{"wait":"soon","reason":"x"}"#)
            .unwrap_err()
            .starts_with("`wait`:"));
        assert!(next(r#"{"wait":"5m"}"#).unwrap_err().contains("`reason`"));
        assert_eq!(
            Args::parse(DONE, r#"{"reason":"green"}"#, 60),
            Ok(Args::Done {
                reason: "green".into()
            })
        );
    }
}
