//! connectord's Telegram side against the fake Bot API: the reader (long
//! polling, offsets moved only after the sink stored a batch, 409, 401,
//! 429, cut connections, group mentions) with a sink that records what it
//! is handed, and the Outbox (MarkdownV2 the fake really parses, the plain
//! fallback, parts of at most 4,096, documents). Every wait is on a
//! condition with a bound.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use connectord::platform::{Identity, Inbound, Link, Posted, SendError, Sink, Target};
use connectord::telegram::{self, markdown, BotApi, Outbox, TelegramLink};
use futures_util::future::BoxFuture;
use tandem_shared::secrets::Secret;
use tandem_shared::shutdown::{Shutdown, ShutdownTrigger};
use tandem_tests::fakebot::{FakeBot, Fault, BOT_ID};
use tokio::sync::Semaphore;

const TOKEN: &str = "123456789:AAHfake-Token_ForTests_0123456789";
const BOT: &str = "tandem_test_bot";
const QUICK: Duration = Duration::from_secs(10);

/// Records what the reader hands it; can fail the first accepts and hold
/// each accept until the test lets it through.
#[derive(Default)]
struct TestSink {
    accepted: Mutex<Vec<(Vec<Inbound>, Option<i64>)>>,
    attempts: AtomicUsize,
    fail: AtomicUsize,
    gate: Option<Semaphore>,
    links: Mutex<Vec<(Link, Instant)>>,
}

impl TestSink {
    fn gated() -> TestSink {
        TestSink {
            gate: Some(Semaphore::new(0)),
            ..TestSink::default()
        }
    }
    fn accepted(&self) -> Vec<(Vec<Inbound>, Option<i64>)> {
        self.accepted.lock().unwrap().clone()
    }
    fn messages(&self) -> Vec<Inbound> {
        self.accepted().into_iter().flat_map(|(m, _)| m).collect()
    }
    fn position(&self) -> Option<i64> {
        self.accepted().last().and_then(|(_, p)| *p)
    }
    fn links(&self) -> Vec<Link> {
        self.links
            .lock()
            .unwrap()
            .iter()
            .map(|(l, _)| l.clone())
            .collect()
    }
    fn link_at(&self, want: impl Fn(&Link) -> bool) -> Option<Instant> {
        self.links
            .lock()
            .unwrap()
            .iter()
            .find(|(l, _)| want(l))
            .map(|(_, at)| *at)
    }
}

impl Sink for TestSink {
    fn accept(
        &self,
        _binding: &str,
        messages: Vec<Inbound>,
        position: Option<i64>,
    ) -> BoxFuture<'_, anyhow::Result<()>> {
        Box::pin(async move {
            self.attempts.fetch_add(1, Ordering::SeqCst);
            if let Some(gate) = &self.gate {
                gate.acquire().await?.forget();
            }
            if self
                .fail
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                anyhow::bail!("the disk is full");
            }
            self.accepted.lock().unwrap().push((messages, position));
            Ok(())
        })
    }

    fn link(&self, _binding: &str, link: Link) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.links.lock().unwrap().push((link, Instant::now()));
        })
    }

    fn follows(&self, _binding: &str, _channel: &str, _thread: &str) -> BoxFuture<'_, bool> {
        Box::pin(async { false })
    }
}

fn api(bot: &FakeBot) -> BotApi {
    BotApi::new(&bot.url(), Secret::new(TOKEN.into())).unwrap()
}

fn identity() -> Identity {
    Identity {
        id: BOT_ID.to_string(),
        name: BOT.into(),
    }
}

struct Reader {
    trigger: ShutdownTrigger,
    task: tokio::task::JoinHandle<()>,
}

impl Reader {
    async fn stop(self) {
        self.trigger.begin();
        tokio::time::timeout(QUICK, self.task)
            .await
            .expect("the reader stops promptly")
            .unwrap();
    }
}

