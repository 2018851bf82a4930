//! File triggers: a changed folder scanned again, and which versions of its
//! files are due (the quiet period, one run per version, the gap after a
//! run); a run's own writes taken out of the versions so they start nothing.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use super::new_run;
use crate::folders::Scan;
use crate::store::{self, FileState, Kind, Trigger};
use crate::Triggerd;

/// What one look at a file trigger's folder decided.
#[derive(Debug, Default, PartialEq)]
pub struct FileDecision {
    /// Rows to write.
    pub changed: Vec<FileState>,
    /// Paths gone from the folder.
    pub removed: Vec<String>,
    /// Files due now: (path, version).
    pub due: Vec<(String, String)>,
    /// A file still waits for its quiet period or its gap.
    pub pending: bool,
}

/// The rules for a trigger's files. `scanned` is the folder as it is now
/// (`None`: not scanned this time, decide on what is stored); `running`: a
/// run of the trigger is under way (what changes meanwhile waits for its
/// end, when the run's own writes are taken out).
pub fn decide_files(
    stored: &[FileState],
    scanned: Option<&Scan>,
    now: i64,
    quiet_ms: i64,
    gap_ms: i64,
    running: bool,
) -> FileDecision {
    let mut decision = FileDecision::default();
    let mut current: HashMap<String, FileState> =
        stored.iter().map(|f| (f.path.clone(), f.clone())).collect();
    let mut touched: HashSet<String> = HashSet::new();
    if let Some(scan) = scanned {
        let on_disk: HashSet<&str> = scan.files.iter().map(|(p, _)| p.as_str()).collect();
        for (path, version) in &scan.files {
            match current.get_mut(path) {
                Some(f) if &f.version == version => {}
                Some(f) => {
                    f.version = version.clone();
                    f.seen_ms = now;
                    touched.insert(path.clone());
                }
                None => {
                    current.insert(
                        path.clone(),
                        FileState {
                            path: path.clone(),
                            version: version.clone(),
                            seen_ms: now,
                            ran_version: None,
                            ran_ms: None,
                        },
                    );
                    touched.insert(path.clone());
                }
            }
        }
        // A scan cut short says nothing of the files it did not reach.
        if scan.complete {
            decision.removed = current
                .keys()
                .filter(|p| !on_disk.contains(p.as_str()))
                .cloned()
                .collect();
            decision.removed.sort();
            for gone in &decision.removed {
                current.remove(gone);
            }
        }
    }
    let mut paths: Vec<&String> = current.keys().collect();
    paths.sort();
    let mut due_paths = Vec::new();
    for path in paths {
        let f = &current[path];
        if f.ran_version.as_deref() == Some(f.version.as_str()) {
            continue;
        }
        if running || now - f.seen_ms < quiet_ms || f.ran_ms.is_some_and(|r| now - r < gap_ms) {
            decision.pending = true;
            continue;
        }
        due_paths.push(path.clone());
    }
    for path in due_paths {
        if let Some(f) = current.get_mut(&path) {
            f.ran_version = Some(f.version.clone());
            f.ran_ms = Some(now);
            decision.due.push((path.clone(), f.version.clone()));
            touched.insert(path);
        }
    }
    let mut touched: Vec<String> = touched.into_iter().collect();
    touched.sort();
    decision.changed = touched
        .into_iter()
        .filter_map(|p| current.get(&p).cloned())
        .collect();
    decision
}

/// What a run wrote, as its chat's tool calls say: the workspace paths of
/// its file tools, and whether it ran commands (whose writes no call names).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnWrites {
    pub paths: HashSet<String>,
    pub ran_commands: bool,
}

/// A workspace path as the file tools take it, in one spelling.
fn normal_path(path: &str) -> String {
    path.split('/')
        .filter(|part| !part.is_empty() && *part != ".")
        .collect::<Vec<_>>()
        .join("/")
}

/// The writes of `chat_run` in a chat's snapshot.
pub fn own_writes(snapshot: &serde_json::Value, chat_run: &str) -> OwnWrites {
    let mut own = OwnWrites::default();
    let Some(messages) = snapshot["messages"].as_array() else {
        return own;
    };
    for message in messages {
        if message["role"] != "assistant" || message["run_id"] != chat_run {
            continue;
        }
        let Some(calls) = message["tool_calls"].as_array() else {
            continue;
        };
        for call in calls {
            let name = call["function"]["name"].as_str().unwrap_or_default();
            let arguments: serde_json::Value = match &call["function"]["arguments"] {
                serde_json::Value::String(text) => {
                    serde_json::from_str(text).unwrap_or(serde_json::Value::Null)
                }
                other => other.clone(),
            };
            match name {
                "write_file" | "edit_file" => {
                    if let Some(path) = arguments["path"].as_str() {
                        own.paths.insert(normal_path(path));
                    }
                }
                "bash" => own.ran_commands = true,
                _ => {}
            }
        }
    }
    own
}

