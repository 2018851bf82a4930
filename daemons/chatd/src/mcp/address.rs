//! Where an `http` connector may connect: every address its name resolves
//! to, and every redirect, checked with the shared netpolicy before a
//! connection, which then goes to the addresses checked (reqwest is handed
//! them by [`Checked`], its only resolver, so there is no second lookup to
//! rebind). No proxy is read from the environment.
//!
//! `[chatd] mcp_allow_private` opens loopback, private, unique-local, CGNAT
//! and this box's own networks (a server at home); cloud metadata stays shut.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use tandem_shared::netpolicy::{self, Host, Policy, Refusal};
use tandem_shared::sync::lock;
use url::Url;

/// The longest address taken.
pub const MAX_URL: usize = 2048;
/// One lookup of a connector's host.
const LOOKUP: Duration = Duration::from_secs(5);
/// Redirects followed at most (each one checked).
const REDIRECTS: usize = 5;

/// Whether private ranges are open (`mcp_allow_private`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Private {
    Shut,
    Open,
}

/// Reads a connector's address: http or https, a host, no user name or
/// password. The error is the 400's words for the field `url`.
pub fn parse(text: &str) -> Result<Url, String> {
    if text.len() > MAX_URL {
        return Err(format!(
            "is {} characters; an address has {MAX_URL} at most",
            text.len()
        ));
    }
    let url = Url::parse(text).map_err(|e| format!("is not an address ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "must start with http:// or https://, not {}:",
            url.scheme()
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not hold a user name or password (use the token or headers)".into());
    }
    host_of(&url)?;
    Ok(url)
}

fn host_of(url: &Url) -> Result<Host, String> {
    let text = url.host_str().unwrap_or("");
    netpolicy::parse_host(text).map_err(|e| format!("names no usable host: {e}"))
}

/// Whether two addresses are one server: scheme, host and port.
pub fn same_origin(a: &str, b: &str) -> bool {
    match (Url::parse(a), Url::parse(b)) {
        (Ok(a), Ok(b)) => a.origin() == b.origin(),
        _ => false,
    }
}

/// The host alone, as the API shows an address (never its path or query).
pub fn shown(url_text: &str) -> String {
    Url::parse(url_text)
        .ok()
        .and_then(|u| u.host_str().map(str::to_string))
        .unwrap_or_default()
}

/// An address that is plainly internal without a lookup (an IP literal that
/// is not public, `localhost`, a metadata name): the reason, refused when a
/// connector is saved on or switched on.
pub fn plainly_internal(url: &Url, private: Private) -> Option<String> {
    match host_of(url).ok()? {
        Host::Ip(ip) => check(&Policy::default(), private, ip)
            .err()
            .map(|why| format!("{ip} is {why}")),
        Host::Name(name) if netpolicy::is_metadata_name(&name) => {
            Some(format!("{name} is a cloud metadata host"))
        }
        Host::Name(name)
            if private == Private::Shut && {
                let name = name.trim_end_matches('.');
                name == "localhost" || name.ends_with(".localhost")
            } =>
        {
            Some(format!("{name} is this box (a loopback address)"))
        }
        Host::Name(_) => None,
    }
}

/// One address by the policy, with private ranges opened when they are.
pub fn check(policy: &Policy, private: Private, ip: IpAddr) -> Result<(), Refusal> {
    match policy.check(ip) {
        Err(why) if private == Private::Open && opened(&why) => Ok(()),
        other => other,
    }
}

/// What `mcp_allow_private` opens: a home network's and this box's ranges.
fn opened(why: &Refusal) -> bool {
    match why {
        Refusal::Loopback
        | Refusal::Private
        | Refusal::UniqueLocal
        | Refusal::CarrierNat
        | Refusal::ThisBox
        | Refusal::OwnNetwork { .. } => true,
        Refusal::Embedded { why, .. } => opened(why),
        _ => false,
    }
}

/// What one connection attempt refused: the first refusal, for the test's
/// reason (reqwest's own error would only say "error sending request").
#[derive(Debug, Clone, Default)]
pub struct Refused(Arc<Mutex<Option<String>>>);

impl Refused {
    fn note(&self, why: String) {
        lock(&self.0).get_or_insert(why);
    }

    /// The first refusal noted, if any.
    pub fn taken(&self) -> Option<String> {
        lock(&self.0).clone()
    }
}

/// reqwest's resolver for a connector: one lookup, every address checked,
/// one refused refuses the name.
pub struct Checked {
    pub policy: Arc<Policy>,
    pub private: Private,
    pub refused: Refused,
}

impl Resolve for Checked {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy.clone();
        let private = self.private;
        let refused = self.refused.clone();
        let name = name.as_str().to_string();
        Box::pin(async move {
            let answer = resolve_checked(&policy, private, &name).await;
            match answer {
                Ok(found) => Ok(Box::new(found.into_iter()) as Addrs),
                Err(why) => {
                    refused.note(why.clone());
                    Err(why.into())
                }
            }
        })
    }
}

