//! The web page in a real browser: headless Chromium (Debian's `chromium`
//! and `chromium-driver`) driven over WebDriver against the real chatd with
//! its front and the engine simulator. Each test asserts on what a person
//! sees (`document.body.dataset.state`, the text of the DOM contract's
//! elements, what is shown and what is not) and keeps screenshots of each
//! state under `target/test-artifacts/web/<test>/`. Every wait is a bounded
//! poll; browsers, chromedriver and daemons are stopped on drop, a failing
//! test included.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tandem_tests::browser::{self, Browser, Chromedriver, Viewport, DESKTOP, ENTER, PHONE, WAIT};
use tandem_tests::harness::{sim_answer, wait_until, Chatd, Client, Sim};

/// The admin token the tests' chatd is given.
const TOKEN: &str = "web-test-admin-token-0123456789";
/// A run's end, or a page coming back, on a loaded 2-vCPU machine.
const LONG: Duration = Duration::from_secs(45);

/// One test's processes: chromedriver first so it goes first on drop
/// (browsers are locals of the test and go before it), then chatd, then
/// the engine.
struct Web {
    driver: Chromedriver,
    chatd: Chatd,
    sim: Sim,
    client: Client,
}

impl Web {
    async fn start(
        sim_args: &[&str],
        env: &[(&str, &str)],
        token: Option<&str>,
    ) -> anyhow::Result<Web> {
        let sim = Sim::start(sim_args)?;
        let chatd = Chatd::start_with_front(&sim.url(), env, token).await?;
        let client = chatd.client();
        let driver = Chromedriver::start().await?;
        Ok(Web {
            driver,
            chatd,
            sim,
            client,
        })
    }

    fn front(&self) -> String {
        self.chatd.front_url()
    }

    async fn browser(&self, viewport: Viewport) -> anyhow::Result<Browser> {
        Browser::open(&self.driver, viewport).await
    }

    /// A new browser at the front, signed in with the admin token, live.
    async fn signed_in(&self, viewport: Viewport, path: &str) -> anyhow::Result<Browser> {
        let browser = self.browser(viewport).await?;
        sign_in(&browser, &format!("{}/{path}", self.front())).await?;
        Ok(browser)
    }

    /// The stored text of the last message with `role`, trimmed.
    async fn stored_last(&self, chat: &str, role: &str) -> anyhow::Result<String> {
        let snapshot = self.client.snapshot(chat).await?;
        let text = snapshot["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .rev()
            .find(|m| m["role"] == role)
            .and_then(|m| m["text"].as_str())
            .with_context(|| format!("no {role} message in {snapshot}"))?;
        Ok(text.trim().to_string())
    }

    /// The last run of the chat, from the API.
    async fn last_run(&self, chat: &str) -> anyhow::Result<Value> {
        let snapshot = self.client.snapshot(chat).await?;
        snapshot["runs"]
            .as_array()
            .and_then(|r| r.last().cloned())
            .with_context(|| format!("no run in {snapshot}"))
    }
}

/// Opens `url`, waits for the sign-in card, signs in with [`TOKEN`] (Enter
/// in the field), waits until the page is live.
async fn sign_in(b: &Browser, url: &str) -> anyhow::Result<()> {
    b.goto(url).await?;
    b.wait_state("signin").await?;
    ensure!(b.visible("#signin").await?, "the sign-in card is not shown");
    b.type_into("#token", TOKEN).await?;
    b.type_into("#token", ENTER).await?;
    b.wait_state("live").await
}

/// The chat id in the page's address (`#/c/<id>`), "" when none is open.
async fn open_chat(b: &Browser) -> anyhow::Result<String> {
    let v = b
        .eval("return location.hash.startsWith('#/c/') ? decodeURIComponent(location.hash.slice(4)) : ''")
        .await?;
    Ok(v.as_str().unwrap_or("").to_string())
}

/// Clicks "New chat"; answers the new chat's id once the address names it.
async fn new_chat(b: &Browser) -> anyhow::Result<String> {
    let before = open_chat(b).await?;
    b.click("#new-chat").await?;
    b.poll("the new chat in the address", WAIT, || async {
        let now = open_chat(b).await?;
        Ok(if !now.is_empty() && now != before {
            Ok(now)
        } else {
            Err(format!("hash names {now:?}"))
        })
    })
    .await
}

/// Types `text` in the composer and presses Send.
async fn send(b: &Browser, text: &str) -> anyhow::Result<()> {
    b.type_into("#composer", text).await?;
    b.click("#send").await
}

async fn wait_status(b: &Browser, want: &[&str], bound: Duration) -> anyhow::Result<String> {
    b.wait_text("#status .state", |t| want.contains(&t.trim()), bound)
        .await
        .map(|t| t.trim().to_string())
}

/// The shown text of the last message with `role` (`.body`), trimmed.
async fn last_body(b: &Browser, role: &str) -> anyhow::Result<Option<String>> {
    let v = b
        .eval_with(
            "const m = document.querySelectorAll(`#messages .message[data-role='${arguments[0]}']`);
             if (!m.length) return null;
             const body = m[m.length - 1].querySelector('.body');
             return body ? body.innerText : null;",
            vec![json!(role)],
        )
        .await?;
    Ok(v.as_str().map(|s| s.trim().to_string()))
}

/// The shown texts of every message with `role`, trimmed, in order.
async fn bodies(b: &Browser, role: &str) -> anyhow::Result<Vec<String>> {
    let v = b
        .eval_with(
            "return [...document.querySelectorAll(`#messages .message[data-role='${arguments[0]}'] .body`)]
                 .map(e => e.innerText.trim());",
            vec![json!(role)],
        )
        .await?;
    Ok(serde_json::from_value(v)?)
}

/// Waits until the page shows a new answer (more assistant messages than
/// `before`) and the status is Ready again: after a send, "Ready" alone
/// may still be the state from before the run started.
async fn wait_answered(b: &Browser, before: usize, bound: Duration) -> anyhow::Result<()> {
    b.poll("a new answer, and Ready", bound, || async {
        let answers = b.count("#messages .message[data-role='assistant']").await?;
        let state = b.text("#status .state").await?;
        Ok(if answers > before && state.trim() == "Ready" {
            Ok(())
        } else {
            Err(format!("{answers} answers, status {state:?}"))
        })
    })
    .await
}

/// Waits until the last assistant message shows at least `n` `w` tokens.
async fn wait_tokens(b: &Browser, n: usize, bound: Duration) -> anyhow::Result<String> {
    b.poll(
        &format!("{n} tokens of the answer shown"),
        bound,
        || async {
            let text = last_body(b, "assistant").await?.unwrap_or_default();
            let shown = text
                .split_whitespace()
                .filter(|w| w.starts_with('w'))
                .count();
            Ok(if shown >= n {
                Ok(text)
            } else {
                Err(format!("{shown} tokens shown"))
            })
        },
    )
    .await
}

/// Whether the element is inside the window (every edge).
async fn inside_viewport(b: &Browser, css: &str) -> anyhow::Result<Value> {
    b.eval_with(
        "const r = document.querySelector(arguments[0]).getBoundingClientRect();
         return {top: r.top, bottom: r.bottom, left: r.left, right: r.right,
                 width: innerWidth, height: innerHeight,
                 inside: r.top >= 0 && r.left >= 0 && r.bottom <= innerHeight && r.right <= innerWidth};",
        vec![json!(css)],
    )
    .await
}

/// How many shown elements say "The chat service stopped" themselves (not
/// through a child).
async fn stopped_banners(b: &Browser) -> anyhow::Result<u64> {
    let v = b
        .eval(
            "return [...document.querySelectorAll('body *')].filter(e =>
                 [...e.childNodes].some(n => n.nodeType === 3 && n.textContent.includes('The chat service stopped'))
                 && e.checkVisibility({visibilityProperty: true})).length;",
        )
        .await?;
    v.as_u64().context("a count")
}

