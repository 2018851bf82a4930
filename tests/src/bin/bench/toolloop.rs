//! An agent run of N tool steps, each a `write_file` of ~4 KB and a
//! `read_file` of the same file, scripted on the simulator (`/sim/faults`)
//! at tps=0. chatd's overhead per step is the simulator's `at_us` of request
//! i+1 minus its `done_us` of request i; the baseline is the same requests
//! posted by the bench itself. The bytes: every request as chatd sent it
//! (with stubs) and as it would be with the scripted arguments put back
//! (without stubs).

use super::*;
use std::collections::HashMap;

/// One scripted step: the two calls' names and exact argument texts.
struct Step {
    calls: Vec<(&'static str, String)>,
}

/// ~4 KB of text that differs from step to step (64 lines of 64 bytes).
fn content(step: usize) -> String {
    const WORDS: [&str; 16] = [
        "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
        "juliet", "kilo", "lima", "mike", "november", "oscar", "papa",
    ];
    let mut rng = (step as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut text = String::with_capacity(4_096);
    for line in 0..64 {
        let mut l = format!("step {step:03} line {line:02}:");
        while l.len() < 63 {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            l.push(' ');
            l.push_str(WORDS[(rng >> 60) as usize]);
        }
        l.truncate(63);
        text.push_str(&l);
        text.push('\n');
    }
    text
}

fn script(steps: usize) -> Vec<Step> {
    const DIRS: [&str; 4] = ["notes", "src/parts", "docs/drafts", "data"];
    const EXTS: [&str; 4] = ["md", "rs", "txt", "csv"];
    (0..steps)
        .map(|k| {
            let path = format!("{}/part-{k:03}.{}", DIRS[k % 4], EXTS[(k / 4) % 4]);
            let write = json!({"path": path, "content": content(k)}).to_string();
            let read = json!({"path": path}).to_string();
            Step {
                calls: vec![("write_file", write), ("read_file", read)],
            }
        })
        .collect()
}

/// The `/sim/faults` queue: one answer of tool calls per step, then text.
fn faults(script: &[Step]) -> Value {
    let mut next: Vec<Value> = script
        .iter()
        .map(|s| {
            let calls: Vec<Value> = s
                .calls
                .iter()
                .map(|(name, args)| json!({"name": name, "arguments": args}))
                .collect();
            json!({"tool_calls": calls})
        })
        .collect();
    next.push(json!({"tokens": 5}));
    Value::Array(next)
}

async fn sim_json(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: String,
) -> anyhow::Result<Value> {
    let response = http
        .request(method, &url)
        .timeout(Duration::from_secs(60))
        .send()
        .await?;
    anyhow::ensure!(
        response.status().is_success(),
        "{url} answered {}",
        response.status()
    );
    Ok(response.json().await?)
}

/// The chat requests the sim logged, in order, each checked to have an answer.
async fn logged(http: &reqwest::Client, sim: &Sim, want: usize) -> anyhow::Result<Vec<Value>> {
    let log = sim_json(
        http,
        reqwest::Method::GET,
        format!("{}/sim/requests", sim.url()),
    )
    .await?;
    let log = log.as_array().cloned().unwrap_or_default();
    anyhow::ensure!(
        log.len() == want,
        "the sim logged {} chat requests, expected {want}",
        log.len()
    );
    for (i, entry) in log.iter().enumerate() {
        anyhow::ensure!(
            entry["at_us"].is_u64() && entry["done_us"].is_u64(),
            "request {i} has no at_us/done_us: {}",
            entry["at_us"]
        );
    }
    Ok(log)
}

/// Per step: request i+1's arrival minus the end of answer i (µs).
fn gaps(log: &[Value]) -> Vec<i64> {
    log.windows(2)
        .map(|w| w[1]["at_us"].as_i64().unwrap_or(0) - w[0]["done_us"].as_i64().unwrap_or(0))
        .collect()
}

async fn clear_log(http: &reqwest::Client, sim: &Sim) -> anyhow::Result<()> {
    sim_json(
        http,
        reqwest::Method::DELETE,
        format!("{}/sim/requests", sim.url()),
    )
    .await?;
    Ok(())
}

async fn tokenize_count(http: &reqwest::Client, sim: &Sim) -> anyhow::Result<u64> {
    let stats = sim_json(
        http,
        reqwest::Method::GET,
        format!("{}/sim/stats", sim.url()),
    )
    .await?;
    Ok(stats["tokenize_requests"].as_u64().unwrap_or(0))
}

/// A chat in auto mode (writes run without a card), its workspace made.
async fn auto_chat(client: &Client, chatd: &Chatd) -> anyhow::Result<String> {
    let made = client
        .post("/conversations", json!({"permission_mode": "auto"}))
        .await?;
    anyhow::ensure!(made.status == 201, "create answered {made:?}");
    let id = made.body["id"].as_str().context("chat id")?.to_string();
    std::fs::create_dir_all(chatd.data_dir().join("workspaces").join(&id))?;
    Ok(id)
}

/// Sends `text` and waits for the run to end; it must end `done`. While
/// the engine has not finished `answers` more answers, the bench asks the
/// engine (`/sim/stats`), not chatd: polling chatd's snapshot of a chat
/// of hundreds of KiB would take CPU from the loop it measures.
async fn run_done(
    client: &Client,
    sim: &Sim,
    chat: &str,
    text: &str,
    answers: u64,
    bound: Duration,
) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let stats = format!("{}/sim/stats", sim.url());
    let completed = |v: Value| v["completed"].as_u64().unwrap_or(0);
    let before = completed(sim_json(&http, reqwest::Method::GET, stats.clone()).await?);
    let sent = client.send(chat, text).await?;
    let run = sent["run_id"].as_str().context("run_id")?;
    tandem_tests::harness::wait_until("the engine's answers", bound, || async {
        let now = completed(
            sim_json(&http, reqwest::Method::GET, stats.clone())
                .await
                .ok()?,
        );
        (now >= before + answers).then_some(())
    })
    .await?;
    let record = client
        .wait_run(
            chat,
            run,
            &["done", "failed", "interrupted", "stopped", "paused"],
            bound,
        )
        .await?;
    anyhow::ensure!(record["status"] == "done", "the run ended: {record}");
    Ok(())
}

/// The baseline: the bench posts `bodies` to the sim one after the other,
/// each as soon as the previous answer's stream has ended.
async fn post_all(
    http: &reqwest::Client,
    sim: &Sim,
    bodies: &[bytes::Bytes],
) -> anyhow::Result<()> {
    let url = format!("{}/v1/chat/completions", sim.url());
    for body in bodies {
        let mut response = http
            .post(&url)
            .header("content-type", "application/json")
            .body(body.clone())
            .timeout(Duration::from_secs(60))
            .send()
            .await?;
        anyhow::ensure!(
            response.status().is_success(),
            "the sim answered {}",
            response.status()
        );
        while response.chunk().await?.is_some() {}
    }
    Ok(())
}

fn longest_common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// `[m0,m1,...` (no closing bracket): the bytes a request's `messages`
/// start with, so a request that only appends has it as a prefix.
fn open_array(messages: &[Vec<u8>]) -> Vec<u8> {
    let mut out = vec![b'['];
    for (i, m) in messages.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(m);
    }
    out
}

