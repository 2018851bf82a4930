//! Packages from PyPI that tests run (the MCP project's Python SDK, for a
//! stdio server of the tests' own: `tests/pip/notes_server.py`), pinned in
//! `tests/pip/requirements.txt`, installed by `ops/test` into
//! `tests/pip/site` (`pip install --target`). A test asks for that folder
//! here; when it is not there the test skips, or fails under CI, saying how
//! to install it (`needs`).

use std::path::PathBuf;

use crate::needs;

/// What installs every package the tests use.
pub const INSTALL: &str =
    "python3 -m pip install --target tests/pip/site -r tests/pip/requirements.txt (ops/test runs it)";

/// `tests/pip`: the requirements, the servers and `site/`.
pub fn folder() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("pip")
}

/// `tests/pip/site` when `module` is installed there, or `None` after
/// `needs::missing`.
#[track_caller]
pub fn site(module: &str) -> Option<PathBuf> {
    let site = folder().join("site");
    if site.join(module).is_dir() {
        return Some(site);
    }
    needs::missing(
        &format!("the PyPI package {module} (not in {})", site.display()),
        INSTALL,
    );
    None
}
