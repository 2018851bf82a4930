//! MCP Apps (docs/api.md "MCP Apps"): the page a tool declares, read from
//! its server, and the page's own tool calls, both in the chat's session
//! with the connector's secrets, which stay here. Only for a connector the
//! chat may use now (403 `mcp_app_refused` otherwise), only a `ui://` page
//! one of its tools declares, only a tool whose visibility names the page.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use rmcp::model::{JsonObject, ReadResourceRequestParams, Tool};
use serde_json::{json, Value};
use tandem_shared::http::ApiError;

use super::mcp_context::{not_answered, reach, Cleaner};
use super::Json;
use crate::mcp::apps::{self, MAX_ARGUMENTS};
use crate::mcp::client::Session;
use crate::mcp::context;
use crate::store::mcp::Connector;
use crate::App;

const REFUSED: &str = "mcp_app_refused";
/// A tool's name in a page's call, in bytes.
const MAX_TOOL: usize = 128;

fn refused(c: &Connector, why: String) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, REFUSED, why).with("connector", c.id.clone())
}

/// The connector's id in `server` (`connector:<id>`).
fn connector_of(server: Option<&str>) -> Result<&str, ApiError> {
    let server =
        server.ok_or_else(|| ApiError::bad_input("server", "is missing: connector:<id>"))?;
    server
        .strip_prefix("connector:")
        .filter(|id| !id.is_empty())
        .ok_or_else(|| ApiError::bad_input("server", "names an MCP connector as connector:<id>"))
}

/// The chat's usable connector `id` and its tools now (the session is
/// opened if need be).
async fn connector_tools(
    app: &App,
    chat: &str,
    id: &str,
) -> Result<(Connector, Vec<Tool>), ApiError> {
    let reach = reach(app, chat).await?;
    let c = reach.get_as(id, "server", REFUSED)?.clone();
    let tools = app
        .runs
        .mcp()
        .tools_now(chat, &c, context::ASK)
        .await
        .map_err(|why| not_answered(&c, why))?;
    Ok((c, tools))
}

/// The page `query` names (`server`, `uri`), read from its server in
/// `chat`'s session under the rules, the connector's secrets taken out.
async fn read_page(
    app: &App,
    chat: &str,
    query: &HashMap<String, String>,
) -> Result<apps::Page, ApiError> {
    let id = connector_of(query.get("server").map(String::as_str))?;
    let uri = query
        .get("uri")
        .ok_or_else(|| ApiError::bad_input("uri", "is missing: the page's ui:// URI"))?;
    if !uri.starts_with("ui://") || uri.len() > 2048 {
        return Err(ApiError::bad_input(
            "uri",
            "must be a ui:// URI of 2,048 bytes at most",
        ));
    }
    let started = std::time::Instant::now();
    let (c, tools) = connector_tools(app, chat, id).await?;
    if !tools
        .iter()
        .any(|t| apps::app_of(t).is_some_and(|a| a.resource_uri == *uri))
    {
        return Err(refused(
            &c,
            format!("no tool of MCP connector {} declares this page", c.name),
        ));
    }
    let params = ReadResourceRequestParams::new(uri.clone());
    let read = app
        .runs
        .mcp()
        .ask(chat, &c, context::ASK, move |s: &Session| {
            let params = params.clone();
            Box::pin(async move { s.read_resource(params).await })
        })
        .await
        .map_err(|why| not_answered(&c, why))?;
    let clean = Cleaner::of(app, &c);
    let mut page = apps::page_of(&read, uri).map_err(|why| {
        ApiError::new(
            StatusCode::BAD_GATEWAY,
            "mcp_error",
            format!("MCP connector {}: {}", c.name, clean.text(why)),
        )
        .with("connector", c.id.clone())
    })?;
    page.html = clean.text(page.html);
    // An origin that holds a secret is left out with its list, not cleaned
    // into another origin.
    let meta = page.meta.to_string();
    if clean.text(meta.clone()) != meta {
        page.meta["csp"] = json!({});
    }
    tracing::info!(conversation = %chat, connector = %c.id, bytes = page.html.len(),
        ms = started.elapsed().as_millis() as u64, "mcp: an app's page read");
    Ok(page)
}

