//! Web Push end to end: the real `chatd` and `engine-sim`, and a fake push
//! service on loopback (`tandem_tests::fakepush`) that checks each push's
//! VAPID token and decrypts it with the keys of the subscription it made.
//! chatd runs with `QSE_CHAT_PUSH_ALLOW_LOOPBACK_FOR_TESTS` except where a
//! test shows what that setting's absence refuses. Every wait is on a
//! condition with a bound.

use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};
use tandem_tests::fakepush::{FakePush, Received, Subscriber};
use tandem_tests::harness::{run_id, wait_until, Chatd, Client, Sim};

const QUICK: Duration = Duration::from_secs(20);
const LOOPBACK: (&str, &str) = ("QSE_CHAT_PUSH_ALLOW_LOOPBACK_FOR_TESTS", "true");

async fn start(env: &[(&str, &str)]) -> anyhow::Result<(Sim, Chatd, Client, FakePush)> {
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start(&sim.url(), env).await?;
    let client = chatd.client();
    let key = client.get("/push/key").await?;
    anyhow::ensure!(key.status == 200, "{key:?}");
    let public = key.body["public_key"].as_str().context("public_key")?;
    let fake = FakePush::start(public).await?;
    Ok((sim, chatd, client, fake))
}

async fn subscribe(client: &Client, subscriber: &Subscriber) -> anyhow::Result<String> {
    let made = client.post("/push/subscribe", subscriber.body()).await?;
    anyhow::ensure!(made.status == 201, "subscribe answered {made:?}");
    Ok(made.body["id"].as_str().context("id")?.to_string())
}

/// Waits until the fake has received `n` pushes; answers them all.
async fn pushes(fake: &FakePush, n: usize) -> anyhow::Result<Vec<Received>> {
    wait_until(
        &format!("{n} pushes at the fake push service"),
        QUICK,
        || async {
            let got = fake.received();
            (got.len() >= n).then_some(got)
        },
    )
    .await
}

async fn no_stream_open(chatd: &Chatd) -> anyhow::Result<()> {
    wait_until("every event stream closed", QUICK, || async {
        (chatd.sse_devices().await == Some(0)).then_some(())
    })
    .await
}

/// A push the fake took: 201, a title and a link and nothing else.
fn title_and_link(push: &Received) -> (String, String) {
    assert_eq!(push.status, 201, "{push:?}");
    let fields: Vec<&String> = push
        .payload
        .as_object()
        .map(|o| o.keys().collect())
        .unwrap_or_default();
    assert_eq!(
        fields,
        ["title", "url"],
        "only a title and a link: {}",
        push.text
    );
    (
        push.payload["title"].as_str().unwrap_or("").to_string(),
        push.payload["url"].as_str().unwrap_or("").to_string(),
    )
}

/// Subscribe, then a run in a chat a device watches pushes nothing; the
/// device goes (the tab closed) and the next run pushes one push with a
/// title and the chat's link, no word of the question or the answer, with
/// a TTL and an urgency. The VAPID key stays across a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_nobody_watches_pushes_a_title_and_a_link_and_a_watched_one_nothing(
) -> anyhow::Result<()> {
    let (_sim, mut chatd, client, fake) = start(&[LOOPBACK]).await?;
    let phone = fake.subscriber("phone");
    subscribe(&client, &phone).await?;
    let chat = client.create_chat().await?;

    // A tab holds the chat's stream: the run's end is seen there.
    let mut tab = client.events(&chat, 0).await?;
    let first = run_id(
        &client
            .send(&chat, "watched question zebra [sim tokens=4]")
            .await?,
    )?;
    tab.read_until(QUICK, |e| e.kind == "run.finished").await?;
    client.wait_run(&chat, &first, &["done"], QUICK).await?;
    drop(tab);
    no_stream_open(&chatd).await?;

    // Nobody looks: the second run's end is pushed. Pushes go in order, so
    // one push now means the watched run sent none.
    let second = run_id(
        &client
            .send(&chat, "unwatched question yak [sim tokens=4]")
            .await?,
    )?;
    client.wait_run(&chat, &second, &["done"], QUICK).await?;
    let got = pushes(&fake, 1).await?;
    assert_eq!(got.len(), 1, "{got:?}");
    let (title, url) = title_and_link(&got[0]);
    assert_eq!(title, "A reply is ready");
    assert_eq!(url, format!("/#/c/{chat}"));
    for secret in ["zebra", "yak", "w0", "w1"] {
        assert!(!got[0].text.contains(secret), "{secret} in {}", got[0].text);
    }
    assert_eq!(got[0].ttl, Some(86_400));
    assert_eq!(got[0].urgency.as_deref(), Some("normal"));

    // The key pair is made once, 0600, and the same after a restart.
    let key_file = chatd.data_dir().join("vapid.key");
    assert_eq!(tandem_shared::fsmode::mode_of(&key_file)?, 0o600);
    let before = client.get("/push/key").await?.body;
    chatd.restart().await?;
    assert_eq!(client.get("/push/key").await?.body, before);
    let listed = client.get("/push/subscriptions").await?;
    assert_eq!(
        listed.body["subscriptions"][0]["last_result"], "201",
        "{listed:?}"
    );
    assert_eq!(listed.body["subscriptions"][0]["origin"], fake.url.as_str());
    assert!(
        !listed.body.to_string().contains("/push/phone"),
        "no endpoint listed"
    );
    assert!(!chatd.log().contains("/push/phone"), "no endpoint logged");
    Ok(())
}

