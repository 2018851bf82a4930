//! The page's side of file history (docs/files.md, docs/web.md) in headless
//! Chromium against the real chatd with its front: the change card on a
//! tool line with Undo, its refusal and Redo; chips under an answer for the
//! files its turn made; the files pane with its preview. Files are checked
//! on disk as well as on screen. Every wait is a bounded poll.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::ensure;
use serde_json::{json, Value};
use tandem_tests::browser::{self, Browser, Chromedriver, DESKTOP, PHONE, WAIT};
use tandem_tests::harness::{Chatd, Client, Sim};

/// A run's end on a loaded 2-vCPU machine.
pub(crate) const LONG: Duration = Duration::from_secs(45);

/// One test's processes, chromedriver first so it goes first on drop.
pub(crate) struct Files {
    driver: Chromedriver,
    pub(crate) chatd: Chatd,
    sim: Sim,
    pub(crate) client: Client,
    pub(crate) chat: String,
}

impl Files {
    /// chatd with a front (no admin token: the page is live at once), the
    /// engine simulator, and one chat in `auto` mode, its workspace made.
    pub(crate) async fn start() -> anyhow::Result<Files> {
        let sim = Sim::start(&["--tokens-per-second", "0"])?;
        let chatd = Chatd::start_with_front(&sim.url(), &[], None).await?;
        let client = chatd.client();
        let driver = Chromedriver::start().await?;
        let chat = client.create_chat_in("auto").await?;
        let files = Files {
            driver,
            chatd,
            sim,
            client,
            chat,
        };
        std::fs::create_dir_all(files.workspace())?;
        Ok(files)
    }

    pub(crate) fn workspace(&self) -> PathBuf {
        self.chatd.data_dir().join("workspaces").join(&self.chat)
    }

    /// A new browser on the chat, live.
    pub(crate) async fn open(&self, viewport: browser::Viewport) -> anyhow::Result<Browser> {
        let front = self.chatd.front_url();
        Browser::open_chat(
            &self.driver,
            viewport,
            &front,
            Some(&self.chat),
            "#files-toggle",
        )
        .await
    }

    /// Cues `calls` (one answer calling them all, then a short answer),
    /// sends from the page's composer and waits until the page shows the
    /// run's end: a second answer, and Ready.
    pub(crate) async fn run(&self, b: &Browser, calls: Value) -> anyhow::Result<()> {
        self.sim
            .faults(json!([{ "tool_calls": calls }, {"tokens": 3}]))
            .await?;
        let before = b.count("#messages .message[data-role='assistant']").await?;
        b.type_into("#composer", "Write it down").await?;
        b.click("#send").await?;
        b.poll("the run's last answer, and Ready", LONG, || async {
            let answers = b.count("#messages .message[data-role='assistant']").await?;
            let state = b.text("#status .state").await?;
            Ok(if answers >= before + 2 && state.trim() == "Ready" {
                Ok(())
            } else {
                Err(format!("{answers} answers, status {state:?}"))
            })
        })
        .await
    }
}

pub(crate) fn write(path: &str, content: &str) -> Value {
    json!({"name": "write_file", "arguments": {"path": path, "content": content}})
}

/// The shown texts of every element matching `css`, trimmed.
pub(crate) async fn texts(b: &Browser, css: &str) -> anyhow::Result<Vec<String>> {
    let v = b
        .eval_with(
            "return [...document.querySelectorAll(arguments[0])].map(e => e.innerText.trim());",
            vec![json!(css)],
        )
        .await?;
    Ok(serde_json::from_value(v)?)
}

/// Unfolds every answer's tool calls (they are folded under it).
async fn unfold_tools(b: &Browser) -> anyhow::Result<()> {
    b.eval("document.querySelectorAll('details.tools').forEach(d => { d.open = true; })")
        .await?;
    Ok(())
}

/// The chips under the page's answers: `[(answer index, chip text)]`.
async fn chips(b: &Browser) -> anyhow::Result<Vec<(u64, String)>> {
    let v = b
        .eval(
            "const answers = [...document.querySelectorAll(\"#messages .message[data-role='assistant']\")];
             return answers.flatMap((m, i) => [...m.querySelectorAll('.file-chip .chip-text')]
                 .map(c => [i, c.innerText.trim()]));",
        )
        .await?;
    Ok(serde_json::from_value(v)?)
}

