//! The page's actions around a chat (docs/web.md "Around a chat") in
//! headless Chromium against the real chatd with its front and the engine
//! simulator, at 1280 px and at 390 px: Branch on a message, export as
//! Markdown and JSON and import the JSON back, Copy as Markdown, the Ctrl+K
//! switcher, and a write's card and an egress card (the real egressd) that
//! become one line once answered. What the page made is checked through
//! chatd's API; every wait is a bounded poll.

use anyhow::{ensure, Context};
use serde_json::{json, Value};
use tandem_tests::browser::{self, Browser, Chromedriver, Viewport, DESKTOP, ENTER, PHONE, WAIT};
use tandem_tests::harness::{sim_answer, wait_until, Chatd, Client, Sim};

use crate::files_page::LONG;

/// The first answered card's line: its text, the tool of the call it is
/// under, and whether it is seen with the message's calls folded.
const LINE: &str =
    "const l = document.querySelector('#messages .message > .consent-lines .consent-line');
    if (!l) return null;
    const call = document.querySelector(`#messages .tool-call[data-call-id='${l.dataset.callId}']`);
    return {text: l.textContent, call: call ? call.querySelector('.name').textContent : null,
            folded: !call.closest('details').open, seen: l.getClientRects().length > 0};";

/// WebDriver's Control key: held for the keys after it, until [`RELEASE`].
const CONTROL: &str = "\u{e009}";
/// WebDriver's "release the modifiers".
const RELEASE: &str = "\u{e000}";

/// One test's processes, chromedriver first so it goes first on drop.
struct Around {
    driver: Chromedriver,
    chatd: Chatd,
    sim: Sim,
    client: Client,
    dir: tempfile::TempDir,
}

impl Around {
    async fn start() -> anyhow::Result<Around> {
        let sim = Sim::start(&["--tokens-per-second", "0"])?;
        let chatd = Chatd::start_with_front(&sim.url(), &[], None).await?;
        let client = chatd.client();
        let driver = Chromedriver::start().await?;
        Ok(Around {
            driver,
            chatd,
            sim,
            client,
            dir: tempfile::tempdir()?,
        })
    }

    /// A new browser on `chat` (or the start screen), live, with the
    /// downloads the page hands to the browser kept in `window.saved`.
    async fn open(&self, viewport: Viewport, chat: Option<&str>) -> anyhow::Result<Browser> {
        let front = self.chatd.front_url();
        let b = Browser::open_chat(&self.driver, viewport, &front, chat, "#chat-menu").await?;
        // A download is a blob URL clicked with `download`: keep the blob
        // and its name instead of a file the test would have to find.
        b.eval(
            "window.saved = [];
             const blobs = new Map();
             const make = URL.createObjectURL.bind(URL);
             URL.createObjectURL = (blob) => { const u = make(blob); blobs.set(u, blob); return u; };
             HTMLAnchorElement.prototype.click = function () {
                 if (this.hasAttribute('download') && blobs.has(this.href)) {
                     const blob = blobs.get(this.href), name = this.download;
                     blob.text().then((text) => window.saved.push({name, text}));
                 }
             };
             return true;",
        )
        .await?;
        Ok(b)
    }

    /// A chat with `questions` sent one after another, each answered.
    async fn chat_with(&self, questions: &[&str]) -> anyhow::Result<String> {
        let chat = self.client.create_chat().await?;
        for q in questions {
            let sent = self.client.send(&chat, q).await?;
            let run = sent["run_id"].as_str().context("run_id")?.to_string();
            self.client.wait_run(&chat, &run, &["done"], LONG).await?;
        }
        Ok(chat)
    }
}

