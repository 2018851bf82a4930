//! chatd end to end: the real `chatd` and `engine-sim` binaries, real
//! sockets, real SQLite. Every wait is on a condition with a bound; the only
//! clock waits are the outages the scenarios are about.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};
use tandem_tests::harness::{
    metric, run_id, sim_answer, wait_until, Chatd, Client, EventStream, Sim, SseEvent, FORWARD_KEY,
};

/// A generous bound for anything that should take well under a second.
const QUICK: Duration = Duration::from_secs(20);
/// A bound for a whole answer (a few seconds at the paces used here).
const ANSWER: Duration = Duration::from_secs(60);

/// A sim answering as fast as it can unless a cue says otherwise, and a chatd using it.
async fn start(env: &[(&str, &str)]) -> anyhow::Result<(Sim, Chatd, Client)> {
    start_with(&["--tokens-per-second", "0"], env).await
}

async fn start_with(
    sim_args: &[&str],
    env: &[(&str, &str)],
) -> anyhow::Result<(Sim, Chatd, Client)> {
    let sim = Sim::start(sim_args)?;
    let chatd = Chatd::start(&sim.url(), env).await?;
    let client = chatd.client();
    Ok((sim, chatd, client))
}

/// A message whose text carries a sim cue with a unique id.
fn cued(words: &str, cue: &str, id: &str) -> String {
    format!("{words} [sim {cue} id={id}]")
}

/// The text of message `id` in a snapshot's transcript.
fn message_text(snapshot: &Value, id: &str) -> Option<String> {
    snapshot["messages"]
        .as_array()?
        .iter()
        .find(|m| m["id"] == id)?["text"]
        .as_str()
        .map(str::to_string)
}

