//! `GET …/files/preview?path=` against the real chatd (its own binary as
//! the reader): a workbook's three sheets, a CSV, a DOCX and a PPTX with
//! notes, each exactly; the refusals (413, 415, 422, 400, 404) in the
//! CONTRACT's error shape; and a zip bomb that costs one request while
//! chatd answers on, its memory unchanged.

use std::path::{Path, PathBuf};

use anyhow::Context;
use reqwest::Method;
use serde_json::{json, Value};
use tandem_tests::docfixtures;
use tandem_tests::harness::{Answer, Chatd, Client, Sim};
use tandem_tests::procstat::rss_kib;

/// chatd (no engine call is made), a chat and its workspace folder.
struct Rig {
    _sim: Sim,
    chatd: Chatd,
    client: Client,
    chat: String,
}

impl Rig {
    async fn start() -> anyhow::Result<Rig> {
        let sim = Sim::start(&["--tokens-per-second", "0"])?;
        let chatd = Chatd::start(&sim.url(), &[]).await?;
        let client = chatd.client();
        let chat = client.create_chat().await?;
        let rig = Rig {
            _sim: sim,
            chatd,
            client,
            chat,
        };
        std::fs::create_dir_all(rig.workspace())?;
        Ok(rig)
    }

    fn workspace(&self) -> PathBuf {
        self.chatd.data_dir().join("workspaces").join(&self.chat)
    }

    /// Writes a fixture into the workspace; its path there.
    fn put(&self, write: fn(&Path) -> anyhow::Result<PathBuf>) -> anyhow::Result<String> {
        let made = write(&self.workspace())?;
        Ok(made
            .file_name()
            .context("a file name")?
            .to_string_lossy()
            .into_owned())
    }

    async fn preview(&self, path: &str) -> anyhow::Result<Answer> {
        self.preview_in(&self.chat, &format!("path={}", encoded(path)))
            .await
    }

    async fn preview_in(&self, chat: &str, query: &str) -> anyhow::Result<Answer> {
        self.client
            .get(&format!("/conversations/{chat}/files/preview?{query}"))
            .await
    }

    /// The preview of `path`, which must be a 200.
    async fn shown(&self, path: &str) -> anyhow::Result<Value> {
        let answer = self.preview(path).await?;
        anyhow::ensure!(answer.status == 200, "{path}: {answer:?}");
        Ok(answer.body)
    }
}

fn encoded(path: &str) -> String {
    url::form_urlencoded::byte_serialize(path.as_bytes()).collect()
}

