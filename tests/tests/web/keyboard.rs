//! A whole chat with the keyboard alone, in headless Chromium against the
//! real chatd with its front and the engine simulator, at 1280 px and at
//! 390 px: WebDriver key actions only (Tab, Shift+Tab, Enter, Esc, Ctrl+K
//! and typed text), never a click. A person starts a chat, sends, stops a
//! long answer with Esc and continues it, allows a write on its card, opens
//! the files pane and a preview, the settings panel, another chat with
//! Ctrl+K and the inbox; after each key the focus is where they would look
//! for it, and every Tab stop of the chat screen is shown and named.
//! Also sw.js's `push` and `notificationclick` handlers, run in a harness
//! in the page: the title only, and a link opened only when it is a path
//! of the page (`/#/…`).

use anyhow::{bail, ensure, Context};
use fantoccini::actions::{InputSource, KeyAction, KeyActions};
use serde_json::{json, Value};
use tandem_tests::browser::{self, Browser, Chromedriver, Viewport, DESKTOP, PHONE, WAIT};
use tandem_tests::harness::{Chatd, Client, Sim};

use crate::files_page::LONG;

const TAB: &str = "\u{e004}";
const SHIFT_TAB: &str = "\u{e008}\u{e004}";
const ENTER: &str = "\u{e007}";
const ESCAPE: &str = "\u{e00c}";
const CONTROL_K: &str = "\u{e009}k";

/// How many Tab presses may separate two controls before the test calls
/// the page unusable from the keyboard.
const MOST_TABS: usize = 80;

/// What has the focus: its id, tag, classes, accessible name (aria-label,
/// aria-labelledby, a label, its text, an image's alt, its title: what a
/// screen reader reads), whether it is shown, and whether this element was
/// reported before since `window.kbSeen` was cleared.
const FOCUSED: &str = "
const e = document.activeElement;
const clean = (s) => (s || '').replace(/\\s+/g, ' ').trim();
function nameOf(e) {
  if (clean(e.getAttribute('aria-label'))) return clean(e.getAttribute('aria-label'));
  const by = e.getAttribute('aria-labelledby');
  if (by) return clean(by.split(/\\s+/).map((id) => (document.getElementById(id) || {}).textContent || '').join(' '));
  if (e.labels && e.labels.length) return clean([...e.labels].map((l) => l.textContent).join(' '));
  if (e.tagName === 'INPUT' && ['button', 'submit', 'reset'].includes(e.type)) return clean(e.value);
  if (!['INPUT', 'TEXTAREA', 'SELECT'].includes(e.tagName)) {
    const text = clean(e.innerText || e.textContent);
    if (text) return text;
    const img = e.querySelector('img[alt]');
    if (img && clean(img.alt)) return clean(img.alt);
  }
  return clean(e.getAttribute('title'));
}
if (!window.kbSeen) window.kbSeen = new Set();
const seen = window.kbSeen.has(e);
window.kbSeen.add(e);
const r = e.getBoundingClientRect();
return {
  id: e.id, tag: e.tagName.toLowerCase(), class: String(e.className || ''),
  name: e === document.body ? '' : nameOf(e),
  shown: e.checkVisibility({visibilityProperty: true, opacityProperty: true}) && r.width > 0 && r.height > 0,
  body: e === document.body, seen,
  path: e.id ? '#' + e.id : e.tagName.toLowerCase() + '.' + String(e.className || '').replace(/ +/g, '.'),
};";

/// Presses `keys` as one chord: each goes down in order, then up in the
/// reverse order (Shift+Tab is "\u{e008}\u{e004}").
async fn chord(b: &Browser, keys: &str) -> anyhow::Result<()> {
    let mut actions = KeyActions::new("keyboard".to_string());
    for key in keys.chars() {
        actions = actions.then(KeyAction::Down { value: key });
    }
    for key in keys.chars().rev() {
        actions = actions.then(KeyAction::Up { value: key });
    }
    b.client()
        .perform_actions(actions)
        .await
        .with_context(|| format!("pressing {keys:?}"))
}

/// Types `text` key by key into whatever has the focus.
async fn typing(b: &Browser, text: &str) -> anyhow::Result<()> {
    let mut actions = KeyActions::new("keyboard".to_string());
    for key in text.chars() {
        actions = actions
            .then(KeyAction::Down { value: key })
            .then(KeyAction::Up { value: key });
    }
    b.client()
        .perform_actions(actions)
        .await
        .with_context(|| format!("typing {text:?}"))
}

