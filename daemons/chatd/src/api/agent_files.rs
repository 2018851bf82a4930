//! Saved agents beyond their CRUD: the starter templates, the agent file
//! (`GET …/export`, `POST /agents/import`) and an agent's run history.
//!
//! The file (`kind: "tandem-agent"`) holds the definition only: no id, no
//! times, no secret (an agent holds none). Version 1 is an agent without a
//! folder, version 2 one kept to a folder (its path at export, empty when
//! it had none, and the mode). An import always makes a new agent: a name
//! in use gets " (2)", a model the engine does not list and a tool this
//! chatd lacks are dropped, and a folder not found here leaves the agent
//! kept to a folder with none chosen (it does not start until one is), each
//! said in `warnings`. A version 2 file never becomes an agent that reaches
//! every file.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};
use tandem_shared::http::ApiError;

use super::agents::{check, connector_ids, room_for_one, AgentBody, MAX_NAME};
use super::Json;
use crate::agents;
use crate::store;
use crate::App;

/// What an agent file says it is.
pub const KIND: &str = "tandem-agent";
/// How long an import waits for the engine's list of models.
const MODELS_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// `GET /agents/templates`.
pub async fn templates() -> axum::Json<Value> {
    let listed: Vec<Value> = crate::agent_templates::ALL
        .iter()
        .map(|t| {
            json!({"id": t.id, "name": t.name, "description": t.description,
                        "instructions": t.instructions, "tools": t.tools()})
        })
        .collect();
    axum::Json(json!({ "templates": listed }))
}

#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct FromTemplate {
    name: Option<String>,
}

/// `POST /agents/templates/{id}/create {name?}`: the template saved as a
/// new agent (its name, or the one given; a name in use gets " (2)").
pub async fn create_from_template(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Json(body): Json<FromTemplate>,
) -> Result<Response, ApiError> {
    let template = crate::agent_templates::find(&id).ok_or_else(|| {
        ApiError::not_found("template", &id).with(
            "templates",
            json!(crate::agent_templates::ALL
                .iter()
                .map(|t| t.id)
                .collect::<Vec<_>>()),
        )
    })?;
    let body = AgentBody {
        name: Some(body.name.unwrap_or_else(|| template.name.to_string())),
        description: Some(template.description.to_string()),
        instructions: Some(template.instructions.to_string()),
        model: None,
        tools: Some(template.tools()),
        settings: None,
        folder: None,
        network: None,
    };
    let (agent, warnings) = save_new(&app, body, None, Vec::new()).await?;
    tracing::info!(agent = %agent.id, template = %template.id, "agent made from a template");
    Ok((
        StatusCode::CREATED,
        axum::Json(json!({"agent": agent, "warnings": warnings})),
    )
        .into_response())
}

/// `GET /agents/{id}/export`: the agent file, as a download.
pub async fn export(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let agent = app.store.read(move |conn| agents::get(conn, &id)).await?;
    let folder = agent.folder.as_ref().map(|f| FolderOut {
        path: if f.state() == crate::words::FolderState::Ok {
            f.path.as_str()
        } else {
            ""
        },
        mode: f.mode,
    });
    let file = FileOut {
        kind: KIND,
        version: if folder.is_some() { 2 } else { 1 },
        name: &agent.name,
        description: &agent.description,
        instructions: &agent.instructions,
        model: &agent.model,
        tools: agent.tools.as_deref(),
        settings: &agent.settings,
        network: agent.network,
        folder,
    };
    let body = serde_json::to_string_pretty(&file)
        .map_err(|_| ApiError::internal("the agent could not be written out"))?;
    let name = file_name(&agent.name);
    Ok((
        [
            (header::CONTENT_TYPE, "application/json".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}.agent.json\""),
            ),
        ],
        body,
    )
        .into_response())
}

/// The agent file as written: its fields in this order, `kind` first.
#[derive(serde::Serialize)]
struct FileOut<'a> {
    kind: &'static str,
    version: u8,
    name: &'a str,
    description: &'a str,
    instructions: &'a str,
    model: &'a str,
    tools: Option<&'a [String]>,
    settings: &'a crate::settings::Settings,
    #[serde(skip_serializing_if = "Option::is_none")]
    network: Option<crate::words::NetPreset>,
    #[serde(skip_serializing_if = "Option::is_none")]
    folder: Option<FolderOut<'a>>,
}

