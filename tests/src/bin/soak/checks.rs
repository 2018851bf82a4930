//! The end's checks: every stored answer a whole run of the engine's tokens,
//! chatd's log lines that name no id, and the quantiles of the latencies.

use super::*;

/// Every stored answer is `w0 w1 … w{k-1} ` (stamped tokens `w{i}:{µs} `):
/// none lost, none doubled; a `done` one has all the tokens its question asked for.
pub(crate) fn check_answers(shared: &Shared, chat: &str, snapshot: &Value) -> (u64, u64) {
    let messages = snapshot["messages"].as_array().cloned().unwrap_or_default();
    let by_id: HashMap<&str, &Value> = messages
        .iter()
        .filter_map(|m| Some((m["id"].as_str()?, m)))
        .collect();
    let (mut answers, mut whole) = (0, 0);
    for m in &messages {
        if m["role"] != "assistant" {
            continue;
        }
        answers += 1;
        let text = m["text"].as_str().unwrap_or("");
        let mid = m["id"].as_str().unwrap_or("");
        let count = match answer_tokens(text) {
            Ok(count) => count,
            Err(why) => {
                shared.violate(
                    Inv::Answers,
                    format!("chat {chat}, answer {mid}: {why}: {}", excerpt(text)),
                );
                continue;
            }
        };
        if m["status"] != "done" {
            continue;
        }
        let asked = m["parent_id"]
            .as_str()
            .and_then(|p| by_id.get(p))
            .filter(|q| q["role"] == "user")
            .and_then(|q| q["text"].as_str())
            .and_then(|q| {
                let cue = &q[q.find("[sim ")?..];
                let n = &cue[cue.find("tokens=")? + 7..];
                n[..n.find(' ')?].parse::<usize>().ok()
            });
        match asked {
            Some(n) if n == count => whole += 1,
            Some(n) => shared.violate(
                Inv::Answers,
                format!(
                    "chat {chat}, answer {mid} is done with {count} of the {n} tokens asked for"
                ),
            ),
            None => {}
        }
    }
    (answers, whole)
}

/// The number of tokens of an answer `w0 w1 … w{k-1} ` (or stamped
/// `w{i}:{µs} `), or what is wrong with it.
pub(crate) fn answer_tokens(text: &str) -> Result<usize, String> {
    let mut count = 0;
    for (i, token) in text.split(' ').filter(|t| !t.is_empty()).enumerate() {
        let index = token
            .strip_prefix('w')
            .map(|t| t.split_once(':').map_or(t, |(d, _)| d))
            .and_then(|d| d.parse::<usize>().ok());
        if index != Some(i) {
            return Err(format!("token {i} is {token:?}"));
        }
        count += 1;
    }
    if !text.is_empty() && !text.ends_with(' ') {
        return Err("the last token is cut".into());
    }
    Ok(count)
}

/// An `ERROR` line names what it is about; one without an id is a bug report nobody can follow.
pub(crate) fn error_without_id(line: &str) -> bool {
    let is_error = line.split_whitespace().take(3).any(|w| w == "ERROR");
    pub(crate) const IDS: &[&str] = &[
        "run=",
        "conversation=",
        "message=",
        "chat=",
        "run_id=",
        "conversation_id=",
        "message_id=",
        "card=",
        "call=",
    ];
    is_error && !IDS.iter().any(|id| line.contains(id))
}

pub(crate) fn quantile(sorted: &[i64], q: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}
