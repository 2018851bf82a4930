//! `tandem connector …` end to end: the `tandem` binary talking to the
//! real chatd's front door, which forwards to the real connectord, whose
//! Bot API is the fake of `tandem_tests::fakebot`, with the engine
//! simulator behind chatd. The token, given in a file or on stdin, never
//! appears in anything `tandem` prints. Every wait is on a condition.

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::json;
use tandem_tests::connectord::{socket_in, Connectord};
use tandem_tests::fakebot::{FakeBot, Fault};
use tandem_tests::fakeslack::{FakeSlack, APP_TOKEN, BOT_TOKEN};
use tandem_tests::harness::{bin_dir, wait_until, Chatd, Sim};

const TOKEN: &str = "123456:AAE-the-secret-ctl-token-4c3b2a";
/// A token of the right shape that the fake refuses (401).
const WRONG: &str = "123456:AAE-a-wrong-ctl-token-000000";
const QUICK: Duration = Duration::from_secs(30);

struct Box5 {
    _sim: Sim,
    chatd: Chatd,
    /// connectord; `None` when the test runs without it.
    cd: Option<Connectord>,
    bot: FakeBot,
    _slack: FakeSlack,
    /// A saved agent of chatd's.
    agent: String,
    /// The `tandem` command's HOME (and the token files).
    home: tempfile::TempDir,
}