/// A run that waits for an answer to a card pushes at once, urgently; an
/// inbox entry pushes its own title and its chat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_waiting_and_an_inbox_entry_push() -> anyhow::Result<()> {
    let (sim, chatd, client, fake) = start(&[LOOPBACK]).await?;
    subscribe(&client, &fake.subscriber("laptop")).await?;
    let made = client
        .post("/conversations", json!({"permission_mode": "ask"}))
        .await?;
    let chat = made.body["id"].as_str().context("chat id")?.to_string();
    std::fs::create_dir_all(chatd.data_dir().join("workspaces").join(&chat))?;
    sim.faults(json!([{"tool_calls": [{"name": "write_file",
        "arguments": {"path": "secret-plan.txt", "content": "hi\n"}}]}]))
        .await?;
    let run = run_id(&client.send(&chat, "write it [sim tokens=3]").await?)?;
    client.wait_run(&chat, &run, &["waiting"], QUICK).await?;
    let got = pushes(&fake, 1).await?;
    let (title, url) = title_and_link(&got[0]);
    assert_eq!(title, "A chat is waiting for your answer");
    assert_eq!(url, format!("/#/c/{chat}"));
    assert_eq!(got[0].urgency.as_deref(), Some("high"));
    assert!(!got[0].text.contains("secret-plan"), "{}", got[0].text);

    let entry = client
        .post(
            "/notifications",
            json!({"kind": "run_ended", "title": "Nightly report ran", "body": "private body",
                   "source": {"type": "trigger", "id": "t_1"}, "conversation_id": chat}),
        )
        .await?;
    assert_eq!(entry.status, 201, "{entry:?}");
    let got = pushes(&fake, 2).await?;
    let (title, url) = title_and_link(&got[1]);
    assert_eq!(
        (title.as_str(), url),
        ("Nightly report ran", format!("/#/c/{chat}"))
    );
    assert!(!got[1].text.contains("private body"));
    Ok(())
}

