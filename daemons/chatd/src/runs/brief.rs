//! What a chat's requests carry beside its messages, made afresh for each
//! request: the system block (the person's prompt, the agent's
//! instructions, what this chat's tools really can do), the tools offered,
//! the model settings (the chat's over its agent's) and the window the chat
//! plans with.

use std::time::Duration;

use serde_json::Value;
use tandem_shared::http::ApiError;
use tandem_shared::sync::lock;

use super::kept::{KeptPath, Rendered};
use super::mcp::Lists;
use super::{Request, RequestBody, Runs, Step};
use crate::agents::Agent;
use crate::config::HostExec;
use crate::context::{self, Window};
use crate::mcp::offer::{ChatTools, McpTool};
use crate::model::{Conversation, Message};
use crate::permissions::Mode;
use crate::prompt::{self, Commands, Network, Offer, Reach, Sight};
use crate::settings::Settings;
use crate::store::mcp::Connector;
use crate::store::policies::Policies;
use crate::store::queries::{self, Trashed};
use crate::words::{ChatKind, Origin, ToolGroup, ToolPolicy};

/// What the last call the step limit allows is told (it gets no tools).
const LAST_STEP: &str =
    "# Last step\n\nThis is the last model call of this run: the step limit is \
     reached and no tools are offered now. Answer from what you have: say what is done, what \
     is not, and what you would do next. The person can press Continue to let you go on.";

/// What a worker's last model call is told: its report, with no tools.
const WORKER_LAST_STEP: &str =
    "# Last step\n\nThis is your last model call on this task: the step limit is reached and \
     no tools are offered now. Write your report now, in the shape above, from what you have \
     done: say plainly what is not done in Open.";

/// What a chat whose saved agent was deleted is told at each request.
const AGENT_GONE: &str = "\n\n# Your saved agent\n\nThe saved agent this chat was made with \
    was deleted: its instructions and its limits on tools no longer apply. If the person \
    expects it, say so.";

/// Why a chat kept to its agent's folder has no `bash` without a sandbox.
pub(super) const HOST_OFF: &str = "`bash` would run on this machine, where nothing keeps a \
    command inside the agent's folder, so a chat kept to a folder is never offered it; the \
    file tools reach the folder";

/// Why a sub-agent kept to other folders than its parent has no `bash`.
const SHARED_SANDBOX_OFF: &str = "`bash` runs in the parent chat's sandbox, which binds the \
    parent's folders, not this sub-agent's: it is not offered here; the file tools reach this \
    sub-agent's folder";

/// The id a chat not made yet is read under: no chat has it (ids start `c_`).
pub(super) const DRAFT: &str = "draft";

/// How long a request waits for egressd to say a chat's network.
const NETWORK_WAIT: Duration = Duration::from_secs(2);

/// A chat's requests' fixed part.
pub(crate) struct Brief {
    pub system: String,
    /// The chat-completions `tools` array of what is offered.
    pub tools: Value,
    /// The chat's settings over its agent's.
    pub settings: Settings,
    pub window: Window,
    /// The MCP tools offered, with the connectors that cannot be used.
    pub mcp: ChatTools,
}

/// What a brief is made from, read in one go.
pub(super) struct Chat {
    conversation: Conversation,
    agent: Option<Agent>,
    /// A person started the chat's live run (or none runs): cards may be shown.
    watched: bool,
    /// The MCP connectors it may use.
    connectors: Vec<Connector>,
    /// The chat whose places it works in: its parent for a sub-agent.
    pub(super) home: String,
    /// A sub-agent's: the tools its call named (`None`: the parent's).
    subset: Option<Option<Vec<String>>>,
    /// The chat switched saved agents on (list_agents, spawn_agent's `agent`).
    pub(super) saved_agents: bool,
    /// The tool groups switched off: the chat's own and, for a sub-agent,
    /// its parent's (a sub-agent never gets a group its parent lost).
    groups_off: Vec<ToolGroup>,
    /// The tool policies over the mode (its parent's for a sub-agent).
    pub(super) policies: Policies,
    /// In plan mode (or its parent is): the read tools only.
    plan: bool,
    /// Why `bash` is never offered to it, when it is not: kept to a folder
    /// with no sandbox (a command on this machine reaches any file), or a
    /// sub-agent kept to other folders than the parent whose sandbox it shares.
    bash_off: Option<&'static str>,
    /// Its part in Agents mode.
    pub(super) part: Part,
    /// The chat's goal while it is active (a person's chat only).
    pub(super) goal: Option<crate::model::Goal>,
    /// The chat has an active self-paced loop (schedule_next, loop_done).
    self_paced: bool,
    /// The skills a compaction summarized away, newest first: put back.
    skills_kept: Vec<String>,
}

