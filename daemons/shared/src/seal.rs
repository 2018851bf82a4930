//! Sealing small secrets at rest (bot tokens): AES-256-GCM with a key kept
//! in a file of its own (0600, refused when others can read it), each
//! sealed value bound to what it belongs to by associated data, so a sealed
//! token copied onto another binding's row does not open.

use std::path::Path;

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Key, Nonce};
use anyhow::Context;
use base64::Engine;

use crate::secrets::Secret;

/// The sealing key, read from (or made in) its file.
pub struct SealKey {
    cipher: Aes256Gcm,
}

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<seal key>")
    }
}

/// Why a sealed value did not open: another key, another owner, or a
/// damaged value. Never says the value.
#[derive(Debug, thiserror::Error)]
#[error("a sealed value does not open with this key and owner")]
pub struct OpenError;

impl SealKey {
    /// Reads the key at `path` (64 hex digits), or makes one there (0600)
    /// when there is none. A key file that group or others may read or
    /// write is refused: the key would not be secret any more.
    pub fn load_or_make(path: &Path) -> anyhow::Result<SealKey> {
        match crate::fsmode::mode_of(path) {
            Ok(mode) if mode & 0o077 != 0 => anyhow::bail!(
                "{} has mode {mode:o}: others may read the sealing key; make it 0600 (chmod 600) and check nobody copied it",
                path.display()
            ),
            Ok(_) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(err).with_context(|| format!("reading {}", path.display())),
        }
        let key = crate::secrets::read_or_make_key(path)?;
        SealKey::from_hex(&key).with_context(|| format!("reading the key in {}", path.display()))
    }

    fn from_hex(key: &Secret) -> anyhow::Result<SealKey> {
        let text = key.expose();
        if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            anyhow::bail!("a sealing key is 64 hex digits");
        }
        let mut bytes = [0u8; 32];
        for (i, byte) in bytes.iter_mut().enumerate() {
            // Two hex digits, checked just above.
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).expect("hex digits");
        }
        Ok(SealKey {
            cipher: Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(&bytes)),
        })
    }

    /// `secret` sealed for `owner`: base64 of a fresh 12-byte nonce and
    /// the ciphertext with its tag.
    pub fn seal(&self, secret: &str, owner: &str) -> String {
        let nonce: [u8; 12] = rand::random();
        let sealed = self
            .cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: secret.as_bytes(),
                    aad: owner.as_bytes(),
                },
            )
            // AES-GCM fails only past 64 GiB of plaintext.
            .expect("a small secret seals");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        base64::engine::general_purpose::STANDARD.encode(out)
    }

    /// Opens what `seal` made for the same `owner`.
    pub fn open(&self, sealed: &str, owner: &str) -> Result<Secret, OpenError> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(sealed)
            .map_err(|_| OpenError)?;
        if bytes.len() < 12 + 16 {
            return Err(OpenError);
        }
        let (nonce, sealed) = bytes.split_at(12);
        let plain = self
            .cipher
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: sealed,
                    aad: owner.as_bytes(),
                },
            )
            .map_err(|_| OpenError)?;
        String::from_utf8(plain)
            .map(Secret::new)
            .map_err(|_| OpenError)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn seals_for_one_owner_only() {
        let dir = tempfile::tempdir().unwrap();
        let key = SealKey::load_or_make(&dir.path().join("data/connectors.key")).unwrap();
        let sealed = key.seal("123:AAE-token", "cn_1");
        assert!(!sealed.contains("AAE-token"));
        assert_eq!(key.open(&sealed, "cn_1").unwrap().expose(), "123:AAE-token");
        assert!(key.open(&sealed, "cn_2").is_err(), "bound to its owner");
        assert_ne!(
            sealed,
            key.seal("123:AAE-token", "cn_1"),
            "a fresh nonce each time"
        );
        let again = SealKey::load_or_make(&dir.path().join("data/connectors.key")).unwrap();
        assert_eq!(
            again.open(&sealed, "cn_1").unwrap().expose(),
            "123:AAE-token"
        );
        let other = SealKey::load_or_make(&dir.path().join("other.key")).unwrap();
        assert!(other.open(&sealed, "cn_1").is_err());
        assert_eq!(
            crate::fsmode::mode_of(&dir.path().join("data/connectors.key")).unwrap(),
            0o600
        );
    }

    #[test]
    fn a_key_others_can_read_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("connectors.key");
        SealKey::load_or_make(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = SealKey::load_or_make(&path).unwrap_err().to_string();
        assert!(err.contains("has mode 644"), "{err}");
        std::fs::write(dir.path().join("short.key"), "abcd\n").unwrap();
        std::fs::set_permissions(
            dir.path().join("short.key"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        let err = format!(
            "{:#}",
            SealKey::load_or_make(&dir.path().join("short.key")).unwrap_err()
        );
        assert!(err.contains("64 hex digits"), "{err}");
    }
}
