//! The lateness of a due minute: 200 runs due at once through the real
//! triggerd, chatd and engine-sim, against the bench starting the same runs.

use super::*;

/// The index `i` in a logged chat request's "Bench trigger {i}:".
pub(super) fn bench_index(body: &Value) -> Option<usize> {
    let text = body.to_string();
    let at = text.find("Bench trigger ")? + "Bench trigger ".len();
    let digits: String = text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// The first message triggerd sends for a trigger with `prompt` and no
/// folder rules (`runner::compose`).
pub(super) fn first_message(prompt: &str) -> String {
    format!("{prompt}\n\n{}", triggerd::runner::CLOSING)
}

/// One run as triggerd makes it, made by the bench straight through chatd's
/// API: the chat, its first message, its events to `run.finished`, the
/// snapshot. Its length.
pub(super) async fn direct_run(client: &Client, i: usize) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let made = client
        .post(
            "/conversations",
            json!({"title": format!("direct {i}"), "origin": "trigger", "workspace": "shared"}),
        )
        .await?;
    ensure!(made.status == 201, "making a chat: {made:?}");
    let chat = made.body["id"]
        .as_str()
        .context("the chat's id")?
        .to_string();
    let mut events = client.events(&chat, 0).await?;
    let prompt = format!(
        "Direct chat {i}: summarise the notes that changed since the last run and list what needs me."
    );
    let sent = client.send(&chat, &first_message(&prompt)).await?;
    let run = sent["run_id"].as_str().context("the run's id")?.to_string();
    events
        .read_until(Duration::from_secs(30), |e| {
            e.kind == "run.finished" && e.data["run_id"] == run.as_str()
        })
        .await?;
    client.snapshot(&chat).await?;
    Ok(started.elapsed())
}

/// `count` direct runs, `slots` at a time: their lengths and the wall time.
pub(super) async fn direct_runs(
    client: &Client,
    count: usize,
    slots: usize,
) -> anyhow::Result<(Vec<Duration>, Duration)> {
    let began = Instant::now();
    let done = futures_util::stream::iter(0..count)
        .map(|i| direct_run(client, i))
        .buffer_unordered(slots.max(1))
        .collect::<Vec<_>>()
        .await;
    let wall = began.elapsed();
    Ok((done.into_iter().collect::<anyhow::Result<Vec<_>>>()?, wall))
}

/// The same rows as `store::all_triggers` reads, each column taken by its
/// index instead of its name: how many rows.
pub(super) fn read_by_index(conn: &rusqlite::Connection) -> anyhow::Result<usize> {
    let mut stmt = conn.prepare("SELECT * FROM triggers ORDER BY created_ms, id")?;
    let rows = stmt.query_map([], |r| {
        let mut texts = Vec::with_capacity(9);
        let mut numbers = Vec::with_capacity(8);
        for i in 0..17 {
            match r.get_ref(i)? {
                rusqlite::types::ValueRef::Text(t) => {
                    texts.push(String::from_utf8_lossy(t).into_owned())
                }
                rusqlite::types::ValueRef::Integer(v) => numbers.push(v),
                _ => {}
            }
        }
        Ok((texts, numbers))
    })?;
    let mut n = 0;
    for row in rows {
        black_box(row?);
        n += 1;
    }
    Ok(n)
}

/// What triggerd's start does with the stored triggers, in-process on a
/// copy of its store: open it, read every trigger, make every `Entry`; and
/// the same rows read by column index.
pub(super) fn load_in_process(
    data: &Path,
    workspace: &Path,
    reps: usize,
) -> anyhow::Result<(Duration, Duration, Duration, Duration)> {
    let scratch = tempfile::tempdir()?;
    let copy = scratch.path().join("triggers.sqlite3");
    read_only(data)?.execute("VACUUM INTO ?1", [copy.to_string_lossy()])?;
    let (mut opens, mut reads, mut plans, mut raw) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..reps.max(1) + 1 {
        let started = Instant::now();
        let store = triggerd::store::open(&copy)?;
        let opened = started.elapsed();
        let started = Instant::now();
        let triggers = store.call_now(|conn| triggerd::store::all_triggers(conn))?;
        let read = started.elapsed();
        let started = Instant::now();
        let by_index = read_by_index(&rusqlite::Connection::open(&copy)?)?;
        raw.push(started.elapsed());
        ensure!(
            by_index == triggers.len(),
            "{by_index} rows by index, {} by name",
            triggers.len()
        );
        let started = Instant::now();
        let entries: HashMap<String, triggerd::scheduler::Entry> = triggers
            .into_iter()
            .map(|t| (t.id.clone(), triggerd::scheduler::Entry::new(t, workspace)))
            .collect();
        let planned = started.elapsed();
        black_box(&entries);
        opens.push(opened);
        reads.push(read);
        plans.push(planned);
    }
    // The first round warmed the page cache and the zones: left out.
    Ok((
        median_d(opens[1..].to_vec()),
        median_d(reads[1..].to_vec()),
        median_d(plans[1..].to_vec()),
        median_d(raw[1..].to_vec()),
    ))
}

