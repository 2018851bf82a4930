//! The page's `/` menu (composer.js; docs/api.md "Slash commands") in
//! headless Chromium against the real chatd with its front and the engine
//! simulator: a `/` at the start of the composer lists chatd's commands,
//! typing filters them, Enter runs one without argument (`/help`: its text
//! under the composer, no message stored), Tab completes `/model ` and the
//! menu then offers the engine's models, Esc closes it; `/new` opens a new
//! chat. Every wait is a bounded poll.

use std::time::Duration;

use anyhow::ensure;
use tandem_tests::browser::{self, Browser, Chromedriver, DESKTOP, ENTER};
use tandem_tests::harness::{Chatd, Sim};

const BOUND: Duration = Duration::from_secs(60);

const READY: &str = "#settings-open";

/// WebDriver's Tab and Escape keys.
const TAB: &str = "\u{E004}";
const ESCAPE: &str = "\u{E00C}";

/// The menu's items' texts, in order (none while it is closed).
const ITEMS: &str = "const m = document.querySelector('#command-menu');
    return m.hidden ? [] : [...m.querySelectorAll('[role=option]')].map((o) => o.textContent);";

/// What the composer holds.
async fn composer_text(b: &Browser) -> anyhow::Result<String> {
    let v = b
        .eval("return document.querySelector('#composer').value;")
        .await?;
    Ok(v.as_str().unwrap_or("").to_string())
}

