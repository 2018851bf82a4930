//! `tandem mcp …`: the owner's MCP servers (chatd's MCP connectors,
//! `/v1/chat-app/mcp-connectors`), through chatd's front door with the
//! forward key. A token or a header's value is never an argument: it comes
//! from a file, stdin or a prompt without echo, goes into the request body
//! and nowhere else; chatd seals it and never shows it again.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use reqwest::Method;
use serde_json::{json, Map, Value};

use crate::answer::{first_line, text};
use crate::client::Client;
use crate::tty;

pub const LONG_ABOUT: &str = "\
MCP servers give chats more tools. An MCP connector is one server: a remote
one by its address (Streamable HTTP), with a token or headers when it asks
for a key, or a local command (stdio: npx …, uvx …, a program) that each
chat runs in its own sandbox. chatd keeps the connectors; the token, the
headers and a command's environment are sealed and never shown again (a
connector says only whether it has them).

A connector reaches public addresses only: every address its name resolves
to, and every redirect, is checked when it connects. A server at home (a
private or loopback address) needs `mcp_allow_private = true` under
[chatd] in the settings.

A token or a header's value is never an argument (it would stay in the
shell's history and show in ps): --token-file and --headers-file read them
(`-` for stdin), or --token asks for the token without echo.

A connector is named by its id (mc_…) or its name. Exit 0 when the request
was done (for `test`: when the server connected and listed its tools), 1
otherwise.

Examples:
  tandem mcp add Docs https://mcp.example.com/mcp --token-file ~/.config/tandem/docs.token
  tandem mcp test Docs
  tandem mcp list
  tandem mcp off Docs";

#[derive(clap::Subcommand)]
pub enum McpCommand {
    /// Every connector, one row each: id, name, state, host, tools.
    ///
    /// Example: tandem mcp list
    List,
    /// Add an MCP server: a remote one by its address, or a command.
    #[command(long_about = ADD_ABOUT)]
    Add(AddArgs),
    /// Connect to a connector's server now and list its tools.
    ///
    /// Exit 0 when it connected, 1 with the reason otherwise (a refused
    /// sign-in says to check the token or the headers).
    ///
    /// Example: tandem mcp test Docs
    Test {
        /// The connector's id or name.
        connector: String,
    },
    /// Switch a connector on: chats use its tools again (with --chat, in
    /// that chat again).
    ///
    /// Examples: tandem mcp on Docs; tandem mcp on Docs --chat c_58bc144a880ac418
    On {
        /// The connector's id or name.
        connector: String,
        /// Only for this chat (its id): undo `off --chat`.
        #[arg(long, value_name = "CHAT")]
        chat: Option<String>,
    },
    /// Switch a connector off: no chat or agent uses it (with --chat, only
    /// that chat stops using it).
    ///
    /// Examples: tandem mcp off Docs; tandem mcp off Docs --chat c_58bc144a880ac418
    Off {
        /// The connector's id or name.
        connector: String,
        /// Only for this chat (its id).
        #[arg(long, value_name = "CHAT")]
        chat: Option<String>,
    },
    /// What a chat is offered: its built-in tools, its MCP servers' tools,
    /// and why a server or a tool is not usable there.
    ///
    /// Example: tandem mcp tools c_58bc144a880ac418
    Tools {
        /// The chat's id.
        chat: String,
    },
    /// A chat's prompts from its MCP servers: server, name, arguments
    /// (`*`: required), description. Send one with a message: tandem chat
    /// send --prompt SERVER:NAME --arg NAME=VALUE.
    ///
    /// Example: tandem mcp prompts c_58bc144a880ac418
    Prompts {
        /// The chat's id.
        chat: String,
    },
    /// A chat's resources from its MCP servers (and their templates):
    /// server, URI, name, type. Send one with a message: tandem chat send
    /// --resource SERVER:URI.
    ///
    /// Example: tandem mcp resources c_58bc144a880ac418
    Resources {
        /// The chat's id.
        chat: String,
    },
    /// Print what a prompt or a resource gives now, as a message would get
    /// it (cut at 256 KiB, binary parts named, not shown).
    ///
    /// Examples: tandem mcp show c_58bc144a880ac418 --prompt Docs:review --arg lang=Go;
    /// tandem mcp show c_58bc144a880ac418 --resource Wiki:wiki://home
    Show {
        /// The chat's id (its servers, as it may use them).
        chat: String,
        /// A prompt: its server's name (or id), a colon, its name.
        #[arg(
            long,
            value_name = "SERVER:NAME",
            conflicts_with = "resource",
            required_unless_present = "resource"
        )]
        prompt: Option<String>,
        /// A resource: its server's name (or id), a colon, its URI.
        #[arg(long, value_name = "SERVER:URI")]
        resource: Option<String>,
        /// A prompt's argument (repeat for more).
        #[arg(long = "arg", value_name = "NAME=VALUE")]
        args: Vec<String>,
    },
    /// Remove a connector with its sealed token and headers.
    ///
    /// Example: tandem mcp rm Docs
    Rm {
        /// The connector's id or name.
        connector: String,
    },
}

