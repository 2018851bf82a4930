//! Prompts and resources as context: listed from the servers a chat may
//! use, previewed, and expanded in front of a message's text, against the
//! reference server from npm and the fake; a server the chat may not use
//! is refused (403) and one that does not answer fails the send (502),
//! nothing stored either way; binary parts are left out, a long resource
//! is cut, a token a server echoes never comes back.

use crate::setup::{connector, start, QUICK};
use anyhow::Context;
use serde_json::{json, Value};
use tandem_tests::harness::{run_id, Client};
use tandem_tests::mcpservers::{Everything, FakeMcp};

const TOKEN: &str = "tok-context-5c2e-never-shown";

/// The chat's user messages, as stored.
async fn user_messages(client: &Client, chat: &str) -> anyhow::Result<Vec<Value>> {
    let snapshot = client.snapshot(chat).await?;
    Ok(snapshot["messages"]
        .as_array()
        .context("messages")?
        .iter()
        .filter(|m| m["role"] == "user")
        .cloned()
        .collect())
}

/// The reference server's prompts and resources listed for a chat; a
/// prompt with an argument and a static document previewed; both sent as
/// a message's context, in front of the text, which the engine reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_servers_prompt_and_resource_go_in_front_of_a_message() -> anyhow::Result<()>
{
    let Some(server) = Everything::http().await? else {
        return Ok(());
    };
    let (sim, _chatd, client) = start().await?;
    let id = connector(&client, "Everything", &server.url(), None).await?;
    let chat = client.create_chat().await?;

    let prompts = client
        .get(&format!("/conversations/{chat}/mcp/prompts"))
        .await?;
    assert_eq!(prompts.status, 200, "{prompts:?}");
    let args = prompts.body["prompts"]
        .as_array()
        .and_then(|all| all.iter().find(|p| p["name"] == "args-prompt"))
        .cloned()
        .context("args-prompt listed")?;
    assert_eq!(args["connector"], id.as_str());
    assert_eq!(args["server"], "Everything");
    let city = args["arguments"]
        .as_array()
        .and_then(|a| a.iter().find(|a| a["name"] == "city"))
        .cloned()
        .context("the city argument")?;
    assert_eq!(city["required"], true, "{args}");

    let resources = client
        .get(&format!("/conversations/{chat}/mcp/resources"))
        .await?;
    assert_eq!(resources.status, 200, "{resources:?}");
    let doc = resources.body["resources"]
        .as_array()
        .and_then(|all| {
            all.iter().find(|r| {
                r["uri"]
                    .as_str()
                    .is_some_and(|u| u.starts_with("demo://resource/static/document/"))
            })
        })
        .cloned()
        .with_context(|| format!("a static document listed: {}", resources.body))?;
    let uri = doc["uri"].as_str().context("uri")?.to_string();
    let templates = resources.body["templates"]
        .as_array()
        .context("templates")?;
    assert!(
        templates
            .iter()
            .any(|t| t["uri_template"] == "demo://resource/dynamic/blob/{resourceId}"),
        "{templates:?}"
    );

    let preview = client
        .post(
            &format!("/conversations/{chat}/mcp/prompts"),
            json!({"connector": id, "name": "args-prompt", "arguments": {"city": "Paris"}}),
        )
        .await?;
    assert_eq!(preview.status, 200, "{preview:?}");
    assert_eq!(preview.body["text"], "What's weather in Paris?");
    let read = client
        .post(
            &format!("/conversations/{chat}/mcp/resources/read"),
            json!({"connector": id, "uri": "demo://resource/dynamic/blob/7"}),
        )
        .await?;
    assert_eq!(read.status, 200, "{read:?}");
    assert_eq!(read.body["left_out"], 1, "{}", read.body);
    assert!(
        read.body["text"]
            .as_str()
            .unwrap_or("")
            .contains("left out"),
        "{}",
        read.body
    );
    assert!(
        !read.body["text"]
            .as_str()
            .unwrap_or("")
            .contains("base64 blob"),
        "{}",
        read.body
    );

    sim.faults(json!([{"tokens": 3}])).await?;
    let sent = client
        .post(
            &format!("/conversations/{chat}/messages"),
            json!({"text": "Go ahead", "context": [
                {"connector": id, "name": "args-prompt", "arguments": {"city": "Paris"}},
                {"connector": id, "uri": uri},
            ]}),
        )
        .await?;
    assert_eq!(sent.status, 202, "{sent:?}");
    let run = client
        .wait_run(&chat, &run_id(&sent.body)?, &["done", "failed"], QUICK)
        .await?;
    assert_eq!(run["status"], "done", "{run}");
    let stored = user_messages(&client, &chat).await?;
    let text = stored[0]["text"].as_str().context("text")?;
    assert!(
        text.starts_with("[context from MCP connector Everything: prompt \"args-prompt\" (city: Paris)]\n```\nWhat's weather in Paris?\n```\n\n"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "[context from MCP connector Everything: resource {uri}]"
        )),
        "{text}"
    );
    assert!(text.ends_with("\n\nGo ahead"), "{text}");
    let records = stored[0]["attachments"].as_array().context("records")?;
    assert_eq!(records.len(), 2, "{records:?}");
    assert_eq!(records[0]["kind"], "context");
    assert_eq!(records[0]["prompt"], "args-prompt");
    assert_eq!(records[1]["uri"], uri.as_str());

    let requests = sim.requests().await?;
    let asked = requests.last().context("a request")?["body"].to_string();
    assert!(
        asked.contains("What's weather in Paris?"),
        "the engine read the prompt"
    );
    Ok(())
}

