//! connectord as a real process for tests and benchmarks: its data and
//! socket in a temp folder, chatd's address and key given, the platforms'
//! APIs pointed at the fakes (`fakebot`, `fakeslack`); and `Rig`, the
//! engine simulator, chatd and connectord started together, as the end to
//! end tests use them.

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::daemon::Daemon;
use crate::harness::{Chatd, Client, Sim};

pub struct Connectord {
    pub daemon: Daemon,
    pub data: PathBuf,
}

impl Deref for Connectord {
    type Target = Daemon;
    fn deref(&self) -> &Daemon {
        &self.daemon
    }
}

impl DerefMut for Connectord {
    fn deref_mut(&mut self) -> &mut Daemon {
        &mut self.daemon
    }
}

/// The API socket of a connectord made in `dir` (chatd is started with
/// `QSE_CONNECTORS_SOCKET` set to it, so it forwards there).
pub fn socket_in(dir: &Path) -> PathBuf {
    dir.join("run/connectors.sock")
}

impl Connectord {
    /// A connectord in `dir` for `chatd`, with the Bot API at `telegram`
    /// and Slack at `slack`, and `extra` lines in `[connectors]`; not started.
    pub fn new(
        dir: tempfile::TempDir,
        chatd: &Chatd,
        telegram: &str,
        slack: &str,
        extra: &str,
    ) -> anyhow::Result<Connectord> {
        let data = dir.path().join("data");
        let socket = socket_in(dir.path());
        let daemon = Daemon::new("connectord", dir, socket);
        std::fs::write(
            &daemon.config,
            format!(
                "[connectors]\ndata_dir = \"{}\"\nsocket = \"{}\"\nchat_url = \"{}\"\nchat_data = \"{}\"\n\
                 secrets = \"{}\"\ntelegram_api = \"{telegram}\"\nslack_api = \"{slack}\"\n{extra}",
                data.display(),
                daemon.socket.display(),
                chatd.url(),
                chatd.data_dir().display(),
                chatd.dir.path().join("secrets.env").display(),
            ),
        )?;
        Ok(Connectord { daemon, data })
    }

    /// `call` on `/v1/chat-app/connectors{path}`.
    pub async fn api(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(u16, Value)> {
        self.call(method, &format!("/v1/chat-app/connectors{path}"), body)
            .await
    }
}

/// The engine simulator, chatd forwarding to connectord, and connectord
/// started (dropped in that order).
pub struct Rig {
    pub sim: Sim,
    pub chatd: Chatd,
    pub client: Client,
    pub cd: Connectord,
}

impl Rig {
    /// The engine simulator (`sim_args`), chatd forwarding to connectord,
    /// and connectord started with the Bot API at `telegram`, Slack at
    /// `slack` and `extra` lines in `[connectors]`.
    pub async fn start(
        sim_args: &[&str],
        telegram: &str,
        slack: &str,
        extra: &str,
    ) -> anyhow::Result<Rig> {
        let sim = Sim::start(sim_args)?;
        let dir = tempfile::tempdir()?;
        let socket = socket_in(dir.path());
        let chatd = Chatd::start(
            &sim.url(),
            &[("QSE_CONNECTORS_SOCKET", socket.to_string_lossy().as_ref())],
        )
        .await?;
        let client = chatd.client();
        let mut cd = Connectord::new(dir, &chatd, telegram, slack, extra)?;
        cd.start().await?;
        Ok(Rig {
            sim,
            chatd,
            client,
            cd,
        })
    }

    /// Saves the agent the bindings answer with; its id.
    pub async fn agent(&self) -> anyhow::Result<String> {
        let agent = self
            .client
            .post(
                "/agents",
                json!({"name": "Concierge", "model": "sim-small",
                       "instructions": "You are the concierge of this box. Answer briefly."}),
            )
            .await?;
        anyhow::ensure!(agent.status == 201, "agent: {agent:?}");
        Ok(agent.body["id"].as_str().unwrap_or_default().to_string())
    }

    /// Makes a binding through chatd's front door (the forward): `body`
    /// with `more`'s fields set over it; the binding as chatd answers it.
    pub async fn bind(&self, mut body: Value, more: Value) -> anyhow::Result<Value> {
        for (k, v) in more.as_object().cloned().unwrap_or_default() {
            body[k] = v;
        }
        let made = self.client.post("/connectors", body).await?;
        anyhow::ensure!(made.status == 201, "binding: {} {}", made.status, made.body);
        Ok(made.body)
    }

    /// What the read routes say of binding `id` (the list, the binding,
    /// its senders, the kinds), as text.
    pub async fn routes(&self, id: &str) -> anyhow::Result<Vec<String>> {
        let mut answers = Vec::new();
        for path in [
            "/connectors".to_string(),
            format!("/connectors/{id}"),
            format!("/connectors/{id}/senders"),
            "/connectors/kinds".to_string(),
        ] {
            answers.push(self.client.get(&path).await?.body.to_string());
        }
        Ok(answers)
    }

    /// connectord's and chatd's logs: (path, text).
    pub fn logs(&self) -> Vec<(String, String)> {
        vec![
            (self.cd.log_path().display().to_string(), self.cd.log()),
            (
                self.chatd.log_path().display().to_string(),
                self.chatd.log(),
            ),
        ]
    }
}

/// The chats connectord made in chatd (origin connector).
pub async fn connector_chats(client: &Client) -> anyhow::Result<Vec<Value>> {
    let list = client.get("/conversations?limit=100").await?;
    Ok(list.body["conversations"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c["origin"] == "connector")
        .collect())
}