/// A chat's part in Agents mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Part {
    /// Not in Agents mode: the one loop with every tool.
    Alone,
    /// The main agent: reads and plans, hands writes and commands to workers.
    Main,
    /// A worker on one task.
    Worker,
}

/// The tools plan mode offers: those that read, the todo list, skills,
/// and the goal and loop tools (they change nothing outside the chat).
const PLAN_TOOLS: [&str; 15] = [
    "read_file",
    "list_files",
    "grep",
    crate::index::tool::NAME,
    "read_document",
    "web_search",
    "web_fetch",
    crate::tools::describe::NAME,
    "todo_write",
    crate::tools::skill::NAME,
    crate::tools::spawn::LIST_NAME,
    crate::tools::goal::DONE,
    crate::tools::goal::BLOCKED,
    crate::tools::loops::NEXT,
    crate::tools::loops::DONE,
];

/// What a chat in plan mode is told at each request.
const PLAN_PART: &str = "\n\n# Plan mode\n\nThis chat is in plan mode: you have the read tools \
    only, and nothing you do changes a file, runs a command or starts an agent. Look at what \
    you need, then answer with a plan: the steps, the files each one changes and how to check \
    it. The person switches the chat out of plan mode to carry it out.";

/// The tools the main agent of Agents mode is never offered.
const MAIN_OFF: [&str; 7] = [
    "bash",
    "write_file",
    "edit_file",
    "move_file",
    "delete_file",
    crate::tools::spawn::NAME,
    crate::tools::spawn::LIST_NAME,
];

impl Chat {
    pub(super) fn read(conn: &rusqlite::Connection, id: &str) -> Result<Chat, ApiError> {
        let agent = crate::agents::of_conversation(conn, id)?;
        let conversation = queries::conversation(conn, id, Trashed::Include)?;
        let mut part = Part::Alone;
        let (home, subset) = match (&conversation.kind, &conversation.parent_id) {
            (ChatKind::Subagent, Some(parent)) => {
                let sub = crate::store::subagents::one(conn, parent, id)?;
                if sub.task_n.is_some() {
                    part = Part::Worker;
                }
                (parent.clone(), Some(sub.tools))
            }
            _ => (id.to_string(), None),
        };
        let agents_on = match &agent {
            Some(agent) => conversation.settings.over(&agent.settings).agents_on(),
            None => conversation.settings.agents_on(),
        };
        let switches = crate::store::tool_groups::of(conn, id)?;
        let mut groups_off = switches.off.clone();
        if home != id {
            groups_off.extend(crate::store::tool_groups::of(conn, &home)?.off);
        }
        // Only a person's chat plans: a sub-agent (even as a saved agent
        // whose settings say Agents mode) never gets `task`. Agents mode
        // hands its work to workers: with sub-agents switched off the chat
        // works as one loop.
        if conversation.kind == ChatKind::Chat
            && agents_on
            && !groups_off.contains(&ToolGroup::Subagents)
        {
            part = Part::Main;
        }
        let plan = conversation.permission_mode == Mode::Plan
            || (home != id
                && queries::conversation(conn, &home, Trashed::Include)?.permission_mode
                    == Mode::Plan);
        let goal = match conversation.kind {
            ChatKind::Chat => crate::store::goals::active(conn, id)?,
            ChatKind::Subagent => None,
        };
        let mut connectors = super::mcp::usable(conn, &home, agent.as_ref())?;
        if subset.is_some() {
            // A sub-agent run as a saved agent reaches only the connectors
            // its parent's agent names too: a tool of another connector
            // could share a name the parent was offered.
            let parent_agent = crate::agents::of_conversation(conn, &home)?;
            let parents = super::mcp::usable(conn, &home, parent_agent.as_ref())?;
            connectors.retain(|c| parents.iter().any(|p| p.id == c.id));
        }
        let path = queries::path_to(conn, id, conversation.head_id.as_deref())?;
        let skills_kept = context::summarized_skills(&path);
        Ok(Chat {
            // Saved agents start as sub-agents: none where those are off.
            saved_agents: subset.is_none()
                && switches.is_on(ToolGroup::SavedAgents)
                && !groups_off.contains(&ToolGroup::Subagents),
            groups_off,
            policies: crate::store::policies::effective(conn, &home)?,
            plan,
            connectors,
            conversation,
            agent,
            watched: queries::active_run(conn, &home)?.is_none_or(|r| r.origin == Origin::User),
            home,
            subset,
            bash_off: None,
            part,
            goal,
            self_paced: crate::store::loops::self_paced(conn, id)?,
            skills_kept,
        })
    }

