//! Saved agents: `/agents` CRUD. A body is checked whole before anything is
//! stored; `tools` names only tools this chatd offers.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};
use tandem_shared::http::ApiError;

use super::Json;
use crate::agents::{self, Agent};
use crate::settings::Settings;
use crate::store::{self, agents::AgentFields};
use crate::words::FolderMode;
use crate::App;

pub const MAX_NAME: usize = 100;
pub const MAX_INSTRUCTIONS: usize = 16_000;
pub const MAX_DESCRIPTION: usize = 1_000;
pub const MAX_MODEL: usize = 200;
pub const MAX_AGENTS: i64 = 100;

#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct AgentBody {
    pub(super) name: Option<String>,
    pub(super) description: Option<String>,
    pub(super) instructions: Option<String>,
    pub(super) model: Option<String>,
    pub(super) tools: Option<Vec<String>>,
    pub(super) settings: Option<Value>,
    /// `{path, mode}`; `{"path": ""}` clears it; left out of a PUT, kept.
    pub(super) folder: Option<FolderBody>,
    /// `off`, `registries` or `all`; left out: the box's default.
    pub(super) network: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct FolderBody {
    pub(super) path: String,
    pub(super) mode: Option<String>,
}

impl FolderBody {
    /// The folder a body asks for: `None` clears it.
    pub(super) fn checked(
        self,
        app: &App,
    ) -> Result<Option<crate::agent_folder::AgentFolder>, ApiError> {
        if self.path.is_empty() {
            if self.mode.is_some() {
                return Err(ApiError::bad_input(
                    "folder.path",
                    "is empty: name the folder, or send {\"path\": \"\"} alone to clear it",
                ));
            }
            return Ok(None);
        }
        let mode = match self.mode.as_deref() {
            None => FolderMode::Read,
            Some(word) => FolderMode::parse(word).ok_or_else(|| {
                ApiError::bad_input("folder.mode", "must be \"read\" or \"write\"")
            })?,
        };
        let path =
            crate::agent_folder::Forbidden::of(&app.config).check("folder.path", &self.path)?;
        Ok(Some(crate::agent_folder::AgentFolder {
            path: path.to_string_lossy().into_owned(),
            mode,
        }))
    }
}

/// The ids of the saved MCP connectors (an agent may name `connector:<id>`).
pub(super) async fn connector_ids(app: &App) -> Result<Vec<String>, ApiError> {
    app.store
        .read(|conn| {
            Ok(crate::store::mcp::list(conn)?
                .into_iter()
                .map(|c| c.id)
                .collect())
        })
        .await
}

