//! The page's MCP servers panel in headless Chromium against the real chatd
//! (loopback servers allowed) and the fake MCP server of
//! `tandem_tests::mcpservers`, which wants a token: a bad address is
//! refused under its field and stores nothing; a server added with its
//! token is saved off, tested (Connected, its five tools with their
//! descriptions), turned on from the row (then Connected); the token is gone from the form
//! and never in the page; Remove asks first. At 390 px the panel is a
//! sheet along the bottom. Every wait is a bounded poll.

use anyhow::ensure;
use serde_json::json;
use tandem_tests::browser::{self, Browser, Chromedriver, Viewport, DESKTOP, PHONE, WAIT};
use tandem_tests::harness::{wait_until, Chatd, Sim};
use tandem_tests::mcpservers::{Everything, FakeMcp};

use crate::settings::{fill, open_drawer};

const TOKEN: &str = "page-mcp-token-77d0";

async fn open_panel(b: &Browser, viewport: Viewport) -> anyhow::Result<()> {
    if viewport.width < 700 {
        // On a phone the sidebar is a drawer behind the menu button.
        open_drawer(b).await?;
    }
    b.click("#mcp-open").await?;
    b.wait_js(
        "the MCP panel open",
        "return document.querySelector('#mcp-panel').open
             && document.querySelector('#mcp-status').textContent !== 'Loading…';",
        WAIT,
    )
    .await?;
    Ok(())
}

/// engine-sim answering at once, and chatd with its front beside it,
/// loopback MCP servers allowed.
pub(crate) async fn front_for_mcp() -> anyhow::Result<(Sim, Chatd)> {
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd =
        Chatd::start_with_front(&sim.url(), &[("QSE_CHAT_MCP_ALLOW_PRIVATE", "true")], None)
            .await?;
    Ok((sim, chatd))
}

/// The fake (no token) saved as "Glossary" in a chatd with its front, and
/// a chat.
async fn glossary_chat() -> anyhow::Result<(FakeMcp, Sim, Chatd, String)> {
    let fake = FakeMcp::start(None).await?;
    let (sim, chatd) = front_for_mcp().await?;
    saved(&chatd, "Glossary", &fake.url("/mcp")).await?;
    let chat = chatd.client().create_chat().await?;
    Ok((fake, sim, chatd, chat))
}

/// An HTTP connector `name` at `url` saved in `chatd`; its id.
async fn saved(chatd: &Chatd, name: &str, url: &str) -> anyhow::Result<String> {
    let made = chatd
        .client()
        .post(
            "/mcp-connectors",
            json!({"name": name, "transport": "http", "url": url}),
        )
        .await?;
    ensure!(made.status == 201, "{made:?}");
    Ok(made.body["id"].as_str().unwrap_or("").to_string())
}

