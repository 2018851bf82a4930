//! The names uploaded files get: one safe path component cut to 255 bytes,
//! and a free name beside what is there (`a (2).md`), never one another
//! upload of this process is still writing.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{LazyLock, Mutex};

use tandem_shared::sync::lock;

use crate::workspace::Workspace;

/// The file name part of what a device sent, safe as one path component,
/// cut to 255 bytes keeping its extension. `None`: nothing usable is left.
pub fn free_base(name: &str) -> Option<String> {
    let base = name.rsplit(['/', '\\']).next().unwrap_or("");
    let clean: String = base.chars().filter(|c| !c.is_control()).collect();
    let clean = clean.trim().trim_start_matches('.').to_string();
    if clean.is_empty() {
        return None;
    }
    Some(cut_name(&clean, 255))
}

/// `name` cut to `max` bytes on a character boundary, its extension kept.
fn cut_name(name: &str, max: usize) -> String {
    if name.len() <= max {
        return name.to_string();
    }
    let (stem, ext) = split_ext(name, 16);
    let mut end = max.saturating_sub(ext.len());
    while end > 0 && !stem.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{ext}", &stem[..end])
}

/// `("report", ".pdf")`; an extension longer than `max_ext` bytes is none.
fn split_ext(name: &str, max_ext: usize) -> (&str, &str) {
    match name.rfind('.') {
        Some(dot) if dot > 0 && name.len() - dot <= max_ext => (&name[..dot], &name[dot..]),
        _ => (name, ""),
    }
}

/// Paths (workspace root joined with the relative path) an upload of this
/// process is writing: a second upload of the same name picks another even
/// before the first is on disk. Process-wide because chatd is the only
/// writer of uploads and a name is held for one request at most.
static WRITING: LazyLock<Mutex<HashSet<PathBuf>>> = LazyLock::new(Mutex::default);

/// A name held for one upload; let go when dropped.
pub struct Reserved {
    key: PathBuf,
    /// The workspace-relative path.
    pub path: String,
}

impl Drop for Reserved {
    fn drop(&mut self) {
        lock(&WRITING).remove(&self.key);
    }
}

/// Holds `path` itself when it is neither on disk nor being written
/// (`taken_ok`: the caller replaces what is there on purpose).
pub fn reserve_exact(workspace: &Workspace, path: &str, taken_ok: bool) -> Option<Reserved> {
    let key = workspace.root().join(path);
    let mut writing = lock(&WRITING);
    if writing.contains(&key) || (!taken_ok && workspace.stat(path).is_ok()) {
        return None;
    }
    writing.insert(key.clone());
    Some(Reserved {
        key,
        path: path.to_string(),
    })
}

/// `folder/<name>`, or `folder/<stem> (2).<ext>` and on while that is taken.
pub fn reserve_free(workspace: &Workspace, folder: &str, name: &str) -> Reserved {
    let join = |n: &str| {
        if folder.is_empty() {
            n.to_string()
        } else {
            format!("{folder}/{n}")
        }
    };
    if let Some(held) = reserve_exact(workspace, &join(name), false) {
        return held;
    }
    let (stem, ext) = split_ext(name, usize::MAX);
    for n in 2..10_000 {
        let suffix = format!(" ({n}){ext}");
        let candidate = cut_name(&format!("{stem}{suffix}"), 255);
        // Cutting may have eaten the suffix: put it back after a shorter stem.
        let candidate = if candidate.ends_with(&suffix) {
            candidate
        } else {
            let mut end = 255usize.saturating_sub(suffix.len()).min(stem.len());
            while end > 0 && !stem.is_char_boundary(end) {
                end -= 1;
            }
            format!("{}{suffix}", &stem[..end])
        };
        if let Some(held) = reserve_exact(workspace, &join(&candidate), false) {
            return held;
        }
    }
    let id = join(&tandem_shared::time::new_id("upload_"));
    Reserved {
        key: workspace.root().join(&id),
        path: id,
    }
}

/// The type a file's name says, for a file sent without one.
pub fn guess_mime(name: &str) -> &'static str {
    let ext = name.rsplit('.').next().unwrap_or("").to_ascii_lowercase();
    match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "pdf" => "application/pdf",
        "json" => "application/json",
        "txt" | "md" | "csv" | "log" => "text/plain",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_one_safe_component_cut_to_255_bytes() {
        assert_eq!(free_base("../../etc/passwd").as_deref(), Some("passwd"));
        assert_eq!(free_base("C:\\x\\notes.txt").as_deref(), Some("notes.txt"));
        assert_eq!(free_base(".bashrc").as_deref(), Some("bashrc"));
        assert_eq!(free_base(".."), None);
        assert_eq!(free_base("a\u{0}b\n").as_deref(), Some("ab"));
        let long = format!("{}.txt", "é".repeat(300));
        let cut = free_base(&long).unwrap();
        assert!(cut.len() <= 255 && cut.ends_with(".txt"), "{cut}");
    }

    #[test]
    fn a_name_being_written_is_not_given_twice() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let first = reserve_free(&ws, "uploads", "a.md");
        let second = reserve_free(&ws, "uploads", "a.md");
        assert_eq!(first.path, "uploads/a.md");
        assert_eq!(second.path, "uploads/a (2).md");
        drop(first);
        assert_eq!(reserve_free(&ws, "uploads", "a.md").path, "uploads/a.md");
        assert!(reserve_exact(&ws, "uploads/a (2).md", true).is_none());
    }
}
