//! Skills: a folder with a `SKILL.md` (YAML front matter `name`, a one-line
//! `description`, optional `requires: [exec]`, then the procedure) that
//! teaches the model a job. Three layers, nearest first: the chat's
//! workspace (`.skills/<name>/`), the owner's (`~/.tandemllm/skills/`), and
//! the ones compiled into chatd; the nearest wins a name. A chat stores the
//! skills it switched off, never the ones on, so a skill added later is on
//! everywhere.
//!
//! Nothing here is cached: a scan reads each `SKILL.md` (64 KiB at most)
//! when a request is made, so an edit shows at the next turn.

pub mod builtin;
pub mod owner;
pub mod prompt;

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{json, Value};

use crate::words::SkillLayer;
use crate::workspace::{EntryKind, Workspace};

/// The largest `SKILL.md` read; a bigger one is refused.
pub const MAX_SKILL_BYTES: u64 = 64 * 1024;
/// The largest front matter read.
pub const MAX_FRONT_BYTES: usize = 4 * 1024;
/// The most files of a skill's folder `load_skill` names.
pub const MAX_FILES_NAMED: usize = 20;
/// The most skills a layer holds; past it a folder is a problem, not a skill.
pub const MAX_A_LAYER: usize = 500;
/// The longest name: a slash command and a folder name.
pub const MAX_NAME: usize = 64;
/// The longest description kept (one line).
pub const MAX_DESCRIPTION: usize = 300;
/// The workspace layer's folder.
pub const WORKSPACE_DIR: &str = ".skills";
/// The file a skill's folder holds.
pub const FILE: &str = "SKILL.md";

/// Where a skill's folder is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Folder {
    /// Compiled in: no files beside its text.
    Builtin,
    /// A folder of the chat's workspace, relative to its root.
    Workspace(String),
    /// A folder under the owner's skills folder.
    Owner(PathBuf),
}

/// One skill of one layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    /// `requires: [exec]`: its procedure runs commands.
    pub requires_exec: bool,
    pub layer: SkillLayer,
    /// The procedure: the text after the front matter.
    pub body: String,
    pub folder: Folder,
    /// Files of its folder beside `SKILL.md`, relative to it, sorted.
    pub files: Vec<String>,
}

impl Skill {
    /// `layer:name`: a switch that turns off this layer's skill only.
    pub fn id(&self) -> String {
        format!("{}:{}", self.layer, self.name)
    }

    /// What the routes answer of it (the text only where asked).
    pub fn json(&self, with_body: bool) -> Value {
        let mut out = json!({
            "id": self.id(),
            "name": self.name,
            "description": self.description,
            "layer": self.layer,
            "requires": if self.requires_exec { vec!["exec"] } else { Vec::new() },
            "files": self.files.len(),
        });
        if with_body {
            out["body"] = json!(self.body);
        }
        out
    }
}

/// A folder of a layer that is not a usable skill, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub layer: SkillLayer,
    pub folder: String,
    pub why: String,
}

/// Every skill of every layer, nearest layer first, each layer by name.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    pub skills: Vec<Skill>,
    pub problems: Vec<Problem>,
}

impl Catalog {
    /// Reads the layers: the workspace's (when a chat has one), the
    /// owner's folder, the built-in ones. Blocking.
    pub fn scan(workspace: Option<&Workspace>, owner_dir: &Path) -> Catalog {
        let mut catalog = Catalog::default();
        if let Some(ws) = workspace {
            scan_workspace(ws, &mut catalog);
        }
        owner::scan(owner_dir, &mut catalog);
        catalog.skills.extend(builtin::all());
        catalog
    }

