//! `sendChatAction` and `sendDocument`: the typing indicator and files.

use super::*;

pub(super) const ACTIONS: &[&str] = &[
    "typing",
    "upload_photo",
    "record_video",
    "upload_video",
    "record_voice",
    "upload_voice",
    "upload_document",
    "choose_sticker",
    "find_location",
    "record_video_note",
    "upload_video_note",
];

pub(super) fn send_chat_action(shared: &Shared, params: &Params) -> Outcome {
    let (chat_id, _) = chat_of(shared, params)?;
    let action = params.string("action").unwrap_or_default();
    if !ACTIONS.contains(&action.as_str()) {
        return Err(bad("wrong parameter action in request"));
    }
    shared.lock().sent.push(Sent {
        method: "sendChatAction".into(),
        chat_id,
        message_id: 0,
        text: String::new(),
        visible: String::new(),
        parse_mode: None,
        reply_to: None,
        action: Some(action),
        file_name: None,
        file: None,
        at: Instant::now(),
    });
    Ok(json!(true))
}

pub(super) fn send_document(shared: &Shared, params: &Params) -> Outcome {
    let (chat_id, kind) = chat_of(shared, params)?;
    let Some((field, file_name, bytes)) = params.file.clone() else {
        return Err(bad("there is no document in the request"));
    };
    if field != "document" {
        return Err(bad("there is no document in the request"));
    }
    if bytes.is_empty() {
        return Err(bad("file must be non-empty"));
    }
    let caption = params.string("caption").unwrap_or_default();
    let (reply_to, lenient) = reply_of(params);
    let mut inner = shared.lock();
    let reply_to = match reply_to {
        Some(r) if inner.messages.contains_key(&(chat_id.clone(), r)) => Some(r),
        Some(_) if lenient => None,
        Some(_) => return Err(bad("message to be replied not found")),
        None => None,
    };
    let message_id = next_message_id(&mut inner, &chat_id);
    inner.messages.insert(
        (chat_id.clone(), message_id),
        Stored {
            from_bot: true,
            visible: caption.clone(),
            parse_mode: None,
        },
    );
    inner.sent.push(Sent {
        method: "sendDocument".into(),
        chat_id: chat_id.clone(),
        message_id,
        text: caption.clone(),
        visible: caption.clone(),
        parse_mode: None,
        reply_to,
        action: None,
        file_name: Some(file_name.clone()),
        file: Some(bytes.clone()),
        at: Instant::now(),
    });
    let mut message = message_object(shared, &chat_id, &kind, message_id, "");
    if let Some(m) = message.as_object_mut() {
        m.remove("text");
        if !caption.is_empty() {
            m.insert("caption".into(), json!(caption));
        }
    }
    message["document"] = json!({
        "file_name": file_name,
        "mime_type": "application/octet-stream",
        "file_id": format!("doc{message_id}"),
        "file_unique_id": format!("u{message_id}"),
        "file_size": bytes.len(),
    });
    Ok(message)
}
