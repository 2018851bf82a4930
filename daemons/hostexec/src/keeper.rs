//! The keeper: one small process per call, hostexecd's own binary started
//! as `hostexecd --keeper` (decided before any config or logging is read),
//! in a process group of its own.
//!
//! hostexecd hands it the call on its stdin, a socket (the spec, then the
//! write side shut); its stdout and stderr are the call's output pipe. The
//! keeper sets PR_SET_PDEATHSIG(SIGTERM) (a hostexecd killed with SIGKILL
//! still ends the call), makes the call's namespaces (`contain.rs`: refused
//! calls never run uncontained), and forks the call's init, process 1 of the
//! new PID namespace. Init mounts the namespace's /proc, starts `bash -c` in
//! the chat's workspace with the call's limits, no privileges and no signal
//! blocked, reaps whatever is orphaned in the namespace, and exits when bash
//! does, saying how bash ended. Init's end is the call's end: the kernel
//! kills everything else in the namespace and waits for it. On SIGTERM (a
//! stop, the timeout, the output limit, shutdown) the keeper kills init.
//! Then it writes one JSON line, the [`Status`], back on the socket and
//! exits. Init dies with the keeper (PR_SET_PDEATHSIG(SIGKILL)), so a keeper
//! killed outright ends the call too. The keeper and init are
//! single-threaded, so the code between fork and exec may allocate.

use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::contain::{Namespaces, View};

/// The user a command runs as, resolved by hostexecd.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RunAs {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

/// A program run as it is named, without a shell (an MCP server): its
/// stdin and stderr are pipes of their own, inherited from hostexecd under
/// these numbers; stdout is the call's output, as for a command.
#[derive(Clone, Serialize, Deserialize)]
pub struct Program {
    pub command: String,
    pub args: Vec<String>,
    /// Its own environment (the connector's sealed values), after PATH,
    /// HOME, LANG and TZ.
    pub env: Vec<(String, String)>,
    pub stdin_fd: i32,
    pub stderr_fd: i32,
}

impl std::fmt::Debug for Program {
    /// Without the environment's values: they are secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.env.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("Program")
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &names)
            .finish()
    }
}

/// One call, as hostexecd sends it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Spec {
    /// The command line run with `bash -c`, unless `program` is given.
    pub command: String,
    pub program: Option<Program>,
    /// The chat's workspace: the command's working folder.
    pub workspace: PathBuf,
    /// The command's HOME.
    pub home: PathBuf,
    /// How the call's namespaces are made, and what it sees.
    pub namespaces: Namespaces,
    pub view: View,
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
    /// bash's pid in the call's PID namespace.
    pub pid: Option<i32>,
}

