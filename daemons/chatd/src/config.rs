//! chatd's settings: the `[chatd]` section of tandem.toml, the operator env
//! files and the QSE_* environment (later wins). `--print-default-config`
//! prints `DEFAULT_TOML`, and a test keeps config/tandem.toml in step with it.

use std::path::PathBuf;

use serde::Deserialize;
use tandem_shared::config::EnvKey;

/// The whole tandem.toml as chatd reads it: its own section checked key by
/// key, the other daemons' sections left to them.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct FileConfig {
    /// chatd's settings.
    pub chatd: ChatdConfig,
    /// egressd's settings (read by egressd).
    pub egress: Option<toml::Table>,
    /// hostexecd's settings (read by hostexecd).
    pub hostexec: Option<toml::Table>,
    /// triggerd's settings (read by triggerd).
    pub triggers: Option<toml::Table>,
    /// connectord's settings (read by connectord).
    pub connectors: Option<toml::Table>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ChatdConfig {
    /// Address chatd listens on, loopback only unless you put a front before it.
    pub listen: String,
    /// The front: an address where chatd itself serves the web page, the
    /// `/v1/chat-app` API with the admin token's session, and the engine's
    /// other routes (for an engine without a `/v1/chat-app` forward). Empty: none.
    pub front: String,
    /// Names besides an IP address, localhost and this box's own name by
    /// which browsers reach a front that has no admin token (e.g.
    /// "gpubox.lan"); any other name is refused (DNS rebinding).
    pub front_hosts: Vec<String>,
    /// The data folder: chat.sqlite3, blobs/, workspaces/, backups/, forward.key.
    pub data_dir: PathBuf,
    /// The box's OpenAI-compatible engine.
    pub engine_url: String,
    /// The secrets file holding QSE_FORWARD_KEY= and QSE_ADMIN_TOKEN=.
    pub secrets: PathBuf,
    /// Runs that talk to the engine at once; the others queue in order.
    pub max_runs: u32,
    /// How long a run keeps retrying a refused or cut engine before it ends interrupted.
    pub retry_window_s: u64,
    /// The longest wait between two engine retries (the wait starts at 1 s and doubles).
    pub retry_max_wait_s: u64,
    /// The largest request body chatd accepts, in bytes.
    pub max_body_bytes: usize,
    /// The largest multipart message (its text and all its files), in bytes.
    pub upload_message_max_bytes: u64,
    /// The largest file one upload may carry, in bytes.
    pub upload_file_max_bytes: u64,
    /// A device this many events behind gets `reset` and reloads the snapshot.
    pub sse_reset_after: u64,
    /// Seconds between SSE keepalive comments.
    pub sse_keepalive_s: u64,
    /// The model a new chat uses when none is given; empty means the engine's first.
    pub default_model: String,
    /// The context window assumed when the engine does not say.
    pub context_window: u64,
    /// The model describe_image asks about an image for a chat whose model
    /// does not see images; empty: the engine's first model that does.
    pub image_model: String,
    /// The model voice notes are transcribed with (the engine's
    /// `/v1/audio/transcriptions`); empty: the engine's first that transcribes.
    pub transcription_model: String,
    /// Seconds one transcription may take before the message goes without it.
    pub transcription_timeout_s: u64,
    /// Days a deleted chat stays in the trash.
    pub trash_days: u64,
    /// Days a deleted file's bytes stay in its chat's file trash.
    pub file_trash_days: u64,
    /// Days `text.delta` events are kept (messages keep their text).
    pub delta_days: u64,
    /// Daily database copies kept in backups/.
    pub backups_kept: usize,
    /// Seconds SIGTERM waits for open runs to be written interrupted.
    pub shutdown_grace_s: u64,
    /// Model calls one run makes before it ends `paused` (Continue goes on).
    pub max_steps: u32,
    /// Turns a goal starts by itself before it pauses (`turn_limit`).
    pub goal_max_turns: u32,
    /// Model calls the turns of one goal make together before it pauses.
    pub goal_max_steps: u32,
    /// A loop's shortest interval, and a self-paced one's shortest wait (s).
    pub loop_min_interval_s: u32,
    /// Loop runs started on the box in one UTC day, over all loops.
    pub loop_daily_runs: u32,
    /// For tests: a file holding the time loops go by (RFC 3339); empty:
    /// the system clock.
    pub clock_file: PathBuf,
    /// Tokens kept free for the model's answer when a request is sized.
    pub answer_tokens: u64,
    /// The compaction line, in percent of the context window.
    pub compact_percent: u64,
    /// egressd's API socket: chat presets, rules, cards, audit.
    pub egress_socket: PathBuf,
    /// egressd's loopback listener, the way out for web_fetch and web_search.
    pub egress_proxy: String,
    /// What web_search asks: `duckduckgo` (its HTML page) or `searxng` (your own, JSON).
    pub search_engine: String,
    /// The search engine's address: DuckDuckGo's HTML endpoint, or a SearXNG's `/search`.
    pub search_url: String,
    /// Seconds a web_fetch or web_search may take, besides the wait for a
    /// person's answer to egressd's card (at most 60 s more).
    pub web_timeout_s: u64,
    /// The most bytes of an answer web_fetch reads; the rest is cut.
    pub web_max_bytes: usize,
    /// The contact (mailto: or https:) every push's VAPID token names.
    pub push_contact: String,
    /// Seconds a push service keeps a push for a device that is off.
    pub push_ttl_s: u64,
    /// Tests only: push endpoints on loopback addresses, over http too.
    pub push_allow_loopback_for_tests: bool,
    /// MCP connectors may reach loopback, private and this box's networks.
    pub mcp_allow_private: bool,
    /// Seconds an MCP tool call may go without an answer or a progress
    /// notification (each one starts the count again).
    pub mcp_call_limit_s: u64,
    /// Commands on this machine (the `bash` tool through hostexecd, when a
    /// chat has no sandbox): `off`, `ask` (a card for each) or `on`; empty
    /// means `ask`.
    pub host_exec: String,
    /// hostexecd's socket.
    pub hostexec_socket: PathBuf,
    /// Seconds a "Run this command on this machine?" card waits (5 minutes
    /// at most).
    pub host_card_wait_s: u64,
    /// triggerd's socket: chatd forwards `/v1/chat-app/triggers*` there.
    pub triggers_socket: PathBuf,
    /// connectord's socket: chatd forwards `/v1/chat-app/connectors*` there.
    pub connectors_socket: PathBuf,
    /// The box's shared folder: the workspace of every chat made with
    /// `workspace: "shared"` (a trigger's chats; file triggers watch it).
    pub shared_workspace: PathBuf,
    /// The owner's skills, every chat's (skills/owner.rs).
    pub skills_dir: PathBuf,
    /// Each chat's container (`[chatd.sandbox]`).
    pub sandbox: SandboxConfig,
    /// The listeners' timeouts and caps (`[chatd.connections]`).
    pub connections: crate::listeners::ConnectionsConfig,
}

