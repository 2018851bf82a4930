//! No import circles: within a crate, no two modules name each other,
//! directly or round a loop. A module is one `.rs` file (`mod.rs`, `lib.rs`
//! and `main.rs` stand for their folder or crate); a module names another
//! by a `use` line or a `crate::…`/`super::…` path in its code (its
//! `#[cfg(test)] mod tests` left out). A module and the modules inside it
//! are one unit: a parent using its children, and a child its parent, is
//! not a circle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module's path inside its crate (`["runs", "steps"]`; the crate root is empty).
type ModPath = Vec<String>;

/// Every module file below `src` (binaries under `src/bin` left out: each is a crate of its own).
fn modules(src: &Path) -> BTreeMap<ModPath, PathBuf> {
    let mut found = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        // The tree is the repository's own: a folder that cannot be read is a broken checkout.
        for entry in std::fs::read_dir(&dir).expect("a source folder reads") {
            let path = entry.expect("a source folder's entry reads").path();
            if path.is_dir() {
                if path != src.join("bin") {
                    stack.push(path);
                }
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path
                .strip_prefix(src)
                .expect("below src")
                .with_extension("");
            let mut names: ModPath = relative
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            if matches!(
                names.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                names.pop();
            }
            found.insert(names, path);
        }
    }
    found
}

/// The code of a module file without its unit tests and its comments (a
/// line's `//` to its end; lines keep their numbers).
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths a `use` tree names: `a::{b, c::d}` gives `a::b` and `a::c::d`.
fn use_tree(prefix: &str, tree: &str, out: &mut Vec<String>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let head = tree[..open].trim().trim_end_matches("::");
        let inner = tree[open + 1..].trim_end().trim_end_matches('}');
        let prefix = join(prefix, head);
        let mut depth = 0;
        let mut start = 0;
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    use_tree(&prefix, &inner[start..i], out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        use_tree(&prefix, &inner[start..], out);
    } else if !tree.is_empty() {
        let name = tree.split(" as ").next().unwrap_or(tree).trim();
        out.push(join(prefix, name));
    }
}

fn join(prefix: &str, rest: &str) -> String {
    match (prefix.is_empty(), rest.is_empty()) {
        (true, _) => rest.to_string(),
        (_, true) => prefix.to_string(),
        _ => format!("{prefix}::{rest}"),
    }
}

/// Every `crate::`, `super::` and `self::` path a module's code names, with its line.
fn named_paths(code: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    // `use` items, which may span lines.
    let mut rest = code;
    let mut offset = 0;
    while let Some(at) = find_word(rest, "use ") {
        let start = offset + at;
        let Some(end) = code[start..].find(';') else {
            break;
        };
        let line = code[..start].matches('\n').count() + 1;
        let mut paths = Vec::new();
        use_tree("", &code[start + 4..start + end], &mut paths);
        out.extend(paths.into_iter().map(|p| (line, p)));
        offset = start + end;
        rest = &code[offset..];
    }
    // Paths written inline.
    for (number, line) in code.lines().enumerate() {
        for root in ["crate::", "super::"] {
            let mut from = 0;
            while let Some(at) = line[from..].find(root) {
                let start = from + at;
                from = start + root.len();
                let before = line[..start].chars().next_back();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                    continue;
                }
                let path: String = line[start..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                    .collect();
                out.push((number + 1, path.trim_end_matches(':').to_string()));
            }
        }
    }
    out
}

/// Where `word` starts a word in `text` (not inside an identifier).
fn find_word(text: &str, word: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = text[from..].find(word) {
        let start = from + at;
        let before = text[..start].chars().next_back();
        if before.is_none_or(|c| !(c.is_alphanumeric() || c == '_')) {
            return Some(start);
        }
        from = start + word.len();
    }
    None
}

/// The module a path from `module` lands in: the deepest module file it names.
fn resolve(module: &ModPath, path: &str, known: &BTreeMap<ModPath, PathBuf>) -> Option<ModPath> {
    let mut parts = path.split("::").filter(|p| !p.is_empty());
    let mut full: ModPath = match parts.next()? {
        "crate" => Vec::new(),
        "self" => module.clone(),
        "super" => module[..module.len().saturating_sub(1)].to_vec(),
        _ => return None,
    };
    for part in parts {
        if part == "super" {
            full.pop();
        } else if part != "self" {
            full.push(part.to_string());
        }
    }
    (0..=full.len())
        .rev()
        .map(|n| full[..n].to_vec())
        .find(|candidate| known.contains_key(candidate))
}

fn nested(a: &ModPath, b: &ModPath) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

fn name(module: &ModPath) -> String {
    if module.is_empty() {
        "(crate root)".to_string()
    } else {
        module.join("::")
    }
}