async fn add_test_turn_on_and_remove(
    driver: &Chromedriver,
    chatd: &Chatd,
    fake: &FakeMcp,
    viewport: Viewport,
    name: &str,
) -> anyhow::Result<()> {
    let b = Browser::open_chat(driver, viewport, &chatd.front_url(), None, "#mcp-open").await?;
    open_panel(&b, viewport).await?;
    if viewport.width < 700 {
        let rect = b
            .eval(
                "const r = document.querySelector('#mcp-panel').getBoundingClientRect();
                 return {left: r.left, right: r.right, bottom: r.bottom, vw: innerWidth, vh: innerHeight};",
            )
            .await?;
        let at = |k: &str| rect[k].as_f64().unwrap_or(-1.0);
        ensure!(
            at("left").abs() < 1.0 && (at("right") - at("vw")).abs() < 1.0,
            "a sheet the phone's width: {rect}"
        );
    }

    // A bad address: the words under its field, nothing stored.
    fill(&b, "#mcp-name", name).await?;
    fill(&b, "#mcp-url", "ftp://mcp.example.com/").await?;
    b.click("#mcp-save").await?;
    let said = b
        .wait_text("#mcp-url-error", |t| t.contains("http://"), WAIT)
        .await?;
    ensure!(said.starts_with("url:"), "{said}");
    ensure!(b.count("#mcp-list .mcp-row").await? == 0, "nothing stored");

    fill(&b, "#mcp-url", &fake.url("/mcp")).await?;
    fill(&b, "#mcp-token", TOKEN).await?;
    b.click("#mcp-save").await?;
    b.wait_text("#mcp-status", |t| t.starts_with("Connected: 5 tools"), WAIT)
        .await?;
    let row = b.text("#mcp-list .mcp-row").await?;
    ensure!(
        // Saved off until it is turned on.
        row.contains(name) && row.contains("127.0.0.1") && row.contains("Off"),
        "{row}"
    );
    ensure!(
        row.contains("Saved: token") && row.contains("5 tools"),
        "{row}"
    );
    let token_left = b
        .eval("return document.querySelector('#mcp-token').value;")
        .await?;
    ensure!(
        token_left == json!(""),
        "the token left the form: {token_left}"
    );
    let html = b.eval("return document.documentElement.outerHTML;").await?;
    ensure!(
        !html.to_string().contains(TOKEN),
        "the token is in the page"
    );

    b.click("#mcp-turn-on").await?;
    b.wait_js(
        "the switch on",
        "const s = document.querySelector('#mcp-list input[role=switch]'); return s && s.checked;",
        WAIT,
    )
    .await?;
    b.wait_text(".mcp-row .mcp-state", |t| t == "Connected", WAIT)
        .await?;
    b.click("#mcp-list .mcp-tools summary").await?;
    b.wait_text(
        "#mcp-list .mcp-tools",
        |t| t.contains("Looks a word up"),
        WAIT,
    )
    .await?;

    b.click("#mcp-list .mcp-actions .danger").await?;
    b.wait_visible("#mcp-remove-yes", WAIT).await?;
    b.click("#mcp-remove-yes").await?;
    b.wait_count("#mcp-list .mcp-row", |n| n == 0, WAIT).await?;
    b.close().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_is_added_tested_turned_on_and_removed_from_the_page() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let fake = FakeMcp::start(Some(TOKEN)).await?;
    let (_sim, chatd) = front_for_mcp().await?;
    let driver = Chromedriver::start().await?;
    add_test_turn_on_and_remove(&driver, &chatd, &fake, DESKTOP, "Glossary").await?;
    add_test_turn_on_and_remove(&driver, &chatd, &fake, PHONE, "Glossary on a phone").await?;
    let listed = chatd.client().get("/mcp-connectors").await?;
    ensure!(listed.body["connectors"] == json!([]), "{}", listed.body);
    ensure!(!chatd.log().contains(TOKEN), "the token in chatd's log");
    Ok(())
}

/// A chat's settings panel holds a switch per MCP server: unticked and
/// saved, the chat's tools say it is off there, and the engine's next
/// request from that chat no longer offers its tools; the defaults' panel
/// has no such switches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_switches_a_server_off_in_its_settings() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let (_fake, sim, chatd, chat) = glossary_chat().await?;
    let client = chatd.client();
    let driver = Chromedriver::start().await?;
    let b = Browser::open_chat(
        &driver,
        DESKTOP,
        &chatd.front_url(),
        Some(&chat),
        "#settings-open",
    )
    .await?;
    b.click("#settings-open").await?;
    b.wait_visible("#set-mcp", WAIT).await?;
    let row = b.text("#set-mcp-rows").await?;
    ensure!(row.contains("Glossary"), "{row}");
    b.click("#set-mcp-rows input[data-connector]").await?;
    b.click("#settings-save").await?;
    b.wait_js(
        "the panel closed",
        "return !document.querySelector('#settings-panel').open;",
        WAIT,
    )
    .await?;
    let view = client.get(&format!("/conversations/{chat}/tools")).await?;
    ensure!(view.body["mcp"][0]["on"] == json!(false), "{}", view.body);
    let sent = client.send(&chat, "hello [sim tokens=2]").await?;
    let run = sent["run_id"].as_str().unwrap_or("").to_string();
    client
        .wait_run(&chat, &run, &["done"], std::time::Duration::from_secs(60))
        .await?;
    let requests = sim.requests().await?;
    let last = requests.last().map(|r| r["body"]["tools"].to_string());
    ensure!(
        last.as_deref().is_some_and(|t| !t.contains("lookup")),
        "{last:?}"
    );

    // The defaults' panel: no server switches.
    b.close().await?;
    let b =
        Browser::open_chat(&driver, DESKTOP, &chatd.front_url(), None, "#defaults-open").await?;
    b.click("#defaults-open").await?;
    b.wait_visible("#settings-save", WAIT).await?;
    let hidden = b
        .eval("return document.querySelector('#set-mcp').hidden;")
        .await?;
    ensure!(hidden == json!(true), "no switches for the defaults");
    b.close().await
}