// 1 ---------------------------------------------------------------------------

/// A laptop starts an answer and closes its lid; a phone opens the same chat
/// and sees the whole answer, as stored, at 390 px without sideways scroll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_devices_one_chat() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let web = Web::start(&[], &[], Some(TOKEN)).await?;
    let desk = web.signed_in(DESKTOP, "").await?;
    let chat = new_chat(&desk).await?;
    send(&desk, "Tell me a long story [sim tokens=160 tps=20]").await?;
    wait_tokens(&desk, 5, LONG).await?;
    wait_status(&desk, &["Answering"], WAIT).await?;
    desk.screenshot("desktop-answering").await?;
    let run = web.last_run(&chat).await?;
    ensure!(
        run["status"] == "running",
        "the run is still working: {run}"
    );
    // The lid closes mid-answer: the browser and its connections go.
    desk.close().await?;

    let phone = web.browser(PHONE).await?;
    sign_in(&phone, &format!("{}/#/c/{chat}", web.front())).await?;
    ensure!(
        open_chat(&phone).await? == chat,
        "the phone opens the chat in its address"
    );
    wait_tokens(&phone, 1, WAIT).await?;
    phone.screenshot("phone-chat").await?;
    wait_status(&phone, &["Ready"], LONG).await?;
    let shown = last_body(&phone, "assistant").await?.unwrap_or_default();
    let stored = web.stored_last(&chat, "assistant").await?;
    assert_eq!(shown, stored, "the phone shows the stored answer");
    assert_eq!(stored, sim_answer(160).trim(), "the answer ran to its end");
    let run = web.last_run(&chat).await?;
    assert_eq!(run["status"], "done", "{run}");
    phone.screenshot("phone-done").await?;

    let width = phone
        .eval("return document.documentElement.scrollWidth")
        .await?;
    assert!(
        width.as_u64().is_some_and(|w| w <= 390),
        "the page scrolls sideways at 390 px: scrollWidth {width}"
    );
    let composer = inside_viewport(&phone, "#composer").await?;
    assert_eq!(
        composer["inside"], true,
        "the composer is off screen: {composer}"
    );
    Ok(())
}

// 2 ---------------------------------------------------------------------------

