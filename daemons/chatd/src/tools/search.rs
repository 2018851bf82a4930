//! grep: a regular expression over the workspace's text files, line by line.

use std::os::unix::fs::FileExt;

use globset::{GlobBuilder, GlobMatcher};
use regex::bytes::{Regex, RegexBuilder};
use serde_json::json;

use super::files::{BINARY_PROBE, WINDOW};
use super::fit::{commas, fit_output};
use super::{one_line, Args, Effect, ToolContext, ToolOutput, ToolSpec};
use crate::workspace::{EntryKind, ToolError, WALK_LIMIT};

/// Files in a folder search larger than this are named, not searched.
pub const FOLDER_FILE_MAX: u64 = 2 * 1024 * 1024;
const DEFAULT_MATCHES: u64 = 200;
const MAX_MATCHES: u64 = 5_000;
/// Characters of a matching line shown.
const LINE_CHARS: usize = 300;
/// Names of unsearched big files listed.
const BIG_NAMES: usize = 50;

pub fn grep_spec() -> ToolSpec {
    ToolSpec {
        name: "grep",
        description: "Search the workspace's text files for a regular expression (Rust regex \
            syntax), line by line. Prints `path:line: text` for each matching line. In a folder, \
            binary files are skipped and files over 2 MiB are listed as not searched; give such a \
            file as `path` to search it.",
        parameters: json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Regular expression, matched within one line"},
                "path": {"type": "string", "description": "A folder or one file, relative to the workspace (default .)"},
                "glob": {"type": "string", "description": "Only files matching this glob, like *.rs (without / it matches file names; with /, paths relative to `path`)"},
                "ignore_case": {"type": "boolean", "description": "Match without regard to case (default false)"},
                "max_matches": {"type": "integer", "minimum": 1, "description": "Stop after this many matching lines (default 200)"}
            },
            "required": ["pattern"],
            "additionalProperties": false
        }),
        effect: Effect::Read,
    }
}

struct Found {
    out: String,
    matches: u64,
    files: u64,
    max: u64,
}

impl Found {
    fn full(&self) -> bool {
        self.matches >= self.max
    }

    /// Searches the lines of `bytes` (which starts at line `first`; a final
    /// newline ends the last line, it does not start another).
    /// Returns the number of the line after the last one seen.
    fn search(&mut self, regex: &Regex, path: &str, bytes: &[u8], first: u64) -> u64 {
        if bytes.is_empty() {
            return first;
        }
        let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        let mut line = first;
        let mut any = false;
        for text in bytes.split(|&b| b == b'\n') {
            if self.full() {
                break;
            }
            let text = text.strip_suffix(b"\r").unwrap_or(text);
            if regex.is_match(text) {
                let shown = one_line(&String::from_utf8_lossy(text), LINE_CHARS);
                self.out.push_str(&format!("{path}:{line}: {shown}\n"));
                self.matches += 1;
                any = true;
            }
            line += 1;
        }
        if any {
            self.files += 1;
        }
        line
    }
}