/// A run that writes report.md and work/x.py: one chip (report.md) under
/// the turn's last answer, each tool line lists its file, the pane lists
/// both with x.py folded under working files, and previews each; a device
/// that opens the chat later sees the same from the snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chips_pane_and_preview() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let f = Files::start().await?;
    let b = f.open(DESKTOP).await?;
    f.run(
        &b,
        json!([
            write("report.md", "# Report\n\nAll **good**: <b>no tags</b>.\n"),
            write("work/x.py", "print(1)\n")
        ]),
    )
    .await?;
    b.wait_count(".file-chip", |n| n == 1, WAIT).await?;
    assert_eq!(
        chips(&b).await?,
        vec![(1, "Created report.md".to_string())],
        "one chip, under the turn's last answer; the working file has none"
    );

    unfold_tools(&b).await?;
    let lines = texts(&b, ".tool-call .files-change .file-line").await?;
    assert_eq!(lines, ["Created report.md", "Created work/x.py"]);
    assert_eq!(
        texts(&b, ".tool-call .files-change").await?,
        ["Created report.md\nUndo", "Created work/x.py\nUndo"],
        "each card: its file and Undo, nothing else"
    );
    b.screenshot("chip-and-tool-lines").await?;

    // Open on the chip: the pane, report.md previewed as Markdown.
    b.click(".file-chip .chip-open").await?;
    b.wait_visible("#files-pane", WAIT).await?;
    b.wait_text("#file-preview .preview-body h1", |t| t == "Report", WAIT)
        .await?;
    let preview = b.text("#file-preview .preview-body").await?;
    assert!(
        preview.contains("All good: <b>no tags</b>."),
        "the Markdown is rendered, its tags are text: {preview:?}"
    );
    assert_eq!(b.count("#file-preview .preview-body b").await?, 0);
    let download = b
        .eval(
            "const a = document.querySelector('#file-preview a.preview-download');
             return a ? {href: a.getAttribute('href'), name: a.getAttribute('download'), text: a.innerText} : null;",
        )
        .await?;
    assert!(
        download["href"]
            .as_str()
            .is_some_and(|h| h.starts_with("blob:")),
        "{download}"
    );
    assert_eq!(download["name"], "report.md", "{download}");
    assert_eq!(download["text"], "Download", "{download}");

    b.wait_count("#files-pane li.file-row", |n| n == 2, WAIT)
        .await?;
    assert_eq!(texts(&b, "#files-made .file-open").await?, ["report.md"]);
    assert_eq!(
        b.text("#files-working summary").await?.trim(),
        "Working files (1)"
    );
    assert!(
        !b.visible("#files-working .file-open").await?,
        "working files are folded"
    );
    assert_eq!(
        b.text_content("#files-working .file-open").await?,
        "work/x.py"
    );
    b.screenshot("pane-report").await?;

    // The working file, unfolded and previewed as text (no type of its own).
    b.click("#files-working summary").await?;
    b.click("#files-working .file-open").await?;
    b.wait_text(
        "#file-preview .preview-text",
        |t| t.trim() == "print(1)",
        WAIT,
    )
    .await?;
    assert_eq!(b.text("#file-preview .preview-name").await?, "work/x.py");
    b.screenshot("pane-working-file").await?;

    // A file the person drops in shows under "Given" at the pane's next
    // look, which a change set's `files` event brings.
    std::fs::write(f.workspace().join("notes.txt"), "from the person\n")?;
    f.run(&b, json!([write("summary.md", "done\n")])).await?;
    b.wait_count("#files-pane li.file-row", |n| n == 4, WAIT)
        .await?;
    assert_eq!(
        texts(&b, "#files-made .file-open").await?,
        ["report.md", "summary.md"]
    );
    b.wait_count(".file-chip", |n| n == 2, WAIT).await?;
    assert_eq!(
        chips(&b).await?,
        vec![
            (1, "Created report.md".to_string()),
            (3, "Created summary.md".to_string())
        ]
    );

    // A phone that opens the chat later renders the same from the snapshot.
    let phone = f.open(PHONE).await?;
    phone.wait_count(".file-chip", |n| n == 2, WAIT).await?;
    unfold_tools(&phone).await?;
    assert_eq!(
        texts(&phone, ".tool-call .files-change .file-line").await?,
        [
            "Created report.md",
            "Created work/x.py",
            "Created summary.md"
        ]
    );
    phone.click(".file-chip .chip-open").await?;
    phone
        .wait_text("#file-preview .preview-body h1", |t| t == "Report", WAIT)
        .await?;
    let width = phone
        .eval("return document.documentElement.scrollWidth")
        .await?;
    assert!(
        width.as_u64().is_some_and(|w| w <= 390),
        "the pane scrolls sideways at 390 px: scrollWidth {width}"
    );
    phone.screenshot("phone-pane").await?;
    phone.click("#files-close").await?;
    phone.wait_hidden("#files-pane", WAIT).await?;
    Ok(())
}

