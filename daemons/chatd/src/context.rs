//! What a model request holds and how big it is: the transcript turned into
//! chat-completions messages (after the last clear, a compaction's summary
//! in the system message), the size estimate, the room tool results get,
//! and where a compaction cuts.

use serde_json::{json, Value};

use crate::model::Message;
use crate::words::{MessageStatus, Role};

/// The estimate's safety margin over characters/4: a request estimated under
/// the window is under it for any tokenizer that averages 3.5+ characters a token.
const MARGIN: f64 = 1.15;
/// Tokens the chat template adds around each message.
const PER_MESSAGE: u64 = 4;
/// The least room a step's results get, in tokens.
const MIN_RESULT_TOKENS: u64 = 2_000;
/// The most characters one tool result may take.
pub const MAX_RESULT_CHARS: usize = 64_000;

/// The sizes a chat's requests are held to, in tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The model's context window.
    pub window: u64,
    /// Room kept for the answer.
    pub answer: u64,
    /// The compaction line: a request this big compacts first.
    pub line: u64,
    /// The largest request that may go without compacting, however little
    /// compaction could keep: the window less the answer's room, or the line
    /// once the engine refused a size for memory.
    pub ceiling: u64,
}

impl Window {
    /// `refused`: the size of a request the engine refused for memory; from
    /// then on the chat compacts at 80 % of it.
    pub fn new(window: u64, answer_tokens: u64, percent: u64, refused: Option<u64>) -> Window {
        let answer = answer_tokens.min(window / 4);
        // In a small window the answer's room comes first.
        let mut line = (window * percent / 100).min(window - answer);
        if let Some(refused) = refused {
            line = line.min(refused * 80 / 100);
        }
        let line = line.max(1);
        Window {
            window,
            answer,
            line,
            ceiling: if refused.is_some() {
                line
            } else {
                window - answer
            },
        }
    }

    /// The largest request that may be sent: the window less the answer's room.
    pub fn max_request(&self) -> u64 {
        self.window.saturating_sub(self.answer)
    }

    /// Where a compaction must land: under half the line.
    pub fn target(&self) -> u64 {
        self.line / 2
    }

    /// The characters each of `calls` results may take when the request is
    /// `used` tokens: the step's results share half of what is left under the
    /// line (at least 2,000 tokens), never past the window less twice the
    /// answer's room, and at most 64,000 characters each.
    pub fn result_chars(&self, used: u64, calls: usize) -> usize {
        let half_left = self.line.saturating_sub(used) / 2;
        let ceiling = self
            .window
            .saturating_sub(2 * self.answer)
            .saturating_sub(used);
        let tokens = half_left.max(MIN_RESULT_TOKENS).min(ceiling);
        let chars = tokens_to_chars(tokens) / calls.max(1);
        chars.clamp(200, MAX_RESULT_CHARS)
    }
}

/// Characters that surely fit in `tokens` by the estimate.
fn tokens_to_chars(tokens: u64) -> usize {
    ((tokens as f64) * 4.0 / MARGIN) as usize
}

/// The estimated tokens of a request's messages and tools: characters/4
/// plus the template's share per message, with a 15 % margin.
pub fn estimate(messages: &[Value], tools: Option<&Value>) -> u64 {
    let chars = messages.iter().map(message_chars).sum::<usize>() + tools_chars(tools);
    tokens_of(chars, messages.len())
}

/// The characters of one request message the estimate counts.
pub fn message_chars(m: &Value) -> usize {
    let mut chars = content_chars(m.get("content"));
    if let Some(calls) = m.get("tool_calls").and_then(Value::as_array) {
        for call in calls {
            chars += str_len(call.pointer("/function/name"));
            chars += str_len(call.pointer("/function/arguments"));
        }
    }
    chars + str_len(m.get("tool_call_id"))
}

/// The characters of the offered tools the estimate counts.
pub fn tools_chars(tools: Option<&Value>) -> usize {
    tools.map_or(0, |t| t.to_string().len())
}

