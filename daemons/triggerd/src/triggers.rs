//! A trigger as the API takes it and shows it: the body checked field by
//! field (a bad one is a 400 naming it, and nothing is stored), and the
//! JSON a trigger and a run are shown as.

use std::path::Path;

use serde::Deserialize;
use serde_json::{json, Value};
use tandem_shared::chatd::{agent_folder, AgentFolder};
use tandem_shared::http::{check_chars, ApiError};

use crate::clock::{rfc3339, ts};
use crate::schedule::{self, Schedule};
use crate::store::{Kind, Run, Trigger};

pub const MAX_NAME: usize = 100;
pub const MAX_PROMPT: usize = 16_000;
pub const MAX_MODEL: usize = 200;
pub const QUIET_DEFAULT: u64 = 30;
pub const QUIET_MAX: u64 = 3600;
pub const GAP_DEFAULT: u64 = 60;
/// A file that changed after its run began waits at most a day.
pub const GAP_MAX: u64 = 86_400;
pub const CAP_DEFAULT: u64 = 24;
pub const CAP_MAX: u64 = 1000;

/// What a create or a replace may say. Unknown fields are refused.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Body {
    pub name: Option<String>,
    pub when: Option<String>,
    pub tz: Option<String>,
    pub folder: Option<String>,
    pub quiet_seconds: Option<u64>,
    pub min_gap_seconds: Option<u64>,
    pub prompt: Option<String>,
    pub model: Option<String>,
    pub daily_cap: Option<u64>,
    pub enabled: Option<bool>,
    pub agent_id: Option<String>,
}

/// The most bytes a trigger's body may have: a prompt of 16,000
/// characters, each escaped as JSON may write it, and the rest.
pub const MAX_BODY: usize = 256 * 1024;

/// The body read from bytes: an error names the field serde stopped at.
pub fn parse_body(bytes: &[u8]) -> Result<Body, ApiError> {
    if bytes.len() > MAX_BODY {
        return Err(ApiError::too_large("the trigger's body", MAX_BODY));
    }
    let mut reader = serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(&mut reader).map_err(|e| {
        let path = e.path().to_string();
        let text = e.inner().to_string();
        let field = if !path.is_empty() && path != "." {
            path
        } else if text.starts_with("unknown field") {
            text.split('`').nth(1).unwrap_or("body").to_string()
        } else {
            "body".to_string()
        };
        ApiError::bad_input(&field, text)
    })
}

/// A checked body: what to store, and its parsed schedule.
pub struct Checked {
    pub name: String,
    pub kind: Kind,
    pub when: String,
    pub tz: String,
    pub folder: String,
    pub quiet_seconds: u64,
    pub min_gap_seconds: u64,
    pub prompt: String,
    pub model: String,
    pub agent_id: String,
    pub daily_cap: u32,
    pub enabled: bool,
    pub schedule: Option<Schedule>,
}

fn number(
    field: &str,
    value: Option<u64>,
    default: u64,
    min: u64,
    max: u64,
) -> Result<u64, ApiError> {
    let value = value.unwrap_or(default);
    if !(min..=max).contains(&value) {
        return Err(ApiError::bad_input(
            field,
            format!("{value} is outside {min}..={max}"),
        ));
    }
    Ok(value)
}