/// The menu's items as the page shows them.
async fn items(b: &Browser) -> anyhow::Result<Vec<String>> {
    let v = b.eval(ITEMS).await?;
    Ok(v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_menu_lists_filters_runs_completes_and_new_opens_a_chat() -> anyhow::Result<()>
{
    if !browser::available() {
        return Ok(());
    }
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start_with_front(&sim.url(), &[], None).await?;
    let client = chatd.client();
    let driver = Chromedriver::start().await?;
    let chat = client.create_chat().await?;
    // The engine's models as chatd offers them for `/model` (it learns them from the engine).
    let listed = client
        .get(&format!("/commands?conversation_id={chat}"))
        .await?;
    let models: Vec<String> = listed.body["commands"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "model"))
        .and_then(|c| c["choices"].as_array())
        .map(|c| {
            c.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    ensure!(models.iter().any(|m| m.starts_with("sim-")), "{models:?}");
    let b = Browser::open_chat(&driver, DESKTOP, &chatd.front_url(), Some(&chat), READY).await?;
    ensure!(!b.visible("#command-menu").await?, "no menu before a /");

    // `/`: the commands, the composer says the list is open and which item is picked.
    b.type_into("#composer", "/").await?;
    b.wait_js(
        "the menu with /help and /goal",
        &format!(
            "const l = (() => {{ {ITEMS} }})();
         return l.some((t) => t.startsWith('/help')) && l.some((t) => t.startsWith('/goal'));"
        ),
        BOUND,
    )
    .await?;
    let aria = b
        .eval("const c = document.querySelector('#composer'); const m = document.querySelector('#command-menu');
               return [c.getAttribute('aria-expanded'), c.getAttribute('aria-activedescendant'), m.getAttribute('role'),
                       document.getElementById(c.getAttribute('aria-activedescendant')).getAttribute('aria-selected')];")
        .await?;
    ensure!(
        aria == serde_json::json!(["true", "command-0", "listbox", "true"]),
        "{aria:?}"
    );
    let shown = items(&b).await?;
    ensure!(
        shown.iter().any(|t| t.starts_with("/help — ")),
        "/name usage — about: {shown:?}"
    );

    // `he`: only /help; ArrowDown stays on it; Enter runs it.
    b.type_into("#composer", "he").await?;
    b.wait_js(
        "only /help",
        &format!(
            "const l = (() => {{ {ITEMS} }})(); return l.length === 1 && l[0].startsWith('/help');"
        ),
        BOUND,
    )
    .await?;
    b.type_into("#composer", ENTER).await?;
    let help = b
        .wait_text(
            "#command-note .command-text",
            |t| t.contains("/loop"),
            BOUND,
        )
        .await?;
    ensure!(
        help.starts_with("Commands:\n/help"),
        "its lines kept: {help:?}"
    );
    ensure!(
        composer_text(&b).await?.is_empty(),
        "the box is empty again"
    );
    ensure!(!b.visible("#command-menu").await?, "the menu closed");
    let stored = client.snapshot(&chat).await?;
    ensure!(
        stored["messages"].as_array().is_none_or(Vec::is_empty),
        "the command stored no message: {:?}",
        stored["messages"]
    );

    // `/mo` Tab: `/model `, and the menu offers the engine's models.
    b.type_into("#composer", "/mo").await?;
    b.wait_js(
        "only /model",
        &format!("const l = (() => {{ {ITEMS} }})(); return l.length === 1 && l[0].startsWith('/model [name]');"),
        BOUND,
    )
    .await?;
    b.type_into("#composer", TAB).await?;
    b.wait_js(
        "the models as choices",
        &format!("const l = (() => {{ {ITEMS} }})();
         return document.querySelector('#composer').value === '/model ' && l.length > 0 && l.every((t) => !t.startsWith('/'));"),
        BOUND,
    )
    .await?;
    let choices = items(&b).await?;
    ensure!(choices == models, "{choices:?} vs {models:?}");
    ensure!(composer_text(&b).await? == "/model ", "completed");

    // Esc closes the menu (the words stay).
    b.type_into("#composer", ESCAPE).await?;
    b.wait_hidden("#command-menu", BOUND).await?;
    let expanded = b
        .eval("return document.querySelector('#composer').getAttribute('aria-expanded');")
        .await?;
    ensure!(expanded == "false", "{expanded:?}");
    ensure!(composer_text(&b).await? == "/model ", "the words stay");
    b.eval("const box = document.querySelector('#composer'); box.value = ''; box.dispatchEvent(new Event('input')); return true;")
        .await?;

    // `/new`: a new chat, opened.
    b.type_into("#composer", &format!("/new{ENTER}")).await?;
    let hash = b
        .wait_js(
            "another chat's hash",
            &format!("const h = location.hash; return h.startsWith('#/c/') && !h.includes('{chat}') ? h : null;"),
            BOUND,
        )
        .await?;
    let opened = hash
        .as_str()
        .unwrap_or("")
        .trim_start_matches("#/c/")
        .to_string();
    let made = client.snapshot(&opened).await?;
    ensure!(made["conversation"]["id"] == opened.as_str(), "{made:?}");
    b.close().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skill_is_a_command_of_its_own_and_its_message_shows_its_chip() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start_with_front(&sim.url(), &[], None).await?;
    let client = chatd.client();
    let made = client
        .post(
            "/skills",
            serde_json::json!({"name": "review", "description": "Check a change before it ships", "body": "Read the diff."}),
        )
        .await?;
    ensure!(made.status == 201, "{made:?}");
    let driver = Chromedriver::start().await?;
    let chat = client.create_chat().await?;
    let b = Browser::open_chat(&driver, DESKTOP, &chatd.front_url(), Some(&chat), READY).await?;

    // `/rev`: the skill, after the registry's commands; Tab completes it.
    b.type_into("#composer", "/rev").await?;
    b.wait_js(
        "only /review",
        &format!("const l = (() => {{ {ITEMS} }})(); return l.length === 1 && l[0].startsWith('/review [words]');"),
        BOUND,
    )
    .await?;
    let shown = items(&b).await?;
    ensure!(
        shown[0].contains("Check a change before it ships · skill"),
        "{shown:?}"
    );
    b.type_into("#composer", TAB).await?;
    ensure!(composer_text(&b).await? == "/review ", "completed");
    b.type_into("#composer", &format!("check the diff{ENTER}"))
        .await?;

    // The message keeps the words, with the skill's chip; the model got the procedure.
    b.wait_text(".skill-chip", |t| t == "Skill review", BOUND)
        .await?;
    let stored = client.snapshot(&chat).await?;
    let first = &stored["messages"][0];
    ensure!(first["text"] == "check the diff", "{first}");
    ensure!(first["invoked"]["name"] == "review", "{first}");
    let requests = sim.requests().await?;
    ensure!(
        requests
            .iter()
            .any(|r| r["body"].to_string().contains("Read the diff.")),
        "the procedure reached the model"
    );
    b.close().await?;
    Ok(())
}
