//! The front's sign-in: the admin token buys a session cookie. The cookie is
//! `<issued unix s>.<nonce>.<HMAC-SHA256>` under a key derived from the admin
//! token, so it survives a chatd restart, expires on its own, and every
//! session ends when the token changes. Nothing about sessions is stored.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use hmac::{KeyInit, Mac};
use tandem_shared::secrets::Secret;
use tandem_shared::sync::lock;

/// The cookie's name.
pub const COOKIE: &str = "tandem_session";
/// How long a session lasts.
pub const LIFETIME: Duration = Duration::from_secs(30 * 24 * 3600);
/// A clock this far behind the one that issued the cookie is still believed
/// (the box's clock stepped back a little).
const SKEW_S: u64 = 300;

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

fn mac(admin_token: &Secret) -> HmacSha256 {
    // A key of any length is valid for HMAC.
    let mut mac = HmacSha256::new_from_slice(admin_token.expose().as_bytes())
        .expect("HMAC takes a key of any length");
    mac.update(b"tandem front session v1\0");
    mac
}

/// A new session cookie's value, issued at `now` (unix seconds).
pub fn mint(admin_token: &Secret, now: u64) -> String {
    let nonce: [u8; 16] = rand::random();
    let payload = format!("{now}.{}", hex(&nonce));
    let mut mac = mac(admin_token);
    mac.update(payload.as_bytes());
    format!("{payload}.{}", hex(&mac.finalize().into_bytes()))
}

/// Whether `value` is a cookie this admin token issued that has not expired at `now`.
pub fn verify(admin_token: &Secret, value: &str, now: u64) -> bool {
    let mut parts = value.rsplitn(2, '.');
    let (Some(signature), Some(payload)) = (parts.next(), parts.next()) else {
        return false;
    };
    let Some(issued) = payload
        .split_once('.')
        .and_then(|(issued, _)| issued.parse::<u64>().ok())
    else {
        return false;
    };
    if issued > now + SKEW_S || now.saturating_sub(issued) > LIFETIME.as_secs() {
        return false;
    }
    let Some(signature) = unhex(signature) else {
        return false;
    };
    let mut mac = mac(admin_token);
    mac.update(payload.as_bytes());
    // Constant time, inside the hmac crate.
    mac.verify_slice(&signature).is_ok()
}

/// The `Set-Cookie` value that signs a browser in.
pub fn set_cookie(value: &str) -> String {
    format!(
        "{COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}",
        LIFETIME.as_secs()
    )
}

/// The `Set-Cookie` value that signs a browser out.
pub fn clear_cookie() -> String {
    format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
}

/// The session cookie's value among a request's `Cookie` headers.
pub fn from_headers(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

/// Wrong tokens are limited box-wide: a guesser on the network gets
/// `MAX_FAILURES` tries a minute, however many it sends at once. Each try
/// reserves its slot before the compare and a right token gives it back, so
/// parallel guesses cannot slip past the count. A browser already signed in
/// (a valid cookie) is never limited.
pub struct Limiter {
    window: Mutex<(Instant, u32)>,
}

pub const MAX_FAILURES: u32 = 10;
const WINDOW: Duration = Duration::from_secs(60);

impl Default for Limiter {
    fn default() -> Self {
        Limiter {
            window: Mutex::new((Instant::now(), 0)),
        }
    }
}

impl Limiter {
    /// Reserves a try: `Err(seconds to wait)` while this window's tries are spent.
    pub fn attempt(&self) -> Result<(), u64> {
        let mut window = lock(&self.window);
        if window.0.elapsed() >= WINDOW {
            *window = (Instant::now(), 0);
        }
        if window.1 >= MAX_FAILURES {
            let wait = WINDOW.saturating_sub(window.0.elapsed()).as_secs().max(1);
            return Err(wait);
        }
        window.1 += 1;
        Ok(())
    }

    /// Gives back a reserved try that was not a wrong token.
    pub fn refund(&self) {
        let mut window = lock(&self.window);
        window.1 = window.1.saturating_sub(1);
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(text: &str) -> Secret {
        Secret::new(text.into())
    }

    #[test]
    fn a_minted_cookie_verifies_until_it_expires() {
        let admin = token("the admin token");
        let now = 1_800_000_000;
        let cookie = mint(&admin, now);
        assert!(verify(&admin, &cookie, now));
        assert!(verify(&admin, &cookie, now + LIFETIME.as_secs()));
        assert!(!verify(&admin, &cookie, now + LIFETIME.as_secs() + 1));
        // Issued in the future beyond the skew: not believed.
        assert!(!verify(&admin, &cookie, now - SKEW_S - 1));
    }

    #[test]
    fn another_token_or_a_changed_byte_is_refused() {
        let admin = token("the admin token");
        let now = 1_800_000_000;
        let cookie = mint(&admin, now);
        assert!(!verify(&token("another token"), &cookie, now));
        // The issue time moved forward (a longer life) with the old signature.
        let forged = cookie.replacen("1800000000", "1800000999", 1);
        assert!(!verify(&admin, &forged, now + 1000));
        for bad in [
            "",
            ".",
            "..",
            "x.y.z",
            "1800000000.ab.zz",
            "1800000000..",
            &cookie[..cookie.len() - 1],
        ] {
            assert!(!verify(&admin, bad, now), "{bad:?} verified");
        }
    }

    #[test]
    fn the_cookie_is_found_among_others() {
        let mut headers = axum::http::HeaderMap::new();
        headers.append("cookie", "a=1; tandem_session=abc.def.012".parse().unwrap());
        headers.append("cookie", "b=2".parse().unwrap());
        assert_eq!(from_headers(&headers), Some("abc.def.012"));
        let mut none = axum::http::HeaderMap::new();
        none.append("cookie", "tandem_sessionx=1".parse().unwrap());
        assert_eq!(from_headers(&none), None);
    }

    #[test]
    fn ten_failures_a_minute_then_a_wait_and_right_tokens_give_theirs_back() {
        let limiter = Limiter::default();
        for _ in 0..100 {
            limiter.attempt().expect("a right token's try comes back");
            limiter.refund();
        }
        for _ in 0..MAX_FAILURES {
            limiter.attempt().expect("under the limit");
        }
        let wait = limiter.attempt().expect_err("spent");
        assert!((1..=60).contains(&wait), "{wait}");
    }
}
