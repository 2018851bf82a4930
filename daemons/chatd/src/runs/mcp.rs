//! MCP tools in a chat's turns: the connectors a chat may use (switched on,
//! not switched off for the chat, and named by its agent when it has one
//! that names its tools), their tools offered beside the built-ins
//! (`mcp/offer.rs` names them), and a call run in the chat's session
//! (`mcp/sessions.rs`), its result cut to the call's room with the whole
//! of it under `.tandem/outputs/`. A server that cannot be used this turn
//! costs the model one line, never the turn.

use tandem_shared::http::ApiError;
use tokio::sync::watch;

use super::{EndRequest, Runs};
use crate::agents::Agent;
use crate::mcp::client::Failure;
use crate::mcp::connector_grant;
use crate::mcp::offer::{self, ChatTools, McpTool};
use crate::store::mcp::{self as rows, Connector};
use crate::tools::{self, ToolOutput};
use crate::workspace::Workspace;

/// How a brief gets a chat's MCP tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lists {
    /// Open the sessions a turn needs (a run's requests and calls).
    Open,
    /// Only what open sessions list (an estimate, a view): opens nothing.
    AsOpen,
}

/// How an MCP call ended for the run.
pub(super) enum McpEnd {
    /// With the card of the tool's page, for a tool that has one.
    Done(ToolOutput, Option<serde_json::Value>),
    Stopped(ToolOutput),
    Shutdown,
}

/// The connectors chat `conversation_id` may use, read with its other parts.
pub(super) fn usable(
    conn: &rusqlite::Connection,
    conversation_id: &str,
    agent: Option<&Agent>,
) -> Result<Vec<Connector>, ApiError> {
    let off = rows::off_in(conn, conversation_id)?;
    Ok(rows::list(conn)?
        .into_iter()
        .filter(|c| why_not(c, &off, agent).is_none())
        .collect())
}

/// Why a chat whose switched-off connectors are `off` and whose agent is
/// `agent` may not use connector `c`; `None` when it may.
pub(crate) fn why_not(
    c: &Connector,
    off: &[String],
    agent: Option<&Agent>,
) -> Option<&'static str> {
    if !c.enabled {
        Some("switched off under MCP servers")
    } else if off.contains(&c.id) {
        Some("switched off for this chat")
    } else if !agent.is_none_or(|a| names(a, &c.id)) {
        Some("the chat's agent does not name it")
    } else {
        None
    }
}

/// Whether `agent` names connector `id`: a saved agent gets only the
/// connectors it names, whatever else its tools say.
pub fn names(agent: &Agent, id: &str) -> bool {
    let grant = connector_grant(id);
    agent
        .tools
        .as_ref()
        .is_some_and(|tools| tools.contains(&grant))
}

