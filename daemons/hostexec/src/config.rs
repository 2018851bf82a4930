//! hostexecd's settings: the `[hostexec]` section of tandem.toml, the
//! operator env files and the QSE_* environment (later wins).

use std::path::PathBuf;

use serde::Deserialize;
use tandem_shared::config::EnvKey;

/// The whole tandem.toml as hostexecd reads it: its own section checked key
/// by key, the other daemons' sections left to them.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct FileConfig {
    pub hostexec: HostexecConfig,
    pub chatd: Option<toml::Table>,
    pub egress: Option<toml::Table>,
    pub triggers: Option<toml::Table>,
    pub connectors: Option<toml::Table>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HostexecConfig {
    /// hostexecd's own data: hostexec.sqlite3 (the audit).
    pub data_dir: PathBuf,
    /// chatd's data folder: a chat's workspace is `workspaces/<chat>/` in
    /// it, its commands' HOME `homes/<chat>/home`.
    pub chat_data: PathBuf,
    /// The box's shared workspace (chatd's `shared_workspace`): where a
    /// shared chat's commands work.
    pub shared_workspace: PathBuf,
    /// The API socket; default `$XDG_RUNTIME_DIR/tandem/hostexec.sock`.
    pub socket: PathBuf,
    /// The user commands run as; empty: hostexecd's own.
    pub run_as: String,
    /// Seconds a command may run when the call names none.
    pub timeout_s: u64,
    /// The most seconds a call may name.
    pub max_timeout_s: u64,
    /// Bytes of output a command may print before it is killed.
    pub output_bytes: u64,
    /// Chats running a command at once.
    pub max_chats: usize,
    /// Processes a command may add to its user's count (RLIMIT_NPROC).
    pub max_processes: u64,
    /// The largest file a command may write (RLIMIT_FSIZE), in bytes.
    pub max_file_bytes: u64,
    /// Days audit rows are kept.
    pub audit_days: u64,
    /// A command's PATH, LANG and TZ.
    pub path: String,
    pub lang: String,
    pub tz: String,
}

impl Default for HostexecConfig {
    fn default() -> Self {
        let home = tandem_shared::secrets::home();
        HostexecConfig {
            data_dir: home.join(".tandemllm/hostexec"),
            chat_data: home.join(".tandemllm/chat"),
            shared_workspace: home.join(".tandemllm/workspace"),
            socket: tandem_shared::daemon::runtime_dir().join("hostexec.sock"),
            run_as: String::new(),
            timeout_s: 120,
            max_timeout_s: 1800,
            output_bytes: 65_536,
            max_chats: 4,
            max_processes: 256,
            max_file_bytes: 1 << 30,
            audit_days: 30,
            path: "/usr/local/bin:/usr/bin:/bin".into(),
            lang: "C.UTF-8".into(),
            tz: "UTC".into(),
        }
    }
}

pub const ENV_KEYS: &[EnvKey] = &[
    EnvKey::new("QSE_HOSTEXEC_DATA", "hostexec.data_dir"),
    EnvKey::new("QSE_CHAT_DATA", "hostexec.chat_data"),
    EnvKey::new("QSE_SHARED_WORKSPACE", "hostexec.shared_workspace"),
    EnvKey::new("QSE_HOSTEXEC_SOCKET", "hostexec.socket"),
    EnvKey::new("QSE_HOSTEXEC_RUN_AS", "hostexec.run_as"),
];

/// The commented default configuration, as `--print-default-config` prints it.
pub const DEFAULT_TOML: &str = include_str!("../../../config/tandem.toml");

