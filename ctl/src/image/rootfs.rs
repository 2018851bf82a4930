//! The image's root file system: debootstrap (trimmed of docs, man pages
//! and translations) or the host's static busybox; the sandbox user, the
//! folders, the shim and its libraries; packed as a tar with its ownership.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context};

use super::{is_executable, Base, BUSYBOX_NEEDED, DEBIAN_PACKAGES, SANDBOX_UID, SUITE};

pub(super) fn debootstrap(rootfs: &Path, mirror: &str, log: &Path) -> anyhow::Result<()> {
    let log_file = fs::File::create(log).with_context(|| format!("making {}", log.display()))?;
    let status = Command::new("debootstrap")
        .arg("--variant=minbase")
        .arg(format!("--include={}", DEBIAN_PACKAGES.join(",")))
        .arg(SUITE)
        .arg(rootfs)
        .arg(mirror)
        .stdin(Stdio::null())
        .stdout(log_file.try_clone()?)
        .stderr(log_file)
        .status();
    let status = match status {
        Ok(status) => status,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            bail!("debootstrap is missing: apt-get install debootstrap")
        }
        Err(err) => bail!("running debootstrap: {err}"),
    };
    if !status.success() {
        let text = fs::read_to_string(log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(15).collect();
        for line in tail.iter().rev() {
            eprintln!("  {line}");
        }
        bail!(
            "debootstrap failed ({status}); the lines above are the end of its log \
             (--keep keeps the whole log and the root file system)"
        );
    }
    trim(rootfs);
    Ok(())
}

/// Drops what a sandbox never reads (some 90 MB of a debian root): the
/// package files and lists, the translations, man and info pages, and the
/// package docs but their copyright files.
pub(super) fn trim(rootfs: &Path) {
    let entries = |dir: &str| {
        fs::read_dir(rootfs.join(dir))
            .map(|list| list.flatten().collect::<Vec<_>>())
            .unwrap_or_default()
    };
    let remove = |path: &Path| {
        let _ = match path.symlink_metadata() {
            Ok(meta) if meta.is_dir() => fs::remove_dir_all(path),
            Ok(_) => fs::remove_file(path),
            Err(_) => Ok(()),
        };
    };
    for dir in ["var/cache/apt/archives", "var/lib/apt/lists"] {
        for entry in entries(dir) {
            let path = entry.path();
            if path.is_file() && entry.file_name() != "lock" {
                remove(&path);
            }
        }
    }
    // locale.alias stays; the per-language folders go.
    for entry in entries("usr/share/locale") {
        if entry.path().is_dir() {
            remove(&entry.path());
        }
    }
    for dir in ["usr/share/man", "usr/share/info"] {
        for entry in entries(dir) {
            remove(&entry.path());
        }
    }
    for package in entries("usr/share/doc") {
        let Ok(files) = fs::read_dir(package.path()) else {
            continue;
        };
        for file in files.flatten() {
            if file.file_name() != "copyright" {
                remove(&file.path());
            }
        }
    }
}

/// A root file system of busybox and its applet links. Answers how many
/// applets were linked.
pub(super) fn busybox_rootfs(rootfs: &Path, busybox: &Path) -> anyhow::Result<usize> {
    if !is_executable(busybox) {
        bail!(
            "{} is missing or not executable: apt-get install busybox-static, or --busybox PATH",
            busybox.display()
        );
    }
    for dir in [
        "bin", "sbin", "usr/bin", "usr/sbin", "etc", "root", "proc", "sys", "dev", "var",
    ] {
        fs::create_dir_all(rootfs.join(dir))?;
    }
    fs::set_permissions(rootfs.join("root"), fs::Permissions::from_mode(0o700))?;
    install(busybox, &rootfs.join("bin/busybox"), 0o755)?;
    let out = Command::new(busybox)
        .arg("--list-full")
        .output()
        .with_context(|| format!("running {} --list-full", busybox.display()))?;
    let list = String::from_utf8_lossy(&out.stdout).to_string();
    let paths: Vec<String> = if out.status.success() && !list.trim().is_empty() {
        list.lines().map(|l| l.trim().to_string()).collect()
    } else {
        // An older busybox: --list only, everything in bin/.
        let out = Command::new(busybox).arg("--list").output()?;
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| format!("bin/{}", l.trim()))
            .collect()
    };
    let mut linked = 0;
    let mut names = Vec::new();
    for path in paths {
        let path = path.trim_start_matches('/');
        if path.is_empty() || path.contains("..") || path == "bin/busybox" {
            continue;
        }
        let dest = rootfs.join(path);
        if let Some(parent) = dest.parent() {
            fs::create_dir_all(parent)?;
        }
        if dest.symlink_metadata().is_err() {
            symlink("/bin/busybox", &dest)
                .with_context(|| format!("linking {}", dest.display()))?;
            linked += 1;
        }
        if let Some(name) = Path::new(path).file_name() {
            names.push(name.to_string_lossy().to_string());
        }
    }
    let missing: Vec<&str> = BUSYBOX_NEEDED
        .iter()
        .copied()
        .filter(|applet| !names.iter().any(|n| n == applet))
        .collect();
    if !missing.is_empty() {
        bail!(
            "{} lacks the applets {}: use Debian's busybox-static, or --busybox PATH",
            busybox.display(),
            missing.join(", ")
        );
    }
    Ok(linked)
}

