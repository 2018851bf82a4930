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

mod bounds;
mod cgroup;
mod folders;
mod lockdown;
mod monitor;
#[cfg(test)]
mod tests;

use cgroup::{read_oom_count, CgroupFiles};

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

    /// A stop: a start that began before gives up.
    fn bump(&mut self, chat: &str) {
        self.epochs.entry(chat.to_string()).or_insert((0, false)).0 += 1;
    }

    /// A removal: as a stop, and the sandbox is marked removed.
    fn bump_removed(&mut self, chat: &str) {
        let entry = self.epochs.entry(chat.to_string()).or_insert((0, false));
        entry.0 += 1;
        entry.1 = true;
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

    /// The commands' uid and gid.
    pub fn user_ids(&self) -> (u32, u32) {
        self.inner.user
    }

    pub fn docker(&self) -> &Docker {
        &self.inner.docker
    }

    /// Whether chatd counts the chat's sandbox as running.
    pub fn is_running(&self, chat: &str) -> bool {
        self.lock_running().running.contains_key(chat)
    }

    /// The chat's sandbox held busy while the lease lives, if it is running
    /// (never started for it).
    pub fn hold(&self, chat: &str) -> Option<Lease> {
        self.lease(chat)
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

    /// The probe at chatd's start: a socket that is there but does not
    /// answer yet (a runtime still starting, or one busy with other work)
    /// is asked again for up to 10 s, since what this finds holds until
    /// chatd restarts; no socket at all is "no runtime" at once.
    pub async fn probe_at_start(&self) -> Status {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let status = self.probe().await;
            let unanswered = status.runtime.is_none() && self.inner.settings.socket.exists();
            if !unanswered || Instant::now() >= deadline || self.inner.shutdown.is_begun() {
                return status;
            }
            tracing::info!(
                "the container runtime's socket is there but did not answer; asking again"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
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

    /// Stops a chat's sandbox (its files stay); `why` goes in the log and,
    /// for a sandbox that was working, in its call's result. A start under
    /// way gives up.
    pub async fn stop(&self, chat: &str, why: &str) {
        let was = {
            let mut chats = self.lock_running();
            chats.bump(chat);
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
            chats.bump_removed(chat);
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
}
