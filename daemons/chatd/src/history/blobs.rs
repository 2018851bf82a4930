//! Content-addressed copies of files: `blobs/<sha[:2]>/<sha>`, 0600 in 0700
//! folders, written once (a temp file renamed into place) and never changed.
//! A blob is what an undo or a restore writes back.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The sha-256 of some bytes, in lower-case hex.
pub type Sha = String;

/// A hash's digest in lower-case hex: a blob's name.
pub fn finish(hasher: Sha256) -> Sha {
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[derive(Debug, Clone)]
pub struct Blobs {
    root: PathBuf,
}

/// What a copy read: its hash and its size.
pub struct Kept {
    pub sha: Sha,
    pub size: u64,
}

impl Blobs {
    pub fn new(root: PathBuf) -> Blobs {
        Blobs { root }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the blob of `sha` lives; `None` for a text that is not a sha.
    pub fn path(&self, sha: &str) -> Option<PathBuf> {
        let valid = sha.len() == 64 && sha.bytes().all(|b| b.is_ascii_hexdigit());
        valid.then(|| self.root.join(&sha[..2]).join(sha))
    }

    pub fn has(&self, sha: &str) -> bool {
        self.path(sha).is_some_and(|p| p.is_file())
    }

    /// Copies everything `source` gives into a blob, hashing on the way;
    /// at most `max` bytes (`Ok(None)` past it: nothing kept).
    pub fn keep(&self, source: &mut impl Read, max: u64) -> io::Result<Option<Kept>> {
        let tmp_dir = self.root.join("tmp");
        tandem_shared::fsmode::private_dir(&tmp_dir)?;
        let mut temp = tempfile::Builder::new()
            .prefix("blob-")
            .tempfile_in(&tmp_dir)?;
        let mut hasher = Sha256::new();
        let mut size = 0u64;
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            let n = source.read(&mut buf)?;
            if n == 0 {
                break;
            }
            size += n as u64;
            if size > max {
                return Ok(None);
            }
            hasher.update(&buf[..n]);
            temp.write_all(&buf[..n])?;
        }
        let sha = finish(hasher);
        // The sha was just made from hex digits: it is a valid name.
        let target = self.path(&sha).expect("a hash in hex names a blob");
        if !target.is_file() {
            temp.as_file().sync_all()?;
            if let Some(dir) = target.parent() {
                tandem_shared::fsmode::private_dir(dir)?;
            }
            temp.persist(&target).map_err(|e| e.error)?;
        }
        Ok(Some(Kept { sha, size }))
    }

    /// Opens a blob for reading; `NotFound` when it is not kept.
    pub fn open(&self, sha: &str) -> io::Result<File> {
        let path = self
            .path(sha)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a sha-256"))?;
        File::open(path)
    }

    /// Removes blobs no longer needed; returns the bytes freed.
    pub fn remove(&self, shas: &[Sha]) -> u64 {
        let mut freed = 0;
        for sha in shas {
            let Some(path) = self.path(sha) else { continue };
            if let Ok(meta) = std::fs::metadata(&path) {
                if std::fs::remove_file(&path).is_ok() {
                    freed += meta.len();
                }
            }
        }
        freed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_bytes_are_kept_once_and_read_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::new(dir.path().join("blobs"));
        let a = blobs.keep(&mut &b"hello"[..], 100).unwrap().unwrap();
        let b = blobs.keep(&mut &b"hello"[..], 100).unwrap().unwrap();
        assert_eq!(a.sha, b.sha);
        assert_eq!(a.size, 5);
        let mut back = String::new();
        blobs
            .open(&a.sha)
            .unwrap()
            .read_to_string(&mut back)
            .unwrap();
        assert_eq!(back, "hello");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(blobs.path(&a.sha).unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(blobs.keep(&mut &b"too long"[..], 3).unwrap().is_none());
        assert_eq!(blobs.remove(std::slice::from_ref(&a.sha)), 5);
        assert!(!blobs.has(&a.sha));
        assert!(blobs.path("../../etc/passwd").is_none());
    }
}
