//! The egressd part: egressd in the egress tests' network namespaces
//! (`netlab::Lab`: the origins at 203.0.113.10/.11 look public to it), 20
//! chats' commands on their proxy sockets, egressd SIGKILLed and restarted.
//!
//! - Even chats (preset `all`): several tunnels at once to the echo origin
//!   at 203.0.113.10:443, random chunks checked as they come back, and SSRF
//!   attempts in every spelling of `egress_load::SPELLINGS`, by CONNECT and
//!   plain HTTP. Each refused address is an origin the lab serves (the box's
//!   loopback, and 10/8, 172.16/12, 192.168/16, CGNAT, metadata and ULA
//!   addresses in the origins' namespace): `Inv::Ssrf` fails when any of
//!   them counted a connection, naming it, its count, the chat and the
//!   spelling, and when egressd answered an attempt with anything but a
//!   refusal. egressd is a proxy: it follows no redirect (a 3xx goes to the
//!   command, whose next request is checked anew), so there are none here.
//! - Odd chats (preset `off`, an allow rule for the tunnels' origin): the
//!   same tunnels, and hosts outside the preset (names of 203.0.113.11)
//!   that ask the chat's owner on a card through chatd; the part answers
//!   once, always or deny at random. A denied host must get no byte (the
//!   origin says), an allowed one its mark echoed.
//! - egressd SIGKILLed inside `Shared::kill_window` (at least once): tunnels
//!   in flight are cut and counted, clients come back when it does, the
//!   refusals after a restart are counted, and a second egressd on its data
//!   must be refused naming the one that runs.

use super::*;

use egress_load::*;
use futures_util::future::BoxFuture;
use tandem_tests::netlab::{self, call, Lab, Options};

/// Chats of chatd that get an egress socket.
const CHATS: usize = 20;
/// Tunnels each chat keeps going at once.
const TUNNELS_PER_CHAT: usize = 3;
/// The public echo origin the tunnels reach.
const TUNNEL_TARGET: &str = "203.0.113.10:443";
/// The address the card hosts' names resolve to.
const CARD_ORIGIN: &str = "203.0.113.11";

#[derive(Default)]
pub(crate) struct Tally {
    opened: AtomicU64,
    whole: AtomicU64,
    cut: AtomicU64,
    bytes: AtomicU64,
    attempts: AtomicU64,
    refused_after_restart: AtomicU64,
    cards_asked: AtomicU64,
    cards_allowed: AtomicU64,
    cards_denied: AtomicU64,
    cards_unwatched: AtomicU64,
    cards_other: AtomicU64,
    card_rules_removed: AtomicU64,
    kills: AtomicU64,
    seconds: AtomicU64,
}

/// Attempts of one spelling egressd let through: how many, by which chats
/// and forms, its first answer line.
type NotRefused = (u64, std::collections::BTreeSet<String>, String);

