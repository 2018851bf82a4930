//! The proxies as real processes: egressd with a chat socket and a listener
//! open, and tinyproxy, each stopped on drop.

use super::*;

/// A child process with its output in a file; SIGTERM, then SIGKILL on drop.
pub(super) struct Proc {
    pub(super) child: Child,
    pub(super) name: &'static str,
    pub(super) log: PathBuf,
}

impl Proc {
    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fails with the process's output if it has exited.
    pub(super) fn check_running(&mut self) -> anyhow::Result<()> {
        if let Ok(Some(status)) = self.child.try_wait() {
            let output = std::fs::read_to_string(&self.log).unwrap_or_default();
            bail!("{} exited ({status}):\n{}", self.name, output.trim_end());
        }
        Ok(())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `name` next to this executable (or one folder up, from `deps/`).
pub fn sibling_bin(name: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [dir.join(name), dir.parent()?.join(name)]
        .into_iter()
        .find(|p| p.is_file())
}

/// `tinyproxy` on the PATH (or in /usr/sbin, /usr/bin).
pub fn tinyproxy_bin() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|d| d.join("tinyproxy"))
        .find(|p| p.is_file())
}

/// One HTTP/1.1 request on a unix socket: (status, body).
pub(super) async fn unix_call(
    socket: &Path,
    method: &str,
    path: &str,
    body: &str,
) -> anyhow::Result<(u16, String)> {
    let call = async {
        let mut s = UnixStream::connect(socket).await?;
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: egressd\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(request.as_bytes()).await?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await?;
        anyhow::Ok(String::from_utf8_lossy(&out).to_string())
    };
    let text = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .with_context(|| format!("{method} {path} took over 10 s"))??;
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// egressd in a temp folder: ceiling `all`, the origin's range and port
/// opened, a secrets file of its own, its loopback listener on a free port.
pub struct Egressd {
    proc: Proc,
    pub api: PathBuf,
    pub listen_port: u16,
    key: String,
    pub dir: tempfile::TempDir,
}

impl Egressd {
    pub async fn start(bin: &Path, origin: u16) -> anyhow::Result<Egressd> {
        let dir = tempfile::tempdir()?;
        let d = dir.path();
        let api = d.join("run/egress.sock");
        let listen_port = free_port();
        let key: String = (0..32)
            .map(|_| format!("{:02x}", rand::random::<u8>()))
            .collect();
        let secrets = d.join("secrets.env");
        crate::harness::write_private(&secrets, &format!("QSE_FORWARD_KEY={key}\n"))?;
        std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o600))?;
        let config = d.join("tandem.toml");
        std::fs::write(
            &config,
            format!(
                "[egress]\ndata_dir = \"{}\"\nchat_data = \"{}\"\nsocket = \"{}\"\n\
                 ceiling = \"all\"\nports = [{origin}]\nallow_ranges = [\"{ORIGIN_IP}/32\"]\n\
                 listen = \"127.0.0.1:{listen_port}\"\nsecrets = \"{}\"\n",
                d.join("egress").display(),
                d.join("chat").display(),
                api.display(),
                secrets.display()
            ),
        )?;
        let log = d.join("egressd.out");
        // Its log goes where a daemon's goes outside systemd: a file under HOME.
        let child = Command::new(bin)
            .arg("--config")
            .arg(&config)
            .current_dir(d)
            .env_clear()
            .env("HOME", d)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log)?)
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut egressd = Egressd {
            proc: Proc {
                child,
                name: "egressd",
                log,
            },
            api,
            listen_port,
            key,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            egressd.proc.check_running()?;
            if UnixStream::connect(&egressd.api).await.is_ok() {
                break;
            }
            ensure!(
                Instant::now() < deadline,
                "egressd's API socket did not answer within 10 s"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(egressd)
    }

    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// Sets a chat's preset to `all`; its socket, once it answers.
    pub async fn open_chat(&self, chat: &str) -> anyhow::Result<PathBuf> {
        let (status, body) = unix_call(
            &self.api,
            "PUT",
            &format!("/chats/{chat}/egress"),
            r#"{"preset":"all"}"#,
        )
        .await?;
        ensure!(status == 200, "PUT /chats/{chat}/egress: {status} {body}");
        let answer: serde_json::Value = serde_json::from_str(&body)?;
        ensure!(answer["effective"] == "all", "{chat} is not open: {body}");
        let socket = PathBuf::from(answer["socket"].as_str().context("no socket")?);
        wait_until(
            &format!("{} to answer", socket.display()),
            Duration::from_secs(5),
            || async { UnixStream::connect(&socket).await.ok().map(|_| ()) },
        )
        .await?;
        Ok(socket)
    }

    /// `Proxy-Authorization` of a chat on the loopback listener.
    pub fn auth(&self, chat: &str) -> String {
        use base64::Engine;
        let key = tandem_shared::secrets::Secret::new(self.key.clone());
        let token = tandem_shared::secrets::egress_token(&key, chat);
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{chat}:{token}"))
        )
    }

    /// Whether the loopback listener answers (a binary without one: no).
    pub async fn listener_answers(&self) -> bool {
        wait_until("egressd's listener", Duration::from_secs(2), || async {
            TcpStream::connect(("127.0.0.1", self.listen_port))
                .await
                .ok()
                .map(|_| ())
        })
        .await
        .is_ok()
    }

    /// The number of audit rows of `chat` (at most 1000).
    pub async fn audited(&self, chat: &str) -> anyhow::Result<usize> {
        let (status, body) = unix_call(
            &self.api,
            "GET",
            &format!("/audit?chat={chat}&limit=1000"),
            "",
        )
        .await?;
        ensure!(status == 200, "GET /audit: {status} {body}");
        let answer: serde_json::Value = serde_json::from_str(&body)?;
        Ok(answer["audit"].as_array().map(Vec::len).unwrap_or(0))
    }
}

/// tinyproxy in the foreground with a config of the bench's: loopback only,
/// CONNECT to the origin's port only, its log to a file at `Error`.
pub struct Tinyproxy {
    proc: Proc,
    pub port: u16,
    pub dir: tempfile::TempDir,
}

impl Tinyproxy {
    pub async fn start(bin: &Path, origin: u16) -> anyhow::Result<Tinyproxy> {
        let dir = tempfile::tempdir()?;
        let d = dir.path();
        let port = free_port();
        let config = d.join("tinyproxy.conf");
        std::fs::write(
            &config,
            format!(
                "Port {port}\nListen 127.0.0.1\nTimeout 600\nAllow 127.0.0.1\nConnectPort {origin}\n\
                 MaxClients 1024\nLogLevel Error\nLogFile \"{}\"\nDisableViaHeader Yes\n",
                d.join("tinyproxy.log").display()
            ),
        )?;
        let log = d.join("tinyproxy.out");
        let child = Command::new(bin)
            .arg("-d")
            .arg("-c")
            .arg(&config)
            .current_dir(d)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log)?)
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut tp = Tinyproxy {
            proc: Proc {
                child,
                name: "tinyproxy",
                log,
            },
            port,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            tp.proc.check_running()?;
            if TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                break;
            }
            ensure!(
                Instant::now() < deadline,
                "tinyproxy did not listen on 127.0.0.1:{port} within 10 s"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(tp)
    }

    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }
}
