//! connectord end to end: the real `connectord`, `chatd` and `engine-sim`
//! binaries, real SQLite files, and a fake Telegram Bot API that behaves
//! like the real one (long polling, offsets, its errors). Every wait is on
//! a condition with a bound.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use serde_json::{json, Value};
use tandem_tests::connectord::{connector_chats, Connectord, Rig};
use tandem_tests::fakebot::{FakeBot, Fault};
use tandem_tests::harness::{wait_until, Chatd, Client, Sim};

const QUICK: Duration = Duration::from_secs(30);
const TOKEN: &str = "123456:AAE-the-secret-bot-token-9f8e7d";

struct Box4 {
    rig: Rig,
    bot: FakeBot,
    agent: String,
}

impl Deref for Box4 {
    type Target = Rig;
    fn deref(&self) -> &Rig {
        &self.rig
    }
}

impl DerefMut for Box4 {
    fn deref_mut(&mut self) -> &mut Rig {
        &mut self.rig
    }
}

/// The engine simulator (`sim_args`), chatd forwarding to connectord, a
/// fake Bot API with `TOKEN`, a saved agent, and connectord started.
async fn boxed(sim_args: &[&str], extra: &str) -> anyhow::Result<Box4> {
    let bot = FakeBot::start(TOKEN, "helper_bot").await?;
    let rig = Rig::start(sim_args, &bot.url(), "http://127.0.0.1:9/api", extra).await?;
    let agent = rig.agent().await?;
    Ok(Box4 { rig, bot, agent })
}

/// A Telegram binding through chatd's front door (the forward), with `more`.
async fn bind(b: &Box4, more: Value) -> anyhow::Result<Value> {
    let body = json!({"kind": "telegram", "name": "Helper", "token": TOKEN,
                      "agent_id": b.agent, "allowlist": ["@ann"]});
    b.bind(body, more).await
}

/// The last assistant text of the one chat connectord made.
async fn stored_answer(client: &Client) -> anyhow::Result<String> {
    wait_until("the chat's answer", QUICK, || async {
        let chats = connector_chats(client).await.ok()?;
        let id = chats.first()?["id"].as_str()?.to_string();
        let snap = client.snapshot(&id).await.ok()?;
        let done = snap["runs"]
            .as_array()?
            .iter()
            .all(|r| !matches!(r["status"].as_str(), Some("queued" | "running" | "waiting")));
        let text = snap["messages"]
            .as_array()?
            .iter()
            .rev()
            .find(|m| m["role"] == "assistant")?["text"]
            .as_str()?
            .to_string();
        // Posted trimmed: the engine's answer may end in a space.
        let text = text.trim().to_string();
        (done && !text.is_empty()).then_some(text)
    })
    .await
}

#[tokio::test]
async fn a_stranger_is_logged_not_answered_and_an_allowed_sender_gets_the_agents_answer(
) -> anyhow::Result<()> {
    let b = boxed(&["--tokens-per-second", "0"], "").await?;
    let made = bind(&b, json!({})).await?;
    let id = made["id"].as_str().unwrap_or_default().to_string();
    assert_eq!(made["has_token"], true);
    assert_eq!(made["bot"]["name"], "helper_bot");
    // A stranger first: logged with a count, never answered.
    b.bot.push_private(777, "mallory", "let me in");
    b.bot.push_private(777, "mallory", "please");
    let senders = wait_until("the stranger in the sender log", QUICK, || async {
        let s = b
            .client
            .get(&format!("/connectors/{id}/senders"))
            .await
            .ok()?;
        let list = s.body["senders"].as_array()?.clone();
        (list.first()?["count"] == 2).then_some(list)
    })
    .await?;
    assert_eq!(senders[0]["sender_id"], "777");
    assert_eq!(senders[0]["name"], "mallory");
    // Ann is on the allowlist by @name.
    b.bot.push_private(42, "ann", "What is on today?");
    let answer = stored_answer(&b.client).await?;
    let sent = b
        .bot
        .wait_sent("the answer to ann", QUICK, |s| {
            s.iter().any(|m| m.chat_id == "42" && m.visible == answer)
        })
        .await?;
    assert!(
        sent.iter().all(|m| m.chat_id != "777"),
        "the stranger got nothing: {sent:?}"
    );
    // The chat is the agent's: its model and instructions reached the engine.
    let requests = b.sim.requests().await?;
    let last = requests.last().expect("the engine was asked");
    assert_eq!(last["body"]["model"], "sim-small");
    assert!(
        last["body"]["messages"]
            .to_string()
            .contains("concierge of this box"),
        "the agent's instructions: {}",
        last["body"]["messages"]
    );
    let chats = connector_chats(&b.client).await?;
    assert_eq!(chats.len(), 1, "one chat for ann: {chats:?}");
    assert_eq!(chats[0]["agent_id"], b.agent.as_str());
    // Allowing the stranger lets the next message in and clears the log.
    let allowed = b
        .client
        .post(&format!("/connectors/{id}/senders/777/allow"), json!({}))
        .await?;
    assert_eq!(allowed.status, 200, "{}", allowed.body);
    assert!(allowed.body["allowlist"].to_string().contains("777"));
    b.bot.push_private(777, "mallory", "now?");
    b.bot
        .wait_sent("an answer to the allowed sender", QUICK, |s| {
            s.iter()
                .any(|m| m.chat_id == "777" && m.visible.starts_with("w0"))
        })
        .await?;
    let senders = b.client.get(&format!("/connectors/{id}/senders")).await?;
    assert_eq!(senders.body["senders"], json!([]));
    Ok(())
}

