//! The words chatd stores and sends for a message's role and status, a
//! run's status and mode, a chat's state, a waiting message's state, who
//! asked, a person's answer on a consent card, and an MCP connector's
//! transport and state:
//! each a type, so only these can be written, and a stored one is read
//! into its type where its row is read.

tandem_shared::words! {
    /// Who a message is from, or what it marks in the transcript.
    pub enum Role("role") {
        User => "user",
        Assistant => "assistant",
        Tool => "tool",
        System => "system",
        /// A summary of the turns before it (a compaction).
        Compacted => "compacted",
        /// The model sees nothing before it.
        Cleared => "cleared",
        /// A line of the chat's goal (`goal_event` says which); the lines
        /// that start a turn reach the model as a person's words.
        Goal => "goal",
    }
}

tandem_shared::words! {
    /// Where a chat's goal stands.
    pub enum GoalState("goal state") {
        Active => "active",
        Paused => "paused",
        Done => "done",
        Blocked => "blocked",
    }
}

tandem_shared::words! {
    /// Why a goal paused.
    pub enum PausedBy("paused by") {
        User => "user",
        TurnLimit => "turn_limit",
        StepLimit => "step_limit",
        Error => "error",
        Interrupted => "interrupted",
        /// The same call gave the same result again and again.
        Stuck => "stuck",
    }
}

tandem_shared::words! {
    /// Where a chat's loop stands.
    pub enum LoopState("loop state") {
        /// Waits for the person's yes (the chat's first loop).
        Pending => "pending",
        Active => "active",
        Paused => "paused",
        /// Ran its runs, was done, or its run called neither loop tool.
        Ended => "ended",
    }
}

tandem_shared::words! {
    /// What a goal line of the transcript marks.
    pub enum GoalEvent("goal event") {
        Set => "set",
        Replaced => "replaced",
        Continue => "continue",
        Paused => "paused",
        Resumed => "resumed",
        Done => "done",
        Blocked => "blocked",
        Cleared => "cleared",
    }
}

impl GoalEvent {
    /// Whether the line starts a turn, so the model reads it.
    pub fn starts_turn(self) -> bool {
        matches!(
            self,
            GoalEvent::Set | GoalEvent::Replaced | GoalEvent::Continue | GoalEvent::Resumed
        )
    }
}

tandem_shared::words! {
    /// Where an assistant message or a tool result stands.
    pub enum MessageStatus("message status") {
        Streaming => "streaming",
        Done => "done",
        Failed => "failed",
        Stopped => "stopped",
        Interrupted => "interrupted",
        Paused => "paused",
    }
}

/// Where a run stands: the word is the shared crate's, so the daemons that
/// read chatd's runs (connectord, triggerd) spell it as chatd writes it.
pub use tandem_shared::words::ChatRunStatus as RunStatus;

tandem_shared::words! {
    /// What asked for a run.
    pub enum RunMode("run mode") {
        /// A message sent (or sent now, past the waiting ones).
        Send => "send",
        /// Continue: the last answer goes on.
        Continue => "continue",
        Regenerate => "regenerate",
        /// A question edited: a new branch from it.
        Edit => "edit",
        /// A sub-agent's run cut off by a restart, taken up again: like
        /// `send`, but the calls it left are answered as cut off, never run,
        /// and an answer cut mid-text goes on in place, as with `continue`.
        Resume => "resume",
    }
}

tandem_shared::words! {
    /// Whose a conversation is: a person's chat, or a sub-agent's, run by
    /// its parent chat and read-only to the API.
    pub enum ChatKind("chat kind") {
        Chat => "chat",
        Subagent => "subagent",
    }
}

tandem_shared::words! {
    /// A group of built-in tools a chat switches together (tools/groups.rs
    /// says which tools are in each). Every group is on until the chat
    /// switches it off, except the opt-in ones, off until switched on.
    pub enum ToolGroup("tool group") {
        /// `bash`, wherever it runs (the sandbox or this machine).
        Shell => "shell",
        /// The workspace's file tools and read_document.
        Files => "files",
        /// web_search and web_fetch.
        Web => "web",
        /// describe_image.
        Media => "media",
        /// spawn_agent, and `task` (Agents mode hands work to workers).
        Subagents => "subagents",
        /// list_agents, and spawn_agent's `agent`: saved agents as sub-agents (opt-in).
        SavedAgents => "saved_agents",
        /// The trigger tools: none in chatd yet, so the group serves nothing.
        Triggers => "triggers",
    }
}

