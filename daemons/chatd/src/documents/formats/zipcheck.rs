//! The zip under .docx, .pptx, .xlsx/.ods and .epub, opened only after a
//! zip-bomb check: a few KiB can declare, or hide, gigabytes.
//!
//! The declared sizes are checked first (their total, each entry's ratio,
//! the number of entries); then every entry is unpacked once into nothing,
//! counting, so an entry that unpacks past what it declares is caught
//! before a reader (ours or calamine's) trusts the declaration.

use std::io::{Cursor, Read};

use zip::result::ZipError;
use zip::ZipArchive;

use super::{cause, grouped, DocKind, Refusal};

/// An opened, checked archive.
pub(super) type Archive<'a> = ZipArchive<Cursor<&'a [u8]>>;

/// The most all entries together may unpack to.
const MAX_UNPACKED: u64 = 256 << 20;
/// An entry above [`RATIO_FLOOR`] may unpack to at most this many times its
/// packed size (text deflates 5-20×; a run of one byte, 1,000×).
const MAX_RATIO: u64 = 100;
const RATIO_FLOOR: u64 = 1 << 20;
const MAX_ENTRIES: usize = 10_000;

/// The first bytes of a zip with at least one entry.
const ZIP_MAGIC: &[u8] = b"PK\x03\x04";
/// The first bytes of an OLE compound file: where Office keeps a
/// password-protected .docx/.xlsx/.pptx (and an old .xls).
pub(super) const OLE_MAGIC: &[u8] = b"\xD0\xCF\x11\xE0\xA1\xB1\x1A\xE1";

pub(super) fn is_zip(bytes: &[u8]) -> bool {
    bytes.starts_with(ZIP_MAGIC)
}

/// Whether `bytes` are Office's encrypted package: an OLE file with an
/// `EncryptedPackage` stream (its directory names the stream in UTF-16).
pub(super) fn is_encrypted_office(bytes: &[u8]) -> bool {
    const NAME: &[u8] = b"E\0n\0c\0r\0y\0p\0t\0e\0d\0P\0a\0c\0k\0a\0g\0e\0";
    bytes.starts_with(OLE_MAGIC) && memchr::memmem::find(bytes, NAME).is_some()
}

/// Opens `bytes` as the zip a document of `kind` is, refusing what is no
/// zip, a damaged one and a bomb.
pub(super) fn open(bytes: &[u8], kind: DocKind) -> Result<Archive<'_>, Refusal> {
    if is_encrypted_office(bytes) {
        return Err(Refusal::Encrypted);
    }
    if !is_zip(bytes) {
        return Err(Refusal::NotWhatItSays(kind.word().into()));
    }
    let mut archive = ZipArchive::new(Cursor::new(bytes))
        .map_err(|e| Refusal::Damaged(cause(format_args!("its zip directory: {e}"))))?;
    check(&mut archive)?;
    Ok(archive)
}

fn check(archive: &mut Archive<'_>) -> Result<(), Refusal> {
    if archive.len() > MAX_ENTRIES {
        return Err(Refusal::Bomb(format!(
            "{} entries, more than {}",
            grouped(archive.len()),
            grouped(MAX_ENTRIES)
        )));
    }
    let mut total: u64 = 0;
    for i in 0..archive.len() {
        let entry = archive.by_index_raw(i).map_err(damaged)?;
        if entry.encrypted() {
            return Err(Refusal::Encrypted);
        }
        total = total.saturating_add(entry.size());
        if total > MAX_UNPACKED {
            return Err(Refusal::Bomb(format!(
                "its entries declare more than {} MiB unpacked",
                MAX_UNPACKED >> 20
            )));
        }
        let ratio = entry.size() / entry.compressed_size().max(1);
        if entry.size() > RATIO_FLOOR && ratio > MAX_RATIO {
            return Err(Refusal::Bomb(format!(
                "{} unpacks to {}× its packed size, more than {MAX_RATIO}×",
                String::from_utf8_lossy(entry.name_raw()),
                grouped(usize::try_from(ratio).unwrap_or(usize::MAX))
            )));
        }
    }
    let mut buffer = vec![0u8; 64 << 10];
    for i in 0..archive.len() {
        let mut entry = archive.by_index(i).map_err(damaged)?;
        let declared = entry.size();
        let name = String::from_utf8_lossy(entry.name_raw()).into_owned();
        let past = || {
            Refusal::Bomb(format!(
                "{name} unpacks past the {} bytes it declares",
                grouped(usize::try_from(declared).unwrap_or(usize::MAX))
            ))
        };
        let mut unpacked: u64 = 0;
        loop {
            match entry.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => unpacked += n as u64,
                // zip stops an entry at its declared size with this error
                // (the `lying_zip` test holds its wording to this).
                Err(e) if e.to_string().contains("larger than its declared") => return Err(past()),
                Err(e) => return Err(Refusal::Damaged(cause(format_args!("{name}: {e}")))),
            }
            if unpacked > declared {
                return Err(past());
            }
        }
    }
    Ok(())
}

fn damaged(e: ZipError) -> Refusal {
    Refusal::Damaged(cause(e))
}

/// The bytes of entry `name` (the exact name, else the same name in
/// another case, as OOXML's part names are), or `None` when it is absent.
pub(super) fn read(archive: &mut Archive<'_>, name: &str) -> Result<Option<Vec<u8>>, Refusal> {
    let name = name.trim_start_matches('/');
    let index = match archive.index_for_name(name) {
        Some(index) => index,
        None => {
            let found = archive
                .file_names_raw()
                .find(|n| n.eq_ignore_ascii_case(name.as_bytes()))
                .map(<[u8]>::to_vec);
            match found.and_then(|n| archive.index_for_name_raw(&n)) {
                Some(index) => index,
                None => return Ok(None),
            }
        }
    };
    let entry = archive.by_index(index).map_err(damaged)?;
    let declared = entry.size();
    let mut bytes = Vec::with_capacity(usize::try_from(declared.min(MAX_UNPACKED)).unwrap_or(0));
    entry
        .take(declared + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Refusal::Damaged(cause(format_args!("{name}: {e}"))))?;
    Ok(Some(bytes))
}

/// Entry `name` as text (XML parts are UTF-8; a stray byte becomes U+FFFD).
pub(super) fn read_text(archive: &mut Archive<'_>, name: &str) -> Result<Option<String>, Refusal> {
    Ok(
        read(archive, name)?.map(|bytes| match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }),
    )
}