fn start_reader(bot: &FakeBot, sink: &Arc<TestSink>, offset: i64, grace: Duration) -> Reader {
    let mut link = TelegramLink::new("cn_test".into(), api(bot), identity(), offset);
    link.conflict_grace = grace;
    let (trigger, shutdown) = Shutdown::new();
    let sink: Arc<dyn Sink> = sink.clone();
    let task = tokio::spawn(telegram::read(link, sink, shutdown));
    Reader { trigger, task }
}

async fn wait<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + QUICK;
    let mut pause = Duration::from_millis(2);
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

fn private(chat: i64) -> Target {
    Target {
        chat_id: chat.to_string(),
        thread: None,
        reply_to: None,
    }
}

#[tokio::test]
async fn get_me_and_a_wrong_token() {
    let bot = FakeBot::start(TOKEN, BOT).await.unwrap();
    let me = api(&bot).get_me().await.unwrap();
    assert_eq!(me, identity());
    let wrong = "987654321:AAwrong-token-entirely";
    let err = BotApi::new(&bot.url(), Secret::new(wrong.into()))
        .unwrap()
        .get_me()
        .await
        .unwrap_err();
    assert_eq!(err, SendError::Unauthorized("Unauthorized".into()));
    assert!(!err.to_string().contains(wrong));
}

#[tokio::test]
async fn the_offset_moves_only_after_accept() {
    let bot = FakeBot::start(TOKEN, BOT).await.unwrap();
    let first = bot.push_private(42, "ann", "hello");
    let second = bot.push_private(42, "ann", "and again");
    let sink = Arc::new(TestSink::gated());
    sink.fail.store(1, Ordering::SeqCst);
    let reader = start_reader(&bot, &sink, 0, Duration::from_secs(60));

    // The batch is being stored: nothing was asked past it, nothing confirmed.
    wait("the first accept", || {
        (sink.attempts.load(Ordering::SeqCst) == 1).then_some(())
    })
    .await;
    assert_eq!(bot.offsets(), vec![0]);
    assert_eq!(bot.unconfirmed(), 2);
    let gate = sink.gate.as_ref().unwrap();
    // It fails: the same batch again, still not confirmed.
    gate.add_permits(1);
    wait("the second accept", || {
        (sink.attempts.load(Ordering::SeqCst) == 2).then_some(())
    })
    .await;
    assert_eq!(bot.offsets(), vec![0]);
    assert_eq!(bot.unconfirmed(), 2);
    assert!(sink.accepted().is_empty());
    gate.add_permits(1);
    wait("the confirming poll", || {
        bot.offsets().contains(&(second + 1)).then_some(())
    })
    .await;
    let accepted = sink.accepted();
    assert_eq!(accepted.len(), 1);
    let (messages, position) = &accepted[0];
    assert_eq!(*position, Some(second + 1));
    let keys: Vec<&str> = messages.iter().map(|m| m.key.as_str()).collect();
    assert_eq!(keys, vec![format!("u{first}"), format!("u{second}")]);
    assert_eq!(messages[0].text, "hello");
    assert_eq!(messages[0].sender_name.as_deref(), Some("ann"));
    assert!(!messages[0].group);
    wait("the batch confirmed", || {
        (bot.unconfirmed() == 0).then_some(())
    })
    .await;
    assert_eq!(sink.links().first(), Some(&Link::Connected));

    // A new reader from the stored offset gets only what came after.
    reader.stop().await;
    let third = bot.push_private(42, "ann", "third");
    let sink2 = Arc::new(TestSink::default());
    let reader = start_reader(&bot, &sink2, second + 1, Duration::from_secs(60));
    wait("the third message", || {
        (!sink2.messages().is_empty()).then_some(())
    })
    .await;
    let keys: Vec<String> = sink2.messages().into_iter().map(|m| m.key).collect();
    assert_eq!(keys, vec![format!("u{third}")]);
    reader.stop().await;
}

