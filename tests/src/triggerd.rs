//! triggerd as a real process for tests and benchmarks: its data, socket
//! and clock file in a temp folder, chatd's address, key and shared
//! workspace given; the process itself is a `daemon::Daemon`.

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::daemon::Daemon;
use crate::harness::Chatd;

/// Where triggerd finds its chatd: its address, data folder (its
/// `forward.key`), secrets file (`QSE_FORWARD_KEY`) and shared workspace.
pub struct ChatdAt {
    pub url: String,
    pub data: PathBuf,
    pub secrets: PathBuf,
    pub workspace: PathBuf,
}

pub struct Triggerd {
    pub daemon: Daemon,
    pub data: PathBuf,
    pub workspace: PathBuf,
    pub clock: PathBuf,
}

impl Deref for Triggerd {
    type Target = Daemon;
    fn deref(&self) -> &Daemon {
        &self.daemon
    }
}

impl DerefMut for Triggerd {
    fn deref_mut(&mut self) -> &mut Daemon {
        &mut self.daemon
    }
}

/// chatd's shared workspace, as the harness starts chatd (its default under
/// the test's HOME).
pub fn shared_workspace(chatd: &Chatd) -> PathBuf {
    chatd.dir.path().join(".tandemllm/workspace")
}

/// The API socket of a triggerd made in `dir` (chatd is started with
/// `QSE_TRIGGERS_SOCKET` set to it, so it forwards there).
pub fn socket_in(dir: &Path) -> PathBuf {
    dir.join("run/triggers.sock")
}

impl Triggerd {
    /// A triggerd in `dir` for `chatd`, checking every 50 ms, with `extra`
    /// lines in `[triggers]`; not started.
    pub fn new(dir: tempfile::TempDir, chatd: &Chatd, extra: &str) -> anyhow::Result<Triggerd> {
        let data = dir.path().join("data");
        Triggerd::with_data(chatd, extra, dir, data)
    }

    /// Another triggerd on the same data folder as `other` (its own socket).
    pub fn beside(other: &Triggerd, chatd: &Chatd, extra: &str) -> anyhow::Result<Triggerd> {
        let dir = tempfile::tempdir()?;
        Triggerd::with_data(chatd, extra, dir, other.data.clone())
    }

    fn with_data(
        chatd: &Chatd,
        extra: &str,
        dir: tempfile::TempDir,
        data: PathBuf,
    ) -> anyhow::Result<Triggerd> {
        let at = ChatdAt {
            url: chatd.url(),
            data: chatd.data_dir(),
            secrets: chatd.dir.path().join("secrets.env"),
            workspace: shared_workspace(chatd),
        };
        Triggerd::for_chatd_at(&at, extra, dir, data)
    }

    /// A triggerd in `dir` on the data folder `data` for the chatd at `at`
    /// (one the harness did not start, as the soak's), checking every
    /// 50 ms, with `extra` lines in `[triggers]`; not started.
    pub fn for_chatd_at(
        at: &ChatdAt,
        extra: &str,
        dir: tempfile::TempDir,
        data: PathBuf,
    ) -> anyhow::Result<Triggerd> {
        let workspace = at.workspace.clone();
        std::fs::create_dir_all(&workspace)?;
        let clock = dir.path().join("clock");
        let socket = socket_in(dir.path());
        let t = Triggerd {
            daemon: Daemon::new("triggerd", dir, socket),
            clock,
            data,
            workspace,
        };
        let clock_line = if extra.contains("clock_file") {
            String::new()
        } else {
            format!("clock_file = \"{}\"\n", t.clock.display())
        };
        std::fs::write(
            &t.config,
            format!(
                "[triggers]\ndata_dir = \"{}\"\nsocket = \"{}\"\nchat_url = \"{}\"\nchat_data = \"{}\"\n\
                 secrets = \"{}\"\nworkspace = \"{}\"\ncheck_ms = 50\n{clock_line}{extra}",
                t.data.display(),
                t.socket.display(),
                at.url,
                at.data.display(),
                at.secrets.display(),
                t.workspace.display(),
            ),
        )?;
        Ok(t)
    }

    /// Sets the clock the test drives (RFC 3339).
    pub fn set_clock(&self, at: &str) -> anyhow::Result<()> {
        crate::harness::set_clock_file(&self.clock, at)
    }

    /// `call` on `/v1/chat-app/triggers{path}`.
    pub async fn api(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(u16, Value)> {
        self.call(method, &format!("/v1/chat-app/triggers{path}"), body)
            .await
    }

    /// A trigger's runs, newest first.
    pub async fn runs(&self, trigger: &str) -> anyhow::Result<Vec<Value>> {
        let (status, body) = self
            .api("GET", &format!("/{trigger}/runs?limit=1000"), None)
            .await?;
        anyhow::ensure!(status == 200, "runs of {trigger}: {status} {body}");
        Ok(body["runs"].as_array().cloned().unwrap_or_default())
    }
}