/// An agent file's folder: its path when it was there, and the mode.
#[derive(serde::Serialize)]
struct FolderOut<'a> {
    path: &'a str,
    mode: crate::words::FolderMode,
}

/// A file name from an agent's name: letters, digits, `-` and `_`.
fn file_name(name: &str) -> String {
    let kept: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .take(60)
        .collect();
    let trimmed = kept.trim_matches('-');
    if trimmed.is_empty() {
        "agent".into()
    } else {
        trimmed.to_lowercase()
    }
}

/// An agent file as `POST /agents/import` reads it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentFile {
    kind: Option<String>,
    version: Option<Value>,
    name: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    tools: Option<Vec<String>>,
    #[serde(default)]
    settings: Option<Value>,
    #[serde(default)]
    folder: Option<super::agents::FolderBody>,
    #[serde(default)]
    network: Option<String>,
}

/// `POST /agents/import`: 201 `{agent, warnings}`; refused with nothing
/// stored when the file is not an agent file of version 1 or its fields
/// break an agent's limits.
pub async fn import(
    State(app): State<Arc<App>>,
    Json(file): Json<AgentFile>,
) -> Result<Response, ApiError> {
    if file.kind.as_deref() != Some(KIND) {
        return Err(ApiError::bad_input(
            "kind",
            format!("must be {KIND:?}: this is not a tandem agent file"),
        ));
    }
    let mut warnings = Vec::new();
    let folder = match (file.version.as_ref().and_then(Value::as_u64), file.folder) {
        (Some(1), None) => None,
        (Some(1), Some(_)) => {
            return Err(ApiError::bad_input(
                "folder",
                "is not part of a version 1 file",
            ))
        }
        (Some(2), Some(folder)) => Some(imported_folder(&app, folder, &mut warnings)?),
        (Some(2), None) => {
            return Err(ApiError::bad_input(
                "folder",
                "a version 2 file holds the agent's folder: {\"path\", \"mode\"}",
            ))
        }
        _ => return Err(ApiError::bad_input("version", "must be 1 or 2")),
    };
    let model = match file.model.filter(|m| !m.is_empty()) {
        None => None,
        Some(model) => match app.engine.models(MODELS_WAIT).await {
            Ok(listed) if listed.iter().any(|m| m.id == model) => Some(model),
            Ok(_) => {
                warnings.push(format!(
                    "the model {:?} is not served here: the agent uses chatd's default",
                    model.chars().take(80).collect::<String>()
                ));
                None
            }
            Err(_) => {
                warnings.push(format!(
                    "the engine did not list its models: the model {:?} is kept unchecked",
                    model.chars().take(80).collect::<String>()
                ));
                Some(model)
            }
        },
    };
    let connectors = connector_ids(&app).await?;
    let tools = file.tools.map(|names| {
        let registry = app.runs.registry();
        names
            .into_iter()
            .filter(|tool| {
                let known = registry.get(tool).is_some()
                    || tool
                        .strip_prefix("connector:")
                        .is_some_and(|id| connectors.iter().any(|c| c == id));
                if !known {
                    warnings.push(format!(
                        "the tool {:?} is not on this box: not granted",
                        tool.chars().take(80).collect::<String>()
                    ));
                }
                known
            })
            .collect()
    });
    let body = AgentBody {
        name: file.name,
        description: file.description,
        instructions: file.instructions,
        model,
        tools,
        settings: file.settings,
        folder: None,
        network: file.network,
    };
    let (agent, warnings) = save_new(&app, body, folder, warnings).await?;
    tracing::info!(agent = %agent.id, warnings = warnings.len(), "agent imported");
    Ok((
        StatusCode::CREATED,
        axum::Json(json!({"agent": agent, "warnings": warnings})),
    )
        .into_response())
}