/// Checks every field of `body`; `now_ms` decides whether a `once` is past.
pub fn check(body: Body, workspace: &Path, now_ms: i64) -> Result<Checked, ApiError> {
    let name = body.name.unwrap_or_default();
    check_chars("name", &name, 1, MAX_NAME)?;
    if name.chars().any(char::is_control) {
        return Err(ApiError::bad_input("name", "holds control characters"));
    }
    let prompt = body.prompt.unwrap_or_default();
    check_chars("prompt", &prompt, 1, MAX_PROMPT)?;
    let model = body.model.unwrap_or_default();
    if model.len() > MAX_MODEL || model.chars().any(char::is_control) {
        return Err(ApiError::bad_input(
            "model",
            format!("must be at most {MAX_MODEL} bytes of printable text"),
        ));
    }
    let agent_id = body.agent_id.unwrap_or_default();
    if !agent_id.is_empty() && !tandem_shared::http::is_chat_id(&agent_id) {
        return Err(ApiError::bad_input(
            "agent_id",
            "must be an agent's id: letters, digits and _, 64 at most",
        ));
    }
    let tz = body.tz.unwrap_or_default();
    let zone = schedule::zone(&tz).map_err(|e| ApiError::bad_input("tz", e))?;
    let when = body.when.unwrap_or_default().trim().to_string();
    let schedule = if when.is_empty() {
        None
    } else {
        let parsed = Schedule::parse(&when).map_err(|e| ApiError::bad_input("when", e))?;
        if parsed.next_after(ts(now_ms), &zone).is_none() {
            let now = ts(now_ms).to_zoned_datetime(zone.clone());
            return Err(ApiError::bad_input(
                "when",
                format!(
                    "{when:?} is in the past (it is {} in {})",
                    now.strftime("%Y-%m-%d %H:%M"),
                    if tz.is_empty() { "UTC" } else { &tz }
                ),
            ));
        }
        Some(parsed)
    };
    let folder_text = body.folder.unwrap_or_default();
    let kind = match (&schedule, folder_text.trim().is_empty()) {
        (Some(_), _) => Kind::Schedule,
        (None, false) => Kind::File,
        (None, true) => {
            return Err(ApiError::bad_input(
                "when",
                "a trigger needs a schedule (when, e.g. \"weekdays 09:30\") or a folder to watch (folder)",
            ))
        }
    };
    let folder = if folder_text.trim().is_empty() {
        String::new()
    } else {
        crate::folders::resolve(workspace, folder_text.trim())
            .map_err(|e| ApiError::bad_input("folder", e))?
            .0
    };
    let quiet_seconds = number(
        "quiet_seconds",
        body.quiet_seconds,
        QUIET_DEFAULT,
        1,
        QUIET_MAX,
    )?;
    let min_gap_seconds = number(
        "min_gap_seconds",
        body.min_gap_seconds,
        GAP_DEFAULT,
        0,
        GAP_MAX,
    )?;
    let daily_cap = number("daily_cap", body.daily_cap, CAP_DEFAULT, 1, CAP_MAX)? as u32;
    Ok(Checked {
        name,
        kind,
        when,
        tz,
        folder,
        quiet_seconds,
        min_gap_seconds,
        prompt,
        model,
        agent_id,
        daily_cap,
        enabled: body.enabled.unwrap_or(true),
        schedule,
    })
}

/// Why the saved agent `agent` (chatd's JSON of it) cannot run `trigger`,
/// if it cannot. A file trigger watches the shared workspace, which a chat
/// of an agent kept to a folder never reaches; a folder that is missing
/// refuses every run, so a trigger switched on may not name it.
pub fn agent_unfit(trigger: &Trigger, agent: &Value) -> Option<String> {
    let id = &trigger.agent_id;
    match (agent_folder(agent), trigger.kind) {
        (AgentFolder::None, _) => None,
        (_, Kind::File) => Some(format!(
            "the agent {id} keeps to a folder of its own, so it cannot work on the shared \
             workspace's files a file trigger watches: choose an agent without a folder"
        )),
        (AgentFolder::Missing, Kind::Schedule) if trigger.enabled => Some(format!(
            "the folder the agent {id} keeps to is missing: choose a folder for the agent \
             or restore it, then save again"
        )),
        (AgentFolder::Ok | AgentFolder::Missing, Kind::Schedule) => None,
    }
}

