//! Where a trigger's run stands, as triggerd stores and shows it: one type,
//! so only these words are written and a stored one is read into it where
//! the run's row is read.

use tandem_shared::words::ChatRunStatus;

tandem_shared::words! {
    /// Where a trigger's run stands.
    pub enum RunStatus("trigger run status") {
        Queued => "queued",
        Running => "running",
        Done => "done",
        Failed => "failed",
        /// Cut short by triggerd's end; recorded at its next start.
        Interrupted => "interrupted",
        Stopped => "stopped",
        /// Its chat run reached the step limit.
        Paused => "paused",
        /// Not started (the daily cap, a run still working); no inbox entry.
        Skipped => "skipped",
    }
}

impl RunStatus {
    /// The status a chat run's end gives the trigger's run. chatd ends a
    /// run done, failed, stopped, interrupted or paused; an active word, any
    /// other word (a newer chatd) or a missing one counts as failed.
    pub fn of_chat_end(text: &str) -> RunStatus {
        match ChatRunStatus::parse(text) {
            Some(ChatRunStatus::Done) => RunStatus::Done,
            Some(ChatRunStatus::Stopped) => RunStatus::Stopped,
            Some(ChatRunStatus::Interrupted) => RunStatus::Interrupted,
            Some(ChatRunStatus::Paused) => RunStatus::Paused,
            Some(
                ChatRunStatus::Failed
                | ChatRunStatus::Queued
                | ChatRunStatus::Running
                | ChatRunStatus::Waiting,
            )
            | None => RunStatus::Failed,
        }
    }

    /// Whether the run has ended (the store's `FINISHED`).
    pub fn is_finished(self) -> bool {
        !matches!(self, RunStatus::Queued | RunStatus::Running)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_run_status_reads_back_as_itself() {
        tandem_shared::words::check_reads_back::<RunStatus>();
    }

    #[test]
    fn the_stores_finished_clause_names_the_unfinished_statuses() {
        let unfinished: Vec<String> = RunStatus::ALL
            .iter()
            .filter(|s| !s.is_finished())
            .map(|s| format!("'{s}'"))
            .collect();
        let clause = format!("status NOT IN ({})", unfinished.join(", "));
        assert_eq!(crate::store::FINISHED, clause);
    }

    #[test]
    fn a_chat_runs_end_is_its_status_or_failed() {
        assert_eq!(RunStatus::of_chat_end("paused"), RunStatus::Paused);
        assert_eq!(RunStatus::of_chat_end("done"), RunStatus::Done);
        assert_eq!(RunStatus::of_chat_end("running"), RunStatus::Failed);
        assert_eq!(RunStatus::of_chat_end("whatever"), RunStatus::Failed);
    }
}
