//! connectord end to end on Slack: the real `connectord`, `chatd` and
//! `engine-sim` binaries, real SQLite files, and a fake Slack (Web API and
//! Socket Mode, `tandem_tests::fakeslack`) that behaves like the real one
//! (envelopes sent again until acked, `disconnect`, a mention arriving as
//! both `message` and `app_mention`). Every wait is on a condition with a
//! bound.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use tandem_tests::connectord::{connector_chats, Connectord, Rig};
use tandem_tests::fakeslack::{self, FakeSlack, Pushed, APP_TOKEN, BOT_ID, BOT_NAME, BOT_TOKEN};
use tandem_tests::harness::{wait_until, Client};

const QUICK: Duration = Duration::from_secs(30);
const SLOW: Duration = Duration::from_secs(90);
/// Nothing listens there: the Telegram side is never used.
const NO_TELEGRAM: &str = "http://127.0.0.1:9";
const ANN: &str = "U0ANN";
const BOB: &str = "U0BOB";
const MALLORY: &str = "U0MALLORY";
const CHANNEL: &str = "C0GENERAL";
const WORKING: &str = "Working…";

struct Box5 {
    rig: Rig,
    slack: FakeSlack,
    agent: String,
}

impl Deref for Box5 {
    type Target = Rig;
    fn deref(&self) -> &Rig {
        &self.rig
    }
}

impl DerefMut for Box5 {
    fn deref_mut(&mut self) -> &mut Rig {
        &mut self.rig
    }
}

/// The engine simulator (`sim_args`), chatd forwarding to connectord, a
/// fake Slack, a saved agent, and connectord started.
async fn boxed(sim_args: &[&str], extra: &str) -> anyhow::Result<Box5> {
    let slack = FakeSlack::start().await?;
    let rig = Rig::start(sim_args, NO_TELEGRAM, &slack.api_base(), extra).await?;
    let agent = rig.agent().await?;
    Ok(Box5 { rig, slack, agent })
}

/// A Slack binding through chatd's front door (the forward), with `more`;
/// waits until its Socket Mode link is up.
async fn bind(b: &Box5, more: Value) -> anyhow::Result<Value> {
    let body = json!({"kind": "slack", "name": "Helper", "token": BOT_TOKEN,
                      "app_token": APP_TOKEN, "agent_id": b.agent,
                      "allowlist": [ANN, BOB]});
    let made = b.bind(body, more).await?;
    let id = made["id"].as_str().unwrap_or_default().to_string();
    wait_until("the Socket Mode link connected", QUICK, || async {
        let one = b.client.get(&format!("/connectors/{id}")).await.ok()?;
        (one.body["status"]["state"] == "connected").then_some(())
    })
    .await?;
    Ok(made)
}

/// A chat as a person reads it in chatd.
#[derive(Debug)]
struct Settled {
    /// The user messages' texts, in order.
    users: Vec<String>,
    /// The last answer, trimmed (connectord posts it trimmed).
    answer: String,
}

/// Waits until `who`'s chat (its title names the sender) holds at least
/// `users` user messages, no run works, and an answer follows the last
/// user message.
async fn settled(client: &Client, who: &str, users: usize) -> anyhow::Result<Settled> {
    wait_until(
        &format!("{who}'s chat answered {users} time(s)"),
        SLOW,
        || async {
            let chats = connector_chats(client).await.ok()?;
            let chat = chats
                .iter()
                .find(|c| c["title"].as_str().is_some_and(|t| t.ends_with(who)))?;
            let id = chat["id"].as_str()?.to_string();
            let snap = client.snapshot(&id).await.ok()?;
            let working = snap["runs"]
                .as_array()?
                .iter()
                .any(|r| matches!(r["status"].as_str(), Some("queued" | "running" | "waiting")));
            let messages = snap["messages"].as_array()?;
            let texts: Vec<String> = messages
                .iter()
                .filter(|m| m["role"] == "user")
                .map(|m| m["text"].as_str().unwrap_or_default().to_string())
                .collect();
            let last_user = messages.iter().rposition(|m| m["role"] == "user")?;
            let answer = messages[last_user..].iter().rev().find(|m| {
                m["role"] == "assistant" && !m["text"].as_str().unwrap_or("").trim().is_empty()
            })?["text"]
                .as_str()?
                .trim()
                .to_string();
            (!working && texts.len() >= users).then_some(Settled {
                users: texts,
                answer,
            })
        },
    )
    .await
}