/// The estimate of `messages` messages holding `chars` characters in all.
pub fn tokens_of(chars: usize, messages: usize) -> u64 {
    let raw = chars as u64 / 4 + PER_MESSAGE * messages as u64 + 1;
    (raw as f64 * MARGIN).ceil() as u64
}

fn str_len(v: Option<&Value>) -> usize {
    v.and_then(Value::as_str).map_or(0, |s| s.chars().count())
}

fn content_chars(v: Option<&Value>) -> usize {
    match v {
        Some(Value::String(s)) => s.chars().count(),
        // An image counts as about 1,000 tokens: engines take 256 to 1,500.
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|p| {
                if p.get("image_url").is_some() {
                    4_000
                } else {
                    str_len(p.get("text"))
                }
            })
            .sum(),
        _ => 0,
    }
}

/// The estimated tokens of one stored message, for choosing what a
/// compaction keeps.
pub fn message_tokens(m: &Message) -> u64 {
    let mut chars = m.text.chars().count();
    for call in m.calls() {
        chars += call.arguments.chars().count() + call.name.chars().count();
    }
    ((chars as u64 / 4 + PER_MESSAGE) as f64 * MARGIN).ceil() as u64
}

/// The messages a request carries, before they are turned into JSON: the
/// summary of the last compaction (if any) and the stored messages after it.
pub struct Transcript<'a> {
    pub summary: Option<&'a str>,
    pub messages: Vec<&'a Message>,
}

/// Reads the active path as the model will see it: from the last clear on;
/// after a compaction its summary, the last question it cut away (so the
/// task stays word for word), and the messages from its kept point on.
pub fn transcript(history: &[Message]) -> Transcript<'_> {
    let start = history
        .iter()
        .rposition(|m| m.role == Role::Cleared)
        .map(|i| i + 1)
        .unwrap_or(0);
    let path = &history[start..];
    let Some(c) = path.iter().rposition(|m| m.role == Role::Compacted) else {
        return Transcript {
            summary: None,
            messages: path.iter().filter(|m| carried(m)).collect(),
        };
    };
    let marker = &path[c];
    let kept_at = marker
        .keep_from
        .as_ref()
        .and_then(|id| path[..c].iter().position(|m| &m.id == id))
        .unwrap_or(c);
    let mut messages: Vec<&Message> = Vec::new();
    // The kept part starts with a question: the last one before it when it
    // does not (a template that wants user/assistant turns needs it, and the
    // task stays word for word).
    let first_kept = path[kept_at..].iter().find(|m| carried(m));
    if first_kept.is_none_or(|m| m.role != Role::User) {
        if let Some(question) = path[..kept_at].iter().rev().find(|m| m.role == Role::User) {
            messages.push(question);
        }
    }
    messages.extend(path[kept_at..].iter().filter(|m| carried(m)));
    Transcript {
        summary: Some(marker.text.as_str()),
        messages,
    }
}