/// Undo on the tool line removes the file and says so; Redo brings it
/// back; after the person edits it, Undo refuses, names the file, and the
/// file keeps the person's bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undo_redo_and_a_conflict() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let f = Files::start().await?;
    let report = f.workspace().join("report.md");
    let b = f.open(DESKTOP).await?;
    f.run(&b, json!([write("report.md", "the model's text\n")]))
        .await?;
    ensure!(
        std::fs::read_to_string(&report)? == "the model's text\n",
        "the run wrote report.md"
    );
    b.wait_count(".file-chip", |n| n == 1, WAIT).await?;
    unfold_tools(&b).await?;
    let rev = b
        .eval("return Number(document.querySelector('.files-change').dataset.rev)")
        .await?;
    let rev = rev.as_i64().unwrap_or(0);
    ensure!(rev > 0, "the card names its change set");

    b.click(".files-change .files-undo").await?;
    let state = b
        .wait_text(
            ".files-change .files-state",
            |t| t.starts_with("Undone"),
            WAIT,
        )
        .await?;
    let undo_rev: i64 = state
        .trim()
        .strip_prefix("Undone (change set ")
        .and_then(|s| s.strip_suffix(')'))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    ensure!(undo_rev > rev, "{state:?} names the undo's own change set");
    assert!(!report.exists(), "the undo removed report.md");
    b.wait_count(".file-chip", |n| n == 0, WAIT).await?;
    b.screenshot("undone").await?;

    b.click(".files-change .files-redo").await?;
    b.wait_text(
        ".files-change .files-state",
        |t| t.starts_with("Redone (change set "),
        WAIT,
    )
    .await?;
    assert_eq!(std::fs::read_to_string(&report)?, "the model's text\n");
    b.wait_count(".file-chip", |n| n == 1, WAIT).await?;

    // The person edits the file; the undo would overwrite that: refused.
    std::fs::write(&report, "the person's edit\n")?;
    b.click(".files-change .files-undo").await?;
    b.wait_visible(".files-change .files-conflict", WAIT)
        .await?;
    let refusal = b.text(".files-change .files-conflict").await?;
    assert!(
        refusal.contains("nothing was changed") && refusal.contains("report.md"),
        "the refusal names the file: {refusal:?}"
    );
    assert_eq!(
        texts(&b, ".files-change .files-conflict li").await?,
        ["report.md was changed since"]
    );
    assert_eq!(
        b.count(".files-change .files-undo-rest").await?,
        0,
        "nothing else to undo: no \"Undo the rest\""
    );
    assert_eq!(std::fs::read_to_string(&report)?, "the person's edit\n");
    b.screenshot("conflict").await?;

    // Another device sees the same card undone once it is: from the history.
    std::fs::write(&report, "the model's text\n")?;
    let undone = f
        .client
        .post(
            &format!("/conversations/{}/files/undo", f.chat),
            json!({ "rev": rev }),
        )
        .await?;
    ensure!(undone.status == 200, "{undone:?}");
    b.wait_text(
        ".files-change .files-state",
        |t| t.starts_with("Undone (change set "),
        WAIT,
    )
    .await?;
    let later = f.open(DESKTOP).await?;
    unfold_tools(&later).await?;
    later
        .wait_text(
            ".files-change .files-state",
            |t| t.starts_with("Undone (change set "),
            WAIT,
        )
        .await?;
    assert_eq!(later.count(".file-chip").await?, 0);
    Ok(())
}

