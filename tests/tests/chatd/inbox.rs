//! The inbox end to end against the real `chatd`: notifications stored,
//! listed newest first, counted, read, deleted, streamed live, bounded to
//! the newest 500, stored once per idempotency key, and bad input refused
//! with nothing stored. Every wait is on a condition with a bound.

use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};
use tandem_tests::harness::{Chatd, Client, EventStream, Sim};

const QUICK: Duration = Duration::from_secs(20);

async fn start() -> anyhow::Result<(Sim, Chatd, Client)> {
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start(&sim.url(), &[]).await?;
    let client = chatd.client();
    Ok((sim, chatd, client))
}

fn notification(title: &str) -> Value {
    json!({
        "kind": "run_ended",
        "title": title,
        "body": "3 files summarised",
        "source": {"type": "trigger", "id": "t_nightly-1", "name": "Nightly report"},
    })
}

/// Posts one; answers the stored notification.
async fn post(client: &Client, body: Value) -> anyhow::Result<Value> {
    let made = client.post("/notifications", body).await?;
    anyhow::ensure!(made.status == 201, "create answered {made:?}");
    Ok(made.body)
}

async fn counts(client: &Client) -> anyhow::Result<(i64, i64)> {
    let count = client.get("/notifications/count").await?;
    anyhow::ensure!(count.status == 200, "{count:?}");
    Ok((
        count.body["unread"].as_i64().context("unread")?,
        count.body["total"].as_i64().context("total")?,
    ))
}

fn ids(list: &Value) -> Vec<String> {
    list["notifications"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| n["id"].as_str().unwrap_or("").to_string())
        .collect()
}

async fn delete(client: &Client, body: Value) -> anyhow::Result<Value> {
    let gone = client
        .call(reqwest::Method::DELETE, "/notifications", Some(body))
        .await?;
    anyhow::ensure!(gone.status == 200, "delete answered {gone:?}");
    Ok(gone.body)
}

/// Created, listed newest first, counted, filtered by unread, read by ids
/// and all, deleted read-only and by ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_are_listed_counted_read_and_deleted() -> anyhow::Result<()> {
    let (_sim, _chatd, client) = start().await?;
    let chat = client.create_chat().await?;
    let mut body = notification("Nightly report ran");
    body["conversation_id"] = json!(chat);
    let first = post(&client, body).await?;
    assert!(
        first["id"].as_str().is_some_and(|id| id.starts_with("n_")),
        "{first}"
    );
    assert_eq!(first["kind"], "run_ended");
    assert_eq!(first["title"], "Nightly report ran");
    assert_eq!(first["body"], "3 files summarised");
    assert_eq!(
        first["source"],
        json!({"type": "trigger", "id": "t_nightly-1", "name": "Nightly report"})
    );
    assert_eq!(first["conversation_id"], json!(chat));
    assert_eq!(
        first["link"],
        json!(format!("/v1/chat-app/conversations/{chat}"))
    );
    assert_eq!(first["read"], false);
    assert!(
        first["created"].as_str().is_some_and(|c| c.ends_with('Z')),
        "{first}"
    );

    let second = post(
        &client,
        json!({"kind": "run_failed", "title": "Backup failed",
               "source": {"type": "connector", "id": "slack"}}),
    )
    .await?;
    assert_eq!(second["conversation_id"], Value::Null);
    assert_eq!(second["link"], Value::Null);
    assert_eq!(second["body"], "");
    assert_eq!(second["source"]["name"], "");
    let third = post(&client, notification("Needs a look")).await?;
    let [first, second, third] =
        [&first, &second, &third].map(|n| n["id"].as_str().unwrap_or("").to_string());

    let list = client.get("/notifications").await?;
    assert_eq!(list.status, 200, "{list:?}");
    assert_eq!(
        ids(&list.body),
        [third.clone(), second.clone(), first.clone()]
    );
    assert_eq!(list.body["unread"], 3);
    assert_eq!(
        list.body["notifications"][2]["link"],
        json!(format!("/v1/chat-app/conversations/{chat}"))
    );
    let limited = client.get("/notifications?limit=2").await?;
    assert_eq!(ids(&limited.body), [third.clone(), second.clone()]);
    assert_eq!(counts(&client).await?, (3, 3));

    // Read by ids: only what was unread counts.
    let read = client
        .post(
            "/notifications/read",
            json!({"ids": [first.clone(), "n_nothing"]}),
        )
        .await?;
    assert_eq!(read.status, 200, "{read:?}");
    assert_eq!(read.body, json!({"updated": 1}));
    let again = client
        .post("/notifications/read", json!({"ids": [first.clone()]}))
        .await?;
    assert_eq!(again.body, json!({"updated": 0}));
    assert_eq!(counts(&client).await?, (2, 3));
    let unread = client.get("/notifications?unread=1").await?;
    assert_eq!(ids(&unread.body), [third.clone(), second.clone()]);
    assert_eq!(unread.body["unread"], 2);
    let all = client.get("/notifications").await?;
    assert_eq!(all.body["notifications"][2]["read"], true);

    // Deleting read ones only leaves the unread.
    assert_eq!(
        delete(&client, json!({"all": true, "read_only": true})).await?,
        json!({"deleted": 1})
    );
    assert_eq!(counts(&client).await?, (2, 2));
    assert_eq!(
        delete(&client, json!({"ids": [second.clone()], "read_only": true})).await?,
        json!({"deleted": 0}),
        "an unread one stays under read_only"
    );

    // Read all, then delete by ids.
    let read = client
        .post("/notifications/read", json!({"all": true}))
        .await?;
    assert_eq!(read.body, json!({"updated": 2}));
    assert_eq!(counts(&client).await?, (0, 2));
    assert_eq!(
        ids(&client.get("/notifications?unread=1").await?.body).len(),
        0
    );
    assert_eq!(
        delete(&client, json!({"ids": [second.clone()]})).await?,
        json!({"deleted": 1})
    );
    assert_eq!(ids(&client.get("/notifications").await?.body), [third]);
    assert_eq!(
        delete(&client, json!({"all": true})).await?,
        json!({"deleted": 1})
    );
    assert_eq!(counts(&client).await?, (0, 0));
    Ok(())
}

