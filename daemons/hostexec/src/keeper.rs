//! The keeper: one small process per call, hostexecd's own binary started
//! as `hostexecd --keeper` (decided before any config or logging is read).
//!
//! hostexecd hands it the call on its stdin, a socket (the spec, then the
//! write side shut); its stdout and stderr are the call's output pipe. The
//! keeper makes itself a child subreaper with PR_SET_PDEATHSIG(SIGTERM) (a
//! hostexecd killed with SIGKILL still ends the call), starts `bash -c` in a
//! new session with the call's limits and no privileges, and waits. When
//! bash exits, or on SIGTERM (a stop, the timeout, the output limit,
//! shutdown), it stops and kills every process below it (`tree::kill_tree`),
//! then writes one JSON line, the [`Status`], back on the socket and exits.
//! The keeper is single-threaded, so the code between fork and exec may
//! allocate.

use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// The user a command runs as, resolved by hostexecd.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RunAs {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

/// One call, as hostexecd sends it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Spec {
    pub command: String,
    /// The chat's scratch folder: the command's working folder.
    pub scratch: PathBuf,
    /// The command's HOME.
    pub home: PathBuf,
    pub path: String,
    pub lang: String,
    pub tz: String,
    /// Who to become (hostexecd runs as root); `None`: stay who we are.
    pub run_as: Option<RunAs>,
    /// The uid whose processes RLIMIT_NPROC counts.
    pub uid: u32,
    pub max_processes: u64,
    pub max_file_bytes: u64,
    /// hostexecd's pid: a keeper whose parent is already gone stops at once.
    pub parent: i32,
    /// The keeper's own bound (hostexecd's timeout plus a margin), in case
    /// hostexecd cannot signal it.
    pub backstop_s: u64,
}

/// How the call ended, as the keeper reports it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Status {
    /// bash's exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended bash ("KILL", "TERM", ...), when one did.
    pub signal: Option<String>,
    /// The keeper ended the call (SIGTERM or its backstop), not bash.
    pub killed: bool,
    /// Why bash could not be started.
    pub error: Option<String>,
    /// Processes still there when the keeper gave up killing (0 normally).
    pub left: usize,
    /// bash's pid.
    pub pid: Option<i32>,
}

/// The keeper's entry: never returns.
pub fn main() -> ! {
    let status = run();
    // SAFETY: fd 0 is the socket hostexecd gave us.
    let mut socket = unsafe { std::fs::File::from_raw_fd(0) };
    let mut line = serde_json::to_vec(&status).unwrap_or_default();
    line.push(b'\n');
    // hostexecd may be gone (SIGPIPE is ignored by Rust's runtime): nothing to do then.
    let _ = socket.write_all(&line);
    std::process::exit(0)
}

fn signal_name(signal: i32) -> String {
    nix::sys::signal::Signal::try_from(signal)
        .map(|s| s.as_str().trim_start_matches("SIG").to_string())
        .unwrap_or_else(|_| signal.to_string())
}

fn run() -> Status {
    // SAFETY: plain prctl calls on this process.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGTERM as libc::c_ulong,
            0,
            0,
            0,
        );
    }
    let mut waited = nix::sys::signal::SigSet::empty();
    for s in [
        nix::sys::signal::Signal::SIGTERM,
        nix::sys::signal::Signal::SIGINT,
        nix::sys::signal::Signal::SIGHUP,
        nix::sys::signal::Signal::SIGQUIT,
        nix::sys::signal::Signal::SIGCHLD,
    ] {
        waited.add(s);
    }
    // Blocked here, taken one at a time by sigtimedwait below; the child's
    // mask is emptied again before exec.
    let _ = waited.thread_block();
    let mut text = Vec::new();
    // SAFETY: fd 0 is the socket hostexecd gave us; read through a borrowed
    // File that is not closed here (it is written to at the end).
    let mut socket = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(0) });
    if socket.read_to_end(&mut text).is_err() {
        return failed("the keeper could not read its call");
    }
    let spec: Spec = match serde_json::from_slice(&text) {
        Ok(spec) => spec,
        Err(_) => return failed("the keeper got no call (hostexecd went away)"),
    };
    if nix::unistd::getppid().as_raw() != spec.parent {
        return failed("hostexecd went away before the command started");
    }
    // SAFETY: a plain prctl call on this process.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
    let me = std::process::id() as i32;
    let nproc = crate::tree::tasks_of(spec.uid) + spec.max_processes;
    let mut command = std::process::Command::new("bash");
    command
        .arg("-c")
        .arg(&spec.command)
        .env_clear()
        .env("PATH", &spec.path)
        .env("HOME", &spec.home)
        .env("LANG", &spec.lang)
        .env("TZ", &spec.tz)
        .stdin(std::process::Stdio::null());
    let scratch = match CString::new(spec.scratch.as_os_str().as_encoded_bytes()) {
        Ok(s) => s,
        Err(_) => return failed("the scratch folder's path holds a NUL byte"),
    };
    let run_as = spec.run_as.clone();
    let file_bytes = spec.max_file_bytes;
    // SAFETY: the keeper is single-threaded, so allocating between fork and
    // exec cannot meet a lock held by another thread.
    unsafe {
        command.pre_exec(move || confine(&scratch, run_as.as_ref(), nproc, file_bytes));
    }
    let started = Instant::now();
    let child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            return failed(&format!(
                "could not start bash in {}: {e}",
                spec.scratch.display()
            ))
        }
    };
    drop(command);
    let bash = child.id() as i32;
    // The output pipe is the command's only: the keeper's copies go, so the
    // pipe ends when the command's last process does.
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        use std::os::fd::AsRawFd;
        // SAFETY: dup2 onto our own stdout and stderr.
        unsafe {
            libc::dup2(null.as_raw_fd(), 1);
            libc::dup2(null.as_raw_fd(), 2);
        }
    }
    let mut status = Status {
        pid: Some(bash),
        ..Status::default()
    };
    let mut bash_status: Option<(Option<i32>, Option<String>)> = None;
    let reap = |bash_status: &mut Option<(Option<i32>, Option<String>)>| loop {
        match nix::sys::wait::waitpid(None, Some(nix::sys::wait::WaitPidFlag::WNOHANG)) {
            Ok(nix::sys::wait::WaitStatus::Exited(pid, code)) => {
                if pid.as_raw() == bash {
                    *bash_status = Some((Some(code), None));
                }
            }
            Ok(nix::sys::wait::WaitStatus::Signaled(pid, signal, _)) => {
                if pid.as_raw() == bash {
                    *bash_status = Some((None, Some(signal_name(signal as i32))));
                }
            }
            Ok(nix::sys::wait::WaitStatus::StillAlive) | Err(_) => return,
            Ok(_) => {}
        }
    };
    let backstop = started + Duration::from_secs(spec.backstop_s);
    loop {
        reap(&mut bash_status);
        if bash_status.is_some() {
            break;
        }
        let left = backstop.saturating_duration_since(Instant::now());
        if left.is_zero() {
            status.killed = true;
            break;
        }
        let timeout = libc::timespec {
            tv_sec: left.as_secs().min(3600) as libc::time_t,
            tv_nsec: left.subsec_nanos() as libc::c_long,
        };
        // SAFETY: sigtimedwait on a set we built; no siginfo wanted.
        let got = unsafe { libc::sigtimedwait(waited.as_ref(), std::ptr::null_mut(), &timeout) };
        if got == libc::SIGCHLD || got < 0 {
            continue;
        }
        // SIGTERM and the like: hostexecd ends the call.
        status.killed = true;
        break;
    }
    let mut reap_all = || reap(&mut bash_status);
    status.left = crate::tree::kill_tree(me, &|_| false, &mut reap_all, Duration::from_secs(5));
    if let Some((code, signal)) = bash_status {
        status.exit_code = code;
        status.signal = signal;
    }
    status
}

