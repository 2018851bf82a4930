//! The page's inbox (README "The inbox") in headless Chromium, at 1280 px
//! and at 390 px, against entries the real daemons make: triggerd's runs
//! (one that ran, one the engine refused) and connectord switching its
//! Telegram binding off (the fake Bot API refusing the token), with chatd's
//! front and the engine simulator. The badge, the panel, an entry arriving
//! live, mark read, delete, Clear read, Clear all with its question,
//! opening an entry's chat, and the keyboard. What the page did is checked
//! through chatd's API; every wait is a bounded poll.

use anyhow::{ensure, Context};
use fantoccini::Locator;
use serde_json::{json, Value};
use tandem_tests::browser::{self, Browser, Chromedriver, Viewport, DESKTOP, ENTER, PHONE, WAIT};
use tandem_tests::connectord::{self, Connectord};
use tandem_tests::fakebot::{FakeBot, Fault};
use tandem_tests::harness::{wait_until, Chatd, Client, Sim};
use tandem_tests::triggerd::{self, Triggerd};

const TOKEN: &str = "123456:AAE-the-inbox-bot-token-4c3b2a";

const ARROW_DOWN: &str = "\u{e015}";
const ARROW_UP: &str = "\u{e013}";
const HOME: &str = "\u{e011}";
const END: &str = "\u{e010}";
const DELETE: &str = "\u{e017}";
const ESCAPE: &str = "\u{e00c}";

/// One test's processes: chromedriver first so it goes first on drop, then
/// the daemons that post to chatd, then chatd and the engine.
struct Rig {
    driver: Chromedriver,
    td: Triggerd,
    _cd: Connectord,
    bot: FakeBot,
    chatd: Chatd,
    _sim: Sim,
    client: Client,
}

impl Rig {
    /// The engine simulator, chatd with its front forwarding to triggerd and
    /// connectord, both started (triggerd's clock held at a morning its
    /// schedules never reach: only runs asked for happen), and a fake Bot API.
    async fn start() -> anyhow::Result<Rig> {
        let sim = Sim::start(&["--tokens-per-second", "0"])?;
        let tdir = tempfile::tempdir()?;
        let cdir = tempfile::tempdir()?;
        let tsock = triggerd::socket_in(tdir.path());
        let csock = connectord::socket_in(cdir.path());
        let chatd = Chatd::start_with_front(
            &sim.url(),
            &[
                ("QSE_TRIGGERS_SOCKET", tsock.to_string_lossy().as_ref()),
                ("QSE_CONNECTORS_SOCKET", csock.to_string_lossy().as_ref()),
            ],
            None,
        )
        .await?;
        let client = chatd.client();
        let mut td = Triggerd::new(tdir, &chatd, "")?;
        td.set_clock("2026-06-01T06:00:00Z")?;
        td.start().await?;
        let bot = FakeBot::start(TOKEN, "inbox_bot").await?;
        let mut cd = Connectord::new(cdir, &chatd, &bot.url(), "http://127.0.0.1:9/api", "")?;
        cd.start().await?;
        let driver = Chromedriver::start().await?;
        Ok(Rig {
            driver,
            td,
            _cd: cd,
            bot,
            chatd,
            _sim: sim,
            client,
        })
    }

    async fn open(&self, viewport: Viewport, chat: Option<&str>) -> anyhow::Result<Browser> {
        let front = self.chatd.front_url();
        Browser::open_chat(&self.driver, viewport, &front, chat, "#inbox-open").await
    }

    /// A trigger named `name` asking `prompt` (its schedule is never due).
    async fn trigger(&self, name: &str, prompt: &str) -> anyhow::Result<String> {
        let (status, made) = self
            .td
            .api(
                "POST",
                "",
                Some(json!({"name": name, "when": "daily 23:00", "prompt": prompt})),
            )
            .await?;
        ensure!(status == 201, "creating {name}: {status} {made}");
        Ok(made["id"].as_str().unwrap_or_default().to_string())
    }

