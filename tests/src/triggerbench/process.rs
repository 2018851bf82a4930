//! The real triggerd of figure 10: its socket client and health, a timed
//! start, the clock file the bench drives, and its stored runs read back.

use super::*;

pub(super) fn socket_client(socket: &Path) -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .unix_socket(socket.to_path_buf())
        .build()?)
}

pub(super) async fn call(
    client: &reqwest::Client,
    method: reqwest::Method,
    path: &str,
    body: Option<&Value>,
) -> anyhow::Result<(u16, Value, String)> {
    let mut request = client
        .request(method, format!("http://triggerd{path}"))
        .timeout(Duration::from_secs(30));
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().await?;
    let status = response.status().as_u16();
    let text = response.text().await?;
    let value = serde_json::from_str(&text).unwrap_or(Value::Null);
    Ok((status, value, text))
}

pub(super) async fn health(client: &reqwest::Client) -> anyhow::Result<Value> {
    let (status, body, _) = call(client, reqwest::Method::GET, "/health", None).await?;
    ensure!(status == 200, "/health answered {status}");
    Ok(body)
}

/// `tandem_triggers_check_seconds` sum and count from `/metrics`.
pub(super) async fn check_seconds(client: &reqwest::Client) -> anyhow::Result<(f64, f64)> {
    let (status, _, text) = call(client, reqwest::Method::GET, "/metrics", None).await?;
    ensure!(status == 200, "/metrics answered {status}");
    let value = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Ok((
        value("tandem_triggers_check_seconds_sum"),
        value("tandem_triggers_check_seconds_count"),
    ))
}

/// A triggerd for `chatd` in its own temp folder, checking every
/// `check_ms`, at most 2 runs at once, its clock file at `BEFORE`.
pub(super) fn made(
    chatd: &Chatd,
    dir: tempfile::TempDir,
    check_ms: u64,
) -> anyhow::Result<Triggerd> {
    let td = Triggerd::new(dir, chatd, "max_runs = 2\n")?;
    let text = std::fs::read_to_string(&td.config)?;
    ensure!(
        text.contains("check_ms = 50\n"),
        "the harness's config changed:\n{text}"
    );
    std::fs::write(
        &td.config,
        text.replace("check_ms = 50\n", &format!("check_ms = {check_ms}\n")),
    )?;
    td.set_clock(BEFORE)?;
    Ok(td)
}

/// Starts (or restarts) `td` and times spawn → the first `/health` answer,
/// which must count `expect` triggers.
pub(super) async fn timed_start(td: &mut Triggerd, expect: usize) -> anyhow::Result<Duration> {
    if td.running() {
        td.sigterm(Duration::from_secs(10))?;
    }
    let client = socket_client(&td.socket)?;
    let started = Instant::now();
    td.spawn()?;
    let deadline = started + Duration::from_secs(60);
    loop {
        if let Ok((200, body, _)) = call(&client, reqwest::Method::GET, "/health", None).await {
            let took = started.elapsed();
            ensure!(
                body["triggers"].as_u64() == Some(expect as u64),
                "triggerd holds {} triggers, not {expect}",
                body["triggers"]
            );
            return Ok(took);
        }
        ensure!(td.running(), "triggerd exited:\n{}", td.log());
        ensure!(
            Instant::now() < deadline,
            "triggerd did not answer /health within 60 s:\n{}",
            td.log()
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// How often the shifted clock file is rewritten: triggerd's times are
/// wall times to within this.
pub const CLOCK_TICK_MS: u64 = 5;

/// The clock file kept at the system clock shifted by a fixed offset,
/// rewritten every `CLOCK_TICK_MS` by a thread of its own until dropped (or `bound`).
pub(super) struct ShiftedClock {
    pub(super) offset_ms: i64,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) thread: Option<std::thread::JoinHandle<()>>,
}

pub(super) fn write_clock(path: &Path, ms: i64) -> std::io::Result<()> {
    let tmp = path.with_extension("bench-tmp");
    let t = Timestamp::from_millisecond(ms).unwrap_or(Timestamp::UNIX_EPOCH);
    std::fs::write(&tmp, t.to_string())?;
    std::fs::rename(&tmp, path)
}

impl ShiftedClock {
    /// Starts the clock at `from` (unix ms) now.
    pub(super) fn start(path: PathBuf, from: i64, bound: Duration) -> anyhow::Result<ShiftedClock> {
        let offset_ms = from - Timestamp::now().as_millisecond();
        write_clock(&path, from)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let until = Instant::now() + bound;
            while !flag.load(Ordering::Relaxed) && Instant::now() < until {
                let _ = write_clock(&path, Timestamp::now().as_millisecond() + offset_ms);
                std::thread::sleep(Duration::from_millis(CLOCK_TICK_MS));
            }
        });
        Ok(ShiftedClock {
            offset_ms,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for ShiftedClock {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One run as triggers.sqlite3 has it (unix ms on triggerd's clock).
pub(super) struct StoredRun {
    pub(super) trigger: String,
    pub(super) status: String,
    pub(super) due: i64,
    pub(super) queued: i64,
    pub(super) started: Option<i64>,
    pub(super) ended: Option<i64>,
}

pub(super) fn read_only(data: &Path) -> anyhow::Result<rusqlite::Connection> {
    let path = data.join("triggers.sqlite3");
    rusqlite::Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .with_context(|| format!("opening {} read-only", path.display()))
}

pub(super) fn stored_runs(conn: &rusqlite::Connection) -> anyhow::Result<Vec<StoredRun>> {
    let mut stmt = conn.prepare(
        "SELECT trigger_id, status, due_ms, queued_ms, started_ms, ended_ms FROM runs ORDER BY rowid",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(StoredRun {
            trigger: r.get(0)?,
            status: r.get(1)?,
            due: r.get(2)?,
            queued: r.get(3)?,
            started: r.get(4)?,
            ended: r.get(5)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Runs stored, and of them queued or running.
pub(super) fn open_runs(conn: &rusqlite::Connection) -> anyhow::Result<(i64, i64)> {
    Ok(conn.query_row(
        "SELECT COUNT(*), COALESCE(SUM(status IN ('queued', 'running')), 0) FROM runs",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?)
}