#[tokio::test]
async fn killed_after_reading_and_before_answering_it_answers_exactly_once() -> anyhow::Result<()> {
    // 40 tokens at 20 a second: two seconds to kill connectord in.
    let mut b = boxed(&["--tokens-per-second", "20", "--tokens", "40"], "").await?;
    bind(&b, json!({})).await?;
    b.bot.push_private(42, "ann", "Tell me a long story.");
    // Read, and in chatd: the run works.
    wait_until("the run working in chatd", QUICK, || async {
        let chats = connector_chats(&b.client).await.ok()?;
        (chats.first()?["state"] == "running").then_some(())
    })
    .await?;
    b.cd.kill9();
    b.cd.start().await?;
    let answer = stored_answer(&b.client).await?;
    let sent = b
        .bot
        .wait_sent("the answer after the restart", QUICK, |s| {
            s.iter().any(|m| m.visible == answer)
        })
        .await?;
    // Give a second answer every chance to show before counting.
    let calls_then = b.bot.calls().len();
    b.bot
        .wait_for("two more polls", QUICK, |bot| {
            (bot.get_updates_calls() >= 2 && bot.calls().len() > calls_then).then_some(())
        })
        .await?;
    let answers = b
        .bot
        .messages()
        .into_iter()
        .filter(|m| m.visible == answer)
        .count();
    assert_eq!(answers, 1, "answered exactly once: {sent:?}");
    let chats = connector_chats(&b.client).await?;
    assert_eq!(chats.len(), 1);
    let snap = b
        .client
        .snapshot(chats[0]["id"].as_str().unwrap_or(""))
        .await?;
    let users = snap["messages"]
        .as_array()
        .map(|m| m.iter().filter(|m| m["role"] == "user").count())
        .unwrap_or(0);
    assert_eq!(users, 1, "the message reached chatd once: {snap}");
    Ok(())
}

#[tokio::test]
async fn a_fast_stream_is_edited_at_most_once_each_400_ms() -> anyhow::Result<()> {
    // 50 tokens a second: 50 edits a second asked for, for three seconds.
    let b = boxed(&["--tokens-per-second", "50", "--tokens", "150"], "").await?;
    bind(&b, json!({"reply_mode": "stream"})).await?;
    b.bot.push_private(42, "ann", "Stream it.");
    let answer = stored_answer(&b.client).await?;
    let sent = b
        .bot
        .wait_sent("the whole answer", QUICK, |s| {
            s.iter().any(|m| m.visible == answer)
        })
        .await?;
    let shown: Vec<_> = sent
        .iter()
        .filter(|m| m.method == "sendMessage" || m.method == "editMessageText")
        .collect();
    assert!(
        shown.len() >= 4,
        "the answer grew in place: {} edits",
        shown.len()
    );
    for pair in shown.windows(2) {
        let gap = pair[1].at.duration_since(pair[0].at);
        // 20 ms for loopback jitter between the pacer and the fake's clock.
        assert!(
            gap >= Duration::from_millis(380),
            "two edits {gap:?} apart: {:?} then {:?}",
            pair[0].visible,
            pair[1].visible
        );
    }
    Ok(())
}

