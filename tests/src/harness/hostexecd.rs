//! hostexecd as a real process for a test: its grants, `POST /exec` and
//! its streamed runs.

use super::*;

/// hostexecd as a real process: its data, socket and the chats' folders in
/// one temp folder (0711, so the user commands run as can pass it). Run as
/// root (as the tests are here), it is given `run_as = "nobody"` unless
/// `extra` names another.
pub struct Hostexecd {
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub config: PathBuf,
    pub chat_data: PathBuf,
    /// The uid hostexecd itself runs as when a test gave one (a plain
    /// user, as under its user unit); calls then go through curl as it.
    pub as_uid: Option<u32>,
    /// A command hostexecd is started under (e.g. `setpriv` taking a
    /// capability away); empty: none.
    pub launcher: Vec<String>,
}

/// One call of `POST /exec` read to its end.
#[derive(Debug, Clone)]
pub struct ExecRun {
    pub status: u16,
    /// The error body when refused; the `finished` event otherwise.
    pub body: Value,
    pub events: Vec<Value>,
}

impl ExecRun {
    /// The output events' text, joined.
    pub fn output(&self) -> String {
        self.events
            .iter()
            .filter(|e| e["event"] == "output")
            .filter_map(|e| e["text"].as_str())
            .collect()
    }
}

impl Hostexecd {
    /// Whether this process is root (hostexecd then needs `run_as`).
    pub fn as_root() -> bool {
        nix::unistd::geteuid().is_root()
    }

