//! The page's skills (skills.js; docs/api.md "Skills") in headless Chromium
//! against the real chatd with its front and the engine simulator. The
//! chat's Skills menu: a switch a skill with where it comes from, "N of M
//! on", one switch off stored as the chat's `off`, Disable all and Select
//! all, from 9 skills a search whose buttons change the shown ones only, a
//! refusal shown under the list with the switches put back to what chatd
//! holds. The Skills panel: the layers with a shadowed skill marked "behind"
//! the one in front, a folder that is no skill with why, a skill made
//! through the form (a bad name refused first, under the name), edited and
//! deleted (asked first). axe finds nothing serious in either. Every wait is
//! a bounded poll.

use anyhow::{ensure, Context};
use serde_json::{json, Value};
use tandem_tests::browser::{self, Browser, Chromedriver, DESKTOP, WAIT};
use tandem_tests::harness::{Chatd, Client, Sim};
use tandem_tests::npm;

use crate::settings::fill;

/// The built-in skills chatd has (docs/api.md "Skills").
const BUILTIN: [&str; 5] = ["docx", "pdf", "pptx", "writing", "xlsx"];

/// Writes an owner's skill through the API.
async fn owner_skill(client: &Client, name: &str, description: &str) -> anyhow::Result<()> {
    let made = client
        .post(
            "/skills",
            json!({"name": name, "description": description, "body": format!("Do {name}.")}),
        )
        .await?;
    ensure!(made.status == 201, "{made:?}");
    Ok(())
}

/// The chat's switches as chatd holds them, sorted.
async fn off_of(client: &Client, chat: &str) -> anyhow::Result<Vec<String>> {
    let view = client
        .get(&format!("/skills?conversation_id={chat}"))
        .await?;
    ensure!(view.status == 200, "{view:?}");
    let mut off: Vec<String> = serde_json::from_value(view.body["off"].clone())?;
    off.sort();
    Ok(off)
}

/// Whether chatd says skill `id` serves the chat.
async fn serves(client: &Client, chat: &str, id: &str) -> anyhow::Result<bool> {
    let view = client
        .get(&format!("/skills?conversation_id={chat}"))
        .await?;
    let skill = view.body["skills"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["id"] == id))
        .with_context(|| format!("{id} in {}", view.body))?;
    Ok(skill["on"] == true)
}

async fn count_reads(b: &Browser, text: &str) -> anyhow::Result<()> {
    b.wait_text("#skills-count", |t| t == text, WAIT).await?;
    Ok(())
}

