//! The address policy of the egress proxy: which addresses a sandboxed command
//! may never reach, whatever name or spelling it uses.
//!
//! The proxy resolves a name once, calls [`Policy::check_all`] on every
//! address of the answer, and connects to a checked address (never a second
//! lookup), so DNS rebinding cannot pass. A host written as an address goes
//! through [`parse_host`] first, which reads every spelling a URL allows
//! (`2130706433`, `0177.0.0.1`, `0x7f.1`, `127.1`, `[::ffff:127.0.0.1]`).
//!
//! What is refused, in the order [`Policy::check`] looks:
//!
//! 1. **Cloud metadata**, never opened by anything: the addresses in
//!    [`METADATA_V4`] and [`METADATA_V6`], also when embedded in IPv6 (see
//!    below). The metadata *names* ([`METADATA_NAMES`], [`is_metadata_name`])
//!    are for the caller to test before it resolves a name.
//! 2. **This box's own addresses** ([`Interfaces::read`]): every address of
//!    every interface, never opened either. Addresses the box is reached by
//!    without having them on an interface (a cloud's 1:1 NAT public address)
//!    are not known here.
//! 3. An administrator's **allow-ranges** open what they contain, against
//!    every rule below (the one way to open e.g. 203.0.113.0/24 in tests).
//!    A range opens an address it contains itself; an IPv6 address that
//!    carries an IPv4 one is, in step 4, judged by that IPv4 address under the
//!    same policy, so a range of IPv4 addresses also opens their mapped, 6to4,
//!    NAT64, Teredo and ISATAP forms.
//! 4. **Address classes** ([`classify`]): loopback, RFC 1918, CGNAT, link-local,
//!    ULA, multicast, broadcast, unspecified, 0.0.0.0/8, 192.0.0.0/24, the
//!    documentation ranges (192.0.2/24, 198.51.100/24, 203.0.113/24,
//!    2001:db8::/32 and 3fff::/20), benchmarking (198.18/15 and 2001:2::/48),
//!    240/4, 100::/64, fec0::/10; then IPv4 embedded in IPv6 when the IPv4
//!    address is refused:
//!    - mapped `::ffff:0:0/96` (last 32 bits),
//!    - compatible `::/96` (last 32 bits; `::` and `::1` are their own classes),
//!    - 6to4 `2002::/16` (bits 16..48),
//!    - NAT64 `64:ff9b::/96` and `64:ff9b:1::/48` (last 32 bits),
//!    - Teredo `2001::/32` (the server is bits 32..64, the client the last 32
//!      bits XOR 0xffffffff; refused if either is),
//!    - ISATAP (interface id `0:5efe:a.b.c.d` or `200:5efe:a.b.c.d`, any prefix);
//!
//!    and last, every IPv6 address outside global unicast `2000::/3` that no
//!    rule above made public is **Reserved**. So an embedding of a *public*
//!    IPv4 address is public when its IPv6 form is routable: mapped, NAT64,
//!    6to4, Teredo and ISATAP under a global prefix. The deprecated
//!    IPv4-compatible form (RFC 4291 2.5.5.1) is never public: with a refused
//!    IPv4 address it is reported as `Embedded { via: "compatible" }`, with a
//!    public one as `Reserved`.
//!
//! 5. **This box's own networks** ([`Interfaces::read`]): every address on
//!    the network of one of the box's interfaces (its address and netmask),
//!    where the LAN's neighbours are, public addresses or not. Last, so an
//!    address keeps its more specific class (127.0.0.2 is loopback,
//!    192.168.1.7 on a home LAN private).
//!
//! The boundaries stay open: 172.15.255.255, 172.32.0.0, 100.63.255.255 and
//! 100.128.0.0 are public.

use std::collections::HashSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

pub use crate::interfaces::Interfaces;
use crate::interfaces::Network;

