//! The kinds of event chatd writes to a chat's log. One type: an event is
//! written only with a kind named here, and a stored kind is read back as
//! the same kind (a device tailing from the database sees what a live one
//! saw).

tandem_shared::words! {
    /// One kind of event of a chat's log.
    pub enum EventKind("event kind") {
        ConversationUpdated => "conversation.updated",
        MessageCreated => "message.created",
        MessageUpdated => "message.updated",
        RunQueued => "run.queued",
        RunStarted => "run.started",
        TextDelta => "text.delta",
        ReasoningDelta => "reasoning.delta",
        ToolStarted => "tool.started",
        ToolFinished => "tool.finished",
        ToolConsent => "tool.consent",
        ToolConsentAnswered => "tool.consent_answered",
        ToolAutoApproved => "tool.auto_approved",
        Usage => "usage",
        RunRetrying => "run.retrying",
        RunFinished => "run.finished",
        Paused => "paused",
        PendingAdded => "pending.added",
        PendingUpdated => "pending.updated",
        PendingRemoved => "pending.removed",
        PendingDelivered => "pending.delivered",
        /// A sub-agent started (on its parent's stream).
        SubAgentStarted => "sub_agent_started",
        /// A sub-agent ended; its result is in the parent already.
        SubAgentDone => "sub_agent_done",
        /// Agents mode: a worker started on a task (on its parent's stream).
        TaskStarted => "task_started",
        /// A worker's task ended; its report is in the parent already.
        TaskDone => "task_done",
        Compacted => "compacted",
        Cleared => "cleared",
        /// The chat's goal changed (`goal`: the whole goal, null once cleared).
        Goal => "goal",
        /// The chat's loops changed (`loops`: the whole list).
        Loops => "loops",
        EgressUpdated => "egress.updated",
        /// A chat's files changed: a change set was kept.
        Files => "files",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_reads_back_as_itself() {
        tandem_shared::words::check_reads_back::<EventKind>();
        for kind in EventKind::ALL {
            assert_eq!(EventKind::parse(kind.as_str()), Some(*kind), "{kind}");
            let json = serde_json::to_string(kind).expect("a kind serializes");
            assert_eq!(json, format!("\"{}\"", kind.as_str()));
        }
        assert_eq!(
            EventKind::parse("tool.consent_answered"),
            Some(EventKind::ToolConsentAnswered)
        );
        assert_eq!(EventKind::parse("no.such"), None);
    }
}