/// Reads SSE events until one of `kind`, within QUICK.
async fn next_of(stream: &mut EventStream, kind: &str) -> anyhow::Result<Value> {
    let seen = stream.read_until(QUICK, |e| e.kind == kind).await?;
    Ok(seen.last().context("an event")?.data.clone())
}

/// A device attached to the stream sees each change made after it attached:
/// created (the notification), read and deleted (what changed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_carries_changes_made_after_attaching() -> anyhow::Result<()> {
    let (_sim, _chatd, client) = start().await?;
    let before = post(&client, notification("before the device")).await?;
    // Attached once the answer's head is in: chatd subscribes before it.
    let mut stream = client.sse("/notifications/events").await?;
    let made = post(&client, notification("after the device")).await?;
    let created = next_of(&mut stream, "notification.created").await?;
    assert_eq!(created, made, "the frame is the stored notification");

    let id = made["id"].as_str().context("id")?;
    client
        .post("/notifications/read", json!({"ids": [id]}))
        .await?;
    let read = next_of(&mut stream, "notification.read").await?;
    assert_eq!(read, json!({"ids": [id]}));
    client
        .post("/notifications/read", json!({"all": true}))
        .await?;
    assert_eq!(
        next_of(&mut stream, "notification.read").await?,
        json!({"all": true})
    );
    delete(&client, json!({"all": true, "read_only": true})).await?;
    let deleted = next_of(&mut stream, "notification.deleted").await?;
    assert_eq!(deleted, json!({"all": true, "read_only": true}));

    // Live only: a second device sees nothing of the past, only what follows.
    let mut late = client.sse("/notifications/events").await?;
    let last = post(&client, notification("for both")).await?;
    let events = late
        .read_until(QUICK, |e| e.kind == "notification.created")
        .await?;
    assert_eq!(events.len(), 1, "no replay: {events:?}");
    assert_eq!(events[0].data, last);
    assert_eq!(next_of(&mut stream, "notification.created").await?, last);
    assert_ne!(before["id"], last["id"]);
    Ok(())
}