/// chatd stops mid-answer: one banner, gone again when chatd is back; the
/// run says Interrupted; Continue finishes it with nothing doubled or lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chatd_restart_mid_stream() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let mut web = Web::start(&[], &[], Some(TOKEN)).await?;
    let b = web.signed_in(DESKTOP, "").await?;
    let chat = new_chat(&b).await?;
    send(&b, "A long one [sim tokens=400 tps=40]").await?;
    wait_tokens(&b, 10, LONG).await?;
    wait_status(&b, &["Answering"], WAIT).await?;

    web.chatd
        .sigterm(Duration::from_secs(15))
        .context("chatd's SIGTERM")?;
    b.wait_visible("#banner-stopped", WAIT).await?;
    let text = b.text("#banner-stopped").await?;
    assert!(
        text.contains("The chat service stopped"),
        "the banner says {text:?}"
    );
    assert_eq!(stopped_banners(&b).await?, 1, "exactly one banner");
    b.screenshot("banner-shown").await?;

    web.chatd.restart().await?;
    b.wait_hidden("#banner-stopped", LONG).await?;
    assert_eq!(
        stopped_banners(&b).await?,
        0,
        "no banner once chatd is back"
    );
    wait_status(&b, &["Interrupted"], WAIT).await?;
    b.screenshot("banner-gone-interrupted").await?;
    assert_eq!(web.last_run(&chat).await?["status"], "interrupted");

    b.click("#continue").await?;
    wait_status(&b, &["Ready"], LONG).await?;
    // The page renders on the next frame: the last deltas may be a frame behind.
    let want = sim_answer(400).trim().to_string();
    let shown = b
        .poll("the whole answer shown", WAIT, || async {
            let shown = last_body(&b, "assistant").await?.unwrap_or_default();
            Ok(if shown == want {
                Ok(shown)
            } else {
                Err(format!("{} tokens shown", shown.split_whitespace().count()))
            })
        })
        .await;
    let stored = web.stored_last(&chat, "assistant").await?;
    assert_eq!(stored, want, "the stored answer is whole, in order, once");
    let shown = shown?;
    assert_eq!(shown, stored, "the page shows the stored answer");
    assert_eq!(
        b.count("#messages .message[data-role='assistant']").await?,
        1,
        "one assistant message"
    );
    assert_eq!(b.count("#banner-stopped").await?, 1, "one banner element");
    b.screenshot("continued-ready").await?;
    Ok(())
}

// 3 ---------------------------------------------------------------------------

/// The model's HTML and script links are shown as text; nothing runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_html_is_text() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let web = Web::start(&[], &[], None).await?;
    let b = web.browser(DESKTOP).await?;
    b.goto(&web.front()).await?;
    b.wait_state("live").await?;
    let title = b.eval("return document.title").await?;
    let answer = "Look <img src=x onerror=\"document.title='pwned'\"> and \
                  [me](javascript:document.title='pwned2') and \
                  <script>document.title='pwned3'</script> and [ok](https://example.org/a)\n\n\
                  ```html\n<b>x</b>\n```\n";
    web.sim.faults(json!([{"text": answer}])).await?;
    let chat = new_chat(&b).await?;
    send(&b, "Show me some markup").await?;
    wait_answered(&b, 0, LONG).await?;
    b.wait_text(
        "#messages .message[data-role='assistant'] .body",
        |t| t.trim_end().ends_with("<b>x</b>"),
        WAIT,
    )
    .await?;
    assert_eq!(web.stored_last(&chat, "assistant").await?, answer.trim());
    b.screenshot("markup-as-text").await?;

    assert_eq!(
        b.count("#messages img, #messages script, #messages b")
            .await?,
        0,
        "no element made from the model's markup"
    );
    let scripts = b
        .eval("return [...document.scripts].map(s => s.src)")
        .await?;
    let scripts: Vec<String> = serde_json::from_value(scripts)?;
    let front = web.front();
    // Every script is one of the page's own files, app.js last (its init()
    // starts the others), and none came from the model's text.
    ensure!(
        scripts.len() > 5
            && scripts.iter().all(|s| {
                s.strip_prefix(&format!("{front}/chat-app/"))
                    .is_some_and(|name| name.ends_with(".js") && !name.contains('/'))
            })
            && scripts.last() == Some(&format!("{front}/chat-app/app.js")),
        "the page's scripts are its own: {scripts:?}"
    );
    assert_eq!(b.count("a[href^='javascript' i]").await?, 0);
    let ok = b
        .eval(
            "const a = [...document.querySelectorAll('#messages a')].find(a => a.textContent.trim() === 'ok');
             return a ? {href: a.getAttribute('href'), rel: a.rel, target: a.target} : null;",
        )
        .await?;
    assert_eq!(ok["href"], "https://example.org/a", "the ok link: {ok}");
    let rel = ok["rel"].as_str().unwrap_or("");
    assert!(
        rel.contains("noopener") && rel.contains("noreferrer"),
        "the link's rel: {ok}"
    );
    assert_eq!(b.eval("return document.title").await?, title, "nothing ran");
    let body = b
        .text_content("#messages .message[data-role='assistant'] .body")
        .await?;
    for shown in [
        "<img src=x onerror=",
        "<script>",
        "[me](javascript:document.title='pwned2')",
    ] {
        assert!(
            body.contains(shown),
            "{shown:?} is not shown as text in {body:?}"
        );
    }
    let code = b
        .text_content("#messages .message[data-role='assistant'] pre code")
        .await?;
    assert!(
        code.contains("<b>x</b>"),
        "the fence shows its markup: {code:?}"
    );
    Ok(())
}

// 4 ---------------------------------------------------------------------------

