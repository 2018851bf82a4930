//! `POST /v1/audio/transcriptions`, OpenAI's shape: a multipart form with
//! `file` and `model` (other fields taken and logged), answered
//! `{"text": ...}`. What it answers is steered by a cue inside the audio's
//! own bytes, `[sim key=value ...]`:
//!   transcript=TEXT   the transcript (a "quoted" value may hold spaces)
//!   status=CODE       answer CODE with an OpenAI error body (message=TEXT)
//!   hang=1            answer nothing for 10 minutes (a stuck engine)
//! Without a cue the transcript is `engine-sim heard N bytes of audio.`.
//! Every request is logged (`GET /sim/transcriptions`); `--no-transcriptions`
//! leaves the route out (404, like an engine without it).

use super::*;

/// How long a `hang=1` request is held before it is answered after all.
const HANG: Duration = Duration::from_secs(600);

/// What a cue in the audio asks for.
#[derive(Debug, Default, PartialEq)]
struct AudioCue {
    transcript: Option<String>,
    status: Option<u16>,
    message: Option<String>,
    hang: bool,
}

pub(super) async fn transcriptions(
    State(sim): State<Arc<Sim>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let at_us = unix_micros() as u64;
    let boundary = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|ct| multer::parse_boundary(ct).ok());
    let Some(boundary) = boundary else {
        return bad_request(&sim, "the body must be multipart/form-data with a boundary");
    };
    let stream = futures_util::stream::once(async move { Ok::<Bytes, std::io::Error>(body) });
    let mut form = multer::Multipart::new(stream, boundary);
    let (mut model, mut audio, mut file_name, mut file_type) = (None, None, None, None);
    let mut fields = Vec::new();
    loop {
        let field = match form.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => break,
            Err(e) => return bad_request(&sim, &format!("malformed multipart body: {e}")),
        };
        let name = field.name().unwrap_or("").to_string();
        fields.push(name.clone());
        match name.as_str() {
            "file" => {
                file_name = field.file_name().map(str::to_string);
                file_type = field.content_type().map(|m| m.to_string());
                match field.bytes().await {
                    Ok(bytes) => audio = Some(bytes),
                    Err(e) => return bad_request(&sim, &format!("the file part: {e}")),
                }
            }
            "model" => model = field.text().await.ok(),
            _ => {
                let _ = field.bytes().await;
            }
        }
    }
    {
        let mut inner = sim.lock();
        let n = inner.transcriptions.len();
        if inner.transcriptions.len() >= REQUEST_LOG_MAX {
            inner.transcriptions.pop_front();
        }
        inner.transcriptions.push_back(json!({
            "model": model,
            "file_name": file_name,
            "content_type": file_type,
            "file_bytes": audio.as_ref().map(Bytes::len),
            "fields": fields,
            "at_us": at_us,
            "n": n,
        }));
    }
    let Some(audio) = audio else {
        return bad_request(&sim, "'file' is required");
    };
    if model.as_deref().is_none_or(str::is_empty) {
        return bad_request(&sim, "'model' is required");
    }
    let cue = match audio_cue(&audio) {
        Ok(cue) => cue,
        Err(e) => return bad_request(&sim, &format!("engine-sim: bad audio cue: {e}")),
    };
    if cue.hang {
        tokio::time::sleep(HANG).await;
    }
    if let Some(status) = cue.status {
        sim.count_status(status);
        let message = cue
            .message
            .unwrap_or_else(|| format!("engine-sim: simulated transcription error {status}"));
        return error_response(status, &message, error_type(status), None);
    }
    let text = cue
        .transcript
        .unwrap_or_else(|| format!("engine-sim heard {} bytes of audio.", audio.len()));
    Json(json!({"text": text})).into_response()
}

/// The transcription requests received (last 1000):
/// `[{model, file_name, content_type, file_bytes, fields, at_us, n}]`.
pub(super) async fn transcriptions_get(State(sim): State<Arc<Sim>>) -> Json<Value> {
    Json(Value::Array(
        sim.lock().transcriptions.iter().cloned().collect(),
    ))
}

pub(super) async fn transcriptions_clear(State(sim): State<Arc<Sim>>) -> Json<Value> {
    sim.lock().transcriptions.clear();
    Json(json!({"cleared": true}))
}

/// The cue `[sim ...]` inside the audio's bytes, if any.
fn audio_cue(audio: &[u8]) -> Result<AudioCue, String> {
    let mut cue = AudioCue::default();
    let Some(at) = memchr_find(audio, b"[sim ") else {
        return Ok(cue);
    };
    let rest = String::from_utf8_lossy(&audio[at + 5..]);
    let mut chars = rest.chars().peekable();
    loop {
        while chars.peek() == Some(&' ') {
            chars.next();
        }
        match chars.peek() {
            None => return Err("the cue has no closing ]".into()),
            Some(']') => return Ok(cue),
            Some(_) => {}
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        let value: String = if chars.peek() == Some(&'"') {
            chars.next();
            let value = chars.by_ref().take_while(|c| *c != '"').collect();
            value
        } else {
            let mut value = String::new();
            while let Some(c) = chars.peek().copied() {
                if c == ' ' || c == ']' {
                    break;
                }
                value.push(c);
                chars.next();
            }
            value
        };
        match key.as_str() {
            "transcript" => cue.transcript = Some(value),
            "message" => cue.message = Some(value),
            "status" => match value.parse::<u16>() {
                Ok(s) if (400..=599).contains(&s) => cue.status = Some(s),
                _ => return Err(format!("status={value} is not 400..=599")),
            },
            "hang" => cue.hang = value == "1",
            other => return Err(format!("unknown key {other:?}")),
        }
    }
}

/// Where `needle` starts in `hay`.
fn memchr_find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cues_are_read_from_the_audio() {
        let cue = audio_cue(b"RIFF\0\0WAVE[sim transcript=\"Buy milk.\" ]\0\0").unwrap();
        assert_eq!(cue.transcript.as_deref(), Some("Buy milk."));
        let cue = audio_cue(b"OggS[sim status=500 message=\"boom\"]").unwrap();
        assert_eq!(
            (cue.status, cue.message.as_deref()),
            (Some(500), Some("boom"))
        );
        assert!(audio_cue(b"[sim hang=1]").unwrap().hang);
        assert_eq!(audio_cue(b"no cue here").unwrap(), AudioCue::default());
        assert!(audio_cue(b"[sim nope=1]").is_err());
    }
}
