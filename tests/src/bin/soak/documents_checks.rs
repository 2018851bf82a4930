//! The documents part's end checks (`Inv::Documents`): each accepted send
//! is in its chat with every document's text or its one line of cause,
//! chat.sqlite3 keeps no failure for a good document's bytes, and the
//! chats' search (`GET …/files/search`) finds the PDFs' page 3 and, once one
//! is deleted, finds it no more; the files pane's previews (`GET
//! …/files/preview`) show a stored workbook's three sheets and refuse a
//! stored zip bomb with 422 `zip_bomb`.

use super::*;

use reqwest::Method;
use tandem_tests::harness::wait_until;

use crate::documents::{Answer, Doc, Run, Sent, RIDE};

/// What the checks found, for the summary.
#[derive(Default)]
struct Found {
    messages: u64,
    read: BTreeMap<Doc, u64>,
    unread: BTreeMap<Doc, u64>,
    no_room: BTreeMap<Doc, u64>,
    lost_unseen: u64,
    /// (chat, path) of each good PDF a stored message attached.
    pdfs: Vec<(String, String)>,
    /// (chat, path) of each workbook and each zip bomb stored, for previews.
    workbooks: Vec<(String, String)>,
    bombs: Vec<(String, String)>,
}

/// Workbooks and bombs previewed at most, each.
const MAX_PREVIEWED: usize = 6;

/// Words on page 3 of the fixture PDF (`docfixtures::PDF_PAGES`).
const PAGE_3_WORDS: &str = "Acme invoice";
/// PDFs searched for at most: each search scans its chat's workspace.
const MAX_SEARCHED: usize = 12;