tandem_shared::words! {
    /// What is done with a call to a tool, over the permission mode.
    pub enum ToolPolicy("tool policy") {
        /// Runs without a card in every mode (a deny rule still refuses).
        Always => "always",
        /// A card in every mode, yolo too; refused in a run nobody watches.
        Ask => "ask",
        /// Not offered, and a call refused.
        Never => "never",
    }
}

tandem_shared::words! {
    /// Where a skill comes from, nearest first: the nearest wins a name.
    pub enum SkillLayer("skill layer") {
        /// `.skills/<name>/SKILL.md` in the chat's workspace.
        Workspace => "workspace",
        /// `~/.tandemllm/skills/<name>/SKILL.md`, the owner's.
        Owner => "owner",
        /// Compiled into chatd.
        Builtin => "builtin",
    }
}

tandem_shared::words! {
    /// The network a saved agent's chats start with (egressd's presets),
    /// capped by the box's ceiling.
    pub enum NetPreset("network preset") {
        Off => "off",
        Registries => "registries",
        All => "all",
    }
}

tandem_shared::words! {
    /// What a saved agent's chats may do in its folder.
    pub enum FolderMode("folder mode") {
        Read => "read",
        Write => "write",
    }
}

tandem_shared::words! {
    /// Whether a saved agent's folder can be worked in now: `missing` when
    /// the path is gone or no folder, `unset` when none is chosen (an import
    /// that did not find it here).
    pub enum FolderState("folder state") {
        Ok => "ok",
        Missing => "missing",
        Unset => "unset",
    }
}

tandem_shared::words! {
    /// Where a sub-agent stands.
    pub enum SubagentState("sub-agent state") {
        Running => "running",
        Done => "done",
        Failed => "failed",
        Stopped => "stopped",
    }
}

tandem_shared::words! {
    /// What a chat is doing, as devices show it.
    pub enum ChatState("chat state") {
        Idle => "idle",
        Running => "running",
        Queued => "queued",
        Waiting => "waiting",
    }
}

tandem_shared::words! {
    /// Whether a message sent while a run went on has reached the model.
    pub enum PendingState("pending state") {
        Waiting => "waiting",
        Delivered => "delivered",
    }
}

tandem_shared::words! {
    /// Who made a chat or asked for a run.
    pub enum Origin("origin") {
        User => "user",
        Trigger => "trigger",
        Connector => "connector",
        /// A chat made from an exported transcript (chatd's own).
        Import => "import",
        /// A chat forked from another (chatd's own).
        Fork => "fork",
    }
}

impl Origin {
    /// The origins a request may name (import and fork are chatd's own).
    pub const REQUESTED: &'static [Origin] = &[Origin::User, Origin::Trigger, Origin::Connector];

    /// The origin a request names: `user` when it names none; another
    /// text, or one of chatd's own, is bad input naming the field.
    pub fn requested(text: Option<&str>) -> Result<Origin, tandem_shared::http::ApiError> {
        match text {
            None => Ok(Origin::User),
            Some(text) => Origin::parse(text)
                .filter(|origin| Origin::REQUESTED.contains(origin))
                .ok_or_else(|| {
                    tandem_shared::http::ApiError::bad_input(
                        "origin",
                        "must be user, trigger or connector",
                    )
                }),
        }
    }
}

tandem_shared::words! {
    /// A person's answer on a consent card: the buttons every card offers.
    pub enum Choice("card choice") {
        /// Run the call this once.
        Once => "once",
        /// Run it, and from now on the like without asking (a saved rule).
        Always => "always",
        /// Do not run it.
        Deny => "deny",
    }
}

tandem_shared::words! {
    /// How chatd reaches a connector's server.
    pub enum Transport("MCP transport") {
        /// A remote server over Streamable HTTP.
        Http => "http",
        /// A local command speaking MCP on its stdin and stdout.
        Stdio => "stdio",
    }
}