/// What has the focus now ([`FOCUSED`]).
async fn focused(b: &Browser) -> anyhow::Result<Value> {
    b.eval(FOCUSED).await
}

/// Whether the focused element matches `css`.
async fn focus_is(b: &Browser, css: &str) -> anyhow::Result<bool> {
    let v = b
        .eval_with(
            "return document.activeElement.matches(arguments[0]);",
            vec![json!(css)],
        )
        .await?;
    Ok(v == Value::Bool(true))
}

/// Waits until the focus is on `css` (a page may move it a frame later).
async fn wait_focus(b: &Browser, css: &str, why: &str) -> anyhow::Result<()> {
    b.poll(&format!("the focus on {css} ({why})"), WAIT, || async {
        Ok(if focus_is(b, css).await? {
            Ok(())
        } else {
            Err(format!("the focus is on {}", focused(b).await?))
        })
    })
    .await
}

/// Presses Tab (or Shift+Tab) until the focus is on `css`, at most
/// [`MOST_TABS`] times; each stop on the way is shown and named. Answers
/// how many presses it took.
async fn tab_to(b: &Browser, css: &str, key: &str) -> anyhow::Result<usize> {
    let mut path = Vec::new();
    for presses in 1..=MOST_TABS {
        chord(b, key).await?;
        let now = focused(b).await?;
        if !now["body"].as_bool().unwrap_or(false) {
            ensure!(
                now["shown"] == true && !now["name"].as_str().unwrap_or("").is_empty(),
                "a Tab stop on the way to {css} is hidden or has no name: {now}"
            );
        }
        if focus_is(b, css).await? {
            return Ok(presses);
        }
        path.push(now["path"].as_str().unwrap_or("?").to_string());
    }
    bail!(
        "{MOST_TABS} × {key:?} did not reach {css}; the focus went {}",
        path.join(" → ")
    )
}

/// Every Tab stop of the screen, from the top of the page round to the
/// first one again: each as [`FOCUSED`] reports it.
async fn tab_stops(b: &Browser) -> anyhow::Result<Vec<Value>> {
    // From the top: the focus left where it was, the seen set emptied.
    b.eval("document.activeElement.blur(); window.kbSeen = new Set(); return true;")
        .await?;
    let mut stops = Vec::new();
    for _ in 0..300 {
        chord(b, TAB).await?;
        let now = focused(b).await?;
        if now["seen"] == true {
            return Ok(stops);
        }
        if now["body"] != true {
            stops.push(now);
        }
    }
    bail!("300 Tab presses never came back round: {stops:?}")
}

/// One test's processes, chromedriver first so it goes first on drop.
struct Keys {
    driver: Chromedriver,
    chatd: Chatd,
    sim: Sim,
    client: Client,
}

impl Keys {
    async fn start() -> anyhow::Result<Keys> {
        let sim = Sim::start(&["--tokens-per-second", "0"])?;
        let chatd = Chatd::start_with_front(&sim.url(), &[], None).await?;
        let client = chatd.client();
        let driver = Chromedriver::start().await?;
        Ok(Keys {
            driver,
            chatd,
            sim,
            client,
        })
    }

    /// The start screen in a new browser, live, nothing focused.
    async fn open(&self, viewport: Viewport) -> anyhow::Result<Browser> {
        let b = Browser::open(&self.driver, viewport).await?;
        b.goto(&format!("{}/", self.chatd.front_url())).await?;
        b.wait_state("live").await?;
        Ok(b)
    }
}

/// The chat in the address once there is one.
async fn open_chat_id(b: &Browser) -> anyhow::Result<String> {
    let hash = b
        .wait_js(
            "a chat in the address",
            "return location.hash.startsWith('#/c/') ? location.hash.slice(4) : null;",
            WAIT,
        )
        .await?;
    Ok(hash.as_str().unwrap_or("").to_string())
}

/// Waits until the open chat's run has ended (chatd says idle) and the
/// page's Stop has gone.
async fn run_ended(t: &Keys, b: &Browser, chat: &str) -> anyhow::Result<()> {
    tandem_tests::harness::wait_until("the run to end", LONG, || async {
        let s = t.client.snapshot(chat).await.ok()?;
        (s["conversation"]["state"] == "idle").then_some(())
    })
    .await?;
    b.wait_hidden("#stop", WAIT).await
}

