//! The MCP part's chat (`--parts mcp`): one chat in `auto` whose engine
//! calls the fake's read-only `lookup` (a tool-call cue) every second or
//! three, while the part's load takes the fake down and up, edits and
//! switches the connectors, and the soak SIGKILLs chatd.
//!
//! `Inv::Mcp`: no turn fails for an MCP server; every turn that ended
//! `done` has its call answered with the fake's words, a failure naming the
//! MCP connector (the server went away under the call), or "there is no
//! tool" (the server could not be reached when the turn began, so it was
//! not offered); no answer carries a token. Every third turn carries the
//! good server's glossary resource as context: stored with its block in
//! front of the text, or refused (502 while the server is down) with no
//! message stored. Every odd turn goes after the App page's read and call
//! (`mcp_pages.rs`), every even one after the context lists and a preview
//! (`mcp_context.rs`).

use super::*;

use tandem_tests::harness::wait_until;

/// How the chat's calls ended.
#[derive(Default)]
pub(crate) struct Turns {
    pub answered: u64,
    pub failed_call: u64,
    pub not_offered: u64,
    pub interrupted: u64,
    pub not_sent: u64,
    /// Turns sent with the connectors switched off for the chat alone.
    pub switched_off: u64,
    /// Turns sent with the good server's glossary resource as context:
    /// stored with its block in front, or refused (502 while it is down)
    /// with nothing stored.
    pub with_context: u64,
    pub context_refused: u64,
    /// The good server's App page, read and called between turns.
    pub pages: crate::mcp_pages::Pages,
    /// The chat's prompts and resources listed, one previewed, between turns.
    pub lists: crate::mcp_context::Lists,
}

impl Turns {
    pub(crate) fn line(&self) -> String {
        format!(
            "chat turns calling an MCP tool: {} answered by the server, {} calls failed naming the connector, {} not offered (server away or switched off for the chat: {}), {} interrupted by a kill, {} not sent (chatd down); {} sent with a resource as context, {} refused for it with nothing stored",
            self.answered, self.failed_call, self.not_offered, self.switched_off, self.interrupted, self.not_sent,
            self.with_context, self.context_refused
        ) + "; " + &self.pages.line() + "; " + &self.lists.line()
    }
}

