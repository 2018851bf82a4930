//! The fake Bot API's server: the accept loop, the dispatch of a method to
//! its handler (and of a set fault instead), and Telegram's answer shapes.

use super::*;

pub(super) async fn serve(listener: TcpListener, app: Router, mut stopped: oneshot::Receiver<()>) {
    let (cut_tx, cut_rx) = watch::channel(false);
    loop {
        tokio::select! {
            _ = &mut stopped => break,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                let app = app.clone();
                let mut cut = cut_rx.clone();
                tokio::spawn(async move {
                    let conn = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
                    tokio::select! {
                        _ = conn => {}
                        _ = cut.wait_for(|c| *c) => {}
                    }
                });
            }
        }
    }
    let _ = cut_tx.send(true);
}

pub(super) fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

pub(super) fn bot_user(shared: &Shared) -> Value {
    json!({"id": BOT_ID, "is_bot": true, "first_name": "Tandem Fake", "username": shared.username})
}

/// `mention` entities for @names and a `bot_command` for a leading
/// /command, with UTF-16 offsets as Telegram gives them.
pub(super) fn entities_of(text: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut offset = 0usize;
    let mut i = 0;
    while i < chars.len() {
        let start_ok = i == 0 || !is_name_char(chars[i - 1]);
        if (chars[i] == '@' || (chars[i] == '/' && i == 0)) && start_ok {
            let mut j = i + 1;
            while j < chars.len()
                && (is_name_char(chars[j]) || (chars[i] == '/' && chars[j] == '@'))
            {
                j += 1;
            }
            if j - i > 1 {
                let length: usize = chars[i..j].iter().map(|c| c.len_utf16()).sum();
                let kind = if chars[i] == '@' {
                    "mention"
                } else {
                    "bot_command"
                };
                out.push(json!({"type": kind, "offset": offset, "length": length}));
                offset += length;
                i = j;
                continue;
            }
        }
        offset += chars[i].len_utf16();
        i += 1;
    }
    out
}

pub(super) fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

pub(super) fn answer_ok(result: Value) -> Response {
    let body = json!({"ok": true, "result": result}).to_string();
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

pub(super) fn answer_error(code: u16, description: &str, retry_after: Option<u64>) -> Response {
    let mut body = json!({"ok": false, "error_code": code, "description": description});
    if let Some(seconds) = retry_after {
        body["parameters"] = json!({"retry_after": seconds});
    }
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_REQUEST);
    let mut response = (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response();
    if let Some(seconds) = retry_after {
        if let Ok(v) = seconds.to_string().parse() {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
    }
    response
}

pub(super) fn fault_response(fault: &Fault) -> Response {
    match fault {
        Fault::Conflict409 => answer_error(409, CONFLICT, None),
        Fault::Unauthorized401 => answer_error(401, "Unauthorized", None),
        Fault::TooMany429 { retry_after } => answer_error(
            429,
            &format!("Too Many Requests: retry after {retry_after}"),
            Some(*retry_after),
        ),
        Fault::ParseError400 => answer_error(400, PARSE_ERROR, None),
        Fault::ServerError500 => answer_error(500, "Internal Server Error", None),
        Fault::CutConnection => {
            // Headers promise a body that never comes: hyper drops the
            // connection, and the client sees it cut.
            let stream = futures_util::stream::once(async {
                Err::<Bytes, std::io::Error>(std::io::Error::other("cut on cue"))
            });
            Response::builder()
                .status(200)
                .header(header::CONTENT_LENGTH, "64")
                .body(Body::from_stream(stream))
                .unwrap_or_default()
        }
    }
}

pub(super) async fn handle(
    AxumState(shared): AxumState<Arc<Shared>>,
    Path((bot, method)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let record = |status: u16, offset: Option<i64>| {
        shared.lock().calls.push(Call {
            method: method.clone(),
            status,
            offset,
            at: Instant::now(),
        });
    };
    let token = bot.strip_prefix("bot").unwrap_or("");
    let other = shared.lock().other_bots.iter().any(|t| t == token);
    if token != shared.token && !other {
        record(401, None);
        return answer_error(401, "Unauthorized", None);
    }
    if other && method == "getMe" {
        record(200, None);
        let id: i64 = token
            .split(':')
            .next()
            .and_then(|d| d.parse().ok())
            .unwrap_or(1);
        return answer_ok(
            json!({"id": id, "is_bot": true, "first_name": "Tandem Fake", "username": format!("bot{id}_bot")}),
        );
    }
    let params = match Params::parse(&headers, query, &body) {
        Ok(p) => p,
        Err(why) => {
            record(400, None);
            return answer_error(400, &why, None);
        }
    };
    let offset = (method == "getUpdates").then(|| params.int("offset").unwrap_or(0));
    if let Some(offset) = offset {
        shared.lock().polls.push(offset);
    }
    let fault = {
        let mut inner = shared.lock();
        let queued = inner
            .next_faults
            .get_mut(&method)
            .and_then(VecDeque::pop_front)
            .or_else(|| inner.next_faults.get_mut("*").and_then(VecDeque::pop_front));
        queued.or_else(|| {
            inner
                .always
                .get(&method)
                .or_else(|| inner.always.get("*"))
                .cloned()
        })
    };
    if let Some(fault) = fault {
        let status = match fault {
            Fault::Conflict409 => 409,
            Fault::Unauthorized401 => 401,
            Fault::TooMany429 { .. } => 429,
            Fault::ParseError400 => 400,
            Fault::ServerError500 => 500,
            Fault::CutConnection => 0,
        };
        record(status, offset);
        return fault_response(&fault);
    }
    let outcome = match method.as_str() {
        "getMe" => Ok(bot_user(&shared)),
        "getUpdates" => get_updates(&shared, &params).await,
        "sendMessage" => send_message(&shared, &params),
        "editMessageText" => edit_message_text(&shared, &params),
        "sendChatAction" => send_chat_action(&shared, &params),
        "sendDocument" => send_document(&shared, &params),
        _ => Err((404, "Not Found".to_string(), None)),
    };
    match outcome {
        Ok(result) => {
            record(200, offset);
            answer_ok(result)
        }
        Err((code, description, retry_after)) => {
            record(code, offset);
            answer_error(code, &description, retry_after)
        }
    }
}

pub(super) type Outcome = Result<Value, (u16, String, Option<u64>)>;

pub(super) fn bad(description: &str) -> (u16, String, Option<u64>) {
    (400, format!("Bad Request: {description}"), None)
}
