//! A goal inside a run: goal_done and goal_blocked taken, a goal turn's
//! step cap, and the stuck check: the same call with the same result four
//! times in a row pauses the goal rather than spending its turns.

use tandem_shared::http::ApiError;

use super::kept::KeptPath;
use super::Runs;
use crate::model::{Message, Run};
use crate::store::{self, goals::Ending, goals::Taken};
use crate::tools::goal::Args;
use crate::words::{GoalEvent, PausedBy, Role};

/// The same call with the same result, this many times in a row, is stuck.
pub const STUCK_REPEATS: usize = 4;

impl Runs {
    /// Takes a goal tool call: the result the model reads, or why it is refused.
    pub(super) async fn goal_call(
        &self,
        run: &Run,
        name: &str,
        arguments: &str,
    ) -> Result<Result<String, String>, ApiError> {
        let args = match Args::parse(name, arguments) {
            Ok(args) => args,
            Err(why) => return Ok(Err(format!("{why}; the goal is unchanged"))),
        };
        let cid = run.conversation_id.clone();
        let asked = args.clone();
        let taken = self
            .inner
            .store
            .write(move |ctx| {
                let ending = match &asked {
                    Args::Done { summary, evidence } => Ending::Done { summary, evidence },
                    Args::Blocked { reason, needs } => Ending::Blocked { reason, needs },
                };
                store::goals::end(ctx, &cid, ending)
            })
            .await?;
        Ok(match (taken, args) {
            (Taken::NotActive, _) => {
                Err("the chat's goal is not active any more; nothing changed".to_string())
            }
            (Taken::AskedEvidence, _) => Err("name the evidence: the call ids or the files \
                 that show the goal is reached (a test run, the file written), then call \
                 goal_done again"
                .to_string()),
            (Taken::Ended, Args::Done { .. }) => Ok("The goal is marked reached. Tell the \
                 person in a few lines what was done and where; no turn follows this one."
                .to_string()),
            (Taken::Ended, Args::Blocked { .. }) => Ok("The goal waits for the person. Ask \
                 them for what you need in your answer; no turn follows this one."
                .to_string()),
        })
    }

    /// The model calls the chat's active goal has left (at least one).
    pub(super) async fn goal_steps_left(
        &self,
        conversation_id: &str,
    ) -> Result<Option<u32>, ApiError> {
        let cid = conversation_id.to_string();
        let goal = self
            .inner
            .store
            .read(move |conn| store::goals::active(conn, &cid))
            .await?;
        Ok(goal
            .map(|g| u32::try_from(g.max_steps.saturating_sub(g.steps).max(1)).unwrap_or(u32::MAX)))
    }

    /// When the chat's goal is active and its path (brought up to date with
    /// the step's results) ends in a stuck repetition, pauses the goal: why,
    /// for the run to end with.
    pub(super) async fn goal_stuck(
        &self,
        conversation_id: &str,
        kept: &mut KeptPath,
    ) -> Result<Option<String>, ApiError> {
        let cid = conversation_id.to_string();
        // A message the person wrote meanwhile starts the count again.
        let active = kept
            .current_and(&self.inner.store, move |conn| {
                Ok(store::goals::active(conn, &cid)?.is_some()
                    && crate::store::queries::waiting(conn, &cid)?.is_empty())
            })
            .await?;
        let Some(tool) = active.then(|| stuck(kept.path())).flatten() else {
            return Ok(None);
        };
        let cid = conversation_id.to_string();
        let why = format!(
            "stuck: `{tool}` gave the same result {STUCK_REPEATS} times in a row; resume \
             once something changed"
        );
        let said = why.clone();
        let paused = self
            .inner
            .store
            .write(move |ctx| store::goals::pause(ctx, &cid, PausedBy::Stuck, &said))
            .await?;
        Ok(paused.then(|| format!("the goal is {why}")))
    }
}

/// The tool of the last calls of `path` when the last [`STUCK_REPEATS`]
/// were the same call with the same result. A person's message, or the
/// goal set or resumed, starts the count again.
pub fn stuck(path: &[Message]) -> Option<String> {
    let mut seen: Vec<(&str, &str, &str)> = Vec::new();
    for (i, m) in path.iter().enumerate().rev() {
        match m.role {
            Role::User => break,
            Role::Goal if m.goal_event != Some(GoalEvent::Continue) => break,
            Role::Assistant => {
                for call in m.calls().iter().rev() {
                    let result = path[i + 1..]
                        .iter()
                        .find(|r| {
                            r.role == Role::Tool && r.tool_call_id.as_deref() == Some(call.id)
                        })
                        .map(|r| r.text.as_str())?;
                    seen.push((call.name, call.arguments, result));
                    if seen.len() == STUCK_REPEATS {
                        let first = seen[0];
                        return seen
                            .iter()
                            .all(|c| *c == first)
                            .then(|| first.0.chars().take(60).collect());
                    }
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(n: usize, name: &str, args: &str, result: &str) -> Vec<Message> {
        let mut asked = Message::draft(Role::Assistant, "");
        let id = format!("c{n}");
        asked.tool_calls = Some(json!([{"id": id, "type": "function",
            "function": {"name": name, "arguments": args}}]));
        let mut answer = Message::draft(Role::Tool, result);
        answer.tool_call_id = Some(id);
        vec![asked, answer]
    }

    fn goal_line(event: GoalEvent) -> Message {
        let mut m = Message::draft(Role::Goal, "Continue toward the goal");
        m.goal_event = Some(event);
        m
    }

    #[test]
    fn four_same_calls_with_the_same_result_are_stuck_across_goal_turns() {
        let mut path = Vec::new();
        for n in 0..2 {
            path.extend(call(n, "bash", r#"{"command":"make"}"#, "error 2"));
        }
        assert_eq!(stuck(&path), None, "two are not stuck");
        path.push(goal_line(GoalEvent::Continue));
        for n in 2..4 {
            path.extend(call(n, "bash", r#"{"command":"make"}"#, "error 2"));
        }
        assert_eq!(stuck(&path).as_deref(), Some("bash"));
    }

    #[test]
    fn a_changed_result_a_persons_message_or_a_resume_is_not_stuck() {
        let mut path = Vec::new();
        for n in 0..4 {
            let result = if n == 1 { "error 1" } else { "error 2" };
            path.extend(call(n, "bash", r#"{"command":"make"}"#, result));
        }
        assert_eq!(stuck(&path), None, "a result changed");
        for (n, cut) in [
            Message::draft(Role::User, "try again"),
            goal_line(GoalEvent::Resumed),
        ]
        .into_iter()
        .enumerate()
        {
            let mut path = Vec::new();
            path.extend(call(10 + n, "read_file", r#"{"path":"a"}"#, "x"));
            path.push(cut);
            for k in 0..3 {
                path.extend(call(20 + k, "read_file", r#"{"path":"a"}"#, "x"));
            }
            assert_eq!(stuck(&path), None, "the count starts again after {n}");
        }
    }

    #[test]
    fn a_call_without_its_result_yet_is_not_counted() {
        let mut path = Vec::new();
        for n in 0..4 {
            path.extend(call(n, "bash", r#"{"command":"make"}"#, "error 2"));
        }
        path.pop();
        assert_eq!(stuck(&path), None);
    }
}
