//! Saving a message's files and what the model is told of them.

use super::*;

fn upload(name: &str, text: &str) -> Upload {
    Upload {
        name: name.into(),
        text: Some(text.into()),
        data_base64: None,
        mime: None,
    }
}

fn save(ws: &Workspace, uploads: Vec<Upload>, room: u64, vision: bool) -> Saved {
    let placed = land(ws, Incoming::Decoded(check(uploads).unwrap())).unwrap();
    let sight = if vision { Sight::Direct } else { Sight::Blind };
    describe(ws, &placed, room, &sight, &Readings::default())
}

#[test]
fn text_inlines_while_it_fits_and_big_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::open(dir.path()).unwrap();
    let saved = save(
        &ws,
        vec![
            upload("a.md", "hello ```code```\n"),
            upload("big.log", &"x".repeat(40_000)),
        ],
        1_000,
        false,
    );
    assert!(saved
        .text
        .contains("[attached file uploads/a.md, 17 bytes]\n````\nhello"));
    assert!(saved.text.contains(
        "[attached file uploads/big.log: 40,000 bytes, about 11,502 tokens, too big to include here; read it with read_file]"
    ));
    assert_eq!(
        std::fs::read(dir.path().join("uploads/big.log"))
            .unwrap()
            .len(),
        40_000
    );
    // The same name again gets a free one, and says which it was.
    let again = save(&ws, vec![upload("a.md", "2")], 1_000, false);
    assert_eq!(again.records[0]["path"], "uploads/a (2).md");
    assert_eq!(again.records[0]["conflict_of"], "uploads/a.md");
}

#[test]
fn a_file_past_the_inline_read_is_text_by_its_start() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::open(dir.path()).unwrap();
    // 'é' is two bytes: the read's end cuts one in half.
    let body = "é".repeat(600_000);
    ws.write_file("uploads/long.txt", body.as_bytes()).unwrap();
    let placed = Placed {
        path: "uploads/long.txt".into(),
        mime: "text/plain".into(),
        size: body.len() as u64,
        conflict_of: None,
    };
    let saved = describe(&ws, &[placed], 32_000, &Sight::Blind, &Readings::default());
    assert_eq!(saved.records[0]["kind"], "text", "{}", saved.text);
    assert_eq!(saved.records[0]["inline"], false);
}

#[test]
fn bad_uploads_name_the_field() {
    let both = Upload {
        name: "x".into(),
        text: Some("a".into()),
        data_base64: Some("YQ==".into()),
        mime: None,
    };
    let err = check(vec![upload("ok.txt", "a"), both]).err().unwrap();
    assert!(
        err.message.contains("attachments[1].text"),
        "{}",
        err.message
    );
    let bad = Upload {
        name: "x.png".into(),
        text: None,
        data_base64: Some("***".into()),
        mime: None,
    };
    let err = check(vec![bad]).err().unwrap();
    assert!(
        err.message.contains("attachments[0].data_base64"),
        "{}",
        err.message
    );
}

#[test]
fn images_reach_only_a_model_that_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::open(dir.path()).unwrap();
    let png = Upload {
        name: "shot.png".into(),
        text: None,
        data_base64: Some("iVBORw0KGgo=".into()),
        mime: None,
    };
    let saved = save(&ws, vec![png], 1_000, false);
    assert!(saved.text.contains("this model does not read images"));
    assert_eq!(saved.records[0]["image"], false);
}

fn pdf_placed(path: &str) -> Placed {
    Placed {
        path: path.into(),
        mime: "application/pdf".into(),
        size: 123_456,
        conflict_of: None,
    }
}

fn pdf_read(text: String) -> Result<Arc<DocText>, String> {
    Ok(Arc::new(DocText {
        kind: DocKind::Pdf,
        extracted: crate::documents::Extracted {
            parts: vec![crate::documents::Part {
                label: "page 1".into(),
                start: 0,
            }],
            notes: vec!["page 2 has no text layer: a probable scan".into()],
            text,
        },
    }))
}

