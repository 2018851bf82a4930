//! The owner's layer, `~/.tandemllm/skills/<name>/SKILL.md`: read for every
//! chat, and the one layer the routes write (0700 folders, 0600 files).
//! A link is never followed: a skill folder or `SKILL.md` that is a link
//! is a problem, not a skill.

use std::fs;
use std::io::Write;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

use super::{
    add_layer, parse, Catalog, Folder, Problem, Skill, FILE, MAX_A_LAYER, MAX_SKILL_BYTES,
};
use crate::words::SkillLayer;

/// How deep `load_skill`'s file list looks inside a skill's folder.
const FILES_DEPTH: usize = 3;

pub(super) fn scan(dir: &Path, catalog: &mut Catalog) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut folders: Vec<(String, std::path::PathBuf)> = Vec::new();
    for entry in entries.flatten() {
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        match entry.file_type() {
            _ if name.starts_with('.') => {}
            Ok(t) if t.is_dir() => folders.push((name, entry.path())),
            Ok(t) if t.is_symlink() => catalog.problems.push(Problem {
                layer: SkillLayer::Owner,
                folder: name,
                why: "is a link, which is not followed: put the folder itself here".into(),
            }),
            _ => {}
        }
    }
    folders.sort();
    let mut found = Vec::new();
    for (folder, path) in folders {
        let problem = |why: String| Problem {
            layer: SkillLayer::Owner,
            folder: folder.clone(),
            why,
        };
        if found.len() >= MAX_A_LAYER {
            catalog.problems.push(problem(format!(
                "a layer holds at most {MAX_A_LAYER} skills"
            )));
            continue;
        }
        match read_skill_file(&path.join(FILE)).and_then(|t| parse(&t, &folder)) {
            Ok(parsed) => {
                let mut files = Vec::new();
                list_files(&path, "", 0, &mut files);
                found.push(Skill {
                    name: parsed.name,
                    description: parsed.description,
                    requires_exec: parsed.requires_exec,
                    layer: SkillLayer::Owner,
                    body: parsed.body,
                    folder: Folder::Owner(path),
                    files,
                });
            }
            Err(why) => catalog.problems.push(problem(why)),
        }
    }
    add_layer(catalog, found, SkillLayer::Owner);
}

/// A `SKILL.md` that is a regular file (not a link) of at most 64 KiB.
fn read_skill_file(path: &Path) -> Result<String, String> {
    let meta = fs::symlink_metadata(path).map_err(|_| format!("has no {FILE}"))?;
    if !meta.file_type().is_file() {
        return Err(format!(
            "its {FILE} is not a regular file (a link is not followed)"
        ));
    }
    if meta.len() > MAX_SKILL_BYTES {
        return Err(format!(
            "{FILE} is {} bytes; a skill holds at most {MAX_SKILL_BYTES}",
            meta.len()
        ));
    }
    let bytes = fs::read(path).map_err(|e| format!("cannot read {FILE}: {e}"))?;
    String::from_utf8(bytes).map_err(|_| format!("{FILE} is not UTF-8"))
}

/// The regular files under `dir` (never through a link), relative, sorted,
/// `SKILL.md` left out; stops at 200.
fn list_files(dir: &Path, prefix: &str, depth: usize, out: &mut Vec<String>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().collect();
    entries.sort_by_key(fs::DirEntry::file_name);
    for entry in entries {
        if out.len() >= 200 {
            return;
        }
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        let rel = format!("{prefix}{name}");
        match entry.file_type() {
            Ok(t) if t.is_file() && rel != FILE => out.push(rel),
            Ok(t) if t.is_dir() && depth + 1 < FILES_DEPTH => {
                list_files(&entry.path(), &format!("{rel}/"), depth + 1, out);
            }
            _ => {}
        }
    }
}

/// Reads one file of an owner's skill folder for `load_skill {file}`: a
/// relative path with no `..`, a regular file reached without a link.
pub fn read_file(folder: &Path, rel: &str, max: u64) -> Result<String, String> {
    let parts: Vec<&str> = rel
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    if parts.is_empty() || parts.contains(&"..") || rel.starts_with('/') {
        return Err(format!(
            "{:?} is no file of this skill: name one of its files as listed",
            rel.chars().take(80).collect::<String>()
        ));
    }
    let mut path = folder.to_path_buf();
    for part in &parts {
        path.push(part);
        let meta = fs::symlink_metadata(&path).map_err(|_| format!("this skill has no {rel}"))?;
        if meta.file_type().is_symlink() {
            return Err(format!("{rel} goes through a link, which is not followed"));
        }
    }
    let meta = fs::symlink_metadata(&path).map_err(|_| format!("this skill has no {rel}"))?;
    if !meta.is_file() {
        return Err(format!("{rel} is not a file of this skill"));
    }
    if meta.len() > max {
        return Err(format!(
            "{rel} is {} bytes; load_skill reads files up to {max}",
            meta.len()
        ));
    }
    let bytes = fs::read(&path).map_err(|e| format!("cannot read {rel}: {e}"))?;
    String::from_utf8(bytes).map_err(|_| format!("{rel} is not text"))
}

/// The text of a `SKILL.md` for `name`.
pub fn render(name: &str, description: &str, requires_exec: bool, body: &str) -> String {
    let mut out = format!(
        "---\nname: {name}\ndescription: {}\n",
        yaml_line(description)
    );
    if requires_exec {
        out.push_str("requires: [exec]\n");
    }
    out.push_str("---\n\n");
    out.push_str(body.trim());
    out.push('\n');
    out
}

/// A one-line YAML string, quoted so any text reads back as itself.
fn yaml_line(text: &str) -> String {
    let one: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    // A JSON string is a YAML double-quoted scalar.
    serde_json::Value::String(one).to_string()
}

/// Writes a skill's `SKILL.md` into `folder` of the owner's layer `dir`
/// (the layer and a new folder made 0700; a folder that is a link is
/// refused), replaced whole through a temp file of a name of its own (0600).
/// Blocking.
pub fn write(dir: &Path, folder: &Path, text: &str) -> std::io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    match fs::symlink_metadata(folder) {
        Ok(meta) if !meta.is_dir() => {
            return Err(std::io::Error::other(format!(
                "{} is not a folder (a link is not followed)",
                folder.display()
            )))
        }
        Ok(_) => {}
        Err(_) => fs::DirBuilder::new().mode(0o700).create(folder)?,
    }
    let mut temp = tempfile::Builder::new()
        .prefix(".SKILL.md.")
        .tempfile_in(folder)?;
    temp.write_all(text.as_bytes())?;
    temp.as_file().sync_all()?;
    temp.persist(folder.join(FILE)).map_err(|e| e.error)?;
    Ok(())
}

/// Takes an owner's skill away: its `folder` moves to `.trash/<folder>-<ms>`
/// in the layer, so nothing is lost to a slip.
pub fn remove(dir: &Path, folder: &Path, now_ms: i64) -> std::io::Result<()> {
    let trash = dir.join(".trash");
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&trash)?;
    let name = folder
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // Two deletes of one name in one millisecond each keep their folder.
    let mut to = trash.join(format!("{name}-{now_ms}"));
    let mut n = 1;
    while fs::symlink_metadata(&to).is_ok() {
        n += 1;
        to = trash.join(format!("{name}-{now_ms}-{n}"));
    }
    fs::rename(folder, to)
}
