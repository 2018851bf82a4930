//! chatd's side of triggers, end to end against the real `chatd` and
//! `engine-sim`: a chat's origin and its runs', `/v1/chat-app/triggers*`
//! forwarded to triggerd's unix socket (a small fake triggerd here), and the
//! box's shared workspace. Every wait is on a condition with a bound.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::IntoResponse;
use serde_json::{json, Value};
use tandem_tests::harness::{metric, run_id, wait_until, Chatd, Client, Sim, FORWARD_KEY};

const QUICK: Duration = Duration::from_secs(20);

async fn start(env: &[(&str, &str)]) -> anyhow::Result<(Sim, Chatd, Client)> {
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start(&sim.url(), env).await?;
    let client = chatd.client();
    Ok((sim, chatd, client))
}

async fn metrics_text(chatd: &Chatd) -> anyhow::Result<String> {
    Ok(reqwest::get(format!("{}/metrics", chatd.url()))
        .await?
        .text()
        .await?)
}

async fn chat_count(client: &Client) -> anyhow::Result<usize> {
    let list = client.get("/conversations?limit=200").await?;
    anyhow::ensure!(list.status == 200, "{list:?}");
    Ok(list.body["conversations"]
        .as_array()
        .context("conversations")?
        .len())
}

// 1 ---------------------------------------------------------------------------

/// Sends `text` with `origin` in the body; answers the 202 body.
async fn send_as(client: &Client, chat: &str, text: &str, origin: &str) -> anyhow::Result<Value> {
    let sent = client
        .post(
            &format!("/conversations/{chat}/messages"),
            json!({"text": text, "origin": origin}),
        )
        .await?;
    anyhow::ensure!(sent.status == 202, "send answered {sent:?}");
    Ok(sent.body)
}

