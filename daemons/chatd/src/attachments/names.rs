//! The names uploaded files get: one safe path component cut to 255 bytes,
//! and a free name beside what is there (`a (2).md`), taken by a move that
//! never replaces a file.

use crate::workspace::{ToolError, Workspace};

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

/// The candidates for `name` in `folder`: `name`, then `<stem> (2).<ext>`
/// and on, each cut to 255 bytes with its suffix kept.
fn candidates<'a>(folder: &'a str, name: &'a str) -> impl Iterator<Item = String> + 'a {
    let join = move |n: String| {
        if folder.is_empty() {
            n
        } else {
            format!("{folder}/{n}")
        }
    };
    let (stem, ext) = split_ext(name, usize::MAX);
    std::iter::once(join(name.to_string())).chain((2..10_000).map(move |n| {
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
        join(candidate)
    }))
}

/// Moves the file at `staged` to `folder/<name>`, or the first free name
/// beside it (`a (2).md`); never over a file. The path it took.
pub fn land_free(
    workspace: &Workspace,
    staged: &str,
    folder: &str,
    name: &str,
) -> Result<String, ToolError> {
    for path in candidates(folder, name) {
        if workspace.stat(&path).is_ok() {
            continue;
        }
        match workspace.rename_file(staged, &path) {
            Ok(_) => return Ok(path),
            // Taken between the look and the move: the next name.
            Err(_) if workspace.stat(&path).is_ok() => continue,
            Err(e) => return Err(e),
        }
    }
    Err(ToolError::new(format!(
        "no free name for `{name}` in `{folder}`"
    )))
}

/// The first free name for `name` in `folder` (a file written whole at once).
pub fn free_path(workspace: &Workspace, folder: &str, name: &str) -> String {
    candidates(folder, name)
        .find(|p| workspace.stat(p).is_err())
        .unwrap_or_else(|| format!("{folder}/{}", tandem_shared::time::new_id("upload_")))
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
    fn a_taken_name_gets_the_next_free_one() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        ws.write_file("uploads/.a.tmp", b"1").unwrap();
        assert_eq!(
            land_free(&ws, "uploads/.a.tmp", "uploads", "a.md").unwrap(),
            "uploads/a.md"
        );
        ws.write_file("uploads/.b.tmp", b"2").unwrap();
        assert_eq!(
            land_free(&ws, "uploads/.b.tmp", "uploads", "a.md").unwrap(),
            "uploads/a (2).md"
        );
        assert_eq!(
            std::fs::read(dir.path().join("uploads/a.md")).unwrap(),
            b"1"
        );
        assert_eq!(free_path(&ws, "uploads", "a.md"), "uploads/a (3).md");
    }
}
