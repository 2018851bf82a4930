//! Targets for egressd and the address policy: an address in every
//! spelling, a request head read as the proxy reads it, and a URL's host
//! and port as the web tools and the proxy take them, each against a
//! reference written apart from the product code.

use arbitrary::{Result as Built, Unstructured};

use super::text_of;
use crate::Verdict;

/// An authority as a tunnel or a URL names it, in every spelling: whenever
/// it reads as an address that the reference below calls not public, the
/// egress policy refuses that address (no spelling slips a private, local
/// or metadata address past it).
pub(super) fn egress_address(u: &mut Unstructured) -> Verdict {
    use tandem_shared::netpolicy::{classify, split_authority, Host};
    const PIECES: &[&str] = &[
        "127",
        "0",
        "1",
        "10",
        "169",
        "254",
        "192",
        "168",
        "172",
        "16",
        "100",
        "64",
        "255",
        ".",
        "0x7f",
        "0x",
        "0177",
        "00",
        "2130706433",
        "4294967295",
        "[",
        "]",
        "::",
        ":",
        "ffff",
        "::1",
        "fe80",
        "fc00",
        "fd00",
        "%2e",
        "%31",
        "localhost",
        "metadata.google.internal",
        "xn--",
        ":80",
        ":443",
        "a",
        "-",
        "%25",
        "::ffff:",
        "0:0:0:0:0:ffff:7f00:1",
    ];
    let text = if u.ratio(1, 2).unwrap_or(true) {
        text_of(u, PIECES, 16)
    } else {
        let Ok(text) = spelled_address(u) else {
            return Ok(());
        };
        text
    };
    let Ok((Host::Ip(ip), _)) = split_authority(&text, 443) else {
        return Ok(());
    };
    if !public_by_reference(ip) && classify(ip).is_none() {
        return Err(format!(
            "{text:?} reads as {ip}, which is not public, yet it is allowed"
        ));
    }
    Ok(())
}

/// A v4 address near a class boundary, spelled one of the ways a URL host
/// may spell it, sometimes inside an IPv6 form.
fn spelled_address(u: &mut Unstructured) -> Built<String> {
    const NEAR: &[u32] = &[
        0x7f00_0001,
        0x0a00_0000,
        0xa9fe_a9fe,
        0xc0a8_0001,
        0xac10_0000,
        0xac1f_ffff,
        0x6440_0000,
        0x647f_ffff,
        0x0000_0000,
        0xffff_ffff,
        0xe000_0001,
        0x0808_0808,
        0x01_02_03_04,
    ];
    let v4 = if u.ratio(1, 2)? {
        u.choose(NEAR)?
            .wrapping_add(u.int_in_range(0..=3)?)
            .wrapping_sub(1)
    } else {
        u.arbitrary::<u32>()?
    };
    let b = v4.to_be_bytes();
    Ok(match u.int_in_range(0..=6)? {
        0 => format!("{}.{}.{}.{}", b[0], b[1], b[2], b[3]),
        1 => v4.to_string(),
        2 => format!("0x{v4:x}"),
        3 => format!("0{:o}.0{:o}.0{:o}.0{:o}", b[0], b[1], b[2], b[3]),
        4 => format!("{}.{}", b[0], v4 & 0x00ff_ffff),
        5 => format!("[::ffff:{}.{}.{}.{}]", b[0], b[1], b[2], b[3]),
        _ => format!("[::ffff:{:x}:{:x}]", v4 >> 16, v4 & 0xffff),
    })
}

/// The slow reference: what no chat may reach, from the standard library's
/// own tests of an address, written apart from the policy's tables.
fn public_by_reference(ip: std::net::IpAddr) -> bool {
    use std::net::IpAddr;
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || a == 0
                || (a == 100 && (64..128).contains(&b)))
        }
        IpAddr::V6(v6) => {
            if let Some(inner) = v6.to_ipv4_mapped() {
                return public_by_reference(IpAddr::V4(inner));
            }
            let first = v6.segments()[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || first & 0xfe00 == 0xfc00
                || first & 0xffc0 == 0xfe80)
        }
    }
}
