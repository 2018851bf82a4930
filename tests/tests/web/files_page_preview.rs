//! The files pane's previews of tables and documents (docs/web.md "The
//! chat's files") in headless Chromium against the real chatd: a workbook
//! opens on its first sheet's table with a tab per sheet, a click and the
//! arrow keys change sheets, a cut sheet says how many rows it has; a slide
//! deck shows its slides and notes as text. Every wait is bounded.

use serde_json::json;
use tandem_tests::browser::{self, Browser, DESKTOP, WAIT};
use tandem_tests::docfixtures;

use crate::files_page::{texts, Files};

/// WebDriver's arrow-right key.
const ARROW_RIGHT: &str = "\u{e014}";

/// The cells of the shown sheet's table, row by row.
async fn cells(b: &Browser) -> anyhow::Result<Vec<Vec<String>>> {
    let v = b
        .eval(
            "const t = document.querySelector('#file-preview .sheet-panel table');
             return t ? [...t.rows].map(r => [...r.cells].map(c => c.textContent)) : [];",
        )
        .await?;
    Ok(serde_json::from_value(v)?)
}

/// Opens `name` from the pane's list.
async fn open_file(b: &Browser, name: &str) -> anyhow::Result<()> {
    if !b.visible("#files-pane").await? {
        b.click("#files-toggle").await?;
    }
    let row = format!("#files-pane li.file-row[data-path='{name}'] .file-open");
    b.click(&row).await
}

/// The workbook: sheet 1's table at once, three tabs, sheet 2 by a click,
/// sheet 3 by the arrow key from there with its "first 200 of 2,100 rows".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workbook_shows_a_tab_per_sheet() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let f = Files::start().await?;
    docfixtures::workbook(&f.workspace())?;
    let b = f.open(DESKTOP).await?;
    open_file(&b, "accounts.xlsx").await?;
    b.wait_count("#file-preview .sheet-panel table tr", |n| n == 5, WAIT)
        .await?;
    assert_eq!(
        texts(&b, "#file-preview [role='tab']").await?,
        ["Summary", "Customers", "Data"]
    );
    assert_eq!(
        cells(&b).await?[..3],
        [
            vec!["Item", "Amount", "Date", "Paid"],
            vec!["Hosting", "42", "2026-03-01", "TRUE"],
            vec!["Travel", "12.5", "2026-03-02 14:30:00", "FALSE"],
        ]
    );
    let selected = "#file-preview [role='tab'][aria-selected='true']";
    assert_eq!(b.text(selected).await?.trim(), "Summary");
    assert_eq!(
        b.count("#file-preview .sheet-cut").await?,
        0,
        "a whole sheet says nothing of a cut"
    );
    assert!(
        b.text_content("#file-preview .preview-links")
            .await?
            .contains("Download"),
        "the file's download stays"
    );
    b.screenshot("preview-sheet-1").await?;

    b.click("#file-preview [role='tab']:nth-child(2)").await?;
    b.wait_text(selected, |t| t.trim() == "Customers", WAIT)
        .await?;
    b.wait_count("#file-preview .sheet-panel table tr", |n| n == 3, WAIT)
        .await?;
    assert_eq!(
        cells(&b).await?,
        [
            vec!["Customer", "Owes"],
            vec!["Acme", "4200"],
            vec!["Globex", "0"],
        ]
    );
    b.screenshot("preview-sheet-2").await?;

    // The keyboard: the arrow moves to the next tab, focus and all.
    b.type_into(selected, ARROW_RIGHT).await?;
    b.wait_text(selected, |t| t.trim() == "Data", WAIT).await?;
    b.wait_count("#file-preview .sheet-panel table tr", |n| n == 200, WAIT)
        .await?;
    let focused = b
        .eval("return document.activeElement && document.activeElement.textContent;")
        .await?;
    assert_eq!(focused, json!("Data"));
    assert_eq!(
        b.text("#file-preview .sheet-cut").await?.trim(),
        "Showing the first 200 of its 2,100 rows and 50 of its 52 columns: the whole sheet is in the download."
    );
    let tab_stops = b
        .eval("return [...document.querySelectorAll('#file-preview [role=tab]')].map(t => t.tabIndex);")
        .await?;
    assert_eq!(
        tab_stops,
        json!([-1, -1, 0]),
        "one tab stop: the selected tab"
    );
    Ok(())
}

/// A slide deck: each slide's title, text and notes, as text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slide_deck_shows_its_slides_and_notes() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let f = Files::start().await?;
    docfixtures::pptx(&f.workspace())?;
    let b = f.open(DESKTOP).await?;
    open_file(&b, "plan.pptx").await?;
    b.wait_count("#file-preview .doc-slide", |n| n == 3, WAIT)
        .await?;
    assert_eq!(
        texts(&b, "#file-preview .slide-title").await?,
        [
            "Slide 1: Acme plan 2026",
            "Slide 2: Numbers",
            "Slide 3: Next steps"
        ]
    );
    assert_eq!(
        texts(&b, "#file-preview .slide-notes").await?,
        [
            "Notes: Welcome everyone.",
            "Notes: Say the Q1 figure twice."
        ]
    );
    assert_eq!(
        b.text_content("#file-preview .doc-slide[data-slide='3'] .slide-text")
            .await?,
        "Hire two engineers\nShip in May"
    );
    b.screenshot("preview-slides").await?;
    Ok(())
}
