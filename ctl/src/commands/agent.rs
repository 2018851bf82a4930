//! `tandem agent …`: chatd's saved agents (`/v1/chat-app/agents`), through
//! chatd's front door with the forward key: the list, one in full with its
//! run history, add (or from a template), edit, the agent file (export and
//! import), rm, and the templates.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use reqwest::Method;
use serde_json::{json, Map, Value};

use crate::answer::{first_line, text};
use crate::client::{refusal, Client};

pub const LONG_ABOUT: &str = "\
Saved agents: a name, instructions put before chatd's own system text, a
model (or chatd's default) and the tools it grants. A chat made with one, a
trigger or a bot bound to one (`tandem trigger add --agent`, `tandem
connector add --agent`), and a sub-agent started as one all run with those;
an edit reaches their next turn.

An agent may keep to one folder (--folder): its chats reach that folder at
`folder/`, read only or read and write (--folder-mode), and their own chat
folder, nothing else of the box's files, and host bash is never offered to
them. While that folder is missing, chatd refuses its chats (409
agent_folder_missing) until it is back or another is chosen.

An agent is named by its id (a_…) or its name, in any case. An agent file
(`export`, `import`) holds its definition alone: no id, no times, no secret.

A refusal of chatd's is printed as one line, with the field it is about.
Exit 0 when the request was done, 1 otherwise.

Examples:
  tandem agent add --name Reviewer --instructions-file reviewer.md --tool read_file --tool grep
  tandem agent add --template reviewer
  tandem agent list
  tandem agent edit Reviewer --model qwen3-8b
  tandem agent add --name Clerk --folder ~/papers --folder-mode write
  tandem agent edit Clerk --no-folder
  tandem agent export Reviewer --out reviewer.agent.json
  tandem agent import reviewer.agent.json";

#[derive(clap::Subcommand)]
pub enum AgentCommand {
    /// Every saved agent, one row each: id, name, model, tools, folder,
    /// description.
    ///
    /// The folder is its path and mode, "missing" before it when the
    /// folder is not there, "unset" when none is chosen here, "-" for an
    /// agent that keeps to none.
    ///
    /// Example: tandem agent list
    List,
    /// One agent in full, and the chats that ran with it.
    ///
    /// Its instructions whole, its tools named and its folder with whether
    /// it is there (ok, missing or unset); then its run history:
    /// how many chats were made with it (running now, failed), and the
    /// newest 10 with who made them, how their last turn went and when.
    ///
    /// Example: tandem agent show Reviewer
    Show {
        /// The agent's id (a_…) or name (any case).
        agent: String,
    },
    /// Save a new agent, or one made from a template (`tandem agent
    /// templates`); prints its id.
    ///
    /// Tools: --tool (repeat it) grants only those, --no-tools grants none;
    /// with neither, the agent may use every tool of this chatd. A template
    /// grants no tool: grant some afterwards with `tandem agent edit`.
    ///
    /// Folder: with --folder its chats reach that folder at `folder/` (read
    /// only unless --folder-mode write) and their own chat folder, nothing
    /// else, and are never offered host bash.
    ///
    /// Example: tandem agent add --name Reviewer --instructions-file reviewer.md --tool read_file --tool grep
    ///
    /// Example: tandem agent add --name Clerk --folder ~/papers --folder-mode write
    Add(AddArgs),
    /// Change a saved agent: only what is given changes, the rest stays as
    /// it is.
    ///
    /// --tool (repeat it) replaces the list of tools it grants, --no-tools
    /// grants none, --all-tools grants every tool of this chatd again.
    /// --model '' goes back to chatd's default model.
    ///
    /// --folder moves it to another folder (in the mode it had, read for an
    /// agent that had none), --folder-mode alone changes the mode of the
    /// folder it has, --no-folder takes the limit away (its chats reach
    /// what any chat does); without them its folder stays.
    ///
    /// Example: tandem agent edit Reviewer --model qwen3-8b --tool read_file --tool grep
    ///
    /// Example: tandem agent edit Clerk --folder-mode read
    Edit(EditArgs),
    /// Print an agent's file, or write it to --out.
    ///
    /// The file is JSON: its name, description, instructions, model, tools
    /// and settings (no id, no secret), for `tandem agent import` here or on
    /// another box. --out writes a file readable by you alone, and refuses
    /// an existing one unless --force.
    ///
    /// Example: tandem agent export Reviewer --out reviewer.agent.json
    Export {
        /// The agent's id (a_…) or name (any case).
        agent: String,
        /// Write the file here rather than to stdout.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Replace FILE when it exists.
        #[arg(long, requires = "out")]
        force: bool,
    },
    /// Save a new agent from an agent file (`-`: stdin).
    ///
    /// Prints the new agent's id and name. A name in use gets " (2)", and a
    /// model or a tool this box does not have is dropped: each is said in a
    /// warning on stderr.
    ///
    /// Example: tandem agent import reviewer.agent.json
    Import {
        /// The agent file (`-`: stdin).
        file: PathBuf,
    },
    /// Delete a saved agent.
    ///
    /// The chats made with it stay, and go on as plain chats: chatd's own
    /// system text and every tool.
    ///
    /// Example: tandem agent rm Reviewer
    Rm {
        /// The agent's id (a_…) or name (any case).
        agent: String,
    },
    /// The templates an agent can be made from: id, name, what it is for.
    ///
    /// Example: tandem agent templates
    Templates,
}

/// What `add` and `edit` both set.
#[derive(clap::Args)]
pub struct Fields {
    /// What it is for, in a sentence (a chat's model reads it in list_agents).
    #[arg(long, value_name = "TEXT")]
    description: Option<String>,
    /// Its instructions, put before chatd's own system text.
    #[arg(long, value_name = "TEXT", conflicts_with = "instructions_file")]
    instructions: Option<String>,
    /// The file holding its instructions (`-`: stdin).
    #[arg(long, value_name = "PATH")]
    instructions_file: Option<PathBuf>,
    /// The model it runs on ('': chatd's default).
    #[arg(long, value_name = "MODEL")]
    model: Option<String>,
    /// A tool it may use (repeat it); only these are granted.
    #[arg(long = "tool", value_name = "TOOL", conflicts_with = "no_tools")]
    tools: Vec<String>,
    /// Grant no tool at all.
    #[arg(long)]
    no_tools: bool,
    /// off, registries or all: the network its chats start with (its
    /// trigger and bot runs never ask for more), under the box's ceiling.
    #[arg(long, value_name = "PRESET", value_parser = ["off", "registries", "all"])]
    network: Option<String>,
}

#[derive(clap::Args)]
pub struct AddArgs {
    /// Its name, unique among the agents (1 to 100 characters).
    #[arg(long, required_unless_present = "template")]
    name: Option<String>,
    /// Make it from this template (research, reviewer, digest, editor:
    /// `tandem agent templates`), named as the template or --name.
    #[arg(
        long,
        value_name = "ID",
        conflicts_with_all = ["description", "instructions", "instructions_file", "model", "tools", "no_tools", "folder", "folder_mode", "network"]
    )]
    template: Option<String>,
    #[command(flatten)]
    fields: Fields,
    /// Keep its chats to this folder (absolute, ~/…, or relative to here):
    /// they reach it at `folder/` and their own chat folder, nothing else,
    /// and are never offered host bash.
    #[arg(long, value_name = "PATH")]
    folder: Option<PathBuf>,
    /// What its chats may do in --folder: read (the default) or write
    /// (change, add and remove its files too).
    #[arg(long, value_name = "MODE", value_parser = ["read", "write"], requires = "folder")]
    folder_mode: Option<String>,
}

