//! The page's model picker and settings panel (README "The web page") in
//! headless Chromium against the real chatd with its front and the engine
//! simulator (serving two models), at 1280 px and at 390 px: a model picked
//! and settings saved on the page are what the next request to the engine
//! carries (engine-sim's recorded body); chatd's refusal of a value is shown
//! by its field and changes nothing; a run keeps its model; a model the
//! engine stopped serving stays named; the defaults set from the sidebar go
//! to the chat made next; the permission mode is confirmed for yolo and
//! kept across a reload. Every wait is a bounded poll.

use anyhow::{ensure, Context};
use serde_json::{json, Value};
use tandem_tests::browser::{self, Browser, Chromedriver, Viewport, DESKTOP, ENTER, PHONE, WAIT};
use tandem_tests::harness::{Chatd, Client, Sim};
use tandem_tests::npm;

use crate::files_page::LONG;

/// WebDriver's keys.
const ESCAPE: &str = "\u{e00c}";
const ARROW_DOWN: &str = "\u{e015}";
const TAB: &str = "\u{e004}";

/// The sim's models: the first reads images, the second does not.
const FIRST: &str = "sim-small";
const SECOND: &str = "sim-large";

/// One test's processes, chromedriver first so it goes first on drop.
struct Page {
    driver: Chromedriver,
    chatd: Chatd,
    sim: Sim,
    client: Client,
}

impl Page {
    async fn start() -> anyhow::Result<Page> {
        let sim = Sim::start(&[
            "--tokens-per-second",
            "0",
            "--vision",
            "--extra-model",
            SECOND,
        ])?;
        let chatd = Chatd::start_with_front(&sim.url(), &[], None).await?;
        let client = chatd.client();
        let driver = Chromedriver::start().await?;
        Ok(Page {
            driver,
            chatd,
            sim,
            client,
        })
    }

    /// A new browser on `chat` (or the start screen), live.
    async fn open(&self, viewport: Viewport, chat: Option<&str>) -> anyhow::Result<Browser> {
        let front = self.chatd.front_url();
        Browser::open_chat(&self.driver, viewport, &front, chat, "#settings-open").await
    }

    /// A chat with one question answered (the engine's first request).
    async fn answered_chat(&self) -> anyhow::Result<String> {
        let chat = self.client.create_chat().await?;
        let sent = self.client.send(&chat, "Hello [sim tokens=2]").await?;
        let run = sent["run_id"].as_str().context("run_id")?.to_string();
        self.client.wait_run(&chat, &run, &["done"], LONG).await?;
        Ok(chat)
    }

    /// The chat as chatd holds it (`conversation` of its snapshot).
    async fn conversation(&self, chat: &str) -> anyhow::Result<Value> {
        Ok(self.client.snapshot(chat).await?["conversation"].clone())
    }

    /// Sends `text` from the page's composer and answers the body of the
    /// request it made the engine send, once the run is over.
    async fn send_from_page(&self, b: &Browser, chat: &str, text: &str) -> anyhow::Result<Value> {
        let before = self.sim.requests().await?.len();
        b.type_into("#composer", &format!("{text}{ENTER}")).await?;
        let body = b
            .poll("the engine's next request", LONG, || async {
                let requests = self.sim.requests().await?;
                Ok(match requests.get(before) {
                    Some(r) => Ok(r["body"].clone()),
                    None => Err(format!("{} requests", requests.len())),
                })
            })
            .await?;
        self.idle(b, chat).await?;
        Ok(body)
    }

    /// Waits until no run works in `chat`.
    async fn idle(&self, b: &Browser, chat: &str) -> anyhow::Result<()> {
        b.poll("the chat idle", LONG, || async {
            let state = self.conversation(chat).await?["state"].clone();
            Ok(if state == "idle" {
                Ok(())
            } else {
                Err(state.to_string())
            })
        })
        .await
    }
}

/// Sets a field of the panel as typed: its old value gone, then `text`.
pub(crate) async fn fill(b: &Browser, css: &str, text: &str) -> anyhow::Result<()> {
    b.eval_with(
        "const e = document.querySelector(arguments[0]); e.value = '';",
        vec![json!(css)],
    )
    .await?;
    if !text.is_empty() {
        b.type_into(css, text).await?;
    }
    Ok(())
}

/// The marks beside the model in the header.
async fn marks(b: &Browser) -> anyhow::Result<Value> {
    b.eval("return [...document.querySelectorAll('#model-marks .mark')].map(m => m.textContent);")
        .await
}

