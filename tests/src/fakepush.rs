//! A Web Push service on loopback that behaves like a browser vendor's:
//! `POST /push/<name>` takes a push for a subscription this fake made the
//! keys of, checks its VAPID token (RFC 8292: `vapid t=<jwt>, k=<key>`, the
//! key the server published, an ES256 signature that verifies, `aud` the
//! endpoint's origin, `exp` in the next 24 h, a mailto: or https: `sub`),
//! its `TTL` and `Content-Encoding: aes128gcm`, decrypts the payload with the
//! subscription's private key (RFC 8291: ECDH, HKDF, AES-128-GCM, written
//! here from the RFC, not with the sender's crate) and answers 201; a
//! subscription marked gone answers 410 as a real service does for an
//! expired one. A push that fails a check answers 400/401/403 and is kept
//! with why, so a test sees it. A subscription marked flaky plays a busy
//! service's faults on pushes that passed every check: one in three answers
//! 500, one in three answers 201 only after a delay (`Received::played`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::{Aes128Gcm, Nonce};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use p256::ecdsa::signature::Verifier as _;
use p256::elliptic_curve::sec1::ToEncodedPoint as _;
use serde_json::Value;
use sha2::Sha256;
use tandem_shared::sync::lock;

/// A subscription this fake made: what a browser would hand the page.
#[derive(Debug, Clone)]
pub struct Subscriber {
    pub name: String,
    pub endpoint: String,
    /// base64url, as `PushSubscription.toJSON()` gives them.
    pub p256dh: String,
    pub auth: String,
}

impl Subscriber {
    /// The body of `POST /push/subscribe`.
    pub fn body(&self) -> Value {
        serde_json::json!({"endpoint": self.endpoint, "expirationTime": null,
            "keys": {"p256dh": self.p256dh, "auth": self.auth}})
    }
}

/// One push as the fake received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub name: String,
    /// What the fake answered.
    pub status: u16,
    /// Why it refused, when it did.
    pub refused: Option<String>,
    pub ttl: Option<u64>,
    pub urgency: Option<String>,
    /// The decrypted payload, parsed as JSON (Null when it did not decrypt).
    pub payload: Value,
    /// The decrypted bytes as text.
    pub text: String,
    /// The fault a flaky subscription played on this push, if any.
    pub played: Option<&'static str>,
}

struct Keys {
    secret: p256::SecretKey,
    auth: [u8; 16],
}

#[derive(Default)]
struct Inner {
    keys: HashMap<String, Keys>,
    gone: HashSet<String>,
    /// Flaky subscriptions: the delay of a slow answer, and pushes taken so far.
    flaky: HashMap<String, (std::time::Duration, u64)>,
    received: Vec<Received>,
}

#[derive(Clone)]
struct Shared {
    inner: Arc<Mutex<Inner>>,
    /// The server's VAPID public key (base64url) every push must carry.
    vapid: String,
    origin: String,
}