#[tokio::test]
async fn a_reader_that_stops_before_accepting_loses_nothing() {
    let bot = FakeBot::start(TOKEN, BOT).await.unwrap();
    let id = bot.push_private(7, "bo", "keep me");
    let sink = Arc::new(TestSink::gated());
    let reader = start_reader(&bot, &sink, 0, Duration::from_secs(60));
    wait("the accept", || {
        (sink.attempts.load(Ordering::SeqCst) == 1).then_some(())
    })
    .await;
    // Killed mid-store (nothing stored): the next reader starts from the
    // stored offset and reads the same message again.
    reader.task.abort();
    let _ = reader.task.await;
    let sink2 = Arc::new(TestSink::default());
    let reader = start_reader(&bot, &sink2, 0, Duration::from_secs(60));
    wait("the message again", || {
        (!sink2.messages().is_empty()).then_some(())
    })
    .await;
    assert_eq!(sink2.messages()[0].key, format!("u{id}"));
    reader.stop().await;
}

#[tokio::test]
async fn groups_need_a_mention_and_the_offset_still_moves() {
    let bot = FakeBot::start(TOKEN, BOT).await.unwrap();
    let sink = Arc::new(TestSink::default());
    let reader = start_reader(&bot, &sink, 0, Duration::from_secs(60));
    let chatter = bot.push_group(-1001, 42, "ann", "just talking among us");
    wait("the chatter's position", || {
        (sink.position() == Some(chatter + 1)).then_some(())
    })
    .await;
    assert!(sink.messages().is_empty(), "no mention: not handed on");
    assert_eq!(sink.accepted()[0].0.len(), 0);
    wait("the chatter confirmed", || {
        (bot.unconfirmed() == 0).then_some(())
    })
    .await;

    let asked = bot.push_group(-1001, 42, "ann", &format!("@{BOT} what is 2+2?"));
    wait("the mention", || {
        (sink.position() == Some(asked + 1)).then_some(())
    })
    .await;
    let m = sink.messages().pop().unwrap();
    assert_eq!(m.text, "what is 2+2?");
    assert!(m.group);
    assert_eq!(m.chat_id, "-1001");

    // An answer in the group replies to the message; a reply to the bot's
    // answer needs no mention.
    let outbox = Outbox::new(api(&bot));
    let target = Target {
        chat_id: "-1001".into(),
        thread: None,
        reply_to: m.message_id.clone(),
    };
    let posted = outbox.answer(&target, None, "**4**").await.unwrap();
    let sent = bot.messages();
    assert_eq!(
        sent[0].reply_to,
        m.message_id.as_deref().map(|s| s.parse().unwrap())
    );
    assert_eq!(sent[0].visible, "4");
    let reply = bot.push_reply(-1001, 42, "ann", "and 3+3?", posted[0].id.parse().unwrap());
    wait("the reply", || {
        (sink.position() == Some(reply + 1)).then_some(())
    })
    .await;
    assert_eq!(sink.messages().last().unwrap().text, "and 3+3?");
    reader.stop().await;
}