/// One message the bot put in a channel, as the channel shows it now.
#[derive(Debug, Clone)]
struct Shown {
    ts: String,
    thread_ts: Option<String>,
    text: String,
}

/// The bot's messages in `channel`, in the order posted, each with its
/// current text (after every chat.update).
fn shown(slack: &FakeSlack, channel: &str) -> Vec<Shown> {
    let mut out: Vec<Shown> = Vec::new();
    for p in slack.posted().into_iter().filter(|p| p.channel == channel) {
        match out.iter_mut().find(|s| s.ts == p.ts) {
            Some(s) => s.text = p.text,
            None => out.push(Shown {
                ts: p.ts,
                thread_ts: p.thread_ts,
                text: p.text,
            }),
        }
    }
    out
}

/// Waits until `channel` shows `text` in a bot message; the channel then.
async fn wait_shown(slack: &FakeSlack, channel: &str, text: &str) -> anyhow::Result<Vec<Shown>> {
    wait_until(&format!("{text:?} shown in {channel}"), QUICK, || async {
        let now = shown(slack, channel);
        now.iter().any(|s| s.text == text).then_some(now)
    })
    .await
}

/// Waits until connectord has no chat worker left: every answer posted
/// and what follows it (the thread followed) stored.
async fn idle(cd: &Connectord) -> anyhow::Result<()> {
    wait_until("connectord idle", QUICK, || async {
        let (status, health) = cd.call("GET", "/health", None).await.ok()?;
        (status == 200 && health["working"] == 0).then_some(())
    })
    .await
}

async fn acked(slack: &FakeSlack, pushed: &Pushed) -> anyhow::Result<()> {
    anyhow::ensure!(
        slack.wait_acked(&pushed.envelope_id, QUICK).await,
        "envelope {} not acked",
        pushed.envelope_id
    );
    if let Some(twin) = &pushed.twin_envelope_id {
        anyhow::ensure!(
            slack.wait_acked(twin, QUICK).await,
            "twin envelope {twin} not acked"
        );
    }
    Ok(())
}

/// Bob's DM, answered: everything read before it was taken through.
async fn marker(b: &Box5) -> anyhow::Result<()> {
    let dm = b.slack.push_dm(BOB, "Just checking in.");
    acked(&b.slack, &dm).await?;
    let bob = settled(&b.client, BOB, 1).await?;
    wait_shown(&b.slack, &dm.channel, &bob.answer).await?;
    idle(&b.cd).await
}

#[tokio::test]
async fn a_dm_from_an_allowed_user_is_answered_in_place_of_working() -> anyhow::Result<()> {
    // 24 tokens at 20 a second: long enough for "Working…" to show.
    let b = boxed(&["--tokens-per-second", "20", "--tokens", "24"], "").await?;
    let made = bind(&b, json!({})).await?;
    assert_eq!(made["has_token"], true);
    assert_eq!(made["has_app_token"], true);
    assert_eq!(made["bot"]["id"], BOT_ID);
    assert_eq!(made["bot"]["name"], BOT_NAME);
    let dm = b.slack.push_dm(ANN, "What is on today?");
    acked(&b.slack, &dm).await?;
    let ann = settled(&b.client, ANN, 1).await?;
    assert_eq!(ann.users, ["What is on today?"]);
    let channel = wait_shown(&b.slack, &dm.channel, &ann.answer).await?;
    assert_eq!(
        channel.len(),
        1,
        "one message, Working… replaced by the answer: {channel:?}"
    );
    let calls: Vec<_> = b
        .slack
        .posted()
        .into_iter()
        .filter(|p| p.channel == dm.channel)
        .collect();
    assert_eq!(calls[0].method, "chat.postMessage", "{calls:?}");
    assert_eq!(calls[0].text, WORKING, "{calls:?}");
    let last = calls.last().expect("posts");
    assert_eq!(
        last.method, "chat.update",
        "the answer replaced Working…: {calls:?}"
    );
    assert_eq!(last.ts, calls[0].ts);
    assert_eq!(last.text, ann.answer);
    // A DM is answered in the DM, not in a thread under the question.
    assert_eq!(calls[0].thread_ts, None, "{calls:?}");
    assert!(
        fakeslack::wait_until(QUICK, || b.slack.unacked() == 0).await,
        "every envelope acked: {} left",
        b.slack.unacked()
    );
    // The chat is the agent's: its model reached the engine.
    let requests = b.sim.requests().await?;
    assert_eq!(
        requests.last().expect("the engine was asked")["body"]["model"],
        "sim-small"
    );
    Ok(())
}

