//! hostexecd as a part of the soak: started beside chatd on chatd's own data
//! folder (as on a box), driven by host `bash` calls that fork, detach and
//! double-fork (straight on its API and through chatd's `bash` tool), each
//! ended one of four ways (by itself, a stop, its time limit, a SIGKILL of
//! hostexecd), and held to `Inv::Leftovers`: once a call has ended (after a
//! kill: once hostexecd is back, which promises to end what a dead instance
//! left), no process carrying the call's marker is alive. The calls are in
//! `hostexec_calls.rs`; here are the part, its killer and its end.

use super::*;

use futures_util::future::BoxFuture;
use tandem_tests::harness::{pids_with, Hostexecd};

use crate::hostexec_calls::{api_worker, chatd_worker, Call, Kind, Via};

/// Chats calling hostexecd's API at once, and chats of chatd calling it
/// through the `bash` tool (with the killer's chat: within `max_chats`).
const API_CHATS: usize = 4;
const CHATD_CHATS: usize = 2;
const MAX_CHATS: usize = 8;

/// How long a user would wait for a call's processes to go after its end.
pub(crate) const LEFT_BOUND: Duration = Duration::from_secs(10);

pub(crate) struct HostexecPart {
    duration: f64,
    /// hostexecd's folder until it starts: its socket is named to chatd
    /// before chatd starts, and hostexecd needs chatd's data folder.
    home: Mutex<Option<tempfile::TempDir>>,
    pub(crate) socket: PathBuf,
    log: PathBuf,
    data: PathBuf,
    pub(crate) hx: tokio::sync::Mutex<Option<Hostexecd>>,
    /// SIGKILLs of hostexecd so far, bumped under the lock on `hx` before
    /// each: a call whose stream broke compares it once it has the lock.
    pub(crate) kills: AtomicU64,
    /// `7200.<digits>`: every marker of the run starts with it.
    pub(crate) tag: String,
    next: AtomicU64,
    /// Written into every command (`export SOAK_TOKEN=…`): hostexecd logs
    /// never the command, chatd never a message's text.
    pub(crate) secret: String,
    pub(crate) tally: Mutex<Tally>,
    /// What the file history's checks saw (`files.rs`).
    pub(crate) files: Mutex<crate::files::Tally>,
    /// What the MCP servers' worker saw (`hostexec_serve.rs`).
    pub(crate) serve_tally: Mutex<crate::hostexec_serve::Tally>,
}

#[derive(Default)]
pub(crate) struct Tally {
    /// Calls by where they came from and how they ended.
    pub(crate) ended: BTreeMap<(&'static str, String), u64>,
    /// Processes the commands put in the background, detached or double-forked.
    pub(crate) forked: u64,
    /// Processes with a call's marker seen running mid-call (stops and kills).
    pub(crate) seen: u64,
    pub(crate) leftovers: u64,
    pub(crate) kills: u64,
    pub(crate) restart_rows: u64,
    pub(crate) seconds_refused: u64,
}

pub(crate) fn hostexec_part(ctx: &Prepare) -> anyhow::Result<Arc<dyn Part>> {
    let home = tempfile::Builder::new()
        .prefix("hx")
        .tempdir_in(&ctx.dir)
        .context("hostexecd's folder")?;
    let socket = home.path().join("run/hostexec.sock");
    let log = home.path().join("hostexecd.log");
    let data = home.path().join("data");
    Ok(Arc::new(HostexecPart {
        duration: ctx.duration,
        home: Mutex::new(Some(home)),
        socket,
        log,
        data,
        hx: tokio::sync::Mutex::new(None),
        kills: AtomicU64::new(0),
        // Random, not from the seed: two soaks on one machine never share one.
        tag: format!("7200.{:09}", rand::random::<u32>() % 1_000_000_000),
        next: AtomicU64::new(0),
        secret: format!("hxtok{:016x}", rand::random::<u64>()),
        tally: Mutex::new(Tally::default()),
        files: Mutex::new(crate::files::Tally::default()),
        serve_tally: Mutex::new(crate::hostexec_serve::Tally::default()),
    }))
}

impl HostexecPart {
    /// A `sleep` argument no other call (or run) uses.
    pub(crate) fn marker(&self) -> String {
        format!(
            "{}{:06}",
            self.tag,
            self.next.fetch_add(1, Ordering::Relaxed) + 1
        )
    }