#[tokio::test]
async fn a_long_conflict_is_fatal_a_short_one_is_not() {
    let bot = FakeBot::start(TOKEN, BOT).await.unwrap();
    let sink = Arc::new(TestSink::default());
    bot.fail_next("getUpdates", Fault::Conflict409);
    let reader = start_reader(&bot, &sink, 0, Duration::from_secs(30));
    let id = bot.push_private(42, "ann", "after the conflict");
    wait("the message after a short conflict", || {
        (!sink.messages().is_empty()).then_some(())
    })
    .await;
    assert_eq!(
        sink.links(),
        vec![
            Link::Retrying(telegram::CONFLICT_REASON.into()),
            Link::Connected
        ]
    );
    assert_eq!(sink.position(), Some(id + 1));
    reader.stop().await;

    let sink = Arc::new(TestSink::default());
    bot.fail_always("getUpdates", Fault::Conflict409);
    let before = bot.get_updates_calls();
    let grace = Duration::from_millis(1500);
    let started = Instant::now();
    let reader = start_reader(&bot, &sink, 0, grace);
    tokio::time::timeout(QUICK, reader.task)
        .await
        .expect("the reader ends after the grace")
        .unwrap();
    assert!(started.elapsed() >= grace);
    // Switched off only once the conflict lasted the whole grace.
    let retrying = sink.link_at(|l| matches!(l, Link::Retrying(_))).unwrap();
    let fatal = sink.link_at(|l| matches!(l, Link::Fatal(_))).unwrap();
    assert!(fatal.duration_since(retrying) >= grace.mul_f32(0.9));
    assert_eq!(
        sink.links(),
        vec![
            Link::Retrying(telegram::CONFLICT_REASON.into()),
            Link::Fatal(telegram::CONFLICT_REASON.into())
        ]
    );
    assert!(bot.get_updates_calls() - before >= 2, "retried meanwhile");
}

#[tokio::test]
async fn unauthorized_is_fatal() {
    let bot = FakeBot::start(TOKEN, BOT).await.unwrap();
    let sink = Arc::new(TestSink::default());
    bot.fail_next("getUpdates", Fault::Unauthorized401);
    let reader = start_reader(&bot, &sink, 0, Duration::from_secs(60));
    tokio::time::timeout(QUICK, reader.task)
        .await
        .expect("the reader ends")
        .unwrap();
    let links = sink.links();
    assert_eq!(links.len(), 1);
    let Link::Fatal(reason) = &links[0] else {
        panic!("{links:?}");
    };
    assert!(reason.contains("Unauthorized"), "{reason}");
    assert!(!reason.contains(TOKEN));
}

#[tokio::test]
async fn too_many_requests_waits_retry_after() {
    let bot = FakeBot::start(TOKEN, BOT).await.unwrap();
    bot.push_private(42, "ann", "hi");
    // The reader: the 429 is waited out inside the call.
    bot.fail_next("getUpdates", Fault::TooMany429 { retry_after: 1 });
    let sink = Arc::new(TestSink::default());
    let reader = start_reader(&bot, &sink, 0, Duration::from_secs(60));
    wait("the message after the 429", || {
        (!sink.messages().is_empty()).then_some(())
    })
    .await;
    let calls: Vec<_> = bot
        .calls()
        .into_iter()
        .filter(|c| c.method == "getUpdates")
        .collect();
    assert_eq!(calls[0].status, 429);
    assert!(calls[1].at.duration_since(calls[0].at) >= Duration::from_secs(1));
    reader.stop().await;

    // A send: the same.
    let outbox = Outbox::new(api(&bot));
    bot.fail_next("sendMessage", Fault::TooMany429 { retry_after: 1 });
    let started = Instant::now();
    outbox.post(&private(42), "working…").await.unwrap();
    assert!(started.elapsed() >= Duration::from_secs(1));
    let calls: Vec<_> = bot
        .calls()
        .into_iter()
        .filter(|c| c.method == "sendMessage")
        .collect();
    assert_eq!(
        calls.iter().map(|c| c.status).collect::<Vec<_>>(),
        vec![429, 200]
    );
    assert!(calls[1].at.duration_since(calls[0].at) >= Duration::from_secs(1));

    // Longer than a call waits by itself: the caller hears it.
    bot.fail_next("sendMessage", Fault::TooMany429 { retry_after: 90 });
    let err = outbox.post(&private(42), "x").await.unwrap_err();
    assert_eq!(err, SendError::RetryAfter(Duration::from_secs(90)));
}

