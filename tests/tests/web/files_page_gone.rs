//! Two leftovers of the files page (docs/web.md "The chat's files") in
//! headless Chromium against the real chatd: a chip under an answer for a
//! file deleted since is no live link to a 404 (struck, "deleted since",
//! Restore while the trash holds it), and a PDF previews in the browser's
//! own viewer inside the pane (the page's CSP admits exactly that frame).
//! Disk is checked as well as the screen; every wait is bounded.

use serde_json::json;
use tandem_tests::browser::{self, DESKTOP, PHONE, WAIT};
use tandem_tests::harness::sha256_of;

use crate::files_page::{write, Files};

/// The chip of report.md, as the page shows it: its class list and text.
const CHIP: &str = "#messages .file-chip[data-path='report.md']";

/// The chip's pieces as shown, in order.
async fn chip_parts(b: &tandem_tests::browser::Browser) -> anyhow::Result<Vec<String>> {
    let v = b
        .eval_with(
            "return [...document.querySelector(arguments[0]).children].map(e => e.innerText.trim());",
            vec![json!(CHIP)],
        )
        .await?;
    Ok(serde_json::from_value(v)?)
}

/// A file a turn made, deleted since from another device: its chip is
/// struck and says so, with Restore (no Open); Restore puts the same bytes
/// back and the chip is a live Open again; deleted for good, it says
/// "deleted since" with nothing to click.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_files_chip_says_so_and_restores() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let f = Files::start().await?;
    let report = f.workspace().join("report.md");
    let b = f.open(DESKTOP).await?;
    f.run(&b, json!([write("report.md", "# Report\n\nkept\n")]))
        .await?;
    let made = sha256_of(&report);
    assert!(made.is_some(), "the run wrote report.md");
    b.wait_visible(&format!("{CHIP} .chip-open"), WAIT).await?;

    // Deleted elsewhere (the API, as another device's pane does).
    let deleted = f
        .client
        .call(
            reqwest::Method::DELETE,
            &format!("/conversations/{}/files?path=report.md", f.chat),
            None,
        )
        .await?;
    assert!(deleted.status < 300, "{deleted:?}");
    b.wait_visible(&format!("{CHIP}.deleted .chip-restore"), WAIT)
        .await?;
    assert_eq!(b.count(&format!("{CHIP} .chip-open")).await?, 0, "no Open");
    assert_eq!(
        chip_parts(&b).await?,
        ["Created report.md", "·", "deleted since", "Restore"]
    );
    assert_eq!(
        b.eval_with(
            "return getComputedStyle(document.querySelector(arguments[0])).textDecorationLine",
            vec![json!(format!("{CHIP} s"))],
        )
        .await?,
        json!("line-through"),
        "the name is struck through"
    );
    b.screenshot("chip-deleted").await?;

    // A phone that opens the chat now shows the same from the start.
    let phone = f.open(PHONE).await?;
    phone
        .wait_visible(&format!("{CHIP}.deleted .chip-restore"), WAIT)
        .await?;
    phone.screenshot("phone-chip-deleted").await?;

    b.click(&format!("{CHIP} .chip-restore")).await?;
    b.wait_visible(&format!("{CHIP} .chip-open"), WAIT).await?;
    assert_eq!(sha256_of(&report), made, "the same bytes are back");
    assert_eq!(b.count(&format!("{CHIP}.deleted")).await?, 0);
    phone
        .wait_visible(&format!("{CHIP} .chip-open"), WAIT)
        .await?;
    b.click(&format!("{CHIP} .chip-open")).await?;
    b.wait_text("#file-preview .preview-body h1", |t| t == "Report", WAIT)
        .await?;

    // Deleted, then deleted for good: nothing left to restore.
    let deleted = f
        .client
        .call(
            reqwest::Method::DELETE,
            &format!("/conversations/{}/files?path=report.md", f.chat),
            None,
        )
        .await?;
    assert!(deleted.status < 300, "{deleted:?}");
    b.wait_visible(&format!("{CHIP}.deleted .chip-restore"), WAIT)
        .await?;
    let purged = f
        .client
        .post(
            &format!("/conversations/{}/files/trash/purge", f.chat),
            json!({ "paths": ["report.md"] }),
        )
        .await?;
    assert!(purged.status < 300, "{purged:?}");
    // A page opened now reads the trash without report.md.
    b.client().refresh().await?;
    b.wait_state("live").await?;
    b.wait_visible(&format!("{CHIP}.deleted"), WAIT).await?;
    assert_eq!(
        chip_parts(&b).await?,
        ["Created report.md", "·", "deleted since"]
    );
    assert_eq!(b.count(&format!("{CHIP} button")).await?, 0);
    b.screenshot("chip-gone").await?;
    Ok(())
}

/// A one-page PDF, blank (as in files_page.rs).
const PDF: &str = "%PDF-1.4\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n2 0 obj\n<< /Type /Pages /Kids [3 0 R] /Count 1 >>\nendobj\n3 0 obj\n<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 100] >>\nendobj\nxref\n0 4\n0000000000 65535 f \n0000000009 00000 n \n0000000058 00000 n \n0000000115 00000 n \ntrailer\n<< /Size 4 /Root 1 0 R >>\nstartxref\n186\n%%EOF\n";

/// The frame's document as the pane holds it: a PDF document (the
/// browser's viewer took it; a frame the CSP refused is an error page the
/// page cannot read, and a `securitypolicyviolation` says so).
const FRAME_SEEN: &str = "const refused = window.__violations || [];
    if (refused.length) return {violations: refused};
    const f = document.querySelector('#file-preview iframe.preview-frame');
    if (!f) return null;
    let d = null;
    try { d = f.contentDocument; } catch (e) { return 'no access: ' + e; }
    // Until the blob's document commits, the frame holds its first empty one.
    if (!d || d.readyState !== 'complete' || d.contentType === 'text/html') return null;
    return {src: f.getAttribute('src'), type: d.contentType, viewer: navigator.pdfViewerEnabled,
            violations: window.__violations || []};";

/// A PDF in the pane shows in the browser's own viewer in a frame of the
/// pane, from a blob URL; the page's CSP refuses nothing on the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pdf_previews_inside_the_pane() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let f = Files::start().await?;
    std::fs::write(f.workspace().join("paper.pdf"), PDF)?;
    for viewport in [DESKTOP, PHONE] {
        let b = f.open(viewport).await?;
        b.eval(
            "window.__violations = [];
             document.addEventListener('securitypolicyviolation',
                 (e) => window.__violations.push(e.effectiveDirective + ' ' + e.blockedURI));",
        )
        .await?;
        b.click("#files-toggle").await?;
        b.click("#files-given li[data-path='paper.pdf'] .file-open")
            .await?;
        let seen = b
            .wait_js("the PDF in the pane's frame", FRAME_SEEN, WAIT)
            .await?;
        assert_eq!(seen["violations"], json!([]), "the CSP refused: {seen}");
        assert!(
            seen["src"].as_str().is_some_and(|s| s.starts_with("blob:")),
            "{seen}"
        );
        assert_eq!(seen["type"], "application/pdf", "{seen}");
        assert_eq!(
            seen["viewer"], true,
            "this browser has a PDF viewer: {seen}"
        );
        assert!(b.visible("#file-preview iframe.preview-frame").await?);
        b.screenshot(if viewport.phone { "phone-pdf" } else { "pdf" })
            .await?;
    }
    Ok(())
}
