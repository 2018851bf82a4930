//! The files pane's trash (docs/files.md "The trash", docs/web.md) in
//! headless Chromium against the real chatd: Delete on a file asks in
//! place, then the file leaves the folder for "Trash (N)"; Restore brings
//! the same bytes back, or says in place what is in the way; Delete for
//! good and Empty trash say what they freed, and the blob folder shrinks by
//! that much. Disk is checked as well as the screen; every wait is bounded.

use serde_json::json;
use tandem_tests::browser::{Browser, DESKTOP, PHONE, WAIT};
use tandem_tests::harness::{du, sha256_of};

use crate::files_page::{texts, write, Files};

/// The page's way of writing a size (formatBytes in app.js).
fn shown_size(n: u64) -> String {
    match n {
        0..1024 => format!("{n} B"),
        1024..1_048_576 => format!("{:.1} KB", n as f64 / 1024.0),
        _ => format!("{:.1} MB", n as f64 / 1_048_576.0),
    }
}

/// Waits until `check` holds for what is on disk.
async fn on_disk(b: &Browser, what: &str, check: impl Fn() -> bool) -> anyhow::Result<()> {
    b.poll(what, WAIT, || async {
        Ok(if check() {
            Ok(())
        } else {
            Err("not yet".to_string())
        })
    })
    .await
}

/// Delete on a file of the pane: asked in place, then confirmed.
async fn delete_in_pane(b: &Browser, path: &str) -> anyhow::Result<()> {
    b.click(&format!(
        "#files-pane li.file-row[data-path='{path}'] .file-delete"
    ))
    .await?;
    let ask = format!("#files-pane li.file-row[data-path='{path}'] .files-ask");
    b.wait_visible(&ask, WAIT).await?;
    assert_eq!(
        b.text(&format!("{ask} .ask-text")).await?,
        format!("Move {path} to the trash?")
    );
    b.click(&format!("{ask} .ask-yes")).await
}

/// The trash's count as its summary shows it.
async fn wait_trash(b: &Browser, n: usize) -> anyhow::Result<()> {
    let want = format!("Trash ({n})");
    b.wait_text("#files-trash summary", |t| t.trim() == want, WAIT)
        .await?;
    Ok(())
}

/// A file the run wrote goes to the trash from the pane (gone from disk,
/// listed with its size and who deleted it) and Restore brings back the
/// same bytes; with a folder made in its place, Restore refuses in place,
/// naming the file, and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_to_the_trash_and_restore() -> anyhow::Result<()> {
    if !tandem_tests::browser::available() {
        return Ok(());
    }
    let f = Files::start().await?;
    let report = f.workspace().join("report.md");
    let b = f.open(DESKTOP).await?;
    let text = "# Report\n\nthe model's text\n";
    f.run(&b, json!([write("report.md", text)])).await?;
    let made = sha256_of(&report);
    assert!(made.is_some(), "the run wrote report.md");

    b.click("#files-toggle").await?;
    b.wait_count("#files-made li.file-row", |n| n == 1, WAIT)
        .await?;
    assert!(
        !b.visible("#files-trash").await?,
        "no trash shown while it is empty"
    );
    delete_in_pane(&b, "report.md").await?;
    b.screenshot("deleted").await?;
    on_disk(&b, "report.md gone from the folder", || !report.exists()).await?;
    b.wait_count("#files-pane li.file-row", |n| n == 0, WAIT)
        .await?;
    wait_trash(&b, 1).await?;
    b.click("#files-trash summary").await?;
    b.wait_count("#files-trash li.trash-row", |n| n == 1, WAIT)
        .await?;
    assert_eq!(
        texts(&b, "#files-trash .trash-row .path").await?,
        ["report.md"]
    );
    let meta = b.text("#files-trash .trash-row .file-meta").await?;
    assert!(
        meta.starts_with(&format!("{} · ", shown_size(text.len() as u64)))
            && meta.ends_with(" · by you"),
        "its size, when and who: {meta:?}"
    );
    b.screenshot("in-the-trash").await?;

    b.click("#files-trash li[data-path='report.md'] .trash-restore")
        .await?;
    on_disk(&b, "report.md back", || report.exists()).await?;
    assert_eq!(sha256_of(&report), made, "the same bytes");
    b.wait_count("#files-made li.file-row", |n| n == 1, WAIT)
        .await?;
    b.wait_hidden("#files-trash", WAIT).await?;
    let trash = f
        .client
        .get(&format!("/conversations/{}/files/trash", f.chat))
        .await?;
    assert_eq!(trash.body["files"], json!([]), "{trash:?}");

    // A folder where the file was: Restore would have to overwrite it.
    delete_in_pane(&b, "report.md").await?;
    on_disk(&b, "report.md gone again", || !report.exists()).await?;
    wait_trash(&b, 1).await?;
    std::fs::create_dir(&report)?;
    std::fs::write(report.join("inside.txt"), "the person's\n")?;
    b.wait_count("#files-trash li.trash-row", |n| n == 1, WAIT)
        .await?;
    b.click("#files-trash li[data-path='report.md'] .trash-restore")
        .await?;
    let refusal = b
        .wait_text(
            "#files-trash .trash-row .files-conflict",
            |t| !t.is_empty(),
            WAIT,
        )
        .await?;
    assert_eq!(
        refusal,
        "Not restored: report.md is there again. Move or delete it first; nothing was changed."
    );
    assert!(report.is_dir(), "nothing was changed");
    assert_eq!(
        std::fs::read_to_string(report.join("inside.txt"))?,
        "the person's\n"
    );
    b.screenshot("restore-refused").await?;

    // A phone: the pane is the whole screen and the trash fits its width.
    let phone = f.open(PHONE).await?;
    phone.click("#files-toggle").await?;
    wait_trash(&phone, 1).await?;
    phone.click("#files-trash summary").await?;
    phone
        .wait_visible(
            "#files-trash li[data-path='report.md'] .trash-restore",
            WAIT,
        )
        .await?;
    let width = phone
        .eval("return document.documentElement.scrollWidth")
        .await?;
    assert!(
        width.as_u64().is_some_and(|w| w <= 390),
        "the trash scrolls sideways at 390 px: scrollWidth {width}"
    );
    phone.screenshot("phone-trash").await?;
    Ok(())
}

