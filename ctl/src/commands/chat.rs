//! `tandem chat send|attach`: a terminal client that streams an answer and
//! survives a chatd restart by reconnecting with its last seq.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use futures_util::StreamExt;
use serde_json::{json, Value};

use crate::client::Client;
use crate::commands::chat_subagents as subagents;

#[derive(clap::Subcommand)]
pub enum ChatCommand {
    #[command(flatten)]
    Service(crate::commands::service::ServiceVerb),
    /// Send a message and stream the answer.
    ///
    /// Starts a new chat unless --chat names one. The answer is printed as it
    /// arrives; a chatd restart mid-answer is ridden out (the stream resumes
    /// from the last event seen). Exit 0 when the run ends done, 1 otherwise.
    ///
    /// With --file (up to 20), the files go with the message, streamed from
    /// disk (each up to 256 MiB, `[chatd] upload_file_max_bytes`), and are
    /// saved in the chat's `uploads/`; a name already there gets `name (2)`.
    ///
    /// Example: tandem chat send 'Summarise the notes' --chat c_0123abcd
    ///
    /// Example: tandem chat send 'What does it say?' --file report.pdf
    ///
    /// With --prompt and --resource (up to 8 in all), an MCP server's
    /// prompt or resource goes in front of the message (`tandem mcp prompts
    /// CHAT` lists them); --arg gives a prompt's arguments.
    ///
    /// Example: tandem chat send 'Go ahead' --prompt Docs:review --arg lang=Go --resource Wiki:wiki://home
    ///
    /// A new chat can start in a mode and with tool groups off (`tandem chat
    /// tools` lists them); both are stored before its first turn.
    ///
    /// Example: tandem chat send 'How would you split app.rs?' --mode plan --off web
    Send {
        /// The message.
        text: String,
        /// The chat to send to (default: a new chat).
        #[arg(long)]
        chat: Option<String>,
        /// A file to send with the message (repeat for more).
        #[arg(long, value_name = "FILE")]
        file: Vec<std::path::PathBuf>,
        /// An MCP server's prompt in front of the message (repeat for more).
        #[arg(long, value_name = "SERVER:NAME")]
        prompt: Vec<String>,
        /// An MCP server's resource in front of the message (repeat for more).
        #[arg(long, value_name = "SERVER:URI")]
        resource: Vec<String>,
        /// An argument of a --prompt (repeat for more).
        #[arg(long = "arg", value_name = "NAME=VALUE")]
        args: Vec<String>,
        /// Ask the model to hand the message to this saved agent (its name
        /// or id) as a sub-agent; the same as starting the text with
        /// `/agent NAME`. A new chat gets saved agents switched on.
        #[arg(long, value_name = "NAME")]
        agent: Option<String>,
        /// A new chat's permission mode: plan (the read tools only), ask,
        /// auto or yolo.
        #[arg(long, value_name = "MODE")]
        mode: Option<String>,
        /// A tool group a new chat starts with switched off (repeat, or a,b).
        #[arg(long, value_name = "GROUP", value_delimiter = ',')]
        off: Vec<String>,
    },
    /// Stop a chat's answer (the page's Stop), with the worker or
    /// sub-agents it waits on.
    ///
    /// What was written stays; waiting messages stay waiting. `tandem chat
    /// continue` goes on from where it stopped. Exit 1 when nothing runs.
    /// (`tandem chat stop` stops chatd itself.)
    ///
    /// Example: tandem chat cancel c_0123abcd
    Cancel {
        /// The chat id.
        chat: String,
    },
    /// Go on with a stopped, paused or interrupted answer where it ended,
    /// printing it as it streams.
    ///
    /// A call that had begun when the answer was cut off is not run again
    /// (whether it took effect is not known; the model is told so). In
    /// Agents mode the worker the chat waited on goes on first, then the
    /// chat. Exit 1 when there is nothing to continue.
    ///
    /// Example: tandem chat continue c_0123abcd
    Continue {
        /// The chat id.
        chat: String,
    },
    /// Follow a chat's events from now on, printing answers as they stream.
    ///
    /// Example: tandem chat attach c_0123abcd
    Attach {
        /// The chat id.
        id: String,
    },
    /// Answer a consent card: a tool call, or a command reaching for a host,
    /// waiting for your yes or no.
    ///
    /// `once` runs this call (for a host: lets the chat's commands reach it
    /// for a while), `always` also saves a rule so it is not asked again in
    /// this chat, `deny` refuses it (and, for a host, saves a deny rule).
    /// `send` and `attach` print the card's id.
    ///
    /// Example: tandem chat consent c_0123abcd card_4567 once
    Consent {
        /// The chat id.
        chat: String,
        /// The card id (from `tool.consent`).
        card: String,
        /// once, always or deny.
        #[arg(value_parser = ["once", "always", "deny"])]
        decision: String,
    },
    /// List the browsers that get this box's push notifications, or send
    /// each a test.
    ///
    /// A browser joins with the page's "Notify me on this device" switch;
    /// chatd keeps ten. `list` shows each one's id, push service and how its
    /// last push went; `test` sends "Test from tandem" to all of them now and
    /// says how many took it (one a push service calls gone is forgotten).
    /// Exit 1 when a test reached no browser.
    ///
    /// Example: tandem chat push test
    Push {
        /// list or test.
        #[arg(value_enum)]
        action: PushAction,
    },
    /// Show or set how far a chat's commands may reach (egressd).
    ///
    /// `off` nowhere, `registries` the package registries (PyPI, npm,
    /// crates.io, ...), `all` every public host; never past the box's ceiling
    /// (`[egress] ceiling`), never the LAN, this box or a metadata address.
    /// A host inside the ceiling but outside the preset asks with a card.
    /// Prints the preset, what is in force under the ceiling, and the chat's
    /// saved host rules.
    ///
    /// Example: tandem chat egress c_0123abcd registries
    Egress {
        /// The chat id.
        chat: String,
        /// The new preset (none: show the current one).
        #[arg(value_parser = ["off", "registries", "all"])]
        preset: Option<String>,
    },
    /// Show or change a chat's model settings, or the defaults new chats
    /// start with
    /// (the chat `defaults`).
    ///
    /// Each NAME=VALUE sets one: system_prompt (32 KiB), temperature 0-2,
    /// top_p (0, 1], top_k >= 1, reasoning_effort none|minimal|low|medium|high,
    /// max_tokens >= 1, context_size (the window the chat plans with, never
    /// above the model's), agents on|off (Agents mode: the chat's model plans
    /// and reads, and hands every write and build to a worker; see `tandem
    /// chat tasks`). NAME= with nothing after it clears one (the engine's
    /// own default holds). What is not named stays. Every request of the chat
    /// carries them; chatd refuses a bad value naming it and its range, and
    /// changes nothing. Prints the settings in force.
    ///
    /// Examples:
    ///
    ///   tandem chat settings c_0123abcd temperature=0.3 reasoning_effort=low
    ///
    ///   tandem chat settings defaults max_tokens=2048
    ///
    ///   tandem chat settings c_0123abcd agents=on
    ///
    ///   tandem chat settings c_0123abcd --system-prompt-file prompt.md
    ///
    /// permission_mode=plan|ask|auto|yolo sets the chat's mode with the
    /// settings in one request: plan offers the read tools only (the model
    /// looks and writes a plan), ask asks before every write and command,
    /// auto runs what stays in the chat's workspace, yolo runs everything.
    ///
    ///   tandem chat settings c_0123abcd permission_mode=plan
    Settings {
        /// The chat id, or `defaults` for what a new chat starts with.
        chat: String,
        /// NAME=VALUE to set, NAME= to clear.
        changes: Vec<String>,
        /// Read system_prompt from this file (- for stdin).
        #[arg(long, value_name = "FILE")]
        system_prompt_file: Option<std::path::PathBuf>,
    },
    /// List a chat's files and its change sets, undo one, or use its trash.
    ///
    /// Every change a chat makes to its files (a file tool, a command, an
    /// upload, an undo) is kept as a numbered change set. Without an action,
    /// prints the files the chat was given, made or changed, then its newest
    /// change sets. `undo REV` puts one change set back; `undo r_…` a whole
    /// turn (a run). An undo never overwrites a file changed since: it
    /// refuses, names the file and changes nothing, unless --skip-conflicts
    /// (then the other files are put back). An undo is itself a change set,
    /// so undoing it redoes the change.
    ///
    /// `put FILE` uploads a local file into the chat's folder (at its name,
    /// or --to PATH). A file already there is replaced only with --base REV,
    /// the change set of the version you are replacing (the list's `rev`);
    /// otherwise, or when it changed since, yours is kept beside it as
    /// `name (2)` and both are listed.
    ///
    /// `delete PATH` moves a file to the chat's trash, `trash` lists it
    /// (deleted files are kept 30 days, `[chatd] file_trash_days`),
    /// `restore PATH` puts one back, `purge [PATH]` deletes it (or the whole
    /// trash) for good and prints the bytes freed.
    ///
    /// `search WORDS` finds the lines that hold every word (any case, unless
    /// --case) in the chat's file names, text files and documents' text (PDF
    /// pages, workbook sheets, Word, slides), from chatd's index: each as
    /// `path (page 3, line 40): text`. --regex takes a regular expression,
    /// --path one folder or file. Exits 1 when nothing matches, as grep does.
    ///
    /// `preview PATH` prints what the files pane shows of a workbook, a CSV
    /// or TSV table (each sheet's first 200 rows, tab-separated), a Word file
    /// (its text) or a slide deck (each slide with its notes), as chatd's
    /// reader makes it.
    ///
    /// Examples:
    ///
    ///   tandem chat files c_0123abcd
    ///
    ///   tandem chat files c_0123abcd undo 42
    ///
    ///   tandem chat files c_0123abcd restore notes/plan.md
    ///
    ///   tandem chat files c_0123abcd put plan.md --to notes/plan.md --base 42
    ///
    ///   tandem chat files c_0123abcd search 'acme invoice' --path uploads
    ///
    ///   tandem chat files c_0123abcd preview uploads/accounts.xlsx
    Files {
        /// The chat id.
        chat: String,
        /// undo, put, delete, trash, restore, purge, search or preview.
        #[arg(value_parser = ["undo", "put", "delete", "trash", "restore", "purge", "search", "preview"])]
        action: Option<String>,
        /// undo: a change set's number, or a run id for a whole turn;
        /// put: a local file; delete, restore, purge, preview: a file's
        /// path; search: the words to find.
        target: Option<String>,
        /// Put back what does not conflict, and list what was left.
        #[arg(long)]
        skip_conflicts: bool,
        /// put: the path in the chat's folder (default: the file's name).
        #[arg(long, value_name = "PATH")]
        to: Option<String>,
        /// put: the change set of the version this file replaces.
        #[arg(long, value_name = "REV")]
        base: Option<i64>,
        /// search: only this folder or file of the chat's.
        #[arg(long, value_name = "PATH")]
        path: Option<String>,
        /// search: the words are a regular expression.
        #[arg(long)]
        regex: bool,
        /// search: match case.
        #[arg(long)]
        case: bool,
    },
    /// List a chat's sub-agents, show one's transcript, or stop one.
    ///
    /// A sub-agent is a helper the chat's model starts (its `spawn_agent`
    /// tool) to do one task in the chat's files: a chat of its own, with the
    /// chat's tools or fewer, that only the model writes to. `fg`: the
    /// model waits for its result; `bg`: it works in the background (at most
    /// 4 a chat) and its result comes to the chat as a message, which the
    /// model then answers.
    ///
    /// Without an id, prints one line each, newest first: id, state
    /// (running, done, failed, stopped), fg or bg, title, when it started and
    /// ended. With an id, prints what it was asked, its state and the length
    /// of its result, then its transcript (each tool call as `> name
    /// summary`). --stop stops it; what it had so far goes to the chat as its
    /// result. Exit 1 when it is not running or not this chat's.
    ///
    /// A sub-agent's consent cards show in `send` and `attach` with the
    /// command that answers them (`tandem chat consent SUBAGENT CARD …`).
    ///
    /// Examples:
    ///
    ///   tandem chat subagents c_0123abcd
    ///
    ///   tandem chat subagents c_0123abcd c_4567efab
    ///
    ///   tandem chat subagents c_0123abcd c_4567efab --stop
    Subagents {
        /// The chat id.
        chat: String,
        /// A sub-agent's id (from the list).
        id: Option<String>,
        /// Stop that sub-agent.
        #[arg(long, requires = "id")]
        stop: bool,
    },
    /// The jobs a chat in Agents mode handed to workers, and their reports.
    ///
    /// In Agents mode (`tandem chat settings CHAT agents=on`) the chat's
    /// model reads and plans, and hands every file write and build to a
    /// worker with the `task` tool: a fresh agent with the write tools that
    /// answers with a report. chatd checks the report: the files the change
    /// sets say changed, the calls that ran, and each check it claims with
    /// no call behind it, marked unverified.
    ///
    /// Without an id, prints one line each: number, state (running, done,
    /// failed, stopped, or held: stopped with the chat until `continue`),
    /// title, the report's size, the task's id. With an id,
    /// prints the brief, the whole report with chatd's check, and the
    /// worker's transcript. `tandem chat cancel` stops the chat and its
    /// worker; `tandem chat continue` resumes the worker, then the chat.
    ///
    /// Examples:
    ///
    ///   tandem chat tasks c_0123abcd
    ///
    ///   tandem chat tasks c_0123abcd c_4567efab
    Tasks {
        /// The chat id.
        chat: String,
        /// A task's id (from the list).
        id: Option<String>,
    },
    /// Show or change a chat's goal: what it works toward turn after turn,
    /// without anyone typing "continue".
    ///
    /// With a goal set, the chat keeps working: when a turn ends, the next
    /// one starts by itself, until the model says the goal is done (with a
    /// summary and its evidence: files or calls) or blocked (with what it
    /// needs from you). It pauses by itself after 20 turns or 400 model
    /// calls (`[chatd] goal_max_turns`, `goal_max_steps`), when it repeats
    /// the same call with the same result, when a turn fails or chatd
    /// restarts, and when you stop the chat (`tandem chat cancel`). Only a
    /// chat you started has one; setting one replaces the last.
    ///
    /// Without an action, prints the goal: its text, its state with the
    /// turns and model calls used, why it paused, the summary or reason, what
    /// it needs, its evidence. `set WORDS…` sets it (the words joined): its
    /// first turn starts at once, or after the turn that runs now. `pause`
    /// lets the running turn finish and starts no other; `resume` goes on
    /// with a paused or blocked goal with new counts; `clear` removes it.
    /// Exit 1 when chatd refuses, with its reason.
    ///
    /// Examples:
    ///
    ///   tandem chat goal c_0123abcd set Turn the notes in research/ into a two-page summary
    ///
    ///   tandem chat goal c_0123abcd
    ///
    ///   tandem chat goal c_0123abcd resume
    Goal {
        /// The chat id.
        chat: String,
        /// set, pause, resume or clear (none: show the goal).
        #[arg(value_parser = ["set", "pause", "resume", "clear"])]
        action: Option<String>,
        /// set: the goal, in words (joined with spaces).
        words: Vec<String>,
    },
    /// List, start, pause, resume or stop a chat's loops: a prompt sent to
    /// the chat again and again, as if you typed it, until you stop it.
    ///
    /// A loop runs at an interval (--every: 1m to 24h, as 90s, 5m, 2h or
    /// 1h30m; `[chatd] loop_min_interval_s` sets the shortest, 60 s by
    /// default), or self-paced (no --every): after each run the model says
    /// when the next comes, or that the loop is done. A loop watches
    /// something in the chat it runs in; for routine work in a new chat
    /// each time, use a trigger (`tandem trigger`).
    ///
    /// A chat's first loop waits for your yes: `start` asks for it ("Run
    /// this every 5m until you stop it? Each run costs tokens."; a no
    /// removes the loop), takes --yes (-y) instead, and without a terminal
    /// leaves the loop pending until `resume ID`. Once a chat said yes, its later loops start at
    /// once. A run is skipped while the chat is busy (a self-paced one waits
    /// for it to be free). At most 3 loops a chat and 10 on the box, 100
    /// runs a loop (then it ends), 200 loop runs a day on the box (then
    /// loops wait for the next UTC day); three failed runs in a row pause a
    /// loop.
    ///
    /// Without an action, prints one line a loop: its short id, its pace,
    /// state, runs, next run, why it paused, skipped or waits, and its
    /// prompt. `pause ID` lets a run that works finish and starts no other;
    /// `resume ID` starts a paused loop again (due at once, its failures
    /// forgotten) and is the yes to a pending one; `stop ID` removes one,
    /// `stop --all` every loop of the chat (a run that works goes on:
    /// `tandem chat cancel` stops it). ID is the id or its start as the list
    /// shows it. Exit 1 when chatd refuses, with its reason.
    ///
    /// Examples:
    ///
    ///   tandem chat loop c_0123abcd start --every 5m Check the build and tell me when it is green
    ///
    ///   tandem chat loop c_0123abcd start Watch the deploy until it is done
    ///
    ///   tandem chat loop c_0123abcd
    ///
    ///   tandem chat loop c_0123abcd pause l_3f9a1c2d
    ///
    ///   tandem chat loop c_0123abcd stop --all
    Loop {
        /// The chat id.
        chat: String,
        /// start, pause, resume or stop (none: list the loops).
        #[arg(value_parser = ["start", "pause", "resume", "stop"])]
        action: Option<String>,
        /// start: the prompt, in words (joined with spaces); pause, resume,
        /// stop: the loop's id.
        words: Vec<String>,
        /// start: run at this interval (1m to 24h; none: self-paced).
        #[arg(long, value_name = "INTERVAL")]
        every: Option<String>,
        /// start: say yes to the chat's first loop without asking.
        #[arg(long, short)]
        yes: bool,
        /// stop: every loop of the chat.
        #[arg(long)]
        all: bool,
    },
    /// The box's web search settings: which provider web_search asks.
    ///
    /// provider=duckduckgo|searxng, searxng_url (your SearXNG's search
    /// address, its JSON format on), searxng_auth_header (the header its
    /// login goes in, like Authorization), max_results 1-20 (8),
    /// safe_search=off|moderate|strict, language (en, de-CH; empty for
    /// any), time_range=day|week|month|year (empty for any), timeout_s
    /// 2-30 (10). The login's value comes from --auth-value-file (- for
    /// stdin; an empty file clears it); it is kept sealed and never shown.
    /// Prints the settings in force.
    ///
    /// Example:
    ///
    ///   tandem chat web-search provider=searxng searxng_url=https://searx.example.org/search
    ///
    ///   printf 'Basic %s' "$(printf me:pw | base64)" | tandem chat web-search searxng_auth_header=Authorization --auth-value-file -
    WebSearch {
        /// NAME=VALUE to set.
        changes: Vec<String>,
        /// Read the SearXNG login's value from this file (- for stdin).
        #[arg(long, value_name = "FILE")]
        auth_value_file: Option<std::path::PathBuf>,
    },
    /// Tool policies: always, ask or never, for the box or one chat.
    ///
    /// A tool set to `never` is not offered and a call to it is refused;
    /// `ask` shows a card before each call in every mode (yolo too), and
    /// is refused in a run nobody watches (a trigger's or a bot's); `always`
    /// runs without a card (a deny rule still refuses). A tool with no
    /// policy follows the chat's permission mode. A chat's policy is laid
    /// over the box's. TOOL is a built-in tool's name or an MCP tool as
    /// mcp:CONNECTOR:TOOL; TOOL= drops one. Prints the policies in force.
    ///
    /// Examples:
    ///
    ///   tandem chat policies defaults bash=ask web_fetch=never
    ///
    ///   tandem chat policies c_0123abcd bash=always
    Policies {
        /// The chat id, or `defaults` for the box's.
        target: String,
        /// TOOL=always|ask|never to set, TOOL= to drop.
        changes: Vec<String>,
    },
    /// What a chat is offered, and its tool groups switched on or off.
    ///
    /// Lists the chat's built-in tools, its MCP servers' tools (with why one
    /// is not usable) and its tool groups: shell (bash), files, web, media
    /// (describe_image), subagents (spawn_agent, task), saved_agents and
    /// triggers. Every group is on until switched off, except saved_agents,
    /// off until switched on: it lets the model list the saved agents and
    /// start one as a sub-agent, and a message ask for one (`tandem chat
    /// send --agent NAME`, or text `/agent NAME task`). A switch takes
    /// effect at the chat's next turn; its sub-agents follow it.
    ///
    /// Example: tandem chat tools c_0123abcd --off web --off shell
    /// Example: tandem chat tools c_0123abcd --on saved_agents
    Tools {
        /// The chat id.
        chat: String,
        /// Switch a group off (repeat, or a,b); `mcp:ID` is a connector.
        #[arg(long, value_name = "GROUP", value_delimiter = ',')]
        off: Vec<String>,
        /// Switch a group on (repeat, or a,b).
        #[arg(long, value_name = "GROUP", value_delimiter = ',')]
        on: Vec<String>,
        /// Switch saved agents on or off (as --on/--off saved_agents).
        #[arg(long, value_name = "on|off")]
        saved_agents: Option<Switch>,
    },
    /// Show, start or stop a chat's sandbox container.
    ///
    /// A chat's first command starts its sandbox by itself; `start` does it
    /// ahead (the memory guard and the bounds apply, and their reason is
    /// printed when it cannot), `stop` stops it (its files stay). Without a
    /// container runtime chatd answers why (docs/sandbox.md).
    ///
    /// Example: tandem chat sandbox c_0123abcd start
    Sandbox {
        /// The chat id.
        chat: String,
        /// What to do (none: show it).
        #[arg(value_parser = ["start", "stop"])]
        action: Option<String>,
    },
}

