//! connectord's Slack reader and Outbox against the fake Slack: envelopes
//! acked once stored, a `disconnect` or a cut socket loses nothing, a
//! mention in a channel is answered in its thread, 429s waited out, a
//! refused token switches the binding off, and no token in any error.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use connectord::platform::{Inbound, Link, Posted, SendError, Sink, Target};
use connectord::slack::{self, Outbox, SlackApi, SlackLink};
use futures_util::future::BoxFuture;
use tandem_shared::secrets::Secret;
use tandem_shared::shutdown::{Shutdown, ShutdownTrigger};
use tandem_tests::fakeslack::{self, wait_until, FakeSlack, APP_TOKEN, BOT_ID, BOT_TOKEN};

const BOUND: Duration = Duration::from_secs(10);
const BINDING: &str = "cn_slack1";

#[derive(Default)]
struct TestSink {
    accepted: Mutex<Vec<Inbound>>,
    links: Mutex<Vec<Link>>,
    follows: Mutex<HashSet<(String, String)>>,
    /// Accepts still to refuse.
    fail: AtomicUsize,
    failed: AtomicUsize,
}

impl TestSink {
    fn accepted(&self) -> Vec<Inbound> {
        self.accepted.lock().unwrap().clone()
    }
    fn keys(&self) -> HashSet<String> {
        self.accepted().into_iter().map(|m| m.key).collect()
    }
    fn by_key(&self, key: &str) -> Vec<Inbound> {
        self.accepted()
            .into_iter()
            .filter(|m| m.key == key)
            .collect()
    }
    fn links(&self) -> Vec<Link> {
        self.links.lock().unwrap().clone()
    }
}

impl Sink for TestSink {
    fn accept(
        &self,
        binding: &str,
        messages: Vec<Inbound>,
        position: Option<i64>,
    ) -> BoxFuture<'_, anyhow::Result<()>> {
        assert_eq!(binding, BINDING);
        assert_eq!(position, None);
        Box::pin(async move {
            let refuse = self
                .fail
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if refuse {
                self.failed.fetch_add(1, Ordering::SeqCst);
                anyhow::bail!("the disk is full");
            }
            self.accepted.lock().unwrap().extend(messages);
            Ok(())
        })
    }

    fn link(&self, _binding: &str, link: Link) -> BoxFuture<'_, ()> {
        Box::pin(async move { self.links.lock().unwrap().push(link) })
    }

    fn follows(&self, _binding: &str, channel: &str, thread: &str) -> BoxFuture<'_, bool> {
        let key = (channel.to_string(), thread.to_string());
        Box::pin(async move { self.follows.lock().unwrap().contains(&key) })
    }
}

fn api(fake: &FakeSlack, bot: &str, app: &str) -> SlackApi {
    SlackApi::new(
        &fake.api_base(),
        Secret::new(bot.to_string()),
        Secret::new(app.to_string()),
    )
    .unwrap()
}

struct Reader {
    sink: Arc<TestSink>,
    trigger: ShutdownTrigger,
    task: tokio::task::JoinHandle<()>,
}

impl Reader {
    async fn start(fake: &FakeSlack, app_token: &str) -> Reader {
        let api = api(fake, BOT_TOKEN, app_token);
        let bot = api.auth_test().await.expect("auth.test");
        assert_eq!(bot.id, BOT_ID);
        let sink = Arc::new(TestSink::default());
        let (trigger, shutdown) = Shutdown::new();
        let link = SlackLink {
            binding: BINDING.into(),
            api,
            bot,
        };
        let task = tokio::spawn(slack::read(link, sink.clone(), shutdown));
        Reader {
            sink,
            trigger,
            task,
        }
    }

    async fn wait_key(&self, key: &str) -> Inbound {
        assert!(
            wait_until(BOUND, || !self.sink.by_key(key).is_empty()).await,
            "{key} never accepted"
        );
        self.sink.by_key(key).remove(0)
    }

    async fn stop(self) {
        self.trigger.begin();
        tokio::time::timeout(Duration::from_secs(3), self.task)
            .await
            .expect("the reader stops promptly on shutdown")
            .unwrap();
    }
}

fn assert_no_token(text: &str) {
    for token in [BOT_TOKEN, APP_TOKEN, "xoxb-wrong", "xapp-wrong"] {
        assert!(!text.contains(token), "a token in {text:?}");
    }
}