    /// A chat not made yet, on `model` with `agent`, every switch at its
    /// default: what `GET /draft/tools` shows. `sandboxed`: commands run
    /// in a sandbox (else a chat kept to the agent's folder has no `bash`).
    pub(super) fn draft(
        conn: &rusqlite::Connection,
        model: &str,
        agent: Option<Agent>,
        sandboxed: bool,
    ) -> Result<Chat, ApiError> {
        let settings = match &agent {
            Some(_) => Settings::default(),
            None => crate::store::meta::default_settings(conn)?,
        };
        let conversation = Conversation {
            id: DRAFT.to_string(),
            title: String::new(),
            model: model.to_string(),
            created: String::new(),
            updated: String::new(),
            state: crate::words::ChatState::Idle,
            permission_mode: crate::store::meta::default_mode(conn)?,
            settings,
            origin: Origin::User,
            workspace: "own".to_string(),
            agent_id: agent.as_ref().map(|a| a.id.clone()),
            deleted: None,
            kind: ChatKind::Chat,
            parent_id: None,
            head_id: None,
            last_seq: 0,
        };
        let agents_on = match &agent {
            Some(a) => conversation.settings.over(&a.settings).agents_on(),
            None => conversation.settings.agents_on(),
        };
        let confined = agent.as_ref().is_some_and(|a| a.folder.is_some());
        Ok(Chat {
            saved_agents: false,
            groups_off: Vec::new(),
            policies: crate::store::policies::of_box(conn)?,
            plan: conversation.permission_mode == Mode::Plan,
            connectors: super::mcp::usable(conn, DRAFT, agent.as_ref())?,
            conversation,
            agent,
            watched: true,
            home: DRAFT.to_string(),
            subset: None,
            bash_off: (confined && !sandboxed).then_some(HOST_OFF),
            part: if agents_on { Part::Main } else { Part::Alone },
            goal: None,
            self_paced: false,
            skills_kept: Vec::new(),
        })
    }

    /// Whether the chat may be offered tool `name`: not in a group
    /// switched off, and allowed by the chat's other rules.
    pub(super) fn allows(&self, name: &str) -> bool {
        self.switched_off(name).is_none() && self.by_rules(name)
    }

    /// Whether the chat's rules other than its group switches allow tool
    /// `name`: list_agents only where saved agents are switched on; a
    /// sub-agent never starts sub-agents, and has only the tools its call
    /// named.
    fn by_rules(&self, name: &str) -> bool {
        if name == crate::tools::spawn::LIST_NAME && !self.saved_agents {
            return false;
        }
        if name == "bash" && self.bash_off.is_some() {
            return false;
        }
        if name == crate::tools::task::NAME {
            return self.part == Part::Main;
        }
        if crate::tools::goal::is_goal_tool(name) {
            return self.goal.is_some();
        }
        if crate::tools::loops::is_loop_tool(name) {
            return self.self_paced;
        }
        if self.part == Part::Main && MAIN_OFF.contains(&name) {
            return false;
        }
        match &self.subset {
            None => true,
            Some(subset) => {
                name != crate::tools::spawn::NAME
                    && subset
                        .as_ref()
                        .is_none_or(|tools| tools.iter().any(|t| t == name))
            }
        }
    }
}

impl Chat {
    pub(super) fn agent(&self) -> Option<&Agent> {
        self.agent.as_ref()
    }

    pub(super) fn model(&self) -> &str {
        &self.conversation.model
    }

    pub(super) fn kind(&self) -> ChatKind {
        self.conversation.kind
    }