/// Adds user and group `sandbox` (1000) unless they are there.
pub(super) fn sandbox_user(rootfs: &Path, shell: &str) -> anyhow::Result<()> {
    let etc = rootfs.join("etc");
    fs::create_dir_all(&etc)?;
    let passwd = etc.join("passwd");
    let group = etc.join("group");
    if !passwd.exists() {
        fs::write(
            &passwd,
            "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
        )?;
    }
    if !group.exists() {
        fs::write(&group, "root:x:0:\nnogroup:x:65534:\n")?;
    }
    let home = "/home/sandbox";
    add_entry(
        &passwd,
        "sandbox",
        SANDBOX_UID,
        &format!("sandbox:x:{SANDBOX_UID}:{SANDBOX_UID}:tandem sandbox:{home}:{shell}"),
    )?;
    add_entry(
        &group,
        "sandbox",
        SANDBOX_UID,
        &format!("sandbox:x:{SANDBOX_UID}:"),
    )?;
    // The shadow files of a Debian root: a locked password.
    let shadow = etc.join("shadow");
    if shadow.exists() {
        add_entry(&shadow, "sandbox", u32::MAX, "sandbox:*:19000:0:99999:7:::")?;
    }
    let gshadow = etc.join("gshadow");
    if gshadow.exists() {
        add_entry(&gshadow, "sandbox", u32::MAX, "sandbox:!::")?;
    }
    Ok(())
}

/// Appends `line` to a passwd-style file unless `name` is in it; refuses
/// when another name holds `id` (third field).
fn add_entry(file: &Path, name: &str, id: u32, line: &str) -> anyhow::Result<()> {
    let text = fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    for existing in text.lines() {
        let fields: Vec<&str> = existing.split(':').collect();
        if fields.first() == Some(&name) {
            return Ok(());
        }
        if id != u32::MAX && fields.get(2) == Some(&id.to_string().as_str()) {
            bail!(
                "{}: id {id} belongs to {} already, not to {name}",
                file.display(),
                fields[0]
            );
        }
    }
    let mut text = text;
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(line);
    text.push('\n');
    fs::write(file, text).with_context(|| format!("writing {}", file.display()))
}

/// The folders every image has, with their modes. Ownership is set in the
/// tar (see `pack`), not here, so no root is needed.
pub(super) fn layout(rootfs: &Path) -> anyhow::Result<()> {
    for (dir, mode) in [
        ("home/sandbox", 0o755),
        ("workspace", 0o755),
        ("tmp", 0o1777),
        ("run/tandem-egress", 0o755),
        ("usr/local/bin", 0o755),
    ] {
        let path = rootfs.join(dir);
        fs::create_dir_all(&path).with_context(|| format!("making {}", path.display()))?;
        fs::set_permissions(&path, fs::Permissions::from_mode(mode))?;
    }
    // A Debian root has a skeleton home (.bashrc, .profile).
    let skel = rootfs.join("etc/skel");
    if let Ok(entries) = fs::read_dir(&skel) {
        for entry in entries.flatten() {
            let from = entry.path();
            if from.is_file() {
                install(
                    &from,
                    &rootfs.join("home/sandbox").join(entry.file_name()),
                    0o644,
                )?;
            }
        }
    }
    Ok(())
}

/// Copies a file (following links) to `dest`, making its folder.
pub(super) fn install(from: &Path, dest: &Path, mode: u32) -> anyhow::Result<()> {
    if let Some(parent) = dest.parent() {
        fs::create_dir_all(parent).with_context(|| format!("making {}", parent.display()))?;
    }
    fs::copy(from, dest)
        .with_context(|| format!("copying {} to {}", from.display(), dest.display()))?;
    fs::set_permissions(dest, fs::Permissions::from_mode(mode))?;
    Ok(())
}

