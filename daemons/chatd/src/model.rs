//! The records of the wire contract and how they are read from rows.

use rusqlite::Row;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::permissions::Mode;
use crate::words::{ChatState, MessageStatus, Origin, PendingState, Role, RunMode, RunStatus};

#[derive(Debug, Clone, Serialize)]
pub struct Conversation {
    pub id: String,
    pub title: String,
    pub model: String,
    pub created: String,
    pub updated: String,
    pub state: ChatState,
    pub permission_mode: Mode,
    pub settings: crate::settings::Settings,
    /// Who made it (for listing and showing; each run has its own origin,
    /// from its request).
    pub origin: Origin,
    /// Where its files are: own (workspaces/<id>/) or shared (the box's
    /// shared folder).
    pub workspace: String,
    /// The saved agent it was made with, if any (it may since be gone).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deleted: Option<String>,
    /// A person's chat, or a sub-agent's (run by `parent_id`).
    pub kind: crate::words::ChatKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    #[serde(skip)]
    pub head_id: Option<String>,
    #[serde(skip)]
    pub last_seq: i64,
}

pub const CONVERSATION_COLUMNS: &str =
    "id, title, model, created, updated, state, permission_mode, settings, deleted_at, head_id, last_seq, origin, workspace, agent_id, kind, parent_id";

impl Conversation {
    pub fn from_row(row: &Row) -> rusqlite::Result<Conversation> {
        let settings: String = row.get(7)?;
        let deleted_at: Option<i64> = row.get(8)?;
        Ok(Conversation {
            id: row.get(0)?,
            title: row.get(1)?,
            model: row.get(2)?,
            created: row.get(3)?,
            updated: row.get(4)?,
            state: row.get(5)?,
            // A mode an older build stored that this one does not know asks.
            permission_mode: Mode::parse(&row.get::<_, String>(6)?).unwrap_or(Mode::Ask),
            settings: crate::settings::Settings::from_stored_text(&settings),
            deleted: deleted_at.map(|t| {
                jiff::Timestamp::from_second(t)
                    .map(|t| t.to_string())
                    .unwrap_or_default()
            }),
            head_id: row.get(9)?,
            last_seq: row.get(10)?,
            origin: row.get(11)?,
            workspace: row.get(12)?,
            agent_id: row.get(13)?,
            kind: row.get(14)?,
            parent_id: row.get(15)?,
        })
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Message {
    pub id: String,
    pub parent_id: Option<String>,
    pub role: Role,
    pub text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// On assistant messages and tool results.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<MessageStatus>,
    pub created: String,
    /// On a `compacted` message: the first message kept after its summary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keep_from: Option<String>,
    /// On a user message: the files sent with it, saved under `uploads/`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attachments: Option<Value>,
    /// On a tool result: its one line, as `tool.finished` gave it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// On a tool result: the card its line shows (`files_change`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub card: Option<Value>,
    /// On a goal line: what it marks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goal_event: Option<crate::words::GoalEvent>,
    /// On a `continue` goal line: the goal's turn it starts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goal_turn: Option<i64>,
    /// On a user line a loop sent: the loop and its run number.
    #[serde(rename = "loop", skip_serializing_if = "Option::is_none")]
    pub loop_ref: Option<LoopRef>,
    /// On a user message sent with a skill or for a saved agent:
    /// `{kind: "skill"|"agent", name}` (from its records).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invoked: Option<Value>,
}

/// What a message's records say it invoked: a skill or a saved agent.
fn invoked_of(records: Option<&Value>) -> Option<Value> {
    records?
        .as_array()?
        .iter()
        .find(|r| r["kind"] == "skill" || r["kind"] == "agent")
        .map(|r| serde_json::json!({"kind": r["kind"], "name": r["name"]}))
}

/// The loop a user line came from.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct LoopRef {
    pub id: String,
    pub run: i64,
}

pub const MESSAGE_COLUMNS: &str =
    "id, parent_id, role, text, reasoning, tool_calls, tool_call_id, run_id, status, created, keep_from, attachments, summary, card, goal_event, goal_turn, loop_id, loop_run";

/// The first message of `path` at or after `id` that is not a goal line:
/// where a compaction's kept point lands once goal lines are left out (an
/// export, a fork).
pub fn past_goal_lines(path: &[Message], id: &str) -> Option<String> {
    let at = path.iter().position(|m| m.id == id)?;
    path[at..]
        .iter()
        .find(|m| m.role != Role::Goal)
        .map(|m| m.id.clone())
}

/// One tool call of an answer: its id, the tool's name, the arguments' JSON text.
pub struct CallRef<'a> {
    pub id: &'a str,
    pub name: &'a str,
    pub arguments: &'a str,
}