/// Opens the settings panel with `opener` and waits for it.
async fn open_panel(b: &Browser, opener: &str) -> anyhow::Result<()> {
    b.click(opener).await?;
    b.wait_js(
        "the settings panel open",
        "return document.querySelector('#settings-panel').open
             && document.activeElement === document.querySelector('#set-system_prompt');",
        WAIT,
    )
    .await?;
    Ok(())
}

/// Waits for the panel to close and the focus to be back on `opener`.
async fn closed_back_on(b: &Browser, opener: &str) -> anyhow::Result<()> {
    b.wait_js(
        "the panel closed, the focus back where it was opened",
        &format!(
            "return !document.querySelector('#settings-panel').open
                 && document.activeElement === document.querySelector('{opener}');"
        ),
        WAIT,
    )
    .await
    .map(|_| ())
}

/// The panel's fields as the page shows them: name → value.
async fn panel_values(b: &Browser) -> anyhow::Result<Value> {
    b.eval(
        "const out = {};
         for (const e of document.querySelectorAll('#settings-form [id^=\"set-\"]'))
             if ('value' in e && e.type !== 'radio' && e.type !== 'checkbox') out[e.id.slice(4)] = e.value;
         const m = document.querySelector('#settings-form input[name=\"set-mode\"]:checked');
         out.mode = m ? m.value : null;
         return out;",
    )
    .await
}

/// On a phone the panel is a sheet: the whole width, down to the bottom.
async fn is_sheet(b: &Browser, viewport: Viewport) -> anyhow::Result<()> {
    let rect = b
        .eval(
            "const r = document.querySelector('#settings-panel').getBoundingClientRect();
             return {left: r.left, right: r.right, bottom: r.bottom, vw: innerWidth, vh: innerHeight};",
        )
        .await?;
    let at = |k: &str| rect[k].as_f64().unwrap_or(-1.0);
    if viewport.width < 700 {
        ensure!(
            at("left").abs() < 1.0
                && (at("right") - at("vw")).abs() < 1.0
                && (at("bottom") - at("vh")).abs() < 1.0,
            "a sheet along the phone's bottom edge: {rect}"
        );
    } else {
        ensure!(
            at("left") > 100.0 && at("right") < at("vw") - 100.0,
            "a dialog in the middle: {rect}"
        );
    }
    Ok(())
}

