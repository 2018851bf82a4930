//! `tandem connector …`: Telegram bots and Slack apps bound to saved
//! agents, through chatd's front door (`/v1/chat-app/connectors…`, which
//! chatd forwards to connectord) with the forward key, as `tandem trigger`
//! does. A token is never an argument: it comes from a file, stdin or a
//! prompt without echo, goes into the request body and nowhere else.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use reqwest::Method;
use serde_json::{json, Map, Value};
use tandem_shared::secrets::Secret;

use crate::client::Client;
use crate::tty;

mod show;
#[cfg(test)]
mod tests;

use show::{bot_name, details, line, list, print_bot, senders_table, table, text, Widths};

/// What connectord wants typed (or `--yes`) before anyone may write in.
const ACCEPT_ANY_PHRASE: &str = "accept any message";

pub const LONG_ABOUT: &str = "\
Connectors: a Telegram bot or a Slack app bound to one of chatd's saved
agents, so the people on its allowlist talk to the agent from their
phones. connectord keeps the bindings and their tokens (sealed; no answer
ever holds one: a binding says whether it has one).

A token is never given as an argument (it would stay in the shell's history
and show in ps): `add` reads it from --token-file, else from stdin when
stdin is not a terminal, else asks for it without echo. A Slack app also
needs its app-level token (xapp-…, for Socket Mode): --app-token-file, or
the next line of stdin, or a second prompt.

Who gets in: the allowlist (user ids, chat or channel ids, @names). Anyone
else is not answered and goes in the sender log (`senders`), from where
`allow` lets them in. --accept-any answers everyone who finds the bot; it
asks you to type 'accept any message' (or --yes).

These talk to chatd (QSE_CHAT_URL) with the forward key, as `tandem chat
send` does; chatd passes them to connectord (`tandem connectors start`
starts it). A refusal is printed as one line, with the field it is about.
Exit 0 when the request was done, 1 otherwise.

Examples:
  tandem connector add --kind telegram --name 'Home bot' --agent a_0123abcd \\
      --allow @alice --token-file ~/.config/tandem/telegram.token
  tandem connector add --kind slack --name Team --agent a_0123abcd \\
      --token-file bot.token --app-token-file app.token --allow C0123ABCD
  tandem connector list
  tandem connector senders cn_0123abcd
  tandem connector allow cn_0123abcd 123456789";

#[derive(clap::Subcommand)]
pub enum ConnectorCommand {
    /// Every connector, one row each: id, kind, name, agent, state, token.
    ///
    /// Example: tandem connector list
    List,
    /// One connector in full: its bot, agent, allowlist, modes and state.
    ///
    /// Example: tandem connector show cn_0123abcd
    Show {
        /// The connector id.
        id: String,
    },
    /// Bind a Telegram bot or a Slack app to a saved agent.
    #[command(long_about = ADD_ABOUT)]
    Add(AddArgs),
    /// Delete a connector: its bot stops answering; its token is forgotten.
    ///
    /// Example: tandem connector rm cn_0123abcd
    Rm {
        /// The connector id.
        id: String,
    },
    /// Check a connector's token with the platform now (getMe, auth.test).
    ///
    /// Exit 0 when the platform takes it, 1 with its reason otherwise.
    ///
    /// Example: tandem connector test cn_0123abcd
    Test {
        /// The connector id.
        id: String,
    },
    /// Who wrote to the bot and was not let in, with how many messages.
    ///
    /// Example: tandem connector senders cn_0123abcd
    Senders {
        /// The connector id.
        id: String,
    },
    /// Let a sender of the sender log in (adds it to the allowlist).
    ///
    /// Example: tandem connector allow cn_0123abcd 123456789
    Allow {
        /// The connector id.
        id: String,
        /// The sender, as `senders` names it (a user id, chat id or @name).
        sender: String,
    },
    /// Switch a connector on: its bot reads and answers again.
    ///
    /// Example: tandem connector on cn_0123abcd
    On {
        /// The connector id.
        id: String,
    },
    /// Switch a connector off: its bot reads nothing until it is on again.
    ///
    /// Example: tandem connector off cn_0123abcd
    Off {
        /// The connector id.
        id: String,
    },
    /// Change a connector's fields; what is not given stays as it is.
    #[command(long_about = SET_ABOUT)]
    Set(SetArgs),
}

