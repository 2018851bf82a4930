//! One folder for a saved agent: the agent's chats (its triggers' and bots'
//! too) reach that folder, read only or read and write, and their own chat
//! folder, and nothing else of the box's files. What a folder is, whether it
//! is there now, which folders may never be one, and what a chat made with
//! such an agent reaches (`Reach`, which `Folders` answers per chat).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};
use tandem_shared::http::ApiError;

use crate::words::{FolderMode, FolderState};

/// The 409's type for a chat that can never go on with its agent (deleted
/// while it kept to a folder, or made in the shared folder before it got one).
pub const CLOSED: &str = "agent_gone";

/// The name the agent's folder has inside its chats' workspace: the file
/// tools see it at `folder/`, a sandbox at `/workspace/folder`.
pub const MOUNT: &str = "folder";

/// The most bytes a folder's path may have.
pub const MAX_PATH: usize = 1024;

/// What a chat of a folder-limited agent is told when the folder is not
/// there; the 409's type.
pub const MISSING: &str = "agent_folder_missing";

/// A saved agent's folder: an absolute path (links resolved when it was
/// chosen), empty when none is chosen yet, and the mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentFolder {
    pub path: String,
    pub mode: FolderMode,
}

impl AgentFolder {
    /// Read from the agent's columns; `None` for an agent without a folder.
    pub fn from_columns(path: Option<String>, mode: Option<FolderMode>) -> Option<AgentFolder> {
        Some(AgentFolder {
            path: path.unwrap_or_default(),
            mode: mode?,
        })
    }

    /// Whether the folder can be worked in now (looked at, never cached):
    /// there, a folder, and still at its path with no link on the way (the
    /// path was stored with links resolved, so a link since is a folder
    /// swapped for another place).
    pub fn state(&self) -> FolderState {
        if self.path.is_empty() {
            FolderState::Unset
        } else if std::fs::canonicalize(&self.path)
            .is_ok_and(|real| real == Path::new(&self.path) && real.is_dir())
        {
            FolderState::Ok
        } else {
            FolderState::Missing
        }
    }

    /// Its last name, as lists show it.
    pub fn name(&self) -> String {
        Path::new(&self.path)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// The sentence a chat of this agent is refused with when its folder
    /// cannot be worked in, or `None` when it can.
    pub fn refusal(&self, agent_name: &str) -> Option<String> {
        match self.state() {
            FolderState::Ok => None,
            FolderState::Missing => Some(format!(
                "the folder agent {agent_name:?} keeps to ({}) is missing: restore it, or choose \
                 another in the agent's settings, then send again",
                self.path
            )),
            FolderState::Unset => Some(format!(
                "agent {agent_name:?} keeps to one folder and none is chosen here yet: choose one \
                 in the agent's settings, then send again"
            )),
        }
    }
}

impl Serialize for AgentFolder {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut out = s.serialize_struct("AgentFolder", 4)?;
        out.serialize_field("path", &self.path)?;
        out.serialize_field("name", &self.name())?;
        out.serialize_field("mode", &self.mode)?;
        out.serialize_field("state", &self.state())?;
        out.end()
    }
}

/// The folders no agent may be given, nor one holding them: chatd's data
/// (every chat, the database, the forward key) and the secrets' folder.
pub struct Forbidden {
    places: Vec<PathBuf>,
}

impl Forbidden {
    pub fn of(config: &crate::config::ChatdConfig) -> Forbidden {
        let mut places = vec![config.data_dir.clone()];
        if let Some(folder) = config.secrets.parent() {
            places.push(folder.to_path_buf());
        }
        Forbidden {
            places: places
                .into_iter()
                .map(|p| std::fs::canonicalize(&p).unwrap_or(p))
                .collect(),
        }
    }

    /// Checks a folder a body names (`field`: where it came from) and answers
    /// it with links resolved: absolute (or `~/…`), a folder that exists, not
    /// one of the forbidden places, inside one, or holding one.
    pub fn check(&self, field: &str, raw: &str) -> Result<PathBuf, ApiError> {
        if raw.len() > MAX_PATH || raw.chars().any(char::is_control) {
            return Err(ApiError::bad_input(
                field,
                format!("must be a path of at most {MAX_PATH} bytes without control characters"),
            ));
        }
        let given = match raw.strip_prefix("~/") {
            Some(rest) => tandem_shared::secrets::home().join(rest),
            None if raw == "~" => tandem_shared::secrets::home(),
            None => PathBuf::from(raw),
        };
        if !given.is_absolute() {
            return Err(ApiError::bad_input(
                field,
                "must be an absolute path (or start with ~/), like /home/me/notes",
            ));
        }
        let real = match std::fs::canonicalize(&given) {
            Ok(real) if real.is_dir() => real,
            Ok(_) => {
                return Err(ApiError::bad_input(
                    field,
                    format!("{raw:?} is not a folder"),
                ))
            }
            Err(e) => {
                return Err(ApiError::bad_input(
                    field,
                    format!("{raw:?} cannot be opened: {}", e.kind()),
                ))
            }
        };
        for place in &self.places {
            if real.starts_with(place) || place.starts_with(&real) {
                return Err(ApiError::bad_input(
                    field,
                    format!(
                        "{raw:?} is or holds tandem's own data ({}): choose a folder of your files",
                        place.display()
                    ),
                ));
            }
        }
        Ok(real)
    }
}