/// The chats' sandboxes: one locked-down container a chat, made and run
/// through the Docker Engine API (podman's API service or docker).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxConfig {
    /// The runtime's API socket; a missing one means no sandboxes.
    pub socket: PathBuf,
    /// The image every sandbox runs (`tandem sandbox build` makes it).
    pub image: String,
    /// Memory a sandbox may use, GiB.
    pub mem_gb: f64,
    /// MemAvailable that must stay after a sandbox's limit, GiB.
    pub floor_gb: f64,
    /// Seconds a start waits for the engine to release memory.
    pub wait_s: u64,
    /// Sandboxes running at once.
    pub max_running: u32,
    /// Memory limits of all running sandboxes together, GiB; 0 means
    /// max_running × mem_gb.
    pub total_gb: f64,
    /// CPUs a sandbox may use (at most the box's).
    pub cpus: f64,
    /// Processes and threads a sandbox may have.
    pub pids: u32,
    /// Minutes an unused sandbox keeps running.
    pub idle_minutes: u64,
    /// `uid:gid` the commands run as; empty means chatd's own (1000:1000
    /// when chatd runs as root).
    pub user: String,
    /// Where MemAvailable is read (tests point it at a file they write).
    pub meminfo: PathBuf,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            socket: "/var/run/docker.sock".into(),
            image: "tandem-sandbox:1".into(),
            mem_gb: 4.0,
            floor_gb: 4.0,
            wait_s: 60,
            max_running: 4,
            total_gb: 0.0,
            cpus: 4.0,
            pids: 512,
            idle_minutes: 30,
            user: String::new(),
            meminfo: "/proc/meminfo".into(),
        }
    }
}