/// The (role, text) of a chat's messages, from chatd.
async fn messages(client: &Client, chat: &str) -> anyhow::Result<Vec<(String, String)>> {
    let snapshot = client.snapshot(chat).await?;
    Ok(snapshot["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or("").to_string(),
                m["text"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect())
}

/// The chat the page shows (its address), once it is another than `not`.
async fn opened_other(b: &Browser, not: &str) -> anyhow::Result<String> {
    b.poll("another chat in the address", WAIT, || async {
        let hash = b.eval("return location.hash").await?;
        let hash = hash.as_str().unwrap_or("").to_string();
        let id = hash.strip_prefix("#/c/").unwrap_or("").to_string();
        Ok(if !id.is_empty() && id != not {
            Ok(id)
        } else {
            Err(format!("the address is {hash:?}"))
        })
    })
    .await
}

/// Opens the chat list's drawer on a phone and waits until it has slid in
/// (a click during the slide lands where the button was a moment before).
async fn open_drawer(b: &Browser) -> anyhow::Result<()> {
    b.click("#menu").await?;
    b.wait_js(
        "the drawer in place",
        "return document.body.classList.contains('drawer-open')
             && getComputedStyle(document.querySelector('#sidebar')).transform === 'none';",
        WAIT,
    )
    .await?;
    Ok(())
}

/// The answered card's line ([`LINE`]); on a timeout, what the messages
/// held instead.
async fn answered_line(b: &Browser, what: &str) -> anyhow::Result<Value> {
    match b.wait_js(what, LINE, WAIT).await {
        Ok(line) => Ok(line),
        Err(e) => {
            let dom = b
                .eval("return document.querySelector('#messages').outerHTML.slice(0, 4000);")
                .await?;
            Err(e.context(format!("the messages: {dom}")))
        }
    }
}

/// The downloads the page handed to the browser so far: (name, text).
async fn saved(b: &Browser, n: usize) -> anyhow::Result<Vec<(String, String)>> {
    let v = b
        .wait_js(
            "the page's downloads",
            &format!("return window.saved.length >= {n} ? window.saved : null;"),
            WAIT,
        )
        .await?;
    Ok(v.as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            (
                s["name"].as_str().unwrap_or("").to_string(),
                s["text"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect())
}

/// Branch on the second message (the first answer) opens a new chat whose
/// messages are the first two, at each size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn branch_from_a_message() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let t = Around::start().await?;
    let chat = t
        .chat_with(&[
            "First question [sim tokens=3]",
            "Second question [sim tokens=4]",
        ])
        .await?;
    let source = messages(&t.client, &chat).await?;
    ensure!(source.len() == 4, "two questions, two answers: {source:?}");
    for viewport in [DESKTOP, PHONE] {
        let b = t.open(viewport, Some(&chat)).await?;
        b.wait_count("#messages .message", |n| n == 4, WAIT).await?;
        let named = b
            .eval(
                "return [...document.querySelectorAll('#messages .message button.branch')]
                     .map(e => e.getAttribute('aria-label') || e.textContent);",
            )
            .await?;
        ensure!(
            named.as_array().map(Vec::len) == Some(4)
                && named
                    .as_array()
                    .into_iter()
                    .flatten()
                    .all(|n| n.as_str().is_some_and(|s| s.contains("Branch"))),
            "each message has a named Branch: {named}"
        );
        b.click("#messages .message:nth-child(2) button.branch")
            .await?;
        let fork = opened_other(&b, &chat).await?;
        b.wait_count("#messages .message", |n| n == 2, WAIT).await?;
        assert_eq!(
            messages(&t.client, &fork).await?,
            source[..2].to_vec(),
            "the branch holds the first question and its answer"
        );
        assert_eq!(source[1].1.trim(), sim_answer(3).trim());
        b.screenshot(&format!("branched-{}", viewport.width))
            .await?;
        b.close().await?;
    }
    Ok(())
}

/// Export as Markdown holds the messages' text, and Copy as Markdown copies
/// it (or selects it when the clipboard is refused); export as JSON, then
/// Import of that file, opens a new chat with the same messages; a file
/// chatd refuses is refused in chatd's words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_and_import() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let t = Around::start().await?;
    let chat = t
        .chat_with(&[
            "Tell me about otters [sim tokens=3]",
            "And beavers? [sim tokens=2]",
        ])
        .await?;
    let source = messages(&t.client, &chat).await?;
    for viewport in [DESKTOP, PHONE] {
        let b = t.open(viewport, Some(&chat)).await?;
        b.click("#chat-menu > summary").await?;
        b.click("#export-md").await?;
        let md = saved(&b, 1).await?;
        ensure!(md[0].0.ends_with(".md"), "a Markdown file: {:?}", md[0].0);
        for (_, text) in &source {
            ensure!(
                md[0].1.contains(text.trim()),
                "the Markdown holds {text:?}: {}",
                md[0].1
            );
        }
        b.click("#chat-menu > summary").await?;
        b.click("#export-json").await?;
        let files = saved(&b, 2).await?;
        let (name, json_text) = &files[1];
        ensure!(name.ends_with(".json"), "a JSON file: {name:?}");
        let export: Value = serde_json::from_str(json_text)?;
        assert_eq!(export["version"], 1, "{export}");

        // Copy as Markdown: the clipboard when the page may use it; when it
        // may not (plain http), the text shown selected for Ctrl+C.
        b.eval(
            "window.copied = null;
             navigator.clipboard.writeText = async (text) => {
                 if (window.noClipboard) throw new DOMException('denied', 'NotAllowedError');
                 window.copied = text;
             };
             return true;",
        )
        .await?;
        b.click("#chat-menu > summary").await?;
        b.click("#copy-md").await?;
        let copied = b
            .wait_js("the copied Markdown", "return window.copied;", WAIT)
            .await?;
        ensure!(
            copied.as_str() == Some(md[0].1.as_str()),
            "the clipboard has the Markdown export: {copied}"
        );
        b.eval("window.noClipboard = true; return true;").await?;
        b.click("#chat-menu > summary").await?;
        b.click("#copy-md").await?;
        b.wait_visible("#copy-dialog", WAIT).await?;
        let selected = b
            .wait_js(
                "the Markdown selected",
                "const s = String(getSelection()); return s.length > 10 ? s : null;",
                WAIT,
            )
            .await?;
        let selected = selected.as_str().unwrap_or("");
        for (_, text) in &source {
            ensure!(
                selected.contains(text.trim()),
                "the selection holds {text:?}: {selected}"
            );
        }
        b.screenshot(&format!("copy-selected-{}", viewport.width))
            .await?;
        b.click("#copy-dialog-close").await?;
        b.wait_hidden("#copy-dialog", WAIT).await?;

        let path = t.dir.path().join(format!("export-{}.json", viewport.width));
        std::fs::write(&path, json_text)?;
        if viewport.phone {
            open_drawer(&b).await?; // the chat list is a drawer on a phone
        }
        b.wait_visible("#import-chat", WAIT).await?;
        b.choose_files("#import-input", &[&path]).await?;
        let imported = opened_other(&b, &chat).await?;
        b.wait_count("#messages .message", |n| n == 4, WAIT).await?;
        assert_eq!(
            messages(&t.client, &imported).await?,
            source,
            "the imported chat has the same messages"
        );
        b.screenshot(&format!("imported-{}", viewport.width))
            .await?;

        // A version chatd does not read: its refusal, in its words.
        let bad = t.dir.path().join(format!("v9-{}.json", viewport.width));
        std::fs::write(
            &bad,
            json!({"version": 9, "model": "m", "messages": []}).to_string(),
        )?;
        if viewport.phone {
            open_drawer(&b).await?;
        }
        b.choose_files("#import-input", &[&bad]).await?;
        b.wait_text(
            "#toast .toast-text",
            |t| t.contains("version") && t.contains('9'),
            WAIT,
        )
        .await?;
        b.close().await?;
    }
    Ok(())
}

/// Ctrl+K opens the switcher; a word from a message finds its chat (the
/// server's search); arrows and Enter open it; Esc closes the switcher.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_k_switcher() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let t = Around::start().await?;
    let wanted = t
        .chat_with(&["Where do narwhals live? [sim tokens=2]"])
        .await?;
    let other = t.chat_with(&["Recipes for bread [sim tokens=2]"]).await?;
    t.client
        .call(
            reqwest::Method::PATCH,
            &format!("/conversations/{wanted}"),
            Some(json!({"title": "Sea notes"})),
        )
        .await?;
    for viewport in [DESKTOP, PHONE] {
        let b = t.open(viewport, Some(&other)).await?;
        // Esc closes it, the focus back where it was.
        b.type_into("#composer", &format!("{CONTROL}k{RELEASE}"))
            .await?;
        b.wait_visible("#switcher", WAIT).await?;
        b.type_into("#switcher-q", "\u{e00c}").await?; // Escape
        b.wait_hidden("#switcher", WAIT).await?;
        ensure!(
            b.eval("return document.activeElement.id").await? == "composer",
            "the focus is back in the composer"
        );

        if viewport.phone {
            open_drawer(&b).await?;
            b.click("#switcher-open").await?; // the named button, on a phone
        } else {
            b.type_into("#composer", &format!("{CONTROL}k{RELEASE}"))
                .await?;
        }
        b.wait_visible("#switcher", WAIT).await?;
        b.type_into("#switcher-q", "narwhals").await?;
        let found = b
            .wait_js(
                "the switcher's results",
                "const li = [...document.querySelectorAll('#switcher-list [role=option]')];
                 return li.length === 1 ? li.map(e => ({id: e.dataset.chatId, text: e.innerText,
                     selected: e.getAttribute('aria-selected')})) : null;",
                WAIT,
            )
            .await?;
        assert_eq!(found[0]["id"], wanted.as_str(), "{found}");
        let text = found[0]["text"].as_str().unwrap_or("");
        ensure!(
            text.contains("Sea notes")
                && text.contains("Where do narwhals live?")
                && text.contains("changed"),
            "the title, the line that matched and when it changed: {text:?}"
        );
        assert_eq!(found[0]["selected"], "true", "{found}");
        b.screenshot(&format!("switcher-{}", viewport.width))
            .await?;
        // Down wraps to the one result; Enter opens it.
        b.type_into("#switcher-q", &format!("\u{e015}{ENTER}"))
            .await?;
        b.wait_hidden("#switcher", WAIT).await?;
        b.wait_text("#chat-title", |t| t == "Sea notes", WAIT)
            .await?;
        ensure!(
            b.eval("return location.hash").await? == format!("#/c/{wanted}"),
            "the found chat is open"
        );
        b.close().await?;
    }
    Ok(())
}

/// A write in mode `ask` shows a card; once answered it is one line under
/// its call: "Allowed once by you, hh:mm" (and "Denied by you, …").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answered_card_is_one_line() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let t = Around::start().await?;
    for (viewport, decision, words) in [
        (DESKTOP, "once", "write_file · Allowed once by you, "),
        (PHONE, "deny", "write_file · Denied by you, "),
    ] {
        let chat = t.client.create_chat_in("ask").await?;
        std::fs::create_dir_all(t.chatd.data_dir().join("workspaces").join(&chat))?;
        let b = t.open(viewport, Some(&chat)).await?;
        t.sim
            .faults(json!([
                {"tool_calls": [{"name": "write_file",
                                  "arguments": {"path": "hello.txt", "content": "hi\n"}}]},
                {}
            ]))
            .await?;
        b.type_into("#composer", "Write hello.txt [sim tokens=5]")
            .await?;
        b.click("#send").await?;
        b.wait_visible(".consent", LONG).await?;
        b.click(&format!(".consent button[data-decision='{decision}']"))
            .await?;
        b.wait_count(".consent", |n| n == 0, WAIT).await?;
        let line = answered_line(&b, "the answered card's line under its call").await?;
        let text = line["text"].as_str().unwrap_or("");
        ensure!(
            text.starts_with(words)
                && text[words.len()..].len() >= 4
                && text[words.len()..].contains(':'),
            "one line with who and when: {line}"
        );
        assert_eq!(line["call"], "write_file", "{line}");
        assert_eq!(line["folded"], true, "the calls stay folded: {line}");
        assert_eq!(line["seen"], true, "the line is seen all the same: {line}");
        assert_eq!(
            b.count("#messages .consent-line").await?,
            1,
            "one line, the event after the answer adds none"
        );
        b.screenshot(&format!("answered-{}", viewport.width))
            .await?;

        // Opened again, the page takes the line from the snapshot's answered
        // cards: the same words, who and when.
        wait_until("the run to end", LONG, || async {
            let s = t.client.snapshot(&chat).await.ok()?;
            (s["conversation"]["state"] == "idle").then_some(())
        })
        .await?;
        b.eval("location.reload(); return true;").await?;
        b.wait_state("live").await?;
        let again = answered_line(&b, "the line after a reload").await?;
        ensure!(
            again["text"] == line["text"],
            "the line after a reload is the line before it: {again} / {line}"
        );
        assert_eq!(again["call"], "write_file", "{again}");
        b.close().await?;
    }
    Ok(())
}