#[tokio::test]
async fn slack_dm_is_accepted_then_acked() {
    let fake = FakeSlack::start().await.unwrap();
    let reader = Reader::start(&fake, APP_TOKEN).await;
    let pushed = fake.push_dm("U1", "hello <world> & co");
    let command = fake.push_slash_command("/tandem");
    let inbound = reader.wait_key(&pushed.event_id).await;
    assert_eq!(inbound.text, "hello <world> & co");
    assert_eq!(inbound.sender_id, "U1");
    assert_eq!(inbound.chat_id, pushed.channel);
    assert_eq!(inbound.message_id.as_deref(), Some(pushed.ts.as_str()));
    assert_eq!(inbound.thread, None);
    assert!(!inbound.group);
    assert!(fake.wait_acked(&pushed.envelope_id, BOUND).await);
    // Not ours, acked anyway so Slack stops sending it.
    assert!(fake.wait_acked(&command, BOUND).await);
    assert_eq!(reader.sink.accepted().len(), 1);
    assert_eq!(reader.sink.links(), vec![Link::Connected]);
    assert_eq!(fake.unacked(), 0);
    reader.stop().await;
}

#[tokio::test]
async fn slack_disconnect_reconnects_and_loses_nothing() {
    let fake = FakeSlack::start().await.unwrap();
    // Long: only a closed connection makes the fake send again.
    fake.set_ack_timeout(Duration::from_secs(30));
    let reader = Reader::start(&fake, APP_TOKEN).await;
    let mut pushed = Vec::new();
    for i in 0..5 {
        pushed.push(fake.push_dm("U1", &format!("before {i}")));
    }
    for p in &pushed {
        assert!(fake.wait_acked(&p.envelope_id, BOUND).await);
    }
    for round in 0..3 {
        for i in 0..3 {
            pushed.push(fake.push_dm("U2", &format!("round {round} early {i}")));
        }
        fake.disconnect(if round == 1 {
            "warning"
        } else {
            "refresh_requested"
        });
        for i in 0..3 {
            pushed.push(fake.push_dm("U3", &format!("round {round} late {i}")));
        }
        assert!(
            fake.wait_connections(round + 2, BOUND).await,
            "no new connection after disconnect {round}"
        );
    }
    let want: HashSet<String> = pushed.iter().map(|p| p.event_id.clone()).collect();
    assert!(
        wait_until(BOUND, || reader.sink.keys() == want).await,
        "missing: {:?}",
        want.difference(&reader.sink.keys()).collect::<Vec<_>>()
    );
    assert!(wait_until(BOUND, || fake.unacked() == 0).await);
    for p in &pushed {
        assert!(fake.is_acked(&p.envelope_id), "{} not acked", p.envelope_id);
    }
    assert!(fake.opens() >= 4, "{} opens", fake.opens());
    // A disconnect is not a failure.
    assert!(
        !reader
            .sink
            .links()
            .iter()
            .any(|l| matches!(l, Link::Retrying(_) | Link::Fatal(_))),
        "{:?}",
        reader.sink.links()
    );
    reader.stop().await;
}

#[tokio::test]
async fn slack_accept_error_leaves_the_envelope_to_come_again() {
    let fake = FakeSlack::start().await.unwrap();
    fake.set_ack_timeout(Duration::from_millis(300));
    let reader = Reader::start(&fake, APP_TOKEN).await;
    reader.sink.fail.store(1, Ordering::SeqCst);
    let pushed = fake.push_dm("U1", "store me");
    let inbound = reader.wait_key(&pushed.event_id).await;
    assert_eq!(inbound.text, "store me");
    assert_eq!(reader.sink.failed.load(Ordering::SeqCst), 1);
    assert!(fake.wait_acked(&pushed.envelope_id, BOUND).await);
    let deliveries: Vec<_> = fake
        .deliveries()
        .into_iter()
        .filter(|d| d.envelope_id == pushed.envelope_id)
        .collect();
    assert!(deliveries.len() >= 2, "{deliveries:?}");
    assert_eq!(deliveries[0].retry_attempt, 0);
    assert!(deliveries[1].retry_attempt >= 1);
    // Acked once, after the copy that was stored.
    assert_eq!(
        fake.acks()
            .iter()
            .filter(|a| **a == pushed.envelope_id)
            .count(),
        1
    );
    reader.stop().await;
}

#[tokio::test]
async fn slack_cut_socket_retries_and_the_unacked_comes_on_the_next() {
    let fake = FakeSlack::start().await.unwrap();
    fake.set_ack_timeout(Duration::from_secs(30));
    let reader = Reader::start(&fake, APP_TOKEN).await;
    assert!(fake.wait_connections(1, BOUND).await);
    reader.sink.fail.store(1, Ordering::SeqCst);
    let pushed = fake.push_dm("U1", "after the cut");
    assert!(wait_until(BOUND, || reader.sink.failed.load(Ordering::SeqCst) == 1).await);
    fake.cut();
    let inbound = reader.wait_key(&pushed.event_id).await;
    assert_eq!(inbound.text, "after the cut");
    let deliveries: Vec<_> = fake
        .deliveries()
        .into_iter()
        .filter(|d| d.envelope_id == pushed.envelope_id)
        .collect();
    assert_eq!(deliveries.len(), 2, "{deliveries:?}");
    assert_eq!(deliveries[1].connection, 2);
    assert_eq!(deliveries[1].retry_attempt, 1);
    assert!(fake.wait_acked(&pushed.envelope_id, BOUND).await);
    let links = reader.sink.links();
    assert!(matches!(links[0], Link::Connected), "{links:?}");
    assert!(matches!(links[1], Link::Retrying(_)), "{links:?}");
    assert!(wait_until(BOUND, || reader.sink.links().len() == 3).await);
    assert_eq!(reader.sink.links()[2], Link::Connected);
    reader.stop().await;
}