/// The model picked in the header and the settings saved in the panel are
/// what the next request carries; a temperature of 9 is refused by chatd
/// next to its field, changes nothing, and the request after it still has
/// the old value; Esc closes the panel back onto its button.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_and_settings_change_the_next_request() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let t = Page::start().await?;
    for viewport in [DESKTOP, PHONE] {
        let w = viewport.width;
        let chat = t.answered_chat().await?;
        let b = t.open(viewport, Some(&chat)).await?;
        let options = b
            .wait_js(
                "both models in the picker",
                "const o = [...document.querySelectorAll('#model-pick option')].map(o => o.textContent);
                 return o.length === 2 ? o : null;",
                WAIT,
            )
            .await?;
        assert_eq!(
            options,
            json!([
                format!("{FIRST} · 32K window · images · tools"),
                format!("{SECOND} · 32K window · tools")
            ]),
            "each model with its window and what it does"
        );
        assert_eq!(
            b.eval("return document.querySelector('#model-pick').value")
                .await?,
            FIRST
        );
        assert_eq!(marks(&b).await?, json!(["32K window", "images", "tools"]));
        b.screenshot(&format!("picker-{w}")).await?;

        // The model, by the keyboard.
        b.type_into("#model-pick", ARROW_DOWN).await?;
        b.poll("the chat on the second model", WAIT, || async {
            let model = t.conversation(&chat).await?["model"].clone();
            Ok(if model == SECOND {
                Ok(())
            } else {
                Err(model.to_string())
            })
        })
        .await?;

        open_panel(&b, "#settings-open").await?;
        is_sheet(&b, viewport).await?;
        fill(&b, "#set-system_prompt", "Answer like a pirate.").await?;
        fill(&b, "#set-temperature", "0.3").await?;
        fill(&b, "#set-top_p", "0.9").await?;
        fill(&b, "#set-top_k", "40").await?;
        fill(&b, "#set-max_tokens", "300").await?;
        fill(&b, "#set-context_size", "16384").await?;
        b.type_into("#set-reasoning_effort", "low").await?;
        b.screenshot(&format!("settings-{w}")).await?;
        b.click("#settings-save").await?;
        closed_back_on(&b, "#settings-open").await?;
        let held = t.conversation(&chat).await?;
        assert_eq!(
            held["settings"],
            json!({"system_prompt": "Answer like a pirate.", "temperature": 0.3, "top_p": 0.9,
                   "top_k": 40, "max_tokens": 300, "context_size": 16384, "reasoning_effort": "low"}),
            "chatd keeps what the panel saved"
        );

        let body = t.send_from_page(&b, &chat, "Ahoy? [sim tokens=2]").await?;
        assert_eq!(body["model"], SECOND, "the picked model: {body}");
        assert_eq!(body["temperature"], 0.3);
        assert_eq!(body["top_p"], 0.9);
        assert_eq!(body["top_k"], 40);
        assert_eq!(body["max_tokens"], 300);
        assert_eq!(body["reasoning_effort"], "low");
        let system = &body["messages"][0];
        ensure!(
            system["role"] == "system"
                && system["content"]
                    .as_str()
                    .is_some_and(|s| s.starts_with("Answer like a pirate.")),
            "the system prompt first: {system}"
        );

        // chatd refuses 9 by the field; nothing changes.
        open_panel(&b, "#settings-open").await?;
        fill(&b, "#set-temperature", "9").await?;
        b.click("#settings-save").await?;
        let said = b
            .wait_js(
                "chatd's refusal by the temperature",
                "const e = document.querySelector('#set-temperature-error');
                 return e && !e.hidden ? e.textContent : null;",
                WAIT,
            )
            .await?;
        ensure!(
            said.as_str()
                .is_some_and(|s| s.contains("settings.temperature") && s.contains("0 to 2")),
            "chatd's words by the field: {said}"
        );
        assert_eq!(
            b.eval("return [document.querySelector('#settings-panel').open, document.activeElement.id]")
                .await?,
            json!([true, "set-temperature"]),
            "the panel stays open on the refused field"
        );
        b.screenshot(&format!("refused-{w}")).await?;
        b.type_into("#set-temperature", ESCAPE).await?;
        closed_back_on(&b, "#settings-open").await?;
        assert_eq!(t.conversation(&chat).await?["settings"], held["settings"]);
        open_panel(&b, "#settings-open").await?;
        let shown = panel_values(&b).await?;
        assert_eq!(
            shown["temperature"], "0.3",
            "reopened, the saved values: {shown}"
        );
        assert_eq!(shown["system_prompt"], "Answer like a pirate.");
        assert_eq!(shown["reasoning_effort"], "low");
        b.click("#settings-cancel").await?;
        closed_back_on(&b, "#settings-open").await?;
        let body = t.send_from_page(&b, &chat, "Again [sim tokens=2]").await?;
        assert_eq!(
            body["temperature"], 0.3,
            "the refused 9 never reached the engine"
        );

        // An empty field is unset: the engine's own default again.
        open_panel(&b, "#settings-open").await?;
        fill(&b, "#set-top_k", "").await?;
        b.click("#settings-save").await?;
        closed_back_on(&b, "#settings-open").await?;
        let body = t
            .send_from_page(&b, &chat, "Once more [sim tokens=2]")
            .await?;
        ensure!(
            body.get("top_k").is_none(),
            "top_k unset is not sent: {body}"
        );
        assert_eq!(body["top_p"], 0.9);
        b.close().await?;
    }
    Ok(())
}