#[derive(clap::Args)]
#[command(override_usage = "tandem agent edit <AGENT> [OPTIONS] (one at least)")]
#[command(group(
    clap::ArgGroup::new("change")
        .required(true)
        .multiple(true)
        .args(["name", "description", "instructions", "instructions_file", "model", "tools", "no_tools", "all_tools", "folder", "folder_mode", "no_folder", "network"])
))]
pub struct EditArgs {
    /// The agent's id (a_…) or name (any case).
    agent: String,
    /// A new name (1 to 100 characters).
    #[arg(long)]
    name: Option<String>,
    #[command(flatten)]
    fields: Fields,
    /// Grant every tool of this chatd again.
    #[arg(long, conflicts_with_all = ["tools", "no_tools"])]
    all_tools: bool,
    /// Keep its chats to this folder instead (absolute, ~/…, or relative
    /// to here): they reach it at `folder/` and their own chat folder,
    /// nothing else, and are never offered host bash.
    #[arg(long, value_name = "PATH")]
    folder: Option<PathBuf>,
    /// read or write: what its chats may do in its folder (alone: the
    /// folder it has, in this mode).
    #[arg(long, value_name = "MODE", value_parser = ["read", "write"])]
    folder_mode: Option<String>,
    /// Keep it to no folder any more: its chats reach what any chat does.
    #[arg(long, conflicts_with_all = ["folder", "folder_mode"])]
    no_folder: bool,
}

/// Characters of a column the list cuts at.
const NAME_WIDTH: usize = 30;
const MODEL_WIDTH: usize = 24;
const TOOLS_WIDTH: usize = 32;
const FOLDER_WIDTH: usize = 40;
const DESCRIPTION_WIDTH: usize = 50;
/// Chats of the run history `show` prints.
const RUNS_SHOWN: usize = 10;

