//! todo_write: the model's plan for the chat, kept in `.tandem/todos.json`.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{Args, Effect, ToolContext, ToolOutput, ToolSpec};
use crate::workspace::ToolError;

pub const TODOS_PATH: &str = ".tandem/todos.json";
const MAX_ITEMS: usize = 100;
const MAX_CONTENT_CHARS: usize = 500;

pub fn todo_write_spec() -> ToolSpec {
    ToolSpec {
        name: "todo_write",
        description: "Keep the plan of a task with several steps. Send the whole list each time \
            (it replaces the previous one); mark a step in_progress when you start it (one at a \
            time) and completed as soon as it is done.",
        parameters: json!({
            "type": "object",
            "properties": {
                "todos": {
                    "type": "array",
                    "maxItems": MAX_ITEMS,
                    "items": {
                        "type": "object",
                        "properties": {
                            "content": {"type": "string", "description": "The step, in a few words"},
                            "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]}
                        },
                        "required": ["content", "status"],
                        "additionalProperties": false
                    }
                }
            },
            "required": ["todos"],
            "additionalProperties": false
        }),
        effect: Effect::Write,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Pending,
    InProgress,
    Completed,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Todo {
    pub content: String,
    pub status: Status,
}

/// The list as the model reads it: `[x] done / [>] doing / [ ] todo`.
pub fn render(todos: &[Todo]) -> String {
    todos
        .iter()
        .map(|t| {
            let mark = match t.status {
                Status::Completed => "[x]",
                Status::InProgress => "[>]",
                Status::Pending => "[ ]",
            };
            format!("{mark} {}\n", t.content)
        })
        .collect()
}

fn parse(args: &Args) -> Result<Vec<Todo>, ToolError> {
    let items = match args.value("todos") {
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(args.field_error("todos", "must be an array of {content, status} objects"))
        }
        None => {
            return Err(args.field_error(
                "todos",
                "is required (an array of {content, status} objects; [] clears the list)",
            ))
        }
    };
    if items.len() > MAX_ITEMS {
        return Err(args.field_error(
            "todos",
            &format!("has {} items; at most {MAX_ITEMS}", items.len()),
        ));
    }
    let mut todos = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let n = i + 1;
        let content = match item.get("content") {
            Some(Value::String(s)) if !s.trim().is_empty() => s.trim(),
            _ => {
                return Err(args.field_error(
                    "todos",
                    &format!("item {n}: \"content\" must be a non-empty string"),
                ))
            }
        };
        if content.chars().count() > MAX_CONTENT_CHARS {
            return Err(args.field_error(
                "todos",
                &format!(
                    "item {n}: \"content\" is over {MAX_CONTENT_CHARS} characters; say it shorter"
                ),
            ));
        }
        let status = match item.get("status").and_then(Value::as_str) {
            Some("pending") => Status::Pending,
            Some("in_progress") => Status::InProgress,
            Some("completed") => Status::Completed,
            _ => {
                return Err(args.field_error(
                    "todos",
                    &format!(
                        "item {n}: \"status\" must be \"pending\", \"in_progress\" or \"completed\""
                    ),
                ))
            }
        };
        todos.push(Todo {
            // One line each, so the rendering stays a list.
            content: content.split_whitespace().collect::<Vec<_>>().join(" "),
            status,
        });
    }
    let doing = todos
        .iter()
        .filter(|t| t.status == Status::InProgress)
        .count();
    if doing > 1 {
        return Err(args.field_error(
            "todos",
            &format!("has {doing} items in_progress; work on one at a time"),
        ));
    }
    Ok(todos)
}

pub fn todo_write(args: &Args, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let todos = parse(args)?;
    let saved = serde_json::to_vec_pretty(&json!({ "todos": todos }))
        .map_err(|e| ToolError::new(format!("todo_write: cannot save the list: {e}")))?;
    ctx.workspace.write_file(TODOS_PATH, &saved)?;
    let done = todos
        .iter()
        .filter(|t| t.status == Status::Completed)
        .count();
    let text = if todos.is_empty() {
        "the todo list is now empty\n".to_string()
    } else {
        render(&todos)
    };
    let summary = format!(
        "{} todo{}, {done} done",
        todos.len(),
        if todos.len() == 1 { "" } else { "s" }
    );
    Ok(ToolOutput::ok(text.clone(), summary, text.len() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{run, Registry, ToolContext};
    use crate::workspace::Workspace;

    #[test]
    fn todo_write_renders_saves_and_validates() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = Workspace::open(dir.path()).expect("ws");
        let ctx = ToolContext {
            workspace: &ws,
            call_id: "t1",
            budget_chars: 64_000,
            web: None,
            documents: None,
        };
        let registry = Registry::base();
        let args = json!({"todos": [
            {"content": "read the spec", "status": "completed"},
            {"content": "write the code", "status": "in_progress"},
            {"content": "ask for review", "status": "pending"}
        ]})
        .to_string();
        let out = run(&registry, "todo_write", &args, &ctx);
        assert!(out.ok, "{}", out.text);
        assert_eq!(
            out.text,
            "[x] read the spec\n[>] write the code\n[ ] ask for review\n"
        );
        assert_eq!(out.summary, "3 todos, 1 done");
        let saved: Value =
            serde_json::from_slice(&std::fs::read(ws.root().join(TODOS_PATH)).expect("saved"))
                .expect("json");
        assert_eq!(saved["todos"][1]["status"], "in_progress");

        let two_doing = json!({"todos": [
            {"content": "a", "status": "in_progress"},
            {"content": "b", "status": "in_progress"}
        ]})
        .to_string();
        let out = run(&registry, "todo_write", &two_doing, &ctx);
        assert!(
            !out.ok && out.text.contains("2 items in_progress"),
            "{}",
            out.text
        );
        let bad_status = json!({"todos": [{"content": "a", "status": "done"}]}).to_string();
        let out = run(&registry, "todo_write", &bad_status, &ctx);
        assert!(
            !out.ok && out.text.contains("item 1: \"status\""),
            "{}",
            out.text
        );
        let long =
            json!({"todos": [{"content": "x".repeat(501), "status": "pending"}]}).to_string();
        assert!(!run(&registry, "todo_write", &long, &ctx).ok);
        let many: Vec<Value> = (0..101)
            .map(|i| json!({"content": format!("{i}"), "status": "pending"}))
            .collect();
        let out = run(
            &registry,
            "todo_write",
            &json!({"todos": many}).to_string(),
            &ctx,
        );
        assert!(!out.ok && out.text.contains("at most 100"), "{}", out.text);
    }
}