pub(crate) struct Egress {
    lab: tokio::sync::Mutex<Lab>,
    api: PathBuf,
    log: PathBuf,
    data: PathBuf,
    key: String,
    sockets: PathBuf,
    seed: u64,
    book: Book,
    tally: Tally,
    /// Refusals by spelling class.
    classes: Mutex<BTreeMap<&'static str, u64>>,
    /// egressd's generation: +1 at each kill (a tunnel that saw it change was cut by it).
    generation: AtomicU64,
    up: AtomicBool,
    /// The card hosts and what was decided: (chat, name, decision, reached).
    cards: Mutex<Vec<(String, String, &'static str, bool)>>,
    /// SSRF attempts egressd did not refuse, by spelling: (count, chats and
    /// forms, the first answer line).
    not_refused: Mutex<BTreeMap<usize, NotRefused>>,
    /// Card names per chat (the lab's /etc/hosts has them).
    card_names: usize,
}

impl Egress {
    /// The lab (root only: a clear failure otherwise), its extra origins
    /// and names; egressd runs in it before chatd starts.
    pub(crate) async fn prepare(ctx: &Prepare) -> anyhow::Result<Egress> {
        if !netlab::root_with_tools() {
            bail!(
                "egressd's part needs root and ip, nft, unshare, setpriv, socat, curl \
                 (network namespaces, as the egress tests build them): run the soak as root, \
                 as CI does, or leave egressd out with --parts"
            );
        }
        // Lab::start_with asserts; its panic becomes this part's error.
        let mut lab = tokio::spawn(Lab::start_with(Options {
            extra: "card_wait_s = 10\n",
            ..Options::default()
        }))
        .await
        .map_err(|e| anyhow::anyhow!("building egressd's lab: {e}"))?;
        let book: Book = Arc::default();
        let origins = lab.origins();
        for addr in REFUSED_ORIGINS {
            netlab::ok(&["ip", "-n", &origins.name, "addr", "add", addr, "dev", "lo"]).await;
            serve_counting(origins.tcp_listener(&join(addr, 80)), book.clone());
        }
        for addr in ["203.0.113.10", CARD_ORIGIN] {
            serve_counting(origins.tcp_listener(&join(addr, 443)), book.clone());
        }
        // IPv6 towards the origins; every address routed there.
        let host = &lab.host;
        for (ns, address) in [(host, "2001:db8:5::1/64"), (origins, "2001:db8:5::2/64")] {
            let dev = if ns.name == host.name { "v0" } else { "v1" };
            netlab::ok(&[
                "ip", "-n", &ns.name, "addr", "add", address, "dev", dev, "nodad",
            ])
            .await;
        }
        netlab::ok(&[
            "ip",
            "-n",
            &host.name,
            "route",
            "add",
            "default",
            "via",
            "203.0.113.10",
        ])
        .await;
        netlab::ok(&[
            "ip",
            "-n",
            &host.name,
            "-6",
            "route",
            "add",
            "default",
            "via",
            "2001:db8:5::2",
        ])
        .await;
        // Anything of the box's own (loopback, unspecified, its addresses).
        serve_counting(host.tcp_listener("[::]:80"), book.clone());
        // Names: read by egressd's lookups at each connection.
        let card_names = ((ctx.duration / 2.0) as usize + 10).min(2000);
        let mut names = String::from(HOSTS);
        for chat in 0..CHATS {
            for n in 0..card_names {
                names.push_str(&format!("{CARD_ORIGIN} k{chat}n{n}.test\n"));
            }
        }
        let hosts = lab.dir.path().join("etc/hosts");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&hosts)
            .and_then(|mut f| f.write_all(names.as_bytes()))
            .with_context(|| format!("adding names to {}", hosts.display()))?;
        // The lab's own egressd is replaced by one of the soak's (so every
        // process is registered from the same place).
        lab.restart_egressd(Duration::from_secs(30)).await?;
        Ok(Egress {
            api: lab.api.clone(),
            log: lab.dir.path().join("egressd.log"),
            data: lab.dir.path().join("egress"),
            key: lab.key.clone(),
            sockets: lab.dir.path().join("chat/egress"),
            lab: tokio::sync::Mutex::new(lab),
            seed: ctx.seed,
            book,
            tally: Tally::default(),
            classes: Mutex::new(BTreeMap::new()),
            generation: AtomicU64::new(0),
            up: AtomicBool::new(true),
            cards: Mutex::new(Vec::new()),
            not_refused: Mutex::new(BTreeMap::new()),
            card_names,
        })
    }

    fn socket(&self, chat: &str) -> PathBuf {
        self.sockets.join(chat).join("proxy.sock")
    }

