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

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use tandem_shared::sync::{read, write};

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
}
