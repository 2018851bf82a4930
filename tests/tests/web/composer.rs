//! The page's composer (docs/web.md "The composer") in headless Chromium
//! against the real chatd with its front and the engine simulator: files
//! attached with the button, pasted and dropped; the multipart upload with
//! its progress and Cancel; the chips before and after sending; the draft
//! kept across a reload; Esc and Up; chatd's refusal of a file over its
//! limit. Files are checked on disk (sha-256) as well as on screen; every
//! wait is a bounded poll.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tandem_tests::browser::{self, Browser, Chromedriver, Viewport, DESKTOP, PHONE, WAIT};
use tandem_tests::harness::{sha256_of, Chatd, Client, Sim};

use crate::files_page::{texts, LONG};

/// One test's processes, chromedriver first so it goes first on drop.
struct Composer {
    driver: Chromedriver,
    chatd: Chatd,
    _sim: Sim,
    client: Client,
    /// Where the test's own files are made.
    dir: tempfile::TempDir,
}

impl Composer {
    /// chatd with a front (no admin token), its settings `env`, and the
    /// engine simulator; `tps` 0 answers at once.
    async fn start(env: &[(&str, &str)]) -> anyhow::Result<Composer> {
        let sim = Sim::start(&["--tokens-per-second", "0"])?;
        let chatd = Chatd::start_with_front(&sim.url(), env, None).await?;
        let client = chatd.client();
        let driver = Chromedriver::start().await?;
        Ok(Composer {
            driver,
            chatd,
            _sim: sim,
            client,
            dir: tempfile::tempdir()?,
        })
    }

    fn uploads(&self, chat: &str) -> PathBuf {
        self.chatd
            .data_dir()
            .join("workspaces")
            .join(chat)
            .join("uploads")
    }

    /// A new browser on `chat` (or the start screen), live.
    async fn open(&self, viewport: Viewport, chat: Option<&str>) -> anyhow::Result<Browser> {
        let front = self.chatd.front_url();
        let b = Browser::open_chat(&self.driver, viewport, &front, chat, "#files-toggle").await?;
        Ok(b)
    }

    fn file(&self, name: &str, bytes: &[u8]) -> anyhow::Result<PathBuf> {
        let path = self.dir.path().join(name);
        std::fs::write(&path, bytes)?;
        Ok(path)
    }
}

