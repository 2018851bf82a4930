//! The build's work folder: made private, removed when the build ends (on
//! success and on every error) unless kept, never while something is
//! mounted below it.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

/// The build's work folder, removed when dropped (on success and on every
/// error) unless kept, and never while something is mounted below it.
pub(super) struct WorkDir {
    pub(super) path: PathBuf,
    keep: bool,
}

impl WorkDir {
    pub(super) fn make(parent: &Path) -> anyhow::Result<WorkDir> {
        fs::create_dir_all(parent).with_context(|| format!("making {}", parent.display()))?;
        let path = parent.join(format!("tandem-sandbox-build-{}", std::process::id()));
        if path.exists() {
            bail!("{} exists already: remove it first", path.display());
        }
        fs::create_dir(&path).with_context(|| format!("making {}", path.display()))?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o700))?;
        Ok(WorkDir { path, keep: false })
    }

    /// Leaves the folder in place when the build ends (`--keep`).
    pub(super) fn keep(&mut self) {
        self.keep = true;
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        let mounted = mounts_below(&self.path);
        if !mounted.is_empty() {
            eprintln!(
                "sandbox build: {} is left in place: {} is still mounted (umount, then rm -rf)",
                self.path.display(),
                mounted.join(", ")
            );
            return;
        }
        if let Err(err) = fs::remove_dir_all(&self.path) {
            eprintln!("sandbox build: removing {}: {err}", self.path.display());
        }
    }
}

/// Mount points at or below `dir`, from /proc/self/mountinfo.
fn mounts_below(dir: &Path) -> Vec<String> {
    let Ok(info) = fs::read_to_string("/proc/self/mountinfo") else {
        // Cannot tell: say so rather than delete blind.
        return vec!["(unknown: /proc/self/mountinfo unreadable)".into()];
    };
    let dir = dir.to_string_lossy();
    info.lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|point| point.replace("\\040", " "))
        .filter(|point| point == &*dir || point.starts_with(&format!("{dir}/")))
        .collect()
}