/// A command server from the page: the kind picked shows the command's
/// fields; a command with spaces is refused under its field; saved, its row
/// shows the command line and that an environment is saved, never its
/// value; on a box with no container runtime its test says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_server_is_added_from_the_page() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    const VALUE: &str = "page-env-value-41c2";
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start_with_front(&sim.url(), &[], None).await?;
    let driver = Chromedriver::start().await?;
    let b = Browser::open_chat(&driver, DESKTOP, &chatd.front_url(), None, "#mcp-open").await?;
    open_panel(&b, DESKTOP).await?;
    ensure!(
        b.eval("return document.querySelector('[data-field=command]').hidden;")
            .await?
            == json!(true),
        "an address's fields first"
    );
    b.eval(
        "const s = document.querySelector('#mcp-transport'); s.value = 'stdio';
         s.dispatchEvent(new Event('change')); return true;",
    )
    .await?;
    b.wait_visible("#mcp-command", WAIT).await?;
    ensure!(
        b.eval("return document.querySelector('[data-field=url]').hidden;")
            .await?
            == json!(true),
        "the address hidden for a command"
    );
    fill(&b, "#mcp-name", "Everything").await?;
    fill(&b, "#mcp-command", "npx -y pkg").await?;
    b.click("#mcp-save").await?;
    b.wait_text("#mcp-command-error", |t| t.contains("args"), WAIT)
        .await?;
    ensure!(b.count("#mcp-list .mcp-row").await? == 0, "nothing stored");

    fill(&b, "#mcp-command", "npx").await?;
    fill(
        &b,
        "#mcp-args",
        "-y\n@modelcontextprotocol/server-everything",
    )
    .await?;
    fill(&b, "#mcp-env", &format!("API_KEY={VALUE}")).await?;
    b.click("#mcp-save").await?;
    b.wait_text(
        "#mcp-status",
        |t| t.starts_with("Not connected") && t.contains("no container runtime"),
        WAIT,
    )
    .await?;
    let row = b.text("#mcp-list .mcp-row").await?;
    ensure!(
        row.contains("npx -y @modelcontextprotocol/server-everything")
            && row.contains("Saved: environment"),
        "{row}"
    );
    let html = b.eval("return document.documentElement.outerHTML;").await?;
    ensure!(
        !html.to_string().contains(VALUE),
        "the value is in the page"
    );
    b.close().await?;
    ensure!(!chatd.log().contains(VALUE), "the value in chatd's log");
    Ok(())
}

