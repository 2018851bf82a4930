//! A chat's MCP prompts and resources (docs/api.md "Prompts and resources
//! as context"): listed from the servers the chat may use now, previewed,
//! and expanded in front of a message's text (`context: [...]`). A server
//! the chat may not use is 403 `mcp_refused`; one that does not answer is
//! 502 `mcp_error`; either way nothing is stored.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use rmcp::model::{
    GetPromptRequestParams, JsonObject, PaginatedRequestParams, Prompt, ReadResourceRequestParams,
    Resource, ResourceTemplate,
};
use serde_json::{json, Value};
use tandem_shared::http::ApiError;

use super::Json;
use crate::mcp::client::{cut, Failure, Session};
use crate::mcp::context::{self, Asked, Blocks, Expanded};
use crate::runs::mcp::why_not;
use crate::store::mcp::{self as rows, Connector};
use crate::store::queries::{self, Trashed};
use crate::App;

/// Entries of one server's list kept at most.
const MAX_LISTED: usize = 500;

/// The chat's connectors: those it may use now, and the others with why not.
pub(super) struct Reach {
    usable: Vec<Connector>,
    refused: Vec<(Connector, &'static str)>,
}

pub(super) async fn reach(app: &App, chat: &str) -> Result<Reach, ApiError> {
    let cid = chat.to_string();
    let (agent, all, off) = app
        .store
        .read(move |conn| {
            queries::conversation(conn, &cid, Trashed::Exclude)?;
            Ok((
                crate::agents::of_conversation(conn, &cid)?,
                rows::list(conn)?,
                rows::off_in(conn, &cid)?,
            ))
        })
        .await?;
    let mut reach = Reach {
        usable: Vec::new(),
        refused: Vec::new(),
    };
    for c in all {
        match why_not(&c, &off, agent.as_ref()) {
            None => reach.usable.push(c),
            Some(why) => reach.refused.push((c, why)),
        }
    }
    Ok(reach)
}

impl Reach {
    /// The connector `id` names, when the chat may use it.
    fn get(&self, id: &str, field: &str) -> Result<&Connector, ApiError> {
        self.get_as(id, field, "mcp_refused")
    }

    /// [`Reach::get`], refused (403) as `refused`.
    pub(super) fn get_as(
        &self,
        id: &str,
        field: &str,
        refused: &'static str,
    ) -> Result<&Connector, ApiError> {
        if let Some(c) = self.usable.iter().find(|c| c.id == id) {
            return Ok(c);
        }
        match self.refused.iter().find(|(c, _)| c.id == id) {
            Some((c, why)) => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                refused,
                format!(
                    "MCP connector {} cannot be used in this chat: {why}",
                    c.name
                ),
            )
            .with("connector", c.id.clone())),
            None => Err(ApiError::bad_input(
                field,
                format!(
                    "{:?} is not a saved MCP connector's id",
                    id.chars().take(64).collect::<String>()
                ),
            )),
        }
    }
}

/// 502 `mcp_error` for a server that did not answer (its reason, which
/// carries no secret of the connector).
pub(super) fn not_answered(c: &Connector, why: Failure) -> ApiError {
    let said = match why {
        Failure::SignIn(why) => format!("MCP connector {} refused the sign-in: {why}", c.name),
        Failure::Connect(why) => format!("MCP connector {} did not answer: {why}", c.name),
    };
    ApiError::new(StatusCode::BAD_GATEWAY, "mcp_error", said).with("connector", c.id.clone())
}

fn unavailable(c: &Connector, why: &Failure) -> Value {
    let (Failure::SignIn(reason) | Failure::Connect(reason)) = why;
    json!({"connector": c.id, "server": c.name, "reason": reason})
}

/// A connector's secrets taken out of what its server says (a server may
/// echo its token anywhere: a name, a URI, a description).
pub(super) struct Cleaner(Option<crate::mcp::Reach>);

impl Cleaner {
    pub(super) fn of(app: &App, c: &Connector) -> Cleaner {
        Cleaner(app.mcp.target(c).ok())
    }

    pub(super) fn text(&self, text: String) -> String {
        match &self.0 {
            Some(target) => target.clean(text),
            None => text,
        }
    }

    /// A string of a list: cleaned whole.
    fn opt(&self, text: Option<&str>) -> Option<String> {
        text.map(|t| self.text(t.to_string()))
    }

    /// A description: cleaned, then cut to one short line.
    fn line(&self, text: Option<&str>) -> Option<String> {
        text.map(|t| cut(&self.text(t.to_string())))
    }
}

/// Pages of a server's list taken at most: with [`MAX_LISTED`] entries
/// they bound what one list may cost.
const MAX_PAGES: usize = 10;

/// What a list asks a server for.
#[derive(Clone, Copy)]
enum Listing {
    Prompts,
    Resources,
    Templates,
}

/// One entry of a server's list.
enum Item {
    Prompt(Prompt),
    Resource(Resource),
    Template(ResourceTemplate),
}