/// A 1×1 PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

/// A one-page PDF, blank.
const PDF: &str = "%PDF-1.4\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n2 0 obj\n<< /Type /Pages /Kids [3 0 R] /Count 1 >>\nendobj\n3 0 obj\n<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 100] >>\nendobj\nxref\n0 4\n0000000000 65535 f \n0000000009 00000 n \n0000000058 00000 n \n0000000115 00000 n \ntrailer\n<< /Size 4 /Root 1 0 R >>\nstartxref\n186\n%%EOF\n";

/// Files the person put in the workspace are listed as given; an image
/// previews as an image from a blob URL; a PDF's "Open the PDF in a new tab"
/// opens it in a tab of its own (files_page_gone.rs: its frame in the pane);
/// a file of no known kind only downloads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn images_pdfs_and_other_files() -> anyhow::Result<()> {
    use base64::Engine;
    if !browser::available() {
        return Ok(());
    }
    let f = Files::start().await?;
    let ws = f.workspace();
    std::fs::write(
        ws.join("dot.png"),
        base64::engine::general_purpose::STANDARD.decode(PNG)?,
    )?;
    std::fs::write(ws.join("paper.pdf"), PDF)?;
    std::fs::write(ws.join("data.bin"), [0u8, 159, 146, 150, 1, 2])?;
    let b = f.open(DESKTOP).await?;
    b.click("#files-toggle").await?;
    b.wait_count("#files-given li.file-row", |n| n == 3, WAIT)
        .await?;
    assert_eq!(
        texts(&b, "#files-given .file-open").await?,
        ["data.bin", "dot.png", "paper.pdf"]
    );

    b.click("#files-given li[data-path='dot.png'] .file-open")
        .await?;
    b.wait_js(
        "the image shown",
        "const i = document.querySelector('#file-preview img.preview-image');
         return i && i.complete && i.naturalWidth === 1 && i.src.startsWith('blob:');",
        WAIT,
    )
    .await?;

    b.click("#files-given li[data-path='data.bin'] .file-open")
        .await?;
    b.wait_text(
        "#file-preview .preview-body",
        |t| t.contains("No preview for this kind of file"),
        WAIT,
    )
    .await?;
    assert_eq!(
        b.text("#file-preview a.preview-download").await?,
        "Download"
    );

    b.click("#files-given li[data-path='paper.pdf'] .file-open")
        .await?;
    b.wait_visible("#file-preview a.preview-open", WAIT).await?;
    let before = b.client().windows().await?;
    b.click("#file-preview a.preview-open").await?;
    let tab = b
        .poll("the PDF's tab", WAIT, || async {
            let now = b.client().windows().await?;
            Ok(now
                .into_iter()
                .find(|w| !before.contains(w))
                .ok_or_else(|| "no new tab".to_string()))
        })
        .await?;
    b.client().switch_to_window(tab).await?;
    // The browser's own viewer has it in that tab too.
    let seen = b
        .wait_js(
            "the PDF's tab loaded",
            "return document.readyState === 'complete' ? {type: document.contentType, url: location.href} : null;",
            WAIT,
        )
        .await?;
    assert_eq!(seen["type"], "application/pdf", "{seen}");
    assert!(
        seen["url"].as_str().is_some_and(|u| u.starts_with("blob:")),
        "{seen}"
    );
    b.screenshot("pdf-tab").await?;
    Ok(())
}