/// From the composer's Context list: a prompt with its argument asked for,
/// and a resource, picked as chips and sent with the message, go in front
/// of its text; the message shows what was typed, the context folded under
/// "Context: …"; the chips are gone once it is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_and_a_resource_go_in_front_of_a_message_from_the_page() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let (_fake, _sim, chatd, chat) = glossary_chat().await?;
    let client = chatd.client();
    let driver = Chromedriver::start().await?;
    let b = Browser::open_chat(
        &driver,
        DESKTOP,
        &chatd.front_url(),
        Some(&chat),
        "#context-add",
    )
    .await?;
    let closed = "return !document.querySelector('#context-panel').open;";

    b.click("#context-add").await?;
    b.click("#context-list [data-prompt='brief']").await?;
    b.wait_visible("#context-args input[data-arg='topic']", WAIT)
        .await?;
    // Required: refused in words until it is given.
    b.click("#context-args button[type=submit]").await?;
    b.wait_visible("#context-error", WAIT).await?;
    fill(&b, "#context-args input[data-arg='topic']", "bikes").await?;
    b.click("#context-args button[type=submit]").await?;
    b.wait_js("the list closed", closed, WAIT).await?;
    b.click("#context-add").await?;
    b.click("#context-list [data-uri='fake://glossary']")
        .await?;
    b.wait_js("the list closed", closed, WAIT).await?;
    b.wait_count("#context-chips .context-chip", |n| n == 2, WAIT)
        .await?;
    let chips = b.text("#context-chips").await?;
    ensure!(chips.contains("Glossary · brief (topic: bikes)"), "{chips}");

    fill(&b, "#composer", "Go ahead").await?;
    b.click("#send").await?;
    b.wait_text(
        ".message[data-role='user'] .body",
        |t| t == "Go ahead",
        WAIT,
    )
    .await?;
    let fold = b
        .text_content(".message[data-role='user'] .context-fold summary")
        .await?;
    ensure!(
        fold.contains("Glossary · brief") && fold.contains("fake://glossary"),
        "{fold}"
    );
    b.wait_hidden("#context-chips", WAIT).await?;
    let snapshot = client.snapshot(&chat).await?;
    let stored = snapshot["messages"][0]["text"]
        .as_str()
        .unwrap_or("")
        .to_string();
    ensure!(
        stored
            .starts_with("[context from MCP connector Glossary: prompt \"brief\" (topic: bikes)]"),
        "{stored}"
    );
    ensure!(stored.ends_with("\n\nGo ahead"), "{stored}");
    b.close().await
}

/// server-everything's text template from the Context list: its variable
/// asked for and refused in words until given; the resource its URI names
/// a chip; the chip's Preview shows the resource's text, folded; sent, the
/// message's text is the resource's block then what was typed, and the
/// engine reads the block.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_is_filled_in_previewed_and_sent_from_the_page() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let Some(server) = Everything::http().await? else {
        return Ok(());
    };
    let (sim, chatd) = front_for_mcp().await?;
    saved(&chatd, "Everything", &server.url()).await?;
    let chat = chatd.client().create_chat().await?;
    let driver = Chromedriver::start().await?;
    let b = Browser::open_chat(
        &driver,
        DESKTOP,
        &chatd.front_url(),
        Some(&chat),
        "#context-add",
    )
    .await?;
    const URI: &str = "demo://resource/dynamic/text/7";

    b.click("#context-add").await?;
    b.click("#context-list [data-template='demo://resource/dynamic/text/{resourceId}']")
        .await?;
    let variable = "#context-args input[data-arg='resourceId']";
    b.wait_visible(variable, WAIT).await?;
    // Every variable is required: refused in words until it is given.
    b.click("#context-args button[type=submit]").await?;
    b.wait_text("#context-error", |t| t == "resourceId is required.", WAIT)
        .await?;
    ensure!(
        b.count("#context-chips .context-chip").await? == 0,
        "nothing picked"
    );
    fill(&b, variable, "7").await?;
    b.click("#context-args button[type=submit]").await?;
    b.wait_js(
        "the list closed",
        "return !document.querySelector('#context-panel').open;",
        WAIT,
    )
    .await?;
    let chip = b.text("#context-chips .context-chip").await?;
    ensure!(chip.contains(&format!("Everything · {URI}")), "{chip}");

    b.click("#context-chips .context-preview-open").await?;
    let shown = b
        .wait_text(
            "#context-preview .context-preview pre",
            |t| t.starts_with("Resource 7: This is a plaintext resource"),
            WAIT,
        )
        .await?;
    let summary = b.text("#context-preview summary").await?;
    ensure!(
        summary.starts_with("What the model will read:")
            && summary.contains(&format!("{} characters", shown.chars().count())),
        "{summary}"
    );
    b.click("#context-close").await?;

    fill(&b, "#composer", "Summarise it").await?;
    b.click("#send").await?;
    b.wait_text(
        ".message[data-role='user'] .body",
        |t| t == "Summarise it",
        WAIT,
    )
    .await?;
    let fold = b
        .text_content(".message[data-role='user'] .context-fold summary")
        .await?;
    ensure!(fold.contains(&format!("Everything · {URI}")), "{fold}");
    let head = format!("[context from MCP connector Everything: resource {URI}]");
    let asked = wait_until("the engine asked with the block", WAIT, || async {
        let requests = sim.requests().await.ok()?;
        let body = requests.last()?["body"].to_string();
        body.contains(&head).then_some(body)
    })
    .await?;
    ensure!(
        asked.contains("Resource 7: This is a plaintext resource"),
        "the engine read the resource: {asked}"
    );
    let stored = chatd.client().snapshot(&chat).await?["messages"][0]["text"]
        .as_str()
        .unwrap_or("")
        .to_string();
    ensure!(
        stored.starts_with(&head) && stored.ends_with("\n\nSummarise it"),
        "{stored}"
    );
    b.close().await
}

