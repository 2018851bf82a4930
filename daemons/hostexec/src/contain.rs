//! A call's containment: a PID namespace and a mount namespace of its own,
//! made by the keeper before the command starts.
//!
//! The PID namespace is what ends a call: its first process (the call's
//! init, a child of the keeper) runs bash, and when that init dies the
//! kernel kills every other process in the namespace and waits for them,
//! however they forked or detached (a fork-walker that outruns any walk of
//! /proc included). A command cannot name a process outside its namespace
//! (kill, ptrace and pidfds take pids of its own namespace), so it cannot
//! stop its keeper or hostexecd, nor another call's command.
//!
//! The mount namespace is what a call sees of the chats: chatd's data folder
//! is covered by a small read-only tmpfs holding only this chat's workspace
//! and home (bound in from descriptors opened without following links), so
//! other chats' folders, chatd's database and keys are not there. hostexecd's
//! own data and socket folders, and the shared workspace for a chat that does
//! not use it, are covered by empty read-only tmpfs. Init mounts a /proc of
//! the namespace, so only the call's processes are listed.
//!
//! hostexecd as root makes the namespaces itself; as a plain user it first
//! makes a user namespace that maps only its own uid and gid, in which it may
//! make the others. Nothing here runs when the namespaces cannot be made: the
//! call is refused with the reason.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::fcntl::OFlag;
use nix::mount::MsFlags;
use nix::sched::CloneFlags;
use nix::sys::stat::Mode;
use serde::{Deserialize, Serialize};

/// How the namespaces are made.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub enum Namespaces {
    /// hostexecd is root: it makes them directly.
    AsRoot,
    /// hostexecd is a plain user: a user namespace first, mapping only this
    /// uid and gid to themselves (so the command stays this user).
    InUserNamespace { uid: u32, gid: u32 },
}

/// What the call sees of the chats' folders.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct View {
    /// chatd's data folder: covered, only the two folders below shown.
    pub chat_data: PathBuf,
    /// The chat's workspace (its own under chat_data, or the shared one).
    pub workspace: PathBuf,
    /// The command's HOME, `<chat_data>/homes/<chat>/home`.
    pub home: PathBuf,
    /// Folders covered by an empty tmpfs (those that exist).
    pub hidden: Vec<PathBuf>,
}

/// Makes the keeper's own user (when needed), mount and PID namespaces and
/// the call's view of the folders. The keeper's next child is the init of
/// the new PID namespace. The keeper must be single-threaded.
pub fn enter(namespaces: Namespaces, view: &View) -> Result<(), String> {
    if let Namespaces::InUserNamespace { uid, gid } = namespaces {
        nix::sched::unshare(CloneFlags::CLONE_NEWUSER).map_err(|e| {
            format!(
                "a user namespace could not be made ({e}): this kernel or a security module \
                 (e.g. AppArmor's restrict_unprivileged_userns, or the unit's \
                 RestrictNamespaces=) refuses them to this user; allow user namespaces for \
                 hostexecd, or run it as root with run_as"
            )
        })?;
        write_map("/proc/self/setgroups", "deny")?;
        write_map("/proc/self/uid_map", &format!("{uid} {uid} 1\n"))?;
        write_map("/proc/self/gid_map", &format!("{gid} {gid} 1\n"))?;
    }
    nix::sched::unshare(CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWPID)
        .map_err(|e| format!("the call's PID and mount namespaces could not be made: {e}"))?;
    make_view(view)
}

fn write_map(file: &str, text: &str) -> Result<(), String> {
    std::fs::write(file, text).map_err(|e| format!("writing {file}: {e}"))
}

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// Opens `rel` below `dir` one folder at a time, never following a link.
pub fn open_beneath(dir: &OwnedFd, rel: &Path) -> nix::Result<OwnedFd> {
    use std::os::fd::AsFd;
    let mut at = dir.try_clone().map_err(|_| nix::Error::EMFILE)?;
    for part in rel.components() {
        let Component::Normal(name) = part else {
            return Err(nix::Error::EINVAL);
        };
        at = nix::fcntl::openat(at.as_fd(), name, dir_flags(), Mode::empty())?;
    }
    Ok(at)
}

/// Opens a folder whose own last part is never a link (the folders above
/// it are the operator's).
pub fn open_folder(path: &Path) -> nix::Result<OwnedFd> {
    nix::fcntl::open(path, dir_flags(), Mode::empty())
}

/// Opens chatd's data folder as configured, a link to it included (it may
/// live on another disk): the folders below it are walked without links.
pub fn open_chat_data(path: &Path) -> nix::Result<OwnedFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    nix::fcntl::open(path, flags, Mode::empty())
}

/// Whether `a` is `b` or below it.
fn within(a: &Path, b: &Path) -> bool {
    a.starts_with(b)
}

fn mount_err<'a>(what: &str, path: &'a Path) -> impl Fn(nix::Error) -> String + 'a {
    let what = what.to_string();
    move |e| format!("{what} {}: {e}", path.display())
}