/// A chat made by a trigger says so; a run's origin is its request's: the
/// message triggerd posts with `origin: "trigger"` starts a trigger run, a
/// person's follow-up (or regenerate) in that same chat a person's. The run
/// records it and the run counter counts them apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_s_origin_is_its_request_s() -> anyhow::Result<()> {
    let (_sim, chatd, client) = start(&[]).await?;

    let mine = client.post("/conversations", json!({})).await?;
    assert_eq!(mine.status, 201, "{mine:?}");
    assert_eq!(mine.body["origin"], "user");
    for origin in ["user", "trigger", "connector"] {
        let made = client
            .post("/conversations", json!({"origin": origin}))
            .await?;
        assert_eq!(made.status, 201, "{made:?}");
        assert_eq!(made.body["origin"], origin);
    }
    let before = chat_count(&client).await?;
    let bad = client
        .post("/conversations", json!({"origin": "robot"}))
        .await?;
    assert_eq!(bad.status, 400, "{bad:?}");
    assert_eq!(bad.body["error"]["type"], "bad_input");
    assert_eq!(
        bad.body["error"]["message"],
        "origin: must be user, trigger or connector"
    );
    assert_eq!(bad.body["error"]["field"], "origin");
    assert_eq!(chat_count(&client).await?, before, "nothing stored");

    let trigger_chat = client
        .post("/conversations", json!({"origin": "trigger"}))
        .await?
        .body["id"]
        .as_str()
        .context("id")?
        .to_string();
    let user_chat = mine.body["id"].as_str().context("id")?.to_string();
    let snapshot = client.snapshot(&trigger_chat).await?;
    assert_eq!(snapshot["conversation"]["origin"], "trigger");

    // A bad origin on a message is refused, and nothing is stored.
    let bad = client
        .post(
            &format!("/conversations/{trigger_chat}/messages"),
            json!({"text": "hi", "origin": "robot"}),
        )
        .await?;
    assert_eq!(bad.status, 400, "{bad:?}");
    assert_eq!(bad.body["error"]["field"], "origin");
    assert_eq!(
        bad.body["error"]["message"],
        "origin: must be user, trigger or connector"
    );
    let snapshot = client.snapshot(&trigger_chat).await?;
    assert_eq!(snapshot["messages"], json!([]), "{snapshot}");
    assert_eq!(snapshot["runs"], json!([]), "{snapshot}");

    let trigger_run = run_id(&send_as(&client, &trigger_chat, "nightly report", "trigger").await?)?;
    let user_run = run_id(&client.send(&user_chat, "hello").await?)?;
    let run = client
        .wait_run(&trigger_chat, &trigger_run, &["done"], QUICK)
        .await?;
    assert_eq!(run["origin"], "trigger", "{run}");
    let run = client
        .wait_run(&user_chat, &user_run, &["done"], QUICK)
        .await?;
    assert_eq!(run["origin"], "user", "{run}");

    // A person follows up in the trigger's chat: a person's run there.
    let follow_up = run_id(&client.send(&trigger_chat, "and the day before?").await?)?;
    let run = client
        .wait_run(&trigger_chat, &follow_up, &["done"], QUICK)
        .await?;
    assert_eq!(run["origin"], "user", "{run}");
    // Regenerating is a person's action too, in any chat.
    let again = client
        .post(
            &format!("/conversations/{trigger_chat}/regenerate"),
            json!({}),
        )
        .await?;
    assert_eq!(again.status, 202, "{again:?}");
    let run = client
        .wait_run(&trigger_chat, &run_id(&again.body)?, &["done"], QUICK)
        .await?;
    assert_eq!(run["origin"], "user", "{run}");
    let snapshot = client.snapshot(&trigger_chat).await?;
    assert_eq!(
        snapshot["conversation"]["origin"], "trigger",
        "the chat's stays"
    );

    // Counted when the run task ends, just after the run is written done.
    let text = wait_until("every run counted", QUICK, || async {
        let text = metrics_text(&chatd).await.ok()?;
        let trigger = metric(
            &text,
            r#"tandem_runs_total{origin="trigger",outcome="done"}"#,
        )?;
        let user = metric(&text, r#"tandem_runs_total{origin="user",outcome="done"}"#)?;
        (trigger == 1.0 && user == 3.0).then_some(text)
    })
    .await?;
    assert_eq!(
        metric(
            &text,
            r#"tandem_runs_total{origin="connector",outcome="done"}"#
        ),
        None,
        "{text}"
    );
    Ok(())
}

// 2 ---------------------------------------------------------------------------

/// What the fake triggerd saw of one request.
#[derive(Debug, Clone)]
struct Seen {
    method: Method,
    path: String,
    query: Option<String>,
    content_type: Option<String>,
    forward_key: bool,
    body: Vec<u8>,
}

/// A tiny triggerd on a unix socket: it records each request and answers
/// 201 to POST (a body of its own, an unusual content type), 200 to GET and
/// a 404 error to DELETE.
struct FakeTriggerd {
    seen: Arc<Mutex<Vec<Seen>>>,
    _dir: tempfile::TempDir,
    socket: PathBuf,
}

const FAKE_TYPE: &str = "application/vnd.tandem-test+json";
const FAKE_CREATED: &str =
    r#"{"trigger": {"id": "t_made", "name": "nightly"}, "note": "from the fake"}"#;

