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
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, renameat, AtFlags, OFlag, AT_FDCWD};
use nix::sys::stat::{fstat, fstatat, mkdirat, FileStat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};

mod error;
mod mount;
mod moves;
#[cfg(test)]
mod tests;
mod walk;

pub use error::ToolError;
use error::{describe, folder_error, link_refused, not_found, write_error};
pub use walk::{Entry, Walk};

/// How many entries a walk (list_files, grep) visits before it stops.
pub const WALK_LIMIT: usize = 20_000;
/// Deeper folders are not entered: each level holds one open fd.
const MAX_DEPTH: usize = 64;
/// chatd's own files in the workspace (todos, cut outputs); walks from the
/// root leave it out so grep does not find its own earlier results.
pub const TANDEM_DIR: &str = ".tandem";

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

/// What opening a path's folders does with one that is missing.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Missing {
    /// Fails with the folder named (reads, listings, deletes).
    Fail,
    /// Makes it, 0700 (a write's parent folders).
    Create,
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
    /// A saved agent's folder, reached at `folder/`.
    mount: Option<mount::MountPoint>,
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
        Ok(Workspace {
            root,
            canonical,
            mount: None,
        })
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
        Ok(Workspace {
            root,
            canonical,
            mount: None,
        })
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
        let mounted = self.mounted_path(given);
        let given = mounted.as_deref().unwrap_or(given);
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
    /// link; with `Missing::Create`, makes missing folders (0700) on the way.
    fn open_dirs(
        &self,
        rel: &RelPath,
        upto: usize,
        missing: Missing,
    ) -> Result<OwnedFd, ToolError> {
        let (mut dir, skip) = self.base(rel, upto)?;
        for (i, name) in rel.parts[..upto].iter().enumerate().skip(skip) {
            let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            let opened = match openat(&dir, name.as_str(), flags, Mode::empty()) {
                Err(Errno::ENOENT) if missing == Missing::Create => {
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
        if self.is_mount_point(rel) {
            return self.base(rel, 1).map(|(fd, _)| fd);
        }
        let parent = self.open_dirs(rel, rel.parts.len() - 1, Missing::Fail)?;
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
        if self.is_mount_point(&rel) {
            self.base(&rel, 1)?;
            return Ok((rel, EntryKind::Dir, 0));
        }
        let parent = self.open_dirs(&rel, rel.parts.len() - 1, Missing::Fail)?;
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
        if self.is_mount_point(&rel) {
            return Err(ToolError::new(format!(
                "`{rel}` is the agent's folder, not a file; list_files shows what it holds"
            )));
        }
        let parent = self.open_dirs(&rel, rel.parts.len() - 1, Missing::Fail)?;
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
        self.write_from(path, &mut &content[..])
    }

    /// [`Workspace::write_file`] with the content streamed from `source`
    /// (an undo or a restore writing a blob back).
    pub fn write_from(&self, path: &str, source: &mut impl io::Read) -> Result<RelPath, ToolError> {
        let rel = self.resolve(path)?;
        let Some(last) = rel.parts.last() else {
            return Err(ToolError::new(
                "`.` is the workspace folder, not a file; give a file path like notes/a.md",
            ));
        };
        self.writable(&rel)?;
        let dir = self.open_dirs(&rel, rel.parts.len() - 1, Missing::Create)?;
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
            io::copy(source, &mut file)?;
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

fn size_of(st: &FileStat) -> u64 {
    u64::try_from(st.st_size).unwrap_or(0)
}

/// `.name.tandem-<random>.tmp`, short enough for any file name limit.
/// Whether a file name is one of [`temp_name`]'s: a write still under way
/// (or one a crash cut), never a file of the chat's.
pub fn is_temp_name(name: &str) -> bool {
    name.starts_with('.')
        && name.ends_with(".tmp")
        && name.rsplit_once(".tandem-").is_some_and(|(_, tail)| {
            tail.len() == 20 && tail[..16].bytes().all(|b| b.is_ascii_hexdigit())
        })
}

/// A hidden name beside `path` that scans skip: where an upload is
/// streamed before it is moved to `path` under the history's lock.
pub fn staging_path(path: &str) -> String {
    let (folder, name) = path.rsplit_once('/').unwrap_or(("", path));
    let staged = temp_name(name).to_string_lossy().into_owned();
    if folder.is_empty() {
        staged
    } else {
        format!("{folder}/{staged}")
    }
}

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