    /// Runs trigger `tid` now and waits for its inbox entry of `kind`.
    async fn run(&self, tid: &str, kind: &str) -> anyhow::Result<Value> {
        let before: Vec<String> = notes(&self.client).await?.iter().map(id).collect();
        let (status, run) = self.td.api("POST", &format!("/{tid}/run"), None).await?;
        ensure!(status == 202, "running {tid}: {status} {run}");
        wait_until(&format!("a {kind} entry of {tid}"), WAIT, || async {
            notes(&self.client)
                .await
                .ok()?
                .into_iter()
                .find(|n| n["source"]["id"] == tid && n["kind"] == kind && !before.contains(&id(n)))
        })
        .await
    }

    /// A Telegram binding named Helper that the fake Bot API then refuses:
    /// connectord switches it off and leaves a needs_attention entry.
    async fn connector_switched_off(&self) -> anyhow::Result<Value> {
        let agent = self
            .client
            .post(
                "/agents",
                json!({"name": "Concierge", "model": "sim-small", "instructions": "Answer briefly."}),
            )
            .await?;
        ensure!(agent.status == 201, "agent: {agent:?}");
        let made = self
            .client
            .post(
                "/connectors",
                json!({"kind": "telegram", "name": "Helper", "token": TOKEN,
                       "agent_id": agent.body["id"], "allowlist": ["@ann"]}),
            )
            .await?;
        ensure!(made.status == 201, "binding: {} {}", made.status, made.body);
        self.bot.fail_always("getUpdates", Fault::Unauthorized401);
        wait_until("connectord's needs_attention entry", WAIT, || async {
            notes(&self.client)
                .await
                .ok()?
                .into_iter()
                .find(|n| n["source"]["type"] == "connector" && n["kind"] == "needs_attention")
        })
        .await
    }

    /// The three entries every test starts with, oldest first: a trigger
    /// run that ran, one the engine refused, and the switched-off binding.
    async fn three_entries(&self) -> anyhow::Result<(String, [Value; 3])> {
        let tid = self
            .trigger("Morning notes", "Summarise the notes.")
            .await?;
        let ran = self.run(&tid, "run_ended").await?;
        let bad = self
            .trigger("Weekly report", "Write it. [sim status=400 message=no]")
            .await?;
        let failed = self.run(&bad, "run_failed").await?;
        let off = self.connector_switched_off().await?;
        Ok((tid, [ran, failed, off]))
    }
}

fn id(n: &Value) -> String {
    n["id"].as_str().unwrap_or_default().to_string()
}

/// Every entry chatd keeps, newest first.
async fn notes(client: &Client) -> anyhow::Result<Vec<Value>> {
    let answer = client.get("/notifications?limit=500").await?;
    ensure!(answer.status == 200, "{answer:?}");
    Ok(answer.body["notifications"]
        .as_array()
        .cloned()
        .unwrap_or_default())
}

/// What chatd says of entry `nid` (None once it is gone).
async fn note(client: &Client, nid: &str) -> anyhow::Result<Option<Value>> {
    Ok(notes(client).await?.into_iter().find(|n| id(n) == nid))
}

async fn wait_read(client: &Client, nid: &str) -> anyhow::Result<()> {
    wait_until(&format!("{nid} read in chatd"), WAIT, || async {
        (note(client, nid).await.ok()??["read"] == true).then_some(())
    })
    .await
}

/// The badge: (its text, shown, the button's aria-label).
async fn badge(b: &Browser) -> anyhow::Result<(String, bool, String)> {
    let v = b
        .eval(
            "const c = document.querySelector('#inbox-count');
             return [c.textContent, !c.hidden, document.querySelector('#inbox-open').getAttribute('aria-label')];",
        )
        .await?;
    Ok((
        v[0].as_str().unwrap_or("").into(),
        v[1] == true,
        v[2].as_str().unwrap_or("").into(),
    ))
}

