//! Undo: a change set's (or a whole turn's) files put back as they were
//! before it, kept as a new change set. A file changed since is never
//! overwritten: the undo refuses and names it, or with `skip_conflicts`
//! leaves it and puts back the rest.

use std::collections::BTreeMap;
use std::io::Read;

use serde::Serialize;
use serde_json::json;
use sha2::{Digest, Sha256};

use axum::http::StatusCode;
use tandem_shared::http::ApiError;

use super::{FileHistory, Kept, Place, Scope};
use crate::store::files::{self as stored, Author, SetRow};
use crate::words::{FileOp, FileOrigin};
use crate::workspace::Workspace;

/// What an undo puts back.
#[derive(Debug, Clone)]
pub enum UndoTarget {
    /// One change set.
    Rev(i64),
    /// Every change set of a run (a turn), newest first.
    Run(String),
}

/// A path an undo left as it is, and why.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Conflict {
    pub path: String,
    pub reason: &'static str,
}

/// An undo's outcome.
#[derive(Debug)]
pub struct Undone {
    /// The new change set (`None`: every file already was as before).
    pub kept: Option<Kept>,
    /// The sets put back.
    pub undone: Vec<i64>,
    /// Paths left alone (`skip_conflicts`).
    pub skipped: Vec<Conflict>,
}

/// One path's part in the undo: the bytes it must have now, and the bytes it gets.
#[derive(Debug, Clone)]
struct Step {
    expected: Option<String>,
    target: Option<String>,
}

/// Per path, from the sets newest first: the newest `after` is what must be
/// there now, the oldest `before` what goes back.
fn plan(sets: &[SetRow]) -> BTreeMap<String, Step> {
    let mut steps: BTreeMap<String, Step> = BTreeMap::new();
    let mut note = |path: &str, before: Option<String>, after: Option<String>| {
        steps
            .entry(path.to_string())
            .and_modify(|s| s.target = before.clone())
            .or_insert(Step {
                expected: after,
                target: before,
            });
    };
    for set in sets.iter().rev() {
        for c in &set.changes {
            if c.op == FileOp::Moved {
                if let Some(from) = &c.from {
                    note(from, c.after.clone(), None);
                }
            }
            note(&c.path, c.before.clone(), c.after.clone());
        }
    }
    steps
}

/// The sha-256 of the file at `path` now; `Err` for something that is not a regular file.
fn current(workspace: &Workspace, path: &str) -> Result<Option<String>, &'static str> {
    use tandem_shared::tree::Node;
    match workspace.lstat(path) {
        Ok(None) => return Ok(None),
        Ok(Some(e)) if e.node == Node::File => {}
        Ok(Some(e)) if e.node == Node::Dir => return Err("is a folder now"),
        _ => return Err("is no longer a regular file"),
    }
    let mut file = workspace
        .open_file(path)
        .map_err(|_| "cannot be read")?
        .file;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => hasher.update(&buf[..n]),
            Err(_) => return Err("cannot be read"),
        }
    }
    Ok(Some(super::blobs::finish(hasher)))
}

