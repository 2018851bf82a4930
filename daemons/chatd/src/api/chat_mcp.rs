//! One chat's tools and its MCP switches (docs/api.md "A chat's tools"):
//! `GET …/tools` says what the chat is offered and why not the rest;
//! `PUT …/mcp {off}` switches connectors off for this chat alone; `PUT
//! …/builtins {on}` switches opt-in groups on for it.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tandem_shared::http::ApiError;

use super::Json;
use crate::store::mcp as rows;
use crate::store::queries::{self, Trashed};
use crate::words::OptIn;
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
    on: Vec<String>,
}

/// `PUT /conversations/{id}/builtins {on: [groups]}`: replaces the opt-in
/// groups switched on for the chat (`saved_agents`); an unknown name
/// refuses the whole body. Answers as `GET …/tools`.
pub async fn set_builtins(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Json(body): Json<BuiltinsBody>,
) -> Result<Response, ApiError> {
    let mut on = Vec::new();
    for name in &body.on {
        let Some(group) = OptIn::parse(name) else {
            return Err(ApiError::bad_input(
                "on",
                format!(
                    "{:?} is not an opt-in group: use {}",
                    name.chars().take(64).collect::<String>(),
                    OptIn::ALL
                        .iter()
                        .map(|g| g.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        };
        if !on.contains(&group) {
            on.push(group);
        }
    }
    let (cid, count) = (id.clone(), on.len());
    app.store
        .write(move |ctx| {
            queries::conversation(ctx.conn(), &cid, Trashed::Exclude)?;
            crate::store::opt_in::set_on_in(ctx.conn(), &cid, &on)?;
            Ok(())
        })
        .await?;
    tracing::info!(conversation = %id, on = count, "chat's opt-in tools switched");
    tools(State(app), Path(id)).await
}