pub async fn exec(command: AgentCommand) -> anyhow::Result<ExitCode> {
    // An instructions file or an agent file is read before chatd is asked
    // anything: an unreadable file sends nothing.
    let client = Client::new()?;
    match command {
        AgentCommand::List => {
            let agents = all(&client).await?;
            print!("{}", table(&agents));
        }
        AgentCommand::Show { agent } => {
            let agent = find(&client, &agent).await?;
            let id = text(&agent["id"]);
            let history = call(&client, Method::GET, &format!("/{id}/runs"), None).await?;
            print!("{}", details(&agent));
            print!("{}", runs(&history));
        }
        AgentCommand::Add(args) => return add(&client, args).await,
        AgentCommand::Edit(args) => {
            let mut changes = args.fields.changes()?;
            if let Some(name) = args.name {
                changes.insert("name".into(), json!(name));
            }
            if args.all_tools {
                changes.insert("tools".into(), Value::Null);
            }
            let path = args.folder.as_deref().map(folder_path).transpose()?;
            let agent = find(&client, &args.agent).await?;
            let id = text(&agent["id"]).to_string();
            let folder = folder_change(&agent, path, args.folder_mode, args.no_folder)?;
            if let Some(folder) = folder {
                changes.insert("folder".into(), folder);
            }
            let body = replaced(&agent, &changes);
            let saved = call(&client, Method::PUT, &format!("/{id}"), Some(body)).await?;
            let mut changed: Vec<&str> = changes.keys().map(String::as_str).collect();
            changed.sort_unstable();
            println!(
                "changed {id} {}: {}",
                text(&saved["name"]),
                changed.join(", ")
            );
            if changes.contains_key("folder") {
                println!("folder: {}", folder_line(&saved));
            }
        }
        AgentCommand::Export { agent, out, force } => {
            if let Some(path) = &out {
                if !force && std::fs::symlink_metadata(path).is_ok() {
                    bail!(
                        "{} exists: not overwritten (--force replaces it)",
                        path.display()
                    );
                }
            }
            let agent = find(&client, &agent).await?;
            let id = text(&agent["id"]).to_string();
            let mut file = export(&client, &id).await?;
            if !file.ends_with('\n') {
                file.push('\n');
            }
            match out {
                None => print!("{file}"),
                Some(path) => {
                    write_private(&path, &file, force)?;
                    println!("wrote {} ({id} {})", path.display(), text(&agent["name"]));
                }
            }
        }
        AgentCommand::Import { file } => {
            let body = read_json(&file)?;
            let made = call(&client, Method::POST, "/import", Some(body)).await?;
            warn(&made["warnings"]);
            let agent = &made["agent"];
            println!("imported {} {}", text(&agent["id"]), text(&agent["name"]));
        }
        AgentCommand::Rm { agent } => {
            let agent = find(&client, &agent).await?;
            let id = text(&agent["id"]);
            call(&client, Method::DELETE, &format!("/{id}"), None).await?;
            println!("removed {id} ({})", text(&agent["name"]));
        }
        AgentCommand::Templates => {
            let listed = call(&client, Method::GET, "/templates", None).await?;
            print!("{}", templates(&listed));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `add`: the body from the flags, or the template made into an agent.
async fn add(client: &Client, args: AddArgs) -> anyhow::Result<ExitCode> {
    if let Some(template) = &args.template {
        // An id is a word: anything else would name another route.
        if template.is_empty()
            || !template
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            bail!("no template is named {template:?}; tandem agent templates lists them");
        }
        let mut body = Map::new();
        if let Some(name) = &args.name {
            body.insert("name".into(), json!(name));
        }
        let made = call(
            client,
            Method::POST,
            &format!("/templates/{template}/create"),
            Some(Value::Object(body)),
        )
        .await
        .map_err(|err| match err.to_string().contains("not_found") {
            true => anyhow::anyhow!("{err}; the templates: tandem agent templates"),
            false => err,
        })?;
        warn(&made["warnings"]);
        let agent = &made["agent"];
        println!(
            "added {} {} from the template {template}; tools: {} (grant some: tandem agent edit {} --tool NAME)",
            text(&agent["id"]),
            text(&agent["name"]),
            tools_word(&agent["tools"]),
            text(&agent["id"]),
        );
        return Ok(ExitCode::SUCCESS);
    }
    let mut body = args.fields.changes()?;
    body.insert("name".into(), json!(args.name.unwrap_or_default()));
    if let Some(path) = &args.folder {
        let mode = args.folder_mode.as_deref().unwrap_or("read");
        body.insert(
            "folder".into(),
            json!({"path": folder_path(path)?, "mode": mode}),
        );
    }
    let made = call(client, Method::POST, "", Some(Value::Object(body))).await?;
    let mut said = format!(
        "added {} {}; tools: {}",
        text(&made["id"]),
        text(&made["name"]),
        tools_word(&made["tools"])
    );
    if made["folder"].is_object() {
        said.push_str(&format!("; folder: {}", folder_line(&made)));
    }
    println!("{said}");
    Ok(ExitCode::SUCCESS)
}

impl Fields {
    /// The fields given, as an agent's body holds them (`tools`: a list,
    /// `[]` for --no-tools, absent when neither was given).
    fn changes(self) -> anyhow::Result<Map<String, Value>> {
        let mut out = Map::new();
        if let Some(description) = self.description {
            out.insert("description".into(), json!(description));
        }
        let instructions = match (self.instructions, &self.instructions_file) {
            (Some(given), _) => Some(given),
            (None, Some(path)) => Some(read_text(path)?.trim_end().to_string()),
            (None, None) => None,
        };
        if let Some(instructions) = instructions {
            out.insert("instructions".into(), json!(instructions));
        }
        if let Some(model) = self.model {
            out.insert("model".into(), json!(model));
        }
        if self.no_tools {
            out.insert("tools".into(), json!([]));
        } else if !self.tools.is_empty() {
            out.insert("tools".into(), json!(self.tools));
        }
        if let Some(network) = self.network {
            out.insert("network".into(), json!(network));
        }
        Ok(out)
    }
}

/// A folder flag's path as chatd takes it: `~` and `~/…` as given (chatd
/// reads them from its home), a relative one made absolute from here.
fn folder_path(path: &Path) -> anyhow::Result<String> {
    let Some(given) = path.to_str() else {
        bail!("--folder {}: the path is not UTF-8", path.display());
    };
    if given.is_empty() {
        bail!("--folder '' names no folder (--no-folder keeps it to none)");
    }
    if given == "~" || given.starts_with("~/") || path.is_absolute() {
        return Ok(given.to_string());
    }
    let absolute = std::path::absolute(path)
        .with_context(|| format!("--folder {given}: finding where it is from here"))?;
    absolute
        .to_str()
        .map(str::to_string)
        .with_context(|| format!("--folder {given}: the path is not UTF-8"))
}

/// The `folder` an edit sends, or `None` to leave it out (chatd keeps the
/// agent's): `{"path": ""}` for --no-folder; a new path in `mode`, else in
/// the mode the agent has (read when it has none); `mode` alone, the path
/// the agent has in that mode. Never `null`.
fn folder_change(
    agent: &Value,
    path: Option<String>,
    mode: Option<String>,
    clear: bool,
) -> anyhow::Result<Option<Value>> {
    if clear {
        return Ok(Some(json!({"path": ""})));
    }
    let had = &agent["folder"];
    let name = text(&agent["name"]);
    match (path, mode) {
        (None, None) => Ok(None),
        (Some(path), mode) => {
            let mode = match (mode, had["mode"].as_str()) {
                (Some(mode), _) => mode,
                (None, Some(mode)) => mode.to_string(),
                (None, None) => "read".to_string(),
            };
            Ok(Some(json!({"path": path, "mode": mode})))
        }
        (None, Some(mode)) => {
            if !had.is_object() {
                bail!("{name:?} keeps to no folder: choose one with --folder PATH (and --folder-mode {mode})");
            }
            let path = text(&had["path"]);
            if path.is_empty() || had["state"] == "unset" {
                bail!("no folder is chosen for {name:?} here: choose one with --folder PATH (and --folder-mode {mode})");
            }
            if had["state"] == "missing" {
                bail!("the folder of {name:?} ({path}) is missing: restore it, or choose another with --folder PATH");
            }
            Ok(Some(json!({"path": path, "mode": mode})))
        }
    }
}

/// The whole agent for a `PUT`: `agent` as it is, with `changes` over it
/// (a PUT replaces every field, so none is left out). Its folder is not
/// sent back unless `changes` holds one: chatd keeps it.
fn replaced(agent: &Value, changes: &Map<String, Value>) -> Value {
    let mut body = Map::new();
    for key in ["name", "description", "instructions", "model"] {
        body.insert(key.into(), json!(text(&agent[key])));
    }
    body.insert("tools".into(), agent["tools"].clone());
    // Left out, a PUT gives it the box's default network.
    if agent["network"].is_string() {
        body.insert("network".into(), agent["network"].clone());
    }
    if agent["settings"].is_object() {
        body.insert("settings".into(), agent["settings"].clone());
    }
    for (key, value) in changes {
        body.insert(key.clone(), value.clone());
    }
    Value::Object(body)
}

/// Every agent, oldest first.
async fn all(client: &Client) -> anyhow::Result<Vec<Value>> {
    let listed = call(client, Method::GET, "", None).await?;
    Ok(listed["agents"].as_array().cloned().unwrap_or_default())
}

/// The agent a word names: its id, else its name in any case. None or two
/// of that name: an error that says which names or ids there are.
async fn find(client: &Client, word: &str) -> anyhow::Result<Value> {
    let agents = all(client).await?;
    pick(&agents, word).cloned()
}

fn pick<'a>(agents: &'a [Value], word: &str) -> anyhow::Result<&'a Value> {
    let word = word.trim();
    if let Some(agent) = agents.iter().find(|a| a["id"] == word) {
        return Ok(agent);
    }
    let named: Vec<&Value> = agents
        .iter()
        .filter(|a| text(&a["name"]).to_lowercase() == word.to_lowercase())
        .collect();
    match named.as_slice() {
        [one] => Ok(one),
        [] if agents.is_empty() => bail!("no saved agent is named {word:?}: there are none"),
        [] => {
            let names: Vec<&str> = agents.iter().map(|a| text(&a["name"])).collect();
            bail!(
                "no saved agent is named {word:?}; the agents: {}",
                names.join(", ")
            )
        }
        many => {
            let ids: Vec<&str> = many.iter().map(|a| text(&a["id"])).collect();
            bail!(
                "{} agents are named {word:?}: name one by its id ({})",
                many.len(),
                ids.join(", ")
            )
        }
    }
}

