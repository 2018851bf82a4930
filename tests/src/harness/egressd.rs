//! egressd as a real process for a test: its config, socket and chats.

use super::*;

/// egressd as a real process: its data in a temp folder, the chats' sockets
/// under `chat_data` (chatd's), the loopback listener on a port the system
/// picks, the forward key from `secrets` (chatd's, so the tokens agree).
pub struct Egressd {
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub config: PathBuf,
    chat_data: PathBuf,
    secrets: PathBuf,
}

impl Egressd {
    /// Starts egressd with `extra` lines in `[egress]` and waits for `/health`.
    pub async fn start(chat_data: &Path, secrets: &Path, extra: &str) -> anyhow::Result<Egressd> {
        Egressd::start_with(chat_data, secrets, None, extra).await
    }

    /// The same, with the API socket at `socket`.
    pub async fn start_at(
        chat_data: &Path,
        secrets: &Path,
        socket: &Path,
        extra: &str,
    ) -> anyhow::Result<Egressd> {
        Egressd::start_with(chat_data, secrets, Some(socket), extra).await
    }

    pub(crate) async fn start_with(
        chat_data: &Path,
        secrets: &Path,
        socket: Option<&Path>,
        extra: &str,
    ) -> anyhow::Result<Egressd> {
        let dir = tempfile::tempdir()?;
        let mut egressd = Egressd {
            child: None,
            socket: socket
                .map(Path::to_path_buf)
                .unwrap_or_else(|| dir.path().join("run/egress.sock")),
            config: dir.path().join("tandem.toml"),
            chat_data: chat_data.to_path_buf(),
            secrets: secrets.to_path_buf(),
            dir,
        };
        egressd.write_config(extra)?;
        let log = std::fs::File::create(egressd.dir.path().join("egressd.log"))?;
        let child = egressd
            .command()
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting egressd")?;
        egressd.child = Some(child);
        wait_until("egressd's /health", Duration::from_secs(10), || async {
            egressd.call("GET", "/health", None).await.ok()
        })
        .await?;
        Ok(egressd)
    }

    /// egressd with this one's config.
    pub(crate) fn command(&self) -> Command {
        let mut command = Command::new(bin_dir().join("egressd"));
        command
            .args(["--config", &self.config.to_string_lossy()])
            .current_dir(self.dir.path())
            .env_clear()
            .env("HOME", self.dir.path())
            .env("QSE_LOG_TO", "stderr");
        command
    }

    /// A second egressd with this one's config, run until it ends.
    pub async fn run_second(&self, bound: Duration) -> anyhow::Result<Ended> {
        run_to_end(self.command(), bound).await
    }

    /// Rewrites the config with `extra` (SIGHUP makes egressd read it).
    pub fn write_config(&self, extra: &str) -> anyhow::Result<()> {
        std::fs::write(
            &self.config,
            format!(
                "[egress]\ndata_dir = \"{}\"\nchat_data = \"{}\"\nsocket = \"{}\"\nsecrets = \"{}\"\nlisten = \"127.0.0.1:0\"\n{extra}",
                self.dir.path().join("data").display(),
                self.chat_data.display(),
                self.socket.display(),
                self.secrets.display(),
            ),
        )?;
        Ok(())
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("egressd.log")).unwrap_or_default()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// One call on the API socket: status and JSON body.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(u16, Value)> {
        let client = reqwest::Client::builder()
            .unix_socket(self.socket.clone())
            .build()?;
        let mut request = client.request(method.parse()?, format!("http://egressd{path}"));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let value = response.json().await.unwrap_or(Value::Null);
        Ok((status, value))
    }

    /// Where the loopback listener listens (`127.0.0.1:port`).
    pub async fn listen(&self) -> anyhow::Result<String> {
        let (_, health) = self.call("GET", "/health", None).await?;
        health["listen"]
            .as_str()
            .map(str::to_string)
            .context("/health names no listen address")
    }
}

impl Drop for Egressd {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let log = self.log();
        show_log("egressd", &mut self.dir, &log);
    }
}
