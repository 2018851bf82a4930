//! Search over a chat's files, end to end: the real chatd indexes what is
//! attached, written or put in the workspace by hand, `search_files` and
//! `GET …/files/search` find a word on page 3 of a PDF and in sheet 2 of a
//! workbook at the line read_document shows it on, and a deleted file is
//! found no more.

use anyhow::Context;
use reqwest::Method;
use serde_json::Value;
use tandem_tests::docfixtures;
use tandem_tests::harness::{tool_results, Client};

use crate::messages::{file_part, send, start};

/// `GET …/files/search` with `query` (already encoded); status and body.
async fn search(client: &Client, chat: &str, query: &str) -> anyhow::Result<(u16, Value)> {
    let answer = client
        .get(&format!("/conversations/{chat}/files/search?{query}"))
        .await?;
    Ok((answer.status, answer.body))
}

/// The hits of a search as `path|part|line|text`.
fn hits(body: &Value) -> Vec<String> {
    body["hits"]
        .as_array()
        .map(|hits| {
            hits.iter()
                .map(|h| {
                    format!(
                        "{}|{}|{}|{}",
                        h["path"].as_str().unwrap_or(""),
                        h["part"].as_str().unwrap_or("-"),
                        h["line"],
                        h["text"].as_str().unwrap_or("")
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_word_is_found_on_its_page_and_sheet_and_not_after_the_file_goes() -> anyhow::Result<()> {
    let (_sim, chatd, client) = start(&[], &[]).await?;
    let dir = tempfile::tempdir()?;
    let pdf = docfixtures::pdf(dir.path())?;
    let book = docfixtures::workbook(dir.path())?;
    let chat = client.create_chat().await?;
    // A note put in the workspace by hand, and a binary one named for it.
    let ws = chatd.data_dir().join("workspaces").join(&chat);
    std::fs::create_dir_all(ws.join("notes"))?;
    std::fs::write(
        ws.join("notes/todo.txt"),
        "call the bank\nfile taxes\npaid the acme invoice\n",
    )?;
    std::fs::write(ws.join("notes/acme.bin"), b"\0\0acme invoice\0")?;

    let cue = r#"which file has the Acme invoice? [sim tool_call=search_files args={"query":"acme invoice"} tool_steps=1]"#;
    let snapshot = send(
        &client,
        &chat,
        cue,
        vec![
            file_part(&pdf, "application/pdf")?,
            file_part(
                &book,
                "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
            )?,
        ],
    )
    .await?;
    let found = tool_results(&snapshot)
        .first()
        .cloned()
        .context("the search's result")?;
    assert!(
        found.starts_with("2 matching lines in 2 files:\n"),
        "{found}"
    );
    assert!(
        found.contains("notes/todo.txt (line 3): paid the acme invoice\n"),
        "{found}"
    );
    let pdf_line = found
        .lines()
        .find(|l| l.starts_with("uploads/report.pdf (page 3, line "))
        .context("the PDF's hit")?;
    assert!(pdf_line.ends_with("): Acme invoice 2026-117"), "{found}");
    // The binary file is found by its name, never by its bytes.
    assert!(!found.contains("notes/acme.bin"), "{found}");

    // The page's search: the same index, sheet 2 of the workbook too.
    let (status, body) = search(&client, &chat, "q=acme").await?;
    assert_eq!(status, 200, "{body}");
    let all = hits(&body);
    assert!(
        all.contains(&"uploads/accounts.xlsx|sheet Customers|10|Acme\t4200".to_string()),
        "{all:?}"
    );
    let on_page_3 = all
        .iter()
        .find(|h| h.starts_with("uploads/report.pdf|page 3|"))
        .context("page 3")?;
    assert_eq!(
        body["names"],
        serde_json::json!(["notes/acme.bin"]),
        "{body}"
    );
    assert_eq!(body["pending"], 0);

    // The line a hit names is the line read_document shows it on.
    let line: u64 = on_page_3.split('|').nth(2).context("line")?.parse()?;
    let cue = format!(
        r#"read it [sim tool_call=read_document args={{"path":"uploads/report.pdf","offset":{line},"limit":1}} tool_steps=1]"#
    );
    let snapshot = send(&client, &chat, &cue, Vec::new()).await?;
    let read = tool_results(&snapshot)
        .last()
        .cloned()
        .context("the read")?;
    assert!(read.starts_with("Acme invoice 2026-117"), "{read}");

    // Case, regular expressions and a folder.
    let (_, exact) = search(&client, &chat, "q=acme&ignore_case=0").await?;
    assert_eq!(hits(&exact), ["notes/todo.txt|-|3|paid the acme invoice"]);
    let (_, pattern) = search(&client, &chat, "q=invoice%20%5Cd%7B4%7D-%5Cd%2B&regex=1").await?;
    assert_eq!(hits(&pattern).len(), 1, "{pattern}");
    let (_, folder) = search(&client, &chat, "q=acme&path=notes").await?;
    assert_eq!(hits(&folder), ["notes/todo.txt|-|3|paid the acme invoice"]);

    // Deleted: found no more, by the page or by the model.
    let gone = client
        .call(
            Method::DELETE,
            &format!("/conversations/{chat}/files?path=uploads/report.pdf"),
            None,
        )
        .await?;
    assert!(gone.status < 300, "{gone:?}");
    let (_, after) = search(&client, &chat, "q=acme%20invoice").await?;
    assert_eq!(hits(&after), ["notes/todo.txt|-|3|paid the acme invoice"]);
    std::fs::remove_file(ws.join("notes/todo.txt"))?;
    let cue = r#"again [sim tool_call=search_files args={"query":"acme invoice"} tool_steps=1]"#;
    let snapshot = send(&client, &chat, cue, Vec::new()).await?;
    let again = tool_results(&snapshot)
        .last()
        .cloned()
        .context("the search")?;
    assert!(
        again.starts_with("Nothing matches \"acme invoice\" in "),
        "{again}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_searches_name_the_field_and_a_version_is_read_once() -> anyhow::Result<()> {
    let (_sim, chatd, client) = start(&[], &[]).await?;
    let chat = client.create_chat().await?;
    for (query, field) in [
        ("q=", "q"),
        ("q=%20%20", "q"),
        ("q=(open&regex=1", "q"),
        ("q=x&regex=maybe", "regex"),
        ("q=x&ignore_case=2", "ignore_case"),
        ("q=x&path=../etc", "path"),
    ] {
        let (status, body) = search(&client, &chat, query).await?;
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["error"]["field"], field, "{query}: {body}");
    }
    let long = "x".repeat(501);
    let (status, body) = search(&client, &chat, &format!("q={long}")).await?;
    assert_eq!(status, 400);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("at most 500"),
        "{body}"
    );
    let (status, _) = search(&client, "no_such_chat", "q=x").await?;
    assert_eq!(status, 404);

    // The same bytes under two names are one version, indexed once.
    let ws = chatd.data_dir().join("workspaces").join(&chat);
    std::fs::create_dir_all(&ws)?;
    std::fs::write(ws.join("a.txt"), "the blue heron\n")?;
    std::fs::write(ws.join("b.txt"), "the blue heron\n")?;
    let (status, body) = search(&client, &chat, "q=heron").await?;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        hits(&body),
        ["a.txt|-|1|the blue heron", "b.txt|-|1|the blue heron"]
    );
    let conn = rusqlite::Connection::open_with_flags(
        chatd.data_dir().join("chat.sqlite3"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )?;
    let versions: i64 = conn.query_row("SELECT count(*) FROM search_files", [], |r| r.get(0))?;
    assert_eq!(versions, 1);
    Ok(())
}