/// A move's undo touches two paths: with the old one made again by the
/// person, Undo refuses naming it, and "Undo the rest" puts back the other
/// and says which it left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undo_the_rest_leaves_the_conflicting_file() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let f = Files::start().await?;
    let (old, new) = (f.workspace().join("a.md"), f.workspace().join("b.md"));
    let b = f.open(DESKTOP).await?;
    f.run(
        &b,
        json!([
            write("a.md", "draft\n"),
            {"name": "move_file", "arguments": {"from": "a.md", "to": "b.md"}}
        ]),
    )
    .await?;
    b.wait_count(".file-chip", |n| n == 1, WAIT).await?;
    assert_eq!(
        chips(&b).await?,
        vec![(1, "Created b.md".to_string())],
        "made and moved in one turn: made, where it is now"
    );
    unfold_tools(&b).await?;
    assert_eq!(
        texts(&b, ".tool-call .files-change .file-line").await?,
        ["Created a.md", "Moved b.md from a.md"]
    );

    std::fs::write(&old, "the person's new a.md\n")?;
    let undo = ".tool-call:last-child .files-change";
    ensure!(
        b.text_content(&format!("{undo} .file-line")).await? == "Moved b.md from a.md",
        "the second tool line is the move"
    );
    b.click(&format!("{undo} .files-undo")).await?;
    b.wait_visible(&format!("{undo} .files-conflict"), WAIT)
        .await?;
    let named = texts(&b, &format!("{undo} .files-conflict li")).await?;
    ensure!(
        named.len() == 1 && named[0].starts_with("a.md "),
        "the refusal names a.md: {named:?}"
    );
    assert!(new.exists(), "nothing was changed");
    b.click(&format!("{undo} .files-undo-rest")).await?;
    b.wait_text(
        &format!("{undo} .files-state"),
        |t| t.starts_with("Undone (change set "),
        WAIT,
    )
    .await?;
    let left = b.text(&format!("{undo} .files-skipped")).await?;
    assert!(left.starts_with("Left as they are: a.md "), "{left:?}");
    assert!(!new.exists(), "b.md was put back (it did not exist before)");
    assert_eq!(std::fs::read_to_string(&old)?, "the person's new a.md\n");
    b.screenshot("undo-the-rest").await?;
    Ok(())
}

/// chatd restarts under an open page with its pane open: once the stream is
/// back, a turn sent from elsewhere shows its change card and chip, and the
/// pane's list follows, from the events after the page's last seq.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pane_follows_after_a_chatd_restart() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let mut f = Files::start().await?;
    let b = f.open(DESKTOP).await?;
    f.run(&b, json!([write("report.md", "one\n")])).await?;
    b.click(".file-chip .chip-open").await?;
    b.wait_count("#files-made li.file-row", |n| n == 1, WAIT)
        .await?;

    f.chatd.sigterm(Duration::from_secs(15))?;
    b.wait_visible("#banner-stopped", WAIT).await?;
    f.chatd.restart().await?;
    b.wait_hidden("#banner-stopped", LONG).await?;

    f.sim
        .faults(json!([{ "tool_calls": [write("later.md", "two\n")] }, {"tokens": 3}]))
        .await?;
    let sent = f.client.send(&f.chat, "one more").await?;
    let run = tandem_tests::harness::run_id(&sent)?;
    f.client
        .wait_run(&f.chat, &run, &["done", "failed"], LONG)
        .await?;
    b.wait_count(".file-chip", |n| n == 2, WAIT).await?;
    assert_eq!(
        chips(&b).await?,
        vec![
            (1, "Created report.md".to_string()),
            (3, "Created later.md".to_string())
        ]
    );
    b.wait_count("#files-made li.file-row", |n| n == 2, WAIT)
        .await?;
    assert_eq!(
        texts(&b, "#files-made .file-open").await?,
        ["later.md", "report.md"],
        "in the list's order, by path"
    );
    unfold_tools(&b).await?;
    assert_eq!(
        texts(&b, ".tool-call .files-change .file-line").await?,
        ["Created report.md", "Created later.md"]
    );
    Ok(())
}