/// The list as printed: a header and one row each, or that there is none.
fn table(agents: &[Value]) -> String {
    if agents.is_empty() {
        return "no saved agents (add one: tandem agent add --help)\n".into();
    }
    let width = |of: &dyn Fn(&Value) -> String, header: &str, cap: usize| {
        agents
            .iter()
            .map(|a| of(a).chars().count())
            .max()
            .unwrap_or(0)
            .clamp(header.len(), cap)
    };
    let id_width = width(&|a| text(&a["id"]).to_string(), "ID", usize::MAX);
    let name_width = width(&|a| text(&a["name"]).to_string(), "NAME", NAME_WIDTH);
    let model_width = width(&model_word, "MODEL", MODEL_WIDTH);
    let tools_width = width(&|a| tools_word(&a["tools"]), "TOOLS", TOOLS_WIDTH);
    let folder_width = width(&|a| folder_word(a, FOLDER_WIDTH), "FOLDER", FOLDER_WIDTH);
    let mut out = format!(
        "{:<id_width$}  {:<name_width$}  {:<model_width$}  {:<tools_width$}  {:<folder_width$}  DESCRIPTION\n",
        "ID", "NAME", "MODEL", "TOOLS", "FOLDER"
    );
    for a in agents {
        let row = format!(
            "{:<id_width$}  {}  {}  {}  {}  {}",
            text(&a["id"]),
            padded(text(&a["name"]), name_width),
            padded(&model_word(a), model_width),
            padded(&tools_word(&a["tools"]), tools_width),
            padded(&folder_word(a, folder_width), folder_width),
            cut(first_line(text(&a["description"])), DESCRIPTION_WIDTH),
        );
        out.push_str(row.trim_end());
        out.push('\n');
    }
    out
}