#[tokio::test]
async fn slack_mention_is_answered_in_its_thread() {
    let fake = FakeSlack::start().await.unwrap();
    let reader = Reader::start(&fake, APP_TOKEN).await;
    let pushed = fake.push_mention("C1", "U1", "what's up?", None);
    let inbound = reader.wait_key(&pushed.event_id).await;
    assert_eq!(inbound.text, "what's up?");
    assert_eq!(inbound.thread.as_deref(), Some(pushed.ts.as_str()));
    assert_eq!(inbound.message_id.as_deref(), Some(pushed.ts.as_str()));
    assert_eq!(inbound.chat_id, "C1");
    assert!(inbound.group);
    // The `message` twin of the mention is acked, not taken.
    let twin = pushed.twin_envelope_id.clone().unwrap();
    assert!(fake.wait_acked(&twin, BOUND).await);
    assert!(fake.wait_acked(&pushed.envelope_id, BOUND).await);
    assert_eq!(reader.sink.accepted().len(), 1);

    let outbox = Outbox::new(api(&fake, BOT_TOKEN, APP_TOKEN));
    let target = Target {
        chat_id: inbound.chat_id.clone(),
        thread: inbound.thread.clone(),
        reply_to: None,
    };
    outbox.typing(&target).await.unwrap();
    let working = outbox.post(&target, "Working…").await.unwrap();
    let posted = fake.posted();
    assert_eq!(posted.len(), 1);
    assert_eq!(posted[0].thread_ts.as_deref(), Some(pushed.ts.as_str()));
    assert_eq!(posted[0].text, "Working…");
    outbox
        .edit(&target, &working, "Working… (reading files)")
        .await
        .unwrap();

    // About 10,000 characters with a code block across the first cut.
    let mut markdown = String::from("## The answer\n\n");
    for i in 0..30 {
        markdown.push_str(&format!("Paragraph {i} says **something** useful. "));
        markdown.push_str(&"More words follow here. ".repeat(3));
        markdown.push_str("\n\n");
    }
    markdown.push_str("```rust\n");
    for i in 0..200 {
        markdown.push_str(&format!("let value_{i} = compute({i}) < limit;\n"));
    }
    markdown.push_str("```\n\nThe end.");
    let parts = outbox
        .answer(&target, Some(&working), &markdown)
        .await
        .unwrap();
    assert!(parts.len() >= 3, "{} parts", parts.len());
    assert_eq!(parts[0], working);
    let posted = fake.posted();
    let answer: Vec<_> = posted[2..].to_vec();
    assert_eq!(answer.len(), parts.len());
    assert_eq!(answer[0].method, "chat.update");
    assert_eq!(answer[0].ts, working.id);
    for (p, part) in answer.iter().zip(&parts).skip(1) {
        assert_eq!(p.method, "chat.postMessage");
        assert_eq!(p.thread_ts.as_deref(), Some(pushed.ts.as_str()));
        assert_eq!(p.ts, part.id);
    }
    for p in &answer {
        assert!(p.text.chars().count() <= 4000, "{}", p.text.chars().count());
        let fences = p.text.lines().filter(|l| l.starts_with("```")).count();
        assert_eq!(fences % 2, 0, "a code block left open:\n{}", p.text);
        assert!(!p.text.contains("```rust"), "Slack shows no language");
    }
    let all: String = answer
        .iter()
        .map(|p| p.text.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    for i in 0..200 {
        let line = format!("let value_{i} = compute({i}) &lt; limit;\n");
        assert_eq!(all.matches(&line).count(), 1, "line {i}");
    }
    assert!(all.starts_with("*The answer*"));
    assert!(all.contains("*something*"));
    assert!(all.ends_with("The end."));

    // A file the turn made, in the same thread.
    outbox
        .send_file(&target, "report.csv", b"a,b\n1,2\n".to_vec())
        .await
        .unwrap();
    let files = fake.files();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].name, "report.csv");
    assert_eq!(files[0].channel, "C1");
    assert_eq!(files[0].thread_ts.as_deref(), Some(pushed.ts.as_str()));
    assert!(files[0].body.windows(8).any(|w| w == b"a,b\n1,2\n"));
    reader.stop().await;
}

