//! The MCP part's context lists and previews (`--parts mcp`): between the
//! chat's turns, the chat's prompts and resources listed (`GET
//! …/mcp/prompts`, `GET …/mcp/resources`) and one of the good server's
//! previewed (`POST …/mcp/resources/read` of `fake://glossary`, or `POST
//! …/mcp/prompts` of `whoami`, whose text is the Authorization the fake
//! got), while the fake goes down and up and forgets its sessions, the
//! connectors are switched off for the chat, and chatd is killed.
//!
//! `Inv::Mcp`: a list answers 200 (a server that did not answer is in its
//! `unavailable`, with a reason): only the good server lists anything (the
//! others cannot sign in or are refused), and when it answered, exactly the
//! fake's entries (the resource whose URI holds the token left out); with
//! the connectors off for the chat, nothing at all. A preview answers the
//! text (the glossary's words; `presented: ` and the token taken out), 502
//! `mcp_error` or 403 `mcp_refused` naming the good connector (403 only
//! with the connectors off for the chat); nothing else, and no answer
//! carries a secret.

use super::*;

/// What the fake lists, by the list's name and each entry's key.
const LISTED: [(&str, &str, &[&str]); 3] = [
    ("prompts", "name", &["brief", "whoami"]),
    (
        "resources",
        "uri",
        &[
            "fake://glossary",
            "fake://logo.png",
            "fake://big",
            "fake://echo-big",
        ],
    ),
    ("templates", "uri_template", &["fake://word/{word}"]),
];

#[derive(Default)]
pub(crate) struct Lists {
    pub prompts: u64,
    pub resources: u64,
    /// Lists that named the good server unavailable (away, or its session lost).
    pub unavailable: u64,
    pub previews: u64,
    /// 403 `mcp_refused`: the connectors were off for the chat.
    pub refused: u64,
    /// 502 `mcp_error`: the server was away.
    pub away: u64,
    /// Not answered (chatd down: its own killer).
    pub unanswered: u64,
}

impl Lists {
    pub(crate) fn line(&self) -> String {
        format!(
            "context through chatd: {} prompt lists and {} resource lists answered ({} naming the good server unavailable), {} previews answered, {} refused 403 (off for the chat), {} answered 502 (server away), {} not answered (chatd down)",
            self.prompts, self.resources, self.unavailable, self.previews, self.refused, self.away, self.unanswered
        )
    }
}

/// The two lists and one preview for `chat`, by `n`; `off` when every
/// connector is switched off for the chat; `good` is the good connector.
pub(crate) async fn step(
    shared: &Shared,
    chat: &str,
    good: &str,
    off: bool,
    n: u64,
    secrets: &[String],
    lists: &mut Lists,
) {
    for (what, path) in [
        ("prompts", format!("/conversations/{chat}/mcp/prompts")),
        ("resources", format!("/conversations/{chat}/mcp/resources")),
    ] {
        let Ok((status, body)) = shared.call(reqwest::Method::GET, &path, None).await else {
            lists.unanswered += 1;
            continue;
        };
        if !answered_clean(shared, what, status, &body, secrets) {
            continue;
        }
        if !(status == 200 && list_fine(what, &body, good, off, lists)) {
            shared.violate(
                Inv::Mcp,
                format!("mcp: the {what} list answered {status}: {}", opening(&body)),
            );
        }
    }

    // Both kinds by turns: `n` is even, and every other even turn is off.
    let (route, body, expected): (&str, Value, &str) = if (n / 4).is_multiple_of(2) {
        (
            "prompts",
            json!({"connector": good, "name": "whoami"}),
            "presented: ",
        )
    } else {
        (
            "resources/read",
            json!({"connector": good, "uri": "fake://glossary"}),
            "tandem: two working as one",
        )
    };
    let path = format!("/conversations/{chat}/mcp/{route}");
    let Ok((status, body)) = shared.call(reqwest::Method::POST, &path, Some(body)).await else {
        lists.unanswered += 1;
        return;
    };
    if !answered_clean(shared, "preview", status, &body, secrets) {
        return;
    }
    let refusal = |kind: &str| body["error"]["type"] == kind && body["error"]["connector"] == good;
    let fine = match status {
        200 if !off => {
            lists.previews += 1;
            body["connector"] == good
                && body["text"]
                    .as_str()
                    .is_some_and(|t| t.starts_with(expected))
        }
        403 if off => {
            lists.refused += 1;
            refusal("mcp_refused")
        }
        502 => {
            lists.away += 1;
            refusal("mcp_error")
        }
        _ => false,
    };
    if !fine {
        shared.violate(
            Inv::Mcp,
            format!(
                "mcp: a preview ({route}, connectors {} for the chat) answered {status}: {}",
                if off { "off" } else { "on" },
                opening(&body)
            ),
        );
    }
}