async fn wait_badge(b: &Browser, text: &str, label: &str) -> anyhow::Result<()> {
    let (text, label) = (text.to_string(), label.to_string());
    b.poll(&format!("the badge {text:?}"), WAIT, || {
        let (text, label) = (text.clone(), label.clone());
        async move {
            let seen = badge(b).await?;
            let shown = !text.is_empty();
            Ok(if seen.0 == text && seen.1 == shown && seen.2 == label {
                Ok(())
            } else {
                Err(format!("{seen:?}"))
            })
        }
    })
    .await
}

/// The panel's entries as shown: [group, title, source line, classes, id].
const ENTRIES: &str =
    "return [...document.querySelectorAll('#inbox-list .inbox-entry')].map(li => [
    li.closest('section').querySelector('.inbox-group').textContent,
    li.querySelector('.inbox-title').textContent,
    li.querySelector('.inbox-meta').textContent,
    li.className, li.dataset.id]);";

async fn entries(b: &Browser) -> anyhow::Result<Vec<Vec<String>>> {
    let v = b.eval(ENTRIES).await?;
    Ok(v.as_array()
        .into_iter()
        .flatten()
        .map(|row| {
            row.as_array()
                .into_iter()
                .flatten()
                .map(|c| c.as_str().unwrap_or("").to_string())
                .collect()
        })
        .collect())
}

/// Waits until the panel shows `n` entries; they.
async fn wait_entries(b: &Browser, n: usize) -> anyhow::Result<Vec<Vec<String>>> {
    b.poll(&format!("{n} entries in the panel"), WAIT, || async {
        let shown = entries(b).await?;
        Ok(if shown.len() == n {
            Ok(shown)
        } else {
            Err(format!("{shown:?}"))
        })
    })
    .await
}

/// Opens the panel with the Notifications button and waits until it is in place.
async fn open_panel(b: &Browser) -> anyhow::Result<()> {
    b.click("#inbox-open").await?;
    b.wait_visible("#inbox", WAIT).await?;
    Ok(())
}

/// Sends `keys` to the element that has the focus. The panel draws its
/// list again when an entry comes in (the trigger runs' entries can land
/// while keys are pressed) and puts the focus on the new node: WebDriver
/// then refuses the old reference as stale without sending anything, so
/// the focused element is asked for again (5 times at most). ci26 failed
/// here once with "stale element reference".
async fn press(b: &Browser, keys: &str) -> anyhow::Result<()> {
    for _ in 0..5 {
        let active = b.client().active_element().await?;
        match active.send_keys(keys).await {
            Ok(()) => return Ok(()),
            Err(e) if e.to_string().contains("stale element") => continue,
            Err(e) => return Err(e).context("pressing keys"),
        }
    }
    anyhow::bail!("pressing keys: the focused element went stale 5 times in a row")
}

/// The id of the entry the focus is in ("" for none), and the focused element's id.
async fn focus(b: &Browser) -> anyhow::Result<(String, String)> {
    let v = b
        .eval(
            "const a = document.activeElement, li = a && a.closest('.inbox-entry');
             return [li ? li.dataset.id : '', a ? a.id : ''];",
        )
        .await?;
    Ok((
        v[0].as_str().unwrap_or("").into(),
        v[1].as_str().unwrap_or("").into(),
    ))
}