pub fn grep(args: &Args, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let pattern = args.string("pattern", "a regular expression")?;
    let path = args
        .opt_string("path", "a folder or file inside the workspace")?
        .unwrap_or(".");
    let glob = args.opt_string("glob", "a glob like *.rs")?;
    let ignore_case = args.opt_bool("ignore_case")?.unwrap_or(false);
    let max = args
        .opt_count("max_matches", 1)?
        .unwrap_or(DEFAULT_MATCHES)
        .min(MAX_MATCHES);
    let regex = RegexBuilder::new(pattern)
        .case_insensitive(ignore_case)
        .build()
        .map_err(|e| {
            args.field_error(
                "pattern",
                &format!(
                    "is not a valid regular expression: {}",
                    one_line(&e.to_string(), 200)
                ),
            )
        })?;
    let filter = match glob {
        Some(g) => Some(
            file_filter(g)
                .map_err(|e| args.field_error("glob", &format!("is not a valid glob ({e})")))?,
        ),
        None => None,
    };

    let (rel, kind, _) = ctx.workspace.stat(path)?;
    let mut found = Found {
        out: String::new(),
        matches: 0,
        files: 0,
        max,
    };
    let mut notes = String::new();
    match kind {
        EntryKind::File => search_file(ctx, &rel.to_string(), &regex, &mut found)?,
        EntryKind::Dir => {
            let walk = ctx.workspace.walk(path, WALK_LIMIT)?;
            let prefix = if rel.is_root() {
                String::new()
            } else {
                format!("{rel}/")
            };
            let mut big = Vec::new();
            let mut binary = 0u64;
            let mut unreadable = 0u64;
            for entry in walk.entries.iter().filter(|e| e.kind == EntryKind::File) {
                if found.full() {
                    break;
                }
                let inner = entry.path.strip_prefix(&prefix).unwrap_or(&entry.path);
                if let Some(filter) = &filter {
                    if !filter.matches(inner) {
                        continue;
                    }
                }
                if entry.size > FOLDER_FILE_MAX {
                    big.push(entry.path.as_str());
                    continue;
                }
                // Changed since the walk (grown, swapped for a link): left out.
                let Ok((_, bytes)) = ctx.workspace.read_all(&entry.path, FOLDER_FILE_MAX) else {
                    unreadable += 1;
                    continue;
                };
                if bytes[..bytes.len().min(BINARY_PROBE)].contains(&0) {
                    binary += 1;
                    continue;
                }
                found.search(&regex, &entry.path, &bytes, 1);
            }
            if !big.is_empty() {
                let mut names = big[..big.len().min(BIG_NAMES)].join(", ");
                if big.len() > BIG_NAMES {
                    names.push_str(&format!(" and {} more", big.len() - BIG_NAMES));
                }
                notes.push_str(&format!("not searched (over 2 MiB): {names}\n"));
            }
            if binary > 0 {
                notes.push_str(&format!(
                    "({} binary file{} skipped)\n",
                    commas(binary),
                    if binary == 1 { "" } else { "s" }
                ));
            }
            if unreadable > 0 {
                notes.push_str(&format!(
                    "({} file{} changed during the search and {} skipped)\n",
                    commas(unreadable),
                    if unreadable == 1 { "" } else { "s" },
                    if unreadable == 1 { "was" } else { "were" }
                ));
            }
            if walk.stopped {
                notes.push_str(&format!(
                    "[stopped after {} entries; give a narrower path]\n",
                    commas(WALK_LIMIT as u64)
                ));
            }
        }
        EntryKind::Link => {
            return Err(ToolError::new(format!(
                "`{rel}` is a symlink; the workspace does not follow links"
            )))
        }
        other => {
            return Err(ToolError::new(format!(
                "`{rel}` is {}, not a file or folder",
                other.described()
            )))
        }
    }

    let mut out = std::mem::take(&mut found.out);
    if found.matches == 0 {
        out.push_str(&format!(
            "no matches for `{}` in `{rel}`\n",
            one_line(pattern, 100)
        ));
    }
    if found.full() {
        out.push_str(&format!(
            "[stopped at {} matches; narrow the pattern or path, or raise max_matches]\n",
            commas(found.matches)
        ));
    }
    out.push_str(&notes);
    let bytes = out.len() as u64;
    let summary = format!(
        "grep \"{}\": {} match{} in {} file{}",
        one_line(pattern, 50),
        commas(found.matches),
        if found.matches == 1 { "" } else { "es" },
        commas(found.files),
        if found.files == 1 { "" } else { "s" }
    );
    let text = fit_output(ctx.workspace, ctx.call_id, out, ctx.budget_chars);
    Ok(ToolOutput::ok(text, summary, bytes))
}

/// One file given directly: any size, read a window at a time by whole lines.
fn search_file(
    ctx: &ToolContext,
    path: &str,
    regex: &Regex,
    found: &mut Found,
) -> Result<(), ToolError> {
    let opened = ctx.workspace.open_file(path)?;
    let rel = opened.path.to_string();
    let file = opened.file;
    let read = |pos: u64| -> Result<Vec<u8>, ToolError> {
        let mut buf = vec![0u8; WINDOW];
        let mut filled = 0;
        while filled < buf.len() {
            match file.read_at(&mut buf[filled..], pos + filled as u64) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ToolError::new(format!("cannot read `{rel}`: {e}"))),
            }
        }
        buf.truncate(filled);
        Ok(buf)
    };
    let mut pos = 0u64;
    let mut line = 1u64;
    let mut first = true;
    while !found.full() {
        let window = read(pos)?;
        if first && window[..window.len().min(BINARY_PROBE)].contains(&0) {
            return Err(ToolError::new(format!(
                "`{rel}` is a binary file ({} bytes); not searched",
                commas(opened.size)
            )));
        }
        first = false;
        if window.is_empty() {
            break;
        }
        let at_end = window.len() < WINDOW;
        match memchr::memrchr(b'\n', &window) {
            _ if at_end => {
                found.search(regex, &rel, &window, line);
                break;
            }
            Some(last) => {
                // Through the last newline, so no line is cut.
                line = found.search(regex, &rel, &window[..=last], line);
                pos += last as u64 + 1;
            }
            None => {
                // A line longer than one window: its first window is searched, the rest skipped.
                found.search(regex, &rel, &window, line);
                line += 1;
                pos += window.len() as u64;
                loop {
                    let more = read(pos)?;
                    if more.is_empty() {
                        return Ok(());
                    }
                    match memchr::memchr(b'\n', &more) {
                        Some(i) => {
                            pos += i as u64 + 1;
                            break;
                        }
                        None => pos += more.len() as u64,
                    }
                }
            }
        }
    }
    Ok(())
}