    /// One call on egressd's API, retried (bounded) while it restarts.
    async fn api_call(&self, method: &str, path: &str, body: &str) -> anyhow::Result<Value> {
        let mut last = None;
        for _ in 0..100 {
            match call(&self.api, method, path, Some(body)).await {
                Some((status, answer)) if (200..300).contains(&status) => return Ok(answer),
                other => last = Some(other),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        bail!("egressd's {method} {path} answered {last:?}")
    }

    /// Waits (bounded) while egressd is down; false if it stays down.
    async fn wait_up(&self) -> bool {
        for _ in 0..600 {
            if self.up.load(Ordering::Relaxed) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// A failure of a tunnel or attempt that began in `generation`: cut by a
    /// kill (counted) or not (a violation, named).
    fn failed(&self, shared: &Shared, generation: u64, inv: Inv, what: String) {
        if self.generation.load(Ordering::Relaxed) != generation || !self.up.load(Ordering::Relaxed)
        {
            inc(&self.tally.cut);
        } else {
            shared.violate(inv, format!("egressd: {what}"));
        }
    }

    async fn tunnels(self: Arc<Self>, shared: Arc<Shared>, chat: String, seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed);
        let socket = self.socket(&chat);
        let mut phase = shared.phase.subscribe();
        while shared.phase() == Phase::Load && self.wait_up().await {
            let generation = self.generation.load(Ordering::Relaxed);
            match tunnel(&socket, TUNNEL_TARGET, &mut rng).await {
                Tunnel::Whole(bytes) => {
                    inc(&self.tally.opened);
                    inc(&self.tally.whole);
                    self.tally.bytes.fetch_add(bytes, Ordering::Relaxed);
                }
                Tunnel::Unreachable => {}
                Tunnel::Refused(a) => self.failed(
                    &shared,
                    generation,
                    Inv::Health,
                    format!(
                        "chat {chat}: a tunnel to {TUNNEL_TARGET} was answered {:?}",
                        a.line
                    ),
                ),
                Tunnel::Broken { opened, why } => {
                    if opened {
                        inc(&self.tally.opened);
                    }
                    self.failed(
                        &shared,
                        generation,
                        Inv::Health,
                        format!("chat {chat}: a tunnel to {TUNNEL_TARGET}: {why}"),
                    );
                }
            }
            let pause = Duration::from_millis(rng.random_range(20..200));
            sleep_in(&mut phase, pause, |p| p == Phase::Load).await;
        }
    }

    async fn ssrf(self: Arc<Self>, shared: Arc<Shared>, chat: String, seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed);
        let socket = self.socket(&chat);
        let mut phase = shared.phase.subscribe();
        while shared.phase() == Phase::Load && self.wait_up().await {
            let index = rng.random_range(0..SPELLINGS.len());
            let connect = rng.random_bool(0.5);
            let generation = self.generation.load(Ordering::Relaxed);
            let answer = ssrf_attempt(&socket, &chat, index, connect).await;
            let spelling = &SPELLINGS[index];
            let form = if connect { "CONNECT" } else { "plain HTTP" };
            if answer.connected {
                inc(&self.tally.attempts);
            }
            match answer.status {
                400 | 403 => {
                    *lock(&self.classes).entry(spelling.class).or_default() += 1;
                    if generation > 0 {
                        inc(&self.tally.refused_after_restart);
                    }
                }
                0 if !answer.connected => {}
                0 => self.failed(
                    &shared,
                    generation,
                    Inv::Health,
                    format!(
                        "chat {chat}: {form} to {:?} ({}) got no answer",
                        spelling.host, spelling.class
                    ),
                ),
                _ => {
                    // Named at the end, after what the origins counted.
                    let mut wrong = lock(&self.not_refused);
                    let entry = wrong.entry(index).or_default();
                    entry.0 += 1;
                    entry.1.insert(format!("{chat} by {form}"));
                    if entry.2.is_empty() {
                        entry.2 = answer.line.clone();
                    }
                }
            }
            let pause = Duration::from_millis(rng.random_range(100..600));
            sleep_in(&mut phase, pause, |p| p == Phase::Load).await;
        }
    }

    async fn cards_of(self: Arc<Self>, shared: Arc<Shared>, chat: String, index: usize, seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed);
        let socket = self.socket(&chat);
        let mut phase = shared.phase.subscribe();
        for n in 0..self.card_names {
            let pause = Duration::from_millis(rng.random_range(1000..4000));
            if !sleep_in(&mut phase, pause, |p| p == Phase::Load).await || !self.wait_up().await {
                break;
            }
            let name = format!("k{index}n{n}.test");
            let mark = format!("card {chat} {n}");
            let generation = self.generation.load(Ordering::Relaxed);
            let waiting = tokio::spawn(card_attempt(socket.clone(), name.clone(), mark));
            // The card, in the chat's snapshot, while the command waits.
            let mut decided: Option<(&'static str, bool)> = None;
            while !waiting.is_finished() && decided.is_none() {
                if let Ok(snapshot) = shared.snapshot(&chat).await {
                    let card = snapshot["consents"].as_array().and_then(|cards| {
                        cards
                            .iter()
                            .find(|c| {
                                c["name"] == "egress"
                                    && c["decision"].is_null()
                                    && c["summary"].as_str().is_some_and(|s| s.contains(&name))
                            })
                            .cloned()
                    });
                    if let Some(card) = card {
                        inc(&self.tally.cards_asked);
                        let decision = ["once", "always", "deny"][rng.random_range(0..3usize)];
                        let taken = shared
                            .call(
                                reqwest::Method::POST,
                                &format!("/conversations/{chat}/consent"),
                                Some(json!({"card_id": card["card_id"], "decision": decision})),
                            )
                            .await;
                        decided = Some((decision, matches!(taken, Ok((200, _)))));
                        if decision != "once" {
                            let removed = tidy_card_rules(&shared, &chat).await;
                            self.tally
                                .card_rules_removed
                                .fetch_add(removed, Ordering::Relaxed);
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
            let Ok((answer, echoed)) = waiting.await else {
                continue;
            };
            match (decided, answer.status) {
                (_, 0) if !answer.connected => {}
                (Some(("deny", true)), 200) => shared.violate(
                    Inv::Ssrf,
                    format!("egressd: chat {chat}: {name} was denied on its card, yet the tunnel opened"),
                ),
                (Some(("deny", true)), _) => {
                    inc(&self.tally.cards_denied);
                    lock(&self.cards).push((chat.clone(), name, "deny", false));
                }
                (Some((decision, true)), 200) if echoed => {
                    inc(&self.tally.cards_allowed);
                    lock(&self.cards).push((chat.clone(), name, decision, true));
                }
                (Some((decision, true)), _) => self.failed(
                    &shared,
                    generation,
                    Inv::Health,
                    format!(
                        "chat {chat}: {name} was allowed ({decision}) on its card, then answered {:?} (echoed: {echoed})",
                        answer.line
                    ),
                ),
                (None, 403) if answer.line.contains("403") => {
                    inc(&self.tally.cards_unwatched);
                    lock(&self.cards).push((chat.clone(), name, "deny", false));
                }
                (None, 200) => shared.violate(
                    Inv::Ssrf,
                    format!(
                        "egressd: chat {chat}: {name} is outside the chat's preset, yet it opened with no card answered"
                    ),
                ),
                _ => inc(&self.tally.cards_other),
            }
        }
    }

    async fn killer(self: Arc<Self>, shared: Arc<Shared>, seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed);
        let (from, to) = shared.kill_window();
        let forced = from + (to - from).max(0.0) * rng.random_range(0.2..0.6);
        let times = schedule(&mut rng, ((to - from) / 2.0).max(10.0), from, to, forced);
        let mut phase = shared.phase.subscribe();
        for at in times {
            if !until_in_load(&shared, &mut phase, at).await {
                break;
            }
            let mut lab = self.lab.lock().await;
            let killed_at = shared.t();
            self.up.store(false, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Relaxed);
            lab.kill_egressd();
            shared.fault("egressd SIGKILL + restart");
            inc(&self.tally.kills);
            let pid = match lab.restart_egressd(Duration::from_secs(30)).await {
                Ok(pid) => pid,
                Err(err) => {
                    shared.violate(
                        Inv::Health,
                        format!(
                            "egressd did not come back after the kill at {killed_at:.1} s: {err:#}"
                        ),
                    );
                    return;
                }
            };
            shared.started("egressd", pid);
            self.up.store(true, Ordering::Relaxed);
            say(format!(
                "  t={killed_at:6.1}s  egressd SIGKILLed; back as pid {pid} in {:.2} s",
                shared.t() - killed_at
            ));
            shared.fault("second egressd on the same data");
            match lab.run_second(Duration::from_secs(10)).await {
                Ok(second)
                    if !second.status.success()
                        && second.stderr.contains(&format!("(pid {pid})")) => {}
                Ok(second) => shared.violate(
                    Inv::Health,
                    format!(
                        "a second egressd on the data of pid {pid} ended {} saying {}",
                        second.status,
                        excerpt(&second.stderr)
                    ),
                ),
                Err(err) => shared.violate(
                    Inv::Health,
                    format!("a second egressd on the data of pid {pid}: {err:#}"),
                ),
            }
        }
    }

    /// The origins' word: no refused origin reached; each denied card
    /// host got no byte, each allowed one its mark.
    fn check_origins(&self, shared: &Shared) {
        let book = lock(&self.book).clone();
        for (address, seen) in &book {
            if address.starts_with("203.0.113.") {
                continue;
            }
            if seen.accepted == 0 {
                continue;
            }
            let mut marks: BTreeMap<String, u64> = BTreeMap::new();
            for (chat, i) in seen.lines.iter().filter_map(|l| parse_mark(l)) {
                if let Some(s) = SPELLINGS.get(i) {
                    *marks
                        .entry(format!("chat {chat} spelling {:?} ({})", s.host, s.class))
                        .or_default() += 1;
                }
            }
            let named: Vec<String> = marks
                .iter()
                .map(|(what, n)| format!("{what} x{n}"))
                .collect();
            let aimed: Vec<&str> = SPELLINGS
                .iter()
                .filter(|s| s.aim == address.as_str() || (s.aim == "box" && is_box(address)))
                .map(|s| s.host)
                .collect();
            shared.violate(
                Inv::Ssrf,
                format!(
                    "egressd: the refused origin {address} counted {} connections ({} bytes): {}; spellings aimed there: {aimed:?}",
                    seen.accepted,
                    seen.bytes,
                    if named.is_empty() { "none named itself".to_string() } else { named.join(", ") }
                ),
            );
        }
        for (index, (count, who, line)) in lock(&self.not_refused).iter() {
            let s = &SPELLINGS[*index];
            shared.violate(
                Inv::Ssrf,
                format!(
                    "egressd: {:?} ({}, meaning {}) was not refused {count} times ({}), answered {line:?}",
                    s.host,
                    s.class,
                    s.aim,
                    who.iter().cloned().collect::<Vec<_>>().join(", ")
                ),
            );
        }
        let lines = book
            .get(CARD_ORIGIN)
            .map(|s| s.lines.clone())
            .unwrap_or_default();
        let reached = |chat: &str, name: &str| {
            let n = name
                .trim_start_matches('k')
                .split_once('n')
                .map(|(_, n)| n.trim_end_matches(".test"));
            n.is_some_and(|n| lines.iter().any(|l| *l == format!("card {chat} {n}")))
        };
        for (chat, name, decision, allowed) in lock(&self.cards).iter() {
            let got = reached(chat, name);
            if !allowed && got {
                shared.violate(
                    Inv::Ssrf,
                    format!("egressd: chat {chat}: {name} was refused ({decision}), yet its origin got the command's bytes"),
                );
            }
            if *allowed && !got && lines.len() < 10_000 {
                shared.violate(
                    Inv::Health,
                    format!("egressd: chat {chat}: {name} was allowed ({decision}), yet its origin never saw the command's bytes"),
                );
            }
        }
    }
}

fn join(addr: &str, port: u16) -> String {
    if addr.contains(':') {
        format!("[{addr}]:{port}")
    } else {
        format!("{addr}:{port}")
    }
}

/// An address of egressd's own namespace (its listener on `[::]:80`).
fn is_box(address: &str) -> bool {
    address.starts_with("127.")
        || address == "::1"
        || address == "0.0.0.0"
        || address.starts_with("2001:db8:5:")
}

impl Part for Egress {
    fn name(&self) -> PartName {
        PartName::Egressd
    }

    fn chatd_env(&self) -> Vec<(String, String)> {
        vec![(
            "QSE_EGRESS_SOCKET".into(),
            self.api.to_string_lossy().into_owned(),
        )]
    }

    fn drive(self: Arc<Self>, shared: Arc<Shared>, seed: u64) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let mut rng = StdRng::seed_from_u64(seed ^ self.seed);
            if let Some(pid) = self.lab.lock().await.egressd_pid() {
                shared.started("egressd", pid);
            }
            let chats: Vec<String> = shared.chats.iter().take(CHATS).cloned().collect();
            for (i, chat) in chats.iter().enumerate() {
                let preset = if i % 2 == 0 { "all" } else { "off" };
                let set = self
                    .api_call(
                        "PUT",
                        &format!("/chats/{chat}/egress"),
                        &format!(r#"{{"preset":"{preset}"}}"#),
                    )
                    .await;
                let rule = if i % 2 == 1 {
                    self.api_call(
                        "POST",
                        &format!("/chats/{chat}/rules"),
                        &format!(r#"{{"verdict":"allow","host":"{TUNNEL_TARGET}"}}"#),
                    )
                    .await
                    .map(|_| Value::Null)
                } else {
                    Ok(Value::Null)
                };
                if let Err(err) = set.and(rule) {
                    shared.violate(
                        Inv::Health,
                        format!("egressd: chat {chat}'s egress could not be set: {err:#}"),
                    );
                    return;
                }
            }
            // chatd follows egressd's cards from its start (retrying from 1 s).
            let following = tandem_tests::harness::wait_until(
                "chatd to follow egressd's cards",
                Duration::from_secs(30),
                || async {
                    let (_, health) = call(&self.api, "GET", "/health", None).await?;
                    (health["card_listeners"].as_u64()? >= 1).then_some(())
                },
            )
            .await;
            if let Err(err) = following {
                say(format!(
                    "soak: egressd: {err:#} (cards are refused until it does)"
                ));
            }
            let started = shared.t();
            let mut tasks = vec![tokio::spawn(
                self.clone().killer(shared.clone(), rng.random()),
            )];
            for (i, chat) in chats.iter().enumerate() {
                for _ in 0..TUNNELS_PER_CHAT {
                    tasks.push(tokio::spawn(self.clone().tunnels(
                        shared.clone(),
                        chat.clone(),
                        rng.random(),
                    )));
                }
                if i % 2 == 0 {
                    tasks.push(tokio::spawn(self.clone().ssrf(
                        shared.clone(),
                        chat.clone(),
                        rng.random(),
                    )));
                } else {
                    tasks.push(tokio::spawn(self.clone().cards_of(
                        shared.clone(),
                        chat.clone(),
                        i,
                        rng.random(),
                    )));
                }
            }
            for task in tasks {
                // Each exchange is bounded; a card adds its wait.
                let _ = tokio::time::timeout(Duration::from_secs(120), task).await;
            }
            self.tally
                .seconds
                .store((shared.t() - started) as u64, Ordering::Relaxed);
        })
    }

    fn finish(self: Arc<Self>, shared: Arc<Shared>) -> BoxFuture<'static, PartEnd> {
        Box::pin(async move {
            match self
                .lab
                .lock()
                .await
                .stop_egressd(Duration::from_secs(15))
                .await
            {
                Ok(status) if status.success() => {}
                Ok(status) => shared.violate(
                    Inv::Health,
                    format!("egressd exited {status} after SIGTERM"),
                ),
                Err(err) => shared.violate(Inv::Health, format!("egressd did not stop: {err:#}")),
            }
            self.check_origins(&shared);
            let t = &self.tally;
            if get(&t.kills) > 0 && get(&t.refused_after_restart) == 0 {
                shared.violate(
                    Inv::Ssrf,
                    "egressd: no SSRF attempt was refused after a restart (none was checked)"
                        .into(),
                );
            }
            let classes = lock(&self.classes)
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ");
            let refused: u64 = lock(&self.classes).values().sum();
            let reached: u64 = lock(&self.book)
                .iter()
                .filter(|(a, _)| !a.starts_with("203.0.113."))
                .map(|(_, s)| s.accepted)
                .sum();
            let totals = vec![
                format!(
                    "tunnels: {} opened, {} whole, {} cut by a kill; {} echoed through them ({} chats, {TUNNELS_PER_CHAT} at once each, {} s)",
                    get(&t.opened), get(&t.whole), get(&t.cut), mib(get(&t.bytes) / 1024), CHATS.min(shared.chats.len()), get(&t.seconds)
                ),
                format!(
                    "SSRF attempts: {} ({refused} refused, {} of them after a restart; {} spellings); by class: {classes}; connections the refused origins counted: {reached}",
                    get(&t.attempts), get(&t.refused_after_restart), SPELLINGS.len()
                ),
                format!(
                    "cards: {} asked and answered ({} allowed, {} denied); {} refused at once (no run watching); {} otherwise ended (expired, chatd or egressd restarting); {} card rules deleted (a chat keeps its newest {CARD_RULES_KEPT})",
                    get(&t.cards_asked), get(&t.cards_allowed), get(&t.cards_denied), get(&t.cards_unwatched), get(&t.cards_other), get(&t.card_rules_removed)
                ),
                format!("egressd kills: {}", get(&t.kills)),
            ];
            PartEnd {
                totals,
                logs: vec![("egressd".into(), self.log.clone())],
                data: vec![self.data.clone()],
                secrets: vec![self.key.clone()],
            }
        })
    }
}
