//! hostexecd: a chat's commands on this machine, with nothing left behind.
//!
//! `api.rs` serves `POST /exec` (an NDJSON stream of the call), the stop,
//! the audit, `/health` and `/metrics` on `hostexec.sock`, whose callers'
//! uid is checked. `calls.rs` holds the running calls (one per chat,
//! `max_chats` chats); `folders.rs` readies a chat's workspace and home (and
//! lends the workspace to `run_as` for the call); `exec.rs` drives a call:
//! its keeper (`spawner.rs`), its output, its limits, the audit row, the
//! `[host-exec]` log line. `keeper.rs` is the per-call process (`hostexecd
//! --keeper`): it makes the call's own PID and mount namespaces
//! (`contain.rs`) and its init, which starts `bash -c` confined (new
//! session, rlimits, no capabilities, no_new_privs, no signal blocked,
//! never uid 0); the call ends when init does, and every process of the
//! namespace with it. `sweep.rs` kills what is outside a namespace: what is
//! reparented to hostexecd, an unanswering keeper's tree (`tree.rs`), what
//! an earlier hostexecd left. `changes.rs` says what a command saved;
//! `store.rs` keeps the audit in hostexec.sqlite3. `serve.rs` runs a chat's
//! MCP server the same way, without a shell, for as long as chatd holds its
//! upgraded stream.

pub mod api;
pub mod calls;
pub mod changes;
pub mod config;
pub mod contain;
pub mod exec;
pub mod folders;
pub mod keeper;
pub mod metrics;
pub mod serve;
pub mod spawner;
pub mod store;
pub mod sweep;
pub mod tree;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tandem_shared::shutdown::Shutdown;
use tandem_shared::sync::lock;

use crate::calls::{Calls, KilledBy};
use crate::config::HostexecConfig;
use crate::contain::Namespaces;
use crate::folders::Owner;
use crate::keeper::RunAs;
use crate::spawner::Spawner;
use crate::store::Store;

/// The daemon's state.
pub struct Hostexec {
    pub config: HostexecConfig,
    /// Who commands run as when hostexecd is root; `None`: hostexecd's own user.
    pub run_as: Option<RunAs>,
    /// The uid commands run as (RLIMIT_NPROC counts its processes).
    pub uid: u32,
    /// The name of that user.
    pub user_name: String,
    /// The uid allowed to call the API.
    pub caller_uid: u32,
    /// chatd's user (chat_data's owner): a lent workspace goes back to it.
    pub owner: Owner,
    /// How each call's namespaces are made.
    pub namespaces: Namespaces,
    pub store: Arc<Store>,
    pub metrics: Arc<metrics::Metrics>,
    pub registry: Arc<tandem_shared::metrics::Registry>,
    pub calls: Arc<Calls>,
    /// MCP servers running (`serve.rs`), by their own id.
    pub servers: Arc<Calls>,
    pub spawner: Spawner,
    pub started: Instant,
    pub shutdown: Shutdown,
}

impl Hostexec {
    /// A keeper's call: `command` (or `program`) in `workspace` with `home`,
    /// the folders in `hidden` covered, hostexecd's user, limits and clean
    /// environment; the keeper's own bound `backstop`.
    pub fn spec(
        &self,
        command: String,
        program: Option<keeper::Program>,
        workspace: &std::path::Path,
        home: &std::path::Path,
        hidden: Vec<std::path::PathBuf>,
        backstop: Duration,
    ) -> keeper::Spec {
        keeper::Spec {
            command,
            program,
            workspace: workspace.to_path_buf(),
            home: home.to_path_buf(),
            namespaces: self.namespaces,
            view: contain::View {
                chat_data: self.config.chat_data.clone(),
                workspace: workspace.to_path_buf(),
                home: home.to_path_buf(),
                hidden,
            },
            path: self.config.path.clone(),
            lang: self.config.lang.clone(),
            tz: self.config.tz.clone(),
            run_as: self.run_as.clone(),
            uid: self.uid,
            max_processes: self.config.max_processes,
            max_file_bytes: self.config.max_file_bytes,
            parent: std::process::id() as i32,
            backstop_s: backstop.as_secs() + 30,
        }
    }
}

