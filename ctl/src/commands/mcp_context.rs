//! A chat's MCP prompts and resources from the terminal: `tandem mcp
//! prompts|resources|show CHAT`, and the `--prompt`, `--resource` and
//! `--arg` of `tandem chat send`, which become the message's `context`.

use anyhow::{bail, Context};
use reqwest::Method;
use serde_json::{json, Map, Value};

use crate::answer::{first_line, text};
use crate::client::Client;

/// `tandem mcp prompts CHAT`: server, name, arguments (`*` required), description.
pub async fn print_prompts(client: &Client, chat: &str) -> anyhow::Result<()> {
    let listed = list(client, chat, "prompts").await?;
    let all = listed["prompts"].as_array().cloned().unwrap_or_default();
    if all.is_empty() {
        println!("no prompts from this chat's MCP servers");
    }
    for p in &all {
        let args: Vec<String> = p["arguments"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| {
                let star = if a["required"] == true { "*" } else { "" };
                format!("{}{star}", text(&a["name"]))
            })
            .collect();
        println!(
            "  {:<16} {:<24} {:<24} {}",
            text(&p["server"]),
            text(&p["name"]),
            if args.is_empty() {
                "-".into()
            } else {
                args.join(" ")
            },
            first_line(text(&p["description"]))
        );
    }
    print_unavailable(&listed);
    Ok(())
}

/// `tandem mcp resources CHAT`: server, URI, name, type; then templates.
pub async fn print_resources(client: &Client, chat: &str) -> anyhow::Result<()> {
    let listed = list(client, chat, "resources").await?;
    let all = listed["resources"].as_array().cloned().unwrap_or_default();
    let templates = listed["templates"].as_array().cloned().unwrap_or_default();
    if all.is_empty() && templates.is_empty() {
        println!("no resources from this chat's MCP servers");
    }
    for r in &all {
        println!(
            "  {:<16} {:<40} {:<20} {}",
            text(&r["server"]),
            text(&r["uri"]),
            text(&r["name"]),
            r["mime_type"].as_str().unwrap_or("-")
        );
    }
    if !templates.is_empty() {
        println!("templates (read one with its fields filled in):");
    }
    for t in &templates {
        println!(
            "  {:<16} {:<40} {}",
            text(&t["server"]),
            text(&t["uri_template"]),
            text(&t["name"])
        );
    }
    print_unavailable(&listed);
    Ok(())
}

/// `tandem mcp show CHAT --prompt S:NAME [--arg K=V] | --resource S:URI`:
/// the text a message would get, as the server gives it now.
pub async fn show(
    client: &Client,
    chat: &str,
    prompt: Option<&str>,
    resource: Option<&str>,
    args: &[String],
) -> anyhow::Result<()> {
    let prompts: Vec<String> = prompt.map(str::to_string).into_iter().collect();
    let resources: Vec<String> = resource.map(str::to_string).into_iter().collect();
    let asked = context_of(client, chat, &prompts, &resources, args).await?;
    let Some(one) = asked.first() else {
        bail!("give --prompt SERVER:NAME or --resource SERVER:URI");
    };
    let route = if one.get("uri").is_some() {
        format!("/conversations/{chat}/mcp/resources/read")
    } else {
        format!("/conversations/{chat}/mcp/prompts")
    };
    let shown = client.ask(Method::POST, &route, Some(one.clone())).await?;
    println!("{}", text(&shown["text"]));
    if shown["cut"] == true {
        eprintln!("tandem: cut at 256 KiB, as a message would get it");
    }
    if let Some(n) = shown["left_out"].as_u64().filter(|n| *n > 0) {
        eprintln!("tandem: {n} binary parts left out (named in the text)");
    }
    Ok(())
}

