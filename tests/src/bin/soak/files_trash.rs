//! The trash and the changes list under chatd's kills (docs/files.md), for
//! `Inv::Files`: a file a host command made is deleted through
//! `DELETE …/files?path=` (it must leave the disk and be in
//! `…/files/trash`), then restored (the bytes read back are the command's)
//! or purged (out of the trash; the answer counts the one file). Every rev
//! the history names for a checked file must appear exactly once when the
//! chat's `…/files/changes` is paged with `before`, revs strictly
//! descending. A try that got no answer may have landed, so a retried
//! step's "not there" is judged by what is on the disk and in the trash.

use super::*;

use tandem_shared::sync::lock;
use tandem_tests::harness::wait_until;

use crate::files::send_change;
use crate::hostexec::HostexecPart;

/// A pass over a chat's whole `…/files/changes` comes after this many checked files
/// (and once more when the load ends).
const PASS_EVERY: u64 = 4;

/// Pages of one pass at most: a list that never ends is a fault too.
const PAGES_MAX: u64 = 5_000;

/// The bytes the command's first line wrote to `made-<marker>.txt`.
fn written(name: &str) -> Option<String> {
    let marker = name.strip_prefix("made-")?.strip_suffix(".txt")?;
    Some(format!("{marker}\n"))
}

/// A file's bytes through `…/files/content` (status, body), asked again
/// (bounded) while chatd does not answer.
async fn content(shared: &Shared, chat: &str, name: &str) -> anyhow::Result<(u16, Vec<u8>)> {
    let url = format!(
        "{}/v1/chat-app/conversations/{chat}/files/content?path={name}",
        shared.chatd_url
    );
    wait_until(
        "chatd to send the file",
        Duration::from_secs(60),
        || async {
            let response = shared
                .http
                .get(&url)
                .header("x-forward-key", FORWARD_KEY)
                .timeout(Duration::from_secs(15))
                .send()
                .await
                .ok()?;
            let status = response.status().as_u16();
            let bytes = response.bytes().await.ok()?;
            Some((status, bytes.to_vec()))
        },
    )
    .await
}

/// The chat's trash: (path, rev) of each row, asked again while chatd is down.
async fn trash_list(shared: &Shared, chat: &str) -> anyhow::Result<Vec<(String, i64)>> {
    let path = format!("/conversations/{chat}/files/trash");
    wait_until("the chat's trash", Duration::from_secs(60), || async {
        let (status, body) = shared.call(reqwest::Method::GET, &path, None).await.ok()?;
        let rows = body["files"].as_array().filter(|_| status == 200)?;
        Some(
            rows.iter()
                .map(|r| {
                    let path = r["path"].as_str().unwrap_or("").to_string();
                    (path, r["rev"].as_i64().unwrap_or(0))
                })
                .collect(),
        )
    })
    .await
}

/// Deletes `name` through the route, checks the disk and the trash, then
/// restores it (bytes back whole) or purges it (out of the trash).
pub(crate) async fn trash_round(part: &HostexecPart, shared: &Shared, chat: &str, name: &str) {
    let Some(want) = written(name) else { return };
    let violate = |what: String| shared.violate(Inv::Files, format!("chat {chat}: {what}"));
    // What the command wrote; a kill mid-`echo` may have cut it: then not this check's file.
    match content(shared, chat, name).await {
        Ok((200, bytes)) if bytes == want.as_bytes() => {}
        Ok((200, _)) => return,
        Ok((status, _)) => {
            return violate(format!(
                "{name} is listed but its content answered {status}"
            ))
        }
        Err(err) => return violate(format!("{name}: its content before the delete: {err:#}")),
    }
    let route = format!("/conversations/{chat}/files?path={name}");
    let rev = match send_change(part, shared, reqwest::Method::DELETE, &route, None).await {
        Ok(((200, body), _)) => body["rev"].as_i64().unwrap_or(0),
        // The unanswered try landed: the trash and the disk say the rest.
        Ok(((404, _), true)) => 0,
        Ok(((status, body), _)) => {
            return violate(format!("the delete of {name} answered {status}: {body}"))
        }
        Err(err) => return violate(format!("the delete of {name}: {err:#}")),
    };
    match content(shared, chat, name).await {
        Ok((404, _)) => {}
        Ok((status, _)) => {
            return violate(format!(
                "after its delete (change set {rev}), {name} is still on the disk ({status})"
            ))
        }
        Err(err) => return violate(format!("{name} after its delete (set {rev}): {err:#}")),
    }
    let rev = match trash_list(shared, chat).await {
        Ok(rows) => match rows.iter().find(|(path, _)| path == name) {
            Some((_, rev)) => *rev,
            None => {
                return violate(format!(
                    "{name}, deleted (change set {rev}), is not in the trash"
                ))
            }
        },
        Err(err) => return violate(format!("the trash after deleting {name}: {err:#}")),
    };
    let restore = {
        let mut files = lock(&part.files);
        files.deleted += 1;
        // Restores and purges in turn, so a short run with two trashed files has both.
        files.deleted % 2 == 1
    };
    if restore {
        restore_one(part, shared, chat, name, rev, &want).await;
    } else {
        purge_one(part, shared, chat, name, rev, &want).await;
    }
}