/// Why an address may not be reached. [`Refusal::kind`] is the audit row's
/// reason, the `Display` text the proxy's one line to the command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// 127.0.0.0/8, ::1.
    Loopback,
    /// RFC 1918: 10/8, 172.16/12, 192.168/16.
    Private,
    /// RFC 6598 shared address space 100.64.0.0/10.
    CarrierNat,
    /// 169.254.0.0/16, fe80::/10.
    LinkLocal,
    /// fc00::/7.
    UniqueLocal,
    /// 224.0.0.0/4, ff00::/8.
    Multicast,
    /// 255.255.255.255.
    Broadcast,
    /// 0.0.0.0, ::.
    Unspecified,
    /// 0.0.0.0/8 other than 0.0.0.0.
    ThisNetwork,
    /// 192.0.0.0/24.
    IetfProtocol,
    /// 192.0.2/24, 198.51.100/24, 203.0.113/24, 2001:db8::/32, 3fff::/20.
    Documentation,
    /// 198.18.0.0/15, 2001:2::/48.
    Benchmarking,
    /// 240.0.0.0/4 (not the broadcast address), IPv6 outside 2000::/3 that no
    /// other rule covers, IPv4-compatible IPv6 of a public IPv4 address.
    Reserved,
    /// 100::/64.
    Discard,
    /// fec0::/10.
    SiteLocal,
    /// A cloud metadata address or name.
    Metadata,
    /// An address of one of this box's interfaces.
    ThisBox,
    /// An address on the network of one of this box's interfaces: a LAN
    /// neighbour, whatever its class.
    OwnNetwork { net: IpNet, interface: String },
    /// An IPv4 address carried in an IPv6 one, refused for `why`.
    Embedded {
        /// "mapped", "compatible", "6to4", "NAT64", "Teredo" or "ISATAP".
        via: &'static str,
        inner: Ipv4Addr,
        why: Box<Refusal>,
    },
}

impl Refusal {
    /// The reason as one snake_case word, for audit rows and metrics labels.
    pub fn kind(&self) -> &'static str {
        match self {
            Refusal::Loopback => "loopback",
            Refusal::Private => "private",
            Refusal::CarrierNat => "carrier_nat",
            Refusal::LinkLocal => "link_local",
            Refusal::UniqueLocal => "unique_local",
            Refusal::Multicast => "multicast",
            Refusal::Broadcast => "broadcast",
            Refusal::Unspecified => "unspecified",
            Refusal::ThisNetwork => "this_network",
            Refusal::IetfProtocol => "ietf_protocol",
            Refusal::Documentation => "documentation",
            Refusal::Benchmarking => "benchmarking",
            Refusal::Reserved => "reserved",
            Refusal::Discard => "discard",
            Refusal::SiteLocal => "site_local",
            Refusal::Metadata => "metadata",
            Refusal::ThisBox => "this_box",
            Refusal::OwnNetwork { .. } => "own_network",
            Refusal::Embedded { .. } => "embedded",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            Refusal::Loopback => "a loopback address",
            Refusal::Private => "a private (RFC 1918) address",
            Refusal::CarrierNat => "a carrier-grade NAT (100.64.0.0/10) address",
            Refusal::LinkLocal => "a link-local address",
            Refusal::UniqueLocal => "a unique local (fc00::/7) address",
            Refusal::Multicast => "a multicast address",
            Refusal::Broadcast => "the broadcast address",
            Refusal::Unspecified => "the unspecified address",
            Refusal::ThisNetwork => "a \"this network\" (0.0.0.0/8) address",
            Refusal::IetfProtocol => "an IETF protocol (192.0.0.0/24) address",
            Refusal::Documentation => "a documentation address",
            Refusal::Benchmarking => "a benchmarking address",
            Refusal::Reserved => "a reserved address",
            Refusal::Discard => "a discard-only (100::/64) address",
            Refusal::SiteLocal => "a site-local (fec0::/10) address",
            Refusal::Metadata => "a cloud metadata address",
            Refusal::ThisBox => "an address of this box",
            Refusal::OwnNetwork { net, interface } => {
                return write!(
                    f,
                    "a neighbour on this box's own network {net} (interface {interface}), \
                     which only the administrator's allow_ranges opens"
                );
            }
            Refusal::Embedded { via, inner, why } => {
                return write!(
                    f,
                    "an IPv4 address embedded in IPv6 ({via}), {inner}, that is {why}"
                );
            }
        };
        f.write_str(text)
    }
}

/// Cloud metadata addresses: 169.254.169.254 (AWS, GCP, Azure, OpenStack,
/// Oracle, DigitalOcean, ...), 169.254.170.2 (AWS ECS task credentials),
/// 169.254.170.23 (AWS EKS Pod Identity), 100.100.100.200 (Alibaba Cloud),
/// 192.0.0.192 (Oracle Cloud, legacy) and 168.63.129.16 (Azure WireServer,
/// a public-looking address every Azure VM reaches).
pub const METADATA_V4: [Ipv4Addr; 6] = [
    Ipv4Addr::new(169, 254, 169, 254),
    Ipv4Addr::new(169, 254, 170, 2),
    Ipv4Addr::new(169, 254, 170, 23),
    Ipv4Addr::new(100, 100, 100, 200),
    Ipv4Addr::new(192, 0, 0, 192),
    Ipv4Addr::new(168, 63, 129, 16),
];

/// Cloud metadata addresses over IPv6: fd00:ec2::254 (AWS instance metadata)
/// and fd00:ec2::23 (AWS EKS Pod Identity).
pub const METADATA_V6: [Ipv6Addr; 2] = [
    Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254),
    Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x23),
];

