//! The checked walk against what a model or a racing process may do: links
//! planted or swapped in, FIFOs, folders nested deep, writes that leave no
//! temp file.

use super::*;

fn ws() -> (tempfile::TempDir, Workspace) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = Workspace::open(&dir.path().join("ws")).expect("open");
    (dir, ws)
}

#[test]
fn open_makes_a_private_root() {
    let (_dir, ws) = ws();
    let mode = std::fs::metadata(ws.root())
        .expect("meta")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o700);
}

#[test]
fn resolve_rules() {
    let (_dir, ws) = ws();
    let ok = |p: &str| ws.resolve(p).map(|r| r.to_string());
    assert_eq!(ok("notes/a.md").as_deref(), Ok("notes/a.md"));
    assert_eq!(ok("./x").as_deref(), Ok("x"));
    assert_eq!(ok("a/./b/").as_deref(), Ok("a/b"));
    assert_eq!(ok(".").as_deref(), Ok("."));
    let inside = format!("{}/notes/a.md", ws.root().display());
    assert_eq!(ok(&inside).as_deref(), Ok("notes/a.md"));
    for bad in ["", "a\0b", "../x", "a/../../x", "/etc/passwd", "a/.."] {
        let err = ws.resolve(bad).expect_err(bad);
        assert!(!err.message().is_empty());
    }
    assert!(ws
        .resolve("/etc/passwd")
        .expect_err("outside")
        .message()
        .contains("outside the workspace"));
    assert!(ws
        .resolve("a/../b")
        .expect_err("dotdot")
        .message()
        .contains(".."));
}

#[test]
fn write_creates_folders_keeps_mode_and_leaves_no_temp() {
    let (_dir, ws) = ws();
    ws.write_file("a/b/c.txt", b"one").expect("write");
    let path = ws.root().join("a/b/c.txt");
    assert_eq!(std::fs::read(&path).expect("read"), b"one");
    let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(&ws.root().join("a/b")), 0o700);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    ws.write_file("a/b/c.txt", b"two").expect("rewrite");
    assert_eq!(std::fs::read(&path).expect("read"), b"two");
    assert_eq!(mode(&path), 0o640);
    let names: Vec<_> = std::fs::read_dir(ws.root().join("a/b"))
        .expect("ls")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
}

#[test]
fn walk_reports_links_and_skips_git() {
    let (dir, ws) = ws();
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).expect("mkdir");
    std::fs::write(outside.join("secret"), "x").expect("write");
    ws.write_file("src/a.rs", b"a").expect("write");
    ws.write_file(".git/HEAD", b"x").expect("write");
    std::os::unix::fs::symlink(&outside, ws.root().join("out")).expect("symlink");
    let walk = ws.walk(".", WALK_LIMIT).expect("walk");
    let seen: Vec<_> = walk
        .entries
        .iter()
        .map(|e| (e.path.as_str(), e.kind))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("out", EntryKind::Link),
            ("src", EntryKind::Dir),
            ("src/a.rs", EntryKind::File)
        ]
    );
    assert!(!walk.stopped);
    let small = ws.walk(".", 2).expect("walk");
    assert!(small.stopped);
    assert_eq!(small.entries.len(), 2);
}

use crate::tools::{run, Registry, ToolContext, ToolOutput};
use nix::unistd::mkfifo;
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn tool(ws: &Workspace, name: &str, args: serde_json::Value) -> ToolOutput {
    let ctx = ToolContext {
        workspace: ws,
        call_id: "t",
        budget_chars: 64_000,
        web: None,
        documents: None,
    };
    run(&Registry::base(), name, &args.to_string(), &ctx)
}

/// A folder outside the workspace holding a canary file.
fn outside(dir: &tempfile::TempDir) -> PathBuf {
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).expect("mkdir");
    std::fs::write(outside.join("canary.txt"), "CANARY").expect("write");
    outside
}

fn assert_untouched(outside: &Path) {
    let mut names: Vec<_> = std::fs::read_dir(outside)
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, vec!["canary.txt".to_string()]);
    assert_eq!(
        std::fs::read_to_string(outside.join("canary.txt")).expect("read"),
        "CANARY"
    );
}

