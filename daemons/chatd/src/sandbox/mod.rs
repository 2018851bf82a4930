//! Each chat's sandbox: one container a chat (`tandem-chat-<id>`), made and
//! run through the Docker Engine API (podman's API service or docker), locked
//! down whatever the runtime: the commands' user, every capability dropped,
//! no new privileges, a read-only root, no network but the chat's egress
//! socket, memory, CPU and process limits, no devices. The chat's workspace
//! (its own, or the box's shared folder for a shared chat) is
//! `/workspace`, its home `/home/sandbox`, its egress folder
//! `/run/tandem-egress` (the image's shim relays 127.0.0.1:3128 there).
//!
//! A sandbox starts at a chat's first command, stops when unused for
//! `idle_minutes`, when the chat goes to the trash, or when the box runs low on
//! memory (`guard`); the files stay in the chat's folders. Purging the chat
//! removes the container.

pub mod exec;
pub mod guard;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tandem_shared::docker::{Docker, DockerError};
use tandem_shared::shutdown::Shutdown;
use tandem_shared::sync::lock;

use crate::config::ChatdConfig;

/// The label every sandbox carries: its chat.
pub const CHAT_LABEL: &str = "tandem.chat";
/// The label naming the chatd data folder that made it: chatds with other
/// data folders (tests, a second instance) leave it alone.
pub const DATA_LABEL: &str = "tandem.data";

/// What capabilities say of sandboxes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Status {
    /// A runtime answers and the image is there.
    pub installed: bool,
    /// `podman 4.3.1`, `docker 28.2.2`.
    pub runtime: Option<String>,
    pub reason: Option<String>,
}

/// Why a sandbox could not be had; the message is the tool's result.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// No runtime, no image, folders the sandbox cannot use.
    #[error("{0}")]
    Unavailable(String),
    /// The memory guard said no, with the numbers.
    #[error("{0}")]
    Memory(String),
    /// As many sandboxes as allowed are running and all are working.
    #[error("{0}")]
    Busy(String),
    #[error("the container runtime failed: {0}")]
    Runtime(#[from] DockerError),
}

#[derive(Clone)]
pub struct Sandboxes {
    inner: Arc<Inner>,
}

struct Inner {
    docker: Docker,
    settings: crate::config::SandboxConfig,
    data_dir: PathBuf,
    /// Where each chat's workspace is (its own or the shared folder).
    folders: crate::folders::Folders,
    engine_url: String,
    http: reqwest::Client,
    /// The commands' uid and gid.
    user: (u32, u32),
    /// CPUs a sandbox may use: the setting, at most the box's.
    cpus: f64,
    status: Mutex<Status>,
    /// When `status` was last asked of the runtime.
    probed: Mutex<Option<Instant>>,
    running: Mutex<Chats>,
    /// Why chatd stopped a busy sandbox (the call then says so).
    stopped_busy: Mutex<HashMap<String, String>>,
    /// Starts one at a time: the guard's arithmetic holds for one start.
    starts: tokio::sync::Mutex<()>,
    shutdown: Shutdown,
}

/// The sandboxes chatd counts as running, and each chat's epoch: a stop or
/// a removal bumps it, so a start that began before sees it and gives up.
#[derive(Default)]
struct Chats {
    running: HashMap<String, Running>,
    epochs: HashMap<String, (u64, bool)>,
}

impl Chats {
    fn epoch(&self, chat: &str) -> u64 {
        self.epochs.get(chat).map(|e| e.0).unwrap_or(0)
    }

    fn bump(&mut self, chat: &str, removed: bool) {
        let entry = self.epochs.entry(chat.to_string()).or_insert((0, false));
        entry.0 += 1;
        entry.1 |= removed;
    }
}

/// A sandbox chatd started (or found running at its start).
struct Running {
    last_used: Instant,
    /// Calls using it now; a busy sandbox is never stopped for being idle.
    busy: u32,
    /// The cgroup's oom_kill count last seen: a rise means a kill.
    oom_seen: u64,
    /// The container cgroup's files, read from this side (None: not
    /// readable here; then asked inside).
    cgroup: Option<CgroupFiles>,
    /// The shim's pid as this side sees it.
    init_pid: u32,
    limit: u64,
}

#[derive(Clone)]
struct CgroupFiles {
    /// `memory.oom_control` (v1) or `memory.events` (v2).
    oom: PathBuf,
    /// `cgroup.procs` of the pids (v1) or unified (v2) hierarchy.
    procs: PathBuf,
}

/// A chat's sandbox in use: while held, it is not idle.
pub struct Lease {
    sandboxes: Sandboxes,
    pub chat: String,
    pub container: String,
    pub limit: u64,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut chats = self.sandboxes.lock_running();
        if let Some(r) = chats.running.get_mut(&self.chat) {
            r.busy = r.busy.saturating_sub(1);
            r.last_used = Instant::now();
        }
    }
}

/// The container's name for a chat.
pub fn container_name(chat: &str) -> String {
    format!("tandem-chat-{chat}")
}

/// Settings in force differ from the container's: it is made again.
struct Fit {
    limit: u64,
    image_id: String,
}

/// One folder bound into a sandbox: this side's path, where it is inside,
/// and whether the sandbox may write it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Bind {
    source: PathBuf,
    inside: &'static str,
    writable: bool,
}

impl Bind {
    /// As the create body's `Binds` says it.
    fn spec(&self) -> String {
        let mode = if self.writable { "rw" } else { "ro" };
        format!("{}:{}:{mode}", self.source.display(), self.inside)
    }
}

/// Whether a container's bind mounts are exactly `binds`: read from its
/// `Mounts` (source, destination, RW), since runtimes add their own options
/// to `HostConfig.Binds` (podman: `…:rw,rprivate,rbind`). A container made
/// with another workspace folder (`shared_workspace` changed) or another
/// data folder does not match.
fn binds_match(found: &Value, binds: &[Bind]) -> bool {
    let Some(mounts) = found["Mounts"].as_array() else {
        return false;
    };
    let mut have: Vec<(String, String, bool)> = mounts
        .iter()
        .filter(|m| m["Type"].as_str() == Some("bind"))
        .map(|m| {
            (
                m["Source"].as_str().unwrap_or("").to_string(),
                m["Destination"].as_str().unwrap_or("").to_string(),
                m["RW"].as_bool().unwrap_or(true),
            )
        })
        .collect();
    let mut want: Vec<(String, String, bool)> = binds
        .iter()
        .map(|b| {
            (
                b.source.to_string_lossy().into_owned(),
                b.inside.to_string(),
                b.writable,
            )
        })
        .collect();
    have.sort();
    want.sort();
    have == want
}