#[tokio::test]
async fn slack_thread_messages_only_when_followed() {
    let fake = FakeSlack::start().await.unwrap();
    let reader = Reader::start(&fake, APP_TOKEN).await;
    reader
        .sink
        .follows
        .lock()
        .unwrap()
        .insert(("C1".into(), "1700000000.000500".into()));
    let other = fake.push_thread_message("C1", "U1", "not for you", "1700000000.000900");
    let followed = fake.push_thread_message("C1", "U1", "and then?", "1700000000.000500");
    let inbound = reader.wait_key(&followed.event_id).await;
    assert_eq!(inbound.thread.as_deref(), Some("1700000000.000500"));
    assert_eq!(inbound.text, "and then?");
    assert!(inbound.group);
    assert!(fake.wait_acked(&other.envelope_id, BOUND).await);
    assert!(reader.sink.by_key(&other.event_id).is_empty());
    reader.stop().await;
}

#[tokio::test]
async fn slack_rate_limit_is_waited_out() {
    let fake = FakeSlack::start().await.unwrap();
    let outbox = Outbox::new(api(&fake, BOT_TOKEN, APP_TOKEN));
    let target = Target {
        chat_id: "DU1".into(),
        thread: None,
        reply_to: None,
    };
    fake.rate_limit_next("chat.postMessage", 1);
    let posted = outbox.post(&target, "hi").await.unwrap();
    let calls = fake.calls("chat.postMessage");
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].status, 429);
    assert_eq!(calls[1].status, 200);
    assert!(calls[1].at.duration_since(calls[0].at) >= Duration::from_secs(1));
    assert_eq!(fake.posted()[0].ts, posted.id);

    // Rate limited opening Socket Mode: the reader waits and gets in.
    fake.rate_limit_next("apps.connections.open", 1);
    let reader = Reader::start(&fake, APP_TOKEN).await;
    assert!(fake.wait_connections(1, BOUND).await);
    let calls = fake.calls("apps.connections.open");
    assert_eq!(calls[0].status, 429);
    assert!(calls[1].at.duration_since(calls[0].at) >= Duration::from_secs(1));
    reader.stop().await;
}

#[tokio::test]
async fn slack_refused_token_is_fatal_and_never_shown() {
    let fake = FakeSlack::start().await.unwrap();
    let reader = Reader::start(&fake, "xapp-wrong-secret-app-token").await;
    tokio::time::timeout(BOUND, reader.task)
        .await
        .expect("the reader gives up on a refused token")
        .unwrap();
    let links = reader.sink.links();
    let [Link::Fatal(reason)] = links.as_slice() else {
        panic!("{links:?}");
    };
    assert!(reason.contains("invalid_auth"), "{reason}");
    assert_no_token(reason);
    assert_eq!(fake.connections(), 0);

    // The bot token given as the app token: refused for good too.
    let reader = Reader::start(&fake, BOT_TOKEN).await;
    tokio::time::timeout(BOUND, reader.task)
        .await
        .unwrap()
        .unwrap();
    let links = reader.sink.links();
    assert!(matches!(links.as_slice(), [Link::Fatal(_)]), "{links:?}");
    assert_no_token(&format!("{links:?}"));

    let wrong = Outbox::new(api(&fake, "xoxb-wrong-secret-bot-token", APP_TOKEN));
    let target = Target {
        chat_id: "C1".into(),
        thread: None,
        reply_to: None,
    };
    let errors = vec![
        wrong.post(&target, "hi").await.unwrap_err(),
        wrong
            .answer(&target, Some(&Posted { id: "1.1".into() }), "**x**")
            .await
            .unwrap_err(),
        wrong
            .send_file(&target, "a.txt", b"x".to_vec())
            .await
            .unwrap_err(),
        api(&fake, "xoxb-wrong-secret", APP_TOKEN)
            .auth_test()
            .await
            .unwrap_err(),
    ];
    for e in &errors {
        assert!(matches!(e, SendError::Unauthorized(_)), "{e:?}");
        assert_no_token(&format!("{e} {e:?}"));
    }
    // Nobody answering: the error names no token either.
    let base = fake.api_base();
    drop(fake);
    let gone = SlackApi::new(
        &base,
        Secret::new(BOT_TOKEN.into()),
        Secret::new(APP_TOKEN.into()),
    )
    .unwrap();
    let e = Outbox::new(gone).post(&target, "hi").await.unwrap_err();
    assert!(matches!(e, SendError::Unreachable(_)), "{e:?}");
    assert_no_token(&format!("{e} {e:?}"));
}

#[test]
fn slack_fake_tokens_are_distinct() {
    // The assertions above rely on the two tokens not containing each other.
    assert!(!fakeslack::BOT_TOKEN.contains(fakeslack::APP_TOKEN));
}