#[test]
fn a_document_goes_in_by_its_first_20000_characters_in_whole_lines() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::open(dir.path()).unwrap();
    // 30,000 characters in lines of 100: 200 whole lines fit.
    let line = format!("{}\n", "w".repeat(99));
    let body = format!("## Page 1\n{}", line.repeat(300));
    let placed = pdf_placed("uploads/report.pdf");
    let docs = DocTexts::from([(placed.path.clone(), pdf_read(body.clone()))]);
    let saved = describe(&ws, &[placed], 32_000, &Sight::Blind, &read(docs));
    assert!(saved.text.contains(
        "[attached PDF uploads/report.pdf, 123,456 bytes: PDF, 1 page; page 2 has no text layer: a probable scan]\n```\n## Page 1\n"
    ));
    // "## Page 1\n" (10) and 199 lines of 100: the 200th would pass 20,000.
    assert!(saved.text.contains(
        "[the first 19,910 of 30,010 characters; read on with read_document path=uploads/report.pdf offset=201]"
    ), "{}", saved.text);
    assert_eq!(saved.records[0]["kind"], "document");
    assert_eq!(saved.records[0]["inline"], true);
    assert_eq!(saved.records[0]["document"], "pdf");
}

#[test]
fn a_document_without_room_or_unread_is_named_with_why() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::open(dir.path()).unwrap();
    let placed = pdf_placed("uploads/a.pdf");
    let docs = DocTexts::from([(placed.path.clone(), pdf_read("## Page 1\nhello\n".into()))]);
    let saved = describe(&ws, &[placed], 0, &Sight::Blind, &read(docs));
    assert!(saved
        .text
        .contains("no room for it here; read it with read_document]"));
    assert_eq!(saved.records[0]["inline"], false);

    let placed = pdf_placed("uploads/b.pdf");
    let docs = DocTexts::from([(
        placed.path.clone(),
        Err("it is damaged (no trailer)".into()),
    )]);
    let saved = describe(&ws, &[placed], 32_000, &Sight::Blind, &read(docs));
    assert!(saved.text.contains(
        "[attached file uploads/b.pdf: 123,456 bytes; it could not be read: it is damaged (no trailer)]"
    ));
    assert_eq!(saved.records[0]["unread"], "it is damaged (no trailer)");
}

/// What was read of a message's files: these documents, no voice notes.
fn read(docs: DocTexts) -> Readings {
    Readings {
        docs,
        voices: Voices::new(),
    }
}

#[test]
fn a_voice_note_goes_in_as_its_transcript_or_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::open(dir.path()).unwrap();
    let file = |name: &str| Placed {
        path: format!("uploads/{name}"),
        mime: "audio/ogg".into(),
        size: 4_321,
        conflict_of: None,
    };
    let mut read = Readings::default();
    read.voices.insert(
        "uploads/note.ogg".into(),
        Ok(Transcript {
            text: "Buy milk.\n".into(),
            model: Some("whisper".into()),
        }),
    );
    read.voices
        .insert("uploads/long.wav".into(), Err(NotTranscribed::TimedOut(2)));
    let saved = describe(
        &ws,
        &[file("note.ogg"), file("long.wav")],
        32_000,
        &Sight::Blind,
        &read,
    );
    assert_eq!(
        saved.text,
        "\n\n[attached voice message uploads/note.ogg, 4,321 bytes]\n\
         [Voice message, transcribed]\nBuy milk.\
         \n\n[attached voice message uploads/long.wav, 4,321 bytes; not transcribed: \
         the engine gave no transcript within 2 s]"
    );
    assert_eq!(saved.records[0]["kind"], "audio");
    assert_eq!(saved.records[0]["transcribed"], true);
    assert_eq!(saved.records[0]["transcript_chars"], 9);
    assert_eq!(saved.records[1]["transcribed"], false);
    assert_eq!(
        saved.records[1]["untranscribed"],
        "the engine gave no transcript within 2 s"
    );
}

#[test]
fn an_image_for_a_blind_model_points_at_describe_image_when_another_sees() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::open(dir.path()).unwrap();
    let photo = Placed {
        path: "uploads/shot.png".into(),
        mime: "image/png".into(),
        size: 10,
        conflict_of: None,
    };
    let sight = Sight::Described("sim-vision".into());
    let saved = describe(&ws, &[photo], 32_000, &sight, &Readings::default());
    assert_eq!(
        saved.text,
        "\n\n[attached image uploads/shot.png, 10 bytes: this model does not read images; \
         describe_image has it described]"
    );
    assert_eq!(saved.records[0]["image"], false);
}