const ADD_ABOUT: &str = "\
Bind a Telegram bot (--kind telegram: its token from @BotFather) or a Slack
app (--kind slack: its bot token xoxb-… and its app-level token xapp-… with
connections:write, for Socket Mode) to a saved agent of chatd's (--agent,
its id). connectord checks the token with the platform before it saves
anything (getMe; auth.test and apps.connections.open): a refused token is
not stored, and the platform's reason is printed.

The token: --token-file PATH (the token alone on one line; `-` for stdin),
else stdin when it is not a terminal, else a prompt without echo. A Slack
app's app token likewise: --app-token-file, the next line of stdin, or a
second prompt.

Who gets in: --allow (repeated: user ids, chat or channel ids, @names).
Nobody else is answered; they go in the sender log (`tandem connector
senders`). --accept-any answers anyone who finds the bot: you are asked to
type 'accept any message' (or give --yes).

How it answers: --reply-mode progress (one message that says what the
agent is doing, replaced by the answer), stream (the answer growing in
place) or off (typing, then the answer). Which chat of the agent a message
goes to: --conversation sender (one per person), chat (one per Telegram
chat or Slack channel: a group shares it), window (per person, a new one
after --window-minutes of quiet) or thread (one per Slack thread; per chat
on Telegram). --send-files sends the files a turn made (at most 5).
--follow-threads (Slack) answers without a mention in the threads the bot
answered in (own), in any thread of a channel it is in (any), or nowhere
(never: a mention each time).

Prints the new connector's row and its bot.

Examples:
  tandem connector add --kind telegram --name 'Home bot' --agent a_0123abcd \\
      --allow @alice --allow 123456789 --token-file ~/.config/tandem/telegram.token
  pass show telegram/home | tandem connector add --kind telegram --name Home --agent a_0123abcd
  tandem connector add --kind slack --name Team --agent a_0123abcd \\
      --token-file bot.token --app-token-file app.token --conversation thread";

const SET_ABOUT: &str = "\
Change a connector's fields (a PATCH): only what is given changes. --allow
(repeated) replaces the whole allowlist (`tandem connector allow` adds one
sender; --allow-none empties it). --token-file replaces the bot token and
--app-token-file a Slack app's app token (`-` reads stdin, or asks without
echo on a terminal); connectord checks a new token before it keeps it.
--accept-any asks you to type 'accept any message' (or --yes);
--no-accept-any answers the allowlist only again.

Prints the connector's row.

Examples:
  tandem connector set cn_0123abcd --reply-mode stream --conversation window --window-minutes 30
  tandem connector set cn_0123abcd --allow @alice --allow @bob
  tandem connector set cn_0123abcd --token-file ~/.config/tandem/telegram.token";

/// What both `add` and `set` take beyond the identity of the binding.
#[derive(clap::Args)]
pub struct Modes {
    /// What the sender sees while the agent works: progress (what it is
    /// doing, then the answer), stream (the answer growing), off (typing).
    #[arg(long, value_name = "MODE", value_parser = ["progress", "stream", "off"])]
    reply_mode: Option<String>,
    /// Which chat of the agent a message goes to: one per sender, per chat
    /// or channel, per sender and window of activity, or per Slack thread.
    #[arg(long, value_name = "MODE", value_parser = ["sender", "chat", "window", "thread"])]
    conversation: Option<String>,
    /// Minutes of quiet after which --conversation window starts a new chat.
    #[arg(long, value_name = "N")]
    window_minutes: Option<u64>,
    /// Slack: the threads answered without a mention: the bot's own, any, never.
    #[arg(long, value_name = "WHICH", value_parser = ["own", "any", "never"])]
    follow_threads: Option<String>,
    /// Give --accept-any without the typed confirmation.
    #[arg(long, requires = "accept_any")]
    yes: bool,
}