impl SandboxConfig {
    /// Checks what types alone cannot; each error names the key and the limit.
    pub fn check(&self) -> Result<(), String> {
        let range = |key: &str, value: f64, low: f64, high: f64| {
            if value.is_finite() && value >= low && value <= high {
                Ok(())
            } else {
                Err(format!("sandbox.{key}: {value} is outside {low}..={high}"))
            }
        };
        range("mem_gb", self.mem_gb, 0.03125, 1024.0)?;
        range("floor_gb", self.floor_gb, 0.0, 1024.0)?;
        range("total_gb", self.total_gb, 0.0, 4096.0)?;
        range("cpus", self.cpus, 0.1, 256.0)?;
        if self.total_gb > 0.0 && self.total_gb < self.mem_gb {
            return Err(format!(
                "sandbox.total_gb: {} is under mem_gb ({}): no sandbox could start",
                self.total_gb, self.mem_gb
            ));
        }
        if !(1..=3600).contains(&self.wait_s) {
            return Err(format!(
                "sandbox.wait_s: {} is outside 1..=3600",
                self.wait_s
            ));
        }
        if !(1..=64).contains(&self.max_running) {
            return Err(format!(
                "sandbox.max_running: {} is outside 1..=64",
                self.max_running
            ));
        }
        if !(16..=65_536).contains(&self.pids) {
            return Err(format!("sandbox.pids: {} is outside 16..=65536", self.pids));
        }
        if !(1..=1440).contains(&self.idle_minutes) {
            return Err(format!(
                "sandbox.idle_minutes: {} is outside 1..=1440",
                self.idle_minutes
            ));
        }
        if !self.user.is_empty() && self.user_ids().is_none() {
            return Err(format!(
                "sandbox.user: {:?} is not uid:gid like 1000:1000",
                self.user
            ));
        }
        if self.user_ids().map(|(uid, _)| uid) == Some(0) {
            return Err("sandbox.user: commands never run as root (uid 0)".into());
        }
        if self.image.is_empty() || self.image.chars().any(char::is_whitespace) {
            return Err(format!(
                "sandbox.image: {:?} is not an image name",
                self.image
            ));
        }
        Ok(())
    }

    /// `user` as numbers, `None` when empty or malformed.
    pub fn user_ids(&self) -> Option<(u32, u32)> {
        let (uid, gid) = self.user.split_once(':')?;
        Some((uid.parse().ok()?, gid.parse().ok()?))
    }
}

impl Default for ChatdConfig {
    fn default() -> Self {
        let home = tandem_shared::secrets::home();
        ChatdConfig {
            listen: "127.0.0.1:8016".into(),
            front: String::new(),
            front_hosts: Vec::new(),
            data_dir: home.join(".tandemllm/chat"),
            engine_url: "http://127.0.0.1:8000".into(),
            secrets: tandem_shared::secrets::default_secrets_path(),
            max_runs: 2,
            retry_window_s: 600,
            retry_max_wait_s: 30,
            max_body_bytes: 1 << 20,
            upload_message_max_bytes: 1 << 30,
            upload_file_max_bytes: 256 << 20,
            sse_reset_after: 2000,
            sse_keepalive_s: 15,
            default_model: String::new(),
            context_window: 32768,
            image_model: String::new(),
            transcription_model: String::new(),
            transcription_timeout_s: 120,
            trash_days: 7,
            file_trash_days: 30,
            delta_days: 7,
            backups_kept: 7,
            shutdown_grace_s: 5,
            max_steps: 40,
            goal_max_turns: 20,
            goal_max_steps: 400,
            loop_min_interval_s: 60,
            loop_daily_runs: 200,
            clock_file: PathBuf::new(),
            answer_tokens: 4096,
            compact_percent: 80,
            egress_socket: tandem_shared::daemon::runtime_dir().join("egress.sock"),
            egress_proxy: "127.0.0.1:8017".into(),
            search_engine: "duckduckgo".into(),
            search_url: "https://html.duckduckgo.com/html/".into(),
            web_timeout_s: 30,
            web_max_bytes: 2 << 20,
            push_contact: "mailto:owner@tandem.invalid".into(),
            push_ttl_s: 86_400,
            push_allow_loopback_for_tests: false,
            mcp_allow_private: false,
            mcp_call_limit_s: 360,
            host_exec: "ask".into(),
            hostexec_socket: tandem_shared::daemon::runtime_dir().join("hostexec.sock"),
            host_card_wait_s: 300,
            triggers_socket: tandem_shared::daemon::runtime_dir().join("triggers.sock"),
            connectors_socket: tandem_shared::daemon::runtime_dir().join("connectors.sock"),
            shared_workspace: home.join(".tandemllm/workspace"),
            skills_dir: home.join(".tandemllm/skills"),
            sandbox: SandboxConfig::default(),
            connections: crate::listeners::ConnectionsConfig::default(),
        }
    }
}