/// Drives the chat until the load ends; `secrets` must never come back.
pub(crate) async fn drive(shared: &Shared, seed: u64, secrets: &[String]) -> Turns {
    let mut turns = Turns::default();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut phase = shared.phase.subscribe();
    let body = json!({"title": "soak mcp calls", "permission_mode": "auto"});
    let made = shared.new_chat(body, Duration::from_secs(60)).await;
    let chat = match made {
        Ok(chat) => chat,
        Err(err) => {
            shared.violate(Inv::Mcp, format!("mcp: no chat for the calls: {err:#}"));
            return turns;
        }
    };
    let mut n = 0u64;
    // Pacing of the load, not a wait for anything.
    while sleep_in(
        &mut phase,
        Duration::from_secs_f64(rng.random_range(1.0..3.0)),
        |p| p == Phase::Load,
    )
    .await
    {
        n += 1;
        // Every fourth turn goes with the connectors off for this chat alone
        // (PUT …/mcp), read back from GET …/tools; the others with them on.
        let off_here = n.is_multiple_of(4);
        if !switch_in_chat(shared, &chat, off_here).await {
            turns.not_sent += 1;
            continue;
        }
        // Odd turns (the servers on) go after the App page's read and call;
        // even ones list the chat's prompts and resources and preview one
        // (every other one with the servers off for the chat: refused).
        if let Some(good) = good_connector(shared, &chat).await {
            if n % 2 == 1 {
                crate::mcp_pages::step(shared, &chat, &good, n, secrets, &mut turns.pages).await;
            } else {
                let lists = &mut turns.lists;
                crate::mcp_context::step(shared, &chat, &good, off_here, n, secrets, lists).await;
            }
        }
        let word = format!("soakword{n}");
        // A cue value has no spaces.
        let args = json!({ "word": word }).to_string();
        let text = format!(
            "look it up [sim tool_call=lookup args={args} tool_steps=1 tokens=2 tps=0 id=mcp{n}]"
        );
        // Every third turn (with the servers on) carries the good server's
        // glossary resource in front of its text.
        let context = if !off_here && n.is_multiple_of(3) {
            good_connector(shared, &chat).await
        } else {
            None
        };
        let sent = match &context {
            None => shared.send_text(&chat, &text).await,
            Some(id) => {
                let users_before = user_messages(shared, &chat).await;
                let body =
                    json!({"text": text, "context": [{"connector": id, "uri": "fake://glossary"}]});
                let path = format!("/conversations/{chat}/messages");
                let sent = shared.call(reqwest::Method::POST, &path, Some(body)).await;
                if let Ok((status @ (403 | 502), _)) = &sent {
                    turns.context_refused += 1;
                    let after = user_messages(shared, &chat).await;
                    if users_before.is_some() && after.is_some() && after != users_before {
                        shared.violate(
                            Inv::Mcp,
                            format!(
                                "mcp: a send refused {status} for its context stored a message"
                            ),
                        );
                    }
                    continue;
                }
                sent
            }
        };
        let run = match sent {
            Ok((202, b)) if b["run_id"].is_string() => {
                b["run_id"].as_str().unwrap_or("").to_string()
            }
            _ => {
                turns.not_sent += 1;
                continue;
            }
        };
        let ended = wait_until(
            &format!("MCP run {run} to end"),
            Duration::from_secs(120),
            || async {
                let snapshot = shared.snapshot(&chat).await.ok()?;
                let status = snapshot["runs"]
                    .as_array()?
                    .iter()
                    .find(|r| r["id"] == run.as_str())?["status"]
                    .as_str()?
                    .to_string();
                matches!(
                    status.as_str(),
                    "done" | "stopped" | "failed" | "interrupted"
                )
                .then_some((status, snapshot))
            },
        )
        .await;
        let (status, snapshot) = match ended {
            Ok(ended) => ended,
            Err(err) => {
                shared.violate(Inv::Mcp, format!("mcp: run {run} did not end: {err:#}"));
                continue;
            }
        };
        match status.as_str() {
            "interrupted" => {
                turns.interrupted += 1;
                continue;
            }
            "done" => {}
            other => {
                shared.violate(
                    Inv::Mcp,
                    format!("mcp: a turn calling an MCP tool ended {other}"),
                );
                continue;
            }
        }
        if context.is_some() {
            turns.with_context += 1;
            let asked = snapshot["messages"]
                .as_array()
                .into_iter()
                .flatten()
                .rfind(|m| m["role"] == "user")
                .and_then(|m| m["text"].as_str())
                .unwrap_or("");
            if !(asked.starts_with("[context from MCP connector soak good")
                && asked.contains("tandem: two working as one")
                && asked.ends_with(&text))
            {
                shared.violate(
                    Inv::Mcp,
                    format!("mcp: turn {n}'s message does not carry its context in front"),
                );
            }
        }
        let result = snapshot["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .rfind(|m| m["role"] == "tool")
            .and_then(|m| m["text"].as_str())
            .unwrap_or("")
            .to_string();
        if secrets.iter().any(|s| result.contains(s.as_str())) {
            shared.violate(Inv::Mcp, "mcp: a tool result carried a secret".into());
        }
        if off_here {
            turns.switched_off += 1;
            if !result.contains("there is no tool `lookup`") {
                shared.violate(
                    Inv::Mcp,
                    format!("mcp: turn {n} was offered lookup with the chat's MCP servers off"),
                );
                continue;
            }
        }
        if result.contains(&format!("glossary: {word} is a word")) {
            turns.answered += 1;
        } else if result.contains("MCP connector") {
            turns.failed_call += 1;
        } else if result.contains("there is no tool `lookup`") {
            turns.not_offered += 1;
        } else {
            shared.violate(
                Inv::Mcp,
                format!(
                    "mcp: turn {n}'s call was answered {:?}",
                    result.chars().take(200).collect::<String>()
                ),
            );
        }
    }
    turns
}

/// The good server's connector id as `chat` sees it (its name changes
/// with edits, its id does not); none when chatd does not answer.
async fn good_connector(shared: &Shared, chat: &str) -> Option<String> {
    let path = format!("/conversations/{chat}/tools");
    let Ok((200, view)) = shared.call(reqwest::Method::GET, &path, None).await else {
        return None;
    };
    view["mcp"]
        .as_array()?
        .iter()
        .find(|c| {
            c["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("soak good"))
        })
        .and_then(|c| c["id"].as_str())
        .map(str::to_string)
}

/// How many user messages `chat` holds; none when chatd does not answer,
/// or when a run works or a message waits (one may land meanwhile).
async fn user_messages(shared: &Shared, chat: &str) -> Option<usize> {
    let snapshot = shared.snapshot(chat).await.ok()?;
    let busy = snapshot["runs"]
        .as_array()?
        .iter()
        .any(|r| matches!(r["status"].as_str(), Some("queued" | "running" | "waiting")));
    if busy
        || snapshot["pending"]
            .as_array()
            .is_some_and(|p| !p.is_empty())
    {
        return None;
    }
    Some(
        snapshot["messages"]
            .as_array()?
            .iter()
            .filter(|m| m["role"] == "user")
            .count(),
    )
}

/// Switches every connector off (or all on) for `chat` alone and reads it
/// back; false when chatd did not answer (down: its own killer).
async fn switch_in_chat(shared: &Shared, chat: &str, off: bool) -> bool {
    let path = format!("/conversations/{chat}");
    let Ok((200, view)) = shared
        .call(reqwest::Method::GET, &format!("{path}/tools"), None)
        .await
    else {
        return false;
    };
    let ids: Vec<Value> = view["mcp"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| c["id"].clone())
        .collect();
    let body = json!({ "off": if off { ids } else { Vec::new() } });
    if !matches!(
        shared
            .call(reqwest::Method::PUT, &format!("{path}/mcp"), Some(body))
            .await,
        Ok((200, _))
    ) {
        return false;
    }
    let Ok((200, view)) = shared
        .call(reqwest::Method::GET, &format!("{path}/tools"), None)
        .await
    else {
        return false;
    };
    let wrong = view["mcp"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["on"] == json!(off))
        .count();
    if wrong > 0 {
        shared.violate(
            Inv::Mcp,
            format!(
                "mcp: {wrong} connectors of the chat not switched {} as PUT …/mcp said",
                if off { "off" } else { "on" }
            ),
        );
    }
    true
}
