//! The connectord part: the real `connectord` reading a fake Telegram Bot
//! API (one bot: private chats and groups) and a fake Slack (one app: DMs
//! and channel threads), chatd told where it listens
//! (`QSE_CONNECTORS_SOCKET`). 100 fake people send up to 20 messages a
//! second in all, each message a unique id the engine answers with
//! (`[sim text=…Q<id>Z id=<id>]`), one message in flight per person (a
//! second one would wait in chatd and share the first one's answer, by
//! design); 3 of each kind of chat send only while connectord is dead, so
//! every kill has messages that arrive while it is down. Meanwhile the fakes answer 429 with `retry_after` and cut
//! connections (Telegram's calls; Slack's Web API and its socket) at
//! random, connectord is SIGKILLed mid-answer inside the kill window and
//! started again on the same data (a second one on that data must wait as a
//! standby naming the pid that runs), and chatd's own killer SIGKILLs chatd.
//!
//! connectord's promise (docs/connectors.md): a message is stored in the
//! same transaction as the read position (Telegram's offset; Slack's ack
//! after the store), so a message that arrived while connectord was dead is
//! read after the restart (Telegram's updates fetched again from the stored
//! offset, Slack's envelopes sent again until acked), and one that arrived
//! while chatd was dead waits queued until chatd takes it. So every message
//! gets exactly one answer, with no exception for the kills: `Inv::Bots`.

use super::*;

use futures_util::future::BoxFuture;
use futures_util::FutureExt as _;
use tandem_tests::daemon::Daemon;
use tandem_tests::fakebot::{FakeBot, Fault};
use tandem_tests::fakeslack::{FakeSlack, APP_TOKEN, BOT_TOKEN};

use crate::bots_ledger::*;

const TG_PRIVATE: usize = 34;
const TG_GROUPS: usize = 16;
const SLACK_DMS: usize = 25;
const SLACK_THREADS: usize = 25;
/// Messages a second, all senders together.
const RATE: f64 = 20.0;
/// A person sends again at least this long after their last message (and
/// after its answer): connectord lets 20 a minute through per sender.
const SENDER_GAP_S: f64 = 4.0;
const BOT_NAME: &str = "soak_helper_bot";

#[derive(Default)]
struct Stats {
    sent_tg: AtomicU64,
    sent_slack: AtomicU64,
    skipped: AtomicU64,
    while_down: AtomicU64,
    tg_429: AtomicU64,
    tg_cuts: AtomicU64,
    slack_429: AtomicU64,
    slack_cuts: AtomicU64,
    slack_disconnects: AtomicU64,
    /// Faults not armed: one still waiting for its call, or the last call failed.
    faults_held: AtomicU64,
    kills: AtomicU64,
    kills_mid_answer: AtomicU64,
    standbys: AtomicU64,
}

pub(crate) struct Bots {
    dir: PathBuf,
    socket: PathBuf,
    tg_token: String,
    bot: FakeBot,
    slack: FakeSlack,
    cd: tokio::sync::Mutex<Daemon>,
    /// Second connectords started on the same data (kept for their logs).
    standbys: tokio::sync::Mutex<Vec<Daemon>>,
    ledger: Mutex<Ledger>,
    stats: Stats,
    down: AtomicBool,
    kills: Mutex<Vec<(f64, f64)>>,
    /// When the load ended (s from its start).
    load_end: Mutex<f64>,
}

