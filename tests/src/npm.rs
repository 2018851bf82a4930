//! Packages from the npm registry that tests run (axe-core in the test
//! browser, the MCP reference server), pinned in `tests/npm/package.json` and its
//! lock, installed by `ops/test` (`npm ci --prefix tests/npm`) into
//! `tests/npm/node_modules`. A test asks for a package's folder here; when
//! it is not installed the test skips, or fails under CI, saying how to
//! install it (`needs`).

use std::path::PathBuf;

use crate::needs;

/// What installs every package the tests use.
pub const INSTALL: &str = "npm ci --prefix tests/npm (ops/test runs it)";

/// `tests/npm/node_modules`.
pub fn modules() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("npm/node_modules")
}

/// The installed folder of `package`, or `None` after `needs::missing`.
#[track_caller]
pub fn package(package: &str) -> Option<PathBuf> {
    let folder = modules().join(package);
    if folder.join("package.json").is_file() {
        return Some(folder);
    }
    needs::missing(
        &format!("the npm package {package} (not in {})", modules().display()),
        INSTALL,
    );
    None
}

/// The text of one file of an installed package (a script to inject).
#[track_caller]
pub fn file(package: &str, path: &str) -> Option<String> {
    let folder = self::package(package)?;
    match std::fs::read_to_string(folder.join(path)) {
        Ok(text) => Some(text),
        Err(e) => {
            needs::missing(&format!("{package}/{path} ({e})"), INSTALL);
            None
        }
    }
}
