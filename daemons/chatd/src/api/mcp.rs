//! MCP connectors' routes (docs/api.md "MCP connectors"): CRUD, a test that
//! connects with what is saved and lists the tools, and the switch. A body
//! is checked whole before anything is stored; secrets are sealed before
//! they reach the writer and never come back out.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tandem_shared::http::ApiError;

use super::Json;
use crate::mcp::client::{Failure, ToolInfo};
use crate::mcp::{self, address, ConnectorState, Secretive, Transport, MAX_CONNECTORS};
use crate::store::mcp::{self as rows, Connector, Tested};
use crate::App;

#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Body {
    name: Option<String>,
    transport: Option<Transport>,
    url: Option<String>,
    token: Option<String>,
    headers: Option<BTreeMap<String, String>>,
    command: Option<String>,
    args: Option<Vec<String>>,
    env: Option<BTreeMap<String, String>>,
    enabled: Option<bool>,
}

/// A connector as the API shows it: the host of its address, never the
/// path, the query or a secret.
#[derive(Serialize)]
struct Shown {
    id: String,
    name: String,
    transport: Transport,
    /// An http connector's host (never its path or query).
    #[serde(skip_serializing_if = "Option::is_none")]
    host: Option<String>,
    /// A stdio connector's command and arguments.
    #[serde(skip_serializing_if = "Option::is_none")]
    command: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<Vec<String>>,
    enabled: bool,
    state: ConnectorState,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    tools: Vec<ToolInfo>,
    tested: Option<String>,
    has_token: bool,
    has_headers: bool,
    has_env: bool,
    created: String,
    updated: String,
}

fn shown(c: &Connector) -> Shown {
    Shown {
        id: c.id.clone(),
        name: c.name.clone(),
        transport: c.transport,
        host: (c.transport == Transport::Http).then(|| address::shown(&c.url)),
        command: (c.transport == Transport::Stdio).then(|| c.command.clone()),
        args: (c.transport == Transport::Stdio)
            .then(|| serde_json::from_str(&c.args).unwrap_or_default()),
        enabled: c.enabled,
        state: mcp::state_of(c),
        reason: c.reason.clone(),
        tools: serde_json::from_str(&c.tools).unwrap_or_default(),
        tested: c.tested.clone(),
        has_token: c.token.is_some(),
        has_headers: c.headers.is_some(),
        has_env: c.env.is_some(),
        created: c.created.clone(),
        updated: c.updated.clone(),
    }
}

/// What a body changes, checked. A secret left out keeps what is saved
/// (`Keep`); an empty one clears it.
struct Checked {
    name: String,
    transport: Transport,
    url: String,
    command: String,
    /// JSON array of strings.
    args: String,
    enabled: bool,
    token: Change,
    headers: Change,
    env: Change,
}

enum Change {
    Keep,
    Clear,
    Set(String),
}