impl Bots {
    /// The fakes started and connectord's folder made; connectord starts
    /// in `drive`, once chatd's address is known.
    pub(crate) async fn prepare(ctx: &Prepare) -> anyhow::Result<Bots> {
        let tg_token = format!(
            "{}:AAE-soak-{:016x}",
            6_000_000 + ctx.seed % 1_000_000,
            ctx.seed.rotate_left(17)
        );
        let bot = FakeBot::start(&tg_token, BOT_NAME).await?;
        let slack = FakeSlack::start().await?;
        let home = tempfile::Builder::new()
            .prefix("cd-")
            .tempdir_in(&ctx.dir)?;
        let socket = tandem_tests::connectord::socket_in(home.path());
        let daemon = Daemon::new("connectord", home, socket.clone());
        let mut ledger = Ledger::default();
        for i in 0..TG_PRIVATE {
            let user = 9_000_000 + i as i64;
            ledger.add_sender(sender(Kind::Private, i, user.to_string(), user.to_string()));
        }
        for i in 0..TG_GROUPS {
            let chat = -100_000_000 - i as i64;
            let user = 9_100_000 + i as i64;
            ledger.add_sender(sender(Kind::Group, i, chat.to_string(), user.to_string()));
        }
        for i in 0..SLACK_DMS {
            let user = format!("U0SOAKD{i:03}");
            ledger.add_sender(sender(Kind::Dm, i, format!("D{user}"), user));
        }
        for i in 0..SLACK_THREADS {
            let user = format!("U0SOAKT{i:03}");
            ledger.add_sender(sender(Kind::Thread, i, format!("C0SOAK{i:03}"), user));
        }
        Ok(Bots {
            dir: ctx.dir.clone(),
            socket,
            tg_token,
            bot,
            slack,
            cd: tokio::sync::Mutex::new(daemon),
            standbys: tokio::sync::Mutex::new(Vec::new()),
            ledger: Mutex::new(ledger),
            stats: Stats::default(),
            down: AtomicBool::new(false),
            kills: Mutex::new(Vec::new()),
            load_end: Mutex::new(0.0),
        })
    }

