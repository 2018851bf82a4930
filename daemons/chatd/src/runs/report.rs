//! A worker's report (Agents mode): the fixed shape it is asked for, read
//! back field by field, one built from the record when the worker gives
//! none, and chatd's own check below it: the files the change sets say
//! changed, the calls that ran, and each check the report claims that no
//! call ran, marked unverified.

use std::fmt::Write as _;

/// What the main agent reads of a report, at most.
pub const READ_CHARS: usize = 8_000;

/// The shape a worker ends with, as its instructions give it.
pub const SHAPE: &str = "## Report\n\
    Status: done | partial | blocked\n\
    Summary: what you did and what you found, in a few lines\n\
    Files: each file you changed, comma-separated, or none\n\
    Checks:\n\
    - `the command you ran`: what it showed\n\
    Open: what is left undone, or none";

/// The fields of a report, in their order.
const FIELDS: [&str; 5] = ["Status", "Summary", "Files", "Checks", "Open"];

/// How the worker says the job went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Done,
    Partial,
    Blocked,
}

impl Status {
    fn parse(text: &str) -> Option<Status> {
        let word: String = text
            .trim()
            .trim_matches(['*', '`'])
            .chars()
            .take_while(|c| c.is_ascii_alphabetic())
            .collect();
        match word.to_ascii_lowercase().as_str() {
            "done" => Some(Status::Done),
            "partial" => Some(Status::Partial),
            "blocked" => Some(Status::Blocked),
            _ => None,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Status::Done => "done",
            Status::Partial => "partial",
            Status::Blocked => "blocked",
        }
    }
}

/// A report as the worker gave it (or chatd built it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub status: Status,
    pub summary: String,
    pub files: Vec<String>,
    /// Each check it claims, one line each.
    pub checks: Vec<String>,
    pub open: String,
}

/// Where a report came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The worker's, in its first try.
    Worker,
    /// The worker's, after chatd asked again for a missing field.
    AskedAgain,
    /// chatd's own from the record: the worker gave none twice.
    Built,
}

/// Reads the report at the end of `text`; else the fields it misses.
pub fn parse(text: &str) -> Result<Report, Vec<&'static str>> {
    // The last "Report" heading starts it; without one, the whole answer.
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .rposition(|l| {
            let bare = l.trim().trim_start_matches('#').trim().trim_matches('*');
            bare.eq_ignore_ascii_case("report") || bare.eq_ignore_ascii_case("report:")
        })
        .map_or(0, |i| i + 1);
    let mut found: [Option<String>; 5] = Default::default();
    let mut current: Option<usize> = None;
    for line in &lines[start..] {
        if let Some((i, rest)) = field_start(line) {
            found[i] = Some(rest.to_string());
            current = Some(i);
        } else if let Some(i) = current {
            if let Some(value) = found[i].as_mut() {
                value.push('\n');
                value.push_str(line);
            }
        }
    }
    let status = found[0].as_deref().and_then(Status::parse);
    let text_of = |i: usize| found[i].as_deref().map(str::trim).unwrap_or("");
    let mut missing = Vec::new();
    if status.is_none() {
        missing.push(FIELDS[0]);
    }
    for (i, name) in FIELDS.iter().enumerate().skip(1) {
        if found[i].is_none() || (text_of(i).is_empty() && *name != "Checks") {
            missing.push(*name);
        }
    }
    let Some(status) = status.filter(|_| missing.is_empty()) else {
        return Err(missing);
    };
    Ok(Report {
        status,
        summary: text_of(1).to_string(),
        files: list_of(text_of(2)),
        checks: text_of(3)
            .lines()
            .map(|l| l.trim().trim_start_matches(['-', '*']).trim())
            .filter(|l| !l.is_empty() && !is_none(l))
            .map(str::to_string)
            .collect(),
        open: text_of(4).to_string(),
    })
}

/// The field `line` starts and the rest of the line, if it starts one.
fn field_start(line: &str) -> Option<(usize, &str)> {
    let bare = line
        .trim_start()
        .trim_start_matches(['-', '*', '#', ' '])
        .trim_start();
    FIELDS.iter().enumerate().find_map(|(i, name)| {
        let head = bare.get(..name.len())?;
        if !head.eq_ignore_ascii_case(name) {
            return None;
        }
        let rest = bare[name.len()..].trim_start_matches('*');
        rest.strip_prefix(':')
            .map(|r| (i, r.trim_start_matches('*').trim()))
    })
}