fn check(app: &App, body: Body, before: Option<&Connector>) -> Result<Checked, ApiError> {
    let name = mcp::check_name(body.name.as_deref().unwrap_or(""))
        .map_err(|e| ApiError::bad_input("name", e))?;
    let transport = body.transport.unwrap_or(Transport::Http);
    if transport == Transport::Stdio {
        return check_stdio(name, body, before);
    }
    for (field, given) in [
        ("command", body.command.is_some()),
        ("args", body.args.is_some()),
        ("env", body.env.is_some()),
    ] {
        if given {
            return Err(ApiError::bad_input(
                field,
                "is for a stdio connector (transport \"stdio\"); an http one has a url",
            ));
        }
    }
    let url_text = body.url.unwrap_or_default();
    let url = address::parse(&url_text).map_err(|e| ApiError::bad_input("url", e))?;
    let enabled = body.enabled.unwrap_or(true);
    if enabled {
        if let Some(why) = address::plainly_internal(&url, app.mcp.private) {
            return Err(internal(&why));
        }
    }
    let token = match body.token {
        None => Change::Keep,
        Some(t) if t.is_empty() => Change::Clear,
        Some(t) => {
            mcp::check_token(&t).map_err(|e| ApiError::bad_input("token", e))?;
            Change::Set(t)
        }
    };
    let headers = match body.headers {
        None => Change::Keep,
        Some(h) if h.is_empty() => Change::Clear,
        Some(h) => {
            mcp::check_headers(&h).map_err(|e| ApiError::bad_input("headers", e))?;
            // A map of strings always serializes.
            Change::Set(serde_json::to_string(&h).expect("a map of strings is JSON"))
        }
    };
    // An address moved to another server (scheme, host or port) drops what
    // was saved for the old one unless the body gives it again: a token
    // must not follow a URL, nor go from https to http.
    let moved = before.is_some_and(|b| {
        b.transport != Transport::Http || !address::same_origin(&b.url, url.as_str())
    });
    let keep_or_drop = |change: Change| match change {
        Change::Keep if moved => Change::Clear,
        other => other,
    };
    Ok(Checked {
        name,
        transport,
        url: url.to_string(),
        command: String::new(),
        args: "[]".into(),
        enabled,
        token: keep_or_drop(token),
        headers: keep_or_drop(headers),
        env: Change::Clear,
    })
}

/// A stdio connector's body: a command (one program, no shell), its
/// arguments and a sealed environment; no address, token or headers.
fn check_stdio(name: String, body: Body, before: Option<&Connector>) -> Result<Checked, ApiError> {
    for (field, given) in [
        ("url", body.url.is_some()),
        ("token", body.token.is_some()),
        ("headers", body.headers.is_some()),
    ] {
        if given {
            return Err(ApiError::bad_input(
                field,
                "is for an http connector; a stdio one has a command, args and env",
            ));
        }
    }
    let command = body.command.unwrap_or_default();
    mcp::check_command(&command).map_err(|e| ApiError::bad_input("command", e))?;
    let args = body.args.unwrap_or_default();
    mcp::check_args(&args).map_err(|e| ApiError::bad_input("args", e))?;
    let env = match body.env {
        None => Change::Keep,
        Some(e) if e.is_empty() => Change::Clear,
        Some(e) => {
            mcp::check_env(&e).map_err(|e| ApiError::bad_input("env", e))?;
            // A map of strings always serializes.
            Change::Set(serde_json::to_string(&e).expect("a map of strings is JSON"))
        }
    };
    // An environment stays with its command line: another program (for a
    // launcher like npx or uvx, other arguments) does not get it.
    let args_json = serde_json::to_string(&args).expect("a list of strings is JSON");
    let moved = before.is_some_and(|b| {
        b.transport != Transport::Stdio || b.command != command || b.args != args_json
    });
    let env = match env {
        Change::Keep if moved => Change::Clear,
        other => other,
    };
    Ok(Checked {
        name,
        transport: Transport::Stdio,
        url: String::new(),
        command,
        args: args_json,
        enabled: body.enabled.unwrap_or(true),
        token: Change::Clear,
        headers: Change::Clear,
        env,
    })
}

fn internal(why: &str) -> ApiError {
    ApiError::bad_input(
        "url",
        format!(
            "{why}: connectors reach public addresses only ([chatd] mcp_allow_private opens a home network); a connector saved off may keep it"
        ),
    )
}

fn sealed(
    app: &App,
    id: &str,
    what: Secretive,
    change: Change,
    before: Option<&String>,
) -> Option<String> {
    match change {
        Change::Keep => before.cloned(),
        Change::Clear => None,
        Change::Set(value) => Some(app.mcp.seal(id, what, &value)),
    }
}

/// `GET /mcp-connectors`.
pub async fn list(State(app): State<Arc<App>>) -> Result<Response, ApiError> {
    let all = app.store.read(|c| Ok(rows::list(c)?)).await?;
    let shown: Vec<Shown> = all.iter().map(shown).collect();
    Ok(axum::Json(json!({"connectors": shown, "limit": MAX_CONNECTORS})).into_response())
}