#[derive(clap::Args)]
pub struct AddArgs {
    /// The platform: telegram or slack.
    #[arg(long, value_parser = ["telegram", "slack"])]
    kind: String,
    /// A name for people (1 to 100 characters).
    #[arg(long)]
    name: String,
    /// The saved agent (its id) that answers; it must name a model.
    #[arg(long, value_name = "AGENT_ID")]
    agent: String,
    /// Who may write: a user id, a chat or channel id, or an @name (repeat it).
    #[arg(long, value_name = "ID_OR_@NAME")]
    allow: Vec<String>,
    /// Answer anyone who writes (asks for a typed confirmation, or --yes).
    #[arg(long)]
    accept_any: bool,
    /// Send the files a turn made (at most 5).
    #[arg(long)]
    send_files: bool,
    /// The file holding the bot token alone on one line (`-`: stdin).
    #[arg(long, value_name = "PATH")]
    token_file: Option<PathBuf>,
    /// Slack: the file holding the app-level token xapp-… (`-`: stdin).
    #[arg(long, value_name = "PATH")]
    app_token_file: Option<PathBuf>,
    #[command(flatten)]
    modes: Modes,
}

#[derive(clap::Args)]
pub struct SetArgs {
    /// The connector id.
    id: String,
    /// A new name.
    #[arg(long)]
    name: Option<String>,
    /// Another saved agent (its id).
    #[arg(long, value_name = "AGENT_ID")]
    agent: Option<String>,
    /// The new allowlist, whole (repeat it).
    #[arg(long, value_name = "ID_OR_@NAME", conflicts_with = "allow_none")]
    allow: Vec<String>,
    /// Empty the allowlist.
    #[arg(long)]
    allow_none: bool,
    /// Answer anyone who writes (asks for a typed confirmation, or --yes).
    #[arg(long, conflicts_with = "no_accept_any")]
    accept_any: bool,
    /// Answer the allowlist only.
    #[arg(long)]
    no_accept_any: bool,
    /// Send the files a turn made.
    #[arg(long, conflicts_with = "no_send_files")]
    send_files: bool,
    /// Send no files.
    #[arg(long)]
    no_send_files: bool,
    /// Replace the bot token with the one in this file (`-`: stdin).
    #[arg(long, value_name = "PATH")]
    token_file: Option<PathBuf>,
    /// Slack: replace the app-level token with the one in this file (`-`: stdin).
    #[arg(long, value_name = "PATH")]
    app_token_file: Option<PathBuf>,
    #[command(flatten)]
    modes: Modes,
}