impl Sandboxes {
    pub fn new(
        config: &ChatdConfig,
        shutdown: Shutdown,
        folders: crate::folders::Folders,
    ) -> anyhow::Result<Sandboxes> {
        let settings = config.sandbox.clone();
        let user = settings.user_ids().unwrap_or_else(|| {
            let (uid, gid) = (nix::unistd::geteuid(), nix::unistd::getegid());
            if uid.is_root() {
                (1000, 1000)
            } else {
                (uid.as_raw(), gid.as_raw())
            }
        });
        let host_cpus = std::thread::available_parallelism()
            .map(|n| n.get() as f64)
            .unwrap_or(1.0);
        Ok(Sandboxes {
            inner: Arc::new(Inner {
                docker: Docker::new(&settings.socket)?,
                cpus: settings.cpus.min(host_cpus),
                settings,
                data_dir: config.data_dir.clone(),
                folders,
                engine_url: config.engine_url.trim_end_matches('/').to_string(),
                http: reqwest::Client::builder()
                    .timeout(Duration::from_secs(5))
                    .build()?,
                user,
                status: Mutex::new(Status::default()),
                probed: Mutex::new(None),
                running: Mutex::new(Chats::default()),
                stopped_busy: Mutex::new(HashMap::new()),
                starts: tokio::sync::Mutex::new(()),
                shutdown,
            }),
        })
    }

