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
    describe(ws, &placed, room, vision)
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
    let saved = describe(&ws, &[placed], 32_000, false);
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