/// While a run works, picking a model says why it cannot change and keeps
/// the old one; a model the engine no longer lists stays shown as not
/// served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_working_run_keeps_its_model_and_a_gone_model_stays_named() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let t = Page::start().await?;
    for viewport in [DESKTOP, PHONE] {
        let w = viewport.width;
        let chat = t.answered_chat().await?;
        let b = t.open(viewport, Some(&chat)).await?;
        b.wait_count("#model-pick option", |n| n == 2, WAIT).await?;
        let sent = t
            .client
            .send(&chat, "Long [sim tokens=4000 tps=20]")
            .await?;
        ensure!(sent["run_id"].is_string(), "a run: {sent}");
        b.wait_js(
            "the run working on the page",
            "return !document.querySelector('#stop').hidden",
            WAIT,
        )
        .await?;
        b.type_into("#model-pick", ARROW_DOWN).await?;
        let note = b
            .wait_js(
                "the line saying why",
                "const e = document.querySelector('#model-note');
                 return e && !e.hidden ? e.textContent : null;",
                WAIT,
            )
            .await?;
        ensure!(
            note.as_str()
                .is_some_and(|s| s.contains("A run is working")),
            "why the model stays: {note}"
        );
        assert_eq!(
            b.eval("return document.querySelector('#model-pick').value")
                .await?,
            FIRST
        );
        assert_eq!(t.conversation(&chat).await?["model"], FIRST);
        b.screenshot(&format!("run-keeps-model-{w}")).await?;
        b.click("#stop").await?;
        t.idle(&b, &chat).await?;

        // A model the engine does not list (set through the API).
        let answer = t
            .client
            .call(
                reqwest::Method::PATCH,
                &format!("/conversations/{chat}"),
                Some(json!({"model": "retired-model"})),
            )
            .await?;
        ensure!(answer.status == 200, "PATCH model: {}", answer.body);
        let options = b
            .wait_js(
                "the retired model still named",
                "const p = document.querySelector('#model-pick');
                 return p.value === 'retired-model'
                     ? [...p.options].map(o => o.textContent) : null;",
                WAIT,
            )
            .await?;
        assert_eq!(
            options[2], "retired-model · not served",
            "listed after the served ones: {options}"
        );
        assert_eq!(marks(&b).await?, json!(["not served"]));
        b.screenshot(&format!("not-served-{w}")).await?;
        b.close().await?;
    }
    Ok(())
}

/// "Defaults for new chats" in the sidebar saves what a new chat starts
/// with: the chat made next has those settings and mode, its first request
/// carries them, and the panel shows them again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defaults_go_to_the_next_chat() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let t = Page::start().await?;
    for (viewport, temperature) in [(DESKTOP, "0.7"), (PHONE, "0.6")] {
        let w = viewport.width;
        let b = t.open(viewport, None).await?;
        if w < 700 {
            open_drawer(&b).await?;
        }
        open_panel(&b, "#defaults-open").await?;
        assert_eq!(b.text("#settings-title").await?, "Defaults for new chats");
        is_sheet(&b, viewport).await?;
        let prompt = format!("Defaults at {w} px.");
        fill(&b, "#set-system_prompt", &prompt).await?;
        fill(&b, "#set-temperature", temperature).await?;
        fill(&b, "#set-max_tokens", "").await?;
        b.click("#set-mode input[value='ask']").await?;
        b.screenshot(&format!("defaults-{w}")).await?;
        b.click("#settings-save").await?;
        closed_back_on(&b, "#defaults-open").await?;
        let defaults = t.client.get("/defaults").await?.body;
        assert_eq!(defaults["permission_mode"], "ask");
        assert_eq!(defaults["settings"]["system_prompt"], prompt.as_str());

        b.click("#new-chat").await?;
        let chat = b
            .wait_js(
                "the new chat open",
                "const m = /^#\\/c\\/(.+)$/.exec(location.hash); return m ? m[1] : null;",
                WAIT,
            )
            .await?;
        let chat = chat.as_str().context("a chat id")?.to_string();
        let made = t.conversation(&chat).await?;
        assert_eq!(made["permission_mode"], "ask", "{made}");
        assert_eq!(made["settings"]["system_prompt"], prompt.as_str());
        b.wait_text("#settings-open .mode-badge", |s| s == "ask", WAIT)
            .await?;
        let body = t.send_from_page(&b, &chat, "First [sim tokens=2]").await?;
        assert_eq!(
            body["temperature"],
            temperature.parse::<f64>()?,
            "the defaults' temperature: {body}"
        );
        ensure!(
            body["messages"][0]["content"]
                .as_str()
                .is_some_and(|s| s.starts_with(&prompt)),
            "the defaults' system prompt: {}",
            body["messages"][0]
        );

        if w < 700 {
            open_drawer(&b).await?;
        }
        open_panel(&b, "#defaults-open").await?;
        let shown = panel_values(&b).await?;
        assert_eq!(shown["temperature"], temperature, "{shown}");
        assert_eq!(shown["mode"], "ask");
        b.type_into("#set-system_prompt", ESCAPE).await?;
        closed_back_on(&b, "#defaults-open").await?;
        b.close().await?;
    }
    Ok(())
}

