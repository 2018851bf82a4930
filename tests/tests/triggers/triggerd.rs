//! triggerd end to end: the real `triggerd`, `chatd` and `engine-sim`
//! binaries, real SQLite files, real folders watched with inotify, and a
//! clock the test drives through triggerd's clock file, so a downtime of
//! three days takes no time at all. Every wait is on a condition with a bound.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};
use tandem_tests::harness::{wait_until, Chatd, Client, Sim};
use tandem_tests::triggerd::{socket_in, Triggerd};

const QUICK: Duration = Duration::from_secs(30);

struct Box3 {
    _sim: Sim,
    chatd: Chatd,
    client: Client,
    td: Triggerd,
}

/// The engine simulator, chatd forwarding to triggerd, and triggerd (not
/// started) with `extra` settings and its clock at `clock`.
async fn boxed(extra: &str, clock: &str) -> anyhow::Result<Box3> {
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let dir = tempfile::tempdir()?;
    let socket = socket_in(dir.path());
    let chatd = Chatd::start(
        &sim.url(),
        &[("QSE_TRIGGERS_SOCKET", socket.to_string_lossy().as_ref())],
    )
    .await?;
    let client = chatd.client();
    let td = Triggerd::new(dir, &chatd, extra)?;
    if !clock.is_empty() {
        td.set_clock(clock)?;
    }
    Ok(Box3 {
        _sim: sim,
        chatd,
        client,
        td,
    })
}

async fn create(td: &Triggerd, body: Value) -> anyhow::Result<Value> {
    let (status, made) = td.api("POST", "", Some(body.clone())).await?;
    anyhow::ensure!(status == 201, "creating {body}: {status} {made}");
    Ok(made)
}

fn id(v: &Value) -> String {
    v["id"].as_str().unwrap_or_default().to_string()
}

async fn health(td: &Triggerd) -> anyhow::Result<Value> {
    let (status, body) = td.call("GET", "/health", None).await?;
    anyhow::ensure!(status == 200, "health: {status}");
    Ok(body)
}

/// Waits until triggerd has made `n` more checks: what is due by now has
/// been queued and started.
async fn checks_pass(td: &Triggerd, n: u64) -> anyhow::Result<()> {
    let from = health(td).await?["checks"].as_u64().unwrap_or(0);
    wait_until("triggerd's checks", QUICK, || async {
        let now = health(td).await.ok()?["checks"].as_u64()?;
        (now >= from + n).then_some(())
    })
    .await
}

/// Waits until `trigger` has `n` runs, none queued or running; the runs, oldest first.
async fn settled_runs(td: &Triggerd, trigger: &str, n: usize) -> anyhow::Result<Vec<Value>> {
    let mut runs = wait_until(
        &format!("{n} finished runs of {trigger}"),
        QUICK,
        || async {
            let runs = td.runs(trigger).await.ok()?;
            let done = runs
                .iter()
                .all(|r| !matches!(r["status"].as_str(), Some("queued" | "running")));
            (runs.len() == n && done).then_some(runs)
        },
    )
    .await?;
    runs.reverse();
    Ok(runs)
}

async fn notifications(client: &Client) -> anyhow::Result<Vec<Value>> {
    let answer = client.get("/notifications?limit=500").await?;
    anyhow::ensure!(answer.status == 200, "{answer:?}");
    Ok(answer.body["notifications"]
        .as_array()
        .cloned()
        .unwrap_or_default())
}

async fn notification_for(client: &Client, trigger: &str, kind: &str) -> anyhow::Result<Value> {
    wait_until(
        &format!("a {kind} notification of {trigger}"),
        QUICK,
        || async {
            notifications(client)
                .await
                .ok()?
                .into_iter()
                .find(|n| n["source"]["id"] == trigger && n["kind"] == kind)
        },
    )
    .await
}

#[tokio::test]
async fn a_schedule_runs_a_chat_of_its_own_and_the_inbox_says_so() -> anyhow::Result<()> {
    let mut b = boxed("", "2026-12-01T07:58:00Z").await?;
    b.td.start().await?;
    std::fs::write(b.td.workspace.join("AGENTS.md"), "Answer in English.")?;
    let t = create(
        &b.td,
        json!({"name": "Morning notes", "when": "weekdays 09:00", "tz": "Europe/Rome",
               "prompt": "Summarise yesterday's notes."}),
    )
    .await?;
    assert_eq!(t["kind"], "schedule");
    assert_eq!(
        t["next_run"], "2026-12-01T08:00:00Z",
        "09:00 in Rome is 08:00 UTC in December"
    );
    assert_eq!(t["description"], "every weekday (Mon–Fri) at 09:00");
    let tid = id(&t);
    // Chatd forwards the same routes to triggerd.
    let via_chatd = b.client.get(&format!("/triggers/{tid}")).await?;
    assert_eq!(via_chatd.status, 200, "{via_chatd:?}");
    assert_eq!(via_chatd.body["id"], tid.as_str());

    checks_pass(&b.td, 3).await?;
    assert!(
        b.td.runs(&tid).await?.is_empty(),
        "nothing is due before 09:00"
    );
    b.td.set_clock("2026-12-01T08:00:02Z")?;
    let runs = settled_runs(&b.td, &tid, 1).await?;
    let run = &runs[0];
    assert_eq!(run["status"], "done", "{run}");
    assert_eq!(run["cause"], "schedule");
    assert_eq!(run["due"], "2026-12-01T08:00:00Z");
    assert!(run["tokens"].as_i64().unwrap_or(0) > 0, "{run}");
    let chat = run["chat_id"].as_str().context("the run's chat")?;

    let snapshot = b.client.snapshot(chat).await?;
    assert_eq!(snapshot["conversation"]["origin"], "trigger");
    assert_eq!(
        snapshot["conversation"]["title"],
        "Morning notes · 2026-12-01 09:00"
    );
    assert_eq!(snapshot["runs"][0]["origin"], "trigger");
    let first = snapshot["messages"][0]["text"].as_str().unwrap_or_default();
    assert!(
        first.starts_with(
            "Summarise yesterday's notes.\n\nRules from AGENTS.md:\nAnswer in English."
        ),
        "{first}"
    );
    assert!(
        first.ends_with("one plain sentence that says what changed."),
        "{first}"
    );

    let note = notification_for(&b.client, &tid, "run_ended").await?;
    assert_eq!(note["conversation_id"], chat);
    assert_eq!(note["source"]["type"], "trigger");
    assert_eq!(note["title"], "Morning notes ran");

    // Saturday and Sunday are not weekdays: the next is Monday the 7th.
    let t = b.td.api("GET", &format!("/{tid}"), None).await?.1;
    assert_eq!(t["next_run"], "2026-12-02T08:00:00Z");
    b.td.set_clock("2026-12-05T12:00:00Z")?;
    checks_pass(&b.td, 2).await?;
    let t = b.td.api("GET", &format!("/{tid}"), None).await?.1;
    assert_eq!(t["next_run"], "2026-12-07T08:00:00Z");
    // (12-02, 12-03 and 12-04 were missed while the clock jumped: one run.)
    let runs = settled_runs(&b.td, &tid, 2).await?;
    assert_eq!(runs[1]["due"], "2026-12-04T08:00:00Z");
    Ok(())
}