#[tokio::test]
async fn a_mention_in_a_channel_is_answered_once_in_its_thread_without_the_mention(
) -> anyhow::Result<()> {
    let b = boxed(&["--tokens-per-second", "20", "--tokens", "24"], "").await?;
    bind(&b, json!({})).await?;
    let mention = b
        .slack
        .push_mention(CHANNEL, ANN, "what is on today?", None);
    acked(&b.slack, &mention).await?;
    let ann = settled(&b.client, ANN, 1).await?;
    assert_eq!(ann.users, ["what is on today?"], "the mention removed");
    let channel = wait_shown(&b.slack, CHANNEL, &ann.answer).await?;
    assert_eq!(channel.len(), 1, "one answer: {channel:?}");
    assert_eq!(
        channel[0].thread_ts.as_deref(),
        Some(mention.ts.as_str()),
        "answered in the mention's thread: {channel:?}"
    );
    for p in b
        .slack
        .posted()
        .iter()
        .filter(|p| p.method == "chat.postMessage")
    {
        assert_eq!(p.thread_ts.as_deref(), Some(mention.ts.as_str()), "{p:?}");
    }
    // Give a second copy (the `message` twin) every chance to show.
    marker(&b).await?;
    let channel = shown(&b.slack, CHANNEL);
    assert_eq!(
        channel.len(),
        1,
        "still one answer in the channel: {channel:?}"
    );
    let ann = settled(&b.client, ANN, 1).await?;
    assert_eq!(
        ann.users.len(),
        1,
        "one user message in chatd: {:?}",
        ann.users
    );
    let chats = connector_chats(&b.client).await?;
    assert_eq!(chats.len(), 2, "Ann's chat and Bob's: {chats:?}");
    Ok(())
}

#[tokio::test]
async fn the_bot_follows_its_own_thread_without_a_mention() -> anyhow::Result<()> {
    let b = boxed(&["--tokens-per-second", "0"], "").await?;
    let made = bind(&b, json!({})).await?;
    assert_eq!(made["follow_threads"], "own");
    let mention = b
        .slack
        .push_mention(CHANNEL, ANN, "what is on today?", None);
    let first = settled(&b.client, ANN, 1).await?;
    wait_shown(&b.slack, CHANNEL, &first.answer).await?;
    idle(&b.cd).await?;
    // No mention: the thread is the bot's.
    let reply = b
        .slack
        .push_thread_message(CHANNEL, ANN, "and after that?", &mention.ts);
    acked(&b.slack, &reply).await?;
    let second = settled(&b.client, ANN, 2).await?;
    assert_eq!(second.users, ["what is on today?", "and after that?"]);
    let thread = wait_until("the second answer in the thread", QUICK, || async {
        let now = shown(&b.slack, CHANNEL);
        (now.len() >= 2 && now[1].text == second.answer).then_some(now)
    })
    .await?;
    assert_eq!(thread.len(), 2, "{thread:?}");
    for s in &thread {
        assert_eq!(
            s.thread_ts.as_deref(),
            Some(mention.ts.as_str()),
            "{thread:?}"
        );
    }
    idle(&b.cd).await?;
    // A thread the bot never answered in is someone else's.
    let other = b
        .slack
        .push_thread_message(CHANNEL, ANN, "not for the bot", "1699999999.000001");
    acked(&b.slack, &other).await?;
    marker(&b).await?;
    let ann = settled(&b.client, ANN, 2).await?;
    assert_eq!(
        ann.users.len(),
        2,
        "the other thread did not reach chatd: {:?}",
        ann.users
    );
    assert_eq!(shown(&b.slack, CHANNEL).len(), 2);
    Ok(())
}

