//! A little internet in network namespaces, for egressd's tests and
//! chatd's (`chatlab`) (root only: CI runs as root; `root_with_tools`
//! skips them for anyone else).
//!
//! [`Lab::start`] builds a namespace for egressd (the "box", with `lo` and a
//! veth end at 203.0.113.1/24), a namespace of "public" origins at
//! 203.0.113.10 and .11 (HTTP servers of the test process, bound there by a
//! thread that joined the namespace), and, with [`Options::lan`], the box's
//! LAN ([`Lan`]). egressd runs in a mount namespace of its own too, with a
//! test `/etc/hosts`, `/etc/resolv.conf` (a DNS responder of this test) and
//! `/etc/nsswitch.conf` bound over the real ones. The host's own network and
//! files are never touched; namespaces and processes go away on drop, also
//! when a test fails.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::harness::{bin_dir, wait_until};
use crate::needs;
use anyhow::Context as _;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// A bound on every outside command (curl, nft, ip …).
const COMMAND_BOUND: Duration = Duration::from_secs(20);

/// Whether this process may build namespaces: root, with the tools the lab
/// runs. If not, the test is skipped or, in CI, fails (`needs`).
#[track_caller]
pub fn root_with_tools() -> bool {
    needs::root("network namespaces and nftables need root")
        && needs::tools(&[
            ("ip", "iproute2"),
            ("nft", "nftables"),
            ("unshare", "util-linux"),
            ("setpriv", "util-linux"),
            ("socat", "socat"),
            ("curl", "curl"),
            ("timeout", "coreutils"),
        ])
}

/// Runs a command with a bound; its output.
pub async fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = tokio::process::Command::new("timeout");
    command
        .args(["-s", "KILL", &COMMAND_BOUND.as_secs().to_string()])
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    for (k, v) in env {
        command.env(k, v);
    }
    command
        .output()
        .await
        .unwrap_or_else(|e| panic!("running {args:?}: {e}"))
}

/// Runs a command that must succeed; its stdout.
pub async fn ok(args: &[&str]) -> String {
    let out = run(args, &[]).await;
    assert!(out.status.success(), "{args:?}: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn text(out: &Output) -> String {
    format!(
        "{} (stdout {:?}, stderr {:?})",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// A named network namespace with `lo` up; deleted (and whatever still runs
/// in it killed) on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub async fn new(tag: &str) -> Netns {
        let name = format!(
            "tdm{}x{}{tag}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::SeqCst)
        );
        ok(&["ip", "netns", "add", &name]).await;
        let ns = Netns { name };
        ok(&["ip", "-n", &ns.name, "link", "set", "lo", "up"]).await;
        ns
    }

    /// `ip netns exec NAME args…` (argv for [`run`]).
    pub fn exec<'a>(&'a self, args: &[&'a str]) -> Vec<&'a str> {
        let mut all = vec!["ip", "netns", "exec", self.name.as_str()];
        all.extend_from_slice(args);
        all
    }

    /// Runs `f` on a thread that joined this namespace: sockets it makes
    /// belong to the namespace, wherever they are used later.
    pub fn inside<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let file =
            std::fs::File::open(format!("/run/netns/{}", self.name)).expect("the namespace's file");
        std::thread::spawn(move || {
            nix::sched::setns(file.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
                .expect("joining the namespace");
            f()
        })
        .join()
        .expect("the namespace thread")
    }

    pub fn tcp_listener(&self, addr: &str) -> tokio::net::TcpListener {
        let addr: SocketAddr = addr.parse().unwrap();
        let listener = self.inside(move || {
            let l = std::net::TcpListener::bind(addr).expect("binding in the namespace");
            l.set_nonblocking(true).unwrap();
            l
        });
        tokio::net::TcpListener::from_std(listener).unwrap()
    }

    pub fn udp_socket(&self, addr: &str) -> tokio::net::UdpSocket {
        let addr: SocketAddr = addr.parse().unwrap();
        let socket = self.inside(move || {
            let s = std::net::UdpSocket::bind(addr).expect("binding in the namespace");
            s.set_nonblocking(true).unwrap();
            s
        });
        tokio::net::UdpSocket::from_std(socket).unwrap()
    }

    /// The packets counted in `sbx_dropped` in this namespace.
    pub async fn dropped(&self) -> u64 {
        let out = ok(&self.exec(&[
            "nft",
            "-j",
            "list",
            "counter",
            "inet",
            "tandem_egress",
            "sbx_dropped",
        ]))
        .await;
        let json: Value = serde_json::from_str(&out).expect("nft -j gives JSON");
        json["nftables"]
            .as_array()
            .and_then(|objects| {
                objects
                    .iter()
                    .find_map(|o| o["counter"]["packets"].as_u64())
            })
            .unwrap_or_else(|| panic!("no counter in {out}"))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let pids = std::process::Command::new("ip")
            .args(["netns", "pids", &self.name])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        for pid in pids
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// A process of the test, killed and reaped on drop.
pub struct Proc {
    pub child: std::process::Child,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the origins saw: "address request-line".
pub type Hits = Arc<Mutex<Vec<String>>>;

/// An HTTP origin: reads a request head, answers `origin <its address>: <request line>`.
pub fn serve_origin(listener: tokio::net::TcpListener, hits: Hits) {
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let hits = hits.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65536 {
                    match tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await {
                        Ok(Ok(n)) if n > 0 => head.extend_from_slice(&buf[..n]),
                        _ => return,
                    }
                }
                let line = String::from_utf8_lossy(&head)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_string();
                let me = s
                    .local_addr()
                    .map(|a| a.ip().to_string())
                    .unwrap_or_default();
                hits.lock().unwrap().push(format!("{me} {line}"));
                let body = format!("origin {me}: {line}\n");
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(answer.as_bytes()).await;
                let _ = s.shutdown().await;
            });
        }
    });
}

