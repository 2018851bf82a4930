//! Where a chat's workspace is: its own `workspaces/<chat>/` in the data
//! folder, or, for a chat made with `workspace: "shared"` (a trigger's), the
//! box's shared folder (`[chatd] shared_workspace`), where file triggers
//! watch. Every path to a chat's workspace is built here: the tools, the
//! attachments, the sandbox's `/workspace` bind.
//!
//! The set of shared chats is kept in memory: loaded at start and changed
//! when a chat is made (create, import, fork) or removed for good. A chat's
//! workspace never changes after it is made.
//!
//! A sub-agent has no place of its own: its `home` is its parent chat, whose
//! workspace, container, MCP sessions and network it works in (never more).
//!
//! A chat made with a saved agent that keeps to one folder reaches that
//! folder too, and nothing else (`reach`). The agents' folders and each
//! chat's agent are kept here as the database holds them (loaded at start,
//! changed after each write that changes them), so the file tools and the
//! sandbox's binds ask without a read; whether the folder is there is
//! looked at on every ask.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use tandem_shared::sync::{read, write};

use crate::agent_folder::{AgentFolder, AgentPlaces, Reach};

#[derive(Clone)]
pub struct Folders {
    inner: Arc<Inner>,
}

struct Inner {
    data_dir: PathBuf,
    shared_root: PathBuf,
    shared: RwLock<HashSet<String>>,
    /// Each sub-agent's parent chat.
    borrowed: RwLock<HashMap<String, String>>,
    agents: RwLock<AgentPlaces>,
}

/// The workspace kinds a chat may be made with.
pub const KINDS: &[&str] = &["own", "shared"];

impl Folders {
    pub fn new(data_dir: &Path, shared_root: &Path) -> Folders {
        Folders {
            inner: Arc::new(Inner {
                data_dir: data_dir.to_path_buf(),
                shared_root: shared_root.to_path_buf(),
                shared: RwLock::new(HashSet::new()),
                borrowed: RwLock::new(HashMap::new()),
                agents: RwLock::new(AgentPlaces::default()),
            }),
        }
    }

    pub fn from_config(config: &crate::config::ChatdConfig) -> Folders {
        Folders::new(&config.data_dir, &config.shared_workspace)
    }

    /// The chat's workspace folder (a sub-agent's is its parent's).
    pub fn workspace(&self, chat: &str) -> PathBuf {
        let home = self.home(chat);
        if self.is_shared(&home) {
            self.inner.shared_root.clone()
        } else {
            self.inner.data_dir.join("workspaces").join(home)
        }
    }

    /// The chat whose places `chat` works in: its parent for a sub-agent,
    /// else itself.
    pub fn home(&self, chat: &str) -> String {
        read(&self.inner.borrowed)
            .get(chat)
            .cloned()
            .unwrap_or_else(|| chat.to_string())
    }

    /// Whether `chat` is a sub-agent's.
    pub fn is_subagent(&self, chat: &str) -> bool {
        read(&self.inner.borrowed).contains_key(chat)
    }

    /// Notes a sub-agent made for `parent`.
    pub fn borrow(&self, child: &str, parent: &str) {
        write(&self.inner.borrowed).insert(child.to_string(), parent.to_string());
    }

    /// The sub-agents as the database lists them, `(child, parent)` (at start).
    pub fn load_borrowed(&self, pairs: impl IntoIterator<Item = (String, String)>) {
        let mut map = write(&self.inner.borrowed);
        map.clear();
        map.extend(pairs);
    }

    /// What `chat` reaches beside its own folder: its agent's folder, if
    /// the agent keeps to one; a sub-agent its parent's, or, as a saved
    /// agent with a folder of its own (inside the parent's, checked when it
    /// was started), that folder at the stricter of the two modes.
    pub fn reach(&self, chat: &str) -> Reach {
        let home = self.home(chat);
        let (outer, inner) = {
            let agents = read(&self.inner.agents);
            let (own, parent) = (agents.chat_agent.get(chat), agents.chat_agent.get(&home));
            let inner = (home != chat && own != parent).then(|| agents.held(own));
            (agents.held(parent), inner)
        };
        let outer = outer.reach();
        // Made in the shared folder before its agent kept to one: never both.
        if outer.confined() && self.is_shared(&home) {
            return Reach::Refused {
                kind: crate::agent_folder::CLOSED,
                why: crate::agent_folder::SHARED.into(),
            };
        }
        let Some(inner) = inner else {
            return outer;
        };
        match (outer, inner.reach()) {
            (refused @ Reach::Refused { .. }, _) | (_, refused @ Reach::Refused { .. }) => refused,
            (outer, Reach::Own) => outer,
            (Reach::Folder(parent), Reach::Folder(mut mount)) => {
                mount.read_only |= parent.read_only;
                Reach::Folder(mount)
            }
            // Never started so (spawn refuses it): refused, never widened.
            (Reach::Own, Reach::Folder(_)) => Reach::Refused {
                kind: crate::agent_folder::MISSING,
                why: "this agent works in another folder than this chat".into(),
            },
        }
    }

