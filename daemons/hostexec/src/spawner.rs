//! Starting keepers: from one long-lived thread (PR_SET_PDEATHSIG follows
//! the thread that forked), each in a process group of its own, each known
//! by pid until it is reaped; and the keeper as hostexecd holds it, signalled
//! through its pidfd.

use std::collections::BTreeSet;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use tandem_shared::sync::lock;
use tokio::sync::oneshot;

/// A keeper just started: itself, the socket to it, the call's output.
pub struct Spawned {
    pub keeper: Keeper,
    pub control: std::os::unix::net::UnixStream,
    pub output: OwnedFd,
}

/// A keeper process, signalled through its pidfd.
pub struct Keeper {
    pub pid: i32,
    pub start: u64,
    pub(crate) pidfd: Option<OwnedFd>,
}

impl Keeper {
    /// Waits (blocking, at most `bound`) for the keeper to exit: its pidfd
    /// turns readable. Whether it did.
    pub fn wait_exit(pid: i32, start: u64, pidfd: Option<OwnedFd>, bound: Duration) -> bool {
        use std::os::fd::AsRawFd;
        let until = Instant::now() + bound;
        loop {
            let gone = match &pidfd {
                Some(fd) => {
                    let mut p = libc::pollfd {
                        fd: fd.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // SAFETY: poll on one descriptor we own.
                    unsafe { libc::poll(&raw mut p, 1, 10) > 0 }
                }
                None => {
                    std::thread::sleep(Duration::from_millis(10));
                    crate::tree::stat_of(pid).is_none_or(|p| p.start != start || p.is_dead())
                }
            };
            if gone {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
        }
    }

    pub fn signal(&self, signal: i32) {
        match &self.pidfd {
            Some(fd) => {
                crate::tree::pidfd_signal(fd, signal);
            }
            None => {
                crate::tree::signal_exact(self.pid, self.start, signal);
            }
        }
    }
}

type SpawnReply = oneshot::Sender<std::io::Result<Spawned>>;

/// A keeper asked for: the reply, and descriptors it is to inherit as they
/// are numbered here (a server's stdin and stderr pipes).
struct Asked {
    reply: SpawnReply,
    inherit: Vec<OwnedFd>,
}

/// Starts keepers from one thread that lives as long as hostexecd: a
/// keeper's PR_SET_PDEATHSIG fires when the thread that forked it ends.
pub struct Spawner {
    tx: Mutex<std::sync::mpsc::Sender<Asked>>,
}

impl Spawner {
    pub fn start() -> std::io::Result<Spawner> {
        let (tx, rx) = std::sync::mpsc::channel::<Asked>();
        std::thread::Builder::new()
            .name("keeper-spawner".into())
            .spawn(move || {
                while let Ok(asked) = rx.recv() {
                    let _ = asked.reply.send(spawn_keeper(asked.inherit));
                }
            })?;
        Ok(Spawner { tx: Mutex::new(tx) })
    }

    pub async fn spawn(&self) -> std::io::Result<Spawned> {
        self.spawn_with(Vec::new()).await
    }

    /// A keeper that inherits `inherit` under the numbers they have here
    /// (close-on-exec descriptors: no other child gets them).
    pub async fn spawn_with(&self, inherit: Vec<OwnedFd>) -> std::io::Result<Spawned> {
        let (reply, answer) = oneshot::channel();
        lock(&self.tx)
            .send(Asked { reply, inherit })
            .map_err(|_| std::io::Error::other("the keeper spawner is gone"))?;
        answer
            .await
            .map_err(|_| std::io::Error::other("the keeper spawner is gone"))?
    }
}

/// Taken by the keeper spawner around `Command::spawn` and by the reaper
/// around `waitpid(-1)` and its sweep.
pub static SPAWNING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The pids of the keepers hostexecd started and has not reaped: its only
/// children. Any other child was reparented to it and is killed
/// (`sweep::adopted`).
pub static KEEPERS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

/// Whether `pid` is a keeper hostexecd started and has not reaped.
pub fn is_keeper(pid: i32) -> bool {
    lock(&KEEPERS).contains(&pid)
}

/// Forgets a keeper just reaped.
pub fn reaped(pid: i32) {
    lock(&KEEPERS).remove(&pid);
}

fn spawn_keeper(inherit: Vec<OwnedFd>) -> std::io::Result<Spawned> {
    use std::os::fd::AsRawFd;
    // 0, 1 and 2 are the keeper's socket and output: a descriptor handed
    // down under one of those numbers would be lost (hostexecd started with
    // them closed).
    if inherit.iter().any(|fd| fd.as_raw_fd() <= 2) {
        return Err(std::io::Error::other(
            "a descriptor to hand down is numbered 0, 1 or 2: start hostexecd with them open",
        ));
    }
    let (control, theirs) = std::os::unix::net::UnixStream::pair()?;
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(std::io::Error::from)?;
    let write2 = write.try_clone()?;
    let mut command = std::process::Command::new("/proc/self/exe");
    command
        .arg0("hostexecd")
        .arg("--keeper")
        .env_clear()
        .current_dir("/")
        // A group of its own: `kill -9 -<hostexecd's group>` (a shell job,
        // a supervisor) leaves the keeper to end its call.
        .process_group(0)
        .stdin(std::process::Stdio::from(OwnedFd::from(theirs)))
        .stdout(std::process::Stdio::from(write))
        .stderr(std::process::Stdio::from(write2));
    if !inherit.is_empty() {
        let fds: Vec<i32> = inherit.iter().map(|fd| fd.as_raw_fd()).collect();
        // SAFETY: only fcntl, which is async-signal-safe, runs between the
        // fork and the exec; it clears close-on-exec in the child alone.
        unsafe {
            command.pre_exec(move || {
                for fd in &fds {
                    if libc::fcntl(*fd, libc::F_SETFD, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
    }
    // Held while std's spawn may still wait for a child whose exec failed:
    // hostexecd's reaper must not take that child first (std would panic).
    // Known as a keeper before the reaper's sweep can see it.
    let child = {
        let _spawning = lock(&SPAWNING);
        let child = command.spawn()?;
        lock(&KEEPERS).insert(child.id() as i32);
        child
    };
    // The pipe's write ends and the keeper's socket go with the command;
    // the inherited descriptors are the keeper's now.
    drop(command);
    drop(inherit);
    let pid = child.id() as i32;
    // Reaped by hostexecd's SIGCHLD task, not through `child`.
    drop(child);
    let pidfd = crate::tree::pidfd_open(pid);
    let start = crate::tree::stat_of(pid).map(|p| p.start).unwrap_or(0);
    Ok(Spawned {
        keeper: Keeper { pid, start, pidfd },
        control,
        output: read,
    })
}
