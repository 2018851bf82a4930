//! Documents a chat's files hold (PDF, workbooks, Word, slides, EPUB,
//! CSV/TSV): read into text by a helper process with limits
//! ([`helper::Reader`]), so a parser's crash or loop costs one document and
//! never chatd. What a version of a file reads as is kept by its sha-256 in
//! chat.sqlite3 (`store::documents`): it is read once.

pub mod formats;
pub mod helper;
pub mod hints;
pub mod images;

use std::io::{Read, Seek};
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::store::documents::{self as rows, Kept};
use crate::store::Store;
pub use formats::{DocKind, Extracted, Part};
pub use helper::{Failure, Limits, Reader};

/// The reader's version: text kept by an older one is read again.
pub const READER_VERSION: u32 = 1;

/// The most characters of a document put into a message it is attached to.
pub const INLINE_CHARS: usize = 20_000;

/// A document as read, with what it was read as.
#[derive(Debug, Clone)]
pub struct DocText {
    pub kind: DocKind,
    pub extracted: Extracted,
}

impl DocText {
    /// One line on what the text is: "PDF, 4 pages" with its notes.
    pub fn line(&self) -> String {
        let parts = &self.extracted.parts;
        let unit = match self.kind {
            DocKind::Pdf => "page",
            DocKind::Workbook => "sheet",
            DocKind::Pptx => "slide",
            DocKind::Epub => "chapter",
            DocKind::Docx | DocKind::Csv | DocKind::Tsv => "",
        };
        let mut line = self.kind.word().to_string();
        if !unit.is_empty() {
            let n = parts.len();
            line.push_str(&format!(", {n} {unit}{}", if n == 1 { "" } else { "s" }));
        }
        for note in &self.extracted.notes {
            line.push_str("; ");
            line.push_str(note);
        }
        line
    }
}

/// Reads documents, keeping what each version read as.
#[derive(Clone)]
pub struct Documents {
    reader: Reader,
    store: Store,
}

impl Documents {
    pub fn new(reader: Reader, store: Store) -> Documents {
        Documents { reader, store }
    }

    /// The text of `file` (opened at offset 0) read as `kind`, or the cause
    /// in one line when it cannot be read.
    pub async fn read(&self, file: std::fs::File, kind: DocKind) -> Result<Arc<DocText>, String> {
        let hashed = tokio::task::spawn_blocking(move || sha_of(file)).await;
        let (file, sha) = match hashed {
            Ok(Ok(done)) => done,
            Ok(Err(e)) => return Err(format!("it could not be read ({})", e.kind())),
            Err(_) => return Err("it could not be read".into()),
        };
        self.read_hashed(file, sha, kind).await
    }

    /// [`Documents::read`] of a file whose sha-256 is known already (a
    /// blob, named by it), so its bytes are not hashed again.
    pub async fn read_hashed(
        &self,
        file: std::fs::File,
        sha: String,
        kind: DocKind,
    ) -> Result<Arc<DocText>, String> {
        let key = sha.clone();
        let kept = self
            .store
            .read(move |conn| Ok(rows::get(conn, &key, kind, READER_VERSION)?))
            .await
            .ok()
            .flatten();
        let kept = match kept {
            Some(kept) => kept,
            None => {
                let kept = match self.reader.read(file, kind).await {
                    Ok(extracted) => Kept::Read(extracted),
                    Err(failure) if failure.lasting() => Kept::Failed(failure.to_string()),
                    Err(failure) => return Err(failure.to_string()),
                };
                let row = kept.clone();
                let now = jiff::Timestamp::now().as_second();
                // Not kept is only read again next time: the answer stands.
                let _ = self
                    .store
                    .write(move |ctx| {
                        Ok(rows::put(
                            ctx.conn(),
                            &sha,
                            kind,
                            READER_VERSION,
                            &row,
                            now,
                        )?)
                    })
                    .await;
                kept
            }
        };
        match kept {
            Kept::Read(extracted) => Ok(Arc::new(DocText { kind, extracted })),
            Kept::Failed(cause) => Err(cause),
        }
    }

    /// The preview of `file` (opened at offset 0) for the files pane; never
    /// kept, as a person opens a file far less often than a run reads one.
    pub async fn preview(
        &self,
        file: std::fs::File,
        kind: formats::preview::PreviewKind,
    ) -> Result<formats::preview::Preview, Failure> {
        self.reader.preview(file, kind).await
    }

    /// The image `file` made fit for a model, or why it cannot be.
    pub async fn scale_image(&self, file: std::fs::File) -> Result<images::Scaled, String> {
        self.reader
            .scale_image(file)
            .await
            .map_err(|failure| failure.to_string())
    }

    /// [`Documents::read`] from a blocking thread (a tool's).
    pub fn read_blocking(
        &self,
        file: std::fs::File,
        kind: DocKind,
    ) -> Result<Arc<DocText>, String> {
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => handle.block_on(self.read(file, kind)),
            Err(_) => Err("the document reader is unavailable here".into()),
        }
    }
}

/// The file's sha-256, and the file back at offset 0.
fn sha_of(mut file: std::fs::File) -> std::io::Result<(std::fs::File, String)> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 << 10];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    file.rewind()?;
    Ok((file, crate::history::blobs::finish(hasher)))
}
