//! What `GET …/tools` and `GET /draft/tools` show: each tool the chat
//! could be offered, whether it is and why not; each group of built-in
//! tools with its switch; each MCP connector. A view opens nothing: MCP
//! tools are as an open session lists them, else as the last test did.

use tandem_shared::http::ApiError;

use super::brief::Chat;
use super::mcp::why_not;
use super::Runs;
use crate::agents::Agent;
use crate::mcp::offer;
use crate::store::mcp::{self as rows, Connector};
use crate::tools::groups;
use crate::words::{ChatKind, ToolGroup};

/// A chat's tools as `GET …/tools` shows them.
#[derive(Debug, serde::Serialize)]
pub struct ToolsView {
    pub tools: Vec<ToolLine>,
    /// The groups of built-in tools, then one `mcp:<id>` per connector.
    pub groups: Vec<GroupLine>,
    /// What the chat switched off: groups and `mcp:<id>`, the list `PUT
    /// …/builtins {off}` replaces.
    pub off: Vec<String>,
    pub mcp: Vec<ConnectorLine>,
    /// The groups of tools a chat has only once switched on for it.
    pub opt_in: Vec<OptInLine>,
}

#[derive(Debug, serde::Serialize)]
pub struct OptInLine {
    pub name: ToolGroup,
    pub on: bool,
    /// Whether it can serve the chat now (on or not).
    pub usable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A switch of the Tools menu.
#[derive(Debug, serde::Serialize)]
pub struct GroupLine {
    /// A group's word, or `mcp:<connector id>`.
    pub name: String,
    pub label: String,
    /// Switched on (a default-on group not switched off, an opt-in one switched on).
    pub on: bool,
    pub opt_in: bool,
    /// Whether it could serve the chat were it on.
    pub usable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Its tools on this box.
    pub tools: Vec<String>,
}

#[derive(Debug, serde::Serialize)]
pub struct ToolLine {
    pub name: String,
    pub source: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connector: Option<String>,
    /// The group it switches with, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    pub description: String,
    pub usable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A connector as one chat sees it.
#[derive(Debug, serde::Serialize)]
pub struct ConnectorLine {
    pub id: String,
    pub name: String,
    pub state: crate::mcp::ConnectorState,
    /// Not switched off for this chat.
    pub on: bool,
    pub usable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What a view is made from beside the chat.
struct Parts {
    connectors: Vec<Connector>,
    mcp_off: Vec<String>,
    switches: crate::store::tool_groups::Switches,
    agents: i64,
}

impl Runs {
    /// What chat `conversation_id` is offered and why not the rest.
    pub(crate) async fn tools_view(&self, conversation_id: &str) -> Result<ToolsView, ApiError> {
        let chat = self.placed_chat(conversation_id).await?;
        let cid = conversation_id.to_string();
        let parts = self
            .inner
            .store
            .read(move |conn| {
                crate::store::queries::conversation(
                    conn,
                    &cid,
                    crate::store::queries::Trashed::Exclude,
                )?;
                parts(conn, &cid)
            })
            .await?;
        Ok(self.view_of(&chat, &parts).await)
    }

    /// What a chat made now on `model` (with `agent_id`) would be offered,
    /// every switch at its default: `GET /draft/tools`.
    pub(crate) async fn draft_tools_view(
        &self,
        model: &str,
        agent: Option<Agent>,
    ) -> Result<ToolsView, ApiError> {
        let model = model.to_string();
        let sandboxed = self.inner.sandboxes.is_some();
        let (chat, parts) = self
            .inner
            .store
            .read(move |conn| {
                let chat = Chat::draft(conn, &model, agent, sandboxed)?;
                Ok((chat, parts(conn, super::brief::DRAFT)?))
            })
            .await?;
        Ok(self.view_of(&chat, &parts).await)
    }

