//! The page's Tools menu (tools.js; docs/api.md "A chat's tools") in
//! headless Chromium against the real chatd with its front and the engine
//! simulator. The chat's menu: chatd's groups under "Built-in tools" and
//! "Your connectors", one that cannot serve the chat shown off and disabled
//! with its reason, "N of M on" of the usable ones; Web switched off by its
//! name stored as the chat's `off`; Disable all then Select all leaving the
//! opt-in saved agents off; from 9 rows a search whose buttons change the
//! shown ones only; a refusal (a connector removed meanwhile) shown under
//! the list with the switches put back to what chatd holds. On the start
//! screen the switches of the chat not made yet go with its first message.
//! axe finds nothing serious in the menu. Every wait is a bounded poll.

use anyhow::{ensure, Context};
use serde_json::{json, Value};
use tandem_tests::browser::{self, Browser, Chromedriver, DESKTOP, WAIT};
use tandem_tests::harness::{Chatd, Client, Sim};
use tandem_tests::npm;

/// An enabled HTTP connector `name` saved in chatd (never connected here); its id.
async fn connector(client: &Client, name: &str) -> anyhow::Result<String> {
    let url = format!("https://{}.example.com/mcp", name.to_lowercase());
    let made = client
        .post(
            "/mcp-connectors",
            json!({"name": name, "transport": "http", "url": url, "enabled": true}),
        )
        .await?;
    ensure!(made.status == 201, "{made:?}");
    Ok(made.body["id"]
        .as_str()
        .context("connector id")?
        .to_string())
}

/// chatd's view of the chat's tools.
async fn view_of(client: &Client, chat: &str) -> anyhow::Result<Value> {
    let view = client.get(&format!("/conversations/{chat}/tools")).await?;
    ensure!(view.status == 200, "{view:?}");
    Ok(view.body)
}

/// What the chat switched off, as chatd holds it, sorted.
async fn off_of(client: &Client, chat: &str) -> anyhow::Result<Vec<String>> {
    let mut off: Vec<String> = serde_json::from_value(view_of(client, chat).await?["off"].clone())?;
    off.sort();
    Ok(off)
}

/// Whether chatd has the opt-in saved agents switched on for the chat.
async fn saved_agents_on(client: &Client, chat: &str) -> anyhow::Result<bool> {
    let view = view_of(client, chat).await?;
    let row = group(&view, "saved_agents")?;
    Ok(row["on"] == true)
}

fn group<'a>(view: &'a Value, name: &str) -> anyhow::Result<&'a Value> {
    view["groups"]
        .as_array()
        .and_then(|g| g.iter().find(|g| g["name"] == name))
        .with_context(|| format!("{name} in {view}"))
}

/// "N of M on" as the menu should read it for `view`: usable rows only.
fn count_text(view: &Value) -> String {
    let rows = view["groups"].as_array().cloned().unwrap_or_default();
    let usable: Vec<&Value> = rows.iter().filter(|g| g["usable"] == true).collect();
    let on = usable.iter().filter(|g| g["on"] == true).count();
    format!("{on} of {} on", usable.len())
}

async fn count_reads(b: &Browser, text: &str) -> anyhow::Result<()> {
    b.wait_text("#tools-count", |t| t == text, WAIT).await?;
    Ok(())
}

/// The menu's rows, in order: [name, checked, disabled].
async fn rows(b: &Browser) -> anyhow::Result<Vec<(String, bool, bool)>> {
    let v = b
        .eval(
            "return [...document.querySelectorAll('#tools-rows input')]
                 .map((i) => [i.dataset.name, i.checked, i.disabled]);",
        )
        .await?;
    Ok(serde_json::from_value(v)?)
}

fn switch_of(name: &str) -> String {
    format!("#tools-rows input[data-name='{name}']")
}

/// axe's serious and critical violations inside `css`.
async fn axe_in(b: &Browser, axe: &str, css: &str) -> anyhow::Result<Value> {
    b.eval(&format!("{axe}\nreturn typeof window.axe;")).await?;
    b.eval_with(
        "return axe.run(document.querySelector(arguments[0]), {resultTypes: ['violations']})
             .then((r) => r.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical')
             .map((v) => `${v.id}: ${v.help} [${v.nodes.map((n) => n.target.join(' ')).join(', ')}]`));",
        vec![json!(css)],
    )
    .await
}

async fn open_menu(b: &Browser) -> anyhow::Result<()> {
    b.click("#tools-open").await?;
    b.wait_js(
        "the Tools menu open and read",
        "return document.querySelector('#tools-menu').open
             && / of \\d+ on$/.test(document.querySelector('#tools-count').textContent);",
        WAIT,
    )
    .await?;
    Ok(())
}

