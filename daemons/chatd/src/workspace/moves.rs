//! Removing and renaming a workspace file, and looking at one name, with the
//! same checked walk as every other access: the folders are opened without
//! following a link, and the last name is acted on within its folder's fd.

use nix::errno::Errno;
use nix::fcntl::{renameat, AtFlags};
use nix::sys::stat::fstatat;
use nix::unistd::{unlinkat, UnlinkatFlags};
use tandem_shared::tree;

use super::error::{describe, not_found};
use super::{EntryKind, Missing, RelPath, ToolError, Workspace};

impl Workspace {
    /// What one name is now, without following it; `None` when nothing is there.
    pub fn lstat(&self, path: &str) -> Result<Option<tree::Entry>, ToolError> {
        let rel = self.resolve(path)?;
        let Some(last) = rel.parts.last() else {
            return Ok(None);
        };
        if self.is_mount_point(&rel) {
            return Ok(None);
        }
        // A folder on the way that is gone (or is not a folder): no file.
        let Ok(parent) = self.open_dirs(&rel, rel.parts.len() - 1, Missing::Fail) else {
            return Ok(None);
        };
        match fstatat(&parent, last.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(tree::Entry {
                node: match EntryKind::of(&st) {
                    EntryKind::File => tree::Node::File,
                    EntryKind::Dir => tree::Node::Dir,
                    _ => tree::Node::Other,
                },
                size: st.st_size,
                mtime: (st.st_mtime, st.st_mtime_nsec),
                ino: st.st_ino,
            })),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(ToolError::new(format!(
                "cannot look at `{rel}`: {}",
                describe(e)
            ))),
        }
    }

    /// Removes a regular file (a link or a folder is refused).
    pub fn remove_file(&self, path: &str) -> Result<RelPath, ToolError> {
        let rel = self.resolve(path)?;
        let Some(last) = rel.parts.last() else {
            return Err(ToolError::new("`.` is the workspace folder, not a file"));
        };
        self.writable(&rel)?;
        let parent = self.open_dirs(&rel, rel.parts.len() - 1, Missing::Fail)?;
        check_file_at(&parent, &rel, last)?;
        unlinkat(&parent, last.as_str(), UnlinkatFlags::NoRemoveDir)
            .map_err(|e| ToolError::new(format!("cannot delete `{rel}`: {}", describe(e))))?;
        let _ = nix::unistd::fsync(&parent);
        Ok(rel)
    }

    /// Removes a folder if it is empty (a request taking back the folders it
    /// made); a folder with anything in it stays, and that is no error.
    pub fn remove_empty_dir(&self, path: &str) -> Result<(), ToolError> {
        let rel = self.resolve(path)?;
        let Some(last) = rel.parts.last() else {
            return Ok(());
        };
        if self.writable(&rel).is_err() {
            return Ok(());
        }
        let parent = self.open_dirs(&rel, rel.parts.len() - 1, Missing::Fail)?;
        match unlinkat(&parent, last.as_str(), UnlinkatFlags::RemoveDir) {
            Ok(()) | Err(Errno::ENOTEMPTY) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(ToolError::new(format!(
                "cannot remove `{rel}`: {}",
                describe(e)
            ))),
        }
    }

    /// Moves a regular file to a new name (missing folders made, 0700); an
    /// existing `to` is refused, never replaced.
    pub fn rename_file(&self, from: &str, to: &str) -> Result<(RelPath, RelPath), ToolError> {
        self.rename_file_with(from, to, false)
    }

    /// [`Workspace::rename_file`], replacing a regular file at `to` when
    /// `replace` (an upload that named the version it replaces).
    pub fn rename_file_with(
        &self,
        from: &str,
        to: &str,
        replace: bool,
    ) -> Result<(RelPath, RelPath), ToolError> {
        let from_rel = self.resolve(from)?;
        let to_rel = self.resolve(to)?;
        let (Some(from_last), Some(to_last)) = (from_rel.parts.last(), to_rel.parts.last()) else {
            return Err(ToolError::new("`.` is the workspace folder, not a file"));
        };
        self.writable(&from_rel)?;
        self.writable(&to_rel)?;
        let from_dir = self.open_dirs(&from_rel, from_rel.parts.len() - 1, Missing::Fail)?;
        check_file_at(&from_dir, &from_rel, from_last)?;
        let to_dir = self.open_dirs(&to_rel, to_rel.parts.len() - 1, Missing::Create)?;
        match fstatat(&to_dir, to_last.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Err(Errno::ENOENT) => {}
            Ok(st) if replace && EntryKind::of(&st) == EntryKind::File => {}
            Ok(_) => {
                return Err(ToolError::new(format!(
                    "`{to_rel}` already exists; delete it first or choose another name"
                )))
            }
            Err(e) => {
                return Err(ToolError::new(format!(
                    "cannot look at `{to_rel}`: {}",
                    describe(e)
                )))
            }
        }
        // Between two verified folders: names are replaced, never followed.
        renameat(&from_dir, from_last.as_str(), &to_dir, to_last.as_str()).map_err(|e| {
            ToolError::new(format!(
                "cannot move `{from_rel}` to `{to_rel}`: {}",
                describe(e)
            ))
        })?;
        let _ = nix::unistd::fsync(&from_dir);
        let _ = nix::unistd::fsync(&to_dir);
        Ok((from_rel, to_rel))
    }
}

fn check_file_at(dir: &std::os::fd::OwnedFd, rel: &RelPath, name: &str) -> Result<(), ToolError> {
    match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => super::check_regular(rel, EntryKind::of(&st)),
        Err(Errno::ENOENT) => Err(not_found(rel)),
        Err(e) => Err(ToolError::new(format!(
            "cannot look at `{rel}`: {}",
            describe(e)
        ))),
    }
}
