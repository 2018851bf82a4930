//! The file tools on a real workspace: what the model is shown when a file
//! is long, huge, binary or edited, and the summaries.

use super::*;
use crate::tools::{run, stub_arguments, Registry, ToolContext};
use crate::workspace::Workspace;
use serde_json::Value;

struct Fixture {
    _dir: tempfile::TempDir,
    ws: Workspace,
    registry: Registry,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = Workspace::open(&dir.path().join("ws")).expect("ws");
        Fixture {
            _dir: dir,
            ws,
            registry: Registry::base(),
        }
    }

    fn call(&self, name: &str, args: Value, budget: usize) -> ToolOutput {
        let ctx = ToolContext {
            workspace: &self.ws,
            call_id: "call1",
            budget_chars: budget,
            web: None,
            documents: None,
        };
        run(&self.registry, name, &args.to_string(), &ctx)
    }

    fn put(&self, path: &str, bytes: &[u8]) {
        let full = self.ws.root().join(path);
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(full, bytes).expect("write");
    }
}

/// A line of exactly `len` bytes (newline included) starting with its number.
fn numbered(n: usize, len: usize) -> String {
    let mut line = format!("{n:04} ");
    line.push_str(&"x".repeat(len - line.len() - 1));
    line.push('\n');
    line
}

fn the_317_line_file() -> String {
    let mut text = String::new();
    for n in 1..=30 {
        text.push_str(&numbered(n, 2_100));
    }
    for n in 31..=316 {
        text.push_str(&numbered(n, 2_227));
    }
    text.push_str(&numbered(317, 2_315));
    text
}

#[test]
fn read_file_truncation_marker_is_exact() {
    let f = Fixture::new();
    let text = the_317_line_file();
    assert_eq!(text.len(), 702_237);
    f.put("notes/a.md", text.as_bytes());
    let out = f.call("read_file", json!({"path": "notes/a.md"}), 64_000);
    assert!(out.ok, "{}", out.text);
    let marker = "[truncated at 64,000 characters: lines 1-30 of 317 shown, 639,237 more bytes; read on with offset=31]";
    assert!(
        out.text.ends_with(marker),
        "{}",
        &out.text[out.text.len() - 200..]
    );
    assert_eq!(&out.text[..out.text.len() - marker.len()], &text[..63_000]);
    assert!(out.text.chars().count() <= 64_000);
    assert_eq!(out.summary, "read notes/a.md lines 1-30 of 317");
    assert_eq!(out.bytes, 702_237);

    let on = f.call(
        "read_file",
        json!({"path": "notes/a.md", "offset": 31}),
        64_000,
    );
    assert!(on.ok, "{}", on.text);
    assert!(on.text.starts_with("0031 xxx"));
    // 28 lines of 2,227 bytes fit 63,800; a 29th does not.
    let shown = &text[63_000..63_000 + 28 * 2_227];
    assert!(on.text.starts_with(shown));
    assert!(on.text.ends_with(&format!(
        "[truncated at 64,000 characters: lines 31-58 of 317 shown, {} more bytes; read on with offset=59]",
        commas(702_237 - 63_000 - 28 * 2_227)
    )));

    let tail = f.call(
        "read_file",
        json!({"path": "notes/a.md", "offset": 317}),
        64_000,
    );
    assert_eq!(tail.text, numbered(317, 2_315));
    let past = f.call(
        "read_file",
        json!({"path": "notes/a.md", "offset": 318}),
        64_000,
    );
    assert!(!past.ok);
    assert_eq!(
        past.text,
        "`notes/a.md` has 317 lines; offset=318 is past its end"
    );

    let limited = f.call(
        "read_file",
        json!({"path": "notes/a.md", "limit": 2}),
        64_000,
    );
    assert_eq!(
        limited.text,
        format!(
            "{}{}[lines 1-2 of 317 shown; read on with offset=3]",
            numbered(1, 2_100),
            numbered(2, 2_100)
        )
    );

    // The stub of writing this file, as the issue describes it.
    let args = json!({"path": "notes/a.md", "content": text}).to_string();
    let stub = stub_arguments("write_file", &args).expect("stub");
    let v: Value = serde_json::from_str(&stub).expect("json");
    let content = v["content"].as_str().expect("string");
    assert!(
        content.starts_with("[content not repeated: notes/a.md, 317 lines, 702,237 bytes, sha256 ")
    );
    assert_eq!(stub_arguments("write_file", &args), Some(stub.clone()));
}

