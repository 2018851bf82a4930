//! The page's accessibility, checked by axe-core (from the npm registry,
//! `tests/npm`) in the test browser on every screen a person meets, at
//! 1280 px and at 390 px: no violation axe rates serious or critical (a
//! control without a name, text without contrast, a focusable thing hidden
//! from assistive technology…). axe is injected through WebDriver, which
//! the page's CSP does not govern; the page itself loads nothing new.
//!
//! A screen is reached the way a person reaches it (clicks and keys), then
//! checked; a failure names each rule, its help line and the elements.

use anyhow::{ensure, Context};
use serde_json::json;
use tandem_tests::browser::{self, Browser, Chromedriver, Viewport, DESKTOP, PHONE, WAIT};
use tandem_tests::harness::{Chatd, Client, Sim};
use tandem_tests::npm;

use crate::files_page::LONG;

/// WebDriver's Control key, held until [`RELEASE`].
const CONTROL: &str = "\u{e009}";
const RELEASE: &str = "\u{e000}";

/// An answer with most of what the page renders: headings, a list, a
/// table, code, a link, a quote.
const RICH: &str = "## Plan\n\nSome **bold** and `code`, a [link](https://example.org/a).\n\n\
    - one\n- two\n\n1. first\n2. second\n\n> a quote\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n\
    ```rust\nfn main() {}\n```\n";

/// axe on the page as it is now: the serious and critical violations as
/// `rule: help [elements]` lines (empty when there are none).
async fn violations(b: &Browser, axe: &str) -> anyhow::Result<Vec<String>> {
    let loaded = b
        .eval("return typeof window.axe === 'object';")
        .await?
        .as_bool()
        .unwrap_or(false);
    if !loaded {
        // axe.min.js is a UMD bundle: run as a function body it sets window.axe.
        b.eval(&format!("{axe}\nreturn typeof window.axe;")).await?;
    }
    let found = b
        .eval(
            "return axe.run(document, {resultTypes: ['violations']}).then((r) => r.violations
                 .filter((v) => v.impact === 'serious' || v.impact === 'critical')
                 .map((v) => `${v.id} (${v.impact}): ${v.help} [${v.nodes.slice(0, 6)
                     .map((n) => n.target.join(' ')).join(', ')}]`));",
        )
        .await?;
    serde_json::from_value(found).context("axe's answer")
}

/// Checks the screen, takes its screenshot, and adds what axe found to
/// `failures`, named by the screen.
async fn check(
    b: &Browser,
    axe: &str,
    screen: &str,
    viewport: Viewport,
    failures: &mut Vec<String>,
) -> anyhow::Result<()> {
    let name = format!("{screen}-{}", viewport.width);
    b.screenshot(&name).await?;
    for v in violations(b, axe).await? {
        failures.push(format!("{name}: {v}"));
    }
    Ok(())
}

/// One test's processes, chromedriver first so it goes first on drop.
struct Rig {
    driver: Chromedriver,
    chatd: Chatd,
    sim: Sim,
    client: Client,
}

impl Rig {
    async fn start(admin_token: Option<&str>) -> anyhow::Result<Rig> {
        let sim = Sim::start(&["--tokens-per-second", "0"])?;
        let chatd = Chatd::start_with_front(&sim.url(), &[], admin_token).await?;
        let client = chatd.client();
        let driver = Chromedriver::start().await?;
        Ok(Rig {
            driver,
            chatd,
            sim,
            client,
        })
    }

    /// A chat (mode auto) whose answer made a file with `write_file` and
    /// then answered [`RICH`]; a workbook is in its files for the preview.
    async fn rich_chat(&self) -> anyhow::Result<String> {
        let chat = self.client.create_chat_in("auto").await?;
        let workspace = self.chatd.data_dir().join("workspaces").join(&chat);
        std::fs::create_dir_all(&workspace)?;
        tandem_tests::docfixtures::workbook(&workspace)?;
        self.sim
            .faults(json!([
                {"tool_calls": [{"name": "write_file",
                                  "arguments": {"path": "notes.md", "content": "# Notes\n\nhello\n"}}]},
                {"text": RICH}
            ]))
            .await?;
        let sent = self.client.send(&chat, "Write notes.md").await?;
        let run = sent["run_id"].as_str().context("run_id")?;
        self.client.wait_run(&chat, run, &["done"], LONG).await?;
        Ok(chat)
    }

