//! `tandem sandbox build`: makes the image every chat's sandbox runs (a root
//! file system, the sandbox user, the shim as PID 1) and loads it into
//! podman or docker over the Docker Engine API. No registry is involved:
//! the root file system is made here (debootstrap, or the host's static
//! busybox) and imported as a tar.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use anyhow::{bail, Context};
use tandem_shared::docker::{Docker, DockerError};

use crate::settings::Settings;

pub const BUILD_ABOUT: &str = "\
Make the sandbox image and load it into the container runtime (podman's API
service or docker) over the Docker Engine API socket. Nothing is pulled from
a registry: the root file system is made on this machine, packed as a tar
and imported (POST /images/create?fromSrc=-).

Two bases:
  --base debian   (default) Debian bookworm by `debootstrap --variant=minbase`
                  with bash, coreutils, ca-certificates, curl, git, python3,
                  python3-venv, make, gcc, libc6-dev, procps, less, nano,
                  xz-utils, unzip and file. Needs root and the debootstrap
                  package; the mirror is the one of /etc/apt/sources.list(.d)
                  (else http://deb.debian.org/debian, or --mirror); docs,
                  man pages and translations are left out. About 3 to 4
                  minutes, some 420 MB.
  --base busybox  a tiny image for tests: the host's static busybox
                  (busybox-static) and a link for each of its applets, and
                  the shim's shared libraries copied from this machine. No
                  root needed; a few seconds.

Both images hold: user `sandbox` (uid 1000, group 1000) in /etc/passwd and
/etc/group; /home/sandbox (its home) and /workspace (where chatd mounts the
chat's files), both owned 1000:1000; /tmp (1777); /run/tandem-egress (where
chatd mounts the chat's egress folder, holding proxy.sock); and the shim,
/usr/local/bin/tandem-shim (from next to this tandem, or --shim), which is
the image's CMD: PID 1 of each container, reaping every process, ending at
once on SIGTERM, and relaying 127.0.0.1:3128 to /run/tandem-egress/proxy.sock.
Every file is owned by root except the home and /workspace.

The import sets: USER 1000:1000, WORKDIR /workspace, ENV HOME=/home/sandbox,
PATH, LANG=C.UTF-8, HTTP_PROXY/HTTPS_PROXY/http_proxy/https_proxy
(http://127.0.0.1:3128), NO_PROXY/no_proxy (localhost,127.0.0.1) and
CMD [\"/usr/local/bin/tandem-shim\"]. An image of the same name is replaced:
the old one is removed unless a container still uses it (running sandboxes
keep theirs; chatd starts new ones from the new image).

The socket and the image name default to what chatd uses: [chatd.sandbox]
socket and image of tandem.toml, QSE_SANDBOX_SOCKET and QSE_SANDBOX_IMAGE
(/var/run/docker.sock, tandem-sandbox:1); under sudo that is root's
tandem.toml, so name them (--socket, --tag) when yours differ. The work
folder (--workdir, default $TMPDIR or /var/tmp) holds the root file system
and the tar while building; it is removed at the end unless --keep.

Examples:
  sudo tandem sandbox build
  tandem sandbox build --base busybox --socket /run/podman/podman.sock
  podman system service --time=0 unix:///run/podman/podman.sock &";

/// The packages of the debian base, beyond minbase.
pub const DEBIAN_PACKAGES: &[&str] = &[
    "bash",
    "coreutils",
    "ca-certificates",
    "curl",
    "git",
    "python3",
    "python3-venv",
    "make",
    "gcc",
    "libc6-dev",
    "procps",
    "less",
    "nano",
    "xz-utils",
    "unzip",
    "file",
];
const SUITE: &str = "bookworm";
const DEFAULT_MIRROR: &str = "http://deb.debian.org/debian";
/// The busybox applets a test may count on; a busybox without one of them
/// is refused.
const BUSYBOX_NEEDED: &[&str] = &[
    "sh", "id", "cat", "ls", "echo", "sleep", "kill", "ps", "mkdir", "rm", "head", "dd", "yes",
    "grep", "env", "touch", "wc", "seq", "true", "false", "stat", "df", "mount", "timeout", "nc",
    "wget",
];
/// Where the shim lives in the image; the image's CMD.
pub const SHIM_IN_IMAGE: &str = "/usr/local/bin/tandem-shim";
const PROXY: &str = "http://127.0.0.1:3128";
const NO_PROXY: &str = "localhost,127.0.0.1";
const SANDBOX_UID: u32 = 1000;

#[derive(clap::Subcommand)]
pub enum SandboxCommand {
    /// Make the sandbox image (debian or busybox) and load it into podman or docker.
    #[command(long_about = BUILD_ABOUT)]
    Build(BuildArgs),
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Base {
    /// Debian bookworm (debootstrap; root; ~4 min).
    Debian,
    /// The host's static busybox (for tests; no root; seconds).
    Busybox,
}

impl Base {
    fn name(self) -> &'static str {
        match self {
            Base::Debian => "debian",
            Base::Busybox => "busybox",
        }
    }
}

#[derive(clap::Args)]
pub struct BuildArgs {
    /// debian (bookworm, the default) or busybox (tiny, for tests).
    #[arg(long, value_enum, default_value = "debian")]
    base: Base,
    /// The runtime's Docker Engine API socket (default: [chatd.sandbox]
    /// socket, QSE_SANDBOX_SOCKET, /var/run/docker.sock).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// The image's name:tag (default: [chatd.sandbox] image,
    /// QSE_SANDBOX_IMAGE, tandem-sandbox:1).
    #[arg(long, value_name = "NAME:TAG")]
    tag: Option<String>,
    /// The shim binary (default: tandem-shim next to this tandem).
    #[arg(long, value_name = "PATH")]
    shim: Option<PathBuf>,
    /// The static busybox of --base busybox.
    #[arg(long, value_name = "PATH", default_value = "/bin/busybox")]
    busybox: PathBuf,
    /// The Debian mirror of --base debian (default: from /etc/apt/sources.list(.d)).
    #[arg(long, value_name = "URL")]
    mirror: Option<String>,
    /// Where the root file system and the tar are made (default: $TMPDIR, else /var/tmp).
    #[arg(long, value_name = "DIR")]
    workdir: Option<PathBuf>,
    /// Keep the work folder (root file system, tar, log) afterwards.
    #[arg(long)]
    keep: bool,
}

pub async fn exec(command: SandboxCommand) -> anyhow::Result<ExitCode> {
    match command {
        SandboxCommand::Build(args) => build(args).await,
    }
}

fn say(line: impl AsRef<str>) {
    println!("sandbox build: {}", line.as_ref());
    let _ = std::io::stdout().flush();
}

async fn build(args: BuildArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let (socket, tag) = match (args.socket.clone(), args.tag.clone()) {
        (Some(socket), Some(tag)) => (socket, tag),
        (socket, tag) => {
            let settings = Settings::load()?;
            (
                socket.unwrap_or_else(|| settings.chatd.sandbox.socket.clone()),
                tag.unwrap_or_else(|| settings.chatd.sandbox.image.clone()),
            )
        }
    };
    check_tag(&tag)?;
    let root_user = nix::unistd::geteuid().is_root();
    if args.base == Base::Debian && !root_user {
        bail!(
            "--base debian needs root (debootstrap makes device nodes and files of other \
             users): sudo tandem sandbox build, or --base busybox for a test image without root"
        );
    }
    let shim = match &args.shim {
        Some(path) => path.clone(),
        None => shim_next_to_tandem()?,
    };
    if !is_executable(&shim) {
        bail!(
            "the shim {} is missing or not executable: cargo build --release -p tandem-shim \
             (it is looked for next to tandem), or --shim PATH",
            shim.display()
        );
    }

    // Before minutes of work: is anybody there to load it into?
    let docker = Docker::new(&socket).map_err(anyhow::Error::new)?;
    let runtime = match docker.version().await {
        Ok(runtime) => runtime,
        Err(DockerError::Unreachable(_)) => bail!("{}", unreachable_message(&socket)),
        Err(err) => bail!("asking {} which runtime it is: {err}", socket.display()),
    };
    say(format!(
        "{} {} answers at {}; image {tag}, base {}",
        runtime.name,
        runtime.version,
        socket.display(),
        args.base.name()
    ));

    let workdir = args
        .workdir
        .clone()
        .or_else(|| std::env::var_os("TMPDIR").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/var/tmp"));
    let work = WorkDir::make(&workdir, args.keep)?;
    let rootfs = work.path.join("rootfs");
    fs::create_dir(&rootfs).with_context(|| format!("making {}", rootfs.display()))?;
    let tar = work.path.join("rootfs.tar");

    let stage = Instant::now();
    match args.base {
        Base::Debian => {
            let mirror = match &args.mirror {
                Some(mirror) => mirror.trim_end_matches('/').to_string(),
                None => host_mirror(),
            };
            let log = work.path.join("debootstrap.log");
            say(format!(
                "[1/5] debootstrap --variant=minbase {SUITE} from {mirror} into {} \
                 (about 4 minutes; log {})",
                rootfs.display(),
                log.display()
            ));
            debootstrap(&rootfs, &mirror, &log)?;
        }
        Base::Busybox => {
            say(format!(
                "[1/5] busybox root file system from {} in {}",
                args.busybox.display(),
                rootfs.display()
            ));
            let applets = busybox_rootfs(&rootfs, &args.busybox)?;
            say(format!("      {applets} applets linked"));
        }
    }
    say(format!("      ({:.1} s)", stage.elapsed().as_secs_f64()));

    say("[2/5] user sandbox (1000:1000), /home/sandbox, /workspace, /tmp, /run/tandem-egress");
    let shell = match args.base {
        Base::Debian => "/bin/bash",
        Base::Busybox => "/bin/sh",
    };
    sandbox_user(&rootfs, shell)?;
    layout(&rootfs)?;

    say(format!(
        "[3/5] the shim: {} -> {SHIM_IN_IMAGE}",
        shim.display()
    ));
    install(
        &shim,
        &rootfs.join(SHIM_IN_IMAGE.trim_start_matches('/')),
        0o755,
    )?;
    if args.base == Base::Busybox {
        let mut copied = 0;
        for binary in [&shim, &args.busybox] {
            for lib in shared_libraries(binary)? {
                let dest = rootfs.join(lib.strip_prefix("/").unwrap_or(&lib));
                if !dest.exists() {
                    install(&lib, &dest, 0o755)?;
                    copied += 1;
                }
            }
        }
        say(format!(
            "      {copied} shared libraries copied from this machine"
        ));
    }
    if root_user {
        // The shim runs in its own root: its libraries are all there.
        // chroot exits 125 when it could not change root itself (no
        // CAP_SYS_CHROOT): that says nothing of the shim.
        let out = Command::new("chroot")
            .arg(&rootfs)
            .args([SHIM_IN_IMAGE, "--version"])
            .output();
        match out {
            Ok(out) if out.status.success() => say(format!(
                "      runs there: {}",
                String::from_utf8_lossy(&out.stdout).trim()
            )),
            Ok(out) if out.status.code() != Some(125) => bail!(
                "the shim does not run in the image's root ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            Ok(out) => say(format!(
                "      not tried in the image's root: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )),
            Err(err) => say(format!(
                "      not tried in the image's root: chroot: {err}"
            )),
        }
    }

    say(format!("[4/5] tar {}", tar.display()));
    pack(&rootfs, &tar, args.base)?;
    let tar_size = fs::metadata(&tar).map(|m| m.len()).unwrap_or(0);
    say(format!("      {:.1} MB", tar_size as f64 / 1e6));

    say(format!("[5/5] import into {} as {tag}", runtime.name));
    let changes = image_changes();
    let before = docker
        .image(&tag)
        .await
        .ok()
        .flatten()
        .and_then(|image| image["Id"].as_str().map(str::to_string));
    let file = tokio::fs::File::open(&tar)
        .await
        .with_context(|| format!("opening {}", tar.display()))?;
    let id = match docker
        .import_image(reqwest::Body::from(file), &tag, &changes)
        .await
    {
        Ok(id) => id,
        Err(DockerError::Unreachable(_)) => bail!("{}", unreachable_message(&socket)),
        Err(err) => bail!("importing {tag}: {err}"),
    };
    let image = docker
        .image(&tag)
        .await
        .map_err(anyhow::Error::new)?
        .with_context(|| format!("{tag} is not there after the import"))?;
    let config = &image["Config"];
    if config["User"].as_str() != Some("1000:1000")
        || config["Cmd"][0].as_str() != Some(SHIM_IN_IMAGE)
    {
        bail!(
            "{tag} was imported but the runtime did not keep its settings (User {}, Cmd {}): \
             this runtime ignores `changes` on import",
            config["User"],
            config["Cmd"]
        );
    }
    let size = image["Size"].as_u64().unwrap_or(0);
    let now = image["Id"].as_str().unwrap_or("?").to_string();
    if let Some(before) = before.filter(|before| *before != now) {
        say(format!(
            "      the image it replaces: {}",
            remove_image(&socket, &before).await
        ));
    }
    say(format!(
        "done in {:.0} s: {tag} id {} size {:.1} MB",
        started.elapsed().as_secs_f64(),
        if id.is_empty() { &now } else { &id },
        size as f64 / 1e6
    ));
    if args.keep {
        say(format!("kept {}", work.path.display()));
    }
    Ok(ExitCode::SUCCESS)
}

/// Removes the image a build replaced, now untagged, unless a container
/// still uses it (the runtime refuses then, and it is kept). Says what
/// became of it.
async fn remove_image(socket: &Path, id: &str) -> String {
    let short = id
        .trim_start_matches("sha256:")
        .chars()
        .take(12)
        .collect::<String>();
    let client = match reqwest::Client::builder()
        .unix_socket(socket.to_path_buf())
        .timeout(std::time::Duration::from_secs(30))
        .build()
    {
        Ok(client) => client,
        Err(err) => return format!("{short} kept ({err})"),
    };
    let answer = client
        .delete(format!("http://docker/v1.41/images/{id}"))
        .send()
        .await;
    match answer {
        Ok(answer) if answer.status().is_success() => format!("{short} removed"),
        Ok(answer) if answer.status() == reqwest::StatusCode::CONFLICT => {
            format!("{short} kept: a container still uses it or another name holds it")
        }
        Ok(answer) => format!("{short} kept (the runtime answered {})", answer.status()),
        Err(err) => format!("{short} kept ({err})"),
    }
}

fn unreachable_message(socket: &Path) -> String {
    format!(
        "no container runtime answers at {0}: start podman's API service \
         (`podman system service --time=0 unix://{0}`) or docker, or set QSE_SANDBOX_SOCKET",
        socket.display()
    )
}

/// `name:tag`, as the import's `repo` wants it (podman reads no `tag=`).
fn check_tag(tag: &str) -> anyhow::Result<()> {
    let (name, version) = tag
        .rsplit_once(':')
        .filter(|(name, version)| !name.is_empty() && !version.contains('/'))
        .with_context(|| format!("--tag {tag:?}: give it as name:tag, e.g. tandem-sandbox:1"))?;
    let ok_name = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-/:".contains(c));
    let ok_version = !version.is_empty()
        && version.len() <= 128
        && version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if !ok_name || !ok_version {
        bail!("--tag {tag:?} is not an image name:tag (lower case name, tag of letters, digits, . _ -)");
    }
    Ok(())
}

/// What the import sets on the image (Dockerfile instructions).
pub fn image_changes() -> Vec<String> {
    let mut changes = vec![
        format!("USER {SANDBOX_UID}:{SANDBOX_UID}"),
        "WORKDIR /workspace".to_string(),
        "ENV HOME=/home/sandbox".to_string(),
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
        "ENV LANG=C.UTF-8".to_string(),
    ];
    for key in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
        changes.push(format!("ENV {key}={PROXY}"));
    }
    for key in ["NO_PROXY", "no_proxy"] {
        changes.push(format!("ENV {key}={NO_PROXY}"));
    }
    changes.push(format!("CMD [\"{SHIM_IN_IMAGE}\"]"));
    changes
}

fn shim_next_to_tandem() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("finding this tandem's own path")?;
    let dir = exe
        .parent()
        .with_context(|| format!("{} has no folder", exe.display()))?;
    Ok(dir.join("tandem-shim"))
}

fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The build's work folder, removed when dropped (on success and on every
/// error) unless kept, and never while something is mounted below it.
struct WorkDir {
    path: PathBuf,
    keep: bool,
}

impl WorkDir {
    fn make(parent: &Path, keep: bool) -> anyhow::Result<WorkDir> {
        fs::create_dir_all(parent).with_context(|| format!("making {}", parent.display()))?;
        let path = parent.join(format!("tandem-sandbox-build-{}", std::process::id()));
        if path.exists() {
            bail!("{} exists already: remove it first", path.display());
        }
        fs::create_dir(&path).with_context(|| format!("making {}", path.display()))?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o700))?;
        Ok(WorkDir { path, keep })
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        let mounted = mounts_below(&self.path);
        if !mounted.is_empty() {
            eprintln!(
                "sandbox build: {} is left in place: {} is still mounted (umount, then rm -rf)",
                self.path.display(),
                mounted.join(", ")
            );
            return;
        }
        if let Err(err) = fs::remove_dir_all(&self.path) {
            eprintln!("sandbox build: removing {}: {err}", self.path.display());
        }
    }
}

/// Mount points at or below `dir`, from /proc/self/mountinfo.
fn mounts_below(dir: &Path) -> Vec<String> {
    let Ok(info) = fs::read_to_string("/proc/self/mountinfo") else {
        // Cannot tell: say so rather than delete blind.
        return vec!["(unknown: /proc/self/mountinfo unreadable)".into()];
    };
    let dir = dir.to_string_lossy();
    info.lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|point| point.replace("\\040", " "))
        .filter(|point| point == &*dir || point.starts_with(&format!("{dir}/")))
        .collect()
}

/// The Debian mirror of this machine's apt sources, else deb.debian.org.
fn host_mirror() -> String {
    let list = fs::read_to_string("/etc/apt/sources.list").unwrap_or_default();
    let mut deb822 = Vec::new();
    if let Ok(entries) = fs::read_dir("/etc/apt/sources.list.d") {
        let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        paths.sort();
        for path in paths {
            let text = fs::read_to_string(&path).unwrap_or_default();
            match path.extension().and_then(|e| e.to_str()) {
                Some("sources") => deb822.push(text),
                // One-line entries in a .list file read like sources.list.
                Some("list") => deb822.push(one_line_as_deb822(&text)),
                _ => {}
            }
        }
    }
    let mut all = vec![one_line_as_deb822(&list)];
    all.extend(deb822);
    mirror_from(&all).unwrap_or_else(|| DEFAULT_MIRROR.to_string())
}

/// `deb [options] URI SUITE COMPONENTS…` lines as deb822 paragraphs.
fn one_line_as_deb822(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let mut words = line.split_whitespace();
        if words.next() != Some("deb") {
            continue;
        }
        let mut word = words.next();
        if word.is_some_and(|w| w.starts_with('[')) {
            // Options: skip to the word that closes them.
            while let Some(w) = word {
                word = words.next();
                if w.ends_with(']') {
                    break;
                }
            }
        }
        let (Some(uri), Some(suite)) = (word, words.next()) else {
            continue;
        };
        out.push_str(&format!("Types: deb\nURIs: {uri}\nSuites: {suite}\n\n"));
    }
    out
}

