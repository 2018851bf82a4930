//! Uploads that fit real files (docs/files.md "Uploads"): a message sent as
//! `multipart/form-data` with its files, a file put at a path with `base`
//! saying which version it replaces, a 200 MiB file streamed to disk with
//! chatd's memory sampled, and an upload cut half-way that leaves nothing.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use reqwest::Method;
use serde_json::Value;
use tandem_tests::harness::{
    file_head, form_body, generated_chunk, is_generated, raw_put, run_id, sha256_of, streamed_form,
    wait_until, Chatd, Client, FormPart, Sim,
};
use tandem_tests::procstat::{rss_kib, PeakRss};

const QUICK: Duration = Duration::from_secs(30);

async fn start(env: &[(&str, &str)]) -> anyhow::Result<(Sim, Chatd, Client)> {
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start(&sim.url(), env).await?;
    let client = chatd.client();
    Ok((sim, chatd, client))
}

/// A whole form sent; the status and body.
async fn form(
    client: &Client,
    method: Method,
    route: String,
    parts: &[FormPart],
) -> anyhow::Result<(u16, Value)> {
    let answer = client.send_form(method, &route, form_body(parts)).await?;
    Ok((answer.status, answer.body))
}

async fn send_form(
    client: &Client,
    chat: &str,
    parts: &[FormPart],
) -> anyhow::Result<(u16, Value)> {
    form(
        client,
        Method::POST,
        format!("/conversations/{chat}/messages"),
        parts,
    )
    .await
}

async fn put(
    client: &Client,
    chat: &str,
    path: &str,
    parts: &[FormPart],
) -> anyhow::Result<(u16, Value)> {
    let route = format!("/conversations/{chat}/files/content?path={path}");
    form(client, Method::PUT, route, parts).await
}

/// Every entry under `dir`, hidden ones included, as paths relative to it.
fn entries(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p.clone());
            }
            out.push(p.strip_prefix(dir).unwrap_or(&p).display().to_string());
        }
    }
    out.sort();
    out
}

async fn listed(client: &Client, chat: &str) -> anyhow::Result<Vec<Value>> {
    let answer = client.get(&format!("/conversations/{chat}/files")).await?;
    anyhow::ensure!(answer.status == 200, "{answer:?}");
    Ok(answer.body["files"].as_array().context("files")?.clone())
}