/// Without the session cookie nothing of the chats shows; a wrong token is
/// refused in words; the cookie is HttpOnly and SameSite=Strict, and a
/// write from another site is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_out_sees_sign_in() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let web = Web::start(&[], &[], Some(TOKEN)).await?;
    let existing = web.client.create_chat().await?;
    let front = web.front();
    let http = reqwest::Client::new();

    let b = web.browser(DESKTOP).await?;
    b.goto(&front).await?;
    b.wait_state("signin").await?;
    assert!(b.visible("#signin").await?, "the sign-in card is shown");
    assert!(!b.visible("#app").await?, "the app is not shown signed out");
    assert!(!b.visible("#signin-error").await?, "no error before a try");
    b.screenshot("signin").await?;

    b.type_into("#token", "not-the-token").await?;
    b.click("#signin-submit").await?;
    b.wait_visible("#signin-error", WAIT).await?;
    let error = b
        .wait_text("#signin-error", |t| !t.trim().is_empty(), WAIT)
        .await?;
    let refused = http
        .post(format!("{front}/v1/chat-app/session"))
        .json(&json!({"token": "also-wrong"}))
        .send()
        .await?;
    assert_eq!(refused.status(), 401);
    let refused: Value = refused.json().await?;
    assert_eq!(refused["error"]["type"], "signed_out");
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        error.contains(message),
        "the card shows the server's message {message:?}, not {error:?}"
    );
    assert_eq!(b.state().await?, "signin");
    assert_eq!(
        b.count("#chat-list li.chat").await?,
        0,
        "no chat list signed out"
    );
    b.screenshot("signin-refused").await?;

    b.paste_into("#token", TOKEN).await?;
    b.click("#signin-submit").await?;
    b.wait_state("live").await?;
    b.wait_count(
        &format!("#chat-list li.chat[data-chat-id='{existing}']"),
        |n| n == 1,
        WAIT,
    )
    .await?;
    assert!(!b.visible("#signin").await?, "the card goes once signed in");
    let cookie = b.eval("return document.cookie").await?;
    assert!(
        !cookie.as_str().unwrap_or("").contains("tandem_session"),
        "the page can read the session cookie: {cookie}"
    );
    b.screenshot("live").await?;

    // Over HTTP: the cookie's attributes, and the door without it.
    let signed = http
        .post(format!("{front}/v1/chat-app/session"))
        .json(&json!({"token": TOKEN}))
        .send()
        .await?;
    assert_eq!(signed.status(), 204);
    let set_cookie = signed
        .headers()
        .get(header::SET_COOKIE)
        .and_then(|v| v.to_str().ok())
        .context("no Set-Cookie")?
        .to_string();
    assert!(set_cookie.contains("HttpOnly"), "{set_cookie}");
    assert!(set_cookie.contains("SameSite=Strict"), "{set_cookie}");
    let cookie = set_cookie.split(';').next().unwrap_or("").to_string();

    let bare = http
        .get(format!("{front}/v1/chat-app/conversations"))
        .send()
        .await?;
    assert_eq!(bare.status(), 401);
    let bare: Value = bare.json().await?;
    assert_eq!(bare["error"]["type"], "signed_out");

    let listed = |v: &Value| v["conversations"].as_array().map_or(0, Vec::len);
    let before = listed(&web.client.get("/conversations").await?.body);
    let cross = http
        .post(format!("{front}/v1/chat-app/conversations"))
        .header(header::COOKIE, &cookie)
        .header("sec-fetch-site", "cross-site")
        .json(&json!({}))
        .send()
        .await?;
    assert_eq!(cross.status(), 403);
    let cross: Value = cross.json().await?;
    assert_eq!(cross["error"]["type"], "cross_site");
    assert_eq!(
        listed(&web.client.get("/conversations").await?.body),
        before,
        "nothing was created"
    );
    // The same with the cookie from this site: made.
    let same = http
        .post(format!("{front}/v1/chat-app/conversations"))
        .header(header::COOKIE, &cookie)
        .header("sec-fetch-site", "same-origin")
        .json(&json!({}))
        .send()
        .await?;
    assert_eq!(same.status(), 201);
    Ok(())
}

// 5 ---------------------------------------------------------------------------

/// No admin token: the page is live at once and says the network must be trusted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_admin_token_is_trusted_network() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let web = Web::start(&[], &[], None).await?;
    let b = web.browser(DESKTOP).await?;
    b.goto(&web.front()).await?;
    b.wait_state("live").await?;
    b.wait_visible("#trusted-notice", WAIT).await?;
    let notice = b.text("#trusted-notice").await?;
    assert!(
        notice.contains("QSE_ADMIN_TOKEN"),
        "the notice says how to require sign-in: {notice:?}"
    );
    assert!(!b.visible("#signin").await?, "no sign-in card");
    assert!(!b.visible("#signout").await?, "nothing to sign out of");
    b.screenshot("trusted-network").await?;
    Ok(())
}

// 6 ---------------------------------------------------------------------------

/// The engine in front of chatd in the deployment where it forwards
/// `/v1/chat-app` to chatd: the page's files, then 502 while `on` is off,
/// chatd's front byte for byte (streams as they stream) once it is on.
struct Forwarder {
    on: AtomicBool,
    files: HashMap<String, (HeaderValue, bytes::Bytes)>,
    chatd: String,
    http: hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        Body,
    >,
}

/// The page's own files: "/" and what it names under /chat-app/.
async fn page_files(front: &str) -> anyhow::Result<Vec<String>> {
    let index = reqwest::get(format!("{front}/")).await?.text().await?;
    let mut paths = vec!["/".to_string()];
    for piece in index.split('"').filter(|p| p.starts_with("/chat-app/")) {
        paths.push(piece.to_string());
    }
    ensure!(paths.len() > 5, "the page names its files: {paths:?}");
    Ok(paths)
}

