//! `tandem chat web-search`: the box's web search settings shown one per
//! line, and NAME=VALUE words turned into the patch chatd takes. The
//! login's value is read from a file or stdin, never from the command line
//! (where the shell's history and `ps` would keep it), and never shown.

use std::io::Read;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context};
use serde_json::{Map, Value};

use crate::client::Client;

/// Shows the settings after setting `changes` and, from `auth_file` (`-`
/// for stdin), the login's value.
pub async fn run(changes: &[String], auth_file: Option<&Path>) -> anyhow::Result<ExitCode> {
    let mut patch = Map::new();
    for change in changes {
        let Some((name, value)) = change.split_once('=') else {
            bail!("{change:?} is not NAME=VALUE");
        };
        let name = name.trim();
        if name == "searxng_auth_value" {
            bail!("give the login's value with --auth-value-file FILE (- for stdin), not on the command line");
        }
        let value = match (name, value.trim()) {
            ("max_results" | "timeout_s", v) => match v.parse::<u64>() {
                Ok(n) => Value::from(n),
                Err(_) => Value::from(v),
            },
            ("time_range", "") => Value::Null,
            (_, v) => Value::from(v),
        };
        patch.insert(name.to_string(), value);
    }
    if let Some(file) = auth_file {
        let mut text = String::new();
        if file == Path::new("-") {
            std::io::stdin()
                .read_to_string(&mut text)
                .context("reading the login's value from stdin")?;
        } else {
            text = std::fs::read_to_string(file)
                .with_context(|| format!("reading the login's value from {}", file.display()))?;
        }
        let text = text.trim_end_matches(['\r', '\n']);
        patch.insert(
            "searxng_auth_value".into(),
            if text.is_empty() {
                Value::Null
            } else {
                Value::from(text)
            },
        );
    }
    let client = Client::new()?;
    let shown = if patch.is_empty() {
        client
            .call(reqwest::Method::GET, "/web-search", None)
            .await?
    } else {
        let body = Value::Object(patch);
        client
            .call(reqwest::Method::PUT, "/web-search", Some(body))
            .await?
    };
    for (name, value) in shown.as_object().into_iter().flatten() {
        let text = match value {
            Value::String(s) if s.is_empty() => "(none)".to_string(),
            Value::String(s) => s.clone(),
            Value::Null => "(any)".to_string(),
            other => other.to_string(),
        };
        println!("{name:<20} {text}");
    }
    Ok(ExitCode::SUCCESS)
}
