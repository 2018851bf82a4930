//! This box's interfaces as the address policy sees them: every address the
//! box has, and every network (address and netmask) a neighbour of the box
//! can be on; and [`Watch`], the kernel's notices that they changed.
//!
//! On a dual-stack LAN every router, NAS and printer has a global IPv6
//! address on the box's own prefix, and some LANs number their hosts from a
//! public IPv4 block: no address class refuses them, so the policy refuses
//! the box's own networks too ([`Refusal::OwnNetwork`]).
//!
//! Interfaces change while a daemon runs (a laptop joins another network, a
//! router hands out a new prefix), so the policy (`netpolicy::LivePolicy`) subscribes to the
//! kernel's address notices (a netlink route socket, [`Watch`]) and, before
//! each decision, takes what the kernel queued since the last one: any
//! notice, and the interfaces are read again before the decision is made.
//! The kernel queues an IPv4 notice before the `ip addr add` that caused it
//! returns, so no decision after a change uses the interfaces from before it.
//! An empty queue costs one non-blocking `recv`; a timer ("read again every
//! second") would cost less to write but leave a second in which a new
//! prefix is open.
//!
//! [`Refusal::OwnNetwork`]: crate::netpolicy::Refusal::OwnNetwork

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};

use ipnet::IpNet;
use nix::errno::Errno;
use nix::sys::socket::{self, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol};

/// A network the box is on: an interface's address with its netmask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Network {
    /// The prefix, host bits zero (`198.51.7.0/24`, `2001:db8:7::/64`).
    pub net: IpNet,
    /// The interface it is on (`eth0`, `wlp2s0`).
    pub interface: String,
}

/// Every address of every interface, and every network they are on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Interfaces {
    /// Each once.
    pub addresses: Vec<IpAddr>,
    /// Each once; none for an address with a full-length mask (a /32 or
    /// /128 is the address alone, in `addresses`).
    pub networks: Vec<Network>,
}

impl Interfaces {
    /// The box's interfaces now (getifaddrs).
    pub fn read() -> io::Result<Interfaces> {
        let mut own = Interfaces::default();
        for ifaddr in nix::ifaddrs::getifaddrs()? {
            let Some(address) = ifaddr.address.as_ref().and_then(ip_of) else {
                continue;
            };
            if !own.addresses.contains(&address) {
                own.addresses.push(address);
            }
            // No netmask (some tunnels): the address alone.
            let Some(mask) = ifaddr.netmask.as_ref().and_then(ip_of) else {
                continue;
            };
            let Some(net) = network_of(address, mask) else {
                continue;
            };
            let network = Network {
                net,
                interface: ifaddr.interface_name.clone(),
            };
            if !own.networks.iter().any(|n| n.net == network.net) {
                own.networks.push(network);
            }
        }
        Ok(own)
    }
}

fn ip_of(address: &socket::SockaddrStorage) -> Option<IpAddr> {
    if let Some(sin) = address.as_sockaddr_in() {
        Some(IpAddr::V4(sin.ip()))
    } else {
        address.as_sockaddr_in6().map(|sin6| IpAddr::V6(sin6.ip()))
    }
}

/// The network of `address` under `mask`; `None` for a full-length mask or
/// a mask of the other family. A mask with a hole (Linux makes none) is read
/// by its leading ones: the wider network, refused whole.
fn network_of(address: IpAddr, mask: IpAddr) -> Option<IpNet> {
    let (len, max) = match (address, mask) {
        (IpAddr::V4(_), IpAddr::V4(mask)) => (u32::from(mask).leading_ones(), 32),
        (IpAddr::V6(_), IpAddr::V6(mask)) => (u128::from(mask).leading_ones(), 128),
        _ => return None,
    };
    if len >= max {
        return None;
    }
    // len < max, and max is the family's length: a valid prefix length.
    IpNet::new(address, len as u8).ok().map(|net| net.trunc())
}

/// A subscription to the kernel's notices of addresses added to or removed
/// from any interface (of the network namespace it was opened in).
pub struct Watch {
    socket: OwnedFd,
}

impl Watch {
    pub fn open() -> io::Result<Watch> {
        let socket = socket::socket(
            AddressFamily::Netlink,
            socket::SockType::Raw,
            SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
            SockProtocol::NetlinkRoute,
        )?;
        let groups = nix::libc::RTMGRP_IPV4_IFADDR | nix::libc::RTMGRP_IPV6_IFADDR;
        // The groups are small positive flags.
        socket::bind(socket.as_raw_fd(), &NetlinkAddr::new(0, groups as u32))?;
        Ok(Watch { socket })
    }

