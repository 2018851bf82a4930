//! The forward key every internal call carries, and the admin token of the
//! front. They come from `QSE_SECRETS` (`~/TandemLLM/state/secrets.env`);
//! with no forward key there, the daemon makes `forward.key` (0600) in its
//! data folder once and keeps using it. Secrets are never logged. A secrets
//! file or key file that group or others may read or write is refused, as
//! connectord refuses its sealing key: every daemon and `tandem` stop with
//! a line naming the file and the fix.

use std::path::{Path, PathBuf};

use anyhow::Context;
use subtle::ConstantTimeEq;

/// A secret that never prints itself.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Secret {
        Secret(value)
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
    /// Constant-time comparison with what a caller presented.
    pub fn matches(&self, presented: &str) -> bool {
        self.0.as_bytes().ct_eq(presented.as_bytes()).into()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<secret>")
    }
}

#[derive(Debug, Clone)]
pub struct Secrets {
    pub forward_key: Secret,
    pub admin_token: Option<Secret>,
    /// Where the forward key came from (a path), for the startup log line.
    pub forward_key_source: PathBuf,
}

/// The default secrets file: `~/TandemLLM/state/secrets.env`.
pub fn default_secrets_path() -> PathBuf {
    home().join("TandemLLM/state/secrets.env")
}

pub fn home() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"))
}

/// Loads the secrets: `secrets_file` when it exists, else a `forward.key`
/// kept in `data_dir` (made on first use).
pub fn load(secrets_file: &Path, data_dir: &Path) -> anyhow::Result<Secrets> {
    let mut forward = None;
    let mut admin = None;
    if secrets_file.exists() {
        refuse_shared(secrets_file, "the forward key and the admin token")?;
        let text = std::fs::read_to_string(secrets_file)
            .with_context(|| format!("reading secrets file {}", secrets_file.display()))?;
        let entries = crate::config::parse_env_file(&text).map_err(|(line, reason)| {
            anyhow::anyhow!("{}:{line}: {reason}", secrets_file.display())
        })?;
        for entry in entries {
            match entry.key.as_str() {
                "QSE_FORWARD_KEY" if !entry.value.is_empty() => {
                    forward = Some(Secret::new(entry.value))
                }
                "QSE_ADMIN_TOKEN" if !entry.value.is_empty() => {
                    admin = Some(Secret::new(entry.value))
                }
                _ => {}
            }
        }
    }
    if let Some(key) = forward {
        return Ok(Secrets {
            forward_key: key,
            admin_token: admin,
            forward_key_source: secrets_file.to_path_buf(),
        });
    }
    let key_path = data_dir.join("forward.key");
    let key = read_or_make_key(&key_path)?;
    Ok(Secrets {
        forward_key: key,
        admin_token: admin,
        forward_key_source: key_path,
    })
}

/// The proxy token of one chat on egressd's loopback listener: an HMAC of
/// the chat id under the forward key, so chatd and egressd agree on it
/// without a call, and a caller without the key cannot claim another chat.
/// Sent as `Proxy-Authorization: Basic base64(<chat>:<token>)`.
pub fn egress_token(key: &Secret, chat: &str) -> String {
    use hmac::{KeyInit, Mac};
    // A key of any length is valid for HMAC.
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key.expose().as_bytes())
        .expect("HMAC takes a key of any length");
    mac.update(b"tandem egress token\0");
    mac.update(chat.as_bytes());
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Refuses a file of secrets that group or others may read or write: what
/// it holds may not be secret any more. The file is left as it is (making
/// it 0600 quietly would hide that others could read it until now).
fn refuse_shared(path: &Path, holds: &str) -> anyhow::Result<()> {
    let mode = crate::fsmode::mode_of(path)
        .with_context(|| format!("reading the mode of {}", path.display()))?;
    if mode & 0o077 != 0 {
        anyhow::bail!(
            "{} has mode {mode:o}: other users of this machine may read or change {holds} in it; \
             make it 0600 (chmod 600 {}) and, if someone may have copied it, put new values in it \
             (move it away and run ops/make-secrets.sh)",
            path.display(),
            path.display()
        );
    }
    Ok(())
}