#[tokio::test]
async fn with_follow_threads_never_a_thread_needs_a_mention() -> anyhow::Result<()> {
    let b = boxed(&["--tokens-per-second", "0"], "").await?;
    let made = bind(&b, json!({"follow_threads": "never"})).await?;
    assert_eq!(made["follow_threads"], "never");
    let mention = b
        .slack
        .push_mention(CHANNEL, ANN, "what is on today?", None);
    let first = settled(&b.client, ANN, 1).await?;
    wait_shown(&b.slack, CHANNEL, &first.answer).await?;
    idle(&b.cd).await?;
    let reply = b
        .slack
        .push_thread_message(CHANNEL, ANN, "and after that?", &mention.ts);
    acked(&b.slack, &reply).await?;
    marker(&b).await?;
    let ann = settled(&b.client, ANN, 1).await?;
    assert_eq!(
        ann.users,
        ["what is on today?"],
        "the reply without a mention was not taken"
    );
    let channel = shown(&b.slack, CHANNEL);
    assert_eq!(
        channel.len(),
        1,
        "no second answer in the thread: {channel:?}"
    );
    // A mention in the thread is still answered there.
    let again = b
        .slack
        .push_mention(CHANNEL, ANN, "and after that?", Some(&mention.ts));
    acked(&b.slack, &again).await?;
    let ann = settled(&b.client, ANN, 2).await?;
    assert_eq!(ann.users, ["what is on today?", "and after that?"]);
    let thread = wait_until("the answer to the mention in the thread", QUICK, || async {
        let now = shown(&b.slack, CHANNEL);
        (now.len() >= 2 && now[1].text == ann.answer).then_some(now)
    })
    .await?;
    assert_eq!(
        thread[1].thread_ts.as_deref(),
        Some(mention.ts.as_str()),
        "{thread:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_disconnect_reconnects_and_every_message_is_answered_exactly_once() -> anyhow::Result<()>
{
    let b = boxed(&["--tokens-per-second", "0"], "").await?;
    let senders: Vec<String> = (1..=9).map(|i| format!("U0P{i}")).collect();
    let made = bind(&b, json!({"allowlist": senders})).await?;
    let id = made["id"].as_str().unwrap_or_default().to_string();
    let mut pushed: Vec<(String, Pushed)> = Vec::new();
    let push = |who: &str| b.slack.push_dm(who, &format!("Hello from {who}."));
    for who in &senders[..3] {
        pushed.push((who.clone(), push(who)));
    }
    acked(&b.slack, &pushed[0].1).await?;
    b.slack.disconnect("refresh_requested");
    // While the old connection drains and the new one opens.
    for who in &senders[3..6] {
        pushed.push((who.clone(), push(who)));
    }
    assert!(
        b.slack.wait_connections(2, QUICK).await,
        "reconnected: {} connections",
        b.slack.connections()
    );
    for who in &senders[6..] {
        pushed.push((who.clone(), push(who)));
    }
    for (who, p) in &pushed {
        acked(&b.slack, p).await?;
        let chat = settled(&b.client, who, 1).await?;
        assert_eq!(chat.users, [format!("Hello from {who}.")], "{who}'s chat");
        wait_shown(&b.slack, &p.channel, &chat.answer).await?;
    }
    idle(&b.cd).await?;
    assert!(b.slack.connections() >= 2);
    // The messages really were on both sides of the disconnect.
    let ours: Vec<_> = b
        .slack
        .deliveries()
        .into_iter()
        .filter(|d| pushed.iter().any(|(_, p)| p.envelope_id == d.envelope_id))
        .collect();
    assert!(ours.iter().any(|d| d.connection == 1), "{ours:?}");
    assert!(ours.iter().any(|d| d.connection > 1), "{ours:?}");
    assert!(
        b.slack.opens() >= 2,
        "apps.connections.open again: {}",
        b.slack.opens()
    );
    // Nothing twice: one chat and one message a sender, one answer each.
    let chats = connector_chats(&b.client).await?;
    assert_eq!(chats.len(), 9, "one chat a sender: {chats:?}");
    let mut seen: HashMap<String, usize> = HashMap::new();
    for chat in &chats {
        let snap = b.client.snapshot(chat["id"].as_str().unwrap_or("")).await?;
        let users = snap["messages"]
            .as_array()
            .map(|m| m.iter().filter(|m| m["role"] == "user").count())
            .unwrap_or(0);
        assert_eq!(users, 1, "one user message in {}: {snap}", chat["title"]);
        *seen
            .entry(chat["title"].as_str().unwrap_or("").to_string())
            .or_default() += 1;
    }
    assert_eq!(seen.len(), 9, "{seen:?}");
    for (who, p) in &pushed {
        let channel = shown(&b.slack, &p.channel);
        assert_eq!(channel.len(), 1, "{who} got one answer: {channel:?}");
    }
    assert!(
        fakeslack::wait_until(QUICK, || b.slack.unacked() == 0).await,
        "every envelope acked: {} left",
        b.slack.unacked()
    );
    let one = b.client.get(&format!("/connectors/{id}")).await?;
    assert_eq!(one.body["status"]["state"], "connected", "{}", one.body);
    Ok(())
}

#[tokio::test]
async fn a_stranger_is_in_the_sender_log_and_gets_nothing() -> anyhow::Result<()> {
    let b = boxed(&["--tokens-per-second", "0"], "").await?;
    let made = bind(&b, json!({})).await?;
    let id = made["id"].as_str().unwrap_or_default().to_string();
    let first = b.slack.push_dm(MALLORY, "let me in");
    let second = b.slack.push_dm(MALLORY, "please");
    acked(&b.slack, &first).await?;
    acked(&b.slack, &second).await?;
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
    assert_eq!(senders.len(), 1, "{senders:?}");
    assert_eq!(senders[0]["sender_id"], MALLORY);
    assert_eq!(senders[0]["chat_id"], first.channel.as_str());
    // Bob is answered: anything for the stranger would have gone by now.
    marker(&b).await?;
    assert!(
        shown(&b.slack, &first.channel).is_empty(),
        "the stranger got: {:?}",
        shown(&b.slack, &first.channel)
    );
    let chats = connector_chats(&b.client).await?;
    assert_eq!(chats.len(), 1, "only Bob's chat: {chats:?}");
    assert!(!chats[0]["title"].as_str().unwrap_or("").contains(MALLORY));
    Ok(())
}

/// Every file under `dir`, read as text.
fn files_under(dir: &Path, out: &mut Vec<(String, String)>) -> anyhow::Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            files_under(&path, out)?;
        } else if path.is_file() {
            let bytes = std::fs::read(&path)?;
            out.push((
                path.display().to_string(),
                String::from_utf8_lossy(&bytes).into_owned(),
            ));
        }
    }
    Ok(())
}