async fn resolve_checked(
    policy: &Policy,
    private: Private,
    name: &str,
) -> Result<Vec<SocketAddr>, String> {
    if netpolicy::is_metadata_name(name) {
        return Err(format!("{name} is a cloud metadata host"));
    }
    // Port 0: reqwest puts the URL's port on each address it is given.
    let found: Vec<SocketAddr> =
        match tokio::time::timeout(LOOKUP, tokio::net::lookup_host((name, 0))).await {
            Err(_) => return Err(format!("the lookup of {name} took over 5 s")),
            Ok(Err(e)) => return Err(format!("{name} could not be looked up: {e}")),
            Ok(Ok(found)) => found.collect(),
        };
    if found.is_empty() {
        return Err(format!("{name} resolves to no address"));
    }
    for address in &found {
        check(policy, private, address.ip()).map_err(|why| {
            format!(
                "{name} resolves to {}, {why}; connectors reach public addresses only{}",
                address.ip(),
                hint(private)
            )
        })?;
    }
    Ok(found)
}

fn hint(private: Private) -> &'static str {
    match private {
        Private::Shut => " ([chatd] mcp_allow_private opens a home network)",
        Private::Open => "",
    }
}

/// The first address's IP literal checked (a name is checked by the
/// resolver when reqwest connects to it).
pub fn check_literal(policy: &Policy, private: Private, url: &Url) -> Result<(), String> {
    match host_of(url)? {
        Host::Ip(ip) => check(policy, private, ip).map_err(|why| {
            format!(
                "{ip} is {why}; connectors reach public addresses only{}",
                hint(private)
            )
        }),
        Host::Name(_) => Ok(()),
    }
}

/// reqwest's redirect policy for a connector: at most 5, within the
/// address's own origin (scheme, host and port: its token and headers are
/// for that server alone, and reqwest would send the headers on to another
/// host), an IP literal checked here (a name is checked by the resolver).
pub fn redirects(
    policy: Arc<Policy>,
    private: Private,
    refused: Refused,
    origin: Url,
) -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() >= REDIRECTS {
            refused.note(format!("more than {REDIRECTS} redirects"));
            return attempt.error("too many redirects");
        }
        let url = attempt.url().clone();
        let verdict = if url.origin() != origin.origin() {
            Err(format!(
                "it goes to another server ({}); a connector's token and headers are for {} alone",
                url.host_str().unwrap_or("?"),
                origin.host_str().unwrap_or("?")
            ))
        } else {
            check_literal(&policy, private, &url)
        };
        match verdict {
            Ok(()) => attempt.follow(),
            Err(why) => {
                let why = format!("a redirect was refused: {why}");
                refused.note(why.clone());
                attempt.error(why)
            }
        }
    })
}