/// Reads `path` as a key, or makes a new random one there (0600).
pub fn read_or_make_key(path: &Path) -> anyhow::Result<Secret> {
    if let Some(dir) = path.parent() {
        // The folder is chatd's data folder for forward.key (every daemon
        // and `tandem` look there): its o+x for hostexecd's run_as stays.
        crate::fsmode::private_dir_passable(dir)
            .with_context(|| format!("making folder {}", dir.display()))?;
    }
    if path.exists() {
        refuse_shared(path, "the key")?;
    }
    match std::fs::read_to_string(path) {
        Ok(text) if !text.trim().is_empty() => return Ok(Secret::new(text.trim().to_string())),
        Ok(_) => anyhow::bail!("{} is empty: delete it to make a new key", path.display()),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => return Err(err).with_context(|| format!("reading {}", path.display())),
    }
    let bytes: [u8; 32] = rand::random();
    let key: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    crate::fsmode::write_private_new(path, format!("{key}\n").as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(Secret::new(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn egress_tokens_differ_by_chat_and_key() {
        let a = Secret::new("key-a".into());
        let b = Secret::new("key-b".into());
        assert_eq!(egress_token(&a, "c_1"), egress_token(&a, "c_1"));
        assert_ne!(egress_token(&a, "c_1"), egress_token(&a, "c_2"));
        assert_ne!(egress_token(&a, "c_1"), egress_token(&b, "c_1"));
        assert_eq!(egress_token(&a, "c_1").len(), 64);
    }

    #[test]
    fn makes_a_private_key_once_and_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("chat");
        let first = load(&dir.path().join("none.env"), &data).unwrap();
        let second = load(&dir.path().join("none.env"), &data).unwrap();
        assert_eq!(first.forward_key.expose(), second.forward_key.expose());
        assert_eq!(first.forward_key.expose().len(), 64);
        assert_eq!(
            crate::fsmode::mode_of(&data.join("forward.key")).unwrap(),
            0o600
        );
        assert_eq!(format!("{:?}", first.forward_key), "<secret>");
    }

    #[test]
    fn making_the_key_keeps_the_folders_search_bits() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("chat");
        std::fs::create_dir(&data).unwrap();
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o711)).unwrap();
        load(&dir.path().join("none.env"), &data).unwrap();
        assert_eq!(crate::fsmode::mode_of(&data).unwrap(), 0o711);
    }

    #[test]
    fn files_others_may_read_are_refused_naming_the_file_and_the_fix() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("secrets.env");
        std::fs::write(&file, "QSE_FORWARD_KEY=abc\n").unwrap();
        let data = dir.path().join("chat");
        for mode in [0o644, 0o640, 0o620, 0o602] {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
            let err = format!("{:#}", load(&file, &data).unwrap_err());
            assert!(
                err.contains(&format!("{} has mode {mode:o}", file.display())),
                "{err}"
            );
            assert!(err.contains("chmod 600"), "{err}");
            assert!(!err.contains("abc"), "{err}");
            assert_eq!(
                crate::fsmode::mode_of(&file).unwrap(),
                mode,
                "left as it was"
            );
        }
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o400)).unwrap();
        assert!(load(&file, &data).is_ok());
        // The same for a forward.key made earlier.
        let none = dir.path().join("none.env");
        load(&none, &data).unwrap();
        let key = data.join("forward.key");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = format!("{:#}", load(&none, &data).unwrap_err());
        assert!(err.contains("forward.key has mode 644"), "{err}");
    }

    #[test]
    fn secrets_file_wins() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("secrets.env");
        std::fs::write(&file, "QSE_FORWARD_KEY=abc\nQSE_ADMIN_TOKEN=tok\n").unwrap();
        crate::fsmode::private_file(&file).unwrap();
        let s = load(&file, &dir.path().join("chat")).unwrap();
        assert!(s.forward_key.matches("abc"));
        assert!(!s.forward_key.matches("abd"));
        assert!(s.admin_token.unwrap().matches("tok"));
        assert!(!dir.path().join("chat/forward.key").exists());
    }
}