/// The QSE_* variables chatd reads and the keys they set.
pub const ENV_KEYS: &[EnvKey] = &[
    EnvKey {
        env: "QSE_CHAT_URL",
        key: "chatd.listen",
    },
    EnvKey {
        env: "QSE_CHAT_FRONT",
        key: "chatd.front",
    },
    EnvKey {
        env: "QSE_CHAT_DATA",
        key: "chatd.data_dir",
    },
    EnvKey {
        env: "QSE_ENGINE_URL",
        key: "chatd.engine_url",
    },
    EnvKey {
        env: "QSE_SECRETS",
        key: "chatd.secrets",
    },
    EnvKey {
        env: "QSE_CHAT_MAX_RUNS",
        key: "chatd.max_runs",
    },
    EnvKey {
        env: "QSE_CHAT_RETRY_WINDOW_S",
        key: "chatd.retry_window_s",
    },
    EnvKey {
        env: "QSE_CHAT_RETRY_MAX_WAIT_S",
        key: "chatd.retry_max_wait_s",
    },
    EnvKey {
        env: "QSE_CHAT_MAX_BODY_BYTES",
        key: "chatd.max_body_bytes",
    },
    EnvKey {
        env: "QSE_CHAT_UPLOAD_MESSAGE_MAX_BYTES",
        key: "chatd.upload_message_max_bytes",
    },
    EnvKey {
        env: "QSE_CHAT_UPLOAD_FILE_MAX_BYTES",
        key: "chatd.upload_file_max_bytes",
    },
    EnvKey {
        env: "QSE_CHAT_DEFAULT_MODEL",
        key: "chatd.default_model",
    },
    EnvKey {
        env: "QSE_CHAT_CONTEXT_WINDOW",
        key: "chatd.context_window",
    },
    EnvKey::new("QSE_CHAT_IMAGE_MODEL", "chatd.image_model"),
    EnvKey::new("QSE_CHAT_TRANSCRIPTION_MODEL", "chatd.transcription_model"),
    EnvKey::new(
        "QSE_CHAT_TRANSCRIPTION_TIMEOUT_S",
        "chatd.transcription_timeout_s",
    ),
    EnvKey {
        env: "QSE_CHAT_MAX_STEPS",
        key: "chatd.max_steps",
    },
    EnvKey::new("QSE_CHAT_GOAL_MAX_TURNS", "chatd.goal_max_turns"),
    EnvKey::new("QSE_CHAT_GOAL_MAX_STEPS", "chatd.goal_max_steps"),
    EnvKey::new("QSE_CHAT_LOOP_MIN_INTERVAL_S", "chatd.loop_min_interval_s"),
    EnvKey::new("QSE_CHAT_LOOP_DAILY_RUNS", "chatd.loop_daily_runs"),
    EnvKey::new("QSE_CHAT_CLOCK_FILE", "chatd.clock_file"),
    EnvKey {
        env: "QSE_CHAT_ANSWER_TOKENS",
        key: "chatd.answer_tokens",
    },
    EnvKey {
        env: "QSE_CHAT_COMPACT_PERCENT",
        key: "chatd.compact_percent",
    },
    EnvKey {
        env: "QSE_EGRESS_SOCKET",
        key: "chatd.egress_socket",
    },
    EnvKey {
        env: "QSE_EGRESS_PROXY",
        key: "chatd.egress_proxy",
    },
    EnvKey {
        env: "QSE_CHATS_HOST_EXEC",
        key: "chatd.host_exec",
    },
    EnvKey {
        env: "QSE_HOSTEXEC_SOCKET",
        key: "chatd.hostexec_socket",
    },
    EnvKey {
        env: "QSE_CHAT_HOST_CARD_WAIT_S",
        key: "chatd.host_card_wait_s",
    },
    EnvKey::new("QSE_CHAT_PUSH_CONTACT", "chatd.push_contact"),
    EnvKey::new("QSE_CHAT_PUSH_TTL_S", "chatd.push_ttl_s"),
    EnvKey::new(
        "QSE_CHAT_PUSH_ALLOW_LOOPBACK_FOR_TESTS",
        "chatd.push_allow_loopback_for_tests",
    ),
    EnvKey::new("QSE_CHAT_MCP_ALLOW_PRIVATE", "chatd.mcp_allow_private"),
    EnvKey::new("QSE_CHAT_MCP_CALL_LIMIT_S", "chatd.mcp_call_limit_s"),
    EnvKey::new("QSE_TRIGGERS_SOCKET", "chatd.triggers_socket"),
    EnvKey::new("QSE_CONNECTORS_SOCKET", "chatd.connectors_socket"),
    EnvKey::new("QSE_SHARED_WORKSPACE", "chatd.shared_workspace"),
    EnvKey::new("QSE_CHAT_SKILLS_DIR", "chatd.skills_dir"),
    EnvKey::new("QSE_SANDBOX_SOCKET", "chatd.sandbox.socket"),
    EnvKey::new("QSE_SANDBOX_IMAGE", "chatd.sandbox.image"),
    EnvKey::new("QSE_SANDBOX_MEM_GB", "chatd.sandbox.mem_gb"),
    EnvKey::new("QSE_SANDBOX_FLOOR_GB", "chatd.sandbox.floor_gb"),
    EnvKey::new("QSE_SANDBOX_WAIT_S", "chatd.sandbox.wait_s"),
    EnvKey::new("QSE_SANDBOX_MAX_RUNNING", "chatd.sandbox.max_running"),
    EnvKey::new("QSE_SANDBOX_TOTAL_GB", "chatd.sandbox.total_gb"),
    EnvKey::new("QSE_SANDBOX_CPUS", "chatd.sandbox.cpus"),
    EnvKey::new("QSE_SANDBOX_PIDS", "chatd.sandbox.pids"),
    EnvKey::new("QSE_SANDBOX_IDLE_MINUTES", "chatd.sandbox.idle_minutes"),
    EnvKey::new("QSE_SANDBOX_USER", "chatd.sandbox.user"),
    EnvKey::new("QSE_SANDBOX_MEMINFO", "chatd.sandbox.meminfo"),
    EnvKey::new(
        "QSE_CHAT_HEADER_TIMEOUT_S",
        "chatd.connections.header_timeout_s",
    ),
    EnvKey::new(
        "QSE_CHAT_IDLE_TIMEOUT_S",
        "chatd.connections.idle_timeout_s",
    ),
    EnvKey::new("QSE_CHAT_MAX_CONNECTIONS", "chatd.connections.max"),
    EnvKey::new(
        "QSE_CHAT_FRONT_MAX_CONNECTIONS",
        "chatd.connections.front_max",
    ),
    EnvKey::new(
        "QSE_CHAT_FRONT_MAX_PER_PEER",
        "chatd.connections.front_max_per_peer",
    ),
];

