//! tandem-shim: PID 1 of a chat's sandbox container.
//!
//! Two jobs, no more:
//! - the init's: every process of the container that loses its parent is
//!   reparented to PID 1, which must wait for it or it stays a zombie
//!   ([`reap_all`]); a stop (SIGTERM, SIGINT) ends the shim at once, and
//!   with it everything in the container (`main.rs`);
//! - the proxy's door: commands in the container have no network
//!   (`NetworkMode: none`) but `HTTP(S)_PROXY=http://127.0.0.1:3128`. The
//!   shim listens there and copies each TCP connection byte for byte to the
//!   chat's egress socket, `/run/tandem-egress/proxy.sock`, where egressd
//!   answers ([`serve`]). The shim reads nothing of what it relays: egressd
//!   decides everything.
//!
//! std and nix only, a thread per direction of a connection, at most
//! [`MAX_CONNECTIONS`] at a time. I/O errors end a connection, never the shim.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

/// Where the proxy door listens (`TANDEM_SHIM_LISTEN` overrides).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:3128";
/// The chat's egress socket, mounted by chatd (`TANDEM_SHIM_EGRESS` overrides).
pub const DEFAULT_EGRESS: &str = "/run/tandem-egress/proxy.sock";
/// Connections relayed at once; one more is closed as soon as it is accepted.
pub const MAX_CONNECTIONS: usize = 64;

/// A relay thread copies through a buffer on its own stack: small stacks
/// keep 64 connections (128 threads) cheap.
const RELAY_STACK: usize = 128 * 1024;
const RELAY_BUFFER: usize = 16 * 1024;

/// Waits for every child that has ended, without blocking. Returns how many
/// were reaped.
pub fn reap_all() -> usize {
    let mut reaped = 0;
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => return reaped,
            Ok(_) => reaped += 1,
            Err(Errno::EINTR) => continue,
            // ECHILD: no children at all.
            Err(_) => return reaped,
        }
    }
}