async fn forwarder(front: &str) -> anyhow::Result<(u16, Arc<Forwarder>)> {
    let mut files = HashMap::new();
    for path in page_files(front).await? {
        let r = reqwest::get(format!("{front}{path}")).await?;
        ensure!(r.status() == 200, "{path}: {}", r.status());
        let kind = r
            .headers()
            .get(header::CONTENT_TYPE)
            .cloned()
            .context("a content type")?;
        files.insert(path, (kind, r.bytes().await?));
    }
    let state = Arc::new(Forwarder {
        on: AtomicBool::new(false),
        files,
        chatd: front.trim_start_matches("http://").to_string(),
        http: hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http(),
    });
    let shared = state.clone();
    let app = axum::Router::new().fallback(move |request: Request| {
        let state = shared.clone();
        async move { state.answer(request).await }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((port, state))
}

impl Forwarder {
    async fn answer(&self, request: Request) -> Response {
        let path = request.uri().path().to_string();
        if path == "/v1/chat-app" || path.starts_with("/v1/chat-app/") {
            if !self.on.load(Ordering::SeqCst) {
                let body = json!({"error": {"type": "chatd_unavailable",
                    "message": "chatd is not running on 127.0.0.1:8016"}});
                return (StatusCode::BAD_GATEWAY, axum::Json(body)).into_response();
            }
            let target = format!(
                "http://{}{}",
                self.chatd,
                request.uri().path_and_query().map_or("/", |p| p.as_str())
            );
            let (mut parts, body) = request.into_parts();
            // The Host (and Origin) stay the browser's: the front sees the page's site.
            match target.parse() {
                Ok(uri) => parts.uri = uri,
                Err(_) => return StatusCode::BAD_REQUEST.into_response(),
            }
            return match self.http.request(Request::from_parts(parts, body)).await {
                Ok(answer) => answer.map(Body::new),
                Err(err) => (StatusCode::BAD_GATEWAY, err.to_string()).into_response(),
            };
        }
        match self.files.get(path.as_str()) {
            Some((kind, bytes)) => {
                let mut r = Response::new(Body::from(bytes.clone()));
                r.headers_mut().insert(header::CONTENT_TYPE, kind.clone());
                r
            }
            None => StatusCode::NOT_FOUND.into_response(),
        }
    }
}

/// Behind an engine that answers 502 for chatd, the page shows the probe
/// panel with the server's words and the command, and goes live by itself,
/// without a reload, once chatd answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_panel_until_chatd_answers() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let web = Web::start(&[], &[], None).await?;
    let (port, engine) = forwarder(&web.front()).await?;
    let b = web.browser(DESKTOP).await?;
    b.goto(&format!("http://127.0.0.1:{port}/")).await?;
    b.wait_state("unavailable").await?;
    b.wait_visible("#unavailable", WAIT).await?;
    let cause = b.text("#unavailable .cause").await?;
    assert!(cause.contains("502"), "the cause names the 502: {cause:?}");
    let said = b.text("#unavailable .server-message").await?;
    assert!(
        said.contains("chatd is not running on 127.0.0.1:8016"),
        "the server's message is shown: {said:?}"
    );
    let command = b.text("#unavailable .command").await?;
    assert!(!command.trim().is_empty(), "a command to run is shown");
    let next = b
        .wait_text("#unavailable .next-check", |t| !t.trim().is_empty(), WAIT)
        .await?;
    assert!(next.contains('s'), "when it checks again: {next:?}");
    b.screenshot("probe-panel").await?;

    b.eval("window.__sameLoad = 1").await?;
    engine.on.store(true, Ordering::SeqCst);
    let started = Instant::now();
    b.wait_state_within("live", Duration::from_secs(40)).await?;
    eprintln!("live {:?} after chatd answered", started.elapsed());
    assert_eq!(
        b.eval("return window.__sameLoad").await?,
        json!(1),
        "the page went live without a reload"
    );
    assert!(!b.visible("#unavailable").await?, "the panel goes");
    b.screenshot("live-without-reload").await?;
    Ok(())
}

// 7 ---------------------------------------------------------------------------

/// The composer works during a run: waiting messages show over it, one is
/// edited, both arrive; then Stop, Regenerate and Edit of a question.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn composer_during_run_and_pending_edit() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let web = Web::start(&[], &[], None).await?;
    let b = web.browser(DESKTOP).await?;
    b.goto(&web.front()).await?;
    b.wait_state("live").await?;
    let chat = new_chat(&b).await?;
    send(&b, "First question [sim tokens=100 tps=20]").await?;
    wait_tokens(&b, 3, LONG).await?;
    wait_status(&b, &["Answering"], WAIT).await?;

    // Two more while it answers (Enter sends).
    b.type_into("#composer", "Second question").await?;
    b.type_into("#composer", ENTER).await?;
    b.wait_count("#pending .pending", |n| n == 1, WAIT).await?;
    b.type_into("#composer", "Third question").await?;
    b.type_into("#composer", ENTER).await?;
    b.wait_count("#pending .pending", |n| n == 2, WAIT).await?;
    let texts = b
        .eval("return [...document.querySelectorAll('#pending .pending .text')].map(e => e.innerText.trim())")
        .await?;
    assert_eq!(texts, json!(["Second question", "Third question"]));
    assert!(
        inside_viewport(&b, "#composer").await?["inside"] == true,
        "the composer stays reachable"
    );
    b.screenshot("pending-two").await?;

    // Edit the first waiting one.
    let pid = b
        .eval("return document.querySelector('#pending .pending').dataset.pendingId")
        .await?;
    let pid = pid.as_str().context("a pending id")?.to_string();
    let item = format!("#pending .pending[data-pending-id='{pid}']");
    b.click(&format!("{item} .pending-edit")).await?;
    b.paste_into(
        &format!("{item} textarea.pending-input"),
        "Second question, edited",
    )
    .await?;
    b.click(&format!("{item} .pending-save")).await?;
    b.wait_text(
        &format!("{item} .text"),
        |t| t.trim() == "Second question, edited",
        WAIT,
    )
    .await?;
    wait_until("the edit in the API's pending", WAIT, || async {
        let snapshot = web.client.snapshot(&chat).await.ok()?;
        snapshot["pending"]
            .as_array()?
            .iter()
            .any(|p| p["id"] == pid.as_str() && p["text"] == "Second question, edited")
            .then_some(())
    })
    .await?;
    b.screenshot("pending-edited").await?;

    // Delivered: they leave #pending and show as questions, edited.
    b.wait_count("#pending .pending", |n| n == 0, LONG).await?;
    wait_status(&b, &["Ready"], LONG).await?;
    let asked = b
        .poll("the delivered questions shown", WAIT, || async {
            let asked = bodies(&b, "user").await?;
            Ok(if asked.len() == 3 {
                Ok(asked)
            } else {
                Err(format!("{asked:?}"))
            })
        })
        .await?;
    assert_eq!(
        asked,
        [
            "First question [sim tokens=100 tps=20]",
            "Second question, edited",
            "Third question"
        ]
    );
    b.screenshot("pending-delivered").await?;

    // Stop. (The pace comes from the faults queue, not a cue: Regenerate
    // asks the same question again, and its answer is to be short.)
    wait_until("the run that took them to end", LONG, || async {
        let run = web.last_run(&chat).await.ok()?;
        (run["status"] == "done").then_some(())
    })
    .await?;
    web.sim.faults(json!([{"tokens": 400, "tps": 20}])).await?;
    let before = b.count("#messages .message[data-role='assistant']").await?;
    send(&b, "A long answer").await?;
    b.wait_count(
        "#messages .message[data-role='assistant']",
        |n| n > before,
        LONG,
    )
    .await?;
    wait_tokens(&b, 3, LONG).await?;
    b.click("#stop").await?;
    wait_status(&b, &["Stopped", "Ready"], LONG).await?;
    wait_until("the run stopped in the API", WAIT, || async {
        let run = web.last_run(&chat).await.ok()?;
        (run["status"] == "stopped").then_some(())
    })
    .await?;
    let stopped = last_body(&b, "assistant").await?.unwrap_or_default();
    assert!(
        stopped.split_whitespace().count() < 400,
        "the answer stopped early: {} tokens",
        stopped.split_whitespace().count()
    );
    b.screenshot("stopped").await?;

    // Regenerate: a new answer replaces the stopped one.
    let answers = b.count("#messages .message[data-role='assistant']").await?;
    b.click("#regenerate").await?;
    wait_status(&b, &["Ready"], LONG).await?;
    let want = sim_answer(24).trim().to_string();
    b.poll("the regenerated answer", WAIT, || async {
        let shown = last_body(&b, "assistant").await?.unwrap_or_default();
        Ok(if shown == want { Ok(()) } else { Err(shown) })
    })
    .await?;
    wait_status(&b, &["Ready"], LONG).await?;
    assert_eq!(
        b.count("#messages .message[data-role='assistant']").await?,
        answers,
        "the new answer replaces the old one"
    );
    assert_eq!(web.stored_last(&chat, "assistant").await?, want);
    b.screenshot("regenerated").await?;

    // Edit the last question: it runs again from there.
    let edit = b
        .eval(
            "const m = document.querySelectorAll(`#messages .message[data-role='user']`);
             return m[m.length - 1].dataset.messageId;",
        )
        .await?;
    let mid = edit.as_str().context("a message id")?.to_string();
    let item = format!("#messages .message[data-message-id='{mid}']");
    b.click(&format!("{item} button.edit")).await?;
    b.paste_into(
        &format!("{item} textarea.edit-input"),
        "An edited question [sim tokens=7 tps=0]",
    )
    .await?;
    b.click(&format!("{item} button.edit-save")).await?;
    wait_status(&b, &["Ready"], LONG).await?;
    let want = sim_answer(7).trim().to_string();
    b.poll("the answer to the edited question", WAIT, || async {
        let shown = last_body(&b, "assistant").await?.unwrap_or_default();
        let asked = last_body(&b, "user").await?.unwrap_or_default();
        Ok(
            if shown == want && asked == "An edited question [sim tokens=7 tps=0]" {
                Ok(())
            } else {
                Err(format!("asked {asked:?}, answered {shown:?}"))
            },
        )
    })
    .await?;
    assert_eq!(
        web.stored_last(&chat, "user").await?,
        "An edited question [sim tokens=7 tps=0]"
    );
    assert_eq!(web.stored_last(&chat, "assistant").await?, want);
    b.screenshot("edited-question").await?;
    Ok(())
}