    /// The skill each name resolves to once the chat's `off` switches are
    /// taken out, by name. A plain name switches off the skill that wins
    /// it (a farther one of that name then shows through); `layer:name`
    /// that layer's skill only.
    pub fn of_chat(&self, off: &[String]) -> Vec<&Skill> {
        let mut names: Vec<&str> = self.skills.iter().map(|s| s.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        names
            .into_iter()
            .filter_map(|name| {
                let mut layers = self.skills.iter().filter(|s| s.name == name).peekable();
                if off.iter().any(|o| o == name) {
                    layers.next();
                }
                layers.find(|s| !off.contains(&s.id()))
            })
            .collect()
    }

    /// The skill that wins `name` with no switch off, if any.
    pub fn winner(&self, name: &str) -> Option<&Skill> {
        self.skills.iter().find(|s| s.name == name)
    }

    /// Whether `switch` names a skill of some layer: `name` or `layer:name`.
    pub fn knows_switch(&self, switch: &str) -> bool {
        self.skills
            .iter()
            .any(|s| s.name == switch || s.id() == switch)
    }
}

/// What a `SKILL.md` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    pub name: String,
    pub description: String,
    pub requires_exec: bool,
    pub body: String,
}

#[derive(Deserialize)]
struct Front {
    name: Option<String>,
    description: Option<String>,
    #[serde(default)]
    requires: Vec<String>,
}

/// Reads a `SKILL.md` found in folder `folder_name`: its name (the front
/// matter's, else the folder's), description and needs.
pub fn parse(text: &str, folder_name: &str) -> Result<Parsed, String> {
    use gray_matter::engine::YAML;
    if text.len() as u64 > MAX_SKILL_BYTES {
        return Err(format!(
            "{FILE} is {} bytes; a skill holds at most {MAX_SKILL_BYTES}",
            text.len()
        ));
    }
    // The front matter is a few lines: a deep YAML nesting in a long one
    // would cost the parser's stack, so it is held to 4 KiB.
    let front_end = text
        .strip_prefix("---")
        .and_then(|rest| rest.find("\n---"))
        .unwrap_or(0);
    if front_end > MAX_FRONT_BYTES {
        return Err(format!(
            "its front matter is over {MAX_FRONT_BYTES} bytes: it holds name, description \
             and requires only"
        ));
    }
    let parsed = gray_matter::Matter::<YAML>::new()
        .parse::<Front>(text)
        .map_err(|e| format!("its front matter is not YAML with name and description: {e}"))?;
    let Some(front) = parsed.data else {
        return Err(format!(
            "{FILE} has no front matter: start it with ---, name:, description:, ---"
        ));
    };
    let name = front.name.unwrap_or_else(|| folder_name.to_string());
    check_name(&name)?;
    let description = front.description.unwrap_or_default();
    let description = description.split_whitespace().collect::<Vec<_>>().join(" ");
    if description.is_empty() {
        return Err(
            "its front matter has no description: one line that says when to use it".into(),
        );
    }
    let mut requires_exec = false;
    for need in &front.requires {
        match need.as_str() {
            "exec" => requires_exec = true,
            other => {
                return Err(format!(
                    "requires {:?}, which is no need chatd knows: the one need is exec",
                    other.chars().take(40).collect::<String>()
                ))
            }
        }
    }
    Ok(Parsed {
        name,
        description: description.chars().take(MAX_DESCRIPTION).collect(),
        requires_exec,
        body: parsed.content.trim().to_string(),
    })
}

/// A skill's name: 1 to 64 of a-z 0-9 - _, starting with a letter or a digit.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && name.as_bytes()[0].is_ascii_alphanumeric();
    if ok {
        Ok(())
    } else {
        Err(format!(
            "a skill's name is 1 to {MAX_NAME} of a-z 0-9 - _ and starts with a letter or a \
             digit, not {:?}",
            name.chars().take(MAX_NAME + 8).collect::<String>()
        ))
    }
}