/// The whole chat with the keyboard alone, at each size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyboard_only_full_chat() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let t = Keys::start().await?;
    // New chats ask before a write: the card is answered from the keyboard.
    t.client
        .call(
            reqwest::Method::PATCH,
            "/defaults",
            Some(json!({"permission_mode": "ask"})),
        )
        .await?;
    // The chat Ctrl+K jumps to.
    let other = t.client.create_chat().await?;
    let sent = t
        .client
        .send(&other, "Where do narwhals live? [sim tokens=2]")
        .await?;
    let run = sent["run_id"].as_str().context("run_id")?.to_string();
    t.client.wait_run(&other, &run, &["done"], LONG).await?;
    t.client
        .call(
            reqwest::Method::PATCH,
            &format!("/conversations/{other}"),
            Some(json!({"title": "Sea notes"})),
        )
        .await?;

    for viewport in [DESKTOP, PHONE] {
        let w = viewport.width;
        let b = t.open(viewport).await?;

        // New chat: the first control of the list; on a phone, in the
        // drawer the menu button opens (and the focus goes into it).
        if viewport.phone {
            tab_to(&b, "#menu", TAB).await?;
            chord(&b, ENTER).await?;
            wait_focus(&b, "#new-chat", "the drawer opened on its first control").await?;
        } else {
            let presses = tab_to(&b, "#new-chat", TAB).await?;
            ensure!(presses <= 2, "New chat is among the first stops: {presses}");
        }
        chord(&b, ENTER).await?;
        let chat = open_chat_id(&b).await?;
        wait_focus(&b, "#composer", "a new chat: type its first message").await?;
        std::fs::create_dir_all(t.chatd.data_dir().join("workspaces").join(&chat))?;

        // Send with Enter; stop the long answer with Esc.
        typing(&b, "Tell me a long story [sim tokens=400 tps=20]").await?;
        chord(&b, ENTER).await?;
        b.wait_visible("#stop", LONG).await?;
        b.wait_js(
            "the answer to stream",
            "const m = [...document.querySelectorAll('#messages .message[data-role=assistant] .body')].pop();
             return m && m.textContent.trim().length > 10;",
            LONG,
        )
        .await?;
        wait_focus(&b, "#composer", "sending keeps the focus in the box").await?;
        b.screenshot(&format!("streaming-{w}")).await?;
        chord(&b, ESCAPE).await?;
        b.wait_visible("#continue", LONG).await?;
        b.wait_text("#status .state", |s| s == "Stopped", WAIT)
            .await?;
        wait_focus(&b, "#composer", "Esc stops and leaves the focus").await?;
        b.screenshot(&format!("stopped-{w}")).await?;

        // Continue: Shift+Tab up to it (it is over the box), Enter.
        tab_to(&b, "#continue", SHIFT_TAB).await?;
        ensure!(
            focused(&b).await?["name"] == "Continue",
            "Continue is named"
        );
        chord(&b, ENTER).await?;
        b.wait_visible("#stop", LONG).await?;
        wait_focus(&b, "#composer", "the pressed Continue went away").await?;
        chord(&b, ESCAPE).await?; // stopped again: a 400-token story takes 20 s
        run_ended(&t, &b, &chat).await?;

        // A write asks: its card answered with Shift+Tab and Enter.
        t.sim
            .faults(json!([
                {"tool_calls": [{"name": "write_file",
                                  "arguments": {"path": "hello.txt", "content": "hi\n"}}]},
                {}
            ]))
            .await?;
        typing(&b, "Write hello.txt [sim tokens=5]").await?;
        chord(&b, ENTER).await?;
        b.wait_visible(".consent", LONG).await?;
        tab_to(&b, ".consent button[data-decision='once']", SHIFT_TAB).await?;
        ensure!(
            focused(&b).await?["name"] == "Allow once",
            "the button says what it does: {}",
            focused(&b).await?
        );
        b.screenshot(&format!("card-{w}")).await?;
        chord(&b, ENTER).await?;
        b.wait_count(".consent", |n| n == 0, WAIT).await?;
        b.wait_count("#messages .consent-line", |n| n == 1, WAIT)
            .await?;
        wait_focus(&b, "#composer", "the answered card went away").await?;
        run_ended(&t, &b, &chat).await?;
        ensure!(
            t.chatd
                .data_dir()
                .join("workspaces")
                .join(&chat)
                .join("hello.txt")
                .exists(),
            "the write was allowed"
        );

        // The files pane: opened on its first control, a file previewed
        // with Enter, closed with Esc back on Files.
        tab_to(&b, "#files-toggle", SHIFT_TAB).await?;
        chord(&b, ENTER).await?;
        b.wait_visible("#files-pane", WAIT).await?;
        wait_focus(&b, "#files-pane *", "the pane opened: its controls").await?;
        b.wait_visible("#files-pane .file-open[title='Preview hello.txt']", WAIT)
            .await?;
        tab_to(&b, "#files-pane .file-open[title='Preview hello.txt']", TAB).await?;
        chord(&b, ENTER).await?;
        b.wait_text("#file-preview .preview-body", |s| s.trim() == "hi", WAIT)
            .await?;
        b.screenshot(&format!("preview-{w}")).await?;
        chord(&b, ESCAPE).await?;
        b.wait_hidden("#files-pane", WAIT).await?;
        wait_focus(&b, "#files-toggle", "Esc closed the pane").await?;

        // Every Tab stop of the chat screen: shown and named.
        let stops = tab_stops(&b).await?;
        let bad: Vec<&Value> = stops
            .iter()
            .filter(|s| s["shown"] != true || s["name"].as_str().unwrap_or("").is_empty())
            .collect();
        ensure!(bad.is_empty(), "hidden or unnamed Tab stops: {bad:?}");
        let paths: Vec<&str> = stops.iter().filter_map(|s| s["path"].as_str()).collect();
        for wanted in [
            "#composer",
            "#send",
            "#settings-open",
            "#inbox-open",
            "#files-toggle",
        ] {
            ensure!(paths.contains(&wanted), "{wanted} is a Tab stop: {paths:?}");
        }
        eprintln!("{w} px: {} Tab stops: {}", stops.len(), paths.join(" "));

        // Settings: opened with Enter, closed with Esc, the focus back on
        // its button.
        tab_to(&b, "#settings-open", TAB).await?;
        chord(&b, ENTER).await?;
        b.wait_js(
            "the settings panel",
            "return document.querySelector('#settings-panel').open;",
            WAIT,
        )
        .await?;
        wait_focus(&b, "#settings-panel *", "the panel took the focus").await?;
        b.screenshot(&format!("settings-{w}")).await?;
        chord(&b, ESCAPE).await?;
        b.wait_js(
            "the settings panel closed",
            "return !document.querySelector('#settings-panel').open;",
            WAIT,
        )
        .await?;
        wait_focus(&b, "#settings-open", "the panel closed").await?;

        // Ctrl+K, a word, Enter: the other chat, the focus in its box.
        chord(&b, CONTROL_K).await?;
        b.wait_visible("#switcher", WAIT).await?;
        wait_focus(&b, "#switcher-q", "the switcher is for typing").await?;
        typing(&b, "narwhals").await?;
        b.wait_js(
            "the switcher's one result",
            "const li = document.querySelectorAll('#switcher-list [role=option]');
             return li.length === 1 && li[0].getAttribute('aria-selected') === 'true';",
            WAIT,
        )
        .await?;
        chord(&b, ENTER).await?;
        b.wait_hidden("#switcher", WAIT).await?;
        b.wait_text("#chat-title", |s| s == "Sea notes", WAIT)
            .await?;
        ensure!(
            b.eval("return location.hash").await? == format!("#/c/{other}"),
            "the found chat is open"
        );
        wait_focus(&b, "#composer", "the chat jumped to").await?;

        // The inbox: Enter opens it on its first control, Esc closes it
        // back on its button.
        tab_to(&b, "#inbox-open", SHIFT_TAB).await?;
        chord(&b, ENTER).await?;
        b.wait_visible("#inbox", WAIT).await?;
        wait_focus(&b, "#inbox *", "the panel took the focus").await?;
        b.screenshot(&format!("inbox-{w}")).await?;
        chord(&b, ESCAPE).await?;
        b.wait_hidden("#inbox", WAIT).await?;
        wait_focus(&b, "#inbox-open", "the panel closed").await?;
        b.close().await?;
    }
    Ok(())
}