/// An imported file's folder: the same path here, else kept to a folder
/// with none chosen (and a warning), never no folder at all.
fn imported_folder(
    app: &App,
    folder: super::agents::FolderBody,
    warnings: &mut Vec<String>,
) -> Result<crate::agent_folder::AgentFolder, ApiError> {
    let Some(Some(mode)) = folder.mode.as_deref().map(crate::words::FolderMode::parse) else {
        return Err(ApiError::bad_input(
            "folder.mode",
            "must be \"read\" or \"write\"",
        ));
    };
    let path = folder.path.clone();
    let asked = super::agents::FolderBody {
        path: folder.path,
        mode: None,
    };
    let found = match asked.checked(app) {
        Ok(Some(found)) => found.path,
        Ok(None) => String::new(),
        Err(err) => {
            warnings.push(format!(
                "the agent's folder cannot be used here ({}): it keeps to one folder and does \
                 not start until you choose one",
                err.message
            ));
            String::new()
        }
    };
    if found.is_empty() && path.is_empty() {
        warnings.push(
            "the file names no folder: the agent keeps to one folder and does not start until \
             you choose one"
                .into(),
        );
    }
    Ok(crate::agent_folder::AgentFolder { path: found, mode })
}

/// Checks `body` and stores it as a new agent (with `folder`, when one is
/// given, over the body's), its name made free of the names in use (in the
/// job that stores it); answers the agent and the warnings with the rename
/// added.
async fn save_new(
    app: &App,
    body: AgentBody,
    folder: Option<crate::agent_folder::AgentFolder>,
    mut warnings: Vec<String>,
) -> Result<(agents::Agent, Vec<String>), ApiError> {
    let mut new = check(app, body, &connector_ids(app).await?)?;
    if folder.is_some() {
        new.folder = folder;
    }
    let folders = app.folders.clone();
    let (agent, renamed) = app
        .store
        .write(move |ctx| {
            room_for_one(ctx)?;
            let taken: Vec<String> = agents::list(ctx.conn())?
                .into_iter()
                .map(|a| a.name.to_lowercase())
                .collect();
            let mut new = new;
            let free = free_name(&new.name, &taken);
            let renamed = (free != new.name).then(|| (new.name.clone(), free.clone()));
            new.name = free;
            let id = store::agents::insert(ctx, &new)?;
            let agent = agents::get(ctx.conn(), &id)?;
            folders.agent_saved(&agent.id, &agent.name, agent.folder.as_ref());
            Ok((agent, renamed))
        })
        .await?;
    if let Some((was, now)) = renamed {
        warnings.push(format!("the name {was:?} is in use: saved as {now:?}"));
    }
    Ok((agent, warnings))
}

/// `name`, or `name (2)`, `name (3)`… the first no agent has (in any case),
/// cut to fit an agent's name.
fn free_name(name: &str, taken: &[String]) -> String {
    if !taken.contains(&name.to_lowercase()) {
        return name.to_string();
    }
    (2..)
        .map(|n| {
            let suffix = format!(" ({n})");
            let room = MAX_NAME - suffix.chars().count();
            let head: String = name.chars().take(room).collect();
            format!("{}{suffix}", head.trim_end())
        })
        .find(|candidate| !taken.contains(&candidate.to_lowercase()))
        .unwrap_or_else(|| name.to_string())
}

/// `GET /agents/{id}/runs`: the chats that ran with the agent, newest first.
pub async fn runs(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let history = app
        .store
        .read(move |conn| {
            agents::get(conn, &id)?;
            agents::runs_of(conn, &id)
        })
        .await?;
    Ok(axum::Json(json!(history)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_in_use_gets_the_first_free_number_and_fits() {
        let taken = vec!["reviewer".to_string(), "reviewer (2)".to_string()];
        assert_eq!(free_name("Writer", &taken), "Writer");
        assert_eq!(free_name("Reviewer", &taken), "Reviewer (3)");
        assert_eq!(free_name("REVIEWER", &taken), "REVIEWER (3)");
        let long = "é".repeat(MAX_NAME);
        let taken = vec![long.to_lowercase()];
        let free = free_name(&long, &taken);
        assert!(
            free.ends_with(" (2)") && free.chars().count() == MAX_NAME,
            "{free}"
        );
    }

    #[test]
    fn a_file_name_keeps_safe_characters_only() {
        assert_eq!(file_name("Code reviewer"), "code-reviewer");
        assert_eq!(file_name("../../etc"), "etc");
        assert_eq!(file_name("«»"), "agent");
    }
}
