//! egressd and the sandbox user's nftables rules in real network namespaces
//! (root only: CI runs as root; anyone else gets a "skipped" line).
//!
//! Every test builds its own little internet: a namespace for egressd (the
//! "box", with `lo` and a veth end at 203.0.113.1/24), a namespace of
//! "public" origins at 203.0.113.10 and .11 (HTTP servers of this test
//! process, bound there by a thread that joined the namespace), and, where a
//! command needs one, a client namespace with nothing but `lo`. egressd runs
//! in a mount namespace of its own too, with a test `/etc/hosts`,
//! `/etc/resolv.conf` (a DNS responder of this test) and `/etc/nsswitch.conf`
//! bound over the real ones. The host's own network and files are never
//! touched; namespaces and processes go away on drop, also when a test fails.
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

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tandem_tests::harness::{bin_dir, wait_until};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// A bound on every outside command (curl, nft, ip …).
const COMMAND_BOUND: Duration = Duration::from_secs(20);

/// Whether this process may build namespaces. Not root: a line on stderr
/// and the test returns (CI runs as root and so runs them all).
fn root_with_tools() -> bool {
    if !nix::unistd::geteuid().is_root() {
        eprintln!(
            "egress_netns: SKIPPED: network namespaces and nftables need root (uid {}); CI runs these as root",
            nix::unistd::geteuid()
        );
        return false;
    }
    for tool in [
        "ip", "nft", "unshare", "socat", "curl", "setpriv", "timeout",
    ] {
        let found = std::process::Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            found,
            "{tool} is missing: .ci/run installs iproute2, nftables, util-linux, socat and curl"
        );
    }
    true
}