/// sw.js's handlers, run in a harness in the page (a page cannot receive a
/// push): `self` records what the worker shows and opens. A push shows its
/// title and nothing else; a click opens a link of the page (`/#/…`) in the
/// open tab or a new one, and anything else as the page itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_worker_shows_title_and_opens_only_page_links() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let t = Keys::start().await?;
    let b = t.open(DESKTOP).await?;
    let source = reqwest::get(format!("{}/sw.js", t.chatd.front_url()))
        .await?
        .error_for_status()?
        .text()
        .await?;
    // WebDriver's execute is not under the page's CSP: sw.js's text is
    // made a function there, given a fake `self`.
    const HARNESS: &str = "
const [source, push, tabs] = arguments;
const done = [];
const log = {shown: [], opened: [], focused: [], posted: [], closed: 0};
const handlers = {};
const self = {
  location: new URL(location.origin + '/sw.js'),
  addEventListener: (type, fn) => { handlers[type] = fn; },
  skipWaiting: () => Promise.resolve(),
  registration: {showNotification: async (title, options) => { log.shown.push({title, options}); }},
  clients: {
    claim: async () => {},
    matchAll: async () => tabs.map((url) => ({url,
      focus: async () => { log.focused.push(url); },
      postMessage: (m) => { log.posted.push(m); }})),
    openWindow: async (url) => { log.opened.push(url); },
  },
};
new Function('self', source)(self);
const waitUntil = (p) => done.push(p);
const data = push === null ? null
  : push === 'not json' ? {json: () => { throw new SyntaxError('not JSON'); }} : {json: () => push};