#[tokio::test]
async fn the_token_is_never_in_a_route_a_log_an_error_or_the_database() -> anyhow::Result<()> {
    let b = boxed(&["--tokens-per-second", "0"], "").await?;
    let made = bind(&b, json!({})).await?;
    let id = made["id"].as_str().unwrap_or_default().to_string();
    b.bot.push_private(42, "ann", "hello");
    stored_answer(&b.client).await?;
    let mut answers = vec![made.to_string()];
    answers.extend(b.routes(&id).await?);
    answers.push(
        b.client
            .post(&format!("/connectors/{id}/test"), json!({}))
            .await?
            .body
            .to_string(),
    );
    // A refused token: the error says why, not the token.
    b.bot.fail_next("getMe", Fault::Unauthorized401);
    let refused = b
        .client
        .post(
            "/connectors",
            json!({"kind": "telegram", "name": "Other", "token": "999:another-secret-token-value", "agent_id": b.agent}),
        )
        .await?;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert_eq!(refused.body["error"]["field"], "token");
    assert!(
        refused.body.to_string().contains("Unauthorized"),
        "{}",
        refused.body
    );
    answers.push(refused.body.to_string());
    // An update without a token keeps it.
    let renamed = b
        .client
        .call(
            reqwest::Method::PATCH,
            &format!("/connectors/{id}"),
            Some(json!({"name": "Renamed"})),
        )
        .await?;
    assert_eq!(renamed.status, 200, "{}", renamed.body);
    assert_eq!(renamed.body["has_token"], true);
    answers.push(renamed.body.to_string());
    for text in &answers {
        assert!(
            !text.contains(TOKEN) && !text.contains("another-secret"),
            "a route said a token: {text}"
        );
    }
    let mut places = b.logs();
    for entry in std::fs::read_dir(&b.cd.data)? {
        let path = entry?.path();
        let bytes = std::fs::read(&path)?;
        places.push((
            path.display().to_string(),
            String::from_utf8_lossy(&bytes).into_owned(),
        ));
    }
    for (place, text) in &places {
        assert!(!text.contains(TOKEN), "{place} holds the token in clear");
        assert!(
            !text.contains("AAE-the-secret"),
            "{place} holds part of the token"
        );
    }
    let key = b.cd.data.join("connectors.key");
    assert_eq!(tandem_shared::fsmode::mode_of(&key)?, 0o600);
    Ok(())
}

#[tokio::test]
async fn bad_input_names_the_field_and_stores_nothing() -> anyhow::Result<()> {
    let b = boxed(&["--tokens-per-second", "0"], "").await?;
    let base = json!({"kind": "telegram", "name": "Helper", "token": TOKEN, "agent_id": b.agent});
    let cases = [
        (json!({"accept_any": true}), "confirm_accept_any"),
        (json!({"kind": "irc"}), "kind"),
        (json!({"token": "no-colon-in-this"}), "token"),
        (json!({"agent_id": "a_missing"}), "agent_id"),
        (json!({"window_minutes": 0}), "window_minutes"),
        (json!({"reply_mode": "loud"}), "reply_mode"),
        (json!({"colour": "red"}), "colour"),
        (json!({"allowlist": ["two words"]}), "allowlist[0]"),
    ];
    for (change, field) in cases {
        let mut body = base.clone();
        for (k, v) in change.as_object().cloned().unwrap_or_default() {
            body[k] = v;
        }
        let answer = b.client.post("/connectors", body.clone()).await?;
        assert_eq!(answer.status, 400, "{body} → {}", answer.body);
        assert_eq!(
            answer.body["error"]["field"], field,
            "{body} → {}",
            answer.body
        );
    }
    // An agent with no model cannot answer anyone.
    let modelless = b.client.post("/agents", json!({"name": "Vague"})).await?;
    let mut body = base.clone();
    body["agent_id"] = modelless.body["id"].clone();
    let answer = b.client.post("/connectors", body).await?;
    assert_eq!(answer.status, 400);
    assert!(answer.body["error"]["message"]
        .as_str()
        .unwrap_or("")
        .contains("names no model"));
    let list = b.client.get("/connectors").await?;
    assert_eq!(list.body["connectors"], json!([]), "nothing stored");
    // accept_any with the phrase; then at most 10.
    let mut body = base.clone();
    body["accept_any"] = json!(true);
    body["confirm_accept_any"] = json!("accept any message");
    assert_eq!(b.client.post("/connectors", body).await?.status, 201);
    // The same bot twice would have two readers taking each other's updates.
    let twice = b.client.post("/connectors", base.clone()).await?;
    assert_eq!(twice.status, 409, "{}", twice.body);
    assert_eq!(twice.body["error"]["type"], "bot_in_use");
    let other_bot = |n: usize| {
        let token = format!("{}:another-bot-token-{n}", 5000 + n);
        b.bot.add_bot(&token);
        let mut body = base.clone();
        body["token"] = json!(token);
        body
    };
    for n in 1..10 {
        let made = b.client.post("/connectors", other_bot(n)).await?;
        assert_eq!(made.status, 201, "{}", made.body);
    }
    let eleventh = b.client.post("/connectors", other_bot(10)).await?;
    assert_eq!(eleventh.status, 409, "{}", eleventh.body);
    assert_eq!(eleventh.body["error"]["limit"], 10);
    Ok(())
}

#[tokio::test]
async fn a_revoked_token_switches_the_binding_off_with_an_inbox_entry() -> anyhow::Result<()> {
    let b = boxed(&["--tokens-per-second", "0"], "").await?;
    let made = bind(&b, json!({})).await?;
    let id = made["id"].as_str().unwrap_or_default().to_string();
    b.bot.fail_always("getUpdates", Fault::Unauthorized401);
    let off = wait_until("the binding switched off", QUICK, || async {
        let one = b.client.get(&format!("/connectors/{id}")).await.ok()?;
        (one.body["enabled"] == false).then_some(one.body)
    })
    .await?;
    assert_eq!(off["status"]["state"], "off");
    let notes = wait_until("a needs_attention entry", QUICK, || async {
        let n = b.client.get("/notifications").await.ok()?;
        let list = n.body["notifications"].as_array()?.clone();
        (!list.is_empty()).then_some(list)
    })
    .await?;
    assert_eq!(notes[0]["kind"], "needs_attention");
    assert_eq!(notes[0]["source"]["type"], "connector");
    assert!(!notes[0].to_string().contains(TOKEN));
    Ok(())
}

