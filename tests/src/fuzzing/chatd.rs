//! Targets for chatd: the command-line permission rules and the engine's
//! streamed answer read line by line.

use arbitrary::Unstructured;

use super::text_of;
use super::Verdict;

/// A command line under the permission rules: splitting it and deciding on
/// it in every mode never panics, and "Always on this instance" (a rule for
/// exactly that line) never lets another line run by rule.
pub(super) fn bash_rules(u: &mut Unstructured) -> Verdict {
    use chatd::permissions::{decide, split_command, Approval, Call, Decision, Effect, Mode, Rule};
    const PIECES: &[&str] = &[
        "ls",
        "rm",
        "-rf",
        " ",
        "/",
        "~",
        "..",
        "git",
        "push",
        "status",
        "|",
        "||",
        "&&",
        "&",
        ";",
        "\n",
        "$(",
        ")",
        "`",
        "'",
        "\"",
        "\\",
        ">",
        ">>",
        "<",
        "<(",
        "2>&1",
        "FOO=1",
        "#",
        "*",
        "cd",
        "sudo",
        "python3",
        "-c",
        "/workspace",
        "/etc/passwd",
        "$HOME",
        "{",
        "}",
        "(",
    ];
    let command = text_of(u, PIECES, 40);
    let _ = split_command(&command);
    let inside = u.arbitrary().unwrap_or(true);
    let rules = [Rule::exact("bash", &command)];
    let other = format!("{} x", command.trim());
    for mode in [Mode::Ask, Mode::Auto, Mode::Yolo] {
        for line in [&command, &other] {
            let call = Call {
                tool: "bash",
                effect: Effect::Command,
                command: Some(line),
                inside,
                workspace_root: Some("/workspace"),
            };
            let decision = decide(mode, &call, &rules);
            if line == &other && decision == Decision::Run(Approval::Rule) {
                return Err(format!(
                    "a rule for exactly {command:?} let {other:?} run in {mode:?}"
                ));
            }
        }
    }
    Ok(())
}

/// What an engine's streamed answer should give, kept while it is built.
#[derive(Default)]
struct Expected {
    text: String,
    reasoning: String,
    /// Each index's arguments, in the order their pieces came.
    arguments: std::collections::BTreeMap<u64, String>,
    finished: bool,
    /// A `[DONE]` came.
    done: bool,
}

/// An OpenAI-style streamed answer (content and reasoning deltas, tool-call
/// fragments, finish, usage, `[DONE]`, junk lines and JSON, huge numbers,
/// missing fields) cut into chunks anywhere and read by chatd's engine
/// stream: it never panics, its text is the content deltas joined, each
/// tool call's arguments are its pieces joined in order, and the chunks
/// read as the whole stream does.
pub(super) fn engine_stream(u: &mut Unstructured) -> Verdict {
    let mut expected = Expected::default();
    let Ok(stream) = answer_text(u, &mut expected) else {
        return Ok(());
    };
    let bytes = stream.as_bytes();
    let chunks = super::cut(u, bytes);
    let say = |what: String| format!("stream {stream:?}: {what}");
    let whole = read_engine(vec![bytes]);
    let parts = read_engine(chunks.clone());
    if whole.pieces != parts.pieces || whole.ended != parts.ended {
        return Err(say(format!(
            "cut into {} chunks it read {:?} (ended {}), whole {:?} (ended {})",
            chunks.len(),
            parts.pieces,
            parts.ended,
            whole.pieces,
            whole.ended
        )));
    }
    if whole.text != expected.text {
        return Err(say(format!(
            "the text is {:?}, the content deltas joined are {:?}",
            whole.text, expected.text
        )));
    }
    if whole.reasoning != expected.reasoning {
        return Err(say(format!(
            "the reasoning is {:?}, its deltas joined are {:?}",
            whole.reasoning, expected.reasoning
        )));
    }
    if whole.arguments != expected.arguments {
        return Err(say(format!(
            "the tool calls' arguments are {:?}, their pieces joined are {:?}",
            whole.arguments, expected.arguments
        )));
    }
    if (expected.finished || expected.done) && !whole.ended {
        return Err(say("a finished answer was read as cut".into()));
    }
    Ok(())
}

