//! The house's shape, checked: every module of every crate of the workspace
//! opens with a `//!` header saying what it holds, and none holds more than
//! [`MAX_CODE_LINES`] lines of code. The files over the bound today are
//! listed in [`KNOWN_OVER`] as debt: the list may only shrink (a listed file
//! that is under the bound fails until it is taken off the list).
//!
//! Lines of code: lines that are not blank and not comments, outside
//! `#[cfg(test)]` modules (an inline `mod tests { … }` and a module file
//! declared `#[cfg(test)] mod tests;` hold no code by this count).
//!
//! The web page's scripts are held to the same bound (their comments are
//! `//` and `/* */` too).
//!
//! And no two modules of a crate name each other ([`circles`]).

mod circles;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The most lines of code a module file may hold.
const MAX_CODE_LINES: usize = 800;

/// Files over [`MAX_CODE_LINES`] today, each to be split along its seams;
/// paths from the workspace root.
const KNOWN_OVER: &[&str] = &[];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The `src/` folder of every member of the workspace.
fn crate_sources(root: &Path) -> Vec<PathBuf> {
    let manifest =
        std::fs::read_to_string(root.join("Cargo.toml")).expect("the workspace's Cargo.toml");
    let value: toml::Value = toml::from_str(&manifest).expect("the workspace's Cargo.toml parses");
    let members = value["workspace"]["members"]
        .as_array()
        .expect("[workspace] members");
    let sources: Vec<PathBuf> = members
        .iter()
        .map(|m| {
            root.join(m.as_str().expect("a member is a path"))
                .join("src")
        })
        .collect();
    for src in &sources {
        assert!(src.is_dir(), "{} is not a folder", src.display());
    }
    sources
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("a readable source folder") {
            let path = entry.expect("a readable folder entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The files of the modules `file` declares as `#[cfg(test)] mod name;`.
fn test_module_files(file: &Path, text: &str) -> Vec<PathBuf> {
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let parent = file.parent().unwrap_or(Path::new("."));
    // A mod.rs, lib.rs or main.rs declares its modules beside it; foo.rs in foo/.
    let dir = if matches!(stem, "mod" | "lib" | "main") {
        parent.to_path_buf()
    } else {
        parent.join(stem)
    };
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let mut out = Vec::new();
    for pair in lines.windows(2) {
        if pair[0] != "#[cfg(test)]" {
            continue;
        }
        let declared = pair[1]
            .strip_prefix("pub(crate) ")
            .or_else(|| pair[1].strip_prefix("pub "))
            .unwrap_or(pair[1]);
        if let Some(name) = declared
            .strip_prefix("mod ")
            .and_then(|r| r.strip_suffix(';'))
        {
            out.push(dir.join(format!("{name}.rs")));
            out.push(dir.join(name).join("mod.rs"));
        }
    }
    out
}

/// Lines of code of a rustfmt-formatted file: not blank, not a comment, not
/// inside a `#[cfg(test)]` module (which ends at the first `}` in column 0).
fn code_lines(text: &str) -> usize {
    let mut count = 0;
    let mut in_block_comment = false;
    let mut in_test_module = false;
    let mut after_cfg_test = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if in_test_module {
            if line == "}" {
                in_test_module = false;
            }
            continue;
        }
        if in_block_comment {
            in_block_comment = !trimmed.contains("*/");
            continue;
        }
        if trimmed.is_empty() || trimmed.starts_with("//") {
            continue;
        }
        if trimmed.starts_with("/*") {
            in_block_comment = !trimmed.contains("*/");
            continue;
        }
        if trimmed == "#[cfg(test)]" {
            after_cfg_test = true;
            continue;
        }
        if after_cfg_test {
            after_cfg_test = false;
            if line.starts_with("mod ") && line.ends_with('{') {
                in_test_module = true;
                continue;
            }
            count += 1; // the attribute of an item that is counted
        }
        count += 1;
    }
    count
}

fn relative(root: &Path, path: &Path) -> String {
    let root = root.canonicalize().expect("the workspace root");
    let path = path.canonicalize().expect("a source file");
    path.strip_prefix(&root)
        .unwrap_or(&path)
        .to_string_lossy()
        .into_owned()
}

struct Survey {
    /// Every module file, by its path from the root.
    files: Vec<(String, String)>,
    /// Files that are `#[cfg(test)]` modules.
    test_only: BTreeSet<String>,
}

fn survey() -> Survey {
    let root = root();
    let mut files = Vec::new();
    let mut test_only = BTreeSet::new();
    for src in crate_sources(&root) {
        for path in rust_files(&src) {
            let text = std::fs::read_to_string(&path).expect("a readable source file");
            for test_file in test_module_files(&path, &text) {
                if test_file.exists() {
                    test_only.insert(relative(&root, &test_file));
                }
            }
            files.push((relative(&root, &path), text));
        }
    }
    assert!(files.len() > 100, "only {} source files found", files.len());
    Survey { files, test_only }
}

#[test]
fn no_module_holds_more_than_800_lines_of_code() {
    let survey = survey();
    let mut over = Vec::new();
    let mut paid = Vec::new();
    for (path, text) in &survey.files {
        let lines = if survey.test_only.contains(path) {
            0
        } else {
            code_lines(text)
        };
        let known = KNOWN_OVER.contains(&path.as_str());
        if lines > MAX_CODE_LINES && !known {
            over.push(format!("{path}: {lines} lines of code"));
        }
        if lines <= MAX_CODE_LINES && known {
            paid.push(format!("{path}: {lines} lines of code"));
        }
    }
    let found: BTreeSet<&str> = survey.files.iter().map(|(p, _)| p.as_str()).collect();
    let gone: Vec<&&str> = KNOWN_OVER.iter().filter(|p| !found.contains(**p)).collect();
    assert!(
        over.is_empty(),
        "over {MAX_CODE_LINES} lines of code (split each along its seams into modules named for what they hold):\n  {}",
        over.join("\n  ")
    );
    assert!(
        paid.is_empty() && gone.is_empty(),
        "KNOWN_OVER in daemons/shared/tests/tidy.rs lists files no longer over {MAX_CODE_LINES} lines of code: take them off\n  {}\n  {:?}",
        paid.join("\n  "),
        gone
    );
}

#[test]
fn no_page_script_holds_more_than_800_lines_of_code() {
    let page = root().join("daemons/chatd/src/front/page");
    let mut scripts = 0;
    let mut over = Vec::new();
    for entry in std::fs::read_dir(&page).expect("the page's folder") {
        let path = entry.expect("a folder entry").path();
        if path.extension().is_some_and(|e| e == "js") {
            scripts += 1;
            let text = std::fs::read_to_string(&path).expect("a readable script");
            let lines = code_lines(&text);
            if lines > MAX_CODE_LINES {
                over.push(format!(
                    "{}: {lines} lines of code",
                    relative(&root(), &path)
                ));
            }
        }
    }
    assert!(scripts > 3, "only {scripts} page scripts found");
    assert!(
        over.is_empty(),
        "page scripts over {MAX_CODE_LINES} lines of code (split each along its seams):\n  {}",
        over.join("\n  ")
    );
}

#[test]
fn every_module_opens_with_a_header_saying_what_it_holds() {
    let survey = survey();
    let missing: Vec<&str> = survey
        .files
        .iter()
        .filter(|(_, text)| {
            let first = text.lines().map(str::trim).find(|l| !l.is_empty());
            !first.is_some_and(|l| l.starts_with("//!"))
        })
        .map(|(path, _)| path.as_str())
        .collect();
    assert!(
        missing.is_empty(),
        "module files without a `//!` header saying what they hold:\n  {}",
        missing.join("\n  ")
    );
}

#[test]
fn lines_of_code_leave_out_blanks_comments_and_test_modules() {
    let text = "//! A header.\n\nuse std::fmt;\n\n/// A doc.\nfn a() {\n    // why\n    let x = 1; // trailing\n}\n/* a\n block */\n#[cfg(test)]\nfn helper() {}\n\n#[cfg(test)]\nmod tests {\n    fn b() {\n    }\n}\nconst C: u8 = 1;\n";
    // use, fn a() {, let x, }, #[cfg(test)] + fn helper, const C
    assert_eq!(code_lines(text), 7);
}
