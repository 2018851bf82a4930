//! One chat's workspace folder, which the agent tools read and write.
//!
//! A path from the model is never handed to the kernel as a whole: every
//! access opens the root, then each folder with `O_NOFOLLOW|O_DIRECTORY`
//! from the one before, so a symlink (planted, or swapped in while we walk)
//! is refused instead of followed. Writes go to a fresh temp file in the
//! verified folder and are renamed over the name within that same folder fd.

use std::ffi::CString;
use std::fmt;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{openat, renameat, AtFlags, OFlag, AT_FDCWD};
use nix::sys::stat::{fstat, fstatat, mkdirat, FileStat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};

/// How many entries a walk (list_files, grep) visits before it stops.
pub const WALK_LIMIT: usize = 20_000;
/// Deeper folders are not entered: each level holds one open fd.
const MAX_DEPTH: usize = 64;
/// chatd's own files in the workspace (todos, cut outputs); walks from the
/// root leave it out so grep does not find its own earlier results.
pub const TANDEM_DIR: &str = ".tandem";

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

    fn missing(message: impl Into<String>) -> ToolError {
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

/// A checked path inside the workspace: plain names, no `.`, `..` or empty parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelPath {
    parts: Vec<String>,
}

impl RelPath {
    pub fn parts(&self) -> &[String] {
        &self.parts
    }

    /// True for the workspace folder itself (`.`).
    pub fn is_root(&self) -> bool {
        self.parts.is_empty()
    }

    /// The first `n` parts, as a path for messages.
    fn prefix(&self, n: usize) -> String {
        self.parts[..n.min(self.parts.len())].join("/")
    }
}

impl fmt::Display for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.parts.is_empty() {
            f.write_str(".")
        } else {
            f.write_str(&self.parts.join("/"))
        }
    }
}

/// What a directory entry is, never following a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Dir,
    Link,
    Fifo,
    Socket,
    Device,
    Other,
}

impl EntryKind {
    fn of(stat: &FileStat) -> EntryKind {
        let format = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
        if format == SFlag::S_IFREG {
            EntryKind::File
        } else if format == SFlag::S_IFDIR {
            EntryKind::Dir
        } else if format == SFlag::S_IFLNK {
            EntryKind::Link
        } else if format == SFlag::S_IFIFO {
            EntryKind::Fifo
        } else if format == SFlag::S_IFSOCK {
            EntryKind::Socket
        } else if format == SFlag::S_IFCHR || format == SFlag::S_IFBLK {
            EntryKind::Device
        } else {
            EntryKind::Other
        }
    }

    /// "a FIFO", "a folder", ... for messages.
    pub fn described(self) -> &'static str {
        match self {
            EntryKind::File => "a regular file",
            EntryKind::Dir => "a folder",
            EntryKind::Link => "a symlink",
            EntryKind::Fifo => "a FIFO",
            EntryKind::Socket => "a socket",
            EntryKind::Device => "a device",
            EntryKind::Other => "a special file",
        }
    }
}

/// One entry found by a walk; `path` is relative to the workspace root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: String,
    pub kind: EntryKind,
    pub size: u64,
}

/// What a walk found, sorted by path.
#[derive(Debug, Default)]
pub struct Walk {
    pub entries: Vec<Entry>,
    /// The entry bound was reached: there is more than `entries` shows.
    pub stopped: bool,
    /// Folders left out because they were nested too deep.
    pub too_deep: usize,
}

/// A regular file opened for reading through the checked walk.
pub struct OpenFile {
    pub path: RelPath,
    pub file: File,
    pub size: u64,
}

#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
    /// The root with links resolved, so an absolute path given in either form is accepted.
    canonical: PathBuf,
}