    fn lock_running(&self) -> std::sync::MutexGuard<'_, Chats> {
        // A panic elsewhere while holding it left plain data behind.
        lock(&self.inner.running)
    }

    pub fn status(&self) -> Status {
        lock(&self.inner.status).clone()
    }

    /// The memory limit of one sandbox, bytes.
    pub fn limit(&self) -> u64 {
        guard::bytes_of_gb(self.inner.settings.mem_gb)
    }

    /// `uid:gid` the commands run as.
    pub fn user(&self) -> String {
        format!("{}:{}", self.inner.user.0, self.inner.user.1)
    }

    pub fn docker(&self) -> &Docker {
        &self.inner.docker
    }

    pub fn running_count(&self) -> usize {
        self.lock_running().running.len()
    }

    /// The status, asked of the runtime again when older than 5 s (the
    /// capabilities route calls this on every request).
    pub async fn probe_cached(&self) -> Status {
        let fresh =
            lock(&self.inner.probed).is_some_and(|at| at.elapsed() < Duration::from_secs(5));
        if fresh {
            self.status()
        } else {
            self.probe().await
        }
    }

    /// Asks the runtime who it is and whether the image is there.
    pub async fn probe(&self) -> Status {
        let socket = self.inner.settings.socket.display().to_string();
        let image = &self.inner.settings.image;
        let status = match self.inner.docker.version().await {
            Err(DockerError::Unreachable(_)) => Status {
                installed: false,
                runtime: None,
                reason: Some(format!(
                    "no container runtime answers at {socket} (QSE_SANDBOX_SOCKET); see docs/sandbox.md"
                )),
            },
            Err(e) => Status {
                installed: false,
                runtime: None,
                reason: Some(e.to_string()),
            },
            Ok(runtime) => {
                let name = format!("{} {}", runtime.name, runtime.version);
                match self.inner.docker.image(image).await {
                    Ok(Some(_)) => Status {
                        installed: true,
                        runtime: Some(name),
                        reason: None,
                    },
                    Ok(None) => Status {
                        installed: false,
                        runtime: Some(name),
                        reason: Some(format!(
                            "the image {image} is not there: `tandem sandbox build` makes it"
                        )),
                    },
                    Err(e) => Status {
                        installed: false,
                        runtime: Some(name),
                        reason: Some(e.to_string()),
                    },
                }
            }
        };
        *lock(&self.inner.status) = status.clone();
        *lock(&self.inner.probed) = Some(Instant::now());
        status
    }

    /// The chat's sandbox, started if it is not running; held busy until
    /// the lease drops.
    pub async fn ensure(&self, chat: &str) -> Result<Lease, SandboxError> {
        if !tandem_shared::http::is_chat_id(chat) {
            return Err(SandboxError::Unavailable(format!(
                "{chat:?} is not a chat id"
            )));
        }
        // A running sandbox needs no start, and waits for none.
        if let Some(lease) = self.lease(chat) {
            return Ok(lease);
        }
        let epoch = self.lock_running().epoch(chat);
        let _one_start = self.inner.starts.lock().await;
        if let Some(lease) = self.lease(chat) {
            return Ok(lease);
        }
        if !self.status().installed {
            let why = self.probe().await;
            if !why.installed {
                return Err(SandboxError::Unavailable(
                    why.reason
                        .unwrap_or_else(|| "the sandbox is not installed".into()),
                ));
            }
        }
        let limit = self.limit();
        self.make_room(limit).await?;
        self.memory_guard(limit, chat, epoch).await?;
        self.still_wanted(chat, epoch)?;
        let name = container_name(chat);
        let fit = self.fit().await?;
        let binds = self.prepare_folders(chat)?;
        let spec = self.spec(chat, limit, &binds);
        let fresh = match self.inner.docker.container(&name).await? {
            Some(found) if self.fits(&found, &fit, &binds) => false,
            Some(_) => {
                // Made under other settings: it takes the current ones now
                // (its files are in the chat's folders, not in it).
                self.inner.docker.remove(&name).await?;
                self.inner.docker.create(&name, &spec).await?;
                true
            }
            None => {
                self.inner.docker.create(&name, &spec).await?;
                true
            }
        };
        self.inner.docker.start(&name).await?;
        let (cgroup, init_pid) = self.cgroup_files(&name).await;
        // Counted from what the cgroup says now: 0 after a start, more for
        // one that was running already.
        let oom_seen = cgroup
            .as_ref()
            .and_then(|c| read_oom_count(&c.oom))
            .unwrap_or(0);
        let lease = {
            let mut chats = self.lock_running();
            if chats.epoch(chat) == epoch {
                chats.running.insert(
                    chat.to_string(),
                    Running {
                        last_used: Instant::now(),
                        busy: 1,
                        oom_seen,
                        cgroup: cgroup.clone(),
                        init_pid,
                        limit,
                    },
                );
                Some(Lease {
                    sandboxes: self.clone(),
                    chat: chat.to_string(),
                    container: name.clone(),
                    limit,
                })
            } else {
                None
            }
        };
        let Some(lease) = lease else {
            // Stopped or removed while it started: undo it.
            self.undo_start(chat).await;
            return Err(SandboxError::Unavailable(
                "the chat's sandbox was stopped while it started".into(),
            ));
        };
        self.clear_stop_reason(chat);
        tracing::info!(chat, container = %name, limit_mib = limit >> 20, fresh,
            cgroup_from_host = cgroup.is_some(), "sandbox started");
        Ok(lease)
    }

    /// Err when a stop or a removal came since `epoch`.
    fn still_wanted(&self, chat: &str, epoch: u64) -> Result<(), SandboxError> {
        if self.lock_running().epoch(chat) == epoch {
            Ok(())
        } else {
            Err(SandboxError::Unavailable(
                "the chat's sandbox was stopped while it started".into(),
            ))
        }
    }

    /// A start that lost to a stop or a removal: the container stops (or
    /// goes, with the chat's folders, when the chat was removed).
    async fn undo_start(&self, chat: &str) {
        let removed = self
            .lock_running()
            .epochs
            .get(chat)
            .map(|e| e.1)
            .unwrap_or(false);
        let name = container_name(chat);
        if removed {
            let _ = self.inner.docker.remove(&name).await;
            crate::remove_chat_folders(&self.inner.data_dir, chat);
        } else {
            let _ = self.inner.docker.stop(&name, 2).await;
        }
    }

    fn lease(&self, chat: &str) -> Option<Lease> {
        let lease = {
            let mut chats = self.lock_running();
            let r = chats.running.get_mut(chat)?;
            r.busy += 1;
            r.last_used = Instant::now();
            Lease {
                sandboxes: self.clone(),
                chat: chat.to_string(),
                container: container_name(chat),
                limit: r.limit,
            }
        };
        self.clear_stop_reason(chat);
        Some(lease)
    }

    /// What a container must have been made with to be used as it is.
    async fn fit(&self) -> Result<Fit, SandboxError> {
        let image = &self.inner.settings.image;
        let found = self.inner.docker.image(image).await?.ok_or_else(|| {
            SandboxError::Unavailable(format!(
                "the image {image} is not there: `tandem sandbox build` makes it"
            ))
        })?;
        Ok(Fit {
            limit: self.limit(),
            image_id: found["Id"].as_str().unwrap_or("").to_string(),
        })
    }

    /// Whether an existing container was made under the current settings,
    /// from the current image and with the chat's folders bound as now.
    fn fits(&self, found: &Value, fit: &Fit, binds: &[Bind]) -> bool {
        let host = &found["HostConfig"];
        let id = |v: &Value| {
            v.as_str()
                .unwrap_or("")
                .trim_start_matches("sha256:")
                .to_string()
        };
        host["Memory"].as_u64() == Some(fit.limit)
            && host["PidsLimit"].as_u64() == Some(self.inner.settings.pids as u64)
            && host["NanoCpus"].as_u64() == Some((self.inner.cpus * 1e9) as u64)
            && host["ReadonlyRootfs"].as_bool() == Some(true)
            && found["Config"]["User"].as_str() == Some(self.user().as_str())
            && found["Config"]["Labels"][DATA_LABEL].as_str()
                == Some(self.inner.data_dir.to_string_lossy().as_ref())
            && !fit.image_id.is_empty()
            && id(&found["Image"]) == id(&json!(fit.image_id))
            && binds_match(found, binds)
    }

    /// The create body: everything locked down, whatever the runtime's defaults.
    fn spec(&self, chat: &str, limit: u64, binds: &[Bind]) -> Value {
        let binds: Vec<String> = binds.iter().map(Bind::spec).collect();
        json!({
            "Image": self.inner.settings.image,
            "User": self.user(),
            "WorkingDir": "/workspace",
            "Env": ["HOME=/home/sandbox"],
            "Labels": {
                CHAT_LABEL: chat,
                DATA_LABEL: self.inner.data_dir.to_string_lossy(),
            },
            "HostConfig": {
                "NetworkMode": "none",
                "ReadonlyRootfs": true,
                "CapDrop": ["ALL"],
                "CapAdd": [],
                "SecurityOpt": ["no-new-privileges"],
                "Privileged": false,
                "Memory": limit,
                // No swap past the limit: a command over it is killed.
                "MemorySwap": limit,
                "NanoCpus": (self.inner.cpus * 1e9) as u64,
                "PidsLimit": self.inner.settings.pids,
                "Devices": [],
                "Tmpfs": {"/tmp": "rw,nosuid,nodev,size=256m,mode=1777"},
                "Binds": binds,
                "RestartPolicy": {"Name": "no"},
                "IpcMode": "private",
            }
        })
    }

    /// The chat's folders bound into its sandbox: the workspace (its own,
    /// or the box's shared folder), the home and the egress folder.
    fn binds_of(&self, chat: &str) -> [Bind; 3] {
        [
            Bind {
                source: self.inner.folders.workspace(chat),
                inside: "/workspace",
                writable: true,
            },
            Bind {
                source: self.inner.data_dir.join("homes").join(chat),
                inside: "/home/sandbox",
                writable: true,
            },
            Bind {
                source: self.inner.data_dir.join("egress").join(chat),
                inside: "/run/tandem-egress",
                writable: false,
            },
        ]
    }

    /// The chat's own folders (under the data folder) among its binds: all
    /// three, but the workspace of a shared chat, which is the box's.
    fn own_folders_of(&self, chat: &str) -> Vec<PathBuf> {
        let shared = self.inner.folders.is_shared(chat);
        self.binds_of(chat)
            .into_iter()
            .filter(|b| !(shared && b.inside == "/workspace"))
            .map(|b| b.source)
            .collect()
    }

    /// Makes the chat's folders and answers the bind list. The commands'
    /// user must be able to write them: chatd running as root hands them to
    /// it; otherwise they must be chatd's own user.
    ///
    /// As root, the chat's own folders are handed over with everything in
    /// them; the shared workspace only as the folder itself, so the
    /// commands can make files in it. Its contents are left alone: they are
    /// the box's (other chats', file triggers', the person's), a recursive
    /// chown would take them from their owners and walk the whole tree at
    /// every start. Files chatd's tools write there as root stay root's
    /// (chatd runs as root in tests only).
    fn prepare_folders(&self, chat: &str) -> Result<Vec<Bind>, SandboxError> {
        let (uid, gid) = self.inner.user;
        let me = nix::unistd::geteuid();
        if !me.is_root() && me.as_raw() != uid {
            return Err(SandboxError::Unavailable(format!(
                "the sandbox's commands run as uid {uid} ([chatd.sandbox] user) but the chat's \
                 folders belong to chatd's uid {me}: leave `user` empty to use chatd's own"
            )));
        }
        let binds = self.binds_of(chat);
        let own = self.own_folders_of(chat);
        for bind in &binds {
            let path = &bind.source;
            tandem_shared::fsmode::private_dir(path).map_err(|e| {
                SandboxError::Unavailable(format!("could not make {}: {e}", path.display()))
            })?;
            if me.is_root() {
                let handed = if own.contains(path) {
                    hand_over(path, uid, gid)
                } else {
                    hand_over_folder(path, uid, gid).map(drop)
                };
                handed.map_err(|e| {
                    SandboxError::Unavailable(format!(
                        "could not hand {} to uid {uid}: {e}",
                        path.display()
                    ))
                })?;
            }
        }
        Ok(binds.to_vec())
    }

    /// Before a command, when chatd runs as root: what chatd's tools wrote
    /// in the chat's own folders since goes to the commands' user. Never the
    /// shared workspace: handed over as a folder at the start (see
    /// `prepare_folders`), its contents are not chatd's to give away, and
    /// walking it at every command would cost as much as the tree is big.
    pub async fn hand_over_folders(&self, chat: &str) {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let (uid, gid) = self.inner.user;
        let folders = self.own_folders_of(chat);
        let chat = chat.to_string();
        let _ = tokio::task::spawn_blocking(move || {
            for path in folders {
                if let Err(err) = hand_over(&path, uid, gid) {
                    tracing::warn!(chat, path = %path.display(), error = %err,
                        "could not hand a folder to the sandbox's user");
                }
            }
        })
        .await;
    }

    /// Stops sandboxes (least recently used idle first) until one more of
    /// `limit` fits `max_running` and `total_gb`.
    async fn make_room(&self, limit: u64) -> Result<(), SandboxError> {
        let settings = &self.inner.settings;
        let total_cap = if settings.total_gb > 0.0 {
            guard::bytes_of_gb(settings.total_gb)
        } else {
            settings.max_running as u64 * limit
        };
        loop {
            let (count, used, idle) = {
                let chats = self.lock_running();
                (
                    chats.running.len(),
                    chats.running.values().map(|r| r.limit).sum::<u64>(),
                    least_recently_used_idle(&chats),
                )
            };
            if (count as u32) < settings.max_running && used + limit <= total_cap {
                return Ok(());
            }
            let Some(chat) = idle else {
                return Err(SandboxError::Busy(format!(
                    "{count} sandboxes are running ({} allowed, {} of {} memory in use) and \
                     all of them are working: try again when one is done",
                    settings.max_running,
                    guard::size(used),
                    guard::size(total_cap)
                )));
            };
            self.stop_if_idle(&chat, "making room for another chat's sandbox")
                .await;
        }
    }

    /// Waits for memory: MemAvailable minus the limit must stay at the
    /// floor. Asks the engine for the difference first. A stop of the chat
    /// or chatd's shutdown ends the wait.
    async fn memory_guard(&self, limit: u64, chat: &str, epoch: u64) -> Result<(), SandboxError> {
        let settings = &self.inner.settings;
        let floor = guard::bytes_of_gb(settings.floor_gb);
        let Some(available) = guard::available(&settings.meminfo) else {
            return Ok(());
        };
        let short = guard::shortfall(available, limit, floor);
        if short == 0 {
            return Ok(());
        }
        let asked = self.ask_engine_to_release(short).await;
        tracing::info!(
            chat,
            available_mib = available >> 20,
            short_mib = short >> 20,
            asked,
            "sandbox start waits for memory"
        );
        let began = Instant::now();
        let wait = Duration::from_secs(settings.wait_s);
        let mut now_available = available;
        while began.elapsed() < wait {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(250)) => {}
                _ = self.inner.shutdown.wait() => {
                    return Err(SandboxError::Unavailable("chatd is stopping".into()));
                }
            }
            self.still_wanted(chat, epoch)?;
            now_available = guard::available(&settings.meminfo).unwrap_or(now_available);
            if guard::shortfall(now_available, limit, floor) == 0 {
                return Ok(());
            }
        }
        Err(SandboxError::Memory(format!(
            "not enough memory to start the sandbox: {} available, the sandbox takes {} and {} \
             must stay free for the engine (QSE_SANDBOX_FLOOR_GB); {} the engine to release {} \
             and waited {} s. Try again later, or go on without commands.",
            guard::size(now_available),
            guard::size(limit),
            guard::size(floor),
            if asked { "asked" } else { "could not ask" },
            guard::size(guard::shortfall(now_available, limit, floor).max(short)),
            began.elapsed().as_secs()
        )))
    }

    /// `POST /v1/cache/release {"bytes"}` to the engine; whether it took it.
    async fn ask_engine_to_release(&self, bytes: u64) -> bool {
        let url = format!("{}/v1/cache/release", self.inner.engine_url);
        match self
            .inner
            .http
            .post(&url)
            .json(&json!({"bytes": bytes}))
            .send()
            .await
        {
            Ok(r) => r.status().is_success(),
            Err(_) => false,
        }
    }

    /// Stops a chat's sandbox (its files stay); `why` goes in the log and,
    /// for a sandbox that was working, in its call's result. A start under
    /// way gives up.
    pub async fn stop(&self, chat: &str, why: &str) {
        let was = {
            let mut chats = self.lock_running();
            chats.bump(chat, false);
            chats.running.remove(chat)
        };
        self.stop_taken(chat, why, was).await;
    }

    /// Stops the chat's sandbox only if nobody uses it at this moment (the
    /// check and the taking under one lock).
    async fn stop_if_idle(&self, chat: &str, why: &str) -> bool {
        let was = {
            let mut chats = self.lock_running();
            match chats.running.get(chat) {
                Some(r) if r.busy == 0 => chats.running.remove(chat),
                _ => return false,
            }
        };
        self.stop_taken(chat, why, was).await;
        true
    }

    async fn stop_taken(&self, chat: &str, why: &str, was: Option<Running>) {
        if let Some(r) = &was {
            if r.busy > 0 {
                lock(&self.inner.stopped_busy).insert(chat.to_string(), why.to_string());
            }
        }
        let name = container_name(chat);
        // The shim ends at SIGTERM at once; 2 s covers a slow runtime.
        match self.inner.docker.stop(&name, 2).await {
            Ok(()) | Err(DockerError::NotFound(_)) => {
                if was.is_some() {
                    tracing::info!(chat, container = %name, why, "sandbox stopped");
                }
            }
            Err(err) => {
                tracing::warn!(chat, container = %name, error = %err, "sandbox stop failed; tried again later");
                // Still counted, so the monitor tries again.
                if let Some(mut r) = was {
                    r.busy = 0;
                    self.lock_running()
                        .running
                        .entry(chat.to_string())
                        .or_insert(r);
                }
            }
        }
    }

    /// Why chatd stopped this chat's sandbox while a call used it, once.
    pub fn take_stop_reason(&self, chat: &str) -> Option<String> {
        lock(&self.inner.stopped_busy).remove(chat)
    }

    fn clear_stop_reason(&self, chat: &str) {
        self.take_stop_reason(chat);
    }

    /// Forgets a sandbox whose container went away underneath (stopped by
    /// hand, the runtime restarted): the next call starts it again.
    pub fn forget(&self, chat: &str) {
        self.lock_running().running.remove(chat);
    }

    /// Removes a chat's container for good (purge, delete forever); a start
    /// under way undoes itself, folders included.
    pub async fn remove(&self, chat: &str) {
        {
            let mut chats = self.lock_running();
            chats.bump(chat, true);
            chats.running.remove(chat);
        }
        let name = container_name(chat);
        match self.inner.docker.remove(&name).await {
            Ok(true) => tracing::info!(chat, container = %name, "sandbox removed"),
            Ok(false) => {}
            Err(DockerError::Unreachable(_)) => {}
            Err(err) => {
                tracing::warn!(chat, container = %name, error = %err, "sandbox remove failed")
            }
        }
    }

    /// At chatd's start: removes every container of this data folder whose
    /// chat is gone or in the trash (`live` answers whether a chat is
    /// neither), stops running ones made under other settings (the next
    /// command makes them again), and counts the others as started.
    pub async fn sweep<F>(&self, live: F) -> usize
    where
        F: Fn(&str) -> bool,
    {
        let list = match self.inner.docker.list_labelled(CHAT_LABEL).await {
            Ok(list) => list,
            Err(DockerError::Unreachable(_)) => return 0,
            Err(err) => {
                tracing::warn!(error = %err, "could not list the sandboxes");
                return 0;
            }
        };
        let fit = self.fit().await.ok();
        let data = self.inner.data_dir.to_string_lossy().to_string();
        let mut removed = 0;
        for container in list {
            if container.labels.get(DATA_LABEL) != Some(&data) {
                continue;
            }
            let Some(chat) = container.labels.get(CHAT_LABEL) else {
                continue;
            };
            if !live(chat) {
                match self.inner.docker.remove(&container.id).await {
                    Ok(_) => {
                        removed += 1;
                        tracing::info!(chat = %chat, container = %container.name,
                            "removed the sandbox of a chat that is gone or in the trash");
                    }
                    Err(err) => {
                        tracing::warn!(chat = %chat, error = %err, "could not remove a sandbox")
                    }
                }
                continue;
            }
            if container.state != "running" {
                continue;
            }
            let found = self
                .inner
                .docker
                .container(&container.id)
                .await
                .ok()
                .flatten();
            let fits = match (&found, &fit) {
                (Some(found), Some(fit)) => self.fits(found, fit, &self.binds_of(chat)),
                _ => false,
            };
            if !fits {
                let _ = self.inner.docker.stop(&container.id, 2).await;
                tracing::info!(chat = %chat, container = %container.name,
                    "stopped a sandbox made under other settings; the next command makes it again");
                continue;
            }
            let (cgroup, init_pid) = self.cgroup_files(&container.name).await;
            let oom_seen = match &cgroup {
                Some(files) => read_oom_count(&files.oom).unwrap_or(0),
                None => self.oom_kills(&container.name).await.unwrap_or(0),
            };
            self.lock_running()
                .running
                .entry(chat.clone())
                .or_insert(Running {
                    last_used: Instant::now(),
                    busy: 0,
                    oom_seen,
                    cgroup,
                    init_pid,
                    limit: self.limit(),
                });
        }
        removed
    }

    /// The container cgroup's count of processes killed for memory (cgroup
    /// v2 `memory.events`, v1 `memory.oom_control`), read from inside.
    pub async fn oom_kills(&self, container: &str) -> Option<u64> {
        let cmd = [
            "/bin/sh",
            "-c",
            "cat /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null",
        ];
        let (_, out) = self
            .inner
            .docker
            .exec_output(container, &cmd, &self.user(), Duration::from_secs(10))
            .await
            .ok()?;
        String::from_utf8_lossy(&out)
            .lines()
            .filter_map(|l| l.strip_prefix("oom_kill "))
            .filter_map(|n| n.trim().parse::<u64>().ok())
            .max()
    }

    /// The container cgroup's files as this side sees them, from its first
    /// process's /proc/<pid>/cgroup (readable by anyone), and that pid.
    async fn cgroup_files(&self, container: &str) -> (Option<CgroupFiles>, u32) {
        let Ok(Some(found)) = self.inner.docker.container(container).await else {
            return (None, 0);
        };
        let pid = found["State"]["Pid"].as_u64().unwrap_or(0) as u32;
        if pid == 0 {
            return (None, 0);
        }
        let files = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .ok()
            .and_then(|text| cgroup_files_of(&text))
            .filter(|f| read_oom_count(&f.oom).is_some() && std::fs::metadata(&f.procs).is_ok());
        (files, pid)
    }

    /// Whether the chat's sandbox lost a process to its memory limit since
    /// last asked. Without the cgroup file on this side, it is asked inside
    /// (an exec) only when `failed`.
    pub async fn oom_since_last(&self, chat: &str, failed: bool) -> bool {
        let file = self
            .lock_running()
            .running
            .get(chat)
            .and_then(|r| r.cgroup.as_ref().map(|c| c.oom.clone()));
        let count = match file {
            Some(file) => read_oom_count(&file),
            None if failed => self.oom_kills(&container_name(chat)).await,
            None => None,
        };
        let Some(count) = count else {
            return false;
        };
        let mut chats = self.lock_running();
        match chats.running.get_mut(chat) {
            Some(r) if count > r.oom_seen => {
                r.oom_seen = count;
                true
            }
            _ => false,
        }
    }

    /// Whether anything but the shim may still run in the chat's sandbox:
    /// read from the cgroup on this side; `true` when it cannot be read.
    pub fn anything_left(&self, chat: &str) -> bool {
        let (files, init) = {
            let chats = self.lock_running();
            match chats.running.get(chat) {
                Some(r) => (r.cgroup.clone(), r.init_pid),
                None => return false,
            }
        };
        let Some(files) = files else {
            return true;
        };
        match std::fs::read_to_string(&files.procs) {
            Ok(text) => text
                .lines()
                .filter_map(|l| l.trim().parse::<u32>().ok())
                .any(|pid| pid != init),
            Err(_) => true,
        }
    }

    /// Every 2 s: stops sandboxes under memory pressure and the idle ones;
    /// every 30 s, forgets the ones no longer running in the runtime.
    pub fn spawn_monitor(&self) {
        let this = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(2));
            let mut ticks: u64 = 0;
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        ticks += 1;
                        this.watch_once().await;
                        if ticks.is_multiple_of(15) {
                            this.reconcile().await;
                        }
                    }
                    _ = this.inner.shutdown.wait() => return,
                }
            }
        });
    }

    async fn watch_once(&self) {
        if self.lock_running().running.is_empty() {
            return;
        }
        if let Some(available) = guard::available(&self.inner.settings.meminfo) {
            match guard::pressure(available) {
                guard::Pressure::StopAll => {
                    let chats: Vec<String> = self.lock_running().running.keys().cloned().collect();
                    let why = format!(
                        "the box's free memory fell to {} (under 2 GiB)",
                        guard::size(available)
                    );
                    for chat in chats {
                        self.stop(&chat, &why).await;
                    }
                }
                guard::Pressure::StopOneIdle => {
                    let lru = least_recently_used_idle(&self.lock_running());
                    if let Some(chat) = lru {
                        let why = format!(
                            "the box's free memory fell to {} (under 3 GiB)",
                            guard::size(available)
                        );
                        self.stop_if_idle(&chat, &why).await;
                    }
                }
                guard::Pressure::None => {}
            }
        }
        let idle_for = Duration::from_secs(self.inner.settings.idle_minutes * 60);
        let idle: Vec<String> = self
            .lock_running()
            .running
            .iter()
            .filter(|(_, r)| r.busy == 0 && r.last_used.elapsed() >= idle_for)
            .map(|(c, _)| c.clone())
            .collect();
        for chat in idle {
            self.stop_if_idle(&chat, "unused for idle_minutes").await;
        }
    }

    /// Forgets counted sandboxes whose container no longer runs (stopped by
    /// hand, the runtime restarted).
    async fn reconcile(&self) {
        let Ok(list) = self.inner.docker.list_labelled(CHAT_LABEL).await else {
            return;
        };
        let data = self.inner.data_dir.to_string_lossy().to_string();
        let running: std::collections::HashSet<String> = list
            .iter()
            .filter(|c| c.state == "running" && c.labels.get(DATA_LABEL) == Some(&data))
            .filter_map(|c| c.labels.get(CHAT_LABEL).cloned())
            .collect();
        let mut chats = self.lock_running();
        chats
            .running
            .retain(|chat, r| r.busy > 0 || running.contains(chat));
    }
}