pub async fn exec(command: ChatCommand) -> anyhow::Result<ExitCode> {
    match command {
        ChatCommand::Service(verb) => {
            let chatd = crate::daemons::by_name("chatd").context("chatd is in the daemon table")?;
            crate::commands::service::exec(chatd, verb).await
        }
        ChatCommand::Send {
            text,
            chat,
            file,
            prompt,
            resource,
            args,
            agent,
            mode,
            off,
        } => {
            let client = Client::new()?;
            if chat.is_some() && (mode.is_some() || !off.is_empty()) {
                anyhow::bail!(
                    "--mode and --off are for a new chat; for this one use `tandem chat settings \
                     CHAT permission_mode=MODE` and `tandem chat tools CHAT --off GROUP`"
                );
            }
            let asks_agent = agent.is_some() || text.trim_start().starts_with("/agent ");
            // Checked before a new chat is made for it: a mistake leaves none.
            super::mcp_context::check(&client, &prompt, &resource, &args).await?;
            let chat = match chat {
                Some(chat) => chat,
                None => {
                    let mut body = json!({});
                    if let Some(mode) = &mode {
                        body["permission_mode"] = json!(mode);
                    }
                    if asks_agent || !off.is_empty() {
                        let on: &[&str] = if asks_agent { &["saved_agents"] } else { &[] };
                        body["switches"] = json!({"builtins_off": off, "builtins_on": on});
                    }
                    let created = client
                        .call(reqwest::Method::POST, "/conversations", Some(body))
                        .await?;
                    let id = created["id"]
                        .as_str()
                        .context("chatd gave no conversation id")?
                        .to_string();
                    eprintln!("tandem: new chat {id}");
                    if asks_agent {
                        eprintln!("tandem: saved agents on for {id}");
                    }
                    id
                }
            };
            let snapshot = client
                .call(
                    reqwest::Method::GET,
                    &format!("/conversations/{chat}"),
                    None,
                )
                .await?;
            let after = snapshot["seq"].as_i64().unwrap_or(0);
            let context =
                super::mcp_context::context_of(&client, &chat, &prompt, &resource, &args).await?;
            let route = format!("/conversations/{chat}/messages");
            let sent = if file.is_empty() {
                let mut body = json!({"text": text});
                if !context.is_empty() {
                    body["context"] = json!(context);
                }
                if let Some(agent) = &agent {
                    body["agent"] = json!(agent);
                }
                client
                    .ask(reqwest::Method::POST, &route, Some(body))
                    .await?
            } else {
                let mut settings = vec![("text", text)];
                if !context.is_empty() {
                    settings.push(("context", Value::Array(context).to_string()));
                }
                if let Some(agent) = agent {
                    settings.push(("agent", agent));
                }
                let sent = client
                    .send_form(reqwest::Method::POST, &route, &[], &settings, &file)
                    .await?;
                let Ok(answer) = sent else {
                    return Ok(ExitCode::FAILURE);
                };
                answer
            };
            // A slash command (`/help`, `/goal …`): chatd ran it; its answer is the text.
            if let (Some(_), Some(answer)) = (sent["command"].as_str(), sent["text"].as_str()) {
                println!("{answer}");
                return Ok(ExitCode::SUCCESS);
            }
            let Some(run_id) = sent["run_id"].as_str() else {
                eprintln!("tandem: a run is working in this chat; your message waits and reaches the model at its next request");
                return Ok(ExitCode::SUCCESS);
            };
            follow(&client, &chat, after, Some(run_id)).await
        }
        ChatCommand::Consent {
            chat,
            card,
            decision,
        } => {
            let client = Client::new()?;
            client
                .call(
                    reqwest::Method::POST,
                    &format!("/conversations/{chat}/consent"),
                    Some(json!({"card_id": card, "decision": decision})),
                )
                .await?;
            eprintln!("tandem: answered {card}: {decision}");
            Ok(ExitCode::SUCCESS)
        }
        ChatCommand::Push { action } => {
            let client = Client::new()?;
            if action == PushAction::Test {
                let t = client
                    .call(reqwest::Method::POST, "/push/test", Some(json!({})))
                    .await?;
                let n = |k: &str| t[k].as_u64().unwrap_or(0);
                println!(
                    "{} browsers: {} delivered, {} gone (forgotten), {} refused, {} failed",
                    n("subscriptions"),
                    n("delivered"),
                    n("gone"),
                    n("refused"),
                    n("failed")
                );
                return Ok(if n("delivered") > 0 {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                });
            }
            let listed = client
                .call(reqwest::Method::GET, "/push/subscriptions", None)
                .await?;
            let all = listed["subscriptions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if all.is_empty() {
                println!(
                    "no browser is subscribed: turn on \"Notify me on this device\" on the page"
                );
            }
            for s in &all {
                let text = |k: &str| s[k].as_str().unwrap_or("-").to_string();
                println!(
                    "{}  {}  since {}  last push {} {}",
                    text("id"),
                    text("origin"),
                    text("created"),
                    text("last_result"),
                    text("last_sent")
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        ChatCommand::Egress { chat, preset } => {
            let client = Client::new()?;
            let path = format!("/conversations/{chat}/egress");
            let state = match preset {
                Some(preset) => {
                    client
                        .call(
                            reqwest::Method::PUT,
                            &path,
                            Some(json!({ "preset": preset })),
                        )
                        .await?
                }
                None => client.call(reqwest::Method::GET, &path, None).await?,
            };
            let rules = client
                .call(reqwest::Method::GET, &format!("{path}/rules"), None)
                .await?;
            let text = |v: &Value| v.as_str().unwrap_or("?").to_string();
            println!(
                "{chat}: preset {} (in force: {}, the box's ceiling is {})",
                text(&state["preset"]),
                text(&state["effective"]),
                text(&state["ceiling"])
            );
            for rule in rules["rules"].as_array().into_iter().flatten() {
                println!(
                    "  {} {}:{} ({}, {})",
                    text(&rule["verdict"]),
                    text(&rule["host"]),
                    rule["port"],
                    text(&rule["source"]),
                    text(&rule["id"])
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        ChatCommand::Settings {
            chat,
            changes,
            system_prompt_file,
        } => {
            let path = match chat.as_str() {
                "defaults" => "/defaults".to_string(),
                chat => format!("/conversations/{chat}"),
            };
            let (mode, changes): (Vec<String>, Vec<String>) = changes
                .into_iter()
                .partition(|c| c.trim_start().starts_with("permission_mode="));
            let mode = mode
                .last()
                .and_then(|m| m.split_once('='))
                .map(|(_, m)| m.trim().to_string());
            let patch =
                crate::commands::chat_settings::patch(&changes, system_prompt_file.as_deref())?;
            let client = Client::new()?;
            let shown = match (patch, mode, chat.as_str()) {
                // A chat's mode and settings in one write.
                (patch, Some(mode), id) if id != "defaults" => {
                    let mut body = patch.unwrap_or_else(|| json!({}));
                    body["permission_mode"] = json!(mode);
                    let path = format!("/conversations/{id}/settings");
                    client
                        .call(reqwest::Method::PATCH, &path, Some(body))
                        .await?;
                    client
                        .call(reqwest::Method::GET, &format!("/conversations/{id}"), None)
                        .await?
                }
                (patch, Some(mode), _) => {
                    let mut body = json!({ "permission_mode": mode });
                    if let Some(patch) = patch {
                        body["settings"] = patch;
                    }
                    client
                        .call(reqwest::Method::PATCH, &path, Some(body))
                        .await?
                }
                (Some(patch), None, _) => {
                    client
                        .call(
                            reqwest::Method::PATCH,
                            &path,
                            Some(json!({ "settings": patch })),
                        )
                        .await?
                }
                (None, None, _) => client.call(reqwest::Method::GET, &path, None).await?,
            };
            let mode = shown
                .pointer("/conversation/permission_mode")
                .or_else(|| shown.get("permission_mode"));
            if let Some(mode) = mode.and_then(Value::as_str) {
                println!("permission_mode: {mode}");
            }
            let settings = shown
                .pointer("/conversation/settings")
                .or_else(|| shown.get("settings"))
                .cloned()
                .unwrap_or(Value::Null);
            print!("{}", crate::commands::chat_settings::shown(&settings));
            Ok(ExitCode::SUCCESS)
        }
        ChatCommand::Sandbox { chat, action } => {
            let client = Client::new()?;
            let path = format!("/conversations/{chat}/sandbox");
            let state = match action.as_deref() {
                Some("start") => {
                    client
                        .call(reqwest::Method::POST, &path, Some(json!({})))
                        .await?
                }
                Some(_) => {
                    client.call(reqwest::Method::DELETE, &path, None).await?;
                    client.call(reqwest::Method::GET, &path, None).await?
                }
                None => client.call(reqwest::Method::GET, &path, None).await?,
            };
            let text = |v: &Value| v.as_str().unwrap_or("?").to_string();
            println!(
                "{chat}: {} {} (memory {} MiB, user {})",
                text(&state["container"]),
                text(&state["state"]),
                state["memory_bytes"].as_u64().unwrap_or(0) >> 20,
                text(&state["user"])
            );
            Ok(ExitCode::SUCCESS)
        }
        ChatCommand::Files {
            chat,
            action,
            target,
            skip_conflicts,
            to,
            base,
            path,
            regex,
            case,
        } => {
            use crate::commands::chat_files as files;
            match (action.as_deref(), target) {
                (Some("put"), Some(local)) => files::put(&chat, &local, to, base).await,
                (Some("search"), Some(words)) => {
                    let asked = files::Search {
                        words,
                        path,
                        regex,
                        case,
                    };
                    files::search(&chat, &asked).await
                }
                (None, None) => files::show(&chat).await,
                (Some("undo"), Some(target)) => files::undo(&chat, &target, skip_conflicts).await,
                (Some("trash"), None) => files::trash(&chat).await,
                (Some("purge"), path) => files::purge(&chat, path.as_deref()).await,
                (Some("preview"), Some(path)) => files::preview(&chat, &path).await,
                (Some(verb @ ("delete" | "restore")), Some(path)) => {
                    files::delete_or_restore(&chat, verb, &path).await
                }
                (Some(verb), Some(_)) => anyhow::bail!("`{verb}` takes no path"),
                (Some("search"), None) => anyhow::bail!(
                    "search what? give the words to find: tandem chat files {chat} search 'acme invoice'"
                ),
                (Some(verb), None) => anyhow::bail!("{verb} what? give a change set or a path"),
                (None, Some(t)) => anyhow::bail!("`{t}`: say `undo {t}` to undo it"),
            }
        }
        ChatCommand::WebSearch {
            changes,
            auth_value_file,
        } => crate::commands::web_search::run(&changes, auth_value_file.as_deref()).await,
        ChatCommand::Policies { target, changes } => {
            crate::commands::chat_policies::run(&target, &changes).await
        }
        ChatCommand::Tools {
            chat,
            mut off,
            mut on,
            saved_agents,
        } => {
            match saved_agents {
                Some(Switch::On) => on.push("saved_agents".into()),
                Some(Switch::Off) => off.push("saved_agents".into()),
                None => {}
            }
            subagents::tools(&chat, &off, &on).await
        }
        ChatCommand::Cancel { chat } => crate::commands::chat_tasks::stop(&chat).await,
        ChatCommand::Continue { chat } => {
            let client = Client::new()?;
            let Some((after, run)) = crate::commands::chat_tasks::resume(&client, &chat).await?
            else {
                return Ok(ExitCode::FAILURE);
            };
            follow(&client, &chat, after, Some(&run)).await
        }
        ChatCommand::Tasks { chat, id } => match id {
            Some(id) => crate::commands::chat_tasks::show(&chat, &id).await,
            None => crate::commands::chat_tasks::list(&chat).await,
        },
        ChatCommand::Goal {
            chat,
            action,
            words,
        } => crate::commands::chat_goal::exec(&chat, action.as_deref(), &words).await,
        ChatCommand::Loop {
            chat,
            action,
            words,
            every,
            yes,
            all,
        } => {
            let asked = crate::commands::chat_loop::Asked {
                chat: &chat,
                action: action.as_deref(),
                words: &words,
                every: every.as_deref(),
                yes,
                all,
            };
            crate::commands::chat_loop::exec(&asked).await
        }
        ChatCommand::Subagents { chat, id, stop } => match (id, stop) {
            (Some(id), true) => subagents::stop(&chat, &id).await,
            (Some(id), false) => subagents::show(&chat, &id).await,
            (None, _) => subagents::list(&chat).await,
        },
        ChatCommand::Attach { id } => {
            let client = Client::new()?;
            let snapshot = client
                .call(reqwest::Method::GET, &format!("/conversations/{id}"), None)
                .await?;
            if let Some(last) = snapshot["messages"].as_array().and_then(|m| m.last()) {
                if last["status"] == "streaming" {
                    print!("{}", last["text"].as_str().unwrap_or(""));
                }
            }
            follow(&client, &id, snapshot["seq"].as_i64().unwrap_or(0), None).await
        }
    }
}

/// Prints the chat's events after `after`; with `run`, returns when that run ends.
async fn follow(
    client: &Client,
    chat: &str,
    mut after: i64,
    run: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout();
    let mut lost_since: Option<tokio::time::Instant> = None;
    // Sub-agents seen starting and not yet ending, named when `send` leaves.
    let mut working = std::collections::BTreeSet::new();
    loop {
        let response = client
            .http
            .get(format!("{}/conversations/{chat}/events", client.base))
            .header("x-forward-key", &client.key)
            .header("last-event-id", after.to_string())
            .send()
            .await;
        let response = match response {
            Ok(r) if r.status().is_success() => r,
            Ok(r) if r.status().is_client_error() => {
                bail!("chatd refused the event stream: {}", r.status())
            }
            _ => {
                let since = *lost_since.get_or_insert_with(tokio::time::Instant::now);
                if since.elapsed() > Duration::from_secs(120) {
                    bail!("chatd has not answered for 2 minutes; the run goes on without this terminal");
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        if lost_since.take().is_some() {
            eprintln!("\ntandem: reconnected after event {after}");
        }
        let mut body = response.bytes_stream();
        // Bytes, not text: a character may be cut between two chunks.
        let mut frames = tandem_shared::sse::Frames::default();
        while let Some(chunk) = body.next().await {
            let Ok(chunk) = chunk else { break };
            frames.push(&chunk);
            while let Some(frame) = frames.next_frame() {
                let Some(frame) = tandem_shared::sse::parse_frame(&frame) else {
                    continue;
                };
                let Some(seq) = frame.id else { continue };
                after = seq as i64;
                let (kind, data) = (frame.kind.as_str(), frame.data);
                let data: Value = serde_json::from_str(&data).unwrap_or(Value::Null);
                match kind {
                    "text.delta" => {
                        print!("{}", data["text"].as_str().unwrap_or(""));
                        let _ = out.flush();
                    }
                    "run.queued" => eprintln!("tandem: queued (position {})", data["position"]),
                    "run.retrying" => eprintln!(
                        "\ntandem: engine fault, retry {} in {}s: {}",
                        data["attempt"],
                        data["wait_s"],
                        data["reason"].as_str().unwrap_or("")
                    ),
                    "sub_agent_started" | "sub_agent_done" => {
                        let id = data["subagent_id"].as_str().unwrap_or("").to_string();
                        if kind == "sub_agent_started" {
                            working.insert(id);
                        } else {
                            working.remove(&id);
                        }
                        if let Some(line) = subagents::event_line(kind, &data) {
                            eprintln!("\n{line}");
                        }
                    }
                    "task_started" | "task_done" => {
                        if let Some(line) = crate::commands::chat_tasks::event_line(kind, &data) {
                            eprintln!("\n{line}");
                        }
                    }
                    "goal" => eprintln!("\n{}", crate::commands::chat_goal::event_line(&data)),
                    "loops" => eprintln!("\n{}", crate::commands::chat_loop::event_line(&data)),
                    "message.created" => {
                        if let Some(line) =
                            crate::commands::chat_loop::message_line(&data["message"])
                        {
                            eprintln!("\n{line}");
                        }
                    }
                    "tool.consent" if data["subagent_id"].is_string() => {
                        if let Some(line) = subagents::consent_line(&data) {
                            eprintln!("\n{line}");
                        }
                    }
                    "tool.consent" if data["name"] == "egress" => eprintln!(
                        "\ntandem: {}\n        answer with: tandem chat consent {chat} {} once|always|deny",
                        data["summary"].as_str().unwrap_or(""),
                        data["card_id"].as_str().unwrap_or(""),
                    ),
                    "tool.consent" => eprintln!(
                        "\ntandem: the model asks to run {} ({}): {}\n        answer with: tandem chat consent {chat} {} once|always|deny",
                        data["name"].as_str().unwrap_or(""),
                        data["reason"].as_str().unwrap_or(""),
                        data["summary"].as_str().unwrap_or(""),
                        data["card_id"].as_str().unwrap_or(""),
                    ),
                    "tool.started" => {
                        eprintln!("\ntandem: > {}", data["summary"].as_str().unwrap_or(""))
                    }
                    "tool.finished" if data["ok"] == false => eprintln!(
                        "tandem:   failed: {}",
                        data["summary"].as_str().unwrap_or("")
                    ),
                    "compacted" => eprintln!(
                        "\ntandem: the chat was compacted to fit: {} -> {} tokens",
                        data["before"], data["after"]
                    ),
                    "reset" => {
                        eprintln!("\ntandem: too far behind; following from event {seq}");
                    }
                    "run.finished" => {
                        let status = data["status"].as_str().unwrap_or("");
                        if run.is_none_or(|r| data["run_id"] == r) {
                            println!();
                            if status == "done" {
                                if run.is_some() && !working.is_empty() {
                                    eprintln!(
                                        "tandem: {} sub-agent(s) still work in the background; \
                                         see them with: tandem chat subagents {chat}",
                                        working.len()
                                    );
                                }
                                if run.is_some() {
                                    return Ok(ExitCode::SUCCESS);
                                }
                            } else {
                                eprintln!(
                                    "tandem: run {status}{}",
                                    data["error"]
                                        .as_str()
                                        .map(|e| format!(": {e}"))
                                        .unwrap_or_default()
                                );
                                if run.is_some() {
                                    return Ok(ExitCode::FAILURE);
                                }
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        eprintln!("\ntandem: the event stream closed; reconnecting from event {after}");
        lost_since.get_or_insert_with(tokio::time::Instant::now);
    }
}

/// A switch's two words.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum Switch {
    On,
    Off,
}

/// What `tandem chat push` does.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum PushAction {
    /// The browsers chatd pushes to.
    List,
    /// A test push to each.
    Test,
}