/// Restores `name` (deleted by set `rev`): back on the disk with `want`, out of the trash.
async fn restore_one(
    part: &HostexecPart,
    shared: &Shared,
    chat: &str,
    name: &str,
    rev: i64,
    want: &str,
) {
    let violate = |what: String| shared.violate(Inv::Files, format!("chat {chat}: {what}"));
    let route = format!("/conversations/{chat}/files/trash/restore");
    let body = json!({ "path": name });
    let back = match send_change(part, shared, reqwest::Method::POST, &route, Some(body)).await {
        Ok(((200, body), _)) => body["rev"].as_i64().unwrap_or(0),
        // The unanswered try put it back: no longer in the trash, or in the way.
        Ok(((404 | 409, _), true)) => 0,
        Ok(((status, body), _)) => {
            return violate(format!(
                "the restore of {name} (deleted by change set {rev}) answered {status}: {body}"
            ))
        }
        Err(err) => return violate(format!("the restore of {name} (set {rev}): {err:#}")),
    };
    match content(shared, chat, name).await {
        Ok((200, bytes)) if bytes == want.as_bytes() => {}
        Ok((200, bytes)) => {
            return violate(format!(
                "after the restore (change set {back}) of {name} (deleted by set {rev}), it \
                 reads {} bytes {:?}, not the {} the command wrote {want:?}",
                bytes.len(),
                String::from_utf8_lossy(&bytes),
                want.len()
            ))
        }
        Ok((status, _)) => {
            return violate(format!(
                "after the restore (change set {back}) of {name} (deleted by set {rev}), its \
                 content answered {status}"
            ))
        }
        Err(err) => return violate(format!("{name} after its restore (set {back}): {err:#}")),
    }
    match trash_list(shared, chat).await {
        Ok(rows) if rows.iter().any(|(path, _)| path == name) => violate(format!(
            "{name} is back on the disk (restore, change set {back}) but still in the trash"
        )),
        Ok(_) => lock(&part.files).restored += 1,
        Err(err) => violate(format!("the trash after restoring {name}: {err:#}")),
    }
}

/// Purges `name` (deleted by set `rev`): out of the trash, still off the
/// disk, and the answer counts it (`files` 1; `bytes` the freed blob's).
async fn purge_one(
    part: &HostexecPart,
    shared: &Shared,
    chat: &str,
    name: &str,
    rev: i64,
    want: &str,
) {
    let violate = |what: String| shared.violate(Inv::Files, format!("chat {chat}: {what}"));
    let route = format!("/conversations/{chat}/files/trash/purge");
    let body = json!({ "paths": [name] });
    match send_change(part, shared, reqwest::Method::POST, &route, Some(body)).await {
        Ok(((200, body), _)) => {
            let (files, blobs, bytes) = (
                body["files"].as_i64(),
                body["blobs"].as_i64(),
                body["bytes"].as_i64(),
            );
            // The marker is unique: its blob goes unless something else holds the same bytes.
            let whole = matches!((files, blobs, bytes),
                (Some(1), Some(b), Some(n)) if (b == 0 || b == 1) && n == b * want.len() as i64);
            if !whole {
                violate(format!(
                    "the purge of {name} (deleted by change set {rev}) answered {body}: not one \
                     file with its {} bytes",
                    want.len()
                ));
            }
        }
        // The unanswered try purged it: the trash says so below.
        Ok(((404, _), true)) => {}
        Ok(((status, body), _)) => {
            return violate(format!(
                "the purge of {name} (deleted by change set {rev}) answered {status}: {body}"
            ))
        }
        Err(err) => return violate(format!("the purge of {name} (set {rev}): {err:#}")),
    }
    match trash_list(shared, chat).await {
        Ok(rows) if rows.iter().any(|(path, _)| path == name) => {
            return violate(format!(
                "{name} (deleted by change set {rev}) is still in the trash after its purge"
            ))
        }
        Ok(_) => {}
        Err(err) => return violate(format!("the trash after purging {name}: {err:#}")),
    }
    match content(shared, chat, name).await {
        Ok((404, _)) => lock(&part.files).purged += 1,
        Ok((status, _)) => violate(format!(
            "{name} (deleted by change set {rev}, purged) is on the disk again ({status})"
        )),
        Err(err) => violate(format!("{name} after its purge: {err:#}")),
    }
}

