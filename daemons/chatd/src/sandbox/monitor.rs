//! The sweep at chatd's start (containers of gone or trashed chats removed,
//! only this data folder's) and the monitor: memory pressure and idle
//! sandboxes every 2 s, the runtime's list every 30 s.

use std::time::{Duration, Instant};

use tandem_shared::docker::DockerError;

use super::bounds::least_recently_used_idle;
use super::cgroup::read_oom_count;
use super::{guard, Running, Sandboxes, CHAT_LABEL, DATA_LABEL};

impl Sandboxes {
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
