//! Conversations: create, list and search, the snapshot, rename, trash and
//! restore, delete forever, fork, clear, export and import.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};
use tandem_shared::http::ApiError;
use tandem_shared::time::now_unix;

use super::defaults::{check_mode, check_window, default_mode_value};
use super::Json;
use crate::kinds::EventKind;
use crate::model::Conversation;
use crate::settings::Settings;
use crate::store::conversations::announce_conversation;
use crate::store::conversations::{self, ConversationChange, NewConversation};
use crate::store::messages::insert_message;
use crate::store::queries::{self, ListQuery, Trashed};
use crate::store::{messages, meta, Ctx};
use crate::words::{MessageStatus, Origin, Role};
use crate::App;

pub const MAX_TITLE: usize = 200;
pub const MAX_MODEL: usize = 200;

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct CreateBody {
    model: Option<String>,
    title: Option<String>,
    settings: Option<Value>,
    agent_id: Option<String>,
    permission_mode: Option<String>,
    /// Who makes it: user (the default), trigger or connector.
    origin: Option<String>,
    /// Where its files are: own (the default) or shared (the box's shared folder).
    workspace: Option<String>,
    /// What it starts with switched: stored with it, so its first turn has them.
    switches: Option<super::switches::CreateSwitches>,
}

fn check_workspace(workspace: Option<String>) -> Result<String, ApiError> {
    let workspace = workspace.unwrap_or_else(|| "own".into());
    if crate::folders::KINDS.contains(&workspace.as_str()) {
        Ok(workspace)
    } else {
        Err(ApiError::bad_input("workspace", "must be own or shared"))
    }
}

pub fn check_title(title: &str) -> Result<(), ApiError> {
    if title.chars().count() > MAX_TITLE {
        return Err(ApiError::bad_input(
            "title",
            format!("is longer than {MAX_TITLE} characters"),
        ));
    }
    if title.chars().any(|c| c.is_control()) {
        return Err(ApiError::bad_input("title", "holds control characters"));
    }
    Ok(())
}

fn check_model(model: &str) -> Result<(), ApiError> {
    if model.is_empty() || model.len() > MAX_MODEL {
        return Err(ApiError::bad_input(
            "model",
            format!("must be 1 to {MAX_MODEL} bytes"),
        ));
    }
    Ok(())
}

/// Stores a new conversation and announces it. The caller notes a shared
/// one in `App::folders` once the write committed.
pub fn insert_conversation(ctx: &mut Ctx, new: &NewConversation) -> Result<Conversation, ApiError> {
    let id = conversations::insert(ctx, new)?;
    announce_conversation(ctx, &id)
}

/// The saved agent a request's `agent_id` names (by id or name), if it
/// names one: an unknown one is 404 naming the field.
pub async fn agent_of(
    app: &App,
    agent_id: Option<&str>,
) -> Result<Option<crate::agents::Agent>, ApiError> {
    let Some(id) = agent_id else {
        return Ok(None);
    };
    let wanted = id.to_string();
    let found = app
        .store
        .read(move |conn| crate::agents::find(conn, &wanted))
        .await?;
    match found {
        Some(agent) => Ok(Some(agent)),
        None => Err(ApiError::not_found("agent", id).with("field", "agent_id")),
    }
}

