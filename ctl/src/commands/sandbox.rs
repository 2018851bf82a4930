//! `tandem sandbox build`: its arguments, handed to the image builder
//! (`crate::image`).

use std::path::PathBuf;
use std::process::ExitCode;

use crate::image::{self, Base};

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

#[derive(clap::Subcommand)]
pub enum SandboxCommand {
    /// Make the sandbox image (debian or busybox) and load it into podman or docker.
    #[command(long_about = BUILD_ABOUT)]
    Build(BuildArgs),
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
    /// A file or folder of this machine to copy into the image at the same
    /// path (a program with its shared libraries); repeat it for more.
    /// For a tool the image lacks, e.g. --add /usr/bin/node.
    #[arg(long, value_name = "PATH")]
    add: Vec<PathBuf>,
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
        SandboxCommand::Build(args) => {
            image::build(image::Build {
                base: args.base,
                socket: args.socket,
                tag: args.tag,
                shim: args.shim,
                busybox: args.busybox,
                add: args.add,
                mirror: args.mirror,
                workdir: args.workdir,
                keep: args.keep,
            })
            .await
        }
    }
}