    /// connectord's config and secrets file (chatd's forward key).
    fn write_config(&self, cd: &Daemon, chatd_url: &str) -> anyhow::Result<()> {
        let secrets = self.dir.join("secrets.env");
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(true)
                .write(true)
                .mode(0o600)
                .open(&secrets)?;
            writeln!(f, "QSE_FORWARD_KEY={FORWARD_KEY}")?;
        }
        let chat_data = self.dir.join("chat-data");
        std::fs::create_dir_all(&chat_data)?;
        std::fs::write(
            &cd.config,
            format!(
                "[connectors]\ndata_dir = \"{}\"\nsocket = \"{}\"\nchat_url = \"{chatd_url}\"\n\
                 chat_data = \"{}\"\nsecrets = \"{}\"\ntelegram_api = \"{}\"\nslack_api = \"{}\"\n",
                self.data().display(),
                self.socket.display(),
                chat_data.display(),
                secrets.display(),
                self.bot.url(),
                self.slack.api_base(),
            ),
        )?;
        Ok(())
    }

    fn data(&self) -> PathBuf {
        // The daemon's own folder holds `data/` (see `write_config`).
        self.socket
            .parent()
            .and_then(Path::parent)
            .map(|home| home.join("data"))
            .unwrap_or_default()
    }

    /// Starts connectord (after a kill too), bounded; registers its pid.
    async fn start_cd(&self, shared: &Shared, cd: &mut Daemon) -> anyhow::Result<u32> {
        let mut last = None;
        for _ in 0..3 {
            match cd.start().await {
                Ok(()) => {
                    let pid = cd.pid().context("connectord's pid")?;
                    shared.started("connectord", pid);
                    self.down.store(false, Ordering::Relaxed);
                    return Ok(pid);
                }
                Err(err) => {
                    cd.kill9();
                    last = Some(err);
                }
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("connectord did not start")))
    }

    async fn run(self: Arc<Self>, shared: Arc<Shared>, seed: u64) -> anyhow::Result<()> {
        let mut rng = StdRng::seed_from_u64(seed);
        {
            let mut cd = self.cd.lock().await;
            self.write_config(&cd, &shared.chatd_url)?;
            let pid = self.start_cd(&shared, &mut cd).await?;
            say(format!(
                "  t={:6.1}s  connectord pid {pid}: Telegram {} and Slack {} (fakes)",
                shared.t(),
                self.bot.url(),
                self.slack.api_base()
            ));
        }
        self.bind(&shared).await?;
        let (from, to) = shared.kill_window();
        let mean = ((to - from) / 2.0).clamp(15.0, 180.0);
        let forced = rng.random_range(from..to.max(from + 1.0));
        let times = schedule(&mut rng, mean, from, to, forced);
        let killer = tokio::spawn(self.clone().killer(shared.clone(), times, rng.random()));
        let faults = tokio::spawn(self.clone().faults(shared.clone(), rng.random()));
        self.load(&shared, &mut rng).await;
        *lock(&self.load_end) = shared.t();
        let _ = tokio::time::timeout(Duration::from_secs(60), killer).await;
        faults.abort();
        self.drain(&shared).await;
        Ok(())
    }

    /// An agent and the two bindings, through chatd's forward (retried
    /// while chatd is down, bounded).
    async fn bind(&self, shared: &Shared) -> anyhow::Result<()> {
        let agent = retry(
            shared,
            "/agents",
            json!({"name": "Soak concierge", "model": "sim-small",
            "instructions": "Answer briefly."}),
        )
        .await?;
        let agent = agent["id"].as_str().context("the agent's id")?.to_string();
        let ledger_allow = |telegram: bool| -> Vec<String> {
            let ledger = lock(&self.ledger);
            ledger
                .senders
                .iter()
                .filter(|s| s.kind.telegram() == telegram)
                .map(|s| s.user.clone())
                .collect()
        };
        retry(
            shared,
            "/connectors",
            json!({"kind": "telegram", "name": "Soak Telegram", "token": self.tg_token,
                   "agent_id": agent, "allowlist": ledger_allow(true)}),
        )
        .await?;
        let slack = retry(
            shared,
            "/connectors",
            json!({"kind": "slack", "name": "Soak Slack", "token": BOT_TOKEN,
                   "app_token": APP_TOKEN, "agent_id": agent, "allowlist": ledger_allow(false)}),
        )
        .await?;
        let id = slack["id"].as_str().context("the Slack binding's id")?;
        tandem_tests::harness::wait_until(
            "the Slack binding connected",
            Duration::from_secs(30),
            || async {
                let (status, one) = shared
                    .call(reqwest::Method::GET, &format!("/connectors/{id}"), None)
                    .await
                    .ok()?;
                (status == 200 && one["status"]["state"] == "connected").then_some(())
            },
        )
        .await?;
        Ok(())
    }

    /// Sends at `RATE` while the phase is `Load`, to a person whose last
    /// message has its answer; reads what the bot posted meanwhile.
    async fn load(&self, shared: &Shared, rng: &mut StdRng) {
        let mut phase = shared.phase.subscribe();
        let tick = Duration::from_secs_f64(1.0 / RATE);
        let mut next = tokio::time::Instant::now();
        while shared.phase() == Phase::Load {
            next += tick;
            let t = shared.t();
            {
                let mut ledger = lock(&self.ledger);
                ledger.track(&self.bot, &self.slack, t);
                let down = self.down.load(Ordering::Relaxed);
                let ready = |s: &Sender| s.outstanding.is_none() && t - s.last_sent >= SENDER_GAP_S;
                // While connectord is dead its witnesses go first.
                let mut idle: Vec<usize> = (0..ledger.senders.len())
                    .filter(|i| down && ledger.senders[*i].witness && ready(&ledger.senders[*i]))
                    .collect();
                if idle.is_empty() {
                    idle = (0..ledger.senders.len())
                        .filter(|i| !ledger.senders[*i].witness && ready(&ledger.senders[*i]))
                        .collect();
                }
                match idle.get(rng.random_range(0..idle.len().max(1))) {
                    Some(&i) => self.send(&mut ledger, i, rng, t),
                    None => inc(&self.stats.skipped),
                }
            }
            let wait = next.saturating_duration_since(tokio::time::Instant::now());
            if !sleep_in(&mut phase, wait, |p| p == Phase::Load).await {
                break;
            }
        }
    }

    fn send(&self, ledger: &mut Ledger, i: usize, rng: &mut StdRng, t: f64) {
        let s = &mut ledger.senders[i];
        s.n += 1;
        let kind = s.kind;
        let id = format!("{}{i}n{}", if kind.telegram() { "t" } else { "s" }, s.n);
        // A literal answer of 4-char pieces; now and then a slow one, so
        // that kills find answers on the way.
        let pad: String = (0..rng.random_range(4..60))
            .map(|k| (b'a' + (k % 26) as u8) as char)
            .collect();
        let tps = if rng.random_bool(0.05) {
            rng.random_range(20..=40)
        } else {
            0
        };
        let words = WORDS[rng.random_range(0..WORDS.len())];
        let text = format!(
            "{words} #{} [sim text={pad}{} tps={tps} id={id}]",
            s.n,
            marker(&id)
        );
        let down = self.down.load(Ordering::Relaxed);
        let platform_id = match kind {
            Kind::Private => {
                let user: i64 = s.user.parse().unwrap_or(0);
                let u = self.bot.push_private(user, &format!("p{user}"), &text);
                format!("update {u}")
            }
            Kind::Group => {
                let user: i64 = s.user.parse().unwrap_or(0);
                let chat: i64 = s.chat.parse().unwrap_or(0);
                let text = format!("@{BOT_NAME} {text}");
                let u = self.bot.push_group(chat, user, &format!("g{user}"), &text);
                format!("update {u}")
            }
            Kind::Dm => {
                let p = self.slack.push_dm(&s.user, &text);
                format!("event {}", p.event_id)
            }
            Kind::Thread => {
                let p = self
                    .slack
                    .push_mention(&s.chat, &s.user, &text, s.thread.as_deref());
                if s.thread.is_none() {
                    s.thread = Some(p.ts.clone());
                }
                format!("event {}", p.event_id)
            }
        };
        s.outstanding = Some(ledger.msgs.len());
        s.last_sent = t;
        ledger.by_id.insert(id.clone(), ledger.msgs.len());
        ledger.msgs.push(Msg {
            sender: i,
            id,
            platform_id,
            sent_t: t,
            answered_t: None,
            while_down: down,
        });
        inc(if kind.telegram() {
            &self.stats.sent_tg
        } else {
            &self.stats.sent_slack
        });
        if down {
            inc(&self.stats.while_down);
        }
    }

    /// After the load: every message answered and every read position
    /// moved past them (Telegram's offset, Slack's acks), bounded.
    async fn drain(&self, shared: &Shared) {
        let bound = Duration::from_secs(90);
        let started = Instant::now();
        loop {
            let waiting = {
                let mut ledger = lock(&self.ledger);
                ledger.track(&self.bot, &self.slack, shared.t());
                ledger.waiting()
            };
            let read = self.bot.unconfirmed() == 0 && self.slack.unacked() == 0;
            if waiting == 0 && read {
                return;
            }
            if started.elapsed() > bound {
                say(format!(
                    "  t={:6.1}s  connectord: {waiting} messages still without an answer {bound:?} after the load \
                     ({} Telegram updates unconfirmed, {} Slack envelopes unacked)",
                    shared.t(),
                    self.bot.unconfirmed(),
                    self.slack.unacked()
                ));
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// connectord SIGKILLed at `times` (inside the kill window), when an
    /// answer shows `Working…` if one does within 3 s; left dead 0.5-3 s,
    /// then started again on the same data; then a second one on that data must wait as a standby.
    async fn killer(self: Arc<Self>, shared: Arc<Shared>, times: Vec<f64>, seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut phase = shared.phase.subscribe();
        for at in times {
            if !until_in_load(&shared, &mut phase, at).await {
                return;
            }
            let looked = Instant::now();
            let mut mid = false;
            while looked.elapsed() < Duration::from_secs(3) {
                if lock(&self.ledger).mid_answer() {
                    mid = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let mut cd = self.cd.lock().await;
            let killed_at = shared.t();
            self.down.store(true, Ordering::Relaxed);
            cd.kill9();
            inc(&self.stats.kills);
            // Dead for a while (the fault's length, not a wait on anything):
            // messages arrive meanwhile, which it must read after its restart.
            let dead = Duration::from_secs_f64(rng.random_range(0.5..3.0));
            tokio::time::sleep(dead).await;
            if mid {
                inc(&self.stats.kills_mid_answer);
                shared.fault("connectord SIGKILL mid-answer + restart");
            } else {
                shared.fault("connectord SIGKILL + restart (no answer showing)");
            }
            let pid = match self.start_cd(&shared, &mut cd).await {
                Ok(pid) => pid,
                Err(err) => {
                    shared.violate(
                        Inv::Health,
                        format!("connectord did not come back after the kill at {killed_at:.1} s: {err:#}"),
                    );
                    return;
                }
            };
            let back = shared.t();
            lock(&self.kills).push((killed_at, back - killed_at));
            say(format!(
                "  t={killed_at:6.1}s  connectord SIGKILLed{}; dead {:.1} s; back as pid {pid} in {:.2} s",
                if mid { " mid-answer" } else { "" },
                dead.as_secs_f64(),
                back - killed_at
            ));
            let config = std::fs::read_to_string(&cd.config).unwrap_or_default();
            drop(cd);
            self.standby(&shared, pid, &config).await;
        }
    }

    /// A second connectord on the same data (a unit and a terminal at once)
    /// waits for the lock, naming the pid that runs, and exits 0 on SIGTERM.
    async fn standby(&self, shared: &Shared, pid: u32, config: &str) {
        shared.fault("second connectord on the same data (must wait as a standby)");
        inc(&self.stats.standbys);
        let result: anyhow::Result<()> = async {
            let home = tempfile::Builder::new()
                .prefix("standby-")
                .tempdir_in(&self.dir)?;
            let socket = self.socket.clone();
            let mut second = Daemon::new("connectord", home, socket);
            std::fs::write(&second.config, config)?;
            second.spawn()?;
            let waits = tandem_tests::harness::wait_until(
                "the second connectord waiting for the lock",
                Duration::from_secs(20),
                || {
                    let log = second.log();
                    async move { log.contains("waiting for its lock").then_some(log) }
                },
            )
            .await;
            let outcome = match waits {
                Ok(log) if log.contains(&format!("(pid {pid}); waiting for its lock")) => Ok(()),
                Ok(log) => Err(anyhow::anyhow!(
                    "its wait does not name pid {pid}: {}",
                    excerpt(&log)
                )),
                Err(err) => Err(err),
            };
            let stopped = second.sigterm(Duration::from_secs(10));
            self.standbys.lock().await.push(second);
            outcome?;
            match stopped {
                Ok(status) if status.success() => Ok(()),
                Ok(status) => Err(anyhow::anyhow!("it exited {status} on SIGTERM")),
                Err(err) => Err(err),
            }
        }
        .await;
        if let Err(err) = result {
            shared.violate(
                Inv::Health,
                format!("a second connectord on the data of pid {pid}: {err:#}"),
            );
        }
    }

    /// 429s with `retry_after` and cut connections at random, on the
    /// calls connectord makes to each platform, while the phase is `Load`.
    async fn faults(self: Arc<Self>, shared: Arc<Shared>, seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut phase = shared.phase.subscribe();
        loop {
            let pause = Duration::from_secs_f64(exponential(&mut rng, 0.7));
            if !sleep_in(&mut phase, pause, |p| p == Phase::Load).await {
                return;
            }
            let tg_method = [
                "sendMessage",
                "editMessageText",
                "getUpdates",
                "sendChatAction",
            ][rng.random_range(0..4)];
            let slack_method = ["chat.postMessage", "chat.update"][rng.random_range(0..2)];
            let roll = rng.random_range(0..100);
            if !self.may_fail(roll, tg_method, slack_method) {
                inc(&self.stats.faults_held);
                continue;
            }
            match roll {
                0..=29 => {
                    let retry_after = rng.random_range(1..=2);
                    self.bot
                        .fail_next(tg_method, Fault::TooMany429 { retry_after });
                    inc(&self.stats.tg_429);
                    shared.fault("Telegram: 429 + retry_after (fake Bot API)");
                }
                30..=59 => {
                    self.bot.fail_next(tg_method, Fault::CutConnection);
                    inc(&self.stats.tg_cuts);
                    shared.fault("Telegram: connection cut (fake Bot API)");
                }
                60..=89 => {
                    self.slack.rate_limit_next(slack_method, 1);
                    inc(&self.stats.slack_429);
                    shared.fault("Slack: 429 + Retry-After (fake Web API)");
                }
                90..=95 => {
                    self.slack.cut();
                    inc(&self.stats.slack_cuts);
                    shared.fault("Slack: Socket Mode connection cut");
                }
                _ => {
                    self.slack.disconnect("refresh_requested");
                    inc(&self.stats.slack_disconnects);
                    shared.fault("Slack: Socket Mode disconnect");
                }
            }
        }
    }

    /// Whether the fault `roll` picked may be armed now: a platform fails a
    /// call at random, it does not keep failing while nobody calls. The fakes
    /// play a fault at the method's next call, whenever that comes, so faults
    /// armed on a clock pile up while a reader backs off (1 s doubling to
    /// connectord's 30 s): past a pause of a few seconds every call would meet
    /// one, for good (the 30 min run at 302 s). So a method gets a fault only
    /// when none waits for it and its last call did not fail: every failure is
    /// followed by a call that goes through.
    fn may_fail(&self, roll: u32, tg_method: &str, slack_method: &str) -> bool {
        match roll {
            0..=59 => {
                self.bot.queued_faults(tg_method) == 0
                    && self.bot.last_status(tg_method).is_none_or(|s| s == 200)
            }
            60..=89 => {
                self.slack.queued_rate_limits(slack_method) == 0
                    && self
                        .slack
                        .calls(slack_method)
                        .last()
                        .is_none_or(|c| c.status != 429)
            }
            _ => true,
        }
    }

    async fn end(self: Arc<Self>, shared: Arc<Shared>) -> PartEnd {
        {
            let mut cd = self.cd.lock().await;
            match cd.sigterm(Duration::from_secs(15)) {
                Ok(status) if status.success() => {}
                Ok(status) => shared.violate(
                    Inv::Health,
                    format!("connectord exited {status} after SIGTERM"),
                ),
                Err(err) => {
                    shared.violate(Inv::Health, format!("connectord did not stop: {err:#}"))
                }
            }
        }
        // What connectord posted up to its exit.
        let (answered, calls_seen, verdict) = {
            let mut ledger = lock(&self.ledger);
            ledger.track(&self.bot, &self.slack, shared.t());
            let answered = ledger
                .msgs
                .iter()
                .filter(|m| m.answered_t.is_some())
                .count();
            let kills: Vec<f64> = lock(&self.kills).iter().map(|(at, _)| *at).collect();
            (answered, ledger.calls_seen, ledger.verdict(&shared, &kills))
        };
        let s = &self.stats;
        let load_s = lock(&self.load_end).max(1.0);
        let sent = get(&s.sent_tg) + get(&s.sent_slack);
        let kills = lock(&self.kills).clone();
        let mut totals = vec![
            format!(
                "messages: {sent} sent ({} Telegram: {TG_PRIVATE} private chats, {TG_GROUPS} groups; \
                 {} Slack: {SLACK_DMS} DMs, {SLACK_THREADS} channel threads), ~{:.1}/s over the load (offered {RATE:.0}/s); \
                 {answered} answered; {} while connectord was down; {} send slots skipped (every person waiting)",
                get(&s.sent_tg),
                get(&s.sent_slack),
                sent as f64 / load_s,
                get(&s.while_down),
                get(&s.skipped),
            ),
            format!(
                "bot calls seen by the fakes: {} sends and edits; Telegram {} calls, {} updates unconfirmed; \
                 Slack {} socket connections, {} envelopes unacked",
                calls_seen,
                self.bot.calls().len(),
                self.bot.unconfirmed(),
                self.slack.connections(),
                self.slack.unacked()
            ),
            format!(
                "faults: Telegram {} 429s, {} cuts; Slack {} 429s, {} socket cuts, {} disconnects; \
                 {} held (the method's last fault not yet followed by a call that went through); \
                 connectord {} SIGKILLs ({} mid-answer) at {}; {} standbys refused the data",
                get(&s.tg_429),
                get(&s.tg_cuts),
                get(&s.slack_429),
                get(&s.slack_cuts),
                get(&s.slack_disconnects),
                get(&s.faults_held),
                get(&s.kills),
                get(&s.kills_mid_answer),
                kills
                    .iter()
                    .map(|(t, back)| format!("{t:.1} s (back in {back:.2} s)"))
                    .collect::<Vec<_>>()
                    .join(", "),
                get(&s.standbys),
            ),
        ];
        totals.extend(verdict);
        let mut logs = vec![("connectord".to_string(), self.cd.lock().await.log_path())];
        for (n, second) in self.standbys.lock().await.iter().enumerate() {
            logs.push((format!("connectord-standby-{}", n + 1), second.log_path()));
        }
        PartEnd {
            totals,
            logs,
            data: vec![self.data()],
            secrets: vec![
                self.tg_token.clone(),
                BOT_TOKEN.to_string(),
                APP_TOKEN.to_string(),
            ],
        }
    }
}

/// Of each kind of chat, this many people send only while connectord is dead.
const WITNESSES: usize = 3;

fn sender(kind: Kind, i: usize, chat: String, user: String) -> Sender {
    Sender {
        kind,
        chat,
        user,
        thread: None,
        outstanding: None,
        last_sent: -SENDER_GAP_S,
        witness: i < WITNESSES,
        n: 0,
    }
}

/// POST `path` through chatd until it answers 201 (chatd may be down for a
/// kill), bounded; the body.
async fn retry(shared: &Shared, path: &str, body: Value) -> anyhow::Result<Value> {
    tandem_tests::harness::wait_until(&format!("POST {path}"), Duration::from_secs(60), || {
        let body = body.clone();
        async move {
            match shared.call(reqwest::Method::POST, path, Some(body)).await {
                Ok((201, made)) => Some(made),
                _ => None,
            }
        }
    })
    .await
}

impl Part for Bots {
    fn name(&self) -> PartName {
        PartName::Connectord
    }

    fn chatd_env(&self) -> Vec<(String, String)> {
        vec![(
            "QSE_CONNECTORS_SOCKET".into(),
            self.socket.to_string_lossy().into_owned(),
        )]
    }

    fn drive(self: Arc<Self>, shared: Arc<Shared>, seed: u64) -> BoxFuture<'static, ()> {
        async move {
            if let Err(err) = self.run(shared.clone(), seed).await {
                shared.violate(
                    Inv::Bots,
                    format!("connectord: the part could not run: {err:#}"),
                );
            }
        }
        .boxed()
    }

    fn finish(self: Arc<Self>, shared: Arc<Shared>) -> BoxFuture<'static, PartEnd> {
        self.end(shared).boxed()
    }
}