/// How a chat's commands may run on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostExec {
    Off,
    Ask,
    On,
}

impl ChatdConfig {
    /// `host_exec` read; empty (and anything unchecked) is `ask`.
    pub fn host_exec(&self) -> HostExec {
        match self.host_exec.as_str() {
            "off" => HostExec::Off,
            "on" => HostExec::On,
            _ => HostExec::Ask,
        }
    }

    /// Checks what types alone cannot; each error names the key and the limit.
    pub fn check(&self) -> anyhow::Result<()> {
        let bad = |key: &str, why: String| anyhow::anyhow!("chatd.{key}: {why}");
        self.listen_addr().map_err(|e| bad("listen", e))?;
        self.front_addr().map_err(|e| bad("front", e))?;
        for (i, host) in self.front_hosts.iter().enumerate() {
            let name_like = !host.is_empty()
                && host.len() <= 253
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
            if !name_like {
                return Err(bad(
                    &format!("front_hosts[{i}]"),
                    format!(
                        "{host:?} is not a host name (letters, digits, '-' and '.', 253 at most)"
                    ),
                ));
            }
        }
        // A call ends at 30 minutes whatever its progress (`CALL_MOST`).
        if !(1..=1800).contains(&self.mcp_call_limit_s) {
            return Err(bad(
                "mcp_call_limit_s",
                format!("{} is outside 1..=1800", self.mcp_call_limit_s),
            ));
        }
        if !(1..=300).contains(&self.host_card_wait_s) {
            return Err(bad(
                "host_card_wait_s",
                format!("{} is outside 1..=300", self.host_card_wait_s),
            ));
        }
        if !["", "off", "ask", "on"].contains(&self.host_exec.as_str()) {
            return Err(bad(
                "host_exec",
                format!("{:?} is not a mode: use off, ask or on", self.host_exec),
            ));
        }
        if !(self.engine_url.starts_with("http://") || self.engine_url.starts_with("https://")) {
            return Err(bad(
                "engine_url",
                format!("{:?} must start with http:// or https://", self.engine_url),
            ));
        }
        if !(1..=64).contains(&self.max_runs) {
            return Err(bad(
                "max_runs",
                format!("{} is outside 1..=64", self.max_runs),
            ));
        }
        if self.retry_max_wait_s == 0 {
            return Err(bad("retry_max_wait_s", "must be at least 1".into()));
        }
        if !(1024..=64 << 20).contains(&self.max_body_bytes) {
            return Err(bad(
                "max_body_bytes",
                format!("{} is outside 1024..=67108864", self.max_body_bytes),
            ));
        }
        if !(1 << 20..=64 << 30).contains(&self.upload_message_max_bytes) {
            return Err(bad(
                "upload_message_max_bytes",
                format!(
                    "{} is outside 1048576..=68719476736",
                    self.upload_message_max_bytes
                ),
            ));
        }
        if !(1 << 20..=self.upload_message_max_bytes).contains(&self.upload_file_max_bytes) {
            return Err(bad(
                "upload_file_max_bytes",
                format!(
                    "{} is outside 1048576..=upload_message_max_bytes ({})",
                    self.upload_file_max_bytes, self.upload_message_max_bytes
                ),
            ));
        }
        if !(100..=100_000).contains(&self.sse_reset_after) {
            return Err(bad(
                "sse_reset_after",
                format!("{} is outside 100..=100000", self.sse_reset_after),
            ));
        }
        if self.sse_keepalive_s == 0 {
            return Err(bad("sse_keepalive_s", "must be at least 1".into()));
        }
        if !(1..=1000).contains(&self.max_steps) {
            return Err(bad(
                "max_steps",
                format!("{} is outside 1..=1000", self.max_steps),
            ));
        }
        if !(1..=1000).contains(&self.goal_max_turns) {
            return Err(bad(
                "goal_max_turns",
                format!("{} is outside 1..=1000", self.goal_max_turns),
            ));
        }
        if !(1..=100_000).contains(&self.goal_max_steps) {
            return Err(bad(
                "goal_max_steps",
                format!("{} is outside 1..=100000", self.goal_max_steps),
            ));
        }
        if !(30..=86_400).contains(&self.loop_min_interval_s) {
            return Err(bad(
                "loop_min_interval_s",
                format!("{} is outside 30..=86400", self.loop_min_interval_s),
            ));
        }
        if !(1..=100_000).contains(&self.loop_daily_runs) {
            return Err(bad(
                "loop_daily_runs",
                format!("{} is outside 1..=100000", self.loop_daily_runs),
            ));
        }
        if !self.clock_file.as_os_str().is_empty() && !self.clock_file.is_absolute() {
            return Err(bad("clock_file", "must be an absolute path".into()));
        }
        if !(256..=131_072).contains(&self.answer_tokens) {
            return Err(bad(
                "answer_tokens",
                format!("{} is outside 256..=131072", self.answer_tokens),
            ));
        }
        if !(50..=95).contains(&self.compact_percent) {
            return Err(bad(
                "compact_percent",
                format!("{} is outside 50..=95", self.compact_percent),
            ));
        }
        if !["duckduckgo", "searxng"].contains(&self.search_engine.as_str()) {
            return Err(bad(
                "search_engine",
                format!(
                    "{:?} is not a search engine here: use duckduckgo or searxng",
                    self.search_engine
                ),
            ));
        }
        match url::Url::parse(&self.search_url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
            _ => {
                return Err(bad(
                    "search_url",
                    format!(
                        "{:?} must be an http:// or https:// address",
                        self.search_url
                    ),
                ))
            }
        }
        if self.search_engine == "searxng" && self.search_url.contains("duckduckgo.com") {
            return Err(bad(
                "search_url",
                "with search_engine = \"searxng\" it must be your SearXNG's search address, like https://searx.example.org/search".into(),
            ));
        }
        if !(1..=600).contains(&self.web_timeout_s) {
            return Err(bad(
                "web_timeout_s",
                format!("{} is outside 1..=600", self.web_timeout_s),
            ));
        }
        if !(4096..=64 << 20).contains(&self.web_max_bytes) {
            return Err(bad(
                "web_max_bytes",
                format!("{} is outside 4096..=67108864", self.web_max_bytes),
            ));
        }
        let contact_ok = (self.push_contact.starts_with("mailto:")
            || self.push_contact.starts_with("https://"))
            && self.push_contact.len() <= 200
            && !self
                .push_contact
                .bytes()
                .any(|b| b.is_ascii_control() || b == b'"');
        if !contact_ok {
            return Err(bad(
                "push_contact",
                format!(
                    "{:?} must be a mailto: or https:// address of 200 characters at most",
                    self.push_contact
                ),
            ));
        }
        if !(60..=2_419_200).contains(&self.push_ttl_s) {
            return Err(bad(
                "push_ttl_s",
                format!("{} is outside 60..=2419200", self.push_ttl_s),
            ));
        }
        self.sandbox
            .check()
            .map_err(|e| anyhow::anyhow!("chatd.{e}"))?;
        self.connections
            .check()
            .map_err(|e| anyhow::anyhow!("chatd.{e}"))?;
        for (key, model) in [
            ("image_model", &self.image_model),
            ("transcription_model", &self.transcription_model),
        ] {
            if model.len() > 200 || model.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(bad(
                    key,
                    format!("{model:?} is not a model id (no spaces, 200 bytes at most)"),
                ));
            }
        }
        if !(1..=3600).contains(&self.transcription_timeout_s) {
            return Err(bad(
                "transcription_timeout_s",
                format!("{} is outside 1..=3600", self.transcription_timeout_s),
            ));
        }
        if self.context_window < 2048 {
            return Err(bad(
                "context_window",
                format!("{} is under 2048 tokens", self.context_window),
            ));
        }
        Ok(())
    }

    /// `listen` as a socket address; `http://host:port` is taken too, since
    /// QSE_CHAT_URL holds a URL.
    pub fn listen_addr(&self) -> Result<std::net::SocketAddr, String> {
        let text = self
            .listen
            .trim_start_matches("http://")
            .trim_end_matches('/');
        text.parse()
            .map_err(|_| format!("{:?} is not an address like 127.0.0.1:8016", self.listen))
    }

    /// The front's address, `None` when there is no front.
    pub fn front_addr(&self) -> Result<Option<std::net::SocketAddr>, String> {
        // `off` lets an env file switch off a front the config file sets.
        if self.front.is_empty() || self.front == "off" {
            return Ok(None);
        }
        let text = self
            .front
            .trim_start_matches("http://")
            .trim_end_matches('/');
        let address: std::net::SocketAddr = text
            .parse()
            .map_err(|_| format!("{:?} is not an address like 0.0.0.0:4180", self.front))?;
        let same_port = |listen: std::net::SocketAddr| {
            listen.port() == address.port()
                && (listen.ip() == address.ip()
                    || listen.ip().is_unspecified()
                    || address.ip().is_unspecified())
        };
        if self.listen_addr().ok().is_some_and(same_port) {
            return Err(format!(
                "{:?} is chatd's own listen address: give the front a port of its own",
                self.front
            ));
        }
        Ok(Some(address))
    }
}