/// Copies `path` of this machine (a file, or a folder whole, its links kept
/// as links) into the root file system at the same path. Every program and
/// library it copies (an ELF file) brings the shared libraries `ldd` finds
/// for it that the root file system lacks: a library `ldd` cannot find here
/// is an error for `path` itself, and passed over for a file inside a folder
/// (a module nobody loads may want one). Answers how many files it copied.
pub(super) fn add_path(rootfs: &Path, path: &Path) -> anyhow::Result<usize> {
    if !path.is_absolute() {
        bail!("--add {}: give an absolute path", path.display());
    }
    let meta = fs::symlink_metadata(path)
        .with_context(|| format!("--add {}: not on this machine", path.display()))?;
    let dest = rootfs.join(path.strip_prefix("/").unwrap_or(path));
    let mut elves = Vec::new();
    let mut copied = copy_tree(path, &dest, &meta, &mut elves)?;
    // A link (alternatives, nvm) brings what it points at too.
    if meta.is_symlink() {
        let real = fs::canonicalize(path)
            .with_context(|| format!("--add {}: a link to nothing", path.display()))?;
        copied += add_path(rootfs, &real)?;
    }
    let mut wanted = std::collections::BTreeSet::new();
    for elf in &elves {
        match shared_libraries(elf) {
            Ok(libs) => wanted.extend(libs),
            Err(err) if elf == path => return Err(err),
            Err(_) => {}
        }
    }
    for lib in wanted {
        let to = rootfs.join(lib.strip_prefix("/").unwrap_or(&lib));
        if to.symlink_metadata().is_err() {
            install(&lib, &to, 0o755)?;
            copied += 1;
        }
    }
    Ok(copied)
}

/// Copies one entry, a folder with all it holds; ELF files are noted.
fn copy_tree(
    from: &Path,
    to: &Path,
    meta: &fs::Metadata,
    elves: &mut Vec<PathBuf>,
) -> anyhow::Result<usize> {
    if let Some(parent) = to.parent() {
        fs::create_dir_all(parent)?;
    }
    if meta.is_symlink() {
        let target = fs::read_link(from)?;
        if to.symlink_metadata().is_err() {
            symlink(&target, to).with_context(|| format!("linking {}", to.display()))?;
        }
        return Ok(0);
    }
    if meta.is_file() {
        install(from, to, meta.permissions().mode() & 0o7777)?;
        if is_elf(from) {
            elves.push(from.to_path_buf());
        }
        return Ok(1);
    }
    if !meta.is_dir() {
        return Ok(0);
    }
    fs::create_dir_all(to)?;
    fs::set_permissions(to, fs::Permissions::from_mode(0o755))?;
    let mut copied = 0;
    for entry in fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        let meta = fs::symlink_metadata(entry.path())?;
        copied += copy_tree(&entry.path(), &to.join(entry.file_name()), &meta, elves)?;
    }
    Ok(copied)
}

fn is_elf(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    fs::File::open(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
        .is_ok_and(|()| magic == *b"\x7fELF")
}

/// The shared libraries (and the loader) `binary` needs, by `ldd`; none for
/// a static binary.
pub(super) fn shared_libraries(binary: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(binary)
        .output()
        .with_context(|| format!("running ldd (libc-bin) on {}", binary.display()))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if text.contains("not a dynamic executable") || text.contains("statically linked") {
        return Ok(Vec::new());
    }
    if !out.status.success() {
        bail!("ldd {}: {}", binary.display(), text.trim());
    }
    parse_ldd(&text).with_context(|| format!("ldd {}", binary.display()))
}

pub(super) fn parse_ldd(text: &str) -> anyhow::Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let path = match line.split_once("=>") {
            Some((name, target)) => {
                let target = target.trim();
                if target.starts_with("not found") {
                    bail!("{} is not found on this machine", name.trim());
                }
                target.split(" (").next().unwrap_or("").trim()
            }
            None => line.split(" (").next().unwrap_or("").trim(),
        };
        // linux-vdso.so.1 and the like live in the kernel, not in a file.
        if path.starts_with('/') {
            paths.push(PathBuf::from(path));
        }
    }
    Ok(paths)
}

/// Packs the root file system: every file owned by root (busybox: forced,
/// since it was made by whoever runs this; debian: as debootstrap made it),
/// then /home/sandbox and /workspace appended owned by 1000:1000. GNU tar's
/// --owner/--group set the ownership in the archive, so no chown and no
/// root is needed.
pub(super) fn pack(rootfs: &Path, tar: &Path, base: Base) -> anyhow::Result<()> {
    let mut first = Command::new("tar");
    first.args(["--numeric-owner", "--anchored"]);
    if base == Base::Busybox {
        first.args(["--owner=0", "--group=0"]);
    }
    first.args(["--exclude=./home/sandbox", "--exclude=./workspace"]);
    if base == Base::Debian {
        // The runtime mounts its own /dev, /proc and /sys.
        first.args([
            "--exclude=./dev/*",
            "--exclude=./proc/*",
            "--exclude=./sys/*",
        ]);
    }
    first.arg("-C").arg(rootfs).arg("-cf").arg(tar).arg(".");
    run(&mut first, "tar")?;
    let mut second = Command::new("tar");
    second
        .args([
            "--numeric-owner",
            &format!("--owner={SANDBOX_UID}"),
            &format!("--group={SANDBOX_UID}"),
        ])
        .arg("-C")
        .arg(rootfs)
        .arg("-rf")
        .arg(tar)
        .args(["./home/sandbox", "./workspace"]);
    run(&mut second, "tar")
}

pub(super) fn run(command: &mut Command, what: &str) -> anyhow::Result<()> {
    let out = command
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}