/// A push service's 410 removes the subscription; an 11th browser drops
/// the oldest, which then hears nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gone_subscription_is_removed_and_the_eleventh_drops_the_oldest() -> anyhow::Result<()> {
    let (_sim, _chatd, client, fake) = start(&[LOOPBACK]).await?;
    let browsers: Vec<Subscriber> = (0..11).map(|i| fake.subscriber(&format!("b{i}"))).collect();
    let mut ids = Vec::new();
    for browser in &browsers {
        ids.push(subscribe(&client, browser).await?);
    }
    let listed = client.get("/push/subscriptions").await?;
    let kept: Vec<&str> = listed.body["subscriptions"]
        .as_array()
        .context("subscriptions")?
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert_eq!(kept.len(), 10, "{listed:?}");
    assert!(!kept.contains(&ids[0].as_str()), "the oldest went");
    assert_eq!(kept[0], ids[10], "newest first");

    fake.gone("b5");
    let tally = client.post("/push/test", json!({})).await?;
    assert_eq!(
        tally.body,
        json!({"subscriptions": 10, "delivered": 9, "gone": 1, "refused": 0, "failed": 0}),
        "{tally:?}"
    );
    let got = fake.received();
    assert!(
        got.iter().all(|p| p.name != "b0"),
        "the dropped browser heard nothing"
    );
    assert!(
        got.iter().all(|p| p.refused.is_none() || p.name == "b5"),
        "{got:?}"
    );
    let listed = client.get("/push/subscriptions").await?;
    let left = listed.body["subscriptions"].as_array().context("list")?;
    assert_eq!(left.len(), 9);
    assert!(
        left.iter().all(|s| s["id"] != ids[5].as_str()),
        "the gone one was removed"
    );
    // Unsubscribing one: gone; again: nothing to remove.
    let body = json!({"endpoint": browsers[1].endpoint});
    let gone = client
        .call(
            reqwest::Method::DELETE,
            "/push/subscribe",
            Some(body.clone()),
        )
        .await?;
    assert_eq!(gone.body, json!({"deleted": 1}), "{gone:?}");
    let again = client
        .call(reqwest::Method::DELETE, "/push/subscribe", Some(body))
        .await?;
    assert_eq!(again.body, json!({"deleted": 0}));
    Ok(())
}

/// Without the test setting, loopback and plain http endpoints are refused
/// with a 400 naming the field; with it, private addresses still are. Bad
/// keys are refused naming theirs. Nothing is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_endpoints_and_bad_keys_are_refused_naming_the_field() -> anyhow::Result<()> {
    let (_sim, _chatd, client, fake) = start(&[]).await?;
    let good = fake.subscriber("x");
    let refused = |body: Value, field: &'static str, words: &'static str| {
        let client = &client;
        async move {
            let answer = client.post("/push/subscribe", body.clone()).await?;
            assert_eq!(answer.status, 400, "{body}: {answer:?}");
            assert_eq!(answer.body["error"]["field"], field, "{answer:?}");
            let message = answer.body["error"]["message"].as_str().unwrap_or("");
            assert!(message.contains(words), "{message:?} lacks {words:?}");
            anyhow::Ok(())
        }
    };
    let with = |endpoint: &str| json!({"endpoint": endpoint, "keys": {"p256dh": good.p256dh, "auth": good.auth}});
    refused(good.body(), "endpoint", "must be an https:// address").await?;
    refused(
        with("https://127.0.0.1:9/x"),
        "endpoint",
        "127.0.0.1 is an address of this box: a push endpoint must be on a public address",
    )
    .await?;
    refused(
        with("https://10.0.0.7/x"),
        "endpoint",
        "10.0.0.7 is a private (RFC 1918) address",
    )
    .await?;
    refused(
        with("https://169.254.169.254/x"),
        "endpoint",
        "169.254.169.254",
    )
    .await?;
    let mut bad = with("https://8.8.8.8/x");
    bad["keys"]["p256dh"] = json!("AAAA");
    refused(bad, "keys.p256dh", "it must be an uncompressed P-256 point").await?;
    let mut bad = with("https://8.8.8.8/x");
    bad["keys"]["auth"] = json!("c2hvcnQ");
    refused(bad, "keys.auth", "it must be 16").await?;
    let answer = client
        .post("/push/subscribe", json!({"endpoint": good.endpoint}))
        .await?;
    assert_eq!(answer.status, 400, "{answer:?}");
    let listed = client.get("/push/subscriptions").await?;
    assert_eq!(listed.body["subscriptions"], json!([]), "nothing stored");

    // With the test setting, loopback opens and nothing else does.
    let (_sim, _chatd, client, fake) = start(&[LOOPBACK]).await?;
    subscribe(&client, &fake.subscriber("y")).await?;
    let private = client
        .post("/push/subscribe", with("http://10.0.0.7/x"))
        .await?;
    assert_eq!(private.status, 400, "{private:?}");
    assert_eq!(private.body["error"]["field"], "endpoint");
    Ok(())
}