#[tokio::test]
async fn a_daily_trigger_across_three_days_of_downtime_runs_once() -> anyhow::Result<()> {
    let mut b = boxed("", "2026-03-01T08:00:00Z").await?;
    b.td.start().await?;
    let tid = id(&create(
        &b.td,
        json!({"name": "Daily", "when": "daily 09:00", "prompt": "Tidy up."}),
    )
    .await?);
    b.td.set_clock("2026-03-01T09:00:01Z")?;
    let runs = settled_runs(&b.td, &tid, 1).await?;
    assert_eq!(runs[0]["due"], "2026-03-01T09:00:00Z");

    b.td.sigterm(Duration::from_secs(10))?;
    // Down from the 1st to the 4th: 2nd, 3rd and 4th 09:00 missed.
    b.td.set_clock("2026-03-04T10:30:00Z")?;
    b.td.start().await?;
    let runs = settled_runs(&b.td, &tid, 2).await?;
    assert_eq!(
        runs[1]["due"], "2026-03-04T09:00:00Z",
        "the latest missed time"
    );
    checks_pass(&b.td, 5).await?;
    assert_eq!(b.td.runs(&tid).await?.len(), 2, "once, not three times");
    // And the schedule goes on from there.
    b.td.set_clock("2026-03-05T09:00:00Z")?;
    let runs = settled_runs(&b.td, &tid, 3).await?;
    assert_eq!(runs[2]["due"], "2026-03-05T09:00:00Z");
    Ok(())
}

#[tokio::test]
async fn a_file_written_in_ten_pieces_runs_once_and_the_runs_own_file_starts_nothing(
) -> anyhow::Result<()> {
    // The real clock: the quiet period is real time.
    let mut b = boxed("clock_file = \"\"\n", "").await?;
    b.td.start().await?;
    let inbox = b.td.workspace.join("Contracts");
    std::fs::create_dir_all(&inbox)?;
    std::fs::write(inbox.join("old.txt"), "here before the trigger")?;
    std::fs::write(inbox.join("AGENTS.md"), "File contracts by year.")?;
    // The model writes a summary next to the file, in the watched folder.
    let cue = r#"[sim tool_calls=[{"name":"write_file","arguments":{"path":"Contracts/summary.md","content":"filed"}}] tool_steps=1]"#;
    let tid = id(&create(
        &b.td,
        json!({"name": "File contracts", "folder": "/Contracts", "quiet_seconds": 3,
               "min_gap_seconds": 0, "prompt": format!("File it. {cue}")}),
    )
    .await?);
    let path = inbox.join("lease.txt");
    for piece in 0..10 {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        writeln!(f, "clause {piece}")?;
        drop(f);
        // A slow writer: two seconds between pieces, under the quiet period.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(
            b.td.runs(&tid).await?.is_empty(),
            "ran while the file was still being written (piece {piece})"
        );
    }
    let runs = settled_runs(&b.td, &tid, 1).await?;
    assert_eq!(runs[0]["status"], "done", "{}", runs[0]);
    assert_eq!(runs[0]["file"], "lease.txt");
    assert_eq!(
        std::fs::read_to_string(inbox.join("summary.md"))?,
        "filed",
        "the run worked in the shared workspace"
    );
    let chat = runs[0]["chat_id"].as_str().context("chat")?;
    let first = b.client.snapshot(chat).await?["messages"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        first.contains("Rules from Contracts/AGENTS.md:\nFile contracts by year."),
        "{first}"
    );
    assert!(
        first.contains("A new file arrived: Contracts/lease.txt"),
        "{first}"
    );
    // The summary the run wrote is quiet for longer than 3 s: still nothing.
    let since = std::time::Instant::now();
    while since.elapsed() < Duration::from_secs(5) {
        checks_pass(&b.td, 5).await?;
    }
    let runs = b.td.runs(&tid).await?;
    assert_eq!(
        runs.len(),
        1,
        "the run's own write started another: {runs:?}"
    );
    // A new file from outside still runs.
    std::fs::write(inbox.join("second.txt"), "another")?;
    let runs = settled_runs(&b.td, &tid, 2).await?;
    assert_eq!(runs[1]["file"], "second.txt");
    Ok(())
}

