//! The workspace's folders as file triggers see them: a trigger's folder
//! checked to lie inside the workspace, a scan of what it holds (each file's
//! version: size, modification time and inode), and its AGENTS.md rules.

use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// Files a scan looks at in one folder, at most; the rest wait.
pub const MAX_FILES: usize = 10_000;
/// Folders deep below the trigger's folder a scan goes.
pub const MAX_DEPTH: usize = 8;
/// The rules file of a folder, and the most of it a run's message carries.
pub const RULES_FILE: &str = "AGENTS.md";
pub const MAX_RULES: usize = 16 * 1024;

/// `folder` (relative to the workspace; a leading `/` means the workspace's
/// root, and an absolute path inside the workspace is taken too) as its
/// normal relative form and its absolute path, or why not, in words.
pub fn resolve(workspace: &Path, folder: &str) -> Result<(String, PathBuf), String> {
    if folder.len() > 1024 || folder.contains('\0') {
        return Err("must be at most 1024 bytes, without NUL".into());
    }
    let ws_text = workspace.to_string_lossy();
    let rest = folder
        .strip_prefix(ws_text.as_ref())
        .filter(|r| r.is_empty() || r.starts_with('/'))
        .unwrap_or(folder);
    let mut parts = Vec::new();
    for component in Path::new(rest.trim_start_matches('/')).components() {
        match component {
            Component::Normal(part) => parts.push(part.to_string_lossy().into_owned()),
            Component::CurDir => {}
            _ => {
                return Err(format!(
                    "{folder:?} is outside the workspace ({}): folders are relative to it",
                    workspace.display()
                ))
            }
        }
    }
    let relative = parts.join("/");
    let absolute = workspace.join(&relative);
    let canonical_ws = workspace
        .canonicalize()
        .map_err(|e| format!("the workspace {} cannot be read: {e}", workspace.display()))?;
    let Ok(canonical) = absolute.canonicalize() else {
        return Err(format!(
            "{folder:?} does not exist in the workspace ({})",
            workspace.display()
        ));
    };
    if !canonical.starts_with(&canonical_ws) {
        return Err(format!(
            "{folder:?} is outside the workspace ({}): a link out of it is not followed",
            workspace.display()
        ));
    }
    if !canonical.is_dir() {
        return Err(format!("{folder:?} is not a folder"));
    }
    Ok((relative, absolute))
}

/// One file's version: it changes whenever the file's bytes may have.
pub fn version(meta: &std::fs::Metadata) -> String {
    format!(
        "{}:{}.{:09}:{}",
        meta.len(),
        meta.mtime(),
        meta.mtime_nsec(),
        meta.ino()
    )
}

/// What a scan of a folder found: each file's path (relative, UTF-8) and
/// version, sorted; `complete` is false when it stopped at MAX_FILES, so
/// files it did not reach are not taken as gone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scan {
    pub files: Vec<(String, String)>,
    pub complete: bool,
}

/// Every regular file below `root` (no links followed, no hidden names, no
/// AGENTS.md, no name that is not UTF-8: a model could not name it back).
pub fn scan(root: &Path) -> std::io::Result<Scan> {
    let mut found = Vec::new();
    let mut stack = vec![(root.to_path_buf(), 0usize)];
    std::fs::read_dir(root)?;
    let mut complete = true;
    'walk: while let Some((dir, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                continue;
            };
            if name.starts_with('.') {
                continue;
            }
            // symlink_metadata: a link is never followed out of the folder.
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            if meta.is_dir() {
                if depth < MAX_DEPTH {
                    stack.push((entry.path(), depth + 1));
                }
                continue;
            }
            if !meta.is_file() || (depth == 0 && name == RULES_FILE) {
                continue;
            }
            let Ok(relative) = entry.path().strip_prefix(root).map(Path::to_path_buf) else {
                continue;
            };
            let Some(relative) = relative.to_str() else {
                continue;
            };
            if found.len() >= MAX_FILES {
                complete = false;
                break 'walk;
            }
            found.push((relative.to_string(), version(&meta)));
        }
    }
    found.sort();
    Ok(Scan {
        files: found,
        complete,
    })
}

/// The folder's AGENTS.md, cut at MAX_RULES bytes (on a character boundary).
pub fn rules(folder: &Path) -> Option<String> {
    use std::io::Read;
    let path = folder.join(RULES_FILE);
    let meta = path.symlink_metadata().ok()?;
    if !meta.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    std::fs::File::open(&path)
        .ok()?
        .take(MAX_RULES as u64)
        .read_to_end(&mut bytes)
        .ok()?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folders_inside_the_workspace_only() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("Contracts/2026")).unwrap();
        std::fs::create_dir_all(dir.path().join("outside")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("outside"), ws.join("out")).unwrap();
        std::fs::write(ws.join("file.txt"), "x").unwrap();
        let ok = |f: &str, rel: &str| {
            let (r, abs) = resolve(&ws, f).unwrap_or_else(|e| panic!("{f}: {e}"));
            assert_eq!(r, rel);
            assert_eq!(abs, ws.join(rel));
        };
        ok("Contracts", "Contracts");
        ok("/Contracts/", "Contracts");
        ok("./Contracts/2026", "Contracts/2026");
        ok("", "");
        ok(&format!("{}/Contracts", ws.display()), "Contracts");
        let err = |f: &str, expect: &str| {
            let e = resolve(&ws, f).unwrap_err();
            assert!(e.contains(expect), "{f}: {e:?} should say {expect:?}");
        };
        err("../outside", "is outside the workspace");
        err("Contracts/../../outside", "is outside the workspace");
        err("out", "a link out of it is not followed");
        err("Missing", "does not exist in the workspace");
        err("file.txt", "is not a folder");
    }

    #[test]
    fn scans_files_not_links_hidden_or_rules() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("a.txt"), "a").unwrap();
        std::fs::write(root.join("sub/b.txt"), "bb").unwrap();
        std::fs::write(root.join(".hidden"), "h").unwrap();
        std::fs::write(root.join("AGENTS.md"), "rules").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("link")).unwrap();
        use std::os::unix::ffi::OsStrExt;
        std::fs::write(
            root.join(std::ffi::OsStr::from_bytes(b"caf\xe9.txt")),
            "latin-1",
        )
        .unwrap();
        let found = scan(root).unwrap();
        assert!(found.complete);
        let names: Vec<&str> = found.files.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(names, ["a.txt", "sub/b.txt"]);
        let before = found.files[0].1.clone();
        std::fs::write(root.join("a.txt"), "a longer text").unwrap();
        assert_ne!(
            scan(root).unwrap().files[0].1,
            before,
            "a write is a new version"
        );
        assert_eq!(rules(root).as_deref(), Some("rules"));
    }
}