impl Message {
    /// A new message with a fresh id, not yet under any parent.
    pub fn draft(role: Role, text: &str) -> Message {
        Message {
            id: tandem_shared::time::new_id("m_"),
            parent_id: None,
            role,
            text: text.to_string(),
            reasoning: None,
            tool_calls: None,
            tool_call_id: None,
            run_id: None,
            status: None,
            created: tandem_shared::time::now_rfc3339(),
            keep_from: None,
            attachments: None,
            summary: None,
            card: None,
            goal_event: None,
            goal_turn: None,
            loop_ref: None,
            invoked: None,
        }
    }

    /// Whether it is a goal line that starts a turn (the model reads it as
    /// the person's words, and a regenerate answers it again).
    pub fn starts_goal_turn(&self) -> bool {
        self.role == Role::Goal
            && self
                .goal_event
                .is_some_and(crate::words::GoalEvent::starts_turn)
    }

    /// The tool calls of an answer, as the engine sent them (missing parts empty).
    pub fn calls(&self) -> Vec<CallRef<'_>> {
        fn text<'v>(c: &'v Value, p: &str) -> &'v str {
            c.pointer(p).and_then(Value::as_str).unwrap_or("")
        }
        self.tool_calls
            .as_ref()
            .and_then(Value::as_array)
            .map(|calls| {
                calls
                    .iter()
                    .map(|c| CallRef {
                        id: text(c, "/id"),
                        name: text(c, "/function/name"),
                        arguments: text(c, "/function/arguments"),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn from_row(row: &Row) -> rusqlite::Result<Message> {
        let tool_calls: Option<String> = row.get(5)?;
        let reasoning: Option<String> = row.get(4)?;
        let attachments: Option<Value> = row
            .get::<_, Option<String>>(11)?
            .and_then(|a| serde_json::from_str(&a).ok());
        Ok(Message {
            id: row.get(0)?,
            parent_id: row.get(1)?,
            role: row.get(2)?,
            text: row.get(3)?,
            reasoning: reasoning.filter(|r| !r.is_empty()),
            tool_calls: tool_calls.and_then(|t| serde_json::from_str(&t).ok()),
            tool_call_id: row.get(6)?,
            run_id: row.get(7)?,
            status: row.get(8)?,
            created: row.get(9)?,
            keep_from: row.get(10)?,
            invoked: invoked_of(attachments.as_ref()),
            attachments,
            summary: row.get(12)?,
            card: row
                .get::<_, Option<String>>(13)?
                .and_then(|c| serde_json::from_str(&c).ok()),
            goal_event: row.get(14)?,
            goal_turn: row.get(15)?,
            loop_ref: match (row.get::<_, Option<String>>(16)?, row.get(17)?) {
                (Some(id), Some(run)) => Some(LoopRef { id, run }),
                _ => None,
            },
        })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub id: String,
    pub conversation_id: String,
    pub status: RunStatus,
    pub mode: RunMode,
    pub model: String,
    pub origin: Origin,
    pub message_id: Option<String>,
    pub steps: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub started: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Value>,
    /// Why a failed, interrupted or stopped run ended, in a word, and its
    /// error cleaned for showing (`failure.rs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<crate::failure::Failure>,
}

pub const RUN_COLUMNS: &str =
    "id, conversation_id, status, mode, model, origin, message_id, steps, error, started, ended, usage";

impl Run {
    pub fn from_row(row: &Row) -> rusqlite::Result<Run> {
        let usage: Option<String> = row.get(11)?;
        Ok(Run {
            id: row.get(0)?,
            conversation_id: row.get(1)?,
            status: row.get(2)?,
            mode: row.get(3)?,
            model: row.get(4)?,
            origin: row.get(5)?,
            message_id: row.get(6)?,
            steps: row.get(7)?,
            error: row.get(8)?,
            started: row.get(9)?,
            ended: row.get(10)?,
            usage: usage.and_then(|u| serde_json::from_str(&u).ok()),
            failure: None,
        }
        .with_failure())
    }

    pub fn is_active(&self) -> bool {
        self.status.is_active()
    }

    fn with_failure(mut self) -> Run {
        self.failure = crate::failure::of_run(self.status, self.error.as_deref());
        self
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Pending {
    pub id: String,
    pub conversation_id: String,
    pub text: String,
    pub state: PendingState,
    pub created: String,
    /// The files sent with it (see `Message::attachments`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attachments: Option<Value>,
    /// A sub-agent's result: `{kind: "sub_agent_result", …}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub card: Option<Value>,
}

pub const PENDING_COLUMNS: &str = "id, conversation_id, text, state, created, attachments, card";

impl Pending {
    pub fn from_row(row: &Row) -> rusqlite::Result<Pending> {
        Ok(Pending {
            id: row.get(0)?,
            conversation_id: row.get(1)?,
            text: row.get(2)?,
            state: row.get(3)?,
            created: row.get(4)?,
            attachments: row
                .get::<_, Option<String>>(5)?
                .and_then(|a| serde_json::from_str(&a).ok()),
            card: row
                .get::<_, Option<String>>(6)?
                .and_then(|a| serde_json::from_str(&a).ok()),
        })
    }
}

/// A consent card: a tool call waiting for a person's yes or no.
#[derive(Debug, Clone, Serialize)]
pub struct Consent {
    pub card_id: String,
    pub conversation_id: String,
    pub run_id: String,
    pub call_id: String,
    pub name: String,
    pub summary: String,
    /// Why it asks: the mode, or the rule that makes it ask.
    pub reason: String,
    pub choices: Vec<String>,
    /// The buttons' words when they are not the usual ones, as the
    /// `tool.consent` event gave them: a device that attaches later must
    /// show the same card.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub labels: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    pub created: String,
    /// When it was answered (or expired, or closed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answered: Option<String>,
}

pub const CONSENT_COLUMNS: &str =
    "id, conversation_id, run_id, call_id, tool, summary, reason, choices, decision, created, labels, answered";

impl Consent {
    pub fn from_row(row: &Row) -> rusqlite::Result<Consent> {
        let choices: String = row.get(7)?;
        Ok(Consent {
            card_id: row.get(0)?,
            conversation_id: row.get(1)?,
            run_id: row.get(2)?,
            call_id: row.get(3)?,
            name: row.get(4)?,
            summary: row.get(5)?,
            reason: row.get(6)?,
            choices: serde_json::from_str(&choices).unwrap_or_default(),
            decision: row.get(8)?,
            created: row.get(9)?,
            labels: row
                .get::<_, Option<String>>(10)?
                .and_then(|text| serde_json::from_str(&text).ok()),
            answered: row.get(11)?,
        })
    }
}

/// The snapshot a device attaches with: `seq` is the last event it includes.
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    pub conversation: Conversation,
    pub messages: Vec<Message>,
    pub runs: Vec<Run>,
    pub pending: Vec<Pending>,
    /// Consent cards nobody has answered, of the chat's live run.
    pub consents: Vec<Consent>,
    /// The chat's answered cards, the newest [`crate::store::queries::ANSWERED_SHOWN`]
    /// oldest first: a page shows each as one line under its call.
    pub answered: Vec<Consent>,
    /// The chat's goal, if it has one.
    pub goal: Option<Goal>,
    /// The chat's loops, oldest first.
    pub loops: Vec<Loop>,
    pub seq: i64,
}

/// A sub-agent: a conversation its parent's `spawn_agent` call started.
#[derive(Debug, Clone, Serialize)]
pub struct Subagent {
    /// Its conversation's id.
    pub id: String,
    pub parent_id: String,
    #[serde(skip)]
    pub parent_run_id: String,
    pub call_id: String,
    pub title: String,
    pub task: String,
    /// The tools it may use, when the call named a subset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// The parent's call waits for it (else it works in the background).
    pub wait: bool,
    pub state: crate::words::SubagentState,
    /// Stopped with its parent: nothing handed back.
    pub by_parent: bool,
    #[serde(skip)]
    pub resumes: i64,
    /// What the parent got, once it ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivered: Option<String>,
    pub created: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended: Option<String>,
    /// Its latest run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The saved agent it runs as, when the call named one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Agents mode: the task's number in its chat (a worker), else none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_n: Option<i64>,
}

/// Read with the table aliased `s`.
pub const SUBAGENT_COLUMNS: &str =
    "s.id, s.parent_id, s.parent_run_id, s.call_id, s.title, s.task, s.tools, s.wait, s.state, \
     s.by_parent, s.resumes, s.result, s.delivered, s.created, s.ended, \
     (SELECT r.id FROM runs r WHERE r.conversation_id = s.id ORDER BY r.rowid DESC LIMIT 1), \
     s.agent_id, s.task_n";

impl Subagent {
    pub fn from_row(row: &Row) -> rusqlite::Result<Subagent> {
        Ok(Subagent {
            id: row.get(0)?,
            parent_id: row.get(1)?,
            parent_run_id: row.get(2)?,
            call_id: row.get(3)?,
            title: row.get(4)?,
            task: row.get(5)?,
            tools: row
                .get::<_, Option<String>>(6)?
                .and_then(|t| serde_json::from_str(&t).ok()),
            wait: row.get(7)?,
            state: row.get(8)?,
            by_parent: row.get(9)?,
            resumes: row.get(10)?,
            result: row.get(11)?,
            delivered: row.get(12)?,
            created: row.get(13)?,
            ended: row.get(14)?,
            run_id: row.get(15)?,
            agent_id: row.get(16)?,
            task_n: row.get(17)?,
        })
    }
}

/// A chat's goal as the API shows it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Goal {
    pub text: String,
    pub state: crate::words::GoalState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused_by: Option<crate::words::PausedBy>,
    /// Done: the model's summary; blocked: its reason; paused: why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Blocked: what the model needs from the person.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub needs: Option<String>,
    /// Done: the calls or files the model named as its evidence.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<String>,
    pub turns: i64,
    pub max_turns: i64,
    pub steps: i64,
    pub max_steps: i64,
    pub set: String,
    pub updated: String,
    #[serde(skip)]
    pub asked_evidence: bool,
}

pub const GOAL_COLUMNS: &str =
    "text, state, paused_by, note, needs, evidence, turns, max_turns, steps, \
                       max_steps, set_at, updated, asked_evidence";

impl Goal {
    pub fn from_row(row: &Row) -> rusqlite::Result<Goal> {
        let evidence: Option<String> = row.get(5)?;
        Ok(Goal {
            text: row.get(0)?,
            state: row.get(1)?,
            paused_by: row.get(2)?,
            note: row.get(3)?,
            needs: row.get(4)?,
            evidence: evidence
                .and_then(|e| serde_json::from_str(&e).ok())
                .unwrap_or_default(),
            turns: row.get(6)?,
            max_turns: row.get(7)?,
            steps: row.get(8)?,
            max_steps: row.get(9)?,
            set: row.get(10)?,
            updated: row.get(11)?,
            asked_evidence: row.get::<_, i64>(12)? != 0,
        })
    }
}

/// A chat's loop as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Loop {
    pub id: String,
    pub prompt: String,
    /// `5m`, `1h30m`; null: self-paced.
    pub interval: Option<String>,
    pub interval_seconds: Option<i64>,
    pub state: crate::words::LoopState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What the model of a self-paced loop waits for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait: Option<String>,
    /// When it runs next (RFC 3339, by chatd's clock).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    #[serde(skip)]
    pub next_at: Option<i64>,
    pub runs: i64,
    pub max_runs: i64,
    pub failures: i64,
    pub skipped: i64,
    pub running: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(skip)]
    pub conversation_id: String,
    pub created: String,
    pub updated: String,
}

pub const LOOP_COLUMNS: &str = "id, conversation_id, prompt, interval_s, state, reason, wait, \
     next_at, runs, failures, skipped, current_run, created, updated";

/// The runs a loop makes at most.
pub const LOOP_MAX_RUNS: i64 = 100;

impl Loop {
    pub fn from_row(row: &Row) -> rusqlite::Result<Loop> {
        let interval_s: Option<i64> = row.get(3)?;
        let next_at: Option<i64> = row.get(7)?;
        let current: Option<String> = row.get(11)?;
        Ok(Loop {
            id: row.get(0)?,
            conversation_id: row.get(1)?,
            prompt: row.get(2)?,
            interval: interval_s.map(interval_text),
            interval_seconds: interval_s,
            state: row.get(4)?,
            reason: row.get(5)?,
            wait: row.get(6)?,
            // 0: due as soon as the chat is free (no time to show).
            next: next_at
                .filter(|at| *at > 0)
                .map(tandem_shared::clock::rfc3339),
            next_at,
            runs: row.get(8)?,
            max_runs: LOOP_MAX_RUNS,
            failures: row.get(9)?,
            skipped: row.get(10)?,
            running: current.is_some(),
            run_id: current,
            created: row.get(12)?,
            updated: row.get(13)?,
        })
    }
}

/// Seconds as a person writes an interval: `30s`, `5m`, `2h`, `1h30m`.
pub fn interval_text(seconds: i64) -> String {
    let (h, m, s) = (seconds / 3600, seconds % 3600 / 60, seconds % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || out.is_empty() {
        out.push_str(&format!("{s}s"));
    }
    out
}