/// The files in a chat's `uploads/` (none when it was never made).
fn listed(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// A real PNG of `width` × `height` RGB pixels (a smooth "photo"), its
/// pixel data stored uncompressed: about 3 bytes a pixel on disk.
fn photo_png(width: u32, height: u32) -> Vec<u8> {
    let mut crc_table = [0u32; 256];
    for (n, slot) in crc_table.iter_mut().enumerate() {
        let mut c = n as u32;
        for _ in 0..8 {
            c = if c & 1 == 1 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
        *slot = c;
    }
    let crc = |bytes: &[u8]| {
        !bytes.iter().fold(!0u32, |c, b| {
            crc_table[((c ^ u32::from(*b)) & 0xFF) as usize] ^ (c >> 8)
        })
    };
    let mut raw = Vec::with_capacity((height * (width * 3 + 1)) as usize);
    for y in 0..height {
        raw.push(0); // no filter
        for x in 0..width {
            raw.extend_from_slice(&[(x % 256) as u8, (y % 256) as u8, ((x ^ y) % 256) as u8]);
        }
    }
    // zlib: stored deflate blocks of at most 65,535 bytes, then Adler-32.
    let mut z = vec![0x78, 0x01];
    let blocks: Vec<&[u8]> = raw.chunks(65_535).collect();
    for (i, block) in blocks.iter().enumerate() {
        z.push(u8::from(i + 1 == blocks.len()));
        let len = block.len() as u16;
        z.extend_from_slice(&len.to_le_bytes());
        z.extend_from_slice(&(!len).to_le_bytes());
        z.extend_from_slice(block);
    }
    let (mut a, mut b) = (1u32, 0u32);
    for byte in &raw {
        a = (a + u32::from(*byte)) % 65_521;
        b = (b + a) % 65_521;
    }
    z.extend_from_slice(&((b << 16) | a).to_be_bytes());
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut chunk = |kind: &[u8], data: &[u8]| {
        png.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let mut body = kind.to_vec();
        body.extend_from_slice(data);
        png.extend_from_slice(&body);
        png.extend_from_slice(&crc(&body).to_be_bytes());
    };
    let mut header = Vec::new();
    header.extend_from_slice(&width.to_be_bytes());
    header.extend_from_slice(&height.to_be_bytes());
    header.extend_from_slice(&[8, 2, 0, 0, 0]); // 8-bit RGB
    chunk(b"IHDR", &header);
    chunk(b"IDAT", &z);
    chunk(b"IEND", &[]);
    png
}

/// The page's way of writing a size (formatBytes in app.js).
fn shown_size(n: u64) -> String {
    match n {
        0..1024 => format!("{n} B"),
        1024..1_048_576 => format!("{:.1} KB", n as f64 / 1024.0),
        _ => format!("{:.1} MB", n as f64 / 1_048_576.0),
    }
}

/// A one-page PDF, blank, with the binary comment line real PDFs carry
/// after the header (so it is no UTF-8 text, for chatd nor the page).
const PDF: &[u8] = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n2 0 obj\n<< /Type /Pages /Kids [3 0 R] /Count 1 >>\nendobj\n3 0 obj\n<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 100] >>\nendobj\nxref\n0 4\n0000000000 65535 f \n0000000009 00000 n \n0000000058 00000 n \n0000000115 00000 n \ntrailer\n<< /Size 4 /Root 1 0 R >>\nstartxref\n186\n%%EOF\n";

/// The composer's chips: `[(name, meta, "as a file" shown, a thumbnail shown)]`.
async fn composer_chips(b: &Browser) -> anyhow::Result<Vec<(String, String, bool, bool)>> {
    let v = b
        .eval(
            "return [...document.querySelectorAll('#attachments .attach-chip')].map(c => {
                 const img = c.querySelector('img.attach-thumb');
                 return [c.querySelector('.attach-name').innerText, c.querySelector('.attach-meta').innerText,
                         !!c.querySelector('.attach-asfile'), !!(img && img.complete && img.naturalWidth > 0)];
             });",
        )
        .await?;
    Ok(serde_json::from_value(v)?)
}

/// Records every text the upload line shows from now on (`window.__upload`).
async fn watch_upload(b: &Browser) -> anyhow::Result<()> {
    b.eval(
        "window.__upload = [];
         const box = document.querySelector('#upload');
         new MutationObserver(() => { if (!box.hidden) window.__upload.push(
             [box.querySelector('.upload-text').textContent, document.querySelector('#upload-bar').value]); })
             .observe(box, {subtree: true, childList: true, characterData: true, attributes: true});",
    )
    .await?;
    Ok(())
}

/// The sent message's chips: `[(path, text)]`.
async fn message_chips(b: &Browser) -> anyhow::Result<Vec<(String, String)>> {
    let v = b
        .eval(
            "return [...document.querySelectorAll(\"#messages .message[data-role='user'] .attachment-chip\")]
                 .map(c => [c.dataset.path, c.innerText.replace(/\\s+/g, ' ').trim()]);",
        )
        .await?;
    Ok(serde_json::from_value(v)?)
}

