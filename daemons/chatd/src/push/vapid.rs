//! chatd's VAPID identity (RFC 8292): one P-256 key pair, made once and
//! kept, and the signed JWT each push carries so the push service knows
//! every push to a subscription comes from the server it was made for.
//!
//! The key file is `vapid.key` in chatd's data folder, made and guarded by
//! the same code as `forward.key` (`tandem_shared::secrets::read_or_make_key`:
//! 0600, 32 random bytes as hex, a file group or others may read refused at
//! start). The P-256 private key is derived from those bytes (SHA-256 with a
//! counter, until the value is a valid scalar), so the file format is the
//! house's one and a restart gives the same public key: the browsers'
//! subscriptions stay valid.

use std::path::Path;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use p256::ecdsa::signature::Signer as _;
use p256::ecdsa::{Signature, SigningKey};
use p256::elliptic_curve::sec1::ToEncodedPoint as _;
use sha2::{Digest as _, Sha256};

/// The file beside `forward.key` that holds the key's seed.
pub const KEY_FILE: &str = "vapid.key";

/// chatd's VAPID key pair. Never printed.
pub struct Vapid {
    signing: SigningKey,
    /// The uncompressed public point, base64url: what the page hands to
    /// `PushManager.subscribe` as `applicationServerKey`, and the `k=` of
    /// every push.
    public: String,
}

impl std::fmt::Debug for Vapid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Vapid {{ public: {} }}", self.public)
    }
}

impl Vapid {
    /// Reads `<data>/vapid.key`, or makes it (0600) on first use.
    pub fn load(data_dir: &Path) -> anyhow::Result<Vapid> {
        let seed = tandem_shared::secrets::read_or_make_key(&data_dir.join(KEY_FILE))?;
        Ok(Vapid::from_seed(seed.expose().as_bytes()))
    }

    fn from_seed(seed: &[u8]) -> Vapid {
        // A random 256-bit value is a valid scalar but for about 2^-32 of
        // them: the counter makes the derivation total.
        let mut counter = 0u32;
        let secret = loop {
            let digest = Sha256::new()
                .chain_update(b"tandem vapid key\0")
                .chain_update(seed)
                .chain_update(counter.to_be_bytes())
                .finalize();
            if let Ok(secret) = p256::SecretKey::from_slice(digest.as_slice()) {
                break secret;
            }
            counter += 1;
        };
        let point = secret.public_key().as_affine().to_encoded_point(false);
        Vapid {
            public: URL_SAFE_NO_PAD.encode(point.as_bytes()),
            signing: SigningKey::from(secret),
        }
    }

    /// The public key, base64url without padding.
    pub fn public_key(&self) -> &str {
        &self.public
    }

    /// The `Authorization` value for a push to `origin` (the endpoint's
    /// scheme, host and port as a browser writes an origin), valid until
    /// `expires_unix` (push services take at most 24 h).
    pub fn authorization(&self, origin: &str, expires_unix: i64, contact: &str) -> String {
        let header = URL_SAFE_NO_PAD.encode(br#"{"typ":"JWT","alg":"ES256"}"#);
        let claims = serde_json::json!({"aud": origin, "exp": expires_unix, "sub": contact});
        let claims = URL_SAFE_NO_PAD.encode(claims.to_string());
        let signed = format!("{header}.{claims}");
        let signature: Signature = self.signing.sign(signed.as_bytes());
        let signature = URL_SAFE_NO_PAD.encode(signature.to_bytes());
        format!("vapid t={signed}.{signature}, k={}", self.public)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::ecdsa::signature::Verifier as _;
    use p256::ecdsa::VerifyingKey;

    #[test]
    fn the_key_is_made_once_private_and_the_same_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let first = Vapid::load(dir.path()).unwrap();
        let again = Vapid::load(dir.path()).unwrap();
        assert_eq!(first.public_key(), again.public_key());
        assert_eq!(
            tandem_shared::fsmode::mode_of(&dir.path().join(KEY_FILE)).unwrap(),
            0o600
        );
        // 65 bytes uncompressed: 0x04, x, y.
        let raw = URL_SAFE_NO_PAD.decode(first.public_key()).unwrap();
        assert_eq!((raw.len(), raw[0]), (65, 4));
        assert!(!format!("{first:?}").contains("signing"));
    }

    #[test]
    fn the_jwt_names_the_origin_and_verifies_with_the_public_key() {
        let vapid = Vapid::from_seed(b"seed");
        let value = vapid.authorization("https://push.example.net", 1_900_000_000, "mailto:a@b.c");
        let rest = value.strip_prefix("vapid t=").unwrap();
        let (token, k) = rest.split_once(", k=").unwrap();
        assert_eq!(k, vapid.public_key());
        let (signed, signature) = token.rsplit_once('.').unwrap();
        let (_, claims) = signed.split_once('.').unwrap();
        let claims: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).unwrap()).unwrap();
        assert_eq!(claims["aud"], "https://push.example.net");
        assert_eq!(claims["exp"], 1_900_000_000);
        assert_eq!(claims["sub"], "mailto:a@b.c");
        let key = VerifyingKey::from_sec1_bytes(&URL_SAFE_NO_PAD.decode(k).unwrap()).unwrap();
        let signature = Signature::from_slice(&URL_SAFE_NO_PAD.decode(signature).unwrap()).unwrap();
        key.verify(signed.as_bytes(), &signature).unwrap();
    }
}
