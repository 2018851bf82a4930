//! A call's files kept: before a call that may change files, what changed
//! since the last scan is kept as someone else's (`outside`); after it, what
//! changed is the call's change set, and its card rides on the tool line.

use super::Runs;
use crate::history::{file_kind, Held, Kept, Place, Scope};
use crate::model::Run;
use crate::store::files::Author;
use crate::words::FileOrigin;
use crate::workspace::Workspace;

/// What a call may change: the paths a file tool names, or (`bash`) the
/// whole workspace; `None` for a call that changes no file.
pub(super) fn scope_of(name: &str, arguments: &str, root: &std::path::Path) -> Option<Scope> {
    let names: &[&str] = match name {
        "bash" => return Some(Scope::All),
        "write_file" | "edit_file" | "delete_file" => &["path"],
        "move_file" => &["from", "to"],
        _ => return None,
    };
    let args: serde_json::Value = serde_json::from_str(arguments).ok()?;
    let workspace = Workspace::existing(root)
        .or_else(|_| Workspace::open(root))
        .ok()?;
    let paths: Vec<String> = names
        .iter()
        .filter_map(|n| args[*n].as_str())
        .filter_map(|p| workspace.resolve(p).ok())
        .filter(|rel| !rel.is_root())
        .map(|rel| rel.to_string())
        .collect();
    (!paths.is_empty()).then_some(Scope::Paths(paths))
}

/// The most files the model is told of at a turn's start.
pub(super) const TOLD_FILES: usize = 50;

/// The lines about the chat's files a turn's question carries to the model:
/// the newest first, one each; empty when the chat has none.
pub(super) fn told_line(recent: &[crate::store::files::Recent], total: usize) -> String {
    if recent.is_empty() {
        return String::new();
    }
    let count = if total > recent.len() {
        format!("{} of {total}; list_files shows the rest", recent.len())
    } else {
        format!("{total} in all")
    };
    let mut line = format!("[The files of this chat, newest change first ({count}):");
    for file in recent {
        let by = match file.origin {
            FileOrigin::User => "the person",
            FileOrigin::Tool => "a file tool",
            FileOrigin::Command => "a command",
            FileOrigin::Outside => "someone outside tandem",
        };
        line.push_str(&format!(
            "\n- {} ({} bytes, last changed by {by}{})",
            file.path,
            crate::tools::fit::commas(file.size),
            if file_kind(&file.path) == "working" {
                "; a working file"
            } else {
                ""
            }
        ));
    }
    line.push(']');
    line
}

/// What a call may change and, for a file tool, the lock it holds.
#[derive(Clone, Copy)]
pub(super) struct CallFiles<'a> {
    pub scope: &'a Scope,
    pub held: Option<&'a Held>,
}

impl Runs {
    /// A call's scan: under the lock it holds, or taking it.
    async fn sync_call(
        &self,
        run: &Run,
        files: CallFiles<'_>,
        author: &Author,
    ) -> Result<Option<Kept>, tandem_shared::http::ApiError> {
        let place = self.place(&run.conversation_id);
        let history = &self.inner.history;
        let scope = files.scope.clone();
        match files.held {
            Some(held) => history.sync_under(held, &place, scope, author).await,
            None => history.sync(&place, scope, author).await,
        }
    }

    /// [`told_line`] of the chat's files as its history last saw them.
    pub(super) async fn files_told(&self, conversation_id: &str) -> String {
        let place = self.place(conversation_id);
        let cid = self.inner.folders.home(conversation_id);
        let recent = self
            .inner
            .store
            .read(move |conn| crate::store::files::recent(conn, &cid, &place.key, TOLD_FILES))
            .await;
        match recent {
            Ok((recent, total)) => told_line(&recent, total),
            // A turn goes on without the list rather than fail for it.
            Err(_) => String::new(),
        }
    }