async fn one(app: &App, id: String) -> Result<Connector, ApiError> {
    let what = id.clone();
    app.store
        .read(move |c| Ok(rows::get(c, &id)?))
        .await?
        .ok_or_else(|| ApiError::not_found("MCP connector", &what))
}

/// `GET /mcp-connectors/{id}`.
pub async fn show(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let c = one(&app, id).await?;
    Ok(axum::Json(shown(&c)).into_response())
}

/// `POST /mcp-connectors`: 201 with the connector; 409 past 20 or for a
/// name taken.
pub async fn create(
    State(app): State<Arc<App>>,
    Json(body): Json<Body>,
) -> Result<Response, ApiError> {
    let checked = check(&app, body, None)?;
    let id = tandem_shared::time::new_id("mc_");
    let now = tandem_shared::time::now_rfc3339();
    let row = Connector {
        token: sealed(&app, &id, Secretive::Token, checked.token, None),
        headers: sealed(&app, &id, Secretive::Headers, checked.headers, None),
        env: sealed(&app, &id, Secretive::Env, checked.env, None),
        id,
        name: checked.name,
        transport: checked.transport,
        url: checked.url,
        command: checked.command,
        args: checked.args,
        enabled: checked.enabled,
        state: None,
        reason: None,
        tools: "[]".into(),
        tested: None,
        created: now.clone(),
        updated: now,
    };
    let made = app
        .store
        .write(move |ctx| {
            if rows::count(ctx.conn())? >= MAX_CONNECTORS {
                return Err(ApiError::conflict(
                    "too_many_connectors",
                    format!("there are {MAX_CONNECTORS} MCP connectors already, the most kept: remove one first"),
                )
                .with("limit", MAX_CONNECTORS));
            }
            taken(ctx.conn(), &row.name, &row.id)?;
            rows::insert(ctx.conn(), &row)?;
            Ok(rows::get(ctx.conn(), &row.id)?)
        })
        .await?
        .ok_or_else(|| ApiError::internal("the connector just stored is not there"))?;
    tracing::info!(connector = %made.id, enabled = made.enabled, "mcp: connector added");
    Ok((StatusCode::CREATED, axum::Json(shown(&made))).into_response())
}

fn taken(conn: &rusqlite::Connection, name: &str, id: &str) -> Result<(), ApiError> {
    match rows::named(conn, name, id)? {
        Some(other) => Err(ApiError::conflict(
            "name_taken",
            format!("another MCP connector ({other}) is named {name}"),
        )),
        None => Ok(()),
    }
}

/// `PUT /mcp-connectors/{id}`: replaces it; a secret left out is kept.
pub async fn replace(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Json(body): Json<Body>,
) -> Result<Response, ApiError> {
    let before = one(&app, id.clone()).await?;
    let checked = check(&app, body, Some(&before))?;
    let row = Connector {
        token: sealed(
            &app,
            &id,
            Secretive::Token,
            checked.token,
            before.token.as_ref(),
        ),
        headers: sealed(
            &app,
            &id,
            Secretive::Headers,
            checked.headers,
            before.headers.as_ref(),
        ),
        env: sealed(&app, &id, Secretive::Env, checked.env, before.env.as_ref()),
        name: checked.name,
        transport: checked.transport,
        url: checked.url,
        command: checked.command,
        args: checked.args,
        enabled: checked.enabled,
        updated: tandem_shared::time::now_rfc3339(),
        ..before
    };
    let what = id.clone();
    let after = app
        .store
        .write(move |ctx| {
            taken(ctx.conn(), &row.name, &row.id)?;
            rows::replace(ctx.conn(), &row)?;
            Ok(rows::get(ctx.conn(), &row.id)?)
        })
        .await?
        .ok_or_else(|| ApiError::not_found("MCP connector", &what))?;
    // Chats open it again as it is now.
    app.runs.mcp().close_connector(&after.id).await;
    tracing::info!(connector = %after.id, enabled = after.enabled, "mcp: connector replaced");
    Ok(axum::Json(shown(&after)).into_response())
}

