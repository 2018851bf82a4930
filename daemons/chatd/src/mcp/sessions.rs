//! MCP sessions per chat: a session is opened at a chat's first turn that
//! may use a connector and kept per (chat, connector); it is closed after
//! `IDLE`, when the connector changed since it was opened (its `updated`),
//! was switched off or removed, and when the chat ends. A server that could
//! not be reached is not tried again for `RETRY` (a turn's every step would
//! wait on it). A session found dead is opened again once for the next
//! call; a call whose answer was lost is sent again only for a tool its
//! server marks read-only. A call may go `[chatd] mcp_call_limit_s`
//! without an answer, each progress notification starting the count
//! again, `CALL_MOST` in all. Results become
//! text for the model: text parts joined, other parts named, not inlined.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotification,
    CancelledNotificationParam, ClientRequest, ContentBlock, JsonObject, ServerResult, Tool,
};
use rmcp::service::PeerRequestOptions;
use tokio::sync::Mutex;

use super::client::{self, Failure, Session, ToolInfo};
use super::{stdio, Mcp, Reach};
use crate::hostexec::HostExec;
use crate::sandbox::Sandboxes;
use crate::store::mcp::Connector;

/// A session unused this long is closed.
pub const IDLE: Duration = Duration::from_secs(600);
/// One tool call, at most, whatever progress its server reports.
pub const CALL_MOST: Duration = Duration::from_secs(1800);
/// Opening a session for a turn, at most: the turn waits on it.
pub const OPEN_IN_TURN: Duration = Duration::from_secs(10);
/// A changed tool list asked for at a turn, at most.
const RELIST: Duration = Duration::from_secs(2);
/// A server that failed to open is not tried again for this long.
pub const RETRY: Duration = Duration::from_secs(60);

/// One open session and what it was opened with.
struct Open {
    session: Session,
    /// A stdio server's process in the chat's sandbox.
    process: Option<stdio::Process>,
    tools: Vec<Tool>,
    /// The connector's `updated` when this was opened.
    saved: String,
    used: Instant,
}

/// A tool call's outcome for the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Called {
    pub text: String,
    /// The server said the call failed (`isError`).
    pub failed: bool,
    /// The whole result for a page (MCP Apps), when asked for.
    pub page: Option<serde_json::Value>,
}

/// One (chat, connector)'s session, empty until opened; a call holds it.
type Slot = Arc<Mutex<Option<Open>>>;

/// A failed opening, kept for [`RETRY`].
struct Failed {
    at: Instant,
    /// The connector's `updated` then: an edit tries again at once.
    saved: String,
    why: Failure,
}

type Key = (String, String);

/// Every chat's open sessions.
pub struct Sessions {
    mcp: Arc<Mcp>,
    /// How long a call may go without its answer or a progress notification.
    call_limit: Duration,
    /// Where stdio servers run; none without a container runtime.
    sandboxes: Option<Sandboxes>,
    /// Where they run without one: hostexecd, unless host commands are off.
    host: Option<HostExec>,
    /// Which chats are kept to an agent's folder: never a server on the host for them.
    folders: crate::folders::Folders,
    /// The chat whose sandbox a stdio connector's test runs in.
    probe_chat: String,
    /// Tests of stdio connectors, one at a time: they share that sandbox,
    /// which each stops when it is done.
    probes: Mutex<()>,
    open: Mutex<HashMap<Key, Slot>>,
    failed: Mutex<HashMap<Key, Failed>>,
    /// Each connector's tool names when a session last listed them, with
    /// its `updated` then: names stay while a server is away.
    known: std::sync::Mutex<HashMap<String, (String, Vec<String>)>>,
    /// Each session's tool list with its connector's `updated`, read
    /// without its slot: a session busy with a call lends it to a turn.
    listed: std::sync::Mutex<HashMap<Key, (String, Vec<Tool>)>>,
}

