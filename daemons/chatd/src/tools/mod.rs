//! The agent tools a run offers the model, over one chat's [`Workspace`].
//!
//! chatd sends [`Registry::openai_tools`] with each request, calls [`run`]
//! (blocking: in `spawn_blocking`) for each tool call, shows
//! [`summarize_call`] and [`ToolOutput::summary`] as events, and replaces
//! arguments by [`stub_arguments`] in later requests so they stay short.

pub mod describe;
pub mod files;
pub mod fit;
pub mod goal;
pub mod groups;
pub mod loops;
pub mod search;
pub mod skill;
pub mod spawn;
pub mod task;
pub mod todo;
pub mod web;

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::workspace::{ToolError, Workspace};

pub use fit::fit_output;

/// The most characters one tool result may hold.
pub const MAX_RESULT_CHARS: usize = 64_000;

/// What a tool may do, for chatd's policy (ask first, log, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    Read,
    Write,
    /// Runs something (a later `bash`).
    Command,
}

#[derive(Debug, Clone)]
pub struct ToolSpec {
    pub name: &'static str,
    pub description: &'static str,
    /// JSON schema of the arguments object.
    pub parameters: Value,
    pub effect: Effect,
}

/// The tools offered in a chat, in the order they are offered.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    specs: Vec<ToolSpec>,
}

impl Registry {
    /// The workspace tools: read_file write_file edit_file move_file delete_file
    /// list_files grep todo_write.
    pub fn base() -> Registry {
        Registry {
            specs: vec![
                files::read_file_spec(),
                files::write_file_spec(),
                files::edit_file_spec(),
                files::move_file_spec(),
                files::delete_file_spec(),
                files::list_files_spec(),
                search::grep_spec(),
                todo::todo_write_spec(),
            ],
        }
    }

    /// The tools chatd offers: the workspace tools, then web_fetch and
    /// web_search (through egressd, which asks the person per new host),
    /// and describe_image (offered to a chat whose model does not see
    /// images while another model does).
    pub fn chatd() -> Registry {
        let mut registry = Registry::base();
        registry.register(files::read_document_spec());
        registry.register(web::web_fetch_spec());
        registry.register(web::web_search_spec());
        registry.register(describe::describe_image_spec());
        registry
    }

    /// Adds a tool, replacing one of the same name.
    pub fn register(&mut self, spec: ToolSpec) {
        match self.specs.iter_mut().find(|s| s.name == spec.name) {
            Some(existing) => *existing = spec,
            None => self.specs.push(spec),
        }
    }

    pub fn get(&self, name: &str) -> Option<&ToolSpec> {
        self.specs.iter().find(|s| s.name == name)
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.specs.iter().map(|s| s.name).collect()
    }

    pub fn specs(&self) -> &[ToolSpec] {
        &self.specs
    }

    /// The chat-completions `tools` array.
    pub fn openai_tools(&self) -> Value {
        Value::Array(
            self.specs
                .iter()
                .map(|s| {
                    json!({
                        "type": "function",
                        "function": {
                            "name": s.name,
                            "description": s.description,
                            "parameters": s.parameters,
                        }
                    })
                })
                .collect(),
        )
    }
}

pub struct ToolContext<'a> {
    pub workspace: &'a Workspace,
    pub call_id: &'a str,
    /// Room for this result in characters; chatd computes it, at most [`MAX_RESULT_CHARS`].
    pub budget_chars: usize,
    /// The chat's way to the web (egressd's listener and the chat's token);
    /// `None` where the web tools are not offered.
    pub web: Option<&'a web::WebAccess>,
    /// The document reader; `None` where documents are not read (tests).
    pub documents: Option<&'a crate::documents::Documents>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    pub ok: bool,
    /// What the model reads.
    pub text: String,
    /// One line for the `tool.finished` event.
    pub summary: String,
    /// Size of the full output before any cut.
    pub bytes: u64,
}

impl ToolOutput {
    pub fn ok(text: String, summary: String, bytes: u64) -> ToolOutput {
        ToolOutput {
            ok: true,
            text,
            summary: one_line(&summary, SUMMARY_CHARS),
            bytes,
        }
    }

    pub fn failed(name: &str, message: &str) -> ToolOutput {
        ToolOutput {
            ok: false,
            text: message.to_string(),
            summary: one_line(&format!("{name} failed: {message}"), SUMMARY_CHARS),
            bytes: message.len() as u64,
        }
    }
}