const ADD_ABOUT: &str = "\
Add a remote MCP server by its address (http:// or https://, no user name
or password in it), or a local one by its command after `--` (stdio: run
without a shell, in each chat's sandbox, as a user of its own). chatd saves
it, then this command tests it: it connects (a command: starts it in a
sandbox of the test's own, with no network), lists the tools and prints
them, or the reason it could not.

The token (sent as `Authorization: Bearer <token>`): --token-file PATH (the
token alone on one line; `-` for stdin), or --token to be asked for it
without echo. Other headers: --headers-file PATH, one `Name: value` a line.

A command's environment (keys it reads): --env-file PATH, one `NAME=value`
a line (`-` for stdin); sealed like a token.

--off saves it switched off: chats do not use it until `tandem mcp on`. An
address that is plainly internal (an IP literal of a private or loopback
range, localhost) is refused unless it is saved off or the box allows
private addresses (mcp_allow_private).

Examples:
  tandem mcp add Docs https://mcp.example.com/mcp --token-file ~/.config/tandem/docs.token
  tandem mcp add Search https://search.example.org/mcp --headers-file search.headers
  tandem mcp add Everything -- npx -y @modelcontextprotocol/server-everything
  tandem mcp add Search --env-file search.env -- npx -y @example/search-mcp
  pass show mcp/docs | tandem mcp add Docs https://mcp.example.com/mcp --token-file -";

#[derive(clap::Args)]
pub struct AddArgs {
    /// A name for people, unique among the connectors (1 to 60 characters).
    name: String,
    /// The server's MCP address, e.g. https://mcp.example.com/mcp (or a
    /// command after `--`).
    #[arg(required_unless_present = "command")]
    url: Option<String>,
    /// A local server: its command and arguments, run without a shell.
    #[arg(last = true, value_name = "COMMAND", conflicts_with_all = ["url", "token", "token_file", "headers_file"])]
    command: Vec<String>,
    /// The file holding a command's environment, one `NAME=value` a line
    /// (`-`: stdin).
    #[arg(long, value_name = "PATH", requires = "command")]
    env_file: Option<PathBuf>,
    /// The file holding the token alone on one line (`-`: stdin).
    #[arg(long, value_name = "PATH", conflicts_with = "token")]
    token_file: Option<PathBuf>,
    /// Ask for the token without echo.
    #[arg(long)]
    token: bool,
    /// The file holding other headers, one `Name: value` a line (`-`: stdin).
    #[arg(long, value_name = "PATH")]
    headers_file: Option<PathBuf>,
    /// Save it switched off.
    #[arg(long)]
    off: bool,
}

pub async fn exec(command: McpCommand) -> anyhow::Result<ExitCode> {
    // Secrets are read before chatd is asked anything: an unreadable file
    // sends nothing.
    if let McpCommand::Add(args) = command {
        let body = args.body().await?;
        let client = Client::new()?;
        let made = call(&client, Method::POST, "", Some(body)).await?;
        let id = text(&made["id"]).to_string();
        println!("added {}", line(&made));
        return test(&client, &id).await;
    }
    let client = Client::new()?;
    match command {
        McpCommand::Add(_) => unreachable!("handled above"),
        McpCommand::List => {
            let listed = call(&client, Method::GET, "", None).await?;
            let all = listed["connectors"].as_array().cloned().unwrap_or_default();
            if all.is_empty() {
                println!("no MCP connectors (add one: tandem mcp add --help)");
                return Ok(ExitCode::SUCCESS);
            }
            for c in &all {
                println!("{}", line(c));
            }
        }
        McpCommand::Test { connector } => {
            let id = find(&client, &connector).await?;
            return test(&client, &id).await;
        }
        McpCommand::On { connector, chat } => switch(&client, &connector, chat, true).await?,
        McpCommand::Off { connector, chat } => switch(&client, &connector, chat, false).await?,
        McpCommand::Tools { chat } => {
            let view = client
                .ask(Method::GET, &format!("/conversations/{chat}/tools"), None)
                .await?;
            print!("{}", tools_text(&view));
        }
        McpCommand::Prompts { chat } => super::mcp_context::print_prompts(&client, &chat).await?,
        McpCommand::Resources { chat } => {
            super::mcp_context::print_resources(&client, &chat).await?
        }
        McpCommand::Show {
            chat,
            prompt,
            resource,
            args,
        } => {
            super::mcp_context::show(
                &client,
                &chat,
                prompt.as_deref(),
                resource.as_deref(),
                &args,
            )
            .await?
        }
        McpCommand::Rm { connector } => {
            let id = find(&client, &connector).await?;
            call(&client, Method::DELETE, &format!("/{id}"), None).await?;
            println!("removed {id} ({connector})");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Switches a connector on or off: for the box, or with `chat` for that
/// chat alone.
async fn switch(
    client: &Client,
    connector: &str,
    chat: Option<String>,
    on: bool,
) -> anyhow::Result<()> {
    let id = find(client, connector).await?;
    let word = if on { "on" } else { "off" };
    match chat {
        Some(chat) => {
            switch_in_chat(client, &chat, &id, on).await?;
            println!("{connector}: {word} in chat {chat}");
        }
        None => {
            let verb = if on { "enable" } else { "disable" };
            let c = call(client, Method::POST, &format!("/{id}/{verb}"), None).await?;
            println!("{}", line(&c));
        }
    }
    Ok(())
}

/// Switches connector `id` on or off for one chat: the chat's list of
/// connectors off, read and written back whole.
async fn switch_in_chat(client: &Client, chat: &str, id: &str, on: bool) -> anyhow::Result<()> {
    let path = format!("/conversations/{chat}");
    let view = client
        .ask(Method::GET, &format!("{path}/tools"), None)
        .await?;
    let mut off: Vec<String> = view["mcp"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["on"] == false)
        .filter_map(|c| c["id"].as_str().map(str::to_string))
        .filter(|c| c != id)
        .collect();
    if !on {
        off.push(id.to_string());
    }
    client
        .ask(
            Method::PUT,
            &format!("{path}/mcp"),
            Some(serde_json::json!({ "off": off })),
        )
        .await?;
    Ok(())
}

/// A chat's tools: one line each, then its MCP servers with why not.
pub(crate) fn tools_text(view: &Value) -> String {
    let mut out = String::new();
    for t in view["tools"].as_array().into_iter().flatten() {
        let from = match t["connector"].as_str() {
            Some(c) => format!("mcp {c}"),
            None => "built-in".into(),
        };
        let why = match t["reason"].as_str() {
            Some(r) => format!("  (not usable: {r})"),
            None => String::new(),
        };
        out.push_str(&format!(
            "  {:<28} {:<24} {}{why}\n",
            text(&t["name"]),
            from,
            first_line(text(&t["description"]))
        ));
    }
    let servers = view["mcp"].as_array().cloned().unwrap_or_default();
    if !servers.is_empty() {
        out.push_str("MCP servers:\n");
    }
    for c in &servers {
        out.push_str(&format!(
            "  {:<20} {:<20} {:<14} {}\n",
            text(&c["id"]),
            text(&c["name"]),
            text(&c["state"]),
            c["reason"].as_str().unwrap_or("used here")
        ));
    }
    let groups: Vec<&Value> = view["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|g| !text(&g["name"]).starts_with("mcp:"))
        .collect();
    if !groups.is_empty() {
        out.push_str("Tool groups (tandem chat tools CHAT --off GROUP | --on GROUP):\n");
    }
    for g in groups {
        let why = match g["reason"].as_str() {
            Some(r) => format!("  (cannot serve now: {r})"),
            None => String::new(),
        };
        let word = if g["on"] == true { "on" } else { "off" };
        out.push_str(&format!(
            "  {:<14} {:<14} {word}{why}\n",
            text(&g["name"]),
            text(&g["label"])
        ));
    }
    out
}

/// Tests a connector and prints its tools, or the reason (exit 1).
async fn test(client: &Client, id: &str) -> anyhow::Result<ExitCode> {
    eprintln!("tandem: connecting to {id}'s server (30 s at most)");
    let tested = call(client, Method::POST, &format!("/{id}/test"), None).await?;
    if tested["ok"] != true {
        let why = tested["reason"].as_str().unwrap_or("no reason given");
        eprintln!("{id}: {}: {why}", text(&tested["state"]));
        return Ok(ExitCode::FAILURE);
    }
    let tools = tested["tool_details"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    println!("{id}: connected, {} tools", tools.len());
    for tool in &tools {
        match tool["description"].as_str() {
            Some(d) => println!("  {:<28} {}", text(&tool["name"]), first_line(d)),
            None => println!("  {}", text(&tool["name"])),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A connector's id from its id or its name (any case).
async fn find(client: &Client, connector: &str) -> anyhow::Result<String> {
    if connector.starts_with("mc_") {
        return Ok(connector.to_string());
    }
    let listed = call(client, Method::GET, "", None).await?;
    let all = listed["connectors"].as_array().cloned().unwrap_or_default();
    all.iter()
        .find(|c| text(&c["name"]).eq_ignore_ascii_case(connector))
        .map(|c| text(&c["id"]).to_string())
        .with_context(|| format!("no MCP connector is named {connector} (tandem mcp list)"))
}

/// One row: id, name, state, host, what is saved, tools.
fn line(c: &Value) -> String {
    let mut saved = Vec::new();
    if c["has_token"] == true {
        saved.push("token");
    }
    if c["has_headers"] == true {
        saved.push("headers");
    }
    if c["has_env"] == true {
        saved.push("env");
    }
    let tools = c["tools"].as_array().map_or(0, Vec::len);
    let mut out = format!(
        "{}  {:<20} {:<14} {:<28} {:<14} {} tools",
        text(&c["id"]),
        text(&c["name"]),
        text(&c["state"]),
        // An http connector's host; a stdio one's command.
        c["host"].as_str().unwrap_or_else(|| text(&c["command"])),
        if saved.is_empty() {
            "-".to_string()
        } else {
            saved.join("+")
        },
        tools
    );
    if let Some(why) = c["reason"].as_str() {
        out.push_str(&format!("\n    {why}"));
    }
    out
}

impl AddArgs {
    async fn body(self) -> anyhow::Result<Value> {
        let token = match (&self.token_file, self.token) {
            (Some(path), _) => Some(tty::token_from_file(path, "token").await?),
            (None, true) => Some(tty::token_from_stdin("token").await?),
            (None, false) => None,
        };
        let headers = match &self.headers_file {
            Some(path) => Some(pairs_from(path, ':')?),
            None => None,
        };
        let mut body = Map::new();
        body.insert("name".into(), json!(self.name));
        body.insert("enabled".into(), json!(!self.off));
        if let Some((program, args)) = self.command.split_first() {
            body.insert("transport".into(), json!("stdio"));
            body.insert("command".into(), json!(program));
            body.insert("args".into(), json!(args));
            if let Some(path) = &self.env_file {
                body.insert("env".into(), Value::Object(pairs_from(path, '=')?));
            }
            return Ok(Value::Object(body));
        }
        body.insert("transport".into(), json!("http"));
        body.insert("url".into(), json!(self.url));
        if let Some(headers) = headers {
            body.insert("headers".into(), Value::Object(headers));
        }
        // The token goes in last: the only place it is exposed.
        if let Some(token) = token {
            body.insert("token".into(), json!(token.expose()));
        }
        Ok(Value::Object(body))
    }
}

/// `Name: value` (headers) or `NAME=value` (environment) lines, split at
/// `sep` (blank lines and `#` comments skipped). An error names the line,
/// never its value.
fn pairs_from(path: &Path, sep: char) -> anyhow::Result<Map<String, Value>> {
    let text = if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).context("reading stdin")?
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?
    };
    let mut out = Map::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((name, value)) = line.split_once(sep) else {
            bail!("{} line {}: not `Name{sep} value`", path.display(), n + 1);
        };
        out.insert(name.trim().to_string(), json!(value.trim()));
    }
    if out.is_empty() {
        bail!("{} holds no `Name{sep} value` line", path.display());
    }
    Ok(out)
}

/// A request under `/v1/chat-app/mcp-connectors`; a refusal is one line.
async fn call(
    client: &Client,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> anyhow::Result<Value> {
    client
        .ask(method, &format!("/mcp-connectors{path}"), body)
        .await
}