/// The skills a compaction summarized away on the active path, newest
/// first: loaded (`load_skill` called without `file`) or run by a message
/// after the last clear, in a message the request no longer carries.
pub fn summarized_skills(history: &[Message]) -> Vec<String> {
    let start = history
        .iter()
        .rposition(|m| m.role == Role::Cleared)
        .map_or(0, |i| i + 1);
    let path = &history[start..];
    let Some(c) = path.iter().rposition(|m| m.role == Role::Compacted) else {
        return Vec::new();
    };
    let carried: std::collections::HashSet<&str> = transcript(history)
        .messages
        .iter()
        .map(|m| m.id.as_str())
        .collect();
    let mut names: Vec<String> = Vec::new();
    for m in path[..c]
        .iter()
        .rev()
        .filter(|m| !carried.contains(m.id.as_str()))
    {
        let mut found: Vec<String> = m
            .calls()
            .iter()
            .filter(|call| call.name == crate::tools::skill::NAME)
            .filter_map(|call| serde_json::from_str::<Value>(call.arguments).ok())
            .filter(|args| args["file"].is_null())
            .filter_map(|args| args["name"].as_str().map(str::to_string))
            .collect();
        if let Some(records) = m.attachments.as_ref().and_then(Value::as_array) {
            found.extend(
                records
                    .iter()
                    .filter(|r| r["kind"] == "skill")
                    .filter_map(|r| r["name"].as_str().map(str::to_string)),
            );
        }
        for name in found {
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names
}

/// A person's message as the model reads it: one run with a skill leads
/// with the skill's text as it was sent; one that asks for a saved
/// agent (api/invoke.rs) leads with the call to make, the same wherever the
/// message stands (a run keeps rendered messages: runs/kept.rs); the
/// transcript keeps the person's words alone.
fn asked_agent(m: &Message) -> std::borrow::Cow<'_, str> {
    let record = m
        .attachments
        .as_ref()
        .and_then(Value::as_array)
        .and_then(|records| records.iter().find(|r| r["kind"] == "agent"));
    let skill = m
        .attachments
        .as_ref()
        .and_then(Value::as_array)
        .and_then(|records| records.iter().find(|r| r["kind"] == "skill"));
    if let Some(r) = skill {
        let (name, body) = (
            r["name"].as_str().unwrap_or(""),
            r["body"].as_str().unwrap_or(""),
        );
        return std::borrow::Cow::Owned(format!(
            "{}{}",
            crate::skills::prompt::invoked(name, body),
            m.text
        ));
    }
    match record {
        Some(r) => std::borrow::Cow::Owned(format!(
            "[The person asks you to hand a task to their saved agent {:?}: call spawn_agent \
             with {}, then tell them its result. Unless that call was made already: its \
             result then follows below.]\n\n{}",
            r["name"].as_str().unwrap_or(""),
            json!({"agent": r["agent_id"], "task": r["task"]}),
            m.text
        )),
        None => std::borrow::Cow::Borrowed(&m.text),
    }
}

fn carried(m: &Message) -> bool {
    match m.role {
        Role::User | Role::Tool => true,
        Role::Goal => m.starts_goal_turn(),
        Role::Assistant => !m.text.is_empty() || m.tool_calls.is_some(),
        Role::System | Role::Compacted | Role::Cleared => false,
    }
}

/// The chat-completions messages: the system block (with the summary), then
/// the transcript. Every tool call gets a result: a call the run never ran
/// (it ended first) is answered "not run". `stub(call id, name, arguments)` may shorten a finished
/// call's arguments (a file's content the model has written already).
pub fn request_messages(
    system: &str,
    transcript: &Transcript,
    stub: &dyn Fn(&str, &str, &str) -> Option<String>,
    images: &dyn Fn(&Message) -> Vec<Value>,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(transcript.messages.len() + 1);
    out.extend(system_message(system, transcript.summary));
    let mut i = 0;
    while i < transcript.messages.len() {
        let (group, next) = render_group(&transcript.messages, i, stub, images);
        out.extend(group);
        i = next;
    }
    out
}

/// The system message: the block, then the summary of what was compacted.
pub fn system_message(system: &str, summary: Option<&str>) -> Option<Value> {
    let mut system = system.to_string();
    if let Some(summary) = summary {
        system.push_str("\n\nSummary of the conversation before the messages below:\n");
        system.push_str(summary);
    }
    (!system.is_empty()).then(|| json!({"role": "system", "content": system}))
}

/// Where the group of the transcript that begins at `i` ends: after an
/// answer's results, or after the one message.
pub fn group_end(all: &[&Message], i: usize) -> usize {
    let mut end = i + 1;
    if all[i].role == Role::Assistant && has_calls(all[i]) {
        // A goal line written while the calls ran stays in their group.
        while end < all.len() && matches!(all[end].role, Role::Tool | Role::Goal) {
            end += 1;
        }
    }
    end
}

fn has_calls(m: &Message) -> bool {
    m.tool_calls
        .as_ref()
        .and_then(Value::as_array)
        .is_some_and(|c| !c.is_empty())
}

/// The request messages of the group that begins at `i` (a question, a
/// result cut from its call, an answer with its results), and where the
/// next group begins.
pub fn render_group(
    all: &[&Message],
    i: usize,
    stub: &dyn Fn(&str, &str, &str) -> Option<String>,
    images: &dyn Fn(&Message) -> Vec<Value>,
) -> (Vec<Value>, usize) {
    let m = all[i];
    let end = group_end(all, i);
    let one = |v: Value| (vec![v], end);
    match m.role {
        Role::User => {
            let parts = images(m);
            let text = asked_agent(m);
            if parts.is_empty() {
                one(json!({"role": "user", "content": text}))
            } else {
                let mut content = vec![json!({"type": "text", "text": text})];
                content.extend(parts);
                one(json!({"role": "user", "content": content}))
            }
        }
        // A goal line that starts a turn is the person's word to go on.
        Role::Goal if carried(m) => one(json!({"role": "user", "content": m.text})),
        Role::Goal => (Vec::new(), end),
        // A result whose call is not before it (cut by a compaction): as text.
        Role::Tool => one(json!({"role": "user", "content": format!("[tool result]\n{}", m.text)})),
        Role::Assistant => {
            let calls = m
                .tool_calls
                .as_ref()
                .and_then(Value::as_array)
                .filter(|c| !c.is_empty());
            let Some(calls) = calls else {
                return one(json!({"role": "assistant", "content": m.text}));
            };
            // Its results follow it; only a call that succeeded is shortened.
            let results = &all[i + 1..end];
            let succeeded = |id: &str| {
                results.iter().any(|r| {
                    r.tool_call_id.as_deref() == Some(id) && r.status != Some(MessageStatus::Failed)
                })
            };
            let calls_out: Vec<Value> = calls
                .iter()
                .map(|call| {
                    let mut call = call.clone();
                    let id = call.get("id").and_then(Value::as_str).unwrap_or("");
                    let name = call.pointer("/function/name").and_then(Value::as_str);
                    let args = call.pointer("/function/arguments").and_then(Value::as_str);
                    if let (true, Some(name), Some(args)) = (succeeded(id), name, args) {
                        if let Some(short) = stub(id, name, args) {
                            call["function"]["arguments"] = json!(short);
                        }
                    }
                    call
                })
                .collect();
            let content = if m.text.is_empty() {
                Value::Null
            } else {
                json!(m.text)
            };
            let mut out =
                vec![json!({"role": "assistant", "content": content, "tool_calls": calls_out})];
            // Its results follow it; a call the run never ran is said so.
            let mut answered: Vec<&str> = Vec::new();
            for r in results.iter().filter(|r| r.role == Role::Tool) {
                out.push(json!({
                    "role": "tool",
                    "tool_call_id": r.tool_call_id.clone().unwrap_or_default(),
                    "content": r.text,
                }));
                answered.extend(r.tool_call_id.as_deref());
            }
            for id in calls
                .iter()
                .filter_map(|c| c.get("id").and_then(Value::as_str))
            {
                if !answered.contains(&id) {
                    out.push(json!({"role": "tool", "tool_call_id": id, "content": "not run: the run ended before this call"}));
                }
            }
            // A goal line set among the results is read after them.
            for g in results.iter().filter(|r| r.role == Role::Goal) {
                out.push(json!({"role": "user", "content": g.text}));
            }
            (out, end)
        }
        Role::System | Role::Compacted | Role::Cleared => (Vec::new(), end),
    }
}

/// Where a compaction cuts `messages` (a transcript's stored messages):
/// the index of the first one kept. Groups (a question, an answer with its
/// tool results) are kept whole, newest first, while they fit in `keep`
/// tokens. `messages.len()` keeps nothing.
pub fn cut_point(messages: &[&Message], keep: u64) -> usize {
    let mut cut = messages.len();
    let mut used = 0u64;
    let mut i = messages.len();
    while i > 0 {
        // The group that ends at `i`: back to its user or assistant message.
        let mut start = i - 1;
        while start > 0 && messages[start].role == Role::Tool {
            start -= 1;
        }
        let size: u64 = messages[start..i].iter().map(|m| message_tokens(m)).sum();
        if used + size > keep {
            break;
        }
        used += size;
        cut = start;
        i = start;
    }
    cut
}

/// The older part of a chat as text for the summary call, newest kept when
/// it is longer than `max_chars`.
pub fn render_for_summary(
    summary: Option<&str>,
    messages: &[&Message],
    max_chars: usize,
) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(s) = summary {
        parts.push(format!("[earlier summary]\n{s}"));
    }
    for m in messages {
        let mut line = format!("[{}]\n{}", m.role, m.text);
        for call in m.calls() {
            line.push_str(&format!(
                "\n(tool call {} {})",
                call.name,
                cut_chars(call.arguments, 400)
            ));
        }
        if m.role == Role::Tool {
            line = format!("[tool result]\n{}", cut_chars(&m.text, 2_000));
        }
        parts.push(line);
    }
    let mut text = parts.join("\n\n");
    let len = text.chars().count();
    if len > max_chars {
        let skip = len - max_chars;
        text = format!(
            "[... older part cut ...]\n{}",
            text.chars().skip(skip).collect::<String>()
        );
    }
    text
}

