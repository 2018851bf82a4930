//! The running calls: one per chat, `max_chats` chats at once, each with
//! why it is asked to end (the first reason given is kept). MCP servers
//! (`serve.rs`) are counted apart, by their own id: a chat's server never
//! keeps its commands waiting.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use tandem_shared::sync::lock;
use tokio::sync::Notify;

tandem_shared::words! {
    /// Why hostexecd ended a call, as the audit keeps it.
    pub enum KilledBy("killed by") {
        Timeout => "timeout",
        /// Its output passed the limit.
        Output => "output",
        Stop => "stop",
        Shutdown => "shutdown",
        /// hostexecd died while it ran; the next start ended it (only the
        /// store writes this one).
        Restart => "restart",
    }
}

/// A running call, as the API and the driver share it.
pub struct Running {
    pub call_id: String,
    pub chat: String,
    killed_by: Mutex<Option<KilledBy>>,
    pub(crate) wake: Notify,
    /// Set when the `finished` event goes out.
    pub(crate) finished: AtomicBool,
}

impl Running {
    /// Asks for the call to end; the first reason given is the one kept.
    pub fn kill(&self, why: KilledBy) {
        {
            let mut k = lock(&self.killed_by);
            if k.is_none() {
                *k = Some(why);
            }
        }
        self.wake.notify_one();
    }

    pub fn killed_by(&self) -> Option<KilledBy> {
        *lock(&self.killed_by)
    }
}

/// Why a call was refused before it started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    ChatBusy { call_id: String },
    TooManyChats { running: usize, max: usize },
}

/// The running calls, by chat and by id.
pub struct Calls {
    inner: Mutex<HashMap<String, Arc<Running>>>,
    max_chats: usize,
}

/// A call's place; given back when dropped.
pub struct Slot {
    calls: Arc<Calls>,
    /// What it is kept under: its chat, or a server's own id.
    key: String,
    pub running: Arc<Running>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut calls = self.calls.lock();
        if calls
            .get(&self.key)
            .is_some_and(|r| Arc::ptr_eq(r, &self.running))
        {
            calls.remove(&self.key);
        }
    }
}

impl Calls {
    pub fn new(max_chats: usize) -> Arc<Calls> {
        Arc::new(Calls {
            inner: Mutex::new(HashMap::new()),
            max_chats,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Running>>> {
        lock(&self.inner)
    }

    /// A place for a new call of `chat`, or why there is none.
    pub fn reserve(self: &Arc<Self>, chat: &str, call_id: &str) -> Result<Slot, Refusal> {
        self.reserve_as(chat, chat, call_id)
    }

    /// A place for a server of `chat`, kept under its own id: a chat may
    /// have several, the bound counts them all.
    pub fn reserve_server(self: &Arc<Self>, chat: &str, call_id: &str) -> Result<Slot, Refusal> {
        self.reserve_as(call_id, chat, call_id)
    }

    fn reserve_as(self: &Arc<Self>, key: &str, chat: &str, call_id: &str) -> Result<Slot, Refusal> {
        let mut calls = self.lock();
        if let Some(r) = calls.get(key) {
            return Err(Refusal::ChatBusy {
                call_id: r.call_id.clone(),
            });
        }
        if calls.len() >= self.max_chats {
            return Err(Refusal::TooManyChats {
                running: calls.len(),
                max: self.max_chats,
            });
        }
        let running = Arc::new(Running {
            call_id: call_id.to_string(),
            chat: chat.to_string(),
            killed_by: Mutex::new(None),
            wake: Notify::new(),
            finished: AtomicBool::new(false),
        });
        calls.insert(key.to_string(), running.clone());
        Ok(Slot {
            calls: self.clone(),
            key: key.to_string(),
            running,
        })
    }

    pub fn count(&self) -> usize {
        self.lock().len()
    }

    pub fn by_id(&self, call_id: &str) -> Option<Arc<Running>> {
        self.lock().values().find(|r| r.call_id == call_id).cloned()
    }

    pub fn kill_all(&self, why: KilledBy) {
        for r in self.lock().values() {
            r.kill(why);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_call_per_chat_and_a_bound_on_chats() {
        let calls = Calls::new(2);
        let a = calls.reserve("a", "hx_1").unwrap();
        assert_eq!(
            calls.reserve("a", "hx_2").err(),
            Some(Refusal::ChatBusy {
                call_id: "hx_1".into()
            })
        );
        let _b = calls.reserve("b", "hx_3").unwrap();
        assert_eq!(
            calls.reserve("c", "hx_4").err(),
            Some(Refusal::TooManyChats { running: 2, max: 2 })
        );
        assert!(calls.by_id("hx_1").is_some());
        drop(a);
        assert_eq!(calls.count(), 1);
        assert!(calls.reserve("c", "hx_5").is_ok());
    }

    #[test]
    fn servers_are_kept_by_their_own_id_and_bounded_all_together() {
        let servers = Calls::new(2);
        let a = servers.reserve_server("c_1", "hs_1").unwrap();
        let _b = servers.reserve_server("c_1", "hs_2").unwrap();
        assert_eq!(
            servers.reserve_server("c_2", "hs_3").err(),
            Some(Refusal::TooManyChats { running: 2, max: 2 })
        );
        assert_eq!(
            servers.by_id("hs_1").map(|r| r.chat.clone()),
            Some("c_1".into())
        );
        drop(a);
        assert_eq!(servers.count(), 1);
    }

    #[test]
    fn every_killed_by_reads_back_as_itself() {
        tandem_shared::words::check_reads_back::<KilledBy>();
    }
}
