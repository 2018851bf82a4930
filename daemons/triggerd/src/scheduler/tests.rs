//! The checks' decisions as data: files quiet or still written, a run's own
//! writes, a cut-short scan, a downtime's missed times collapsed into one.

use std::collections::HashSet;

use super::*;
use crate::folders::Scan;
use crate::store::FileState;

fn file(path: &str, version: &str, seen: i64, ran: Option<&str>, ran_ms: Option<i64>) -> FileState {
    FileState {
        path: path.into(),
        version: version.into(),
        seen_ms: seen,
        ran_version: ran.map(str::to_string),
        ran_ms,
    }
}

fn scanned(list: &[(&str, &str)]) -> Scan {
    Scan {
        files: list
            .iter()
            .map(|(p, v)| (p.to_string(), v.to_string()))
            .collect(),
        complete: true,
    }
}

#[test]
fn a_new_file_waits_for_its_quiet_period_then_runs_once() {
    let s = scanned(&[("a.pdf", "v1")]);
    let first = decide_files(&[], Some(&s), 1_000, 30_000, 60_000, false);
    assert!(first.due.is_empty());
    assert!(first.pending);
    let stored = first.changed.clone();
    // 29 s later, still quiet: waits.
    let d = decide_files(&stored, Some(&s), 30_000, 30_000, 60_000, false);
    assert!(d.due.is_empty() && d.pending);
    // 30 s after it was seen: due once.
    let d = decide_files(&stored, None, 31_000, 30_000, 60_000, false);
    assert_eq!(d.due, [("a.pdf".to_string(), "v1".to_string())]);
    let after: Vec<FileState> = d.changed.clone();
    let again = decide_files(&after, Some(&s), 90_000, 30_000, 60_000, false);
    assert!(
        again.due.is_empty() && !again.pending,
        "one run per version"
    );
}

#[test]
fn a_file_still_being_written_restarts_its_quiet_period() {
    let mut stored = vec![];
    for (i, t) in [(1, 0), (2, 2_000), (3, 4_000)] {
        let s = scanned(&[("a.pdf", &format!("v{i}"))]);
        let d = decide_files(&stored, Some(&s), t, 5_000, 60_000, false);
        assert!(d.due.is_empty(), "piece {i} does not run");
        for c in d.changed {
            stored.retain(|f: &FileState| f.path != c.path);
            stored.push(c);
        }
    }
    assert!(decide_files(&stored, None, 8_000, 5_000, 60_000, false)
        .due
        .is_empty());
    assert_eq!(
        decide_files(&stored, None, 9_000, 5_000, 60_000, false)
            .due
            .len(),
        1
    );
}

#[test]
fn a_changed_file_waits_for_the_gap_after_its_run() {
    let stored = [file("a.pdf", "v2", 10_000, Some("v1"), Some(5_000))];
    let d = decide_files(&stored, None, 50_000, 1_000, 60_000, false);
    assert!(d.due.is_empty() && d.pending, "55 s after the run began");
    let d = decide_files(&stored, None, 65_000, 1_000, 60_000, false);
    assert_eq!(d.due.len(), 1);
}

#[test]
fn nothing_starts_while_the_trigger_runs() {
    let stored = [file("a.pdf", "v1", 0, None, None)];
    let d = decide_files(&stored, None, 100_000, 1_000, 0, true);
    assert!(d.due.is_empty() && d.pending);
}

fn named(paths: &[&str]) -> OwnWrites {
    OwnWrites {
        paths: paths.iter().map(|p| p.to_string()).collect(),
        ran_commands: false,
    }
}

#[test]
fn a_runs_own_writes_start_nothing_and_others_still_do() {
    // a.pdf ran at 10 s; the run wrote Contracts/summary.md and changed
    // a.pdf; meanwhile b.pdf arrived from outside.
    let stored = [
        file("a.pdf", "v1", 0, Some("v1"), Some(10_000)),
        file("old.txt", "o1", 0, Some("o1"), None),
    ];
    let s = scanned(&[
        ("a.pdf", "v2"),
        ("b.pdf", "b1"),
        ("old.txt", "o1"),
        ("summary.md", "s1"),
    ]);
    let own = named(&["Contracts/summary.md", "Contracts/a.pdf"]);
    let d = absorb_writes(&stored, &s, "Contracts", &own, 10_000, 20_000);
    let paths: Vec<&str> = d.changed.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["a.pdf", "summary.md"], "b.pdf is not the run's");
    assert!(d
        .changed
        .iter()
        .all(|f| f.ran_version.as_deref() == Some(f.version.as_str())));
    let mut after: Vec<FileState> = vec![stored[1].clone()];
    after.extend(d.changed);
    let d = decide_files(&after, Some(&s), 200_000, 1_000, 60_000, false);
    assert!(d.pending, "b.pdf waits for its quiet period");
    let d = decide_files(
        &merge(&after, &d.changed),
        Some(&s),
        202_000,
        1_000,
        60_000,
        false,
    );
    assert_eq!(d.due, [("b.pdf".to_string(), "b1".to_string())]);
}