/// The permission mode: yolo is refused until confirmed, then shown in the
/// header and kept across a reload; every field of the panel is reached by
/// Tab, each with a label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permission_mode_is_confirmed_and_kept() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let t = Page::start().await?;
    for viewport in [DESKTOP, PHONE] {
        let w = viewport.width;
        let chat = t.answered_chat().await?;
        let b = t.open(viewport, Some(&chat)).await?;
        b.wait_text("#settings-open .mode-badge", |s| s == "auto", WAIT)
            .await?;
        open_panel(&b, "#settings-open").await?;

        // Tab walks every field, each named by a label, to Save.
        let mut seen = Vec::new();
        for _ in 0..20 {
            let at = b
                .eval(
                    "const e = document.activeElement;
                     const named = e.labels && e.labels.length > 0 ? e.labels[0].textContent.trim() : '';
                     return [e.id || e.name || e.tagName, named];",
                )
                .await?;
            seen.push(at.clone());
            if at[0] == "settings-save" {
                break;
            }
            b.client().active_element().await?.send_keys(TAB).await?;
        }
        let ids: Vec<&str> = seen.iter().filter_map(|s| s[0].as_str()).collect();
        for id in [
            "set-system_prompt",
            "set-temperature",
            "set-top_p",
            "set-top_k",
            "set-reasoning_effort",
            "set-context_size",
            "set-max_tokens",
            "set-mode",
            "settings-cancel",
            "settings-save",
        ] {
            ensure!(ids.contains(&id), "Tab reaches {id}: {seen:?}");
        }
        ensure!(
            seen.iter()
                .filter(|s| s[0].as_str().is_some_and(|id| id.starts_with("set-")))
                .all(|s| s[1].as_str().is_some_and(|l| !l.is_empty())),
            "every field has a label: {seen:?}"
        );

        b.click("#set-mode input[value='yolo']").await?;
        b.wait_visible("#set-yolo-confirm", WAIT).await?;
        b.click("#settings-save").await?;
        b.wait_visible("#set-mode-error", WAIT).await?;
        assert_eq!(t.conversation(&chat).await?["permission_mode"], "auto");
        b.screenshot(&format!("yolo-asks-{w}")).await?;
        if let Some(axe) = npm::file("axe-core", "axe.min.js") {
            let found = axe_on_settings(&b, &axe).await?;
            ensure!(found.is_empty(), "axe on the panel at {w} px: {found:#?}");
        }
        b.click("#set-yolo-sure").await?;
        b.click("#settings-save").await?;
        closed_back_on(&b, "#settings-open").await?;
        b.wait_text("#settings-open .mode-badge", |s| s == "yolo", WAIT)
            .await?;
        let held = t
            .client
            .get(&format!("/conversations/{chat}/permission-mode"))
            .await?
            .body;
        assert_eq!(held["mode"], "yolo");

        b.eval("window.beforeReload = true; location.reload(); return true;")
            .await?;
        b.wait_js(
            "the page loaded again, live",
            "return !window.beforeReload && document.body && document.body.dataset.state === 'live';",
            WAIT,
        )
        .await?;
        b.wait_text("#settings-open .mode-badge", |s| s == "yolo", WAIT)
            .await?;
        open_panel(&b, "#settings-open").await?;
        assert_eq!(panel_values(&b).await?["mode"], "yolo");
        ensure!(
            !b.visible("#set-yolo-confirm").await?,
            "a saved yolo asks nothing more"
        );
        b.screenshot(&format!("yolo-kept-{w}")).await?;
        b.click("#settings-cancel").await?;
        closed_back_on(&b, "#settings-open").await?;
        b.close().await?;
    }
    Ok(())
}

/// axe-core's serious and critical findings in the header's model tools
/// and the open settings panel (the rest of the page is accessibility.rs's).
async fn axe_on_settings(b: &Browser, axe: &str) -> anyhow::Result<Vec<String>> {
    if b.eval("return typeof window.axe === 'object';").await? != json!(true) {
        b.eval(&format!("{axe}\nreturn typeof window.axe;")).await?;
    }
    let found = b
        .eval(
            "return axe.run({include: [['#chat-tools'], ['#settings-panel']]}, {resultTypes: ['violations']})
                 .then((r) => r.violations
                     .filter((v) => v.impact === 'serious' || v.impact === 'critical')
                     .map((v) => `${v.id}: ${v.help} [${v.nodes.map((n) => n.target.join(' ')).join(', ')}]`));",
        )
        .await?;
    serde_json::from_value(found).context("axe's answer")
}

/// Opens the chat list's drawer on a phone and waits until it has slid in.
pub(crate) async fn open_drawer(b: &Browser) -> anyhow::Result<()> {
    b.click("#menu").await?;
    b.wait_js(
        "the drawer in place",
        "return document.body.classList.contains('drawer-open')
             && getComputedStyle(document.querySelector('#sidebar')).transform === 'none';",
        WAIT,
    )
    .await
    .map(|_| ())
}
