//! chatd with the real egressd: the forwarded routes, and egressd's consent
//! cards shown in the chat, answered there, expired, declined for a chat
//! nobody is running, and chatd's answer when egressd is down.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use reqwest::Method;
use serde_json::{json, Value};
use tandem_tests::harness::{wait_until, Chatd, Client, Egressd, Sim};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UnixStream};

const QUICK: Duration = Duration::from_secs(15);

struct Box {
    _sockets: tempfile::TempDir,
    _sim: Sim,
    chatd: Chatd,
    egressd: Egressd,
    client: Client,
    origin_port: u16,
}

/// An origin on 127.0.0.2 (echoing what it reads), egressd with the ceiling
/// `all` and that address opened, chatd following egressd's cards.
async fn start(extra: &str) -> anyhow::Result<Box> {
    start_with(extra, &[]).await
}

/// The same, with more of chatd's environment.
async fn start_with(extra: &str, chatd_env: &[(&str, &str)]) -> anyhow::Result<Box> {
    let origin = TcpListener::bind("127.0.0.2:0").await?;
    let origin_port = origin.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = origin.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    // chatd's folder first: egressd puts the chats' sockets in its data.
    let sockets = tempfile::tempdir()?;
    let egress_socket = sockets.path().join("egress.sock");
    let mut env = vec![("QSE_EGRESS_SOCKET", egress_socket.to_str().unwrap_or(""))];
    env.extend_from_slice(chatd_env);
    let chatd = Chatd::start(&sim.url(), &env).await?;
    let egressd = Egressd::start_at(
        &chatd.data_dir(),
        &chatd.dir.path().join("secrets.env"),
        &egress_socket,
        &format!(
            "ceiling = \"all\"\nports = [443, {origin_port}]\nallow_ranges = [\"127.0.0.2/32\"]\n{extra}"
        ),
    )
    .await?;
    // chatd retries egressd from 1 s doubling: wait until it follows.
    wait_until("chatd to follow egressd's cards", QUICK, || async {
        let (_, health) = egressd.call("GET", "/health", None).await.ok()?;
        (health["card_listeners"].as_u64()? >= 1).then_some(())
    })
    .await?;
    let client = chatd.client();
    Ok(Box {
        _sockets: sockets,
        _sim: sim,
        chatd,
        egressd,
        client,
        origin_port,
    })
}

/// A command of `chat` reaching for `target` through the chat's socket:
/// the proxy's first answer line, and the echo of "ping" when it opened.
async fn command(socket: PathBuf, target: String) -> String {
    let Ok(mut s) = UnixStream::connect(&socket).await else {
        return "no socket".into();
    };
    if s.write_all(format!("CONNECT {target} HTTP/1.1\r\n\r\n").as_bytes())
        .await
        .is_err()
    {
        return "write failed".into();
    }
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf).await.unwrap_or(0);
    let head = String::from_utf8_lossy(&buf[..n]).to_string();
    if head.starts_with("HTTP/1.1 200") {
        let _ = s.write_all(b"ping").await;
        let n = s.read(&mut buf).await.unwrap_or(0);
        return format!("{head}{}", String::from_utf8_lossy(&buf[..n]));
    }
    head
}

fn socket_of(chatd_data: &Path, chat: &str) -> PathBuf {
    chatd_data.join("egress").join(chat).join("proxy.sock")
}

/// A run that stays busy (its first token comes after `ms`).
async fn busy_run(b: &Box, chat: &str, ms: u64) -> anyhow::Result<String> {
    b._sim
        .faults(json!([{ "first_token_ms": ms, "tokens": 2 }]))
        .await?;
    let sent = b.client.send(chat, "wait for me").await?;
    Ok(sent["run_id"].as_str().context("run id")?.to_string())
}