/// A post with a key already stored stores nothing: 201 then 200 with the
/// same notification, one entry, one `notification.created`, counted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_posted_twice_is_stored_once() -> anyhow::Result<()> {
    let (_sim, chatd, client) = start().await?;
    let mut stream = client.sse("/notifications/events").await?;
    let key = "trigger:t_nightly-1:2026-12-01T09:00:00Z";
    let mut body = notification("Nightly report ran");
    body["key"] = json!(key);
    let first = client.post("/notifications", body.clone()).await?;
    assert_eq!(first.status, 201, "{first:?}");
    assert_eq!(first.body["key"], key);

    // A retry (the answer was lost, triggerd restarted), even with other text.
    body["title"] = json!("Nightly report ran (retry)");
    let again = client.post("/notifications", body.clone()).await?;
    assert_eq!(again.status, 200, "{again:?}");
    assert_eq!(again.body["id"], first.body["id"]);
    assert_eq!(again.body, first.body, "the stored one, as it was");
    assert_eq!(counts(&client).await?, (1, 1));

    // Another key, and no key twice, are new entries.
    let mut other = notification("Backup ran");
    other["key"] = json!("trigger:t_backup:1");
    let other = post(&client, other).await?;
    let plain = post(&client, notification("no key")).await?;
    let plain_again = post(&client, notification("no key")).await?;
    assert_ne!(plain["id"], plain_again["id"]);
    assert_eq!(plain["key"], Value::Null);
    assert_eq!(counts(&client).await?, (4, 4));
    let list = client.get("/notifications").await?;
    assert_eq!(
        ids(&list.body)
            .iter()
            .filter(|id| **id == first.body["id"])
            .count(),
        1
    );

    // The stream: the keyed one once, then the next ones.
    let events = stream
        .read_until(QUICK, |e| e.data["id"] == plain_again["id"])
        .await?;
    let created: Vec<&Value> = events
        .iter()
        .filter(|e| e.kind == "notification.created")
        .map(|e| &e.data["id"])
        .collect();
    assert_eq!(
        created,
        [
            &first.body["id"],
            &other["id"],
            &plain["id"],
            &plain_again["id"]
        ],
        "{events:?}"
    );

    let metrics = reqwest::get(format!("{}/metrics", chatd.url()))
        .await?
        .text()
        .await?;
    assert!(
        metrics
            .lines()
            .any(|l| l == r#"tandem_notifications_total{kind="run_ended"} 4"#),
        "counted once per stored notification: {metrics}"
    );
    Ok(())
}

/// The inbox keeps the newest 500: the 501st drops the oldest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_keeps_the_newest_500() -> anyhow::Result<()> {
    let (_sim, chatd, client) = start().await?;
    let mut made = Vec::new();
    for i in 0..501 {
        let n = post(&client, notification(&format!("run {i}"))).await?;
        made.push(n["id"].as_str().context("id")?.to_string());
    }
    assert_eq!(counts(&client).await?, (500, 500));
    let list = client.get("/notifications?limit=500").await?;
    let kept = ids(&list.body);
    assert_eq!(kept.len(), 500);
    assert_eq!(kept.first(), made.last());
    assert_eq!(kept.last(), made.get(1));
    assert!(!kept.contains(&made[0]), "the oldest is gone");

    let metrics = reqwest::get(format!("{}/metrics", chatd.url()))
        .await?
        .text()
        .await?;
    assert!(
        metrics
            .lines()
            .any(|l| l == r#"tandem_notifications_total{kind="run_ended"} 501"#),
        "{metrics}"
    );
    Ok(())
}