fn failed(why: &str) -> Status {
    Status {
        error: Some(why.to_string()),
        ..Status::default()
    }
}

/// Between fork and exec, in bash's process: a new session, the limits,
/// the user, no capabilities, no new privileges, the working folder, and
/// every descriptor but 0, 1 and 2 closed at exec.
fn confine(
    scratch: &CString,
    run_as: Option<&RunAs>,
    nproc: u64,
    file_bytes: u64,
) -> std::io::Result<()> {
    use nix::sys::resource::{setrlimit, Resource};
    let err = |e: nix::Error| std::io::Error::from_raw_os_error(e as i32);
    nix::unistd::setsid().map_err(err)?;
    setrlimit(Resource::RLIMIT_CORE, 0, 0).map_err(err)?;
    setrlimit(Resource::RLIMIT_NPROC, nproc, nproc).map_err(err)?;
    setrlimit(Resource::RLIMIT_FSIZE, file_bytes, file_bytes).map_err(err)?;
    let privileged = nix::unistd::geteuid().is_root()
        || caps::has_cap(None, caps::CapSet::Effective, caps::Capability::CAP_SETPCAP)
            .unwrap_or(false);
    if privileged {
        // The bounding set can only be emptied while we may (CAP_SETPCAP).
        caps::clear(None, caps::CapSet::Bounding).map_err(|_| std::io::Error::last_os_error())?;
    }
    if let Some(user) = run_as {
        if user.uid == 0 {
            return Err(std::io::Error::other("refusing to run a command as uid 0"));
        }
        let groups: Vec<nix::unistd::Gid> = user
            .groups
            .iter()
            .map(|g| nix::unistd::Gid::from_raw(*g))
            .collect();
        nix::unistd::setgroups(&groups).map_err(err)?;
        let gid = nix::unistd::Gid::from_raw(user.gid);
        nix::unistd::setresgid(gid, gid, gid).map_err(err)?;
        let uid = nix::unistd::Uid::from_raw(user.uid);
        nix::unistd::setresuid(uid, uid, uid).map_err(err)?;
    }
    if nix::unistd::getuid().is_root() || nix::unistd::geteuid().is_root() {
        return Err(std::io::Error::other("refusing to run a command as uid 0"));
    }
    for set in [
        caps::CapSet::Ambient,
        caps::CapSet::Inheritable,
        caps::CapSet::Effective,
        caps::CapSet::Permitted,
    ] {
        caps::clear(None, set).map_err(|_| std::io::Error::last_os_error())?;
    }
    // SAFETY: plain system calls on this process.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // After the user changed: the folder must be reachable as that user.
        if libc::chdir(scratch.as_ptr()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // Close-on-exec rather than closed: the spawn's own error pipe must
        // still work until exec.
        if libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        ) != 0
        {
            let max = nix::sys::resource::getrlimit(Resource::RLIMIT_NOFILE)
                .map(|(soft, _)| soft.min(1 << 20))
                .unwrap_or(1024) as i32;
            for fd in 3..max {
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
        }
    }
    Ok(())
}
