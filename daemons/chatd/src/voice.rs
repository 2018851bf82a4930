//! Voice notes into text: an audio file (wav, mp3, m4a, ogg/opus, webm,
//! flac) is transcribed by the engine's `POST /v1/audio/transcriptions`
//! with the `[chatd] transcription_model`, else the engine's first model
//! that transcribes. Bounded in size ([`MAX_AUDIO_BYTES`]) and time (the
//! `transcription_timeout_s` setting); a transcript is kept by the audio's
//! sha-256 in chat.sqlite3 (`store::documents`), so the same bytes sent
//! again, or a retried send, are not transcribed twice.
//! [`Transcriber::transcribe`] is the one way in, for an attached file
//! (`api/outgoing.rs`) and any later path alike.

use std::fmt;
use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::config::ChatdConfig;
use crate::engine::{Engine, Fault};
use crate::models::Models;
use crate::store::documents as rows;
use crate::store::Store;
use crate::tools::fit::commas;

/// The line a transcript goes under in its message.
pub const LINE: &str = "[Voice message, transcribed]";

/// The largest audio file sent to be transcribed: the 25 MiB OpenAI's
/// transcription API takes, which OpenAI-compatible engines follow.
pub const MAX_AUDIO_BYTES: u64 = 25 << 20;

/// The audio kinds transcribed, by extension, with the type they are sent as.
const KINDS: &[(&str, &str)] = &[
    ("wav", "audio/wav"),
    ("mp3", "audio/mpeg"),
    ("m4a", "audio/mp4"),
    ("ogg", "audio/ogg"),
    ("oga", "audio/ogg"),
    ("opus", "audio/ogg"),
    ("webm", "audio/webm"),
    ("flac", "audio/flac"),
];

/// The type a voice note named `name` is sent as; `None` for a file that
/// is not one.
pub fn audio_type(name: &str) -> Option<&'static str> {
    let ext = name.rsplit_once('.')?.1.to_ascii_lowercase();
    KINDS.iter().find(|(e, _)| *e == ext).map(|(_, mime)| *mime)
}

/// What a voice note was heard as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transcript {
    pub text: String,
    /// The model that transcribed it now; `None` when it was kept from before.
    pub model: Option<String>,
}

/// Why a voice note has no transcript, in words for the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotTranscribed {
    /// Over [`MAX_AUDIO_BYTES`].
    TooLarge(u64),
    Unreadable(String),
    /// No setting names a model and none of the engine's transcribes.
    NoModel,
    /// The engine has no transcription route (its status).
    NoRoute(u16),
    /// The engine refused this audio (a 4xx and its message).
    Refused {
        status: u16,
        message: String,
    },
    /// The engine failed or could not be reached.
    Failed(String),
    /// No answer within the setting's seconds.
    TimedOut(u64),
    /// It answered with no words.
    Silent,
}

impl fmt::Display for NotTranscribed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotTranscribed::TooLarge(size) => write!(
                f,
                "it is {} bytes, over the {} MiB a transcription takes",
                commas(*size),
                MAX_AUDIO_BYTES >> 20
            ),
            NotTranscribed::Unreadable(why) => write!(f, "it could not be read ({why})"),
            NotTranscribed::NoModel => f.write_str(
                "no model of the engine transcribes speech ([chatd] transcription_model names none)",
            ),
            NotTranscribed::NoRoute(status) => write!(
                f,
                "the engine has no /v1/audio/transcriptions (it answered {status})"
            ),
            NotTranscribed::Refused { status, message } => {
                write!(f, "the engine refused it ({status}): {message}")
            }
            NotTranscribed::Failed(reason) => write!(f, "the transcription failed: {reason}"),
            NotTranscribed::TimedOut(secs) => {
                write!(f, "the engine gave no transcript within {secs} s")
            }
            NotTranscribed::Silent => f.write_str("no speech was heard in it"),
        }
    }
}

/// Transcribes voice notes through the engine, keeping what each sounded as.
#[derive(Clone)]
pub struct Transcriber {
    engine: Engine,
    models: Arc<Models>,
    store: Store,
    /// `[chatd] transcription_model` (empty: the engine's first that transcribes).
    model: String,
    timeout: Duration,
}

impl Transcriber {
    pub fn new(
        engine: Engine,
        models: Arc<Models>,
        store: Store,
        config: &ChatdConfig,
    ) -> Transcriber {
        Transcriber {
            engine,
            models,
            store,
            model: config.transcription_model.clone(),
            timeout: Duration::from_secs(config.transcription_timeout_s),
        }
    }

