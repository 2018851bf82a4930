//! Where tandem's binaries are.

use std::path::PathBuf;

/// A sibling binary of this `tandem` (the build or install puts them together).
pub fn sibling_binary(name: &str) -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join(name)))
        .filter(|path| path.exists())
        .unwrap_or_else(|| PathBuf::from(name))
}