pub async fn create(
    State(app): State<Arc<App>>,
    Json(body): Json<CreateBody>,
) -> Result<Response, ApiError> {
    let title = body.title.unwrap_or_default();
    check_title(&title)?;
    let agent = agent_of(&app, body.agent_id.as_deref()).await?;
    let model = match body.model {
        Some(model) => {
            check_model(&model)?;
            model
        }
        None => match &agent {
            Some(agent) if !agent.model.is_empty() => agent.model.clone(),
            _ => app.default_model(),
        },
    };
    // A chat starts with the box's defaults, or, made with an agent, with
    // none of its own (the agent's settings stand under it); the body's
    // settings are laid over that.
    let base = match &agent {
        Some(_) => Settings::default(),
        None => app.store.read(meta::default_settings).await?,
    };
    let settings = match &body.settings {
        Some(patch) => base.patched("settings", patch)?,
        None => base,
    };
    check_window(&app, &model, &settings)?;
    let permission_mode = match body.permission_mode {
        Some(mode) => check_mode("permission_mode", &mode)?,
        None => default_mode_value(&app).await?,
    };
    let origin = Origin::requested(body.origin.as_deref())?;
    let mut workspace = check_workspace(body.workspace)?;
    if let Some(agent) = &agent {
        if let Some(folder) = &agent.folder {
            if let Some(why) = folder.refusal(&agent.name) {
                return Err(ApiError::conflict(crate::agent_folder::MISSING, why)
                    .with("agent_id", agent.id.as_str()));
            }
            // Kept to its folder and its own: never the box's shared one.
            workspace = "own".into();
        }
    }
    let network = agent.as_ref().and_then(|a| a.network);
    let switches = body.switches.unwrap_or_default();
    let named = super::switches::named(
        "switches.builtins_off",
        &switches.builtins_off,
        "switches.builtins_on",
        &switches.builtins_on,
    )?;
    let named_mcp = named.mcp_off.clone();
    if switches.mcp_off.len() > super::switches::MAX_ENTRIES {
        return Err(ApiError::bad_input(
            "switches.mcp_off",
            format!("{} entries at most", super::switches::MAX_ENTRIES),
        ));
    }
    let mut mcp_off = named_mcp.clone();
    for id in &switches.mcp_off {
        if !mcp_off.contains(id) {
            mcp_off.push(id.clone());
        }
    }
    let skills_off = if switches.skills_off.is_empty() {
        Vec::new()
    } else {
        let dir = app.config.skills_dir.clone();
        let catalog = tokio::task::spawn_blocking(move || crate::skills::Catalog::scan(None, &dir))
            .await
            .map_err(|_| ApiError::internal("the skills scan did not finish"))?;
        super::skills::check_off("switches.skills_off", switches.skills_off, &catalog)?
    };
    let new = NewConversation {
        title,
        model,
        settings,
        permission_mode,
        origin,
        workspace,
        agent_id: agent.map(|a| a.id),
    };
    let agent_id = new.agent_id.clone();
    let conversation = app
        .store
        .write(move |ctx| {
            // Deleted since it was read: refused, not made with a dangling id.
            if let Some(id) = &new.agent_id {
                crate::agents::get(ctx.conn(), id)?;
            }
            // Checked in the write that stores them: a connector removed
            // meanwhile refuses the chat rather than leaving a dangling switch.
            let check = crate::api::switches::check_connectors;
            check(ctx.conn(), "switches.builtins_off", &named_mcp)?;
            check(ctx.conn(), "switches.mcp_off", &switches.mcp_off)?;
            let made = insert_conversation(ctx, &new)?;
            let conn = ctx.conn();
            crate::store::tool_groups::set(conn, &made.id, &named.groups)?;
            crate::store::mcp::set_off_in(conn, &made.id, &mcp_off)?;
            crate::store::skills::set_off(conn, &made.id, &skills_off)?;
            Ok(made)
        })
        .await
        .map_err(|e| match &agent_id {
            Some(_) if e.kind == "not_found" => e.with("field", "agent_id"),
            _ => e,
        })?;
    app.folders.made(&conversation.id, &conversation.workspace);
    app.folders
        .ran_with(&conversation.id, conversation.agent_id.as_deref());
    if let Some(preset) = network {
        super::egress::start_with(&app, &conversation.id, preset).await;
    }
    tracing::info!(conversation = %conversation.id, origin = %conversation.origin,
        workspace = %conversation.workspace, "conversation created");
    Ok((StatusCode::CREATED, axum::Json(conversation)).into_response())
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct ListParams {
    limit: Option<String>,
    before: Option<String>,
    q: Option<String>,
    trash: Option<String>,
}

pub async fn list(
    State(app): State<Arc<App>>,
    Query(params): Query<ListParams>,
) -> Result<axum::Json<Value>, ApiError> {
    let limit = match params.limit.as_deref() {
        None | Some("") => 50,
        Some(text) => match text.parse::<usize>() {
            Ok(n) if (1..=200).contains(&n) => n,
            _ => {
                return Err(ApiError::bad_input(
                    "limit",
                    format!("{text:?} is not a number from 1 to 200"),
                ))
            }
        },
    };
    if params.q.as_ref().is_some_and(|q| q.len() > 500) {
        return Err(ApiError::bad_input("q", "is longer than 500 bytes"));
    }
    let query = ListQuery {
        limit,
        before: params.before,
        q: params.q,
        trashed: matches!(params.trash.as_deref(), Some("1" | "true")),
    };
    let (conversations, next) = app
        .store
        .read(move |conn| {
            let (list, next) = queries::list(conn, &query)?;
            let Some(q) = query.q.as_deref().filter(|q| !q.trim().is_empty()) else {
                return Ok((serde_json::to_value(&list).unwrap_or_default(), next));
            };
            // A search answers where each chat matched: the line, when a
            // message did (a title match alone has none).
            let mut found = Vec::with_capacity(list.len());
            for conversation in &list {
                let mut value = serde_json::to_value(conversation).unwrap_or_default();
                if let Some((message_id, line)) = queries::matching_line(conn, &conversation.id, q)?
                {
                    value["match"] = json!({"message_id": message_id, "line": line});
                }
                found.push(value);
            }
            Ok((Value::Array(found), next))
        })
        .await?;
    let mut body = json!({"conversations": conversations});
    if let Some(next) = next {
        body["next"] = json!(next);
    }
    Ok(axum::Json(body))
}

pub async fn snapshot(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let snapshot = app
        .store
        .read(move |conn| queries::snapshot(conn, &id))
        .await?;
    Ok(axum::Json(json!(snapshot)))
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct UpdateBody {
    title: Option<String>,
    model: Option<String>,
    settings: Option<Value>,
}

pub async fn update(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Json(body): Json<UpdateBody>,
) -> Result<axum::Json<Conversation>, ApiError> {
    if let Some(title) = &body.title {
        check_title(title)?;
    }
    if let Some(model) = &body.model {
        check_model(model)?;
    }
    let windows = app.clone();
    let conversation = app
        .store
        .write(move |ctx| {
            let conversation = queries::conversation(ctx.conn(), &id, Trashed::Exclude)?;
            if (body.title.is_some() || body.model.is_some())
                && queries::active_run(ctx.conn(), &id)?.is_some()
            {
                return Err(ApiError::conflict("run_active", "a run is working in this chat: stop it or wait, then change the title or model"));
            }
            // Laid over what the chat has: a name with null clears it.
            let settings = match &body.settings {
                Some(patch) => {
                    let settings = conversation.settings.patched("settings", patch)?;
                    let model = body.model.as_deref().unwrap_or(&conversation.model);
                    check_window(&windows, model, &settings)?;
                    Some(settings)
                }
                None => None,
            };
            let change = ConversationChange {
                title: body.title.as_deref(),
                model: body.model.as_deref(),
                settings: settings.as_ref(),
            };
            conversations::update(ctx, &conversation.id, &change)?;
            let conversation = announce_conversation(ctx, &id)?;
            Ok(conversation)
        })
        .await?;
    Ok(axum::Json(conversation))
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct RemoveParams {
    forever: Option<String>,
}

pub async fn remove(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Query(params): Query<RemoveParams>,
) -> Result<StatusCode, ApiError> {
    let forever = matches!(params.forever.as_deref(), Some("1" | "true"));
    // A chat's run, and its sub-agents', end before its chat goes.
    let children = app.runs.stop_subagents(&id).await?;
    if app.runs.stop(&id) {
        app.runs
            .wait_idle(&id, std::time::Duration::from_secs(5))
            .await;
    }
    for child in &children {
        app.runs
            .wait_idle(child, std::time::Duration::from_secs(5))
            .await;
    }
    let cid = id.clone();
    app.store
        .write(move |ctx| {
            queries::conversation(ctx.conn(), &cid, Trashed::Include)?;
            if forever {
                conversations::delete_forever(ctx, &cid)?;
            } else {
                conversations::trash(ctx, &cid, now_unix())?;
                // Nothing of a chat in the trash goes on by itself.
                let why = "the chat went to the trash";
                crate::store::goals::pause(ctx, &cid, crate::words::PausedBy::User, why)?;
                crate::store::loops::pause_all(ctx, &cid, why)?;
                announce_conversation(ctx, &cid)?;
            }
            Ok(())
        })
        .await?;
    // Its MCP sessions end with it (restored, it opens them again).
    app.runs.mcp().close_chat(&id).await;
    if forever {
        for child in &children {
            app.remove_folders(child).await;
        }
        app.remove_folders(&id).await;
    } else if let Some(sandboxes) = &app.sandboxes {
        // In the trash, its sandbox stops at once; restore starts it again
        // at the next command.
        sandboxes.stop(&id, "the chat went to the trash").await;
    }
    tracing::info!(conversation = %id, forever, "conversation deleted");
    Ok(StatusCode::NO_CONTENT)
}

pub async fn restore(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<axum::Json<Conversation>, ApiError> {
    let conversation = app
        .store
        .write(move |ctx| {
            queries::conversation(ctx.conn(), &id, Trashed::Include)?;
            conversations::restore(ctx, &id)?;
            let conversation = announce_conversation(ctx, &id)?;
            Ok(conversation)
        })
        .await?;
    Ok(axum::Json(conversation))
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct ExportParams {
    format: Option<String>,
}

pub async fn export(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Query(params): Query<ExportParams>,
) -> Result<Response, ApiError> {
    let format = params.format.unwrap_or_else(|| "json".into());
    if format != "json" && format != "md" {
        return Err(ApiError::bad_input(
            "format",
            format!("{format:?} is not json or md"),
        ));
    }
    let (conversation, messages) = app
        .store
        .read(move |conn| {
            let conversation = queries::conversation(conn, &id, Trashed::Include)?;
            let mut messages = queries::transcript(conn, &conversation)?;
            // A goal is the chat's, not its words: its lines stay out, and a
            // compaction kept from one keeps from the message after it.
            let whole = messages.clone();
            messages.retain(|m| m.role != Role::Goal);
            for m in &mut messages {
                if let Some(k) = m.keep_from.take() {
                    m.keep_from = crate::model::past_goal_lines(&whole, &k);
                }
            }
            Ok((conversation, messages))
        })
        .await?;
    if format == "md" {
        let mut text = format!(
            "# {}\n\n",
            if conversation.title.is_empty() {
                "Untitled chat"
            } else {
                &conversation.title
            }
        );
        text.push_str(&format!(
            "_Model: {} · created {}_\n\n",
            conversation.model, conversation.created
        ));
        for m in &messages {
            let who = match m.role {
                Role::User => "You",
                Role::Assistant => "Assistant",
                Role::Tool => "Tool result",
                Role::Compacted => "Summary of the earlier conversation",
                Role::System | Role::Cleared | Role::Goal => m.role.as_str(),
            };
            text.push_str(&format!("## {who}\n\n{}\n\n", m.text));
            for call in m.calls() {
                let line = crate::tools::summarize_call(call.name, call.arguments);
                text.push_str(&format!("> {line}\n\n"));
            }
        }
        return Ok((
            [(header::CONTENT_TYPE, "text/markdown; charset=utf-8")],
            text,
        )
            .into_response());
    }
    let position = |id: &str| messages.iter().position(|m| m.id == id);
    let messages: Vec<Value> = messages
        .iter()
        .map(|m| {
            let mut out = json!({"role": m.role, "text": m.text, "created": m.created, "reasoning": m.reasoning});
            if let Some(calls) = &m.tool_calls {
                out["tool_calls"] = calls.clone();
            }
            if let Some(id) = &m.tool_call_id {
                out["tool_call_id"] = json!(id);
            }
            // Ids are made anew on import: a compaction's kept point goes by position.
            if let Some(at) = m.keep_from.as_deref().and_then(position) {
                out["keep_from_index"] = json!(at);
            }
            out
        })
        .collect();
    Ok(axum::Json(json!({
        "version": 1,
        "title": conversation.title,
        "model": conversation.model,
        "settings": conversation.settings,
        "workspace": conversation.workspace,
        "messages": messages,
    }))
    .into_response())
}

#[derive(Deserialize)]
pub struct ImportBody {
    version: u32,
    #[serde(default)]
    title: String,
    model: String,
    #[serde(default)]
    settings: Option<Value>,
    /// own (the default) or shared.
    #[serde(default)]
    workspace: Option<String>,
    messages: Vec<ImportMessage>,
}

#[derive(Deserialize)]
pub struct ImportMessage {
    role: String,
    text: String,
    #[serde(default)]
    tool_calls: Option<Vec<Value>>,
    #[serde(default)]
    tool_call_id: Option<String>,
    #[serde(default)]
    keep_from_index: Option<usize>,
}

pub const MAX_IMPORT_MESSAGES: usize = 10_000;

pub async fn import(
    State(app): State<Arc<App>>,
    Json(body): Json<ImportBody>,
) -> Result<Response, ApiError> {
    if body.version != 1 {
        return Err(ApiError::bad_input(
            "version",
            format!("{} is not a version this build reads (1)", body.version),
        ));
    }
    check_title(&body.title)?;
    check_model(&body.model)?;
    let settings = match &body.settings {
        Some(value) => Settings::check("settings", value)?,
        None => Settings::default(),
    };
    let workspace = check_workspace(body.workspace)?;
    if body.messages.len() > MAX_IMPORT_MESSAGES {
        return Err(ApiError::bad_input(
            "messages",
            format!(
                "{} messages is more than {MAX_IMPORT_MESSAGES}",
                body.messages.len()
            ),
        ));
    }
    let mut roles: Vec<Role> = Vec::with_capacity(body.messages.len());
    for (i, m) in body.messages.iter().enumerate() {
        // A goal line is never exported, so never imported either.
        let Some(role) = Role::parse(&m.role).filter(|r| *r != Role::Goal) else {
            return Err(ApiError::bad_input(
                &format!("messages[{i}].role"),
                format!(
                    "{:?} is not user, assistant, system, tool, compacted or cleared",
                    m.role
                ),
            ));
        };
        roles.push(role);
        if let Some(calls) = &m.tool_calls {
            let well_formed = calls.iter().all(|c| {
                c.get("id").and_then(Value::as_str).is_some()
                    && c.pointer("/function/name")
                        .and_then(Value::as_str)
                        .is_some()
                    && c.pointer("/function/arguments")
                        .and_then(Value::as_str)
                        .is_some()
            });
            if role != Role::Assistant || calls.len() > 64 || !well_formed {
                return Err(ApiError::bad_input(
                    &format!("messages[{i}].tool_calls"),
                    "go on assistant messages only, 64 at most, each {id, function: {name, arguments}}",
                ));
            }
        }
        if m.tool_call_id
            .as_ref()
            .is_some_and(|id| role != Role::Tool || id.len() > 200)
        {
            return Err(ApiError::bad_input(
                &format!("messages[{i}].tool_call_id"),
                "goes on tool messages only, 200 bytes at most",
            ));
        }
        if m.keep_from_index
            .is_some_and(|k| role != Role::Compacted || k >= i)
        {
            return Err(ApiError::bad_input(
                &format!("messages[{i}].keep_from_index"),
                "goes on compacted messages only and names an earlier message",
            ));
        }
    }
    let permission_mode = default_mode_value(&app).await?;
    let new = NewConversation {
        title: body.title,
        model: body.model,
        settings,
        permission_mode,
        origin: Origin::Import,
        workspace,
        agent_id: None,
    };
    let conversation = app
        .store
        .write(move |ctx| {
            let conversation = insert_conversation(ctx, &new)?;
            let mut ids: Vec<String> = Vec::with_capacity(body.messages.len());
            for (m, &role) in body.messages.iter().zip(&roles) {
                let status = (role == Role::Assistant).then_some(MessageStatus::Done);
                let message = insert_message(ctx, &conversation.id, role, &m.text, None, status)?;
                let keep_from = m.keep_from_index.and_then(|k| ids.get(k).cloned());
                messages::set_imported_parts(
                    ctx,
                    &message.id,
                    m.tool_calls.as_deref(),
                    m.tool_call_id.as_deref(),
                    keep_from.as_deref(),
                )?;
                ids.push(message.id);
            }
            queries::conversation(ctx.conn(), &conversation.id, Trashed::Include)
        })
        .await?;
    app.folders.made(&conversation.id, &conversation.workspace);
    Ok((StatusCode::CREATED, axum::Json(conversation)).into_response())
}

pub async fn clear(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    app.store
        .write(move |ctx| {
            queries::conversation(ctx.conn(), &id, Trashed::Exclude)?;
            if queries::active_run(ctx.conn(), &id)?.is_some() {
                return Err(ApiError::conflict(
                    "run_active",
                    "a run is working in this chat: stop it or wait, then clear",
                ));
            }
            let marker = insert_message(ctx, &id, Role::Cleared, "", None, None)?;
            ctx.emit(&id, EventKind::Cleared, json!({"message_id": marker.id}))?;
            Ok(())
        })
        .await?;
    Ok(axum::Json(json!({"cleared": true})))
}

pub async fn compact(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let cid = id.clone();
    let conversation = app
        .store
        .read(move |conn| {
            let conversation = queries::conversation(conn, &cid, Trashed::Exclude)?;
            if queries::active_run(conn, &cid)?.is_some() {
                return Err(ApiError::conflict(
                    "run_active",
                    "a run is working in this chat: stop it or wait, then compact",
                ));
            }
            Ok(conversation)
        })
        .await?;
    let compacted = app
        .runs
        .compact_now(&conversation.id, &conversation.model)
        .await?;
    Ok(axum::Json(json!({
        "before": compacted.before,
        "after": compacted.after,
        "compacted": compacted.cut,
    })))
}

pub async fn permission_mode(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let conversation = app
        .store
        .read(move |conn| queries::conversation(conn, &id, Trashed::Exclude))
        .await?;
    Ok(axum::Json(json!({"mode": conversation.permission_mode})))
}

#[derive(Deserialize)]
pub struct ModeBody {
    mode: String,
}

pub async fn set_permission_mode(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Json(body): Json<ModeBody>,
) -> Result<axum::Json<Value>, ApiError> {
    let mode = check_mode("mode", &body.mode)?;
    app.store
        .write(move |ctx| {
            queries::conversation(ctx.conn(), &id, Trashed::Exclude)?;
            conversations::set_permission_mode(ctx, &id, mode)?;
            announce_conversation(ctx, &id)?;
            Ok(())
        })
        .await?;
    Ok(axum::Json(json!({"mode": body.mode})))
}