#[test]
fn read_file_streams_a_6_mb_file() {
    let f = Fixture::new();
    let mut text = String::with_capacity(6_000_000);
    for n in 1..=60_000 {
        let mut line = format!("line {n:06} ");
        line.push_str(&"a".repeat(99 - line.len()));
        line.push('\n');
        text.push_str(&line);
    }
    assert_eq!(text.len(), 6_000_000);
    f.put("big.txt", text.as_bytes());
    let out = f.call("read_file", json!({"path": "big.txt"}), 64_000);
    assert!(out.text.starts_with("line 000001 "));
    assert!(out.text.ends_with(
        "[truncated at 64,000 characters: lines 1-638 of 60,000 shown, 5,936,200 more bytes; read on with offset=639]"
    ), "{}", &out.text[out.text.len() - 200..]);

    // Line 50,000 starts at byte 4,999,900, past the first 4 MiB.
    let far = f.call(
        "read_file",
        json!({"path": "big.txt", "offset": 50_000, "limit": 3}),
        64_000,
    );
    assert_eq!(
        far.text,
        format!(
            "{}[lines 50,000-50,002 of 60,000 shown; read on with offset=50003]",
            &text[4_999_900..5_000_200]
        )
    );
    let last = f.call(
        "read_file",
        json!({"path": "big.txt", "offset": 60_000}),
        64_000,
    );
    assert_eq!(last.text, &text[5_999_900..]);
    let past = f.call(
        "read_file",
        json!({"path": "big.txt", "offset": 60_001}),
        64_000,
    );
    assert!(past.text.contains("has 60,000 lines"), "{}", past.text);

    // grep given the file directly reads it a window at a time.
    let found = f.call(
        "grep",
        json!({"pattern": "^line 05000[01] ", "path": "big.txt"}),
        64_000,
    );
    assert!(
        found.text.starts_with("big.txt:50000: line 050000 aaa"),
        "{}",
        found.text
    );
    assert!(
        found.text.contains("\nbig.txt:50001: line 050001 "),
        "{}",
        found.text
    );
    assert_eq!(
        found.summary,
        "grep \"^line 05000[01] \": 2 matches in 1 file"
    );
}

#[test]
fn read_file_goes_on_by_column_in_a_5_mb_line() {
    let f = Fixture::new();
    let line: String = (0..5_000_000u32)
        .map(|i| char::from(b'0' + (i % 10) as u8))
        .collect();
    f.put("one.txt", format!("{line}\nend\n").as_bytes());
    let out = f.call("read_file", json!({"path": "one.txt"}), 64_000);
    assert_eq!(
        out.text,
        format!(
            "{}\n[line 1 is 5,000,000 characters; shown columns 1-63,800; read on with offset=1 column=63801]",
            &line[..63_800]
        )
    );
    let on = f.call(
        "read_file",
        json!({"path": "one.txt", "offset": 1, "column": 63_801}),
        64_000,
    );
    assert_eq!(
        on.text,
        format!(
            "{}\n[line 1 is 5,000,000 characters; shown columns 63,801-127,600; read on with offset=1 column=127601]",
            &line[63_800..127_600]
        )
    );
    // The rest of the line fits: it is shown, then the next lines.
    let rest = f.call(
        "read_file",
        json!({"path": "one.txt", "offset": 1, "column": 4_990_001}),
        64_000,
    );
    assert_eq!(rest.text, format!("{}\nend\n", &line[4_990_000..]));
    let past = f.call(
        "read_file",
        json!({"path": "one.txt", "offset": 1, "column": 5_000_001}),
        64_000,
    );
    assert!(
        !past.ok && past.text.contains("has 5,000,000 characters"),
        "{}",
        past.text
    );

    // Columns count characters, not bytes.
    f.put("wide.txt", "é".repeat(100_000).as_bytes());
    let wide = f.call("read_file", json!({"path": "wide.txt"}), 64_000);
    assert!(wide.text.ends_with(
        "[line 1 is 100,000 characters; shown columns 1-63,800; read on with offset=1 column=63801]"
    ));
    assert!(wide.text.starts_with(&"é".repeat(63_800)));
}

