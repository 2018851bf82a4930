//! MCP connectors: the owner's tool servers, kept in chat.sqlite3
//! (`store/mcp.rs`), their token, headers and environment sealed with the
//! shared seal (`mcp.key`, 0600) and write-only: the API says `has_token`,
//! `has_headers`, `has_env`, never a value, and no log or error repeats one.
//!
//! `address.rs` decides where an `http` connector may connect (netpolicy on
//! every address and redirect, `[chatd] mcp_allow_private`); `client.rs`
//! opens a session on the `rmcp` client and lists the tools, over Streamable
//! HTTP or, for an older server, `legacy.rs`'s HTTP+SSE. The routes are
//! `api/mcp.rs`'s.
//!
//! `sessions.rs` keeps each chat's sessions, `offer.rs` names their tools
//! for a turn, `stdio.rs` runs a `stdio` server in the chat's sandbox, or
//! through hostexecd on a box without sandboxes.
//! `context.rs` turns a server's prompts and resources into text for a
//! message. `apps.rs` reads the pages tools declare (MCP Apps), which
//! `api/mcp_apps.rs` serves.

pub mod address;
pub mod apps;
pub mod client;
pub mod context;
pub mod legacy;
pub mod offer;
pub mod sessions;
pub mod stdio;

use std::collections::BTreeMap;
use std::sync::Arc;

use tandem_shared::netpolicy::{BoxPolicy, Policy};
use tandem_shared::seal::SealKey;
use tandem_shared::secrets::Secret;

use crate::config::ChatdConfig;
use crate::store::mcp::Connector;
pub use crate::words::{ConnectorState, Transport};
use address::Private;

/// Connectors kept at most.
pub const MAX_CONNECTORS: usize = 20;
/// A connector's name, in characters.
pub const MAX_NAME: usize = 60;
/// A token, a header's value, an environment value, in bytes.
pub const MAX_SECRET: usize = 8192;
/// Headers (and environment variables) a connector keeps at most.
pub const MAX_PAIRS: usize = 20;

/// chatd's side of MCP: the sealing key and the address rules.
pub struct Mcp {
    seal: SealKey,
    addresses: BoxPolicy,
    pub private: Private,
}

impl Mcp {
    pub fn start(config: &ChatdConfig) -> anyhow::Result<Mcp> {
        let seal = SealKey::load_or_make(&config.data_dir.join("mcp.key"))?;
        let addresses = BoxPolicy::open("mcp");
        let private = if config.mcp_allow_private {
            tracing::warn!(
                "mcp: mcp_allow_private is on: connectors may reach private and loopback addresses"
            );
            Private::Open
        } else {
            Private::Shut
        };
        Ok(Mcp {
            seal,
            addresses,
            private,
        })
    }

    /// The policy for a decision now.
    pub fn policy(&self) -> Arc<Policy> {
        self.addresses.current()
    }

    /// A secret of chatd's own (not a connector's) sealed for `owner`,
    /// with the same key (`web-search:auth` is the search login's).
    pub fn seal_for(&self, owner: &str, value: &str) -> String {
        self.seal.seal(value, owner)
    }

    /// Opens what `seal_for` made for `owner`.
    pub fn open_for(
        &self,
        owner: &str,
        sealed: &str,
    ) -> Result<tandem_shared::secrets::Secret, tandem_shared::seal::OpenError> {
        self.seal.open(sealed, owner)
    }

    pub fn seal(&self, id: &str, what: Secretive, value: &str) -> String {
        self.seal.seal(value, &what.owner(id))
    }

    /// A connector's secrets opened for a connection. A value that does not
    /// open (another key) is an error naming the field, never its value.
    pub fn target(&self, c: &Connector) -> Result<Reach, String> {
        match c.transport {
            Transport::Http => self.http_target(c).map(Reach::Http),
            Transport::Stdio => self.launch(c).map(Reach::Stdio),
        }
    }