    /// Why the chat's policies or plan mode keep tool `name` (MCP tool
    /// `mcp`, whose policy goes by its rule name and whose read-only hint
    /// is its server's word) from the chat, when they do.
    pub(super) fn policy_refusal(&self, name: &str, mcp: Option<&McpTool>) -> Option<String> {
        let key = mcp.map_or_else(|| name.to_string(), McpTool::rule_name);
        let shown = name.chars().take(60).collect::<String>();
        if self.policies.get(&key) == Some(&ToolPolicy::Never) {
            return Some(format!(
                "`{shown}` is set to never on this box or in this chat"
            ));
        }
        let reads = mcp.map_or(PLAN_TOOLS.contains(&name), |t| t.read_only);
        if self.plan && !reads {
            return Some(format!(
                "`{shown}` is not offered: {}",
                crate::permissions::PLAN_REASON
            ));
        }
        None
    }

    /// Whether tool `name` (MCP tool `mcp`) may be offered: `allows` and
    /// the chat's policies and plan mode.
    pub(super) fn allows_with(&self, name: &str, mcp: Option<&McpTool>) -> bool {
        self.allows(name) && self.policy_refusal(name, mcp).is_none()
    }

    /// Why a call to `name` (MCP tool `mcp`) is refused, when it is.
    pub(super) fn refusal_with(&self, name: &str, mcp: Option<&McpTool>) -> Option<String> {
        self.refusal(name)
            .or_else(|| self.policy_refusal(name, mcp))
    }

    /// The switched-off group tool `name` is in, when it is.
    pub(super) fn switched_off(&self, name: &str) -> Option<ToolGroup> {
        crate::tools::groups::group_of(name).filter(|g| self.groups_off.contains(g))
    }

    /// Why a call to `name` is refused in this chat, when it is.
    pub(super) fn refusal(&self, name: &str) -> Option<String> {
        if let Some(group) = self.switched_off(name) {
            return Some(format!(
                "`{}` is in the {} group ({}), which the person switched off for this chat",
                name.chars().take(60).collect::<String>(),
                crate::tools::groups::label(group),
                group.as_str()
            ));
        }
        self.rule_refusal(name)
    }

    /// Why the chat's rules other than its switches refuse `name`, when they do.
    pub(super) fn rule_refusal(&self, name: &str) -> Option<String> {
        if self.by_rules(name) {
            return None;
        }
        let shown = name.chars().take(60).collect::<String>();
        if let (true, Some(why)) = (name == "bash", self.bash_off) {
            return Some(why.to_string());
        }
        if name == crate::tools::task::NAME {
            return Some(
                "`task` is the main agent's in Agents mode, and this chat is not one".to_string(),
            );
        }
        if crate::tools::goal::is_goal_tool(name) {
            return Some(format!(
                "`{shown}` is offered only while the chat's goal is active, and it is not"
            ));
        }
        if crate::tools::loops::is_loop_tool(name) {
            return Some(format!(
                "`{shown}` is offered only while the chat has a self-paced loop, and it has none"
            ));
        }
        if self.part == Part::Main {
            return Some(format!(
                "`{shown}` is not the main agent's in Agents mode: hand writes and commands to \
                 a worker with `task`"
            ));
        }
        Some(if self.subset.is_some() {
            format!("`{shown}` is not one of the tools this sub-agent was given")
        } else {
            format!(
                "`{shown}` is offered only where the person switched saved agents on for this chat"
            )
        })
    }
}

impl Brief {
    /// The tokens every request of the chat starts with.
    pub fn fixed_tokens(&self) -> u64 {
        context::estimate(
            &[serde_json::json!({"role": "system", "content": self.system})],
            Some(&self.tools),
        )
    }
}

impl Runs {
    /// The sizes a chat's requests to `model` are held to, with `settings`'
    /// `context_size` under the model's window.
    pub(crate) fn window_with(
        &self,
        conversation_id: &str,
        model: &str,
        settings: &Settings,
    ) -> Window {
        let window = settings.window(self.inner.models.window_or_default(model));
        let refused = lock(&self.inner.refused).get(conversation_id).copied();
        Window::new(
            window,
            self.inner.config.answer_tokens,
            self.inner.config.compact_percent,
            refused,
        )
    }

    /// The chat's brief for a request to `model`.
    pub(crate) async fn brief(
        &self,
        conversation_id: &str,
        model: &str,
        lists: Lists,
    ) -> Result<Brief, ApiError> {
        let cid = conversation_id.to_string();
        let chat = self
            .inner
            .store
            .read(move |conn| Chat::read(conn, &cid))
            .await?;
        Ok(self.brief_of(&self.placed(chat), model, lists).await)
    }

