//! What a browser's subscription may name, checked when it subscribes and
//! again before every push: an `https://` endpoint whose host resolves only
//! to public addresses (the shared `netpolicy`: every address of the answer,
//! one refused refuses all), and the keys of a P-256 point and a 16-byte
//! secret. The addresses found are the ones the push then connects to, so a
//! name that changes its answer between the check and the connection
//! (DNS rebinding) gains nothing.
//!
//! `push_allow_loopback_for_tests` admits endpoints whose every address is
//! a loopback one, over http too: the tests' fake push service. It is off
//! by default and nothing else opens.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use tandem_shared::netpolicy::{self, Host, Policy};
use url::Url;

/// The longest endpoint taken (browsers' are a few hundred characters).
pub const MAX_ENDPOINT: usize = 2048;
/// How long one lookup of an endpoint's host may take.
const LOOKUP: Duration = Duration::from_secs(5);

/// An endpoint read: its URL, host and port, and whether it is TLS.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub url: Url,
    pub host: Host,
    pub port: u16,
    pub tls: bool,
}

impl Endpoint {
    /// `scheme://host[:port]`, the VAPID JWT's audience.
    pub fn origin(&self) -> String {
        self.url.origin().ascii_serialization()
    }

    /// `/path?query`, the request's target on the connection.
    pub fn target(&self) -> String {
        let mut out = self.url.path().to_string();
        if let Some(q) = self.url.query() {
            out.push('?');
            out.push_str(q);
        }
        out
    }

    /// `host[:port]` for the Host header.
    pub fn authority(&self) -> String {
        match self.url.port() {
            Some(port) => format!("{}:{port}", self.host),
            None => self.host.to_string(),
        }
    }
}

/// Whether the test setting admits loopback endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loopback {
    Refused,
    AllowedForTests,
}

/// Reads an endpoint's text (no lookup yet). The error is the 400's words.
pub fn parse(text: &str, loopback: Loopback) -> Result<Endpoint, String> {
    if text.len() > MAX_ENDPOINT {
        return Err(format!(
            "is {} characters; an endpoint has {MAX_ENDPOINT} at most",
            text.len()
        ));
    }
    let url = Url::parse(text).map_err(|e| format!("is not a URL ({e})"))?;
    let tls = match url.scheme() {
        "https" => true,
        "http" if loopback == Loopback::AllowedForTests => false,
        other => {
            return Err(format!(
                "must be an https:// address of a push service, not {other}:"
            ))
        }
    };
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not carry a user name or password".into());
    }
    let host_text = url.host_str().unwrap_or("");
    let host =
        netpolicy::parse_host(host_text).map_err(|e| format!("names no usable host: {e}"))?;
    if let Host::Name(name) = &host {
        if netpolicy::is_metadata_name(name) {
            return Err(format!("names {name}, a cloud metadata host"));
        }
    }
    let port = url.port_or_known_default().unwrap_or(443);
    Ok(Endpoint {
        url,
        host,
        port,
        tls,
    })
}

/// Looks the host up once and checks every address; answers the addresses
/// a connection may go to. The error is one line naming the refused address.
pub async fn resolve(
    endpoint: &Endpoint,
    policy: &Policy,
    loopback: Loopback,
) -> Result<Vec<SocketAddr>, String> {
    let addresses: Vec<SocketAddr> = match &endpoint.host {
        Host::Ip(ip) => vec![SocketAddr::new(*ip, endpoint.port)],
        Host::Name(name) => {
            let lookup = tokio::net::lookup_host((name.as_str(), endpoint.port));
            match tokio::time::timeout(LOOKUP, lookup).await {
                Err(_) => return Err(format!("the lookup of {name} took over 5 s")),
                Ok(Err(e)) => return Err(format!("{name} could not be looked up: {e}")),
                Ok(Ok(found)) => found.collect(),
            }
        }
    };
    if addresses.is_empty() {
        return Err(format!("{} resolves to no address", endpoint.host));
    }
    let ips: Vec<IpAddr> = addresses.iter().map(SocketAddr::ip).collect();
    if loopback == Loopback::AllowedForTests && ips.iter().all(IpAddr::is_loopback) {
        return Ok(addresses);
    }
    if !endpoint.tls {
        return Err(
            "an http:// endpoint is taken only on loopback with push_allow_loopback_for_tests"
                .into(),
        );
    }
    policy.check_all(&ips).map_err(|(ip, why)| {
        let what = match &endpoint.host {
            Host::Ip(_) => format!("{ip} is {why}"),
            Host::Name(name) => format!("{name} resolves to {ip}, {why}"),
        };
        format!("{what}: a push endpoint must be on a public address")
    })?;
    Ok(addresses)
}

/// A subscription's keys as the browser gave them (base64url).
pub struct Keys {
    pub p256dh: p256::PublicKey,
    pub auth: [u8; 16],
}