/// Who runs the commands and who may call: decided at start, or why not.
/// hostexecd as root needs `run_as`, an unprivileged user, and lets the
/// owner of chat_data call; otherwise commands run as hostexecd's own user
/// and only that uid may call.
pub fn identities(config: &HostexecConfig) -> anyhow::Result<Identities> {
    let euid = nix::unistd::geteuid().as_raw();
    let own_name = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(euid))
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| euid.to_string());
    if config.run_as.is_empty() {
        if euid == 0 {
            anyhow::bail!(
                "hostexecd is running as root and hostexec.run_as is empty: it never runs a \
                 command as root; set run_as (QSE_HOSTEXEC_RUN_AS) to an unprivileged user, \
                 e.g. a dedicated tandem-exec, or start hostexecd as the box's user"
            );
        }
        return Ok(Identities::own(euid, own_name));
    }
    let user = folders::resolve_user(&config.run_as).context("hostexec.run_as")?;
    if user.uid == 0 {
        anyhow::bail!(
            "hostexec.run_as: {:?} has uid 0; commands never run as root: name an unprivileged user",
            config.run_as
        );
    }
    if euid != 0 {
        if user.uid == euid {
            return Ok(Identities::own(euid, own_name));
        }
        anyhow::bail!(
            "hostexec.run_as: running commands as {:?} (uid {}) needs hostexecd started as root; \
             it runs as uid {euid}: leave run_as empty to run commands as this user",
            config.run_as,
            user.uid
        );
    }
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(&config.chat_data).with_context(|| {
        format!(
            "hostexec.chat_data: {} (chatd's data folder: its owner is the uid allowed to call hostexecd)",
            config.chat_data.display()
        )
    })?;
    // A call sees chatd's data folder through a view of its own
    // (`contain.rs`): only the folders above it must be passable.
    if let Some(parent) = config.chat_data.parent() {
        folders::reachable(parent, &user).map_err(|why| {
            anyhow::anyhow!("hostexec.run_as: the chats' folders are out of its reach: {why}")
        })?;
    }
    Ok(Identities {
        uid: user.uid,
        user_name: user.name.clone(),
        run_as: Some(user),
        caller_uid: meta.uid(),
        owner: Owner {
            uid: meta.uid(),
            gid: meta.gid(),
        },
    })
}

/// Who runs the commands and who may call, as [`identities`] decides.
pub struct Identities {
    pub run_as: Option<RunAs>,
    pub uid: u32,
    pub user_name: String,
    pub caller_uid: u32,
    pub owner: Owner,
}

impl Identities {
    /// Commands run as hostexecd's own user, which alone may call.
    fn own(uid: u32, user_name: String) -> Identities {
        Identities {
            run_as: None,
            uid,
            user_name,
            caller_uid: uid,
            owner: Owner {
                uid,
                gid: nix::unistd::getegid().as_raw(),
            },
        }
    }
}