/// `GET /conversations/{id}/mcp-apps/resource?server=connector:<id>&uri=ui://…`
pub async fn resource(
    State(app): State<Arc<App>>,
    Path(chat): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<axum::Json<Value>, ApiError> {
    Ok(axum::Json(json!(read_page(&app, &chat, &query).await?)))
}

/// `GET /conversations/{id}/mcp-apps/frame?server=…&uri=…`: the page as a
/// document for the chat page's frame, under a content policy of its own
/// (`apps::frame_policy`): an origin of its own (the policy's `sandbox`
/// holds even when it is opened by itself), no network but the origins its
/// server asked for, framed only by the chat page.
pub async fn frame(
    State(app): State<Arc<App>>,
    Path(chat): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let page = read_page(&app, &chat, &query).await?;
    let policy = HeaderValue::from_str(&apps::frame_policy(&page.meta["csp"]))
        .map_err(|_| ApiError::internal("the page's content policy"))?;
    Ok((
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            ),
            (header::CONTENT_SECURITY_POLICY, policy),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
            (
                header::REFERRER_POLICY,
                HeaderValue::from_static("no-referrer"),
            ),
        ],
        page.html,
    )
        .into_response())
}

/// `POST /conversations/{id}/mcp-apps/call {server, tool, arguments}`: a
/// page's call of a tool of its server.
pub async fn call(
    State(app): State<Arc<App>>,
    Path(chat): Path<String>,
    Json(body): Json<Value>,
) -> Result<axum::Json<Value>, ApiError> {
    let id = connector_of(body["server"].as_str())?;
    let tool = body["tool"]
        .as_str()
        .filter(|t| !t.is_empty() && t.len() <= MAX_TOOL)
        .ok_or_else(|| {
            ApiError::bad_input(
                "tool",
                format!("must be a tool's name of 1 to {MAX_TOOL} bytes"),
            )
        })?;
    let arguments: JsonObject = match &body["arguments"] {
        Value::Null => JsonObject::new(),
        Value::Object(map) => map.clone(),
        _ => return Err(ApiError::bad_input("arguments", "must be a JSON object")),
    };
    let size = Value::Object(arguments.clone()).to_string().len();
    if size > MAX_ARGUMENTS {
        return Err(ApiError::bad_input(
            "arguments",
            format!("are {size} bytes of JSON; a page's call may send {MAX_ARGUMENTS} at most"),
        ));
    }
    let started = std::time::Instant::now();
    let (c, tools) = connector_tools(&app, &chat, id).await?;
    let Some(found) = tools.iter().find(|t| t.name == tool) else {
        return Err(refused(
            &c,
            format!("MCP connector {} has no such tool", c.name),
        ));
    };
    if !tools.iter().any(|t| apps::app_of(t).is_some()) {
        return Err(refused(
            &c,
            format!("MCP connector {} has no tool with a page", c.name),
        ));
    }
    // As the model's list drops it: by the name the model would see.
    let own = crate::mcp::offer::clean(tool);
    if app.runs.builtin_names().contains(&own.as_str()) {
        return Err(refused(
            &c,
            format!(
                "a tool of MCP connector {} named like one of tandem's own is never called",
                c.name
            ),
        ));
    }
    if !apps::for_app(found) {
        return Err(refused(
            &c,
            format!(
                "this tool of MCP connector {} is not for its pages (its visibility)",
                c.name
            ),
        ));
    }
    let called = app
        .runs
        .mcp()
        .call(&chat, &c, tool, arguments, true)
        .await
        .map_err(|why| not_answered(&c, why))?;
    tracing::info!(conversation = %chat, connector = %c.id, failed = called.failed,
        ms = started.elapsed().as_millis() as u64, "mcp: an app's call");
    Ok(axum::Json(json!({"result": called.page})))
}