/// `DELETE /mcp-connectors/{id}`: 204; it goes with its sealed secrets.
pub async fn remove(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let what = id.clone();
    // Agents that named it lose the grant with it: a connector added later
    // never inherits it.
    let gone = app
        .store
        .write(move |ctx| {
            let gone = rows::delete(ctx.conn(), &id)?;
            if gone {
                let grant = mcp::connector_grant(&id);
                crate::store::agents::drop_grant(ctx.conn(), &grant)?;
            }
            Ok(gone)
        })
        .await?;
    if !gone {
        return Err(ApiError::not_found("MCP connector", &what));
    }
    app.runs.mcp().close_connector(&what).await;
    tracing::info!(connector = %what, "mcp: connector removed");
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /mcp-connectors/{id}/enable`: refused for a plainly internal address.
pub async fn enable(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let c = one(&app, id.clone()).await?;
    if c.transport == Transport::Http {
        let url = address::parse(&c.url).map_err(|e| ApiError::bad_input("url", e))?;
        if let Some(why) = address::plainly_internal(&url, app.mcp.private) {
            return Err(internal(&why));
        }
    }
    switch(&app, id, true).await
}

/// `POST /mcp-connectors/{id}/disable`.
pub async fn disable(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    switch(&app, id, false).await
}

async fn switch(app: &App, id: String, on: bool) -> Result<Response, ApiError> {
    let what = id.clone();
    let now = tandem_shared::time::now_rfc3339();
    let after = app
        .store
        .write(move |ctx| {
            rows::set_enabled(ctx.conn(), &id, on, &now)?;
            Ok(rows::get(ctx.conn(), &id)?)
        })
        .await?
        .ok_or_else(|| ApiError::not_found("MCP connector", &what))?;
    app.runs.mcp().close_connector(&after.id).await;
    tracing::info!(connector = %after.id, enabled = on, "mcp: connector switched");
    Ok(axum::Json(shown(&after)).into_response())
}

/// `POST /mcp-connectors/{id}/test`: connects with what is saved and lists
/// the tools; a server that cannot be used is a 200 with `ok: false` and
/// the reason. The outcome is kept on the row.
pub async fn test(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let c = one(&app, id).await?;
    let started = std::time::Instant::now();
    let outcome = app.runs.mcp().probe(&c).await;
    let (state, reason, tools) = match outcome {
        Ok(tools) => (ConnectorState::Connected, None, tools),
        Err(Failure::SignIn(why)) => (ConnectorState::NeedsSignIn, Some(why), Vec::new()),
        Err(Failure::Connect(why)) => (ConnectorState::CantConnect, Some(why), Vec::new()),
    };
    let listed = serde_json::to_string(&tools).expect("tool names are JSON");
    let now = tandem_shared::time::now_rfc3339();
    let (keep_id, saved, keep_reason) = (c.id.clone(), c.updated.clone(), reason.clone());
    app.store
        .write(move |ctx| {
            Ok(rows::tested(
                ctx.conn(),
                &Tested {
                    id: &keep_id,
                    saved: &saved,
                    state,
                    reason: keep_reason.as_deref(),
                    tools: &listed,
                    now: &now,
                },
            )?)
        })
        .await?;
    tracing::info!(connector = %c.id, state = %state, tools = tools.len(),
        ms = started.elapsed().as_millis() as u64, "mcp: connector tested");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    let mut answer = json!({
        "ok": state == ConnectorState::Connected,
        "state": state,
        "tools": names,
        "tool_details": tools,
    });
    if let Some(why) = reason {
        answer["reason"] = json!(why);
    }
    Ok(axum::Json(answer).into_response())
}