#[tokio::test]
async fn a_message_form_saves_its_files_and_the_same_name_again_keeps_both() -> anyhow::Result<()> {
    let (_sim, chatd, client) = start(&[]).await?;
    let chat = client.create_chat().await?;
    let ws = chatd.data_dir().join("workspaces").join(&chat);
    let photo: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let (status, sent) = send_form(
        &client,
        &chat,
        &[
            FormPart::setting("text", "read these"),
            FormPart::file("notes.md", "text/markdown", "# Plan\nship it\n"),
            FormPart::file("photo.raw", "application/octet-stream", photo.clone()),
        ],
    )
    .await?;
    assert_eq!(status, 202, "{sent}");
    let run = run_id(&sent)?;
    client.wait_run(&chat, &run, &["done"], QUICK).await?;
    assert_eq!(std::fs::read(ws.join("uploads/photo.raw"))?, photo);
    let snapshot = client.snapshot(&chat).await?;
    let user = snapshot["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "user"))
        .context("the user message")?;
    let text = user["text"].as_str().unwrap_or("");
    assert!(text.starts_with("read these"), "{text}");
    assert!(
        text.contains("[attached file uploads/notes.md, 15 bytes]"),
        "{text}"
    );
    assert!(
        text.contains("uploads/photo.raw: 300,000 bytes of binary data"),
        "{text}"
    );
    assert_eq!(user["attachments"][0]["inline"], true, "{user}");
    // Both are the person's files in the chat's list.
    let files = listed(&client, &chat).await?;
    for path in ["uploads/notes.md", "uploads/photo.raw"] {
        let f = files.iter().find(|f| f["path"] == path).context(path)?;
        assert_eq!(f["origin"], "user", "{f}");
    }

    // The same names again: kept beside the first, the answer says which.
    let (status, sent) = send_form(
        &client,
        &chat,
        &[
            FormPart::setting("text", "a newer plan"),
            FormPart::file("notes.md", "text/markdown", "# Plan v2\n"),
        ],
    )
    .await?;
    assert_eq!(status, 202, "{sent}");
    client
        .wait_run(&chat, &run_id(&sent)?, &["done"], QUICK)
        .await?;
    assert_eq!(
        std::fs::read_to_string(ws.join("uploads/notes.md"))?,
        "# Plan\nship it\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("uploads/notes (2).md"))?,
        "# Plan v2\n"
    );
    let snapshot = client.snapshot(&chat).await?;
    let last = snapshot["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .context("the second message")?;
    assert_eq!(
        last["attachments"][0]["conflict_of"], "uploads/notes.md",
        "{last}"
    );

    // A key sent twice saves its files once and answers the first send.
    let keyed = [
        FormPart::setting("text", "once"),
        FormPart::setting("key", "k-upload-1"),
        FormPart::file("once.txt", "text/plain", "1"),
    ];
    let (first_status, first) = send_form(&client, &chat, &keyed).await?;
    assert_eq!(first_status, 202, "{first}");
    client
        .wait_run(&chat, &run_id(&first)?, &["done"], QUICK)
        .await?;
    let (_, again) = send_form(&client, &chat, &keyed).await?;
    assert_eq!(again, first);
    assert!(!ws.join("uploads/once (2).txt").exists());
    Ok(())
}

#[tokio::test]
async fn a_bad_form_is_refused_by_name_and_leaves_nothing() -> anyhow::Result<()> {
    let (_sim, chatd, client) = start(&[("QSE_CHAT_UPLOAD_FILE_MAX_BYTES", "1048576")]).await?;
    let chat = client.create_chat().await?;
    let ws = chatd.data_dir().join("workspaces").join(&chat);
    let before = entries(&ws);
    let cases: Vec<(Vec<FormPart>, u16, &str)> = vec![
        // The second file is past its limit: the first is taken back too.
        (
            vec![
                FormPart::setting("text", "two files"),
                FormPart::file("small.txt", "text/plain", "small"),
                FormPart::file(
                    "big.bin",
                    "application/octet-stream",
                    vec![1u8; (1 << 20) + 1],
                ),
            ],
            413,
            "files[1] (big.bin)",
        ),
        (
            vec![
                FormPart::file("a.txt", "text/plain", "a"),
                FormPart::setting("text", "late"),
            ],
            400,
            "text",
        ),
        (
            vec![FormPart::file("a.txt", "text/plain", "a")],
            400,
            "text",
        ),
        (vec![FormPart::setting("txt", "typo")], 400, "txt"),
        (
            vec![
                FormPart::setting("text", "hi"),
                FormPart::setting("origin", "robot"),
            ],
            400,
            "origin",
        ),
    ];
    for (parts, want, field) in cases {
        let (status, body) = send_form(&client, &chat, &parts).await?;
        assert_eq!(status, want, "{field}: {body}");
        let message = body["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains(field), "{field}: {body}");
        if want == 413 {
            assert_eq!(body["error"]["limit"], 1_048_576, "{body}");
        }
        assert_eq!(entries(&ws), before, "after the refusal naming {field}");
    }
    let snapshot = client.snapshot(&chat).await?;
    assert_eq!(
        snapshot["messages"].as_array().map(Vec::len),
        Some(0),
        "{snapshot}"
    );
    // Not a form at all.
    let answer = client
        .http
        .put(client.api(&format!("/conversations/{chat}/files/content?path=a.txt")))
        .header("x-forward-key", client.key())
        .header("content-type", "text/plain")
        .body("a")
        .send()
        .await?;
    assert_eq!(answer.status(), 400);
    assert!(answer.text().await?.contains("Content-Type"));
    Ok(())
}

#[tokio::test]
async fn a_put_replaces_only_the_version_it_names_and_keeps_both_otherwise() -> anyhow::Result<()> {
    let (_sim, chatd, client) = start(&[]).await?;
    let chat = client.create_chat().await?;
    let ws = chatd.data_dir().join("workspaces").join(&chat);
    let file = |text: &str| {
        [FormPart::file(
            "ignored.md",
            "text/markdown",
            text.to_string(),
        )]
    };

    let (status, made) = put(&client, &chat, "notes/plan.md", &file("v1\n")).await?;
    assert_eq!(status, 201, "{made}");
    assert_eq!(made["path"], "notes/plan.md");
    let v1 = made["rev"].as_i64().context("rev")?;
    assert_eq!(std::fs::read_to_string(ws.join("notes/plan.md"))?, "v1\n");

    // No base: the file there stays, the upload is kept beside it.
    let (status, beside) = put(&client, &chat, "notes/plan.md", &file("mine\n")).await?;
    assert_eq!(status, 201, "{beside}");
    assert_eq!(beside["path"], "notes/plan (2).md", "{beside}");
    assert_eq!(beside["conflict_of"], "notes/plan.md");
    assert_eq!(std::fs::read_to_string(ws.join("notes/plan.md"))?, "v1\n");

    // The base it names is the newest: replaced in place.
    let mut parts = vec![FormPart::setting("base", &v1.to_string())];
    parts.extend(file("v2\n"));
    let (status, replaced) = put(&client, &chat, "notes/plan.md", &parts).await?;
    assert_eq!(status, 200, "{replaced}");
    assert_eq!(replaced["path"], "notes/plan.md");
    assert!(replaced.get("conflict_of").is_none(), "{replaced}");
    assert_eq!(std::fs::read_to_string(ws.join("notes/plan.md"))?, "v2\n");
    let v2 = replaced["rev"].as_i64().context("rev")?;

    // A person edits it by hand; an upload based on v2 no longer replaces it.
    std::fs::write(ws.join("notes/plan.md"), "edited by hand\n")?;
    let mut parts = vec![FormPart::setting("base", &v2.to_string())];
    parts.extend(file("v3\n"));
    let (status, stale) = put(&client, &chat, "notes/plan.md", &parts).await?;
    assert_eq!(status, 201, "{stale}");
    assert_eq!(stale["conflict_of"], "notes/plan.md", "{stale}");
    assert_eq!(
        std::fs::read_to_string(ws.join("notes/plan.md"))?,
        "edited by hand\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join(stale["path"].as_str().context("path")?))?,
        "v3\n"
    );

    // A put is a change set of the person's, and undoing it puts v1 back.
    let undone = client
        .post(
            &format!("/conversations/{chat}/files/undo"),
            serde_json::json!({"rev": v2}),
        )
        .await?;
    assert_eq!(
        undone.status, 409,
        "the hand edit came after v2: {:?}",
        undone.body
    );
    let sets = client
        .get(&format!(
            "/conversations/{chat}/files/history?path=notes/plan.md"
        ))
        .await?;
    let origins: Vec<&str> = sets.body["changes"]
        .as_array()
        .context("changes")?
        .iter()
        .filter_map(|s| s["origin"].as_str())
        .collect();
    assert_eq!(origins, ["outside", "user", "user"], "{}", sets.body);

    // An edit that lands while an upload based on the newest version is
    // still coming: the upload is kept beside it, never over it.
    let newest = client
        .get(&format!(
            "/conversations/{chat}/files/history?path=notes/plan.md"
        ))
        .await?
        .body["changes"][0]["rev"]
        .as_i64()
        .context("newest rev")?;
    let mut body = form_body(&[
        FormPart::setting("base", &newest.to_string()),
        FormPart::file("plan.md", "text/markdown", "from the slow upload\n"),
    ]);
    // Held back: the last 10 bytes of the file and the form's end (35 bytes).
    let tail = body.split_off(body.len() - 45);
    let length = (body.len() + tail.len()) as u64;
    let mut socket = raw_put(&chatd.url(), client.key(), &chat, "notes/plan.md", length)?;
    socket.write_all(&body)?;
    let notes = ws.join("notes");
    wait_until("the slow upload's staging file", QUICK, || async {
        entries(&notes)
            .into_iter()
            .find(|e| e.contains("plan.md.tandem-"))
    })
    .await?;
    std::fs::write(ws.join("notes/plan.md"), "edited during the upload\n")?;
    socket.write_all(&tail)?;
    let mut raw = String::new();
    std::io::Read::read_to_string(&mut socket, &mut raw)?;
    assert!(raw.starts_with("HTTP/1.1 201"), "{raw}");
    assert!(raw.contains("\"conflict_of\":\"notes/plan.md\""), "{raw}");
    assert_eq!(
        std::fs::read_to_string(ws.join("notes/plan.md"))?,
        "edited during the upload\n"
    );

    // Bad puts name their field and change nothing.
    let before = entries(&ws);
    let bad: [(&str, Vec<FormPart>, &str); 3] = [
        ("notes", file("x").into(), "path"),
        ("a.md", vec![FormPart::setting("base", "x")], "base"),
        ("a.md", Vec::new(), "file"),
    ];
    for (path, parts, field) in bad {
        let (status, body) = put(&client, &chat, path, &parts).await?;
        let message = body["error"]["message"].as_str().unwrap_or("");
        assert!(status == 400 && message.contains(field), "{field}: {body}");
    }
    assert_eq!(entries(&ws), before);
    Ok(())
}

#[tokio::test]
async fn a_200_mib_upload_streams_to_disk_and_a_cut_one_leaves_nothing() -> anyhow::Result<()> {
    let (_sim, chatd, client) = start(&[]).await?;
    let pid = chatd.pid().context("chatd's pid")?;
    let chat = client.create_chat().await?;
    let ws = chatd.data_dir().join("workspaces").join(&chat);
    // Warm: one small put, so the idle figure includes what any put loads.
    let (status, _) = put(
        &client,
        &chat,
        "warm.txt",
        &[FormPart::file("w", "text/plain", "w")],
    )
    .await?;
    assert_eq!(status, 201);
    let idle = (0..5).filter_map(|_| rss_kib(pid)).max().context("rss")?;

    let peak = PeakRss::start(pid);
    let answer = client
        .send_form(
            Method::PUT,
            &format!("/conversations/{chat}/files/content?path=big.bin"),
            streamed_form(&[], "big.bin", 200),
        )
        .await?;
    let peak = peak.end();
    assert_eq!(answer.status, 201, "{:?}", answer.body);
    assert_eq!(answer.body["bytes"], 200u64 << 20);
    assert!(
        is_generated(&ws.join("big.bin"), 200),
        "the bytes on disk differ"
    );
    let above = peak.saturating_sub(idle);
    eprintln!("200 MiB upload: chatd RSS idle {idle} KiB, peak {peak} KiB, +{above} KiB");
    assert!(
        above < 30 << 10,
        "chatd grew {above} KiB above idle ({idle} KiB) during a 200 MiB upload"
    );
    // Downloaded the same way: streamed, the bytes the same, memory flat.
    let peak = PeakRss::start(pid);
    let mut response = client
        .http
        .get(client.api(&format!("/conversations/{chat}/files/content?path=big.bin")))
        .header("x-forward-key", client.key())
        .send()
        .await?;
    assert_eq!(response.status(), 200);
    assert_eq!(response.content_length(), Some(200 << 20));
    let (mut pending, mut index, mut total) = (Vec::new(), 0u64, 0u64);
    while let Some(chunk) = response.chunk().await? {
        total += chunk.len() as u64;
        pending.extend_from_slice(&chunk);
        while pending.len() >= 1 << 20 {
            let rest = pending.split_off(1 << 20);
            assert!(
                pending == generated_chunk(index),
                "MiB {index} of the download differs"
            );
            pending = rest;
            index += 1;
        }
    }
    let down_peak = peak.end();
    assert_eq!((total, index), (200 << 20, 200));
    let down_above = down_peak.saturating_sub(idle);
    eprintln!("200 MiB download: chatd RSS peak {down_peak} KiB, +{down_above} KiB over idle");
    assert!(
        down_above < 30 << 10,
        "chatd grew {down_above} KiB above idle during a 200 MiB download"
    );
    // Kept in the history: the blob is the file.
    let files = listed(&client, &chat).await?;
    let big = files
        .iter()
        .find(|f| f["path"] == "big.bin")
        .context("big.bin listed")?;
    assert_eq!(big["size"], 200u64 << 20);
    let sha = sha256_of(&ws.join("big.bin")).context("sha")?;
    assert!(chatd
        .data_dir()
        .join("blobs")
        .join(&sha[..2])
        .join(&sha)
        .exists());

    // Cut half-way: 20 of 50 MiB sent, then the connection is dropped.
    let mut socket = raw_put(&chatd.url(), client.key(), &chat, "cut.bin", 50 << 20)?;
    socket.write_all(&file_head("cut.bin", "application/octet-stream"))?;
    for i in 0..20 {
        socket.write_all(&generated_chunk(i))?;
    }
    // Streamed to disk as it comes: its temp file is there mid-upload.
    let temp = |ws: &Path| {
        entries(ws)
            .into_iter()
            .find(|e| e.starts_with(".") && e.contains("cut.bin.tandem-") && e.ends_with(".tmp"))
    };
    wait_until("the upload's temp file", QUICK, || async { temp(&ws) })
        .await
        .with_context(|| format!("{:?}", entries(&ws)))?;
    drop(socket);
    wait_until("the cut upload's temp file gone", QUICK, || async {
        temp(&ws).is_none().then_some(())
    })
    .await?;
    assert!(!ws.join("cut.bin").exists());
    let files = listed(&client, &chat).await?;
    assert!(files.iter().all(|f| f["path"] != "cut.bin"), "{files:?}");

    // A temp file a crash left (nobody wrote to it for an hour) is swept by
    // the next scan; a fresh one (a write under way) is left alone; neither
    // is ever listed.
    let stale = ws.join(".lost.bin.tandem-0123456789abcdef.tmp");
    let fresh = ws.join(".live.bin.tandem-fedcba9876543210.tmp");
    std::fs::write(&stale, "half")?;
    std::fs::write(&fresh, "half")?;
    std::fs::File::options()
        .write(true)
        .open(&stale)?
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(3600))?;
    let files = listed(&client, &chat).await?;
    assert!(!stale.exists(), "the stale temp file is still there");
    assert!(fresh.exists(), "a fresh temp file was removed");
    assert!(
        files
            .iter()
            .all(|f| !f["path"].as_str().unwrap_or("").contains(".tandem-")),
        "{files:?}"
    );
    Ok(())
}
