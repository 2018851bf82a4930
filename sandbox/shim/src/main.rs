//! `tandem-shim`: the CMD of the sandbox image, PID 1 of each chat's
//! container. See `lib.rs` for what it does and why.
//!
//! Signals: SIGTERM, SIGINT and SIGCHLD are blocked in every thread (the
//! mask is set before the first thread starts) and taken one at a time by
//! the main thread with sigwait. Blocked signals are queued even for a
//! namespace's PID 1, which the kernel otherwise spares from signals it has
//! no handler for; handlers that do nothing are installed as well, so none
//! of the three is ever discarded as ignored.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::ExitCode;
use std::thread;

use nix::sys::signal::{
    pthread_sigmask, sigaction, SaFlags, SigAction, SigHandler, SigSet, SigmaskHow, Signal,
};

const USAGE: &str = "\
tandem-shim: PID 1 of a tandem chat's sandbox container.
Reaps every process, exits 0 on SIGTERM or SIGINT, and relays each TCP
connection to 127.0.0.1:3128 byte for byte to the chat's egress socket.
Environment:
  TANDEM_SHIM_LISTEN  the address to listen on (default 127.0.0.1:3128)
  TANDEM_SHIM_EGRESS  the unix socket to relay to (default /run/tandem-egress/proxy.sock)";

extern "C" fn nothing(_: libc::c_int) {}

fn main() -> ExitCode {
    if let Some(arg) = std::env::args().nth(1) {
        if arg == "--help" || arg == "-h" {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        if arg == "--version" || arg == "-V" {
            println!("tandem-shim {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        eprintln!("tandem-shim: no arguments are taken (see --help); going on without them");
    }

    let mut signals = SigSet::empty();
    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGCHLD] {
        signals.add(signal);
    }
    if let Err(err) = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&signals), None) {
        eprintln!("tandem-shim: blocking signals: {err}");
        return ExitCode::FAILURE;
    }
    let handler = SigAction::new(
        SigHandler::Handler(nothing),
        SaFlags::SA_NOCLDSTOP,
        SigSet::empty(),
    );
    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGCHLD] {
        // SAFETY: the handler does nothing, so it is async-signal-safe.
        if let Err(err) = unsafe { sigaction(signal, &handler) } {
            eprintln!("tandem-shim: a handler for {signal}: {err}");
        }
    }
    // Not PID 1 (run by hand, or under another init): orphans below it
    // still come to it.
    if std::process::id() != 1 {
        let _ = nix::sys::prctl::set_child_subreaper(true);
    }

    start_relay();

    loop {
        match signals.wait() {
            Ok(Signal::SIGCHLD) => {
                tandem_shim::reap_all();
            }
            Ok(Signal::SIGTERM) | Ok(Signal::SIGINT) => {
                // Whatever is left in the container ends with PID 1.
                tandem_shim::reap_all();
                return ExitCode::SUCCESS;
            }
            Ok(_) | Err(_) => {
                tandem_shim::reap_all();
            }
        }
    }
}

/// Binds the proxy door and serves it on a thread. When that fails the shim
/// says why once and stays the container's reaper.
fn start_relay() {
    let listen = std::env::var("TANDEM_SHIM_LISTEN")
        .ok()
        .filter(|value| !value.is_empty())
        .unwrap_or_else(|| tandem_shim::DEFAULT_LISTEN.to_string());
    let egress = std::env::var_os("TANDEM_SHIM_EGRESS")
        .filter(|value| !value.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(tandem_shim::DEFAULT_EGRESS));
    let addr: SocketAddr = match listen.parse() {
        Ok(addr) => addr,
        Err(err) => {
            eprintln!(
                "tandem-shim: TANDEM_SHIM_LISTEN={listen:?} is not an address ({err}); \
                 no proxy door, reaping only"
            );
            return;
        }
    };
    let listener = match TcpListener::bind(addr) {
        Ok(listener) => listener,
        Err(err) => {
            eprintln!("tandem-shim: listening on {addr}: {err}; no proxy door, reaping only");
            return;
        }
    };
    let spawned = thread::Builder::new()
        .name("shim-accept".into())
        .spawn(move || tandem_shim::serve(listener, egress, tandem_shim::MAX_CONNECTIONS));
    if let Err(err) = spawned {
        eprintln!("tandem-shim: starting the proxy door: {err}; reaping only");
    }
}