/// Cloud metadata host names, lowercase without a trailing dot:
/// Google Cloud (`metadata.google.internal`, `metadata.goog`, and `metadata`
/// through the search domain), AWS (`instance-data` and
/// `instance-data.ec2.internal`; [`is_metadata_name`] also takes any
/// `instance-data.*.internal`), Tencent Cloud (`metadata.tencentyun.com`) and
/// Equinix Metal (`metadata.platformequinix.com`, `metadata.packet.net`).
pub const METADATA_NAMES: [&str; 8] = [
    "metadata.google.internal",
    "metadata.goog",
    "metadata",
    "instance-data",
    "instance-data.ec2.internal",
    "metadata.tencentyun.com",
    "metadata.platformequinix.com",
    "metadata.packet.net",
];

const fn v4net(a: u8, b: u8, c: u8, d: u8, len: u8) -> Ipv4Net {
    Ipv4Net::new_assert(Ipv4Addr::new(a, b, c, d), len)
}

const fn v6net(s: [u16; 8], len: u8) -> Ipv6Net {
    Ipv6Net::new_assert(
        Ipv6Addr::new(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]),
        len,
    )
}

/// IPv4 classes, first match wins (so the more specific come first).
static V4_CLASSES: [(Ipv4Net, Refusal); 16] = [
    (v4net(0, 0, 0, 0, 32), Refusal::Unspecified),
    (v4net(0, 0, 0, 0, 8), Refusal::ThisNetwork),
    (v4net(127, 0, 0, 0, 8), Refusal::Loopback),
    (v4net(10, 0, 0, 0, 8), Refusal::Private),
    (v4net(172, 16, 0, 0, 12), Refusal::Private),
    (v4net(192, 168, 0, 0, 16), Refusal::Private),
    (v4net(100, 64, 0, 0, 10), Refusal::CarrierNat),
    (v4net(169, 254, 0, 0, 16), Refusal::LinkLocal),
    (v4net(192, 0, 0, 0, 24), Refusal::IetfProtocol),
    (v4net(192, 0, 2, 0, 24), Refusal::Documentation),
    (v4net(198, 51, 100, 0, 24), Refusal::Documentation),
    (v4net(203, 0, 113, 0, 24), Refusal::Documentation),
    (v4net(198, 18, 0, 0, 15), Refusal::Benchmarking),
    (v4net(255, 255, 255, 255, 32), Refusal::Broadcast),
    (v4net(224, 0, 0, 0, 4), Refusal::Multicast),
    (v4net(240, 0, 0, 0, 4), Refusal::Reserved),
];