    pub(crate) fn count(&self, via: Via, how: &str) {
        *lock(&self.tally)
            .ended
            .entry((via.as_str(), how.to_string()))
            .or_default() += 1;
    }

    /// hostexecd on chatd's data folder (found in chatd's environment),
    /// made passable for `run_as = "nobody"` as an operator does (0711).
    async fn start(&self, shared: &Shared) -> anyhow::Result<()> {
        let pid = shared.pid.load(Ordering::Relaxed);
        let environ = std::fs::read(format!("/proc/{pid}/environ"))
            .with_context(|| format!("reading chatd's (pid {pid}) environment"))?;
        let chat_data = environ
            .split(|b| *b == 0)
            .filter_map(|kv| kv.strip_prefix(b"QSE_CHAT_DATA="))
            .next_back()
            .map(|v| PathBuf::from(String::from_utf8_lossy(v).into_owned()))
            .context("QSE_CHAT_DATA in chatd's environment")?;
        use std::os::unix::fs::PermissionsExt;
        for dir in [chat_data.parent(), Some(chat_data.as_path())]
            .into_iter()
            .flatten()
        {
            let mode = std::fs::metadata(dir)?.permissions().mode() & 0o7777;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o011))?;
        }
        let home = lock(&self.home).take().context("hostexecd started twice")?;
        let hx =
            Hostexecd::start_for(home, &chat_data, &format!("max_chats = {MAX_CHATS}\n")).await?;
        shared.started("hostexecd", hx.pid().context("hostexecd's pid")?);
        *self.hx.lock().await = Some(hx);
        Ok(())
    }

    /// A command that runs to its end in hostexecd: refuses to run
    /// uncontained commands, so a machine that cannot contain them fails here.
    async fn probe(&self) -> anyhow::Result<()> {
        let guard = self.hx.lock().await;
        let hx = guard.as_ref().context("hostexecd is not running")?;
        let run = hx
            .exec(
                "hxsoak_probe",
                "echo contained",
                None,
                Duration::from_secs(30),
            )
            .await?;
        anyhow::ensure!(
            run.status == 200 && run.body["exit_code"] == 0 && run.output() == "contained\n",
            "hostexecd ran no command (status {}): {} — it needs root (or user \
             namespaces) to give a call its own PID namespace, and refuses otherwise",
            run.status,
            run.body
        );
        Ok(())
    }

    /// SIGKILLs hostexecd inside the kill window (at least once), each time
    /// with a call of its own mid-flight, then starts it again on the same
    /// data; a second hostexecd on that data must be refused.
    async fn killer(self: Arc<Self>, shared: Arc<Shared>, seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed);
        let (from, to) = shared.kill_window();
        let forced = from + (to - from).max(1.0) * rng.random_range(0.1..0.6);
        let mean = (self.duration / 3.0).max(10.0);
        let times = schedule(&mut rng, mean, from, to, forced);
        let mut phase = shared.phase.subscribe();
        for (n, at) in times.into_iter().enumerate() {
            if !until_in_load(&shared, &mut phase, at).await {
                return;
            }
            let chat = format!("hxkill_{n}");
            let call = Call::new(&self, Kind::Killed, &mut rng);
            let Some((mut stream, call_id)) = call.open_api(&self, &shared, &chat).await else {
                continue;
            };
            // Killed all the same if it never said `ready`: its end is checked.
            let _ = call.wait_running(&self, &mut stream, true).await;
            let killed_at = shared.t();
            if !self.kill_and_restart(&shared, killed_at).await {
                return;
            }
            drop(stream);
            self.count(Via::Api, "hostexecd SIGKILLed");
            call.check_left(
                &self,
                &shared,
                &chat,
                &call_id,
                Via::Api,
                "hostexecd SIGKILLed",
            )
            .await;
            self.check_restart_row(&shared, &chat, &call_id, killed_at)
                .await;
        }
    }

    /// Returns false when hostexecd did not come back (the part stops).
    async fn kill_and_restart(&self, shared: &Shared, killed_at: f64) -> bool {
        let mut guard = self.hx.lock().await;
        let Some(hx) = guard.as_mut() else {
            return false;
        };
        self.kills.fetch_add(1, Ordering::Relaxed);
        lock(&self.tally).kills += 1;
        shared.fault("hostexecd SIGKILL mid-call + restart");
        hx.kill9();
        let mut back = false;
        for _ in 0..3 {
            let started = hx.spawn().and_then(|()| {
                hx.pid()
                    .context("hostexecd's pid")
                    .map(|pid| shared.started("hostexecd", pid))
            });
            match started {
                Ok(()) => match hx.wait_healthy().await {
                    Ok(()) => {
                        back = true;
                        break;
                    }
                    Err(err) => say(format!("soak: hostexecd did not come back: {err:#}")),
                },
                Err(err) => say(format!("soak: hostexecd did not start again: {err:#}")),
            }
        }
        if !back {
            shared.violate(
                Inv::Health,
                format!("hostexecd did not come back after the SIGKILL at {killed_at:.1} s"),
            );
            return false;
        }
        say(format!(
            "  t={:6.1}s  hostexecd SIGKILLed mid-call, back after {:.1} s",
            killed_at,
            shared.t() - killed_at
        ));
        let pid = hx.pid().unwrap_or(0);
        shared.fault("second hostexecd on the same data");
        match hx.run_second(Duration::from_secs(10)).await {
            Ok(second)
                if !second.status.success() && second.stderr.contains(&format!("(pid {pid})")) =>
            {
                lock(&self.tally).seconds_refused += 1;
            }
            Ok(second) => shared.violate(
                Inv::Health,
                format!(
                    "a second hostexecd on the data of pid {pid} ended {} saying {:?}",
                    second.status,
                    second.stderr.chars().take(300).collect::<String>()
                ),
            ),
            Err(err) => shared.violate(
                Inv::Health,
                format!("a second hostexecd on the data of pid {pid}: {err:#}"),
            ),
        }
        true
    }

    /// What hostexecd promises after a crash (docs/hostexec.md): the rows
    /// of calls with no end are ended `killed_by: "restart"`.
    async fn check_restart_row(&self, shared: &Shared, chat: &str, call_id: &str, at: f64) {
        let row = {
            let guard = self.hx.lock().await;
            let Some(hx) = guard.as_ref() else { return };
            match hx
                .call("GET", &format!("/audit?chat={chat}&limit=10"), None)
                .await
            {
                Ok((200, body)) => body["audit"]
                    .as_array()
                    .and_then(|rows| rows.iter().find(|r| r["call_id"] == call_id).cloned()),
                _ => None,
            }
        };
        match row {
            Some(r) if r["killed_by"] == "restart" && r["ended"].is_string() => {
                lock(&self.tally).restart_rows += 1;
            }
            other => shared.violate(
                Inv::Health,
                format!(
                    "hostexecd: call {call_id} of chat {chat}, running at the SIGKILL at \
                     {at:.1} s: after the restart its audit row is {} (ended by \"restart\" expected)",
                    other.map_or("missing".to_string(), |r| format!(
                        "killed_by={} ended={}",
                        r["killed_by"], r["ended"]
                    ))
                ),
            ),
        }
    }
}