    /// The nudge about `work/` for this set, unless the run had it already.
    pub(super) async fn nudge_once(&self, run: &Run, kept: &Kept) -> Option<String> {
        let line = crate::history::nudge(kept)?;
        let rid = run.id.clone();
        let told = self
            .inner
            .store
            .read(move |conn| {
                crate::store::files::run_was_nudged(conn, &rid, crate::history::NUDGE)
            })
            .await
            .unwrap_or(true);
        (!told).then_some(line)
    }

    /// `search_files`: the chat's manifest brought up to date (what changed
    /// is kept as someone else's, as before any call that looks at files),
    /// then the index asked.
    pub(super) async fn search_files(
        &self,
        run: &Run,
        arguments: &str,
        call_id: &str,
        budget: usize,
    ) -> crate::tools::ToolOutput {
        let scope = Scope::All;
        self.files_before(
            run,
            CallFiles {
                scope: &scope,
                held: None,
            },
        )
        .await;
        let place = self.place(&run.conversation_id);
        crate::index::tool::run(
            &self.inner.index,
            &place.root,
            &place.key,
            arguments,
            call_id,
            budget,
        )
        .await
    }

    fn place(&self, conversation_id: &str) -> Place {
        Place::of(&self.inner.folders, conversation_id)
    }

    /// Keeps what changed in `scope` since the last scan as an `outside` set,
    /// so the call's own set holds only the call's changes.
    /// The lock a file tool's call holds from its scan before to its scan
    /// after (`None` for `bash`: a command may run for minutes, and what it
    /// changed is found by the whole-workspace scan after it).
    pub(super) async fn hold_files(&self, run: &Run, scope: &Scope) -> Option<Held> {
        match scope {
            Scope::Paths(_) => Some(
                self.inner
                    .history
                    .hold(&self.place(&run.conversation_id))
                    .await,
            ),
            Scope::All => None,
        }
    }

    pub(super) async fn files_before(&self, run: &Run, files: CallFiles<'_>) {
        let author = Author {
            conversation_id: self.inner.folders.home(&run.conversation_id),
            run_id: None,
            call_id: None,
            origin: FileOrigin::Outside,
            undoes: Vec::new(),
        };
        if let Err(e) = self.sync_call(run, files, &author).await {
            tracing::warn!(run = %run.id, status = e.status.as_u16(), "file history: the scan before a call failed");
        }
    }

    /// Keeps the call's change set; `None` when it changed nothing (or the
    /// scan failed: the call's result stands without its card). A file tool
    /// that failed changed nothing (its writes are all or nothing): what the
    /// scan finds then is someone else's, kept as `outside`.
    pub(super) async fn files_after(
        &self,
        run: &Run,
        call_id: &str,
        name: &str,
        ok: bool,
        files: CallFiles<'_>,
    ) -> Option<Kept> {
        if !ok && name != "bash" {
            self.files_before(run, files).await;
            return None;
        }
        let author = Author {
            conversation_id: self.inner.folders.home(&run.conversation_id),
            run_id: Some(run.id.clone()),
            call_id: Some(call_id.to_string()),
            origin: if name == "bash" {
                FileOrigin::Command
            } else {
                FileOrigin::Tool
            },
            undoes: Vec::new(),
        };
        match self.sync_call(run, files, &author).await {
            Ok(kept) => kept,
            Err(e) => {
                tracing::warn!(run = %run.id, call = %call_id, status = e.status.as_u16(),
                    "file history: the scan after a call failed");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::files::Recent;

    #[test]
    fn the_told_line_names_each_file_and_what_was_left_out() {
        assert_eq!(told_line(&[], 0), "");
        let recent = vec![
            Recent {
                path: "report.md".into(),
                size: 4200,
                origin: FileOrigin::Command,
            },
            Recent {
                path: "work/fetch.py".into(),
                size: 300,
                origin: FileOrigin::Tool,
            },
        ];
        assert_eq!(
            told_line(&recent, 2),
            "[The files of this chat, newest change first (2 in all):\n\
             - report.md (4,200 bytes, last changed by a command)\n\
             - work/fetch.py (300 bytes, last changed by a file tool; a working file)]"
        );
        assert!(told_line(&recent, 75).contains("(2 of 75; list_files shows the rest)"));
    }
}
