//! Tool policies (docs/api.md "Tool policies and plan mode"): `always`,
//! `ask` or `never` per tool, for the box (`GET|PUT /tools/policies`) and
//! for one chat over the box's (`GET|PUT /conversations/{id}/tools/
//! policies`); and `PATCH /conversations/{id}/settings`, a chat's mode and
//! settings in one request.

use std::sync::Arc;

use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use tandem_shared::http::ApiError;

use super::defaults::check_mode;
use super::Json;
use crate::store::conversations::{self, ConversationChange};
use crate::store::policies::{self, Policies};
use crate::store::queries::{self, Trashed};
use crate::words::ToolPolicy;
use crate::App;

/// The most tools one list sets.
const MAX_POLICIES: usize = 200;
/// The longest tool key (`mcp:<connector id>:<tool>`).
const MAX_KEY: usize = 200;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoliciesBody {
    policies: Map<String, Value>,
}

/// The policies a body sets: each key a built-in tool's name or an MCP
/// tool's rule name (`mcp:<connector id>:<tool>`), each value a policy.
fn checked(app: &App, body: &Map<String, Value>) -> Result<Policies, ApiError> {
    if body.len() > MAX_POLICIES {
        return Err(ApiError::bad_input(
            "policies",
            format!("sets {} tools; {MAX_POLICIES} at most", body.len()),
        ));
    }
    let builtins = app.runs.builtin_names();
    let mut out = Policies::new();
    for (tool, value) in body {
        let shown: String = tool.chars().take(64).collect();
        let mcp = tool
            .strip_prefix("mcp:")
            .and_then(|rest| rest.split_once(':'))
            .is_some_and(|(c, t)| !c.is_empty() && !t.is_empty());
        if tool.len() > MAX_KEY || !(mcp || builtins.contains(&tool.as_str())) {
            return Err(ApiError::bad_input(
                "policies",
                format!(
                    "{shown:?} is not a tool: name a built-in one ({}) or an MCP tool as \
                     mcp:<connector id>:<tool>",
                    builtins.join(", ")
                ),
            ));
        }
        let policy = value.as_str().and_then(ToolPolicy::parse).ok_or_else(|| {
            ApiError::bad_input(&format!("policies.{shown}"), "must be always, ask or never")
        })?;
        out.insert(tool.clone(), policy);
    }
    Ok(out)
}

/// `GET /tools/policies`: the box's.
pub async fn box_policies(State(app): State<Arc<App>>) -> Result<axum::Json<Value>, ApiError> {
    let policies = app.store.read(|conn| Ok(policies::of_box(conn)?)).await?;
    Ok(axum::Json(json!({ "policies": policies })))
}

/// `PUT /tools/policies {policies}`: replaces the box's; a bad entry
/// refuses the whole body.
pub async fn set_box_policies(
    State(app): State<Arc<App>>,
    Json(body): Json<PoliciesBody>,
) -> Result<axum::Json<Value>, ApiError> {
    let wanted = checked(&app, &body.policies)?;
    let count = wanted.len();
    app.store
        .write(move |ctx| Ok(policies::set_box(ctx.conn(), &wanted)?))
        .await?;
    tracing::info!(tools = count, "box tool policies set");
    box_policies(State(app)).await
}

/// `GET /conversations/{id}/tools/policies`: the chat's own, the box's and
/// what holds (the chat's over the box's).
pub async fn chat_policies(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let view = app
        .store
        .read(move |conn| {
            queries::conversation(conn, &id, Trashed::Exclude)?;
            Ok(json!({
                "policies": policies::of_chat(conn, &id)?,
                "box": policies::of_box(conn)?,
                "effective": policies::effective(conn, &id)?,
            }))
        })
        .await?;
    Ok(axum::Json(view))
}

/// `PUT /conversations/{id}/tools/policies {policies}`: replaces the chat's own.
pub async fn set_chat_policies(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Json(body): Json<PoliciesBody>,
) -> Result<axum::Json<Value>, ApiError> {
    let wanted = checked(&app, &body.policies)?;
    let (cid, count) = (id.clone(), wanted.len());
    app.store
        .write(move |ctx| {
            queries::conversation(ctx.conn(), &cid, Trashed::Exclude)?;
            Ok(policies::set_chat(ctx.conn(), &cid, &wanted)?)
        })
        .await?;
    tracing::info!(conversation = %id, tools = count, "chat tool policies set");
    chat_policies(State(app), Path(id)).await
}

/// `PATCH /conversations/{id}/settings {permission_mode?, <setting>?…}`:
/// the mode and the settings (as `PATCH /conversations/{id} {settings}`
/// lays them) in one write; a bad one changes nothing. Answers the chat.
pub async fn patch_settings(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Json(mut body): Json<Map<String, Value>>,
) -> Result<axum::Json<crate::model::Conversation>, ApiError> {
    let mode = match body.remove("permission_mode") {
        None => None,
        Some(Value::String(mode)) => Some(check_mode("permission_mode", &mode)?),
        Some(_) => {
            return Err(ApiError::bad_input(
                "permission_mode",
                "must be plan, ask, auto or yolo",
            ))
        }
    };
    let patch = Value::Object(body);
    let windows = app.clone();
    let conversation = app
        .store
        .write(move |ctx| {
            let conversation = queries::conversation(ctx.conn(), &id, Trashed::Exclude)?;
            let settings = conversation.settings.patched("settings", &patch)?;
            super::defaults::check_window(&windows, &conversation.model, &settings)?;
            let change = ConversationChange {
                title: None,
                model: None,
                settings: Some(&settings),
            };
            conversations::update(ctx, &id, &change)?;
            if let Some(mode) = mode {
                conversations::set_permission_mode(ctx, &id, mode)?;
            }
            conversations::announce_conversation(ctx, &id)
        })
        .await?;
    Ok(axum::Json(conversation))
}