/// What one chat reaches of the box's files beside its own folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    /// Its own folder only, as every chat without a folder agent.
    Own,
    /// Its own folder and its agent's at `folder/`.
    Folder(Mount),
    /// Nothing: its agent keeps to a folder that is not there (`kind`
    /// `agent_folder_missing`), or this chat can never go on with it
    /// (`agent_gone`: deleted while it kept to a folder; a shared chat
    /// whose agent now keeps to one); `why` says so.
    Refused { kind: &'static str, why: String },
}

impl Reach {
    /// The folder to add to the chat's, if it has one it may work in.
    pub fn mount(&self) -> Option<&Mount> {
        match self {
            Reach::Folder(mount) => Some(mount),
            _ => None,
        }
    }

    /// Whether the chat is kept to its folders (no host `bash`).
    pub fn confined(&self) -> bool {
        !matches!(self, Reach::Own)
    }

    /// The 409 a message or a new chat is refused with, if any.
    pub fn conflict(&self) -> Option<ApiError> {
        match self {
            Reach::Refused { kind, why } => Some(ApiError::conflict(kind, why.clone())),
            _ => None,
        }
    }
}

/// An agent's folder as a chat works in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub path: PathBuf,
    pub read_only: bool,
}

/// The sentence a chat of a deleted folder-limited agent is refused with.
pub const GONE: &str = "the agent this chat ran with was deleted, and it kept to one folder: \
                        this chat does not go on with any other files; start a new chat";

/// The saved agents' folders and the chats made with an agent.
#[derive(Default)]
pub struct AgentPlaces {
    /// Each chat made with an agent (a sub-agent's too): its agent's id.
    pub chat_agent: HashMap<String, String>,
    /// Each agent that keeps to a folder: its name and folder.
    pub folders: HashMap<String, (String, AgentFolder)>,
    /// Agents deleted while they kept to a folder.
    pub gone: HashSet<String>,
}

impl AgentPlaces {
    /// What is held of `agent`, copied out so the folder is looked at
    /// after the lock is let go.
    pub(crate) fn held(&self, agent: Option<&String>) -> Held {
        match agent {
            None => Held::Free,
            Some(agent) if self.gone.contains(agent) => Held::Gone,
            Some(agent) => match self.folders.get(agent) {
                None => Held::Free,
                Some((name, folder)) => Held::Kept(name.clone(), folder.clone()),
            },
        }
    }
}

/// One agent as `AgentPlaces` holds it: no agent or one without a folder,
/// one deleted while it kept to a folder, or one kept to a folder.
pub enum Held {
    Free,
    Gone,
    Kept(String, AgentFolder),
}

impl Held {
    /// What a chat of it reaches now (the folder looked at).
    pub fn reach(&self) -> Reach {
        match self {
            Held::Free => Reach::Own,
            Held::Gone => Reach::Refused {
                kind: CLOSED,
                why: GONE.to_string(),
            },
            Held::Kept(name, folder) => match folder.refusal(name) {
                Some(why) => Reach::Refused { kind: MISSING, why },
                None => Reach::Folder(Mount {
                    path: PathBuf::from(&folder.path),
                    read_only: folder.mode == crate::words::FolderMode::Read,
                }),
            },
        }
    }
}

/// The sentence a chat made in the box's shared folder is refused with
/// once its agent keeps to a folder.
pub const SHARED: &str = "this chat works in the box's shared folder, and its agent now keeps \
                          to one folder: start a new chat with the agent";

#[cfg(test)]
mod tests {
    use super::*;

    fn forbidden(data: &Path) -> Forbidden {
        Forbidden {
            places: vec![std::fs::canonicalize(data).unwrap()],
        }
    }

    #[test]
    fn a_folder_is_an_existing_one_outside_tandems_data() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let notes = dir.path().join("notes");
        std::fs::create_dir_all(data.join("workspaces")).unwrap();
        std::fs::create_dir_all(&notes).unwrap();
        std::fs::write(dir.path().join("file"), "x").unwrap();
        let f = forbidden(&data);
        let ok = f.check("folder.path", notes.to_str().unwrap()).unwrap();
        assert_eq!(ok, std::fs::canonicalize(&notes).unwrap());
        for (raw, says) in [
            ("notes", "absolute"),
            (
                dir.path().join("nope").to_str().unwrap(),
                "cannot be opened",
            ),
            (dir.path().join("file").to_str().unwrap(), "not a folder"),
            (
                data.join("workspaces").to_str().unwrap(),
                "tandem's own data",
            ),
            (dir.path().to_str().unwrap(), "tandem's own data"),
            ("/", "tandem's own data"),
        ] {
            let err = f.check("folder.path", raw).unwrap_err();
            assert!(err.message.contains(says), "{raw}: {}", err.message);
        }
    }

    #[test]
    fn a_folder_is_missing_once_gone_and_unset_without_a_path() {
        let dir = tempfile::tempdir().unwrap();
        let mut folder = AgentFolder {
            path: dir.path().to_string_lossy().into_owned(),
            mode: FolderMode::Read,
        };
        assert_eq!(folder.state(), FolderState::Ok);
        assert!(folder.refusal("A").is_none());
        folder.path.push_str("/gone");
        assert_eq!(folder.state(), FolderState::Missing);
        assert!(folder.refusal("A").unwrap().contains("is missing"));
        folder.path.clear();
        assert_eq!(folder.state(), FolderState::Unset);
        let shown = serde_json::to_value(&folder).unwrap();
        assert_eq!(shown["state"], "unset");
        assert_eq!(shown["mode"], "read");
    }
}