/// The engine simulator, chatd forwarding to a connectord's socket, a fake
/// Bot API serving `TOKEN`, a fake Slack, and a saved agent; connectord
/// started when `with_connectord`.
async fn boxed(with_connectord: bool) -> Box5 {
    let sim = Sim::start(&["--tokens-per-second", "0"]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let socket = socket_in(dir.path());
    let chatd = Chatd::start(
        &sim.url(),
        &[("QSE_CONNECTORS_SOCKET", socket.to_string_lossy().as_ref())],
    )
    .await
    .unwrap();
    let bot = FakeBot::start(TOKEN, "ctl_helper_bot").await.unwrap();
    let slack = FakeSlack::start().await.unwrap();
    let made = chatd
        .client()
        .post(
            "/agents",
            json!({"name": "Concierge", "model": "sim-small", "instructions": "Answer briefly."}),
        )
        .await
        .unwrap();
    assert_eq!(made.status, 201, "agent: {:?}", made.body);
    let agent = made.body["id"].as_str().unwrap().to_string();
    let mut cd = Connectord::new(dir, &chatd, &bot.url(), &slack.api_base(), "").unwrap();
    let cd = if with_connectord {
        cd.start().await.unwrap();
        Some(cd)
    } else {
        None
    };
    Box5 {
        _sim: sim,
        chatd,
        cd,
        bot,
        _slack: slack,
        agent,
        home: tempfile::tempdir().unwrap(),
    }
}

impl Box5 {
    /// `tandem ARGS` as a person runs it, with `stdin` as its standard
    /// input (not a terminal): chatd's address and the secrets file from
    /// the environment, times printed in UTC.
    fn tandem_in(&self, args: &[&str], stdin: &str) -> Output {
        let mut child = Command::new(bin_dir().join("tandem"))
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("QSE_ROOT", self.home.path())
            .env("QSE_CHAT_URL", format!("127.0.0.1:{}", self.chatd.port))
            .env("QSE_SECRETS", self.chatd.dir.path().join("secrets.env"))
            .env("TZ", "UTC")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        input.write_all(stdin.as_bytes()).unwrap();
        drop(input);
        // The fake Bot API and connectord's long polls go on meanwhile.
        let out = tokio::task::block_in_place(|| child.wait_with_output()).unwrap();
        for secret in [TOKEN, WRONG, BOT_TOKEN, APP_TOKEN] {
            assert!(
                !text(&out).contains(secret),
                "tandem {args:?} printed a token: {}",
                text(&out)
            );
        }
        out
    }

    fn tandem(&self, args: &[&str]) -> Output {
        self.tandem_in(args, "")
    }

    /// `tandem ARGS`, which must exit 0; its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.tandem(args);
        assert!(out.status.success(), "tandem {args:?}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `tandem ARGS` (stdin `stdin`), which must exit 1 with one line on
    /// stderr but for tandem's notes; that line.
    fn refused_in(&self, args: &[&str], stdin: &str) -> String {
        let out = self.tandem_in(args, stdin);
        assert_eq!(
            out.status.code(),
            Some(1),
            "tandem {args:?}: {}",
            text(&out)
        );
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        let lines: Vec<&str> = err
            .lines()
            .filter(|l| !l.starts_with("tandem: reading the ") && !l.starts_with("tandem: note: "))
            .collect();
        assert_eq!(lines.len(), 1, "one line: {err:?}");
        lines[0].to_string()
    }

    fn refused(&self, args: &[&str]) -> String {
        self.refused_in(args, "")
    }

    /// A token file of the person's, 0600.
    fn token_file(&self, name: &str, token: &str) -> String {
        use std::os::unix::fs::PermissionsExt;
        let path = self.home.path().join(name);
        std::fs::write(&path, format!("{token}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        path.to_string_lossy().into_owned()
    }
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The id `add` printed: `added cn_… …`.
fn added_id(out: &str) -> String {
    out.strip_prefix("added ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no id in {out:?}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connectord_down_is_said_in_one_line_and_the_token_stays_unsaid() {
    let b = boxed(false).await;
    assert!(b.cd.is_none());
    let want = "tandem: connectord is not running (start it with `tandem connectors start`) \
                (connectors_unavailable, HTTP 503)";
    assert_eq!(b.refused(&["connector", "list"]), want);
    // An add reads the token, then hears the same: the token in no output
    // (every run is checked for it).
    let file = b.token_file("bot.token", TOKEN);
    let add = [
        "connector",
        "add",
        "--kind",
        "telegram",
        "--name",
        "Helper",
        "--agent",
        &b.agent,
        "--token-file",
        &file,
    ];
    assert_eq!(b.refused(&add), want);
    // Usage errors are clap's: exit 2, nothing sent.
    let out = b.tandem(&[
        "connector",
        "add",
        "--kind",
        "irc",
        "--name",
        "x",
        "--agent",
        "a_1",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_list_show_test_senders_allow_set_switch_and_remove_against_a_fake_bot() {
    let b = boxed(true).await;
    assert_eq!(
        b.ok(&["connector", "list"]),
        "no connectors (add one: tandem connector add --help)\n"
    );

    // A refused token is not stored; the platform's reason is printed, the
    // token is not.
    let wrong = b.token_file("wrong.token", WRONG);
    let refused = b.refused(&[
        "connector",
        "add",
        "--kind",
        "telegram",
        "--name",
        "Helper",
        "--agent",
        &b.agent,
        "--token-file",
        &wrong,
    ]);
    assert!(
        refused.starts_with("tandem: token: Telegram refused it: ")
            && refused.ends_with("(bad_input, HTTP 400)"),
        "{refused}"
    );
    // --accept-any with no terminal to type the phrase and no --yes: refused
    // before anything is sent.
    let file = b.token_file("bot.token", TOKEN);
    let any = b.refused(&[
        "connector",
        "add",
        "--kind",
        "telegram",
        "--name",
        "Helper",
        "--agent",
        &b.agent,
        "--token-file",
        &file,
        "--accept-any",
    ]);
    assert!(any.contains("confirm it with --yes"), "{any}");
    assert!(b.ok(&["connector", "list"]).starts_with("no connectors"));

    // Added from a token file: its row, its bot, and who may write.
    let out = b.ok(&[
        "connector",
        "add",
        "--kind",
        "telegram",
        "--name",
        "Helper",
        "--agent",
        &b.agent,
        "--token-file",
        &file,
        "--reply-mode",
        "stream",
        "--conversation",
        "window",
        "--window-minutes",
        "30",
    ]);
    let id = added_id(&out);
    let mut lines = out.lines();
    let row = lines.next().unwrap();
    assert!(
        row.starts_with(&format!("added {id}  telegram  Helper  {}  ", b.agent))
            && row.ends_with("  yes"),
        "{out}"
    );
    assert!(
        lines.next().unwrap().starts_with("  bot @ctl_helper_bot ("),
        "{out}"
    );
    assert!(
        lines.next().unwrap().starts_with("  nobody may write yet"),
        "{out}"
    );

    // The list is a table with a header. (connectord says `connected` once
    // its first long poll has come back: `starting` until then.)
    let listed = b.ok(&["connector", "list"]);
    let rows: Vec<&str> = listed.lines().collect();
    assert_eq!(rows.len(), 2, "{listed}");
    let header = rows[0].split_whitespace().collect::<Vec<_>>();
    assert_eq!(header, ["ID", "KIND", "NAME", "AGENT", "STATE", "TOKEN"]);
    let row = rows[1].split_whitespace().collect::<Vec<_>>();
    let state = row[4];
    assert!(matches!(state, "starting" | "connected"), "{listed}");
    assert_eq!(
        row,
        [id.as_str(), "telegram", "Helper", &b.agent, state, "yes"]
    );
    let columns = rows[0].find("STATE").unwrap();
    assert_eq!(rows[1].find(state), Some(columns), "aligned: {listed}");

    let shown = b.ok(&["connector", "show", &id]);
    for want in [
        format!("{id}  Helper\n"),
        "  kind          telegram\n".into(),
        format!("  agent         {}\n", b.agent),
        "  enabled       on\n".into(),
        "  token         set (sealed)\n".into(),
        "  allowlist     (nobody: who writes goes in the sender log)\n".into(),
        "  accept any    no\n".into(),
        "  reply mode    stream\n".into(),
        "  conversation  window (a new chat after 30 minutes of quiet)\n".into(),
    ] {
        assert!(shown.contains(&want), "{want:?} missing from {shown}");
    }
    assert!(
        shown.contains("  bot           @ctl_helper_bot ("),
        "{shown}"
    );
    assert!(
        ["connected", "starting"]
            .iter()
            .any(|s| shown.contains(&format!("  state         {s} since "))),
        "{shown}"
    );

    let tested = b.ok(&["connector", "test", &id]);
    assert!(
        tested.starts_with(&format!("{id}: the token works (bot @ctl_helper_bot (")),
        "{tested}"
    );

    // A revoked token: the platform's refusal in one line, exit 1.
    b.bot.fail_next("getMe", Fault::Unauthorized401);
    let revoked = b.refused(&["connector", "test", &id]);
    assert!(
        revoked.starts_with(&format!("tandem: {id}: the platform refused the token: ")),
        "{revoked}"
    );

    // A stranger writes: in the sender log, then let in.
    assert_eq!(
        b.ok(&["connector", "senders", &id]),
        format!("nobody outside the allowlist has written to {id}\n")
    );
    b.bot.push_private(777, "mallory", "let me in");
    let senders = wait_until("the stranger in the sender log", QUICK, || async {
        let out = b.ok(&["connector", "senders", &id]);
        out.contains("mallory").then_some(out)
    })
    .await
    .unwrap();
    let rows: Vec<Vec<&str>> = senders
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0], ["SENDER", "NAME", "MESSAGES", "LAST"], "{senders}");
    assert_eq!(rows[1][..3], ["777", "mallory", "1"], "{senders}");
    assert_eq!(
        senders.lines().last(),
        Some(format!("let one in: tandem connector allow {id} SENDER").as_str())
    );
    let allowed = b.ok(&["connector", "allow", &id, "777"]);
    assert_eq!(
        allowed,
        format!("777 may write to {id}\n  allowlist  777\n")
    );

    // Set: a PATCH of what is given; the rest stays.
    let set = b.ok(&[
        "connector",
        "set",
        &id,
        "--name",
        "Concierge",
        "--allow",
        "@ann",
        "--allow",
        "42",
    ]);
    assert!(
        set.starts_with(&format!("{id}  telegram  Concierge  ")),
        "{set}"
    );
    let shown = b.ok(&["connector", "show", &id]);
    assert!(shown.contains("  allowlist     @ann, 42\n"), "{shown}");
    assert!(shown.contains("  reply mode    stream\n"), "{shown}");
    // A new token from stdin (`-`): checked and kept, printed nowhere.
    let set = b.tandem_in(
        &["connector", "set", &id, "--token-file", "-"],
        &format!("{TOKEN}\n"),
    );
    assert!(set.status.success(), "{}", text(&set));
    let nothing = b.refused(&["connector", "set", &id]);
    assert!(nothing.contains("nothing to change"), "{nothing}");

    // Off and on.
    let off = b.ok(&["connector", "off", &id]);
    assert!(off.contains("  disabled  "), "{off}");
    let on = b.ok(&["connector", "on", &id]);
    assert!(!on.contains("disabled"), "{on}");

    // Remove: gone; asking for it again is a 404 in one line.
    assert_eq!(b.ok(&["connector", "rm", &id]), format!("removed {id}\n"));
    assert!(b.ok(&["connector", "list"]).starts_with("no connectors"));
    let gone = b.refused(&["connector", "show", &id]);
    assert!(
        gone.starts_with("tandem: ") && gone.ends_with("(not_found, HTTP 404)"),
        "{gone}"
    );

    // The token from stdin, as `pass show … | tandem connector add` gives it.
    let out = b.tandem_in(
        &[
            "connector",
            "add",
            "--kind",
            "telegram",
            "--name",
            "Piped",
            "--agent",
            &b.agent,
            "--allow",
            "@ann",
        ],
        &format!("{TOKEN}\n"),
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("reading the bot token from stdin"),
        "{}",
        text(&out)
    );
    let piped = added_id(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(
        b.ok(&["connector", "rm", &piped]),
        format!("removed {piped}\n")
    );

    // Nothing connectord wrote holds the token in clear either.
    let cd = b.cd.as_ref().unwrap();
    assert!(
        !cd.log().contains(TOKEN),
        "connectord's log holds the token"
    );
    assert!(
        !b.chatd.log().contains(TOKEN),
        "chatd's log holds the token"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slack_app_takes_both_tokens_from_stdin_and_shows_neither() {
    let b = boxed(true).await;
    // Telegram has no app token: a usage fault said before anything is read.
    let app = b.token_file("app.token", APP_TOKEN);
    let refused = b.refused(&[
        "connector",
        "add",
        "--kind",
        "telegram",
        "--name",
        "T",
        "--agent",
        &b.agent,
        "--app-token-file",
        &app,
    ]);
    assert!(
        refused.contains("--app-token-file is for a Slack app"),
        "{refused}"
    );
    // Piped: the bot token, then the app token, one line each.
    let out = b.tandem_in(
        &[
            "connector",
            "add",
            "--kind",
            "slack",
            "--name",
            "Team",
            "--agent",
            &b.agent,
            "--allow",
            "U0ANN",
            "--conversation",
            "thread",
        ],
        &format!("{BOT_TOKEN}\n{APP_TOKEN}\n"),
    );
    assert!(out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("reading the bot token from stdin")
            && err.contains("reading the app token from stdin"),
        "{err}"
    );
    let id = added_id(&String::from_utf8_lossy(&out.stdout));
    let shown = b.ok(&["connector", "show", &id]);
    for want in [
        "  kind          slack\n",
        "  token         set (sealed)\n",
        "  app token     set (sealed)\n",
        "  allowlist     U0ANN\n",
        "  conversation  thread\n",
        "  follow        own\n",
    ] {
        assert!(shown.contains(want), "{want:?} missing from {shown}");
    }
    let listed = b.ok(&["connector", "list"]);
    assert!(
        listed.lines().nth(1).is_some_and(|l| l.ends_with("  yes")),
        "{listed}"
    );
    let set = b.ok(&[
        "connector",
        "set",
        &id,
        "--follow-threads",
        "any",
        "--app-token-file",
        &app,
    ]);
    assert!(set.starts_with(&format!("{id}  slack  Team  ")), "{set}");
    assert!(b
        .ok(&["connector", "show", &id])
        .contains("  follow        any\n"));
    assert_eq!(b.ok(&["connector", "rm", &id]), format!("removed {id}\n"));
}