impl Workspace {
    /// Opens (creating with mode 0700, parents too) the workspace at `root`.
    pub fn open(root: &Path) -> io::Result<Workspace> {
        let root = if root.is_absolute() {
            root.to_path_buf()
        } else {
            std::env::current_dir()?.join(root)
        };
        tandem_shared::fsmode::private_dir(&root)?;
        let canonical = std::fs::canonicalize(&root)?;
        Ok(Workspace { root, canonical })
    }

    /// The workspace at `root` as it is, neither made nor changed: a read
    /// from outside the tools (the files route). `NotFound` when it is not there.
    pub fn existing(root: &Path) -> io::Result<Workspace> {
        let root = if root.is_absolute() {
            root.to_path_buf()
        } else {
            std::env::current_dir()?.join(root)
        };
        let canonical = std::fs::canonicalize(&root)?;
        if !canonical.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "the workspace is not a folder",
            ));
        }
        Ok(Workspace { root, canonical })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Checks a path from a tool call and makes it relative to the root.
    pub fn resolve(&self, path: &str) -> Result<RelPath, ToolError> {
        if path.is_empty() {
            return Err(ToolError::new(
                "the path is empty; give a path inside the workspace, like notes/a.md",
            ));
        }
        if path.contains('\0') {
            return Err(ToolError::new(format!(
                "`{}` holds a NUL byte; give a plain path inside the workspace",
                path.replace('\0', "\\0")
            )));
        }
        let given = Path::new(path);
        let relative = if given.is_absolute() {
            match given
                .strip_prefix(&self.root)
                .or_else(|_| given.strip_prefix(&self.canonical))
            {
                Ok(rest) => rest,
                Err(_) => {
                    return Err(ToolError::new(format!(
                        "`{path}` is outside the workspace; give a path relative to it, like notes/a.md"
                    )))
                }
            }
        } else {
            given
        };
        let mut parts = Vec::new();
        for component in relative.components() {
            match component {
                Component::CurDir => {}
                Component::Normal(name) => match name.to_str() {
                    Some(name) => parts.push(name.to_string()),
                    // Unreachable from a &str, but never unwrap input.
                    None => return Err(ToolError::new(format!("`{path}` is not valid UTF-8"))),
                },
                Component::ParentDir => {
                    return Err(ToolError::new(format!(
                        "`{path}` goes up with `..`; paths must stay inside the workspace"
                    )))
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(ToolError::new(format!(
                        "`{path}` is outside the workspace; give a path relative to it, like notes/a.md"
                    )))
                }
            }
        }
        Ok(RelPath { parts })
    }

    fn open_root(&self) -> Result<OwnedFd, ToolError> {
        // The root itself is chatd's own path: links above it are trusted.
        openat(
            AT_FDCWD,
            self.root.as_path(),
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| {
            ToolError::new(format!(
                "the workspace folder cannot be opened: {}",
                describe(e)
            ))
        })
    }

    /// Opens the folders `rel.parts[..upto]` one at a time, never following a
    /// link; with `create`, makes missing folders (0700) on the way.
    fn open_dirs(&self, rel: &RelPath, upto: usize, create: bool) -> Result<OwnedFd, ToolError> {
        let mut dir = self.open_root()?;
        for (i, name) in rel.parts[..upto].iter().enumerate() {
            let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            let opened = match openat(&dir, name.as_str(), flags, Mode::empty()) {
                Err(Errno::ENOENT) if create => {
                    match mkdirat(&dir, name.as_str(), Mode::from_bits_truncate(0o700)) {
                        // Someone else made it first: the O_NOFOLLOW open below checks what it is.
                        Ok(()) | Err(Errno::EEXIST) => {}
                        Err(e) => {
                            return Err(ToolError::new(format!(
                                "cannot make folder `{}` for `{rel}`: {}",
                                rel.prefix(i + 1),
                                describe(e)
                            )))
                        }
                    }
                    openat(&dir, name.as_str(), flags, Mode::empty())
                }
                other => other,
            };
            dir = match opened {
                Ok(fd) => fd,
                Err(e) => return Err(folder_error(&dir, rel, i, e)),
            };
        }
        Ok(dir)
    }

    /// Opens a folder of the workspace (`.` is the root) for a walk.
    fn open_folder(&self, rel: &RelPath) -> Result<OwnedFd, ToolError> {
        if rel.is_root() {
            return self.open_root();
        }
        let parent = self.open_dirs(rel, rel.parts.len() - 1, false)?;
        let i = rel.parts.len() - 1;
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        match openat(&parent, rel.parts[i].as_str(), flags, Mode::empty()) {
            Ok(fd) => Ok(fd),
            Err(Errno::ENOTDIR) | Err(Errno::ELOOP) => {
                let kind = kind_at(&parent, &rel.parts[i]);
                Err(ToolError::new(match kind {
                    Some(EntryKind::Link) => {
                        format!("`{rel}` is a symlink; the workspace does not follow links")
                    }
                    Some(kind) => format!("`{rel}` is {}, not a folder", kind.described()),
                    None => format!("`{rel}` is not a folder"),
                }))
            }
            Err(Errno::ENOENT) => Err(not_found(rel)),
            Err(e) => Err(ToolError::new(format!(
                "cannot open `{rel}`: {}",
                describe(e)
            ))),
        }
    }

    /// What `path` is (a link is reported as a link) and its size.
    pub fn stat(&self, path: &str) -> Result<(RelPath, EntryKind, u64), ToolError> {
        let rel = self.resolve(path)?;
        let Some(last) = rel.parts.last() else {
            return Ok((rel, EntryKind::Dir, 0));
        };
        let parent = self.open_dirs(&rel, rel.parts.len() - 1, false)?;
        match fstatat(&parent, last.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => {
                let kind = EntryKind::of(&st);
                Ok((rel, kind, size_of(&st)))
            }
            Err(Errno::ENOENT) => Err(not_found(&rel)),
            Err(e) => Err(ToolError::new(format!(
                "cannot look at `{rel}`: {}",
                describe(e)
            ))),
        }
    }

    /// Opens a regular file for reading; anything else is refused before
    /// (and again after) the open, and a FIFO never blocks it.
    pub fn open_file(&self, path: &str) -> Result<OpenFile, ToolError> {
        let rel = self.resolve(path)?;
        let Some(last) = rel.parts.last() else {
            return Err(ToolError::new(
                "`.` is the workspace folder, not a file; list_files shows what it holds",
            ));
        };
        let parent = self.open_dirs(&rel, rel.parts.len() - 1, false)?;
        // Look first so a device or FIFO is not even opened.
        match fstatat(&parent, last.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => check_regular(&rel, EntryKind::of(&st))?,
            Err(Errno::ENOENT) => return Err(not_found(&rel)),
            Err(e) => {
                return Err(ToolError::new(format!(
                    "cannot look at `{rel}`: {}",
                    describe(e)
                )))
            }
        }
        let flags = OFlag::O_RDONLY
            | OFlag::O_NOFOLLOW
            | OFlag::O_NONBLOCK
            | OFlag::O_NOCTTY
            | OFlag::O_CLOEXEC;
        let fd = match openat(&parent, last.as_str(), flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ELOOP) => return Err(link_refused(&rel)),
            Err(Errno::ENXIO) => {
                return Err(ToolError::new(format!(
                    "`{rel}` is a socket, not a regular file"
                )))
            }
            Err(Errno::ENOENT) => return Err(not_found(&rel)),
            Err(e) => {
                return Err(ToolError::new(format!(
                    "cannot open `{rel}`: {}",
                    describe(e)
                )))
            }
        };
        // The name may have been swapped since the look: what we hold decides.
        let st = fstat(&fd)
            .map_err(|e| ToolError::new(format!("cannot look at `{rel}`: {}", describe(e))))?;
        check_regular(&rel, EntryKind::of(&st))?;
        Ok(OpenFile {
            size: size_of(&st),
            path: rel,
            file: File::from(fd),
        })
    }

    /// Reads a whole regular file of at most `max` bytes.
    pub fn read_all(&self, path: &str, max: u64) -> Result<(RelPath, Vec<u8>), ToolError> {
        use std::io::Read;
        let opened = self.open_file(path)?;
        let rel = opened.path;
        if opened.size > max {
            return Err(ToolError::new(format!(
                "`{rel}` is {} bytes; this works on files up to {} bytes",
                crate::tools::fit::commas(opened.size),
                crate::tools::fit::commas(max)
            )));
        }
        let mut bytes = Vec::with_capacity(opened.size as usize);
        // One byte over `max` tells a file that grew since the look.
        opened
            .file
            .take(max + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| ToolError::new(format!("cannot read `{rel}`: {e}")))?;
        if bytes.len() as u64 > max {
            return Err(ToolError::new(format!(
                "`{rel}` grew past {} bytes while being read",
                crate::tools::fit::commas(max)
            )));
        }
        Ok((rel, bytes))
    }

    /// Replaces (or creates) a regular file with `content`, all or nothing:
    /// temp file in the verified folder, fsync, rename over the name.
    /// Missing folders are made (0700). An existing file keeps its mode.
    pub fn write_file(&self, path: &str, content: &[u8]) -> Result<RelPath, ToolError> {
        let rel = self.resolve(path)?;
        let Some(last) = rel.parts.last() else {
            return Err(ToolError::new(
                "`.` is the workspace folder, not a file; give a file path like notes/a.md",
            ));
        };
        let dir = self.open_dirs(&rel, rel.parts.len() - 1, true)?;
        let mode = match fstatat(&dir, last.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => match EntryKind::of(&st) {
                // Permission bits only: never carry setuid/setgid over.
                EntryKind::File => st.st_mode & 0o777,
                EntryKind::Link => return Err(link_refused(&rel)),
                EntryKind::Dir => {
                    return Err(ToolError::new(format!(
                        "`{rel}` is a folder; give a file path inside it"
                    )))
                }
                kind => {
                    return Err(ToolError::new(format!(
                        "`{rel}` is {}, not a regular file; it is not replaced",
                        kind.described()
                    )))
                }
            },
            Err(Errno::ENOENT) => 0o600,
            Err(e) => {
                return Err(ToolError::new(format!(
                    "cannot look at `{rel}`: {}",
                    describe(e)
                )))
            }
        };
        let temp = temp_name(last);
        let fd = openat(
            &dir,
            temp.as_c_str(),
            OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )
        .map_err(|e| write_error(&rel, e))?;
        let mut file = File::from(fd);
        let written = (|| -> io::Result<()> {
            file.write_all(content)?;
            if mode != 0o600 {
                file.set_permissions(std::fs::Permissions::from_mode(mode))?;
            }
            file.sync_all()?;
            // Within the one verified folder: the name is replaced, never followed.
            renameat(&dir, temp.as_c_str(), &dir, last.as_str()).map_err(io::Error::from)
        })();
        if let Err(e) = written {
            let _ = unlinkat(&dir, temp.as_c_str(), UnlinkatFlags::NoRemoveDir);
            return Err(match e.raw_os_error() {
                Some(code) => write_error(&rel, Errno::from_raw(code)),
                None => ToolError::new(format!("cannot write `{rel}`: {e}")),
            });
        }
        // The rename is durable once the folder is synced; the data already is.
        let _ = nix::unistd::fsync(&dir);
        Ok(rel)
    }

    /// Lists everything under the folder `path` (`.` for the whole workspace),
    /// sorted by path, never following a link or entering `.git`; stops after
    /// `limit` entries.
    pub fn walk(&self, path: &str, limit: usize) -> Result<Walk, ToolError> {
        let rel = self.resolve(path)?;
        let dir = self.open_folder(&rel)?;
        let mut walk = Walk::default();
        let prefix = if rel.is_root() {
            String::new()
        } else {
            rel.to_string()
        };
        walk_dir(dir, &prefix, 0, limit, &mut walk);
        walk.entries.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(walk)
    }
}