/// Delete for good frees the kept bytes: the page says how much, the
/// trash is empty, and the blob folder shrank by exactly that; Empty trash
/// does the same for everything left in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_for_good_frees_the_blobs() -> anyhow::Result<()> {
    if !tandem_tests::browser::available() {
        return Ok(());
    }
    let f = Files::start().await?;
    let (big, other) = (
        f.workspace().join("big.txt"),
        f.workspace().join("other.md"),
    );
    let blobs = f.chatd.data_dir().join("blobs");
    let content: String = (0..60_000)
        .map(|i| char::from(b'a' + (i * 7 % 26) as u8))
        .collect();
    let b = f.open(DESKTOP).await?;
    f.run(
        &b,
        json!([
            write("big.txt", &content),
            write("other.md", "a short note\n")
        ]),
    )
    .await?;
    b.click("#files-toggle").await?;
    b.wait_count("#files-made li.file-row", |n| n == 2, WAIT)
        .await?;
    delete_in_pane(&b, "big.txt").await?;
    on_disk(&b, "big.txt gone from the folder", || !big.exists()).await?;
    wait_trash(&b, 1).await?;
    b.click("#files-trash summary").await?;
    b.wait_count("#files-trash li.trash-row", |n| n == 1, WAIT)
        .await?;

    let before = du(&blobs);
    b.click("#files-trash li[data-path='big.txt'] .trash-purge")
        .await?;
    let ask = "#files-trash li[data-path='big.txt'] .files-ask";
    b.wait_visible(ask, WAIT).await?;
    assert_eq!(
        b.text(&format!("{ask} .ask-text")).await?,
        "Delete big.txt for good? This cannot be undone."
    );
    b.click(&format!("{ask} .ask-yes")).await?;
    let freed = b
        .wait_text("#files-trash .trash-freed", |t| !t.is_empty(), WAIT)
        .await?;
    let shrank = before - du(&blobs);
    assert!(shrank >= 60_000, "the blob folder shrank by {shrank} bytes");
    assert_eq!(
        freed,
        format!("Deleted big.txt for good. Freed {}.", shown_size(shrank))
    );
    wait_trash(&b, 0).await?;
    assert_eq!(b.count("#files-trash li.trash-row").await?, 0);
    b.screenshot("freed").await?;

    // Empty trash: everything in it, after its own question.
    delete_in_pane(&b, "other.md").await?;
    on_disk(&b, "other.md gone from the folder", || !other.exists()).await?;
    wait_trash(&b, 1).await?;
    let before = du(&blobs);
    b.click("#files-trash .trash-empty").await?;
    b.wait_visible("#files-trash .trash-foot .files-ask", WAIT)
        .await?;
    let foot = b.text_content("#files-trash .trash-foot").await?;
    assert_eq!(
        foot,
        "Deleted files are kept 30 days, then deleted for good.Empty trash\
         Delete the 1 file in the trash for good? This cannot be undone.Empty trashCancel",
        "the days kept, the button and its question, nothing else"
    );
    assert_eq!(
        b.text("#files-trash .trash-foot .ask-text").await?,
        "Delete the 1 file in the trash for good? This cannot be undone."
    );
    b.click("#files-trash .trash-foot .ask-yes").await?;
    let freed = b
        .wait_text("#files-trash .trash-freed", |t| !t.is_empty(), WAIT)
        .await?;
    let shrank = before - du(&blobs);
    assert_eq!(shrank, "a short note\n".len() as u64);
    assert_eq!(freed, "Deleted 1 file for good. Freed 13 B.");
    wait_trash(&b, 0).await?;
    let trash = f
        .client
        .get(&format!("/conversations/{}/files/trash", f.chat))
        .await?;
    assert_eq!(trash.body["files"], json!([]), "{trash:?}");
    Ok(())
}
