//! A chat's folders as hostexecd readies them for a call: the workspace the
//! command works in (the chat's own `<chat_data>/workspaces/<chat>/`, or the
//! box's shared workspace for a shared chat: never another path), its HOME
//! `<chat_data>/homes/<chat>/home` (made again, and said so, when something
//! replaced it), and, when commands run as another user (`run_as`), the
//! workspace lent to that user for the call and given back to chatd's user
//! after: the chat's own tree, or the shared folder itself only (its
//! contents are not chatd's to give away).
//!
//! Every folder is opened from its parent's descriptor with O_NOFOLLOW, and
//! the lending walk works from descriptors too, never following a link, so
//! a link put anywhere in a chat's folders is never followed.

use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{Mode, SFlag};

use crate::config::HostexecConfig;
use crate::contain::{open_beneath, open_chat_data, open_folder};
use crate::keeper::RunAs;

/// The most entries a lending walk hands over (a bigger tree keeps the rest
/// as it was; the walk says so in the log).
pub const MAX_HANDED: usize = 200_000;

/// Which workspace a call works in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The chat's own, under chat_data.
    Own,
    /// The box's shared workspace.
    Shared,
}

/// The uid and gid files are given back to: chat_data's owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
}

/// Why a call cannot have its folders.
#[derive(Debug)]
pub enum Unready {
    /// The folder is there but cannot be used (a link, not a folder, out of
    /// reach): a person must change it; the message says how.
    Unusable(String),
    /// Something failed around it.
    Failed(std::io::Error),
}

impl From<std::io::Error> for Unready {
    fn from(e: std::io::Error) -> Unready {
        Unready::Failed(e)
    }
}

impl From<Errno> for Unready {
    fn from(e: Errno) -> Unready {
        Unready::Failed(e.into())
    }
}

/// The chat's own workspace.
pub fn own_workspace(config: &HostexecConfig, chat: &str) -> PathBuf {
    config.chat_data.join("workspaces").join(chat)
}

/// The chat's HOME.
pub fn home_of(config: &HostexecConfig, chat: &str) -> PathBuf {
    config.chat_data.join("homes").join(chat).join("home")
}

/// The workspace a call names, if hostexecd takes it: the chat's own (also
/// when none is named) or the shared one, compared as paths; the reason
/// otherwise.
pub fn workspace_of(
    config: &HostexecConfig,
    chat: &str,
    named: Option<&str>,
) -> Result<(PathBuf, Kind), String> {
    let own = own_workspace(config, chat);
    let Some(named) = named else {
        return Ok((own, Kind::Own));
    };
    let path = Path::new(named);
    if path == own {
        return Ok((own, Kind::Own));
    }
    if path == config.shared_workspace {
        return Ok((config.shared_workspace.clone(), Kind::Shared));
    }
    Err(format!(
        "{named:?} is neither this chat's workspace ({}) nor the shared workspace ({}): \
         hostexecd runs commands in no other folder",
        own.display(),
        config.shared_workspace.display()
    ))
}

/// A call's folders, ready.
#[derive(Debug)]
pub struct Ready {
    pub workspace: PathBuf,
    pub home: PathBuf,
    /// What was repaired, in words for the result.
    pub repaired: Option<String>,
}

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// What sits at `name` in `dir`, without following it.
fn kind_at(dir: &OwnedFd, name: &str) -> Option<SFlag> {
    nix::sys::stat::fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW)
        .ok()
        .map(|st| SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT)
}