/// Checks `keys.p256dh` (an uncompressed P-256 point, 65 bytes) and
/// `keys.auth` (16 bytes); the error names the field.
pub fn keys(p256dh: &str, auth: &str) -> Result<Keys, (&'static str, String)> {
    let raw = decode(p256dh).ok_or(("keys.p256dh", "is not base64url".to_string()))?;
    if raw.len() != 65 || raw[0] != 4 {
        return Err((
            "keys.p256dh",
            format!(
                "is {} bytes; it must be an uncompressed P-256 point (65 bytes, first 0x04)",
                raw.len()
            ),
        ));
    }
    let point = p256::PublicKey::from_sec1_bytes(&raw).map_err(|_| {
        (
            "keys.p256dh",
            "is not a point of the P-256 curve".to_string(),
        )
    })?;
    let secret = decode(auth).ok_or(("keys.auth", "is not base64url".to_string()))?;
    let auth: [u8; 16] = secret.as_slice().try_into().map_err(|_| {
        (
            "keys.auth",
            format!("is {} bytes; it must be 16", secret.len()),
        )
    })?;
    Ok(Keys {
        p256dh: point,
        auth,
    })
}

/// base64url, with or without `=` padding (browsers send it without).
fn decode(text: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(text.trim_end_matches('=')).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, loopback: Loopback, expect: Result<&str, &str>) {
        match (parse(text, loopback), expect) {
            (Ok(e), Ok(origin)) => assert_eq!(e.origin(), origin, "{text}"),
            (Err(why), Err(part)) => assert!(why.contains(part), "{text}: {why}"),
            (got, want) => panic!("{text}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn endpoints_are_https_with_a_host_and_no_user() {
        use Loopback::*;
        check(
            "https://fcm.googleapis.com/fcm/send/abc",
            Refused,
            Ok("https://fcm.googleapis.com"),
        );
        check(
            "https://push.example:8443/x",
            Refused,
            Ok("https://push.example:8443"),
        );
        check(
            "http://push.example/x",
            Refused,
            Err("must be an https:// address"),
        );
        check(
            "http://127.0.0.1:9/x",
            AllowedForTests,
            Ok("http://127.0.0.1:9"),
        );
        check("ftp://push.example/x", AllowedForTests, Err("not ftp:"));
        check("https://u:p@push.example/x", Refused, Err("user name"));
        check(
            "https://metadata.google.internal/x",
            Refused,
            Err("cloud metadata"),
        );
        check("push.example/x", Refused, Err("is not a URL"));
        check(
            &format!("https://p.example/{}", "a".repeat(2048)),
            Refused,
            Err("2048 at most"),
        );
    }

    #[tokio::test]
    async fn every_address_is_checked_and_loopback_only_opens_in_the_test_mode() {
        let policy = Policy::default();
        let at = |t: &'static str, l| async move {
            resolve(&parse(t, l).unwrap(), &Policy::default(), l).await
        };
        let refused = at("https://127.0.0.1/x", Loopback::Refused)
            .await
            .unwrap_err();
        assert!(
            refused.contains("127.0.0.1 is a loopback address"),
            "{refused}"
        );
        let private = at("https://10.1.2.3/x", Loopback::AllowedForTests)
            .await
            .unwrap_err();
        assert!(
            private.contains("a private (RFC 1918) address"),
            "{private}"
        );
        let plain = at("http://8.8.8.8/x", Loopback::AllowedForTests)
            .await
            .unwrap_err();
        assert!(plain.contains("only on loopback"), "{plain}");
        let ok = at("http://127.0.0.1:9/x", Loopback::AllowedForTests)
            .await
            .unwrap();
        assert_eq!(ok, vec!["127.0.0.1:9".parse().unwrap()]);
        let public = resolve(
            &parse("https://8.8.8.8/x", Loopback::Refused).unwrap(),
            &policy,
            Loopback::Refused,
        )
        .await
        .unwrap();
        assert_eq!(public, vec!["8.8.8.8:443".parse().unwrap()]);
        // A name that resolves to loopback is refused the same way.
        let named = at("https://localhost/x", Loopback::Refused)
            .await
            .unwrap_err();
        assert!(named.contains("a loopback address"), "{named}");
    }

    #[test]
    fn keys_are_a_p256_point_and_16_bytes() {
        let point = "BLn9b-VR0ca83knDNZ32dCHGyjJp-1riX9ZTN40MqV8K_LpQmLqxC_DoHvqvFXO_nGdAB4W9dogZb_sM-uV4JbY";
        let auth = "_ordMnz7uTCmrpBTeUV4Bw";
        assert!(keys(point, auth).is_ok());
        assert!(keys(point, "_ordMnz7uTCmrpBTeUV4Bw==").is_ok());
        let field = |p: &str, a: &str| keys(p, a).err().unwrap();
        assert_eq!(field("!!", auth).0, "keys.p256dh");
        assert!(field("AAAA", auth).1.contains("is 3 bytes"));
        let off_curve = format!("BA{}", "A".repeat(85));
        assert!(
            field(&off_curve, auth).1.contains("P-256"),
            "{:?}",
            field(&off_curve, auth)
        );
        assert_eq!(field(point, "AAAA").0, "keys.auth");
        assert!(field(point, "AAAA").1.contains("is 3 bytes; it must be 16"));
    }
}
