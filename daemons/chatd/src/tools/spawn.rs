//! spawn_agent: hands a task to a sub-agent, a chat of its own with the
//! parent's tools (or fewer) and places. What the call asks is read and
//! checked here; `runs/subagents.rs` starts and waits for it.

use serde_json::{json, Value};

use super::{Effect, ToolSpec};

pub const NAME: &str = "spawn_agent";
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
                "wait": {"type": "boolean", "description": "true (default): wait for its result; false: go on, the result comes as a message"}
            },
            "required": ["task"],
            "additionalProperties": false
        }),
        effect: Effect::Read,
    }
}

/// A call's arguments, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    pub task: String,
    pub tools: Option<Vec<String>>,
    pub wait: bool,
}

impl Args {
    /// The arguments, or why not, naming the field and the limit.
    pub fn parse(arguments: &str) -> Result<Args, String> {
        let value: Value = serde_json::from_str(arguments)
            .map_err(|_| "the arguments are not a JSON object".to_string())?;
        let Value::Object(map) = value else {
            return Err("the arguments are not a JSON object".to_string());
        };
        if map.contains_key("agent") {
            return Err(
                "`agent`: running a saved agent as a sub-agent is not supported by this \
                 chatd yet; leave it out and put what the agent should do in `task`"
                    .to_string(),
            );
        }
        if let Some(other) = map
            .keys()
            .find(|k| !["task", "tools", "wait"].contains(&k.as_str()))
        {
            return Err(format!(
                "`{}` is not an argument of spawn_agent (task, tools, wait)",
                other.chars().take(40).collect::<String>()
            ));
        }
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
        Ok(Args {
            task: task.to_string(),
            tools,
            wait,
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
        for (bad, field) in [
            (r#"{}"#, "`task`"),
            (r#"{"task": ""}"#, "`task`"),
            (r#"{"task": "x", "tools": "read_file"}"#, "`tools`"),
            (r#"{"task": "x", "wait": "yes"}"#, "`wait`"),
            (r#"{"task": "x", "agent": "Reviewer"}"#, "`agent`"),
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
