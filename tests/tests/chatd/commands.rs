//! Slash commands end to end: the real `chatd` and `engine-sim`. A message
//! whose text is a command runs it and is not sent; the answer is the
//! command's text (the same for the page, the terminal and a bot); a text
//! that only starts with `/` is a message; a command that needs an idle
//! chat answers 409 while a run works.

use anyhow::Context;
use serde_json::{json, Value};
use tandem_tests::harness::{wait_until, Chatd, Client, Sim};

use crate::scripted::{script, LONG};

async fn start() -> anyhow::Result<(Sim, Chatd, Client)> {
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start(&sim.url(), &[]).await?;
    let client = chatd.client();
    Ok((sim, chatd, client))
}

async fn command(client: &Client, chat: &str, body: Value) -> anyhow::Result<(u16, Value)> {
    let sent = client
        .post(&format!("/conversations/{chat}/messages"), body)
        .await?;
    Ok((sent.status, sent.body))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_runs_instead_of_being_sent_and_answers_its_text() -> anyhow::Result<()> {
    let (_sim, _chatd, client) = start().await?;
    let chat = client.create_chat().await?;

    let (status, help) = command(&client, &chat, json!({"text": "/help"})).await?;
    assert_eq!(status, 200, "{help}");
    assert_eq!(help["command"], "help");
    let text = help["text"].as_str().unwrap_or("");
    for name in [
        "/goal", "/loop", "/model", "/about", "/compact", "/clear", "/new", "/agent",
    ] {
        assert!(text.contains(name), "{name} in {text}");
    }
    // The same answer by the `command` field.
    let (_, again) = command(&client, &chat, json!({"command": "help"})).await?;
    assert_eq!(again["text"], help["text"]);
    let snapshot = client.snapshot(&chat).await?;
    assert!(
        snapshot["messages"].as_array().is_some_and(Vec::is_empty),
        "a command stores no message: {snapshot}"
    );

    let (_, about) = command(&client, &chat, json!({"text": "/about"})).await?;
    let text = about["text"].as_str().unwrap_or("");
    assert!(text.contains("Model: sim-"), "{text}");
    assert!(about["tools"].as_u64().unwrap_or(0) > 3, "{about}");
    assert!(about["context_window"].as_u64().unwrap_or(0) > 0, "{about}");

    // /loop and /goal make what their routes make.
    let (status, made) =
        command(&client, &chat, json!({"text": "/loop 5m check the build"})).await?;
    assert_eq!(status, 200, "{made}");
    assert_eq!(made["interval"], "5m");
    assert_eq!(
        made["state"], "pending",
        "the chat's first loop waits for a yes"
    );
    assert!(
        made["text"].as_str().unwrap_or("").contains("say yes"),
        "{made}"
    );
    let (_, listed) = command(&client, &chat, json!({"text": "/loop list"})).await?;
    assert!(
        listed["text"].as_str().unwrap_or("").contains("every 5m"),
        "{listed}"
    );
    let (_, stopped) = command(&client, &chat, json!({"text": "/loop stop"})).await?;
    assert_eq!(stopped["removed"], 1, "{stopped}");

    let (status, goal) = command(&client, &chat, json!({"text": "/goal"})).await?;
    assert_eq!(status, 200);
    assert!(
        goal["text"].as_str().unwrap_or("").contains("no goal"),
        "{goal}"
    );

    // A text that only starts with / is a message.
    let (status, sent) = command(&client, &chat, json!({"text": "/etc/hosts has a typo"})).await?;
    assert_eq!(status, 202, "{sent}");
    assert!(sent["run_id"].is_string());

    // A trigger's prompt is always a message.
    let theirs = client.create_chat().await?;
    let (status, sent) = command(
        &client,
        &theirs,
        json!({"text": "/help", "origin": "trigger"}),
    )
    .await?;
    assert_eq!(status, 202, "{sent}");

    // Bad commands are refused by name.
    let (status, bad) = command(&client, &chat, json!({"command": "nope"})).await?;
    assert_eq!(status, 400, "{bad}");
    assert_eq!(bad["error"]["field"], "command");
    let (status, bad) = command(&client, &chat, json!({"text": "/agent"})).await?;
    assert_eq!(status, 400, "{bad}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_that_need_an_idle_chat_answer_409_while_a_run_works_and_the_list_has_choices(
) -> anyhow::Result<()> {
    let (sim, _chatd, client) = start().await?;
    let chat = client.create_chat().await?;
    script(&sim, &chat, vec![json!({"tokens": 4000, "tps": 20})]).await?;
    client.send(&chat, "a long question").await?;
    wait_until("the run to stream", LONG, || async {
        let snapshot = client.snapshot(&chat).await.ok()?;
        (snapshot["conversation"]["state"] == "running").then_some(())
    })
    .await?;
    for text in ["/clear", "/compact", "/model sim-large"] {
        let (status, refused) = command(&client, &chat, json!({"text": text})).await?;
        assert_eq!(status, 409, "{text}: {refused}");
        assert_eq!(refused["error"]["type"], "run_active", "{text}: {refused}");
    }
    // A goal set while it works follows the turn that runs.
    let (status, goal) =
        command(&client, &chat, json!({"text": "/goal write the summary"})).await?;
    assert_eq!(status, 200, "{goal}");
    assert!(
        goal["text"]
            .as_str()
            .unwrap_or("")
            .contains("follows the turn"),
        "{goal}"
    );
    client
        .post(&format!("/conversations/{chat}/stop"), json!({}))
        .await?;

    let listed = client
        .get(&format!("/commands?conversation_id={chat}"))
        .await?;
    assert_eq!(listed.status, 200, "{listed:?}");
    let commands = listed.body["commands"].as_array().context("commands")?;
    let choices = |name: &str| -> Vec<String> {
        commands
            .iter()
            .find(|c| c["name"] == name)
            .and_then(|c| c["choices"].as_array())
            .map(|c| {
                c.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert!(
        choices("model").iter().any(|m| m.starts_with("sim-")),
        "{commands:?}"
    );
    assert_eq!(choices("goal"), ["clear", "resume", "pause"]);
    assert_eq!(choices("loop"), ["list"]);
    let home = client.get("/commands").await?;
    let goal_row = home.body["commands"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "goal").cloned())
        .context("goal")?;
    assert_eq!(goal_row["home"], false, "no goal before a chat exists");
    Ok(())
}