#[tokio::test]
async fn another_reader_for_longer_than_the_grace_switches_it_off() -> anyhow::Result<()> {
    let b = boxed(&["--tokens-per-second", "0"], "conflict_grace_s = 2\n").await?;
    let made = bind(&b, json!({})).await?;
    let id = made["id"].as_str().unwrap_or_default().to_string();
    b.bot.fail_always("getUpdates", Fault::Conflict409);
    let retrying = wait_until("retrying on 409", QUICK, || async {
        let one = b.client.get(&format!("/connectors/{id}")).await.ok()?;
        (one.body["status"]["state"] == "retrying").then_some(one.body)
    })
    .await?;
    assert!(retrying["status"]["reason"]
        .as_str()
        .unwrap_or("")
        .contains("409"));
    let off = wait_until("off after the grace", QUICK, || async {
        let one = b.client.get(&format!("/connectors/{id}")).await.ok()?;
        (one.body["enabled"] == false).then_some(one.body)
    })
    .await?;
    assert!(
        off["status"]["reason"]
            .as_str()
            .unwrap_or("")
            .contains("409"),
        "{off}"
    );
    Ok(())
}

#[tokio::test]
async fn chatd_forwards_the_routes_and_says_when_connectord_is_down() -> anyhow::Result<()> {
    let mut b = boxed(&["--tokens-per-second", "0"], "").await?;
    let kinds = b.client.get("/connectors/kinds").await?;
    assert_eq!(kinds.status, 200);
    assert_eq!(kinds.body["max_bindings"], 10);
    let caps = b.client.get("/capabilities").await?;
    assert_eq!(caps.body["features"]["connectors"], true);
    b.cd.sigterm(Duration::from_secs(10))?;
    let down = b.client.get("/connectors").await?;
    assert_eq!(down.status, 503, "{}", down.body);
    assert_eq!(down.body["error"]["type"], "connectors_unavailable");
    Ok(())
}