#[tokio::test]
async fn the_tokens_are_never_in_a_route_a_log_or_the_data_folder() -> anyhow::Result<()> {
    let b = boxed(&["--tokens-per-second", "0"], "").await?;
    let made = bind(&b, json!({})).await?;
    let id = made["id"].as_str().unwrap_or_default().to_string();
    let dm = b.slack.push_dm(ANN, "hello");
    let ann = settled(&b.client, ANN, 1).await?;
    wait_shown(&b.slack, &dm.channel, &ann.answer).await?;
    let mut answers = vec![made.to_string()];
    answers.extend(b.routes(&id).await?);
    let tested = b
        .client
        .post(&format!("/connectors/{id}/test"), json!({}))
        .await?;
    assert_eq!(tested.body["ok"], true, "{}", tested.body);
    answers.push(tested.body.to_string());
    answers.push(b.cd.call("GET", "/health", None).await?.1.to_string());
    // Refused tokens: the error names the field and says why, not the token.
    let other_bot = "xoxb-another-secret-bot-token-555";
    let other_app = "xapp-1-another-secret-app-token-666";
    let refused = b
        .client
        .post(
            "/connectors",
            json!({"kind": "slack", "name": "Other", "token": other_bot,
                   "app_token": APP_TOKEN, "agent_id": b.agent}),
        )
        .await?;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert_eq!(refused.body["error"]["field"], "token", "{}", refused.body);
    assert!(
        refused.body.to_string().contains("invalid_auth"),
        "{}",
        refused.body
    );
    answers.push(refused.body.to_string());
    let refused = b
        .client
        .post(
            "/connectors",
            json!({"kind": "slack", "name": "Other", "token": BOT_TOKEN,
                   "app_token": other_app, "agent_id": b.agent}),
        )
        .await?;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert_eq!(
        refused.body["error"]["field"], "app_token",
        "{}",
        refused.body
    );
    answers.push(refused.body.to_string());
    // An update without tokens keeps both.
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
    assert_eq!(renamed.body["has_app_token"], true);
    answers.push(renamed.body.to_string());
    let list = b.client.get("/connectors").await?;
    assert_eq!(
        list.body["connectors"].as_array().map(Vec::len),
        Some(1),
        "nothing stored on a refusal"
    );
    answers.push(list.body.to_string());
    // The renamed binding still answers (its tokens kept and opened).
    bind_connected(&b, &id).await?;
    let dm = b.slack.push_dm(ANN, "still there?");
    let ann = settled(&b.client, ANN, 2).await?;
    wait_until("the answer after the rename", QUICK, || async {
        let now = shown(&b.slack, &dm.channel);
        (now.len() >= 2 && now[1].text == ann.answer).then_some(())
    })
    .await?;
    let secrets = [
        BOT_TOKEN,
        APP_TOKEN,
        "fake-bot-token",
        "fake-app-token",
        other_bot,
        other_app,
        "another-secret",
    ];
    for text in &answers {
        for secret in secrets {
            assert!(!text.contains(secret), "a route said {secret:?}: {text}");
        }
    }
    let mut places = b.logs();
    files_under(&b.cd.data, &mut places)?;
    files_under(&b.chatd.data_dir(), &mut places)?;
    assert!(places.len() > 2, "the data folders were read");
    for (place, text) in &places {
        for secret in secrets {
            assert!(!text.contains(secret), "{place} holds {secret:?} in clear");
        }
    }
    let key = b.cd.data.join("connectors.key");
    assert_eq!(tandem_shared::fsmode::mode_of(&key)?, 0o600);
    Ok(())
}

