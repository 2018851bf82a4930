//! The triggerd part of the soak (issue 23): triggerd as a real process on a
//! test clock (its clock file), with chatd told of its socket
//! (`QSE_TRIGGERS_SOCKET`) and of the shared workspace it watches.
//!
//! - 500 triggers: one due every minute, a few every 5 or 15 minutes, 40
//!   hourly at a minute each, 15 daily in four zones, and the rest weekly,
//!   monthly or once, rarely or never due; 8 file triggers on folders of
//!   the workspace that a writer fills at random (each version written
//!   hidden, then renamed in, so triggerd never sees half a file).
//! - The clock moves a minute a second while the load runs, each minute
//!   waited on until triggerd has surely checked it (two checks counted on
//!   its `/health`); then, in the drain, 20 and 39 s more (no new minute,
//!   the files' quiet periods pass). While triggerd holds more than
//!   `BACKLOG` runs queued the clock stands and the writer pauses, so the
//!   runs due never outgrow what chatd serves, however long the soak.
//! - triggerd SIGKILLed inside `Shared::kill_window` (at least once), a
//!   moment after a minute came due, while runs are queued and running;
//!   the clock moves 0..=3 minutes while it is dead; it comes back on the
//!   same data. After the first kill a second triggerd on that data must
//!   wait for the lock, naming the pid that holds it, and leave on SIGTERM.
//!
//! At the end `trigger_dues.rs` holds the runs in triggers.sqlite3 to the
//! rule triggerd states, and every run must have ended and have its inbox
//! entry in chatd (`trigger-run:<id>`, the keys seen while polling chatd's
//! inbox, which keeps only the newest 500).

use super::*;

use futures_util::future::BoxFuture;
use jiff::tz::TimeZone;
use tandem_tests::triggerd::{ChatdAt, Triggerd};

use crate::trigger_dues::*;

/// Monday, before any daylight-saving change of the zones used.
const T0: &str = "2026-03-02T09:00:20Z";
const MINUTE_MS: i64 = 60_000;
/// Bound on triggerd checking a clock it was given.
const CHECKED: Duration = Duration::from_secs(20);
/// Runs triggerd may hold queued (beyond its `max_runs = 4` running) before
/// the clock waits and the writer pauses: the load follows what chatd's run
/// slots serve, so the backlog stays bounded whatever the duration.
const BACKLOG: u64 = 8;

#[derive(Default)]
struct State {
    /// Trigger id by plan index (None: its create failed).
    ids: Vec<Option<String>>,
    seen: Seen,
    clock_ms: i64,
    minutes: u64,
    dead_minutes: u64,
    kills: u64,
    /// triggerd's queued runs at the clock's last look.
    queued: u64,
    /// Seconds the clock stood because triggerd's backlog was over `BACKLOG`.
    held_s: u64,
    /// Writes skipped for the same reason.
    writes_held: u64,
    /// (folder, file name) → the versions written, in order.
    writes: BTreeMap<(usize, String), Vec<String>>,
    /// Inbox keys seen in chatd.
    inbox: std::collections::HashSet<String>,
    second: Option<Triggerd>,
}

pub(crate) struct TriggersPart {
    dir: PathBuf,
    workspace: PathBuf,
    data: PathBuf,
    socket: PathBuf,
    secrets: PathBuf,
    plan: Vec<Planned>,
    td: tokio::sync::Mutex<Option<Triggerd>>,
    state: Mutex<State>,
}

fn parse_ms(text: &str) -> i64 {
    text.parse::<jiff::Timestamp>()
        .map(|t| t.as_millisecond())
        .unwrap_or(0)
}

