//! The settings panel's Tool permissions (settings.js; docs/api.md "Tool
//! policies") in headless Chromium against the real chatd
//! with its front and the engine simulator: a chat's panel lists the
//! built-in tools, each with a select; Ask for write_file and Never for
//! web_fetch, saved with the panel, are the chat's own policies in chatd;
//! the defaults' panel sets the box's (edit_file Always), which a chat's
//! panel then names ("Box: always"); a refused policy is said under the
//! fieldset while the rest of the save is kept; on a phone the rows fit the
//! sheet; axe finds nothing serious. Every wait is a bounded poll.

use anyhow::{ensure, Context};
use serde_json::{json, Value};
use tandem_tests::browser::{self, Browser, Chromedriver, DESKTOP, PHONE, WAIT};
use tandem_tests::harness::{Chatd, Client, Sim};
use tandem_tests::npm;

use crate::settings::fill;

/// A policy's select in the panel.
fn select_of(tool: &str) -> String {
    format!("#set-pol-{tool}")
}

/// Opens the settings panel with `opener`, its tools listed, the list unfolded.
async fn open_panel(b: &Browser, opener: &str) -> anyhow::Result<()> {
    b.click(opener).await?;
    b.wait_js(
        "the settings panel open, its tools listed",
        "return document.querySelector('#settings-panel').open
             && document.querySelectorAll('#set-pol-rows select').length > 0;",
        WAIT,
    )
    .await?;
    if b.eval("return document.querySelector('#set-pol-list').open;")
        .await?
        != json!(true)
    {
        b.click("#set-pol-list summary").await?;
    }
    b.wait_visible(&select_of("write_file"), WAIT).await
}

/// Waits for the panel to close after a save.
async fn closed(b: &Browser) -> anyhow::Result<()> {
    b.wait_js(
        "the panel closed",
        "return !document.querySelector('#settings-panel').open;",
        WAIT,
    )
    .await
    .map(|_| ())
}

/// Picks `policy` for `tool` as typed on the keyboard (the select's
/// type-ahead), and waits until the select holds it.
async fn choose(b: &Browser, tool: &str, policy: &str) -> anyhow::Result<()> {
    let css = select_of(tool);
    b.type_into(&css, if policy.is_empty() { "m" } else { policy })
        .await?;
    b.wait_js(
        &format!("{tool} set to {policy:?}"),
        &format!("return document.querySelector('{css}').value === '{policy}';"),
        WAIT,
    )
    .await
    .map(|_| ())
}

/// Each row of the panel: tool → [value, the first option's words].
async fn shown(b: &Browser) -> anyhow::Result<Value> {
    b.eval(
        "const out = {};
         for (const s of document.querySelectorAll('#set-pol-rows select'))
             out[s.dataset.tool] = [s.value, s.options[0].textContent];
         return out;",
    )
    .await
}

/// What chatd holds for the chat: its own, the box's.
async fn chat_policies(client: &Client, chat: &str) -> anyhow::Result<Value> {
    let held = client
        .get(&format!("/conversations/{chat}/tools/policies"))
        .await?;
    ensure!(held.status == 200, "{held:?}");
    Ok(held.body)
}

