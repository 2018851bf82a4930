//! The push part's checks at the end (`Inv::Push`, `push.rs` drives the
//! load): the browsers chatd lists (the gone one removed, the others kept,
//! no endpoint or key named), every push the fake push service received (a
//! title and a link only, no message text, the unwatched chats pushed),
//! each chat's last saved settings and mode, and the inbox against what was
//! posted, read and deleted, its count route against its list.

use super::*;

use reqwest::Method;
use tandem_tests::fakepush::Received;

use crate::push::{ask, Kind, Run, MARKER, PROMPT, SLOW};

fn listed_ids(body: &Value) -> Vec<String> {
    body["subscriptions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["id"].as_str().map(str::to_string))
        .collect()
}

/// The gone browser is no longer listed (a push after its 410 at the
/// latest: a kill may take the removal of the first), the two others are,
/// and the list names no endpoint or key.
pub(crate) async fn check_browsers(shared: &Shared, run: &mut Run) -> Vec<String> {
    let Some(gone) = run.browsers.iter().find(|b| b.kind == Kind::Gone) else {
        return Vec::new();
    };
    let gone_id = gone.id.clone();
    let gone_name = gone.subscriber.name.clone();
    let answered_410 = || {
        run.fake
            .received()
            .iter()
            .filter(|r| r.name == gone_name && r.status == 410)
            .count()
    };
    let mut nudged = false;
    let mut list = ask(
        shared,
        &mut run.counts,
        Method::GET,
        "/push/subscriptions",
        None,
    )
    .await;
    if matches!(&list, Some((200, body)) if listed_ids(body).contains(&gone_id)) {
        // One more push (410 again) removes it.
        nudged = true;
        let _ = ask(shared, &mut run.counts, Method::POST, "/push/test", None).await;
        list = ask(
            shared,
            &mut run.counts,
            Method::GET,
            "/push/subscriptions",
            None,
        )
        .await;
    }
    let Some((200, body)) = list else {
        shared.violate(
            Inv::Push,
            format!("GET /push/subscriptions answered {list:?}"),
        );
        return Vec::new();
    };
    let ids = listed_ids(&body);
    let text = body.to_string();
    for b in &run.browsers {
        let listed = ids.contains(&b.id);
        if listed == (b.kind == Kind::Gone) {
            shared.violate(
                Inv::Push,
                format!(
                    "the {} browser (subscription {}) is {}listed at the end ({} answers 410)",
                    b.kind.as_str(),
                    b.id,
                    if listed { "still " } else { "not " },
                    answered_410()
                ),
            );
        }
        let s = &b.subscriber;
        if [&s.p256dh, &s.auth, &s.name]
            .iter()
            .any(|secret| text.contains(secret.as_str()))
        {
            shared.violate(
                Inv::Push,
                format!(
                    "GET /push/subscriptions names the {} browser's endpoint or keys",
                    b.kind.as_str()
                ),
            );
        }
    }
    vec![format!(
        "browsers: 3 subscribed; the gone one answered 410 {} times from t={:.1} s and {}; {} listed at the end",
        answered_410(),
        run.gone_at.unwrap_or(f64::NAN),
        if nudged {
            "was removed by one more push (a kill took the first removal)"
        } else {
            "was removed"
        },
        ids.len()
    )]
}

/// What a push may be: a title and a link, no message text.
fn push_fault(push: &Received) -> Option<String> {
    if let Some(why) = &push.refused {
        return Some(format!("refused by the push service: {why}"));
    }
    let mut fields: Vec<&str> = push
        .payload
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default();
    fields.sort_unstable();
    if fields != ["title", "url"] {
        return Some(format!("fields {fields:?}, not a title and a url only"));
    }
    if push.payload["title"].as_str().is_none_or(str::is_empty) {
        return Some("an empty title".into());
    }
    let url = push.payload["url"].as_str().unwrap_or("");
    let chat_link = url.strip_prefix("/#/c/").is_some_and(|id| {
        !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    });
    if !(chat_link || url == "/") {
        return Some(format!("the link {url:?} is not /#/c/<chat> or /"));
    }
    if push.text.contains(MARKER) || push.text.contains(PROMPT) || push.text.contains("body=") {
        return Some("it carries a message's, a prompt's or an entry body's text".into());
    }
    None
}

pub(crate) fn check_pushes(shared: &Shared, run: &Run) -> Vec<String> {
    let received = run.fake.received();
    let name_of = |kind: Kind| {
        run.browsers
            .iter()
            .find(|b| b.kind == kind)
            .map(|b| b.subscriber.name.clone())
            .unwrap_or_default()
    };
    let (steady, gone) = (name_of(Kind::Steady), name_of(Kind::Gone));
    let (mut own_chats, mut other_chats, mut entries, mut no_chat) = (0, 0, 0, 0);
    let mut pushed: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
    let mut faults: BTreeMap<&str, u64> = BTreeMap::new();
    for push in &received {
        if push.name == gone && push.status == 410 {
            continue;
        }
        if let Some(played) = push.played {
            *faults.entry(played).or_default() += 1;
            shared.fault(&format!("push service {played} (flaky browser)"));
        }
        if let Some(why) = push_fault(push) {
            shared.violate(
                Inv::Push,
                format!(
                    "a push to the {} browser: {why}",
                    run.browsers
                        .iter()
                        .find(|b| b.subscriber.name == push.name)
                        .map_or("unknown", |b| b.kind.as_str())
                ),
            );
            continue;
        }
        if push.name != steady {
            continue;
        }
        let title = push.payload["title"].as_str().unwrap_or("");
        let url = push.payload["url"].as_str().unwrap_or("");
        if run.entries.values().any(|e| e.title == title) {
            entries += 1;
        } else if let Some(chat) = run.own.iter().find(|c| url == format!("/#/c/{c}")) {
            own_chats += 1;
            pushed.insert(chat.as_str());
        } else if url == "/" {
            no_chat += 1;
        } else {
            other_chats += 1;
        }
    }
    for chat in run.sent_to.iter().filter(|c| !pushed.contains(c.as_str())) {
        shared.violate(
            Inv::Push,
            format!(
                "chat {chat}: no device watched it and its runs ended, yet no push reached the steady browser"
            ),
        );
    }
    vec![
        format!(
            "pushes: {} received, all decrypted with a title and a link only; the steady browser's: {own_chats} for the unwatched chats, {other_chats} for other chats, {entries} for its inbox entries, {no_chat} others linking to /",
            received.len()
        ),
        format!(
            "flaky browser: {} answered 500, {} answered after {:.1} s",
            faults.get("answered 500").copied().unwrap_or(0),
            faults.get("answered slowly").copied().unwrap_or(0),
            SLOW.as_secs_f64()
        ),
    ]
}

/// The snapshot's settings are the last saved ones.
pub(crate) fn check_settings(shared: &Shared, run: &Run, chat: &str, snapshot: &Value, when: &str) {
    let Some(Some((temperature, prompt))) = run.settings.get(chat) else {
        return;
    };
    let settings = &snapshot["conversation"]["settings"];
    let held = settings["temperature"]
        .as_f64()
        .is_some_and(|t| (t - temperature).abs() < 1e-9)
        && settings["system_prompt"].as_str() == Some(prompt.as_str());
    if !held {
        let shown = settings.to_string().replace(PROMPT, "<prompt>");
        shared.violate(
            Inv::Push,
            format!("chat {chat}: settings {shown} {when}, not temperature {temperature} and the last prompt saved"),
        );
    }
}

/// Every chat holds its last saved settings and permission mode.
pub(crate) async fn check_chats(shared: &Shared, run: &mut Run) -> Vec<String> {
    let mut chats: Vec<String> = run
        .settings
        .keys()
        .chain(run.modes.keys())
        .cloned()
        .collect();
    chats.sort();
    chats.dedup();
    for chat in &chats {
        let path = format!("/conversations/{chat}");
        let Some((200, snapshot)) = ask(shared, &mut run.counts, Method::GET, &path, None).await
        else {
            shared.violate(Inv::Push, format!("chat {chat}: no snapshot at the end"));
            continue;
        };
        check_settings(shared, run, chat, &snapshot, "at the end");
        if let Some(Some(mode)) = run.modes.get(chat) {
            let held = &snapshot["conversation"]["permission_mode"];
            if held.as_str() != Some(mode.as_str()) {
                shared.violate(
                    Inv::Push,
                    format!("chat {chat}: permission mode {held} at the end, not {mode}"),
                );
            }
        }
    }
    let c = &run.counts;
    vec![
        format!(
            "chats: {} messages to its {} unwatched chats; {} settings saved and {} refused (temperature 9) in {} chats; {} permission modes set",
            c.messages,
            run.own.len(),
            c.patches,
            c.bad_patches,
            run.settings.len(),
            c.modes
        ),
    ]
}

/// Ids and read flags of the whole inbox (it keeps 500, the route lists 500).
fn inbox_of(body: &Value) -> Vec<(String, bool)> {
    body["notifications"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| {
            (
                n["id"].as_str().unwrap_or("").to_string(),
                n["read"].as_bool().unwrap_or(false),
            )
        })
        .collect()
}

/// The count route agrees with the list (read between two equal lists),
/// and its own entries are as it left them.
pub(crate) async fn check_inbox(shared: &Shared, run: &mut Run) -> Vec<String> {
    let list_path = "/notifications?limit=500";
    let mut agreed = None;
    for _ in 0..5 {
        let first = ask(shared, &mut run.counts, Method::GET, list_path, None).await;
        let count = ask(
            shared,
            &mut run.counts,
            Method::GET,
            "/notifications/count",
            None,
        )
        .await;
        let second = ask(shared, &mut run.counts, Method::GET, list_path, None).await;
        if let (Some((200, a)), Some((200, count)), Some((200, b))) = (first, count, second) {
            if inbox_of(&a) == inbox_of(&b) {
                agreed = Some((inbox_of(&a), count));
                break;
            }
        }
    }
    let Some((list, count)) = agreed else {
        shared.violate(
            Inv::Push,
            "the inbox's list did not hold still (or answer) for a count in 5 tries".into(),
        );
        return Vec::new();
    };
    let unread = list.iter().filter(|(_, read)| !read).count() as i64;
    if count["unread"].as_i64() != Some(unread)
        || count["total"].as_i64() != Some(list.len() as i64)
    {
        shared.violate(
            Inv::Push,
            format!(
                "GET /notifications/count says {count}, the list holds {} entries, {unread} unread",
                list.len()
            ),
        );
    }
    let held: HashMap<&str, bool> = list.iter().map(|(id, read)| (id.as_str(), *read)).collect();
    let full = list.len() >= 500;
    let (mut kept, mut gone) = (0, 0);
    for (id, entry) in &run.entries {
        match (held.get(id.as_str()), entry.deleted) {
            (Some(_), Some(true)) => shared.violate(
                Inv::Push,
                format!("inbox entry {id} was deleted and is listed"),
            ),
            (None, Some(false)) if !full => shared.violate(
                Inv::Push,
                format!("inbox entry {id} was never deleted and is not listed"),
            ),
            (Some(read), _) => {
                kept += 1;
                if entry.read.is_some_and(|r| r != *read) {
                    shared.violate(
                        Inv::Push,
                        format!("inbox entry {id} is read={read}, not as it was left"),
                    );
                }
            }
            (None, _) => gone += 1,
        }
    }
    let c = &run.counts;
    vec![format!(
        "inbox: {} entries posted ({} marked read, {} deleted); {kept} of them listed and {gone} gone at the end; {} entries in all, {unread} unread, as the count route says",
        c.posted,
        c.marked,
        c.deleted,
        list.len()
    )]
}