#[test]
fn fifo_is_refused_at_once() {
    let (_dir, ws) = ws();
    mkfifo(&ws.root().join("pipe"), Mode::from_bits_truncate(0o600)).expect("mkfifo");
    let started = Instant::now();
    let read = tool(&ws, "read_file", json!({"path": "pipe"}));
    assert!(!read.ok);
    assert_eq!(read.text, "`pipe` is a FIFO, not a regular file");
    let write = tool(&ws, "write_file", json!({"path": "pipe", "content": "x"}));
    assert!(
        !write.ok && write.text.contains("is a FIFO"),
        "{}",
        write.text
    );
    let grep = tool(&ws, "grep", json!({"pattern": "x"}));
    assert!(grep.ok, "{}", grep.text);
    let direct = tool(&ws, "grep", json!({"pattern": "x", "path": "pipe"}));
    assert!(!direct.ok);
    let edit = tool(
        &ws,
        "edit_file",
        json!({"path": "pipe", "old_string": "a", "new_string": "b"}),
    );
    assert!(!edit.ok);
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_folder_symlinked_outside_is_refused() {
    let (dir, ws) = ws();
    let outside = outside(&dir);
    std::os::unix::fs::symlink(&outside, ws.root().join("notes")).expect("symlink");
    let read = tool(&ws, "read_file", json!({"path": "notes/canary.txt"}));
    assert!(!read.ok);
    assert_eq!(
        read.text,
        "`notes/canary.txt` goes through a symlink (`notes`); the workspace does not follow links"
    );
    for path in ["notes/canary.txt", "notes/new.txt", "notes/deeper/new.txt"] {
        let write = tool(&ws, "write_file", json!({"path": path, "content": "pwned"}));
        assert!(!write.ok, "{path}");
        assert!(
            write.text.contains("goes through a symlink (`notes`)"),
            "{}",
            write.text
        );
    }
    let edit = tool(
        &ws,
        "edit_file",
        json!({"path": "notes/canary.txt", "old_string": "CANARY", "new_string": "x"}),
    );
    assert!(!edit.ok);
    let list = tool(&ws, "list_files", json!({"path": "notes"}));
    assert!(!list.ok && list.text.contains("symlink"), "{}", list.text);
    let grep = tool(&ws, "grep", json!({"pattern": "CANARY"}));
    assert_eq!(grep.text, "no matches for `CANARY` in `.`\n");
    let all = tool(&ws, "list_files", json!({}));
    assert!(all.text.contains("1 symlink also matches"), "{}", all.text);

    let up = tool(&ws, "read_file", json!({"path": "../outside/canary.txt"}));
    assert!(
        !up.ok && up.text.contains("goes up with `..`"),
        "{}",
        up.text
    );
    let absolute = outside.join("canary.txt").display().to_string();
    let abs = tool(&ws, "read_file", json!({"path": absolute}));
    assert!(
        !abs.ok && abs.text.contains("outside the workspace"),
        "{}",
        abs.text
    );
    let abs_write = tool(&ws, "write_file", json!({"path": absolute, "content": "x"}));
    assert!(!abs_write.ok);
    assert!(!read.text.contains("CANARY") && !abs.text.contains("CANARY"));
    assert_untouched(&outside);
}

#[test]
fn a_symlink_as_the_file_is_refused() {
    let (dir, ws) = ws();
    let outside = outside(&dir);
    let link = ws.root().join("link.txt");
    std::os::unix::fs::symlink(outside.join("canary.txt"), &link).expect("symlink");
    let read = tool(&ws, "read_file", json!({"path": "link.txt"}));
    assert!(!read.ok);
    assert_eq!(
        read.text,
        "`link.txt` is a symlink; the workspace does not follow links"
    );
    let write = tool(
        &ws,
        "write_file",
        json!({"path": "link.txt", "content": "pwned"}),
    );
    assert!(!write.ok);
    assert_eq!(
        write.text,
        "`link.txt` is a symlink; the workspace does not follow links"
    );
    assert!(std::fs::symlink_metadata(&link)
        .expect("meta")
        .file_type()
        .is_symlink());
    // A dangling link is refused the same way, and nothing is created at its target.
    std::os::unix::fs::symlink(outside.join("made.txt"), ws.root().join("dangling"))
        .expect("symlink");
    let dangling = tool(
        &ws,
        "write_file",
        json!({"path": "dangling", "content": "x"}),
    );
    assert!(!dangling.ok);
    assert_untouched(&outside);
}

#[test]
fn racing_a_folder_against_a_symlink_never_escapes() {
    let (dir, ws) = ws();
    let outside = outside(&dir);
    let swapped = ws.root().join("d");
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (stop, swapped, outside) = (stop.clone(), swapped.clone(), outside.clone());
        std::thread::spawn(move || {
            let clear = |p: &Path| match std::fs::symlink_metadata(p) {
                Ok(m) if m.file_type().is_symlink() => {
                    let _ = std::fs::remove_file(p);
                }
                Ok(_) => {
                    let _ = std::fs::remove_dir_all(p);
                }
                Err(_) => {}
            };
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                clear(&swapped);
                if std::fs::create_dir(&swapped).is_ok() {
                    let _ = std::fs::write(swapped.join("canary.txt"), "inside");
                }
                clear(&swapped);
                let _ = std::os::unix::fs::symlink(&outside, &swapped);
                swaps += 1;
            }
            swaps
        })
    };
    let mut reads_ok = 0;
    let mut writes_ok = 0;
    let mut refusals = std::collections::BTreeSet::new();
    for i in 0..2_000 {
        let read = tool(&ws, "read_file", json!({"path": "d/canary.txt"}));
        if read.ok {
            // Ours: the swapper's file (maybe caught empty) or one we wrote.
            let ours = read.text == "inside"
                || read.text.starts_with("write ")
                || read.text.ends_with("is empty (0 bytes)");
            assert!(ours && !read.text.contains("CANARY"), "{}", read.text);
            reads_ok += 1;
        } else {
            assert!(!read.text.contains("CANARY"));
            assert!(
                read.text.contains("`d/canary.txt`") && !read.text.contains('\n'),
                "{}",
                read.text
            );
            refusals.insert(read.text);
        }
        let content = format!("write {i}");
        let write = tool(
            &ws,
            "write_file",
            json!({"path": "d/canary.txt", "content": content}),
        );
        if write.ok {
            writes_ok += 1;
        } else {
            assert!(
                write.text.contains("`d/canary.txt`") && !write.text.contains('\n'),
                "{}",
                write.text
            );
            refusals.insert(write.text);
        }
        let new = tool(
            &ws,
            "write_file",
            json!({"path": "d/new.txt", "content": "x"}),
        );
        assert!(new.ok || new.text.contains("`d/new.txt`"), "{}", new.text);
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().expect("swapper");
    assert!(swaps > 0);
    assert_untouched(&outside);
    // Both outcomes happened, so the race was real.
    eprintln!("{swaps} swaps, {reads_ok} reads and {writes_ok} writes went through; refusals: {refusals:#?}");
}