/// The first `deb` source naming suite bookworm, else the first that is
/// not a security archive.
fn mirror_from(texts: &[String]) -> Option<String> {
    let mut sources: Vec<(String, Vec<String>)> = Vec::new();
    for text in texts {
        for paragraph in text.split("\n\n") {
            let mut types = Vec::new();
            let mut uris = Vec::new();
            let mut suites = Vec::new();
            let mut enabled = true;
            for line in paragraph.lines() {
                if line.trim_start().starts_with('#') {
                    continue;
                }
                let Some((key, value)) = line.split_once(':') else {
                    continue;
                };
                let words = value.split_whitespace().map(str::to_string);
                match key.trim().to_ascii_lowercase().as_str() {
                    "types" => types.extend(words),
                    "uris" => uris.extend(words),
                    "suites" => suites.extend(words),
                    "enabled" => enabled = value.trim() != "no",
                    _ => {}
                }
            }
            if !enabled || !types.iter().any(|t| t == "deb") {
                continue;
            }
            for uri in uris {
                if uri.starts_with("http://")
                    || uri.starts_with("https://")
                    || uri.starts_with("file:")
                {
                    sources.push((uri.trim_end_matches('/').to_string(), suites.clone()));
                }
            }
        }
    }
    let named = sources
        .iter()
        .find(|(_, suites)| suites.iter().any(|s| s == SUITE));
    let plain = || {
        sources.iter().find(|(uri, suites)| {
            !uri.contains("security") && !suites.iter().any(|s| s.ends_with("-security"))
        })
    };
    named.or_else(plain).map(|(uri, _)| uri.clone())
}