/// At 1280 and 390 px: a 20 MB photo and a PDF attached with the button,
/// chips with size, a thumbnail and "as a file"; the upload's progress
/// shown; sent, both are chips under the message that open the pane, are
/// listed in the pane, and are on disk byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_a_photo_and_a_pdf_with_progress() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let t = Composer::start(&[]).await?;
    let photo = t.file("photo.png", &photo_png(2600, 2600))?;
    let pdf = t.file("paper.pdf", PDF)?;
    let photo_len = std::fs::metadata(&photo)?.len();
    assert!(photo_len > 20_000_000, "a 20 MB photo: {photo_len}");
    for viewport in [DESKTOP, PHONE] {
        let chat = t.client.create_chat().await?;
        let b = t.open(viewport, Some(&chat)).await?;
        b.choose_files("#attach-input", &[&photo, &pdf]).await?;
        b.wait_count("#attachments .attach-chip", |n| n == 2, WAIT)
            .await?;
        let chips = b
            .poll("the chips measured", WAIT, || async {
                let chips = composer_chips(&b).await?;
                // Measured: the photo's thumbnail drawn, the PDF known as a document.
                Ok(if chips[0].3 && chips[1].1.ends_with("read as text") {
                    Ok(chips)
                } else {
                    Err(format!("{chips:?}"))
                })
            })
            .await?;
        assert_eq!(
            chips,
            [
                ("photo.png".into(), shown_size(photo_len), false, true),
                (
                    "paper.pdf".into(),
                    format!("{} · read as text", shown_size(PDF.len() as u64)),
                    false,
                    false
                )
            ],
            "a thumbnail for the photo, which chatd scales for the model; the PDF is read as text"
        );
        b.screenshot("attached").await?;

        // Slow enough to watch: 40 MB/s.
        b.throttle_uploads(40_000_000).await?;
        watch_upload(&b).await?;
        b.type_into("#composer", "Here they are").await?;
        b.click("#send").await?;
        b.wait_count(
            "#messages .message[data-role='user'] .attachment-chip",
            |n| n == 2,
            LONG,
        )
        .await?;
        let seen: Vec<(String, f64)> =
            serde_json::from_value(b.eval("return window.__upload").await?)?;
        assert!(
            seen.iter()
                .any(|(text, value)| text.starts_with("Uploading ")
                    && text.ends_with(" %)")
                    && *value > 0.0
                    && *value < 100.0),
            "the progress was shown part-way: {seen:?}"
        );
        b.wait_hidden("#upload", WAIT).await?;
        b.wait_hidden("#attachments", WAIT).await?;
        assert_eq!(
            message_chips(&b).await?,
            [
                (
                    "uploads/photo.png".into(),
                    format!("photo.png {} as a file · Open", shown_size(photo_len))
                ),
                (
                    "uploads/paper.pdf".into(),
                    format!(
                        "paper.pdf {} as a file · Open",
                        shown_size(PDF.len() as u64)
                    )
                )
            ]
        );
        assert_eq!(
            b.text("#messages .message[data-role='user'] .body").await?,
            "Here they are",
            "what chatd added for the model is not shown"
        );
        let uploads = t.uploads(&chat);
        assert_eq!(listed(&uploads), ["paper.pdf", "photo.png"]);
        assert_eq!(sha256_of(&uploads.join("photo.png")), sha256_of(&photo));
        assert_eq!(sha256_of(&uploads.join("paper.pdf")), sha256_of(&pdf));
        b.screenshot("sent").await?;

        // A chip opens its file in the pane, which lists both.
        b.click("#messages .attachment-chip[data-path='uploads/paper.pdf'] .chip-open")
            .await?;
        b.wait_visible("#file-preview iframe.preview-frame", WAIT)
            .await?;
        b.wait_count("#files-given li.file-row", |n| n == 2, WAIT)
            .await?;
        assert_eq!(
            texts(&b, "#files-given .file-open").await?,
            ["uploads/paper.pdf", "uploads/photo.png"]
        );
        b.click("#files-given li[data-path='uploads/photo.png'] .file-open")
            .await?;
        b.wait_js(
            "the photo previewed",
            "const i = document.querySelector('#file-preview img.preview-image');
             return i && i.complete && i.naturalWidth === 2600;",
            LONG,
        )
        .await?;
        if viewport.phone {
            let width = b
                .eval("return document.documentElement.scrollWidth")
                .await?;
            assert!(
                width.as_u64().is_some_and(|w| w <= 390),
                "scrollWidth {width}"
            );
        }
        b.screenshot("pane").await?;
    }
    Ok(())
}

