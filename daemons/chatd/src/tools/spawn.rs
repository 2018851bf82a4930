//! spawn_agent: hands a task to a sub-agent, a chat of its own with the
//! parent's tools (or fewer) and places. What the call asks is read and
//! checked here; `runs/subagents.rs` starts and waits for it.

use serde_json::{json, Value};

use super::{Effect, ToolSpec};

pub const NAME: &str = "spawn_agent";
/// The saved agents a chat may start (opt-in: `saved_agents`).
pub const LIST_NAME: &str = "list_agents";
/// Agents list_agents lists, at most.
pub const LIST_MAX: usize = 100;
/// A description's characters as list_agents gives it, at most.
const DESCRIPTION_CHARS: usize = 160;
/// list_agents' entries' characters, at most (about 4,000 tokens).
const LIST_CHARS: usize = 16_000;
/// A task's characters, at most.
pub const TASK_CHARS: usize = 20_000;
/// Tools a call may name, at most.
const TOOLS_MAX: usize = 40;
/// A title's characters (the task's first line).
const TITLE_CHARS: usize = 60;

pub fn spec() -> ToolSpec {
    ToolSpec {
        name: NAME,
        description: "Hand a task to a sub-agent: a fresh helper with its own context that works \
            in this chat's files with your tools (or the subset you name) and answers with its \
            result. Use it for work that would fill your context (research, reading many files) \
            or for several independent tasks at once (wait: false, at most 4 in the background; \
            their results come later as messages). Write the task so it stands alone: the \
            sub-agent sees none of this conversation.",
        parameters: json!({
            "type": "object",
            "properties": {
                "task": {"type": "string", "description": "What to do and what to answer with, on its own"},
                "tools": {"type": "array", "items": {"type": "string"}, "maxItems": TOOLS_MAX,
                          "description": "Only these of your tools (default: all of them)"},
                "wait": {"type": "boolean", "description": "true (default): wait for its result; false: go on, the result comes as a message"},
                "agent": {"type": "string", "description": "A saved agent's id or name (list_agents) to run as; not with tools"}
            },
            "required": ["task"],
            "additionalProperties": false
        }),
        effect: Effect::Read,
    }
}

/// list_agents: the saved agents this chat may start as sub-agents.
pub fn list_spec() -> ToolSpec {
    ToolSpec {
        name: LIST_NAME,
        description: "List the person's saved agents you may start with spawn_agent's `agent`: \
            id, name, what each is for, and its model.",
        parameters: json!({"type": "object", "properties": {}, "additionalProperties": false}),
        effect: Effect::Read,
    }
}

/// list_agents' answer: `{agents, count}`, `LIST_MAX` at most.
pub fn list_text(agents: &[crate::agents::Agent]) -> String {
    // Each description cut, and the list held to LIST_CHARS: 100 whole
    // descriptions filled a small model's window (figure 18d).
    let mut listed: Vec<Value> = Vec::new();
    let mut chars = 0;
    for a in agents.iter().take(LIST_MAX) {
        let description: String = a.description.chars().take(DESCRIPTION_CHARS).collect();
        let mut entry =
            json!({"id": a.id, "name": a.name, "description": description, "model": a.model});
        if let Some(folder) = &a.folder {
            entry["folder"] = json!(folder.path);
            entry["folder_mode"] = json!(folder.mode);
        }
        chars += entry.to_string().chars().count();
        if chars > LIST_CHARS {
            break;
        }
        listed.push(entry);
    }
    let shown = listed.len();
    let mut answer = json!({"agents": listed, "count": agents.len()});
    if shown < agents.len() {
        answer["note"] = json!(format!("the first {shown} of {} are listed", agents.len()));
    }
    answer.to_string()
}

/// A call's arguments, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    pub task: String,
    pub tools: Option<Vec<String>>,
    pub wait: bool,
    /// A saved agent's id or name.
    pub agent: Option<String>,
}