/// What the call's init says of bash, one JSON line on its report pipe.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Report {
    exit_code: Option<i32>,
    signal: Option<String>,
    error: Option<String>,
    pid: Option<i32>,
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
    // Blocked here, taken one at a time by sigtimedwait below; bash's mask
    // is emptied again before its exec (`confine`).
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
    if let Err(why) = crate::contain::enter(spec.namespaces, &spec.view) {
        return failed(&format!(
            "the command was not run: its containment could not be made: {why}"
        ));
    }
    // Counted after the user namespace is made: a call of hostexecd as a
    // plain user counts in its own (the kernel counts per namespace).
    let nproc = crate::tree::tasks_of(spec.uid) + spec.max_processes;
    let Ok((go_read, go_write)) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) else {
        return failed("the keeper could not make a pipe");
    };
    let Ok((report_read, report_write)) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) else {
        return failed("the keeper could not make a pipe");
    };
    let started = Instant::now();
    // SAFETY: the keeper is single-threaded; the child runs `init` and
    // leaves with _exit, never returning here.
    let init = match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => {
            drop(go_write);
            drop(report_read);
            init(&spec, go_read, report_write, nproc)
        }
        Ok(nix::unistd::ForkResult::Parent { child }) => child.as_raw(),
        Err(e) => return failed(&format!("the call's init could not be started: {e}")),
    };
    drop(go_read);
    drop(report_write);
    if let Some(program) = &spec.program {
        // Init holds them now: the stderr pipe ends with the server's
        // processes, not with the keeper.
        // SAFETY: closing descriptors hostexecd handed the keeper.
        unsafe {
            libc::close(program.stdin_fd);
            libc::close(program.stderr_fd);
        }
    }
    // Init is waiting for this byte: it has set its parent-death signal.
    let _ = nix::unistd::write(&go_write, b"g");
    drop(go_write);
    // The output pipe is the command's only: the keeper's copies go, so the
    // pipe ends when the command's last process does.
    null_stdout();
    let mut status = Status::default();
    let mut init_ended = false;
    let reap_init = |ended: &mut bool| {
        while let Ok(s) = nix::sys::wait::waitpid(
            nix::unistd::Pid::from_raw(init),
            Some(nix::sys::wait::WaitPidFlag::WNOHANG),
        ) {
            match s {
                nix::sys::wait::WaitStatus::StillAlive => return,
                nix::sys::wait::WaitStatus::Exited(..)
                | nix::sys::wait::WaitStatus::Signaled(..) => {
                    *ended = true;
                    return;
                }
                _ => {}
            }
        }
        *ended = true;
    };
    let backstop = started + Duration::from_secs(spec.backstop_s);
    loop {
        reap_init(&mut init_ended);
        if init_ended {
            break;
        }
        let left = backstop.saturating_duration_since(Instant::now());
        if left.is_zero() {
            status.killed = true;
            break;
        }
        let got = wait_signal(&waited, left);
        if got == libc::SIGCHLD || got < 0 {
            continue;
        }
        // SIGTERM and the like: hostexecd ends the call.
        status.killed = true;
        break;
    }
    if !init_ended {
        // Init's death takes every process of the namespace with it; the
        // kernel reaps them before init can be reaped.
        // SAFETY: `init` is our child, not yet reaped: its pid is its own.
        unsafe { libc::kill(init, libc::SIGKILL) };
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            reap_init(&mut init_ended);
            let left = until.saturating_duration_since(Instant::now());
            if init_ended || left.is_zero() {
                break;
            }
            wait_signal(&waited, left);
        }
        if !init_ended {
            status.left = 1;
        }
    }
    let mut line = Vec::new();
    let _ = std::fs::File::from(report_read).read_to_end(&mut line);
    let report: Report = serde_json::from_slice(line.trim_ascii()).unwrap_or_default();
    status.pid = report.pid;
    status.error = report.error;
    status.exit_code = report.exit_code;
    status.signal = report.signal;
    if status.killed
        && status.exit_code.is_none()
        && status.signal.is_none()
        && status.error.is_none()
    {
        // bash went with the namespace.
        status.signal = Some("KILL".into());
    }
    status
}

/// Waits for one of `set` at most `left`; the signal, or -1.
fn wait_signal(set: &nix::sys::signal::SigSet, left: Duration) -> i32 {
    let timeout = libc::timespec {
        tv_sec: left.as_secs().min(3600) as libc::time_t,
        tv_nsec: libc::c_long::from(left.subsec_nanos()),
    };
    // SAFETY: sigtimedwait on a set we built; no siginfo wanted.
    unsafe { libc::sigtimedwait(set.as_ref(), std::ptr::null_mut(), &raw const timeout) }
}

/// Points this process's stdout and stderr at /dev/null.
fn null_stdout() {
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        // SAFETY: dup2 onto our own stdout and stderr.
        unsafe {
            libc::dup2(null.as_raw_fd(), 1);
            libc::dup2(null.as_raw_fd(), 2);
        }
    }
}