/// Runs hostexecd until `shutdown` begins; running calls are then ended
/// (`killed_by: "shutdown"`) and written before it returns.
pub async fn run(config: HostexecConfig, shutdown: Shutdown) -> anyhow::Result<()> {
    let Identities {
        run_as,
        uid,
        user_name,
        caller_uid,
        owner,
    } = identities(&config)?;
    let namespaces = if nix::unistd::geteuid().is_root() {
        Namespaces::AsRoot
    } else {
        Namespaces::InUserNamespace {
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
        }
    };
    // Whatever is reparented to us (a keeper's init, should the keeper die
    // first) comes to us, and is killed (`sweep::adopted`).
    // SAFETY: a plain prctl call on this process.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
    tandem_shared::fsmode::private_dir(&config.data_dir)
        .with_context(|| format!("making data folder {}", config.data_dir.display()))?;
    // Before anything is written or bound: a second hostexecd would take
    // over this one's socket and end its calls as left by a restart.
    let _lock = tandem_shared::daemon::hold_lock(&config.data_dir, "hostexecd")?;
    let store = Arc::new(Store::open(&config.data_dir.join("hostexec.sqlite3"))?);
    let (recovered, left) = {
        let store = store.clone();
        let config = config.clone();
        let lent = run_as.is_some();
        let left_by = sweep::LeftBy {
            uid,
            homes: config.chat_data.join("homes"),
            workspaces: if lent {
                vec![
                    config.chat_data.join("workspaces"),
                    config.shared_workspace.clone(),
                ]
            } else {
                Vec::new()
            },
        };
        tokio::task::spawn_blocking(move || {
            let recovered = sweep::recover(&store, &|workspace| {
                if lent {
                    folders::give_back(&config, workspace, owner);
                }
            })?;
            Ok::<_, anyhow::Error>((recovered, sweep::leftovers(&left_by)))
        })
        .await??
    };
    let purged = store.purge(config.audit_days)?;
    let mut registry = tandem_shared::metrics::Registry::default();
    let metrics = Arc::new(metrics::Metrics::new(&mut registry));
    let hx = Arc::new(Hostexec {
        config: config.clone(),
        run_as,
        uid,
        user_name,
        caller_uid,
        owner,
        namespaces,
        store: store.clone(),
        metrics,
        registry: Arc::new(registry),
        calls: Calls::new(config.max_chats),
        servers: Calls::new(serve::MAX_SERVERS),
        spawner: Spawner::start().context("starting the keeper spawner")?,
        started: Instant::now(),
        shutdown: shutdown.clone(),
    });
    // Keepers are reaped here; anything else that is our child was
    // reparented to us and is killed. An orphan's arrival sends no signal:
    // the children are looked at every second too.
    {
        let mut children = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())
            .context("listening for SIGCHLD")?;
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(1));
            loop {
                let _ = tokio::task::spawn_blocking(|| {
                    {
                        let _spawning = lock(&spawner::SPAWNING);
                        sweep::reap();
                    }
                    sweep::adopted();
                })
                .await;
                tokio::select! {
                    got = children.recv() => if got.is_none() { return },
                    _ = every.tick() => {}
                }
            }
        });
    }
    if let Some(dir) = config.socket.parent() {
        if !dir.exists() {
            tandem_shared::fsmode::private_dir(dir)?;
            if hx.run_as.is_some() {
                chown(dir, caller_uid)?;
            }
        }
    }
    // Its folder as made above (an existing one is left as it is).
    let listener = tandem_shared::daemon::bind_unix_in_prepared_dir(&config.socket)?;
    if hx.run_as.is_some() {
        chown(&config.socket, caller_uid)?;
    }
    tracing::info!(socket = %config.socket.display(), run_as = %hx.user_name, uid,
        caller_uid, recovered, left, purged, max_chats = config.max_chats, ?namespaces, "hostexecd serving");
    // The watchdog pings while the runtime turns.
    tandem_shared::notify::spawn_heartbeat_watchdog(shutdown.clone());
    tandem_shared::notify::ready("serving");
    // The audit is purged daily; running calls end at shutdown.
    {
        let store = store.clone();
        let days = config.audit_days;
        let shutdown = shutdown.clone();
        let (calls, servers) = (hx.calls.clone(), hx.servers.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(86_400)) => {}
                    _ = shutdown.wait() => {
                        calls.kill_all(KilledBy::Shutdown);
                        servers.kill_all(KilledBy::Shutdown);
                        return;
                    }
                }
                let store = store.clone();
                let _ = tokio::task::spawn_blocking(move || store.purge(days)).await;
            }
        });
    }
    let router = api::router(hx.clone());
    let serving = tandem_shared::listen::serve_socket(
        "api",
        tandem_shared::http::PeerChecked::with_uid(listener, caller_uid),
        router,
        tandem_shared::listen::Limits::socket_api(),
        shutdown.clone(),
    );
    tokio::pin!(serving);
    // Serving ends when every stream has; a caller that does not read its
    // stream does not hold hostexecd past the calls' end.
    tokio::select! {
        _ = &mut serving => {}
        _ = async {
            shutdown.wait().await;
            while hx.calls.count() + hx.servers.count() > 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        } => {}
    }
    tandem_shared::notify::stopping();
    // Calls still ending (bounded: each keeper has 10 s before it is killed).
    let until = Instant::now() + Duration::from_secs(15);
    while hx.calls.count() + hx.servers.count() > 0 && Instant::now() < until {
        hx.calls.kill_all(KilledBy::Shutdown);
        hx.servers.kill_all(KilledBy::Shutdown);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

fn chown(path: &std::path::Path, uid: u32) -> anyhow::Result<()> {
    std::os::unix::fs::chown(path, Some(uid), None)
        .with_context(|| format!("giving {} to uid {uid}", path.display()))
}