#[tokio::test]
async fn in_a_group_only_a_mention_or_a_reply_is_answered_as_a_reply() -> anyhow::Result<()> {
    let b = boxed(&["--tokens-per-second", "0"], "").await?;
    // The group itself is on the allowlist: everyone in it may ask.
    bind(&b, json!({"allowlist": ["-1001"], "conversation": "chat"})).await?;
    b.bot
        .push_group(-1001, 42, "ann", "just chatting among ourselves");
    let asked = b
        .bot
        .push_group(-1001, 43, "bob", "@helper_bot what is the time?");
    let answer = stored_answer(&b.client).await?;
    let sent = b
        .bot
        .wait_sent("the answer in the group", QUICK, |s| {
            s.iter().any(|m| m.visible == answer)
        })
        .await?;
    let first = sent
        .iter()
        .find(|m| m.method == "sendMessage")
        .expect("a message was sent");
    assert_eq!(first.chat_id, "-1001");
    assert!(
        first.reply_to.is_some(),
        "it replies to bob's message (update {asked})"
    );
    // Only the mention reached chatd, without the mention itself.
    let chats = connector_chats(&b.client).await?;
    assert_eq!(chats.len(), 1);
    let snap = b
        .client
        .snapshot(chats[0]["id"].as_str().unwrap_or(""))
        .await?;
    let users: Vec<&str> = snap["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter(|m| m["role"] == "user")
                .filter_map(|m| m["text"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(users, vec!["what is the time?"], "{snap}");
    Ok(())
}

#[tokio::test]
async fn too_long_and_too_fast_get_a_notice_and_a_message_sent_while_it_works_waits(
) -> anyhow::Result<()> {
    let b = boxed(&["--tokens-per-second", "20", "--tokens", "30"], "").await?;
    bind(&b, json!({"reply_mode": "off"})).await?;
    b.bot.push_private(42, "ann", &"x".repeat(8001));
    b.bot
        .wait_sent("the too-long notice", QUICK, |s| {
            s.iter()
                .any(|m| m.chat_id == "42" && m.visible.contains("8001 characters"))
        })
        .await?;
    assert!(
        connector_chats(&b.client).await?.is_empty(),
        "nothing reached chatd"
    );
    // Two messages, the second while the first is answered: one chat, both
    // reach the model, and each message is answered once.
    b.bot.push_private(42, "ann", "first question");
    wait_until("the run working", QUICK, || async {
        let chats = connector_chats(&b.client).await.ok()?;
        (chats.first()?["state"] == "running").then_some(())
    })
    .await?;
    b.bot.push_private(42, "ann", "and a second one");
    wait_until("both answered", QUICK, || async {
        let chats = connector_chats(&b.client).await.ok()?;
        let snap = b
            .client
            .snapshot(chats.first()?["id"].as_str()?)
            .await
            .ok()?;
        let users = snap["messages"]
            .as_array()?
            .iter()
            .filter(|m| m["role"] == "user")
            .count();
        let idle = snap["runs"]
            .as_array()?
            .iter()
            .all(|r| r["status"] == "done");
        let pending = snap["pending"]
            .as_array()
            .map(|p| p.iter().filter(|p| p["state"] == "waiting").count())
            .unwrap_or(0);
        (users == 2 && idle && pending == 0).then_some(())
    })
    .await?;
    let chats = connector_chats(&b.client).await?;
    assert_eq!(chats.len(), 1, "one chat for one sender");
    // 20 a minute: the rest get one notice.
    for i in 0..22 {
        b.bot.push_private(43, "ann", &format!("spam {i}"));
    }
    b.bot
        .wait_sent("the too-fast notice", QUICK, |s| {
            s.iter()
                .any(|m| m.chat_id == "43" && m.visible.contains("20 messages a minute"))
        })
        .await?;
    let notices = b
        .bot
        .messages()
        .into_iter()
        .filter(|m| m.visible.contains("20 messages a minute"))
        .count();
    assert_eq!(notices, 1, "one notice a minute");
    Ok(())
}

#[tokio::test]
async fn with_send_files_the_files_the_turn_wrote_go_to_the_sender() -> anyhow::Result<()> {
    let b = boxed(&["--tokens-per-second", "0"], "").await?;
    bind(&b, json!({"send_files": true})).await?;
    let write = |path: &str, content: &str| json!({"tool_calls": [{"name": "write_file", "arguments": {"path": path, "content": content}}]});
    // A script (not a kind a sender gets) and a report (one that is).
    b.sim
        .faults(json!([
            write("make.sh", "echo"),
            write("report.csv", "a,b\n1,2\n"),
            {}
        ]))
        .await?;
    b.bot.push_private(42, "ann", "Make me the report.");
    let answer = stored_answer(&b.client).await?;
    let sent = b
        .bot
        .wait_sent("the file after the answer", QUICK, |s| {
            s.iter().any(|m| m.method == "sendDocument")
        })
        .await?;
    assert!(
        sent.iter().any(|m| m.visible == answer),
        "the answer went too"
    );
    let doc = sent
        .iter()
        .find(|m| m.method == "sendDocument")
        .expect("a document");
    assert_eq!(doc.file_name.as_deref(), Some("report.csv"));
    assert_eq!(doc.file.as_deref(), Some(&b"a,b\n1,2\n"[..]));
    assert_eq!(doc.chat_id, "42");
    let docs = sent.iter().filter(|m| m.method == "sendDocument").count();
    assert_eq!(docs, 1, "the script stays on the box");
    Ok(())
}

#[tokio::test]
async fn an_answer_whose_connection_is_cut_arrives_once() -> anyhow::Result<()> {
    let b = boxed(&["--tokens-per-second", "0"], "").await?;
    bind(&b, json!({"reply_mode": "off"})).await?;
    b.bot.fail_next("sendMessage", Fault::CutConnection);
    b.bot.push_private(42, "ann", "hello?");
    let answer = stored_answer(&b.client).await?;
    b.bot
        .wait_sent("the answer after the cut", QUICK, |s| {
            s.iter().any(|m| m.visible == answer)
        })
        .await?;
    let cut = b
        .bot
        .calls()
        .iter()
        .filter(|c| c.method == "sendMessage")
        .count();
    assert!(cut >= 2, "the cut call and the one after it: {cut}");
    let answers = b
        .bot
        .messages()
        .into_iter()
        .filter(|m| m.visible == answer)
        .count();
    assert_eq!(answers, 1);
    Ok(())
}

/// A TCP proxy between connectord and chatd that plays the soak's SIGKILL
/// at its worst moment: once armed with connectord's pid, the instant a
/// whole send of a message (`POST …/messages`) has gone through to chatd it
/// SIGKILLs connectord and drops chatd's side of that connection, as the
/// kernel drops the dead process's (chatd sees its client go away while
/// the send is on its way to the database).
struct KillingProxy {
    url: String,
    /// The pid to kill at the next send (0: none).
    armed: Arc<AtomicU32>,
    kills: Arc<AtomicUsize>,
}

impl KillingProxy {
    async fn start(upstream: &str) -> anyhow::Result<KillingProxy> {
        let upstream = upstream.trim_start_matches("http://").to_string();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let (armed, kills) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicUsize::new(0)));
        let (a, k) = (armed.clone(), kills.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (upstream, armed, kills) = (upstream.clone(), a.clone(), k.clone());
                tokio::spawn(async move {
                    let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                        return;
                    };
                    pipe(client, server, armed, kills).await;
                });
            }
        });
        Ok(KillingProxy { url, armed, kills })
    }

    /// SIGKILL `pid` at the next send that reaches chatd.
    fn arm(&self, pid: u32) {
        self.armed.store(pid, Ordering::SeqCst);
    }

    fn kills(&self) -> usize {
        self.kills.load(Ordering::SeqCst)
    }
}