/// The circles of one crate: each as its modules' names and the lines that close it.
pub fn circles(src: &Path) -> Vec<String> {
    let known = modules(src);
    // module → (module it names → the first file:line naming it)
    let mut edges: BTreeMap<ModPath, BTreeMap<ModPath, String>> = BTreeMap::new();
    for (module, file) in &known {
        let text = std::fs::read_to_string(file).expect("a source file reads");
        for (line, path) in named_paths(&code_of(&text)) {
            let Some(target) = resolve(module, &path, &known) else {
                continue;
            };
            if nested(module, &target) {
                continue;
            }
            edges
                .entry(module.clone())
                .or_default()
                .entry(target)
                .or_insert_with(|| format!("{}:{line}", file.display()));
        }
    }
    strongly_connected(&known, &edges)
        .into_iter()
        .map(|group| {
            let members: BTreeSet<&ModPath> = group.iter().collect();
            let mut text = group.iter().map(name).collect::<Vec<_>>().join(", ");
            for from in &group {
                for (to, place) in edges.get(from).into_iter().flatten() {
                    if members.contains(to) {
                        text.push_str(&format!("\n    {} -> {} ({place})", name(from), name(to)));
                    }
                }
            }
            text
        })
        .collect()
}

/// Tarjan's strongly connected components of more than one module.
fn strongly_connected(
    known: &BTreeMap<ModPath, PathBuf>,
    edges: &BTreeMap<ModPath, BTreeMap<ModPath, String>>,
) -> Vec<Vec<ModPath>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<ModPath, BTreeMap<ModPath, String>>,
        index: BTreeMap<ModPath, usize>,
        low: BTreeMap<ModPath, usize>,
        stack: Vec<ModPath>,
        on_stack: BTreeSet<ModPath>,
        groups: Vec<Vec<ModPath>>,
    }
    impl Walk<'_> {
        fn visit(&mut self, v: &ModPath) {
            let n = self.index.len();
            self.index.insert(v.clone(), n);
            self.low.insert(v.clone(), n);
            self.stack.push(v.clone());
            self.on_stack.insert(v.clone());
            let next: Vec<ModPath> = self
                .edges
                .get(v)
                .into_iter()
                .flatten()
                .map(|(w, _)| w.clone())
                .collect();
            for w in next {
                if !self.index.contains_key(&w) {
                    self.visit(&w);
                    let low = self.low[v].min(self.low[&w]);
                    self.low.insert(v.clone(), low);
                } else if self.on_stack.contains(&w) {
                    let low = self.low[v].min(self.index[&w]);
                    self.low.insert(v.clone(), low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut group = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(&w);
                    let done = &w == v;
                    group.push(w);
                    if done {
                        break;
                    }
                }
                if group.len() > 1 {
                    group.sort();
                    self.groups.push(group);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        groups: Vec::new(),
    };
    for module in known.keys() {
        if !walk.index.contains_key(module) {
            walk.visit(module);
        }
    }
    walk.groups
}

#[test]
fn no_two_modules_of_a_crate_name_each_other() {
    let root = crate::root().canonicalize().expect("the workspace root");
    let prefix = format!("{}/", root.display());
    let mut found = Vec::new();
    for src in crate::crate_sources(&root) {
        for circle in circles(&src) {
            let circle = circle.replace(&prefix, "");
            found.push(format!(
                "{}: {circle}",
                src.strip_prefix(&root).unwrap_or(&src).display()
            ));
        }
    }
    assert!(
        found.is_empty(),
        "modules that name each other, directly or round a loop (move what both need into a module of its own, or to the side that owns it):\n{}",
        found.join("\n")
    );
}

#[test]
fn a_circle_is_found_round_a_loop_and_a_parent_with_its_child_is_not_one() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let src = dir.path();
    let write = |path: &str, text: &str| {
        let path = src.join(path);
        std::fs::create_dir_all(path.parent().expect("a file has a folder")).expect("a folder");
        std::fs::write(path, text).expect("a file");
    };
    write("lib.rs", "//! Root.\nmod a;\nmod b;\nmod c;\nmod d;\n");
    write("a.rs", "//! A.\nuse crate::b::{One, Two as Three};\n");
    write("b.rs", "//! B.\npub fn f() { crate::c::g() }\n");
    write(
        "c.rs",
        "//! C.\nuse super::a;\n// use crate::d::X; a comment names nothing\n",
    );
    write("d/mod.rs", "//! D.\nmod e;\nuse self::e::Y;\n");
    write(
        "d/e.rs",
        "//! E.\nuse super::Z;\n#[cfg(test)]\nmod tests {\n    use crate::a::W;\n}\n",
    );
    let found = circles(src);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].starts_with("a, b, c\n"), "{}", found[0]);
    assert!(found[0].contains("c -> a"), "{}", found[0]);
}