#[test]
fn read_file_small_cases() {
    let f = Fixture::new();
    f.put("empty.txt", b"");
    f.put("bin.dat", b"abc\0def");
    f.put("latin.txt", b"caf\xe9\n");
    f.put("short.txt", b"one\ntwo");
    let empty = f.call("read_file", json!({"path": "empty.txt"}), 64_000);
    assert!(empty.ok && empty.text.contains("is empty"));
    let bin = f.call("read_file", json!({"path": "bin.dat"}), 64_000);
    assert_eq!(
        bin.text,
        "`bin.dat` is a binary file (7 bytes); not shown: `file` and `xxd | head` in bash say what it is"
    );
    let latin = f.call("read_file", json!({"path": "latin.txt"}), 64_000);
    assert_eq!(latin.text, "caf\u{fffd}\n");
    let short = f.call("read_file", json!({"path": "./short.txt"}), 64_000);
    assert_eq!(short.text, "one\ntwo");
    assert_eq!(short.summary, "read short.txt lines 1-2 of 2");
    let missing = f.call("read_file", json!({"path": "nope.txt"}), 64_000);
    assert!(!missing.ok && missing.text.contains("`nope.txt` does not exist"));
    let folder = f.call("read_file", json!({"path": "."}), 64_000);
    assert!(!folder.ok);
    let far = f.call(
        "read_file",
        json!({"path": "short.txt", "offset": u64::MAX, "limit": u64::MAX}),
        64_000,
    );
    assert_eq!(
        far.text,
        format!(
            "`short.txt` has 2 lines; offset={} is past its end",
            u64::MAX
        )
    );
    let wide = f.call(
        "read_file",
        json!({"path": "short.txt", "column": u64::MAX}),
        64_000,
    );
    assert!(
        !wide.ok && wide.text.contains("past its end"),
        "{}",
        wide.text
    );
    let all = f.call(
        "read_file",
        json!({"path": "short.txt", "limit": u64::MAX}),
        64_000,
    );
    assert_eq!(all.text, "one\ntwo");
    let tiny = f.call("read_file", json!({"path": "short.txt"}), 0);
    assert_eq!(tiny.text, "one\ntwo");
}

#[test]
fn write_file_reports_lines_and_bytes() {
    let f = Fixture::new();
    let out = f.call(
        "write_file",
        json!({"path": "notes/a.md", "content": "a\nb\n"}),
        64_000,
    );
    assert!(out.ok, "{}", out.text);
    assert_eq!(out.text, "wrote notes/a.md (2 lines, 4 bytes)");
    assert_eq!(
        std::fs::read(f.ws.root().join("notes/a.md")).expect("read"),
        b"a\nb\n"
    );
    let missing = f.call("write_file", json!({"path": "x"}), 64_000);
    assert_eq!(
        missing.text,
        "write_file: \"content\" is required (the complete text of the file)"
    );
}