    fn launch(&self, c: &Connector) -> Result<stdio::Launch, String> {
        let args: Vec<String> = serde_json::from_str(&c.args)
            .map_err(|_| "the saved arguments do not read back".to_string())?;
        let env = match &c.env {
            Some(sealed) => {
                let text = self.open(&c.id, Secretive::Env, sealed)?;
                let pairs: BTreeMap<String, String> = serde_json::from_str(text.expose())
                    .map_err(|_| "the saved environment does not read back".to_string())?;
                pairs
                    .into_iter()
                    .map(|(k, v)| (k, Secret::new(v)))
                    .collect()
            }
            None => Vec::new(),
        };
        Ok(stdio::Launch {
            command: c.command.clone(),
            args,
            env,
        })
    }

    fn http_target(&self, c: &Connector) -> Result<client::Target, String> {
        let url = address::parse(&c.url).map_err(|e| format!("the saved address {e}"))?;
        let token = match &c.token {
            Some(sealed) => Some(self.open(&c.id, Secretive::Token, sealed)?),
            None => None,
        };
        let headers = match &c.headers {
            Some(sealed) => {
                let text = self.open(&c.id, Secretive::Headers, sealed)?;
                let pairs: BTreeMap<String, String> = serde_json::from_str(text.expose())
                    .map_err(|_| "the saved headers do not read back".to_string())?;
                pairs
                    .into_iter()
                    .map(|(k, v)| (k, Secret::new(v)))
                    .collect()
            }
            None => Vec::new(),
        };
        Ok(client::Target {
            url,
            token,
            headers,
        })
    }

    fn open(&self, id: &str, what: Secretive, sealed: &str) -> Result<Secret, String> {
        self.seal.open(sealed, &what.owner(id)).map_err(|_| {
            format!(
                "the saved {} does not open with mcp.key (was the key replaced?): save it again",
                what.name()
            )
        })
    }
}

/// How a connector is reached, with its secrets opened.
pub enum Reach {
    Http(client::Target),
    Stdio(stdio::Launch),
}

impl Reach {
    /// `text` with the connector's secrets taken out (see `Target::clean`;
    /// a stdio server's environment values).
    pub fn clean(&self, text: String) -> String {
        match self {
            Reach::Http(target) => target.clean(text),
            Reach::Stdio(launch) => launch.clean(text),
        }
    }

    /// A failure's reason with the connector's secrets taken out.
    pub fn redact(&self, failure: client::Failure) -> client::Failure {
        match failure {
            client::Failure::SignIn(why) => client::Failure::SignIn(self.clean(why)),
            client::Failure::Connect(why) => client::Failure::Connect(self.clean(why)),
        }
    }
}

/// Which sealed value: each is bound to its connector and its field.
#[derive(Debug, Clone, Copy)]
pub enum Secretive {
    Token,
    Headers,
    Env,
}

impl Secretive {
    fn owner(self, id: &str) -> String {
        format!("mcp:{id}:{}", self.name())
    }

    fn name(self) -> &'static str {
        match self {
            Secretive::Token => "token",
            Secretive::Headers => "headers",
            Secretive::Env => "env",
        }
    }
}

/// What an agent's `tools` names to be granted a connector's tools.
pub fn connector_grant(id: &str) -> String {
    format!("connector:{id}")
}

/// The state the list shows for a row.
pub fn state_of(c: &Connector) -> ConnectorState {
    if !c.enabled {
        return ConnectorState::Off;
    }
    c.state.unwrap_or(ConnectorState::Untested)
}

/// Checks a name: 1 to 60 characters, no control characters.
pub fn check_name(name: &str) -> Result<String, String> {
    let name = name.trim();
    let chars = name.chars().count();
    if chars == 0 || chars > MAX_NAME {
        return Err(format!("must be 1 to {MAX_NAME} characters, not {chars}"));
    }
    if name.chars().any(char::is_control) {
        return Err("must not hold control characters".into());
    }
    Ok(name.to_string())
}