impl FakeTriggerd {
    async fn start() -> anyhow::Result<FakeTriggerd> {
        let dir = tempfile::tempdir()?;
        let socket = dir.path().join("triggers.sock");
        let listener = tokio::net::UnixListener::bind(&socket)?;
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let record = seen.clone();
        let handler =
            move |method: Method, uri: Uri, headers: HeaderMap, body: axum::body::Bytes| {
                let record = record.clone();
                async move {
                    record.lock().unwrap().push(Seen {
                        method: method.clone(),
                        path: uri.path().to_string(),
                        query: uri.query().map(str::to_string),
                        content_type: headers
                            .get("content-type")
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_string),
                        forward_key: headers.contains_key("x-forward-key"),
                        body: body.to_vec(),
                    });
                    match method {
                        Method::POST => (
                            StatusCode::CREATED,
                            [("content-type", FAKE_TYPE)],
                            FAKE_CREATED.to_string(),
                        )
                            .into_response(),
                        Method::DELETE => (
                            StatusCode::NOT_FOUND,
                            [("content-type", "application/json")],
                            r#"{"error":{"type":"not_found","message":"no trigger t_gone"}}"#
                                .to_string(),
                        )
                            .into_response(),
                        _ => (
                            StatusCode::OK,
                            [("content-type", "application/json")],
                            r#"{"triggers":[]}"#.to_string(),
                        )
                            .into_response(),
                    }
                }
            };
        let router = axum::Router::new()
            .route("/v1/chat-app/triggers", axum::routing::any(handler.clone()))
            .route("/v1/chat-app/triggers/{*rest}", axum::routing::any(handler));
        tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Ok(FakeTriggerd {
            seen,
            _dir: dir,
            socket,
        })
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// With no triggerd, the routes answer 503 `triggers_unavailable`, and
/// capabilities say there are no triggers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_triggerd_the_trigger_routes_answer_503() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let socket = dir.path().join("triggers.sock");
    let socket = socket.to_string_lossy().to_string();
    let (_sim, _chatd, client) = start(&[("QSE_TRIGGERS_SOCKET", &socket)]).await?;
    for (method, path) in [
        (reqwest::Method::GET, "/triggers"),
        (reqwest::Method::POST, "/triggers/t_1/run"),
        (reqwest::Method::DELETE, "/triggers/t_1"),
    ] {
        let answer = client.call(method.clone(), path, Some(json!({}))).await?;
        assert_eq!(answer.status, 503, "{method} {path}: {answer:?}");
        assert_eq!(answer.body["error"]["type"], "triggers_unavailable");
        assert_eq!(
            answer.body["error"]["message"],
            "triggerd is not running (start it with `tandem triggers start`)"
        );
    }
    let caps = client.get("/capabilities").await?;
    assert_eq!(caps.body["features"]["triggers"], false, "{caps:?}");
    Ok(())
}

