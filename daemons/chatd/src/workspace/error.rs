//! `ToolError`, the one line a tool answers when it refuses or fails (naming
//! the path, never the workspace's place on disk), and the lines for each
//! cause a walk or a write meets.

use std::fmt;
use std::os::fd::OwnedFd;

use super::{kind_at, EntryKind, RelPath};
use nix::errno::Errno;

/// A refusal or failure, one line naming the path, for a model and a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError {
    message: String,
    /// The path (or a folder on it) does not exist; anything else is a refusal.
    missing: bool,
}

impl ToolError {
    pub fn new(message: impl Into<String>) -> ToolError {
        ToolError {
            message: message.into(),
            missing: false,
        }
    }

    pub(super) fn missing(message: impl Into<String>) -> ToolError {
        ToolError {
            message: message.into(),
            missing: true,
        }
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    /// True when the path was checked and simply is not there (an HTTP 404,
    /// where a refused path is a 400).
    pub fn is_missing(&self) -> bool {
        self.missing
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ToolError {}

/// Why folder `rel.parts[i]` could not be opened, from inside `parent`.
pub(super) fn folder_error(parent: &OwnedFd, rel: &RelPath, i: usize, errno: Errno) -> ToolError {
    let through = rel.prefix(i + 1);
    let link = || {
        ToolError::new(format!(
            "`{rel}` goes through a symlink (`{through}`); the workspace does not follow links"
        ))
    };
    match errno {
        Errno::ELOOP => link(),
        // O_DIRECTORY on a link says ENOTDIR: look again to tell which it is.
        Errno::ENOTDIR => match kind_at(parent, &rel.parts[i]) {
            Some(EntryKind::Link) => link(),
            Some(kind) if kind != EntryKind::Dir => ToolError::new(format!(
                "`{rel}` goes through `{through}`, which is {}, not a folder",
                kind.described()
            )),
            _ => ToolError::new(format!(
                "`{rel}`: `{through}` changed while it was being opened; try again"
            )),
        },
        Errno::ENOENT => ToolError::missing(format!(
            "`{rel}` does not exist (there is no folder `{through}`); list_files shows what does"
        )),
        e => ToolError::new(format!(
            "cannot open folder `{through}` for `{rel}`: {}",
            describe(e)
        )),
    }
}

pub(super) fn write_error(rel: &RelPath, errno: Errno) -> ToolError {
    match errno {
        // The verified folder was deleted under us.
        Errno::ENOENT => ToolError::new(format!(
            "cannot write `{rel}`: its folder was removed while it was being written; try again"
        )),
        e => ToolError::new(format!("cannot write `{rel}`: {}", describe(e))),
    }
}

pub(super) fn link_refused(rel: &RelPath) -> ToolError {
    ToolError::new(format!(
        "`{rel}` is a symlink; the workspace does not follow links"
    ))
}

pub(super) fn not_found(rel: &RelPath) -> ToolError {
    ToolError::missing(format!(
        "`{rel}` does not exist; list_files shows what does"
    ))
}

/// A short cause without any path (the caller names the path).
pub(super) fn describe(errno: Errno) -> String {
    match errno {
        Errno::ENOENT => "it does not exist".into(),
        Errno::EACCES | Errno::EPERM => "permission denied".into(),
        Errno::ENOSPC => "no space left on the disk".into(),
        Errno::EDQUOT => "the disk quota is used up".into(),
        Errno::EROFS => "the file system is read-only".into(),
        Errno::ENAMETOOLONG => "a name in the path is too long".into(),
        Errno::EISDIR => "it is a folder".into(),
        Errno::ENOTEMPTY => "a folder is in the way".into(),
        Errno::EMFILE | Errno::ENFILE => "too many open files; try again".into(),
        e => e.desc().to_lowercase(),
    }
}