handlers.push({data, waitUntil});
await Promise.all(done);
const options = log.shown[0].options;
handlers.notificationclick({notification: {data: options.data, close: () => { log.closed += 1; }}, waitUntil});
await Promise.all(done);
return log;";
    let run = |push: Value, tabs: Value| {
        let b = &b;
        let source = source.clone();
        async move {
            b.eval_with(
                &format!("return (async () => {{ {HARNESS} }})();"),
                vec![json!(source), push, tabs],
            )
            .await
        }
    };

    // A push of chatd's: its title alone; the click opens its chat in a new tab.
    let log = run(
        json!({"title": "Run ended: Sea notes", "url": "/#/c/c_1"}),
        json!([]),
    )
    .await?;
    let shown = &log["shown"][0];
    assert_eq!(shown["title"], "Run ended: Sea notes", "{log}");
    let options = shown["options"].as_object().context("options")?;
    for key in ["body", "image", "actions"] {
        ensure!(
            !options.contains_key(key),
            "no {key} in the notification: {log}"
        );
    }
    assert_eq!(options["data"], json!({"url": "/#/c/c_1"}), "{log}");
    assert_eq!(log["opened"], json!(["/#/c/c_1"]), "{log}");
    assert_eq!(log["closed"], 1, "{log}");

    // An open tab of the page: focused and told where to go, no new tab.
    let front = t.chatd.front_url();
    let log = run(
        json!({"title": "Waiting for you", "url": "/#/c/c_2"}),
        json!([format!("{front}/#/c/c_1")]),
    )
    .await?;
    assert_eq!(log["focused"], json!([format!("{front}/#/c/c_1")]), "{log}");
    assert_eq!(
        log["posted"],
        json!([{"type": "open", "url": "/#/c/c_2"}]),
        "{log}"
    );
    assert_eq!(log["opened"], json!([]), "{log}");

    // Links that are not the page's: the page itself opens, never them.
    for bad in [
        "/\\evil.example",
        "//evil.example",
        "https://evil.example/#/c/c_1",
        "javascript:alert(1)",
        "/chat-app/../../etc",
        "",
    ] {
        let log = run(json!({"title": "t", "url": bad}), json!([])).await?;
        assert_eq!(log["opened"], json!(["/"]), "{bad:?} is not opened: {log}");
        assert_eq!(log["shown"][0]["options"]["data"]["url"], "/", "{log}");
    }
    // No title, no data, data that is not JSON: the box's name, the page.
    let log = run(Value::Null, json!([])).await?;
    assert_eq!(log["shown"][0]["title"], "tandem", "{log}");
    assert_eq!(log["opened"], json!(["/"]), "{log}");
    let log = run(json!("not json"), json!([])).await?;
    assert_eq!(log["shown"][0]["title"], "tandem", "{log}");
    let long = "x".repeat(500);
    let log = run(json!({"title": long, "url": "/#/c/c_3"}), json!([])).await?;
    assert_eq!(log["shown"][0]["title"].as_str().map(str::len), Some(120));
    b.close().await?;
    Ok(())
}