/// Puts the scripted arguments back into every tool call (by call id).
fn unstub(messages: &mut [Value], originals: &HashMap<String, String>) -> usize {
    let mut replaced = 0;
    for m in messages.iter_mut() {
        let Some(calls) = m.get_mut("tool_calls").and_then(Value::as_array_mut) else {
            continue;
        };
        for call in calls {
            let Some(original) = call["id"].as_str().and_then(|id| originals.get(id)) else {
                continue;
            };
            if call["function"]["arguments"].as_str() != Some(original.as_str()) {
                call["function"]["arguments"] = json!(original);
                replaced += 1;
            }
        }
    }
    replaced
}

/// The byte figures of one variant of the run's requests.
#[derive(Default)]
struct ByteFigures {
    /// Body size of each request.
    body: Vec<usize>,
    /// Per request after the first: bytes standing where the engine's
    /// previous context (the previous request and the answer it
    /// generated) stood that differ from it.
    changed: Vec<i64>,
    /// Per request after the first: bytes of that previous context the
    /// request does not repeat as its prefix (what a prefix cache loses).
    lost: Vec<i64>,
    /// Per request after the first: bytes after the common prefix (what
    /// the engine must prefill: the changed bytes and the new messages).
    fresh: Vec<i64>,
    /// Requests whose messages extend the previous request's messages.
    extends_previous: usize,
}

