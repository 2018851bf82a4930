//! The bot part's ledger: the fake senders (Telegram private chats and
//! groups, Slack DMs and channel threads, one person each), every message
//! they sent with its unique id, and every message the bot posted or edited
//! as the fakes saw it. Each sender has at most one message waiting for its
//! answer, so the bot messages that appear in its chat meanwhile are that
//! message's; a done answer also carries the id itself (`Q<id>Z`, the
//! engine's literal answer), so a late second answer is pinned to the
//! message it repeats. `verdict` holds every message to exactly one answer.

use super::*;

use tandem_tests::fakebot::FakeBot;
use tandem_tests::fakeslack::FakeSlack;

/// What connectord shows while a run works (progress mode, and Slack always).
pub(crate) const WORKING: &str = "Working…";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A Telegram private chat.
    Private,
    /// A Telegram group, the bot named in each message.
    Group,
    /// A Slack DM.
    Dm,
    /// A Slack channel thread, the bot named in each message.
    Thread,
}

impl Kind {
    pub(crate) fn telegram(self) -> bool {
        matches!(self, Kind::Private | Kind::Group)
    }
}

/// One fake person in one chat (so each chat has one message in flight at most).
pub(crate) struct Sender {
    pub(crate) kind: Kind,
    /// Telegram: the chat id (a group's is negative); Slack: the channel.
    pub(crate) chat: String,
    /// Telegram: the user id; Slack: the user (`U…`).
    pub(crate) user: String,
    /// Slack thread senders: the ts of their first message (the thread).
    pub(crate) thread: Option<String>,
    pub(crate) outstanding: Option<usize>,
    pub(crate) last_sent: f64,
    /// Sends only while connectord is dead (so every kill has messages
    /// that arrive while it is down).
    pub(crate) witness: bool,
    pub(crate) n: u64,
}

impl Sender {
    /// "telegram chat 9000017" / "slack channel C0SOAK003": where answers go.
    pub(crate) fn target(&self) -> String {
        if self.kind.telegram() {
            format!("telegram chat {}", self.chat)
        } else {
            format!("slack channel {}", self.chat)
        }
    }
}

/// How far (s) a kill may stand from an answer the soak saw posted and still
/// fall in connectord's window between the post and its mark: the soak reads
/// the fakes every 50 ms, and the window itself is one SQLite write.
const REPEAT_WINDOW_S: f64 = 0.5;

pub(crate) struct Msg {
    pub(crate) sender: usize,
    pub(crate) id: String,
    /// The platform's own id: the update id, or the Slack event id.
    pub(crate) platform_id: String,
    pub(crate) sent_t: f64,
    pub(crate) answered_t: Option<f64>,
    /// Pushed while connectord was dead (killed, not yet back).
    pub(crate) while_down: bool,
}

/// A message the bot posted, with its latest text.
pub(crate) struct BotMsg {
    pub(crate) target: String,
    /// "telegram message 17" / "slack ts 1700000000.000123".
    pub(crate) name: String,
    /// The message its chat was waiting on when it was posted.
    pub(crate) window: Option<usize>,
    pub(crate) text: String,
    pub(crate) posted_t: f64,
    /// When it took its latest text: the answer's edit into a progress
    /// message comes seconds after the post.
    pub(crate) text_t: f64,
}

#[derive(Default)]
pub(crate) struct Ledger {
    pub(crate) senders: Vec<Sender>,
    pub(crate) msgs: Vec<Msg>,
    pub(crate) by_id: HashMap<String, usize>,
    pub(crate) bot_msgs: Vec<BotMsg>,
    by_key: HashMap<String, usize>,
    by_target: HashMap<String, usize>,
    tg_seen: usize,
    slack_seen: usize,
    /// Sends, edits, updates seen.
    pub(crate) calls_seen: u64,
    pub(crate) latencies: Vec<f64>,
}

/// The id in a done answer: `Q<id>Z` (ids are lowercase letters and digits).
pub(crate) fn marker(id: &str) -> String {
    format!("Q{id}Z")
}

/// The ids of the markers in `text`.
pub(crate) fn markers(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find('Q') {
        let after = &rest[at + 1..];
        let len = after
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit()))
            .unwrap_or(after.len());
        if len > 0 && after[len..].starts_with('Z') {
            out.push(&after[..len]);
            rest = &after[len + 1..];
        } else {
            rest = after;
        }
    }
    out
}