pub async fn exec(command: ConnectorCommand) -> anyhow::Result<ExitCode> {
    // The tokens are read before chatd is asked anything: a refused
    // confirmation or an unreadable file sends nothing.
    let command = match command {
        ConnectorCommand::Add(args) => {
            let body = args.body().await?;
            let client = Client::new()?;
            let made = call(&client, Method::POST, "", Some(body)).await?;
            println!("added {}", line(&made, &Widths::default()));
            print_bot(&made);
            if made["accept_any"] != true && list(&made["allowlist"]).is_empty() {
                let id = text(&made["id"]);
                println!(
                    "  nobody may write yet: who writes goes in the sender log \
                     (tandem connector senders {id}; tandem connector allow {id} SENDER)"
                );
            }
            return Ok(ExitCode::SUCCESS);
        }
        ConnectorCommand::Set(args) => {
            let id = args.id.clone();
            let body = args.body().await?;
            let client = Client::new()?;
            let set = call(&client, Method::PATCH, &format!("/{id}"), Some(body)).await?;
            println!("{}", line(&set, &Widths::default()));
            return Ok(ExitCode::SUCCESS);
        }
        other => other,
    };
    let client = Client::new()?;
    match command {
        ConnectorCommand::Add(_) | ConnectorCommand::Set(_) => unreachable!("handled above"),
        ConnectorCommand::List => {
            let listed = call(&client, Method::GET, "", None).await?;
            let connectors = match &listed {
                Value::Array(all) => all.clone(),
                other => other["connectors"].as_array().cloned().unwrap_or_default(),
            };
            if connectors.is_empty() {
                println!("no connectors (add one: tandem connector add --help)");
                return Ok(ExitCode::SUCCESS);
            }
            print!("{}", table(&connectors));
        }
        ConnectorCommand::Show { id } => {
            let c = call(&client, Method::GET, &format!("/{id}"), None).await?;
            print!("{}", details(&c));
        }
        ConnectorCommand::Rm { id } => {
            call(&client, Method::DELETE, &format!("/{id}"), None).await?;
            println!("removed {id}");
        }
        ConnectorCommand::Test { id } => {
            let tested = call(&client, Method::POST, &format!("/{id}/test"), None).await?;
            if tested["ok"] == false {
                let why = tested["reason"]
                    .as_str()
                    .or(tested["error"].as_str())
                    .unwrap_or("no reason given");
                bail!("{id}: the platform refused the token: {why}");
            }
            let kind = call(&client, Method::GET, &format!("/{id}"), None)
                .await
                .map(|c| text(&c["kind"]).to_string())
                .unwrap_or_default();
            match bot_name(&tested["bot"], &kind) {
                Some(name) => println!("{id}: the token works (bot {name})"),
                None => println!("{id}: the token works"),
            }
        }
        ConnectorCommand::Senders { id } => {
            let listed = call(&client, Method::GET, &format!("/{id}/senders"), None).await?;
            let senders = match &listed {
                Value::Array(all) => all.clone(),
                other => other["senders"].as_array().cloned().unwrap_or_default(),
            };
            if senders.is_empty() {
                println!("nobody outside the allowlist has written to {id}");
                return Ok(ExitCode::SUCCESS);
            }
            print!("{}", senders_table(&senders));
            println!("let one in: tandem connector allow {id} SENDER");
        }
        ConnectorCommand::Allow { id, sender } => {
            let path = format!("/{id}/senders/{}/allow", path_segment(&sender));
            let answer = call(&client, Method::POST, &path, None).await?;
            println!("{sender} may write to {id}");
            let allowlist = list(&answer["allowlist"]);
            if !allowlist.is_empty() {
                println!("  allowlist  {}", allowlist.join(", "));
            }
        }
        ConnectorCommand::On { id } => {
            let c = call(&client, Method::POST, &format!("/{id}/enable"), None).await?;
            println!("{}", line(&c, &Widths::default()));
        }
        ConnectorCommand::Off { id } => {
            let c = call(&client, Method::POST, &format!("/{id}/disable"), None).await?;
            println!("{}", line(&c, &Widths::default()));
        }
    }
    Ok(ExitCode::SUCCESS)
}

impl AddArgs {
    /// The create body: the tokens read, then only what was given, so
    /// connectord's defaults apply.
    async fn body(self) -> anyhow::Result<Value> {
        let slack = self.kind == "slack";
        if !slack {
            if self.app_token_file.is_some() {
                bail!("--app-token-file is for a Slack app (--kind slack) only");
            }
            if self.modes.follow_threads.is_some() {
                bail!("--follow-threads is for a Slack app (--kind slack) only");
            }
        }
        if self.accept_any {
            confirm_accept_any(self.modes.yes).await?;
        }
        let token = match &self.token_file {
            Some(path) => tty::token_from_file(path, "bot token").await?,
            None => tty::token_from_stdin("bot token").await?,
        };
        let app_token = match (&self.app_token_file, slack) {
            (Some(path), _) => Some(tty::token_from_file(path, "app token").await?),
            (None, true) => Some(tty::token_from_stdin("app token").await?),
            (None, false) => None,
        };
        let mut body = Map::new();
        body.insert("kind".into(), json!(self.kind));
        body.insert("name".into(), json!(self.name));
        body.insert("agent_id".into(), json!(self.agent));
        if !self.allow.is_empty() {
            body.insert("allowlist".into(), json!(self.allow));
        }
        if self.accept_any {
            body.insert("accept_any".into(), json!(true));
            body.insert("confirm_accept_any".into(), json!(ACCEPT_ANY_PHRASE));
        }
        if self.send_files {
            body.insert("send_files".into(), json!(true));
        }
        self.modes.fill(&mut body);
        Ok(with_tokens(body, Some(&token), app_token.as_ref()))
    }
}

