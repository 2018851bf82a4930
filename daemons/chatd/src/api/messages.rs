//! Sending, waiting messages, stop, send-now, continue, regenerate and edit.
//! Each decision (start a run or wait) is taken inside one write job, so two
//! devices sending at once never start two runs in one chat.
//!
//! A run's origin is the request's (`origin`: `user` unless it says
//! `trigger` or `connector`), never the chat's: triggerd sends its first
//! message with `origin: "trigger"`, and a person who follows up in that chat
//! (or regenerates, continues, edits, sends now) starts a person's run.

use std::sync::Arc;

use axum::extract::{FromRequest, Path, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};
use tandem_shared::http::ApiError;

use super::outgoing::{accepted, attached, check_edited, run_origin, Outgoing};
use super::Json;
use crate::attachments;
use crate::kinds::EventKind;
use crate::store::queries::{self, Trashed};
use crate::store::runs::insert_run;
use crate::store::{conversations, messages};
use crate::words::{Choice, Origin, PendingState, Role, RunMode, RunStatus};
use crate::App;

#[derive(Deserialize)]
pub struct SendBody {
    #[serde(default)]
    text: String,
    /// A slash command to run (the text its arguments) instead of a message.
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    attachments: Option<Vec<attachments::Upload>>,
    /// Who starts the run: user (the default), trigger or connector.
    #[serde(default)]
    origin: Option<String>,
    /// An idempotency key: a second send with the same key in this chat
    /// answers what the first did and stores nothing (a sender that lost
    /// the answer may ask again).
    #[serde(default)]
    key: Option<String>,
    /// Prompts and resources of the chat's MCP servers, expanded in front
    /// of the text (`mcp/context.rs`).
    #[serde(default)]
    context: Option<Vec<Value>>,
    /// A saved agent (id or name) the model is asked to start with the text as its task.
    #[serde(default)]
    agent: Option<String>,
    /// One of the chat's skills the message runs with (api/skills.rs).
    #[serde(default)]
    skill: Option<String>,
}

/// The body of send-now, continue and regenerate: all optional.
#[derive(Deserialize, Default)]
#[serde(default)]
pub struct RunBody {
    origin: Option<String>,
}

pub async fn send(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    request: Request,
) -> Result<Response, ApiError> {
    if super::form::is_form(&request) {
        return super::uploads::send_form(app, id, request).await;
    }
    let Json(mut body) = Json::<SendBody>::from_request(request, &app).await?;
    // A command runs instead of being sent: `/help`, `/goal …`, `/loop …`;
    // `/agent NAME TASK` is the message a device sends with `agent`.
    // A trigger's prompt is always a message; a person's and a bot
    // sender's command runs (connectord posts its answer).
    let command = match Origin::requested(body.origin.as_deref())? {
        Origin::Trigger => None,
        _ => super::commands::of_send(body.command.as_deref(), &body.text)?,
    };
    if let Some((name, args)) = command {
        if name == "agent" || name == "skill" {
            // `/agent NAME TASK` is a message: invoke.rs reads its lead
            // (a name of several words too) as the `agent` field does;
            // `/skill NAME …` one skills.rs reads.
            body.text = format!("/{name} {args}");
        } else if body.attachments.as_ref().is_some_and(|a| !a.is_empty()) {
            return Err(ApiError::bad_input(
                "attachments",
                "a command takes no files",
            ));
        } else {
            return super::commands::run(app, id, name, args).await;
        }
    }
    let outgoing = Outgoing::checked(body.text, body.origin, body.key)?
        .with_context(body.context.as_deref())?;
    let files = attachments::check(body.attachments.unwrap_or_default())?;
    if let Some(again) = outgoing.answered(&app, &id).await? {
        return Ok(accepted(again));
    }
    app.folders.check_reach(&id)?;
    let outgoing = outgoing
        .asking(&app, &id, body.agent)
        .await?
        .skilled(&app, &id, body.skill)
        .await?;
    // Asked of the servers before any file is saved: a refusal stores nothing.
    let context = super::mcp_context::expand(&app, &id, &outgoing.context).await?;
    let mut records = context.records;
    let mut text = context.text;
    text.push_str(&outgoing.text);
    if !files.is_empty() {
        // Saved before the message is, so the model can read them at once.
        let saved = attached(&app, &id, attachments::Incoming::Decoded(files)).await?;
        text.push_str(&saved.text);
        records.extend(saved.records);
    }
    let records = (!records.is_empty()).then_some(Value::Array(records));
    outgoing.store(&app, id, text, records).await
}