impl Runs {
    /// The names no MCP tool may take: this chatd's tools, and `bash`
    /// whether it is offered on this box or not.
    pub(crate) fn builtin_names(&self) -> Vec<&'static str> {
        let mut names = self.inner.registry.names();
        names.push("bash");
        names
    }

    /// The MCP tools a turn of `chat` offers, named beside the built-ins.
    pub(super) async fn mcp_tools(
        &self,
        chat: &str,
        connectors: &[Connector],
        lists: Lists,
    ) -> ChatTools {
        if connectors.is_empty() {
            return ChatTools::default();
        }
        let builtins = self.builtin_names();
        let listed = match lists {
            Lists::Open => self.inner.mcp.list_for_turn(chat, connectors).await,
            Lists::AsOpen => {
                let mut listed = Vec::new();
                for c in connectors {
                    let tools = self
                        .inner
                        .mcp
                        .listed_now(chat, c)
                        .await
                        .ok_or_else(|| Failure::Connect("no session open".into()));
                    let known = self.inner.mcp.known(c);
                    listed.push(offer::Listed {
                        connector: c,
                        tools,
                        known,
                    });
                }
                listed
            }
        };
        offer::name_tools(&listed, &builtins)
    }

    /// Runs one allowed MCP call in the chat's session. A stop answers it
    /// at once (the server may still finish it); chatd's shutdown leaves
    /// it for the run's resume.
    pub(super) async fn call_mcp(
        &self,
        conversation_id: &str,
        call_id: &str,
        tool: &McpTool,
        arguments: &str,
        budget: usize,
        stop: &mut watch::Receiver<EndRequest>,
    ) -> McpEnd {
        let failed = |text: String| McpEnd::Done(ToolOutput::failed(&tool.name, &text), None);
        let args = match serde_json::from_str::<serde_json::Value>(arguments) {
            Ok(serde_json::Value::Object(map)) => map,
            _ if arguments.trim().is_empty() => Default::default(),
            _ => return failed("the arguments must be a JSON object".into()),
        };
        // As it is now: switched off, removed or taken from the chat while
        // a card waited, it is not called.
        let (id, cid) = (tool.connector_id.clone(), conversation_id.to_string());
        let connector = self
            .inner
            .store
            .read(move |conn| {
                let agent = crate::agents::of_conversation(conn, &cid)?;
                Ok(usable(conn, &cid, agent.as_ref())?
                    .into_iter()
                    .find(|c| c.id == id))
            })
            .await;
        let Ok(Some(connector)) = connector else {
            return failed(format!(
                "the MCP connector {} is no longer on for this chat; the call was not sent",
                tool.connector_name
            ));
        };
        let input = serde_json::Value::Object(args.clone());
        let work = self.inner.mcp.call(
            conversation_id,
            &connector,
            &tool.tool,
            args,
            tool.app.is_some(),
        );
        let called = tokio::select! {
            called = work => called,
            _ = stop.wait_for(|r| *r == EndRequest::Stop) => {
                let text = "stopped: the run was stopped while the MCP server worked on this \
                            call; its answer is not kept";
                return McpEnd::Stopped(ToolOutput {
                    ok: false,
                    text: text.into(),
                    summary: format!("{}: stopped", tool.name),
                    bytes: 0,
                });
            }
            _ = self.inner.shutdown.wait() => return McpEnd::Shutdown,
        };
        let called = match called {
            Ok(called) => called,
            Err(Failure::SignIn(_)) => {
                return failed(format!(
                    "MCP connector {}: the server refused its token or headers; the owner \
                     signs in again under MCP servers",
                    tool.connector_name
                ))
            }
            Err(Failure::Connect(why)) => {
                return failed(format!("MCP connector {}: {why}", tool.connector_name))
            }
        };
        let bytes = called.text.len() as u64;
        // The page's card: what it needs to show this call (the event
        // carries all but the input and the result).
        // A page whose name holds a secret of the connector is not shown
        // (cleaned, it would name another).
        let plain = |text: &str| {
            self.inner
                .mcp
                .mcp()
                .target(&connector)
                .is_ok_and(|t| t.clean(text.to_string()) == text)
        };
        let card = match (&tool.app, called.page) {
            (Some(app), Some(result)) if plain(&app.resource_uri) && plain(&tool.tool) => {
                Some(serde_json::json!({
                "kind": "mcp_app", "server": crate::mcp::connector_grant(&tool.connector_id),
                "tool": tool.tool, "resource_uri": app.resource_uri,
                "visibility": app.visibility, "input": input, "result": result}))
            }
            _ => None,
        };
        let root = self.workspace_root(conversation_id);
        let (call_id, text) = (call_id.to_string(), called.text);
        // A long result is cut to the call's room; the whole is kept in the
        // workspace, where read_file and grep reach it.
        let text = tokio::task::spawn_blocking(move || match Workspace::open(&root) {
            Ok(workspace) => tools::fit_output(&workspace, &call_id, text, budget),
            Err(_) => text.chars().take(budget).collect(),
        })
        .await
        .unwrap_or_else(|_| "the result could not be read".into());
        let summary = format!("{} · {}: {} bytes", tool.connector_name, tool.tool, bytes);
        if called.failed {
            let output = ToolOutput {
                ok: false,
                text,
                summary: format!("{summary}, an error"),
                bytes,
            };
            return McpEnd::Done(output, card);
        }
        McpEnd::Done(ToolOutput::ok(text, summary, bytes), card)
    }
}
