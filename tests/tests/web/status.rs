//! The page's status line, context meter and failure banner (README "The
//! chat page"; docs/api.md "When a reply fails") in headless Chromium
//! against the real chatd with its front and the engine simulator, at
//! 1280 px and 390 px: the status words in order through a run that reads,
//! edits (after a card) and searches, then pauses at the step limit; the
//! meter's bar, ticks, `≈` while streaming and its details; one banner per
//! failure cause made by engine-sim faults, Retry once the fault is lifted,
//! the banner again after a reload and gone after ✕. Every wait is a
//! bounded poll.

use std::time::Duration;

use anyhow::{ensure, Context};
use serde_json::{json, Value};
use tandem_tests::browser::{self, Browser, Chromedriver, Viewport, DESKTOP, PHONE, WAIT};
use tandem_tests::harness::{Chatd, Client, Sim};

use crate::files_page::LONG;

/// One test's processes, chromedriver first so it goes first on drop.
struct Status {
    driver: Chromedriver,
    chatd: Chatd,
    sim: Sim,
    client: Client,
}

impl Status {
    async fn start(env: &[(&str, &str)]) -> anyhow::Result<Status> {
        let sim = Sim::start(&["--tokens-per-second", "0"])?;
        let chatd = Chatd::start_with_front(&sim.url(), env, None).await?;
        let client = chatd.client();
        let driver = Chromedriver::start().await?;
        Ok(Status {
            driver,
            chatd,
            sim,
            client,
        })
    }

    async fn open(&self, viewport: Viewport, chat: &str) -> anyhow::Result<Browser> {
        let front = self.chatd.front_url();
        Browser::open_chat(&self.driver, viewport, &front, Some(chat), "#files-toggle").await
    }

    /// Empties engine-sim's queue of faults: the engine is well again.
    async fn lift_faults(&self) -> anyhow::Result<()> {
        let answer = reqwest::Client::new()
            .delete(format!("{}/sim/faults", self.sim.url()))
            .send()
            .await?;
        ensure!(answer.status().is_success(), "sim: {}", answer.status());
        Ok(())
    }
}

/// Records every text the status line's word takes from now on, in order
/// (`window.words`): the text nodes put in, so two changes in one task are
/// both seen.
const WATCH_WORDS: &str = "window.words = [];
    const state = document.querySelector('#status .state');
    new MutationObserver((records) => { for (const r of records) for (const n of r.addedNodes)
        if (n.nodeType === 3) window.words.push(n.data); }).observe(state, {childList: true});
    return true;";

/// The words seen, a repeat of the one before left out.
async fn words(b: &Browser) -> anyhow::Result<Vec<String>> {
    let v = b.eval("return window.words;").await?;
    let mut seen: Vec<String> = serde_json::from_value(v)?;
    seen.dedup();
    Ok(seen)
}

/// A word looked for: its name, and the test a shown word passes.
type Wanted<'a> = (&'a str, &'a dyn Fn(&str) -> bool);

/// Whether `want` appears in `seen` in that order.
fn in_order(seen: &[String], want: &[Wanted]) -> Result<(), String> {
    let mut at = 0;
    for (name, test) in want {
        match seen[at..].iter().position(|w| test(w)) {
            Some(i) => at += i + 1,
            None => return Err(format!("{name} not seen after {:?}", &seen[..at])),
        }
    }
    Ok(())
}

/// The page's way of writing a count of tokens: `12.3k` from 1,000 on.
fn shown_tokens(n: u64) -> String {
    if n >= 1000 {
        format!("{:.1}k", n as f64 / 1000.0)
    } else {
        n.to_string()
    }
}

/// The meter's details, by figure: `{"in": "1234", "ttft": "0.31 s", …}`.
async fn details(b: &Browser) -> anyhow::Result<Value> {
    b.eval(
        "const o = {};
         for (const r of document.querySelectorAll('#meter-details .detail-row'))
             o[r.dataset.figure] = [r.querySelector('dt').textContent, r.querySelector('dd').textContent];
         return o;",
    )
    .await
}

