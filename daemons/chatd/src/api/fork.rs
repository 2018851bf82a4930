//! `POST /conversations/{id}/fork`: a new chat that is what the source was
//! up to one message: its messages with their tool calls, results and
//! attachments' records (and the attached files, copied into the fork's own
//! workspace), its settings, its agent, and its egress preset and rules.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value;
use tandem_shared::http::ApiError;

use super::conversations::{check_title, insert_conversation};
use super::Json;
use crate::model::Message;
use crate::store::conversations::NewConversation;
use crate::store::messages;
use crate::store::messages::insert_row;
use crate::store::queries::{self, Trashed};
use crate::words::{MessageStatus, Origin, Role};
use crate::workspace::Workspace;
use crate::App;

/// The largest attached file a fork copies (the files route's bound).
const MAX_COPIED_BYTES: u64 = 50 << 20;

#[derive(Deserialize)]
pub struct ForkBody {
    from_message_id: String,
    #[serde(default)]
    title: Option<String>,
}

pub async fn fork(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Json(body): Json<ForkBody>,
) -> Result<Response, ApiError> {
    if let Some(title) = &body.title {
        check_title(title)?;
    }
    let source_id = id.clone();
    let (conversation, files) = app
        .store
        .write(move |ctx| {
            let source = queries::conversation(ctx.conn(), &id, Trashed::Exclude)?;
            queries::message(ctx.conn(), &id, &body.from_message_id).map_err(|_| {
                ApiError::bad_input("from_message_id", "is not a message of this chat")
            })?;
            let path: Vec<Message> =
                queries::path_to(ctx.conn(), &id, Some(&body.from_message_id))?;
            // An untitled source's fork is named after its first message, as
            // the copy is made.
            let title = body.title.clone().unwrap_or_else(|| {
                if source.title.is_empty() {
                    String::new()
                } else {
                    format!("{} (fork)", source.title)
                }
            });
            let new = NewConversation {
                title,
                model: source.model.clone(),
                settings: source.settings.clone(),
                permission_mode: source.permission_mode,
                origin: Origin::Fork,
                // A fork of a shared chat works on the same shared folder.
                workspace: source.workspace.clone(),
                // A fork keeps its source's agent.
                agent_id: source.agent_id.clone(),
            };
            let fork = insert_conversation(ctx, &new)?;
            // A fork keeps its source's switches: skills and MCP connectors
            // off, tool groups switched.
            let conn = ctx.conn();
            crate::store::skills::set_off(conn, &fork.id, &crate::store::skills::off(conn, &id)?)?;
            crate::store::mcp::set_off_in(conn, &fork.id, &crate::store::mcp::off_in(conn, &id)?)?;
            crate::store::tool_groups::set(
                conn,
                &fork.id,
                &crate::store::tool_groups::of(conn, &id)?,
            )?;
            let mut files = Vec::new();
            let mut ids: HashMap<String, String> = HashMap::new();
            let mut parent: Option<String> = None;
            // A fork starts with no goal: the goal's lines stay behind.
            for m in path.iter().filter(|m| m.role != Role::Goal) {
                let mut copy = Message::draft(m.role, &m.text);
                copy.parent_id = parent.clone();
                copy.status = m.status.map(|s| match s {
                    MessageStatus::Streaming => MessageStatus::Interrupted,
                    s => s,
                });
                copy.reasoning = m.reasoning.clone();
                // Call ids are chatd's own, unique in a chat: the copies keep
                // them, so every result still answers its call.
                copy.tool_calls = m.tool_calls.clone();
                copy.tool_call_id = m.tool_call_id.clone();
                copy.summary = m.summary.clone();
                copy.attachments = m.attachments.clone();
                copy.keep_from = m
                    .keep_from
                    .as_deref()
                    .and_then(|k| crate::model::past_goal_lines(&path, k))
                    .and_then(|k| ids.get(&k).cloned());
                files.extend(attached_paths(m));
                let copy = insert_row(ctx, &fork.id, copy)?;
                messages::set_forked_parts(
                    ctx,
                    &copy.id,
                    copy.tool_calls.as_ref(),
                    copy.reasoning.as_deref(),
                    copy.keep_from.as_deref(),
                )?;
                ids.insert(m.id.clone(), copy.id.clone());
                parent = Some(copy.id);
            }
            Ok((
                queries::conversation(ctx.conn(), &fork.id, Trashed::Include)?,
                files,
            ))
        })
        .await?;
    app.folders.made(&conversation.id, &conversation.workspace);
    app.folders
        .ran_with(&conversation.id, conversation.agent_id.as_deref());
    copy_files(&app, &source_id, &conversation.id, files).await;
    copy_egress(&app, &source_id, &conversation.id).await;
    tracing::info!(conversation = %conversation.id, source = %source_id, "conversation forked");
    Ok((StatusCode::CREATED, axum::Json(conversation)).into_response())
}

