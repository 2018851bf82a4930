//! `tandem chat policies`: tool policies (always, ask, never) for the box
//! (`defaults`) or one chat, set as TOOL=POLICY words and shown one a line.

use std::process::ExitCode;

use anyhow::bail;
use serde_json::{Map, Value};

use crate::answer::text;
use crate::client::Client;

/// Shows the policies of `target` (`defaults` or a chat id) after setting
/// `changes` (`tool=always|ask|never`, `tool=` or `tool=default` drops one).
pub async fn run(target: &str, changes: &[String]) -> anyhow::Result<ExitCode> {
    let path = match target {
        "defaults" => "/tools/policies".to_string(),
        chat => format!("/conversations/{chat}/tools/policies"),
    };
    let client = Client::new()?;
    let mut now = client.ask(reqwest::Method::GET, &path, None).await?;
    if !changes.is_empty() {
        let mut policies: Map<String, Value> =
            now["policies"].as_object().cloned().unwrap_or_default();
        for change in changes {
            let Some((tool, policy)) = change.split_once('=') else {
                bail!("{change:?} is not TOOL=POLICY (always, ask, never; TOOL= drops it)");
            };
            match policy.trim() {
                "" | "default" => {
                    policies.remove(tool.trim());
                }
                policy => {
                    policies.insert(tool.trim().to_string(), Value::from(policy));
                }
            }
        }
        let body = serde_json::json!({ "policies": policies });
        now = client.ask(reqwest::Method::PUT, &path, Some(body)).await?;
    }
    print!("{}", shown(&now));
    Ok(ExitCode::SUCCESS)
}

/// One line a tool; for a chat, where the policy comes from.
fn shown(view: &Value) -> String {
    let own = view["policies"].as_object().cloned().unwrap_or_default();
    let all = view["effective"]
        .as_object()
        .cloned()
        .unwrap_or(own.clone());
    if all.is_empty() {
        return "no tool policies: every tool follows the permission mode\n".to_string();
    }
    let mut out = String::new();
    for (tool, policy) in &all {
        let from = if view.get("effective").is_none() || own.contains_key(tool) {
            ""
        } else {
            "  (the box's)"
        };
        out.push_str(&format!("{tool:<28} {}{from}\n", text(policy)));
    }
    out
}