impl SetArgs {
    /// The PATCH body: only what was given; no token unless a file was named.
    async fn body(self) -> anyhow::Result<Value> {
        if self.accept_any {
            confirm_accept_any(self.modes.yes).await?;
        }
        let token = match &self.token_file {
            Some(path) => Some(tty::token_from_file(path, "bot token").await?),
            None => None,
        };
        let app_token = match &self.app_token_file {
            Some(path) => Some(tty::token_from_file(path, "app token").await?),
            None => None,
        };
        let mut body = Map::new();
        if let Some(name) = self.name {
            body.insert("name".into(), json!(name));
        }
        if let Some(agent) = self.agent {
            body.insert("agent_id".into(), json!(agent));
        }
        if !self.allow.is_empty() {
            body.insert("allowlist".into(), json!(self.allow));
        } else if self.allow_none {
            body.insert("allowlist".into(), json!([]));
        }
        if self.accept_any {
            body.insert("accept_any".into(), json!(true));
            body.insert("confirm_accept_any".into(), json!(ACCEPT_ANY_PHRASE));
        } else if self.no_accept_any {
            body.insert("accept_any".into(), json!(false));
        }
        if self.send_files {
            body.insert("send_files".into(), json!(true));
        } else if self.no_send_files {
            body.insert("send_files".into(), json!(false));
        }
        self.modes.fill(&mut body);
        if body.is_empty() && token.is_none() && app_token.is_none() {
            bail!("nothing to change: give a field to set (tandem connector set --help)");
        }
        Ok(with_tokens(body, token.as_ref(), app_token.as_ref()))
    }
}

impl Modes {
    fn fill(&self, body: &mut Map<String, Value>) {
        for (key, value) in [
            ("reply_mode", &self.reply_mode),
            ("conversation", &self.conversation),
            ("follow_threads", &self.follow_threads),
        ] {
            if let Some(value) = value {
                body.insert(key.into(), json!(value));
            }
        }
        if let Some(minutes) = self.window_minutes {
            body.insert("window_minutes".into(), json!(minutes));
        }
    }
}

/// The body with the tokens put in last: the only place they are exposed.
fn with_tokens(
    mut body: Map<String, Value>,
    token: Option<&Secret>,
    app_token: Option<&Secret>,
) -> Value {
    if let Some(token) = token {
        body.insert("token".into(), json!(token.expose()));
    }
    if let Some(app_token) = app_token {
        body.insert("app_token".into(), json!(app_token.expose()));
    }
    Value::Object(body)
}

/// --accept-any: `--yes`, or the phrase typed at the terminal.
async fn confirm_accept_any(yes: bool) -> anyhow::Result<()> {
    if yes {
        return Ok(());
    }
    tty::confirm_phrase(
        "--accept-any: anyone who finds this bot can talk to the agent, \
         with its instructions and its tools.",
        ACCEPT_ANY_PHRASE,
        "--accept-any answers anyone who finds the bot: confirm it with --yes, \
         or run the command at a terminal and type 'accept any message'",
    )
    .await
}

/// A request under `/v1/chat-app/connectors`; a refusal is one line: the
/// API's message (which names the field of a bad input) and its type.
async fn call(
    client: &Client,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> anyhow::Result<Value> {
    client
        .ask(method, &format!("/connectors{path}"), body)
        .await
}

/// A sender as one path segment: an @name or id, with anything else escaped.
fn path_segment(sender: &str) -> String {
    let mut out = String::new();
    for byte in sender.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'@' => {
                out.push(byte as char)
            }
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}