    /// A chat whose reply failed: the engine does not serve its model.
    async fn failed_chat(&self) -> anyhow::Result<String> {
        let chat = self.client.create_chat().await?;
        self.sim
            .faults(json!([{"status": 404, "message": "The model `sim-big` does not exist."}]))
            .await?;
        let sent = self.client.send(&chat, "Hello").await?;
        let run = sent["run_id"].as_str().context("run_id")?;
        self.client.wait_run(&chat, run, &["failed"], LONG).await?;
        Ok(chat)
    }

    /// A chat (mode ask) whose run waits on a write's card.
    async fn waiting_chat(&self) -> anyhow::Result<String> {
        let chat = self.client.create_chat_in("ask").await?;
        std::fs::create_dir_all(self.chatd.data_dir().join("workspaces").join(&chat))?;
        self.sim
            .faults(json!([
                {"tool_calls": [{"name": "write_file",
                                  "arguments": {"path": "plan.md", "content": "plan\n"}}]},
                {}
            ]))
            .await?;
        let sent = self.client.send(&chat, "Write plan.md").await?;
        let run = sent["run_id"].as_str().context("run_id")?;
        self.client.wait_run(&chat, run, &["waiting"], LONG).await?;
        Ok(chat)
    }
}

/// Every screen of a live page: the start screen, a chat with rich
/// answers, a tool call and its file chips, the meter's details, the
/// settings panel, the inbox, a waiting card, a failed reply's banner, the
/// composer with a file attached, the chat's Skills menu and the Skills
/// panel, the files pane and a workbook's preview with its sheet tabs, the
/// chat's menu, the Ctrl+K switcher, the MCP servers panel, and on a phone
/// the chat list's drawer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_serious_violation_on_any_screen() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let Some(axe) = npm::file("axe-core", "axe.min.js") else {
        return Ok(());
    };
    let t = Rig::start(None).await?;
    // The waiting chat last: its answer's second step stays queued in
    // engine-sim while the card waits.
    let failed = t.failed_chat().await?;
    let rich = t.rich_chat().await?;
    let waiting = t.waiting_chat().await?;
    let attach = tempfile::tempdir()?;
    let photo = attach.path().join("notes.txt");
    std::fs::write(&photo, "a few words to attach\n")?;
    let mut failures = Vec::new();
    for viewport in [DESKTOP, PHONE] {
        let front = t.chatd.front_url();
        let b = Browser::open_chat(&t.driver, viewport, &front, None, "#composer").await?;
        check(&b, &axe, "start", viewport, &mut failures).await?;

        b.goto(&format!("{front}/#/c/{rich}")).await?;
        b.wait_count("#messages .message", |n| n >= 2, WAIT).await?;
        b.wait_count("#messages table", |n| n >= 1, WAIT).await?;
        check(&b, &axe, "chat", viewport, &mut failures).await?;

        b.click("#meter").await?;
        b.wait_visible("#meter-details", WAIT).await?;
        check(&b, &axe, "meter", viewport, &mut failures).await?;
        b.click("#meter").await?;
        b.wait_hidden("#meter-details", WAIT).await?;

        b.click("#settings-open").await?;
        b.wait_visible("#settings-panel", WAIT).await?;
        check(&b, &axe, "settings", viewport, &mut failures).await?;
        b.type_into("#settings-panel", "\u{e00c}").await?; // Escape
        b.wait_hidden("#settings-panel", WAIT).await?;

        b.click("#inbox-open").await?;
        b.wait_visible("#inbox", WAIT).await?;
        check(&b, &axe, "inbox", viewport, &mut failures).await?;
        b.click("#inbox-close").await?;
        b.wait_hidden("#inbox", WAIT).await?;

        b.choose_files("#attach-input", &[&photo]).await?;
        b.wait_count("#attachments .attach-chip", |n| n >= 1, WAIT)
            .await?;
        check(&b, &axe, "attached", viewport, &mut failures).await?;

        skills(&b, &axe, viewport, &mut failures).await?;

        b.click("#chat-menu > summary").await?;
        check(&b, &axe, "chat-menu", viewport, &mut failures).await?;
        b.click("#chat-menu > summary").await?;

        b.click("#files-toggle").await?;
        b.wait_visible("#files-pane", WAIT).await?;
        check(&b, &axe, "files", viewport, &mut failures).await?;
        b.click("#files-pane li.file-row[data-path='accounts.xlsx'] .file-open")
            .await?;
        b.wait_count("#file-preview [role='tab']", |n| n == 3, WAIT)
            .await?;
        b.wait_count("#file-preview .sheet-panel table", |n| n == 1, WAIT)
            .await?;
        check(&b, &axe, "sheet-preview", viewport, &mut failures).await?;
        b.click("#files-close").await?;

        b.goto(&format!("{front}/#/c/{waiting}")).await?;
        b.wait_visible(".consent", LONG).await?;
        check(&b, &axe, "consent", viewport, &mut failures).await?;

        b.goto(&format!("{front}/#/c/{failed}")).await?;
        b.wait_visible("#failure", LONG).await?;
        check(&b, &axe, "failed", viewport, &mut failures).await?;

        if viewport.phone {
            b.click("#menu").await?;
            b.wait_js(
                "the drawer open",
                "return document.body.classList.contains('drawer-open') || null;",
                WAIT,
            )
            .await?;
            check(&b, &axe, "drawer", viewport, &mut failures).await?;
            mcp_panel(&b, &axe, viewport, &mut failures).await?;
            b.click("#switcher-open").await?;
        } else {
            mcp_panel(&b, &axe, viewport, &mut failures).await?;
            b.type_into("#composer", &format!("{CONTROL}k{RELEASE}"))
                .await?;
        }
        b.wait_visible("#switcher", WAIT).await?;
        check(&b, &axe, "switcher", viewport, &mut failures).await?;
        b.close().await?;
    }
    ensure!(
        failures.is_empty(),
        "axe found serious or critical violations:\n  {}",
        failures.join("\n  ")
    );
    Ok(())
}