/// Both ways until either side ends or the armed kill is played; then both
/// are dropped.
async fn pipe(
    mut client: tokio::net::TcpStream,
    mut server: tokio::net::TcpStream,
    armed: Arc<AtomicU32>,
    kills: Arc<AtomicUsize>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut seen: Vec<u8> = Vec::new();
    let mut from_client = [0u8; 16 * 1024];
    let mut from_server = [0u8; 16 * 1024];
    loop {
        tokio::select! {
            n = client.read(&mut from_client) => {
                let Ok(n @ 1..) = n else { return };
                if server.write_all(&from_client[..n]).await.is_err() {
                    return;
                }
                seen.extend_from_slice(&from_client[..n]);
                while let Some((len, is_send)) = whole_request(&seen) {
                    seen.drain(..len);
                    let pid = if is_send { armed.swap(0, Ordering::SeqCst) } else { 0 };
                    if pid != 0 {
                        let _ = nix::sys::signal::kill(
                            nix::unistd::Pid::from_raw(pid as i32),
                            nix::sys::signal::Signal::SIGKILL,
                        );
                        kills.fetch_add(1, Ordering::SeqCst);
                        // Its sockets close with it: chatd's side too.
                        return;
                    }
                }
            }
            n = server.read(&mut from_server) => {
                let Ok(n @ 1..) = n else { return };
                if client.write_all(&from_server[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// The length of the first whole request in `bytes` (head and a
/// `content-length` body), and whether it sends a message to a chat.
fn whole_request(bytes: &[u8]) -> Option<(usize, bool)> {
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&bytes[..end]).to_ascii_lowercase();
    let body: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    if bytes.len() < end + body {
        return None;
    }
    let first = head.lines().next().unwrap_or_default();
    let is_send = first.starts_with("post ") && first.contains("/messages ");
    Some((end + body, is_send))
}

#[tokio::test]
async fn killed_while_chatd_stores_its_message_it_is_answered_after_the_restart(
) -> anyhow::Result<()> {
    // connectord reaches chatd through the proxy; the routes (chatd to
    // connectord's socket) do not pass it.
    let bot = FakeBot::start(TOKEN, "helper_bot").await?;
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let dir = tempfile::tempdir()?;
    let socket = tandem_tests::connectord::socket_in(dir.path());
    let chatd = Chatd::start(
        &sim.url(),
        &[("QSE_CONNECTORS_SOCKET", socket.to_string_lossy().as_ref())],
    )
    .await?;
    let proxy = KillingProxy::start(&chatd.url()).await?;
    let mut cd = Connectord::new(dir, &chatd, &bot.url(), "http://127.0.0.1:9/api", "")?;
    let config = std::fs::read_to_string(&cd.config)?;
    let chat_url = format!("chat_url = \"{}\"", chatd.url());
    anyhow::ensure!(config.contains(&chat_url), "{config}");
    std::fs::write(
        &cd.config,
        config.replace(&chat_url, &format!("chat_url = \"{}\"", proxy.url)),
    )?;
    cd.start().await?;
    let client = chatd.client();
    let rig = Rig {
        sim,
        chatd,
        client,
        cd,
    };
    let agent = rig.agent().await?;
    let mut b = Box4 { rig, bot, agent };
    bind(&b, json!({"reply_mode": "off"})).await?;
    // A kill as the send reaches chatd lands after chatd stored the message
    // and its run about half the time (before it, nothing is stored and the
    // restart sends it anew): twelve kills give the worse case every chance.
    const KILLS: usize = 12;
    for i in 0..KILLS {
        let pid = b.cd.pid().context("connectord's pid")?;
        proxy.arm(pid);
        b.bot
            .push_private(42, "ann", &format!("message {i} [sim text=answer{i}]"));
        wait_until(
            "connectord killed as its send reached chatd",
            QUICK,
            || async { (proxy.kills() > i).then_some(()) },
        )
        .await?;
        b.cd.kill9();
        b.cd.start().await?;
        let answer = format!("answer{i}");
        let answered = b
            .bot
            .wait_sent(
                &format!("the answer to message {i}, sent to chatd as connectord was killed"),
                QUICK,
                |s| s.iter().any(|m| m.chat_id == "42" && m.visible == answer),
            )
            .await;
        if let Err(err) = answered {
            let chats = connector_chats(&b.client).await.unwrap_or_default();
            let chat = chats.first().and_then(|c| c["id"].as_str()).unwrap_or("");
            let snap = b.client.snapshot(chat).await.unwrap_or_default();
            anyhow::bail!("{err}; the chat's runs in chatd: {}", snap["runs"]);
        }
    }
    // Each once: a restart sends again with the message's key.
    let chats = connector_chats(&b.client).await?;
    assert_eq!(chats.len(), 1, "{chats:?}");
    let snap = b
        .client
        .snapshot(chats[0]["id"].as_str().unwrap_or(""))
        .await?;
    let users = snap["messages"]
        .as_array()
        .map(|m| m.iter().filter(|m| m["role"] == "user").count())
        .unwrap_or(0);
    assert_eq!(users, KILLS, "each message reached chatd once: {snap}");
    Ok(())
}

#[tokio::test]
async fn an_agent_whose_folder_is_missing_says_so_once_and_answers_once_it_is_back(
) -> anyhow::Result<()> {
    let b = boxed(&["--tokens-per-second", "0"], "").await?;
    let notes = tempfile::tempdir()?;
    let folder = notes.path().join("notes");
    std::fs::create_dir(&folder)?;
    let agent = b
        .client
        .post(
            "/agents",
            json!({"name": "Librarian", "model": "sim-small",
                   "folder": {"path": folder, "mode": "read"}}),
        )
        .await?;
    assert_eq!(agent.status, 201, "{agent:?}");
    let made = bind(&b, json!({"agent_id": agent.body["id"]})).await?;
    let binding = made["id"].as_str().unwrap_or_default().to_string();
    let answered = |chat: &'static str| {
        move |s: &[tandem_tests::fakebot::Sent]| {
            s.iter()
                .any(|m| m.chat_id == chat && m.visible.starts_with("w0"))
        }
    };
    // Sender 43 has a chat already when the folder goes; 42 has none.
    b.bot.push_private(43, "ann", "hello");
    b.bot
        .wait_sent("43's first answer", QUICK, answered("43"))
        .await?;
    let before = connector_chats(&b.client).await?;
    assert_eq!(before.len(), 1, "{before:?}");
    std::fs::remove_dir(&folder)?;
    const SECRET: &str = "what do my private notes say";
    b.bot.push_private(42, "ann", SECRET);
    b.bot.push_private(43, "ann", SECRET);
    let sentence = "This agent can't work right now: the folder it keeps to is missing.";
    let told = |s: &[tandem_tests::fakebot::Sent], chat: &str| {
        s.iter()
            .filter(|m| m.chat_id == chat && m.visible == sentence)
            .count()
    };
    b.bot
        .wait_sent("the folder's sentence to both", QUICK, |s| {
            told(s, "42") == 1 && told(s, "43") == 1
        })
        .await?;
    let (_, shown) = b.cd.api("GET", &format!("/{binding}"), None).await?;
    assert_eq!(shown["enabled"], true, "the binding stays on: {shown}");
    let after = connector_chats(&b.client).await?;
    assert_eq!(after.len(), 1, "no chat made for 42: {after:?}");
    let snap = b
        .client
        .snapshot(after[0]["id"].as_str().unwrap_or_default())
        .await?;
    let users: Vec<&Value> = snap["messages"]
        .as_array()
        .map(|m| m.iter().filter(|m| m["role"] == "user").collect())
        .unwrap_or_default();
    assert_eq!(
        users.len(),
        1,
        "43's second message reached no chat: {snap}"
    );

    // The same folder again: the next messages are answered as any other.
    std::fs::create_dir(&folder)?;
    b.bot.push_private(42, "ann", "and now?");
    b.bot.push_private(43, "ann", "and now?");
    b.bot
        .wait_sent("both answered", QUICK, |s| {
            answered("42")(s)
                && s.iter()
                    .filter(|m| m.chat_id == "43" && m.visible.starts_with("w0"))
                    .count()
                    == 2
        })
        .await?;
    let said: Vec<String> = b.bot.messages().into_iter().map(|m| m.visible).collect();
    assert_eq!(
        said.iter().filter(|t| t.as_str() == sentence).count(),
        2,
        "one sentence each, no more: {said:?}"
    );
    assert!(
        said.iter().all(|t| !t.contains("agent_folder_missing")),
        "tandem's own words, not chatd's: {said:?}"
    );
    let log = b.cd.log();
    assert!(
        !log.contains(SECRET),
        "a log line carried the message's text"
    );
    let chat = before[0]["id"].as_str().unwrap_or_default();
    let refusals: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("the agent's folder is missing"))
        .collect();
    assert_eq!(refusals.len(), 2, "{refusals:?}");
    assert!(
        refusals.iter().all(|l| l.contains(&binding)) && refusals.iter().any(|l| l.contains(chat)),
        "logged with the binding's and the chat's ids: {refusals:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_message_waiting_when_the_agents_folder_goes_gets_the_folders_sentence(
) -> anyhow::Result<()> {
    // 100,000 tokens at 20 a second: a run that works until it is stopped.
    let b = boxed(&["--tokens-per-second", "20", "--tokens", "100000"], "").await?;
    let notes = tempfile::tempdir()?;
    let folder = notes.path().join("notes");
    std::fs::create_dir(&folder)?;
    let agent = b
        .client
        .post(
            "/agents",
            json!({"name": "Librarian", "model": "sim-small",
                   "folder": {"path": folder, "mode": "write"}}),
        )
        .await?;
    assert_eq!(agent.status, 201, "{agent:?}");
    let made = bind(
        &b,
        json!({"agent_id": agent.body["id"], "reply_mode": "off"}),
    )
    .await?;
    let binding = made["id"].as_str().unwrap_or_default().to_string();
    b.bot.push_private(42, "ann", "first question");
    let chat = wait_until("the run working", QUICK, || async {
        let chats = connector_chats(&b.client).await.ok()?;
        let chat = chats.first()?;
        (chat["state"] == "running").then(|| chat["id"].as_str().map(str::to_string))?
    })
    .await?;
    b.bot.push_private(42, "ann", "and a second one");
    wait_until("the second message waiting", QUICK, || async {
        let snap = b.client.snapshot(&chat).await.ok()?;
        let waiting = snap["pending"]
            .as_array()?
            .iter()
            .filter(|p| p["state"] == "waiting")
            .count();
        let working = snap["runs"][0]["status"] == "running";
        (waiting == 1 && working).then_some(())
    })
    .await?;
    // The folder goes and the run ends (stopped here, or failed by chatd
    // first) before it reached the waiting message: connectord asks for a
    // run for it (send-now), which chatd refuses.
    std::fs::remove_dir(&folder)?;
    let stopped = b
        .client
        .post(&format!("/conversations/{chat}/stop"), json!({}))
        .await?;
    assert!(matches!(stopped.status, 200 | 409), "{stopped:?}");
    let sentence = "This agent can't work right now: the folder it keeps to is missing.";
    b.bot
        .wait_sent(
            "the folder's sentence for the waiting message",
            QUICK,
            |s| s.iter().any(|m| m.chat_id == "42" && m.visible == sentence),
        )
        .await?;
    let (_, shown) = b.cd.api("GET", &format!("/{binding}"), None).await?;
    assert_eq!(shown["enabled"], true, "the binding stays on: {shown}");
    // Back again: the next message is answered in the same chat.
    std::fs::create_dir(&folder)?;
    let before = b.bot.sent().len();
    b.bot.push_private(42, "ann", "third [sim tokens=5]");
    b.bot
        .wait_sent("the next answer", QUICK, |s| {
            s.iter()
                .skip(before)
                .any(|m| m.chat_id == "42" && m.visible.starts_with("w0"))
        })
        .await?;
    let said: Vec<String> = b.bot.messages().into_iter().map(|m| m.visible).collect();
    assert_eq!(
        said.iter().filter(|t| t.as_str() == sentence).count(),
        1,
        "{said:?}"
    );
    assert_eq!(connector_chats(&b.client).await?.len(), 1);
    // What the sender was told was not passed on never reached the model.
    let snap = b.client.snapshot(&chat).await?;
    assert!(
        !snap.to_string().contains("and a second one"),
        "the refused message is gone from the chat: {snap}"
    );
    assert!(
        b.cd.log().contains("1 waiting messages were refused"),
        "refused at send-now, not at the send"
    );
    Ok(())
}

#[tokio::test]
async fn a_slash_command_from_telegram_gets_chatds_answer_and_never_reaches_the_model(
) -> anyhow::Result<()> {
    let b = boxed(&["--tokens-per-second", "0"], "").await?;
    bind(&b, json!({})).await?;
    // The answer a page or `tandem chat send '/help'` gets.
    let own = b.client.create_chat().await?;
    let asked = b
        .client
        .post(
            &format!("/conversations/{own}/messages"),
            json!({"text": "/help"}),
        )
        .await?;
    assert_eq!(asked.status, 200, "{asked:?}");
    let help = asked.body["text"].as_str().context("text")?.to_string();
    assert!(help.contains("/goal"), "{help}");
    let before = b.sim.requests().await?.len();

    b.bot.push_private(42, "ann", "/help");
    let sent = b
        .bot
        .wait_sent("the command's answer to ann", QUICK, |s| {
            s.iter()
                .any(|m| m.chat_id == "42" && m.visible.contains("/goal"))
        })
        .await?;
    let answer = sent
        .iter()
        .find(|m| m.chat_id == "42")
        .context("an answer")?;
    assert_eq!(answer.visible.trim(), help.trim(), "the same answer");
    // Nothing went to the model, and a next message is a turn again.
    assert_eq!(b.sim.requests().await?.len(), before, "no model call");
    b.bot.push_private(42, "ann", "What is on today?");
    let text = stored_answer(&b.client).await?;
    b.bot
        .wait_sent("the model's answer after the command", QUICK, |s| {
            s.iter().any(|m| m.chat_id == "42" && m.visible == text)
        })
        .await?;
    Ok(())
}