/// Cancel part-way through an upload (on a phone): the page says so, the
/// files and the text stay in the composer, and chatd keeps nothing in
/// uploads/; Esc cancels the next try the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_mid_upload_leaves_nothing() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let t = Composer::start(&[]).await?;
    let photo = t.file("photo.png", &photo_png(2600, 2600))?;
    let chat = t.client.create_chat().await?;
    let b = t.open(PHONE, Some(&chat)).await?;
    b.throttle_uploads(2_000_000).await?;
    for how in ["the Cancel button", "Esc"] {
        b.choose_files("#attach-input", &[&photo]).await?;
        b.wait_count("#attachments .attach-chip", |n| n == 1, WAIT)
            .await?;
        b.type_into("#composer", "A photo").await?;
        b.click("#send").await?;
        b.wait_js(
            "the upload part-way",
            "const v = document.querySelector('#upload-bar').value;
             return !document.querySelector('#upload').hidden && v >= 5 && v < 60;",
            LONG,
        )
        .await?;
        b.screenshot("uploading").await?;
        if how == "Esc" {
            b.eval("document.querySelector('#composer').focus()")
                .await?;
            b.type_into("#composer", "\u{E00C}").await?;
        } else {
            b.click("#upload-cancel").await?;
        }
        b.wait_hidden("#upload", WAIT).await?;
        b.wait_text(
            "#toast .toast-text",
            |t| t == "Upload canceled: nothing was sent.",
            WAIT,
        )
        .await?;
        assert_eq!(
            b.count("#attachments .attach-chip").await?,
            1,
            "{how}: the file stays"
        );
        assert_eq!(
            b.eval("return document.querySelector('#composer').value")
                .await?,
            json!("A photo"),
            "{how}: the text stays"
        );
        assert_eq!(
            b.count("#messages .message").await?,
            0,
            "{how}: nothing sent"
        );
        let uploads = t.uploads(&chat);
        b.poll("uploads/ empty", WAIT, || async {
            let names = listed(&uploads);
            Ok(if names.is_empty() {
                Ok(())
            } else {
                Err(format!("{names:?}"))
            })
        })
        .await?;
        // Cleared for the next try.
        b.click("#attachments .attach-remove").await?;
        b.wait_hidden("#attachments", WAIT).await?;
        b.eval("const c = document.querySelector('#composer'); c.value = ''; c.dispatchEvent(new Event('input'));")
            .await?;
    }
    let snapshot = t.client.snapshot(&chat).await?;
    assert_eq!(snapshot["messages"], json!([]), "{snapshot}");
    Ok(())
}

/// Files made in the page and handed over as a paste and a drop would.
const PASTE_AND_DROP: &str = "
    const paste = new DataTransfer();
    paste.items.add(new File(['a note from the clipboard\\n'], 'note.txt', {type: 'text/plain'}));
    const composer = document.querySelector('#composer');
    composer.focus();
    composer.dispatchEvent(new ClipboardEvent('paste', {clipboardData: paste, bubbles: true, cancelable: true}));
    const drop = new DataTransfer();
    drop.items.add(new File([new Uint8Array([0, 159, 146, 150, 1, 2])], 'data.bin', {type: 'application/octet-stream'}));
    drop.items.add(new File(['x'.repeat(200000)], 'big.txt', {type: 'text/plain'}));
    const target = document.querySelector('#messages');
    for (const type of ['dragenter', 'dragover', 'drop']) {
        target.dispatchEvent(new DragEvent(type, {dataTransfer: drop, bubbles: true, cancelable: true}));
    }";