/// Its model, or "default" (chatd's).
fn model_word(agent: &Value) -> String {
    match text(&agent["model"]) {
        "" => "default".into(),
        model => model.into(),
    }
}

/// The tools it grants, short: all, none, or their names (their count
/// first when they do not fit).
fn tools_word(tools: &Value) -> String {
    let Some(list) = tools.as_array() else {
        return "all".into();
    };
    if list.is_empty() {
        return "none".into();
    }
    let names: Vec<&str> = list.iter().map(text).collect();
    let joined = names.join(", ");
    if joined.chars().count() <= TOOLS_WIDTH {
        joined
    } else {
        cut(&format!("{}: {joined}", names.len()), TOOLS_WIDTH)
    }
}

/// Its folder in `width` characters at most: "PATH (MODE)", "missing:"
/// before it when it is not there, "unset (MODE)" when none is chosen, "-"
/// for none. A long path loses its start, so its last names stay.
fn folder_word(agent: &Value, width: usize) -> String {
    let folder = &agent["folder"];
    if !folder.is_object() {
        return "-".into();
    }
    let suffix = format!(" ({})", text(&folder["mode"]));
    let path = text(&folder["path"]);
    let state = text(&folder["state"]);
    if path.is_empty() || state == "unset" {
        return cut(&format!("unset{suffix}"), width);
    }
    let prefix = if state == "missing" { "missing: " } else { "" };
    let room = width.saturating_sub(prefix.chars().count() + suffix.chars().count());
    format!("{prefix}{}{suffix}", cut_front(path, room))
}

/// `s` cut to its last `width` characters, the first one `…` when it was cut.
fn cut_front(s: &str, width: usize) -> String {
    let count = s.chars().count();
    if count <= width {
        return s.to_string();
    }
    let kept: String = s.chars().skip(count + 1 - width.max(1)).collect();
    format!("…{kept}")
}

/// Its folder as `show` and an edit say it: where, the mode, and whether
/// it is there.
fn folder_line(agent: &Value) -> String {
    let folder = &agent["folder"];
    if !folder.is_object() {
        return "none (its chats reach what any chat does)".into();
    }
    let mode = match text(&folder["mode"]) {
        "write" => "read and write",
        _ => "read only",
    };
    let path = text(&folder["path"]);
    let state = text(&folder["state"]);
    if path.is_empty() || state == "unset" {
        format!(
            "none chosen here, {mode} (unset: its chats are refused until one is: tandem agent edit {} --folder PATH)",
            text(&agent["id"])
        )
    } else if state == "missing" {
        format!(
            "{path}, {mode} (missing: its chats are refused until it is back or another is chosen)"
        )
    } else {
        format!("{path}, {mode} ({state})")
    }
}

/// One agent in full.
fn details(agent: &Value) -> String {
    let mut out = format!("{}  {}\n", text(&agent["id"]), text(&agent["name"]));
    let mut row = |k: &str, v: &str| out.push_str(&format!("  {k:<12} {v}\n"));
    let description = text(&agent["description"]);
    row(
        "description",
        if description.is_empty() {
            "-"
        } else {
            description
        },
    );
    row(
        "model",
        match text(&agent["model"]) {
            "" => "(chatd's default)",
            model => model,
        },
    );
    let tools = match agent["tools"].as_array() {
        None => "every tool of this chatd".to_string(),
        Some(list) if list.is_empty() => "none".to_string(),
        Some(list) => list.iter().map(text).collect::<Vec<_>>().join(", "),
    };
    row("tools", &tools);
    row("folder", &folder_line(agent));
    let settings: Vec<String> = agent["settings"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| match v.as_str() {
            Some(s) => format!("{k}={}", first_line(s)),
            None => format!("{k}={v}"),
        })
        .collect();
    if let Some(network) = agent["network"].as_str() {
        row("network", network);
    }
    if !settings.is_empty() {
        row("settings", &settings.join(", "));
    }
    row("created", &super::trigger::local(text(&agent["created"])));
    row("updated", &super::trigger::local(text(&agent["updated"])));
    let instructions = text(&agent["instructions"]);
    if instructions.trim().is_empty() {
        out.push_str("  instructions: none (chatd's own system text alone)\n");
    } else {
        out.push_str("  instructions:\n");
        for line in instructions.lines() {
            out.push_str(format!("    {line}").trim_end());
            out.push('\n');
        }
    }
    out
}

