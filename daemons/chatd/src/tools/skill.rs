//! load_skill: offered to every chat that has a skill. Run by chatd
//! (runs/skills.rs), which knows the chat's layers and switches.

use serde_json::json;

use super::{Effect, ToolSpec};

pub const NAME: &str = "load_skill";
/// The largest file of a skill's folder `file` reads.
pub const MAX_FILE_BYTES: u64 = 256 * 1024;

pub fn spec() -> ToolSpec {
    ToolSpec {
        name: NAME,
        description: "Read one of this chat's skills (listed under Skills in the system \
            message) before a task that matches it: returns its instructions, its folder and its \
            files. With `file`, returns that file of the skill's folder instead.",
        parameters: json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "The skill's name, as listed"},
                "file": {"type": "string", "description": "A file of the skill's folder, as its list names it"}
            },
            "required": ["name"],
            "additionalProperties": false
        }),
        effect: Effect::Read,
    }
}
