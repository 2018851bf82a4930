//! What the model reads of skills: the list in the system block (held to a
//! fixed size, saying what it left out), `load_skill`'s answer, the text a
//! `/skill` message carries, and the skills put back after a compaction.

use super::{Folder, Skill};

/// The room of the described list in the system block, in characters.
pub const LIST_CHARS: usize = 4_000;
/// The room for the names of skills past the described list.
const NAMES_CHARS: usize = 1_200;
/// The most characters of skills put back after a compaction.
pub const KEPT_CHARS: usize = 24_000;

/// Why a skill that needs commands cannot serve a chat without them.
pub const NO_EXEC: &str = "unavailable here: needs command execution, and this chat cannot run \
                           commands";

/// The system block's part naming the chat's skills, or `None` when it
/// has none. Nearest layers first, each by name; a skill that needs
/// commands in a chat without them is marked unavailable.
pub fn list_part(skills: &[&Skill], can_exec: bool) -> Option<String> {
    if skills.is_empty() {
        return None;
    }
    let mut ordered: Vec<&&Skill> = skills.iter().collect();
    ordered.sort_by_key(|s| (s.layer as u8, s.name.as_str()));
    let mut out = String::from(
        "# Skills\n\nSkills are procedures written for jobs like these. Before a task that \
         matches one, call load_skill with its name and follow what it returns.\n",
    );
    let head = out.len();
    let mut left: Vec<&str> = Vec::new();
    for skill in ordered {
        let mut line = format!("- {}: {}", skill.name, skill.description);
        if skill.requires_exec && !can_exec {
            line.push_str(&format!(" ({NO_EXEC})"));
        }
        line.push('\n');
        if left.is_empty() && out.len() - head + line.len() <= LIST_CHARS {
            out.push_str(&line);
        } else {
            left.push(&skill.name);
        }
    }
    if !left.is_empty() {
        let mut names = String::new();
        let mut named = 0;
        for name in &left {
            if names.len() + name.len() + 2 > NAMES_CHARS {
                break;
            }
            if !names.is_empty() {
                names.push_str(", ");
            }
            names.push_str(name);
            named += 1;
        }
        let more = left.len() - named;
        out.push_str(&format!(
            "{} more skills are not described here (the list has a fixed size): {names}{}. \
             load_skill reads any of them by name.\n",
            left.len(),
            if more > 0 {
                format!(" and {more} others")
            } else {
                String::new()
            }
        ));
    }
    Some(out)
}

/// `load_skill`'s answer: where its folder is and what it holds (so the
/// model reads them), then the procedure.
pub fn loaded(skill: &Skill) -> String {
    let mut out = format!("Skill {} ({} layer).\n", skill.name, skill.layer);
    match &skill.folder {
        Folder::Builtin => {}
        Folder::Workspace(base) => {
            out.push_str(&format!(
                "Base directory for this skill: {base} (in the workspace: read_file reads its \
                 files there)\n"
            ));
        }
        Folder::Owner(path) => {
            out.push_str(&format!(
                "Base directory for this skill: {} (outside the workspace: load_skill with \
                 `file` reads its files)\n",
                path.display()
            ));
        }
    }
    if !skill.files.is_empty() {
        let shown: Vec<&str> = skill
            .files
            .iter()
            .take(super::MAX_FILES_NAMED)
            .map(String::as_str)
            .collect();
        out.push_str(&format!("Its files: {}", shown.join(", ")));
        let more = skill.files.len() - shown.len();
        if more > 0 {
            out.push_str(&format!(" (and {more} more)"));
        }
        out.push('\n');
    }
    out.push('\n');
    out.push_str(&skill.body);
    out
}

/// What a message run with a skill (`/review check the diff`) reads before
/// the person's words.
pub fn invoked(name: &str, body: &str) -> String {
    format!(
        "[The person runs this message with the skill {name}. Its instructions:]\n\n{body}\n\n\
         [The person's message:]\n\n"
    )
}

/// The skills a compaction took out of the transcript, put back at the end
/// of the system block (the summary follows it): the most recent first,
/// held to [`KEPT_CHARS`] and to `room`.
pub fn kept_part(skills: &[&Skill], room: usize) -> Option<String> {
    if skills.is_empty() {
        return None;
    }
    let mut out = String::from(
        "\n\n# Skills loaded before the summary\n\nThese skills were loaded earlier in this \
         chat; their instructions still apply.\n",
    );
    for skill in skills {
        let part = format!("\n## {}\n\n{}\n", skill.name, skill.body);
        if out.len() + part.len() > KEPT_CHARS.min(room) {
            out.push_str(&format!(
                "\n## {}\n\n(left out for room: load_skill {} reads it again)\n",
                skill.name, skill.name
            ));
            continue;
        }
        out.push_str(&part);
    }
    Some(out)
}