/// The badge and the panel with entries made by triggerd and connectord; a
/// run ending while the panel is open; mark read, delete, Clear read, Clear
/// all (asked first, with the count); opening an entry opens its chat and
/// marks its entries read. At one size.
async fn badge_and_panel(viewport: Viewport) -> anyhow::Result<()> {
    let t = Rig::start().await?;
    let (tid, [ran, failed, off]) = t.three_entries().await?;
    ensure!(
        off["conversation_id"].is_null(),
        "a switch-off has no chat: {off}"
    );
    let b = t.open(viewport, None).await?;
    wait_badge(&b, "3", "Notifications, 3 unread").await?;
    b.screenshot("badge").await?;

    open_panel(&b).await?;
    let shown = wait_entries(&b, 3).await?;
    let titles: Vec<&str> = shown.iter().map(|e| e[1].as_str()).collect();
    ensure!(
        titles
            == [
                "Helper was switched off",
                "Weekly report failed",
                "Morning notes ran"
            ],
        "newest first: {shown:?}"
    );
    ensure!(
        shown.iter().all(|e| e[0] == "Today"),
        "all made today: {shown:?}"
    );
    ensure!(
        shown[0][2].contains("Connector · Helper")
            && shown[2][2].contains("Trigger · Morning notes"),
        "what sent each: {shown:?}"
    );
    ensure!(
        shown[0][2].contains("Failed")
            && shown[1][2].contains("Failed")
            && !shown[2][2].contains("Failed"),
        "a failed run and a switch-off are failures: {shown:?}"
    );
    b.screenshot("panel").await?;
    b.click("#inbox .inbox-filter[data-filter='failed']")
        .await?;
    let failures = wait_entries(&b, 2).await?;
    ensure!(failures.iter().all(|e| e[4] != id(&ran)), "{failures:?}");
    b.screenshot("failed-filter").await?;
    b.click("#inbox .inbox-filter[data-filter='all']").await?;
    wait_entries(&b, 3).await?;

    // A run ends while the panel is open: it comes in at the top, marked new.
    let second = t.run(&tid, "run_ended").await?;
    let shown = wait_entries(&b, 4).await?;
    ensure!(
        shown[0][4] == id(&second)
            && shown[0][3].contains("fresh")
            && shown[0][3].contains("unread"),
        "the new entry on top, highlighted: {shown:?}"
    );
    wait_badge(&b, "4", "Notifications, 4 unread").await?;
    b.screenshot("live-entry").await?;

    // Mark read: chatd has it read, the badge goes down, Unread leaves it out.
    b.click(&format!(
        "#inbox-list .inbox-entry[data-id='{}'] .inbox-mark",
        id(&off)
    ))
    .await?;
    wait_read(&t.client, &id(&off)).await?;
    wait_badge(&b, "3", "Notifications, 3 unread").await?;
    b.click("#inbox .inbox-filter[data-filter='unread']")
        .await?;
    let unread = wait_entries(&b, 3).await?;
    ensure!(unread.iter().all(|e| e[4] != id(&off)), "{unread:?}");
    b.click("#inbox .inbox-filter[data-filter='all']").await?;

    // Delete: gone from chatd and from the panel.
    b.click(&format!(
        "#inbox-list .inbox-entry[data-id='{}'] .inbox-delete",
        id(&failed)
    ))
    .await?;
    wait_entries(&b, 3).await?;
    ensure!(
        note(&t.client, &id(&failed)).await?.is_none(),
        "deleted in chatd"
    );

    // Opening the first run's entry opens its chat, and both runs' entries are read.
    let chat = ran["conversation_id"].as_str().context("the run's chat")?;
    let other = second["conversation_id"]
        .as_str()
        .context("the second run's chat")?;
    b.click(&format!(
        "#inbox-list .inbox-entry[data-id='{}'] .inbox-entry-open",
        id(&ran)
    ))
    .await?;
    b.wait_js(
        "the entry's chat open",
        &format!("return location.hash === '#/c/{chat}' && document.querySelectorAll('#messages .message').length >= 2 || null;"),
        WAIT,
    )
    .await?;
    ensure!(!b.visible("#inbox").await?, "the panel closed");
    wait_read(&t.client, &id(&ran)).await?;
    ensure!(
        note(&t.client, &id(&second)).await?.context("second")?["read"] == false,
        "another chat's entry stays unread ({other})"
    );
    wait_badge(&b, "1", "Notifications, 1 unread").await?;
    b.screenshot("chat-opened").await?;

    // Clear read keeps the unread one.
    open_panel(&b).await?;
    wait_entries(&b, 3).await?;
    b.click("#inbox-clear-read").await?;
    let left = wait_entries(&b, 1).await?;
    ensure!(left[0][4] == id(&second), "{left:?}");
    let kept = notes(&t.client).await?;
    ensure!(
        kept.len() == 1 && id(&kept[0]) == id(&second),
        "chatd: {kept:?}"
    );

    // Clear all asks first, naming the count; Cancel keeps everything.
    t.client
        .post(
            "/notifications",
            json!({"kind": "run_ended", "title": "Posted by hand", "source": {"type": "chatd", "id": "test"}}),
        )
        .await?;
    wait_entries(&b, 2).await?;
    b.click("#inbox-clear-all").await?;
    b.wait_visible("#inbox-confirm", WAIT).await?;
    let question = b.text("#inbox-confirm-text").await?;
    ensure!(
        question == "Remove all 2 notifications? This cannot be undone.",
        "{question:?}"
    );
    b.screenshot("clear-all-asks").await?;
    b.click("#inbox-confirm-no").await?;
    b.wait_hidden("#inbox-confirm", WAIT).await?;
    ensure!(notes(&t.client).await?.len() == 2, "Cancel removed nothing");
    b.click("#inbox-clear-all").await?;
    b.click("#inbox-confirm-yes").await?;
    wait_entries(&b, 0).await?;
    wait_until("an empty inbox in chatd", WAIT, || async {
        notes(&t.client).await.ok()?.is_empty().then_some(())
    })
    .await?;
    wait_badge(&b, "", "Notifications, none unread").await?;
    ensure!(b.text("#inbox-empty").await? == "Nothing here yet.");
    b.screenshot("cleared").await?;
    b.close().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbox_badge_and_panel_at_1280() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    badge_and_panel(DESKTOP).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbox_badge_and_panel_at_390() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    badge_and_panel(PHONE).await
}