    /// The words of the voice note `file` (opened at offset 0), named
    /// `name` (its extension says its type), or why there are none.
    pub async fn transcribe(
        &self,
        file: std::fs::File,
        name: &str,
    ) -> Result<Transcript, NotTranscribed> {
        let mime = audio_type(name).unwrap_or("application/octet-stream");
        let size = file
            .metadata()
            .map_err(|e| NotTranscribed::Unreadable(e.kind().to_string()))?
            .len();
        if size > MAX_AUDIO_BYTES {
            return Err(NotTranscribed::TooLarge(size));
        }
        let (audio, sha) = tokio::task::spawn_blocking(move || read_hashed(file))
            .await
            .map_err(|_| NotTranscribed::Unreadable("the read stopped".into()))?
            .map_err(|e| NotTranscribed::Unreadable(e.kind().to_string()))?;
        if audio.len() as u64 > MAX_AUDIO_BYTES {
            return Err(NotTranscribed::TooLarge(audio.len() as u64));
        }
        let key = sha.clone();
        let kept = self
            .store
            .read(move |conn| Ok(rows::transcript(conn, &key)?))
            .await
            .ok()
            .flatten();
        if let Some(text) = kept {
            return Ok(Transcript { text, model: None });
        }
        let model = self
            .models
            .transcriber(&self.model)
            .ok_or(NotTranscribed::NoModel)?;
        let began = Instant::now();
        let bytes = audio.len();
        let heard = tokio::time::timeout(
            self.timeout,
            self.engine.transcribe(&model, name, mime, audio),
        )
        .await;
        let ms = began.elapsed().as_millis() as u64;
        let text = match heard {
            Err(_) => Err(NotTranscribed::TimedOut(self.timeout.as_secs())),
            Ok(Err(fault)) => Err(not_heard(fault)),
            Ok(Ok(text)) if text.is_empty() => Err(NotTranscribed::Silent),
            Ok(Ok(text)) => Ok(text),
        };
        tracing::info!(bytes, model = %model, ms, ok = text.is_ok(),
            chars = text.as_ref().map_or(0, |t| t.chars().count()), "voice note transcribed");
        let text = text?;
        let (row, now) = (text.clone(), jiff::Timestamp::now().as_second());
        // Not kept is only transcribed again next time: the transcript stands.
        let _ = self
            .store
            .write(move |ctx| {
                let reader = crate::documents::READER_VERSION;
                Ok(rows::put_transcript(ctx.conn(), &sha, &row, reader, now)?)
            })
            .await;
        Ok(Transcript {
            text,
            model: Some(model),
        })
    }
}

/// An engine's fault as the reason a voice note went without words. A 404
/// that names a model is the model's, not a missing route.
fn not_heard(fault: Fault) -> NotTranscribed {
    let no_route = |status: u16, message: &str| {
        matches!(status, 404 | 405 | 501) && !message.to_ascii_lowercase().contains("model")
    };
    match fault {
        Fault::Rejected { status, message } | Fault::Server { status, message }
            if no_route(status, &message) =>
        {
            NotTranscribed::NoRoute(status)
        }
        Fault::Rejected { status, message } => NotTranscribed::Refused { status, message },
        other => NotTranscribed::Failed(other.reason()),
    }
}

/// The file's bytes (at most one past [`MAX_AUDIO_BYTES`]) and their sha-256.
fn read_hashed(file: std::fs::File) -> std::io::Result<(Vec<u8>, String)> {
    let mut audio = Vec::new();
    file.take(MAX_AUDIO_BYTES + 1).read_to_end(&mut audio)?;
    let sha = crate::history::blobs::finish(Sha256::new_with_prefix(&audio));
    Ok((audio, sha))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audio_is_told_by_its_extension() {
        assert_eq!(audio_type("note.OGG"), Some("audio/ogg"));
        assert_eq!(audio_type("memo.opus"), Some("audio/ogg"));
        assert_eq!(audio_type("call.m4a"), Some("audio/mp4"));
        assert_eq!(audio_type("notes.txt"), None);
        assert_eq!(audio_type("wav"), None);
    }

    #[test]
    fn a_missing_route_is_told_from_a_missing_model() {
        let rejected = |status, message: &str| Fault::Rejected {
            status,
            message: message.into(),
        };
        assert_eq!(
            not_heard(rejected(404, "engine-sim: no such route")),
            NotTranscribed::NoRoute(404)
        );
        assert_eq!(
            not_heard(rejected(404, "The model `whisper` does not exist.")).to_string(),
            "the engine refused it (404): The model `whisper` does not exist."
        );
        let server = Fault::Server {
            status: 500,
            message: "boom".into(),
        };
        assert_eq!(
            not_heard(server).to_string(),
            "the transcription failed: engine error (500): boom"
        );
        assert_eq!(
            NotTranscribed::TooLarge(30_000_000).to_string(),
            "it is 30,000,000 bytes, over the 25 MiB a transcription takes"
        );
    }
}
