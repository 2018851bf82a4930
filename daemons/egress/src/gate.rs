//! Who may reach what: each chat's preset and rules under the
//! administrator's settings, the "Allow once" grants, the consent cards a
//! host inside the ceiling but not allowed raises, and each chat's count of
//! open connections. The proxy asks `admit` before it looks a name up; the
//! address policy comes after, whatever the gate said.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde::Serialize;
use tandem_shared::netpolicy::Host;
use tandem_shared::sync::{lock, read, write};
use tokio::sync::{broadcast, watch};

use crate::policy::{Cards, Preset, Settings};
use crate::store::{Rule, Store};
use crate::verdicts::{RuleSource, RuleVerdict};

/// A chat as the gate knows it.
#[derive(Debug, Clone)]
struct Chat {
    /// `None`: none was set; the settings' `default_preset` holds.
    preset: Option<Preset>,
    /// Whether a person can be asked (runs nobody watches set it off).
    cards: Cards,
    rules: Vec<Rule>,
    /// host:port → until when "Allow once" covers it.
    once: HashMap<(String, u16), Instant>,
    open: usize,
}

impl Chat {
    fn new(preset: Option<Preset>, cards: Cards, rules: Vec<Rule>) -> Chat {
        Chat {
            preset,
            cards,
            rules,
            once: HashMap::new(),
            open: 0,
        }
    }
}

/// A card as chatd shows it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Card {
    pub card_id: String,
    pub chat: String,
    pub host: String,
    pub port: u16,
    pub summary: String,
    pub choices: [&'static str; 3],
    pub created: String,
    pub expires_in_s: u64,
}

/// What the card stream carries.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum CardEvent {
    /// The first line of a stream: the ids of every card waiting now (a
    /// card the reader holds open and this list lacks has ended).
    Sync {
        card_ids: Vec<String>,
    },
    Card(Card),
    Closed {
        card_id: String,
        chat: String,
        outcome: String,
    },
}

/// How a card ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Once,
    Always,
    Deny,
    Expired,
    /// chatd could not ask anyone (no run of the chat, or one nobody watches).
    Declined,
    /// The ceiling was lowered while the card waited.
    OutsideCeiling(String),
}

impl Outcome {
    fn word(&self) -> &'static str {
        match self {
            Outcome::Once => "once",
            Outcome::Always => "always",
            Outcome::Deny => "deny",
            Outcome::Expired => "expired",
            Outcome::Declined => "declined",
            Outcome::OutsideCeiling(_) => "outside_ceiling",
        }
    }
}

struct Pending {
    card: Card,
    deadline: Instant,
    done: watch::Sender<Option<Outcome>>,
}

/// What `answer` did.
#[derive(Debug, PartialEq, Eq)]
pub enum Answered {
    /// The answer was taken (and, for always/deny, the rule saved).
    Taken { rule: Option<Rule> },
    /// The same answer came before.
    Again,
}

/// Why `answer` refused.
#[derive(Debug, PartialEq, Eq)]
pub enum AnswerError {
    Unknown,
    Expired,
    Already(String),
    OutsideCeiling(String),
    BadDecision(String),
}

/// One open connection of a chat; dropping it gives the place back.
pub struct Slot {
    gate: Arc<Gate>,
    chat: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut chats = self.gate.chats();
        if let Some(chat) = chats.get_mut(&self.chat) {
            chat.open = chat.open.saturating_sub(1);
        }
    }
}

pub struct Gate {
    settings: RwLock<Arc<Settings>>,
    chats: Mutex<HashMap<String, Chat>>,
    pending: Mutex<HashMap<String, Pending>>,
    /// Answered and expired cards, so a repeated answer is told apart from
    /// a late one (kept for an hour).
    closed: Mutex<HashMap<String, (String, Outcome, Instant)>>,
    events: broadcast::Sender<CardEvent>,
    store: Arc<Store>,
}

impl Gate {
    /// A gate over the chats and rules saved in `store`.
    pub fn new(settings: Settings, store: Arc<Store>) -> anyhow::Result<Arc<Gate>> {
        let mut chats = HashMap::new();
        for (id, preset, cards) in store.chats()? {
            // An unknown preset in the file reads as off: fail closed.
            let preset = Preset::parse(&preset).unwrap_or(Preset::Off);
            let rules = store.rules(&id)?;
            chats.insert(id, Chat::new(Some(preset), cards, rules));
        }
        let (events, _) = broadcast::channel(256);
        Ok(Arc::new(Gate {
            settings: RwLock::new(Arc::new(settings)),
            chats: Mutex::new(chats),
            pending: Mutex::new(HashMap::new()),
            closed: Mutex::new(HashMap::new()),
            events,
            store,
        }))
    }