fn is_none(text: &str) -> bool {
    let t = text.trim().trim_end_matches('.');
    t.eq_ignore_ascii_case("none") || t.eq_ignore_ascii_case("nothing") || t == "-"
}

/// A comma- or line-separated list, `none` as empty.
fn list_of(text: &str) -> Vec<String> {
    if is_none(text) {
        return Vec::new();
    }
    text.split([',', '\n'])
        .map(|p| {
            p.trim()
                .trim_start_matches(['-', '*'])
                .trim()
                .trim_matches('`')
        })
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

/// What chatd asks a worker whose report misses fields.
pub fn ask_again(missing: &[&str]) -> String {
    format!(
        "[chatd] Your last answer has no complete report: it misses {}. Answer now with only \
         the report, in exactly this shape:\n\n{SHAPE}",
        missing.join(", ")
    )
}

/// One call the worker made, as its record keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallRan {
    pub name: String,
    /// The command of a `bash` call, else the call's one-line summary.
    pub what: String,
    pub ok: bool,
}

/// What chatd knows of a worker's work beside its words.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    /// `(kind, path)` from the change sets since it started.
    pub changed: Vec<(String, String)>,
    pub calls: Vec<CallRan>,
    /// Its last words, for a report chatd builds.
    pub last_words: String,
}

/// A report built from the record when the worker gave none.
pub fn built(record: &Record, ended_well: bool) -> Report {
    let words = record.last_words.trim();
    let summary = if words.is_empty() {
        "(the worker wrote no summary)".to_string()
    } else {
        let cut: String = words.chars().take(1_500).collect();
        if cut.len() < words.len() {
            format!("{cut} …")
        } else {
            cut
        }
    };
    Report {
        status: if ended_well {
            Status::Partial
        } else {
            Status::Blocked
        },
        summary,
        files: record.changed.iter().map(|(_, p)| p.clone()).collect(),
        checks: Vec::new(),
        open: "unknown: the worker gave no report".to_string(),
    }
}

/// What stands behind a claimed check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backing {
    /// A call that ran it and ended well.
    Ran,
    /// Only calls that failed or were cut off.
    Failed,
    None,
}

/// The calls behind the claimed check `claim`: a `bash` call with a
/// command (between `&&`, `||`, `;` and `|`) that starts with the one the
/// claim names (after `timeout 3`, `sudo`, `env X=1` and the like), or
/// another tool the claim names with what it was called on.
fn backing(claim: &str, calls: &[CallRan]) -> Backing {
    let said = normal(&command_of(claim));
    if said.len() < 2 {
        return Backing::None;
    }
    let mut found = Backing::None;
    for c in calls {
        let backs = if c.name == "bash" {
            segments(&c.what).iter().any(|seg| {
                let words = unwrapped(seg);
                words == said || words.starts_with(&format!("{said} "))
            })
        } else {
            said.starts_with(&c.name) && normal(&c.what).contains(said[c.name.len()..].trim())
        };
        if backs {
            if c.ok {
                return Backing::Ran;
            }
            found = Backing::Failed;
        }
    }
    found
}

/// A command line's commands, normalized.
fn segments(command: &str) -> Vec<String> {
    command
        .split(['\n', ';', '|', '&'])
        .map(normal)
        .filter(|s| !s.is_empty())
        .collect()
}

/// A command without the words that only run it (`timeout 3`, `sudo`,
/// `env X=1`, `time`, `nice`).
fn unwrapped(segment: &str) -> String {
    const RUNNERS: [&str; 7] = ["timeout", "sudo", "env", "time", "nice", "nohup", "exec"];
    let words: Vec<&str> = segment.split(' ').collect();
    let start = words
        .iter()
        .position(|w| {
            !(RUNNERS.contains(w)
                || w.parse::<f64>().is_ok()
                || w.trim_end_matches(['s', 'm']).parse::<f64>().is_ok()
                || w.contains('=')
                || w.starts_with('-'))
        })
        .unwrap_or(words.len());
    words[start..].join(" ")
}