/// The (role, text) pairs of a snapshot's transcript.
fn transcript(snapshot: &Value) -> Vec<(String, String)> {
    snapshot["messages"]
        .as_array()
        .map(|ms| {
            ms.iter()
                .map(|m| {
                    (
                        m["role"].as_str().unwrap_or("").to_string(),
                        m["text"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The message a run writes, as its record names it.
async fn run_message(client: &Client, chat: &str, run: &str) -> anyhow::Result<String> {
    let record = client.run(chat, run).await?;
    Ok(record["message_id"]
        .as_str()
        .context("the run names no message")?
        .to_string())
}

/// The stored text of the message `run` writes.
async fn stored_answer(client: &Client, chat: &str, run: &str) -> anyhow::Result<String> {
    let message = run_message(client, chat, run).await?;
    let snapshot = client.snapshot(chat).await?;
    message_text(&snapshot, &message)
        .with_context(|| format!("message {message} not in the transcript"))
}

fn finished(run: &str) -> impl FnMut(&SseEvent) -> bool + '_ {
    move |e| e.kind == "run.finished" && e.data["run_id"] == run
}

/// One device: the snapshot it attached with, then every event it read, over
/// as many connections as it needed. It checks seqs as they come: each one
/// exactly once, strictly increasing, no gaps.
struct Device {
    name: String,
    /// Message id → text as this device rebuilt it.
    texts: HashMap<String, String>,
    attached_at: i64,
    seqs: Vec<i64>,
    kinds: Vec<String>,
    seen: Vec<SseEvent>,
    stream: Option<EventStream>,
}

impl Device {
    /// Loads the snapshot and attaches from its seq.
    async fn attach(client: &Client, chat: &str, name: &str) -> anyhow::Result<Device> {
        let snapshot = client.snapshot(chat).await?;
        let attached_at = snapshot["seq"].as_i64().context("snapshot seq")?;
        let texts = snapshot["messages"]
            .as_array()
            .context("snapshot messages")?
            .iter()
            .map(|m| {
                (
                    m["id"].as_str().unwrap_or("").to_string(),
                    m["text"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        let stream = client.events(chat, attached_at).await?;
        Ok(Device {
            name: name.into(),
            texts,
            attached_at,
            seqs: Vec::new(),
            kinds: Vec::new(),
            seen: Vec::new(),
            stream: Some(stream),
        })
    }

    fn last_seq(&self) -> i64 {
        self.seqs.last().copied().unwrap_or(self.attached_at)
    }

    fn apply(&mut self, event: &SseEvent) {
        let seq = event
            .seq
            .unwrap_or_else(|| panic!("{}: an event without a seq: {event:?}", self.name));
        assert_eq!(
            seq,
            self.last_seq() + 1,
            "{}: after seq {} came {seq} ({}): a gap or a repeat",
            self.name,
            self.last_seq(),
            event.kind
        );
        self.seqs.push(seq);
        self.kinds.push(event.kind.clone());
        self.seen.push(event.clone());
        match event.kind.as_str() {
            "message.created" => {
                let m = &event.data["message"];
                let id = m["id"].as_str().unwrap_or("").to_string();
                self.texts
                    .entry(id)
                    .or_insert_with(|| m["text"].as_str().unwrap_or("").to_string());
            }
            "text.delta" => {
                let id = event.data["message_id"].as_str().unwrap_or("").to_string();
                self.texts
                    .entry(id)
                    .or_default()
                    .push_str(event.data["text"].as_str().unwrap_or(""));
            }
            _ => {}
        }
    }

    /// Reads until `stop`, within `bound`, applying every event.
    async fn read_until<F>(&mut self, bound: Duration, stop: F) -> anyhow::Result<Vec<SseEvent>>
    where
        F: FnMut(&SseEvent) -> bool,
    {
        let stream = self
            .stream
            .as_mut()
            .with_context(|| format!("{} is not attached", self.name))?;
        let events = stream.read_until(bound, stop).await?;
        for event in &events {
            self.apply(event);
        }
        Ok(events)
    }

    /// Reads until `n` more `text.delta` events have come.
    async fn read_deltas(&mut self, n: usize) -> anyhow::Result<()> {
        let mut seen = 0;
        self.read_until(ANSWER, |e| {
            if e.kind == "text.delta" {
                seen += 1;
            }
            seen >= n
        })
        .await
        .map(|_| ())
    }

    /// Reads what the stream still delivers until it ends (its server died).
    async fn read_to_end(&mut self, bound: Duration) -> anyhow::Result<()> {
        let mut stream = self
            .stream
            .take()
            .with_context(|| format!("{} is not attached", self.name))?;
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            match tokio::time::timeout_at(deadline, stream.next()).await {
                Err(_) => anyhow::bail!("{}: the stream did not end within {bound:?}", self.name),
                Ok(Ok(Some(event))) => self.apply(&event),
                Ok(Ok(None)) | Ok(Err(_)) => return Ok(()),
            }
        }
    }

    fn detach(&mut self) {
        self.stream = None;
    }

    async fn reconnect(&mut self, client: &Client, chat: &str) -> anyhow::Result<()> {
        self.stream = Some(client.events(chat, self.last_seq()).await?);
        Ok(())
    }

    /// Reconnects naming its last seq as `?after=` instead of `Last-Event-ID`.
    async fn reconnect_by_query(&mut self, client: &Client, chat: &str) -> anyhow::Result<()> {
        self.stream = Some(client.events_query(chat, self.last_seq()).await?);
        Ok(())
    }

    fn text(&self, message: &str) -> String {
        self.texts.get(message).cloned().unwrap_or_default()
    }
}

/// A request with full control of headers and body; answers status and JSON.
async fn raw(
    client: &Client,
    method: reqwest::Method,
    path: &str,
    key: Option<&str>,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> anyhow::Result<(u16, Value)> {
    let mut request = client.http.request(method, client.api(path));
    if let Some(key) = key {
        request = request.header("x-forward-key", key);
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    let response = request.send().await?;
    let status = response.status().as_u16();
    let text = response.text().await?;
    Ok((
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    ))
}

/// Asserts the CONTRACT's error shape and returns (type, message).
fn error_of(what: &str, body: &Value) -> (String, String) {
    let kind = body["error"]["type"].as_str();
    let message = body["error"]["message"].as_str();
    assert!(
        kind.is_some_and(|k| !k.is_empty()) && message.is_some_and(|m| !m.is_empty()),
        "{what}: not the error shape {{\"error\":{{\"type\",\"message\"}}}}: {body}"
    );
    (
        kind.unwrap_or_default().to_string(),
        message.unwrap_or_default().to_string(),
    )
}

/// Every conversation (trash included) and every snapshot: what "stored state" means here.
async fn stored_state(client: &Client) -> anyhow::Result<Value> {
    let mut state = serde_json::Map::new();
    for trash in ["0", "1"] {
        let list = client
            .get(&format!("/conversations?limit=200&trash={trash}"))
            .await?;
        anyhow::ensure!(list.status == 200, "list answered {list:?}");
        for c in list.body["conversations"]
            .as_array()
            .context("conversations")?
        {
            let id = c["id"].as_str().context("id")?;
            state.insert(id.to_string(), client.snapshot(id).await?);
        }
    }
    Ok(Value::Object(state))
}

async fn metrics_text(chatd: &Chatd) -> anyhow::Result<String> {
    let response = reqwest::get(format!("{}/metrics", chatd.url())).await?;
    anyhow::ensure!(
        response.status() == 200,
        "/metrics answered {}",
        response.status()
    );
    Ok(response.text().await?)
}

// 1 ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_devices_see_one_answer_whole_across_reconnects() -> anyhow::Result<()> {
    let (_sim, _chatd, client) = start(&[]).await?;
    let chat = client.create_chat().await?;
    let n = 60;
    let sent = client
        .send(
            &chat,
            &cued("tell me", &format!("tokens={n} tps=40"), "three-devices"),
        )
        .await?;
    let run = run_id(&sent)?;

    let mut tasks = Vec::new();
    for (name, drop_after) in [("phone", None), ("laptop", Some(10)), ("tablet", Some(25))] {
        let client = client.clone();
        let chat = chat.clone();
        let run = run.clone();
        tasks.push(tokio::spawn(async move {
            let mut device = Device::attach(&client, &chat, name).await?;
            if let Some(k) = drop_after {
                device.read_deltas(k).await?;
                assert!(
                    !device.kinds.iter().any(|k| k == "run.finished"),
                    "{name} should drop mid-answer"
                );
                device.detach();
                // Come back once the answer has moved on without this device.
                let away_from = device.last_seq();
                wait_until(
                    "the answer to move on while the device is away",
                    ANSWER,
                    || async {
                        let seq = client.snapshot(&chat).await.ok()?["seq"].as_i64()?;
                        (seq > away_from + 5).then_some(())
                    },
                )
                .await?;
                // One comes back as a reloaded page does (`?after=`), one as
                // EventSource reconnects (`Last-Event-ID`).
                if name == "tablet" {
                    device.reconnect_by_query(&client, &chat).await?;
                } else {
                    device.reconnect(&client, &chat).await?;
                }
            }
            device.read_until(ANSWER, finished(&run)).await?;
            anyhow::Ok(device)
        }));
    }
    let mut devices = Vec::new();
    for task in tasks {
        devices.push(task.await??);
    }

    let message = run_message(&client, &chat, &run).await?;
    let stored = stored_answer(&client, &chat, &run).await?;
    assert_eq!(stored, sim_answer(n), "the stored answer");
    for device in &devices {
        assert_eq!(
            device.text(&message),
            sim_answer(n),
            "{} rebuilt another text",
            device.name
        );
        // Seen once each, in order, no gaps (checked as they came), ending at run.finished.
        assert!(
            device.seqs.windows(2).all(|w| w[1] == w[0] + 1),
            "{}: {:?}",
            device.name,
            device.seqs
        );
        assert_eq!(
            device.seqs.first().copied(),
            Some(device.attached_at + 1),
            "{}",
            device.name
        );
        assert_eq!(
            device.kinds.last().map(String::as_str),
            Some("run.finished"),
            "{}",
            device.name
        );
    }
    let run_record = client.run(&chat, &run).await?;
    assert_eq!(run_record["status"], "done");
    Ok(())
}

// 2 ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_far_behind_gets_reset_and_catches_up_from_the_snapshot() -> anyhow::Result<()> {
    let (_sim, _chatd, client) = start(&[]).await?;
    let chat = client.create_chat().await?;
    let n = 2_600;
    let sent = client
        .send(
            &chat,
            &cued("a long one", &format!("tokens={n} tps=0"), "reset"),
        )
        .await?;
    let run = run_id(&sent)?;
    client.wait_run(&chat, &run, &["done"], ANSWER).await?;
    let head = client.snapshot(&chat).await?["seq"]
        .as_i64()
        .context("seq")?;
    assert!(head > 2_500, "the chat has {head} events");

    // 2,600 events behind: one `reset` naming the current seq.
    let mut behind = client.events(&chat, 1).await?;
    let first = behind.read_until(QUICK, |_| true).await?.remove(0);
    assert_eq!(first.kind, "reset", "first event {first:?}");
    assert_eq!(
        first.data["seq"].as_i64(),
        Some(head),
        "reset data {}",
        first.data
    );
    drop(behind);

    // Within the limit: every event after its seq, in order, without reset.
    let after = head - 1_990;
    let mut near = client.events(&chat, after).await?;
    let events = near.read_until(QUICK, |e| e.seq == Some(head)).await?;
    let seqs: Vec<i64> = events.iter().filter_map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (after + 1..=head).collect::<Vec<_>>(),
        "catching up 1,990 events"
    );
    assert!(events.iter().all(|e| e.kind != "reset"));
    drop(near);

    // The reset device reloads the snapshot, attaches from its seq and follows the next answer.
    let mut device = Device::attach(&client, &chat, "reloaded").await?;
    assert_eq!(device.attached_at, head);
    assert_eq!(stored_answer(&client, &chat, &run).await?, sim_answer(n));
    let next = run_id(
        &client
            .send(
                &chat,
                &cued("and a short one", "tokens=30 tps=0", "reset-2"),
            )
            .await?,
    )?;
    device.read_until(ANSWER, finished(&next)).await?;
    let message = run_message(&client, &chat, &next).await?;
    assert_eq!(device.text(&message), sim_answer(30));
    assert_eq!(stored_answer(&client, &chat, &next).await?, sim_answer(30));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_whose_missed_events_were_dropped_gets_reset_not_a_gap() -> anyhow::Result<()> {
    let (_sim, mut chatd, client) = start(&[]).await?;
    let chat = client.create_chat().await?;
    let n = 20;
    // Attached before the send, so the answer's message.created is among
    // what it sees however fast the run starts.
    let mut device = Device::attach(&client, &chat, "old phone").await?;
    let run = run_id(
        &client
            .send(&chat, &cued("last week", &format!("tokens={n}"), "dropped"))
            .await?,
    )?;
    device.read_until(ANSWER, finished(&run)).await?;
    // The phone went offline just before the answer's message was created:
    // the next event is kept, the deltas after it will not be.
    let created = device
        .seen
        .iter()
        .find(|e| e.kind == "message.created" && e.data["message"]["role"] == "assistant");
    let offline_at = created
        .and_then(|e| e.seq)
        .context("the answer's message.created")?
        - 1;
    drop(device);

    // A week passes: housekeeping drops `text.delta` events older than its
    // days (messages keep their text). Age them, and let chatd's start run it.
    chatd.sigterm(Duration::from_secs(5))?;
    {
        let db = rusqlite::Connection::open(chatd.data_dir().join("chat.sqlite3"))?;
        db.execute(
            "UPDATE events SET created = created - 8 * 86400 WHERE kind = 'text.delta'",
            [],
        )?;
    }
    chatd.restart().await?;
    let db_path = chatd.data_dir().join("chat.sqlite3");
    wait_until(
        "housekeeping to drop the week-old deltas",
        QUICK,
        || async {
            let db = rusqlite::Connection::open_with_flags(
                &db_path,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
            )
            .ok()?;
            let left: i64 = db
                .query_row(
                    "SELECT COUNT(*) FROM events WHERE kind = 'text.delta'",
                    [],
                    |r| r.get(0),
                )
                .ok()?;
            (left == 0).then_some(())
        },
    )
    .await?;

    // The phone comes back: what it gets has no holes; where the log has
    // one, it is told to reset and reload.
    let head = client.snapshot(&chat).await?["seq"]
        .as_i64()
        .context("seq")?;
    let mut stream = client.events(&chat, offline_at).await?;
    let events = stream
        .read_until(QUICK, |e| e.kind == "reset" || e.seq == Some(head))
        .await?;
    let mut expected = offline_at;
    for event in &events {
        if event.kind == "reset" {
            assert_eq!(event.data["seq"].as_i64(), Some(head), "{}", event.data);
            continue;
        }
        assert_eq!(
            event.seq,
            Some(expected + 1),
            "a hole in the events after {expected}: {events:?}"
        );
        expected += 1;
    }
    assert_eq!(
        events.last().map(|e| e.kind.as_str()),
        Some("reset"),
        "{events:?}"
    );
    // The snapshot still holds the whole answer.
    assert_eq!(stored_answer(&client, &chat, &run).await?, sim_answer(n));
    Ok(())
}

// 3 ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_mid_answer_keeps_the_text_and_continue_finishes_it() -> anyhow::Result<()> {
    let (_sim, mut chatd, client) = start(&[]).await?;
    let chat = client.create_chat().await?;
    let n = 120;
    let sent = client
        .send(
            &chat,
            &cued("crash me", &format!("tokens={n} tps=40"), "kill9"),
        )
        .await?;
    let run = run_id(&sent)?;
    let mut device = Device::attach(&client, &chat, "phone").await?;
    device.read_deltas(15).await?;

    chatd.kill9();
    device.read_to_end(QUICK).await?;
    assert!(
        client.snapshot(&chat).await.is_err(),
        "chatd should be gone"
    );

    chatd.restart().await?;
    let record = client
        .wait_run(&chat, &run, &["interrupted"], QUICK)
        .await?;
    assert!(
        record["error"].as_str().is_some(),
        "an interrupted run says why: {record}"
    );
    let message = run_message(&client, &chat, &run).await?;
    let seen = device.text(&message);
    let stored = stored_answer(&client, &chat, &run).await?;
    assert!(!seen.is_empty());
    assert!(
        stored.starts_with(&seen),
        "stored {stored:?} does not begin with what the device saw {seen:?}"
    );
    assert!(
        sim_answer(n).starts_with(&stored),
        "stored {stored:?} is not a beginning of the answer"
    );
    assert!(stored.len() < sim_answer(n).len(), "the answer was cut");

    // The device comes back with its last seq: the rest, no gap, no repeat.
    device.reconnect(&client, &chat).await?;
    device.read_until(QUICK, finished(&run)).await?;
    assert_eq!(device.text(&message), stored);

    let resumed = client
        .post(&format!("/conversations/{chat}/continue"), json!({}))
        .await?;
    assert_eq!(resumed.status, 202, "continue answered {resumed:?}");
    let resumed = run_id(&resumed.body)?;
    device.read_until(ANSWER, finished(&resumed)).await?;
    assert_eq!(client.run(&chat, &resumed).await?["status"], "done");
    assert_eq!(
        run_message(&client, &chat, &resumed).await?,
        message,
        "continue writes the same message"
    );
    assert_eq!(
        stored_answer(&client, &chat, &resumed).await?,
        sim_answer(n)
    );
    assert_eq!(device.text(&message), sim_answer(n));
    Ok(())
}

// 4 ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_outage_mid_answer_is_retried_to_the_whole_answer() -> anyhow::Result<()> {
    let (mut sim, _chatd, client) = start(&[("QSE_CHAT_RETRY_MAX_WAIT_S", "2")]).await?;
    let chat = client.create_chat().await?;
    let n = 80;
    let sent = client
        .send(
            &chat,
            &cued("survive", &format!("tokens={n} tps=40"), "outage"),
        )
        .await?;
    let run = run_id(&sent)?;
    let mut device = Device::attach(&client, &chat, "phone").await?;
    device.read_deltas(10).await?;

    sim.kill();
    // The outage itself: the engine stays away for 5 s.
    tokio::time::sleep(Duration::from_secs(5)).await;
    sim.restart()?;

    device.read_until(ANSWER, finished(&run)).await?;
    let record = client.run(&chat, &run).await?;
    assert_eq!(record["status"], "done", "{record}");
    assert!(
        device.kinds.iter().any(|k| k == "run.retrying"),
        "no run.retrying event: {:?}",
        device.kinds
    );
    // The engine was asked to continue the answer it had given, not to start over.
    let requests = sim.requests().await?;
    let resumed = requests.last().context("a request after the outage")?;
    let last = resumed["body"]["messages"]
        .as_array()
        .and_then(|m| m.last())
        .context("messages")?;
    assert_eq!(last["role"], "assistant", "{resumed}");
    let prefill = last["content"].as_str().unwrap_or("");
    assert!(
        !prefill.is_empty() && sim_answer(n).starts_with(prefill),
        "prefill {prefill:?}"
    );
    let message = run_message(&client, &chat, &run).await?;
    assert_eq!(stored_answer(&client, &chat, &run).await?, sim_answer(n));
    assert_eq!(device.text(&message), sim_answer(n));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_that_stays_away_ends_the_run_interrupted_with_its_text() -> anyhow::Result<()> {
    let (mut sim, _chatd, client) = start(&[("QSE_CHAT_RETRY_WINDOW_S", "3")]).await?;
    let chat = client.create_chat().await?;
    let n = 80;
    let sent = client
        .send(&chat, &cued("gone", &format!("tokens={n} tps=40"), "gone"))
        .await?;
    let run = run_id(&sent)?;
    let mut device = Device::attach(&client, &chat, "phone").await?;
    device.read_deltas(10).await?;
    sim.kill();

    let events = device.read_until(ANSWER, finished(&run)).await?;
    let end = events.last().context("run.finished")?;
    assert_eq!(end.data["status"], "interrupted", "{}", end.data);
    assert!(
        end.data["error"]
            .as_str()
            .is_some_and(|e| e.contains("engine")),
        "{}",
        end.data
    );
    assert!(device.kinds.iter().any(|k| k == "run.retrying"));
    let message = run_message(&client, &chat, &run).await?;
    let stored = stored_answer(&client, &chat, &run).await?;
    assert!(
        !stored.is_empty() && sim_answer(n).starts_with(&stored),
        "kept text {stored:?}"
    );
    assert_eq!(device.text(&message), stored);
    Ok(())
}

// 5 ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_third_run_queues_behind_max_runs_and_then_runs() -> anyhow::Result<()> {
    let (_sim, _chatd, client) = start(&[("QSE_CHAT_MAX_RUNS", "2")]).await?;
    let mut chats = Vec::new();
    for _ in 0..3 {
        let chat = client.create_chat().await?;
        let device = Device::attach(&client, &chat, &chat).await?;
        chats.push((chat, device));
    }
    let sends = chats.iter().enumerate().map(|(i, (chat, _))| {
        let client = client.clone();
        let text = cued("busy", "tokens=60 tps=40", &format!("queue-{i}"));
        let chat = chat.clone();
        async move { client.send(&chat, &text).await }
    });
    let sent = futures_util::future::join_all(sends).await;
    let mut queued = Vec::new();
    for ((chat, device), sent) in chats.iter_mut().zip(sent) {
        let run = run_id(&sent?)?;
        let events = device.read_until(ANSWER, finished(&run)).await?;
        assert_eq!(
            events.last().context("end")?.data["status"],
            "done",
            "{chat}"
        );
        if let Some(q) = events.iter().find(|e| e.kind == "run.queued") {
            queued.push(q.data["position"].clone());
            let started = events
                .iter()
                .position(|e| e.kind == "run.started")
                .context("run.started")?;
            let queued_at = events
                .iter()
                .position(|e| e.kind == "run.queued")
                .context("run.queued")?;
            assert!(queued_at < started, "queued before it started");
        }
        assert_eq!(stored_answer(&client, chat, &run).await?, sim_answer(60));
    }
    assert_eq!(
        queued,
        vec![json!(1)],
        "exactly one run waits, first in line"
    );
    Ok(())
}

// 6 ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_sent_during_a_run_reaches_the_next_request() -> anyhow::Result<()> {
    let (sim, _chatd, client) = start(&[]).await?;
    let chat = client.create_chat().await?;
    let sent = client
        .send(&chat, &cued("first", "tokens=60 tps=40", "pending-1"))
        .await?;
    let run = run_id(&sent)?;
    let mut device = Device::attach(&client, &chat, "phone").await?;
    device.read_deltas(3).await?;

    let later = cued("one more thing", "tokens=7 tps=0", "pending-2");
    let answer = client
        .post(
            &format!("/conversations/{chat}/messages"),
            json!({"text": later}),
        )
        .await?;
    assert_eq!(answer.status, 202, "{answer:?}");
    let pending_id = answer.body["pending_id"]
        .as_str()
        .context("a pending_id while a run works")?
        .to_string();
    assert!(answer.body.get("run_id").is_none(), "{}", answer.body);

    device.read_until(ANSWER, finished(&run)).await?;
    let delivered_at = device
        .kinds
        .iter()
        .position(|k| k == "pending.delivered")
        .context("a pending.delivered event")?;
    let first_end = device
        .kinds
        .iter()
        .position(|k| k == "message.updated")
        .context("first answer done")?;
    assert!(
        first_end < delivered_at,
        "delivered after the first answer, at the next request"
    );

    let snapshot = client.snapshot(&chat).await?;
    assert_eq!(snapshot["pending"], json!([]), "nothing waits any more");
    let roles_texts = transcript(&snapshot);
    assert_eq!(roles_texts.len(), 4, "{roles_texts:?}");
    assert_eq!(roles_texts[1], ("assistant".into(), sim_answer(60)));
    assert_eq!(roles_texts[2], ("user".into(), later.clone()));
    assert_eq!(roles_texts[3], ("assistant".into(), sim_answer(7)));
    assert_eq!(client.run(&chat, &run).await?["status"], "done");

    let requests = sim.requests().await?;
    assert_eq!(requests.len(), 2, "{requests:?}");
    let contents = |r: &Value| -> Vec<String> {
        r["body"]["messages"]
            .as_array()
            .map(|ms| {
                ms.iter()
                    .filter_map(|m| m["content"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert!(
        !contents(&requests[0]).contains(&later),
        "the first request cannot know it"
    );
    assert!(
        contents(&requests[1]).contains(&later),
        "the next request carries it: {:?}",
        contents(&requests[1])
    );
    let delivered = &device.seen[delivered_at];
    assert_eq!(
        delivered.data["pending_id"],
        pending_id.as_str(),
        "{}",
        delivered.data
    );
    let delivered_message = delivered.data["message_id"]
        .as_str()
        .context("message_id")?;
    assert_eq!(
        snapshot["messages"][2]["id"], delivered_message,
        "the delivered message is in the transcript"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_keeps_a_waiting_message_and_send_now_delivers_it() -> anyhow::Result<()> {
    let (sim, _chatd, client) = start(&[]).await?;
    let chat = client.create_chat().await?;
    let sent = client
        .send(&chat, &cued("long", "tokens=400 tps=40", "stop-1"))
        .await?;
    let run = run_id(&sent)?;
    let mut device = Device::attach(&client, &chat, "phone").await?;
    device.read_deltas(3).await?;
    let later = cued("wait for me", "tokens=5 tps=0", "stop-2");
    let pending_id = client.send(&chat, &later).await?["pending_id"]
        .as_str()
        .context("pending_id")?
        .to_string();

    let stop = client
        .post(&format!("/conversations/{chat}/stop"), json!({}))
        .await?;
    assert_eq!(stop.status, 200, "{stop:?}");
    let events = device.read_until(QUICK, finished(&run)).await?;
    assert_eq!(events.last().context("end")?.data["status"], "stopped");
    let record = client.run(&chat, &run).await?;
    assert_eq!(record["status"], "stopped");
    let snapshot = client.snapshot(&chat).await?;
    let waiting: Vec<&str> = snapshot["pending"]
        .as_array()
        .context("pending")?
        .iter()
        .filter_map(|p| p["id"].as_str())
        .collect();
    assert_eq!(
        waiting,
        vec![pending_id.as_str()],
        "the waiting message stays"
    );
    let stopped_text = stored_answer(&client, &chat, &run).await?;
    assert!(
        sim_answer(400).starts_with(&stopped_text) && stopped_text.len() < sim_answer(400).len()
    );
    assert!(!device.kinds.iter().any(|k| k == "pending.delivered"));

    let now = client
        .post(&format!("/conversations/{chat}/send-now"), json!({}))
        .await?;
    assert_eq!(now.status, 202, "{now:?}");
    let second = run_id(&now.body)?;
    device.read_until(ANSWER, finished(&second)).await?;
    assert_eq!(client.run(&chat, &second).await?["status"], "done");
    assert!(device.kinds.iter().any(|k| k == "pending.delivered"));
    let snapshot = client.snapshot(&chat).await?;
    assert_eq!(snapshot["pending"], json!([]));
    let t = transcript(&snapshot);
    assert_eq!(
        t.last(),
        Some(&("assistant".to_string(), sim_answer(5))),
        "{t:?}"
    );
    assert_eq!(t[t.len() - 2], ("user".to_string(), later.clone()));
    let last = sim.requests().await?.pop().context("a request")?;
    assert!(
        last["body"]["messages"].to_string().contains("wait for me"),
        "{last}"
    );
    Ok(())
}

/// Continue after a stop finishes the stopped answer in place first; the
/// waiting message is answered at the next step, under the finished answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_finishes_the_answer_before_a_waiting_message() -> anyhow::Result<()> {
    let (_sim, _chatd, client) = start(&[]).await?;
    let chat = client.create_chat().await?;
    let first = cued("long", "tokens=300 tps=40", "cont-1");
    let run = run_id(&client.send(&chat, &first).await?)?;
    let mut device = Device::attach(&client, &chat, "laptop").await?;
    device.read_deltas(3).await?;
    let later = cued("and then", "tokens=4 tps=0", "cont-2");
    client.send(&chat, &later).await?;
    let stop = client
        .post(&format!("/conversations/{chat}/stop"), json!({}))
        .await?;
    assert_eq!(stop.status, 200, "{stop:?}");
    device.read_until(QUICK, finished(&run)).await?;

    let resumed = client
        .post(&format!("/conversations/{chat}/continue"), json!({}))
        .await?;
    assert_eq!(resumed.status, 202, "{resumed:?}");
    let second = run_id(&resumed.body)?;
    device.read_until(ANSWER, finished(&second)).await?;
    assert_eq!(client.run(&chat, &second).await?["status"], "done");
    let snapshot = client.snapshot(&chat).await?;
    assert_eq!(
        transcript(&snapshot),
        vec![
            ("user".to_string(), first),
            ("assistant".to_string(), sim_answer(300)),
            ("user".to_string(), later),
            ("assistant".to_string(), sim_answer(4)),
        ],
        "the continued answer is whole and sits under its question"
    );
    Ok(())
}

// 7 ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_faults_retry_fail_or_pass_as_they_should() -> anyhow::Result<()> {
    let (_sim, chatd, client) = start_with(
        &["--tokens-per-second", "0", "--context-window", "4096"],
        &[],
    )
    .await?;

    // 503 with Retry-After once: waits, retries, done.
    let chat = client.create_chat().await?;
    let mut device = Device::attach(&client, &chat, "phone").await?;
    let run = run_id(
        &client
            .send(
                &chat,
                &cued(
                    "busy",
                    "tokens=12 status=503 retry_after=1 fail_times=1",
                    "busy",
                ),
            )
            .await?,
    )?;
    let events = device.read_until(ANSWER, finished(&run)).await?;
    assert_eq!(
        events.last().context("end")?.data["status"],
        "done",
        "{:?}",
        device.kinds
    );
    let retry = events
        .iter()
        .find(|e| e.kind == "run.retrying")
        .context("a run.retrying event")?;
    assert_eq!(
        retry.data["wait_s"].as_f64(),
        Some(1.0),
        "Retry-After is honoured: {}",
        retry.data
    );
    assert_eq!(stored_answer(&client, &chat, &run).await?, sim_answer(12));

    // One question over the context window: counted by the engine and
    // failed before it is sent, with the count.
    let chat = client.create_chat().await?;
    let long = format!("{} {}", "far too long ".repeat(1_300), "[sim id=context]");
    let run = run_id(&client.send(&chat, &long).await?)?;
    let record = client
        .wait_run(&chat, &run, &["failed", "done", "interrupted"], ANSWER)
        .await?;
    assert_eq!(record["status"], "failed", "{record}");
    let error = record["error"].as_str().context("a failed run says why")?;
    assert!(
        error.contains("counted by the engine") && error.contains("window of 4096 tokens"),
        "error {error:?}"
    );
    eprintln!("context error: {error}");

    // The engine says 400 over the context and nothing can be compacted:
    // failed with the engine's message.
    let chat = client.create_chat().await?;
    let cue = "status=400 message=\"the request exceeds the available context size\"";
    let run = run_id(&client.send(&chat, &cued("hi", cue, "ctx400")).await?)?;
    let record = client
        .wait_run(&chat, &run, &["failed", "done", "interrupted"], ANSWER)
        .await?;
    assert_eq!(record["status"], "failed", "{record}");
    let error = record["error"].as_str().context("a failed run says why")?;
    assert!(
        error.contains("400") && error.contains("available context size"),
        "error {error:?}"
    );

    // Another 4xx: failed with the engine's own message.
    let chat = client.create_chat().await?;
    let run = run_id(
        &client
            .send(
                &chat,
                &cued("nope", "status=404 message=\"model shelved\"", "404"),
            )
            .await?,
    )?;
    let record = client
        .wait_run(&chat, &run, &["failed", "done", "interrupted"], ANSWER)
        .await?;
    assert_eq!(record["status"], "failed", "{record}");
    assert!(
        record["error"]
            .as_str()
            .is_some_and(|e| e.contains("model shelved")),
        "{record}"
    );

    // Garbage lines between the chunks: skipped, text intact.
    let chat = client.create_chat().await?;
    let run = run_id(
        &client
            .send(&chat, &cued("junk", "tokens=30 garbage=1", "garbage"))
            .await?,
    )?;
    let record = client
        .wait_run(&chat, &run, &["failed", "done", "interrupted"], ANSWER)
        .await?;
    assert_eq!(record["status"], "done", "{record}");
    assert_eq!(stored_answer(&client, &chat, &run).await?, sim_answer(30));
    let skipped = metric(
        &metrics_text(&chatd).await?,
        "tandem_engine_garbage_lines_total",
    );
    assert!(
        skipped.is_some_and(|n| n > 0.0),
        "garbage lines counted: {skipped:?}"
    );
    Ok(())
}

// 8 ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_in_the_contract_shape_and_stores_nothing() -> anyhow::Result<()> {
    let (_sim, _chatd, client) = start(&[("QSE_CHAT_MAX_BODY_BYTES", "1024")]).await?;
    let chat = client.create_chat().await?;
    let run = run_id(
        &client
            .send(&chat, &cued("hello", "tokens=4", "bad-input"))
            .await?,
    )?;
    client.wait_run(&chat, &run, &["done"], ANSWER).await?;
    let before = stored_state(&client).await?;
    let messages = format!("/conversations/{chat}/messages");
    let post = reqwest::Method::POST;
    let key = Some(FORWARD_KEY);

    // Not JSON, cut short, JSON with more after it, or not an object: the body is named.
    let malformed = [
        "{not json}",
        "{\"text\": \"hi\",}",
        r#"{"text": "#,
        r#"{"text": "hi [sim id=trailing]"} and more"#,
        r#"["hi [sim id=array]"]"#,
    ];
    for text in malformed {
        let field = "body";
        let (status, body) = raw(&client, post.clone(), &messages, key, &[], Some(text)).await?;
        let (kind, message) = error_of("malformed JSON", &body);
        assert_eq!(
            (status, kind.as_str()),
            (400, "bad_input"),
            "{text}: {body}"
        );
        assert_eq!(body["error"]["field"], field, "{text}: {body}");
        assert!(message.starts_with(field), "{text}: {body}");
    }

    let (status, body) = raw(
        &client,
        post.clone(),
        &messages,
        key,
        &[],
        Some(r#"{"words": "hi"}"#),
    )
    .await?;
    let (kind, message) = error_of("missing text", &body);
    assert_eq!((status, kind.as_str()), (400, "bad_input"), "{body}");
    assert!(message.contains("text"), "names `text`: {body}");
    assert_eq!(body["error"]["field"], "text", "{body}");

    let (status, body) = raw(
        &client,
        post.clone(),
        &messages,
        key,
        &[],
        Some(r#"{"text": 42}"#),
    )
    .await?;
    let (kind, _) = error_of("text of the wrong type", &body);
    assert_eq!((status, kind.as_str()), (400, "bad_input"), "{body}");
    assert_eq!(body["error"]["field"], "text", "{body}");

    let big = json!({"text": "x".repeat(2_000)}).to_string();
    let (status, body) = raw(&client, post.clone(), &messages, key, &[], Some(&big)).await?;
    let (_, message) = error_of("body over the limit", &body);
    assert_eq!(status, 413, "{body}");
    assert!(message.contains("1024"), "says the limit: {body}");
    assert_eq!(body["error"]["limit"], 1024, "{body}");

    let (status, body) = raw(
        &client,
        reqwest::Method::GET,
        "/conversations/c_nosuchchat",
        key,
        &[],
        None,
    )
    .await?;
    let (kind, _) = error_of("unknown chat", &body);
    assert_eq!((status, kind.as_str()), (404, "not_found"));
    let (status, body) = raw(
        &client,
        post.clone(),
        "/conversations/c_nosuchchat/messages",
        key,
        &[],
        Some(r#"{"text":"hi"}"#),
    )
    .await?;
    let (kind, _) = error_of("send to an unknown chat", &body);
    assert_eq!((status, kind.as_str()), (404, "not_found"));

    let hello = r#"{"text":"no key [sim id=nokey]"}"#;
    for (what, key) in [
        ("no key", None),
        ("wrong key", Some("not-the-key")),
        ("key with a prefix", Some(&FORWARD_KEY[..10])),
    ] {
        let (status, body) = raw(&client, post.clone(), &messages, key, &[], Some(hello)).await?;
        let (kind, _) = error_of(what, &body);
        assert_eq!(
            (status, kind.as_str()),
            (401, "forward_key_required"),
            "{what}"
        );
        let (status, _) = raw(
            &client,
            reqwest::Method::GET,
            &format!("/conversations/{chat}"),
            key,
            &[],
            None,
        )
        .await?;
        assert_eq!(status, 401, "{what}: reading a chat");
    }

    let cross = [("sec-fetch-site", "cross-site")];
    let (status, body) = raw(&client, post.clone(), &messages, key, &cross, Some(hello)).await?;
    let (kind, _) = error_of("cross-site write", &body);
    assert_eq!((status, kind.as_str()), (403, "cross_site"));
    let (status, body) = raw(
        &client,
        reqwest::Method::DELETE,
        &format!("/conversations/{chat}"),
        key,
        &cross,
        None,
    )
    .await?;
    assert_eq!(
        (status, error_of("cross-site delete", &body).0.as_str()),
        (403, "cross_site")
    );

    for after in ["99999999", "99999999999999999999999", "abc", "-1"] {
        let path = format!("/conversations/{chat}/events?after={after}");
        let (status, body) = raw(&client, reqwest::Method::GET, &path, key, &[], None).await?;
        let (kind, message) = error_of(&format!("after={after}"), &body);
        assert_eq!(
            (status, kind.as_str()),
            (400, "bad_input"),
            "after={after}: {body}"
        );
        assert!(message.contains("after"), "names `after`: {body}");
    }

    let (status, body) = raw(
        &client,
        reqwest::Method::GET,
        "/capabilities",
        None,
        &[],
        None,
    )
    .await?;
    assert_eq!(status, 200);
    assert_eq!(body["signed_in"], false, "{body}");
    assert!(
        body.get("limits").is_none() && body["engine"].get("url").is_none(),
        "nothing private: {body}"
    );
    let (status, body) = raw(
        &client,
        reqwest::Method::GET,
        "/capabilities",
        key,
        &[],
        None,
    )
    .await?;
    assert_eq!((status, &body["signed_in"]), (200, &json!(true)));

    let after = stored_state(&client).await?;
    assert_eq!(before, after, "bad input changed stored state");
    Ok(())
}

// 9 ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_files_are_private_and_a_forward_key_is_made_without_secrets() -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let missing = std::env::temp_dir().join(format!(
        "tandem-no-secrets-{}/secrets.env",
        std::process::id()
    ));
    let missing = missing.to_string_lossy().to_string();
    let (_sim, chatd, _) = start(&[("QSE_SECRETS", &missing)]).await?;
    let mode = |p: &std::path::Path| -> anyhow::Result<u32> {
        Ok(std::fs::metadata(p)
            .with_context(|| p.display().to_string())?
            .permissions()
            .mode()
            & 0o777)
    };
    let data = chatd.data_dir();
    assert_eq!(mode(&data)?, 0o700, "the data folder");
    assert_eq!(mode(&data.join("chat.sqlite3"))?, 0o600, "the database");
    let key_path = data.join("forward.key");
    assert_eq!(mode(&key_path)?, 0o600, "forward.key");
    let key = std::fs::read_to_string(&key_path)?.trim().to_string();
    assert!(key.len() >= 32);

    // The made key is the one chatd checks; the test key is not.
    let client = Client::new(&chatd.url(), &key);
    let chat = client.create_chat().await?;
    let run = run_id(&client.send(&chat, &cued("hi", "tokens=3", "modes")).await?)?;
    client.wait_run(&chat, &run, &["done"], ANSWER).await?;
    assert_eq!(
        Client::new(&chatd.url(), FORWARD_KEY)
            .get("/conversations")
            .await?
            .status,
        401
    );
    for extra in ["chat.sqlite3-wal", "chat.sqlite3-shm"] {
        let path = data.join(extra);
        if path.exists() {
            assert_eq!(mode(&path)?, 0o600, "{extra}");
        }
    }
    assert!(
        !chatd.log().contains(&key),
        "the forward key is in chatd's log"
    );
    Ok(())
}

// 10 --------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_answer_exits_soon_and_continue_finishes_the_answer() -> anyhow::Result<()> {
    let (_sim, mut chatd, client) = start(&[]).await?;
    let chat = client.create_chat().await?;
    let n = 120;
    let run = run_id(
        &client
            .send(
                &chat,
                &cued("term", &format!("tokens={n} tps=40"), "sigterm"),
            )
            .await?,
    )?;
    let mut device = Device::attach(&client, &chat, "phone").await?;
    device.read_deltas(10).await?;

    let (took, status) = chatd.sigterm(Duration::from_secs(5))?;
    assert!(took < Duration::from_secs(5), "exit took {took:?}");
    assert!(status.success(), "chatd exited {status}");
    device.read_to_end(QUICK).await?;

    chatd.restart().await?;
    let record = client.run(&chat, &run).await?;
    assert_eq!(record["status"], "interrupted", "{record}");
    let message = run_message(&client, &chat, &run).await?;
    let stored = stored_answer(&client, &chat, &run).await?;
    assert!(
        !stored.is_empty()
            && sim_answer(n).starts_with(&stored)
            && stored.len() < sim_answer(n).len(),
        "{stored:?}"
    );
    assert_eq!(
        device.text(&message),
        stored,
        "everything the device saw is kept, and no more"
    );

    // The device comes back with its last seq and learns how the run ended.
    device.reconnect(&client, &chat).await?;
    if !device
        .seen
        .iter()
        .any(|e| e.kind == "run.finished" && e.data["run_id"] == run.as_str())
    {
        let end = device
            .read_until(QUICK, finished(&run))
            .await?
            .pop()
            .context("run.finished")?;
        assert_eq!(end.data["status"], "interrupted", "{}", end.data);
    }
    let resumed = client
        .post(&format!("/conversations/{chat}/continue"), json!({}))
        .await?;
    assert_eq!(resumed.status, 202, "{resumed:?}");
    let resumed = run_id(&resumed.body)?;
    device.read_until(ANSWER, finished(&resumed)).await?;
    assert_eq!(client.run(&chat, &resumed).await?["status"], "done");
    assert_eq!(
        stored_answer(&client, &chat, &resumed).await?,
        sim_answer(n)
    );
    assert_eq!(device.text(&message), sim_answer(n));
    Ok(())
}

// 11 --------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn branches_fork_trash_search_and_export_round_trip() -> anyhow::Result<()> {
    let (_sim, _chatd, client) = start(&[]).await?;
    let created = client
        .post("/conversations", json!({"title": "Zebra migration notes"}))
        .await?;
    assert_eq!(created.status, 201);
    let chat = created.body["id"].as_str().context("id")?.to_string();
    let question = cued("where do aardvarks sleep", "tokens=6", "branches");
    let first = run_id(&client.send(&chat, &question).await?)?;
    client.wait_run(&chat, &first, &["done"], ANSWER).await?;
    let snapshot = client.snapshot(&chat).await?;
    let user_id = snapshot["messages"][0]["id"]
        .as_str()
        .context("user message")?
        .to_string();
    let old_answer = snapshot["messages"][1]["id"]
        .as_str()
        .context("answer")?
        .to_string();

    // Regenerate: a new answer beside the old one; the transcript shows the new one only.
    let again = client
        .post(&format!("/conversations/{chat}/regenerate"), json!({}))
        .await?;
    assert_eq!(again.status, 202, "{again:?}");
    let again = run_id(&again.body)?;
    client.wait_run(&chat, &again, &["done"], ANSWER).await?;
    let snapshot = client.snapshot(&chat).await?;
    let messages = snapshot["messages"].as_array().context("messages")?;
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert_eq!(messages[0]["id"], user_id.as_str());
    assert_ne!(messages[1]["id"], old_answer.as_str(), "a new message");
    assert_eq!(
        messages[1]["parent_id"],
        user_id.as_str(),
        "a sibling of the old answer"
    );
    assert_eq!(messages[1]["text"], sim_answer(6).as_str());

    // Edit the question: a new branch from the same parent.
    let edited_text = cued("where do zebras sleep", "tokens=4", "edited");
    let edit = client
        .post(
            &format!("/conversations/{chat}/messages/{user_id}/edit"),
            json!({"text": edited_text}),
        )
        .await?;
    assert_eq!(edit.status, 202, "{edit:?}");
    let edit_run = run_id(&edit.body)?;
    client.wait_run(&chat, &edit_run, &["done"], ANSWER).await?;
    let snapshot = client.snapshot(&chat).await?;
    let messages = snapshot["messages"].as_array().context("messages")?;
    assert_eq!(
        transcript(&snapshot),
        vec![
            ("user".into(), edited_text.clone()),
            ("assistant".into(), sim_answer(4))
        ]
    );
    assert_ne!(messages[0]["id"], user_id.as_str());
    assert_eq!(
        messages[0]["parent_id"],
        Value::Null,
        "same parent as the original (the root)"
    );
    let edited_id = messages[0]["id"].as_str().context("id")?.to_string();

    // Fork from the edited question: a new chat holding the path up to it.
    let fork = client
        .post(
            &format!("/conversations/{chat}/fork"),
            json!({"from_message_id": edited_id, "title": "forked"}),
        )
        .await?;
    assert_eq!(fork.status, 201, "{fork:?}");
    let forked = fork.body["id"].as_str().context("fork id")?.to_string();
    assert_ne!(forked, chat);
    let fork_snapshot = client.snapshot(&forked).await?;
    assert_eq!(
        transcript(&fork_snapshot),
        vec![("user".into(), edited_text.clone())]
    );
    assert_eq!(fork_snapshot["conversation"]["title"], "forked");
    assert_eq!(
        transcript(&client.snapshot(&chat).await?).len(),
        2,
        "the source is unchanged"
    );

    // Search by title and by message text.
    let ids = |answer: &Value| -> Vec<String> {
        answer["conversations"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| c["id"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let by_title = client.get("/conversations?q=zebra%20migration").await?;
    assert_eq!(
        ids(&by_title.body),
        vec![chat.clone()],
        "{:?}",
        by_title.body
    );
    let by_text = client.get("/conversations?q=zebras%20sleep").await?;
    let found = ids(&by_text.body);
    assert!(
        found.contains(&chat) && found.contains(&forked),
        "{found:?}"
    );
    // Each chat found by its text says where: the line that matched.
    for c in by_text.body["conversations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let line = c["match"]["line"].as_str().unwrap_or("");
        assert!(line.to_lowercase().contains("zebras sleep"), "{c}");
        assert!(c["match"]["message_id"].is_string(), "{c}");
    }
    assert!(
        by_title.body["conversations"][0].get("match").is_none(),
        "a title match names no line: {:?}",
        by_title.body
    );
    assert!(ids(&client
        .get("/conversations?q=no-such-words-anywhere")
        .await?
        .body)
    .is_empty());

    // Export json and md, import the json: the same transcript comes back.
    let exported = client
        .get(&format!("/conversations/{chat}/export?format=json"))
        .await?;
    assert_eq!(exported.status, 200);
    assert_eq!(exported.body["title"], "Zebra migration notes");
    let md = client
        .http
        .get(client.api(&format!("/conversations/{chat}/export?format=md")))
        .header("x-forward-key", FORWARD_KEY)
        .send()
        .await?;
    assert_eq!(md.status(), 200);
    let md = md.text().await?;
    assert!(
        md.contains("Zebra migration notes")
            && md.contains(&edited_text)
            && md.contains(&sim_answer(4)),
        "{md}"
    );
    let imported = client
        .post("/conversations/import", exported.body.clone())
        .await?;
    assert_eq!(imported.status, 201, "{imported:?}");
    let copy = imported.body["id"]
        .as_str()
        .context("import id")?
        .to_string();
    let copy_snapshot = client.snapshot(&copy).await?;
    assert_eq!(
        transcript(&copy_snapshot),
        transcript(&client.snapshot(&chat).await?)
    );
    let re_exported = client
        .get(&format!("/conversations/{copy}/export?format=json"))
        .await?;
    for field in ["version", "title", "model", "settings"] {
        assert_eq!(re_exported.body[field], exported.body[field], "{field}");
    }
    let strip = |v: &Value| -> Vec<(Value, Value)> {
        v["messages"]
            .as_array()
            .map(|ms| {
                ms.iter()
                    .map(|m| (m["role"].clone(), m["text"].clone()))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(strip(&re_exported.body), strip(&exported.body));

    // Trash hides, restore brings back, forever removes.
    let delete = client
        .call(
            reqwest::Method::DELETE,
            &format!("/conversations/{forked}"),
            None,
        )
        .await?;
    assert_eq!(delete.status, 204, "{delete:?}");
    assert!(
        !ids(&client.get("/conversations").await?.body).contains(&forked),
        "trashed chats leave the list"
    );
    assert!(
        ids(&client.get("/conversations?trash=1").await?.body).contains(&forked),
        "and sit in the trash"
    );
    let restore = client
        .post(&format!("/conversations/{forked}/restore"), json!({}))
        .await?;
    assert_eq!(restore.status, 200, "{restore:?}");
    assert!(
        ids(&client.get("/conversations").await?.body).contains(&forked),
        "restored"
    );
    let forever = client
        .call(
            reqwest::Method::DELETE,
            &format!("/conversations/{forked}?forever=1"),
            None,
        )
        .await?;
    assert_eq!(forever.status, 204, "{forever:?}");
    let gone = client.get(&format!("/conversations/{forked}")).await?;
    assert_eq!(gone.status, 404, "{gone:?}");
    assert_eq!(error_of("removed chat", &gone.body).0, "not_found");
    assert!(!ids(&client.get("/conversations?trash=1").await?.body).contains(&forked));
    Ok(())
}

// 12 --------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_runs_events_devices_retries_and_queue() -> anyhow::Result<()> {
    let (_sim, chatd, client) = start(&[]).await?;
    let chat = client.create_chat().await?;
    let mut device = Device::attach(&client, &chat, "phone").await?;
    let run = run_id(
        &client
            .send(
                &chat,
                &cued(
                    "count",
                    "tokens=5 status=503 retry_after=1 fail_times=1",
                    "metrics",
                ),
            )
            .await?,
    )?;
    device.read_until(ANSWER, finished(&run)).await?;

    let text = metrics_text(&chatd).await?;
    for name in [
        "tandem_runs_total",
        "tandem_events_written_total",
        "tandem_sse_devices",
        "tandem_engine_retries_total",
        "tandem_runs_queued",
        "tandem_run_seconds",
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(name)),
            "/metrics lacks {name}:\n{text}"
        );
    }
    assert_eq!(
        metric(&text, r#"tandem_runs_total{origin="user",outcome="done"}"#),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        metric(&text, "tandem_run_seconds_count"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        metric(&text, "tandem_engine_retries_total"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(metric(&text, "tandem_sse_devices"), Some(1.0), "{text}");
    assert_eq!(metric(&text, "tandem_runs_queued"), Some(0.0), "{text}");
    let written = metric(&text, "tandem_events_written_total").context("events written")?;
    assert!(
        written >= device.last_seq() as f64,
        "{written} events written, the device saw {}",
        device.last_seq()
    );

    // A device that leaves is no longer counted.
    device.detach();
    wait_until("the device to be uncounted", QUICK, || async {
        let text = metrics_text(&chatd).await.ok()?;
        (metric(&text, "tandem_sse_devices")? == 0.0).then_some(())
    })
    .await?;
    Ok(())
}

/// A send with an idempotency key, sent again (a client that lost the
/// answer, connectord after a crash): the same answer, nothing stored twice.
#[tokio::test]
async fn a_send_with_a_key_sent_twice_stores_one_message() -> anyhow::Result<()> {
    let (_sim, _chatd, client) =
        start_with(&["--tokens-per-second", "20", "--tokens", "40"], &[]).await?;
    let chat = client.create_chat().await?;
    let path = format!("/conversations/{chat}/messages");
    let first = client
        .post(&path, json!({"text": "hello", "key": "cn_1-7"}))
        .await?;
    let again = client
        .post(&path, json!({"text": "hello", "key": "cn_1-7"}))
        .await?;
    assert_eq!((first.status, again.status), (202, 202));
    assert_eq!(first.body, again.body, "the same answer");
    // While the run works, a keyed message waits, once.
    let waiting = client
        .post(&path, json!({"text": "more", "key": "cn_1-8"}))
        .await?;
    let waiting_again = client
        .post(&path, json!({"text": "more", "key": "cn_1-8"}))
        .await?;
    assert!(waiting.body["pending_id"].is_string(), "{}", waiting.body);
    assert_eq!(waiting.body, waiting_again.body);
    // Each text once, as a message or still waiting (the run may have
    // taken the waiting one in already).
    let snap = client.snapshot(&chat).await?;
    let mut texts: Vec<&str> = snap["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "user")
        .chain(snap["pending"].as_array().into_iter().flatten())
        .filter_map(|m| m["text"].as_str())
        .collect();
    texts.sort_unstable();
    assert_eq!(texts, ["hello", "more"], "{snap}");
    assert_eq!(snap["runs"].as_array().map(Vec::len), Some(1), "{snap}");
    let bad = client
        .post(&path, json!({"text": "x", "key": "has space"}))
        .await?;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.body["error"]["field"], "key");
    Ok(())
}

/// `GET /conversations/{id}/files?path=`: raw bytes, status and headers.
async fn fetch_file(
    client: &Client,
    chat: &str,
    path: Option<&str>,
) -> anyhow::Result<(u16, reqwest::header::HeaderMap, Vec<u8>)> {
    let mut request = client
        .http
        .get(client.api(&format!("/conversations/{chat}/files")))
        .header("x-forward-key", FORWARD_KEY);
    if let Some(path) = path {
        request = request.query(&[("path", path)]);
    }
    let response = request.send().await?;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    Ok((status, headers, response.bytes().await?.to_vec()))
}

fn header_of(headers: &reqwest::header::HeaderMap, name: &str) -> String {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

/// The error body of a refused fetch.
fn file_error(bytes: &[u8]) -> Value {
    serde_json::from_slice::<Value>(bytes).unwrap_or(Value::Null)["error"].clone()
}

/// Runs one scripted `write_file` in `chat` (the agent writing a file) and
/// waits for the run to be done.
async fn agent_writes(
    sim: &Sim,
    client: &Client,
    chat: &str,
    path: &str,
    content: &str,
) -> anyhow::Result<()> {
    sim.faults(json!([
        {"tool_calls": [{"name": "write_file", "arguments": {"path": path, "content": content}}]},
        {"tokens": 3},
    ]))
    .await?;
    let run = run_id(&client.send(chat, "write it").await?)?;
    let run = client
        .wait_run(chat, &run, &["done", "failed"], ANSWER)
        .await?;
    anyhow::ensure!(run["status"] == "done", "{run}");
    Ok(())
}

/// A file an agent wrote comes back as bytes with its type, length and
/// name, from the chat's own workspace or the shared one; a path that
/// leaves the workspace (`..`, absolute, a symlink out) or names a folder is
/// 400 naming `path`, a missing file or chat 404, a file over 50 MiB 413.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_hands_out_the_files_in_its_workspace() -> anyhow::Result<()> {
    let (sim, chatd, client) = start(&[]).await?;
    let chat = client.create_chat_in("auto").await?;
    agent_writes(
        &sim,
        &client,
        &chat,
        "out/report.md",
        "# Report\nall good\n",
    )
    .await?;

    let (status, headers, bytes) = fetch_file(&client, &chat, Some("out/report.md")).await?;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
    assert_eq!(bytes, b"# Report\nall good\n");
    assert_eq!(
        header_of(&headers, "content-type"),
        "text/markdown; charset=utf-8"
    );
    assert_eq!(
        header_of(&headers, "content-length"),
        bytes.len().to_string()
    );
    assert_eq!(
        header_of(&headers, "content-disposition"),
        "attachment; filename=\"report.md\""
    );

    // Binary bytes and an awkward name, put where the tools write.
    let workspace = chatd.data_dir().join("workspaces").join(&chat);
    let binary: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    std::fs::write(workspace.join("out/chart.PNG"), &binary)?;
    let (status, headers, bytes) = fetch_file(&client, &chat, Some("./out/chart.PNG")).await?;
    assert_eq!(status, 200);
    assert_eq!(bytes, binary);
    assert_eq!(header_of(&headers, "content-type"), "image/png");
    assert_eq!(header_of(&headers, "content-length"), "70000");
    std::fs::write(workspace.join("say \"hi\".bin"), b"x")?;
    let (status, headers, _) = fetch_file(&client, &chat, Some("say \"hi\".bin")).await?;
    assert_eq!(status, 200);
    assert_eq!(
        header_of(&headers, "content-type"),
        "application/octet-stream"
    );
    assert_eq!(
        header_of(&headers, "content-disposition"),
        "attachment; filename=\"say _hi_.bin\"; filename*=UTF-8''say%20%22hi%22.bin"
    );

    // Ways out of the workspace, and a folder.
    let outside = chatd.dir.path().join("outside");
    std::fs::create_dir_all(&outside)?;
    std::fs::write(outside.join("secret.txt"), "CANARY")?;
    std::os::unix::fs::symlink(outside.join("secret.txt"), workspace.join("link.txt"))?;
    std::os::unix::fs::symlink(&outside, workspace.join("away"))?;
    let inside_absolute = workspace.join("out/report.md").display().to_string();
    for path in [
        "",
        "../x",
        "out/../../x",
        "/etc/passwd",
        inside_absolute.as_str(),
        "link.txt",
        "away/secret.txt",
        "out",
        ".",
    ] {
        let (status, _, bytes) = fetch_file(&client, &chat, Some(path)).await?;
        let error = file_error(&bytes);
        assert_eq!(status, 400, "{path:?}: {error}");
        assert_eq!(error["type"], "bad_input", "{path:?}: {error}");
        assert_eq!(error["field"], "path", "{path:?}: {error}");
        let message = error["message"].as_str().unwrap_or("");
        assert!(message.starts_with("path: "), "{path:?}: {message}");
        assert!(!message.contains("CANARY"), "{message}");
    }
    // Without a path it is the chat's file list (docs/files.md).
    let (status, _, bytes) = fetch_file(&client, &chat, None).await?;
    assert_eq!(status, 200);
    let list: serde_json::Value = serde_json::from_slice(&bytes)?;
    assert!(list["files"].is_array(), "{list}");
    let (_, _, bytes) = fetch_file(&client, &chat, Some("link.txt")).await?;
    assert_eq!(
        file_error(&bytes)["message"],
        "path: `link.txt` is a symlink; the workspace does not follow links"
    );
    let (_, _, bytes) = fetch_file(&client, &chat, Some("out")).await?;
    assert_eq!(
        file_error(&bytes)["message"],
        "path: `out` is a folder, not a regular file"
    );

    // Missing files, chats.
    for path in ["nope.txt", "nope/deeper.txt"] {
        let (status, _, bytes) = fetch_file(&client, &chat, Some(path)).await?;
        assert_eq!(status, 404, "{path}");
        assert_eq!(file_error(&bytes)["type"], "not_found");
    }
    let (status, _, bytes) = fetch_file(&client, "c_nosuchchat", Some("out/report.md")).await?;
    assert_eq!(status, 404);
    assert_eq!(file_error(&bytes)["type"], "not_found");

    // Over 50 MiB (sparse: no real bytes written).
    let big = std::fs::File::create(workspace.join("big.zip"))?;
    big.set_len(50 * 1024 * 1024 + 1)?;
    let (status, _, bytes) = fetch_file(&client, &chat, Some("big.zip")).await?;
    let error = file_error(&bytes);
    assert_eq!(status, 413, "{error}");
    assert_eq!(error["type"], "too_large");
    assert_eq!(error["limit"], 50 * 1024 * 1024);

    // The forward key is needed, as on every route.
    let keyless = client
        .http
        .get(client.api(&format!("/conversations/{chat}/files")))
        .query(&[("path", "out/report.md")])
        .send()
        .await?;
    assert_eq!(keyless.status().as_u16(), 401);

    // A shared chat's files are in the shared workspace, like its tools'.
    let made = client
        .post(
            "/conversations",
            json!({"workspace": "shared", "permission_mode": "auto"}),
        )
        .await?;
    assert_eq!(made.status, 201, "{made:?}");
    let shared = made.body["id"].as_str().context("id")?.to_string();
    agent_writes(&sim, &client, &shared, "reports/today.csv", "a,b\n1,2\n").await?;
    let (status, headers, bytes) = fetch_file(&client, &shared, Some("reports/today.csv")).await?;
    assert_eq!(status, 200);
    assert_eq!(bytes, b"a,b\n1,2\n");
    assert_eq!(
        header_of(&headers, "content-type"),
        "text/csv; charset=utf-8"
    );
    let (status, _, _) = fetch_file(&client, &chat, Some("reports/today.csv")).await?;
    assert_eq!(status, 404, "not in the own chat's workspace");

    // A trashed chat hands out nothing.
    let trashed = client
        .call(
            reqwest::Method::DELETE,
            &format!("/conversations/{chat}"),
            None,
        )
        .await?;
    assert_eq!(trashed.status, 204, "{trashed:?}");
    let (status, _, bytes) = fetch_file(&client, &chat, Some("out/report.md")).await?;
    assert_eq!(status, 404);
    assert_eq!(file_error(&bytes)["type"], "not_found");
    Ok(())
}

/// A client that goes away the moment its send is written (a bot killed,
/// a phone out of range) leaves a stored message whose run runs: the run is
/// never left `queued` with no task, holding the chat until a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_whose_client_goes_away_at_once_still_runs() -> anyhow::Result<()> {
    use tokio::io::AsyncWriteExt;
    let (_sim, chatd, client) = start(&[]).await?;
    let address = chatd
        .url()
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let mut chats = Vec::new();
    for i in 0..16 {
        let chat = client.create_chat().await?;
        let body = json!({"text": format!("hello {i}"), "key": format!("k{i}")}).to_string();
        let request = format!(
            "POST /v1/chat-app/conversations/{chat}/messages HTTP/1.1\r\nhost: {address}\r\n\
             x-forward-key: {FORWARD_KEY}\r\ncontent-type: application/json\r\n\
             content-length: {}\r\n\r\n{body}",
            body.len()
        );
        let mut socket = tokio::net::TcpStream::connect(&address).await?;
        socket.write_all(request.as_bytes()).await?;
        // Gone at once, some before chatd's write job ends, some after.
        drop(socket);
        chats.push(chat);
    }
    for chat in &chats {
        let snapshot = wait_until(&format!("chat {chat}'s run to end"), ANSWER, || async {
            let snapshot = client.snapshot(chat).await.ok()?;
            let runs = snapshot["runs"].as_array()?;
            // A send that never reached the store is fine: nothing runs.
            let ended = runs.iter().all(|r| r["status"] == "done");
            ended.then_some(snapshot)
        })
        .await?;
        let runs = snapshot["runs"].as_array().map(Vec::len).unwrap_or(0);
        let users = snapshot["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["role"] == "user")
            .count();
        assert_eq!(runs, users, "each stored message has its run: {snapshot}");
    }
    Ok(())
}