/// A DNS responder (UDP) for egressd's namespace: `rebind.test` answers
/// 203.0.113.11 the first time and 10.0.0.5 after; every other name is
/// NXDOMAIN; AAAA questions get no answer. Counts the A questions per name.
pub fn serve_dns(socket: tokio::net::UdpSocket, asked: Arc<Mutex<HashMap<String, usize>>>) {
    serve_dns_by(socket, move |name, qtype| {
        if qtype != A {
            return (name == "rebind.test").then(Vec::new);
        }
        let mut asked = asked.lock().unwrap();
        let count = asked.entry(name.to_string()).or_insert(0);
        *count += 1;
        (name == "rebind.test").then(|| {
            vec![if *count == 1 {
                Ipv4Addr::new(203, 0, 113, 11)
            } else {
                Ipv4Addr::new(10, 0, 0, 5)
            }]
        })
    });
}

/// The type of a DNS question for an IPv4 address.
pub const A: u16 = 1;

/// A DNS responder (UDP): `answer` is asked each question's name and
/// type and gives the name's addresses (`None`: NXDOMAIN); only an [`A`]
/// question gets them, any other none.
pub fn serve_dns_by(
    socket: tokio::net::UdpSocket,
    answer: impl Fn(&str, u16) -> Option<Vec<Ipv4Addr>> + Send + 'static,
) {
    tokio::spawn(async move {
        let mut buf = [0u8; 1500];
        while let Ok((n, from)) = socket.recv_from(&mut buf).await {
            let Some((name, qtype, question_end)) = dns_question(&buf[..n]) else {
                continue;
            };
            let found = answer(&name, qtype);
            let nxdomain = found.is_none();
            let answers = found.filter(|_| qtype == A).unwrap_or_default();
            let mut reply = Vec::with_capacity(question_end + 16 * answers.len());
            reply.extend_from_slice(&buf[0..2]); // the id
            let rcode = if nxdomain { 3 } else { 0 };
            reply.extend_from_slice(&[0x81, 0x80 | rcode]); // answer, recursion desired + available
            reply.extend_from_slice(&[0, 1, 0, answers.len() as u8, 0, 0, 0, 0]);
            reply.extend_from_slice(&buf[12..question_end]);
            for ip in answers {
                // The name by pointer to the question, A, IN, TTL 0, 4 bytes.
                reply.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4]);
                reply.extend_from_slice(&ip.octets());
            }
            let _ = socket.send_to(&reply, from).await;
        }
    });
}

