//! Figure 2: durable events per second through chatd, against raw SQLite
//! inserts.

use super::*;

pub(crate) async fn events_written(http: &reqwest::Client, chatd: &Chatd) -> anyhow::Result<f64> {
    let text = http
        .get(format!("{}/metrics", chatd.url()))
        .timeout(Duration::from_secs(5))
        .send()
        .await?
        .text()
        .await?;
    text.lines()
        .find_map(|l| {
            l.strip_prefix("tandem_events_written_total ")
                .and_then(|v| v.trim().parse().ok())
        })
        .context("tandem_events_written_total not in /metrics")
}

/// Waits (bounded) until chatd has written `target` events; returns the count.
pub(crate) async fn wait_events(
    http: &reqwest::Client,
    chatd: &Chatd,
    target: f64,
    bound: Duration,
    progress: Option<f64>,
) -> anyhow::Result<f64> {
    let deadline = Instant::now() + bound;
    let mut last_note = Instant::now();
    loop {
        let now = events_written(http, chatd).await?;
        if now >= target {
            return Ok(now);
        }
        if Instant::now() > deadline {
            bail!("only {now} of {target} events written after {bound:?}");
        }
        if let Some(base) = progress {
            if last_note.elapsed() >= Duration::from_secs(5) {
                say(format!(
                    "  … {} of {} events written",
                    now - base,
                    target - base
                ));
                last_note = Instant::now();
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The baseline of figure 2: the same rows inserted straight into SQLite
/// (WAL, synchronous=NORMAL, one transaction) on the same disk.
pub(crate) fn sqlite_insert_rate(rows: usize, chats: usize) -> anyhow::Result<f64> {
    let dir = tempfile::tempdir()?;
    let mut conn = rusqlite::Connection::open(dir.path().join("baseline.sqlite3"))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.execute_batch(
        "CREATE TABLE events (conversation_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL,
         data TEXT NOT NULL, created INTEGER NOT NULL, PRIMARY KEY (conversation_id, seq)) WITHOUT ROWID;",
    )?;
    let chat_ids: Vec<String> = (0..chats).map(|i| format!("c_{i:020}")).collect();
    let started = Instant::now();
    let tx = conn.transaction()?;
    {
        let mut insert = tx.prepare_cached(
            "INSERT INTO events (conversation_id, seq, kind, data, created) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        for i in 0..rows {
            let chat = &chat_ids[i % chats];
            let seq = (i / chats + 1) as i64;
            let data = json!({"conversation_id": chat, "message_id": "m_0123456789abcdef0123", "run_id": "r_0123456789abcdef0123", "text": format!("w{seq} ")}).to_string();
            insert.execute(rusqlite::params![
                chat,
                seq,
                "text.delta",
                data,
                1_700_000_000i64
            ])?;
        }
    }
    tx.commit()?;
    Ok(rows as f64 / started.elapsed().as_secs_f64())
}

pub(crate) async fn throughput(sizes: &Sizes, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let (chats, tokens) = (sizes.tp_chats, sizes.tp_tokens);
    let total = chats * tokens;
    say(format!("\n## 2. durable events per second ({chats} chats × {tokens} tokens at tps=0, max_runs {chats})"));
    let sim = Sim::start(&[])?;
    let chatd = Chatd::start(&sim.url(), &[("QSE_CHAT_MAX_RUNS", &chats.to_string())]).await?;
    let client = chatd.client();
    let http = reqwest::Client::new();
    // Warm-up: one short answer.
    let warm = client.create_chat().await?;
    let sent = client.send(&warm, "[sim tokens=50 tps=0 id=warm]").await?;
    client
        .wait_run(
            &warm,
            sent["run_id"].as_str().unwrap_or(""),
            &["done"],
            Duration::from_secs(30),
        )
        .await?;

    let mut rates = Vec::new();
    for round in 0..sizes.tp_rounds {
        rates.push(throughput_round(&chatd, &client, &http, chats, tokens, round).await?);
    }
    rates.sort_by(f64::total_cmp);
    let rate = rates[rates.len() / 2];
    let mut baselines = Vec::new();
    for _ in 0..sizes.tp_rounds {
        baselines
            .push(tokio::task::spawn_blocking(move || sqlite_insert_rate(total, chats)).await??);
    }
    baselines.sort_by(f64::total_cmp);
    let baseline = baselines[baselines.len() / 2];
    let list = |v: &[f64]| {
        v.iter()
            .map(|r| format!("{r:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    say(format!(
        "chatd events/s by round (sorted): {}; median {rate:.0}",
        list(&rates)
    ));
    say(format!(
        "raw SQLite, {total} rows in one transaction, rows/s (sorted): {}; median {baseline:.0}",
        list(&baselines)
    ));
    let rounds = if sizes.tp_rounds > 1 {
        format!(", median of {}", sizes.tp_rounds)
    } else {
        String::new()
    };
    rows.push(
        row(
            format!("2. durable events/s ({chats} chats × {tokens} tokens{rounds})"),
            format!("{rate:.0} events/s"),
        )
        .aim("≥ 50,000 events/s", rate >= 50_000.0)
        .baseline(
            format!("raw SQLite insert {baseline:.0} rows/s"),
            format!("×{:.2}", rate / baseline),
        ),
    );
    Ok(())
}

/// One round: `chats` fresh chats answer `tokens` tokens each at once;
/// returns events committed per second.
pub(crate) async fn throughput_round(
    chatd: &Chatd,
    client: &Client,
    http: &reqwest::Client,
    chats: usize,
    tokens: usize,
    round: usize,
) -> anyhow::Result<f64> {
    let total = chats * tokens;
    let mut ids = Vec::new();
    for _ in 0..chats {
        ids.push(client.create_chat().await?);
    }
    let pid = chatd.pid().context("chatd pid")?;
    let sim_pid = child_pid("engine-sim");
    let cpu = || {
        (
            cpu_secs(pid),
            thread_cpu_secs(pid, "chatd-writer"),
            sim_pid.map(cpu_secs).unwrap_or(0.0),
        )
    };
    let cpu0 = cpu();
    let before = events_written(http, chatd).await?;
    let began = Instant::now();
    let texts: Vec<String> = (0..chats)
        .map(|i| format!("[sim tokens={tokens} tps=0 id=tp{round}-{i}]"))
        .collect();
    let sends = join_all(
        ids.iter()
            .zip(&texts)
            .map(|(chat, text)| client.send(chat, text)),
    )
    .await;
    let mut runs = Vec::new();
    for sent in sends {
        runs.push(sent?["run_id"].as_str().context("run_id")?.to_string());
    }
    let reached = wait_events(
        http,
        chatd,
        before + total as f64,
        Duration::from_secs(300),
        Some(before),
    )
    .await?;
    let wall = began.elapsed();
    let rate = (reached - before) / wall.as_secs_f64();
    let cpu1 = cpu();
    for (chat, run) in ids.iter().zip(&runs) {
        client
            .wait_run(chat, run, &["done"], Duration::from_secs(60))
            .await?;
    }
    let after = events_written(http, chatd).await?;
    let mut seqs = 0;
    for chat in &ids {
        seqs += client.snapshot(chat).await?["seq"].as_i64().unwrap_or(0);
    }
    say(format!(
        "round {}: {} events in {} = {rate:.0} events/s (all runs done: {} events written, \
         seqs sum to {seqs}); CPU: chatd {:.2} s (its writer thread {:.2} s), engine-sim {:.2} s",
        round + 1,
        reached - before,
        ms_f(wall),
        after - before,
        cpu1.0 - cpu0.0,
        cpu1.1 - cpu0.1,
        cpu1.2 - cpu0.2
    ));
    Ok(rate)
}