/// Processes still carrying `marker`, each as `pid `command line``.
pub(crate) fn describe(pids: &[i32]) -> String {
    pids.iter()
        .map(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
                .unwrap_or_default();
            format!(
                "{pid} `{}`",
                cmd.trim().chars().take(120).collect::<String>()
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// SIGKILL to what a broken run left, so the machine stays clean.
pub(crate) fn kill_all(pids: &[i32]) {
    for pid in pids {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

impl Part for HostexecPart {
    fn name(&self) -> PartName {
        PartName::Hostexecd
    }

    fn chatd_env(&self) -> Vec<(String, String)> {
        vec![
            (
                "QSE_HOSTEXEC_SOCKET".into(),
                self.socket.to_string_lossy().into_owned(),
            ),
            ("QSE_CHATS_HOST_EXEC".into(), "on".into()),
        ]
    }

    fn drive(self: Arc<Self>, shared: Arc<Shared>, seed: u64) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            if let Err(err) = self.start(&shared).await {
                shared.violate(
                    Inv::Leftovers,
                    format!("hostexecd could not start beside chatd, so no host call ran: {err:#}"),
                );
                return;
            }
            if let Err(err) = self.probe().await {
                shared.violate(
                    Inv::Leftovers,
                    format!("hostexecd: no host call could be checked: {err:#}"),
                );
                return;
            }
            let mut rng = StdRng::seed_from_u64(seed);
            let mut tasks = Vec::new();
            for i in 0..API_CHATS {
                tasks.push(tokio::spawn(api_worker(
                    self.clone(),
                    shared.clone(),
                    i,
                    rng.random(),
                )));
            }
            for i in 0..CHATD_CHATS {
                tasks.push(tokio::spawn(chatd_worker(
                    self.clone(),
                    shared.clone(),
                    i,
                    rng.random(),
                )));
            }
            tasks.push(tokio::spawn(crate::hostexec_serve::serve_worker(
                self.clone(),
                shared.clone(),
                rng.random(),
            )));
            tasks.push(tokio::spawn(
                self.clone().killer(shared.clone(), rng.random()),
            ));
            for task in tasks {
                if let Err(err) = task.await {
                    shared.violate(Inv::Health, format!("hostexecd's driver failed: {err}"));
                }
            }
        })
    }

    fn finish(self: Arc<Self>, shared: Arc<Shared>) -> BoxFuture<'static, PartEnd> {
        Box::pin(async move {
            {
                let mut guard = self.hx.lock().await;
                if let Some(hx) = guard.as_mut() {
                    match hx.sigterm(Duration::from_secs(20)) {
                        Ok(status) if status.success() => {}
                        Ok(status) => shared.violate(
                            Inv::Health,
                            format!("hostexecd exited {status} after SIGTERM"),
                        ),
                        Err(err) => {
                            shared.violate(Inv::Health, format!("hostexecd did not stop: {err:#}"))
                        }
                    }
                }
            }
            // Anything of any call of the run, now that hostexecd is gone.
            let left = pids_with(&self.tag);
            if !left.is_empty() {
                lock(&self.tally).leftovers += left.len() as u64;
                shared.violate(
                    Inv::Leftovers,
                    format!(
                        "hostexecd: after its SIGTERM, {} processes of the run's host calls \
                         (marker {}…) are alive: {}",
                        left.len(),
                        self.tag,
                        describe(&left)
                    ),
                );
                kill_all(&left);
            }
            let t = lock(&self.tally);
            let mut totals = Vec::new();
            for via in [Via::Api, Via::Chatd] {
                let mine: Vec<(&String, &u64)> = t
                    .ended
                    .iter()
                    .filter(|((v, _), _)| *v == via.as_str())
                    .map(|((_, how), n)| (how, n))
                    .collect();
                let sum: u64 = mine.iter().map(|(_, n)| **n).sum();
                let list: Vec<String> = mine.iter().map(|(how, n)| format!("{how} {n}")).collect();
                totals.push(format!(
                    "hostexecd: host calls {} {sum}: {}",
                    via.as_str(),
                    list.join(", ")
                ));
            }
            totals.push(format!(
                "hostexecd: {} processes put in the background, detached or double-forked \
                 ({} seen running mid-call); leftovers found {}",
                t.forked, t.seen, t.leftovers
            ));
            let f = lock(&self.files);
            totals.push(format!(
                "hostexecd: files made by chatd's host calls: {} listed ({} in the call's own \
                 change set, the rest found by a later scan after a kill), {} undone and gone",
                f.listed, f.by_call, f.undone
            ));
            totals.push(format!(
                "hostexecd: file trash: {} deleted (off the disk, in the trash), {} restored \
                 whole, {} purged; changes paged {} times over whole chats ({} pages, {} sets \
                 of checked files each once); {} changes asked again after chatd gave no answer",
                f.deleted,
                f.restored,
                f.purged,
                f.passes,
                f.pages,
                f.revs.values().map(|r| r.len()).sum::<usize>(),
                f.retried
            ));
            totals.push(format!(
                "hostexecd: SIGKILLed {} times mid-call (each back; a second refused {} \
                 times; calls ended \"restart\" in the audit {})",
                t.kills, t.seconds_refused, t.restart_rows
            ));
            let s = lock(&self.serve_tally);
            totals.push(format!(
                "hostexecd: MCP servers (POST /serve): {} opened, {} lines echoed, {} closed by \
                 their caller ({} with the audit's \"stop\"), {} broken by a SIGKILL, {} not \
                 opened while hostexecd was away",
                s.opened, s.echoed, s.closed, s.audited, s.broken_by_kill, s.refused
            ));
            drop(s);
            PartEnd {
                totals,
                logs: vec![("hostexecd".into(), self.log.clone())],
                data: vec![self.data.clone()],
                secrets: vec![self.secret.clone()],
            }
        })
    }
}