/// The first question of a DNS query: (name, qtype, where the question ends).
fn dns_question(packet: &[u8]) -> Option<(String, u16, usize)> {
    if packet.len() < 12 || packet[4..6] != [0, 1] {
        return None;
    }
    let mut at = 12;
    let mut labels = Vec::new();
    loop {
        let len = *packet.get(at)? as usize;
        at += 1;
        if len == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(packet.get(at..at + len)?).to_ascii_lowercase());
        at += len;
    }
    let qtype = u16::from_be_bytes([*packet.get(at)?, *packet.get(at + 1)?]);
    Some((labels.join("."), qtype, at + 4))
}

/// The egressd box: its namespace (lo, and 203.0.113.1/24 towards the
/// origins), the origins' namespace, the LAN when asked for, egressd itself,
/// its API.
pub struct Lab {
    pub dir: tempfile::TempDir,
    pub host: Netns,
    _origins: Netns,
    pub lan: Option<Lan>,
    egressd: Option<Proc>,
    pub api: PathBuf,
    pub config: PathBuf,
    pub key: String,
    pub hits: Hits,
    pub dns: Arc<Mutex<HashMap<String, usize>>>,
}

/// How [`Lab::start_with`] builds the box.
pub struct Options<'a> {
    /// More lines for egressd's `[egress]` settings.
    pub extra: &'a str,
    /// egressd's `allow_ranges`.
    pub allow_ranges: &'a [&'a str],
    /// Whether the box has a LAN ([`Lan`]) when egressd starts.
    pub lan: bool,
}

impl Default for Options<'_> {
    fn default() -> Self {
        Options {
            extra: "",
            allow_ranges: &["203.0.113.0/24"],
            lan: false,
        }
    }
}

/// The box's LAN as a dual-stack home or office has it: a second link (`l0`
/// in the box, `l1` in the LAN's namespace) on which the box has addresses
/// that are public, a global IPv6 /64 and a public IPv4 /24, as its
/// neighbours do (a router, a NAS, a printer). Each neighbour runs an HTTP
/// origin on port 80 that answers as [`serve_origin`] does.
pub struct Lan {
    pub ns: Netns,
    /// What the neighbours saw.
    pub hits: Hits,
}

/// The box's IPv4 address on the LAN and its prefix: public (just outside
/// the benchmarking range), so no address class refuses its neighbours.
pub const LAN_BOX_V4: &str = "198.20.7.1/24";
/// A neighbour on the IPv4 LAN.
pub const LAN_NEIGHBOUR_V4: &str = "198.20.7.20";
/// The box's IPv6 address on the LAN: a global /64, as a router hands out.
pub const LAN_BOX_V6: &str = "2a00:7:7:7::1/64";
/// A neighbour on the IPv6 LAN.
pub const LAN_NEIGHBOUR_V6: &str = "2a00:7:7:7::20";

impl Lan {
    /// The link and its addresses, the neighbours' origins.
    async fn build(host: &Netns) -> Lan {
        let ns = Netns::new("l").await;
        ok(&[
            "ip", "link", "add", "l0", "netns", &host.name, "type", "veth", "peer", "name", "l1",
            "netns", &ns.name,
        ])
        .await;
        ok(&["ip", "-n", &host.name, "link", "set", "l0", "up"]).await;
        ok(&["ip", "-n", &ns.name, "link", "set", "l1", "up"]).await;
        let lan = Lan {
            ns,
            hits: Hits::default(),
        };
        lan.add(host, LAN_BOX_V4, LAN_NEIGHBOUR_V4).await;
        lan.add(host, LAN_BOX_V6, LAN_NEIGHBOUR_V6).await;
        lan
    }