impl TriggersPart {
    pub(crate) fn new(ctx: &Prepare) -> anyhow::Result<TriggersPart> {
        let mut rng = StdRng::seed_from_u64(ctx.seed);
        let workspace = ctx.dir.join("workspace");
        let data = ctx.dir.join("data");
        for f in 0..FOLDERS {
            std::fs::create_dir_all(workspace.join(format!("soak-{f}")))?;
        }
        let secrets = ctx.dir.join("secrets.env");
        std::fs::write(&secrets, format!("QSE_FORWARD_KEY={FORWARD_KEY}\n"))?;
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o600))?;
        }
        let socket = tandem_tests::triggerd::socket_in(&ctx.dir.join("td"));
        Ok(TriggersPart {
            dir: ctx.dir.clone(),
            workspace,
            data,
            socket,
            secrets,
            plan: plan(&mut rng),
            td: tokio::sync::Mutex::new(None),
            state: Mutex::new(State::default()),
        })
    }

    /// A triggerd on the part's data for chatd at `url`; not started.
    fn make(&self, url: &str, name: &str, extra: &str) -> anyhow::Result<Triggerd> {
        let at = ChatdAt {
            url: url.to_string(),
            // chatd's data folder is not known here: the secrets file holds the key.
            data: self.dir.join("no-chat-data"),
            secrets: self.secrets.clone(),
            workspace: self.workspace.clone(),
        };
        let dir = self.dir.join(name);
        std::fs::create_dir_all(&dir)?;
        let dir = tempfile::Builder::new().prefix("d").tempdir_in(&dir)?;
        let mut td = Triggerd::for_chatd_at(&at, extra, dir, self.data.clone())?;
        if name == "td" {
            // The socket chatd was told of before this one was made (the
            // environment wins over the config file).
            std::fs::create_dir_all(self.socket.parent().context("socket folder")?)?;
            td.socket = self.socket.clone();
            td.env.push((
                "QSE_TRIGGERS_SOCKET".into(),
                self.socket.display().to_string(),
            ));
        }
        Ok(td)
    }
}

/// The runs triggerd holds queued (not yet given to chatd).
async fn queued(td: &Triggerd) -> Option<u64> {
    match td.call("GET", "/health", None).await {
        Ok((200, h)) => h["queued"].as_u64(),
        _ => None,
    }
}

async fn health(td: &Triggerd) -> Option<(u64, u64)> {
    match td.call("GET", "/health", None).await {
        Ok((200, h)) => Some((h["pid"].as_u64()?, h["checks"].as_u64()?)),
        _ => None,
    }
}

/// Waits (bounded) until the live triggerd has surely checked the clock
/// as it is now: two checks ended after it was set.
async fn checked(td: &Triggerd) -> bool {
    let Some((pid, from)) = health(td).await else {
        return false;
    };
    tandem_tests::harness::wait_until("two checks", CHECKED, || async {
        health(td)
            .await
            .filter(|(p, c)| *p == pid && *c >= from + 2)
            .map(|_| ())
    })
    .await
    .is_ok()
}

impl TriggersPart {
    fn set_clock(&self, td: &Triggerd, ms: i64, alive: bool) {
        if let Err(err) = td.set_clock(&rfc(ms)) {
            say(format!("soak: triggerd's clock could not be set: {err:#}"));
        }
        let mut st = lock(&self.state);
        st.clock_ms = ms;
        if alive {
            st.seen.at.push((ms, false));
        }
    }

    /// Moves the clock to `ms` and waits until the live triggerd checked it.
    async fn step(&self, shared: &Shared, td: &Triggerd, ms: i64) {
        self.set_clock(td, ms, true);
        if checked(td).await {
            if let Some(last) = lock(&self.state).seen.at.last_mut() {
                last.1 = true;
            }
        } else {
            shared.violate(
                Inv::Health,
                format!(
                    "triggerd (pid {:?}) did not check its clock at {} within {CHECKED:?}",
                    td.pid(),
                    rfc(ms)
                ),
            );
        }
    }

    async fn create_all(&self, shared: &Shared) {
        let td = self.td.lock().await;
        let Some(td) = td.as_ref() else { return };
        let mut ids = Vec::new();
        for (i, p) in self.plan.iter().enumerate() {
            let mut body = json!({
                "name": p.name,
                "prompt": format!("Soak trigger {i}: one line. [sim tokens=12]"),
                "tz": p.tz,
                "daily_cap": 1000,
            });
            match p.folder {
                Some(f) => {
                    body["folder"] = json!(format!("/soak-{f}"));
                    body["quiet_seconds"] = json!(1 + f as u64 % 5);
                    body["min_gap_seconds"] = json!(0);
                }
                None => body["when"] = json!(p.when),
            }
            match td.api("POST", "", Some(body)).await {
                Ok((201, t)) => ids.push(t["id"].as_str().map(str::to_string)),
                other => {
                    shared.violate(
                        Inv::Triggers,
                        format!(
                            "triggerd refused trigger {:?} ({}): {other:?}",
                            p.name, p.when
                        ),
                    );
                    ids.push(None);
                }
            }
        }
        lock(&self.state).ids = ids;
    }

