//! egressd and the sandbox user's nftables rules in real network namespaces
//! (root only: CI runs as root; anyone else gets a SKIPPED line). Each test
//! builds its own little internet with `tandem_tests::netlab::Lab`.
//!
//! - `the_sandbox_user_reaches_only_egressd`: sandbox/install.sh (twice)
//!   loads `tandem egress rules --apply` for `nobody`; as nobody a direct
//!   connection anywhere fails and `sbx_dropped` rises, through egressd's
//!   loopback listener with the chat's token it reaches the origin; root is
//!   not bound.
//! - `a_command_in_a_netns_gets_out_only_through_its_chat_socket`: curl in a
//!   namespace whose only way out is the socat shim to a chat's socket gets
//!   what the chat's preset allows, a second chat's socket speaks for that
//!   chat only, a direct connection fails, and the audit says so.
//! - `the_ssrf_matrix_through_the_chat_socket`: every refused range in every
//!   URL spelling, by CONNECT, plain HTTP and a disagreeing Host header, is
//!   refused and audited; the ranges' neighbours are not refused; a name with
//!   a private address is refused whole; a name that does not resolve is a
//!   502 `failed`; a rebinding name is looked up once and the connection goes
//!   to the address that was checked.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tandem_tests::harness::{bin_dir, wait_until};
use tandem_tests::netlab::{
    as_nobody, body_of, curl_args, ok, root_with_tools, run, serve_origin, status_of, text,
    through, Hits, Lab, Netns, Proc,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_user_reaches_only_egressd() {
    if !root_with_tools() {
        return;
    }
    let lab = Lab::start("").await;
    lab.preset("c_sbx", "all").await;
    // A listener of another daemon on this box (as chatd's or the engine's port).
    let other = lab.host.tcp_listener("127.0.0.1:0");
    let other_port = other.local_addr().unwrap().port();
    let hits: Hits = Arc::default();
    serve_origin(other, hits.clone());

    // sandbox/install.sh, twice: the user exists (nobody), the rules load,
    // and the second run leaves the same table.
    let install = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../sandbox/install.sh");
    let tandem = bin_dir().join("tandem");
    let home = lab.dir.path().to_str().unwrap().to_string();
    let config = lab.config.to_str().unwrap().to_string();
    for _ in 0..2 {
        let out = run(
            &lab.host.exec(&[
                install.to_str().unwrap(),
                "--user",
                "nobody",
                "--tandem",
                tandem.to_str().unwrap(),
            ]),
            &[("QSE_CONFIG", &config), ("HOME", &home)],
        )
        .await;
        assert!(out.status.success(), "install.sh: {}", text(&out));
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(said.contains("user nobody exists (uid 65534)"), "{said}");
        assert!(
            said.contains("nobody (uid 65534) may reach only 127.0.0.1:8017"),
            "{said}"
        );
    }
    let table = ok(&lab
        .host
        .exec(&["nft", "-j", "list", "table", "inet", "tandem_egress"]))
    .await;
    let table: Value = serde_json::from_str(&table).unwrap();
    let objects = table["nftables"].as_array().unwrap();
    let count = |kind: &str| objects.iter().filter(|o| o.get(kind).is_some()).count();
    assert_eq!(
        (
            count("table"),
            count("chain"),
            count("rule"),
            count("counter")
        ),
        (1, 1, 2, 1),
        "applied twice, the table is whole once: {table:#}"
    );

    let other_url = format!("http://127.0.0.1:{other_port}/direct");
    let other_url = other_url.as_str();

    // As nobody, a direct connection fails: to another port of this box
    // and to a public address alike, and each attempt is counted.
    let before = lab.host.dropped().await;
    let direct = run(&lab.host.exec(&as_nobody(curl_args(&[other_url]))), &[]).await;
    assert!(!direct.status.success(), "{}", text(&direct));
    let after_local = lab.host.dropped().await;
    assert!(
        after_local > before,
        "the counter rose: {before} → {after_local}"
    );
    let public = run(
        &lab.host
            .exec(&as_nobody(curl_args(&["http://203.0.113.10/direct"]))),
        &[],
    )
    .await;
    assert!(!public.status.success(), "{}", text(&public));
    let after_public = lab.host.dropped().await;
    assert!(after_public > after_local, "{after_local} → {after_public}");
    // A name lookup (UDP 53) is another way out: shut too.
    let lookup = run(
        &lab.host.exec(&as_nobody(vec![
            "sh",
            "-c",
            "echo query | socat -T1 - UDP:127.0.0.1:53",
        ])),
        &[],
    )
    .await;
    let _ = lookup; // socat may or may not report it; the counter says it.
    let after_udp = lab.host.dropped().await;
    assert!(after_udp > after_public, "{after_public} → {after_udp}");
    assert!(
        hits.lock().unwrap().is_empty() && lab.hits.lock().unwrap().is_empty(),
        "nothing reached a listener directly"
    );

    // Through egressd's loopback listener, with the chat's token, it works,
    // and the counter does not move.
    let token = tandem_shared::secrets::egress_token(
        &tandem_shared::secrets::Secret::new(lab.key.clone()),
        "c_sbx",
    );
    let user = format!("c_sbx:{token}");
    let user = user.as_str();
    let proxied = run(
        &lab.host.exec(&as_nobody(curl_args(&[
            "-x",
            "http://127.0.0.1:8017",
            "--proxy-user",
            user,
            "http://203.0.113.10/via-egressd",
        ]))),
        &[],
    )
    .await;
    assert_eq!(status_of(&proxied), 200, "{}", text(&proxied));
    assert!(
        String::from_utf8_lossy(&proxied.stdout)
            .contains("origin 203.0.113.10: GET /via-egressd HTTP/1.1"),
        "{}",
        text(&proxied)
    );
    assert_eq!(
        lab.host.dropped().await,
        after_udp,
        "the proxy port is not counted"
    );
    // A wrong token gets egressd's 407, still through the open port.
    let wrong = run(
        &lab.host.exec(&as_nobody(curl_args(&[
            "-x",
            "http://127.0.0.1:8017",
            "--proxy-user",
            "c_sbx:not-the-token",
            "http://203.0.113.10/",
        ]))),
        &[],
    )
    .await;
    assert_eq!(status_of(&wrong), 407, "{}", text(&wrong));

    // Root is not bound by the rules.
    let as_root = run(&lab.host.exec(&curl_args(&[other_url])), &[]).await;
    assert_eq!(status_of(&as_root), 200, "{}", text(&as_root));
    assert_eq!(lab.host.dropped().await, after_udp);

    let rows = lab.audit("c_sbx", None, 1).await;
    assert_eq!(rows[0]["verdict"], "allowed", "{rows:#?}");
    assert_eq!(rows[0]["address"], "203.0.113.10");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_in_a_netns_gets_out_only_through_its_chat_socket() {
    if !root_with_tools() {
        return;
    }
    let lab = Lab::start("").await;
    lab.preset("c_one", "off").await;
    lab.preset("c_two", "off").await;
    // The command's namespace: lo only; the shims are its way out, one
    // per chat socket (as the sandbox's shim is).
    let client = Netns::new("c").await;
    let mut shims = Vec::new();
    for (port, chat) in [(3128u16, "c_one"), (3129, "c_two")] {
        let listen = format!("TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr");
        let connect = format!("UNIX-CONNECT:{}", lab.socket(chat).display());
        let child = std::process::Command::new("ip")
            .args(["netns", "exec", &client.name, "socat", &listen, &connect])
            .stdin(Stdio::null())
            .spawn()
            .expect("socat starts");
        let pid = child.id();
        shims.push(Proc { child });
        // Listening: its namespace's /proc/PID/net/tcp has the port in state 0A.
        let needle = format!("0100007F:{port:04X} 00000000:0000 0A");
        wait_until(
            &format!("the shim on {port}"),
            Duration::from_secs(5),
            || {
                let needle = needle.clone();
                async move {
                    std::fs::read_to_string(format!("/proc/{pid}/net/tcp"))
                        .ok()
                        .filter(|t| t.contains(&needle))
                        .map(|_| ())
                }
            },
        )
        .await
        .unwrap();
    }
    let curl = |proxy: &'static str, extra: &'static [&'static str], url: &'static str| {
        let mut args = client.exec(&curl_args(&["-x", proxy]));
        args.extend_from_slice(extra);
        args.push(url);
        args
    };

    // Preset off: 403 and the one line why, for plain HTTP and for CONNECT.
    let off = run(
        &curl("http://127.0.0.1:3128", &[], "http://203.0.113.10/off"),
        &[],
    )
    .await;
    assert_eq!(status_of(&off), 403, "{}", text(&off));
    let said = body_of(&off);
    assert!(
        said.starts_with("egress: 203.0.113.10:80 is not allowed for this chat (preset off)"),
        "{said}"
    );
    assert_eq!(said.trim_end().lines().count(), 1, "one line: {said}");
    let tunnel_off = run(
        &curl("http://127.0.0.1:3128", &["-p"], "http://203.0.113.10/off"),
        &[],
    )
    .await;
    assert!(!tunnel_off.status.success());
    assert!(
        String::from_utf8_lossy(&tunnel_off.stderr).contains("403"),
        "{}",
        text(&tunnel_off)
    );

    // Preset all: the origin's body, by plain HTTP and through a tunnel.
    lab.preset("c_one", "all").await;
    let all = run(
        &curl("http://127.0.0.1:3128", &[], "http://203.0.113.10/all"),
        &[],
    )
    .await;
    assert_eq!(status_of(&all), 200, "{}", text(&all));
    assert!(body_of(&all).starts_with("origin 203.0.113.10: GET /all HTTP/1.1"));
    let tunnel = run(
        &curl(
            "http://127.0.0.1:3128",
            &["-p"],
            "http://203.0.113.11/tunnel",
        ),
        &[],
    )
    .await;
    assert_eq!(status_of(&tunnel), 200, "{}", text(&tunnel));
    assert!(body_of(&tunnel).starts_with("origin 203.0.113.11: GET /tunnel HTTP/1.1"));

    // The other chat's socket speaks for the other chat: still off.
    let two = run(
        &curl("http://127.0.0.1:3129", &[], "http://203.0.113.10/two"),
        &[],
    )
    .await;
    assert_eq!(status_of(&two), 403, "{}", text(&two));

    // No way around the socket: the namespace has no route out.
    let direct = run(
        &client.exec(&curl_args(&["http://203.0.113.10/direct"])),
        &[],
    )
    .await;
    assert!(!direct.status.success(), "{}", text(&direct));
    assert_eq!(
        direct.status.code(),
        Some(7),
        "curl could not connect: {}",
        text(&direct)
    );

    let hits = lab.hits.lock().unwrap().clone();
    assert_eq!(
        hits,
        vec![
            "203.0.113.10 GET /all HTTP/1.1".to_string(),
            "203.0.113.11 GET /tunnel HTTP/1.1".to_string()
        ],
        "only what the presets allowed reached an origin"
    );

    // The audit: chat one refused twice, then allowed twice; chat two refused.
    let one = lab.audit("c_one", None, 4).await;
    let verdicts = |rows: &[Value], v: &str| rows.iter().filter(|r| r["verdict"] == v).count();
    assert_eq!(verdicts(&one, "refused"), 2, "{one:#?}");
    assert_eq!(verdicts(&one, "allowed"), 2, "{one:#?}");
    for row in &one {
        assert_eq!(row["port"], 80);
        assert!(!row["reason"].as_str().unwrap_or("").is_empty(), "{row}");
    }
    let allowed = one
        .iter()
        .find(|r| r["verdict"] == "allowed" && r["host"] == "203.0.113.10")
        .expect("the plain request's row");
    assert!(allowed["bytes_down"].as_u64().unwrap_or(0) > 0, "{allowed}");
    let two = lab.audit("c_two", None, 1).await;
    assert_eq!(two[0]["verdict"], "refused");
    assert_eq!(two[0]["host"], "203.0.113.10");
    drop(shims);
}

/// Every refused range of docs/egress.md, in the URL spellings that name it.
const REFUSED: &[&str] = &[
    // loopback, in every spelling a URL allows
    "127.0.0.1",
    "2130706433",
    "0177.0.0.1",
    "0x7f.0.0.1",
    "0X7F.0.0.1",
    "0x7f000001",
    "017700000001",
    "127.1",
    "0x7f.1",
    "127.0.0.1.",
    "127.0.0.2",
    "localhost",
    "[::1]",
    "[0:0:0:0:0:0:0:1]",
    // IPv4 inside IPv6: mapped, compatible, NAT64, 6to4
    "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]",
    "[::ffff:10.0.0.1]",
    "[64:ff9b::7f00:1]",
    "[64:ff9b::a00:1]",
    // NAT64 local-use, Teredo (the client address inverted) and ISATAP,
    // each carrying a private address.
    "[64:ff9b:1::a00:1]",
    "[2001:0:808:808::f5ff:fffe]",
    "[2606:4700::5efe:a01:203]",
    "[2002:7f00:1::]",
    // unspecified, this network, broadcast, multicast
    "[::]",
    "0.0.0.0",
    "0",
    "0.1.2.3",
    "255.255.255.255",
    "224.0.0.1",
    "[ff02::1]",
    // RFC 1918, CGNAT, link-local, cloud metadata
    "10.0.0.1",
    "10.255.255.255",
    "172.16.0.1",
    "172.31.255.255",
    "192.168.1.1",
    "100.64.0.1",
    "100.127.255.255",
    "169.254.169.254",
    "metadata.google.internal",
    "[fd00:ec2::254]",
    "[fe80::1]",
    "[fc00::1]",
    // IETF, documentation, benchmarking, reserved
    "192.0.0.1",
    "192.0.2.1",
    "198.51.100.1",
    "198.18.0.1",
    "198.19.255.255",
    "240.0.0.1",
    "[2001:db8::1]",
    "[100::1]",
    "[fec0::1]",
    // a name answering a public and a private address: refused whole
    "mixed.test",
];

/// Just outside refused ranges: the policy lets them through (there is no
/// route to them here, so they then fail to connect).
const NEIGHBOURS: &[&str] = &[
    "172.15.255.255",
    "172.32.0.0",
    "100.63.255.255",
    "100.128.0.0",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ssrf_matrix_through_the_chat_socket() {
    if !root_with_tools() {
        return;
    }
    let lab = Lab::start("").await;
    for chat in ["c_ssrf", "c_edge", "c_names"] {
        lab.preset(chat, "all").await;
    }

    // Every refused range, by CONNECT, by plain HTTP, and with a Host header
    // that names it while the URL names a public origin.
    let ssrf = lab.socket("c_ssrf");
    let mut expected = 0;
    for host in REFUSED {
        let connect = format!("CONNECT {host}:80 HTTP/1.1\r\nHost: {host}:80\r\n\r\n");
        let plain = format!("GET http://{host}/ HTTP/1.1\r\nHost: {host}\r\n\r\n");
        for request in [connect, plain] {
            let (status, answer) = through(&ssrf, &request).await;
            assert_eq!(status, 403, "{request:?} → {answer}");
            let body = answer.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
            assert!(
                body.starts_with("egress: ") && body.trim_end().lines().count() == 1,
                "one line why: {request:?} → {answer}"
            );
            expected += 1;
        }
        let smuggled = format!("GET http://203.0.113.10/ HTTP/1.1\r\nHost: {host}\r\n\r\n");
        let (status, answer) = through(&ssrf, &smuggled).await;
        assert_eq!(
            status, 403,
            "a disagreeing Host header is refused: {smuggled:?} → {answer}"
        );
        assert!(answer.contains("Host header"), "{answer}");
        expected += 1;
    }
    let rows = lab.audit("c_ssrf", Some("refused"), expected).await;
    assert!(
        rows.iter()
            .all(|r| !r["reason"].as_str().unwrap_or("").is_empty()),
        "every row says why"
    );
    let all = lab.audit("c_ssrf", None, expected).await;
    assert!(
        all.iter().all(|r| r["verdict"] == "refused"),
        "nothing but refusals"
    );
    for (host, reason) in [
        ("127.0.0.1", "an address of this box"),
        ("127.0.0.2", "loopback"),
        ("10.0.0.1", "private"),
        ("169.254.169.254", "metadata"),
    ] {
        assert!(
            rows.iter().any(|r| r["host"] == host
                && r["reason"]
                    .as_str()
                    .unwrap_or("")
                    .to_lowercase()
                    .contains(reason)),
            "a row for {host} says {reason}: {rows:#?}"
        );
    }
    let mixed = rows
        .iter()
        .find(|r| r["host"] == "mixed.test")
        .expect("mixed.test's row");
    assert_eq!(mixed["address"], "10.0.0.5", "{mixed}");
    assert!(
        lab.hits.lock().unwrap().is_empty(),
        "no refused request reached an origin"
    );

    // The neighbours pass the policy: not a 403, then no route (502) or a
    // timeout (504), audited `failed`. So does a name that does not resolve.
    let edge = lab.socket("c_edge");
    let mut failed = 0;
    for host in NEIGHBOURS.iter().chain(["nx.test"].iter()) {
        for request in [
            format!("CONNECT {host}:80 HTTP/1.1\r\n\r\n"),
            format!("GET http://{host}/ HTTP/1.1\r\nHost: {host}\r\n\r\n"),
        ] {
            let (status, answer) = through(&edge, &request).await;
            assert_ne!(status, 403, "{request:?} passes the policy: {answer}");
            assert!(status == 502 || status == 504, "{request:?} → {answer}");
            if *host == "nx.test" {
                assert_eq!(status, 502, "{answer}");
                assert!(answer.contains("does not resolve"), "{answer}");
            }
            failed += 1;
        }
    }
    let rows = lab.audit("c_edge", None, failed).await;
    assert!(
        rows.iter().all(|r| r["verdict"] == "failed"),
        "failures, not refusals: {rows:#?}"
    );

    // Names: a public-only name reaches the origin; a rebinding name is
    // looked up once and the connection goes to the address checked.
    let names = lab.socket("c_names");
    let (status, answer) = through(
        &names,
        "GET http://public.test/hosts HTTP/1.1\r\nHost: public.test\r\n\r\n",
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer.contains("origin 203.0.113.10: GET /hosts HTTP/1.1"),
        "{answer}"
    );
    let (status, answer) = through(&names, "CONNECT public.test:80 HTTP/1.1\r\n\r\n").await;
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer.contains("origin 203.0.113.10: GET /tunnel HTTP/1.1"),
        "{answer}"
    );

    let (status, answer) = through(
        &names,
        "GET http://rebind.test/first HTTP/1.1\r\nHost: rebind.test\r\n\r\n",
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer.contains("origin 203.0.113.11: GET /first HTTP/1.1"),
        "{answer}"
    );
    assert_eq!(
        lab.dns.lock().unwrap().get("rebind.test").copied(),
        Some(1),
        "one lookup for one request"
    );
    // The responder now says private: the next request is refused.
    let (status, answer) = through(
        &names,
        "GET http://rebind.test/second HTTP/1.1\r\nHost: rebind.test\r\n\r\n",
    )
    .await;
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("10.0.0.5"), "{answer}");
    assert_eq!(lab.dns.lock().unwrap().get("rebind.test").copied(), Some(2));

    let rows = lab.audit("c_names", None, 4).await;
    let rebound: Vec<_> = rows.iter().filter(|r| r["host"] == "rebind.test").collect();
    assert_eq!(rebound.len(), 2, "{rows:#?}");
    assert!(rebound
        .iter()
        .any(|r| r["verdict"] == "allowed" && r["address"] == "203.0.113.11"));
    assert!(rebound
        .iter()
        .any(|r| r["verdict"] == "refused" && r["address"] == "10.0.0.5"));
    let origin_hits = lab.hits.lock().unwrap().clone();
    assert_eq!(
        origin_hits,
        vec![
            "203.0.113.10 GET /hosts HTTP/1.1".to_string(),
            "203.0.113.10 GET /tunnel HTTP/1.1".to_string(),
            "203.0.113.11 GET /first HTTP/1.1".to_string(),
        ]
    );
}