/// One page of `what` from the server of `s` (none when it did not say it
/// has prompts, or resources; a server without templates has none).
async fn page(
    s: &Session,
    what: Listing,
    cursor: Option<String>,
) -> Result<(Vec<Item>, Option<String>), rmcp::ServiceError> {
    let caps = s
        .peer_info()
        .map(|i| i.capabilities.clone())
        .unwrap_or_default();
    let params = Some(PaginatedRequestParams::default().with_cursor(cursor));
    Ok(match what {
        Listing::Prompts if caps.prompts.is_some() => {
            let page = s.list_prompts(params).await?;
            (
                page.prompts.into_iter().map(Item::Prompt).collect(),
                page.next_cursor,
            )
        }
        Listing::Resources if caps.resources.is_some() => {
            let page = s.list_resources(params).await?;
            (
                page.resources.into_iter().map(Item::Resource).collect(),
                page.next_cursor,
            )
        }
        Listing::Templates if caps.resources.is_some() => {
            match s.list_resource_templates(params).await {
                Ok(page) => (
                    page.resource_templates
                        .into_iter()
                        .map(Item::Template)
                        .collect(),
                    page.next_cursor,
                ),
                // A server that has no templates may say it has no such method.
                Err(rmcp::ServiceError::McpError(e))
                    if e.code == rmcp::model::ErrorCode::METHOD_NOT_FOUND =>
                {
                    (Vec::new(), None)
                }
                Err(e) => return Err(e),
            }
        }
        _ => (Vec::new(), None),
    })
}

/// Every usable server's list of `what` ([`MAX_LISTED`] entries and
/// [`MAX_PAGES`] pages each at most), side by side, as JSON, its strings
/// cleaned of the connector's secrets; and the servers that did not answer.
async fn each_server(
    app: &App,
    chat: &str,
    what: Listing,
    skip: &[Value],
) -> Result<(Vec<Value>, Vec<Value>), ApiError> {
    let reach = reach(app, chat).await?;
    let sessions = app.runs.mcp();
    let asked = reach
        .usable
        .iter()
        .filter(|c| !skip.iter().any(|u| u["connector"] == c.id.as_str()))
        .map(|c| async move {
            let listed = sessions
                .ask(chat, c, context::ASK, move |s: &Session| {
                    Box::pin(async move {
                        let mut all = Vec::new();
                        let mut cursor = None;
                        for _ in 0..MAX_PAGES {
                            let (items, next) = page(s, what, cursor).await?;
                            all.extend(items);
                            match next {
                                Some(next) if all.len() < MAX_LISTED => cursor = Some(next),
                                _ => break,
                            }
                        }
                        all.truncate(MAX_LISTED);
                        Ok(all)
                    })
                })
                .await;
            (c, listed)
        });
    let (mut entries, mut missing) = (Vec::new(), Vec::new());
    for (c, listed) in futures_util::future::join_all(asked).await {
        match listed {
            Err(why) => missing.push(unavailable(c, &why)),
            Ok(items) => {
                let clean = Cleaner::of(app, c);
                entries.extend(items.iter().filter_map(|item| shown(c, &clean, item)));
            }
        }
    }
    Ok((entries, missing))
}

/// An entry as the lists show it; none when one of its names would need
/// a secret taken out (sent back as shown, it would no longer name it).
fn shown(c: &Connector, clean: &Cleaner, item: &Item) -> Option<Value> {
    let names: Vec<&str> = match item {
        Item::Prompt(p) => std::iter::once(p.name.as_str())
            .chain(p.arguments.iter().flatten().map(|a| a.name.as_str()))
            .collect(),
        Item::Resource(r) => vec![r.uri.as_str(), r.name.as_str()],
        Item::Template(t) => vec![t.uri_template.as_str(), t.name.as_str()],
    };
    if names.iter().any(|n| clean.text(n.to_string()) != *n) {
        return None;
    }
    Some(match item {
        Item::Prompt(p) => {
            let arguments: Vec<Value> = p
                .arguments
                .iter()
                .flatten()
                .map(|a| {
                    json!({"name": clean.text(a.name.clone()), "description": clean.line(a.description.as_deref()),
                           "required": a.required.unwrap_or(false)})
                })
                .collect();
            json!({"connector": c.id, "server": c.name, "name": clean.text(p.name.clone()),
                   "title": clean.opt(p.title.as_deref()), "description": clean.line(p.description.as_deref()),
                   "arguments": arguments})
        }
        Item::Resource(r) => {
            json!({"connector": c.id, "server": c.name, "uri": clean.text(r.uri.clone()),
               "name": clean.text(r.name.clone()), "title": clean.opt(r.title.as_deref()),
               "description": clean.line(r.description.as_deref()),
               "mime_type": clean.opt(r.mime_type.as_deref()), "size": r.size})
        }
        Item::Template(t) => json!({"connector": c.id, "server": c.name,
               "uri_template": clean.text(t.uri_template.clone()),
               "name": clean.text(t.name.clone()), "title": clean.opt(t.title.as_deref()),
               "description": clean.line(t.description.as_deref()),
               "mime_type": clean.opt(t.mime_type.as_deref())}),
    })
}

/// `GET /conversations/{id}/mcp/prompts`.
pub async fn prompts(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let (prompts, missing) = each_server(&app, &id, Listing::Prompts, &[]).await?;
    Ok(axum::Json(
        json!({"prompts": prompts, "unavailable": missing}),
    ))
}