/// A request reaches triggerd as it came (method, path, query, body, content
/// type, no forward key) and its answer comes back unchanged; the guard
/// still stands before it, and a body over 1 MiB never leaves chatd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trigger_routes_are_forwarded_to_triggerd_byte_for_byte() -> anyhow::Result<()> {
    let fake = FakeTriggerd::start().await?;
    let socket = fake.socket.to_string_lossy().to_string();
    let (_sim, _chatd, client) = start(&[("QSE_TRIGGERS_SOCKET", &socket)]).await?;
    let caps = client.get("/capabilities").await?;
    assert_eq!(caps.body["features"]["triggers"], true, "{caps:?}");

    let body = "{\"note\": \"caf\u{e9} \u{2615}\",\n  \"when\": \"0 7 * * *\"}";
    let answer = client
        .http
        .post(client.api("/triggers/t_1/run?dry=1&tz=Europe%2FBerlin"))
        .header("x-forward-key", FORWARD_KEY)
        .header("content-type", "application/json; charset=utf-8")
        .body(body)
        .send()
        .await?;
    assert_eq!(answer.status(), 201);
    assert_eq!(
        answer
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some(FAKE_TYPE)
    );
    assert_eq!(answer.text().await?, FAKE_CREATED);
    let seen = fake.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].method, Method::POST);
    assert_eq!(seen[0].path, "/v1/chat-app/triggers/t_1/run");
    assert_eq!(seen[0].query.as_deref(), Some("dry=1&tz=Europe%2FBerlin"));
    assert_eq!(
        seen[0].content_type.as_deref(),
        Some("application/json; charset=utf-8")
    );
    assert_eq!(seen[0].body, body.as_bytes());
    assert!(!seen[0].forward_key, "the forward key stays in chatd");

    // The bare route and another method; an error status passes unchanged.
    let list = client.get("/triggers").await?;
    assert_eq!(list.status, 200, "{list:?}");
    assert_eq!(list.body, json!({"triggers": []}));
    let gone = client
        .call(reqwest::Method::DELETE, "/triggers/t_gone", None)
        .await?;
    assert_eq!(gone.status, 404, "{gone:?}");
    assert_eq!(gone.body["error"]["message"], "no trigger t_gone");
    let seen = fake.seen();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert_eq!(
        (seen[1].method.clone(), seen[1].path.as_str()),
        (Method::GET, "/v1/chat-app/triggers")
    );
    assert_eq!(seen[1].query, None);
    assert_eq!(
        (seen[2].method.clone(), seen[2].path.as_str()),
        (Method::DELETE, "/v1/chat-app/triggers/t_gone")
    );

    // A body of exactly 1 MiB goes through whole.
    let whole = client
        .http
        .post(client.api("/triggers"))
        .header("x-forward-key", FORWARD_KEY)
        .header("content-type", "text/plain")
        .body(vec![b'x'; 1 << 20])
        .send()
        .await?;
    assert_eq!(whole.status(), 201);
    let seen = fake.seen();
    assert_eq!(seen.len(), 4, "{}", seen.len());
    assert_eq!(seen[3].body.len(), 1 << 20);
    assert_eq!(seen[3].content_type.as_deref(), Some("text/plain"));

    // The guard first: no key, a cross-site write, a body past 1 MiB.
    let no_key = client
        .http
        .post(client.api("/triggers"))
        .json(&json!({}))
        .send()
        .await?;
    assert_eq!(no_key.status(), 401);
    let cross = client
        .http
        .post(client.api("/triggers"))
        .header("x-forward-key", FORWARD_KEY)
        .header("sec-fetch-site", "cross-site")
        .json(&json!({}))
        .send()
        .await?;
    assert_eq!(cross.status(), 403);
    // Said in the head, so chatd answers before any of the body: sent by
    // hand, the answer is read whole (a client still writing a big body
    // could see the connection reset instead).
    let (status, answer) = declared_too_big(&client).await?;
    assert_eq!(status, 413, "{answer}");
    assert_eq!(answer["error"]["limit"], 1 << 20, "{answer}");
    assert_eq!(fake.seen().len(), 4, "none of these reached triggerd");
    Ok(())
}

/// POSTs a head declaring a body of 1 MiB + 1 to `/triggers` and nothing
/// more; answers chatd's status and JSON body.
async fn declared_too_big(client: &Client) -> anyhow::Result<(u16, Value)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = client.base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await?;
    let head = format!(
        "POST /v1/chat-app/triggers HTTP/1.1\r\nHost: {address}\r\nX-Forward-Key: {FORWARD_KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        (1 << 20) + 1
    );
    stream.write_all(head.as_bytes()).await?;
    let mut answer = Vec::new();
    tokio::time::timeout(QUICK, stream.read_to_end(&mut answer)).await??;
    let text = String::from_utf8_lossy(&answer);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("no status in {text:?}"))?;
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("");
    Ok((status, serde_json::from_str(body).unwrap_or(Value::Null)))
}

// 4 ---------------------------------------------------------------------------

fn write_step(path: &str, content: &str) -> Value {
    json!({"tool_calls": [{"name": "write_file", "arguments": {"path": path, "content": content}}]})
}

/// Runs one scripted write_file in `chat` and waits for the run to be done.
async fn write_in(
    sim: &Sim,
    client: &Client,
    chat: &str,
    path: &str,
    content: &str,
) -> anyhow::Result<()> {
    sim.faults(json!([write_step(path, content), {"tokens": 3}]))
        .await?;
    let run = run_id(&client.send(chat, "write it").await?)?;
    let run = client
        .wait_run(chat, &run, &["done", "failed"], QUICK)
        .await?;
    anyhow::ensure!(run["status"] == "done", "{run}");
    let snapshot = client.snapshot(chat).await?;
    let results = tandem_tests::harness::tool_results(&snapshot);
    anyhow::ensure!(results.len() == 1, "{results:?}");
    Ok(())
}

