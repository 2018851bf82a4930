//! ARCHITECTURE.md's code map, checked against the workspace: every member
//! of the workspace (the root Cargo.toml's `members`) has a section of its
//! own in the code map whose heading names its folder and its crate,
//! `` ### `daemons/egress` (crate `egressd`) ``, and no heading names a
//! crate the workspace does not hold. A crate added, renamed or moved fails
//! here until the map says so.

use std::path::{Path, PathBuf};

/// A member of the workspace: its folder from the root and its package name.
#[derive(Debug)]
struct Member {
    path: String,
    name: String,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn manifest(path: &Path) -> toml::Value {
    toml::from_str(&read(path)).unwrap_or_else(|e| panic!("{} does not parse: {e}", path.display()))
}

/// Every member of the workspace, in the root Cargo.toml's order.
fn members(root: &Path) -> Vec<Member> {
    let workspace = manifest(&root.join("Cargo.toml"));
    let members = workspace["workspace"]["members"]
        .as_array()
        .expect("the root Cargo.toml has [workspace] members");
    members
        .iter()
        .map(|m| {
            let path = m.as_str().expect("a member is a path").to_string();
            let package = manifest(&root.join(&path).join("Cargo.toml"));
            let name = package["package"]["name"]
                .as_str()
                .unwrap_or_else(|| panic!("{path}/Cargo.toml has no [package] name"))
                .to_string();
            Member { path, name }
        })
        .collect()
}

/// The `###` headings of the `## Code map` section.
fn code_map_headings(architecture: &str) -> Vec<&str> {
    let map = architecture
        .split_once("\n## Code map\n")
        .expect("ARCHITECTURE.md has a `## Code map` section")
        .1;
    let map = map.split("\n## ").next().unwrap_or(map);
    map.lines()
        .filter_map(|line| line.strip_prefix("### "))
        .collect()
}

/// The crate names a heading states (`` crate `name` ``).
fn crates_named(heading: &str) -> Vec<&str> {
    heading
        .split("crate `")
        .skip(1)
        .filter_map(|rest| rest.split('`').next())
        .collect()
}

#[test]
fn the_code_map_has_a_section_for_every_crate() {
    let root = root();
    let members = members(&root);
    let architecture = read(&root.join("ARCHITECTURE.md"));
    let headings = code_map_headings(&architecture);
    let missing: Vec<String> = members
        .iter()
        .filter(|m| {
            let folder = format!("`{}`", m.path);
            !headings
                .iter()
                .any(|h| h.contains(&folder) && crates_named(h).contains(&m.name.as_str()))
        })
        .map(|m| format!("### `{}` (crate `{}`)", m.path, m.name))
        .collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md's code map lacks a section for these members of the workspace; \
         add one with this heading, saying what the crate holds and its invariant:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_code_map_names_no_crate_outside_the_workspace() {
    let root = root();
    let members = members(&root);
    let architecture = read(&root.join("ARCHITECTURE.md"));
    let strangers: Vec<&str> = code_map_headings(&architecture)
        .into_iter()
        .flat_map(crates_named)
        .filter(|name| !members.iter().any(|m| m.name == *name))
        .collect();
    assert!(
        strangers.is_empty(),
        "ARCHITECTURE.md's code map names crates the workspace does not hold \
         (renamed or removed?): {strangers:?}"
    );
}

#[test]
fn headings_are_read_as_the_map_writes_them() {
    let text = "# A\n\n## Code map\n\n### `ctl` (crate `tandem`, the command)\n\ntext\n\n\
                ### `config/`\n\n## Outside the code\n\n### `x` (crate `elsewhere`)\n";
    let headings = code_map_headings(text);
    assert_eq!(
        headings,
        ["`ctl` (crate `tandem`, the command)", "`config/`"]
    );
    assert_eq!(crates_named(headings[0]), ["tandem"]);
    assert!(crates_named(headings[1]).is_empty());
}
