//! Figure 18i: what a chat's tool switches and tool policies cost a turn
//! and save in its request, on real chatds (defaults) and engine-sim at
//! tps=0, every answer one scripted token. chatd reads a chat's switches
//! (`PUT …/builtins {off}`), its own policies and the box's (`PUT
//! …/tools/policies`) afresh from SQLite for each request the chat makes.
//! Two chatds on the one simulator, turns alternating: a chat of a chatd
//! with no switches and no policies, against a chat with `web`, `media` and
//! `subagents` off, 20 policies of its own (a few `never`, so those tools
//! drop out) over 40 of its chatd's box. A plain turn both ways, the fixed
//! part of its request (system block, tools array) from the simulator's
//! recorded requests, a turn whose model calls `list_files` once (a tool
//! the chat sets to `always`), and `GET …/tools` (the page's Tools menu).

use serde_json::Map;

use super::*;

const TURNS: usize = 40;
const QUICK_TURNS: usize = 5;
const GETS: usize = 100;
const QUICK_GETS: usize = 10;
/// The groups the chat switches off.
const OFF: [&str; 3] = ["web", "media", "subagents"];
/// The chat's own policies, and its chatd's box's.
const CHAT_POLICIES: usize = 20;
const BOX_POLICIES: usize = 40;
/// The tool the tool turn calls: `always` in the chat's policies.
const CALLED: &str = "list_files";
/// Set to `never` in the chat's policies: they are not offered.
const NEVER: [&str; 3] = ["delete_file", "move_file", "grep"];

/// `turns` turns of `next`'s script: each turn's time (µs), send to its
/// run's end.
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

/// The fixed part of the chat's last request: the system block in
/// characters, the tools offered and the tools array's bytes.
struct Fixed {
    system: usize,
    tools: Vec<String>,
    bytes: usize,
}

async fn fixed(sim: &Sim, chat: &str) -> anyhow::Result<Fixed> {
    let session = format!("chat-{chat}");
    let requests = sim.requests().await?;
    let last = requests
        .iter()
        .rev()
        .find(|r| r["session_id"] == session)
        .context("a request of the chat")?;
    let body = &last["body"];
    Ok(Fixed {
        system: tandem_tests::harness::system_text(body).chars().count(),
        tools: tandem_tests::harness::offered_tools(body),
        bytes: serde_json::to_string(&body["tools"])?.len(),
    })
}

/// `GET …/tools` of `chat`: its time (µs).
async fn tools_view(client: &Client, chat: &str) -> anyhow::Result<i64> {
    let begun = Instant::now();
    let view = client.get(&format!("/conversations/{chat}/tools")).await?;
    let took = begun.elapsed().as_micros() as i64;
    anyhow::ensure!(view.status == 200, "GET …/tools answered {view:?}");
    Ok(took)
}

fn p50_p90(mut v: Vec<i64>) -> (i64, i64) {
    v.sort_unstable();
    (quantile(&v, 0.50), quantile(&v, 0.90))
}

/// The chat's policies (20) and the box's (40) over chatd's built-in tools
/// `builtins`: the chat sets `CALLED` to always, `NEVER` to never and the
/// rest always and ask in turn; the box asks for every built-in tool (the
/// chat's own win) and fills the rest with MCP tool keys.
fn policies(builtins: &[String]) -> (Map<String, Value>, Map<String, Value>) {
    let mut order: Vec<&str> = vec![CALLED];
    order.extend(NEVER);
    order.extend(
        builtins
            .iter()
            .map(String::as_str)
            .filter(|t| *t != CALLED && !NEVER.contains(t)),
    );
    let mut chat = Map::new();
    for (i, tool) in order.iter().take(CHAT_POLICIES).enumerate() {
        let policy = if *tool == CALLED {
            "always"
        } else if NEVER.contains(tool) {
            "never"
        } else if i % 2 == 0 {
            "always"
        } else {
            "ask"
        };
        chat.insert(tool.to_string(), json!(policy));
    }
    for i in chat.len()..CHAT_POLICIES {
        chat.insert(format!("mcp:chat-{i:02}:tool"), json!("always"));
    }
    let mut boxed = Map::new();
    for tool in builtins.iter().take(BOX_POLICIES) {
        boxed.insert(tool.clone(), json!("ask"));
    }
    for i in boxed.len()..BOX_POLICIES {
        let policy = if i % 2 == 0 { "always" } else { "ask" };
        boxed.insert(format!("mcp:box-{i:02}:tool-{i}"), json!(policy));
    }
    (chat, boxed)
}