/// Waits until binding `id` is connected again (after a save restarts it).
async fn bind_connected(b: &Box5, id: &str) -> anyhow::Result<()> {
    wait_until("the link connected again", QUICK, || async {
        let one = b.client.get(&format!("/connectors/{id}")).await.ok()?;
        (one.body["status"]["state"] == "connected").then_some(())
    })
    .await
}

/// A follow-up in the thread while the bot is still working there (its
/// "Working…" showing) is read too, and reaches the same chat.
#[tokio::test]
async fn a_follow_up_in_the_thread_while_it_works_is_read() -> anyhow::Result<()> {
    // 40 tokens at 20 a second: two seconds of "Working…".
    let b = boxed(&["--tokens-per-second", "20", "--tokens", "40"], "").await?;
    bind(&b, json!({})).await?;
    let mention = b
        .slack
        .push_mention(CHANNEL, ANN, "what is on today?", None);
    wait_shown(&b.slack, CHANNEL, "Working…").await?;
    let reply = b
        .slack
        .push_thread_message(CHANNEL, ANN, "and tomorrow?", &mention.ts);
    acked(&b.slack, &reply).await?;
    let done = settled(&b.client, ANN, 2).await?;
    assert_eq!(done.users, ["what is on today?", "and tomorrow?"]);
    Ok(())
}