/// The run history as `show` prints it: the totals, then the newest chats.
fn runs(history: &Value) -> String {
    let count = |k: &str| history[k].as_u64().unwrap_or(0);
    let total = count("total");
    let mut out = format!(
        "run history: {}, {} running, {} failed\n",
        chats(total),
        count("running"),
        count("failed")
    );
    let listed = history["runs"].as_array().cloned().unwrap_or_default();
    for run in listed.iter().take(RUNS_SHOWN) {
        let state = if run["running"] == true {
            "running"
        } else {
            match text(&run["last_status"]) {
                "" => "no turn",
                status => status,
            }
        };
        let last = match run["last_turn"].as_str() {
            Some(at) => super::trigger::local(at),
            None => "-".into(),
        };
        let kind = match text(&run["kind"]) {
            "subagent" => "sub-agent",
            _ => "chat",
        };
        let title = match text(&run["title"]) {
            "" => "(no title)",
            title => title,
        };
        out.push_str(&format!(
            "  {}  {:<9}  {:<9}  {:<11}  {:<24}  {}\n",
            text(&run["conversation_id"]),
            kind,
            text(&run["origin"]),
            state,
            last,
            cut(first_line(title), 40)
        ));
    }
    let shown = listed.len().min(RUNS_SHOWN) as u64;
    if total > shown {
        out.push_str(&format!("  … and {} more\n", total - shown));
    }
    out
}

fn chats(n: u64) -> String {
    if n == 1 {
        "1 chat".into()
    } else {
        format!("{n} chats")
    }
}

/// The templates as printed: id, name, description.
fn templates(listed: &Value) -> String {
    let all = listed["templates"].as_array().cloned().unwrap_or_default();
    let id_width = all
        .iter()
        .map(|t| text(&t["id"]).chars().count())
        .max()
        .unwrap_or(0)
        .max(2);
    let name_width = all
        .iter()
        .map(|t| text(&t["name"]).chars().count())
        .max()
        .unwrap_or(0)
        .max(4);
    let mut out = format!(
        "{:<id_width$}  {:<name_width$}  DESCRIPTION\n",
        "ID", "NAME"
    );
    for t in &all {
        let row = format!(
            "{:<id_width$}  {:<name_width$}  {}",
            text(&t["id"]),
            text(&t["name"]),
            first_line(text(&t["description"]))
        );
        out.push_str(row.trim_end());
        out.push('\n');
    }
    out.push_str("make one: tandem agent add --template ID [--name NAME] (it grants no tool until you edit it)\n");
    out
}

/// Each warning of an answer, on stderr.
fn warn(warnings: &Value) {
    for warning in warnings.as_array().into_iter().flatten() {
        eprintln!("tandem: warning: {}", text(warning));
    }
}

/// The agent file as chatd writes it (its text, not re-serialized).
async fn export(client: &Client, id: &str) -> anyhow::Result<String> {
    let response = client
        .http
        .get(format!("{}/agents/{id}/export", client.base))
        .header("x-forward-key", &client.key)
        .send()
        .await
        .with_context(|| {
            format!(
                "chatd does not answer at {} (is it running? `tandem up`)",
                client.base
            )
        })?;
    let status = response.status();
    let body = response.text().await.context("reading the agent file")?;
    if !status.is_success() {
        let answer = serde_json::from_str(&body).unwrap_or(Value::Null);
        bail!("{}", refusal(status.as_u16(), &answer));
    }
    Ok(body)
}

/// Writes `text` to `path`, readable by its owner alone (0600). Without
/// `force` an existing file is refused (and never opened); with it, the
/// file is replaced whole by a rename.
fn write_private(path: &Path, text: &str, force: bool) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let create = |at: &Path| {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(at)
    };
    if !force {
        let mut file = create(path).map_err(|err| match err.kind() {
            std::io::ErrorKind::AlreadyExists => anyhow::anyhow!(
                "{} exists: not overwritten (--force replaces it)",
                path.display()
            ),
            _ => anyhow::Error::new(err).context(format!("creating {}", path.display())),
        })?;
        return file
            .write_all(text.as_bytes())
            .with_context(|| format!("writing {}", path.display()));
    }
    let name = path
        .file_name()
        .with_context(|| format!("{} names no file", path.display()))?;
    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(name);
    temp_name.push(format!(".tandem-{}", std::process::id()));
    let temp = path.with_file_name(temp_name);
    let written = create(&temp)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .and_then(|()| std::fs::rename(&temp, path));
    if let Err(err) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(anyhow::Error::new(err).context(format!("writing {}", path.display())));
    }
    Ok(())
}

/// A file's text, or stdin's for `-`.
fn read_text(path: &Path) -> anyhow::Result<String> {
    if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).context("reading stdin")
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
    }
}