/// What one due minute gave.
pub(super) struct Round {
    pub(super) due_ms: i64,
    pub(super) runs: Vec<StoredRun>,
    /// When each run's chat request reached the engine (triggerd's clock).
    pub(super) engine: Vec<i64>,
    pub(super) td_cpu: f64,
    pub(super) chatd_cpu: f64,
    /// Checks made meanwhile, and their mean length (seconds).
    pub(super) checks: u64,
    pub(super) check_mean: f64,
}

/// Round `r`: the clock set 2 s before its minute and kept going with the
/// system clock until every run of the minute has ended.
pub(super) async fn due_round(
    r: usize,
    sizes: &Sizes,
    loaded: &mut Triggerd,
    chatd: &Chatd,
    sim: &Sim,
    conn: &rusqlite::Connection,
    rounds_of: &HashMap<String, usize>,
) -> anyhow::Result<Round> {
    let (_, due) = due_minute(r);
    let due_ms = due.as_millisecond();
    let pid = loaded.pid().context("triggerd's pid")?;
    reqwest::Client::new()
        .delete(format!("{}/sim/requests", sim.url()))
        .send()
        .await?;
    let before = open_runs(conn)?.0 as usize;
    ensure!(before == r * sizes.due, "{before} runs before round {r}");
    // The last run's end woke a check, which restarted triggerd's timer: a
    // pause drawn from [0, check_ms) puts the minute anywhere in the cycle,
    // not where the bench's own polling would.
    tokio::time::sleep(Duration::from_millis(
        rand::random::<u64>() % sizes.check_ms.max(1),
    ))
    .await;
    let (td_cpu0, chatd_cpu0) = (cpu_secs(pid), chatd.pid().map(cpu_secs).unwrap_or(0.0));
    let td_client = socket_client(&loaded.socket)?;
    let (sum0, count0) = check_seconds(&td_client).await?;
    let clock = ShiftedClock::start(
        loaded.clock.clone(),
        due_ms - 2_000,
        sizes.runs_bound + Duration::from_secs(60),
    )?;
    let deadline = Instant::now() + sizes.runs_bound;
    loop {
        let (all, open) = open_runs(conn)?;
        if all as usize >= before + sizes.due && open == 0 {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "round {r}: {} of {} due runs ended within {:?} ({open} queued or running)",
                all as usize - before - open as usize,
                sizes.due,
                sizes.runs_bound
            );
        }
        ensure!(loaded.running(), "triggerd exited:\n{}", loaded.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (td_cpu, chatd_cpu) = (
        cpu_secs(pid) - td_cpu0,
        chatd.pid().map(cpu_secs).unwrap_or(0.0) - chatd_cpu0,
    );
    let (sum1, count1) = check_seconds(&td_client).await?;
    let offset = clock.offset_ms;
    // The clock stops where it is: nothing is due until the next round's minute.
    drop(clock);
    let runs: Vec<StoredRun> = stored_runs(conn)?.into_iter().skip(before).collect();
    ensure!(
        runs.iter()
            .all(|run| rounds_of.get(&run.trigger) == Some(&r) && run.due == due_ms),
        "round {r}: a run of a trigger not due at {due} ran"
    );
    ensure!(
        runs.len() == sizes.due,
        "round {r}: {} runs for {} due triggers",
        runs.len(),
        sizes.due
    );
    ensure!(
        runs.iter()
            .all(|run| run.started.is_some() && run.ended.is_some()),
        "round {r}: a run without its times"
    );
    let logged = sim.get("/sim/requests").await?;
    let mut by_index: HashMap<usize, i64> = HashMap::new();
    for q in logged.as_array().map(Vec::as_slice).unwrap_or_default() {
        if let (Some(i), Some(at_us)) = (bench_index(&q["body"]), q["at_us"].as_i64()) {
            let t = at_us / 1000 + offset;
            let first = by_index.entry(i).or_insert(t);
            *first = (*first).min(t);
        }
    }
    Ok(Round {
        due_ms,
        runs,
        engine: by_index.into_values().collect(),
        td_cpu,
        chatd_cpu,
        checks: (count1 - count0) as u64,
        check_mean: (sum1 - sum0) / (count1 - count0).max(1.0),
    })
}

/// While a list of every trigger is built, how long `/health` waits (both
/// take the lock on the triggers held in memory).
pub(super) async fn health_during_list(
    client: &reqwest::Client,
) -> anyhow::Result<(Duration, Duration)> {
    let list = async {
        let started = Instant::now();
        let (status, _, _) =
            call(client, reqwest::Method::GET, "/v1/chat-app/triggers", None).await?;
        ensure!(status == 200, "the list answered {status}");
        anyhow::Ok(started.elapsed())
    };
    let probe = async {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let started = Instant::now();
        health(client).await?;
        anyhow::Ok(started.elapsed())
    };
    let (l, h) = tokio::join!(list, probe);
    Ok((l?, h?))
}
