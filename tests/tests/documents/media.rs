//! Images and voice notes for models that cannot take them as they are, end
//! to end against the real chatd and engine-sim: describe_image has a
//! second model of the engine that sees images describe a photo (scaled to
//! 2,048 px first), and a voice note is transcribed by the engine's
//! `/v1/audio/transcriptions` into its message, once per content; each
//! failure is one line and the run goes on.

use std::time::Duration;

use anyhow::Context;
use base64::Engine as _;
use serde_json::Value;
use tandem_tests::harness::{offered_tools, system_text, tool_results, FormPart, Sim};

use crate::messages::{last_of, send, start};

/// The requests the sim got for `model`.
fn requests_to<'a>(requests: &'a [Value], model: &str) -> Vec<&'a Value> {
    requests
        .iter()
        .filter(|r| r["body"]["model"] == model)
        .collect()
}

/// A 4,000 × 3,000 opaque photo as PNG bytes.
fn large_photo() -> anyhow::Result<Vec<u8>> {
    let photo = image::RgbImage::from_fn(4_000, 3_000, |x, y| {
        image::Rgb([(x % 251) as u8, (y % 241) as u8, ((x + y) % 239) as u8])
    });
    let mut png = Vec::new();
    photo.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)?;
    Ok(png)
}

/// A small PNG.
fn small_png() -> anyhow::Result<Vec<u8>> {
    let mut png = Vec::new();
    image::RgbImage::from_pixel(3, 2, image::Rgb([200, 10, 10]))
        .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)?;
    Ok(png)
}

