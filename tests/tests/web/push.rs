//! The page's "Notify me on this device" switch in headless Chromium, at
//! 1280 px and 390 px, against the real chatd with its front and a fake
//! push service (`tandem_tests::fakepush`; chatd admits its loopback
//! endpoint by `QSE_CHAT_PUSH_ALLOW_LOOPBACK_FOR_TESTS`).
//!
//! A real `PushManager.subscribe` needs the browser vendor's push service
//! (Google's, for Chromium), which this machine cannot reach. So the first
//! test stands in for the browser's push manager only: it answers the
//! subscription the fake push service made keys for, and the test checks
//! that the page registered /sw.js at scope /, subscribed with chatd's
//! VAPID key, and handed chatd exactly what the browser gave (a push then
//! reaches the fake and decrypts with those keys); off unsubscribes. The
//! second test uses Chromium's own push manager and checks that its
//! refusal is said plainly and nothing is stored. Every wait is a bounded
//! poll.

use anyhow::Context;
use serde_json::{json, Value};
use tandem_tests::browser::{self, Browser, Chromedriver, Viewport, DESKTOP, PHONE, WAIT};
use tandem_tests::fakepush::FakePush;
use tandem_tests::harness::{Chatd, Client, Sim};

/// Stands in for the browser's push manager: `arguments[0]` is the
/// subscription to give; what the page asked is kept in `window.__push`.
const FAKE_PUSH_MANAGER: &str = "
    const given = arguments[0];
    window.__push = { asked: null, unsubscribed: false, current: null };
    Notification.requestPermission = () => Promise.resolve('granted');
    PushManager.prototype.subscribe = function (options) {
      const key = String.fromCharCode(...new Uint8Array(options.applicationServerKey));
      window.__push.asked = { userVisibleOnly: options.userVisibleOnly,
        key: btoa(key).replace(/\\+/g, '-').replace(/\\//g, '_').replace(/=+$/, '') };
      window.__push.current = { endpoint: given.endpoint, toJSON: () => given,
        unsubscribe: () => { window.__push.unsubscribed = true; window.__push.current = null;
                             return Promise.resolve(true); } };
      return Promise.resolve(window.__push.current);
    };
    PushManager.prototype.getSubscription = () => Promise.resolve(window.__push.current);";

/// The service worker's registration, once there: its script and scope.
const REGISTRATION: &str = "
    if (!window.__reg) {
      window.__reg = 'asked';
      navigator.serviceWorker.getRegistration('/').then((r) => {
        const w = r && (r.active || r.waiting || r.installing);
        window.__reg = r ? { script: w ? w.scriptURL : '', scope: r.scope } : null;
      });
    }
    return window.__reg === 'asked' ? null : window.__reg;";

struct Page {
    driver: Chromedriver,
    chatd: Chatd,
    _sim: Sim,
    client: Client,
    fake: FakePush,
}

impl Page {
    async fn start() -> anyhow::Result<Page> {
        let sim = Sim::start(&["--tokens-per-second", "0"])?;
        let chatd = Chatd::start_with_front(
            &sim.url(),
            &[("QSE_CHAT_PUSH_ALLOW_LOOPBACK_FOR_TESTS", "true")],
            None,
        )
        .await?;
        let client = chatd.client();
        let key = client.get("/push/key").await?;
        let fake = FakePush::start(key.body["public_key"].as_str().context("key")?).await?;
        let driver = Chromedriver::start().await?;
        Ok(Page {
            driver,
            chatd,
            _sim: sim,
            client,
            fake,
        })
    }

    /// The page, live, with the chat list (and the switch under it) in view.
    async fn open(&self, viewport: Viewport) -> anyhow::Result<Browser> {
        let b =
            Browser::open_chat(&self.driver, viewport, &self.chatd.front_url(), None, "").await?;
        if viewport.phone {
            b.click("#menu").await?;
            b.wait_js(
                "the drawer in place",
                "return document.body.classList.contains('drawer-open')
                     && getComputedStyle(document.querySelector('#sidebar')).transform === 'none';",
                WAIT,
            )
            .await?;
        }
        b.wait_visible("#push-switch", WAIT).await?;
        let named = b
            .eval(
                "const s = document.querySelector('#push-switch');
                   return {name: s.labels[0].textContent.trim(), role: s.getAttribute('role'),
                           enabled: !s.disabled, tab: s.tabIndex};",
            )
            .await?;
        assert_eq!(
            named,
            json!({"name": "Notify me on this device", "role": "switch", "enabled": true, "tab": 0}),
            "a named switch the keyboard reaches"
        );
        Ok(b)
    }

    async fn subscriptions(&self) -> anyhow::Result<Vec<Value>> {
        let listed = self.client.get("/push/subscriptions").await?;
        Ok(listed.body["subscriptions"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_switch_registers_the_worker_and_hands_chatd_what_the_browser_gave(
) -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let t = Page::start().await?;
    let public = t.client.get("/push/key").await?.body["public_key"].clone();
    for (i, viewport) in [DESKTOP, PHONE].into_iter().enumerate() {
        let b = t.open(viewport).await?;
        let subscriber = t.fake.subscriber(&format!("page{i}"));
        b.eval_with(FAKE_PUSH_MANAGER, vec![subscriber.body()])
            .await?;
        // By the keyboard: the space bar turns the switch on.
        b.type_into("#push-switch", " ").await?;
        b.wait_text(
            "#push-note",
            |t| t.starts_with("On: this device is told"),
            WAIT,
        )
        .await?;
        assert_eq!(
            b.eval("return document.querySelector('#push-switch').checked")
                .await?,
            true
        );
        let registration = b.wait_js("sw.js registered", REGISTRATION, WAIT).await?;
        let front = t.chatd.front_url();
        assert_eq!(
            registration["script"],
            format!("{front}/sw.js"),
            "{registration}"
        );
        assert_eq!(registration["scope"], format!("{front}/"), "{registration}");
        let asked = b.eval("return window.__push.asked").await?;
        assert_eq!(
            asked,
            json!({"userVisibleOnly": true, "key": public}),
            "chatd's VAPID key"
        );
        let stored = t.subscriptions().await?;
        assert_eq!(stored.len(), 1, "{stored:?}");
        assert_eq!(stored[0]["origin"], t.fake.url.as_str());
        b.screenshot(&format!("push-on-{}", viewport.width)).await?;

        // What the page handed chatd is what the browser gave: a push
        // reaches the fake and decrypts with that subscription's keys.
        let tally = t.client.post("/push/test", json!({})).await?;
        assert_eq!(tally.body["delivered"], 1, "{tally:?}");
        let got = t.fake.received();
        let last = got.last().context("a push")?;
        assert_eq!(
            (last.name.as_str(), last.status),
            (subscriber.name.as_str(), 201)
        );
        assert_eq!(
            last.payload,
            json!({"title": "Test from tandem", "url": "/"})
        );

        // Off: chatd forgets it and the browser drops it.
        b.click("#push-switch").await?;
        b.wait_js(
            "unsubscribed",
            "return window.__push.unsubscribed && !document.querySelector('#push-switch').disabled",
            WAIT,
        )
        .await?;
        assert_eq!(
            b.eval("return document.querySelector('#push-switch').checked")
                .await?,
            false
        );
        assert!(t.subscriptions().await?.is_empty(), "chatd forgot it");
        b.close().await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_the_browser_refuses_is_said_plainly() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let t = Page::start().await?;
    for viewport in [DESKTOP, PHONE] {
        let b = t.open(viewport).await?;
        // The permission is granted; the push manager is Chromium's own,
        // whose push service is out of reach here.
        b.eval("Notification.requestPermission = () => Promise.resolve('granted');")
            .await?;
        b.click("#push-switch").await?;
        let note = b
            .wait_js(
                "the switch settled",
                "const s = document.querySelector('#push-switch');
                 const note = document.querySelector('#push-note').textContent;
                 return !s.disabled && note !== 'Turning on…' && note;",
                WAIT,
            )
            .await?;
        let note = note.as_str().unwrap_or("").to_string();
        let on = b
            .eval("return document.querySelector('#push-switch').checked")
            .await?;
        if on == true {
            // A machine that reaches the vendor's service: chatd kept it.
            assert!(note.starts_with("On:"), "{note}");
            assert_eq!(t.subscriptions().await?.len(), 1);
        } else {
            assert!(
                note.contains("The browser could not subscribe to its push service")
                    || note.contains("endpoint:"),
                "a plain refusal: {note}"
            );
            assert!(t.subscriptions().await?.is_empty(), "nothing stored");
        }
        b.screenshot(&format!("push-refused-{}", viewport.width))
            .await?;
        b.close().await?;
    }
    Ok(())
}
