//! Documents in a chat, end to end: the real chatd (its own binary as the
//! reader) and engine-sim. An attached PDF goes into its message as text,
//! the model reads on with read_document and read_file, a version is read
//! once, and a damaged, bombed or oversized document is one line while
//! chatd's memory and answers carry on.

use anyhow::Context;
use tandem_tests::docfixtures;
use tandem_tests::harness::{tool_results, Chatd, FormPart};

use crate::messages::{file_part, last_of, send, start};
use tandem_tests::procstat::rss_kib;

fn rows_kept(chatd: &Chatd) -> anyhow::Result<i64> {
    let conn = rusqlite::Connection::open_with_flags(
        chatd.data_dir().join("chat.sqlite3"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )?;
    Ok(conn.query_row("SELECT count(*) FROM document_texts", [], |r| r.get(0))?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attached_pdf_goes_in_as_text_and_is_read_on_by_page() -> anyhow::Result<()> {
    let (sim, chatd, client) = start(&[], &[]).await?;
    let dir = tempfile::tempdir()?;
    let pdf = docfixtures::pdf(dir.path())?;
    let chat = client.create_chat().await?;
    let cue = r#"what is due? [sim tool_call=read_document args={"path":"uploads/report.pdf","offset":3} tool_steps=1]"#;
    let snapshot = send(
        &client,
        &chat,
        cue,
        vec![file_part(&pdf, "application/pdf")?],
    )
    .await?;

    let user = last_of(&snapshot, "user")?;
    let text = user["text"].as_str().unwrap_or("");
    assert!(
        text.contains("[attached PDF uploads/report.pdf, ")
            && text.contains(": PDF, 4 pages; page 4 has no text layer: a probable scan]"),
        "{text}"
    );
    assert!(
        text.contains("## Page 3\nAcme invoice 2026-117\n"),
        "{text}"
    );
    assert!(
        text.contains("## Page 4\n[no text layer: a probable scan]"),
        "{text}"
    );
    assert_eq!(user["attachments"][0]["kind"], "document");
    assert_eq!(user["attachments"][0]["document"], "pdf");
    assert_eq!(user["attachments"][0]["inline"], true);

    // The engine got the text, not "binary data".
    let requests = sim.requests().await?;
    let asked = requests
        .iter()
        .map(|r| serde_json::to_string(&r["body"]["messages"]).unwrap_or_default())
        .find(|m| m.contains("what is due?"))
        .context("the chat's request")?;
    assert!(asked.contains("Total due: 4,200 EUR"), "{asked}");
    assert!(!asked.contains("binary data"), "{asked}");

    // read_document from line 3: no head line, page 2 on.
    let results = tool_results(&snapshot);
    let read = results.first().context("the read_document result")?;
    assert!(
        read.starts_with("Revenue grew") || read.contains("## Page 2"),
        "{read}"
    );
    assert!(read.contains("## Page 3\nAcme invoice 2026-117"), "{read}");
    // Attached and read again: the same bytes were read once.
    assert_eq!(rows_kept(&chatd)?, 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_file_on_a_workbook_gives_its_sheets_and_says_what_was_cut() -> anyhow::Result<()> {
    let (_sim, chatd, client) = start(&[], &[]).await?;
    let chat = client.create_chat().await?;
    let ws = chatd.data_dir().join("workspaces").join(&chat);
    std::fs::create_dir_all(ws.join("books"))?;
    let made = docfixtures::workbook(&ws.join("books"))?;
    let name = made
        .file_name()
        .context("name")?
        .to_string_lossy()
        .to_string();
    let cue = format!(
        r#"who owes? [sim tool_call=read_file args={{"path":"books/{name}","limit":40}} tool_steps=1]"#
    );
    let snapshot = send(&client, &chat, &cue, vec![]).await?;
    let results = tool_results(&snapshot);
    let read = results.first().context("the read_file result")?;
    assert!(
        read.starts_with(&format!("[books/{name}: workbook, 3 sheets; ")),
        "{read}"
    );
    assert!(read.contains("rows 2,001 to 2,100"), "{read}");
    assert!(
        read.contains("## Sheet Customers\nCustomer\tOwes\nAcme\t4200\n"),
        "{read}"
    );
    assert!(read.contains("[lines 1-40 of "), "{read}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_a_bombed_and_a_huge_document_are_one_line_each() -> anyhow::Result<()> {
    let (_sim, chatd, client) = start(&[], &[]).await?;
    let dir = tempfile::tempdir()?;
    let chat = client.create_chat().await?;
    let pid = chatd.pid().context("chatd's pid")?;
    // Warm: one document read before the figure is taken.
    send(
        &client,
        &chat,
        "warm",
        vec![file_part(
            &docfixtures::pdf(dir.path())?,
            "application/pdf",
        )?],
    )
    .await?;
    let before = rss_kib(pid).context("chatd's RSS")?;

    let files = vec![
        file_part(&docfixtures::truncated_pdf(dir.path())?, "application/pdf")?,
        file_part(
            &docfixtures::zip_bomb(dir.path())?,
            "application/octet-stream",
        )?,
        file_part(&docfixtures::big_pdf(dir.path())?, "application/pdf")?,
    ];
    let names: Vec<String> = files
        .iter()
        .map(|f| match f {
            FormPart::File { name, .. } => name.clone(),
            FormPart::Setting(..) => String::new(),
        })
        .collect();
    let snapshot = send(&client, &chat, "read these", files).await?;
    let text = last_of(&snapshot, "user")?["text"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let line_of = |name: &str| {
        text.lines()
            .find(|l| l.contains(&format!("uploads/{name}")))
            .unwrap_or("")
            .to_string()
    };
    assert!(
        line_of(&names[0]).contains("it could not be read: it is damaged ("),
        "{text}"
    );
    assert!(
        line_of(&names[1]).contains("it could not be read: it unpacks to more than it may ("),
        "{text}"
    );
    assert!(
        line_of(&names[2]).contains("it could not be read: it is 6")
            && line_of(&names[2]).contains("bytes, over the 50 MiB a document may be"),
        "{text}"
    );
    // chatd answers and its memory did not take the documents in.
    let after = rss_kib(pid).context("chatd's RSS")?;
    assert!(
        after < before + 32 * 1024,
        "chatd grew from {before} KiB to {after} KiB"
    );
    send(&client, &chat, "still there?", vec![]).await?;
    Ok(())
}