/// The fake push service, served until dropped.
pub struct FakePush {
    pub url: String,
    shared: Shared,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakePush {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakePush {
    /// Serves on a free loopback port, taking pushes signed by `vapid_public`.
    pub async fn start(vapid_public: &str) -> anyhow::Result<FakePush> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let shared = Shared {
            inner: Arc::default(),
            vapid: vapid_public.to_string(),
            origin: url.clone(),
        };
        let app = Router::new()
            .route("/push/{name}", post(take))
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(FakePush { url, shared, task })
    }

    /// A new subscription named `name`: its keys made and kept here.
    pub fn subscriber(&self, name: &str) -> Subscriber {
        let secret = loop {
            let bytes: [u8; 32] = rand::random();
            if let Ok(secret) = p256::SecretKey::from_slice(&bytes) {
                break secret;
            }
        };
        let auth: [u8; 16] = rand::random();
        let point = secret.public_key().as_affine().to_encoded_point(false);
        let subscriber = Subscriber {
            name: name.to_string(),
            endpoint: format!("{}/push/{name}", self.url),
            p256dh: URL_SAFE_NO_PAD.encode(point.as_bytes()),
            auth: URL_SAFE_NO_PAD.encode(auth),
        };
        lock(&self.shared.inner)
            .keys
            .insert(name.to_string(), Keys { secret, auth });
        subscriber
    }

    /// Pushes to `name` answer 410 Gone from now on.
    pub fn gone(&self, name: &str) {
        lock(&self.shared.inner).gone.insert(name.to_string());
    }

    /// Pushes to `name` that pass every check answer 500 (one in three) or
    /// 201 after `slow` (one in three) from now on.
    pub fn flaky(&self, name: &str, slow: std::time::Duration) {
        lock(&self.shared.inner)
            .flaky
            .insert(name.to_string(), (slow, 0));
    }

    /// Every push received so far, in order.
    pub fn received(&self) -> Vec<Received> {
        lock(&self.shared.inner).received.clone()
    }
}

async fn take(
    State(shared): State<Shared>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let header = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let mut received = Received {
        name: name.clone(),
        status: 201,
        refused: None,
        ttl: header("ttl").and_then(|t| t.parse().ok()),
        urgency: header("urgency"),
        payload: Value::Null,
        text: String::new(),
        played: None,
    };
    let checked = check(&shared, &headers, received.ttl).and_then(|()| {
        let inner = lock(&shared.inner);
        if inner.gone.contains(&name) {
            return Err((StatusCode::GONE, "the subscription is gone".to_string()));
        }
        let keys = inner
            .keys
            .get(&name)
            .ok_or((StatusCode::NOT_FOUND, "no such subscription".to_string()))?;
        decrypt(&body, keys).map_err(|why| (StatusCode::BAD_REQUEST, why))
    });
    let mut delay = None;
    match checked {
        Ok(plain) => {
            received.text = String::from_utf8_lossy(&plain).into_owned();
            received.payload = serde_json::from_slice(&plain).unwrap_or(Value::Null);
            if let Some((slow, taken)) = lock(&shared.inner).flaky.get_mut(&name) {
                *taken += 1;
                match *taken % 3 {
                    1 => {
                        received.status = 500;
                        received.played = Some("answered 500");
                    }
                    2 => {
                        delay = Some(*slow);
                        received.played = Some("answered slowly");
                    }
                    _ => {}
                }
            }
        }
        Err((status, why)) => {
            received.status = status.as_u16();
            received.refused = Some(why);
        }
    }
    let status = StatusCode::from_u16(received.status).unwrap_or(StatusCode::BAD_REQUEST);
    lock(&shared.inner).received.push(received);
    if let Some(delay) = delay {
        // A busy push service, not a wait for anything.
        tokio::time::sleep(delay).await;
    }
    status
}

/// The headers a push service insists on, and the VAPID token.
fn check(
    shared: &Shared,
    headers: &HeaderMap,
    ttl: Option<u64>,
) -> Result<(), (StatusCode, String)> {
    let bad = |why: &str| Err((StatusCode::BAD_REQUEST, why.to_string()));
    if ttl.is_none() {
        return bad("no TTL header");
    }
    if headers
        .get("content-encoding")
        .and_then(|v| v.to_str().ok())
        != Some("aes128gcm")
    {
        return bad("Content-Encoding is not aes128gcm");
    }
    let unauthorized = |why: String| Err((StatusCode::UNAUTHORIZED, why));
    let Some(auth) = headers.get("authorization").and_then(|v| v.to_str().ok()) else {
        return unauthorized("no Authorization".into());
    };
    let Some((token, key)) = auth
        .strip_prefix("vapid t=")
        .and_then(|rest| rest.split_once(", k="))
    else {
        return unauthorized(format!("not a vapid authorization: {auth:.20}"));
    };
    if key != shared.vapid {
        return Err((
            StatusCode::FORBIDDEN,
            "k= is not the key the subscription was made with".into(),
        ));
    }
    let Some((signed, signature)) = token.rsplit_once('.') else {
        return unauthorized("the token has no signature".into());
    };
    let verified = (|| {
        let key =
            p256::ecdsa::VerifyingKey::from_sec1_bytes(&URL_SAFE_NO_PAD.decode(key).ok()?).ok()?;
        let signature =
            p256::ecdsa::Signature::from_slice(&URL_SAFE_NO_PAD.decode(signature).ok()?).ok()?;
        key.verify(signed.as_bytes(), &signature).ok()
    })();
    if verified.is_none() {
        return unauthorized("the token's ES256 signature does not verify".into());
    }
    let (head, claims) = signed.split_once('.').unwrap_or(("", ""));
    let decode = |part: &str| -> Value {
        URL_SAFE_NO_PAD
            .decode(part)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or(Value::Null)
    };
    if decode(head)["alg"] != "ES256" {
        return unauthorized("the token's alg is not ES256".into());
    }
    let claims = decode(claims);
    if claims["aud"] != shared.origin.as_str() {
        return unauthorized(format!("aud {} is not {}", claims["aud"], shared.origin));
    }
    let now = tandem_shared::time::now_unix();
    let exp = claims["exp"].as_i64().unwrap_or(0);
    if !(now < exp && exp <= now + 24 * 3600) {
        return unauthorized(format!("exp {exp} is not within the next 24 h"));
    }
    let sub = claims["sub"].as_str().unwrap_or("");
    if !(sub.starts_with("mailto:") || sub.starts_with("https:")) {
        return unauthorized(format!("sub {sub:?} is not a mailto: or https: contact"));
    }
    Ok(())
}

/// RFC 8291's aes128gcm, one record, for the subscription's `keys`.
fn decrypt(body: &[u8], keys: &Keys) -> Result<Vec<u8>, String> {
    if body.len() < 21 {
        return Err("the body is shorter than its header".into());
    }
    let salt = &body[..16];
    let idlen = usize::from(body[20]);
    let Some(keyid) = body.get(21..21 + idlen) else {
        return Err("the key id runs past the body".into());
    };
    let ciphertext = &body[21 + idlen..];
    let sender =
        p256::PublicKey::from_sec1_bytes(keyid).map_err(|_| "the key id is not a P-256 point")?;
    let shared = p256::ecdh::diffie_hellman(keys.secret.to_nonzero_scalar(), sender.as_affine());
    let ua_public = keys.secret.public_key().as_affine().to_encoded_point(false);
    let mut info = b"WebPush: info\0".to_vec();
    info.extend_from_slice(ua_public.as_bytes());
    info.extend_from_slice(keyid);
    let mut ikm = [0u8; 32];
    hkdf::Hkdf::<Sha256>::new(Some(&keys.auth), shared.raw_secret_bytes().as_slice())
        .expand(&info, &mut ikm)
        .map_err(|_| "hkdf")?;
    let prk = hkdf::Hkdf::<Sha256>::new(Some(salt), &ikm);
    let mut cek = [0u8; 16];
    let mut nonce = [0u8; 12];
    prk.expand(b"Content-Encoding: aes128gcm\0", &mut cek)
        .map_err(|_| "hkdf")?;
    prk.expand(b"Content-Encoding: nonce\0", &mut nonce)
        .map_err(|_| "hkdf")?;
    let cipher = Aes128Gcm::new_from_slice(&cek).map_err(|_| "aes key")?;
    let mut plain = cipher
        .decrypt(Nonce::from_slice(&nonce), ciphertext)
        .map_err(|_| "the payload does not decrypt with the subscription's keys")?;
    // The last record ends with the delimiter 0x02, then zero padding.
    while plain.last() == Some(&0) {
        plain.pop();
    }
    if plain.pop() != Some(2) {
        return Err("the last record has no 0x02 delimiter".into());
    }
    Ok(plain)
}