/// A run that reads a file, edits another after its card is answered,
/// searches, then answers at the step limit: the status line says each in
/// order and ends "Paused · after 4 steps". The meter shows its bar with
/// ticks at 80 % and 90 % and the tokens left; the next answer streams
/// with `≈` figures; the details (a button; Esc closes it) give tokens in
/// and out as chatd counted them, the time to first token, the prompt time
/// and speed of the last request, and the average of the chat's requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_words_and_the_meter() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let t = Status::start(&[("QSE_CHAT_MAX_STEPS", "4")]).await?;
    for viewport in [DESKTOP, PHONE] {
        let chat = t.client.create_chat_in("ask").await?;
        let work = t.chatd.data_dir().join("workspaces").join(&chat);
        std::fs::create_dir_all(&work)?;
        std::fs::write(work.join("notes.md"), "# Notes\nTODO: greet\n")?;
        std::fs::write(work.join("app.py"), "print('hi')\n")?;
        t.sim
            .faults(json!([
                {"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.md"}}]},
                {"tool_calls": [{"name": "edit_file", "arguments":
                    {"path": "app.py", "old_string": "hi", "new_string": "hello"}}]},
                {"tool_calls": [{"name": "grep", "arguments": {"pattern": "TODO"}}]},
                {"reasoning": 3, "tokens": 6, "first_token_ms": 300, "tps": 40},
            ]))
            .await?;
        let b = t.open(viewport, &chat).await?;
        b.eval(WATCH_WORDS).await?;
        b.type_into("#composer", "Read my notes and fix app.py")
            .await?;
        b.click("#send").await?;
        // The edit asks first (ask mode): the line waits for the person.
        b.wait_text("#status .state", |s| s == "Waiting for you", LONG)
            .await?;
        b.screenshot(&format!("status-waiting-{}", viewport.width))
            .await?;
        b.click(".consent button[data-decision='once']").await?;
        b.wait_text("#status .state", |s| s == "Paused", LONG)
            .await?;
        let detail = b.text_content("#status .detail").await?;
        assert_eq!(detail, "after 4 steps", "the paused line names its steps");
        let seen = words(&b).await?;
        let is = |want: &'static str| move |w: &str| w == want;
        in_order(
            &seen,
            &[
                ("Thinking", &is("Thinking")),
                ("Reading notes.md", &is("Reading notes.md")),
                ("Waiting for you", &is("Waiting for you")),
                ("Editing app.py", &is("Editing app.py")),
                ("Searching for \"TODO\"", &|w: &str| {
                    w.starts_with("Searching for \"TODO\"")
                }),
                ("Thinking again", &is("Thinking")),
                ("Answering", &is("Answering")),
                ("Paused", &is("Paused")),
            ],
        )
        .map_err(|e| anyhow::anyhow!("{e}; the words: {seen:?}"))?;
        assert_eq!(
            std::fs::read_to_string(work.join("app.py"))?,
            "print('hello')\n"
        );

        // The meter: a bar with its two ticks, the tokens left.
        let bar = b
            .wait_js(
                "the meter's bar",
                "const bar = document.querySelector('#meter-bar');
                 if (!bar || bar.hidden || !bar.getClientRects().length) return null;
                 const box = bar.getBoundingClientRect();
                 const at = (c) => (bar.querySelector(c).getBoundingClientRect().left - box.left) / box.width;
                 return {t80: at('.t80'), t90: at('.t90'),
                         left: document.querySelector('#tokens-left').textContent,
                         percent: document.querySelector('#meter-percent').textContent};",
                WAIT,
            )
            .await?;
        let tick = |k: &str| bar[k].as_f64().unwrap_or(0.0);
        ensure!(
            (tick("t80") - 0.8).abs() < 0.03 && (tick("t90") - 0.9).abs() < 0.03,
            "ticks at 80 % and 90 %: {bar}"
        );
        let left = bar["left"].as_str().unwrap_or("");
        ensure!(left.ends_with(" left") && !left.contains('≈'), "{bar}");
        let snapshot = t.client.snapshot(&chat).await?;
        let usage = snapshot["runs"]
            .as_array()
            .and_then(|r| r.last())
            .map(|r| r["usage"].clone())
            .context("the run's usage")?;
        let used = usage["used"].as_u64().context("used")?;
        let out = usage["completion"].as_u64().context("completion")?;
        let limit = usage["limit"].as_u64().context("limit")?;
        let meter = b.text_content("#context-meter").await?;
        assert_eq!(
            meter,
            format!("{} / {} tokens", shown_tokens(used), shown_tokens(limit)),
            "the meter's figures are chatd's"
        );

        // The details: a button, figures as chatd and the page measured them.
        b.click("#meter").await?;
        b.wait_visible("#meter-details", WAIT).await?;
        let figures = details(&b).await?;
        let figure = |k: &str| figures[k][1].as_str().unwrap_or("").to_string();
        assert_eq!(figure("in"), (used - out).to_string(), "{figures}");
        assert_eq!(figure("out"), out.to_string(), "{figures}");
        assert_eq!(figure("prompt"), "300 ms", "{figures}");
        ensure!(figure("speed").ends_with("tok/s"), "{figures}");
        let ttft = figure("ttft");
        let ttft_s: f64 = match ttft.strip_suffix(" ms") {
            Some(ms) => ms.parse::<f64>()? / 1000.0,
            None => ttft.strip_suffix(" s").context("ttft")?.parse()?,
        };
        // The page times it from the run.started it saw to its first delta:
        // both come over the stream, so delivery jitter on a loaded box can
        // take some tens of ms off the sim's 300 ms (CI saw 235 ms).
        ensure!(
            (0.1..10.0).contains(&ttft_s),
            "the first token came after the sim's 300 ms, less the stream's jitter: {figures}"
        );
        ensure!(
            figures["average-head"][0]
                .as_str()
                .is_some_and(|h| h == "Average of the last 4 requests"),
            "{figures}"
        );
        assert_eq!(figure("average-prompt"), "300 ms", "{figures}");
        b.screenshot(&format!("meter-details-{}", viewport.width))
            .await?;
        let focused = b
            .eval("return document.activeElement && document.activeElement.id;")
            .await?;
        assert_eq!(focused, json!("meter-close"), "the details take the focus");
        b.client()
            .active_element()
            .await?
            .send_keys("\u{e00c}")
            .await?; // Escape
        b.wait_hidden("#meter-details", WAIT).await?;
        let focused = b
            .eval("return document.activeElement && document.activeElement.id;")
            .await?;
        assert_eq!(focused, json!("meter"), "Esc gives the focus back");

        // The next answer streams: its figures are estimates until its usage.
        b.type_into("#composer", "Go on [sim tokens=160 tps=40]")
            .await?;
        b.click("#send").await?;
        let streaming = b
            .wait_js(
                "the meter's estimate",
                "const t = document.querySelector('#meter-percent').textContent + ' '
                     + document.querySelector('#context-meter').textContent + ' '
                     + document.querySelector('#tokens-left').textContent;
                 return t.includes('≈') ? t : null;",
                LONG,
            )
            .await?;
        ensure!(
            streaming.as_str().is_some_and(|s| s.contains("left")),
            "{streaming}"
        );
        b.screenshot(&format!("meter-streaming-{}", viewport.width))
            .await?;
        b.wait_text("#status .state", |s| s == "Ready", LONG)
            .await?;
        b.wait_js(
            "exact figures again",
            "return !document.querySelector('#meter').textContent.includes('≈');",
            WAIT,
        )
        .await?;
        b.close().await?;
    }
    Ok(())
}