async fn close_menu(b: &Browser) -> anyhow::Result<()> {
    b.click("#tools-menu .sheet-head button").await?;
    b.wait_hidden("#tools-menu", WAIT).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tools_menu_switches_a_chats_groups_and_connectors() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start_with_front(&sim.url(), &[], None).await?;
    let client = chatd.client();
    let glossary = connector(&client, "Glossary").await?;
    connector(&client, "Notes").await?;
    // A saved agent: the opt-in saved agents can serve the chat.
    let agent = client
        .post(
            "/agents",
            json!({"name": "Reviewer", "instructions": "Review."}),
        )
        .await?;
    ensure!(agent.status == 201, "{agent:?}");
    let driver = Chromedriver::start().await?;
    let chat = client.create_chat().await?;
    let b = Browser::open_chat(
        &driver,
        DESKTOP,
        &chatd.front_url(),
        Some(&chat),
        "#tools-open",
    )
    .await?;

    // chatd's rows in its order, under the two headings; a row that cannot
    // serve the chat off and disabled, its reason shown.
    open_menu(&b).await?;
    let view = view_of(&client, &chat).await?;
    let at_first = count_text(&view);
    count_reads(&b, &at_first).await?;
    let groups = view["groups"].as_array().context("groups")?;
    let names: Vec<String> = groups
        .iter()
        .map(|g| g["name"].as_str().unwrap_or("").to_string())
        .collect();
    ensure!(groups.len() == 9, "7 groups and 2 connectors: {names:?}");
    let shown = rows(&b).await?;
    ensure!(
        shown.iter().map(|r| r.0.clone()).collect::<Vec<_>>() == names,
        "{shown:?}"
    );
    for (g, (name, checked, disabled)) in groups.iter().zip(&shown) {
        let usable = g["usable"] == true;
        ensure!(*disabled != usable, "{name}: disabled {disabled}, {g}");
        ensure!(
            *checked == (usable && g["on"] == true),
            "{name}: checked {checked}, {g}"
        );
        if !usable {
            let reason = g["reason"].as_str().unwrap_or("");
            let row = b
                .text(&format!("#tools-rows li:has(input[data-name='{name}'])"))
                .await?;
            ensure!(row.contains(reason), "{name} says {row:?}, not {reason:?}");
        }
    }
    let headings = b
        .eval("return [...document.querySelectorAll('#tools-rows h3')].map((h) => h.textContent);")
        .await?;
    ensure!(
        headings == json!(["Built-in tools", "Your connectors"]),
        "{headings}"
    );
    let connectors = b
        .eval(
            "return [...document.querySelectorAll('#tools-rows section:last-of-type input')]
                 .map((i) => i.closest('label').querySelector('strong').textContent);",
        )
        .await?;
    ensure!(connectors == json!(["Glossary", "Notes"]), "{connectors}");
    let web = group(&view, "web")?;
    ensure!(
        web["usable"] == true && web["on"] == true,
        "web serves: {web}"
    );
    ensure!(
        group(&view, "saved_agents")?["usable"] == true,
        "saved agents can serve: {view}"
    );

    // Web switched off by its name: one PUT, stored as the chat's off.
    b.click("#tools-rows li:has(input[data-name='web']) strong")
        .await?;
    let after = view_of(&client, &chat).await?;
    count_reads(&b, &count_text(&after)).await?;
    ensure!(off_of(&client, &chat).await? == ["web"], "stored off");
    let checked = b
        .eval_with(
            "return document.querySelector(arguments[0]).checked;",
            vec![json!(switch_of("web"))],
        )
        .await?;
    ensure!(checked == false, "the switch shows off");

    // axe finds nothing serious in the menu.
    if let Some(axe) = npm::file("axe-core", "axe.min.js") {
        let found = axe_in(&b, &axe, "#tools-menu").await?;
        ensure!(found == json!([]), "axe in the Tools menu: {found}");
    }

    // Saved agents switched on, then Disable all: every usable row off;
    // Select all: every row on but the opt-in saved agents.
    b.click(&switch_of("saved_agents")).await?;
    let agents_on = view_of(&client, &chat).await?;
    count_reads(&b, &count_text(&agents_on)).await?;
    ensure!(saved_agents_on(&client, &chat).await?, "saved agents on");
    b.click("#tools-none").await?;
    b.wait_text("#tools-count", |t| t.starts_with("0 of "), WAIT)
        .await?;
    let none = off_of(&client, &chat).await?;
    for g in groups {
        let name = g["name"].as_str().unwrap_or("");
        if g["usable"] == true && g["opt_in"] == false {
            ensure!(none.contains(&name.to_string()), "{name} off: {none:?}");
        }
    }
    ensure!(!saved_agents_on(&client, &chat).await?, "saved agents off");
    b.click("#tools-all").await?;
    count_reads(&b, &at_first).await?;
    ensure!(off_of(&client, &chat).await?.is_empty(), "none off");
    ensure!(
        !saved_agents_on(&client, &chat).await?,
        "Select all leaves saved agents off"
    );

    // 9 rows: the search; its buttons change the shown ones only.
    ensure!(b.visible("#tools-q").await?, "a search from 9 rows");
    b.type_into("#tools-q", "web").await?;
    b.wait_js(
        "only Web shown",
        "const r = [...document.querySelectorAll('#tools-rows input')].map((i) => i.dataset.name);
         return r.length === 1 && r[0] === 'web';",
        WAIT,
    )
    .await?;
    ensure!(b.text("#tools-none").await? == "Disable shown");
    ensure!(b.text("#tools-all").await? == "Select shown");
    b.click("#tools-none").await?;
    b.wait_js(
        "Web shown off",
        "return document.querySelector(\"#tools-rows input[data-name='web']\").checked === false;",
        WAIT,
    )
    .await?;
    ensure!(
        off_of(&client, &chat).await? == ["web"],
        "the shown one only"
    );
    b.click("#tools-all").await?;
    count_reads(&b, &at_first).await?;
    ensure!(off_of(&client, &chat).await?.is_empty());
    close_menu(&b).await?;

    // The Glossary off, then removed meanwhile: switching Web off sends a
    // list naming it, which chatd refuses; said under the list, and the
    // menu shows what chatd holds (Web on, the Glossary gone).
    open_menu(&b).await?;
    b.click(&switch_of(&format!("mcp:{glossary}"))).await?;
    b.wait_js(
        "the Glossary shown off",
        &format!(
            "const i = document.querySelector(\"#tools-rows input[data-name='mcp:{glossary}']\");
             return i && i.checked === false;"
        ),
        WAIT,
    )
    .await?;
    ensure!(
        off_of(&client, &chat).await? == [format!("mcp:{glossary}")],
        "the Glossary stored off"
    );
    let gone = client
        .call(
            reqwest::Method::DELETE,
            &format!("/mcp-connectors/{glossary}"),
            None,
        )
        .await?;
    ensure!(gone.status == 204, "{gone:?}");
    b.click(&switch_of("web")).await?;
    let said = b.wait_text("#tools-error", |t| !t.is_empty(), WAIT).await?;
    ensure!(said.contains("not a saved MCP connector"), "{said}");
    b.wait_js(
        "the Glossary's row gone",
        &format!(
            "return !document.querySelector(\"#tools-rows input[data-name='mcp:{glossary}']\");"
        ),
        WAIT,
    )
    .await?;
    let back = rows(&b).await?;
    ensure!(
        back.iter().any(|r| r.0 == "web" && r.1),
        "Web put back on: {back:?}"
    );
    ensure!(
        !off_of(&client, &chat).await?.contains(&"web".to_string()),
        "nothing stored"
    );
    count_reads(&b, &count_text(&view_of(&client, &chat).await?)).await?;
    b.close().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_chat_is_made_with_the_tools_switched_before_it() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start_with_front(&sim.url(), &[], None).await?;
    let client = chatd.client();
    let notes = connector(&client, "Notes").await?;
    let driver = Chromedriver::start().await?;
    let b = Browser::open_chat(&driver, DESKTOP, &chatd.front_url(), None, "#tools-open").await?;

    // The start screen's menu reads chatd's defaults for a chat not made yet.
    open_menu(&b).await?;
    let draft = client.get("/draft/tools").await?;
    ensure!(draft.status == 200, "{draft:?}");
    count_reads(&b, &count_text(&draft.body)).await?;
    ensure!(
        b.text("#tools-menu-title").await? == "Tools of the new chat",
        "the draft's title"
    );

    // Web and the connector off: kept in the page, no chat made.
    b.click(&switch_of("web")).await?;
    b.click(&switch_of(&format!("mcp:{notes}"))).await?;
    b.wait_js(
        "Web and Notes shown off",
        &format!(
            "return ['web', 'mcp:{notes}'].every((n) =>
                 document.querySelector(`#tools-rows input[data-name='${{n}}']`).checked === false);"
        ),
        WAIT,
    )
    .await?;
    let listed = client.get("/conversations").await?;
    ensure!(
        listed.body["conversations"].as_array().map(Vec::len) == Some(0),
        "no chat made yet: {listed:?}"
    );
    close_menu(&b).await?;

    // The first message makes the chat with them.
    b.type_into("#composer", "Hello").await?;
    b.click("#send").await?;
    let chat = b
        .wait_js(
            "the new chat in the address",
            "return location.hash.startsWith('#/c/') ? decodeURIComponent(location.hash.slice(4)) : '';",
            WAIT,
        )
        .await?;
    let chat = chat.as_str().context("chat id")?.to_string();
    let mut want = vec![format!("mcp:{notes}"), "web".to_string()];
    want.sort();
    ensure!(off_of(&client, &chat).await? == want, "made with them off");

    // Its menu shows them, and the next new chat starts from the defaults.
    b.wait_visible("#chat-tools", WAIT).await?;
    open_menu(&b).await?;
    b.wait_js(
        "Web shown off in the chat",
        "return document.querySelector(\"#tools-rows input[data-name='web']\").checked === false;",
        WAIT,
    )
    .await?;
    ensure!(b.text("#tools-menu-title").await? == "Tools in this chat");
    close_menu(&b).await?;
    b.eval("location.hash = '#/'; return true;").await?;
    b.wait_visible("#empty-chat", WAIT).await?;
    open_menu(&b).await?;
    count_reads(&b, &count_text(&draft.body)).await?;
    b.close().await?;
    Ok(())
}