/// What kind of answer a final text is (for the totals).
pub(crate) fn answer_kind(text: &str, has_marker: bool) -> &'static str {
    if text.contains("cut short by a restart") {
        "cut short by a restart (chatd killed mid-run)"
    } else if text.contains("(That failed") {
        "failed run, said so"
    } else if text.contains("(Stopped") {
        "stopped, said so"
    } else if has_marker {
        "whole answer"
    } else if text.contains("(No answer.)") {
        "no answer, said so"
    } else {
        "other text"
    }
}

impl Ledger {
    pub(crate) fn add_sender(&mut self, sender: Sender) {
        self.by_target.insert(sender.target(), self.senders.len());
        self.senders.push(sender);
    }

    /// Reads what the fakes took since the last look; marks the messages
    /// whose answer came. `t`: seconds from the start of the load.
    pub(crate) fn track(&mut self, bot: &FakeBot, slack: &FakeSlack, t: f64) {
        let mut touched: Vec<usize> = Vec::new();
        let sent = bot.sent_from(self.tg_seen);
        self.tg_seen += sent.len();
        for s in sent {
            let create = match s.method.as_str() {
                "sendMessage" => true,
                "editMessageText" => false,
                _ => continue,
            };
            let key = format!("tg:{}:{}", s.chat_id, s.message_id);
            let target = format!("telegram chat {}", s.chat_id);
            let name = format!("telegram message {}", s.message_id);
            touched.push(self.seen(key, target, name, s.visible, create, t));
        }
        let posted = slack.posted_from(self.slack_seen);
        self.slack_seen += posted.len();
        for p in posted {
            let create = match p.method.as_str() {
                "chat.postMessage" => true,
                "chat.update" => false,
                _ => continue,
            };
            let key = format!("sl:{}:{}", p.channel, p.ts);
            let target = format!("slack channel {}", p.channel);
            let name = format!("slack ts {}", p.ts);
            touched.push(self.seen(key, target, name, p.text, create, t));
        }
        for i in touched {
            if let Some(m) = self.attributed(i) {
                let sender = self.msgs[m].sender;
                if self.senders[sender].outstanding == Some(m) {
                    self.senders[sender].outstanding = None;
                    self.msgs[m].answered_t = Some(t);
                    self.latencies.push(t - self.msgs[m].sent_t);
                }
            }
        }
    }

    fn seen(
        &mut self,
        key: String,
        target: String,
        name: String,
        text: String,
        create: bool,
        t: f64,
    ) -> usize {
        self.calls_seen += 1;
        if let (false, Some(&i)) = (create, self.by_key.get(&key)) {
            let b = &mut self.bot_msgs[i];
            if b.text != text {
                b.text = text;
                b.text_t = t;
            }
            return i;
        }
        let window = self
            .by_target
            .get(&target)
            .and_then(|s| self.senders[*s].outstanding);
        self.bot_msgs.push(BotMsg {
            target,
            name,
            window,
            text,
            posted_t: t,
            text_t: t,
        });
        let i = self.bot_msgs.len() - 1;
        self.by_key.insert(key, i);
        i
    }

    /// The message a bot message answers: the one its id names, else the
    /// one its chat waited on when it was posted; none while it shows
    /// only `Working…`.
    pub(crate) fn attributed(&self, i: usize) -> Option<usize> {
        let b = &self.bot_msgs[i];
        if b.text.trim() == WORKING {
            return None;
        }
        markers(&b.text)
            .iter()
            .find_map(|id| self.by_id.get(*id).copied())
            .or(b.window)
    }

    pub(crate) fn waiting(&self) -> usize {
        self.senders
            .iter()
            .filter(|s| s.outstanding.is_some())
            .count()
    }

    /// Whether some chat shows `Working…` for the message it waits on.
    pub(crate) fn mid_answer(&self) -> bool {
        self.bot_msgs.iter().rev().take(200).any(|b| {
            b.text.trim() == WORKING && b.window.is_some_and(|m| self.msgs[m].answered_t.is_none())
        })
    }