    /// SIGKILL while runs are due and running; the clock moves while it is
    /// dead; back on the same data. Returns whether it came back.
    async fn kill(&self, shared: &Shared, td: &mut Triggerd, rng: &mut StdRng) -> bool {
        let now = lock(&self.state).clock_ms;
        self.set_clock(td, now + MINUTE_MS, true);
        // A moment for the minute's runs to be queued and started.
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..400))).await;
        let killed = td.pid();
        td.kill9();
        shared.fault("triggerd SIGKILL + restart");
        let dead = rng.random_range(0..=3);
        for _ in 0..dead {
            let at = lock(&self.state).clock_ms + MINUTE_MS;
            self.set_clock(td, at, false);
        }
        {
            let mut st = lock(&self.state);
            st.kills += 1;
            st.dead_minutes += dead;
            st.minutes += 1 + dead;
        }
        let at = lock(&self.state).clock_ms;
        let t = shared.t();
        for _ in 0..3 {
            if td.start().await.is_ok() {
                let pid = td.pid().unwrap_or(0);
                shared.started("triggerd", pid);
                lock(&self.state).seen.at.push((at, false));
                say(format!(
                    "  t={t:6.1}s  triggerd (pid {}) SIGKILLed; the clock moved {dead} minute(s) while it was dead; back as pid {pid}",
                    killed.unwrap_or(0)
                ));
                return true;
            }
            td.kill9();
        }
        shared.violate(
            Inv::Health,
            format!("triggerd did not come back after the kill at {t:.1} s"),
        );
        false
    }

    /// A second triggerd on the live one's data waits for its lock, naming
    /// its pid, and leaves at once on SIGTERM.
    async fn second(&self, shared: &Shared, first: &Triggerd) {
        shared.fault("second triggerd on the same data");
        let pid = first.pid().unwrap_or(0);
        let extra = format!("clock_file = \"{}\"\n", first.clock.display());
        let mut second = match self.make(&shared.chatd_url, "second", &extra) {
            Ok(s) => s,
            Err(err) => {
                shared.violate(Inv::Health, format!("a second triggerd: {err:#}"));
                return;
            }
        };
        second.set_clock(&rfc(lock(&self.state).clock_ms)).ok();
        let wanted = format!("(pid {pid}); waiting for its lock");
        let waited = match second.spawn() {
            Ok(()) => tandem_tests::harness::wait_until(
                "the second triggerd to wait",
                Duration::from_secs(15),
                || async { second.log().contains(&wanted).then_some(()) },
            )
            .await
            .is_ok(),
            Err(_) => false,
        };
        if !waited {
            shared.violate(
                Inv::Health,
                format!("a second triggerd on the data of pid {pid} did not wait for its lock naming it"),
            );
        }
        if second.call("GET", "/health", None).await.is_ok() {
            shared.violate(
                Inv::Health,
                format!("a second triggerd on the data of pid {pid} answers on its socket"),
            );
        }
        match second.sigterm(Duration::from_secs(10)) {
            Ok(status) if status.success() => {}
            other => shared.violate(
                Inv::Health,
                format!("a second triggerd waiting for the lock of pid {pid} ended {other:?} on SIGTERM"),
            ),
        }
        lock(&self.state).second = Some(second);
    }

    /// The clock, the kills, then the drain's steps and the wait for every
    /// run to end and be in chatd's inbox.
    async fn clock_and_kills(&self, shared: &Shared, seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed);
        let (from, to) = shared.kill_window();
        let forced = rng.random_range(from..to.max(from + 1.0));
        let mut kills = schedule(&mut rng, 20.0, from, to, forced)
            .into_iter()
            .peekable();
        let mut guard = self.td.lock().await;
        let Some(td) = guard.as_mut() else { return };
        let mut phase = shared.phase.subscribe();
        let mut second_done = false;
        while shared.phase() == Phase::Load {
            let tick = tokio::time::Instant::now() + Duration::from_secs(1);
            let t = shared.t();
            if kills.peek().is_some_and(|at| *at <= t) && t < to {
                kills.next();
                if !self.kill(shared, td, &mut rng).await {
                    return;
                }
                let now = lock(&self.state).clock_ms;
                // The clock triggerd came back to, surely checked.
                lock(&self.state).seen.at.pop();
                self.step(shared, td, now).await;
                if !second_done {
                    second_done = true;
                    self.second(shared, td).await;
                }
            } else {
                // The next minute only once triggerd's backlog is within
                // bound: minutes come due faster than chatd's two run slots
                // (shared with the chats and the bots) can serve them.
                let backlog = queued(td).await.unwrap_or(0);
                let held = {
                    let mut st = lock(&self.state);
                    st.queued = backlog;
                    if backlog > BACKLOG {
                        st.held_s += 1;
                    }
                    backlog > BACKLOG
                };
                if !held {
                    let at = lock(&self.state).clock_ms + MINUTE_MS;
                    lock(&self.state).minutes += 1;
                    self.step(shared, td, at).await;
                }
            }
            // The pace of the clock: at most a minute a second.
            let _ = sleep_in(
                &mut phase,
                tick.saturating_duration_since(tokio::time::Instant::now()),
                |p| p == Phase::Load,
            )
            .await;
        }
        // No new minute: the files' quiet periods pass.
        for more in [20_000, 19_000] {
            let at = lock(&self.state).clock_ms + more;
            self.step(shared, td, at).await;
        }
        let drained = tandem_tests::harness::wait_until(
            "every trigger run to end and reach the inbox",
            Duration::from_secs(120),
            || async {
                let idle = || async {
                    let (code, h) = td.call("GET", "/health", None).await.ok()?;
                    (code == 200 && h["running"] == 0 && h["queued"] == 0).then_some(())
                };
                idle().await?;
                // Still idle two checks later: a file waiting for a run that
                // just ended is queued by the next check.
                checked(td).await.then_some(())?;
                idle().await?;
                (self.unnotified().ok()? == 0).then_some(())
            },
        )
        .await;
        match drained {
            Ok(()) => say(format!(
                "  t={:6.1}s  triggerd: every run ended and is in chatd's inbox",
                shared.t()
            )),
            Err(err) => shared.violate(Inv::Triggers, format!("triggerd: {err:#}")),
        }
    }

    fn unnotified(&self) -> anyhow::Result<i64> {
        let db = open_db(&self.data)?;
        Ok(db.query_row(
            "SELECT count(*) FROM runs WHERE notified = 0 AND status NOT IN ('queued','running','skipped')",
            [],
            |r| r.get(0),
        )?)
    }

    /// Files made and changed at random in the watched folders.
    async fn writer(&self, shared: &Shared, seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut phase = shared.phase.subscribe();
        loop {
            let pause = Duration::from_secs_f64(exponential(&mut rng, 1.0));
            if !sleep_in(&mut phase, pause, |p| p == Phase::Load).await {
                return;
            }
            let f = rng.random_range(0..FOLDERS);
            let name = format!("note-{}.txt", rng.random_range(0..5));
            {
                let mut st = lock(&self.state);
                if st.queued > BACKLOG {
                    st.writes_held += 1;
                    continue;
                }
            }
            let folder = self.workspace.join(format!("soak-{f}"));
            let tmp = folder.join(format!(".{name}.part"));
            let len = rng.random_range(1..400);
            let body: String = (0..len).map(|i| (b'a' + (i % 26) as u8) as char).collect();
            let written = std::fs::write(&tmp, body)
                .and_then(|()| std::fs::rename(&tmp, folder.join(&name)))
                .and_then(|()| std::fs::metadata(folder.join(&name)));
            match written {
                Ok(meta) => {
                    use std::os::unix::fs::MetadataExt as _;
                    let version = format!(
                        "{}:{}.{:09}:{}",
                        meta.len(),
                        meta.mtime(),
                        meta.mtime_nsec(),
                        meta.ino()
                    );
                    lock(&self.state)
                        .writes
                        .entry((f, name))
                        .or_default()
                        .push(version);
                }
                Err(err) => say(format!("soak: writing a file for triggerd: {err}")),
            }
        }
    }

    /// The inbox keys chatd holds now (it keeps the newest 500).
    async fn poll_inbox(&self, shared: &Shared) {
        if let Ok((200, body)) = shared
            .call(reqwest::Method::GET, "/notifications?limit=500", None)
            .await
        {
            let mut st = lock(&self.state);
            for n in body["notifications"].as_array().into_iter().flatten() {
                if let Some(key) = n["key"].as_str() {
                    st.inbox.insert(key.to_string());
                }
            }
        }
    }
}

