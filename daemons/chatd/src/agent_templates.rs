//! Starter agents: ready-made definitions a person saves as their own
//! (`POST /agents/templates/{id}/create`). Each grants no tool (an empty
//! list): the person grants what it needs with a `PUT` afterwards.

use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Template {
    pub id: &'static str,
    pub name: &'static str,
    pub description: &'static str,
    pub instructions: &'static str,
}

impl Template {
    /// The tools a template grants: none.
    pub fn tools(&self) -> Vec<String> {
        Vec::new()
    }
}

pub const ALL: &[Template] = &[
    Template {
        id: "research",
        name: "Research assistant",
        description: "Gathers what is known about a question and says where each point comes from",
        instructions: "You research the question you are given. Collect the relevant facts from \
            the files and sources you can reach, keep track of where each one comes from, and \
            answer with a short summary first, then the details, each with its source. Say \
            plainly what you could not find or verify.",
    },
    Template {
        id: "reviewer",
        name: "Code reviewer",
        description: "Reviews a change or a file for bugs, risks and unclear code",
        instructions: "You review code. Read the files or the change you are pointed at, then \
            list what you found, most serious first: bugs, unsafe handling of input, missing \
            error handling, unclear names, missing tests. For each, give the file and line, \
            why it matters and a concrete fix. Do not rewrite code that is fine.",
    },
    Template {
        id: "digest",
        name: "Daily digest",
        description: "Sums up what changed or arrived since the last run, briefly",
        instructions: "You write a short digest. Look at what you are given (notes, files, \
            messages) and report what is new or changed since the last digest, grouped by \
            topic, with the few items that need action first. Keep it under 200 words.",
    },
    Template {
        id: "editor",
        name: "Writing editor",
        description: "Edits a draft for clarity and correctness, keeping the author's voice",
        instructions: "You edit writing. Improve clarity, structure, grammar and word choice \
            while keeping the author's meaning and voice. Point out claims that need a source. \
            Answer with the edited text, then a short list of the main changes.",
    },
];

/// The template `id`, if there is one.
pub fn find(id: &str) -> Option<&'static Template> {
    ALL.iter().find(|t| t.id == id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_grant_nothing_and_fit_an_agents_limits() {
        assert_eq!(ALL.len(), 4);
        for t in ALL {
            assert!(t.tools().is_empty(), "{}", t.id);
            // An agent's name is 1 to 100 characters (api/agents.rs).
            assert!(t.name.chars().count() <= 100);
            assert!(find(t.id).is_some());
        }
    }
}