/// A started triggerd and a second one on its data folder, waiting for
/// the lock; both clocks at `clock`.
async fn a_second_waiting(clock: &str) -> anyhow::Result<(Box3, Triggerd)> {
    let mut b = boxed("", clock).await?;
    b.td.start().await?;
    let mut second = Triggerd::beside(&b.td, &b.chatd, "")?;
    second.set_clock(clock)?;
    second.spawn()?;
    wait_until(
        "the second triggerd to wait for the lock",
        QUICK,
        || async { second.log().contains("waiting for its lock").then_some(()) },
    )
    .await?;
    // The line names the pid it waits for.
    let first = b.td.daemon.pid().context("the first triggerd runs")?;
    let log = second.log();
    anyhow::ensure!(
        log.contains(&format!("(pid {first}); waiting for its lock")),
        "the second triggerd's wait does not name pid {first}:\n{log}"
    );
    Ok((b, second))
}

#[tokio::test]
async fn two_triggerds_on_one_data_folder_run_every_due_key_once() -> anyhow::Result<()> {
    let (mut b, mut second) = a_second_waiting("2026-06-01T10:00:30Z").await?;
    // Three seconds a run: long enough to kill a triggerd in the middle of one.
    let tid = id(&create(
        &b.td,
        json!({"name": "Every minute", "when": "* * * * *",
               "prompt": "Tick. [sim tokens=30 tps=10]"}),
    )
    .await?);
    for minute in 1..=6u32 {
        let at = format!("2026-06-01T10:{minute:02}:05Z");
        b.td.set_clock(&at)?;
        second.set_clock(&at)?;
        if minute == 3 {
            // Killed mid-run: the other takes the lock and goes on.
            wait_until("minute 3's run to be running", QUICK, || async {
                let runs = b.td.runs(&tid).await.ok()?;
                (runs.len() == 3
                    && runs[0]["status"] == "running"
                    && runs[0]["chat_run_id"].is_string())
                .then_some(())
            })
            .await?;
            b.td.kill9();
            second.wait_healthy(QUICK).await?;
        }
        let active = if minute >= 3 { &second } else { &b.td };
        settled_runs(active, &tid, minute as usize).await?;
    }
    checks_pass(&second, 5).await?;
    let runs = second.runs(&tid).await?;
    assert_eq!(runs.len(), 6, "{runs:?}");
    let dues: HashSet<&str> = runs.iter().filter_map(|r| r["due"].as_str()).collect();
    assert_eq!(dues.len(), 6, "every due key once: {runs:?}");
    let statuses: HashMap<&str, &str> = runs
        .iter()
        .map(|r| {
            (
                r["due"].as_str().unwrap_or(""),
                r["status"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        statuses["2026-06-01T10:03:00Z"], "interrupted",
        "{statuses:?}"
    );
    for (due, status) in &statuses {
        if *due != "2026-06-01T10:03:00Z" {
            assert_eq!(*status, "done", "{due}: {statuses:?}");
        }
    }
    // chatd holds one trigger chat per run, no more.
    let chats = b.client.get("/conversations?limit=100").await?;
    let trigger_chats = chats.body["conversations"]
        .as_array()
        .map(|l| l.iter().filter(|c| c["origin"] == "trigger").count())
        .unwrap_or(0);
    assert_eq!(trigger_chats, 6);
    Ok(())
}

#[tokio::test]
async fn triggerd_killed_mid_run_records_it_interrupted_and_the_inbox_says_so() -> anyhow::Result<()>
{
    let mut b = boxed("", "2026-06-01T10:00:00Z").await?;
    b.td.start().await?;
    let tid = id(&create(
        &b.td,
        json!({"name": "Slow", "when": "daily 23:00", "prompt": "Go slowly. [sim tokens=600 tps=20]"}),
    )
    .await?);
    let (status, run) = b.td.api("POST", &format!("/{tid}/run"), None).await?;
    assert_eq!(status, 202, "{run}");
    assert_eq!(run["cause"], "manual");
    let (status, again) = b.td.api("POST", &format!("/{tid}/run"), None).await?;
    assert_eq!(status, 409, "one run of a trigger at a time: {again}");
    assert_eq!(again["error"]["type"], "run_active");
    let chat = wait_until("the run's chat to be answering", QUICK, || async {
        let runs = b.td.runs(&tid).await.ok()?;
        let r = runs.first()?;
        (r["status"] == "running" && r["chat_run_id"].is_string())
            .then(|| r["chat_id"].as_str().map(str::to_string))
            .flatten()
    })
    .await?;
    b.td.kill9();
    b.td.start().await?;
    let runs = settled_runs(&b.td, &tid, 1).await?;
    assert_eq!(runs[0]["status"], "interrupted");
    assert_eq!(runs[0]["reason"], "interrupted by a restart");
    let note = notification_for(&b.client, &tid, "run_failed").await?;
    assert_eq!(note["body"], "interrupted by a restart");
    assert_eq!(note["title"], "Slow was interrupted");
    assert_eq!(note["conversation_id"], chat.as_str());
    // Its chat's run was stopped, not left going with nobody recording it.
    let snapshot = b.client.snapshot(&chat).await?;
    assert_eq!(
        snapshot["runs"][0]["status"], "stopped",
        "{}",
        snapshot["runs"]
    );
    Ok(())
}

#[tokio::test]
async fn bad_input_is_refused_naming_the_field_and_nothing_is_stored() -> anyhow::Result<()> {
    let mut b = boxed("", "2026-06-01T10:00:00Z").await?;
    b.td.start().await?;
    std::fs::create_dir_all(b.chatd.dir.path().join("elsewhere"))?;
    let ok = json!({"name": "n", "when": "daily 08:00", "prompt": "p"});
    let with = |key: &str, value: Value| {
        let mut body = ok.clone();
        body[key] = value;
        body
    };
    for (body, field, says) in [
        (
            with("when", json!("fortnightly 08:00")),
            "when",
            "unknown schedule word",
        ),
        (
            with("when", json!("daily 08:61")),
            "when",
            "minute 61 is outside 0..=59",
        ),
        (
            with("when", json!("61 * * * *")),
            "when",
            "minute 61 is outside 0..=59",
        ),
        (
            with("when", json!("once 2026-05-01 08:00")),
            "when",
            "is in the past",
        ),
        (with("tz", json!("Mars/Olympus")), "tz", "unknown time zone"),
        (
            json!({"name": "n", "folder": "../elsewhere", "prompt": "p"}),
            "folder",
            "outside the workspace",
        ),
        (
            json!({"name": "n", "folder": "Missing", "prompt": "p"}),
            "folder",
            "does not exist",
        ),
        (
            json!({"name": "n", "prompt": "p"}),
            "when",
            "needs a schedule",
        ),
        (
            with("name", json!("")),
            "name",
            "must be 1 to 100 characters",
        ),
        (
            with("prompt", json!("")),
            "prompt",
            "must be 1 to 16000 characters",
        ),
        (
            with("quiet_seconds", json!(0)),
            "quiet_seconds",
            "0 is outside 1..=3600",
        ),
        (
            with("min_gap_seconds", json!(86_401)),
            "min_gap_seconds",
            "outside 0..=86400",
        ),
        (with("daily_cap", json!(0)), "daily_cap", "outside 1..=1000"),
        (with("colour", json!("red")), "colour", "unknown field"),
        (
            with("quiet_seconds", json!("30")),
            "quiet_seconds",
            "invalid type",
        ),
        (with("daily_cap", json!(-1)), "daily_cap", "invalid value"),
    ] {
        let (status, answer) = b.td.api("POST", "", Some(body.clone())).await?;
        assert_eq!(status, 400, "{body}: {answer}");
        assert_eq!(answer["error"]["type"], "bad_input", "{answer}");
        assert_eq!(answer["error"]["field"], field, "{body}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.starts_with(&format!("{field}: ")), "{message}");
        assert!(
            message.contains(says),
            "{body}: {message:?} should say {says:?}"
        );
    }
    let (status, answer) =
        b.td.api(
            "POST",
            "",
            Some(with("prompt", json!("\u{1}".repeat(50_000)))),
        )
        .await?;
    assert_eq!(status, 413, "{answer}");
    assert_eq!(answer["error"]["type"], "too_large");
    assert_eq!(answer["error"]["limit"], 262_144);
    let (_, list) = b.td.api("GET", "", None).await?;
    assert_eq!(list["triggers"], json!([]), "nothing stored");
    // A replace with bad input changes nothing either.
    let tid = id(&create(&b.td, ok.clone()).await?);
    let (status, _) =
        b.td.api(
            "PUT",
            &format!("/{tid}"),
            Some(with("when", json!("daily 25:00"))),
        )
        .await?;
    assert_eq!(status, 400);
    let (_, t) = b.td.api("GET", &format!("/{tid}"), None).await?;
    assert_eq!(t["when"], "daily 08:00");
    let (status, _) = b.td.api("GET", "/t_nope", None).await?;
    assert_eq!(status, 404);
    let (status, answer) =
        b.td.api("GET", &format!("/{tid}/runs?limit=0"), None)
            .await?;
    assert_eq!(
        (status, answer["error"]["field"].clone()),
        (400, json!("limit"))
    );
    Ok(())
}

#[tokio::test]
async fn preview_shows_the_next_times_and_what_the_text_means() -> anyhow::Result<()> {
    let mut b = boxed("", "2026-03-27T12:00:00Z").await?;
    b.td.start().await?;
    let (status, p) =
        b.td.api(
            "GET",
            "/preview?when=daily%2002:30&tz=Europe/Rome&count=3",
            None,
        )
        .await?;
    assert_eq!(status, 200, "{p}");
    assert_eq!(p["description"], "every day at 02:30");
    let at: Vec<&str> = p["next"]
        .as_array()
        .context("next")?
        .iter()
        .filter_map(|n| n["at"].as_str())
        .collect();
    // The 29th's 02:30 does not exist in Rome: the first minute after the gap, 03:00 CEST.
    assert_eq!(
        at,
        [
            "2026-03-28T01:30:00Z",
            "2026-03-29T01:00:00Z",
            "2026-03-30T00:30:00Z"
        ]
    );
    assert_eq!(p["next"][1]["local"], "Sun 2026-03-29 03:00 CEST");
    for (query, field) in [
        ("when=daily%2024:00", "when"),
        ("when=daily%2008:00&tz=Nowhere/Else", "tz"),
        ("when=once%202020-01-01%2008:00", "when"),
        ("when=", "when"),
        ("when=daily%2008:00&count=0", "count"),
    ] {
        let (status, answer) = b.td.api("GET", &format!("/preview?{query}"), None).await?;
        assert_eq!(status, 400, "{query}: {answer}");
        assert_eq!(answer["error"]["field"], field, "{query}: {answer}");
    }
    Ok(())
}

#[tokio::test]
async fn a_file_trigger_whose_folder_goes_is_switched_off_with_an_inbox_entry() -> anyhow::Result<()>
{
    let mut b = boxed("", "2026-06-01T10:00:00Z").await?;
    b.td.start().await?;
    let folder = b.td.workspace.join("Drop");
    std::fs::create_dir_all(&folder)?;
    let tid = id(&create(
        &b.td,
        json!({"name": "Drop box", "folder": "Drop", "prompt": "p"}),
    )
    .await?);
    std::fs::remove_dir_all(&folder)?;
    let t = wait_until("the trigger to be switched off", QUICK, || async {
        let (_, t) = b.td.api("GET", &format!("/{tid}"), None).await.ok()?;
        (t["enabled"] == false).then_some(t)
    })
    .await?;
    assert_eq!(
        t["disabled_reason"],
        "its folder Drop is gone from the workspace"
    );
    let note = notification_for(&b.client, &tid, "needs_attention").await?;
    assert_eq!(note["title"], "Drop box was switched off");
    // Switching it on again while the folder is gone is refused, naming it.
    let (status, answer) = b.td.api("POST", &format!("/{tid}/enable"), None).await?;
    assert_eq!(
        (status, answer["error"]["field"].clone()),
        (400, json!("folder"))
    );
    std::fs::create_dir_all(&folder)?;
    let (status, t) = b.td.api("POST", &format!("/{tid}/enable"), None).await?;
    assert_eq!((status, t["enabled"].clone()), (200, json!(true)), "{t}");
    Ok(())
}

#[tokio::test]
async fn a_run_past_its_time_is_stopped_and_fails_saying_so() -> anyhow::Result<()> {
    let mut b = boxed("run_timeout_s = 10\n", "2026-06-01T10:00:00Z").await?;
    b.td.start().await?;
    let tid = id(&create(
        &b.td,
        json!({"name": "Endless", "when": "daily 23:00", "prompt": "On and on. [sim tokens=2000 tps=20]"}),
    )
    .await?);
    let (status, _) = b.td.api("POST", &format!("/{tid}/run"), None).await?;
    assert_eq!(status, 202);
    let runs = settled_runs(&b.td, &tid, 1).await?;
    assert_eq!(runs[0]["status"], "failed", "{}", runs[0]);
    assert_eq!(runs[0]["reason"], "stopped after 10 s (run_timeout_s 10)");
    let chat = runs[0]["chat_id"].as_str().context("chat")?;
    let chat_run = wait_until("the chat's run to end", QUICK, || async {
        let s = b.client.snapshot(chat).await.ok()?;
        let status = s["runs"][0]["status"].as_str()?.to_string();
        (status != "running" && status != "queued").then_some(status)
    })
    .await?;
    assert_eq!(chat_run, "stopped");
    let note = notification_for(&b.client, &tid, "run_failed").await?;
    assert_eq!(note["body"], "stopped after 10 s (run_timeout_s 10)");
    Ok(())
}

#[tokio::test]
async fn the_daily_cap_skips_runs_past_it() -> anyhow::Result<()> {
    let mut b = boxed("", "2026-06-01T10:00:30Z").await?;
    b.td.start().await?;
    let tid = id(&create(
        &b.td,
        json!({"name": "Often", "when": "* * * * *", "daily_cap": 2, "prompt": "Tick."}),
    )
    .await?);
    for minute in 1..=3u32 {
        b.td.set_clock(&format!("2026-06-01T10:{minute:02}:01Z"))?;
        settled_runs(&b.td, &tid, minute as usize).await?;
    }
    let runs = settled_runs(&b.td, &tid, 3).await?;
    let statuses: Vec<&str> = runs.iter().filter_map(|r| r["status"].as_str()).collect();
    assert_eq!(statuses, ["done", "done", "skipped"]);
    assert_eq!(
        runs[2]["reason"],
        "the daily cap of 2 runs in 24 hours was reached"
    );
    assert!(runs[2]["chat_id"].is_null(), "a skipped run makes no chat");
    // A day later the cap has room again.
    b.td.set_clock("2026-06-02T10:02:30Z")?;
    let runs = settled_runs(&b.td, &tid, 4).await?;
    assert_eq!(runs[3]["status"], "done");
    Ok(())
}

#[tokio::test]
async fn chatd_killed_mid_run_ends_the_run_interrupted_and_the_inbox_still_hears(
) -> anyhow::Result<()> {
    let mut b = boxed("", "2026-06-01T10:00:00Z").await?;
    b.td.start().await?;
    let tid = id(&create(
        &b.td,
        json!({"name": "Long", "when": "daily 23:00", "prompt": "Slowly. [sim tokens=600 tps=20]"}),
    )
    .await?);
    b.td.api("POST", &format!("/{tid}/run"), None).await?;
    wait_until("the run to be answering", QUICK, || async {
        let runs = b.td.runs(&tid).await.ok()?;
        (runs.first()?["chat_run_id"].is_string()).then_some(())
    })
    .await?;
    b.chatd.restart().await?;
    let runs = settled_runs(&b.td, &tid, 1).await?;
    assert_eq!(runs[0]["status"], "interrupted", "{}", runs[0]);
    let note = notification_for(&b.client, &tid, "run_failed").await?;
    assert_eq!(note["title"], "Long was interrupted");
    assert_eq!(note["conversation_id"], runs[0]["chat_id"]);
    Ok(())
}

#[tokio::test]
async fn a_run_that_asks_is_an_inbox_entry_and_goes_on_when_answered() -> anyhow::Result<()> {
    let mut b = boxed("", "2026-06-01T10:00:00Z").await?;
    b.td.start().await?;
    let mode = b
        .client
        .call(
            reqwest::Method::PUT,
            "/permissions/mode",
            Some(json!({"default": "ask"})),
        )
        .await?;
    assert_eq!(mode.status, 200, "{mode:?}");
    let cue = r#"[sim tool_calls=[{"name":"write_file","arguments":{"path":"report.md","content":"weekly"}}] tool_steps=1]"#;
    let tid = id(&create(
        &b.td,
        json!({"name": "Weekly report", "when": "weekly fri 17:00", "prompt": format!("Write it. {cue}")}),
    )
    .await?);
    b.td.api("POST", &format!("/{tid}/run"), None).await?;
    let note = notification_for(&b.client, &tid, "needs_attention").await?;
    assert_eq!(note["title"], "Weekly report is waiting for you");
    let chat = note["conversation_id"].as_str().context("the chat")?;
    assert!(
        note["body"]
            .as_str()
            .unwrap_or_default()
            .contains("15 minutes"),
        "{note}"
    );
    let snapshot = b.client.snapshot(chat).await?;
    let card = snapshot["consents"][0]["card_id"]
        .as_str()
        .context("the card")?
        .to_string();
    let answer = b
        .client
        .post(
            &format!("/conversations/{chat}/consent"),
            json!({"card_id": card, "decision": "once"}),
        )
        .await?;
    assert_eq!(answer.status, 200, "{answer:?}");
    let runs = settled_runs(&b.td, &tid, 1).await?;
    assert_eq!(runs[0]["status"], "done", "{}", runs[0]);
    assert_eq!(
        std::fs::read_to_string(b.td.workspace.join("report.md"))?,
        "weekly"
    );
    notification_for(&b.client, &tid, "run_ended").await?;
    Ok(())
}

/// A file trigger whose run writes `Out/summary.md`-like files next to the
/// file and then answers for a few seconds.
const SLOW_WRITER: &str = r#"[sim tool_calls=[{"name":"write_file","arguments":{"path":"Drop/summary.md","content":"done"}}] tool_steps=1 tokens=120 tps=20]"#;

/// A file trigger on the workspace's Drop/ whose runs write and then answer
/// slowly; real time.
async fn slow_drop_box() -> anyhow::Result<(Box3, std::path::PathBuf, String)> {
    let mut b = boxed("clock_file = \"\"\n", "").await?;
    b.td.start().await?;
    let drop = b.td.workspace.join("Drop");
    std::fs::create_dir_all(&drop)?;
    let tid = id(&create(
        &b.td,
        json!({"name": "Drop box", "folder": "Drop", "quiet_seconds": 1, "min_gap_seconds": 0,
               "prompt": format!("Sort it. {SLOW_WRITER}")}),
    )
    .await?);
    Ok((b, drop, tid))
}

/// Waits until the only run of `tid` works and has written its summary.
async fn wrote_its_summary(b: &Box3, drop: &std::path::Path, tid: &str) -> anyhow::Result<()> {
    wait_until("the run to have written its summary", QUICK, || async {
        let runs = b.td.runs(tid).await.ok()?;
        (runs.len() == 1 && runs[0]["status"] == "running" && drop.join("summary.md").exists())
            .then_some(())
    })
    .await
}

#[tokio::test]
async fn a_file_from_outside_during_a_run_still_runs_and_the_runs_own_never_does(
) -> anyhow::Result<()> {
    let (b, drop, tid) = slow_drop_box().await?;
    // A name with a control character still makes a chat (its title is cleaned).
    std::fs::write(drop.join("first\u{7}.txt"), "one")?;
    wait_until(
        "the first run to have written its summary",
        QUICK,
        || async {
            let runs = b.td.runs(&tid).await.ok()?;
            (runs.len() == 1 && runs[0]["status"] == "running" && drop.join("summary.md").exists())
                .then_some(())
        },
    )
    .await?;
    // While it works, a person drops another file.
    std::fs::write(drop.join("second.txt"), "two")?;
    let runs = settled_runs(&b.td, &tid, 2).await?;
    assert_eq!(runs[0]["status"], "done", "{}", runs[0]);
    assert_eq!(runs[0]["file"], "first\u{7}.txt");
    assert_eq!(
        runs[1]["file"], "second.txt",
        "the file from outside ran after"
    );
    // summary.md, written by both runs, never ran.
    let since = std::time::Instant::now();
    while since.elapsed() < Duration::from_secs(3) {
        checks_pass(&b.td, 5).await?;
    }
    let files: Vec<String> =
        b.td.runs(&tid)
            .await?
            .iter()
            .filter_map(|r| r["file"].as_str().map(str::to_string))
            .collect();
    assert_eq!(files.len(), 2, "{files:?}");
    Ok(())
}

#[tokio::test]
async fn a_restart_in_the_middle_of_a_run_does_not_let_its_own_file_start_it() -> anyhow::Result<()>
{
    let (mut b, drop, tid) = slow_drop_box().await?;
    std::fs::write(drop.join("in.txt"), "one")?;
    wrote_its_summary(&b, &drop, &tid).await?;
    b.td.kill9();
    b.td.start().await?;
    let runs = settled_runs(&b.td, &tid, 1).await?;
    assert_eq!(runs[0]["status"], "interrupted");
    let since = std::time::Instant::now();
    while since.elapsed() < Duration::from_secs(3) {
        checks_pass(&b.td, 5).await?;
    }
    let runs = b.td.runs(&tid).await?;
    assert_eq!(
        runs.len(),
        1,
        "the run's own summary.md started it: {runs:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_folder_swapped_for_a_link_out_is_never_followed() -> anyhow::Result<()> {
    let mut b = boxed("", "2026-06-01T10:00:00Z").await?;
    b.td.start().await?;
    let drop = b.td.workspace.join("Drop");
    std::fs::create_dir_all(&drop)?;
    let outside = tempfile::tempdir()?;
    std::fs::write(outside.path().join("id_rsa"), "secret")?;
    let tid = id(&create(
        &b.td,
        json!({"name": "Drop box", "folder": "Drop", "quiet_seconds": 1, "prompt": "p"}),
    )
    .await?);
    // Swapped in one step (RENAME_EXCHANGE): a remove, then a link, let
    // triggerd see the folder gone in between and switch it off for that.
    let link = b.td.workspace.join("Drop.link");
    std::os::unix::fs::symlink(outside.path(), &link)?;
    nix::fcntl::renameat2(
        nix::fcntl::AT_FDCWD,
        &link,
        nix::fcntl::AT_FDCWD,
        &drop,
        nix::fcntl::RenameFlags::RENAME_EXCHANGE,
    )?;
    let t = wait_until("the trigger to be switched off", QUICK, || async {
        let (_, t) = b.td.api("GET", &format!("/{tid}"), None).await.ok()?;
        (t["enabled"] == false).then_some(t)
    })
    .await?;
    let reason = t["disabled_reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("its folder Drop cannot be used:"),
        "{reason}"
    );
    assert!(reason.contains("outside the workspace"), "{reason}");
    assert!(b.td.runs(&tid).await?.is_empty(), "nothing outside ran");
    Ok(())
}

#[tokio::test]
async fn a_triggerd_waiting_for_the_lock_stops_at_sigterm() -> anyhow::Result<()> {
    let (mut b, mut second) = a_second_waiting("2026-06-01T10:00:00Z").await?;
    let status = second.sigterm(Duration::from_secs(5))?;
    assert!(status.success(), "{status}");
    assert!(b.td.running(), "the first goes on");
    Ok(())
}

#[tokio::test]
async fn a_trigger_bound_to_an_agent_runs_as_it_and_is_switched_off_when_it_goes(
) -> anyhow::Result<()> {
    let mut b = boxed("", "2026-06-01T10:00:00Z").await?;
    b.td.start().await?;
    let agent = b
        .client
        .post(
            "/agents",
            json!({"name": "Clerk", "instructions": "You are the filing clerk of this box."}),
        )
        .await?;
    assert_eq!(agent.status, 201, "{agent:?}");
    let agent_id = id(&agent.body);
    let (status, refused) =
        b.td.api(
            "POST",
            "",
            Some(json!({"name": "n", "when": "daily 08:00", "prompt": "p", "agent_id": "a_nope"})),
        )
        .await?;
    assert_eq!(
        (status, refused["error"]["field"].clone()),
        (400, json!("agent_id")),
        "{refused}"
    );
    let tid = id(&create(
        &b.td,
        json!({"name": "Filing", "when": "daily 23:00", "prompt": "File today's papers.", "agent_id": agent_id}),
    )
    .await?);
    b.td.api("POST", &format!("/{tid}/run"), None).await?;
    let runs = settled_runs(&b.td, &tid, 1).await?;
    assert_eq!(runs[0]["status"], "done", "{}", runs[0]);
    let requests = b._sim.requests().await?;
    let system = requests
        .iter()
        .rev()
        .find_map(|r| {
            r["body"]["messages"][0]["content"]
                .as_str()
                .map(str::to_string)
        })
        .unwrap_or_default();
    assert!(
        system.contains("You are the filing clerk of this box."),
        "{system}"
    );

    // The agent is deleted: the next run cannot be made as it.
    let gone = b
        .client
        .call(
            reqwest::Method::DELETE,
            &format!("/agents/{agent_id}"),
            None,
        )
        .await?;
    assert_eq!(gone.status, 204, "{gone:?}");
    b.td.api("POST", &format!("/{tid}/run"), None).await?;
    let runs = settled_runs(&b.td, &tid, 2).await?;
    assert_eq!(runs[1]["status"], "failed");
    let reason = format!("its agent {agent_id} is gone from chatd");
    assert_eq!(runs[1]["reason"], reason.as_str());
    let (_, t) = b.td.api("GET", &format!("/{tid}"), None).await?;
    assert_eq!(
        (t["enabled"].clone(), t["disabled_reason"].clone()),
        (json!(false), json!(reason))
    );
    let note = notification_for(&b.client, &tid, "needs_attention").await?;
    assert_eq!(note["title"], "Filing was switched off");
    let (status, _) = b.td.api("POST", &format!("/{tid}/enable"), None).await?;
    assert_eq!(status, 400, "not on again while the agent is gone");
    Ok(())
}

#[tokio::test]
async fn deleting_a_trigger_stops_its_running_run_and_keeps_its_chat() -> anyhow::Result<()> {
    let mut b = boxed("", "2026-06-01T10:00:00Z").await?;
    b.td.start().await?;
    let tid = id(&create(
        &b.td,
        json!({"name": "Long one", "when": "daily 23:00", "prompt": "On and on. [sim tokens=2000 tps=20]"}),
    )
    .await?);
    let (status, _) = b.td.api("POST", &format!("/{tid}/run"), None).await?;
    assert_eq!(status, 202);
    let chat = wait_until("the run's chat to answer", QUICK, || async {
        let runs = b.td.runs(&tid).await.ok()?;
        let chat = runs.iter().find(|r| r["status"] == "running")?["chat_id"]
            .as_str()?
            .to_string();
        let s = b.client.snapshot(&chat).await.ok()?;
        (s["runs"][0]["status"] == "running").then_some(chat)
    })
    .await?;
    // The trigger's own naming, not chatd's.
    let title = b.client.snapshot(&chat).await?["conversation"]["title"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(title.starts_with("Long one"), "{title}");
    let (status, _) = b.td.api("DELETE", &format!("/{tid}"), None).await?;
    assert_eq!(status, 204);
    let chat_run = wait_until("the chat's run to end", QUICK, || async {
        let s = b.client.snapshot(&chat).await.ok()?;
        let status = s["runs"][0]["status"].as_str()?.to_string();
        (status != "running" && status != "queued").then_some(status)
    })
    .await?;
    assert_eq!(chat_run, "stopped");
    let note = notification_for(&b.client, &tid, "run_failed").await?;
    assert_eq!(note["body"], "its trigger was deleted", "{note}");
    // Nothing else starts for it, and its chat stays.
    checks_pass(&b.td, 2).await?;
    let chats = b.client.get("/conversations").await?;
    let made: Vec<&Value> = chats.body["conversations"]
        .as_array()
        .map(|c| c.iter().filter(|c| c["origin"] == "trigger").collect())
        .unwrap_or_default();
    assert_eq!(made.len(), 1, "{chats:?}");
    assert_eq!(made[0]["id"], chat.as_str());
    Ok(())
}

/// A saved agent kept to `folder` (read only), made through chatd; its id.
async fn folder_agent(
    client: &Client,
    name: &str,
    folder: &std::path::Path,
) -> anyhow::Result<String> {
    let agent = client
        .post(
            "/agents",
            json!({"name": name, "folder": {"path": folder, "mode": "read"}}),
        )
        .await?;
    anyhow::ensure!(agent.status == 201, "agent: {agent:?}");
    anyhow::ensure!(agent.body["folder"]["state"] == "ok", "{}", agent.body);
    Ok(id(&agent.body))
}

#[tokio::test]
async fn a_file_trigger_never_takes_an_agent_kept_to_a_folder() -> anyhow::Result<()> {
    let mut b = boxed("", "2026-06-01T10:00:00Z").await?;
    b.td.start().await?;
    let notes = tempfile::tempdir()?;
    let agent = folder_agent(&b.client, "Notes clerk", notes.path()).await?;
    std::fs::create_dir_all(b.td.workspace.join("Drop"))?;
    let body =
        json!({"name": "Drop box", "folder": "Drop", "prompt": "File it.", "agent_id": agent});
    let (status, refused) = b.td.api("POST", "", Some(body.clone())).await?;
    assert_eq!(
        (status, refused["error"]["field"].clone()),
        (400, json!("agent_id")),
        "{refused}"
    );
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("shared workspace"), "{message}");
    // Switched off or on, through chatd's forward alike.
    let mut off = body.clone();
    off["enabled"] = json!(false);
    let forwarded = b.client.post("/triggers", off).await?;
    assert_eq!(forwarded.status, 400, "{forwarded:?}");
    assert_eq!(forwarded.body["error"]["field"], "agent_id");
    // An agent without a folder may watch it; switching to the folder agent may not.
    let plain = b.client.post("/agents", json!({"name": "Clerk"})).await?;
    assert_eq!(plain.status, 201, "{plain:?}");
    let mut ok = body.clone();
    ok["agent_id"] = plain.body["id"].clone();
    let tid = id(&create(&b.td, ok).await?);
    let (status, refused) = b.td.api("PUT", &format!("/{tid}"), Some(body)).await?;
    assert_eq!(
        (status, refused["error"]["field"].clone()),
        (400, json!("agent_id")),
        "{refused}"
    );
    let (_, t) = b.td.api("GET", &format!("/{tid}"), None).await?;
    assert_eq!(t["agent_id"], plain.body["id"], "nothing was stored");
    assert!(b.td.runs(&tid).await?.is_empty());
    Ok(())
}

#[tokio::test]
async fn a_schedule_whose_agents_folder_is_missing_is_skipped_and_switched_off(
) -> anyhow::Result<()> {
    let mut b = boxed("", "2026-06-01T10:00:00Z").await?;
    b.td.start().await?;
    let notes = tempfile::tempdir()?;
    let folder = notes.path().join("notes");
    std::fs::create_dir(&folder)?;
    let agent = folder_agent(&b.client, "Notes clerk", &folder).await?;
    let tid = id(&create(
        &b.td,
        json!({"name": "Digest", "when": "daily 10:05", "prompt": "Sum up my notes.", "agent_id": agent}),
    )
    .await?);
    std::fs::remove_dir(&folder)?;
    let shown = b.client.get(&format!("/agents/{agent}")).await?;
    assert_eq!(shown.body["folder"]["state"], "missing", "{shown:?}");

    b.td.set_clock("2026-06-01T10:05:01Z")?;
    let runs = settled_runs(&b.td, &tid, 1).await?;
    let reason = format!("the folder its agent {agent} keeps to is missing");
    assert_eq!(runs[0]["status"], "skipped", "{}", runs[0]);
    assert_eq!(runs[0]["reason"], reason.as_str());
    assert!(runs[0]["chat_id"].is_null(), "no chat: {}", runs[0]);
    let (_, t) = b.td.api("GET", &format!("/{tid}"), None).await?;
    assert_eq!(
        (
            t["enabled"].clone(),
            t["disabled_reason"].clone(),
            t["next_run"].clone()
        ),
        (json!(false), json!(reason), Value::Null),
        "{t}"
    );
    let note = notification_for(&b.client, &tid, "needs_attention").await?;
    assert_eq!(note["title"], "Digest was switched off");
    let body = note["body"].as_str().unwrap_or_default();
    assert!(
        body.contains("is missing") && body.contains("switch the trigger on again"),
        "{body}"
    );
    assert!(note["conversation_id"].is_null(), "{note}");
    let chats = b.client.get("/conversations?limit=100").await?;
    assert_eq!(
        chats.body["conversations"],
        json!([]),
        "no chat left behind"
    );
    // Nothing more runs while it is off, and no run_* entry came (a skip has none).
    b.td.set_clock("2026-06-02T10:05:01Z")?;
    checks_pass(&b.td, 2).await?;
    assert_eq!(b.td.runs(&tid).await?.len(), 1);
    let kinds: Vec<Value> = notifications(&b.client)
        .await?
        .iter()
        .filter(|n| n["source"]["id"] == tid.as_str())
        .map(|n| n["kind"].clone())
        .collect();
    assert_eq!(kinds, vec![json!("needs_attention")]);

    // Saving it switched on while the folder is missing is refused, naming agent_id.
    let refusals = [
        b.td.api("POST", &format!("/{tid}/enable"), None).await?,
        b.td.api(
            "PUT",
            &format!("/{tid}"),
            Some(
                json!({"name": "Digest", "when": "daily 11:00", "prompt": "p", "agent_id": agent}),
            ),
        )
        .await?,
        b.td.api(
            "POST",
            "",
            Some(
                json!({"name": "Another", "when": "daily 11:00", "prompt": "p", "agent_id": agent}),
            ),
        )
        .await?,
    ];
    for (status, refused) in &refusals {
        assert_eq!(
            (*status, refused["error"]["field"].clone()),
            (400, json!("agent_id")),
            "{refused}"
        );
        let message = refused["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("folder") && message.contains("missing"),
            "{message}"
        );
    }
    assert_eq!(
        b.td.api("GET", "", None).await?.1["triggers"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    // Switched off, it may still be edited.
    let (status, t) = b
        .td
        .api(
            "PUT",
            &format!("/{tid}"),
            Some(json!({"name": "Digest", "when": "daily 11:00", "prompt": "p", "agent_id": agent, "enabled": false})),
        )
        .await?;
    assert_eq!(status, 200, "{t}");
    // The folder is back: it goes on.
    std::fs::create_dir(&folder)?;
    let (status, t) = b.td.api("POST", &format!("/{tid}/enable"), None).await?;
    assert_eq!((status, t["enabled"].clone()), (200, json!(true)), "{t}");
    b.td.set_clock("2026-06-02T11:00:01Z")?;
    let runs = settled_runs(&b.td, &tid, 2).await?;
    assert_eq!(runs[1]["status"], "done", "{}", runs[1]);
    Ok(())
}