/// After a run: the files it wrote (named by its file tools, or, when it
/// ran commands, everything that changed since it started) start nothing;
/// every other change follows the usual rules, and a later change of the
/// run's own file waits for its gap. `folder` is the trigger's folder in
/// the workspace ("" for its root).
pub fn absorb_writes(
    stored: &[FileState],
    scan: &Scan,
    folder: &str,
    own: &OwnWrites,
    started_ms: i64,
    now: i64,
) -> FileDecision {
    let mut decision = FileDecision::default();
    let stored: HashMap<&str, &FileState> = stored.iter().map(|f| (f.path.as_str(), f)).collect();
    for (path, version) in &scan.files {
        let in_workspace = if folder.is_empty() {
            path.clone()
        } else {
            format!("{folder}/{path}")
        };
        let known = stored.get(path.as_str()).copied();
        let changed_since_start = match known {
            Some(f) => &f.version != version || f.seen_ms >= started_ms,
            None => true,
        };
        let named = own.paths.contains(&in_workspace);
        if !(named || (own.ran_commands && changed_since_start)) {
            continue;
        }
        if known.is_some_and(|f| f.ran_version.as_deref() == Some(version.as_str())) {
            continue;
        }
        decision.changed.push(match known {
            Some(f) => FileState {
                version: version.clone(),
                seen_ms: if &f.version == version {
                    f.seen_ms
                } else {
                    now
                },
                ran_version: Some(version.clone()),
                ..f.clone()
            },
            None => FileState {
                path: path.clone(),
                version: version.clone(),
                seen_ms: now,
                ran_version: Some(version.clone()),
                ran_ms: None,
            },
        });
    }
    decision
}

/// The due key of a file version: one run per trigger, file and version.
pub fn file_key(trigger: &str, path: &str, version: &str) -> String {
    format!("{trigger}:file:{path}:{version}")
}

pub(super) async fn folders(td: &Arc<Triggerd>, now: i64) -> anyhow::Result<()> {
    let dirty: HashSet<String> = std::mem::take(&mut *tandem_shared::sync::lock(&td.dirty));
    let looks: Vec<(Trigger, PathBuf, bool, bool)> = {
        let mut live = tandem_shared::sync::lock(&td.live);
        let running: HashSet<String> = live.running.keys().cloned().collect();
        live.entries
            .values_mut()
            .filter(|e| e.trigger.enabled && e.trigger.kind == Kind::File)
            .filter(|e| e.pending || dirty.contains(&e.trigger.id))
            .map(|e| {
                e.pending = false;
                (
                    e.trigger.clone(),
                    e.folder.clone(),
                    dirty.contains(&e.trigger.id),
                    running.contains(&e.trigger.id),
                )
            })
            .collect()
    };
    for (trigger, folder, _dirty, running) in looks {
        // Every look is a fresh scan: a quiet period never ends on what an
        // older scan saw. The folder is checked again first: one swapped for
        // a link out of the workspace is never followed.
        let (workspace, relative) = (td.workspace.clone(), trigger.folder.clone());
        let looked = tokio::task::spawn_blocking(move || {
            crate::folders::resolve(&workspace, &relative).map_err(Unusable::Folder)?;
            crate::folders::scan(&folder).map_err(Unusable::Io)
        })
        .await?;
        let named = if trigger.folder.is_empty() {
            "(the workspace itself)".to_string()
        } else {
            trigger.folder.clone()
        };
        let scanned = match looked {
            Ok(scan) => scan,
            Err(unusable) => {
                match unusable.reason(&named) {
                    Some(reason) => crate::switch_off(td, &trigger.id, &reason).await?,
                    None => {
                        tracing::warn!(trigger = %trigger.id, "scanning a folder failed; trying again");
                        tandem_shared::sync::lock(&td.dirty).insert(trigger.id.clone());
                    }
                }
                continue;
            }
        };
        if !scanned.complete {
            tracing::warn!(trigger = %trigger.id, files = crate::folders::MAX_FILES,
                "a folder holds more files than a scan reads; the rest wait");
        }
        let scanned = Some(scanned);
        let id = trigger.id.clone();
        let decision = td
            .store
            .call(move |conn| {
                let stored = store::files_of(conn, &trigger.id)?;
                let decision = decide_files(
                    &stored,
                    scanned.as_ref(),
                    now,
                    trigger.quiet_seconds as i64 * 1000,
                    trigger.min_gap_seconds as i64 * 1000,
                    running,
                );
                let tx = conn.transaction()?;
                for (path, version) in &decision.due {
                    let key = file_key(&trigger.id, path, version);
                    let run = new_run(
                        &trigger.id,
                        &trigger.name,
                        key,
                        "file",
                        now,
                        Some(path.clone()),
                        now,
                    );
                    store::queue_run(&tx, &run)?;
                }
                store::put_files(&tx, &trigger.id, &decision.changed, &decision.removed)?;
                tx.commit()?;
                Ok(decision)
            })
            .await?;
        if decision.pending {
            if let Some(e) = tandem_shared::sync::lock(&td.live).entries.get_mut(&id) {
                e.pending = true;
            }
        }
    }
    Ok(())
}

/// Why a trigger's folder could not be looked at.
enum Unusable {
    Folder(String),
    Io(std::io::Error),
}

impl Unusable {
    /// The reason to switch the trigger off, or `None`: try again.
    fn reason(&self, folder: &str) -> Option<String> {
        use std::io::ErrorKind;
        match self {
            Unusable::Folder(why) if why.contains("does not exist") => {
                Some(format!("its folder {folder} is gone from the workspace"))
            }
            Unusable::Folder(why) => Some(format!("its folder {folder} cannot be used: {why}")),
            Unusable::Io(e) if e.kind() == ErrorKind::NotFound => {
                Some(format!("its folder {folder} is gone from the workspace"))
            }
            Unusable::Io(e) if e.kind() == ErrorKind::PermissionDenied => Some(format!(
                "its folder {folder} cannot be read (permission denied)"
            )),
            Unusable::Io(e) if e.kind() == ErrorKind::NotADirectory => {
                Some(format!("its folder {folder} is no longer a folder"))
            }
            Unusable::Io(_) => None,
        }
    }
}