/// Each bad input is 400 naming the field (and the limit), and stores nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_naming_the_field_and_stores_nothing() -> anyhow::Result<()> {
    let (_sim, _chatd, client) = start().await?;
    post(&client, notification("the one")).await?;
    let with = |change: &dyn Fn(&mut Value)| {
        let mut body = notification("a title");
        change(&mut body);
        body
    };
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "unknown kind",
            with(&|b| b["kind"] = json!("run_exploded")),
            "kind",
        ),
        (
            "title of 201",
            with(&|b| b["title"] = json!("t".repeat(201))),
            "title",
        ),
        ("empty title", with(&|b| b["title"] = json!("")), "title"),
        (
            "body of 2001",
            with(&|b| b["body"] = json!("b".repeat(2001))),
            "body",
        ),
        (
            "bad source id",
            with(&|b| b["source"]["id"] = json!("has space")),
            "source.id",
        ),
        (
            "long source id",
            with(&|b| b["source"]["id"] = json!("i".repeat(65))),
            "source.id",
        ),
        (
            "empty source id",
            with(&|b| b["source"]["id"] = json!("")),
            "source.id",
        ),
        (
            "source type",
            with(&|b| b["source"]["type"] = json!("cron")),
            "source.type",
        ),
        (
            "source name",
            with(&|b| b["source"]["name"] = json!("n".repeat(201))),
            "source.name",
        ),
        (
            "chat id",
            with(&|b| b["conversation_id"] = json!("../etc")),
            "conversation_id",
        ),
        ("empty key", with(&|b| b["key"] = json!("")), "key"),
        (
            "key with a space",
            with(&|b| b["key"] = json!("a b")),
            "key",
        ),
        (
            "key with a slash",
            with(&|b| b["key"] = json!("a/b")),
            "key",
        ),
        (
            "key of 129",
            with(&|b| b["key"] = json!("k".repeat(129))),
            "key",
        ),
        ("key not text", with(&|b| b["key"] = json!(7)), "key"),
        (
            "no source",
            with(&|b| {
                if let Some(o) = b.as_object_mut() {
                    o.remove("source");
                }
            }),
            "source",
        ),
    ];
    for (what, body, field) in cases {
        let answer = client.post("/notifications", body).await?;
        assert_eq!(answer.status, 400, "{what}: {answer:?}");
        assert_eq!(answer.body["error"]["type"], "bad_input", "{what}");
        assert_eq!(answer.body["error"]["field"], field, "{what}: {answer:?}");
        let message = answer.body["error"]["message"].as_str().unwrap_or("");
        assert!(
            message.starts_with(&format!("{field}: ")),
            "{what}: {message}"
        );
        assert_eq!(counts(&client).await?, (1, 1), "{what}: nothing stored");
    }
    // The limits are named.
    let title = client
        .post(
            "/notifications",
            with(&|b| b["title"] = json!("t".repeat(201))),
        )
        .await?;
    assert_eq!(title.body["error"]["limit"], 200, "{title:?}");
    let key = client
        .post(
            "/notifications",
            with(&|b| b["key"] = json!("k".repeat(129))),
        )
        .await?;
    assert_eq!(key.body["error"]["limit"], 128, "{key:?}");
    let fits = client
        .post(
            "/notifications",
            with(&|b| b["key"] = json!("k".repeat(128))),
        )
        .await?;
    assert_eq!(fits.status, 201, "a key of 128 fits: {fits:?}");
    delete(&client, json!({"ids": [fits.body["id"].clone()]})).await?;
    assert!(
        title.body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("1 to 200")),
        "{title:?}"
    );

    for limit in ["0", "501", "many"] {
        let answer = client.get(&format!("/notifications?limit={limit}")).await?;
        assert_eq!(answer.status, 400, "limit={limit}: {answer:?}");
        assert_eq!(answer.body["error"]["field"], "limit");
        assert!(
            answer.body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("1 to 500")),
            "{answer:?}"
        );
    }
    let ok = client.get("/notifications?limit=500").await?;
    assert_eq!(ok.status, 200);

    // Read and delete take ids or all, never both nor neither.
    for body in [
        json!({}),
        json!({"ids": ["n_1"], "all": true}),
        json!({"all": false}),
    ] {
        let read = client.post("/notifications/read", body.clone()).await?;
        assert_eq!(read.status, 400, "{body}: {read:?}");
        assert_eq!(read.body["error"]["field"], "ids");
        let gone = client
            .call(
                reqwest::Method::DELETE,
                "/notifications",
                Some(body.clone()),
            )
            .await?;
        assert_eq!(gone.status, 400, "{body}: {gone:?}");
        assert_eq!(counts(&client).await?, (1, 1));
    }
    let too_many: Vec<String> = (0..501).map(|i| format!("n_{i}")).collect();
    let read = client
        .post("/notifications/read", json!({"ids": too_many}))
        .await?;
    assert_eq!(read.status, 400, "{read:?}");
    assert_eq!(read.body["error"]["limit"], 500);
    Ok(())
}
