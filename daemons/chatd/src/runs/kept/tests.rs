//! The kept path follows the log as the store would read it, and what it
//! renders and the body made from it are what rendering the whole
//! transcript afresh gives.

use serde_json::{json, Value};

use super::super::body::{request_body, RequestBody};
use super::*;
use crate::settings::Settings;
use crate::words::{MessageStatus, Role};

fn message(id: &str, parent: Option<&str>, role: Role, text: &str) -> Message {
    let mut m = Message::draft(role, text);
    m.id = id.to_string();
    m.parent_id = parent.map(str::to_string);
    m
}

fn answer_with_calls(id: &str, parent: &str, calls: &[(&str, &str)]) -> Message {
    let mut m = message(id, Some(parent), Role::Assistant, "");
    m.tool_calls = Some(Value::Array(
        calls
            .iter()
            .map(|(cid, args)| {
                json!({"id": cid, "type": "function",
                       "function": {"name": "write_file", "arguments": args}})
            })
            .collect(),
    ));
    m.status = Some(MessageStatus::Done);
    m
}

fn result(id: &str, parent: &str, call: &str, text: &str) -> Message {
    let mut m = message(id, Some(parent), Role::Tool, text);
    m.tool_call_id = Some(call.to_string());
    m.status = Some(MessageStatus::Done);
    m
}

fn created(m: &Message) -> (EventKind, String) {
    (EventKind::MessageCreated, json!({"message": m}).to_string())
}

fn stub(_: &str, _: &str, args: &str) -> Option<String> {
    (args.len() > 10).then(|| "{\"content\":\"[written]\"}".to_string())
}

fn no_images(_: &Message) -> Vec<Value> {
    Vec::new()
}

/// What rendering the kept path's whole transcript afresh gives.
fn afresh(kept: &KeptPath, system: &str) -> Rendered {
    let transcript = context::transcript(kept.path());
    Rendered::whole(system, &transcript, &stub, &no_images)
}

fn loaded(messages: Vec<Message>) -> KeptPath {
    let mut kept = KeptPath::new("c");
    kept.replace_all(messages, 1);
    kept.loaded = true;
    kept
}

#[test]
fn a_step_appended_renders_as_the_whole_transcript_would() {
    let mut kept = loaded(vec![message("u1", None, Role::User, "write two files")]);
    let first = kept.render(1, "sys", &stub, &no_images);
    assert_eq!(first.json, afresh(&kept, "sys").json);

    // The answer arrives with two calls; one result is in, one not yet.
    let a = answer_with_calls(
        "a1",
        "u1",
        &[
            ("c1", "{\"path\":\"x\",\"content\":\"long text here\"}"),
            ("c2", "{}"),
        ],
    );
    let r1 = result("t1", "a1", "c1", "wrote x");
    assert!(kept.apply(&[created(&a), created(&r1)]));
    let n = kept.path().len();
    let second = kept.render(n, "sys", &stub, &no_images);
    assert_eq!(second.json, afresh(&kept, "sys").json);
    assert!(second.json.contains("not run"), "{}", second.json);

    // The second result comes in: the answer's group is rendered again.
    let r2 = result("t2", "t1", "c2", "done");
    assert!(kept.apply(&[created(&r2)]));
    let third = kept.render(kept.path().len(), "sys", &stub, &no_images);
    let whole = afresh(&kept, "sys");
    assert_eq!(third.json, whole.json);
    assert_eq!((third.chars, third.count), (whole.chars, whole.count));
    assert!(!third.json.contains("not run"), "{}", third.json);
}

#[test]
fn an_updated_message_and_deltas_are_rendered_as_they_are_now() {
    let mut kept = loaded(vec![
        message("u1", None, Role::User, "hi"),
        message("a1", Some("u1"), Role::Assistant, "Hel"),
    ]);
    let before = kept.render(2, "", &stub, &no_images);
    assert!(before.json.contains("Hel"));
    let delta = json!({"run_id": "r", "message_id": "a1", "text": "lo"}).to_string();
    assert!(kept.apply(&[(EventKind::TextDelta, delta)]));
    let after = kept.render(2, "", &stub, &no_images);
    assert!(after.json.contains("Hello"), "{}", after.json);
    assert_eq!(after.json, afresh(&kept, "").json);

    let mut changed = message("a1", Some("u1"), Role::Assistant, "Hello there");
    changed.status = Some(MessageStatus::Done);
    let updated = json!({"message": changed}).to_string();
    assert!(kept.apply(&[(EventKind::MessageUpdated, updated)]));
    assert_eq!(kept.path()[1].text, "Hello there");
    assert_eq!(
        kept.render(2, "", &stub, &no_images).json,
        afresh(&kept, "").json
    );
}

#[test]
fn what_the_events_cannot_say_makes_the_path_read_whole() {
    let mut kept = loaded(vec![message("u1", None, Role::User, "hi")]);
    // A message off the path's end (a branch), a compaction, a clear.
    let branch = message("u2", Some("elsewhere"), Role::User, "other");
    assert!(!kept.apply(&[created(&branch)]));
    assert!(!kept.apply(&[(EventKind::Compacted, "{}".to_string())]));
    assert!(!kept.apply(&[(EventKind::Cleared, "{}".to_string())]));
    // A message moved under another parent.
    let moved = message("u1", Some("summary"), Role::User, "hi");
    let updated = json!({"message": moved}).to_string();
    assert!(!kept.apply(&[(EventKind::MessageUpdated, updated)]));
    // Events that do not touch messages change nothing.
    let mut kept = loaded(vec![message("u1", None, Role::User, "hi")]);
    assert!(kept.apply(&[(EventKind::RunStarted, "{}".to_string())]));
    assert_eq!(kept.path().len(), 1);
}

#[test]
fn the_spliced_body_is_the_whole_body_and_its_estimate() {
    let kept = loaded(vec![
        message("u1", None, Role::User, "write \"quoted\" text\nplease"),
        answer_with_calls(
            "a1",
            "u1",
            &[("c1", "{\"path\":\"x\",\"content\":\"long text here\"}")],
        ),
        result("t1", "a1", "c1", "wrote x"),
    ]);
    let tools = json!([{"type": "function", "function": {"name": "read_file"}}]);
    let settings: Settings = serde_json::from_value(json!({"temperature": 0.5})).expect("settings");
    for (tools, prefill) in [(&tools, ""), (&json!([]), "So far")] {
        let body = RequestBody::new("m", afresh(&kept, "sys"), tools, prefill, &settings);
        let parsed: Value = serde_json::from_slice(&body.bytes).expect("the body is JSON");
        let transcript = context::transcript(kept.path());
        let messages = context::request_messages("sys", &transcript, &stub, &no_images);
        let mut whole = request_body("m", messages, tools, prefill);
        settings.apply(&mut whole);
        assert_eq!(parsed, whole);
        let all = whole["messages"].as_array().expect("messages");
        assert_eq!(body.estimate, context::estimate(all, whole.get("tools")));
    }
}