    /// What `/about` says of a chat: the tools its next request offers
    /// (with the MCP tools as the servers last listed them) and its window.
    pub(crate) async fn about(
        &self,
        conversation_id: &str,
        model: &str,
    ) -> Result<(usize, u64), ApiError> {
        let brief = self.brief(conversation_id, model, Lists::AsOpen).await?;
        let tools = brief.tools.as_array().map_or(0, Vec::len);
        Ok((tools, brief.window.window))
    }

    /// The chat as its next request reads it: what `GET …/tools` shows.
    pub(super) async fn placed_chat(&self, conversation_id: &str) -> Result<Chat, ApiError> {
        let cid = conversation_id.to_string();
        let chat = self
            .inner
            .store
            .read(move |conn| Chat::read(conn, &cid))
            .await?;
        Ok(self.placed(chat))
    }

    /// The chat as its folders place it: no host `bash` when its agent
    /// keeps it to a folder and there is no sandbox.
    pub(super) fn placed(&self, mut chat: Chat) -> Chat {
        let folders = &self.inner.folders;
        let reach = folders.reach(&chat.conversation.id);
        chat.bash_off = if self.inner.sandboxes.is_none() {
            reach.confined().then_some(HOST_OFF)
        } else {
            (chat.home != chat.conversation.id && reach != folders.reach(&chat.home))
                .then_some(SHARED_SANDBOX_OFF)
        };
        chat
    }

    pub(super) async fn brief_of(&self, chat: &Chat, model: &str, lists: Lists) -> Brief {
        let (conversation, agent) = (&chat.conversation, chat.agent.as_ref());
        let sight = self
            .inner
            .models
            .sight(model, &self.inner.config.image_model);
        let mcp = self.mcp_tools(&chat.home, &chat.connectors, lists).await;
        let skills = self.chat_skills(&chat.home).await.ok();
        let has_skills = skills.as_ref().is_some_and(|s| !s.on().is_empty());
        let allows = |n: &str| chat.allows(n) && (has_skills || n != crate::tools::skill::NAME);
        let mut tools = self.offered_tools(agent, &sight);
        if let Value::Array(offered) = &mut tools {
            offered.extend(mcp.openai_tools());
            offered.retain(|t| {
                t["function"]["name"]
                    .as_str()
                    .is_some_and(|n| match mcp.find(n) {
                        Some(tool) => chat.allows_with(n, Some(tool)),
                        None => allows(n) && chat.policy_refusal(n, None).is_none(),
                    })
            });
        }
        let names: Vec<&'static str> = self
            .inner
            .registry
            .specs()
            .iter()
            .map(|s| s.name)
            .filter(|n| {
                agent.is_none_or(|a| a.grants(n))
                    && useful(n, &sight)
                    && allows(n)
                    && chat.policy_refusal(n, None).is_none()
            })
            .collect();
        let offers_skills = names.contains(&crate::tools::skill::NAME);
        let needs_network = names
            .iter()
            .any(|n| matches!(*n, "bash" | "web_fetch" | "web_search"));
        let network = if needs_network {
            self.network_of(chat).await
        } else {
            Network::Unavailable
        };
        let commands = if chat.groups_off.contains(&ToolGroup::Shell) {
            Commands::SwitchedOff
        } else if chat.bash_off.is_some() {
            Commands::Nowhere
        } else if self.inner.sandboxes.is_some() {
            Commands::Sandbox
        } else {
            match self.inner.config.host_exec() {
                HostExec::Off => Commands::Nowhere,
                HostExec::Ask => Commands::Host { asks: true },
                HostExec::On => Commands::Host { asks: false },
            }
        };
        let offer = Offer {
            tools: names,
            commands,
            network,
            writes_ask: conversation.permission_mode == Mode::Ask,
            images: sight,
        };
        let instructions = agent.map(|a| a.instructions.as_str());
        let mut system = prompt::system_block(
            conversation.settings.system_prompt.as_deref(),
            instructions,
            &offer,
        );
        if let Some(part) = mcp.system_part() {
            system.push_str("\n\n");
            system.push_str(&part);
        }
        if agent.is_none() && conversation.agent_id.is_some() {
            system.push_str(AGENT_GONE);
        }
        match chat.part {
            Part::Alone => {}
            Part::Main => system.push_str(&prompt::agents_main_part()),
            Part::Worker => system.push_str(&prompt::worker_part(super::report::SHAPE)),
        }
        if chat.plan {
            system.push_str(PLAN_PART);
        }
        if let Some(goal) = &chat.goal {
            system.push_str(&prompt::goal_part(&goal.text));
        }
        if let crate::agent_folder::Reach::Folder(mount) =
            self.inner.folders.reach(&conversation.id)
        {
            system.push_str(&prompt::folder_part(&mount, chat.bash_off.is_some()));
        }
        let settings = match agent {
            Some(agent) => conversation.settings.over(&agent.settings),
            None => conversation.settings.clone(),
        };
        let window = self.window_with(&conversation.id, model, &settings);
        // Last, just before the summary: the list, and the skills a
        // compaction took away (held to an eighth of the window).
        if let Some(skills) = skills.as_ref().filter(|_| offers_skills) {
            let room = usize::try_from(window.window / 2).unwrap_or(usize::MAX);
            system.push_str(&skills_part(skills, chat, &tools, room));
        }
        Brief {
            system,
            tools,
            settings,
            window,
            mcp,
        }
    }