/// How long a summary line gets.
const SUMMARY_CHARS: usize = 120;

/// Runs one tool call. Blocking. Every problem (unknown tool, bad JSON, a
/// missing or ill-typed argument, a refused path) is an `ok: false` output
/// whose text tells the model what to do instead.
pub fn run(registry: &Registry, name: &str, arguments: &str, ctx: &ToolContext) -> ToolOutput {
    if registry.get(name).is_none() {
        let known = registry.names().join(", ");
        return ToolOutput::failed(
            name,
            &format!(
                "there is no tool `{}` here; the tools are: {known}",
                one_line(name, 60)
            ),
        );
    }
    let args = match Args::parse(name, arguments) {
        Ok(args) => args,
        Err(err) => return ToolOutput::failed(name, err.message()),
    };
    let result = match name {
        "read_file" => files::read_file(&args, ctx),
        "read_document" => files::read_document(&args, ctx),
        "write_file" => files::write_file(&args, ctx),
        "edit_file" => files::edit_file(&args, ctx),
        "move_file" => files::move_file(&args, ctx),
        "delete_file" => files::delete_file(&args, ctx),
        "list_files" => files::list_files(&args, ctx),
        "grep" => search::grep(&args, ctx),
        "todo_write" => todo::todo_write(&args, ctx),
        "web_fetch" => web::web_fetch(&args, ctx),
        "web_search" => web::web_search(&args, ctx),
        // Registered by chatd with its own runner (bash, ...).
        _ => Err(ToolError::new(format!(
            "`{name}` is not run by the workspace tools"
        ))),
    };
    result.unwrap_or_else(|err| ToolOutput::failed(name, err.message()))
}

/// The arguments object of one call, with field errors that name the tool.
pub struct Args {
    tool: String,
    map: Map<String, Value>,
}

impl Args {
    pub fn parse(tool: &str, arguments: &str) -> Result<Args, ToolError> {
        let trimmed = arguments.trim();
        // Some models send "" for a call without arguments.
        let value: Value = if trimmed.is_empty() {
            Value::Object(Map::new())
        } else {
            serde_json::from_str(trimmed).map_err(|e| {
                ToolError::new(format!(
                    "{tool}: the arguments are not valid JSON ({e}); send one JSON object"
                ))
            })?
        };
        match value {
            Value::Object(map) => Ok(Args {
                tool: tool.to_string(),
                map,
            }),
            _ => Err(ToolError::new(format!(
                "{tool}: the arguments must be a JSON object"
            ))),
        }
    }

    pub fn tool(&self) -> &str {
        &self.tool
    }

    fn present(&self, field: &str) -> Option<&Value> {
        self.map.get(field).filter(|v| !v.is_null())
    }

    fn error(&self, field: &str, what: &str) -> ToolError {
        ToolError::new(format!("{}: \"{field}\" {what}", self.tool))
    }

    /// A required string; `hint` says what it is.
    pub fn string(&self, field: &str, hint: &str) -> Result<&str, ToolError> {
        match self.present(field) {
            Some(Value::String(s)) => Ok(s),
            Some(_) => Err(self.error(field, &format!("must be a string ({hint})"))),
            None => Err(self.error(field, &format!("is required ({hint})"))),
        }
    }

    pub fn opt_string(&self, field: &str, hint: &str) -> Result<Option<&str>, ToolError> {
        match self.present(field) {
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(self.error(field, &format!("must be a string ({hint})"))),
            None => Ok(None),
        }
    }

    /// A whole number ≥ `min`; a number written as a string is taken too.
    pub fn opt_count(&self, field: &str, min: u64) -> Result<Option<u64>, ToolError> {
        let value = match self.present(field) {
            None => return Ok(None),
            Some(Value::Number(n)) => n.as_u64().or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                    .map(|f| f as u64)
            }),
            Some(Value::String(s)) => s.trim().parse::<u64>().ok(),
            Some(_) => None,
        };
        match value {
            Some(n) if n >= min => Ok(Some(n)),
            _ => Err(self.error(field, &format!("must be a whole number ≥ {min}"))),
        }
    }

    pub fn opt_bool(&self, field: &str) -> Result<Option<bool>, ToolError> {
        match self.present(field) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(Value::String(s)) if s == "true" => Ok(Some(true)),
            Some(Value::String(s)) if s == "false" => Ok(Some(false)),
            Some(_) => Err(self.error(field, "must be true or false")),
        }
    }

    pub fn value(&self, field: &str) -> Option<&Value> {
        self.present(field)
    }

    pub fn field_error(&self, field: &str, what: &str) -> ToolError {
        self.error(field, what)
    }
}

