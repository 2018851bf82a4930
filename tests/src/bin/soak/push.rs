//! The push part (`--parts push`): chatd's Web Push and the page's routes of
//! issue 25 under the soak's load and chatd's SIGKILLs. chatd runs with
//! `QSE_CHAT_PUSH_ALLOW_LOOPBACK_FOR_TESTS`, so a fake push service on
//! loopback (`tandem_tests::fakepush`: it checks each push's VAPID token and
//! decrypts it with the keys it made) stands in for a browser vendor's.
//! Three browsers subscribe: a steady one, one that answers 410 Gone from
//! a random moment of the load on (chatd must forget it), and a flaky one
//! that answers 500 or slowly (1.5 s) one push in three each (chatd must not
//! hold a run for it: the other invariants stay green).
//!
//! Meanwhile, one request at a time, retried (bounded) while chatd is down:
//! messages to chats of its own that no device watches (each run's end must
//! push), `PATCH /conversations/{id}` with `settings` (a temperature and a
//! system prompt, on its own chats and the soak's) followed by a bad one
//! (temperature 9 and another prompt: 400, and the snapshot still holds the
//! last good settings), `PUT …/permission-mode`, and the inbox (entries
//! posted as a trigger would, with a key so a retry stores once; some
//! marked read, some deleted).
//!
//! `Inv::Push` at the end: every push decrypts and carries a title and a
//! link (`/#/c/<chat>`, or `/` for an entry without a chat) and nothing
//! else, none of a message's text (every message the soak sends has the
//! cue marker `[sim `, every entry body here too) nor a system prompt; its
//! own unwatched chats got pushes; the gone browser is no longer listed and
//! the two others are; every chat holds its last saved settings and mode;
//! the inbox holds what was posted, read and deleted, and its count route
//! agrees with its list. The keys and endpoint names are secrets: no log
//! may name them (`Inv::Secrets`).

use super::*;

use futures_util::future::BoxFuture;
use reqwest::Method;
use tandem_tests::fakepush::{FakePush, Received, Subscriber};
use tandem_tests::harness::wait_until;

/// In every message the soak sends (chats.rs' engine cue) and every inbox
/// body posted here: a push that carries it carried a message's text.
const MARKER: &str = "[sim ";
/// Words of every system prompt set here; no push may carry them.
const PROMPT: &str = "soak system prompt";
/// Chats of its own, no device attached: their runs' ends must push.
const OWN_CHATS: usize = 3;
/// The flaky browser's slow answer.
const SLOW: Duration = Duration::from_millis(1500);
/// How long a request is asked again while chatd is down (a restart).
const RIDE: Duration = Duration::from_secs(45);
/// Inbox entries posted per run at most (chatd keeps the newest 500, and
/// triggerd's entries must stay among them).
const MAX_ENTRIES: u64 = 80;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Steady,
    Gone,
    Flaky,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Steady => "steady",
            Kind::Gone => "gone",
            Kind::Flaky => "flaky",
        }
    }
}

struct Browser {
    kind: Kind,
    subscriber: Subscriber,
    id: String,
}

/// An inbox entry posted here: what it should be at the end (`None`: a
/// request whose answer was lost, so either).
struct Entry {
    title: String,
    read: Option<bool>,
    deleted: Option<bool>,
}

#[derive(Default)]
struct Counts {
    messages: u64,
    patches: u64,
    bad_patches: u64,
    modes: u64,
    posted: u64,
    marked: u64,
    deleted: u64,
    retried: u64,
    lost: u64,
}

/// What the load did, for the checks.
struct Run {
    fake: FakePush,
    browsers: Vec<Browser>,
    own: Vec<String>,
    /// Per chat, the settings last saved (`None`: an answer was lost).
    settings: HashMap<String, Option<(f64, String)>>,
    modes: HashMap<String, Option<String>>,
    entries: BTreeMap<String, Entry>,
    gone_at: Option<f64>,
    counts: Counts,
}

pub(crate) struct PushPart {
    duration: f64,
    run: Mutex<Option<Run>>,
}

impl PushPart {
    pub(crate) fn new(ctx: &Prepare) -> PushPart {
        PushPart {
            duration: ctx.duration,
            run: Mutex::new(None),
        }
    }
}