tandem_shared::words! {
    /// What the list says of a connector: its last test, or `off`.
    pub enum ConnectorState("MCP connector state") {
        /// The last test connected and listed the tools.
        Connected => "connected",
        /// The last test's sign-in was refused (401 or 403).
        NeedsSignIn => "needs_sign_in",
        /// The last test failed; `reason` says why.
        CantConnect => "cant_connect",
        /// On, and not tested since it last changed.
        Untested => "untested",
        /// Switched off: no chat or agent uses it.
        Off => "off",
    }
}

tandem_shared::words! {
    /// Who may call an MCP tool that has a page (an MCP App's
    /// `_meta.ui.visibility`).
    pub enum AppAudience("MCP App visibility") {
        /// The model, as any tool.
        Model => "model",
        /// The tool's page, from the browser.
        App => "app",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_shared::words::check_reads_back;

    #[test]
    fn every_mcp_word_reads_back_as_itself() {
        check_reads_back::<Transport>();
        check_reads_back::<ConnectorState>();
        check_reads_back::<AppAudience>();
    }

    #[test]
    fn every_role_reads_back_as_itself() {
        check_reads_back::<Role>();
    }

    #[test]
    fn every_message_status_reads_back_as_itself() {
        check_reads_back::<MessageStatus>();
    }

    #[test]
    fn every_run_status_reads_back_as_itself() {
        check_reads_back::<RunStatus>();
        let active: Vec<_> = RunStatus::ALL.iter().filter(|s| s.is_active()).collect();
        assert_eq!(
            active,
            [&RunStatus::Queued, &RunStatus::Running, &RunStatus::Waiting]
        );
    }

    #[test]
    fn every_run_mode_reads_back_as_itself() {
        check_reads_back::<RunMode>();
    }

    #[test]
    fn every_chat_kind_and_sub_agent_state_reads_back_as_itself() {
        check_reads_back::<ChatKind>();
        check_reads_back::<SubagentState>();
        check_reads_back::<GoalState>();
        check_reads_back::<PausedBy>();
        check_reads_back::<GoalEvent>();
        check_reads_back::<LoopState>();
        check_reads_back::<ToolGroup>();
        check_reads_back::<ToolPolicy>();
        check_reads_back::<SkillLayer>();
    }

    #[test]
    fn every_chat_state_reads_back_as_itself() {
        check_reads_back::<ChatState>();
    }

    #[test]
    fn every_pending_state_reads_back_as_itself() {
        check_reads_back::<PendingState>();
    }

    #[test]
    fn every_card_choice_reads_back_as_itself() {
        check_reads_back::<Choice>();
        assert_eq!(
            serde_json::to_string(Choice::ALL).unwrap(),
            r#"["once","always","deny"]"#,
            "the choices a card shows, in their order"
        );
    }

    #[test]
    fn every_origin_reads_back_as_itself() {
        check_reads_back::<Origin>();
        assert_eq!(Origin::requested(None).unwrap(), Origin::User);
        assert_eq!(Origin::requested(Some("trigger")).unwrap(), Origin::Trigger);
        for refused in ["fork", "import", "api", ""] {
            assert!(Origin::requested(Some(refused)).is_err(), "{refused}");
        }
    }
}

tandem_shared::words! {
    /// What a change set did to one path.
    pub enum FileOp("file op") {
        Created => "created",
        Changed => "changed",
        Deleted => "deleted",
        /// From `from_path` to `path`, the bytes the same.
        Moved => "moved",
    }
}

tandem_shared::words! {
    /// Who made a change set.
    pub enum FileOrigin("file origin") {
        /// The person: an upload, an undo, a delete or restore by the API.
        User => "user",
        /// A file tool of the model (write_file, edit_file, move_file, delete_file).
        Tool => "tool",
        /// A `bash` call, in the sandbox or on the host, found by a scan.
        Command => "command",
        /// Found by a scan and made by nobody tandem knows: a person's editor,
        /// another program, or files there before the history began.
        Outside => "outside",
    }
}

tandem_shared::words! {
    /// What the search index holds of a version of a file.
    pub enum IndexState("index state") {
        /// Its text, in parts: found by what it says and by its name.
        Text => "text",
        /// Its name only (binary, too big, or unreadable: the note says).
        Names => "names",
    }
}