fn walk_dir(fd: OwnedFd, prefix: &str, depth: usize, limit: usize, walk: &mut Walk) {
    let Ok(mut dir) = Dir::from_fd(fd) else {
        return;
    };
    let mut names: Vec<CString> = Vec::new();
    for entry in dir.iter() {
        let Ok(entry) = entry else { break };
        let name = entry.file_name();
        let bytes = name.to_bytes();
        if bytes == b"." || bytes == b".." || bytes == b".git" {
            continue;
        }
        if prefix.is_empty() && bytes == TANDEM_DIR.as_bytes() {
            continue;
        }
        names.push(name.to_owned());
        // A huge folder is not read past the bound.
        if walk.entries.len() + names.len() > limit {
            break;
        }
    }
    names.sort();
    for name in names {
        if walk.entries.len() >= limit {
            walk.stopped = true;
            return;
        }
        // Gone since the listing, or unreadable: left out.
        let Ok(st) = fstatat(&dir, name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW) else {
            continue;
        };
        let kind = EntryKind::of(&st);
        let shown = name.to_string_lossy();
        let path = if prefix.is_empty() {
            shown.into_owned()
        } else {
            format!("{prefix}/{shown}")
        };
        walk.entries.push(Entry {
            path: path.clone(),
            kind,
            size: size_of(&st),
        });
        if kind != EntryKind::Dir {
            continue;
        }
        if depth + 1 >= MAX_DEPTH {
            walk.too_deep += 1;
            continue;
        }
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        // Swapped for a link since the look: O_NOFOLLOW refuses it and it is skipped.
        if let Ok(child) = openat(&dir, name.as_c_str(), flags, Mode::empty()) {
            walk_dir(child, &path, depth + 1, limit, walk);
        }
        if walk.stopped {
            return;
        }
    }
}