    /// Holds every message to exactly one answer in its own chat, and every
    /// answer to a message; violations name the platform, the chat and the
    /// message. The one repeat connectord owns up to (docs/connectors.md): an
    /// answer sent again because a SIGKILL (`kills`: when, s) fell between
    /// the platform taking it and connectord marking it sent, a window of one
    /// SQLite write, so the kill is within `REPEAT_WINDOW_S` of the first
    /// answer taking its text as the soak saw it (an edit of a progress
    /// message, not its post) and the second came after the kill.
    /// Returns summary lines.
    pub(crate) fn verdict(&self, shared: &Shared, kills: &[f64]) -> Vec<String> {
        let mut answers: Vec<Vec<usize>> = vec![Vec::new(); self.msgs.len()];
        let mut kinds: BTreeMap<&'static str, u64> = BTreeMap::new();
        let mut working_left = 0u64;
        for (i, b) in self.bot_msgs.iter().enumerate() {
            if b.text.trim() == WORKING {
                working_left += 1;
                continue;
            }
            let named = markers(&b.text)
                .iter()
                .find_map(|id| self.by_id.get(*id).copied());
            *kinds
                .entry(answer_kind(&b.text, named.is_some()))
                .or_default() += 1;
            match self.attributed(i) {
                Some(m) => {
                    let own = self.senders[self.msgs[m].sender].target();
                    if own != b.target {
                        shared.violate(
                            Inv::Bots,
                            format!(
                                "connectord: {} ({}) carries the answer to message {} of {own}",
                                b.target, b.name, self.msgs[m].id
                            ),
                        );
                    }
                    answers[m].push(i);
                }
                None => shared.violate(
                    Inv::Bots,
                    format!(
                        "connectord: {} ({}, posted at {:.1} s) answers no message sent there: {}",
                        b.target,
                        b.name,
                        b.posted_t,
                        excerpt(&b.text)
                    ),
                ),
            }
        }
        let (mut lost, mut twice, mut repeated) = (0u64, 0u64, 0u64);
        for (m, got) in answers.iter().enumerate() {
            let msg = &self.msgs[m];
            let sender = &self.senders[msg.sender];
            let what = format!(
                "connectord: {} ({:?}, user {}), message {} ({}, sent at {:.1} s{})",
                sender.target(),
                sender.kind,
                sender.user,
                msg.id,
                msg.platform_id,
                msg.sent_t,
                if msg.while_down {
                    ", while connectord was down"
                } else {
                    ""
                }
            );
            let in_window = |got: &[usize]| {
                let (first, second) = (&self.bot_msgs[got[0]], &self.bot_msgs[got[1]]);
                kills
                    .iter()
                    .any(|k| (k - first.text_t).abs() <= REPEAT_WINDOW_S && second.posted_t >= *k)
            };
            match got.len() {
                1 => {}
                2 if in_window(got) => repeated += 1,
                0 => {
                    lost += 1;
                    shared.violate(Inv::Bots, format!("{what}: never answered"));
                }
                n => {
                    twice += 1;
                    let shown: Vec<String> = got
                        .iter()
                        .map(|i| {
                            let b = &self.bot_msgs[*i];
                            let edited = if b.text_t > b.posted_t {
                                format!(" (this text since {:.1} s)", b.text_t)
                            } else {
                                String::new()
                            };
                            format!(
                                "{} at {:.1} s{edited}: {}",
                                b.name,
                                b.posted_t,
                                excerpt(&b.text)
                            )
                        })
                        .collect();
                    shared.violate(
                        Inv::Bots,
                        format!("{what}: answered {n} times: {}", shown.join("; ")),
                    );
                }
            }
        }
        let mut lines = vec![format!(
            "answers: {} bot messages ({}); {lost} messages never answered, {twice} answered more than once \
             ({repeated} more sent again by a kill inside connectord's window of one write); \
             {working_left} progress messages still showing {WORKING:?} (replaced by a new one after a kill)",
            self.bot_msgs.len() as u64 - working_left,
            kinds
                .iter()
                .map(|(k, n)| format!("{n} {k}"))
                .collect::<Vec<_>>()
                .join(", "),
        )];
        let mut lat = self.latencies.clone();
        lat.sort_by(f64::total_cmp);
        if !lat.is_empty() {
            lines.push(format!(
                "time to the answer: p50 {:.2} s, p99 {:.2} s, max {:.2} s",
                lat[lat.len() / 2],
                lat[(lat.len() * 99 / 100).min(lat.len() - 1)],
                lat[lat.len() - 1]
            ));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_are_found_whole_only() {
        assert_eq!(markers("abcQt1n2Z"), vec!["t1n2"]);
        assert_eq!(markers("abQt1n2Z xQs3n4Z"), vec!["t1n2", "s3n4"]);
        // Cut short: a part of an id is no id.
        assert!(markers("abcQt1n").is_empty());
        assert!(markers("Q Z QZ Qt1-Z").is_empty());
        assert_eq!(markers("QQt1Z"), vec!["t1"]);
    }
}