impl Args {
    /// The arguments, or why not, naming the field and the limit.
    pub fn parse(arguments: &str) -> Result<Args, String> {
        let map = super::object_of(arguments, NAME, &["task", "tools", "wait", "agent"])?;
        let task = map
            .get("task")
            .and_then(Value::as_str)
            .map(str::trim)
            .unwrap_or("");
        if task.is_empty() {
            return Err("`task` is required: the words of the task, as a string".to_string());
        }
        if task.chars().count() > TASK_CHARS {
            return Err(format!("`task` is over {TASK_CHARS} characters"));
        }
        let tools = match map.get("tools") {
            None | Some(Value::Null) => None,
            Some(Value::Array(items)) => {
                if items.len() > TOOLS_MAX {
                    return Err(format!("`tools` names over {TOOLS_MAX} tools"));
                }
                let mut names = Vec::with_capacity(items.len());
                for item in items {
                    let Some(name) = item.as_str() else {
                        return Err("`tools` must be a list of tool names".to_string());
                    };
                    names.push(name.trim().to_string());
                }
                Some(names)
            }
            Some(_) => return Err("`tools` must be a list of tool names".to_string()),
        };
        let wait = match map.get("wait") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err("`wait` must be true or false".to_string()),
        };
        let agent = match map.get("agent") {
            None | Some(Value::Null) => None,
            Some(Value::String(word)) if !word.trim().is_empty() && word.len() <= 200 => {
                Some(word.trim().to_string())
            }
            Some(_) => {
                return Err(
                    "`agent` must be a saved agent's id or name (1 to 200 bytes)".to_string(),
                )
            }
        };
        if agent.is_some() && tools.is_some() {
            return Err(
                "`tools` cannot be given with `agent`: a saved agent has the tools it \
                 grants (within yours)"
                    .to_string(),
            );
        }
        Ok(Args {
            task: task.to_string(),
            tools,
            wait,
            agent,
        })
    }
}

/// The task's first line, `TITLE_CHARS` at most: the sub-agent's title.
pub fn title_of(task: &str) -> String {
    let line = task
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    if line.chars().count() <= TITLE_CHARS {
        return line.to_string();
    }
    let cut: String = line.chars().take(TITLE_CHARS - 1).collect();
    format!("{}…", cut.trim_end())
}

/// A sub-agent's title: the task's, after the saved agent's name when it
/// runs as one.
pub fn title_as(agent: Option<&str>, task: &str) -> String {
    match agent {
        Some(name) => format!(
            "{}: {}",
            name.chars().take(40).collect::<String>(),
            title_of(task)
        ),
        None => title_of(task),
    }
}