/// axe's serious and critical violations in the open panel.
async fn axe_on_panel(b: &Browser, axe: &str) -> anyhow::Result<Value> {
    if b.eval("return typeof window.axe === 'object';").await? != json!(true) {
        b.eval(&format!("{axe}\nreturn typeof window.axe;")).await?;
    }
    b.eval(
        "return axe.run(document.querySelector('#settings-panel'), {resultTypes: ['violations']})
             .then((r) => r.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical')
             .map((v) => `${v.id}: ${v.help} [${v.nodes.map((n) => n.target.join(' ')).join(', ')}]`));",
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_permissions_are_set_for_a_chat_and_for_the_box() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start_with_front(&sim.url(), &[], None).await?;
    let client = chatd.client();
    let driver = Chromedriver::start().await?;
    let chat = client.create_chat().await?;
    let b = Browser::open_chat(
        &driver,
        DESKTOP,
        &chatd.front_url(),
        Some(&chat),
        "#settings-open",
    )
    .await?;

    // The chat's panel: a row per built-in tool of chatd's view, none set.
    open_panel(&b, "#settings-open").await?;
    let view = client.get(&format!("/conversations/{chat}/tools")).await?;
    ensure!(view.status == 200, "{view:?}");
    let builtins: Vec<String> = view.body["tools"]
        .as_array()
        .context("tools")?
        .iter()
        .filter(|t| t["source"] == "builtin")
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect();
    let rows = shown(&b).await?;
    let listed: Vec<String> = rows.as_object().context("rows")?.keys().cloned().collect();
    let mut want = builtins.clone();
    want.sort();
    let mut got = listed.clone();
    got.sort();
    ensure!(
        got == want,
        "the built-in tools: {listed:?}, not {builtins:?}"
    );
    for tool in ["write_file", "web_fetch", "edit_file"] {
        ensure!(
            rows[tool] == json!(["", "Mode decides"]),
            "{tool} follows the mode: {rows}"
        );
    }
    let options = b
        .eval(&format!(
            "return [...document.querySelector('{}').options].map((o) => o.textContent);",
            select_of("write_file")
        ))
        .await?;
    ensure!(
        options == json!(["Mode decides", "Always", "Ask", "Never"]),
        "{options}"
    );
    let label = b.text("label[for='set-pol-write_file']").await?;
    ensure!(
        label.starts_with("write_file ") && label.len() > "write_file ".len(),
        "the tool's name and a short description: {label:?}"
    );

    // Ask for write_file, Never for web_fetch: one Save, the chat's own.
    choose(&b, "write_file", "ask").await?;
    choose(&b, "web_fetch", "never").await?;
    b.screenshot("policies-chat-1280").await?;
    b.click("#settings-save").await?;
    closed(&b).await?;
    let held = chat_policies(&client, &chat).await?;
    ensure!(
        held["policies"] == json!({"write_file": "ask", "web_fetch": "never"}),
        "the chat's own: {held}"
    );
    ensure!(held["box"] == json!({}), "the box's untouched: {held}");

    // The defaults' panel edits the box's: edit_file Always.
    open_panel(&b, "#defaults-open").await?;
    ensure!(
        b.text("#settings-title").await? == "Defaults for new chats",
        "the defaults' panel"
    );
    let rows = shown(&b).await?;
    ensure!(
        rows["write_file"] == json!(["", "Mode decides"]),
        "the box has none of the chat's: {rows}"
    );
    choose(&b, "edit_file", "always").await?;
    b.click("#settings-save").await?;
    closed(&b).await?;
    let boxed = client.get("/tools/policies").await?;
    ensure!(
        boxed.status == 200 && boxed.body["policies"] == json!({"edit_file": "always"}),
        "the box's: {boxed:?}"
    );

    // The chat's panel names the box's where the chat has none.
    open_panel(&b, "#settings-open").await?;
    let rows = shown(&b).await?;
    ensure!(
        rows["edit_file"] == json!(["", "Box: always"]),
        "the box's shown: {rows}"
    );
    ensure!(rows["write_file"][0] == "ask", "{rows}");
    ensure!(rows["web_fetch"][0] == "never", "{rows}");
    if let Some(axe) = npm::file("axe-core", "axe.min.js") {
        let found = axe_on_panel(&b, &axe).await?;
        ensure!(found == json!([]), "axe in the settings panel: {found}");
    }

    // A refused policy (a value no option offers, put in by hand) is said
    // under the fieldset; the settings saved before it are kept.
    fill(&b, "#set-temperature", "0.5").await?;
    b.eval(
        "const s = document.querySelector('#set-pol-web_fetch');
         s.append(new Option('Sometimes', 'sometimes'));
         s.value = 'sometimes';
         return true;",
    )
    .await?;
    b.click("#settings-save").await?;
    let said = b
        .wait_text("#set-pol-error", |t| !t.is_empty(), WAIT)
        .await?;
    ensure!(
        said.contains("tool permissions were not") && said.contains("always, ask or never"),
        "chatd's refusal under the fieldset: {said}"
    );
    assert_eq!(
        b.eval(
            "return [document.querySelector('#settings-panel').open,
                     document.querySelector('#set-pol-error').getAttribute('role'),
                     document.activeElement.id];"
        )
        .await?,
        json!([true, "alert", "set-pol-web_fetch"]),
        "the panel stays open on the refused tool"
    );
    b.screenshot("policies-refused-1280").await?;
    let kept = client.snapshot(&chat).await?["conversation"]["settings"].clone();
    ensure!(kept["temperature"] == 0.5, "the settings kept: {kept}");
    ensure!(
        chat_policies(&client, &chat).await?["policies"]
            == json!({"write_file": "ask", "web_fetch": "never"}),
        "the policies unchanged"
    );
    // Put back to a real choice, the save goes through.
    choose(&b, "web_fetch", "").await?;
    b.click("#settings-save").await?;
    closed(&b).await?;
    ensure!(
        chat_policies(&client, &chat).await?["policies"] == json!({"write_file": "ask"}),
        "web_fetch follows the mode again"
    );
    b.close().await?;

    // On a phone the rows fit the sheet.
    let b = Browser::open_chat(
        &driver,
        PHONE,
        &chatd.front_url(),
        Some(&chat),
        "#settings-open",
    )
    .await?;
    open_panel(&b, "#settings-open").await?;
    let over = b
        .eval(
            "const edge = document.querySelector('#settings-panel').getBoundingClientRect().right;
             return [...document.querySelectorAll('#set-pol-rows .mode-row')]
                 .filter((r) => r.getBoundingClientRect().right > edge + 1
                     || r.querySelector('select').getBoundingClientRect().right > edge + 1)
                 .map((r) => r.querySelector('select').dataset.tool);",
        )
        .await?;
    ensure!(over == json!([]), "rows past the sheet's edge: {over}");
    b.eval("document.querySelector('#set-pol-web_fetch').scrollIntoView(); return true;")
        .await?;
    b.screenshot("policies-chat-390").await?;
    b.close().await?;
    Ok(())
}