fn open_db(data: &Path) -> anyhow::Result<rusqlite::Connection> {
    Ok(rusqlite::Connection::open_with_flags(
        data.join("triggers.sqlite3"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )?)
}

impl Part for TriggersPart {
    fn name(&self) -> PartName {
        PartName::Triggerd
    }

    fn chatd_env(&self) -> Vec<(String, String)> {
        vec![
            (
                "QSE_TRIGGERS_SOCKET".into(),
                self.socket.display().to_string(),
            ),
            (
                "QSE_SHARED_WORKSPACE".into(),
                self.workspace.display().to_string(),
            ),
        ]
    }

    fn drive(self: Arc<Self>, shared: Arc<Shared>, seed: u64) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut td = match self.make(&shared.chatd_url, "td", "max_runs = 4\n") {
                Ok(td) => td,
                Err(err) => {
                    shared.violate(
                        Inv::Health,
                        format!("triggerd could not be set up: {err:#}"),
                    );
                    return;
                }
            };
            let t0 = parse_ms(T0);
            self.set_clock(&td, t0, true);
            if let Err(err) = td.start().await {
                shared.violate(Inv::Health, format!("triggerd did not start: {err:#}"));
                return;
            }
            shared.started("triggerd", td.pid().unwrap_or(0));
            *self.td.lock().await = Some(td);
            self.create_all(&shared).await;
            let poller = {
                let (me, shared) = (self.clone(), shared.clone());
                tokio::spawn(async move {
                    let mut phase = shared.phase.subscribe();
                    while sleep_in(&mut phase, Duration::from_secs(2), |p| p != Phase::Done).await {
                        me.poll_inbox(&shared).await;
                    }
                })
            };
            let writer = {
                let (me, shared, seed) = (self.clone(), shared.clone(), rng.random());
                tokio::spawn(async move { me.writer(&shared, seed).await })
            };
            let clock = {
                let (me, shared, seed) = (self.clone(), shared.clone(), rng.random());
                tokio::spawn(async move { me.clock_and_kills(&shared, seed).await })
            };
            let _ = writer.await;
            let _ = clock.await;
            self.poll_inbox(&shared).await;
            drop(poller);
        })
    }

    fn finish(self: Arc<Self>, shared: Arc<Shared>) -> BoxFuture<'static, PartEnd> {
        Box::pin(async move {
            self.poll_inbox(&shared).await;
            let mut end = PartEnd {
                secrets: vec![FORWARD_KEY.to_string()],
                data: vec![self.data.clone()],
                ..PartEnd::default()
            };
            let mut guard = self.td.lock().await;
            if let Some(td) = guard.as_mut() {
                end.logs.push(("triggerd".into(), td.log_path()));
                match td.sigterm(Duration::from_secs(15)) {
                    Ok(status) if status.success() => {}
                    other => {
                        shared.violate(Inv::Health, format!("triggerd ended {other:?} on SIGTERM"))
                    }
                }
            }
            if let Some(second) = lock(&self.state).second.as_ref() {
                end.logs
                    .push(("triggerd (second)".into(), second.log_path()));
            }
            match self.check(&shared) {
                Ok(totals) => end.totals = totals,
                Err(err) => shared.violate(
                    Inv::Triggers,
                    format!("triggers.sqlite3 could not be read: {err:#}"),
                ),
            }
            end
        })
    }
}