impl HostexecConfig {
    /// Checks what types alone cannot; each error names the key and the limit.
    pub fn check(&self) -> anyhow::Result<()> {
        let bad = |key: &str, why: String| anyhow::anyhow!("hostexec.{key}: {why}");
        // The last field names the setting a limit comes from, when it is one.
        for (key, value, min, max, max_from) in [
            ("max_timeout_s", self.max_timeout_s, 1, 86_400, ""),
            (
                "timeout_s",
                self.timeout_s,
                1,
                self.max_timeout_s,
                " (the most is hostexec.max_timeout_s)",
            ),
            ("output_bytes", self.output_bytes, 1024, 64 << 20, ""),
            ("max_chats", self.max_chats as u64, 1, 256, ""),
            ("max_processes", self.max_processes, 8, 65_536, ""),
            ("max_file_bytes", self.max_file_bytes, 1 << 20, 1 << 50, ""),
            ("audit_days", self.audit_days, 1, 3650, ""),
        ] {
            if !(min..=max).contains(&value) {
                return Err(bad(
                    key,
                    format!("{value} is outside {min}..={max}{max_from}"),
                ));
            }
        }
        for (key, path) in [
            ("data_dir", &self.data_dir),
            ("chat_data", &self.chat_data),
            ("shared_workspace", &self.shared_workspace),
            ("socket", &self.socket),
        ] {
            if !path.is_absolute() {
                return Err(bad(
                    key,
                    format!("{} is not an absolute path", path.display()),
                ));
            }
        }
        // A unix socket's path has room for 107 bytes.
        if self.socket.as_os_str().len() > 107 {
            return Err(bad(
                "socket",
                format!(
                    "{} is {} bytes long, over the 107 a socket path may have",
                    self.socket.display(),
                    self.socket.as_os_str().len()
                ),
            ));
        }
        if self.path.is_empty()
            || self
                .path
                .split(':')
                .any(|dir| !dir.starts_with('/') || dir.contains('\0'))
        {
            return Err(bad(
                "path",
                format!(
                    "{:?} is not a list of absolute folders like /usr/local/bin:/usr/bin:/bin",
                    self.path
                ),
            ));
        }
        for (key, value) in [("lang", &self.lang), ("tz", &self.tz)] {
            if value.is_empty() || value.len() > 128 || value.chars().any(|c| c.is_control()) {
                return Err(bad(
                    key,
                    format!("{value:?} must be 1 to 128 printable characters"),
                ));
            }
        }
        if self
            .run_as
            .contains(|c: char| c.is_control() || c == '/' || c == ':')
        {
            return Err(bad(
                "run_as",
                format!("{:?} is not a user name", self.run_as),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// config/tandem.toml's [hostexec] values are the built-in defaults.
    #[test]
    fn default_file_matches_the_built_in_defaults() {
        let file: FileConfig = toml::from_str(DEFAULT_TOML).expect("config/tandem.toml parses");
        assert_eq!(file.hostexec, HostexecConfig::default());
        file.hostexec.check().expect("the defaults pass the checks");
    }

    #[test]
    fn checks_name_the_key_and_the_limit() {
        let check = |change: fn(&mut HostexecConfig), expect: &str| {
            let mut config = HostexecConfig::default();
            change(&mut config);
            let err = config.check().unwrap_err().to_string();
            assert!(err.contains(expect), "{err:?} should contain {expect:?}");
        };
        check(
            |c| c.timeout_s = 0,
            "hostexec.timeout_s: 0 is outside 1..=1800",
        );
        check(
            |c| c.timeout_s = 1801,
            "hostexec.timeout_s: 1801 is outside 1..=1800",
        );
        // Found by `fuzz --only config`: a limit that is another setting
        // is named, so lowering max_timeout_s says which key to change.
        check(
            |c| {
                c.max_timeout_s = 60;
                c.timeout_s = 120;
            },
            "hostexec.timeout_s: 120 is outside 1..=60 (the most is hostexec.max_timeout_s)",
        );
        check(
            |c| c.max_timeout_s = 100_000,
            "hostexec.max_timeout_s: 100000 is outside 1..=86400",
        );
        check(
            |c| c.output_bytes = 10,
            "hostexec.output_bytes: 10 is outside 1024..=67108864",
        );
        check(
            |c| c.max_chats = 0,
            "hostexec.max_chats: 0 is outside 1..=256",
        );
        check(
            |c| c.max_processes = 2,
            "hostexec.max_processes: 2 is outside 8..=65536",
        );
        check(
            |c| c.max_file_bytes = 5,
            "hostexec.max_file_bytes: 5 is outside",
        );
        check(
            |c| c.audit_days = 0,
            "hostexec.audit_days: 0 is outside 1..=3650",
        );
        check(|c| c.path = "bin:/usr/bin".into(), "hostexec.path");
        check(|c| c.lang = String::new(), "hostexec.lang");
        check(|c| c.tz = "UTC\n".into(), "hostexec.tz");
        check(|c| c.run_as = "a/b".into(), "hostexec.run_as");
        check(
            |c| c.data_dir = "relative".into(),
            "hostexec.data_dir: relative is not an absolute path",
        );
        check(
            |c| c.socket = PathBuf::from(format!("/{}", "s".repeat(120))),
            "hostexec.socket",
        );
    }

    /// The other daemons' sections are left to them; an unknown key of
    /// hostexecd's own is an error.
    #[test]
    fn other_sections_pass_and_unknown_keys_do_not() {
        let file: FileConfig =
            toml::from_str("[chatd]\nwhatever = 1\n[egress]\nx = 2\n[hostexec]\nmax_chats = 2\n")
                .unwrap();
        assert_eq!(file.hostexec.max_chats, 2);
        assert!(toml::from_str::<FileConfig>("[hostexec]\nmax_chat = 2\n").is_err());
    }
}