/// A chat made with the shared workspace works on the box's shared folder
/// (default ~/.tandemllm/workspace, 0700), a fork of it too, also after a
/// restart; an own chat still writes in workspaces/<id>/; deleting a shared
/// chat for good leaves the shared folder and its files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_chat_writes_in_the_shared_folder() -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let (sim, mut chatd, client) = start(&[]).await?;
    // The harness gives chatd its temp folder as HOME.
    let shared = chatd.dir.path().join(".tandemllm/workspace");
    let mode = std::fs::metadata(&shared)?.permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "the shared folder is made private at start");

    let made = client
        .post(
            "/conversations",
            json!({"origin": "trigger", "workspace": "shared", "permission_mode": "auto"}),
        )
        .await?;
    assert_eq!(made.status, 201, "{made:?}");
    assert_eq!(made.body["workspace"], "shared");
    let chat = made.body["id"].as_str().context("id")?.to_string();
    let own = client
        .post("/conversations", json!({"permission_mode": "auto"}))
        .await?;
    assert_eq!(own.body["workspace"], "own", "{own:?}");
    let own = own.body["id"].as_str().context("id")?.to_string();
    let before = chat_count(&client).await?;
    let bad = client
        .post("/conversations", json!({"workspace": "somewhere"}))
        .await?;
    assert_eq!(bad.status, 400, "{bad:?}");
    assert_eq!(bad.body["error"]["field"], "workspace");
    assert_eq!(
        bad.body["error"]["message"],
        "workspace: must be own or shared"
    );
    assert_eq!(chat_count(&client).await?, before);

    write_in(
        &sim,
        &client,
        &chat,
        "reports/today.txt",
        "from the trigger",
    )
    .await?;
    assert_eq!(
        std::fs::read_to_string(shared.join("reports/today.txt"))?,
        "from the trigger"
    );
    let workspaces = chatd.data_dir().join("workspaces");
    assert!(
        !workspaces.join(&chat).exists(),
        "no own folder for a shared chat"
    );

    write_in(&sim, &client, &own, "mine.txt", "private").await?;
    assert_eq!(
        std::fs::read_to_string(workspaces.join(&own).join("mine.txt"))?,
        "private"
    );
    assert!(!shared.join("mine.txt").exists());

    // A fork stays shared, and after a restart it still works there.
    let snapshot = client.snapshot(&chat).await?;
    let first = snapshot["messages"][0]["id"]
        .as_str()
        .context("first message")?;
    let fork = client
        .post(
            &format!("/conversations/{chat}/fork"),
            json!({"from_message_id": first}),
        )
        .await?;
    assert_eq!(fork.status, 201, "{fork:?}");
    assert_eq!(fork.body["workspace"], "shared");
    let fork = fork.body["id"].as_str().context("fork id")?.to_string();
    chatd.restart().await?;
    write_in(&sim, &client, &fork, "reports/fork.txt", "forked").await?;
    assert_eq!(
        std::fs::read_to_string(shared.join("reports/fork.txt"))?,
        "forked"
    );

    // Deleting a shared chat for good keeps the shared folder whole.
    for id in [&chat, &fork] {
        let gone = client
            .call(
                reqwest::Method::DELETE,
                &format!("/conversations/{id}?forever=1"),
                None,
            )
            .await?;
        assert_eq!(gone.status, 204, "{gone:?}");
    }
    assert_eq!(
        std::fs::read_to_string(shared.join("reports/today.txt"))?,
        "from the trigger"
    );
    assert!(shared.join("reports/fork.txt").exists());
    // The own chat's folder goes with its chat.
    let gone = client
        .call(
            reqwest::Method::DELETE,
            &format!("/conversations/{own}?forever=1"),
            None,
        )
        .await?;
    assert_eq!(gone.status, 204, "{gone:?}");
    assert!(!workspaces.join(&own).exists());
    assert!(shared.join("reports/today.txt").exists());
    Ok(())
}
