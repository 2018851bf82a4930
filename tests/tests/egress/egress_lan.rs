//! egressd on a LAN whose neighbours have public addresses, in network
//! namespaces (root only, as egress_netns; `tandem_tests::netlab`'s lab with
//! its LAN: the box at 198.20.7.1/24 and 2a00:7:7:7::1/64, neighbours at .20
//! and ::20 with an HTTP origin each). On a dual-stack LAN every router, NAS
//! and printer has a global IPv6 address on the box's own prefix, and some
//! LANs use public IPv4: no address class refuses them, the box's own
//! networks do.
//!
//! - `lan_neighbours_with_public_addresses_are_refused`: a chat with preset
//!   `all` gets a 403 and one line naming the network for each neighbour, by
//!   CONNECT, by plain HTTP and by a name that resolves to it, each with an
//!   audit row; nothing reaches a neighbour; a prefix the box gains after
//!   egressd started is refused from the very next request.
//! - `an_allow_range_opens_the_lan_but_never_the_box`: an administrator's
//!   allow-ranges for the two prefixes let the same requests reach the
//!   neighbours; the box's own addresses on the LAN stay refused.

use serde_json::Value;
use tandem_tests::netlab::{
    root_with_tools, through, Lab, Options, LAN_NEIGHBOUR_V4, LAN_NEIGHBOUR_V6,
};

/// The neighbours as a request names them: (host, the address it is, the
/// box's network it is on).
fn neighbours() -> Vec<(String, &'static str, &'static str)> {
    vec![
        (
            LAN_NEIGHBOUR_V4.to_string(),
            LAN_NEIGHBOUR_V4,
            "198.20.7.0/24",
        ),
        (
            format!("[{LAN_NEIGHBOUR_V6}]"),
            LAN_NEIGHBOUR_V6,
            "2a00:7:7:7::/64",
        ),
        (
            "nas.lan.test".to_string(),
            LAN_NEIGHBOUR_V4,
            "198.20.7.0/24",
        ),
        (
            "printer.lan.test".to_string(),
            LAN_NEIGHBOUR_V6,
            "2a00:7:7:7::/64",
        ),
    ]
}

/// CONNECT and plain HTTP for `host`.
fn requests(host: &str) -> [String; 2] {
    [
        format!("CONNECT {host}:80 HTTP/1.1\r\nHost: {host}:80\r\n\r\n"),
        format!("GET http://{host}/ HTTP/1.1\r\nHost: {host}\r\n\r\n"),
    ]
}

/// The body of a proxy answer.
fn body(answer: &str) -> &str {
    answer.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

/// A 403 whose one line names the address and the box's network.
fn assert_refused_as_lan(request: &str, status: u16, answer: &str, address: &str, net: &str) {
    assert_eq!(status, 403, "{request:?} → {answer}");
    let said = body(answer);
    assert_eq!(said.trim_end().lines().count(), 1, "one line: {answer}");
    let want = format!("egress: {address} is a neighbour on this box's own network {net}");
    assert!(
        said.starts_with(&want),
        "{request:?}: {said:?}, not {want:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lan_neighbours_with_public_addresses_are_refused() {
    if !root_with_tools() {
        return;
    }
    let lab = Lab::start_with(Options {
        lan: true,
        ..Options::default()
    })
    .await;
    let lan = lab.lan.as_ref().expect("the lab has its LAN");
    lab.preset("c_lan", "all").await;
    let socket = lab.socket("c_lan");

    // The origins' network, opened by the lab's allow-range, is reached: the
    // chat gets out, only not to the LAN.
    let (status, answer) = through(&socket, &requests("203.0.113.10")[1]).await;
    assert_eq!(status, 200, "{answer}");

    let mut refused = 0;
    for (host, address, net) in neighbours() {
        for request in requests(&host) {
            let (status, answer) = through(&socket, &request).await;
            assert_refused_as_lan(&request, status, &answer, address, net);
            refused += 1;
        }
    }
    let rows = lab.audit("c_lan", Some("refused"), refused).await;
    for (host, address, _) in neighbours() {
        let theirs: Vec<&Value> = rows
            .iter()
            .filter(|r| r["host"] == host.trim_matches(['[', ']']))
            .collect();
        assert_eq!(theirs.len(), 2, "two rows for {host}: {rows:#?}");
        for row in theirs {
            assert_eq!(row["address"], address, "{row}");
            assert_eq!(row["port"], 80, "{row}");
            let reason = row["reason"].as_str().unwrap_or("");
            assert!(reason.contains("own network"), "{row}");
        }
    }

    // A prefix the box gains while egressd runs (a second LAN, a new
    // router's prefix): refused from the very next request, without a wait.
    lan.add(&lab.host, "198.20.8.1/24", "198.20.8.20").await;
    lan.add(&lab.host, "2a00:7:7:8::1/64", "2a00:7:7:8::20")
        .await;
    for (host, address, net) in [
        ("198.20.8.20", "198.20.8.20", "198.20.8.0/24"),
        ("[2a00:7:7:8::20]", "2a00:7:7:8::20", "2a00:7:7:8::/64"),
    ] {
        for request in requests(host) {
            let (status, answer) = through(&socket, &request).await;
            assert_refused_as_lan(&request, status, &answer, address, net);
        }
    }
    lab.audit("c_lan", Some("refused"), refused + 4).await;
    assert!(
        lan.hits.lock().unwrap().is_empty(),
        "no request reached a neighbour: {:?}",
        lan.hits.lock().unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allow_range_opens_the_lan_but_never_the_box() {
    if !root_with_tools() {
        return;
    }
    let lab = Lab::start_with(Options {
        lan: true,
        allow_ranges: &["203.0.113.0/24", "198.20.7.0/24", "2a00:7:7:7::/64"],
        ..Options::default()
    })
    .await;
    let lan = lab.lan.as_ref().expect("the lab has its LAN");
    lab.preset("c_open", "all").await;
    let socket = lab.socket("c_open");

    let mut reached = Vec::new();
    for (host, address, _) in neighbours() {
        let [connect, plain] = requests(&host);
        let (status, answer) = through(&socket, &connect).await;
        assert_eq!(status, 200, "{connect:?} → {answer}");
        assert!(
            answer.contains(&format!("origin {address}: GET /tunnel HTTP/1.1")),
            "{answer}"
        );
        let (status, answer) = through(&socket, &plain).await;
        assert_eq!(status, 200, "{plain:?} → {answer}");
        assert!(
            answer.contains(&format!("origin {address}: GET / HTTP/1.1")),
            "{answer}"
        );
        reached.push(format!("{address} GET /tunnel HTTP/1.1"));
        reached.push(format!("{address} GET / HTTP/1.1"));
    }
    assert_eq!(*lan.hits.lock().unwrap(), reached);

    // The box's own addresses on the LAN stay shut inside the range.
    for address in ["198.20.7.1", "[2a00:7:7:7::1]"] {
        for request in requests(address) {
            let (status, answer) = through(&socket, &request).await;
            assert_eq!(status, 403, "{request:?} → {answer}");
            assert!(
                body(&answer).contains("is an address of this box"),
                "{answer}"
            );
        }
    }
    let rows = lab.audit("c_open", None, reached.len() + 4).await;
    let allowed = rows.iter().filter(|r| r["verdict"] == "allowed").count();
    assert_eq!(allowed, reached.len(), "{rows:#?}");
}