    /// Gives the box `box_address` (with its prefix) on the LAN's link and
    /// puts a neighbour with an origin at `neighbour` in that prefix.
    pub async fn add(&self, host: &Netns, box_address: &str, neighbour: &str) {
        let len = box_address.split_once('/').map_or("32", |(_, len)| len);
        let neighbour_net = format!("{neighbour}/{len}");
        // nodad: an IPv6 address is usable at once, not tentative for a second.
        for (ns, dev, address) in [
            (&self.ns, "l1", neighbour_net.as_str()),
            (host, "l0", box_address),
        ] {
            let mut args = vec!["ip", "-n", &ns.name, "addr", "add", address, "dev", dev];
            if address.contains(':') {
                args.push("nodad");
            }
            ok(&args).await;
        }
        let listen = if neighbour.contains(':') {
            format!("[{neighbour}]:80")
        } else {
            format!("{neighbour}:80")
        };
        serve_origin(self.ns.tcp_listener(&listen), self.hits.clone());
    }
}

/// The command line that runs a program (appended to it, with its
/// arguments) in `ns` with the lab's `/etc` files in `etc` (hosts,
/// resolv.conf, nsswitch.conf) bound over the real ones in a mount
/// namespace of its own. `ip netns exec`, `unshare` and `sh` each exec the
/// next, so the child's pid ends up the program's.
pub fn in_box(ns: &Netns, etc: &Path) -> Vec<String> {
    let binds: Vec<String> = ["hosts", "resolv.conf", "nsswitch.conf"]
        .iter()
        .map(|f| format!("mount --bind {}/{f} /etc/{f}", etc.display()))
        .collect();
    let script = format!("{} && exec \"$@\"", binds.join(" && "));
    [
        "ip",
        "netns",
        "exec",
        &ns.name,
        "unshare",
        "-m",
        "--propagation",
        "private",
    ]
    .into_iter()
    .chain(["sh", "-c", &script, "sh"])
    .map(str::to_string)
    .collect()
}

/// egressd's loopback listener inside its namespace.
pub const LISTEN: &str = "127.0.0.1:8017";

impl Lab {
    /// The box with egressd's `[egress]` settings and `extra`, no LAN.
    pub async fn start(extra: &str) -> Lab {
        Lab::start_with(Options {
            extra,
            ..Options::default()
        })
        .await
    }