/// Why folder `rel.parts[i]` could not be opened, from inside `parent`.
fn folder_error(parent: &OwnedFd, rel: &RelPath, i: usize, errno: Errno) -> ToolError {
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

fn kind_at(dir: &impl AsFd, name: &str) -> Option<EntryKind> {
    fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)
        .ok()
        .map(|st| EntryKind::of(&st))
}

fn check_regular(rel: &RelPath, kind: EntryKind) -> Result<(), ToolError> {
    match kind {
        EntryKind::File => Ok(()),
        EntryKind::Link => Err(link_refused(rel)),
        EntryKind::Dir => Err(ToolError::new(format!(
            "`{rel}` is a folder, not a regular file; list_files shows what it holds"
        ))),
        kind => Err(ToolError::new(format!(
            "`{rel}` is {}, not a regular file",
            kind.described()
        ))),
    }
}

fn write_error(rel: &RelPath, errno: Errno) -> ToolError {
    match errno {
        // The verified folder was deleted under us.
        Errno::ENOENT => ToolError::new(format!(
            "cannot write `{rel}`: its folder was removed while it was being written; try again"
        )),
        e => ToolError::new(format!("cannot write `{rel}`: {}", describe(e))),
    }
}

fn link_refused(rel: &RelPath) -> ToolError {
    ToolError::new(format!(
        "`{rel}` is a symlink; the workspace does not follow links"
    ))
}

