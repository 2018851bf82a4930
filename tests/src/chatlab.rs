//! chatd in a little internet (`netlab`'s namespaces, root only), for the
//! MCP connectors' address rules: what a name resolves to is the test's
//! to say, and a server at a public and one at a private address each see
//! what reached them.
//!
//! [`ChatLab::start`] builds the box's namespace (lo, and 10.0.0.1/24
//! towards the servers, with a route to the public address through them)
//! and the servers' namespace (10.0.0.5/24, a private address, and
//! 198.20.8.10/32, one netpolicy calls public: the lab's 203.0.113.0/24 is
//! a documentation range, which chatd never opens), a [`FakeMcp`] on port
//! 80 of each. chatd runs in the box under `netlab::in_box` (the lab's
//! `/etc/hosts`, `/etc/resolv.conf` naming a DNS responder of this test at
//! 127.0.0.1 of the box, whose answers [`Dns::set`] decides). The test
//! reaches chatd's API, and chatd the test's engine-sim, by loopback
//! forwards between the test's namespace and the box's (same ports on both
//! sides). Everything goes away on drop, also when a test fails.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use tandem_shared::sync::lock;

use crate::harness::{Chatd, Sim};
use crate::mcpservers::FakeMcp;
use crate::netlab::{self, ok, Netns};

/// The server netpolicy calls public (outside every refused class).
pub const PUBLIC: Ipv4Addr = Ipv4Addr::new(198, 20, 8, 10);
/// The server on a private (RFC 1918) address.
pub const PRIVATE: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 5);

/// The box with chatd, the two servers, the DNS and the forwards. Fields
/// drop in order: chatd first (SIGTERM), the namespaces last.
pub struct ChatLab {
    pub chatd: Chatd,
    /// The server at [`PUBLIC`]:80.
    pub public: FakeMcp,
    /// The server at [`PRIVATE`]:80.
    pub private: FakeMcp,
    pub dns: Dns,
    _forwards: Vec<Forward>,
    pub host: Netns,
    _servers: Netns,
    _etc: tempfile::TempDir,
}

impl ChatLab {
    /// The namespaces, the servers, the DNS (every name NXDOMAIN until set)
    /// and chatd against `sim` with `env`, once its `/health` answers.
    pub async fn start(sim: &Sim, env: &[(&str, &str)]) -> anyhow::Result<ChatLab> {
        let host = Netns::new("c").await;
        let servers = Netns::new("s").await;
        ok(&[
            "ip",
            "link",
            "add",
            "c0",
            "netns",
            &host.name,
            "type",
            "veth",
            "peer",
            "name",
            "c1",
            "netns",
            &servers.name,
        ])
        .await;
        let public = format!("{PUBLIC}/32");
        let private = format!("{PRIVATE}/24");
        for (ns, dev, addrs) in [
            (&host, "c0", &["10.0.0.1/24"][..]),
            (&servers, "c1", &[private.as_str(), public.as_str()][..]),
        ] {
            for addr in addrs {
                ok(&["ip", "-n", &ns.name, "addr", "add", addr, "dev", dev]).await;
            }
            ok(&["ip", "-n", &ns.name, "link", "set", dev, "up"]).await;
        }
        // Not on a network of the box's own: netpolicy would call it that.
        let via = PRIVATE.to_string();
        ok(&["ip", "-n", &host.name, "route", "add", &public, "via", &via]).await;
        let public = FakeMcp::start_on(servers.tcp_listener(&format!("{PUBLIC}:80")), None)?;
        let private = FakeMcp::start_on(servers.tcp_listener(&format!("{PRIVATE}:80")), None)?;
        let dns = Dns::default();
        let table = dns.clone();
        netlab::serve_dns_by(host.udp_socket("127.0.0.1:53"), move |name, qtype| {
            table.answer(name, qtype)
        });

        let etc = tempfile::tempdir()?;
        for (file, text) in [
            ("hosts", "127.0.0.1 localhost\n::1 localhost\n"),
            (
                "resolv.conf",
                "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n",
            ),
            ("nsswitch.conf", "hosts: files dns\n"),
        ] {
            std::fs::write(etc.path().join(file), text)?;
        }
        let forwards = vec![
            Forward::out_of(&host, sim.port)?,
            Forward::into(&host).await?,
        ];
        let port = forwards[1].port;
        let launcher = netlab::in_box(&host, etc.path());
        let chatd = Chatd::start_launched(&sim.url(), env, launcher, port).await?;
        Ok(ChatLab {
            chatd,
            public,
            private,
            dns,
            _forwards: forwards,
            host,
            _servers: servers,
            _etc: etc,
        })
    }
}

