//! The documents part's end checks (`Inv::Documents`): each accepted send
//! is in its chat with every document's text or its one line of cause, and
//! chat.sqlite3 keeps no failure for a good document's bytes.

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
}

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