/// A paste into the composer and a drop on the chat attach files: a small
/// text goes in the message (its tokens shown), a binary and a text over
/// ~32k tokens go as files; ✕ removes one; sent from the start screen, the
/// new chat's message has the rest, on disk as the page made them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paste_and_drop_attach_files() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let t = Composer::start(&[]).await?;
    let b = t.open(DESKTOP, None).await?;
    b.eval(PASTE_AND_DROP).await?;
    b.wait_count("#attachments .attach-chip", |n| n == 3, WAIT)
        .await?;
    let chips = b
        .poll("the chips measured", WAIT, || async {
            let chips = composer_chips(&b).await?;
            Ok(
                if chips.iter().all(|c| !c.1.is_empty()) && chips[2].1.contains("tokens") {
                    Ok(chips)
                } else {
                    Err(format!("{chips:?}"))
                },
            )
        })
        .await?;
    assert_eq!(
        chips,
        [
            ("note.txt".into(), "26 B · ≈9 tokens".into(), false, false),
            ("data.bin".into(), "6 B".into(), true, false),
            (
                "big.txt".into(),
                "195.3 KB · ≈57.5k tokens".into(),
                true,
                false
            )
        ]
    );
    b.screenshot("pasted-and-dropped").await?;
    b.click("#attachments .attach-chip[data-name='big.txt'] .attach-remove")
        .await?;
    b.wait_count("#attachments .attach-chip", |n| n == 2, WAIT)
        .await?;
    b.type_into("#composer", "What are these?").await?;
    b.click("#send").await?;
    b.wait_count(
        "#messages .message[data-role='user'] .attachment-chip",
        |n| n == 2,
        LONG,
    )
    .await?;
    assert_eq!(
        message_chips(&b).await?,
        [
            (
                "uploads/note.txt".into(),
                "note.txt 26 B · ≈9 tokens · Open".into()
            ),
            (
                "uploads/data.bin".into(),
                "data.bin 6 B as a file · Open".into()
            )
        ]
    );
    let chat = b
        .eval("return decodeURIComponent(location.hash.replace('#/c/', ''))")
        .await?;
    let uploads = t.uploads(chat.as_str().unwrap_or_default());
    assert_eq!(listed(&uploads), ["data.bin", "note.txt"]);
    assert_eq!(
        std::fs::read_to_string(uploads.join("note.txt"))?,
        "a note from the clipboard\n"
    );
    assert_eq!(
        std::fs::read(uploads.join("data.bin"))?,
        [0u8, 159, 146, 150, 1, 2]
    );
    b.screenshot("sent").await?;
    Ok(())
}

/// A draft is kept per chat across a reload and a switch to another chat,
/// and goes once sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draft_survives_a_reload() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let t = Composer::start(&[]).await?;
    let (first, second) = (t.client.create_chat().await?, t.client.create_chat().await?);
    let b = t.open(PHONE, Some(&first)).await?;
    let value = || async {
        b.eval("return document.querySelector('#composer').value")
            .await
    };
    b.type_into("#composer", "half a thought").await?;
    b.client().refresh().await?;
    b.wait_state("live").await?;
    b.wait_js(
        "the draft back",
        "return document.querySelector('#composer').value === 'half a thought'",
        WAIT,
    )
    .await?;
    b.screenshot("draft-after-reload").await?;

    b.eval_with(
        "location.hash = arguments[0]",
        vec![json!(format!("#/c/{second}"))],
    )
    .await?;
    b.wait_js(
        "the other chat's empty box",
        "return document.querySelector('#composer').value === ''",
        WAIT,
    )
    .await?;
    b.type_into("#composer", "another").await?;
    b.eval_with(
        "location.hash = arguments[0]",
        vec![json!(format!("#/c/{first}"))],
    )
    .await?;
    b.wait_js(
        "the first chat's draft",
        "return document.querySelector('#composer').value === 'half a thought'",
        WAIT,
    )
    .await?;

    b.type_into("#composer", browser::ENTER).await?;
    b.wait_count("#messages .message[data-role='user']", |n| n == 1, LONG)
        .await?;
    assert_eq!(value().await?, json!(""));
    b.client().refresh().await?;
    b.wait_state("live").await?;
    b.wait_count("#messages .message[data-role='user']", |n| n == 1, WAIT)
        .await?;
    assert_eq!(value().await?, json!(""), "a sent draft is gone");
    b.eval_with(
        "location.hash = arguments[0]",
        vec![json!(format!("#/c/{second}"))],
    )
    .await?;
    b.wait_js(
        "the second chat's draft",
        "return document.querySelector('#composer').value === 'another'",
        WAIT,
    )
    .await?;
    Ok(())
}

