//! What the chatd tests that script a chat's model share: the next answers
//! of one chat's session at the engine simulator, a turn sent and waited
//! for (bounded), and the bodies the simulator got for that chat.

use std::time::Duration;

use serde_json::{json, Value};
use tandem_tests::harness::{run_id, Client, Sim};

/// How long a scripted turn may take.
pub const LONG: Duration = Duration::from_secs(120);

/// The chat's next model answers, in order (`/sim/faults` with its session).
pub async fn script(sim: &Sim, chat: &str, steps: Vec<Value>) -> anyhow::Result<()> {
    sim.post(
        "/sim/faults",
        json!({"session": format!("chat-{chat}"), "next": steps}),
    )
    .await?;
    Ok(())
}

/// One tool call of a scripted answer.
pub fn call(name: &str, arguments: Value) -> Value {
    json!({"name": name, "arguments": arguments})
}

/// Sends `text`, waits for its run to end `done`, answers the snapshot.
pub async fn turn(client: &Client, chat: &str, text: &str) -> anyhow::Result<Value> {
    let run = run_id(&client.send(chat, text).await?)?;
    let record = client
        .wait_run(
            chat,
            &run,
            &["done", "failed", "stopped", "interrupted"],
            LONG,
        )
        .await?;
    anyhow::ensure!(record["status"] == "done", "{record}");
    client.snapshot(chat).await
}

/// The bodies of the requests the sim got for chat `chat`, in order.
pub async fn bodies_of(sim: &Sim, chat: &str) -> anyhow::Result<Vec<Value>> {
    let session = format!("chat-{chat}");
    Ok(sim
        .requests()
        .await?
        .into_iter()
        .filter(|r| r["session_id"] == session)
        .map(|r| r["body"].clone())
        .collect())
}
