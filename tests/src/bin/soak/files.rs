//! File history under load and faults (docs/files.md): each host command a
//! chat of chatd runs first writes a file named for its call, and the soak
//! holds chatd to `Inv::Files`: that file is in the chat's file list once
//! the run has ended, whatever was killed meanwhile (chatd between the
//! command and its after-scan: the next scan keeps it as `outside`), and
//! one call in three is undone, after which the file is gone from the disk.
//! Of the rest, one in two goes through the trash (`files_trash.rs`), and
//! every set the history named for a checked file is paged once by
//! `…/files/changes`.

use super::*;

use tandem_shared::sync::lock;
use tandem_tests::harness::wait_until;

use crate::hostexec::HostexecPart;

/// What the file checks saw.
#[derive(Default)]
pub(crate) struct Tally {
    /// Files found in their chat's list.
    pub(crate) listed: u64,
    /// Of them, kept by the command's own change set (its card names it).
    pub(crate) by_call: u64,
    /// Undone, and gone from the disk.
    pub(crate) undone: u64,
    /// Deleted through the route: gone from the disk, in the trash.
    pub(crate) deleted: u64,
    /// Of them, restored with the bytes the command wrote.
    pub(crate) restored: u64,
    /// Of them, purged: out of the trash.
    pub(crate) purged: u64,
    /// Pages of `…/files/changes` read, and the passes over whole chats.
    pub(crate) pages: u64,
    pub(crate) passes: u64,
    /// Undos, deletes, restores and purges asked again after a try got no answer.
    pub(crate) retried: u64,
    /// Per chat: every rev the history named for a checked file, with the file.
    pub(crate) revs: HashMap<String, BTreeMap<i64, String>>,
    /// Per chat: files checked, so a pass over its changes comes every few.
    pub(crate) checked: HashMap<String, u64>,
}

/// What the soak does with a file a command made, once it is listed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Fate {
    Keep,
    Undo,
    /// Deleted to the trash, then restored or purged (in turn, over all chats).
    Trash,
}

impl Fate {
    /// One in three undone; of the rest one in two trashed.
    pub(crate) fn pick(rng: &mut StdRng) -> Fate {
        match rng.random_range(0..3) {
            0 => Fate::Undo,
            1 => Fate::Trash,
            _ => Fate::Keep,
        }
    }
}

/// The line the command starts with: a file named for the call.
pub(crate) fn made_line(marker: &str) -> (String, String) {
    let name = format!("made-{marker}.txt");
    (format!("echo {marker} > {name}"), name)
}

/// The set that created `name` in `chat`, by its history (newest first);
/// asked again while chatd is down. `Err` names what was wrong.
async fn created_by(shared: &Shared, chat: &str, name: &str) -> Result<(i64, String), String> {
    let path = format!("/conversations/{chat}/files/history?path={name}");
    let answered = wait_until("the file's history", Duration::from_secs(60), || async {
        match shared.call(reqwest::Method::GET, &path, None).await {
            Ok((200, body)) => Some(body),
            _ => None,
        }
    })
    .await
    .map_err(|err| format!("its history was not answered: {err:#}"))?;
    let set = answered["changes"]
        .as_array()
        .and_then(|sets| {
            sets.iter().find(|s| {
                s["changes"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|c| c["path"] == name && c["op"] == "created"))
            })
        })
        .ok_or("no change set created it")?;
    match (set["rev"].as_i64(), set["origin"].as_str()) {
        (Some(rev), Some(origin)) => Ok((rev, origin.to_string())),
        _ => Err(format!(
            "the set that created it has no rev or origin: {set}"
        )),
    }
}

