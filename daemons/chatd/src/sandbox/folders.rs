//! The chat's folders a sandbox binds: made, and handed to the commands'
//! user when chatd runs as root (the shared workspace as a folder only).

use std::path::{Path, PathBuf};

use super::lockdown::{Bind, AGENT_FOLDER};
use super::{SandboxError, Sandboxes};

impl Sandboxes {
    /// The chat's own folders (under the data folder) among its binds: all
    /// three, but the workspace of a shared chat, which is the box's.
    pub(super) fn own_folders_of(&self, chat: &str) -> Vec<PathBuf> {
        let shared = self.inner.folders.is_shared(chat);
        self.binds_of(chat)
            .into_iter()
            .filter(|b| !(shared && b.inside == "/workspace") && b.inside != AGENT_FOLDER)
            .map(|b| b.source)
            .collect()
    }

    /// Makes the chat's folders and answers the bind list. The commands'
    /// user must be able to write them: chatd running as root hands them to
    /// it; otherwise they must be chatd's own user.
    ///
    /// As root, the chat's own folders are handed over with everything in
    /// them; the shared workspace only as the folder itself, so the
    /// commands can make files in it. Its contents are left alone: they are
    /// the box's (other chats', file triggers', the person's), a recursive
    /// chown would take them from their owners and walk the whole tree at
    /// every start. Files chatd's tools write there as root stay root's
    /// (chatd runs as root in tests only).
    pub(super) fn prepare_folders(&self, chat: &str) -> Result<Vec<Bind>, SandboxError> {
        let (uid, gid) = self.inner.user;
        let me = nix::unistd::geteuid();
        if !me.is_root() && me.as_raw() != uid {
            return Err(SandboxError::Unavailable(format!(
                "the sandbox's commands run as uid {uid} ([chatd.sandbox] user) but the chat's \
                 folders belong to chatd's uid {me}: leave `user` empty to use chatd's own"
            )));
        }
        let binds = self.binds_of(chat);
        let own = self.own_folders_of(chat);
        for bind in &binds {
            let path = &bind.source;
            // The agent's folder is the owner's: never made, chmod-ed or handed over.
            if bind.inside == AGENT_FOLDER {
                if !path.is_dir() {
                    return Err(SandboxError::Unavailable(format!(
                        "the agent's folder {} is missing",
                        path.display()
                    )));
                }
                continue;
            }
            tandem_shared::fsmode::private_dir(path).map_err(|e| {
                SandboxError::Unavailable(format!("could not make {}: {e}", path.display()))
            })?;
            if me.is_root() {
                let handed = if own.contains(path) {
                    hand_over(path, uid, gid)
                } else {
                    hand_over_folder(path, uid, gid).map(drop)
                };
                handed.map_err(|e| {
                    SandboxError::Unavailable(format!(
                        "could not hand {} to uid {uid}: {e}",
                        path.display()
                    ))
                })?;
            }
        }
        Ok(binds)
    }

    /// Before a command, when chatd runs as root: what chatd's tools wrote
    /// in the chat's own folders since goes to the commands' user. Never the
    /// shared workspace: handed over as a folder at the start (see
    /// `prepare_folders`), its contents are not chatd's to give away, and
    /// walking it at every command would cost as much as the tree is big.
    pub async fn hand_over_folders(&self, chat: &str) {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let (uid, gid) = self.inner.user;
        let folders = self.own_folders_of(chat);
        let chat = chat.to_string();
        let _ = tokio::task::spawn_blocking(move || {
            for path in folders {
                if let Err(err) = hand_over(&path, uid, gid) {
                    tracing::warn!(chat, path = %path.display(), error = %err,
                        "could not hand a folder to the sandbox's user");
                }
            }
        })
        .await;
    }
}

/// Gives the folder itself (not what is in it) to `uid:gid`; answers it open.
fn hand_over_folder(dir: &Path, uid: u32, gid: u32) -> std::io::Result<std::os::fd::OwnedFd> {
    use nix::fcntl::{openat, OFlag, AT_FDCWD};
    use nix::sys::stat::{fstat, Mode};

    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    // The folder itself is chatd's own path (the data folder's, or the
    // configured shared one), made by chatd.
    let folder = openat(AT_FDCWD, dir, flags, Mode::empty())?;
    let st = fstat(&folder)?;
    if st.st_uid != uid || st.st_gid != gid {
        nix::unistd::fchown(
            &folder,
            Some(nix::unistd::Uid::from_raw(uid)),
            Some(nix::unistd::Gid::from_raw(gid)),
        )?;
    }
    Ok(folder)
}

/// Gives `dir` and everything under it to `uid:gid` (chatd as root only).
/// A running command may change the tree meanwhile, so every step is made
/// from an open folder, never by path: entries are stat'ed and chowned
/// without following links (`AT_SYMLINK_NOFOLLOW`), and folders are entered
/// with `O_NOFOLLOW`, so a folder swapped for a link to /etc is skipped,
/// never walked. Bounded: 200,000 entries.
fn hand_over(dir: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    use nix::dir::Dir;
    use nix::fcntl::{openat, AtFlags, OFlag};
    use nix::sys::stat::{fstatat, Mode};
    use std::os::fd::OwnedFd;

    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let owner = Some(nix::unistd::Uid::from_raw(uid));
    let group = Some(nix::unistd::Gid::from_raw(gid));
    let root = hand_over_folder(dir, uid, gid)?;
    let mut pending: Vec<OwnedFd> = vec![root];
    let mut seen = 0usize;
    while let Some(folder) = pending.pop() {
        let Ok(listing) = Dir::from_fd(folder.try_clone()?) else {
            continue;
        };
        let mut names = Vec::new();
        let mut listing = listing;
        for entry in listing.iter() {
            let Ok(entry) = entry else { break };
            let name = entry.file_name().to_owned();
            if matches!(name.to_bytes(), b"." | b"..") {
                continue;
            }
            names.push(name);
        }
        for name in names {
            seen += 1;
            if seen > 200_000 {
                return Ok(());
            }
            // Gone meanwhile: nothing to hand over.
            let Ok(st) = fstatat(&folder, name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW) else {
                continue;
            };
            if st.st_uid != uid || st.st_gid != gid {
                let _ = nix::unistd::fchownat(
                    &folder,
                    name.as_c_str(),
                    owner,
                    group,
                    AtFlags::AT_SYMLINK_NOFOLLOW,
                );
            }
            if nix::sys::stat::SFlag::from_bits_truncate(
                st.st_mode & nix::sys::stat::SFlag::S_IFMT.bits(),
            ) == nix::sys::stat::SFlag::S_IFDIR
            {
                // A link put there since the stat fails to open: skipped.
                if let Ok(child) = openat(&folder, name.as_c_str(), flags, Mode::empty()) {
                    pending.push(child);
                }
            }
        }
    }
    Ok(())
}
