//! Podman for the sandbox tests: the API service and the busybox test
//! image, found or built once per test binary.

use super::*;

/// A real container runtime for the sandbox tests: podman's Docker Engine API
/// service (runc, sandbox/containers.conf) on a socket of this test process,
/// and the busybox test image made by `tandem sandbox build --base busybox`.
/// One a test process; it ends with the process.
pub struct Podman {
    pub socket: PathBuf,
    pub image: String,
    _dir: tempfile::TempDir,
}

/// The image the sandbox tests run.
pub const TEST_IMAGE: &str = "localhost/tandem-sandbox-test:1";
/// The test image with this machine's node and the tests' npm packages
/// (tests/npm), Debian's python3 with its standard library and the tests'
/// PyPI packages (tests/pip/site), each at its path here: for MCP servers
/// run in a sandbox.
pub const TOOLS_IMAGE: &str = "localhost/tandem-sandbox-test-tools:1";

static TOOLS_BUILT: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();

pub(crate) static PODMAN: std::sync::OnceLock<Result<Podman, String>> = std::sync::OnceLock::new();

impl Podman {
    /// The shared runtime, started at the first call; `None` (the test is
    /// skipped, or fails in CI: `needs`) where there is none to start: not
    /// root, or no podman. CI runs as root with podman and runc installed.
    #[track_caller]
    pub fn shared() -> Option<&'static Podman> {
        if !crate::needs::root("the sandbox tests run podman as root")
            || !crate::needs::tools(&[("podman", "podman"), ("runc", "runc")])
        {
            return None;
        }
        match PODMAN.get_or_init(|| Podman::start().map_err(|e| format!("{e:#}"))) {
            Ok(podman) => Some(podman),
            Err(e) => panic!("podman could not start: {e} (.ci/run installs podman and runc)"),
        }
    }

    pub(crate) fn start() -> anyhow::Result<Podman> {
        let dir = tempfile::tempdir()?;
        let socket = dir.path().join("podman.sock");
        let conf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sandbox/containers.conf");
        anyhow::ensure!(conf.exists(), "{} is missing", conf.display());
        let (tx, rx) = std::sync::mpsc::channel();
        let url = format!("unix://{}", socket.display());
        // The service dies with this process (PDEATHSIG), so it is started
        // from a thread that lives as long as the process does.
        std::thread::spawn(move || {
            use std::os::unix::process::CommandExt;
            let mut command = Command::new("podman");
            command
                .args(["system", "service", "--time=0", &url])
                .env("CONTAINERS_CONF", &conf)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            // SAFETY: prctl is async-signal-safe; nothing else runs between
            // fork and exec.
            unsafe {
                command.pre_exec(|| {
                    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                        .map_err(std::io::Error::from)
                });
            }
            let spawned = command.spawn();
            let ok = spawned.is_ok();
            let _ = tx.send(spawned.map(|_| ()).map_err(|e| e.to_string()));
            if ok {
                loop {
                    std::thread::park();
                }
            }
        });
        rx.recv()?
            .map_err(|e| anyhow::anyhow!("starting podman system service: {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while !socket.exists() {
            anyhow::ensure!(
                Instant::now() < deadline,
                "podman's API socket did not appear in 30 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // The socket is there before the service answers on it (seen on a
        // loaded machine): a build refused for that is asked again, bounded.
        let out = loop {
            let out = Command::new(bin_dir().join("tandem"))
                .args([
                    "sandbox", "build", "--base", "busybox", "--tag", TEST_IMAGE, "--socket",
                ])
                .arg(&socket)
                .output()
                .context("running tandem sandbox build")?;
            let not_yet =
                String::from_utf8_lossy(&out.stderr).contains("no container runtime answers");
            if out.status.success() || !not_yet || Instant::now() >= deadline {
                break out;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        anyhow::ensure!(
            out.status.success(),
            "tandem sandbox build --base busybox failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(Podman {
            socket,
            image: TEST_IMAGE.to_string(),
            _dir: dir,
        })
    }

    /// Builds [`TOOLS_IMAGE`] once a test process: the busybox image with
    /// `--add` this machine's node (and its libraries), tests/npm's
    /// node_modules, /usr/bin/python3's program and standard library, and
    /// tests/pip (its servers, and site/ when installed). Answers the paths of node and
    /// python, the same inside.
    pub fn tools_image(&self) -> anyhow::Result<Tools> {
        let node = which("node").context("node is not on PATH (.ci/run installs npm)")?;
        let tools = Tools {
            node: std::fs::canonicalize(&node)?,
            python: std::fs::canonicalize("/usr/bin/python3")
                .context("Debian's /usr/bin/python3 (.ci/run installs python3)")?,
        };
        let version = tools
            .python
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut add = vec![
            tools.node.clone(),
            crate::npm::modules(),
            tools.python.clone(),
            PathBuf::from("/usr/lib").join(&version),
        ];
        // The tests' Python servers, and their packages when installed.
        add.push(crate::pip::folder());
        let built = TOOLS_BUILT.get_or_init(|| {
            let mut command = Command::new(bin_dir().join("tandem"));
            command.args([
                "sandbox",
                "build",
                "--base",
                "busybox",
                "--tag",
                TOOLS_IMAGE,
            ]);
            for path in &add {
                command.arg("--add").arg(path);
            }
            let out = command
                .arg("--socket")
                .arg(&self.socket)
                .output()
                .map_err(|e| e.to_string())?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "tandem sandbox build --add …: {}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ))
            }
        });
        built.clone().map_err(|e| anyhow::anyhow!(e))?;
        Ok(tools)
    }

    /// The environment of a chatd whose sandboxes run `image` with
    /// `mem_gb` of memory each, this box's real memory left out of it (no
    /// floor): what most sandbox tests start chatd with.
    pub fn chatd_env(&self, image: &str, mem_gb: &str) -> Vec<(String, String)> {
        let mut env = self.env();
        env.retain(|(k, _)| k != "QSE_SANDBOX_IMAGE");
        env.extend([
            ("QSE_SANDBOX_IMAGE".into(), image.into()),
            ("QSE_SANDBOX_MEM_GB".into(), mem_gb.into()),
            ("QSE_SANDBOX_FLOOR_GB".into(), "0".into()),
        ]);
        env
    }

    /// The environment a chatd needs to use it.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            (
                "QSE_SANDBOX_SOCKET".into(),
                self.socket.display().to_string(),
            ),
            ("QSE_SANDBOX_IMAGE".into(), self.image.clone()),
        ]
    }

    /// `podman` against this service's storage (for what the tests check
    /// from outside); a failing podman is an error, with what it said.
    pub fn cli(&self, args: &[&str]) -> anyhow::Result<String> {
        let conf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sandbox/containers.conf");
        let out = Command::new("podman")
            .args(args)
            .env("CONTAINERS_CONF", conf)
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "podman {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// The programs [`TOOLS_IMAGE`] holds, at their paths here and inside.
pub struct Tools {
    pub node: PathBuf,
    pub python: PathBuf,
}

/// A program's path on PATH.
fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|p| p.is_file())
    })
}

/// Removes the containers a test's chatd (its data folder) made, however
/// the test ends.
pub struct SandboxCleanup(pub PathBuf);

impl Drop for SandboxCleanup {
    fn drop(&mut self) {
        if let Some(Ok(podman)) = PODMAN.get() {
            let filter = format!("label=tandem.data={}", self.0.display());
            if let Ok(ids) = podman.cli(&["ps", "-a", "-q", "--filter", &filter]) {
                let ids: Vec<&str> = ids.split_whitespace().collect();
                if !ids.is_empty() {
                    let mut args = vec!["rm", "-f", "-t", "0"];
                    args.extend(ids);
                    let _ = podman.cli(&args);
                }
            }
        }
    }
}