/// Runs a command with a bound; its output.
async fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
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
async fn ok(args: &[&str]) -> String {
    let out = run(args, &[]).await;
    assert!(out.status.success(), "{args:?}: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn text(out: &Output) -> String {
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
struct Netns {
    name: String,
}

impl Netns {
    async fn new(tag: &str) -> Netns {
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
    fn exec<'a>(&'a self, args: &[&'a str]) -> Vec<&'a str> {
        let mut all = vec!["ip", "netns", "exec", self.name.as_str()];
        all.extend_from_slice(args);
        all
    }

    /// Runs `f` on a thread that joined this namespace: sockets it makes
    /// belong to the namespace, wherever they are used later.
    fn inside<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
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

    fn tcp_listener(&self, addr: &str) -> tokio::net::TcpListener {
        let addr: SocketAddr = addr.parse().unwrap();
        let listener = self.inside(move || {
            let l = std::net::TcpListener::bind(addr).expect("binding in the namespace");
            l.set_nonblocking(true).unwrap();
            l
        });
        tokio::net::TcpListener::from_std(listener).unwrap()
    }

    fn udp_socket(&self, addr: &str) -> tokio::net::UdpSocket {
        let addr: SocketAddr = addr.parse().unwrap();
        let socket = self.inside(move || {
            let s = std::net::UdpSocket::bind(addr).expect("binding in the namespace");
            s.set_nonblocking(true).unwrap();
            s
        });
        tokio::net::UdpSocket::from_std(socket).unwrap()
    }

    /// The packets counted in `sbx_dropped` in this namespace.
    async fn dropped(&self) -> u64 {
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
struct Proc {
    child: std::process::Child,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the origins saw: "address request-line".
type Hits = Arc<Mutex<Vec<String>>>;

/// An HTTP origin: reads a request head, answers `origin <its address>: <request line>`.
fn serve_origin(listener: tokio::net::TcpListener, hits: Hits) {
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
fn serve_dns(socket: tokio::net::UdpSocket, asked: Arc<Mutex<HashMap<String, usize>>>) {
    tokio::spawn(async move {
        let mut buf = [0u8; 1500];
        while let Ok((n, from)) = socket.recv_from(&mut buf).await {
            let Some((name, qtype, question_end)) = dns_question(&buf[..n]) else {
                continue;
            };
            let mut answers: Vec<Ipv4Addr> = Vec::new();
            let mut nxdomain = true;
            if name == "rebind.test" {
                nxdomain = false;
                if qtype == 1 {
                    let mut asked = asked.lock().unwrap();
                    let count = asked.entry(name.clone()).or_insert(0);
                    *count += 1;
                    answers.push(if *count == 1 {
                        Ipv4Addr::new(203, 0, 113, 11)
                    } else {
                        Ipv4Addr::new(10, 0, 0, 5)
                    });
                }
            } else if qtype == 1 {
                *asked.lock().unwrap().entry(name.clone()).or_insert(0) += 1;
            }
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
/// origins), the origins' namespace, egressd itself, its API.
struct Lab {
    dir: tempfile::TempDir,
    host: Netns,
    _origins: Netns,
    egressd: Option<Proc>,
    api: PathBuf,
    config: PathBuf,
    key: String,
    hits: Hits,
    dns: Arc<Mutex<HashMap<String, usize>>>,
}

/// egressd's loopback listener inside its namespace.
const LISTEN: &str = "127.0.0.1:8017";

impl Lab {
    async fn start(extra: &str) -> Lab {
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

        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let etc = d.join("etc");
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(
            etc.join("hosts"),
            "127.0.0.1 localhost\n::1 localhost\n203.0.113.10 public.test\n\
             203.0.113.10 mixed.test\n10.0.0.5 mixed.test\n",
        )
        .unwrap();
        std::fs::write(
            etc.join("resolv.conf"),
            "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n",
        )
        .unwrap();
        std::fs::write(etc.join("nsswitch.conf"), "hosts: files dns\n").unwrap();
        let key = "netns-test-forward-key-0123456789".to_string();
        tandem_tests::harness::write_private(
            &d.join("secrets.env"),
            &format!("QSE_FORWARD_KEY={key}\n"),
        )
        .unwrap();
        let api = d.join("run/egress.sock");
        let config = d.join("tandem.toml");
        std::fs::write(
            &config,
            format!(
                "[egress]\ndata_dir = \"{}\"\nchat_data = \"{}\"\nsocket = \"{}\"\n\
                 secrets = \"{}\"\nlisten = \"{LISTEN}\"\nceiling = \"all\"\n\
                 allow_ranges = [\"203.0.113.0/24\"]\nconnect_s = 1\nlookup_s = 2\n{extra}",
                d.join("egress").display(),
                d.join("chat").display(),
                api.display(),
                d.join("secrets.env").display(),
            ),
        )
        .unwrap();
        let log = std::fs::File::create(d.join("egressd.log")).unwrap();
        let script = format!(
            "mount --bind {etc}/hosts /etc/hosts && mount --bind {etc}/resolv.conf /etc/resolv.conf \
             && mount --bind {etc}/nsswitch.conf /etc/nsswitch.conf && exec {bin} --config {config}",
            etc = etc.display(),
            bin = bin_dir().join("egressd").display(),
            config = config.display(),
        );
        let child = std::process::Command::new("ip")
            .args(["netns", "exec", &host.name])
            .args([
                "unshare",
                "-m",
                "--propagation",
                "private",
                "sh",
                "-c",
                &script,
            ])
            .current_dir(d)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", d)
            .env("QSE_LOG_TO", "stderr")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("egressd starts");
        let mut lab = Lab {
            dir,
            host,
            _origins: origins,
            egressd: Some(Proc { child }),
            api,
            config,
            key,
            hits,
            dns,
        };
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

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("egressd.log")).unwrap_or_default()
    }

    fn socket(&self, chat: &str) -> PathBuf {
        self.dir
            .path()
            .join("chat/egress")
            .join(chat)
            .join("proxy.sock")
    }

    async fn preset(&self, chat: &str, preset: &str) {
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
    async fn audit(&self, chat: &str, verdict: Option<&str>, n: usize) -> Vec<Value> {
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
        if std::thread::panicking() {
            eprintln!("---- egressd's log\n{}", self.log());
        }
    }
}

/// One HTTP request over a unix socket: (status, JSON body); `None` when
/// the socket does not answer.
async fn call(socket: &Path, method: &str, path: &str, body: Option<&str>) -> Option<(u16, Value)> {
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
async fn through(socket: &Path, request: &str) -> (u16, String) {
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
fn as_nobody(args: Vec<&str>) -> Vec<&str> {
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
fn curl_args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["curl", "-sS", "--max-time", "8", "-w", "\n%{http_code}"];
    args.extend_from_slice(extra);
    args
}

/// What curl printed before its status line.
fn body_of(out: &Output) -> String {
    let all = String::from_utf8_lossy(&out.stdout);
    all.rsplit_once('\n')
        .map(|(body, _)| body.to_string())
        .unwrap_or_default()
}

fn status_of(out: &Output) -> u16 {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(0)
}

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