    /// The chat's network as egressd says it; `Unavailable` when it does
    /// not answer (then nothing goes out).
    async fn network_of(&self, chat: &Chat) -> Network {
        let Some(egress) = self.inner.egress.get() else {
            return Network::Unavailable;
        };
        let path = format!("/chats/{}/egress", chat.home);
        let asked =
            tokio::time::timeout(NETWORK_WAIT, egress.call(reqwest::Method::GET, &path, None))
                .await;
        let Ok(Ok((status, value))) = asked else {
            return Network::Unavailable;
        };
        if !status.is_success() {
            return Network::Unavailable;
        }
        let reach = |field: &str| value[field].as_str().and_then(Reach::parse);
        match (reach("preset"), reach("ceiling")) {
            (Some(preset), Some(ceiling)) => Network::Known {
                preset,
                ceiling,
                // egressd's switch, and chatd's own rule: a card is shown
                // only for a run a person started (runs/cards.rs).
                cards: chat.watched && value["cards"].as_bool().unwrap_or(true),
            },
            _ => Network::Unavailable,
        }
    }

    /// The tools a chat made with `agent` is offered: those it grants that
    /// can be of use with the chat's `sight`.
    fn offered_tools(&self, agent: Option<&Agent>, sight: &Sight) -> Value {
        match self.inner.registry.openai_tools() {
            Value::Array(tools) => Value::Array(
                tools
                    .into_iter()
                    .filter(|t| {
                        t["function"]["name"]
                            .as_str()
                            .is_some_and(|n| agent.is_none_or(|a| a.grants(n)) && useful(n, sight))
                    })
                    .collect(),
            ),
            other => other,
        }
    }

    /// The tokens left in the window after the chat's transcript, by the estimate.
    pub async fn free_tokens(&self, conversation_id: &str, model: &str) -> Result<u64, ApiError> {
        let history = self.head_path(conversation_id).await?;
        let brief = self.brief(conversation_id, model, Lists::AsOpen).await?;
        let messages = context::request_messages(
            &brief.system,
            &context::transcript(&history),
            &|id, name, args| self.stub(id, name, args),
            &|_| Vec::new(),
        );
        let used = context::estimate(&messages, Some(&brief.tools));
        Ok(brief.window.max_request().saturating_sub(used))
    }

