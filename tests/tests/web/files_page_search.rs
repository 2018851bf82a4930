//! The files pane's search box (docs/web.md "The chat's files") in headless
//! Chromium against the real chatd and its index: words typed and Enter
//! list the lines that hold them with their sheet and line, and the names
//! that match; a hit opens its file's preview; Esc clears the search, and a
//! file deleted is found no more. Every wait is bounded.

use tandem_tests::browser::{self, DESKTOP, WAIT};
use tandem_tests::docfixtures;

use crate::files_page::{texts, Files};

/// WebDriver's Enter and Escape keys.
const ENTER: &str = "\u{e007}";
const ESCAPE: &str = "\u{e00c}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_lists_lines_by_sheet_and_opens_the_file() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let f = Files::start().await?;
    let ws = f.workspace();
    docfixtures::workbook(&ws)?;
    std::fs::write(ws.join("acme-notes.txt"), "met the team\nAcme owes us\n")?;
    let b = f.open(DESKTOP).await?;
    b.click("#files-toggle").await?;
    b.type_into("#files-q", &format!("acme{ENTER}")).await?;
    b.wait_count("#files-found li.found-row", |n| n == 3, WAIT)
        .await?;
    assert_eq!(
        texts(&b, "#files-found li.found-row").await?,
        [
            "acme-notes.txt\nfile name",
            "accounts.xlsx\nsheet Customers, line 10\n\nAcme\t4200",
            "acme-notes.txt\nline 2\n\nAcme owes us",
        ]
    );
    assert_eq!(
        b.text("#files-found .found-note").await?,
        "2 lines, 1 name."
    );

    // A hit opens the file it names, in the pane's preview.
    b.click("#files-found li.found-row:nth-child(2) .file-open")
        .await?;
    b.wait_text(
        "#file-preview .preview-name",
        |t| t == "accounts.xlsx",
        WAIT,
    )
    .await?;

    // Esc in the box clears the search and leaves the pane open.
    b.click("#files-q").await?;
    b.type_into("#files-q", ESCAPE).await?;
    b.wait_hidden("#files-found", WAIT).await?;
    assert!(b.visible("#files-pane").await?);

    // Deleted: found no more.
    std::fs::remove_file(ws.join("acme-notes.txt"))?;
    b.type_into("#files-q", &format!("acme{ENTER}")).await?;
    b.wait_count("#files-found li.found-row", |n| n == 1, WAIT)
        .await?;
    assert_eq!(
        texts(&b, "#files-found li.found-row").await?,
        ["accounts.xlsx\nsheet Customers, line 10\n\nAcme\t4200"]
    );
    Ok(())
}