impl Sessions {
    pub fn new(
        mcp: Arc<Mcp>,
        sandboxes: Option<Sandboxes>,
        host: Option<HostExec>,
        folders: crate::folders::Folders,
        probe_chat: String,
        call_limit: Duration,
    ) -> Sessions {
        Sessions {
            mcp,
            call_limit,
            sandboxes,
            host,
            folders,
            probe_chat,
            probes: Mutex::new(()),
            open: Mutex::new(HashMap::new()),
            failed: Mutex::new(HashMap::new()),
            known: std::sync::Mutex::new(HashMap::new()),
            listed: std::sync::Mutex::new(HashMap::new()),
        }
    }

    pub fn mcp(&self) -> &Mcp {
        &self.mcp
    }

    /// The tools of each of `connectors` in `chat`, opened side by side,
    /// each within [`OPEN_IN_TURN`]; one that failed lately is not tried.
    pub async fn list_for_turn<'a>(
        &self,
        chat: &str,
        connectors: &'a [Connector],
    ) -> Vec<super::offer::Listed<'a>> {
        let lists = connectors.iter().map(|c| async move {
            // A session busy with a call (a page's, a context's) lends its
            // list: the turn neither waits on it nor counts it a failure.
            if let Some(tools) = self.busy_list(chat, c).await {
                return super::offer::Listed {
                    connector: c,
                    tools: Ok(tools),
                    known: self.known(c),
                };
            }
            let tools = match tokio::time::timeout(OPEN_IN_TURN, self.tools(chat, c)).await {
                Ok(listed) => listed,
                Err(_) => {
                    let why =
                        Failure::Connect(format!("no answer within {} s", OPEN_IN_TURN.as_secs()));
                    self.remember_failure(chat, c, &why).await;
                    Err(why)
                }
            };
            super::offer::Listed {
                connector: c,
                tools,
                known: self.known(c),
            }
        });
        futures_util::future::join_all(lists).await
    }

    /// The tools of `connectors` in `chat` without opening anything: an
    /// open session's list, else the last test's (for a view of the chat).
    pub async fn listed_now(&self, chat: &str, c: &Connector) -> Option<Vec<Tool>> {
        let slot = self
            .open
            .lock()
            .await
            .get(&(chat.to_string(), c.id.clone()))
            .cloned()?;
        let held = slot.try_lock().ok()?;
        held.as_ref()
            .filter(|o| o.saved == c.updated)
            .map(|o| o.tools.clone())
    }

    /// The connector's tools for a page's route: a busy session's list,
    /// else [`Sessions::tools`] within `wait`.
    pub async fn tools_now(
        &self,
        chat: &str,
        c: &Connector,
        wait: Duration,
    ) -> Result<Vec<Tool>, Failure> {
        if let Some(tools) = self.busy_list(chat, c).await {
            return Ok(tools);
        }
        tokio::time::timeout(wait, self.tools(chat, c))
            .await
            .unwrap_or_else(|_| {
                Err(Failure::Connect(format!(
                    "no answer within {} s",
                    wait.as_secs()
                )))
            })
    }

    /// The list of `chat`'s open session with `c` while a call holds it;
    /// none for a server that failed lately (its session is gone).
    async fn busy_list(&self, chat: &str, c: &Connector) -> Option<Vec<Tool>> {
        if self.failed_lately(chat, c).await.is_some() {
            return None;
        }
        let key = (chat.to_string(), c.id.clone());
        let slot = self.open.lock().await.get(&key).cloned()?;
        if slot.try_lock().is_ok() {
            return None;
        }
        let listed = tandem_shared::sync::lock(&self.listed);
        listed
            .get(&key)
            .filter(|(saved, _)| *saved == c.updated)
            .map(|(_, tools)| tools.clone())
    }

    /// Keeps a session's list where [`Sessions::busy_list`] reads it.
    fn keep_listed(&self, chat: &str, c: &Connector, tools: &[Tool]) {
        let key = (chat.to_string(), c.id.clone());
        tandem_shared::sync::lock(&self.listed).insert(key, (c.updated.clone(), tools.to_vec()));
    }

    /// The connector's tool names as a session last listed them, else as
    /// its last test did.
    pub fn known(&self, c: &Connector) -> Vec<String> {
        let known = tandem_shared::sync::lock(&self.known);
        match known.get(&c.id) {
            Some((saved, names)) if *saved == c.updated => names.clone(),
            _ => super::offer::saved_names(c),
        }
    }

    /// Keeps the connector's tool names as a session listed them.
    fn remember_known(&self, c: &Connector, tools: &[Tool]) {
        let names = tools.iter().map(|t| t.name.to_string()).collect();
        tandem_shared::sync::lock(&self.known).insert(c.id.clone(), (c.updated.clone(), names));
    }

    async fn remember_failure(&self, chat: &str, c: &Connector, why: &Failure) {
        self.failed.lock().await.insert(
            (chat.to_string(), c.id.clone()),
            Failed {
                at: Instant::now(),
                saved: c.updated.clone(),
                why: why.clone(),
            },
        );
    }

    /// The failure of a recent opening of this connector version, if any.
    async fn failed_lately(&self, chat: &str, c: &Connector) -> Option<Failure> {
        let failed = self.failed.lock().await;
        failed
            .get(&(chat.to_string(), c.id.clone()))
            .filter(|f| f.saved == c.updated && f.at.elapsed() < RETRY)
            .map(|f| f.why.clone())
    }

    /// The slot of (chat, connector); made empty when there is none.
    async fn slot(&self, chat: &str, connector: &str) -> Slot {
        let mut open = self.open.lock().await;
        open.entry((chat.to_string(), connector.to_string()))
            .or_default()
            .clone()
    }

    /// The connector's tools in this chat's session (opened if need be).
    pub async fn tools(&self, chat: &str, c: &Connector) -> Result<Vec<Tool>, Failure> {
        if let Some(why) = self.failed_lately(chat, c).await {
            return Err(why);
        }
        let slot = self.slot(chat, &c.id).await;
        let mut held = slot.lock().await;
        let was_open = held
            .as_ref()
            .is_some_and(|o| o.saved == c.updated && !o.session.is_closed());
        if let Err(why) = self.ensure(&mut held, chat, c).await {
            self.remember_failure(chat, c, &why).await;
            return Err(why);
        }
        if let Some(open) = held.as_mut() {
            // A turn that offers its tools uses the session.
            open.used = Instant::now();
            // A session kept from an earlier turn lists again when its
            // server said its tools changed (`tools/list_changed`), within
            // 2 s; a list that does not come keeps the one there was, and
            // is asked for again at the next turn.
            if was_open && open.session.service().take_changed() {
                let listed = tokio::time::timeout(RELIST, open.session.list_all_tools());
                match listed.await {
                    Ok(Ok(tools)) => {
                        self.remember_known(c, &tools);
                        self.keep_listed(chat, c, &tools);
                        open.tools = tools;
                    }
                    _ => open.session.service().mark_changed(),
                }
            }
        }
        // `ensure` leaves a session in the slot or fails.
        Ok(held.as_ref().map(|o| o.tools.clone()).unwrap_or_default())
    }

    /// Starts the connector's server (stdio, in `chat`'s sandbox) or
    /// connects to it (http) and opens the session.
    async fn open(
        &self,
        chat: &str,
        c: &Connector,
    ) -> Result<(Session, Option<stdio::Process>), Failure> {
        let reach = self.mcp.target(c).map_err(Failure::Connect)?;
        let opened = match &reach {
            Reach::Http(target) => client::open(target, self.mcp.policy(), self.mcp.private)
                .await
                .map(|session| (session, None)),
            Reach::Stdio(launch) => match (&self.sandboxes, &self.host) {
                (Some(sandboxes), _) => stdio::open(sandboxes, chat, c, launch.clone())
                    .await
                    .map(|(session, process)| (session, Some(process))),
                // On this machine nothing keeps a server inside a folder.
                (None, Some(_)) if self.folders.reach(chat).confined() => Err(Failure::Connect(
                    "a stdio server without a sandbox runs on this machine, where nothing keeps \
                     it inside the agent's folder: it is not started for a chat kept to a folder"
                        .into(),
                )),
                (None, Some(host)) => stdio::open_on_host(host, chat, launch.clone())
                    .await
                    .map(|(session, process)| (session, Some(process))),
                (None, None) => Err(Failure::Connect(
                    "a stdio server runs in the chat's sandbox or through hostexecd, and this \
                     box has no container runtime and host commands are off \
                     ([chatd] host_exec = \"off\"; docs/sandbox.md)"
                        .into(),
                )),
            },
        };
        opened.map_err(|why| reach.redact(why))
    }

    /// Tests a connector: opens a session (a stdio server in a sandbox of
    /// its own), lists the tools and closes it.
    pub async fn probe(&self, c: &Connector) -> Result<Vec<ToolInfo>, Failure> {
        if c.transport == super::Transport::Http {
            let Reach::Http(target) = self.mcp.target(c).map_err(Failure::Connect)? else {
                return Err(Failure::Connect("not an http connector".into()));
            };
            return client::probe(&target, self.mcp.policy(), self.mcp.private).await;
        }
        let _one_at_a_time = self.probes.lock().await;
        let mut held = None;
        let opened = self.ensure(&mut held, &self.probe_chat, c).await;
        let tools = held
            .as_ref()
            .map(|o| o.tools.iter().map(client::info_of).collect())
            .unwrap_or_default();
        if let Some(open) = held.take() {
            close(open).await;
        }
        // The test's sandbox is not kept: it counts as a running one.
        if let Some(sandboxes) = &self.sandboxes {
            sandboxes
                .stop(&self.probe_chat, "the MCP test is done")
                .await;
        }
        opened.map(|()| tools)
    }

    /// Opens a session unless a live one made from this `updated` is there.
    async fn ensure(
        &self,
        held: &mut Option<Open>,
        chat: &str,
        c: &Connector,
    ) -> Result<(), Failure> {
        let fresh = held
            .as_ref()
            .is_some_and(|o| o.saved == c.updated && !o.session.is_closed());
        if fresh {
            return Ok(());
        }
        // The list of a session that is gone is lent to nobody.
        tandem_shared::sync::lock(&self.listed).remove(&(chat.to_string(), c.id.clone()));
        if let Some(old) = held.take() {
            close(old).await;
        }
        let (session, process) = self.open(chat, c).await?;
        let Ok(Ok(tools)) = tokio::time::timeout(client::OPEN, session.list_all_tools()).await
        else {
            close(Open {
                session,
                process,
                tools: Vec::new(),
                saved: String::new(),
                used: Instant::now(),
            })
            .await;
            return Err(Failure::Connect("the tool list did not come".into()));
        };
        self.remember_known(c, &tools);
        self.keep_listed(chat, c, &tools);
        *held = Some(Open {
            session,
            process,
            tools,
            saved: c.updated.clone(),
            used: Instant::now(),
        });
        Ok(())
    }

    /// Calls `tool` of connector `c` in `chat`'s session (with its whole
    /// result for a page when `page`). A session found closed is opened
    /// again once; a lost answer is asked again only when the server marks
    /// the tool read-only.
    pub async fn call(
        &self,
        chat: &str,
        c: &Connector,
        tool: &str,
        arguments: JsonObject,
        page: bool,
    ) -> Result<Called, Failure> {
        let slot = self.slot(chat, &c.id).await;
        let mut held = slot.lock().await;
        let mut reopened = false;
        loop {
            self.ensure(&mut held, chat, c).await?;
            let Some(open) = held.as_mut() else {
                return Err(Failure::Connect("no session".into()));
            };
            open.used = Instant::now();
            let read_only = open
                .tools
                .iter()
                .find(|t| t.name == tool)
                .and_then(|t| t.annotations.as_ref())
                .and_then(|a| a.read_only_hint)
                .unwrap_or(false);
            let params =
                CallToolRequestParams::new(tool.to_string()).with_arguments(arguments.clone());
            // A stdio server's sandbox is busy while a call runs in it.
            let _busy = match (&open.process, &self.sandboxes) {
                (Some(process), Some(sandboxes)) => sandboxes.hold(process.chat()),
                _ => None,
            };
            match call_tool(&open.session, params, self.call_limit).await {
                Err(rmcp::ServiceError::Timeout { .. }) => {
                    return Err(Failure::Connect(format!(
                        "no answer and no progress within {} s (or past {} minutes in all)",
                        self.call_limit.as_secs(),
                        CALL_MOST.as_secs() / 60
                    )))
                }
                Ok(result) => {
                    // A server may echo what it was sent: no secret of the
                    // connector reaches the model, the store or a file.
                    let mut called = text_of(&result);
                    let target = self.mcp.target(c);
                    if let Ok(target) = &target {
                        called.text = target.clean(called.text);
                    }
                    if page {
                        let clean = |t: String| match &target {
                            Ok(target) => target.clean(t),
                            Err(_) => t,
                        };
                        let whole = super::apps::result_for_page(&result, &called.text, clean);
                        called.page = Some(whole);
                    }
                    return Ok(called);
                }
                Err(e) if !reopened && read_only && dead(&open.session, &e) => {
                    // The session died under the call: once more, afresh.
                    reopened = true;
                    if let Some(old) = held.take() {
                        close(old).await;
                    }
                }
                Err(e) => {
                    let dead = dead(&open.session, &e);
                    let said = open.process.as_ref().and_then(stdio::Process::last_words);
                    if dead {
                        if let Some(old) = held.take() {
                            close(old).await;
                        }
                    }
                    let why = match client::of_call(&e) {
                        Failure::Connect(why) if dead => Failure::Connect(match said {
                            Some(words) => {
                                format!("{why}; the server ended, saying: {}", client::cut(&words))
                            }
                            None => format!("{why}; the session closed"),
                        }),
                        other => other,
                    };
                    return Err(match self.mcp.target(c) {
                        Ok(target) => target.redact(why),
                        Err(_) => Failure::Connect("the call failed".into()),
                    });
                }
            }
        }
    }

    /// Asks `chat`'s session with connector `c` one thing that changes
    /// nothing on the server (a list, a prompt, a resource). The wait for
    /// a call holding the session and the answer are each bounded by
    /// `limit`; an opening is bounded by its own limits and never cut off
    /// (a stdio server started meanwhile would share its uid). A session
    /// found dead is opened again and asked once more.
    pub async fn ask<T>(
        &self,
        chat: &str,
        c: &Connector,
        limit: Duration,
        what: impl for<'s> Fn(&'s Session) -> BoxFuture<'s, Result<T, rmcp::ServiceError>>,
    ) -> Result<T, Failure> {
        if let Some(why) = self.failed_lately(chat, c).await {
            return Err(why);
        }
        let slot = self.slot(chat, &c.id).await;
        let Ok(mut held) = tokio::time::timeout(limit, slot.lock()).await else {
            return Err(Failure::Connect(format!(
                "the server is busy with this chat's tool call (waited {} s)",
                limit.as_secs()
            )));
        };
        let mut reopened = false;
        loop {
            if let Err(why) = self.ensure(&mut held, chat, c).await {
                self.remember_failure(chat, c, &why).await;
                return Err(why);
            }
            let Some(open) = held.as_mut() else {
                return Err(Failure::Connect("no session".into()));
            };
            open.used = Instant::now();
            let _busy = match (&open.process, &self.sandboxes) {
                (Some(process), Some(sandboxes)) => sandboxes.hold(process.chat()),
                _ => None,
            };
            let why = match tokio::time::timeout(limit, what(&open.session)).await {
                Ok(Ok(answer)) => return Ok(answer),
                Err(_) => Failure::Connect(format!("no answer within {} s", limit.as_secs())),
                Ok(Err(e)) if !reopened && dead(&open.session, &e) => {
                    reopened = true;
                    if let Some(old) = held.take() {
                        close(old).await;
                    }
                    continue;
                }
                Ok(Err(e)) => client::of_call(&e),
            };
            return Err(match self.mcp.target(c) {
                Ok(target) => target.redact(why),
                Err(_) => Failure::Connect("the request failed".into()),
            });
        }
    }

    /// Closes every session of `chat` (its end, its trash).
    pub async fn close_chat(&self, chat: &str) {
        self.close_where(|(c, _)| c == chat).await;
    }

    /// Closes every chat's session with connector `id` (edited, switched
    /// off, removed).
    pub async fn close_connector(&self, id: &str) {
        self.close_where(|(_, c)| c == id).await;
    }

    /// Closes `chat`'s session with connector `id` (switched off for it).
    pub async fn close_one(&self, chat: &str, id: &str) {
        self.close_where(|(c, k)| c == chat && k == id).await;
    }

    async fn close_where(&self, pick: impl Fn(&Key) -> bool) {
        let gone: Vec<_> = {
            let mut open = self.open.lock().await;
            let keys: Vec<_> = open.keys().filter(|k| pick(k)).cloned().collect();
            keys.into_iter().filter_map(|k| open.remove(&k)).collect()
        };
        self.failed.lock().await.retain(|k, _| !pick(k));
        tandem_shared::sync::lock(&self.listed).retain(|k, _| !pick(k));
        for slot in gone {
            // A call in progress holds its slot: the session closes when it
            // is done, and whoever asked for the close does not wait.
            tokio::spawn(async move {
                if let Some(old) = slot.lock().await.take() {
                    close(old).await;
                }
            });
        }
    }

    /// How many sessions are open (metrics, tests).
    pub async fn open_count(&self) -> usize {
        let slots: Vec<_> = self.open.lock().await.values().cloned().collect();
        let mut n = 0;
        for slot in slots {
            if slot.lock().await.is_some() {
                n += 1;
            }
        }
        n
    }

    /// Closes the sessions unused for `IDLE` (the housekeeping tick) and
    /// forgets empty slots and old failures.
    pub async fn close_idle(&self) -> usize {
        self.failed
            .lock()
            .await
            .retain(|_, f| f.at.elapsed() < RETRY);
        let slots: Vec<_> = {
            let mut open = self.open.lock().await;
            // An empty slot nobody holds is dropped (a holder has a clone).
            open.retain(|_, slot| {
                Arc::strong_count(slot) > 1 || slot.try_lock().map_or(true, |h| h.is_some())
            });
            // A list is kept no longer than its slot.
            tandem_shared::sync::lock(&self.listed).retain(|k, _| open.contains_key(k));
            open.values().cloned().collect()
        };
        let mut closed = 0;
        for slot in slots {
            // A slot busy with a call is in use: skip it.
            let Ok(mut held) = slot.try_lock() else {
                continue;
            };
            if held.as_ref().is_some_and(|o| o.used.elapsed() >= IDLE) {
                if let Some(old) = held.take() {
                    close(old).await;
                    closed += 1;
                }
            }
        }
        closed
    }
}