#[tokio::test]
async fn a_cut_connection_is_retried() {
    let bot = FakeBot::start(TOKEN, BOT).await.unwrap();
    let id = bot.push_private(42, "ann", "through the cut");
    bot.fail_next("getUpdates", Fault::CutConnection);
    let sink = Arc::new(TestSink::default());
    let reader = start_reader(&bot, &sink, 0, Duration::from_secs(60));
    wait("the message after the cut", || {
        (sink.position() == Some(id + 1)).then_some(())
    })
    .await;
    let links = sink.links();
    assert!(
        matches!(&links[0], Link::Retrying(r) if r.contains("did not answer")),
        "{links:?}"
    );
    assert_eq!(links[1], Link::Connected);
    assert!(!format!("{links:?}").contains(TOKEN));
    reader.stop().await;

    // A send cut off is the caller's to retry.
    bot.fail_next("sendMessage", Fault::CutConnection);
    let err = Outbox::new(api(&bot))
        .post(&private(42), "x")
        .await
        .unwrap_err();
    assert!(matches!(err, SendError::Unreachable(_)), "{err:?}");
    assert!(!err.to_string().contains(TOKEN), "{err}");
}

#[tokio::test]
async fn a_parse_error_falls_back_to_plain_text() {
    let bot = FakeBot::start(TOKEN, BOT).await.unwrap();
    bot.push_private(42, "ann", "hi");
    let outbox = Outbox::new(api(&bot));
    bot.fail_next("sendMessage", Fault::ParseError400);
    let posted = outbox
        .answer(
            &private(42),
            None,
            "**Done.** See [the docs](https://example.org/a_b).",
        )
        .await
        .unwrap();
    assert_eq!(posted.len(), 1);
    let sent = bot.messages();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].parse_mode, None);
    assert_eq!(
        sent[0].text,
        "Done. See the docs (https://example.org/a_b)."
    );

    // The same when the answer replaces a progress message.
    let progress = outbox.post(&private(42), "working…").await.unwrap();
    bot.fail_next("editMessageText", Fault::ParseError400);
    let posted = outbox
        .answer(&private(42), Some(&progress), "# Title\n- one")
        .await
        .unwrap();
    assert_eq!(posted, vec![progress.clone()]);
    let last = bot.messages().pop().unwrap();
    assert_eq!(last.method, "editMessageText");
    assert_eq!(last.message_id.to_string(), progress.id);
    assert_eq!(
        (last.text.as_str(), last.parse_mode.as_deref()),
        ("Title\n• one", None)
    );
}

#[tokio::test]
async fn ten_thousand_characters_arrive_as_three_messages() {
    let bot = FakeBot::start(TOKEN, BOT).await.unwrap();
    bot.push_private(42, "ann", "hi");
    let outbox = Outbox::new(api(&bot));
    let mut md = String::from("# Report\n\nThe numbers, as asked:\n\n");
    while md.len() < 1500 {
        md.push_str("Prose with **bold**, a [link](https://example.org/x?a=1) and a dot. ");
    }
    md.push_str("\n\n```python\n");
    let mut i = 0;
    while md.len() < 8500 {
        md.push_str(&format!(
            "value_{i} = compute(\"x\", {i}) * 2.5  # step {i}\n"
        ));
        i += 1;
    }
    md.push_str("```\n\nThat is all.\n\n");
    while md.chars().count() < 10_000 {
        md.push_str("Closing words. ");
    }
    assert!(md.chars().count() >= 10_000);
    let progress = outbox.post(&private(42), "working…").await.unwrap();
    let posted = outbox
        .answer(&private(42), Some(&progress), &md)
        .await
        .unwrap();
    assert_eq!(posted.len(), 3);
    assert_eq!(posted[0], progress);
    let sent = bot.messages();
    let parts: Vec<_> = sent[1..].to_vec();
    assert_eq!(parts.len(), 3);
    assert_eq!(parts[0].method, "editMessageText");
    assert_eq!(parts[1].method, "sendMessage");
    for part in &parts {
        assert_eq!(
            part.parse_mode.as_deref(),
            Some("MarkdownV2"),
            "no fallback was needed"
        );
        assert!(markdown::utf16_len(&part.text) <= 4096);
    }
    // The block is cut and reopened with its language.
    let reopened = (1..parts.len())
        .find(|&n| {
            parts[n].text.starts_with("```python\nvalue_")
                && !parts[n].text.starts_with("```python\nvalue_0 ")
        })
        .expect("a part reopening the block");
    assert!(parts[reopened - 1].text.ends_with("\n```"));
    let visible: String = parts.iter().map(|p| p.visible.as_str()).collect();
    assert_eq!(visible.matches("value_0 = ").count(), 1);
    assert_eq!(visible.matches(&format!("value_{} = ", i - 1)).count(), 1);
    assert!(visible.contains("That is all."));
}