fn debootstrap(rootfs: &Path, mirror: &str, log: &Path) -> anyhow::Result<()> {
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
fn trim(rootfs: &Path) {
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
fn busybox_rootfs(rootfs: &Path, busybox: &Path) -> anyhow::Result<usize> {
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
fn sandbox_user(rootfs: &Path, shell: &str) -> anyhow::Result<()> {
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
fn layout(rootfs: &Path) -> anyhow::Result<()> {
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
fn install(from: &Path, dest: &Path, mode: u32) -> anyhow::Result<()> {
    if let Some(parent) = dest.parent() {
        fs::create_dir_all(parent).with_context(|| format!("making {}", parent.display()))?;
    }
    fs::copy(from, dest)
        .with_context(|| format!("copying {} to {}", from.display(), dest.display()))?;
    fs::set_permissions(dest, fs::Permissions::from_mode(mode))?;
    Ok(())
}

/// The shared libraries (and the loader) `binary` needs, by `ldd`; none for
/// a static binary.
fn shared_libraries(binary: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(binary)
        .output()
        .context("running ldd (libc-bin) on the shim")?;
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

fn parse_ldd(text: &str) -> anyhow::Result<Vec<PathBuf>> {
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
fn pack(rootfs: &Path, tar: &Path, base: Base) -> anyhow::Result<()> {
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

fn run(command: &mut Command, what: &str) -> anyhow::Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirror_from_deb822_prefers_bookworm() {
        let text = "Types: deb\n# comment\nURIs: http://deb.debian.org/debian-security\n\
                    Suites: bookworm-security\nComponents: main\n\n\
                    Types: deb\nURIs: http://mirror.example/debian/\n\
                    Suites: bookworm bookworm-updates\nComponents: main\n";
        assert_eq!(
            mirror_from(&[text.to_string()]).as_deref(),
            Some("http://mirror.example/debian")
        );
    }

    #[test]
    fn mirror_from_one_line_sources() {
        let text = "# deb http://old.example/debian bookworm main\n\
                    deb-src http://src.example/debian bookworm main\n\
                    deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] http://m.example/debian bookworm main\n";
        assert_eq!(
            mirror_from(&[one_line_as_deb822(text)]).as_deref(),
            Some("http://m.example/debian")
        );
        // No bookworm: the first that is not a security archive.
        let text = "deb http://security.debian.org/debian-security trixie-security main\n\
                    deb http://m.example/debian trixie main\n";
        assert_eq!(
            mirror_from(&[one_line_as_deb822(text)]).as_deref(),
            Some("http://m.example/debian")
        );
        assert_eq!(mirror_from(&[String::new()]), None);
    }

    #[test]
    fn mirror_from_skips_disabled_and_foreign_sources() {
        let text = "Types: deb\nURIs: http://off.example/debian\nSuites: bookworm\nEnabled: no\n\n\
                    Types: deb-src\nURIs: http://src.example/debian\nSuites: bookworm\n\n\
                    Types: deb\nURIs: cdrom:[Debian]/\nSuites: bookworm\n\n\
                    Types: deb\nURIs: https://on.example/debian\nSuites: bookworm\n";
        assert_eq!(
            mirror_from(&[text.to_string()]).as_deref(),
            Some("https://on.example/debian")
        );
    }

    #[test]
    fn ldd_output_parsed() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                    \tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f)\n\
                    \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\
                    \t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n";
        let paths = parse_ldd(text).unwrap();
        assert_eq!(
            paths,
            vec![
                PathBuf::from("/lib/x86_64-linux-gnu/libgcc_s.so.1"),
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
            ]
        );
        assert!(parse_ldd("\tlibfoo.so.1 => not found\n").is_err());
    }

    #[test]
    fn tags_checked() {
        for good in [
            "tandem-sandbox:1",
            "localhost/tandem-sandbox-test:1",
            "reg.example:5000/a/b:v1.2",
        ] {
            check_tag(good).unwrap_or_else(|e| panic!("{good}: {e}"));
        }
        for bad in [
            "tandem-sandbox",
            "Tandem:1",
            ":1",
            "a:",
            "reg.example:5000/a",
            "a:b c",
        ] {
            assert!(check_tag(bad).is_err(), "{bad} was taken");
        }
    }

    #[test]
    fn changes_set_user_workdir_proxy_and_cmd() {
        let changes = image_changes();
        for want in [
            "USER 1000:1000",
            "WORKDIR /workspace",
            "ENV HOME=/home/sandbox",
            "ENV HTTP_PROXY=http://127.0.0.1:3128",
            "ENV https_proxy=http://127.0.0.1:3128",
            "ENV NO_PROXY=localhost,127.0.0.1",
            "CMD [\"/usr/local/bin/tandem-shim\"]",
        ] {
            assert!(changes.iter().any(|c| c == want), "{want} missing");
        }
    }

    #[test]
    fn user_added_once_and_uid_conflicts_refused() {
        let dir = tempfile::tempdir().unwrap();
        sandbox_user(dir.path(), "/bin/sh").unwrap();
        sandbox_user(dir.path(), "/bin/sh").unwrap();
        let passwd = fs::read_to_string(dir.path().join("etc/passwd")).unwrap();
        assert_eq!(passwd.matches("sandbox:x:1000:1000:").count(), 1);
        let group = fs::read_to_string(dir.path().join("etc/group")).unwrap();
        assert!(group.contains("\nsandbox:x:1000:\n"));

        let other = tempfile::tempdir().unwrap();
        fs::create_dir(other.path().join("etc")).unwrap();
        fs::write(
            other.path().join("etc/passwd"),
            "alice:x:1000:1000::/home/alice:/bin/sh",
        )
        .unwrap();
        assert!(sandbox_user(other.path(), "/bin/sh").is_err());
    }

    /// The tar holds everything as root but the home and /workspace, which
    /// are 1000's, without any chown.
    #[test]
    fn pack_sets_ownership_in_the_archive() {
        let dir = tempfile::tempdir().unwrap();
        let rootfs = dir.path().join("rootfs");
        fs::create_dir(&rootfs).unwrap();
        sandbox_user(&rootfs, "/bin/sh").unwrap();
        layout(&rootfs).unwrap();
        fs::write(rootfs.join("home/sandbox/.profile"), "").unwrap();
        let tar = dir.path().join("rootfs.tar");
        pack(&rootfs, &tar, Base::Busybox).unwrap();
        let out = Command::new("tar")
            .args(["--numeric-owner", "-tvf"])
            .arg(&tar)
            .output()
            .unwrap();
        let listing = String::from_utf8_lossy(&out.stdout);
        let owner_of = |name: &str| {
            let line = listing
                .lines()
                .find(|l| l.trim_end().trim_end_matches('/').ends_with(name))
                .unwrap_or_else(|| panic!("{name} not in\n{listing}"));
            line.split_whitespace().nth(1).unwrap().to_string()
        };
        assert_eq!(owner_of(" ./etc/passwd"), "0/0");
        assert_eq!(owner_of(" ./tmp"), "0/0");
        assert_eq!(owner_of(" ./home"), "0/0");
        assert_eq!(owner_of(" ./home/sandbox"), "1000/1000");
        assert_eq!(owner_of(" ./home/sandbox/.profile"), "1000/1000");
        assert_eq!(owner_of(" ./workspace"), "1000/1000");
        assert_eq!(listing.matches("./workspace/").count(), 1, "{listing}");
        assert!(
            listing.contains("drwxrwxrwt"),
            "/tmp is not 1777:\n{listing}"
        );
    }
}