/// The workspace paths of a message's attachments.
fn attached_paths(m: &Message) -> Vec<String> {
    m.attachments
        .as_ref()
        .and_then(Value::as_array)
        .map(|files| {
            files
                .iter()
                .filter_map(|f| f["path"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Copies the attached files into the fork's workspace, through the
/// workspace's own checks (no links followed). A file since deleted or
/// swapped for a link is left out: the record stays, as in the source.
async fn copy_files(app: &App, source: &str, fork: &str, files: Vec<String>) {
    let from = app.folders.workspace(source);
    let to = app.folders.workspace(fork);
    if files.is_empty() || from == to {
        return;
    }
    let (fork_id, wanted) = (fork.to_string(), files.len());
    let copied = tokio::task::spawn_blocking(move || {
        let (Ok(from), Ok(to)) = (Workspace::existing(&from), Workspace::open(&to)) else {
            return 0;
        };
        let mut copied = 0;
        for path in files {
            if let Ok((_, bytes)) = from.read_all(&path, MAX_COPIED_BYTES) {
                if to.write_file(&path, &bytes).is_ok() {
                    copied += 1;
                }
            }
        }
        copied
    })
    .await
    .unwrap_or(0);
    if copied < wanted {
        tracing::warn!(conversation = %fork_id, copied, wanted, "some attached files were not copied into the fork");
    }
}

/// Gives the fork its source's egress preset and rules. Without egressd
/// the fork is made all the same, with the default preset; the log says so.
async fn copy_egress(app: &App, source: &str, fork: &str) {
    let get =
        |path: String| async move { app.egress.forward(reqwest::Method::GET, &path, None).await };
    let (Ok((_, preset)), Ok((_, rules))) = (
        get(format!("/chats/{source}/egress")).await,
        get(format!("/chats/{source}/rules")).await,
    ) else {
        tracing::warn!(conversation = %fork, "egressd did not answer: the fork has the default egress preset and no rules");
        return;
    };
    let no_rules = rules["rules"].as_array().is_none_or(Vec::is_empty);
    if preset["socket"].is_null() && no_rules {
        // egressd never heard of the source: the fork starts as it did.
        return;
    }
    let put = app
        .egress
        .forward(
            reqwest::Method::PUT,
            &format!("/chats/{fork}/egress"),
            Some(&serde_json::json!({"preset": preset["preset"]})),
        )
        .await;
    if put.is_err() {
        // Above a ceiling lowered since: the fork gets what the source has in effect.
        let _ = app
            .egress
            .forward(
                reqwest::Method::PUT,
                &format!("/chats/{fork}/egress"),
                Some(&serde_json::json!({"preset": preset["effective"]})),
            )
            .await;
    }
    for rule in rules["rules"].as_array().into_iter().flatten() {
        let (Some(host), Some(port)) = (rule["host"].as_str(), rule["port"].as_u64()) else {
            continue;
        };
        let host = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        let body = serde_json::json!({"verdict": rule["verdict"], "host": host});
        if let Err(e) = app
            .egress
            .forward(
                reqwest::Method::POST,
                &format!("/chats/{fork}/rules"),
                Some(&body),
            )
            .await
        {
            tracing::warn!(conversation = %fork, error = %e.message, "an egress rule was not copied into the fork");
        }
    }
}