    async fn view_of(&self, chat: &Chat, parts: &Parts) -> ToolsView {
        let agent = chat.agent();
        let sight = self
            .inner
            .models
            .sight(chat.model(), &self.inner.config.image_model);
        // Why each built-in is not offered, by the agent, the model and
        // the chat's rules; `switched`: and by its switch.
        let why = |name: &str, switched: bool| -> Option<String> {
            if agent.is_some_and(|a| !a.grants(name)) {
                return Some("the chat's agent does not grant it".into());
            }
            if !super::brief::useful(name, &sight) {
                return Some(
                    "the chat's model sees images itself, or no model of the box does".into(),
                );
            }
            let refused = if switched {
                chat.refusal_with(name, None)
            } else {
                chat.rule_refusal(name)
                    .or_else(|| chat.policy_refusal(name, None))
            };
            refused.map(|why| {
                if name == crate::tools::spawn::LIST_NAME {
                    "saved agents are not switched on for this chat".to_string()
                } else {
                    why
                }
            })
        };
        let mut tools: Vec<ToolLine> = self
            .inner
            .registry
            .specs()
            .iter()
            .map(|s| {
                let reason = why(s.name, true);
                ToolLine {
                    name: s.name.to_string(),
                    source: "builtin",
                    connector: None,
                    group: groups::group_of(s.name).map(|g| g.as_str().to_string()),
                    description: first_line(s.description),
                    usable: reason.is_none(),
                    reason,
                }
            })
            .collect();
        let mut group_lines: Vec<GroupLine> = ToolGroup::ALL
            .iter()
            .map(|g| {
                let members: Vec<String> = groups::members(*g)
                    .iter()
                    .filter(|t| self.inner.registry.get(t).is_some())
                    .map(|t| t.to_string())
                    .collect();
                let reason = match g {
                    ToolGroup::SavedAgents => saved_agents_refusal(chat, parts.agents),
                    _ if members.is_empty() => Some(absent(*g).to_string()),
                    _ => {
                        let refusals: Vec<Option<String>> =
                            members.iter().map(|t| why(t, false)).collect();
                        if refusals.iter().any(Option::is_none) {
                            None
                        } else {
                            refusals.into_iter().flatten().next()
                        }
                    }
                };
                GroupLine {
                    name: g.as_str().to_string(),
                    label: groups::label(*g).to_string(),
                    on: parts.switches.is_on(*g),
                    opt_in: groups::opt_in(*g),
                    usable: reason.is_none(),
                    reason,
                    tools: members,
                }
            })
            .collect();
        let mut lines = Vec::new();
        let mut usable = Vec::new();
        for c in &parts.connectors {
            let reason = why_not(c, &parts.mcp_off, agent);
            if reason.is_none() {
                usable.push(c.clone());
            }
            lines.push(ConnectorLine {
                id: c.id.clone(),
                name: c.name.clone(),
                state: crate::mcp::state_of(c),
                on: !parts.mcp_off.contains(&c.id),
                usable: reason.is_none(),
                reason: reason.map(str::to_string),
            });
        }
        let mut listed = Vec::new();
        for c in &usable {
            let tools = match self.inner.mcp.listed_now(&chat.home, c).await {
                Some(tools) => Ok(tools),
                None => Ok(saved_tools(c)),
            };
            let known = self.inner.mcp.known(c);
            listed.push(offer::Listed {
                connector: c,
                tools,
                known,
            });
        }
        let offered = offer::name_tools(&listed, &self.builtin_names());
        for line in &lines {
            let names = offered
                .tools
                .iter()
                .filter(|t| t.connector_id == line.id)
                .map(|t| t.name.clone())
                .collect();
            // Off for the box or not named by the agent: not this chat's to switch.
            let fixed = line.reason.as_deref().filter(|_| line.on);
            group_lines.push(GroupLine {
                name: format!("mcp:{}", line.id),
                label: line.name.clone(),
                on: line.on,
                opt_in: false,
                usable: fixed.is_none(),
                reason: fixed.map(str::to_string),
                tools: names,
            });
        }
        tools.extend(offered.tools.into_iter().map(|t| {
            let reason = chat.policy_refusal(&t.name, Some(&t));
            ToolLine {
                group: Some(format!("mcp:{}", t.connector_id)),
                connector: Some(t.connector_id.clone()),
                description: first_line(&t.description),
                usable: reason.is_none(),
                reason,
                name: t.name,
                source: "mcp",
            }
        }));
        let mut off: Vec<String> = parts
            .switches
            .off
            .iter()
            .map(|g| g.as_str().to_string())
            .collect();
        off.extend(parts.mcp_off.iter().map(|id| format!("mcp:{id}")));
        let opt_in = group_lines
            .iter()
            .filter(|g| g.opt_in)
            .filter_map(|g| {
                Some(OptInLine {
                    name: ToolGroup::parse(&g.name)?,
                    on: g.on,
                    usable: g.usable,
                    reason: g.reason.clone(),
                })
            })
            .collect();
        ToolsView {
            tools,
            groups: group_lines,
            off,
            mcp: lines,
            opt_in,
        }
    }
}

/// The connectors, the chat's switches and the saved agents' count.
fn parts(conn: &rusqlite::Connection, id: &str) -> Result<Parts, ApiError> {
    let agents: i64 = conn.query_row("SELECT COUNT(*) FROM agents", [], |r| r.get(0))?;
    Ok(Parts {
        connectors: rows::list(conn)?,
        mcp_off: rows::off_in(conn, id)?,
        switches: crate::store::tool_groups::of(conn, id)?,
        agents,
    })
}

/// Why saved agents cannot serve the chat now, on or not.
fn saved_agents_refusal(chat: &Chat, agents: i64) -> Option<String> {
    let reason = if chat.kind() == ChatKind::Subagent {
        "a sub-agent cannot start agents"
    } else if chat
        .agent()
        .is_some_and(|a| !a.grants(crate::tools::spawn::NAME))
    {
        "the chat's agent does not grant spawn_agent"
    } else if chat.switched_off(crate::tools::spawn::NAME).is_some() {
        "sub-agents are switched off for this chat"
    } else if agents == 0 {
        "there is no saved agent yet"
    } else {
        return None;
    };
    Some(reason.to_string())
}

/// Why a group with no tool on this box serves nothing.
fn absent(group: ToolGroup) -> &'static str {
    match group {
        ToolGroup::Shell => {
            "nothing runs commands on this box: there is no sandbox runtime and host commands \
             are off ([chatd] host_exec)"
        }
        ToolGroup::Triggers => {
            "chats have no trigger tools yet: make triggers with `tandem trigger` or the page"
        }
        _ => "this box does not offer these tools",
    }
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or("").to_string()
}

/// A connector's tools as its last test listed them (names, descriptions).
fn saved_tools(c: &Connector) -> Vec<rmcp::model::Tool> {
    serde_json::from_str::<Vec<crate::mcp::client::ToolInfo>>(&c.tools)
        .unwrap_or_default()
        .into_iter()
        .map(|t| {
            rmcp::model::Tool::new(
                t.name,
                t.description.unwrap_or_default(),
                std::sync::Arc::new(rmcp::model::JsonObject::new()),
            )
        })
        .collect()
}
