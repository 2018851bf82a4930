//! File history under load and faults (docs/files.md): each host command a
//! chat of chatd runs first writes a file named for its call, and the soak
//! holds chatd to `Inv::Files`: that file is in the chat's file list once
//! the run has ended, whatever was killed meanwhile (chatd between the
//! command and its after-scan: the next scan keeps it as `outside`), and
//! one call in three is undone, after which the file is gone from the disk.

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
}

/// The line the command starts with: a file named for the call.
pub(crate) fn made_line(marker: &str) -> (String, String) {
    let name = format!("made-{marker}.txt");
    (format!("echo {marker} > {name}"), name)
}

/// The set that created `name` in `chat`, by its history (newest first).
async fn created_by(shared: &Shared, chat: &str, name: &str) -> Option<(i64, String)> {
    let (status, body) = shared
        .call(
            reqwest::Method::GET,
            &format!("/conversations/{chat}/files/history?path={name}"),
            None,
        )
        .await
        .ok()?;
    if status != 200 {
        return None;
    }
    let set = body["changes"].as_array()?.iter().find(|s| {
        s["changes"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["path"] == name && c["op"] == "created"))
    })?;
    Some((set["rev"].as_i64()?, set["origin"].as_str()?.to_string()))
}

/// Checks the file a chat's host command made, once its run has ended; undoes it when `undo`.
pub(crate) async fn check_made(
    part: &HostexecPart,
    shared: &Shared,
    chat: &str,
    name: &str,
    undo: bool,
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
    let Some((rev, origin)) = created_by(shared, chat, name).await else {
        shared.violate(
            Inv::Files,
            format!("chat {chat}: {name} is listed but no change set created it"),
        );
        return;
    };
    if origin == "command" {
        lock(&part.files).by_call += 1;
    }
    if !undo {
        return;
    }
    let path = format!("/conversations/{chat}/files/undo");
    let done = wait_until("the undo", Duration::from_secs(60), || async {
        let (status, body) = shared
            .call(reqwest::Method::POST, &path, Some(json!({"rev": rev})))
            .await
            .ok()?;
        Some((status, body))
    })
    .await;
    match done {
        Ok((200, _)) => {}
        Ok((status, body)) => {
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
                format!("chat {chat}: the undo of {rev}: {err:#}"),
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
