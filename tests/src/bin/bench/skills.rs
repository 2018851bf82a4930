//! Figure 18h: what skills cost a turn, on a real chatd (defaults) and
//! engine-sim at tps=0, every answer one scripted token. chatd reads every
//! layer afresh for each request (nothing cached, so an edit serves at the
//! next step): with 200 skills in the owner's folder, a turn of a chat that
//! has them all against a turn of a chat of the same chatd that switched
//! every one off (the scan still runs, the list is not sent); and the
//! system block each sends, from the simulator's recorded requests. Then a
//! turn whose model calls `load_skill` once against a plain one.

use super::*;

use crate::subagents::p50_p95;

const SKILLS: usize = 200;
const TURNS: usize = 40;
const QUICK_TURNS: usize = 5;

/// `turns` turns of one token: each turn's time (µs), send to its run's end.
async fn turns(
    client: &Client,
    chat: &str,
    turns: usize,
    next: &dyn Fn() -> Vec<Value>,
    sim: &Sim,
) -> anyhow::Result<Vec<i64>> {
    let mut times = Vec::with_capacity(turns);
    for _ in 0..turns {
        sim.post(
            "/sim/faults",
            json!({"session": format!("chat-{chat}"), "next": next()}),
        )
        .await?;
        let begun = Instant::now();
        let sent = client.send(chat, "go").await?;
        let run = sent["run_id"].as_str().context("run_id")?.to_string();
        let record = client
            .wait_run(
                chat,
                &run,
                &["done", "failed", "stopped", "interrupted"],
                Duration::from_secs(60),
            )
            .await?;
        anyhow::ensure!(record["status"] == "done", "{record}");
        times.push(begun.elapsed().as_micros() as i64);
    }
    Ok(times)
}

/// The system block of the chat's last request, in characters.
async fn system_chars(sim: &Sim, chat: &str) -> anyhow::Result<usize> {
    let session = format!("chat-{chat}");
    let requests = sim.requests().await?;
    let last = requests
        .iter()
        .rev()
        .find(|r| r["session_id"] == session)
        .context("a request of the chat")?;
    Ok(last["body"]["messages"][0]["content"]
        .as_str()
        .map_or(0, |s| s.chars().count()))
}

pub(crate) async fn figure(quick: bool, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    say("\n## 18h. skills: a turn with 200 skills listed against the same chatd with them switched off");
    let n = if quick { QUICK_TURNS } else { TURNS };
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start(&sim.url(), &[]).await?;
    let client = chatd.client();
    let dir = chatd
        .data_dir()
        .parent()
        .context("chatd's HOME")?
        .join(".tandemllm/skills");
    for i in 0..SKILLS {
        let name = format!("job-{i:03}");
        std::fs::create_dir_all(dir.join(&name))?;
        let text = format!(
            "---\nname: {name}\ndescription: Do job {i} the house way, step by step\n---\n\n{}",
            "One step of the procedure.\n".repeat(60)
        );
        std::fs::write(dir.join(&name).join("SKILL.md"), text)?;
    }
    let one = || vec![json!({"tokens": 1})];

    let with = client.create_chat_in("auto").await?;
    let without = client.create_chat_in("auto").await?;
    let listed = client
        .get(&format!("/skills?conversation_id={without}"))
        .await?
        .body;
    let mut names: Vec<String> = listed["skills"]
        .as_array()
        .context("skills")?
        .iter()
        .filter_map(|s| s["name"].as_str().map(str::to_string))
        .collect();
    names.dedup();
    let off = client
        .call(
            reqwest::Method::PUT,
            &format!("/conversations/{without}/skills"),
            Some(json!({ "off": names })),
        )
        .await?;
    anyhow::ensure!(off.status == 200 && off.body["on"] == 0, "{:?}", off.body);

    // Warm both, then alternate so the machine's drift falls on both.
    turns(&client, &with, 2, &one, &sim).await?;
    turns(&client, &without, 2, &one, &sim).await?;
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for _ in 0..n {
        on.extend(turns(&client, &with, 1, &one, &sim).await?);
        off.extend(turns(&client, &without, 1, &one, &sim).await?);
    }
    let (system_on, system_off) = (
        system_chars(&sim, &with).await?,
        system_chars(&sim, &without).await?,
    );
    let load = || {
        vec![
            json!({"tool_calls": [{"name": "load_skill", "arguments": {"name": "job-150"}}]}),
            json!({"tokens": 1}),
        ]
    };
    let loads = turns(&client, &with, n, &load, &sim).await?;

    let ((on50, on95), (off50, _), (load50, _)) = (p50_p95(on), p50_p95(off), p50_p95(loads));
    let ms = |us: i64| us as f64 / 1000.0;
    say(format!(
        "{SKILLS} skills on: a turn {:.2} ms p50 / {:.2} p95, system block {system_on} characters; \
         all off: {:.2} ms p50, {system_off} characters; a turn with one load_skill {:.2} ms p50",
        ms(on50),
        ms(on95),
        ms(off50),
        ms(load50)
    ));
    rows.push(
        row(
            "18h skills: a turn with 200 skills (scan + list each request)",
            format!("{:.2} ms p50 / {:.2} p95", ms(on50), ms(on95)),
        )
        .aim(
            "within 1.5× of the same turn with every skill off",
            (on50 as f64) < 1.5 * off50 as f64,
        )
        .baseline(
            format!("all off {:.2} ms p50", ms(off50)),
            format!("{:.2}×", on50 as f64 / off50.max(1) as f64),
        ),
    );
    rows.push(
        row(
            "18h skills: the system block with 200 skills",
            format!("{system_on} characters"),
        )
        .aim(
            "the list held to its room (under 6,000 more)",
            system_on < system_off + 6_000,
        )
        .baseline(
            format!("all off {system_off} characters"),
            format!("+{}", system_on.saturating_sub(system_off)),
        ),
    );
    rows.push(
        row(
            "18h skills: a turn that loads one skill",
            format!("{:.2} ms p50", ms(load50)),
        )
        .baseline(
            format!("a plain turn {:.2} ms p50", ms(on50)),
            format!("{:.2}×", load50 as f64 / on50.max(1) as f64),
        ),
    );
    Ok(())
}
