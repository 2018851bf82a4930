//! One chat's tools and its MCP switches (docs/api.md "A chat's tools"):
//! `GET …/tools` says what the chat is offered and why not the rest;
//! `PUT …/mcp {off}` switches connectors off for this chat alone; `PUT
//! …/builtins {off, on}` switches its tool groups (connectors too).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tandem_shared::http::ApiError;

use super::switches;
use super::Json;
use crate::store::mcp as rows;
use crate::store::queries::{self, Trashed};
use crate::store::tool_groups;
use crate::App;

/// `GET /conversations/{id}/tools`.
pub async fn tools(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let view = app.runs.tools_view(&id).await?;
    Ok(axum::Json(view).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OffBody {
    off: Vec<String>,
}

/// `PUT /conversations/{id}/mcp {off: [connector ids]}`: replaces the
/// chat's list; an unknown id refuses the whole body. Answers as `GET
/// …/tools`; the chat's sessions with a connector now off are closed.
pub async fn set_off(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Json(body): Json<OffBody>,
) -> Result<Response, ApiError> {
    if body.off.len() > crate::mcp::MAX_CONNECTORS {
        return Err(ApiError::bad_input(
            "off",
            format!(
                "names {} connectors; there are {} at most",
                body.off.len(),
                crate::mcp::MAX_CONNECTORS
            ),
        ));
    }
    let (cid, off) = (id.clone(), body.off.clone());
    app.store
        .write(move |ctx| {
            queries::conversation(ctx.conn(), &cid, Trashed::Exclude)?;
            for wanted in &off {
                if rows::get(ctx.conn(), wanted)?.is_none() {
                    return Err(ApiError::bad_input(
                        "off",
                        format!(
                            "{:?} is not a saved MCP connector's id",
                            wanted.chars().take(64).collect::<String>()
                        ),
                    ));
                }
            }
            rows::set_off_in(ctx.conn(), &cid, &off)?;
            Ok(())
        })
        .await?;
    for connector in &body.off {
        app.runs.mcp().close_one(&id, connector).await;
    }
    tracing::info!(conversation = %id, off = body.off.len(), "mcp: chat's connectors switched");
    tools(State(app), Path(id)).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuiltinsBody {
    off: Option<Vec<String>>,
    on: Option<Vec<String>>,
}

/// `PUT /conversations/{id}/builtins {off?, on?}`: `off` replaces what
/// the chat switched off (groups, and connectors as `mcp:<id>`), `on` the
/// opt-in groups switched on; a list left out stays as it was, a bad entry
/// refuses the whole body. Answers as `GET …/tools`.
pub async fn set_builtins(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Json(body): Json<BuiltinsBody>,
) -> Result<Response, ApiError> {
    let named = switches::named(
        "off",
        body.off.as_deref().unwrap_or_default(),
        "on",
        body.on.as_deref().unwrap_or_default(),
    )?;
    let (cid, given_off, given_on) = (id.clone(), body.off.is_some(), body.on.is_some());
    let wanted = named.clone();
    let closed = app
        .store
        .write(move |ctx| {
            let conn = ctx.conn();
            queries::conversation(conn, &cid, Trashed::Exclude)?;
            let mut now = tool_groups::of(conn, &cid)?;
            let was = rows::off_in(conn, &cid)?;
            if given_off {
                switches::check_connectors(conn, "off", &wanted.mcp_off)?;
                now.off = wanted.groups.off;
                rows::set_off_in(conn, &cid, &wanted.mcp_off)?;
            }
            if given_on {
                now.on = wanted.groups.on;
            }
            if now.on.iter().any(|g| now.off.contains(g)) {
                return Err(ApiError::bad_input("on", "a group is both off and on"));
            }
            tool_groups::set(conn, &cid, &now)?;
            let closed: Vec<String> = if given_off {
                wanted
                    .mcp_off
                    .into_iter()
                    .filter(|c| !was.contains(c))
                    .collect()
            } else {
                Vec::new()
            };
            Ok(closed)
        })
        .await?;
    for connector in &closed {
        app.runs.mcp().close_one(&id, connector).await;
    }
    tracing::info!(conversation = %id, off = named.groups.off.len() + named.mcp_off.len(),
        on = named.groups.on.len(), "chat's tool groups switched");
    tools(State(app), Path(id)).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DraftParams {
    model: Option<String>,
    agent_id: Option<String>,
}

/// `GET /draft/tools?model=&agent_id=`: what a chat made now would be
/// offered, each switch at its default, in `GET …/tools`'s shape (the
/// page shows the switches before the chat exists). A model the engine
/// does not list is 400, an unknown agent 404.
pub async fn draft_tools(
    State(app): State<Arc<App>>,
    axum::extract::Query(params): axum::extract::Query<DraftParams>,
) -> Result<Response, ApiError> {
    let agent = super::conversations::agent_of(&app, params.agent_id.as_deref()).await?;
    let model = match params.model {
        Some(model) => {
            let listed = app.engine_state().models;
            if model.is_empty() || model.len() > super::conversations::MAX_MODEL {
                return Err(ApiError::bad_input("model", "must be 1 to 200 bytes"));
            }
            if !listed.is_empty() && !listed.iter().any(|m| m.id == model) {
                return Err(ApiError::bad_input(
                    "model",
                    format!(
                        "the engine has no model {:?}",
                        model.chars().take(64).collect::<String>()
                    ),
                ));
            }
            model
        }
        None => match &agent {
            Some(agent) if !agent.model.is_empty() => agent.model.clone(),
            _ => app.default_model(),
        },
    };
    let view = app.runs.draft_tools_view(&model, agent).await?;
    Ok(axum::Json(view).into_response())
}