/// One line for `tool.started`: what is being done to what, never file content.
pub fn summarize_call(name: &str, arguments: &str) -> String {
    let map = match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(map)) => map,
        _ if arguments.trim().is_empty() => Map::new(),
        _ => {
            return one_line(
                &format!("{name} (arguments are not valid JSON)"),
                SUMMARY_CHARS,
            )
        }
    };
    let text = |field: &str| {
        map.get(field)
            .and_then(Value::as_str)
            .map(|s| one_line(s, 80))
    };
    let number = |field: &str| {
        map.get(field).and_then(|v| {
            v.as_u64()
                .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
        })
    };
    let path = text("path").unwrap_or_else(|| "?".into());
    let line = match name {
        "read_file" | "read_document" => {
            let mut line = format!("{name} {path}");
            match (number("offset"), number("column")) {
                (Some(offset), Some(column)) if column > 1 => {
                    line.push_str(&format!(" (line {offset} from column {column})"))
                }
                (Some(offset), _) if offset > 1 => line.push_str(&format!(" (from line {offset})")),
                _ => {}
            }
            line
        }
        "write_file" => format!("write_file {path}"),
        "delete_file" => format!("delete_file {path}"),
        "move_file" => {
            let from = text("from").unwrap_or_else(|| "?".into());
            let to = text("to").unwrap_or_else(|| "?".into());
            format!("move_file {from} to {to}")
        }
        "edit_file" => {
            let all = map.get("replace_all").and_then(Value::as_bool) == Some(true);
            format!("edit_file {path}{}", if all { " (all)" } else { "" })
        }
        "list_files" => {
            let pattern = text("pattern").unwrap_or_else(|| "**/*".into());
            let folder = text("path").unwrap_or_else(|| ".".into());
            format!("list_files {pattern} in {}", folder_shown(&folder))
        }
        "grep" => {
            let pattern = text("pattern")
                .map(|p| one_line(&p, 60))
                .unwrap_or_default();
            let folder = text("path").unwrap_or_else(|| ".".into());
            let mut line = format!("grep \"{pattern}\" in {}", folder_shown(&folder));
            if let Some(glob) = text("glob") {
                line.push_str(&format!(" ({glob})"));
            }
            line
        }
        spawn::NAME => {
            let task = map.get("task").and_then(Value::as_str).unwrap_or("?");
            let background = map.get("wait").and_then(Value::as_bool) == Some(false);
            format!(
                "spawn_agent «{}»{}",
                spawn::title_of(task),
                if background { " (background)" } else { "" }
            )
        }
        task::NAME => {
            let title = map.get("title").and_then(Value::as_str).unwrap_or("?");
            format!("task «{}»", one_line(title, 60))
        }
        loops::NEXT => {
            let wait = map.get("wait").map(|w| match w {
                Value::String(s) => one_line(s, 20),
                other => other.to_string(),
            });
            format!("schedule_next in {}", wait.unwrap_or_else(|| "?".into()))
        }
        loops::DONE => "loop_done".to_string(),
        goal::DONE | goal::BLOCKED => {
            let field = if name == goal::DONE {
                "summary"
            } else {
                "reason"
            };
            let note = map.get(field).and_then(Value::as_str).unwrap_or("?");
            format!("{name} «{}»", one_line(note, 60))
        }
        "todo_write" => {
            let n = map
                .get("todos")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            format!("todo_write {n} item{}", if n == 1 { "" } else { "s" })
        }
        _ => {
            // A later tool: its most telling short argument.
            let detail = ["command", "url", "query", "path", "pattern"]
                .iter()
                .find_map(|f| text(f));
            match detail {
                Some(detail) => format!("{name} {detail}"),
                None => name.to_string(),
            }
        }
    };
    one_line(&line, SUMMARY_CHARS)
}