/// A failure and what the banner must say about it.
struct Case {
    cause: &'static str,
    /// What the engine does: faults queued, or refusing for a while.
    faults: Value,
    refuse_s: Option<f64>,
    state: &'static str,
    says: &'static str,
    todo: &'static str,
}

fn cases() -> Vec<Case> {
    let times = |fault: Value, n: usize| Value::Array(vec![fault; n]);
    vec![
        Case {
            cause: "model_not_found",
            faults: json!([{"status": 404, "message": "The model `sim-big` does not exist."}]),
            refuse_s: None,
            state: "Failed",
            says: "The engine does not serve this chat's model.",
            todo: "Pick another model",
        },
        Case {
            cause: "over_context",
            faults: times(
                json!({"status": 400, "message": "the request exceeds the available context size"}),
                3,
            ),
            refuse_s: None,
            state: "Failed",
            says: "The chat is longer than the model's context window, even compacted.",
            todo: "Compact the chat or start a new one",
        },
        Case {
            cause: "engine_memory",
            faults: times(
                json!({"status": 503, "retry_after": "1", "message": "failed to allocate KV cache at http://10.1.2.3:8000"}),
                4,
            ),
            refuse_s: None,
            state: "Failed",
            says: "The engine ran out of memory.",
            todo: "smaller model",
        },
        Case {
            cause: "timeout",
            faults: times(
                json!({"status": 504, "message": "upstream request timed out"}),
                12,
            ),
            refuse_s: None,
            state: "Interrupted",
            says: "The engine took too long to answer.",
            todo: "Retry",
        },
        Case {
            cause: "engine_busy",
            faults: times(
                json!({"status": 429, "retry_after": "1", "message": "too many requests"}),
                3,
            ),
            refuse_s: None,
            state: "Failed",
            says: "The engine was busy.",
            todo: "Retry in a moment",
        },
        Case {
            cause: "refused",
            faults: json!([{"status": 422, "message": "temperature must be at most 2"}]),
            refuse_s: None,
            state: "Failed",
            says: "The engine refused the request.",
            todo: "a setting of this chat",
        },
        Case {
            cause: "engine_unreachable",
            faults: json!([]),
            refuse_s: Some(4.0),
            state: "Interrupted",
            says: "The engine could not be reached.",
            todo: "Check that the engine runs",
        },
    ]
}

