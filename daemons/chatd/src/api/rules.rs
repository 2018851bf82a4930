//! Permission rules: a chat's own (`/conversations/{id}/rules`, where
//! "always" on a card saves them) and every chat's (`/permissions/rules`).
//! A deny rule refuses in every mode; an allow rule runs without asking.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};
use tandem_shared::http::ApiError;

use super::Json;
use crate::store::queries::{self, Trashed};
use crate::store::{self, rules::NewRule};
use crate::App;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleBody {
    tool: String,
    #[serde(default)]
    pattern: String,
    verdict: String,
}

/// Tools later builds add; a rule may name them before they arrive.
const COMING: &[&str] = &["bash"];
/// The tools whose rules name a command (`git push`); the others' rules
/// cover any use.
const COMMAND_TOOLS: &[&str] = &["bash"];

fn check(app: &App, body: &RuleBody) -> Result<(), ApiError> {
    let tool_ok = !body.tool.is_empty()
        && body.tool.len() <= 64
        && body
            .tool
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !tool_ok {
        return Err(ApiError::bad_input(
            "tool",
            "is not a tool name (a-z, 0-9 and _, 64 at most), like write_file or bash",
        ));
    }
    let registry = app.runs.registry();
    if registry.get(&body.tool).is_none() && !COMING.contains(&body.tool.as_str()) {
        return Err(ApiError::bad_input(
            "tool",
            format!(
                "{:?} is not a tool here: use one of {}",
                body.tool,
                registry.names().join(", ")
            ),
        ));
    }
    let command = COMMAND_TOOLS.contains(&body.tool.as_str())
        || registry
            .get(&body.tool)
            .is_some_and(|s| s.effect == crate::tools::Effect::Command);
    if !command && !body.pattern.trim().is_empty() {
        return Err(ApiError::bad_input(
            "pattern",
            format!(
                "a rule for {} covers any use: leave the pattern empty (patterns name commands, for bash)",
                body.tool
            ),
        ));
    }
    if body.pattern.chars().count() > 200 || body.pattern.chars().any(char::is_control) {
        return Err(ApiError::bad_input(
            "pattern",
            "is over 200 characters or holds control characters",
        ));
    }
    if !["allow", "deny"].contains(&body.verdict.as_str()) {
        return Err(ApiError::bad_input(
            "verdict",
            format!("{:?} is not a verdict: use allow or deny", body.verdict),
        ));
    }
    Ok(())
}

async fn add(
    app: &App,
    conversation_id: Option<String>,
    body: RuleBody,
) -> Result<Response, ApiError> {
    check(app, &body)?;
    let rule = app
        .store
        .write(move |ctx| {
            if let Some(cid) = &conversation_id {
                queries::conversation(ctx.conn(), cid, Trashed::Exclude)?;
            }
            let pattern = body
                .pattern
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            let new = NewRule {
                conversation_id: conversation_id.as_deref(),
                tool: &body.tool,
                pattern: &pattern,
                verdict: &body.verdict,
            };
            store::rules::insert(ctx, &new)
        })
        .await?;
    Ok((StatusCode::CREATED, axum::Json(rule)).into_response())
}

async fn remove(
    app: &App,
    conversation_id: Option<String>,
    rule_id: String,
) -> Result<StatusCode, ApiError> {
    app.store
        .write(move |ctx| store::rules::delete(ctx, conversation_id.as_deref(), &rule_id))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn chat_list(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let rules = app
        .store
        .read(move |conn| {
            queries::conversation(conn, &id, Trashed::Exclude)?;
            store::rules::list(conn, Some(&id))
        })
        .await?;
    Ok(axum::Json(json!({ "rules": rules })))
}

pub async fn chat_add(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Json(body): Json<RuleBody>,
) -> Result<Response, ApiError> {
    add(&app, Some(id), body).await
}

pub async fn chat_remove(
    State(app): State<Arc<App>>,
    Path((id, rule_id)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    remove(&app, Some(id), rule_id).await
}

pub async fn global_list(State(app): State<Arc<App>>) -> Result<axum::Json<Value>, ApiError> {
    let rules = app
        .store
        .read(move |conn| store::rules::list(conn, None))
        .await?;
    Ok(axum::Json(json!({ "rules": rules })))
}

pub async fn global_add(
    State(app): State<Arc<App>>,
    Json(body): Json<RuleBody>,
) -> Result<Response, ApiError> {
    add(&app, None, body).await
}

pub async fn global_remove(
    State(app): State<Arc<App>>,
    Path(rule_id): Path<String>,
) -> Result<StatusCode, ApiError> {
    remove(&app, None, rule_id).await
}