/// The DNS responder's table: per name, its answers in turn (each A
/// question takes the next, the last one repeats), and the A questions
/// asked.
#[derive(Clone, Default)]
pub struct Dns(Arc<Mutex<HashMap<String, Named>>>);

#[derive(Default)]
struct Named {
    answers: Vec<Ipv4Addr>,
    asked: usize,
}

impl Dns {
    /// `name` answers `answers[0]` to the next A question, `answers[1]` to
    /// the one after, and so on, the last one from then on; its count of
    /// questions starts again.
    pub fn set(&self, name: &str, answers: &[Ipv4Addr]) {
        lock(&self.0).insert(
            name.to_string(),
            Named {
                answers: answers.to_vec(),
                asked: 0,
            },
        );
    }

    /// The A questions `name` was asked since it was last set.
    pub fn asked(&self, name: &str) -> usize {
        lock(&self.0).get(name).map_or(0, |n| n.asked)
    }

    fn answer(&self, name: &str, qtype: u16) -> Option<Vec<Ipv4Addr>> {
        let mut table = lock(&self.0);
        let named = table.get_mut(name)?;
        if qtype != netlab::A {
            return Some(Vec::new());
        }
        let at = named.asked.min(named.answers.len().saturating_sub(1));
        named.asked += 1;
        Some(named.answers.get(at).into_iter().copied().collect())
    }
}

/// A loopback port forwarded between the test's namespace and the box's,
/// the same number on both sides; its task ends on drop.
struct Forward {
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Forward {
    /// A listener in the box at 127.0.0.1:`port` leading to 127.0.0.1:`port`
    /// of the test (chatd to the engine).
    fn out_of(ns: &Netns, port: u16) -> anyhow::Result<Forward> {
        let listener = ns.tcp_listener(&format!("127.0.0.1:{port}"));
        let task = tokio::spawn(async move {
            while let Ok((mut inside, _)) = listener.accept().await {
                tokio::spawn(async move {
                    if let Ok(mut outside) =
                        tokio::net::TcpStream::connect(("127.0.0.1", port)).await
                    {
                        let _ = tokio::io::copy_bidirectional(&mut inside, &mut outside).await;
                    }
                });
            }
        });
        Ok(Forward { port, task })
    }

    /// A free loopback port of the test leading to the same port in the
    /// box (the test to chatd's API).
    async fn into(ns: &Netns) -> anyhow::Result<Forward> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let file = Arc::new(
            std::fs::File::open(format!("/run/netns/{}", ns.name))
                .context("the box's namespace file")?,
        );
        let task = tokio::spawn(async move {
            while let Ok((mut outside, _)) = listener.accept().await {
                let file = file.clone();
                tokio::spawn(async move {
                    let made = tokio::task::spawn_blocking(move || connect_inside(&file, port))
                        .await
                        .ok()
                        .and_then(Result::ok);
                    let Some(inside) = made else {
                        return;
                    };
                    if let Ok(mut inside) = tokio::net::TcpStream::from_std(inside) {
                        let _ = tokio::io::copy_bidirectional(&mut outside, &mut inside).await;
                    }
                });
            }
        });
        Ok(Forward { port, task })
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A connection to 127.0.0.1:`port` of the namespace `file` names, made by
/// a thread that joined it (the socket stays the namespace's).
fn connect_inside(file: &std::fs::File, port: u16) -> std::io::Result<std::net::TcpStream> {
    let file = file.try_clone()?;
    std::thread::spawn(move || {
        nix::sched::setns(file.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)?;
        let stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
        stream.set_nonblocking(true)?;
        Ok(stream)
    })
    .join()
    .unwrap_or_else(|_| Err(std::io::Error::other("the namespace thread panicked")))
}