/// False (and a violation) when an answer carries one of `secrets`.
fn answered_clean(
    shared: &Shared,
    what: &str,
    status: u16,
    body: &Value,
    secrets: &[String],
) -> bool {
    let text = body.to_string();
    if secrets.iter().any(|s| text.contains(s.as_str())) {
        shared.violate(
            Inv::Mcp,
            format!("mcp: a {what} answer ({status}) carried a secret"),
        );
        return false;
    }
    true
}

/// A 200 list: the good server's entries, or it unavailable; nobody
/// else's entries; nothing with the connectors off for the chat.
fn list_fine(what: &str, body: &Value, good: &str, off: bool, lists: &mut Lists) -> bool {
    let unavailable = body["unavailable"].as_array().cloned().unwrap_or_default();
    let reasons = unavailable
        .iter()
        .all(|u| u["connector"].is_string() && u["server"].is_string() && u["reason"].is_string());
    let good_away = unavailable.iter().any(|u| u["connector"] == good);
    if good_away {
        lists.unavailable += 1;
    }
    let shown = LISTED
        .iter()
        .filter(|(list, _, _)| match what {
            "prompts" => *list == "prompts",
            _ => *list != "prompts",
        })
        .all(|(list, key, names)| {
            let Some(entries) = body[*list].as_array() else {
                return false;
            };
            let keys: Vec<&str> = entries.iter().filter_map(|e| e[*key].as_str()).collect();
            let only_good = entries.iter().all(|e| e["connector"] == good);
            let expected: &[&str] = if off || good_away { &[] } else { names };
            // Templates are asked after the resources: a server gone between
            // the two lists none, and is not named unavailable again.
            let gone_between = *list == "templates" && keys.is_empty();
            only_good && (keys == expected || gone_between)
        });
    match what {
        "prompts" => lists.prompts += 1,
        _ => lists.resources += 1,
    }
    // With the servers off for the chat none is asked, so none is unavailable.
    let none_asked = !off || unavailable.is_empty();
    reasons && shown && none_asked
}

/// The start of an answer, for a violation's line.
fn opening(body: &Value) -> String {
    body.to_string().chars().take(300).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether a 200 `what` list `body` passes, for the good connector `g`.
    fn check(what: &str, body: Value, off: bool) -> bool {
        list_fine(what, &body, "g", off, &mut Lists::default())
    }

    fn resources(uris: &[&str], templates: &[&str], unavailable: Value) -> Value {
        json!({
            "resources": uris.iter().map(|u| json!({"connector": "g", "uri": u})).collect::<Vec<_>>(),
            "templates": templates.iter().map(|t| json!({"connector": "g", "uri_template": t})).collect::<Vec<_>>(),
            "unavailable": unavailable,
        })
    }

    #[test]
    fn a_list_is_the_fakes_entries_or_names_it_unavailable() {
        let all = [
            "fake://glossary",
            "fake://logo.png",
            "fake://big",
            "fake://echo-big",
        ];
        let word = ["fake://word/{word}"];
        let away = json!([{"connector": "g", "server": "soak good", "reason": "HTTP 503"}]);
        assert!(check("resources", resources(&all, &word, json!([])), false));
        // Gone between the resources and the templates.
        assert!(check("resources", resources(&all, &[], json!([])), false));
        assert!(check("resources", resources(&[], &[], away.clone()), false));
        assert!(check("resources", resources(&[], &[], json!([])), true));
        // The URI holding the token listed; a resource missing; entries while off.
        let keyed = [&all[..], &["fake://key/soak-mcp-token"]].concat();
        assert!(!check(
            "resources",
            resources(&keyed, &word, json!([])),
            false
        ));
        assert!(!check(
            "resources",
            resources(&all[1..], &word, json!([])),
            false
        ));
        assert!(!check("resources", resources(&all, &word, json!([])), true));
        assert!(!check("resources", resources(&[], &[], away), true));
        // Another connector's entries; an unavailable entry without its reason.
        let prompts = |c: &str| json!({"prompts": [{"connector": c, "name": "brief"}, {"connector": c, "name": "whoami"}], "unavailable": []});
        assert!(check("prompts", prompts("g"), false));
        assert!(!check("prompts", prompts("w"), false));
        let no_reason =
            json!({"prompts": [], "unavailable": [{"connector": "w", "server": "soak wrong"}]});
        assert!(!check("prompts", no_reason, false));
    }
}