/// Checks a refusal: its status, its `type`, and that its message holds `says`.
fn check_refusal(answer: &Answer, status: u16, kind: &str, says: &str) {
    assert_eq!(answer.status, status, "{answer:?}");
    let error = &answer.body["error"];
    assert_eq!(error["type"], kind, "{answer:?}");
    let message = error["message"].as_str().unwrap_or("");
    assert!(message.contains(says), "{message:?} should say {says:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workbook_previews_as_its_three_sheets_with_their_cells() -> anyhow::Result<()> {
    let rig = Rig::start().await?;
    let name = rig.put(docfixtures::workbook)?;
    let size = std::fs::metadata(rig.workspace().join(&name))?.len();
    let body = rig.shown(&name).await?;
    assert_eq!(body["path"], name.as_str());
    assert_eq!(body["kind"], "workbook");
    assert_eq!(body["bytes"], size);
    assert_eq!(body["view"], "sheets");
    let sheets = body["sheets"].as_array().context("sheets")?;
    let names: Vec<&str> = sheets.iter().filter_map(|s| s["name"].as_str()).collect();
    assert_eq!(names, ["Summary", "Customers", "Data"]);

    assert_eq!(
        sheets[0]["rows"],
        json!([
            ["Item", "Amount", "Date", "Paid"],
            ["Hosting", "42", "2026-03-01", "TRUE"],
            ["Travel", "12.5", "2026-03-02 14:30:00", "FALSE"],
            ["Total", "54.5", "", "FALSE"],
            ["Twice the hosting", "84"]
        ]),
        "dates, booleans and formula results as a person reads them"
    );
    assert_eq!(sheets[0]["total_rows"], 5);
    assert_eq!(sheets[0]["cut"], false);
    assert_eq!(
        sheets[1]["rows"],
        json!([["Customer", "Owes"], ["Acme", "4200"], ["Globex", "0"]])
    );

    // Data: the first 200 rows of 2,100, 50 of its 52 columns.
    let data = &sheets[2];
    let rows = data["rows"].as_array().context("rows")?;
    assert_eq!(rows.len(), 200);
    assert_eq!(data["total_rows"], docfixtures::DATA_ROWS);
    assert_eq!(data["total_columns"], docfixtures::DATA_COLS);
    assert_eq!(data["cut"], true);
    let last = rows[199].as_array().context("a row")?;
    assert_eq!(last.len(), 50);
    assert_eq!(last[0], "19900");
    assert_eq!(last[49], "19949");
    assert_eq!(body["cut"], false, "nothing past the text budget");
    assert_eq!(body["notes"], json!([]));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_csv_previews_as_one_sheet() -> anyhow::Result<()> {
    let rig = Rig::start().await?;
    let name = rig.put(docfixtures::csv)?;
    let body = rig.shown(&name).await?;
    assert_eq!(body["kind"], "csv");
    assert_eq!(
        body["sheets"],
        json!([{
            "name": "",
            "rows": [
                ["name", "amount", "note"],
                ["Acme", "4200", "late, again"],
                ["Globex", "12", "two lines"],
                ["Initech"]
            ],
            "total_rows": 4,
            "total_columns": 3,
            "cut": false
        }])
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_docx_previews_as_headings_paragraphs_lists_and_a_table() -> anyhow::Result<()> {
    let rig = Rig::start().await?;
    let name = rig.put(docfixtures::docx)?;
    let body = rig.shown(&name).await?;
    assert_eq!(body["kind"], "docx");
    assert_eq!(body["view"], "document");
    assert_eq!(
        body["blocks"],
        json!([
            {"type": "heading", "level": 1, "text": "Supplier review"},
            {"type": "heading", "level": 1, "text": "Findings"},
            {"type": "paragraph", "text": "Acme & Globex both delivered late."},
            {"type": "heading", "level": 2, "text": "Actions"},
            {"type": "list_item", "level": 0, "text": "Call Acme"},
            {"type": "list_item", "level": 0, "text": "Renew the Globex contract"},
            {"type": "table", "rows": [
                ["Supplier", "Days late", "Penalty"],
                ["Acme", "12", "600 EUR"],
                ["Globex", "3 (weather)"]
            ]},
            {"type": "heading", "level": 3, "text": "Next review"},
            {"type": "paragraph", "text": "In\tJune."}
        ])
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pptx_previews_slide_by_slide_with_its_notes() -> anyhow::Result<()> {
    let rig = Rig::start().await?;
    let name = rig.put(docfixtures::pptx)?;
    let body = rig.shown(&name).await?;
    assert_eq!(body["kind"], "pptx");
    assert_eq!(body["view"], "slides");
    assert_eq!(
        body["slides"],
        json!([
            {"number": 1, "title": "Acme plan 2026", "text": "Board meeting", "notes": "Welcome everyone."},
            {"number": 2, "title": "Numbers", "text": "Quarter\tRevenue\nQ1\t1.2M", "notes": "Say the Q1 figure twice."},
            {"number": 3, "title": "Next steps", "text": "Hire two engineers\nShip in May", "notes": null}
        ])
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_name_the_limit_the_types_and_the_field() -> anyhow::Result<()> {
    let rig = Rig::start().await?;
    let ws = rig.workspace();

    // 21 MiB: refused by its size before any reader starts.
    let big = std::fs::File::create(ws.join("big.csv"))?;
    big.set_len(21 << 20)?;
    let answer = rig.preview("big.csv").await?;
    check_refusal(&answer, 413, "too_large", "up to 20 MiB");
    assert_eq!(answer.body["error"]["limit"], 20 << 20);

    // Another type: the types a preview is made of are named.
    std::fs::write(ws.join("shot.png"), b"\x89PNG\r\n\x1a\n")?;
    std::fs::write(ws.join("notes.txt"), "plain words\n")?;
    for name in ["shot.png", "notes.txt"] {
        let answer = rig.preview(name).await?;
        check_refusal(&answer, 415, "unsupported_type", ".xlsx");
        assert_eq!(answer.body["error"]["field"], "path");
    }

    // Not what its name says: random bytes called .xlsx.
    let noise: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    std::fs::write(ws.join("fake.xlsx"), &noise)?;
    let answer = rig.preview("fake.xlsx").await?;
    check_refusal(&answer, 422, "not_its_type", "is not a workbook");
    // A zip that holds no document.
    std::fs::write(ws.join("empty.docx"), zip_of_one("hello.txt"))?;
    let answer = rig.preview("empty.docx").await?;
    check_refusal(&answer, 422, "not_its_type", "is not a Word document");

    // A bad or missing path: 400 naming `path`.
    for query in ["", "path=", "path=%2Fetc%2Fpasswd", "path=..%2Fx.xlsx"] {
        let answer = rig.preview_in(&rig.chat, query).await?;
        assert_eq!(answer.status, 400, "{query}: {answer:?}");
        assert_eq!(answer.body["error"]["field"], "path", "{query}");
    }
    // No such file, no such chat, a trashed chat: 404.
    check_refusal(
        &rig.preview("gone.xlsx").await?,
        404,
        "not_found",
        "gone.xlsx",
    );
    let answer = rig.preview_in("c_nope", "path=a.xlsx").await?;
    assert_eq!(answer.status, 404, "{answer:?}");
    let trashed = rig.client.create_chat().await?;
    let deleted = rig
        .client
        .call(Method::DELETE, &format!("/conversations/{trashed}"), None)
        .await?;
    assert!(deleted.status < 300, "{deleted:?}");
    let answer = rig.preview_in(&trashed, "path=a.xlsx").await?;
    assert_eq!(answer.status, 404, "{answer:?}");
    Ok(())
}

/// A stored zip of one entry, `name`.
fn zip_of_one(name: &str) -> Vec<u8> {
    use std::io::Write;
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    zip.start_file(name, options).expect("a zip entry starts");
    zip.write_all(b"hello").expect("a zip entry is written");
    zip.finish().expect("the zip ends").into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zip_bomb_is_one_refusal_and_chatd_carries_on() -> anyhow::Result<()> {
    let rig = Rig::start().await?;
    let good = rig.put(docfixtures::docx)?;
    let bomb = rig.put(docfixtures::zip_bomb)?;
    let pid = rig.chatd.pid().context("chatd's pid")?;
    rig.shown(&good).await?; // warm: one preview made before the figure is taken
    let before = rss_kib(pid).context("chatd's RSS")?;

    let answer = rig.preview(&bomb).await?;
    check_refusal(&answer, 422, "zip_bomb", "unpacks to more than it may");

    let health = rig
        .client
        .http
        .get(format!("{}/health", rig.chatd.url()))
        .send()
        .await?;
    assert_eq!(health.status(), 200);
    let again = rig.shown(&good).await?;
    assert_eq!(again["blocks"][0]["text"], "Supplier review");
    let after = rss_kib(pid).context("chatd's RSS")?;
    assert!(
        after < before + 32 * 1024,
        "chatd grew from {before} KiB to {after} KiB"
    );
    Ok(())
}