    /// 409 `agent_folder_missing` for a chat whose agent keeps to a folder
    /// that is not there: a message to it is refused, nothing stored.
    pub fn check_reach(&self, chat: &str) -> Result<(), tandem_shared::http::ApiError> {
        match self.reach(chat).conflict() {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }

    /// Whether `agent` may start from `chat`: one kept to a folder only
    /// when that folder is the chat's agent folder or inside it.
    pub fn fits(&self, chat: &str, name: &str, folder: Option<&AgentFolder>) -> Result<(), String> {
        let Some(folder) = folder else {
            return Ok(());
        };
        if let Some(why) = folder.refusal(name) {
            return Err(why);
        }
        // An empty (unset) path starts with no folder, so it never fits.
        if let Reach::Folder(mount) = self.reach(chat) {
            if Path::new(&folder.path).starts_with(&mount.path) {
                return Ok(());
            }
        }
        Err(format!(
            "agent {name:?} works in another folder than this chat, so it cannot start here"
        ))
    }

    /// The agent `id`'s folder and name, if it keeps to one.
    pub fn agent_folder(&self, id: &str) -> Option<(String, AgentFolder)> {
        read(&self.inner.agents).folders.get(id).cloned()
    }

    /// The chats whose places an agent's folder decides: each chat made
    /// with it, and the parent of each sub-agent run as it.
    pub fn homes_of(&self, agent: &str) -> Vec<String> {
        let chats: Vec<String> = read(&self.inner.agents)
            .chat_agent
            .iter()
            .filter(|(_, a)| a.as_str() == agent)
            .map(|(chat, _)| chat.clone())
            .collect();
        let mut homes: Vec<String> = chats.iter().map(|c| self.home(c)).collect();
        homes.sort();
        homes.dedup();
        homes
    }

    /// Notes the agent a chat was made with.
    pub fn ran_with(&self, chat: &str, agent: Option<&str>) {
        if let Some(agent) = agent {
            write(&self.inner.agents)
                .chat_agent
                .insert(chat.to_string(), agent.to_string());
        }
    }

    /// Notes an agent made or changed: its name and folder, if any.
    pub fn agent_saved(&self, id: &str, name: &str, folder: Option<&AgentFolder>) {
        let mut agents = write(&self.inner.agents);
        match folder {
            Some(folder) => {
                agents
                    .folders
                    .insert(id.to_string(), (name.to_string(), folder.clone()));
            }
            None => {
                agents.folders.remove(id);
            }
        }
    }

    /// Notes an agent deleted: one that kept to a folder leaves its chats
    /// refused, never widened.
    pub fn agent_deleted(&self, id: &str) {
        let mut agents = write(&self.inner.agents);
        if agents.folders.remove(id).is_some() {
            agents.gone.insert(id.to_string());
        }
    }

    /// The agents' folders and chats as the database holds them (at start).
    pub fn load_agents(&self, loaded: AgentPlaces) {
        *write(&self.inner.agents) = loaded;
    }

    /// The box's shared folder.
    pub fn shared_root(&self) -> &Path {
        &self.inner.shared_root
    }

    pub fn is_shared(&self, chat: &str) -> bool {
        let home = self.home(chat);
        self.read().contains(&home)
    }

    /// Notes a chat made with `workspace` (`own` or `shared`).
    pub fn made(&self, chat: &str, workspace: &str) {
        if workspace == "shared" {
            self.write().insert(chat.to_string());
        }
    }

    /// Forgets a chat removed for good.
    pub fn forget(&self, chat: &str) {
        self.write().remove(chat);
        write(&self.inner.borrowed).remove(chat);
        write(&self.inner.agents).chat_agent.remove(chat);
    }

    /// The shared chats as the database lists them (at start).
    pub fn load(&self, shared: impl IntoIterator<Item = String>) {
        let mut set = self.write();
        set.clear();
        set.extend(shared);
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashSet<String>> {
        // Nothing panics while holding it; a poisoned lock still holds valid data.
        read(&self.inner.shared)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashSet<String>> {
        write(&self.inner.shared)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_chat_works_in_the_shared_folder_and_an_own_one_in_its_own() {
        let folders = Folders::new(Path::new("/data"), Path::new("/box/workspace"));
        folders.made("c_own", "own");
        folders.made("c_shared", "shared");
        assert_eq!(
            folders.workspace("c_own"),
            Path::new("/data/workspaces/c_own")
        );
        assert_eq!(folders.workspace("c_shared"), Path::new("/box/workspace"));
        folders.forget("c_shared");
        assert_eq!(
            folders.workspace("c_shared"),
            Path::new("/data/workspaces/c_shared")
        );
        folders.load(["c_a".to_string()]);
        assert!(folders.is_shared("c_a") && !folders.is_shared("c_own"));
    }

    #[test]
    fn a_sub_agent_works_in_its_parents_folder() {
        let folders = Folders::new(Path::new("/data"), Path::new("/box/workspace"));
        folders.made("c_shared", "shared");
        folders.borrow("c_kid", "c_own");
        folders.borrow("c_kid2", "c_shared");
        assert_eq!(folders.home("c_kid"), "c_own");
        assert_eq!(folders.home("c_own"), "c_own");
        assert_eq!(
            folders.workspace("c_kid"),
            Path::new("/data/workspaces/c_own")
        );
        assert!(folders.is_shared("c_kid2"));
        assert_eq!(folders.workspace("c_kid2"), Path::new("/box/workspace"));
        folders.forget("c_kid");
        assert!(!folders.is_subagent("c_kid"));
        assert_eq!(folders.home("c_kid"), "c_kid");
    }

    #[test]
    fn a_chat_reaches_its_agents_folder_and_a_sub_agent_never_more() {
        use crate::agent_folder::AgentFolder;
        use crate::words::FolderMode;
        let dir = tempfile::tempdir().unwrap();
        let (project, docs) = (dir.path().join("p"), dir.path().join("p/docs"));
        std::fs::create_dir_all(&docs).unwrap();
        let folders = Folders::new(Path::new("/data"), Path::new("/box/workspace"));
        let folder = |p: &Path, mode| AgentFolder {
            path: p.to_string_lossy().into_owned(),
            mode,
        };
        folders.agent_saved("a_lead", "Lead", Some(&folder(&project, FolderMode::Read)));
        folders.agent_saved("a_docs", "Docs", Some(&folder(&docs, FolderMode::Write)));
        folders.agent_saved("a_plain", "Plain", None);
        folders.ran_with("c_lead", Some("a_lead"));
        folders.ran_with("c_plain", Some("a_plain"));
        assert_eq!(folders.reach("c_plain"), Reach::Own);
        assert_eq!(folders.reach("c_none"), Reach::Own);
        let lead = folders.reach("c_lead");
        assert_eq!(lead.mount().unwrap().path, project);
        assert!(lead.mount().unwrap().read_only && lead.confined());
        // A plain sub-agent: the parent's; one as Docs: docs/, read only still.
        folders.borrow("c_kid", "c_lead");
        assert_eq!(folders.reach("c_kid"), lead);
        folders.borrow("c_docs", "c_lead");
        folders.ran_with("c_docs", Some("a_docs"));
        let kid = folders.reach("c_docs");
        assert_eq!(kid.mount().unwrap().path, docs);
        assert!(kid.mount().unwrap().read_only);
        // Docs under a plain chat would reach outside it: refused, never widened.
        folders.borrow("c_stray", "c_plain");
        folders.ran_with("c_stray", Some("a_docs"));
        assert!(matches!(folders.reach("c_stray"), Reach::Refused { .. }));
        // Gone, or deleted: refused.
        std::fs::remove_dir(&docs).unwrap();
        assert!(matches!(folders.reach("c_docs"), Reach::Refused { .. }));
        folders.agent_deleted("a_lead");
        assert!(
            matches!(folders.reach("c_lead"), Reach::Refused { kind: "agent_gone", why } if why.contains("deleted"))
        );
        folders.agent_deleted("a_plain");
        assert_eq!(folders.reach("c_plain"), Reach::Own);
    }
}