/// What can be checked of `--prompt`, `--resource` and `--arg` before a
/// chat is made for the message: their shapes, their count and that each
/// names a saved connector.
pub async fn check(
    client: &Client,
    prompts: &[String],
    resources: &[String],
    args: &[String],
) -> anyhow::Result<()> {
    if prompts.is_empty() && !args.is_empty() {
        bail!("--arg is for a --prompt: give one");
    }
    if prompts.is_empty() && resources.is_empty() {
        return Ok(());
    }
    if prompts.len() + resources.len() > MAX_ITEMS {
        bail!("{MAX_ITEMS} prompts and resources a message at most");
    }
    for arg in args {
        if !arg.contains('=') {
            bail!("--arg {arg}: not NAME=VALUE");
        }
    }
    let connectors = client.ask(Method::GET, "/mcp-connectors", None).await?;
    let connectors = connectors["connectors"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let specs = prompts.iter().map(|p| (p, "prompt"));
    for (spec, what) in specs.chain(resources.iter().map(|r| (r, "resource"))) {
        server_of(&connectors, spec, what)?;
    }
    Ok(())
}

/// Prompts and resources one message may carry (chatd's limit).
const MAX_ITEMS: usize = 8;

/// The connector a `--prompt`/`--resource` names before its colon (by id
/// or name), and what follows the colon: (id, name, rest).
fn server_of(
    connectors: &[Value],
    spec: &str,
    what: &str,
) -> anyhow::Result<(String, String, String)> {
    let Some((server, rest)) = spec.split_once(':') else {
        bail!(
            "--{what} {spec}: not SERVER:{}",
            if what == "prompt" { "NAME" } else { "URI" }
        );
    };
    let c = connectors
        .iter()
        .find(|c| text(&c["id"]) == server || text(&c["name"]).eq_ignore_ascii_case(server))
        .with_context(|| {
            format!("--{what} {spec}: no MCP connector is named {server} (tandem mcp list)")
        })?;
    Ok((
        text(&c["id"]).to_string(),
        text(&c["name"]).to_string(),
        rest.to_string(),
    ))
}

/// A message's `context` from `--prompt SERVER:NAME`, `--resource
/// SERVER:URI` and `--arg NAME=VALUE`: a server by its name or id; each
/// prompt gets the arguments it declares; an argument no prompt declares,
/// or a required one missing, is an error before anything is sent.
pub async fn context_of(
    client: &Client,
    chat: &str,
    prompts: &[String],
    resources: &[String],
    args: &[String],
) -> anyhow::Result<Vec<Value>> {
    if prompts.is_empty() && resources.is_empty() {
        if !args.is_empty() {
            bail!("--arg is for a --prompt: give one");
        }
        return Ok(Vec::new());
    }
    let mut given = Map::new();
    for arg in args {
        let Some((name, value)) = arg.split_once('=') else {
            bail!("--arg {arg}: not NAME=VALUE");
        };
        given.insert(name.to_string(), json!(value));
    }
    let connectors = client.ask(Method::GET, "/mcp-connectors", None).await?;
    let connectors = connectors["connectors"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let server_of = |spec: &str, what: &str| server_of(&connectors, spec, what);
    let mut out = Vec::new();
    let mut used = std::collections::BTreeSet::new();
    if !prompts.is_empty() {
        let listed = list(client, chat, "prompts").await?;
        let all = listed["prompts"].as_array().cloned().unwrap_or_default();
        for spec in prompts {
            let (id, server, name) = server_of(spec, "prompt")?;
            let Some(p) = all
                .iter()
                .find(|p| p["connector"] == id.as_str() && p["name"] == name.as_str())
            else {
                let away = listed["unavailable"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|u| u["connector"] == id.as_str());
                if let Some(away) = away {
                    bail!(
                        "--prompt {spec}: {server} did not answer: {}",
                        text(&away["reason"])
                    );
                }
                bail!("--prompt {spec}: {server} offers no prompt {name} in this chat (tandem mcp prompts {chat})");
            };
            let mut arguments = Map::new();
            for a in p["arguments"].as_array().into_iter().flatten() {
                let arg = text(&a["name"]);
                match given.get(arg) {
                    Some(value) => {
                        arguments.insert(arg.to_string(), value.clone());
                        used.insert(arg.to_string());
                    }
                    None if a["required"] == true => {
                        bail!("--prompt {spec} needs --arg {arg}=…")
                    }
                    None => {}
                }
            }
            out.push(json!({"connector": id, "name": name, "arguments": arguments}));
        }
    }
    if let Some(unused) = given.keys().find(|k| !used.contains(*k)) {
        bail!("--arg {unused}: no prompt given takes it");
    }
    for spec in resources {
        let (id, _, uri) = server_of(spec, "resource")?;
        out.push(json!({"connector": id, "uri": uri}));
    }
    Ok(out)
}

async fn list(client: &Client, chat: &str, what: &str) -> anyhow::Result<Value> {
    client
        .ask(
            Method::GET,
            &format!("/conversations/{chat}/mcp/{what}"),
            None,
        )
        .await
}

fn print_unavailable(listed: &Value) {
    for u in listed["unavailable"].as_array().into_iter().flatten() {
        eprintln!(
            "tandem: {} did not answer: {}",
            text(&u["server"]),
            text(&u["reason"])
        );
    }
}