/// IPv6 classes refused whatever the address carries, first match wins.
static V6_CLASSES: [(Ipv6Net, Refusal); 10] = [
    (v6net([0; 8], 128), Refusal::Unspecified),
    (v6net([0, 0, 0, 0, 0, 0, 0, 1], 128), Refusal::Loopback),
    (v6net([0xff00, 0, 0, 0, 0, 0, 0, 0], 8), Refusal::Multicast),
    (v6net([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10), Refusal::LinkLocal),
    (v6net([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10), Refusal::SiteLocal),
    (
        v6net([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7),
        Refusal::UniqueLocal,
    ),
    (v6net([0x100, 0, 0, 0, 0, 0, 0, 0], 64), Refusal::Discard),
    (
        v6net([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32),
        Refusal::Documentation,
    ),
    (
        v6net([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20),
        Refusal::Documentation,
    ),
    (
        v6net([0x2001, 2, 0, 0, 0, 0, 0, 0], 48),
        Refusal::Benchmarking,
    ),
];

const MAPPED: Ipv6Net = v6net([0, 0, 0, 0, 0, 0xffff, 0, 0], 96);
const COMPATIBLE: Ipv6Net = v6net([0; 8], 96);
const SIX_TO_FOUR: Ipv6Net = v6net([0x2002, 0, 0, 0, 0, 0, 0, 0], 16);
const NAT64: Ipv6Net = v6net([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96);
const NAT64_LOCAL: Ipv6Net = v6net([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48);
const TEREDO: Ipv6Net = v6net([0x2001, 0, 0, 0, 0, 0, 0, 0], 32);
const GLOBAL_UNICAST: Ipv6Net = v6net([0x2000, 0, 0, 0, 0, 0, 0, 0], 3);

/// Every IPv4 address an IPv6 address carries, with the way it is carried.
/// Most carry none; Teredo carries two; a 6to4 or Teredo address may also
/// carry one in an ISATAP interface id.
fn embedded_v4(ip: Ipv6Addr) -> Vec<(&'static str, Ipv4Addr)> {
    let bits = u128::from(ip);
    let last32 = Ipv4Addr::from(bits as u32);
    let mut out = Vec::new();
    if MAPPED.contains(&ip) {
        out.push(("mapped", last32));
    }
    if COMPATIBLE.contains(&ip) && !ip.is_unspecified() && !ip.is_loopback() {
        out.push(("compatible", last32));
    }
    if SIX_TO_FOUR.contains(&ip) {
        out.push(("6to4", Ipv4Addr::from((bits >> 80) as u32)));
    }
    if NAT64.contains(&ip) || NAT64_LOCAL.contains(&ip) {
        out.push(("NAT64", last32));
    }
    if TEREDO.contains(&ip) {
        out.push(("Teredo", Ipv4Addr::from((bits >> 64) as u32)));
        out.push(("Teredo", Ipv4Addr::from(!(bits as u32))));
    }
    let s = ip.segments();
    if (s[4] == 0 || s[4] == 0x200) && s[5] == 0x5efe {
        out.push(("ISATAP", last32));
    }
    out
}

fn metadata_refusal(ip: IpAddr) -> Option<Refusal> {
    match ip {
        IpAddr::V4(v4) => METADATA_V4.contains(&v4).then_some(Refusal::Metadata),
        IpAddr::V6(v6) if METADATA_V6.contains(&v6) => Some(Refusal::Metadata),
        IpAddr::V6(v6) => embedded_v4(v6)
            .into_iter()
            .find(|(_, inner)| METADATA_V4.contains(inner))
            .map(|(via, inner)| Refusal::Embedded {
                via,
                inner,
                why: Box::new(Refusal::Metadata),
            }),
    }
}

/// The class of an address, `None` for public. Knows nothing of this box's
/// addresses or of allow-ranges: the same as an empty [`Policy`]'s check.
pub fn classify(ip: IpAddr) -> Option<Refusal> {
    Policy::default().check(ip).err()
}

/// What the proxy checks every address against: the classes, an
/// administrator's allow-ranges and this box's own addresses and networks.
/// Built at start and again when the box's interfaces change
/// ([`crate::interfaces::LivePolicy`]); cheap to share.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    allow_ranges: Vec<IpNet>,
    own: HashSet<IpAddr>,
    networks: Vec<Network>,
}

impl Policy {
    /// `allow_ranges` from the administrator's config; `own` usually from
    /// [`Interfaces::read`].
    pub fn new(allow_ranges: Vec<IpNet>, own: Interfaces) -> Policy {
        Policy {
            allow_ranges,
            own: own.addresses.into_iter().collect(),
            networks: own.networks,
        }
    }

    /// The allow-ranges this policy opens.
    pub fn allow_ranges(&self) -> &[IpNet] {
        &self.allow_ranges
    }

    /// Whether `ip` may be connected to. Metadata and this box's own
    /// addresses first (never opened), then the allow-ranges (open), then the
    /// classes, then this box's networks; an IPv6 address carrying an IPv4
    /// one is refused if this policy refuses that IPv4 address.
    pub fn check(&self, ip: IpAddr) -> Result<(), Refusal> {
        if let Some(refusal) = metadata_refusal(ip) {
            return Err(refusal);
        }
        self.check_open(ip)
    }

    fn check_open(&self, ip: IpAddr) -> Result<(), Refusal> {
        // The box itself stays shut even inside an allow-range: a test
        // network's own end is this box.
        if self.own.contains(&ip) {
            return Err(Refusal::ThisBox);
        }
        if self.allow_ranges.iter().any(|net| net.contains(&ip)) {
            return Ok(());
        }
        self.check_class(ip)?;
        match self.networks.iter().find(|n| n.net.contains(&ip)) {
            Some(n) => Err(Refusal::OwnNetwork {
                net: n.net,
                interface: n.interface.clone(),
            }),
            None => Ok(()),
        }
    }

    /// The address classes; an embedded IPv4 address by the whole policy.
    fn check_class(&self, ip: IpAddr) -> Result<(), Refusal> {
        match ip {
            IpAddr::V4(v4) => match V4_CLASSES.iter().find(|(net, _)| net.contains(&v4)) {
                Some((_, refusal)) => Err(refusal.clone()),
                None => Ok(()),
            },
            IpAddr::V6(v6) => {
                if let Some((_, refusal)) = V6_CLASSES.iter().find(|(net, _)| net.contains(&v6)) {
                    return Err(refusal.clone());
                }
                for (via, inner) in embedded_v4(v6) {
                    if let Err(why) = self.check_open(IpAddr::V4(inner)) {
                        return Err(Refusal::Embedded {
                            via,
                            inner,
                            why: Box::new(why),
                        });
                    }
                }
                let routable = GLOBAL_UNICAST.contains(&v6)
                    || MAPPED.contains(&v6)
                    || NAT64.contains(&v6)
                    || NAT64_LOCAL.contains(&v6);
                if routable {
                    Ok(())
                } else {
                    Err(Refusal::Reserved)
                }
            }
        }
    }

    /// Every address of one answer: one refused address refuses the whole
    /// set, naming it. An empty set is `Ok(())` here; a name that resolves to
    /// nothing is the caller's to answer (a 502, not a policy refusal).
    pub fn check_all(&self, ips: &[IpAddr]) -> Result<(), (IpAddr, Refusal)> {
        for &ip in ips {
            self.check(ip).map_err(|refusal| (ip, refusal))?;
        }
        Ok(())
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn kind(text: &str) -> Option<&'static str> {
        classify(ip(text)).map(|r| r.kind())
    }

    fn net(text: &str) -> IpNet {
        text.parse().unwrap()
    }

    /// (first, middle, last, kind) of every refused IPv4 range.
    const V4_CASES: &[(&str, &str, &str, &str)] = &[
        ("0.0.0.0", "0.0.0.0", "0.0.0.0", "unspecified"),
        ("0.0.0.1", "0.12.34.56", "0.255.255.255", "this_network"),
        ("127.0.0.0", "127.0.0.1", "127.255.255.255", "loopback"),
        ("10.0.0.0", "10.20.30.40", "10.255.255.255", "private"),
        ("172.16.0.0", "172.20.1.1", "172.31.255.255", "private"),
        ("192.168.0.0", "192.168.1.1", "192.168.255.255", "private"),
        (
            "100.64.0.0",
            "100.100.1.1",
            "100.127.255.255",
            "carrier_nat",
        ),
        (
            "169.254.0.0",
            "169.254.1.1",
            "169.254.255.255",
            "link_local",
        ),
        ("192.0.0.0", "192.0.0.8", "192.0.0.255", "ietf_protocol"),
        ("192.0.2.0", "192.0.2.77", "192.0.2.255", "documentation"),
        (
            "198.51.100.0",
            "198.51.100.7",
            "198.51.100.255",
            "documentation",
        ),
        (
            "203.0.113.0",
            "203.0.113.7",
            "203.0.113.255",
            "documentation",
        ),
        (
            "198.18.0.0",
            "198.18.200.1",
            "198.19.255.255",
            "benchmarking",
        ),
        ("224.0.0.0", "232.1.2.3", "239.255.255.255", "multicast"),
        ("240.0.0.0", "250.1.2.3", "255.255.255.254", "reserved"),
        (
            "255.255.255.255",
            "255.255.255.255",
            "255.255.255.255",
            "broadcast",
        ),
    ];

    const V6_CASES: &[(&str, &str, &str, &str)] = &[
        ("::", "::", "::", "unspecified"),
        ("::1", "::1", "::1", "loopback"),
        (
            "fe80::",
            "fe80::1:2:3:4",
            "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "link_local",
        ),
        (
            "fc00::",
            "fd12:3456::1",
            "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "unique_local",
        ),
        (
            "ff00::",
            "ff02::1",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "multicast",
        ),
        (
            "fec0::",
            "fec0::1",
            "feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "site_local",
        ),
        (
            "100::",
            "100::1:2:3:4",
            "100::ffff:ffff:ffff:ffff",
            "discard",
        ),
        (
            "2001:db8::",
            "2001:db8:1::1",
            "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff",
            "documentation",
        ),
        (
            "3fff::",
            "3fff:123::1",
            "3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff",
            "documentation",
        ),
        (
            "2001:2::",
            "2001:2:0:1::1",
            "2001:2:0:ffff:ffff:ffff:ffff:ffff",
            "benchmarking",
        ),
        (
            "4000::",
            "5f00::1",
            "fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "reserved",
        ),
        (
            "101::",
            "1234::1",
            "1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "reserved",
        ),
    ];

    #[test]
    fn netpolicy_refuses_every_ipv4_range_first_middle_last() {
        for &(first, middle, last, want) in V4_CASES {
            for addr in [first, middle, last] {
                assert_eq!(kind(addr), Some(want), "{addr}");
            }
        }
    }

    #[test]
    fn netpolicy_refuses_every_ipv6_range_first_middle_last() {
        for &(first, middle, last, want) in V6_CASES {
            for addr in [first, middle, last] {
                assert_eq!(kind(addr), Some(want), "{addr}");
            }
        }
    }

    #[test]
    fn netpolicy_boundaries_and_real_public_addresses_are_public() {
        for addr in [
            "172.15.255.255",
            "172.32.0.0",
            "100.63.255.255",
            "100.128.0.0",
            "9.255.255.255",
            "11.0.0.0",
            "126.255.255.255",
            "128.0.0.0",
            "169.253.255.255",
            "169.255.0.0",
            "192.167.255.255",
            "192.169.0.0",
            "198.17.255.255",
            "198.20.0.0",
            "223.255.255.255",
            "1.0.0.0",
            "1.1.1.1",
            "8.8.8.8",
            "2606:4700:4700::1111",
            "2001:4860:4860::8888",
            "2000::",
            "3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff",
            "2001:db9::",
        ] {
            assert_eq!(classify(ip(addr)), None, "{addr}");
        }
    }

    #[test]
    fn netpolicy_embedded_refused_ipv4_is_refused() {
        let cases: &[(&str, &str, &str, &str)] = &[
            ("::ffff:10.0.0.1", "mapped", "10.0.0.1", "private"),
            ("::ffff:127.0.0.1", "mapped", "127.0.0.1", "loopback"),
            ("::ffff:0.0.0.0", "mapped", "0.0.0.0", "unspecified"),
            ("::10.0.0.1", "compatible", "10.0.0.1", "private"),
            ("::127.0.0.1", "compatible", "127.0.0.1", "loopback"),
            ("::0.0.0.2", "compatible", "0.0.0.2", "this_network"),
            ("2002:7f00:0001::", "6to4", "127.0.0.1", "loopback"),
            ("2002:c0a8:0101:1::5", "6to4", "192.168.1.1", "private"),
            ("64:ff9b::127.0.0.1", "NAT64", "127.0.0.1", "loopback"),
            ("64:ff9b::a9fe:1", "NAT64", "169.254.0.1", "link_local"),
            ("64:ff9b:1::a00:1", "NAT64", "10.0.0.1", "private"),
            // Teredo: server 8.8.8.8 (public), client 10.0.0.1 XOR 0xffffffff.
            ("2001:0:808:808::f5ff:fffe", "Teredo", "10.0.0.1", "private"),
            // Teredo: server 192.168.0.1, client 8.8.8.8 (public).
            (
                "2001:0:c0a8:1::f7f7:f7f7",
                "Teredo",
                "192.168.0.1",
                "private",
            ),
            ("::5efe:192.168.1.1", "ISATAP", "192.168.1.1", "private"),
            ("2606:4700::5efe:10.1.2.3", "ISATAP", "10.1.2.3", "private"),
            (
                "2606:4700::200:5efe:127.0.0.1",
                "ISATAP",
                "127.0.0.1",
                "loopback",
            ),
        ];
        for &(addr, via, inner, why) in cases {
            match classify(ip(addr)) {
                Some(Refusal::Embedded {
                    via: got_via,
                    inner: got_inner,
                    why: got_why,
                }) => {
                    assert_eq!(got_via, via, "{addr}");
                    assert_eq!(got_inner, inner.parse::<Ipv4Addr>().unwrap(), "{addr}");
                    assert_eq!(got_why.kind(), why, "{addr}");
                }
                other => panic!("{addr}: {other:?}"),
            }
        }
    }

    #[test]
    fn netpolicy_embedded_public_ipv4_follows_the_outer_address() {
        // Routable forms of a public IPv4 address are public.
        for addr in [
            "::ffff:8.8.8.8",
            "::ffff:172.32.0.0",
            "2002:808:808::1",
            "64:ff9b::1.1.1.1",
            "64:ff9b:1::808:808",
            "2001:0:808:808::f7f7:f7f7",
            "2606:4700::5efe:8.8.8.8",
            "2606:4700::200:5efe:1.1.1.1",
        ] {
            assert_eq!(classify(ip(addr)), None, "{addr}");
        }
        // The deprecated compatible form, and ISATAP outside 2000::/3, are not.
        assert_eq!(kind("::8.8.8.8"), Some("reserved"));
        assert_eq!(kind("::5efe:8.8.8.8"), Some("reserved"));
        // A class of the outer address wins over what it carries.
        assert_eq!(kind("fe80::5efe:10.0.0.1"), Some("link_local"));
        assert_eq!(kind("fd00::200:5efe:8.8.8.8"), Some("unique_local"));
    }

    #[test]
    fn netpolicy_every_url_spelling_of_loopback() {
        let loopback = Host::Ip(ip("127.0.0.1"));
        for text in [
            "127.0.0.1",
            "2130706433",
            "0177.0.0.1",
            "0x7f.0.0.1",
            "0x7F.0.0.1",
            "0x7f000001",
            "017700000001",
            "127.1",
            "127.0.1",
            "0x7f.1",
            "127.0.0.1.",
            "127%2e0%2e0%2e1",
            "１２７.０.０.１",
        ] {
            assert_eq!(parse_host(text), Ok(loopback.clone()), "{text}");
        }
        assert_eq!(parse_host("[::1]"), Ok(Host::Ip(ip("::1"))));
        assert_eq!(parse_host("[0:0:0:0:0:0:0:1]"), Ok(Host::Ip(ip("::1"))));
        assert_eq!(parse_host("[::]"), Ok(Host::Ip(ip("::"))));
        let mapped = parse_host("[::ffff:127.0.0.1]").unwrap();
        assert_eq!(mapped, Host::Ip(ip("::ffff:7f00:1")));
        let Host::Ip(mapped) = mapped else {
            unreachable!()
        };
        assert_eq!(classify(mapped).unwrap().kind(), "embedded");
    }

    #[test]
    fn netpolicy_parse_host_names_and_errors() {
        let name = |s: &str| Ok(Host::Name(s.to_string()));
        assert_eq!(parse_host("PyPI.org"), name("pypi.org"));
        assert_eq!(
            parse_host("files.pythonhosted.org."),
            name("files.pythonhosted.org")
        );
        assert_eq!(parse_host("bücher.example"), name("xn--bcher-kva.example"));
        assert_eq!(parse_host("localhost"), name("localhost"));
        for bad in [
            "",
            ".",
            "a..b",
            "a.b..",
            "::1",
            "[::1",
            "[::1]x",
            "host:80",
            "user@host",
            "a b",
            "1.2.3.4.5",
            "256.0.0.1",
            "[127.0.0.1]",
            "exa/mple",
        ] {
            let err = parse_host(bad).unwrap_err();
            assert!(!err.is_empty(), "{bad}");
        }
        assert!(parse_host("host:80").unwrap_err().contains("':'"));
        assert!(parse_host("user@host").unwrap_err().contains("'@'"));
        assert!(parse_host("[::1").unwrap_err().contains("brackets"));
        assert!(parse_host("a..b").unwrap_err().contains("empty label"));
    }

    #[test]
    fn netpolicy_metadata_is_never_opened() {
        let everything = Policy::new(
            vec![
                net("0.0.0.0/0"),
                net("::/0"),
                net("169.254.0.0/16"),
                net("fc00::/7"),
            ],
            Interfaces::default(),
        );
        for addr in [
            "169.254.169.254",
            "169.254.170.2",
            "100.100.100.200",
            "168.63.129.16",
            "fd00:ec2::254",
        ] {
            assert_eq!(everything.check(ip(addr)), Err(Refusal::Metadata), "{addr}");
            assert_eq!(classify(ip(addr)), Some(Refusal::Metadata), "{addr}");
        }
        for (addr, via) in [
            ("::ffff:169.254.169.254", "mapped"),
            ("2002:a9fe:a9fe::", "6to4"),
            ("64:ff9b::169.254.169.254", "NAT64"),
            ("2606:4700::5efe:169.254.169.254", "ISATAP"),
        ] {
            let want = Refusal::Embedded {
                via,
                inner: Ipv4Addr::new(169, 254, 169, 254),
                why: Box::new(Refusal::Metadata),
            };
            assert_eq!(everything.check(ip(addr)), Err(want), "{addr}");
        }
        // The rest of the link-local range is opened by the range.
        assert_eq!(everything.check(ip("169.254.1.1")), Ok(()));
    }

    #[test]
    fn netpolicy_metadata_names() {
        for name in [
            "metadata.google.internal",
            "METADATA.Google.Internal.",
            "metadata.goog",
            "metadata",
            "metadata.",
            "instance-data",
            "instance-data.ec2.internal",
            "instance-data.us-west-2.compute.internal",
            "metadata.tencentyun.com",
            "ｍｅｔａｄａｔａ.google.internal",
        ] {
            assert!(is_metadata_name(name), "{name}");
        }
        for name in [
            "google.com",
            "metadata.example.com",
            "mymetadata",
            "169.254.169.254",
        ] {
            assert!(!is_metadata_name(name), "{name}");
        }
    }

    #[test]
    fn netpolicy_allow_range_opens_only_what_it_contains() {
        let policy = Policy::new(vec![net("203.0.113.0/24")], Interfaces::default());
        assert_eq!(policy.check(ip("203.0.113.7")), Ok(()));
        assert_eq!(policy.check(ip("::ffff:203.0.113.7")), Ok(()));
        assert_eq!(policy.check(ip("64:ff9b::203.0.113.7")), Ok(()));
        // 203.0.114.1 is public anyway; the neighbouring documentation ranges stay shut.
        assert_eq!(policy.check(ip("203.0.114.1")), Ok(()));
        assert_eq!(
            policy.check(ip("198.51.100.7")),
            Err(Refusal::Documentation)
        );
        assert_eq!(policy.check(ip("192.0.2.1")), Err(Refusal::Documentation));
        assert_eq!(policy.check(ip("10.0.0.1")), Err(Refusal::Private));
        assert_eq!(classify(ip("203.0.113.7")), Some(Refusal::Documentation));
        assert_eq!(policy.allow_ranges(), &[net("203.0.113.0/24")]);
    }

    #[test]
    fn netpolicy_own_addresses_are_this_box() {
        let own = |addresses: &[&str]| Interfaces {
            addresses: addresses.iter().map(|a| ip(a)).collect(),
            networks: vec![],
        };
        let policy = Policy::new(vec![], own(&["8.8.4.4", "2606:4700::1"]));
        assert_eq!(policy.check(ip("8.8.4.4")), Err(Refusal::ThisBox));
        assert_eq!(policy.check(ip("2606:4700::1")), Err(Refusal::ThisBox));
        assert_eq!(
            policy.check(ip("::ffff:8.8.4.4")),
            Err(Refusal::Embedded {
                via: "mapped",
                inner: Ipv4Addr::new(8, 8, 4, 4),
                why: Box::new(Refusal::ThisBox),
            })
        );
        assert_eq!(policy.check(ip("8.8.8.8")), Ok(()));
        assert_eq!(classify(ip("8.8.4.4")), None);
        // An allow-range never opens the box itself (a test network's own end).
        let opened = Policy::new(vec![net("8.8.4.0/24")], own(&["8.8.4.4"]));
        assert_eq!(opened.check(ip("8.8.4.4")), Err(Refusal::ThisBox));
        assert_eq!(opened.check(ip("8.8.4.5")), Ok(()));
    }

    #[test]
    fn netpolicy_check_all_refuses_a_mixed_answer() {
        let policy = Policy::default();
        assert_eq!(policy.check_all(&[]), Ok(()));
        assert_eq!(
            policy.check_all(&[ip("1.1.1.1"), ip("2606:4700::1")]),
            Ok(())
        );
        assert_eq!(
            policy.check_all(&[ip("1.1.1.1"), ip("192.168.0.10"), ip("8.8.8.8")]),
            Err((ip("192.168.0.10"), Refusal::Private))
        );
        assert_eq!(
            policy.check_all(&[ip("1.1.1.1"), ip("::1")]),
            Err((ip("::1"), Refusal::Loopback))
        );
    }

    #[test]
    fn netpolicy_split_authority() {
        let name = |s: &str| Host::Name(s.to_string());
        assert_eq!(
            split_authority("pypi.org:443", 80),
            Ok((name("pypi.org"), 443))
        );
        assert_eq!(split_authority("pypi.org", 80), Ok((name("pypi.org"), 80)));
        assert_eq!(
            split_authority("Example.COM.:8080", 80),
            Ok((name("example.com"), 8080))
        );
        assert_eq!(
            split_authority("[::1]:8443", 80),
            Ok((Host::Ip(ip("::1")), 8443))
        );
        assert_eq!(
            split_authority("[::1]", 443),
            Ok((Host::Ip(ip("::1")), 443))
        );
        assert_eq!(
            split_authority("2130706433:80", 443),
            Ok((Host::Ip(ip("127.0.0.1")), 80))
        );
        assert_eq!(split_authority("h:1", 80), Ok((name("h"), 1)));
        assert_eq!(split_authority("h:65535", 80), Ok((name("h"), 65535)));
        assert_eq!(split_authority("h:0080", 443), Ok((name("h"), 80)));
        for bad in [
            "",
            "h:",
            "h:0",
            "h:65536",
            "h:99999999999",
            "h:-1",
            "h:+80",
            "h:http",
            "h:80 ",
            "::1",
            "::1:80",
            "[::1",
            "[::1]80",
            "[::1]:",
            "[::1]:0",
            ":80",
            "a@h:80",
            "h:80:80",
        ] {
            assert!(split_authority(bad, 80).is_err(), "{bad}");
        }
        // The default port is checked too.
        assert!(split_authority("h", 0).is_err());
    }

    #[test]
    fn netpolicy_kinds_and_lines() {
        assert_eq!(Refusal::CarrierNat.kind(), "carrier_nat");
        assert_eq!(Refusal::ThisBox.kind(), "this_box");
        assert_eq!(Refusal::Private.to_string(), "a private (RFC 1918) address");
        let refusal = classify(ip("2002:7f00:1::")).unwrap();
        assert_eq!(refusal.kind(), "embedded");
        assert_eq!(
            refusal.to_string(),
            "an IPv4 address embedded in IPv6 (6to4), 127.0.0.1, that is a loopback address"
        );
        assert_eq!(Host::Ip(ip("::1")).to_string(), "[::1]");
    }
}