/// Makes (0700) and opens the folder `name` in `dir`; `Ok(None)` when
/// something else is there. A folder made here is given to `owner`.
fn folder_in(dir: &OwnedFd, name: &str, owner: Option<Owner>) -> Result<Option<OwnedFd>, Unready> {
    let made = match nix::sys::stat::mkdirat(dir.as_fd(), name, Mode::from_bits_truncate(0o700)) {
        Ok(()) => true,
        Err(Errno::EEXIST) => false,
        Err(e) => return Err(e.into()),
    };
    match nix::fcntl::openat(dir.as_fd(), name, dir_flags(), Mode::empty()) {
        Ok(fd) => {
            if let (true, Some(o)) = (made, owner) {
                chown_fd(&fd, o)?;
            }
            Ok(Some(fd))
        }
        Err(Errno::ELOOP | Errno::ENOTDIR) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn chown_fd(fd: &OwnedFd, to: Owner) -> Result<(), Unready> {
    let st = nix::sys::stat::fstat(fd.as_fd())?;
    if st.st_uid != to.uid || st.st_gid != to.gid {
        nix::unistd::fchown(
            fd.as_fd(),
            Some(nix::unistd::Uid::from_raw(to.uid)),
            Some(nix::unistd::Gid::from_raw(to.gid)),
        )?;
    }
    Ok(())
}

fn not_a_folder(path: &Path, what: Option<SFlag>) -> String {
    let is = if what == Some(SFlag::S_IFLNK) {
        "is a symbolic link"
    } else {
        "is not a folder"
    };
    format!(
        "{} {is}: hostexecd never follows or replaces it there; make it a folder again \
         (or remove it, and hostexecd makes it)",
        path.display()
    )
}

/// Readies the call's folders: the workspace (`kind`, already checked by
/// [`workspace_of`]), the home (repaired when needed), and with `run_as`
/// the workspace lent to that user.
pub fn ready(
    config: &HostexecConfig,
    chat: &str,
    kind: Kind,
    run_as: Option<&RunAs>,
    owner: Owner,
) -> Result<Ready, Unready> {
    let data = open_chat_data(&config.chat_data).map_err(|e| {
        Unready::Unusable(format!(
            "chatd's data folder {} cannot be opened: {e}",
            config.chat_data.display()
        ))
    })?;
    // Folders hostexecd makes as root for chatd's side are chatd's user's.
    let for_chatd = run_as.map(|_| owner);
    let workspace = match kind {
        Kind::Own => {
            let Some(all) = folder_in(&data, "workspaces", for_chatd)? else {
                let at = config.chat_data.join("workspaces");
                return Err(Unready::Unusable(not_a_folder(
                    &at,
                    kind_at(&data, "workspaces"),
                )));
            };
            let path = own_workspace(config, chat);
            match folder_in(&all, chat, for_chatd)? {
                Some(fd) => (path, fd),
                None => return Err(Unready::Unusable(not_a_folder(&path, kind_at(&all, chat)))),
            }
        }
        Kind::Shared => {
            let path = config.shared_workspace.clone();
            let fd = match open_folder(&path) {
                Ok(fd) => fd,
                Err(Errno::ENOENT) => {
                    return Err(Unready::Unusable(format!(
                        "the shared workspace {} does not exist (chatd makes it when it starts)",
                        path.display()
                    )))
                }
                Err(Errno::ELOOP | Errno::ENOTDIR) => {
                    let what = std::fs::symlink_metadata(&path).ok().map(|m| {
                        if m.is_symlink() {
                            SFlag::S_IFLNK
                        } else {
                            SFlag::S_IFREG
                        }
                    });
                    return Err(Unready::Unusable(not_a_folder(&path, what)));
                }
                Err(e) => return Err(e.into()),
            };
            if let (Some(user), Some(parent)) = (run_as, path.parent()) {
                reachable(parent, user).map_err(|why| {
                    Unready::Unusable(format!(
                        "the shared workspace is out of {}'s reach: {why}",
                        user.name
                    ))
                })?;
            }
            (path, fd)
        }
    };
    let (home, repaired) = ready_home(config, &data, chat, run_as, owner)?;
    if let Some(user) = run_as {
        let to = Owner {
            uid: user.uid,
            gid: user.gid,
        };
        lend(&workspace.1, kind, to);
    }
    Ok(Ready {
        workspace: workspace.0,
        home,
        repaired,
    })
}

/// Makes an MCP server's own HOME, `homes/<chat>/mcp-<id>` (0700, the
/// run-as user's), new for each server and removed at its end
/// ([`remove_server_home`]): never the commands' home, and outside their
/// view (`contain.rs` shows them only their workspace and home), so no
/// command can plant code the server would run with its secrets, nor read
/// what it leaves there.
pub fn ready_server_home(
    config: &HostexecConfig,
    chat: &str,
    id: &str,
    run_as: Option<&RunAs>,
    owner: Owner,
) -> Result<PathBuf, Unready> {
    let data = open_chat_data(&config.chat_data).map_err(|e| {
        Unready::Unusable(format!(
            "chatd's data folder {} cannot be opened: {e}",
            config.chat_data.display()
        ))
    })?;
    let (scratch_path, scratch) = homes_of(config, &data, chat, run_as.map(|_| owner))?;
    let name = format!("mcp-{id}");
    // The id is new: something already there was not made by hostexecd.
    if kind_at(&scratch, &name).is_some() {
        return Err(Unready::Unusable(format!(
            "{} is already there",
            scratch_path.join(&name).display()
        )));
    }
    let server_owner = run_as.map(|u| Owner {
        uid: u.uid,
        gid: u.gid,
    });
    let Some(home) = folder_in(&scratch, &name, server_owner)? else {
        return Err(Unready::Unusable(not_a_folder(
            &scratch_path.join(&name),
            kind_at(&scratch, &name),
        )));
    };
    nix::sys::stat::fchmod(home.as_fd(), Mode::from_bits_truncate(0o700))?;
    Ok(scratch_path.join(name))
}

/// Makes (0700, `for_chatd`'s when given) and opens `homes/<chat>/`, the
/// folder of the chat's homes; its path and descriptor.
fn homes_of(
    config: &HostexecConfig,
    data: &OwnedFd,
    chat: &str,
    for_chatd: Option<Owner>,
) -> Result<(PathBuf, OwnedFd), Unready> {
    let homes_path = config.chat_data.join("homes");
    let Some(homes) = folder_in(data, "homes", for_chatd)? else {
        return Err(Unready::Unusable(not_a_folder(
            &homes_path,
            kind_at(data, "homes"),
        )));
    };
    let scratch_path = homes_path.join(chat);
    let Some(scratch) = folder_in(&homes, chat, for_chatd)? else {
        return Err(Unready::Unusable(not_a_folder(
            &scratch_path,
            kind_at(&homes, chat),
        )));
    };
    Ok((scratch_path, scratch))
}

/// Removes a server's HOME at its end (std's walk never follows a link).
pub fn remove_server_home(home: &Path) {
    if let Err(e) = std::fs::remove_dir_all(home) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(home = %home.display(), error = %e, "a server's home could not be removed");
        }
    }
}

