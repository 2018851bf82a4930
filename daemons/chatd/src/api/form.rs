//! `multipart/form-data` bodies (a message with its files, a file put):
//! settings are small text parts that come first; each file part is
//! streamed to the workspace as it arrives, through a bounded channel to a
//! blocking writer that renames it into place only once the part ended
//! whole. A cut, a stall or a part over its limit leaves nothing behind,
//! and no request holds more than a few chunks in memory.

use std::io::{self, Read};
use std::path::PathBuf;
use std::time::Duration;

use axum::extract::Request;
use axum::http::header;
use bytes::{Buf, Bytes};
use tandem_shared::http::ApiError;
use tokio::sync::mpsc;

use crate::workspace::Workspace;

/// How long a part may send nothing before the upload is dropped.
const STALL: Duration = Duration::from_secs(60);
/// Chunks in flight between the request and the writer.
const IN_FLIGHT: usize = 8;

/// Whether a request's body is a form (else it is JSON).
pub fn is_form(request: &Request) -> bool {
    request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("multipart/form-data")
        })
}

/// What a form may carry: the whole body, one file, and each setting by name.
pub struct Limits {
    pub body: u64,
    pub file: u64,
    pub settings: &'static [(&'static str, u64)],
}

/// A form being read, part by part.
pub struct Form {
    parts: multer::Multipart<'static>,
    file_max: u64,
    settings: &'static [(&'static str, u64)],
    files: usize,
}

/// One part: a setting (its text) or a file to stream.
pub enum Part {
    Setting(&'static str, String),
    File(Box<FilePart>),
}

/// A file part not yet read: its name as sent and its type, if given.
pub struct FilePart {
    field: multer::Field<'static>,
    /// `files[N]`: what an error about it names.
    pub label: String,
    pub name: String,
    pub mime: Option<String>,
    max: u64,
}

impl Form {
    /// Opens the body; 400 naming `Content-Type` when it is no form.
    pub fn open(request: Request, limits: &Limits) -> Result<Form, ApiError> {
        let kind = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let boundary = multer::parse_boundary(kind).map_err(|_| {
            ApiError::bad_input(
                "Content-Type",
                "must be multipart/form-data with a boundary",
            )
        })?;
        let mut size = multer::SizeLimit::new().whole_stream(limits.body);
        for (name, max) in limits.settings {
            size = size.for_field(*name, *max);
        }
        let constraints = multer::Constraints::new().size_limit(size);
        let stream = request.into_body().into_data_stream();
        Ok(Form {
            parts: multer::Multipart::with_constraints(stream, boundary, constraints),
            file_max: limits.file,
            settings: limits.settings,
            files: 0,
        })
    }

    /// The next part; `None` at the end.
    pub async fn next(&mut self) -> Result<Option<Part>, ApiError> {
        let field = match tokio::time::timeout(STALL, self.parts.next_field()).await {
            Err(_) => return Err(stalled()),
            Ok(field) => field.map_err(refusal)?,
        };
        let Some(field) = field else {
            return Ok(None);
        };
        if let Some(file_name) = field.file_name() {
            let label = format!("files[{}]", self.files);
            self.files += 1;
            return Ok(Some(Part::File(Box::new(FilePart {
                label,
                name: file_name.to_string(),
                mime: field.content_type().map(|m| m.essence_str().to_string()),
                max: self.file_max,
                field,
            }))));
        }
        let name = field.name().unwrap_or("").to_string();
        let Some(&(known, _)) = self.settings.iter().find(|(n, _)| *n == name) else {
            let known: Vec<&str> = self.settings.iter().map(|(n, _)| *n).collect();
            return Err(ApiError::bad_input(
                &name,
                format!(
                    "is not a field of this form (settings: {}; a file part needs a filename)",
                    known.join(", ")
                ),
            ));
        };
        let text = match tokio::time::timeout(STALL, field.text()).await {
            Err(_) => return Err(stalled()),
            Ok(text) => text.map_err(refusal)?,
        };
        Ok(Some(Part::Setting(known, text)))
    }
}

impl FilePart {
    /// Streams the part into `path` of the workspace at `root`, all or
    /// nothing; the bytes written.
    pub async fn write_to(mut self, root: PathBuf, path: String) -> Result<u64, ApiError> {
        let (tx, rx) = mpsc::channel(IN_FLIGHT);
        let writer = tokio::task::spawn_blocking(move || {
            let workspace = Workspace::open(&root).map_err(|e| e.to_string())?;
            let mut incoming = Incoming {
                rx,
                buf: Bytes::new(),
                ended: false,
            };
            workspace
                .write_from(&path, &mut incoming)
                .map_err(|e| e.message().to_string())
        });
        let mut size = 0u64;
        let read = loop {
            let chunk = match tokio::time::timeout(STALL, self.field.chunk()).await {
                Err(_) => break Err(stalled()),
                Ok(Err(e)) => break Err(refusal(e)),
                Ok(Ok(chunk)) => chunk,
            };
            let Some(chunk) = chunk else {
                // The part ended whole: only now may the writer keep it.
                let _ = tx.send(Piece::End).await;
                break Ok(());
            };
            size += chunk.len() as u64;
            if size > self.max {
                let what = format!("{} ({})", self.label, self.name);
                break Err(ApiError::too_large(&what, self.max as usize));
            }
            if tx.send(Piece::Bytes(chunk)).await.is_err() {
                // The writer stopped: its error is the answer.
                break Ok(());
            }
        };
        // Without `End` the writer's read fails and it removes its temp file.
        drop(tx);
        let written = writer
            .await
            .map_err(|_| ApiError::internal("writing the upload stopped"))?;
        read?;
        written
            .map_err(|e| ApiError::internal(format!("{} could not be written: {e}", self.label)))?;
        Ok(size)
    }
}

enum Piece {
    Bytes(Bytes),
    End,
}

/// The blocking side of the channel: a reader that fails unless the part
/// ended whole, so a dropped request never leaves a cut file in place.
struct Incoming {
    rx: mpsc::Receiver<Piece>,
    buf: Bytes,
    ended: bool,
}

impl Read for Incoming {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.buf.is_empty() {
            if self.ended {
                return Ok(0);
            }
            match self.rx.blocking_recv() {
                Some(Piece::Bytes(bytes)) => self.buf = bytes,
                Some(Piece::End) => self.ended = true,
                None => return Err(io::Error::other("the upload was cut")),
            }
        }
        let n = out.len().min(self.buf.len());
        out[..n].copy_from_slice(&self.buf[..n]);
        self.buf.advance(n);
        Ok(n)
    }
}

fn stalled() -> ApiError {
    ApiError::bad_input(
        "body",
        format!(
            "nothing came for {} s: the upload was dropped",
            STALL.as_secs()
        ),
    )
}

/// A form multer could not read, in the CONTRACT's words.
fn refusal(e: multer::Error) -> ApiError {
    match e {
        multer::Error::StreamSizeExceeded { limit } => {
            ApiError::too_large("the request body", limit as usize)
        }
        multer::Error::FieldSizeExceeded { limit, field_name } => {
            let name = field_name.unwrap_or_default();
            ApiError::too_large(&name, limit as usize)
        }
        multer::Error::StreamReadFailed(_) => {
            ApiError::bad_input("body", "the upload was cut before its end")
        }
        other => ApiError::bad_input("body", format!("is not a readable form: {other}")),
    }
}
