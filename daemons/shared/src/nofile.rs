//! The descriptor limit (`RLIMIT_NOFILE`): every daemon raises its soft
//! limit to the hard one at start (the soft default of 1,024 is far below
//! what a box allows), and the listeners size their caps to what it is
//! then (`listen::Limits::within_descriptors`).

use std::sync::OnceLock;

use nix::sys::resource::{getrlimit, setrlimit, Resource, RLIM_INFINITY};

/// What the start found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Raised {
    /// The soft limit the process started with.
    pub before: u64,
    /// The soft limit now.
    pub soft: u64,
    pub hard: u64,
    /// Whether raising was refused (a seccomp filter, a container's rules):
    /// the soft limit stayed where it was.
    pub refused: bool,
}

static RAISED: OnceLock<Raised> = OnceLock::new();

/// Raises the soft limit to the hard one, once a process; later calls say
/// what the first did.
pub fn raise() -> Raised {
    *RAISED.get_or_init(|| {
        let Ok((before, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
            return Raised {
                before: 1024,
                soft: 1024,
                hard: 1024,
                refused: true,
            };
        };
        // An unlimited hard limit still stops at the kernel's nr_open.
        let target = if hard == RLIM_INFINITY {
            std::fs::read_to_string("/proc/sys/fs/nr_open")
                .ok()
                .and_then(|t| t.trim().parse().ok())
                .unwrap_or(1 << 20)
        } else {
            hard
        };
        if before >= target {
            return Raised {
                before,
                soft: before,
                hard,
                refused: false,
            };
        }
        match setrlimit(Resource::RLIMIT_NOFILE, target, hard) {
            Ok(()) => Raised {
                before,
                soft: target,
                hard,
                refused: false,
            },
            Err(_) => Raised {
                before,
                soft: before,
                hard,
                refused: true,
            },
        }
    })
}

/// The soft limit now.
pub fn soft() -> u64 {
    getrlimit(Resource::RLIMIT_NOFILE)
        .map(|(soft, _)| soft)
        .unwrap_or(1024)
}