/// An egress card (egressd asking about a new host while `web_fetch`
/// reaches out), answered on the page, becomes one line under that call
/// naming the host: "Always" allows it for this chat, Deny denies it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answered_egress_card_is_one_line() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let setup = crate::web_tools::start_with(&[], true).await?;
    let (client, egressd, port) = (&setup.client, &setup.egressd, setup.port);
    let (chatd, sim) = (&setup.chatd, &setup.sim);
    let driver = Chromedriver::start().await?;
    wait_until("chatd to follow egressd's cards", LONG, || async {
        let (_, health) = egressd.call("GET", "/health", None).await.ok()?;
        (health["card_listeners"].as_u64()? >= 1).then_some(())
    })
    .await?;
    let url = format!("http://127.0.0.2:{port}/page");
    for (viewport, decision, words) in [
        (
            DESKTOP,
            "always",
            "web_fetch · 127.0.0.2: Allowed for this chat by you, ",
        ),
        (PHONE, "deny", "web_fetch · 127.0.0.2: Denied by you, "),
    ] {
        let chat = client.create_chat_in("auto").await?;
        let b = Browser::open(&driver, viewport).await?;
        b.goto(&format!("{}/#/c/{chat}", chatd.front_url())).await?;
        b.wait_state("live").await?;
        b.wait_visible("#chat-menu", WAIT).await?;
        sim.faults(json!([
            {"tool_calls": [{"name": "web_fetch", "arguments": {"url": url}}]},
            {"tokens": 2},
        ]))
        .await?;
        b.type_into("#composer", "Look it up").await?;
        b.click("#send").await?;
        b.wait_text(".consent .consent-head .name", |t| t == "egress", LONG)
            .await?;
        b.click(&format!(".consent button[data-decision='{decision}']"))
            .await?;
        b.wait_count(".consent", |n| n == 0, WAIT).await?;
        let line = answered_line(&b, "the egress card's line under its call").await?;
        let text = line["text"].as_str().unwrap_or("");
        ensure!(
            text.starts_with(words) && text[words.len()..].contains(':'),
            "one line with the host, who and when: {line}"
        );
        assert_eq!(line["call"], "web_fetch", "{line}");
        assert_eq!(line["seen"], true, "{line}");
        b.screenshot(&format!("egress-answered-{}", viewport.width))
            .await?;

        // Opened again: the same call and line, from the snapshot.
        wait_until("the run to end", LONG, || async {
            let s = client.snapshot(&chat).await.ok()?;
            (s["conversation"]["state"] == "idle").then_some(())
        })
        .await?;
        b.eval("location.reload(); return true;").await?;
        b.wait_state("live").await?;
        let again = answered_line(&b, "the line after a reload").await?;
        ensure!(
            again["text"] == line["text"],
            "the line after a reload is the line before it: {again} / {line}"
        );
        assert_eq!(again["call"], "web_fetch", "{again}");
        b.close().await?;
    }
    Ok(())
}