impl Part for PushPart {
    fn name(&self) -> PartName {
        PartName::Push
    }

    fn chatd_env(&self) -> Vec<(String, String)> {
        vec![(
            "QSE_CHAT_PUSH_ALLOW_LOOPBACK_FOR_TESTS".into(),
            "true".into(),
        )]
    }

    fn drive(self: Arc<Self>, shared: Arc<Shared>, seed: u64) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let mut rng = StdRng::seed_from_u64(seed);
            let run = match start(&shared, &mut rng).await {
                Ok(run) => run,
                Err(err) => {
                    shared.violate(Inv::Push, format!("push: could not start: {err:#}"));
                    return;
                }
            };
            let run = load(&shared, run, &mut rng, self.duration, seed).await;
            let run = settle(&shared, run).await;
            *lock(&self.run) = Some(run);
        })
    }

    fn finish(self: Arc<Self>, shared: Arc<Shared>) -> BoxFuture<'static, PartEnd> {
        Box::pin(async move {
            let Some(mut run) = lock(&self.run).take() else {
                return PartEnd::default();
            };
            let mut totals = check_browsers(&shared, &mut run).await;
            totals.extend(check_pushes(&shared, &run));
            totals.extend(check_chats(&shared, &mut run).await);
            totals.extend(check_inbox(&shared, &mut run).await);
            let c = &run.counts;
            totals.push(format!(
                "requests: {} asked again while chatd was down, {} with no answer within {} s",
                c.retried,
                c.lost,
                RIDE.as_secs()
            ));
            let secrets = run
                .browsers
                .iter()
                .flat_map(|b| {
                    [
                        b.subscriber.p256dh.clone(),
                        b.subscriber.auth.clone(),
                        b.subscriber.name.clone(),
                    ]
                })
                .collect();
            PartEnd {
                totals,
                secrets,
                ..PartEnd::default()
            }
        })
    }
}