/// `bodies`: the requests of the run in order; `originals`: call id →
/// the arguments the model generated.
fn measure(bodies: &[Value], originals: &HashMap<String, String>) -> ByteFigures {
    let mut out = ByteFigures::default();
    let ser = |v: &Value| serde_json::to_vec(v).unwrap_or_default();
    let mut prev: Option<Vec<Vec<u8>>> = None;
    for body in bodies {
        out.body.push(ser(body).len());
        let messages: Vec<Value> = body["messages"].as_array().cloned().unwrap_or_default();
        let each: Vec<Vec<u8>> = messages.iter().map(ser).collect();
        let whole = {
            let mut w = open_array(&each);
            w.push(b']');
            w
        };
        if let Some(prev) = prev.take() {
            let before = open_array(&prev);
            if longest_common_prefix(&whole, &before) == before.len() {
                out.extends_previous += 1;
            }
            // The engine's context after the previous request: it and the
            // answer as generated (the scripted arguments).
            let np = prev.len();
            let mut context = prev.clone();
            let mut span = np;
            if let Some(answer) = messages.get(np).filter(|m| m["role"] == "assistant") {
                let mut answer = vec![answer.clone()];
                unstub(&mut answer, originals);
                context.push(ser(&answer[0]));
                span = np + 1;
            }
            let context = open_array(&context);
            let same_span = open_array(&each[..span.min(each.len())]).len();
            let common = longest_common_prefix(&whole, &context);
            out.changed.push(same_span.saturating_sub(common) as i64);
            out.lost.push(context.len().saturating_sub(common) as i64);
            out.fresh.push((whole.len() - common) as i64);
        }
        prev = Some(each);
    }
    out
}

fn mean(v: &[i64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<i64>() as f64 / v.len() as f64
    }
}

fn med(v: &[i64]) -> i64 {
    let mut v = v.to_vec();
    v.sort_unstable();
    quantile(&v, 0.5)
}

fn size(bytes: f64) -> String {
    if bytes >= 1024.0 * 1024.0 {
        format!("{:.1} MiB", bytes / 1024.0 / 1024.0)
    } else if bytes >= 1024.0 {
        format!("{:.1} KiB", bytes / 1024.0)
    } else {
        format!("{bytes:.0} B")
    }
}