/// Sends a change through chatd, asked again (bounded) while it gets no
/// answer; the answer, and whether an earlier try went unanswered (it may
/// have landed, so a "not there" is then no fault by itself).
pub(crate) async fn send_change(
    part: &HostexecPart,
    shared: &Shared,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> anyhow::Result<((u16, Value), bool)> {
    let lost = AtomicBool::new(false);
    let answer = wait_until("chatd to answer", Duration::from_secs(60), || async {
        match shared.call(method.clone(), path, body.clone()).await {
            Ok(answer) => Some(answer),
            Err(_) => {
                lost.store(true, Ordering::Relaxed);
                None
            }
        }
    })
    .await?;
    let lost = lost.load(Ordering::Relaxed);
    if lost {
        lock(&part.files).retried += 1;
    }
    Ok((answer, lost))
}

/// Checks the file a chat's host command made, once its run has ended;
/// then does with it what `fate` says, and pages the chat's changes.
pub(crate) async fn check_made(
    part: &HostexecPart,
    shared: &Shared,
    chat: &str,
    name: &str,
    fate: Fate,
) {
    // chatd may be down (its killer): the list and the history are asked again, bounded.
    let listed = wait_until(
        "the file in its chat's list",
        Duration::from_secs(60),
        || async {
            let (status, body) = shared
                .call(
                    reqwest::Method::GET,
                    &format!("/conversations/{chat}/files"),
                    None,
                )
                .await
                .ok()?;
            let files = body["files"].as_array()?;
            (status == 200 && files.iter().any(|f| f["path"] == name)).then_some(())
        },
    )
    .await;
    if listed.is_err() {
        // A call killed before its first line ran made nothing.
        let content = format!("/conversations/{chat}/files/content?path={name}");
        if let Ok((200, _)) = shared.call(reqwest::Method::GET, &content, None).await {
            shared.violate(
                Inv::Files,
                format!(
                    "chat {chat}: {name}, made by a host command, is not in the chat's file list"
                ),
            );
        }
        return;
    }
    lock(&part.files).listed += 1;
    let (rev, origin) = match created_by(shared, chat, name).await {
        Ok(found) => found,
        Err(why) => {
            shared.violate(
                Inv::Files,
                format!("chat {chat}: {name} is listed but {why}"),
            );
            return;
        }
    };
    if origin == "command" {
        lock(&part.files).by_call += 1;
    }
    match fate {
        Fate::Keep => {}
        Fate::Undo => undo(part, shared, chat, name, rev).await,
        Fate::Trash => crate::files_trash::trash_round(part, shared, chat, name).await,
    }
    crate::files_trash::record_and_page(part, shared, chat, name).await;
}

/// Undoes the set `rev` that created `name`: the file must leave the disk.
async fn undo(part: &HostexecPart, shared: &Shared, chat: &str, name: &str, rev: i64) {
    let path = format!("/conversations/{chat}/files/undo");
    let done = send_change(
        part,
        shared,
        reqwest::Method::POST,
        &path,
        Some(json!({"rev": rev})),
    )
    .await;
    match done {
        Ok(((200, _), _)) => {}
        // An earlier try that got no answer landed: the file was already gone.
        Ok(((409, _), true)) => {}
        Ok(((status, body), _)) => {
            shared.violate(
                Inv::Files,
                format!(
                    "chat {chat}: the undo of change set {rev} ({name}) answered {status}: {body}"
                ),
            );
            return;
        }
        Err(err) => {
            shared.violate(
                Inv::Files,
                format!("chat {chat}: the undo of {rev} ({name}): {err:#}"),
            );
            return;
        }
    }
    // Read from the disk through chatd: the file must be gone.
    let content = format!("/conversations/{chat}/files/content?path={name}");
    match shared.call(reqwest::Method::GET, &content, None).await {
        Ok((404, _)) => lock(&part.files).undone += 1,
        Ok((status, _)) => shared.violate(
            Inv::Files,
            format!(
                "chat {chat}: after the undo of change set {rev}, {name} is still there ({status})"
            ),
        ),
        // chatd killed right then: not the file history's fault.
        Err(_) => {}
    }
}
