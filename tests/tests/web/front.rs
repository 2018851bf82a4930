//! chatd's front over HTTP (no browser): the admin token's session cookie,
//! cross-site writes, the trusted-network mode, the engine's routes
//! forwarded without the browser's credentials, and bad front addresses.
//! The page itself is tested in a browser in web.rs.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{json, Value};
use tandem_tests::harness::{bin_dir, free_port, Chatd, Sim};

const TOKEN: &str = "the-admin-token-of-this-box";

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// Signs in and returns the cookie header value (`tandem_session=…`).
async fn sign_in(front: &str, token: &str) -> reqwest::Response {
    client()
        .post(format!("{front}/v1/chat-app/session"))
        .json(&json!({ "token": token }))
        .send()
        .await
        .unwrap()
}

fn cookie_of(response: &reqwest::Response) -> String {
    let set = response.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_string();
    set.split(';').next().unwrap().to_string()
}

async fn error_type(response: reqwest::Response) -> String {
    let body: Value = response.json().await.unwrap();
    body["error"]["type"].as_str().unwrap_or("").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_token_buys_a_cookie_that_outlives_a_restart_but_not_a_new_token() {
    let sim = Sim::start(&[]).unwrap();
    let mut chatd = Chatd::start_with_front(&sim.url(), &[], Some(TOKEN))
        .await
        .unwrap();
    let front = chatd.front_url();
    let http = client();

    let state: Value = http
        .get(format!("{front}/v1/chat-app/session"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(state, json!({"signed_in": false, "auth": "token"}));
    // Signed out: the probe answers, nothing private; every other route 401.
    let probe: Value = http
        .get(format!("{front}/v1/chat-app/capabilities"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(probe["signed_in"], false);
    assert!(probe.get("defaults").is_none(), "{probe}");
    let list = http
        .get(format!("{front}/v1/chat-app/conversations"))
        .send()
        .await
        .unwrap();
    assert_eq!(list.status(), 401);
    assert_eq!(error_type(list).await, "signed_out");
    // A forward key is no way in through the front.
    let keyed = http
        .get(format!("{front}/v1/chat-app/conversations"))
        .header("x-forward-key", tandem_tests::harness::FORWARD_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(keyed.status(), 401);

    let wrong = sign_in(&front, "not-the-token").await;
    assert_eq!(wrong.status(), 401);
    assert!(wrong.headers().get("set-cookie").is_none());
    let right = sign_in(&front, TOKEN).await;
    assert_eq!(right.status(), 204);
    let set = right.headers()["set-cookie"].to_str().unwrap().to_string();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(attribute), "{set}");
    }
    let cookie = cookie_of(&right);

    let created = http
        .post(format!("{front}/v1/chat-app/conversations"))
        .header("cookie", &cookie)
        .json(&json!({"title": "through the front"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let chat: Value = created.json().await.unwrap();
    let id = chat["id"].as_str().unwrap().to_string();
    // API answers through the front are data, never a page.
    let snapshot = http
        .get(format!("{front}/v1/chat-app/conversations/{id}"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(snapshot.status(), 200);
    assert!(snapshot.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .starts_with("sandbox"));

    // A write from another site with the cookie: refused, nothing made.
    for headers in [
        vec![("sec-fetch-site", "cross-site")],
        vec![("origin", "http://elsewhere.example")],
    ] {
        let mut request = http
            .post(format!("{front}/v1/chat-app/conversations"))
            .header("cookie", &cookie)
            .json(&json!({"title": "forged"}));
        for (k, v) in &headers {
            request = request.header(*k, *v);
        }
        let refused = request.send().await.unwrap();
        assert_eq!(refused.status(), 403, "{headers:?}");
        assert_eq!(error_type(refused).await, "cross_site");
    }
    let same_origin = http
        .post(format!("{front}/v1/chat-app/conversations/{id}/messages"))
        .header("cookie", &cookie)
        .header("origin", &front)
        .header("sec-fetch-site", "same-origin")
        .json(&json!({"text": "hello [sim tokens=5]"}))
        .send()
        .await
        .unwrap();
    assert_eq!(same_origin.status(), 202);
    let titles: Vec<String> = chatd.client().get("/conversations").await.unwrap().body
        ["conversations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["title"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(titles, vec!["through the front".to_string()]);

    // The chat's events stream through the front with the cookie.
    let events = http
        .get(format!(
            "{front}/v1/chat-app/conversations/{id}/events?after=0"
        ))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 200);
    let mut body = events.bytes_stream();
    let mut seen = String::new();
    let finished = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(chunk) = body.next().await {
            seen.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
            if seen.contains("event: run.finished") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(finished, Ok(true), "{seen}");
    assert!(seen.contains("w0 "), "{seen}");

    // The cookie is not stored anywhere: a restarted chatd still takes it.
    chatd.restart().await.unwrap();
    let after = http
        .get(format!("{front}/v1/chat-app/conversations/{id}"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(after.status(), 200);
    // A new admin token signs every browser out.
    std::fs::write(
        chatd.dir.path().join("secrets.env"),
        format!(
            "QSE_FORWARD_KEY={}\nQSE_ADMIN_TOKEN=a-new-admin-token\n",
            tandem_tests::harness::FORWARD_KEY
        ),
    )
    .unwrap();
    chatd.restart().await.unwrap();
    let stale = http
        .get(format!("{front}/v1/chat-app/conversations/{id}"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(stale.status(), 401);
    // The bearer form works for scripts.
    let bearer = http
        .get(format!("{front}/v1/chat-app/conversations/{id}"))
        .bearer_auth("a-new-admin-token")
        .send()
        .await
        .unwrap();
    assert_eq!(bearer.status(), 200);

    // Sign out clears the cookie.
    let out = http
        .delete(format!("{front}/v1/chat-app/session"))
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 204);
    assert!(out.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .contains("Max-Age=0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_tokens_are_limited_and_bad_bodies_change_nothing() {
    let sim = Sim::start(&[]).unwrap();
    let chatd = Chatd::start_with_front(&sim.url(), &[], Some(TOKEN))
        .await
        .unwrap();
    let front = chatd.front_url();
    for (body, field) in [
        (json!({}), "token"),
        (json!({"token": 5}), "token"),
        (json!({"token": "x", "extra": 1}), "extra"),
    ] {
        let answer = client()
            .post(format!("{front}/v1/chat-app/session"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 400, "{body}");
        let error: Value = answer.json().await.unwrap();
        assert_eq!(error["error"]["field"], field, "{error}");
    }
    let cookie = cookie_of(&sign_in(&front, TOKEN).await);
    // Wrong bearers count as guesses too, sent all at once.
    let guesses = (0..6).map(|i| {
        let front = front.clone();
        async move {
            client()
                .get(format!("{front}/v1/chat-app/conversations"))
                .bearer_auth(format!("guess-{i}"))
                .send()
                .await
                .unwrap()
                .status()
        }
    });
    for status in futures_util::future::join_all(guesses).await {
        assert_eq!(status, 401);
    }
    for _ in 0..4 {
        assert_eq!(sign_in(&front, "guess").await.status(), 401);
    }
    // Spent: the right bearer is not even compared now.
    let bearer = client()
        .get(format!("{front}/v1/chat-app/conversations"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(bearer.status(), 401);
    let with_cookie = client()
        .get(format!("{front}/v1/chat-app/conversations"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(with_cookie.status(), 200);
    let limited = sign_in(&front, "guess").await;
    assert_eq!(limited.status(), 429);
    let wait: u64 = limited.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&wait), "{wait}");
    let error: Value = limited.json().await.unwrap();
    assert_eq!(error["error"]["type"], "too_many_attempts");
    // A browser signed in before keeps working; a right token waits too.
    assert_eq!(sign_in(&front, TOKEN).await.status(), 429);
    assert!(chatd.log().contains("a sign-in with a wrong token"));
    assert!(
        !chatd.log().contains("guess"),
        "a presented token was logged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_admin_token_the_front_is_open_and_says_so() {
    let sim = Sim::start(&[]).unwrap();
    let toml = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(toml.path(), "[chatd]\nfront_hosts = [\"gpubox.lan\"]\n").unwrap();
    let config = toml.path().to_str().unwrap().to_string();
    let chatd = Chatd::start_with_front(&sim.url(), &[("QSE_CONFIG", &config)], None)
        .await
        .unwrap();
    let front = chatd.front_url();
    let state: Value = client()
        .get(format!("{front}/v1/chat-app/session"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(state, json!({"signed_in": true, "auth": "none"}));
    let caps: Value = client()
        .get(format!("{front}/v1/chat-app/capabilities"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(caps["signed_in"], true);
    let created = client()
        .post(format!("{front}/v1/chat-app/conversations"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    // Cross-site writes are refused in this mode too.
    let forged = client()
        .post(format!("{front}/v1/chat-app/conversations"))
        .header("sec-fetch-site", "cross-site")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 403);
    // `Origin: null` is a page with no origin of its own (a sandboxed frame,
    // a file, a data: URL) anywhere: its writes are refused too, nothing made.
    let opaque = client()
        .post(format!("{front}/v1/chat-app/conversations"))
        .header("origin", "null")
        .json(&json!({"title": "from nowhere"}))
        .send()
        .await
        .unwrap();
    assert_eq!(opaque.status(), 403);
    assert_eq!(error_type(opaque).await, "cross_site");
    let chats = chatd.client().get("/conversations").await.unwrap().body;
    assert_eq!(
        chats["conversations"].as_array().map(Vec::len),
        Some(1),
        "{chats}"
    );
    assert!(chatd.log().contains("admin_token=false"), "{}", chatd.log());

    // A name pointed here from elsewhere (DNS rebinding) is refused; an IP
    // address, localhost and the names in front_hosts are not.
    let port = chatd.front_port.unwrap();
    for (host, expect) in [
        (format!("evil.example:{port}"), 421),
        (format!("gpubox.lan:{port}"), 200),
        (format!("localhost:{port}"), 200),
        (format!("127.0.0.1:{port}"), 200),
        (format!("[::1]:{port}"), 200),
    ] {
        let answer = client()
            .get(format!("{front}/v1/chat-app/conversations"))
            .header("host", &host)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), expect, "{host}");
        if expect == 421 {
            assert_eq!(error_type(answer).await, "wrong_host");
        }
    }
}

/// What an engine received: the headers of each request.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<axum::http::HeaderMap>>>);

/// A stand-in engine that records headers and streams five chunks 50 ms apart.
async fn recording_engine() -> (String, Seen) {
    use axum::routing::any;
    let seen = Seen::default();
    let record = seen.clone();
    let app = axum::Router::new().fallback(any(move |request: axum::extract::Request| {
        let record = record.clone();
        async move {
            record.0.lock().unwrap().push(request.headers().clone());
            let path = request.uri().path().to_string();
            let stream = futures_util::stream::unfold(0u32, |i| async move {
                if i == 5 {
                    return None;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                Some((Ok::<_, std::io::Error>(format!("data: {i}\n\n")), i + 1))
            });
            axum::response::Response::builder()
                .status(if path == "/teapot" { 418 } else { 200 })
                .header("content-type", "text/event-stream")
                .header("x-engine", "recording")
                .header("set-cookie", "engine=1")
                .body(axum::body::Body::from_stream(stream))
                .unwrap()
        }
    }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_routes_go_to_the_engine_streamed_without_the_fronts_credentials() {
    let (engine, seen) = recording_engine().await;
    let chatd = Chatd::start_with_front(&engine, &[], Some(TOKEN))
        .await
        .unwrap();
    let front = chatd.front_url();
    let cookie = cookie_of(&sign_in(&front, TOKEN).await);
    seen.0.lock().unwrap().clear();

    // Signed out: the engine is not reached through the front.
    let refused = client()
        .post(format!("{front}/v1/chat/completions"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    assert!(seen.0.lock().unwrap().is_empty());

    let answer = client()
        .post(format!("{front}/v1/chat/completions?x=1"))
        .header("cookie", format!("{cookie}; other=1"))
        .header("x-client", "kept")
        .body("{\"stream\":true}")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["x-engine"], "recording");
    // An engine's page would run with the front's origin: it is sandboxed,
    // and the engine sets no cookie here.
    assert!(answer.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .starts_with("sandbox"));
    assert!(answer.headers().get("set-cookie").is_none());
    // Streamed: the first chunk arrives before the engine has sent the last.
    let mut body = answer.bytes_stream();
    let first = tokio::time::timeout(Duration::from_secs(5), body.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&first).starts_with("data: 0"));
    let mut rest = String::new();
    while let Some(chunk) = body.next().await {
        rest.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
    }
    assert!(rest.ends_with("data: 4\n\n"), "{rest}");

    let bearer = client()
        .get(format!("{front}/teapot"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(bearer.status(), 418, "the engine's status passes on");
    let engine_key = client()
        .get(format!("{front}/v1/models"))
        .header("cookie", &cookie)
        .header("authorization", "Bearer the-engines-own-key")
        .send()
        .await
        .unwrap();
    assert_eq!(engine_key.status(), 200);

    let seen = seen.0.lock().unwrap().clone();
    assert_eq!(seen.len(), 3);
    for headers in &seen {
        assert!(headers.get("cookie").is_none(), "{headers:?}");
        assert!(headers.get("x-forward-key").is_none(), "{headers:?}");
        for value in headers.values() {
            assert!(
                !value.to_str().unwrap_or("").contains(TOKEN),
                "the admin token reached the engine: {headers:?}"
            );
        }
    }
    assert_eq!(seen[0]["x-client"], "kept");
    assert_eq!(seen[2]["authorization"], "Bearer the-engines-own-key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_front_address_stops_the_start_with_the_reason() {
    let chatd_port = free_port();
    for (front, expect) in [
        (
            "somewhere".to_string(),
            "chatd.front: \"somewhere\" is not an address like 0.0.0.0:4180".to_string(),
        ),
        (
            format!("127.0.0.1:{chatd_port}"),
            "is chatd's own listen address".to_string(),
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let output = std::process::Command::new(bin_dir().join("chatd"))
            .args(["--front", &front])
            .env_clear()
            .env("HOME", dir.path())
            .env("QSE_CHAT_DATA", dir.path().join("chat"))
            .env("QSE_SECRETS", dir.path().join("secrets.env"))
            .env("QSE_CHAT_URL", format!("127.0.0.1:{chatd_port}"))
            .env("QSE_LOG_TO", "stderr")
            .output()
            .unwrap();
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(&expect), "{front}: {stderr}");
    }
    // A front whose port is taken: the start fails naming it.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(bin_dir().join("chatd"))
        .args(["--front", &address])
        .env_clear()
        .env("HOME", dir.path())
        .env("QSE_CHAT_DATA", dir.path().join("chat"))
        .env("QSE_SECRETS", dir.path().join("secrets.env"))
        .env("QSE_CHAT_URL", format!("127.0.0.1:{chatd_port}"))
        .env("QSE_ENGINE_URL", "http://127.0.0.1:9")
        .env("QSE_SANDBOX_SOCKET", dir.path().join("none.sock"))
        .env("QSE_LOG_TO", "stderr")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("listening on the front {address}")),
        "{stderr}"
    );
}

/// The page's own bytes (`/` and every file it names) stay within the
/// budget the benchmark prints (figure 12b): a page a phone loads on every
/// visit, with no build step to shrink it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_weighs_within_its_budget() {
    let sim = Sim::start(&["--tokens-per-second", "0"]).unwrap();
    let chatd = Chatd::start_with_front(&sim.url(), &[], None)
        .await
        .unwrap();
    let files = tandem_tests::pagebench::weight(&chatd.front_url())
        .await
        .unwrap();
    let total: u64 = files.iter().map(|(_, n)| n).sum();
    assert!(
        total <= tandem_tests::pagebench::WEIGHT_BUDGET,
        "the page weighs {total} bytes, over its budget of {} bytes: {files:?}",
        tandem_tests::pagebench::WEIGHT_BUDGET
    );
}

/// A browser that has the page asks again (`no-cache`) and, with the file's
/// tag, gets a 304 and no bytes; another tag gets the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_answers_a_browser_that_has_it_with_304() {
    let sim = Sim::start(&["--tokens-per-second", "0"]).unwrap();
    let chatd = Chatd::start_with_front(&sim.url(), &[], None)
        .await
        .unwrap();
    let url = format!("{}/chat-app/app.js", chatd.front_url());
    let first = client().get(&url).send().await.unwrap();
    assert_eq!(first.status(), 200);
    assert_eq!(first.headers()["cache-control"], "no-cache");
    let tag = first.headers()["etag"].to_str().unwrap().to_string();
    assert!(first.bytes().await.unwrap().len() > 1000);
    let again = client()
        .get(&url)
        .header("if-none-match", &tag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);
    assert_eq!(again.headers()["etag"].to_str().unwrap(), tag);
    assert!(again.bytes().await.unwrap().is_empty());
    let other = client()
        .get(&url)
        .header("if-none-match", "\"0000000000000000\"")
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 200, "another tag gets the file");
}