/// "Undo this turn" under a turn's answer puts back every file the turn
/// changed in one go, and every tool line of the turn says so; Redo brings
/// them back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undo_a_whole_turn_and_redo_it() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let f = Files::start().await?;
    let ws = f.workspace();
    std::fs::write(ws.join("notes.md"), "the person's notes\n")?;
    let b = f.open(DESKTOP).await?;
    f.run(
        &b,
        json!([
            write("report.md", "made\n"),
            write("notes.md", "rewritten\n"),
            write("work/run.log", "log\n")
        ]),
    )
    .await?;
    b.wait_count(".file-chip", |n| n == 2, WAIT).await?;
    assert_eq!(
        chips(&b).await?,
        vec![
            (1, "Created report.md".to_string()),
            (1, "Changed notes.md".to_string())
        ]
    );
    b.click(".turn-undo .turn-undo-button").await?;
    b.wait_text(
        ".turn-undo .files-state",
        |t| t.starts_with("Turn undone (change set "),
        WAIT,
    )
    .await?;
    assert!(!ws.join("report.md").exists());
    assert!(!ws.join("work/run.log").exists());
    assert_eq!(
        std::fs::read_to_string(ws.join("notes.md"))?,
        "the person's notes\n"
    );
    assert_eq!(
        b.count(".file-chip").await?,
        0,
        "nothing of the turn is left"
    );
    unfold_tools(&b).await?;
    let states = texts(&b, ".tool-call .files-change .files-state").await?;
    assert!(
        states.len() == 3 && states.iter().all(|s| s.starts_with("Undone (change set ")),
        "every tool line of the turn says it is undone: {states:?}"
    );
    b.screenshot("turn-undone").await?;

    b.click(".turn-undo .turn-redo").await?;
    b.wait_count(".file-chip", |n| n == 2, WAIT).await?;
    assert_eq!(std::fs::read_to_string(ws.join("report.md"))?, "made\n");
    assert_eq!(std::fs::read_to_string(ws.join("notes.md"))?, "rewritten\n");
    assert_eq!(std::fs::read_to_string(ws.join("work/run.log"))?, "log\n");
    b.wait_count(".tool-call .files-change .files-undo", |n| n == 3, WAIT)
        .await?;

    // The person edits notes.md: the turn's undo refuses naming it, and
    // "Undo the rest" puts back the other two, leaving notes.md as it is.
    std::fs::write(ws.join("notes.md"), "the person's edit\n")?;
    b.click(".turn-undo .turn-undo-button").await?;
    b.wait_visible(".turn-undo .files-conflict", WAIT).await?;
    assert_eq!(
        texts(&b, ".turn-undo .files-conflict li").await?,
        ["notes.md was changed since"]
    );
    assert!(ws.join("report.md").exists(), "nothing was changed");
    b.click(".turn-undo .turn-undo-rest").await?;
    b.wait_text(
        ".turn-undo .files-state",
        |t| t.starts_with("Turn undone (change set "),
        WAIT,
    )
    .await?;
    assert_eq!(
        b.text(".turn-undo .files-skipped").await?,
        "Left as they are: notes.md was changed since"
    );
    assert!(!ws.join("report.md").exists());
    assert!(!ws.join("work/run.log").exists());
    assert_eq!(
        std::fs::read_to_string(ws.join("notes.md"))?,
        "the person's edit\n"
    );
    let lines = b
        .eval(
            "return [...document.querySelectorAll('.tool-call .files-change')].map(c =>
                 [c.querySelector('.file-line .path').innerText, !!c.querySelector('.files-undo')]);",
        )
        .await?;
    assert_eq!(
        lines,
        json!([
            ["report.md", false],
            ["notes.md", true],
            ["work/run.log", false]
        ]),
        "the line whose file was left keeps its Undo"
    );
    b.screenshot("turn-undo-the-rest").await?;

    // A page opened later reads the same from the chat's history: the
    // turn's undo names every set of the turn, notes.md's among them, but
    // put back nothing of that one.
    let later = f.open(DESKTOP).await?;
    unfold_tools(&later).await?;
    later
        .wait_count(".tool-call .files-change .files-state", |n| n == 2, WAIT)
        .await?;
    let seen = later
        .eval(
            "return [...document.querySelectorAll('.tool-call .files-change')].map(c =>
                 [c.querySelector('.file-line .path').innerText, !!c.querySelector('.files-undo')]);",
        )
        .await?;
    assert_eq!(seen, lines, "a page opened later shows the same lines");
    Ok(())
}