#[tokio::test]
async fn odd_markdown_is_valid_markdown_v2() {
    let bot = FakeBot::start(TOKEN, BOT).await.unwrap();
    bot.push_private(42, "ann", "hi");
    let outbox = Outbox::new(api(&bot));
    let answers = [
        "**unbalanced bold",
        "a lone ` backtick and a *star",
        "snake_case_names and 2 * 3 = 6! (really) {x} [y] #z +1 -1 |a| ~b~ >c<",
        "***both*** __bold__ _it_ ~~strike~~ `c`o`de` ``a`b``",
        "> quote with **bold**\n>> nested\n\n1. one.\n2. two!\n   - sub-item",
        "[link with (parens)](https://example.org/a_(b)) and [rel](./x.md) and <https://x.y/z>",
        "```\nno language ` here \\ and\n```\n```c++\nint main() { return 0; }\n```",
        "```rust\nunterminated block with `ticks`",
        "emoji 😀 **bold 😀** _it 😀_ [😀](https://e.x/😀)",
        "*a **b** c* and **a *b* c** and [*it*](https://a.b)[*it*](https://c.d)",
        "\\*escaped\\* \\_too\\_ and a backslash \\ alone",
        "# Heading with `code` and [link](https://h.x)\n---\n***",
    ];
    for answer in answers {
        let posted = outbox.answer(&private(42), None, answer).await;
        assert!(posted.is_ok(), "{answer:?}: {posted:?}");
        let last = bot.messages().pop().unwrap();
        assert_eq!(
            last.parse_mode.as_deref(),
            Some("MarkdownV2"),
            "{answer:?} fell back: {}",
            last.text
        );
    }
}

#[tokio::test]
async fn typing_edits_and_files() {
    let bot = FakeBot::start(TOKEN, BOT).await.unwrap();
    bot.push_private(42, "ann", "hi");
    let outbox = Outbox::new(api(&bot));
    let target = private(42);
    outbox.typing(&target).await.unwrap();
    let posted = outbox.post(&target, "step 1").await.unwrap();
    outbox
        .edit(&target, &posted, "step 1. step 2")
        .await
        .unwrap();
    // The same text again is not an error.
    outbox
        .edit(&target, &posted, "step 1. step 2")
        .await
        .unwrap();
    let file = outbox
        .send_file(&target, "report.csv", Bytes::from_static(b"a,b\n1,2\n"))
        .await
        .unwrap();
    let sent = bot.sent();
    let methods: Vec<&str> = sent.iter().map(|s| s.method.as_str()).collect();
    assert_eq!(
        methods,
        vec![
            "sendChatAction",
            "sendMessage",
            "editMessageText",
            "sendDocument"
        ]
    );
    assert_eq!(sent[0].action.as_deref(), Some("typing"));
    assert_eq!(sent[2].visible, "step 1. step 2");
    assert_eq!(sent[3].file_name.as_deref(), Some("report.csv"));
    assert_eq!(sent[3].file.as_deref(), Some(&b"a,b\n1,2\n"[..]));
    assert_eq!(sent[3].message_id.to_string(), file.id);
    // An edit of a message that is gone: the answer is sent anew.
    let gone = Posted { id: "9999".into() };
    let posted = outbox.answer(&target, Some(&gone), "fresh").await.unwrap();
    assert_ne!(posted[0], gone);
    // A chat the bot never saw.
    let err = outbox.post(&private(5), "x").await.unwrap_err();
    assert_eq!(
        err,
        SendError::Refused("Bad Request: chat not found".into())
    );
}