// 8 ---------------------------------------------------------------------------

/// The shown one-line result of the first tool call folded under an answer.
async fn result_line(b: &Browser) -> anyhow::Result<Value> {
    b.wait_js(
        "the call's result line",
        "const s = document.querySelector('#messages details.tools .tool-call .result-summary');
         return s && !s.hidden && s.textContent ? s.textContent : null;",
        WAIT,
    )
    .await
}

/// A write in mode `ask` shows a card with three buttons; "Allow once"
/// answers it, the call shows folded under the answer, the run ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consent_card_buttons() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let web = Web::start(&[], &[], None).await?;
    let b = web.browser(DESKTOP).await?;
    b.goto(&web.front()).await?;
    b.wait_state("live").await?;
    let chat = new_chat(&b).await?;
    let mode = web
        .client
        .call(
            reqwest::Method::PUT,
            &format!("/conversations/{chat}/permission-mode"),
            Some(json!({"mode": "ask"})),
        )
        .await?;
    ensure!(mode.status == 200, "permission-mode answered {mode:?}");
    std::fs::create_dir_all(web.chatd.data_dir().join("workspaces").join(&chat))?;
    web.sim
        .faults(json!([
            {"tool_calls": [{"name": "write_file",
                              "arguments": {"path": "hello.txt", "content": "hi\n"}}]},
            {}
        ]))
        .await?;
    send(&b, "Write hello.txt [sim tokens=5]").await?;
    b.wait_visible(".consent", LONG).await?;
    wait_status(&b, &["Waiting for you"], WAIT).await?;
    let card = b
        .eval(
            "const c = document.querySelector('.consent');
             return {text: c.innerText, id: c.dataset.cardId,
                     buttons: [...c.querySelectorAll('button[data-decision]')]
                         .map(e => [e.dataset.decision, e.innerText.trim()])};",
        )
        .await?;
    assert_eq!(
        card["buttons"],
        json!([
            ["once", "Allow once"],
            ["always", "Always allow"],
            ["deny", "Deny"]
        ]),
        "{card}"
    );
    assert!(
        card["text"].as_str().unwrap_or("").contains("write_file"),
        "the card names the tool: {card}"
    );
    assert!(
        card["id"].as_str().is_some_and(|id| !id.is_empty()),
        "{card}"
    );
    b.screenshot("consent-card").await?;

    b.click(".consent button[data-decision='once']").await?;
    b.wait_count(".consent", |n| n == 0, WAIT).await?;
    wait_status(&b, &["Ready"], LONG).await?;
    let call = b
        .wait_js(
            "the call folded under the answer",
            "const d = document.querySelector('#messages .message[data-role=\"assistant\"] details.tools');
             if (!d) return null;
             const c = d.querySelector('.tool-call[data-call-id]');
             return c ? {open: d.open, summary: d.querySelector('summary').innerText,
                         name: c.querySelector('.name').textContent,
                         status: c.querySelector('.status').textContent} : null;",
            WAIT,
        )
        .await?;
    assert_eq!(call["name"], "write_file", "{call}");
    assert_eq!(call["open"], false, "folded: {call}");
    assert_eq!(
        b.count("#messages .message[data-role='tool']").await?,
        0,
        "no tool bubbles"
    );
    assert_eq!(
        std::fs::read_to_string(
            web.chatd
                .data_dir()
                .join("workspaces")
                .join(&chat)
                .join("hello.txt")
        )?,
        "hi\n"
    );
    assert_eq!(web.last_run(&chat).await?["status"], "done");
    b.screenshot("consent-answered").await?;

    // A reload (or another device) shows the call as this page did: its
    // result's one line comes with the snapshot, not only with the event.
    let live = result_line(&b).await?;
    let stored = web.client.snapshot(&chat).await?;
    let tools: Vec<&Value> = stored["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(tools.len(), 1, "{stored}");
    assert_eq!(
        tools[0]["summary"], live,
        "the stored line is the one shown"
    );
    b.eval("location.reload()").await?;
    b.wait_state("live").await?;
    assert_eq!(result_line(&b).await?, live, "the same line after a reload");
    Ok(())
}