pub(crate) async fn figure(quick: bool, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    say("\n## 18i. switches: a turn of a chat with 3 tool groups off and 20 + 40 tool policies against a chat with none");
    let n = if quick { QUICK_TURNS } else { TURNS };
    let gets = if quick { QUICK_GETS } else { GETS };
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    // Two chatds: the box's policies are the whole box's, and the
    // baseline has none.
    let bare = Chatd::start(&sim.url(), &[]).await?;
    let set = Chatd::start(&sim.url(), &[]).await?;
    let (plain, client) = (bare.client(), set.client());
    let base = plain.create_chat_in("auto").await?;
    let with = client.create_chat_in("auto").await?;

    let view = client.get(&format!("/conversations/{with}/tools")).await?;
    anyhow::ensure!(view.status == 200, "GET …/tools answered {view:?}");
    let mut builtins: Vec<String> = view.body["tools"]
        .as_array()
        .context("tools")?
        .iter()
        .filter(|t| t["source"] == "builtin")
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect();
    if !builtins.iter().any(|t| t == "bash") {
        builtins.push("bash".to_string());
    }
    let (chat_policies, box_policies) = policies(&builtins);
    let off = client
        .call(
            reqwest::Method::PUT,
            &format!("/conversations/{with}/builtins"),
            Some(json!({ "off": OFF })),
        )
        .await?;
    anyhow::ensure!(
        off.status == 200 && off.body["off"].as_array().map(Vec::len) == Some(OFF.len()),
        "PUT …/builtins answered {off:?}"
    );
    let put = client
        .call(
            reqwest::Method::PUT,
            &format!("/conversations/{with}/tools/policies"),
            Some(json!({ "policies": chat_policies })),
        )
        .await?;
    anyhow::ensure!(put.status == 200, "PUT …/tools/policies answered {put:?}");
    let put = client
        .call(
            reqwest::Method::PUT,
            "/tools/policies",
            Some(json!({ "policies": box_policies })),
        )
        .await?;
    anyhow::ensure!(put.status == 200, "PUT /tools/policies answered {put:?}");
    let held = client
        .get(&format!("/conversations/{with}/tools/policies"))
        .await?;
    let effective = held.body["effective"].as_object().map_or(0, Map::len);
    let none = plain
        .get(&format!("/conversations/{base}/tools/policies"))
        .await?;
    anyhow::ensure!(
        none.body["effective"]
            .as_object()
            .is_some_and(Map::is_empty),
        "the baseline chat has policies: {:?}",
        none.body
    );

    let one = || vec![json!({"tokens": 1})];
    // Warm both, then alternate so the machine's drift falls on both.
    turns(&plain, &base, 2, &one, &sim).await?;
    turns(&client, &with, 2, &one, &sim).await?;
    let (mut bare_turns, mut set_turns) = (Vec::new(), Vec::new());
    for _ in 0..n {
        bare_turns.extend(turns(&plain, &base, 1, &one, &sim).await?);
        set_turns.extend(turns(&client, &with, 1, &one, &sim).await?);
    }
    let (fixed_bare, fixed_set) = (fixed(&sim, &base).await?, fixed(&sim, &with).await?);
    let dropped: Vec<&str> = fixed_bare
        .tools
        .iter()
        .filter(|t| !fixed_set.tools.contains(t))
        .map(String::as_str)
        .collect();
    anyhow::ensure!(
        fixed_set.tools.iter().all(|t| !NEVER.contains(&t.as_str())),
        "a tool set to never was offered: {:?}",
        fixed_set.tools
    );

    let call = || {
        vec![
            json!({"tool_calls": [{"name": CALLED, "arguments": {"path": "."}}]}),
            json!({"tokens": 1}),
        ]
    };
    let (mut bare_calls, mut set_calls) = (Vec::new(), Vec::new());
    for _ in 0..n {
        bare_calls.extend(turns(&plain, &base, 1, &call, &sim).await?);
        set_calls.extend(turns(&client, &with, 1, &call, &sim).await?);
    }

    tools_view(&plain, &base).await?;
    tools_view(&client, &with).await?;
    let (mut bare_views, mut set_views) = (Vec::new(), Vec::new());
    for _ in 0..gets {
        bare_views.push(tools_view(&plain, &base).await?);
        set_views.push(tools_view(&client, &with).await?);
    }

    let ((b50, b90), (s50, s90)) = (p50_p90(bare_turns), p50_p90(set_turns));
    let ((bc50, _), (sc50, sc90)) = (p50_p90(bare_calls), p50_p90(set_calls));
    let ((bv50, _), (sv50, sv90)) = (p50_p90(bare_views), p50_p90(set_views));
    let ms = |us: i64| us as f64 / 1000.0;
    let ratio = |a: i64, b: i64| a as f64 / b.max(1) as f64;
    say(format!(
        "none: a turn {:.2} ms p50 / {:.2} p90, {} tools in {} bytes, system block {} characters",
        ms(b50),
        ms(b90),
        fixed_bare.tools.len(),
        fixed_bare.bytes,
        fixed_bare.system
    ));
    say(format!(
        "{} off, {CHAT_POLICIES} chat + {BOX_POLICIES} box policies ({effective} in effect): \
         a turn {:.2} ms p50 / {:.2} p90 ({:.2}×), {} tools in {} bytes ({:.2}×), \
         system block {} characters; not offered: {}",
        OFF.join(", "),
        ms(s50),
        ms(s90),
        ratio(s50, b50),
        fixed_set.tools.len(),
        fixed_set.bytes,
        fixed_set.bytes as f64 / fixed_bare.bytes.max(1) as f64,
        fixed_set.system,
        dropped.join(", ")
    ));
    say(format!(
        "a turn calling {CALLED} once: none {:.2} ms p50, with {:.2} ms p50 / {:.2} p90 ({:.2}×); \
         GET …/tools: none {:.2} ms p50, with {:.2} ms p50 / {:.2} p90 ({:.2}×)",
        ms(bc50),
        ms(sc50),
        ms(sc90),
        ratio(sc50, bc50),
        ms(bv50),
        ms(sv50),
        ms(sv90),
        ratio(sv50, bv50)
    ));
    rows.push(
        row(
            "18i switches: a turn with 3 groups off, 20 chat + 40 box policies (read each request)",
            format!("{:.2} ms p50 / {:.2} p90", ms(s50), ms(s90)),
        )
        .aim(
            "within 1.2× of the same turn with none",
            (s50 as f64) < 1.2 * b50 as f64,
        )
        .baseline(
            format!("none {:.2} ms p50 / {:.2} p90", ms(b50), ms(b90)),
            format!("{:.2}×", ratio(s50, b50)),
        ),
    );
    rows.push(
        row(
            "18i switches: the request's tools array",
            format!("{} tools, {} bytes", fixed_set.tools.len(), fixed_set.bytes),
        )
        .aim("smaller than with none", fixed_set.bytes < fixed_bare.bytes)
        .baseline(
            format!(
                "none {} tools, {} bytes",
                fixed_bare.tools.len(),
                fixed_bare.bytes
            ),
            format!(
                "{:.2}×",
                fixed_set.bytes as f64 / fixed_bare.bytes.max(1) as f64
            ),
        ),
    );
    rows.push(
        row(
            "18i switches: the request's system block",
            format!("{} characters", fixed_set.system),
        )
        .baseline(
            format!("none {} characters", fixed_bare.system),
            format!("{:+}", fixed_set.system as i64 - fixed_bare.system as i64),
        ),
    );
    rows.push(
        row(
            "18i switches: a turn calling list_files (set always)",
            format!("{:.2} ms p50 / {:.2} p90", ms(sc50), ms(sc90)),
        )
        .baseline(
            format!("none {:.2} ms p50", ms(bc50)),
            format!("{:.2}×", ratio(sc50, bc50)),
        ),
    );
    rows.push(
        row(
            "18i switches: GET …/tools (the Tools menu)",
            format!("{:.2} ms p50 / {:.2} p90", ms(sv50), ms(sv90)),
        )
        .baseline(
            format!("none {:.2} ms p50", ms(bv50)),
            format!("{:.2}×", ratio(sv50, bv50)),
        ),
    );
    Ok(())
}
