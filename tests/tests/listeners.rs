//! Every daemon's listeners and chatd's start-up: the data folder keeps the
//! o+x hostexecd's `run_as` needs.

use std::time::Duration;

use anyhow::Context;
use serde_json::json;
use tandem_tests::harness::{bash_call, tool_results, Chatd, Hostexecd, Sim};

const QUICK: Duration = Duration::from_secs(20);

fn mode_of(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|m| m.permissions().mode() & 0o777)
        .unwrap_or(0)
}

/// With hostexecd's `run_as`, the commands' user passes through chatd's
/// data folder (o+x) to reach `homes/`. chatd used to make the folder 0700
/// at every start, so every command failed after a restart and hostexecd
/// refused to start again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_chatd_keeps_its_data_folders_o_x_and_host_commands_still_run(
) -> anyhow::Result<()> {
    let mut hostexecd = Hostexecd::start("").await?;
    // hostexecd's chats' folder, 0711 as docs/hostexec.md asks.
    let data = hostexecd.chat_data.clone();
    assert_eq!(mode_of(&data), 0o711);
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let socket = hostexecd.socket.to_string_lossy().to_string();
    let data_text = data.to_string_lossy().to_string();
    let mut chatd = Chatd::start(
        &sim.url(),
        &[
            ("QSE_CHAT_DATA", data_text.as_str()),
            ("QSE_HOSTEXEC_SOCKET", socket.as_str()),
            ("QSE_CHATS_HOST_EXEC", "on"),
        ],
    )
    .await?;
    assert_eq!(mode_of(&data), 0o711, "after chatd's first start");
    chatd.restart().await?;
    assert_eq!(mode_of(&data), 0o711, "after chatd's restart");

    let client = chatd.client();
    let chat = client.create_chat_in("auto").await?;
    sim.faults(json!([bash_call("echo passed through"), {"tokens": 2}]))
        .await?;
    let sent = client.send(&chat, "run it").await?;
    let run = sent["run_id"].as_str().context("run id")?;
    let record = client
        .wait_run(&chat, run, &["done", "failed", "stopped", "paused"], QUICK)
        .await?;
    assert_eq!(record["status"], "done", "{record}");
    let results = tool_results(&client.snapshot(&chat).await?);
    let first = results.first().context("a tool result")?;
    assert!(first.contains("passed through"), "{first}");
    assert!(first.contains("[exit code 0 after"), "{first}");

    // hostexecd checks at start that its user can pass: it starts again.
    hostexecd.sigterm(Duration::from_secs(15))?;
    hostexecd.spawn()?;
    hostexecd.wait_healthy().await?;
    Ok(())
}
