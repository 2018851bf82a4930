//! Every refused class at its first, middle and last address, embedded IPv4,
//! every URL spelling of loopback, metadata, allow-ranges and own networks.

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