/// The width and height of the image a request's data URL carries.
fn image_sent(request: &Value) -> anyhow::Result<(String, u32, u32)> {
    let url = request["body"]["messages"][0]["content"][1]["image_url"]["url"]
        .as_str()
        .context("an image part")?;
    let (head, data) = url.split_once(";base64,").context("a base64 data URL")?;
    let bytes = base64::engine::general_purpose::STANDARD.decode(data)?;
    let seen = image::load_from_memory(&bytes)?;
    Ok((head.to_string(), seen.width(), seen.height()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_image_has_the_second_model_that_sees_describe_a_photo_at_2048_px(
) -> anyhow::Result<()> {
    let (sim, chatd, client) = start(&["--vision-model", "sim-vision"], &[]).await?;
    let chat = client.create_chat().await?;
    let png = large_photo()?;
    let cue = r#"what is on it? [sim tool_call=describe_image args={"path":"uploads/big.png"} tool_steps=1]"#;
    let snapshot = send(
        &client,
        &chat,
        cue,
        vec![FormPart::file("big.png", "image/png", png.clone())],
    )
    .await?;

    // The chat's own model does not see images: it is told so, and offered
    // the tool naming the model that describes.
    let user = last_of(&snapshot, "user")?;
    let text = user["text"].as_str().unwrap_or("");
    assert!(
        text.contains(&format!(
            "[attached image uploads/big.png, {} bytes: this model does not read images; describe_image has it described]",
            commas(png.len())
        )),
        "{text}"
    );
    let requests = sim.requests().await?;
    let chat_requests = requests_to(&requests, "sim-small");
    let first = chat_requests.first().context("the chat's request")?;
    assert!(offered_tools(&first["body"]).contains(&"describe_image".to_string()));
    assert!(
        system_text(&first["body"])
            .contains("describe_image has sim-vision, which does, describe one"),
        "{}",
        system_text(&first["body"])
    );
    assert!(!serde_json::to_string(&first["body"])?.contains("image_url"));

    // The second model got the photo scaled to 2,048 px, with the default question.
    let described = requests_to(&requests, "sim-vision");
    assert_eq!(described.len(), 1, "one request to the vision model");
    let (head, width, height) = image_sent(described[0])?;
    assert_eq!(
        (head.as_str(), width, height),
        ("data:image/jpeg", 2_048, 1_536)
    );
    let question = described[0]["body"]["messages"][0]["content"][0]["text"]
        .as_str()
        .unwrap_or("");
    assert!(
        question.starts_with("Describe this image fully"),
        "{question}"
    );
    assert_eq!(described[0]["session_id"], format!("chat-{chat}-describe"));

    // Its answer came back whole as the call's result, and the stored file
    // kept every byte.
    let results = tool_results(&snapshot);
    let result = results.first().context("the describe_image result")?;
    assert!(
        result.starts_with(
            "sim-vision describes uploads/big.png (sent to it at 2048×1536 px):\n\
             sim-vision sees a 2048×1536 JPEG image. Asked: Describe this image fully"
        ),
        "{result}"
    );
    let workspace = chatd.data_dir().join("workspaces").join(&chat);
    assert_eq!(std::fs::read(workspace.join("uploads/big.png"))?, png);
    // The model read the description in its next request.
    let last = chat_requests.last().context("the request after the call")?;
    assert!(
        serde_json::to_string(&last["body"])?.contains("sim-vision sees a 2048×1536 JPEG image"),
        "{}",
        last["body"]
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_model_that_sees_describe_image_says_what_to_do() -> anyhow::Result<()> {
    let (sim, _chatd, client) = start(&[], &[]).await?;
    let chat = client.create_chat().await?;
    let calls = r#"[{"name":"describe_image","arguments":{"path":"uploads/shot.png"}},{"name":"describe_image","arguments":{"path":"uploads/notes.txt"}}]"#;
    let cue = format!("what is on it? [sim tool_calls={calls} tool_steps=1]");
    let snapshot = send(
        &client,
        &chat,
        &cue,
        vec![
            FormPart::file("shot.png", "image/png", small_png()?),
            FormPart::file("notes.txt", "text/plain", b"hello\n".to_vec()),
        ],
    )
    .await?;
    let requests = sim.requests().await?;
    let first = requests.first().context("the chat's request")?;
    assert!(
        !offered_tools(&first["body"]).contains(&"describe_image".to_string()),
        "no use offering it: {:?}",
        offered_tools(&first["body"])
    );
    assert!(
        system_text(&first["body"])
            .contains("No model of this box sees images: when one is attached"),
        "{}",
        system_text(&first["body"])
    );
    let results = tool_results(&snapshot);
    assert_eq!(
        results,
        [
            "describe_image: no model of this box sees images, so nothing can describe it. \
             Tell the person: they can pick a model that sees images for this chat, or the \
             administrator can set [chatd] image_model to a vision model the engine serves.",
            "describe_image: `uploads/notes.txt` is not an image (it describes JPEG, PNG, \
             WebP and GIF files)"
        ]
    );
    assert_eq!(requests.len(), 2, "nothing was asked of any other model");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_model_setting_wins_over_the_engines_first_that_sees() -> anyhow::Result<()> {
    let (sim, _chatd, client) = start(
        &["--vision-model", "sim-vision", "--extra-model", "sim-eye"],
        &[("QSE_CHAT_IMAGE_MODEL", "sim-eye")],
    )
    .await?;
    let chat = client.create_chat().await?;
    let cue = r#"and this? [sim tool_call=describe_image args={"path":"uploads/shot.png","question":"Which_colour?"} tool_steps=1]"#;
    let snapshot = send(
        &client,
        &chat,
        cue,
        vec![FormPart::file("shot.png", "image/png", small_png()?)],
    )
    .await?;
    let requests = sim.requests().await?;
    assert!(requests_to(&requests, "sim-vision").is_empty());
    let asked = requests_to(&requests, "sim-eye");
    assert_eq!(asked.len(), 1, "{requests:?}");
    // A small image goes as its own bytes, with the call's question.
    let (head, width, height) = image_sent(asked[0])?;
    assert_eq!((head.as_str(), width, height), ("data:image/png", 3, 2));
    assert_eq!(
        asked[0]["body"]["messages"][0]["content"][0]["text"],
        "Which_colour?"
    );
    let system = system_text(&requests.first().context("the chat's request")?["body"]);
    assert!(
        system.contains("describe_image has sim-eye, which does"),
        "{system}"
    );
    let results = tool_results(&snapshot);
    let result = results.first().context("the result")?;
    assert!(
        result.starts_with("sim-eye describes uploads/shot.png (sent to it at 3×2 px):\nw0 w1 "),
        "{result}"
    );
    Ok(())
}

/// An Ogg file's first bytes with a cue for the sim inside.
fn voice_note(cue: &str) -> Vec<u8> {
    let mut bytes = b"OggS\0\x02\0\0\0\0\0\0\0\0".to_vec();
    bytes.extend_from_slice(cue.as_bytes());
    bytes.extend_from_slice(&[0u8; 64]);
    bytes
}

/// The transcription requests the sim got.
async fn transcriptions(sim: &Sim) -> anyhow::Result<Vec<Value>> {
    Ok(sim
        .get("/sim/transcriptions")
        .await?
        .as_array()
        .cloned()
        .unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voice_note_is_transcribed_into_its_message_once() -> anyhow::Result<()> {
    // No setting: the engine's first model that transcribes.
    let (sim, _chatd, client) = start(&["--transcription-model", "sim-whisper"], &[]).await?;
    let chat = client.create_chat().await?;
    let note = voice_note(r#"[sim transcript="Buy milk on the way home."]"#);
    let snapshot = send(
        &client,
        &chat,
        "from my phone",
        vec![FormPart::file("note.ogg", "audio/ogg", note.clone())],
    )
    .await?;
    let user = last_of(&snapshot, "user")?;
    let text = user["text"].as_str().unwrap_or("");
    let part = format!(
        "[attached voice message uploads/note.ogg, {} bytes]\n[Voice message, transcribed]\nBuy milk on the way home.",
        note.len()
    );
    assert!(text.contains(&part), "{text}");
    assert_eq!(user["attachments"][0]["kind"], "audio");
    assert_eq!(user["attachments"][0]["transcribed"], true);
    let heard = transcriptions(&sim).await?;
    assert_eq!(heard.len(), 1, "{heard:?}");
    assert_eq!(heard[0]["model"], "sim-whisper");
    assert_eq!(heard[0]["file_name"], "note.ogg");
    assert_eq!(heard[0]["content_type"], "audio/ogg");
    assert_eq!(heard[0]["file_bytes"], note.len());
    // The model read it.
    let requests = sim.requests().await?;
    let asked = serde_json::to_string(&requests.last().context("a request")?["body"])?;
    assert!(asked.contains("Buy milk on the way home."), "{asked}");

    // The same bytes again (another name, another message): the kept
    // transcript, no second request.
    let snapshot = send(
        &client,
        &chat,
        "again",
        vec![FormPart::file("again.ogg", "audio/ogg", note)],
    )
    .await?;
    let text = last_of(&snapshot, "user")?["text"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(
        text.contains("uploads/again.ogg") && text.contains("Buy milk on the way home."),
        "{text}"
    );
    assert_eq!(transcriptions(&sim).await?.len(), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_or_stuck_transcription_is_one_line_and_the_run_answers() -> anyhow::Result<()> {
    let (sim, _chatd, client) = start(
        &[],
        &[
            ("QSE_CHAT_TRANSCRIPTION_MODEL", "sim-whisper"),
            ("QSE_CHAT_TRANSCRIPTION_TIMEOUT_S", "2"),
        ],
    )
    .await?;
    let chat = client.create_chat().await?;
    let failing = voice_note(r#"[sim status=500 message="decoder crashed"]"#);
    let stuck = voice_note("[sim hang=1]");
    let (failing_size, stuck_size) = (failing.len(), stuck.len());
    let files = vec![
        FormPart::file("fail.wav", "audio/wav", failing.clone()),
        FormPart::file("stuck.m4a", "audio/mp4", stuck),
        FormPart::file(
            "odd.webm",
            "audio/webm",
            voice_note(r#"[sim status=400 message="unsupported format"]"#),
        ),
    ];
    let began = std::time::Instant::now();
    let snapshot = send(&client, &chat, "three notes [sim tokens=3]", files).await?;
    assert!(
        began.elapsed() < Duration::from_secs(30),
        "the hang was bounded"
    );
    let text = last_of(&snapshot, "user")?["text"]
        .as_str()
        .unwrap_or("")
        .to_string();
    for line in [
        format!("[attached voice message uploads/fail.wav, {failing_size} bytes; not transcribed: the transcription failed: engine error (500): decoder crashed]"),
        format!("[attached voice message uploads/stuck.m4a, {stuck_size} bytes; not transcribed: the engine gave no transcript within 2 s]"),
        "not transcribed: the engine refused it (400): unsupported format]".to_string(),
    ] {
        assert!(text.contains(&line), "{line}\nnot in\n{text}");
    }
    assert!(!text.contains("[Voice message, transcribed]"), "{text}");
    // The run answered all the same.
    assert_eq!(last_of(&snapshot, "assistant")?["text"], "w0 w1 w2 ");
    assert_eq!(transcriptions(&sim).await?.len(), 3);

    // A failure is not kept: the same bytes are tried again.
    send(
        &client,
        &chat,
        "once more [sim tokens=1]",
        vec![FormPart::file("fail.wav", "audio/wav", failing)],
    )
    .await?;
    assert_eq!(transcriptions(&sim).await?.len(), 4);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_without_transcriptions_or_a_model_for_them_is_named() -> anyhow::Result<()> {
    // The engine has no route: it is named.
    let (_sim, _chatd, client) = start(
        &["--no-transcriptions"],
        &[("QSE_CHAT_TRANSCRIPTION_MODEL", "sim-whisper")],
    )
    .await?;
    let chat = client.create_chat().await?;
    let snapshot = send(
        &client,
        &chat,
        "a note [sim tokens=1]",
        vec![FormPart::file("memo.mp3", "audio/mpeg", voice_note(""))],
    )
    .await?;
    let user = last_of(&snapshot, "user")?;
    let text = user["text"].as_str().unwrap_or("");
    assert!(
        text.ends_with(
            "not transcribed: the engine has no /v1/audio/transcriptions (it answered 404)]"
        ),
        "{text}"
    );
    assert_eq!(user["attachments"][0]["transcribed"], false);

    // No setting and no model of the engine that transcribes: said so,
    // and nothing is asked.
    let (sim, _chatd, client) = start(&[], &[]).await?;
    let chat = client.create_chat().await?;
    let snapshot = send(
        &client,
        &chat,
        "a note [sim tokens=1]",
        vec![FormPart::file("memo.flac", "audio/flac", voice_note(""))],
    )
    .await?;
    let text = last_of(&snapshot, "user")?["text"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(
        text.ends_with("not transcribed: no model of the engine transcribes speech ([chatd] transcription_model names none)]"),
        "{text}"
    );
    assert!(transcriptions(&sim).await?.is_empty());
    Ok(())
}

/// `n` with a comma between each group of three digits, as chatd writes sizes.
fn commas(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