/// Accepts connections forever and relays each to the unix socket `egress`,
/// `max` at a time. Accept errors (out of descriptors, a connection reset
/// before it was accepted) are waited out, never fatal.
pub fn serve(listener: TcpListener, egress: PathBuf, max: usize) {
    let egress: Arc<Path> = Arc::from(egress.into_boxed_path());
    let open = Arc::new(AtomicUsize::new(0));
    let mut told = false;
    loop {
        let tcp = match listener.accept() {
            Ok((tcp, _)) => tcp,
            Err(err) => {
                if !told && !transient(&err) {
                    eprintln!("tandem-shim: accepting on the proxy door: {err} (still trying)");
                    told = true;
                }
                thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let slot = Slot::take(&open, max);
        let Some(slot) = slot else {
            // Full: the connection is closed unanswered.
            drop(tcp);
            continue;
        };
        let egress = Arc::clone(&egress);
        let spawned = thread::Builder::new()
            .name("shim-conn".into())
            .stack_size(RELAY_STACK)
            .spawn(move || connect_and_relay(tcp, &egress, slot));
        // A thread that could not start dropped its connection and slot.
        drop(spawned);
    }
}

fn transient(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
    )
}

/// One of the `max` places; given back when the last thread of its
/// connection drops it.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    fn take(open: &Arc<AtomicUsize>, max: usize) -> Option<Arc<Slot>> {
        let taken = open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok();
        taken.then(|| Arc::new(Slot(Arc::clone(open))))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn connect_and_relay(tcp: TcpStream, egress: &Path, slot: Arc<Slot>) {
    // Missing, refusing or unreachable: nothing answers, the client sees
    // its connection closed at once.
    let Ok(unix) = UnixStream::connect(egress) else {
        return;
    };
    let _ = tcp.set_nodelay(true);
    let (Ok(tcp_r), Ok(unix_w)) = (tcp.try_clone(), unix.try_clone()) else {
        return;
    };
    let up = Pipe {
        from: Box::new(tcp_r),
        to: Box::new(unix_w),
    };
    let down = Pipe {
        from: Box::new(unix),
        to: Box::new(tcp),
    };
    let slot_up = Arc::clone(&slot);
    let spawned = thread::Builder::new()
        .name("shim-up".into())
        .stack_size(RELAY_STACK)
        .spawn(move || {
            up.run();
            drop(slot_up);
        });
    if spawned.is_err() {
        // `up` is dropped with the closure: both sockets close below.
        return;
    }
    down.run();
    drop(slot);
}

/// A socket that can be shut down in one or both directions.
trait Sock: Read + Write + Send {
    fn shut(&self, how: Shutdown);
}

impl Sock for TcpStream {
    fn shut(&self, how: Shutdown) {
        let _ = self.shutdown(how);
    }
}

impl Sock for UnixStream {
    fn shut(&self, how: Shutdown) {
        let _ = self.shutdown(how);
    }
}

/// One direction of a connection.
struct Pipe {
    from: Box<dyn Sock>,
    to: Box<dyn Sock>,
}

impl Pipe {
    /// Copies until the source ends, then half-closes the destination so
    /// the other side sees the end and may still answer. On an error both
    /// sockets are shut down whole, which also wakes the other direction.
    fn run(mut self) {
        let mut buf = vec![0u8; RELAY_BUFFER];
        loop {
            let n = match self.from.read(&mut buf) {
                Ok(0) => {
                    self.to.shut(Shutdown::Write);
                    self.from.shut(Shutdown::Read);
                    return;
                }
                Ok(n) => n,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return self.abort(),
            };
            if self.to.write_all(&buf[..n]).is_err() {
                return self.abort();
            }
        }
    }

    fn abort(&self) {
        self.from.shut(Shutdown::Both);
        self.to.shut(Shutdown::Both);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;
    use std::time::Instant;

    /// A folder of its own under the system temp folder, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> TempDir {
            static N: AtomicUsize = AtomicUsize::new(0);
            let dir = std::env::temp_dir().join(format!(
                "tandem-shim-test-{}-{name}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// The shim's relay on a free loopback port, relaying to `egress`.
    fn start_shim(egress: PathBuf, max: usize) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        thread::spawn(move || serve(listener, egress, max));
        addr
    }

    /// A unix socket server that echoes every connection, then, at the
    /// client's end of input, writes "bye" and closes.
    fn start_echo(path: &Path) {
        let server = UnixListener::bind(path).unwrap();
        thread::spawn(move || {
            for conn in server.incoming() {
                let Ok(mut conn) = conn else { continue };
                thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    loop {
                        match conn.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                if conn.write_all(&buf[..n]).is_err() {
                                    return;
                                }
                            }
                        }
                    }
                    let _ = conn.write_all(b"bye");
                });
            }
        });
    }

    fn timeouts(tcp: &TcpStream) {
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        tcp.set_write_timeout(Some(Duration::from_secs(10)))
            .unwrap();
    }

    #[test]
    fn relays_both_ways_and_half_closes() {
        let dir = TempDir::new("echo");
        let sock = dir.0.join("proxy.sock");
        start_echo(&sock);
        let addr = start_shim(sock, MAX_CONNECTIONS);

        let mut tcp = TcpStream::connect(addr).unwrap();
        timeouts(&tcp);
        // More than one buffer's worth, every byte value.
        let sent: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let writer = {
            let mut tcp = tcp.try_clone().unwrap();
            let sent = sent.clone();
            thread::spawn(move || {
                tcp.write_all(&sent).unwrap();
                // Our end of input: the echo server answers "bye" after it.
                tcp.shutdown(Shutdown::Write).unwrap();
            })
        };
        let mut got = Vec::new();
        tcp.read_to_end(&mut got).unwrap();
        writer.join().unwrap();
        assert_eq!(got.len(), sent.len() + 3);
        assert!(got[..sent.len()] == sent[..], "the bytes came back changed");
        assert_eq!(&got[sent.len()..], b"bye");
    }

    #[test]
    fn missing_socket_closes_the_connection_at_once() {
        let dir = TempDir::new("missing");
        let addr = start_shim(dir.0.join("proxy.sock"), MAX_CONNECTIONS);
        let started = Instant::now();
        let mut tcp = TcpStream::connect(addr).unwrap();
        timeouts(&tcp);
        let _ = tcp.write_all(b"GET http://example.com/ HTTP/1.1\r\n\r\n");
        let mut got = Vec::new();
        // Closed (an end or a reset), with nothing said.
        let _ = tcp.read_to_end(&mut got);
        assert!(got.is_empty());
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn refusing_socket_closes_the_connection() {
        let dir = TempDir::new("refused");
        let sock = dir.0.join("proxy.sock");
        // A socket file nobody listens on any more: connect is refused.
        drop(UnixListener::bind(&sock).unwrap());
        let addr = start_shim(sock, MAX_CONNECTIONS);
        let mut tcp = TcpStream::connect(addr).unwrap();
        timeouts(&tcp);
        let mut got = Vec::new();
        let _ = tcp.read_to_end(&mut got);
        assert!(got.is_empty());
    }

    #[test]
    fn connections_past_the_limit_are_closed() {
        let dir = TempDir::new("limit");
        let sock = dir.0.join("proxy.sock");
        start_echo(&sock);
        let addr = start_shim(sock, 2);
        let mut held = Vec::new();
        for _ in 0..2 {
            let mut tcp = TcpStream::connect(addr).unwrap();
            timeouts(&tcp);
            tcp.write_all(b"ping").unwrap();
            let mut buf = [0u8; 4];
            tcp.read_exact(&mut buf).unwrap();
            assert_eq!(&buf, b"ping");
            held.push(tcp);
        }
        let mut third = TcpStream::connect(addr).unwrap();
        timeouts(&third);
        let mut got = Vec::new();
        let _ = third.read_to_end(&mut got);
        assert!(got.is_empty(), "a third connection was relayed");

        // A place given back is taken again.
        let first = held.remove(0);
        first.shutdown(Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        let mut first = first;
        first.read_to_end(&mut rest).unwrap();
        assert_eq!(rest, b"bye");
        drop(first);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut tcp = TcpStream::connect(addr).unwrap();
            timeouts(&tcp);
            let _ = tcp.write_all(b"ping");
            let mut buf = [0u8; 4];
            if tcp.read_exact(&mut buf).is_ok() {
                assert_eq!(&buf, b"ping");
                break;
            }
            assert!(Instant::now() < deadline, "the place was never given back");
            thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn reap_all_waits_for_ended_children() {
        let child = std::process::Command::new("true").spawn().unwrap();
        let pid = Pid::from_raw(child.id() as i32);
        // Reaped by reap_all, not by the Child handle (which is forgotten).
        std::mem::forget(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while reap_all() == 0 {
            assert!(Instant::now() < deadline, "child {pid} never reaped");
            thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(waitpid(pid, Some(WaitPidFlag::WNOHANG)), Err(Errno::ECHILD));
    }
}