    /// Starts hostexecd with `extra` lines in `[hostexec]` and waits for `/health`.
    pub async fn start(extra: &str) -> anyhow::Result<Hostexecd> {
        let dir = tempfile::tempdir()?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))?;
        let chat_data = dir.path().join("chat");
        std::fs::create_dir_all(&chat_data)?;
        std::fs::set_permissions(&chat_data, std::fs::Permissions::from_mode(0o711))?;
        Hostexecd::start_for(dir, &chat_data, extra).await
    }

    /// Starts hostexecd under `launcher` (its arguments before hostexecd's
    /// path) with `extra` lines in `[hostexec]`.
    pub async fn start_launched(launcher: &[&str], extra: &str) -> anyhow::Result<Hostexecd> {
        let mut hx = Hostexecd::start(extra).await?;
        if let Some(mut child) = hx.child.take() {
            terminate(&mut child, Duration::from_secs(5));
        }
        hx.launcher = launcher.iter().map(|a| a.to_string()).collect();
        hx.spawn()?;
        hx.wait_healthy().await?;
        Ok(hx)
    }

    /// Starts hostexecd as the plain user `uid` (its folders given to it),
    /// as the user unit runs it: commands run as that user, in a user
    /// namespace of the call's own. Needs root (to start it as `uid`).
    pub async fn start_as(uid: u32, extra: &str) -> anyhow::Result<Hostexecd> {
        let dir = tempfile::tempdir()?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))?;
        let chat_data = dir.path().join("chat");
        std::fs::create_dir_all(&chat_data)?;
        for d in [dir.path(), chat_data.as_path()] {
            std::os::unix::fs::chown(d, Some(uid), Some(uid))?;
        }
        let mut hx = Hostexecd {
            child: None,
            socket: dir.path().join("run/hostexec.sock"),
            config: dir.path().join("tandem.toml"),
            chat_data,
            dir,
            as_uid: Some(uid),
            launcher: Vec::new(),
        };
        hx.write_config(extra)?;
        hx.spawn()?;
        hx.wait_healthy().await?;
        Ok(hx)
    }

    /// Starts hostexecd with its data, socket and log in `dir`, serving the
    /// chats of the chatd whose data folder is `chat_data` (as on a box,
    /// where both keep the chats in one folder), `extra` lines in `[hostexec]`.
    pub async fn start_for(
        dir: tempfile::TempDir,
        chat_data: &Path,
        extra: &str,
    ) -> anyhow::Result<Hostexecd> {
        let mut hx = Hostexecd {
            child: None,
            socket: dir.path().join("run/hostexec.sock"),
            config: dir.path().join("tandem.toml"),
            chat_data: chat_data.to_path_buf(),
            dir,
            as_uid: None,
            launcher: Vec::new(),
        };
        hx.write_config(extra)?;
        hx.spawn()?;
        hx.wait_healthy().await?;
        Ok(hx)
    }

    pub(crate) fn write_config(&self, extra: &str) -> anyhow::Result<()> {
        let hx = self;
        let run_as = if Hostexecd::as_root() && hx.as_uid.is_none() && !extra.contains("run_as") {
            "run_as = \"nobody\"\n"
        } else {
            ""
        };
        std::fs::write(
            &hx.config,
            format!(
                "[hostexec]\ndata_dir = \"{}\"\nchat_data = \"{}\"\nsocket = \"{}\"\n{run_as}{extra}",
                hx.dir.path().join("data").display(),
                hx.chat_data.display(),
                hx.socket.display(),
            ),
        )?;
        Ok(())
    }

    /// Starts the binary with this config; returns at once.
    pub fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("hostexecd.log"))?;
        let child = self
            .command()
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting hostexecd")?;
        self.child = Some(child);
        Ok(())
    }

    /// A second hostexecd with this one's config (and user, and launcher),
    /// run until it ends.
    pub async fn run_second(&self, bound: Duration) -> anyhow::Result<Ended> {
        run_to_end(self.command(), bound).await
    }

    /// hostexecd with this config, under its launcher and as its user.
    pub(crate) fn command(&self) -> Command {
        use std::os::unix::process::CommandExt;
        let mut command = match self.launcher.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(bin_dir().join("hostexecd"));
                c
            }
            None => Command::new(bin_dir().join("hostexecd")),
        };
        if let Some(uid) = self.as_uid {
            command.uid(uid).gid(uid);
        }
        command
            .args(["--config", &self.config.to_string_lossy()])
            // A group of its own, as under a shell or a supervisor: a test
            // may kill the whole group without killing itself.
            .process_group(0)
            .current_dir(self.dir.path())
            .env_clear()
            .env("HOME", self.dir.path())
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("QSE_LOG_TO", "stderr");
        command
    }

    pub async fn wait_healthy(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    bail!("hostexecd exited ({status}):\n{}", self.log());
                }
            }
            let healthy = match self.as_uid {
                Some(_) => self
                    .curl("GET", "/health", None)
                    .await
                    .is_ok_and(|(s, _)| s == 200),
                None => matches!(self.call("GET", "/health", None).await, Ok((200, _))),
            };
            if healthy {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "hostexecd did not answer /health within 10 s:\n{}",
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits (bounded) for the process to exit; its status.
    pub fn wait_exit(&mut self, bound: Duration) -> anyhow::Result<std::process::ExitStatus> {
        let child = self.child.as_mut().context("hostexecd is not running")?;
        let deadline = Instant::now() + bound;
        loop {
            if let Some(status) = child.try_wait()? {
                self.child = None;
                return Ok(status);
            }
            if Instant::now() > deadline {
                bail!("hostexecd did not exit within {bound:?}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("hostexecd.log")).unwrap_or_default()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL, as a crash.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGKILL to hostexecd's whole process group (`kill -9 -<pgid>`, as a
    /// shell job or a supervisor would), and the exit waited for.
    pub fn kill9_group(&mut self) -> anyhow::Result<()> {
        let pid = self.pid().context("hostexecd is not running")?;
        nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        )?;
        self.wait_exit(Duration::from_secs(5))?;
        Ok(())
    }

    /// The workspace of an own chat: the command's working folder.
    pub fn workspace(&self, chat: &str) -> PathBuf {
        self.chat_data.join("workspaces").join(chat)
    }

    /// The chat's HOME, beside its workspace.
    pub fn home(&self, chat: &str) -> PathBuf {
        self.chat_data.join("homes").join(chat).join("home")
    }

    /// SIGTERM, and the exit waited for.
    pub fn sigterm(&mut self, bound: Duration) -> anyhow::Result<std::process::ExitStatus> {
        let pid = self.pid().context("hostexecd is not running")?;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        )?;
        self.wait_exit(bound)
    }

    pub fn client(&self) -> anyhow::Result<reqwest::Client> {
        Ok(reqwest::Client::builder()
            .unix_socket(self.socket.clone())
            .build()?)
    }

    /// One call on the API socket: status and JSON body.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(u16, Value)> {
        let mut request = self
            .client()?
            .request(method.parse()?, format!("http://hostexecd{path}"));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let value = response.json().await.unwrap_or(Value::Null);
        Ok((status, value))
    }

    /// One call through `curl` as the uid hostexecd runs as (`start_as`):
    /// the status and the body's text.
    pub async fn curl(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(u16, String)> {
        let uid = self
            .as_uid
            .context("hostexecd runs as this process's user")?;
        let mut command = tokio::process::Command::new("setpriv");
        command
            .args([
                &format!("--reuid={uid}"),
                &format!("--regid={uid}"),
                "--clear-groups",
                "curl",
                "-sS",
                "-N",
                "--max-time",
                "30",
                "-o",
                "-",
                "-w",
                "\n%{http_code}",
                "--unix-socket",
            ])
            .arg(&self.socket)
            .args(["-X", method]);
        if let Some(body) = body {
            command.args([
                "-H",
                "Content-Type: application/json",
                "-d",
                &body.to_string(),
            ]);
        }
        let out = command
            .arg(format!("http://hostexecd{path}"))
            .stdin(Stdio::null())
            .output()
            .await?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, status) = text.rsplit_once('\n').context("curl's output")?;
        Ok((status.trim().parse().unwrap_or(0), body.to_string()))
    }

    /// `POST /exec` through `curl` (`start_as`), read to its end.
    pub async fn curl_exec(&self, chat: &str, command: &str) -> anyhow::Result<ExecRun> {
        let body = json!({"chat_id": chat, "command": command});
        let (status, text) = self.curl("POST", "/exec", Some(body)).await?;
        let events: Vec<Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        Ok(ExecRun {
            status,
            body: events.last().cloned().unwrap_or(Value::Null),
            events,
        })
    }

    /// `POST /exec`, the response left open (to read as it comes).
    pub async fn exec_open(
        &self,
        chat: &str,
        command: &str,
        timeout_s: Option<u64>,
    ) -> anyhow::Result<ExecStream> {
        let mut body = json!({"chat_id": chat, "command": command});
        if let Some(t) = timeout_s {
            body["timeout_s"] = json!(t);
        }
        let response = self
            .client()?
            .post("http://hostexecd/exec")
            .json(&body)
            .send()
            .await?;
        Ok(ExecStream {
            status: response.status().as_u16(),
            response,
            buffer: Vec::new(),
        })
    }

    /// `POST /exec` read to its end (bounded by `bound`).
    pub async fn exec(
        &self,
        chat: &str,
        command: &str,
        timeout_s: Option<u64>,
        bound: Duration,
    ) -> anyhow::Result<ExecRun> {
        let stream = self.exec_open(chat, command, timeout_s).await?;
        Hostexecd::read_run(stream, bound).await
    }

    /// `POST /exec` in the workspace `workspace` (the shared one), read to its end.
    pub async fn exec_in(
        &self,
        chat: &str,
        workspace: &Path,
        command: &str,
        bound: Duration,
    ) -> anyhow::Result<ExecRun> {
        let body = json!({"chat_id": chat, "command": command, "workspace": workspace});
        let response = self
            .client()?
            .post("http://hostexecd/exec")
            .json(&body)
            .send()
            .await?;
        let stream = ExecStream {
            status: response.status().as_u16(),
            response,
            buffer: Vec::new(),
        };
        Hostexecd::read_run(stream, bound).await
    }

    pub(crate) async fn read_run(
        mut stream: ExecStream,
        bound: Duration,
    ) -> anyhow::Result<ExecRun> {
        if stream.status != 200 {
            let body = stream.response.json().await.unwrap_or(Value::Null);
            return Ok(ExecRun {
                status: stream.status,
                body,
                events: Vec::new(),
            });
        }
        let events = stream
            .read_until(bound, |e| e["event"] == "finished")
            .await?;
        Ok(ExecRun {
            status: 200,
            body: events.last().cloned().unwrap_or(Value::Null),
            events,
        })
    }
}

/// An open `POST /exec` answer, read event by event.
pub struct ExecStream {
    pub status: u16,
    pub response: reqwest::Response,
    buffer: Vec<u8>,
}

impl ExecStream {
    /// The next event; `None` when the stream ends.
    pub async fn next(&mut self) -> anyhow::Result<Option<Value>> {
        loop {
            if let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                return Ok(Some(serde_json::from_slice(&line)?));
            }
            match self.response.chunk().await? {
                Some(chunk) => self.buffer.extend_from_slice(&chunk),
                None => return Ok(None),
            }
        }
    }

    /// Events until `stop` says so, within `bound`.
    pub async fn read_until(
        &mut self,
        bound: Duration,
        mut stop: impl FnMut(&Value) -> bool,
    ) -> anyhow::Result<Vec<Value>> {
        let mut seen = Vec::new();
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            let next = tokio::time::timeout_at(deadline, self.next())
                .await
                .map_err(|_| anyhow::anyhow!("timed out after {bound:?}; saw {seen:?}"))??;
            let Some(event) = next else {
                bail!("the stream ended; saw {seen:?}")
            };
            let done = stop(&event);
            seen.push(event);
            if done {
                return Ok(seen);
            }
        }
    }
}

impl Drop for Hostexecd {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            terminate(&mut child, Duration::from_secs(5));
        }
        let log = self.log();
        show_log("hostexecd", &mut self.dir, &log);
    }
}