/// A `tools/call` with a progress token whose `limit` starts again at each
/// progress notification, [`CALL_MOST`] in all; rmcp tells the server when
/// it gives up (a cancellation).
async fn call_tool(
    session: &Session,
    params: CallToolRequestParams,
    limit: Duration,
) -> Result<CallToolResult, rmcp::ServiceError> {
    let mut options = PeerRequestOptions::no_options();
    options.timeout = Some(limit);
    options.reset_timeout_on_progress = true;
    options.max_total_timeout = Some(CALL_MOST);
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let handle = session.send_request_with_option(request, options).await?;
    // A stop drops this future: the server is told the call is cancelled.
    let mut guard = CancelOnDrop {
        peer: handle.peer.clone(),
        id: Some(handle.id.clone()),
    };
    let answer = handle.await_response().await;
    guard.id = None;
    match answer? {
        ServerResult::CallToolResult(result) => Ok(result),
        _ => Err(rmcp::ServiceError::UnexpectedResponse),
    }
}

/// Tells the server a call is cancelled when the call is dropped unanswered.
struct CancelOnDrop {
    peer: rmcp::Peer<rmcp::RoleClient>,
    id: Option<rmcp::model::RequestId>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let peer = self.peer.clone();
        runtime.spawn(async move {
            let params =
                CancelledNotificationParam::new(Some(id), Some("the chat's run stopped".into()));
            let _ = peer
                .send_notification(CancelledNotification::new(params).into())
                .await;
        });
    }
}