#[tokio::test]
async fn the_token_never_appears_in_an_error() {
    let bot = FakeBot::start(TOKEN, BOT).await.unwrap();
    bot.push_private(42, "ann", "hi");
    let outbox = Outbox::new(api(&bot));
    let mut errors: Vec<String> = Vec::new();
    for fault in [
        Fault::Conflict409,
        Fault::Unauthorized401,
        Fault::ParseError400,
        Fault::ServerError500,
        Fault::CutConnection,
    ] {
        bot.fail_next("sendChatAction", fault);
        let err = outbox.typing(&private(42)).await.unwrap_err();
        errors.push(err.to_string());
        errors.push(format!("{err:?}"));
    }
    bot.fail_next("getUpdates", Fault::CutConnection);
    errors.push(api(&bot).get_updates(0, 0).await.unwrap_err().to_string());
    let url = bot.url();
    drop(bot);
    // Nothing listens any more: refused connections.
    let gone = BotApi::new(&url, Secret::new(TOKEN.into())).unwrap();
    errors.push(gone.get_me().await.unwrap_err().to_string());
    let err = gone.get_updates(0, 1).await.unwrap_err();
    errors.push(err.to_string());
    errors.push(format!("{err:?}"));
    errors.push(format!("{gone:?}"));
    let secret_part = TOKEN.split(':').nth(1).unwrap();
    for e in &errors {
        assert!(!e.contains(secret_part), "the token in {e:?}");
    }
    assert!(errors.iter().any(|e| e.contains("Unauthorized")));
}

/// Any Markdown at all (odd pieces in random order) converts to MarkdownV2
/// that Telegram's parser (the fake's) takes, part by part.
#[test]
fn random_markdown_always_parses() {
    const PIECES: &[&str] = &[
        "*",
        "**",
        "***",
        "_",
        "__",
        "~",
        "~~",
        "`",
        "``",
        "```",
        "[",
        "]",
        "(",
        ")",
        "<",
        ">",
        "\\",
        "\n",
        "\n\n",
        "\n```py\n",
        "\n```\n",
        "\n> ",
        "\n- ",
        "\n# ",
        "\n1. ",
        "word",
        " ",
        "a_b",
        "x.y",
        "!",
        "#",
        "+",
        "-",
        "=",
        "|",
        "{",
        "}",
        "😀",
        "é",
        "https://e.x/a",
        "[t](https://e.x/(p))",
        "<https://e.x>",
        "[r](rel.md)",
        "\\*",
        "\\_",
        "\t",
    ];
    let mut seed: u64 = 0x5eed_1234_abcd_0001;
    let mut next = move || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as usize
    };
    for round in 0..3000 {
        let len = 1 + next() % 40;
        let md: String = (0..len).map(|_| PIECES[next() % PIECES.len()]).collect();
        let limit = if round % 3 == 0 { 60 } else { markdown::LIMIT };
        for part in markdown::parts(&md, limit) {
            assert!(
                markdown::utf16_len(&part.v2) <= limit,
                "{md:?} → {:?}",
                part.v2
            );
            match tandem_tests::fakebot::parse_markdown_v2(&part.v2) {
                Ok(visible) => assert!(!visible.trim().is_empty(), "{md:?} → {:?}: empty", part.v2),
                Err(why) => panic!("{md:?} → {:?}: {why}", part.v2),
            }
        }
    }
}