#[test]
fn edit_file_matches_once_or_says_why_not() {
    let f = Fixture::new();
    f.put("x.txt", b"a\nfoo\nb\nfoo\n");
    let none = f.call(
        "edit_file",
        json!({"path": "x.txt", "old_string": "bar", "new_string": "baz"}),
        64_000,
    );
    assert!(!none.ok);
    assert_eq!(
        none.text,
        "old_string was not found in `x.txt`; read_file it and copy the text exactly, including spaces and line ends"
    );
    let several = f.call(
        "edit_file",
        json!({"path": "x.txt", "old_string": "foo", "new_string": "bar"}),
        64_000,
    );
    assert!(!several.ok);
    assert_eq!(
        several.text,
        "old_string matches 2 times in `x.txt` (at lines 2, 4); add surrounding lines so it matches once, or set replace_all"
    );
    let same = f.call(
        "edit_file",
        json!({"path": "x.txt", "old_string": "foo", "new_string": "foo"}),
        64_000,
    );
    assert!(!same.ok && same.text.contains("the same"));
    assert_eq!(
        std::fs::read(f.ws.root().join("x.txt")).expect("read"),
        b"a\nfoo\nb\nfoo\n"
    );

    let once = f.call(
        "edit_file",
        json!({"path": "x.txt", "old_string": "b\nfoo", "new_string": "B\nF\nG"}),
        64_000,
    );
    assert!(once.ok, "{}", once.text);
    assert_eq!(
        once.text,
        "edited x.txt: 1 replacement; changed lines now 3-5"
    );
    assert_eq!(
        std::fs::read(f.ws.root().join("x.txt")).expect("read"),
        b"a\nfoo\nB\nF\nG\n"
    );

    f.put("y.txt", b"foo foo\nfoo\n");
    let all = f.call(
        "edit_file",
        json!({"path": "y.txt", "old_string": "foo", "new_string": "bar", "replace_all": true}),
        64_000,
    );
    assert!(all.ok, "{}", all.text);
    assert_eq!(
        all.text,
        "edited y.txt: 3 replacements; changed lines now 1, 2"
    );
    assert_eq!(
        std::fs::read(f.ws.root().join("y.txt")).expect("read"),
        b"bar bar\nbar\n"
    );

    f.put("crlf.txt", b"one\r\ntwo\r\n");
    let crlf = f.call(
        "edit_file",
        json!({"path": "crlf.txt", "old_string": "one\ntwo", "new_string": "x"}),
        64_000,
    );
    assert!(crlf.text.contains("\\r\\n"), "{}", crlf.text);
}

#[test]
fn list_files_globs_sorts_and_skips_git() {
    let f = Fixture::new();
    f.put("src/main.rs", b"fn main() {}\n");
    f.put("src/lib/util.rs", b"//\n");
    f.put("notes/b.md", b"# b\n");
    f.put("README.md", b"hello\n");
    f.put(".git/config", b"[core]\n");
    let all = f.call("list_files", json!({}), 64_000);
    assert_eq!(
        all.text,
        "README.md (6 bytes)\nnotes/b.md (4 bytes)\nsrc/lib/util.rs (3 bytes)\nsrc/main.rs (13 bytes)\n"
    );
    let rs = f.call("list_files", json!({"pattern": "**/*.rs"}), 64_000);
    assert_eq!(
        rs.text,
        "src/lib/util.rs (3 bytes)\nsrc/main.rs (13 bytes)\n"
    );
    let top = f.call("list_files", json!({"pattern": "*.md"}), 64_000);
    assert_eq!(top.text, "README.md (6 bytes)\n");
    let inside = f.call(
        "list_files",
        json!({"pattern": "*.rs", "path": "src"}),
        64_000,
    );
    assert_eq!(inside.text, "src/main.rs (13 bytes)\n");
    let none = f.call("list_files", json!({"pattern": "*.txt"}), 64_000);
    assert!(
        none.text.starts_with("no files match `*.txt` in `.`"),
        "{}",
        none.text
    );
    let bad = f.call("list_files", json!({"pattern": "a[b"}), 64_000);
    assert!(
        !bad.ok
            && bad
                .text
                .starts_with("list_files: \"pattern\" is not a valid glob")
    );
}