/// The commented default configuration, as `--print-default-config` prints it.
pub const DEFAULT_TOML: &str = include_str!("../../../config/tandem.toml");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_front_needs_a_port_of_its_own_and_off_means_none() {
        let check = |front: &str, hosts: &[&str], expect: Result<Option<&str>, &str>| {
            let config = ChatdConfig {
                front: front.into(),
                front_hosts: hosts.iter().map(|h| h.to_string()).collect(),
                ..ChatdConfig::default()
            };
            let got = config
                .check()
                .map(|_| config.front_addr().unwrap().map(|a| a.to_string()));
            match expect {
                Ok(address) => assert_eq!(got.unwrap().as_deref(), address, "{front}"),
                Err(text) => {
                    let err = got.expect_err(front).to_string();
                    assert!(err.contains(text), "{front}: {err}");
                }
            }
        };
        check("", &[], Ok(None));
        check("off", &[], Ok(None));
        check("0.0.0.0:4180", &[], Ok(Some("0.0.0.0:4180")));
        check("http://127.0.0.1:4180/", &[], Ok(Some("127.0.0.1:4180")));
        check(
            "0.0.0.0:8016",
            &[],
            Err("chatd.front: \"0.0.0.0:8016\" is chatd's own listen address"),
        );
        check("127.0.0.1:8016", &[], Err("own listen address"));
        check(
            "4180",
            &[],
            Err("chatd.front: \"4180\" is not an address like 0.0.0.0:4180"),
        );
        check("0.0.0.0:4180", &["gpubox.lan"], Ok(Some("0.0.0.0:4180")));
        check(
            "0.0.0.0:4180",
            &["gpu box"],
            Err("chatd.front_hosts[0]: \"gpu box\" is not a host name"),
        );
    }

    /// config/tandem.toml is what `--print-default-config` prints: its values
    /// must be the built-in defaults, so the commented file never lies.
    #[test]
    fn default_file_matches_the_built_in_defaults() {
        let file: FileConfig = toml::from_str(DEFAULT_TOML).expect("config/tandem.toml parses");
        assert_eq!(file.chatd, ChatdConfig::default());
        file.chatd.check().expect("the defaults pass the checks");
    }

    #[test]
    fn checks_name_the_key_and_the_limit() {
        let check = |change: fn(&mut ChatdConfig), expect: &str| {
            let mut config = ChatdConfig::default();
            change(&mut config);
            let err = config.check().unwrap_err().to_string();
            assert!(err.contains(expect), "{err:?} should contain {expect:?}");
        };
        check(|c| c.max_runs = 0, "chatd.max_runs: 0 is outside 1..=64");
        check(|c| c.listen = "nowhere".into(), "chatd.listen");
        check(
            |c| c.max_steps = 0,
            "chatd.max_steps: 0 is outside 1..=1000",
        );
        check(
            |c| c.goal_max_turns = 0,
            "chatd.goal_max_turns: 0 is outside 1..=1000",
        );
        check(
            |c| c.loop_min_interval_s = 29,
            "chatd.loop_min_interval_s: 29 is outside 30..=86400",
        );
        check(
            |c| c.compact_percent = 99,
            "chatd.compact_percent: 99 is outside 50..=95",
        );
        check(|c| c.engine_url = "ftp://x".into(), "chatd.engine_url");
        check(
            |c| c.max_body_bytes = 10,
            "chatd.max_body_bytes: 10 is outside",
        );
        check(
            |c| c.search_engine = "bing".into(),
            "chatd.search_engine: \"bing\" is not a search engine here: use duckduckgo or searxng",
        );
        check(|c| c.search_url = "ftp://x".into(), "chatd.search_url");
        check(
            |c| c.search_engine = "searxng".into(),
            "chatd.search_url: with search_engine",
        );
        check(
            |c| c.web_timeout_s = 0,
            "chatd.web_timeout_s: 0 is outside 1..=600",
        );
        check(
            |c| c.web_max_bytes = 100,
            "chatd.web_max_bytes: 100 is outside 4096..=67108864",
        );
        check(
            |c| c.push_contact = "me@example.org".into(),
            "chatd.push_contact: \"me@example.org\" must be a mailto: or https:// address",
        );
        check(
            |c| c.push_ttl_s = 1,
            "chatd.push_ttl_s: 1 is outside 60..=2419200",
        );
        check(
            |c| c.sandbox.mem_gb = 0.0,
            "chatd.sandbox.mem_gb: 0 is outside 0.03125..=1024",
        );
        check(
            |c| c.sandbox.user = "0:0".into(),
            "chatd.sandbox.user: commands never run as root",
        );
        check(
            |c| c.sandbox.user = "bob".into(),
            "chatd.sandbox.user: \"bob\" is not uid:gid",
        );
        check(
            |c| c.image_model = "a model".into(),
            "chatd.image_model: \"a model\" is not a model id",
        );
        check(
            |c| c.transcription_timeout_s = 0,
            "chatd.transcription_timeout_s: 0 is outside 1..=3600",
        );
        check(
            |c| c.sandbox.max_running = 0,
            "chatd.sandbox.max_running: 0 is outside 1..=64",
        );
    }

    #[test]
    fn listen_takes_a_url_too() {
        let config = ChatdConfig {
            listen: "http://127.0.0.1:9016".into(),
            ..ChatdConfig::default()
        };
        assert_eq!(config.listen_addr().unwrap().port(), 9016);
    }
}