/// A file filter: without `/` the glob matches file names, with `/` paths.
struct FileFilter {
    matcher: GlobMatcher,
    by_name: bool,
}

impl FileFilter {
    fn matches(&self, inner: &str) -> bool {
        if self.by_name {
            let name = inner.rsplit('/').next().unwrap_or(inner);
            self.matcher.is_match(name)
        } else {
            self.matcher.is_match(inner)
        }
    }
}

fn file_filter(glob: &str) -> Result<FileFilter, globset::Error> {
    let glob = glob.strip_prefix("./").unwrap_or(glob);
    Ok(FileFilter {
        matcher: GlobBuilder::new(glob)
            .literal_separator(true)
            .build()?
            .compile_matcher(),
        by_name: !glob.contains('/'),
    })
}

#[cfg(test)]
mod tests {
    use crate::tools::{run, Registry, ToolContext, ToolOutput};
    use crate::workspace::Workspace;
    use serde_json::{json, Value};

    fn call(ws: &Workspace, args: Value, budget: usize) -> ToolOutput {
        let ctx = ToolContext {
            workspace: ws,
            call_id: "g1",
            budget_chars: budget,
            web: None,
            documents: None,
        };
        run(&Registry::base(), "grep", &args.to_string(), &ctx)
    }

    fn put(ws: &Workspace, path: &str, bytes: &[u8]) {
        let full = ws.root().join(path);
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(full, bytes).expect("write");
    }

    #[test]
    fn grep_folder_names_big_files_and_skips_binary() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = Workspace::open(dir.path()).expect("ws");
        put(&ws, "src/a.rs", b"// top\nfn main() {}\n");
        put(&ws, "notes/b.md", b"The Main idea\n");
        put(&ws, "bin.dat", b"main\0\x01");
        let mut big = "nothing here\n".repeat(240_000);
        big.push_str("fn main in the big file\n");
        assert!(big.len() > 3_000_000);
        put(&ws, "big.log", big.as_bytes());

        let out = call(&ws, json!({"pattern": "main"}), 64_000);
        assert!(out.ok, "{}", out.text);
        assert_eq!(
            out.text,
            "src/a.rs:2: fn main() {}\nnot searched (over 2 MiB): big.log\n(1 binary file skipped)\n"
        );
        assert_eq!(out.summary, "grep \"main\": 1 match in 1 file");

        let ic = call(
            &ws,
            json!({"pattern": "main", "ignore_case": true, "glob": "*.md"}),
            64_000,
        );
        assert_eq!(ic.text, "notes/b.md:1: The Main idea\n");

        // Given directly, a big file is searched.
        let direct = call(
            &ws,
            json!({"pattern": "fn main", "path": "big.log"}),
            64_000,
        );
        assert_eq!(direct.text, "big.log:240001: fn main in the big file\n");

        let none = call(&ws, json!({"pattern": "zebra", "path": "src"}), 64_000);
        assert_eq!(none.text, "no matches for `zebra` in `src`\n");

        let bad = call(&ws, json!({"pattern": "fn ("}), 64_000);
        assert!(!bad.ok);
        assert!(
            bad.text
                .starts_with("grep: \"pattern\" is not a valid regular expression"),
            "{}",
            bad.text
        );
        assert!(!bad.text.contains('\n'));
        let missing = call(&ws, json!({}), 64_000);
        assert_eq!(
            missing.text,
            "grep: \"pattern\" is required (a regular expression)"
        );
    }

    #[test]
    fn grep_long_output_is_cut_and_saved() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = Workspace::open(dir.path()).expect("ws");
        let text: String = (1..=3000).map(|i| format!("hit number {i}\n")).collect();
        put(&ws, "many.txt", text.as_bytes());
        let out = call(&ws, json!({"pattern": "hit", "max_matches": 5000}), 4_000);
        assert!(out.ok);
        assert!(out.text.chars().count() <= 4_000, "{}", out.text.len());
        assert!(out.text.starts_with("many.txt:1: hit number 1\n"));
        assert!(out.text.ends_with("many.txt:3000: hit number 3000\n"));
        assert!(
            out.text
                .contains(" characters cut; the whole output is in .tandem/outputs/g1.txt ...]\n"),
            "{}",
            out.text
        );
        let saved =
            std::fs::read_to_string(ws.root().join(".tandem/outputs/g1.txt")).expect("saved");
        assert_eq!(saved.lines().count(), 3000);
        assert_eq!(out.bytes, saved.len() as u64);
        // The saved output is not searched again from the root.
        let again = call(&ws, json!({"pattern": "hit number 3000$"}), 64_000);
        assert_eq!(again.text, "many.txt:3000: hit number 3000\n");
        // The default bound.
        let bounded = call(&ws, json!({"pattern": "hit"}), 64_000);
        assert!(bounded.text.ends_with(
            "[stopped at 200 matches; narrow the pattern or path, or raise max_matches]\n"
        ));
    }
}