/// Process 1 of the call's PID namespace: never returns.
fn init(spec: &Spec, go: OwnedFd, report: OwnedFd, nproc: u64) -> ! {
    // SAFETY: a plain prctl call on this process.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
    }
    let mut report = std::fs::File::from(report);
    let mut tell = |r: &Report| {
        let mut line = serde_json::to_vec(r).unwrap_or_default();
        line.push(b'\n');
        let _ = report.write_all(&line);
    };
    // The keeper's byte: it was alive after our parent-death signal was set
    // (getppid says 0 across a PID namespace, so it cannot be asked).
    let mut byte = [0u8; 1];
    if !matches!(nix::unistd::read(&go, &mut byte), Ok(1)) {
        // SAFETY: leaving the child without running the keeper's code.
        unsafe { libc::_exit(1) }
    }
    drop(go);
    if let Err(why) = crate::contain::mount_proc() {
        // As a plain user the kernel refuses a /proc of our own where no
        // /proc of the machine is fully visible (files hidden under other
        // mounts): the machine's stays; the PID namespace still holds the call.
        if spec.namespaces == Namespaces::AsRoot {
            tell(&Report {
                error: Some(format!("the command was not run: {why}")),
                ..Report::default()
            });
            // SAFETY: as above.
            unsafe { libc::_exit(0) }
        }
    }
    let mut command = match &spec.program {
        None => {
            let mut bash = std::process::Command::new("bash");
            bash.arg("-c").arg(&spec.command);
            bash
        }
        Some(program) => std::process::Command::new(&program.command),
    };
    command
        .env_clear()
        .env("PATH", &spec.path)
        .env("HOME", &spec.home)
        .env("LANG", &spec.lang)
        .env("TZ", &spec.tz);
    match &spec.program {
        None => {
            command.stdin(std::process::Stdio::null());
        }
        Some(program) => {
            command
                .args(&program.args)
                .envs(program.env.iter().cloned());
            // SAFETY: descriptors hostexecd handed down for this server
            // alone, owned from here by the command's spawn.
            let (stdin, stderr) = unsafe {
                (
                    OwnedFd::from_raw_fd(program.stdin_fd),
                    OwnedFd::from_raw_fd(program.stderr_fd),
                )
            };
            command
                .stdin(std::process::Stdio::from(stdin))
                .stderr(std::process::Stdio::from(stderr));
        }
    }
    let Ok(workspace) = CString::new(spec.workspace.as_os_str().as_encoded_bytes()) else {
        tell(&Report {
            error: Some("the workspace's path holds a NUL byte".into()),
            ..Report::default()
        });
        // SAFETY: as above.
        unsafe { libc::_exit(0) }
    };
    let run_as = spec.run_as.clone();
    let file_bytes = spec.max_file_bytes;
    // SAFETY: init is single-threaded, so allocating between fork and exec
    // cannot meet a lock held by another thread.
    unsafe {
        command.pre_exec(move || confine(&workspace, run_as.as_ref(), nproc, file_bytes));
    }
    let bash = match command.spawn() {
        Ok(child) => child.id() as i32,
        Err(e) => {
            let what = spec.program.as_ref().map_or("bash", |p| p.command.as_str());
            tell(&Report {
                error: Some(format!(
                    "could not start {what} in {}: {e}",
                    spec.workspace.display()
                )),
                ..Report::default()
            });
            // SAFETY: as above.
            unsafe { libc::_exit(0) }
        }
    };
    drop(command);
    null_stdout();
    // Process 1 is every orphan's parent here: reap them all until bash ends.
    let mut ended = Report {
        pid: Some(bash),
        ..Report::default()
    };
    loop {
        match nix::sys::wait::waitpid(None, None) {
            Ok(nix::sys::wait::WaitStatus::Exited(pid, code)) if pid.as_raw() == bash => {
                ended.exit_code = Some(code);
                break;
            }
            Ok(nix::sys::wait::WaitStatus::Signaled(pid, signal, _)) if pid.as_raw() == bash => {
                ended.signal = Some(signal_name(signal as i32));
                break;
            }
            Ok(_) | Err(nix::Error::EINTR) => {}
            Err(_) => break,
        }
    }
    tell(&ended);
    // SAFETY: as above; the kernel ends the rest of the namespace now.
    unsafe { libc::_exit(0) }
}

fn failed(why: &str) -> Status {
    Status {
        error: Some(why.to_string()),
        ..Status::default()
    }
}

/// Between fork and exec, in bash's process: no signal blocked and every
/// one at its default, a new session, the limits, the user, no
/// capabilities, no new privileges, the working folder, and every
/// descriptor but 0, 1 and 2 closed at exec.
fn confine(
    workspace: &CString,
    run_as: Option<&RunAs>,
    nproc: u64,
    file_bytes: u64,
) -> std::io::Result<()> {
    use nix::sys::resource::{setrlimit, Resource};
    let err = |e: nix::Error| std::io::Error::from_raw_os_error(e as i32);
    // The keeper's mask is inherited through fork and exec; an ignored
    // signal stays ignored across exec.
    nix::sys::signal::SigSet::empty()
        .thread_set_mask()
        .map_err(err)?;
    for signal in 1..=libc::SIGRTMAX() {
        if signal != libc::SIGKILL && signal != libc::SIGSTOP {
            // SAFETY: resetting a disposition; refused numbers (the C
            // library's own) are left as they are.
            unsafe { libc::signal(signal, libc::SIG_DFL) };
        }
    }
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
        if libc::chdir(workspace.as_ptr()) != 0 {
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