/// What chatd's engine stream read from some chunks.
struct Read {
    pieces: Vec<String>,
    text: String,
    reasoning: String,
    arguments: std::collections::BTreeMap<u64, String>,
    /// The stream ended properly (`Ok(None)`), not cut.
    ended: bool,
}

fn read_engine(chunks: Vec<&[u8]>) -> Read {
    use chatd::engine::{EngineStream, Piece};
    use futures_util::FutureExt;
    let chunks = chunks
        .into_iter()
        .map(bytes::Bytes::copy_from_slice)
        .collect();
    let mut stream = EngineStream::of_chunks(chunks);
    let mut read = Read {
        pieces: Vec::new(),
        text: String::new(),
        reasoning: String::new(),
        arguments: std::collections::BTreeMap::new(),
        ended: false,
    };
    // The chunks are all there: `next` never has to wait, so a `None` from
    // `now_or_never` would be a reader waiting on nothing, read as a cut.
    while let Some(Ok(Some(piece))) = stream.next().now_or_never() {
        read.pieces.push(format!("{piece:?}"));
        match piece {
            Piece::Text(t) => read.text.push_str(&t),
            Piece::Reasoning(r) => read.reasoning.push_str(&r),
            Piece::ToolCall {
                index, arguments, ..
            } => read
                .arguments
                .entry(index)
                .or_default()
                .push_str(&arguments),
            Piece::Usage { .. } | Piece::Finish(_) => {}
        }
    }
    read.ended = matches!(stream.next().now_or_never(), Some(Ok(None)));
    read
}