impl TriggersPart {
    /// `Inv::Triggers` from triggers.sqlite3 (triggerd stopped), and the totals.
    fn check(&self, shared: &Shared) -> anyhow::Result<Vec<String>> {
        let db = open_db(&self.data)?;
        let runs: Vec<StoredRun> = db
            .prepare("SELECT id, trigger_id, due_key, cause, due_ms, file, status FROM runs")?
            .query_map([], |r| {
                Ok(StoredRun {
                    id: r.get(0)?,
                    trigger_id: r.get(1)?,
                    due_key: r.get(2)?,
                    cause: r.get(3)?,
                    due_ms: r.get(4)?,
                    file: r.get(5)?,
                    status: r.get(6)?,
                })
            })?
            .collect::<Result<_, _>>()?;
        let enabled: HashMap<String, i64> = db
            .prepare("SELECT id, enabled_ms FROM triggers")?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        let st = lock(&self.state);
        let last = st.clock_ms;
        let mut by_trigger: HashMap<&str, Vec<&StoredRun>> = HashMap::new();
        for run in &runs {
            by_trigger.entry(&run.trigger_id).or_default().push(run);
        }
        let mut broken = Vec::new();
        let (mut due_minutes, mut file_paths) = (0usize, 0usize);
        for (i, p) in self.plan.iter().enumerate() {
            let Some(Some(id)) = st.ids.get(i) else {
                continue;
            };
            let label = format!("trigger {id} ({}, {:?} {})", p.name, p.when, p.tz);
            let mine = by_trigger.remove(id.as_str()).unwrap_or_default();
            if let Some(due) = &p.due {
                let tz = TimeZone::get(p.tz)?;
                let from = enabled.get(id).copied().unwrap_or(0);
                let dues = due.minutes(&tz, from, last);
                due_minutes += dues.len();
                broken.extend(check_schedule(&label, &dues, &mine, &st.seen, last));
                continue;
            }
            let Some(f) = p.folder else { continue };
            // A file run's due key: `<trigger>:file:<path>:<size>:<mtime>:<inode>`.
            let prefix = format!("{id}:file:");
            let mut of_path: BTreeMap<String, Vec<(&StoredRun, String)>> = BTreeMap::new();
            for run in mine {
                let parts: Vec<&str> = run
                    .due_key
                    .strip_prefix(&prefix)
                    .unwrap_or("")
                    .rsplitn(4, ':')
                    .collect();
                let name = run
                    .file
                    .as_deref()
                    .and_then(|f| Path::new(f).file_name())
                    .map(|n| n.to_string_lossy().to_string());
                match (run.cause.as_str(), parts.as_slice(), name) {
                    ("file", [ino, mtime, len, _], Some(name)) => of_path
                        .entry(name)
                        .or_default()
                        .push((run, format!("{len}:{mtime}:{ino}"))),
                    _ => broken.push(format!(
                        "{label}: run {} (cause {}, file {:?}) has due key {:?}, not a file's",
                        run.id, run.cause, run.file, run.due_key
                    )),
                }
            }
            for ((folder, name), written) in st.writes.range((f, String::new())..) {
                if *folder != f {
                    break;
                }
                file_paths += 1;
                let runs = of_path.remove(name).unwrap_or_default();
                broken.extend(check_file(&label, name, written, &runs));
            }
            for (name, runs) in of_path {
                broken.push(format!(
                    "{label}: {} run(s) for {name}, which the writer never made (run {})",
                    runs.len(),
                    runs[0].0.id
                ));
            }
        }
        for (id, runs) in by_trigger {
            broken.push(format!(
                "{} run(s) of trigger {id}, which the soak did not make (run {})",
                runs.len(),
                runs[0].id
            ));
        }
        let mut outcomes: BTreeMap<(&str, &str), u64> = BTreeMap::new();
        let mut inboxed = 0;
        for run in &runs {
            *outcomes.entry((&run.cause, &run.status)).or_default() += 1;
            match run.status.as_str() {
                "queued" | "running" => broken.push(format!(
                    "run {} of trigger {} (due {}) is still {} after the drain",
                    run.id,
                    run.trigger_id,
                    rfc(run.due_ms),
                    run.status
                )),
                "skipped" => {}
                status if st.inbox.contains(&format!("trigger-run:{}", run.id)) => {
                    let _ = status;
                    inboxed += 1;
                }
                status => broken.push(format!(
                    "run {} of trigger {} (due {}) ended {status} but has no inbox entry in chatd",
                    run.id,
                    run.trigger_id,
                    rfc(run.due_ms)
                )),
            }
        }
        let failed = broken.len();
        for b in broken {
            shared.violate(Inv::Triggers, b);
        }
        let checked = st.seen.at.iter().filter(|(_, c)| *c).count();
        let writes: usize = st.writes.values().map(Vec::len).sum();
        let made = st.ids.iter().flatten().count();
        Ok(vec![
            format!(
                "triggerd: {made} triggers ({} on a schedule, {FOLDERS} on folders); the clock moved {} minutes \
                 from {T0} to {} ({} while triggerd was dead), {checked} clock values surely checked; \
                 it stood {} s with more than {BACKLOG} runs queued (writes skipped then: {})",
                made - FOLDERS.min(made),
                st.minutes,
                rfc(last),
                st.dead_minutes,
                st.held_s,
                st.writes_held
            ),
            format!(
                "triggerd: {due_minutes} due minutes, {} runs: {}; {inboxed} inbox entries found in chatd",
                runs.len(),
                outcomes
                    .iter()
                    .map(|((cause, status), n)| format!("{cause} {status} {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            format!(
                "triggerd: {writes} file versions written to {file_paths} files; {} SIGKILLs; {failed} breaches of its promises",
                st.kills
            ),
        ])
    }
}
