//! Which group each built-in tool switches with (`PUT …/builtins`), the
//! rows the Tools menu shows. A tool in no group (todo_write, load_skill,
//! the goal and loop tools) has no switch: skills follow the Skills menu,
//! the others their goal or loop.

use crate::words::ToolGroup;

/// The tools of each group, as the registry names them.
pub fn members(group: ToolGroup) -> &'static [&'static str] {
    match group {
        ToolGroup::Shell => &["bash"],
        ToolGroup::Files => &[
            "list_files",
            "read_file",
            "write_file",
            "edit_file",
            "move_file",
            "delete_file",
            "grep",
            crate::index::tool::NAME,
            "read_document",
        ],
        ToolGroup::Web => &["web_search", "web_fetch"],
        ToolGroup::Media => &[super::describe::NAME],
        ToolGroup::Subagents => &[super::spawn::NAME, super::task::NAME],
        ToolGroup::SavedAgents => &[super::spawn::LIST_NAME],
        ToolGroup::Triggers => &[],
    }
}

/// The group tool `name` switches with, if any.
pub fn group_of(name: &str) -> Option<ToolGroup> {
    ToolGroup::ALL
        .iter()
        .copied()
        .find(|g| members(*g).contains(&name))
}

/// The row's name in the Tools menu and in a refusal.
pub fn label(group: ToolGroup) -> &'static str {
    match group {
        ToolGroup::Shell => "Run commands",
        ToolGroup::Files => "Your files",
        ToolGroup::Web => "Web",
        ToolGroup::Media => "Images",
        ToolGroup::Subagents => "Sub-agents",
        ToolGroup::SavedAgents => "Saved agents",
        ToolGroup::Triggers => "Triggers",
    }
}

/// Off until a chat switches it on.
pub fn opt_in(group: ToolGroup) -> bool {
    group == ToolGroup::SavedAgents
}

/// The groups a chat may name, for an error that lists them.
pub fn names() -> String {
    ToolGroup::ALL
        .iter()
        .map(|g| g.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_is_in_one_group_at_most() {
        for g in ToolGroup::ALL {
            for t in members(*g) {
                assert_eq!(group_of(t), Some(*g), "{t}");
            }
        }
        assert_eq!(group_of("todo_write"), None);
        assert_eq!(group_of(super::super::skill::NAME), None);
    }

    #[test]
    fn every_registered_tool_with_a_switch_is_named_right() {
        let registry = crate::tools::Registry::chatd();
        for g in ToolGroup::ALL {
            for t in members(*g) {
                let known = registry.get(t).is_some()
                    || matches!(
                        *t,
                        "bash" | "search_files" | "spawn_agent" | "list_agents" | "task"
                    );
                assert!(known, "{t} is not a tool chatd registers");
            }
        }
    }
}