    /// Whether any address changed since the last call: takes every notice
    /// the kernel queued, without waiting.
    pub fn changed(&self) -> bool {
        // A notice is a datagram; only that one came matters, not what it says.
        let mut buffer = [0u8; 4096];
        let mut changed = false;
        loop {
            match socket::recv(self.socket.as_raw_fd(), &mut buffer, MsgFlags::MSG_DONTWAIT) {
                Ok(0) | Err(Errno::EAGAIN) => return changed,
                Ok(_) => changed = true,
                Err(Errno::EINTR) => {}
                // Notices lost to a full queue: something changed.
                Err(Errno::ENOBUFS) => changed = true,
                // Anything else: it cannot be told, so read the interfaces again.
                Err(_) => return true,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netpolicy::{Policy, Refusal};

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn net(text: &str) -> IpNet {
        text.parse().unwrap()
    }

    fn on(nets: &[(&str, &str)]) -> Interfaces {
        Interfaces {
            addresses: vec![],
            networks: nets
                .iter()
                .map(|(n, interface)| Network {
                    net: net(n),
                    interface: interface.to_string(),
                })
                .collect(),
        }
    }

    fn lan(net_text: &str, interface: &str) -> Refusal {
        Refusal::OwnNetwork {
            net: net(net_text),
            interface: interface.to_string(),
        }
    }

    #[test]
    fn interfaces_networks_of_address_and_mask() {
        let check = |address: &str, mask: &str, want: Option<&str>| {
            assert_eq!(
                network_of(ip(address), ip(mask)),
                want.map(net),
                "{address} {mask}"
            );
        };
        check("198.51.7.33", "255.255.255.0", Some("198.51.7.0/24"));
        check("10.1.2.3", "255.0.0.0", Some("10.0.0.0/8"));
        check(
            "2001:db8:7:7::1",
            "ffff:ffff:ffff:ffff::",
            Some("2001:db8:7:7::/64"),
        );
        check("203.0.113.5", "255.255.255.255", None);
        check(
            "2001:db8::5",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            None,
        );
        check("203.0.113.5", "0.0.0.0", Some("0.0.0.0/0"));
        // A mask with a hole is the wider network.
        check("198.51.7.33", "255.0.255.0", Some("198.0.0.0/8"));
        check("198.51.7.33", "ffff::", None);
    }

    #[test]
    fn interfaces_of_this_box_include_loopback_and_its_network() {
        let own = Interfaces::read().unwrap();
        assert!(own.addresses.contains(&ip("127.0.0.1")), "{own:?}");
        assert!(
            own.networks
                .iter()
                .any(|n| n.net == net("127.0.0.0/8") && n.interface == "lo"),
            "{own:?}"
        );
        let policy = Policy::new(vec![], own);
        assert_eq!(policy.check(ip("127.0.0.1")), Err(Refusal::ThisBox));
    }

    #[test]
    fn interfaces_public_networks_are_refused_unless_a_range_opens_them() {
        let own = on(&[("198.20.7.0/24", "eth0"), ("2a00:7:7:7::/64", "eth0")]);
        let policy = Policy::new(vec![], own.clone());
        let check = |addr: &str, want: Result<(), Refusal>| {
            assert_eq!(policy.check(ip(addr)), want, "{addr}");
        };
        check("198.20.7.20", Err(lan("198.20.7.0/24", "eth0")));
        check("198.20.7.0", Err(lan("198.20.7.0/24", "eth0")));
        check("198.20.7.255", Err(lan("198.20.7.0/24", "eth0")));
        check("2a00:7:7:7::20", Err(lan("2a00:7:7:7::/64", "eth0")));
        check(
            "2a00:7:7:7:ffff:ffff:ffff:ffff",
            Err(lan("2a00:7:7:7::/64", "eth0")),
        );
        // Just outside, public.
        check("198.20.6.255", Ok(()));
        check("198.20.8.0", Ok(()));
        check("2a00:7:7:8::1", Ok(()));
        // Embedded forms of a LAN address are judged by it.
        assert_eq!(
            policy.check(ip("::ffff:198.20.7.20")),
            Err(Refusal::Embedded {
                via: "mapped",
                inner: "198.20.7.20".parse().unwrap(),
                why: Box::new(lan("198.20.7.0/24", "eth0")),
            })
        );
        assert_eq!(
            policy
                .check(ip("64:ff9b::198.20.7.20"))
                .map_err(|r| r.kind()),
            Err("embedded")
        );
        // A more specific class keeps its name: a private LAN is private.
        let home = Policy::new(vec![], on(&[("192.168.1.0/24", "wlan0")]));
        assert_eq!(home.check(ip("192.168.1.7")), Err(Refusal::Private));
        // An allow-range opens what it contains, and only that.
        let opened = Policy::new(vec![net("198.20.7.16/28")], own);
        assert_eq!(opened.check(ip("198.20.7.20")), Ok(()));
        assert_eq!(
            opened.check(ip("198.20.7.40")),
            Err(lan("198.20.7.0/24", "eth0"))
        );
        assert_eq!(
            opened.check(ip("::ffff:198.20.7.20")),
            Ok(()),
            "the mapped form too"
        );
    }

    #[test]
    fn interfaces_refusal_line_names_the_network_and_the_way_to_open_it() {
        let refusal = lan("2a00:7:7:7::/64", "wlp2s0");
        assert_eq!(refusal.kind(), "own_network");
        assert_eq!(
            refusal.to_string(),
            "a neighbour on this box's own network 2a00:7:7:7::/64 (interface wlp2s0), \
             which only the administrator's allow_ranges opens"
        );
    }
}
