//! Where a chat's workspace is: its own `workspaces/<chat>/` in the data
//! folder, or, for a chat made with `workspace: "shared"` (a trigger's), the
//! box's shared folder (`[chatd] shared_workspace`), where file triggers
//! watch. Every path to a chat's workspace is built here: the tools, the
//! attachments, the sandbox's `/workspace` bind.
//!
//! The set of shared chats is kept in memory: loaded at start and changed
//! when a chat is made (create, import, fork) or removed for good. A chat's
//! workspace never changes after it is made.

use std::collections::HashSet;
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
            }),
        }
    }

    pub fn from_config(config: &crate::config::ChatdConfig) -> Folders {
        Folders::new(&config.data_dir, &config.shared_workspace)
    }

    /// The chat's workspace folder.
    pub fn workspace(&self, chat: &str) -> PathBuf {
        if self.is_shared(chat) {
            self.inner.shared_root.clone()
        } else {
            self.inner.data_dir.join("workspaces").join(chat)
        }
    }

    /// The box's shared folder.
    pub fn shared_root(&self) -> &Path {
        &self.inner.shared_root
    }

    pub fn is_shared(&self, chat: &str) -> bool {
        self.read().contains(chat)
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
}
