//! The table, the details, the request bodies and a sender's path segment.

use super::show::{details, table};
use super::*;

fn telegram() -> Value {
    json!({"id": "cn_1", "kind": "telegram", "name": "Home bot", "agent_id": "ag_1",
        "enabled": true, "allowlist": ["@alice", "42"], "accept_any": false,
        "reply_mode": "progress", "conversation": "window", "window_minutes": 30,
        "send_files": false, "follow_threads": "own", "has_token": true,
        "has_app_token": false, "bot": {"id": "7", "name": "home_bot"},
        "status": {"state": "connected", "since": "not a time"},
        "created": "not a time", "updated": "not a time"})
}

#[test]
fn the_list_is_a_table_with_a_header() {
    let slack = json!({"id": "cn_22", "kind": "slack", "name": "Team", "agent_id": "ag_1",
        "enabled": false, "has_token": true, "has_app_token": false,
        "status": {"state": "disabled"}});
    assert_eq!(
        table(&[telegram(), slack]),
        "ID     KIND      NAME      AGENT  STATE      TOKEN\n\
         cn_1   telegram  Home bot  ag_1   connected  yes\n\
         cn_22  slack     Team      ag_1   disabled   no app token\n"
    );
}

#[test]
fn details_name_every_field_and_never_a_token() {
    let shown = details(&telegram());
    for want in [
        "cn_1  Home bot\n",
        "  bot           @home_bot (7)\n",
        "  state         connected since not a time\n",
        "  token         set (sealed)\n",
        "  allowlist     @alice, 42\n",
        "  conversation  window (a new chat after 30 minutes of quiet)\n",
    ] {
        assert!(shown.contains(want), "{want:?} missing from {shown}");
    }
    assert!(!shown.contains("app token"), "{shown}");
    assert!(
        !shown.contains("follow"),
        "telegram has no threads: {shown}"
    );
}

#[test]
fn the_bodies_hold_only_what_was_given_and_the_tokens_last() {
    let body = with_tokens(
        Map::from_iter([("name".to_string(), json!("n"))]),
        Some(&Secret::new("123:ABC".into())),
        None,
    );
    assert_eq!(body, json!({"name": "n", "token": "123:ABC"}));
    let mut body = Map::new();
    Modes {
        reply_mode: Some("stream".into()),
        conversation: None,
        window_minutes: Some(5),
        follow_threads: None,
        yes: false,
    }
    .fill(&mut body);
    assert_eq!(
        Value::Object(body),
        json!({"reply_mode": "stream", "window_minutes": 5})
    );
}

#[test]
fn a_sender_is_one_path_segment() {
    assert_eq!(path_segment("@alice"), "@alice");
    assert_eq!(path_segment("-1001234"), "-1001234");
    assert_eq!(path_segment("a/b c"), "a%2Fb%20c");
}