/// Makes `homes/<chat>/home` (0700, the run-as user's), putting back a
/// folder where a link or a file took its place: a link is removed (never
/// followed), a file kept in the new home as `former-home`.
fn ready_home(
    config: &HostexecConfig,
    data: &OwnedFd,
    chat: &str,
    run_as: Option<&RunAs>,
    owner: Owner,
) -> Result<(PathBuf, Option<String>), Unready> {
    // Commands reach their home through their own view (`contain.rs`), so
    // the folders above it need not let them pass: made (0700) for chatd's
    // user, whose sandboxes use `homes/<chat>/` too, and otherwise left as
    // they are.
    let (scratch_path, scratch) = homes_of(config, data, chat, run_as.map(|_| owner))?;
    let mut repaired = None;
    let mut kept_file = false;
    match kind_at(&scratch, "home") {
        None | Some(SFlag::S_IFDIR) => {}
        Some(SFlag::S_IFLNK) => {
            nix::unistd::unlinkat(
                scratch.as_fd(),
                "home",
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            )?;
            repaired = Some(
                "the chat's home had been replaced by a symbolic link: hostexecd removed the link \
                 (never following it) and made the home a folder again"
                    .to_string(),
            );
        }
        Some(_) => {
            nix::fcntl::renameat(scratch.as_fd(), "home", scratch.as_fd(), "home.former")?;
            kept_file = true;
            repaired = Some(
                "the chat's home had been replaced by a file: hostexecd made the home a folder \
                 again and kept the file there as former-home"
                    .to_string(),
            );
        }
    }
    let home_owner = run_as.map(|u| Owner {
        uid: u.uid,
        gid: u.gid,
    });
    let Some(home) = folder_in(&scratch, "home", home_owner)? else {
        let path = scratch_path.join("home");
        return Err(Unready::Unusable(not_a_folder(
            &path,
            kind_at(&scratch, "home"),
        )));
    };
    if let Some(o) = home_owner {
        chown_fd(&home, o)?;
    }
    nix::sys::stat::fchmod(home.as_fd(), Mode::from_bits_truncate(0o700))?;
    if kept_file {
        nix::fcntl::renameat(scratch.as_fd(), "home.former", home.as_fd(), "former-home")?;
        if let Some(o) = home_owner {
            let _ = nix::unistd::fchownat(
                home.as_fd(),
                "former-home",
                Some(nix::unistd::Uid::from_raw(o.uid)),
                Some(nix::unistd::Gid::from_raw(o.gid)),
                AtFlags::AT_SYMLINK_NOFOLLOW,
            );
        }
    }
    Ok((scratch_path.join("home"), repaired))
}