    pub async fn start_with(options: Options<'_>) -> Lab {
        let host = Netns::new("h").await;
        let origins = Netns::new("o").await;
        ok(&[
            "ip",
            "link",
            "add",
            "v0",
            "netns",
            &host.name,
            "type",
            "veth",
            "peer",
            "name",
            "v1",
            "netns",
            &origins.name,
        ])
        .await;
        for (ns, dev, addrs) in [
            (&host, "v0", &["203.0.113.1/24"][..]),
            (&origins, "v1", &["203.0.113.10/24", "203.0.113.11/24"][..]),
        ] {
            for addr in addrs {
                ok(&["ip", "-n", &ns.name, "addr", "add", addr, "dev", dev]).await;
            }
            ok(&["ip", "-n", &ns.name, "link", "set", dev, "up"]).await;
        }
        let hits: Hits = Arc::default();
        for addr in ["203.0.113.10:80", "203.0.113.11:80"] {
            serve_origin(origins.tcp_listener(addr), hits.clone());
        }
        let dns: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        serve_dns(host.udp_socket("127.0.0.1:53"), dns.clone());
        let lan = if options.lan {
            Some(Lan::build(&host).await)
        } else {
            None
        };

        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let etc = d.join("etc");
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(
            etc.join("hosts"),
            format!(
                "127.0.0.1 localhost\n::1 localhost\n203.0.113.10 public.test\n\
                 203.0.113.10 mixed.test\n10.0.0.5 mixed.test\n\
                 {LAN_NEIGHBOUR_V4} nas.lan.test\n{LAN_NEIGHBOUR_V6} printer.lan.test\n"
            ),
        )
        .unwrap();
        std::fs::write(
            etc.join("resolv.conf"),
            "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n",
        )
        .unwrap();
        std::fs::write(etc.join("nsswitch.conf"), "hosts: files dns\n").unwrap();
        let key = "netns-test-forward-key-0123456789".to_string();
        crate::harness::write_private(&d.join("secrets.env"), &format!("QSE_FORWARD_KEY={key}\n"))
            .unwrap();
        let api = d.join("run/egress.sock");
        let config = d.join("tandem.toml");
        std::fs::write(
            &config,
            format!(
                "[egress]\ndata_dir = \"{}\"\nchat_data = \"{}\"\nsocket = \"{}\"\n\
                 secrets = \"{}\"\nlisten = \"{LISTEN}\"\nceiling = \"all\"\n\
                 allow_ranges = {allow}\nconnect_s = 1\nlookup_s = 2\n{extra}",
                d.join("egress").display(),
                d.join("chat").display(),
                api.display(),
                d.join("secrets.env").display(),
                allow = serde_json::json!(options.allow_ranges),
                extra = options.extra,
            ),
        )
        .unwrap();
        let mut lab = Lab {
            dir,
            host,
            _origins: origins,
            lan,
            egressd: None,
            api,
            config,
            key,
            hits,
            dns,
        };
        lab.egressd = Some(Proc {
            child: lab.spawn_egressd(),
        });
        let api = lab.api.clone();
        let up = wait_until("egressd's /health", Duration::from_secs(10), || {
            let api = api.clone();
            async move {
                let (status, body) = call(&api, "GET", "/health", None).await?;
                (status == 200 && body["ok"] == true).then_some(())
            }
        })
        .await;
        if let Err(e) = up {
            let exited = lab
                .egressd
                .as_mut()
                .and_then(|p| p.child.try_wait().ok().flatten());
            panic!("{e} (exited: {exited:?}); log:\n{}", lab.log());
        }
        lab
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("egressd.log")).unwrap_or_default()
    }

    /// Starts egressd in the box (its namespace, its mount namespace with
    /// the lab's `/etc` files), its output appended to `egressd.log`.
    fn spawn_egressd(&self) -> std::process::Child {
        let d = self.dir.path();
        let etc = d.join("etc");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(d.join("egressd.log"))
            .expect("egressd's log opens");
        let launcher = in_box(&self.host, &etc);
        std::process::Command::new(&launcher[0])
            .args(&launcher[1..])
            .arg(bin_dir().join("egressd"))
            .arg("--config")
            .arg(&self.config)
            .current_dir(d)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", d)
            .env("QSE_LOG_TO", "stderr")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("the log's handle clones"))
            .stderr(log)
            .spawn()
            .expect("egressd starts")
    }

    /// The origins' namespace (203.0.113.10 and .11), for more origins.
    pub fn origins(&self) -> &Netns {
        &self._origins
    }

    /// egressd's pid, while it runs.
    pub fn egressd_pid(&self) -> Option<u32> {
        self.egressd.as_ref().map(|p| p.child.id())
    }

    /// SIGKILLs egressd and reaps it (a crash: its sockets stay behind).
    pub fn kill_egressd(&mut self) {
        drop(self.egressd.take());
    }

    /// Starts egressd again on the same config and data; waits (bounded)
    /// for its `/health`.
    pub async fn restart_egressd(&mut self, bound: Duration) -> anyhow::Result<u32> {
        self.kill_egressd();
        let child = self.spawn_egressd();
        let pid = child.id();
        self.egressd = Some(Proc { child });
        let api = self.api.clone();
        wait_until("egressd's /health after a restart", bound, || {
            let api = api.clone();
            async move {
                let (status, body) = call(&api, "GET", "/health", None).await?;
                (status == 200 && body["ok"] == true).then_some(())
            }
        })
        .await?;
        Ok(pid)
    }

    /// SIGTERMs egressd and waits (bounded) for it to exit: its status.
    pub async fn stop_egressd(
        &mut self,
        bound: Duration,
    ) -> anyhow::Result<std::process::ExitStatus> {
        let mut proc = self.egressd.take().context("egressd is not running")?;
        let pid = nix::unistd::Pid::from_raw(proc.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM)?;
        let status = wait_until("egressd to exit after SIGTERM", bound, || {
            let status = proc.child.try_wait().ok().flatten();
            async move { status }
        })
        .await;
        // On failure, dropping `proc` SIGKILLs it.
        status
    }

    /// A second egressd on this one's config and data, in the box, run
    /// until it ends (it must refuse: one egressd per data folder).
    pub async fn run_second(&self, bound: Duration) -> anyhow::Result<crate::harness::Ended> {
        let mut command = std::process::Command::new("ip");
        command
            .args(["netns", "exec", &self.host.name])
            .arg(bin_dir().join("egressd"))
            .arg("--config")
            .arg(&self.config)
            .current_dir(self.dir.path())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.dir.path())
            .env("QSE_LOG_TO", "stderr");
        crate::harness::run_to_end(command, bound).await
    }

    pub fn socket(&self, chat: &str) -> PathBuf {
        self.dir
            .path()
            .join("chat/egress")
            .join(chat)
            .join("proxy.sock")
    }

    pub async fn preset(&self, chat: &str, preset: &str) {
        let body = format!(r#"{{"preset":"{preset}"}}"#);
        let (status, answer) = call(
            &self.api,
            "PUT",
            &format!("/chats/{chat}/egress"),
            Some(&body),
        )
        .await
        .expect("the API answers");
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["effective"], preset, "{answer}");
    }

    /// The audit rows of `chat` (with `verdict` when given), once there are `n`.
    pub async fn audit(&self, chat: &str, verdict: Option<&str>, n: usize) -> Vec<Value> {
        let query = match verdict {
            Some(v) => format!("/audit?chat={chat}&verdict={v}&limit=1000"),
            None => format!("/audit?chat={chat}&limit=1000"),
        };
        let last: Arc<Mutex<Vec<Value>>> = Arc::default();
        let found = wait_until(
            &format!("{n} audit rows for {query}"),
            Duration::from_secs(5),
            || {
                let api = self.api.clone();
                let query = query.clone();
                let last = last.clone();
                async move {
                    let (_, body) = call(&api, "GET", &query, None).await?;
                    let rows = body["audit"].as_array().cloned().unwrap_or_default();
                    *last.lock().unwrap() = rows.clone();
                    (rows.len() >= n).then_some(rows)
                }
            },
        )
        .await;
        match found {
            Ok(rows) => {
                assert_eq!(rows.len(), n, "exactly {n} rows for {query}: {rows:#?}");
                rows
            }
            Err(e) => panic!("{e}: {:#?}", last.lock().unwrap()),
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        drop(self.egressd.take());
        let log = self.log();
        crate::daemon::show_log("egressd", &mut self.dir, &log);
    }
}

