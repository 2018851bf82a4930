//! What the chat-level documents tests share: a real chatd on engine-sim,
//! and a message sent with files as a form, waited for to its end.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use reqwest::Method;
use serde_json::Value;
use tandem_tests::harness::{form_body, run_id, Chatd, Client, FormPart, Sim};

/// A run's end on a loaded 2-vCPU machine.
pub const BOUND: Duration = Duration::from_secs(60);

/// engine-sim (answering at once, with `sim_args`) and a chatd on it
/// (with `env`).
pub async fn start(
    sim_args: &[&str],
    env: &[(&str, &str)],
) -> anyhow::Result<(Sim, Chatd, Client)> {
    let mut args = vec!["--tokens-per-second", "0"];
    args.extend_from_slice(sim_args);
    let sim = Sim::start(&args)?;
    let chatd = Chatd::start(&sim.url(), env).await?;
    let client = chatd.client();
    Ok((sim, chatd, client))
}

/// A local file as a form's file part.
pub fn file_part(path: &Path, mime: &str) -> anyhow::Result<FormPart> {
    let name = path.file_name().context("a name")?.to_string_lossy();
    Ok(FormPart::file(&name, mime, std::fs::read(path)?))
}

/// Sends `text` with `files` as a form, waits for its run to end `done`;
/// the snapshot.
pub async fn send(
    client: &Client,
    chat: &str,
    text: &str,
    files: Vec<FormPart>,
) -> anyhow::Result<Value> {
    let mut parts = vec![FormPart::setting("text", text)];
    parts.extend(files);
    let answer = client
        .send_form(
            Method::POST,
            &format!("/conversations/{chat}/messages"),
            form_body(&parts),
        )
        .await?;
    anyhow::ensure!(answer.status == 202, "{answer:?}");
    let run = run_id(&answer.body)?;
    let ended = client
        .wait_run(chat, &run, &["done", "failed"], BOUND)
        .await?;
    anyhow::ensure!(ended["status"] == "done", "{ended}");
    client.snapshot(chat).await
}

/// The newest message of `role` in a snapshot.
pub fn last_of(snapshot: &Value, role: &str) -> anyhow::Result<Value> {
    snapshot["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == role))
        .cloned()
        .with_context(|| format!("a {role} message"))
}