/// Lends the workspace open at `fd` to `to`: the whole tree of the chat's
/// own, the shared folder itself only.
fn lend(fd: &OwnedFd, kind: Kind, to: Owner) {
    let handed = match kind {
        Kind::Own => hand_over(fd, to),
        Kind::Shared => chown_fd(fd, to).map(|_| 1).map_err(|_| Errno::EPERM),
    };
    if let Err(e) = handed {
        tracing::warn!(uid = to.uid, error = %e, "the workspace could not be lent to the commands' user");
    }
}

/// Gives the workspace back to `owner` after a call (or after a restart,
/// for a call that did not end): the chat's own tree, the shared folder
/// itself only. What cannot be opened (gone, made a link) is left.
pub fn give_back(config: &HostexecConfig, workspace: &Path, owner: Owner) {
    let (fd, kind) = if workspace == config.shared_workspace {
        (open_folder(workspace), Kind::Shared)
    } else {
        let fd = workspace
            .strip_prefix(&config.chat_data)
            .map_err(|_| Errno::EINVAL)
            .and_then(|rel| open_beneath(&open_chat_data(&config.chat_data)?, rel));
        (fd, Kind::Own)
    };
    match fd {
        Ok(fd) => lend(&fd, kind, owner),
        Err(e) => {
            tracing::warn!(workspace = %workspace.display(), error = %e, "the workspace could not be given back")
        }
    }
}

/// Gives the folder open at `root` and everything under it to `to`, from
/// descriptors: entries are stat'ed and chowned without following links,
/// folders entered with O_NOFOLLOW (one swapped for a link is skipped),
/// at most [`MAX_HANDED`] entries. chown clears set-user-id and set-group-id
/// bits of executables, so nothing a command set up runs as chatd's user.
/// Returns how many entries it handed over.
pub fn hand_over(root: &OwnedFd, to: Owner) -> nix::Result<usize> {
    chown_fd(root, to).map_err(|_| Errno::EPERM)?;
    let owner = Some(nix::unistd::Uid::from_raw(to.uid));
    let group = Some(nix::unistd::Gid::from_raw(to.gid));
    let mut pending: Vec<OwnedFd> = vec![root.try_clone().map_err(|_| Errno::EMFILE)?];
    let mut seen = 0usize;
    while let Some(folder) = pending.pop() {
        let Ok(copy) = folder.try_clone() else {
            continue;
        };
        let Ok(mut listing) = nix::dir::Dir::from_fd(copy) else {
            continue;
        };
        let names: Vec<CString> = listing
            .iter()
            .map_while(Result::ok)
            .map(|e| e.file_name().to_owned())
            .filter(|n| !matches!(n.to_bytes(), b"." | b".."))
            .collect();
        for name in names {
            seen += 1;
            if seen > MAX_HANDED {
                tracing::warn!(
                    limit = MAX_HANDED,
                    "a workspace has more entries than are handed over; the rest keep their owner"
                );
                return Ok(seen - 1);
            }
            let name: &CStr = &name;
            let Ok(st) =
                nix::sys::stat::fstatat(folder.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW)
            else {
                continue;
            };
            if st.st_uid != to.uid || st.st_gid != to.gid {
                let _ = nix::unistd::fchownat(
                    folder.as_fd(),
                    name,
                    owner,
                    group,
                    AtFlags::AT_SYMLINK_NOFOLLOW,
                );
            }
            if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR {
                // A link put there since the stat fails to open: skipped.
                if let Ok(child) =
                    nix::fcntl::openat(folder.as_fd(), name, dir_flags(), Mode::empty())
                {
                    pending.push(child);
                }
            }
        }
    }
    Ok(seen)
}

/// Whether `user` may pass through every folder from `/` down to `path`
/// (search permission): with `run_as`, the folders above chatd's data and
/// the shared workspace must be passable.
pub fn reachable(path: &Path, user: &RunAs) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let mut at = PathBuf::from("/");
    let mut folders = vec![at.clone()];
    for part in path.components().skip(1) {
        at.push(part);
        folders.push(at.clone());
    }
    for folder in folders {
        let meta = std::fs::metadata(&folder).map_err(|e| format!("{}: {e}", folder.display()))?;
        let mode = meta.mode();
        let ok = if meta.uid() == user.uid {
            mode & 0o100 != 0
        } else if meta.gid() == user.gid || user.groups.contains(&meta.gid()) {
            mode & 0o010 != 0
        } else {
            mode & 0o001 != 0
        };
        if !ok {
            return Err(format!(
                "{} (mode {:04o}, owner uid {}) cannot be passed through by {} (uid {}): \
                 give it o+x (chmod o+x) or choose a folder that user can reach",
                folder.display(),
                mode & 0o7777,
                meta.uid(),
                user.name,
                user.uid
            ));
        }
    }
    Ok(())
}