/// The task's words as the same-task check compares them: lower case,
/// spaces collapsed.
pub fn task_key(task: &str) -> String {
    task.split_whitespace()
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether the task asks to run a program (a script, a build, the tests):
/// refused at once in a chat that cannot run commands, rather than left to
/// a sub-agent that would find out after working a while. Only a clause
/// that starts with the verb counts ("Run the tests", "then build it with
/// cargo"), never one that asks about running ("how to run the tests").
pub fn asks_to_run(task: &str) -> bool {
    const VERBS: &[&str] = &[
        "run", "execute", "exec", "launch", "invoke", "compile", "build", "install",
    ];
    const LEADS: &[&str] = &["please", "then", "and", "also", "first", "next", "now"];
    const PROGRAMS: &[&str] = &[
        "make", "npm", "npx", "pip", "cargo", "pytest", "python", "python3", "node", "go", "bash",
        "sh", "script", "command", "tests", "test", "suite", "binary", "program", "makefile", "it",
    ];
    const SCRIPT_ENDS: &[&str] = &[".py", ".sh", ".js", ".ts", ".rb", ".pl", ".exe"];
    // A sentence ends at ". ", not at the dot of `make_deck.py`.
    let text = format!("{task} ").replace(". ", "\n");
    text.split([';', '\n', '!', '?', ','])
        .map(|clause| {
            clause
                .split_whitespace()
                .map(|w| {
                    w.trim_matches(|c: char| matches!(c, '\'' | '"' | '(' | ')' | ':'))
                        .to_lowercase()
                })
                .filter(|w| !w.is_empty())
                .collect::<Vec<_>>()
        })
        .any(|words| {
            let first = words.iter().position(|w| !LEADS.contains(&w.as_str()));
            let Some(at) = first else {
                return false;
            };
            VERBS.contains(&words[at].as_str())
                && words[at + 1..].iter().take(4).any(|next| {
                    let bare = next.trim_matches('`');
                    PROGRAMS.contains(&bare)
                        || SCRIPT_ENDS.iter().any(|e| bare.ends_with(e))
                        || next.starts_with('`')
                })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_checked_naming_the_field() {
        let ok = Args::parse(r#"{"task": "  find the TODOs  ", "wait": false}"#).unwrap();
        assert_eq!(ok.task, "find the TODOs");
        assert!(!ok.wait && ok.tools.is_none());
        assert!(Args::parse(r#"{"task": "x"}"#).unwrap().wait);
        let named = Args::parse(r#"{"task": "x", "agent": " Reviewer "}"#).unwrap();
        assert_eq!(named.agent.as_deref(), Some("Reviewer"));
        for (bad, field) in [
            (r#"{}"#, "`task`"),
            (r#"{"task": ""}"#, "`task`"),
            (r#"{"task": "x", "tools": "read_file"}"#, "`tools`"),
            (r#"{"task": "x", "wait": "yes"}"#, "`wait`"),
            (r#"{"task": "x", "agent": ""}"#, "`agent`"),
            (r#"{"task": "x", "agent": 7}"#, "`agent`"),
            (
                r#"{"task": "x", "agent": "Reviewer", "tools": ["read_file"]}"#,
                "`tools` cannot",
            ),
            (r#"{"task": "x", "model": "big"}"#, "`model`"),
            ("[1]", "JSON object"),
        ] {
            let err = Args::parse(bad).unwrap_err();
            assert!(err.contains(field), "{bad}: {err}");
        }
        let long = format!(r#"{{"task": "{}"}}"#, "a".repeat(TASK_CHARS + 1));
        assert!(Args::parse(&long).unwrap_err().contains("20000"));
    }

    #[test]
    fn the_agents_list_is_held_to_its_room() {
        let agent = |i: usize| crate::agents::Agent {
            id: format!("a_{i:04}"),
            name: format!("Agent {i}"),
            description: "d".repeat(1_000),
            instructions: String::new(),
            model: String::new(),
            tools: None,
            settings: Default::default(),
            folder: None,
            network: None,
            created: String::new(),
            updated: String::new(),
        };
        let all: Vec<_> = (0..100).map(agent).collect();
        let text = list_text(&all);
        assert!(text.chars().count() <= LIST_CHARS + 200, "{}", text.len());
        let answer: Value = serde_json::from_str(&text).unwrap();
        let shown = answer["agents"].as_array().unwrap();
        assert!(shown.len() > 50 && shown.len() < 100, "{}", shown.len());
        assert_eq!(
            shown[0]["description"].as_str().unwrap().len(),
            DESCRIPTION_CHARS
        );
        assert_eq!(answer["count"], 100);
        assert!(answer["note"].as_str().unwrap().contains("of 100"));
        let few = list_text(&all[..3]);
        assert!(!few.contains("note"));
    }

    #[test]
    fn a_title_is_the_first_line_and_a_key_ignores_case_and_spaces() {
        assert_eq!(title_of("\n  Read notes.md\nthen more"), "Read notes.md");
        let long = title_of(&"word ".repeat(40));
        assert!(long.ends_with('…') && long.chars().count() <= TITLE_CHARS);
        assert_eq!(task_key("Find  the\nTODOs "), task_key("find the todos"));
        assert_ne!(task_key("find the todos"), task_key("find the fixmes"));
    }

    #[test]
    fn a_task_that_runs_something_is_told_from_one_that_reads() {
        for yes in [
            "Run make_deck.py and tell me what it prints",
            "run the tests and report failures",
            "Please execute `ls -la` in the repo",
            "build it with cargo",
            "install the deps with pip",
            "launch the script",
            "run python3 build.py",
            "Compile the program",
            "Read it, then run the tests",
            "invoke the command",
        ] {
            assert!(asks_to_run(yes), "{yes}");
        }
        for no in [
            "summarise notes.md",
            "run a search on the notes for deadlines",
            "read the build log and tell me why it failed",
            "find every TODO in src/",
            "compare the two drafts",
            "list the files about tests",
            "what does make_deck.py do? read it",
            "research three vendors of GPUs",
            "check the draft for typos",
            "write a short summary of the meeting",
            "Research how to build a Go program",
            "Find out how to install Python on Windows",
            "Explain what the build script in scripts/ does",
            "Find where we execute the query in db.py",
            "Summarise the README's section on how to run the tests",
            "Read the CI config and list which jobs run pytest",
            "It sells for $ 20; research the vendor",
        ] {
            assert!(!asks_to_run(no), "{no}");
        }
    }
}