pub(super) fn check(
    app: &App,
    body: AgentBody,
    connectors: &[String],
) -> Result<AgentFields, ApiError> {
    let name = body.name.unwrap_or_default();
    let chars = name.chars().count();
    if chars == 0 || chars > MAX_NAME {
        return Err(ApiError::bad_input(
            "name",
            format!("must be 1 to {MAX_NAME} characters"),
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(ApiError::bad_input("name", "holds control characters"));
    }
    let description = body.description.unwrap_or_default();
    if description.chars().count() > MAX_DESCRIPTION {
        return Err(ApiError::bad_input(
            "description",
            format!("is longer than {MAX_DESCRIPTION} characters"),
        ));
    }
    let instructions = body.instructions.unwrap_or_default();
    if instructions.chars().count() > MAX_INSTRUCTIONS {
        return Err(ApiError::bad_input(
            "instructions",
            format!("is longer than {MAX_INSTRUCTIONS} characters"),
        ));
    }
    let model = body.model.unwrap_or_default();
    if model.len() > MAX_MODEL {
        return Err(ApiError::bad_input(
            "model",
            format!("is longer than {MAX_MODEL} bytes (empty: chatd's default)"),
        ));
    }
    if model.chars().any(char::is_control) {
        return Err(ApiError::bad_input("model", "holds control characters"));
    }
    let tools = match body.tools {
        None => None,
        Some(names) => {
            let registry = app.runs.registry();
            let mut kept: Vec<String> = Vec::new();
            for tool in names {
                let connector = tool
                    .strip_prefix("connector:")
                    .is_some_and(|id| connectors.iter().any(|c| c == id));
                if registry.get(&tool).is_none() && !connector {
                    return Err(ApiError::bad_input(
                        "tools",
                        format!(
                            "{:?} is not a tool here: use some of {}, or connector:<id> of a saved MCP connector",
                            tool.chars().take(64).collect::<String>(),
                            registry.names().join(", ")
                        ),
                    ));
                }
                if !kept.contains(&tool) {
                    kept.push(tool);
                }
            }
            Some(kept)
        }
    };
    let settings = match &body.settings {
        Some(value) => Settings::check("settings", value)?,
        None => Settings::default(),
    };
    let folder = match body.folder {
        Some(folder) => folder.checked(app)?,
        None => None,
    };
    let network = match body.network.as_deref() {
        None => None,
        Some(word) => Some(crate::words::NetPreset::parse(word).ok_or_else(|| {
            ApiError::bad_input(
                "network",
                "must be \"off\", \"registries\" or \"all\" (left out: the box's default)",
            )
        })?),
    };
    Ok(AgentFields {
        name,
        description,
        instructions,
        model,
        tools,
        settings,
        folder,
        network,
    })
}

pub async fn list(State(app): State<Arc<App>>) -> Result<axum::Json<Value>, ApiError> {
    let agents = app.store.read(agents::list).await?;
    Ok(axum::Json(json!({ "agents": agents })))
}

pub async fn show(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<axum::Json<Agent>, ApiError> {
    let agent = app.store.read(move |conn| agents::get(conn, &id)).await?;
    Ok(axum::Json(agent))
}

pub async fn create(
    State(app): State<Arc<App>>,
    Json(body): Json<AgentBody>,
) -> Result<Response, ApiError> {
    let new = check(&app, body, &connector_ids(&app).await?)?;
    let folders = app.folders.clone();
    let agent = app
        .store
        .write(move |ctx| {
            room_for_one(ctx)?;
            let id = store::agents::insert(ctx, &new)?;
            let agent = agents::get(ctx.conn(), &id)?;
            // In the job: two writes of one agent reach the map in their order.
            folders.agent_saved(&agent.id, &agent.name, agent.folder.as_ref());
            Ok(agent)
        })
        .await?;
    tracing::info!(agent = %agent.id, "agent created");
    Ok((StatusCode::CREATED, axum::Json(agent)).into_response())
}

/// 409 `too_many_agents` when `MAX_AGENTS` are kept (read in the job that adds one).
pub(super) fn room_for_one(ctx: &store::Ctx) -> Result<(), ApiError> {
    if store::agents::count(ctx)? >= MAX_AGENTS {
        return Err(ApiError::conflict(
            "too_many_agents",
            format!("there are {MAX_AGENTS} agents already, the most kept: delete one first"),
        )
        .with("limit", MAX_AGENTS));
    }
    Ok(())
}

pub async fn replace(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Json(body): Json<AgentBody>,
) -> Result<axum::Json<Agent>, ApiError> {
    // A client that does not know `folder` never widens the agent by an edit.
    let keep = body.folder.is_none();
    let mut new = check(&app, body, &connector_ids(&app).await?)?;
    let folders = app.folders.clone();
    let (agent, moved) = app
        .store
        .write(move |ctx| {
            let was = agents::get(ctx.conn(), &id)?;
            if keep {
                new.folder = was.folder.clone();
            }
            store::agents::replace(ctx, &id, &new)?;
            let agent = agents::get(ctx.conn(), &id)?;
            folders.agent_saved(&agent.id, &agent.name, agent.folder.as_ref());
            Ok((agent, was.folder != new.folder))
        })
        .await?;
    if moved {
        rebind(&app, &agent.id).await;
    }
    tracing::info!(agent = %agent.id, "agent replaced");
    Ok(axum::Json(agent))
}

pub async fn remove(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let gone = id.clone();
    let folders = app.folders.clone();
    let had_folder = app
        .store
        .write(move |ctx| {
            let was = agents::get(ctx.conn(), &id)?;
            store::agents::delete(ctx, &id)?;
            folders.agent_deleted(&id);
            Ok(was.folder.is_some())
        })
        .await?;
    if had_folder {
        rebind(&app, &gone).await;
    }
    tracing::info!(agent = %gone, "agent deleted");
    Ok(StatusCode::NO_CONTENT)
}

/// Stops the sandboxes of the agent's chats after its folder changed, so
/// none goes on with the old folder bound: the next command starts one
/// with the binds the folder says now.
async fn rebind(app: &App, agent: &str) {
    let Some(sandboxes) = &app.sandboxes else {
        return;
    };
    for chat in app.folders.homes_of(agent) {
        sandboxes.stop(&chat, "its agent's folder changed").await;
    }
}