fn cut_chars(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(max).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(id: &str, role: Role, text: &str) -> Message {
        let mut m = Message::draft(role, text);
        m.id = id.into();
        m.created = String::new();
        m
    }

    #[test]
    fn result_room_shares_half_of_what_is_left_under_the_line() {
        let w = Window::new(32_768, 4_096, 80, None);
        assert_eq!(w.line, 26_214);
        // Half of what is left under the line.
        assert_eq!(w.result_chars(1_000, 1), tokens_to_chars(12_607));
        // Plenty left: capped at 64,000 characters a result.
        let big = Window::new(131_072, 4_096, 80, None);
        assert_eq!(big.result_chars(1_000, 1), MAX_RESULT_CHARS);
        // Two calls share the room.
        let one = w.result_chars(20_000, 1);
        let two = w.result_chars(20_000, 2);
        assert!(two <= one / 2 + 1, "{one} {two}");
        // Near the line: still at least 2,000 tokens...
        let small_answer = Window::new(32_768, 512, 80, None);
        assert_eq!(small_answer.result_chars(25_000, 1), tokens_to_chars(2_000));
        // ...but never past the window less twice the answer's room.
        assert_eq!(w.result_chars(23_000, 1), tokens_to_chars(1_576));
        assert_eq!(w.result_chars(32_000, 1), 200);
    }

    #[test]
    fn a_refusal_lowers_the_line() {
        let w = Window::new(32_768, 4_096, 80, Some(10_000));
        assert_eq!(w.line, 8_000);
        assert_eq!(w.target(), 4_000);
        // ...and nothing past it goes without compacting.
        assert_eq!(w.ceiling, 8_000);
        assert_eq!(Window::new(32_768, 4_096, 80, None).ceiling, 28_672);
    }

    #[test]
    fn the_estimate_is_never_under_characters_over_four() {
        let messages = vec![json!({"role": "user", "content": "x".repeat(4_000)})];
        let e = estimate(&messages, None);
        assert!(e > 1_000 + 4, "{e}");
        assert!(e <= 1_200, "{e}");
    }

    #[test]
    fn a_compaction_keeps_the_task_and_the_tail() {
        let mut marker = msg("c", Role::Compacted, "they asked for X");
        marker.keep_from = Some("a2".into());
        let history = vec![
            msg("u1", Role::User, "do X"),
            msg("a1", Role::Assistant, "step one"),
            msg("a2", Role::Assistant, "step two"),
            marker,
            msg("a3", Role::Assistant, "step three"),
        ];
        let t = transcript(&history);
        assert_eq!(t.summary, Some("they asked for X"));
        let ids: Vec<&str> = t.messages.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["u1", "a2", "a3"]);
        let out = request_messages("sys", &t, &|_, _, _| None, &|_| Vec::new());
        assert!(out[0]["content"]
            .as_str()
            .unwrap()
            .contains("they asked for X"));
        assert_eq!(out.len(), 4);
    }

    #[test]
    fn the_kept_part_always_starts_with_a_question() {
        let mut marker = msg("c", Role::Compacted, "summary");
        marker.keep_from = Some("a1".into());
        let history = vec![
            msg("u1", Role::User, "do X"),
            msg("a0", Role::Assistant, "sure"),
            msg("a1", Role::Assistant, "more"),
            msg("u2", Role::User, "and Y"),
            msg("a2", Role::Assistant, "done"),
            marker,
        ];
        let ids: Vec<&str> = transcript(&history)
            .messages
            .iter()
            .map(|m| m.id.as_str())
            .collect();
        assert_eq!(ids, ["u1", "a1", "u2", "a2"]);
    }

    #[test]
    fn a_call_without_a_result_is_answered_not_run() {
        let mut a = msg("a", Role::Assistant, "");
        a.tool_calls = Some(json!([
            {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
        ]));
        let mut r = msg("r", Role::Tool, "ok");
        r.tool_call_id = Some("c1".into());
        let history = vec![
            msg("u", Role::User, "go"),
            a,
            r,
            msg("u2", Role::User, "next"),
        ];
        let out = request_messages("", &transcript(&history), &|_, _, _| None, &|_| Vec::new());
        let roles: Vec<&str> = out.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["user", "assistant", "tool", "tool", "user"]);
        assert_eq!(out[3]["tool_call_id"], "c2");
        assert!(out[1]["content"].is_null());
    }

    #[test]
    fn only_a_call_that_succeeded_is_shortened() {
        let call = |id: &str| json!({"id": id, "type": "function", "function": {"name": "write_file", "arguments": "{\"content\":\"big\"}"}});
        let mut a = msg("a", Role::Assistant, "");
        a.tool_calls = Some(json!([call("c1"), call("c2")]));
        let mut ok = msg("r1", Role::Tool, "wrote");
        ok.tool_call_id = Some("c1".into());
        ok.status = Some(MessageStatus::Done);
        let mut denied = msg("r2", Role::Tool, "declined");
        denied.tool_call_id = Some("c2".into());
        denied.status = Some(MessageStatus::Failed);
        let history = vec![msg("u", Role::User, "go"), a, ok, denied];
        let out = request_messages(
            "",
            &transcript(&history),
            &|_, _, _| Some("STUB".into()),
            &|_| Vec::new(),
        );
        assert_eq!(out[1]["tool_calls"][0]["function"]["arguments"], "STUB");
        assert_eq!(
            out[1]["tool_calls"][1]["function"]["arguments"],
            "{\"content\":\"big\"}"
        );
    }

    #[test]
    fn the_cut_keeps_whole_groups() {
        let mut a = msg("a", Role::Assistant, "");
        a.tool_calls = Some(json!([{"id": "c1", "function": {"name": "x", "arguments": "{}"}}]));
        let mut r = msg("r", Role::Tool, &"y".repeat(400));
        r.tool_call_id = Some("c1".into());
        let u = msg("u", Role::User, &"q".repeat(4_000));
        let all = [&u, &a, &r];
        let cut = cut_point(&all, 200);
        assert_eq!(
            cut, 1,
            "the tool group is kept whole, the big question is not"
        );
        assert_eq!(cut_point(&all, 10), 3);
    }
}
