//! The sandbox image builder of `tandem sandbox build`: makes the image
//! every chat's sandbox runs (a root file system, the sandbox user, the shim
//! as PID 1) and loads it into podman or docker over the Docker Engine API.
//! No registry is involved: the root file system is made here (debootstrap,
//! or the host's static busybox) and imported as a tar.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{bail, Context};
use tandem_shared::docker::{Docker, DockerError};

use crate::settings::Settings;

mod mirror;
mod rootfs;
#[cfg(test)]
mod tests;
mod workdir;

use mirror::host_mirror;
use rootfs::{
    add_path, busybox_rootfs, debootstrap, install, layout, pack, sandbox_user, shared_libraries,
};
use workdir::WorkDir;

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

/// What `tandem sandbox build` was asked for (its arguments, as the builder
/// takes them).
pub struct Build {
    pub base: Base,
    pub socket: Option<PathBuf>,
    pub tag: Option<String>,
    pub shim: Option<PathBuf>,
    pub busybox: PathBuf,
    /// Files and folders of this machine copied in at the same paths.
    pub add: Vec<PathBuf>,
    pub mirror: Option<String>,
    pub workdir: Option<PathBuf>,
    pub keep: bool,
}

fn say(line: impl AsRef<str>) {
    println!("sandbox build: {}", line.as_ref());
    let _ = std::io::stdout().flush();
}

/// Makes the image and imports it; says each stage on stdout.
pub async fn build(args: Build) -> anyhow::Result<ExitCode> {
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
    let mut work = WorkDir::make(&workdir)?;
    if args.keep {
        work.keep();
    }
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
    for path in &args.add {
        let copied = add_path(&rootfs, path)?;
        say(format!(
            "      added {} ({copied} files with its libraries)",
            path.display()
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