/// The least recently used sandbox nobody uses now.
fn least_recently_used_idle(chats: &Chats) -> Option<String> {
    chats
        .running
        .iter()
        .filter(|(_, r)| r.busy == 0)
        .min_by_key(|(_, r)| r.last_used)
        .map(|(chat, _)| chat.clone())
}

/// The container cgroup's files, from a /proc/<pid>/cgroup: cgroup v1's
/// `memory.oom_control` and the pids hierarchy's `cgroup.procs`, or v2's
/// `memory.events` and `cgroup.procs`.
fn cgroup_files_of(cgroups: &str) -> Option<CgroupFiles> {
    let root = Path::new("/sys/fs/cgroup");
    let mut memory = None;
    let mut pids = None;
    let mut unified = None;
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let path = path.trim_start_matches('/');
        if controllers.is_empty() {
            unified = Some(root.join(path));
        }
        for controller in controllers.split(',') {
            match controller {
                "memory" => memory = Some(root.join("memory").join(path)),
                "pids" => pids = Some(root.join("pids").join(path)),
                _ => {}
            }
        }
    }
    match (memory, pids, unified) {
        (Some(memory), Some(pids), _) => Some(CgroupFiles {
            oom: memory.join("memory.oom_control"),
            procs: pids.join("cgroup.procs"),
        }),
        (None, None, Some(dir)) => Some(CgroupFiles {
            oom: dir.join("memory.events"),
            procs: dir.join("cgroup.procs"),
        }),
        _ => None,
    }
}