fn folder_shown(folder: &str) -> String {
    if folder == "." || folder.ends_with('/') {
        folder.to_string()
    } else {
        format!("{folder}/")
    }
}

/// Collapses `s` to one line of at most `max` characters.
/// A call's arguments as an object of only `names`, or why not (the
/// words a tool's refusal gives the model).
pub fn object_of(
    arguments: &str,
    tool: &str,
    names: &[&str],
) -> Result<Map<String, Value>, String> {
    let Ok(Value::Object(map)) = serde_json::from_str::<Value>(arguments) else {
        return Err("the arguments are not a JSON object".to_string());
    };
    if let Some(other) = map.keys().find(|k| !names.contains(&k.as_str())) {
        return Err(format!(
            "`{}` is not an argument of {tool} ({})",
            other.chars().take(40).collect::<String>(),
            names.join(", ")
        ));
    }
    Ok(map)
}

pub fn one_line(s: &str, max: usize) -> String {
    let flat: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    fit::cut_chars(&flat, max)
}

/// Strings of edit_file shorter than this are repeated as they are.
const STUB_OVER_CHARS: usize = 2_000;

/// The arguments of a finished call with its big strings replaced by a short,
/// deterministic stub, for later requests: write_file's `content` always,
/// edit_file's `old_string`/`new_string` when over 2,000 characters. `None`
/// when nothing would change.
pub fn stub_arguments(name: &str, arguments: &str) -> Option<String> {
    let Ok(Value::Object(mut map)) = serde_json::from_str::<Value>(arguments) else {
        return None;
    };
    let path = map
        .get("path")
        .and_then(Value::as_str)
        .unwrap_or("?")
        .to_string();
    let mut changed = false;
    let fields: &[&str] = match name {
        "write_file" => &["content"],
        "edit_file" => &["old_string", "new_string"],
        _ => return None,
    };
    for &field in fields {
        let Some(Value::String(s)) = map.get(field) else {
            continue;
        };
        if is_stub(field, s) {
            continue;
        }
        if name == "edit_file" && s.chars().count() <= STUB_OVER_CHARS {
            continue;
        }
        let stub = stub_for(field, &path, s);
        map.insert(field.to_string(), Value::String(stub));
        changed = true;
    }
    if !changed {
        return None;
    }
    serde_json::to_string(&Value::Object(map)).ok()
}

/// A string [`stub_for`] made (so stubbing twice changes nothing).
fn is_stub(field: &str, s: &str) -> bool {
    s.strip_prefix('[')
        .and_then(|rest| rest.strip_prefix(field))
        .is_some_and(|rest| rest.starts_with(" not repeated: ") && s.ends_with(']'))
}