#[test]
fn temp_names_are_told_from_files() {
    let temp = super::temp_name("report.md");
    assert!(super::is_temp_name(temp.to_str().unwrap()));
    assert!(!super::is_temp_name("report.md"));
    assert!(!super::is_temp_name(".report.tandem-notes.tmp"));
}

#[test]
fn an_agents_folder_is_reached_at_folder_and_read_only_when_so_given() {
    let dir = tempfile::tempdir().unwrap();
    let (own, notes) = (dir.path().join("own"), dir.path().join("notes"));
    std::fs::create_dir_all(notes.join("sub")).unwrap();
    std::fs::write(notes.join("sub/a.md"), "note").unwrap();
    let mount = crate::agent_folder::Mount {
        path: notes.clone(),
        read_only: true,
    };
    let ws = Workspace::open(&own).unwrap().with_mount(Some(&mount));
    ws.write_file("mine.md", b"x").unwrap();
    // The chat's own `folder` is hidden behind the mount.
    std::fs::create_dir_all(own.join("folder")).unwrap();
    std::fs::write(own.join("folder/hidden.md"), "h").unwrap();
    let (_, bytes) = ws.read_all("folder/sub/a.md", 100).unwrap();
    assert_eq!(bytes, b"note");
    let absolute = notes.join("sub/a.md");
    let (rel, _) = ws.read_all(absolute.to_str().unwrap(), 100).unwrap();
    assert_eq!(rel.to_string(), "folder/sub/a.md");
    assert_eq!(ws.stat("folder").unwrap().1, EntryKind::Dir);
    for refused in [
        ws.write_file("folder/sub/b.md", b"x").err(),
        ws.write_file("folder", b"x").err(),
        ws.remove_file("folder/sub/a.md").err(),
        ws.rename_file("mine.md", "folder/mine.md").err(),
        ws.rename_file("folder/sub/a.md", "taken.md").err(),
    ] {
        assert!(refused.is_some());
    }
    assert!(!notes.join("sub/b.md").exists() && notes.join("sub/a.md").exists());
    let paths: Vec<String> = ws
        .walk(".", 100)
        .unwrap()
        .entries
        .into_iter()
        .map(|e| e.path)
        .collect();
    assert_eq!(
        paths,
        ["folder", "folder/sub", "folder/sub/a.md", "mine.md"],
        "{paths:?}"
    );
    let writable = Workspace::open(&own)
        .unwrap()
        .with_mount(Some(&crate::agent_folder::Mount {
            path: notes.clone(),
            read_only: false,
        }));
    writable.write_file("folder/sub/b.md", b"new").unwrap();
    assert_eq!(std::fs::read(notes.join("sub/b.md")).unwrap(), b"new");
    // Without the mount, the same workspace is the chat's folder alone.
    let plain = Workspace::open(&own).unwrap();
    assert!(plain.read_all("folder/sub/a.md", 100).is_err());
}
