//! The page's Agents panel in headless Chromium against the real chatd:
//! the templates shown while there is no agent; an agent with a folder made
//! through the form (a refusal first, under the folder's field), listed as
//! "read only"; its description edited without touching the folder, which
//! chatd keeps; "Chat with it" opens a chat of the agent, listed under
//! "Chats it ran"; the folder removed shows "Folder missing" and "Chat with
//! it" says so with a hint; a template added; the agent's export imported
//! with its warning; Delete asks first; axe finds nothing serious in the
//! panel. Every wait is a bounded poll.

use anyhow::{ensure, Context};
use serde_json::json;
use tandem_tests::browser::{self, Browser, Chromedriver, DESKTOP, WAIT};
use tandem_tests::harness::{Chatd, Sim};
use tandem_tests::npm;

use crate::settings::fill;

async fn open_panel(b: &Browser) -> anyhow::Result<()> {
    b.click("#agents-open").await?;
    b.wait_js(
        "the Agents panel open and read",
        "return document.querySelector('#agents-panel').open
             && document.querySelector('#ag-status').textContent !== 'Loading…';",
        WAIT,
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_are_made_edited_chatted_with_imported_and_deleted_from_the_page(
) -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start_with_front(&sim.url(), &[], None).await?;
    let client = chatd.client();
    let files = tempfile::tempdir()?;
    let notes = files.path().join("notes");
    std::fs::create_dir_all(&notes)?;
    let notes_path = notes.canonicalize()?.to_string_lossy().into_owned();
    let driver = Chromedriver::start().await?;
    let b = Browser::open_chat(&driver, DESKTOP, &chatd.front_url(), None, "#composer").await?;

    // No agent yet: the templates are there to start from.
    open_panel(&b).await?;
    b.wait_count("#ag-templates .ag-template", |n| n >= 4, WAIT)
        .await?;

    // A folder that is not absolute: chatd's words under the folder's field.
    fill(&b, "#ag-name", "Notes reader").await?;
    fill(&b, "#ag-description", "Reads my notes").await?;
    fill(&b, "#ag-folder", "notes/here").await?;
    b.click("#ag-save").await?;
    let said = b
        .wait_text("#ag-folder-error", |t| !t.is_empty(), WAIT)
        .await?;
    ensure!(said.contains("folder.path"), "{said}");
    ensure!(b.count("#ag-list .ag-row").await? == 0, "nothing stored");

    fill(&b, "#ag-folder", &notes_path).await?;
    b.click("#ag-save").await?;
    let row = b
        .wait_text("#ag-list .ag-row", |t| t.contains("Notes reader"), WAIT)
        .await?;
    ensure!(
        row.contains("read only") && row.contains(&notes_path) && row.contains("Reads my notes"),
        "{row}"
    );
    let listed = client.get("/agents").await?;
    let id = listed.body["agents"][0]["id"]
        .as_str()
        .context("the agent's id")?
        .to_string();
    let row_css = format!("#ag-list .ag-row[data-id='{id}']");

    // The description edited, the folder untouched: chatd keeps the folder.
    b.click(&format!("{row_css} .ag-edit")).await?;
    let kept = b
        .eval("return document.querySelector('#ag-folder').value;")
        .await?;
    ensure!(kept == json!(notes_path), "{kept}");
    fill(&b, "#ag-description", "Reads and sums up my notes").await?;
    b.click("#ag-save").await?;
    b.wait_text(&row_css, |t| t.contains("Reads and sums up my notes"), WAIT)
        .await?;
    let agent = client.get(&format!("/agents/{id}")).await?.body;
    ensure!(
        agent["folder"]["path"] == json!(notes_path)
            && agent["folder"]["mode"] == "read"
            && agent["description"] == "Reads and sums up my notes",
        "{agent}"
    );

    // Chat with it: a chat of the agent, opened.
    b.click(&format!("{row_css} .ag-chat")).await?;
    let hash = b
        .wait_js(
            "the agent's chat open",
            "return !document.querySelector('#agents-panel').open
                 && location.hash.startsWith('#/c/') ? location.hash : null;",
            WAIT,
        )
        .await?;
    let chat = hash
        .as_str()
        .and_then(|h| h.strip_prefix("#/c/"))
        .context("the chat's id")?
        .to_string();
    let snapshot = client.snapshot(&chat).await?;
    ensure!(
        snapshot["conversation"]["agent_id"] == json!(id) || snapshot["agent_id"] == json!(id),
        "{snapshot}"
    );

    // Listed under the chats it ran, once its row's list is opened.
    open_panel(&b).await?;
    b.click(&format!("{row_css} .ag-runs summary")).await?;
    b.wait_js(
        "the chat under the agent",
        &format!(
            "return document.querySelector(\"{row_css} a.ag-run[href='#/c/{chat}']\") || null;"
        ),
        WAIT,
    )
    .await?;

    // The folder gone: "Folder missing", and a chat with it is refused in words.
    std::fs::remove_dir_all(&notes)?;
    b.type_into("#agents-panel", "\u{e00c}").await?; // Escape
    b.wait_js(
        "the panel closed",
        "return !document.querySelector('#agents-panel').open;",
        WAIT,
    )
    .await?;
    open_panel(&b).await?;
    b.wait_text(
        &format!("{row_css} .ag-folder"),
        |t| t.starts_with("Folder missing"),
        WAIT,
    )
    .await?;
    b.click(&format!("{row_css} .ag-chat")).await?;
    b.wait_text(
        &format!("{row_css} .ag-error"),
        |t| t.contains("Edit the agent"),
        WAIT,
    )
    .await?;

    // axe (when the test box has it) finds nothing serious in the panel.
    if let Some(axe) = npm::file("axe-core", "axe.min.js") {
        b.eval(&format!("{axe}\nreturn typeof window.axe;")).await?;
        let found = b
            .eval(
                "return axe.run(document.querySelector('#agents-panel'), {resultTypes: ['violations']})
                     .then((r) => r.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical')
                     .map((v) => `${v.id}: ${v.help} [${v.nodes.map((n) => n.target.join(' ')).join(', ')}]`));",
            )
            .await?;
        ensure!(found == json!([]), "axe in the Agents panel: {found}");
    }

    // A template, added behind its button.
    b.click("#ag-templates-open").await?;
    b.wait_visible("#ag-templates [data-template='research']", WAIT)
        .await?;
    b.click("#ag-templates [data-template='research']").await?;
    b.wait_count("#ag-list .ag-row", |n| n == 2, WAIT).await?;

    // Export is a link the browser's session may follow; its file, imported,
    // names the folder it could not find.
    let href = b
        .eval_with(
            "const a = document.querySelector(arguments[0]);
             return fetch(a.href).then((r) => r.ok ? r.text() : `HTTP ${r.status}`);",
            vec![json!(format!("{row_css} .ag-export"))],
        )
        .await?;
    let exported: serde_json::Value =
        serde_json::from_str(href.as_str().unwrap_or("")).with_context(|| format!("{href}"))?;
    ensure!(
        exported["kind"] == "tandem-agent" && exported["version"] == 2,
        "{exported}"
    );
    let file = files.path().join("notes-reader.agent.json");
    std::fs::write(&file, exported.to_string())?;
    b.choose_files("#ag-import-input", &[&file]).await?;
    let warned = b
        .wait_text("#ag-warnings", |t| t.contains("folder"), WAIT)
        .await?;
    ensure!(!warned.is_empty(), "{warned}");
    b.wait_count("#ag-list .ag-row", |n| n == 3, WAIT).await?;
    b.wait_text("#ag-list", |t| t.contains("Notes reader (2)"), WAIT)
        .await?;

    // Delete asks first.
    b.click(&format!("{row_css} .ag-delete")).await?;
    b.wait_visible("#ag-delete-yes", WAIT).await?;
    b.click("#ag-delete-yes").await?;
    b.wait_count("#ag-list .ag-row", |n| n == 2, WAIT).await?;
    let gone = client.get(&format!("/agents/{id}")).await?;
    ensure!(gone.status == 404, "{gone:?}");
    b.close().await
}