/// The lines of one answer; `expected` gets what each line should give,
/// up to the `[DONE]` after which chatd reads nothing more.
fn answer_text(u: &mut Unstructured, expected: &mut Expected) -> arbitrary::Result<String> {
    use serde_json::{json, Value};
    const WORDS: &[&str] = &[
        "w", " ", "é", "😀", "\n", "\r", "\\", "\"", "data: ", "[DONE]", "\u{0}", "\t", "{}",
    ];
    const JUNK: &[&str] = &[
        "data: {not json",
        "data: ",
        "data: 123",
        "data: null",
        "data: []",
        "data: {\"choices\":[]}",
        "data: {\"choices\":null}",
        "data: {\"choices\":[{\"delta\":{\"content\":5}}]}",
        "data: {\"choices\":[{\"delta\":{\"content\":null,\"tool_calls\":{}}}]}",
        "data: {\"choices\":[{\"delta\":{\"content\":\"\"}}]}",
        "data: {\"usage\":7}",
        "random words",
        "event: x",
        "id: 9",
        "retry: 1000",
        ": comment",
        ":",
        "",
        "data:[DONE]x",
    ];
    let mut out = String::new();
    let mut done = false;
    for _ in 0..u.int_in_range(0..=30)? {
        let line = match u.int_in_range(0..=9)? {
            0..=2 => {
                let text = text_of(u, WORDS, 8);
                let key = if u.ratio(1, 4)? {
                    "reasoning_content"
                } else {
                    "content"
                };
                if !done {
                    if key == "content" {
                        expected.text.push_str(&text);
                    } else {
                        expected.reasoning.push_str(&text);
                    }
                }
                let chunk = json!({"choices": [{"index": 0, "delta": {key: text}}]});
                format!("data: {chunk}")
            }
            3..=5 => {
                let mut calls = Vec::new();
                for _ in 0..u.int_in_range(1..=3)? {
                    let (index, read_as) = match u.int_in_range(0..=7)? {
                        0 => (json!(u64::MAX), Some(u64::MAX)),
                        1 => (json!(-1), Some(0)),
                        2 => (json!(1.5), Some(0)),
                        3 => (json!("1"), Some(0)),
                        // Past u64: serde_json keeps it as a float, read as 0.
                        4 => (
                            serde_json::from_str::<Value>("18446744073709551616")
                                .unwrap_or(Value::Null),
                            Some(0),
                        ),
                        5 => (Value::Null, None),
                        _ => {
                            let i = u.int_in_range(0..=3)?;
                            (json!(i), Some(i))
                        }
                    };
                    let arguments = text_of(u, &["{\"a\":", "1", "}", "\"x\"", "é", " "], 4);
                    let mut call = json!({"function": {"arguments": arguments}});
                    if read_as.is_some() {
                        call["index"] = index;
                    }
                    if u.ratio(1, 3)? {
                        call["id"] = json!("call_1");
                    }
                    if u.ratio(1, 3)? {
                        call["function"]["name"] = json!("bash");
                    }
                    let missing_arguments = u.ratio(1, 8)?;
                    if missing_arguments {
                        call["function"]
                            .as_object_mut()
                            .map(|f| f.remove("arguments"));
                    }
                    if !done {
                        let piece = if missing_arguments {
                            ""
                        } else {
                            arguments.as_str()
                        };
                        expected
                            .arguments
                            .entry(read_as.unwrap_or(0))
                            .or_default()
                            .push_str(piece);
                    }
                    calls.push(call);
                }
                format!(
                    "data: {}",
                    json!({"choices": [{"index": 0, "delta": {"tool_calls": calls}}]})
                )
            }
            6 => {
                expected.finished |= !done;
                let reason = u.choose(&["stop", "length", "tool_calls", ""])?;
                format!(
                    "data: {}",
                    json!({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
                )
            }
            7 => {
                let huge = u.choose(&["1e400", "18446744073709551616", "-5", "3", "null"])?;
                format!(
                    "data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":{huge},\"completion_tokens\":2}},\"timings\":{{\"predicted_per_second\":{huge}}}}}"
                )
            }
            8 => {
                expected.done = true;
                done = true;
                "data: [DONE]".to_string()
            }
            _ => (*u.choose(JUNK)?).to_string(),
        };
        out.push_str(&line);
        out.push_str(u.choose(&["\n", "\n", "\n\n", "\r\n", "\r\n\r\n"])?);
    }
    Ok(out)
}

/// A `SKILL.md` as a person or a model writes one (a workspace's `.skills/`
/// is the model's to write): reading it never panics, and what it reads is
/// a skill chatd can list: a name a slash command can carry, one line of
/// description within its room. (Where the body starts is gray_matter's
/// reading of the delimiters, which a check here twice got wrong.)
pub(super) fn skill_md(u: &mut Unstructured) -> Verdict {
    use chatd::skills::{check_name, parse, MAX_DESCRIPTION};
    const PIECES: &[&str] = &[
        "---\n",
        "---",
        "\n",
        "name: ",
        "description: ",
        "requires: ",
        "[exec]",
        "[gpu]",
        "review",
        "PDF",
        "pdf",
        "x",
        " ",
        "  ",
        "- ",
        "[",
        "]",
        "{",
        "}",
        ":",
        ": ",
        ",",
        "\"",
        "'",
        "&a ",
        "*a",
        "!!str ",
        "!!binary ",
        "|",
        ">",
        "#",
        "\t",
        "é",
        "\u{0}",
        "\r\n",
        "~",
        "null",
        "true",
        "1e9",
        "<<: ",
        "? ",
    ];
    let text = text_of(u, PIECES, 200);
    let folder = if u.ratio(1, 2).unwrap_or(false) {
        "folder"
    } else {
        "Bad Folder"
    };
    let Ok(skill) = parse(&text, folder) else {
        return Ok(());
    };
    check_name(&skill.name).map_err(|e| format!("read a name no command carries: {e}"))?;
    if skill.description.is_empty()
        || skill.description.contains('\n')
        || skill.description.chars().count() > MAX_DESCRIPTION
    {
        return Err(format!("a description of {:?}", skill.description));
    }
    Ok(())
}