/// Holds every send to the invariant; the summary's lines.
pub(crate) async fn check(shared: &Shared, run: &Run) -> Vec<String> {
    let mut texts: Vec<String> = Vec::new();
    for chat in &run.own {
        let path = format!("/conversations/{chat}");
        let snapshot = wait_until("a snapshot of its own chat", RIDE, || async {
            let (status, body) = shared.call(Method::GET, &path, None).await.ok()?;
            (status == 200).then_some(body)
        })
        .await;
        let Ok(snapshot) = snapshot else {
            shared.violate(
                Inv::Documents,
                format!("documents: chat {chat}'s snapshot could not be read"),
            );
            continue;
        };
        // A message still waiting is in `pending`, with its documents too.
        for key in ["messages", "pending"] {
            for m in snapshot[key].as_array().into_iter().flatten() {
                if m["role"].as_str().is_none_or(|r| r == "user") {
                    texts.push(m["text"].as_str().unwrap_or("").to_string());
                }
            }
        }
    }
    let mut found = Found::default();
    for send in &run.sends {
        check_send(shared, send, &texts, &mut found);
    }
    let (failures, kept) = check_database(shared, run);
    let searched = check_search(shared, &found.pdfs).await;
    let previewed = check_previews(shared, &found.workbooks, &found.bombs).await;
    let tally = |m: &BTreeMap<Doc, u64>| {
        m.iter()
            .map(|(d, n)| format!("{} {n}", d.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    vec![
        format!(
            "found: {} messages with documents; as text: {}; read but no room left in the chat's context: {}; one line why not: {}; {} sends with no answer not stored",
            found.messages,
            tally(&found.read),
            tally(&found.no_room),
            tally(&found.unread),
            found.lost_unseen,
        ),
        format!(
            "document_texts: {kept} rows of the good versions read, {failures} failures kept for the bad files' bytes, none for a good one"
        ),
        searched,
        previewed,
    ]
}

/// One send against the texts of its chats.
fn check_send(shared: &Shared, send: &Sent, texts: &[String], found: &mut Found) {
    let mark = send.mark();
    let n = send.n;
    let chat = &send.chat;
    let holders: Vec<&String> = texts.iter().filter(|t| t.contains(&mark)).collect();
    let text = match (holders.as_slice(), send.answer) {
        ([one], Answer::Accepted | Answer::Lost) => *one,
        ([], Answer::Accepted) => {
            shared.violate(
                Inv::Documents,
                format!(
                    "documents: chat {chat}: send {n} was accepted (202) and is not in the chat"
                ),
            );
            return;
        }
        ([], _) => {
            found.lost_unseen += 1;
            return;
        }
        (_, Answer::Refused(status)) => {
            shared.violate(
                Inv::Documents,
                format!("documents: chat {chat}: send {n} was refused ({status}) and is stored"),
            );
            return;
        }
        (many, _) => {
            shared.violate(
                Inv::Documents,
                format!(
                    "documents: chat {chat}: send {n} is stored {} times (its key should make a retry one send)",
                    many.len()
                ),
            );
            return;
        }
    };
    found.messages += 1;
    let lines: Vec<&str> = text.lines().collect();
    for doc in &send.docs {
        let stem = format!("uploads/{}", doc.stem(n));
        let at = lines
            .iter()
            .position(|l| l.starts_with("[attached ") && l.contains(&stem));
        let Some(at) = at else {
            shared.violate(
                Inv::Documents,
                format!(
                    "documents: chat {chat}, send {n}: no line for its {} ({}) in {}",
                    doc.as_str(),
                    doc.name(n),
                    excerpt(text)
                ),
            );
            continue;
        };
        let head = lines[at];
        let kept = match doc {
            Doc::Workbook => Some((&mut found.workbooks, ".xlsx")),
            Doc::Bomb => Some((&mut found.bombs, ".docx")),
            _ => None,
        };
        if let Some((list, ext)) = kept {
            if let Some(path) = upload_path(head, ext) {
                list.push((chat.clone(), path));
            }
        }
        if let Some((_, cause)) = head.split_once("; it could not be read: ") {
            if !doc.good() && cause.starts_with(doc.expect()) {
                *found.unread.entry(*doc).or_default() += 1;
                continue;
            }
            shared.violate(
                Inv::Documents,
                format!(
                    "documents: chat {chat}, send {n}: its {} could not be read: {cause}{}",
                    doc.as_str(),
                    if doc.good() {
                        String::new()
                    } else {
                        format!(" (the cause should start {:?})", doc.expect())
                    }
                ),
            );
            continue;
        }
        // Read, but the chat's context had no room left to put it in: the
        // model is told to read it with read_document.
        if *doc == Doc::Pdf {
            if let Some(path) = pdf_path(head) {
                found.pdfs.push((chat.clone(), path));
            }
        }
        if doc.good() && head.ends_with("no room for it here; read it with read_document]") {
            *found.no_room.entry(*doc).or_default() += 1;
            continue;
        }
        // The text follows in a fence: its first lines hold the first mark.
        let shown = lines
            .iter()
            .skip(at + 1)
            .take(3)
            .any(|l| *l == doc.expect());
        if doc.good() && shown {
            *found.read.entry(*doc).or_default() += 1;
        } else {
            shared.violate(
                Inv::Documents,
                format!(
                    "documents: chat {chat}, send {n}: its {} shows {:?} and not {:?} after it",
                    doc.as_str(),
                    head,
                    doc.expect()
                ),
            );
        }
    }
}

/// chat.sqlite3's kept readings: a failure kept for a good version's bytes
/// is the fault (a kill or a limit taken as the document's verdict).
/// Returns (failures kept for the bad files, rows of the good versions).
fn check_database(shared: &Shared, run: &Run) -> (u64, u64) {
    let opened =
        rusqlite::Connection::open_with_flags(&run.db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY);
    let rows = opened.and_then(|conn| {
        let mut statement = conn.prepare("SELECT sha, kind, failure FROM document_texts")?;
        let rows = statement
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, Option<String>>(2)?,
                ))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    });
    let rows = match rows {
        Ok(rows) => rows,
        Err(err) => {
            shared.violate(
                Inv::Documents,
                format!("documents: {}'s document_texts: {err}", run.db.display()),
            );
            return (0, 0);
        }
    };
    let (mut failures, mut kept) = (0, 0);
    for (sha, kind, failure) in rows {
        match (run.good.get(&sha), failure) {
            (Some(doc), Some(failure)) => shared.violate(
                Inv::Documents,
                format!(
                    "documents: document_texts keeps the failure {failure:?} for a version of the {} (sha-256 {sha}, {kind})",
                    doc.as_str()
                ),
            ),
            (Some(_), None) => kept += 1,
            (None, Some(_)) if run.bad.contains_key(&sha) => failures += 1,
            _ => {}
        }
    }
    (failures, kept)
}

/// The workspace path an `[attached …]` line names for a PDF (a renamed
/// upload's `… (2).pdf` included).
fn pdf_path(head: &str) -> Option<String> {
    upload_path(head, ".pdf")
}

/// The workspace path an `[attached …]` line names for a file ending `ext`.
fn upload_path(head: &str, ext: &str) -> Option<String> {
    let start = head.find("uploads/")?;
    let end = start + head[start..].find(ext)? + ext.len();
    Some(head[start..end].to_string())
}

/// `GET …/files/preview?path=`, asked again while chatd is down (a kill
/// during the load): its status and body.
async fn preview(shared: &Shared, chat: &str, path: &str) -> Option<(u16, Value)> {
    let route = format!("/conversations/{chat}/files/preview?path={}", encoded(path));
    let route = route.as_str();
    wait_until("chatd to answer a preview", RIDE, move || async move {
        shared.call(Method::GET, route, None).await.ok()
    })
    .await
    .ok()
}

/// The previews check: up to [`MAX_PREVIEWED`] stored workbooks show their
/// three sheets with the fixture's cells, and as many stored zip bombs are
/// refused with 422 `zip_bomb` (the reader's child pays, never chatd). The
/// summary's line.
async fn check_previews(
    shared: &Shared,
    workbooks: &[(String, String)],
    bombs: &[(String, String)],
) -> String {
    let mut shown = 0;
    let sample = |list: &[(String, String)]| -> Vec<(String, String)> {
        let step = list.len().div_ceil(MAX_PREVIEWED).max(1);
        list.iter().step_by(step).cloned().collect()
    };
    let books = sample(workbooks);
    for (chat, path) in &books {
        let Some((status, body)) = preview(shared, chat, path).await else {
            shared.violate(
                Inv::Documents,
                format!("documents: chat {chat}: no answer to the preview of {path}"),
            );
            continue;
        };
        let names: Vec<&str> = body["sheets"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["name"].as_str())
            .collect();
        let acme = &body["sheets"][1]["rows"][1];
        if status == 200
            && names == ["Summary", "Customers", "Data"]
            && *acme == json!(["Acme", "4200"])
        {
            shown += 1;
        } else {
            shared.violate(
                Inv::Documents,
                format!(
                    "documents: chat {chat}: the preview of {path} answered {status} with sheets {names:?} and {acme} (not Acme 4200 in Customers)"
                ),
            );
        }
    }
    let mut refused = 0;
    let bombs = sample(bombs);
    for (chat, path) in &bombs {
        let Some((status, body)) = preview(shared, chat, path).await else {
            shared.violate(
                Inv::Documents,
                format!("documents: chat {chat}: no answer to the preview of {path}"),
            );
            continue;
        };
        if status == 422 && body["error"]["type"] == "zip_bomb" {
            refused += 1;
        } else {
            shared.violate(
                Inv::Documents,
                format!(
                    "documents: chat {chat}: the preview of the zip bomb {path} answered {status}: {}",
                    body["error"]
                ),
            );
        }
    }
    format!(
        "previews: {shown} of {} workbooks show their 3 sheets; {refused} of {} zip bombs refused 422 zip_bomb",
        books.len(),
        bombs.len()
    )
}

/// `GET …/files/search?{query}` asked until chatd answers with nothing
/// pending (it may have been killed and be indexing again at its start).
async fn search_settled(shared: &Shared, chat: &str, query: &str) -> Result<Value, String> {
    let route = format!("/conversations/{chat}/files/search?{query}");
    let route = route.as_str();
    let last = Mutex::new(String::from("no answer"));
    let last_seen = &last;
    let settled = wait_until("a search with nothing pending", RIDE, move || async move {
        let (status, body) = match shared.call(Method::GET, route, None).await {
            Ok(answer) => answer,
            Err(err) => {
                *lock(last_seen) = format!("{err:#}");
                return None;
            }
        };
        *lock(last_seen) = format!("{status}, pending {}", body["pending"]);
        (status == 200 && body["pending"] == 0).then_some(body)
    })
    .await;
    settled.map_err(|_| format!("{query}: {} after {} s", lock(&last), RIDE.as_secs()))
}

fn encoded(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// The search check: up to [`MAX_SEARCHED`] of the PDFs, spread over the
/// run, each found on page 3 by the words there; then the last of them
/// deleted and found no more, in its folder or in the whole chat. The
/// summary's line.
async fn check_search(shared: &Shared, pdfs: &[(String, String)]) -> String {
    let step = pdfs.len().div_ceil(MAX_SEARCHED).max(1);
    let sample: Vec<&(String, String)> = pdfs.iter().step_by(step).collect();
    let words = encoded(PAGE_3_WORDS);
    let mut on_page_3 = 0;
    for (chat, path) in &sample {
        let query = format!("q={words}&path={}", encoded(path));
        let body = match search_settled(shared, chat, &query).await {
            Ok(body) => body,
            Err(why) => {
                shared.violate(
                    Inv::Documents,
                    format!("documents: chat {chat}: the search for {path}'s page 3: {why}"),
                );
                continue;
            }
        };
        let found = body["hits"].as_array().into_iter().flatten().any(|h| {
            h["path"] == path.as_str()
                && h["part"] == "page 3"
                && h["text"]
                    .as_str()
                    .is_some_and(|t| t.starts_with(PAGE_3_WORDS))
        });
        if found {
            on_page_3 += 1;
        } else {
            shared.violate(
                Inv::Documents,
                format!(
                    "documents: chat {chat}: {PAGE_3_WORDS:?} is not found on page 3 of {path}: {}",
                    body["hits"]
                ),
            );
        }
    }
    let Some((chat, path)) = sample.last() else {
        return "search: no stored message attached a good PDF; nothing searched".into();
    };
    let deleted = deleted_not_found(shared, chat, path, &words).await;
    format!(
        "search: {on_page_3} of {} PDFs found on page 3 (of {} attached and stored){}",
        sample.len(),
        pdfs.len(),
        if deleted {
            "; the deleted one found no more"
        } else {
            "; the deleted one still found (or not deleted)"
        }
    )
}

/// Deletes `path` from `chat` and searches for it again: whether it is
/// found no more (a failure is a violation).
async fn deleted_not_found(shared: &Shared, chat: &str, path: &str, words: &str) -> bool {
    let route = format!("/conversations/{chat}/files?path={}", encoded(path));
    let gone = wait_until("chatd to delete a PDF", RIDE, || async {
        let (status, body) = shared.call(Method::DELETE, &route, None).await.ok()?;
        Some((status, body))
    })
    .await;
    match gone {
        Ok((status, _)) if status < 300 => {}
        Ok((status, body)) => {
            shared.violate(
                Inv::Documents,
                format!("documents: chat {chat}: deleting {path} answered {status}: {body}"),
            );
            return false;
        }
        Err(_) => {
            shared.violate(
                Inv::Documents,
                format!("documents: chat {chat}: deleting {path} got no answer"),
            );
            return false;
        }
    }
    let mut clean = true;
    for query in [
        format!("q={words}&path={}", encoded(path)),
        format!("q={words}"),
    ] {
        match search_settled(shared, chat, &query).await {
            Ok(body) => {
                let hits = body["hits"].as_array().cloned().unwrap_or_default();
                if hits.iter().any(|h| h["path"] == path) {
                    clean = false;
                    shared.violate(
                        Inv::Documents,
                        format!(
                            "documents: chat {chat}: {path} was deleted and {query} still finds it"
                        ),
                    );
                }
            }
            Err(why) => {
                clean = false;
                shared.violate(
                    Inv::Documents,
                    format!("documents: chat {chat}: the search after deleting {path}: {why}"),
                );
            }
        }
    }
    clean
}