impl FileHistory {
    /// Puts `target`'s files back. Refuses with 409 `undo_conflict`,
    /// changing nothing, when a file changed since (unless `skip_conflicts`).
    pub async fn undo(
        &self,
        place: &Place,
        conversation_id: &str,
        target: UndoTarget,
        skip_conflicts: bool,
    ) -> Result<Undone, ApiError> {
        let _held = self.lock(&place.key).await;
        let cid = conversation_id.to_string();
        let sets = self
            .store
            .read(move |conn| match target {
                UndoTarget::Rev(rev) => Ok(vec![stored::set(conn, &cid, rev)?]),
                UndoTarget::Run(run) => stored::sets_of_run(conn, &cid, &run),
            })
            .await?;
        let steps = plan(&sets);
        let (root, blobs) = (place.root.clone(), self.blobs.clone());
        let checked = tokio::task::spawn_blocking(move || {
            let workspace = super::open_workspace(&root)?;
            let mut conflicts = Vec::new();
            let mut todo = Vec::new();
            for (path, step) in steps {
                let now = match current(&workspace, &path) {
                    Ok(now) => now,
                    Err(reason) => {
                        conflicts.push(Conflict { path, reason });
                        continue;
                    }
                };
                if now == step.target {
                    continue; // already as it was before
                }
                if now != step.expected {
                    let reason = match (&step.expected, &now) {
                        (None, Some(_)) => "was made again since",
                        (Some(_), None) => "was deleted since",
                        _ => "was changed since",
                    };
                    conflicts.push(Conflict { path, reason });
                    continue;
                }
                if let Some(sha) = &step.target {
                    if !blobs.has(sha) {
                        conflicts.push(Conflict {
                            path,
                            reason: "its earlier bytes are no longer kept",
                        });
                        continue;
                    }
                }
                todo.push((path, step.expected, step.target));
            }
            Ok::<_, ApiError>((workspace, conflicts, todo))
        })
        .await
        .map_err(|_| ApiError::internal("the undo stopped unexpectedly"))??;
        let (workspace, conflicts, todo) = checked;
        if !conflicts.is_empty() && !skip_conflicts {
            let named: Vec<String> = conflicts
                .iter()
                .map(|c| format!("`{}` {}", c.path, c.reason))
                .collect();
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "undo_conflict",
                format!(
                    "the undo would overwrite later work: {}; nothing was changed \
                     (skip_conflicts puts back the rest)",
                    named.join(", ")
                ),
            )
            .with("conflicts", json!(conflicts)));
        }
        // A set is undone when a path of it was put back (or already was):
        // one whose every path was skipped stays as it is.
        let skipped = |path: &str| conflicts.iter().any(|c| c.path == path);
        let undone: Vec<i64> = sets
            .iter()
            .filter(|set| {
                set.changes
                    .iter()
                    .any(|c| !skipped(&c.path) || c.from.as_deref().is_some_and(|f| !skipped(f)))
            })
            .map(|s| s.rev)
            .collect();
        let blobs = self.blobs.clone();
        // Each file is looked at again just before it is put back (a file
        // tool of a run may have written it since the check); the first
        // that changed or cannot be written stops the undo, and what was
        // put back until then is still kept as the undo's set below.
        let (paths, stopped) = tokio::task::spawn_blocking(move || {
            let mut done = Vec::new();
            for (path, expected, target) in todo {
                if current(&workspace, &path).ok() != Some(expected) {
                    let conflict = Conflict {
                        path: path.clone(),
                        reason: "was changed while the undo ran",
                    };
                    let error = ApiError::new(
                        StatusCode::CONFLICT,
                        "undo_conflict",
                        format!("`{path}` was changed while the undo ran; it is left as it is"),
                    )
                    .with("conflicts", json!([conflict]));
                    return (done, Some(error));
                }
                let written = match &target {
                    None => workspace.remove_file(&path).map(|_| ()),
                    Some(sha) => match blobs.open(sha) {
                        Ok(mut blob) => workspace.write_from(&path, &mut blob).map(|_| ()),
                        Err(_) => Err(crate::workspace::ToolError::new(format!(
                            "the earlier bytes of `{path}` could not be read"
                        ))),
                    },
                };
                if let Err(e) = written {
                    return (done, Some(ApiError::internal(format!("undo: {e}"))));
                }
                done.push(path);
            }
            (done, None)
        })
        .await
        .map_err(|_| ApiError::internal("the undo stopped unexpectedly"))?;
        let author = Author {
            conversation_id: conversation_id.to_string(),
            run_id: None,
            call_id: None,
            origin: FileOrigin::User,
            undoes: undone.clone(),
        };
        let kept = if paths.is_empty() {
            None
        } else {
            self.sync_held(place, Scope::Paths(paths), &author).await?
        };
        if let Some(error) = stopped {
            return Err(match &kept {
                Some(kept) => error.with("rev", kept.rev),
                None => error,
            });
        }
        Ok(Undone {
            kept,
            undone,
            skipped: conflicts,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::files::ChangeRow;

    fn set(rev: i64, changes: Vec<ChangeRow>) -> SetRow {
        SetRow {
            rev,
            run_id: None,
            call_id: None,
            origin: FileOrigin::Tool,
            undoes: Vec::new(),
            note: None,
            created: String::new(),
            workspace: String::new(),
            changes,
        }
    }

    fn change(
        path: &str,
        op: FileOp,
        from: Option<&str>,
        before: Option<&str>,
        after: Option<&str>,
    ) -> ChangeRow {
        ChangeRow {
            path: path.into(),
            op,
            from: from.map(Into::into),
            before: before.map(Into::into),
            after: after.map(Into::into),
            size: 0,
        }
    }

    #[test]
    fn a_turn_goes_back_to_what_was_before_its_first_set() {
        let sets = vec![
            set(
                1,
                vec![change("a", FileOp::Created, None, None, Some("s1"))],
            ),
            set(
                2,
                vec![change("a", FileOp::Changed, None, Some("s1"), Some("s2"))],
            ),
            set(
                3,
                vec![change("b", FileOp::Moved, Some("a"), None, Some("s2"))],
            ),
        ];
        let steps = plan(&sets);
        assert_eq!(steps["a"].expected, None);
        assert_eq!(steps["a"].target, None);
        assert_eq!(steps["b"].expected.as_deref(), Some("s2"));
        assert_eq!(steps["b"].target, None);
        let one = plan(&sets[2..]);
        assert_eq!(one["a"].target.as_deref(), Some("s2"));
        assert_eq!(one["a"].expected, None);
    }
}
