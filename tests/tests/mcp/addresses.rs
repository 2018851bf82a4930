//! An http connector's address as the box's resolver answers it (issue
//! 27): chatd runs in a little internet (`tandem_tests::chatlab`, root
//! only; CI runs as root) whose DNS answers what the test says, with a
//! fake MCP server at a public and one at a private address. A name the
//! local DNS answers with a private address is refused unless
//! `mcp_allow_private` opens it; a name that moves to a private address
//! after its check never brings a connection there. Every wait is on a
//! condition with a bound.

use crate::setup::{connector, QUICK};
use anyhow::Context;
use serde_json::{json, Value};
use tandem_tests::chatlab::{ChatLab, PRIVATE, PUBLIC};
use tandem_tests::harness::{offered_tools, run_id, system_text, tool_results, Client, Sim};
use tandem_tests::netlab::root_with_tools;

async fn test(client: &Client, id: &str) -> anyhow::Result<Value> {
    let tested = client
        .post(&format!("/mcp-connectors/{id}/test"), json!({}))
        .await?;
    anyhow::ensure!(tested.status == 200, "{tested:?}");
    Ok(tested.body)
}

async fn chat(client: &Client) -> anyhow::Result<String> {
    let made = client
        .post("/conversations", json!({"permission_mode": "yolo"}))
        .await?;
    anyhow::ensure!(made.status == 201, "{made:?}");
    Ok(made.body["id"].as_str().context("chat id")?.to_string())
}

/// Sends `text` and waits (bounded) for the run to end; its record.
async fn turn(client: &Client, chat: &str, text: &str) -> anyhow::Result<Value> {
    let run = run_id(&client.send(chat, text).await?)?;
    client
        .wait_run(chat, &run, &["done", "failed", "stopped"], QUICK)
        .await
}

/// A turn whose model calls the fake's `lookup` with `word`; its record.
async fn lookup_turn(sim: &Sim, client: &Client, chat: &str, word: &str) -> anyhow::Result<Value> {
    sim.faults(json!([
        {"tool_calls": [{"name": "lookup", "arguments": {"word": word}}]},
        {"tokens": 3},
    ]))
    .await?;
    turn(client, chat, "look it up").await
}

/// What the fakes saw, for a failure's message.
fn seen(lab: &ChatLab) -> String {
    format!(
        "public saw {:?}; private saw {:?}",
        lab.public.seen(),
        lab.private.seen()
    )
}

/// `nas.test`, which the box's DNS answers with 10.0.0.5 (a home
/// network's server): saved (a name is not refused before its lookup),
/// its test says cant_connect naming the address and that connectors reach
/// public addresses only, the connector's state stays so, a chat's turn is
/// told it is unavailable and offered none of its tools, and neither
/// server got a request. chatd restarted with `mcp_allow_private` on:
/// the same connector is connected, its tools from the private server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_the_local_dns_answers_privately_is_refused_unless_private_is_open(
) -> anyhow::Result<()> {
    if !root_with_tools() {
        return Ok(());
    }
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let mut lab = ChatLab::start(&sim, &[]).await?;
    lab.dns.set("nas.test", &[PRIVATE]);
    let client = lab.chatd.client();
    let id = connector(&client, "Home NAS", "http://nas.test/mcp", None).await?;

    let tested = test(&client, &id).await?;
    assert_eq!(tested["ok"], false, "{tested}");
    assert_eq!(tested["state"], "cant_connect", "{tested}");
    let why = tested["reason"].as_str().unwrap_or("");
    assert!(
        why.contains("nas.test resolves to 10.0.0.5")
            && why.contains("public addresses only")
            && why.contains("mcp_allow_private"),
        "{why}"
    );
    let shown = client.get(&format!("/mcp-connectors/{id}")).await?;
    assert_eq!(shown.body["state"], "cant_connect", "{}", shown.body);
    assert!(
        lab.dns.asked("nas.test") >= 1,
        "the refusal came from the lookup"
    );

    let chat = chat(&client).await?;
    let before = sim.requests().await?.len();
    let record = turn(&client, &chat, "anything on the NAS? [sim tokens=3]").await?;
    assert_eq!(record["status"], "done", "{record}");
    let requests = sim.requests().await?;
    let asked = requests.get(before).context("the turn's request")?;
    let system = system_text(&asked["body"]);
    assert!(
        system.contains("unavailable this turn: MCP connector Home NAS (cannot be reached)"),
        "{system}"
    );
    let offered = offered_tools(&asked["body"]);
    assert!(!offered.iter().any(|t| t == "lookup"), "{offered:?}");
    assert!(
        lab.private.seen().is_empty() && lab.public.seen().is_empty(),
        "no connection was made: {}",
        seen(&lab)
    );

    lab.chatd
        .set_env(crate::setup::PRIVATE.0, crate::setup::PRIVATE.1);
    lab.chatd.restart().await?;
    let opened = test(&client, &id).await?;
    assert_eq!(opened["ok"], true, "{opened}");
    assert_eq!(opened["state"], "connected", "{opened}");
    assert_eq!(
        lab.private.asked("tools/list"),
        1,
        "the private server listed its tools: {}",
        seen(&lab)
    );
    assert!(lab.public.seen().is_empty(), "{}", seen(&lab));
    Ok(())
}