/// The names of `known` nearest to `asked`, best first (at most 3): the
/// same name in another case, then the ones close in spelling.
pub fn nearest<'a>(asked: &str, known: impl Iterator<Item = &'a str>) -> Vec<String> {
    // No name is longer: a long ask is near none (and costs no edit matrix).
    if asked.len() > 2 * MAX_NAME {
        return Vec::new();
    }
    let asked = asked.to_lowercase();
    let mut scored: Vec<(f64, &str)> = known
        .map(|name| {
            let lower = name.to_lowercase();
            // Jaro-Winkler misses a swap in a short name (pfd for pdf):
            // one edit (two past six letters) counts as near too.
            let edits = strsim::damerau_levenshtein(&asked, &lower);
            let score = if lower == asked {
                2.0
            } else if lower.starts_with(&asked) || asked.starts_with(&lower) {
                1.0 + strsim::jaro_winkler(&asked, &lower) / 10.0
            } else if edits <= 1 || (edits == 2 && lower.len() > 6) {
                0.9 + strsim::jaro_winkler(&asked, &lower) / 100.0
            } else {
                strsim::jaro_winkler(&asked, &lower)
            };
            (score, name)
        })
        .filter(|(score, _)| *score >= 0.8)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
    scored
        .into_iter()
        .take(3)
        .map(|(_, n)| n.to_string())
        .collect()
}

/// The workspace layer: `.skills/<folder>/SKILL.md`, read without
/// following a link (the workspace's own rules).
fn scan_workspace(ws: &Workspace, catalog: &mut Catalog) {
    let Ok(walk) = ws.walk(WORKSPACE_DIR, 5_000) else {
        return;
    };
    let prefix = format!("{WORKSPACE_DIR}/");
    let folders: Vec<&str> = walk
        .entries
        .iter()
        .filter(|e| e.kind == EntryKind::Dir)
        .filter_map(|e| e.path.strip_prefix(&prefix))
        .filter(|rest| !rest.contains('/'))
        .collect();
    let mut found = Vec::new();
    for folder in folders {
        let base = format!("{prefix}{folder}");
        let problem = |why: String| Problem {
            layer: SkillLayer::Workspace,
            folder: base.clone(),
            why,
        };
        if found.len() >= MAX_A_LAYER {
            catalog.problems.push(problem(format!(
                "a layer holds at most {MAX_A_LAYER} skills"
            )));
            continue;
        }
        let text = match ws.read_all(&format!("{base}/{FILE}"), MAX_SKILL_BYTES) {
            Ok((_, bytes)) => String::from_utf8(bytes).map_err(|_| "is not UTF-8".to_string()),
            Err(e) => Err(e.message().to_string()),
        };
        match text.and_then(|t| parse(&t, folder)) {
            Ok(parsed) => {
                let inside = format!("{base}/");
                let files = walk
                    .entries
                    .iter()
                    .filter(|e| e.kind == EntryKind::File)
                    .filter_map(|e| e.path.strip_prefix(&inside))
                    .filter(|rel| *rel != FILE)
                    .map(str::to_string)
                    .collect();
                found.push(Skill {
                    name: parsed.name,
                    description: parsed.description,
                    requires_exec: parsed.requires_exec,
                    layer: SkillLayer::Workspace,
                    body: parsed.body,
                    folder: Folder::Workspace(base.clone()),
                    files,
                });
            }
            Err(why) => catalog.problems.push(problem(why)),
        }
    }
    add_layer(catalog, found, SkillLayer::Workspace);
}

/// Adds one layer's skills, by name; a second folder with a name already
/// taken in the layer is a problem.
fn add_layer(catalog: &mut Catalog, mut found: Vec<Skill>, layer: SkillLayer) {
    found.sort_by(|a, b| a.name.cmp(&b.name));
    let mut last: Option<String> = None;
    for skill in found {
        if last.as_deref() == Some(skill.name.as_str()) {
            catalog.problems.push(Problem {
                layer,
                folder: skill.name.clone(),
                why: "another folder of this layer has a skill of the same name".into(),
            });
            continue;
        }
        last = Some(skill.name.clone());
        catalog.skills.push(skill);
    }
}

#[cfg(test)]
mod tests;
