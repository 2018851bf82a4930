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

mod host;
mod live;
#[cfg(test)]
mod tests;

pub use host::{is_metadata_name, parse_host, split_authority, Host};
pub use live::{BoxPolicy, LivePolicy};

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
/// ([`LivePolicy`]); cheap to share.
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
