//! What a request names: an address or a host name, in every spelling a URL
//! allows (by the `url` crate), with its port; and the cloud metadata names.

use std::fmt;
use std::net::IpAddr;

use super::METADATA_NAMES;

/// What a request names: an address, or a name to resolve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    Ip(IpAddr),
    /// ASCII (IDNA applied), lowercase, without the trailing dot.
    Name(String),
}

impl fmt::Display for Host {
    /// As it goes back into an authority: IPv6 in brackets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Ip(IpAddr::V6(v6)) => write!(f, "[{v6}]"),
            Host::Ip(IpAddr::V4(v4)) => write!(f, "{v4}"),
            Host::Name(name) => f.write_str(name),
        }
    }
}

/// The host part of an authority (no port), read as a URL's host is (WHATWG,
/// via `url::Host::parse`): percent-decoding, IDNA, and every IPv4 spelling
/// (`2130706433`, `0177.0.0.1`, `0x7f.0.0.1`, `127.1`, `127.0.0.1.`); IPv6 only
/// in brackets. A name comes back lowercase without its trailing dot.
pub fn parse_host(text: &str) -> Result<Host, String> {
    if text.is_empty() {
        return Err("the host is empty".to_string());
    }
    match url::Host::parse(text) {
        Ok(url::Host::Ipv4(v4)) => Ok(Host::Ip(IpAddr::V4(v4))),
        Ok(url::Host::Ipv6(v6)) => Ok(Host::Ip(IpAddr::V6(v6))),
        Ok(url::Host::Domain(domain)) => {
            let domain = domain.to_ascii_lowercase();
            let name = domain.strip_suffix('.').unwrap_or(&domain);
            if name.is_empty() || name.split('.').any(str::is_empty) {
                return Err(format!("the host {text:?} has an empty label"));
            }
            Ok(Host::Name(name.to_string()))
        }
        Err(_) if text.starts_with('[') => Err(format!(
            "the host {text:?} is not an IPv6 address in brackets"
        )),
        Err(e) => {
            let bad = text
                .chars()
                .find(|c| c.is_control() || " #/:<>?@[\\]^|".contains(*c));
            match bad {
                Some(':') => Err(format!(
                    "the host {text:?} has ':' (a port goes after the host; an IPv6 address in brackets)"
                )),
                Some(c) => Err(format!("the host {text:?} has the character {c:?}")),
                None => Err(format!("the host {text:?} is not valid: {e}")),
            }
        }
    }
}

/// An authority `host:port`, `[v6]:port`, `host` or `[v6]` (then
/// `default_port`). The port is decimal digits in 1..=65535.
pub fn split_authority(text: &str, default_port: u16) -> Result<(Host, u16), String> {
    if text.is_empty() {
        return Err("the authority is empty".to_string());
    }
    let (host, port) = if text.starts_with('[') {
        let Some(close) = text.find(']') else {
            return Err(format!("{text:?} has '[' without ']'"));
        };
        let (host, rest) = text.split_at(close + 1);
        if rest.is_empty() {
            (host, None)
        } else if let Some(port) = rest.strip_prefix(':') {
            (host, Some(port))
        } else {
            return Err(format!("{text:?} has {rest:?} after ']', not ':port'"));
        }
    } else {
        match text.matches(':').count() {
            0 => (text, None),
            1 => {
                let (host, port) = text.split_once(':').unwrap_or((text, ""));
                (host, Some(port))
            }
            _ => {
                return Err(format!(
                    "{text:?} has several ':'; an IPv6 address goes in brackets"
                ))
            }
        }
    };
    let port = match port {
        None => default_port,
        Some("") => return Err(format!("{text:?} has ':' but no port")),
        Some(digits) => parse_port(digits)?,
    };
    if port == 0 {
        return Err(format!("{text:?}: port 0 is not in 1..=65535"));
    }
    Ok((parse_host(host)?, port))
}

fn parse_port(digits: &str) -> Result<u16, String> {
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("the port {digits:?} is not a number"));
    }
    match digits.parse::<u32>() {
        Ok(port @ 1..=65535) => Ok(port as u16),
        _ => Err(format!("the port {digits} is not in 1..=65535")),
    }
}

/// Whether a host name is a cloud metadata name ([`METADATA_NAMES`], or
/// `instance-data.` followed by a name ending in `.internal`). Compared as
/// [`parse_host`] reads it: IDNA-mapped, lowercase, without trailing dots.
pub fn is_metadata_name(name: &str) -> bool {
    let name = match parse_host(name) {
        Ok(Host::Name(name)) => name,
        Ok(Host::Ip(_)) => return false,
        Err(_) => name.to_ascii_lowercase(),
    };
    let name = name.trim_end_matches('.');
    METADATA_NAMES.contains(&name)
        || name
            .strip_prefix("instance-data.")
            .is_some_and(|rest| rest.ends_with(".internal"))
}