/// Waits until the chat's last run ended well (after a Retry).
async fn wait_done(client: &Client, chat: &str) -> anyhow::Result<()> {
    tandem_tests::harness::wait_until("the retried run done", LONG, || async {
        let snapshot = client.snapshot(chat).await.ok()?;
        let last = snapshot["runs"].as_array()?.last()?.clone();
        (last["status"] == "done").then_some(())
    })
    .await
}

/// The banner's words: (cause, what happened, what to do, technical detail).
async fn banner(b: &Browser) -> anyhow::Result<(String, String, String, String)> {
    b.wait_visible("#failure", LONG).await?;
    let v = b
        .eval(
            "const f = document.querySelector('#failure');
             const t = (c) => { const e = f.querySelector(c); return e ? e.textContent : ''; };
             return [f.dataset.cause, t('.failure-title') + ' | ' + t('.failure-cause'), t('.failure-todo'),
                     t('.failure-detail pre')];",
        )
        .await?;
    let s = |i: usize| v[i].as_str().unwrap_or("").to_string();
    Ok((s(0), s(1), s(2), s(3)))
}

/// Each cause engine-sim can make gives one banner "The reply failed" with
/// the cause in plain words, what to do, and the technical detail folded,
/// without the engine's address; Retry, once the engine is well, answers;
/// a Stop says so and Retry goes on. The banner is there again after a
/// reload, not after ✕ (nor after a reload then), and not for a run that
/// ended more than a day ago.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_reply_says_why_and_retry_answers() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let t = Status::start(&[
        ("QSE_CHAT_RETRY_WINDOW_S", "2"),
        ("QSE_CHAT_RETRY_MAX_WAIT_S", "1"),
    ])
    .await?;
    let address = t.sim.url().trim_start_matches("http://").to_string();
    for viewport in [DESKTOP, PHONE] {
        let first = t.client.create_chat().await?;
        let b = t.open(viewport, &first).await?;
        for case in cases() {
            let chat = t.client.create_chat().await?;
            b.eval(&format!("location.hash = '#/c/{chat}'; return true;"))
                .await?;
            b.wait_js(
                "the chat open and live",
                &format!("return typeof chat !== 'undefined' && chat && chat.id === '{chat}';"),
                WAIT,
            )
            .await?;
            if let Some(seconds) = case.refuse_s {
                t.sim
                    .post("/sim/refuse", json!({"seconds": seconds}))
                    .await?;
            } else {
                t.sim.faults(case.faults.clone()).await?;
            }
            t.client.send(&chat, "Hello").await?;
            let (cause, says, todo, detail) = banner(&b).await?;
            assert_eq!(cause, case.cause, "{says}");
            assert_eq!(says, format!("The reply failed | {}", case.says));
            ensure!(todo.contains(case.todo), "{}: {todo:?}", case.cause);
            ensure!(
                !detail.is_empty() && !detail.contains(&address) && !detail.contains("10.1.2.3"),
                "{}: the detail names no address: {detail:?}",
                case.cause
            );
            let state = b.text("#status .state").await?;
            assert_eq!(state, case.state, "{}", case.cause);
            let folded = b
                .eval("return !document.querySelector('#failure details').open;")
                .await?;
            assert_eq!(folded, json!(true), "the detail starts folded");
            b.screenshot(&format!("failed-{}-{}", case.cause, viewport.width))
                .await?;
            // The engine is well again: Retry answers, and the banner goes.
            if case.refuse_s.is_some() {
                wait_engine(&t.sim).await?;
            }
            t.lift_faults().await?;
            b.click("#failure .failure-retry").await?;
            wait_done(&t.client, &chat).await?;
            b.wait_hidden("#failure", LONG).await?;
        }

        // Stop: the banner says so; Retry goes on with the same answer.
        let chat = t.client.create_chat().await?;
        b.eval(&format!("location.hash = '#/c/{chat}'; return true;"))
            .await?;
        b.wait_js(
            "the chat open",
            &format!("return typeof chat !== 'undefined' && chat && chat.id === '{chat}';"),
            WAIT,
        )
        .await?;
        t.client.send(&chat, "Long [sim tokens=300 tps=40]").await?;
        b.wait_text("#status .state", |s| s == "Answering", LONG)
            .await?;
        b.click("#stop").await?;
        let (cause, says, todo, _) = banner(&b).await?;
        assert_eq!(cause, "stopped");
        assert_eq!(says, "The reply failed | The reply was stopped.");
        ensure!(todo.contains("goes on"), "{todo}");
        b.click("#failure .failure-retry").await?;
        wait_done(&t.client, &chat).await?;
        let snapshot = t.client.snapshot(&chat).await?;
        let modes: Vec<&str> = snapshot["runs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["mode"].as_str())
            .collect();
        ensure!(
            modes.last() == Some(&"continue"),
            "Retry after a Stop continues: {modes:?}"
        );

        // After a reload the banner is back; ✕ takes it away for good.
        let chat = t.client.create_chat().await?;
        t.sim
            .faults(json!([{"status": 404, "message": "model 'gone' not found"}]))
            .await?;
        let sent = t.client.send(&chat, "Hello").await?;
        let run = sent["run_id"].as_str().context("run_id")?.to_string();
        t.client.wait_run(&chat, &run, &["failed"], LONG).await?;
        let front = t.chatd.front_url();
        b.goto(&format!("{front}/#/c/{chat}")).await?;
        b.wait_state("live").await?;
        let (cause, ..) = banner(&b).await?;
        assert_eq!(cause, "model_not_found", "shown again after a reload");
        b.screenshot(&format!("failed-after-reload-{}", viewport.width))
            .await?;
        b.click("#failure .failure-dismiss").await?;
        b.wait_hidden("#failure", WAIT).await?;
        b.goto(&format!("{front}/?again#/c/{chat}")).await?;
        b.wait_state("live").await?;
        b.wait_js(
            "the chat open again",
            &format!("return typeof chat !== 'undefined' && chat && chat.id === '{chat}' && document.querySelector('#status .state').textContent === 'Failed';"),
            WAIT,
        )
        .await?;
        ensure!(!b.visible("#failure").await?, "dismissed stays dismissed");
        // A failure older than a day is not shown after a reload.
        let old = b
            .eval(
                "localStorage.clear(); renderFailure();
                 const shown = !document.querySelector('#failure').hidden;
                 chat.lastRun.ended = new Date(Date.now() - 25 * 3600 * 1000).toISOString();
                 renderFailure();
                 return [shown, !document.querySelector('#failure').hidden];",
            )
            .await?;
        assert_eq!(old, json!([true, false]), "a day later the banner is gone");
        b.close().await?;
    }
    Ok(())
}

/// Waits until engine-sim takes connections again (its refusal is over).
async fn wait_engine(sim: &Sim) -> anyhow::Result<()> {
    let url = format!("{}/health", sim.url());
    tandem_tests::harness::wait_until("the engine back", Duration::from_secs(20), || {
        let url = url.clone();
        async move { reqwest::get(&url).await.ok().map(|_| ()) }
    })
    .await
}