/// A template's value is percent-encoded into its URI as RFC 6570 says
/// (the fake's `fake://word/{word}`); a preview the server refuses (no such
/// resource: 502) and one of a server switched off for the chat (403) are
/// said in chatd's words in the panel, the chat's banner stays down, and
/// the chip stays to be removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preview_that_fails_is_said_in_words() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let (_fake, _sim, chatd, chat) = glossary_chat().await?;
    let driver = Chromedriver::start().await?;
    let b = Browser::open_chat(
        &driver,
        DESKTOP,
        &chatd.front_url(),
        Some(&chat),
        "#context-add",
    )
    .await?;
    b.click("#context-add").await?;
    b.click("#context-list [data-template='fake://word/{word}']")
        .await?;
    fill(&b, "#context-args input[data-arg='word']", "two words/é*").await?;
    b.click("#context-args button[type=submit]").await?;
    let chip = b
        .wait_text("#context-chips .context-chip", |t| !t.is_empty(), WAIT)
        .await?;
    ensure!(
        chip.contains("Glossary · fake://word/two%20words%2F%C3%A9%2A"),
        "{chip}"
    );

    b.click("#context-chips .context-preview-open").await?;
    let said = b
        .wait_text("#context-error", |t| !t.is_empty(), WAIT)
        .await?;
    ensure!(
        said.contains("MCP connector Glossary") && said.contains("resource not found"),
        "{said}"
    );
    ensure!(!b.visible("#banner-stopped").await?, "the banner is up");
    ensure!(
        b.count("#context-preview .context-preview").await? == 0,
        "no preview block"
    );

    // Switched off for the chat: 403, in words.
    let tools = chatd
        .client()
        .get(&format!("/conversations/{chat}/tools"))
        .await?;
    let id = tools.body["mcp"][0]["id"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let off = chatd
        .client()
        .call(
            reqwest::Method::PUT,
            &format!("/conversations/{chat}/mcp"),
            Some(json!({"off": [id]})),
        )
        .await?;
    ensure!(off.status == 200, "{off:?}");
    b.click("#context-close").await?;
    b.click("#context-chips .context-preview-open").await?;
    b.wait_text(
        "#context-error",
        |t| t.contains("cannot be used in this chat"),
        WAIT,
    )
    .await?;
    ensure!(!b.visible("#banner-stopped").await?, "the banner is up");
    b.click("#context-close").await?;
    ensure!(
        b.count("#context-chips .context-chip").await? == 1,
        "the chip stays"
    );
    b.close().await
}