fn stub_for(field: &str, path: &str, s: &str) -> String {
    let digest = Sha256::digest(s.as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    let lines = files::line_count(s.as_bytes());
    let read = json!({ "path": path }).to_string();
    let what = format!(
        "{} line{}, {} bytes, sha256 {hex}…",
        fit::commas(lines),
        if lines == 1 { "" } else { "s" },
        fit::commas(s.len() as u64)
    );
    match field {
        "content" => format!("[content not repeated: {path}, {what}; read_file {read} shows it]"),
        "new_string" => format!(
            "[new_string not repeated: {path}, {what}; read_file {read} shows the file now]"
        ),
        _ => format!("[{field} not repeated: {path}, {what}; it was replaced]"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_lists_base_tools_in_openai_shape() {
        let mut registry = Registry::base();
        assert_eq!(
            registry.names(),
            vec![
                "read_file",
                "write_file",
                "edit_file",
                "move_file",
                "delete_file",
                "list_files",
                "grep",
                "todo_write"
            ]
        );
        let tools = registry.openai_tools();
        let first = &tools[0];
        assert_eq!(first["type"], "function");
        assert_eq!(first["function"]["name"], "read_file");
        assert_eq!(first["function"]["parameters"]["type"], "object");
        registry.register(ToolSpec {
            name: "bash",
            description: "run a command",
            parameters: json!({"type": "object", "properties": {}}),
            effect: Effect::Command,
        });
        assert_eq!(
            registry.get("bash").map(|s| s.effect),
            Some(Effect::Command)
        );
        assert_eq!(registry.names().len(), 9);
        let chatd = Registry::chatd();
        assert_eq!(
            &chatd.names()[8..],
            ["read_document", "web_fetch", "web_search", "describe_image"]
        );
        assert!(chatd.specs().iter().all(|s| s.effect != Effect::Command));
        assert_eq!(chatd.get("web_fetch").map(|s| s.effect), Some(Effect::Read));
    }

    #[test]
    fn bad_calls_name_the_field() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = Workspace::open(dir.path()).expect("ws");
        let ctx = ToolContext {
            workspace: &ws,
            call_id: "c1",
            budget_chars: MAX_RESULT_CHARS,
            web: None,
            documents: None,
        };
        let registry = Registry::base();
        let out = run(&registry, "read_file", "{}", &ctx);
        assert!(!out.ok);
        assert_eq!(
            out.text,
            "read_file: \"path\" is required (a path inside the workspace)"
        );
        let out = run(&registry, "read_file", r#"{"path": 3}"#, &ctx);
        assert!(
            out.text.contains("\"path\" must be a string"),
            "{}",
            out.text
        );
        let out = run(
            &registry,
            "read_file",
            r#"{"path": "a", "offset": -1}"#,
            &ctx,
        );
        assert!(
            out.text.contains("\"offset\" must be a whole number"),
            "{}",
            out.text
        );
        let out = run(&registry, "read_file", "{not json", &ctx);
        assert!(out.text.contains("not valid JSON"), "{}", out.text);
        let out = run(&registry, "nope", "{}", &ctx);
        assert!(
            !out.ok && out.text.contains("no tool `nope`"),
            "{}",
            out.text
        );
        assert!(!out.summary.contains('\n'));
    }

    #[test]
    fn summaries_are_one_short_line() {
        assert_eq!(
            summarize_call("read_file", r#"{"path":"notes/a.md","offset":31}"#),
            "read_file notes/a.md (from line 31)"
        );
        assert_eq!(
            summarize_call(
                "edit_file",
                r#"{"path":"src/x.rs","old_string":"a","new_string":"b"}"#
            ),
            "edit_file src/x.rs"
        );
        assert_eq!(
            summarize_call("grep", r#"{"pattern":"fn main","path":"src"}"#),
            "grep \"fn main\" in src/"
        );
        let long = format!(r#"{{"path":"a.md","content":"{}"}}"#, "x".repeat(5000));
        assert_eq!(summarize_call("write_file", &long), "write_file a.md");
        let s = summarize_call(
            "grep",
            &format!(r#"{{"pattern":"{}"}}"#, "y\\n".repeat(300)),
        );
        assert!(s.chars().count() <= 120 && !s.contains('\n'), "{s}");
    }

    #[test]
    fn stubs_are_deterministic_and_only_for_big_strings() {
        let content = "line\n".repeat(317);
        let args = json!({"path": "notes/a.md", "content": content}).to_string();
        let a = stub_arguments("write_file", &args).expect("stubbed");
        let b = stub_arguments("write_file", &args).expect("stubbed");
        assert_eq!(a, b);
        let v: Value = serde_json::from_str(&a).expect("json");
        let stub = v["content"].as_str().expect("string");
        assert!(
            stub.starts_with("[content not repeated: notes/a.md, 317 lines, 1,585 bytes, sha256 "),
            "{stub}"
        );
        assert!(
            stub.ends_with(r#"; read_file {"path":"notes/a.md"} shows it]"#),
            "{stub}"
        );
        // Already stubbed: nothing changes.
        assert_eq!(stub_arguments("write_file", &a), None);
        let small = json!({"path": "a", "old_string": "x", "new_string": "y"}).to_string();
        assert_eq!(stub_arguments("edit_file", &small), None);
        let big =
            json!({"path": "a", "old_string": "x", "new_string": "z".repeat(2001)}).to_string();
        let stubbed = stub_arguments("edit_file", &big).expect("stubbed");
        let v: Value = serde_json::from_str(&stubbed).expect("json");
        assert_eq!(v["old_string"], "x");
        assert!(v["new_string"]
            .as_str()
            .expect("string")
            .starts_with("[new_string not repeated: a, 1 line, 2,001 bytes"));
        assert_eq!(stub_arguments("read_file", r#"{"path":"a"}"#), None);
        assert_eq!(stub_arguments("write_file", "not json"), None);
    }
}