fn merge(stored: &[FileState], changed: &[FileState]) -> Vec<FileState> {
    let mut out: Vec<FileState> = stored
        .iter()
        .filter(|f| !changed.iter().any(|c| c.path == f.path))
        .cloned()
        .collect();
    out.extend(changed.iter().cloned());
    out
}

#[test]
fn a_run_that_ran_commands_owns_what_changed_since_it_started() {
    let stored = [
        file("a.pdf", "v1", 0, Some("v1"), Some(10_000)),
        file("old.txt", "o1", 0, Some("o1"), None),
        file("seen.txt", "n1", 12_000, None, None),
    ];
    let s = scanned(&[
        ("a.pdf", "v1"),
        ("old.txt", "o1"),
        ("seen.txt", "n1"),
        ("made.txt", "m1"),
    ]);
    let own = OwnWrites {
        paths: HashSet::new(),
        ran_commands: true,
    };
    let d = absorb_writes(&stored, &s, "", &own, 10_000, 20_000);
    let paths: Vec<&str> = d.changed.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["seen.txt", "made.txt"]);
}

#[test]
fn own_writes_come_from_the_runs_tool_calls() {
    let snapshot = serde_json::json!({"messages": [
        {"role": "user", "text": "go"},
        {"role": "assistant", "run_id": "r_1", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "write_file", "arguments": "{\"path\":\"/Contracts/./out.md\",\"content\":\"x\"}"}},
            {"id": "c2", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"Contracts/a.pdf\"}"}}
        ]},
        {"role": "assistant", "run_id": "r_2", "tool_calls": [
            {"id": "c3", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}}
        ]}
    ]});
    let own = own_writes(&snapshot, "r_1");
    assert_eq!(own, named(&["Contracts/out.md"]));
    assert!(own_writes(&snapshot, "r_2").ran_commands);
}

#[test]
fn a_scan_cut_short_takes_nothing_as_gone() {
    let stored = [file("far.txt", "f1", 0, Some("f1"), None)];
    let mut s = scanned(&[("near.txt", "n1")]);
    s.complete = false;
    let d = decide_files(&stored, Some(&s), 1_000, 1_000, 0, false);
    assert!(d.removed.is_empty());
    s.complete = true;
    let d = decide_files(&stored, Some(&s), 1_000, 1_000, 0, false);
    assert_eq!(d.removed, ["far.txt"]);
}

#[test]
fn due_schedules_collapse_a_downtime_into_one_run() {
    let day = 86_400_000i64;
    let saved = jiff::Timestamp::from_second(1_764_576_000)
        .unwrap()
        .as_millisecond(); // 2025-12-01T08:00Z
    let trigger = Trigger {
        id: "t_1".into(),
        name: "daily".into(),
        kind: Kind::Schedule,
        when: "daily 09:00".into(),
        tz: String::new(),
        folder: String::new(),
        quiet_seconds: 30,
        min_gap_seconds: 60,
        prompt: "p".into(),
        model: String::new(),
        agent_id: String::new(),
        daily_cap: 24,
        enabled: true,
        enabled_ms: saved,
        checked_ms: saved,
        disabled_reason: None,
        created_ms: saved,
        updated_ms: saved,
    };
    let mut live = Live::default();
    live.entries.insert(
        "t_1".into(),
        Entry::new(trigger, std::path::Path::new("/ws")),
    );
    let now = saved + 3 * day + 2 * 3_600_000; // three days later, 10:00
    let due = due_schedules(&live, now);
    assert_eq!(due.len(), 1, "{due:?}");
    assert_eq!(rfc3339(due[0].2), "2025-12-04T09:00:00Z");
    assert_eq!(due_schedules(&live, now), due, "due until stored");
    advance(&mut live, &due, now);
    assert!(due_schedules(&live, now + 1000).is_empty());
    assert_eq!(
        live.entries["t_1"].next_ms.map(rfc3339).as_deref(),
        Some("2025-12-05T09:00:00Z")
    );
}