/// While a slow answer streams: a message typed (with a file) waits over
/// the composer; Up in the empty box opens it in its editor; Esc in the
/// box stops the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn esc_stops_and_up_edits_the_waiting_message() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let t = Composer::start(&[]).await?;
    let note = t.file("note.md", b"# Note\n")?;
    for viewport in [DESKTOP, PHONE] {
        let chat = t.client.create_chat().await?;
        let b = t.open(viewport, Some(&chat)).await?;
        b.type_into("#composer", "Tell me a long story [sim tokens=400 tps=20]")
            .await?;
        b.type_into("#composer", browser::ENTER).await?;
        b.wait_text("#status .state", |s| s == "Answering", LONG)
            .await?;

        b.choose_files("#attach-input", &[&note]).await?;
        b.wait_count("#attachments .attach-chip", |n| n == 1, WAIT)
            .await?;
        b.type_into("#composer", "And then?").await?;
        b.type_into("#composer", browser::ENTER).await?;
        b.wait_count("#pending .pending", |n| n == 1, LONG).await?;
        assert_eq!(b.text("#pending .pending .text").await?, "And then?");
        assert_eq!(b.text("#pending .pending .pending-files").await?, "note.md");
        b.wait_hidden("#attachments", WAIT).await?;

        b.type_into("#composer", "\u{E013}").await?; // Up
        b.wait_visible("#pending .pending-input", WAIT).await?;
        assert_eq!(
            b.eval("return document.querySelector('#pending .pending-input').value")
                .await?,
            json!("And then?")
        );
        b.screenshot("editing-the-waiting-message").await?;
        b.type_into("#pending .pending-input", "\u{E00C}").await?; // Esc closes the editor only
        b.wait_hidden("#pending .pending-input", WAIT).await?;
        assert_eq!(b.text("#status .state").await?, "Answering");

        b.eval("document.querySelector('#composer').focus()")
            .await?;
        b.type_into("#composer", "\u{E00C}").await?; // Esc
        b.wait_text("#status .state", |s| s == "Stopped", LONG)
            .await?;
        let runs: Value = t.client.snapshot(&chat).await?["runs"].clone();
        assert_eq!(runs[0]["status"], "stopped", "{runs}");
        b.screenshot("stopped").await?;

        // The waiting message goes now: its file is a chip under it, and the
        // note's text chatd put in the message for the model is not shown.
        b.click("#send-now").await?;
        b.wait_count("#messages .message[data-role='user']", |n| n == 2, LONG)
            .await?;
        b.wait_hidden("#pending .pending", WAIT).await?;
        assert_eq!(
            texts(&b, "#messages .message[data-role='user'] .body").await?,
            ["Tell me a long story [sim tokens=400 tps=20]", "And then?"]
        );
        assert_eq!(
            message_chips(&b).await?,
            [(
                "uploads/note.md".into(),
                "note.md 7 B · ≈3 tokens · Open".into()
            )]
        );
        let stored = t.client.snapshot(&chat).await?;
        let sent = &stored["messages"][2];
        assert!(
            sent["text"].as_str().is_some_and(|t| t
                .starts_with("And then?\n\n[attached file uploads/note.md")
                && t.contains("# Note")),
            "chatd put the note in the message: {sent}"
        );
    }
    Ok(())
}

/// A file over chatd's limit: the refusal, in chatd's words naming the
/// file and the limit, next to the composer; the file and the text stay,
/// nothing is kept on disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_over_limit_file_shows_chatds_refusal() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let t = Composer::start(&[("QSE_CHAT_UPLOAD_FILE_MAX_BYTES", "1048576")]).await?;
    let big = t.file("big.bin", &vec![7u8; 3 * 1024 * 1024])?;
    for viewport in [DESKTOP, PHONE] {
        let chat = t.client.create_chat().await?;
        let b = t.open(viewport, Some(&chat)).await?;
        b.choose_files("#attach-input", &[&big]).await?;
        b.wait_count("#attachments .attach-chip", |n| n == 1, WAIT)
            .await?;
        b.type_into("#composer", "Too big?").await?;
        b.click("#send").await?;
        let refusal = b
            .wait_text("#composer-error", |t| !t.is_empty(), LONG)
            .await?;
        assert_eq!(
            refusal,
            "files[0] (big.bin) is larger than the limit of 1048576 bytes"
        );
        assert_eq!(b.count("#attachments .attach-chip").await?, 1);
        assert_eq!(
            b.eval("return document.querySelector('#composer').value")
                .await?,
            json!("Too big?")
        );
        assert_eq!(b.count("#messages .message").await?, 0);
        assert_eq!(listed(&t.uploads(&chat)), Vec::<String>::new());
        b.screenshot("refused").await?;
    }
    Ok(())
}