/// The command a claimed check names: in backticks, else before its colon.
fn command_of(claim: &str) -> String {
    if let Some(start) = claim.find('`') {
        if let Some(len) = claim[start + 1..].find('`') {
            return claim[start + 1..start + 1 + len].to_string();
        }
    }
    let cut = [": ", " — ", " -> ", " => "]
        .iter()
        .filter_map(|s| claim.find(s))
        .min()
        .unwrap_or(claim.len());
    claim[..cut].to_string()
}

fn normal(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// The report as `report.md` keeps it: the worker's fields, then chatd's check.
pub fn render(n: i64, title: &str, report: &Report, source: Source, record: &Record) -> String {
    let mut out = format!("# Task {n}: {title}\n\n## Report\n");
    let _ = writeln!(out, "Status: {}", report.status.as_str());
    let _ = writeln!(out, "Summary: {}", report.summary);
    let files = if report.files.is_empty() {
        "none".to_string()
    } else {
        report.files.join(", ")
    };
    let _ = writeln!(out, "Files: {files}");
    out.push_str("Checks:");
    if report.checks.is_empty() {
        out.push_str(" none\n");
    } else {
        out.push('\n');
        for claim in &report.checks {
            let _ = writeln!(out, "- {claim}");
        }
    }
    let _ = writeln!(out, "Open: {}", report.open);
    out.push_str("\n## chatd's check\n");
    let _ = writeln!(
        out,
        "Report: {}",
        match source {
            Source::Worker => "as the worker wrote it",
            Source::AskedAgain => "the worker's, asked again once for a missing field",
            Source::Built => "built by chatd from the record: the worker gave none",
        }
    );
    if record.changed.is_empty() {
        out.push_str("Files changed (change sets): none\n");
    } else {
        out.push_str("Files changed (change sets):\n");
        for (kind, path) in &record.changed {
            let _ = writeln!(out, "- {kind} {path}");
        }
    }
    let unseen: Vec<&String> = report
        .files
        .iter()
        .filter(|f| {
            !record
                .changed
                .iter()
                .any(|(_, p)| p == *f || p.ends_with(f.as_str()))
        })
        .collect();
    if !unseen.is_empty() {
        let names: Vec<&str> = unseen.iter().map(|s| s.as_str()).collect();
        let _ = writeln!(
            out,
            "Files the report names that no change set shows: {}",
            names.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "Calls that ran ({}): {}",
        record.calls.len(),
        tally(&record.calls)
    );
    let unverified: Vec<(&String, Backing)> = report
        .checks
        .iter()
        .map(|c| (c, backing(c, &record.calls)))
        .filter(|(_, b)| *b != Backing::Ran)
        .collect();
    if report.checks.is_empty() {
        out.push_str("Checks claimed: none\n");
    } else if unverified.is_empty() {
        out.push_str("Checks claimed: each has a call that ran it\n");
    } else {
        out.push_str("Checks claimed with no call that ran them well:\n");
        for (claim, backing) in unverified {
            let why = match backing {
                Backing::Failed => " (its call failed or was cut off)",
                _ => "",
            };
            let _ = writeln!(out, "- unverified: {claim}{why}");
        }
    }
    out
}

/// `write_file ×3, bash ×2 (1 failed)`, in the order first called.
fn tally(calls: &[CallRan]) -> String {
    let mut seen: Vec<(&str, usize, usize)> = Vec::new();
    for c in calls {
        match seen.iter_mut().find(|(n, _, _)| *n == c.name) {
            Some(entry) => {
                entry.1 += 1;
                entry.2 += usize::from(!c.ok);
            }
            None => seen.push((&c.name, 1, usize::from(!c.ok))),
        }
    }
    if seen.is_empty() {
        return "none".to_string();
    }
    seen.iter()
        .map(|(name, n, failed)| match failed {
            0 => format!("{name} ×{n}"),
            f => format!("{name} ×{n} ({f} failed)"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the main agent reads: the whole report to `READ_CHARS`, then where the rest is.
pub fn for_main(whole: &str, path: &str) -> String {
    if whole.chars().count() <= READ_CHARS {
        return format!("{whole}\n(The whole report is in {path}.)");
    }
    let cut: String = whole.chars().take(READ_CHARS).collect();
    format!("{cut}\n[cut at 8,000 characters: the whole report is in {path}]")
}

#[cfg(test)]
mod tests {
    use super::*;

    const WHOLE: &str = "I wrote the page.\n\n## Report\nStatus: done\nSummary: a clock page\n\
        Files: clock.html, clock.css\nChecks:\n- `python3 -m http.server` served it\n\
        - `npm test`: all pass\nOpen: none";

    fn record() -> Record {
        Record {
            changed: vec![
                ("created".into(), "clock.html".into()),
                ("created".into(), "clock.css".into()),
            ],
            calls: vec![
                CallRan {
                    name: "write_file".into(),
                    what: "write clock.html".into(),
                    ok: true,
                },
                CallRan {
                    name: "bash".into(),
                    what: "timeout 3 python3 -m http.server 8080".into(),
                    ok: true,
                },
            ],
            last_words: String::new(),
        }
    }

    #[test]
    fn a_whole_report_reads_back_field_by_field() {
        let report = parse(WHOLE).expect("whole");
        assert_eq!(report.status, Status::Done);
        assert_eq!(report.files, ["clock.html", "clock.css"]);
        assert_eq!(report.checks.len(), 2);
        assert_eq!(report.open, "none");
        let bold =
            "**Status:** partial\n**Summary:** x\n**Files:** none\n**Checks:** none\n**Open:** y";
        let report = parse(bold).expect("bold fields");
        assert!(report.files.is_empty() && report.checks.is_empty());
    }

    #[test]
    fn a_report_missing_fields_names_them() {
        let missing = parse("## Report\nStatus: done\nSummary: x\nFiles: a").unwrap_err();
        assert_eq!(missing, ["Checks", "Open"]);
        assert_eq!(
            parse("Status: finished\nSummary: x\nFiles: a\nChecks: none\nOpen: none").unwrap_err(),
            ["Status"]
        );
        assert!(ask_again(&missing).contains("Checks, Open"));
    }

    #[test]
    fn a_claimed_check_no_call_ran_is_marked_unverified() {
        let report = parse(WHOLE).expect("whole");
        let text = render(3, "Clock", &report, Source::Worker, &record());
        assert!(
            text.contains("- unverified: `npm test`: all pass"),
            "{text}"
        );
        assert!(!text.contains("unverified: `python3"), "{text}");
        assert!(
            text.contains("Calls that ran (2): write_file ×1, bash ×1"),
            "{text}"
        );
        assert!(text.contains("- created clock.html"), "{text}");
    }

    #[test]
    fn a_check_is_backed_by_its_command_only() {
        let call = |what: &str, ok: bool| CallRan {
            name: "bash".into(),
            what: what.into(),
            ok,
        };
        let calls = [
            call("grep 'npm test' package.json", true),
            call("cd web && npm run build", true),
            call("cargo test --quiet", false),
        ];
        assert_eq!(backing("`npm test`: passes", &calls), Backing::None);
        assert_eq!(backing("`npm run build`: built", &calls), Backing::Ran);
        assert_eq!(backing("`cargo test`: green", &calls), Backing::Failed);
        let read = [CallRan {
            name: "read_file".into(),
            what: "read clock.html".into(),
            ok: true,
        }];
        assert_eq!(
            backing("read_file clock.html: it reads", &read),
            Backing::Ran
        );
        assert_eq!(
            backing("read_file other.html: it reads", &read),
            Backing::None
        );
    }

    #[test]
    fn a_built_report_says_so_and_lists_the_changes() {
        let mut rec = record();
        rec.last_words = "I got halfway".into();
        let report = built(&rec, true);
        let text = render(1, "x", &report, Source::Built, &rec);
        assert!(text.contains("built by chatd from the record"), "{text}");
        assert!(text.contains("Files: clock.html, clock.css"), "{text}");
        assert!(text.contains("Summary: I got halfway"), "{text}");
    }

    #[test]
    fn the_main_agent_reads_at_most_8000_characters() {
        let long = "x".repeat(20_000);
        let read = for_main(&long, ".tandem/tasks/1/report.md");
        assert!(read.chars().count() < READ_CHARS + 100);
        assert!(read.ends_with("the whole report is in .tandem/tasks/1/report.md]"));
    }
}