/// Whether a call's error says the session is gone: the service saw it
/// close, or the transport did (a server process that died answers the
/// call before the service marks itself closed).
fn dead(session: &Session, error: &rmcp::ServiceError) -> bool {
    session.is_closed()
        || match error {
            rmcp::ServiceError::TransportClosed => true,
            // The older transport's POST answered with a status: the server
            // is there and its event stream open, and that message alone
            // failed; unless it no longer knows the session (404, 410),
            // which that transport cannot get back into.
            rmcp::ServiceError::TransportSend(e) => !matches!(
                e.error.downcast_ref::<super::legacy::SendError>(),
                Some(super::legacy::SendError::Status(s)) if !matches!(s, 404 | 410)
            ),
            _ => false,
        }
}

/// Ends the session; a stdio server's process is killed before this
/// returns, so a server started next with the same uid is not.
async fn close(open: Open) {
    let _ = tokio::time::timeout(Duration::from_secs(5), open.session.cancel()).await;
    if let Some(process) = open.process {
        process.kill().await;
    }
}

/// A result as the model reads it: text parts joined; an image, audio or
/// a binary resource named, never inlined; structured content when there
/// is no text.
pub fn text_of(result: &CallToolResult) -> Called {
    let mut parts = Vec::new();
    for block in &result.content {
        match block {
            ContentBlock::Text(t) => parts.push(t.text.clone()),
            ContentBlock::Image(i) => parts.push(format!(
                "[an image ({}, {} bytes) the tool returned: not shown]",
                i.mime_type,
                i.data.len() * 3 / 4
            )),
            ContentBlock::Audio(a) => parts.push(format!(
                "[audio ({}, {} bytes) the tool returned: not shown]",
                a.mime_type,
                a.data.len() * 3 / 4
            )),
            ContentBlock::Resource(_) => parts.push("[an embedded resource: not shown]".into()),
            ContentBlock::ResourceLink(r) => parts.push(format!("[a resource: {}]", r.uri)),
            _ => parts.push("[a part of a kind tandem does not read]".into()),
        }
    }
    if parts.is_empty() {
        if let Some(value) = &result.structured_content {
            parts.push(value.to_string());
        }
    }
    Called {
        text: parts.join("\n"),
        failed: result.is_error == Some(true),
        page: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_parts_are_joined_and_an_image_is_named_not_inlined() {
        let result = CallToolResult::success(vec![
            ContentBlock::text("first"),
            ContentBlock::image("AAAABBBB", "image/png"),
            ContentBlock::text("second"),
        ]);
        let called = text_of(&result);
        assert_eq!(
            called.text,
            "first\n[an image (image/png, 6 bytes) the tool returned: not shown]\nsecond"
        );
        assert!(!called.failed);
        assert!(!called.text.contains("AAAA"));
    }
}