/// A body that is one text: a waiting message changed, a message edited.
#[derive(Deserialize)]
pub struct TextBody {
    text: String,
}

pub async fn update_pending(
    State(app): State<Arc<App>>,
    Path((id, pid)): Path<(String, String)>,
    Json(body): Json<TextBody>,
) -> Result<axum::Json<Value>, ApiError> {
    if body.text.trim().is_empty() {
        return Err(ApiError::bad_input("text", "is empty"));
    }
    let pending = app
        .store
        .write(move |ctx| {
            let pending = queries::pending(ctx.conn(), &id, &pid)?;
            if pending.state != PendingState::Waiting {
                return Err(ApiError::conflict(
                    "already_delivered",
                    "this message has reached the model already",
                ));
            }
            check_edited(&body.text, pending.attachments.as_ref())?;
            messages::set_pending_text(ctx, &pid, &body.text)?;
            let pending = queries::pending(ctx.conn(), &id, &pid)?;
            ctx.emit(&id, EventKind::PendingUpdated, json!({"pending": pending}))?;
            Ok(pending)
        })
        .await?;
    Ok(axum::Json(json!(pending)))
}

pub async fn remove_pending(
    State(app): State<Arc<App>>,
    Path((id, pid)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    app.store
        .write(move |ctx| {
            let pending = queries::pending(ctx.conn(), &id, &pid)?;
            if pending.state != PendingState::Waiting {
                return Err(ApiError::conflict(
                    "already_delivered",
                    "this message has reached the model already",
                ));
            }
            messages::delete_pending(ctx, &pid)?;
            ctx.emit(&id, EventKind::PendingRemoved, json!({"pending_id": pid}))?;
            Ok(())
        })
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn stop(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let cid = id.clone();
    let active = app
        .store
        .read(move |conn| {
            queries::conversation(conn, &cid, Trashed::Include)?;
            queries::active_run(conn, &cid)
        })
        .await?;
    // Its sub-agents stop with it, in the background too.
    let subagents = app.runs.stop_subagents(&id).await?;
    let Some(run) = active else {
        if subagents.is_empty() {
            return Err(ApiError::conflict(
                "no_active_run",
                "no run and no sub-agent is working in this chat",
            ));
        }
        return Ok(axum::Json(
            json!({"status": RunStatus::Stopped, "subagents": subagents}),
        ));
    };
    app.runs.stop(&id);
    // Answer once the run has ended, so the caller's next step sees it stopped.
    app.runs
        .wait_idle(&id, std::time::Duration::from_secs(5))
        .await;
    Ok(axum::Json(
        json!({"run_id": run.id, "status": RunStatus::Stopped, "subagents": subagents}),
    ))
}

/// Starts a run of `origin` in a chat with none working; `prepare` adds
/// what the run answers.
async fn start_run<F>(
    app: &Arc<App>,
    id: String,
    mode: RunMode,
    origin: Origin,
    prepare: F,
) -> Result<Response, ApiError>
where
    F: FnOnce(
            &mut crate::store::Ctx,
            &crate::model::Conversation,
        ) -> Result<Option<String>, ApiError>
        + Send
        + 'static,
{
    app.folders.check_reach(&id)?;
    let cid = id.clone();
    // Stored and started in a task of its own, as a send is (`Outgoing::store`):
    // a client gone mid-request must not leave the run queued for good.
    let app = app.clone();
    let started = tokio::spawn(async move {
        let run = app
            .store
            .write(move |ctx| {
                let conversation = queries::conversation(ctx.conn(), &cid, Trashed::Exclude)?;
                if queries::active_run(ctx.conn(), &cid)?.is_some() {
                    return Err(ApiError::conflict(
                        "run_active",
                        "a run is working in this chat: stop it or wait",
                    ));
                }
                let message_id = prepare(ctx, &conversation)?;
                insert_run(ctx, &conversation, mode, origin, message_id.as_deref())
            })
            .await?;
        app.runs.spawn(run.id.clone(), id);
        Ok::<_, ApiError>(run)
    });
    let run = started
        .await
        .map_err(|_| ApiError::internal("the run did not start"))??;
    Ok(accepted(json!({"run_id": run.id})))
}

pub async fn send_now(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Json(body): Json<RunBody>,
) -> Result<Response, ApiError> {
    let origin = run_origin(body.origin)?;
    start_run(&app, id, RunMode::Send, origin, |ctx, conversation| {
        if queries::waiting(ctx.conn(), &conversation.id)?.is_empty() {
            return Err(ApiError::conflict(
                "nothing_waiting",
                "no message is waiting in this chat",
            ));
        }
        Ok(None)
    })
    .await
}

pub async fn resume(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Json(body): Json<RunBody>,
) -> Result<Response, ApiError> {
    let origin = run_origin(body.origin)?;
    start_run(&app, id, RunMode::Continue, origin, |ctx, conversation| {
        let last = queries::last_run(ctx.conn(), &conversation.id)?;
        let Some(last) = last.filter(|r| {
            matches!(
                r.status,
                RunStatus::Interrupted | RunStatus::Paused | RunStatus::Stopped
            )
        }) else {
            return Err(ApiError::conflict(
                "nothing_to_continue",
                "the last run was not interrupted, paused or stopped",
            ));
        };
        let Some(message_id) = last.message_id else {
            return Err(ApiError::conflict(
                "nothing_to_continue",
                "the last run wrote no answer to continue",
            ));
        };
        // The answer continues in place: it must still be the head, or be
        // followed only by its calls' results.
        let transcript = queries::transcript(ctx.conn(), conversation)?;
        let at_head = transcript
            .iter()
            .rposition(|m| m.id == message_id)
            .is_some_and(|i| {
                transcript[i + 1..]
                    .iter()
                    .all(|m| matches!(m.role, Role::Tool | Role::Goal))
            });
        if !at_head {
            return Err(ApiError::conflict(
                "nothing_to_continue",
                "the chat has moved on since that answer",
            ));
        }
        Ok(Some(message_id))
    })
    .await
}

pub async fn regenerate(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Json(body): Json<RunBody>,
) -> Result<Response, ApiError> {
    let origin = run_origin(body.origin)?;
    start_run(
        &app,
        id,
        RunMode::Regenerate,
        origin,
        |ctx, conversation| {
            let transcript = queries::transcript(ctx.conn(), conversation)?;
            // A goal's turn answers its goal line: that is the question.
            let Some(user) = transcript
                .iter()
                .rev()
                .find(|m| m.role == Role::User || m.starts_goal_turn())
            else {
                return Err(ApiError::conflict(
                    "nothing_to_regenerate",
                    "this chat has no message to answer again",
                ));
            };
            // The new answer is a sibling of the old: the head moves back to the question.
            conversations::set_head(ctx, &conversation.id, &user.id)?;
            Ok(None)
        },
    )
    .await
}

/// An edit's body: the new text, and who starts the run.
#[derive(Deserialize)]
pub struct EditBody {
    text: String,
    #[serde(default)]
    origin: Option<String>,
}

pub async fn edit(
    State(app): State<Arc<App>>,
    Path((id, mid)): Path<(String, String)>,
    Json(body): Json<EditBody>,
) -> Result<Response, ApiError> {
    if body.text.trim().is_empty() {
        return Err(ApiError::bad_input("text", "is empty"));
    }
    let origin = run_origin(body.origin)?;
    let text = body.text;
    start_run(&app, id, RunMode::Edit, origin, move |ctx, conversation| {
        let original = queries::message(ctx.conn(), &conversation.id, &mid)?;
        if original.role != Role::User {
            return Err(ApiError::bad_input(
                "message_id",
                "only your own messages can be edited",
            ));
        }
        check_edited(&text, original.attachments.as_ref())?;
        // The edit keeps the records of what came with the message (its
        // files, its MCP context), whose text the page sends back with it;
        // the agent it asked for gets the new words as its task.
        let mut edited = crate::model::Message::draft(Role::User, &text);
        edited.parent_id = original.parent_id.clone();
        edited.attachments = super::invoke::retask(original.attachments.clone(), &text)?;
        crate::store::messages::insert_row(ctx, &conversation.id, edited)?;
        Ok(None)
    })
    .await
}

#[derive(Deserialize)]
pub struct ConsentBody {
    card_id: String,
    decision: String,
}

/// `POST …/consent`: a person's answer to a card. The same answer twice is
/// 204; another one is 409 `already_answered`.
pub async fn consent(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Json(body): Json<ConsentBody>,
) -> Result<Response, ApiError> {
    let Some(decision) = Choice::parse(&body.decision) else {
        return Err(ApiError::bad_input(
            "decision",
            format!(
                "{:?} is not an answer: use once, always or deny",
                body.decision
            ),
        ));
    };
    if body.card_id.is_empty() || body.card_id.len() > 64 {
        return Err(ApiError::bad_input("card_id", "is not a card id"));
    }
    let changed = app
        .runs
        .answer_consent(&id, &body.card_id, decision)
        .await?;
    Ok(if changed {
        axum::Json(json!({"card_id": body.card_id, "decision": body.decision})).into_response()
    } else {
        StatusCode::NO_CONTENT.into_response()
    })
}