/// The keyboard alone: the button, ↓ ↑ Home End between entries, Delete,
/// Enter opens the chat, Esc closes and gives the focus back; and a chat
/// opened from the chat list marks its entries read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbox_by_keyboard() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let t = Rig::start().await?;
    let (_, [ran, failed, off]) = t.three_entries().await?;
    let b = t.open(DESKTOP, None).await?;
    wait_badge(&b, "3", "Notifications, 3 unread").await?;
    // The button by keyboard: focused, Enter opens the panel on the newest entry.
    b.eval("document.querySelector('#inbox-open').focus(); return true;")
        .await?;
    press(&b, ENTER).await?;
    b.wait_visible("#inbox", WAIT).await?;
    let shown = wait_entries(&b, 3).await?;
    let order: Vec<String> = shown.iter().map(|e| e[4].clone()).collect();
    ensure!(order == [id(&off), id(&failed), id(&ran)], "{shown:?}");
    ensure!(focus(&b).await?.0 == order[0], "the newest has the focus");
    press(&b, ARROW_DOWN).await?;
    ensure!(focus(&b).await?.0 == order[1], "↓");
    press(&b, END).await?;
    ensure!(focus(&b).await?.0 == order[2], "End");
    press(&b, ARROW_DOWN).await?;
    ensure!(focus(&b).await?.0 == order[2], "↓ stays on the last");
    press(&b, HOME).await?;
    ensure!(focus(&b).await?.0 == order[0], "Home");
    press(&b, ARROW_DOWN).await?;
    press(&b, ARROW_UP).await?;
    ensure!(focus(&b).await?.0 == order[0], "↑");
    b.screenshot("keyboard-focus").await?;
    // Delete removes the focused entry; the focus moves to the next.
    press(&b, DELETE).await?;
    wait_entries(&b, 2).await?;
    ensure!(
        note(&t.client, &order[0]).await?.is_none(),
        "deleted in chatd"
    );
    b.poll("the focus on the next entry", WAIT, || async {
        let (entry, _) = focus(&b).await?;
        Ok(if entry == order[1] {
            Ok(())
        } else {
            Err(entry)
        })
    })
    .await?;
    // Esc closes and gives the focus back to the button.
    press(&b, ESCAPE).await?;
    b.wait_hidden("#inbox", WAIT).await?;
    ensure!(
        focus(&b).await?.1 == "inbox-open",
        "the focus is back on the button"
    );
    // Enter on an entry opens its chat and marks it read.
    press(&b, ENTER).await?;
    wait_entries(&b, 2).await?;
    press(&b, ARROW_DOWN).await?;
    ensure!(focus(&b).await?.0 == id(&ran));
    press(&b, ENTER).await?;
    let chat = ran["conversation_id"].as_str().context("the run's chat")?;
    b.wait_js(
        "the run's chat open",
        &format!("return location.hash === '#/c/{chat}' || null;"),
        WAIT,
    )
    .await?;
    wait_read(&t.client, &id(&ran)).await?;
    ensure!(
        focus(&b).await?.1 == "inbox-open",
        "the focus is on the button"
    );

    // A chat opened from the chat list (not the panel) marks its entries read.
    let failed_chat = failed["conversation_id"].as_str().context("failed chat")?;
    ensure!(note(&t.client, &id(&failed)).await?.context("failed")?["read"] == false);
    b.click(&format!(
        "#chat-list li.chat[data-chat-id='{failed_chat}'] a.open"
    ))
    .await?;
    wait_read(&t.client, &id(&failed)).await?;
    wait_badge(&b, "", "Notifications, none unread").await?;
    b.close().await?;
    Ok(())
}