pub async fn figure(sizes: &Sizes, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let steps = sizes.tool_steps;
    say(format!(
        "\n## 6. agent tool loop ({steps} steps: write_file of ~4 KB, then read_file of it; sim at tps=0)"
    ));
    // A window no request of the run comes near: nothing is compacted.
    let sim = Sim::start(&["--tokens-per-second", "0", "--context-window", "4000000"])?;
    let max_steps = (steps + 20).min(1000).to_string();
    let chatd = Chatd::start(
        &sim.url(),
        &[
            ("QSE_CHAT_MAX_STEPS", max_steps.as_str()),
            ("QSE_CHAT_CONTEXT_WINDOW", "4000000"),
        ],
    )
    .await?;
    let client = chatd.client();
    let http = reqwest::Client::new();
    let bound = Duration::from_secs(60 + steps as u64);

    // Warm-up: a short tool run (engine connections, code paths).
    let warm = auto_chat(&client, &chatd).await?;
    sim.faults(faults(&script(2))).await?;
    run_done(&client, &sim, &warm, "warm-up", 3, bound).await?;
    // The baseline's connection too (no fault queued: a plain answer).
    post_all(
        &http,
        &sim,
        &[bytes::Bytes::from_static(
            br#"{"model":"sim-small","stream":true,"messages":[{"role":"user","content":"[sim tokens=1]"}]}"#,
        )],
    )
    .await?;
    clear_log(&http, &sim).await?;

    // The run through chatd.
    let script = script(steps);
    let chat = auto_chat(&client, &chatd).await?;
    let tokenized_before = tokenize_count(&http, &sim).await?;
    let pid = chatd.pid().context("chatd pid")?;
    let sim_pid = child_pid("engine-sim");
    let (c0, s0) = (cpu_secs(pid), sim_pid.map(cpu_secs).unwrap_or(0.0));
    sim.faults(faults(&script)).await?;
    let began = Instant::now();
    run_done(
        &client,
        &sim,
        &chat,
        &format!("write and read back {steps} files"),
        steps as u64 + 1,
        bound,
    )
    .await?;
    let wall = began.elapsed();
    let (chatd_cpu, sim_cpu) = (
        cpu_secs(pid) - c0,
        sim_pid.map(cpu_secs).unwrap_or(0.0) - s0,
    );
    let tokenized = tokenize_count(&http, &sim).await? - tokenized_before;
    let log = logged(&http, &sim, steps + 1).await?;
    let written = (0..steps)
        .filter(|k| {
            let path = serde_json::from_str::<Value>(&script[*k].calls[1].1)
                .ok()
                .and_then(|v| v["path"].as_str().map(str::to_string))
                .unwrap_or_default();
            chatd
                .data_dir()
                .join("workspaces")
                .join(&chat)
                .join(path)
                .is_file()
        })
        .count();
    anyhow::ensure!(
        written == steps,
        "{written} of {steps} files are in the workspace"
    );
    let through = gaps(&log);

    // The baseline: the same requests, posted by the bench.
    let bodies: Vec<Value> = log.iter().map(|e| e["body"].clone()).collect();
    let raw: Vec<bytes::Bytes> = bodies
        .iter()
        .map(|b| bytes::Bytes::from(serde_json::to_vec(b).unwrap_or_default()))
        .collect();
    let same_bytes = raw
        .iter()
        .zip(&log)
        .filter(|(r, e)| e["body_bytes"].as_u64() == Some(r.len() as u64))
        .count();
    clear_log(&http, &sim).await?;
    sim.faults(faults(&script)).await?;
    post_all(&http, &sim, &raw).await?;
    let floor = gaps(&logged(&http, &sim, steps + 1).await?);

    let chatd_d = dist(through.clone());
    let floor_d = dist(floor);
    let tenth = (steps / 10).max(1);
    let early = dist(through[..tenth].to_vec());
    let late = dist(through[through.len() - tenth..].to_vec());
    say(format!(
        "through chatd: {} requests in {:.2} s; per step median {} p99 {} max {} \
         (first {tenth} steps median {}, last {tenth} median {}); CPU chatd {chatd_cpu:.2} s, \
         engine-sim {sim_cpu:.2} s; chatd also sent {tokenized} /v1/tokenize requests",
        log.len(),
        wall.as_secs_f64(),
        ms(chatd_d.p50),
        ms(chatd_d.p99),
        ms(chatd_d.max),
        ms(early.p50),
        ms(late.p50)
    ));
    say(format!(
        "client floor (the bench posts the same {} bodies, {same_bytes} of them byte for byte \
         chatd's size): per step median {} p99 {} max {}",
        raw.len(),
        ms(floor_d.p50),
        ms(floor_d.p99),
        ms(floor_d.max)
    ));

    // Bytes: with stubs as sent; without, the scripted arguments put back.
    let mut originals = HashMap::new();
    let last = bodies.last().context("no request")?;
    let answers: Vec<&Value> = last["messages"]
        .as_array()
        .context("messages")?
        .iter()
        .filter(|m| m["role"] == "assistant" && m["tool_calls"].is_array())
        .collect();
    anyhow::ensure!(
        answers.len() == steps,
        "the last request holds {} answers with tool calls, expected {steps}",
        answers.len()
    );
    for (step, answer) in script.iter().zip(answers) {
        let calls = answer["tool_calls"].as_array().context("tool_calls")?;
        anyhow::ensure!(calls.len() == step.calls.len(), "calls per answer");
        for (call, (name, args)) in calls.iter().zip(&step.calls) {
            anyhow::ensure!(call["function"]["name"] == *name, "call order");
            originals.insert(
                call["id"].as_str().context("call id")?.to_string(),
                args.clone(),
            );
        }
    }
    let mut unstubbed = bodies.clone();
    let mut stubbed_calls = 0;
    for body in &mut unstubbed {
        if let Some(m) = body["messages"].as_array_mut() {
            // The last request's count is the one that matters: it holds every call.
            stubbed_calls = unstub(m, &originals);
        }
    }
    let with = measure(&bodies, &originals);
    let without = measure(&unstubbed, &originals);
    let line = |name: &str, b: &ByteFigures| {
        let total: usize = b.body.iter().sum();
        format!(
            "{name}: total {} over {} requests, mean {} per request (last {}); changed per \
             step mean {:.0} B median {} B; engine context lost mean {:.0} B; after the common \
             prefix mean {}; {} of {} requests extend the previous request's messages",
            size(total as f64),
            b.body.len(),
            size(total as f64 / b.body.len().max(1) as f64),
            size(b.body.last().copied().unwrap_or(0) as f64),
            mean(&b.changed),
            med(&b.changed),
            mean(&b.lost),
            size(mean(&b.fresh)),
            b.extends_previous,
            b.body.len().saturating_sub(1)
        )
    };
    say(format!(
        "stubbed calls in the last request: {stubbed_calls} (of {} calls). \"changed\": bytes of a \
         request, where the previous request and the answer generated for it stood, that differ \
         from them (0: a pure extension); \"engine context lost\": bytes of that context a prefix \
         cache cannot reuse; \"after the common prefix\": what the engine must prefill",
        steps * 2
    ));
    say(line("with stubs (as chatd sent them)", &with));
    say(line(
        "without stubs (scripted arguments put back)",
        &without,
    ));

    let (total_with, total_without) = (
        with.body.iter().sum::<usize>() as f64,
        without.body.iter().sum::<usize>() as f64,
    );
    let n = with.body.len().max(1) as f64;
    rows.push(
        row(
            format!("6. tool-loop overhead per step ({steps} steps: write 4 KB + read it)"),
            format!("median {} / p99 {}", ms(chatd_d.p50), ms(chatd_d.p99)),
        )
        .baseline(
            format!(
                "client floor (same requests posted straight to the engine) median {} / p99 {}",
                ms(floor_d.p50),
                ms(floor_d.p99)
            ),
            format!(
                "×{:.1} median, ×{:.1} p99",
                chatd_d.p50 as f64 / floor_d.p50.max(1) as f64,
                chatd_d.p99 as f64 / floor_d.p99.max(1) as f64
            ),
        ),
    );
    rows.push(
        row(
            format!(
                "6. request bytes, with stubs ({} requests)",
                with.body.len()
            ),
            format!(
                "total {}, mean {} per request",
                size(total_with),
                size(total_with / n)
            ),
        )
        .baseline(
            format!(
                "without stubs: total {}, mean {} per request",
                size(total_without),
                size(total_without / n)
            ),
            format!("×{:.2}", total_with / total_without.max(1.0)),
        ),
    );
    let changed_ratio = if mean(&without.changed) > 0.0 {
        format!("×{:.2}", mean(&with.changed) / mean(&without.changed))
    } else {
        "— (none without stubs)".to_string()
    };
    rows.push(
        row(
            "6. changed bytes per step, with stubs",
            format!(
                "mean {:.0} B / median {} B",
                mean(&with.changed),
                med(&with.changed)
            ),
        )
        .baseline(
            format!(
                "without stubs: mean {:.0} B / median {} B",
                mean(&without.changed),
                med(&without.changed)
            ),
            changed_ratio,
        ),
    );
    Ok(())
}
