//! A saved agent's folder inside a chat's workspace: the chat's own folder
//! stays the root, and the agent's folder is reached at `folder/`
//! (`agent_folder::MOUNT`), read only when the agent may only read it. The
//! walk into it is the same checked walk, started from the folder's own
//! root; the name `folder` itself is the mount, never a file of the chat.

use std::os::fd::OwnedFd;
use std::path::PathBuf;

use nix::fcntl::{openat, OFlag, AT_FDCWD};
use nix::sys::stat::Mode;

use super::error::describe;
use super::{RelPath, ToolError, Workspace};
use crate::agent_folder::MOUNT;

/// Opens the agent's folder one name at a time from `/`, following no
/// link: its path was stored with links resolved, so a link found on the
/// way now (one a command planted) is refused, never followed elsewhere.
fn open_unlinked(path: &std::path::Path) -> nix::Result<OwnedFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let mut dir = openat(AT_FDCWD, "/", flags, Mode::empty())?;
    for part in path.components() {
        if let std::path::Component::Normal(name) = part {
            dir = openat(&dir, name, flags | OFlag::O_NOFOLLOW, Mode::empty())?;
        }
    }
    Ok(dir)
}

/// The agent's folder as a workspace reaches it.
#[derive(Debug, Clone)]
pub(super) struct MountPoint {
    pub(super) root: PathBuf,
    pub(super) read_only: bool,
}

impl Workspace {
    /// This workspace with the agent's folder at `folder/`, if there is one.
    pub fn with_mount(mut self, mount: Option<&crate::agent_folder::Mount>) -> Workspace {
        self.mount = mount.map(|m| MountPoint {
            root: m.path.clone(),
            read_only: m.read_only,
        });
        self
    }

    /// Whether `rel` is inside (or is) the agent's folder.
    pub(super) fn in_mount(&self, rel: &RelPath) -> bool {
        self.mount.is_some() && rel.parts.first().is_some_and(|p| p == MOUNT)
    }

    /// Whether `rel` is the agent's folder itself.
    pub(super) fn is_mount_point(&self, rel: &RelPath) -> bool {
        self.in_mount(rel) && rel.parts.len() == 1
    }

    /// Refuses a change at `rel` when it is the mount itself, or inside an
    /// agent's folder the chat may only read.
    pub(super) fn writable(&self, rel: &RelPath) -> Result<(), ToolError> {
        if self.is_mount_point(rel) {
            return Err(ToolError::new(format!(
                "`{MOUNT}` is the agent's folder itself; give a path inside it, like {MOUNT}/a.md"
            )));
        }
        match &self.mount {
            Some(mount) if mount.read_only && self.in_mount(rel) => Err(ToolError::new(format!(
                "`{rel}` is in the agent's folder, which this chat may only read; write in the \
                 chat's own folder instead (a path not under {MOUNT}/)"
            ))),
            _ => Ok(()),
        }
    }

    /// Where a walk to `rel` starts: the agent's folder (and one part of
    /// `rel` used) for a path under `folder/`, else the chat's root.
    pub(super) fn base(&self, rel: &RelPath, upto: usize) -> Result<(OwnedFd, usize), ToolError> {
        match &self.mount {
            Some(mount) if upto >= 1 && self.in_mount(rel) => {
                let fd = open_unlinked(&mount.root).map_err(|e| {
                    ToolError::new(format!(
                        "the agent's folder cannot be opened: {}",
                        describe(e)
                    ))
                })?;
                Ok((fd, 1))
            }
            _ => Ok((self.open_root()?, 0)),
        }
    }

    /// An absolute path inside the agent's folder, as `folder/…`.
    pub(super) fn mounted_path(&self, given: &std::path::Path) -> Option<PathBuf> {
        let mount = self.mount.as_ref()?;
        let rest = given.strip_prefix(&mount.root).ok()?;
        Some(PathBuf::from(MOUNT).join(rest))
    }
}
