//! `tandem` against real daemon processes, without systemd: the process
//! manager (pid files, a new session, logs to files), the watchdog, the
//! `--help` texts, and the units checked by systemd-analyze.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use tandem_tests::harness::{bin_dir, free_port, wait_until, Sim};

/// A box of its own: HOME, runtime folder and chatd port in a temp folder.
struct Box_ {
    dir: tempfile::TempDir,
    port: u16,
    /// egressd's loopback listener.
    egress_port: u16,
    engine: String,
}

impl Box_ {
    fn new(engine: &str) -> Box_ {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("run")).unwrap();
        // hostexecd, started as root, runs commands as `nobody`: its chats'
        // folders must be reachable by that user (0711 on the way down).
        use std::os::unix::fs::PermissionsExt;
        let hx = dir.path().join("hx-chat");
        std::fs::create_dir_all(&hx).unwrap();
        for path in [dir.path(), hx.as_path()] {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o711)).unwrap();
        }
        std::fs::write(
            dir.path().join("tandem.toml"),
            format!("[hostexec]\nchat_data = \"{}\"\n", hx.display()),
        )
        .unwrap();
        Box_ {
            dir,
            port: free_port(),
            egress_port: free_port(),
            engine: engine.to_string(),
        }
    }

    fn home(&self) -> &Path {
        self.dir.path()
    }

    fn tandem(&self, args: &[&str]) -> Output {
        self.tandem_env(args, &[])
    }

    fn tandem_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut command = Command::new(bin_dir().join("tandem"));
        command
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.home())
            .env("XDG_RUNTIME_DIR", self.home().join("run"))
            .env("QSE_ROOT", self.home())
            .env("QSE_CHAT_URL", format!("127.0.0.1:{}", self.port))
            .env(
                "QSE_EGRESS_PROXY",
                format!("127.0.0.1:{}", self.egress_port),
            )
            .env("QSE_ENGINE_URL", &self.engine)
            .env("QSE_TANDEM_MANAGER", "processes");
        command.env("QSE_CONFIG", self.home().join("tandem.toml"));
        // No container runtime: this box's docker or podman is never touched.
        command.env("QSE_SANDBOX_SOCKET", self.home().join("no-runtime.sock"));
        // hostexecd started as root runs commands as an unprivileged user.
        if nix::unistd::geteuid().is_root() {
            command.env("QSE_HOSTEXEC_RUN_AS", "nobody");
        }
        for (k, v) in env {
            command.env(k, v);
        }
        command.output().unwrap()
    }

    fn pid_file(&self) -> PathBuf {
        self.home().join("run/tandem/chatd.pid")
    }

    fn chatd_pid(&self) -> Option<i32> {
        std::fs::read_to_string(self.pid_file())
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    fn health_url(&self) -> String {
        format!("http://127.0.0.1:{}/health", self.port)
    }

    async fn healthy(&self) -> bool {
        reqwest::Client::new()
            .get(self.health_url())
            .timeout(Duration::from_millis(500))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
    }

    fn kill9_chatd(&self) {
        let pid = self.chatd_pid().expect("a pid file");
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        // Reaped by init: wait until /proc says it is gone or a zombie.
        let stat = format!("/proc/{pid}/stat");
        for _ in 0..500 {
            let text = std::fs::read_to_string(&stat).unwrap_or_default();
            if text.is_empty()
                || text
                    .rsplit(')')
                    .next()
                    .is_some_and(|r| r.trim_start().starts_with('Z'))
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("chatd {pid} did not die");
    }

    fn watchdog_log(&self) -> String {
        std::fs::read_to_string(self.home().join(".tandemllm/logs/watchdog.log"))
            .unwrap_or_default()
    }
}

impl Drop for Box_ {
    fn drop(&mut self) {
        let pid_of = |name: &str| -> Option<i32> {
            std::fs::read_to_string(self.home().join(format!("run/tandem/{name}.pid")))
                .ok()
                .and_then(|t| t.trim().parse().ok())
        };
        for pid in [
            self.chatd_pid(),
            pid_of("egressd"),
            pid_of("hostexecd"),
            pid_of("triggerd"),
            pid_of("connectord"),
        ]
        .into_iter()
        .flatten()
        {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_status_logs_restart_stop() {
    let sim = Sim::start(&[]).unwrap();
    let b = Box_::new(&sim.url());

    let started = b.tandem(&["chat", "start"]);
    assert!(started.status.success(), "{}", text(&started));
    assert!(
        text(&started).contains("chatd started: pid"),
        "{}",
        text(&started)
    );
    assert!(b.healthy().await);
    let first_pid = b.chatd_pid().unwrap();
    // egressd, hostexecd, triggerd and connectord too: `tandem status`
    // wants every daemon of this build.
    let egress = b.tandem(&["egress", "start"]);
    assert!(egress.status.success(), "{}", text(&egress));
    let hostexec = b.tandem(&["hostexec", "start"]);
    assert!(hostexec.status.success(), "{}", text(&hostexec));
    let triggers = b.tandem(&["triggers", "start"]);
    assert!(triggers.status.success(), "{}", text(&triggers));
    let socket = b.home().join("run/tandem/triggers.sock");
    assert!(
        text(&triggers).contains("triggerd started: pid "),
        "{}",
        text(&triggers)
    );
    assert!(
        text(&triggers).contains(&format!("unix:{}", socket.display())),
        "{}",
        text(&triggers)
    );

    let connectors = b.tandem(&["connectors", "start"]);
    assert!(connectors.status.success(), "{}", text(&connectors));
    let socket = b.home().join("run/tandem/connectors.sock");
    assert!(
        text(&connectors).contains("connectord started: pid ")
            && text(&connectors).contains(&format!("unix:{}", socket.display())),
        "{}",
        text(&connectors)
    );

    let again = b.tandem(&["chat", "start"]);
    assert!(again.status.success());
    assert!(text(&again).contains("already running"), "{}", text(&again));

    let status = b.tandem(&["status"]);
    assert!(status.status.success(), "{}", text(&status));
    let out = text(&status);
    assert!(
        out.contains(&format!("chatd       running  pid {first_pid}")),
        "{out}"
    );
    assert!(out.contains("engine      reachable"), "{out}");
    assert!(out.contains("egressd     running  pid "), "{out}");
    assert!(out.contains("hostexecd   running  pid "), "{out}");
    assert!(out.contains("triggerd    running  pid "), "{out}");
    assert!(out.contains("connectord  running  pid "), "{out}");
    let triggers_status = b.tandem(&["triggers", "status"]);
    assert!(
        triggers_status.status.success(),
        "{}",
        text(&triggers_status)
    );
    let out = text(&triggers_status);
    for want in [
        "triggerd: running".to_string(),
        format!(
            "data     {}",
            b.home().join(".tandemllm/triggers").display()
        ),
        format!(
            "shared   {}",
            b.home().join(".tandemllm/workspace").display()
        ),
        format!("chatd    http://127.0.0.1:{}", b.port),
        "triggers 0 (0 on), 0 running of 2 at once".to_string(),
        "health   ok".to_string(),
    ] {
        assert!(out.contains(&want), "{want:?} missing from {out}");
    }
    let logs = b.tandem(&["triggers", "logs", "5"]);
    assert!(
        String::from_utf8_lossy(&logs.stdout).contains("triggerd serving"),
        "{}",
        text(&logs)
    );
    let connectors_status = b.tandem(&["connectors", "status"]);
    assert!(
        connectors_status.status.success(),
        "{}",
        text(&connectors_status)
    );
    let out = text(&connectors_status);
    for want in [
        "connectord: running".to_string(),
        format!(
            "data     {}",
            b.home().join(".tandemllm/connectors").display()
        ),
        format!("chatd    http://127.0.0.1:{}", b.port),
        "bindings 0 (0 connected)".to_string(),
        "health   ok".to_string(),
    ] {
        assert!(out.contains(&want), "{want:?} missing from {out}");
    }
    let logs = b.tandem(&["connectors", "logs", "5"]);
    assert!(
        logs.status.success() && !logs.stdout.is_empty(),
        "{}",
        text(&logs)
    );
    let hostexec_status = b.tandem(&["hostexec", "status"]);
    assert!(
        hostexec_status.status.success(),
        "{}",
        text(&hostexec_status)
    );
    assert!(
        text(&hostexec_status).contains("run as   ")
            && text(&hostexec_status)
                .contains("running  0 commands (4 chats at once), 0 MCP servers"),
        "{}",
        text(&hostexec_status)
    );

    let chat_status = b.tandem(&["chat", "status"]);
    assert!(chat_status.status.success());
    let out = text(&chat_status);
    for want in [
        "chatd: running",
        &format!("pid      {first_pid}"),
        "data     ",
        "health   ok (engine reachable)",
        "binary   ",
    ] {
        assert!(out.contains(want), "{want:?} missing from {out}");
    }

    let logs = b.tandem(&["chat", "logs", "5"]);
    assert!(logs.status.success());
    let out = String::from_utf8_lossy(&logs.stdout).to_string();
    assert!(out.lines().count() <= 5 && out.contains("chatd"), "{out}");

    let restarted = b.tandem(&["chat", "restart"]);
    assert!(restarted.status.success(), "{}", text(&restarted));
    let second_pid = b.chatd_pid().unwrap();
    assert_ne!(first_pid, second_pid, "restart makes a new process");
    assert!(b.healthy().await);

    let stopped = b.tandem(&["chat", "stop"]);
    assert!(stopped.status.success());
    assert!(
        text(&stopped).contains("chatd stopped in"),
        "{}",
        text(&stopped)
    );
    assert!(!b.pid_file().exists(), "the pid file goes with the process");
    assert!(!b.healthy().await);

    let status = b.tandem(&["status"]);
    assert_eq!(
        status.status.code(),
        Some(1),
        "status fails when chatd is down"
    );
    assert!(text(&status).contains("chatd       NOT RUNNING"));
    let chat_status = b.tandem(&["chat", "status"]);
    assert_eq!(chat_status.status.code(), Some(1));

    let stopped_again = b.tandem(&["chat", "stop"]);
    assert!(text(&stopped_again).contains("was not running"));

    // The suite verbs name daemons; an unknown one is refused.
    let bad = b.tandem(&["start", "nosuch"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        text(&bad).contains("\"nosuch\" is not a daemon"),
        "{}",
        text(&bad)
    );
    // connectord is part of this build: `tandem connectors start` found it
    // running above, and says so again.
    let again = b.tandem(&["connectors", "start"]);
    assert!(
        again.status.success() && text(&again).contains("connectord is already running"),
        "{}",
        text(&again)
    );
    // A chat's preset through chatd: set, shown under the box's ceiling.
    let chat_started = b.tandem(&["chat", "start"]);
    assert!(chat_started.status.success(), "{}", text(&chat_started));
    let key = std::fs::read_to_string(b.home().join(".tandemllm/chat/forward.key")).unwrap();
    let made: serde_json::Value = reqwest::Client::new()
        .post(format!(
            "http://127.0.0.1:{}/v1/chat-app/conversations",
            b.port
        ))
        .header("x-forward-key", key.trim())
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let chat = made["id"].as_str().unwrap().to_string();
    // Above the box's ceiling: refused, never capped in silence.
    let above = b.tandem(&["chat", "egress", &chat, "all"]);
    assert_eq!(above.status.code(), Some(1), "{}", text(&above));
    assert!(
        text(&above).contains("all is above this box's ceiling (off)"),
        "{}",
        text(&above)
    );
    let set = b.tandem(&["chat", "egress", &chat, "off"]);
    assert!(set.status.success(), "{}", text(&set));
    assert!(
        text(&set).contains(&format!(
            "{chat}: preset off (in force: off, the box's ceiling is off)"
        )),
        "{}",
        text(&set)
    );
    assert!(b
        .home()
        .join(format!(".tandemllm/chat/egress/{chat}/proxy.sock"))
        .exists());
    let shown = b.tandem(&["chat", "egress", &chat]);
    assert!(text(&shown).contains("preset off"), "{}", text(&shown));
    let bad = b.tandem(&["chat", "egress", &chat, "most"]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
    let missing = b.tandem(&["chat", "egress", "c_nothere"]);
    assert_eq!(missing.status.code(), Some(1), "{}", text(&missing));
    assert!(text(&missing).contains("404"), "{}", text(&missing));
    // The chat's files: a file put there by hand is listed as found
    // (`outside`); undone, it is gone; a change set of no chat is refused.
    let workspace = b.home().join(format!(".tandemllm/chat/workspaces/{chat}"));
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(workspace.join("notes.md"), "by hand\n").unwrap();
    let files = b.tandem(&["chat", "files", &chat]);
    assert!(files.status.success(), "{}", text(&files));
    assert!(
        text(&files).contains("notes.md") && text(&files).contains("outside"),
        "{}",
        text(&files)
    );
    // Search: its words found on their line, any case; nothing found
    // exits 1 as grep does; a bad pattern is refused naming the field.
    let found = b.tandem(&["chat", "files", &chat, "search", "BY HAND"]);
    assert!(found.status.success(), "{}", text(&found));
    assert!(
        text(&found).contains("notes.md (line 1): by hand"),
        "{}",
        text(&found)
    );
    let none = b.tandem(&["chat", "files", &chat, "search", "zebra", "--case"]);
    assert_eq!(none.status.code(), Some(1), "{}", text(&none));
    assert!(
        text(&none).contains("nothing matches in 1 file(s)"),
        "{}",
        text(&none)
    );
    let bad = b.tandem(&["chat", "files", &chat, "search", "(", "--regex"]);
    assert_eq!(bad.status.code(), Some(1), "{}", text(&bad));
    assert!(
        text(&bad).contains("q: is not a regular expression"),
        "{}",
        text(&bad)
    );
    // Preview: a table's rows tab-separated; a file of another kind is
    // refused with the kinds a preview takes.
    std::fs::write(workspace.join("costs.csv"), "item,amount\nhosting,42\n").unwrap();
    let shown = b.tandem(&["chat", "files", &chat, "preview", "costs.csv"]);
    assert!(shown.status.success(), "{}", text(&shown));
    assert!(
        text(&shown).contains("item\tamount\nhosting\t42\n"),
        "{}",
        text(&shown)
    );
    let other = b.tandem(&["chat", "files", &chat, "preview", "notes.md"]);
    assert_eq!(other.status.code(), Some(1), "{}", text(&other));
    assert!(
        text(&other).contains("415") && text(&other).contains("previews are made of .xlsx"),
        "{}",
        text(&other)
    );
    std::fs::remove_file(workspace.join("costs.csv")).unwrap();
    let rev = text(&files)
        .lines()
        .find_map(|l| l.trim().strip_prefix("rev "))
        .and_then(|l| l.split_whitespace().next().map(String::from))
        .unwrap();
    let nothing = b.tandem(&["chat", "files", &chat, "undo", "999999"]);
    assert_eq!(nothing.status.code(), Some(1), "{}", text(&nothing));
    assert!(text(&nothing).contains("not_found"), "{}", text(&nothing));
    let undone = b.tandem(&["chat", "files", &chat, "undo", &rev]);
    assert!(undone.status.success(), "{}", text(&undone));
    assert!(
        text(&undone).contains("undone; the undo is change set"),
        "{}",
        text(&undone)
    );
    assert!(!workspace.join("notes.md").exists());
    // The trash: a file deleted, listed, restored, then deleted for good
    // (with notes.md, which the undo above deleted).
    std::fs::write(workspace.join("draft.md"), "a draft\n").unwrap();
    let deleted = b.tandem(&["chat", "files", &chat, "delete", "draft.md"]);
    assert!(deleted.status.success(), "{}", text(&deleted));
    assert!(
        text(&deleted).contains("draft.md: moved to the trash"),
        "{}",
        text(&deleted)
    );
    let trash = b.tandem(&["chat", "files", &chat, "trash"]);
    assert!(
        text(&trash).contains("2 file(s) in the trash") && text(&trash).contains("draft.md"),
        "{}",
        text(&trash)
    );
    let restored = b.tandem(&["chat", "files", &chat, "restore", "draft.md"]);
    assert!(restored.status.success(), "{}", text(&restored));
    assert_eq!(
        std::fs::read_to_string(workspace.join("draft.md")).unwrap(),
        "a draft\n"
    );
    let deleted = b.tandem(&["chat", "files", &chat, "delete", "draft.md"]);
    assert!(deleted.status.success(), "{}", text(&deleted));
    let purged = b.tandem(&["chat", "files", &chat, "purge"]);
    assert!(
        text(&purged).contains("deleted for good: 2 file(s), 16 bytes freed"),
        "{}",
        text(&purged)
    );
    let gone = b.tandem(&["chat", "files", &chat, "restore", "draft.md"]);
    assert_eq!(gone.status.code(), Some(1), "{}", text(&gone));
    // A local file put into the chat's folder; again without --base it is
    // kept beside the first; with the first's rev it replaces it.
    let local = b.home().join("plan.md");
    std::fs::write(&local, "v1\n").unwrap();
    let local = local.to_str().unwrap();
    let put = |extra: &[&str]| {
        let mut args = vec![
            "chat",
            "files",
            &chat,
            "put",
            local,
            "--to",
            "notes/plan.md",
        ];
        args.extend_from_slice(extra);
        b.tandem(&args)
    };
    let put_first = put(&[]);
    assert!(put_first.status.success(), "{}", text(&put_first));
    assert!(
        text(&put_first).contains("notes/plan.md: 3 bytes saved (change set "),
        "{}",
        text(&put_first)
    );
    let first_rev = text(&put_first)
        .rsplit("change set ")
        .next()
        .and_then(|t| t.split(')').next())
        .unwrap()
        .to_string();
    let beside = put(&[]);
    assert!(
        text(&beside).contains(
            "notes/plan.md is there already: yours is saved beside it as notes/plan (2).md"
        ),
        "{}",
        text(&beside)
    );
    std::fs::write(b.home().join("plan.md"), "v2\n").unwrap();
    let replaced = put(&["--base", &first_rev]);
    assert!(replaced.status.success(), "{}", text(&replaced));
    assert_eq!(
        std::fs::read_to_string(workspace.join("notes/plan.md")).unwrap(),
        "v2\n"
    );
    // No runtime: the sandbox command says why.
    let sandbox = b.tandem(&["chat", "sandbox", &chat, "start"]);
    assert_eq!(sandbox.status.code(), Some(1), "{}", text(&sandbox));
    assert!(
        text(&sandbox).contains("503")
            && text(&sandbox).contains("no container runtime answers at"),
        "{}",
        text(&sandbox)
    );
    let chat_stopped = b.tandem(&["chat", "stop"]);
    assert!(chat_stopped.status.success(), "{}", text(&chat_stopped));

    let stopped = b.tandem(&["egress", "stop"]);
    assert!(
        text(&stopped).contains("egressd stopped in"),
        "{}",
        text(&stopped)
    );
    let stopped = b.tandem(&["triggers", "stop"]);
    assert!(
        text(&stopped).contains("triggerd stopped in"),
        "{}",
        text(&stopped)
    );
    assert!(!b.home().join("run/tandem/triggerd.pid").exists());
    let stopped = b.tandem(&["connectors", "stop"]);
    assert!(
        text(&stopped).contains("connectord stopped in"),
        "{}",
        text(&stopped)
    );
    assert!(!b.home().join("run/tandem/connectord.pid").exists());
}

/// `tandem egress start|status|logs|stop` like chatd's, /health asked on
/// egressd's unix socket; `tandem egress rules` prints the nftables JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn egress_service_verbs_and_rules() {
    let b = Box_::new("http://127.0.0.1:9");
    let socket = b.home().join("run/tandem/egress.sock");
    let started = b.tandem(&["egress", "start"]);
    assert!(started.status.success(), "{}", text(&started));
    let out = text(&started);
    assert!(out.contains("egressd started: pid"), "{out}");
    assert!(out.contains(&format!("unix:{}", socket.display())), "{out}");
    let pid: u32 = std::fs::read_to_string(b.home().join("run/tandem/egressd.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let again = b.tandem(&["egress", "start"]);
    assert!(
        text(&again).contains("egressd is already running"),
        "{}",
        text(&again)
    );

    let status = b.tandem(&["egress", "status"]);
    assert!(status.status.success(), "{}", text(&status));
    let out = text(&status);
    for want in [
        "egressd: running".to_string(),
        format!("pid      {pid}"),
        format!("data     {}", b.home().join(".tandemllm/egress").display()),
        "ceiling  off".to_string(),
        format!("proxy    127.0.0.1:{}", b.egress_port),
        format!("url      unix:{}", socket.display()),
        "health   ok".to_string(),
    ] {
        assert!(out.contains(&want), "{want:?} missing from {out}");
    }
    let logs = b.tandem(&["egress", "logs", "5"]);
    assert!(logs.status.success(), "{}", text(&logs));
    assert!(
        String::from_utf8_lossy(&logs.stdout).contains("egressd serving"),
        "{}",
        text(&logs)
    );

    let stopped = b.tandem(&["egress", "stop"]);
    assert!(
        text(&stopped).contains("egressd stopped in"),
        "{}",
        text(&stopped)
    );
    let status = b.tandem(&["egress", "status"]);
    assert_eq!(status.status.code(), Some(1), "{}", text(&status));
    assert!(
        text(&status).contains("egressd: not running"),
        "{}",
        text(&status)
    );

    // The rules: JSON for the named user and the listener's port; a user
    // that does not exist is named.
    let rules = b.tandem(&["egress", "rules", "--user", "nobody"]);
    assert!(rules.status.success(), "{}", text(&rules));
    let json: serde_json::Value = serde_json::from_slice(&rules.stdout).unwrap();
    let added: Vec<&serde_json::Value> = json["nftables"]
        .as_array()
        .expect("an nftables array")
        .iter()
        .filter_map(|o| o.get("add").and_then(|a| a.get("rule")))
        .collect();
    assert_eq!(added.len(), 2, "{json:#}");
    let accept = &added[0]["expr"];
    assert_eq!(accept[0]["match"]["right"], 65534, "nobody's uid: {json:#}");
    assert_eq!(accept[3]["match"]["right"], b.egress_port, "{json:#}");
    assert_eq!(added[1]["expr"][1]["counter"], "sbx_dropped");
    let missing = b.tandem(&["egress", "rules", "--user", "tandem-no-such-user"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        text(&missing).contains("the sandbox user \"tandem-no-such-user\" does not exist"),
        "{}",
        text(&missing)
    );
    let default_user = b.tandem(&["egress", "rules"]);
    if !default_user.status.success() {
        assert!(
            text(&default_user).contains("\"tandem-sbx\""),
            "{}",
            text(&default_user)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_start_fails_with_the_log_tail_when_the_port_is_taken() {
    let sim = Sim::start(&[]).unwrap();
    let b = Box_::new(&sim.url());
    let _taken = std::net::TcpListener::bind(("127.0.0.1", b.port)).unwrap();
    let started = b.tandem(&["chat", "start"]);
    assert_eq!(started.status.code(), Some(1), "{}", text(&started));
    let out = text(&started);
    assert!(out.contains("exited right after starting"), "{out}");
    assert!(out.contains("The log's last lines"), "{out}");
    assert!(
        out.contains(&format!("listening on 127.0.0.1:{}", b.port)),
        "the tail shows why: {out}"
    );
    assert!(
        !b.pid_file().exists()
            || b.chatd_pid()
                .is_none_or(|p| !std::path::Path::new(&format!("/proc/{p}/cmdline")).exists())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_starts_chatd_only_when_the_engine_lives_three_times_an_hour() {
    let mut sim = Sim::start(&[]).unwrap();
    let b = Box_::new(&sim.url());

    // Engine up, chatd down: started.
    let run = b.tandem(&["watchdog"]);
    assert!(run.status.success(), "{}", text(&run));
    assert!(b.healthy().await, "the watchdog started chatd");
    // Up and up: nothing to do.
    let run = b.tandem(&["watchdog"]);
    assert!(run.status.success());
    assert!(b
        .watchdog_log()
        .contains("engine up, chatd up: nothing to do"));

    // Two more deaths: started each time (starts 2 and 3 of the hour).
    for n in 2..=3 {
        b.kill9_chatd();
        let run = b.tandem(&["watchdog"]);
        assert!(run.status.success(), "{}", text(&run));
        assert!(
            b.watchdog_log()
                .contains(&format!("start {n} of 3 this hour")),
            "{}",
            b.watchdog_log()
        );
        assert!(b.healthy().await);
    }
    // The fourth death in the hour: refused, logged, chatd stays down.
    b.kill9_chatd();
    let run = b.tandem(&["watchdog"]);
    assert_eq!(run.status.code(), Some(1));
    assert!(
        b.watchdog_log()
            .contains("NOT starting chatd, 3 starts in the last hour already"),
        "{}",
        b.watchdog_log()
    );
    assert!(!b.healthy().await);

    // QSE_CHATD=off: nothing checked.
    let off = b.tandem_env(&["watchdog"], &[("QSE_CHATD", "off")]);
    assert!(off.status.success());
    assert!(b.watchdog_log().contains("QSE_CHATD=off"));

    // The engine down: nothing started, and the engine is left alone.
    std::fs::remove_file(b.home().join(".tandemllm/watchdog.json")).unwrap();
    sim.kill();
    let run = b.tandem(&["watchdog"]);
    assert!(run.status.success());
    assert!(
        b.watchdog_log()
            .contains("does not answer: nothing started"),
        "{}",
        b.watchdog_log()
    );
    assert!(!b.healthy().await);
    assert!(
        wait_until(
            "nothing to listen on the engine port",
            Duration::from_secs(1),
            || async {
                std::net::TcpStream::connect(("127.0.0.1", sim.port))
                    .is_err()
                    .then_some(())
            }
        )
        .await
        .is_ok(),
        "the watchdog never starts an engine"
    );
}

/// Every command's `--help` is what tests/snapshots/help/ holds. Run with
/// UPDATE_SNAPSHOTS=1 to rewrite them after a deliberate change.
#[test]
fn help_texts_match_their_snapshots() {
    let commands: &[&[&str]] = &[
        &[],
        &["up"],
        &["status"],
        &["start"],
        &["stop"],
        &["restart"],
        &["chat"],
        &["chat", "start"],
        &["chat", "stop"],
        &["chat", "restart"],
        &["chat", "status"],
        &["chat", "logs"],
        &["chat", "send"],
        &["chat", "attach"],
        &["chat", "consent"],
        &["chat", "egress"],
        &["chat", "settings"],
        &["chat", "sandbox"],
        &["chat", "files"],
        &["chat", "subagents"],
        &["chat", "tasks"],
        &["chat", "goal"],
        &["chat", "loop"],
        &["chat", "cancel"],
        &["chat", "continue"],
        &["chat", "tools"],
        &["sandbox"],
        &["sandbox", "build"],
        &["egress"],
        &["egress", "rules"],
        &["triggers"],
        &["trigger"],
        &["trigger", "list"],
        &["trigger", "show"],
        &["trigger", "add"],
        &["trigger", "rm"],
        &["trigger", "on"],
        &["trigger", "off"],
        &["trigger", "run"],
        &["trigger", "runs"],
        &["trigger", "preview"],
        &["connectors"],
        &["connector"],
        &["connector", "list"],
        &["connector", "show"],
        &["connector", "add"],
        &["connector", "rm"],
        &["connector", "test"],
        &["connector", "senders"],
        &["connector", "allow"],
        &["connector", "on"],
        &["connector", "off"],
        &["connector", "set"],
        &["mcp"],
        &["mcp", "list"],
        &["mcp", "add"],
        &["mcp", "test"],
        &["mcp", "on"],
        &["mcp", "off"],
        &["mcp", "rm"],
        &["mcp", "tools"],
        &["agent"],
        &["agent", "list"],
        &["agent", "show"],
        &["agent", "add"],
        &["agent", "edit"],
        &["agent", "export"],
        &["agent", "import"],
        &["agent", "rm"],
        &["agent", "templates"],
        &["watchdog"],
        &["doctor"],
        &["completions"],
        &["man"],
    ];
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("snapshots/help");
    let update = std::env::var_os("UPDATE_SNAPSHOTS").is_some();
    let mut mismatches = Vec::new();
    for args in commands {
        let output = Command::new(bin_dir().join("tandem"))
            .args(*args)
            .arg("--help")
            .output()
            .unwrap();
        assert!(output.status.success(), "tandem {args:?} --help failed");
        let got = String::from_utf8_lossy(&output.stdout).to_string();
        let name = if args.is_empty() {
            "tandem".to_string()
        } else {
            format!("tandem-{}", args.join("-"))
        };
        let path = dir.join(format!("{name}.txt"));
        if update {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &got).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_default();
        if got != want {
            mismatches.push(format!(
                "{}:\n--- want\n{want}\n--- got\n{got}",
                path.display()
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "help texts changed (UPDATE_SNAPSHOTS=1 to accept):\n{}",
        mismatches.join("\n")
    );
}

/// The units pass `systemd-analyze verify`, and chatd's, egressd's,
/// triggerd's and connectord's exposure is 3.0 or lower.
#[test]
fn units_verify_and_are_hardened() {
    let units = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../units");
    let home = tempfile::tempdir().unwrap();
    let runtime = home.path().join("run");
    std::fs::create_dir_all(home.path().join(".local/bin")).unwrap();
    std::fs::create_dir_all(&runtime).unwrap();
    for binary in [
        "chatd",
        "egressd",
        "hostexecd",
        "triggerd",
        "connectord",
        "tandem",
    ] {
        std::fs::copy(
            bin_dir().join(binary),
            home.path().join(".local/bin").join(binary),
        )
        .unwrap();
    }
    let files: Vec<PathBuf> = std::fs::read_dir(&units)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let analyze = |args: &[&str], files: &[PathBuf]| {
        Command::new("systemd-analyze")
            .args(args)
            .args(files)
            .env("HOME", home.path())
            .env("XDG_RUNTIME_DIR", &runtime)
            .output()
            .expect("systemd-analyze is installed (.ci/run installs systemd)")
    };
    let verify = analyze(&["--user", "verify"], &files);
    assert!(
        verify.status.success() && verify.stderr.is_empty(),
        "verify: {}",
        text(&verify)
    );
    let limits = [
        ("tandem-chatd.service", 3.0),
        ("tandem-egress.service", 3.0),
        ("tandem-triggers.service", 3.0),
        ("tandem-connectors.service", 3.0),
    ];
    for (unit, limit) in limits {
        let out = analyze(
            &["security", "--offline=yes", "--user"],
            &[units.join(unit)],
        );
        let report = text(&out);
        let level: f64 = report
            .lines()
            .find_map(|l| l.split("exposure level for ").nth(1))
            .and_then(|rest| rest.split(": ").nth(1))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no exposure level in {report}"));
        assert!(level <= limit, "{unit}: exposure {level} is above {limit}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chatd_started_without_tandem_is_found_and_stopped() {
    let sim = Sim::start(&[]).unwrap();
    let mut chatd = tandem_tests::harness::Chatd::start(&sim.url(), &[])
        .await
        .unwrap();
    let mut b = Box_::new(&sim.url());
    b.port = chatd.port;
    let pid = chatd.pid().unwrap();
    let status = b.tandem(&["chat", "status"]);
    assert!(
        text(&status).contains(&format!("pid      {pid}")),
        "{}",
        text(&status)
    );
    let stopped = b.tandem(&["chat", "stop"]);
    assert!(
        text(&stopped).contains("chatd stopped in"),
        "{}",
        text(&stopped)
    );
    let (_, exit) = chatd
        .sigterm(Duration::from_secs(1))
        .expect("chatd has exited");
    assert!(exit.success(), "it ended by SIGTERM cleanly: {exit}");
}

/// `tandem chat send` streams the answer, rides out a chatd crash by
/// reconnecting with its last seq, and says how the run ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_send_streams_and_rides_out_a_chatd_restart() {
    let sim = Sim::start(&[]).unwrap();
    let mut chatd = tandem_tests::harness::Chatd::start(&sim.url(), &[])
        .await
        .unwrap();
    let mut b = Box_::new(&sim.url());
    b.port = chatd.port;
    let secrets = chatd.dir.path().join("secrets.env");

    // A short answer: streamed whole, exit 0.
    let sent = b.tandem_env(
        &["chat", "send", "hi [sim tokens=5 tps=0 id=cli-1]"],
        &[("QSE_SECRETS", secrets.to_str().unwrap())],
    );
    assert!(sent.status.success(), "{}", text(&sent));
    assert_eq!(
        String::from_utf8_lossy(&sent.stdout).trim_end(),
        tandem_tests::harness::sim_answer(5).trim_end()
    );
    // Its settings from the terminal: set, shown, cleared; a bad one refused.
    let env = [("QSE_SECRETS", secrets.to_str().unwrap())];
    let listed = chatd.client().get("/conversations").await.unwrap();
    let chat = listed.body["conversations"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    // A file sent with a message lands in the chat's uploads/.
    let local = b.home().join("figures.csv");
    std::fs::write(&local, "a,b\n1,2\n").unwrap();
    let with_file = b.tandem_env(
        &[
            "chat",
            "send",
            "read it [sim tokens=3 tps=0 id=cli-file]",
            "--chat",
            &chat,
            "--file",
            local.to_str().unwrap(),
        ],
        &env,
    );
    assert!(with_file.status.success(), "{}", text(&with_file));
    let uploaded = chatd
        .data_dir()
        .join("workspaces")
        .join(&chat)
        .join("uploads/figures.csv");
    assert_eq!(std::fs::read_to_string(uploaded).unwrap(), "a,b\n1,2\n");
    let set = b.tandem_env(
        &[
            "chat",
            "settings",
            &chat,
            "temperature=0.3",
            "reasoning_effort=low",
        ],
        &env,
    );
    assert!(set.status.success(), "{}", text(&set));
    assert!(
        text(&set).contains("temperature       0.3"),
        "{}",
        text(&set)
    );
    let bad = b.tandem_env(&["chat", "settings", &chat, "top_p=2"], &env);
    assert_eq!(bad.status.code(), Some(1), "{}", text(&bad));
    assert!(text(&bad).contains("settings.top_p"), "{}", text(&bad));
    let cleared = b.tandem_env(&["chat", "settings", &chat, "temperature="], &env);
    assert!(
        !text(&cleared).contains("temperature"),
        "{}",
        text(&cleared)
    );
    assert!(
        text(&cleared).contains("reasoning_effort  low"),
        "{}",
        text(&cleared)
    );
    let defaults = b.tandem_env(&["chat", "settings", "defaults", "max_tokens=77"], &env);
    assert!(defaults.status.success(), "{}", text(&defaults));
    let caps = chatd.client().get("/capabilities").await.unwrap();
    assert_eq!(caps.body["defaults"]["settings"]["max_tokens"], 77);

    // The chat it made is named after the message, not left untitled.
    let listed = chatd.client().get("/conversations").await.unwrap();
    assert_eq!(
        listed.body["conversations"][0]["title"], "hi [sim tokens=5 tps=0 id=cli-1]",
        "{listed:?}"
    );

    // A long one, with chatd killed and started again in the middle.
    let child = std::process::Command::new(bin_dir().join("tandem"))
        .args(["chat", "send", "long [sim tokens=400 tps=40 id=cli-2]"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", b.home())
        .env("QSE_ROOT", b.home())
        .env("QSE_CHAT_URL", format!("127.0.0.1:{}", b.port))
        .env("QSE_SECRETS", &secrets)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let client = chatd.client();
    wait_until(
        "the answer to be streaming",
        Duration::from_secs(10),
        || async {
            let list = client.get("/conversations").await.ok()?;
            let id = list.body["conversations"]
                .as_array()?
                .iter()
                .find(|c| c["state"] == "running")?["id"]
                .as_str()?
                .to_string();
            let snapshot = client.snapshot(&id).await.ok()?;
            (snapshot["messages"].as_array()?.last()?["text"]
                .as_str()?
                .len()
                > 20)
                .then_some(())
        },
    )
    .await
    .unwrap();
    chatd.restart().await.unwrap();
    let output = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let err = String::from_utf8_lossy(&output.stderr).to_string();
    assert_eq!(
        output.status.code(),
        Some(1),
        "the run did not end done: {err}"
    );
    assert!(err.contains("reconnected after event"), "{err}");
    assert!(err.contains("run interrupted"), "{err}");
    let printed = String::from_utf8_lossy(&output.stdout)
        .trim_end()
        .to_string();
    assert!(
        tandem_tests::harness::sim_answer(400).starts_with(&printed),
        "printed text is the answer's start: {printed:?}"
    );
}

/// `tandem chat send` shows a card with the command that answers it, and
/// `tandem chat consent` lets the run go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_consent_answers_a_card_from_the_terminal() {
    let sim = Sim::start(&["--tokens-per-second", "0"]).unwrap();
    let chatd = tandem_tests::harness::Chatd::start(&sim.url(), &[])
        .await
        .unwrap();
    let mut b = Box_::new(&sim.url());
    b.port = chatd.port;
    let secrets = chatd.dir.path().join("secrets.env");
    let client = chatd.client();
    // `send` prints each tool call and the card's answer command.
    let made = client
        .post(
            "/conversations",
            serde_json::json!({"permission_mode": "ask"}),
        )
        .await
        .unwrap();
    let chat = made.body["id"].as_str().unwrap().to_string();
    sim.faults(serde_json::json!([
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "a.txt", "content": "hi"}}]},
        {"tokens": 3},
    ]))
    .await
    .unwrap();
    let child = std::process::Command::new(bin_dir().join("tandem"))
        .args(["chat", "send", "write it", "--chat", &chat])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", b.home())
        .env("QSE_ROOT", b.home())
        .env("QSE_CHAT_URL", format!("127.0.0.1:{}", b.port))
        .env("QSE_SECRETS", &secrets)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let card = wait_until("a consent card", Duration::from_secs(20), || async {
        let snapshot = client.snapshot(&chat).await.ok()?;
        snapshot["consents"].as_array()?.first()?["card_id"]
            .as_str()
            .map(str::to_string)
    })
    .await
    .unwrap();
    let answered = b.tandem_env(
        &["chat", "consent", &chat, &card, "once"],
        &[("QSE_SECRETS", secrets.to_str().unwrap())],
    );
    assert!(answered.status.success(), "{}", text(&answered));
    let output = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let err = String::from_utf8_lossy(&output.stderr).to_string();
    assert!(output.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "answer with: tandem chat consent {chat} {card} once|always|deny"
        )),
        "{err}"
    );
    assert!(err.contains("> write_file a.txt"), "{err}");
    assert!(chatd
        .data_dir()
        .join("workspaces")
        .join(&chat)
        .join("a.txt")
        .exists());
    // A wrong answer is refused by the command line itself.
    let bad = b.tandem(&["chat", "consent", &chat, &card, "maybe"]);
    assert!(!bad.status.success());
}

/// `tandem chat subagents`: a chat whose model starts a slow sub-agent in
/// the background lists it running, shows its task, stops it once (a second
/// stop exits 1 naming why), and `send` says it started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tandem_chat_subagents_lists_shows_and_stops() {
    let sim = Sim::start(&[]).unwrap();
    let chatd = tandem_tests::harness::Chatd::start(&sim.url(), &[])
        .await
        .unwrap();
    let mut b = Box_::new(&sim.url());
    b.port = chatd.port;
    let secrets = chatd.dir.path().join("secrets.env");
    let env = [("QSE_SECRETS", secrets.to_str().unwrap())];
    let client = chatd.client();
    let chat = client.create_chat().await.unwrap();
    // This chat's next answer starts the sub-agent; the task's cue keeps it
    // answering slowly (far longer than the test) until it is stopped.
    let task = "Count the words in notes.md [sim tokens=400 tps=2]";
    sim.post(
        "/sim/faults",
        serde_json::json!({"session": format!("chat-{chat}"), "next": [
            {"tool_calls": [{"name": "spawn_agent", "arguments": {"task": task, "wait": false}}]},
        ]}),
    )
    .await
    .unwrap();
    let sent = b.tandem_env(
        &[
            "chat",
            "send",
            "Ask a helper [sim tokens=3 tps=0]",
            "--chat",
            &chat,
        ],
        &env,
    );
    let said = text(&sent);
    assert!(sent.status.success(), "{said}");
    assert!(said.contains("started (background)"), "{said}");
    assert!(
        said.contains("1 sub-agent(s) still work in the background"),
        "{said}"
    );

    // Listed running in the background.
    let listed = b.tandem_env(&["chat", "subagents", &chat], &env);
    let list = text(&listed);
    assert!(listed.status.success(), "{list}");
    let row = list
        .lines()
        .find(|l| l.contains("Count the words"))
        .unwrap_or_else(|| panic!("no row: {list}"))
        .to_string();
    let sub = row.split_whitespace().next().unwrap().to_string();
    assert!(
        said.contains(&format!("tandem: sub-agent {sub} «")),
        "{said}"
    );
    assert!(row.contains(" running ") && row.contains(" bg "), "{list}");
    assert!(
        list.contains("1 running in the background (at most 4)"),
        "{list}"
    );

    // Its transcript starts with the task.
    let shown = b.tandem_env(&["chat", "subagents", &chat, &sub], &env);
    let show = text(&shown);
    assert!(shown.status.success(), "{show}");
    assert!(show.contains(&format!("sub-agent {sub} «")), "{show}");
    assert!(show.contains(": running (in the background)"), "{show}");
    assert!(show.contains(&format!("[user]\n{task}")), "{show}");

    // Not another chat's to stop.
    let other = client.create_chat().await.unwrap();
    let elsewhere = b.tandem_env(&["chat", "subagents", &other, &sub, "--stop"], &env);
    assert_eq!(elsewhere.status.code(), Some(1), "{}", text(&elsewhere));

    // Stopped once; the list says so; a second stop is refused.
    let stopped = b.tandem_env(&["chat", "subagents", &chat, &sub, "--stop"], &env);
    assert!(stopped.status.success(), "{}", text(&stopped));
    assert!(
        text(&stopped).contains(&format!("sub-agent {sub}: ")),
        "{}",
        text(&stopped)
    );
    wait_until(
        "the list to show it stopped",
        Duration::from_secs(20),
        || async {
            let listed = b.tandem_env(&["chat", "subagents", &chat], &env);
            let list = text(&listed);
            list.lines()
                .any(|l| l.starts_with(&sub) && l.contains(" stopped "))
                .then_some(())
        },
    )
    .await
    .unwrap();
    let again = b.tandem_env(&["chat", "subagents", &chat, &sub, "--stop"], &env);
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    assert!(text(&again).contains("not running"), "{}", text(&again));
    // --stop needs an id.
    let bare = b.tandem_env(&["chat", "subagents", &chat, "--stop"], &env);
    assert!(!bare.status.success(), "{}", text(&bare));
}

/// Agents mode from the terminal: `chat settings CHAT agents=on` switches
/// it on; a slow worker is stopped with its chat by `chat cancel`;
/// `chat continue` resumes the worker, then the chat, and prints the task's
/// lines; `chat tasks` lists it done and shows its report with chatd's
/// check; a second `continue` exits 1 naming why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tandem_chat_agents_mode_cancel_continue_and_tasks() {
    let sim = Sim::start(&["--tokens-per-second", "0"]).unwrap();
    let chatd = tandem_tests::harness::Chatd::start(&sim.url(), &[])
        .await
        .unwrap();
    let mut b = Box_::new(&sim.url());
    b.port = chatd.port;
    let secrets = chatd.dir.path().join("secrets.env");
    let env = [("QSE_SECRETS", secrets.to_str().unwrap())];
    let client = chatd.client();
    let chat = client.create_chat_in("auto").await.unwrap();
    let on = b.tandem_env(&["chat", "settings", &chat, "agents=on"], &env);
    assert!(on.status.success(), "{}", text(&on));
    assert!(text(&on).contains("agents"), "{}", text(&on));
    let brief = "Goal: a clock\nFiles: clock.html\nConstraints: none\nCheck: npm test";
    let post = |session: String, next: serde_json::Value| {
        sim.post(
            "/sim/faults",
            serde_json::json!({"session": session, "next": next}),
        )
    };
    post(
        format!("chat-{chat}"),
        serde_json::json!([
            {"tool_calls": [{"name": "task", "arguments": {"title": "Clock", "brief": brief, "expect": "the files"}}]},
            {"text": "The clock is built."},
        ]),
    )
    .await
    .unwrap();
    post(
        format!("chat-{chat}-task-1"),
        serde_json::json!([{"tokens": 4000, "tps": 20}]),
    )
    .await
    .unwrap();
    client.send(&chat, "Build a clock").await.unwrap();
    wait_until("the worker to start", Duration::from_secs(60), || async {
        let listed = b.tandem_env(&["chat", "tasks", &chat], &env);
        text(&listed).contains(" running ").then_some(())
    })
    .await
    .unwrap();
    let cancelled = b.tandem_env(&["chat", "cancel", &chat], &env);
    assert!(cancelled.status.success(), "{}", text(&cancelled));
    wait_until("the chat to stop", Duration::from_secs(60), || async {
        let snapshot = client.snapshot(&chat).await.ok()?;
        let last = snapshot["runs"].as_array()?.last()?.clone();
        (last["status"] == "stopped").then_some(())
    })
    .await
    .unwrap();

    let held = b.tandem_env(&["chat", "tasks", &chat], &env);
    assert!(
        text(&held).contains("  1  held     Clock"),
        "{}",
        text(&held)
    );
    post(
        format!("chat-{chat}-task-1"),
        serde_json::json!([{"text": "## Report\nStatus: done\nSummary: a clock\nFiles: none\nChecks:\n- `npm test`: passed\nOpen: none"}]),
    )
    .await
    .unwrap();
    let resumed = b.tandem_env(&["chat", "continue", &chat], &env);
    let said = text(&resumed);
    assert!(resumed.status.success(), "{said}");
    assert!(said.contains("The clock is built."), "{said}");
    assert!(
        said.contains("tandem: task 1 done (its report: tandem chat tasks"),
        "{said}"
    );

    let listed = b.tandem_env(&["chat", "tasks", &chat], &env);
    let list = text(&listed);
    assert!(list.contains("  1  done     Clock"), "{list}");
    let id = list.split_whitespace().last().unwrap().to_string();
    let shown = b.tandem_env(&["chat", "tasks", &chat, &id], &env);
    let show = text(&shown);
    assert!(show.contains("task 1 «Clock»: done"), "{show}");
    assert!(show.contains("## chatd's check"), "{show}");
    assert!(show.contains("- unverified: `npm test`: passed"), "{show}");
    assert!(show.contains("the worker's transcript:"), "{show}");

    let again = b.tandem_env(&["chat", "continue", &chat], &env);
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    assert!(
        text(&again).contains("not interrupted, paused or stopped"),
        "{}",
        text(&again)
    );
}

/// `tandem chat goal`: a goal set from the terminal goes on by itself and
/// ends done, shown with the model's summary and evidence; another is
/// paused, resumed and cleared, each with its line, and a change its state
/// does not allow exits 1 with chatd's reason; an empty goal is refused
/// naming `text`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tandem_chat_goal_sets_shows_pauses_resumes_and_clears() {
    let sim = Sim::start(&["--tokens-per-second", "0"]).unwrap();
    let chatd = tandem_tests::harness::Chatd::start(&sim.url(), &[])
        .await
        .unwrap();
    let mut b = Box_::new(&sim.url());
    b.port = chatd.port;
    let secrets = chatd.dir.path().join("secrets.env");
    let env = [("QSE_SECRETS", secrets.to_str().unwrap())];
    let client = chatd.client();
    let script = |chat: &str, next: serde_json::Value| {
        sim.post(
            "/sim/faults",
            serde_json::json!({"session": format!("chat-{chat}"), "next": next}),
        )
    };
    let goal = |chat: &str, args: &[&str]| {
        let mut all = vec!["chat", "goal", chat];
        all.extend_from_slice(args);
        b.tandem_env(&all, &env)
    };

    // Its first turn ends the goal done, with a summary and evidence.
    let chat = client.create_chat_in("auto").await.unwrap();
    script(
        &chat,
        serde_json::json!([
            {"tool_calls": [{"name": "goal_done", "arguments":
                {"summary": "notes.md holds the summary", "evidence": ["notes.md"]}}]},
            {"text": "Done: notes.md holds it."},
        ]),
    )
    .await
    .unwrap();
    // `/help` sent as a message is the registry's answer, printed.
    let help = b.tandem_env(&["chat", "send", "/help", "--chat", &chat], &env);
    assert!(help.status.success(), "{}", text(&help));
    assert!(text(&help).contains("/goal"), "{}", text(&help));
    assert!(text(&help).contains("/loop"), "{}", text(&help));
    let none = goal(&chat, &[]);
    assert!(none.status.success(), "{}", text(&none));
    assert!(
        text(&none).contains("this chat has no goal"),
        "{}",
        text(&none)
    );
    let set = goal(&chat, &["set", "Summarise", "the", "notes"]);
    assert!(set.status.success(), "{}", text(&set));
    assert!(
        text(&set).contains("goal set; its first turn started (run r_"),
        "{}",
        text(&set)
    );
    let shown = wait_until("the goal to be done", Duration::from_secs(60), || async {
        let shown = goal(&chat, &[]);
        let out = text(&shown);
        (shown.status.success() && out.contains("state: done")).then_some(out)
    })
    .await
    .unwrap();
    assert!(shown.starts_with("goal: Summarise the notes\n"), "{shown}");
    assert!(
        shown.contains("state: done · turn 1 of 20 · 1 of 400 model calls"),
        "{shown}"
    );
    assert!(
        shown.contains("summary: notes.md holds the summary"),
        "{shown}"
    );
    assert!(shown.contains("evidence:\n  - notes.md\n"), "{shown}");
    // A done goal is replaced, not resumed.
    let resumed = goal(&chat, &["resume"]);
    assert_eq!(resumed.status.code(), Some(1), "{}", text(&resumed));
    assert!(text(&resumed).contains("goal_state"), "{}", text(&resumed));

    // Another goal's turn answers slowly (longer than the test): it runs
    // while the goal is paused, resumed and cleared.
    let other = client.create_chat_in("auto").await.unwrap();
    script(&other, serde_json::json!([{"tokens": 4000, "tps": 20}]))
        .await
        .unwrap();
    let set = goal(&other, &["set", "Count", "the", "words"]);
    assert!(set.status.success(), "{}", text(&set));
    assert!(
        text(&set).contains("its first turn started (run r_"),
        "{}",
        text(&set)
    );
    let shown = goal(&other, &[]);
    assert!(
        text(&shown).contains("state: active · turn 1 of 20"),
        "{}",
        text(&shown)
    );
    let paused = goal(&other, &["pause"]);
    assert!(paused.status.success(), "{}", text(&paused));
    assert!(
        text(&paused).starts_with("goal paused;"),
        "{}",
        text(&paused)
    );
    let shown = text(&goal(&other, &[]));
    assert!(shown.contains("state: paused"), "{shown}");
    assert!(shown.contains("paused by: user"), "{shown}");
    assert!(
        shown.contains(&format!("tandem chat goal {other} resume")),
        "{shown}"
    );
    let again = goal(&other, &["pause"]);
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    assert!(
        text(&again).contains("the goal is paused, not active"),
        "{}",
        text(&again)
    );
    // The slow turn still runs: the resumed goal's next turn follows it.
    let resumed = goal(&other, &["resume"]);
    assert!(resumed.status.success(), "{}", text(&resumed));
    assert!(
        text(&resumed)
            .contains("goal resumed with new counts; its next turn follows the turn that runs now"),
        "{}",
        text(&resumed)
    );
    assert!(
        text(&goal(&other, &[])).contains("state: active · turn 0 of 20 · 0 of 400"),
        "new counts"
    );
    let cleared = goal(&other, &["clear"]);
    assert!(cleared.status.success(), "{}", text(&cleared));
    assert!(
        text(&cleared).starts_with("goal cleared"),
        "{}",
        text(&cleared)
    );
    assert!(text(&goal(&other, &[])).contains("this chat has no goal"));
    let gone = goal(&other, &["clear"]);
    assert_eq!(gone.status.code(), Some(1), "{}", text(&gone));

    // An empty goal is chatd's to refuse, naming the field.
    for empty in [&["set", "  "][..], &["set"][..]] {
        let refused = goal(&other, empty);
        assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
        assert!(
            text(&refused).contains("text: the goal is empty"),
            "{}",
            text(&refused)
        );
    }
    // Words go only with `set`.
    let stray = goal(&other, &["pause", "now"]);
    assert!(!stray.status.success(), "{}", text(&stray));
}

/// `tandem chat loop`: the chat's first loop, said yes to with --yes, runs
/// once at once (chatd's loop clock is held still, so never again), is
/// paused and resumed by the start of its id; a second, self-paced loop
/// starts without asking; `stop --all` removes both. Without --yes and
/// without a terminal a first loop waits pending until `resume`. A bad
/// interval exits 1 with chatd's reason naming `interval`; an id no loop
/// has exits 1 saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tandem_chat_loop_starts_lists_pauses_resumes_and_stops() {
    let sim = Sim::start(&["--tokens-per-second", "0"]).unwrap();
    let clock_dir = tempfile::tempdir().unwrap();
    let clock = clock_dir.path().join("clock");
    tandem_tests::harness::set_clock_file(&clock, "2026-12-07T10:00:00Z").unwrap();
    let clock = clock.to_str().unwrap().to_string();
    let chatd = tandem_tests::harness::Chatd::start(&sim.url(), &[("QSE_CHAT_CLOCK_FILE", &clock)])
        .await
        .unwrap();
    let mut b = Box_::new(&sim.url());
    b.port = chatd.port;
    let secrets = chatd.dir.path().join("secrets.env");
    let env = [("QSE_SECRETS", secrets.to_str().unwrap())];
    let client = chatd.client();
    let lp = |chat: &str, args: &[&str]| {
        let mut all = vec!["chat", "loop", chat];
        all.extend_from_slice(args);
        b.tandem_env(&all, &env)
    };
    // The short id the line on stdout names after `loop `.
    let id_in = |out: &Output| -> String {
        String::from_utf8_lossy(&out.stdout)
            .strip_prefix("loop ")
            .and_then(|rest| rest.split([' ', ',']).next())
            .unwrap_or("")
            .to_string()
    };

    let chat = client.create_chat().await.unwrap();
    let none = lp(&chat, &[]);
    assert!(none.status.success(), "{}", text(&none));
    assert!(
        text(&none).contains("this chat has no loops (start one: "),
        "{}",
        text(&none)
    );

    // The chat's first loop: the yes is asked and given with --yes.
    let started = lp(
        &chat,
        &["start", "--every", "1m", "--yes", "Check", "the", "build"],
    );
    let said = text(&started);
    assert!(started.status.success(), "{said}");
    assert!(
        said.contains("Run this every 1m until you stop it? Each run costs tokens. yes (--yes)"),
        "{said}"
    );
    assert!(
        said.contains("started, every 1m: its first run is due now"),
        "{said}"
    );
    let a = id_in(&started);
    assert!(a.starts_with("l_"), "{said}");

    // Its first run is due at once; the still clock never brings a second.
    let listed = wait_until("the loop's first run", Duration::from_secs(60), || async {
        let listed = lp(&chat, &[]);
        let out = text(&listed);
        (listed.status.success() && out.contains("active · run 1 of 100 · next ")).then_some(out)
    })
    .await
    .unwrap();
    assert!(
        listed.starts_with(&format!("{a}  every 1m · active · run 1 of 100 · next ")),
        "{listed}"
    );
    assert!(listed.contains("«Check the build»"), "{listed}");

    // Paused and resumed by the start of its id.
    let prefix = &a[..6];
    let paused = lp(&chat, &["pause", prefix]);
    assert!(paused.status.success(), "{}", text(&paused));
    assert!(
        text(&paused).contains(&format!("loop {a} paused")),
        "{}",
        text(&paused)
    );
    let listed = text(&lp(&chat, &[]));
    assert!(
        listed.contains("every 1m · paused · run 1 of 100"),
        "{listed}"
    );
    assert!(listed.contains("paused by you"), "{listed}");
    let again = lp(&chat, &["pause", &a]);
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    assert!(text(&again).contains("loop_state"), "{}", text(&again));
    let resumed = lp(&chat, &["resume", prefix]);
    assert!(resumed.status.success(), "{}", text(&resumed));
    assert!(
        text(&resumed).contains(&format!("loop {a} resumed, every 1m")),
        "{}",
        text(&resumed)
    );

    // The chat said yes once: a second loop starts without asking.
    let second = lp(&chat, &["start", "Watch", "the", "deploy"]);
    let said = text(&second);
    assert!(second.status.success(), "{said}");
    assert!(!said.contains("Run this"), "{said}");
    assert!(said.contains("started, self-paced"), "{said}");
    let listed = text(&lp(&chat, &[]));
    assert_eq!(listed.lines().count(), 2, "{listed}");
    assert!(listed.contains("  self-paced · "), "{listed}");
    assert!(listed.contains("«Watch the deploy»"), "{listed}");

    // An id no loop has, and words where none go.
    let unknown = lp(&chat, &["stop", "l_zz"]);
    assert_eq!(unknown.status.code(), Some(1), "{}", text(&unknown));
    assert!(
        text(&unknown).contains("no loop of this chat has an id starting with `l_zz`"),
        "{}",
        text(&unknown)
    );
    let stray = lp(&chat, &["stop", "--all", &a]);
    assert_eq!(stray.status.code(), Some(1), "{}", text(&stray));

    let stopped = lp(&chat, &["stop", "--all"]);
    assert!(stopped.status.success(), "{}", text(&stopped));
    assert!(
        text(&stopped).contains("2 loops stopped and removed"),
        "{}",
        text(&stopped)
    );
    assert!(text(&lp(&chat, &[])).contains("this chat has no loops"));

    // chatd's refusal names the field.
    let bad = lp(&chat, &["start", "--every", "10s", "Check"]);
    assert_eq!(bad.status.code(), Some(1), "{}", text(&bad));
    assert!(
        text(&bad).contains("interval: 10 seconds is outside 60 seconds to 24h"),
        "{}",
        text(&bad)
    );

    // Another chat's first loop, without --yes and with no terminal,
    // waits pending; `resume` is the yes.
    let other = client.create_chat().await.unwrap();
    let waiting = lp(&other, &["start", "--every", "1h", "Ping"]);
    let said = text(&waiting);
    assert!(waiting.status.success(), "{said}");
    assert!(said.contains("it waits for your yes"), "{said}");
    let c = id_in(&waiting);
    let listed = text(&lp(&other, &[]));
    assert!(
        listed.contains("every 1h · pending · run 0 of 100"),
        "{listed}"
    );
    assert!(
        listed.contains(&format!(
            "a pending loop waits for your yes: tandem chat loop {other} resume {c}"
        )),
        "{listed}"
    );
    let yes = lp(&other, &["resume", &c]);
    assert!(yes.status.success(), "{}", text(&yes));
    assert!(
        text(&yes).contains(&format!("loop {c} confirmed, every 1h")),
        "{}",
        text(&yes)
    );
    let gone = lp(&other, &["stop", &c]);
    assert!(gone.status.success(), "{}", text(&gone));
    assert!(
        text(&gone).contains(&format!("loop {c} stopped and removed")),
        "{}",
        text(&gone)
    );
}

/// `tandem chat tools CHAT --saved-agents on|off` switches the opt-in and
/// prints the chat's tools with it; `tandem chat send '/agent NAME task'`
/// asks for the agent (refused, exit 1, while the switch is off), and
/// `--agent NAME` on a new chat switches it on first; the sub-agent runs
/// as that agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tandem_chat_tools_switches_saved_agents_and_send_asks_for_one() {
    let sim = Sim::start(&[]).unwrap();
    let chatd = tandem_tests::harness::Chatd::start(&sim.url(), &[])
        .await
        .unwrap();
    let mut b = Box_::new(&sim.url());
    b.port = chatd.port;
    let secrets = chatd.dir.path().join("secrets.env");
    let env = [("QSE_SECRETS", secrets.to_str().unwrap())];
    let client = chatd.client();
    let made = client
        .post("/agents", serde_json::json!({"name": "Reviewer"}))
        .await
        .unwrap();
    assert_eq!(made.status, 201, "{made:?}");
    let chat = client.create_chat().await.unwrap();

    let refused = b.tandem_env(
        &["chat", "send", "/agent Reviewer check it", "--chat", &chat],
        &env,
    );
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    assert!(
        text(&refused).contains("saved agents are switched off"),
        "{}",
        text(&refused)
    );
    let shown = b.tandem_env(&["chat", "tools", &chat], &env);
    let out = text(&shown);
    assert!(shown.status.success(), "{out}");
    assert!(
        out.lines()
            .any(|l| l.contains("saved_agents") && l.contains(" off")),
        "{out}"
    );
    let on = b.tandem_env(&["chat", "tools", &chat, "--saved-agents", "on"], &env);
    let out = text(&on);
    assert!(on.status.success(), "{out}");
    assert!(
        out.lines()
            .any(|l| l.contains("saved_agents") && l.trim_end().ends_with("on")),
        "{out}"
    );
    assert!(out.contains("list_agents"), "{out}");

    // A new chat with --agent: switched on, the model's call runs as it.
    sim.post(
        "/sim/faults",
        serde_json::json!({"next": [
            {"tool_calls": [{"name": "spawn_agent", "arguments": {"task": "check it [sim tokens=3]", "agent": "Reviewer"}}]},
        ]}),
    )
    .await
    .unwrap();
    let sent = b.tandem_env(&["chat", "send", "check it", "--agent", "reviewer"], &env);
    let said = text(&sent);
    assert!(sent.status.success(), "{said}");
    assert!(said.contains("saved agents on for"), "{said}");
    assert!(said.contains("«Reviewer: check it"), "{said}");
}

/// `tandem skill`: one of the owner's added from a file (its front matter
/// taken off) is listed in front of the built-in ones and shown; a bad
/// name exits 1 naming the field; `off --chat` switches one off for that
/// chat only, `on --all` undoes it; a message `/review …` sent from the
/// terminal runs with it; `rm` moves it to the trash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tandem_skill_adds_lists_shows_switches_and_removes() {
    let sim = Sim::start(&["--tokens-per-second", "0"]).unwrap();
    let chatd = tandem_tests::harness::Chatd::start(&sim.url(), &[])
        .await
        .unwrap();
    let mut b = Box_::new(&sim.url());
    b.port = chatd.port;
    let secrets = chatd.dir.path().join("secrets.env");
    let env = [("QSE_SECRETS", secrets.to_str().unwrap())];
    let client = chatd.client();
    let file = chatd.dir.path().join("review.md");
    std::fs::write(
        &file,
        "---\nname: old\ndescription: old\n---\nRead the diff.\nSay what you find.\n",
    )
    .unwrap();

    let added = b.tandem_env(
        &[
            "skill",
            "add",
            "review",
            "--description",
            "Check a change before it ships",
            "--file",
            file.to_str().unwrap(),
        ],
        &env,
    );
    assert!(added.status.success(), "{}", text(&added));
    assert!(
        text(&added).contains("added review (owner layer)"),
        "{}",
        text(&added)
    );
    let bad = b.tandem_env(
        &[
            "skill",
            "add",
            "Bad Name",
            "--description",
            "d",
            "--file",
            file.to_str().unwrap(),
        ],
        &env,
    );
    assert_eq!(bad.status.code(), Some(1), "{}", text(&bad));
    assert!(text(&bad).contains("a-z 0-9"), "{}", text(&bad));

    let listed = b.tandem_env(&["skill", "list"], &env);
    let out = text(&listed);
    assert!(listed.status.success(), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("review") && l.contains("owner") && l.contains("on")),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("pdf") && l.contains("builtin") && l.contains("[exec]")),
        "{out}"
    );
    let shown = b.tandem_env(&["skill", "show", "review"], &env);
    let out = text(&shown);
    assert!(
        out.contains("review (owner layer)") && out.contains("Read the diff.\nSay what you find."),
        "{out}"
    );
    assert!(
        !out.contains("name: old"),
        "the file's front matter is not the procedure: {out}"
    );

    let chat = client.create_chat().await.unwrap();
    let off = b.tandem_env(&["skill", "off", "review", "pdf", "--chat", &chat], &env);
    let out = text(&off);
    assert!(off.status.success(), "{out}");
    assert!(
        out.contains("4 of 6 skills on") && out.contains("off: pdf, review"),
        "{out}"
    );
    let refused = b.tandem_env(&["chat", "send", "/review the diff", "--chat", &chat], &env);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    assert!(
        text(&refused).contains("switched off for this chat")
            && text(&refused).contains("nothing was sent"),
        "{}",
        text(&refused)
    );
    let stored = client.snapshot(&chat).await.unwrap();
    assert!(
        stored["messages"].as_array().is_none_or(Vec::is_empty),
        "{stored}"
    );
    let on = b.tandem_env(&["skill", "on", "--all", "--chat", &chat], &env);
    assert!(text(&on).contains("6 of 6 skills on"), "{}", text(&on));
    let sent = b.tandem_env(&["chat", "send", "/review the diff", "--chat", &chat], &env);
    assert!(sent.status.success(), "{}", text(&sent));
    let snapshot = client.snapshot(&chat).await.unwrap();
    let invoked: Vec<&serde_json::Value> = snapshot["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["invoked"]["name"] == "review")
        .collect();
    assert_eq!(invoked.len(), 1, "{snapshot}");
    assert_eq!(invoked[0]["text"], "the diff");

    let removed = b.tandem_env(&["skill", "rm", "review"], &env);
    assert!(removed.status.success(), "{}", text(&removed));
    let gone = b.tandem_env(&["skill", "show", "review"], &env);
    assert_eq!(gone.status.code(), Some(1), "{}", text(&gone));
}

/// `tandem agent`: an agent added with two tools is listed; an edit of its
/// model keeps everything else; its file is written 0600 and never over an
/// existing one without --force; imported again it is "Reviewer (2)", with
/// the unknown model said in a warning; `show` prints its instructions and
/// run history; a template makes "Code reviewer" with no tool; `rm` by name
/// removes it; an unknown name exits 1 naming the agents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tandem_agent_adds_lists_edits_exports_imports_and_removes() {
    use std::os::unix::fs::PermissionsExt;
    let sim = Sim::start(&[]).unwrap();
    let chatd = tandem_tests::harness::Chatd::start(&sim.url(), &[])
        .await
        .unwrap();
    let mut b = Box_::new(&sim.url());
    b.port = chatd.port;
    let secrets = chatd.dir.path().join("secrets.env");
    let env = [("QSE_SECRETS", secrets.to_str().unwrap())];
    let client = chatd.client();
    let agent_of = |id: String| {
        let client = client.clone();
        async move {
            let got = client.get(&format!("/agents/{id}")).await.unwrap();
            assert_eq!(got.status, 200, "{got:?}");
            got.body
        }
    };

    let added = b.tandem_env(
        &[
            "agent",
            "add",
            "--name",
            "Reviewer",
            "--description",
            "Reviews code for bugs",
            "--instructions",
            "Look for bugs.\nSay where each one is.",
            "--tool",
            "read_file",
            "--tool",
            "grep",
        ],
        &env,
    );
    let out = text(&added);
    assert!(added.status.success(), "{out}");
    assert!(out.starts_with("added a_"), "{out}");
    let id = out.split_whitespace().nth(1).unwrap().to_string();

    let listed = b.tandem_env(&["agent", "list"], &env);
    let list = text(&listed);
    assert!(listed.status.success(), "{list}");
    assert!(list.starts_with("ID"), "{list}");
    let row = list
        .lines()
        .find(|l| l.starts_with(&id))
        .unwrap_or_else(|| panic!("no row for {id}: {list}"));
    for want in [
        "Reviewer",
        "default",
        "read_file, grep",
        "Reviews code for bugs",
    ] {
        assert!(row.contains(want), "{want:?} missing from {row}");
    }

    // Only the model changes: the tools and the description stay.
    let edited = b.tandem_env(&["agent", "edit", "reviewer", "--model", "m-x"], &env);
    assert!(edited.status.success(), "{}", text(&edited));
    let agent = agent_of(id.clone()).await;
    assert_eq!(agent["model"], "m-x", "{agent}");
    assert_eq!(agent["tools"], serde_json::json!(["read_file", "grep"]));
    assert_eq!(agent["description"], "Reviews code for bugs");
    assert_eq!(
        agent["instructions"],
        "Look for bugs.\nSay where each one is."
    );

    // The file: JSON of kind tandem-agent, readable by its owner alone.
    let file = b.home().join("reviewer.agent.json");
    let exported = b.tandem_env(
        &["agent", "export", &id, "--out", file.to_str().unwrap()],
        &env,
    );
    assert!(exported.status.success(), "{}", text(&exported));
    let written = std::fs::read_to_string(&file).unwrap();
    let parsed: serde_json::Value = serde_json::from_str(&written).unwrap();
    assert_eq!(parsed["kind"], "tandem-agent", "{written}");
    assert_eq!(parsed["model"], "m-x", "{written}");
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");

    // Imported: a name of its own, the model the sim lacks dropped.
    let imported = b.tandem_env(&["agent", "import", file.to_str().unwrap()], &env);
    let said = String::from_utf8_lossy(&imported.stdout).to_string();
    let warned = String::from_utf8_lossy(&imported.stderr).to_string();
    assert!(imported.status.success(), "{said}{warned}");
    assert!(
        said.starts_with("imported a_") && said.trim_end().ends_with("Reviewer (2)"),
        "{said}"
    );
    assert!(
        warned
            .lines()
            .any(|l| l.starts_with("tandem: warning: ") && l.contains("\"m-x\"")),
        "{warned}"
    );
    let copy = said.split_whitespace().nth(1).unwrap().to_string();
    let copied = agent_of(copy).await;
    assert_eq!(copied["name"], "Reviewer (2)");
    assert_eq!(copied["model"], "");
    assert_eq!(copied["tools"], serde_json::json!(["read_file", "grep"]));

    // Its instructions whole, and the chat made with it in its history.
    let chat = client
        .post(
            "/conversations",
            serde_json::json!({"agent_id": id, "origin": "trigger"}),
        )
        .await
        .unwrap();
    assert_eq!(chat.status, 201, "{chat:?}");
    let chat = chat.body["id"].as_str().unwrap().to_string();
    let shown = b.tandem_env(&["agent", "show", "Reviewer"], &env);
    let show = text(&shown);
    assert!(shown.status.success(), "{show}");
    assert!(
        show.contains("    Look for bugs.\n    Say where each one is.\n"),
        "{show}"
    );
    assert!(show.contains("read_file, grep"), "{show}");
    assert!(
        show.contains("run history: 1 chat, 0 running, 0 failed"),
        "{show}"
    );
    assert!(
        show.lines()
            .any(|l| l.contains(&chat) && l.contains("trigger")),
        "{show}"
    );

    // A template: its name, no tool.
    let from = b.tandem_env(&["agent", "add", "--template", "reviewer"], &env);
    let out = text(&from);
    assert!(from.status.success(), "{out}");
    assert!(out.contains("Code reviewer"), "{out}");
    let template = out.split_whitespace().nth(1).unwrap().to_string();
    let made = agent_of(template.clone()).await;
    assert_eq!(made["name"], "Code reviewer");
    assert_eq!(made["tools"], serde_json::json!([]));

    // rm by name, in any case.
    let removed = b.tandem_env(&["agent", "rm", "code REVIEWER"], &env);
    assert!(removed.status.success(), "{}", text(&removed));
    let gone = client.get(&format!("/agents/{template}")).await.unwrap();
    assert_eq!(gone.status, 404, "{gone:?}");

    // An unknown name: exit 1, the agents named.
    let unknown = b.tandem_env(&["agent", "show", "Nobody"], &env);
    assert_eq!(unknown.status.code(), Some(1), "{}", text(&unknown));
    assert!(
        text(&unknown).contains("\"Nobody\"") && text(&unknown).contains("Reviewer, Reviewer (2)"),
        "{}",
        text(&unknown)
    );

    // An existing file is kept without --force, replaced with it.
    std::fs::write(&file, "mine\n").unwrap();
    let refused = b.tandem_env(
        &["agent", "export", &id, "--out", file.to_str().unwrap()],
        &env,
    );
    assert!(!refused.status.success(), "{}", text(&refused));
    assert!(text(&refused).contains("--force"), "{}", text(&refused));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine\n");
    let forced = b.tandem_env(
        &[
            "agent",
            "export",
            &id,
            "--out",
            file.to_str().unwrap(),
            "--force",
        ],
        &env,
    );
    assert!(forced.status.success(), "{}", text(&forced));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), written);
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
}

/// `tandem agent … --folder`: an agent added with a folder keeps to it (read
/// by default) and the list and `show` say so; `--folder-mode` alone keeps
/// the path and changes the mode; an edit without a folder flag keeps the
/// folder (even a missing one); `--folder` moves it in the mode it had;
/// a missing folder is said in the list and `show`, and `tandem chat send`
/// to a chat of it prints chatd's 409 sentence; `--no-folder` clears it; a
/// folder chatd refuses is named by its field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tandem_agent_keeps_to_a_folder_and_edits_or_clears_it() {
    let sim = Sim::start(&[]).unwrap();
    let chatd = tandem_tests::harness::Chatd::start(&sim.url(), &[])
        .await
        .unwrap();
    let mut b = Box_::new(&sim.url());
    b.port = chatd.port;
    let secrets = chatd.dir.path().join("secrets.env");
    let env = [("QSE_SECRETS", secrets.to_str().unwrap())];
    let client = chatd.client();
    let agent_of = |id: String| {
        let client = client.clone();
        async move {
            let got = client.get(&format!("/agents/{id}")).await.unwrap();
            assert_eq!(got.status, 200, "{got:?}");
            got.body
        }
    };
    let row_of = |id: &str| {
        let listed = b.tandem_env(&["agent", "list"], &env);
        let list = text(&listed);
        assert!(listed.status.success(), "{list}");
        assert!(list.lines().next().unwrap().contains(" FOLDER "), "{list}");
        list.lines()
            .find(|l| l.starts_with(id))
            .unwrap_or_else(|| panic!("no row for {id}: {list}"))
            .to_string()
    };
    let notes = b.home().join("notes");
    let papers = b.home().join("papers");
    std::fs::create_dir_all(&notes).unwrap();
    std::fs::create_dir_all(&papers).unwrap();
    let notes = std::fs::canonicalize(&notes).unwrap();
    let papers = std::fs::canonicalize(&papers).unwrap();
    let (notes_s, papers_s) = (notes.to_str().unwrap(), papers.to_str().unwrap());

    // Added with a folder: read only unless said.
    let added = b.tandem_env(
        &["agent", "add", "--name", "Clerk", "--folder", notes_s],
        &env,
    );
    let out = text(&added);
    assert!(added.status.success(), "{out}");
    assert!(
        out.contains(&format!("folder: {notes_s}, read only (ok)")),
        "{out}"
    );
    let id = out.split_whitespace().nth(1).unwrap().to_string();
    let agent = agent_of(id.clone()).await;
    assert_eq!(agent["folder"]["path"], notes_s, "{agent}");
    assert_eq!(agent["folder"]["mode"], "read", "{agent}");
    assert_eq!(agent["folder"]["state"], "ok", "{agent}");
    let row = row_of(&id);
    assert!(row.contains(&format!("{notes_s} (read)")), "{row}");

    // --folder-mode alone: the same folder, written to now.
    let edited = b.tandem_env(&["agent", "edit", "clerk", "--folder-mode", "write"], &env);
    let out = text(&edited);
    assert!(edited.status.success(), "{out}");
    assert!(out.contains(": folder"), "{out}");
    let agent = agent_of(id.clone()).await;
    assert_eq!(agent["folder"]["path"], notes_s, "{agent}");
    assert_eq!(agent["folder"]["mode"], "write", "{agent}");

    // No folder flag: the folder stays as it is.
    let edited = b.tandem_env(
        &[
            "agent",
            "edit",
            &id,
            "--model",
            "m-x",
            "--description",
            "Files papers",
        ],
        &env,
    );
    assert!(edited.status.success(), "{}", text(&edited));
    let agent = agent_of(id.clone()).await;
    assert_eq!(agent["model"], "m-x", "{agent}");
    assert_eq!(
        agent["folder"],
        serde_json::json!({"path": notes_s, "name": "notes", "mode": "write", "state": "ok"}),
        "{agent}"
    );

    // --folder: another folder, in the mode it had.
    let moved = b.tandem_env(&["agent", "edit", "Clerk", "--folder", papers_s], &env);
    let out = text(&moved);
    assert!(moved.status.success(), "{out}");
    assert!(
        out.contains(&format!("folder: {papers_s}, read and write (ok)")),
        "{out}"
    );
    let agent = agent_of(id.clone()).await;
    assert_eq!(agent["folder"]["path"], papers_s, "{agent}");
    assert_eq!(agent["folder"]["mode"], "write", "{agent}");
    let shown = b.tandem_env(&["agent", "show", "Clerk"], &env);
    let show = text(&shown);
    assert!(shown.status.success(), "{show}");
    assert!(
        show.contains(&format!("  folder       {papers_s}, read and write (ok)\n")),
        "{show}"
    );

    // Its folder gone: said in the list and `show`; a message to a chat of
    // it is refused with chatd's sentence; an edit of something else keeps
    // it, and --folder-mode alone is refused.
    let chat = client
        .post("/conversations", serde_json::json!({"agent_id": id}))
        .await
        .unwrap();
    assert_eq!(chat.status, 201, "{chat:?}");
    let chat = chat.body["id"].as_str().unwrap().to_string();
    let away = b.home().join("papers-away");
    std::fs::rename(&papers, &away).unwrap();
    let row = row_of(&id);
    assert!(
        row.contains(&format!("missing: {papers_s} (write)")),
        "{row}"
    );
    let shown = b.tandem_env(&["agent", "show", &id], &env);
    let show = text(&shown);
    assert!(
        show.contains(&format!(
            "  folder       {papers_s}, read and write (missing: "
        )),
        "{show}"
    );
    let sent = b.tandem_env(&["chat", "send", "hello", "--chat", &chat], &env);
    let said = text(&sent);
    assert_eq!(sent.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!(
            "tandem: the folder agent \"Clerk\" keeps to ({papers_s}) is missing"
        )) && said.contains("(agent_folder_missing, HTTP 409)"),
        "{said}"
    );
    let edited = b.tandem_env(
        &["agent", "edit", "Clerk", "--instructions", "File them."],
        &env,
    );
    assert!(edited.status.success(), "{}", text(&edited));
    let agent = agent_of(id.clone()).await;
    assert_eq!(agent["instructions"], "File them.", "{agent}");
    assert_eq!(agent["folder"]["path"], papers_s, "{agent}");
    assert_eq!(agent["folder"]["state"], "missing", "{agent}");
    let refused = b.tandem_env(&["agent", "edit", "Clerk", "--folder-mode", "read"], &env);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    assert!(text(&refused).contains("is missing"), "{}", text(&refused));
    std::fs::rename(&away, &papers).unwrap();

    // --no-folder: none any more.
    let cleared = b.tandem_env(&["agent", "edit", "Clerk", "--no-folder"], &env);
    assert!(cleared.status.success(), "{}", text(&cleared));
    let agent = agent_of(id.clone()).await;
    assert_eq!(agent["folder"], serde_json::Value::Null, "{agent}");
    assert_eq!(agent["instructions"], "File them.", "{agent}");
    let row = row_of(&id);
    assert!(!row.contains(papers_s), "{row}");
    assert!(row.contains(" -  ") || row.ends_with(" -"), "{row}");
    let shown = b.tandem_env(&["agent", "show", &id], &env);
    assert!(
        text(&shown).contains("  folder       none"),
        "{}",
        text(&shown)
    );
    // --folder-mode alone on an agent without a folder: refused, nothing sent.
    let refused = b.tandem_env(&["agent", "edit", "Clerk", "--folder-mode", "write"], &env);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    assert!(
        text(&refused).contains("keeps to no folder"),
        "{}",
        text(&refused)
    );
    assert_eq!(
        agent_of(id.clone()).await["folder"],
        serde_json::Value::Null
    );

    // A folder chatd refuses: its field named, nothing saved; --folder-mode
    // without --folder on add is a usage error.
    let gone = b.home().join("nowhere");
    let bad = b.tandem_env(
        &[
            "agent",
            "add",
            "--name",
            "Lost",
            "--folder",
            gone.to_str().unwrap(),
        ],
        &env,
    );
    assert_eq!(bad.status.code(), Some(1), "{}", text(&bad));
    assert!(
        text(&bad).contains("folder.path") && text(&bad).contains("bad_input"),
        "{}",
        text(&bad)
    );
    let usage = b.tandem_env(
        &["agent", "add", "--name", "Lost", "--folder-mode", "write"],
        &env,
    );
    assert_eq!(usage.status.code(), Some(2), "{}", text(&usage));
    let listed = client.get("/agents").await.unwrap();
    assert_eq!(
        listed.body["agents"].as_array().map(Vec::len),
        Some(1),
        "{listed:?}"
    );

    // Its network: set by add, kept by an edit that does not name it.
    let netted = b.tandem_env(
        &[
            "agent",
            "add",
            "--name",
            "Fetcher",
            "--network",
            "registries",
        ],
        &env,
    );
    assert!(netted.status.success(), "{}", text(&netted));
    let edited = b.tandem_env(
        &["agent", "edit", "Fetcher", "--description", "fetches"],
        &env,
    );
    assert!(edited.status.success(), "{}", text(&edited));
    let listed = client.get("/agents").await.unwrap();
    let fetcher = listed.body["agents"]
        .as_array()
        .and_then(|a| a.iter().find(|a| a["name"] == "Fetcher"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        (&fetcher["network"], &fetcher["description"]),
        (
            &serde_json::json!("registries"),
            &serde_json::json!("fetches")
        ),
        "{fetcher}"
    );
    let shown = b.tandem_env(&["agent", "show", "Fetcher"], &env);
    assert!(text(&shown).contains("registries"), "{}", text(&shown));
}

/// `tandem chat start --front ADDR`: chatd serves the page there, the address
/// is kept in run/local.env for later starts, `--front off` takes it away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_start_front_serves_the_page_and_keeps_the_address() {
    let sim = Sim::start(&[]).unwrap();
    let b = Box_::new(&sim.url());
    let secrets = b.home().join("TandemLLM/state/secrets.env");
    std::fs::create_dir_all(secrets.parent().unwrap()).unwrap();
    tandem_tests::harness::write_private(
        &secrets,
        "QSE_FORWARD_KEY=0123456789abcdef0123456789abcdef\nQSE_ADMIN_TOKEN=front-admin-token\n",
    )
    .unwrap();
    let local_env = b.home().join("run/local.env");
    std::fs::write(&local_env, "QSE_CHAT_MAX_RUNS=2\n").unwrap();
    let front_port = free_port();
    let front = format!("127.0.0.1:{front_port}");
    let client = reqwest::Client::new();

    let started = b.tandem(&["chat", "start", "--front", &front]);
    assert!(started.status.success(), "{}", text(&started));
    assert!(
        text(&started).contains(&format!(
            "the chat page: http://{front}/ (sign in with the admin token)"
        )),
        "{}",
        text(&started)
    );
    let env = std::fs::read_to_string(&local_env).unwrap();
    assert_eq!(
        env,
        format!("QSE_CHAT_MAX_RUNS=2\nQSE_CHAT_FRONT={front}\n")
    );
    let page = client.get(format!("http://{front}/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .contains("script-src 'self'"));
    let api = client
        .get(format!("http://{front}/v1/chat-app/conversations"))
        .send()
        .await
        .unwrap();
    assert_eq!(api.status(), 401);
    assert_eq!(
        api.json::<serde_json::Value>().await.unwrap()["error"]["type"],
        "signed_out"
    );
    let status = b.tandem(&["chat", "status"]);
    assert!(
        text(&status).contains(&format!("front    http://{front}/")),
        "{}",
        text(&status)
    );

    // A bad address changes nothing.
    let bad = b.tandem(&["chat", "start", "--front", "somewhere"]);
    assert!(!bad.status.success());
    assert!(
        text(&bad).contains("--front: \"somewhere\" is not an address"),
        "{}",
        text(&bad)
    );
    assert_eq!(std::fs::read_to_string(&local_env).unwrap(), env);
    let not_chatd = b.tandem(&["triggers", "start", "--front", &front]);
    assert!(!not_chatd.status.success());
    assert!(
        text(&not_chatd).contains("--front is chatd's"),
        "{}",
        text(&not_chatd)
    );

    // Off: chatd restarts without a front; the line goes, the rest stays.
    let off = b.tandem(&["chat", "start", "--front", "off"]);
    assert!(off.status.success(), "{}", text(&off));
    assert!(
        text(&off).contains("chatd restarts to take the new front"),
        "{}",
        text(&off)
    );
    assert_eq!(
        std::fs::read_to_string(&local_env).unwrap(),
        "QSE_CHAT_MAX_RUNS=2\n"
    );
    assert!(b.healthy().await);
    assert!(client
        .get(format!("http://{front}/"))
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .is_err());

    // A front from tandem.toml: `off` has to be said in local.env to win.
    let toml = b.home().join("tandem.toml");
    let mut config = std::fs::read_to_string(&toml).unwrap();
    config.push_str(&format!("\n[chatd]\nfront = \"{front}\"\n"));
    std::fs::write(&toml, config).unwrap();
    let restarted = b.tandem(&["chat", "restart"]);
    assert!(restarted.status.success(), "{}", text(&restarted));
    assert_eq!(
        client
            .get(format!("http://{front}/"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let off = b.tandem(&["chat", "start", "--front", "off"]);
    assert!(off.status.success(), "{}", text(&off));
    assert_eq!(
        std::fs::read_to_string(&local_env).unwrap(),
        "QSE_CHAT_MAX_RUNS=2\nQSE_CHAT_FRONT=off\n"
    );
    assert!(client
        .get(format!("http://{front}/"))
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .is_err());
    let stopped = b.tandem(&["chat", "stop"]);
    assert!(stopped.status.success(), "{}", text(&stopped));
}

/// The operator script passes every argument on to `tandem chat`
/// (`ops/chatd.sh start --front ADDR` works), and refuses other verbs.
#[test]
fn ops_chatd_sh_passes_every_argument_on() {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../ops/chatd.sh");
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = |args: &[&str]| {
        Command::new("bash")
            .arg(&script)
            .args(args)
            .env("PATH", &path)
            .output()
            .unwrap()
    };
    let help = run(&["start", "--help"]);
    assert!(help.status.success(), "{}", text(&help));
    assert!(text(&help).contains("--front <ADDR>"), "{}", text(&help));
    let logs = run(&["logs", "--help"]);
    assert!(logs.status.success(), "{}", text(&logs));
    let bad = run(&["explode"]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
    assert!(text(&bad).contains("usage: chatd.sh"), "{}", text(&bad));
}