// 9 ---------------------------------------------------------------------------

/// The tokens a first question `text` uses in a new chat (prompt +
/// answer): chatd's own system prompt and tool list are most of it.
async fn calibrate(text: &str) -> anyhow::Result<u64> {
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start(&sim.url(), &[]).await?;
    let client = chatd.client();
    let chat = client.create_chat().await?;
    let run = client.send(&chat, text).await?;
    let run = run["run_id"].as_str().context("run id")?;
    let run = client.wait_run(&chat, run, &["done"], LONG).await?;
    run["usage"]["used"]
        .as_u64()
        .with_context(|| format!("no usage in {run}"))
}

/// `12.3k` from 1000 on, plain below; the shown numbers of the meter.
fn meter_numbers(text: &str) -> Option<(f64, f64)> {
    let (used, rest) = text.split_once(" / ")?;
    let limit = rest.strip_suffix(" tokens")?;
    let n = |s: &str| -> Option<f64> {
        match s.strip_suffix('k') {
            Some(k) => Some(k.parse::<f64>().ok()? * 1000.0),
            None => s.parse().ok(),
        }
    };
    Some((n(used)?, n(limit)?))
}

async fn meter(b: &Browser) -> anyhow::Result<(String, String)> {
    let v = b
        .eval("const m = document.querySelector('#context-meter'); return [m.innerText.trim(), m.className];")
        .await?;
    Ok((
        v[0].as_str().unwrap_or("").to_string(),
        v[1].as_str().unwrap_or("").to_string(),
    ))
}