/// Headers rmcp sets itself: a connector may not replace them.
const RESERVED: &[&str] = &[
    "accept",
    "content-type",
    "content-length",
    "host",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

/// Checks the headers: at most 20, names HTTP header names (not one MCP
/// sets, not Authorization: that is the token), values of at most 8 KiB.
/// The error names the header, never its value.
pub fn check_headers(headers: &BTreeMap<String, String>) -> Result<(), String> {
    if headers.len() > MAX_PAIRS {
        return Err(format!(
            "has {} headers; a connector keeps {MAX_PAIRS} at most",
            headers.len()
        ));
    }
    for (name, value) in headers {
        if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(format!("`{}` is not a header name", name.escape_debug()));
        }
        let lower = name.to_ascii_lowercase();
        if RESERVED.contains(&lower.as_str()) {
            return Err(format!(
                "`{name}` is set by MCP itself and cannot be replaced"
            ));
        }
        if lower == "authorization" {
            return Err("`Authorization`: give it as the token (sent as `Bearer <token>`)".into());
        }
        if value.len() > MAX_SECRET {
            return Err(format!("`{name}`'s value is over {MAX_SECRET} bytes"));
        }
        if reqwest::header::HeaderValue::from_str(value).is_err() {
            return Err(format!(
                "`{name}`'s value holds characters a header cannot carry"
            ));
        }
    }
    Ok(())
}

/// Checks a token: at most 8 KiB of characters a header can carry.
pub fn check_token(token: &str) -> Result<(), String> {
    if token.len() > MAX_SECRET {
        return Err(format!("is over {MAX_SECRET} bytes"));
    }
    if reqwest::header::HeaderValue::from_str(&format!("Bearer {token}")).is_err() {
        return Err("holds characters a header cannot carry".into());
    }
    Ok(())
}

/// The longest command, and argument, in bytes; arguments at most.
pub const MAX_COMMAND: usize = 1024;
pub const MAX_ARG: usize = 4096;
pub const MAX_ARGS: usize = 64;

/// Checks a stdio command: one program (a name on the sandbox's, or
/// hostexecd's, PATH or a path), run without a shell, so no spaces: its arguments go in `args`.
pub fn check_command(command: &str) -> Result<(), String> {
    if command.is_empty() {
        return Err("is needed: the program that runs the server (npx, uvx, a path)".into());
    }
    if command.len() > MAX_COMMAND {
        return Err(format!("is over {MAX_COMMAND} bytes"));
    }
    if command.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(
            "is one program, run without a shell: give its arguments in `args`, not here".into(),
        );
    }
    Ok(())
}

/// Checks a stdio command's arguments: at most 64 of 4 KiB, no NUL.
pub fn check_args(args: &[String]) -> Result<(), String> {
    if args.len() > MAX_ARGS {
        return Err(format!("has {} arguments; {MAX_ARGS} at most", args.len()));
    }
    for (i, arg) in args.iter().enumerate() {
        if arg.len() > MAX_ARG {
            return Err(format!("argument {i} is over {MAX_ARG} bytes"));
        }
        if arg.contains('\0') {
            return Err(format!("argument {i} holds a NUL byte"));
        }
    }
    Ok(())
}

/// Checks a stdio server's environment: at most 20 variables, names of
/// letters, digits and `_` (not HOME: the server's own folder), values of
/// at most 8 KiB without NUL. The error names the variable, never its value.
pub fn check_env(env: &BTreeMap<String, String>) -> Result<(), String> {
    if env.len() > MAX_PAIRS {
        return Err(format!(
            "has {} variables; a connector keeps {MAX_PAIRS} at most",
            env.len()
        ));
    }
    for (name, value) in env {
        let good = !name.is_empty()
            && name.len() <= 128
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !good {
            return Err(format!(
                "`{}` is not a variable name (letters, digits and _)",
                name.escape_debug()
            ));
        }
        if name == "HOME" {
            return Err("`HOME` is set by tandem: the server's own folder".into());
        }
        if value.len() > MAX_SECRET {
            return Err(format!("`{name}`'s value is over {MAX_SECRET} bytes"));
        }
        if value.contains('\0') {
            return Err(format!("`{name}`'s value holds a NUL byte"));
        }
    }
    Ok(())
}