/// `GET /conversations/{id}/mcp/resources`: resources, then templates.
pub async fn resources(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let (resources, missing) = each_server(&app, &id, Listing::Resources, &[]).await?;
    // The servers that answered are asked for their templates in the same
    // sessions; one that did not is not waited on again.
    let (templates, _) = each_server(&app, &id, Listing::Templates, &missing).await?;
    Ok(axum::Json(
        json!({"resources": resources, "templates": templates, "unavailable": missing}),
    ))
}

/// What `asked` comes to, asked of `c`'s server in `chat`'s session, with
/// the connector's secrets taken out.
async fn expand_one(
    app: &App,
    chat: &str,
    c: &Connector,
    asked: &Asked,
) -> Result<Expanded, ApiError> {
    let sessions = app.runs.mcp();
    let expanded = match asked {
        Asked::Prompt {
            name, arguments, ..
        } => {
            let args: JsonObject = arguments
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect();
            let params = GetPromptRequestParams::new(name.clone()).with_arguments(args);
            sessions
                .ask(chat, c, context::ASK, move |s: &Session| {
                    let params = params.clone();
                    Box::pin(async move { s.get_prompt(params).await })
                })
                .await
                .map(|result| context::of_prompt(&result))
        }
        Asked::Resource { uri, .. } => {
            let params = ReadResourceRequestParams::new(uri.clone());
            sessions
                .ask(chat, c, context::ASK, move |s: &Session| {
                    let params = params.clone();
                    Box::pin(async move { s.read_resource(params).await })
                })
                .await
                .map(|result| context::of_resource(&result))
        }
    };
    let mut expanded = expanded.map_err(|why| not_answered(c, why))?;
    // Secrets out of the whole first, then the cut: a token across the
    // cut would otherwise leave its start behind.
    expanded.text = Cleaner::of(app, c).text(expanded.text);
    Ok(context::fit(expanded))
}

/// A preview: `POST …/mcp/prompts` and `POST …/mcp/resources/read`.
async fn preview(app: &App, chat: &str, body: &Value, kind: Kind) -> Result<Value, ApiError> {
    let asked = Asked::parse(body, "")?;
    let matches = matches!(
        (&asked, kind),
        (Asked::Prompt { .. }, Kind::Prompt) | (Asked::Resource { .. }, Kind::Resource)
    );
    if !matches {
        return Err(match kind {
            Kind::Prompt => ApiError::bad_input("name", "is missing: a prompt's name"),
            Kind::Resource => ApiError::bad_input("uri", "is missing: a resource's URI"),
        });
    }
    let reach = reach(app, chat).await?;
    let c = reach.get(asked.connector(), "connector")?;
    let expanded = expand_one(app, chat, c, &asked).await?;
    let mut answer = json!({"connector": c.id, "server": c.name,
        "chars": expanded.text.chars().count(), "cut": expanded.cut,
        "left_out": expanded.left_out, "text": expanded.text});
    match &asked {
        Asked::Prompt { name, .. } => answer["name"] = json!(name),
        Asked::Resource { uri, .. } => answer["uri"] = json!(uri),
    }
    Ok(answer)
}

#[derive(Clone, Copy)]
enum Kind {
    Prompt,
    Resource,
}

/// `POST /conversations/{id}/mcp/prompts`: one prompt as a message would get it.
pub async fn preview_prompt(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Json(body): Json<Value>,
) -> Result<axum::Json<Value>, ApiError> {
    Ok(axum::Json(preview(&app, &id, &body, Kind::Prompt).await?))
}

/// `POST /conversations/{id}/mcp/resources/read`: one resource as a message would get it.
pub async fn read_resource(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Json(body): Json<Value>,
) -> Result<axum::Json<Value>, ApiError> {
    Ok(axum::Json(preview(&app, &id, &body, Kind::Resource).await?))
}

/// A message's context: each prompt or resource asked of its server (side
/// by side), the blocks in the order asked. Any refusal or failure
/// answers the whole send, and nothing is stored.
pub(super) async fn expand(app: &App, chat: &str, asked: &[Asked]) -> Result<Blocks, ApiError> {
    let mut blocks = Blocks::default();
    if asked.is_empty() {
        return Ok(blocks);
    }
    let reach = reach(app, chat).await?;
    let mut connectors = Vec::new();
    for (i, a) in asked.iter().enumerate() {
        connectors.push(reach.get(a.connector(), &format!("context[{i}].connector"))?);
    }
    let started = std::time::Instant::now();
    let all = asked
        .iter()
        .zip(&connectors)
        .map(|(a, c)| expand_one(app, chat, c, a));
    let expanded = futures_util::future::join_all(all).await;
    for ((a, c), e) in asked.iter().zip(&connectors).zip(expanded) {
        blocks.push(a, &c.name, e?);
    }
    tracing::info!(conversation = %chat, items = asked.len(), bytes = blocks.text.len(),
        ms = started.elapsed().as_millis() as u64, "mcp: a message's context expanded");
    Ok(blocks)
}