/// The `oom_kill` count of such a file.
fn read_oom_count(file: &Path) -> Option<u64> {
    std::fs::read_to_string(file)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
}

/// Gives the folder itself (not what is in it) to `uid:gid`; answers it open.
fn hand_over_folder(dir: &Path, uid: u32, gid: u32) -> std::io::Result<std::os::fd::OwnedFd> {
    use nix::fcntl::{openat, OFlag, AT_FDCWD};
    use nix::sys::stat::{fstat, Mode};

    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    // The folder itself is chatd's own path (the data folder's, or the
    // configured shared one), made by chatd.
    let folder = openat(AT_FDCWD, dir, flags, Mode::empty())?;
    let st = fstat(&folder)?;
    if st.st_uid != uid || st.st_gid != gid {
        nix::unistd::fchown(
            &folder,
            Some(nix::unistd::Uid::from_raw(uid)),
            Some(nix::unistd::Gid::from_raw(gid)),
        )?;
    }
    Ok(folder)
}

/// Gives `dir` and everything under it to `uid:gid` (chatd as root only).
/// A running command may change the tree meanwhile, so every step is made
/// from an open folder, never by path: entries are stat'ed and chowned
/// without following links (`AT_SYMLINK_NOFOLLOW`), and folders are entered
/// with `O_NOFOLLOW`, so a folder swapped for a link to /etc is skipped,
/// never walked. Bounded: 200,000 entries.
fn hand_over(dir: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    use nix::dir::Dir;
    use nix::fcntl::{openat, AtFlags, OFlag};
    use nix::sys::stat::{fstatat, Mode};
    use std::os::fd::OwnedFd;

    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let owner = Some(nix::unistd::Uid::from_raw(uid));
    let group = Some(nix::unistd::Gid::from_raw(gid));
    let root = hand_over_folder(dir, uid, gid)?;
    let mut pending: Vec<OwnedFd> = vec![root];
    let mut seen = 0usize;
    while let Some(folder) = pending.pop() {
        let listing = match Dir::from_fd(folder.try_clone()?) {
            Ok(d) => d,
            Err(_) => continue,
        };
        let mut names = Vec::new();
        let mut listing = listing;
        for entry in listing.iter() {
            let Ok(entry) = entry else { break };
            let name = entry.file_name().to_owned();
            if matches!(name.to_bytes(), b"." | b"..") {
                continue;
            }
            names.push(name);
        }
        for name in names {
            seen += 1;
            if seen > 200_000 {
                return Ok(());
            }
            // Gone meanwhile: nothing to hand over.
            let Ok(st) = fstatat(&folder, name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW) else {
                continue;
            };
            if st.st_uid != uid || st.st_gid != gid {
                let _ = nix::unistd::fchownat(
                    &folder,
                    name.as_c_str(),
                    owner,
                    group,
                    AtFlags::AT_SYMLINK_NOFOLLOW,
                );
            }
            if nix::sys::stat::SFlag::from_bits_truncate(
                st.st_mode & nix::sys::stat::SFlag::S_IFMT.bits(),
            ) == nix::sys::stat::SFlag::S_IFDIR
            {
                // A link put there since the stat fails to open: skipped.
                if let Ok(child) = openat(&folder, name.as_c_str(), flags, Mode::empty()) {
                    pending.push(child);
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sandboxes for a chatd with `data` and the shared folder `shared`,
    /// `c_shared` a shared chat (no runtime is asked).
    fn sandboxes(data: &Path, shared: &Path) -> Sandboxes {
        let config = ChatdConfig {
            data_dir: data.to_path_buf(),
            shared_workspace: shared.to_path_buf(),
            ..ChatdConfig::default()
        };
        let folders = crate::folders::Folders::from_config(&config);
        folders.made("c_shared", "shared");
        folders.made("c_own", "own");
        Sandboxes::new(&config, Shutdown::new().1, folders).unwrap()
    }

    /// What a runtime's inspect says of a container made from `spec`, as
    /// podman's compat API answers: `Binds` with options added, `Mounts`
    /// one entry a bind, tmpfs not among them.
    fn inspected(spec: &Value, image_id: &str) -> Value {
        let binds = spec["HostConfig"]["Binds"].as_array().unwrap();
        let mounts: Vec<Value> = binds
            .iter()
            .map(|b| {
                let parts: Vec<&str> = b.as_str().unwrap().split(':').collect();
                json!({"Type": "bind", "Source": parts[0], "Destination": parts[1],
                       "Mode": "", "RW": parts[2] == "rw", "Propagation": "rprivate"})
            })
            .collect();
        let mut host = spec["HostConfig"].clone();
        host["Binds"] = binds
            .iter()
            .map(|b| json!(format!("{},rprivate,rbind", b.as_str().unwrap())))
            .collect();
        json!({
            "Image": format!("sha256:{image_id}"),
            "Config": {"User": spec["User"], "Labels": spec["Labels"]},
            "HostConfig": host,
            "Mounts": mounts,
        })
    }

    /// A container is used as it is only when its folders are bound as now:
    /// a shared chat's container made under another `shared_workspace` (or
    /// one with a folder more, fewer or of another mode) is made again.
    #[test]
    fn a_container_made_under_other_binds_does_not_fit() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("chat");
        let here = sandboxes(&data, &dir.path().join("workspace"));
        let fit = Fit {
            limit: here.limit(),
            image_id: "ab12".into(),
        };
        for chat in ["c_shared", "c_own"] {
            let binds = here.binds_of(chat);
            let found = inspected(&here.spec(chat, fit.limit, &binds), "ab12");
            assert!(here.fits(&found, &fit, &binds), "{chat}: {found}");
        }
        let binds = here.binds_of("c_shared");
        assert_eq!(binds[0].source, dir.path().join("workspace"));
        let made_here = inspected(&here.spec("c_shared", fit.limit, &binds), "ab12");

        // shared_workspace changed: the shared chat's container does not fit;
        // an own chat's is unchanged.
        let moved = sandboxes(&data, &dir.path().join("elsewhere"));
        let now = moved.binds_of("c_shared");
        assert_eq!(now[0].source, dir.path().join("elsewhere"));
        assert!(!moved.fits(&made_here, &fit, &now));
        let own = moved.binds_of("c_own");
        let own_found = inspected(
            &here.spec("c_own", fit.limit, &here.binds_of("c_own")),
            "ab12",
        );
        assert!(moved.fits(&own_found, &fit, &own));

        // A bind of another mode, one more, one fewer, no Mounts at all.
        let mut ro = made_here.clone();
        ro["Mounts"][0]["RW"] = json!(false);
        assert!(!here.fits(&ro, &fit, &binds));
        let mut more = made_here.clone();
        more["Mounts"].as_array_mut().unwrap().push(
            json!({"Type": "bind", "Source": "/etc", "Destination": "/host-etc", "RW": false}),
        );
        assert!(!here.fits(&more, &fit, &binds));
        let mut fewer = made_here.clone();
        fewer["Mounts"].as_array_mut().unwrap().pop();
        assert!(!here.fits(&fewer, &fit, &binds));
        let mut none = made_here.clone();
        none.as_object_mut().unwrap().remove("Mounts");
        assert!(!here.fits(&none, &fit, &binds));
        // Mounts that are not binds (a runtime's tmpfs, a volume) do not count.
        let mut tmpfs = made_here.clone();
        tmpfs["Mounts"]
            .as_array_mut()
            .unwrap()
            .push(json!({"Type": "tmpfs", "Source": "", "Destination": "/tmp", "RW": true}));
        assert!(here.fits(&tmpfs, &fit, &binds));
        // The other settings still count as before.
        let mut image = made_here.clone();
        image["Image"] = json!("sha256:cd34");
        assert!(!here.fits(&image, &fit, &binds));
    }

    /// As root: a sandbox start hands the shared workspace itself to the
    /// commands' user and leaves what is in it alone; a command hands over
    /// the chat's own folders with their contents, never the shared one.
    #[tokio::test]
    async fn as_root_the_shared_workspace_is_handed_over_as_a_folder_only() {
        use std::os::unix::fs::MetadataExt;
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("chat");
        let shared = dir.path().join("workspace");
        std::fs::create_dir_all(shared.join("notes")).unwrap();
        std::fs::write(shared.join("notes/box.txt"), "the box's").unwrap();
        let here = sandboxes(&data, &shared);
        let (uid, gid) = here.inner.user;
        assert_ne!(uid, 0);
        let owner = |p: &Path| {
            let m = std::fs::symlink_metadata(p).unwrap();
            (m.uid(), m.gid())
        };

        let binds = here.prepare_folders("c_shared").unwrap();
        assert_eq!(binds[0].source, shared);
        assert_eq!(owner(&shared), (uid, gid), "the folder itself");
        assert_eq!(owner(&shared.join("notes")), (0, 0), "its contents stay");
        assert_eq!(owner(&shared.join("notes/box.txt")), (0, 0));
        let home = data.join("homes/c_shared");
        assert_eq!(owner(&home), (uid, gid));

        // chatd's tools wrote (as root) in the home and the shared folder.
        std::fs::write(home.join("by-chatd.txt"), "x").unwrap();
        std::fs::write(shared.join("by-chatd.txt"), "x").unwrap();
        here.hand_over_folders("c_shared").await;
        assert_eq!(owner(&home.join("by-chatd.txt")), (uid, gid));
        assert_eq!(owner(&shared.join("by-chatd.txt")), (0, 0));
        assert_eq!(owner(&shared.join("notes/box.txt")), (0, 0));

        // An own chat's workspace is its own: handed over whole.
        here.prepare_folders("c_own").unwrap();
        let own = data.join("workspaces/c_own");
        std::fs::write(own.join("by-chatd.txt"), "x").unwrap();
        here.hand_over_folders("c_own").await;
        assert_eq!(owner(&own.join("by-chatd.txt")), (uid, gid));
    }

    /// A shared chat's own folders are its home and egress folder: the
    /// shared workspace is never walked and handed over as the chat's.
    #[test]
    fn a_shared_chat_s_own_folders_leave_out_the_shared_workspace() {
        let data = Path::new("/data");
        let here = sandboxes(data, Path::new("/box/workspace"));
        assert_eq!(
            here.own_folders_of("c_shared"),
            [data.join("homes/c_shared"), data.join("egress/c_shared")]
        );
        assert_eq!(
            here.own_folders_of("c_own"),
            [
                data.join("workspaces/c_own"),
                data.join("homes/c_own"),
                data.join("egress/c_own")
            ]
        );
    }

    #[test]
    fn the_cgroup_files_are_found_for_either_cgroup_version() {
        let v1 = "9:name=systemd:/libpod_parent/libpod-ab\n8:pids:/libpod_parent/libpod-ab\n\
                  4:memory:/libpod_parent/libpod-ab\n0::/x\n";
        let files = cgroup_files_of(v1).unwrap();
        assert_eq!(
            files.oom,
            PathBuf::from("/sys/fs/cgroup/memory/libpod_parent/libpod-ab/memory.oom_control")
        );
        assert_eq!(
            files.procs,
            PathBuf::from("/sys/fs/cgroup/pids/libpod_parent/libpod-ab/cgroup.procs")
        );
        let v2 = "0::/system.slice/docker-ab.scope\n";
        let files = cgroup_files_of(v2).unwrap();
        assert_eq!(
            files.oom,
            PathBuf::from("/sys/fs/cgroup/system.slice/docker-ab.scope/memory.events")
        );
        assert_eq!(
            files.procs,
            PathBuf::from("/sys/fs/cgroup/system.slice/docker-ab.scope/cgroup.procs")
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("memory.oom_control");
        std::fs::write(&file, "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n").unwrap();
        assert_eq!(read_oom_count(&file), Some(3));
    }
}