fn make_view(view: &View) -> Result<(), String> {
    let none = None::<&str>;
    // Nothing mounted here reaches the machine's namespace, or back.
    nix::mount::mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_PRIVATE, none)
        .map_err(|e| format!("making the call's mounts private: {e}"))?;
    let data = open_chat_data(&view.chat_data)
        .map_err(|e| format!("opening {}: {e}", view.chat_data.display()))?;
    let beneath = |path: &Path| -> Result<OwnedFd, String> {
        let rel = path
            .strip_prefix(&view.chat_data)
            .map_err(|_| format!("{} is not in {}", path.display(), view.chat_data.display()))?;
        open_beneath(&data, rel)
            .map_err(|e| format!("opening {} without following links: {e}", path.display()))
    };
    let workspace_inside = within(&view.workspace, &view.chat_data);
    let workspace = if workspace_inside {
        beneath(&view.workspace)?
    } else {
        open_folder(&view.workspace).map_err(|e| {
            format!(
                "opening {} without following links: {e}",
                view.workspace.display()
            )
        })?
    };
    let home = beneath(&view.home)?;

    for folder in &view.hidden {
        // Covering a folder above chatd's data or the workspace would hide
        // them; one below chatd's data is covered with it.
        let shown = [&view.chat_data, &view.workspace];
        if shown.iter().any(|s| within(s, folder) || within(folder, s)) || !folder.is_dir() {
            continue;
        }
        nix::mount::mount(
            Some("tmpfs"),
            folder,
            Some("tmpfs"),
            MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            Some("size=4k,nr_inodes=4,mode=000"),
        )
        .map_err(mount_err("covering", folder))?;
    }

    // chatd's data folder: a tmpfs with only this chat's two folders in it.
    nix::mount::mount(
        Some("tmpfs"),
        &view.chat_data,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("size=64k,nr_inodes=64,mode=0711"),
    )
    .map_err(mount_err("covering", &view.chat_data))?;
    let mut binds = vec![(&view.home, home)];
    if workspace_inside {
        binds.push((&view.workspace, workspace));
    }
    for (path, fd) in binds {
        make_mount_point(&view.chat_data, path)?;
        bind(&fd, path)?;
    }
    nix::mount::mount(
        none,
        &view.chat_data,
        none,
        MsFlags::MS_REMOUNT
            | MsFlags::MS_BIND
            | MsFlags::MS_RDONLY
            | MsFlags::MS_NOSUID
            | MsFlags::MS_NODEV
            | MsFlags::MS_NOEXEC,
        none,
    )
    .map_err(mount_err("making read-only", &view.chat_data))?;
    Ok(())
}

/// Makes the folders from `root` (the fresh tmpfs) down to `path`: passable
/// on the way, the last one the mount point.
fn make_mount_point(root: &Path, path: &Path) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    let rel = path
        .strip_prefix(root)
        .map_err(|_| format!("{} is not in {}", path.display(), root.display()))?;
    let mut at = root.to_path_buf();
    let parts: Vec<_> = rel.components().collect();
    for (i, part) in parts.iter().enumerate() {
        at.push(part);
        let mode = if i + 1 == parts.len() { 0o700 } else { 0o711 };
        match std::fs::DirBuilder::new().mode(mode).create(&at) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("making {}: {e}", at.display())),
        }
    }
    Ok(())
}

/// Binds the folder open at `fd` on `target`, then takes set-user-id and
/// device files away there, keeping the flags the mount had (a user
/// namespace may not clear flags its parent locked).
fn bind(fd: &OwnedFd, target: &Path) -> Result<(), String> {
    let none = None::<&str>;
    let source = format!("/proc/self/fd/{}", fd.as_raw_fd());
    nix::mount::mount(Some(source.as_str()), target, none, MsFlags::MS_BIND, none)
        .map_err(mount_err("binding", target))?;
    let mut flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    flags |= kept_flags(target);
    nix::mount::mount(none, target, none, flags, none).map_err(mount_err("remounting", target))
}

/// The per-mount flags `path`'s mount has now, as mount(2) flags.
fn kept_flags(path: &Path) -> MsFlags {
    let Ok(c) = CString::new(path.as_os_str().as_encoded_bytes()) else {
        return MsFlags::empty();
    };
    // SAFETY: statvfs fills the struct we give it.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &raw mut st) } != 0 {
        return MsFlags::empty();
    }
    let mut flags = MsFlags::empty();
    for (st_flag, ms) in [
        (libc::ST_RDONLY, MsFlags::MS_RDONLY),
        (libc::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (libc::ST_NOATIME, MsFlags::MS_NOATIME),
        (libc::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (libc::ST_RELATIME, MsFlags::MS_RELATIME),
    ] {
        if st.f_flag & st_flag != 0 {
            flags |= ms;
        }
    }
    flags
}

/// In the call's init: a /proc of the new PID namespace over the machine's.
pub fn mount_proc() -> Result<(), String> {
    nix::mount::mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(|e| format!("mounting the call's own /proc: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_beneath_a_folder_never_follows_a_link() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("a"), dir.path().join("link")).unwrap();
        let root = open_folder(dir.path()).unwrap();
        assert!(open_beneath(&root, Path::new("a/b")).is_ok());
        assert!(open_beneath(&root, Path::new("link/b")).is_err());
        assert!(open_beneath(&root, Path::new("a/../a")).is_err());
        assert!(open_folder(&dir.path().join("link")).is_err());
    }

    #[test]
    fn folders_within_each_other() {
        assert!(within(Path::new("/a/b"), Path::new("/a")));
        assert!(within(Path::new("/a"), Path::new("/a")));
        assert!(!within(Path::new("/ab"), Path::new("/a")));
    }
}