    /// The request for the answer `message` (its text so far as prefill),
    /// sized by the engine's count when it has one, else by the estimate.
    pub(crate) async fn request(
        &self,
        conversation_id: &str,
        model: &str,
        message: &Message,
        prefill: &str,
        step: Step,
        kept: &mut KeptPath,
    ) -> Result<Request, ApiError> {
        // The chat, and the path above the answer: a compaction may have
        // moved it under its summary since the step began.
        let cid = conversation_id.to_string();
        let chat = kept
            .current_and(&self.inner.store, move |conn| Chat::read(conn, &cid))
            .await?;
        let chat = self.placed(chat);
        let brief = self.brief_of(&chat, model, Lists::Open).await;
        let at = kept.path().iter().position(|m| m.id == message.id);
        let last = match chat.part {
            Part::Worker => WORKER_LAST_STEP,
            _ => LAST_STEP,
        };
        let (system, tools) = match step {
            Step::More => (brief.system.clone(), brief.tools.clone()),
            Step::Last => (
                format!("{}\n\n{last}", brief.system),
                Value::Array(Vec::new()),
            ),
        };
        let stub = |id: &str, name: &str, args: &str| self.stub(id, name, args);
        let rendered = match at {
            Some(at) => {
                let question = question_of(&kept.path()[..at]);
                let told = self.told(kept, question, conversation_id).await;
                let transcript = context::transcript(&kept.path()[..at]);
                let images = self.images_of(&transcript, model, conversation_id).await;
                let images = |m: &Message| with_told(&images, m, &told);
                kept.render(at, &system, &stub, &images)
            }
            None => {
                let (cid, mid) = (conversation_id.to_string(), message.id.clone());
                let history = self
                    .inner
                    .store
                    .read(move |conn| {
                        let parent = queries::message(conn, &cid, &mid)?.parent_id;
                        queries::path_to(conn, &cid, parent.as_deref())
                    })
                    .await?;
                let told = self
                    .told(kept, question_of(&history), conversation_id)
                    .await;
                let transcript = context::transcript(&history);
                let images = self.images_of(&transcript, model, conversation_id).await;
                let images = |m: &Message| with_told(&images, m, &told);
                Rendered::whole(&system, &transcript, &stub, &images)
            }
        };
        let body = RequestBody::new(model, rendered, &tools, prefill, &brief.settings);
        let (tokens, exact) = self
            .inner
            .models
            .count_text(model, body.estimate, &body.bytes, brief.window.line)
            .await;
        Ok(Request {
            body,
            tokens,
            exact,
            window: brief.window,
        })
    }
}

impl Runs {
    /// The turn's list of files and the question it rides on (the last
    /// person's message above the answer): kept from the turn's first
    /// request, made anew when the question is another.
    async fn told(
        &self,
        kept: &mut KeptPath,
        question: Option<String>,
        conversation_id: &str,
    ) -> Option<(String, String)> {
        let question = question?;
        if kept.told.as_ref().is_none_or(|(id, _)| *id != question) {
            let line = self.files_told(conversation_id).await;
            kept.told = Some((question, line));
        }
        kept.told.clone().filter(|(_, line)| !line.is_empty())
    }
}

/// The chat's skills in its system block: the list, then the ones a
/// compaction summarized away, put back whole.
fn skills_part(
    skills: &super::skills::ChatSkills,
    chat: &Chat,
    tools: &Value,
    room: usize,
) -> String {
    use crate::skills::prompt;
    let on = skills.on();
    let can_exec = super::skills::can_exec(tools);
    let mut out = String::new();
    if let Some(list) = prompt::list_part(&on, can_exec) {
        out.push_str("\n\n");
        out.push_str(&list);
    }
    let kept: Vec<&crate::skills::Skill> = chat
        .skills_kept
        .iter()
        .filter_map(|name| on.iter().find(|s| s.name == *name).copied())
        .filter(|s| can_exec || !s.requires_exec)
        .collect();
    if let Some(part) = prompt::kept_part(&kept, room) {
        out.push_str(&part);
    }
    out
}

/// Whether offering tool `name` can help a chat that gets at images by
/// `sight`: describe_image only where the chat's model does not see images
/// and another model does.
pub(super) fn useful(name: &str, sight: &Sight) -> bool {
    name != crate::tools::describe::NAME || matches!(sight, Sight::Described(_))
}

/// The id of the last person's message of `above`: the turn's question.
fn question_of(above: &[Message]) -> Option<String> {
    above
        .iter()
        .rev()
        .find(|m| m.role == crate::words::Role::User)
        .map(|m| m.id.clone())
}

/// A user message's extra parts: its images, then the turn's file list.
fn with_told(
    images: &std::collections::HashMap<String, Vec<Value>>,
    m: &Message,
    told: &Option<(String, String)>,
) -> Vec<Value> {
    let mut parts = images.get(&m.id).cloned().unwrap_or_default();
    if let Some((question, line)) = told {
        if *question == m.id {
            parts.push(serde_json::json!({"type": "text", "text": line}));
        }
    }
    parts
}