/// `flip.test` answers the public address to its first question and the
/// private one to every later question, as a rebinding attacker's DNS
/// does. The test's first request went to the public server and nothing
/// ever reached the private one (chatd connects to the addresses it
/// checked, and checks every lookup). Then the name answers public: a
/// test and a chat's calls reach the public server. It moves to the
/// private address: the chat's next call still reaches the public server
/// (its connection is to the address checked), while a new session, a
/// test or another chat's turn, is refused by its lookup, naming 10.0.0.5.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_moved_to_a_private_address_after_its_check_never_reaches_it() -> anyhow::Result<()>
{
    if !root_with_tools() {
        return Ok(());
    }
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let lab = ChatLab::start(&sim, &[]).await?;
    let client = lab.chatd.client();
    lab.dns.set("flip.test", &[PUBLIC, PRIVATE]);
    let id = connector(&client, "Flip", "http://flip.test/mcp", None).await?;

    // Rebinding between one lookup and the next: the session's first
    // connection is the checked public one; a later connection of the same
    // session (rmcp opens more than one) looks the name up again and is
    // refused, saying why.
    let rebound = test(&client, &id).await?;
    assert_eq!(
        lab.public.asked("initialize"),
        1,
        "the first request went to the checked address: {}",
        seen(&lab)
    );
    if rebound["state"] != "connected" {
        assert_eq!(rebound["state"], "cant_connect", "{rebound}");
        let why = rebound["reason"].as_str().unwrap_or("");
        assert!(
            why.contains("flip.test resolves to 10.0.0.5") && why.contains("public addresses only"),
            "{why}"
        );
    }
    assert!(lab.private.seen().is_empty(), "{}", seen(&lab));

    // The older transport holds its event stream on one connection and
    // posts each message on another: its session's second connection is
    // the one the moved name refuses, every time.
    lab.dns.set("flip.test", &[PUBLIC, PRIVATE]);
    let older = connector(&client, "Flip older", "http://flip.test/sse", None).await?;
    let rebound = test(&client, &older).await?;
    assert_eq!(rebound["state"], "cant_connect", "{rebound}");
    let why = rebound["reason"].as_str().unwrap_or("");
    assert!(
        why.contains("flip.test resolves to 10.0.0.5") && why.contains("public addresses only"),
        "{why}"
    );
    assert!(lab.private.seen().is_empty(), "{}", seen(&lab));
    let removed = client
        .call(
            reqwest::Method::DELETE,
            &format!("/mcp-connectors/{older}"),
            None,
        )
        .await?;
    assert!(removed.status < 300, "{removed:?}");

    // Public again: a test and two turns of one chat reach the public server.
    lab.dns.set("flip.test", &[PUBLIC]);
    let tested = test(&client, &id).await?;
    assert_eq!(tested["state"], "connected", "{tested}");
    let chat = chat(&client).await?;
    for word in ["one", "two"] {
        let record = lookup_turn(&sim, &client, &chat, word).await?;
        assert_eq!(record["status"], "done", "{record}");
    }

    // The name moves to the private address after the chat's session
    // checked it: the chat's next call goes where its connection goes.
    lab.dns.set("flip.test", &[PRIVATE]);
    let record = lookup_turn(&sim, &client, &chat, "three").await?;
    assert_eq!(record["status"], "done", "{record}");
    let results = tool_results(&client.snapshot(&chat).await?);
    assert_eq!(
        results,
        [
            "glossary: one is a word the fake knows",
            "glossary: two is a word the fake knows",
            "glossary: three is a word the fake knows",
        ],
        "{}",
        seen(&lab)
    );
    assert_eq!(lab.public.asked("tools/call"), 3, "{}", seen(&lab));

    // A new session looks the name up: refused, naming the address.
    let refused = test(&client, &id).await?;
    assert_eq!(refused["state"], "cant_connect", "{refused}");
    let why = refused["reason"].as_str().unwrap_or("");
    assert!(
        why.contains("flip.test resolves to 10.0.0.5") && why.contains("public addresses only"),
        "{why}"
    );
    assert!(lab.dns.asked("flip.test") >= 1, "it was looked up");
    let other = self::chat(&client).await?;
    let before = sim.requests().await?.len();
    let record = lookup_turn(&sim, &client, &other, "four").await?;
    assert_eq!(record["status"], "done", "{record}");
    let requests = sim.requests().await?;
    let asked = requests.get(before).context("the other chat's request")?;
    let system = system_text(&asked["body"]);
    assert!(
        system.contains("unavailable this turn: MCP connector Flip (cannot be reached)"),
        "{system}"
    );
    assert!(
        !offered_tools(&asked["body"]).iter().any(|t| t == "lookup"),
        "{:?}",
        offered_tools(&asked["body"])
    );
    assert_eq!(
        lab.public.asked("tools/call"),
        3,
        "the other chat's call reached no server: {}",
        seen(&lab)
    );
    assert!(
        lab.private.seen().is_empty(),
        "nothing ever reached the private address: {}",
        seen(&lab)
    );
    assert!(!lab.chatd.log().contains("panicked"), "{}", lab.chatd.log());
    Ok(())
}
