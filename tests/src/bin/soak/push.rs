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
//! may name them (`Inv::Secrets`). The checks are `push_checks.rs`'s.

use super::*;

use futures_util::future::BoxFuture;
use reqwest::Method;
use tandem_tests::fakepush::{FakePush, Subscriber};

use crate::push_checks::*;
use tandem_tests::harness::wait_until;

/// In every message the soak sends (chats.rs' engine cue) and every inbox
/// body posted here: a push that carries it carried a message's text.
pub(crate) const MARKER: &str = "[sim ";
/// Words of every system prompt set here; no push may carry them.
pub(crate) const PROMPT: &str = "soak system prompt";
/// Chats of its own, no device attached: their runs' ends must push.
const OWN_CHATS: usize = 3;
/// The flaky browser's slow answer.
pub(crate) const SLOW: Duration = Duration::from_millis(1500);
/// How long a request is asked again while chatd is down (a restart).
const RIDE: Duration = Duration::from_secs(45);
/// Inbox entries posted per run at most (chatd keeps the newest 500, and
/// triggerd's entries must stay among them).
const MAX_ENTRIES: u64 = 80;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Steady,
    Gone,
    Flaky,
}

impl Kind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::Steady => "steady",
            Kind::Gone => "gone",
            Kind::Flaky => "flaky",
        }
    }
}

pub(crate) struct Browser {
    pub(crate) kind: Kind,
    pub(crate) subscriber: Subscriber,
    pub(crate) id: String,
}

/// An inbox entry posted here: what it should be at the end (`None`: a
/// request whose answer was lost, so either).
pub(crate) struct Entry {
    pub(crate) title: String,
    pub(crate) read: Option<bool>,
    pub(crate) deleted: Option<bool>,
}

#[derive(Default)]
pub(crate) struct Counts {
    pub(crate) messages: u64,
    pub(crate) patches: u64,
    pub(crate) bad_patches: u64,
    pub(crate) modes: u64,
    pub(crate) posted: u64,
    pub(crate) marked: u64,
    pub(crate) deleted: u64,
    pub(crate) retried: u64,
    pub(crate) lost: u64,
}

/// What the load did, for the checks.
pub(crate) struct Run {
    pub(crate) fake: FakePush,
    pub(crate) browsers: Vec<Browser>,
    pub(crate) own: Vec<String>,
    /// Its chats a message went to (each must have been pushed).
    pub(crate) sent_to: std::collections::BTreeSet<String>,
    /// Per chat, the settings last saved (`None`: an answer was lost).
    pub(crate) settings: HashMap<String, Option<(f64, String)>>,
    pub(crate) modes: HashMap<String, Option<String>>,
    pub(crate) entries: BTreeMap<String, Entry>,
    pub(crate) gone_at: Option<f64>,
    pub(crate) counts: Counts,
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
pub(crate) async fn ask(
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
        sent_to: std::collections::BTreeSet::new(),
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
            60..=91 => mark_read(shared, &mut run, rng).await,
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
        Some((200..=202, _)) => {
            run.counts.messages += 1;
            run.sent_to.insert(chat);
        }
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
    if let Some(read) = on_entries(shared, run, Method::POST, "/notifications/read", &ids).await {
        run.counts.marked += ids.len() as u64;
        for id in &ids {
            if let Some(entry) = run.entries.get_mut(id) {
                entry.read = read;
            }
        }
    }
}

async fn delete(shared: &Shared, run: &mut Run, rng: &mut StdRng) {
    // Read ones only, as "Clear read" would: some stay read, some unread.
    let ids = pick(run, rng, 2, |e| e.read == Some(true));
    if let Some(deleted) = on_entries(shared, run, Method::DELETE, "/notifications", &ids).await {
        run.counts.deleted += ids.len() as u64;
        for id in &ids {
            if let Some(entry) = run.entries.get_mut(id) {
                entry.deleted = deleted;
            }
        }
    }
}

/// `{ids}` to an inbox route: `Some(Some(true))` done, `Some(None)` not known
/// (no answer while chatd was down), `None` nothing asked or a refusal (a
/// violation).
async fn on_entries(
    shared: &Shared,
    run: &mut Run,
    method: Method,
    path: &str,
    ids: &[String],
) -> Option<Option<bool>> {
    if ids.is_empty() {
        return None;
    }
    let body = json!({ "ids": ids });
    match ask(shared, &mut run.counts, method.clone(), path, Some(body)).await {
        Some((200, _)) => Some(Some(true)),
        Some((status, body)) => {
            shared.violate(
                Inv::Push,
                format!("{method} {path} answered {status}: {body}"),
            );
            None
        }
        None => Some(None),
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
