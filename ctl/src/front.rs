//! chatd's front as the `tandem` command handles it: `tandem chat start
//! --front ADDR` keeps the address as `QSE_CHAT_FRONT=` in run/local.env,
//! the operator env file both chatd started by tandem and the systemd unit
//! read, so every later start serves the same front.

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::daemons::Daemon;
use crate::settings::Settings;

const KEY: &str = "QSE_CHAT_FRONT";

fn local_env(settings: &Settings) -> PathBuf {
    settings.root.join("run/local.env")
}

/// Saves `front` (an address, or `off`) in run/local.env; whether it changed.
pub fn save(settings: &Settings, front: &str) -> anyhow::Result<bool> {
    let value = match front.trim() {
        "off" | "" => None,
        address => {
            let mut check = settings.chatd.clone();
            check.front = address.to_string();
            check
                .front_addr()
                .map_err(|e| anyhow::anyhow!("--front: {e}"))?;
            Some(address.to_string())
        }
    };
    let path = local_env(settings);
    let old = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(err) => return Err(err).with_context(|| format!("reading {}", path.display())),
    };
    let mut new = with_line(&old, value.as_deref());
    if value.is_none() && file_sets_a_front(settings) {
        // tandem.toml names a front: only an env line saying off wins over it.
        new = with_line(&old, Some("off"));
    }
    let now = settings
        .chatd
        .front_addr()
        .ok()
        .flatten()
        .map(|a| a.to_string());
    let changed = now != value.clone();
    if new != old {
        write(&path, &new)?;
        match &value {
            Some(address) => println!("front {address}: saved as {KEY} in {}", path.display()),
            None => println!("front off: saved in {}", path.display()),
        }
    }
    Ok(changed)
}

/// Whether chatd has a front from elsewhere than run/local.env: the config
/// file or run/serve.env.
fn file_sets_a_front(settings: &Settings) -> bool {
    let mut sources = tandem_shared::config::Sources::from_process(None, Some(&settings.root));
    sources
        .env_files
        .retain(|path| path != &local_env(settings));
    sources.env.retain(|(key, _)| key != KEY);
    tandem_shared::config::load::<chatd::config::FileConfig>(&sources, chatd::config::ENV_KEYS)
        .is_ok_and(|loaded| loaded.config.chatd.front_addr().ok().flatten().is_some())
}

/// `text` with its `QSE_CHAT_FRONT=` lines replaced by one for `value`
/// (none for `None`); every other line as it was.
fn with_line(text: &str, value: Option<&str>) -> String {
    let mut lines: Vec<String> = text
        .lines()
        .filter(|line| {
            let line = line.trim_start();
            let line = line.strip_prefix("export ").unwrap_or(line).trim_start();
            !line
                .strip_prefix(KEY)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        })
        .map(str::to_string)
        .collect();
    if let Some(value) = value {
        lines.push(format!("{KEY}={value}"));
    }
    let mut out = lines.join("\n");
    if !out.is_empty() {
        out.push('\n');
    }
    out
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    let dir = path.parent().context("run/local.env has a folder")?;
    std::fs::create_dir_all(dir).with_context(|| format!("making {}", dir.display()))?;
    let temp = dir.join(".local.env.tandem");
    let _ = std::fs::remove_file(&temp);
    tandem_shared::fsmode::write_private_new(&temp, text.as_bytes())
        .with_context(|| format!("writing {}", temp.display()))?;
    std::fs::rename(&temp, path).with_context(|| format!("writing {}", path.display()))
}

/// Whether the secrets file sets an admin token (read only: nothing is made).
pub fn admin_token_set(settings: &Settings) -> bool {
    std::fs::read_to_string(&settings.chatd.secrets)
        .ok()
        .and_then(|text| tandem_shared::config::parse_env_file(&text).ok())
        .is_some_and(|entries| {
            entries
                .iter()
                .any(|e| e.key == "QSE_ADMIN_TOKEN" && !e.value.is_empty())
        })
}

/// The front in one line, `None` without one.
pub fn describe(settings: &Settings) -> Option<String> {
    let address = settings.chatd.front_addr().ok().flatten()?;
    let host = if address.ip().is_unspecified() {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "this-box".into())
    } else if address.is_ipv6() {
        format!("[{}]", address.ip())
    } else {
        address.ip().to_string()
    };
    let access = if admin_token_set(settings) {
        "sign in with the admin token"
    } else {
        "NO admin token: anyone who reaches it is signed in; set QSE_ADMIN_TOKEN in the secrets file"
    };
    Some(format!("http://{host}:{}/ ({access})", address.port()))
}

/// After a start: where the page is.
pub fn print(settings: &Settings, daemon: Daemon) {
    if daemon.binary != "chatd" {
        return;
    }
    if let Some(front) = describe(settings) {
        println!("the chat page: {front}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_front_line_is_replaced_and_the_rest_kept() {
        let check = |text: &str, value: Option<&str>, expect: &str| {
            assert_eq!(with_line(text, value), expect, "{text:?} {value:?}");
        };
        check("", Some("0.0.0.0:4180"), "QSE_CHAT_FRONT=0.0.0.0:4180\n");
        check(
            "A=1\n",
            Some("0.0.0.0:4180"),
            "A=1\nQSE_CHAT_FRONT=0.0.0.0:4180\n",
        );
        check(
            "A=1\nQSE_CHAT_FRONT=1.2.3.4:1\n# note\nexport QSE_CHAT_FRONT = x\nB=2\n",
            Some("127.0.0.1:4180"),
            "A=1\n# note\nB=2\nQSE_CHAT_FRONT=127.0.0.1:4180\n",
        );
        check("A=1\nQSE_CHAT_FRONT=1.2.3.4:1\n", None, "A=1\n");
        check("QSE_CHAT_FRONTX=1\n", None, "QSE_CHAT_FRONTX=1\n");
        check("QSE_CHAT_FRONT=1\n", None, "");
    }
}
