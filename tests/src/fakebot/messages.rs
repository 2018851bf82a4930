//! `sendMessage` and `editMessageText`: the chats' messages as Telegram keeps
//! them, with replies, entities and the text limit.

use super::*;

/// The chat a call names, which must be one the fake has seen.
pub(super) fn chat_of(
    shared: &Shared,
    params: &Params,
) -> Result<(String, String), (u16, String, Option<u64>)> {
    let chat_id = params
        .string("chat_id")
        .ok_or_else(|| bad("chat_id is empty"))?;
    let inner = shared.lock();
    let (kind, _) = inner
        .chats
        .get(&chat_id)
        .ok_or_else(|| bad("chat not found"))?;
    Ok((chat_id, kind.clone()))
}

/// The text as Telegram shows it after `parse_mode`, or its refusal.
pub(super) fn visible_text(
    text: &str,
    parse_mode: Option<&str>,
) -> Result<String, (u16, String, Option<u64>)> {
    let visible = match parse_mode {
        None | Some("") => text.to_string(),
        Some("MarkdownV2") => {
            parse_markdown_v2(text).map_err(|why| bad(&format!("can't parse entities: {why}")))?
        }
        Some("HTML") | Some("Markdown") => text.to_string(),
        Some(_) => return Err(bad("unsupported parse_mode")),
    };
    if visible.trim().is_empty() {
        return Err(bad("message text is empty"));
    }
    if visible.encode_utf16().count() > TEXT_LIMIT {
        return Err(bad("message is too long"));
    }
    Ok(visible)
}

pub(super) fn reply_of(params: &Params) -> (Option<i64>, bool) {
    if let Some(reply) = params.object("reply_parameters") {
        let id = reply["message_id"].as_i64();
        let lenient = reply["allow_sending_without_reply"]
            .as_bool()
            .unwrap_or(false);
        return (id, lenient);
    }
    let lenient = matches!(
        params.get("allow_sending_without_reply"),
        Some(Value::Bool(true))
    );
    (params.int("reply_to_message_id"), lenient)
}

pub(super) fn message_object(
    shared: &Shared,
    chat_id: &str,
    kind: &str,
    message_id: i64,
    text: &str,
) -> Value {
    let id: Value = chat_id
        .parse::<i64>()
        .map_or_else(|_| json!(chat_id), |n| json!(n));
    json!({
        "message_id": message_id,
        "from": bot_user(shared),
        "chat": {"id": id, "type": kind},
        "date": now_s(),
        "text": text,
    })
}

pub(super) fn send_message(shared: &Shared, params: &Params) -> Outcome {
    let (chat_id, kind) = chat_of(shared, params)?;
    let text = params.string("text").unwrap_or_default();
    let parse_mode = params.string("parse_mode");
    let visible = visible_text(&text, parse_mode.as_deref())?;
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
            visible: visible.clone(),
            parse_mode: parse_mode.clone(),
        },
    );
    inner.sent.push(Sent {
        method: "sendMessage".into(),
        chat_id: chat_id.clone(),
        message_id,
        text,
        visible: visible.clone(),
        parse_mode,
        reply_to,
        action: None,
        file_name: None,
        file: None,
        at: Instant::now(),
    });
    let mut message = message_object(shared, &chat_id, &kind, message_id, &visible);
    if let Some(r) = reply_to {
        message["reply_to_message"] = json!({"message_id": r});
    }
    Ok(message)
}

pub(super) fn next_message_id(inner: &mut Inner, chat_id: &str) -> i64 {
    let chat = inner.chats.get_mut(chat_id).expect("the chat was checked");
    let id = chat.1;
    chat.1 += 1;
    id
}

pub(super) fn edit_message_text(shared: &Shared, params: &Params) -> Outcome {
    let (chat_id, kind) = chat_of(shared, params)?;
    let message_id = params
        .int("message_id")
        .ok_or_else(|| bad("message identifier is not specified"))?;
    let text = params.string("text").unwrap_or_default();
    let parse_mode = params.string("parse_mode");
    let visible = visible_text(&text, parse_mode.as_deref())?;
    let mut inner = shared.lock();
    let key = (chat_id.clone(), message_id);
    let Some(stored) = inner.messages.get(&key).cloned() else {
        return Err(bad("message to edit not found"));
    };
    if !stored.from_bot {
        return Err(bad("message can't be edited"));
    }
    if stored.visible == visible && stored.parse_mode == parse_mode {
        return Err(bad(
            "message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message",
        ));
    }
    inner.messages.insert(
        key,
        Stored {
            from_bot: true,
            visible: visible.clone(),
            parse_mode: parse_mode.clone(),
        },
    );
    inner.sent.push(Sent {
        method: "editMessageText".into(),
        chat_id: chat_id.clone(),
        message_id,
        text,
        visible: visible.clone(),
        parse_mode,
        reply_to: None,
        action: None,
        file_name: None,
        file: None,
        at: Instant::now(),
    });
    let mut message = message_object(shared, &chat_id, &kind, message_id, &visible);
    message["edit_date"] = json!(now_s());
    Ok(message)
}