/// Near the window's end the meter turns amber at 80 %, red at 90 %; it
/// reads `1.9k / 2.3k tokens`; the speed reads `… tok/s`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_meter_colours() -> anyhow::Result<()> {
    let question = "Hello [sim tokens=5 tps=0]";
    let base = calibrate(question).await?;
    // A window where that question fills 85 %.
    let window = (base as f64 / 0.85).ceil() as u64;
    let window_arg = window.to_string();
    if !browser::available() {
        return Ok(());
    }
    let web = Web::start(
        &["--tokens-per-second", "0", "--context-window", &window_arg],
        &[],
        None,
    )
    .await?;
    let b = web.browser(DESKTOP).await?;
    b.goto(&web.front()).await?;
    b.wait_state("live").await?;

    let amber = new_chat(&b).await?;
    send(&b, question).await?;
    wait_answered(&b, 0, LONG).await?;
    let usage = web.last_run(&amber).await?["usage"].clone();
    let (used, limit) = (
        usage["used"].as_u64().context("used")?,
        usage["limit"].as_u64().context("limit")?,
    );
    let ratio = used as f64 / limit as f64;
    ensure!(
        (0.8..0.9).contains(&ratio),
        "calibration: {used}/{limit} = {ratio:.3} is not amber's range"
    );
    let (text, class) = b
        .poll("an amber meter", WAIT, || async {
            let (text, class) = meter(&b).await?;
            Ok(if class.split_whitespace().any(|c| c == "amber") {
                Ok((text, class))
            } else {
                Err(format!("{text:?} class {class:?}"))
            })
        })
        .await?;
    assert!(!class.split_whitespace().any(|c| c == "red"), "{class}");
    let (shown_used, shown_limit) =
        meter_numbers(&text).with_context(|| format!("the meter reads {text:?}"))?;
    assert!(
        (shown_used - used as f64).abs() <= 51.0 && (shown_limit - limit as f64).abs() <= 51.0,
        "the meter reads {text:?} for {used} / {limit}"
    );
    assert!(text.contains('k'), "k from 1000 tokens: {text:?}");
    let tps = b
        .wait_text("#tps", |t| t.trim().ends_with("tok/s"), WAIT)
        .await?;
    let speed: f64 = tps
        .trim()
        .trim_end_matches("tok/s")
        .trim()
        .parse()
        .with_context(|| format!("#tps reads {tps:?}"))?;
    assert!(speed > 0.0, "{tps}");
    b.screenshot("meter-amber").await?;

    // A longer question in a new chat: over 90 %.
    let red = new_chat(&b).await?;
    let extra = ((0.94 * window as f64) as u64).saturating_sub(base) * 4 + 8;
    let long = format!("{} {question}", "lorem ipsum ".repeat(extra as usize / 12));
    b.paste_into("#composer", &long).await?;
    b.click("#send").await?;
    wait_answered(&b, 0, LONG).await?;
    let run = web.last_run(&red).await?;
    let usage = &run["usage"];
    let ratio = usage["used"].as_f64().unwrap_or(0.0) / usage["limit"].as_f64().unwrap_or(1.0);
    ensure!(
        (0.9..1.0).contains(&ratio),
        "calibration: the run {run} is not in red's range (base {base}, window {window})"
    );
    let (text, _) = b
        .poll("a red meter", WAIT, || async {
            let (text, class) = meter(&b).await?;
            Ok(if class.split_whitespace().any(|c| c == "red") {
                Ok((text, class))
            } else {
                Err(format!("{text:?} class {class:?}"))
            })
        })
        .await?;
    assert!(meter_numbers(&text).is_some(), "the meter reads {text:?}");
    b.screenshot("meter-red").await?;
    Ok(())
}

// 10 --------------------------------------------------------------------------

/// Waits until chatd counts `n` attached event streams.
async fn wait_devices(web: &Web, n: u64) -> anyhow::Result<()> {
    wait_until(&format!("{n} attached streams"), LONG, || async {
        (web.chatd.sse_devices().await? == n).then_some(())
    })
    .await
}

/// Seven chats in seven tabs of one browser. A browser gives one host six
/// connections and each open chat's stream holds one, so the tabs out of
/// sight let theirs go: the seventh opens and answers. A hidden tab shown
/// again takes its chat up from where it was, with what it missed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seven_tabs_one_browser() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let web = Web::start(&[], &[], Some(TOKEN)).await?;
    let mut chats = Vec::new();
    for _ in 0..7 {
        chats.push(web.client.create_chat().await?);
    }
    let b = web.signed_in(DESKTOP, &format!("#/c/{}", chats[0])).await?;
    let first = b.client().window().await?;
    ensure!(
        open_chat(&b).await? == chats[0],
        "the first tab opens its chat"
    );
    for chat in &chats[1..] {
        let tab = b.client().new_window(true).await?;
        b.client().switch_to_window(tab.handle).await?;
        // Bounded: with six streams held the seventh tab's page never loads.
        tokio::time::timeout(LONG, b.goto(&format!("{}/#/c/{chat}", web.front())))
            .await
            .with_context(|| format!("tab of {chat}: the page did not load within {LONG:?}"))??;
        b.wait_state_within("live", LONG).await?;
    }
    send(&b, "Hello from the seventh tab [sim tokens=12]").await?;
    wait_answered(&b, 0, LONG).await?;
    let shown = last_body(&b, "assistant").await?.unwrap_or_default();
    assert_eq!(shown, web.stored_last(&chats[6], "assistant").await?);
    // Only the tab in sight keeps a stream.
    wait_devices(&web, 1).await?;
    b.screenshot("seventh-tab").await?;

    // The first chat gets an answer while its tab is out of sight.
    let sent = web
        .client
        .send(&chats[0], "While you were away [sim tokens=16]")
        .await?;
    let run = sent["run_id"].as_str().context("a run id")?.to_string();
    web.client
        .wait_run(&chats[0], &run, &["done"], LONG)
        .await?;
    b.client().switch_to_window(first).await?;
    wait_answered(&b, 0, LONG).await?;
    let shown = last_body(&b, "assistant").await?.unwrap_or_default();
    assert_eq!(shown, web.stored_last(&chats[0], "assistant").await?);
    assert_eq!(shown, sim_answer(16).trim());
    assert_eq!(
        bodies(&b, "user").await?.len(),
        1,
        "the message is shown once"
    );
    b.screenshot("first-tab-again").await?;
    // The first tab's stream is back; the seventh, now hidden, lets go.
    wait_devices(&web, 1).await?;
    Ok(())
}