/// A trigger as the API shows it; `next_ms` is its next due time when
/// known, `schedule` its parsed schedule (parsed again when not given).
pub fn view(
    t: &Trigger,
    schedule: Option<&Schedule>,
    next_ms: Option<i64>,
    running: bool,
) -> Value {
    let description = if t.kind == Kind::File {
        format!(
            "when a file in {} has not changed for {} s",
            if t.folder.is_empty() {
                "the workspace"
            } else {
                &t.folder
            },
            t.quiet_seconds
        )
    } else {
        match schedule {
            Some(s) => s.describe(),
            None => Schedule::parse(&t.when)
                .map(|s| s.describe())
                .unwrap_or_default(),
        }
    };
    json!({
        "id": t.id,
        "name": t.name,
        "kind": t.kind.as_str(),
        "when": t.when,
        "tz": t.tz,
        "folder": t.folder,
        "quiet_seconds": t.quiet_seconds,
        "min_gap_seconds": t.min_gap_seconds,
        "prompt": t.prompt,
        "model": t.model,
        "agent_id": if t.agent_id.is_empty() { Value::Null } else { json!(t.agent_id) },
        "daily_cap": t.daily_cap,
        "enabled": t.enabled,
        "disabled_reason": t.disabled_reason,
        "description": description,
        "next_run": next_ms.map(rfc3339),
        "running": running,
        "created": rfc3339(t.created_ms),
        "updated": rfc3339(t.updated_ms),
    })
}

pub fn run_view(r: &Run) -> Value {
    json!({
        "id": r.id,
        "trigger_id": r.trigger_id,
        "cause": r.cause,
        "due": rfc3339(r.due_ms),
        "file": r.file,
        "status": r.status,
        "chat_id": r.chat_id,
        "chat_run_id": r.chat_run_id,
        "queued": rfc3339(r.queued_ms),
        "started": r.started_ms.map(rfc3339),
        "ended": r.ended_ms.map(rfc3339),
        "tokens": r.tokens,
        "reason": r.reason,
        "summary": r.summary,
        "notified": r.notified,
        "link": r.chat_id.as_ref().map(|c| format!("/v1/chat-app/conversations/{c}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trigger(kind: Kind, enabled: bool) -> Trigger {
        Trigger {
            id: "t_1".into(),
            name: "Digest".into(),
            kind,
            when: if kind == Kind::Schedule {
                "daily 08:00".into()
            } else {
                String::new()
            },
            tz: String::new(),
            folder: if kind == Kind::File {
                "Drop".into()
            } else {
                String::new()
            },
            quiet_seconds: 30,
            min_gap_seconds: 60,
            prompt: "p".into(),
            model: String::new(),
            agent_id: "a_1".into(),
            daily_cap: 24,
            enabled,
            enabled_ms: 0,
            checked_ms: 0,
            disabled_reason: None,
            created_ms: 0,
            updated_ms: 0,
        }
    }

    #[test]
    fn an_agent_kept_to_a_folder_runs_schedules_only_and_only_while_its_folder_is_there() {
        let plain = json!({"id": "a_1", "folder": null});
        let folder = |state: &str| json!({"id": "a_1", "folder": {"path": "/n", "name": "n", "mode": "read", "state": state}});
        let schedule = trigger(Kind::Schedule, true);
        let file = trigger(Kind::File, true);
        assert_eq!(agent_unfit(&schedule, &plain), None);
        assert_eq!(agent_unfit(&file, &plain), None);
        assert_eq!(agent_unfit(&schedule, &folder("ok")), None);
        for state in ["missing", "unset"] {
            let why = agent_unfit(&schedule, &folder(state)).unwrap_or_default();
            assert!(why.contains("is missing"), "{state}: {why}");
            // Switched off it runs nothing: it may be edited meanwhile.
            assert_eq!(
                agent_unfit(&trigger(Kind::Schedule, false), &folder(state)),
                None
            );
        }
        for state in ["ok", "missing"] {
            let why = agent_unfit(&file, &folder(state)).unwrap_or_default();
            assert!(why.contains("shared workspace"), "{state}: {why}");
            let why = agent_unfit(&trigger(Kind::File, false), &folder(state));
            assert!(why.is_some(), "a file trigger never takes it");
        }
    }
}