    // The locks below guard plain maps; nothing panics while holding one, so
    // a poisoned lock still holds consistent data.
    fn chats(&self) -> std::sync::MutexGuard<'_, HashMap<String, Chat>> {
        lock(&self.chats)
    }
    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        lock(&self.pending)
    }
    fn closed(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, Outcome, Instant)>> {
        lock(&self.closed)
    }

    pub fn settings(&self) -> Arc<Settings> {
        read(&self.settings).clone()
    }

    /// New settings (SIGHUP): every later decision uses them.
    pub fn reload(&self, settings: Settings) {
        *write(&self.settings) = Arc::new(settings);
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Sets a chat's preset and whether cards may be shown for it.
    pub fn set_chat(&self, chat: &str, preset: Preset, cards: Cards) -> rusqlite::Result<()> {
        self.store.set_chat(chat, preset.as_str(), cards)?;
        let mut chats = self.chats();
        let entry = chats
            .entry(chat.to_string())
            .or_insert_with(|| Chat::new(Some(preset), cards, Vec::new()));
        entry.preset = Some(preset);
        entry.cards = cards;
        Ok(())
    }

    /// A chat's preset and cards switch; a chat nobody set a preset for has
    /// the default preset and may ask.
    pub fn chat(&self, chat: &str) -> (Preset, Cards) {
        let default = self.settings().default_preset;
        self.chats()
            .get(chat)
            .map(|c| (c.preset.unwrap_or(default), c.cards))
            .unwrap_or((default, Cards::Ask))
    }

    pub fn known(&self, chat: &str) -> bool {
        self.chats().contains_key(chat)
    }

    pub fn rules(&self, chat: &str) -> Vec<Rule> {
        self.chats()
            .get(chat)
            .map(|c| c.rules.clone())
            .unwrap_or_default()
    }

    /// Saves a rule (the same host:port's older rule is replaced).
    pub fn add_rule(
        &self,
        chat: &str,
        verdict: RuleVerdict,
        host: &str,
        port: u16,
        source: RuleSource,
    ) -> rusqlite::Result<Rule> {
        let rule = self.store.add_rule(chat, verdict, host, port, source)?;
        let mut chats = self.chats();
        let entry = chats
            .entry(chat.to_string())
            .or_insert_with(|| Chat::new(None, Cards::Ask, Vec::new()));
        entry
            .rules
            .retain(|r| !(r.host == rule.host && r.port == rule.port));
        entry.rules.push(rule.clone());
        Ok(rule)
    }

    pub fn remove_rule(&self, chat: &str, id: &str) -> rusqlite::Result<bool> {
        let removed = self.store.remove_rule(chat, id)?;
        if let Some(entry) = self.chats().get_mut(chat) {
            entry.rules.retain(|r| r.id != id);
        }
        Ok(removed)
    }

    /// A place for one more connection of `chat`, or the number it has.
    pub fn acquire(self: &Arc<Gate>, chat: &str) -> Result<Slot, usize> {
        let most = self.settings().tunnels_per_chat;
        let mut chats = self.chats();
        let entry = chats
            .entry(chat.to_string())
            .or_insert_with(|| Chat::new(None, Cards::Ask, Vec::new()));
        if entry.open >= most {
            return Err(entry.open);
        }
        entry.open += 1;
        Ok(Slot {
            gate: self.clone(),
            chat: chat.to_string(),
        })
    }

    /// Whether `chat` may reach `host:port`; `Ok` carries the reason for the
    /// audit, `Err` the one line the command sees. May wait for a card.
    /// `asker` opens the card's line: "A command in this chat", "This
    /// chat's web tools".
    pub async fn admit(
        &self,
        chat: &str,
        host: &Host,
        host_text: &str,
        port: u16,
        asker: &str,
    ) -> Result<String, String> {
        let settings = self.settings();
        if !settings.ports.contains(&port) {
            return Err(format!(
                "port {port} is not open (open: {})",
                settings
                    .ports
                    .iter()
                    .map(u16::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let (preset, cards, rule, once) = {
            let chats = self.chats();
            match chats.get(chat) {
                Some(c) => (
                    c.preset.unwrap_or(settings.default_preset),
                    c.cards,
                    c.rules
                        .iter()
                        .find(|r| r.host == host_text && r.port == port)
                        .map(|r| r.verdict),
                    c.once
                        .get(&(host_text.to_string(), port))
                        .is_some_and(|until| *until > Instant::now()),
                ),
                None => (settings.default_preset, Cards::Ask, None, false),
            }
        };
        let target = format!("{host_text}:{port}");
        if rule == Some(RuleVerdict::Deny) {
            return Err(format!("{target} is denied by this chat's rule"));
        }
        if settings.always_allowed(host_text, port) {
            return Ok("always allowed by the administrator".into());
        }
        settings.inside_ceiling(host, host_text)?;
        if rule == Some(RuleVerdict::Allow) {
            return Ok("allowed by this chat's rule".into());
        }
        match preset.capped(settings.ceiling) {
            Preset::All => return Ok("allowed by the preset (all)".into()),
            Preset::Registries if settings.is_registry(host) => {
                return Ok("allowed by the preset (registries)".into())
            }
            _ => {}
        }
        if once {
            return Ok("allowed once by a person".into());
        }
        let not_allowed = format!(
            "{target} is not allowed for this chat (preset {})",
            preset.as_str()
        );
        if cards == Cards::Never {
            return Err(format!(
                "{not_allowed}, and nobody watches this chat's run to allow it"
            ));
        }
        if self.events.receiver_count() == 0 {
            return Err(format!(
                "{not_allowed}, and no one can be asked now (chatd is not listening for cards)"
            ));
        }
        match self
            .ask(chat, host_text, port, asker, settings.card_wait)
            .await
        {
            Outcome::Once => Ok("allowed once by a person".into()),
            Outcome::Always => Ok("allowed for this chat by a person".into()),
            Outcome::Deny => Err(format!("{target} was denied by a person")),
            Outcome::Expired => Err(format!(
                "{not_allowed}, and nobody answered the card in {} s",
                settings.card_wait.as_secs()
            )),
            Outcome::Declined => Err(format!(
                "{not_allowed}, and nobody watches this chat's run to allow it"
            )),
            Outcome::OutsideCeiling(why) => Err(why),
        }
    }

    /// Shows a card for chat → host:port (or joins the one already shown)
    /// and waits for its end.
    async fn ask(&self, chat: &str, host: &str, port: u16, asker: &str, wait: Duration) -> Outcome {
        let (card_id, mut done, deadline) = {
            let mut pending = self.pending();
            let existing = pending
                .values()
                .find(|p| p.card.chat == chat && p.card.host == host && p.card.port == port);
            match existing {
                Some(p) => (p.card.card_id.clone(), p.done.subscribe(), p.deadline),
                None => {
                    let card = Card {
                        card_id: new_card_id(),
                        chat: chat.to_string(),
                        host: host.to_string(),
                        port,
                        summary: format!("{asker} wants to reach {host}:{port}"),
                        choices: ["once", "always", "deny"],
                        created: tandem_shared::time::now_rfc3339(),
                        expires_in_s: wait.as_secs(),
                    };
                    let (tx, rx) = watch::channel(None);
                    let deadline = Instant::now() + wait;
                    let id = card.card_id.clone();
                    tracing::info!(chat, card = %id, port, "card shown");
                    let _ = self.events.send(CardEvent::Card(card.clone()));
                    pending.insert(
                        id.clone(),
                        Pending {
                            card,
                            deadline,
                            done: tx,
                        },
                    );
                    (id, rx, deadline)
                }
            }
        };
        let waited = tokio::time::timeout_at(
            tokio::time::Instant::from_std(deadline),
            done.wait_for(|o| o.is_some()),
        )
        .await;
        if let Ok(Ok(outcome)) = waited {
            // wait_for only returns a Some.
            return outcome.clone().unwrap_or(Outcome::Expired);
        }
        drop(waited);
        if self.close(&card_id, Outcome::Expired) {
            return Outcome::Expired;
        }
        // An answer claimed the card at the deadline: its outcome comes in
        // a moment (the rule is being saved).
        let settled =
            tokio::time::timeout(Duration::from_secs(5), done.wait_for(|o| o.is_some())).await;
        match settled {
            Ok(Ok(outcome)) => outcome.clone().unwrap_or(Outcome::Expired),
            _ => Outcome::Expired,
        }
    }

    /// Ends a pending card with `outcome`; false when it had ended already.
    fn close(&self, card_id: &str, outcome: Outcome) -> bool {
        let Some(p) = self.pending().remove(card_id) else {
            return false;
        };
        self.finish(p, outcome);
        true
    }

    /// Tells the card's waiters and chatd how it ended, and keeps the
    /// outcome a while so a repeated answer is told apart from a late one.
    fn finish(&self, p: Pending, outcome: Outcome) {
        let card_id = p.card.card_id.clone();
        let _ = p.done.send(Some(outcome.clone()));
        tracing::info!(chat = %p.card.chat, card = %card_id, outcome = outcome.word(), "card closed");
        let _ = self.events.send(CardEvent::Closed {
            card_id: card_id.clone(),
            chat: p.card.chat.clone(),
            outcome: outcome.word().to_string(),
        });
        let mut closed = self.closed();
        closed.retain(|_, (_, _, at)| at.elapsed() < Duration::from_secs(3600));
        closed.insert(card_id, (p.card.chat, outcome, Instant::now()));
    }

    /// A person's answer (`once`, `always`, `deny`) or chatd's `decline`.
    pub fn answer(
        &self,
        chat: &str,
        card_id: &str,
        decision: &str,
    ) -> Result<Answered, AnswerError> {
        let wanted = match decision {
            "once" => Outcome::Once,
            "always" => Outcome::Always,
            "deny" => Outcome::Deny,
            "decline" => Outcome::Declined,
            other => {
                return Err(AnswerError::BadDecision(format!(
                    "{other:?} is not an answer: use once, always or deny"
                )))
            }
        };
        // The card is claimed first (taken out of the waiting ones, before
        // its deadline), so an answer and the expiry never both win.
        let claimed = {
            let mut pending = self.pending();
            let ours = pending
                .get(card_id)
                .is_some_and(|p| p.card.chat == chat && p.deadline > Instant::now());
            if ours {
                pending.remove(card_id)
            } else {
                None
            }
        };
        let Some(p) = claimed else {
            return match self.closed().get(card_id) {
                Some((owner, _, _)) if owner != chat => Err(AnswerError::Unknown),
                Some((_, given, _)) if *given == wanted => Ok(Answered::Again),
                Some((_, Outcome::Expired | Outcome::Declined, _)) => Err(AnswerError::Expired),
                Some((_, Outcome::OutsideCeiling(why), _)) => {
                    Err(AnswerError::OutsideCeiling(why.clone()))
                }
                Some((_, given, _)) => Err(AnswerError::Already(given.word().to_string())),
                // Waiting but past its deadline: its waiter closes it now.
                None if self
                    .pending()
                    .get(card_id)
                    .is_some_and(|p| p.card.chat == chat) =>
                {
                    Err(AnswerError::Expired)
                }
                None => Err(AnswerError::Unknown),
            };
        };
        let card = p.card.clone();
        let settings = self.settings();
        let host = tandem_shared::netpolicy::parse_host(&card.host)
            .unwrap_or_else(|_| Host::Name(card.host.clone()));
        if matches!(wanted, Outcome::Once | Outcome::Always) {
            if let Err(why) = settings.inside_ceiling(&host, &card.host) {
                let why = format!("{why} (the ceiling changed while the card waited)");
                self.finish(p, Outcome::OutsideCeiling(why.clone()));
                return Err(AnswerError::OutsideCeiling(why));
            }
        }
        let rule = match wanted {
            Outcome::Always | Outcome::Deny => {
                let verdict = if wanted == Outcome::Always {
                    RuleVerdict::Allow
                } else {
                    RuleVerdict::Deny
                };
                match self.add_rule(chat, verdict, &card.host, card.port, RuleSource::Card) {
                    Ok(rule) => Some(rule),
                    Err(e) => {
                        // Fail closed: without the saved rule the answer is a refusal.
                        tracing::error!(chat, card = card_id, error = %e, "a card's rule was not saved");
                        self.finish(p, Outcome::Declined);
                        return Err(AnswerError::Expired);
                    }
                }
            }
            Outcome::Once => {
                if let Some(entry) = self.chats().get_mut(chat) {
                    entry.once.retain(|_, until| *until > Instant::now());
                    entry.once.insert(
                        (card.host.clone(), card.port),
                        Instant::now() + settings.once,
                    );
                }
                None
            }
            _ => None,
        };
        self.finish(p, wanted);
        Ok(Answered::Taken { rule })
    }

    /// The cards waiting now, and every card event from here on.
    pub fn subscribe(&self) -> (Vec<Card>, broadcast::Receiver<CardEvent>) {
        // Subscribed under the pending lock, so no card falls between the two.
        let pending = self.pending();
        let rx = self.events.subscribe();
        let mut cards: Vec<Card> = pending.values().map(|p| p.card.clone()).collect();
        cards.sort_by(|a, b| a.created.cmp(&b.created));
        (cards, rx)
    }

    /// How many follow the card stream (chatd, when it is up).
    pub fn listeners(&self) -> usize {
        self.events.receiver_count()
    }

    pub fn pending_cards(&self) -> Vec<Card> {
        self.subscribe().0
    }
}

fn new_card_id() -> String {
    let bytes: [u8; 8] = rand::random();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("eg_{hex}")
}