fn not_found(rel: &RelPath) -> ToolError {
    ToolError::missing(format!(
        "`{rel}` does not exist; list_files shows what does"
    ))
}

fn size_of(st: &FileStat) -> u64 {
    u64::try_from(st.st_size).unwrap_or(0)
}

/// `.name.tandem-<random>.tmp`, short enough for any file name limit.
fn temp_name(name: &str) -> CString {
    let mut cut = name.len().min(100);
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    let random: u64 = rand::random();
    // The name came from a checked &str without NUL; the rest is ours.
    CString::new(format!(".{}.tandem-{random:016x}.tmp", &name[..cut]))
        .unwrap_or_else(|_| CString::from(c".tandem.tmp"))
}

/// A short cause without any path (the caller names the path).
fn describe(errno: Errno) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = Workspace::open(&dir.path().join("ws")).expect("open");
        (dir, ws)
    }

    #[test]
    fn open_makes_a_private_root() {
        let (_dir, ws) = ws();
        let mode = std::fs::metadata(ws.root())
            .expect("meta")
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn resolve_rules() {
        let (_dir, ws) = ws();
        let ok = |p: &str| ws.resolve(p).map(|r| r.to_string());
        assert_eq!(ok("notes/a.md").as_deref(), Ok("notes/a.md"));
        assert_eq!(ok("./x").as_deref(), Ok("x"));
        assert_eq!(ok("a/./b/").as_deref(), Ok("a/b"));
        assert_eq!(ok(".").as_deref(), Ok("."));
        let inside = format!("{}/notes/a.md", ws.root().display());
        assert_eq!(ok(&inside).as_deref(), Ok("notes/a.md"));
        for bad in ["", "a\0b", "../x", "a/../../x", "/etc/passwd", "a/.."] {
            let err = ws.resolve(bad).expect_err(bad);
            assert!(!err.message().is_empty());
        }
        assert!(ws
            .resolve("/etc/passwd")
            .expect_err("outside")
            .message()
            .contains("outside the workspace"));
        assert!(ws
            .resolve("a/../b")
            .expect_err("dotdot")
            .message()
            .contains(".."));
    }

    #[test]
    fn write_creates_folders_keeps_mode_and_leaves_no_temp() {
        let (_dir, ws) = ws();
        ws.write_file("a/b/c.txt", b"one").expect("write");
        let path = ws.root().join("a/b/c.txt");
        assert_eq!(std::fs::read(&path).expect("read"), b"one");
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&ws.root().join("a/b")), 0o700);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).expect("chmod");
        ws.write_file("a/b/c.txt", b"two").expect("rewrite");
        assert_eq!(std::fs::read(&path).expect("read"), b"two");
        assert_eq!(mode(&path), 0o640);
        let names: Vec<_> = std::fs::read_dir(ws.root().join("a/b"))
            .expect("ls")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    #[test]
    fn walk_reports_links_and_skips_git() {
        let (dir, ws) = ws();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).expect("mkdir");
        std::fs::write(outside.join("secret"), "x").expect("write");
        ws.write_file("src/a.rs", b"a").expect("write");
        ws.write_file(".git/HEAD", b"x").expect("write");
        std::os::unix::fs::symlink(&outside, ws.root().join("out")).expect("symlink");
        let walk = ws.walk(".", WALK_LIMIT).expect("walk");
        let seen: Vec<_> = walk
            .entries
            .iter()
            .map(|e| (e.path.as_str(), e.kind))
            .collect();
        assert_eq!(
            seen,
            vec![
                ("out", EntryKind::Link),
                ("src", EntryKind::Dir),
                ("src/a.rs", EntryKind::File)
            ]
        );
        assert!(!walk.stopped);
        let small = ws.walk(".", 2).expect("walk");
        assert!(small.stopped);
        assert_eq!(small.entries.len(), 2);
    }

    use crate::tools::{run, Registry, ToolContext, ToolOutput};
    use nix::unistd::mkfifo;
    use serde_json::json;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    fn tool(ws: &Workspace, name: &str, args: serde_json::Value) -> ToolOutput {
        let ctx = ToolContext {
            workspace: ws,
            call_id: "t",
            budget_chars: 64_000,
            web: None,
        };
        run(&Registry::base(), name, &args.to_string(), &ctx)
    }

    /// A folder outside the workspace holding a canary file.
    fn outside(dir: &tempfile::TempDir) -> PathBuf {
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).expect("mkdir");
        std::fs::write(outside.join("canary.txt"), "CANARY").expect("write");
        outside
    }

    fn assert_untouched(outside: &Path) {
        let mut names: Vec<_> = std::fs::read_dir(outside)
            .expect("ls")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, vec!["canary.txt".to_string()]);
        assert_eq!(
            std::fs::read_to_string(outside.join("canary.txt")).expect("read"),
            "CANARY"
        );
    }

    #[test]
    fn fifo_is_refused_at_once() {
        let (_dir, ws) = ws();
        mkfifo(&ws.root().join("pipe"), Mode::from_bits_truncate(0o600)).expect("mkfifo");
        let started = Instant::now();
        let read = tool(&ws, "read_file", json!({"path": "pipe"}));
        assert!(!read.ok);
        assert_eq!(read.text, "`pipe` is a FIFO, not a regular file");
        let write = tool(&ws, "write_file", json!({"path": "pipe", "content": "x"}));
        assert!(
            !write.ok && write.text.contains("is a FIFO"),
            "{}",
            write.text
        );
        let grep = tool(&ws, "grep", json!({"pattern": "x"}));
        assert!(grep.ok, "{}", grep.text);
        let direct = tool(&ws, "grep", json!({"pattern": "x", "path": "pipe"}));
        assert!(!direct.ok);
        let edit = tool(
            &ws,
            "edit_file",
            json!({"path": "pipe", "old_string": "a", "new_string": "b"}),
        );
        assert!(!edit.ok);
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn a_folder_symlinked_outside_is_refused() {
        let (dir, ws) = ws();
        let outside = outside(&dir);
        std::os::unix::fs::symlink(&outside, ws.root().join("notes")).expect("symlink");
        let read = tool(&ws, "read_file", json!({"path": "notes/canary.txt"}));
        assert!(!read.ok);
        assert_eq!(
            read.text,
            "`notes/canary.txt` goes through a symlink (`notes`); the workspace does not follow links"
        );
        for path in ["notes/canary.txt", "notes/new.txt", "notes/deeper/new.txt"] {
            let write = tool(&ws, "write_file", json!({"path": path, "content": "pwned"}));
            assert!(!write.ok, "{path}");
            assert!(
                write.text.contains("goes through a symlink (`notes`)"),
                "{}",
                write.text
            );
        }
        let edit = tool(
            &ws,
            "edit_file",
            json!({"path": "notes/canary.txt", "old_string": "CANARY", "new_string": "x"}),
        );
        assert!(!edit.ok);
        let list = tool(&ws, "list_files", json!({"path": "notes"}));
        assert!(!list.ok && list.text.contains("symlink"), "{}", list.text);
        let grep = tool(&ws, "grep", json!({"pattern": "CANARY"}));
        assert_eq!(grep.text, "no matches for `CANARY` in `.`\n");
        let all = tool(&ws, "list_files", json!({}));
        assert!(all.text.contains("1 symlink also matches"), "{}", all.text);

        let up = tool(&ws, "read_file", json!({"path": "../outside/canary.txt"}));
        assert!(
            !up.ok && up.text.contains("goes up with `..`"),
            "{}",
            up.text
        );
        let absolute = outside.join("canary.txt").display().to_string();
        let abs = tool(&ws, "read_file", json!({"path": absolute}));
        assert!(
            !abs.ok && abs.text.contains("outside the workspace"),
            "{}",
            abs.text
        );
        let abs_write = tool(&ws, "write_file", json!({"path": absolute, "content": "x"}));
        assert!(!abs_write.ok);
        assert!(!read.text.contains("CANARY") && !abs.text.contains("CANARY"));
        assert_untouched(&outside);
    }

    #[test]
    fn a_symlink_as_the_file_is_refused() {
        let (dir, ws) = ws();
        let outside = outside(&dir);
        let link = ws.root().join("link.txt");
        std::os::unix::fs::symlink(outside.join("canary.txt"), &link).expect("symlink");
        let read = tool(&ws, "read_file", json!({"path": "link.txt"}));
        assert!(!read.ok);
        assert_eq!(
            read.text,
            "`link.txt` is a symlink; the workspace does not follow links"
        );
        let write = tool(
            &ws,
            "write_file",
            json!({"path": "link.txt", "content": "pwned"}),
        );
        assert!(!write.ok);
        assert_eq!(
            write.text,
            "`link.txt` is a symlink; the workspace does not follow links"
        );
        assert!(std::fs::symlink_metadata(&link)
            .expect("meta")
            .file_type()
            .is_symlink());
        // A dangling link is refused the same way, and nothing is created at its target.
        std::os::unix::fs::symlink(outside.join("made.txt"), ws.root().join("dangling"))
            .expect("symlink");
        let dangling = tool(
            &ws,
            "write_file",
            json!({"path": "dangling", "content": "x"}),
        );
        assert!(!dangling.ok);
        assert_untouched(&outside);
    }

    #[test]
    fn racing_a_folder_against_a_symlink_never_escapes() {
        let (dir, ws) = ws();
        let outside = outside(&dir);
        let swapped = ws.root().join("d");
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let (stop, swapped, outside) = (stop.clone(), swapped.clone(), outside.clone());
            std::thread::spawn(move || {
                let clear = |p: &Path| match std::fs::symlink_metadata(p) {
                    Ok(m) if m.file_type().is_symlink() => {
                        let _ = std::fs::remove_file(p);
                    }
                    Ok(_) => {
                        let _ = std::fs::remove_dir_all(p);
                    }
                    Err(_) => {}
                };
                let mut swaps = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    clear(&swapped);
                    if std::fs::create_dir(&swapped).is_ok() {
                        let _ = std::fs::write(swapped.join("canary.txt"), "inside");
                    }
                    clear(&swapped);
                    let _ = std::os::unix::fs::symlink(&outside, &swapped);
                    swaps += 1;
                }
                swaps
            })
        };
        let mut reads_ok = 0;
        let mut writes_ok = 0;
        let mut refusals = std::collections::BTreeSet::new();
        for i in 0..2_000 {
            let read = tool(&ws, "read_file", json!({"path": "d/canary.txt"}));
            if read.ok {
                // Ours: the swapper's file (maybe caught empty) or one we wrote.
                let ours = read.text == "inside"
                    || read.text.starts_with("write ")
                    || read.text.ends_with("is empty (0 bytes)");
                assert!(ours && !read.text.contains("CANARY"), "{}", read.text);
                reads_ok += 1;
            } else {
                assert!(!read.text.contains("CANARY"));
                assert!(
                    read.text.contains("`d/canary.txt`") && !read.text.contains('\n'),
                    "{}",
                    read.text
                );
                refusals.insert(read.text);
            }
            let content = format!("write {i}");
            let write = tool(
                &ws,
                "write_file",
                json!({"path": "d/canary.txt", "content": content}),
            );
            if write.ok {
                writes_ok += 1;
            } else {
                assert!(
                    write.text.contains("`d/canary.txt`") && !write.text.contains('\n'),
                    "{}",
                    write.text
                );
                refusals.insert(write.text);
            }
            let new = tool(
                &ws,
                "write_file",
                json!({"path": "d/new.txt", "content": "x"}),
            );
            assert!(new.ok || new.text.contains("`d/new.txt`"), "{}", new.text);
        }
        stop.store(true, Ordering::Relaxed);
        let swaps = swapper.join().expect("swapper");
        assert!(swaps > 0);
        assert_untouched(&outside);
        // Both outcomes happened, so the race was real.
        eprintln!("{swaps} swaps, {reads_ok} reads and {writes_ok} writes went through; refusals: {refusals:#?}");
    }
}