/// A request to chatd, asked again while chatd does not answer (a kill's
/// restart) for at most `RIDE`; `None` when it never answered.
async fn ask(
    shared: &Shared,
    counts: &mut Counts,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Option<(u16, Value)> {
    let mut tries = 0u64;
    let answer = wait_until("chatd to answer", RIDE, || {
        tries += 1;
        let (method, body) = (method.clone(), body.clone());
        async move { shared.call(method, path, body).await.ok() }
    })
    .await
    .ok();
    counts.retried += u64::from(tries > 1);
    if answer.is_none() {
        counts.lost += 1;
    }
    answer
}

/// The fake push service, three browsers subscribed, and the chats of its own.
async fn start(shared: &Shared, rng: &mut StdRng) -> anyhow::Result<Run> {
    let mut counts = Counts::default();
    let key = match ask(shared, &mut counts, Method::GET, "/push/key", None).await {
        Some((200, body)) => body["public_key"]
            .as_str()
            .context("public_key in GET /push/key")?
            .to_string(),
        other => bail!("GET /push/key answered {other:?}"),
    };
    let fake = FakePush::start(&key).await?;
    let mut browsers = Vec::new();
    for kind in [Kind::Steady, Kind::Gone, Kind::Flaky] {
        // The endpoint's path is secret-like: no log may name it.
        let name = format!("soak-{}-{:016x}", kind.as_str(), rng.random::<u64>());
        let subscriber = fake.subscriber(&name);
        if kind == Kind::Flaky {
            fake.flaky(&name, SLOW);
        }
        let id = match ask(
            shared,
            &mut counts,
            Method::POST,
            "/push/subscribe",
            Some(subscriber.body()),
        )
        .await
        {
            Some((200 | 201, body)) => body["id"]
                .as_str()
                .context("id in the subscription's answer")?
                .to_string(),
            other => bail!(
                "subscribing the {} browser answered {other:?}",
                kind.as_str()
            ),
        };
        browsers.push(Browser {
            kind,
            subscriber,
            id,
        });
    }
    let mut own = Vec::new();
    for i in 0..OWN_CHATS {
        let body = json!({ "title": format!("soak push {i}") });
        match ask(
            shared,
            &mut counts,
            Method::POST,
            "/conversations",
            Some(body),
        )
        .await
        {
            Some((201, body)) => own.push(body["id"].as_str().context("conversation id")?.into()),
            other => bail!("creating a chat answered {other:?}"),
        }
    }
    Ok(Run {
        fake,
        browsers,
        own,
        settings: HashMap::new(),
        modes: HashMap::new(),
        entries: BTreeMap::new(),
        gone_at: None,
        counts,
    })
}

/// One request at a time while the load lasts; the gone browser goes at a
/// random moment of it.
async fn load(shared: &Shared, mut run: Run, rng: &mut StdRng, duration: f64, seed: u64) -> Run {
    let gone_at = duration * rng.random_range(0.3..0.5);
    let mut n = 0u64;
    let mut phase = shared.phase.subscribe();
    // Pacing of the load, not a wait for anything.
    while sleep_in(
        &mut phase,
        Duration::from_millis(rng.random_range(150..450)),
        |p| p == Phase::Load,
    )
    .await
    {
        n += 1;
        if run.gone_at.is_none() && shared.t() >= gone_at {
            if let Some(b) = run.browsers.iter().find(|b| b.kind == Kind::Gone) {
                run.fake.gone(&b.subscriber.name);
                run.gone_at = Some(shared.t());
                shared.fault("push browser gone (410 from then on)");
            }
        }
        match rng.random_range(0..100) {
            0..=29 => send(shared, &mut run, rng, n).await,
            30..=49 => patch(shared, &mut run, rng, n).await,
            50..=59 => mode(shared, &mut run, rng).await,
            60..=79 if run.counts.posted < MAX_ENTRIES => {
                post(shared, &mut run, rng, n, seed).await
            }
            60..=89 => mark_read(shared, &mut run, rng).await,
            _ => delete(shared, &mut run, rng).await,
        }
    }
    run
}

async fn send(shared: &Shared, run: &mut Run, rng: &mut StdRng, n: u64) {
    let i = rng.random_range(0..run.own.len());
    let chat = run.own[i].clone();
    let tokens = rng.random_range(3..12);
    let body = json!({
        "text": format!("push check #{n} [sim tokens={tokens} tps=0 id=p{i}m{n}]"),
        "key": format!("soak-push-{n}"),
    });
    let path = format!("/conversations/{chat}/messages");
    match ask(shared, &mut run.counts, Method::POST, &path, Some(body)).await {
        Some((200..=202, _)) => run.counts.messages += 1,
        Some((status, body)) => shared.unexpected(format!(
            "push: a message to its own chat {status} {}",
            body["error"]["code"]
        )),
        None => {}
    }
}

/// A good settings change, then a bad one that must change nothing.
async fn patch(shared: &Shared, run: &mut Run, rng: &mut StdRng, n: u64) {
    let chat = if rng.random_bool(0.5) {
        run.own[rng.random_range(0..run.own.len())].clone()
    } else {
        shared.chats[rng.random_range(0..shared.chats.len())].clone()
    };
    let path = format!("/conversations/{chat}");
    let temperature = f64::from(rng.random_range(0..=20u32)) / 10.0;
    let prompt = format!("{PROMPT} {n}: answer briefly");
    let good = json!({"settings": {"temperature": temperature, "system_prompt": prompt}});
    match ask(shared, &mut run.counts, Method::PATCH, &path, Some(good)).await {
        Some((200, _)) => {
            run.counts.patches += 1;
            run.settings
                .insert(chat.clone(), Some((temperature, prompt)));
        }
        Some((status, body)) => {
            shared.violate(
                Inv::Push,
                format!("chat {chat}: PATCH settings temperature {temperature} answered {status}: {body}"),
            );
            return;
        }
        None => {
            run.settings.insert(chat.clone(), None);
            return;
        }
    }
    let bad =
        json!({"settings": {"temperature": 9, "system_prompt": format!("{PROMPT} not kept")}});
    match ask(shared, &mut run.counts, Method::PATCH, &path, Some(bad)).await {
        Some((400, _)) => run.counts.bad_patches += 1,
        Some((status, body)) => shared.violate(
            Inv::Push,
            format!("chat {chat}: PATCH settings temperature 9 answered {status}, not 400: {body}"),
        ),
        None => return,
    }
    if let Some((200, snapshot)) = ask(shared, &mut run.counts, Method::GET, &path, None).await {
        check_settings(
            shared,
            run,
            &chat,
            &snapshot,
            "after a refused temperature 9",
        );
    }
}

async fn mode(shared: &Shared, run: &mut Run, rng: &mut StdRng) {
    let chat = run.own[rng.random_range(0..run.own.len())].clone();
    let mode = ["ask", "auto", "yolo"][rng.random_range(0..3)];
    let path = format!("/conversations/{chat}/permission-mode");
    let body = json!({ "mode": mode });
    match ask(shared, &mut run.counts, Method::PUT, &path, Some(body)).await {
        Some((200, _)) => {
            run.counts.modes += 1;
            run.modes.insert(chat, Some(mode.to_string()));
        }
        Some((status, body)) => shared.violate(
            Inv::Push,
            format!("chat {chat}: PUT permission-mode {mode} answered {status}: {body}"),
        ),
        None => {
            run.modes.insert(chat, None);
        }
    }
}

/// An inbox entry as a trigger posts one: about one of the soak's chats (a
/// device watches it, yet an entry pushes) or none.
async fn post(shared: &Shared, run: &mut Run, rng: &mut StdRng, n: u64, seed: u64) {
    let title = format!("soak inbox entry {n}");
    let kind = ["run_ended", "run_failed", "needs_attention"][rng.random_range(0..3)];
    let mut body = json!({
        "kind": kind,
        "title": title,
        "body": format!("entry {n}'s body, never pushed {MARKER}body={n}]"),
        "source": {"type": "trigger", "id": "soak-push", "name": "soak push"},
        "key": format!("soak-push:{seed:x}:{n}"),
    });
    if rng.random_bool(0.7) {
        body["conversation_id"] = json!(shared.chats[rng.random_range(0..shared.chats.len())]);
    }
    match ask(
        shared,
        &mut run.counts,
        Method::POST,
        "/notifications",
        Some(body),
    )
    .await
    {
        Some((200 | 201, stored)) => {
            run.counts.posted += 1;
            if let Some(id) = stored["id"].as_str() {
                let entry = Entry {
                    title,
                    read: Some(false),
                    deleted: Some(false),
                };
                run.entries.insert(id.to_string(), entry);
            }
        }
        Some((status, body)) => shared.violate(
            Inv::Push,
            format!("POST /notifications answered {status}: {body}"),
        ),
        None => {}
    }
}

/// Up to `k` of its own entries that `keep` selects, at random.
fn pick(run: &Run, rng: &mut StdRng, k: usize, keep: impl Fn(&Entry) -> bool) -> Vec<String> {
    let mut ids: Vec<String> = run
        .entries
        .iter()
        .filter(|(_, e)| e.deleted == Some(false) && keep(e))
        .map(|(id, _)| id.clone())
        .collect();
    while ids.len() > k {
        ids.swap_remove(rng.random_range(0..ids.len()));
    }
    ids
}

async fn mark_read(shared: &Shared, run: &mut Run, rng: &mut StdRng) {
    let ids = pick(run, rng, 4, |e| e.read == Some(false));
    if ids.is_empty() {
        return;
    }
    let body = json!({ "ids": ids });
    let answer = ask(
        shared,
        &mut run.counts,
        Method::POST,
        "/notifications/read",
        Some(body),
    )
    .await;
    let read = match answer {
        Some((200, _)) => Some(true),
        Some((status, body)) => {
            shared.violate(
                Inv::Push,
                format!("POST /notifications/read answered {status}: {body}"),
            );
            return;
        }
        None => None,
    };
    run.counts.marked += ids.len() as u64;
    for id in &ids {
        if let Some(entry) = run.entries.get_mut(id) {
            entry.read = read;
        }
    }
}

async fn delete(shared: &Shared, run: &mut Run, rng: &mut StdRng) {
    let ids = pick(run, rng, 3, |_| true);
    if ids.is_empty() {
        return;
    }
    let body = json!({ "ids": ids });
    let answer = ask(
        shared,
        &mut run.counts,
        Method::DELETE,
        "/notifications",
        Some(body),
    )
    .await;
    let deleted = match answer {
        Some((200, _)) => Some(true),
        Some((status, body)) => {
            shared.violate(
                Inv::Push,
                format!("DELETE /notifications answered {status}: {body}"),
            );
            return;
        }
        None => None,
    };
    run.counts.deleted += ids.len() as u64;
    for id in &ids {
        if let Some(entry) = run.entries.get_mut(id) {
            entry.deleted = deleted;
        }
    }
}

/// After the load: every run of its own chats ended (bounded like the
/// soak's drain), so their last pushes are on their way.
async fn settle(shared: &Shared, run: Run) -> Run {
    let bound = Duration::from_secs(110);
    for chat in run.own.clone() {
        let path = format!("/conversations/{chat}");
        let ended = wait_until("its own chat's runs to end", bound, || async {
            let (status, snapshot) = shared.call(Method::GET, &path, None).await.ok()?;
            let runs = snapshot["runs"].as_array()?;
            let open = runs.iter().any(|r| {
                !matches!(
                    r["status"].as_str(),
                    Some("done" | "stopped" | "failed" | "interrupted")
                )
            });
            (status == 200 && !open && snapshot["pending"].as_array().is_none_or(Vec::is_empty))
                .then_some(())
        })
        .await;
        if ended.is_err() {
            shared.violate(
                Inv::Runs,
                format!("push: chat {chat}'s runs had not ended {bound:?} after the load"),
            );
        }
    }
    run
}

fn listed_ids(body: &Value) -> Vec<String> {
    body["subscriptions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["id"].as_str().map(str::to_string))
        .collect()
}

/// The gone browser is no longer listed (a push after its 410 at the
/// latest: a kill may take the removal of the first), the two others are,
/// and the list names no endpoint or key.
async fn check_browsers(shared: &Shared, run: &mut Run) -> Vec<String> {
    let Some(gone) = run.browsers.iter().find(|b| b.kind == Kind::Gone) else {
        return Vec::new();
    };
    let gone_id = gone.id.clone();
    let gone_name = gone.subscriber.name.clone();
    let answered_410 = || {
        run.fake
            .received()
            .iter()
            .filter(|r| r.name == gone_name && r.status == 410)
            .count()
    };
    let mut nudged = false;
    let mut list = ask(
        shared,
        &mut run.counts,
        Method::GET,
        "/push/subscriptions",
        None,
    )
    .await;
    if matches!(&list, Some((200, body)) if listed_ids(body).contains(&gone_id)) {
        // One more push (410 again) removes it.
        nudged = true;
        let _ = ask(shared, &mut run.counts, Method::POST, "/push/test", None).await;
        list = ask(
            shared,
            &mut run.counts,
            Method::GET,
            "/push/subscriptions",
            None,
        )
        .await;
    }
    let Some((200, body)) = list else {
        shared.violate(
            Inv::Push,
            format!("GET /push/subscriptions answered {list:?}"),
        );
        return Vec::new();
    };
    let ids = listed_ids(&body);
    let text = body.to_string();
    for b in &run.browsers {
        let listed = ids.contains(&b.id);
        if listed == (b.kind == Kind::Gone) {
            shared.violate(
                Inv::Push,
                format!(
                    "the {} browser (subscription {}) is {}listed at the end ({} answers 410)",
                    b.kind.as_str(),
                    b.id,
                    if listed { "still " } else { "not " },
                    answered_410()
                ),
            );
        }
        let s = &b.subscriber;
        if [&s.p256dh, &s.auth, &s.name]
            .iter()
            .any(|secret| text.contains(secret.as_str()))
        {
            shared.violate(
                Inv::Push,
                format!(
                    "GET /push/subscriptions names the {} browser's endpoint or keys",
                    b.kind.as_str()
                ),
            );
        }
    }
    vec![format!(
        "browsers: 3 subscribed; the gone one answered 410 {} times from t={:.1} s and {}; {} listed at the end",
        answered_410(),
        run.gone_at.unwrap_or(f64::NAN),
        if nudged {
            "was removed by one more push (a kill took the first removal)"
        } else {
            "was removed"
        },
        ids.len()
    )]
}

/// What a push may be: a title and a link, no message text.
fn push_fault(push: &Received) -> Option<String> {
    if let Some(why) = &push.refused {
        return Some(format!("refused by the push service: {why}"));
    }
    let mut fields: Vec<&str> = push
        .payload
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default();
    fields.sort_unstable();
    if fields != ["title", "url"] {
        return Some(format!("fields {fields:?}, not a title and a url only"));
    }
    if push.payload["title"].as_str().is_none_or(str::is_empty) {
        return Some("an empty title".into());
    }
    let url = push.payload["url"].as_str().unwrap_or("");
    let chat_link = url.strip_prefix("/#/c/").is_some_and(|id| {
        !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    });
    if !(chat_link || url == "/") {
        return Some(format!("the link {url:?} is not /#/c/<chat> or /"));
    }
    if push.text.contains(MARKER) || push.text.contains(PROMPT) || push.text.contains("body=") {
        return Some("it carries a message's, a prompt's or an entry body's text".into());
    }
    None
}

fn check_pushes(shared: &Shared, run: &Run) -> Vec<String> {
    let received = run.fake.received();
    let name_of = |kind: Kind| {
        run.browsers
            .iter()
            .find(|b| b.kind == kind)
            .map(|b| b.subscriber.name.clone())
            .unwrap_or_default()
    };
    let (steady, gone) = (name_of(Kind::Steady), name_of(Kind::Gone));
    let (mut own_chats, mut other_chats, mut entries, mut no_chat) = (0, 0, 0, 0);
    let mut faults: BTreeMap<&str, u64> = BTreeMap::new();
    for push in &received {
        if push.name == gone && push.status == 410 {
            continue;
        }
        if let Some(played) = push.played {
            *faults.entry(played).or_default() += 1;
            shared.fault(&format!("push service {played} (flaky browser)"));
        }
        if let Some(why) = push_fault(push) {
            shared.violate(
                Inv::Push,
                format!(
                    "a push to the {} browser: {why}",
                    run.browsers
                        .iter()
                        .find(|b| b.subscriber.name == push.name)
                        .map_or("unknown", |b| b.kind.as_str())
                ),
            );
            continue;
        }
        if push.name != steady {
            continue;
        }
        let title = push.payload["title"].as_str().unwrap_or("");
        let url = push.payload["url"].as_str().unwrap_or("");
        if run.entries.values().any(|e| e.title == title) {
            entries += 1;
        } else if run.own.iter().any(|c| url == format!("/#/c/{c}")) {
            own_chats += 1;
        } else if url == "/" {
            no_chat += 1;
        } else {
            other_chats += 1;
        }
    }
    if own_chats == 0 {
        shared.violate(
            Inv::Push,
            format!(
                "no push reached the steady browser for the {} chats no device watched",
                run.own.len()
            ),
        );
    }
    vec![
        format!(
            "pushes: {} received, all decrypted with a title and a link only; the steady browser's: {own_chats} for the unwatched chats, {other_chats} for other chats, {entries} for its inbox entries, {no_chat} without a chat",
            received.len()
        ),
        format!(
            "flaky browser: {} answered 500, {} answered after {:.1} s",
            faults.get("answered 500").copied().unwrap_or(0),
            faults.get("answered slowly").copied().unwrap_or(0),
            SLOW.as_secs_f64()
        ),
    ]
}

/// The snapshot's settings are the last saved ones.
fn check_settings(shared: &Shared, run: &Run, chat: &str, snapshot: &Value, when: &str) {
    let Some(Some((temperature, prompt))) = run.settings.get(chat) else {
        return;
    };
    let settings = &snapshot["conversation"]["settings"];
    let held = settings["temperature"]
        .as_f64()
        .is_some_and(|t| (t - temperature).abs() < 1e-9)
        && settings["system_prompt"].as_str() == Some(prompt.as_str());
    if !held {
        let shown = settings.to_string().replace(PROMPT, "<prompt>");
        shared.violate(
            Inv::Push,
            format!("chat {chat}: settings {shown} {when}, not temperature {temperature} and the last prompt saved"),
        );
    }
}

/// Every chat holds its last saved settings and permission mode.
async fn check_chats(shared: &Shared, run: &mut Run) -> Vec<String> {
    let mut chats: Vec<String> = run
        .settings
        .keys()
        .chain(run.modes.keys())
        .cloned()
        .collect();
    chats.sort();
    chats.dedup();
    for chat in &chats {
        let path = format!("/conversations/{chat}");
        let Some((200, snapshot)) = ask(shared, &mut run.counts, Method::GET, &path, None).await
        else {
            shared.violate(Inv::Push, format!("chat {chat}: no snapshot at the end"));
            continue;
        };
        check_settings(shared, run, chat, &snapshot, "at the end");
        if let Some(Some(mode)) = run.modes.get(chat) {
            let held = &snapshot["conversation"]["permission_mode"];
            if held.as_str() != Some(mode.as_str()) {
                shared.violate(
                    Inv::Push,
                    format!("chat {chat}: permission mode {held} at the end, not {mode}"),
                );
            }
        }
    }
    let c = &run.counts;
    vec![
        format!(
            "chats: {} messages to its {} unwatched chats; {} settings saved and {} refused (temperature 9) in {} chats; {} permission modes set",
            c.messages,
            run.own.len(),
            c.patches,
            c.bad_patches,
            run.settings.len(),
            c.modes
        ),
    ]
}

/// Ids and read flags of the whole inbox (it keeps 500, the route lists 500).
fn inbox_of(body: &Value) -> Vec<(String, bool)> {
    body["notifications"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| {
            (
                n["id"].as_str().unwrap_or("").to_string(),
                n["read"].as_bool().unwrap_or(false),
            )
        })
        .collect()
}

/// The count route agrees with the list (read between two equal lists),
/// and its own entries are as it left them.
async fn check_inbox(shared: &Shared, run: &mut Run) -> Vec<String> {
    let list_path = "/notifications?limit=500";
    let mut agreed = None;
    for _ in 0..5 {
        let first = ask(shared, &mut run.counts, Method::GET, list_path, None).await;
        let count = ask(
            shared,
            &mut run.counts,
            Method::GET,
            "/notifications/count",
            None,
        )
        .await;
        let second = ask(shared, &mut run.counts, Method::GET, list_path, None).await;
        if let (Some((200, a)), Some((200, count)), Some((200, b))) = (first, count, second) {
            if inbox_of(&a) == inbox_of(&b) {
                agreed = Some((inbox_of(&a), count));
                break;
            }
        }
    }
    let Some((list, count)) = agreed else {
        shared.violate(
            Inv::Push,
            "the inbox's list did not hold still (or answer) for a count in 5 tries".into(),
        );
        return Vec::new();
    };
    let unread = list.iter().filter(|(_, read)| !read).count() as i64;
    if count["unread"].as_i64() != Some(unread)
        || count["total"].as_i64() != Some(list.len() as i64)
    {
        shared.violate(
            Inv::Push,
            format!(
                "GET /notifications/count says {count}, the list holds {} entries, {unread} unread",
                list.len()
            ),
        );
    }
    let held: HashMap<&str, bool> = list.iter().map(|(id, read)| (id.as_str(), *read)).collect();
    let full = list.len() >= 500;
    let (mut kept, mut gone) = (0, 0);
    for (id, entry) in &run.entries {
        match (held.get(id.as_str()), entry.deleted) {
            (Some(_), Some(true)) => shared.violate(
                Inv::Push,
                format!("inbox entry {id} was deleted and is listed"),
            ),
            (None, Some(false)) if !full => shared.violate(
                Inv::Push,
                format!("inbox entry {id} was never deleted and is not listed"),
            ),
            (Some(read), _) => {
                kept += 1;
                if entry.read.is_some_and(|r| r != *read) {
                    shared.violate(
                        Inv::Push,
                        format!("inbox entry {id} is read={read}, not as it was left"),
                    );
                }
            }
            (None, _) => gone += 1,
        }
    }
    let c = &run.counts;
    vec![format!(
        "inbox: {} entries posted ({} marked read, {} deleted); {kept} of them listed and {gone} gone at the end; {} entries in all, {unread} unread, as the count route says",
        c.posted,
        c.marked,
        c.deleted,
        list.len()
    )]
}