/// The user named `name`, with its groups.
pub fn resolve_user(name: &str) -> anyhow::Result<RunAs> {
    let user = nix::unistd::User::from_name(name)
        .map_err(|e| anyhow::anyhow!("looking up user {name:?}: {e}"))?
        .ok_or_else(|| anyhow::anyhow!("there is no user {name:?} on this machine"))?;
    let cname = CString::new(name)?;
    let groups = nix::unistd::getgrouplist(&cname, user.gid)
        .map(|g| g.into_iter().map(|g| g.as_raw()).collect())
        .unwrap_or_else(|_| vec![user.gid.as_raw()]);
    Ok(RunAs {
        name: name.to_string(),
        uid: user.uid.as_raw(),
        gid: user.gid.as_raw(),
        groups,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &Path) -> HostexecConfig {
        HostexecConfig {
            chat_data: dir.join("chat"),
            shared_workspace: dir.join("shared"),
            ..HostexecConfig::default()
        }
    }

    #[test]
    fn only_the_chats_own_workspace_or_the_shared_one_is_taken() {
        let c = config(Path::new("/box"));
        let check = |named: Option<&str>, expect: Result<(&str, Kind), &str>| {
            let got = workspace_of(&c, "c_1", named);
            match (got, expect) {
                (Ok((path, kind)), Ok((want, want_kind))) => {
                    assert_eq!((path.as_path(), kind), (Path::new(want), want_kind))
                }
                (Err(why), Err(part)) => assert!(why.contains(part), "{why}"),
                (got, expect) => panic!("{named:?}: {got:?}, expected {expect:?}"),
            }
        };
        check(None, Ok(("/box/chat/workspaces/c_1", Kind::Own)));
        check(
            Some("/box/chat/workspaces/c_1/"),
            Ok(("/box/chat/workspaces/c_1", Kind::Own)),
        );
        check(Some("/box/shared"), Ok(("/box/shared", Kind::Shared)));
        check(Some("/box/chat/workspaces/c_2"), Err("no other folder"));
        check(Some("/box/chat/workspaces/c_1/.."), Err("neither"));
        check(Some("workspaces/c_1"), Err("neither"));
        check(Some("/etc"), Err("/box/shared"));
    }

    #[test]
    fn chatd_data_folder_may_be_a_link_to_another_disk() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("disk")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("disk"), dir.path().join("chat")).unwrap();
        let c = config(dir.path());
        let me = Owner {
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
        };
        let ready = ready(&c, "c_1", Kind::Own, None, me).unwrap();
        assert!(dir.path().join("disk/workspaces/c_1").is_dir());
        assert!(ready.home.is_dir());
    }

    #[test]
    fn a_home_replaced_by_a_link_or_a_file_is_made_again() {
        let dir = tempfile::tempdir().unwrap();
        let c = config(dir.path());
        std::fs::create_dir_all(&c.chat_data).unwrap();
        let me = Owner {
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
        };
        let first = ready(&c, "c_1", Kind::Own, None, me).unwrap();
        assert!(first.repaired.is_none());
        assert_eq!(first.workspace, c.chat_data.join("workspaces/c_1"));
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::remove_dir(&first.home).unwrap();
        std::os::unix::fs::symlink(&outside, &first.home).unwrap();
        let again = ready(&c, "c_1", Kind::Own, None, me).unwrap();
        assert!(again.repaired.unwrap().contains("symbolic link"));
        assert!(first.home.is_dir() && !first.home.is_symlink());
        std::fs::remove_dir(&first.home).unwrap();
        std::fs::write(&first.home, "data").unwrap();
        let again = ready(&c, "c_1", Kind::Own, None, me).unwrap();
        assert!(again.repaired.unwrap().contains("former-home"));
        assert_eq!(
            std::fs::read_to_string(first.home.join("former-home")).unwrap(),
            "data"
        );
        // A workspace that is a link is not used, nor its target touched.
        std::fs::create_dir_all(c.chat_data.join("workspaces")).unwrap();
        std::os::unix::fs::symlink(&outside, c.chat_data.join("workspaces/c_2")).unwrap();
        match ready(&c, "c_2", Kind::Own, None, me) {
            Err(Unready::Unusable(why)) => assert!(why.contains("is a symbolic link"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
        // A shared workspace that is not there is said plainly.
        match ready(&c, "c_3", Kind::Shared, None, me) {
            Err(Unready::Unusable(why)) => assert!(why.contains("does not exist"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