/// An agent file's JSON (`-`: stdin).
fn read_json(path: &Path) -> anyhow::Result<Value> {
    let text = read_text(path)?;
    let shown = if path == Path::new("-") {
        "stdin".to_string()
    } else {
        path.display().to_string()
    };
    serde_json::from_str(&text).with_context(|| format!("{shown} is not an agent file (not JSON)"))
}

/// `s` cut to `width` characters, the last one `…` when it was cut.
fn cut(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    let mut cut: String = s.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// `s` cut or padded to `width` characters.
fn padded(s: &str, width: usize) -> String {
    let cut = cut(s, width);
    let pad = width.saturating_sub(cut.chars().count());
    format!("{cut}{}", " ".repeat(pad))
}

/// A request under `/v1/chat-app/agents`; a refusal is one line: the API's
/// message (which names the field of a bad input) and its type.
async fn call(
    client: &Client,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> anyhow::Result<Value> {
    client.ask(method, &format!("/agents{path}"), body).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(id: &str, name: &str, tools: Value) -> Value {
        json!({"id": id, "name": name, "description": "", "instructions": "", "model": "",
               "tools": tools, "settings": {}, "created": "", "updated": ""})
    }

    #[test]
    fn the_list_says_all_none_or_the_tools_and_the_default_model() {
        let mut reviewer = agent("a_1", "Reviewer", json!(["read_file", "grep"]));
        reviewer["model"] = json!("qwen3-8b");
        reviewer["description"] = json!("Reviews code\nand more");
        let many: Vec<String> = (0..8).map(|n| format!("tool_number_{n}")).collect();
        let agents = [
            reviewer,
            agent("a_2", "Everything", Value::Null),
            agent("a_3", "Nothing", json!([])),
            agent("a_4", &"n".repeat(40), json!(many)),
        ];
        let out = table(&agents);
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].starts_with("ID   NAME"), "{out}");
        assert!(lines[0].ends_with("DESCRIPTION"), "{out}");
        assert!(lines[1].contains("qwen3-8b"), "{out}");
        assert!(lines[1].contains("read_file, grep"), "{out}");
        assert!(lines[1].ends_with("Reviews code"), "{out}");
        assert!(
            lines[2].contains(" default ") && lines[2].contains(" all "),
            "{out}"
        );
        assert!(lines[2].ends_with(" -"), "{out}");
        assert!(lines[3].contains(" none "), "{out}");
        assert!(
            lines[4].contains("8: tool_number_0") && lines[4].contains('…'),
            "{out}"
        );
        assert!(
            lines[4].contains(&format!("{}…", "n".repeat(NAME_WIDTH - 1))),
            "{out}"
        );
        assert_eq!(
            table(&[]),
            "no saved agents (add one: tandem agent add --help)\n"
        );
    }

    #[test]
    fn the_list_shows_the_folder_its_mode_and_whether_it_is_there() {
        let mut notes = agent("a_1", "Notes", Value::Null);
        notes["folder"] =
            json!({"path": "/home/me/notes", "name": "notes", "mode": "write", "state": "ok"});
        let mut gone = agent("a_2", "Gone", Value::Null);
        gone["folder"] =
            json!({"path": "/home/me/gone", "name": "gone", "mode": "read", "state": "missing"});
        let mut unset = agent("a_3", "Imported", Value::Null);
        unset["folder"] = json!({"path": "", "name": "", "mode": "read", "state": "unset"});
        let mut deep = agent("a_4", "Deep", Value::Null);
        let long = format!("/home/me/{}/reports", "d".repeat(60));
        deep["folder"] = json!({"path": long, "name": "reports", "mode": "read", "state": "ok"});
        let plain = agent("a_5", "Plain", Value::Null);
        let word = folder_word(&deep, FOLDER_WIDTH);
        let out = table(&[notes, gone, unset, deep, plain]);
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].contains("  FOLDER  "), "{out}");
        assert!(lines[1].contains("/home/me/notes (write)"), "{out}");
        assert!(lines[2].contains("missing: /home/me/gone (read)"), "{out}");
        assert!(lines[3].contains("unset (read)"), "{out}");
        assert!(lines[4].contains(&word), "{out}");
        assert_eq!(word.chars().count(), FOLDER_WIDTH, "{word}");
        assert!(
            word.starts_with('…') && word.ends_with("d/reports (read)"),
            "{word}"
        );
        assert!(lines[5].ends_with(" -"), "{out}");
    }

    #[test]
    fn show_says_the_folder_its_mode_and_its_state() {
        let mut a = agent("a_1", "Notes", Value::Null);
        assert!(folder_line(&a).starts_with("none"));
        a["folder"] = json!({"path": "/n", "name": "n", "mode": "write", "state": "ok"});
        assert_eq!(folder_line(&a), "/n, read and write (ok)");
        a["folder"]["state"] = json!("missing");
        assert!(
            folder_line(&a).starts_with("/n, read and write (missing: "),
            "{}",
            folder_line(&a)
        );
        a["folder"] = json!({"path": "", "name": "", "mode": "read", "state": "unset"});
        let line = folder_line(&a);
        assert!(
            line.starts_with("none chosen here, read only (unset: ")
                && line.contains("tandem agent edit a_1 --folder PATH"),
            "{line}"
        );
        assert!(
            details(&a).contains("  folder       none chosen here"),
            "{}",
            details(&a)
        );
    }

    #[test]
    fn an_edit_sends_a_folder_only_for_a_folder_flag_and_never_null() {
        let plain = agent("a_1", "Plain", Value::Null);
        let mut kept = agent("a_2", "Kept", Value::Null);
        kept["folder"] = json!({"path": "/n", "name": "n", "mode": "write", "state": "ok"});
        // No flag: nothing sent, and the PUT body has no `folder` at all.
        assert_eq!(folder_change(&kept, None, None, false).unwrap(), None);
        assert!(replaced(&kept, &Map::new()).get("folder").is_none());
        // --no-folder: cleared.
        assert_eq!(
            folder_change(&kept, None, None, true).unwrap(),
            Some(json!({"path": ""}))
        );
        // --folder: the mode it had, read for one that had none, or the one given.
        assert_eq!(
            folder_change(&kept, Some("/m".into()), None, false).unwrap(),
            Some(json!({"path": "/m", "mode": "write"}))
        );
        assert_eq!(
            folder_change(&plain, Some("/m".into()), None, false).unwrap(),
            Some(json!({"path": "/m", "mode": "read"}))
        );
        assert_eq!(
            folder_change(&kept, Some("/m".into()), Some("read".into()), false).unwrap(),
            Some(json!({"path": "/m", "mode": "read"}))
        );
        // --folder-mode alone: the path it has, the new mode.
        assert_eq!(
            folder_change(&kept, None, Some("read".into()), false).unwrap(),
            Some(json!({"path": "/n", "mode": "read"}))
        );
        let none = folder_change(&plain, None, Some("write".into()), false).unwrap_err();
        assert!(none.to_string().contains("keeps to no folder"), "{none}");
        let mut unset = kept.clone();
        unset["folder"] = json!({"path": "", "name": "", "mode": "read", "state": "unset"});
        let err = folder_change(&unset, None, Some("write".into()), false).unwrap_err();
        assert!(err.to_string().contains("no folder is chosen"), "{err}");
        kept["folder"]["state"] = json!("missing");
        let err = folder_change(&kept, None, Some("read".into()), false).unwrap_err();
        assert!(err.to_string().contains("is missing"), "{err}");
    }

    #[test]
    fn a_folder_path_is_sent_absolute_or_from_home() {
        assert_eq!(folder_path(Path::new("/srv/notes")).unwrap(), "/srv/notes");
        assert_eq!(folder_path(Path::new("~/notes")).unwrap(), "~/notes");
        let here = std::env::current_dir().unwrap().join("notes");
        assert_eq!(
            folder_path(Path::new("notes")).unwrap(),
            here.to_str().unwrap()
        );
        assert!(folder_path(Path::new("")).is_err());
    }

    #[test]
    fn a_word_names_an_agent_by_id_or_name_in_any_case() {
        let agents = [
            agent("a_1", "Reviewer", Value::Null),
            agent("a_2", "Digest", Value::Null),
            agent("a_3", "digest", Value::Null),
        ];
        assert_eq!(pick(&agents, "a_2").unwrap()["id"], "a_2");
        assert_eq!(pick(&agents, "REVIEWER").unwrap()["id"], "a_1");
        let unknown = pick(&agents, "Writer").unwrap_err().to_string();
        assert_eq!(
            unknown,
            "no saved agent is named \"Writer\"; the agents: Reviewer, Digest, digest"
        );
        let two = pick(&agents, "DIGEST").unwrap_err().to_string();
        assert_eq!(
            two,
            "2 agents are named \"DIGEST\": name one by its id (a_2, a_3)"
        );
        assert!(pick(&[], "x")
            .unwrap_err()
            .to_string()
            .contains("there are none"));
    }

    #[test]
    fn an_edit_puts_the_whole_agent_with_only_the_changes_new() {
        let mut was = agent("a_1", "Reviewer", json!(["grep"]));
        was["description"] = json!("Reviews");
        was["settings"] = json!({"temperature": 0.2});
        let mut changes = Map::new();
        changes.insert("model".into(), json!("m-x"));
        assert_eq!(
            replaced(&was, &changes),
            json!({"name": "Reviewer", "description": "Reviews", "instructions": "",
                   "model": "m-x", "tools": ["grep"], "settings": {"temperature": 0.2}})
        );
        changes.insert("tools".into(), Value::Null);
        assert_eq!(replaced(&was, &changes)["tools"], Value::Null);
    }

    #[test]
    fn the_run_history_shows_totals_and_the_newest_ten() {
        let run = json!({"conversation_id": "c_1", "title": "", "origin": "trigger",
                         "kind": "chat", "running": false});
        let history = json!({"runs": vec![run; 12], "total": 12, "running": 0, "failed": 1});
        let out = runs(&history);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "run history: 12 chats, 0 running, 1 failed");
        assert_eq!(lines.len(), 1 + RUNS_SHOWN + 1, "{out}");
        assert!(
            lines[1].contains("trigger") && lines[1].contains("no turn"),
            "{out}"
        );
        assert!(lines[1].ends_with("(no title)"), "{out}");
        assert_eq!(lines[11], "  … and 2 more");
    }
}