/// The fake: a binary resource named, a long one cut at 256 KiB, an echoed
/// token taken out; a connector switched off for the chat is 403 and one
/// that is down 502, an unknown one and a bad item 400 naming the field,
/// and none of them stores a message or starts a run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_failures_and_limits_store_nothing() -> anyhow::Result<()> {
    let fake = FakeMcp::start(Some(TOKEN)).await?;
    let (_sim, chatd, client) = start().await?;
    let id = connector(&client, "Docs", &fake.url("/mcp"), Some(TOKEN)).await?;
    let chat = client.create_chat().await?;
    let path = format!("/conversations/{chat}/messages");

    let big = client
        .post(
            &format!("/conversations/{chat}/mcp/resources/read"),
            json!({"connector": id, "uri": "fake://big"}),
        )
        .await?;
    assert_eq!(big.status, 200, "{big:?}");
    assert_eq!(big.body["cut"], true);
    assert!(big.body["text"].as_str().unwrap_or("").len() <= 256 * 1024);
    // Both pages listed; a URI that holds the token is not listed at all.
    let listed = client
        .get(&format!("/conversations/{chat}/mcp/resources"))
        .await?;
    let uris: Vec<&str> = listed.body["resources"]
        .as_array()
        .context("resources")?
        .iter()
        .filter_map(|r| r["uri"].as_str())
        .collect();
    assert_eq!(
        uris,
        [
            "fake://glossary",
            "fake://logo.png",
            "fake://big",
            "fake://echo-big"
        ],
        "{}",
        listed.body
    );
    assert!(!listed.body.to_string().contains(TOKEN));
    // A token across the 256 KiB cut is taken out whole, never cut in two.
    let across = client
        .post(
            &format!("/conversations/{chat}/mcp/resources/read"),
            json!({"connector": id, "uri": "fake://echo-big"}),
        )
        .await?;
    assert_eq!(across.status, 200, "{across:?}");
    let text = across.body["text"].as_str().unwrap_or("");
    assert!(
        text.ends_with("presented: Bearer …"),
        "{}",
        &text[text.len().saturating_sub(40)..]
    );
    assert!(!text.contains(&TOKEN[..10]));
    let echoed = client
        .post(
            &format!("/conversations/{chat}/mcp/prompts"),
            json!({"connector": id, "name": "whoami"}),
        )
        .await?;
    assert_eq!(echoed.status, 200, "{echoed:?}");
    assert_eq!(
        echoed.body["text"], "presented: Bearer …",
        "{}",
        echoed.body
    );
    let missing = client
        .post(
            &format!("/conversations/{chat}/mcp/prompts"),
            json!({"connector": id, "name": "nope"}),
        )
        .await?;
    assert_eq!(missing.status, 502, "{missing:?}");
    assert_eq!(missing.body["error"]["type"], "mcp_error");

    for (body, field) in [
        (
            json!({"text": "x", "context": [{"connector": "mc_nope", "uri": "fake://glossary"}]}),
            "context[0].connector",
        ),
        (
            json!({"text": "x", "context": [{"connector": id}]}),
            "context[0].name",
        ),
        (
            json!({"text": "x", "context": [{"connector": id, "uri": "a://b", "name": "n"}]}),
            "context[0].uri",
        ),
        (
            json!({"text": "x", "context": [{"connector": id, "name": "brief", "arguments": {"topic": 3}}]}),
            "context[0].arguments.topic",
        ),
        (
            json!({"text": "x", "context": [{"connector": id, "uri": "fake://a\nb"}]}),
            "context[0].uri",
        ),
    ] {
        let refused = client.post(&path, body).await?;
        assert_eq!(refused.status, 400, "{refused:?}");
        assert_eq!(refused.body["error"]["field"], field, "{}", refused.body);
    }

    let put = client
        .call(
            reqwest::Method::PUT,
            &format!("/conversations/{chat}/mcp"),
            Some(json!({"off": [id]})),
        )
        .await?;
    assert_eq!(put.status, 200, "{put:?}");
    let off = client
        .post(
            &path,
            json!({"text": "x", "context": [{"connector": id, "uri": "fake://glossary"}]}),
        )
        .await?;
    assert_eq!(off.status, 403, "{off:?}");
    assert_eq!(off.body["error"]["type"], "mcp_refused");
    let listed = client
        .get(&format!("/conversations/{chat}/mcp/prompts"))
        .await?;
    assert_eq!(
        listed.body["prompts"],
        json!([]),
        "an off server lists nothing: {}",
        listed.body
    );
    let put = client
        .call(
            reqwest::Method::PUT,
            &format!("/conversations/{chat}/mcp"),
            Some(json!({"off": []})),
        )
        .await?;
    assert_eq!(put.status, 200, "{put:?}");

    fake.set_down(true);
    // A fresh chat: the first chat's session would not notice the server
    // is gone until it asks.
    let other = client.create_chat().await?;
    let down = client
        .post(
            &format!("/conversations/{other}/messages"),
            json!({"text": "x", "context": [{"connector": id, "uri": "fake://glossary"}]}),
        )
        .await?;
    assert_eq!(down.status, 502, "{down:?}");
    assert_eq!(down.body["error"]["type"], "mcp_error");
    assert!(user_messages(&client, &other).await?.is_empty());
    fake.set_down(false);

    assert!(
        user_messages(&client, &chat).await?.is_empty(),
        "nothing stored"
    );
    let ok = client
        .post(
            &path,
            json!({"text": "Go", "context": [
                {"connector": id, "uri": "fake://logo.png"},
                {"connector": id, "name": "brief", "arguments": {"topic": "bicycles"}},
                {"connector": id, "uri": "fake://big"},
            ]}),
        )
        .await?;
    assert_eq!(ok.status, 202, "{ok:?}");
    client
        .wait_run(&chat, &run_id(&ok.body)?, &["done", "failed"], QUICK)
        .await?;
    let stored = user_messages(&client, &chat).await?;
    let text = stored[0]["text"].as_str().context("text")?.to_string();
    assert!(
        text.contains("[binary content of fake://logo.png (image/png, 16 bytes): left out]"),
        "{text}"
    );
    assert!(text.contains("Write a brief about bicycles."), "{text}");
    assert!(
        text.contains("resource fake://big, cut at 256 KiB]"),
        "a block cut in all"
    );
    assert!(!text.contains(TOKEN));

    // An edit brings the context back in front of the new words: over the
    // typed text's limit with it, taken, and the records kept.
    let lead = text.strip_suffix("Go").context("typed text last")?;
    assert!(
        lead.chars().count() > 256 * 1024,
        "the context alone is past a message's limit"
    );
    let mid = stored[0]["id"].as_str().context("id")?;
    let edited = client
        .post(
            &format!("{path}/{mid}/edit"),
            json!({"text": format!("{lead}Go again")}),
        )
        .await?;
    assert_eq!(edited.status, 202, "{edited:?}");
    let stored = user_messages(&client, &chat).await?;
    let last = stored.last().context("the edited message")?;
    assert!(last["text"]
        .as_str()
        .unwrap_or("")
        .ends_with("\n\nGo again"));
    let kinds: Vec<&str> = last["attachments"]
        .as_array()
        .context("records kept")?
        .iter()
        .filter_map(|r| r["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["context", "context", "context"]);
    // The token the fake echoed, cut across 256 KiB or whole: in no file.
    let holding = chatd.files_holding(&[TOKEN])?;
    assert!(holding.is_empty(), "the token in {holding:?}");
    Ok(())
}