/// One HTTP request over a unix socket: (status, JSON body); `None` when
/// the socket does not answer.
pub async fn call(
    socket: &Path,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Option<(u16, Value)> {
    let mut s = UnixStream::connect(socket).await.ok()?;
    let body = body.unwrap_or("");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: egressd\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(request.as_bytes()).await.ok()?;
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out))
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text.get(9..12)?.parse().ok()?;
    let json = text
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    Some((status, json))
}

/// Sends `request` on a chat's proxy socket; for a CONNECT that is
/// answered 200, sends a GET through the tunnel too. (status, all text).
pub async fn through(socket: &Path, request: &str) -> (u16, String) {
    let mut s = UnixStream::connect(socket)
        .await
        .expect("the chat's socket answers");
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let read = async {
        loop {
            let n = s.read(&mut buf).await.unwrap_or(0);
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
            if request.starts_with("CONNECT")
                && out.starts_with(b"HTTP/1.1 200")
                && out.ends_with(b"\r\n\r\n")
            {
                s.write_all(b"GET /tunnel HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    .await
                    .unwrap();
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .unwrap_or_else(|_| panic!("no answer to {request:?} in 10 s"));
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, text)
}

/// `args` as the unprivileged user `nobody` (uid and gid 65534, no groups).
pub fn as_nobody(args: Vec<&str>) -> Vec<&str> {
    let mut all = vec![
        "setpriv",
        "--reuid",
        "65534",
        "--regid",
        "65534",
        "--clear-groups",
    ];
    all.extend(args);
    all
}

/// curl with a bound, printing the body then the HTTP status (`-w`).
pub fn curl_args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["curl", "-sS", "--max-time", "8", "-w", "\n%{http_code}"];
    args.extend_from_slice(extra);
    args
}

/// What curl printed before its status line.
pub fn body_of(out: &Output) -> String {
    let all = String::from_utf8_lossy(&out.stdout);
    all.rsplit_once('\n')
        .map(|(body, _)| body.to_string())
        .unwrap_or_default()
}

pub fn status_of(out: &Output) -> u16 {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(0)
}