/// The open egress card in the chat's snapshot.
async fn open_card(client: &Client, chat: &str) -> anyhow::Result<Value> {
    wait_until("an egress card in the snapshot", QUICK, || async {
        let snapshot = client.snapshot(chat).await.ok()?;
        snapshot["consents"]
            .as_array()?
            .iter()
            .find(|c| c["name"] == "egress" && c["decision"].is_null())
            .cloned()
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chatd_forwards_a_chats_egress_routes() -> anyhow::Result<()> {
    let b = start("").await?;
    let chat = b.client.create_chat().await?;
    let path = format!("/conversations/{chat}/egress");
    let put = |body: Value| b.client.call(Method::PUT, &path, Some(body));
    let set = put(json!({"preset": "registries"})).await?;
    assert_eq!(set.status, 200, "{set:?}");
    assert_eq!(set.body["effective"], "registries");
    assert!(socket_of(&b.chatd.data_dir(), &chat).exists());
    let bad = put(json!({"preset": "most"})).await?;
    assert_eq!(bad.status, 400, "{bad:?}");
    assert!(bad.body["error"]["message"]
        .as_str()
        .unwrap_or("")
        .contains("preset"));
    let missing = b
        .client
        .call(
            Method::PUT,
            "/conversations/c_nothere/egress",
            Some(json!({"preset": "all"})),
        )
        .await?;
    assert_eq!(missing.status, 404, "{missing:?}");

    let added = b
        .client
        .post(
            &format!("/conversations/{chat}/egress/rules"),
            json!({"verdict": "allow", "host": "example.org:443"}),
        )
        .await?;
    assert_eq!(added.status, 201, "{added:?}");
    let rule = added.body["id"].as_str().context("rule id")?.to_string();
    let listed = b
        .client
        .get(&format!("/conversations/{chat}/egress/rules"))
        .await?;
    assert_eq!(listed.body["rules"][0]["host"], "example.org");
    let removed = b
        .client
        .call(
            Method::DELETE,
            &format!("/conversations/{chat}/egress/rules/{rule}"),
            None,
        )
        .await?;
    assert_eq!(removed.status, 204, "{removed:?}");

    let settings = b.client.get("/egress/settings").await?;
    assert_eq!(settings.body["ceiling"], "all");
    // A connection, then its audit row through chatd.
    let answer = command(
        socket_of(&b.chatd.data_dir(), &chat),
        format!("127.0.0.2:{}", b.origin_port),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    let audit = wait_until("the audit row", QUICK, || async {
        let a = b
            .client
            .get(&format!("/egress/audit?chat={chat}"))
            .await
            .ok()?;
        (a.body["audit"].as_array()?.len() == 1).then_some(a)
    })
    .await?;
    assert_eq!(audit.body["audit"][0]["verdict"], "refused");
    let bad = b.client.get("/egress/audit?limit=0").await?;
    assert_eq!(bad.status, 400);

    // egressd down: chatd says so, and what to do.
    drop(b.egressd);
    let down = b
        .client
        .get(&format!("/conversations/{chat}/egress"))
        .await?;
    assert_eq!(down.status, 503, "{down:?}");
    assert_eq!(down.body["error"]["type"], "egress_unavailable");
    assert!(down.body["error"]["message"]
        .as_str()
        .unwrap_or("")
        .contains("tandem egress start"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_egress_card_is_shown_in_the_chat_and_its_answer_opens_the_way() -> anyhow::Result<()> {
    let b = start("").await?;
    let chat = b.client.create_chat().await?;
    let set = b
        .client
        .call(
            Method::PUT,
            &format!("/conversations/{chat}/egress"),
            Some(json!({"preset": "off"})),
        )
        .await?;
    assert_eq!(set.status, 200, "{set:?}");
    let socket = socket_of(&b.chatd.data_dir(), &chat);
    let target = format!("127.0.0.2:{}", b.origin_port);

    // No run: nobody can be asked, so the host is refused at once.
    let refused = command(socket.clone(), target.clone()).await;
    assert!(
        refused.starts_with("HTTP/1.1 403") && refused.contains("nobody watches"),
        "{refused}"
    );

    // During a run: a card in the chat; "once" lets the command through.
    let run = busy_run(&b, &chat, 20_000).await?;
    let mut events = b.client.events(&chat, 0).await?;
    let waiting = tokio::spawn(command(socket.clone(), target.clone()));
    let card = open_card(&b.client, &chat).await?;
    let card_id = card["card_id"].as_str().context("card id")?.to_string();
    assert!(card_id.starts_with("eg_"), "{card}");
    assert_eq!(
        card["summary"],
        format!("A command in this chat wants to reach {target}")
    );
    let seen = events
        .read_until(QUICK, |e| e.kind == "tool.consent")
        .await?;
    let shown = seen.last().context("a tool.consent event")?;
    assert_eq!(shown.data["name"], "egress");
    assert_eq!(shown.data["host"], "127.0.0.2");
    let snapshot = b.client.snapshot(&chat).await?;
    assert_eq!(snapshot["conversation"]["state"], "waiting", "{snapshot}");

    let consent = format!("/conversations/{chat}/consent");
    let answer = |decision: &str| {
        b.client
            .post(&consent, json!({"card_id": card_id, "decision": decision}))
    };
    let taken = answer("once").await?;
    assert_eq!(taken.status, 200, "{taken:?}");
    let through = waiting.await?;
    assert!(through.ends_with("ping"), "{through}");
    assert_eq!(answer("once").await?.status, 204);
    let other = answer("deny").await?;
    assert_eq!(other.status, 409, "{other:?}");
    assert_eq!(other.body["error"]["type"], "already_answered");
    let answered = events
        .read_until(QUICK, |e| e.kind == "tool.consent_answered")
        .await?;
    assert_eq!(
        answered.last().map(|e| e.data["decision"].clone()),
        Some(json!("once"))
    );
    // Once covers the next connection too, without a card.
    let again = command(socket.clone(), target.clone()).await;
    assert!(again.ends_with("ping"), "{again}");
    b.client
        .post(&format!("/conversations/{chat}/stop"), json!({}))
        .await?;
    b.client
        .wait_run(&chat, &run, &["stopped", "done"], QUICK)
        .await?;
    Ok(())
}

/// A card can come before its run writes `running` (the run waits in line
/// for the one engine slot here; on a loaded machine its task may just be
/// late): the chat stays `waiting` for the person until they answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_shown_before_its_run_starts_keeps_the_chat_waiting() -> anyhow::Result<()> {
    let b = start_with("", &[("QSE_CHAT_MAX_RUNS", "1")]).await?;
    let (first, chat) = (b.client.create_chat().await?, b.client.create_chat().await?);
    b.client
        .call(
            Method::PUT,
            &format!("/conversations/{chat}/egress"),
            Some(json!({"preset": "off"})),
        )
        .await?;
    // Both runs' model calls stay busy: the first holds the slot.
    b._sim
        .faults(json!([{ "first_token_ms": 20_000, "tokens": 2 }]))
        .await?;
    let holder = busy_run(&b, &first, 20_000).await?;
    b.client
        .wait_run(&first, &holder, &["running"], QUICK)
        .await?;
    let run = b.client.send(&chat, "wait for me").await?["run_id"]
        .as_str()
        .context("run id")?
        .to_string();
    b.client.wait_run(&chat, &run, &["queued"], QUICK).await?;
    let mut events = b.client.events(&chat, 0).await?;
    let waiting = tokio::spawn(command(
        socket_of(&b.chatd.data_dir(), &chat),
        format!("127.0.0.2:{}", b.origin_port),
    ));
    let card = open_card(&b.client, &chat).await?;
    let state = |snapshot: Value| snapshot["conversation"]["state"].clone();
    assert_eq!(state(b.client.snapshot(&chat).await?), "waiting");

    // The slot comes free: the run starts, its card still waits.
    b.client
        .post(&format!("/conversations/{first}/stop"), json!({}))
        .await?;
    events
        .read_until(QUICK, |e| e.kind == "run.started")
        .await?;
    let snapshot = b.client.snapshot(&chat).await?;
    assert_eq!(state(snapshot.clone()), "waiting", "{snapshot}");

    let taken = b
        .client
        .post(
            &format!("/conversations/{chat}/consent"),
            json!({"card_id": card["card_id"], "decision": "once"}),
        )
        .await?;
    assert_eq!(taken.status, 200, "{taken:?}");
    let through = waiting.await?;
    assert!(through.ends_with("ping"), "{through}");
    let snapshot = b.client.snapshot(&chat).await?;
    assert_eq!(state(snapshot.clone()), "running", "{snapshot}");
    b.client
        .post(&format!("/conversations/{chat}/stop"), json!({}))
        .await?;
    b.client
        .wait_run(&chat, &run, &["stopped", "done"], QUICK)
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_egress_card_expires_in_the_chat() -> anyhow::Result<()> {
    let b = start("card_wait_s = 1\n").await?;
    let chat = b.client.create_chat().await?;
    b.client
        .call(
            Method::PUT,
            &format!("/conversations/{chat}/egress"),
            Some(json!({"preset": "off"})),
        )
        .await?;
    let socket = socket_of(&b.chatd.data_dir(), &chat);
    let _run = busy_run(&b, &chat, 20_000).await?;
    let waiting = tokio::spawn(command(socket, format!("127.0.0.2:{}", b.origin_port)));
    let card = open_card(&b.client, &chat).await?;
    let refused = waiting.await?;
    assert!(
        refused.starts_with("HTTP/1.1 403") && refused.contains("nobody answered the card in 1 s"),
        "{refused}"
    );
    // chatd closes it when egressd does; a late answer is 410.
    wait_until("the card to close in the chat", QUICK, || async {
        let snapshot = b.client.snapshot(&chat).await.ok()?;
        let open = snapshot["consents"]
            .as_array()?
            .iter()
            .any(|c| c["name"] == "egress");
        (!open).then_some(())
    })
    .await?;
    let late = b
        .client
        .post(
            &format!("/conversations/{chat}/consent"),
            json!({"card_id": card["card_id"], "decision": "always"}),
        )
        .await?;
    assert_eq!(late.status, 410, "{late:?}");
    assert_eq!(late.body["error"]["type"], "consent_expired");
    assert!(b.egressd.log().contains("card closed"));
    Ok(())
}