/// The names of the menu's rows, in order.
async fn rows(b: &Browser) -> anyhow::Result<Vec<String>> {
    let v = b
        .eval("return [...document.querySelectorAll('#skills-rows input')].map((i) => i.dataset.name);")
        .await?;
    Ok(serde_json::from_value(v)?)
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
    b.click("#skills-open").await?;
    b.wait_js(
        "the Skills menu open and read",
        "return document.querySelector('#skills-menu').open
             && / of \\d+ on$/.test(document.querySelector('#skills-count').textContent);",
        WAIT,
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_skills_menu_switches_a_chats_skills_one_all_and_the_shown_ones() -> anyhow::Result<()>
{
    if !browser::available() {
        return Ok(());
    }
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start_with_front(&sim.url(), &[], None).await?;
    let client = chatd.client();
    owner_skill(&client, "review", "Check a change before it ships").await?;
    owner_skill(&client, "release-notes", "Write the notes of a release").await?;
    owner_skill(&client, "triage", "Sort the new issues").await?;
    let driver = Chromedriver::start().await?;
    let chat = client.create_chat().await?;
    let b = Browser::open_chat(
        &driver,
        DESKTOP,
        &chatd.front_url(),
        Some(&chat),
        "#skills-open",
    )
    .await?;

    // Every skill on: a row each, by name, saying where it comes from.
    open_menu(&b).await?;
    count_reads(&b, "8 of 8 on").await?;
    let mut all: Vec<String> = BUILTIN.iter().map(|s| s.to_string()).collect();
    all.extend(["review", "release-notes", "triage"].map(String::from));
    all.sort();
    ensure!(rows(&b).await? == all, "{:?}", rows(&b).await?);
    ensure!(!b.visible("#skills-q").await?, "no search under 9 skills");
    let review = b.text("#skills-rows li:has(#skill-on-review)").await?;
    ensure!(
        review.contains("Check a change before it ships") && review.contains("Yours"),
        "{review}"
    );
    let pdf = b.text("#skills-rows li:has(#skill-on-pdf)").await?;
    ensure!(
        pdf.contains("Built-in") && pdf.contains("needs commands"),
        "{pdf}"
    );
    let tip = b
        .eval("return document.querySelector('#skills-rows li:has(#skill-on-review)').title;")
        .await?;
    ensure!(tip == "Check a change before it ships", "{tip}");

    // One switch off: chatd stores it, the count follows.
    b.click("#skill-on-review").await?;
    count_reads(&b, "7 of 8 on").await?;
    ensure!(off_of(&client, &chat).await? == ["review"], "stored off");
    ensure!(!serves(&client, &chat, "owner:review").await?);
    let checked = b
        .eval("return document.querySelector('#skill-on-review').checked;")
        .await?;
    ensure!(checked == false, "the switch shows off");

    // Disable all: every name off; Select all: none.
    b.click("#skills-none").await?;
    count_reads(&b, "0 of 8 on").await?;
    ensure!(off_of(&client, &chat).await? == all, "every name off");
    b.click("#skills-all").await?;
    count_reads(&b, "8 of 8 on").await?;
    ensure!(off_of(&client, &chat).await?.is_empty(), "none off");

    // axe finds nothing serious in the menu.
    if let Some(axe) = npm::file("axe-core", "axe.min.js") {
        let found = axe_in(&b, &axe, "#skills-menu").await?;
        ensure!(found == json!([]), "axe in the Skills menu: {found}");
    }

    // A 9th skill: the search; its buttons change the shown ones only.
    b.click("#skills-menu .sheet-head button").await?;
    b.wait_hidden("#skills-menu", WAIT).await?;
    owner_skill(&client, "zeta-notes", "Keep notes of a meeting").await?;
    open_menu(&b).await?;
    count_reads(&b, "9 of 9 on").await?;
    b.type_into("#skills-q", "review").await?;
    b.wait_js(
        "only review shown",
        "const r = [...document.querySelectorAll('#skills-rows input')].map((i) => i.dataset.name);
         return r.length === 1 && r[0] === 'review';",
        WAIT,
    )
    .await?;
    ensure!(b.text("#skills-none").await? == "Disable shown");
    ensure!(b.text("#skills-all").await? == "Select shown");
    b.click("#skills-none").await?;
    count_reads(&b, "8 of 9 on").await?;
    ensure!(
        off_of(&client, &chat).await? == ["review"],
        "the shown one only"
    );
    b.click("#skills-all").await?;
    count_reads(&b, "9 of 9 on").await?;
    ensure!(off_of(&client, &chat).await?.is_empty());

    // A skill deleted meanwhile: its switch is refused, said under the list,
    // and the menu shows what chatd holds.
    fill(&b, "#skills-q", "").await?;
    b.eval("document.querySelector('#skills-q').dispatchEvent(new Event('input')); return true;")
        .await?;
    b.wait_visible("#skill-on-triage", WAIT).await?;
    let gone = client
        .call(reqwest::Method::DELETE, "/skills/triage", None)
        .await?;
    ensure!(gone.status == 204, "{gone:?}");
    b.click("#skill-on-triage").await?;
    let said = b
        .wait_text("#skills-error", |t| !t.is_empty(), WAIT)
        .await?;
    ensure!(said.contains("names no skill"), "{said}");
    count_reads(&b, "8 of 8 on").await?;
    ensure!(
        !rows(&b).await?.contains(&"triage".to_string()),
        "its row went"
    );
    ensure!(off_of(&client, &chat).await?.is_empty(), "nothing stored");

    // "Manage skills" opens the panel.
    b.click("#skills-manage").await?;
    b.wait_visible("#skills-panel", WAIT).await?;
    ensure!(!b.visible("#skills-menu").await?, "the menu closed");
    b.close().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_skills_panel_lists_the_layers_and_makes_edits_and_deletes_yours() -> anyhow::Result<()>
{
    if !browser::available() {
        return Ok(());
    }
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start_with_front(&sim.url(), &[], None).await?;
    let client = chatd.client();
    // Yours in front of the built-in pdf; a folder with no front matter.
    owner_skill(&client, "pdf", "My own way with PDFs").await?;
    let owner_dir = chatd
        .data_dir()
        .parent()
        .context("the data folder is inside HOME")?
        .join(".tandemllm/skills");
    std::fs::create_dir_all(owner_dir.join("broken"))?;
    std::fs::write(owner_dir.join("broken/SKILL.md"), "just words\n")?;
    let driver = Chromedriver::start().await?;
    let chat = client.create_chat().await?;
    let b = Browser::open_chat(
        &driver,
        DESKTOP,
        &chatd.front_url(),
        Some(&chat),
        "#skills-open",
    )
    .await?;

    b.click("#skills-panel-open").await?;
    b.wait_visible("#skills-panel", WAIT).await?;
    b.wait_count("#sk-layers section[data-layer]", |n| n == 3, WAIT)
        .await?;
    let headings = b
        .eval("return [...document.querySelectorAll('#sk-layers h3')].map((h) => h.textContent);")
        .await?;
    ensure!(
        headings
            == json!([
                "Workspace",
                "Yours",
                "Built-in",
                "Folders that are no skill"
            ]),
        "{headings}"
    );
    let builtin_pdf = b.text("#sk-layers [data-id='builtin:pdf']").await?;
    ensure!(builtin_pdf.contains("behind owner:pdf"), "{builtin_pdf}");
    let problems = b.text(".skills-problems").await?;
    ensure!(
        problems.contains("Yours · broken") && problems.contains("no front matter"),
        "{problems}"
    );

    // A bad name: chatd's words under the name, nothing stored.
    b.click("#sk-new").await?;
    b.wait_visible("#sk-form", WAIT).await?;
    fill(&b, "#sk-name", "Bad Name").await?;
    fill(&b, "#sk-description", "Go through a list before a release").await?;
    fill(&b, "#sk-body", "1. Run the tests.\n2. Read the diff.").await?;
    b.click("#sk-save").await?;
    let said = b
        .wait_text("#sk-name-error", |t| !t.is_empty(), WAIT)
        .await?;
    ensure!(said.contains("a skill's name is 1 to 64"), "{said}");
    ensure!(client.get("/skills/Bad%20Name").await?.status == 404);

    // A good one: listed under Yours, its text stored as typed.
    fill(&b, "#sk-name", "checklist").await?;
    b.click("#sk-save").await?;
    let row = "#sk-layers [data-layer='owner'] [data-id='owner:checklist']";
    let shown = b.wait_text(row, |t| t.contains("checklist"), WAIT).await?;
    ensure!(
        shown.contains("Go through a list before a release"),
        "{shown}"
    );
    ensure!(!b.visible("#sk-form").await?, "the form closed");
    let stored = client.get("/skills/checklist").await?;
    ensure!(stored.status == 200, "{stored:?}");
    ensure!(
        stored.body["body"] == "1. Run the tests.\n2. Read the diff.",
        "{}",
        stored.body
    );
    ensure!(stored.body["layer"] == "owner", "{}", stored.body);

    // Edited: the new description and "needs commands".
    b.click(&format!("{row} button[aria-label='Edit checklist']"))
        .await?;
    b.wait_js(
        "the form filled with the skill",
        "return document.querySelector('#sk-body').value.startsWith('1. Run the tests.')
             && document.querySelector('#sk-name').disabled;",
        WAIT,
    )
    .await?;
    fill(&b, "#sk-description", "Check a release before it ships").await?;
    b.click("#sk-requires").await?;
    b.click("#sk-save").await?;
    b.wait_text(row, |t| t.contains("Check a release before it ships"), WAIT)
        .await?;
    ensure!(b.text(row).await?.contains("needs commands"));
    let changed = client.get("/skills/checklist").await?;
    ensure!(
        changed.body["description"] == "Check a release before it ships"
            && changed.body["requires"] == json!(["exec"])
            && changed.body["body"] == "1. Run the tests.\n2. Read the diff.",
        "{}",
        changed.body
    );

    // axe finds nothing serious in the panel.
    if let Some(axe) = npm::file("axe-core", "axe.min.js") {
        let found = axe_in(&b, &axe, "#skills-panel").await?;
        ensure!(found == json!([]), "axe in the Skills panel: {found}");
    }

    // Deleted, asked first: gone from the panel and from chatd.
    b.click(&format!("{row} button[aria-label='Delete checklist']"))
        .await?;
    b.wait_visible("#sk-delete-yes", WAIT).await?;
    ensure!(
        client.get("/skills/checklist").await?.status == 200,
        "nothing deleted before the yes"
    );
    b.click("#sk-delete-yes").await?;
    b.wait_count(row, |n| n == 0, WAIT).await?;
    b.wait_text("#sk-status", |t| t == "Deleted checklist.", WAIT)
        .await?;
    ensure!(client.get("/skills/checklist").await?.status == 404);
    b.close().await?;
    Ok(())
}