/// Keeps every rev the history names for `name`, and every few checked
/// files pages the chat's whole `…/files/changes`.
pub(crate) async fn record_and_page(part: &HostexecPart, shared: &Shared, chat: &str, name: &str) {
    let path = format!("/conversations/{chat}/files/history?path={name}");
    let history = get_ok(shared, "the file's history", &path).await;
    let body = match history {
        Ok(body) => body,
        Err(err) => {
            return shared.violate(
                Inv::Files,
                format!("chat {chat}: the history of {name}: {err:#}"),
            )
        }
    };
    let due = {
        let mut files = lock(&part.files);
        let revs = files.revs.entry(chat.to_string()).or_default();
        for set in body["changes"].as_array().into_iter().flatten() {
            if let Some(rev) = set["rev"].as_i64() {
                revs.insert(rev, name.to_string());
            }
        }
        let checked = files.checked.entry(chat.to_string()).or_default();
        *checked += 1;
        checked.is_multiple_of(PASS_EVERY)
    };
    if due {
        page_changes(part, shared, chat).await;
    }
}

/// Pages `…/files/changes` of `chat` with `before`, newest first: revs
/// strictly descending, each below its page's `before`, and every rev kept
/// for the chat's checked files on exactly one page.
pub(crate) async fn page_changes(part: &HostexecPart, shared: &Shared, chat: &str) {
    let (want, limit) = {
        let files = lock(&part.files);
        let Some(want) = files.revs.get(chat).cloned() else {
            return;
        };
        // Pages of many sizes, small ones too, so a chat's sets span several.
        (want, 2 + (files.passes * 7) % 19)
    };
    let violate = |what: String| shared.violate(Inv::Files, format!("chat {chat}: {what}"));
    let mut seen: HashMap<i64, u64> = HashMap::new();
    let (mut before, mut last, mut pages) = (None::<i64>, None::<i64>, 0u64);
    loop {
        let query = match before {
            Some(b) => format!("before={b}&limit={limit}"),
            None => format!("limit={limit}"),
        };
        let path = format!("/conversations/{chat}/files/changes?{query}");
        let page = get_ok(shared, "a page of the changes", &path).await;
        let page = match page {
            Ok(page) => page,
            Err(err) => return violate(format!("…/files/changes?{query}: {err:#}")),
        };
        pages += 1;
        let sets = page["changes"].as_array().cloned().unwrap_or_default();
        if sets.len() as u64 > limit {
            violate(format!(
                "…/files/changes?{query} gave {} sets, more than its limit",
                sets.len()
            ));
        }
        for set in &sets {
            let Some(rev) = set["rev"].as_i64() else {
                violate(format!(
                    "…/files/changes?{query} has a set with no rev: {set}"
                ));
                continue;
            };
            if before.is_some_and(|b| rev >= b) || last.is_some_and(|l| rev >= l) {
                violate(format!(
                    "…/files/changes?{query} gave rev {rev} after rev {} (not strictly \
                     descending below `before`)",
                    last.or(before).unwrap_or(0)
                ));
            }
            last = Some(rev);
            *seen.entry(rev).or_default() += 1;
        }
        match page["next_before"].as_i64() {
            Some(next) if pages < PAGES_MAX => before = Some(next),
            Some(_) => {
                violate(format!("…/files/changes did not end in {PAGES_MAX} pages"));
                break;
            }
            None => break,
        }
    }
    for (rev, name) in &want {
        match seen.get(rev).copied().unwrap_or(0) {
            1 => {}
            0 => violate(format!(
                "change set {rev} of {name} (named by its history) is on no page of \
                 …/files/changes (pages of {limit})"
            )),
            n => violate(format!(
                "change set {rev} of {name} is on the pages of …/files/changes {n} times \
                 (pages of {limit})"
            )),
        }
    }
    let mut files = lock(&part.files);
    files.pages += pages;
    files.passes += 1;
}

/// A GET answered 200, asked again while chatd is down (60 s at most).
async fn get_ok(shared: &Shared, what: &str, path: &str) -> anyhow::Result<Value> {
    wait_until(what, Duration::from_secs(60), || async {
        match shared.call(reqwest::Method::GET, path, None).await {
            Ok((200, body)) => Some(body),
            _ => None,
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bytes_wanted_back_are_the_commands_first_line() {
        let (line, name) = crate::files::made_line("7200.35");
        assert_eq!(line, "echo 7200.35 > made-7200.35.txt");
        assert_eq!(written(&name).as_deref(), Some("7200.35\n"));
        assert_eq!(written("notes.md"), None);
    }

    #[test]
    fn every_fate_comes_up() {
        let mut rng = StdRng::seed_from_u64(7);
        let fates: Vec<_> = (0..600)
            .map(|_| crate::files::Fate::pick(&mut rng))
            .collect();
        for fate in [
            crate::files::Fate::Keep,
            crate::files::Fate::Undo,
            crate::files::Fate::Trash,
        ] {
            assert!(fates.contains(&fate), "{fate:?}");
        }
    }
}