/// The MCP servers panel, opened from the sidebar, checked and closed.
async fn mcp_panel(
    b: &Browser,
    axe: &str,
    viewport: Viewport,
    failures: &mut Vec<String>,
) -> anyhow::Result<()> {
    b.click("#mcp-open").await?;
    b.wait_visible("#mcp-panel", WAIT).await?;
    b.wait_js(
        "the MCP panel's list read",
        "return document.querySelector('#mcp-status').textContent !== 'Loading…' || null;",
        WAIT,
    )
    .await?;
    check(b, axe, "mcp", viewport, failures).await?;
    b.type_into("#mcp-panel", "\u{e00c}").await?; // Escape
    b.wait_hidden("#mcp-panel", WAIT).await
}

/// The chat's Skills menu, then the Skills panel from its "Manage skills",
/// checked and closed.
async fn skills(
    b: &Browser,
    axe: &str,
    viewport: Viewport,
    failures: &mut Vec<String>,
) -> anyhow::Result<()> {
    b.click("#skills-open").await?;
    b.wait_js(
        "the Skills menu read",
        "return / of \\d+ on$/.test(document.querySelector('#skills-count').textContent) || null;",
        WAIT,
    )
    .await?;
    check(b, axe, "skills-menu", viewport, failures).await?;
    b.click("#skills-manage").await?;
    b.wait_count("#sk-layers section", |n| n >= 3, WAIT).await?;
    check(b, axe, "skills-panel", viewport, failures).await?;
    b.click("#skills-close").await?;
    b.wait_hidden("#skills-panel", WAIT).await
}

/// The sign-in card (an admin token is set) and its refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_serious_violation_signing_in() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let Some(axe) = npm::file("axe-core", "axe.min.js") else {
        return Ok(());
    };
    let t = Rig::start(Some("a-long-admin-token-for-the-test")).await?;
    let mut failures = Vec::new();
    for viewport in [DESKTOP, PHONE] {
        let b = Browser::open(&t.driver, viewport).await?;
        b.goto(&format!("{}/", t.chatd.front_url())).await?;
        b.wait_state("signin").await?;
        check(&b, &axe, "signin", viewport, &mut failures).await?;
        b.type_into("#token", "wrong").await?;
        b.click("#signin-submit").await?;
        b.wait_js(
            "the refusal shown",
            "const e = document.querySelector('#signin-error'); return e && e.textContent.trim() ? e.textContent : null;",
            WAIT,
        )
        .await?;
        check(&b, &axe, "signin-refused", viewport, &mut failures).await?;
        b.close().await?;
    }
    ensure!(
        failures.is_empty(),
        "axe found serious or critical violations:\n  {}",
        failures.join("\n  ")
    );
    Ok(())
}
