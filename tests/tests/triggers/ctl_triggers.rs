//! `tandem trigger …` end to end: the `tandem` binary talking to the real
//! chatd's front door, which forwards to the real triggerd (its clock held
//! at a known time through its clock file, so the times printed are known),
//! with the engine simulator behind chatd. Every wait is on a condition.

use std::process::{Command, Output};
use std::time::Duration;

use tandem_tests::harness::{bin_dir, wait_until, Chatd, Sim};
use tandem_tests::triggerd::{socket_in, Triggerd};

/// Tuesday 1 December 2026, 08:00 in Rome (CET, UTC+1).
const NOW: &str = "2026-12-01T07:00:00Z";

struct Box3 {
    _sim: Sim,
    chatd: Chatd,
    td: Triggerd,
    /// The `tandem` command's HOME.
    home: tempfile::TempDir,
}

/// The engine simulator, chatd forwarding to triggerd, and triggerd
/// started with its clock at `NOW`.
async fn boxed() -> Box3 {
    let sim = Sim::start(&["--tokens-per-second", "0"]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let socket = socket_in(dir.path());
    let chatd = Chatd::start(
        &sim.url(),
        &[("QSE_TRIGGERS_SOCKET", socket.to_string_lossy().as_ref())],
    )
    .await
    .unwrap();
    let mut td = Triggerd::new(dir, &chatd, "").unwrap();
    td.set_clock(NOW).unwrap();
    td.start().await.unwrap();
    Box3 {
        _sim: sim,
        chatd,
        td,
        home: tempfile::tempdir().unwrap(),
    }
}

impl Box3 {
    /// `tandem ARGS` as a person runs it: chatd's address and the secrets
    /// file from the environment, times printed in UTC.
    fn tandem(&self, args: &[&str]) -> Output {
        Command::new(bin_dir().join("tandem"))
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("QSE_ROOT", self.home.path())
            .env("QSE_CHAT_URL", format!("127.0.0.1:{}", self.chatd.port))
            .env("QSE_SECRETS", self.chatd.dir.path().join("secrets.env"))
            .env("TZ", "UTC")
            .output()
            .unwrap()
    }

    /// `tandem ARGS`, which must exit 0; its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.tandem(args);
        assert!(out.status.success(), "tandem {args:?}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `tandem ARGS`, which must exit 1 with one line on stderr; that line.
    fn refused(&self, args: &[&str]) -> String {
        let out = self.tandem(args);
        assert_eq!(
            out.status.code(),
            Some(1),
            "tandem {args:?}: {}",
            text(&out)
        );
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(err.lines().count(), 1, "one line: {err:?}");
        err.trim_end().to_string()
    }
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The id `add` printed: `added t_… …`.
fn added_id(out: &str) -> String {
    out.strip_prefix("added ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no id in {out:?}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preview_prints_the_meaning_and_the_next_times() {
    let b = boxed().await;
    let check = |args: &[&str], expect: &str| assert_eq!(b.ok(args), expect, "{args:?}");
    check(
        &[
            "trigger",
            "preview",
            "weekdays 09:30",
            "--tz",
            "Europe/Rome",
        ],
        "every weekday (Mon–Fri) at 09:30 (Europe/Rome)\n\
         \x20 Tue 2026-12-01 09:30 CET  (2026-12-01T08:30:00Z)\n\
         \x20 Wed 2026-12-02 09:30 CET  (2026-12-02T08:30:00Z)\n\
         \x20 Thu 2026-12-03 09:30 CET  (2026-12-03T08:30:00Z)\n\
         \x20 Fri 2026-12-04 09:30 CET  (2026-12-04T08:30:00Z)\n\
         \x20 Mon 2026-12-07 09:30 CET  (2026-12-07T08:30:00Z)\n",
    );
    check(
        &["trigger", "preview", "once 2026-12-24 18:00"],
        "once, on 2026-12-24 at 18:00 (UTC)\n\
         \x20 Thu 2026-12-24 18:00 UTC  (2026-12-24T18:00:00Z)\n",
    );
    // The API's refusals, one line each, naming the field.
    assert_eq!(
        b.refused(&["trigger", "preview", "daily 08:00", "--tz", "Mars/Olympus"]),
        "tandem: tz: unknown time zone \"Mars/Olympus\" (an IANA name like Europe/Rome) (bad_input, HTTP 400)"
    );
    let past = b.refused(&["trigger", "preview", "once 2026-11-30 18:00"]);
    assert!(
        past.starts_with("tandem: when: ")
            && past.contains("is in the past (it is 2026-12-01 07:00 in UTC)"),
        "{past}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_list_show_switch_run_and_remove() {
    let b = boxed().await;
    assert_eq!(
        b.ok(&["trigger", "list"]),
        "no triggers (add one: tandem trigger add --help)\n"
    );

    // A schedule: its line, then what it means.
    let out = b.ok(&[
        "trigger",
        "add",
        "--name",
        "Morning news",
        "--when",
        "weekdays 09:30",
        "--tz",
        "Europe/Rome",
        "--prompt",
        "Summarise the news",
    ]);
    let news = added_id(&out);
    assert_eq!(
        out,
        format!(
            "added {news}  Morning news  schedule  next Tue 2026-12-01 08:30 UTC  on\n\
             \x20 every weekday (Mon–Fri) at 09:30\n"
        )
    );
    // A file trigger on a folder of the shared workspace.
    std::fs::create_dir_all(b.td.workspace.join("Contracts")).unwrap();
    let out = b.ok(&[
        "trigger",
        "add",
        "--name",
        "Contracts",
        "--folder",
        "Contracts",
        "--quiet",
        "5",
        "--prompt",
        "Review it",
        "--daily-cap",
        "3",
    ]);
    let contracts = added_id(&out);

    // One line each, names in one column. (Both were made at the same
    // instant of the held clock, so their order is their ids'.)
    let listed = b.ok(&["trigger", "list"]);
    let mut lines: Vec<&str> = listed.lines().collect();
    lines.sort_unstable();
    let mut want = vec![
        format!("{news}  Morning news  schedule  next Tue 2026-12-01 08:30 UTC  on"),
        format!("{contracts}  Contracts     file      watches Contracts  on"),
    ];
    want.sort();
    assert_eq!(lines, want, "{listed}");
    let shown = b.ok(&["trigger", "show", &contracts]);
    for want in [
        format!("{contracts}  Contracts\n"),
        "  kind       file\n".into(),
        "  folder     Contracts\n".into(),
        "  quiet      5 s\n".into(),
        "  daily cap  3 runs\n".into(),
        "  enabled    on\n".into(),
        "  model      (chatd's default)\n".into(),
        "  prompt     Review it\n".into(),
    ] {
        assert!(shown.contains(&want), "{want:?} missing from {shown}");
    }

    // Off and on again.
    assert!(
        b.ok(&["trigger", "off", &news])
            .ends_with("  next -  off\n"),
        "an off schedule has no next run"
    );
    assert!(b
        .ok(&["trigger", "on", &news])
        .ends_with("  next Tue 2026-12-01 08:30 UTC  on\n"));

    // Run now: the run ends done in a chat of its own, with its tokens.
    assert_eq!(
        b.ok(&["trigger", "runs", &news]),
        format!("{news} has not run yet (run it now: tandem trigger run {news})\n")
    );
    let out = b.ok(&["trigger", "run", &news]);
    assert!(out.starts_with("run tr_"), "{out}");
    let runs = wait_until("the manual run to end", Duration::from_secs(30), || async {
        let out = b.ok(&["trigger", "runs", &news]);
        out.contains("  done  ").then_some(out)
    })
    .await
    .unwrap();
    let line = runs.lines().next().unwrap_or_default().to_string();
    assert!(
        line.contains("  done         manual    due Tue 2026-12-01 07:00 UTC  chat c_")
            && line.contains(" tokens"),
        "{line}"
    );
    assert_eq!(runs.lines().count(), 1, "{runs}");

    // Remove: gone from the list; asking for it again is a 404 in one line.
    assert_eq!(
        b.ok(&["trigger", "rm", &contracts]),
        format!("removed {contracts}\n")
    );
    let listed = b.ok(&["trigger", "list"]);
    assert!(
        !listed.contains(&contracts) && listed.contains(&news),
        "{listed}"
    );
    assert_eq!(
        b.refused(&["trigger", "show", &contracts]),
        format!("tandem: no trigger with id {contracts:?} (not_found, HTTP 404)")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_one_line_with_the_apis_message() {
    let mut b = boxed().await;
    let bad = b.refused(&[
        "trigger", "add", "--name", "Noon", "--when", "at noon", "--prompt", "p",
    ]);
    assert!(
        bad.starts_with("tandem: when: ") && bad.ends_with("(bad_input, HTTP 400)"),
        "{bad}"
    );
    let missing = b.refused(&[
        "trigger", "add", "--name", "Gone", "--folder", "Nowhere", "--prompt", "p",
    ]);
    assert!(
        missing.starts_with("tandem: folder: \"Nowhere\" does not exist in the workspace"),
        "{missing}"
    );
    // Nothing was stored.
    assert!(b.ok(&["trigger", "list"]).starts_with("no triggers"));
    // Usage errors are clap's: exit 2.
    let both = b.tandem(&[
        "trigger",
        "add",
        "--name",
        "x",
        "--when",
        "daily 08:00",
        "--folder",
        "F",
        "--prompt",
        "p",
    ]);
    assert_eq!(both.status.code(), Some(2), "{}", text(&both));

    // triggerd stopped: chatd says so, and how to start it.
    let exit = b.td.sigterm(Duration::from_secs(10)).unwrap();
    assert!(exit.success(), "{exit}");
    assert_eq!(
        b.refused(&["trigger", "list"]),
        "tandem: triggerd is not running (start it with `tandem triggers start`) (triggers_unavailable, HTTP 503)"
    );
}