/// Above 99 unread the badge says 99+ (its label the number); after chatd
/// restarts, the stream comes back and an entry posted then still arrives;
/// Today / Yesterday / Earlier follow the browser's own day.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbox_counts_past_99_and_comes_back_after_a_restart() -> anyhow::Result<()> {
    if !browser::available() {
        return Ok(());
    }
    let mut t = Rig::start().await?;
    let tid = t.trigger("Morning notes", "Summarise the notes.").await?;
    t.run(&tid, "run_ended").await?;
    for n in 0..104 {
        let posted = t
            .client
            .post(
                "/notifications",
                json!({"kind": "run_ended", "title": format!("Posted {n}"),
                       "source": {"type": "chatd", "id": "test"}}),
            )
            .await?;
        ensure!(posted.status == 201, "{posted:?}");
    }
    let b = t.open(DESKTOP, None).await?;
    wait_badge(&b, "99+", "Notifications, 105 unread").await?;
    b.screenshot("ninety-nine-plus").await?;
    t.chatd.restart().await?;
    // Posted after the restart: the page's stream connected again and reads it.
    t.client
        .post(
            "/notifications",
            json!({"kind": "run_failed", "title": "After the restart",
                   "source": {"type": "chatd", "id": "test"}}),
        )
        .await?;
    wait_badge(&b, "99+", "Notifications, 106 unread").await?;
    open_panel(&b).await?;
    b.poll("the newest entry on top", WAIT, || async {
        let shown = entries(&b).await?;
        let top = shown.first().map(|e| e[1].clone()).unwrap_or_default();
        Ok(if top == "After the restart" {
            Ok(())
        } else {
            Err(top)
        })
    })
    .await?;
    // The groups are the browser's local days, whatever the zone's offset.
    let groups = b
        .eval(
            "const now = new Date(2026, 5, 10, 0, 30);
             return [groupOf(new Date(2026, 5, 10, 0, 5).toISOString(), now),
                     groupOf(new Date(2026, 5, 9, 23, 55).toISOString(), now),
                     groupOf(new Date(2026, 5, 9, 0, 0).toISOString(), now),
                     groupOf(new Date(2026, 5, 8, 23, 59).toISOString(), now)];",
        )
        .await?;
    ensure!(
        groups == json!(["Today", "Yesterday", "Yesterday", "Earlier"]),
        "{groups}"
    );
    let named = b
        .client()
        .find(Locator::Css("#inbox-read-all"))
        .await?
        .text()
        .await?;
    ensure!(named == "Mark all read", "{named:?}");
    b.click("#inbox-read-all").await?;
    wait_badge(&b, "", "Notifications, none unread").await?;
    ensure!(
        notes(&t.client).await?.iter().all(|n| n["read"] == true),
        "chatd has them all read"
    );
    b.close().await?;
    Ok(())
}
