//! The settings `tandem` needs, read the way the daemons read them: the
//! TOML file, the operator env files in the root folder, the environment.

use std::path::PathBuf;

use anyhow::Context;

use crate::daemons::Daemon;

pub struct Settings {
    /// The folder holding `run/serve.env` and `run/local.env`; daemons
    /// started by tandem run there. `$QSE_ROOT`, else ~/TandemLLM when it
    /// exists, else the current folder.
    pub root: PathBuf,
    pub chatd: chatd::config::ChatdConfig,
    /// `[egress]`, read as egressd reads it.
    pub egress: egressd::config::EgressConfig,
    /// `[hostexec]`, read as hostexecd reads it.
    pub hostexec: hostexecd::config::HostexecConfig,
    /// `[triggers]`, read as triggerd reads it.
    pub triggers: triggerd::config::TriggersConfig,
    /// `[connectors]`, read as connectord reads it.
    pub connectors: connectord::config::ConnectorsConfig,
}

impl Settings {
    pub fn load() -> anyhow::Result<Settings> {
        let root = match std::env::var_os("QSE_ROOT") {
            Some(root) => PathBuf::from(root),
            None => {
                let box_root = tandem_shared::secrets::home().join("TandemLLM");
                if box_root.is_dir() {
                    box_root
                } else {
                    std::env::current_dir().context("reading the current folder")?
                }
            }
        };
        let sources = tandem_shared::config::Sources::from_process(None, Some(&root));
        let loaded = tandem_shared::config::load::<chatd::config::FileConfig>(
            &sources,
            chatd::config::ENV_KEYS,
        )?;
        let egress = tandem_shared::config::load::<egressd::config::FileConfig>(
            &sources,
            egressd::config::ENV_KEYS,
        )?;
        let hostexec = tandem_shared::config::load::<hostexecd::config::FileConfig>(
            &sources,
            hostexecd::config::ENV_KEYS,
        )?;
        let triggers = tandem_shared::config::load::<triggerd::config::FileConfig>(
            &sources,
            triggerd::config::ENV_KEYS,
        )?;
        let connectors = tandem_shared::config::load::<connectord::config::FileConfig>(
            &sources,
            connectord::config::ENV_KEYS,
        )?;
        Ok(Settings {
            root,
            chatd: loaded.config.chatd,
            egress: egress.config.egress,
            hostexec: hostexec.config.hostexec,
            triggers: triggers.config.triggers,
            connectors: connectors.config.connectors,
        })
    }

    /// Where the daemon answers `/health`.
    pub fn daemon_url(&self, daemon: Daemon) -> String {
        match daemon.binary {
            "chatd" => match self.chatd.listen_addr() {
                Ok(addr) => format!("http://{addr}"),
                Err(_) => "http://127.0.0.1:8016".into(),
            },
            // egressd serves its API on a unix socket.
            "egressd" => format!("unix:{}", self.egress.socket.display()),
            "hostexecd" => format!("unix:{}", self.hostexec.socket.display()),
            "triggerd" => format!("unix:{}", self.triggers.socket.display()),
            "connectord" => format!("unix:{}", self.connectors.socket.display()),
            // A daemon added to the table later serves on a socket named for it.
            other => format!(
                "unix:{}/{other}.sock",
                crate::daemons::runtime_dir().display()
            ),
        }
    }

    pub fn engine_url(&self) -> &str {
        &self.chatd.engine_url
    }
}
